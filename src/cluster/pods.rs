//! The `cluster-pods` thread: the pods the API server binds to this node,
//! listed and watched as the kubelet's reflector does
//! (`fieldSelector=spec.nodeName=NAME`, the only list the Node authorizer
//! allows a node), resumed from the last `resourceVersion`; a 410 (the
//! version is too old) means one new list.
//!
//! Each pod is read as [`crate::model::manifest::from_api`] reads it: a pod
//! podwarden can run goes to the agent through [`Sources::set_api`], with
//! the static pods, after every change; a pod it cannot run (a field it
//! does not implement) is left for `cluster::status` to mark Failed; a
//! mirror pod (`kubernetes.io/config.mirror`) is this node's picture of a
//! static pod and never runs. The API's view (each pod's status, whether it
//! is being deleted) is kept in [`View`] for `cluster::status`.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use super::Shared;
use crate::agent::Parts;
use crate::agent::source::Sources;
use crate::model::Pod;
use crate::telemetry::events::{EventType, ObjectRef};

/// The reason of a pod podwarden cannot run (its event; Failed with it).
pub const REASON_UNSUPPORTED: &str = "UnsupportedPodSpec";
/// The annotation that makes a pod a mirror pod (its value: the static
/// pod's hash).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// What a pod from the API is to this node.
#[derive(Clone)]
pub enum Kind {
    /// A pod to run.
    Run(Arc<Pod>),
    /// A pod podwarden cannot run: why (a field error naming the field).
    Refused(String),
    /// A mirror pod: the hash of the static pod it shows.
    Mirror(String),
}

/// A pod as the API server last showed it.
#[derive(Clone)]
pub struct ApiPod {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    /// `status` as the API has it (shared: a status pass copies the view).
    pub status: Arc<Value>,
    /// It carries a `deletionTimestamp`.
    pub deleted: bool,
    pub kind: Kind,
}

impl View {
    /// Listed once and connected since the link last came back.
    pub fn fresh_and_synced(&self) -> bool {
        self.synced && self.fresh
    }
}

impl ApiPod {
    /// The pod's path in the API.
    pub fn path(&self) -> String {
        format!("/api/v1/namespaces/{}/pods/{}", self.namespace, self.name)
    }
}

/// The API's pods bound to this node, by UID.
#[derive(Default)]
pub struct View {
    pub pods: BTreeMap<String, ApiPod>,
    /// The first list has come.
    pub synced: bool,
    /// The reflector is connected since the link last came back: the
    /// statuses are compared with what the API has now, not before.
    pub fresh: bool,
}

/// The `cluster-pods` thread's loop; returns when `shared` stops.
pub fn run(parts: Parts, shared: Arc<Shared>, sources: Arc<Sources>, objects: Arc<super::objects::Objects>) {
    let collection = format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{}", parts.node_name);
    let mut store =
        PodStore { parts: &parts, shared: &shared, sources: &sources, objects: &objects, told: HashSet::new() };
    super::reflector::Reflector { what: "the node's pods", collection: &collection }.run(&shared, &mut store, &|| true);
}

/// The reflector's store of the node's pods: the view, and the agent told
/// of every settled change.
struct PodStore<'a> {
    parts: &'a Parts,
    shared: &'a Shared,
    sources: &'a Sources,
    objects: &'a Arc<super::objects::Objects>,
    /// Refused pods already told in an event.
    told: HashSet<String>,
}

impl super::reflector::Store for PodStore<'_> {
    fn replace(&mut self, items: Vec<Value>) {
        let mut view = self.shared.view.lock();
        let mut fresh: BTreeMap<String, ApiPod> =
            items.into_iter().filter_map(read).map(|p| (p.uid.clone(), p)).collect();
        // an unchanged pod keeps its Arc: the agent sees no change
        for (uid, p) in fresh.iter_mut() {
            reuse(view.pods.get(uid), p);
        }
        log::info!("cluster: listed the node's pods ({} bound to the node)", fresh.len());
        view.pods = fresh;
        view.synced = true;
    }

    fn upsert(&mut self, object: Value) {
        if let Some(mut p) = read(object) {
            let mut view = self.shared.view.lock();
            reuse(view.pods.get(&p.uid), &mut p);
            view.pods.insert(p.uid.clone(), p);
        }
    }

    fn delete(&mut self, object: Value) {
        if let Some(uid) = object["metadata"]["uid"].as_str() {
            self.shared.view.lock().pods.remove(uid);
        }
    }

    fn connected(&mut self) {
        self.shared.view.lock().fresh = true;
    }

    fn settled(&mut self) {
        publish(self.parts, self.shared, self.sources, self.objects, &mut self.told);
    }
}

/// An API pod read: `None` when it has no UID or name (not a pod).
fn read(mut object: Value) -> Option<ApiPod> {
    let uid = object["metadata"]["uid"].as_str()?.to_string();
    let name = object["metadata"]["name"].as_str()?.to_string();
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
    let deleted = !object["metadata"]["deletionTimestamp"].is_null();
    let status = object["status"].take();
    // a list's items carry no kind: the API's pods are pods
    if let Some(o) = object.as_object_mut() {
        o.entry("kind").or_insert_with(|| "Pod".into());
        o.entry("apiVersion").or_insert_with(|| "v1".into());
    }
    let kind = match object["metadata"]["annotations"][MIRROR_ANNOTATION].as_str() {
        Some(hash) => Kind::Mirror(hash.to_string()),
        None => match crate::model::manifest::from_api(object) {
            Ok(pod) => Kind::Run(Arc::new(pod)),
            Err(e) => Kind::Refused(e.to_string()),
        },
    };
    Some(ApiPod { uid, name, namespace, status: Arc::new(status), deleted, kind })
}

/// Keep the old `Arc` of a pod whose content did not change.
fn reuse(old: Option<&ApiPod>, new: &mut ApiPod) {
    if let (Some(ApiPod { kind: Kind::Run(old), .. }), Kind::Run(p)) = (old, &mut new.kind)
        && **old == **p
    {
        *p = old.clone();
    }
}

/// The view's runnable pods to the agent; a pod refused for the first
/// time is said in a warning event on it.
fn publish(
    parts: &Parts,
    shared: &Shared,
    sources: &Sources,
    objects: &Arc<super::objects::Objects>,
    told: &mut HashSet<String>,
) {
    let mut run = Vec::new();
    {
        let view = shared.view.lock();
        told.retain(|uid| view.pods.contains_key(uid));
        for p in view.pods.values() {
            match &p.kind {
                Kind::Run(pod) => run.push(pod.clone()),
                Kind::Refused(why) if told.insert(p.uid.clone()) => {
                    log::warn!("cluster: pod {}/{} {}: cannot run it: {why}", p.namespace, p.name, p.uid);
                    let obj = ObjectRef {
                        kind: "Pod".into(),
                        namespace: p.namespace.clone(),
                        name: p.name.clone(),
                        uid: p.uid.clone(),
                        field_path: String::new(),
                    };
                    parts.events.event(&obj, EventType::Warning, REASON_UNSUPPORTED, why);
                }
                _ => {}
            }
        }
    }
    // the objects the pods use watched (a new pod waits for its own as
    // the kubelet does: CreateContainerConfigError or FailedMount until
    // they come, then a sync at once)
    objects.want(run.iter().flat_map(|p| crate::model::objects::references(p)).collect());
    // the record: what runs if the node starts while the API is away
    // (written when the pods changed, not for a status)
    let mut last = shared.recorded.lock();
    let same = last.len() == run.len() && last.iter().zip(&run).all(|(a, b)| Arc::ptr_eq(a, b));
    if !same {
        match shared.record.save_pods(&run) {
            Ok(()) => *last = run.clone(),
            Err(e) => shared.record_failed("its pods", &e),
        }
    }
    drop(last);
    sources.set_api(run);
    crate::base::changes::bump();
}

/// At the start, before any call to the API: the pods of the node's
/// record (what the API last bound to it), with the objects and tokens
/// they use, go to the agent at once, so a node started while its control
/// plane is away runs them; the API's first list replaces them. A record
/// that cannot be read is said (log, a warning event on the node) and not
/// used.
pub fn start_from_record(
    parts: &Parts,
    shared: &Shared,
    sources: &Sources,
    objects: &Arc<super::objects::Objects>,
    tokens: &super::tokens::Tokens,
) {
    let node = ObjectRef::node(&parts.node_name);
    let rec = match shared.record.load_pods() {
        Ok(Some(r)) => r,
        Ok(None) => return,
        Err(e) => {
            log::error!("cluster: the node's record is not used: {e}");
            parts.events.event(
                &node,
                EventType::Warning,
                "ClusterRecordUnusable",
                &format!("The node's record of its pods is not used: {e}"),
            );
            return;
        }
    };
    let pods: Vec<Arc<Pod>> = rec.pods.into_iter().map(Arc::new).collect();
    let keys: std::collections::BTreeSet<_> = pods.iter().flat_map(|p| crate::model::objects::references(p)).collect();
    let (found, bad) = shared.record.load_objects(keys.iter().cloned());
    for e in &bad {
        log::error!("cluster: a recorded object is not used: {e}");
        parts.events.event(
            &node,
            EventType::Warning,
            "ClusterRecordUnusable",
            &format!("A recorded object is not used: {e}"),
        );
    }
    let n_objects = found.len();
    objects.load(found);
    objects.want(keys);
    tokens.load_record();
    log::info!(
        "cluster: {} pod(s) and {n_objects} object(s) from the node's record of {} run until the API server's list",
        pods.len(),
        super::record::when(rec.written)
    );
    *shared.from_record.lock() = Some((rec.written, pods.len()));
    *shared.recorded.lock() = pods.clone();
    sources.set_api(pods);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_listed_pod_without_kind_runs() {
        // a list's items carry no kind or apiVersion
        let item = json!({"metadata": {"name": "a", "namespace": "n", "uid": "u1"},
            "spec": {"nodeName": "node", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending"}});
        let p = read(item).unwrap();
        assert!(
            matches!(p.kind, Kind::Run(_)),
            "{}",
            match &p.kind {
                Kind::Refused(why) => why.as_str(),
                _ => "",
            }
        );
        assert_eq!(p.status["phase"], "Pending");
    }
}

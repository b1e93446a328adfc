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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{ClusterError, Shared};
use crate::agent::Parts;
use crate::agent::source::Sources;
use crate::model::Pod;
use crate::telemetry::events::{EventType, ObjectRef};

/// The reason of a pod podwarden cannot run (its event; Failed with it).
pub const REASON_UNSUPPORTED: &str = "UnsupportedPodSpec";
/// The annotation that makes a pod a mirror pod (its value: the static
/// pod's hash).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// A watch is asked to end after 5 to 10 minutes (the reflector's range),
/// then resumed from its last version.
const WATCH_MIN: u64 = 300;
/// The longest a watch may stay silent beyond its own timeout.
const WATCH_SLACK: Duration = Duration::from_secs(30);

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
    /// `status` as the API has it.
    pub status: Value,
    /// It carries a `deletionTimestamp`.
    pub deleted: bool,
    pub kind: Kind,
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
}

/// The `cluster-pods` thread's loop; returns when `shared` stops.
pub fn run(parts: Parts, shared: Arc<Shared>, sources: Arc<Sources>, objects: Arc<super::objects::Objects>) {
    let mut failures = 0u32;
    let mut refused_told = std::collections::HashSet::new();
    let logged = crate::base::logging::RateLimit::new(Duration::from_secs(60));
    let mut resume: Option<String> = None;
    loop {
        let Some(client) = shared.client() else {
            if !shared.pause(Duration::from_secs(1)) {
                return;
            }
            continue;
        };
        let step = match &resume {
            None => list(&parts, &shared, &sources, &objects, &client, &mut refused_told).map(Some),
            Some(rv) => watch(&parts, &shared, &sources, &objects, &client, rv, &mut refused_told),
        };
        match step {
            Ok(next) => {
                failures = 0;
                resume = next;
            }
            Err(e) => {
                failures += 1;
                if logged.allow().is_some() || failures == 1 {
                    log::error!("cluster: the node's pods: {e} (attempt {failures}; retrying with back-off)");
                }
                if !shared.pause(super::node::backoff(failures)) {
                    return;
                }
            }
        }
        if shared.stopped() {
            return;
        }
    }
}

fn selector(parts: &Parts) -> String {
    format!("fieldSelector=spec.nodeName%3D{}", parts.node_name)
}

/// One list: the view replaced; the version to watch from.
fn list(
    parts: &Parts,
    shared: &Shared,
    sources: &Sources,
    objects: &Arc<super::objects::Objects>,
    client: &super::http::Client,
    told: &mut std::collections::HashSet<String>,
) -> Result<String, ClusterError> {
    let r = client.get(&format!("/api/v1/pods?{}&resourceVersion=0", selector(parts)))?;
    if r.status != 200 {
        return Err(super::api_error("listing the node's pods", &r));
    }
    let mut list: Value =
        serde_json::from_slice(&r.body).map_err(|e| ClusterError::Protocol(format!("the pod list: {e}")))?;
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
    let items = match list["items"].take() {
        Value::Array(items) => items,
        _ => Vec::new(),
    };
    {
        let mut view = shared.view.lock();
        let mut fresh = BTreeMap::new();
        for item in items {
            if let Some(p) = read(item) {
                fresh.insert(p.uid.clone(), p);
            }
        }
        // an unchanged pod keeps its Arc: the agent sees no change
        for (uid, p) in fresh.iter_mut() {
            reuse(view.pods.get(uid), p);
        }
        view.pods = fresh;
        view.synced = true;
    }
    log::info!("cluster: listed the node's pods (resourceVersion {rv})");
    publish(parts, shared, sources, objects, told);
    Ok(rv)
}

/// One watch from `rv` until it ends: `Some(version)` to resume from,
/// `None` for a new list (410).
fn watch(
    parts: &Parts,
    shared: &Shared,
    sources: &Sources,
    objects: &Arc<super::objects::Objects>,
    client: &super::http::Client,
    rv: &str,
    told: &mut std::collections::HashSet<String>,
) -> Result<Option<String>, ClusterError> {
    let timeout = WATCH_MIN + super::jitter(WATCH_MIN);
    let path = format!(
        "/api/v1/pods?{}&watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds={timeout}",
        selector(parts)
    );
    let mut lines = match client.stream(&path)? {
        Ok(lines) => lines,
        Err(r) if r.status == 410 => return Ok(None),
        Err(r) => return Err(super::api_error("watching the node's pods", &r)),
    };
    let mut rv = rv.to_string();
    let mut dirty = false;
    let idle = Duration::from_secs(timeout) + WATCH_SLACK;
    let go_on = || !shared.stopped();
    while let Some(line) = lines.next(Duration::from_secs(1), idle, &go_on)? {
        let mut event: Value = match serde_json::from_slice(&line) {
            Ok(v) => v,
            Err(e) => return Err(ClusterError::Protocol(format!("a watch event of the node's pods: {e}"))),
        };
        let object = event["object"].take();
        if let Some(v) = object["metadata"]["resourceVersion"].as_str() {
            rv = v.to_string();
        }
        match event["type"].as_str().unwrap_or_default() {
            "ADDED" | "MODIFIED" => {
                let mut view = shared.view.lock();
                if let Some(mut p) = read(object) {
                    reuse(view.pods.get(&p.uid), &mut p);
                    view.pods.insert(p.uid.clone(), p);
                    dirty = true;
                }
            }
            "DELETED" => {
                if let Some(uid) = object["metadata"]["uid"].as_str() {
                    shared.view.lock().pods.remove(uid);
                    dirty = true;
                }
            }
            "BOOKMARK" => {}
            "ERROR" => {
                if object["code"].as_u64() == Some(410) {
                    return Ok(None);
                }
                let message = object["message"].as_str().unwrap_or_default();
                return Err(ClusterError::Protocol(format!("watching the node's pods: {message}")));
            }
            other => return Err(ClusterError::Protocol(format!("a watch event of type {other:?}"))),
        }
        // a burst of events is one change for the agent
        if dirty && !lines.has_line() {
            publish(parts, shared, sources, objects, told);
            dirty = false;
        }
    }
    if dirty {
        publish(parts, shared, sources, objects, told);
    }
    Ok(Some(rv))
}

/// An API pod read: `None` when it has no UID or name (not a pod).
fn read(mut object: Value) -> Option<ApiPod> {
    let uid = object["metadata"]["uid"].as_str()?.to_string();
    let name = object["metadata"]["name"].as_str()?.to_string();
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
    let deleted = !object["metadata"]["deletionTimestamp"].is_null();
    let status = object["status"].take();
    let kind = match object["metadata"]["annotations"][MIRROR_ANNOTATION].as_str() {
        Some(hash) => Kind::Mirror(hash.to_string()),
        None => match crate::model::manifest::from_api(object) {
            Ok(pod) => Kind::Run(Arc::new(pod)),
            Err(e) => Kind::Refused(e.to_string()),
        },
    };
    Some(ApiPod { uid, name, namespace, status, deleted, kind })
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
    told: &mut std::collections::HashSet<String>,
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
    sources.set_api(run);
    crate::base::changes::bump();
}

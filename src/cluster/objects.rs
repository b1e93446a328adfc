//! The ConfigMaps and Secrets the API's pods use, each watched by name as
//! the kubelet's watch-based manager does (`fieldSelector=metadata.name=X`
//! in its namespace: the only read the Node authorizer allows, and only
//! for objects a pod of this node references). One `cluster-obj` thread a
//! watched object (small stack; a node's pods share few objects), started
//! when a pod first references it and stopped when none does. Each object
//! is checked as a local one (`model::objects::from_value`) and the whole
//! set goes to the agent ([`Sources::set_api_objects`]), which syncs the
//! pods that use a changed one.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;

use super::{ClusterError, Shared};
use crate::agent::source::Sources;
use crate::model::objects::{Kind, ObjKey, ObjectSet};

/// One object's thread and its stop flag.
type Watch = (Arc<AtomicBool>, JoinHandle<()>);

/// The watched objects and their threads.
pub struct Objects {
    shared: Arc<Shared>,
    sources: Arc<Sources>,
    current: Mutex<ObjectSet>,
    watches: Mutex<HashMap<ObjKey, Watch>>,
    /// Threads told to stop, joined when done (or at the end).
    retired: Mutex<Vec<JoinHandle<()>>>,
}

impl Objects {
    pub fn new(shared: Arc<Shared>, sources: Arc<Sources>) -> Arc<Self> {
        Arc::new(Objects {
            shared,
            sources,
            current: Mutex::new(ObjectSet::new()),
            watches: Mutex::new(HashMap::new()),
            retired: Mutex::new(Vec::new()),
        })
    }

    /// Watch exactly `keys`: new ones get a thread, the others' end.
    pub fn want(self: &Arc<Self>, keys: BTreeSet<ObjKey>) {
        let mut watches = self.watches.lock();
        let gone: Vec<ObjKey> = watches.keys().filter(|k| !keys.contains(*k)).cloned().collect();
        let mut dropped = false;
        for k in gone {
            if let Some((stop, join)) = watches.remove(&k) {
                stop.store(true, Ordering::SeqCst);
                self.retired.lock().push(join);
            }
            dropped |= self.current.lock().remove(&k).is_some();
        }
        for k in keys {
            if watches.contains_key(&k) {
                continue;
            }
            let stop = Arc::new(AtomicBool::new(false));
            let (me, s, key) = (self.clone(), stop.clone(), k.clone());
            match crate::base::thread::spawn("cluster-obj", Some(crate::base::thread::HELPER_STACK), move || {
                me.watch_loop(&key, &s)
            }) {
                Ok(join) => {
                    watches.insert(k, (stop, join));
                }
                Err(e) => {
                    log::error!("cluster: cannot start a thread to watch {k}: {e}; tried again at the next change")
                }
            }
        }
        drop(watches);
        self.retired.lock().retain(|j| !j.is_finished());
        if dropped {
            self.push();
        }
    }

    /// Stop every watch and join the threads.
    pub fn stop(&self) {
        let all: Vec<_> = self.watches.lock().drain().map(|(_, w)| w).collect();
        for (stop, _) in &all {
            stop.store(true, Ordering::SeqCst);
        }
        for (_, j) in all {
            let _ = j.join();
        }
        for j in self.retired.lock().drain(..) {
            let _ = j.join();
        }
    }

    fn push(&self) {
        let set = self.current.lock().clone();
        self.sources.set_api_objects(set);
    }

    /// The object as the API has it now (`None`: there is none).
    fn set(&self, key: &ObjKey, value: Option<Value>) {
        let obj = value.and_then(|v| match read(key, v) {
            Ok(o) => Some(o),
            Err(e) => {
                log::warn!("cluster: {key} from the API cannot be used: {e}");
                None
            }
        });
        let changed = {
            let mut cur = self.current.lock();
            match obj {
                Some(o) => {
                    let same = cur
                        .get(key)
                        .is_some_and(|old| old.data == o.data && old.type_ == o.type_ && old.immutable == o.immutable);
                    cur.insert(key.clone(), Arc::new(o));
                    !same
                }
                None => cur.remove(key).is_some(),
            }
        };
        if changed {
            self.push();
        }
    }

    fn watch_loop(&self, key: &ObjKey, stop: &AtomicBool) {
        let mut failures = 0u32;
        let logged = crate::base::logging::RateLimit::new(Duration::from_secs(60));
        let mut resume: Option<String> = None;
        let go_on = || !stop.load(Ordering::SeqCst) && !self.shared.stopped();
        while go_on() {
            let Some(client) = self.shared.client() else {
                self.shared.pause(Duration::from_secs(1));
                continue;
            };
            let step = match &resume {
                None => self.list(&client, key).map(Some),
                Some(rv) => self.watch(&client, key, rv, &go_on),
            };
            match step {
                Ok(next) => {
                    failures = 0;
                    resume = next;
                }
                Err(e) => {
                    failures += 1;
                    if logged.allow().is_some() || failures == 1 {
                        log::error!("cluster: {key}: {e} (attempt {failures}; retrying with back-off)");
                    }
                    let until = std::time::Instant::now() + super::node::backoff(failures);
                    while go_on() && std::time::Instant::now() < until {
                        self.shared.pause(Duration::from_millis(500));
                    }
                }
            }
        }
    }

    fn collection(key: &ObjKey) -> String {
        let plural = match key.kind {
            Kind::ConfigMap => "configmaps",
            Kind::Secret => "secrets",
        };
        format!("/api/v1/namespaces/{}/{plural}?fieldSelector=metadata.name%3D{}", key.namespace, key.name)
    }

    fn list(&self, client: &super::http::Client, key: &ObjKey) -> Result<String, ClusterError> {
        let r = client.get(&Self::collection(key))?;
        if r.status != 200 {
            return Err(super::api_error(&format!("reading {key}"), &r));
        }
        let mut v: Value =
            serde_json::from_slice(&r.body).map_err(|e| ClusterError::Protocol(format!("{key}: {e}")))?;
        let item = v["items"].as_array_mut().and_then(|a| a.pop());
        self.set(key, item);
        Ok(v["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string())
    }

    fn watch(
        &self,
        client: &super::http::Client,
        key: &ObjKey,
        rv: &str,
        go_on: &dyn Fn() -> bool,
    ) -> Result<Option<String>, ClusterError> {
        let timeout = 300 + super::jitter(300);
        let path = format!(
            "{}&watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds={timeout}",
            Self::collection(key)
        );
        let mut lines = match client.stream(&path)? {
            Ok(l) => l,
            Err(r) if r.status == 410 => return Ok(None),
            Err(r) => return Err(super::api_error(&format!("watching {key}"), &r)),
        };
        let mut rv = rv.to_string();
        while let Some(line) = lines.next(Duration::from_secs(1), Duration::from_secs(timeout + 30), go_on)? {
            let mut e: Value =
                serde_json::from_slice(&line).map_err(|e| ClusterError::Protocol(format!("{key}: an event: {e}")))?;
            let obj = e["object"].take();
            if let Some(v) = obj["metadata"]["resourceVersion"].as_str() {
                rv = v.to_string();
            }
            match e["type"].as_str().unwrap_or_default() {
                "ADDED" | "MODIFIED" => self.set(key, Some(obj)),
                "DELETED" => self.set(key, None),
                "ERROR" if obj["code"].as_u64() == Some(410) => return Ok(None),
                "ERROR" => return Err(ClusterError::Protocol(format!("watching {key}: {}", obj["message"]))),
                _ => {}
            }
        }
        Ok(Some(rv))
    }
}

/// An API object read as a local one: its metadata cut to what a local
/// object keeps (the API's own fields are the server's business).
fn read(key: &ObjKey, mut v: Value) -> Result<crate::model::objects::LocalObject, crate::model::field::FieldError> {
    v["apiVersion"] = "v1".into();
    v["kind"] = key.kind.as_str().into();
    if let Some(meta) = v["metadata"].as_object_mut() {
        meta.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "labels" | "annotations"));
    }
    let file = format!("api:{}/{}", key.namespace, key.name);
    crate::model::objects::from_value(key.kind, &file, v).map(|(o, _)| o)
}

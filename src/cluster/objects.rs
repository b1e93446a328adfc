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

use parking_lot::Mutex;
use serde_json::Value;

use super::Shared;
use crate::agent::source::Sources;
use crate::model::objects::{Kind, ObjKey, ObjectSet};

/// One object's thread and its stop flag.
type Watch = (Arc<AtomicBool>, JoinHandle<()>);

/// The watched objects and their threads.
pub struct Objects {
    shared: Arc<Shared>,
    sources: Arc<Sources>,
    current: Mutex<ObjectSet>,
    /// Held from reading `current` until the agent has it: two watch
    /// threads pushing at once could otherwise hand the agent the older
    /// set last (an object just added lost until the next change).
    pushing: Mutex<()>,
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
            pushing: Mutex::new(()),
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
            if let Err(e) = self.shared.record.save_object(&k, None) {
                self.shared.record_failed(&k.to_string(), &e);
            }
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
        let _one = self.pushing.lock();
        let set = self.current.lock().clone();
        self.sources.set_api_objects(set);
    }

    /// Objects from the node's record (at the start, before the API
    /// answers): used as the API's until their watches say otherwise.
    pub fn load(&self, found: Vec<(ObjKey, Value)>) {
        for (key, v) in found {
            match read(&key, v) {
                Ok(o) => {
                    self.current.lock().insert(key, Arc::new(o));
                }
                Err(e) => log::warn!("cluster: recorded {key} cannot be used: {e}"),
            }
        }
        self.push();
    }

    /// The object as the API has it now (`None`: there is none), kept in
    /// the node's record when it changed.
    fn set(&self, key: &ObjKey, value: Option<Value>) {
        let recorded = value.clone();
        let obj = value.and_then(|v| match read(key, v) {
            Ok(o) => Some(o),
            Err(e) => {
                log::warn!("cluster: {key} from the API cannot be used: {e}");
                None
            }
        });
        // an object that cannot be used is not kept either
        let recorded = recorded.filter(|_| obj.is_some());
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
            if let Err(e) = self.shared.record.save_object(key, recorded.as_ref()) {
                self.shared.record_failed(&key.to_string(), &e);
            }
            self.push();
        }
    }

    fn watch_loop(&self, key: &ObjKey, stop: &AtomicBool) {
        let what = key.to_string();
        let collection = Self::collection(key);
        let mut store = ObjectStore { objects: self, key };
        super::reflector::Reflector { what: &what, collection: &collection }
            .run(&self.shared, &mut store, &|| !stop.load(Ordering::SeqCst));
    }

    fn collection(key: &ObjKey) -> String {
        let plural = match key.kind {
            Kind::ConfigMap => "configmaps",
            Kind::Secret => "secrets",
        };
        format!("/api/v1/namespaces/{}/{plural}?fieldSelector=metadata.name%3D{}", key.namespace, key.name)
    }
}

/// The reflector's store of one watched object (a list of at most one).
struct ObjectStore<'a> {
    objects: &'a Objects,
    key: &'a ObjKey,
}

impl super::reflector::Store for ObjectStore<'_> {
    fn replace(&mut self, mut items: Vec<Value>) {
        self.objects.set(self.key, items.pop());
    }

    fn upsert(&mut self, object: Value) {
        self.objects.set(self.key, Some(object));
    }

    fn delete(&mut self, _: Value) {
        self.objects.set(self.key, None);
    }
}

/// An API object read as a local one: its metadata cut to what a local
/// object keeps (the API's own fields are the server's business).
fn read(key: &ObjKey, mut v: Value) -> Result<crate::model::objects::LocalObject, crate::model::field::FieldErrors> {
    v["apiVersion"] = "v1".into();
    v["kind"] = key.kind.as_str().into();
    if let Some(meta) = v["metadata"].as_object_mut() {
        meta.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "labels" | "annotations"));
    }
    let file = format!("api:{}/{}", key.namespace, key.name);
    crate::model::objects::from_value(key.kind, &file, v).map(|(o, _)| o)
}

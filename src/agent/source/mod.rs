//! Pod sources: static pod manifests in `staticPodPath` (`file`, read by
//! the `watcher` thread) and, in cluster mode, the pods the API server
//! binds to this node (read by `cluster::pods`). [`Sources`] merges them:
//! each source hands its whole set, the agent gets the union, so both kinds
//! enter through the same admission and workers.

pub mod file;
pub mod watcher;

use std::sync::Arc;

use parking_lot::Mutex;

pub use file::{FileSource, ScanReport};
pub use watcher::{SourceHandle, start_watcher};

use crate::agent::manager::Agent;
use crate::model::Pod;
use crate::model::objects::ObjectSet;

/// The sources' latest sets, merged for the agent.
pub struct Sources {
    agent: Arc<Agent>,
    sets: Mutex<Sets>,
}

struct Sets {
    file: Option<Vec<Arc<Pod>>>,
    /// The files' ConfigMaps and Secrets, and the API's the API's pods use.
    file_objects: ObjectSet,
    api_objects: ObjectSet,
    /// `None` while the API's first list has not come; `Some` from then.
    api: Option<Vec<Arc<Pod>>>,
    /// Whether there is an API source (cluster mode).
    api_expected: bool,
}

impl Sources {
    /// The sources of a standalone node (`api_expected` false) or of a
    /// cluster node.
    pub fn new(agent: Arc<Agent>, api_expected: bool) -> Arc<Self> {
        Arc::new(Sources {
            agent,
            sets: Mutex::new(Sets {
                file: None,
                file_objects: ObjectSet::new(),
                api_objects: ObjectSet::new(),
                api: None,
                api_expected,
            }),
        })
    }

    /// A scan of `staticPodPath`: its objects, then its pods.
    pub fn set_file(&self, pods: Vec<Arc<Pod>>, objects: ObjectSet) {
        let mut sets = self.sets.lock();
        sets.file_objects = objects;
        self.push_objects(&sets);
        sets.file = Some(pods);
        self.push(&sets);
    }

    /// The API's ConfigMaps and Secrets that its pods use. A local object
    /// of the same namespace and name wins (static pods use only local
    /// ones; an API pod that names one gets the local one, said in the log).
    pub fn set_api_objects(&self, objects: ObjectSet) {
        let mut sets = self.sets.lock();
        sets.api_objects = objects;
        self.push_objects(&sets);
    }

    fn push_objects(&self, sets: &Sets) {
        let mut all = sets.api_objects.clone();
        for (k, v) in &sets.file_objects {
            if all.insert(k.clone(), v.clone()).is_some() {
                log::warn!("{k} is both a local object and the API's: the local one ({}) is used", v.file);
            }
        }
        self.agent.apply_objects(all);
    }

    /// The pods the API server binds to this node, all of them.
    pub fn set_api(&self, pods: Vec<Arc<Pod>>) {
        let mut sets = self.sets.lock();
        sets.api = Some(pods);
        self.push(&sets);
    }

    fn push(&self, sets: &Sets) {
        let ready = sets.file.is_some() && (!sets.api_expected || sets.api.is_some());
        let all: Vec<Arc<Pod>> = sets.file.iter().chain(sets.api.iter()).flatten().cloned().collect();
        self.agent.apply_sources(all, ready);
    }
}

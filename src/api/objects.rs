//! What the node's APIs do to local ConfigMaps and Secrets: as with pods
//! (`ops`), an object written through an API is a file in `staticPodPath`
//! that the manifest watcher reads like any other (so a change reaches
//! the pods as an edit of the file would).
//!
//! - A new object gets a file of its own, `<ns>_configmap_<name>.yaml` or
//!   `<ns>_secret_<name>.yaml` (then `-2` ... `-9`): pod files are
//!   `<name>.yaml` or `<ns>_<name>.yaml` and names and namespaces hold no
//!   `_`, so the two never meet. A file that exists is never replaced.
//! - An object is replaced or removed only through a file that holds it
//!   alone. One defined beside a pod (a static pod's file) or beside other
//!   objects is refused with the file's name: edit the file.
//! - Every file is written atomically, mode 0600 (Secrets' values in it).
//!
//! The caller then waits ([`Ops::wait_object`], bounded) until the
//! watcher has read the file, so what it answers is what a read shows.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::manifest;
use crate::model::objects::{LocalObject, ObjKey};

use super::ops::Ops;
use super::status::{ApiError, Res};

/// The resource name as the API server's messages use it (`configmaps`).
fn resource(key: &ObjKey) -> String {
    format!("{}s", key.kind.resource())
}

impl Ops {
    /// The object `key` as the manifest watcher last read it.
    pub fn object(&self, key: &ObjKey) -> Option<Arc<LocalObject>> {
        self.parts.objects.get(key)
    }

    /// The file that holds `o` and nothing else, or why there is none
    /// (403 naming the file: it holds a pod or other objects, or it is not
    /// in staticPodPath; 409: it changed since it was read).
    pub fn sole_file(&self, o: &LocalObject) -> Res<PathBuf> {
        let (res, name) = (resource(&o.key), &o.key.name);
        let path = PathBuf::from(&o.file);
        let refuse = |why: String| {
            ApiError::forbidden(format!(
                "{res} {name:?} is forbidden: it is defined in {} {why}: edit that file",
                path.display()
            ))
        };
        if path.parent() != Some(self.cfg.static_pod_path.as_path()) {
            return Err(refuse("outside staticPodPath".into()));
        }
        let content = manifest::read_file_all(&path, &self.cfg.node_name).map_err(|e| {
            ApiError::conflict(format!("{res} {name:?}: {} cannot be read now ({e}); try again", path.display()))
        })?;
        if let Some(p) = &content.pod {
            return Err(refuse(format!(
                "beside pod {}/{} (a static pod's file)",
                crate::model::namespace(&p.pod),
                crate::model::name(&p.pod)
            )));
        }
        let others: Vec<String> =
            content.objects.iter().filter(|x| x.key != o.key).map(|x| x.key.to_string()).collect();
        if !others.is_empty() {
            return Err(refuse(format!("beside {}", others.join(", "))));
        }
        if content.objects.is_empty() {
            return Err(ApiError::conflict(format!(
                "{res} {name:?}: {} no longer holds it (changed meanwhile); try again",
                path.display()
            )));
        }
        Ok(path)
    }

    /// Write a new object's file (`doc`: its manifest) into a free file
    /// of its own; returns the file.
    pub fn create_object(&self, key: &ObjKey, doc: &[u8]) -> Res<PathBuf> {
        let dir = &self.cfg.static_pod_path;
        let base = format!("{}_{}_{}", key.namespace, key.kind.resource(), key.name);
        let candidates = std::iter::once(format!("{base}.yaml"))
            .chain((2..=9).map(|i| format!("{base}-{i}.yaml")))
            .map(|f| dir.join(f));
        let mut taken = Vec::new();
        for path in candidates {
            match crate::base::fsutil::write_new_atomically(&path, doc) {
                Ok(()) => {
                    log::info!("API: {key} created ({})", path.display());
                    (self.cfg.rescan)();
                    return Ok(path);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => taken.push(path.display().to_string()),
                Err(e) => {
                    return Err(ApiError::internal(format!("{key}: writing {}: {e}", path.display())));
                }
            }
        }
        Err(ApiError::conflict(format!(
            "{key}: no free file for it in {}: {} exist; podwarden never replaces a file (remove or rename one)",
            dir.display(),
            taken.join(", ")
        )))
    }

    /// Replace the file that holds `live` alone with `doc`.
    pub fn replace_object(&self, live: &LocalObject, doc: &[u8]) -> Res<PathBuf> {
        let path = self.sole_file(live)?;
        crate::base::fsutil::write_atomically(&path, doc)
            .map_err(|e| ApiError::internal(format!("{}: writing {}: {e}", live.key, path.display())))?;
        log::info!("API: {} configured ({})", live.key, path.display());
        (self.cfg.rescan)();
        Ok(path)
    }

    /// Remove the file that holds `live` alone.
    pub fn delete_object(&self, live: &LocalObject) -> Res<PathBuf> {
        let path = self.sole_file(live)?;
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(ApiError::internal(format!("{}: removing {}: {e}", live.key, path.display())));
            }
        }
        log::info!("API: {} deleted ({})", live.key, path.display());
        (self.cfg.rescan)();
        Ok(path)
    }

    /// Wait until the store's `key` satisfies `done` (the manifest watcher
    /// read the write), at most `max`; whether it did.
    pub fn wait_object(&self, key: &ObjKey, max: Duration, done: impl Fn(Option<&LocalObject>) -> bool) -> bool {
        let end = Instant::now() + max;
        let mut seen = crate::base::changes::current();
        loop {
            if done(self.object(key).as_deref()) {
                return true;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            // the store bumps the change counter when it swaps; a short
            // slice covers a bump between the check and the wait
            seen = crate::base::changes::wait_past(seen, left.min(Duration::from_millis(50)));
        }
    }
}

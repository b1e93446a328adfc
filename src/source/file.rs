//! Scanning `staticPodPath`: every `*.yaml`, `*.yml`, `*.json` (dotfiles,
//! which editors use for swap files, are skipped) holds one Pod.
//!
//! A manifest that was valid and turns invalid (a half-written edit) keeps
//! its last valid pod until the file is fixed or removed.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::model::{self, Pod, manifest};

#[derive(Default)]
struct FileEntry {
    /// The last valid pod read from the file.
    pod: Option<Arc<Pod>>,
    /// The last error reported for the file (reported once per change).
    reported: Option<String>,
    /// The warnings last logged for the file (logged once per change).
    warned: Vec<String>,
    /// The UID conflict last reported for the file (reported once while
    /// it lasts).
    conflict: Option<String>,
}

/// What one scan found.
#[derive(Default)]
pub struct ScanReport {
    /// The desired pods, ordered by file name. `None` when the directory
    /// could not be read: keep the pods as they are.
    pub pods: Option<Vec<Arc<Pod>>>,
    /// Newly seen problems: (file, message). Each is reported once until
    /// the file changes.
    pub errors: Vec<(String, String)>,
}

pub struct FileSource {
    dir: PathBuf,
    node_name: String,
    files: BTreeMap<PathBuf, FileEntry>,
    dir_error: Option<String>,
    /// UID -> the file whose pod holds it. A UID stays with the file that
    /// held it first for as long as that file holds a pod with it.
    uid_owner: HashMap<String, PathBuf>,
}

fn is_manifest_name(p: &Path) -> bool {
    let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    !name.starts_with('.') && (name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json"))
}

impl FileSource {
    pub fn new(dir: impl Into<PathBuf>, node_name: impl Into<String>) -> Self {
        FileSource {
            dir: dir.into(),
            node_name: node_name.into(),
            files: BTreeMap::new(),
            dir_error: None,
            uid_owner: HashMap::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn scan(&mut self) -> ScanReport {
        let mut report = ScanReport::default();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                let msg =
                    format!("cannot read staticPodPath {}: {e}; keeping the pods as they are", self.dir.display());
                if self.dir_error.as_deref() != Some(&msg) {
                    report.errors.push((self.dir.display().to_string(), msg.clone()));
                    self.dir_error = Some(msg);
                }
                return report;
            }
        };
        self.dir_error = None;
        let mut present: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| is_manifest_name(p)).collect();
        present.sort();
        self.files.retain(|p, _| present.contains(p));
        let mut vanished = Vec::new();
        for path in &present {
            let entry = self.files.entry(path.clone()).or_default();
            match manifest::read_file(path, &self.node_name) {
                Ok(manifest::Parsed { pod, warnings }) => {
                    entry.reported = None;
                    if entry.warned != warnings {
                        for w in &warnings {
                            log::warn!("{}: {w}", path.display());
                        }
                        entry.warned = warnings;
                    }
                    let same =
                        entry.pod.as_ref().is_some_and(|old| old.metadata == pod.metadata && old.spec == pod.spec);
                    if !same {
                        entry.pod = Some(Arc::new(pod));
                    }
                }
                // removed between listing and reading: gone, not broken
                Err(_) if std::fs::symlink_metadata(path).is_err() => vanished.push(path.clone()),
                Err(e) => {
                    let mut msg = e.to_string();
                    if entry.pod.is_some() {
                        msg.push_str("; keeping the last valid version of this pod");
                    }
                    if entry.reported.as_deref() != Some(&msg) {
                        report.errors.push((path.display().to_string(), msg.clone()));
                        entry.reported = Some(msg);
                    }
                }
            }
        }
        for path in vanished {
            self.files.remove(&path);
        }
        // Two files claiming one UID (an explicit metadata.uid): the file
        // that held it first keeps it, however the names sort, so a new
        // manifest can never take over (and replace) a running pod; among
        // files that claim it at the same scan, the first by name wins.
        let mut claims: HashMap<String, Vec<PathBuf>> = HashMap::new();
        for (path, entry) in &self.files {
            if let Some(pod) = &entry.pod {
                claims.entry(model::uid(pod).to_string()).or_default().push(path.clone());
            }
        }
        let mut owner: HashMap<String, PathBuf> = HashMap::new();
        for (uid, paths) in claims {
            let keep = self.uid_owner.get(&uid).filter(|o| paths.contains(o)).unwrap_or(&paths[0]).clone();
            owner.insert(uid, keep);
        }
        self.uid_owner = owner;
        let mut pods = Vec::new();
        for (path, entry) in &mut self.files {
            let Some(pod) = &entry.pod else { continue };
            let uid = model::uid(pod);
            match self.uid_owner.get(uid) {
                Some(first) if first != path => {
                    let msg = format!(
                        "{}: metadata.uid {uid:?} is already used by {}; ignoring this file",
                        path.display(),
                        first.display()
                    );
                    if entry.conflict.as_deref() != Some(&msg) {
                        report.errors.push((path.display().to_string(), msg.clone()));
                        entry.conflict = Some(msg);
                    }
                }
                _ => {
                    entry.conflict = None;
                    pods.push(pod.clone());
                }
            }
        }
        report.pods = Some(pods);
        report
    }
}

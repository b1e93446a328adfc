//! Scanning `staticPodPath`: every `*.yaml`, `*.yml`, `*.json` (dotfiles,
//! which editors use for swap files, are skipped) holds at most one Pod and
//! any number of ConfigMaps and Secrets.
//!
//! A manifest that was valid and turns invalid (a half-written edit) keeps
//! its last valid content (pod and objects) until the file is fixed or
//! removed.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::model::objects::{LocalObject, ObjKey, ObjectSet};
use crate::model::{self, Pod, manifest};

#[derive(Default)]
struct FileEntry {
    /// Whether the file has ever been read valid (then `pod` and `objects`
    /// are its last valid content).
    valid: bool,
    /// The last valid pod read from the file.
    pod: Option<Arc<Pod>>,
    /// The ConfigMaps and Secrets last read valid from the file.
    objects: Vec<Arc<LocalObject>>,
    /// The last error reported for the file (reported once per change).
    reported: Option<String>,
    /// The warnings last logged for the file (logged once per change).
    warned: Vec<String>,
    /// The UID conflict last reported for the file (reported once while
    /// it lasts).
    conflict: Option<String>,
    /// The object conflicts last reported for the file.
    object_conflicts: Vec<String>,
}

/// What one scan found.
#[derive(Default)]
pub struct ScanReport {
    /// The desired pods, ordered by file name. `None` when the directory
    /// could not be read: keep the pods as they are.
    pub pods: Option<Vec<Arc<Pod>>>,
    /// The ConfigMaps and Secrets (`None` with `pods`).
    pub objects: Option<ObjectSet>,
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
    /// Object -> the file that holds it, by the same rule as UIDs.
    object_owner: HashMap<ObjKey, PathBuf>,
}

fn is_manifest_name(p: &Path) -> bool {
    let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    !name.starts_with('.') && (name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json"))
}

/// What reading one file left.
enum Read {
    /// The file is there (valid, or broken and reported).
    Present,
    /// Removed between listing and reading: gone, not broken.
    Vanished,
}

impl FileEntry {
    /// Read the file at `path` again: a valid file replaces the entry's
    /// content, a broken one keeps it (reported once per change).
    fn read(&mut self, path: &Path, node_name: &str, errors: &mut Vec<(String, String)>) -> Read {
        match manifest::read_file_all(path, node_name) {
            Ok(content) => {
                self.update(path, content, errors);
                Read::Present
            }
            Err(_) if std::fs::symlink_metadata(path).is_err() => Read::Vanished,
            Err(e) => {
                let mut msg = e.to_string();
                if self.valid {
                    msg.push_str("; keeping the last valid version of this file");
                }
                if self.reported.as_deref() != Some(&msg) {
                    errors.push((path.display().to_string(), msg.clone()));
                    self.reported = Some(msg);
                }
                Read::Present
            }
        }
    }

    /// The file read valid: its warnings logged (once per change), its pod
    /// and objects taken (an unchanged one keeps its `Arc`).
    fn update(&mut self, path: &Path, content: manifest::FileContent, errors: &mut Vec<(String, String)>) {
        self.reported = None;
        self.valid = true;
        let mut warnings = content.warnings;
        if let Some(p) = &content.pod {
            warnings.extend(p.warnings.iter().cloned());
        }
        if self.warned != warnings {
            for w in &warnings {
                log::warn!("{}: {w}", path.display());
            }
            self.warned = warnings;
        }
        match content.pod {
            None => self.pod = None,
            Some(manifest::Parsed { pod, .. }) => {
                let same = self.pod.as_ref().is_some_and(|old| old.metadata == pod.metadata && old.spec == pod.spec);
                if !same {
                    self.pod = Some(Arc::new(pod));
                }
            }
        }
        let immutable_changed = self.take_objects(path, content.objects);
        if !immutable_changed.is_empty() {
            let msg = immutable_changed.join("; ");
            if self.reported.as_deref() != Some(&msg) {
                errors.push((path.display().to_string(), msg.clone()));
            }
            self.reported = Some(msg);
        }
    }

    /// Take the file's objects: an unchanged object keeps its `Arc`; an
    /// immutable one keeps its first version (the API server refuses the
    /// change; removing the object and adding it again is how it changes).
    /// Returns a message for each immutable object whose change is ignored.
    fn take_objects(&mut self, path: &Path, objects: Vec<LocalObject>) -> Vec<String> {
        let old = std::mem::take(&mut self.objects);
        let mut immutable_changed = Vec::new();
        self.objects = objects
            .into_iter()
            .map(|o| match old.iter().find(|x| x.key == o.key) {
                Some(x) if **x == o => x.clone(),
                Some(x) if x.immutable => {
                    immutable_changed.push(format!(
                        "{}: {} is immutable: the change is ignored (remove it and add it again to change it)",
                        path.display(),
                        o.key
                    ));
                    x.clone()
                }
                _ => Arc::new(o),
            })
            .collect();
        immutable_changed
    }
}

/// Which of `claims` (key -> the files claiming it, in name order) each
/// key stays with: the file that held it before if it still claims it,
/// else the first by name.
fn owners<K: std::hash::Hash + Eq + Clone>(
    claims: HashMap<K, Vec<PathBuf>>,
    before: &HashMap<K, PathBuf>,
) -> HashMap<K, PathBuf> {
    claims
        .into_iter()
        .filter_map(|(key, paths)| {
            let keep = before.get(&key).filter(|o| paths.contains(o)).or(paths.first())?.clone();
            Some((key, keep))
        })
        .collect()
}

impl FileSource {
    pub fn new(dir: impl Into<PathBuf>, node_name: impl Into<String>) -> Self {
        FileSource {
            dir: dir.into(),
            node_name: node_name.into(),
            files: BTreeMap::new(),
            dir_error: None,
            uid_owner: HashMap::new(),
            object_owner: HashMap::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Read the directory again: every manifest file, then the pods and
    /// objects of the set.
    pub fn scan(&mut self) -> ScanReport {
        let mut report = ScanReport::default();
        let Some(present) = self.list(&mut report) else { return report };
        self.files.retain(|p, _| present.contains(p));
        let mut vanished = Vec::new();
        for path in &present {
            let entry = self.files.entry(path.clone()).or_default();
            if let Read::Vanished = entry.read(path, &self.node_name, &mut report.errors) {
                vanished.push(path.clone());
            }
        }
        for path in vanished {
            self.files.remove(&path);
        }
        report.pods = Some(self.pods(&mut report));
        report.objects = Some(self.objects(&mut report));
        report
    }

    /// The manifest files in the directory, by name; `None` when it cannot
    /// be read (reported once while it lasts).
    fn list(&mut self, report: &mut ScanReport) -> Option<Vec<PathBuf>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                let msg =
                    format!("cannot read staticPodPath {}: {e}; keeping the pods as they are", self.dir.display());
                if self.dir_error.as_deref() != Some(&msg) {
                    report.errors.push((self.dir.display().to_string(), msg.clone()));
                    self.dir_error = Some(msg);
                }
                return None;
            }
        };
        self.dir_error = None;
        let mut present: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| is_manifest_name(p)).collect();
        present.sort();
        Some(present)
    }

    /// The pods of every file. Two files claiming one UID (an explicit
    /// metadata.uid): the file that held it first keeps it, however the
    /// names sort, so a new manifest can never take over (and replace) a
    /// running pod; among files that claim it at the same scan, the first
    /// by name wins.
    fn pods(&mut self, report: &mut ScanReport) -> Vec<Arc<Pod>> {
        let mut claims: HashMap<String, Vec<PathBuf>> = HashMap::new();
        for (path, entry) in &self.files {
            if let Some(pod) = &entry.pod {
                claims.entry(model::uid(pod).to_string()).or_default().push(path.clone());
            }
        }
        self.uid_owner = owners(claims, &self.uid_owner);
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
        pods
    }

    /// The objects of every file; an object defined in two files stays
    /// with the file that held it first (the other file's copy is reported
    /// and ignored), so a new file cannot take over an object in use.
    fn objects(&mut self, report: &mut ScanReport) -> ObjectSet {
        let mut claims: HashMap<ObjKey, Vec<PathBuf>> = HashMap::new();
        for (path, entry) in &self.files {
            for o in &entry.objects {
                claims.entry(o.key.clone()).or_default().push(path.clone());
            }
        }
        self.object_owner = owners(claims, &self.object_owner);
        let mut set = ObjectSet::new();
        for (path, entry) in &mut self.files {
            let mut conflicts = Vec::new();
            for o in &entry.objects {
                match self.object_owner.get(&o.key) {
                    Some(first) if first != path => conflicts.push(format!(
                        "{}: {} is already defined in {}; ignoring this definition",
                        path.display(),
                        o.key,
                        first.display()
                    )),
                    _ => {
                        set.insert(o.key.clone(), o.clone());
                    }
                }
            }
            for c in &conflicts {
                if !entry.object_conflicts.contains(c) {
                    report.errors.push((path.display().to_string(), c.clone()));
                }
            }
            entry.object_conflicts = conflicts;
        }
        set
    }
}

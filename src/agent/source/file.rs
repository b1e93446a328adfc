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
    /// immutable one keeps its first data (the API server refuses the
    /// change; removing the object and adding it again is how it changes),
    /// while its metadata (labels, annotations) may change.
    /// Returns a message for each immutable object whose change is ignored.
    fn take_objects(&mut self, path: &Path, objects: Vec<LocalObject>) -> Vec<String> {
        let old = std::mem::take(&mut self.objects);
        let mut immutable_changed = Vec::new();
        self.objects = objects
            .into_iter()
            .map(|o| match old.iter().find(|x| x.key == o.key) {
                Some(x) if **x == o => x.clone(),
                Some(x) if x.immutable && !x.same_content(&o) => {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            let d = std::env::temp_dir().join(format!("podwarden-scan-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            TempDir(d)
        }

        fn write(&self, name: &str, text: &str) {
            std::fs::write(self.0.join(name), text).unwrap();
        }

        fn remove(&self, name: &str) {
            std::fs::remove_file(self.0.join(name)).unwrap();
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn pod(name: &str, extra_meta: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n{extra_meta}spec:\n  containers:\n  - name: c\n    image: busybox\n"
        )
    }

    fn cm(name: &str, value: &str, extra: &str) -> String {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\n{extra}data: {{k: \"{value}\"}}\n")
    }

    fn names(r: &ScanReport) -> Vec<String> {
        r.pods.iter().flatten().map(|p| model::name(p).to_string()).collect()
    }

    /// Each object's name, value of `k` and file name.
    fn objects(r: &ScanReport) -> Vec<(String, String, String)> {
        let file = |f: &str| Path::new(f).file_name().unwrap().to_string_lossy().into_owned();
        r.objects
            .iter()
            .flat_map(|s| s.values())
            .map(|o| (o.key.name.clone(), String::from_utf8_lossy(&o.data["k"]).into_owned(), file(&o.file)))
            .collect()
    }

    /// The files the errors name, by file name.
    fn errors_of(r: &ScanReport) -> Vec<String> {
        r.errors.iter().map(|(f, _)| Path::new(f).file_name().unwrap().to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn a_valid_pod_is_read_other_names_are_skipped_and_an_unchanged_file_keeps_its_pod() {
        let d = TempDir::new("valid");
        d.write("web.yaml", &pod("web", ""));
        d.write("api.json", r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"api"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#);
        d.write("notes.txt", "not a manifest");
        d.write(".web.yaml.swp", "editor swap");
        let mut s = FileSource::new(&d.0, "node");
        let r = s.scan();
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!(names(&r), ["api", "web"], "ordered by file name");
        assert_eq!(objects(&r), []);
        let again = s.scan();
        let (a, b) = (&r.pods.unwrap()[1], &again.pods.unwrap()[1]);
        assert!(Arc::ptr_eq(a, b), "an unchanged file keeps its pod");
        // the pod's node and UID: the file's, the node's
        assert_eq!(a.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some("node"));
        assert!(!model::uid(a).is_empty());
    }

    #[test]
    fn a_broken_file_keeps_its_last_good_pod_reported_once_until_fixed() {
        let d = TempDir::new("broken");
        d.write("web.yaml", &pod("web", ""));
        let mut s = FileSource::new(&d.0, "node");
        let first = s.scan().pods.unwrap();
        // a half-written edit: the last valid pod stays
        d.write("web.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  contai");
        let r = s.scan();
        assert!(Arc::ptr_eq(&first[0], &r.pods.as_ref().unwrap()[0]));
        assert_eq!(errors_of(&r), ["web.yaml"]);
        assert!(r.errors[0].1.ends_with("; keeping the last valid version of this file"), "{:?}", r.errors);
        assert!(s.scan().errors.is_empty(), "reported once while it lasts");
        // a file never valid: reported without keeping anything
        d.write("new.yaml", "kind: Pod\napiVersion: v1\nmetadata: {name: new}\nspec: {containers: []}\n");
        let r = s.scan();
        assert_eq!(names(&r), ["web"]);
        assert_eq!(errors_of(&r), ["new.yaml"]);
        assert!(!r.errors[0].1.contains("keeping"), "{:?}", r.errors);
        // fixed: the new content, and a new error would be reported again
        d.write("web.yaml", &pod("web", "  labels: {v: '2'}\n"));
        let r = s.scan();
        let fixed = &r.pods.as_ref().unwrap()[0];
        assert!(!Arc::ptr_eq(&first[0], fixed));
        assert_eq!(fixed.metadata.labels.as_ref().map(|l| l["v"].as_str()), Some("2"));
        assert!(r.errors.is_empty(), "{:?}", r.errors);
    }

    #[test]
    fn a_manifest_with_many_refused_fields_is_reported_on_one_bounded_line() {
        let d = TempDir::new("many");
        // twelve containers without an image: every one refused, the line
        // (the log's and the InvalidManifest event's) shows ten and counts
        // the rest
        let containers: String = (0..12).map(|i| format!("  - name: c{i}\n")).collect();
        d.write(
            "web.yaml",
            &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: web}}\nspec:\n  containers:\n{containers}"),
        );
        let mut s = FileSource::new(&d.0, "node");
        let r = s.scan();
        assert_eq!(errors_of(&r), ["web.yaml"]);
        let shown: Vec<String> = (0..10)
            .map(|i| format!("field spec.containers[{i}].image: missing; every container needs an image"))
            .collect();
        assert_eq!(r.errors[0].1, format!("{}: {}; and 2 more", d.0.join("web.yaml").display(), shown.join("; ")));
    }

    #[test]
    fn a_removed_file_takes_its_pod_and_objects_with_it() {
        let d = TempDir::new("removed");
        d.write("a.yaml", &pod("a", ""));
        d.write("b.yaml", &format!("{}---\n{}", pod("b", ""), cm("side", "s", "")));
        let mut s = FileSource::new(&d.0, "node");
        let r = s.scan();
        assert_eq!(names(&r), ["a", "b"]);
        assert_eq!(objects(&r), [("side".into(), "s".into(), "b.yaml".into())]);
        d.remove("b.yaml");
        let r = s.scan();
        assert_eq!(names(&r), ["a"]);
        assert_eq!(objects(&r), []);
        assert!(r.errors.is_empty(), "removed is not broken: {:?}", r.errors);
        assert_eq!(s.files.len(), 1);
        // even a broken file that is removed: gone, its last good pod too
        d.write("a.yaml", "kind: Pod\n  : broken");
        assert_eq!(names(&s.scan()), ["a"]);
        d.remove("a.yaml");
        let r = s.scan();
        assert_eq!(r.pods.map(|p| p.len()), Some(0));
        assert!(s.files.is_empty());
    }

    #[test]
    fn a_uid_claimed_by_two_files_stays_with_the_file_that_held_it_first() {
        let d = TempDir::new("uid");
        let uid = "  uid: same\n";
        d.write("b.yaml", &pod("b", uid));
        let mut s = FileSource::new(&d.0, "node");
        assert_eq!(names(&s.scan()), ["b"]);
        // a.yaml sorts first, but b.yaml held the UID: a.yaml is ignored
        d.write("a.yaml", &pod("a", uid));
        let r = s.scan();
        assert_eq!(names(&r), ["b"]);
        assert_eq!(errors_of(&r), ["a.yaml"]);
        let b = d.0.join("b.yaml").display().to_string();
        assert!(
            r.errors[0].1.ends_with(&format!("metadata.uid \"same\" is already used by {b}; ignoring this file")),
            "{:?}",
            r.errors
        );
        assert!(s.scan().errors.is_empty(), "reported once while it lasts");
        // the holder goes: the other file's pod takes the UID
        d.remove("b.yaml");
        let r = s.scan();
        assert_eq!(names(&r), ["a"]);
        assert!(r.errors.is_empty());
        assert_eq!(model::uid(&r.pods.unwrap()[0]), "same");
        // two new files at once: the first by name wins
        let d2 = TempDir::new("uid2");
        d2.write("y.yaml", &pod("y", uid));
        d2.write("x.yaml", &pod("x", uid));
        let r = FileSource::new(&d2.0, "node").scan();
        assert_eq!(names(&r), ["x"]);
        assert_eq!(errors_of(&r), ["y.yaml"]);
    }

    #[test]
    fn config_maps_beside_a_pod_or_alone_and_one_defined_twice_stays_with_its_first_file() {
        let d = TempDir::new("objects");
        d.write(
            "p.yaml",
            &format!("{}---\n{}---\n{}", pod("p", ""), cm("side", "s", ""), cm("frozen", "1", "immutable: true\n")),
        );
        d.write("z.yaml", &cm("app", "1", ""));
        let mut s = FileSource::new(&d.0, "node");
        let r = s.scan();
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!(names(&r), ["p"]);
        assert_eq!(
            objects(&r),
            [
                ("app".into(), "1".into(), "z.yaml".into()),
                ("frozen".into(), "1".into(), "p.yaml".into()),
                ("side".into(), "s".into(), "p.yaml".into()),
            ]
        );
        // a.yaml sorts first and defines `app` too: z.yaml keeps it
        d.write("a.yaml", &cm("app", "dup", ""));
        let r = s.scan();
        assert_eq!(objects(&r)[0], ("app".into(), "1".into(), "z.yaml".into()));
        assert_eq!(errors_of(&r), ["a.yaml"]);
        assert!(r.errors[0].1.contains("is already defined in"), "{:?}", r.errors);
        assert!(s.scan().errors.is_empty(), "reported once");
        // an immutable object keeps its first version; the pod is untouched
        let before = s.scan().pods.unwrap();
        d.write(
            "p.yaml",
            &format!("{}---\n{}---\n{}", pod("p", ""), cm("side", "t", ""), cm("frozen", "2", "immutable: true\n")),
        );
        let r = s.scan();
        assert!(Arc::ptr_eq(&before[0], &r.pods.as_ref().unwrap()[0]));
        assert!(objects(&r).contains(&("frozen".into(), "1".into(), "p.yaml".into())));
        assert!(objects(&r).contains(&("side".into(), "t".into(), "p.yaml".into())));
        assert_eq!(errors_of(&r), ["p.yaml"]);
        assert!(r.errors[0].1.contains("is immutable: the change is ignored"), "{:?}", r.errors);
        // its labels may change (the API server allows metadata changes)
        d.write(
            "p.yaml",
            &format!(
                "{}---\n{}---\n{}",
                pod("p", ""),
                cm("side", "t", ""),
                cm("frozen", "1", "immutable: true\n").replace("{name: frozen}", "{name: frozen, labels: {v: '2'}}")
            ),
        );
        let r = s.scan();
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        let frozen = r.objects.as_ref().unwrap().values().find(|o| o.key.name == "frozen").unwrap().clone();
        assert_eq!(frozen.labels.get("v").map(String::as_str), Some("2"));
        // z.yaml goes: a.yaml's definition takes over
        d.remove("z.yaml");
        assert_eq!(objects(&s.scan())[0], ("app".into(), "dup".into(), "a.yaml".into()));
    }

    #[test]
    fn an_unreadable_directory_keeps_the_pods_as_they_are_and_is_reported_once() {
        let d = TempDir::new("nodir");
        let missing = d.0.join("missing");
        let mut s = FileSource::new(&missing, "node");
        let r = s.scan();
        assert!(r.pods.is_none() && r.objects.is_none(), "None: keep the pods as they are");
        assert_eq!(r.errors.len(), 1);
        assert!(r.errors[0].1.starts_with(&format!("cannot read staticPodPath {}: ", missing.display())));
        assert!(r.errors[0].1.ends_with("; keeping the pods as they are"));
        assert!(s.scan().errors.is_empty(), "reported once while it lasts");
        std::fs::create_dir(&missing).unwrap();
        std::fs::write(missing.join("a.yaml"), pod("a", "")).unwrap();
        assert_eq!(names(&s.scan()), ["a"]);
    }
}

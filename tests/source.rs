//! Static pod source: file-level validation, keep-last-good, UID stability,
//! and inotify pick-up through the watcher thread.

mod common;

use common::EVICTION;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::{TempDir, assert_holds_for, poll_until, wait_for};
use parking_lot::Mutex;
use podwarden::agent::source::{FileSource, start_watcher};
use podwarden::model::manifest::{self, ManifestError};
use podwarden::model::{self, Pod};

const POD: &str =
    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: NAME\nspec:\n  containers:\n  - name: c\n    image: busybox\n";

fn pod_yaml(name: &str) -> String {
    POD.replace("NAME", name)
}

fn names(pods: &[Arc<Pod>]) -> Vec<String> {
    pods.iter().map(|p| model::name(p).to_string()).collect()
}

#[test]
fn file_level_errors_name_the_file() {
    let d = TempDir::new("files");
    let dir = &d.0;
    std::fs::create_dir(dir.join("adir.yaml")).unwrap();
    std::os::unix::fs::symlink(dir.join("missing.yaml"), dir.join("dangling.yaml")).unwrap();
    std::os::unix::fs::symlink(dir.join("loop-b.yaml"), dir.join("loop-a.yaml")).unwrap();
    std::os::unix::fs::symlink(dir.join("loop-a.yaml"), dir.join("loop-b.yaml")).unwrap();
    std::fs::write(dir.join("latin1.yaml"), b"name: caf\xe9\n").unwrap();
    std::fs::write(dir.join("big.yaml"), vec![b'#'; 1024 * 1024 + 1]).unwrap();
    let r = |f: &str| manifest::read_file(&dir.join(f), "n");
    assert!(matches!(r("adir.yaml"), Err(ManifestError::Directory { .. })));
    assert!(matches!(r("dangling.yaml"), Err(ManifestError::DanglingSymlink { .. })));
    assert!(matches!(r("loop-a.yaml"), Err(ManifestError::Unreadable { .. })));
    assert!(matches!(r("latin1.yaml"), Err(ManifestError::NotUtf8 { offset: 9, .. })));
    assert!(matches!(r("big.yaml"), Err(ManifestError::TooLarge { .. })));
    for f in ["adir.yaml", "dangling.yaml", "loop-a.yaml", "latin1.yaml", "big.yaml"] {
        let msg = r(f).unwrap_err().to_string();
        assert!(msg.starts_with(&dir.join(f).display().to_string()), "{msg}");
    }
    // a FIFO is rejected without blocking on it
    let fifo = dir.join("fifo.yaml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    podwarden::sys::mkfifo(&c, 0o600).unwrap();
    assert!(matches!(r("fifo.yaml"), Err(ManifestError::NotRegular { .. })));
}

#[test]
fn broken_manifest_touches_no_other_pod_and_is_reported_once() {
    let d = TempDir::new("broken");
    std::fs::write(d.0.join("a.yaml"), pod_yaml("a")).unwrap();
    std::fs::write(d.0.join("b.yml"), "kind: Pod\napiVersion: v1\nmetadata: {name: b}\nspec: {containers: []}\n")
        .unwrap();
    std::fs::write(d.0.join("notes.txt"), "not a manifest").unwrap();
    std::fs::write(d.0.join(".a.yaml.swp"), "editor swap").unwrap();
    let mut s = FileSource::new(&d.0, "node");
    let r = s.scan();
    assert_eq!(names(&r.pods.unwrap()), vec!["a"]);
    assert_eq!(r.errors.len(), 1);
    assert!(r.errors[0].1.contains("b.yml: field spec.containers"), "{:?}", r.errors);
    let again = s.scan();
    assert!(again.errors.is_empty(), "reported once until the file changes");
}

#[test]
fn invalid_edit_keeps_the_last_valid_pod_until_fixed_or_removed() {
    let d = TempDir::new("keep");
    let f = d.0.join("web.yaml");
    std::fs::write(&f, pod_yaml("web")).unwrap();
    let mut s = FileSource::new(&d.0, "node");
    let first = s.scan().pods.unwrap();
    let uid = model::uid(&first[0]).to_string();
    // half-written edit
    std::fs::write(&f, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  contai").unwrap();
    let r = s.scan();
    assert_eq!(r.pods.as_ref().map(|p| model::uid(&p[0]).to_string()), Some(uid.clone()));
    assert!(r.errors[0].1.contains("keeping the last valid version"), "{:?}", r.errors);
    // fixed with a real change: a new UID replaces the pod
    std::fs::write(&f, pod_yaml("web").replace("busybox", "busybox:2")).unwrap();
    let fixed = s.scan().pods.unwrap();
    assert_ne!(model::uid(&fixed[0]), uid);
    // broken again, then removed: the pod goes away
    std::fs::write(&f, "{").unwrap();
    assert_eq!(s.scan().pods.unwrap().len(), 1);
    std::fs::remove_file(&f).unwrap();
    assert!(s.scan().pods.unwrap().is_empty());
}

#[test]
fn uid_is_stable_across_scans_and_changes_on_edit() {
    let d = TempDir::new("uid");
    let f = d.0.join("p.yaml");
    std::fs::write(&f, pod_yaml("p")).unwrap();
    let u1 = model::uid(&FileSource::new(&d.0, "node").scan().pods.unwrap()[0]).to_string();
    let u2 = model::uid(&FileSource::new(&d.0, "node").scan().pods.unwrap()[0]).to_string();
    assert_eq!(u1, u2, "stable across agent restarts");
    std::fs::write(&f, format!("# only a comment changed\n{}", pod_yaml("p"))).unwrap();
    let u3 = model::uid(&FileSource::new(&d.0, "node").scan().pods.unwrap()[0]).to_string();
    assert_eq!(u1, u3, "formatting does not replace the pod");
    std::fs::write(&f, pod_yaml("p").replace("image: busybox", "image: busybox:1.36")).unwrap();
    let u4 = model::uid(&FileSource::new(&d.0, "node").scan().pods.unwrap()[0]).to_string();
    assert_ne!(u1, u4, "an edit replaces the pod");
    let other_node = model::uid(&FileSource::new(&d.0, "node-2").scan().pods.unwrap()[0]).to_string();
    assert_ne!(u4, other_node);
}

#[test]
fn duplicate_explicit_uid_second_file_is_ignored_with_an_error() {
    let d = TempDir::new("dupuid");
    let with_uid = |n: &str| pod_yaml(n).replace(&format!("  name: {n}\n"), &format!("  name: {n}\n  uid: same\n"));
    std::fs::write(d.0.join("a.yaml"), with_uid("a")).unwrap();
    std::fs::write(d.0.join("b.yaml"), with_uid("b")).unwrap();
    let r = FileSource::new(&d.0, "node").scan();
    assert_eq!(names(&r.pods.unwrap()), vec!["a"]);
    assert!(r.errors[0].1.contains("already used by"), "{:?}", r.errors);
}

/// `podwarden run` on the simulated runtime, its manifests in `manifests`,
/// its read-only HTTP port on 127.0.0.1; stopped when dropped (its log
/// shown when the test fails).
struct Daemon {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Daemon {
    fn start(d: &TempDir, manifests: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = d.0.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "staticPodPath: {}\ncontainerRuntimeEndpoint: fake://\nrootDir: {2}/root\napiSocket: {2}/api.sock\n\
                 podLogsDir: {2}/logs\nnodeName: node-a\naddress: 127.0.0.1\nreadOnlyPort: {1}\nport: 0\n\
                 fileCheckFrequency: 300ms\nhousekeepingInterval: 200ms\n{EVICTION}",
                manifests.display(),
                port,
                d.0.display()
            ),
        )
        .unwrap();
        let log = d.0.join("podwarden.log");
        let child = Command::new(env!("CARGO_BIN_EXE_podwarden"))
            .args(["run", "--config", config.to_str().unwrap()])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let daemon = Daemon { child, port, log };
        wait_for("the agent's HTTP port", Duration::from_secs(20), || daemon.try_get("/healthz").is_ok());
        daemon
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn try_get(&self, path: &str) -> std::io::Result<String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(20)))?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    }

    /// The pods that run, as `/pods` shows them: name -> (UID, the
    /// container's ID). A failed request fails the test: it is no absence.
    fn running(&self) -> BTreeMap<String, (String, String)> {
        let out = self.try_get("/pods").unwrap_or_else(|e| panic!("GET /pods: no answer: {e}"));
        let body = match out.split_once("\r\n\r\n") {
            Some((head, body)) if head.starts_with("HTTP/1.1 200 ") => body,
            _ => panic!("GET /pods: {out}"),
        };
        let list: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("/pods: {e}: {body}"));
        let items = list["items"].as_array().unwrap_or_else(|| panic!("/pods without items: {body}"));
        items
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .filter_map(|p| {
                let c = &p["status"]["containerStatuses"][0];
                c["state"]["running"].is_object().then(|| {
                    let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
                    (s(&p["metadata"]["name"]), (s(&p["metadata"]["uid"]), s(&c["containerID"])))
                })
            })
            .collect()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = podwarden::sys::kill(self.child.id() as i32, libc::SIGTERM);
        poll_until(Duration::from_secs(10), || self.child.try_wait().ok().flatten().is_some());
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- podwarden log ----\n{}", self.log());
        }
    }
}

/// The manifest directory disappears under a running agent (renamed away,
/// as a tool replacing it would): its pods keep running, untouched, for as
/// long as it is missing, the agent saying so once; back, it is read again.
#[test]
fn missing_directory_keeps_pods_as_they_are() {
    let d = TempDir::new("gone");
    let manifests = d.0.join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    let quick = |n: &str| pod_yaml(n).replace("spec:\n", "spec:\n  terminationGracePeriodSeconds: 1\n");
    for n in ["a", "b"] {
        std::fs::write(manifests.join(format!("{n}.yaml")), quick(n)).unwrap();
    }
    let agent = Daemon::start(&d, &manifests);
    let mut before = BTreeMap::new();
    wait_for("pods a and b running", Duration::from_secs(20), || {
        before = agent.running();
        before.len() == 2
    });
    assert!(before.values().all(|(uid, id)| !uid.is_empty() && !id.is_empty()), "{before:?}");

    let away = d.0.join("manifests.away");
    std::fs::rename(&manifests, &away).unwrap();
    // the scan its inotify event asks for, then ten periodic rescans
    assert_holds_for("pods a and b desired and running in their containers", Duration::from_secs(3), || {
        agent.running() == before
    });
    let said = format!("cannot read staticPodPath {}: ", manifests.display());
    let log = agent.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(&said)).collect();
    assert_eq!(lines.len(), 1, "said once while it lasts: {lines:?}\n{log}");
    assert!(lines[0].ends_with("; keeping the pods as they are"), "{}", lines[0]);

    // back, with a third manifest: read again, a and b left as they were
    std::fs::write(away.join("c.yaml"), quick("c")).unwrap();
    std::fs::rename(&away, &manifests).unwrap();
    let mut now = BTreeMap::new();
    wait_for("pod c running", Duration::from_secs(20), || {
        now = agent.running();
        now.contains_key("c")
    });
    assert_eq!((&now["a"], &now["b"]), (&before["a"], &before["b"]), "a and b untouched");
}

#[test]
fn watcher_picks_up_changes_through_inotify_long_before_the_rescan() {
    let d = TempDir::new("watch");
    let seen: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let (s2, e2) = (seen.clone(), errors.clone());
    let handle = start_watcher(
        FileSource::new(&d.0, "node"),
        Duration::from_secs(3600), // the periodic rescan never comes
        move |pods, _| s2.lock().push(names(&pods)),
        move |file, msg| e2.lock().push(format!("{file}: {msg}")),
    )
    .unwrap();
    wait_for("initial scan", Duration::from_secs(2), || !seen.lock().is_empty());
    // atomic write (rename into place), as `podwarden apply` and editors do
    let tmp = d.0.join(".new.tmp");
    std::fs::write(&tmp, pod_yaml("fresh")).unwrap();
    std::fs::rename(&tmp, d.0.join("fresh.yaml")).unwrap();
    wait_for("inotify pick-up", Duration::from_secs(2), || {
        seen.lock().last().is_some_and(|l| l == &vec!["fresh".to_string()])
    });
    std::fs::write(d.0.join("bad.json"), "{").unwrap();
    wait_for("error reported", Duration::from_secs(2), || !errors.lock().is_empty());
    assert!(errors.lock()[0].contains("bad.json"));
    std::fs::remove_file(d.0.join("fresh.yaml")).unwrap();
    wait_for("removal", Duration::from_secs(2), || seen.lock().last().is_some_and(|l| l.is_empty()));
    // SIGHUP-style rescan on demand
    let before = seen.lock().len();
    handle.rescan();
    wait_for("rescan", Duration::from_secs(2), || seen.lock().len() > before);
    drop(handle); // stops and joins the thread
}

fn cm(name: &str, value: &str, extra: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\n{extra}data: {{k: \"{value}\"}}\n")
}

fn object_values(r: &podwarden::agent::source::ScanReport) -> Vec<(String, String)> {
    r.objects
        .as_ref()
        .unwrap()
        .values()
        .map(|o| (o.key.name.clone(), String::from_utf8_lossy(&o.data["k"]).into_owned()))
        .collect()
}

#[test]
fn config_maps_in_files_of_their_own_or_beside_a_pod() {
    let d = TempDir::new("objects");
    std::fs::write(d.0.join("a.yaml"), cm("app", "1", "")).unwrap();
    std::fs::write(d.0.join("p.yaml"), format!("{}---\n{}", pod_yaml("p"), cm("side", "s", ""))).unwrap();
    let mut s = FileSource::new(&d.0, "node");
    let r = s.scan();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.pods.as_ref().unwrap().len(), 1);
    assert_eq!(object_values(&r), vec![("app".into(), "1".into()), ("side".into(), "s".into())]);
    // a second file defining the same object: the first keeps it, reported once
    std::fs::write(d.0.join("0-dup.yaml"), cm("app", "dup", "")).unwrap();
    let r = s.scan();
    assert_eq!(object_values(&r)[0], ("app".into(), "1".into()));
    assert!(r.errors.iter().any(|(f, m)| f.ends_with("0-dup.yaml") && m.contains("already defined")), "{:?}", r.errors);
    assert!(s.scan().errors.is_empty(), "reported once");
    std::fs::remove_file(d.0.join("0-dup.yaml")).unwrap();
    // a broken edit keeps the last valid version and touches nothing else
    std::fs::write(d.0.join("a.yaml"), cm("app", "2", "").replace("data: {k:", "data: {'bad key':")).unwrap();
    let r = s.scan();
    assert_eq!(object_values(&r), vec![("app".into(), "1".into()), ("side".into(), "s".into())]);
    assert!(
        r.errors.iter().any(|(f, m)| f.ends_with("a.yaml") && m.contains("keeping the last valid")),
        "{:?}",
        r.errors
    );
    assert_eq!(r.pods.as_ref().unwrap().len(), 1);
    // a valid edit replaces it
    std::fs::write(d.0.join("a.yaml"), cm("app", "2", "")).unwrap();
    assert_eq!(object_values(&s.scan())[0], ("app".into(), "2".into()));
    // an immutable object keeps its first version
    std::fs::write(d.0.join("i.yaml"), cm("frozen", "1", "immutable: true\n")).unwrap();
    s.scan();
    std::fs::write(d.0.join("i.yaml"), cm("frozen", "2", "immutable: true\n")).unwrap();
    let r = s.scan();
    assert!(object_values(&r).contains(&("frozen".into(), "1".into())));
    assert!(r.errors.iter().any(|(_, m)| m.contains("immutable")), "{:?}", r.errors);
    // removed with its file
    std::fs::remove_file(d.0.join("p.yaml")).unwrap();
    let r = s.scan();
    assert!(r.pods.unwrap().is_empty());
    assert!(!object_values(&s.scan()).iter().any(|(n, _)| n == "side"));
}

//! The real binary's exit statuses (podwarden(8), EXIT STATUS): 78 for a bad
//! config, 69 when `run` cannot reach the runtime or a client cannot reach
//! the agent, 77 when the agent refuses the caller, 1 for everything else
//! (kubectl's status for a pod not found or an invalid manifest). The
//! daemon runs on the simulated runtime (`fake://`): no containerd, no bus.

mod common;

use common::EVICTION;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{TempDir, wait_for};

const BIN: &str = env!("CARGO_BIN_EXE_podwarden");

/// `podwarden ARGS` as uid:gid `as_user` (none: root): (status, stderr).
fn podwarden(as_user: Option<(u32, u32)>, args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = match as_user {
        Some((uid, gid)) => {
            let mut c = Command::new("setpriv");
            c.args([format!("--reuid={uid}"), format!("--regid={gid}"), "--clear-groups".into(), BIN.into()]);
            c
        }
        None => Command::new(BIN),
    };
    let out = cmd.args(args).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `podwarden run` on the fake runtime; SIGTERM and reaped on drop.
struct Daemon {
    child: Child,
    socket: PathBuf,
    manifests: PathBuf,
}

impl Daemon {
    fn start(d: &Path, extra: &str) -> Self {
        let manifests = d.join("manifests");
        std::fs::create_dir_all(&manifests).unwrap();
        let socket = d.join("run/api.sock");
        let config = d.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "staticPodPath: {}\ncontainerRuntimeEndpoint: fake://\nrootDir: {}\napiSocket: {}\npodLogsDir: {}\n\
                 readOnlyPort: 0\nport: 0\n{EVICTION}{extra}",
                manifests.display(),
                d.join("root").display(),
                socket.display(),
                d.join("logs").display()
            ),
        )
        .unwrap();
        let child = Command::new(BIN)
            .args(["run", "--config", config.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let daemon = Daemon { child, socket, manifests };
        wait_for("the API answers", Duration::from_secs(10), || {
            podwarden(None, &["version", "--socket", daemon.sock()]).0 == Some(0)
        });
        daemon
    }

    fn sock(&self) -> &str {
        self.socket.to_str().unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = podwarden::sys::kill(self.child.id() as i32, libc::SIGTERM);
        let _ = self.child.wait();
    }
}

#[test]
fn a_bad_config_exits_78() {
    let d = TempDir::new("exit-config");
    let config = d.0.join("config.yaml");
    std::fs::write(&config, "syncFrequency: sometimes\n").unwrap();
    let (code, err) = podwarden(None, &["run", "--config", config.to_str().unwrap()]);
    assert_eq!(code, Some(78), "{err}");
    assert!(err.contains("field syncFrequency: \"sometimes\" is invalid"), "{err}");
    let (code, err) = podwarden(None, &["run", "--config", d.0.join("missing.yaml").to_str().unwrap()]);
    assert_eq!(code, Some(78), "an unreadable config: {err}");
    // validate reads the config too
    let pod = d.0.join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: i\n",
    )
    .unwrap();
    let (code, err) = podwarden(None, &["validate", "--config", config.to_str().unwrap(), pod.to_str().unwrap()]);
    assert_eq!(code, Some(78), "{err}");
    // an invalid manifest (with a good config) is a plain failure
    let good = d.0.join("good.yaml");
    std::fs::write(&good, "nodeName: n\n").unwrap();
    std::fs::write(&pod, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: Bad_Name\n").unwrap();
    let (code, err) = podwarden(None, &["validate", "--config", good.to_str().unwrap(), pod.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
}

#[test]
fn run_without_its_runtime_exits_69() {
    let d = TempDir::new("exit-runtime");
    let config = d.0.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "containerRuntimeEndpoint: unix://{}/nonexistent.sock\nrootDir: {}\napiSocket: {}/api.sock\nport: 0\nreadOnlyPort: 0\n",
            d.0.display(),
            d.0.join("root").display(),
            d.0.display()
        ),
    )
    .unwrap();
    let (code, err) = podwarden(None, &["run", "--config", config.to_str().unwrap()]);
    assert_eq!(code, Some(69), "{err}");
    assert!(err.contains("nonexistent.sock") && err.contains("is containerd running?"), "{err}");
}

#[test]
fn a_client_that_cannot_reach_the_agent_exits_69() {
    let d = TempDir::new("exit-nosock");
    let missing = d.0.join("missing.sock");
    for args in [&["get", "pods"][..], &["node"], &["apply", "-f", "-"], &["delete", "pod", "x"], &["version"]] {
        let mut args = args.to_vec();
        args.extend(["--socket", missing.to_str().unwrap()]);
        let (code, err) = podwarden(None, &args);
        assert_eq!(code, Some(69), "{args:?}: {err}");
        assert!(err.contains("does not exist"), "{args:?}: {err}");
    }
    // a socket file nobody listens on (the agent is gone)
    let stale = d.0.join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let (code, err) = podwarden(None, &["get", "pods", "--socket", stale.to_str().unwrap()]);
    assert_eq!(code, Some(69), "{err}");
    assert!(err.contains("nothing listens"), "{err}");
}

#[test]
fn refused_callers_exit_77_and_other_failures_1() {
    let d = TempDir::new("exit-refused");
    let a = Daemon::start(&d.0, "");
    let nobody = Some((65534, 65534));
    // the socket's mode keeps other users out
    let (code, err) = podwarden(nobody, &["get", "pods", "--socket", a.sock()]);
    assert_eq!(code, Some(77), "{err}");
    assert!(err.contains("permission denied"), "{err}");
    // past the mode, the peer check refuses them
    std::fs::set_permissions(&a.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, err) = podwarden(nobody, &["get", "pods", "--socket", a.sock()]);
    assert_eq!(code, Some(77), "{err}");
    assert!(err.contains("refused this client") && err.contains("uid 65534 is not root"), "{err}");
    // the agent answered, and the pod is not there: kubectl's 1
    let (code, err) = podwarden(None, &["get", "pod", "nope", "--socket", a.sock()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("pod default/nope not found"), "{err}");
    let (code, err) = podwarden(None, &["delete", "pod", "nope", "--socket", a.sock()]);
    assert_eq!(code, Some(1), "{err}");
    // an invalid manifest: 1
    let bad = d.0.join("bad.yaml");
    std::fs::write(&bad, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: Bad_Name\n").unwrap();
    let (code, err) = podwarden(None, &["apply", "-f", bad.to_str().unwrap(), "--socket", a.sock()]);
    assert_eq!(code, Some(1), "{err}");
    // a usage error: 1
    let (code, err) = podwarden(None, &["get", "pods", "-o", "table", "--socket", a.sock()]);
    assert_eq!(code, Some(1), "{err}");
}

#[test]
fn an_apply_pod_security_forbids_exits_77() {
    let d = TempDir::new("exit-pss");
    let a = Daemon::start(&d.0, "apiGroup: nogroup\n");
    let member = Some((65534, 65534));
    let nosy = d.0.join("nosy.yaml");
    std::fs::write(
        &nosy,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: nosy\nspec:\n  hostPID: true\n  containers:\n  - name: c\n    image: busybox:1\n",
    )
    .unwrap();
    std::fs::set_permissions(&d.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&nosy, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, err) = podwarden(member, &["apply", "-f", nosy.to_str().unwrap(), "--socket", a.sock()]);
    assert_eq!(code, Some(77), "{err}");
    assert_eq!(
        err,
        "podwarden: pods \"nosy\" is forbidden: violates PodSecurity \"baseline:latest\": host namespaces (hostPID=true)\n"
    );
    assert!(std::fs::read_dir(&a.manifests).unwrap().next().is_none(), "nothing was written");
    // the member is let in otherwise: a pod its level allows is created
    let fine = d.0.join("fine.yaml");
    std::fs::write(
        &fine,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: fine\nspec:\n  containers:\n  - name: c\n    image: busybox:1\n",
    )
    .unwrap();
    std::fs::set_permissions(&fine, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, err) = podwarden(member, &["apply", "-f", fine.to_str().unwrap(), "--socket", a.sock()]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn help_and_the_man_page_document_each_status() {
    let out = Command::new(BIN).arg("help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let man = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/podwarden.8")).unwrap();
    let section = man.split(".SH EXIT STATUS").nth(1).and_then(|s| s.split(".SH ").next()).expect("EXIT STATUS");
    for (code, what) in [(1, "not found"), (69, "runtime"), (70, "panicked"), (77, "apiGroup"), (78, "config")] {
        let line = help.lines().find(|l| l.starts_with(&format!("  {code:<3} "))).unwrap_or_default();
        assert!(line.contains(what), "podwarden help: status {code} ({what}) in\n{help}");
        assert!(section.contains(&format!(".B {code}\n")), "podwarden.8 EXIT STATUS: {code}");
    }
    assert_eq!(i32::from(podwarden::cli::exit::SOFTWARE), podwarden::base::thread::PANIC_EXIT_CODE);
}

//! Hostile input to the local API and to the files it reads: FIFOs,
//! devices and symlinks where manifests and logs are expected, a container
//! that writes 2 GiB where the agent reads, `apply` aimed at another pod's
//! file or over the size limit, floods of refused peers, `delete` while a
//! container start hangs. Each case asserts the exact error, that nothing
//! hangs, that what used to wait for something slow (a start, refused
//! peers) comes at once, and that the agent stays healthy (`/healthz`)
//! with bounded RSS.
//!
//! Most cases run the real binary on the simulated runtime (`fake://`);
//! `delete_during_a_hanging_start_on_containerd` runs the agent in-process
//! against the private containerd of `scripts/e2e-env.sh up`, so it must
//! run under the e2e lock (`flock /tmp/podwarden-e2e.lock`).

mod agent;
mod common;

use common::EVICTION;
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{TempDir, wait_for};
use podwarden::runtime::fake::{FakeRuntime, Op};

const BIN: &str = env!("CARGO_BIN_EXE_podwarden");
/// A CLI call still running after this waits for what never comes (a
/// FIFO's writer, the end of /dev/zero): it is killed and the case fails.
/// Far above what any call here takes, even spawned on a loaded machine;
/// a call that instead runs into the client's 30 s deadline fails on its
/// message. Timings are not asserted on spawned calls.
const HUNG: Duration = Duration::from_secs(20);
/// An in-process API call that must not wait for what the case makes
/// slow: 5x below the pod workers' start-gate wait (5 s), the longest a
/// kill waits for a container start in flight (a delete, or a call behind
/// it, that waits for the kill takes that); further below the other waits
/// (each case says which).
const AT_ONCE: Duration = Duration::from_secs(1);
/// Bound on how much a hostile input may move the agent's RSS.
const RSS_BOUND_KIB: u64 = 16 * 1024;

/// The cases in this binary run one at a time: the in-process ones measure
/// this process's RSS.
static SERIAL: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

fn pod(name: &str, ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: busybox:1\n"
    )
}

fn mkfifo(p: &Path) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    podwarden::sys::mkfifo(&c, 0o666).unwrap_or_else(|e| panic!("mkfifo {}: {e}", p.display()));
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or(0)
}

/// The real binary on `fake://`.
struct Daemon {
    dir: TempDir,
    child: Child,
    port: u16,
}

impl Daemon {
    fn start(tag: &str) -> Self {
        let dir = TempDir::new(&format!("hostile-{tag}"));
        std::fs::create_dir_all(dir.0.join("manifests")).unwrap();
        let port = free_port();
        let config = dir.0.join("config.yaml");
        // containerLogMaxSize far above the 2 GiB log that
        // logs_of_a_fifo_device_symlink_or_huge_file_fail_or_answer_at_once
        // reads: the log monitor rotates a log at twice the limit, and in a
        // new container's first second at half of it (4Gi was not enough)
        std::fs::write(
            &config,
            format!(
                "staticPodPath: {m}\ncontainerRuntimeEndpoint: fake://\nrootDir: {d}/root\napiSocket: {d}/api.sock\npodLogsDir: {d}/logs\nnodeName: hostile\ncontainerLogMaxSize: 16Gi\nfileCheckFrequency: 1h\nhousekeepingInterval: 200ms\naddress: 127.0.0.1\nport: 0\nreadOnlyPort: {port}\n{EVICTION}",
                m = dir.0.join("manifests").display(),
                d = dir.0.display(),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.0.join("podwarden.log")).unwrap();
        let child = Command::new(BIN)
            .args(["run", "--config", config.to_str().unwrap()])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let d = Daemon { dir, child, port };
        wait_for("the agent's /healthz", Duration::from_secs(20), || d.healthz());
        d
    }

    fn manifests(&self) -> PathBuf {
        self.dir.0.join("manifests")
    }

    fn socket(&self) -> PathBuf {
        self.dir.0.join("api.sock")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("podwarden.log")).unwrap_or_default()
    }

    fn get(&self, path: &str) -> Option<String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let (head, body) = out.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.1 200").then(|| body.to_string())
    }

    fn healthz(&self) -> bool {
        self.get("/healthz").is_some()
    }

    fn rss(&self) -> u64 {
        rss_kib(self.child.id())
    }

    /// `podwarden ARGS --socket S`: (exit code, stdout, stderr); killed,
    /// and the case failed, if it is not back within [`HUNG`].
    fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let mut child = Command::new(BIN)
            .args(args)
            .arg("--socket")
            .arg(self.socket())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let drain = |mut r: Box<dyn Read + Send>| {
            podwarden::base::thread::spawn("cli-output", None, move || {
                let mut b = Vec::new();
                let _ = r.read_to_end(&mut b);
                String::from_utf8_lossy(&b).into_owned()
            })
            .unwrap()
        };
        let out = drain(Box::new(child.stdout.take().unwrap()));
        let err = drain(Box::new(child.stderr.take().unwrap()));
        let t = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if t.elapsed() > HUNG {
                let _ = child.kill();
                let _ = child.wait();
                panic!("podwarden {args:?} hung: still running after {HUNG:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        (status.code().unwrap_or(-1), out.join().unwrap(), err.join().unwrap())
    }

    /// A call that must fail with `want` in its message.
    fn fails(&self, args: &[&str], want: &str) {
        let (code, out, err) = self.cli(args);
        assert_eq!(code, 1, "podwarden {args:?} should fail: {out}{err}");
        assert!(err.contains(want), "podwarden {args:?}: {err:?} does not say {want:?}");
    }

    fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.cli(args);
        assert_eq!(code, 0, "podwarden {args:?} failed: {err}");
        out
    }

    fn uid(&self, ns: &str, name: &str) -> String {
        let mut uid = String::new();
        wait_for(&format!("pod {ns}/{name} in /pods"), Duration::from_secs(10), || {
            let v: serde_json::Value = serde_json::from_str(&self.get("/pods").unwrap_or_default()).unwrap_or_default();
            uid = v["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["metadata"]["name"] == name && p["metadata"]["namespace"] == ns)
                .and_then(|p| p["metadata"]["uid"].as_str())
                .unwrap_or_default()
                .to_string();
            !uid.is_empty()
        });
        uid
    }

    /// Healthy, answering the API, RSS within the bound of `before`.
    fn still_healthy(&self, before_kib: u64) {
        assert!(self.healthz(), "/healthz fails:\n{}", self.log());
        self.ok(&["version"]);
        let now = self.rss();
        assert!(now < before_kib + RSS_BOUND_KIB, "RSS grew from {before_kib} KiB to {now} KiB");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- podwarden log ----\n{}", self.log());
        }
    }
}

#[test]
fn fifo_device_and_escaping_symlinks_in_static_pod_path_are_refused_by_name() {
    let _serial = SERIAL.lock();
    let d = Daemon::start("manifests");
    let rss = d.rss();
    let m = d.manifests();
    let outside = d.dir.0.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), "token-s3cr3t-value\n").unwrap();
    mkfifo(&m.join("fifo.yaml"));
    std::os::unix::fs::symlink("/dev/zero", m.join("zero.yaml")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), m.join("shadow.yaml")).unwrap();
    std::os::unix::fs::symlink(&outside, m.join("outdir")).unwrap();
    // a symlink that stays inside is followed, as the kubelet does
    std::fs::create_dir_all(m.join("versions")).unwrap();
    std::fs::write(m.join("versions/web.yaml.v1"), pod("web", "default")).unwrap();
    std::os::unix::fs::symlink("versions/web.yaml.v1", m.join("web.yaml")).unwrap();
    d.ok(&["get", "pods"]); // rescan nudge not needed: inotify
    d.uid("default", "web");
    let events = || d.ok(&["events", "-A"]);
    wait_for("the three refusals as events", Duration::from_secs(10), || {
        let e = events();
        e.contains("fifo.yaml") && e.contains("zero.yaml") && e.contains("shadow.yaml")
    });
    let e = events();
    let p = |f: &str| m.join(f).display().to_string();
    assert!(e.contains(&format!("{}: not a regular file", p("fifo.yaml"))), "{e}");
    assert!(
        e.contains(&format!(
            "{}: cannot read manifest: a symlink leading outside {}; not followed",
            p("zero.yaml"),
            m.display()
        )),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "{}: cannot read manifest: a symlink leading outside {}; not followed",
            p("shadow.yaml"),
            m.display()
        )),
        "{e}"
    );
    assert!(!e.contains("s3cr3t"), "the content behind a symlink leaked into an event: {e}");
    d.still_healthy(rss);
}

#[test]
fn apply_never_replaces_a_file_that_holds_another_pod_and_writes_0600() {
    let _serial = SERIAL.lock();
    let d = Daemon::start("apply");
    let rss = d.rss();
    let m = d.manifests();
    let etcd = pod("etcd-main", "kube-system");
    std::fs::write(m.join("victim.yaml"), &etcd).unwrap();
    d.uid("kube-system", "etcd-main");
    let file = d.dir.0.join("victim-in.yaml");
    std::fs::write(&file, pod("victim", "default")).unwrap();
    let f = file.to_str().unwrap();
    assert_eq!(d.ok(&["apply", "-f", f]), "pod/victim created\n");
    assert_eq!(std::fs::read_to_string(m.join("victim.yaml")).unwrap(), etcd, "etcd-main's manifest was replaced");
    let written = m.join("default_victim.yaml");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), pod("victim", "default"));
    assert_eq!(std::fs::metadata(&written).unwrap().permissions().mode() & 0o777, 0o600);
    d.uid("default", "victim");
    // applied again: the same file, found through the pod
    assert_eq!(d.ok(&["apply", "-f", f]), "pod/victim unchanged\n");
    std::fs::write(&file, pod("victim", "default").replace("busybox:1", "busybox:2")).unwrap();
    assert_eq!(d.ok(&["apply", "-f", f]), "pod/victim configured\n");
    assert!(std::fs::read_to_string(&written).unwrap().contains("busybox:2"));
    assert_eq!(std::fs::read_to_string(m.join("victim.yaml")).unwrap(), etcd);
    // a FIFO or a link to /dev/zero under the pod's file name is neither
    // read nor replaced
    mkfifo(&m.join("fifo.yaml"));
    std::os::unix::fs::symlink("/dev/zero", m.join("zero.yaml")).unwrap();
    for name in ["fifo", "zero"] {
        std::fs::write(&file, pod(name, "default")).unwrap();
        assert_eq!(d.ok(&["apply", "-f", f]), format!("pod/{name} created\n"));
        assert!(m.join(format!("default_{name}.yaml")).is_file());
    }
    assert!(std::fs::symlink_metadata(m.join("zero.yaml")).unwrap().file_type().is_symlink());
    // every name taken by another pod: a clear refusal naming the files
    std::fs::write(m.join("kube-system_api.yaml"), pod("other", "kube-system")).unwrap();
    for i in 2..=9 {
        std::fs::write(m.join(format!("kube-system_api-{i}.yaml")), pod(&format!("other{i}"), "kube-system")).unwrap();
    }
    std::fs::write(&file, pod("api", "kube-system")).unwrap();
    d.fails(
        &["apply", "-f", f],
        &format!(
            "pod kube-system/api: no free manifest file for it in {}: {} holds pod kube-system/other; ",
            m.display(),
            m.join("kube-system_api.yaml").display()
        ),
    );
    d.still_healthy(rss);
}

#[test]
fn apply_over_the_size_limit_is_refused_by_the_client_and_the_server() {
    let _serial = SERIAL.lock();
    let d = Daemon::start("apply-big");
    let rss = d.rss();
    let file = d.dir.0.join("big.yaml");
    let mut big = pod("big", "default");
    big.push_str(&format!("# {}\n", "x".repeat(1 << 20)));
    std::fs::write(&file, &big).unwrap();
    d.fails(
        &["apply", "-f", file.to_str().unwrap()],
        &format!("apply: {}: manifest is over the limit of 1048576 bytes", file.display()),
    );
    // past the client: the daemon names the limit too
    let c = podwarden::cli::client::Client::connect(d.socket().to_str().unwrap()).unwrap();
    let e = c.apply(big.clone().into_bytes(), "big.yaml").unwrap_err().to_string();
    assert_eq!(e, format!("big.yaml: manifest is {} bytes, over the limit of 1048576 bytes", big.len()));
    // /dev/zero as the file: the client reads one byte over the limit
    d.fails(&["apply", "-f", "/dev/zero"], "apply: /dev/zero: manifest is over the limit of 1048576 bytes");
    d.still_healthy(rss);
}

#[test]
fn logs_of_a_fifo_device_symlink_or_huge_file_fail_or_answer_at_once() {
    let _serial = SERIAL.lock();
    let d = Daemon::start("logs");
    let rss = d.rss();
    std::fs::write(d.manifests().join("web.yaml"), pod("web", "default")).unwrap();
    let uid = d.uid("default", "web");
    let dir = d.dir.0.join("logs").join(format!("default_web_{uid}")).join("c");
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("0.log");
    let secret = d.dir.0.join("secret");
    std::fs::write(&secret, "2026-01-01T00:00:00Z stdout F token-s3cr3t\n").unwrap();
    for follow in [false, true] {
        let args: Vec<&str> = if follow { vec!["logs", "web", "-f"] } else { vec!["logs", "web", "--tail", "5"] };
        mkfifo(&log);
        d.fails(
            &args,
            &format!(
                "container \"c\" in pod default/web: cannot read its log: {}: not a regular file (a FIFO); not read",
                log.display()
            ),
        );
        std::fs::remove_file(&log).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &log).unwrap();
        d.fails(&args, &format!("{}: is a symlink; not followed", log.display()));
        std::fs::remove_file(&log).unwrap();
        std::os::unix::fs::symlink(&secret, &log).unwrap();
        let (code, out, err) = d.cli(&args);
        assert_eq!(code, 1);
        assert!(!out.contains("s3cr3t") && err.contains("is a symlink; not followed"), "{out}{err}");
        std::fs::remove_file(&log).unwrap();
    }
    // the container directory swapped for a symlink out of podLogsDir
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir_all(d.dir.0.join("elsewhere")).unwrap();
    std::fs::write(d.dir.0.join("elsewhere/0.log"), "2026-01-01T00:00:00Z stdout F token-s3cr3t\n").unwrap();
    std::os::unix::fs::symlink(d.dir.0.join("elsewhere"), &dir).unwrap();
    d.fails(&["logs", "web"], &format!("{}: is a symlink; not followed", dir.display()));
    std::fs::remove_file(&dir).unwrap();
    // a 2 GiB (sparse) log: a tail reads only its end
    std::fs::create_dir_all(&dir).unwrap();
    let f = std::fs::File::create(&log).unwrap();
    f.set_len(2 << 30).unwrap();
    (&f).write_all(b"").unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .unwrap()
        .write_all(b"\n2026-01-01T00:00:00Z stdout F the end\n")
        .unwrap();
    assert_eq!(d.ok(&["logs", "web", "--tail", "1"]), "the end\n");
    d.still_healthy(rss);
}

/// The flood of refused peers, run as another user by
/// `two_hundred_refused_peers_do_not_delay_a_root_call`: 200 connections,
/// each sending an HTTP/2 preface, held (unread) until stdin closes.
const FLOOD: &str = r#"
import socket, sys
held = []
for _ in range(200):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    try:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
    except OSError:
        pass
    held.append(s)
print("connected", len(held), flush=True)
sys.stdin.readline()
"#;

#[test]
fn two_hundred_refused_peers_do_not_delay_a_root_call() {
    let _serial = SERIAL.lock();
    let d = Daemon::start("refused");
    let rss = d.rss();
    // opened up so other users reach the peer check (it refuses them)
    std::fs::set_permissions(d.socket(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut flood = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", FLOOD])
        .arg(d.socket())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("setpriv and /usr/bin/python3 (scripts/logind-env.sh up installs it)");
    let mut out = std::io::BufReader::new(flood.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("connected ") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0, "the flood helper did not start");
    }
    assert!(line.trim().ends_with("connected 200"), "{line}");
    // in-process (a spawn's own time is not the agent's): a refusal that
    // costs the accept loop 50 ms, as it once did, holds a root call 200 x
    // 50 ms = 10 s behind the flood, 10x AT_ONCE
    let t = Instant::now();
    let version = podwarden::cli::client::Client::connect(d.socket().to_str().unwrap()).and_then(|c| c.version());
    let took = t.elapsed();
    eprintln!("a root call after 200 refused peers took {took:?}");
    assert!(version.is_ok(), "{version:?}");
    assert!(took < AT_ONCE, "a root call waited {took:?} behind 200 refused peers");
    drop(flood.stdin.take());
    let _ = flood.wait();
    // the warning about refused peers is rate-limited
    let refusals = d.log().matches("refused a connection").count();
    assert!((1..=2).contains(&refusals), "{refusals} warning lines for 200 refused peers:\n{}", d.log());
    d.still_healthy(rss);
}

/// The agent in-process on the fake runtime, with its API on a socket.
struct InProcess {
    dir: TempDir,
    fake: Arc<FakeRuntime>,
    running: Option<podwarden::cli::daemon::Running>,
}

impl InProcess {
    fn start(tag: &str) -> Self {
        let dir = TempDir::new(&format!("hostile-{tag}"));
        std::fs::create_dir_all(dir.0.join("manifests")).unwrap();
        let config = podwarden::config::Config::parse(
            "test",
            &format!(
                "staticPodPath: {d}/manifests\ncontainerRuntimeEndpoint: fake://\nrootDir: {d}/root\napiSocket: {d}/api.sock\npodLogsDir: {d}/logs\nnodeName: hostile\nhousekeepingInterval: 200ms\nsyncFrequency: 1s\nport: 0\nreadOnlyPort: 0\n{EVICTION}",
                d = dir.0.display()
            ),
        )
        .unwrap();
        let fake = Arc::new(FakeRuntime::new());
        let running = podwarden::cli::daemon::start(&config, fake.clone(), "fake://").unwrap();
        InProcess { dir, fake, running: Some(running) }
    }

    fn client(&self) -> podwarden::cli::client::Client {
        podwarden::cli::client::Client::connect(self.dir.0.join("api.sock").to_str().unwrap()).unwrap()
    }

    fn agent(&self) -> &podwarden::agent::manager::Agent {
        &self.running.as_ref().unwrap().parts.agent
    }

    fn parts(&self) -> &podwarden::agent::Parts {
        &self.running.as_ref().unwrap().parts
    }

    fn uid(&self, name: &str) -> String {
        let mut uid = String::new();
        wait_for(&format!("pod {name}"), Duration::from_secs(10), || {
            uid = self
                .agent()
                .desired()
                .into_iter()
                .find(|d| podwarden::model::name(&d.pod) == name)
                .map(|d| podwarden::model::uid(&d.pod).to_string())
                .unwrap_or_default();
            !uid.is_empty()
        });
        uid
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            r.stop();
        }
    }
}

#[test]
fn delete_during_a_slow_start_answers_at_once_and_other_calls_go_on() {
    let _serial = SERIAL.lock();
    let a = InProcess::start("slow-start");
    // longer than the start-gate wait (5 s): a delete, or a call behind
    // it, that waited for the kill would take all of that wait
    let slow_start = Duration::from_secs(10);
    a.fake.set_latency(Op::StartContainer, slow_start);
    std::fs::write(a.dir.0.join("manifests/slow.yaml"), pod("slow", "default")).unwrap();
    let uid = a.uid("slow");
    wait_for("StartContainer in flight", Duration::from_secs(10), || {
        !a.fake.calls_for(&uid, Op::StartContainer).is_empty()
    });
    let c = a.client();
    let t = Instant::now();
    let r = c.delete("default", "slow", Some(0)).unwrap();
    let took = t.elapsed();
    eprintln!("delete during a {slow_start:?} start took {took:?}");
    assert!(took < AT_ONCE, "delete waited {took:?} for the container start");
    assert!(r.manifest_path.ends_with("manifests/slow.yaml"), "{}", r.manifest_path);
    // other calls are not held up meanwhile
    let t = Instant::now();
    c.version().unwrap();
    c.list_pods("").unwrap();
    assert!(t.elapsed() < AT_ONCE, "API calls waited {:?}", t.elapsed());
    // and the kill still happens once the start returns
    wait_for("slow's containers stopped", slow_start + Duration::from_secs(15), || a.fake.live_containers(&uid) == 0);
}

#[test]
fn a_2_gib_termination_log_moves_rss_by_less_than_1_mib() {
    let _serial = SERIAL.lock();
    let a = InProcess::start("termlog");
    std::fs::write(
        a.dir.0.join("manifests/big.yaml"),
        pod("big", "default").replace("  containers:\n", "  restartPolicy: Never\n  containers:\n"),
    )
    .unwrap();
    let uid = a.uid("big");
    wait_for("big running", Duration::from_secs(10), || a.fake.live_containers(&uid) == 1);
    let file = a.dir.0.join("root/pods").join(&uid).join("containers/c/0/termination-log");
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o666, "the kubelet's mode: any container user writes it");
    // what a container writing 2 GiB leaves: sparse, so no disk is used
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.set_len(2 << 30).unwrap();
    std::fs::OpenOptions::new().append(true).open(&file).unwrap().write_all(b"the last words\n").unwrap();
    let me = std::process::id();
    let before = rss_kib(me);
    // (live_containers counts a created one too: the exit waits for it to run)
    wait_for("big's container exits", Duration::from_secs(10), || a.fake.exit_container(&uid, "c", 1));
    let mut msg = String::new();
    wait_for("the termination message", Duration::from_secs(10), || {
        msg = a
            .parts()
            .statuses
            .get(&uid)
            .and_then(|s| s.container_statuses)
            .into_iter()
            .flatten()
            .find_map(|c| c.state.and_then(|s| s.terminated).and_then(|t| t.message))
            .unwrap_or_default();
        !msg.is_empty()
    });
    let grew = rss_kib(me).saturating_sub(before);
    eprintln!("a 2 GiB termination-log: RSS moved by {grew} KiB");
    // verbatim, as the kubelet keeps it: the trailing newline too
    assert!(msg.ends_with("the last words\n"), "{:?}", &msg[msg.len().saturating_sub(40)..]);
    assert!(msg.len() <= 4096, "{}", msg.len());
    assert!(grew < 1024, "reading a 2 GiB termination-log moved RSS by {grew} KiB");
}

/// The containerd case: containerd's StartContainer opens the container's
/// log file for writing, so a FIFO planted there makes the start hang
/// inside containerd until someone reads it. `delete` then must answer at
/// once, and the CRI calls of everyone else must go on (they shared one
/// completion-queue thread with the API handlers, which the kill blocked).
#[test]
fn delete_during_a_hanging_start_on_containerd() {
    use podwarden::runtime::Runtime;
    let _serial = SERIAL.lock();
    let _e2e = agent::SERIAL.lock();
    let cri = agent::cri();
    agent::clear_runtime(&cri);
    let dir = TempDir::new("hostile-containerd");
    let manifests = dir.0.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let config = podwarden::config::Config::parse(
        "test",
        &format!(
            "staticPodPath: {d}/manifests\ncontainerRuntimeEndpoint: unix://{s}\nrootDir: {d}/root\napiSocket: {d}/api.sock\npodLogsDir: {d}/logs\nnodeName: e2e\nhousekeepingInterval: 500ms\nport: 0\nreadOnlyPort: 0\n{EVICTION}",
            d = dir.0.display(),
            s = agent::socket()
        ),
    )
    .unwrap();
    let runtime = Arc::new(
        podwarden::runtime::cri::CriRuntime::connect(&format!("unix://{}", agent::socket()), Duration::from_secs(5))
            .unwrap(),
    );
    let running = podwarden::cli::daemon::start(&config, runtime, "containerd://").unwrap();
    let yaml = agent::pod_yaml("stuck", "  terminationGracePeriodSeconds: 1\n", agent::TRAPPING);
    let path = manifests.join("stuck.yaml");
    let uid = podwarden::model::uid(
        &podwarden::model::manifest::parse(path.to_str().unwrap(), yaml.as_bytes(), "e2e").unwrap(),
    )
    .to_string();
    let log_dir = dir.0.join("logs").join(format!("e2e_stuck_{uid}")).join("main");
    std::fs::create_dir_all(&log_dir).unwrap();
    let fifo = log_dir.join("0.log");
    mkfifo(&fifo);
    std::fs::write(&path, &yaml).unwrap();
    // the container is created; its start hangs on the FIFO in containerd
    wait_for("stuck's container created", Duration::from_secs(60), || {
        cri.pod_status(&agent::call(), &uid)
            .is_ok_and(|rp| rp.containers.iter().any(|c| c.state == agent::ContainerState::Created))
    });
    wait_for("containerd blocked opening the FIFO", Duration::from_secs(10), fifo_writer_waiting);
    let c = podwarden::cli::client::Client::connect(dir.0.join("api.sock").to_str().unwrap()).unwrap();
    // logs of the FIFO: an error at once (and the FIFO is not opened); a
    // read of it would wait for the runtime's writes, up to the call's 30 s
    // deadline
    let t = Instant::now();
    let e = c
        .logs(&podwarden::api::pb::api::LogsRequest {
            pod: Some(podwarden::api::pb::api::PodRef {
                namespace: "e2e".into(),
                name: "stuck".into(),
                ..Default::default()
            })
            .into(),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
    assert!(t.elapsed() < AT_ONCE);
    assert!(e.ends_with(&format!("{}: not a regular file (a FIFO); not read", fifo.display())), "{e}");
    assert!(fifo_writer_waiting(), "reading the logs opened the FIFO");
    let other =
        podwarden::runtime::cri::CriRuntime::connect(&format!("unix://{}", agent::socket()), Duration::from_secs(5))
            .unwrap();
    let deleting = {
        let c = podwarden::cli::client::Client::connect(dir.0.join("api.sock").to_str().unwrap()).unwrap();
        podwarden::base::thread::spawn("delete", None, move || {
            let t = Instant::now();
            let r = c.delete("e2e", "stuck", Some(0)).map(|_| ()).map_err(|e| e.to_string());
            (t.elapsed(), r)
        })
        .unwrap()
    };
    // meanwhile this process's own CRI calls (the same gRPC environment as
    // the agent's CRI client) and API calls go on: measured over 1.5 s. A
    // delete, or a call, held by the kill waits out the start-gate wait
    // (5 s) for the hanging start
    let window = Instant::now() + Duration::from_millis(1500);
    let (mut slowest, mut failed) = (Duration::ZERO, Vec::new());
    while Instant::now() < window {
        let t = Instant::now();
        failed.extend(other.list_pods(&agent::call()).err().map(|e| e.to_string()));
        failed.extend(c.version().err().map(|e| e.to_string()));
        slowest = slowest.max(t.elapsed());
    }
    let (took, deleted) = deleting.join().unwrap();
    // release containerd before anything is asserted: read the FIFO; the
    // pod is then stopped
    let reader = std::fs::OpenOptions::new().read(true).custom_flags_nonblock().open(&fifo).unwrap();
    eprintln!("delete during a hanging start took {took:?}; slowest CRI+API call meanwhile {slowest:?}");
    assert_eq!(deleted, Ok(()));
    assert_eq!(failed, Vec::<String>::new(), "CRI and API calls failed during the delete");
    assert!(took < AT_ONCE, "delete waited {took:?} for the hanging start");
    assert!(slowest < AT_ONCE, "CRI and API calls waited {slowest:?} during the delete");
    wait_for("stuck removed from containerd", Duration::from_secs(60), || {
        cri.pod_status(&agent::call(), &uid).is_ok_and(|rp| rp.sandboxes.is_empty() && rp.containers.is_empty())
    });
    drop(reader);
    running.stop();
}

trait NonBlock {
    fn custom_flags_nonblock(&mut self) -> &mut Self;
}

impl NonBlock for std::fs::OpenOptions {
    fn custom_flags_nonblock(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::custom_flags(self, libc::O_NONBLOCK)
    }
}

/// A thread of containerd waits in the kernel to open a FIFO (for writing:
/// the log file of the container it starts).
fn fifo_writer_waiting() -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else { return false };
    procs
        .flatten()
        .filter(|p| std::fs::read_to_string(p.path().join("comm")).is_ok_and(|c| c.trim() == "containerd"))
        .any(|p| {
            std::fs::read_dir(p.path().join("task")).into_iter().flatten().flatten().any(|t| {
                std::fs::read_to_string(t.path().join("wchan"))
                    .is_ok_and(|w| w.contains("fifo_open") || w.contains("wait_for_partner"))
            })
        })
}

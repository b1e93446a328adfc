//! What the benches against the real control plane of `scripts/cluster-env.sh
//! up` share: the cluster's admin client, a node joined with `podwarden join`
//! and run as `podwarden run` (its directory, log and clean-up), containerd's
//! pods of a namespace, and the API server's audit log.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use podwarden::cluster::http::Client;
use podwarden::cluster::kubeconfig::Kubeconfig;
use podwarden::runtime::Runtime;
use podwarden::runtime::cri::CriRuntime;
use serde_json::{Value, json};

use super::{IMAGE, call};

/// Where a bench's node lives.
pub struct Spot {
    /// The node's name.
    pub node: &'static str,
    /// The namespace of the bench's pods.
    pub ns: &'static str,
    /// The bench's directory (fixed, so a later run finds what an
    /// interrupted one left): config, kubeconfigs, manifests, the agent's
    /// root and log.
    pub work: &'static str,
    /// The node's `maxPods`.
    pub max_pods: usize,
    /// How to prepare what the bench needs (said when it is missing).
    pub prepare: &'static str,
}

impl Spot {
    pub fn work(&self) -> PathBuf {
        PathBuf::from(self.work)
    }

    /// The end of the agent's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.work().join("agent.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

pub fn secs_env(name: &str, default: u64) -> Duration {
    Duration::from_secs(std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default))
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Nearest-rank percentile `p` (0..=100).
pub fn percentile(v: &[f64], p: usize) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[(v.len() * p).div_ceil(100).max(1) - 1]
}

pub fn round(v: f64, decimals: i32) -> Value {
    let f = 10f64.powi(decimals);
    json!((v * f).round() / f)
}

/// Until `cond`, every `every`; a panic naming `what` after `within`.
pub fn wait(what: &str, within: Duration, every: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < end, "{what}: not within {within:?}");
        std::thread::sleep(every);
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

// ---- the control plane ----

/// What `scripts/cluster-env.sh env` prints, and the admin's client.
pub struct Cluster {
    pub server: String,
    /// The same API server behind the port `scripts/cluster-env.sh
    /// partition cut|heal` silences and opens again.
    pub partitionable: String,
    pub token: String,
    pub ca_hash: String,
    pub audit_log: PathBuf,
    pub admin: Client,
    /// The admin's kubeconfig (for kubectl).
    pub admin_kubeconfig: PathBuf,
    /// The cluster's CA certificate.
    pub ca: PathBuf,
    /// The nodes' routable address (the API server calls a node there).
    pub node_ip: String,
}

pub fn cluster(spot: &Spot) -> Cluster {
    let prepare = spot.prepare;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cluster-env.sh");
    let out = Command::new(&script).arg("env").output().unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let var = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("PODWARDEN_CLUSTER_{k}=")))
            .map(str::to_string)
            .unwrap_or_else(|| {
                panic!(
                    "no control plane (`scripts/cluster-env.sh env` prints no PODWARDEN_CLUSTER_{k}: {}): {prepare}",
                    String::from_utf8_lossy(&out.stderr).trim()
                )
            })
    };
    let admin_path = PathBuf::from(var("ADMIN_KUBECONFIG"));
    let admin = Kubeconfig::read(&admin_path)
        .and_then(|k| k.client())
        .unwrap_or_else(|e| panic!("the admin kubeconfig {}: {e}: {prepare}", admin_path.display()));
    match admin.get("/readyz") {
        Ok(r) if r.status == 200 => {}
        Ok(r) => panic!("the API server is not ready (/readyz: HTTP {} {}): {prepare}", r.status, r.text()),
        Err(e) => panic!("the API server does not answer ({e}): {prepare}"),
    }
    let audit_log = PathBuf::from(var("AUDIT_LOG"));
    assert!(audit_log.exists(), "the API server's audit log {} is missing: {prepare}", audit_log.display());
    Cluster {
        server: var("SERVER"),
        partitionable: var("PARTITIONABLE_SERVER"),
        token: var("TOKEN"),
        ca_hash: var("CA_HASH"),
        audit_log,
        admin,
        admin_kubeconfig: admin_path,
        ca: PathBuf::from(var("CA")),
        node_ip: var("NODE_IP"),
    }
}

/// `method path` as the admin, with a JSON body: the status and the body
/// as JSON (`Null` when it is not).
pub fn api(c: &Client, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let r = match body {
        None if method == "GET" => c.get(path),
        _ => c.send(method, path, "application/json", body.map(Value::to_string).unwrap_or_default().as_bytes()),
    }
    .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    (r.status, serde_json::from_slice(&r.body).unwrap_or(Value::Null))
}

/// As [`api`], and a panic unless the status is one of `ok`.
pub fn api_ok(c: &Client, method: &str, path: &str, body: Option<&Value>, ok: &[u16]) -> Value {
    let (status, v) = api(c, method, path, body);
    assert!(ok.contains(&status), "{method} {path}: HTTP {status}: {v}");
    v
}

/// The items of a list.
pub fn items(v: &Value) -> Vec<Value> {
    v["items"].as_array().cloned().unwrap_or_default()
}

/// The pods of namespace `ns` the API has, of label selector `selector`.
pub fn api_pods(c: &Client, ns: &str, selector: &str) -> Vec<Value> {
    let path = format!("/api/v1/namespaces/{ns}/pods?labelSelector={selector}");
    items(&api_ok(c, "GET", &path, None, &[200]))
}

/// Whether Node `node` exists, and whether it is Ready.
pub fn node_state(c: &Client, node: &str) -> (bool, bool) {
    let (status, n) = api(c, "GET", &format!("/api/v1/nodes/{node}"), None);
    let ready = n["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
    (status == 200, status == 200 && ready)
}

/// The namespace, once its default service account is there (the API
/// refuses pods before).
pub fn make_namespace(c: &Cluster, ns: &str) {
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    api_ok(&c.admin, "POST", "/api/v1/namespaces", Some(&body), &[201]);
    wait("the namespace's default service account", Duration::from_secs(60), Duration::from_millis(100), || {
        api(&c.admin, "GET", &format!("/api/v1/namespaces/{ns}/serviceaccounts/default"), None).0 == 200
    });
}

// ---- the containerd ----

pub fn e2e_socket() -> String {
    std::env::var("PODWARDEN_E2E_SOCKET").unwrap_or_else(|_| "/run/podwarden-e2e/containerd.sock".into())
}

pub fn cri(spot: &Spot) -> CriRuntime {
    let (socket, prepare) = (e2e_socket(), spot.prepare);
    assert!(Path::new(&socket).exists(), "{socket} is missing: {prepare}");
    let cri = CriRuntime::connect(&format!("unix://{socket}"), Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("containerd at {socket}: {e}: {prepare}"));
    let image = cri.image_status(&call(), IMAGE).unwrap_or_else(|e| panic!("containerd at {socket}: {e}: {prepare}"));
    assert!(image.is_some(), "containerd has no {IMAGE}: {prepare}");
    cri
}

/// Containerd's pods (sandboxes or containers) of namespace `ns`: their
/// UIDs.
pub fn runtime_pods(cri: &CriRuntime, ns: &str) -> Vec<String> {
    let pods = cri.list_pods(&call()).unwrap_or_else(|e| panic!("list containerd's pods: {e}"));
    pods.into_iter()
        .filter(|p| p.namespace == ns && (!p.sandboxes.is_empty() || !p.containers.is_empty()))
        .map(|p| p.uid)
        .collect()
}

/// Stop and remove containerd's pods of namespace `ns` (an agent that is
/// gone left them; a reboot would). Never panics.
pub fn remove_runtime_pods(cri: &CriRuntime, ns: &str) {
    let Ok(pods) = cri.list_pods(&call()) else { return };
    for p in pods.iter().filter(|p| p.namespace == ns) {
        super::remove_pod(cri, p);
    }
}

// ---- the node ----

/// The node: its agent and directory. Dropped, everything the bench made
/// is removed (by force: the pods are deleted with grace 0).
pub struct Node {
    pub spot: &'static Spot,
    pub cri: CriRuntime,
    pub admin: Client,
    child: Option<Child>,
    /// `podwarden run`'s binary and arguments (to start it again).
    run: (String, Vec<String>),
    /// The read-only port (`/pods`).
    pub read_only: SocketAddr,
}

impl Node {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the agent runs").id()
    }

    /// The agent still runs (a panic with its log's end if not).
    pub fn check_alive(&mut self) {
        if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            panic!("podwarden run exited ({status}); its log ends:\n{}", self.spot.log_tail());
        }
    }

    /// `podwarden run` started (again), its log appended to.
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "the agent already runs");
        let dir = self.spot.work();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("agent.log")).unwrap();
        let child = Command::new(&self.run.0)
            .args(&self.run.1)
            // warnings, unless PODWARDEN_BENCH_LOG says otherwise (a `RUST_LOG` filter)
            .env("RUST_LOG", std::env::var("PODWARDEN_BENCH_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        std::fs::write(dir.join("agent.pid"), child.id().to_string()).unwrap();
        self.child = Some(child);
    }

    /// The agent killed with SIGKILL (a crash, or a power cut with
    /// [`remove_runtime_pods`] after).
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Remove the static pods and delete the namespace's pods by force,
    /// wait (at most `within`) for the agent to stop them, stop the agent,
    /// remove what containerd still has of the namespace, delete the Node
    /// and the namespace. Never panics: a failure is printed.
    pub fn force_clean(&mut self, within: Duration) {
        let (ns, node) = (self.spot.ns, self.spot.node);
        for e in std::fs::read_dir(self.spot.work().join("manifests")).into_iter().flatten().flatten() {
            let _ = std::fs::remove_file(e.path());
        }
        let _ = self.admin.send(
            "DELETE",
            &format!("/api/v1/namespaces/{ns}/pods"),
            "application/json",
            json!({"gracePeriodSeconds": 0}).to_string().as_bytes(),
        );
        let _ = self.admin.send("DELETE", &format!("/api/v1/namespaces/{ns}"), "application/json", b"");
        let end = Instant::now() + within;
        while self.child.is_some() && Instant::now() < end {
            match self.cri.list_pods(&call()) {
                Ok(pods) if !pods.iter().any(|p| p.namespace == ns && !p.sandboxes.is_empty()) => break,
                _ => std::thread::sleep(Duration::from_millis(500)),
            }
        }
        self.kill9();
        let _ = std::fs::remove_file(self.spot.work().join("agent.pid"));
        remove_runtime_pods(&self.cri, ns);
        let _ = self.admin.send("DELETE", &format!("/api/v1/nodes/{node}"), "application/json", b"");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("cleaning up after a failure; the agent's log ends:\n{}", self.spot.log_tail());
        }
        self.force_clean(Duration::from_secs(60));
        let _ = std::fs::remove_dir_all(self.spot.work());
    }
}

/// What an interrupted run left: its agent (named by its pid file, and
/// only if that process runs this bench's config), its Node, namespace and
/// pods. Waits until the namespace is gone.
pub fn clean_leftovers(c: &Cluster, cri: &CriRuntime, spot: &Spot) {
    let (work, ns, node) = (spot.work(), spot.ns, spot.node);
    let config = work.join("config.yaml");
    if let Some(pid) = std::fs::read_to_string(work.join("agent.pid")).ok().and_then(|s| s.trim().parse::<u32>().ok()) {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(config.to_str().unwrap()) {
            println!("stopping the agent an earlier run left (pid {pid})");
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            wait("the earlier run's agent gone", Duration::from_secs(10), Duration::from_millis(100), || {
                !Path::new(&format!("/proc/{pid}")).exists()
            });
        }
    }
    let (status, _) = api(&c.admin, "GET", &format!("/api/v1/namespaces/{ns}"), None);
    if status == 200 {
        println!("removing namespace {ns} an earlier run left");
        let _ =
            api(&c.admin, "DELETE", &format!("/api/v1/namespaces/{ns}/pods"), Some(&json!({"gracePeriodSeconds": 0})));
        let _ = api(&c.admin, "DELETE", &format!("/api/v1/namespaces/{ns}"), None);
    }
    let _ = api(&c.admin, "DELETE", &format!("/api/v1/nodes/{node}"), None);
    remove_runtime_pods(cri, ns);
    assert!(runtime_pods(cri, ns).is_empty(), "containerd's pods of {ns} an earlier run left cannot be removed");
    wait(
        &format!("namespace {ns} of an earlier run gone"),
        Duration::from_secs(120),
        Duration::from_millis(500),
        || api(&c.admin, "GET", &format!("/api/v1/namespaces/{ns}"), None).0 == 404,
    );
    wait(&format!("node {node} of an earlier run gone"), Duration::from_secs(30), Duration::from_millis(200), || {
        !node_state(&c.admin, node).0
    });
    let _ = std::fs::remove_dir_all(work);
}

/// `podwarden join` against `server`, then `podwarden run` as the spot's
/// node serving on `address` until the Node is Ready: the node, and (join
/// command, until registered, until Ready).
pub fn join(
    c: &Cluster,
    cri: CriRuntime,
    bin: &str,
    spot: &'static Spot,
    server: &str,
    address: &str,
) -> (Node, [Duration; 3]) {
    let dir = spot.work();
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    let (boot, kubeconfig, config) = (dir.join("bootstrap.conf"), dir.join("node.conf"), dir.join("config.yaml"));
    let (port, ro) = (free_port(), free_port());
    std::fs::write(
        &config,
        format!(
            "staticPodPath: {0}/manifests\ncontainerRuntimeEndpoint: unix://{1}\nrootDir: {0}/root\npodLogsDir: {0}/logs\n\
             apiSocket: {0}/api.sock\nnodeName: {2}\naddress: {address}\nport: {port}\nreadOnlyPort: {ro}\nmaxPods: {3}\n",
            dir.display(),
            e2e_socket(),
            spot.node,
            spot.max_pods,
        ),
    )
    .unwrap();
    let t0 = Instant::now();
    let out = Command::new(bin)
        .args(["join", "--server", server, "--token", &c.token, "--discovery-token-ca-cert-hash", &c.ca_hash])
        .args(["--bootstrap-kubeconfig", boot.to_str().unwrap(), "--kubeconfig", kubeconfig.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "podwarden join: {}", String::from_utf8_lossy(&out.stderr));
    let joined = t0.elapsed();
    // the bootstrap kubeconfig names the server cluster-info names: the
    // node is to reach it through `server`
    let text = std::fs::read_to_string(&boot).unwrap();
    assert!(text.contains(&c.server), "the bootstrap kubeconfig names no {}: {text}", c.server);
    std::fs::write(&boot, text.replace(&c.server, server)).unwrap();
    let _ = std::fs::remove_file(dir.join("agent.log"));
    let args = [
        "run",
        "--config",
        config.to_str().unwrap(),
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--bootstrap-kubeconfig",
        boot.to_str().unwrap(),
    ];
    let mut node = Node {
        spot,
        cri,
        admin: c.admin.clone(),
        child: None,
        run: (bin.to_string(), args.iter().map(|s| s.to_string()).collect()),
        read_only: SocketAddr::new(address.parse().expect("an IP address"), ro),
    };
    node.spawn();
    let mut registered = None;
    wait(
        "the node Ready in the API after podwarden join",
        Duration::from_secs(120),
        Duration::from_millis(100),
        || {
            node.check_alive();
            let (exists, ready) = node_state(&c.admin, spot.node);
            if exists && registered.is_none() {
                registered = Some(t0.elapsed());
            }
            ready
        },
    );
    let ready = t0.elapsed();
    (node, [joined, registered.unwrap_or(ready), ready])
}

// ---- pods Running, as a watch sees them ----

/// When a watch of a namespace first saw each pod Running (its phase),
/// as an instant and as wall-clock nanoseconds (comparable with
/// containerd's times).
#[derive(Default)]
pub struct Seen {
    running: Mutex<HashMap<String, (Instant, i64)>>,
    changed: Condvar,
}

impl Seen {
    /// When pod `name` was first seen Running, waiting at most `within`.
    pub fn wait(&self, name: &str, within: Duration) -> Option<Instant> {
        self.wait_both(name, within).map(|t| t.0)
    }

    /// [`Self::wait`], with the wall-clock nanoseconds.
    pub fn wait_both(&self, name: &str, within: Duration) -> Option<(Instant, i64)> {
        let end = Instant::now() + within;
        let mut m = self.running.lock();
        loop {
            if let Some(t) = m.get(name) {
                return Some(*t);
            }
            if self.changed.wait_until(&mut m, end).timed_out() {
                return m.get(name).copied();
            }
        }
    }
}

/// A watch of namespace `ns`'s pods (resumed when the server ends it),
/// noting when each is first Running, until `stop`.
pub fn watch_running(admin: Client, ns: &'static str, seen: Arc<Seen>, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    let list_rv = move |admin: &Client| {
        let v = api_ok(admin, "GET", &format!("/api/v1/namespaces/{ns}/pods"), None, &[200]);
        v["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string()
    };
    let mut rv = list_rv(&admin);
    podwarden::base::thread::spawn("bench-watch", None, move || {
        while !stop.load(Ordering::SeqCst) {
            let path = format!("/api/v1/namespaces/{ns}/pods?watch=true&resourceVersion={rv}&timeoutSeconds=1800");
            let mut lines = match admin.stream(&path) {
                Ok(Ok(lines)) => lines,
                Ok(Err(r)) if r.status == 410 => {
                    rv = list_rv(&admin);
                    continue;
                }
                Ok(Err(r)) => panic!("watch of {ns}'s pods: HTTP {}: {}", r.status, r.text()),
                Err(e) => {
                    eprintln!("watch of {ns}'s pods: {e}; again");
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
            };
            let go_on = || !stop.load(Ordering::SeqCst);
            while let Ok(Some(line)) = lines.next(Duration::from_millis(200), Duration::from_secs(3600), &go_on) {
                let at = (Instant::now(), super::now_ns());
                let ev: Value = serde_json::from_slice(&line).unwrap_or(Value::Null);
                if ev["type"] == "ERROR" {
                    rv = list_rv(&admin);
                    break;
                }
                let o = &ev["object"];
                if let Some(v) = o["metadata"]["resourceVersion"].as_str() {
                    rv = v.to_string();
                }
                if o["status"]["phase"] == "Running"
                    && let Some(name) = o["metadata"]["name"].as_str()
                {
                    seen.running.lock().entry(name.to_string()).or_insert(at);
                    seen.changed.notify_all();
                }
            }
        }
    })
    .unwrap()
}

// ---- the audit log ----

/// The whole lines of `path` between byte offsets `from` and `to`, as
/// JSON.
pub fn audit_events(path: &Path, from: u64, to: u64) -> Vec<Value> {
    let mut f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let start = from.saturating_sub(1);
    f.seek(SeekFrom::Start(start)).unwrap();
    let mut buf = Vec::new();
    f.take(to - start).read_to_end(&mut buf).unwrap();
    // from a line's start (the byte before `from` ends a line) to the last
    // whole line
    let begin = if from == 0 { 0 } else { buf.iter().position(|b| *b == b'\n').map_or(buf.len(), |i| i + 1) };
    let end = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    if begin >= end {
        return Vec::new();
    }
    buf[begin..end].split(|b| *b == b'\n').filter_map(|l| serde_json::from_slice::<Value>(l).ok()).collect()
}

pub fn audit_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).len()
}

//! Cluster mode against the real control plane of `scripts/cluster-env.sh
//! up` (kube-apiserver, controller-manager, scheduler, etcd) and the real
//! containerd of `scripts/e2e-env.sh up`, with the release binary
//! (`scripts/bench.sh cluster` prepares all three), all in one run, as node
//! `pw-bench` with its pods in namespace `pw-bench`. The cluster is read
//! with podwarden's own HTTPS client as the cluster's admin (no kubectl: its
//! start would be most of every poll).
//!
//! - `join_to_ready_ms`: from the start of `podwarden join` (discovery, the
//!   bootstrap kubeconfig written) through `podwarden run` (the CSR, its
//!   approval and signing, the Node registered) until the Node's Ready
//!   condition is True in the API, polled every 100 ms
//!   (`join_cmd_ms`: the join command alone; `join_to_registered_ms`: until
//!   the Node exists);
//! - `create_to_running_p50_ms`, `_p99_ms`: 30 bare Pods with `spec.nodeName`
//!   set (no scheduler), from the POST until the API shows them Running,
//!   as this bench's watch of the namespace receives it; `static_p50_ms`,
//!   `_p99_ms`: 30 static pods of the same spec, from the manifest's rename
//!   into `staticPodPath` until the node's own view (its read-only
//!   `/pods`, polled every 20 ms) shows them Running; `api_over_static_ratio`
//!   is the ratio of the p50s. The two kinds are made one pod at a time and
//!   in turn (API first in even rounds, static first in odd ones), so both
//!   see the same node, 0 to 60 pods running; each next pod waits until the
//!   one before is Running (for a static pod: its mirror pod Running in the
//!   API, `static_mirror_p50_ms` from the write) and 500 ms more. p99 of 30
//!   is the nearest rank: the slowest. The pods use the pod network (CNI),
//!   `automountServiceAccountToken: false` (a static pod has no token);
//! - with a Deployment of 110 such pods (`nodeSelector`
//!   `kubernetes.io/hostname: pw-bench`) all Running in the API and 60 s
//!   to settle, a 300 s idle window (`CLUSTER_IDLE_S`) in which this bench
//!   makes no request: `rss_kib_110_cluster`, the median of VmRSS sampled
//!   every second (`_max`); `cpu_core_110_cluster`, utime + stime of the
//!   agent over the window (clock ticks, as the footprint bench), and
//!   `cpu_core_110_cluster_sched`, the scheduler's own count over the same
//!   window (`support::CpuMeter`); `node_requests_per_min_idle`: the
//!   requests of `system:node:pw-bench` in the API server's audit log over
//!   the window, per minute. The audit log has a `ResponseComplete` line
//!   for every request (a watch also a `ResponseStarted` line when it
//!   opens): each request is counted once, at its `ResponseComplete` line,
//!   so a watch counts in the window it ends in, not the one it opens in
//!   (`node_watches_opened_idle` counts the watches opened in the window
//!   beside it). The top request URIs of the window are printed (a pod's
//!   name as `*`), and how many of the 110 pods' resourceVersions changed
//!   in it (`pods_changed_idle`: a status patch that changes nothing
//!   leaves it as it was).
//!
//! Before it runs, whatever an interrupted run left (its agent, Node,
//! namespace, static pods, containerd's pods of the namespace) is removed;
//! after, the namespace is deleted (its pods stopped by the node), then the
//! agent stopped, the Node deleted and containerd checked for the
//! namespace's pods; on a failure the pods are deleted by force. The last
//! line is one JSON object.

use std::collections::{BTreeMap, HashMap};
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

mod support;
use support::{IMAGE, call, cpu_ticks, proc_status, write_atomically};

const NODE: &str = "pw-bench";
const NS: &str = "pw-bench";
/// Pods of the Deployment the footprint and the idle requests are taken with.
const PODS: usize = 110;
/// Pods of each kind the create-to-running latency is taken with.
const ROUNDS: usize = 30;
/// The node's `maxPods`: the 110, with room for a pod still leaving.
const MAX_PODS: usize = 120;
/// The bench's directory (fixed, so a later run finds what an interrupted
/// one left): config, kubeconfigs, manifests, the agent's root and logs.
const WORK: &str = "/tmp/podwarden-bench-cluster";
/// An idle pod: one `sleep` an hour (as the api bench's pods).
const RUN: &str = "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done";
const PREPARE: &str = "run `scripts/e2e-env.sh up` and `scripts/cluster-env.sh up` as root first \
                       (scripts/bench.sh cluster does)";
/// Targets of the issue.
const RSS_KIB_TARGET: f64 = 24576.0;
const CPU_CORE_TARGET: f64 = 0.008;
const REQUESTS_PER_MIN_TARGET: f64 = 8.0;
const RATIO_TARGET: f64 = 1.3;

fn secs_env(name: &str, default: u64) -> Duration {
    Duration::from_secs(std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Nearest-rank percentile `p` (0..=100).
fn percentile(v: &[f64], p: usize) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[(v.len() * p).div_ceil(100).max(1) - 1]
}

/// Until `cond`, every `every`; a panic naming `what` after `within`.
fn wait(what: &str, within: Duration, every: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < end, "{what}: not within {within:?}");
        std::thread::sleep(every);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

// ---- the control plane ----

/// What `scripts/cluster-env.sh env` prints, and the admin's client.
struct Cluster {
    server: String,
    token: String,
    ca_hash: String,
    audit_log: PathBuf,
    admin: Client,
}

fn cluster() -> Cluster {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cluster-env.sh");
    let out = Command::new(&script).arg("env").output().unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let var = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("PODWARDEN_CLUSTER_{k}=")))
            .map(str::to_string)
            .unwrap_or_else(|| {
                panic!(
                    "no control plane (`scripts/cluster-env.sh env` prints no PODWARDEN_CLUSTER_{k}: {}): {PREPARE}",
                    String::from_utf8_lossy(&out.stderr).trim()
                )
            })
    };
    let admin_path = PathBuf::from(var("ADMIN_KUBECONFIG"));
    let admin = Kubeconfig::read(&admin_path)
        .and_then(|k| k.client())
        .unwrap_or_else(|e| panic!("the admin kubeconfig {}: {e}: {PREPARE}", admin_path.display()));
    match admin.get("/readyz") {
        Ok(r) if r.status == 200 => {}
        Ok(r) => panic!("the API server is not ready (/readyz: HTTP {} {}): {PREPARE}", r.status, r.text()),
        Err(e) => panic!("the API server does not answer ({e}): {PREPARE}"),
    }
    let audit_log = PathBuf::from(var("AUDIT_LOG"));
    assert!(audit_log.exists(), "the API server's audit log {} is missing: {PREPARE}", audit_log.display());
    Cluster { server: var("SERVER"), token: var("TOKEN"), ca_hash: var("CA_HASH"), audit_log, admin }
}

/// `method path` as the admin, with a JSON body: the status and the body
/// as JSON (`Null` when it is not).
fn api(c: &Client, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let r = match body {
        None if method == "GET" => c.get(path),
        _ => c.send(method, path, "application/json", body.map(Value::to_string).unwrap_or_default().as_bytes()),
    }
    .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    (r.status, serde_json::from_slice(&r.body).unwrap_or(Value::Null))
}

/// As [`api`], and a panic unless the status is one of `ok`.
fn api_ok(c: &Client, method: &str, path: &str, body: Option<&Value>, ok: &[u16]) -> Value {
    let (status, v) = api(c, method, path, body);
    assert!(ok.contains(&status), "{method} {path}: HTTP {status}: {v}");
    v
}

/// The items of a list.
fn items(v: &Value) -> Vec<Value> {
    v["items"].as_array().cloned().unwrap_or_default()
}

/// The namespace's pods as the API has them.
fn api_pods(c: &Client, selector: &str) -> Vec<Value> {
    let path = format!("/api/v1/namespaces/{NS}/pods?labelSelector={selector}");
    items(&api_ok(c, "GET", &path, None, &[200]))
}

fn running_in_api(p: &Value) -> bool {
    p["status"]["phase"] == "Running" && p["spec"]["nodeName"] == NODE
}

/// Whether the Node exists, and whether it is Ready.
fn node_state(c: &Client) -> (bool, bool) {
    let (status, n) = api(c, "GET", &format!("/api/v1/nodes/{NODE}"), None);
    let ready = n["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
    (status == 200, status == 200 && ready)
}

// ---- the containerd ----

fn cri() -> CriRuntime {
    let socket = std::env::var("PODWARDEN_E2E_SOCKET").unwrap_or_else(|_| "/run/podwarden-e2e/containerd.sock".into());
    assert!(Path::new(&socket).exists(), "{socket} is missing: {PREPARE}");
    let cri = CriRuntime::connect(&format!("unix://{socket}"), Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("containerd at {socket}: {e}: {PREPARE}"));
    let image = cri.image_status(&call(), IMAGE).unwrap_or_else(|e| panic!("containerd at {socket}: {e}: {PREPARE}"));
    assert!(image.is_some(), "containerd has no {IMAGE}: {PREPARE}");
    cri
}

/// Containerd's pods (sandboxes or containers) of the bench's namespace.
fn runtime_pods(cri: &CriRuntime) -> Vec<String> {
    let pods = cri.list_pods(&call()).unwrap_or_else(|e| panic!("list containerd's pods: {e}"));
    pods.into_iter()
        .filter(|p| p.namespace == NS && (!p.sandboxes.is_empty() || !p.containers.is_empty()))
        .map(|p| p.uid)
        .collect()
}

// ---- the node ----

/// The node: its agent and directory. Dropped, everything the bench made
/// is removed (by force: the pods are deleted with grace 0).
struct Node {
    cri: CriRuntime,
    admin: Client,
    child: Option<Child>,
    /// The read-only port (`/pods`).
    read_only: SocketAddr,
}

fn work() -> PathBuf {
    PathBuf::from(WORK)
}

impl Node {
    fn pid(&self) -> u32 {
        self.child.as_ref().expect("the agent runs").id()
    }

    /// The agent still runs (a panic with its log's end if not).
    fn check_alive(&mut self) {
        if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            panic!("podwarden run exited ({status}); its log ends:\n{}", log_tail());
        }
    }

    /// Remove the static pods and delete the namespace's pods by force,
    /// wait (at most `within`) for the agent to stop them, stop the agent,
    /// remove what containerd still has of the namespace, delete the Node
    /// and the namespace. Never panics: a failure is printed.
    fn force_clean(&mut self, within: Duration) {
        for e in std::fs::read_dir(work().join("manifests")).into_iter().flatten().flatten() {
            let _ = std::fs::remove_file(e.path());
        }
        let _ = self.admin.send(
            "DELETE",
            &format!("/api/v1/namespaces/{NS}/pods"),
            "application/json",
            json!({"gracePeriodSeconds": 0}).to_string().as_bytes(),
        );
        let _ = self.admin.send("DELETE", &format!("/api/v1/namespaces/{NS}"), "application/json", b"");
        let end = Instant::now() + within;
        while self.child.is_some() && Instant::now() < end {
            match self.cri.list_pods(&call()) {
                Ok(pods) if !pods.iter().any(|p| p.namespace == NS && !p.sandboxes.is_empty()) => break,
                _ => std::thread::sleep(Duration::from_millis(500)),
            }
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(work().join("agent.pid"));
        remove_runtime_pods(&self.cri);
        let _ = self.admin.send("DELETE", &format!("/api/v1/nodes/{NODE}"), "application/json", b"");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("cluster bench: cleaning up after a failure; the agent's log ends:\n{}", log_tail());
        }
        self.force_clean(Duration::from_secs(60));
        let _ = std::fs::remove_dir_all(work());
    }
}

fn log_tail() -> String {
    let text = std::fs::read_to_string(work().join("agent.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Stop and remove containerd's pods of the namespace (an agent that is
/// gone left them). Never panics.
fn remove_runtime_pods(cri: &CriRuntime) {
    let Ok(pods) = cri.list_pods(&call()) else { return };
    for p in pods.into_iter().filter(|p| p.namespace == NS) {
        for c in &p.containers {
            let _ = cri.stop_container(&call(), &c.id, Duration::ZERO);
            let _ = cri.remove_container(&call(), &c.id);
        }
        for s in &p.sandboxes {
            let _ = cri.stop_sandbox(&call(), &s.id);
            let _ = cri.remove_sandbox(&call(), &s.id);
        }
    }
}

/// What an interrupted run left: its agent (named by its pid file, and
/// only if that process runs this bench's config), its Node, namespace and
/// pods. Waits until the namespace is gone.
fn clean_leftovers(c: &Cluster, cri: &CriRuntime) {
    let config = work().join("config.yaml");
    if let Some(pid) = std::fs::read_to_string(work().join("agent.pid")).ok().and_then(|s| s.trim().parse::<u32>().ok())
    {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(config.to_str().unwrap()) {
            println!("stopping the agent an earlier run left (pid {pid})");
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            wait("the earlier run's agent gone", Duration::from_secs(10), Duration::from_millis(100), || {
                !Path::new(&format!("/proc/{pid}")).exists()
            });
        }
    }
    let (status, _) = api(&c.admin, "GET", &format!("/api/v1/namespaces/{NS}"), None);
    if status == 200 {
        println!("removing namespace {NS} an earlier run left");
        let _ =
            api(&c.admin, "DELETE", &format!("/api/v1/namespaces/{NS}/pods"), Some(&json!({"gracePeriodSeconds": 0})));
        let _ = api(&c.admin, "DELETE", &format!("/api/v1/namespaces/{NS}"), None);
    }
    let _ = api(&c.admin, "DELETE", &format!("/api/v1/nodes/{NODE}"), None);
    remove_runtime_pods(cri);
    assert!(runtime_pods(cri).is_empty(), "containerd's pods of {NS} an earlier run left cannot be removed");
    wait(
        &format!("namespace {NS} of an earlier run gone"),
        Duration::from_secs(120),
        Duration::from_millis(500),
        || api(&c.admin, "GET", &format!("/api/v1/namespaces/{NS}"), None).0 == 404,
    );
    wait(&format!("node {NODE} of an earlier run gone"), Duration::from_secs(30), Duration::from_millis(200), || {
        !node_state(&c.admin).0
    });
    let _ = std::fs::remove_dir_all(work());
}

/// `podwarden join`, then `podwarden run` as node [`NODE`] until the Node
/// is Ready: the node, and (join command, until registered, until Ready).
fn join(c: &Cluster, cri: CriRuntime, bin: &str) -> (Node, [Duration; 3]) {
    let dir = work();
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    let (boot, kubeconfig, config) = (dir.join("bootstrap.conf"), dir.join("node.conf"), dir.join("config.yaml"));
    let (port, ro) = (free_port(), free_port());
    std::fs::write(
        &config,
        format!(
            "staticPodPath: {0}/manifests\ncontainerRuntimeEndpoint: unix://{1}\nrootDir: {0}/root\npodLogsDir: {0}/logs\n\
             apiSocket: {0}/api.sock\nnodeName: {NODE}\naddress: 127.0.0.1\nport: {port}\nreadOnlyPort: {ro}\nmaxPods: {MAX_PODS}\n",
            dir.display(),
            std::env::var("PODWARDEN_E2E_SOCKET").unwrap_or_else(|_| "/run/podwarden-e2e/containerd.sock".into()),
        ),
    )
    .unwrap();
    let t0 = Instant::now();
    let out = Command::new(bin)
        .args(["join", "--server", &c.server, "--token", &c.token, "--discovery-token-ca-cert-hash", &c.ca_hash])
        .args(["--bootstrap-kubeconfig", boot.to_str().unwrap(), "--kubeconfig", kubeconfig.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "podwarden join: {}", String::from_utf8_lossy(&out.stderr));
    let joined = t0.elapsed();
    let log = std::fs::File::create(dir.join("agent.log")).unwrap();
    let child = Command::new(bin)
        .args(["run", "--config", config.to_str().unwrap()])
        .args(["--kubeconfig", kubeconfig.to_str().unwrap(), "--bootstrap-kubeconfig", boot.to_str().unwrap()])
        // warnings, unless PODWARDEN_BENCH_LOG says otherwise (a `RUST_LOG` filter)
        .env("RUST_LOG", std::env::var("PODWARDEN_BENCH_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    std::fs::write(dir.join("agent.pid"), child.id().to_string()).unwrap();
    let mut node =
        Node { cri, admin: c.admin.clone(), child: Some(child), read_only: SocketAddr::from(([127, 0, 0, 1], ro)) };
    let mut registered = None;
    wait(
        "the node Ready in the API after podwarden join",
        Duration::from_secs(120),
        Duration::from_millis(100),
        || {
            node.check_alive();
            let (exists, ready) = node_state(&c.admin);
            if exists && registered.is_none() {
                registered = Some(t0.elapsed());
            }
            ready
        },
    );
    let ready = t0.elapsed();
    (node, [joined, registered.unwrap_or(ready), ready])
}

// ---- create to running ----

/// When this bench's watch of the namespace first saw each pod Running.
#[derive(Default)]
struct Seen {
    running: Mutex<HashMap<String, Instant>>,
    changed: Condvar,
}

impl Seen {
    /// When pod `name` was first seen Running, waiting at most `within`.
    fn wait(&self, name: &str, within: Duration) -> Option<Instant> {
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

/// A watch of the namespace's pods (resumed when the server ends it),
/// noting when each is first Running, until `stop`.
fn watch_running(admin: Client, seen: Arc<Seen>, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    let list_rv = |admin: &Client| {
        let v = api_ok(admin, "GET", &format!("/api/v1/namespaces/{NS}/pods"), None, &[200]);
        v["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string()
    };
    let mut rv = list_rv(&admin);
    podwarden::base::thread::spawn("bench-watch", None, move || {
        while !stop.load(Ordering::SeqCst) {
            let path = format!("/api/v1/namespaces/{NS}/pods?watch=true&resourceVersion={rv}&timeoutSeconds=1800");
            let mut lines = match admin.stream(&path) {
                Ok(Ok(lines)) => lines,
                Ok(Err(r)) if r.status == 410 => {
                    rv = list_rv(&admin);
                    continue;
                }
                Ok(Err(r)) => panic!("watch of {NS}'s pods: HTTP {}: {}", r.status, r.text()),
                Err(e) => {
                    eprintln!("watch of {NS}'s pods: {e}; again");
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
            };
            let go_on = || !stop.load(Ordering::SeqCst);
            while let Ok(Some(line)) = lines.next(Duration::from_millis(200), Duration::from_secs(3600), &go_on) {
                let at = Instant::now();
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

/// The spec of every pod of the bench (API, static, the Deployment's).
fn pod_spec() -> Value {
    json!({
        "automountServiceAccountToken": false,
        "terminationGracePeriodSeconds": 5,
        "containers": [{
            "name": "main", "image": IMAGE, "imagePullPolicy": "Never",
            "command": ["sh", "-c", RUN],
        }],
    })
}

/// Whether the node's `/pods` shows pod `name` (or the static pod's full
/// name `name-NODE`) Running.
fn running_on_node(node: &Node, name: &str) -> bool {
    let full = format!("{name}-{NODE}");
    support::http::get(node.read_only, "/pods", Duration::from_secs(10))
        .filter(|(code, _)| *code == 200)
        .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok())
        .is_some_and(|v| {
            items(&v).iter().any(|p| {
                (p["metadata"]["name"] == name || p["metadata"]["name"] == full.as_str())
                    && p["status"]["phase"] == "Running"
            })
        })
}

/// A bare pod with `spec.nodeName`: from the POST to the watch's Running.
fn api_round(c: &Cluster, seen: &Seen, i: usize) -> f64 {
    let name = format!("api-{i:02}");
    let mut spec = pod_spec();
    spec["nodeName"] = json!(NODE);
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"bench": "api"}},
        "spec": spec,
    });
    let t0 = Instant::now();
    api_ok(&c.admin, "POST", &format!("/api/v1/namespaces/{NS}/pods"), Some(&pod), &[201]);
    let at = seen
        .wait(&name, Duration::from_secs(120))
        .unwrap_or_else(|| panic!("pod {name} from the API: not Running in the API within 120 s"));
    ms(at - t0)
}

/// A static pod: from the manifest's rename to the node's `/pods` showing
/// it Running, and to its mirror pod Running in the API.
fn static_round(node: &mut Node, seen: &Seen, i: usize) -> (f64, f64) {
    let name = format!("st-{i:02}");
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"bench": "static"}},
        "spec": pod_spec(),
    });
    let t0 = Instant::now();
    write_atomically(&work(), &format!("{name}.json"), &pod.to_string());
    let mut local = None;
    wait(
        &format!("static pod {name} Running in the node's /pods"),
        Duration::from_secs(120),
        Duration::from_millis(20),
        || {
            let r = running_on_node(node, &name);
            if r {
                local = Some(t0.elapsed());
            }
            r
        },
    );
    node.check_alive();
    let mirror = format!("{name}-{NODE}");
    let at = seen
        .wait(&mirror, Duration::from_secs(60))
        .unwrap_or_else(|| panic!("the mirror pod {mirror}: not Running in the API within 60 s"));
    (ms(local.unwrap()), ms(at - t0))
}

// ---- the audit log ----

/// The whole lines of `path` between byte offsets `from` and `to`, as
/// JSON.
fn audit_events(path: &Path, from: u64, to: u64) -> Vec<Value> {
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

fn audit_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).len()
}

// ---- the run ----

/// The namespace, once its default service account is there (the API
/// refuses pods before).
fn make_namespace(c: &Cluster) {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    api_ok(&c.admin, "POST", "/api/v1/namespaces", Some(&ns), &[201]);
    wait("the namespace's default service account", Duration::from_secs(60), Duration::from_millis(100), || {
        api(&c.admin, "GET", &format!("/api/v1/namespaces/{NS}/serviceaccounts/default"), None).0 == 200
    });
}

/// Idle figures over `window`: RSS median and max (KiB), threads, CPU in
/// cores by ticks and by the scheduler, and the audit log's byte range.
struct Idle {
    /// The whole machine's busy CPU over the window, in cores.
    host_busy: f64,
    /// Sandboxes of the namespace at the window's start gone at its end
    /// (someone else removed them: the run is not idle).
    sandboxes_lost: usize,
    rss_median: u64,
    rss_max: u64,
    threads: u64,
    cpu_ticks: f64,
    cpu_sched: f64,
    sched_how: &'static str,
    audit: (u64, u64),
    secs: f64,
}

fn idle(node: &mut Node, audit_log: &Path, window: Duration) -> Idle {
    let pid = node.pid();
    let hz = podwarden::sys::clock_ticks_per_second() as f64;
    let meter = support::CpuMeter::attach(pid);
    let audit_from = audit_len(audit_log);
    let before = sandboxes(&node.cri);
    let (t0, c0, s0, h0) = (Instant::now(), cpu_ticks(pid), meter.seconds(), host_busy_ticks());
    let (mut rss, mut threads) = (Vec::new(), 0);
    while t0.elapsed() < window {
        std::thread::sleep(Duration::from_secs(1));
        node.check_alive();
        rss.push(proc_status(pid, "VmRSS:"));
        threads = threads.max(proc_status(pid, "Threads:"));
    }
    let (c1, s1, h1, secs) = (cpu_ticks(pid), meter.seconds(), host_busy_ticks(), t0.elapsed().as_secs_f64());
    let audit_to = audit_len(audit_log);
    let after = sandboxes(&node.cri);
    let sched_how = meter.how();
    drop(meter);
    rss.sort();
    Idle {
        host_busy: (h1 - h0) as f64 / hz / secs,
        sandboxes_lost: before.iter().filter(|id| !after.contains(id)).count(),
        rss_median: rss[rss.len() / 2],
        rss_max: *rss.last().unwrap(),
        threads,
        cpu_ticks: (c1 - c0) as f64 / hz / secs,
        cpu_sched: (s1 - s0) / secs,
        sched_how,
        audit: (audit_from, audit_to),
        secs,
    }
}

/// Busy clock ticks of the whole machine so far (`/proc/stat`: all but
/// idle and iowait).
fn host_busy_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> =
        stat.lines().next().unwrap_or_default().split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is in user)
    f.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, v)| v).sum()
}

/// The ready sandboxes of the namespace in containerd.
fn sandboxes(cri: &CriRuntime) -> Vec<String> {
    let pods = cri.list_pods(&call()).unwrap_or_else(|e| panic!("list containerd's pods: {e}"));
    pods.iter().filter(|p| p.namespace == NS).filter_map(|p| p.ready_sandbox()).map(|s| s.id.clone()).collect()
}

fn round(v: f64, decimals: i32) -> Value {
    let f = 10f64.powi(decimals);
    json!((v * f).round() / f)
}

fn main() {
    // a failure's message as the output's last line too (scripts/bench.sh
    // keeps stdout's tail only)
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        println!("cluster bench failed: {info}");
        default_hook(info);
    }));
    let started = Instant::now();
    let c = cluster();
    let cri = cri();
    let bin = support::bin("cluster");
    let idle_window = secs_env("CLUSTER_IDLE_S", 300);
    let settle = secs_env("CLUSTER_SETTLE_S", 60);
    clean_leftovers(&c, &cri);
    make_namespace(&c);
    println!(
        "setup: node {NODE} ({bin}, maxPods {MAX_PODS}), namespace {NS}; {ROUNDS} bare API pods (spec.nodeName) and \
         {ROUNDS} static pods one at a time in turn; then a Deployment of {PODS} pods; idle window {} s",
        idle_window.as_secs()
    );
    let mut out: BTreeMap<&str, Value> = BTreeMap::new();

    // join to Ready
    let (mut node, [joined, registered, ready]) = join(&c, cri, &bin);
    println!(
        "join to Ready: {:.0} ms (the join command {:.0} ms, the Node registered at {:.0} ms)",
        ms(ready),
        ms(joined),
        ms(registered)
    );
    out.insert("join_to_ready_ms", round(ms(ready), 0));
    out.insert("join_cmd_ms", round(ms(joined), 0));
    out.insert("join_to_registered_ms", round(ms(registered), 0));

    // create to running: API pods and static pods in turn
    let seen = Arc::new(Seen::default());
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_running(c.admin.clone(), seen.clone(), stop.clone());
    let (mut api_ms, mut st_ms, mut mirror_ms) = (Vec::new(), Vec::new(), Vec::new());
    let (t_rounds, h_rounds) = (Instant::now(), host_busy_ticks());
    for i in 0..ROUNDS {
        for api_turn in if i % 2 == 0 { [true, false] } else { [false, true] } {
            if api_turn {
                api_ms.push(api_round(&c, &seen, i));
            } else {
                let (s, m) = static_round(&mut node, &seen, i);
                st_ms.push(s);
                mirror_ms.push(m);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    let rounds_busy = (host_busy_ticks() - h_rounds) as f64
        / podwarden::sys::clock_ticks_per_second() as f64
        / t_rounds.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    watcher.join().expect("the bench's watch");
    let (a50, a99, s50, s99) = (median(&api_ms), percentile(&api_ms, 99), median(&st_ms), percentile(&st_ms, 99));
    println!("create to Running, API pods (ms): {api_ms:.0?}");
    println!("write to Running, static pods in /pods (ms): {st_ms:.0?}");
    println!("write to Running, their mirror pods in the API (ms): {mirror_ms:.0?}");
    println!(
        "create to Running: API p50 {a50:.0} ms, p99 {a99:.0} ms; static p50 {s50:.0} ms, p99 {s99:.0} ms \
         (mirror in the API p50 {:.0} ms); ratio of p50s {:.2}; the machine {rounds_busy:.2} cores busy",
        median(&mirror_ms),
        a50 / s50
    );
    out.insert("host_busy_cores_latency", round(rounds_busy, 2));
    out.insert("create_to_running_p50_ms", round(a50, 0));
    out.insert("create_to_running_p99_ms", round(a99, 0));
    out.insert("static_p50_ms", round(s50, 0));
    out.insert("static_p99_ms", round(s99, 0));
    out.insert("static_mirror_p50_ms", round(median(&mirror_ms), 0));
    out.insert("api_minus_static_p50_ms", round(a50 - s50, 0));
    out.insert("api_over_static_ratio", round(a50 / s50, 3));
    out.insert("api_over_static_ratio_ok", json!(a50 / s50 <= RATIO_TARGET));

    // the latency pods leave: static files removed, API pods deleted
    for i in 0..ROUNDS {
        std::fs::remove_file(work().join("manifests").join(format!("st-{i:02}.json"))).unwrap();
    }
    api_ok(&c.admin, "DELETE", &format!("/api/v1/namespaces/{NS}/pods?labelSelector=bench%3Dapi"), None, &[200]);
    let t = Instant::now();
    wait(
        "the latency pods gone from the API and containerd",
        Duration::from_secs(300),
        Duration::from_millis(500),
        || {
            node.check_alive();
            api_pods(&c.admin, "bench").is_empty() && runtime_pods(&node.cri).is_empty()
        },
    );
    println!("the {} latency pods gone from the API and containerd in {:.1} s", 2 * ROUNDS, t.elapsed().as_secs_f64());

    // a Deployment of 110 pods on the node
    let mut template = pod_spec();
    template["nodeSelector"] = json!({"kubernetes.io/hostname": NODE});
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "idle", "namespace": NS},
        "spec": {
            "replicas": PODS,
            "selector": {"matchLabels": {"app": "idle"}},
            "template": {"metadata": {"labels": {"app": "idle"}}, "spec": template},
        },
    });
    let t = Instant::now();
    api_ok(&c.admin, "POST", &format!("/apis/apps/v1/namespaces/{NS}/deployments"), Some(&deployment), &[201]);
    let mut running = 0;
    wait(
        &format!("{PODS} pods of the Deployment Running in the API"),
        Duration::from_secs(900),
        Duration::from_secs(1),
        || {
            node.check_alive();
            running = api_pods(&c.admin, "app%3Didle").iter().filter(|p| running_in_api(p)).count();
            running == PODS
        },
    );
    let all_running = t.elapsed().as_secs_f64();
    let containers = node.cri.list_pods(&call()).unwrap().iter().filter(|p| p.namespace == NS).count();
    println!(
        "{PODS} pods of the Deployment Running in the API after {all_running:.1} s ({containers} pods in containerd); \
         settling {} s",
        settle.as_secs()
    );
    out.insert("all_running_110_s", round(all_running, 1));
    std::thread::sleep(settle);

    // idle: footprint and the node's requests
    // each pod's resourceVersion before and after: a status patch that
    // changes nothing leaves it as it was
    let versions = |pods: &[Value]| -> BTreeMap<String, String> {
        pods.iter()
            .map(|p| {
                let m = &p["metadata"];
                (
                    m["name"].as_str().unwrap_or_default().into(),
                    m["resourceVersion"].as_str().unwrap_or_default().into(),
                )
            })
            .collect()
    };
    let before = versions(&api_pods(&c.admin, "app%3Didle"));
    let w = idle(&mut node, &c.audit_log, idle_window);
    let pods_after = api_pods(&c.admin, "app%3Didle");
    let still = pods_after.iter().filter(|p| running_in_api(p)).count();
    assert_eq!(still, PODS, "pods of the Deployment stopped running in the idle window");
    let after = versions(&pods_after);
    let changed = after.iter().filter(|(name, rv)| before.get(*name) != Some(*rv)).count();
    let user = format!("system:node:{NODE}");
    let events: Vec<Value> = audit_events(&c.audit_log, w.audit.0, w.audit.1)
        .into_iter()
        .filter(|e| e["user"]["username"] == user.as_str())
        .collect();
    let complete: Vec<&Value> = events.iter().filter(|e| e["stage"] == "ResponseComplete").collect();
    let watches_opened = events.iter().filter(|e| e["stage"] == "ResponseStarted" && e["verb"] == "watch").count();
    let mut by_uri: BTreeMap<String, usize> = BTreeMap::new();
    for e in &complete {
        let uri = e["requestURI"].as_str().unwrap_or_default();
        // a pod's name is `*`: one line for the same call about every pod
        let mut path: Vec<&str> = uri.split('?').next().unwrap_or_default().split('/').collect();
        for i in 1..path.len() {
            if path[i - 1] == "pods" {
                path[i] = "*";
            }
        }
        *by_uri.entry(format!("{} {}", e["verb"].as_str().unwrap_or_default(), path.join("/"))).or_default() += 1;
    }
    let mut top: Vec<(String, usize)> = by_uri.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let per_min = complete.len() as f64 * 60.0 / w.secs;
    println!(
        "idle {:.0} s with {PODS} pods: RSS {} KiB (max {}), {} threads, CPU {:.4} cores by ticks, {:.4} by {}; \
         the machine {:.2} cores busy",
        w.secs, w.rss_median, w.rss_max, w.threads, w.cpu_ticks, w.cpu_sched, w.sched_how, w.host_busy
    );
    if w.sandboxes_lost > 0 {
        println!(
            "WARNING: {} of the pods' sandboxes were removed by someone else in the idle window",
            w.sandboxes_lost
        );
    }
    println!(
        "requests of {user} in the idle window: {} ({per_min:.2} a minute; {watches_opened} watches opened); by URI:",
        complete.len()
    );
    for (uri, n) in top.iter().take(8) {
        println!("  {n:>4}  {uri}");
    }
    println!("pods of the Deployment whose resourceVersion changed in the idle window: {changed} of {PODS}");
    out.insert("pods", json!(PODS));
    out.insert("latency_pods_each", json!(ROUNDS));
    out.insert("idle_window_s", round(w.secs, 0));
    out.insert("rss_kib_110_cluster", json!(w.rss_median));
    out.insert("rss_kib_110_cluster_max", json!(w.rss_max));
    out.insert("rss_kib_110_cluster_ok", json!(w.rss_median as f64 <= RSS_KIB_TARGET));
    out.insert("threads_110_cluster", json!(w.threads));
    out.insert("host_busy_cores_idle", round(w.host_busy, 2));
    out.insert("sandboxes_lost_idle", json!(w.sandboxes_lost));
    out.insert("cpu_core_110_cluster", round(w.cpu_ticks, 4));
    out.insert("cpu_core_110_cluster_sched", round(w.cpu_sched, 4));
    out.insert("cpu_core_110_cluster_ok", json!(w.cpu_ticks <= CPU_CORE_TARGET));
    out.insert("node_requests_idle", json!(complete.len()));
    out.insert("node_watches_opened_idle", json!(watches_opened));
    out.insert("pods_changed_idle", json!(changed));
    out.insert("node_requests_per_min_idle", round(per_min, 2));
    out.insert("node_requests_per_min_idle_ok", json!(per_min <= REQUESTS_PER_MIN_TARGET));

    // clean up: the namespace deleted, its pods stopped by the node
    let t = Instant::now();
    api_ok(&c.admin, "DELETE", &format!("/api/v1/namespaces/{NS}"), None, &[200, 202]);
    let end = Instant::now() + Duration::from_secs(300);
    let mut left = usize::MAX;
    while Instant::now() < end {
        left = runtime_pods(&node.cri).len();
        if left == 0 && api(&c.admin, "GET", &format!("/api/v1/namespaces/{NS}"), None).0 == 404 {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let graceful = left == 0;
    if graceful {
        println!("namespace {NS} deleted and its pods gone from containerd in {:.1} s", t.elapsed().as_secs_f64());
    } else {
        println!("namespace {NS}: {left} pods still in containerd after 300 s; deleting by force");
    }
    node.force_clean(Duration::from_secs(120));
    let left = runtime_pods(&node.cri);
    assert!(left.is_empty(), "containerd still has {} pods of {NS} after the clean-up: {left:?}", left.len());
    drop(node);
    out.insert("teardown_graceful", json!(graceful));
    println!("run took {:.0} s", started.elapsed().as_secs_f64());
    println!("{}", serde_json::to_string(&out).unwrap());
}

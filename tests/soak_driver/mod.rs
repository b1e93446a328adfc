//! The soak run that `tests/soak.rs` (500 lifecycles, two faults of each
//! kind) and `benches/soak.rs` (`scripts/bench.sh soak`, 10,000) share:
//! the real `podwarden` binary on the private containerd
//! (`scripts/e2e-env.sh up`) holding an inhibitor lock of the private
//! logind (`scripts/logind-env.sh up`), pods created and removed by
//! manifests, edits and kubectl by a few worker threads at once, and faults
//! at lifecycle counts drawn from a seeded generator: containerd killed and
//! started again, the agent killed with SIGKILL and started again, logind
//! killed and started again, a manifest written half and then completed.
//! After each fault and at the end the workers pause and the runtime must
//! converge within [`SETTLE`]: the pods whose manifests exist run exactly
//! once and nothing else is left (sandboxes, containers, mounts, pod
//! cgroups, CNI IPs, pod and log directories); what is left after that is
//! counted and printed by kind.
//!
//! The agent's RSS, anonymous RSS and open fds are sampled at set
//! lifecycle counts with no soak pod left: the workers end their pods and
//! park, the agent idles past its heap trim, then the driver looks. Every
//! sample thus sees the same node, and what grows from one to the next is
//! what the agent kept.
//!
//! containerd 1.6 can lose a task's exit when it is killed in the middle
//! of a stop: the shim says the process ended, the CRI shows it running,
//! and the pod stays terminating until containerd restarts. Such a pod is
//! no leak of podwarden's: the driver asks containerd's task service,
//! counts the exit as containerd's, requires that the agent's log said so,
//! and mends it as an administrator would (containerd restarted). What is
//! still left after that is podwarden's and counted as above.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use podwarden::runtime::cri::CriRuntime;
use podwarden::runtime::{CallCtx, ContainerState, Runtime, RuntimePod};

const IMAGE: &str = "localhost/busybox:e2e";
const NS: &str = "soak";
const SECRET: &str = "soak-creds";
/// How long the runtime has to converge after a fault (and at the end).
pub const SETTLE: Duration = Duration::from_secs(90);
/// How long a settle waits before it asks containerd's task service
/// whether what is left is stuck on an exit containerd lost (a stop asks
/// the shim 5 s after its grace period of 3 s).
const LOST_EXIT_LOOK: Duration = Duration::from_secs(30);
/// The most containerd restarts a run makes to mend lost exits.
const MENDS_MAX: u64 = 20;
/// How long one step of a worker (a pod running, a pod gone) may take.
const STEP: Duration = Duration::from_secs(120);
/// Problems after which a run stops early (each may have cost a [`STEP`]).
const GIVE_UP: usize = 12;
/// How long a sample waits with no pod before it looks: past the agent's
/// heap trim (every 5 s).
const SAMPLE_IDLE: Duration = Duration::from_secs(6);

/// The private containerd's run directory (`scripts/e2e-env.sh`'s
/// `PODWARDEN_E2E_RUN`: a second environment beside the default one).
fn e2e_run() -> String {
    std::env::var("PODWARDEN_E2E_RUN").unwrap_or_else(|_| "/run/podwarden-e2e".into())
}

/// The private logind's directory (`scripts/logind-env.sh`'s
/// `PODWARDEN_LOGIND_DIR`).
fn logind_dir() -> String {
    std::env::var("PODWARDEN_LOGIND_DIR").unwrap_or_else(|_| "/run/podwarden-logind".into())
}

fn bus_address() -> String {
    format!("unix:path={}/system_bus_socket", logind_dir())
}

fn socket() -> String {
    std::env::var("PODWARDEN_E2E_SOCKET").unwrap_or_else(|_| format!("{}/containerd.sock", e2e_run()))
}

/// Fails with how to prepare the environment when containerd or logind is
/// not running.
pub fn require_environment() {
    let s = socket();
    assert!(
        Path::new(&s).exists(),
        "the end-to-end environment is not running ({s} is missing): prepare it with `sudo scripts/e2e-env.sh up` \
         (scripts/test.sh does this before the tests)"
    );
    let bus = format!("{}/system_bus_socket", logind_dir());
    assert!(
        Path::new(&bus).exists(),
        "the logind test environment is not running ({bus} is missing): prepare it with \
         `sudo scripts/logind-env.sh up` (scripts/test.sh does this before the tests)"
    );
}

// ---- the seeded generator ----

/// xorshift64: every choice of a run follows from its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        // splitmix64 of the seed: nearby seeds give unrelated streams, never 0
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    /// True with `pct` percent.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

/// `PODWARDEN_SOAK_SEED`, else the clock.
pub fn seed_from_env() -> u64 {
    std::env::var("PODWARDEN_SOAK_SEED").ok().and_then(|s| s.trim().parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    })
}

// ---- options and report ----

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    Containerd,
    Agent,
    Logind,
    HalfManifest,
}

impl Fault {
    pub const ALL: [Fault; 4] = [Fault::Containerd, Fault::Agent, Fault::Logind, Fault::HalfManifest];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Containerd => "containerd",
            Fault::Agent => "agent",
            Fault::Logind => "logind",
            Fault::HalfManifest => "half_manifest",
        }
    }
}

pub struct Opts {
    /// The podwarden binary.
    pub bin: PathBuf,
    /// The repository (its `scripts/`).
    pub repo: PathBuf,
    pub lifecycles: u64,
    /// Pods in flight at once (one worker thread each).
    pub concurrency: usize,
    pub seed: u64,
    /// How many faults of each kind, in [`Fault::ALL`]'s order.
    pub faults: [u64; 4],
    /// RSS and open fds sampled every this many lifecycles.
    pub sample_every: u64,
}

/// The kinds of leftovers counted, in the report's key order.
pub const LEAK_KINDS: [&str; 6] = ["sandboxes", "containers", "mounts", "cgroups", "ips", "dirs"];

#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub lifecycles: u64,
    pub lifecycles_api: u64,
    pub lifecycles_edit: u64,
    pub faults: BTreeMap<&'static str, u64>,
    /// Distinct leftovers that outlived a settle bound, by kind.
    pub leaks: BTreeMap<&'static str, BTreeSet<String>>,
    /// Pods seen running more than once at a settle check.
    pub duplicates: BTreeSet<String>,
    /// Pods that should have run but did not at a settle check.
    pub missing: BTreeSet<String>,
    /// Other failures (a step that timed out, the lock not held again).
    pub problems: Vec<String>,
    /// Tasks whose exit containerd lost (the shim says they ended, the CRI
    /// shows them running): ID and what it was.
    pub lost_exits: BTreeMap<String, String>,
    /// containerd restarts made to mend lost exits.
    pub mending_restarts: u64,
    /// The agent's RSS and fds, each taken with every pod removed.
    pub samples: Vec<Sample>,
    pub settle_max_s: f64,
    pub wall_s: f64,
    /// The agent's directory (config, log, manifests), kept after a failure.
    pub dir: PathBuf,
    pub log_tail: String,
}

/// One look at the agent, taken with no pod of the soak's left (the
/// workers drained and paused) and the agent idle past its heap trim, so
/// that every sample sees the same node: what grows between samples is
/// what the agent kept.
#[derive(Debug, Default, Clone, Copy)]
pub struct Sample {
    /// Lifecycles ended when it was taken.
    pub at: u64,
    pub pid: u32,
    /// Lifecycles ended when that agent process started.
    pub since: u64,
    /// VmRSS, KiB.
    pub rss: u64,
    /// RssAnon, KiB: the heap and stacks (the rest is the binary's and the
    /// libraries' pages, which grow as more of the code runs once).
    pub anon: u64,
    pub fds: u64,
}

impl Report {
    pub fn leaked(&self, kind: &str) -> u64 {
        self.leaks.get(kind).map_or(0, |s| s.len() as u64)
    }

    pub fn clean(&self) -> bool {
        LEAK_KINDS.iter().all(|k| self.leaked(k) == 0)
            && self.duplicates.is_empty()
            && self.missing.is_empty()
            && self.problems.is_empty()
    }

    pub fn rss_first(&self) -> u64 {
        self.samples.first().map_or(0, |s| s.rss)
    }

    pub fn rss_last(&self) -> u64 {
        self.samples.last().map_or(0, |s| s.rss)
    }

    pub fn rss_max(&self) -> u64 {
        self.samples.iter().map(|s| s.rss).max().unwrap_or(0)
    }

    /// Least-squares slope of RSS (KiB) per 1,000 lifecycles within each
    /// agent process, over its samples from its own `from`th lifecycle on
    /// (each process a group of its own intercept; an agent started again
    /// by a fault begins small and fills its bounded stores anew, as the
    /// first did), and plainly over all samples from the run's `from`th
    /// lifecycle on.
    pub fn rss_slopes(&self, from: u64) -> (f64, f64) {
        self.slopes(from, |s| s.rss)
    }

    /// The samples the within-agent slope uses (see [`Self::rss_slopes`]).
    pub fn slope_points(&self, from: u64) -> usize {
        let mut n: BTreeMap<u32, usize> = BTreeMap::new();
        for s in self.samples.iter().filter(|s| s.at >= s.since + from) {
            *n.entry(s.pid).or_default() += 1;
        }
        n.values().filter(|c| **c >= 2).sum()
    }

    /// [`Self::rss_slopes`] of any figure of the samples.
    fn slopes(&self, from: u64, fig: impl Fn(&Sample) -> u64) -> (f64, f64) {
        let plain = slope(self.samples.iter().filter(|s| s.at >= from).map(|s| (s.at as f64, fig(s) as f64)));
        let pts: Vec<_> = self.samples.iter().filter(|s| s.at >= s.since + from).collect();
        let mut groups: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
        for s in &pts {
            groups.entry(s.pid).or_default().push((s.at as f64, fig(s) as f64));
        }
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for g in groups.values().filter(|g| g.len() >= 2) {
            let n = g.len() as f64;
            let (mx, my) = (g.iter().map(|p| p.0).sum::<f64>() / n, g.iter().map(|p| p.1).sum::<f64>() / n);
            sxy += g.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>();
            sxx += g.iter().map(|p| (p.0 - mx).powi(2)).sum::<f64>();
        }
        let within = if sxx > 0.0 { sxy / sxx * 1000.0 } else { 0.0 };
        (within, plain * 1000.0)
    }

    /// The report's JSON object (one line).
    pub fn json(&self, slope_from: u64) -> String {
        let (within, plain) = self.rss_slopes(slope_from);
        let mut m = serde_json::Map::new();
        let mut put = |k: &str, v: serde_json::Value| {
            m.insert(k.to_string(), v);
        };
        put("seed", self.seed.into());
        put("lifecycles", self.lifecycles.into());
        put("lifecycles_api", self.lifecycles_api.into());
        put("lifecycles_edit", self.lifecycles_edit.into());
        put("faults", self.faults.values().sum::<u64>().into());
        for (k, v) in &self.faults {
            put(&format!("faults_{k}"), (*v).into());
        }
        for k in LEAK_KINDS {
            put(&format!("leaked_{k}"), self.leaked(k).into());
        }
        put("ips_lost_by_containerd", self.leaked("ips_unrecorded").into());
        put("exits_lost_by_containerd", (self.lost_exits.len() as u64).into());
        put("containerd_restarts_to_mend", self.mending_restarts.into());
        put("duplicate_pods", (self.duplicates.len() as u64).into());
        put("missing_pods", (self.missing.len() as u64).into());
        put("problems", (self.problems.len() as u64).into());
        put("rss_kib_first", self.rss_first().into());
        put("rss_kib_last", self.rss_last().into());
        put("rss_kib_max", self.rss_max().into());
        // no slope without points (every agent younger than `slope_from`)
        let points = self.slope_points(slope_from);
        put("rss_slope_kib_per_1k", if points > 0 { round2(within).into() } else { serde_json::Value::Null });
        put("rss_slope_across_restarts_kib_per_1k", round2(plain).into());
        put("rss_slope_from_lifecycle", slope_from.into());
        put("rss_anon_kib_first", self.samples.first().map_or(0, |s| s.anon).into());
        put("rss_anon_kib_last", self.samples.last().map_or(0, |s| s.anon).into());
        let anon = self.slopes(slope_from, |s| s.anon).0;
        put("rss_anon_slope_kib_per_1k", if points > 0 { round2(anon).into() } else { serde_json::Value::Null });
        put("samples", (self.samples.len() as u64).into());
        put("rss_slope_points", (points as u64).into());
        put("fds_last", self.samples.last().map_or(0, |s| s.fds).into());
        put("settle_max_s", round2(self.settle_max_s).into());
        put("wall_s", round2(self.wall_s).into());
        put("lifecycles_per_s", round2(self.lifecycles as f64 / self.wall_s.max(0.001)).into());
        serde_json::Value::Object(m).to_string()
    }

    /// What went wrong, for a failed run: the leftovers, duplicates and
    /// problems, then the agent's log tail.
    pub fn failure_text(&self) -> String {
        let mut s = String::new();
        for (k, items) in &self.leaks {
            for i in items {
                s += &format!("leaked {k}: {i}\n");
            }
        }
        for d in &self.duplicates {
            s += &format!("duplicate: {d}\n");
        }
        for d in &self.missing {
            s += &format!("missing: {d}\n");
        }
        for p in &self.problems {
            s += &format!("problem: {p}\n");
        }
        for (id, what) in &self.lost_exits {
            s += &format!("exit lost by containerd (not counted as a leak): {id}: {what}\n");
        }
        s += &format!("---- podwarden log (tail; all of it in {}) ----\n{}", self.dir.display(), self.log_tail);
        s
    }
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// Least-squares slope of y over x (0 with fewer than two distinct x).
pub fn slope(pts: impl Iterator<Item = (f64, f64)>) -> f64 {
    let pts: Vec<_> = pts.collect();
    let n = pts.len() as f64;
    if pts.len() < 2 {
        return 0.0;
    }
    let (mx, my) = (pts.iter().map(|p| p.0).sum::<f64>() / n, pts.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx == 0.0 {
        return 0.0;
    }
    pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx
}

// ---- the agent process ----

struct AgentProc {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    kube_port: u16,
    child: Option<Child>,
    /// Lifecycles ended when this agent process started.
    since: u64,
}

impl AgentProc {
    fn manifests(&self) -> PathBuf {
        self.dir.join("manifests")
    }

    fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }

    fn config(&self) -> PathBuf {
        self.dir.join("config.yaml")
    }

    /// The agent's config; its disk eviction thresholds are absolute, so
    /// how full the machine's disk is does not decide admission.
    fn write_config(&self) {
        let text = format!(
            "staticPodPath: {}\ncontainerRuntimeEndpoint: unix://{}\nrootDir: {}\napiSocket: {}\npodLogsDir: {}\n\
             nodeName: soak\nfileCheckFrequency: 2s\nsyncFrequency: 10s\naddress: 127.0.0.1\nreadOnlyPort: {}\n\
             port: {}\nlogindDropInDir: {}/logind.conf.d\nshutdownGracePeriod: 10s\n\
             shutdownGracePeriodCriticalPods: 2s\n\
             evictionHard: {{memory.available: 100Mi, nodefs.available: 512Mi, nodefs.inodesFree: 1%, imagefs.available: 512Mi}}\n",
            self.manifests().display(),
            socket(),
            self.root().display(),
            self.dir.join("api.sock").display(),
            self.logs().display(),
            self.port,
            self.kube_port,
            logind_dir()
        );
        std::fs::write(self.config(), text).unwrap();
    }

    fn start(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("podwarden.log")).unwrap();
        let child = Command::new(&self.bin)
            .args(["run", "--config", self.config().to_str().unwrap()])
            .env("RUST_LOG", std::env::var("PODWARDEN_SOAK_LOG").unwrap_or_else(|_| "info".into()))
            .env("DBUS_SYSTEM_BUS_ADDRESS", bus_address())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.bin.display()))?;
        self.child = Some(child);
        let end = Instant::now() + Duration::from_secs(30);
        while Instant::now() < end {
            if self.get("/healthz").is_ok_and(|(c, _)| c == 200) {
                return Ok(());
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().ok().flatten() {
                return Err(format!("the agent exited at its start: {st}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err("the agent's /healthz did not answer 200 within 30 s of its start".into())
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = podwarden::sys::kill(c.id() as i32, libc::SIGTERM);
            let end = Instant::now() + Duration::from_secs(10);
            while Instant::now() < end && c.try_wait().ok().flatten().is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Whether the agent died on its own.
    fn exited(&mut self) -> Option<String> {
        let c = self.child.as_mut()?;
        c.try_wait().ok().flatten().map(|st| st.to_string())
    }

    fn get(&self, path: &str) -> Result<(u16, String), String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| format!("connect: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").map_err(|e| format!("send: {e}"))?;
        let mut out = String::new();
        s.read_to_string(&mut out).map_err(|e| format!("read: {e}"))?;
        let (head, body) = out.split_once("\r\n\r\n").ok_or("no HTTP head")?;
        let code = head.get(9..12).and_then(|c| c.parse().ok()).ok_or("no status")?;
        Ok((code, body.to_string()))
    }

    /// `/node`'s gracefulShutdown.inhibitorLockHeld.
    fn lock_held(&self) -> bool {
        self.get("/node").ok().filter(|(c, _)| *c == 200).is_some_and(|(_, b)| {
            serde_json::from_str::<serde_json::Value>(&b)
                .is_ok_and(|v| v["gracefulShutdown"]["inhibitorLockHeld"] == true)
        })
    }

    fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.join("podwarden.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        // a driver that panics leaves no agent behind
        self.kill9();
    }
}

/// podwarden inhibitor locks logind lists (None: logind did not answer).
fn podwarden_inhibitors() -> Option<usize> {
    let out = Command::new("dbus-send")
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus_address())
        .args(["--system", "--print-reply", "--dest=org.freedesktop.login1", "/org/freedesktop/login1"])
        .arg("org.freedesktop.login1.Manager.ListInhibitors")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.starts_with("method return ").then(|| text.matches("\"podwarden\"").count())
}

fn call() -> CallCtx {
    CallCtx::background(Duration::from_secs(20))
}

fn connect() -> Option<CriRuntime> {
    CriRuntime::connect(&format!("unix://{}", socket()), Duration::from_secs(5)).ok()
}

// ---- pods ----

/// How a pod came and goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// A manifest written (renamed into place) and removed by the driver.
    File,
    /// `kubectl create -f` and `kubectl delete pod` (or its file removed).
    Api,
}

#[derive(Clone, Debug)]
struct PodRun {
    name: String,
    via: Via,
    generation: u64,
    uid: String,
}

fn pod_yaml(name: &str, generation: u64) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {NS}\n  annotations:\n    soak/generation: \"{generation}\"\n\
         spec:\n  terminationGracePeriodSeconds: 3\n  initContainers:\n  - name: init\n    image: {IMAGE}\n    \
         imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"echo {generation} > /work/generation\"]\n    \
         volumeMounts:\n    - name: work\n      mountPath: /work\n  containers:\n  - name: main\n    image: {IMAGE}\n    \
         imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while :; do sleep 1; done\"]\n    \
         readinessProbe:\n      exec:\n        command: [\"cat\", \"/work/generation\", \"/creds/password\"]\n      \
         periodSeconds: 10\n    volumeMounts:\n    - name: work\n      mountPath: /work\n    - name: creds\n      \
         mountPath: /creds\n      readOnly: true\n  volumes:\n  - name: work\n    emptyDir: {{}}\n  - name: creds\n    \
         secret:\n      secretName: {SECRET}\n"
    )
}

fn secret_yaml() -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {SECRET}\n  namespace: {NS}\nstringData:\n  password: hunter2\n"
    )
}

/// A uid's pod runs: a ready sandbox and its main container running.
fn runs(p: &RuntimePod) -> bool {
    p.sandboxes.iter().any(|s| s.ready)
        && p.containers.iter().any(|c| c.name == "main" && c.state == ContainerState::Running)
}

// ---- what containerd holds, as one thread reads it ----

#[derive(Default)]
struct Snapshot {
    seq: u64,
    pods: Arc<Vec<RuntimePod>>,
}

struct Shared {
    agent_dir: PathBuf,
    kubectl: PathBuf,
    target: u64,
    begun: AtomicU64,
    ended: AtomicU64,
    ended_api: AtomicU64,
    ended_edit: AtomicU64,
    stop: AtomicBool,
    snap: Mutex<Snapshot>,
    snap_cv: Condvar,
    /// Paused (the coordinator checks), workers parked, workers running.
    gate: Mutex<(bool, usize, usize)>,
    gate_cv: Condvar,
    /// Set with a pause for a sample: each worker ends its pod before it
    /// parks.
    drain: AtomicBool,
    /// The pods whose manifests exist (should run), by name.
    desired: Mutex<BTreeMap<String, Via>>,
    /// Every uid seen in containerd, with its pod's name.
    seen: Mutex<BTreeMap<String, String>>,
    /// Every sandbox and container ID seen in containerd.
    seen_ids: Mutex<BTreeSet<String>>,
    problems: Mutex<Vec<String>>,
    /// Tasks whose exit containerd lost, by ID (see the module's text).
    lost: Mutex<BTreeMap<String, String>>,
}

impl Shared {
    fn manifests(&self) -> PathBuf {
        self.agent_dir.join("manifests")
    }

    /// Wait (as a worker) until `cond` holds of a snapshot taken after
    /// this call; false after `timeout`.
    fn wait(&self, timeout: Duration, mut cond: impl FnMut(&[RuntimePod]) -> bool) -> bool {
        let end = Instant::now() + timeout;
        let mut s = self.snap.lock();
        let from = s.seq;
        loop {
            if s.seq > from && cond(s.pods.as_slice()) {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            self.snap_cv.wait_until(&mut s, end);
        }
    }

    /// A worker's stop between steps while the coordinator checks; false
    /// once the run stops.
    fn checkpoint(&self) -> bool {
        let mut g = self.gate.lock();
        if g.0 {
            g.1 += 1;
            self.gate_cv.notify_all();
            while g.0 {
                self.gate_cv.wait(&mut g);
            }
            g.1 -= 1;
        }
        !self.stop.load(Ordering::SeqCst)
    }

    fn pause(&self) {
        let mut g = self.gate.lock();
        g.0 = true;
        while g.1 < g.2 {
            self.gate_cv.wait(&mut g);
        }
    }

    fn resume(&self) {
        self.gate.lock().0 = false;
        self.gate_cv.notify_all();
    }

    /// Record `p`; after [`GIVE_UP`] problems the workers stop, so a
    /// broken node fails the run in minutes instead of waiting out every
    /// lifecycle's [`STEP`].
    fn problem(&self, p: String) {
        eprintln!("soak: {p}");
        let mut all = self.problems.lock();
        all.push(p);
        if all.len() == GIVE_UP {
            all.push(format!("{GIVE_UP} problems: the run stopped early"));
            eprintln!("soak: {GIVE_UP} problems: stopping the run early");
            self.stop.store(true, Ordering::SeqCst);
        }
    }

    /// Record exits containerd lost; the agent must have said so (its
    /// stops past their grace period ask the shim, and log each one).
    fn lost_exits_found(&self, lost: Vec<(String, String)>) {
        // a stop asks the shim 5 s after its grace period: give the agent
        // time to have asked
        let said = |id: &str| {
            let end = Instant::now() + Duration::from_secs(30);
            loop {
                let log = std::fs::read_to_string(self.agent_dir.join("podwarden.log")).unwrap_or_default();
                if log.lines().any(|l| l.contains(id) && l.contains("never handled the exit")) {
                    return true;
                }
                if Instant::now() >= end {
                    return false;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        };
        for (id, what) in lost {
            eprintln!("soak: containerd lost the exit of {id}: {what}");
            // the agent asks about a container 5 s past its stop's grace
            // period, about a sandbox only when its stop runs out of time
            // (the runtime request timeout): not always by now
            if !what.starts_with("(sandbox)") && !said(&id) {
                self.problem(format!("containerd lost the exit of {id} ({what}) and the agent's log does not say so"));
            }
            self.lost.lock().insert(id, what);
        }
    }

    fn kubectl(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(&self.kubectl)
            .env("HOME", &self.agent_dir)
            .env("KUBECONFIG", self.agent_dir.join("admin.kubeconfig"))
            .args(["--request-timeout", "20s"])
            .args(args)
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(o) => (
                o.status.success(),
                String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
            ),
            Err(e) => (false, e.to_string()),
        }
    }

    /// kubectl until it succeeds or says `done_when` (the agent may be
    /// down for a moment: a fault); false after [`STEP`].
    fn kubectl_until(&self, args: &[&str], done_when: &str) -> bool {
        let end = Instant::now() + STEP;
        loop {
            let (ok, out) = self.kubectl(args);
            if ok || out.contains(done_when) {
                return true;
            }
            if Instant::now() >= end {
                self.problem(format!("kubectl {args:?} kept failing for {STEP:?}: {}", out.trim()));
                return false;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// The thread reading containerd's pods every 250 ms (connecting again
/// after a failed list: containerd restarts).
fn observe(sh: &Shared) {
    let mut cri: Option<CriRuntime> = None;
    while !sh.stop.load(Ordering::SeqCst) {
        if cri.is_none() {
            cri = connect();
        }
        if let Some(pods) = cri.as_ref().and_then(|c| c.list_pods(&call()).ok()) {
            let mut seen = sh.seen.lock();
            for p in pods.iter().filter(|p| p.namespace == NS) {
                seen.entry(p.uid.clone()).or_insert_with(|| p.name.clone());
            }
            drop(seen);
            let mut ids = sh.seen_ids.lock();
            for p in pods.iter().filter(|p| p.namespace == NS) {
                ids.extend(p.sandboxes.iter().map(|s| s.id.clone()));
                ids.extend(p.containers.iter().map(|c| c.id.clone()));
            }
            drop(ids);
            let mut s = sh.snap.lock();
            s.seq += 1;
            s.pods = Arc::new(pods);
            sh.snap_cv.notify_all();
        } else {
            cri = None;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// One pod slot: create a pod, then end it (delete, or edit: the old
/// version ends and a new one begins), until the run's lifecycles are
/// begun and the slot's last pod is gone.
fn worker(sh: &Shared, slot: usize, mut rng: Rng) {
    let mut current: Option<PodRun> = None;
    let mut n = 0u64;
    loop {
        if sh.drain.load(Ordering::SeqCst)
            && let Some(p) = current.take()
        {
            delete(sh, p, rng.chance(20));
        }
        if !sh.checkpoint() {
            break;
        }
        current = match current.take() {
            None => {
                if sh.begun.fetch_add(1, Ordering::SeqCst) >= sh.target {
                    sh.begun.fetch_sub(1, Ordering::SeqCst);
                    break;
                }
                n += 1;
                let via = if rng.chance(35) { Via::Api } else { Via::File };
                create(sh, format!("s{slot:02}-{n}"), via)
            }
            Some(p) => {
                let edit = p.via == Via::File && rng.chance(30);
                if edit && sh.begun.fetch_add(1, Ordering::SeqCst) < sh.target {
                    replace(sh, p)
                } else {
                    if edit {
                        sh.begun.fetch_sub(1, Ordering::SeqCst);
                    }
                    delete(sh, p, rng.chance(20));
                    None
                }
            }
        };
    }
    let mut g = sh.gate.lock();
    g.2 -= 1;
    sh.gate_cv.notify_all();
}

fn file_of(sh: &Shared, p: &str, via: Via) -> String {
    match via {
        Via::File => format!("{p}.yaml"),
        // where `kubectl create` put it (`apply`'s free file name: NS_NAME
        // and the extension of what it wrote)
        Via::Api => std::fs::read_dir(sh.manifests())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|f| f.strip_prefix(&format!("{NS}_{p}")).is_some_and(|ext| ext.starts_with('.')))
            .unwrap_or_else(|| format!("{NS}_{p}.json")),
    }
}

fn write_atomically(dir: &Path, file: &str, text: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join(file)).unwrap();
}

/// Wait for `name`'s new uid (not in `old`) to run; its uid.
fn wait_running(sh: &Shared, name: &str, old: &str) -> Option<String> {
    let mut uid = None;
    let ok = sh.wait(STEP, |pods| {
        uid =
            pods.iter().find(|p| p.name == name && p.namespace == NS && p.uid != old && runs(p)).map(|p| p.uid.clone());
        uid.is_some()
    });
    if !ok {
        sh.problem(format!("pod {NS}/{name} not running within {STEP:?}"));
    }
    uid
}

fn wait_gone(sh: &Shared, name: &str, uid: &str) {
    let mut last = Vec::new();
    if !sh.wait(STEP, |pods| {
        last = pods.iter().filter(|p| p.uid == uid).cloned().collect();
        !pods.iter().any(|p| p.uid == uid && (!p.sandboxes.is_empty() || !p.containers.is_empty()))
    }) {
        // stuck on an exit containerd lost: the coordinator's next settle
        // mends it (containerd restarted) and checks what is left then
        let lost = connect().map(|c| lost_exits(&c, &last)).unwrap_or_default();
        if lost.is_empty() {
            sh.problem(format!("pod {NS}/{name} ({uid}) still in containerd {STEP:?} after its removal"));
        } else {
            sh.lost_exits_found(lost);
        }
    }
}

/// The tasks of `pods` the CRI shows running (a container) or ready (a
/// sandbox) but whose process containerd's task service says has ended:
/// exits containerd lost. (ID, what it is).
fn lost_exits(cri: &CriRuntime, pods: &[RuntimePod]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in pods.iter().filter(|p| p.namespace == NS) {
        let tasks = p.containers.iter().filter(|c| c.state == ContainerState::Running).map(|c| (&c.id, &c.name));
        let pause = "(sandbox)".to_string();
        let sandboxes = p.sandboxes.iter().filter(|s| s.ready).map(|s| (&s.id, &pause));
        for (id, what) in tasks.chain(sandboxes) {
            if let Some(t) = cri.shim_process(id).filter(|t| t.stopped) {
                let what = format!(
                    "{what} of {NS}/{} ({}): ended with status {} at {} ns, still running to the CRI",
                    p.name, p.uid, t.exit_status, t.exited_at_ns
                );
                out.push((id.clone(), what));
            }
        }
    }
    out
}

fn create(sh: &Shared, name: String, via: Via) -> Option<PodRun> {
    let yaml = pod_yaml(&name, 0);
    sh.desired.lock().insert(name.clone(), via);
    match via {
        Via::File => write_atomically(&sh.manifests(), &file_of(sh, &name, via), &yaml),
        Via::Api => {
            let f = sh.agent_dir.join("api").join(format!("{name}.yaml"));
            std::fs::write(&f, &yaml).unwrap();
            sh.kubectl_until(&["create", "--validate=false", "-f", f.to_str().unwrap()], "AlreadyExists");
        }
    }
    let uid = wait_running(sh, &name, "").unwrap_or_default();
    Some(PodRun { name, via, generation: 0, uid })
}

fn replace(sh: &Shared, p: PodRun) -> Option<PodRun> {
    let generation = p.generation + 1;
    write_atomically(&sh.manifests(), &file_of(sh, &p.name, p.via), &pod_yaml(&p.name, generation));
    let uid = wait_running(sh, &p.name, &p.uid).unwrap_or_default();
    wait_gone(sh, &p.name, &p.uid);
    sh.ended.fetch_add(1, Ordering::SeqCst);
    sh.ended_edit.fetch_add(1, Ordering::SeqCst);
    Some(PodRun { uid, generation, ..p })
}

fn delete(sh: &Shared, p: PodRun, by_file: bool) {
    sh.desired.lock().remove(&p.name);
    if p.via == Via::File || by_file {
        let file = sh.manifests().join(file_of(sh, &p.name, p.via));
        if let Err(e) = std::fs::remove_file(&file) {
            sh.problem(format!("removing {}: {e}", file.display()));
        }
    } else {
        sh.kubectl_until(&["delete", "pod", &p.name, "-n", NS, "--wait=false"], "NotFound");
    }
    wait_gone(sh, &p.name, &p.uid);
    sh.ended.fetch_add(1, Ordering::SeqCst);
    if p.via == Via::Api {
        sh.ended_api.fetch_add(1, Ordering::SeqCst);
    }
}

// ---- leftovers ----

/// What a check found: pods that should run and do not, that run more
/// than once, and leftovers by kind ("kind" -> descriptions).
#[derive(Default, Debug)]
struct Found {
    missing: BTreeSet<String>,
    duplicates: BTreeSet<String>,
    leaks: BTreeMap<&'static str, BTreeSet<String>>,
}

impl Found {
    /// Nothing wrong (an IP containerd itself lost is reported apart).
    fn clean(&self) -> bool {
        self.missing.is_empty()
            && self.duplicates.is_empty()
            && self.leaks.iter().all(|(k, s)| *k == "ips_unrecorded" || s.is_empty())
    }

    fn leak(&mut self, kind: &'static str, what: String) {
        self.leaks.entry(kind).or_default().insert(what);
    }
}

fn is_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Check containerd and the node against the pods that should run
/// (`desired`, by name); `seen`: every uid of the run, with its name.
fn inspect(
    pods: &[RuntimePod],
    desired: &BTreeSet<String>,
    seen: &BTreeMap<String, String>,
    seen_ids: &BTreeSet<String>,
    root: &Path,
    logs: &Path,
) -> Found {
    let mut f = Found::default();
    // the owned uids: per desired name, the newest running one
    let mut owned = BTreeSet::new();
    for name in desired {
        let mut running: Vec<&RuntimePod> =
            pods.iter().filter(|p| &p.name == name && p.namespace == NS && runs(p)).collect();
        running.sort_by_key(|p| p.sandboxes.iter().map(|s| s.created_at_ns).max());
        match running.last() {
            None => {
                f.missing.insert(format!("{NS}/{name}"));
            }
            Some(p) => {
                owned.insert(p.uid.clone());
            }
        }
        for p in &running {
            let ready = p.sandboxes.iter().filter(|s| s.ready).count();
            let mains = p.containers.iter().filter(|c| c.name == "main" && c.state == ContainerState::Running).count();
            if running.len() > 1 || ready > 1 || mains > 1 {
                f.duplicates.insert(format!(
                    "{NS}/{name}: {} running uid(s); {} has {ready} ready sandbox(es), {mains} running main container(s)",
                    running.len(),
                    p.uid
                ));
            }
        }
    }
    let mut ids = BTreeSet::new();
    for p in pods {
        let own = owned.contains(&p.uid);
        for s in &p.sandboxes {
            ids.insert(s.id.clone());
            if !own {
                f.leak("sandboxes", format!("{} of {}/{} ({}), ready {}", s.id, p.namespace, p.name, p.uid, s.ready));
            }
        }
        for c in &p.containers {
            ids.insert(c.id.clone());
            if !own {
                f.leak(
                    "containers",
                    format!("{} {} of {}/{} ({}), {:?}", c.id, c.name, p.namespace, p.name, p.uid, c.state),
                );
            }
        }
    }
    let not_owned = |uid: &str| !owned.contains(uid);
    // mounts under a pod directory, and containerd's of IDs it no longer has
    let pods_dir = root.join("pods");
    let state = format!("{}/state/", e2e_run());
    for line in std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default().lines() {
        let Some(mp) = line.split(' ').nth(4) else { continue };
        if let Ok(rest) = Path::new(mp).strip_prefix(&pods_dir) {
            let uid = rest.iter().next().and_then(|u| u.to_str()).unwrap_or_default();
            if not_owned(uid) {
                f.leak("mounts", mp.to_string());
            }
        } else if mp.starts_with(&state) && mp.split('/').any(|seg| is_id(seg) && !ids.contains(seg)) {
            f.leak("mounts", mp.to_string());
        }
    }
    // pod cgroups (cgroupfs `pod<uid>`, systemd `kubepods-...-pod<uid>.slice`)
    // of this run's pods that no pod owns, and container cgroups of IDs
    // containerd no longer has in them (another agent's pods on the machine
    // are not counted). In a pod that runs, a container cgroup containerd
    // never recorded (its CreateContainer cut short by a kill) is the
    // pod's until the pod goes: podwarden removes it with the pod cgroup.
    for (kind, what, pod_uid, path) in cgroups() {
        if !seen.contains_key(&pod_uid) || !not_owned(&pod_uid) {
            continue;
        }
        // one item for every hierarchy's copy: the path from kubepods on
        let full = path.to_string_lossy();
        let rel = full.find("kubepods").map_or(&*full, |i| &full[i..]);
        match kind {
            CgroupKind::Pod => f.leak("cgroups", format!("pod {what} ({rel})")),
            CgroupKind::Container if !ids.contains(&what) => f.leak("cgroups", format!("container {what} ({rel})")),
            _ => {}
        }
    }
    // host-local IP files naming a sandbox containerd no longer has
    for net in std::fs::read_dir(format!("{}/ipam", e2e_run())).into_iter().flatten().flatten() {
        for e in std::fs::read_dir(net.path()).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == "lock" || name.starts_with("last_reserved_ip") {
                continue;
            }
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let id = text.lines().next().unwrap_or_default().trim().to_string();
            // a sandbox containerd has, ready or not, owns its IP (a dead
            // one gives it back when it is stopped or removed)
            if ids.contains(&id) {
                continue;
            }
            // a sandbox containerd never listed: its RunPodSandbox was cut
            // short by containerd's kill after the CNI ADD, and containerd
            // lost it (no one can release the IP but an administrator)
            let kind = if seen_ids.contains(&id) { "ips" } else { "ips_unrecorded" };
            f.leak(kind, format!("{name} for {id}"));
        }
    }
    // pod and log directories, and anything under rootDir named after a
    // pod of the run that is gone
    for e in std::fs::read_dir(&pods_dir).into_iter().flatten().flatten() {
        let uid = e.file_name().to_string_lossy().into_owned();
        if not_owned(&uid) {
            f.leak("dirs", e.path().display().to_string());
        }
    }
    for e in std::fs::read_dir(logs).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let uid = name.rsplit('_').next().unwrap_or_default();
        if not_owned(uid) {
            f.leak("dirs", e.path().display().to_string());
        }
    }
    let gone: BTreeSet<&str> = seen.keys().filter(|u| not_owned(u)).map(String::as_str).collect();
    let mut stack = vec![(root.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = e.path();
            if path == pods_dir || path == root.join("pki") {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            if gone.iter().any(|u| name.contains(u)) {
                f.leak("dirs", path.display().to_string());
            } else if depth < 3 && e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((path, depth + 1));
            }
        }
    }
    f
}

#[derive(PartialEq)]
enum CgroupKind {
    Pod,
    Container,
}

/// Pod and container cgroups under every `kubepods` of /sys/fs/cgroup
/// (each v1 hierarchy, or the v2 tree): (kind, uid or ID, the pod's uid,
/// path).
fn cgroups() -> Vec<(CgroupKind, String, String, PathBuf)> {
    let base = Path::new("/sys/fs/cgroup");
    let mut roots = vec![base.to_path_buf()];
    for e in std::fs::read_dir(base).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir() && !t.is_symlink()) {
            roots.push(e.path());
        }
    }
    let mut out = Vec::new();
    // (directory, depth, the pod uid it is in)
    let mut stack: Vec<(PathBuf, u32, String)> = Vec::new();
    for r in roots {
        for k in ["kubepods", "kubepods.slice"] {
            if r.join(k).is_dir() {
                stack.push((r.join(k), 0, String::new()));
            }
        }
    }
    while let Some((dir, depth, in_pod)) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let pod = name.strip_prefix("pod").map(str::to_string).or_else(|| {
                let s = name.strip_suffix(".slice")?;
                Some(s[s.rfind("-pod")? + 4..].replace('_', "-"))
            });
            let container = name
                .strip_prefix("cri-containerd-")
                .and_then(|s| s.strip_suffix(".scope"))
                .unwrap_or(&name)
                .to_string();
            let mut inner = in_pod.clone();
            if let Some(uid) = pod {
                out.push((CgroupKind::Pod, uid.clone(), uid.clone(), e.path()));
                inner = uid;
            } else if is_id(&container) {
                out.push((CgroupKind::Container, container, in_pod.clone(), e.path()));
                continue;
            }
            if depth < 4 {
                stack.push((e.path(), depth + 1, inner));
            }
        }
    }
    out
}

// ---- the run ----

fn run_script(repo: &Path, script: &str) -> Result<(), String> {
    // in a session of its own: the daemons it starts are shared and must
    // outlive this process group
    let out = Command::new("setsid")
        .args(["-w", repo.join("scripts").join(script).to_str().unwrap(), "up"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{script} up failed: {}", String::from_utf8_lossy(&out.stderr)))
    }
}

fn kill_by_pid_file(file: &str) -> Result<(), String> {
    let pid: i32 = std::fs::read_to_string(file)
        .map_err(|e| format!("{file}: {e}"))?
        .trim()
        .parse()
        .map_err(|e| format!("{file}: {e}"))?;
    podwarden::sys::kill(pid, libc::SIGKILL).map_err(|e| format!("kill {pid} ({file}): {e}"))?;
    let end = Instant::now() + Duration::from_secs(10);
    while podwarden::sys::kill(pid, 0).is_ok() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Take back the drop-in the agent wrote into the shared logind's
/// configuration (its 10 s shutdownGracePeriod is above the test logind's
/// 5 s) and make logind reread it, as `scripts/logind-env.sh up` leaves it:
/// the logind tests expect its own InhibitDelayMaxSec.
fn restore_logind() {
    let dropin = PathBuf::from(logind_dir()).join("logind.conf.d/99-podwarden.conf");
    if std::fs::remove_file(&dropin).is_ok() {
        let pid = std::fs::read_to_string(format!("{}/logind.pid", logind_dir()))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok());
        if let Some(pid) = pid {
            let _ = podwarden::sys::kill(pid, libc::SIGHUP);
        }
    }
}

fn kubectl_path() -> PathBuf {
    let name = "kubectl.1.33";
    let mut places = vec![PathBuf::from("/usr/lib/google-cloud-sdk/bin").join(name)];
    if let Some(path) = std::env::var_os("PATH") {
        places.extend(std::env::split_paths(&path).map(|d| d.join(name)));
        places.extend(std::env::split_paths(&path).map(|d| d.join("kubectl")));
    }
    places.into_iter().find(|p| p.is_file()).unwrap_or_else(|| {
        panic!("kubectl is missing: the soak needs the real kubectl 1.33 (kubectl.1.33 in /usr/lib/google-cloud-sdk/bin or on PATH)")
    })
}

/// Stop and remove whatever podwarden pods containerd holds (a new agent
/// would count them as its orphans, and they are no pod of this run).
fn clear_runtime(cri: &CriRuntime) {
    for rp in cri.list_pods(&call()).expect("list the e2e containerd's pods") {
        for sb in &rp.sandboxes {
            eprintln!("soak: removing leftover sandbox {} of pod {}/{} ({})", sb.id, rp.namespace, rp.name, rp.uid);
            let _ = cri.stop_sandbox(&call(), &sb.id);
            let _ = cri.remove_sandbox(&call(), &sb.id);
        }
    }
}

fn proc_sample(at: u64, pid: u32) -> Sample {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()).unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count() as u64).unwrap_or(0);
    Sample { at, pid, since: 0, rss: kib("VmRSS:"), anon: kib("RssAnon:"), fds }
}

/// Run the soak; the report says what it found (the caller asserts).
pub fn run(o: &Opts) -> Report {
    require_environment();
    let t0 = Instant::now();
    println!("soak: seed {} (PODWARDEN_SOAK_SEED={} repeats its choices)", o.seed, o.seed);
    let mut rng = Rng::new(o.seed);
    let dir = std::env::temp_dir().join(format!("podwarden-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for d in ["manifests", "api", "root", "logs"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let cri = connect().expect("connect to the e2e containerd");
    clear_runtime(&cri);
    drop(cri);
    let ports: Vec<std::net::TcpListener> =
        (0..2).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let mut agent = AgentProc {
        bin: o.bin.clone(),
        dir: dir.clone(),
        port: ports[0].local_addr().unwrap().port(),
        kube_port: ports[1].local_addr().unwrap().port(),
        child: None,
        since: 0,
    };
    drop(ports);
    agent.write_config();
    write_atomically(&agent.manifests(), &format!("{NS}_secret_{SECRET}.yaml"), &secret_yaml());
    let sh = Arc::new(Shared {
        agent_dir: dir.clone(),
        kubectl: kubectl_path(),
        target: o.lifecycles,
        begun: AtomicU64::new(0),
        ended: AtomicU64::new(0),
        ended_api: AtomicU64::new(0),
        ended_edit: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        snap: Mutex::new(Snapshot::default()),
        snap_cv: Condvar::new(),
        gate: Mutex::new((false, 0, o.concurrency)),
        drain: AtomicBool::new(false),
        gate_cv: Condvar::new(),
        desired: Mutex::new(BTreeMap::new()),
        seen: Mutex::new(BTreeMap::new()),
        seen_ids: Mutex::new(BTreeSet::new()),
        problems: Mutex::new(Vec::new()),
        lost: Mutex::new(BTreeMap::new()),
    });
    let mut report = Report { seed: o.seed, dir: dir.clone(), ..Default::default() };
    for k in Fault::ALL {
        report.faults.insert(k.name(), 0);
    }
    // what is there before the run is no leak of it
    let baseline = {
        let pods = connect().and_then(|c| c.list_pods(&call()).ok()).unwrap_or_default();
        let f = inspect(&pods, &BTreeSet::new(), &BTreeMap::new(), &BTreeSet::new(), &agent.root(), &agent.logs());
        let items: BTreeSet<(&'static str, String)> =
            f.leaks.iter().flat_map(|(k, s)| s.iter().map(move |i| (*k, i.clone()))).collect();
        for (k, i) in &items {
            println!("soak: baseline (not counted): {k}: {i}");
        }
        items
    };
    if let Err(e) = agent.start() {
        panic!("{e}\n{}", agent.log_tail(50));
    }
    // the client certificate: the Kubernetes API makes its CA before it listens
    let end = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", agent.kube_port)).is_err() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    let kc = Command::new(&o.bin).args(["kubeconfig", "--config", agent.config().to_str().unwrap()]).output().unwrap();
    assert!(kc.status.success(), "podwarden kubeconfig: {}", String::from_utf8_lossy(&kc.stderr));
    std::fs::write(dir.join("admin.kubeconfig"), &kc.stdout).unwrap();
    // a sample with no soak pod left and the agent idle past its heap
    // trim (every 5 s): the workers end their pods and park first
    // (the first, before the workers start, has nothing to drain)
    let sample = |report: &mut Report, agent: &AgentProc, sh: &Shared, drain: bool| {
        if drain {
            sh.drain.store(true, Ordering::SeqCst);
            sh.pause();
        }
        std::thread::sleep(SAMPLE_IDLE);
        let at = sh.ended.load(Ordering::SeqCst);
        if let Some(pid) = agent.pid() {
            let s = Sample { since: agent.since, ..proc_sample(at, pid) };
            println!("soak: {at} lifecycles: agent {pid} RSS {} KiB (anonymous {}), {} fds", s.rss, s.anon, s.fds);
            report.samples.push(s);
        }
        if drain {
            sh.drain.store(false, Ordering::SeqCst);
            sh.resume();
        }
    };
    let wait_lock = |agent: &AgentProc| {
        let end = Instant::now() + Duration::from_secs(30);
        while !agent.lock_held() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
        }
        agent.lock_held()
    };
    if !wait_lock(&agent) {
        sh.problem("the agent holds no inhibitor lock 30 s after its start".into());
    }
    sample(&mut report, &agent, &sh, false);

    // the faults, at lifecycle counts drawn evenly at random
    let lo = (o.lifecycles / 10).min(100);
    let mut plan: Vec<(u64, Fault)> = Vec::new();
    for (i, kind) in Fault::ALL.iter().enumerate() {
        let n = o.faults[i];
        for j in 0..n {
            let span = (o.lifecycles - lo) / n.max(1);
            plan.push((lo + j * span + rng.below(span.max(1)), *kind));
        }
    }
    plan.sort();
    println!(
        "soak: {} lifecycles, {} at once, faults at {}",
        o.lifecycles,
        o.concurrency,
        plan.iter().map(|(at, k)| format!("{at} {}", k.name())).collect::<Vec<_>>().join(", ")
    );

    let mut seeds: Vec<u64> = (0..o.concurrency).map(|_| rng.next()).collect();
    let mut totals = Found::default();
    let mut halves = 0u64;
    let mut mends = 0u64;
    std::thread::scope(|scope| {
        let s2 = sh.clone();
        let observer =
            std::thread::Builder::new().name("soak-observer".into()).spawn_scoped(scope, move || observe(&s2)).unwrap();
        for slot in 0..o.concurrency {
            let (s2, seed) = (sh.clone(), seeds.pop().unwrap());
            std::thread::Builder::new()
                .name(format!("soak-{slot}"))
                .spawn_scoped(scope, move || worker(&s2, slot, Rng::new(seed)))
                .unwrap();
        }
        let mut next_sample = o.sample_every;
        let mut plan = plan.into_iter().peekable();
        loop {
            let ended = sh.ended.load(Ordering::SeqCst);
            if ended >= next_sample {
                sample(&mut report, &agent, &sh, true);
                while sh.ended.load(Ordering::SeqCst) >= next_sample {
                    next_sample += o.sample_every;
                }
            }
            if let Some(e) = agent.exited() {
                sh.problem(format!("the agent exited on its own ({e}) at {ended} lifecycles; started again"));
                if let Err(e) = agent.start() {
                    sh.problem(e);
                }
                agent.since = sh.ended.load(Ordering::SeqCst);
            }
            let workers_done = sh.gate.lock().2 == 0;
            if plan.peek().is_none_or(|(at, _)| *at > ended) {
                if workers_done {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            let (_, kind) = plan.next().unwrap();
            *report.faults.entry(kind.name()).or_default() += 1;
            println!("soak: fault at {ended} lifecycles: {}", kind.name());
            let mut half = None;
            let done = match kind {
                Fault::Containerd => kill_by_pid_file(&format!("{}/containerd.pid", e2e_run()))
                    .and_then(|_| run_script(&o.repo, "e2e-env.sh")),
                Fault::Agent => {
                    agent.kill9();
                    agent.since = sh.ended.load(Ordering::SeqCst);
                    agent.start()
                }
                Fault::Logind => kill_by_pid_file(&format!("{}/logind.pid", logind_dir()))
                    .and_then(|_| run_script(&o.repo, "logind-env.sh")),
                Fault::HalfManifest => {
                    halves += 1;
                    let name = format!("half-{halves}");
                    let yaml = pod_yaml(&name, 0);
                    let path = agent.manifests().join(format!("{name}.yaml"));
                    let cut = yaml.len() / 2;
                    std::fs::write(&path, &yaml.as_bytes()[..cut]).unwrap();
                    std::thread::sleep(Duration::from_millis(500 + rng.below(2500)));
                    let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
                    f.write_all(&yaml.as_bytes()[cut..]).unwrap();
                    drop(f);
                    sh.desired.lock().insert(name.clone(), Via::File);
                    half = Some((name, path));
                    Ok(())
                }
            };
            if let Err(e) = done {
                sh.problem(format!("fault {}: {e}", kind.name()));
            }
            let when = format!("after the {} fault", kind.name());
            let took = settle(&sh, &agent, &baseline, &mut totals, &o.repo, &mut mends, &when);
            report.settle_max_s = report.settle_max_s.max(took);
            if let Some((name, path)) = half {
                let _ = std::fs::remove_file(path);
                sh.desired.lock().remove(&name);
            }
        }
        // the end: every pod removed, nothing may be left
        let took = settle(&sh, &agent, &baseline, &mut totals, &o.repo, &mut mends, "at the end");
        report.settle_max_s = report.settle_max_s.max(took);
        sample(&mut report, &agent, &sh, true);
        sh.stop.store(true, Ordering::SeqCst);
        let _ = observer.join();
    });
    report.wall_s = t0.elapsed().as_secs_f64();
    report.lifecycles = sh.ended.load(Ordering::SeqCst);
    report.lifecycles_api = sh.ended_api.load(Ordering::SeqCst);
    report.lifecycles_edit = sh.ended_edit.load(Ordering::SeqCst);
    report.leaks = totals.leaks;
    for k in LEAK_KINDS {
        report.leaks.entry(k).or_default();
    }
    report.duplicates = totals.duplicates;
    report.missing = totals.missing;
    report.problems = sh.problems.lock().clone();
    report.lost_exits = sh.lost.lock().clone();
    report.mending_restarts = mends;
    report.log_tail = agent.log_tail(200);
    agent.stop();
    restore_logind();
    if report.clean() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    report
}

/// Pause the workers and wait up to [`SETTLE`] for the runtime to hold
/// the desired pods exactly once and nothing else, the agent to hold its
/// inhibitor lock (and logind to list it once); what is still wrong then
/// goes into `totals`. A leftover still there after [`LOST_EXIT_LOOK`]
/// whose task containerd's shim says has ended is an exit containerd lost:
/// containerd is restarted (`mends` counts it) and the wait begins again.
/// The seconds it took.
fn settle(
    sh: &Shared,
    agent: &AgentProc,
    baseline: &BTreeSet<(&'static str, String)>,
    totals: &mut Found,
    repo: &Path,
    mends: &mut u64,
    when: &str,
) -> f64 {
    sh.pause();
    let t = Instant::now();
    let mut since = t;
    let desired: BTreeSet<String> = sh.desired.lock().keys().cloned().collect();
    let mut last;
    loop {
        let pods = connect().and_then(|c| c.list_pods(&call()).ok());
        let seen = sh.seen.lock().clone();
        let seen_ids = sh.seen_ids.lock().clone();
        last = inspect(pods.as_deref().unwrap_or_default(), &desired, &seen, &seen_ids, &agent.root(), &agent.logs());
        for (k, items) in last.leaks.iter_mut() {
            items.retain(|i| !baseline.contains(&(*k, i.clone())));
        }
        let lock = agent.lock_held();
        let inhibitors = podwarden_inhibitors();
        let ok = pods.is_some() && last.clean() && lock && inhibitors == Some(1);
        if !ok && since.elapsed() >= LOST_EXIT_LOOK && *mends < MENDS_MAX {
            let leaked: BTreeSet<&str> = ["sandboxes", "containers"]
                .iter()
                .filter_map(|k| last.leaks.get(k))
                .flatten()
                .filter_map(|i| i.split(' ').next())
                .collect();
            let stuck: Vec<RuntimePod> = pods
                .iter()
                .flatten()
                .filter(|p| {
                    p.sandboxes.iter().any(|s| leaked.contains(s.id.as_str()))
                        || p.containers.iter().any(|c| leaked.contains(c.id.as_str()))
                })
                .cloned()
                .collect();
            let lost = connect().map(|c| lost_exits(&c, &stuck)).unwrap_or_default();
            if !lost.is_empty() {
                sh.lost_exits_found(lost);
                println!("soak: restarting containerd {when}: it lost an exit, and only a restart mends that");
                if let Err(e) = kill_by_pid_file(&format!("{}/containerd.pid", e2e_run()))
                    .and_then(|_| run_script(repo, "e2e-env.sh"))
                {
                    sh.problem(format!("restarting containerd to mend a lost exit: {e}"));
                }
                *mends += 1;
                since = Instant::now();
                continue;
            }
        }
        if ok || since.elapsed() >= SETTLE {
            if !ok {
                eprintln!("soak: not converged {SETTLE:?} {when}: {last:#?}");
                if pods.is_none() {
                    sh.problem(format!("containerd's pods could not be listed {when}"));
                }
                if !lock {
                    sh.problem(format!("the agent does not hold its inhibitor lock {when}"));
                }
                if inhibitors != Some(1) {
                    sh.problem(format!("logind lists {inhibitors:?} podwarden inhibitor locks {when}"));
                }
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let took = t.elapsed().as_secs_f64();
    println!("soak: settled in {took:.1} s {when} ({} pods running)", desired.len() - last.missing.len());
    totals.missing.extend(last.missing);
    totals.duplicates.extend(last.duplicates);
    for (k, items) in last.leaks {
        totals.leaks.entry(k).or_default().extend(items);
    }
    sh.resume();
    took
}

// The checks themselves, without containerd: what they must count.
#[cfg(test)]
mod checks {
    use super::*;
    use podwarden::runtime::{ContainerInfo, SandboxInfo};

    fn pod(name: &str, uid: &str, sandbox: &str, ready: bool, main: ContainerState) -> RuntimePod {
        let s = SandboxInfo {
            id: sandbox.into(),
            uid: uid.into(),
            name: name.into(),
            namespace: NS.into(),
            attempt: 0,
            ready,
            created_at_ns: 1,
            ip: None,
        };
        let c = ContainerInfo {
            id: format!("{sandbox}-main"),
            sandbox_id: sandbox.into(),
            name: "main".into(),
            state: main,
            ..Default::default()
        };
        RuntimePod { uid: uid.into(), name: name.into(), namespace: NS.into(), sandboxes: vec![s], containers: vec![c] }
    }

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("podwarden-soak-check-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("root/pods")).unwrap();
        std::fs::create_dir_all(d.join("logs")).unwrap();
        d
    }

    #[test]
    fn a_pod_no_manifest_wants_and_its_directories_are_leaks() {
        let d = temp("leaks");
        let pods = vec![
            pod("want", "u-want", "sb-want", true, ContainerState::Running),
            pod("gone", "u-gone", "sb-gone", false, ContainerState::Exited),
        ];
        for u in ["u-want", "u-gone"] {
            std::fs::create_dir_all(d.join("root/pods").join(u)).unwrap();
            std::fs::create_dir_all(d.join("logs").join(format!("{NS}_x_{u}"))).unwrap();
        }
        let desired = BTreeSet::from(["want".to_string()]);
        let seen = BTreeMap::from([("u-want".to_string(), "want".to_string()), ("u-gone".to_string(), "gone".into())]);
        let f = inspect(&pods, &desired, &seen, &BTreeSet::new(), &d.join("root"), &d.join("logs"));
        assert!(f.missing.is_empty() && f.duplicates.is_empty(), "{f:#?}");
        assert_eq!(f.leaks["sandboxes"].len(), 1, "{f:#?}");
        assert!(f.leaks["sandboxes"].iter().all(|l| l.starts_with("sb-gone ")), "{f:#?}");
        assert_eq!(f.leaks["containers"].len(), 1, "{f:#?}");
        assert_eq!(f.leaks["dirs"].len(), 2, "the pod and the log directory of u-gone: {f:#?}");
        assert!(!f.clean());
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn a_pod_running_twice_is_a_duplicate_and_one_not_running_is_missing() {
        let d = temp("dup");
        let mut twice = pod("twice", "u-1", "sb-1", true, ContainerState::Running);
        twice.sandboxes.push(SandboxInfo { id: "sb-2".into(), ..twice.sandboxes[0].clone() });
        let pods = vec![twice, pod("idle", "u-2", "sb-3", true, ContainerState::Exited)];
        let desired = BTreeSet::from(["twice".to_string(), "idle".to_string(), "absent".to_string()]);
        let f = inspect(&pods, &desired, &BTreeMap::new(), &BTreeSet::new(), &d.join("root"), &d.join("logs"));
        assert_eq!(f.duplicates.len(), 1, "{f:#?}");
        assert_eq!(f.missing, BTreeSet::from([format!("{NS}/idle"), format!("{NS}/absent")]));
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn the_rss_slope_within_each_agent_ignores_a_restart_and_each_agents_warm_up() {
        // one agent growing 8 KiB per 1,000, then one started at 1,500
        // that starts lower and grows as much
        let r = Report {
            samples: [
                (0, 1, 0, 10_000),
                (1000, 1, 0, 10_008),
                (2000, 2, 1500, 9_000),
                (3000, 2, 1500, 9_008),
                (4000, 2, 1500, 9_016),
            ]
            .map(|(at, pid, since, rss)| Sample { at, pid, since, rss, ..Default::default() })
            .to_vec(),
            ..Default::default()
        };
        let (within, plain) = r.rss_slopes(0);
        assert!((within - 8.0).abs() < 1e-9, "{within}");
        assert!(plain < 0.0, "{plain}");
        assert_eq!(r.slope_points(0), 5);
        // from each agent's 1,000th lifecycle: the second agent's last two
        let (within, _) = r.rss_slopes(1000);
        assert!((within - 8.0).abs() < 1e-9, "{within}");
        assert_eq!(r.slope_points(1000), 2);
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        assert!((0..100).all(|_| a.next() == b.next()), "one seed, one stream");
    }
}

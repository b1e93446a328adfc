//! Shared test harness: the whole agent, wired by `daemon::assemble` as
//! `podwarden run` wires it, on the fake runtime, with short back-offs so
//! scenarios run in milliseconds.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use podwarden::agent::Parts;
use podwarden::agent::manager::Agent;
use podwarden::cli::daemon::Tuning;
use podwarden::config::Config;
use podwarden::model::{self, Container, ObjectMeta, Pod, PodSpec};
use podwarden::pod::admission::{Admission, Allocatable};
use podwarden::pod::status::StatusManager;
use podwarden::pod::workers::{self, Observer, PodWorkers};
use podwarden::runtime::fake::FakeRuntime;
use podwarden::telemetry::events::EventRecorder;
use podwarden::telemetry::metrics::Metrics;

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("podwarden-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The agent's parts as `podwarden run` wires them (`daemon::assemble`),
/// on the fake runtime, without the threads: a test drives the source,
/// relists and housekeeping passes by hand.
pub struct Harness {
    pub fake: Arc<FakeRuntime>,
    pub parts: Parts,
    pub agent: Arc<Agent>,
    pub workers: PodWorkers,
    pub statuses: Arc<StatusManager>,
    pub events: Arc<EventRecorder>,
    pub metrics: Arc<Metrics>,
    pub admission: Arc<Admission>,
    pub root: TempDir,
}

/// The harness's settings: the node's resources and the tuning knobs
/// (short back-offs so scenarios run in milliseconds, an observer).
pub struct Opts {
    pub max_pods: usize,
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    pub observer: Option<Arc<dyn Observer>>,
    pub backoff: Duration,
    pub container_backoff: Duration,
    /// The static pod source delivered its first (empty) set.
    pub first_scan: bool,
    /// Where pulls find credentials (default: none).
    pub keyring: Option<Arc<podwarden::node::images::credentials::Keyring>>,
    /// `syncFrequency` (default 1 s).
    pub resync: Option<Duration>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            max_pods: 110,
            cpu_millis: 4000,
            memory_bytes: 8 << 30,
            observer: None,
            backoff: Duration::from_millis(50),
            container_backoff: Duration::from_millis(200),
            first_scan: true,
            keyring: None,
            resync: None,
        }
    }
}

/// The eviction thresholds of the agents these tests start as processes,
/// unless a test sets its own: the kubelet's defaults with the disk ones
/// absolute. The default percentages (`nodefs.available<10%`,
/// `imagefs.available<15%`) let how full the machine's disk happens to be
/// decide whether a pod is admitted: on a CI machine with a fuller disk
/// every pod was refused for disk pressure.
pub const EVICTION: &str = "evictionHard: {memory.available: 100Mi, nodefs.available: 512Mi, nodefs.inodesFree: 1%, imagefs.available: 512Mi}\n";

/// The harness's config: everything under `root`, a 2 s runtime call
/// deadline, a resync every second.
pub fn config(root: &std::path::Path) -> Config {
    Config {
        static_pod_path: root.join("manifests"),
        container_runtime_endpoint: "fake://".into(),
        root_dir: root.join("root"),
        pod_logs_dir: root.join("logs"),
        api_socket: root.join("api.sock"),
        port: 0,
        runtime_request_timeout: Duration::from_secs(2),
        sync_frequency: Duration::from_secs(1),
        ..Config::default()
    }
}

impl Harness {
    pub fn new() -> Self {
        Self::with(Opts::default())
    }

    pub fn with(o: Opts) -> Self {
        Self::on(Arc::new(FakeRuntime::new()), o)
    }

    /// A harness on `fake` (another agent on the same runtime, as after a
    /// restart).
    pub fn on(fake: Arc<FakeRuntime>, o: Opts) -> Self {
        let root = TempDir::new("h");
        let tuning = Tuning {
            worker_backoff: o.backoff,
            container_backoff: o.container_backoff,
            container_backoff_max: o.container_backoff * 8,
            observer: o.observer,
            keyring: o.keyring,
            allocatable: Some(Allocatable {
                cpu_millis: o.cpu_millis,
                memory_bytes: o.memory_bytes,
                pods: o.max_pods,
                cpu_capacity_millis: o.cpu_millis,
                memory_capacity_bytes: o.memory_bytes,
            }),
            ..Tuning::default()
        };
        let mut cfg = config(&root.0);
        if let Some(r) = o.resync {
            cfg.sync_frequency = r;
        }
        let parts = podwarden::cli::daemon::assemble(&cfg, fake.clone(), "fake://", tuning);
        if o.first_scan {
            parts.agent.apply_source(Vec::new());
        }
        Harness {
            fake,
            agent: parts.agent.clone(),
            workers: parts.workers.clone(),
            statuses: parts.statuses.clone(),
            events: parts.events.clone(),
            metrics: parts.metrics.clone(),
            admission: parts.admission.clone(),
            parts,
            root,
        }
    }

    pub fn phase(&self, uid: &str) -> Option<workers::Phase> {
        self.workers.phase(uid)
    }

    pub fn wait_phase(&self, uid: &str, phase: workers::Phase, timeout: Duration) {
        let ok = self.workers.wait_until(Instant::now() + timeout, |p| p(uid) == Some(phase));
        assert!(ok, "pod {uid} did not reach {phase:?} within {timeout:?}; it is {:?}", self.phase(uid));
    }

    /// The logind thread on `logind` for these parts, as the daemon starts
    /// it: a shutdown of `total` seconds, `critical` of them for critical
    /// pods, its state file under the harness's root.
    pub fn logind_thread(
        &self,
        logind: Arc<dyn podwarden::agent::node_shutdown::logind::Logind>,
        total: i64,
        critical: i64,
    ) -> podwarden::agent::node_shutdown::logind::LogindThread {
        let cfg = podwarden::agent::node_shutdown::logind::ShutdownConfig {
            groups: podwarden::agent::node_shutdown::groups_from_config(total, critical, &[]),
            priority_classes: Default::default(),
            root_dir: self.root.0.clone(),
            dropin_dir: None,
        };
        podwarden::agent::node_shutdown::logind::LogindThread::start(logind, self.parts.shutdown_runner(), cfg).unwrap()
    }

    pub fn status_phase(&self, uid: &str) -> Option<String> {
        self.statuses.get(uid).and_then(|s| s.phase)
    }
}

/// Poll `cond` every 5 ms until it holds or `timeout` passes.
pub fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(cond(), "timed out after {timeout:?} waiting for {what}");
}

/// A static pod named `name` with explicit `uid` and one container `c`.
pub fn pod(name: &str, uid: &str) -> Pod {
    let mut ann = BTreeMap::new();
    ann.insert(model::CONFIG_SOURCE_ANNOTATION.to_string(), "file".to_string());
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            annotations: Some(ann),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container { name: "c".into(), image: Some("busybox:1".into()), ..Default::default() }],
            ..Default::default()
        }),
        status: None,
    }
}

pub fn with_grace(mut p: Pod, g: i64) -> Pod {
    p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(g);
    p
}

pub fn with_policy(mut p: Pod, policy: &str) -> Pod {
    p.spec.as_mut().unwrap().restart_policy = Some(policy.into());
    p
}

pub fn arc(p: Pod) -> Arc<Pod> {
    Arc::new(p)
}

// ---- waiting on conditions (added for issue 14; keep below the harness) ----

/// Poll `cond` every 5 ms until it holds or `timeout` passes; whether it
/// held. For callers that assert with their own message (or must not
/// panic, as in `Drop`); [`wait_for`] is the asserting form.
pub fn poll_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return cond();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Assert that `cond` holds throughout `window`, checked every 5 ms. For a
/// negative claim ("nothing starts while ...") that has no event to wait
/// for: the window is what is tested, so it stays short, and a regression
/// that acts within it fails the test.
pub fn assert_holds_for(what: &str, window: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + window;
    loop {
        assert!(cond(), "{what} stopped holding within {window:?}");
        if Instant::now() >= end {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Each of process `pid`'s threads: its name and its timer slack in
/// nanoseconds (`/proc/TID/timerslack_ns`; reading another process's needs
/// the same user or root).
pub fn thread_timer_slacks(pid: u32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let tid = t.file_name().to_string_lossy().to_string();
        let (Ok(name), Ok(slack)) = (
            std::fs::read_to_string(t.path().join("comm")),
            std::fs::read_to_string(format!("/proc/{tid}/timerslack_ns")),
        ) else {
            continue; // the thread ended meanwhile
        };
        out.push((name.trim().to_string(), slack.trim().parse().unwrap()));
    }
    out
}

/// gRPC's two timer threads (its core's and its event engine's) run with
/// `podwarden::runtime::grpc::GRPC_TIMER_SLACK`, and the agent's own
/// threads (`housekeeping`, `prober`, `eviction`, `source-file`) with the
/// kernel's default 50 µs: the slack is what lets those timer threads wake
/// once a second rather than twice.
pub fn assert_grpc_timer_slack(pid: u32) {
    let slacks = thread_timer_slacks(pid);
    let of = |name: &str| -> Vec<u64> { slacks.iter().filter(|(n, _)| n == name).map(|(_, s)| *s).collect() };
    let want = podwarden::runtime::grpc::GRPC_TIMER_SLACK.as_nanos() as u64;
    for name in ["timer_manager", "grpc_global_tim"] {
        let found = of(name);
        assert!(
            !found.is_empty() && found.iter().all(|s| *s == want),
            "thread {name}: slack {found:?}, want {want}: {slacks:?}"
        );
    }
    for name in ["housekeeping", "prober", "eviction", "source-file"] {
        let found = of(name);
        assert!(found == [50_000], "thread {name}: slack {found:?}, want the default 50000: {slacks:?}");
    }
}

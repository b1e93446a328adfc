//! Shared test harness: the whole agent on the fake runtime, with short
//! back-offs so scenarios run in milliseconds.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use podwarden::admission::{Admission, Allocatable};
use podwarden::agent::{Agent, AgentConfig};
use podwarden::events::EventRecorder;
use podwarden::metrics::Metrics;
use podwarden::model::{self, Container, ObjectMeta, Pod, PodSpec};
use podwarden::podworkers::{self, Observer, PodWorkers};
use podwarden::runtime::fake::FakeRuntime;
use podwarden::status::StatusManager;
use podwarden::sync::{PodSync, SyncConfig};

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

pub struct Harness {
    pub fake: Arc<FakeRuntime>,
    pub agent: Arc<Agent>,
    pub workers: PodWorkers,
    pub statuses: Arc<StatusManager>,
    pub events: Arc<EventRecorder>,
    pub metrics: Arc<Metrics>,
    pub root: TempDir,
}

pub struct Opts {
    pub max_pods: usize,
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    pub observer: Option<Arc<dyn Observer>>,
    pub backoff: Duration,
    pub container_backoff: Duration,
    /// Share a pod cache between the relist and the sync phases, as the
    /// daemon does.
    pub pod_cache: bool,
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
            pod_cache: false,
        }
    }
}

impl Harness {
    pub fn new() -> Self {
        Self::with(Opts::default())
    }

    pub fn with(o: Opts) -> Self {
        let root = TempDir::new("h");
        let fake = Arc::new(FakeRuntime::new());
        let statuses = Arc::new(StatusManager::new());
        let events = Arc::new(EventRecorder::new(1000));
        let metrics = Arc::new(Metrics::new());
        let mut cfg = SyncConfig::new(root.0.join("root"), root.0.join("logs"));
        cfg.call_timeout = Duration::from_secs(2);
        cfg.backoff_initial = o.container_backoff;
        cfg.backoff_max = o.container_backoff * 8;
        cfg.id_prefix = "fake://".into();
        let cache = Arc::new(podwarden::runtime::cache::PodCache::new());
        let mut syncer = PodSync::new(fake.clone(), statuses.clone(), events.clone(), cfg);
        if o.pod_cache {
            syncer = syncer.with_pod_cache(cache.clone());
        }
        let syncer = Arc::new(syncer);
        let observer: Arc<dyn Observer> = match o.observer {
            Some(obs) => obs,
            None => metrics.clone(),
        };
        let workers = PodWorkers::new(
            syncer,
            podworkers::Config {
                resync: Duration::from_secs(1),
                backoff: o.backoff,
                start_gate_wait: Duration::from_secs(5),
            },
            Some(observer),
        );
        let agent = Arc::new(
            Agent::new(
                AgentConfig {
                    node_name: "node-1".into(),
                    root_dir: root.0.join("root"),
                    runtime_call_timeout: Duration::from_secs(5),
                },
                workers.clone(),
                fake.clone(),
                statuses.clone(),
                events.clone(),
                Arc::new(Admission::new(Allocatable {
                    cpu_millis: o.cpu_millis,
                    memory_bytes: o.memory_bytes,
                    pods: o.max_pods,
                    cpu_capacity_millis: o.cpu_millis,
                    memory_capacity_bytes: o.memory_bytes,
                })),
                metrics.clone(),
            )
            .with_pod_cache(cache),
        );
        // the static pod source delivered its first (empty) set
        agent.apply_source(Vec::new());
        Harness { fake, agent, workers, statuses, events, metrics, root }
    }

    pub fn phase(&self, uid: &str) -> Option<podworkers::Phase> {
        self.workers.phase(uid)
    }

    pub fn wait_phase(&self, uid: &str, phase: podworkers::Phase, timeout: Duration) {
        let ok = self.workers.wait_until(Instant::now() + timeout, |p| p(uid) == Some(phase));
        assert!(ok, "pod {uid} did not reach {phase:?} within {timeout:?}; it is {:?}", self.phase(uid));
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

//! The three sync phases against the [`Runtime`] trait: `sync_pod`
//! (set-up), `sync_terminating_pod` (stop), `sync_terminated_pod` (clean
//! up). Effects are idempotent: running a phase twice equals running it once,
//! and clean-up tolerates set-up never having run.

mod backoff;
mod setup;
mod terminate;
pub mod volumes;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

pub use backoff::Backoff;

use crate::events::{EventRecorder, EventType, ObjectRef};
use crate::model::{self, Pod, Uid};
use crate::podworkers::{PodSyncer, StatusFn, SyncCtx, SyncError, SyncResult, UpdateType};
use crate::runtime::cache::PodCache;
use crate::runtime::{CallCtx, Runtime, RuntimePod};
use crate::status::{StatusManager, Waiting};

#[derive(Debug, Clone)]
pub struct SyncConfig {
    pub root_dir: PathBuf,
    pub pod_logs_dir: PathBuf,
    /// Deadline for each runtime call (stops get the grace period on top).
    pub call_timeout: Duration,
    /// First container restart back-off, doubled up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Prefix of container IDs in status (`containerd://`).
    pub id_prefix: String,
    /// The node's address: podIP of host-network pods.
    pub host_ip: Option<String>,
    /// Containers may run privileged (`allowPrivileged`).
    pub allow_privileged: bool,
}

impl SyncConfig {
    pub fn new(root_dir: PathBuf, pod_logs_dir: PathBuf) -> Self {
        SyncConfig {
            root_dir,
            pod_logs_dir,
            call_timeout: Duration::from_secs(120),
            backoff_initial: Duration::from_secs(10),
            backoff_max: Duration::from_secs(300),
            id_prefix: "containerd://".into(),
            host_ip: None,
            allow_privileged: false,
        }
    }

    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root_dir.join("pods").join(uid)
    }

    /// `/var/log/pods/<ns>_<name>_<uid>`, the kubelet's layout.
    pub fn pod_log_dir(&self, pod: &Pod) -> PathBuf {
        self.pod_logs_dir.join(format!("{}_{}_{}", model::namespace(pod), model::name(pod), model::uid(pod)))
    }
}

/// Status reason (and event reason) of a pod whose set-up failed with an
/// error that cannot heal.
pub const REASON_SETUP_FAILED: &str = "SetupFailed";

/// The phases' implementation. Owns the reason cache and the container
/// restart back-off.
pub struct PodSync {
    runtime: Arc<dyn Runtime>,
    statuses: Arc<StatusManager>,
    events: Arc<EventRecorder>,
    cfg: SyncConfig,
    /// Container start errors by pod, shown as Waiting reasons.
    reasons: Mutex<HashMap<Uid, HashMap<String, Waiting>>>,
    backoff: Backoff,
    /// Told when a pod's containers first all run (pod start duration).
    metrics: Option<Arc<crate::metrics::Metrics>>,
    /// The relist's view: a set-up pass reuses its pod's last status read
    /// when a later relist saw the pod unchanged.
    pod_cache: Option<Arc<PodCache>>,
    /// Each syncing pod's last status read and when it began.
    reads: Mutex<HashMap<Uid, (Instant, RuntimePod)>>,
}

impl PodSync {
    pub fn new(
        runtime: Arc<dyn Runtime>,
        statuses: Arc<StatusManager>,
        events: Arc<EventRecorder>,
        cfg: SyncConfig,
    ) -> Self {
        let backoff = Backoff::new(cfg.backoff_initial, cfg.backoff_max);
        PodSync {
            runtime,
            statuses,
            events,
            cfg,
            reasons: Mutex::new(HashMap::new()),
            backoff,
            metrics: None,
            pod_cache: None,
            reads: Mutex::new(HashMap::new()),
        }
    }

    /// Reuse status reads the relist in `cache` saw unchanged since.
    pub fn with_pod_cache(mut self, cache: Arc<PodCache>) -> Self {
        self.pod_cache = Some(cache);
        self
    }

    /// The pod's runtime status: the last read if the relist saw the pod
    /// unchanged since it began, else a fresh read.
    fn status(&self, ctx: &SyncCtx, uid: &str) -> Result<RuntimePod, SyncError> {
        if let Some(cache) = &self.pod_cache
            && let Some((at, rp)) = self.reads.lock().get(uid)
            && cache.unchanged_since(uid, *at, rp)
        {
            return Ok(rp.clone());
        }
        self.fresh_status(ctx, uid)
    }

    /// Read the pod's runtime status (and remember the read).
    fn fresh_status(&self, ctx: &SyncCtx, uid: &str) -> Result<RuntimePod, SyncError> {
        let at = Instant::now();
        let rp = self.runtime.pod_status(&self.call(ctx), uid)?;
        if self.pod_cache.is_some() {
            self.reads.lock().insert(uid.to_string(), (at, rp.clone()));
        }
        Ok(rp)
    }

    /// Report pod start durations to `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    pub fn config(&self) -> &SyncConfig {
        &self.cfg
    }

    fn call(&self, ctx: &SyncCtx) -> CallCtx {
        CallCtx::new(self.cfg.call_timeout, &ctx.cancel)
    }

    /// Remember a container's Waiting reason, unless the pod is terminating
    /// (a terminating pod's status must not show start errors, and nothing
    /// may hold up its termination).
    fn remember(&self, ctx: &SyncCtx, container: &str, reason: &str, message: String) {
        if ctx.termination_requested() {
            return;
        }
        self.reasons
            .lock()
            .entry(ctx.uid.clone())
            .or_default()
            .insert(container.to_string(), Waiting { reason: reason.into(), message });
    }

    fn forget(&self, uid: &str, container: &str) {
        let mut r = self.reasons.lock();
        if let Some(m) = r.get_mut(uid) {
            m.remove(container);
            if m.is_empty() {
                r.remove(uid);
            }
        }
    }

    /// The remembered Waiting reasons of a pod.
    pub fn reasons_for(&self, uid: &str) -> HashMap<String, Waiting> {
        self.reasons.lock().get(uid).cloned().unwrap_or_default()
    }

    /// Fill the message of each exited container from its termination-log
    /// file, or (`FallbackToLogsOnError`, failed, empty file) from the tail
    /// of its log, as the kubelet reports it.
    fn fill_messages(&self, pod: &Pod, rp: &mut RuntimePod) {
        const MAX: usize = 4096;
        for c in rp.containers.iter_mut().filter(|c| c.state == crate::runtime::ContainerState::Exited) {
            let Some(spec) = model::containers(pod).iter().find(|s| s.name == c.name) else { continue };
            let file = self
                .cfg
                .pod_dir(model::uid(pod))
                .join("containers")
                .join(&c.name)
                .join(c.attempt.to_string())
                .join("termination-log");
            let mut msg = std::fs::read(&file).unwrap_or_default();
            msg.truncate(MAX);
            let mut msg = String::from_utf8_lossy(&msg).trim_end().to_string();
            if msg.is_empty()
                && c.exit_code != 0
                && spec.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")
            {
                msg = log_tail(&self.cfg.pod_log_dir(pod).join(&c.name).join(format!("{}.log", c.attempt)), 80, 2048);
            }
            if !msg.is_empty() {
                c.message = msg;
            }
        }
    }

    fn forget_pod(&self, uid: &str) {
        self.reasons.lock().remove(uid);
        self.reads.lock().remove(uid);
        self.backoff.forget_pod(uid);
    }
}

/// The last `lines` lines (at most `max` bytes) of a CRI log file, without
/// the `<time> <stream> <tag>` prefix of each line.
pub fn log_tail(path: &std::path::Path, lines: usize, max: usize) -> String {
    let Ok(text) = std::fs::read_to_string(path) else {
        return String::new();
    };
    let msgs: Vec<&str> = text.lines().map(|l| l.splitn(4, ' ').nth(3).unwrap_or(l)).collect();
    let start = msgs.len().saturating_sub(lines);
    let mut out = msgs[start..].join("\n");
    if out.len() > max {
        let cut = out.len() - max;
        let cut = (cut..out.len()).find(|i| out.is_char_boundary(*i)).unwrap_or(out.len());
        out = out[cut..].to_string();
    }
    out
}

impl PodSyncer for PodSync {
    fn sync_pod(&self, ctx: &SyncCtx, update_type: UpdateType, pod: &Arc<Pod>) -> Result<SyncResult, SyncError> {
        match self.setup(ctx, update_type, pod) {
            // An error that cannot heal: the pod fails (reason, message,
            // event) and terminates, instead of a back-off loop forever.
            Err(e) if e.is_permanent() && !ctx.termination_requested() => {
                let message = format!("{e}; not retried: this error cannot heal");
                log::error!("pod {}: set-up failed: {message}", model::pod_ref(pod));
                self.events.event(&ObjectRef::pod(pod), EventType::Warning, REASON_SETUP_FAILED, &message);
                self.statuses.update(model::uid(pod), |s| {
                    s.phase = Some(model::PHASE_FAILED.into());
                    s.reason = Some(REASON_SETUP_FAILED.into());
                    s.message = Some(message);
                    s.start_time.get_or_insert_with(model::now_time);
                });
                Ok(SyncResult { terminal: true, requeue_after: None })
            }
            r => r,
        }
    }

    fn sync_terminating_pod(
        &self,
        ctx: &SyncCtx,
        pod: &Arc<Pod>,
        grace: i64,
        status_fns: &[StatusFn],
    ) -> Result<(), SyncError> {
        self.terminating(ctx, pod, grace, status_fns)
    }

    fn sync_terminating_runtime_pod(&self, ctx: &SyncCtx, pod: &RuntimePod, grace: i64) -> Result<(), SyncError> {
        self.terminating_runtime(ctx, pod, grace)
    }

    fn sync_terminated_pod(&self, ctx: &SyncCtx, pod: &Arc<Pod>, remove_content: bool) -> Result<(), SyncError> {
        self.terminated(ctx, pod, remove_content)
    }
}

//! The three sync phases against the [`Runtime`] trait: `sync_pod`
//! (set-up), `sync_terminating_pod` (stop), `sync_terminated_pod` (clean
//! up). Effects are idempotent: running a phase twice equals running it once,
//! and clean-up tolerates set-up never having run.

mod container_config;
pub mod dns;
pub mod env;
pub mod hooks;
mod image;
mod sandbox;
pub mod security;
mod setup;
mod terminate;
mod volume_setup;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

pub use crate::base::backoff::Backoff;
pub use crate::node::images::pull::pull_policy;
pub use security::{APPARMOR_ANNOTATION_PREFIX, apparmor_profile};

use crate::model::{self, Pod, Uid};
use crate::pod::status::{StatusManager, Waiting};
use crate::pod::workers::{PodSyncer, StatusFn, SyncCtx, SyncError, SyncResult, UpdateType};
use crate::runtime::cache::PodCache;
use crate::runtime::{CallCtx, Runtime, RuntimePod};
use crate::telemetry::events::{EventRecorder, EventType, ObjectRef};

/// A closure turning an I/O error into the pass's error about `what`.
fn io_err(what: String) -> impl FnOnce(std::io::Error) -> SyncError {
    move |source| SyncError::Io { what, source }
}

/// The phases' settings; built by the wiring (`daemon::assemble`) from the
/// config and its tuning, which hold the defaults.
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
    /// What the node gives to pods (millicores, bytes): the limits the
    /// downward API shows for a container without its own.
    pub allocatable_cpu_millis: i64,
    pub allocatable_memory_bytes: i64,
    /// Ephemeral storage the node gives to pods (`rootDir`'s filesystem
    /// less the default 10% eviction threshold), for the downward API.
    pub allocatable_ephemeral_bytes: i64,
    /// The machine's memory (bytes, before reservations): the base of
    /// Burstable containers' OOM score adjustments.
    pub memory_capacity_bytes: i64,
    /// The host's resolver config (`resolvConf`).
    pub resolv_conf: PathBuf,
    /// `seccompDefault`: containers without a seccomp profile get the
    /// runtime's default instead of none.
    pub seccomp_default: bool,
    /// The host enforces AppArmor (profiles are passed to the runtime).
    pub apparmor_enabled: bool,
    /// The pod cgroups (`cgroupsPerQOS`); `None`: the runtime's default
    /// cgroups.
    pub cgroups: Option<crate::node::cgroups::Cgroups>,
    /// Image pulls at once (`serializeImagePulls`: 1,
    /// `maxParallelImagePulls`; 0: any number).
    pub max_parallel_pulls: usize,
}

impl SyncConfig {
    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root_dir.join("pods").join(uid)
    }

    /// `/var/log/pods/<ns>_<name>_<uid>`, the kubelet's layout.
    pub fn pod_log_dir(&self, pod: &Pod) -> PathBuf {
        self.pod_logs_dir.join(crate::logs::reader::pod_dir_name(
            model::namespace(pod),
            model::name(pod),
            model::uid(pod),
        ))
    }
}

/// Status reason (and event reason) of a pod whose set-up failed with an
/// error that cannot heal.
pub const REASON_SETUP_FAILED: &str = "SetupFailed";
/// Status and event reason of a pod past its `activeDeadlineSeconds`.
pub const REASON_DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
/// Its message, the kubelet's.
pub const MESSAGE_DEADLINE_EXCEEDED: &str = "Pod was active on the node longer than the specified deadline";

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
    /// Image pull back-off per pod and image.
    image_backoff: Backoff,
    /// Pulls at a time.
    pulls: crate::node::images::pull::PullGate,
    /// Sandboxes made at once ([`SANDBOX_STARTS`]).
    sandbox_starts: crate::node::images::pull::PullGate,
    /// Where pulls find registry credentials.
    keyring: Arc<crate::node::images::credentials::Keyring>,
    /// Told when a pod's containers first all run (pod start duration).
    metrics: Option<Arc<crate::telemetry::metrics::Metrics>>,
    /// The relist's view: a set-up pass reuses its pod's last status read
    /// when a later relist saw the pod unchanged.
    pod_cache: Option<Arc<PodCache>>,
    /// The log monitor's list of new containers' logs.
    new_logs: Option<Arc<crate::logs::monitor::NewLogs>>,
    /// Each syncing pod's last status read and when it began.
    reads: Mutex<HashMap<Uid, (Instant, RuntimePod)>>,
    /// The local ConfigMaps and Secrets (environment, volumes).
    objects: Arc<crate::model::objects::ObjectStore>,
    /// The control plane's facts (cluster mode; empty standalone).
    cluster: Arc<crate::pod::cluster::ClusterSlot>,
    /// Runs the pods' probes; told what each pass saw.
    prober: Option<Arc<crate::pod::prober::Prober>>,
    /// Container instances whose preStop hook has run (once per instance,
    /// however many termination passes stop it), as (pod UID, container
    /// ID): a pod's go when it is terminated.
    pre_stop_ran: Arc<Mutex<std::collections::HashSet<(String, String)>>>,
}

/// What stopping one container takes, for the stop helper threads: its
/// preStop hook, then `StopContainer` with the grace period left.
#[derive(Clone)]
pub(crate) struct Stopper {
    runtime: Arc<dyn Runtime>,
    events: Arc<EventRecorder>,
    call_timeout: Duration,
    pre_stop_ran: Arc<Mutex<std::collections::HashSet<(String, String)>>>,
}

impl Stopper {
    /// Run `c`'s preStop hook (its spec from `pod`; once per container
    /// instance; not with a zero grace period), take the whole seconds it
    /// used off `grace` (2 s at least remain, as in the kubelet), then stop
    /// the container. A failed hook is an event and the stop goes on.
    pub(crate) fn stop(
        &self,
        cancel: &crate::base::cancel::CancelToken,
        pod: Option<&Pod>,
        pod_ip: Option<&str>,
        c: &crate::runtime::ContainerInfo,
        grace: i64,
    ) -> Result<(), crate::runtime::RuntimeError> {
        let grace = self.pre_stop(cancel, pod, pod_ip, c, grace)?;
        self.stop_now(cancel, c, grace)
    }

    /// The preStop half of [`Stopper::stop`]: returns the grace period
    /// left for the stop.
    pub(crate) fn pre_stop(
        &self,
        cancel: &crate::base::cancel::CancelToken,
        pod: Option<&Pod>,
        pod_ip: Option<&str>,
        c: &crate::runtime::ContainerInfo,
        grace: i64,
    ) -> Result<i64, crate::runtime::RuntimeError> {
        let spec = pod.and_then(|p| model::find_container(p, &c.name));
        let hook = spec.and_then(|s| s.lifecycle.as_ref()).and_then(|l| l.pre_stop.as_ref());
        let (Some(pod), Some(spec), Some(hook)) = (pod, spec, hook) else { return Ok(grace) };
        if grace <= 0 || !self.pre_stop_ran.lock().insert((model::uid(pod).to_string(), c.id.clone())) {
            return Ok(grace);
        }
        let t = Instant::now();
        let deadline = crate::base::cancel::add_saturating(t, Duration::from_secs(grace as u64));
        if let Err(m) = hooks::run(&*self.runtime, cancel, pod, spec, &c.id, hook, pod_ip, deadline) {
            log::warn!("pod {}: {m}", model::pod_ref(pod));
            self.events.event(
                &ObjectRef::container(pod, &c.name),
                EventType::Warning,
                "FailedPreStopHook",
                "PreStopHook failed",
            );
        }
        if cancel.is_cancelled() {
            return Err(crate::runtime::RuntimeError::Cancelled { op: crate::runtime::Op::StopContainer });
        }
        Ok(hooks::grace_after_pre_stop(grace, t.elapsed()))
    }

    /// `StopContainer` with `grace` seconds (1 at least).
    pub(crate) fn stop_now(
        &self,
        cancel: &crate::base::cancel::CancelToken,
        c: &crate::runtime::ContainerInfo,
        grace: i64,
    ) -> Result<(), crate::runtime::RuntimeError> {
        let grace_d = Duration::from_secs(grace.max(1) as u64);
        let call = CallCtx::new(grace_d + self.call_timeout, cancel);
        self.runtime.stop_container(&call, &c.id, grace_d)
    }
}

/// How many sandboxes the runtime makes at once: two a CPU. Thirty pods
/// written at once all made their sandboxes together, every one slowed by
/// the others (the runtime's and the CNI plugins' work is CPU-bound), so
/// the first pod ran as late as the last; in turns, the first ones run
/// sooner and the last no later. A pod waits at most
/// [`SANDBOX_TURN_WAIT`] for its turn.
fn sandbox_starts() -> usize {
    2 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The longest a sandbox waits for its turn (a turn held by a call that
/// hangs, a CNI plugin that does not answer, holds no one up longer).
pub(crate) const SANDBOX_TURN_WAIT: Duration = Duration::from_secs(5);

impl PodSync {
    pub fn new(
        runtime: Arc<dyn Runtime>,
        statuses: Arc<StatusManager>,
        events: Arc<EventRecorder>,
        cfg: SyncConfig,
    ) -> Self {
        let backoff = Backoff::new(cfg.backoff_initial, cfg.backoff_max);
        let pulls = crate::node::images::pull::PullGate::new(cfg.max_parallel_pulls);
        let sandbox_starts = crate::node::images::pull::PullGate::new(sandbox_starts());
        PodSync {
            runtime,
            statuses,
            events,
            cfg,
            reasons: Mutex::new(HashMap::new()),
            backoff,
            image_backoff: Backoff::new(
                crate::node::images::pull::PULL_BACKOFF_INITIAL,
                crate::node::images::pull::PULL_BACKOFF_MAX,
            ),
            pulls,
            sandbox_starts,
            keyring: Arc::new(crate::node::images::credentials::Keyring::none()),
            metrics: None,
            pod_cache: None,
            new_logs: None,
            reads: Mutex::new(HashMap::new()),
            objects: Arc::new(crate::model::objects::ObjectStore::new()),
            cluster: Default::default(),
            prober: None,
            pre_stop_ran: Arc::new(Mutex::new(std::collections::HashSet::new())),
        }
    }

    pub(crate) fn stopper(&self) -> Stopper {
        Stopper {
            runtime: self.runtime.clone(),
            events: self.events.clone(),
            call_timeout: self.cfg.call_timeout,
            pre_stop_ran: self.pre_stop_ran.clone(),
        }
    }

    /// The address a probe or a hook's `httpGet` goes to without a host:
    /// the pod's IP, the node's for a host-network pod.
    fn hook_ip(&self, pod: &Pod, rp: &RuntimePod) -> Option<String> {
        if model::host_network(pod) { self.cfg.host_ip.clone() } else { rp.ready_sandbox().and_then(|s| s.ip.clone()) }
    }

    /// Run probes through `prober` (without one, containers with probes
    /// are taken as started and ready when running).
    pub fn with_prober(mut self, prober: Arc<crate::pod::prober::Prober>) -> Self {
        self.prober = Some(prober);
        self
    }

    /// Take tokens and service variables from `slot` (cluster mode).
    pub fn with_cluster(mut self, slot: Arc<crate::pod::cluster::ClusterSlot>) -> Self {
        self.cluster = slot;
        self
    }

    /// Read ConfigMaps and Secrets from `store` (the one the source fills).
    pub fn with_objects(mut self, store: Arc<crate::model::objects::ObjectStore>) -> Self {
        self.objects = store;
        self
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

    /// Pull with the credentials `keyring` finds.
    pub fn with_keyring(mut self, keyring: Arc<crate::node::images::credentials::Keyring>) -> Self {
        self.keyring = keyring;
        self
    }

    /// Report pod start durations to `metrics`.
    /// Tell the log monitor of each container's log as it is created.
    pub fn with_new_logs(mut self, new_logs: Arc<crate::logs::monitor::NewLogs>) -> Self {
        self.new_logs = Some(new_logs);
        self
    }

    pub fn with_metrics(mut self, metrics: Arc<crate::telemetry::metrics::Metrics>) -> Self {
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
    /// of its log, as the kubelet reports it: the last 4096 bytes of the
    /// file (`MaxContainerTerminationMessageLength`), or the last 80 log
    /// entries and at most 2048 bytes of them
    /// (`MaxContainerTerminationMessageLogLines`/`...LogLength`); then each
    /// message is cut to its share of 12 KiB per pod
    /// (`MaxPodTerminationMessageLogLength`). Both files are written by the
    /// container: they are read from the end (seek), regular files only,
    /// so a container writing 2 GiB there costs a few KiB.
    fn fill_messages(&self, pod: &Pod, rp: &mut RuntimePod) {
        use crate::base::fsutil::{FileError, Links};
        const MAX: u64 = 4096;
        const POD_MAX: usize = 12 * 1024;
        let count = model::containers(pod).len()
            + model::spec(pod).and_then(|s| s.init_containers.as_ref()).map_or(0, |c| c.len());
        let share = POD_MAX / count.max(1);
        let pod_dir = self.cfg.pod_dir(model::uid(pod));
        let log_dir = self.cfg.pod_log_dir(pod);
        for c in rp.containers.iter_mut().filter(|c| c.state == crate::runtime::ContainerState::Exited) {
            let Some(spec) = model::find_container(pod, &c.name) else { continue };
            let rel =
                std::path::Path::new("containers").join(&c.name).join(c.attempt.to_string()).join("termination-log");
            let mut msg = match crate::base::fsutil::read_tail_in(&pod_dir, &rel, Links::Refuse, MAX) {
                // verbatim, as the kubelet keeps it (a trailing newline too)
                Ok((bytes, _)) => String::from_utf8_lossy(&bytes).into_owned(),
                Err(FileError::NotFound { .. }) => String::new(),
                // as the kubelet reports it
                Err(e) => format!("Error on reading termination log {e}"),
            };
            if msg.is_empty()
                && c.exit_code != 0
                && spec.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")
            {
                let rel = std::path::Path::new(&c.name).join(format!("{}.log", c.attempt));
                msg = match crate::logs::reader::termination_tail(&log_dir, &rel, 80, 2048) {
                    Ok(m) => m,
                    Err(FileError::NotFound { .. }) => String::new(),
                    Err(e) => format!("Error on reading termination message from logs: {e}"),
                };
            }
            if msg.len() > share {
                let cut = (0..=share).rev().find(|i| msg.is_char_boundary(*i)).unwrap_or(0);
                msg.truncate(cut);
            }
            if !msg.is_empty() {
                c.message = msg;
            }
        }
    }

    /// The pod failed for `reason`: its status says so until it ends (the
    /// termination keeps the phase and reason).
    fn fail(&self, pod: &Pod, reason: &str, message: String) {
        self.statuses.update(model::uid(pod), |s| {
            s.phase = Some(model::PHASE_FAILED.into());
            s.reason = Some(reason.into());
            s.message = Some(message);
            s.start_time.get_or_insert_with(model::now_time);
        });
    }

    /// Time left before the pod's `activeDeadlineSeconds` runs out, counted
    /// from its start time; `None` without a deadline or a start time yet.
    fn active_deadline_left(&self, pod: &Pod) -> Option<Duration> {
        let secs = model::spec(pod)?.active_deadline_seconds?;
        let start = self.statuses.get(model::uid(pod))?.start_time?;
        let started: std::time::SystemTime = start.0.into();
        let end = started.checked_add(Duration::from_secs(secs.max(0) as u64))?;
        Some(end.duration_since(std::time::SystemTime::now()).unwrap_or(Duration::ZERO))
    }

    /// What the pod's terminated pass leaves behind no more: whose preStop
    /// hooks ran (a terminating pass, which may come again, keeps them).
    fn forget_terminated_pod(&self, uid: &str) {
        self.forget_pod(uid);
        self.pre_stop_ran.lock().retain(|(u, _)| u != uid);
    }

    fn forget_pod(&self, uid: &str) {
        self.reasons.lock().remove(uid);
        self.reads.lock().remove(uid);
        self.backoff.forget_pod(uid);
        self.image_backoff.forget_pod(uid);
    }
}

impl PodSyncer for PodSync {
    fn sync_pod(&self, ctx: &SyncCtx, update_type: UpdateType, pod: &Arc<Pod>) -> Result<SyncResult, SyncError> {
        log::trace!("pod {}: sync ({update_type:?})", model::pod_ref(pod));
        // activeDeadlineSeconds, counted from the pod's start time: past
        // it, the pod fails and is killed (the kubelet's active deadline
        // handler); before it, the pod is looked at again when it comes
        let deadline = self.active_deadline_left(pod);
        if deadline.is_some_and(|left| left.is_zero()) && !ctx.termination_requested() {
            log::info!("pod {}: {MESSAGE_DEADLINE_EXCEEDED}", model::pod_ref(pod));
            let obj = ObjectRef::pod(pod);
            self.events.event(&obj, EventType::Normal, REASON_DEADLINE_EXCEEDED, MESSAGE_DEADLINE_EXCEEDED);
            self.fail(pod, REASON_DEADLINE_EXCEEDED, MESSAGE_DEADLINE_EXCEEDED.to_string());
            return Ok(SyncResult { terminal: true, requeue_after: None });
        }
        let result = self.setup(ctx, update_type, pod).map(|mut r| {
            if let Some(left) = deadline.or_else(|| self.active_deadline_left(pod)) {
                r.requeue_after = Some(r.requeue_after.map_or(left, |d| d.min(left)));
            }
            r
        });
        match result {
            // An error that cannot heal: the pod fails (reason, message,
            // event) and terminates, instead of a back-off loop forever.
            Err(e) if e.is_permanent() && !ctx.termination_requested() => {
                let message = format!("{e}; not retried: this error cannot heal");
                log::error!("pod {}: set-up failed: {message}", model::pod_ref(pod));
                self.events.event(&ObjectRef::pod(pod), EventType::Warning, REASON_SETUP_FAILED, &message);
                self.fail(pod, REASON_SETUP_FAILED, message);
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
        if let Some(p) = &self.prober {
            p.stop_liveness_and_startup(model::uid(pod));
        }
        self.terminating(ctx, pod, grace, status_fns)
    }

    fn sync_terminating_runtime_pod(&self, ctx: &SyncCtx, pod: &RuntimePod, grace: i64) -> Result<(), SyncError> {
        self.terminating_runtime(ctx, pod, grace)
    }

    fn sync_terminated_pod(&self, ctx: &SyncCtx, pod: &Arc<Pod>, remove_content: bool) -> Result<(), SyncError> {
        if let Some(p) = &self.prober {
            p.remove(model::uid(pod));
        }
        self.terminated(ctx, pod, remove_content)
    }
}

#[cfg(test)]
impl SyncConfig {
    /// A node of 1 CPU and 1 GiB allocatable, paths that do not exist and
    /// 1 s deadlines and back-off: what the phases' unit tests start from.
    pub(crate) fn for_tests() -> Self {
        SyncConfig {
            root_dir: "/nonexistent/root".into(),
            pod_logs_dir: "/nonexistent/logs".into(),
            call_timeout: Duration::from_secs(1),
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(1),
            id_prefix: "fake://".into(),
            host_ip: None,
            allow_privileged: false,
            allocatable_cpu_millis: 1000,
            allocatable_memory_bytes: 1 << 30,
            allocatable_ephemeral_bytes: 10 << 30,
            memory_capacity_bytes: 4 << 30,
            resolv_conf: "/etc/resolv.conf".into(),
            seccomp_default: false,
            apparmor_enabled: false,
            cgroups: None,
            max_parallel_pulls: 1,
        }
    }
}

//! Pod workers: the lifecycle owner. One named OS thread per pod, blocking
//! on its own notifier channel (capacity 1, `()`), taking its work from the
//! pending-update slot in the pod's sync status. The decisions are made by
//! the pure [`lifecycle`] state machine; this module holds the state under
//! one lock, and `worker.rs` runs the passes.

mod exits;
use exits::OnStop;
pub use exits::StopNote;
pub mod lifecycle;
mod worker;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use thiserror::Error;

use lifecycle::{
    AfterWork, GraceInputs, KnownDecision, Lifecycle, Outcome, StartDecision, Timing, UpdateDecision, UpdateFacts,
};
pub use lifecycle::{Phase, UpdateType, WorkKind};

use crate::base::cancel::{CancelToken, GateClosed, StartGate};
use crate::model::{self, Pod, PodStatus, Uid};
use crate::runtime::{RuntimeError, RuntimePod};

/// Changes a pod's status when its termination completes (reason, message).
pub type StatusFn = Arc<dyn Fn(&mut PodStatus) + Send + Sync>;

/// Options of a Kill update.
#[derive(Default)]
pub struct KillPodOptions {
    /// Signalled (a message, then disconnect) once the pod is terminated,
    /// or at once if the kill has nothing to do.
    pub completed: Option<Sender<()>>,
    /// An eviction: content is removed though the pod is not deleted.
    pub evict: bool,
    /// Grace period in seconds; can only shorten the one in force.
    pub grace_period_override: Option<i64>,
    pub status_fn: Option<StatusFn>,
}

impl KillPodOptions {
    /// Options with a completion signal; returns the receiving end.
    pub fn with_completion() -> (Self, Receiver<()>) {
        let (tx, rx) = crossbeam_channel::bounded(1);
        (KillPodOptions { completed: Some(tx), ..Default::default() }, rx)
    }
}

/// The only way to ask for a pod to run, change or stop.
pub struct UpdatePodOptions {
    pub update_type: UpdateType,
    pub pod: Option<Arc<Pod>>,
    /// For a pod known only from the runtime (orphans): Kill only.
    pub running_pod: Option<Arc<RuntimePod>>,
    pub kill_options: Option<KillPodOptions>,
}

impl UpdatePodOptions {
    pub fn new(update_type: UpdateType, pod: Arc<Pod>) -> Self {
        UpdatePodOptions { update_type, pod: Some(pod), running_pod: None, kill_options: None }
    }

    pub fn kill(pod: Arc<Pod>, options: KillPodOptions) -> Self {
        UpdatePodOptions {
            update_type: UpdateType::Kill,
            pod: Some(pod),
            running_pod: None,
            kill_options: Some(options),
        }
    }

    pub fn kill_runtime_pod(pod: Arc<RuntimePod>, options: KillPodOptions) -> Self {
        UpdatePodOptions {
            update_type: UpdateType::Kill,
            pod: None,
            running_pod: Some(pod),
            kill_options: Some(options),
        }
    }
}

#[derive(Debug, Error)]
pub enum SyncError {
    #[error("cancelled: termination was requested or shortened")]
    Cancelled,
    #[error(transparent)]
    Runtime(RuntimeError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A helper thread to stop a container could not be started.
    #[error("cannot start a thread to stop container {container}: {source}")]
    StopThread {
        container: String,
        #[source]
        source: std::io::Error,
    },
    /// Clean-up found something still mounted below the pod's directory
    /// (removing it would reach into what is mounted there).
    #[error("{} still has mounts below it; not removed", dir.display())]
    StillMounted { dir: std::path::PathBuf },
    /// The pod's cgroup could not be made (with `cgroupDriver: systemd`,
    /// systemd's error).
    #[error("creating the pod's cgroup: {0}")]
    PodCgroup(#[source] crate::node::cgroups::CgroupError),
    /// A volume could not be set up (boxed: the rarest error is the
    /// largest).
    #[error(transparent)]
    Mount(Box<crate::pod::volumes::MountError>),
    /// The pod's spec cannot be run as it is (retrying cannot help).
    #[error("{0}")]
    Invalid(String),
}

impl SyncError {
    /// An error that cannot heal by retrying the same pass: a path the
    /// kernel refuses (`ENAMETOOLONG`, `EINVAL`), a runtime error that says
    /// so ([`RuntimeError::is_permanent`]), a pod spec that cannot run.
    /// Workers report it once and move on (see `Outcome::Failed`); every
    /// other error is retried with back-off.
    pub fn is_permanent(&self) -> bool {
        match self {
            SyncError::Io { source, .. } => {
                matches!(source.raw_os_error(), Some(libc::ENAMETOOLONG) | Some(libc::EINVAL))
            }
            SyncError::Runtime(e) => e.is_permanent(),
            SyncError::Invalid(_) => true,
            SyncError::Cancelled
            | SyncError::StopThread { .. }
            | SyncError::StillMounted { .. }
            | SyncError::PodCgroup(_)
            | SyncError::Mount(_) => false,
        }
    }
}

impl From<RuntimeError> for SyncError {
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::Cancelled { .. } => SyncError::Cancelled,
            e => SyncError::Runtime(e),
        }
    }
}

impl From<GateClosed> for SyncError {
    fn from(_: GateClosed) -> Self {
        SyncError::Cancelled
    }
}

/// The result of a successful `sync_pod`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncResult {
    /// The pod is terminal (restartPolicy says no container runs again).
    pub terminal: bool,
    /// Look again this soon (container back-off ends), before the resync.
    pub requeue_after: Option<Duration>,
}

/// What a pass of work gets: the pod's cancellation and start gate.
pub struct SyncCtx {
    pub uid: Uid,
    pub cancel: CancelToken,
    gate: Arc<StartGate>,
    /// Told which containers a termination pass stops, and when it has
    /// stopped them all (the sandbox may still be up): what a node
    /// shutdown waits for.
    on_stop: Option<OnStop>,
}

impl SyncCtx {
    /// A context for calling the phases directly (tests, tools).
    pub fn detached(uid: &str) -> Self {
        SyncCtx {
            uid: uid.to_string(),
            cancel: CancelToken::new(),
            gate: Arc::new(StartGate::default()),
            on_stop: None,
        }
    }

    /// Every container of the pod has stopped; its sandbox is next.
    pub fn containers_stopped(&self) {
        if let Some(f) = &self.on_stop {
            f(StopNote::Stopped);
        }
    }

    /// Fail with `Cancelled` if this pass was interrupted.
    pub fn check(&self) -> Result<(), SyncError> {
        if self.cancel.is_cancelled() || self.gate.is_closed() {
            return Err(SyncError::Cancelled);
        }
        Ok(())
    }

    /// Fail with `Cancelled` if this pass was interrupted; unlike [`check`]
    /// this ignores the start gate, for the terminating phases.
    ///
    /// [`check`]: SyncCtx::check
    pub fn cancel_check(&self) -> Result<(), SyncError> {
        if self.cancel.is_cancelled() {
            return Err(SyncError::Cancelled);
        }
        Ok(())
    }

    /// True once the pod's termination was requested (the start gate is shut).
    pub fn termination_requested(&self) -> bool {
        self.gate.is_closed()
    }

    /// Run a start (sandbox or container) only if termination has not been
    /// requested; a kill waits for a start in flight to return.
    pub fn start<T>(&self, f: impl FnOnce() -> T) -> Result<T, SyncError> {
        self.check()?;
        Ok(self.gate.run(f)?)
    }
}

/// The three sync phases, called by the worker threads.
pub trait PodSyncer: Send + Sync {
    /// Set-up: admit-time work, dirs, images, sandbox, containers, restarts.
    fn sync_pod(&self, ctx: &SyncCtx, update_type: UpdateType, pod: &Arc<Pod>) -> Result<SyncResult, SyncError>;
    /// Stop every container with `grace` seconds, then the sandbox; apply
    /// the kill requests' status functions.
    fn sync_terminating_pod(
        &self,
        ctx: &SyncCtx,
        pod: &Arc<Pod>,
        grace: i64,
        status_fns: &[StatusFn],
    ) -> Result<(), SyncError>;
    /// Stop a pod known only from the runtime.
    fn sync_terminating_runtime_pod(&self, ctx: &SyncCtx, pod: &RuntimePod, grace: i64) -> Result<(), SyncError>;
    /// Clean up a terminated pod; pod content only if `remove_content`.
    fn sync_terminated_pod(&self, ctx: &SyncCtx, pod: &Arc<Pod>, remove_content: bool) -> Result<(), SyncError>;
}

/// Told about lifecycle transitions (metrics, tests).
pub trait Observer: Send + Sync {
    /// Termination was requested and no container start is in flight.
    fn termination_requested(&self, _uid: &str) {}
    fn phase_changed(&self, _uid: &str, _from: Phase, _to: Phase) {}
    /// A pass of work ended (`kind`, how long it took, whether it failed).
    fn work_done(&self, _kind: WorkKind, _took: Duration, _failed: bool) {}
}

/// The metrics observe the passes: `kubelet_pod_worker_duration_seconds`.
impl Observer for crate::telemetry::metrics::Metrics {
    fn work_done(&self, kind: WorkKind, took: Duration, _failed: bool) {
        let op = match kind {
            WorkKind::Sync => "sync",
            WorkKind::Terminating => "terminating",
            WorkKind::Terminated => "terminated",
        };
        self.pod_worker_pass(op, took);
    }
}

/// The pod workers' timing; built by the wiring (`daemon::assemble`) from
/// the config (`syncFrequency`) and its tuning, which hold the defaults.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Successful syncs are repeated this often (jittered).
    pub resync: Duration,
    /// Failed passes are retried after this (jittered).
    pub backoff: Duration,
    /// How long a kill waits for a container start in flight.
    pub start_gate_wait: Duration,
}

/// One worker's state as `sync_known_pods` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSync {
    pub phase: Phase,
    pub orphan: bool,
    pub has_config: bool,
    pub is_static: bool,
}

/// A snapshot of one known pod.
#[derive(Clone)]
pub struct WorkerInfo {
    pub uid: Uid,
    pub phase: Phase,
    pub pod: Option<Arc<Pod>>,
    pub is_static: bool,
    pub deleted: bool,
    pub restart_requested: bool,
    pub last_error: bool,
    pub phase_since: Instant,
    /// A terminating pod whose containers are all stopped (its sandbox
    /// may still be going down).
    pub containers_stopped: bool,
}

/// What a worker runs in one pass.
#[derive(Clone)]
struct Work {
    update_type: UpdateType,
    pod: Option<Arc<Pod>>,
    running_pod: Option<Arc<RuntimePod>>,
    start: Instant,
}

struct WorkItem {
    kind: WorkKind,
    work: Work,
    ctx: SyncCtx,
    grace: i64,
    status_fns: Vec<StatusFn>,
    remove_content: bool,
}

enum StartWork {
    /// The pod is no longer known: exit.
    Gone,
    /// Nothing to do now (no pending update, or waiting for the full name).
    Idle,
    Run(Box<WorkItem>),
}

struct PodSyncStatus {
    lc: Lifecycle,
    full_name: String,
    is_static: bool,
    /// A pending update is queued or a pass is in progress.
    working: bool,
    pending: Option<Work>,
    /// The update of the last pass (what other components may see).
    active: Option<Work>,
    notify_done: Vec<Sender<()>>,
    status_fns: Vec<StatusFn>,
    cancel: CancelToken,
    gate: Arc<StartGate>,
    handle: Option<worker::WorkerHandle>,
    phase_since: Instant,
    /// A termination pass stopped every container, or the runtime told
    /// each one's exit (reset when the pod syncs again).
    containers_stopped: bool,
    /// The containers the termination pass stops whose exit is still to
    /// come.
    awaited_exits: exits::Awaited,
}

impl PodSyncStatus {
    fn latest_pod(&self) -> Option<&Arc<Pod>> {
        self.pending.as_ref().and_then(|w| w.pod.as_ref()).or_else(|| self.active.as_ref().and_then(|w| w.pod.as_ref()))
    }

    fn latest_work(&self) -> Option<&Work> {
        self.pending.as_ref().or(self.active.as_ref())
    }
}

#[derive(Default)]
struct State {
    pods: HashMap<Uid, PodSyncStatus>,
    /// Full name -> the static pod UID allowed to run under it.
    started_static: HashMap<String, Uid>,
    /// Full name -> static pod UIDs waiting for it, in arrival order.
    waiting_static: HashMap<String, VecDeque<Uid>>,
    /// `sync_known_pods` ran once: unknown UIDs are known not to run.
    pods_synced: bool,
    /// The container exits the runtime told lately.
    exits: exits::RecentExits,
}

pub(crate) struct Inner {
    state: Mutex<State>,
    changed: Condvar,
    syncer: Arc<dyn PodSyncer>,
    config: Config,
    observer: Option<Arc<dyn Observer>>,
    threads: AtomicUsize,
    /// Idle worker threads waiting for a pod (see `worker.rs`).
    idle: Mutex<Vec<Sender<worker::Assignment>>>,
    rng: AtomicU64,
}

/// See the module docs. Cheap to clone; all clones share the workers.
#[derive(Clone)]
pub struct PodWorkers {
    inner: Arc<Inner>,
}

/// A handle on the pod workers that does not keep them alive (for parts
/// the workers own, such as the prober).
#[derive(Clone)]
pub struct WeakPodWorkers(std::sync::Weak<Inner>);

impl WeakPodWorkers {
    pub fn upgrade(&self) -> Option<PodWorkers> {
        self.0.upgrade().map(|inner| PodWorkers { inner })
    }
}

fn signal_done(tx: Sender<()>) {
    let _ = tx.try_send(());
}

impl PodWorkers {
    pub fn downgrade(&self) -> WeakPodWorkers {
        WeakPodWorkers(Arc::downgrade(&self.inner))
    }

    pub fn new(syncer: Arc<dyn PodSyncer>, config: Config, observer: Option<Arc<dyn Observer>>) -> Self {
        PodWorkers {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
                syncer,
                config,
                observer,
                threads: AtomicUsize::new(0),
                idle: Mutex::new(Vec::new()),
                rng: AtomicU64::new(0x9E37_79B9_7F4A_7C15),
            }),
        }
    }

    /// Ask for a pod to be created, updated, synced or killed.
    pub fn update_pod(&self, opts: UpdatePodOptions) {
        let gate = {
            let mut st = self.inner.state.lock();
            self.inner.update_locked(&mut st, opts)
        };
        if let Some((uid, gate)) = gate {
            self.inner.close_gate(&uid, &gate);
        }
    }

    /// Reconcile the workers with the desired set (see DESIGN.md): orphaned
    /// workers are driven to the end (kill replay), finished ones that are
    /// not desired are removed. Returns the workers that remain.
    pub fn sync_known_pods(&self, desired: &HashSet<Uid>) -> HashMap<Uid, WorkerSync> {
        let mut out = HashMap::new();
        let mut removed = Vec::new();
        let mut gates = Vec::new();
        {
            let mut st = self.inner.state.lock();
            st.pods_synced = true;
            let uids: Vec<Uid> = st.pods.keys().cloned().collect();
            for uid in uids {
                let is_desired = desired.contains(&uid);
                let entry = st.pods.get_mut(&uid).expect("uid listed from the map");
                let idle = !entry.working && entry.pending.is_none();
                match entry.lc.on_sync_known(is_desired, idle) {
                    KnownDecision::Remove => {
                        if let Some(h) = self.inner.remove_locked(&mut st, &uid) {
                            removed.push(h);
                        }
                        continue;
                    }
                    KnownDecision::ReplayKill => {
                        if let Some(work) = entry.latest_work().cloned() {
                            let opts = UpdatePodOptions {
                                update_type: UpdateType::Kill,
                                pod: work.pod,
                                running_pod: work.running_pod,
                                kill_options: None,
                            };
                            if let Some(g) = self.inner.update_locked(&mut st, opts) {
                                gates.push(g);
                            }
                        }
                    }
                    KnownDecision::Keep => {}
                }
                let entry = &st.pods[&uid];
                out.insert(
                    uid,
                    WorkerSync {
                        phase: entry.lc.phase,
                        orphan: !is_desired,
                        has_config: entry.latest_pod().is_some(),
                        is_static: entry.is_static,
                    },
                );
            }
        }
        for (uid, gate) in gates {
            self.inner.close_gate(&uid, &gate);
        }
        drop(removed); // joins the exited worker threads outside the lock
        out
    }

    pub fn is_pod_known_terminated(&self, uid: &str) -> bool {
        self.inner.state.lock().pods.get(uid).is_some_and(|s| s.lc.is_terminated())
    }

    /// Conservative: an unknown pod could have running containers until the
    /// first `sync_known_pods` has happened.
    pub fn could_have_running_containers(&self, uid: &str) -> bool {
        let st = self.inner.state.lock();
        match st.pods.get(uid) {
            Some(s) => !s.lc.is_terminated(),
            None => !st.pods_synced,
        }
    }

    pub fn is_pod_termination_requested(&self, uid: &str) -> bool {
        self.inner.state.lock().pods.get(uid).is_some_and(|s| s.lc.is_termination_requested())
    }

    /// Containers of this pod should be stopping (an unknown pod is not:
    /// cleanup loops use `should_pod_content_be_removed`).
    pub fn should_pod_containers_be_terminating(&self, uid: &str) -> bool {
        self.is_pod_termination_requested(uid)
    }

    pub fn should_pod_runtime_be_removed(&self, uid: &str) -> bool {
        let st = self.inner.state.lock();
        match st.pods.get(uid) {
            Some(s) => s.lc.is_terminated(),
            None => st.pods_synced,
        }
    }

    pub fn should_pod_content_be_removed(&self, uid: &str) -> bool {
        let st = self.inner.state.lock();
        match st.pods.get(uid) {
            Some(s) => s.lc.should_content_be_removed(),
            None => st.pods_synced,
        }
    }

    pub fn should_pod_be_finished(&self, uid: &str) -> bool {
        let st = self.inner.state.lock();
        match st.pods.get(uid) {
            Some(s) => s.lc.is_finished(),
            None => st.pods_synced,
        }
    }

    /// Pods whose worker has not finished, with their latest spec (pods
    /// known only from the runtime are left out). Admission counts them:
    /// until finished they may still hold what they were admitted with.
    pub fn unfinished(&self) -> Vec<(Uid, Arc<Pod>)> {
        let st = self.inner.state.lock();
        st.pods
            .iter()
            .filter(|(_, s)| !s.lc.is_finished())
            .filter_map(|(uid, s)| Some((uid.clone(), s.latest_pod()?.clone())))
            .collect()
    }

    /// The phase of a known pod.
    pub fn phase(&self, uid: &str) -> Option<Phase> {
        self.inner.state.lock().pods.get(uid).map(|s| s.lc.phase)
    }

    /// Every known pod.
    pub fn snapshot(&self) -> Vec<WorkerInfo> {
        let st = self.inner.state.lock();
        st.pods
            .iter()
            .map(|(uid, s)| WorkerInfo {
                uid: uid.clone(),
                phase: s.lc.phase,
                pod: s.latest_pod().cloned(),
                is_static: s.is_static,
                deleted: s.lc.deleted,
                restart_requested: s.lc.restart_requested,
                last_error: s.lc.last_error,
                phase_since: s.phase_since,
                containers_stopped: s.containers_stopped,
            })
            .collect()
    }

    /// Live worker threads, including idle ones that wait (at most a
    /// second) to be reused for the next pod.
    pub fn worker_threads(&self) -> usize {
        self.inner.threads.load(Ordering::SeqCst)
    }

    /// Wait until `pred` holds for the phases of the known pods (unknown
    /// UIDs count as finished), or until `deadline`. Returns whether it held.
    pub fn wait_until(&self, deadline: Instant, mut pred: impl FnMut(&dyn Fn(&str) -> Option<Phase>) -> bool) -> bool {
        self.wait_state(deadline, |st| pred(&|uid: &str| st.pods.get(uid).map(|s| s.lc.phase)))
    }

    /// Wait until `done` holds for the workers' state (looked at again at
    /// every change), or until `deadline`. Returns whether it held.
    fn wait_state(&self, deadline: Instant, mut done: impl FnMut(&State) -> bool) -> bool {
        let mut st = self.inner.state.lock();
        loop {
            if done(&st) {
                return true;
            }
            if self.inner.changed.wait_until(&mut st, deadline).timed_out() {
                return done(&st);
            }
        }
    }

    /// Wait until each of `uids` is terminated (or unknown). Returns whether
    /// they all were before `deadline`.
    pub fn wait_terminated(&self, uids: &[Uid], deadline: Instant) -> bool {
        self.wait_until(deadline, |phase| uids.iter().all(|u| phase(u).is_none_or(|p| p >= Phase::Terminated)))
    }

    /// Wait until every container of each of `uids` has stopped (their
    /// sandboxes may still be stopping), each is terminated or unknown.
    /// Returns whether they all were before `deadline`. A node shutdown
    /// waits for this: what must end before the machine goes down is the
    /// pods' processes, not the teardown of their network: a container
    /// counts as stopped once the runtime told its exit
    /// ([`PodWorkers::container_exited`]), its `StopContainer` still
    /// going on.
    pub fn wait_containers_stopped(&self, uids: &[Uid], deadline: Instant) -> bool {
        self.wait_state(deadline, |st| {
            uids.iter().all(|u| st.pods.get(u).is_none_or(|e| e.containers_stopped || e.lc.phase >= Phase::Terminated))
        })
    }
}

impl Inner {
    fn jitter(&self, d: Duration) -> Duration {
        // xorshift64*: cheap jitter of up to +25 %
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.store(x, Ordering::Relaxed);
        let frac = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
        d.saturating_add(d.mul_f64(0.25 * frac))
    }

    /// The body of `update_pod`, under the lock. Returns a start gate to
    /// close (outside the lock) when termination was just requested.
    fn update_locked(self: &Arc<Self>, st: &mut State, opts: UpdatePodOptions) -> Option<(Uid, Arc<StartGate>)> {
        let UpdatePodOptions { update_type, pod, running_pod, kill_options } = opts;
        let mut kill = kill_options.unwrap_or_default();
        let runtime_only = pod.is_none();
        let uid: Uid = match (&pod, &running_pod) {
            (Some(p), _) => model::uid(p).to_string(),
            (None, Some(r)) => r.uid.clone(),
            (None, None) => {
                log::error!("update_pod({update_type:?}) without a pod or runtime pod ignored");
                if let Some(tx) = kill.completed.take() {
                    signal_done(tx);
                }
                return None;
            }
        };
        let first_time = !st.pods.contains_key(&uid);
        let mut facts = UpdateFacts {
            runtime_only,
            evict: kill.evict,
            grace: GraceInputs { kill_override: kill.grace_period_override, ..Default::default() },
            ..UpdateFacts::new(update_type)
        };
        if first_time && runtime_only && update_type != UpdateType::Kill {
            log::debug!("pod {uid}: {update_type:?} for a runtime-only pod ignored");
            if let Some(tx) = kill.completed.take() {
                signal_done(tx);
            }
            return None;
        }
        if first_time {
            let (full_name, is_static) = match &pod {
                Some(p) => (model::full_name(p), model::is_static(p)),
                None => {
                    let r = running_pod.as_ref().expect("runtime pod");
                    (format!("{}_{}", r.name, r.namespace), false)
                }
            };
            if is_static {
                st.waiting_static.entry(full_name.clone()).or_default().push_back(uid.clone());
            }
            st.pods.insert(
                uid.clone(),
                PodSyncStatus {
                    lc: Lifecycle::new(),
                    full_name,
                    is_static,
                    working: false,
                    pending: None,
                    active: None,
                    notify_done: Vec::new(),
                    status_fns: Vec::new(),
                    cancel: CancelToken::new(),
                    gate: Arc::new(StartGate::default()),
                    handle: None,
                    phase_since: Instant::now(),
                    containers_stopped: false,
                    awaited_exits: exits::Awaited::default(),
                },
            );
        }
        let entry = st.pods.get_mut(&uid).expect("inserted above");
        // A runtime pod for a UID we have a spec for: use the spec.
        let pod = pod.or_else(|| entry.latest_pod().cloned());
        let running_pod = if pod.is_some() { None } else { running_pod };
        if let Some(p) = &pod {
            facts.pod_deleted = model::is_deleted(p);
            facts.pod_terminal = model::is_terminal_phase(model::phase(p));
            facts.grace.deletion = p.metadata.deletion_grace_period_seconds;
            facts.grace.spec = model::spec_grace_seconds(p);
        }
        let before = entry.lc.phase;
        let decision = entry.lc.on_update(&facts, first_time);
        let UpdateDecision::Queue { became_terminating, grace_shortened, attach_kill } = decision else {
            log::debug!("pod {uid}: {update_type:?} ignored: {decision:?}");
            if let Some(tx) = kill.completed.take() {
                signal_done(tx);
            }
            return None;
        };
        if attach_kill {
            if let Some(tx) = kill.completed.take() {
                entry.notify_done.push(tx);
            }
            if let Some(f) = kill.status_fn.take() {
                entry.status_fns.push(f);
            }
        } else if let Some(tx) = kill.completed.take() {
            signal_done(tx);
        }
        entry.pending = Some(Work { update_type, pod, running_pod, start: Instant::now() });
        entry.working = true;
        if became_terminating || grace_shortened {
            entry.cancel.cancel();
        }
        let gate = became_terminating.then(|| entry.gate.clone());
        if entry.handle.is_none() {
            match worker::WorkerHandle::spawn(self.clone(), &uid) {
                Ok(h) => entry.handle = Some(h),
                Err(e) => log::error!("pod {uid}: cannot start its worker thread: {e}; will retry on the next update"),
            }
        }
        if let Some(h) = &entry.handle {
            h.notify();
        }
        let after = entry.lc.phase;
        if after != before {
            self.phase_changed(st, &uid, before, after);
        }
        gate.map(|g| (uid, g))
    }

    fn close_gate(&self, uid: &str, gate: &StartGate) {
        if !gate.close(self.config.start_gate_wait) {
            log::warn!(
                "pod {uid}: a container start was still in flight {:?} after the kill; termination will stop it",
                self.config.start_gate_wait
            );
        }
        if let Some(o) = &self.observer {
            o.termination_requested(uid);
        }
    }

    fn phase_changed(&self, st: &mut State, uid: &str, from: Phase, to: Phase) {
        if let Some(entry) = st.pods.get_mut(uid) {
            entry.phase_since = Instant::now();
            if to < Phase::Terminating {
                entry.containers_stopped = false;
                entry.awaited_exits.clear();
            }
            if from < Phase::Terminated && to >= Phase::Terminated {
                for tx in entry.notify_done.drain(..) {
                    signal_done(tx);
                }
                entry.status_fns.clear();
                let name = entry.full_name.clone();
                self.release_name(st, &name, uid);
            }
        }
        if let Some(o) = &self.observer {
            o.phase_changed(uid, from, to);
        }
        self.changed.notify_all();
    }

    /// May `uid` run under its static full name? Claims it if so.
    fn claim_name(st: &mut State, name: &str, uid: &str) -> bool {
        if let Some(owner) = st.started_static.get(name) {
            return owner == uid;
        }
        let State { pods, waiting_static, started_static, .. } = st;
        if let Some(q) = waiting_static.get_mut(name) {
            while let Some(front) = q.front() {
                let eligible = pods.get(front).is_some_and(|s| !s.lc.is_termination_requested());
                if eligible {
                    break;
                }
                q.pop_front();
            }
            match q.front() {
                Some(front) if front != uid => return false,
                Some(_) => {
                    q.pop_front();
                }
                None => {}
            }
            if q.is_empty() {
                waiting_static.remove(name);
            }
        }
        started_static.insert(name.to_string(), uid.to_string());
        true
    }

    /// `uid` no longer runs under `name`: wake the next waiting pod.
    fn release_name(&self, st: &mut State, name: &str, uid: &str) {
        if st.started_static.get(name).is_some_and(|o| o == uid) {
            st.started_static.remove(name);
        }
        if st.started_static.contains_key(name) {
            return;
        }
        let next = st.waiting_static.get(name).and_then(|q| {
            q.iter().find(|u| st.pods.get(*u).is_some_and(|s| !s.lc.is_termination_requested())).cloned()
        });
        if let Some(next) = next
            && let Some(s) = st.pods.get_mut(&next)
            && s.pending.is_some()
        {
            s.working = true;
            if let Some(h) = &s.handle {
                h.notify();
            }
        }
    }

    /// Forget a pod; returns its worker handle to drop outside the lock.
    fn remove_locked(&self, st: &mut State, uid: &str) -> Option<worker::WorkerHandle> {
        let entry = st.pods.remove(uid)?;
        if let Some(q) = st.waiting_static.get_mut(&entry.full_name) {
            q.retain(|u| u != uid);
            if q.is_empty() {
                st.waiting_static.remove(&entry.full_name);
            }
        }
        self.release_name(st, &entry.full_name, uid);
        for tx in entry.notify_done {
            signal_done(tx);
        }
        self.changed.notify_all();
        entry.handle
    }

    /// Take the pending update for a pass. `rx` is the worker's notifier,
    /// drained under the lock so no notification for a later update is lost.
    /// A termination pass of `uid` stopped every container.
    fn containers_stopped(&self, uid: &str) {
        let mut st = self.state.lock();
        if let Some(entry) = st.pods.get_mut(uid) {
            entry.containers_stopped = true;
            entry.awaited_exits.clear();
        }
        drop(st);
        self.changed.notify_all();
    }

    fn start_work(self: &Arc<Self>, uid: &str, rx: &Receiver<()>) -> StartWork {
        let mut st = self.state.lock();
        while rx.try_recv().is_ok() {}
        let Some(entry) = st.pods.get_mut(uid) else {
            return StartWork::Gone;
        };
        let Some(work) = entry.pending.take() else {
            entry.working = false;
            return StartWork::Idle;
        };
        let Some(kind) = entry.lc.work_kind() else {
            entry.working = false;
            return StartWork::Idle;
        };
        if entry.cancel.is_cancelled() {
            entry.cancel = CancelToken::new();
        }
        let (name, is_static, started) = (entry.full_name.clone(), entry.is_static, entry.lc.started);
        let name_free = !is_static || started || kind != WorkKind::Sync || Self::claim_name(&mut st, &name, uid);
        let entry = st.pods.get_mut(uid).expect("still known");
        match entry.lc.on_start(kind, name_free) {
            StartDecision::WaitForName => {
                log::debug!("pod {uid}: waiting for static pod name {name} to be free");
                entry.pending = Some(work);
                entry.working = false;
                StartWork::Idle
            }
            StartDecision::Run => {
                entry.active = Some(work.clone());
                StartWork::Run(Box::new(WorkItem {
                    kind,
                    work,
                    ctx: SyncCtx {
                        uid: uid.to_string(),
                        cancel: entry.cancel.clone(),
                        gate: entry.gate.clone(),
                        on_stop: Some({
                            let (inner, uid) = (Arc::downgrade(self), uid.to_string());
                            Arc::new(move |note| {
                                if let Some(inner) = inner.upgrade() {
                                    match note {
                                        StopNote::Stopping(ids) => inner.containers_stopping(&uid, ids),
                                        StopNote::Stopped => inner.containers_stopped(&uid),
                                    }
                                }
                            })
                        }),
                    },
                    grace: entry.lc.grace_period.unwrap_or(1),
                    status_fns: entry.status_fns.clone(),
                    remove_content: entry.lc.should_content_be_removed(),
                }))
            }
        }
    }

    /// Put the last update back as pending (resync, retry). False if the
    /// pod is gone or has nothing left to do.
    fn requeue_last(&self, uid: &str) -> bool {
        let mut st = self.state.lock();
        let Some(entry) = st.pods.get_mut(uid) else {
            return false;
        };
        if entry.lc.is_finished() {
            return false;
        }
        if entry.pending.is_none() {
            let Some(mut w) = entry.active.clone() else {
                return false;
            };
            w.update_type = UpdateType::Sync;
            w.start = Instant::now();
            entry.pending = Some(w);
        }
        entry.working = true;
        true
    }

    /// Record a pass's outcome and say what the worker does next.
    fn complete_work(&self, uid: &str, item: &WorkItem, outcome: Outcome, took: Duration) -> AfterWork {
        if let Some(o) = &self.observer {
            o.work_done(item.kind, took, matches!(outcome, Outcome::Err | Outcome::Failed));
        }
        let mut st = self.state.lock();
        let Some(entry) = st.pods.get_mut(uid) else {
            return AfterWork::Exit;
        };
        let before = entry.lc.phase;
        let timing = Timing { resync: self.config.resync, backoff: self.config.backoff };
        let runtime_only = item.work.pod.is_none();
        let after = entry.lc.on_work_done(item.kind, outcome, runtime_only, timing);
        let now_phase = entry.lc.phase;
        let has_pending = entry.pending.is_some();
        let next = match after {
            AfterWork::Exit => {
                entry.working = false;
                entry.pending = None;
                AfterWork::Exit
            }
            _ if has_pending => AfterWork::Transition,
            AfterWork::Transition => {
                let mut w = item.work.clone();
                w.update_type = UpdateType::Sync;
                entry.pending = Some(w);
                AfterWork::Transition
            }
            AfterWork::Wait(d) => {
                entry.working = false;
                AfterWork::Wait(self.jitter(d))
            }
            AfterWork::WaitForUpdate => {
                // Cancelled with nothing pending (the interrupting update was
                // already taken): run the last update again rather than idle.
                let mut w = item.work.clone();
                w.update_type = UpdateType::Sync;
                entry.pending = Some(w);
                AfterWork::Transition
            }
        };
        if now_phase != before {
            self.phase_changed(&mut st, uid, before, now_phase);
        }
        next
    }
}

#[cfg(test)]
mod permanent_tests {
    use super::*;

    #[test]
    fn errors_that_cannot_heal_are_told_from_the_others() {
        let io = |errno| SyncError::Io { what: "x".into(), source: std::io::Error::from_raw_os_error(errno) };
        let failed = |m: &str| {
            SyncError::Runtime(RuntimeError::Failed {
                op: crate::runtime::Op::RunPodSandbox,
                code: crate::runtime::Code::Unknown,
                message: m.into(),
            })
        };
        for e in [
            io(libc::ENAMETOOLONG),
            io(libc::EINVAL),
            SyncError::Runtime(RuntimeError::PathTooLong {
                op: crate::runtime::Op::RunPodSandbox,
                what: "pod log directory",
                path: "/var/log/pods/x".into(),
            }),
            SyncError::Invalid("bad".into()),
        ] {
            assert!(e.is_permanent(), "{e}");
        }
        for e in [
            io(libc::ENOENT),
            io(libc::EACCES),
            io(libc::ENOSPC),
            failed("injected fault"),
            // the runtime's text decides nothing
            failed("mkdir /var/log/pods/x: File name too long"),
            SyncError::Runtime(RuntimeError::Unavailable("down".into())),
            SyncError::Runtime(RuntimeError::DeadlineExceeded { op: crate::runtime::Op::StopContainer }),
            SyncError::Cancelled,
            SyncError::Mount(Box::new(crate::pod::volumes::MountError::Volume {
                volume: "x".into(),
                source: crate::pod::volumes::VolumeError::WrongType {
                    path: "/x".into(),
                    what: "a directory",
                    kind: "Directory".into(),
                },
            })),
            SyncError::PodCgroup(crate::node::cgroups::CgroupError::Io {
                path: "/sys/fs/cgroup/kubepods".into(),
                source: std::io::Error::from_raw_os_error(libc::ENAMETOOLONG),
            }),
            SyncError::StillMounted { dir: "/var/lib/podwarden/pods/u".into() },
        ] {
            assert!(!e.is_permanent(), "{e}");
        }
    }
}

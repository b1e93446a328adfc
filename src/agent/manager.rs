//! The agent core: the pod manager (desired pods by UID and full name),
//! admission, dispatch to the pod workers, and housekeeping. Source updates
//! and housekeeping are serialized by one lock, as the kubelet serializes
//! them on its sync loop, so housekeeping never sees a pod that is desired
//! but not yet dispatched.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use thiserror::Error;

use crate::model::objects::{self, ObjectSet, ObjectStore};
use crate::model::{self, Pod, PodStatus, Uid};
use crate::pod::admission::{Admission, Cause, Rejection};
use crate::pod::status::StatusManager;
use crate::pod::workers::{KillPodOptions, Phase, PodWorkers, UpdatePodOptions, UpdateType};
use crate::runtime::cache::PodCache;
use crate::runtime::{CallCtx, ContainerState, Runtime, RuntimeError, RuntimePod};
use crate::telemetry::events::{EventRecorder, EventType, ObjectRef};
use crate::telemetry::metrics::Metrics;

/// A pod from the source and its admission.
#[derive(Clone)]
pub struct DesiredPod {
    pub pod: Arc<Pod>,
    /// `None` while admitted, else why it was rejected.
    pub rejected: Option<Rejection>,
}

#[derive(Default)]
struct PodManager {
    by_uid: BTreeMap<Uid, DesiredPod>,
}

impl PodManager {
    fn admitted(&self) -> impl Iterator<Item = &Arc<Pod>> {
        self.by_uid.values().filter(|d| d.rejected.is_none()).map(|d| &d.pod)
    }
}

/// Agent settings that are not the workers' or the phases'.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub root_dir: PathBuf,
    /// `podLogsDir`: the pods' log directories, whose orphans housekeeping
    /// removes.
    pub pod_logs_dir: PathBuf,
    pub runtime_call_timeout: Duration,
    /// The pod cgroups, whose orphans housekeeping removes; `None`: none.
    pub cgroups: Option<crate::node::cgroups::Cgroups>,
    /// With the runtime's event stream open, a housekeeping pass relists
    /// when its newest list is this old: fifteen housekeeping intervals,
    /// at most [`crate::runtime::cache::EVENTED_RELIST`].
    pub evented_relist: Duration,
}

/// How old an empty pod cgroup of an unknown pod must be to be removed.
pub const ORPHAN_CGROUP_AGE: Duration = Duration::from_secs(30);

/// An orphaned log directory changed (made, or a file added or removed)
/// this recently is left alone: a pod whose manifest arrives in a moment,
/// or another agent's on the machine.
pub const ORPHAN_LOG_DIR_AGE: Duration = Duration::from_secs(30);

/// Whether `path`'s modification time is less than `age` ago (an
/// unreadable time counts as recent: nothing is removed on a guess).
fn changed_within(path: &std::path::Path, age: Duration) -> bool {
    std::fs::metadata(path).and_then(|m| m.modified()).map_or(true, |t| t.elapsed().map_or(true, |e| e < age))
}

/// The services the agent uses, handed in by the wiring
/// (`daemon::assemble`), which hands the same parts to whoever else needs
/// them; nobody reaches them through the agent.
pub struct AgentDeps {
    pub workers: PodWorkers,
    pub runtime: Arc<dyn Runtime>,
    pub statuses: Arc<StatusManager>,
    pub events: Arc<EventRecorder>,
    pub admission: Arc<Admission>,
    pub metrics: Arc<Metrics>,
    /// What the last relist saw of each pod, shared with the sync phases.
    pub pod_cache: Arc<PodCache>,
    /// The local ConfigMaps and Secrets, shared with the sync phases.
    pub objects: Arc<ObjectStore>,
}

/// Why the agent is not healthy (`/healthz`, the node's Ready condition).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HealthError {
    #[error("thread {thread} panicked: {message}")]
    ThreadPanicked { thread: String, message: String },
    #[error("container runtime not answering: {source}")]
    RuntimeFailing {
        #[source]
        source: RuntimeError,
    },
    #[error("container runtime has not answered for {}s", .within.as_secs())]
    RuntimeSilent { within: Duration },
    #[error("housekeeping has not run for {}s", .within.as_secs())]
    HousekeepingStale { within: Duration },
}

/// The pod manager: desired pods and their admission, dispatch to the pod
/// workers, housekeeping and relist.
pub struct Agent {
    config: AgentConfig,
    workers: PodWorkers,
    runtime: Arc<dyn Runtime>,
    statuses: Arc<StatusManager>,
    events: Arc<EventRecorder>,
    admission: Arc<Admission>,
    metrics: Arc<Metrics>,
    pods: Mutex<PodManager>,
    /// Serializes source updates with housekeeping.
    sync_lock: Mutex<()>,
    /// What the last relist saw of each pod (shared with the sync phases).
    pod_cache: Arc<PodCache>,
    /// The local ConfigMaps and Secrets (shared with the sync phases).
    objects: Arc<ObjectStore>,
    /// When housekeeping last completed (for health checks).
    last_housekeeping: Mutex<Option<Instant>>,
    /// When the agent was made: until the first housekeeping pass,
    /// staleness counts from here (a starting agent is not stale).
    created: Instant,
    runtime_error_logged: Mutex<Option<Instant>>,
    /// When the runtime last answered a list, and its last error since.
    runtime_answered: Mutex<(Option<Instant>, Option<RuntimeError>)>,
    /// The source delivered its first full set: until then housekeeping
    /// cannot tell an adopted pod from an orphan, so it does nothing.
    sources_ready: std::sync::atomic::AtomicBool,
    /// Disk-backed emptyDir usage, measured by housekeeping.
    empty_dirs: Mutex<crate::pod::volumes::usage::EmptyDirs>,
}

impl Agent {
    pub fn new(config: AgentConfig, deps: AgentDeps) -> Self {
        let AgentDeps { workers, runtime, statuses, events, admission, metrics, pod_cache, objects } = deps;
        let empty_dirs = Mutex::new(crate::pod::volumes::usage::EmptyDirs::new(config.root_dir.clone()));
        Agent {
            config,
            workers,
            runtime,
            statuses,
            events,
            admission,
            metrics,
            pods: Mutex::new(PodManager::default()),
            sync_lock: Mutex::new(()),
            pod_cache,
            objects,
            last_housekeeping: Mutex::new(None),
            created: Instant::now(),
            runtime_error_logged: Mutex::new(None),
            runtime_answered: Mutex::new((None, None)),
            sources_ready: std::sync::atomic::AtomicBool::new(false),
            empty_dirs,
        }
    }

    /// When the last housekeeping pass completed.
    pub fn last_housekeeping(&self) -> Option<Instant> {
        *self.last_housekeeping.lock()
    }

    /// Pods that count for admission (DESIGN.md, Admission): admitted pods
    /// until their worker is finished. A desired pod whose status is
    /// terminal counts only while its termination runs. A pod that left its
    /// source (or whose UID is now rejected) counts until its old worker
    /// finished: a pod ignoring SIGTERM holds its CPU for its whole grace
    /// period.
    fn active_pods(&self, pm: &PodManager) -> Vec<Arc<Pod>> {
        let mut active: Vec<Arc<Pod>> = pm
            .admitted()
            .filter(|p| {
                let uid = model::uid(p);
                let phase = self.workers.phase(uid);
                if phase == Some(Phase::Finished) {
                    return false;
                }
                let terminal = self.statuses.get(uid).is_some_and(|s| model::is_terminal_phase(s.phase.as_deref()));
                !terminal || phase.is_some_and(|p| p >= Phase::Terminating)
            })
            .cloned()
            .collect();
        for (uid, pod) in self.workers.unfinished() {
            if pm.by_uid.get(&uid).is_none_or(|d| d.rejected.is_some()) {
                active.push(pod);
            }
        }
        active
    }

    /// Every desired pod with its admission.
    pub fn desired(&self) -> Vec<DesiredPod> {
        self.pods.lock().by_uid.values().cloned().collect()
    }

    /// The desired pod with this UID.
    pub fn desired_pod(&self, uid: &str) -> Option<DesiredPod> {
        self.pods.lock().by_uid.get(uid).cloned()
    }

    /// Apply a full snapshot of the source's pods: removed pods are killed
    /// (deleted), new ones admitted and created, changed ones updated.
    pub fn apply_source(&self, pods: Vec<Arc<Pod>>) {
        self.apply_sources(pods, true)
    }

    /// [`Agent::apply_source`] for the union of several sources: `ready`
    /// once every source gave its first full set (until then housekeeping
    /// leaves unknown pods alone: they may be a slow source's).
    pub fn apply_sources(&self, pods: Vec<Arc<Pod>>, ready: bool) {
        let _serial = self.sync_lock.lock();
        if ready {
            self.sources_ready.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let mut pm = self.pods.lock();
        let incoming: BTreeMap<Uid, Arc<Pod>> = pods.into_iter().map(|p| (model::uid(&p).to_string(), p)).collect();
        let removed: Vec<Uid> = pm.by_uid.keys().filter(|u| !incoming.contains_key(*u)).cloned().collect();
        let mut kills = Vec::new();
        for uid in removed {
            let Some(d) = pm.by_uid.remove(&uid) else { continue };
            if d.rejected.is_some() {
                self.statuses.remove(&uid);
                continue;
            }
            kills.push(d.pod);
        }
        // a kill may wait for a container start in flight: never while
        // holding the pod list every reader of the API and /pods needs
        drop(pm);
        for pod in kills {
            log::info!("pod {}: removed from its source; killing it", model::pod_ref(&pod));
            self.workers.update_pod(UpdatePodOptions::kill(pod, KillPodOptions::default()));
        }
        let mut pm = self.pods.lock();
        for (uid, pod) in incoming {
            match pm.by_uid.get_mut(&uid) {
                Some(d) if Arc::ptr_eq(&d.pod, &pod) || (d.pod.metadata == pod.metadata && d.pod.spec == pod.spec) => {}
                Some(d) => {
                    d.pod = pod.clone();
                    if d.rejected.is_none() {
                        self.workers.update_pod(UpdatePodOptions::new(UpdateType::Update, pod));
                    }
                }
                None => {
                    let active = self.active_pods(&pm);
                    let rejected = self.admission.admit(&pod, &active).err();
                    match &rejected {
                        None => {
                            log::info!("pod {}: admitted", model::pod_ref(&pod));
                            self.metrics.pod_seen(model::uid(&pod));
                            self.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, pod.clone()));
                        }
                        Some(r) => self.reject(&pod, r),
                    }
                    pm.by_uid.insert(uid, DesiredPod { pod, rejected });
                }
            }
        }
    }

    /// Install the source's ConfigMaps and Secrets. Every admitted pod
    /// that uses one that was added, changed or removed gets a sync pass
    /// now: its volumes are rewritten, and a container waiting for a
    /// missing object (`CreateContainerConfigError`) is created. Call it
    /// before [`Agent::apply_source`] with the same scan, so new pods see
    /// their objects.
    pub fn apply_objects(&self, objects: ObjectSet) {
        let _serial = self.sync_lock.lock();
        let changed = self.objects.replace(objects);
        if changed.is_empty() {
            return;
        }
        let users: Vec<Arc<Pod>> = self
            .pods
            .lock()
            .by_uid
            .values()
            .filter(|d| d.rejected.is_none())
            .filter(|d| objects::references(&d.pod).iter().any(|k| changed.contains(k)))
            .map(|d| d.pod.clone())
            .collect();
        for pod in users {
            log::info!("pod {}: an object it uses changed; syncing it", model::pod_ref(&pod));
            self.workers.update_pod(UpdatePodOptions::new(UpdateType::Sync, pod));
        }
    }

    /// Admit again the pods rejected with `reason` (after a cancelled node
    /// shutdown: pods that arrived while it ran must not stay Failed).
    /// Returns how many were admitted now.
    pub fn readmit(&self, reason: &str) -> usize {
        self.readmit_where(|r| r.reason == reason)
    }

    /// Admit again the pods whose rejection `which` picks.
    pub fn readmit_where(&self, which: impl Fn(&Rejection) -> bool) -> usize {
        let _serial = self.sync_lock.lock();
        let mut pm = self.pods.lock();
        let again: Vec<Uid> =
            pm.by_uid.iter().filter(|(_, d)| d.rejected.as_ref().is_some_and(&which)).map(|(u, _)| u.clone()).collect();
        let mut admitted = 0;
        for uid in again {
            let Some(pod) = pm.by_uid.get(&uid).map(|d| d.pod.clone()) else { continue };
            let active = self.active_pods(&pm);
            let outcome = self.admission.admit(&pod, &active);
            let Some(d) = pm.by_uid.get_mut(&uid) else { continue };
            match outcome {
                Ok(()) => {
                    let reason = d.rejected.take().map(|r| r.reason).unwrap_or_default();
                    log::info!("pod {}: admitted (was rejected: {reason})", model::pod_ref(&pod));
                    self.statuses.remove(&uid);
                    self.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, pod));
                    admitted += 1;
                }
                Err(r) => {
                    self.reject(&pod, &r);
                    d.rejected = Some(r);
                }
            }
        }
        admitted
    }

    /// Whether the pod's clean-up is done (its worker finished: containers
    /// and sandbox removed, volumes and content gone), or no worker knows
    /// it: what an eviction waits for before the next (the kubelet's
    /// `podCleanedUpFunc`).
    pub fn is_pod_cleaned_up(&self, uid: &str) -> bool {
        self.workers.phase(uid).is_none_or(|p| p >= crate::pod::workers::Phase::Finished)
    }

    /// Evict an admitted pod (node pressure, a local storage limit): the
    /// `Evicted` warning with `message`, a kill with `grace` seconds that
    /// leaves it Failed with reason `Evicted` and `message`, its content
    /// removed. It stays out (rejected with that reason) until
    /// [`Agent::readmit`] with it. `None` when the pod is not admitted,
    /// else a receiver told when the pod has terminated.
    pub fn evict(&self, uid: &str, message: &str, cause: Cause, grace: i64) -> Option<crossbeam_channel::Receiver<()>> {
        let _serial = self.sync_lock.lock();
        let pod = {
            let mut pm = self.pods.lock();
            let d = pm.by_uid.get_mut(uid).filter(|d| d.rejected.is_none())?;
            d.rejected = Some(Rejection {
                reason: crate::pod::admission::REASON_EVICTED.into(),
                message: message.into(),
                cause,
            });
            d.pod.clone()
        };
        log::warn!("pod {}: evicted: {message}", model::pod_ref(&pod));
        self.events.event(&ObjectRef::pod(&pod), EventType::Warning, crate::pod::admission::REASON_EVICTED, message);
        let msg = message.to_string();
        let status_fn: crate::pod::workers::StatusFn = Arc::new(move |s: &mut PodStatus| {
            s.phase = Some(model::PHASE_FAILED.into());
            s.reason = Some(crate::pod::admission::REASON_EVICTED.into());
            s.message = Some(msg.clone());
        });
        let (mut opts, done) = KillPodOptions::with_completion();
        opts.grace_period_override = Some(grace);
        opts.status_fn = Some(status_fn);
        opts.evict = true;
        self.workers.update_pod(UpdatePodOptions::kill(pod, opts));
        Some(done)
    }

    /// The admitted pods (for the eviction manager's ranking).
    /// Measure every disk-backed emptyDir of the admitted pods now (each
    /// walk bounded as always), for a disk-pressure ranking that must not
    /// use sizes measured before the pressure. Runs on the caller's thread
    /// (the eviction manager's).
    pub fn measure_empty_dirs_now(&self) {
        let admitted = self.admitted();
        self.empty_dirs.lock().pass_now(&admitted, &self.events, &self.metrics);
    }

    pub fn admitted(&self) -> Vec<Arc<Pod>> {
        self.pods.lock().admitted().cloned().collect()
    }

    /// The kubelet's `rejectPod`: a warning event with the handler's
    /// message, and the pod Failed with it after "Pod was rejected: ".
    fn reject(&self, pod: &Pod, r: &Rejection) {
        self.events.event(&ObjectRef::pod(pod), EventType::Warning, &r.reason, &r.message);
        self.statuses.set(
            model::uid(pod),
            PodStatus {
                phase: Some(model::PHASE_FAILED.into()),
                reason: Some(r.reason.clone()),
                message: Some(format!("Pod was rejected: {}", r.message)),
                qos_class: Some(model::qos::qos_class(pod).as_str().to_string()),
                start_time: Some(model::now_time()),
                ..Default::default()
            },
        );
    }

    /// Registry credentials changed: wake the pods whose containers wait on
    /// an image pull (`ImagePullBackOff`, `ErrImagePull`); a pull whose
    /// image the new credentials are for is tried at once (its back-off is
    /// kept per credentials). Returns how many were woken.
    pub fn credentials_changed(&self) -> usize {
        let waiting = |s: &PodStatus| {
            s.container_statuses.iter().chain(&s.init_container_statuses).flatten().any(|c| {
                c.state
                    .as_ref()
                    .and_then(|st| st.waiting.as_ref())
                    .and_then(|w| w.reason.as_deref())
                    .is_some_and(|r| r == "ImagePullBackOff" || r == "ErrImagePull")
            })
        };
        let mut woken = 0;
        for p in self.admitted() {
            if self.statuses.get(model::uid(&p)).is_some_and(|s| waiting(&s)) {
                self.workers.update_pod(UpdatePodOptions::new(UpdateType::Sync, p));
                woken += 1;
            }
        }
        woken
    }

    /// Kill a desired pod now (API delete). Returns false if unknown.
    pub fn kill_pod(&self, uid: &str, options: KillPodOptions) -> bool {
        let Some(d) = self.desired_pod(uid).or_else(|| {
            self.workers
                .snapshot()
                .into_iter()
                .find(|w| w.uid == uid)
                .and_then(|w| w.pod)
                .map(|pod| DesiredPod { pod, rejected: None })
        }) else {
            return false;
        };
        self.workers.update_pod(UpdatePodOptions::kill(d.pod, options));
        true
    }

    /// One housekeeping pass (see DESIGN.md "Housekeeping").
    pub fn housekeeping(&self) {
        let serial = self.sync_lock.lock();
        // test-only (`PODWARDEN_TEST_FAULTS`): a deadlock here, holding the
        // source lock, as the watchdog's tests need one
        crate::base::faults::hang_point("housekeeping");
        if !self.sources_ready() {
            log::debug!("housekeeping: waiting for the first manifest scan");
            return;
        }
        let desired: Vec<DesiredPod> = self.desired();
        let desired_uids: HashSet<Uid> = desired.iter().map(|d| model::uid(&d.pod).to_string()).collect();
        let workers = self.workers.sync_known_pods(&desired_uids);

        // Runtime pods nobody knows and nobody wants: orphans. While the
        // runtime's event stream is open and quiet, the newest list is
        // still the runtime's state: no call (the relist keeps it current).
        // A pod a worker forgot a moment ago may still be in that list (its
        // removal's event not yet in): an orphan is only acted on as a new
        // list shows it.
        let orphan =
            |rp: &RuntimePod| !rp.uid.is_empty() && !workers.contains_key(&rp.uid) && !desired_uids.contains(&rp.uid);
        let mut listed_fresh = false;
        let quiet =
            self.pod_cache.recent_with_time(Duration::ZERO).filter(|(at, _)| at.elapsed() < self.config.evented_relist);
        let (mut listed_at, mut runtime_pods) = match quiet {
            Some((at, list)) => (at, Some(list)),
            None => (Instant::now(), None),
        };
        if runtime_pods.as_ref().is_none_or(|l| l.iter().any(orphan)) {
            listed_fresh = true;
            listed_at = Instant::now();
            runtime_pods = self.list_runtime_pods_logged();
        }
        if let Some(rps) = &runtime_pods {
            for rp in rps.iter().filter(|rp| orphan(rp)) {
                let grace = rp.recorded_grace().unwrap_or(1);
                log::info!(
                    "pod {}/{} {}: orphaned runtime pod; killing it with grace {grace}s",
                    rp.namespace,
                    rp.name,
                    rp.uid
                );
                self.metrics.inc_orphaned();
                self.workers.update_pod(UpdatePodOptions::kill_runtime_pod(
                    Arc::new(rp.clone()),
                    KillPodOptions { grace_period_override: Some(grace), ..Default::default() },
                ));
            }
        }

        // Desired, admitted pods no worker knows: re-created after their
        // earlier incarnation finished.
        for d in desired.iter().filter(|d| d.rejected.is_none()) {
            let uid = model::uid(&d.pod);
            if workers.contains_key(uid) {
                continue;
            }
            log::info!("pod {}: starting again after its earlier incarnation finished", model::pod_ref(&d.pod));
            self.metrics.inc_restarted(model::is_static(&d.pod));
            self.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, d.pod.clone()));
        }

        if let Some(rps) = runtime_pods.as_ref().filter(|_| listed_fresh) {
            self.wake_changed(listed_at, rps, &desired);
        }

        self.cleanup_pod_dirs(&desired_uids);
        self.cleanup_pod_log_dirs(&desired_uids);
        self.cleanup_pod_cgroups(&desired_uids, runtime_pods.as_deref().map(|v| v.as_slice()));
        self.statuses.retain(|uid| desired_uids.contains(uid) || workers.contains_key(uid));
        self.metrics.retain_seen(|uid| desired_uids.contains(uid));
        self.refresh_metrics(&desired, &workers, runtime_pods.as_deref().map(|v| v.as_slice()));
        drop(serial);
        // disk-backed emptyDir usage (bounded walks, each volume at most
        // every 10 s), outside the source lock: a walk never delays a
        // manifest change
        let admitted: Vec<Arc<Pod>> = desired.iter().filter(|d| d.rejected.is_none()).map(|d| d.pod.clone()).collect();
        self.empty_dirs.lock().pass(&admitted, &self.events, &self.metrics);
        if let Some(rps) = runtime_pods.filter(|_| listed_fresh) {
            self.pod_cache.keep(listed_at, rps);
        }
        *self.last_housekeeping.lock() = Some(Instant::now());
        // read-only observation point: tests count passes by this line
        log::debug!("housekeeping: pass done");
    }

    /// A new runtime list for housekeeping; a failure is logged (at most
    /// once a minute) and is `None`.
    fn list_runtime_pods_logged(&self) -> Option<Arc<Vec<RuntimePod>>> {
        match self.list_runtime_pods() {
            Ok(p) => Some(Arc::new(p)),
            Err(e) => {
                let mut last = self.runtime_error_logged.lock();
                if last.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                    log::warn!("housekeeping: listing runtime pods failed: {e}");
                    *last = Some(Instant::now());
                }
                None
            }
        }
    }

    fn list_runtime_pods(&self) -> Result<Vec<RuntimePod>, RuntimeError> {
        let r = self.runtime.list_pods(&CallCtx::background(self.config.runtime_call_timeout));
        let mut a = self.runtime_answered.lock();
        match &r {
            Ok(_) => *a = (Some(Instant::now()), None),
            Err(e) => a.1 = Some(e.clone()),
        }
        r
    }

    /// Healthy (`/healthz`, the node's Ready condition): no thread
    /// panicked, the runtime answered and housekeeping ran within `within`.
    /// Otherwise, what is wrong. A runtime that has not answered and gave
    /// no error was not asked: when housekeeping is stale too, that is the
    /// one to name (its thread also does the relists).
    pub fn health(&self, within: Duration) -> Result<(), HealthError> {
        Self::no_panic()?;
        let (answered, err) = self.runtime_answered.lock().clone();
        // with the runtime's event stream open the relist is rarer (every
        // EVENTED_RELIST at most): its answers count for that much longer
        let window =
            if self.pod_cache.events_open() { within.saturating_add(self.config.evented_relist) } else { within };
        let answered = fresh(answered, window);
        if let (false, Some(source)) = (answered, err) {
            return Err(HealthError::RuntimeFailing { source });
        }
        self.housekeeping_ran(within)?;
        if !answered {
            return Err(HealthError::RuntimeSilent { within });
        }
        Ok(())
    }

    /// Live (systemd's watchdog): the part of [`Agent::health`] about the
    /// agent's own threads, no thread panicked and housekeeping ran within
    /// `within`. A runtime that does not answer fails `health` but not this:
    /// restarting the agent cannot mend containerd, and the new agent could
    /// not even start without it. Takes two locks that are only ever held
    /// for a copy, so it never waits for a pod, a client or the runtime.
    pub fn liveness(&self, within: Duration) -> Result<(), HealthError> {
        Self::no_panic()?;
        self.housekeeping_ran(within)
    }

    fn no_panic() -> Result<(), HealthError> {
        match crate::base::thread::panicked() {
            Some((thread, message)) => Err(HealthError::ThreadPanicked { thread, message }),
            None => Ok(()),
        }
    }

    fn housekeeping_ran(&self, within: Duration) -> Result<(), HealthError> {
        if fresh(Some(self.last_housekeeping.lock().unwrap_or(self.created)), within) {
            Ok(())
        } else {
            Err(HealthError::HousekeepingStale { within })
        }
    }

    /// Resources the active pods request: (cpu millicores, memory bytes, pods).
    pub fn allocated(&self) -> (i64, i64, usize) {
        let pm = self.pods.lock();
        let active = self.active_pods(&pm);
        let (cpu, mem) = active
            .iter()
            .map(|p| crate::pod::admission::requests(p))
            .fold((0i64, 0i64), |a, b| (a.0.saturating_add(b.0), a.1.saturating_add(b.1)));
        (cpu, mem, active.len())
    }

    /// True once the source delivered its first full set of pods.
    pub fn sources_ready(&self) -> bool {
        self.sources_ready.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Relist (about every second): wake the workers of pods whose
    /// containers changed state, so exits are noticed promptly.
    /// The newest runtime list (a relist's or a housekeeping pass's) if it
    /// is fresh.
    pub fn pod_cache(&self) -> Arc<PodCache> {
        self.pod_cache.clone()
    }

    pub fn last_list(&self) -> Option<Arc<Vec<RuntimePod>>> {
        self.pod_cache.recent(crate::runtime::cache::FRESH)
    }

    pub fn relist(&self) {
        let listed_at = Instant::now();
        let Ok(rps) = self.list_runtime_pods() else {
            return; // housekeeping reports runtime errors
        };
        let _serial = self.sync_lock.lock();
        let desired = self.desired();
        self.wake_changed(listed_at, &rps, &desired);
        self.pod_cache.keep(listed_at, rps);
    }

    /// Record the list (begun at `listed_at`) in the pod cache and wake the
    /// workers of admitted pods whose sandboxes or containers changed.
    fn wake_changed(&self, listed_at: Instant, rps: &[RuntimePod], desired: &[DesiredPod]) {
        for uid in self.pod_cache.update(listed_at, rps) {
            if self.workers.phase(&uid).is_some()
                && let Some(d) = desired.iter().find(|d| model::uid(&d.pod) == uid && d.rejected.is_none())
            {
                self.workers.update_pod(UpdatePodOptions::new(UpdateType::Sync, d.pod.clone()));
            }
        }
    }

    fn cleanup_pod_dirs(&self, desired: &HashSet<Uid>) {
        let dir = self.config.root_dir.join("pods");
        let Ok(entries) = std::fs::read_dir(&dir) else { return };
        for e in entries.flatten() {
            let uid = e.file_name().to_string_lossy().to_string();
            if desired.contains(&uid) || !self.workers.should_pod_content_be_removed(&uid) {
                continue;
            }
            // a directory left by a pod this agent no longer knows (it was
            // stopped while the pod ran) may still hold its tmpfs volumes
            // and subPath bind mounts: removing it would reach into them (a
            // bind mount is a volume's own content, a hostPath's files)
            crate::pod::volumes::unmount_all_under(&e.path());
            if crate::pod::volumes::has_mounts_under(&e.path()) {
                log::warn!("pod {uid}: {} still has mounts below it; not removed", e.path().display());
                continue;
            }
            match std::fs::remove_dir_all(e.path()) {
                Ok(()) => log::info!("pod {uid}: removed its directory {}", e.path().display()),
                Err(err) => log::warn!("pod {uid}: cannot remove {}: {err}", e.path().display()),
            }
        }
    }

    /// Log directories (`<namespace>_<name>_<uid>`) of pods no source wants
    /// and no worker still needs, as the kubelet's container GC removes
    /// them: a pod removed while the agent was down (or killed in the
    /// middle of its clean-up) leaves its directory, which no worker of the
    /// agent started again knows. Anything not named so is left alone.
    fn cleanup_pod_log_dirs(&self, desired: &HashSet<Uid>) {
        let Ok(entries) = std::fs::read_dir(&self.config.pod_logs_dir) else { return };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let Some((ns, rest)) = name.split_once('_') else { continue };
            let Some((pod, uid)) = rest.rsplit_once('_') else { continue };
            if ns.is_empty()
                || pod.is_empty()
                || uid.is_empty()
                || !e.file_type().is_ok_and(|t| t.is_dir())
                || desired.contains(uid)
                || !self.workers.should_pod_content_be_removed(uid)
                || changed_within(&e.path(), ORPHAN_LOG_DIR_AGE)
            {
                continue;
            }
            match std::fs::remove_dir_all(e.path()) {
                Ok(()) => log::info!("pod {uid}: removed its log directory {}", e.path().display()),
                Err(err) => log::warn!("pod {uid}: cannot remove {}: {err}", e.path().display()),
            }
        }
    }

    /// Pod cgroups (slices) of pods no worker knows and no source wants,
    /// as the kubelet's orphaned pod cgroup clean-up: an agent stopped
    /// between a pod's end and its clean-up leaves them. Processes still in
    /// one (a container its runtime lost) are killed first, as the kubelet
    /// kills them, and the cgroup is removed at the next pass; only when
    /// the runtime's newest list (`runtime`) holds nothing of the pod (its
    /// own containers are stopped through the runtime, never behind it). Under the source lock, so no pod is dispatched (and
    /// makes its cgroup) meanwhile; a cgroup made in the last
    /// [`ORPHAN_CGROUP_AGE`] is left alone (someone else's pod about to
    /// start in it: a second agent on the machine, as in tests).
    fn cleanup_pod_cgroups(&self, desired: &HashSet<Uid>, runtime: Option<&[RuntimePod]>) {
        let Some(cg) = &self.config.cgroups else { return };
        // with the systemd driver a UID's dashes are underscores in its slice
        let norm = |u: &str| u.replace('-', "_");
        let wanted: HashSet<String> = desired.iter().map(|u| norm(u)).collect();
        for (found, name) in cg.pod_cgroups() {
            let uid = if cg.driver == crate::node::cgroups::Driver::Systemd { found.replace('_', "-") } else { found };
            if wanted.contains(&norm(&uid))
                || self.workers.phase(&uid).is_some()
                || !self.workers.should_pod_content_be_removed(&uid)
                || cg.unchanged_for(&name).is_none_or(|age| age < ORPHAN_CGROUP_AGE)
            {
                continue;
            }
            match cg.remove(&name) {
                Ok(()) => log::info!("pod {uid}: removed its orphaned cgroup {name}"),
                Err(crate::node::cgroups::CgroupError::Busy { .. })
                    if runtime.is_none_or(|rps| rps.iter().any(|rp| norm(&rp.uid) == norm(&uid))) =>
                {
                    log::debug!("pod {uid}: orphaned cgroup {name} still has processes the runtime knows of")
                }
                Err(crate::node::cgroups::CgroupError::Busy { .. }) => {
                    // no container of the runtime's holds them (its list has
                    // nothing of the pod): killed, as the kubelet kills
                    // them, and the cgroup goes at a later pass
                    let n = cg.kill_all(&name);
                    static KILLED: crate::base::logging::RateLimit =
                        crate::base::logging::RateLimit::new(Duration::from_secs(60));
                    if let Some(held) = KILLED.allow() {
                        log::warn!(
                            "pod {uid}: its orphaned cgroup {name} still held processes no runtime knows of: {n} killed (SIGKILL){}",
                            crate::base::logging::held_back(held, Duration::from_secs(60))
                        );
                    }
                }
                Err(e) => {
                    static FAILED: crate::base::logging::RateLimit =
                        crate::base::logging::RateLimit::new(Duration::from_secs(60));
                    if let Some(held) = FAILED.allow() {
                        log::warn!(
                            "pod {uid}: removing its orphaned cgroup {name}: {e}{}",
                            crate::base::logging::held_back(held, Duration::from_secs(60))
                        );
                    }
                }
            }
        }
    }

    fn refresh_metrics(
        &self,
        desired: &[DesiredPod],
        workers: &HashMap<Uid, crate::pod::workers::WorkerSync>,
        runtime_pods: Option<&[RuntimePod]>,
    ) {
        let mut g = self.metrics.gauges.lock();
        g.desired_pods = [0, 0];
        for d in desired {
            g.desired_pods[model::is_static(&d.pod) as usize] += 1;
        }
        g.active_pods = [0, 0];
        for p in self.active_pods(&self.pods.lock()) {
            g.active_pods[model::is_static(&p) as usize] += 1;
        }
        g.working_pods.clear();
        for w in workers.values() {
            let lifecycle = w.phase.label();
            let config = if !w.has_config {
                "runtime_only"
            } else if w.orphan {
                "orphan"
            } else {
                "desired"
            };
            let st = if !w.has_config {
                "unknown"
            } else if w.is_static {
                "true"
            } else {
                "false"
            };
            *g.working_pods.entry((lifecycle.into(), config.into(), st.into())).or_default() += 1;
        }
        if let Some(rps) = runtime_pods {
            g.running_pods = rps.iter().filter(|p| p.sandboxes.iter().any(|s| s.ready)).count() as i64;
            g.running_containers.clear();
            for c in rps.iter().flat_map(|p| p.containers.iter()) {
                let s = match c.state {
                    ContainerState::Created => "created",
                    ContainerState::Running => "running",
                    ContainerState::Exited => "exited",
                    ContainerState::Unknown => "unknown",
                };
                *g.running_containers.entry(s.into()).or_default() += 1;
            }
        }
    }
}

/// `t` is less than `within` ago.
fn fresh(t: Option<Instant>, within: Duration) -> bool {
    t.is_some_and(|t| t.elapsed() < within)
}

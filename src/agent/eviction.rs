//! Node-pressure eviction, as the kubelet's eviction manager: every
//! monitoring period (`housekeepingInterval`) the `eviction` thread takes a
//! stats snapshot ([`crate::node::stats::Collector`]) and
//! - evicts pods over their own local storage limits (an emptyDir's
//!   `sizeLimit`, the pod's or a container's `ephemeral-storage` limit);
//! - compares each signal with its thresholds (`evictionHard`, and
//!   `evictionSoft` once met for its grace period); keeps the node's
//!   `MemoryPressure`, `DiskPressure`, `PIDPressure` conditions (true until
//!   `evictionPressureTransitionPeriod` after the last time a threshold was
//!   met), which admission reads;
//! - for the most pressing threshold met (memory first): reclaims
//!   node-level resources first (unused images, for disk signals), and if
//!   the threshold is still met evicts one pod, ranked as the kubelet ranks
//!   them (usage above requests, priority, usage), never one with priority
//!   2000000000 or more.
//!
//! Every podwarden pod is static: its manifest still wants it after an
//! eviction. A pod evicted for node pressure (and a pod rejected for it) is
//! admitted again once the node has no pressure condition, that is after
//! the transition period without a threshold met: it neither stays away
//! silently nor comes back into the pressure that removed it. A pod evicted
//! for its own storage limit stays Failed until its manifest changes or
//! the agent restarts: coming back, it would fill the same storage again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::agent::manager::Agent;
use crate::config::{Signal, Threshold};
use crate::model::quantity::{format_bytes, format_decimal};
use crate::model::{self, Pod};
use crate::node::images::gc::ImageGc;
use crate::node::stats::{Collector, NodeStat, PodStat, Snapshot};
use crate::pod::admission::{Cause, NodePressure, Pressure};
use crate::telemetry::events::{EventRecorder, EventType, ObjectRef};

/// The grace period of a hard or local storage eviction, the kubelet's.
pub const IMMEDIATE_GRACE: i64 = 1;

/// How long evicted pods may take to terminate and be cleaned up (their
/// containers and sandbox removed, their volumes gone) before the next
/// eviction (the kubelet's pod clean-up timeout): until then their usage
/// still shows, and evicting on it would take a second pod for nothing.
pub const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);

/// What the manager is told by the config.
#[derive(Debug, Clone)]
pub struct Settings {
    pub thresholds: Vec<Threshold>,
    pub max_pod_grace: i64,
    pub transition: Duration,
    pub priority_classes: BTreeMap<String, i32>,
    pub node_name: String,
    /// How often a whole snapshot (the pods' stats too) is taken; the
    /// node's own signals are read at every pass.
    pub stats_period: Duration,
}

/// A signal's observation: what is available of what capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    pub available: u64,
    pub capacity: u64,
}

/// What each signal shows in a snapshot (disk signals only where the
/// filesystem was measured).
pub fn observe(n: &NodeStat) -> BTreeMap<Signal, Observed> {
    let mut m = BTreeMap::new();
    if let Some(a) = n.memory.available_bytes {
        m.insert(Signal::MemoryAvailable, Observed { available: a, capacity: a + n.memory.working_set_bytes });
    }
    if n.fs.capacity_bytes > 0 {
        m.insert(Signal::NodeFsAvailable, Observed { available: n.fs.available_bytes, capacity: n.fs.capacity_bytes });
        m.insert(Signal::NodeFsInodesFree, Observed { available: n.fs.inodes_free, capacity: n.fs.inodes });
    }
    if let Some(i) = n.image_fs.filter(|i| i.capacity_bytes > 0) {
        m.insert(Signal::ImageFsAvailable, Observed { available: i.available_bytes, capacity: i.capacity_bytes });
        m.insert(Signal::ImageFsInodesFree, Observed { available: i.inodes_free, capacity: i.inodes });
    }
    if let Some((limit, working_set)) = n.allocatable_memory {
        m.insert(
            Signal::AllocatableMemoryAvailable,
            Observed { available: limit.saturating_sub(working_set), capacity: limit },
        );
    }
    if n.max_pid > 0 {
        m.insert(
            Signal::PidAvailable,
            Observed { available: n.max_pid.saturating_sub(n.processes), capacity: n.max_pid },
        );
    }
    m
}

fn condition_of(s: Signal) -> Pressure {
    match s {
        Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Pressure::Memory,
        Signal::PidAvailable => Pressure::Pid,
        _ => Pressure::Disk,
    }
}

/// The resource a signal's evictions reclaim, as the kubelet names it.
fn resource_of(s: Signal) -> &'static str {
    match s {
        Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => "memory",
        Signal::NodeFsAvailable | Signal::ImageFsAvailable => "ephemeral-storage",
        Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => "inodes",
        Signal::PidAvailable => "pids",
    }
}

/// Is `t` met by `o` (with `min_reclaim` added once it was met)?
fn met(t: &Threshold, o: &Observed, with_reclaim: bool) -> bool {
    let mut q = t.value.of(o.capacity);
    if with_reclaim && let Some(r) = t.min_reclaim {
        q = q.saturating_add(r.of(o.capacity));
    }
    q > o.available
}

/// A pod's usage of `resource` and its request (bytes; processes).
fn usage_and_request(pod: &Pod, st: Option<&PodStat>, resource: &str) -> (Option<u64>, u64) {
    let Some(st) = st else { return (None, 0) };
    match resource {
        "memory" => (Some(st.memory.working_set_bytes), model::qos::pod_request(pod, "memory").max(0) as u64),
        "pids" => (st.processes.or(Some(0)), 0),
        // inodes have no request: every pod using some is above it
        "inodes" => (Some(st.ephemeral_inodes_used), 0),
        _ => (Some(st.ephemeral_used_bytes), model::qos::pod_request(pod, "ephemeral-storage").max(0) as u64),
    }
}

/// Rank `pods` for evicting under `resource` pressure, first to go first:
/// pods without stats, then those using more than they request, then
/// lower priority, then most above their request (processes for PIDs).
pub fn rank<'a>(
    pods: &'a [Arc<Pod>],
    stats: &[PodStat],
    resource: &str,
    classes: &BTreeMap<String, i32>,
) -> Vec<&'a Arc<Pod>> {
    // (has stats, within its request, priority, minus the excess): the
    // smallest goes first
    type Key = (bool, bool, i32, i128);
    let mut v: Vec<(&Arc<Pod>, Key)> = pods
        .iter()
        .map(|p| {
            let st = stats.iter().find(|s| s.uid == model::uid(p));
            let (usage, request) = usage_and_request(p, st, resource);
            let prio = model::priority(p, classes);
            let key = match usage {
                None => (false, false, prio, 0),
                Some(u) if resource == "pids" => (true, true, prio, -(u as i128)),
                Some(u) => (true, u <= request, prio, -(u as i128 - request as i128)),
            };
            (p, key)
        })
        .collect();
    v.sort_by_key(|(_, k)| *k);
    v.into_iter().map(|(p, _)| p).collect()
}

/// The start of the message of a pod evicted for the node's pressure.
pub const MESSAGE_LOW_ON_RESOURCE: &str = "The node was low on resource";

/// The kubelet's eviction message.
fn message(pod: &Pod, st: Option<&PodStat>, resource: &str, (q, avail): (u64, u64)) -> String {
    // bytes in binary SI (`100Mi`), counts (PIDs, inodes) in decimal SI
    let f = if resource == "pids" || resource == "inodes" { format_decimal } else { format_bytes };
    let mut m = format!(
        "{MESSAGE_LOW_ON_RESOURCE}: {resource}. Threshold quantity: {}, available: {}. ",
        f(q as i64),
        f(avail as i64)
    );
    if let Some(st) = st
        && (resource == "memory" || resource == "ephemeral-storage")
    {
        for c in model::all_containers(pod) {
            let Some(cs) = st.containers.iter().find(|x| x.name == c.name) else { continue };
            let usage = if resource == "memory" {
                cs.memory.working_set_bytes
            } else {
                cs.rootfs_used_bytes + cs.logs_used_bytes
            };
            let request = c
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get(resource))
                .map_or(0, |q| model::qos::amount(resource, &q.0).max(0) as u64);
            if usage > request {
                m += &format!(
                    "Container {} was using {}, request is {}, has larger consumption of {resource}. ",
                    c.name,
                    format_bytes(usage as i64),
                    format_bytes(request as i64)
                );
            }
        }
    }
    m
}

/// A pod over one of its own local storage limits: the kubelet's message.
pub fn storage_limit_exceeded(pod: &Pod, st: &PodStat) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    for v in spec.volumes.iter().flatten() {
        let Some(limit) = v.empty_dir.as_ref().and_then(|e| e.size_limit.as_ref()) else { continue };
        let bytes = model::qos::amount("ephemeral-storage", &limit.0);
        let used = st.volumes.iter().find(|(n, _)| *n == v.name).map_or(0, |(_, b)| *b);
        if bytes > 0 && used > bytes as u64 {
            return Some(format!("Usage of EmptyDir volume {:?} exceeds the limit {:?}. ", v.name, limit.0));
        }
    }
    let limit_of = |c: &model::Container| {
        c.resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get("ephemeral-storage"))
            .map(|q| (model::qos::amount("ephemeral-storage", &q.0), q.0.clone()))
            .filter(|(b, _)| *b > 0)
    };
    let pod_limit: i64 = spec.containers.iter().filter_map(limit_of).map(|(b, _)| b).sum();
    if pod_limit > 0 && st.ephemeral_used_bytes > pod_limit as u64 {
        return Some(format!(
            "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
            format_bytes(pod_limit)
        ));
    }
    for c in &spec.containers {
        let Some((bytes, text)) = limit_of(c) else { continue };
        let Some(cs) = st.containers.iter().find(|x| x.name == c.name) else { continue };
        if cs.rootfs_used_bytes + cs.logs_used_bytes > bytes as u64 {
            return Some(format!("Container {} exceeded its local ephemeral storage limit {text:?}. ", c.name));
        }
    }
    None
}

#[derive(Default)]
struct State {
    /// When each threshold (by index) was first met in the current spell.
    first_met: HashMap<usize, Instant>,
    /// When each condition's thresholds were last met.
    last_observed: HashMap<Pressure, Instant>,
    /// Passes so far.
    passes: u64,
    /// The first of the passes in a row whose snapshot failed, and when the
    /// node was last told.
    stats_failing_since: Option<u64>,
    stats_warned: Option<Instant>,
}

/// A failure of the pods' stats that outlasts one retry is a node event,
/// repeated this often while it lasts.
const STATS_WARN_EVERY: Duration = Duration::from_secs(300);

/// The eviction manager.
pub struct Manager {
    s: Settings,
    collector: Arc<Collector>,
    gc: Option<Arc<ImageGc>>,
    agent: Arc<Agent>,
    pressure: Arc<NodePressure>,
    events: Arc<EventRecorder>,
    metrics: Arc<crate::telemetry::metrics::Metrics>,
    state: Mutex<State>,
    /// Evicted pods not yet cleaned up: UID, told when terminated, and
    /// when they were evicted.
    cleanup: Mutex<Vec<(String, crossbeam_channel::Receiver<()>, Instant)>>,
    /// When the last whole snapshot was taken.
    snapshot_at: Mutex<Option<Instant>>,
}

impl Manager {
    pub fn new(
        s: Settings,
        collector: Arc<Collector>,
        gc: Option<Arc<ImageGc>>,
        agent: Arc<Agent>,
        pressure: Arc<NodePressure>,
        events: Arc<EventRecorder>,
        metrics: Arc<crate::telemetry::metrics::Metrics>,
    ) -> Self {
        Manager {
            s,
            collector,
            gc,
            agent,
            pressure,
            events,
            metrics,
            state: Mutex::new(State::default()),
            cleanup: Mutex::new(Vec::new()),
            snapshot_at: Mutex::new(None),
        }
    }

    /// Evict `p` (for `cause`) and remember it until it is cleaned up.
    fn evict(&self, p: &Pod, msg: &str, cause: Cause, grace: i64) -> bool {
        match self.agent.evict(model::uid(p), msg, cause, grace) {
            Some(done) => {
                self.cleanup.lock().push((model::uid(p).to_string(), done, Instant::now()));
                true
            }
            None => false,
        }
    }

    /// Evicted pods still terminating or being cleaned up (for less than
    /// the clean-up timeout): a terminated pod's bytes are still on disk
    /// until its worker removed its containers and volumes.
    fn cleaning_up(&self) -> bool {
        let mut c = self.cleanup.lock();
        c.retain(|(uid, rx, at)| {
            let terminated = !matches!(rx.try_recv(), Err(crossbeam_channel::TryRecvError::Empty));
            let done = terminated && self.agent.is_pod_cleaned_up(uid);
            if at.elapsed() >= CLEANUP_TIMEOUT && !done {
                log::warn!(
                    "eviction manager: pod {uid} not cleaned up {}s after its eviction; acting on the node's signals again",
                    CLEANUP_TIMEOUT.as_secs()
                );
            }
            !done && at.elapsed() < CLEANUP_TIMEOUT
        });
        !c.is_empty()
    }

    /// A whole snapshot taken now (kept by the collector for the stats
    /// endpoints).
    fn snapshot(&self) -> Option<Arc<Snapshot>> {
        match self.collector.collect() {
            Ok(s) => {
                *self.snapshot_at.lock() = Some(Instant::now());
                let mut st = self.state.lock();
                st.stats_failing_since = None;
                if st.stats_warned.take().is_some() {
                    log::info!("eviction manager: the pods' stats are back");
                }
                Some(s)
            }
            Err(e) => {
                log::warn!("eviction manager: no stats: {e}");
                // failed again at a later pass: the node says so (no pod
                // can be ranked for eviction), then every 5 minutes
                let mut st = self.state.lock();
                let pass = st.passes;
                let since = *st.stats_failing_since.get_or_insert(pass);
                if since < pass && st.stats_warned.is_none_or(|t| t.elapsed() >= STATS_WARN_EVERY) {
                    st.stats_warned = Some(Instant::now());
                    drop(st);
                    self.events.event(
                        &ObjectRef::node(&self.s.node_name),
                        EventType::Warning,
                        "EvictionStatsUnavailable",
                        &format!(
                            "Eviction manager: the runtime gave no pod stats ({e}): no pod can be ranked \
                             for eviction, and pod storage limits are not enforced, until it does"
                        ),
                    );
                }
                None
            }
        }
    }

    /// One monitoring pass: the signals, the thresholds they meet (and the
    /// node's conditions), then at most one action.
    ///
    /// The pods' stats (the runtime's `ListPodSandboxStats`, a walk of the
    /// log directories) are taken every `stats_period` (10 s by default,
    /// the kubelet's eviction monitoring period) and when a threshold is
    /// to be acted on; the node's own signals (`/proc`, `statvfs`,
    /// `kubepods`' memory) at every pass, so pressure is still seen within
    /// one housekeeping interval without the runtime gathering 110 pods'
    /// stats every 2 s.
    pub fn synchronize(&self) {
        self.state.lock().passes += 1;
        let due = self.snapshot_at.lock().is_none_or(|t| t.elapsed() >= self.s.stats_period);
        // without the pods' stats (the runtime failed) the node's signals
        // and conditions still go on; the next pass tries again
        let snap = if due { self.snapshot() } else { None };
        let node = snap.as_ref().map_or_else(|| self.collector.node(), |s| s.node.clone());
        let now = Instant::now();
        let obs = observe(&node);
        if log::log_enabled!(log::Level::Debug) {
            for (sig, o) in &obs {
                log::debug!("eviction manager: {}: {} of {} available", sig.name(), o.available, o.capacity);
            }
        }
        let pods = self.agent.admitted();
        let waiting = self.cleaning_up();
        // pods over their own storage limits go first, all of them (as
        // often as their stats are taken)
        let evicted_any = !waiting && snap.as_ref().is_some_and(|s| self.evict_over_limits(&pods, &s.pods));
        let (active, on) = self.thresholds(now, &obs);
        self.set_conditions(&on);
        if active.is_empty() || evicted_any || waiting {
            return;
        }
        self.act(now, &active, snap, &node, &obs, &pods);
    }

    /// Evict every pod over one of its own local storage limits; whether
    /// any was.
    fn evict_over_limits(&self, pods: &[Arc<Pod>], stats: &[PodStat]) -> bool {
        let mut evicted_any = false;
        for p in pods {
            let Some(st) = stats.iter().find(|s| s.uid == model::uid(p)) else { continue };
            if let Some(msg) = storage_limit_exceeded(p, st)
                && self.evict(p, &msg, Cause::Other, IMMEDIATE_GRACE)
            {
                self.metrics.evicted("ephemeral-storage-limit");
                evicted_any = true;
            }
        }
        evicted_any
    }

    /// Compare the signals with the thresholds: the thresholds met for
    /// their grace period (by index), and the conditions on now (a
    /// threshold of theirs met within the transition period).
    fn thresholds(&self, now: Instant, obs: &BTreeMap<Signal, Observed>) -> (Vec<usize>, Vec<Pressure>) {
        let mut st = self.state.lock();
        let mut active = Vec::new();
        for (i, t) in self.s.thresholds.iter().enumerate() {
            let Some(o) = obs.get(&t.signal) else { continue };
            // met before: met until its minimum reclaim is reclaimed
            let was = st.first_met.contains_key(&i);
            if met(t, o, was) {
                let first = *st.first_met.entry(i).or_insert(now);
                st.last_observed.insert(condition_of(t.signal), now);
                if now.saturating_duration_since(first) >= t.grace {
                    active.push(i);
                }
            } else {
                st.first_met.remove(&i);
            }
        }
        let on: Vec<Pressure> = Pressure::ALL
            .into_iter()
            .filter(|p| st.last_observed.get(p).is_some_and(|t| now.saturating_duration_since(*t) < self.s.transition))
            .collect();
        (active, on)
    }

    /// Set the node's pressure conditions (an event for each change); with
    /// none on, pods evicted or rejected for pressure are admitted again.
    fn set_conditions(&self, on: &[Pressure]) {
        for (p, v) in self.pressure.set(on) {
            let reason = p.event_reason(v);
            let node = &self.s.node_name;
            self.events.event(
                &ObjectRef::node(node),
                EventType::Normal,
                &reason,
                &format!("Node {node} status is now: {reason}"),
            );
        }
        if on.is_empty() {
            // pressure gone for the transition period: pods evicted or
            // rejected for it come back (not those over their own limits)
            let n = self.agent.readmit_where(|r| r.cause == Cause::NodePressure);
            if n > 0 {
                log::info!("eviction manager: the node has no pressure; {n} evicted or rejected pods admitted again");
            }
        }
    }

    /// The most pressing threshold met (memory first, then the config's
    /// order): reclaim images for a disk signal, and if it is still met
    /// evict one pod.
    fn act(
        &self,
        now: Instant,
        active: &[usize],
        snap: Option<Arc<Snapshot>>,
        signals: &NodeStat,
        obs: &BTreeMap<Signal, Observed>,
        pods: &[Arc<Pod>],
    ) {
        let Some(&first) =
            active.iter().min_by_key(|i| (condition_of(self.s.thresholds[**i].signal) != Pressure::Memory, **i))
        else {
            return;
        };
        let t = &self.s.thresholds[first];
        let resource = resource_of(t.signal);
        let node = &self.s.node_name;
        self.events.event(
            &ObjectRef::node(node),
            EventType::Warning,
            "EvictionThresholdMet",
            &format!("Attempting to reclaim {resource}"),
        );
        let Some(&o) = obs.get(&t.signal) else { return };
        if self.reclaimed_images(now, t, o, signals) {
            return;
        }
        // a disk ranking must not use emptyDir sizes measured before the
        // pressure (each is measured at most every 10 s): the pod that just
        // filled the disk would look empty and another pod would go
        let disk = resource == "ephemeral-storage" || resource == "inodes";
        if disk {
            self.agent.measure_empty_dirs_now();
        }
        // the pods' stats of this pass, or taken now for the ranking
        let snap = match snap {
            Some(s) if !disk => Some(s),
            old => self.snapshot().or(old),
        };
        let Some(snap) = snap else { return };
        self.evict_one(t, (t.value.of(o.capacity), o.available), &snap, pods);
    }

    /// For a disk signal: free images towards the threshold (and its
    /// minimum reclaim); whether the threshold is no longer met.
    fn reclaimed_images(&self, now: Instant, t: &Threshold, o: Observed, node: &NodeStat) -> bool {
        let disk = matches!(
            t.signal,
            Signal::NodeFsAvailable | Signal::ImageFsAvailable | Signal::NodeFsInodesFree | Signal::ImageFsInodesFree
        );
        let Some(gc) = self.gc.as_ref().filter(|_| disk) else { return false };
        let goal = t.value.of(o.capacity).saturating_add(t.min_reclaim.map_or(0, |r| r.of(o.capacity)));
        let want = if resource_of(t.signal) == "inodes" { u64::MAX } else { goal.saturating_sub(o.available) };
        match gc.free_bytes(now, want) {
            Ok(freed) if freed > 0 => {
                // measure the filesystems again (not a whole snapshot)
                let mut node = node.clone();
                (node.fs, node.image_fs) = self.collector.filesystems();
                if observe(&node).get(&t.signal).is_some_and(|o| !met(t, o, true)) {
                    log::info!("eviction manager: freed {freed} bytes of images; {} no longer met", t.signal.name());
                    return true;
                }
            }
            Ok(_) => {}
            Err(e) => log::warn!("eviction manager: cannot free images: {e}"),
        }
        false
    }

    /// Evict the first pod of the ranking that is not critical and can be
    /// evicted (one pod a pass, as the kubelet).
    fn evict_one(&self, t: &Threshold, threshold: (u64, u64), snap: &Snapshot, pods: &[Arc<Pod>]) {
        let resource = resource_of(t.signal);
        for p in rank(pods, &snap.pods, resource, &self.s.priority_classes) {
            if model::is_critical(p, &self.s.priority_classes) {
                continue;
            }
            let st = snap.pods.iter().find(|s| s.uid == model::uid(p));
            let msg = message(p, st, resource, threshold);
            let grace = if t.soft {
                let own = model::spec_grace_seconds(p).unwrap_or(30);
                self.s.max_pod_grace.max(0).min(own)
            } else {
                IMMEDIATE_GRACE
            };
            if self.evict(p, &msg, Cause::NodePressure, grace) {
                self.metrics.evicted(t.signal.name());
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Amount;
    use crate::node::stats::{ContainerStat, Memory};

    fn pod(name: &str, mem_request: Option<&str>, priority: Option<i32>) -> Arc<Pod> {
        let req = mem_request.map_or(String::new(), |r| format!("    resources: {{requests: {{memory: {r}}}}}\n"));
        let prio = priority.map_or(String::new(), |p| format!("  priority: {p}\n"));
        let y = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ns, uid: {name}}}\nspec:\n{prio}  containers:\n  - name: c\n    image: i\n{req}"
        );
        Arc::new(serde_yaml_ng::from_str(&y).unwrap())
    }

    fn stat(uid: &str, working_set: u64) -> PodStat {
        PodStat {
            uid: uid.into(),
            memory: Memory { working_set_bytes: working_set, ..Default::default() },
            containers: vec![ContainerStat {
                name: "c".into(),
                memory: Memory { working_set_bytes: working_set, ..Default::default() },
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn memory_ranking_puts_usage_over_requests_then_low_priority_then_the_most_over_first() {
        let pods = vec![
            pod("under", Some("200Mi"), None),     // 100Mi of 200Mi: under its request
            pod("over-small", Some("10Mi"), None), // 50Mi of 10Mi: 40Mi over
            pod("over-big", None, None),           // 300Mi of 0: 300Mi over
            pod("over-high", None, Some(1000)),    // over, but a higher priority
            pod("no-stats", Some("1Gi"), None),
        ];
        let stats = vec![
            stat("under", 100 << 20),
            stat("over-small", 50 << 20),
            stat("over-big", 300 << 20),
            stat("over-high", 900 << 20),
        ];
        let order: Vec<&str> = rank(&pods, &stats, "memory", &BTreeMap::new()).iter().map(|p| model::name(p)).collect();
        assert_eq!(order, ["no-stats", "over-big", "over-small", "over-high", "under"]);
        let msg = message(&pods[2], Some(&stats[2]), "memory", (100 << 20, 94_119_936));
        assert_eq!(
            msg,
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 91914Ki. Container c was using 300Mi, request is 0, has larger consumption of memory. "
        );
    }

    #[test]
    fn inode_pressure_ranks_by_inodes_and_pid_pressure_by_processes_not_bytes() {
        let pods = vec![pod("many-files", None, None), pod("big-file", None, None), pod("forks", None, None)];
        let disk = |uid: &str, bytes: u64, inodes: u64, processes: u64| PodStat {
            uid: uid.into(),
            ephemeral_used_bytes: bytes,
            ephemeral_inodes_used: inodes,
            processes: Some(processes),
            ..Default::default()
        };
        let stats =
            vec![disk("many-files", 1 << 20, 50_000, 1), disk("big-file", 1 << 30, 3, 2), disk("forks", 0, 0, 200)];
        let names = |r: Vec<&Arc<Pod>>| r.iter().map(|p| model::name(p).to_string()).collect::<Vec<_>>();
        assert_eq!(names(rank(&pods, &stats, "inodes", &BTreeMap::new())), ["many-files", "big-file", "forks"]);
        assert_eq!(
            names(rank(&pods, &stats, "ephemeral-storage", &BTreeMap::new())),
            ["big-file", "many-files", "forks"]
        );
        assert_eq!(names(rank(&pods, &stats, "pids", &BTreeMap::new())), ["forks", "big-file", "many-files"]);
        assert_eq!(
            message(&pods[2], Some(&stats[2]), "pids", (32000, 31_900)),
            "The node was low on resource: pids. Threshold quantity: 32k, available: 31900. "
        );
    }

    #[test]
    fn thresholds_are_met_below_their_quantity_or_percentage_and_stay_met_until_the_minimum_reclaim() {
        let t = Threshold {
            signal: Signal::NodeFsAvailable,
            value: Amount::Percent(10.0),
            grace: Duration::ZERO,
            soft: false,
            min_reclaim: Some(Amount::Quantity(50)),
        };
        let o = |available| Observed { available, capacity: 1000 };
        assert!(met(&t, &o(99), false));
        assert!(!met(&t, &o(100), false), "strictly below");
        assert!(met(&t, &o(120), true), "once met: until 100 + 50");
        assert!(!met(&t, &o(150), true));
    }

    #[test]
    fn local_storage_limits_name_the_volume_the_pod_or_the_container() {
        let y = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, uid: p}\nspec:\n  volumes: [{name: scratch, emptyDir: {sizeLimit: 1Mi}}]\n  containers:\n  - name: c\n    image: i\n    resources: {limits: {ephemeral-storage: 4Mi}}\n";
        let p: Pod = serde_yaml_ng::from_str(y).unwrap();
        let mut st = PodStat { uid: "p".into(), volumes: vec![("scratch".into(), 2 << 20)], ..Default::default() };
        assert_eq!(
            storage_limit_exceeded(&p, &st).unwrap(),
            "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". "
        );
        st.volumes[0].1 = 1 << 20;
        assert_eq!(storage_limit_exceeded(&p, &st), None);
        st.ephemeral_used_bytes = 5 << 20;
        assert_eq!(
            storage_limit_exceeded(&p, &st).unwrap(),
            "Pod ephemeral local storage usage exceeds the total limit of containers 4Mi. "
        );
    }
}

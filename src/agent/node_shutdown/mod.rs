//! Graceful node shutdown: the plan of which pods stop when and with what
//! grace period ([`plan`], pure, table-tested), the [`Runner`] that carries
//! it out through the narrow parts it needs (pod workers, admission,
//! metrics; the agent only to re-admit on a cancel), the cancel, and the
//! recorded state. The logind thread (`logind.rs`) decides when, runs the
//! plan on its own `shutdown` thread and owns the [`SharedState`].
//!
//! Pods are killed in priority groups, lowest priority first. Without
//! `shutdownGracePeriodByPodPriority` there are two groups: non-critical pods
//! get `shutdownGracePeriod - shutdownGracePeriodCriticalPods`, critical pods
//! (priority >= 2000000000) get `shutdownGracePeriodCriticalPods`. A pod's
//! own shorter grace period wins.

pub mod logind;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use crate::agent::manager::Agent;
use crate::base::cancel::CancelToken;
use crate::config::PriorityGrace;
use crate::model::{self, Pod};
use crate::pod::admission::Admission;
use crate::pod::workers::{KillPodOptions, Phase, PodWorkers, UpdatePodOptions, UpdateType};
use crate::telemetry::metrics::Metrics;

/// One group of the plan: these pods, killed together, with this period.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Lowest priority in the group.
    pub priority: i32,
    /// How long the group may take (seconds).
    pub grace_seconds: i64,
    /// (pod, grace to kill it with) in the group.
    pub pods: Vec<(Arc<Pod>, i64)>,
}

/// The priority groups as configured, lowest priority first.
pub fn groups_from_config(shutdown_grace: i64, critical_grace: i64, by_priority: &[PriorityGrace]) -> Vec<(i32, i64)> {
    if !by_priority.is_empty() {
        let mut g: Vec<(i32, i64)> =
            by_priority.iter().map(|p| (p.priority, p.shutdown_grace_period_seconds)).collect();
        g.sort_by_key(|(p, _)| *p);
        return g;
    }
    vec![(0, (shutdown_grace - critical_grace).max(0)), (model::CRITICAL_PRIORITY, critical_grace)]
}

/// Assign pods to groups: a pod goes to the last group whose priority is at
/// or below its own (pods below the lowest group go to the lowest).
pub fn plan(groups: &[(i32, i64)], pods: &[Arc<Pod>], classes: &BTreeMap<String, i32>) -> Vec<Group> {
    let mut out: Vec<Group> = groups
        .iter()
        .map(|(priority, grace)| Group { priority: *priority, grace_seconds: *grace, pods: Vec::new() })
        .collect();
    if out.is_empty() {
        return out;
    }
    for pod in pods {
        let prio = model::priority(pod, classes);
        let idx = out.iter().rposition(|g| g.priority <= prio).unwrap_or(0);
        let group_grace = out[idx].grace_seconds;
        let own = model::spec_grace_seconds(pod).unwrap_or(model::DEFAULT_GRACE_SECONDS);
        out[idx].pods.push((pod.clone(), own.min(group_grace)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_condition_says_a_problem_only_when_configured() {
        let mut st = State::default();
        assert_eq!(st.condition(), None, "not configured: no condition, as the kubelet");
        st.configured = true;
        st.lock_held = true;
        assert_eq!(st.condition().map(|c| (c.0, c.1)), Some(("False", "GracefulNodeShutdownOn")));
        st.lock_held = false;
        st.problem =
            Some(Problem { off: true, message: "writing /etc/x/99-podwarden.conf: Read-only file system".into() });
        let (status, reason, message) = st.condition().unwrap();
        assert_eq!((status, reason), ("True", "GracefulNodeShutdownOff"));
        assert_eq!(message, "graceful node shutdown is off: writing /etc/x/99-podwarden.conf: Read-only file system");
        st.problem = Some(Problem { off: false, message: "no bus".into() });
        let (status, reason, message) = st.condition().unwrap();
        assert_eq!((status, reason), ("True", "LogindUnavailable"));
        assert_eq!(message, "graceful node shutdown unavailable for now: no bus; retrying every second");
    }
    use crate::model::{ObjectMeta, PodSpec};

    fn pod(name: &str, priority: Option<i32>, class: Option<&str>, grace: Option<i64>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            spec: Some(PodSpec {
                priority,
                priority_class_name: class.map(str::to_string),
                termination_grace_period_seconds: grace,
                ..Default::default()
            }),
            status: None,
        })
    }

    fn names(g: &Group) -> Vec<(String, i64)> {
        g.pods.iter().map(|(p, grace)| (model::name(p).to_string(), *grace)).collect()
    }

    #[test]
    fn critical_and_normal_groups_with_own_shorter_grace() {
        let groups = groups_from_config(20, 10, &[]);
        assert_eq!(groups, vec![(0, 10), (model::CRITICAL_PRIORITY, 10)]);
        let pods = [
            pod("web", None, None, None),
            pod("quick", None, None, Some(3)),
            pod("dns", None, Some("system-node-critical"), Some(60)),
            pod("cluster", None, Some("system-cluster-critical"), Some(5)),
        ];
        let p = plan(&groups, &pods, &BTreeMap::new());
        assert_eq!(names(&p[0]), vec![("web".into(), 10), ("quick".into(), 3)]);
        assert_eq!(names(&p[1]), vec![("dns".into(), 10), ("cluster".into(), 5)]);
    }

    #[test]
    fn priority_groups_lowest_first() {
        let cfg = [
            PriorityGrace { priority: 100000, shutdown_grace_period_seconds: 5 },
            PriorityGrace { priority: 0, shutdown_grace_period_seconds: 20 },
            PriorityGrace { priority: 2_000_000_000, shutdown_grace_period_seconds: 30 },
        ];
        let groups = groups_from_config(0, 0, &cfg);
        assert_eq!(groups, vec![(0, 20), (100000, 5), (2_000_000_000, 30)]);
        let mut classes = BTreeMap::new();
        classes.insert("high".to_string(), 500000);
        let pods = [
            pod("neg", Some(-5), None, None),
            pod("mid", None, Some("high"), None),
            pod("top", None, Some("system-node-critical"), None),
            pod("low", Some(10), None, None),
        ];
        let p = plan(&groups, &pods, &classes);
        assert_eq!(names(&p[0]), vec![("neg".into(), 20), ("low".into(), 20)]);
        assert_eq!(names(&p[1]), vec![("mid".into(), 5)]);
        assert_eq!(names(&p[2]), vec![("top".into(), 30)]);
    }
}

/// Status reason and message the kubelet records on pods killed for a node
/// shutdown.
pub const REASON: &str = "Terminated";
pub const MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";

/// The Warning event on the node (and the reason of the node's
/// `GracefulNodeShutdownUnavailable` condition) when graceful node shutdown
/// cannot work at all: logind's `InhibitDelayMaxSec` could not be raised
/// (the drop-in could not be written, a later one overrides it).
pub const REASON_OFF: &str = "GracefulNodeShutdownOff";
/// The Warning event on the node when logind cannot be reached for now
/// (retried every second).
pub const REASON_UNAVAILABLE: &str = "GracefulNodeShutdownUnavailable";

/// The node condition podwarden adds when graceful node shutdown is
/// configured (the kubelet has none): `True` while it cannot work, as
/// `NetworkUnavailable` and node-problem-detector's conditions say a
/// problem; reason [`REASON_OFF`] (for good) or `LogindUnavailable` (for
/// now), `False` with `GracefulNodeShutdownOn` otherwise. Readiness and
/// `/healthz` (liveness: systemd's watchdog) do not depend on it.
pub const CONDITION: &str = "GracefulNodeShutdownUnavailable";

/// What keeps graceful node shutdown from working.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// For good (until the agent restarts): logind's delay could not be
    /// raised. Otherwise for now: logind cannot be reached, retried.
    pub off: bool,
    pub message: String,
}

/// Graceful node shutdown as seen from the status side.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct State {
    /// `shutdownGracePeriod` (or the by-priority table) is set.
    pub configured: bool,
    /// Why the feature is off or not working now (no bus, logind's delay
    /// could not be raised, ...); `None` while it works.
    pub problem: Option<Problem>,
    /// The delay inhibitor lock is held.
    pub lock_held: bool,
    /// The last shutdown's start and end (from the state file at start-up).
    pub last_start: Option<SystemTime>,
    pub last_end: Option<SystemTime>,
}

impl State {
    /// The [`CONDITION`] as (status, reason, message); `None` when graceful
    /// node shutdown is not configured.
    pub fn condition(&self) -> Option<(&'static str, &'static str, String)> {
        if !self.configured {
            return None;
        }
        Some(match &self.problem {
            Some(p) if p.off => ("True", REASON_OFF, format!("graceful node shutdown is off: {}", p.message)),
            Some(p) => (
                "True",
                "LogindUnavailable",
                format!("graceful node shutdown unavailable for now: {}; retrying every second", p.message),
            ),
            None if self.lock_held => {
                ("False", "GracefulNodeShutdownOn", "podwarden holds logind's delay inhibitor lock".into())
            }
            None => (
                "False",
                "GracefulNodeShutdownOn",
                "podwarden does not hold logind's delay inhibitor lock now (taking it, or a node shutdown ran)".into(),
            ),
        })
    }
}

/// The graceful-shutdown [`State`]: written by the logind thread and the
/// shutdown run, shown by the node view. The wiring creates one and hands
/// it to both.
pub type SharedState = Arc<Mutex<State>>;

/// What one shutdown did.
#[derive(Debug, Clone)]
pub struct Report {
    pub started: SystemTime,
    pub ended: SystemTime,
    /// Pods killed, in the order they were killed.
    pub killed: Vec<crate::model::Uid>,
    /// Some group did not terminate within its period.
    pub timed_out: bool,
    /// The run was cancelled before its last group was over.
    pub cancelled: bool,
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// How long a wait for a group looks at its cancel token at the latest:
/// the pod workers' condvar wakes the wait for every phase change; a cancel
/// is seen within this slice.
const CANCEL_SLICE: Duration = Duration::from_millis(50);

/// The parts a node shutdown acts on: the pod workers (kill, wait), the
/// admission gate, the metrics and the shared state; the agent only to
/// re-admit and restart pods when a shutdown is cancelled.
#[derive(Clone)]
pub struct Runner {
    pub workers: PodWorkers,
    pub admission: Arc<Admission>,
    pub metrics: Arc<Metrics>,
    pub agent: Arc<Agent>,
    pub state: SharedState,
    /// Where graceful shutdown's own problems are told (events on the node).
    pub events: Arc<crate::telemetry::events::EventRecorder>,
    pub node_name: String,
}

impl Runner {
    /// Record a shutdown's start (`end` None) or end: status, metrics and,
    /// with a `root_dir`, the state file.
    fn record(&self, root_dir: Option<&Path>, start: SystemTime, end: Option<SystemTime>) {
        {
            let mut st = self.state.lock();
            st.last_start = Some(start);
            st.last_end = end;
        }
        self.metrics.set_shutdown_times(Some(unix_seconds(start)), end.map(unix_seconds));
        if let Some(dir) = root_dir
            && let Err(e) = write_state(dir, start, end)
        {
            log::warn!("cannot write {}: {e}", dir.join(STATE_FILE).display());
        }
    }

    /// Carry out a node shutdown: close admission, kill the running pods
    /// group by group (lowest priority first, as [`plan`] says) through
    /// `update_pod(Kill)`, and wait (the workers' condvar) until each group
    /// is terminated or its period is over. `cancel` stops the run at once:
    /// no further group is killed and the wait ends (the pods already told
    /// to stop go on stopping; [`Runner::cancel`] restarts them). The start
    /// and end are recorded (status, metrics, `<root_dir>/`[`STATE_FILE`]).
    pub fn run(
        &self,
        groups: &[(i32, i64)],
        classes: &BTreeMap<String, i32>,
        root_dir: Option<&Path>,
        cancel: &CancelToken,
    ) -> Report {
        let started = SystemTime::now();
        self.admission.set_shutting_down(true);
        self.record(root_dir, started, None);
        let running: Vec<Arc<Pod>> =
            self.workers.snapshot().into_iter().filter(|w| w.phase < Phase::Terminated).filter_map(|w| w.pod).collect();
        let mut killed = Vec::new();
        let mut timed_out = false;
        for group in plan(groups, &running, classes) {
            if group.pods.is_empty() {
                continue;
            }
            if cancel.is_cancelled() {
                break;
            }
            let deadline = crate::base::cancel::deadline_in(Duration::from_secs(group.grace_seconds.max(0) as u64));
            let mut uids = Vec::new();
            for (pod, grace) in &group.pods {
                let status_fn: crate::pod::workers::StatusFn = Arc::new(|s: &mut crate::model::PodStatus| {
                    s.phase = Some(model::PHASE_FAILED.into());
                    s.reason = Some(REASON.into());
                    s.message = Some(MESSAGE.into());
                });
                let opts = KillPodOptions {
                    grace_period_override: Some(*grace),
                    status_fn: Some(status_fn),
                    ..Default::default()
                };
                log::info!("node shutdown: killing pod {} with grace {grace}s", model::pod_ref(pod));
                self.workers.update_pod(UpdatePodOptions::kill(pod.clone(), opts));
                uids.push(model::uid(pod).to_string());
            }
            killed.extend(uids.iter().cloned());
            match self.wait_stopped(&uids, deadline, cancel) {
                Wait::Terminated => {}
                Wait::Cancelled => break,
                Wait::TimedOut => {
                    log::warn!(
                        "node shutdown: priority group {} not terminated within {}s",
                        group.priority,
                        group.grace_seconds
                    );
                    timed_out = true;
                }
            }
        }
        let cancelled = cancel.is_cancelled();
        let ended = SystemTime::now();
        self.record(root_dir, started, Some(ended));
        Report { started, ended, killed, timed_out, cancelled }
    }

    /// Wait until every container of each of `uids` has stopped (the
    /// sandboxes' teardown goes on after), `deadline` passes or `cancel`
    /// is cancelled.
    fn wait_stopped(&self, uids: &[crate::model::Uid], deadline: Instant, cancel: &CancelToken) -> Wait {
        loop {
            if cancel.is_cancelled() {
                return Wait::Cancelled;
            }
            let now = Instant::now();
            let slice = deadline.min(crate::base::cancel::add_saturating(now, CANCEL_SLICE));
            if self.workers.wait_containers_stopped(uids, slice) {
                return Wait::Terminated;
            }
            if Instant::now() >= deadline {
                return if cancel.is_cancelled() { Wait::Cancelled } else { Wait::TimedOut };
            }
        }
    }

    /// A cancelled shutdown: reopen admission, admit the pods rejected
    /// while it ran, and start again the static pods the shutdown stopped
    /// (the kubelet leaves them Failed; an edge node must not stay empty).
    /// Each is asked to restart; its worker starts it once its earlier
    /// incarnation has finished.
    pub fn cancel(&self, killed: &[crate::model::Uid]) {
        self.admission.set_shutting_down(false);
        for uid in killed {
            if let Some(d) = self.agent.desired_pod(uid)
                && d.rejected.is_none()
            {
                self.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, d.pod));
            }
        }
        self.agent.readmit(crate::pod::admission::REASON_NODE_SHUTDOWN);
    }

    /// At start-up: show the last shutdown recorded in the state file.
    pub fn load_state(&self, root_dir: &Path) {
        if let Some((start, end)) = read_state(root_dir) {
            self.record(None, start, end);
        }
    }
}

/// How a wait for a group ended.
enum Wait {
    Terminated,
    TimedOut,
    Cancelled,
}

/// Name of the state file in `rootDir`.
pub const STATE_FILE: &str = "graceful_node_shutdown_state";

/// `<rootDir>/graceful_node_shutdown_state`: `{"startTime": ..., "endTime": ...}`
/// in RFC 3339 (`endTime` null while a shutdown runs), written atomically.
pub fn write_state(root_dir: &Path, start: SystemTime, end: Option<SystemTime>) -> std::io::Result<()> {
    let json = serde_json::json!({"startTime": model::rfc3339(start), "endTime": end.map(model::rfc3339)});
    std::fs::create_dir_all(root_dir)?;
    crate::base::fsutil::write_atomically(&root_dir.join(STATE_FILE), &serde_json::to_vec(&json)?)
}

/// Read the state file: (start, end). `None` if there is none or it does not
/// parse (a warning names it).
pub fn read_state(root_dir: &Path) -> Option<(SystemTime, Option<SystemTime>)> {
    let path = root_dir.join(STATE_FILE);
    let text = std::fs::read_to_string(&path).ok()?;
    let parse = |v: &serde_json::Value| -> Option<SystemTime> {
        let ts: k8s_openapi::jiff::Timestamp = v.as_str()?.parse().ok()?;
        Some(SystemTime::from(ts))
    };
    let v: serde_json::Value = serde_json::from_str(&text).ok().unwrap_or_default();
    match parse(&v["startTime"]) {
        Some(start) => Some((start, parse(&v["endTime"]))),
        None => {
            log::warn!("{}: not a graceful shutdown state file; ignored", path.display());
            None
        }
    }
}

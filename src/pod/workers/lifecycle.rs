//! The pod lifecycle as a pure state machine. No locks, threads or I/O: the
//! pod workers feed it facts and do what it returns.
//!
//! ```text
//! Syncing --kill | deleted | terminal | runtime-only--> Terminating
//! Syncing --sync_pod reports terminal-------------------> Terminating
//! Terminating --sync_terminating_pod ok----------------> Terminated
//! Terminating --ok, runtime-only pod-------------------> Finished
//! Terminated --sync_terminated_pod ok------------------> Finished
//! ```
//! Phases never go backwards. Once termination is requested no container
//! may be started again, and the grace period can only shrink.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Set-up: `sync_pod` runs; containers may be starting.
    Syncing,
    /// Should stop running, might still have containers.
    Terminating,
    /// No running containers, none coming; clean-up pending.
    Terminated,
    /// Nothing more to do; removed once no longer desired.
    Finished,
}

impl Phase {
    /// The kubelet's label for the phase (the `lifecycle` label of
    /// `kubelet_working_pods`): a finished pod still counts as terminated.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Syncing => "sync",
            Phase::Terminating => "terminating",
            Phase::Terminated | Phase::Finished => "terminated",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpdateType {
    Create,
    Update,
    Sync,
    Kill,
}

/// The three kinds of work a worker does, one per phase that has work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkKind {
    Sync,
    Terminating,
    Terminated,
}

/// Grace period inputs, most specific first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraceInputs {
    /// From the kill request (delete --grace-period, node shutdown, orphan).
    pub kill_override: Option<i64>,
    /// `metadata.deletionGracePeriodSeconds`.
    pub deletion: Option<i64>,
    /// `spec.terminationGracePeriodSeconds`.
    pub spec: Option<i64>,
}

/// The effective grace period given what is in force now. Kill override,
/// else deletion grace period, else spec, else 30; 0 means 1; never longer
/// than `current`. Returns the period and whether it shortened `current`.
pub fn effective_grace(current: Option<i64>, g: GraceInputs) -> (i64, bool) {
    let wanted = g.kill_override.or(g.deletion).or(g.spec).unwrap_or(crate::model::DEFAULT_GRACE_SECONDS).max(1);
    match current {
        Some(c) if wanted < c => (wanted, true),
        Some(c) => (c, false),
        None => (wanted, false),
    }
}

/// What an update says, reduced to the facts the lifecycle decides on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateFacts {
    pub update_type: UpdateType,
    /// Only runtime data is known (an orphaned runtime pod).
    pub runtime_only: bool,
    /// The pod carries a deletion timestamp.
    pub pod_deleted: bool,
    /// The pod's phase is Succeeded or Failed.
    pub pod_terminal: bool,
    /// The kill is an eviction (content removed even if not deleted).
    pub evict: bool,
    pub grace: GraceInputs,
}

impl UpdateFacts {
    pub fn new(update_type: UpdateType) -> Self {
        UpdateFacts {
            update_type,
            runtime_only: false,
            pod_deleted: false,
            pod_terminal: false,
            evict: false,
            grace: GraceInputs::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignored {
    /// A non-kill update for a pod known only from the runtime.
    RuntimeOnlyNotKill,
    /// A Create for a UID whose termination was requested: restart later.
    RestartRequested,
    /// The pod already finished.
    Finished,
    /// The pod is terminated; a kill has nothing left to do.
    Terminated,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateDecision {
    /// Drop the update; signal any completion channel now.
    Ignore(Ignored),
    /// Store as pending and notify the worker.
    Queue {
        /// Termination was requested by this update: close the start gate
        /// and cancel the in-flight sync.
        became_terminating: bool,
        /// A running termination must restart with the shorter period.
        grace_shortened: bool,
        /// Keep the kill's completion signal and status function until the
        /// pod is terminated (false: signal completion now).
        attach_kill: bool,
    },
}

/// The outcome of one pass of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done; for Sync, whether the pod is now terminal and when to look again.
    Ok { terminal: bool, requeue_after: Option<Duration> },
    /// Interrupted by a new update (already pending).
    Cancelled,
    /// Failed; retry after back-off.
    Err,
    /// Failed for good: an error retrying cannot cure. Reported once; the
    /// pod moves on as after a terminal success (set-up: the pod is failed
    /// and terminates; termination and clean-up: the next phase), so no
    /// worker loops on it and none is stuck terminating.
    Failed,
}

/// What the worker does after a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterWork {
    /// Run the next phase's work at once.
    Transition,
    /// Wait for an update, or this long before re-running the last one.
    Wait(Duration),
    /// Wait for the next update only.
    WaitForUpdate,
    /// The worker's job is done: exit the thread.
    Exit,
}

/// Whether a worker may run the work it just took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartDecision {
    Run,
    /// A static pod with this full name is still running: put the work back.
    WaitForName,
}

/// What `sync_known_pods` does with one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnownDecision {
    Keep,
    /// Forget the worker (it finished, or never started anything).
    Remove,
    /// Drive it to the end: replay its last update as a Kill.
    ReplayKill,
}

/// Timing knobs for decisions that schedule work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub resync: Duration,
    pub backoff: Duration,
}

/// Per-pod lifecycle state. Plain data; see the module docs for the edges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lifecycle {
    pub phase: Phase,
    /// The worker has begun work on this pod (containers may exist).
    pub started: bool,
    pub deleted: bool,
    pub evicted: bool,
    /// Set once terminating; only ever shrinks.
    pub grace_period: Option<i64>,
    pub restart_requested: bool,
    /// The pod was seen as a runtime-only pod at least once.
    pub observed_runtime: bool,
    /// The last pass failed (for metrics and `podwarden get`).
    pub last_error: bool,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Self::new()
    }
}

impl Lifecycle {
    pub fn new() -> Self {
        Lifecycle {
            phase: Phase::Syncing,
            started: false,
            deleted: false,
            evicted: false,
            grace_period: None,
            restart_requested: false,
            observed_runtime: false,
            last_error: false,
        }
    }

    pub fn is_termination_requested(&self) -> bool {
        self.phase >= Phase::Terminating
    }

    pub fn is_terminated(&self) -> bool {
        self.phase >= Phase::Terminated
    }

    pub fn is_finished(&self) -> bool {
        self.phase == Phase::Finished
    }

    /// Content (volumes, pod dir) may go: evicted, or deleted and terminated.
    pub fn should_content_be_removed(&self) -> bool {
        self.evicted || (self.deleted && self.is_terminated())
    }

    /// The work the current phase calls for (none once finished).
    pub fn work_kind(&self) -> Option<WorkKind> {
        match self.phase {
            Phase::Syncing => Some(WorkKind::Sync),
            Phase::Terminating => Some(WorkKind::Terminating),
            Phase::Terminated => Some(WorkKind::Terminated),
            Phase::Finished => None,
        }
    }

    /// Decide on an update. `first_time`: the UID was not known before.
    pub fn on_update(&mut self, f: &UpdateFacts, first_time: bool) -> UpdateDecision {
        if first_time && f.runtime_only && f.update_type != UpdateType::Kill {
            return UpdateDecision::Ignore(Ignored::RuntimeOnlyNotKill);
        }
        if !first_time && self.is_termination_requested() && f.update_type == UpdateType::Create {
            self.restart_requested = true;
            return UpdateDecision::Ignore(Ignored::RestartRequested);
        }
        if self.is_finished() {
            return UpdateDecision::Ignore(Ignored::Finished);
        }
        if f.runtime_only {
            self.observed_runtime = true;
        }
        let mut became_terminating = false;
        if !self.is_termination_requested() {
            if f.runtime_only || f.pod_deleted {
                self.deleted = true;
                became_terminating = true;
            } else if f.pod_terminal {
                became_terminating = true;
            } else if f.update_type == UpdateType::Kill {
                if f.evict {
                    self.evicted = true;
                } else {
                    self.deleted = true;
                }
                became_terminating = true;
            }
            if became_terminating {
                self.phase = Phase::Terminating;
            }
        }
        match self.phase {
            Phase::Syncing => {
                UpdateDecision::Queue { became_terminating: false, grace_shortened: false, attach_kill: false }
            }
            Phase::Terminating => {
                let (g, shortened) = effective_grace(self.grace_period, f.grace);
                self.grace_period = Some(g);
                UpdateDecision::Queue { became_terminating, grace_shortened: shortened, attach_kill: true }
            }
            // A terminated pod finishes its clean-up on its own; later
            // updates (and kills) have nothing to add.
            Phase::Terminated | Phase::Finished => UpdateDecision::Ignore(Ignored::Terminated),
        }
    }

    /// Decide whether taken work may run. `static_name_free`: no other UID
    /// holds this pod's full name (always true for non-static pods).
    pub fn on_start(&mut self, kind: WorkKind, static_name_free: bool) -> StartDecision {
        if self.started || kind != WorkKind::Sync {
            // Terminating work never starts containers, so it needs no
            // name: a pod killed before it started is driven to the end.
            self.started = true;
            return StartDecision::Run;
        }
        if !static_name_free {
            return StartDecision::WaitForName;
        }
        self.started = true;
        StartDecision::Run
    }

    /// Apply the outcome of a pass of `kind`.
    pub fn on_work_done(&mut self, kind: WorkKind, outcome: Outcome, runtime_only: bool, t: Timing) -> AfterWork {
        self.last_error = matches!(outcome, Outcome::Err | Outcome::Failed);
        let (terminal, requeue_after) = match outcome {
            Outcome::Cancelled => return AfterWork::WaitForUpdate,
            Outcome::Err => return AfterWork::Wait(t.backoff),
            // as a terminal success: the pod moves on, never loops
            Outcome::Failed => (true, None),
            Outcome::Ok { terminal, requeue_after } => (terminal, requeue_after),
        };
        match kind {
            WorkKind::Terminated => {
                self.phase = Phase::Finished;
                AfterWork::Exit
            }
            WorkKind::Terminating if runtime_only => {
                // Nothing configured it: no clean-up of pod content.
                self.phase = Phase::Finished;
                AfterWork::Exit
            }
            WorkKind::Terminating => {
                self.phase = self.phase.max(Phase::Terminated);
                AfterWork::Transition
            }
            WorkKind::Sync if self.is_termination_requested() => {
                // A kill arrived while syncing and the pass finished
                // before it noticed: go on with termination at once.
                AfterWork::Transition
            }
            WorkKind::Sync if terminal => {
                self.phase = Phase::Terminating;
                AfterWork::Transition
            }
            WorkKind::Sync => AfterWork::Wait(requeue_after.map_or(t.resync, |r| r.min(t.resync))),
        }
    }

    /// Decide during `sync_known_pods`. `idle`: no pending update and no
    /// pass in progress.
    pub fn on_sync_known(&mut self, desired: bool, idle: bool) -> KnownDecision {
        if desired && !self.restart_requested {
            return KnownDecision::Keep;
        }
        if !desired {
            // Orphaned: no source will tell us about this pod again, so the
            // worker drives it to the end on its own.
            self.deleted = true;
        }
        if self.is_finished() {
            return KnownDecision::Remove;
        }
        if desired {
            // restart requested: wait until the old incarnation finished
            return KnownDecision::Keep;
        }
        if !self.started && !self.observed_runtime {
            return KnownDecision::Remove;
        }
        if !self.is_termination_requested() || idle {
            return KnownDecision::ReplayKill;
        }
        KnownDecision::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timing = Timing { resync: Duration::from_secs(60), backoff: Duration::from_secs(10) };

    fn kill(grace: Option<i64>) -> UpdateFacts {
        UpdateFacts {
            grace: GraceInputs { kill_override: grace, ..Default::default() },
            ..UpdateFacts::new(UpdateType::Kill)
        }
    }

    fn at(phase: Phase) -> Lifecycle {
        Lifecycle { phase, started: true, ..Lifecycle::new() }
    }

    fn queue(became: bool, shortened: bool, attach: bool) -> UpdateDecision {
        UpdateDecision::Queue { became_terminating: became, grace_shortened: shortened, attach_kill: attach }
    }

    #[test]
    fn effective_grace_table() {
        let g = |o, d, s| GraceInputs { kill_override: o, deletion: d, spec: s };
        let table: &[(Option<i64>, GraceInputs, (i64, bool))] = &[
            (None, g(None, None, None), (30, false)),
            (None, g(None, None, Some(5)), (5, false)),
            (None, g(None, Some(7), Some(5)), (7, false)),
            (None, g(Some(2), Some(7), Some(5)), (2, false)),
            (None, g(Some(0), None, None), (1, false)),
            (None, g(None, None, Some(0)), (1, false)),
            (Some(10), g(Some(3), None, None), (3, true)),
            (Some(10), g(Some(30), None, None), (10, false)),
            (Some(10), g(Some(10), None, None), (10, false)),
            (Some(1), g(Some(0), None, None), (1, false)),
        ];
        for (cur, inputs, want) in table {
            assert_eq!(effective_grace(*cur, *inputs), *want, "current {cur:?} inputs {inputs:?}");
        }
    }

    #[test]
    fn update_table() {
        // (start state, facts, first_time, decision, phase after)
        let create = UpdateFacts::new(UpdateType::Create);
        let sync = UpdateFacts::new(UpdateType::Sync);
        let runtime_kill = UpdateFacts { runtime_only: true, ..kill(Some(1)) };
        let runtime_sync = UpdateFacts { runtime_only: true, ..sync };
        let deleted = UpdateFacts { pod_deleted: true, ..UpdateFacts::new(UpdateType::Update) };
        let terminal = UpdateFacts { pod_terminal: true, ..create };
        let table: Vec<(Lifecycle, UpdateFacts, bool, UpdateDecision, Phase)> = vec![
            (Lifecycle::new(), create, true, queue(false, false, false), Phase::Syncing),
            (at(Phase::Syncing), sync, false, queue(false, false, false), Phase::Syncing),
            (at(Phase::Syncing), kill(None), false, queue(true, false, true), Phase::Terminating),
            (Lifecycle::new(), terminal, true, queue(true, false, true), Phase::Terminating),
            (at(Phase::Syncing), deleted, false, queue(true, false, true), Phase::Terminating),
            (Lifecycle::new(), runtime_kill, true, queue(true, false, true), Phase::Terminating),
            (Lifecycle::new(), runtime_sync, true, UpdateDecision::Ignore(Ignored::RuntimeOnlyNotKill), Phase::Syncing),
            (
                at(Phase::Terminating),
                create,
                false,
                UpdateDecision::Ignore(Ignored::RestartRequested),
                Phase::Terminating,
            ),
            (at(Phase::Terminating), sync, false, queue(false, false, true), Phase::Terminating),
            (
                at(Phase::Terminated),
                kill(Some(1)),
                false,
                UpdateDecision::Ignore(Ignored::Terminated),
                Phase::Terminated,
            ),
            (at(Phase::Terminated), sync, false, UpdateDecision::Ignore(Ignored::Terminated), Phase::Terminated),
            (at(Phase::Finished), kill(None), false, UpdateDecision::Ignore(Ignored::Finished), Phase::Finished),
            (at(Phase::Finished), create, false, UpdateDecision::Ignore(Ignored::RestartRequested), Phase::Finished),
        ];
        for (i, (mut lc, facts, first, want, phase)) in table.into_iter().enumerate() {
            assert_eq!(lc.on_update(&facts, first), want, "row {i}");
            assert_eq!(lc.phase, phase, "row {i}");
        }
    }

    #[test]
    fn kill_marks_deleted_and_evict_marks_evicted() {
        let mut lc = at(Phase::Syncing);
        lc.on_update(&kill(None), false);
        assert!(lc.deleted && !lc.evicted);
        let mut lc = at(Phase::Syncing);
        lc.on_update(&UpdateFacts { evict: true, ..kill(None) }, false);
        assert!(lc.evicted && !lc.deleted);
        assert!(lc.should_content_be_removed());
        // terminal pods are not deleted: content stays
        let mut lc = at(Phase::Syncing);
        lc.on_update(&UpdateFacts { pod_terminal: true, ..UpdateFacts::new(UpdateType::Sync) }, false);
        assert!(!lc.deleted && lc.phase == Phase::Terminating);
    }

    #[test]
    fn grace_only_shrinks_while_terminating() {
        let mut lc = at(Phase::Syncing);
        assert_eq!(lc.on_update(&kill(Some(30)), false), queue(true, false, true));
        assert_eq!(lc.grace_period, Some(30));
        assert_eq!(lc.on_update(&kill(Some(60)), false), queue(false, false, true));
        assert_eq!(lc.grace_period, Some(30));
        assert_eq!(lc.on_update(&kill(Some(2)), false), queue(false, true, true));
        assert_eq!(lc.grace_period, Some(2));
        assert_eq!(lc.on_update(&kill(None), false), queue(false, false, true));
        assert_eq!(lc.grace_period, Some(2));
    }

    #[test]
    fn start_table() {
        let mut fresh = Lifecycle::new();
        assert_eq!(fresh.on_start(WorkKind::Sync, false), StartDecision::WaitForName);
        assert!(!fresh.started);
        assert_eq!(fresh.on_start(WorkKind::Sync, true), StartDecision::Run);
        assert!(fresh.started);
        // once started, the name is ours
        assert_eq!(fresh.on_start(WorkKind::Sync, false), StartDecision::Run);
        // a pod killed before it started terminates without waiting
        let mut killed = Lifecycle::new();
        killed.on_update(&kill(None), true);
        assert_eq!(killed.on_start(WorkKind::Terminating, false), StartDecision::Run);
    }

    #[test]
    fn work_done_table() {
        let ok = |terminal| Outcome::Ok { terminal, requeue_after: None };
        let table: Vec<(Phase, WorkKind, Outcome, bool, AfterWork, Phase)> = vec![
            (Phase::Syncing, WorkKind::Sync, ok(false), false, AfterWork::Wait(T.resync), Phase::Syncing),
            (
                Phase::Syncing,
                WorkKind::Sync,
                Outcome::Ok { terminal: false, requeue_after: Some(Duration::from_secs(10)) },
                false,
                AfterWork::Wait(Duration::from_secs(10)),
                Phase::Syncing,
            ),
            (Phase::Syncing, WorkKind::Sync, ok(true), false, AfterWork::Transition, Phase::Terminating),
            (Phase::Syncing, WorkKind::Sync, Outcome::Err, false, AfterWork::Wait(T.backoff), Phase::Syncing),
            (Phase::Terminating, WorkKind::Sync, ok(false), false, AfterWork::Transition, Phase::Terminating),
            (
                Phase::Terminating,
                WorkKind::Sync,
                Outcome::Cancelled,
                false,
                AfterWork::WaitForUpdate,
                Phase::Terminating,
            ),
            (Phase::Terminating, WorkKind::Terminating, ok(false), false, AfterWork::Transition, Phase::Terminated),
            (Phase::Terminating, WorkKind::Terminating, ok(false), true, AfterWork::Exit, Phase::Finished),
            (
                Phase::Terminating,
                WorkKind::Terminating,
                Outcome::Err,
                false,
                AfterWork::Wait(T.backoff),
                Phase::Terminating,
            ),
            (Phase::Terminated, WorkKind::Terminated, ok(false), false, AfterWork::Exit, Phase::Finished),
            // an error that cannot heal: never retried, the pod moves on
            (Phase::Syncing, WorkKind::Sync, Outcome::Failed, false, AfterWork::Transition, Phase::Terminating),
            (
                Phase::Terminating,
                WorkKind::Terminating,
                Outcome::Failed,
                false,
                AfterWork::Transition,
                Phase::Terminated,
            ),
            (Phase::Terminating, WorkKind::Terminating, Outcome::Failed, true, AfterWork::Exit, Phase::Finished),
            (Phase::Terminated, WorkKind::Terminated, Outcome::Failed, false, AfterWork::Exit, Phase::Finished),
            (
                Phase::Terminated,
                WorkKind::Terminated,
                Outcome::Err,
                false,
                AfterWork::Wait(T.backoff),
                Phase::Terminated,
            ),
        ];
        for (i, (phase, kind, outcome, runtime_only, want, after)) in table.into_iter().enumerate() {
            let mut lc = at(phase);
            assert_eq!(lc.on_work_done(kind, outcome, runtime_only, T), want, "row {i}");
            assert_eq!(lc.phase, after, "row {i}");
        }
    }

    #[test]
    fn sync_known_table() {
        let unstarted = Lifecycle::new();
        let table: Vec<(Lifecycle, bool, bool, KnownDecision)> = vec![
            (at(Phase::Syncing), true, true, KnownDecision::Keep),
            (at(Phase::Finished), true, true, KnownDecision::Keep),
            (at(Phase::Finished), false, true, KnownDecision::Remove),
            (Lifecycle { restart_requested: true, ..at(Phase::Finished) }, true, true, KnownDecision::Remove),
            (Lifecycle { restart_requested: true, ..at(Phase::Terminating) }, true, true, KnownDecision::Keep),
            (unstarted.clone(), false, true, KnownDecision::Remove),
            (Lifecycle { observed_runtime: true, ..unstarted }, false, true, KnownDecision::ReplayKill),
            (at(Phase::Syncing), false, false, KnownDecision::ReplayKill),
            (at(Phase::Terminating), false, true, KnownDecision::ReplayKill),
            (at(Phase::Terminating), false, false, KnownDecision::Keep),
            (at(Phase::Terminated), false, false, KnownDecision::Keep),
        ];
        for (i, (mut lc, desired, idle, want)) in table.into_iter().enumerate() {
            assert_eq!(lc.on_sync_known(desired, idle), want, "row {i}");
            if !desired {
                assert!(lc.deleted, "row {i}: an orphan counts as deleted");
            }
        }
    }

    #[test]
    fn phases_never_go_backwards() {
        let ok = Outcome::Ok { terminal: false, requeue_after: None };
        let mut lc = at(Phase::Terminated);
        // a late sync result must not pull a terminated pod back
        lc.on_work_done(WorkKind::Sync, ok, false, T);
        assert_eq!(lc.phase, Phase::Terminated);
        lc.on_work_done(WorkKind::Terminating, ok, false, T);
        assert_eq!(lc.phase, Phase::Terminated);
    }
}

//! One probe's rules, pure: the kubelet's probe worker as a state machine
//! over (container instance, time, handler outcome). The prober thread owns
//! one [`ProbeState`] per (pod, container, kind) and asks it when to probe
//! and what a result means; nothing here does I/O.
//!
//! The rules (kubelet `prober/worker.go`):
//! - state belongs to one container instance: a new container ID resets it
//!   (readiness Failure, liveness Success, startup Unknown) and lifts the
//!   hold;
//! - the first probe is due `initialDelaySeconds` after the container
//!   started, then every `periodSeconds`;
//! - liveness and readiness wait for the startup probe's success; a startup
//!   probe stops once it passed;
//! - `successThreshold`/`failureThreshold` consecutive equal results change
//!   the cached result; a handler error counts for neither;
//! - after a liveness failure or a startup decision the probe holds until
//!   the next container instance (the kill is under way; probing a dying
//!   container helps nobody).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Probe;

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Liveness,
    Readiness,
    Startup,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Startup, Kind::Liveness, Kind::Readiness];

    /// The kubelet's spelling (event messages, the `probe_type` label).
    pub fn label(self) -> &'static str {
        match self {
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
            Kind::Startup => "Startup",
        }
    }

    /// The value a new container instance starts with.
    pub fn initial(self) -> Cached {
        match self {
            Kind::Liveness => Cached::Success,
            Kind::Readiness => Cached::Failure,
            Kind::Startup => Cached::Unknown,
        }
    }
}

/// The result the rest of the agent sees (the kubelet's results manager).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cached {
    Success,
    Failure,
    Unknown,
}

/// What one probe run found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// Probe failed; the text follows "`<Kind> probe failed: `".
    Failure(String),
    /// A success with a warning (an HTTP redirect to another host).
    Warning(String),
    /// The handler could not run (a port name not found, the runtime
    /// unreachable): counted for neither threshold.
    Error(String),
}

/// A probe's timing fields with the API's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl Timing {
    pub fn of(p: &Probe) -> Timing {
        let secs = |v: Option<i32>, default: i32, min: i32| Duration::from_secs(v.unwrap_or(default).max(min) as u64);
        Timing {
            initial_delay: secs(p.initial_delay_seconds, 0, 0),
            period: secs(p.period_seconds, 10, 1),
            timeout: secs(p.timeout_seconds, 1, 1),
            success_threshold: p.success_threshold.unwrap_or(1).max(1) as u32,
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1) as u32,
        }
    }
}

/// One probe of one container.
#[derive(Debug, Clone)]
pub struct ProbeState {
    pub kind: Kind,
    pub timing: Timing,
    /// The container instance the state belongs to.
    container_id: Option<String>,
    cached: Cached,
    /// The last result that counted and how many times in a row.
    last: Option<bool>,
    run: u32,
    on_hold: bool,
    /// When the next probe is due (meaningful with a running instance).
    next: Instant,
    /// The end of the instance's `initialDelaySeconds`: no probe runs
    /// before it, a triggered one neither.
    delay_until: Instant,
}

/// What [`ProbeState::record`] concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// The cached result changed to this.
    pub changed: Option<Cached>,
}

impl ProbeState {
    pub fn new(kind: Kind, timing: Timing, now: Instant) -> Self {
        ProbeState {
            kind,
            timing,
            container_id: None,
            cached: kind.initial(),
            last: None,
            run: 0,
            on_hold: false,
            next: now,
            delay_until: now,
        }
    }

    pub fn cached(&self) -> Cached {
        self.cached
    }

    pub fn container_id(&self) -> Option<&str> {
        self.container_id.as_deref()
    }

    pub fn on_hold(&self) -> bool {
        self.on_hold
    }

    pub fn next_due(&self) -> Instant {
        self.next
    }

    /// The container as the runtime shows it now: `running` with its start
    /// (`started_ago`: how long it has been running) or not. A new instance
    /// resets the state and schedules the first probe after the initial
    /// delay; a container that stopped makes the result Failure (a stopped
    /// container is neither ready nor started). Returns whether the cached
    /// result changed.
    pub fn observe(&mut self, id: Option<&str>, running: bool, started_ago: Duration, now: Instant) -> bool {
        let before = self.cached;
        if id != self.container_id.as_deref() {
            self.container_id = id.map(str::to_string);
            self.cached = self.kind.initial();
            self.last = None;
            self.run = 0;
            self.on_hold = false;
            let wait = self.timing.initial_delay.saturating_sub(started_ago);
            self.delay_until = crate::base::cancel::add_saturating(now, wait);
            self.next = self.delay_until;
        }
        if id.is_some() && !running {
            self.cached = Cached::Failure;
        }
        self.cached != before
    }

    /// Whether a probe should start now: a running instance, not on hold,
    /// due, and (for liveness and readiness) the container started, i.e. a
    /// startup probe, if any, passed.
    pub fn due(&self, now: Instant, running: bool, started: bool) -> bool {
        if self.container_id.is_none() || !running || self.on_hold || now < self.next {
            return false;
        }
        match self.kind {
            Kind::Startup => self.cached != Cached::Success,
            Kind::Liveness | Kind::Readiness => started,
        }
    }

    /// A probe started now: the next one is due a period later.
    pub fn started_probe(&mut self, now: Instant) {
        self.next = crate::base::cancel::add_saturating(now, self.timing.period);
    }

    /// Run the next probe at once (a readiness probe of a container that is
    /// not ready yet, as the kubelet's manual trigger), but not before the
    /// initial delay is over: the kubelet's worker skips every probe, a
    /// triggered one too, until `initialDelaySeconds` after the start. The
    /// period restarts from that run.
    pub fn trigger(&mut self, now: Instant) {
        let at = now.max(self.delay_until);
        if self.next > at {
            self.next = at;
        }
    }

    /// Count one outcome for the instance `id` (a result for an older
    /// instance is dropped).
    pub fn record(&mut self, id: &str, outcome: &Outcome) -> Recorded {
        let none = Recorded { changed: None };
        if self.container_id.as_deref() != Some(id) || self.on_hold {
            return none;
        }
        let ok = match outcome {
            Outcome::Success | Outcome::Warning(_) => true,
            Outcome::Failure(_) => false,
            Outcome::Error(_) => return none,
        };
        if self.last == Some(ok) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(ok);
            self.run = 1;
        }
        let threshold = if ok { self.timing.success_threshold } else { self.timing.failure_threshold };
        if self.run < threshold {
            return none;
        }
        let value = if ok { Cached::Success } else { Cached::Failure };
        let changed = (value != self.cached).then_some(value);
        self.cached = value;
        if (self.kind == Kind::Liveness && !ok) || self.kind == Kind::Startup {
            self.on_hold = true;
            self.run = 0;
        }
        Recorded { changed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(delay: u64, period: u64, success: u32, failure: u32) -> Timing {
        Timing {
            initial_delay: Duration::from_secs(delay),
            period: Duration::from_secs(period),
            timeout: Duration::from_secs(1),
            success_threshold: success,
            failure_threshold: failure,
        }
    }

    fn fail() -> Outcome {
        Outcome::Failure("x".into())
    }

    #[test]
    fn defaults_are_the_apis() {
        let t = Timing::of(&Probe::default());
        assert_eq!(t, timing(0, 10, 1, 3));
        let p = Probe { period_seconds: Some(0), timeout_seconds: Some(0), ..Default::default() };
        assert_eq!(Timing::of(&p).period, Duration::from_secs(1));
        assert_eq!(Timing::of(&p).timeout, Duration::from_secs(1));
    }

    #[test]
    fn a_new_instance_starts_from_the_initial_value_after_the_initial_delay() {
        let t0 = Instant::now();
        let mut s = ProbeState::new(Kind::Readiness, timing(5, 10, 1, 3), t0);
        assert_eq!(s.cached(), Cached::Failure, "not ready before the first success");
        s.observe(Some("c1"), true, Duration::from_secs(2), t0);
        assert!(!s.due(t0, true, true));
        assert!(!s.due(t0 + Duration::from_millis(2900), true, true));
        assert!(s.due(t0 + Duration::from_secs(3), true, true), "5 s after the container started");
        s.started_probe(t0 + Duration::from_secs(3));
        assert_eq!(s.record("c1", &Outcome::Success).changed, Some(Cached::Success));
        assert!(!s.due(t0 + Duration::from_secs(12), true, true));
        assert!(s.due(t0 + Duration::from_secs(13), true, true), "then every period");
        // a restart: back to not ready, the delay counts again
        s.observe(Some("c2"), true, Duration::ZERO, t0 + Duration::from_secs(20));
        assert_eq!(s.cached(), Cached::Failure);
        assert!(!s.due(t0 + Duration::from_secs(24), true, true));
    }

    #[test]
    fn thresholds_count_consecutive_results_and_errors_count_for_neither() {
        let t0 = Instant::now();
        let mut s = ProbeState::new(Kind::Readiness, timing(0, 1, 2, 3), t0);
        s.observe(Some("c"), true, Duration::ZERO, t0);
        assert_eq!(s.record("c", &Outcome::Success).changed, None, "one success of two");
        assert_eq!(s.record("c", &Outcome::Error("port".into())).changed, None);
        assert_eq!(s.record("c", &Outcome::Success).changed, Some(Cached::Success), "the error broke nothing");
        assert_eq!(s.record("c", &fail()).changed, None);
        assert_eq!(s.record("c", &fail()).changed, None);
        assert_eq!(s.record("c", &Outcome::Success).changed, None, "a success resets the failure run");
        assert_eq!(s.record("c", &fail()).changed, None);
        assert_eq!(s.record("c", &fail()).changed, None);
        assert_eq!(s.record("c", &fail()).changed, Some(Cached::Failure));
        assert_eq!(s.record("c", &fail()).changed, None, "no change, no update");
        assert_eq!(s.record("old", &Outcome::Success).changed, None, "an older instance's result is dropped");
        assert_eq!(s.record("c", &Outcome::Warning("redirect".into())).changed, None);
        assert_eq!(s.record("c", &Outcome::Warning("redirect".into())).changed, Some(Cached::Success));
    }

    #[test]
    fn a_liveness_failure_holds_the_probe_until_the_next_instance() {
        let t0 = Instant::now();
        let mut s = ProbeState::new(Kind::Liveness, timing(0, 1, 1, 1), t0);
        s.observe(Some("c"), true, Duration::ZERO, t0);
        assert_eq!(s.cached(), Cached::Success, "alive until proven otherwise");
        assert_eq!(s.record("c", &fail()).changed, Some(Cached::Failure));
        assert!(s.on_hold());
        assert!(!s.due(t0 + Duration::from_secs(5), true, true));
        assert_eq!(s.record("c", &Outcome::Success).changed, None);
        s.observe(Some("c2"), true, Duration::ZERO, t0 + Duration::from_secs(6));
        assert!(!s.on_hold());
        assert_eq!(s.cached(), Cached::Success);
        assert!(s.due(t0 + Duration::from_secs(6), true, true));
    }

    #[test]
    fn liveness_and_readiness_wait_for_startup_which_stops_once_decided() {
        let t0 = Instant::now();
        let mut startup = ProbeState::new(Kind::Startup, timing(0, 1, 1, 3), t0);
        let mut live = ProbeState::new(Kind::Liveness, timing(0, 1, 1, 3), t0);
        startup.observe(Some("c"), true, Duration::ZERO, t0);
        live.observe(Some("c"), true, Duration::ZERO, t0);
        assert_eq!(startup.cached(), Cached::Unknown);
        let started = startup.cached() == Cached::Success;
        assert!(!live.due(t0, true, started));
        assert!(startup.due(t0, true, started));
        assert_eq!(startup.record("c", &Outcome::Success).changed, Some(Cached::Success));
        assert!(startup.on_hold(), "a startup probe stops once it passed");
        assert!(!startup.due(t0 + Duration::from_secs(9), true, true));
        assert!(live.due(t0, true, true));
    }

    #[test]
    fn a_stopped_container_is_a_failure_and_is_not_probed() {
        let t0 = Instant::now();
        let mut s = ProbeState::new(Kind::Readiness, timing(0, 1, 1, 1), t0);
        s.observe(Some("c"), true, Duration::ZERO, t0);
        s.record("c", &Outcome::Success);
        assert!(s.observe(Some("c"), false, Duration::ZERO, t0), "ready -> not ready");
        assert_eq!(s.cached(), Cached::Failure);
        assert!(!s.due(t0 + Duration::from_secs(9), false, true));
    }

    #[test]
    fn a_trigger_waits_for_the_initial_delay() {
        let t0 = Instant::now();
        let mut s = ProbeState::new(Kind::Readiness, timing(2, 10, 1, 1), t0);
        // started 0.5 s ago: the first probe 1.5 s from now, triggered or not
        s.observe(Some("c"), true, Duration::from_millis(500), t0);
        s.trigger(t0);
        assert!(!s.due(t0, true, true));
        assert!(!s.due(t0 + Duration::from_millis(1400), true, true));
        assert!(s.due(t0 + Duration::from_millis(1500), true, true));
        // a trigger after the delay runs the probe at once
        s.started_probe(t0 + Duration::from_millis(1500));
        s.record("c", &fail());
        s.trigger(t0 + Duration::from_secs(3));
        assert!(s.due(t0 + Duration::from_secs(3), true, true));
    }

    #[test]
    fn a_trigger_runs_the_next_probe_now() {
        let t0 = Instant::now();
        let mut s = ProbeState::new(Kind::Readiness, timing(0, 10, 1, 1), t0);
        s.observe(Some("c"), true, Duration::ZERO, t0);
        s.started_probe(t0);
        s.record("c", &fail());
        assert!(!s.due(t0 + Duration::from_secs(1), true, true));
        s.trigger(t0 + Duration::from_secs(1));
        assert!(s.due(t0 + Duration::from_secs(1), true, true));
    }
}

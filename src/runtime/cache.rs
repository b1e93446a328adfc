//! The relist's view of each pod, shared with the sync phases: which
//! sandboxes and containers a pod has and their states, and when the list
//! that saw them began. A sync that read a pod's status before that list,
//! and finds the list saw the same sandboxes and containers, may reuse its
//! read: nothing a sync acts on changed in between (any change there moves
//! an ID or a state, and the relist wakes the pod's worker for it). The
//! kubelet's pod cache, fed by its PLEG, serves the same end: a steady-state
//! resync of an idle pod costs no runtime call.

use std::collections::HashMap;
use std::time::Instant;

use parking_lot::Mutex;

use super::{ContainerState, RuntimePod};
use crate::model::Uid;

/// A pod's sandboxes (ID, ready) and containers (ID, state).
#[derive(Debug, Clone, Default)]
struct Fingerprint {
    sandboxes: Vec<(String, bool)>,
    containers: Vec<(String, ContainerState)>,
}

impl Fingerprint {
    fn of(rp: &RuntimePod) -> Self {
        Fingerprint {
            sandboxes: rp.sandboxes.iter().map(|s| (s.id.clone(), s.ready)).collect(),
            containers: rp.containers.iter().map(|c| (c.id.clone(), c.state)).collect(),
        }
    }

    /// Does `rp` show exactly these sandboxes and containers? (No copies.)
    fn matches(&self, rp: &RuntimePod) -> bool {
        self.sandboxes.len() == rp.sandboxes.len()
            && self.containers.len() == rp.containers.len()
            && rp.sandboxes.iter().all(|s| self.sandboxes.iter().any(|(id, r)| *id == s.id && *r == s.ready))
            && rp.containers.iter().all(|c| self.containers.iter().any(|(id, st)| *id == c.id && *st == c.state))
    }
}

#[derive(Default, Debug)]
struct Seen {
    /// When the newest list began; `None` before the first.
    listed_at: Option<Instant>,
    /// Pods with anything in the runtime in that list.
    pods: HashMap<Uid, Fingerprint>,
}

/// A relist's list younger than this stands for a new one (stats, the log
/// monitor): the relist runs every second.
pub const FRESH: std::time::Duration = std::time::Duration::from_millis(1500);

/// The relist's period while the runtime's event stream is open (each
/// event asks for a relist at once): a safety net for what no event tells
/// (a container created but not started by someone else), and the
/// runtime's health (`/healthz` wants an answer within its window plus
/// this while the stream is open). The kubelet's evented PLEG relists
/// every 300 s, and its PLEG is unhealthy after 3 minutes without one.
pub const EVENTED_RELIST: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Default, Debug)]
pub struct PodCache {
    seen: Mutex<Seen>,
    /// The newest full list itself and when it began (stats reuse it
    /// rather than list again).
    last: Mutex<Option<(Instant, std::sync::Arc<Vec<RuntimePod>>)>>,
    /// The runtime's event stream: while it is open and quiet, the newest
    /// list stays current for up to [`EVENTED_RELIST`] plus [`FRESH`].
    events: std::sync::OnceLock<std::sync::Arc<super::events::StreamState>>,
}

impl PodCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Record a full runtime list begun at `listed_at`. Returns the UIDs
    /// whose sandboxes or containers changed since the previous list. A pod
    /// new to the list counts as changed (as the kubelet's PLEG sees a
    /// container it never saw): its worker made it, but what it made may
    /// have moved on before any list saw it (an init container that exits
    /// at once), and only this wake tells the worker. The first list
    /// reports nothing: there is nothing to compare with.
    pub fn update(&self, listed_at: Instant, pods: &[RuntimePod]) -> Vec<Uid> {
        let mut fresh = HashMap::with_capacity(pods.len());
        let mut changed = Vec::new();
        let mut seen = self.seen.lock();
        let first = seen.listed_at.is_none();
        for rp in pods {
            let moved = match seen.pods.get(&rp.uid) {
                Some(old) => !old.matches(rp),
                None => !first,
            };
            if moved {
                changed.push(rp.uid.clone());
            }
            fresh.insert(rp.uid.clone(), Fingerprint::of(rp));
        }
        // a list that began before the one recorded (two listers racing)
        // must not replace it
        if seen.listed_at.is_none_or(|t| t <= listed_at) {
            *seen = Seen { listed_at: Some(listed_at), pods: fresh };
        }
        changed
    }

    /// Keep `pods`, a full list begun at `listed_at`, for [`PodCache::recent`]
    /// (a list older than the kept one is dropped).
    pub fn keep(&self, listed_at: Instant, pods: impl Into<std::sync::Arc<Vec<RuntimePod>>>) {
        let mut last = self.last.lock();
        if last.as_ref().is_none_or(|(t, _)| *t <= listed_at) {
            *last = Some((listed_at, pods.into()));
        }
    }

    /// Let the runtime's event stream vouch for the lists (see
    /// [`PodCache::recent`]).
    pub fn follow_events(&self, state: std::sync::Arc<super::events::StreamState>) {
        let _ = self.events.set(state);
    }

    /// The runtime's event stream is open.
    pub fn events_open(&self) -> bool {
        self.events.get().is_some_and(|e| e.open_source().is_some())
    }

    /// The event stream is open and told of no change since `t`.
    pub fn quiet_since(&self, t: Instant) -> bool {
        self.events.get().is_some_and(|e| e.quiet_since(t))
    }

    /// The newest full list if it began less than `max_age` ago, or if the
    /// runtime's event stream has been open and quiet since it began (and
    /// it is younger than [`EVENTED_RELIST`] plus [`FRESH`]): then nothing
    /// in it changed.
    pub fn recent(&self, max_age: std::time::Duration) -> Option<std::sync::Arc<Vec<RuntimePod>>> {
        self.recent_with_time(max_age).map(|(_, p)| p)
    }

    /// [`PodCache::recent`] with when the list began.
    pub fn recent_with_time(&self, max_age: std::time::Duration) -> Option<(Instant, std::sync::Arc<Vec<RuntimePod>>)> {
        let last = self.last.lock().clone()?;
        let age = last.0.elapsed();
        (age < max_age || (age < EVENTED_RELIST + FRESH && self.quiet_since(last.0))).then_some(last)
    }

    /// True when a list begun after `read_at` saw the pod with exactly the
    /// sandboxes and containers of `rp`, read at `read_at`.
    pub fn unchanged_since(&self, uid: &str, read_at: Instant, rp: &RuntimePod) -> bool {
        let seen = self.seen.lock();
        if seen.listed_at.is_none_or(|t| t <= read_at) {
            return false;
        }
        match seen.pods.get(uid) {
            Some(fp) => fp.matches(rp),
            None => rp.sandboxes.is_empty() && rp.containers.is_empty(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{ContainerInfo, SandboxInfo};

    #[test]
    fn an_open_quiet_event_stream_keeps_a_list_current_until_an_event() {
        use std::time::Duration;
        let cache = PodCache::new();
        let stream = std::sync::Arc::new(crate::runtime::events::StreamState::default());
        cache.follow_events(stream.clone());
        let now = Instant::now();
        cache.keep(now - Duration::from_secs(3), vec![pod("a", true, &[])]);
        assert!(cache.recent(FRESH).is_none(), "3 s old and no stream: stale");
        assert!(!cache.events_open());
        // opened before the list began, quiet since: the list stands
        stream.open_since(now - Duration::from_secs(5));
        assert!(cache.events_open());
        assert_eq!(cache.recent(FRESH).map(|l| l.len()), Some(1));
        assert!(cache.recent_with_time(Duration::ZERO).is_some());
        // an event since: stale again until a new list, and a list begun
        // less than SETTLE after the event (the CRI's view may not show it
        // yet) is not vouched for
        stream.event_now();
        assert!(cache.recent(FRESH).is_none());
        cache.keep(Instant::now(), vec![]);
        assert!(cache.recent(Duration::ZERO).is_none(), "a list just after an event");
        assert_eq!(cache.recent(FRESH).map(|l| l.len()), Some(0), "still fresh by age");
        // opened after the list began (events may have been missed): stale
        let cache = PodCache::new();
        let stream = std::sync::Arc::new(crate::runtime::events::StreamState::default());
        cache.follow_events(stream.clone());
        cache.keep(now - Duration::from_secs(3), vec![]);
        stream.open_since(now - Duration::from_secs(1));
        assert!(cache.recent(FRESH).is_none());
        // and a list older than EVENTED_RELIST + FRESH is never current
        let cache = PodCache::new();
        let stream = std::sync::Arc::new(crate::runtime::events::StreamState::default());
        cache.follow_events(stream.clone());
        stream.open_since(now - EVENTED_RELIST - FRESH - Duration::from_secs(5));
        cache.keep(now - EVENTED_RELIST - FRESH - Duration::from_secs(1), vec![]);
        assert!(cache.recent(FRESH).is_none());
    }

    fn pod(uid: &str, sandbox_ready: bool, containers: &[(&str, ContainerState)]) -> RuntimePod {
        RuntimePod {
            uid: uid.into(),
            sandboxes: vec![SandboxInfo {
                id: format!("sb-{uid}"),
                uid: uid.into(),
                name: "p".into(),
                namespace: "ns".into(),
                attempt: 0,
                ready: sandbox_ready,
                created_at_ns: 1,
                ip: None,
            }],
            containers: containers
                .iter()
                .map(|(id, state)| ContainerInfo {
                    id: id.to_string(),
                    sandbox_id: format!("sb-{uid}"),
                    name: "c".into(),
                    attempt: 0,
                    image: "i".into(),
                    image_ref: "r".into(),
                    state: *state,
                    created_at_ns: 1,
                    started_at_ns: 1,
                    finished_at_ns: 0,
                    exit_code: 0,
                    reason: String::new(),
                    message: String::new(),
                    grace: None,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_newest_list_is_kept_for_reuse_while_fresh() {
        let c = PodCache::new();
        assert!(c.recent(std::time::Duration::from_secs(1)).is_none());
        let t0 = Instant::now();
        c.keep(t0, vec![pod("a", true, &[])]);
        c.keep(t0 - std::time::Duration::from_millis(10), vec![]);
        let got = c.recent(std::time::Duration::from_secs(60)).unwrap();
        assert_eq!(got.len(), 1, "an older list does not replace a newer one");
        assert!(c.recent(std::time::Duration::ZERO).is_none(), "too old");
    }

    #[test]
    fn a_read_is_reusable_only_after_a_later_list_saw_the_same_pod() {
        use ContainerState::*;
        let cache = PodCache::new();
        let a = pod("a", true, &[("c1", Running)]);
        let read_at = Instant::now();
        assert!(!cache.unchanged_since("a", read_at, &a), "no list yet");
        let before = read_at - std::time::Duration::from_millis(10);
        assert!(cache.update(before, std::slice::from_ref(&a)).is_empty());
        assert!(!cache.unchanged_since("a", read_at, &a), "that list began before the read");
        let after = Instant::now() + std::time::Duration::from_millis(1);
        assert!(cache.update(after, std::slice::from_ref(&a)).is_empty());
        assert!(cache.unchanged_since("a", read_at, &a));
        // an exit, a new container, a dead sandbox: each is a change
        for other in [
            pod("a", true, &[("c1", Exited)]),
            pod("a", true, &[("c1", Running), ("c2", Created)]),
            pod("a", false, &[("c1", Running)]),
        ] {
            assert!(!cache.unchanged_since("a", read_at, &other), "{other:?}");
        }
        // a pod the list did not see is unchanged only if the read was empty
        assert!(!cache.unchanged_since("b", read_at, &pod("b", true, &[])));
        assert!(cache.unchanged_since("b", read_at, &RuntimePod { uid: "b".into(), ..Default::default() }));
    }

    #[test]
    fn update_reports_changed_pods_and_ignores_an_older_list() {
        use ContainerState::*;
        let cache = PodCache::new();
        let t0 = Instant::now();
        let t1 = t0 + std::time::Duration::from_millis(5);
        assert!(
            cache.update(t1, &[pod("a", true, &[("c1", Running)]), pod("b", true, &[])]).is_empty(),
            "the first list has nothing to compare with"
        );
        let changed = cache.update(t1, &[pod("a", true, &[("c1", Exited)]), pod("b", true, &[]), pod("n", true, &[])]);
        assert_eq!(
            changed,
            vec!["a".to_string(), "n".to_string()],
            "a changed, n is new (its first container may be done)"
        );
        // an older list is compared but not recorded
        let stale = pod("a", true, &[("c1", Running)]);
        assert_eq!(cache.update(t0, std::slice::from_ref(&stale)), vec!["a".to_string()]);
        let read_at = t0;
        assert!(cache.unchanged_since("a", read_at, &pod("a", true, &[("c1", Exited)])));
    }
}

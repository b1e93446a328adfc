//! Container exits as the runtime's event stream tells them, for what
//! waits on a termination's containers (a node shutdown's priority group,
//! and so the inhibitor lock): the process's end is known the moment the
//! shim reports it, while `StopContainer` returns only after the runtime's
//! clean-up of the container (its task deleted, its rootfs unmounted: 0.5
//! to 1 s a container under emulation). The stop calls go on in the
//! worker; only the wait ends sooner.

use std::collections::VecDeque;
use std::sync::Arc;

use super::{Inner, PodWorkers, State, SyncCtx};

/// What a termination pass tells of its containers.
pub enum StopNote<'a> {
    /// It stops these (their exits, as the runtime's events tell them,
    /// end the wait for them as well as the stops' return).
    Stopping(&'a [String]),
    /// Every container has stopped.
    Stopped,
}

/// Where a pass's [`StopNote`]s go.
pub(super) type OnStop = Arc<dyn Fn(StopNote<'_>) + Send + Sync>;

impl SyncCtx {
    /// The pass is about to stop the containers `ids`.
    pub fn containers_stopping(&self, ids: &[String]) {
        if let Some(f) = &self.on_stop {
            f(StopNote::Stopping(ids));
        }
    }
}

impl PodWorkers {
    /// The runtime told that container `id` exited (its event stream, the
    /// `runtime-events` thread): the end of the wait for a termination
    /// that stops it. Does not block on a pod.
    pub fn container_exited(&self, id: &str) {
        self.inner.container_exited(id);
    }

    /// What the pod workers take from a runtime event: an exit (an OOM
    /// event may be a child's kill: only the exit tells).
    pub fn runtime_event(&self, e: &crate::runtime::events::ContainerEvent) {
        if e.kind == crate::runtime::events::Kind::Exited {
            self.container_exited(&e.container_id);
        }
    }
}

impl Inner {
    /// A termination pass of `uid` stops `ids`.
    pub(super) fn containers_stopping(&self, uid: &str, ids: &[String]) {
        let mut st = self.state.lock();
        let State { pods, exits, .. } = &mut *st;
        if let Some(entry) = pods.get_mut(uid)
            && entry.awaited_exits.start(ids, exits)
        {
            entry.containers_stopped = true;
            drop(st);
            self.changed.notify_all();
        }
    }

    /// The runtime told that container `id` exited.
    fn container_exited(&self, id: &str) {
        let mut st = self.state.lock();
        st.exits.push(id);
        let mut ended = false;
        for e in st.pods.values_mut() {
            if e.awaited_exits.exited(id) {
                e.containers_stopped = true;
                ended = true;
            }
        }
        drop(st);
        if ended {
            self.changed.notify_all();
        }
    }
}

/// How many exits are remembered for a termination that names its
/// containers after their exit came (a container that ended on its own
/// between the pass's runtime list and its stop calls).
const RECENT: usize = 256;

/// The exits seen lately, oldest first.
#[derive(Default)]
pub(super) struct RecentExits {
    ids: VecDeque<String>,
}

impl RecentExits {
    pub(super) fn push(&mut self, id: &str) {
        if self.ids.len() == RECENT {
            self.ids.pop_front();
        }
        self.ids.push_back(id.to_string());
    }

    pub(super) fn contains(&self, id: &str) -> bool {
        self.ids.iter().any(|i| i == id)
    }
}

/// A termination's containers whose exit is still to come: `Some` once
/// the pass has named them, emptied as their exits are told.
#[derive(Default)]
pub(super) struct Awaited {
    ids: Option<Vec<String>>,
}

impl Awaited {
    /// The pass stops `ids`; those in `recent` have exited already.
    /// Returns whether every one has.
    pub(super) fn start(&mut self, ids: &[String], recent: &RecentExits) -> bool {
        let left: Vec<String> = ids.iter().filter(|id| !recent.contains(id)).cloned().collect();
        let all = left.is_empty();
        self.ids = (!all).then_some(left);
        all
    }

    /// `id` exited. Returns whether that was the last one awaited.
    pub(super) fn exited(&mut self, id: &str) -> bool {
        let Some(ids) = &mut self.ids else { return false };
        let before = ids.len();
        ids.retain(|i| i != id);
        if ids.len() == before || !ids.is_empty() {
            return false;
        }
        self.ids = None;
        true
    }

    pub(super) fn clear(&mut self) {
        self.ids = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_last_awaited_exit_ends_the_wait_once() {
        let recent = RecentExits::default();
        let mut a = Awaited::default();
        assert!(!a.start(&ids(&["c1", "c2"]), &recent));
        assert!(!a.exited("other"), "an exit of another container");
        assert!(!a.exited("c1"));
        assert!(!a.exited("c1"), "told twice");
        assert!(a.exited("c2"));
        assert!(!a.exited("c2"), "nothing awaited any more");
    }

    #[test]
    fn exits_told_before_the_pass_named_its_containers_count() {
        let mut recent = RecentExits::default();
        recent.push("c1");
        let mut a = Awaited::default();
        assert!(!a.start(&ids(&["c1", "c2"]), &recent));
        assert!(a.exited("c2"));
        recent.push("c3");
        assert!(a.start(&ids(&["c3"]), &recent), "all exited already");
        assert!(Awaited::default().start(&[], &recent), "no container to stop");
    }

    #[test]
    fn recent_exits_are_bounded() {
        let mut recent = RecentExits::default();
        for i in 0..RECENT + 10 {
            recent.push(&format!("c{i}"));
        }
        assert!(!recent.contains("c0"));
        assert!(recent.contains(&format!("c{}", RECENT + 9)));
        assert_eq!(recent.ids.len(), RECENT);
    }

    #[test]
    fn a_new_pass_replaces_what_an_earlier_one_awaited() {
        let recent = RecentExits::default();
        let mut a = Awaited::default();
        a.start(&ids(&["c1", "c2"]), &recent);
        a.start(&ids(&["c2"]), &recent);
        assert!(a.exited("c2"));
        a.start(&ids(&["c4"]), &recent);
        a.clear();
        assert!(!a.exited("c4"));
    }
}

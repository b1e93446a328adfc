//! Container exits as the runtime's event stream tells them, for what
//! waits on a termination's containers (a node shutdown's priority group,
//! and so the inhibitor lock): the process's end is known the moment the
//! shim reports it, while `StopContainer` returns only after the runtime's
//! clean-up of the container (its task deleted, its rootfs unmounted: 0.5
//! to 1 s a container under emulation). The stop calls go on in the
//! worker; only the wait ends sooner.

use std::collections::VecDeque;

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

//! The statuses of exited containers, read once.
//!
//! An exited container's `ContainerStatus` never changes again (its exit
//! code, times, reason and message are final), yet each pod status read
//! asked for it again: a pod with a chain of init containers paid one call
//! per exited container on every pass. The CRI client keeps what it read
//! of an exited container and reuses it while `ListContainers` still says
//! EXITED; an entry goes when the container is removed, and the whole
//! cache when it would pass [`MAX`] entries.
//!
//! Only a status read [`SETTLED_NS`] (2 s) after the exit is kept: containerd sets
//! the reason `OOMKilled` when it handles the task's OOM event, which may
//! come after the exit's (a read in between says `Error`), and what the
//! events told of an OOM is kept with it; an OOM event later still (a
//! loaded containerd) forgets the entry.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::runtime::{ContainerInfo, ContainerState};

/// Exited containers remembered at most.
const MAX: usize = 4096;
/// How long after its exit a container's status is final.
const SETTLED_NS: i64 = 2_000_000_000;

/// The final part of an exited container's status.
#[derive(Debug, Clone, PartialEq)]
struct Final {
    started_at_ns: i64,
    finished_at_ns: i64,
    exit_code: i32,
    reason: String,
    message: String,
    image_ref: String,
}

#[derive(Default)]
pub struct Finished {
    by_id: Mutex<HashMap<String, Final>>,
}

impl Finished {
    /// Fill `c` (which the list shows EXITED) from what was read of it
    /// before; false if nothing was.
    pub fn fill(&self, c: &mut ContainerInfo) -> bool {
        if c.state != ContainerState::Exited {
            return false;
        }
        let m = self.by_id.lock();
        let Some(f) = m.get(&c.id) else { return false };
        c.started_at_ns = f.started_at_ns;
        c.finished_at_ns = f.finished_at_ns;
        c.exit_code = f.exit_code;
        c.reason.clone_from(&f.reason);
        c.message.clone_from(&f.message);
        if !f.image_ref.is_empty() {
            c.image_ref.clone_from(&f.image_ref);
        }
        true
    }

    /// Keep `c`'s status, read at `now_ns` (Unix nanoseconds), if it is
    /// final: exited, and not just now.
    pub fn keep(&self, c: &ContainerInfo, now_ns: i64) {
        if c.state != ContainerState::Exited || c.finished_at_ns <= 0 || now_ns - c.finished_at_ns < SETTLED_NS {
            return;
        }
        let mut m = self.by_id.lock();
        if m.len() >= MAX && !m.contains_key(&c.id) {
            m.clear();
        }
        m.insert(
            c.id.clone(),
            Final {
                started_at_ns: c.started_at_ns,
                finished_at_ns: c.finished_at_ns,
                exit_code: c.exit_code,
                reason: c.reason.clone(),
                message: c.message.clone(),
                image_ref: c.image_ref.clone(),
            },
        );
    }

    /// The container was removed.
    pub fn forget(&self, id: &str) {
        self.by_id.lock().remove(id);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_id.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 100_000_000_000;

    fn exited(id: &str, code: i32) -> ContainerInfo {
        ContainerInfo {
            id: id.into(),
            state: ContainerState::Exited,
            started_at_ns: 10,
            finished_at_ns: 20,
            exit_code: code,
            reason: "Error".into(),
            message: "boom".into(),
            image_ref: "sha256:1".into(),
            ..Default::default()
        }
    }

    #[test]
    fn an_exited_containers_status_is_reused_and_nothing_else_is() {
        let f = Finished::default();
        let mut running = ContainerInfo { id: "r".into(), state: ContainerState::Running, ..Default::default() };
        f.keep(&running, NOW);
        assert!(!f.fill(&mut running), "a running container's status is never kept");
        let mut just = exited("j", 137);
        just.finished_at_ns = NOW - 100_000_000;
        f.keep(&just, NOW);
        assert!(!f.fill(&mut just.clone()), "read 100 ms after the exit: its reason may still change");
        f.keep(&exited("a", 3), NOW);
        let mut listed = ContainerInfo { id: "a".into(), state: ContainerState::Exited, ..Default::default() };
        assert!(f.fill(&mut listed));
        assert_eq!(listed, exited("a", 3));
        // the list says it runs (a container ID is never reused, but the
        // list is what counts): not filled
        let mut again = ContainerInfo { id: "a".into(), state: ContainerState::Running, ..Default::default() };
        assert!(!f.fill(&mut again));
        f.forget("a");
        assert!(!f.fill(&mut listed.clone()));
    }

    #[test]
    fn the_cache_is_bounded() {
        let f = Finished::default();
        for i in 0..MAX + 10 {
            f.keep(&exited(&i.to_string(), 0), NOW);
        }
        assert!(f.len() <= MAX);
        assert!(f.len() > 0);
    }
}

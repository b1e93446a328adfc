//! Exits told by containerd's task events before its CRI shows them.
//!
//! containerd 1.6 publishes a task's `/tasks/exit` event first and updates
//! the CRI's view of the container only after it has deleted the task
//! (the shim's clean-up): 20 to 80 ms here, during which `ListContainers`
//! and `ContainerStatus` still say RUNNING. The exit event is the
//! runtime's own word (exit status and time of the container's init
//! process), so the CRI client shows a container it has seen exit as
//! EXITED from then on, as the CRI will a moment later, with the reason
//! the CRI gives (`Completed`, `Error`, `OOMKilled` after an OOM event).
//! An entry goes once the CRI itself shows the container exited or no
//! longer lists it, or after [`KEEP`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::runtime::events::{ContainerEvent, Exit, Kind};
use crate::runtime::{ContainerInfo, ContainerState, RuntimePod};

/// Exits kept at most (beyond, the oldest goes: the CRI catches up anyway).
const MAX: usize = 4096;
/// How long an exit the CRI never confirms is kept.
const KEEP: Duration = Duration::from_secs(60);

/// What the events told of one container: its exit (once told), an OOM
/// seen, when first noted.
type Told = (Option<Exit>, bool, Instant);

#[derive(Default)]
pub struct Exits {
    by_id: Mutex<HashMap<String, Told>>,
}

impl Exits {
    /// Remember what `e` tells of a container's end.
    pub fn note(&self, e: &ContainerEvent) {
        let mut m = self.by_id.lock();
        match (e.kind, e.exit) {
            (Kind::Exited, Some(exit)) => {
                let entry = m.entry(e.container_id.clone()).or_insert((None, false, Instant::now()));
                entry.0 = Some(exit);
            }
            (Kind::Oom, _) => m.entry(e.container_id.clone()).or_insert((None, false, Instant::now())).1 = true,
            _ => return,
        }
        if m.len() > MAX {
            m.retain(|_, (_, _, at)| at.elapsed() < KEEP);
            while m.len() > MAX {
                let Some(oldest) = m.iter().min_by_key(|(_, (_, _, at))| *at).map(|(id, _)| id.clone()) else { break };
                m.remove(&oldest);
            }
        }
    }

    /// Show the exits the CRI does not show yet in `c`; forget those it
    /// shows.
    pub fn apply_one(&self, c: &mut ContainerInfo) {
        let mut m = self.by_id.lock();
        if m.is_empty() {
            return;
        }
        Self::apply_locked(&mut m, c);
    }

    /// An exited container (as the CRI shows it) that an OOM event was
    /// told for says `OOMKilled` whatever the CRI's reason; nothing is
    /// forgotten (that is [`Self::apply_one`]'s, after the whole read).
    pub fn told_oom(&self, c: &mut ContainerInfo) {
        if c.state == ContainerState::Exited
            && let Some(told) = self.by_id.lock().get(&c.id)
        {
            Self::oom_over(told, c);
        }
    }

    /// The told OOM over an exited container's reason the CRI does not
    /// agree with yet; true if it was put over.
    fn oom_over((_, oom, _): &Told, c: &mut ContainerInfo) -> bool {
        if *oom && c.reason != "OOMKilled" {
            c.reason = "OOMKilled".to_string();
            return true;
        }
        false
    }

    /// [`Self::apply_one`] for every container of `pods`; with `whole`
    /// (a list of every pod) the exits of containers it does not hold
    /// are forgotten too.
    pub fn apply(&self, pods: &mut [RuntimePod], whole: bool) {
        let mut m = self.by_id.lock();
        if m.is_empty() {
            return;
        }
        for c in pods.iter_mut().flat_map(|p| p.containers.iter_mut()) {
            Self::apply_locked(&mut m, c);
        }
        if whole {
            let listed: std::collections::HashSet<&str> =
                pods.iter().flat_map(|p| &p.containers).map(|c| c.id.as_str()).collect();
            m.retain(|id, _| listed.contains(id.as_str()));
        }
        m.retain(|_, (_, _, at)| at.elapsed() < KEEP);
    }

    fn apply_locked(m: &mut HashMap<String, Told>, c: &mut ContainerInfo) {
        let Some(told) = m.get(&c.id) else { return };
        if c.state == ContainerState::Exited {
            // containerd sets `OOMKilled` when its CRI plugin handles the
            // OOM event, which under load comes well after the exit's
            // (a container whose killed child left it to exit 0 reads
            // `Completed` meanwhile): the event's word holds until the CRI
            // agrees
            if !Self::oom_over(told, c) {
                m.remove(&c.id);
            }
            return;
        }
        let (exit, oom, _) = told;
        let Some(exit) = *exit else { return };
        if c.state != ContainerState::Running && c.state != ContainerState::Unknown {
            return;
        }
        c.state = ContainerState::Exited;
        c.exit_code = exit.code;
        c.finished_at_ns = exit.at_ns;
        c.reason = if *oom {
            "OOMKilled"
        } else if exit.code == 0 {
            "Completed"
        } else {
            "Error"
        }
        .to_string();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_id.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(id: &str, state: ContainerState) -> ContainerInfo {
        ContainerInfo { id: id.into(), state, ..Default::default() }
    }

    fn exited(id: &str, code: i32) -> ContainerEvent {
        ContainerEvent { container_id: id.into(), kind: Kind::Exited, exit: Some(Exit { code, at_ns: 7 }) }
    }

    #[test]
    fn a_told_exit_shows_until_the_cri_shows_it_then_is_forgotten() {
        let x = Exits::default();
        x.note(&exited("a", 0));
        x.note(&exited("b", 3));
        x.note(&ContainerEvent { container_id: "c".into(), kind: Kind::Oom, exit: None });
        x.note(&exited("c", 137));
        // a start event tells no exit
        x.note(&ContainerEvent { container_id: "d".into(), kind: Kind::Started, exit: None });
        let mut pod = RuntimePod {
            containers: vec![
                container("a", ContainerState::Running),
                container("b", ContainerState::Running),
                container("c", ContainerState::Running),
                container("d", ContainerState::Running),
            ],
            ..Default::default()
        };
        x.apply(std::slice::from_mut(&mut pod), false);
        let shown: Vec<_> =
            pod.containers.iter().map(|c| (c.state, c.exit_code, c.finished_at_ns, c.reason.as_str())).collect();
        assert_eq!(
            shown,
            [
                (ContainerState::Exited, 0, 7, "Completed"),
                (ContainerState::Exited, 3, 7, "Error"),
                (ContainerState::Exited, 137, 7, "OOMKilled"),
                (ContainerState::Running, 0, 0, "")
            ]
        );
        assert_eq!(x.len(), 3);
        // the CRI shows a's exit: forgotten; a whole list without b forgets b
        let mut a = container("a", ContainerState::Exited);
        x.apply_one(&mut a);
        assert_eq!(x.len(), 2);
        let mut list =
            vec![RuntimePod { containers: vec![container("c", ContainerState::Running)], ..Default::default() }];
        x.apply(&mut list, true);
        assert_eq!(list[0].containers[0].state, ContainerState::Exited);
        assert_eq!(x.len(), 1);
    }

    /// Seen beside the real kubelet (tests/peer/oomkilled.yaml): a child
    /// OOM-killed, the container exiting 0, and containerd's CRI reading
    /// `Completed` until it handled the OOM event, seconds later under load.
    #[test]
    fn a_told_oom_holds_over_the_cri_until_the_cri_says_so_too() {
        let x = Exits::default();
        x.note(&ContainerEvent { container_id: "a".into(), kind: Kind::Oom, exit: None });
        x.note(&exited("a", 0));
        let mut a = ContainerInfo { reason: "Completed".into(), ..container("a", ContainerState::Exited) };
        x.apply_one(&mut a);
        assert_eq!(a.reason, "OOMKilled");
        assert_eq!(x.len(), 1, "kept until the CRI agrees");
        let mut a = ContainerInfo { reason: "OOMKilled".into(), ..container("a", ContainerState::Exited) };
        x.apply_one(&mut a);
        assert_eq!((a.reason.as_str(), x.len()), ("OOMKilled", 0));
        // an exit without an OOM is the CRI's to tell once it shows it
        x.note(&exited("b", 0));
        let mut b = ContainerInfo { reason: "Completed".into(), ..container("b", ContainerState::Exited) };
        x.apply_one(&mut b);
        assert_eq!((b.reason.as_str(), x.len()), ("Completed", 0));
    }

    /// The CRI still says RUNNING for a while after the exit event: every
    /// read in that time shows the exit (reading it must not forget it).
    #[test]
    fn an_exit_the_cri_does_not_show_yet_holds_over_every_read() {
        let x = Exits::default();
        x.note(&exited("a", 0));
        for _ in 0..3 {
            let mut a = container("a", ContainerState::Running);
            x.told_oom(&mut a);
            x.apply_one(&mut a);
            assert_eq!(a.state, ContainerState::Exited);
        }
        let mut a = ContainerInfo { reason: "Completed".into(), ..container("a", ContainerState::Exited) };
        x.told_oom(&mut a);
        assert_eq!(a.reason, "Completed", "no OOM was told");
        x.apply_one(&mut a);
        assert_eq!(x.len(), 0, "the CRI shows it now: forgotten");
    }

    #[test]
    fn a_container_not_yet_started_is_left_as_the_cri_shows_it() {
        let x = Exits::default();
        x.note(&exited("a", 1));
        let mut c = container("a", ContainerState::Created);
        x.apply_one(&mut c);
        assert_eq!(c.state, ContainerState::Created);
    }
}

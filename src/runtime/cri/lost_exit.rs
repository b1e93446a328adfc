//! An exit containerd lost. When containerd 1.6 restarts in the middle of
//! a container's stop, its CRI plugin can miss the container's exit: the
//! shim saw the process end (containerd's task service answers
//! `STOPPED`), but the CRI shows the container running for good, an exec
//! into it fails with "cannot exec in a stopped state", and every
//! `StopContainer` waits for an exit that never comes, until its deadline,
//! until containerd restarts once more (seen in `scripts/bench.sh soak`).
//! Nothing a CRI client can call ends that wait (the CRI plugin learns of
//! exits only from its own wait on the task, not from published events),
//! so the client asks the shim when a container's stop runs well past its
//! grace period (a sandbox's, whose pause process can be lost the same
//! way, when its `StopPodSandbox` runs out of time) and, when the shim
//! says the process ended, says at error level what is wrong and what
//! mends it; the stop's error says it too, and with it the pod's
//! `FailedKillPod` event.

use std::time::Duration;

use grpcio::CallOption;

use super::{CriRuntime, pb};
use crate::runtime::{Code, Op, RuntimeError};

/// How long after a stop's grace period a `StopContainer` that has not
/// answered makes the CRI client ask the shim.
pub(super) const LOOK_AFTER: Duration = Duration::from_secs(5);

/// Calls to containerd's own services (tasks, content) name the CRI's
/// namespace.
pub(super) fn in_cri_namespace(timeout: Duration) -> CallOption {
    let mut meta = grpcio::MetadataBuilder::new();
    // a constant header: it always fits
    let _ = meta.add_str("containerd-namespace", "k8s.io");
    CallOption::default().headers(meta.build()).timeout(timeout)
}

/// A container's process as containerd's shim sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShimProcess {
    pub running: bool,
    pub stopped: bool,
    pub pid: u32,
    pub exit_status: u32,
    /// When it exited (nanoseconds since the epoch; 0 while it runs).
    pub exited_at_ns: i64,
}

impl CriRuntime {
    /// Container `id`'s process as containerd's task service (the shim)
    /// has it; `None` when there is no task (or no such service).
    pub fn shim_process(&self, id: &str) -> Option<ShimProcess> {
        use pb::containerd_tasks::api as tasks;
        let mut req = tasks::GetRequest::new();
        req.container_id = id.to_string();
        let p = match self.containerd_tasks.get_opt(&req, in_cri_namespace(Duration::from_secs(5))) {
            Ok(r) => r.process.unwrap_or_default(),
            Err(e) => {
                log::debug!("container {id}: containerd's task service: {e}");
                return None;
            }
        };
        let at = p.exited_at.unwrap_or_default();
        let status = p.status.enum_value();
        Some(ShimProcess {
            running: status == Ok(tasks::Status::RUNNING),
            stopped: status == Ok(tasks::Status::STOPPED),
            pid: p.pid,
            exit_status: p.exit_status,
            exited_at_ns: at.seconds.saturating_mul(1_000_000_000).saturating_add(i64::from(at.nanos)),
        })
    }

    /// A stop (`op`) that runs well past its grace period, or ran out of
    /// time: when the shim says the process of `id` (a container, or a
    /// sandbox's pause container) ended, containerd lost its exit (see the
    /// module's text): said at error level, once per stop. The process's
    /// exit status then.
    pub(super) fn lost_exit(&self, op: Op, id: &str) -> Option<u32> {
        let p = self.shim_process(id).filter(|p| p.stopped)?;
        let what = if op == Op::StopPodSandbox { "sandbox" } else { "container" };
        log::error!(
            "{what} {id}: its process ended (status {}) but containerd's CRI plugin never handled the exit \
             (containerd 1.6 can lose an exit while it restarts): its {op} cannot return and the pod \
             stays terminating until containerd restarts (systemctl restart containerd); retrying meanwhile",
            p.exit_status
        );
        Some(p.exit_status)
    }
}

/// The error of a stop that ended without an answer: when the
/// shim had said the process ended (`lost`, its exit status), the error
/// says containerd lost the exit and what mends it, so that the pod's
/// `FailedKillPod` event tells the user, not only the journal.
pub(super) fn explained(e: RuntimeError, lost: Option<u32>) -> RuntimeError {
    match (e, lost) {
        (RuntimeError::DeadlineExceeded { op }, Some(status)) => RuntimeError::Failed {
            op,
            code: Code::DeadlineExceeded,
            message: format!(
                "its process ended (exit status {status}) but containerd never handled the exit, \
                 so the stop cannot return until containerd restarts (systemctl restart containerd)"
            ),
        },
        (e, _) => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_past_its_deadline_names_the_lost_exit_only_when_the_shim_said_so() {
        let late = || RuntimeError::DeadlineExceeded { op: Op::StopContainer };
        assert_eq!(explained(late(), None), late());
        let e = explained(late(), Some(137));
        assert!(matches!(e, RuntimeError::Failed { code: Code::DeadlineExceeded, .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("exit status 137") && text.contains("restart containerd"), "{text}");
        // any other failure is left as it is
        let down = RuntimeError::Unavailable("StopContainer: connection refused".into());
        assert_eq!(explained(down.clone(), Some(0)), down);
    }
}

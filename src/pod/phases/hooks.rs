//! Lifecycle hooks (`postStart`, `preStop`) with the kubelet's handlers:
//! `exec` (CRI `ExecSync`), `httpGet` (one GET; only a transport error
//! fails, the status is not checked) and `sleep`. A hook runs on the
//! thread that starts or stops its container, bounded by a deadline and
//! ended at once by cancellation (a shorter grace period, a newer update).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::LifecycleHandler;
use thiserror::Error;

use crate::base::cancel::CancelToken;
use crate::model::{self, Container, Pod};
use crate::pod::prober::net::{self, HttpGet, NetProbe};
use crate::pod::prober::{Outcome, TargetError};
use crate::runtime::{Runtime, RuntimeError};

/// A failed hook, in the kubelet's words (logged, and the container's
/// `PostStartHookError` message). `pod` is the kubelet's `format.Pod`:
/// `name_namespace(uid)`.
#[derive(Debug, Error)]
pub enum HookError {
    #[error(
        "Exec lifecycle hook ({command}) for Container {container:?} in Pod {pod:?} failed - error: {cause}, message: {output:?}"
    )]
    Exec { command: String, container: String, pod: String, cause: Box<ExecHookError>, output: String },
    #[error("HTTP lifecycle hook ({path}) for Container {container:?} in Pod {pod:?} failed - error: {cause}")]
    Http { path: String, container: String, pod: String, cause: HttpHookError },
    #[error(
        "Sleep lifecycle hook ({seconds}) for Container {container:?} in Pod {pod:?} failed - error: container terminated before sleep hook finished"
    )]
    Sleep { seconds: i64, container: String, pod: String },
    #[error("Cannot run handler: invalid handler")]
    NoHandler,
}

/// Why an `exec` hook failed.
#[derive(Debug, Error)]
pub enum ExecHookError {
    /// The command ran and exited non-zero; `stderr` is what it wrote there.
    #[error("command '{command}' exited with {code}: {stderr}")]
    Exited { command: String, code: i32, stderr: String },
    /// The runtime refused or failed the call (or it was cancelled).
    #[error("{0}")]
    Runtime(RuntimeError),
    #[error("the runtime dropped the call")]
    Dropped,
    #[error("command {0:?} timed out")]
    TimedOut(String),
}

/// Why an `httpGet` hook failed: it never got an answer.
#[derive(Debug, Error)]
pub enum HttpHookError {
    #[error("{0}")]
    Target(TargetError),
    #[error("{0}")]
    Poll(std::io::Error),
    #[error("cancelled")]
    Cancelled,
    /// The GET failed (Go's words: `Get "<url>": dial tcp ...`).
    #[error("{0}")]
    Get(String),
}

/// The kubelet's `format.Pod`: `name_namespace(uid)`.
fn pod_text(pod: &Pod) -> String {
    format!("{}_{}({})", model::name(pod), model::namespace(pod), model::uid(pod))
}

/// Run `h` for container instance `id` of `c`. `Err` is the kubelet's
/// message for a failed hook (exec: its output; http: the transport
/// error; sleep: cut short).
#[allow(clippy::too_many_arguments)]
pub fn run(
    runtime: &dyn Runtime,
    cancel: &CancelToken,
    pod: &Pod,
    c: &Container,
    id: &str,
    h: &LifecycleHandler,
    pod_ip: Option<&str>,
    deadline: Instant,
) -> Result<(), HookError> {
    if let Some(e) = &h.exec {
        let cmd = e.command.clone().unwrap_or_default();
        let fail = |cause: ExecHookError, output: String| HookError::Exec {
            command: format!("[{}]", cmd.join(" ")),
            container: c.name.clone(),
            pod: pod_text(pod),
            cause: Box::new(cause),
            output,
        };
        let (tx, rx) = crossbeam_channel::bounded(1);
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(1));
        runtime.exec_sync(
            id,
            &cmd,
            left,
            Box::new(move |r| {
                let _ = tx.try_send(r);
            }),
        );
        crossbeam_channel::select! {
            recv(rx) -> r => match r {
                Ok(Ok(r)) if r.exit_code == 0 => Ok(()),
                Ok(Ok(r)) => {
                    let output = crate::pod::prober::exec_output(&r);
                    let stderr = String::from_utf8_lossy(&r.stderr).into_owned();
                    Err(fail(ExecHookError::Exited { command: cmd.join(" "), code: r.exit_code, stderr }, output))
                }
                Ok(Err(e)) => Err(fail(ExecHookError::Runtime(e), String::new())),
                Err(_) => Err(fail(ExecHookError::Dropped, String::new())),
            },
            recv(cancel.receiver()) -> _ => Err(fail(
                ExecHookError::Runtime(RuntimeError::Cancelled { op: crate::runtime::Op::ExecSync }),
                String::new(),
            )),
            default(deadline.saturating_duration_since(Instant::now())) => {
                Err(fail(ExecHookError::TimedOut(cmd.join(" ")), String::new()))
            }
        }
    } else if let Some(g) = &h.http_get {
        let fail = |cause: HttpHookError| HookError::Http {
            path: g.path.clone().unwrap_or_default(),
            container: c.name.clone(),
            pod: pod_text(pod),
            cause,
        };
        let get = HttpGet::of(g, pod_ip, c, net::HOOK_USER_AGENT).map_err(|e| fail(HttpHookError::Target(e)))?;
        let mut p = match NetProbe::http(get, deadline) {
            Ok(p) => p,
            Err(o) => return outcome(o, None).map_err(fail),
        };
        loop {
            if cancel.is_cancelled() {
                return Err(fail(HttpHookError::Cancelled));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return outcome(p.timed_out(), None).map_err(fail);
            }
            let mut fds = [libc::pollfd { fd: p.fd(), events: p.events(), revents: 0 }];
            let slice = left.min(Duration::from_millis(50));
            match crate::sys::poll(&mut fds, slice.as_millis().max(1) as i32) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(fail(HttpHookError::Poll(e))),
            }
            if fds[0].revents != 0
                && let Some(o) = p.advance()
            {
                return outcome(o, p.failed_status()).map_err(fail);
            }
        }
    } else if let Some(s) = &h.sleep {
        let wait = Duration::from_secs(s.seconds.max(0) as u64);
        let until = crate::base::cancel::add_saturating(Instant::now(), wait).min(deadline);
        crossbeam_channel::select! {
            recv(cancel.receiver()) -> _ => Err(HookError::Sleep {
                seconds: s.seconds,
                container: c.name.clone(),
                pod: pod_text(pod),
            }),
            default(until.saturating_duration_since(Instant::now())) => Ok(()),
        }
    } else {
        Err(HookError::NoHandler)
    }
}

/// An HTTP hook fails only on a transport error: an answer with any status
/// (`failed_status`: the one that failed the GET as a probe) is a success,
/// as the kubelet does not look at it.
fn outcome(o: Outcome, failed_status: Option<u16>) -> Result<(), HttpHookError> {
    match o {
        Outcome::Success | Outcome::Warning(_) => Ok(()),
        Outcome::Failure(_) if failed_status.is_some() => Ok(()),
        Outcome::Failure(m) | Outcome::Error(m) => Err(HttpHookError::Get(m)),
    }
}

/// The grace period left for `StopContainer` after a preStop hook that took
/// `took`: the whole seconds it used come off, and the container still gets
/// the kubelet's minimum of 2 s.
pub fn grace_after_pre_stop(grace: i64, took: Duration) -> i64 {
    (grace - took.as_secs() as i64).max(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_stop_time_comes_off_the_grace_period_down_to_two_seconds() {
        assert_eq!(grace_after_pre_stop(30, Duration::from_millis(4900)), 26);
        assert_eq!(grace_after_pre_stop(5, Duration::from_secs(5)), 2);
        assert_eq!(grace_after_pre_stop(1, Duration::ZERO), 2);
    }

    #[test]
    fn http_hooks_fail_only_on_transport_errors() {
        assert!(outcome(Outcome::Failure("HTTP probe failed with statuscode: 500".into()), Some(500)).is_ok());
        let refused = "Get \"http://x/\": dial tcp: connect: connection refused";
        let e = outcome(Outcome::Failure(refused.into()), None).unwrap_err();
        assert_eq!(e.to_string(), refused);
    }

    #[test]
    fn hook_failures_read_as_the_kubelets() {
        let e = HookError::Exec {
            command: "[sh -c exit 3]".into(),
            container: "app".into(),
            pod: "web_default(u1)".into(),
            cause: Box::new(ExecHookError::Exited { command: "sh -c exit 3".into(), code: 3, stderr: "bad".into() }),
            output: "out bad".into(),
        };
        assert_eq!(
            e.to_string(),
            "Exec lifecycle hook ([sh -c exit 3]) for Container \"app\" in Pod \"web_default(u1)\" failed - error: \
             command 'sh -c exit 3' exited with 3: bad, message: \"out bad\""
        );
        let e = HookError::Http {
            path: "/hook".into(),
            container: "app".into(),
            pod: "web_default(u1)".into(),
            cause: HttpHookError::Target(TargetError::NoPodIp),
        };
        assert_eq!(
            e.to_string(),
            "HTTP lifecycle hook (/hook) for Container \"app\" in Pod \"web_default(u1)\" failed - error: \
             the pod has no IP address yet"
        );
        let e = HookError::Sleep { seconds: 5, container: "app".into(), pod: "web_default(u1)".into() };
        assert_eq!(
            e.to_string(),
            "Sleep lifecycle hook (5) for Container \"app\" in Pod \"web_default(u1)\" failed - error: \
             container terminated before sleep hook finished"
        );
        assert_eq!(ExecHookError::TimedOut("sleep 9".into()).to_string(), "command \"sleep 9\" timed out");
        assert_eq!(HookError::NoHandler.to_string(), "Cannot run handler: invalid handler");
    }
}

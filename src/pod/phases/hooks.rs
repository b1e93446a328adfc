//! Lifecycle hooks (`postStart`, `preStop`) with the kubelet's handlers:
//! `exec` (CRI `ExecSync`), `httpGet` (one GET; only a transport error
//! fails, the status is not checked) and `sleep`. A hook runs on the
//! thread that starts or stops its container, bounded by a deadline and
//! ended at once by cancellation (a shorter grace period, a newer update).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::LifecycleHandler;

use crate::base::cancel::CancelToken;
use crate::model::{self, Container, Pod};
use crate::pod::prober::net::{self, HttpGet, NetProbe};
use crate::runtime::{Runtime, RuntimeError};

/// The kubelet's `format.Pod`: `name_namespace(uid)`.
fn pod_text(pod: &Pod) -> String {
    format!("{}_{}({})", model::name(pod), model::namespace(pod), model::uid(pod))
}

/// Run `h` for container instance `id` of `c`. `Err` holds the kubelet's
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
) -> Result<(), String> {
    if let Some(e) = &h.exec {
        let cmd = e.command.clone().unwrap_or_default();
        let shown = format!("[{}]", cmd.join(" "));
        let fail = |err: String, out: &str| {
            format!(
                "Exec lifecycle hook ({shown}) for Container {:?} in Pod {:?} failed - error: {err}, message: {out:?}",
                c.name,
                pod_text(pod)
            )
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
                    let out = crate::pod::prober::exec_output(&r);
                    let stderr = String::from_utf8_lossy(&r.stderr).into_owned();
                    Err(fail(format!("command '{}' exited with {}: {stderr}", cmd.join(" "), r.exit_code), &out))
                }
                Ok(Err(e)) => Err(fail(e.to_string(), "")),
                Err(_) => Err(fail("the runtime dropped the call".into(), "")),
            },
            recv(cancel.receiver()) -> _ => Err(fail(RuntimeError::Cancelled { op: crate::runtime::Op::ExecSync }.to_string(), "")),
            default(deadline.saturating_duration_since(Instant::now())) => Err(fail(format!("command {:?} timed out", cmd.join(" ")), "")),
        }
    } else if let Some(g) = &h.http_get {
        let path = g.path.clone().unwrap_or_default();
        let fail = |err: String| {
            format!(
                "HTTP lifecycle hook ({path}) for Container {:?} in Pod {:?} failed - error: {err}",
                c.name,
                pod_text(pod)
            )
        };
        let get = HttpGet::of(g, pod_ip, c, net::HOOK_USER_AGENT).map_err(fail)?;
        let mut p = match NetProbe::http(get, deadline) {
            Ok(p) => p,
            Err(o) => return outcome(o).map_err(fail),
        };
        loop {
            if cancel.is_cancelled() {
                return Err(fail("cancelled".into()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return outcome(p.timed_out()).map_err(fail);
            }
            let mut fds = [libc::pollfd { fd: p.fd(), events: p.events(), revents: 0 }];
            let slice = left.min(Duration::from_millis(50));
            match crate::sys::poll(&mut fds, slice.as_millis().max(1) as i32) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(fail(e.to_string())),
            }
            if fds[0].revents != 0
                && let Some(o) = p.advance()
            {
                return outcome(o).map_err(fail);
            }
        }
    } else if let Some(s) = &h.sleep {
        let wait = Duration::from_secs(s.seconds.max(0) as u64);
        let until = crate::base::cancel::add_saturating(Instant::now(), wait).min(deadline);
        crossbeam_channel::select! {
            recv(cancel.receiver()) -> _ => Err(format!(
                "Sleep lifecycle hook ({}) for Container {:?} in Pod {:?} failed - error: container terminated before sleep hook finished",
                s.seconds, c.name, pod_text(pod)
            )),
            default(until.saturating_duration_since(Instant::now())) => Ok(()),
        }
    } else {
        Err("Cannot run handler: invalid handler".into())
    }
}

/// An HTTP hook fails only on a transport error: any status is a success,
/// as the kubelet does not look at it.
fn outcome(o: crate::pod::prober::Outcome) -> Result<(), String> {
    use crate::pod::prober::Outcome;
    match o {
        Outcome::Failure(m) if m.starts_with("HTTP probe failed with statuscode") => Ok(()),
        Outcome::Success | Outcome::Warning(_) => Ok(()),
        Outcome::Failure(m) | Outcome::Error(m) => Err(m),
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
        use crate::pod::prober::Outcome;
        assert_eq!(outcome(Outcome::Failure("HTTP probe failed with statuscode: 500".into())), Ok(()));
        assert!(outcome(Outcome::Failure("Get \"http://x/\": dial tcp: connect: connection refused".into())).is_err());
    }
}

//! The kubelet's `/run/{namespace}/{pod}/{container}` and
//! `/run/{namespace}/{pod}/{uid}/{container}`: a `POST` whose `cmd` (form
//! body, else query; split at white space as the kubelet splits it) runs
//! in the container through CRI `ExecSync`, for at most `timeout` (Go
//! duration or seconds; default [`DEFAULT_TIMEOUT`], at most
//! [`MAX_TIMEOUT`]). The answer is the command's output (stdout, then
//! stderr) as `text/plain`; a command that exits non-zero is a 500
//! `Status` with reason `NonZeroExitCode`, its exit code as an `ExitCode`
//! cause and its output in the message. Authorization (the `exec` right)
//! is the caller's.

use std::time::Duration;

use crate::api::query::Query;
use crate::api::status::{ApiError, Cause, Res};
use crate::api::stream;
use crate::model::{self, Pod};
use crate::runtime::{CallCtx, ContainerState, ExecResult};

use super::ctx::Ctx;
use super::wire::{Reply, Request};

/// How long a command runs when the request does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest a command may run (the caller's connection waits).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// The most output returned (the rest is cut, and the answer says so).
pub const MAX_OUTPUT: usize = 4 << 20;
/// The longest `cmd` taken.
const MAX_CMD: usize = 64 << 10;

/// `/run/...`: `rest` is the path after `run`.
pub fn run(ctx: &Ctx, req: &Request, rest: &[&str]) -> Res<Reply> {
    if req.method != "POST" {
        return Err(ApiError::method_not_allowed(format!(
            "{} is not supported on /run: POST the command as cmd=... (form body or query)",
            req.method
        )));
    }
    let (ns, pod_name, uid, container) = match rest {
        [ns, pod, c] => (*ns, *pod, None, *c),
        [ns, pod, uid, c] => (*ns, *pod, Some(*uid), *c),
        _ => return Err(ApiError::no_route()),
    };
    let cmd = command(req)?;
    let timeout = timeout(req)?;
    let pod = stream::find_pod(&ctx.ops.parts, ns, pod_name)?;
    if let Some(u) = uid
        && model::uid(&pod) != u
    {
        return Err(ApiError::missing(format!("pod {ns}/{pod_name} with UID {u} not found")));
    }
    let container = stream::container_of(&pod, container)?;
    let id = running_container(ctx, &pod, &container)?;
    let result = exec(ctx, &id, &cmd, timeout)?;
    Ok(answer(&cmd, result))
}

/// The command: `cmd` from the body (an urlencoded form, whatever the
/// `Content-Type`: `kubectl create --raw` sends its file as JSON), else
/// from the query.
fn command(req: &Request) -> Res<Vec<String>> {
    let from_body =
        std::str::from_utf8(&req.body).ok().and_then(|b| Query::parse(b.trim()).get("cmd").map(str::to_string));
    let cmd = from_body.or_else(|| req.query.get("cmd").map(str::to_string)).unwrap_or_default();
    if cmd.len() > MAX_CMD {
        return Err(ApiError::bad_request(format!("cmd is over {MAX_CMD} bytes")));
    }
    let words: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
    if words.is_empty() {
        return Err(ApiError::bad_request("no command: POST cmd=<command> (form body or query)"));
    }
    Ok(words)
}

fn timeout(req: &Request) -> Res<Duration> {
    let Some(t) = req.query.get("timeout").filter(|t| !t.is_empty()) else { return Ok(DEFAULT_TIMEOUT) };
    let d = match t.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => crate::config::parse_duration(t).ok_or_else(|| {
            ApiError::bad_request(format!("timeout {t:?} is not a duration (e.g. 30s) or a number of seconds"))
        })?,
    };
    if d.is_zero() || d > MAX_TIMEOUT {
        return Err(ApiError::bad_request(format!("timeout {t:?} must be more than 0 and at most 10m")));
    }
    Ok(d)
}

/// The runtime's ID of the pod's running `container` (the relist's view
/// when fresh, else the runtime's own).
fn running_container(ctx: &Ctx, pod: &Pod, container: &str) -> Res<String> {
    let parts = &ctx.ops.parts;
    let (ns, name, uid) = (model::namespace(pod), model::name(pod), model::uid(pod));
    let find = |rp: &crate::runtime::RuntimePod| {
        let sandbox = rp.ready_sandbox()?;
        rp.latest_in(container, &sandbox.id).filter(|i| i.state == ContainerState::Running).map(|i| i.id.clone())
    };
    let cached = parts.pod_cache.recent(crate::runtime::cache::FRESH).and_then(|l| {
        let rp = l.iter().find(|rp| rp.uid == uid)?;
        find(rp)
    });
    if let Some(id) = cached {
        return Ok(id);
    }
    let rp = parts
        .runtime
        .pod_status(&CallCtx::background(stream::RUNTIME_DEADLINE), uid)
        .map_err(|e| ApiError::unavailable(format!("pod {ns}/{name}: the runtime: {e}")))?;
    find(&rp).ok_or_else(|| {
        ApiError::bad_request(format!("container {container} is not running in pod {ns}/{name}: cannot run a command"))
    })
}

/// CRI `ExecSync` of `cmd` in container `id`, waited for on this (the
/// caller's connection) thread for at most `timeout` and a margin.
fn exec(ctx: &Ctx, id: &str, cmd: &[String], timeout: Duration) -> Res<ExecResult> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    ctx.ops.parts.runtime.exec_sync(
        id,
        cmd,
        timeout,
        Box::new(move |r| {
            let _ = tx.try_send(r);
        }),
    );
    match rx.recv_timeout(timeout + Duration::from_secs(15)) {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(ApiError::internal(format!("running {:?}: {e}", cmd.join(" ")))),
        Err(_) => Err(ApiError::new(
            504,
            "Timeout",
            format!("running {:?}: no answer from the runtime within {}s", cmd.join(" "), timeout.as_secs() + 15),
        )),
    }
}

/// The output as `text/plain` (exit 0), or a `NonZeroExitCode` Status.
fn answer(cmd: &[String], r: ExecResult) -> Reply {
    let mut out = r.stdout;
    out.extend_from_slice(&r.stderr);
    if out.len() > MAX_OUTPUT {
        out.truncate(MAX_OUTPUT);
        out.extend_from_slice(format!("\n[output cut at {MAX_OUTPUT} bytes]\n").as_bytes());
    }
    if r.exit_code == 0 {
        return Reply::Full { status: 200, content_type: "text/plain; charset=utf-8", body: out };
    }
    let shown = String::from_utf8_lossy(&out[..out.len().min(64 << 10)]).into_owned();
    let e = ApiError::new(
        500,
        "NonZeroExitCode",
        format!("command {:?} terminated with non-zero exit code {}: {shown}", cmd.join(" "), r.exit_code),
    )
    .with_causes(vec![Cause::new("ExitCode", "", r.exit_code.to_string())]);
    Reply::from(e)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn req(method: &str, query: &[(&str, &str)], body: &str) -> Request {
        Request {
            method: method.into(),
            path: "/run/ns/p/c".into(),
            query: Query::from_pairs(query),
            body: body.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn the_command_comes_from_the_form_body_then_the_query() {
        assert_eq!(command(&req("POST", &[], "cmd=ls+-l%20/tmp")).unwrap(), ["ls", "-l", "/tmp"]);
        assert_eq!(command(&req("POST", &[("cmd", "echo hi")], "")).unwrap(), ["echo", "hi"]);
        assert_eq!(command(&req("POST", &[("cmd", "query")], "cmd=body\n")).unwrap(), ["body"], "the body wins");
        let e = command(&req("POST", &[], "x=1")).unwrap_err();
        assert_eq!((e.code, e.reason), (400, "BadRequest"));
        assert!(command(&req("POST", &[("cmd", "   ")], "")).is_err());
    }

    #[test]
    fn timeouts_are_durations_or_seconds_within_bounds() {
        assert_eq!(timeout(&req("POST", &[], "")).unwrap(), DEFAULT_TIMEOUT);
        assert_eq!(timeout(&req("POST", &[("timeout", "5")], "")).unwrap(), Duration::from_secs(5));
        assert_eq!(timeout(&req("POST", &[("timeout", "1m30s")], "")).unwrap(), Duration::from_secs(90));
        for bad in ["0", "11m", "soon"] {
            assert_eq!(timeout(&req("POST", &[("timeout", bad)], "")).unwrap_err().code, 400, "{bad}");
        }
    }

    #[test]
    fn output_is_text_and_a_failure_is_a_status_with_the_exit_code() {
        let cmd = vec!["sh".to_string()];
        match answer(&cmd, ExecResult { exit_code: 0, stdout: b"out\n".to_vec(), stderr: b"err\n".to_vec() }) {
            Reply::Full { status: 200, content_type, body } => {
                assert!(content_type.starts_with("text/plain"));
                assert_eq!(body, b"out\nerr\n");
            }
            other => panic!("{other:?}"),
        }
        match answer(&cmd, ExecResult { exit_code: 3, stdout: b"partial".to_vec(), stderr: Vec::new() }) {
            Reply::Full { status: 500, body, .. } => {
                let s: serde_json::Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(s["reason"], "NonZeroExitCode");
                assert_eq!(s["details"]["causes"][0], json!({"reason": "ExitCode", "message": "3"}));
                assert!(s["message"].as_str().unwrap().ends_with(": partial"), "{s}");
            }
            other => panic!("{other:?}"),
        }
    }
}

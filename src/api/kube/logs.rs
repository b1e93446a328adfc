//! `pods/NAME/log` and the kubelet's `/containerLogs`: the container's log
//! as `text/plain`, read with `Ops::logs` (the reader the CLI's logs use),
//! streamed in chunks; `follow` goes on while the container runs.
//! Parameters as kubectl sends them: `container`, `follow`, `previous`,
//! `tailLines`, `timestamps`, `sinceSeconds`, `limitBytes`.

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use crate::api::ops::LogQuery;

use super::ctx::{Ctx, op_error};
use super::wire::{ApiError, ChunkSink, Reply, Request, Res};

/// Keep the lines of `data` (each `<time> <text>`) at or after `since`,
/// without their time unless `timestamps`.
fn shape(data: &[u8], since: Option<SystemTime>, timestamps: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    for line in data.split_inclusive(|b| *b == b'\n') {
        let (time, text) = match line.iter().position(|b| *b == b' ') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (&line[..0], line),
        };
        if let Some(since) = since {
            let t = std::str::from_utf8(time).ok().and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
            if t.is_some_and(|t| SystemTime::from(t) < since) {
                continue;
            }
        }
        out.extend_from_slice(if timestamps { line } else { text });
    }
    out
}

pub fn pod_log(ctx: &Ctx, req: &Request, ns: &str, name: &str, container: &str) -> Res<Reply> {
    if req.method != "GET" {
        return Err(ApiError::method_not_allowed("logs are read with GET"));
    }
    let tail = req.int("tailLines")?;
    if tail.is_some_and(|t| t < 0) {
        return Err(ApiError::bad_request("tailLines must not be negative"));
    }
    let limit = req.int("limitBytes")?.filter(|l| *l > 0).map(|l| l as u64);
    let since = req.int("sinceSeconds")?.filter(|s| *s > 0).map(|s| SystemTime::now() - Duration::from_secs(s as u64));
    let (follow, timestamps) = (req.flag("follow"), req.flag("timestamps"));
    let mut q = LogQuery {
        namespace: ns.to_string(),
        name: name.to_string(),
        container: container.to_string(),
        previous: req.flag("previous"),
        cursor: None,
        limit: 0,
        tail_lines: tail.unwrap_or(0) as usize,
        timestamps: true,
    };
    // the first read here: a missing pod or container is a Status, not a stream
    let first = ctx.ops.logs(&q).map_err(|e| op_error(e, name))?;
    q.container = first.container.clone();
    let (ops, stop) = (ctx.ops.clone(), ctx.stop.clone());
    let run = move |sink: &mut dyn ChunkSink| -> std::io::Result<()> {
        let mut sent: u64 = 0;
        let mut r = first;
        let mut stopped_seen = false;
        loop {
            let mut data = shape(&r.data, since, timestamps);
            if let Some(l) = limit {
                data.truncate((l - sent) as usize);
            }
            if !data.is_empty() {
                sink.chunk(&data)?;
                sent += data.len() as u64;
            }
            if limit.is_some_and(|l| sent >= l) {
                return Ok(());
            }
            let more = q.cursor.as_ref() != Some(&r.next);
            q.cursor = Some(r.next.clone());
            q.tail_lines = 0;
            if !more && !follow {
                return Ok(());
            }
            if !more {
                if !r.running {
                    if stopped_seen {
                        return Ok(());
                    }
                    stopped_seen = true;
                } else {
                    stopped_seen = false;
                }
                if sink.client_gone() || stop.load(Ordering::SeqCst) {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            r = match ops.logs(&q) {
                Ok(r) => r,
                // the pod or its log went away while followed
                Err(_) => return Ok(()),
            };
        }
    };
    Ok(Reply::Stream { content_type: "text/plain", run: Box::new(run) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_lose_their_time_and_old_ones_go() {
        let data = b"2020-01-01T00:00:00Z old\n2999-01-01T00:00:00.5Z new\n";
        assert_eq!(shape(data, None, false), b"old\nnew\n");
        assert_eq!(shape(data, None, true), data);
        assert_eq!(shape(data, Some(SystemTime::now()), false), b"new\n");
    }
}

//! `pods/NAME/log` and the kubelet's `/containerLogs`: the container's log
//! as `text/plain`, read with `Ops::logs` (the reader the CLI's logs use),
//! streamed in chunks; `follow` goes on while the container runs.
//! Parameters as kubectl sends them: `container`, `follow`, `previous`,
//! `tailLines`, `timestamps`, `sinceSeconds`, `limitBytes`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use crate::api::ops::{LogQuery, LogRead};
use crate::api::status::{ApiError, Res};

use super::ctx::Ctx;
use super::wire::{ChunkSink, Reply, Request};

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

/// How a log is sent: the lines kept ([`shape`]), at most `limit` bytes,
/// and whether it is followed.
#[derive(Debug, Clone, Copy)]
struct How {
    since: Option<SystemTime>,
    timestamps: bool,
    limit: Option<u64>,
    follow: bool,
}

/// How often a follower reads again when it found nothing new.
const POLL: Duration = Duration::from_millis(250);

/// Send `first` (what the read at `q` returned), then what `read` finds
/// after it. Without `follow` the stream ends at the log's end; with
/// it the log is read again every [`POLL`] while the container runs, and
/// ends once a read after the container stopped found nothing new (its
/// last lines are sent), when the pod or its log goes away (`read` fails),
/// the client goes away or `stop` is set. `limit` ends it either way.
fn send(
    first: LogRead,
    mut q: LogQuery,
    how: How,
    read: impl Fn(&LogQuery) -> Res<LogRead>,
    stop: &AtomicBool,
    sink: &mut dyn ChunkSink,
) -> std::io::Result<()> {
    let mut sent: u64 = 0;
    let mut r = first;
    let mut stopped_seen = false;
    loop {
        let mut data = shape(&r.data, how.since, how.timestamps);
        if let Some(l) = how.limit {
            data.truncate((l - sent) as usize);
        }
        if !data.is_empty() {
            sink.chunk(&data)?;
            sent += data.len() as u64;
        }
        if how.limit.is_some_and(|l| sent >= l) {
            return Ok(());
        }
        let more = q.cursor.as_ref() != Some(&r.next);
        q.cursor = Some(r.next.clone());
        q.tail_lines = 0;
        if !more && !how.follow {
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
            std::thread::sleep(POLL);
        }
        r = match read(&q) {
            Ok(r) => r,
            // the pod or its log went away while followed
            Err(_) => return Ok(()),
        };
    }
}

pub fn pod_log(ctx: &Ctx, req: &Request, ns: &str, name: &str, container: &str) -> Res<Reply> {
    if req.method != "GET" {
        return Err(ApiError::method_not_allowed("logs are read with GET"));
    }
    let tail = req.query.int("tailLines")?;
    if tail.is_some_and(|t| t < 0) {
        return Err(ApiError::bad_request("tailLines must not be negative"));
    }
    let limit = req.query.int("limitBytes")?.filter(|l| *l > 0).map(|l| l as u64);
    let since =
        req.query.int("sinceSeconds")?.filter(|s| *s > 0).map(|s| SystemTime::now() - Duration::from_secs(s as u64));
    let (follow, timestamps) = (req.query.flag("follow")?, req.query.flag("timestamps")?);
    let mut q = LogQuery {
        namespace: ns.to_string(),
        name: name.to_string(),
        container: container.to_string(),
        previous: req.query.flag("previous")?,
        cursor: None,
        limit: 0,
        tail_lines: tail.unwrap_or(0) as usize,
        timestamps: true,
    };
    // the first read here: a missing pod or container is a Status, not a stream
    let first = ctx.ops.logs(&q)?;
    q.container = first.container.clone();
    let (ops, stop) = (ctx.ops.clone(), ctx.stop.clone());
    let how = How { since, timestamps, limit, follow };
    let run =
        move |sink: &mut dyn ChunkSink| -> std::io::Result<()> { send(first, q, how, |q| ops.logs(q), &stop, sink) };
    Ok(Reply::Stream { content_type: "text/plain", run: Box::new(run) })
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::Instant;

    use parking_lot::Mutex;

    use super::*;
    use crate::api::status::ApiError;
    use crate::logs::reader;

    /// What a stream sent, as the client got it.
    struct Got(Arc<Mutex<Vec<u8>>>);

    impl ChunkSink for Got {
        fn chunk(&mut self, data: &[u8]) -> std::io::Result<()> {
            self.0.lock().extend_from_slice(data);
            Ok(())
        }
        fn client_gone(&mut self) -> bool {
            false
        }
    }

    /// A container's log: `<dir>/c/0.log` in the CRI format, written to
    /// as a runtime does (appended, entry by entry).
    struct Log {
        dir: PathBuf,
        running: Arc<AtomicBool>,
    }

    impl Log {
        fn new(tag: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("podwarden-kube-logs-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("c")).unwrap();
            std::fs::write(dir.join("c/0.log"), "").unwrap();
            Log { dir, running: Arc::new(AtomicBool::new(true)) }
        }

        fn write(&self, text: &str) {
            let mut f = std::fs::OpenOptions::new().append(true).open(self.dir.join("c/0.log")).unwrap();
            writeln!(f, "2026-01-01T00:00:00.1Z stdout F {text}").unwrap();
        }

        /// `Ops::logs` reduced to the file: the reader it uses, and the
        /// container's state as the test sets it.
        fn reader(&self) -> impl Fn(&LogQuery) -> Res<LogRead> + Send + 'static {
            let (dir, running) = (self.dir.clone(), self.running.clone());
            move |q: &LogQuery| {
                let c = reader::read_instance_timestamped(&dir, Path::new("c"), "0.log", q.cursor.as_ref(), 0, 0)
                    .map_err(|e| ApiError::missing(e.to_string()))?;
                Ok(LogRead {
                    data: c.data,
                    next: c.next,
                    running: running.load(Ordering::SeqCst),
                    container: "c".into(),
                })
            }
        }
    }

    impl Drop for Log {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// `send` on its own thread: what it sent so far, and the thread.
    fn sending(log: &Log, follow: bool) -> (Arc<Mutex<Vec<u8>>>, std::thread::JoinHandle<std::io::Result<()>>) {
        let read = log.reader();
        let q = LogQuery { timestamps: true, ..LogQuery::default() };
        let first = read(&q).unwrap();
        let how = How { since: None, timestamps: false, limit: None, follow };
        let got = Arc::new(Mutex::new(Vec::new()));
        let mut sink = Got(got.clone());
        let stop = AtomicBool::new(false);
        let t = crate::base::thread::spawn("log-send", None, move || send(first, q, how, read, &stop, &mut sink));
        (got, t.unwrap())
    }

    /// Wait up to 5 s for `cond`; whether it held.
    fn within_5s(mut cond: impl FnMut() -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        cond()
    }

    #[test]
    fn follow_sends_lines_written_after_it_began_and_ends_after_the_container_stopped() {
        let log = Log::new("follow");
        log.write("one");
        let (got, t) = sending(&log, true);
        let text = || String::from_utf8_lossy(&got.lock()).into_owned();
        assert!(within_5s(|| text() == "one\n"), "the log so far: {:?}", text());
        // written after the follow began: sent while the container runs
        log.write("two");
        assert!(within_5s(|| text() == "one\ntwo\n"), "a line written while followed: {:?}", text());
        std::thread::sleep(POLL * 3);
        assert!(!t.is_finished(), "the follow ended while the container runs: {:?}", text());
        log.write("three");
        assert!(within_5s(|| text() == "one\ntwo\nthree\n"), "another line: {:?}", text());
        // the container stops: its last line still comes, then the stream ends
        log.write("four");
        log.running.store(false, Ordering::SeqCst);
        assert!(within_5s(|| t.is_finished()), "the follow did not end after the container stopped: {:?}", text());
        t.join().unwrap().unwrap();
        assert_eq!(text(), "one\ntwo\nthree\nfour\n");
    }

    #[test]
    fn without_follow_the_stream_ends_at_the_logs_end() {
        let log = Log::new("once");
        log.write("one");
        let (got, t) = sending(&log, false);
        assert!(within_5s(|| t.is_finished()), "a plain read ended at once");
        t.join().unwrap().unwrap();
        log.write("two");
        assert_eq!(String::from_utf8_lossy(&got.lock()), "one\n");
    }

    #[test]
    fn lines_lose_their_time_and_old_ones_go() {
        let data = b"2020-01-01T00:00:00Z old\n2999-01-01T00:00:00.5Z new\n";
        assert_eq!(shape(data, None, false), b"old\nnew\n");
        assert_eq!(shape(data, None, true), data);
        assert_eq!(shape(data, Some(SystemTime::now()), false), b"new\n");
    }
}

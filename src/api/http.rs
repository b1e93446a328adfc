//! The read-only HTTP endpoint (`address`:`readOnlyPort`): `/healthz`,
//! `/pods` (a v1 PodList, env values redacted), `/node` (the node report) and `/metrics` (Prometheus
//! text format). GET only, one request per connection (`Connection: close`).
//!
//! Requests are parsed by `httparse` (hyper's HTTP/1.x parser). What a
//! client can hold is bounded here, so slow or idle clients never delay
//! anyone else:
//! - one `http` thread owns every connection, non-blocking, and `poll`s them
//!   all: a client that sends nothing, or a byte a second, costs a table
//!   entry, never a thread;
//! - at most [`MAX_CONNECTIONS`] at a time: beyond that a new connection is
//!   answered 503 and closed at once (never queued);
//! - a request head must arrive whole within [`READ_DEADLINE`] of the
//!   accept (a total deadline, not per read: 408, then closed) and fit in
//!   [`MAX_HEAD`] bytes and [`MAX_HEADERS`] headers (431);
//! - parsed requests go to a fixed pool of [`WORKERS`] threads that only run
//!   the handler; the `http` thread writes the response (at most
//!   [`WRITE_DEADLINE`]) and closes after a short drain ([`LINGER`]), so the
//!   client reads the response rather than a reset.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::agent::Parts;
use crate::api::view;

/// Connections open at once (reading, waiting for a worker, writing or
/// draining); the next one is answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 128;
/// Bytes of request line and headers; more is 431.
pub const MAX_HEAD: usize = 8 * 1024;
/// Headers in one request; more is 431.
pub const MAX_HEADERS: usize = 64;
/// From accept to a complete request head; then 408 and close.
pub const READ_DEADLINE: Duration = Duration::from_secs(5);
/// For writing one response.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(10);
/// After the response, how long the client's leftover bytes are read and
/// discarded before the socket is closed (a close with unread data would
/// reset the connection and could destroy the response in flight).
pub const LINGER: Duration = Duration::from_secs(1);
/// Handler threads.
pub const WORKERS: usize = 2;

/// Owns the HTTP threads; dropping it stops and joins them.
pub struct HttpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    wake: Arc<UnixStream>,
    join: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

/// What the handlers need.
struct Handler {
    parts: Parts,
    healthy_within: Duration,
    redact: bool,
}

/// A parsed request on its way to a worker.
struct Job {
    id: u64,
    method: String,
    target: String,
}

impl HttpServer {
    /// Listen on `addr`; `/healthz` is ok while `Agent::health(healthy_within)`
    /// is; `/pods` redacts env values when `redact`.
    pub fn start(addr: SocketAddr, parts: Parts, healthy_within: Duration, redact: bool) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (wake_rx, wake_tx) = UnixStream::pair()?;
        wake_rx.set_nonblocking(true)?;
        wake_tx.set_nonblocking(true)?;
        let wake = Arc::new(wake_tx);
        let stop = Arc::new(AtomicBool::new(false));
        // a connection has at most one request in the pool: never full
        let (job_tx, job_rx) = crossbeam_channel::bounded::<Job>(MAX_CONNECTIONS);
        let (done_tx, done_rx) = crossbeam_channel::unbounded::<(u64, Vec<u8>)>();
        let handler = Arc::new(Handler { parts, healthy_within, redact });
        let mut workers = Vec::new();
        for i in 0..WORKERS {
            let (rx, tx, wake, handler) = (job_rx.clone(), done_tx.clone(), wake.clone(), handler.clone());
            workers.push(crate::base::thread::spawn(
                format!("http-w{i}"),
                Some(crate::base::thread::WORKER_STACK),
                move || work(&rx, &tx, &wake, &handler),
            )?);
        }
        let stop2 = stop.clone();
        let join = crate::base::thread::spawn("http", None, move || {
            let io = Io {
                jobs: job_tx,
                stop: stop2,
                conns: HashMap::new(),
                next_id: 0,
                accept_paused_until: None,
                refused: 0,
                last_refusal_log: None,
            };
            io.run(&listener, &wake_rx, &done_rx)
        })?;
        Ok(HttpServer { addr, stop, wake, join: Some(join), workers })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = (&*self.wake).write(&[1]);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
        // the `http` thread dropped the job sender: the workers' receive fails
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn work(jobs: &Receiver<Job>, done: &Sender<(u64, Vec<u8>)>, wake: &UnixStream, h: &Handler) {
    for job in jobs.iter() {
        let resp = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| route(h, &job.method, &job.target)))
            .unwrap_or_else(|_| {
                log::error!("http: the handler for {} {} panicked", job.method, job.target);
                response(500, "Internal Server Error", "text/plain", b"internal error\n")
            });
        if done.send((job.id, resp)).is_err() {
            return;
        }
        let _ = (&*wake).write(&[1]);
    }
}

/// The response to a parsed request, byte for byte what podwarden always
/// answered.
fn route(h: &Handler, method: &str, target: &str) -> Vec<u8> {
    if method != "GET" {
        return response(405, "Method Not Allowed", "text/plain", b"only GET\n");
    }
    let parts = &h.parts;
    match target.split('?').next().unwrap_or("") {
        "/healthz" => {
            let agent = parts.agent.health(h.healthy_within).err().map(|e| e.to_string());
            let cluster = parts.cluster.get().map(|f| f.identity_problem());
            let verbose = target
                .split_once('?')
                .is_some_and(|(_, q)| q.split('&').any(|kv| kv == "verbose" || kv.starts_with("verbose=")));
            let (ok, body) = healthz(agent, cluster, verbose);
            if ok {
                response(200, "OK", "text/plain", body.as_bytes())
            } else {
                response(500, "Internal Server Error", "text/plain", body.as_bytes())
            }
        }
        "/node" => response(200, "OK", "application/json", &view::to_json(&view::node_of(parts, h.healthy_within))),
        "/pods" | "/pods/" => response(200, "OK", "application/json", &view::to_json(&view::pods_of(parts, h.redact))),
        "/metrics" => {
            let body = crate::telemetry::metrics::render(&parts.metrics);
            response(200, "OK", "text/plain; version=0.0.4", body.as_bytes())
        }
        "/metrics/resource" => {
            let body = crate::node::stats::resource_metrics(parts.stats.last().as_deref());
            response(200, "OK", "text/plain; version=0.0.4", body.as_bytes())
        }
        "/stats/summary" => match parts.stats.last() {
            Some(s) => {
                let body = serde_json::to_vec(&crate::node::stats::summary(&s, &parts.node_name)).unwrap_or_default();
                response(200, "OK", "application/json", &body)
            }
            None => response(503, "Service Unavailable", "text/plain", b"no stats collected yet\n"),
        },
        _ => response(404, "Not Found", "text/plain", b"not found\n"),
    }
}

/// `/healthz`: whether it holds and its body. The checks are the agent's
/// own (`agent`: why it is not healthy) and, in cluster mode (`cluster`
/// is `Some`), whether the control plane accepts the node's identity (an
/// outage alone is no failure: the pods run on and the link comes back).
/// `verbose` lists each check as the kubelet's `?verbose` does.
fn healthz(agent: Option<String>, cluster: Option<Option<String>>, verbose: bool) -> (bool, String) {
    let identity = cluster.clone().flatten();
    let ok = agent.is_none() && identity.is_none();
    if !verbose {
        let body = match (agent, identity) {
            (None, None) => "ok".to_string(),
            (Some(a), _) => a,
            (None, Some(c)) => format!("the control plane refuses the node's identity: {c}"),
        };
        return (ok, body);
    }
    let line = |name: &str, problem: &Option<String>| match problem {
        None => format!("[+]{name} ok\n"),
        Some(why) => format!("[-]{name} failed: {why}\n"),
    };
    let mut body = line("agent", &agent);
    if let Some(c) = &cluster {
        body += &line("cluster-identity", c);
    }
    body += if ok { "healthz check passed\n" } else { "healthz check failed\n" };
    (ok, body)
}

fn response(code: u16, reason: &str, ctype: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// What to do with the bytes of a request head read so far.
#[derive(Debug, PartialEq)]
enum Head {
    /// Complete: hand (method, request target) to a worker.
    Request(String, String),
    /// Wait for more.
    Partial,
    /// Answer this error response and close.
    Reject(Vec<u8>),
}

fn parse_head(buf: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let too_large =
        || Head::Reject(response(431, "Request Header Fields Too Large", "text/plain", b"request header too large\n"));
    let bad = |why: &str| Head::Reject(response(400, "Bad Request", "text/plain", format!("{why}\n").as_bytes()));
    match req.parse(buf) {
        Ok(httparse::Status::Complete(_)) => {
            // no body is ever read, but a malformed length is a malformed request
            let lengths = req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("content-length"));
            for h in lengths {
                if std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse::<u64>().ok()).is_none() {
                    return bad("invalid Content-Length");
                }
            }
            Head::Request(req.method.unwrap_or("").to_string(), req.path.unwrap_or("").to_string())
        }
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => too_large(),
        Ok(httparse::Status::Partial) => Head::Partial,
        Err(httparse::Error::TooManyHeaders) => too_large(),
        Err(e) => bad(&format!("bad request: {e}")),
    }
}

enum State {
    /// Reading the request head (deadline: accept + READ_DEADLINE).
    Reading,
    /// A worker runs the handler (no deadline: the handler's own cost).
    Handling,
    /// Writing `buf[pos..]` (deadline: WRITE_DEADLINE).
    Writing,
    /// Response sent, write side shut; discarding what the client still
    /// sends until it closes (deadline: LINGER).
    Draining,
}

struct Conn {
    stream: TcpStream,
    state: State,
    deadline: Instant,
    buf: Vec<u8>,
    pos: usize,
}

/// The `http` thread's state.
struct Io {
    jobs: Sender<Job>,
    stop: Arc<AtomicBool>,
    conns: HashMap<u64, Conn>,
    next_id: u64,
    /// After an accept error (e.g. out of descriptors), accepting pauses
    /// until then instead of spinning on a listener that stays readable.
    accept_paused_until: Option<Instant>,
    refused: u64,
    last_refusal_log: Option<Instant>,
}

/// One `poll` entry: what it stands for.
#[derive(Clone, Copy)]
enum Slot {
    Listener,
    Wake,
    Conn(u64),
}

impl Io {
    fn run(mut self, listener: &TcpListener, wake: &UnixStream, done: &Receiver<(u64, Vec<u8>)>) {
        let mut fds: Vec<libc::pollfd> = Vec::new();
        let mut slots: Vec<Slot> = Vec::new();
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            let now = Instant::now();
            fds.clear();
            slots.clear();
            let pollfd = |fd: i32, events: i16| libc::pollfd { fd, events, revents: 0 };
            fds.push(pollfd(wake.as_raw_fd(), libc::POLLIN));
            slots.push(Slot::Wake);
            if self.accept_paused_until.is_none_or(|t| t <= now) {
                self.accept_paused_until = None;
                fds.push(pollfd(listener.as_raw_fd(), libc::POLLIN));
                slots.push(Slot::Listener);
            }
            let mut next = self.accept_paused_until;
            for (id, c) in &self.conns {
                let events = match c.state {
                    State::Reading | State::Draining => libc::POLLIN,
                    State::Writing => libc::POLLOUT,
                    State::Handling => continue,
                };
                fds.push(pollfd(c.stream.as_raw_fd(), events));
                slots.push(Slot::Conn(*id));
                next = Some(next.map_or(c.deadline, |n| n.min(c.deadline)));
            }
            // round up, so a deadline is never polled for as 0 ms too early
            let timeout = next.map_or(-1, |n| {
                (n.saturating_duration_since(now).as_micros().div_ceil(1000)).min(60_000) as libc::c_int
            });
            if let Err(e) = crate::sys::poll(&mut fds, timeout) {
                if e.kind() != ErrorKind::Interrupted {
                    log::error!("http: poll failed: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                continue;
            }
            for (fd, slot) in fds.iter().zip(&slots) {
                if fd.revents == 0 {
                    continue;
                }
                match *slot {
                    Slot::Wake => {
                        let (mut b, mut w) = ([0u8; 64], wake);
                        while matches!(w.read(&mut b), Ok(n) if n > 0) {}
                    }
                    Slot::Listener => self.accept(listener),
                    Slot::Conn(id) => self.ready(id),
                }
            }
            for (id, resp) in done.try_iter() {
                if let Some(c) = self.conns.get_mut(&id) {
                    c.state = State::Writing;
                    c.buf = resp;
                    c.pos = 0;
                    c.deadline = Instant::now() + WRITE_DEADLINE;
                    self.ready(id);
                }
            }
            self.expire(Instant::now());
        }
    }

    fn accept(&mut self, listener: &TcpListener) {
        // a bounded batch per wake-up keeps the loop fair to open connections
        for _ in 0..64 {
            match listener.accept() {
                Ok((s, _)) => {
                    if s.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let _ = s.set_nodelay(true);
                    if self.conns.len() >= MAX_CONNECTIONS {
                        self.refuse(s);
                        continue;
                    }
                    let id = self.next_id;
                    self.next_id += 1;
                    let c = Conn {
                        stream: s,
                        state: State::Reading,
                        deadline: Instant::now() + READ_DEADLINE,
                        buf: Vec::new(),
                        pos: 0,
                    };
                    self.conns.insert(id, c);
                    // the request is often there already
                    self.ready(id);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if matches!(e.kind(), ErrorKind::Interrupted | ErrorKind::ConnectionAborted) => {}
                Err(e) => {
                    log::warn!("http: accept failed: {e}");
                    self.accept_paused_until = Some(Instant::now() + Duration::from_millis(100));
                    return;
                }
            }
        }
    }

    /// Over the cap: a 503 into the empty send buffer, then close.
    fn refuse(&mut self, s: TcpStream) {
        let _ = (&s).write(&response(503, "Service Unavailable", "text/plain", b"too many connections\n"));
        self.refused += 1;
        if self.last_refusal_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
            log::warn!("http: {} connection(s) refused: {MAX_CONNECTIONS} open connections is the limit", self.refused);
            self.refused = 0;
            self.last_refusal_log = Some(Instant::now());
        }
    }

    /// Move connection `id` on as far as its socket allows.
    fn ready(&mut self, id: u64) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        let keep = match c.state {
            State::Reading => read_head(c, id, &self.jobs),
            State::Handling => true,
            State::Writing => write_some(c),
            State::Draining => drain(c),
        };
        if !keep {
            self.conns.remove(&id);
        }
    }

    fn expire(&mut self, now: Instant) {
        let late: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| !matches!(c.state, State::Handling) && c.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            let Some(c) = self.conns.get_mut(&id) else { continue };
            if matches!(c.state, State::Reading) {
                log::debug!("http: no complete request within {}s; closing", READ_DEADLINE.as_secs());
                reject(c, response(408, "Request Timeout", "text/plain", b"request timeout\n"));
                if write_some(c) {
                    continue;
                }
            }
            self.conns.remove(&id);
        }
    }
}

/// Read what the client sent; on a complete head hand it to a worker.
/// False when the connection is done with.
fn read_head(c: &mut Conn, id: u64, jobs: &Sender<Job>) -> bool {
    let mut chunk = [0u8; 4096];
    let mut eof = false;
    let old_len = c.buf.len();
    while c.buf.len() <= MAX_HEAD {
        let room = (MAX_HEAD + 1 - c.buf.len()).min(chunk.len());
        match c.stream.read(&mut chunk[..room]) {
            Ok(0) => {
                eof = true;
                break;
            }
            Ok(n) => c.buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    // A head ends with a newline: parse the first bytes (garbage is refused
    // at once), then only when a line was completed or the limit passed, so
    // a client sending a byte at a time costs no quadratic re-parsing.
    let new = &c.buf[old_len..];
    if !((old_len == 0 && !new.is_empty()) || new.contains(&b'\n') || c.buf.len() > MAX_HEAD) {
        return !eof;
    }
    match parse_head(&c.buf) {
        Head::Request(method, target) => {
            c.buf = Vec::new();
            c.state = State::Handling;
            jobs.try_send(Job { id, method, target }).is_ok()
        }
        // closed before the head was complete: nobody to answer
        Head::Partial => !eof,
        Head::Reject(resp) => {
            reject(c, resp);
            write_some(c)
        }
    }
}

fn reject(c: &mut Conn, resp: Vec<u8>) {
    c.state = State::Writing;
    c.buf = resp;
    c.pos = 0;
    c.deadline = Instant::now() + WRITE_DEADLINE;
}

/// Write what the socket takes; once all is out, shut the write side and
/// drain. False when the connection is done with.
fn write_some(c: &mut Conn) -> bool {
    while c.pos < c.buf.len() {
        match c.stream.write(&c.buf[c.pos..]) {
            Ok(0) => return false,
            Ok(n) => c.pos += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    if c.stream.shutdown(Shutdown::Write).is_err() {
        return false;
    }
    c.buf = Vec::new();
    c.state = State::Draining;
    c.deadline = Instant::now() + LINGER;
    drain(c)
}

/// Discard what the client still sends. False once it closed.
fn drain(c: &mut Conn) -> bool {
    let mut chunk = [0u8; 4096];
    loop {
        match c.stream.read(&mut chunk) {
            Ok(0) => return false,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_fails_on_a_refused_identity_not_on_an_outage_and_lists_its_checks() {
        assert_eq!(healthz(None, None, false), (true, "ok".to_string()));
        assert_eq!(healthz(None, Some(None), false), (true, "ok".to_string()), "cluster mode, accepted or away");
        let (ok, body) = healthz(None, Some(Some("HTTP 401: Unauthorized".into())), false);
        assert!(!ok);
        assert_eq!(body, "the control plane refuses the node's identity: HTTP 401: Unauthorized");
        let (ok, body) = healthz(None, Some(Some("HTTP 401".into())), true);
        assert!(!ok);
        assert_eq!(body, "[+]agent ok\n[-]cluster-identity failed: HTTP 401\nhealthz check failed\n");
        assert_eq!(healthz(None, None, true).1, "[+]agent ok\nhealthz check passed\n");
        let (ok, body) = healthz(Some("housekeeping stale".into()), Some(None), true);
        assert!(!ok);
        assert_eq!(body, "[-]agent failed: housekeeping stale\n[+]cluster-identity ok\nhealthz check failed\n");
    }

    fn status(h: &Head) -> Option<String> {
        match h {
            Head::Reject(r) => String::from_utf8_lossy(r).lines().next().map(str::to_string),
            _ => None,
        }
    }

    #[test]
    fn heads_are_parsed_bounded_and_rejected_with_the_right_status() {
        assert_eq!(
            parse_head(b"GET /healthz?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"),
            Head::Request("GET".into(), "/healthz?x=1".into())
        );
        assert_eq!(parse_head(b"GET /healthz HTTP/1.1\r\nHost: a\r\n"), Head::Partial);
        assert_eq!(parse_head(b"GET /heal"), Head::Partial);
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(
            status(&parse_head(long.as_bytes())).as_deref(),
            Some("HTTP/1.1 431 Request Header Fields Too Large")
        );
        let many: String = (0..MAX_HEADERS + 1).map(|i| format!("X-{i}: v\r\n")).collect();
        let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(
            status(&parse_head(many.as_bytes())).as_deref(),
            Some("HTTP/1.1 431 Request Header Fields Too Large")
        );
        assert_eq!(status(&parse_head(b"\x16\x03\x01\x00\xa5\x01")).as_deref(), Some("HTTP/1.1 400 Bad Request"));
        let cl = b"GET / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n";
        assert_eq!(status(&parse_head(cl)).as_deref(), Some("HTTP/1.1 400 Bad Request"));
    }
}

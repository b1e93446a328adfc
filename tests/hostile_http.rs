//! Hostile clients on the read-only HTTP port, against the real binary on
//! the simulated runtime: idle and slow connections, more connections than
//! the cap, and malformed requests. Each case asserts the exact answer, that
//! `/healthz` still answers, and that the agent's RSS moved by less than
//! 16 MiB.

#[path = "../benches/support/http.rs"]
mod bench_http;
mod common;

use common::EVICTION;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{TempDir, wait_for};
use podwarden::api::http::MAX_CONNECTIONS;

const BIN: &str = env!("CARGO_BIN_EXE_podwarden");
const RSS_BOUND_KIB: u64 = 16 * 1024;
/// An answer (or a close) that waited for no other client: 5x below
/// READ_DEADLINE (5 s), the least a request waits behind a client whose
/// head is being read (blocked endpoints took that, or forever). What the
/// endpoint takes is `scripts/bench.sh hostile`'s `healthz_ms_p99_slow_clients`.
const PROMPT: Duration = Duration::from_secs(1);
const HEALTHZ_OK: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
/// `/healthz?verbose` of a standalone agent: its one check.
const HEALTHZ_VERBOSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 33\r\nConnection: close\r\n\r\n[+]agent ok\nhealthz check passed\n";

/// `podwarden run` on the fake runtime with the read-only port on a free
/// loopback port; killed on drop.
struct Daemon {
    dir: TempDir,
    child: Child,
    addr: SocketAddr,
    rss0: u64,
}

impl Daemon {
    fn start(tag: &str) -> Self {
        let dir = TempDir::new(&format!("http-{tag}"));
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = dir.0.join("config.yaml");
        std::fs::create_dir_all(dir.0.join("manifests")).unwrap();
        std::fs::write(
            &config,
            format!(
                "staticPodPath: {0}/manifests\ncontainerRuntimeEndpoint: fake://\nrootDir: {0}/root\napiSocket: {0}/api.sock\npodLogsDir: {0}/logs\nnodeName: hostile\nhousekeepingInterval: 200ms\naddress: 127.0.0.1\nport: 0\nreadOnlyPort: {port}\n{EVICTION}",
                dir.0.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.0.join("podwarden.log")).unwrap();
        let child = Command::new(BIN)
            .args(["run", "--config", config.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut d = Daemon { dir, child, addr: SocketAddr::from(([127, 0, 0, 1], port)), rss0: 0 };
        wait_for("/healthz ok", Duration::from_secs(20), || d.get("/healthz") == Some((200, "ok".into())));
        d.rss0 = d.rss_kib();
        d
    }

    fn get(&self, path: &str) -> Option<(u16, String)> {
        bench_http::get(self.addr, path, Duration::from_secs(5))
    }

    fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    }

    /// `/healthz` answers 200 promptly and RSS grew by less than the bound.
    fn assert_healthy(&self, after: &str) {
        let t = Instant::now();
        assert_eq!(self.get("/healthz"), Some((200, "ok".into())), "after {after}; log:\n{}", self.log());
        assert!(t.elapsed() < PROMPT, "/healthz took {:?} after {after}", t.elapsed());
        let (now, before) = (self.rss_kib(), self.rss0);
        assert!(now < before + RSS_BOUND_KIB, "after {after}: RSS {before} -> {now} KiB");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("podwarden.log")).unwrap_or_default()
    }

    /// Every endpoint answers 200 within PROMPT with its usual content type.
    fn assert_endpoints_answer(&self, during: &str) {
        for (path, ctype) in [
            ("/healthz", "text/plain"),
            ("/metrics", "text/plain; version=0.0.4"),
            ("/pods", "application/json"),
            ("/node", "application/json"),
        ] {
            let t = Instant::now();
            let out = exchange(self.addr, format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(), false);
            let text = String::from_utf8_lossy(&out);
            assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{path} during {during}: {text:?}");
            assert!(text.contains(&format!("\r\nContent-Type: {ctype}\r\n")), "{path}: {text:?}");
            assert!(t.elapsed() < PROMPT, "{path} took {:?} during {during}", t.elapsed());
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Connect, send `request` (the server may close before all of it is
/// taken), optionally half-close, and read until the server closes (at
/// most 5 s): everything the server sent.
fn exchange(addr: SocketAddr, request: &[u8], half_close: bool) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(request);
    if half_close {
        s.shutdown(Shutdown::Write).unwrap();
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                assert!(
                    !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
                    "no answer and no close within 5 s"
                );
                break;
            }
        }
    }
    out
}

/// What a malformed request must get: the status line and body, the whole
/// response, or nothing (closed without an answer).
enum Want {
    Status(&'static str, &'static str),
    Exactly(&'static [u8]),
    Closed,
}

#[test]
fn malformed_and_unusual_requests_get_exact_answers_promptly() {
    let d = Daemon::start("table");
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(10 * 1024));
    let long_header = format!("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "b".repeat(9 * 1024));
    let many_headers =
        format!("GET /healthz HTTP/1.1\r\n{}\r\n", (0..65).map(|i| format!("X-{i}: v\r\n")).collect::<String>());
    let cases: Vec<(&str, Vec<u8>, bool, Want)> = vec![
        (
            "a TLS ClientHello",
            b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03".to_vec(),
            false,
            Want::Status("400 Bad Request", "bad request: invalid token\n"),
        ),
        (
            "text that is not HTTP",
            b"hello there\r\n\r\n".to_vec(),
            false,
            Want::Status("400 Bad Request", "bad request: invalid token\n"),
        ),
        (
            "a NUL byte in the target",
            b"GET /healthz\x00 HTTP/1.1\r\n\r\n".to_vec(),
            false,
            Want::Status("400 Bad Request", "bad request: invalid token\n"),
        ),
        (
            "the HTTP/2 preface",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
            false,
            Want::Status("400 Bad Request", "bad request: invalid HTTP version\n"),
        ),
        (
            "a 10 KiB request line",
            long_target.into_bytes(),
            false,
            Want::Status("431 Request Header Fields Too Large", "request header too large\n"),
        ),
        (
            "a 9 KiB header",
            long_header.into_bytes(),
            false,
            Want::Status("431 Request Header Fields Too Large", "request header too large\n"),
        ),
        (
            "65 headers",
            many_headers.into_bytes(),
            false,
            Want::Status("431 Request Header Fields Too Large", "request header too large\n"),
        ),
        (
            "a Content-Length beyond u64",
            b"GET /healthz HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n".to_vec(),
            false,
            Want::Status("400 Bad Request", "invalid Content-Length\n"),
        ),
        (
            "POST with a 16 EiB Content-Length (body never read)",
            b"POST /pods HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\nxxxx".to_vec(),
            false,
            Want::Status("405 Method Not Allowed", "only GET\n"),
        ),
        (
            "GET announcing a 1 GB body it never sends",
            b"GET /healthz HTTP/1.1\r\nContent-Length: 1000000000\r\n\r\n".to_vec(),
            false,
            Want::Exactly(HEALTHZ_OK),
        ),
        (
            "PUT",
            b"PUT /healthz HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi".to_vec(),
            false,
            Want::Status("405 Method Not Allowed", "only GET\n"),
        ),
        (
            "HEAD",
            b"HEAD /healthz HTTP/1.1\r\n\r\n".to_vec(),
            false,
            Want::Status("405 Method Not Allowed", "only GET\n"),
        ),
        (
            "DELETE",
            b"DELETE /pods HTTP/1.1\r\n\r\n".to_vec(),
            false,
            Want::Status("405 Method Not Allowed", "only GET\n"),
        ),
        (
            "an unknown path",
            b"GET /nope HTTP/1.1\r\n\r\n".to_vec(),
            false,
            Want::Status("404 Not Found", "not found\n"),
        ),
        (
            "an absolute-form target",
            b"GET http://x/healthz HTTP/1.1\r\n\r\n".to_vec(),
            false,
            Want::Status("404 Not Found", "not found\n"),
        ),
        (
            "two pipelined requests (one answer, then close)",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            false,
            Want::Exactly(HEALTHZ_OK),
        ),
        (
            "a request then a half-close",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            true,
            Want::Exactly(HEALTHZ_OK),
        ),
        ("half a request then a half-close", b"GET /heal".to_vec(), true, Want::Closed),
        ("connect and half-close at once", Vec::new(), true, Want::Closed),
        ("bare LF line ends", b"GET /healthz HTTP/1.1\nHost: x\n\n".to_vec(), false, Want::Exactly(HEALTHZ_OK)),
        ("HTTP/1.0 with a query", b"GET /healthz?x=1 HTTP/1.0\r\n\r\n".to_vec(), false, Want::Exactly(HEALTHZ_OK)),
        (
            "the checks listed (?verbose)",
            b"GET /healthz?verbose=1 HTTP/1.0\r\n\r\n".to_vec(),
            false,
            Want::Exactly(HEALTHZ_VERBOSE),
        ),
    ];
    for (name, request, half_close, want) in cases {
        let t = Instant::now();
        let out = exchange(d.addr, &request, half_close);
        let took = t.elapsed();
        let text = String::from_utf8_lossy(&out);
        match want {
            Want::Status(status, body) => {
                assert!(text.starts_with(&format!("HTTP/1.1 {status}\r\n")), "{name}: {text:?}");
                assert!(text.contains("\r\nConnection: close\r\n"), "{name}: {text:?}");
                assert_eq!(text.split_once("\r\n\r\n").map(|(_, b)| b), Some(body), "{name}");
            }
            Want::Exactly(bytes) => assert_eq!(text, String::from_utf8_lossy(bytes), "{name}"),
            Want::Closed => assert!(out.is_empty(), "{name}: {text:?}"),
        }
        assert!(took < PROMPT, "{name}: answered or closed after {took:?}");
        d.assert_healthy(name);
    }
}

#[test]
fn a_hundred_idle_connections_do_not_delay_any_endpoint() {
    let d = Daemon::start("idle");
    let idle: Vec<TcpStream> = (0..100).map(|_| TcpStream::connect(d.addr).unwrap()).collect();
    for _ in 0..10 {
        d.assert_endpoints_answer("100 idle connections");
    }
    drop(idle);
    d.assert_healthy("100 idle connections");
}

#[test]
fn healthz_waits_for_none_of_a_hundred_slow_clients() {
    let d = Daemon::start("p99");
    let p99 = bench_http::healthz_p99_with_slow_clients(d.addr, 100);
    eprintln!("healthz p99 with 100 slow clients: {p99:.2} ms");
    // a /healthz held up by the slow clients waits for a READ_DEADLINE (5
    // s) or fails (counted as 5 s): PROMPT is 5x below; the p99 of the 100
    // is the second slowest, so one stall of the machine does not fail it
    assert!(p99 < PROMPT.as_secs_f64() * 1000.0, "p99 {p99} ms");
    d.assert_healthy("100 slow clients");
}

#[test]
fn ten_idle_connections_and_a_trickler_leave_every_endpoint_reachable() {
    let d = Daemon::start("ten");
    let idle: Vec<TcpStream> = (0..10).map(|_| TcpStream::connect(d.addr).unwrap()).collect();
    let mut trickler = TcpStream::connect(d.addr).unwrap();
    trickler.write_all(b"GET /pods HTTP/1.1\r\nX-Slow: a").unwrap();
    d.assert_endpoints_answer("10 idle connections and a trickler");
    let _ = trickler.write_all(b"a");
    d.assert_endpoints_answer("10 idle connections and a trickler");
    let pods: serde_json::Value = serde_json::from_str(&d.get("/pods").unwrap().1).unwrap();
    assert_eq!(pods["kind"], "PodList");
    drop(idle);
    d.assert_healthy("10 idle connections and a trickler");
}

#[test]
fn a_byte_a_second_is_cut_off_by_the_total_deadline_while_healthz_answers() {
    let d = Daemon::start("slowloris");
    let mut s = TcpStream::connect(d.addr).unwrap();
    let start = Instant::now();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let (mut next_byte, mut next_check) = (start, start);
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    let ended = loop {
        assert!(start.elapsed() < Duration::from_secs(12), "still connected after {:?}", start.elapsed());
        if Instant::now() >= next_byte {
            let _ = s.write(b"a");
            next_byte += Duration::from_secs(1);
        }
        if Instant::now() >= next_check {
            d.assert_endpoints_answer("a byte-a-second client");
            next_check += Duration::from_millis(700);
        }
        match s.read(&mut buf) {
            Ok(0) => break start.elapsed(),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(e) => panic!("{e} after {:?}, got {:?}", start.elapsed(), String::from_utf8_lossy(&out)),
        }
    };
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{text:?}");
    // READ_DEADLINE is 5 s from the accept, however often bytes come (a
    // deadline per read would never close it: the loop's 12 s)
    assert!(ended >= Duration::from_millis(4500) && ended < Duration::from_secs(8), "closed after {ended:?}");
    d.assert_healthy("a byte-a-second client");
}

#[test]
fn connections_beyond_the_cap_are_refused_at_once_and_healthz_recovers_when_they_go() {
    let d = Daemon::start("cap");
    let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS).map(|_| TcpStream::connect(d.addr).unwrap()).collect();
    // accepted in order: the next one finds the table full
    let t = Instant::now();
    let out = exchange(d.addr, b"", false);
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{text:?}");
    assert!(text.ends_with("\r\n\r\ntoo many connections\n"), "{text:?}");
    assert!(t.elapsed() < PROMPT, "refused after {:?}", t.elapsed());
    // at the cap /healthz is refused too (503, or a reset when its request
    // reached the socket after the close)
    let at_cap = d.get("/healthz");
    assert!(matches!(at_cap, Some((503, _)) | None), "{at_cap:?}");
    drop(idle);
    // their closes free the slots at once: within PROMPT, 5x below their
    // READ_DEADLINE (5 s from their accept, a moment ago), which would
    // free them too
    wait_for("/healthz after the idle connections closed", PROMPT, || d.get("/healthz") == Some((200, "ok".into())));
    assert!(d.log().contains("connection(s) refused: 128 open connections is the limit"), "{}", d.log());
    d.assert_healthy("connections beyond the cap");
}

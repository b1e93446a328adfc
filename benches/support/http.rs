//! The read-only HTTP endpoint under slow clients: `/healthz` latency while
//! idle and trickling connections are open. Loopback only, bounded in
//! connections, requests and time. Used by `tests/hostile_http.rs` too.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// `/healthz` requests timed per measurement.
pub const REQUESTS: usize = 100;
/// Most slow clients one measurement opens.
pub const MAX_CLIENTS: usize = 1000;
/// One request's bound: a request that fails or takes longer counts as this.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The whole measurement's bound (requests not made by then count as
/// `REQUEST_TIMEOUT` each).
pub const TOTAL_TIMEOUT: Duration = Duration::from_secs(30);

/// One `GET path` on a new connection: the status code and the body, or
/// None when no response head came, or the server did not close within
/// `timeout`.
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n").ok()?;
    // up to the server's close; a refusing server may reset the connection
    // after its answer, so keep what came before an error
    let (mut out, mut buf) = (Vec::new(), [0u8; 4096]);
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return None,
            Err(_) => break,
        }
    }
    let out = String::from_utf8_lossy(&out);
    let (head, body) = out.split_once("\r\n\r\n")?;
    let code = head.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// Open `n_clients` (at most [`MAX_CLIENTS`]) slow clients to `addr`, which
/// must be a loopback address: every other one connects and sends nothing,
/// the others send a request head one byte every 100 ms and never finish
/// it. Then time [`REQUESTS`] sequential `GET /healthz` and return their p99
/// in milliseconds. A request that is not a 200 within [`REQUEST_TIMEOUT`]
/// counts as that timeout. The slow clients are closed on return.
pub fn healthz_p99_with_slow_clients(addr: SocketAddr, n_clients: usize) -> f64 {
    assert!(addr.ip().is_loopback(), "loopback only: {addr}");
    let n = n_clients.min(MAX_CLIENTS);
    let head = b"GET /healthz HTTP/1.1\r\nHost: slow\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut slow: Vec<(TcpStream, usize)> = Vec::with_capacity(n);
    for _ in 0..n {
        match TcpStream::connect_timeout(&addr, REQUEST_TIMEOUT) {
            Ok(s) => {
                let _ = s.set_nonblocking(true);
                slow.push((s, 0));
            }
            Err(e) => eprintln!("slow client {} of {n}: {e}", slow.len() + 1),
        }
    }
    let start = Instant::now();
    let mut last_trickle = start;
    let mut ms = Vec::with_capacity(REQUESTS);
    for _ in 0..REQUESTS {
        if start.elapsed() > TOTAL_TIMEOUT {
            ms.push(REQUEST_TIMEOUT.as_secs_f64() * 1000.0);
            continue;
        }
        if last_trickle.elapsed() >= Duration::from_millis(100) {
            last_trickle = Instant::now();
            for (s, sent) in slow.iter_mut().skip(1).step_by(2) {
                if *sent < head.len() && s.write(&head[*sent..*sent + 1]).is_ok_and(|n| n == 1) {
                    *sent += 1;
                }
            }
        }
        let t = Instant::now();
        let ok = get(addr, "/healthz", REQUEST_TIMEOUT).is_some_and(|(code, _)| code == 200);
        let took = if ok { t.elapsed() } else { REQUEST_TIMEOUT };
        ms.push(took.as_secs_f64() * 1000.0);
    }
    drop(slow);
    ms.sort_by(f64::total_cmp);
    ms[(ms.len() * 99).div_ceil(100) - 1]
}

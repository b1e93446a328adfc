//! Host names of probes and hooks, looked up off the threads that run them.
//!
//! The system resolver (`getaddrinfo`: `/etc/hosts`, DNS, nsswitch) only
//! blocks, for as long as its nameservers make it (seconds per attempt). So
//! a lookup is a job for a small pool of `resolver` threads, started on the
//! first host name and never more than [`MAX_THREADS`]; the asker gets a
//! [`Lookup`]: one end of a socket pair it polls with its other sockets
//! (the prober thread with every probe in flight, a hook with its
//! cancellation), and its own deadline bounds the wait. A lookup nobody
//! waits for any more (its probe timed out) is dropped before it is made.
//! At most [`MAX_QUEUED`] lookups wait; beyond that a lookup fails at once.
//! Nothing is cached, as in the kubelet (Go's resolver keeps no cache).

use std::io::{ErrorKind, Read, Write};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::LazyLock;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use parking_lot::Mutex;
use thiserror::Error;

/// Resolver threads at most.
pub const MAX_THREADS: usize = 4;
/// Lookups waiting for a thread at most.
pub const MAX_QUEUED: usize = 64;
/// The answer's size at most (a list of addresses or an error).
const MAX_ANSWER: usize = 4096;

/// Why a host name has no addresses; shown after `lookup <host>: ` in a
/// probe's or hook's failure, in Go's resolver's words where it has some.
#[derive(Debug, Error)]
pub enum LookupError {
    #[error("no such host")]
    NoSuchHost,
    #[error("no suitable address found")]
    NoAddress,
    /// Another `getaddrinfo` failure: its code and text.
    #[error("{text}")]
    Resolver { code: i32, text: String },
    #[error("cannot start a resolver thread: {0}")]
    NoThread(std::io::Error),
    #[error("too many host name lookups waiting")]
    TooManyWaiting,
    #[error("no resolver")]
    NoResolver,
    /// The asker's end of the answer socket failed (making or reading it).
    #[error("{0}")]
    Socket(std::io::Error),
    #[error("answer too long")]
    AnswerTooLong,
    #[error("the resolver gave no answer")]
    NoAnswer,
}

struct Job {
    host: String,
    answer: UnixStream,
}

struct Pool {
    tx: Sender<Job>,
    rx: Receiver<Job>,
    /// (threads started, lookups asked for and not answered yet)
    threads: Mutex<(usize, usize)>,
}

static POOL: LazyLock<Pool> = LazyLock::new(|| {
    let (tx, rx) = crossbeam_channel::bounded(MAX_QUEUED);
    Pool { tx, rx, threads: Mutex::new((0, 0)) }
});

/// A lookup in progress: poll [`Lookup::fd`] for `POLLIN`, then
/// [`Lookup::read`].
#[derive(Debug)]
pub struct Lookup {
    answer: UnixStream,
    buf: Vec<u8>,
}

impl Lookup {
    /// Ask for `host`'s addresses. An error (no thread could be started,
    /// too many lookups waiting) is a failed lookup.
    pub fn start(host: &str) -> Result<Lookup, LookupError> {
        let (mine, theirs) = UnixStream::pair().map_err(LookupError::Socket)?;
        mine.set_nonblocking(true).map_err(LookupError::Socket)?;
        let pool = &*POOL;
        let mut t = pool.threads.lock();
        t.1 += 1;
        // more lookups than threads: this one would wait for another's
        if t.1 > t.0 && t.0 < MAX_THREADS {
            match crate::base::thread::spawn("resolver", Some(crate::base::thread::WORKER_STACK), || serve(&POOL)) {
                Ok(_) => t.0 += 1,
                Err(e) if t.0 == 0 => {
                    t.1 -= 1;
                    return Err(LookupError::NoThread(e));
                }
                Err(e) => log::warn!("resolver: cannot start another thread: {e}"),
            }
        }
        if let Err(e) = pool.tx.try_send(Job { host: host.to_string(), answer: theirs }) {
            t.1 -= 1;
            return Err(match e {
                TrySendError::Full(_) => LookupError::TooManyWaiting,
                TrySendError::Disconnected(_) => LookupError::NoResolver,
            });
        }
        Ok(Lookup { answer: mine, buf: Vec::new() })
    }

    pub fn fd(&self) -> RawFd {
        self.answer.as_raw_fd()
    }

    /// The answer once it is whole: the addresses in the resolver's order
    /// of preference, or the error (in Go's words: `no such host`).
    /// `None`: not yet.
    pub fn read(&mut self) -> Option<Result<Vec<IpAddr>, LookupError>> {
        let mut chunk = [0u8; 512];
        loop {
            match self.answer.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) if self.buf.len() + n > MAX_ANSWER => return Some(Err(LookupError::AnswerTooLong)),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Some(Err(LookupError::Socket(e))),
            }
        }
        Some(decode(&String::from_utf8_lossy(&self.buf)))
    }
}

/// The answer on the wire: `+ip ip ...`, `!` (no such host) or
/// `-<code> <text>` (another resolver error). A resolver thread only
/// answers what [`lookup`] returns; anything else is sent as no answer.
fn encode(r: &Result<Vec<IpAddr>, LookupError>) -> String {
    match r {
        Ok(ips) => format!("+{}", ips.iter().map(|ip| ip.to_string()).collect::<Vec<_>>().join(" ")),
        Err(LookupError::NoSuchHost) => "!".to_string(),
        Err(LookupError::NoAddress) => "+".to_string(),
        Err(LookupError::Resolver { code, text }) => format!("-{code} {text}"),
        Err(_) => String::new(),
    }
}

fn decode(s: &str) -> Result<Vec<IpAddr>, LookupError> {
    match s.split_at_checked(1) {
        Some(("+", ips)) => {
            let ips: Vec<IpAddr> = ips.split(' ').filter_map(|ip| ip.parse().ok()).collect();
            if ips.is_empty() { Err(LookupError::NoAddress) } else { Ok(ips) }
        }
        Some(("!", "")) => Err(LookupError::NoSuchHost),
        Some(("-", e)) => match e.split_once(' ').and_then(|(code, text)| Some((code.parse().ok()?, text))) {
            Some((code, text)) => Err(LookupError::Resolver { code, text: text.to_string() }),
            None => Err(LookupError::NoAnswer),
        },
        _ => Err(LookupError::NoAnswer),
    }
}

fn serve(pool: &Pool) {
    while let Ok(mut job) = pool.rx.recv() {
        if !asker_gone(&job.answer) {
            let answer = encode(&lookup(&job.host));
            // the answer is small and the socket empty: this write does
            // not wait; a closed asker is an error nobody needs
            let _ = job.answer.write_all(answer.as_bytes());
        }
        pool.threads.lock().1 -= 1;
    }
}

/// Whether the asker closed its end (its probe ended meanwhile).
fn asker_gone(s: &UnixStream) -> bool {
    let mut fds = [libc::pollfd { fd: s.as_raw_fd(), events: 0, revents: 0 }];
    matches!(crate::sys::poll(&mut fds, 0), Ok(1)) && fds[0].revents & libc::POLLHUP != 0
}

/// `host`'s addresses, in the words of Go's resolver on failure.
fn lookup(host: &str) -> Result<Vec<IpAddr>, LookupError> {
    #[cfg(test)]
    if let Some(r) = tests::injected(host) {
        return r;
    }
    match crate::sys::getaddrinfo(host) {
        Ok(ips) if ips.is_empty() => Err(LookupError::NoAddress),
        Ok(ips) => Ok(ips),
        Err((code, _)) if code == libc::EAI_NONAME || code == libc::EAI_NODATA => Err(LookupError::NoSuchHost),
        Err((code, text)) => Err(LookupError::Resolver { code, text }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Fault injection: `*.slow.test` takes 3 s and then fails;
    /// `two.addrs.test` has 127.0.0.2 first and 127.0.0.1 second.
    pub(super) fn injected(host: &str) -> Option<Result<Vec<IpAddr>, LookupError>> {
        if host == "two.addrs.test" {
            return Some(Ok(vec!["127.0.0.2".parse().unwrap(), "127.0.0.1".parse().unwrap()]));
        }
        host.ends_with(".slow.test").then(|| {
            std::thread::sleep(Duration::from_secs(3));
            Err(LookupError::NoSuchHost)
        })
    }

    /// Wait for `l`'s answer up to `within`.
    pub(crate) fn wait(l: &mut Lookup, within: Duration) -> Option<Result<Vec<IpAddr>, LookupError>> {
        let until = Instant::now() + within;
        loop {
            if let Some(r) = l.read() {
                return Some(r);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let mut fds = [libc::pollfd { fd: l.fd(), events: libc::POLLIN, revents: 0 }];
            crate::sys::poll(&mut fds, left.as_millis().max(1) as i32).unwrap();
        }
    }

    #[test]
    fn names_resolve_through_the_system_resolver() {
        // /etc/hosts has localhost on every machine
        let mut l = Lookup::start("localhost").unwrap();
        let ips = wait(&mut l, Duration::from_secs(10)).expect("answered").unwrap();
        assert!(ips.iter().all(|ip| ip.is_loopback()) && !ips.is_empty(), "{ips:?}");
        let mut l = Lookup::start("nothing-here.invalid").unwrap();
        match wait(&mut l, Duration::from_secs(30)).expect("answered") {
            Err(e) => assert!(!e.to_string().is_empty()),
            Ok(ips) => panic!("nothing-here.invalid resolved to {ips:?}"),
        }
    }

    #[test]
    fn a_slow_name_holds_up_no_other_lookup() {
        let t = Instant::now();
        // (another test of this process may hold a third thread the same way)
        let slow: Vec<Lookup> = (0..2).map(|i| Lookup::start(&format!("n{i}.slow.test")).unwrap()).collect();
        // two threads are stuck for 3 s; another answers localhost now
        let mut quick = Lookup::start("localhost").unwrap();
        assert!(wait(&mut quick, Duration::from_secs(2)).expect("answered while others hang").is_ok());
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(POOL.threads.lock().0 <= MAX_THREADS);
        drop(slow);
    }

    #[test]
    fn a_lookup_nobody_waits_for_is_seen_as_such() {
        let (asker, job) = UnixStream::pair().unwrap();
        assert!(!asker_gone(&job));
        drop(asker);
        assert!(asker_gone(&job));
    }

    #[test]
    fn answers_round_trip() {
        let ips: Vec<IpAddr> = vec!["10.0.0.1".parse().unwrap(), "fd00::1".parse().unwrap()];
        assert_eq!(decode(&encode(&Ok(ips.clone()))).unwrap(), ips);
        let e = decode(&encode(&Err(LookupError::NoSuchHost))).unwrap_err();
        assert!(matches!(e, LookupError::NoSuchHost) && e.to_string() == "no such host", "{e}");
        let e = decode(&encode(&Err(LookupError::NoAddress))).unwrap_err();
        assert!(matches!(e, LookupError::NoAddress) && e.to_string() == "no suitable address found", "{e}");
        let gai = LookupError::Resolver { code: libc::EAI_AGAIN, text: "Temporary failure in name resolution".into() };
        let e = decode(&encode(&Err(gai))).unwrap_err();
        assert!(matches!(e, LookupError::Resolver { code: libc::EAI_AGAIN, .. }), "{e:?}");
        assert_eq!(e.to_string(), "Temporary failure in name resolution");
        let e = decode("").unwrap_err();
        assert!(matches!(e, LookupError::NoAnswer) && e.to_string() == "the resolver gave no answer", "{e}");
    }
}

//! `tcpSocket` and `httpGet` probes and hooks as non-blocking state
//! machines: the prober thread polls many at once, each bounded by its
//! deadline, so no probe has a thread and none can hold another up.
//!
//! Behaviour and texts are the kubelet's (`pkg/probe/tcp`, `pkg/probe/http`):
//! a TCP probe succeeds when the connection is established and closes it at
//! once; an HTTP probe sends a `GET` with `User-Agent: kube-probe/M.m` and
//! `Accept: */*` unless the probe's headers set them, no keep-alive, and
//! succeeds on a status from 200 to 399. A redirect to the same host is
//! followed (at most 10), one to another host is a success with a warning.
//! Failures read as Go's dialer and HTTP client word them
//! (`dial tcp 10.0.0.5:80: connect: connection refused`,
//! `HTTP probe failed with statuscode: 503`).
//!
//! A `host` that is a name is looked up by the [`super::resolve`] pool
//! while the probe waits on its answer like on a socket; the addresses are
//! tried in the resolver's order, the next when one refuses (Go's serial
//! dial), and the probe's timeout covers the lookup.
//!
//! `scheme: HTTPS` speaks TLS (rustls, driven over the same non-blocking
//! socket) without checking the server's certificate, as the kubelet's
//! `InsecureSkipVerify`: the handshake's signatures are still verified
//! against the certificate the server sent.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use super::state::Outcome;

/// The `User-Agent` of probes (the kubelet's, with the Kubernetes version
/// whose API podwarden implements).
pub const PROBE_USER_AGENT: &str = "kube-probe/1.34";
/// The `User-Agent` of lifecycle hooks.
pub const HOOK_USER_AGENT: &str = "kube-lifecycle/1.34";
/// Response bytes read at most (the kubelet reads 10 KiB of a body); a
/// response head must fit in it too.
pub const MAX_RESPONSE: usize = 10 * 1024 + 8 * 1024;
/// Same-host redirects followed at most.
pub const MAX_REDIRECTS: u32 = 10;

/// An HTTP GET to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGet {
    /// The host as written in the URL: the probe's `host` (an address or a
    /// name) or the pod IP.
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
    /// The probe's headers in order (`Host` replaces the request's host).
    pub headers: Vec<(String, String)>,
    pub user_agent: &'static str,
    /// `scheme: HTTPS`.
    pub tls: bool,
}

impl HttpGet {
    /// The GET a probe's or hook's `httpGet` makes for container `c` of a
    /// pod at `pod_ip`: its host or the pod's IP, its port, its path with a
    /// leading `/`, its headers.
    pub fn of(
        h: &k8s_openapi::api::core::v1::HTTPGetAction,
        pod_ip: Option<&str>,
        c: &k8s_openapi::api::core::v1::Container,
        user_agent: &'static str,
    ) -> Result<HttpGet, super::TargetError> {
        let (host, port) = super::target(pod_ip, h.host.as_deref(), &h.port, c)?;
        let path = match h.path.as_deref() {
            None | Some("") => "/".to_string(),
            Some(p) if p.starts_with('/') => p.to_string(),
            Some(p) => format!("/{p}"),
        };
        let headers = h.http_headers.iter().flatten().map(|hh| (hh.name.clone(), hh.value.clone())).collect();
        let tls = h.scheme.as_deref() == Some("HTTPS");
        Ok(HttpGet { host, port, path, headers, user_agent, tls })
    }

    fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{}", host_port(&self.host, self.port), self.path)
    }

    fn request(&self) -> Vec<u8> {
        let mut host = host_port(&self.host, self.port);
        let mut lines = Vec::new();
        let (mut agent, mut accept) = (Some(self.user_agent.to_string()), Some("*/*".to_string()));
        for (name, value) in &self.headers {
            if name.eq_ignore_ascii_case("host") {
                host = value.clone();
            } else if name.eq_ignore_ascii_case("user-agent") {
                agent = None;
                lines.push(format!("{name}: {value}"));
            } else if name.eq_ignore_ascii_case("accept") {
                // an empty Accept removes the header, as the kubelet does
                accept = None;
                if !value.is_empty() {
                    lines.push(format!("{name}: {value}"));
                }
            } else if name.eq_ignore_ascii_case("connection") {
                continue;
            } else {
                lines.push(format!("{name}: {value}"));
            }
        }
        let mut req = format!("GET {} HTTP/1.1\r\nHost: {host}\r\n", self.path);
        if let Some(a) = agent {
            req.push_str(&format!("User-Agent: {a}\r\n"));
        }
        if let Some(a) = accept {
            req.push_str(&format!("Accept: {a}\r\n"));
        }
        for l in lines {
            req.push_str(&l);
            req.push_str("\r\n");
        }
        req.push_str("Connection: close\r\n\r\n");
        req.into_bytes()
    }
}

/// `host:port`, IPv6 in brackets (Go's `net.JoinHostPort`).
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// An errno as Go's `syscall.Errno` prints it ("connection refused").
fn errno_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    let s = s.split(" (os error").next().unwrap_or(&s).to_string();
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => s,
    }
}

fn dial_error(addr: SocketAddr, e: &std::io::Error) -> String {
    format!("dial tcp {addr}: connect: {}", errno_text(e))
}

#[derive(Debug)]
enum Step {
    Connecting,
    Writing {
        request: Vec<u8>,
        written: usize,
    },
    Reading {
        buf: Vec<u8>,
    },
    /// HTTPS: the request went into the TLS session; its records go out
    /// and the response comes in through it.
    Tls {
        conn: Box<rustls::ClientConnection>,
        buf: Vec<u8>,
    },
}

/// Accepts any server certificate (the kubelet's `InsecureSkipVerify`);
/// the handshake signatures are still checked with the certificate's key.
/// Also `podwarden join`'s anonymous discovery read, whose content is
/// checked by other means.
#[derive(Debug)]
pub struct AnyCertificate(pub Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The TLS client settings of every HTTPS probe and hook (built once).
static TLS: LazyLock<Result<Arc<rustls::ClientConfig>, rustls::Error>> = LazyLock::new(|| {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    Ok(Arc::new(config))
});

/// Why an HTTPS probe could not begin its TLS session; shown after
/// `Get "<url>": `.
#[derive(Debug, thiserror::Error)]
enum TlsStartError {
    /// The client settings could not be built.
    #[error("{0}")]
    Config(rustls::Error),
    /// The host is no name a certificate could be for.
    #[error("{0}")]
    ServerName(rustls::pki_types::InvalidDnsNameError),
    #[error("{0}")]
    Session(rustls::Error),
    #[error("{0}")]
    Request(std::io::Error),
}

/// A TLS session to `get`'s host holding the request, ready to go out.
fn tls_session(get: &HttpGet) -> Result<Box<rustls::ClientConnection>, TlsStartError> {
    let config = TLS.as_ref().map_err(|e| TlsStartError::Config(e.clone()))?.clone();
    // an IP address sends no SNI, a name does (Go's rules)
    let name = rustls::pki_types::ServerName::try_from(get.host.clone()).map_err(TlsStartError::ServerName)?;
    let mut conn = rustls::ClientConnection::new(config, name).map_err(TlsStartError::Session)?;
    conn.writer().write_all(&get.request()).map_err(TlsStartError::Request)?;
    Ok(Box::new(conn))
}

#[derive(Debug)]
enum What {
    Tcp { host: String },
    Http { get: HttpGet, redirects: u32 },
}

impl What {
    fn host(&self) -> &str {
        match self {
            What::Tcp { host } => host,
            What::Http { get, .. } => &get.host,
        }
    }

    /// A failure to connect (`dial tcp ...`), as each kind words it.
    fn dial_failure(&self, dial: String) -> Outcome {
        match self {
            What::Tcp { .. } => Outcome::Failure(dial),
            What::Http { get, .. } => Outcome::Failure(format!("Get {:?}: {dial}", get.url())),
        }
    }
}

/// The probe's connection.
#[derive(Debug)]
enum Conn {
    /// The host is a name being looked up.
    Lookup(super::resolve::Lookup),
    /// Connecting or connected to `addr`; `rest` are the host's other
    /// addresses, tried in turn when this one fails.
    Open { stream: TcpStream, addr: SocketAddr, rest: Vec<SocketAddr> },
}

impl Conn {
    /// Connect to the first of `addrs` that does not fail at once; the
    /// last error when all do.
    fn dial(addrs: Vec<SocketAddr>) -> Result<Conn, (SocketAddr, std::io::Error)> {
        let mut addrs = addrs.into_iter();
        let mut last = None;
        while let Some(addr) = addrs.next() {
            match crate::sys::tcp_connect_nonblocking(addr) {
                Ok(stream) => return Ok(Conn::Open { stream, addr, rest: addrs.collect() }),
                Err(e) => last = Some((addr, e)),
            }
        }
        Err(last.unwrap_or_else(|| {
            (SocketAddr::from(([0, 0, 0, 0], 0)), std::io::Error::new(ErrorKind::AddrNotAvailable, "no address"))
        }))
    }
}

/// One probe or hook in flight.
#[derive(Debug)]
pub struct NetProbe {
    conn: Conn,
    port: u16,
    step: Step,
    what: What,
    pub deadline: Instant,
    /// The status of the HTTP answer that failed the probe (outside
    /// 200..=399); `None` while no answer failed it.
    failed_status: Option<u16>,
}

impl NetProbe {
    /// Start a TCP probe of `host` (an address or a name) and `port`; an
    /// immediate failure is the outcome at once.
    pub fn tcp(host: &str, port: u16, deadline: Instant) -> Result<NetProbe, Outcome> {
        Self::start(What::Tcp { host: host.to_string() }, port, deadline)
    }

    /// Start an HTTP GET.
    pub fn http(get: HttpGet, deadline: Instant) -> Result<NetProbe, Outcome> {
        let port = get.port;
        Self::start(What::Http { get, redirects: 0 }, port, deadline)
    }

    fn start(what: What, port: u16, deadline: Instant) -> Result<NetProbe, Outcome> {
        let host = what.host();
        let conn = match host.parse::<IpAddr>() {
            Ok(ip) => Conn::dial(vec![SocketAddr::new(ip, port)])
                .map_err(|(addr, e)| what.dial_failure(dial_error(addr, &e)))?,
            Err(_) => Conn::Lookup(
                super::resolve::Lookup::start(host)
                    .map_err(|e| what.dial_failure(format!("dial tcp: lookup {host}: {e}")))?,
            ),
        };
        Ok(NetProbe { conn, port, step: Step::Connecting, what, deadline, failed_status: None })
    }

    pub fn fd(&self) -> RawFd {
        match &self.conn {
            Conn::Lookup(l) => l.fd(),
            Conn::Open { stream, .. } => stream.as_raw_fd(),
        }
    }

    /// The status code of the HTTP answer that failed the probe (the
    /// `HTTP probe failed with statuscode` outcome); `None` when it failed
    /// before an answer (a transport error) or did not fail. Lifecycle
    /// hooks take such an answer as a success.
    pub fn failed_status(&self) -> Option<u16> {
        self.failed_status
    }

    /// The poll events this probe waits for.
    pub fn events(&self) -> i16 {
        if let Conn::Lookup(_) = self.conn {
            return libc::POLLIN;
        }
        match &self.step {
            Step::Connecting | Step::Writing { .. } => libc::POLLOUT,
            Step::Reading { .. } => libc::POLLIN,
            Step::Tls { conn, .. } if conn.wants_write() => libc::POLLOUT,
            Step::Tls { .. } => libc::POLLIN,
        }
    }

    /// The deadline passed: the outcome, in the kubelet's words.
    pub fn timed_out(&self) -> Outcome {
        match (&self.what, &self.conn) {
            (What::Tcp { host }, Conn::Lookup(_)) => Outcome::Failure(format!("dial tcp: lookup {host}: i/o timeout")),
            (What::Tcp { .. }, Conn::Open { addr, .. }) => Outcome::Failure(format!("dial tcp {addr}: i/o timeout")),
            (What::Http { get, .. }, _) => Outcome::Failure(format!(
                "Get {:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
                get.url()
            )),
        }
    }

    /// Go on after poll said the socket is ready; `Some` when done.
    pub fn advance(&mut self) -> Option<Outcome> {
        loop {
            let (stream, addr, rest) = match &mut self.conn {
                Conn::Lookup(l) => {
                    let ips = match l.read()? {
                        Ok(ips) => ips,
                        Err(e) => {
                            return Some(self.what.dial_failure(format!("dial tcp: lookup {}: {e}", self.what.host())));
                        }
                    };
                    let addrs = ips.into_iter().map(|ip| SocketAddr::new(ip, self.port)).collect();
                    match Conn::dial(addrs) {
                        Ok(conn) => self.conn = conn,
                        Err((addr, e)) => return Some(self.what.dial_failure(dial_error(addr, &e))),
                    }
                    // poll for the connection
                    return None;
                }
                Conn::Open { stream, addr, rest } => (stream, *addr, rest),
            };
            match &mut self.step {
                Step::Connecting => {
                    let err = match stream.take_error() {
                        Ok(None) => None,
                        Ok(Some(e)) | Err(e) => Some(e),
                    };
                    // poll reported writability; SO_ERROR says whether the
                    // connect succeeded
                    if let Some(e) = err {
                        // the host's next address, if it has one
                        let failed = match Conn::dial(std::mem::take(rest)) {
                            Ok(conn) => {
                                self.conn = conn;
                                return None;
                            }
                            Err(_) => dial_error(addr, &e),
                        };
                        return Some(self.what.dial_failure(failed));
                    }
                    match stream.peer_addr() {
                        Ok(_) => {}
                        Err(e) if e.kind() == ErrorKind::NotConnected => return None, // not yet
                        Err(e) => return Some(Outcome::Failure(errno_text(&e))),
                    }
                    match &self.what {
                        What::Tcp { .. } => return Some(Outcome::Success),
                        What::Http { get, .. } if get.tls => match tls_session(get) {
                            Ok(conn) => self.step = Step::Tls { conn, buf: Vec::with_capacity(1024) },
                            Err(e) => return Some(Outcome::Failure(format!("Get {:?}: {e}", get.url()))),
                        },
                        What::Http { get, .. } => {
                            self.step = Step::Writing { request: get.request(), written: 0 };
                        }
                    }
                }
                Step::Writing { request, written } => {
                    match stream.write(&request[*written..]) {
                        Ok(n) => *written += n,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        Err(e) => return Some(self.http_failure(addr, &e)),
                    }
                    if *written == request.len() {
                        self.step = Step::Reading { buf: Vec::with_capacity(1024) };
                    }
                }
                Step::Reading { buf } => {
                    let mut chunk = [0u8; 4096];
                    let room = MAX_RESPONSE - buf.len();
                    let eof = match stream.read(&mut chunk[..room.min(4096)]) {
                        Ok(0) => true,
                        Ok(n) => {
                            buf.extend_from_slice(&chunk[..n]);
                            buf.len() >= MAX_RESPONSE
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        Err(e) => return Some(self.http_failure(addr, &e)),
                    };
                    let buf = std::mem::take(buf);
                    match self.response(&buf, eof) {
                        Some(done) => return done,
                        None => self.step = Step::Reading { buf },
                    }
                    if eof {
                        return None;
                    }
                }
                Step::Tls { conn, buf } => {
                    let eof = match tls_step(conn, stream, buf) {
                        Ok(Some(eof)) => eof,
                        Ok(None) => return None,
                        Err(TlsError::Io(e)) => return Some(self.http_failure(addr, &e)),
                        Err(TlsError::Tls(e)) => return Some(self.tls_failure(&e)),
                    };
                    let Step::Tls { conn, buf } = std::mem::replace(&mut self.step, Step::Connecting) else {
                        unreachable!("in the TLS step")
                    };
                    match self.response(&buf, eof) {
                        Some(done) => return done,
                        None => self.step = Step::Tls { conn, buf },
                    }
                    if eof {
                        return None;
                    }
                }
            }
        }
    }

    fn tls_failure(&self, e: &rustls::Error) -> Outcome {
        match &self.what {
            What::Http { get, .. } => Outcome::Failure(format!("Get {:?}: remote error: tls: {e}", get.url())),
            What::Tcp { .. } => Outcome::Failure(e.to_string()),
        }
    }

    fn http_failure(&self, addr: SocketAddr, e: &std::io::Error) -> Outcome {
        if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            return self.tls_failure(tls);
        }
        match &self.what {
            What::Http { get, .. } => {
                Outcome::Failure(format!("Get {:?}: read tcp {addr}: {}", get.url(), errno_text(e)))
            }
            What::Tcp { .. } => Outcome::Failure(errno_text(e)),
        }
    }

    /// The response so far: `Some(Some(outcome))` when decided,
    /// `Some(None)` after a redirect was followed (a new hop is in
    /// flight), `None` to read on.
    fn response(&mut self, buf: &[u8], eof: bool) -> Option<Option<Outcome>> {
        let What::Http { get, redirects } = &self.what else { return Some(Some(Outcome::Success)) };
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut headers);
        let head_len = match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if !eof && buf.len() < MAX_RESPONSE => return None,
            Ok(httparse::Status::Partial) => {
                return Some(Some(Outcome::Failure(format!("Get {:?}: EOF", get.url()))));
            }
            Err(e) => {
                return Some(Some(Outcome::Failure(format!(
                    "Get {:?}: net/http: HTTP/1.x transport connection broken: malformed HTTP response: {e}",
                    get.url()
                ))));
            }
        };
        let code = resp.code.unwrap_or(0);
        if (200..300).contains(&code) {
            return Some(Some(Outcome::Success));
        }
        if (300..400).contains(&code) {
            let location = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("location"))
                .map(|h| String::from_utf8_lossy(h.value).into_owned());
            let body = String::from_utf8_lossy(&buf[head_len..]).into_owned();
            let Some(location) = location else {
                // nothing to follow: the 3xx itself is the answer
                return Some(Some(Outcome::Success));
            };
            match same_host_target(get, &location) {
                Some(_) if *redirects >= MAX_REDIRECTS - 1 => {
                    return Some(Some(Outcome::Failure(format!("Get {:?}: stopped after 10 redirects", get.url()))));
                }
                Some((path, tls, port)) => {
                    let mut next = get.clone();
                    next.path = path;
                    next.tls = tls;
                    next.port = port;
                    let what = What::Http { get: next, redirects: redirects + 1 };
                    return match Self::start(what, port, self.deadline) {
                        Ok(p) => {
                            *self = p;
                            Some(None)
                        }
                        Err(o) => Some(Some(o)),
                    };
                }
                None => {
                    return Some(Some(Outcome::Warning(format!("Probe terminated redirects, Response body: {body}"))));
                }
            }
        }
        self.failed_status = Some(code);
        Some(Some(Outcome::Failure(format!("HTTP probe failed with statuscode: {code}"))))
    }
}

enum TlsError {
    Io(std::io::Error),
    Tls(rustls::Error),
}

/// Move a TLS session on: send what it has, take in what came, append the
/// plaintext to `buf`. `Ok(None)`: wait for the socket; `Ok(Some(eof))`:
/// new plaintext (or the end) to look at.
fn tls_step(
    conn: &mut rustls::ClientConnection,
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> Result<Option<bool>, TlsError> {
    loop {
        while conn.wants_write() {
            match conn.write_tls(stream) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(TlsError::Io(e)),
            }
        }
        let mut chunk = [0u8; 4096];
        let room = MAX_RESPONSE - buf.len();
        match conn.reader().read(&mut chunk[..room.min(4096)]) {
            // the server closed the session
            Ok(0) => return Ok(Some(true)),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(Some(buf.len() >= MAX_RESPONSE));
            }
            // closed without close_notify: the end, as Go's client takes it
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(Some(true)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(TlsError::Io(e)),
        }
        match conn.read_tls(stream) {
            Ok(0) => return Ok(Some(true)),
            Ok(_) => {
                conn.process_new_packets().map_err(TlsError::Tls)?;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(TlsError::Io(e)),
        }
    }
}

/// Where a redirect leads when it stays on the same host (by name, as Go's
/// redirect check compares `Hostname()`): the new path, whether it is
/// HTTPS, and the port; `None` for another host.
fn same_host_target(get: &HttpGet, location: &str) -> Option<(String, bool, u16)> {
    if location.starts_with('/') && !location.starts_with("//") {
        return Some((location.to_string(), get.tls, get.port));
    }
    let (tls, rest) = match location.strip_prefix("http://") {
        Some(rest) => (false, rest),
        None => (true, location.strip_prefix("https://")?),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let hostname = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        authority.split(':').next().unwrap_or("")
    };
    let port = authority.rsplit_once(':').filter(|(h, _)| !h.ends_with(']') || authority.starts_with('['));
    let port = match port {
        Some((_, p)) => p.parse::<u16>().ok()?,
        None if tls => 443,
        None => 80,
    };
    (hostname == get.host).then(|| (path.to_string(), tls, port))
}

/// `ip` (an address literal) and `port`; `None` when `ip` is no address.
pub fn socket_addr(ip: &str, port: u16) -> Option<SocketAddr> {
    ip.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, port))
}

/// An HTTPS server for tests (unit and end-to-end): answers every request
/// with the status it is told, over TLS with the certificate it is given.
#[doc(hidden)]
pub mod test_tls {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU16, Ordering};

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    /// A running server; it runs until the process ends.
    pub struct HttpsServer {
        pub port: u16,
        status: Arc<AtomicU16>,
    }

    impl HttpsServer {
        /// Listen on `ip` (port 0: any) with the PEM files `cert` and `key`.
        pub fn start(ip: &str, cert: &std::path::Path, key: &std::path::Path) -> std::io::Result<HttpsServer> {
            let bad = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .map_err(|e| bad(e.to_string()))?
                .collect::<Result<_, _>>()
                .map_err(|e| bad(e.to_string()))?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(e.to_string()))?;
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| bad(e.to_string()))?
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .map_err(|e| bad(e.to_string()))?;
            let config = Arc::new(config);
            let l = TcpListener::bind((ip, 0))?;
            let port = l.local_addr()?.port();
            let status = Arc::new(AtomicU16::new(200));
            let st = status.clone();
            crate::base::thread::spawn("test-https", None, move || {
                for conn in l.incoming() {
                    let Ok(mut tcp) = conn else { return };
                    let Ok(mut tls) = rustls::ServerConnection::new(config.clone()) else { continue };
                    let code = st.load(Ordering::SeqCst);
                    let _ = tcp.set_read_timeout(Some(std::time::Duration::from_secs(2)));
                    let mut s = rustls::Stream::new(&mut tls, &mut tcp);
                    let mut buf = [0u8; 4096];
                    let mut seen = Vec::new();
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                    }
                    let body = if code < 400 { "ok" } else { "down" };
                    let _ = write!(s, "HTTP/1.1 {code} X\r\nContent-Length: {}\r\n\r\n{body}", body.len());
                    let _ = s.flush();
                    tls.send_close_notify();
                    let _ = tls.write_tls(&mut tcp);
                }
            })?;
            Ok(HttpsServer { port, status })
        }

        /// The status every later answer has.
        pub fn set_status(&self, code: u16) {
            self.status.store(code, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Duration;

    fn run(mut p: NetProbe) -> Outcome {
        finish(&mut p)
    }

    /// Drive `p` to its outcome (it stays for a look at its state).
    fn finish(p: &mut NetProbe) -> Outcome {
        loop {
            let mut fds = [libc::pollfd { fd: p.fd(), events: p.events(), revents: 0 }];
            let left = p.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return p.timed_out();
            }
            crate::sys::poll(&mut fds, left.as_millis().max(1) as i32).unwrap();
            if fds[0].revents != 0
                && let Some(o) = p.advance()
            {
                return o;
            }
        }
    }

    fn deadline() -> Instant {
        Instant::now() + Duration::from_secs(2)
    }

    fn get(addr: SocketAddr, path: &str) -> HttpGet {
        HttpGet {
            host: addr.ip().to_string(),
            port: addr.port(),
            path: path.into(),
            headers: vec![],
            user_agent: PROBE_USER_AGENT,
            tls: false,
        }
    }

    /// A one-connection-at-a-time server answering each request with
    /// `answer(path)`; returns its address and the requests it saw.
    fn serve(answer: impl Fn(&str) -> String + Send + 'static) -> (SocketAddr, crossbeam_channel::Receiver<String>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        crate::base::thread::spawn("test-http", None, move || {
            for conn in l.incoming() {
                let Ok(mut c) = conn else { return };
                let mut buf = vec![0u8; 4096];
                let mut n = 0;
                while !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf[n..]) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => n += k,
                    }
                }
                let req = String::from_utf8_lossy(&buf[..n]).into_owned();
                let path = req.split(' ').nth(1).unwrap_or("").to_string();
                let _ = tx.send(req);
                let _ = c.write_all(answer(&path).as_bytes());
            }
        })
        .unwrap();
        (addr, rx)
    }

    #[test]
    fn tcp_succeeds_on_a_listener_and_fails_as_go_says_on_a_closed_port() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        assert_eq!(run(NetProbe::tcp("127.0.0.1", addr.port(), deadline()).unwrap()), Outcome::Success);
        drop(l);
        let o = match NetProbe::tcp("127.0.0.1", addr.port(), deadline()) {
            Ok(p) => run(p),
            Err(o) => o,
        };
        assert_eq!(o, Outcome::Failure(format!("dial tcp {addr}: connect: connection refused")));
    }

    #[test]
    fn http_status_codes_decide_and_the_request_is_the_kubelets() {
        let (addr, seen) = serve(|path| match path {
            "/ok" => "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".into(),
            "/moved" => "HTTP/1.1 302 Found\r\nLocation: /ok\r\nContent-Length: 0\r\n\r\n".into(),
            "/away" => {
                "HTTP/1.1 301 Moved\r\nLocation: http://example.invalid/\r\nContent-Length: 4\r\n\r\nbody".into()
            }
            "/loop" => "HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n".into(),
            _ => "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\ndown".into(),
        });
        assert_eq!(run(NetProbe::http(get(addr, "/ok"), deadline()).unwrap()), Outcome::Success);
        let req = seen.recv().unwrap();
        assert!(req.starts_with(&format!("GET /ok HTTP/1.1\r\nHost: {addr}\r\n")), "{req}");
        assert!(req.contains("User-Agent: kube-probe/1.34\r\n") && req.contains("Accept: */*\r\n"), "{req}");
        assert_eq!(
            run(NetProbe::http(get(addr, "/bad"), deadline()).unwrap()),
            Outcome::Failure("HTTP probe failed with statuscode: 503".into())
        );
        let mut p = NetProbe::http(get(addr, "/bad"), deadline()).unwrap();
        assert_eq!(finish(&mut p), Outcome::Failure("HTTP probe failed with statuscode: 503".into()));
        assert_eq!(p.failed_status(), Some(503), "a failing answer is told by its status, not its text");
        let mut p = NetProbe::http(get(addr, "/loop"), deadline()).unwrap();
        assert!(matches!(finish(&mut p), Outcome::Failure(_)));
        assert_eq!(p.failed_status(), None, "too many redirects is no failing answer");
        assert_eq!(run(NetProbe::http(get(addr, "/moved"), deadline()).unwrap()), Outcome::Success);
        assert_eq!(
            run(NetProbe::http(get(addr, "/away"), deadline()).unwrap()),
            Outcome::Warning("Probe terminated redirects, Response body: body".into())
        );
        assert_eq!(
            run(NetProbe::http(get(addr, "/loop"), deadline()).unwrap()),
            Outcome::Failure(format!("Get \"http://{addr}/loop\": stopped after 10 redirects"))
        );
        // the probe's headers: Host replaces the host, User-Agent the default
        while seen.try_recv().is_ok() {}
        let mut g = get(addr, "/ok");
        g.headers =
            vec![("Host".into(), "app.local".into()), ("User-Agent".into(), "me".into()), ("X-A".into(), "1".into())];
        run(NetProbe::http(g, deadline()).unwrap());
        let req = seen.recv().unwrap();
        assert!(req.contains("Host: app.local\r\n") && req.contains("User-Agent: me\r\n"), "{req}");
        assert!(!req.contains("kube-probe") && req.contains("X-A: 1\r\n"), "{req}");
    }

    #[test]
    fn host_names_are_looked_up_without_holding_the_caller() {
        let (addr, seen) = serve(|_| "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".into());
        let port = addr.port();
        // the name goes into the Host header, the address it has is dialed
        let mut g = get(addr, "/by-name");
        g.host = "localhost".into();
        assert_eq!(run(NetProbe::http(g, deadline()).unwrap()), Outcome::Success);
        let req = seen.recv().unwrap();
        assert!(req.starts_with(&format!("GET /by-name HTTP/1.1\r\nHost: localhost:{port}\r\n")), "{req}");
        assert_eq!(run(NetProbe::tcp("localhost", port, deadline()).unwrap()), Outcome::Success);
        // the first address refuses: the next one is tried (Go's serial dial)
        assert_eq!(run(NetProbe::tcp("two.addrs.test", port, deadline()).unwrap()), Outcome::Success);
        // a name that has no address fails in Go's words
        let mut g = get(addr, "/");
        g.host = "nothing-here.invalid".into();
        match run(NetProbe::http(g, Instant::now() + Duration::from_secs(20)).unwrap()) {
            Outcome::Failure(m) => assert!(
                m.starts_with(&format!(
                    "Get \"http://nothing-here.invalid:{port}/\": dial tcp: lookup nothing-here.invalid: "
                )),
                "{m}"
            ),
            o => panic!("{o:?}"),
        }
        // a lookup that hangs costs the probe its timeout, nothing more:
        // the caller polls it like a socket and gives up at the deadline
        let t = Instant::now();
        let p = NetProbe::tcp("db.slow.test", port, Instant::now() + Duration::from_millis(300)).unwrap();
        assert!(t.elapsed() < Duration::from_millis(100), "starting a lookup waited {:?}", t.elapsed());
        assert_eq!(run(p), Outcome::Failure("dial tcp: lookup db.slow.test: i/o timeout".into()));
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }

    #[test]
    fn a_silent_server_times_out_in_the_http_clients_words() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let p = NetProbe::http(get(addr, "/"), Instant::now() + Duration::from_millis(200)).unwrap();
        let t = Instant::now();
        let o = run(p);
        assert!(t.elapsed() < Duration::from_secs(1));
        assert_eq!(
            o,
            Outcome::Failure(format!(
                "Get \"http://{addr}/\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            ))
        );
        drop(l);
    }

    #[test]
    fn https_without_certificate_checks_as_the_kubelet() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls");
        let server = test_tls::HttpsServer::start("127.0.0.1", &dir.join("cert.pem"), &dir.join("key.pem")).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", server.port).parse().unwrap();
        let mut g = get(addr, "/healthz");
        g.tls = true;
        // a self-signed certificate for another name: accepted
        assert_eq!(run(NetProbe::http(g.clone(), deadline()).unwrap()), Outcome::Success);
        server.set_status(503);
        assert_eq!(
            run(NetProbe::http(g.clone(), deadline()).unwrap()),
            Outcome::Failure("HTTP probe failed with statuscode: 503".into())
        );
        // HTTPS to a plain HTTP server: a TLS error naming the URL
        let (plain, _) = serve(|_| "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".into());
        let mut g = get(plain, "/");
        g.tls = true;
        match run(NetProbe::http(g, deadline()).unwrap()) {
            Outcome::Failure(m) => assert!(m.starts_with(&format!("Get \"https://{plain}/\": ")), "{m}"),
            o => panic!("{o:?}"),
        }
        // a TLS server that never answers: the probe's timeout
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut g = get(silent.local_addr().unwrap(), "/");
        g.tls = true;
        let o = run(NetProbe::http(g, Instant::now() + Duration::from_millis(200)).unwrap());
        assert!(matches!(&o, Outcome::Failure(m) if m.contains("context deadline exceeded")), "{o:?}");
    }

    #[test]
    fn same_host_redirects_only() {
        let mut g = get("10.0.0.5:8080".parse().unwrap(), "/");
        let to = |p: &str, tls, port| Some((p.to_string(), tls, port));
        assert_eq!(same_host_target(&g, "/x?y=1"), to("/x?y=1", false, 8080));
        assert_eq!(same_host_target(&g, "http://10.0.0.5:8080/z"), to("/z", false, 8080));
        assert_eq!(same_host_target(&g, "http://10.0.0.6:8080/z"), None);
        // Go compares host names only: another scheme or port on the same
        // host is followed
        assert_eq!(same_host_target(&g, "https://10.0.0.5:8443/z"), to("/z", true, 8443));
        assert_eq!(same_host_target(&g, "https://10.0.0.5/z"), to("/z", true, 443));
        assert_eq!(same_host_target(&g, "http://10.0.0.5/"), to("/", false, 80));
        assert_eq!(same_host_target(&g, "ftp://10.0.0.5/z"), None);
        assert_eq!(same_host_target(&g, "//evil/z"), None);
        assert_eq!(host_port("fd00::1", 80), "[fd00::1]:80");
        // by name, as Go compares them
        g.host = "app.local".into();
        assert_eq!(same_host_target(&g, "https://app.local/z"), to("/z", true, 443));
        assert_eq!(same_host_target(&g, "http://10.0.0.5:8080/z"), None);
    }
}

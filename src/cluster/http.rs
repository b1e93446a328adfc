//! A small synchronous HTTPS client for the API server: one TLS connection
//! per call (`Connection: close`), every step bounded: the connect, the
//! whole call ([`Client::timeout`]), the head ([`MAX_HEAD`]) and the body
//! ([`MAX_BODY`]). TLS is rustls with the cluster CA as the only root (or,
//! for the one anonymous discovery read of `podwarden join`, no check of
//! the server at all: what it answers is then checked by other means).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, StreamOwned};

use super::ClusterError;
use crate::api::kube::pki;
use crate::pod::prober::net::AnyCertificate;

/// Bytes of a response's status line and headers.
pub const MAX_HEAD: usize = 64 << 10;
/// Bytes of a response's body (a list of a node's pods fits many times).
pub const MAX_BODY: usize = 32 << 20;
/// The longest a connection to the API server may stay silent with data
/// unacknowledged, or without answering keep-alive probes (4 s idle, then 3
/// probes 2 s apart: 10 s). A half-open link is found within that by the
/// pods' watch, which is always open: well inside the 15 s asked, and the
/// node lifecycle controller's 50 s.
pub const SILENCE: Duration = Duration::from_secs(10);
/// For the TCP connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How the client proves who it is.
#[derive(Clone)]
pub enum Credentials {
    /// Nobody (discovery).
    Anonymous,
    /// A bearer token (a bootstrap token `ID.SECRET`).
    Token(String),
    /// A client certificate and its key (PEM).
    Cert { cert_pem: String, key_pem: String },
}

/// A server, its trust and the caller's identity.
#[derive(Clone)]
pub struct Client {
    /// `https://host:port`, as given.
    pub server: String,
    host: String,
    port: u16,
    tls: Arc<ClientConfig>,
    token: Option<String>,
    /// For a whole call, from connect to the body's end.
    pub timeout: Duration,
}

/// A response: status and body (decoded from chunks if it came so).
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Response {
    /// The body as text, for errors.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body[..self.body.len().min(2048)]).into_owned()
    }
}

/// `https://HOST[:PORT][/]` → (host, port).
pub fn parse_server(url: &str) -> Result<(String, u16), ClusterError> {
    let bad = |why: &str| ClusterError::Config(format!("server {url:?}: {why}"));
    let rest = url.strip_prefix("https://").ok_or_else(|| bad("only https:// is supported"))?;
    let hostport = rest.trim_end_matches('/');
    if hostport.contains('/') {
        return Err(bad("a path after the host is not supported"));
    }
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, p) = v6.split_once(']').ok_or_else(|| bad("an unclosed [ in the host"))?;
        (h.to_string(), p.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (hostport.to_string(), None),
        }
    };
    let port = match port {
        Some(p) => p.parse().map_err(|_| bad("the port is not a number"))?,
        None => 443,
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    Ok((host, port))
}

impl Client {
    /// A client of `server` trusting `ca_pem` only (`None`: trusting any
    /// server, for anonymous discovery alone), proving itself with `creds`.
    pub fn new(server: &str, ca_pem: Option<&str>, creds: Credentials) -> Result<Self, ClusterError> {
        let (host, port) = parse_server(server)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| ClusterError::Tls(e.to_string()))?;
        let builder = match ca_pem {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                let ders = pki::pem_certs(ca);
                if ders.is_empty() {
                    return Err(ClusterError::Config("the cluster CA is not PEM".into()));
                }
                for der in ders {
                    roots
                        .add(CertificateDer::from(der))
                        .map_err(|e| ClusterError::Tls(format!("the cluster CA: {e}")))?;
                }
                builder.with_root_certificates(roots)
            }
            // only `podwarden join`'s anonymous read of cluster-info, whose
            // content is checked by the token's signature and the CA's pin
            None => builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyCertificate(provider))),
        };
        let (tls, token) = match creds {
            Credentials::Anonymous => (builder.with_no_client_auth(), None),
            Credentials::Token(t) => (builder.with_no_client_auth(), Some(t)),
            Credentials::Cert { cert_pem, key_pem } => {
                let certs: Vec<CertificateDer<'static>> =
                    pki::pem_certs(&cert_pem).into_iter().map(CertificateDer::from).collect();
                let key = pki::pem_private_key(&key_pem)
                    .and_then(|d| PrivateKeyDer::try_from(d).ok())
                    .ok_or_else(|| ClusterError::Config("the client key is not a PEM private key".into()))?;
                if certs.is_empty() {
                    return Err(ClusterError::Config("the client certificate is not PEM".into()));
                }
                let cfg = builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| ClusterError::Tls(format!("the client certificate: {e}")))?;
                (cfg, None)
            }
        };
        Ok(Client {
            server: server.trim_end_matches('/').to_string(),
            host,
            port,
            tls: Arc::new(tls),
            token,
            timeout: Duration::from_secs(30),
        })
    }

    /// GET `path`.
    pub fn get(&self, path: &str) -> Result<Response, ClusterError> {
        self.call("GET", path, None)
    }

    /// `method` `path` with a JSON (or patch) body of `content_type`.
    pub fn send(&self, method: &str, path: &str, content_type: &str, body: &[u8]) -> Result<Response, ClusterError> {
        self.call(method, path, Some((content_type, body)))
    }

    /// Whether the server's port accepts a TCP connection within
    /// `within` (closed at once: no request, no TLS). While the server is
    /// unreachable this is the cheap way to notice it is back.
    pub fn reachable(&self, within: Duration) -> bool {
        let Some(addr) = (self.host.as_str(), self.port).to_socket_addrs().ok().and_then(|mut a| a.next()) else {
            return false;
        };
        TcpStream::connect_timeout(&addr, within).is_ok()
    }

    fn call(&self, method: &str, path: &str, body: Option<(&str, &[u8])>) -> Result<Response, ClusterError> {
        let start = Instant::now();
        let mut tls = self.open(method, path, body, start)?;
        let net = |e: std::io::Error| ClusterError::Unreachable(format!("{method} {}{path}: {e}", self.server));
        let mut raw = Vec::new();
        let mut buf = vec![0u8; 16 << 10];
        loop {
            tls.sock.set_read_timeout(Some(self.left(method, path, start, "reading")?)).map_err(net)?;
            match tls.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
                // a server that closes without TLS's close_notify: the
                // body's length says whether all of it came
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(self.tls_err(method, path, e)),
            }
            if raw.len() > MAX_HEAD + MAX_BODY {
                return Err(ClusterError::Protocol(format!(
                    "{method} {}{path}: the answer is over {} MiB",
                    self.server,
                    MAX_BODY >> 20
                )));
            }
        }
        parse_response(&raw)
            .map_err(|Malformed(why)| ClusterError::Protocol(format!("{method} {}{path}: {why}", self.server)))
    }

    /// What is left of the call's time, or the error that it is over.
    fn left(&self, method: &str, path: &str, start: Instant, what: &str) -> Result<Duration, ClusterError> {
        let l = self.timeout.saturating_sub(start.elapsed());
        if l.is_zero() {
            return Err(ClusterError::Unreachable(format!(
                "{method} {}{path}: no answer within {:?} ({what})",
                self.server, self.timeout
            )));
        }
        Ok(l)
    }

    fn tls_err(&self, method: &str, path: &str, e: std::io::Error) -> ClusterError {
        if e.kind() == std::io::ErrorKind::InvalidData {
            ClusterError::Tls(format!("{}: {e}", self.server))
        } else {
            ClusterError::Unreachable(format!("{method} {}{path}: {e}", self.server))
        }
    }

    /// Connect, shake hands and send the request (within the call's time).
    fn open(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
        start: Instant,
    ) -> Result<StreamOwned<ClientConnection, TcpStream>, ClusterError> {
        let net = |e: std::io::Error| ClusterError::Unreachable(format!("{method} {}{path}: {e}", self.server));
        let addr = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(net)?
            .next()
            .ok_or_else(|| net(std::io::Error::other("the host has no address")))?;
        let tcp = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT.min(self.timeout)).map_err(net)?;
        let _ = tcp.set_nodelay(true);
        // a half-open connection (the server's host gone without a word)
        // is found within 15 s, even on a watch that waits minutes for an
        // event: the Lease is never late because of one
        if let Err(e) = crate::sys::tcp_bound_silence(&tcp, Duration::from_secs(4), Duration::from_secs(2), 3, SILENCE)
        {
            log::debug!("cluster: keep-alive on the connection to {}: {e}", self.server);
        }
        let name = ServerName::try_from(self.host.clone())
            .map_err(|e| ClusterError::Config(format!("server {:?}: {e}", self.server)))?;
        let conn = ClientConnection::new(self.tls.clone(), name)
            .map_err(|e| ClusterError::Tls(format!("{}: {e}", self.server)))?;
        let mut tls = StreamOwned::new(conn, tcp);
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}:{}\r\nUser-Agent: podwarden/{}\r\nAccept: application/json\r\nConnection: close\r\n",
            self.host,
            self.port,
            env!("CARGO_PKG_VERSION")
        );
        if let Some(t) = &self.token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        if let Some((ct, b)) = body {
            head.push_str(&format!("Content-Type: {ct}\r\nContent-Length: {}\r\n", b.len()));
        }
        head.push_str("\r\n");
        tls.sock.set_write_timeout(Some(self.left(method, path, start, "sending")?)).map_err(net)?;
        tls.write_all(head.as_bytes()).map_err(|e| self.tls_err(method, path, e))?;
        if let Some((_, b)) = body {
            tls.write_all(b).map_err(|e| self.tls_err(method, path, e))?;
        }
        tls.flush().map_err(|e| self.tls_err(method, path, e))?;
        Ok(tls)
    }

    /// GET `path` as a stream of lines (a watch): the head within the
    /// call's time, then [`Lines::next`] as the server sends them. An
    /// answer other than 200 is read whole and returned as `Err(Response)`.
    pub fn stream(&self, path: &str) -> Result<Result<Lines, Response>, ClusterError> {
        let start = Instant::now();
        let mut tls = self.open("GET", path, None, start)?;
        let net = |e: std::io::Error| ClusterError::Unreachable(format!("GET {}{path}: {e}", self.server));
        let mut raw = Vec::new();
        let mut buf = vec![0u8; 16 << 10];
        let (status, chunked, end) = loop {
            tls.sock.set_read_timeout(Some(self.left("GET", path, start, "reading")?)).map_err(net)?;
            let n = match tls.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => 0,
                Err(e) => return Err(self.tls_err("GET", path, e)),
            };
            raw.extend_from_slice(&buf[..n]);
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut r = httparse::Response::new(&mut headers);
            match r.parse(&raw) {
                Ok(httparse::Status::Complete(end)) => {
                    let chunked = r.headers.iter().any(|h| {
                        h.name.eq_ignore_ascii_case("transfer-encoding")
                            && String::from_utf8_lossy(h.value).to_ascii_lowercase().contains("chunked")
                    });
                    break (r.code.unwrap_or(0), chunked, end);
                }
                Ok(httparse::Status::Partial) if n > 0 && raw.len() <= MAX_HEAD => continue,
                Ok(httparse::Status::Partial) => {
                    return Err(ClusterError::Protocol(format!("GET {}{path}: no whole response head", self.server)));
                }
                Err(e) => {
                    return Err(ClusterError::Protocol(format!(
                        "GET {}{path}: not an HTTP response: {e}",
                        self.server
                    )));
                }
            }
        };
        if status != 200 {
            // read the rest within the call's time: an error Status
            loop {
                tls.sock.set_read_timeout(Some(self.left("GET", path, start, "reading")?)).map_err(net)?;
                match tls.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) if raw.len() < MAX_HEAD + (1 << 20) => raw.extend_from_slice(&buf[..n]),
                    Ok(_) => break,
                    Err(_) => break,
                }
            }
            let body = match parse_response(&raw) {
                Ok(r) => r.body,
                Err(_) => raw[end..].to_vec(),
            };
            return Ok(Err(Response { status, body }));
        }
        let pending = raw.split_off(end);
        let body = Body { chunked, pending, ..Body::default() };
        Ok(Ok(Lines { tls, body, what: format!("GET {}{path}", self.server) }))
    }
}

/// A streamed answer read a line at a time (a watch's events).
pub struct Lines {
    tls: StreamOwned<ClientConnection, TcpStream>,
    body: Body,
    what: String,
}

/// A streamed body as it arrives: chunk framing taken off, lines taken out.
#[derive(Default)]
struct Body {
    chunked: bool,
    /// Bytes read and not yet decoded (chunk framing).
    pending: Vec<u8>,
    /// Decoded body bytes not yet returned as lines.
    body: Vec<u8>,
    /// Bytes left in the current chunk.
    chunk_left: usize,
    /// The last chunk (or the connection's end) came.
    ended: bool,
}

/// The longest line a stream may send (a watch event: one object).
pub const MAX_LINE: usize = 8 << 20;

impl Lines {
    /// Whether a whole line is already here (no read needed).
    pub fn has_line(&mut self) -> bool {
        self.body.decode();
        self.body.body.contains(&b'\n')
    }

    /// The next line (without its newline); `Ok(None)` when the server
    /// ended the stream. Waits in slices of `slice`, asking `go_on` between
    /// them (false: stop, `Ok(None)`), and at most `idle` for a byte.
    pub fn next(
        &mut self,
        slice: Duration,
        idle: Duration,
        go_on: &dyn Fn() -> bool,
    ) -> Result<Option<Vec<u8>>, ClusterError> {
        let mut quiet_since = Instant::now();
        let mut buf = vec![0u8; 16 << 10];
        loop {
            self.body.decode();
            if let Some(i) = self.body.body.iter().position(|b| *b == b'\n') {
                let mut line: Vec<u8> = self.body.body.drain(..=i).collect();
                line.pop();
                return Ok(Some(line));
            }
            if self.body.body.len() > MAX_LINE {
                return Err(ClusterError::Protocol(format!("{}: a line over {} MiB", self.what, MAX_LINE >> 20)));
            }
            if self.body.ended {
                return Ok(None);
            }
            if !go_on() {
                return Ok(None);
            }
            if quiet_since.elapsed() >= idle {
                return Err(ClusterError::Unreachable(format!("{}: nothing for {idle:?}", self.what)));
            }
            let _ = self.tls.sock.set_read_timeout(Some(slice));
            match self.tls.read(&mut buf) {
                Ok(0) => self.body.ended = true,
                Ok(n) => {
                    self.body.pending.extend_from_slice(&buf[..n]);
                    quiet_since = Instant::now();
                }
                // the slice is over (Linux reports an expired SO_RCVTIMEO
                // as EAGAIN); ETIMEDOUT is the connection found dead (its
                // keep-alive probes or data unanswered): an error at once,
                // not the clean end of a watch the next read would show
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => self.body.ended = true,
                Err(e) => return Err(ClusterError::Unreachable(format!("{}: {e}", self.what))),
            }
        }
    }
}

impl Body {
    /// Move what `pending` holds of the body into `body`.
    fn decode(&mut self) {
        if !self.chunked {
            self.body.append(&mut self.pending);
            return;
        }
        loop {
            if self.chunk_left > 0 {
                let n = self.chunk_left.min(self.pending.len());
                self.body.extend(self.pending.drain(..n));
                self.chunk_left -= n;
                if self.chunk_left > 0 {
                    return;
                }
                // the chunk's CRLF follows: dropped with the next size line
            }
            let Some(eol) = self.pending.windows(2).position(|w| w == b"\r\n") else { return };
            let line = String::from_utf8_lossy(&self.pending[..eol]).into_owned();
            self.pending.drain(..eol + 2);
            if line.trim().is_empty() {
                continue; // the CRLF after a chunk
            }
            match usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16) {
                Ok(0) | Err(_) => {
                    self.ended = true;
                    return;
                }
                Ok(n) => self.chunk_left = n,
            }
        }
    }
}

/// Why a response could not be read.
#[derive(Debug)]
struct Malformed(String);

impl From<&str> for Malformed {
    fn from(s: &str) -> Self {
        Malformed(s.to_string())
    }
}

impl From<String> for Malformed {
    fn from(s: String) -> Self {
        Malformed(s)
    }
}

/// A whole response as read until the server closed.
fn parse_response(raw: &[u8]) -> Result<Response, Malformed> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    let end = match r.parse(raw) {
        Ok(httparse::Status::Complete(n)) if n <= MAX_HEAD => n,
        Ok(httparse::Status::Complete(_)) => return Err("the response head is too large".into()),
        Ok(httparse::Status::Partial) => return Err("the connection closed inside the response head".into()),
        Err(e) => return Err(format!("not an HTTP response: {e}").into()),
    };
    let status = r.code.unwrap_or(0);
    let header = |name: &str| {
        r.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
    };
    let rest = &raw[end..];
    let body = if header("transfer-encoding").is_some_and(|t| t.to_ascii_lowercase().contains("chunked")) {
        dechunk(rest)?
    } else if let Some(len) = header("content-length") {
        let len: usize = len.trim().parse().map_err(|_| "a bad Content-Length")?;
        if rest.len() < len {
            return Err(format!("the body ended after {} of {len} bytes", rest.len()).into());
        }
        rest[..len].to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Response { status, body })
}

/// A chunked body, whole.
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, Malformed> {
    let mut out = Vec::new();
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n").ok_or("a chunk size line without its end")?;
        let line = String::from_utf8_lossy(&rest[..eol]);
        let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| Malformed(format!("a chunk size {line:?} is not hex")))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if rest.len() < size + 2 {
            return Err("the body ended inside a chunk".into());
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_are_https_hosts_with_an_optional_port() {
        assert_eq!(parse_server("https://127.0.0.1:16443").unwrap(), ("127.0.0.1".into(), 16443));
        assert_eq!(parse_server("https://k8s.example/").unwrap(), ("k8s.example".into(), 443));
        assert_eq!(parse_server("https://[::1]:6443").unwrap(), ("::1".into(), 6443));
        for bad in ["http://127.0.0.1:8080", "https://h:x", "https://h/api", "https://"] {
            assert!(parse_server(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_streamed_body_gives_lines_across_chunks_and_reads() {
        let mut b = Body { chunked: true, ..Body::default() };
        let mut lines = Vec::new();
        let mut take = |b: &mut Body| {
            b.decode();
            while let Some(i) = b.body.iter().position(|c| *c == b'\n') {
                let l: Vec<u8> = b.body.drain(..=i).collect();
                lines.push(String::from_utf8(l).unwrap());
            }
        };
        // a chunk split inside its size line, its data and its CRLF
        for part in [&b"1"[..], b"0\r\n{\"a\":1}\n{\"b", b"\"", b":2}\n\r", b"\n", b"3\r\nx\ny\r\n0\r\n\r\n"] {
            b.pending.extend_from_slice(part);
            take(&mut b);
        }
        assert_eq!(lines, ["{\"a\":1}\n", "{\"b\":2}\n", "x\n"]);
        assert!(b.ended, "the last chunk ends the stream");
        assert_eq!(b.body, b"y", "a line without its newline stays");
        let mut plain = Body::default();
        plain.pending.extend_from_slice(b"one\ntw");
        plain.decode();
        assert_eq!(plain.body, b"one\ntw");
    }

    #[test]
    fn bodies_come_by_length_by_chunks_or_until_the_close() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello, and more").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
        let r = parse_response(
            b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (201, &b"abcde"[..]));
        let r = parse_response(b"HTTP/1.1 404 Not Found\r\n\r\ngone").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (404, &b"gone"[..]));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Le").is_err());
    }
}

//! The HTTPS server: one `kube-accept` thread, at most [`MAX_CONNS`]
//! connections each on its own `kube-conn` thread with a small stack
//! ([`CONN_STACK`]: only touched pages count; a watch's thread sleeps on its
//! channel) (beyond that a new connection is closed at once; watches are
//! bounded below that, [`super::watch::MAX_WATCHERS`], and one more is
//! answered 429 with `Retry-After`), HTTP/1.1 only (ALPN `http/1.1`) with
//! keep-alive. Until its TLS handshake ends with a client certificate of
//! the node CA a connection is held in the [`super::gate`]'s small budget
//! (per address and in all; the oldest is dropped for a newer one), so
//! clients that never finish a handshake cannot keep verified ones out.
//! Each connection: TLS handshake within [`HANDSHAKE_DEADLINE`], request
//! head within [`HEAD_DEADLINE`], the head at most [`MAX_HEAD`], a body at most
//! [`MAX_BODY`], an idle keep-alive connection closed after
//! [`IDLE_DEADLINE`], every write bounded by [`WRITE_DEADLINE`] (a slow
//! client ends its own connection). A connection thread blocks on its own
//! client only. Client certificates are verified by rustls against the
//! node CA (none is allowed: 401), then checked against the revocation
//! list on every request.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::api::status::ApiError;
use parking_lot::Mutex;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls::{ServerConfig, ServerConnection, StreamOwned};

use super::authz::User;
use super::ctx::Ctx;
use super::gate::{Gate, Ticket};
use super::pki::{self, ClientCert, Identity};
use super::routes;
use super::wire::{ChunkSink, Reply, Request, split_target};

/// Connections at once: the watches' limit and a third more.
pub const MAX_CONNS: usize = super::watch::MAX_WATCHERS * 4 / 3;
/// A connection thread's stack: a request's deepest path (TLS, routing,
/// a patch or an apply) with room to spare.
pub const CONN_STACK: usize = crate::base::thread::WORKER_STACK;
/// What a 429 asks the client to wait, in seconds.
const RETRY_AFTER_SECS: u32 = 1;
pub const MAX_HEAD: usize = 32 << 10;
pub const MAX_BODY: usize = 3 << 20;
pub const HEAD_DEADLINE: Duration = Duration::from_secs(10);
/// From accept to the TLS handshake's end (a handshake takes milliseconds;
/// under emulation a few hundred).
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);
pub const IDLE_DEADLINE: Duration = Duration::from_secs(90);
pub const WRITE_DEADLINE: Duration = Duration::from_secs(10);
const MAX_HEADERS: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("the node CA or serving certificate is not usable: {0}")]
    Certs(String),
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
}

/// The rustls server config: the serving certificate, client certificates
/// from the node CA (optional), `http/1.1` only.
pub fn tls_config(id: &Identity) -> Result<Arc<ServerConfig>, TlsSetupError> {
    tls_config_with(id, None).map(|(c, _)| c)
}

/// The verifier that tells a client certificate of the cluster's CA.
pub type ClusterCa = Arc<dyn ClientCertVerifier>;

/// [`tls_config`], also taking client certificates of `cluster_ca` (cluster
/// mode: the API server's kubelet client certificate); with it, the
/// verifier that tells a certificate of the cluster's CA.
pub fn tls_config_with(
    id: &Identity,
    cluster_ca: Option<&str>,
) -> Result<(Arc<ServerConfig>, Option<ClusterCa>), TlsSetupError> {
    let bad = |what: &str| TlsSetupError::Certs(what.to_string());
    // AES-128-GCM first, and the server's order over the client's (rustls
    // clients ask for AES-256 first; Go's, kubectl's, for AES-128): four
    // fewer AES rounds a block on every byte an exec, a port-forward or a
    // log stream relays, with the same security margin Go's TLS defaults to
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites.sort_by_key(|s| match s.suite() {
        rustls::CipherSuite::TLS13_AES_128_GCM_SHA256 => 0,
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 1,
        _ => 2,
    });
    let provider = Arc::new(provider);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(pki::pem_der(&id.ca_pem).ok_or_else(|| bad("ca.crt is not PEM"))?))?;
    let mut cluster_verifier: Option<Arc<dyn ClientCertVerifier>> = None;
    if let Some(ca) = cluster_ca {
        let mut only = rustls::RootCertStore::empty();
        for der in pki::pem_certs(ca) {
            roots.add(CertificateDer::from(der.clone()))?;
            only.add(CertificateDer::from(der))?;
        }
        if only.is_empty() {
            return Err(bad("the cluster CA is not PEM"));
        }
        let v = WebPkiClientVerifier::builder_with_provider(Arc::new(only), provider.clone())
            .build()
            .map_err(|e| TlsSetupError::Certs(e.to_string()))?;
        cluster_verifier = Some(v);
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsSetupError::Certs(e.to_string()))?;
    let cert = CertificateDer::from(pki::pem_der(&id.serving_cert_pem).ok_or_else(|| bad("serving.crt is not PEM"))?);
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        pki::pem_der(&id.serving_key_pem).ok_or_else(|| bad("serving.key is not PEM"))?,
    ));
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![cert], key)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.ignore_client_order = true;
    // no session resumption: kubectl (client-go) keeps no TLS session
    // cache, so tickets and stored sessions (each with the client's
    // certificate, up to 256 of them) would cost every connection CPU and
    // the agent memory for nothing
    cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    cfg.send_tls13_tickets = 0;
    Ok((Arc::new(cfg), cluster_verifier))
}

/// The revocation list, read again when its file changes (checked on
/// every request: a `podwarden kubeconfig --revoke` applies at once).
pub struct Revoked {
    path: PathBuf,
    cached: Mutex<RevokedCache>,
}

/// The file's (modification time, length) when read, and its serials.
type RevokedCache = (Option<(SystemTime, u64)>, std::collections::HashSet<String>);

impl Revoked {
    pub fn new(path: PathBuf) -> Self {
        Revoked { path, cached: Mutex::new((None, Default::default())) }
    }

    pub fn contains(&self, serial: &str) -> bool {
        let stamp =
            std::fs::metadata(&self.path).ok().map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
        let mut c = self.cached.lock();
        if c.0 != stamp {
            let text = match stamp {
                Some((_, len)) if len <= 4 << 20 => std::fs::read_to_string(&self.path).unwrap_or_default(),
                _ => String::new(),
            };
            *c = (stamp, pki::parse_revoked(&text));
        }
        c.1.contains(serial)
    }
}

/// What every connection shares.
pub struct Shared {
    pub ctx: Ctx,
    pub tls: Arc<ServerConfig>,
    /// Tells a client certificate of the cluster's CA (cluster mode).
    pub cluster_ca: Option<Arc<dyn ClientCertVerifier>>,
    pub revoked: Revoked,
    pub active: AtomicUsize,
    /// Connections without a verified client certificate (yet).
    pub gate: Arc<Gate>,
}

/// The `kube-accept` loop until `stop`.
pub fn accept_loop(listener: TcpListener, shared: Arc<Shared>, stop: Arc<AtomicBool>) {
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(conn) = conn else { continue };
        if shared.active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNS {
            shared.active.fetch_sub(1, Ordering::SeqCst);
            static FULL: crate::base::logging::RateLimit =
                crate::base::logging::RateLimit::new(Duration::from_secs(60));
            if FULL.allow().is_some() {
                log::warn!("Kubernetes API: {MAX_CONNS} connections open: closing a new one");
            }
            drop(conn);
            continue;
        }
        // an address is needed for the gate's share (a socket already
        // reset by its client has none: nothing to serve)
        let Some(ticket) = conn.peer_addr().ok().and_then(|a| shared.gate.enter(a.ip(), &conn)) else {
            shared.active.fetch_sub(1, Ordering::SeqCst);
            continue;
        };
        let s = shared.clone();
        let spawned = crate::base::thread::spawn("kube-conn", Some(CONN_STACK), move || {
            serve(&s, conn, ticket);
            s.active.fetch_sub(1, Ordering::SeqCst);
        });
        if let Err(e) = spawned {
            shared.active.fetch_sub(1, Ordering::SeqCst);
            log::warn!("Kubernetes API: cannot start a connection thread: {e}");
        }
    }
}

type Tls = StreamOwned<ServerConnection, TcpStream>;

fn serve(shared: &Shared, tcp: TcpStream, ticket: Ticket) {
    let _ = tcp.set_nodelay(true);
    let _ = tcp.set_write_timeout(Some(WRITE_DEADLINE));
    let Ok(conn) = ServerConnection::new(shared.tls.clone()) else { return };
    let mut tls = StreamOwned::new(conn, tcp);
    let start = Instant::now();
    // the handshake, within its own deadline
    while tls.conn.is_handshaking() {
        let left = HANDSHAKE_DEADLINE.saturating_sub(start.elapsed());
        if left.is_zero() || tls.sock.set_read_timeout(Some(left)).is_err() {
            return;
        }
        if tls.conn.complete_io(&mut tls.sock).is_err() {
            return; // another CA's certificate, or not TLS
        }
    }
    let user = identity(&tls, shared.cluster_ca.as_deref());
    // a verified certificate leaves the gate; without one the connection
    // stays where it can be dropped for another (its requests get 401)
    let _unverified = match user {
        Some(_) => {
            ticket.verified();
            None
        }
        None => Some(ticket),
    };
    let mut buf: Vec<u8> = Vec::new();
    let mut first = true;
    loop {
        let req = match read_request(&mut tls, &mut buf, if first { Some(start) } else { None }) {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(e) => {
                let _ = write_full(&mut tls, &Reply::error(&e), false);
                return;
            }
        };
        first = false;
        let user = match &user {
            Some((cert, u)) if !u.cluster && shared.revoked.contains(&cert.serial) => {
                log::info!("Kubernetes API: refused revoked certificate {} of {}", cert.serial, u.name);
                None
            }
            Some((_, u)) => Some(u.clone()),
            None => match bearer_user(shared, &req) {
                Ok(u) => u,
                Err(e) => {
                    let _ = write_full(&mut tls, &Reply::error(&e), false);
                    return;
                }
            },
        };
        let close = req.header("connection").is_some_and(|c| c.eq_ignore_ascii_case("close"));
        let head = req.method == "HEAD";
        match routes::handle(&shared.ctx, user.as_ref(), &req) {
            r @ Reply::Full { .. } => {
                if write_full(&mut tls, &r, head).is_err() || close {
                    return;
                }
            }
            Reply::Stream { content_type, run } => {
                let _ = write_stream(&mut tls, content_type, run);
                return;
            }
            Reply::Upgrade(run) => {
                // the handler owns the connection (and closes it) from here
                let _ = run(tls);
                return;
            }
        }
    }
}

/// The verified client certificate's identity, if one was sent: a user of
/// the cluster when the cluster's CA signed it.
fn identity(tls: &Tls, cluster_ca: Option<&dyn ClientCertVerifier>) -> Option<(ClientCert, User)> {
    let certs = tls.conn.peer_certificates()?;
    let cert = certs.first()?;
    let c = ClientCert::parse(cert)?;
    let cluster =
        cluster_ca.is_some_and(|v| v.verify_client_cert(cert, &certs[1..], rustls::pki_types::UnixTime::now()).is_ok());
    let u = User { name: c.user.clone(), groups: c.groups.clone(), cluster };
    Some((c, u))
}

/// A bearer token's user, as the cluster's `TokenReview` says (cluster
/// mode; the node's own API takes client certificates only).
fn bearer_user(shared: &Shared, req: &Request) -> Result<Option<User>, ApiError> {
    let Some(token) = req.header("authorization").and_then(|h| h.strip_prefix("Bearer ")).map(str::trim) else {
        return Ok(None);
    };
    let Some(auth) = shared.ctx.cluster_auth.get() else { return Ok(None) };
    if token.is_empty() {
        return Ok(None);
    }
    auth.review_token(token)
}

/// Read one request: `Ok(None)` when the client closed or stayed idle.
fn read_request(tls: &mut Tls, buf: &mut Vec<u8>, started: Option<Instant>) -> Result<Option<Request>, ApiError> {
    let mut start = started;
    loop {
        if let Some(end) = find_head_end(buf) {
            return parse(tls, buf, end, start.unwrap_or_else(Instant::now)).map(Some);
        }
        if buf.len() > MAX_HEAD {
            return Err(ApiError::new(431, "RequestHeaderFieldsTooLarge", "the request head is over 32 KiB"));
        }
        // idle between requests, then the head's deadline from its first byte
        let left = match start {
            Some(s) => HEAD_DEADLINE.saturating_sub(s.elapsed()),
            None => IDLE_DEADLINE,
        };
        if left.is_zero() || tls.sock.set_read_timeout(Some(left)).is_err() {
            return Ok(None);
        }
        let mut chunk = [0u8; 8192];
        match tls.read(&mut chunk) {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                start.get_or_insert_with(Instant::now);
            }
        }
    }
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn parse(tls: &mut Tls, buf: &mut Vec<u8>, end: usize, start: Instant) -> Result<Request, ApiError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut r = httparse::Request::new(&mut headers);
    match r.parse(&buf[..end]) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(ApiError::bad_request("malformed HTTP request")),
    }
    let (method, target) = (r.method.unwrap_or("").to_string(), r.path.unwrap_or("/").to_string());
    let headers: Vec<(String, String)> = r
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned()))
        .collect();
    let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    let chunked = match get("transfer-encoding") {
        None => false,
        Some(te) if te.trim().eq_ignore_ascii_case("chunked") && get("content-length").is_none() => true,
        Some(te) if te.trim().eq_ignore_ascii_case("chunked") => {
            return Err(ApiError::bad_request("both Transfer-Encoding and Content-Length sent"));
        }
        Some(te) => {
            return Err(ApiError::not_implemented(format!("Transfer-Encoding {te:?}: only chunked is taken")));
        }
    };
    let len: usize = match get("content-length") {
        None => 0,
        Some(v) => v.trim().parse().map_err(|_| ApiError::bad_request(format!("bad Content-Length {v:?}")))?,
    };
    if len > MAX_BODY {
        return Err(ApiError::too_large("the request body is over 3 MiB"));
    }
    buf.drain(..end);
    let body = if chunked {
        // kubectl create --raw -f sends its file chunked
        let mut c = Chunked::default();
        while !c.step(buf)? {
            read_more(tls, buf, start, 65536)?;
        }
        buf.drain(..c.pos);
        c.body
    } else {
        while buf.len() < len {
            read_more(tls, buf, start, len - buf.len())?;
        }
        buf.drain(..len).collect()
    };
    let (path, query) = split_target(&target);
    Ok(Request { method, path, query, headers, body })
}

/// One read of at most `max` more bytes of a body into `buf`, within the
/// body's deadline (the head's and 20 s, from the request's start).
fn read_more(tls: &mut Tls, buf: &mut Vec<u8>, start: Instant, max: usize) -> Result<(), ApiError> {
    let late = || ApiError::new(408, "Timeout", "the request body did not come in time");
    let left = (HEAD_DEADLINE + Duration::from_secs(20)).saturating_sub(start.elapsed());
    if left.is_zero() || tls.sock.set_read_timeout(Some(left)).is_err() {
        return Err(late());
    }
    let mut chunk = vec![0u8; max.clamp(1, 65536)];
    match tls.read(&mut chunk) {
        Ok(0) | Err(_) => Err(late()),
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
    }
}

/// A chunked request body as it is decoded: the data so far and where in
/// the read buffer the next chunk starts.
#[derive(Default)]
struct Chunked {
    body: Vec<u8>,
    pos: usize,
}

impl Chunked {
    /// Decode the chunks `buf[pos..]` holds whole: `Ok(true)` once the last
    /// chunk and the trailers are read (`pos` then past them), `Ok(false)`
    /// when more must be read. A body over [`MAX_BODY`] is 413, a malformed
    /// one 400; a size line or the trailers may not grow without end.
    fn step(&mut self, buf: &[u8]) -> Result<bool, ApiError> {
        let bad = |m: &str| ApiError::bad_request(format!("malformed chunked body: {m}"));
        let crlf = |b: &[u8]| b.windows(2).position(|w| w == b"\r\n");
        loop {
            let rest = &buf[self.pos..];
            let Some(eol) = crlf(rest) else {
                return if rest.len() > 1024 { Err(bad("a chunk size line over 1 KiB")) } else { Ok(false) };
            };
            let size_text = String::from_utf8_lossy(rest[..eol].split(|b| *b == b';').next().unwrap_or_default());
            let size = usize::from_str_radix(size_text.trim(), 16).map_err(|_| bad("a chunk size is not hex"))?;
            if size == 0 {
                let mut p = eol + 2;
                loop {
                    let Some(e) = crlf(&rest[p..]) else {
                        return if rest.len() - p > 8192 { Err(bad("trailers over 8 KiB")) } else { Ok(false) };
                    };
                    p += e + 2;
                    if e == 0 {
                        self.pos += p;
                        return Ok(true);
                    }
                }
            }
            if self.body.len().saturating_add(size) > MAX_BODY {
                return Err(ApiError::too_large("the request body is over 3 MiB"));
            }
            let data = eol + 2;
            if rest.len() < data + size + 2 {
                return Ok(false);
            }
            if &rest[data + size..data + size + 2] != b"\r\n" {
                return Err(bad("a chunk does not end with CRLF"));
            }
            self.body.extend_from_slice(&rest[data..data + size]);
            self.pos += data + size + 2;
        }
    }
}

fn write_full(tls: &mut Tls, r: &Reply, head: bool) -> std::io::Result<()> {
    let Reply::Full { status, content_type, body } = r else { return Ok(()) };
    let retry = if *status == 429 { format!("Retry-After: {RETRY_AFTER_SECS}\r\n") } else { String::new() };
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-cache, private\r\n{retry}\r\n",
        crate::api::status::reason_phrase(*status),
        body.len()
    )
    .into_bytes();
    if !head {
        out.extend_from_slice(body);
    }
    tls.write_all(&out)?;
    tls.flush()
}

struct Chunks<'a> {
    tls: &'a mut Tls,
}

impl ChunkSink for Chunks<'_> {
    fn chunk(&mut self, data: &[u8]) -> std::io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let mut out = format!("{:x}\r\n", data.len()).into_bytes();
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
        self.tls.write_all(&out)?;
        self.tls.flush()
    }

    fn client_gone(&mut self) -> bool {
        let mut b = [0u8; 1];
        if self.tls.sock.set_nonblocking(true).is_err() {
            return true;
        }
        let r = self.tls.sock.peek(&mut b);
        let _ = self.tls.sock.set_nonblocking(false);
        match r {
            Ok(_) => true, // closed (0), or sent something (a close_notify)
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        }
    }
}

fn write_stream(tls: &mut Tls, content_type: &str, run: super::wire::Stream) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\nCache-Control: no-cache, private\r\n\r\n"
    );
    tls.write_all(head.as_bytes())?;
    tls.flush()?;
    let mut sink = Chunks { tls };
    let r = run(&mut sink);
    sink.tls.write_all(b"0\r\n\r\n")?;
    sink.tls.flush()?;
    sink.tls.conn.send_close_notify();
    let _ = sink.tls.flush();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_are_decoded_however_they_arrive() {
        let wire = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT";
        for cut in 0..wire.len() {
            // the bytes arrive in two reads, split anywhere
            let mut c = Chunked::default();
            assert!(c.step(&wire[..cut]).unwrap() || c.step(wire).unwrap(), "{cut}");
            assert_eq!(c.body, b"hello, world");
            assert_eq!(&wire[c.pos..], b"NEXT", "{cut}: the next request's bytes are left");
        }
        let err = |b: &[u8]| Chunked::default().step(b).unwrap_err();
        assert_eq!(err(b"zz\r\n").code, 400);
        assert_eq!(err(b"3\r\nabcX\r\n").code, 400);
        assert_eq!(err(b"ffffffffffffffffffff\r\n").code, 400, "a size that overflows");
        assert_eq!(err(format!("{:x}\r\n", MAX_BODY + 1).as_bytes()).code, 413);
        assert_eq!(err(&[b'1'; 2000]).code, 400, "a size line without end");
        let mut c = Chunked::default();
        assert!(!c.step(b"0\r\n").unwrap(), "the trailers' end is still to come");
    }

    /// What `from` has to send, read by `to`.
    fn pump<A, B>(from: &mut rustls::ConnectionCommon<A>, to: &mut rustls::ConnectionCommon<B>) {
        let mut buf = Vec::new();
        while from.wants_write() {
            from.write_tls(&mut buf).unwrap();
        }
        if !buf.is_empty() {
            to.read_tls(&mut &buf[..]).unwrap();
            to.process_new_packets().unwrap();
        }
    }

    /// A node identity under a new directory (`tag`): the directory, the
    /// server's TLS config, the node CA as a client's roots.
    fn node_tls(tag: &str) -> (std::path::PathBuf, Arc<ServerConfig>, rustls::RootCertStore) {
        let dir = std::env::temp_dir().join(format!("podwarden-tls-{tag}-{}", std::process::id()));
        let id = super::super::pki::ensure(&dir, "node", &["node".to_string()]).unwrap();
        let server = tls_config(&id).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from(super::super::pki::pem_der(&id.ca_pem).unwrap())).unwrap();
        (dir, server, roots)
    }

    /// A client asking for AES-256-GCM first (rustls' own order) gets
    /// AES-128-GCM: the server's order wins.
    #[test]
    fn the_server_picks_aes_128_gcm_whatever_the_client_prefers() {
        use rustls::pki_types::ServerName;
        let (dir, server, roots) = node_tls("order");
        let provider = rustls::crypto::ring::default_provider();
        assert_eq!(provider.cipher_suites[0].suite(), rustls::CipherSuite::TLS13_AES_256_GCM_SHA384);
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut c = rustls::ClientConnection::new(Arc::new(client), ServerName::try_from("node").unwrap()).unwrap();
        let mut s = ServerConnection::new(server).unwrap();
        // the handshake, in memory
        for _ in 0..10 {
            pump(&mut c, &mut s);
            pump(&mut s, &mut c);
        }
        assert!(!c.is_handshaking() && !s.is_handshaking());
        assert_eq!(c.negotiated_cipher_suite().map(|s| s.suite()), Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A client that would resume (rustls' default) is sent no ticket and
    /// makes a full handshake the second time too.
    #[test]
    fn no_session_is_kept_for_resumption() {
        use rustls::pki_types::ServerName;
        let (dir, server, roots) = node_tls("resume");
        let client = Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        );
        for round in 0..2 {
            let mut c = rustls::ClientConnection::new(client.clone(), ServerName::try_from("node").unwrap()).unwrap();
            let mut s = ServerConnection::new(server.clone()).unwrap();
            for _ in 0..10 {
                pump(&mut c, &mut s);
                pump(&mut s, &mut c);
            }
            assert!(!c.is_handshaking() && !s.is_handshaking());
            assert_eq!(c.handshake_kind(), Some(rustls::HandshakeKind::Full), "round {round}");
            assert!(c.tls13_tickets_received() == 0, "round {round}: no ticket sent");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_revocation_list_is_read_again_when_it_changes() {
        let dir = std::env::temp_dir().join(format!("podwarden-revoked-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("revoked");
        let r = Revoked::new(path.clone());
        assert!(!r.contains("abc"), "no file: nothing revoked");
        std::fs::write(&path, "# revoked\n00:AB:CD\n").unwrap();
        assert!(r.contains("abcd"));
        assert!(!r.contains("abc"));
        std::fs::write(&path, "abcd\nabc\n").unwrap();
        assert!(r.contains("abc"), "a rewrite is seen at once");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

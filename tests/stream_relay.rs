//! The relay (`api::stream::serve`) on the fake runtime, whose streaming
//! URLs point at a stand-in streaming server in this test: a TLS client
//! (rustls, as the kube API serves), bytes a client sent right after its
//! request head, a large payload both ways, the request the runtime gets
//! (no credentials), and the refusals (the caller's authorization, the
//! WebSocket protocol the runtime lacks, a pod not running).

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use parking_lot::Mutex;
use podwarden::api::query::Query;
use podwarden::api::status::ApiError;
use podwarden::api::stream::{self, StreamTarget, UpgradeRequest};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
    podwarden::base::thread::spawn("relay-test", None, f).unwrap()
}

/// Read through the blank line: (head, what came after it).
fn read_head(s: &mut dyn Read) -> (Vec<u8>, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "EOF before the head's end: {:?}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return (buf[..p + 4].to_vec(), buf[p + 4..].to_vec());
        }
    }
}

/// A stand-in streaming server: answers each upgrade 101 (SPDY) and
/// echoes the stream; records each request head it got.
fn runtime_server() -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let h = heads.clone();
    spawn(move || {
        for conn in l.incoming().flatten() {
            let h = h.clone();
            spawn(move || {
                let mut conn = conn;
                let (head, rest) = read_head(&mut conn);
                h.lock().push(String::from_utf8_lossy(&head).into_owned());
                conn.write_all(
                    b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n",
                )
                .unwrap();
                conn.write_all(&rest).unwrap();
                let mut buf = vec![0u8; 65536];
                while let Ok(n @ 1..) = conn.read(&mut buf) {
                    if conn.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    (port, heads)
}

fn tls_config() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls");
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(dir.join("cert.pem")).unwrap().collect::<Result<_, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("key.pem")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

/// The test's client takes the fixture's self-signed certificate.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The kube API's part, reduced: TLS, the head, the target from a
/// kubelet-style path, `serve` with `allow`.
fn tls_relay(parts: podwarden::agent::Parts, config: Arc<rustls::ServerConfig>, forbid: bool) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    spawn(move || {
        for tcp in l.incoming().flatten() {
            let (parts, config) = (parts.clone(), config.clone());
            spawn(move || {
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                let (head, rest) = read_head(&mut tls);
                let req = UpgradeRequest::parse(&head, &rest).unwrap();
                let (path, query) = req.target.split_once('?').unwrap_or((&req.target, ""));
                let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
                let target = StreamTarget::from_query(seg[0], seg[1], seg[2], seg[3], &Query::parse(query)).unwrap();
                let allow = move |_: &podwarden::model::Pod| {
                    if forbid { Err(ApiError::forbidden("user \"x\" cannot create pods/exec")) } else { Ok(()) }
                };
                stream::serve(&parts, Box::new(tls), &req, target, allow).unwrap();
            });
        }
    });
    port
}

fn tls_client(
    port: u16,
    config: &Arc<rustls::ClientConfig>,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    rustls::StreamOwned::new(rustls::ClientConnection::new(config.clone(), name).unwrap(), tcp)
}

#[test]
fn a_tls_client_is_relayed_byte_for_byte_and_the_runtime_gets_no_credentials() {
    let h = Harness::new();
    let (rport, heads) = runtime_server();
    h.fake.set_stream_base(&format!("http://127.0.0.1:{rport}"));
    let p = arc(pod("web", "u1"));
    h.agent.apply_source(vec![p.clone()]);
    wait_for("container running", Duration::from_secs(10), || h.fake.live_containers("u1") == 1);
    let (server, client) = tls_config();
    let port = tls_relay(h.parts.clone(), server.clone(), false);

    let mut c = tls_client(port, &client);
    // the head and the stream's first bytes in one write
    c.write_all(
        b"POST /exec/default/web/c?command=cat&stdin=true&stdout=true HTTP/1.1\r\nHost: node\r\nAuthorization: Bearer secret\r\n\
          Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\nEARLY",
    )
    .unwrap();
    c.flush().unwrap();
    let (head, mut got) = read_head(&mut c);
    let head = String::from_utf8(head).unwrap();
    assert!(
        head.starts_with("HTTP/1.1 101 ") && head.contains("X-Stream-Protocol-Version: v4.channel.k8s.io"),
        "{head}"
    );
    // 8 MiB each way through TLS, written while the echo is read
    let data: Vec<u8> = (0..8u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let want: Vec<u8> = b"EARLY".iter().copied().chain(data.iter().copied()).collect();
    let mut buf = vec![0u8; 65536];
    let mut sent = 0;
    c.sock.set_nonblocking(true).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while got.len() < want.len() {
        assert!(std::time::Instant::now() < deadline, "stalled at {} of {} bytes", got.len(), want.len());
        if sent < data.len() {
            let end = (sent + 16384).min(data.len());
            match c.write(&data[sent..end]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        let _ = c.flush();
        match c.read(&mut buf) {
            Ok(0) => panic!("closed after {} bytes", got.len()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_micros(200)),
            Err(e) => panic!("{e}"),
        }
    }
    assert!(got == want, "the bytes came back as they went");
    let seen = heads.lock()[0].clone();
    let container = h.fake.calls_for("u1", podwarden::runtime::Op::Exec);
    assert_eq!(container.len(), 1, "one CRI Exec");
    assert!(seen.starts_with("POST /exec/"), "the runtime's path: {seen}");
    assert!(!seen.contains("secret") && !seen.contains("Authorization"), "no credentials to the runtime: {seen}");
    assert!(
        seen.contains("Upgrade: SPDY/3.1\r\n") && seen.contains("X-Stream-Protocol-Version: v4.channel.k8s.io\r\n"),
        "{seen}"
    );
    assert!(seen.contains(&format!("Host: 127.0.0.1:{rport}\r\n")), "{seen}");
}

/// The whole answer to one request through TLS (the relay closes after a
/// refusal).
fn answer(port: u16, client: &Arc<rustls::ClientConfig>, request: &str) -> String {
    let mut c = tls_client(port, client);
    c.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn refusals_are_statuses_and_ask_the_runtime_nothing() {
    let h = Harness::new();
    let (rport, heads) = runtime_server();
    h.fake.set_stream_base(&format!("http://127.0.0.1:{rport}"));
    h.agent.apply_source(vec![arc(pod("web", "u1"))]);
    wait_for("container running", Duration::from_secs(10), || h.fake.live_containers("u1") == 1);
    let (server, client) = tls_config();
    let open = tls_relay(h.parts.clone(), server.clone(), false);
    let closed = tls_relay(h.parts.clone(), server, true);
    let spdy = "POST /exec/default/web/c?command=true&stdout=true HTTP/1.1\r\nHost: n\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n";
    let a = answer(closed, &client, spdy);
    assert!(
        a.starts_with("HTTP/1.1 403 Forbidden\r\n")
            && a.contains("\"reason\":\"Forbidden\"")
            && a.contains("cannot create pods/exec"),
        "{a}"
    );
    // WebSocket: a subprotocol nobody serves, a v5 handshake without its
    // key (answered here, so checked here)
    let ws = "GET /exec/default/web/c?command=true&stdout=true HTTP/1.1\r\nHost: n\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: v6.channel.k8s.io\r\n\r\n";
    let a = answer(open, &client, ws);
    assert!(a.starts_with("HTTP/1.1 400 Bad Request\r\n") && a.contains("v6.channel.k8s.io"), "{a}");
    let v5 = ws.replace("v6.", "v5.").replace("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", "");
    let a = answer(open, &client, &v5);
    assert!(a.starts_with("HTTP/1.1 400 Bad Request\r\n") && a.contains("Sec-WebSocket-Key"), "{a}");
    let a = answer(open, &client, &spdy.replace("/web/", "/nope/"));
    assert!(a.starts_with("HTTP/1.1 404 Not Found\r\n") && a.contains("pod default/nope not found"), "{a}");
    let a = answer(open, &client, &spdy.replace("/web/c", "/web/side"));
    assert!(a.starts_with("HTTP/1.1 400 ") && a.contains("container side is not valid for pod default/web"), "{a}");
    assert!(heads.lock().is_empty(), "no refusal reached the runtime's streaming server");
    assert!(h.fake.calls_for("u1", podwarden::runtime::Op::Exec).is_empty(), "nor asked the runtime for a URL");
}

/// A pod that is not running is refused as a 400 `Status` naming it,
/// before any streaming URL is asked for: exec and attach into a container
/// that does not run (its start fails) in a ready sandbox, and exec,
/// attach and port-forward into a pod whose container exited and whose
/// sandbox was stopped (`restartPolicy: Never`).
#[test]
fn a_pod_not_running_is_refused_and_the_runtime_asked_nothing() {
    use podwarden::runtime::Op;
    let h = Harness::new();
    let (rport, heads) = runtime_server();
    h.fake.set_stream_base(&format!("http://127.0.0.1:{rport}"));
    h.fake.fail(Op::StartContainer, Some("u2"), u32::MAX);
    h.agent.apply_source(vec![arc(with_policy(pod("done", "u1"), "Never")), arc(pod("waiting", "u2"))]);
    wait_for("done's container running", Duration::from_secs(10), || h.fake.live_containers("u1") == 1);
    assert!(h.fake.exit_container("u1", "c", 0));
    wait_for("done's sandbox stopped", Duration::from_secs(10), || h.fake.ready_sandboxes("u1") == 0);
    wait_for("waiting's start failed", Duration::from_secs(10), || {
        !h.fake.calls_for("u2", Op::StartContainer).is_empty() && h.fake.ready_sandboxes("u2") == 1
    });
    let (server, client) = tls_config();
    let port = tls_relay(h.parts.clone(), server, false);
    let head = |target: &str| {
        format!(
            "POST {target} HTTP/1.1\r\nHost: n\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n"
        )
    };
    let refused = |target: &str, message: &str| {
        let a = answer(port, &client, &head(target));
        assert!(
            a.starts_with("HTTP/1.1 400 Bad Request\r\n")
                && a.contains("\"reason\":\"BadRequest\"")
                && a.contains(message),
            "{target}: {a}"
        );
    };
    refused(
        "/exec/default/waiting/c?command=true&stdout=true",
        "container c is not running in pod default/waiting: cannot exec",
    );
    refused(
        "/attach/default/waiting/c?stdout=true",
        "container c is not running in pod default/waiting: cannot attach",
    );
    for target in [
        "/exec/default/done/c?command=true&stdout=true",
        "/attach/default/done/c?stdout=true",
        "/portForward/default/done/?port=80",
    ] {
        refused(target, "pod default/done is not running (no ready sandbox)");
    }
    assert!(heads.lock().is_empty(), "no refusal reached the runtime's streaming server");
    for (uid, op) in
        [("u1", Op::Exec), ("u1", Op::Attach), ("u1", Op::PortForward), ("u2", Op::Exec), ("u2", Op::Attach)]
    {
        assert!(h.fake.calls_for(uid, op).is_empty(), "{uid}: no {op:?} asked of the runtime");
    }
}

//! The Kubernetes API of the node (issue 28), on the private containerd
//! (`scripts/bench.sh api` prepares it), with the release binary, all in
//! one run with 110 running pods (109 idle ones and `srv`, whose port 8080
//! answers each connection with 64 MiB of zeros, `nc -ll` running `head`):
//!
//! - `get_pods_table_p50_ms`, `_p99_ms`: 100 `GET /api/v1/pods?limit=500`
//!   asking for kubectl's Table (110 rows), over TLS with a client
//!   certificate made by `podwarden kubeconfig`, on one keep-alive
//!   connection (kubectl reuses its connection; the server keeps it), after
//!   3 requests not counted; `get_pods_table_new_conn_p50_ms`: 20 more,
//!   each on a new connection (TCP and a full TLS handshake); beside them,
//!   medians of 20 on the keep-alive connection: `get_version_p50_ms` (a
//!   round trip) and `get_namespaces_p50_ms` (a list: an incremental sync
//!   of the watch hub, which every list does first, and a small answer);
//! - `watch_event_ms`: the container of 12 of the pods is stopped through
//!   CRI by this bench, a second apart (a crash, to podwarden), and
//!   podwarden starts it again: from containerd's start event of the new
//!   container, as this bench's own subscription to containerd's events
//!   sees it (as `benches/reactions.rs` does; podwarden shows no finer
//!   time of its own: the status' times have whole seconds), to the first
//!   event of a client's watch of the pods (JSON, over TLS) showing that
//!   container running. podwarden writes a pod's status at the end of its
//!   sync pass, once the container it started is read back as running: so
//!   this is that read and the status written, then the API's part (the
//!   watch hub's sync and the event's way to the client). Median;
//!   `watch_exit_to_event_ms`: from containerd's exit event of the stopped
//!   container to the first watch event showing it terminated (the whole
//!   way: the relist that sees the exit, the pass that restarts the
//!   container and only then writes the status, the API). Median;
//! - `exec_ratio`: an exec of `true` through podwarden ÷ the same exec
//!   against containerd's streaming URL, both with this bench's WebSocket
//!   client (`v4.channel.k8s.io`, stdout and stderr, to the end of the
//!   stream): through podwarden a new TLS connection and the upgrade of
//!   `/api/v1/namespaces/bench/pods/srv/exec` (podwarden asks CRI `Exec`
//!   and relays), directly the CRI `Exec` call (made here) and the upgrade
//!   of its URL. 30 rounds, each of the two and a second direct exec
//!   first, second and third in turn; medians. `exec_direct_to_direct_ratio`:
//!   the second direct set's median ÷ the first's, the same exec on both
//!   sides: how far a ratio of medians of 30 moves by chance. Each
//!   side's phases are printed (the connection ready: the CRI call, or TCP
//!   and TLS; the upgrade answered; the status read; the end) and every
//!   round's time: the spread of the runtime's own exec shows there;
//!   `exec_upgrade_direct_ms` and `exec_upgrade_relay_ms`, the medians of
//!   the upgrade answered, are the relay's own part without that spread;
//!   kubectl cannot talk to a bare streaming URL; `exec_kubectl_ms` is the
//!   median wall time of 10 `kubectl.1.33 exec srv -- true` (a new process:
//!   the pod GET, then WebSocket v5, which podwarden translates to SPDY);
//! - `portforward_ratio`: 64 MiB from `srv`'s port 8080 through podwarden's
//!   relay ÷ through containerd's own port-forward URL, as a throughput
//!   ratio, both with this bench's WebSocket client (`v4.channel.k8s.io`,
//!   `?port=8080`), from the upgrade to the last byte; 15 rounds each,
//!   with a second direct set, in turn as for exec; medians
//!   (`portforward_direct_to_direct_ratio`: the second direct set's ÷ the
//!   first's). `portforward_tls_floor_ratio`: the same through a bare TLS
//!   relay in the bench (the agent's TLS settings and certificate, one
//!   thread copying, nothing else) ÷ direct, the floor of any TLS relay on
//!   this machine; `portforward_relay_to_floor_ratio`: podwarden's ÷ it.
//!   `portforward_kubectl_mib_s`: the same 64 MiB
//!   through `kubectl.1.33 port-forward` (SPDY inside WebSocket,
//!   tunnelled by podwarden), median of 3 connections;
//! - `rss_kib_110_api`: podwarden's largest RSS while 10 watches are open
//!   and a 64 MiB port-forward runs through it (sampled every 2 ms);
//!   `rss_kib_110_idle`: before the API served anything; the anonymous
//!   part of each (`rss_anon_kib_*`: the binary's code pages are the rest)
//!   and 6 s after the first lists (`rss_anon_kib_110_after_lists`: what
//!   the watch hub holds, once a heap trim has passed);
//! - `healthz_p99_ms_100_watches`: p99 of 100 `GET /healthz` on the
//!   read-only port while 100 watches are asked for (`watches_open`: how
//!   many the server took; it takes at most `api::kube::watch::MAX_WATCHERS`
//!   watches, one connection each).
//!
//! The last line is one JSON object. Times are milliseconds, rates MiB/s.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use podwarden::runtime::cri::CriRuntime;
use podwarden::runtime::events::{Kind, Note};
use podwarden::runtime::{ContainerState, Runtime, RuntimePod, Streams};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use serde_json::Value;
use tungstenite::{Message, WebSocket};

mod support;
use support::{Agent, IMAGE, call, proc_status, socket, write_atomically};

const PODS: usize = 110;
const NS: &str = "bench";
/// An idle pod: one `sleep` an hour, as the kubelet's density tests run
/// pause containers. (A `sleep 1` loop in 110 pods forks 110 processes a
/// second on 2 cores: noise in every round of the ratios below, on both
/// sides alike.)
const RUN: &str = "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done";
/// `srv`: each connection to 8080 gets [`PF_BYTES`] zeros, then the end.
const SRV: &str = "printf '#!/bin/sh\\nexec head -c 67108864 /dev/zero\\n' > /tmp/send; chmod +x /tmp/send; \
                   trap 'exit 0' TERM; nc -ll -p 8080 -e /tmp/send & while :; do sleep 3600 & wait; done";
const PF_BYTES: usize = 64 << 20;
/// Port-forward rounds each way: a 64 MiB transfer keeps both cores busy
/// (the pod's writer, containerd, the client and, relayed, podwarden), so
/// one round's throughput moves with whatever else runs: with 110 pods
/// forking `sleep` every second, single rounds ranged from 72 to 168 MiB/s
/// in one run, either way, and medians of 9 gave ratios of 0.80, 0.88 and
/// 1.17 in three runs of one session (20 rounds a side: 0.905); with idle
/// pods, 97 to 154 MiB/s.
const PF_ROUNDS: usize = 15;
const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
const ROUNDS: usize = 10;
/// Exec rounds each way: runc's own exec of `true` takes 20 to 60 ms here
/// (one round to the next), so medians of 10 moved by up to 28 % between
/// two sets of the same direct exec (`exec_direct_to_direct_ratio` 0.85
/// to 1.28 in three runs), more than the relay's whole part.
const EXEC_ROUNDS: usize = 30;
const FLIPS: usize = 12;
/// Every read from podwarden or the runtime ends within this.
const IO_TIMEOUT: Duration = Duration::from_secs(60);

fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
    podwarden::base::thread::spawn("bench-api", None, f).unwrap()
}

fn manifest(name: &str, host_network: bool, restart: &str, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {NS}\nspec:\n  hostNetwork: {host_network}\n  restartPolicy: {restart}\n  terminationGracePeriodSeconds: 5\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", {command:?}]\n"
    )
}

fn wait(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < end, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Nearest-rank percentile `p` (0..=100).
fn percentile(v: &[f64], p: usize) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[(v.len() * p).div_ceil(100).max(1) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn bench_pods(cri: &CriRuntime) -> Vec<RuntimePod> {
    cri.list_pods(&call()).unwrap().into_iter().filter(|p| p.namespace == NS).collect()
}

fn pod_of(cri: &CriRuntime, name: &str) -> Option<RuntimePod> {
    let uid = bench_pods(cri).into_iter().find(|p| p.name == name)?.uid;
    cri.pod_status(&call(), &uid).ok()
}

fn running(p: &RuntimePod) -> bool {
    p.latest("main").is_some_and(|c| c.state == ContainerState::Running)
}

// ---- TLS and HTTP/1.1 as kubectl uses them ----

type Tls = StreamOwned<ClientConnection, TcpStream>;

/// The base64 of a kubeconfig's `*-data` field, decoded (podwarden's PEM
/// reader does base64).
fn b64(text: &str) -> Vec<u8> {
    podwarden::api::kube::pki::pem_der(&format!("-----BEGIN X-----\n{text}\n-----END X-----\n")).expect("base64")
}

/// The TLS client of `kubeconfig` (written by `podwarden kubeconfig`): the
/// node CA as the one root, its client certificate and key, ALPN
/// `http/1.1`, no session resumption (each kubectl is a new process: a
/// full handshake).
fn tls_client(kubeconfig: &Path) -> Arc<ClientConfig> {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let kc: Value = serde_yaml_ng::from_str(&text).unwrap();
    let field = |p: &str| kc.pointer(p).and_then(Value::as_str).unwrap_or_else(|| panic!("{p} in the kubeconfig"));
    let pem = |p: &str| String::from_utf8(b64(field(p))).unwrap();
    let der = |p: &str| podwarden::api::kube::pki::pem_der(&pem(p)).expect("PEM");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(der("/clusters/0/cluster/certificate-authority-data"))).unwrap();
    let mut cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from(der("/users/0/user/client-certificate-data"))],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(der("/users/0/user/client-key-data"))),
        )
        .unwrap();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.resumption = rustls::client::Resumption::disabled();
    Arc::new(cfg)
}

/// A TLS connection to the API, handshake done.
fn connect(cfg: &Arc<ClientConfig>, port: u16) -> io::Result<Tls> {
    let tcp = TcpStream::connect(("127.0.0.1", port))?;
    tcp.set_nodelay(true)?;
    tcp.set_read_timeout(Some(IO_TIMEOUT))?;
    tcp.set_write_timeout(Some(IO_TIMEOUT))?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut s = StreamOwned::new(ClientConnection::new(cfg.clone(), name).map_err(io::Error::other)?, tcp);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(s)
}

/// A response head: where it ends in the buffer, the status, the headers
/// (names lowercase).
type Head = (usize, u16, Vec<(String, String)>);

/// Read into `buf` until it holds a response head.
fn read_head(s: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<Head> {
    loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..p]).into_owned();
            let mut lines = head.split("\r\n");
            let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|c| c.parse().ok()).unwrap_or(0);
            let headers = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                .collect();
            return Ok((p + 4, status, headers));
        }
        assert!(buf.len() < 1 << 20, "a response head over 1 MiB");
        let mut chunk = [0u8; 16384];
        match s.read(&mut chunk)? {
            0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed before a response head")),
            n => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A keep-alive HTTP/1.1 connection to the API.
struct Http {
    s: Tls,
    buf: Vec<u8>,
}

impl Http {
    fn new(cfg: &Arc<ClientConfig>, port: u16) -> Http {
        Http { s: connect(cfg, port).unwrap(), buf: Vec::new() }
    }

    /// `GET path` with `accept`: the status and the body.
    fn get(&mut self, path: &str, accept: &str) -> (u16, Vec<u8>) {
        write!(
            self.s,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\nUser-Agent: podwarden-bench\r\n\r\n"
        )
        .unwrap();
        self.s.flush().unwrap();
        let (end, status, headers) = read_head(&mut self.s, &mut self.buf).unwrap();
        let len: usize = headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap();
        while self.buf.len() < end + len {
            let mut chunk = vec![0u8; 65536];
            let n = self.s.read(&mut chunk).unwrap();
            assert!(n > 0, "closed within a body");
            self.buf.extend_from_slice(&chunk[..n]);
        }
        let body = self.buf[end..end + len].to_vec();
        self.buf.drain(..end + len);
        (status, body)
    }
}

/// An open watch: a chunked response, one event per line.
struct Watch {
    s: Tls,
    buf: Vec<u8>,
}

impl Watch {
    /// `GET path` (a `watch=true` list): the watch once the server answered
    /// 200, or why not.
    fn open(cfg: &Arc<ClientConfig>, port: u16, path: &str) -> io::Result<Watch> {
        let mut s = connect(cfg, port)?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\nUser-Agent: podwarden-bench\r\n\r\n"
        )?;
        s.flush()?;
        let mut buf = Vec::new();
        let (end, status, _) = read_head(&mut s, &mut buf)?;
        if status != 200 {
            return Err(io::Error::other(format!("watch answered {status}")));
        }
        buf.drain(..end);
        Ok(Watch { s, buf })
    }

    /// The next chunk's bytes (`None`: the end); a read timeout is an error
    /// of kind `WouldBlock`/`TimedOut`, after which reading may go on.
    fn chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(p) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let size = usize::from_str_radix(String::from_utf8_lossy(&self.buf[..p]).trim(), 16)
                    .map_err(|_| io::Error::other("bad chunk size"))?;
                if size == 0 {
                    return Ok(None);
                }
                if self.buf.len() >= p + 2 + size + 2 {
                    let data = self.buf[p + 2..p + 2 + size].to_vec();
                    self.buf.drain(..p + 2 + size + 2);
                    return Ok(Some(data));
                }
            }
            let mut chunk = [0u8; 65536];
            match self.s.read(&mut chunk)? {
                0 => return Ok(None),
                n => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

// ---- WebSocket streams (v4.channel.k8s.io) ----

fn ws<S: Read + Write>(stream: S, url: &str, protocol: &str) -> WebSocket<S> {
    use tungstenite::client::IntoClientRequest;
    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert("Sec-WebSocket-Protocol", protocol.parse().unwrap());
    match tungstenite::client(req, stream) {
        Ok((ws, _)) => ws,
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r))) => panic!(
            "{url}: {} {}",
            r.status().as_u16(),
            String::from_utf8_lossy(r.body().as_deref().unwrap_or_default())
        ),
        Err(e) => panic!("{url}: {e}"),
    }
}

fn plain(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s
}

/// An exec session to its end: the status (channel 3) and when it came
/// (ms since `t`).
fn exec_to_end<S: Read + Write>(mut w: WebSocket<S>, t: Instant) -> (String, f64) {
    let (mut status, mut at) = (String::new(), 0.0);
    loop {
        match w.read() {
            Ok(Message::Binary(b)) if b.len() > 1 && b[0] == 3 => {
                status = String::from_utf8_lossy(&b[1..]).into();
                at = ms(t.elapsed());
            }
            Ok(Message::Close(_)) | Err(_) => return (status, at),
            Ok(_) => {}
        }
    }
}

/// Read [`PF_BYTES`] from a port-forward stream's data channel (0; the
/// first message of each channel starts with the port).
fn pf_read<S: Read + Write>(mut w: WebSocket<S>) {
    let (mut got, mut first) = (0, [true, true]);
    while got < PF_BYTES {
        match w.read().expect("port-forward stream") {
            Message::Binary(b) if !b.is_empty() && b[0] < 2 => {
                let skip = if std::mem::replace(&mut first[b[0] as usize], false) { 3 } else { 1 };
                let part = &b[skip.min(b.len())..];
                assert!(b[0] == 0 || part.is_empty(), "port-forward error: {}", String::from_utf8_lossy(part));
                got += part.len();
            }
            Message::Close(_) => panic!("port-forward closed after {got} bytes"),
            _ => {}
        }
    }
}

// ---- kubectl ----

fn kubectl() -> PathBuf {
    let name = "kubectl.1.33";
    let mut places = vec![PathBuf::from("/usr/lib/google-cloud-sdk/bin").join(name)];
    places.extend(std::env::var_os("PATH").iter().flat_map(std::env::split_paths).map(|d| d.join(name)));
    places.into_iter().find(|p| p.exists()).unwrap_or_else(|| {
        panic!("{name} is missing: install kubectl 1.33 as {name} in /usr/lib/google-cloud-sdk/bin or on PATH")
    })
}

fn kubectl_cmd(agent: &Agent, kubeconfig: &Path) -> Command {
    let mut c = Command::new(kubectl());
    c.arg("--kubeconfig").arg(kubeconfig).arg("--cache-dir").arg(agent.dir.join("kube-cache")).args(["-n", NS]);
    c
}

// ---- the measurements ----

struct Env<'a> {
    agent: &'a Agent,
    cri: &'a CriRuntime,
    tls: Arc<ClientConfig>,
    port: u16,
    read_only: SocketAddr,
    kubeconfig: PathBuf,
}

fn table(env: &Env, out: &mut BTreeMap<&'static str, f64>) {
    let path = "/api/v1/pods?limit=500";
    let mut c = Http::new(&env.tls, env.port);
    for _ in 0..3 {
        let (status, body) = c.get(path, TABLE_ACCEPT);
        let t: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!((status, t["kind"].as_str()), (200, Some("Table")), "{}", String::from_utf8_lossy(&body));
        assert_eq!(t["rows"].as_array().map(Vec::len), Some(PODS), "a row per pod");
    }
    let mut times = Vec::new();
    for _ in 0..100 {
        let t = Instant::now();
        let (status, _) = c.get(path, TABLE_ACCEPT);
        times.push(ms(t.elapsed()));
        assert_eq!(status, 200);
    }
    // what a request costs without the Table: a round trip (`/version`),
    // and a list that is an incremental sync of the watch hub and a tiny answer
    let (mut version, mut namespaces) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        let t = Instant::now();
        assert_eq!(c.get("/version", "application/json").0, 200);
        version.push(ms(t.elapsed()));
        let t = Instant::now();
        assert_eq!(c.get("/api/v1/namespaces", "application/json").0, 200);
        namespaces.push(ms(t.elapsed()));
    }
    let mut fresh = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let (status, _) = Http::new(&env.tls, env.port).get(path, TABLE_ACCEPT);
        fresh.push(ms(t.elapsed()));
        assert_eq!(status, 200);
    }
    let (p50, p99) = (percentile(&times, 50), percentile(&times, 99));
    println!(
        "Table of {PODS} pods: p50 {p50:.2} ms, p99 {p99:.2} ms (keep-alive); {:.2} ms on a new connection; \
         /version {:.2} ms, namespaces (a hub sync) {:.2} ms",
        median(&fresh),
        median(&version),
        median(&namespaces)
    );
    out.insert("get_version_p50_ms", median(&version));
    out.insert("get_namespaces_p50_ms", median(&namespaces));
    out.insert("get_pods_table_p50_ms", p50);
    out.insert("get_pods_table_p99_ms", p99);
    out.insert("get_pods_table_new_conn_p50_ms", median(&fresh));
}

/// What the watch showed of each container, and when it first did:
/// `running` and `terminated` (its `state`, or its `lastState` once
/// another instance runs) by container ID, and which instance replaced
/// which.
#[derive(Default)]
struct Shown {
    running: BTreeMap<String, Instant>,
    terminated: BTreeMap<String, Instant>,
    replaced_by: BTreeMap<String, String>,
}

fn watch_event(env: &Env, out: &mut BTreeMap<&'static str, f64>) {
    // this bench's own subscription to containerd's events: when each
    // container started and exited
    let seen_by_runtime: Arc<Mutex<Vec<(Kind, String, Instant)>>> = Arc::default();
    let cancel = podwarden::base::cancel::CancelToken::new();
    let (e, c) = (seen_by_runtime.clone(), cancel.clone());
    let subscription = spawn(move || {
        let cri = CriRuntime::connect(&format!("unix://{}", socket()), Duration::from_secs(10)).unwrap();
        let _ = cri.watch_events(&c, &mut |n| {
            if let Note::Event(ev) = n
                && matches!(ev.kind, Kind::Exited | Kind::Started)
            {
                e.lock().push((ev.kind, ev.container_id, Instant::now()));
            }
        });
    });
    // the client's watch, from a list's resourceVersion
    let rv = list_rv(env);
    let mut w =
        Watch::open(&env.tls, env.port, &format!("/api/v1/namespaces/{NS}/pods?watch=true&resourceVersion={rv}"))
            .unwrap();
    w.s.sock.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let shown: Arc<Mutex<Shown>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let (s, st) = (shown.clone(), stop.clone());
    let reader = spawn(move || {
        while !st.load(Ordering::SeqCst) {
            let data = match w.chunk() {
                Ok(Some(d)) => d,
                Ok(None) => panic!("the watch ended"),
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => continue,
                Err(e) => panic!("the watch: {e}"),
            };
            let at = Instant::now();
            for line in data.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let ev: Value = serde_json::from_slice(line).unwrap();
                let Some(cs) = ev.pointer("/object/status/containerStatuses/0") else { continue };
                let id = |p: &str| {
                    cs.pointer(p).and_then(Value::as_str).map(|i| i.trim_start_matches("containerd://").to_string())
                };
                let mut s = s.lock();
                let running = cs.pointer("/state/running").and(id("/containerID"));
                if let Some(r) = &running {
                    s.running.entry(r.clone()).or_insert(at);
                }
                for t in
                    [id("/state/terminated/containerID"), id("/lastState/terminated/containerID")].into_iter().flatten()
                {
                    s.terminated.entry(t.clone()).or_insert(at);
                    if let Some(r) = &running {
                        s.replaced_by.insert(t, r.clone());
                    }
                }
            }
        }
    });
    std::thread::sleep(Duration::from_millis(500)); // the subscription open
    // the container of 12 of the pods stopped by this bench, a second
    // apart: a crash, to podwarden, which starts it again
    let mut ids = Vec::new();
    for i in 0..FLIPS {
        let id = pod_of(env.cri, &format!("idle-{}", i * 8)).unwrap().latest("main").unwrap().id.clone();
        env.cri.stop_container(&call(), &id, Duration::ZERO).unwrap();
        ids.push(id);
        std::thread::sleep(Duration::from_secs(1));
    }
    wait("each stopped container terminated and its successor running, at the watch", Duration::from_secs(90), || {
        let s = shown.lock();
        ids.iter().all(|id| s.replaced_by.get(id).is_some_and(|n| s.running.contains_key(n)))
    });
    stop.store(true, Ordering::SeqCst);
    reader.join().unwrap();
    // signed: the watch may be told before this bench's subscription is
    let gap = |from: Instant, to: Instant| if to >= from { ms(to - from) } else { -ms(from - to) };
    let runtime_saw = |kind: Kind, id: &str| -> Instant {
        wait("containerd's event", Duration::from_secs(5), || {
            seen_by_runtime.lock().iter().any(|(k, c, _)| *k == kind && c == id)
        });
        seen_by_runtime.lock().iter().find(|(k, c, _)| *k == kind && c == id).unwrap().2
    };
    let (mut started, mut exited) = (Vec::new(), Vec::new());
    {
        let s = shown.lock();
        for id in &ids {
            let next = &s.replaced_by[id];
            started.push(gap(runtime_saw(Kind::Started, next), s.running[next]));
            exited.push(gap(runtime_saw(Kind::Exited, id), s.terminated[id]));
        }
    }
    cancel.cancel();
    let _ = subscription.join();
    println!(
        "watch: restarted container's start to its event (ms): {started:.1?}; the exit before it to its event (ms): {exited:.1?}"
    );
    out.insert("watch_event_ms", median(&started));
    out.insert("watch_exit_to_event_ms", median(&exited));
    wait("110 pods running again", Duration::from_secs(120), || {
        bench_pods(env.cri).iter().filter(|p| running(p)).count() == PODS
    });
}

/// Wait (at most 20 s) until the agent and containerd are idle: their CPU
/// over one second at most [`QUIET_MS`] each, so that the rounds compared
/// do not start in the tail of the phase before (twelve containers just
/// restarted: their shims, containerd's events, the agent's passes): in
/// one run before this wait, the first five exec rounds of each side took
/// up to 30 ms longer than the last five. Both sides wait alike; the wait
/// is printed (1 to 2 s in the runs since).
fn settle(env: &Env, what: &str) {
    let t = Instant::now();
    let containerd = support::containerd_pid();
    let cpu = support::cpu_ms;
    let mut last = (0.0, 0.0);
    while t.elapsed() < Duration::from_secs(20) {
        let (a0, c0) = (cpu(env.agent.pid()), containerd.map_or(0.0, cpu));
        std::thread::sleep(Duration::from_secs(1));
        last = (cpu(env.agent.pid()) - a0, containerd.map_or(0.0, cpu) - c0);
        if last.0 <= QUIET_MS && last.1 <= QUIET_MS {
            break;
        }
    }
    println!(
        "{what}: quiet after {:.1} s (last second's CPU: podwarden {:.0} ms, containerd {:.0} ms)",
        t.elapsed().as_secs_f64(),
        last.0,
        last.1
    );
}

/// CPU a second that counts as idle: with 110 idle pods containerd spends
/// 30-40 ms a second (the agent's relist) and the agent 10.
const QUIET_MS: f64 = 60.0;

/// `rounds` rounds of N sets (0: direct, 1: through podwarden, 2: direct
/// again; 3: through the bare TLS relay, for port-forward), each set in
/// each place in turn: `run(set)`'s results by set.
fn in_turn<T, const N: usize>(rounds: usize, mut run: impl FnMut(usize) -> T) -> [Vec<T>; N] {
    let mut sets = std::array::from_fn(|_| Vec::new());
    for i in 0..rounds {
        for k in 0..N {
            let set = (i + k) % N;
            sets[set].push(run(set));
        }
    }
    sets
}

fn exec(env: &Env, out: &mut BTreeMap<&'static str, f64>) {
    let srv = pod_of(env.cri, "srv").unwrap();
    let cid = srv.latest("main").unwrap().id.clone();
    let streams = Streams { stdout: true, stderr: true, ..Default::default() };
    let relay_url =
        format!("wss://127.0.0.1:{}/api/v1/namespaces/{NS}/pods/srv/exec?command=true&stdout=1&stderr=1", env.port);
    // each round's phases (ms from its start): the connection ready (the
    // CRI call made, or TCP and TLS), the upgrade answered, the status
    // read, the end
    let direct = || {
        let t = Instant::now();
        let url = env.cri.exec(&call(), &cid, &["true".to_string()], streams).unwrap();
        let (host, path) = podwarden::api::stream::split_url(&url).unwrap();
        let s = plain(&host);
        let ready = ms(t.elapsed());
        let w = ws(s, &format!("ws://{host}{path}"), "v4.channel.k8s.io");
        let upgraded = ms(t.elapsed());
        let (status, at) = exec_to_end(w, t);
        assert!(status.contains("Success"), "direct exec: {status}");
        [ready, upgraded, at, ms(t.elapsed())]
    };
    let relayed = || {
        let t = Instant::now();
        let s = connect(&env.tls, env.port).unwrap();
        let ready = ms(t.elapsed());
        let w = ws(s, &relay_url, "v4.channel.k8s.io");
        let upgraded = ms(t.elapsed());
        let (status, at) = exec_to_end(w, t);
        assert!(status.contains("Success"), "exec through podwarden: {status}");
        [ready, upgraded, at, ms(t.elapsed())]
    };
    settle(env, "exec");
    direct();
    relayed();
    // a second set of direct rounds (`a`) beside them: the ratio of two
    // sets of the same exec shows how far medians of 10 move by chance
    let containerd = support::containerd_pid();
    let cpu = support::cpu_ms;
    let before = (cpu(env.agent.pid()), containerd.map_or(0.0, cpu), Instant::now());
    let [d, r, a] = in_turn(EXEC_ROUNDS, |set| if set == 1 { relayed() } else { direct() });
    println!(
        "exec rounds: {:.0} ms; CPU podwarden {:.0} ms, containerd {:.0} ms",
        ms(before.2.elapsed()),
        cpu(env.agent.pid()) - before.0,
        containerd.map_or(0.0, |p| cpu(p) - before.1)
    );
    let phases =
        |v: &[[f64; 4]]| -> [f64; 4] { std::array::from_fn(|i| median(&v.iter().map(|p| p[i]).collect::<Vec<_>>())) };
    let (phases_d, phases_r) = (phases(&d), phases(&r));
    println!(
        "exec phases, medians (ms: ready, upgraded, status, end): direct {phases_d:.2?}, through podwarden {phases_r:.2?}"
    );
    // the upgrade answered: the relay's own part (TLS with the client's
    // certificate, the CRI Exec podwarden makes, its connection to the
    // runtime and the runtime's answer), apart from the exec's spread
    out.insert("exec_upgrade_direct_ms", phases_d[1]);
    out.insert("exec_upgrade_relay_ms", phases_r[1]);
    let end = |v: &[[f64; 4]]| -> Vec<f64> { v.iter().map(|p| p[3]).collect() };
    let (d, r, a) = (end(&d), end(&r), end(&a));
    println!("exec rounds (ms): direct {d:.1?}, through podwarden {r:.1?}, direct again {a:.1?}");
    let aa = median(&a) / median(&d);
    let run = || {
        let t = Instant::now();
        let o = kubectl_cmd(env.agent, &env.kubeconfig).args(["exec", "srv", "--", "true"]).output().unwrap();
        assert!(o.status.success(), "kubectl exec: {}", String::from_utf8_lossy(&o.stderr));
        ms(t.elapsed())
    };
    run(); // discovery cached
    let k: Vec<f64> = (0..ROUNDS).map(|_| run()).collect();
    let (d, r, k) = (median(&d), median(&r), median(&k));
    println!(
        "exec true: direct {d:.2} ms, through podwarden {r:.2} ms, ratio {:.3} (direct to direct {aa:.3}); kubectl exec {k:.1} ms",
        r / d
    );
    out.insert("exec_direct_to_direct_ratio", aa);
    out.insert("exec_direct_ms", d);
    out.insert("exec_relay_ms", r);
    out.insert("exec_ratio", r / d);
    out.insert("exec_kubectl_ms", k);
}

fn mib_s(d: Duration) -> f64 {
    (PF_BYTES >> 20) as f64 / d.as_secs_f64()
}

/// 64 MiB through podwarden's relay: the time it took.
fn pf_relayed(env: &Env) -> Duration {
    let url = format!("wss://127.0.0.1:{}/api/v1/namespaces/{NS}/pods/srv/portforward?port=8080", env.port);
    let t = Instant::now();
    pf_read(ws(connect(&env.tls, env.port).unwrap(), &url, "v4.channel.k8s.io"));
    t.elapsed()
}

/// The floor of any TLS relay on this machine: a bare one in the bench's
/// process, with the agent's own TLS settings and certificate
/// (`tls_config_with`: AES-128-GCM, the server's order). It takes one
/// connection on `listener`, reads the request head, hands it to the
/// runtime's streaming server at `upstream`, then copies the answer to the
/// client on one thread, 64 KiB reads, nothing else: no routing, no
/// identity, no CRI call, no polling. It ends when the client goes.
fn bare_tls_relay(agent: &Agent, listener: std::net::TcpListener, upstream: String) -> std::thread::JoinHandle<()> {
    let pki = podwarden::api::kube::pki::dir_of(&agent.dir.join("root"));
    let read = |f: &str| std::fs::read_to_string(pki.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    let id = podwarden::api::kube::pki::Identity {
        dir: pki.clone(),
        ca_pem: read(podwarden::api::kube::pki::CA_CERT),
        serving_cert_pem: read(podwarden::api::kube::pki::SERVING_CERT),
        serving_key_pem: read(podwarden::api::kube::pki::SERVING_KEY),
    };
    let (cfg, _) = podwarden::api::kube::server::tls_config_with(&id, None).unwrap();
    spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        tcp.set_nodelay(true).unwrap();
        tcp.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        tcp.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        let mut tls = StreamOwned::new(rustls::ServerConnection::new(cfg).unwrap(), tcp);
        let mut head = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tls.read(&mut buf).unwrap();
            assert!(n > 0, "bare TLS relay: the client closed before its request");
            head.extend_from_slice(&buf[..n]);
            assert!(head.len() <= 16 << 10, "bare TLS relay: a request head over 16 KiB");
        }
        let mut up = plain(&upstream);
        up.write_all(&head).unwrap();
        loop {
            let n = match up.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if tls.write_all(&buf[..n]).and_then(|_| tls.flush()).is_err() {
                break; // the client has all it wanted
            }
        }
    })
}

fn port_forward(env: &Env, out: &mut BTreeMap<&'static str, f64>) {
    let sandbox = pod_of(env.cri, "srv").unwrap().ready_sandbox().unwrap().id.clone();
    let direct = || {
        let t = Instant::now();
        let url = env.cri.port_forward(&call(), &sandbox, &[8080]).unwrap();
        let (host, path) = podwarden::api::stream::split_url(&url).unwrap();
        pf_read(ws(plain(&host), &format!("ws://{host}{path}?port=8080"), "v4.channel.k8s.io"));
        t.elapsed()
    };
    // the bare TLS relay's round: the runtime's URL asked first (as
    // podwarden does), then TCP, TLS, the upgrade and the bytes, timed
    // like the relay's from the connect
    let bare = || {
        let url = env.cri.port_forward(&call(), &sandbox, &[8080]).unwrap();
        let (host, path) = podwarden::api::stream::split_url(&url).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let relay = bare_tls_relay(env.agent, listener, host);
        let t = Instant::now();
        pf_read(ws(
            connect(&env.tls, port).unwrap(),
            &format!("wss://127.0.0.1:{port}{path}?port=8080"),
            "v4.channel.k8s.io",
        ));
        let took = t.elapsed();
        relay.join().unwrap();
        took
    };
    settle(env, "port-forward");
    // and a second direct set, as for exec, and the bare TLS relay's set
    let [d, r, a, b] = in_turn(PF_ROUNDS, |set| {
        mib_s(match set {
            1 => pf_relayed(env),
            3 => bare(),
            _ => direct(),
        })
    });
    // kubectl port-forward: its local port from its first line
    let mut pf = kubectl_cmd(env.agent, &env.kubeconfig)
        .args(["port-forward", "pod/srv", ":8080"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = io::BufReader::new(pf.stdout.take().unwrap());
    let mut line = String::new();
    io::BufRead::read_line(&mut lines, &mut line).unwrap();
    let drain = spawn(move || io::copy(&mut lines, &mut io::sink()));
    let local: u16 = line
        .split(':')
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("kubectl port-forward printed {line:?}"));
    let mut k = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let mut s = plain(&format!("127.0.0.1:{local}"));
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0;
        while got < PF_BYTES {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "kubectl port-forward closed after {got} bytes");
            got += n;
        }
        k.push(mib_s(t.elapsed()));
    }
    let _ = pf.kill();
    let _ = pf.wait();
    let _ = drain.join();
    println!(
        "port-forward 64 MiB rounds (MiB/s): direct {d:.0?}, through podwarden {r:.0?}, direct again {a:.0?}, bare TLS relay {b:.0?}"
    );
    let (d, r, k, aa, b) = (median(&d), median(&r), median(&k), median(&a) / median(&d), median(&b));
    println!(
        "port-forward 64 MiB: direct {d:.0} MiB/s, through podwarden {r:.0} MiB/s, ratio {:.3} (direct to direct {aa:.3}); bare TLS relay {b:.0} MiB/s, ratio {:.3}; kubectl {k:.0} MiB/s",
        r / d,
        b / d
    );
    out.insert("portforward_tls_floor_mib_s", b);
    out.insert("portforward_tls_floor_ratio", b / d);
    out.insert("portforward_relay_to_floor_ratio", r / b);
    out.insert("portforward_direct_to_direct_ratio", aa);
    out.insert("portforward_direct_mib_s", d);
    out.insert("portforward_relay_mib_s", r);
    out.insert("portforward_ratio", r / d);
    out.insert("portforward_kubectl_mib_s", k);
}

/// The resourceVersion of a list of all pods.
fn list_rv(env: &Env) -> String {
    let (status, body) = Http::new(&env.tls, env.port).get("/api/v1/pods?limit=500", "application/json");
    assert_eq!(status, 200);
    serde_json::from_slice::<Value>(&body).unwrap()["metadata"]["resourceVersion"].as_str().unwrap().to_string()
}

/// Open up to `n` watches of all pods from a list's resourceVersion, as
/// `kubectl get pods -A -w` does: those the server took.
fn watches(env: &Env, n: usize) -> Vec<Watch> {
    let path = format!("/api/v1/pods?watch=true&resourceVersion={}", list_rv(env));
    (0..n).filter_map(|_| Watch::open(&env.tls, env.port, &path).ok()).collect()
}

fn rss(env: &Env, out: &mut BTreeMap<&'static str, f64>) {
    let open = watches(env, 10);
    assert_eq!(open.len(), 10, "10 watches");
    let pid = env.agent.pid();
    let done = Arc::new(AtomicBool::new(false));
    let (d, port, tls) = (done.clone(), env.port, env.tls.clone());
    let flight = spawn(move || {
        let url = format!("wss://127.0.0.1:{port}/api/v1/namespaces/{NS}/pods/srv/portforward?port=8080");
        pf_read(ws(connect(&tls, port).unwrap(), &url, "v4.channel.k8s.io"));
        d.store(true, Ordering::SeqCst);
    });
    let (mut peak, mut anon) = (0, 0);
    while !done.load(Ordering::SeqCst) {
        let rss = proc_status(pid, "VmRSS:");
        if rss > peak {
            (peak, anon) = (rss, proc_status(pid, "RssAnon:"));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    flight.join().unwrap();
    println!(
        "RSS with 10 watches and a port-forward in flight: {peak} KiB, {anon} KiB of it anonymous (after: {} KiB)",
        proc_status(pid, "VmRSS:")
    );
    out.insert("rss_kib_110_api", peak as f64);
    out.insert("rss_anon_kib_110_api", anon as f64);
    drop(open);
}

fn healthz(env: &Env, out: &mut BTreeMap<&'static str, f64>) {
    std::thread::sleep(Duration::from_secs(2)); // earlier connections ended
    let open = watches(env, 100);
    let mut times = Vec::new();
    for _ in 0..100 {
        let t = Instant::now();
        let ok = support::http::get(env.read_only, "/healthz", support::http::REQUEST_TIMEOUT)
            .is_some_and(|(code, _)| code == 200);
        times.push(if ok { ms(t.elapsed()) } else { ms(support::http::REQUEST_TIMEOUT) });
    }
    let p99 = percentile(&times, 99);
    println!("/healthz p99 {p99:.2} ms with {} of 100 watches open", open.len());
    out.insert("healthz_p99_ms_100_watches", p99);
    out.insert("watches_open", open.len() as f64);
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn main() {
    let cri = CriRuntime::connect(&format!("unix://{}", socket()), Duration::from_secs(10)).unwrap();
    // a pod an interrupted run left would be the agent's orphan
    for p in bench_pods(&cri) {
        support::remove_raw_pod(&cri, &p.uid);
    }
    let (port, ro) = (free_port(), free_port());
    let agent = Agent::start(
        "api",
        &format!("address: 127.0.0.1\nport: {port}\nreadOnlyPort: {ro}\nsyncFrequency: 60s\n"),
        Stdio::inherit(),
    );
    wait("the Kubernetes API listening", Duration::from_secs(30), || TcpStream::connect(("127.0.0.1", port)).is_ok());
    for i in 0..PODS - 1 {
        let name = format!("idle-{i}");
        write_atomically(&agent.dir, &format!("{name}.yaml"), &manifest(&name, true, "Always", RUN));
    }
    write_atomically(&agent.dir, "srv.yaml", &manifest("srv", false, "Always", SRV));
    wait("110 pods running", Duration::from_secs(600), || {
        bench_pods(&cri).iter().filter(|p| running(p)).count() == PODS
    });
    std::thread::sleep(Duration::from_secs(5));
    let idle_rss = proc_status(agent.pid(), "VmRSS:");
    let idle_anon = proc_status(agent.pid(), "RssAnon:");
    let kubeconfig = agent.dir.join("kubeconfig");
    let o = Command::new(support::bin("api"))
        .args(["kubeconfig", "--config", agent.dir.join("config.yaml").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "podwarden kubeconfig: {}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(&kubeconfig, &o.stdout).unwrap();
    let env = Env {
        agent: &agent,
        cri: &cri,
        tls: tls_client(&kubeconfig),
        port,
        read_only: SocketAddr::from(([127, 0, 0, 1], ro)),
        kubeconfig,
    };
    let mut out = BTreeMap::new();
    out.insert("rss_kib_110_idle", idle_rss as f64);
    out.insert("rss_anon_kib_110_idle", idle_anon as f64);
    table(&env, &mut out);
    // what the watch hub holds once it has synced (the lists above), after
    // podwarden's periodic heap trim (every 5 s)
    std::thread::sleep(Duration::from_secs(6));
    out.insert("rss_anon_kib_110_after_lists", proc_status(agent.pid(), "RssAnon:") as f64);
    watch_event(&env, &mut out);
    exec(&env, &mut out);
    port_forward(&env, &mut out);
    rss(&env, &mut out);
    healthz(&env, &mut out);
    for e in std::fs::read_dir(agent.dir.join("manifests")).unwrap().flatten() {
        std::fs::remove_file(e.path()).unwrap();
    }
    wait("the bench pods removed", Duration::from_secs(300), || bench_pods(&cri).is_empty());
    drop(agent);
    support::print_json(&out, 3);
}

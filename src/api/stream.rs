//! exec, attach and port-forward: the runtime's streaming URL for a pod's
//! container, and the relay of an upgraded client connection to it.
//!
//! As the kubelet does, podwarden asks the runtime (CRI `Exec`, `Attach`,
//! `PortForward`) for a one-use URL on the runtime's streaming server
//! (containerd: plain HTTP on 127.0.0.1, a random port), forwards the
//! client's upgrade request there and then copies bytes both ways:
//! whatever protocol the runtime and the client share works (SPDY/3.1 and
//! the WebSocket channel protocols). Two WebSocket protocols the runtime
//! lacks are translated (below).
//!
//! What containerd 1.6.20's streaming server answers (measured):
//!
//! | request | answer |
//! |---|---|
//! | exec/attach, `POST`, SPDY/3.1, `X-Stream-Protocol-Version` v4..v1 | 101, `v4.channel.k8s.io` |
//! | exec, SPDY/3.1, `v5.channel.k8s.io` only | 403, `X-Accepted-Stream-Protocol-Versions` v4..v1 |
//! | exec/attach, WebSocket, `v4.channel.k8s.io` or `channel.k8s.io` | 101 with that subprotocol |
//! | exec, WebSocket, `v5.channel.k8s.io` only (kubectl 1.30+) | 403, empty body |
//! | port-forward, `POST`, SPDY/3.1, `portforward.k8s.io` | 101 |
//! | port-forward, WebSocket, `v4.channel.k8s.io`, `?port=P` | 101 (first frame of each channel: the port, little endian) |
//! | port-forward, WebSocket, `SPDY/3.1+portforward.k8s.io` (kubectl 1.31+) or `portforward.k8s.io` | 403 |
//! | a URL used once already | 404 |
//!
//! So the two WebSocket protocols of kubectl 1.30+ and client-go would
//! fail at the runtime; podwarden answers them itself and speaks SPDY/3.1
//! to the runtime, as the API server's translator does
//! (`api::websocket`). What [`negotiate`] decides, before the runtime is
//! asked for a URL:
//!
//! | client's upgrade | served |
//! |---|---|
//! | SPDY/3.1 (exec, attach, port-forward) | relayed byte for byte |
//! | exec/attach, WebSocket, `v5.channel.k8s.io` offered | answered here, translated to a SPDY/3.1 `v4.channel.k8s.io` session (v5's CLOSE of stdin as its `FIN`) |
//! | exec/attach, WebSocket, `v4.channel.k8s.io`, `v4.base64.channel.k8s.io`, `channel.k8s.io`, `base64.channel.k8s.io` | relayed |
//! | port-forward, WebSocket, `SPDY/3.1+portforward.k8s.io` offered | answered here, the client's SPDY tunnelled to a SPDY/3.1 `portforward.k8s.io` connection |
//! | port-forward, WebSocket, `v4.channel.k8s.io` or `v4.base64.channel.k8s.io` (`?port=`) | relayed |
//! | any other WebSocket subprotocol | `400 BadRequest` `Status` naming it |
//!
//! The runtime's own refusals (403, 404) reach the client as it sent them.
//!
//! [`serve`] runs on the caller's thread (the kube API's connection
//! thread): one `poll` loop over both sockets, non-blocking, bounded
//! buffers, ended by either side closing or by [`IDLE`] without a byte.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::agent::Parts;
pub use crate::api::duplex::Duplex;
use crate::api::query::Query;
use crate::api::status::{ApiError, Res};
use crate::api::websocket;
use crate::model::{self, Pod};
use crate::runtime::cache::FRESH;
use crate::runtime::{CallCtx, ContainerState, RuntimePod, Streams};

/// A stream with no byte either way for this long is ended (the kubelet's
/// `streamingConnectionIdleTimeout` default).
pub const IDLE: Duration = Duration::from_secs(4 * 3600);
/// The runtime's answer to the CRI call, the TCP connect to its streaming
/// server and its response head must each come within this.
pub const RUNTIME_DEADLINE: Duration = Duration::from_secs(10);
/// Largest response head the runtime may send.
const MAX_HEAD: usize = 16 << 10;
/// Each direction's buffer. 64 KiB, not more: a port-forward's bytes are
/// read from the runtime, encrypted and sent while still in the CPU's
/// cache (copying them in from the socket was the agent's largest cost,
/// 17% of its time, with 256 KiB), and TLS takes 64 KiB a write anyway.
const BUF: usize = 64 << 10;

/// What the client asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Run `command` in the container.
    Exec { command: Vec<String> },
    /// Attach to the container's main process.
    Attach,
    /// Forward connections to these ports of the pod (none: the SPDY
    /// client names them per stream).
    PortForward { ports: Vec<u16> },
}

impl Action {
    fn verb(&self) -> &'static str {
        match self {
            Action::Exec { .. } => "exec",
            Action::Attach => "attach",
            Action::PortForward { .. } => "port-forward",
        }
    }
}

/// Which pod (and container) a stream is for, and what it does there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamTarget {
    pub namespace: String,
    pub pod: String,
    /// Empty: the pod's default container (its only one, or the
    /// `kubectl.kubernetes.io/default-container` annotation's). Not used
    /// by port-forward.
    pub container: String,
    pub action: Action,
    pub streams: Streams,
}

impl StreamTarget {
    /// The target of a Kubernetes `pods/exec`, `pods/attach` or
    /// `pods/portforward` request (and the kubelet's `/exec/NS/POD/C`,
    /// `/attach/...`, `/portForward/NS/POD`) from its query:
    /// `command` (repeated), `container`, `stdin`, `stdout`, `stderr`,
    /// `tty` (booleans as `api::query` reads them, the kubelet's `input`,
    /// `output` and `error` too), and `ports`/`port` (repeated or
    /// comma-separated). `kind` is `exec`, `attach` or `portforward`;
    /// `container` from the path, if it names one, wins over the query's.
    pub fn from_query(kind: &str, namespace: &str, pod: &str, container: &str, query: &Query) -> Res<Self> {
        let mut t = StreamTarget {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
            container: container.to_string(),
            action: Action::Attach,
            streams: Streams::default(),
        };
        if t.container.is_empty() {
            t.container = query.get("container").unwrap_or_default().to_string();
        }
        // the API's names, and the kubelet's (`input`, `output`, `error`:
        // what the API server sends the node)
        let either = |a: &str, b: &str| -> Res<bool> { Ok(query.flag(a)? || query.flag(b)?) };
        t.streams.stdin = either("stdin", "input")?;
        t.streams.stdout = either("stdout", "output")?;
        t.streams.stderr = either("stderr", "error")?;
        t.streams.tty = query.flag("tty")?;
        t.action = match kind {
            "exec" => {
                let command: Vec<String> = query.all(&["command"]).map(str::to_string).collect();
                if command.is_empty() {
                    return Err(ApiError::bad_request("exec: no command given (the `command` parameter)"));
                }
                Action::Exec { command }
            }
            "attach" => Action::Attach,
            "portforward" | "portForward" => {
                let mut ports = Vec::new();
                for p in query.all(&["ports", "port"]).flat_map(|v| v.split(',')).filter(|p| !p.is_empty()) {
                    ports.push(p.parse::<u16>().ok().filter(|&n| n > 0).ok_or_else(|| {
                        ApiError::bad_request(format!("port {p:?} is not a port number (1 to 65535)"))
                    })?);
                }
                Action::PortForward { ports }
            }
            other => return Err(ApiError::bad_request(format!("{other:?} is not exec, attach or portforward"))),
        };
        if matches!(t.action, Action::Exec { .. } | Action::Attach)
            && !(t.streams.stdin || t.streams.stdout || t.streams.stderr)
        {
            return Err(ApiError::bad_request("you must specify at least 1 of stdin, stdout, stderr"));
        }
        if t.streams.tty {
            // one stream for both, as the runtime merges them
            t.streams.stderr = false;
        }
        Ok(t)
    }
}

/// A runtime error as the API server's: a missing container or sandbox
/// 404, a runtime away or too slow 503, anything else 500.
fn runtime_error(e: crate::runtime::RuntimeError) -> ApiError {
    use crate::runtime::RuntimeError as R;
    match e {
        R::NotFound { .. } => ApiError::missing(e.to_string()),
        R::Unavailable(_) | R::DeadlineExceeded { .. } => ApiError::unavailable(e.to_string()),
        _ => ApiError::internal(e.to_string()),
    }
}

/// The pod `ns/name` as the agent shows it.
pub fn find_pod(parts: &Parts, ns: &str, name: &str) -> Result<Pod, ApiError> {
    crate::api::view::pod_named(parts, ns, name).ok_or_else(|| ApiError::missing(format!("pod {ns}/{name} not found")))
}

/// The container a stream is for: the named one (a container or an init
/// container of the pod), else the pod's default.
pub fn container_of(pod: &Pod, named: &str) -> Result<String, ApiError> {
    let (ns, name) = (model::namespace(pod), model::name(pod));
    let spec = pod.spec.as_ref();
    let all: Vec<&str> = spec
        .iter()
        .flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()))
        .map(|c| c.name.as_str())
        .collect();
    let regular: Vec<&str> = spec.iter().flat_map(|s| &s.containers).map(|c| c.name.as_str()).collect();
    if !named.is_empty() {
        return if all.contains(&named) {
            Ok(named.to_string())
        } else {
            Err(ApiError::bad_request(format!(
                "container {named} is not valid for pod {ns}/{name} (it has {})",
                regular.join(", ")
            )))
        };
    }
    let annotated = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubectl.kubernetes.io/default-container"))
        .filter(|c| regular.contains(&c.as_str()));
    match (annotated, regular.as_slice()) {
        (Some(c), _) => Ok(c.clone()),
        (None, [first, ..]) => Ok(first.to_string()),
        (None, []) => Err(ApiError::bad_request(format!("pod {ns}/{name} has no containers"))),
    }
}

/// Ask the runtime for the streaming URL of `target`, after `allow` (the
/// caller's authorization, which may look at the pod) passed. The pod must
/// be known to podwarden, its sandbox ready and (exec, attach) the
/// container running.
pub fn runtime_url(
    parts: &Parts,
    target: &StreamTarget,
    allow: impl FnOnce(&Pod) -> Result<(), ApiError>,
) -> Result<String, ApiError> {
    let (ns, name) = (&target.namespace, &target.pod);
    let pod = find_pod(parts, ns, name)?;
    allow(&pod)?;
    let container = match target.action {
        Action::PortForward { .. } => String::new(),
        _ => container_of(&pod, &target.container)?,
    };
    let ctx = CallCtx::background(RUNTIME_DEADLINE);
    let ask = |rp: &RuntimePod| -> Result<String, ApiError> {
        let sandbox = rp
            .ready_sandbox()
            .ok_or_else(|| ApiError::bad_request(format!("pod {ns}/{name} is not running (no ready sandbox)")))?;
        let url = match &target.action {
            Action::PortForward { ports } => parts.runtime.port_forward(&ctx, &sandbox.id, ports),
            action => {
                let c = &container;
                let info =
                    rp.latest_in(c, &sandbox.id).filter(|i| i.state == ContainerState::Running).ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "container {c} is not running in pod {ns}/{name}: cannot {} (is it started?)",
                            action.verb()
                        ))
                    })?;
                match action {
                    Action::Exec { command } => parts.runtime.exec(&ctx, &info.id, command, target.streams),
                    _ => parts.runtime.attach(&ctx, &info.id, target.streams),
                }
            }
        };
        url.map_err(runtime_error)
    };
    // the relist's view (at most FRESH old) saves the pod's status call;
    // when it is stale (a container restarted since), the runtime's own
    let uid = model::uid(&pod);
    let cached = parts.pod_cache.recent(FRESH).and_then(|l| l.iter().find(|rp| rp.uid == uid).cloned());
    if let Some(rp) = cached
        && let Ok(url) = ask(&rp)
    {
        return Ok(url);
    }
    let rp = parts.runtime.pod_status(&ctx, uid).map_err(runtime_error)?;
    ask(&rp)
}

/// An upgrade request as the server read it.
#[derive(Debug, Clone, Default)]
pub struct UpgradeRequest {
    pub method: String,
    /// Path and query, as on the request line.
    pub target: String,
    /// In order, as received (names as sent).
    pub headers: Vec<(String, Vec<u8>)>,
    /// Bytes read past the head (the start of the stream).
    pub rest: Vec<u8>,
}

impl UpgradeRequest {
    /// Parse a request head (through its blank line) read from a client;
    /// `rest` is what follows it.
    pub fn parse(head: &[u8], rest: &[u8]) -> Result<Self, ApiError> {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(head) {
            Ok(httparse::Status::Complete(_)) => Ok(UpgradeRequest {
                method: req.method.unwrap_or_default().to_string(),
                target: req.path.unwrap_or_default().to_string(),
                headers: req.headers.iter().map(|h| (h.name.to_string(), h.value.to_vec())).collect(),
                rest: rest.to_vec(),
            }),
            Ok(httparse::Status::Partial) => Err(ApiError::bad_request("incomplete request head")),
            Err(e) => Err(ApiError::bad_request(format!("bad request head: {e}"))),
        }
    }

    /// Every value of header `name`, split at commas, trimmed.
    pub fn values(&self, name: &str) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .flat_map(|(_, v)| String::from_utf8_lossy(v).split(',').map(|s| s.trim().to_string()).collect::<Vec<_>>())
            .filter(|s| !s.is_empty())
            .collect()
    }

    fn query(&self) -> &str {
        self.target.split_once('?').map_or("", |(_, q)| q)
    }
}

/// Which upgrade the client asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upgrade {
    /// SPDY/3.1: relayed; the runtime negotiates `X-Stream-Protocol-Version`.
    Spdy,
    /// WebSocket with subprotocols the runtime serves: relayed.
    WebSocket,
    /// exec or attach over WebSocket `v5.channel.k8s.io`: answered here and
    /// translated to SPDY/3.1 for the runtime (`api::websocket::exec`).
    WebSocketV5,
    /// port-forward's SPDY inside WebSocket (`SPDY/3.1+portforward.k8s.io`):
    /// answered here, tunnelled to a SPDY/3.1 connection to the runtime
    /// (`api::websocket::tunnel`).
    SpdyTunnel,
}

/// The WebSocket subprotocols containerd 1.6's streaming server accepts
/// for exec and attach.
pub const WS_EXEC_PROTOCOLS: [&str; 4] =
    ["v4.channel.k8s.io", "v4.base64.channel.k8s.io", "channel.k8s.io", "base64.channel.k8s.io"];
/// ... and for port-forward (with `?port=`).
pub const WS_PORTFORWARD_PROTOCOLS: [&str; 2] = ["v4.channel.k8s.io", "v4.base64.channel.k8s.io"];

/// Whether and how to serve `req` for `action`, decided before the runtime
/// is asked: SPDY/3.1 relayed (the runtime negotiates the version);
/// WebSocket `v5.channel.k8s.io` (exec, attach) and
/// `SPDY/3.1+portforward.k8s.io` (port-forward) translated here, other
/// WebSocket subprotocols relayed when the runtime serves them (see the
/// module's table), else a `400`; anything else is not an upgrade this
/// endpoint serves.
pub fn negotiate(req: &UpgradeRequest, action: &Action) -> Result<Upgrade, ApiError> {
    let upgrade = req.values("Upgrade");
    let verb = action.verb();
    if upgrade.iter().any(|u| u.eq_ignore_ascii_case("SPDY/3.1")) {
        return Ok(Upgrade::Spdy);
    }
    if upgrade.iter().any(|u| u.eq_ignore_ascii_case("websocket")) {
        let offered = req.values("Sec-WebSocket-Protocol");
        let forward = matches!(action, Action::PortForward { .. });
        let (ours, served): (&str, &[&str]) = if forward {
            (websocket::SPDY_TUNNEL, &WS_PORTFORWARD_PROTOCOLS)
        } else {
            (websocket::V5, &WS_EXEC_PROTOCOLS)
        };
        if offered.iter().any(|o| o == ours) {
            return Ok(if forward { Upgrade::SpdyTunnel } else { Upgrade::WebSocketV5 });
        }
        if offered.iter().any(|o| served.contains(&o.as_str())) {
            return Ok(Upgrade::WebSocket);
        }
        return Err(ApiError::bad_request(format!(
            "{verb}: the WebSocket protocol {} is not served (podwarden serves {ours}, {}; SPDY/3.1 works)",
            if offered.is_empty() { "(none offered)".to_string() } else { offered.join(", ") },
            served.join(", ")
        )));
    }
    Err(ApiError::bad_request(format!("{verb} needs an upgrade to SPDY/3.1 or WebSocket (Upgrade header)")))
}

/// Headers passed on to the runtime; the rest (credentials, cookies, the
/// client's host, proxies' headers) stays here.
const PASSED: [&str; 6] = [
    "Upgrade",
    "X-Stream-Protocol-Version",
    "Sec-WebSocket-Key",
    "Sec-WebSocket-Version",
    "Sec-WebSocket-Protocol",
    "User-Agent",
];

/// The runtime's streaming URL, split: (address `host:port`, path and query).
pub fn split_url(url: &str) -> Result<(String, String), ApiError> {
    let rest = match url.split_once("://") {
        Some(("http", rest)) => rest,
        Some(("https", _)) => {
            return Err(ApiError::internal(format!(
                "the runtime's streaming server uses TLS ({url}): podwarden relays plain HTTP only (set \
                 enable_tls_streaming = false in containerd's CRI config)"
            )));
        }
        _ => {
            return Err(ApiError::internal(format!("the runtime answered a URL podwarden cannot use: {url:?}")));
        }
    };
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    Ok((host.to_string(), if path.is_empty() { "/".to_string() } else { path.to_string() }))
}

/// The request head sent to the runtime: the client's method, the
/// runtime's path (and the client's query when the runtime's URL has none:
/// WebSocket port-forward reads `?port=` there), the upgrade headers, a
/// `Host` naming the runtime.
pub fn runtime_head(req: &UpgradeRequest, host: &str, path: &str) -> Vec<u8> {
    let path = match (path.contains('?'), req.query()) {
        (false, q) if !q.is_empty() => format!("{path}?{q}"),
        _ => path.to_string(),
    };
    let mut head = format!("{} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\n", req.method).into_bytes();
    for (name, value) in &req.headers {
        if PASSED.iter().any(|p| p.eq_ignore_ascii_case(name)) {
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value);
            head.extend_from_slice(b"\r\n");
        }
    }
    if req.method.eq_ignore_ascii_case("POST") {
        head.extend_from_slice(b"Content-Length: 0\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// Relay one upgraded stream: decide ([`negotiate`]), ask the runtime
/// ([`runtime_url`], with `allow` as the caller's authorization), connect
/// to its streaming server, forward the request and the runtime's answer,
/// then copy both ways until either side closes or [`IDLE`] passes. A
/// refusal is answered to the client as a `Status`. Returns how it ended
/// for the caller's log; the client connection is closed on return.
pub fn serve(
    parts: &Parts,
    mut client: Box<dyn Duplex>,
    req: &UpgradeRequest,
    target: StreamTarget,
    allow: impl FnOnce(&Pod) -> Result<(), ApiError>,
) -> io::Result<()> {
    let refuse = |client: &mut Box<dyn Duplex>, e: &ApiError| -> io::Result<()> {
        client.set_nonblocking(false)?;
        client.write_all(&e.http_response())?;
        client.flush()
    };
    let setup = negotiate(req, &target.action).and_then(|up| {
        // a WebSocket answered here: its handshake checked before the runtime is asked
        let accept = match up {
            Upgrade::WebSocketV5 | Upgrade::SpdyTunnel => {
                let one = |name: &str| req.values(name).into_iter().next();
                let protocol = if up == Upgrade::SpdyTunnel { websocket::SPDY_TUNNEL } else { websocket::V5 };
                Some(websocket::accept_head(
                    one("Sec-WebSocket-Key").as_deref(),
                    one("Sec-WebSocket-Version").as_deref(),
                    protocol,
                )?)
            }
            Upgrade::Spdy | Upgrade::WebSocket => None,
        };
        let url = runtime_url(parts, &target, allow)?;
        let (host, path) = split_url(&url)?;
        connect(&host).map(|s| (up, accept, s, host, path))
    });
    let (up, accept, mut runtime, host, path) = match setup {
        Ok(v) => v,
        Err(e) => {
            log::info!("stream: {} of pod {}/{} refused: {e}", target.action.verb(), target.namespace, target.pod);
            return refuse(&mut client, &e);
        }
    };
    match up {
        Upgrade::WebSocketV5 => runtime.write_all(&spdy_head(&host, &path, "v4.channel.k8s.io"))?,
        Upgrade::SpdyTunnel => runtime.write_all(&spdy_head(&host, &path, "portforward.k8s.io"))?,
        Upgrade::Spdy | Upgrade::WebSocket => {
            runtime.write_all(&runtime_head(req, &host, &path))?;
            runtime.write_all(&req.rest)?;
        }
    }
    // the runtime's answer, whole when it is not a switch of protocols
    let (answer, upgraded) = read_answer(&mut runtime)?;
    if !upgraded {
        let status = String::from_utf8_lossy(answer.split(|&b| b == b'\r').next().unwrap_or_default()).into_owned();
        log::info!(
            "stream: the runtime refused the {} of pod {}/{}: {status}",
            target.action.verb(),
            target.namespace,
            target.pod
        );
    }
    runtime.set_nonblocking(true)?;
    if let (Some(accept), true) = (accept, upgraded) {
        // the client's upgrade answered here, the runtime's head dropped
        client.set_nonblocking(false)?;
        client.write_all(&accept)?;
        client.flush()?;
        client.set_nonblocking(true)?;
        client.set_nodelay()?;
        let after = answer.windows(4).position(|w| w == b"\r\n\r\n").map_or(answer.len(), |p| p + 4);
        let (first, early) = (&answer[after..], req.rest.clone());
        return match up {
            Upgrade::SpdyTunnel => websocket::tunnel(client.as_mut(), early, &mut runtime, first, IDLE),
            _ => websocket::exec(client.as_mut(), early, &mut runtime, first, target.streams, RUNTIME_DEADLINE, IDLE),
        };
    }
    client.set_nonblocking(true)?;
    client.set_nodelay()?;
    let idle = if upgraded { IDLE } else { RUNTIME_DEADLINE };
    splice(client.as_mut(), &mut runtime, &answer, !upgraded, idle)
}

/// The SPDY/3.1 upgrade request podwarden itself makes of the runtime for
/// a translated stream (`X-Stream-Protocol-Version` `protocol`).
pub fn spdy_head(host: &str, path: &str, protocol: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
         X-Stream-Protocol-Version: {protocol}\r\nContent-Length: 0\r\n\r\n"
    )
    .into_bytes()
}

/// The runtime's response head (read within [`RUNTIME_DEADLINE`], at most
/// [`MAX_HEAD`] bytes) with any bytes after it, and whether it switched
/// protocols (101). A refusal comes with its body (by `Content-Length`, at
/// most [`MAX_HEAD`]).
fn read_answer(runtime: &mut TcpStream) -> io::Result<(Vec<u8>, bool)> {
    let end = Instant::now() + RUNTIME_DEADLINE;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut want: Option<usize> = None;
    loop {
        if let Some(w) = want
            && buf.len() >= w
        {
            return Ok((buf, false));
        }
        if want.is_none() {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&buf) {
                Ok(httparse::Status::Complete(n)) => {
                    if resp.code == Some(101) {
                        return Ok((buf, true));
                    }
                    let len = resp
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case("Content-Length"))
                        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    want = Some(n + len.min(MAX_HEAD));
                    continue;
                }
                Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
                _ => return Err(io::Error::new(io::ErrorKind::InvalidData, "the runtime's answer is not HTTP")),
            }
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "the runtime did not answer the upgrade in time"));
        }
        runtime.set_read_timeout(Some(left))?;
        match runtime.read(&mut chunk) {
            Ok(0) if want.is_some() => return Ok((buf, false)),
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the runtime closed before answering")),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// A bounded TCP connect to the runtime's streaming server.
fn connect(host: &str) -> Result<TcpStream, ApiError> {
    let fail =
        |e: io::Error| ApiError::unavailable(format!("cannot reach the runtime's streaming server at {host}: {e}"));
    let addr: SocketAddr =
        host.to_socket_addrs().map_err(fail)?.next().ok_or_else(|| fail(io::ErrorKind::NotFound.into()))?;
    let s = TcpStream::connect_timeout(&addr, RUNTIME_DEADLINE).map_err(fail)?;
    s.set_nodelay(true).map_err(fail)?;
    s.set_write_timeout(Some(RUNTIME_DEADLINE)).map_err(fail)?;
    Ok(s)
}

/// One direction's bytes in flight.
struct Pipe {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The source said end of stream.
    eof: bool,
}

impl Pipe {
    fn new() -> Self {
        Pipe { buf: vec![0; BUF].into_boxed_slice(), start: 0, end: 0, eof: false }
    }
    fn pending(&self) -> bool {
        self.start < self.end
    }
    fn room(&self) -> bool {
        !self.eof && self.end < self.buf.len()
    }
    /// Read what `from` has (until it would block or the buffer is full).
    fn fill(&mut self, from: &mut dyn Read) -> io::Result<bool> {
        let mut moved = false;
        while self.room() {
            match from.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    self.end += n;
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => self.eof = true,
                Err(e) => return Err(e),
            }
        }
        Ok(moved)
    }
    /// Write what is buffered to `to` (until it would block).
    fn drain(&mut self, to: &mut dyn Write) -> io::Result<bool> {
        let mut moved = false;
        while self.pending() {
            match to.write(&self.buf[self.start..self.end]) {
                Ok(0) => break,
                Ok(n) => {
                    self.start += n;
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if !self.pending() {
            (self.start, self.end) = (0, 0);
        }
        Ok(moved)
    }
}

/// Copy bytes both ways between `client` and `runtime` (both
/// non-blocking), `first` (already read from the runtime; `runtime_done`:
/// nothing more to read there) first, until either side has closed and what it sent is
/// delivered, or nothing moved for `idle`. Reads are tried before every
/// poll, so plaintext a TLS client already decrypted is never left behind
/// waiting for the socket.
pub fn splice(
    client: &mut dyn Duplex,
    runtime: &mut TcpStream,
    first: &[u8],
    runtime_done: bool,
    idle: Duration,
) -> io::Result<()> {
    let (mut up, mut down) = (Pipe::new(), Pipe::new());
    // what was read of the runtime's answer goes first (at most MAX_HEAD
    // plus a read: it fits)
    let n = first.len().min(BUF);
    down.buf[..n].copy_from_slice(&first[..n]);
    (down.end, down.eof) = (n, runtime_done);
    let mut last = Instant::now();
    loop {
        let mut moved = up.fill(client)?;
        moved |= up.drain(runtime)?;
        moved |= down.fill(runtime)?;
        moved |= down.drain(client)?;
        if client.wants_write() {
            match client.flush() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        // either side closed and its bytes are through: the stream is over
        if (up.eof && !up.pending()) || (down.eof && !down.pending() && !client.wants_write()) {
            let _ = client.flush();
            return Ok(());
        }
        if moved {
            last = Instant::now();
            continue;
        }
        let left = idle.saturating_sub(last.elapsed());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, format!("no byte either way for {idle:?}")));
        }
        let ev =
            |read: bool, write: bool| (if read { libc::POLLIN } else { 0 }) | (if write { libc::POLLOUT } else { 0 });
        let mut fds = [
            libc::pollfd { fd: client.fd(), events: ev(up.room(), down.pending() || client.wants_write()), revents: 0 },
            libc::pollfd { fd: runtime.as_raw_fd(), events: ev(down.room(), up.pending()), revents: 0 },
        ];
        let ms = left.as_millis().min(60_000) as libc::c_int;
        match crate::sys::poll(&mut fds, ms) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, target: &str, headers: &[(&str, &str)]) -> UpgradeRequest {
        UpgradeRequest {
            method: method.into(),
            target: target.into(),
            headers: headers.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect(),
            rest: Vec::new(),
        }
    }

    const EXEC: Action = Action::Exec { command: Vec::new() };

    #[test]
    fn websocket_v5_and_the_spdy_tunnel_are_answered_here_the_rest_relayed() {
        let ws = |proto: &str| {
            req("GET", "/x", &[("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Protocol", proto)])
        };
        // kubectl 1.30+ and client-go's WebSocket executor: translated to SPDY
        assert_eq!(negotiate(&ws("v5.channel.k8s.io"), &EXEC), Ok(Upgrade::WebSocketV5));
        assert_eq!(negotiate(&ws("v5.channel.k8s.io, v4.channel.k8s.io"), &Action::Attach), Ok(Upgrade::WebSocketV5));
        // kubectl 1.31+ port-forward over WebSocket: tunnelled
        let pf = Action::PortForward { ports: vec![] };
        assert_eq!(negotiate(&ws("SPDY/3.1+portforward.k8s.io"), &pf), Ok(Upgrade::SpdyTunnel));
        // what the runtime serves is relayed
        assert_eq!(negotiate(&ws("v4.channel.k8s.io"), &pf), Ok(Upgrade::WebSocket));
        assert_eq!(negotiate(&ws("channel.k8s.io"), &EXEC), Ok(Upgrade::WebSocket));
        // neither: a 400 Status naming what was offered
        let e = negotiate(&ws("portforward.k8s.io"), &pf).unwrap_err();
        assert_eq!((e.code, e.reason), (400, "BadRequest"));
        assert!(e.message.contains("portforward.k8s.io") && e.message.contains("SPDY/3.1"), "{e}");
        let resp = String::from_utf8(e.http_response()).unwrap();
        assert!(resp.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{resp}");
        let body: serde_json::Value = serde_json::from_str(resp.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(
            (body["kind"].as_str(), body["reason"].as_str(), body["code"].as_u64()),
            (Some("Status"), Some("BadRequest"), Some(400))
        );
        assert_eq!(negotiate(&ws("channel.k8s.io"), &pf).unwrap_err().code, 400);
        assert_eq!(negotiate(&ws("SPDY/3.1+portforward.k8s.io"), &EXEC).unwrap_err().code, 400);
        // SPDY: always relayed, whatever version list (the runtime negotiates)
        let spdy = req("POST", "/x", &[("Upgrade", "SPDY/3.1"), ("X-Stream-Protocol-Version", "v5.channel.k8s.io")]);
        assert_eq!(negotiate(&spdy, &EXEC), Ok(Upgrade::Spdy));
        // no upgrade at all
        let e = negotiate(&req("GET", "/x", &[]), &Action::Attach).unwrap_err();
        assert!(e.code == 400 && e.message.starts_with("attach needs an upgrade"), "{e}");
        // the runtime's side of a translated stream
        assert_eq!(
            String::from_utf8(spdy_head("127.0.0.1:1", "/exec/T", "v4.channel.k8s.io")).unwrap(),
            "POST /exec/T HTTP/1.1\r\nHost: 127.0.0.1:1\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
             X-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
        );
    }

    #[test]
    fn the_runtime_gets_its_path_the_upgrade_headers_and_nothing_else() {
        let r = req(
            "POST",
            "/api/v1/namespaces/e2e/pods/web/exec?command=sh&stdin=true",
            &[
                ("Host", "node:10250"),
                ("Authorization", "Bearer secret"),
                ("Cookie", "a=b"),
                ("Connection", "Upgrade"),
                ("Upgrade", "SPDY/3.1"),
                ("X-Stream-Protocol-Version", "v4.channel.k8s.io"),
                ("X-Stream-Protocol-Version", "channel.k8s.io"),
                ("User-Agent", "kubectl/v1.27.16"),
                ("Content-Length", "0"),
            ],
        );
        let (host, path) = split_url("http://127.0.0.1:32791/exec/Sw18U_Ze").unwrap();
        assert_eq!((host.as_str(), path.as_str()), ("127.0.0.1:32791", "/exec/Sw18U_Ze"));
        let head = String::from_utf8(runtime_head(&r, &host, &path)).unwrap();
        assert_eq!(
            head,
            "POST /exec/Sw18U_Ze?command=sh&stdin=true HTTP/1.1\r\nHost: 127.0.0.1:32791\r\nConnection: Upgrade\r\n\
             Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Stream-Protocol-Version: channel.k8s.io\r\n\
             User-Agent: kubectl/v1.27.16\r\nContent-Length: 0\r\n\r\n"
        );
        // WebSocket: key, version and protocols pass; a runtime URL with its own query keeps it
        let ws = req(
            "GET",
            "/portForward/e2e/web?port=8080",
            &[
                ("Upgrade", "websocket"),
                ("Sec-WebSocket-Key", "k=="),
                ("Sec-WebSocket-Version", "13"),
                ("Sec-WebSocket-Protocol", "v4.channel.k8s.io"),
                ("Origin", "http://evil"),
            ],
        );
        let head = String::from_utf8(runtime_head(&ws, "h:1", "/portforward/T")).unwrap();
        assert!(head.starts_with("GET /portforward/T?port=8080 HTTP/1.1\r\nHost: h:1\r\n"), "{head}");
        for want in [
            "Sec-WebSocket-Key: k==\r\n",
            "Sec-WebSocket-Version: 13\r\n",
            "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n",
        ] {
            assert!(head.contains(want), "{want} in {head}");
        }
        assert!(!head.contains("Origin") && !head.contains("Content-Length"), "{head}");
        assert!(runtime_head(&ws, "h:1", "/p?x=1").starts_with(b"GET /p?x=1 HTTP/1.1\r\n"));
        assert_eq!(split_url("https://127.0.0.1:1/exec/x").unwrap_err().code, 500);
        assert!(split_url("unix:///x").is_err());
    }

    #[test]
    fn the_target_comes_from_kubectls_query() {
        let t = StreamTarget::from_query("exec", "e2e", "web", "", &Query::parse("command=sh&command=-c&command=echo%20hi+there&container=main&stdin=true&stdout=true&stderr=true&tty=true"))
        .unwrap();
        assert_eq!(t.action, Action::Exec { command: vec!["sh".into(), "-c".into(), "echo hi there".into()] });
        assert_eq!(t.container, "main");
        // a tty merges stderr into stdout
        assert_eq!(t.streams, Streams { stdin: true, stdout: true, stderr: false, tty: true });
        let pf =
            StreamTarget::from_query("portforward", "e2e", "web", "", &Query::parse("ports=8080,9090&port=7")).unwrap();
        assert_eq!(pf.action, Action::PortForward { ports: vec![8080, 9090, 7] });
        let e = StreamTarget::from_query("portforward", "e2e", "web", "", &Query::parse("ports=80a")).unwrap_err();
        assert!(e.message.contains("\"80a\""), "{e}");
        assert!(
            StreamTarget::from_query("exec", "e2e", "web", "", &Query::parse("stdout=true"))
                .unwrap_err()
                .message
                .contains("command")
        );
        assert!(
            StreamTarget::from_query("attach", "e2e", "web", "", &Query::parse(""))
                .unwrap_err()
                .message
                .contains("stdin, stdout, stderr")
        );
        let path_wins =
            StreamTarget::from_query("attach", "e2e", "web", "side", &Query::parse("container=main&stdout=1")).unwrap();
        assert_eq!(path_wins.container, "side");
    }

    #[test]
    fn booleans_are_read_as_the_api_server_reads_them() {
        // the official Python client's exec
        let t = StreamTarget::from_query("exec", "e2e", "web", "", &Query::parse("command=ls&stdout=True&stderr=True"))
            .unwrap();
        assert_eq!(t.streams, Streams { stdin: false, stdout: true, stderr: true, tty: false });
        // what the API server sends the node
        let t =
            StreamTarget::from_query("attach", "e2e", "web", "c", &Query::parse("input=1&output=1&error=0")).unwrap();
        assert_eq!(t.streams, Streams { stdin: true, stdout: true, stderr: false, tty: false });
        let e = StreamTarget::from_query("exec", "e2e", "web", "", &Query::parse("command=ls&stdout=1&stdin=yes"))
            .unwrap_err();
        assert_eq!((e.code, e.reason), (400, "BadRequest"));
        assert!(e.message.contains("stdin") && e.message.contains("\"yes\""), "{e}");
    }

    #[test]
    fn the_default_container_is_the_only_one_the_annotated_one_or_the_first() {
        let pod = |annotation: Option<&str>| -> Pod {
            let mut v = serde_json::json!({
                "metadata": {"name": "web", "namespace": "e2e"},
                "spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "init"}]}
            });
            if let Some(a) = annotation {
                v["metadata"]["annotations"] = serde_json::json!({"kubectl.kubernetes.io/default-container": a});
            }
            serde_json::from_value(v).unwrap()
        };
        assert_eq!(container_of(&pod(None), "").unwrap(), "a");
        assert_eq!(container_of(&pod(Some("b")), "").unwrap(), "b");
        assert_eq!(container_of(&pod(Some("nope")), "").unwrap(), "a");
        assert_eq!(container_of(&pod(None), "init").unwrap(), "init");
        let e = container_of(&pod(None), "c").unwrap_err();
        assert_eq!(e.message, "container c is not valid for pod e2e/web (it has a, b)");
    }
}

//! The local API (proto/podwarden/api.proto) on a unix socket.
//!
//! podwarden accepts connections itself on one listener thread: it checks
//! the peer's credentials (`SO_PEERCRED`: root, or a member of `apiGroup`)
//! and only then hands the connection to the gRPC server
//! (`add_channel_from_fd`); a refused peer gets an HTTP/2 GOAWAY whose text
//! says why, written without waiting. The socket is created mode 0600 (0660
//! with `apiGroup`).
//!
//! The API never blocks: calls are answered on the API's own gRPC
//! environment (`api-grpc`, one completion-queue thread, not the CRI
//! client's), and a handler only reads the agent's state. Work that may
//! wait is handed over and answered from there: kills to `api-kill` (a kill
//! waits for a container start in flight), applies and log reads to
//! `api-work` (a parse, bounded file I/O). Both queues are bounded: when
//! full, a call fails at once with UNAVAILABLE.

use std::os::unix::fs::DirBuilderExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TrySendError};
use grpcio::{RpcContext, RpcStatus, RpcStatusCode, UnarySink};
use parking_lot::Mutex;

use crate::agent::Parts;
use crate::api::ops::{LogQuery, OnDemand, Ops, Trust};
use crate::api::status::ApiError;
use crate::api::view::{self, PodList};
use crate::logs::reader;
use crate::model::{self, Pod};

use crate::api::pb::{self, api};

/// What the API serves from besides the agent.
#[derive(Clone)]
pub struct ApiConfig {
    pub socket: PathBuf,
    /// Group (besides root) allowed to use the API.
    pub group: Option<(String, u32)>,
    pub healthy_within: Duration,
}

/// Look up a group by name: its gid.
pub fn group_id(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}

/// The peer's uid, gid and pid.
fn peer(s: &UnixStream) -> std::io::Result<libc::ucred> {
    crate::sys::peer_cred(s)
}

/// Supplementary groups of a process, from /proc.
fn groups_of(pid: i32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("Groups:"))
                .map(|g| g.split_whitespace().filter_map(|n| n.parse().ok()).collect())
        })
        .unwrap_or_default()
}

/// Why a peer may not use the API, or `None` if it may.
fn refusal(cred: &libc::ucred, group: &Option<(String, u32)>) -> Option<String> {
    if cred.uid == 0 {
        return None;
    }
    if let Some((name, gid)) = group {
        if cred.gid == *gid || groups_of(cred.pid).contains(gid) {
            return None;
        }
        return Some(format!("permission denied: uid {} is not root and not in group {name}", cred.uid));
    }
    Some(format!("permission denied: uid {} is not root (set apiGroup to let a group in)", cred.uid))
}

/// Tell a refused peer why, as HTTP/2 does: a GOAWAY frame with the reason
/// as its debug data (and no SETTINGS: the client's probe takes SETTINGS
/// for "accepted"). Never waits: one non-blocking write (a fresh
/// connection's buffer holds it), what the peer sent so far is drained (so
/// the close does not reset the connection before the peer read the frame),
/// then the connection is closed.
fn goaway(s: UnixStream, why: &str) {
    use std::io::{Read, Write};
    let mut frames = Vec::new();
    let why = &why.as_bytes()[..why.len().min(1024)];
    let payload_len = 8 + why.len();
    frames.extend_from_slice(&(payload_len as u32).to_be_bytes()[1..]);
    frames.extend_from_slice(&[0x7, 0, 0, 0, 0, 0]); // GOAWAY, stream 0
    frames.extend_from_slice(&0u32.to_be_bytes()); // last stream id
    frames.extend_from_slice(&0xbu32.to_be_bytes()); // ENHANCE_YOUR_CALM
    frames.extend_from_slice(why);
    let _ = s.set_nonblocking(true);
    let _ = (&s).write(&frames);
    let mut sink = [0u8; 256];
    for _ in 0..4 {
        match (&s).read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
}

/// The API's own gRPC environment (one completion-queue thread,
/// `api-grpc`): a slow or flooded API can never delay the completions of
/// the CRI calls the pod workers block on, which run on the CRI client's
/// environment ([`crate::runtime::grpc::grpc_env`]).
fn api_env() -> Arc<grpcio::Environment> {
    static ENV: std::sync::OnceLock<Arc<grpcio::Environment>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| Arc::new(crate::runtime::grpc::new_grpc_env("api-grpc"))).clone()
}

/// Calls each API server accepts at once before it re-posts slots.
const API_CALL_SLOTS: usize = 16;

/// Largest request the API takes: a manifest is at most 1 MiB.
const MAX_REQUEST_BYTES: usize = 2 << 20;
/// Calls waiting for `api-work`.
const WORK_QUEUE: usize = 64;

/// Work a handler hands over, with the sink that answers the call.
enum Job {
    /// The manifest, the sink, and whether the caller is root.
    Apply(api::ApplyRequest, UnarySink<api::ApplyResponse>, bool),
    Logs(api::LogsRequest, UnarySink<api::LogsResponse>),
    /// exec, attach or portforward; whether the caller is root.
    Stream(&'static str, api::StreamRequest, UnarySink<api::StreamResponse>, bool),
}

/// Answer a call from a thread other than the completion queue's: send the
/// reply and wait (at most a few seconds) until gRPC took it.
fn finish<T>(sink: UnarySink<T>, r: Res<T>) {
    use std::future::Future;
    use std::task::{Context, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let f = match r {
        Ok(v) => sink.success(v),
        Err(e) => sink.fail(e),
    };
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    let end = Instant::now() + Duration::from_secs(5);
    while f.as_mut().poll(&mut cx).is_pending() {
        let now = Instant::now();
        if now >= end {
            return;
        }
        std::thread::park_timeout(end - now);
    }
}

fn busy(what: &str) -> RpcStatus {
    status(RpcStatusCode::UNAVAILABLE, format!("podwarden is busy: too many {what} queued; try again"))
}

/// The running API: dropping it stops the listener and the gRPC server and
/// removes the socket.
pub struct ApiServer {
    stop: Arc<AtomicBool>,
    socket: PathBuf,
    join: Option<JoinHandle<()>>,
    /// Shared with `api-accept`, so that its descriptor stays open until
    /// both let go: [`Drop`] wakes the accept by shutting it down.
    listener: Arc<UnixListener>,
    /// The socket file's identity when bound (a socket's descriptor does
    /// not tell it: fstat answers for sockfs).
    file: Option<(u64, u64)>,
    /// One gRPC server for root's connections and one for `apiGroup`
    /// members': a handler knows its caller's trust by the server it
    /// serves (gRPC does not hand a call its peer's credentials).
    servers: Option<[Arc<Mutex<grpcio::Server>>; 2]>,
}

impl ApiServer {
    pub fn start(ops: Arc<Ops>, cfg: ApiConfig) -> std::io::Result<Self> {
        let socket = cfg.socket.clone();
        if let Some(dir) = socket.parent()
            && !dir.as_os_str().is_empty()
            && !dir.exists()
        {
            // reachable by apiGroup members whatever the umask (the socket
            // itself is 0660)
            std::fs::DirBuilder::new().recursive(true).mode(0o755).create(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
        if socket.exists() {
            if UnixStream::connect(&socket).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    "another process serves this socket (is podwarden already running?)",
                ));
            }
            std::fs::remove_file(&socket)?;
        }
        let listener = Arc::new(UnixListener::bind(&socket)?);
        let file = file_id(&socket);
        let mode = if cfg.group.is_some() { 0o660 } else { 0o600 };
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(mode))?;
        if let Some((_, gid)) = &cfg.group {
            std::os::unix::fs::chown(&socket, Some(0), Some(*gid))?;
        }
        let env = api_env();
        let h = Handlers { parts: ops.parts.clone(), ops, cfg: Arc::new(cfg.clone()) };
        let w = h.clone();
        let work = Arc::new(OnDemand::new(WORK_QUEUE, "api-work", crate::base::thread::WORKER_STACK, move |rx| {
            work_loop(&w, rx)
        }));
        let server = |root_caller: bool| -> std::io::Result<Arc<Mutex<grpcio::Server>>> {
            let svc = Service { h: h.clone(), work: work.clone(), root_caller };
            let args = grpcio::ChannelBuilder::new(env.clone())
                .max_receive_message_len(MAX_REQUEST_BYTES as i32)
                .max_send_message_len(-1)
                .build_args();
            // a server may be the first to start gRPC's event engine
            let mut server = crate::runtime::grpc::with_grpc_slack(|| {
                grpcio::ServerBuilder::new(env.clone())
                    .channel_args(args)
                    // grpcio pre-posts this many call slots (default 1024, each
                    // with its buffers: ~0.2 MiB per server); a local API with a
                    // few callers needs a handful, and a burst only waits for
                    // slots to be re-posted
                    .requests_slot_per_cq(API_CALL_SLOTS)
                    .register_service(pb::api_grpc::create_pod_warden(svc))
                    .build()
            })
            .map_err(|e| std::io::Error::other(format!("gRPC server: {e}")))?;
            server.start();
            Ok(Arc::new(Mutex::new(server)))
        };
        let servers = [server(true)?, server(false)?];
        let stop = Arc::new(AtomicBool::new(false));
        let (st, srv, group, l) = (stop.clone(), servers.clone(), cfg.group.clone(), listener.clone());
        let join = crate::base::thread::spawn("api-accept", None, move || {
            for conn in l.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (why, root) = match peer(&conn) {
                    Ok(c) => (refusal(&c, &group), c.uid == 0),
                    Err(e) => (Some(format!("cannot read peer credentials: {e}")), false),
                };
                if let Some(why) = why {
                    // a local user can connect at will: bounded log lines
                    static REFUSED: crate::base::logging::RateLimit =
                        crate::base::logging::RateLimit::new(Duration::from_secs(60));
                    if let Some(held) = REFUSED.allow() {
                        let more = crate::base::logging::held_back(held, Duration::from_secs(60));
                        log::warn!("local API: refused a connection: {why}{more}");
                    }
                    goaway(conn, &why);
                    continue;
                }
                let _ = conn.set_nonblocking(true);
                // root's connections to the root server, members' to the other
                let srv = &srv[if root { 0 } else { 1 }];
                if let Err(e) = crate::sys::grpc_serve_connection(&mut srv.lock(), conn) {
                    log::warn!("local API: cannot serve a connection: {e}");
                }
            }
        })?;
        Ok(ApiServer { stop, socket, join: Some(join), listener, file, servers: Some(servers) })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // wakes the accept (it fails with EINVAL, and the loop sees the
        // stop) even when the socket's file is gone: a connection to the
        // path, as this did before, then never came and the agent hung in
        // its shutdown
        crate::sys::shutdown_socket(&*self.listener);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
        // the file, if it is still this server's (another agent may have
        // bound the path since it was removed)
        if self.file.is_some() && file_id(&self.socket) == self.file {
            let _ = std::fs::remove_file(&self.socket);
        }
        // the last references: dropping the servers shuts them down
        drop(self.servers.take());
    }
}

/// The device and inode of the file at `path` (None: none there).
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// What the handlers read: the agent's parts and the API's configuration.
#[derive(Clone)]
struct Handlers {
    parts: Parts,
    /// What the API does to pods (shared with the Kubernetes API).
    ops: Arc<Ops>,
    cfg: Arc<ApiConfig>,
}

#[derive(Clone)]
struct Service {
    h: Handlers,
    /// To `api-work`: applies and log reads.
    work: Arc<OnDemand<Job>>,
    /// The caller is root (else a member of `apiGroup`): decided by the
    /// peer credentials at accept, see [`ApiServer`].
    root_caller: bool,
}

/// `api-work`: applies and log reads, one at a time, answered from here.
fn work_loop(h: &Handlers, rx: Receiver<Job>) {
    for job in rx {
        match job {
            Job::Apply(req, sink, root) => finish(sink, h.apply(&req, root)),
            Job::Logs(req, sink) => finish(sink, h.logs(&req)),
            Job::Stream(kind, req, sink, root) => finish(sink, h.stream(kind, &req, root)),
        }
    }
}

type Res<T> = Result<T, RpcStatus>;

fn status(code: RpcStatusCode, msg: impl Into<String>) -> RpcStatus {
    RpcStatus::with_message(code, msg.into())
}

fn reply<T: Send + 'static>(ctx: &RpcContext, sink: UnarySink<T>, r: Res<T>) {
    let f = match r {
        Ok(v) => sink.success(v),
        Err(e) => sink.fail(e),
    };
    ctx.spawn(async move {
        let _ = f.await;
    });
}

fn pod_ref(r: &api::PodRef) -> Res<(String, String)> {
    if r.name.is_empty() {
        return Err(status(RpcStatusCode::INVALID_ARGUMENT, "a pod name is required"));
    }
    let ns = if r.namespace.is_empty() { "default".to_string() } else { r.namespace.clone() };
    Ok((ns, r.name.clone()))
}

/// The APIs' error as a gRPC status: its reason as the code, its message.
fn rpc_status(e: ApiError) -> RpcStatus {
    let code = match e.reason {
        "Invalid" => RpcStatusCode::INVALID_ARGUMENT,
        "Forbidden" | "Unauthorized" => RpcStatusCode::PERMISSION_DENIED,
        "NotFound" => RpcStatusCode::NOT_FOUND,
        "AlreadyExists" => RpcStatusCode::ALREADY_EXISTS,
        // the object is there but not in a state for this (no previous
        // log, no running sandbox)
        "BadRequest" => RpcStatusCode::FAILED_PRECONDITION,
        "TooManyRequests" | "ServiceUnavailable" => RpcStatusCode::UNAVAILABLE,
        "Conflict" => RpcStatusCode::ABORTED,
        _ => RpcStatusCode::INTERNAL,
    };
    status(code, e.message)
}

impl Handlers {
    /// The v1 PodList of `namespace` (all when empty).
    fn pods(&self, namespace: &str) -> PodList {
        self.ops.pods(namespace)
    }

    fn find(&self, ns: &str, name: &str) -> Res<Pod> {
        self.ops.find(ns, name).map_err(rpc_status)
    }

    /// The node report.
    fn node(&self) -> view::NodeReport {
        view::node_of(&self.parts, self.cfg.healthy_within)
    }

    fn logs(&self, req: &api::LogsRequest) -> Res<api::LogsResponse> {
        let (ns, name) = pod_ref(req.pod.as_ref().unwrap_or_default())?;
        let cursor = (!req.file.is_empty()).then(|| reader::Cursor {
            file: req.file.clone(),
            first: req.first_time.clone(),
            last: req.last_time.clone(),
            offset: req.offset,
        });
        let q = LogQuery {
            namespace: ns,
            name,
            container: req.container.clone(),
            previous: req.previous,
            cursor,
            limit: req.limit,
            tail_lines: req.tail_lines as usize,
            timestamps: false,
        };
        let r = self.ops.logs(&q).map_err(rpc_status)?;
        Ok(api::LogsResponse {
            data: r.data,
            next_file: r.next.file,
            next_first_time: r.next.first,
            next_last_time: r.next.last,
            next_offset: r.next.offset,
            running: r.running,
            container: r.container,
            ..Default::default()
        })
    }

    /// The runtime's streaming URL for an exec, attach or port-forward
    /// (`kind`) into a pod (a CRI call: on `api-work`). Root may stream
    /// into any pod; an `apiGroup` member only into pods that meet the
    /// group's Pod Security level, which it could have applied itself (an
    /// exec into a privileged pod would be root on the node).
    fn stream(&self, kind: &str, req: &api::StreamRequest, root_caller: bool) -> Res<api::StreamResponse> {
        use crate::api::stream::{Action, StreamTarget};
        let (ns, name) = pod_ref(req.pod.as_ref().unwrap_or_default())?;
        let ports = req.ports.iter().map(|&p| u16::try_from(p).ok().filter(|&p| p > 0));
        let ports: Option<Vec<u16>> = ports.collect();
        let ports = ports.ok_or_else(|| {
            status(
                RpcStatusCode::INVALID_ARGUMENT,
                format!("pod {ns}/{name}: ports must be 1 to 65535: {:?}", req.ports),
            )
        })?;
        let action = match kind {
            "exec" if req.command.is_empty() => {
                return Err(status(RpcStatusCode::INVALID_ARGUMENT, "exec: no command given"));
            }
            "exec" => Action::Exec { command: req.command.clone() },
            "attach" => Action::Attach,
            _ => Action::PortForward { ports },
        };
        let streams = crate::runtime::Streams {
            stdin: req.stdin,
            stdout: req.stdout,
            stderr: req.stderr && !req.tty,
            tty: req.tty,
        };
        let target = StreamTarget {
            namespace: ns.clone(),
            pod: name.clone(),
            container: req.container.clone(),
            action,
            streams,
        };
        let level = self.ops.cfg.group_pod_security;
        let mut container = String::new();
        let allow = |pod: &Pod| -> Result<(), ApiError> {
            if !matches!(target.action, Action::PortForward { .. }) {
                container = crate::api::stream::container_of(pod, &req.container)?;
            }
            if root_caller {
                return Ok(());
            }
            crate::model::pss::enforce(level, pod).map_err(|v| {
                ApiError::forbidden(format!(
                    "pods \"{name}\" is forbidden: {kind} by an apiGroup member needs a pod that meets the {} \
                     Pod Security level (the group's): {v}",
                    level.as_str()
                ))
            })
        };
        let url = crate::api::stream::runtime_url(&self.parts, &target, allow).map_err(rpc_status)?;
        log::info!(
            "local API: {kind} into pod {ns}/{name} {container} by {}",
            if root_caller { "root" } else { "an apiGroup member" }
        );
        Ok(api::StreamResponse { url, container, ..Default::default() })
    }

    /// Where a pod's manifest is, if a manifest defines it.
    fn manifest_of(pod: &Pod) -> Option<PathBuf> {
        Ops::manifest_of(pod)
    }

    fn apply(&self, req: &api::ApplyRequest, root_caller: bool) -> Res<api::ApplyResponse> {
        let trust = if root_caller { Trust::Root } else { Trust::Member };
        let a = self.ops.apply(&req.manifest, &req.source, trust).map_err(rpc_status)?;
        Ok(api::ApplyResponse {
            namespace: a.namespace,
            name: a.name,
            uid: a.uid,
            manifest_path: a.manifest_path,
            result: a.result.into(),
            warnings: a.warnings,
            ..Default::default()
        })
    }
}

impl Service {
    /// Kill a pod and remove its manifest ([`Ops::delete`]); answers at once.
    fn delete(&self, req: &api::DeleteRequest) -> Res<api::DeleteResponse> {
        let (ns, name) = pod_ref(req.pod.as_ref().unwrap_or_default())?;
        let grace = req.has_grace_period.then_some(req.grace_period_seconds);
        let d = self.h.ops.delete(&ns, &name, grace).map_err(rpc_status)?;
        Ok(api::DeleteResponse { manifest_path: d.manifest_path, ..Default::default() })
    }

    /// Hand `job` to `api-work`; when its queue is full, fail the call now.
    fn hand_over(&self, ctx: &RpcContext, job: Job) {
        match self.work.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(j) | TrySendError::Disconnected(j)) => match j {
                Job::Apply(_, sink, _) => reply(ctx, sink, Err(busy("calls"))),
                Job::Logs(_, sink) => reply(ctx, sink, Err(busy("calls"))),
                Job::Stream(_, _, sink, _) => reply(ctx, sink, Err(busy("calls"))),
            },
        }
    }
}

impl pb::api_grpc::PodWarden for Service {
    fn version(&mut self, ctx: RpcContext, _req: api::VersionRequest, sink: UnarySink<api::VersionResponse>) {
        let r = api::VersionResponse {
            version: env!("CARGO_PKG_VERSION").into(),
            runtime_version: self.h.parts.runtime.version(),
            cri_api_version: crate::runtime::cri::CRI_API_VERSION.into(),
            ..Default::default()
        };
        reply(&ctx, sink, Ok(r));
    }

    fn list_pods(&mut self, ctx: RpcContext, req: api::ListPodsRequest, sink: UnarySink<api::PodListResponse>) {
        let list = self.h.pods(&req.namespace);
        let r = api::PodListResponse { pod_list_json: view::to_json(&list), ..Default::default() };
        reply(&ctx, sink, Ok(r));
    }

    fn get_pod(&mut self, ctx: RpcContext, req: api::PodRef, sink: UnarySink<api::PodResponse>) {
        let r = pod_ref(&req).and_then(|(ns, name)| self.h.find(&ns, &name)).map(|p| api::PodResponse {
            manifest_path: Handlers::manifest_of(&p).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
            pod_json: view::to_json(&p),
            ..Default::default()
        });
        reply(&ctx, sink, r);
    }

    fn list_events(&mut self, ctx: RpcContext, req: api::ListEventsRequest, sink: UnarySink<api::ListEventsResponse>) {
        let filter = req.pod.as_ref().map(|p| (p.namespace.clone(), p.name.clone()));
        let events = self
            .h
            .parts
            .events
            .list()
            .into_iter()
            .filter(|e| {
                filter.as_ref().is_none_or(|(ns, name)| {
                    e.involved_object.name == *name && (ns.is_empty() || e.involved_object.namespace == *ns)
                })
            })
            .map(|e| {
                let t = std::time::UNIX_EPOCH + Duration::from_secs_f64(e.timestamp.max(0.0));
                let o = &e.involved_object;
                api::Event {
                    time: model::rfc3339(t),
                    type_: format!("{:?}", e.event_type),
                    reason: e.reason,
                    object: if o.namespace.is_empty() {
                        format!("{}/{}", o.kind.to_lowercase(), o.name)
                    } else {
                        format!("pod/{}/{}", o.namespace, o.name)
                    },
                    message: if e.count > 1 { format!("{} (x{})", e.message, e.count) } else { e.message },
                    uid: o.uid.clone(),
                    field_path: o.field_path.clone(),
                    ..Default::default()
                }
            })
            .collect();
        reply(&ctx, sink, Ok(api::ListEventsResponse { events, ..Default::default() }));
    }

    fn get_node(&mut self, ctx: RpcContext, _req: api::GetNodeRequest, sink: UnarySink<api::NodeResponse>) {
        let r = api::NodeResponse { node_json: view::to_json(&self.h.node()), ..Default::default() };
        reply(&ctx, sink, Ok(r));
    }

    fn container_logs(&mut self, ctx: RpcContext, req: api::LogsRequest, sink: UnarySink<api::LogsResponse>) {
        self.hand_over(&ctx, Job::Logs(req, sink));
    }

    fn apply(&mut self, ctx: RpcContext, req: api::ApplyRequest, sink: UnarySink<api::ApplyResponse>) {
        self.hand_over(&ctx, Job::Apply(req, sink, self.root_caller));
    }

    fn delete(&mut self, ctx: RpcContext, req: api::DeleteRequest, sink: UnarySink<api::DeleteResponse>) {
        let r = Service::delete(self, &req);
        reply(&ctx, sink, r);
    }

    fn exec(&mut self, ctx: RpcContext, req: api::StreamRequest, sink: UnarySink<api::StreamResponse>) {
        self.hand_over(&ctx, Job::Stream("exec", req, sink, self.root_caller));
    }

    fn attach(&mut self, ctx: RpcContext, req: api::StreamRequest, sink: UnarySink<api::StreamResponse>) {
        self.hand_over(&ctx, Job::Stream("attach", req, sink, self.root_caller));
    }

    fn port_forward(&mut self, ctx: RpcContext, req: api::StreamRequest, sink: UnarySink<api::StreamResponse>) {
        self.hand_over(&ctx, Job::Stream("portforward", req, sink, self.root_caller));
    }

    fn get_stats(&mut self, ctx: RpcContext, _req: api::GetStatsRequest, sink: UnarySink<api::StatsResponse>) {
        let r = match self.h.parts.stats.last() {
            Some(s) => Ok(api::StatsResponse {
                summary_json: serde_json::to_vec(&crate::node::stats::summary(&s, &self.h.parts.node_name))
                    .unwrap_or_default(),
                ..Default::default()
            }),
            None => Err(status(
                RpcStatusCode::UNAVAILABLE,
                "no stats collected yet: try again in a few seconds".to_string(),
            )),
        };
        reply(&ctx, sink, r);
    }

    fn list_objects(
        &mut self,
        ctx: RpcContext,
        req: api::ListObjectsRequest,
        sink: UnarySink<api::ObjectListResponse>,
    ) {
        use crate::model::objects::Kind;
        let kind = match req.kind.as_str() {
            "ConfigMap" => Ok(Kind::ConfigMap),
            "Secret" => Ok(Kind::Secret),
            other => Err(status(
                RpcStatusCode::INVALID_ARGUMENT,
                format!("kind {other:?}: podwarden keeps ConfigMaps and Secrets"),
            )),
        };
        let r = kind.map(|kind| api::ObjectListResponse {
            list_json: serde_json::to_vec(&view::objects_of(&self.h.parts, kind, &req.namespace)).unwrap_or_default(),
            ..Default::default()
        });
        reply(&ctx, sink, r);
    }
}

//! The local API (proto/podwarden/api.proto) on a unix socket.
//!
//! podwarden accepts connections itself on one listener thread: it checks
//! the peer's credentials (`SO_PEERCRED`: root, or a member of `apiGroup`)
//! and only then hands the connection to the gRPC server
//! (`add_channel_from_fd`); a refused peer gets an HTTP/2 GOAWAY whose text
//! says why. The socket is created mode 0600 (0660 with `apiGroup`). Calls
//! are answered on the process's one gRPC completion-queue thread, which
//! also completes the CRI client's calls: each handler is short and never
//! waits (reads of the agent's state, one file write or read).

pub mod client;
pub mod logs;

use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use grpcio::{RpcContext, RpcStatus, RpcStatusCode, UnarySink};
use parking_lot::Mutex;
use serde_json::Value;

use crate::agent::Agent;
use crate::model;
use crate::podworkers::KillPodOptions;

#[allow(clippy::all, clippy::pedantic, dead_code, unused_imports, unused_mut, unused_qualifications, missing_docs)]
#[allow(non_camel_case_types, non_snake_case, non_upper_case_globals, unreachable_pub, deprecated)]
pub mod pb {
    pub mod api {
        include!(concat!(env!("OUT_DIR"), "/podwarden/api.rs"));
    }
    pub mod api_grpc {
        include!(concat!(env!("OUT_DIR"), "/podwarden/api_grpc.rs"));
    }
}

use pb::api;

/// What the API serves from besides the agent.
#[derive(Clone)]
pub struct ApiConfig {
    pub socket: PathBuf,
    /// Group (besides root) allowed to use the API.
    pub group: Option<(String, u32)>,
    pub static_pod_path: PathBuf,
    pub pod_logs_dir: PathBuf,
    pub node_name: String,
    pub healthy_within: Duration,
    /// Asks the manifest watcher for a scan now.
    pub rescan: Arc<dyn Fn() + Send + Sync>,
    /// Pod Security Standards level `apply` holds root's pods to (the
    /// static pods' level: root's manifests count like root's files).
    pub root_pod_security: crate::pss::Level,
    /// Pod Security Standards level `apply` holds a non-root `apiGroup`
    /// member's pods to.
    pub group_pod_security: crate::pss::Level,
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
    let mut cred = libc::ucred { pid: 0, uid: u32::MAX, gid: u32::MAX };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills a ucred of the size we pass.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r == 0 { Ok(cred) } else { Err(std::io::Error::last_os_error()) }
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
/// for "accepted").
fn goaway(mut s: UnixStream, why: &str) {
    use std::io::Write;
    let mut frames = Vec::new();
    let payload_len = 8 + why.len();
    frames.extend_from_slice(&(payload_len as u32).to_be_bytes()[1..]);
    frames.extend_from_slice(&[0x7, 0, 0, 0, 0, 0]); // GOAWAY, stream 0
    frames.extend_from_slice(&0u32.to_be_bytes()); // last stream id
    frames.extend_from_slice(&0xbu32.to_be_bytes()); // ENHANCE_YOUR_CALM
    frames.extend_from_slice(why.as_bytes());
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = s.write_all(&frames);
    std::thread::sleep(Duration::from_millis(50));
}

/// The running API: dropping it stops the listener and the gRPC server and
/// removes the socket.
pub struct ApiServer {
    stop: Arc<AtomicBool>,
    socket: PathBuf,
    join: Option<JoinHandle<()>>,
    /// One gRPC server for root's connections and one for `apiGroup`
    /// members': a handler knows its caller's trust by the server it
    /// serves (gRPC does not hand a call its peer's credentials).
    servers: Option<[Arc<Mutex<grpcio::Server>>; 2]>,
}

impl ApiServer {
    pub fn start(agent: Arc<Agent>, cfg: ApiConfig) -> std::io::Result<Self> {
        let socket = cfg.socket.clone();
        if let Some(dir) = socket.parent() {
            std::fs::create_dir_all(dir)?;
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
        let listener = UnixListener::bind(&socket)?;
        let mode = if cfg.group.is_some() { 0o660 } else { 0o600 };
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(mode))?;
        if let Some((_, gid)) = &cfg.group {
            std::os::unix::fs::chown(&socket, Some(0), Some(*gid))?;
        }
        let env = crate::runtime::cri::grpc_env();
        let shared = Arc::new(cfg.clone());
        let server = |root_caller: bool| -> std::io::Result<Arc<Mutex<grpcio::Server>>> {
            let service =
                pb::api_grpc::create_pod_warden(Service { agent: agent.clone(), cfg: shared.clone(), root_caller });
            let mut server = grpcio::ServerBuilder::new(env.clone())
                .register_service(service)
                .build()
                .map_err(|e| std::io::Error::other(format!("gRPC server: {e}")))?;
            server.start();
            Ok(Arc::new(Mutex::new(server)))
        };
        let servers = [server(true)?, server(false)?];
        let stop = Arc::new(AtomicBool::new(false));
        let (st, srv, group) = (stop.clone(), servers.clone(), cfg.group.clone());
        let join = crate::thread::spawn("api-accept", None, move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (why, root) = match peer(&conn) {
                    Ok(c) => (refusal(&c, &group), c.uid == 0),
                    Err(e) => (Some(format!("cannot read peer credentials: {e}")), false),
                };
                if let Some(why) = why {
                    log::warn!("local API: refused a connection: {why}");
                    goaway(conn, &why);
                    continue;
                }
                let _ = conn.set_nonblocking(true);
                // root's connections to the root server, members' to the other
                let srv = &srv[if root { 0 } else { 1 }];
                // SAFETY: the descriptor is a connected socket we own; gRPC
                // takes it over.
                unsafe { srv.lock().add_channel_from_fd(conn.into_raw_fd()) };
            }
        })?;
        Ok(ApiServer { stop, socket, join: Some(join), servers: Some(servers) })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = UnixStream::connect(&self.socket); // wake accept
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
        let _ = std::fs::remove_file(&self.socket);
        // the last references: dropping the servers shuts them down
        drop(self.servers.take());
    }
}

#[derive(Clone)]
struct Service {
    agent: Arc<Agent>,
    cfg: Arc<ApiConfig>,
    /// The caller is root (else a member of `apiGroup`): decided by the
    /// peer credentials at accept, see [`ApiServer`].
    root_caller: bool,
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

impl Service {
    fn pods(&self, namespace: &str) -> Value {
        let mut list = crate::http::pod_list(&self.agent, false);
        if !namespace.is_empty()
            && let Some(items) = list["items"].as_array_mut()
        {
            items.retain(|p| p["metadata"]["namespace"] == namespace);
        }
        list
    }

    fn find(&self, ns: &str, name: &str) -> Res<Value> {
        let list = self.pods(ns);
        list["items"].as_array().and_then(|i| i.iter().find(|p| p["metadata"]["name"] == name).cloned()).ok_or_else(
            || {
                status(
                    RpcStatusCode::NOT_FOUND,
                    format!(
                        "pod {ns}/{name} not found (no manifest in {} defines it)",
                        self.cfg.static_pod_path.display()
                    ),
                )
            },
        )
    }

    fn logs(&self, req: &api::LogsRequest) -> Res<api::LogsResponse> {
        let (ns, name) = pod_ref(req.pod.as_ref().unwrap_or_default())?;
        let pod = self.find(&ns, &name)?;
        let names: Vec<String> = pod["spec"]["containers"]
            .as_array()
            .map(|cs| cs.iter().filter_map(|c| c["name"].as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let container = if req.container.is_empty() {
            match names.as_slice() {
                [one] => one.clone(),
                _ => {
                    return Err(status(
                        RpcStatusCode::INVALID_ARGUMENT,
                        format!("pod {ns}/{name} has several containers: name one with -c ({})", names.join(", ")),
                    ));
                }
            }
        } else if names.contains(&req.container) {
            req.container.clone()
        } else {
            return Err(status(
                RpcStatusCode::NOT_FOUND,
                format!("container {} is not in pod {ns}/{name} (it has {})", req.container, names.join(", ")),
            ));
        };
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        let dir = self.cfg.pod_logs_dir.join(format!("{ns}_{name}_{uid}")).join(&container);
        let path = logs::pick(&dir, req.previous).ok_or_else(|| {
            if req.previous {
                status(
                    RpcStatusCode::FAILED_PRECONDITION,
                    format!("previous terminated container {container:?} in pod {ns}/{name} not found"),
                )
            } else {
                status(
                    RpcStatusCode::NOT_FOUND,
                    format!("container {container:?} in pod {ns}/{name} has no log yet (has it started?)"),
                )
            }
        })?;
        let (data, next) = logs::read(&path, req.offset, req.limit, req.tail_lines as usize)
            .map_err(|e| status(RpcStatusCode::INTERNAL, format!("reading {}: {e}", path.display())))?;
        let running = !req.previous
            && pod["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["name"] == container.as_str() && c["state"]["running"].is_object());
        Ok(api::LogsResponse { data, next_offset: next, running, container, ..Default::default() })
    }

    /// Where a pod's manifest is, if a manifest defines it.
    fn manifest_of(pod: &Value) -> Option<PathBuf> {
        pod["metadata"]["annotations"][model::CONFIG_FILE_ANNOTATION].as_str().map(PathBuf::from)
    }

    fn apply(&self, req: &api::ApplyRequest) -> Res<api::ApplyResponse> {
        let source = if req.source.is_empty() { "-" } else { req.source.as_str() };
        let bad = |msg: String| status(RpcStatusCode::INVALID_ARGUMENT, msg);
        // a first parse names the pod; the file it goes to fixes its UID
        let probe =
            model::manifest::parse(source, &req.manifest, &self.cfg.node_name).map_err(|e| bad(e.to_string()))?;
        let (ns, name) = (model::namespace(&probe).to_string(), model::name(&probe).to_string());
        let existing = self.find(&ns, &name).ok();
        let json = req.manifest.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        let path = existing.as_ref().and_then(Self::manifest_of).unwrap_or_else(|| {
            let base = if ns == "default" { name.clone() } else { format!("{ns}_{name}") };
            self.cfg.static_pod_path.join(format!("{base}.{}", if json { "json" } else { "yaml" }))
        });
        let path_str = path.to_string_lossy().into_owned();
        let pod = model::manifest::parse(&path_str, &req.manifest, &self.cfg.node_name)
            .map_err(|e| bad(e.to_string().replacen(&path_str, source, 1)))?;
        let uid = model::uid(&pod).to_string();
        self.pod_security(&pod)?;
        let result = if std::fs::read(&path).is_ok_and(|old| old == req.manifest) {
            "unchanged"
        } else {
            crate::fsutil::write_atomically(&path, &req.manifest).map_err(|e| {
                status(RpcStatusCode::INTERNAL, format!("pod {ns}/{name}: writing {}: {e}", path.display()))
            })?;
            if existing.is_some() { "configured" } else { "created" }
        };
        log::info!("local API: pod {ns}/{name} {result} ({})", path.display());
        // the watcher picks the file up (inotify, and this nudge); the call
        // does not wait: handlers run on the gRPC thread the CRI client
        // shares, and must never block
        (self.cfg.rescan)();
        Ok(api::ApplyResponse {
            namespace: ns,
            name,
            uid,
            manifest_path: path_str,
            result: result.into(),
            ..Default::default()
        })
    }

    /// The Pod Security Standards level of this caller (root: the static
    /// pods' level; an `apiGroup` member: the group's), enforced before
    /// anything is written; the error is the API server's.
    fn pod_security(&self, pod: &model::Pod) -> Res<()> {
        let level = if self.root_caller { self.cfg.root_pod_security } else { self.cfg.group_pod_security };
        crate::pss::enforce(level, pod).map_err(|m| {
            let (ns, name) = (model::namespace(pod), model::name(pod));
            log::warn!(
                "local API: refused pod {ns}/{name} from {}: {m}",
                if self.root_caller { "root" } else { "an apiGroup member" }
            );
            status(RpcStatusCode::PERMISSION_DENIED, format!("pods \"{name}\" is forbidden: {m}"))
        })
    }

    fn delete(&self, req: &api::DeleteRequest) -> Res<api::DeleteResponse> {
        let (ns, name) = pod_ref(req.pod.as_ref().unwrap_or_default())?;
        if req.has_grace_period && req.grace_period_seconds < 0 {
            return Err(status(
                RpcStatusCode::INVALID_ARGUMENT,
                format!("pod {ns}/{name}: grace period {} must not be negative", req.grace_period_seconds),
            ));
        }
        // a pod whose manifest is already gone may still be terminating
        let pod = self.find(&ns, &name).ok();
        let uid = match &pod {
            Some(p) => p["metadata"]["uid"].as_str().unwrap_or_default().to_string(),
            None => self
                .agent
                .workers
                .snapshot()
                .into_iter()
                .find(|w| w.pod.as_ref().is_some_and(|p| model::namespace(p) == ns && model::name(p) == name))
                .map(|w| w.uid)
                .ok_or_else(|| status(RpcStatusCode::NOT_FOUND, format!("pod {ns}/{name} not found")))?,
        };
        let opts = KillPodOptions {
            grace_period_override: req.has_grace_period.then_some(req.grace_period_seconds),
            ..Default::default()
        };
        self.agent.kill_pod(&uid, opts);
        let mut path = String::new();
        if let Some(p) = pod.as_ref().and_then(Self::manifest_of) {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(status(
                        RpcStatusCode::INTERNAL,
                        format!(
                            "pod {ns}/{name}: removing {}: {e} (the pod was killed; it comes back on restart)",
                            p.display()
                        ),
                    ));
                }
            }
            path = p.to_string_lossy().into_owned();
        }
        log::info!("local API: pod {ns}/{name} deleted");
        (self.cfg.rescan)();
        Ok(api::DeleteResponse { manifest_path: path, ..Default::default() })
    }
}

impl pb::api_grpc::PodWarden for Service {
    fn version(&mut self, ctx: RpcContext, _req: api::VersionRequest, sink: UnarySink<api::VersionResponse>) {
        let r = api::VersionResponse {
            version: env!("CARGO_PKG_VERSION").into(),
            runtime_version: self.agent.runtime.version(),
            cri_api_version: crate::runtime::cri::CRI_API_VERSION.into(),
            ..Default::default()
        };
        reply(&ctx, sink, Ok(r));
    }

    fn list_pods(&mut self, ctx: RpcContext, req: api::ListPodsRequest, sink: UnarySink<api::PodListResponse>) {
        let list = self.pods(&req.namespace);
        let r =
            api::PodListResponse { pod_list_json: serde_json::to_vec(&list).unwrap_or_default(), ..Default::default() };
        reply(&ctx, sink, Ok(r));
    }

    fn get_pod(&mut self, ctx: RpcContext, req: api::PodRef, sink: UnarySink<api::PodResponse>) {
        let r = pod_ref(&req).and_then(|(ns, name)| self.find(&ns, &name)).map(|p| api::PodResponse {
            manifest_path: Self::manifest_of(&p).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
            pod_json: serde_json::to_vec(&p).unwrap_or_default(),
            ..Default::default()
        });
        reply(&ctx, sink, r);
    }

    fn list_events(&mut self, ctx: RpcContext, req: api::ListEventsRequest, sink: UnarySink<api::ListEventsResponse>) {
        let filter = req.pod.as_ref().map(|p| (p.namespace.clone(), p.name.clone()));
        let events = self
            .agent
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
                    ..Default::default()
                }
            })
            .collect();
        reply(&ctx, sink, Ok(api::ListEventsResponse { events, ..Default::default() }));
    }

    fn get_node(&mut self, ctx: RpcContext, _req: api::GetNodeRequest, sink: UnarySink<api::NodeResponse>) {
        let report = crate::node::report(&self.agent, self.cfg.healthy_within, &self.agent.runtime.version());
        let r = api::NodeResponse { node_json: serde_json::to_vec(&report).unwrap_or_default(), ..Default::default() };
        reply(&ctx, sink, Ok(r));
    }

    fn container_logs(&mut self, ctx: RpcContext, req: api::LogsRequest, sink: UnarySink<api::LogsResponse>) {
        let r = self.logs(&req);
        reply(&ctx, sink, r);
    }

    fn apply(&mut self, ctx: RpcContext, req: api::ApplyRequest, sink: UnarySink<api::ApplyResponse>) {
        let r = Service::apply(self, &req);
        reply(&ctx, sink, r);
    }

    fn delete(&mut self, ctx: RpcContext, req: api::DeleteRequest, sink: UnarySink<api::DeleteResponse>) {
        let r = Service::delete(self, &req);
        reply(&ctx, sink, r);
    }
}

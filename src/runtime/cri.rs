//! The CRI `runtime.v1` client over gRPC (grpcio) on a unix socket.
//!
//! Invariant: the generated protobuf types (module `pb`, `cri/pb.rs`) never
//! leave this file and its children (the event streams, a lost exit); everything is
//! converted to podwarden's runtime types here.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::grpc::{grpc_env, with_grpc_slack};
use crossbeam_channel::select;
use grpcio::{CallOption, ChannelBuilder, RpcStatusCode};

use super::{
    Auth, CallCtx, Code, ContainerConfig, ContainerInfo, ContainerState, ImageInfo, LABEL_POD_UID, Op, Propagation,
    Result, Runtime, RuntimeError, RuntimePod, SandboxConfig, SandboxInfo, SecurityProfile,
};

#[allow(clippy::all, clippy::pedantic, dead_code, unused_imports, unused_mut, unused_qualifications, missing_docs)]
#[allow(non_camel_case_types, non_snake_case, non_upper_case_globals, unreachable_pub, deprecated)]
mod pb;

mod events;
mod exits;
mod finished;
mod lost_exit;
pub use lost_exit::ShimProcess;
mod pull;

use pull::PullWatch;

use pb::api;
use pb::api_grpc::{ImageServiceClient, RuntimeServiceClient};

fn usage(cpu: Option<&api::CpuUsage>, mem: Option<&api::MemoryUsage>) -> super::Usage {
    let v = |x: &protobuf::MessageField<api::UInt64Value>| x.as_ref().map(|v| v.value);
    super::Usage {
        timestamp_ns: cpu.map(|c| c.timestamp).or(mem.map(|m| m.timestamp)).unwrap_or(0),
        cpu_core_nanos: cpu.and_then(|c| v(&c.usage_core_nano_seconds)),
        memory_working_set_bytes: mem.and_then(|m| v(&m.working_set_bytes)),
        memory_usage_bytes: mem.and_then(|m| v(&m.usage_bytes)),
        memory_rss_bytes: mem.and_then(|m| v(&m.rss_bytes)),
        page_faults: mem.and_then(|m| v(&m.page_faults)),
        major_page_faults: mem.and_then(|m| v(&m.major_page_faults)),
    }
}

fn container_stats(s: &api::ContainerStats) -> super::ContainerStats {
    let attrs = s.attributes.as_ref();
    let layer = s.writable_layer.as_ref();
    super::ContainerStats {
        id: attrs.map(|a| a.id.clone()).unwrap_or_default(),
        name: attrs.and_then(|a| a.metadata.as_ref()).map(|m| m.name.clone()).unwrap_or_default(),
        pod_uid: attrs.and_then(|a| a.labels.get(LABEL_POD_UID).cloned()).unwrap_or_default(),
        usage: usage(s.cpu.as_ref(), s.memory.as_ref()),
        rootfs_bytes: layer.and_then(|l| l.used_bytes.as_ref()).map(|v| v.value),
        rootfs_inodes: layer.and_then(|l| l.inodes_used.as_ref()).map(|v| v.value),
    }
}

fn image_info(i: &api::Image) -> ImageInfo {
    ImageInfo {
        id: i.id.clone(),
        uid: i.uid.as_ref().map(|u| u.value),
        username: i.username.clone(),
        size: i.size,
        tags: i.repo_tags.clone(),
        digests: i.repo_digests.clone(),
        pinned: i.pinned,
    }
}

/// gRPC's own retry policy for the CRI calls that only read: when the
/// connection closes under one of them (containerd restarting, a GOAWAY,
/// "Socket closed"), it is tried again on a new connection within the same
/// deadline instead of failing a relist or a status. Calls that change
/// state (create, start, stop, remove, pull, exec) are never retried: the
/// first attempt may have been carried out.
const READ_RETRY_SERVICE_CONFIG: &str = concat!(
    r#"{"methodConfig":[{"name":["#,
    r#"{"service":"runtime.v1.RuntimeService","method":"Version"},"#,
    r#"{"service":"runtime.v1.RuntimeService","method":"PodSandboxStatus"},"#,
    r#"{"service":"runtime.v1.RuntimeService","method":"ListPodSandbox"},"#,
    r#"{"service":"runtime.v1.RuntimeService","method":"ListContainers"},"#,
    r#"{"service":"runtime.v1.RuntimeService","method":"ContainerStatus"},"#,
    r#"{"service":"runtime.v1.RuntimeService","method":"Status"},"#,
    r#"{"service":"runtime.v1.RuntimeService","method":"ListContainerStats"},"#,
    r#"{"service":"runtime.v1.RuntimeService","method":"ListPodSandboxStats"},"#,
    r#"{"service":"runtime.v1.ImageService","method":"ImageStatus"},"#,
    r#"{"service":"runtime.v1.ImageService","method":"ListImages"},"#,
    r#"{"service":"runtime.v1.ImageService","method":"ImageFsInfo"}"#,
    r#"],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","#,
    r#""backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}"#
);

/// The CRI API version podwarden speaks.
pub const CRI_API_VERSION: &str = "v1";

/// A connected CRI runtime.
pub struct CriRuntime {
    endpoint: String,
    runtime: RuntimeServiceClient,
    images: ImageServiceClient,
    /// containerd's content service on the same socket: pull progress.
    content: pb::containerd::api_grpc::ContentClient,
    /// A pull whose downloads make no progress for this long is cancelled
    /// (zero: never).
    pull_progress_deadline: Duration,
    /// The runtime has no content service (not containerd): pulls are
    /// not watched.
    no_content_service: std::sync::atomic::AtomicBool,
    /// containerd's event service on the same socket: container events
    /// where the CRI has no `GetContainerEvents` (containerd 1.6).
    containerd_events: pb::containerd_events::api_grpc::EventsClient,
    /// containerd's task service: an exit containerd lost.
    containerd_tasks: pb::containerd_tasks::api_grpc::TasksClient,
    /// The runtime answered `GetContainerEvents` with Unimplemented.
    no_cri_events: std::sync::atomic::AtomicBool,
    /// Exits containerd's events told before its CRI shows them.
    exits: exits::Exits,
    /// The final statuses of exited containers, read once.
    finished: finished::Finished,
    /// Name and version from the `Version` call at start.
    pub version: String,
}

fn socket_path(endpoint: &str) -> &str {
    endpoint.strip_prefix("unix://").unwrap_or(endpoint)
}

/// grpcio's status code as podwarden's (an unknown number: `Unknown`).
fn code_of(c: RpcStatusCode) -> Code {
    match c {
        RpcStatusCode::CANCELLED => Code::Cancelled,
        RpcStatusCode::INVALID_ARGUMENT => Code::InvalidArgument,
        RpcStatusCode::DEADLINE_EXCEEDED => Code::DeadlineExceeded,
        RpcStatusCode::NOT_FOUND => Code::NotFound,
        RpcStatusCode::ALREADY_EXISTS => Code::AlreadyExists,
        RpcStatusCode::PERMISSION_DENIED => Code::PermissionDenied,
        RpcStatusCode::RESOURCE_EXHAUSTED => Code::ResourceExhausted,
        RpcStatusCode::FAILED_PRECONDITION => Code::FailedPrecondition,
        RpcStatusCode::ABORTED => Code::Aborted,
        RpcStatusCode::OUT_OF_RANGE => Code::OutOfRange,
        RpcStatusCode::UNIMPLEMENTED => Code::Unimplemented,
        RpcStatusCode::INTERNAL => Code::Internal,
        RpcStatusCode::UNAVAILABLE => Code::Unavailable,
        RpcStatusCode::DATA_LOSS => Code::DataLoss,
        RpcStatusCode::UNAUTHENTICATED => Code::Unauthenticated,
        _ => Code::Unknown,
    }
}

fn convert_err(op: Op, e: grpcio::Error) -> RuntimeError {
    match e {
        grpcio::Error::RpcFailure(s) => match code_of(s.code()) {
            Code::NotFound => RuntimeError::NotFound { what: format!("{op}: {}", s.message()) },
            Code::DeadlineExceeded => RuntimeError::DeadlineExceeded { op },
            Code::Unavailable => RuntimeError::Unavailable(format!("{op}: {}", s.message())),
            Code::Cancelled => RuntimeError::Cancelled { op },
            Code::Unimplemented => RuntimeError::Unimplemented { op },
            code => RuntimeError::Failed { op, code, message: s.message().to_string() },
        },
        other => RuntimeError::Failed { op, code: Code::Unknown, message: other.to_string() },
    }
}

fn opt(ctx: &CallCtx, op: Op) -> Result<CallOption> {
    if ctx.cancel.is_cancelled() {
        return Err(RuntimeError::Cancelled { op });
    }
    let left = ctx.remaining();
    if left.is_zero() {
        return Err(RuntimeError::DeadlineExceeded { op });
    }
    Ok(CallOption::default().timeout(left))
}

/// One CRI call: `f` gets the call options (the deadline left, or the
/// call is not made once cancelled or past it); its error is converted.
fn call<T>(ctx: &CallCtx, op: Op, f: impl FnOnce(CallOption) -> grpcio::Result<T>) -> Result<T> {
    let began = std::time::Instant::now();
    let r = f(opt(ctx, op)?).map_err(|e| convert_err(op, e));
    log::trace!("CRI {op:?}: {:.1} ms", began.elapsed().as_secs_f64() * 1e3);
    r
}

/// Wait on this thread for a call's answer, asking `give_up` every 100 ms
/// whether to cancel it (and with what error).
fn wait_answer<T: Unpin>(
    receiver: &mut grpcio::ClientUnaryReceiver<T>,
    mut give_up: impl FnMut() -> Option<RuntimeError>,
) -> Result<grpcio::Result<T>> {
    use std::future::Future;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(answer) = std::pin::Pin::new(&mut *receiver).poll(&mut cx) {
            return Ok(answer);
        }
        if let Some(e) = give_up() {
            receiver.cancel();
            return Err(e);
        }
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

/// A profile as CRI carries it, and its deprecated string form (for
/// runtimes that read only that): `runtime/default`, `unconfined`,
/// `localhost/<path or name>`.
fn profile(p: &SecurityProfile) -> (api::SecurityProfile, String) {
    use api::security_profile::ProfileType;
    let mut sp = api::SecurityProfile::new();
    let (kind, text) = match p {
        SecurityProfile::RuntimeDefault => (ProfileType::RuntimeDefault, "runtime/default".to_string()),
        SecurityProfile::Unconfined => (ProfileType::Unconfined, "unconfined".to_string()),
        SecurityProfile::Localhost(r) => {
            sp.localhost_ref = r.clone();
            (ProfileType::Localhost, format!("localhost/{r}"))
        }
    };
    sp.profile_type = protobuf::EnumOrUnknown::new(kind);
    (sp, text)
}

/// `SystemdCgroup` of the default runtime in containerd's CRI config (JSON):
/// `.containerd.runtimes[.containerd.defaultRuntimeName].options.SystemdCgroup`.
fn systemd_cgroup_of(v: &serde_json::Value) -> Option<bool> {
    let c = v.get("containerd")?;
    let name = c.get("defaultRuntimeName").and_then(|n| n.as_str()).unwrap_or("runc");
    let runtime = c.get("runtimes")?.get(name)?;
    Some(runtime.get("options").and_then(|o| o.get("SystemdCgroup")).and_then(|s| s.as_bool()).unwrap_or(false))
}

fn from_map(m: &BTreeMap<String, String>) -> HashMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn state_of(s: protobuf::EnumOrUnknown<api::ContainerState>) -> ContainerState {
    match s.enum_value() {
        Ok(api::ContainerState::CONTAINER_CREATED) => ContainerState::Created,
        Ok(api::ContainerState::CONTAINER_RUNNING) => ContainerState::Running,
        Ok(api::ContainerState::CONTAINER_EXITED) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

fn uid_filter(uid: Option<&str>) -> HashMap<String, String> {
    let mut m = HashMap::new();
    if let Some(u) = uid {
        m.insert(LABEL_POD_UID.to_string(), u.to_string());
    }
    m
}

impl CriRuntime {
    /// Connect to `endpoint` (`unix:///path`) and check that it speaks CRI v1.
    pub fn connect(endpoint: &str, timeout: Duration) -> Result<Self> {
        let path = socket_path(endpoint);
        match std::fs::metadata(path) {
            Err(e) => {
                return Err(RuntimeError::Unavailable(format!(
                    "containerRuntimeEndpoint {endpoint}: cannot use socket {path}: {e}; is containerd running?"
                )));
            }
            Ok(m) => {
                use std::os::unix::fs::FileTypeExt;
                if !m.file_type().is_socket() {
                    return Err(RuntimeError::Unavailable(format!(
                        "containerRuntimeEndpoint {endpoint}: {path} is not a unix socket"
                    )));
                }
            }
        }
        let env = grpc_env();
        let channel = with_grpc_slack(|| {
            ChannelBuilder::new(env)
                .initial_reconnect_backoff(Duration::from_millis(100))
                .max_reconnect_backoff(Duration::from_secs(1))
                .max_receive_message_len(16 << 20)
                // no bandwidth-delay probes: on a local socket they only add a
                // ping and its answer (and wake-ups) to every call's reply
                .http2_bdp_probe(false)
                .enable_retry(true)
                .raw_cfg_string(
                    std::ffi::CString::new("grpc.service_config").expect("no NUL"),
                    std::ffi::CString::new(READ_RETRY_SERVICE_CONFIG).expect("no NUL"),
                )
                .connect(&format!("unix:{path}"))
        });
        let rt = CriRuntime {
            endpoint: endpoint.to_string(),
            runtime: RuntimeServiceClient::new(channel.clone()),
            images: ImageServiceClient::new(channel.clone()),
            content: pb::containerd::api_grpc::ContentClient::new(channel.clone()),
            pull_progress_deadline: Duration::ZERO,
            no_content_service: std::sync::atomic::AtomicBool::new(false),
            containerd_events: pb::containerd_events::api_grpc::EventsClient::new(channel.clone()),
            containerd_tasks: pb::containerd_tasks::api_grpc::TasksClient::new(channel),
            no_cri_events: std::sync::atomic::AtomicBool::new(false),
            exits: exits::Exits::default(),
            finished: finished::Finished::default(),
            version: String::new(),
        };
        let mut req = api::VersionRequest::new();
        req.version = CRI_API_VERSION.into();
        let v = rt
            .runtime
            .version_opt(&req, CallOption::default().timeout(timeout).wait_for_ready(true))
            .map_err(|e| {
                RuntimeError::Unavailable(format!(
                    "containerRuntimeEndpoint {endpoint}: the runtime does not answer the CRI {CRI_API_VERSION} API: {}",
                    convert_err(Op::Version, e)
                ))
            })?;
        if v.runtime_api_version != CRI_API_VERSION {
            return Err(RuntimeError::Unavailable(format!(
                "containerRuntimeEndpoint {endpoint}: the runtime speaks CRI {}, podwarden needs {CRI_API_VERSION}",
                v.runtime_api_version
            )));
        }
        Ok(CriRuntime { version: format!("{} {}", v.runtime_name, v.runtime_version), ..rt })
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The CRI plugin's config as a verbose `Status` shows it (`None`: the
    /// runtime does not say).
    fn cri_config(&self, ctx: &CallCtx) -> Result<Option<serde_json::Value>> {
        let mut req = api::StatusRequest::new();
        req.verbose = true;
        let r = call(ctx, Op::Status, |o| self.runtime.status_opt(&req, o))?;
        Ok(r.info.get("config").and_then(|c| serde_json::from_str(c).ok()))
    }

    /// Cancel a pull whose downloads make no progress for `d` (zero:
    /// never), as containerd 1.7's `image_pull_progress_timeout` does.
    pub fn with_pull_progress_deadline(mut self, d: Duration) -> Self {
        self.pull_progress_deadline = d;
        self
    }

    /// containerd's ongoing ingests in the CRI namespace: (ref, offset),
    /// sorted. `None`: the runtime cannot tell (no content service).
    fn ingests(&self) -> Option<Vec<(String, i64)>> {
        use std::sync::atomic::Ordering;
        if self.no_content_service.load(Ordering::Relaxed) {
            return None;
        }
        let opt = lost_exit::in_cri_namespace(Duration::from_secs(2));
        match self.content.list_statuses_opt(&pb::containerd::api::ListStatusesRequest::new(), opt) {
            Ok(r) => {
                let mut v: Vec<(String, i64)> = r.statuses.iter().map(|s| (s.ref_.clone(), s.offset)).collect();
                v.sort();
                Some(v)
            }
            Err(e) => {
                if matches!(convert_err(Op::PullImage, e), RuntimeError::Unimplemented { .. }) {
                    log::warn!(
                        "the runtime has no containerd content service: image pulls are not cut for lack of progress"
                    );
                    self.no_content_service.store(true, Ordering::Relaxed);
                }
                None
            }
        }
    }

    fn list_sandboxes(&self, ctx: &CallCtx, uid: Option<&str>) -> Result<Vec<api::PodSandbox>> {
        let mut req = api::ListPodSandboxRequest::new();
        let mut f = api::PodSandboxFilter::new();
        f.label_selector = uid_filter(uid);
        req.filter = protobuf::MessageField::some(f);
        let r = call(ctx, Op::ListPodSandbox, |o| self.runtime.list_pod_sandbox_opt(&req, o))?;
        Ok(r.items.into_iter().filter(|s| s.labels.contains_key(LABEL_POD_UID)).collect())
    }

    fn list_containers(&self, ctx: &CallCtx, uid: Option<&str>) -> Result<Vec<api::Container>> {
        let mut req = api::ListContainersRequest::new();
        let mut f = api::ContainerFilter::new();
        f.label_selector = uid_filter(uid);
        req.filter = protobuf::MessageField::some(f);
        let r = call(ctx, Op::ListContainers, |o| self.runtime.list_containers_opt(&req, o))?;
        Ok(r.containers.into_iter().filter(|c| c.labels.contains_key(LABEL_POD_UID)).collect())
    }

    fn sandbox_info(mut s: api::PodSandbox) -> SandboxInfo {
        let md = s.metadata.take().unwrap_or_default();
        SandboxInfo {
            uid: s.labels.remove(LABEL_POD_UID).unwrap_or_default(),
            ready: s.state.enum_value() == Ok(api::PodSandboxState::SANDBOX_READY),
            id: s.id,
            name: md.name,
            namespace: md.namespace,
            attempt: md.attempt,
            created_at_ns: s.created_at,
            ip: None,
        }
    }

    /// A container and the pod it belongs to (UID, name, namespace), from
    /// its labels.
    fn container_info(mut c: api::Container) -> (ContainerInfo, [String; 3]) {
        let md = c.metadata.take().unwrap_or_default();
        let mut label = |k: &str| c.labels.remove(k).unwrap_or_default();
        let pod = [label(LABEL_POD_UID), label(super::LABEL_POD_NAME), label(super::LABEL_POD_NAMESPACE)];
        let info = ContainerInfo {
            state: state_of(c.state),
            id: c.id,
            sandbox_id: c.pod_sandbox_id,
            name: md.name,
            attempt: md.attempt,
            image: c.image.take().map(|i| i.image).unwrap_or_default(),
            image_ref: c.image_ref,
            created_at_ns: c.created_at,
            started_at_ns: 0,
            finished_at_ns: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            grace: c.annotations.get(super::ANNOTATION_GRACE).and_then(|g| g.parse().ok()),
        };
        (info, pod)
    }

    fn group(sandboxes: Vec<SandboxInfo>, containers: Vec<(ContainerInfo, [String; 3])>) -> Vec<RuntimePod> {
        let mut by_uid: BTreeMap<String, RuntimePod> = BTreeMap::new();
        for s in sandboxes {
            let p =
                by_uid.entry(s.uid.clone()).or_insert_with(|| RuntimePod { uid: s.uid.clone(), ..Default::default() });
            p.name = s.name.clone();
            p.namespace = s.namespace.clone();
            p.sandboxes.push(s);
        }
        for (c, [uid, name, namespace]) in containers {
            let p = by_uid.entry(uid.clone()).or_insert_with(|| RuntimePod { uid, ..Default::default() });
            if p.name.is_empty() {
                p.name = name;
                p.namespace = namespace;
            }
            p.containers.push(c);
        }
        by_uid.into_values().collect()
    }

    /// Network and IPC per pod, PID per container (per pod with
    /// `shareProcessNamespace`), unless the host's.
    fn namespaces(c: &SandboxConfig) -> api::NamespaceOption {
        let mode = |host: bool, other: api::NamespaceMode| {
            protobuf::EnumOrUnknown::new(if host { api::NamespaceMode::NODE } else { other })
        };
        let mut ns = api::NamespaceOption::new();
        ns.network = mode(c.host_network, api::NamespaceMode::POD);
        let pid = if c.share_pid { api::NamespaceMode::POD } else { api::NamespaceMode::CONTAINER };
        ns.pid = mode(c.host_pid, pid);
        ns.ipc = mode(c.host_ipc, api::NamespaceMode::POD);
        ns
    }

    fn sandbox_config(c: &SandboxConfig) -> api::PodSandboxConfig {
        let mut md = api::PodSandboxMetadata::new();
        md.name = c.name.clone();
        md.namespace = c.namespace.clone();
        md.uid = c.uid.clone();
        md.attempt = c.attempt;
        let mut sc = api::LinuxSandboxSecurityContext::new();
        sc.namespace_options = protobuf::MessageField::some(Self::namespaces(c));
        // containerd refuses a privileged container in a sandbox not marked
        // privileged ("no privileged container allowed in sandbox")
        sc.privileged = c.privileged;
        sc.supplemental_groups = c.supplemental_groups.clone();
        let (seccomp, seccomp_path) = profile(&c.seccomp);
        sc.seccomp = protobuf::MessageField::some(seccomp);
        sc.seccomp_profile_path = seccomp_path;
        let mut linux = api::LinuxPodSandboxConfig::new();
        linux.security_context = protobuf::MessageField::some(sc);
        linux.sysctls = from_map(&c.sysctls);
        linux.cgroup_parent = c.cgroup_parent.clone();
        let mut cfg = api::PodSandboxConfig::new();
        cfg.metadata = protobuf::MessageField::some(md);
        cfg.hostname = if c.host_network { String::new() } else { c.hostname.clone() };
        cfg.log_directory = c.log_directory.clone();
        cfg.labels = from_map(&c.labels);
        cfg.annotations = from_map(&c.annotations);
        cfg.linux = protobuf::MessageField::some(linux);
        cfg.port_mappings = c
            .port_mappings
            .iter()
            .map(|p| {
                let mut m = api::PortMapping::new();
                m.protocol = protobuf::EnumOrUnknown::new(match p.protocol.as_str() {
                    "UDP" => api::Protocol::UDP,
                    "SCTP" => api::Protocol::SCTP,
                    _ => api::Protocol::TCP,
                });
                m.container_port = p.container_port;
                m.host_port = p.host_port;
                m.host_ip = p.host_ip.clone();
                m
            })
            .collect();
        if let Some(d) = &c.dns {
            let mut dns = api::DNSConfig::new();
            dns.servers = d.servers.clone();
            dns.searches = d.searches.clone();
            dns.options = d.options.clone();
            cfg.dns_config = protobuf::MessageField::some(dns);
        }
        cfg
    }

    fn container_config(c: &ContainerConfig, sandbox: &SandboxConfig) -> api::ContainerConfig {
        let mut md = api::ContainerMetadata::new();
        md.name = c.name.clone();
        md.attempt = c.attempt;
        let mut image = api::ImageSpec::new();
        image.image = c.image.clone();
        let mut cfg = api::ContainerConfig::new();
        cfg.metadata = protobuf::MessageField::some(md);
        cfg.image = protobuf::MessageField::some(image);
        cfg.command = c.command.clone();
        cfg.args = c.args.clone();
        cfg.working_dir = c.working_dir.clone();
        (cfg.stdin, cfg.stdin_once, cfg.tty) = (c.stdin, c.stdin_once, c.tty);
        cfg.envs = c
            .env
            .iter()
            .map(|(k, v)| {
                let mut kv = api::KeyValue::new();
                kv.key = k.clone();
                kv.value = v.clone();
                kv
            })
            .collect();
        cfg.mounts = c
            .mounts
            .iter()
            .map(|m| {
                let mut x = api::Mount::new();
                x.container_path = m.container_path.clone();
                x.host_path = m.host_path.clone();
                x.readonly = m.readonly;
                x.propagation = protobuf::EnumOrUnknown::new(match m.propagation {
                    Propagation::Private => api::MountPropagation::PROPAGATION_PRIVATE,
                    Propagation::HostToContainer => api::MountPropagation::PROPAGATION_HOST_TO_CONTAINER,
                    Propagation::Bidirectional => api::MountPropagation::PROPAGATION_BIDIRECTIONAL,
                });
                x
            })
            .collect();
        cfg.labels = from_map(&c.labels);
        cfg.annotations = from_map(&c.annotations);
        cfg.log_path = c.log_path.clone();
        let mut res = api::LinuxContainerResources::new();
        res.cpu_shares = c.resources.cpu_shares;
        res.cpu_quota = c.resources.cpu_quota;
        res.cpu_period = c.resources.cpu_period;
        res.memory_limit_in_bytes = c.resources.memory_limit_bytes;
        res.oom_score_adj = c.resources.oom_score_adj;
        res.hugepage_limits = c
            .resources
            .hugepage_limits
            .iter()
            .map(|h| {
                let mut l = api::HugepageLimit::new();
                l.page_size = h.page_size.clone();
                l.limit = h.limit;
                l
            })
            .collect();
        let mut sec = api::LinuxContainerSecurityContext::new();
        sec.namespace_options = protobuf::MessageField::some(Self::namespaces(sandbox));
        sec.privileged = c.security.privileged;
        sec.readonly_rootfs = c.security.readonly_rootfs;
        sec.no_new_privs = c.security.no_new_privs;
        sec.supplemental_groups = c.security.supplemental_groups.clone();
        let (seccomp, seccomp_path) = profile(&c.security.seccomp);
        sec.seccomp = protobuf::MessageField::some(seccomp);
        sec.seccomp_profile_path = seccomp_path;
        if let Some(a) = &c.security.apparmor {
            let (apparmor, apparmor_name) = profile(a);
            sec.apparmor = protobuf::MessageField::some(apparmor);
            sec.apparmor_profile = apparmor_name;
        }
        if let Some(u) = c.security.run_as_user {
            let mut v = api::Int64Value::new();
            v.value = u;
            sec.run_as_user = protobuf::MessageField::some(v);
        }
        if let Some(g) = c.security.run_as_group {
            let mut v = api::Int64Value::new();
            v.value = g;
            sec.run_as_group = protobuf::MessageField::some(v);
        }
        if !c.security.add_capabilities.is_empty() || !c.security.drop_capabilities.is_empty() {
            let mut caps = api::Capability::new();
            caps.add_capabilities = c.security.add_capabilities.clone();
            caps.drop_capabilities = c.security.drop_capabilities.clone();
            sec.capabilities = protobuf::MessageField::some(caps);
        }
        let mut linux = api::LinuxContainerConfig::new();
        linux.resources = protobuf::MessageField::some(res);
        linux.security_context = protobuf::MessageField::some(sec);
        cfg.linux = protobuf::MessageField::some(linux);
        cfg
    }
}

impl CriRuntime {
    /// `ContainerStatus` into `c`: state, times, exit code, reason, message,
    /// image reference. Returns false (and leaves `c`) if it is gone.
    fn container_status_into(&self, ctx: &CallCtx, c: &mut ContainerInfo) -> Result<bool> {
        let mut req = api::ContainerStatusRequest::new();
        req.container_id = c.id.clone();
        match call(ctx, Op::ContainerStatus, |o| self.runtime.container_status_opt(&req, o)) {
            Ok(r) => {
                let st = r.status.get_or_default();
                c.state = state_of(st.state);
                c.started_at_ns = st.started_at;
                c.finished_at_ns = st.finished_at;
                c.exit_code = st.exit_code;
                c.reason = st.reason.clone();
                c.message = st.message.clone();
                if !st.image_ref.is_empty() {
                    c.image_ref = st.image_ref.clone();
                }
                Ok(true)
            }
            Err(RuntimeError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Runtime for CriRuntime {
    fn refresh_containers(&self, ctx: &CallCtx, rp: &mut RuntimePod, ids: &[String]) -> Result<()> {
        for c in rp.containers.iter_mut().filter(|c| ids.contains(&c.id)) {
            if !self.container_status_into(ctx, c)? {
                c.state = ContainerState::Exited; // removed after it was stopped
            }
            self.exits.apply_one(c);
        }
        Ok(())
    }

    fn version(&self) -> String {
        self.version.clone()
    }

    fn list_pods(&self, ctx: &CallCtx) -> Result<Vec<RuntimePod>> {
        let sandboxes = self.list_sandboxes(ctx, None)?.into_iter().map(Self::sandbox_info).collect();
        let containers = self.list_containers(ctx, None)?.into_iter().map(Self::container_info).collect();
        let mut pods = Self::group(sandboxes, containers);
        self.exits.apply(&mut pods, true);
        Ok(pods)
    }

    fn pod_status(&self, ctx: &CallCtx, uid: &str) -> Result<RuntimePod> {
        let mut sandboxes: Vec<SandboxInfo> =
            self.list_sandboxes(ctx, Some(uid))?.into_iter().map(Self::sandbox_info).collect();
        for s in sandboxes.iter_mut().filter(|s| s.ready) {
            let mut req = api::PodSandboxStatusRequest::new();
            req.pod_sandbox_id = s.id.clone();
            match call(ctx, Op::PodSandboxStatus, |o| self.runtime.pod_sandbox_status_opt(&req, o)) {
                Ok(r) => {
                    let ip = &r.status.get_or_default().network.get_or_default().ip;
                    s.ip = (!ip.is_empty()).then(|| ip.clone());
                }
                Err(RuntimeError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let mut containers: Vec<_> =
            self.list_containers(ctx, Some(uid))?.into_iter().map(Self::container_info).collect();
        for (c, _) in &mut containers {
            if !self.finished.fill(c) && self.container_status_into(ctx, c)? {
                // what the events told of an OOM kill is part of what is
                // kept (`c` stays the CRI's word: the read's end compares)
                let mut told = c.clone();
                self.exits.told_oom(&mut told);
                self.finished.keep(&told, crate::base::unix_now_ns());
            }
        }
        let mut pod = Self::group(sandboxes, containers)
            .pop()
            .unwrap_or_else(|| RuntimePod { uid: uid.to_string(), ..Default::default() });
        self.exits.apply(std::slice::from_mut(&mut pod), false);
        Ok(pod)
    }

    /// containerd's `SystemdCgroup` for its default runtime, read from the
    /// CRI plugin's config that a verbose `Status` shows.
    fn systemd_cgroup(&self, ctx: &CallCtx) -> Result<Option<bool>> {
        Ok(self.cri_config(ctx)?.as_ref().and_then(systemd_cgroup_of))
    }

    /// containerd's `disable_hugetlb_controller`, from the same config.
    fn drops_hugepage_limits(&self, ctx: &CallCtx) -> Result<Option<bool>> {
        Ok(self.cri_config(ctx)?.and_then(|v| v.get("disableHugetlbController")?.as_bool()))
    }

    fn sandbox_image(&self, ctx: &CallCtx) -> Result<Option<String>> {
        Ok(self.cri_config(ctx)?.and_then(|v| v.get("sandboxImage")?.as_str().map(str::to_string)))
    }

    fn image_status(&self, ctx: &CallCtx, image: &str) -> Result<Option<ImageInfo>> {
        let mut spec = api::ImageSpec::new();
        spec.image = image.to_string();
        let mut req = api::ImageStatusRequest::new();
        req.image = protobuf::MessageField::some(spec);
        let r = call(ctx, Op::ImageStatus, |o| self.images.image_status_opt(&req, o))?;
        Ok(r.image.as_ref().map(image_info))
    }

    fn pull_image(&self, ctx: &CallCtx, image: &str, auth: Option<&Auth>) -> Result<String> {
        let mut spec = api::ImageSpec::new();
        spec.image = image.to_string();
        let mut req = api::PullImageRequest::new();
        req.image = protobuf::MessageField::some(spec);
        if let Some(a) = auth {
            let mut c = api::AuthConfig::new();
            c.username = a.username.clone();
            c.password = a.password().to_string();
            req.auth = protobuf::MessageField::some(c);
        }
        let mut receiver = self
            .images
            .pull_image_async_opt(&req, opt(ctx, Op::PullImage)?)
            .map_err(|e| convert_err(Op::PullImage, e))?;
        let mut watch = PullWatch::new(self.pull_progress_deadline);
        let answer = wait_answer(&mut receiver, || {
            if ctx.cancel.is_cancelled() {
                return Some(RuntimeError::Cancelled { op: Op::PullImage });
            }
            let stalled = crate::config::format_duration(watch.stalled(|| self.ingests())?);
            log::warn!("pulling image {image:?}: no progress for {stalled}; cancelled");
            Some(RuntimeError::ImagePull {
                image: image.into(),
                message: format!("no progress for {stalled} (imagePullProgressDeadline); pull cancelled"),
            })
        })?;
        match answer.map_err(|e| convert_err(Op::PullImage, e)) {
            Ok(r) => Ok(r.image_ref),
            Err(RuntimeError::Failed { message, .. } | RuntimeError::NotFound { what: message }) => {
                Err(RuntimeError::ImagePull { image: image.into(), message })
            }
            Err(other) => Err(other),
        }
    }

    fn run_sandbox(&self, ctx: &CallCtx, config: &SandboxConfig) -> Result<String> {
        // containerd makes the log directory (and fails on it only when
        // the first container starts): refused here, once and for good
        config.check_paths(Op::RunPodSandbox)?;
        let mut req = api::RunPodSandboxRequest::new();
        req.config = protobuf::MessageField::some(Self::sandbox_config(config));
        let r = call(ctx, Op::RunPodSandbox, |o| self.runtime.run_pod_sandbox_opt(&req, o))?;
        Ok(r.pod_sandbox_id)
    }

    fn stop_sandbox(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        let mut req = api::StopPodSandboxRequest::new();
        req.pod_sandbox_id = id.to_string();
        match call(ctx, Op::StopPodSandbox, |o| self.runtime.stop_pod_sandbox_opt(&req, o)) {
            Ok(_) => Ok(()),
            // the sandbox's own process (its pause container) may have
            // ended and containerd lost the exit: ask the shim
            Err(e @ RuntimeError::DeadlineExceeded { .. }) => {
                let lost = self.lost_exit(Op::StopPodSandbox, id);
                Err(lost_exit::explained(e, lost))
            }
            Err(e) => Err(e),
        }
    }

    fn remove_sandbox(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        let mut req = api::RemovePodSandboxRequest::new();
        req.pod_sandbox_id = id.to_string();
        call(ctx, Op::RemovePodSandbox, |o| self.runtime.remove_pod_sandbox_opt(&req, o))?;
        Ok(())
    }

    fn create_container(
        &self,
        ctx: &CallCtx,
        sandbox_id: &str,
        config: &ContainerConfig,
        sandbox: &SandboxConfig,
    ) -> Result<String> {
        let mut req = api::CreateContainerRequest::new();
        req.pod_sandbox_id = sandbox_id.to_string();
        req.config = protobuf::MessageField::some(Self::container_config(config, sandbox));
        req.sandbox_config = protobuf::MessageField::some(Self::sandbox_config(sandbox));
        let r = call(ctx, Op::CreateContainer, |o| self.runtime.create_container_opt(&req, o))?;
        Ok(r.container_id)
    }

    fn start_container(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        let mut req = api::StartContainerRequest::new();
        req.container_id = id.to_string();
        call(ctx, Op::StartContainer, |o| self.runtime.start_container_opt(&req, o))?;
        Ok(())
    }

    fn stop_container(&self, ctx: &CallCtx, id: &str, timeout: Duration) -> Result<()> {
        // The call blocks for up to the grace period; it runs on a helper
        // thread so that a shorter grace period (cancellation) is not held
        // up. A later StopContainer with the shorter timeout ends it early.
        let mut req = api::StopContainerRequest::new();
        req.container_id = id.to_string();
        req.timeout = timeout.as_secs() as i64;
        let call = opt(ctx, Op::StopContainer)?;
        let client = self.runtime.clone();
        let (tx, rx) = crossbeam_channel::bounded(1);
        crate::base::thread::spawn("cri-stop", Some(crate::base::thread::HELPER_STACK), move || {
            let _ = tx.send(client.stop_container_opt(&req, call));
        })
        .map_err(|e| RuntimeError::Failed {
            op: Op::StopContainer,
            code: Code::Unknown,
            message: format!("cannot start a thread: {e}"),
        })?;
        // a stop still waiting well after its grace period may wait for
        // an exit containerd lost: ask the shim once
        let mut look = Some(crossbeam_channel::at(crate::base::cancel::deadline_in(
            timeout.saturating_add(lost_exit::LOOK_AFTER),
        )));
        let mut lost = None;
        loop {
            let never = crossbeam_channel::never();
            select! {
                recv(rx) -> r => return match r {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(lost_exit::explained(convert_err(Op::StopContainer, e), lost)),
                    Err(_) => Err(RuntimeError::Failed { op: Op::StopContainer, code: Code::Unknown, message: "the call's thread ended without an answer".into() }),
                },
                recv(ctx.cancel.receiver()) -> _ => return Err(RuntimeError::Cancelled { op: Op::StopContainer }),
                recv(look.as_ref().unwrap_or(&never)) -> _ => {
                    look = None;
                    lost = self.lost_exit(Op::StopContainer, id);
                }
            }
        }
    }

    fn remove_container(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        let mut req = api::RemoveContainerRequest::new();
        req.container_id = id.to_string();
        let r = call(ctx, Op::RemoveContainer, |o| self.runtime.remove_container_opt(&req, o));
        // gone either way (a container removed behind podwarden's back
        // answers NotFound): what was kept of its status goes too
        if matches!(r, Ok(_) | Err(RuntimeError::NotFound { .. })) {
            self.finished.forget(id);
        }
        r.map(|_| ())
    }

    fn list_images(&self, ctx: &CallCtx) -> Result<Vec<ImageInfo>> {
        let req = api::ListImagesRequest::new();
        let r = call(ctx, Op::ListImages, |o| self.images.list_images_opt(&req, o))?;
        Ok(r.images.iter().map(image_info).collect())
    }

    fn remove_image(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        let mut spec = api::ImageSpec::new();
        spec.image = id.to_string();
        let mut req = api::RemoveImageRequest::new();
        req.image = protobuf::MessageField::some(spec);
        call(ctx, Op::RemoveImage, |o| self.images.remove_image_opt(&req, o))?;
        Ok(())
    }

    fn image_fs_info(&self, ctx: &CallCtx) -> Result<Vec<super::ImageFs>> {
        let req = api::ImageFsInfoRequest::new();
        let r = call(ctx, Op::ImageFsInfo, |o| self.images.image_fs_info_opt(&req, o))?;
        Ok(r.image_filesystems
            .iter()
            .map(|f| super::ImageFs {
                mountpoint: f.fs_id.as_ref().map(|i| i.mountpoint.clone()).unwrap_or_default(),
                used_bytes: f.used_bytes.as_ref().map_or(0, |v| v.value),
                inodes_used: f.inodes_used.as_ref().map_or(0, |v| v.value),
            })
            .collect())
    }

    fn list_container_stats(&self, ctx: &CallCtx) -> Result<Vec<super::ContainerStats>> {
        let req = api::ListContainerStatsRequest::new();
        let r = call(ctx, Op::ListContainerStats, |o| self.runtime.list_container_stats_opt(&req, o))?;
        Ok(r.stats.iter().map(container_stats).filter(|c| !c.pod_uid.is_empty()).collect())
    }

    fn list_sandbox_stats(&self, ctx: &CallCtx) -> Result<Vec<super::SandboxStats>> {
        let req = api::ListPodSandboxStatsRequest::new();
        let r = call(ctx, Op::ListPodSandboxStats, |o| self.runtime.list_pod_sandbox_stats_opt(&req, o))?;
        Ok(r.stats
            .iter()
            .filter(|s| s.attributes.as_ref().is_some_and(|a| a.labels.contains_key(LABEL_POD_UID)))
            .map(|s| {
                let attrs = s.attributes.as_ref();
                let linux = s.linux.as_ref();
                let default_if = linux.and_then(|l| l.network.as_ref()).and_then(|n| n.default_interface.as_ref());
                super::SandboxStats {
                    id: attrs.map(|a| a.id.clone()).unwrap_or_default(),
                    pod_uid: attrs.and_then(|a| a.labels.get(LABEL_POD_UID).cloned()).unwrap_or_default(),
                    usage: usage(linux.and_then(|l| l.cpu.as_ref()), linux.and_then(|l| l.memory.as_ref())),
                    processes: linux
                        .and_then(|l| l.process.as_ref())
                        .and_then(|p| p.process_count.as_ref())
                        .map(|v| v.value),
                    rx_bytes: default_if.and_then(|i| i.rx_bytes.as_ref()).map(|v| v.value),
                    tx_bytes: default_if.and_then(|i| i.tx_bytes.as_ref()).map(|v| v.value),
                    containers: linux.map(|l| l.containers.iter().map(container_stats).collect()).unwrap_or_default(),
                }
            })
            .collect())
    }

    fn reopen_container_log(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        let mut req = api::ReopenContainerLogRequest::new();
        req.container_id = id.to_string();
        call(ctx, Op::ReopenContainerLog, |o| self.runtime.reopen_container_log_opt(&req, o))?;
        Ok(())
    }

    fn watch_events(
        &self,
        cancel: &crate::base::cancel::CancelToken,
        on: &mut dyn FnMut(super::events::Note),
    ) -> Result<()> {
        events::watch(self, cancel, on)
    }

    fn exec(&self, ctx: &CallCtx, id: &str, cmd: &[String], s: super::Streams) -> Result<String> {
        let req = api::ExecRequest {
            container_id: id.into(),
            cmd: cmd.to_vec(),
            tty: s.tty,
            stdin: s.stdin,
            stdout: s.stdout,
            stderr: s.stderr,
            ..Default::default()
        };
        Ok(call(ctx, Op::Exec, |o| self.runtime.exec_opt(&req, o))?.url)
    }

    fn attach(&self, ctx: &CallCtx, id: &str, s: super::Streams) -> Result<String> {
        let req = api::AttachRequest {
            container_id: id.into(),
            stdin: s.stdin,
            tty: s.tty,
            stdout: s.stdout,
            stderr: s.stderr,
            ..Default::default()
        };
        Ok(call(ctx, Op::Attach, |o| self.runtime.attach_opt(&req, o))?.url)
    }

    fn port_forward(&self, ctx: &CallCtx, sandbox_id: &str, ports: &[u16]) -> Result<String> {
        let port = ports.iter().map(|&p| i32::from(p)).collect();
        let req = api::PortForwardRequest { pod_sandbox_id: sandbox_id.into(), port, ..Default::default() };
        Ok(call(ctx, Op::PortForward, |o| self.runtime.port_forward_opt(&req, o))?.url)
    }

    fn exec_sync(&self, id: &str, cmd: &[String], timeout: Duration, done: super::ExecDone) {
        let mut req = api::ExecSyncRequest::new();
        req.container_id = id.to_string();
        req.cmd = cmd.to_vec();
        req.timeout = timeout.as_secs().max(1) as i64;
        // the runtime ends the command at `timeout`; the call's own deadline
        // leaves it time to say so
        let opt = CallOption::default().timeout(timeout + Duration::from_secs(10));
        match self.runtime.exec_sync_async_opt(&req, opt) {
            Err(e) => done(Err(convert_err(Op::ExecSync, e))),
            // completed on the gRPC completion-queue thread: `done` only
            // hands the result on
            Ok(receiver) => self.runtime.spawn(async move {
                done(match receiver.await {
                    Ok(r) => Ok(super::ExecResult { exit_code: r.exit_code, stdout: r.stdout, stderr: r.stderr }),
                    Err(e) => Err(convert_err(Op::ExecSync, e)),
                })
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Mount;

    #[test]
    fn a_pull_is_stalled_when_its_downloads_stand_still_for_the_deadline() {
        let t0 = std::time::Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let ing = |v: &[(&str, i64)]| Some(v.iter().map(|(r, o)| (r.to_string(), *o)).collect::<Vec<_>>());
        // resolving (no download yet) for the whole deadline: stalled
        let mut w = PullWatch::new(Duration::from_secs(5));
        w.since = t0;
        w.next = t0;
        for s in 1..5 {
            assert_eq!(w.observe(at(s), || ing(&[])), None, "{s}s");
        }
        assert_eq!(w.observe(at(5), || ing(&[])), Some(Duration::from_secs(5)));
        // a download that moves is progress; one that stands still is not
        let mut w = PullWatch::new(Duration::from_secs(5));
        w.since = t0;
        w.next = t0;
        for s in 1..=20 {
            assert_eq!(w.observe(at(s), || ing(&[("layer-a", s as i64 * 100)])), None, "moving at {s}s");
        }
        for s in 21..25 {
            assert_eq!(w.observe(at(s), || ing(&[("layer-a", 2000)])), None);
        }
        assert_eq!(w.observe(at(25), || ing(&[("layer-a", 2000)])), Some(Duration::from_secs(5)));
        // after a download, a time without any (unpacking) is not a stall
        let mut w = PullWatch::new(Duration::from_secs(5));
        w.since = t0;
        w.next = t0;
        assert_eq!(w.observe(at(1), || ing(&[("layer-a", 1)])), None);
        for s in 2..30 {
            assert_eq!(w.observe(at(s), || ing(&[])), None, "unpacking at {s}s");
        }
        // a runtime that cannot tell is never stalled; a zero deadline never cuts
        for s in 30..60 {
            assert_eq!(w.observe(at(s), || None), None);
        }
        let mut off = PullWatch::new(Duration::ZERO);
        assert_eq!(off.observe(at(100), || ing(&[])), None);
        // reads at most once a second
        let mut w = PullWatch::new(Duration::from_secs(5));
        let mut reads = 0;
        for _ in 0..10 {
            w.stalled(|| {
                reads += 1;
                None
            });
        }
        assert_eq!(reads, 0, "the first read is a second after the pull began");
    }

    #[test]
    fn a_failed_call_keeps_the_runtimes_status_code() {
        let rpc = |code, m: &str| grpcio::Error::RpcFailure(grpcio::RpcStatus::with_message(code, m.into()));
        let e = convert_err(Op::StartContainer, rpc(RpcStatusCode::FAILED_PRECONDITION, "not created"));
        assert_eq!(
            e,
            RuntimeError::Failed {
                op: Op::StartContainer,
                code: Code::FailedPrecondition,
                message: "not created".into()
            }
        );
        assert_eq!(e.to_string(), "StartContainer failed: not created");
        let e = convert_err(Op::RunPodSandbox, rpc(RpcStatusCode::UNKNOWN, "mkdir x: file name too long"));
        assert!(matches!(e, RuntimeError::Failed { code: Code::Unknown, .. }), "{e:?}");
        let e = convert_err(Op::CreateContainer, rpc(RpcStatusCode::INVALID_ARGUMENT, "bad"));
        assert!(matches!(e, RuntimeError::Failed { code: Code::InvalidArgument, .. }), "{e:?}");
        // containerd ends an exec at its timeout with DEADLINE_EXCEEDED
        // ("failed to exec in container: timeout 1s exceeded: context
        // deadline exceeded", containerd 1.6.20)
        let e = convert_err(Op::ExecSync, rpc(RpcStatusCode::DEADLINE_EXCEEDED, "timeout 1s exceeded"));
        assert_eq!(e, RuntimeError::DeadlineExceeded { op: Op::ExecSync });
        // the codes with a variant of their own
        assert!(convert_err(Op::ContainerStatus, rpc(RpcStatusCode::NOT_FOUND, "x")).is_not_found());
        assert_eq!(
            convert_err(Op::ListPodSandboxStats, rpc(RpcStatusCode::UNIMPLEMENTED, "")),
            RuntimeError::Unimplemented { op: Op::ListPodSandboxStats }
        );
        // a failure without a status
        let e = convert_err(Op::Version, grpcio::Error::RemoteStopped);
        assert!(matches!(e, RuntimeError::Failed { code: Code::Unknown, .. }), "{e:?}");
    }

    #[test]
    fn stdin_and_tty_reach_the_cri_config() {
        let c = ContainerConfig { stdin: true, stdin_once: false, tty: true, ..ContainerConfig::default() };
        let cfg = CriRuntime::container_config(&c, &SandboxConfig::default());
        assert_eq!((cfg.stdin, cfg.stdin_once, cfg.tty), (true, false, true));
        let cfg = CriRuntime::container_config(&ContainerConfig::default(), &SandboxConfig::default());
        assert_eq!((cfg.stdin, cfg.stdin_once, cfg.tty), (false, false, false));
    }

    #[test]
    fn mount_propagation_reaches_the_cri_mount() {
        let mount =
            |propagation| Mount { host_path: "/h".into(), container_path: "/c".into(), readonly: true, propagation };
        let c = ContainerConfig {
            mounts: vec![
                mount(Propagation::Private),
                mount(Propagation::HostToContainer),
                mount(Propagation::Bidirectional),
            ],
            ..ContainerConfig::default()
        };
        let cfg = CriRuntime::container_config(&c, &SandboxConfig::default());
        let got: Vec<_> = cfg.mounts.iter().map(|m| (m.propagation.enum_value_or_default(), m.readonly)).collect();
        assert_eq!(
            got,
            [
                (api::MountPropagation::PROPAGATION_PRIVATE, true),
                (api::MountPropagation::PROPAGATION_HOST_TO_CONTAINER, true),
                (api::MountPropagation::PROPAGATION_BIDIRECTIONAL, true),
            ]
        );
    }
}

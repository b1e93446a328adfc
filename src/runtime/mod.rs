//! The container runtime seam: the calls the three sync phases and
//! housekeeping need, in podwarden's own types. The CRI client (over gRPC)
//! and the in-process fake both implement [`Runtime`].
//!
//! Invariant: every call carries a deadline ([`CallCtx`]); an implementation
//! returns `DeadlineExceeded` rather than block past it.
//!
//! Owns the CRI connection (`cri`, the only file that sees the generated
//! CRI types), the fake (`fake`), the failed-call meter (`metered`) and what
//! the last relist saw (`cache`). May use `base`, `model` and `config`
//! (duration formats) only.

pub mod cache;
pub mod cri;
pub mod events;
pub mod fake;
pub mod grpc;
pub mod metered;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::base::cancel::CancelToken;

/// Label the kubelet puts on sandboxes and containers: the pod UID.
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Annotation recording the pod's grace period on each container.
pub const ANNOTATION_GRACE: &str = "io.kubernetes.pod.terminationGracePeriod";
pub const ANNOTATION_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";

/// Deadline and cancellation for one runtime call.
#[derive(Clone)]
pub struct CallCtx {
    pub deadline: Instant,
    pub cancel: CancelToken,
}

impl CallCtx {
    pub fn new(timeout: Duration, cancel: &CancelToken) -> Self {
        CallCtx { deadline: crate::base::cancel::deadline_in(timeout), cancel: cancel.clone() }
    }

    /// A context that is never cancelled (housekeeping, tests).
    pub fn background(timeout: Duration) -> Self {
        Self::new(timeout, &CancelToken::new())
    }

    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

/// A CRI method podwarden calls: the one name of a runtime operation, used
/// by the CRI client (its calls and errors), the fake runtime (fault
/// injection, recorded calls) and the failed-call counter
/// (`kubelet_runtime_operations_errors_total{operation_type}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Version,
    ListPodSandbox,
    PodSandboxStatus,
    ListContainers,
    ContainerStatus,
    ImageStatus,
    PullImage,
    RunPodSandbox,
    StopPodSandbox,
    RemovePodSandbox,
    CreateContainer,
    StartContainer,
    StopContainer,
    RemoveContainer,
    ExecSync,
    Status,
    ReopenContainerLog,
    ListImages,
    RemoveImage,
    ImageFsInfo,
    ListContainerStats,
    ListPodSandboxStats,
    GetContainerEvents,
    Exec,
    Attach,
    PortForward,
}

impl Op {
    pub const ALL: [Op; 26] = [
        Op::Version,
        Op::ListPodSandbox,
        Op::PodSandboxStatus,
        Op::ListContainers,
        Op::ContainerStatus,
        Op::ImageStatus,
        Op::PullImage,
        Op::RunPodSandbox,
        Op::StopPodSandbox,
        Op::RemovePodSandbox,
        Op::CreateContainer,
        Op::StartContainer,
        Op::StopContainer,
        Op::RemoveContainer,
        Op::ExecSync,
        Op::Status,
        Op::ReopenContainerLog,
        Op::ListImages,
        Op::RemoveImage,
        Op::ImageFsInfo,
        Op::ListContainerStats,
        Op::ListPodSandboxStats,
        Op::GetContainerEvents,
        Op::Exec,
        Op::Attach,
        Op::PortForward,
    ];

    /// The op with this CRI method name (`ListPodSandbox`, ...).
    pub fn from_name(name: &str) -> Option<Op> {
        Self::ALL.into_iter().find(|o| o.name() == name)
    }

    /// The CRI method name (`RunPodSandbox`).
    pub fn name(self) -> &'static str {
        match self {
            Op::Version => "Version",
            Op::ListPodSandbox => "ListPodSandbox",
            Op::PodSandboxStatus => "PodSandboxStatus",
            Op::ListContainers => "ListContainers",
            Op::ContainerStatus => "ContainerStatus",
            Op::ImageStatus => "ImageStatus",
            Op::PullImage => "PullImage",
            Op::RunPodSandbox => "RunPodSandbox",
            Op::StopPodSandbox => "StopPodSandbox",
            Op::RemovePodSandbox => "RemovePodSandbox",
            Op::CreateContainer => "CreateContainer",
            Op::StartContainer => "StartContainer",
            Op::StopContainer => "StopContainer",
            Op::RemoveContainer => "RemoveContainer",
            Op::ExecSync => "ExecSync",
            Op::Status => "Status",
            Op::ReopenContainerLog => "ReopenContainerLog",
            Op::ListImages => "ListImages",
            Op::RemoveImage => "RemoveImage",
            Op::ImageFsInfo => "ImageFsInfo",
            Op::ListContainerStats => "ListContainerStats",
            Op::ListPodSandboxStats => "ListPodSandboxStats",
            Op::GetContainerEvents => "GetContainerEvents",
            Op::Exec => "Exec",
            Op::Attach => "Attach",
            Op::PortForward => "PortForward",
        }
    }

    /// The kubelet's `operation_type` label for it (`run_podsandbox`).
    pub fn metric_label(self) -> &'static str {
        match self {
            Op::Version => "version",
            Op::ListPodSandbox => "list_podsandbox",
            Op::PodSandboxStatus => "podsandbox_status",
            Op::ListContainers => "list_containers",
            Op::ContainerStatus => "container_status",
            Op::ImageStatus => "image_status",
            Op::PullImage => "pull_image",
            Op::RunPodSandbox => "run_podsandbox",
            Op::StopPodSandbox => "stop_podsandbox",
            Op::RemovePodSandbox => "remove_podsandbox",
            Op::CreateContainer => "create_container",
            Op::StartContainer => "start_container",
            Op::StopContainer => "stop_container",
            Op::RemoveContainer => "remove_container",
            Op::ExecSync => "exec_sync",
            Op::Status => "status",
            Op::ReopenContainerLog => "reopen_container_log",
            Op::ListImages => "list_images",
            Op::RemoveImage => "remove_image",
            Op::ImageFsInfo => "image_fs_info",
            Op::ListContainerStats => "list_container_stats",
            Op::ListPodSandboxStats => "list_podsandbox_stats",
            Op::GetContainerEvents => "get_container_events",
            Op::Exec => "exec",
            Op::Attach => "attach",
            Op::PortForward => "port_forward",
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The gRPC status code of a failed runtime call: podwarden's copy of the
/// codes, so that nothing past the CRI client (`cri`, which maps grpcio's
/// at the boundary) depends on the transport. `Unknown` is also what a
/// failure without a status (the transport, a helper thread) carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RuntimeError {
    #[error("runtime unavailable: {0}")]
    Unavailable(String),
    #[error("{op} did not answer before its deadline")]
    DeadlineExceeded { op: Op },
    #[error("{op} was cancelled")]
    Cancelled { op: Op },
    #[error("the runtime does not implement {op}")]
    Unimplemented { op: Op },
    #[error("{what} not found")]
    NotFound { what: String },
    #[error("image {image:?} not present and pull policy is Never")]
    ImageNeverPull { image: String },
    #[error("pulling image {image:?} failed: {message}")]
    ImagePull { image: String, message: String },
    /// The call was not made: a directory the runtime would have to create
    /// (`what`) is a path the kernel refuses as too long (see
    /// [`path_too_long`]), which the runtime would fail (`ENAMETOOLONG`)
    /// however often asked. The text is the runtime's for that failure.
    #[error("{op} failed: failed to create {what} {path:?}: mkdir {path}: file name too long")]
    PathTooLong { op: Op, what: &'static str, path: String },
    /// Any other failure: the status code the runtime answered with (the
    /// codes above have variants of their own) and its message.
    #[error("{op} failed: {message}")]
    Failed { op: Op, code: Code, message: String },
}

impl RuntimeError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, RuntimeError::NotFound { .. })
    }

    /// An error that retrying cannot cure: the same request fails the same
    /// way every time. Today: a directory the runtime would have to create
    /// is a path the kernel refuses as too long ([`RuntimeError::PathTooLong`],
    /// found before the call). Deadlines, an unavailable runtime and
    /// everything else may heal and are retried.
    pub fn is_permanent(&self) -> bool {
        matches!(self, RuntimeError::PathTooLong { .. })
    }
}

/// The kernel's longest file name in bytes (`NAME_MAX`).
pub const NAME_MAX: usize = 255;
/// The kernel's longest path in bytes (`PATH_MAX`, less its NUL).
pub const PATH_MAX: usize = 4095;

/// Whether the kernel refuses `path` as too long (`ENAMETOOLONG`): a name
/// in it over [`NAME_MAX`] bytes, or the whole over [`PATH_MAX`].
pub fn path_too_long(path: &str) -> bool {
    path.len() > PATH_MAX || path.split('/').any(|name| name.len() > NAME_MAX)
}

impl SandboxConfig {
    /// Refuse, before `op` is called, a sandbox whose log directory (which
    /// the runtime creates, and its containers' logs below it) is a path
    /// the kernel refuses as too long: the runtime would fail on it
    /// (`ENAMETOOLONG`) however often asked.
    pub fn check_paths(&self, op: Op) -> Result<()> {
        if path_too_long(&self.log_directory) {
            return Err(RuntimeError::PathTooLong { op, what: "pod log directory", path: self.log_directory.clone() });
        }
        Ok(())
    }
}

pub type Result<T> = std::result::Result<T, RuntimeError>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    #[default]
    Unknown,
}

/// A mount into a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub host_path: String,
    pub container_path: String,
    pub readonly: bool,
    /// How mounts below it propagate (CRI `Mount.propagation`).
    pub propagation: Propagation,
}

/// A mount's propagation, CRI `MountPropagation`: from a volumeMount's
/// `mountPropagation` as the kubelet translates it (unset and `None`:
/// private).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Propagation {
    /// No propagation either way (`PROPAGATION_PRIVATE`, rprivate).
    #[default]
    Private,
    /// Mounts the host makes below the source later appear in the
    /// container (`PROPAGATION_HOST_TO_CONTAINER`, rslave). The runtime
    /// needs the source on a shared or slave mount.
    HostToContainer,
    /// Both ways: the container's mounts below it appear on the host too
    /// (`PROPAGATION_BIDIRECTIONAL`, rshared); privileged containers only.
    /// The runtime needs the source on a shared mount.
    Bidirectional,
}

/// A host port mapping of a sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapping {
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    pub container_port: i32,
    pub host_port: i32,
    pub host_ip: String,
}

/// DNS settings of a sandbox (none: the runtime uses the host's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsConfig {
    pub servers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

/// Linux resources of a container (0: not set).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_shares: i64,
    pub cpu_quota: i64,
    pub cpu_period: i64,
    pub memory_limit_bytes: i64,
    /// The kernel's OOM score adjustment of the container's processes.
    pub oom_score_adj: i64,
    /// The container's hugetlb limit for each page size the node has (0
    /// for a size it does not ask for), as the kubelet sends them.
    pub hugepage_limits: Vec<HugepageLimit>,
}

/// One page size's limit in a container's hugetlb cgroup (CRI
/// `HugepageLimit`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HugepageLimit {
    /// The runtime's spelling of the size: `2MB`, `1GB`.
    pub page_size: String,
    /// Bytes.
    pub limit: u64,
}

/// A seccomp or AppArmor profile (CRI `SecurityProfile`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SecurityProfile {
    RuntimeDefault,
    #[default]
    Unconfined,
    /// A seccomp profile's file (absolute), or an AppArmor profile's name.
    Localhost(String),
}

/// Security settings of a container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Security {
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    /// `fsGroup`, then `supplementalGroups`.
    pub supplemental_groups: Vec<i64>,
    pub privileged: bool,
    pub readonly_rootfs: bool,
    pub add_capabilities: Vec<String>,
    pub drop_capabilities: Vec<String>,
    pub no_new_privs: bool,
    pub seccomp: SecurityProfile,
    /// `None`: the runtime's choice (no AppArmor on this host, or none
    /// asked for).
    pub apparmor: Option<SecurityProfile>,
}

/// Registry credentials for one pull, as the kubelet's keyrings hand them
/// to the runtime: a user name and a password. The password is not a
/// public field and `Debug` prints it as `<redacted>`, so no log line,
/// event or error formats it by accident; only the CRI request reads it.
#[derive(Clone, PartialEq, Eq)]
pub struct Auth {
    pub username: String,
    password: String,
}

impl Auth {
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Self {
        Auth { username: username.into(), password: password.into() }
    }

    /// The password, for the request that carries it.
    pub fn password(&self) -> &str {
        &self.password
    }
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("username", &self.username).field("password", &"<redacted>").finish()
    }
}

/// An image as `ImageStatus` describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageInfo {
    /// The image reference (`sha256:...`).
    pub id: String,
    /// The image's user: a numeric uid, else a name (both unset: root).
    pub uid: Option<i64>,
    pub username: String,
    /// Its size in bytes, as the runtime counts it.
    pub size: u64,
    pub tags: Vec<String>,
    pub digests: Vec<String>,
    /// The runtime keeps it (its sandbox image): never garbage.
    pub pinned: bool,
}

/// CPU and memory use of a container or pod sandbox, as CRI reports it
/// (`None`: not reported).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// When it was measured (Unix nanoseconds).
    pub timestamp_ns: i64,
    /// CPU time used, cumulative.
    pub cpu_core_nanos: Option<u64>,
    pub memory_working_set_bytes: Option<u64>,
    pub memory_usage_bytes: Option<u64>,
    pub memory_rss_bytes: Option<u64>,
    pub page_faults: Option<u64>,
    pub major_page_faults: Option<u64>,
}

/// One container's stats.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerStats {
    pub id: String,
    pub name: String,
    /// The pod UID label.
    pub pod_uid: String,
    pub usage: Usage,
    /// Its writable layer's use (`None`: not reported).
    pub rootfs_bytes: Option<u64>,
    pub rootfs_inodes: Option<u64>,
}

/// One pod sandbox's stats (`ListPodSandboxStats`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxStats {
    pub id: String,
    pub pod_uid: String,
    pub usage: Usage,
    pub processes: Option<u64>,
    /// Bytes received and sent on the default interface.
    pub rx_bytes: Option<u64>,
    pub tx_bytes: Option<u64>,
    pub containers: Vec<ContainerStats>,
}

/// One filesystem holding images, as `ImageFsInfo` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageFs {
    pub mountpoint: String,
    pub used_bytes: u64,
    pub inodes_used: u64,
}

/// What the runtime needs to create a pod sandbox.
#[derive(Debug, Clone, Default)]
pub struct SandboxConfig {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub attempt: u32,
    pub hostname: String,
    pub log_directory: String,
    pub host_network: bool,
    pub host_pid: bool,
    pub host_ipc: bool,
    /// Some container of the pod runs privileged: the runtime must allow
    /// it in this sandbox (CRI `LinuxSandboxSecurityContext.privileged`).
    pub privileged: bool,
    /// The pod's cgroup (empty: the runtime's default).
    pub cgroup_parent: String,
    /// `shareProcessNamespace`: one PID namespace for the pod.
    pub share_pid: bool,
    /// The pod's `fsGroup` and `supplementalGroups`.
    pub supplemental_groups: Vec<i64>,
    /// The pod-level seccomp profile.
    pub seccomp: SecurityProfile,
    /// The pod's `sysctls`, set in its namespaces.
    pub sysctls: BTreeMap<String, String>,
    pub port_mappings: Vec<PortMapping>,
    pub dns: Option<DnsConfig>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// What the runtime needs to create a container.
#[derive(Debug, Clone, Default)]
pub struct ContainerConfig {
    pub name: String,
    pub attempt: u32,
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: String,
    pub log_path: String,
    pub mounts: Vec<Mount>,
    pub resources: Resources,
    pub security: Security,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The container's stdin is kept open for `attach` (`stdin`), closed
    /// after the first attach ends (`stdin_once`); `tty` gives it a
    /// terminal.
    pub stdin: bool,
    pub stdin_once: bool,
    pub tty: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SandboxInfo {
    pub id: String,
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub attempt: u32,
    pub ready: bool,
    pub created_at_ns: i64,
    pub ip: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ContainerInfo {
    pub id: String,
    pub sandbox_id: String,
    pub name: String,
    pub attempt: u32,
    pub image: String,
    pub image_ref: String,
    pub state: ContainerState,
    pub created_at_ns: i64,
    pub started_at_ns: i64,
    pub finished_at_ns: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    /// The pod's grace period recorded at creation ([`ANNOTATION_GRACE`]).
    pub grace: Option<i64>,
}

/// Everything the runtime holds for one pod UID.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimePod {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub sandboxes: Vec<SandboxInfo>,
    pub containers: Vec<ContainerInfo>,
}

impl RuntimePod {
    /// Containers that are running or could start running (created).
    pub fn live_containers(&self) -> impl Iterator<Item = &ContainerInfo> {
        self.containers
            .iter()
            .filter(|c| matches!(c.state, ContainerState::Running | ContainerState::Created | ContainerState::Unknown))
    }

    pub fn has_live(&self) -> bool {
        self.live_containers().next().is_some() || self.sandboxes.iter().any(|s| s.ready)
    }

    /// The newest ready sandbox.
    pub fn ready_sandbox(&self) -> Option<&SandboxInfo> {
        self.sandboxes.iter().filter(|s| s.ready).max_by_key(|s| (s.attempt, s.created_at_ns))
    }

    /// The newest instance of the named container.
    pub fn latest(&self, name: &str) -> Option<&ContainerInfo> {
        self.containers.iter().filter(|c| c.name == name).max_by_key(|c| (c.attempt, c.created_at_ns))
    }

    /// The newest instance of the named container in sandbox `sandbox_id`.
    pub fn latest_in(&self, name: &str, sandbox_id: &str) -> Option<&ContainerInfo> {
        self.containers
            .iter()
            .filter(|c| c.name == name && c.sandbox_id == sandbox_id)
            .max_by_key(|c| (c.attempt, c.created_at_ns))
    }

    /// The grace period recorded on the pod's containers at creation.
    pub fn recorded_grace(&self) -> Option<i64> {
        self.containers.iter().filter_map(|c| c.grace).min()
    }
}

/// The container runtime as podwarden uses it.
pub trait Runtime: Send + Sync {
    /// The runtime's name and version (`containerd 1.6.20~ds1`).
    fn version(&self) -> String;
    /// Every podwarden-managed pod (sandboxes and containers labelled with a
    /// pod UID), grouped by UID.
    fn list_pods(&self, ctx: &CallCtx) -> Result<Vec<RuntimePod>>;
    /// Sandboxes and containers of one pod; empty if the runtime has none.
    fn pod_status(&self, ctx: &CallCtx, uid: &str) -> Result<RuntimePod>;
    /// Bring the state, times and exit details of the containers `ids` in
    /// `rp` up to date (after stopping them: cheaper than a whole
    /// `pod_status`). By default a whole `pod_status`.
    fn refresh_containers(&self, ctx: &CallCtx, rp: &mut RuntimePod, ids: &[String]) -> Result<()> {
        let _ = ids;
        *rp = self.pod_status(ctx, &rp.uid)?;
        Ok(())
    }
    /// The image's reference if it is present locally.
    fn image_status(&self, ctx: &CallCtx, image: &str) -> Result<Option<ImageInfo>>;
    /// Whether the runtime runs containers with the systemd cgroup driver
    /// (`None`: it does not say).
    fn systemd_cgroup(&self, _ctx: &CallCtx) -> Result<Option<bool>> {
        Ok(None)
    }
    /// Whether the runtime drops the hugetlb limits of the containers it
    /// makes (containerd's `disable_hugetlb_controller`, true by default
    /// in 1.6; `None`: it does not say).
    fn drops_hugepage_limits(&self, _ctx: &CallCtx) -> Result<Option<bool>> {
        Ok(None)
    }
    /// The image the runtime runs pod sandboxes from (`None`: it does not
    /// say); image garbage collection keeps it.
    fn sandbox_image(&self, _ctx: &CallCtx) -> Result<Option<String>> {
        Ok(None)
    }
    /// Pull `image`, with `auth` when a keyring found credentials for it.
    fn pull_image(&self, ctx: &CallCtx, image: &str, auth: Option<&Auth>) -> Result<String>;
    fn run_sandbox(&self, ctx: &CallCtx, config: &SandboxConfig) -> Result<String>;
    fn stop_sandbox(&self, ctx: &CallCtx, id: &str) -> Result<()>;
    fn remove_sandbox(&self, ctx: &CallCtx, id: &str) -> Result<()>;
    fn create_container(
        &self,
        ctx: &CallCtx,
        sandbox_id: &str,
        config: &ContainerConfig,
        sandbox: &SandboxConfig,
    ) -> Result<String>;
    fn start_container(&self, ctx: &CallCtx, id: &str) -> Result<()>;
    /// Stop with `timeout` for the container to exit after SIGTERM.
    /// Returns `Cancelled` promptly once `ctx.cancel` fires (a shorter grace
    /// period is coming), even while the container is still stopping.
    fn stop_container(&self, ctx: &CallCtx, id: &str, timeout: Duration) -> Result<()>;
    fn remove_container(&self, ctx: &CallCtx, id: &str) -> Result<()>;
    /// Every image the runtime holds.
    fn list_images(&self, ctx: &CallCtx) -> Result<Vec<ImageInfo>>;
    /// Remove an image (by ID: every tag of it).
    fn remove_image(&self, ctx: &CallCtx, id: &str) -> Result<()>;
    /// The filesystems holding images.
    fn image_fs_info(&self, ctx: &CallCtx) -> Result<Vec<ImageFs>>;
    /// Stats of every podwarden-managed container.
    fn list_container_stats(&self, ctx: &CallCtx) -> Result<Vec<ContainerStats>>;
    /// Stats of every podwarden-managed pod sandbox; `Unimplemented` where
    /// the runtime has no such call (the caller sums its containers').
    fn list_sandbox_stats(&self, ctx: &CallCtx) -> Result<Vec<SandboxStats>>;
    /// Make the runtime open the container's log file again (after it was
    /// renamed by rotation); only for a running container.
    fn reopen_container_log(&self, ctx: &CallCtx, id: &str) -> Result<()>;
    /// CRI `ExecSync` without blocking the caller: run `cmd` in container
    /// `id`, for at most `timeout` (the runtime kills it then). `done` gets
    /// the result exactly once: on the runtime's completion thread, or at
    /// once on the caller's when the call cannot be made. `done` must not
    /// block.
    fn exec_sync(&self, id: &str, cmd: &[String], timeout: Duration, done: ExecDone);
    /// Follow the runtime's container events on this thread: `on` is told
    /// when the stream is open and then gets each event as it comes, until
    /// `cancel` fires (`Ok`) or the stream breaks (the error).
    /// `Unimplemented`: the runtime has no event stream (the relist alone
    /// sees changes).
    fn watch_events(&self, cancel: &CancelToken, on: &mut dyn FnMut(events::Note)) -> Result<()> {
        let _ = (cancel, on);
        Err(RuntimeError::Unimplemented { op: Op::GetContainerEvents })
    }
    /// CRI `Exec`: the URL on the runtime's streaming server where a client
    /// runs `cmd` in container `id` with the streams `streams` asks for.
    fn exec(&self, ctx: &CallCtx, id: &str, cmd: &[String], streams: Streams) -> Result<String>;
    /// CRI `Attach`: the URL where a client attaches to container `id`'s
    /// main process.
    fn attach(&self, ctx: &CallCtx, id: &str, streams: Streams) -> Result<String>;
    /// CRI `PortForward`: the URL where a client forwards connections to
    /// `ports` in sandbox `sandbox_id`'s network namespace.
    fn port_forward(&self, ctx: &CallCtx, sandbox_id: &str, ports: &[u16]) -> Result<String>;
}

/// Which streams an exec or attach carries (CRI `ExecRequest`'s and
/// `AttachRequest`'s flags); with `tty`, stderr is merged into stdout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Streams {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// What [`Runtime::exec_sync`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecResult {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// The completion of [`Runtime::exec_sync`].
pub type ExecDone = Box<dyn FnOnce(Result<ExecResult>) + Send>;

#[cfg(test)]
mod op_tests {
    use super::*;

    #[test]
    fn one_name_per_operation_everywhere() {
        let mut names = std::collections::HashSet::new();
        let mut labels = std::collections::HashSet::new();
        for op in Op::ALL {
            assert_eq!(Op::from_name(op.name()), Some(op), "{op:?}");
            assert_eq!(op.to_string(), op.name());
            assert!(names.insert(op.name()) && labels.insert(op.metric_label()), "{op:?} named twice");
        }
        assert_eq!(Op::from_name("ListPods"), None);
        assert_eq!(Op::from_name("runpodsandbox"), None);
        // the kubelet's operation_type labels
        let kubelet: Vec<_> = [
            Op::ListPodSandbox,
            Op::PodSandboxStatus,
            Op::ContainerStatus,
            Op::RunPodSandbox,
            Op::StopPodSandbox,
            Op::RemovePodSandbox,
            Op::PullImage,
        ]
        .map(Op::metric_label)
        .into();
        assert_eq!(
            kubelet,
            [
                "list_podsandbox",
                "podsandbox_status",
                "container_status",
                "run_podsandbox",
                "stop_podsandbox",
                "remove_podsandbox",
                "pull_image"
            ]
        );
        // errors name the CRI method
        assert_eq!(
            RuntimeError::DeadlineExceeded { op: Op::StopContainer }.to_string(),
            "StopContainer did not answer before its deadline"
        );
        assert_eq!(
            RuntimeError::Failed { op: Op::RunPodSandbox, code: Code::Unknown, message: "x".into() }.to_string(),
            "RunPodSandbox failed: x"
        );
        assert_eq!(RuntimeError::Cancelled { op: Op::ListPodSandbox }.to_string(), "ListPodSandbox was cancelled");
    }

    #[test]
    fn a_log_directory_the_kernel_refuses_is_a_permanent_error_before_the_call() {
        assert!(!path_too_long("/var/log/pods/ns_name_uid"));
        assert!(!path_too_long(&format!("/var/log/pods/{}", "x".repeat(NAME_MAX))));
        assert!(path_too_long(&format!("/var/log/pods/{}", "x".repeat(NAME_MAX + 1))));
        let deep = format!("/{}", vec!["y".repeat(200); 21].join("/"));
        assert!(deep.len() > PATH_MAX && path_too_long(&deep));
        let ok = SandboxConfig { log_directory: "/var/log/pods/ns_p_u".into(), ..Default::default() };
        assert_eq!(ok.check_paths(Op::RunPodSandbox), Ok(()));
        let dir = format!("/var/log/pods/ns_{}_u", "p".repeat(253));
        let long = SandboxConfig { log_directory: dir.clone(), ..Default::default() };
        let e = long.check_paths(Op::RunPodSandbox).unwrap_err();
        assert!(e.is_permanent(), "{e}");
        assert_eq!(
            e,
            RuntimeError::PathTooLong { op: Op::RunPodSandbox, what: "pod log directory", path: dir.clone() }
        );
        // the text the runtime gives for it
        assert_eq!(
            e.to_string(),
            format!(
                "RunPodSandbox failed: failed to create pod log directory {dir:?}: mkdir {dir}: file name too long"
            )
        );
        // the runtime's own errors are retried, whatever their text or code
        for code in [Code::Unknown, Code::InvalidArgument, Code::Internal] {
            let e =
                RuntimeError::Failed { op: Op::StartContainer, code, message: "mkdir x: file name too long".into() };
            assert!(!e.is_permanent(), "{e:?}");
        }
        assert!(!RuntimeError::DeadlineExceeded { op: Op::RunPodSandbox }.is_permanent());
        assert!(!RuntimeError::Unavailable("down".into()).is_permanent());
    }
}

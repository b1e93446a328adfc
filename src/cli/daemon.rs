//! `podwarden run`: wires config, the static pod source, pod workers,
//! housekeeping, the status manager and the runtime, then waits for signals.
//! SIGTERM/SIGINT stop the agent without touching pods (a restarted agent
//! adopts them); SIGHUP rescans the manifests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use thiserror::Error;

use crate::agent::Parts;
use crate::agent::housekeeping::Housekeeping;
use crate::agent::manager::{Agent, AgentConfig, AgentDeps};
use crate::agent::node_shutdown::SharedState;
use crate::agent::source::{FileSource, start_watcher};
use crate::config::Config;
use crate::pod::admission::{Admission, Allocatable, apparmor_enabled, hugepages_allocatable};
use crate::pod::phases::{PodSync, SyncConfig};
use crate::pod::status::StatusManager;
use crate::pod::workers::{self, Observer, PodWorkers};
use crate::runtime::Runtime;
use crate::runtime::cri::CriRuntime;
use crate::runtime::fake::FakeRuntime;
use crate::telemetry::events::{EventRecorder, EventType, ObjectRef};
use crate::telemetry::metrics::Metrics;

#[derive(Debug, Error)]
pub enum DaemonError {
    /// podwarden's `cgroupDriver` is not the runtime's.
    #[error(
        "field cgroupDriver: {ours:?} does not match containerd's cgroup driver: its runc runtime has SystemdCgroup = {theirs} \
         (plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options); set cgroupDriver to {} or change containerd's",
        if *theirs == "true" { "systemd" } else { "cgroupfs" }
    )]
    CgroupDriver { ours: String, theirs: &'static str },
    #[error("containerRuntimeEndpoint {endpoint}: {source}")]
    Runtime {
        endpoint: String,
        #[source]
        source: crate::runtime::RuntimeError,
    },
    /// `apiGroup` names a group /etc/group does not have (the message is
    /// the config's own: the caller prefixes the config file).
    #[error("field apiGroup: {value} is invalid: expected a group that exists in /etc/group")]
    ApiGroup { value: String },
    /// Another agent holds this one's rootDir or runtime.
    #[error(transparent)]
    Instance(#[from] crate::base::instance::InstanceError),
    #[error(transparent)]
    Credentials(#[from] crate::node::images::credentials::CredentialError),
    #[error("creating the kubepods cgroups: {0}")]
    Cgroups(#[from] crate::node::cgroups::CgroupError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DaemonError {
    let what = what.into();
    move |source| DaemonError::Io { what, source }
}

/// The node's name: `nodeName`, else the host name (lowercased), as the
/// kubelet takes it.
pub fn node_name(config: &Config) -> String {
    config.node_name.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_lowercase())
            .unwrap_or_else(|_| "localhost".into())
    })
}

/// `apiGroup` and its gid, looked up in /etc/group; an error if the group
/// does not exist.
pub fn api_group(config: &Config) -> Result<Option<(String, u32)>, DaemonError> {
    let Some(name) = &config.api_group else { return Ok(None) };
    match crate::api::local::group_id(name) {
        Some(gid) => Ok(Some((name.clone(), gid))),
        None => Err(DaemonError::ApiGroup { value: serde_json::Value::String(name.clone()).to_string() }),
    }
}

/// Connect to the runtime; with `cgroupDriver` unset, take the runtime's
/// cgroup driver into `config` (`cgroupfs` when it does not say); set, it
/// must be the runtime's.
fn connect_runtime(config: &mut Config) -> Result<Arc<dyn Runtime>, DaemonError> {
    let endpoint = config.container_runtime_endpoint.clone();
    let endpoint = endpoint.as_str();
    if endpoint == "fake://" {
        log::warn!("containerRuntimeEndpoint fake://: simulating containers in memory; nothing really runs");
        let fake = FakeRuntime::new();
        fake.set_recording(false);
        // tests of the agent's reaction to a panicking thread: the first
        // call of this CRI method panics (simulated runtime only)
        if let Some(op) =
            std::env::var("PODWARDEN_FAKE_PANIC").ok().and_then(|n| crate::runtime::fake::Op::from_name(&n))
        {
            log::warn!("PODWARDEN_FAKE_PANIC: the first {} call will panic", op.name());
            fake.panic_on(op, None, 1);
        }
        if config.cgroup_driver.is_empty() {
            config.cgroup_driver = "cgroupfs".into();
        }
        return Ok(Arc::new(fake));
    }
    let cri = CriRuntime::connect(endpoint, Duration::from_secs(10))
        .map_err(|source| DaemonError::Runtime { endpoint: endpoint.into(), source })?
        .with_pull_progress_deadline(config.image_pull_progress_deadline);
    log::info!("container runtime: {} at {endpoint}", cri.version);
    // the kubelet and the runtime must agree on who manages the cgroups
    let cancel = crate::base::cancel::CancelToken::new();
    let ctx = crate::runtime::CallCtx::new(Duration::from_secs(10), &cancel);
    let theirs = match cri.systemd_cgroup(&ctx) {
        Ok(s) => s,
        Err(e) => {
            log::warn!("cannot read the runtime's cgroup driver (Status): {e}");
            None
        }
    };
    match theirs {
        Some(systemd) if config.cgroup_driver.is_empty() => {
            config.cgroup_driver = if systemd { "systemd" } else { "cgroupfs" }.into();
            log::info!(
                "cgroupDriver not set: {}, containerd's (its runc runtime has SystemdCgroup = {systemd})",
                config.cgroup_driver
            );
        }
        None if config.cgroup_driver.is_empty() => {
            config.cgroup_driver = "cgroupfs".into();
            log::info!("cgroupDriver not set and the runtime does not say its own: cgroupfs");
        }
        Some(systemd) if systemd != (config.cgroup_driver == "systemd") => {
            return Err(DaemonError::CgroupDriver {
                ours: config.cgroup_driver.clone(),
                theirs: if systemd { "true" } else { "false" },
            });
        }
        _ => {}
    }
    Ok(Arc::new(cri))
}

/// The node's pod cgroups (`cgroupsPerQOS`), made at start with
/// `kubepods` limited to the allocatable (`enforceNodeAllocatable: [pods]`)
/// or the machine; none with the simulated runtime.
fn node_cgroups(
    config: &Config,
    id_prefix: &str,
    a: &Allocatable,
) -> Result<Option<crate::node::cgroups::Cgroups>, DaemonError> {
    if !config.cgroups_per_qos || id_prefix == "fake://" {
        return Ok(None);
    }
    let driver = crate::node::cgroups::Driver::parse(&config.cgroup_driver);
    let cg = crate::node::cgroups::Cgroups::detect(driver, std::path::Path::new("/sys/fs/cgroup"))
        .with_pod_pids_limit(config.pod_pids_limit);
    let (cpu, mem) = if config.enforce_node_allocatable.iter().any(|e| e == "pods") {
        (a.cpu_millis, a.memory_bytes)
    } else {
        (a.cpu_capacity_millis, a.memory_capacity_bytes)
    };
    cg.ensure_node(cpu, mem)?;
    log::info!(
        "pod cgroups: {} driver, cgroup {:?}, kubepods limited to {cpu}m CPU and {mem} bytes",
        driver.name(),
        cg.version
    );
    Ok(Some(cg))
}

/// The node's first non-loopback IPv4 address (the pod IP of host-network
/// pods), else 127.0.0.1.
pub fn host_ip() -> String {
    crate::sys::first_ipv4_address().map_or_else(|| "127.0.0.1".into(), |ip| ip.to_string())
}

/// Knobs that are not configuration. The defaults are production's
/// (`podwarden run` uses `Tuning::default()`); tests and benches shorten
/// the back-offs, fix the node's resources or watch the pod workers.
#[derive(Clone)]
pub struct Tuning {
    /// A failed pod worker pass is retried after this (jittered).
    pub worker_backoff: Duration,
    /// The first container restart back-off (the kubelet's 10 s), doubled
    /// up to `container_backoff_max` (the kubelet's 5 min).
    pub container_backoff: Duration,
    pub container_backoff_max: Duration,
    /// How long a kill waits for a container start in flight.
    pub start_gate_wait: Duration,
    /// Told about the pod workers' transitions besides the metrics.
    pub observer: Option<Arc<dyn Observer>>,
    /// What the node gives to pods; `None`: the machine's capacity less
    /// the configured reservations.
    pub allocatable: Option<Allocatable>,
    /// The pod cgroups (the daemon's, with a real runtime); `None`: none.
    pub cgroups: Option<crate::node::cgroups::Cgroups>,
    /// Where pulls find registry credentials (default: none, every pull
    /// anonymous).
    pub keyring: Option<Arc<crate::node::images::credentials::Keyring>>,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            worker_backoff: Duration::from_secs(10),
            container_backoff: Duration::from_secs(10),
            container_backoff_max: Duration::from_secs(300),
            start_gate_wait: Duration::from_secs(5),
            observer: None,
            allocatable: None,
            cgroups: None,
            keyring: None,
        }
    }
}

/// The hard eviction threshold of `signal` in bytes of `capacity`: the
/// kubelet keeps it out of the node's allocatable (0 when none is set).
fn hard_threshold(config: &Config, signal: crate::config::Signal, capacity: u64) -> u64 {
    config
        .thresholds()
        .unwrap_or_default()
        .iter()
        .find(|t| t.signal == signal && !t.soft)
        .map_or(0, |t| t.value.of(capacity))
}

/// Ephemeral storage for pods as the kubelet computes it: the capacity of
/// `rootDir`'s filesystem (of its nearest existing ancestor before it is
/// made) less the hard eviction threshold `nodefs.available`.
fn ephemeral_allocatable(config: &Config) -> i64 {
    let bytes = config
        .root_dir
        .ancestors()
        .filter_map(|p| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).ok())
        .find_map(|p| crate::sys::filesystem_bytes(&p).ok())
        .unwrap_or(0);
    let kept = hard_threshold(config, crate::config::Signal::NodeFsAvailable, bytes);
    bytes.saturating_sub(kept).min(i64::MAX as u64) as i64
}

/// Both observers, in turn.
struct Both(Arc<dyn Observer>, Arc<dyn Observer>);

impl Observer for Both {
    fn termination_requested(&self, uid: &str) {
        self.0.termination_requested(uid);
        self.1.termination_requested(uid);
    }
    fn phase_changed(&self, uid: &str, from: workers::Phase, to: workers::Phase) {
        self.0.phase_changed(uid, from, to);
        self.1.phase_changed(uid, from, to);
    }
    fn work_done(&self, kind: workers::WorkKind, took: Duration, failed: bool) {
        self.0.work_done(kind, took, failed);
        self.1.work_done(kind, took, failed);
    }
}

/// Wire the agent's parts on `runtime` from `config` (and `tuning`): the
/// one wiring, used by [`start`], the tests and the benches. No thread is
/// started here besides the pod workers' own; [`start`] adds the source
/// watcher, housekeeping, HTTP, logind and the API.
pub fn assemble(config: &Config, runtime: Arc<dyn Runtime>, id_prefix: &str, tuning: Tuning) -> Parts {
    let node_name = self::node_name(config);
    let statuses = Arc::new(StatusManager::new());
    let events = Arc::new(EventRecorder::new(1000));
    let metrics = Arc::new(Metrics::new());
    let runtime: Arc<dyn Runtime> = Arc::new(crate::runtime::metered::Metered::new(runtime, metrics.clone()));
    let allocatable = tuning.allocatable.unwrap_or_else(|| {
        Allocatable::detect(config.max_pods, config.reserved_cpu_millis, config.reserved_memory_bytes)
    });
    // the host's facts, read once for admission and the sync phases
    let apparmor = apparmor_enabled();
    let ephemeral = ephemeral_allocatable(config);
    let mut admission = Admission::new(allocatable)
        .with_pod_security(config.static_pod_security_level)
        .with_security(crate::model::sysctl::Allowlist::new(&config.allowed_unsafe_sysctls), apparmor)
        .with_other("ephemeral-storage", ephemeral);
    for (size, bytes) in hugepages_allocatable() {
        admission = admission.with_other(&size, bytes);
    }
    let admission = Arc::new(admission);
    let sync_cfg = SyncConfig {
        root_dir: config.root_dir.clone(),
        pod_logs_dir: config.pod_logs_dir.clone(),
        call_timeout: config.runtime_request_timeout,
        backoff_initial: tuning.container_backoff,
        backoff_max: tuning.container_backoff_max,
        id_prefix: id_prefix.to_string(),
        host_ip: Some(host_ip()),
        allow_privileged: config.allow_privileged,
        allocatable_cpu_millis: allocatable.cpu_millis,
        allocatable_memory_bytes: allocatable.memory_bytes,
        allocatable_ephemeral_bytes: ephemeral,
        memory_capacity_bytes: allocatable.memory_capacity_bytes,
        resolv_conf: config.resolv_conf.clone(),
        seccomp_default: config.seccomp_default,
        apparmor_enabled: apparmor,
        cgroups: tuning.cgroups.clone(),
        max_parallel_pulls: if config.serialize_image_pulls { 1 } else { config.max_parallel_image_pulls as usize },
    };
    let pod_cache = Arc::new(crate::runtime::cache::PodCache::new());
    // while the runtime's event stream is open, its lists stay current
    pod_cache.follow_events(metrics.runtime_events.clone());
    let objects = Arc::new(crate::model::objects::ObjectStore::new());
    let new_logs = Arc::new(crate::logs::monitor::NewLogs::default());
    let prober = crate::pod::prober::Prober::start(crate::pod::prober::ProberDeps {
        runtime: runtime.clone(),
        events: events.clone(),
        metrics: Some(metrics.clone()),
    })
    .unwrap_or_else(|e| panic!("cannot start the prober thread: {e}"));
    let keyring = tuning.keyring.clone().unwrap_or_else(|| Arc::new(crate::node::images::credentials::Keyring::none()));
    let cluster = Arc::new(crate::pod::cluster::ClusterSlot::default());
    keyring.attach_metrics(metrics.clone());
    let syncer = Arc::new(
        PodSync::new(runtime.clone(), statuses.clone(), events.clone(), sync_cfg)
            .with_metrics(metrics.clone())
            .with_pod_cache(pod_cache.clone())
            .with_objects(objects.clone())
            .with_cluster(cluster.clone())
            .with_prober(prober.clone())
            .with_keyring(keyring.clone())
            .with_new_logs(new_logs.clone()),
    );
    let observer: Arc<dyn Observer> = match tuning.observer {
        Some(o) => Arc::new(Both(metrics.clone(), o)),
        None => metrics.clone(),
    };
    let workers = PodWorkers::new(
        syncer,
        workers::Config {
            resync: config.sync_frequency,
            backoff: tuning.worker_backoff,
            start_gate_wait: tuning.start_gate_wait,
        },
        Some(observer),
    );
    // probe results that matter (readiness, startup, a liveness failure)
    // ask the pod's worker for a pass; weak: the workers own the prober
    let weak = workers.downgrade();
    prober.set_resync(Box::new(move |pod| {
        if let Some(w) = weak.upgrade() {
            w.update_pod(workers::UpdatePodOptions::new(workers::UpdateType::Sync, pod));
        }
    }));
    let agent = Arc::new(Agent::new(
        AgentConfig {
            root_dir: config.root_dir.clone(),
            pod_logs_dir: config.pod_logs_dir.clone(),
            runtime_call_timeout: config.runtime_request_timeout.min(Duration::from_secs(10)),
            cgroups: tuning.cgroups.clone(),
            evented_relist: config.housekeeping_interval.saturating_mul(15).min(crate::runtime::cache::EVENTED_RELIST),
        },
        AgentDeps {
            workers: workers.clone(),
            runtime: runtime.clone(),
            statuses: statuses.clone(),
            events: events.clone(),
            admission: admission.clone(),
            metrics: metrics.clone(),
            pod_cache: pod_cache.clone(),
            objects: objects.clone(),
        },
    ));
    let stats = Arc::new(
        crate::node::stats::Collector::new(
            runtime.clone(),
            &config.root_dir,
            &config.pod_logs_dir,
            config.runtime_request_timeout,
        )
        .with_metrics(metrics.clone())
        .with_cgroups(tuning.cgroups.clone())
        .with_pod_cache(pod_cache.clone()),
    );
    let runtime_events = metrics.runtime_events.clone();
    Parts {
        stats,
        agent,
        workers,
        runtime,
        statuses,
        events,
        admission,
        metrics,
        pod_cache,
        objects,
        shutdown: SharedState::default(),
        node_name,
        runtime_events,
        new_logs,
        keyring,
        cluster,
    }
}

/// The running agent: its parts and the threads `run` starts.
pub struct Running {
    pub parts: Parts,
    source: Option<crate::agent::source::SourceHandle>,
    housekeeping: Option<Housekeeping>,
    /// The `runtime-events` thread (none when `runtimeEvents` is off).
    events: Option<crate::runtime::events::EventStream>,
    /// The `credentials-watch` thread (none when the keyring reads no
    /// docker config).
    credentials: Option<crate::node::images::watch::CredentialWatch>,
    http: Option<crate::api::http::HttpServer>,
    logind: Option<crate::agent::node_shutdown::logind::LogindThread>,
    api: Option<crate::api::local::ApiServer>,
    kube: Option<crate::api::kube::KubeServer>,
    /// The `cluster-*` threads (cluster mode only).
    cluster: Option<crate::cluster::Cluster>,
    log_rotation: Option<crate::logs::monitor::LogRotation>,
    eviction: Option<crate::agent::housekeeping::Periodic>,
}

impl Running {
    pub fn rescan(&self) {
        if let Some(s) = &self.source {
            s.rescan();
        }
    }

    pub fn wake_housekeeping(&self) {
        if let Some(h) = &self.housekeeping {
            h.waker().wake();
        }
    }

    /// Stop the agent's threads; pods are left as they are.
    pub fn stop(mut self) {
        self.cluster.take();
        self.kube.take();
        self.api.take();
        self.logind.take();
        self.http.take();
        self.source.take();
        self.events.take();
        self.credentials.take();
        self.housekeeping.take();
        self.log_rotation.take();
        self.eviction.take();
    }

    /// Where the Kubernetes API listens, if it is on.
    pub fn kube_addr(&self) -> Option<std::net::SocketAddr> {
        self.kube.as_ref().map(|k| k.local_addr())
    }

    /// Where the read-only HTTP endpoint listens, if it is on.
    pub fn http_addr(&self) -> Option<std::net::SocketAddr> {
        self.http.as_ref().map(|h| h.local_addr())
    }
}

/// Start every part of the agent on `runtime`: [`assemble`] with
/// production's tuning, then the threads, in this order (a failure drops,
/// and so stops, the threads already started).
pub fn start(config: &Config, runtime: Arc<dyn Runtime>, id_prefix: &str) -> Result<Running, DaemonError> {
    let api_group = api_group(config)?;
    std::fs::create_dir_all(config.root_dir.join("pods"))
        .map_err(io(format!("creating rootDir {}", config.root_dir.display())))?;
    let parts = assemble(config, runtime, id_prefix, production_tuning(config, id_prefix)?);
    // cluster mode's events go to the API from the first (the file
    // source's first scan is before the cluster threads start)
    let cluster_events = config.kubeconfig.is_some().then(|| parts.events.subscribe(crate::cluster::events::QUEUE));
    // in cluster mode the API's pods join the static ones (`cluster-pods`)
    let sources = crate::agent::source::Sources::new(parts.agent.clone(), config.kubeconfig.is_some());
    let source = start_source(config, &parts, &sources)?;
    // relist every second (the kubelet's PLEG period), housekeeping every
    // housekeepingInterval, on one thread from one runtime list
    let relist = Duration::from_secs(1).min(config.housekeeping_interval);
    let housekeeping = Housekeeping::with_relist(parts.agent.clone(), config.housekeeping_interval, relist)
        .map_err(io("starting housekeeping"))?;
    let events = start_events(config, &parts, &housekeeping)?;
    let credentials = start_credentials_watch(&parts);
    let log_rotation = start_log_rotation(config, &parts)?;
    let eviction = start_eviction(config, &parts)?;
    let healthy_within = healthy_within(config);
    let http = start_http(config, &parts, healthy_within)?;
    let logind = start_logind(config, &parts)?;
    let (api, ops) = start_api(config, &parts, api_group, healthy_within, source.rescanner())?;
    let kube = start_kube(config, ops, healthy_within)?;
    let cluster = start_cluster(config, &parts, healthy_within, sources, cluster_events, kube.as_ref())?;
    Ok(Running {
        parts,
        source: Some(source),
        housekeeping: Some(housekeeping),
        events,
        credentials,
        http,
        logind,
        api: Some(api),
        kube,
        cluster,
        log_rotation: Some(log_rotation),
        eviction: Some(eviction),
    })
}

/// The `runtime-events` thread when `runtimeEvents` is on (see
/// [`runtime_events`]).
fn start_events(
    config: &Config,
    parts: &Parts,
    housekeeping: &Housekeeping,
) -> Result<Option<crate::runtime::events::EventStream>, DaemonError> {
    if !config.runtime_events {
        log::info!("runtimeEvents is false: pod changes are seen by the relist every second");
        return Ok(None);
    }
    runtime_events(parts, housekeeping.waker()).map(Some).map_err(io("starting the runtime-events thread"))
}

/// The `runtime-events` thread as `podwarden run` wires it: each container
/// event (and each opening of the stream, after which events may have been
/// missed) asks housekeeping for a relist now, through `waker`, which wakes
/// the workers of the pods that changed; an exit is told to the pod
/// workers at once (a node shutdown's wait ends on it).
pub fn runtime_events(
    parts: &Parts,
    waker: crate::agent::housekeeping::Waker,
) -> std::io::Result<crate::runtime::events::EventStream> {
    let workers = parts.workers.clone();
    crate::runtime::events::EventStream::start(parts.runtime.clone(), parts.runtime_events.clone(), move |e| {
        if let Some(e) = e {
            workers.runtime_event(e);
        }
        waker.relist_now(e)
    })
}

/// The `credentials-watch` thread: a changed docker config file is read
/// again at once and the pods waiting on a pull are woken. When it cannot
/// start (no inotify instance left), the agent runs on with the keyring's
/// 5-minute re-read, said in a warning event on the node.
fn start_credentials_watch(parts: &Parts) -> Option<crate::node::images::watch::CredentialWatch> {
    let files = parts.keyring.docker_config_files();
    if files.is_empty() {
        return None;
    }
    let (keyring, agent) = (parts.keyring.clone(), parts.agent.clone());
    let started = crate::node::images::watch::CredentialWatch::start(files, move || {
        keyring.docker_config_changed();
        let n = agent.credentials_changed();
        if n > 0 {
            log::info!("registry credentials: {n} pod(s) waiting on an image pull try again");
        }
    });
    match started {
        Ok(w) => Some(w),
        Err(e) => {
            let msg = format!(
                "cannot watch the docker config files ({e}): a changed registry credential is read within 5 minutes"
            );
            log::warn!("registry credentials: {msg}");
            parts.events.event(
                &crate::telemetry::events::ObjectRef::node(&parts.node_name),
                crate::telemetry::events::EventType::Warning,
                "CredentialWatchFailed",
                &msg,
            );
            None
        }
    }
}

/// Healthy (/healthz, the node's Ready condition) and live (systemd's
/// watchdog): housekeeping (and, for health, the runtime) answered within a
/// few housekeeping periods.
fn healthy_within(config: &Config) -> Duration {
    config.housekeeping_interval.saturating_mul(5).max(Duration::from_secs(10))
}

/// Production's [`Tuning`]: the machine read once (for kubepods' limits
/// and for admission), the pod cgroups, the registry credentials.
fn production_tuning(config: &Config, id_prefix: &str) -> Result<Tuning, DaemonError> {
    let machine = Allocatable::detect(config.max_pods, config.reserved_cpu_millis, config.reserved_memory_bytes);
    // kubepods is limited to the capacity less what is reserved; what pods
    // may request (admission, the Node's allocatable, a container's default
    // memory limit in the downward API) is also less the hard eviction
    // threshold `memory.available`, as the kubelet's node allocatable
    let cgroups = node_cgroups(config, id_prefix, &machine)?;
    let kept = hard_threshold(config, crate::config::Signal::MemoryAvailable, machine.memory_capacity_bytes as u64);
    let allocatable = Allocatable { memory_bytes: (machine.memory_bytes - kept as i64).max(0), ..machine };
    let provider_config = &config.image_credential_provider_config;
    let keyring = crate::node::images::credentials::Keyring::load(
        &config.root_dir,
        (!provider_config.as_os_str().is_empty()).then_some(provider_config.as_path()),
        &config.image_credential_provider_bin_dir,
    )?;
    Ok(Tuning { cgroups, allocatable: Some(allocatable), keyring: Some(Arc::new(keyring)), ..Tuning::default() })
}

/// The `source-file` thread: each scan's objects, then its pods, to the
/// agent; its problems to the event recorder.
fn start_source(
    config: &Config,
    parts: &Parts,
    sources: &Arc<crate::agent::source::Sources>,
) -> Result<crate::agent::source::SourceHandle, DaemonError> {
    let source = FileSource::new(&config.static_pod_path, &parts.node_name);
    let s = sources.clone();
    let events = parts.events.clone();
    start_watcher(
        source,
        config.file_check_frequency,
        move |pods, objects| s.set_file(pods, objects),
        move |file, msg| {
            events.event(&ObjectRef::file(file), EventType::Warning, "InvalidManifest", msg);
        },
    )
    .map_err(io("starting the manifest watcher"))
}

/// The `log-monitor` thread and its workers; `podLogsDir` is made first so
/// that it is watched before the first pod.
fn start_log_rotation(config: &Config, parts: &Parts) -> Result<crate::logs::monitor::LogRotation, DaemonError> {
    std::fs::create_dir_all(&config.pod_logs_dir)
        .map_err(io(format!("creating podLogsDir {}", config.pod_logs_dir.display())))?;
    crate::logs::monitor::start(
        parts.runtime.clone(),
        crate::logs::monitor::Settings {
            pod_logs_dir: config.pod_logs_dir.clone(),
            policy: crate::logs::rotation::Policy {
                max_size: config.container_log_max_size,
                max_files: config.container_log_max_files,
            },
            interval: config.container_log_monitor_interval,
            workers: config.container_log_max_workers,
            timeout: config.runtime_request_timeout,
            pod_cache: Some(parts.pod_cache.clone()),
            new_logs: parts.new_logs.clone(),
        },
    )
    .map_err(io("starting container log rotation"))
}

/// The `eviction` thread: the eviction manager every
/// `housekeepingInterval`, image garbage collection every `imageGCPeriod`.
fn start_eviction(config: &Config, parts: &Parts) -> Result<crate::agent::housekeeping::Periodic, DaemonError> {
    let gc = Arc::new(crate::node::images::gc::ImageGc::new(
        parts.runtime.clone(),
        crate::node::images::gc::Policy {
            high_percent: config.image_gc_high_threshold_percent,
            low_percent: config.image_gc_low_threshold_percent,
            min_age: config.image_minimum_gc_age,
            max_age: config.image_maximum_gc_age,
        },
        parts.events.clone(),
        parts.metrics.clone(),
        &parts.node_name,
        config.runtime_request_timeout,
    ));
    let thresholds = config.thresholds().map_err(|e| DaemonError::Io {
        what: format!("{}.{}", e.field, e.key),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e.reason),
    })?;
    let m = crate::agent::eviction::Manager::new(
        crate::agent::eviction::Settings {
            thresholds,
            max_pod_grace: config.eviction_max_pod_grace_period,
            transition: config.eviction_pressure_transition_period,
            priority_classes: config.priority_classes.clone(),
            node_name: parts.node_name.clone(),
            stats_period: stats_period(config.housekeeping_interval),
        },
        parts.stats.clone(),
        Some(gc.clone()),
        parts.agent.clone(),
        parts.admission.pressure(),
        parts.events.clone(),
        parts.metrics.clone(),
    );
    // the node's signals are read every housekeeping interval, the pods'
    // stats every stats_period; the same thread collects images every
    // imageGCPeriod (one thread less on a small node: both only call the
    // runtime)
    let gc_period = config.image_gc_period;
    let mut next_gc = Instant::now();
    crate::agent::housekeeping::Periodic::every("eviction", config.housekeeping_interval, move || {
        m.synchronize();
        if Instant::now() >= next_gc {
            if let Err(e) = gc.collect(Instant::now()) {
                log::warn!("image garbage collection failed: {e}");
            }
            next_gc = crate::base::cancel::deadline_in(gc_period);
        }
        // a snapshot's lists (110 pods' stats) are freed now: their
        // pages go back at once rather than at the next trim
        crate::sys::malloc_trim();
    })
    .map_err(io("starting the eviction manager"))
}

/// How often the eviction thread takes the pods' stats: five housekeeping
/// intervals, at most 10 s (the kubelet's eviction monitoring period, so
/// 10 s with the default 2 s) and at least one interval. Gathering 110
/// pods' stats costs containerd about a tenth of a core every 2 s.
fn stats_period(housekeeping: Duration) -> Duration {
    housekeeping.saturating_mul(5).min(Duration::from_secs(10)).max(housekeeping)
}

/// The read-only HTTP endpoint (`http` and its pool), unless
/// `readOnlyPort` is 0.
fn start_http(
    config: &Config,
    parts: &Parts,
    healthy_within: Duration,
) -> Result<Option<crate::api::http::HttpServer>, DaemonError> {
    if config.read_only_port == 0 {
        return Ok(None);
    }
    let ip: std::net::IpAddr = config.address.parse().map_err(|e| DaemonError::Io {
        what: format!("address {}", config.address),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
    })?;
    let addr = std::net::SocketAddr::new(ip, config.read_only_port);
    let server =
        crate::api::http::HttpServer::start(addr, parts.clone(), healthy_within, !config.read_only_port_shows_env)
            .map_err(io(format!("listening on {addr} (address, readOnlyPort)")))?;
    log::info!("read-only HTTP on http://{}", server.local_addr());
    Ok(Some(server))
}

/// The `logind` thread (graceful node shutdown), unless no grace period is
/// configured.
fn start_logind(
    config: &Config,
    parts: &Parts,
) -> Result<Option<crate::agent::node_shutdown::logind::LogindThread>, DaemonError> {
    if config.shutdown_grace_period.is_zero() && config.shutdown_grace_period_by_pod_priority.is_empty() {
        log::info!("graceful node shutdown off (shutdownGracePeriod is 0)");
        return Ok(None);
    }
    let cfg = crate::agent::node_shutdown::logind::ShutdownConfig {
        groups: crate::agent::node_shutdown::groups_from_config(
            config.shutdown_grace_period.as_secs() as i64,
            config.shutdown_grace_period_critical_pods.as_secs() as i64,
            &config.shutdown_grace_period_by_pod_priority,
        ),
        priority_classes: config.priority_classes.clone(),
        root_dir: config.root_dir.clone(),
        dropin_dir: Some(config.logind_drop_in_dir.clone()),
    };
    let logind = Arc::new(crate::agent::node_shutdown::logind::dbus_impl::DbusLogind::new());
    let thread = crate::agent::node_shutdown::logind::LogindThread::start(logind, parts.shutdown_runner(), cfg)
        .map_err(io("starting the logind thread"))?;
    Ok(Some(thread))
}

/// The local API (`api-accept`, its gRPC server; `api-work`/`api-kill`
/// start with their first job).
fn start_api(
    config: &Config,
    parts: &Parts,
    group: Option<(String, u32)>,
    healthy_within: Duration,
    rescan: Arc<dyn Fn() + Send + Sync>,
) -> Result<(crate::api::local::ApiServer, Arc<crate::api::ops::Ops>), DaemonError> {
    let ops = crate::api::ops::Ops::new(
        parts.clone(),
        crate::api::ops::OpsConfig {
            static_pod_path: config.static_pod_path.clone(),
            pod_logs_dir: config.pod_logs_dir.clone(),
            node_name: parts.node_name.clone(),
            rescan,
            root_pod_security: config.static_pod_security_level,
            group_pod_security: config.api_group_pod_security_level,
        },
    );
    let cfg = crate::api::local::ApiConfig { socket: config.api_socket.clone(), group, healthy_within };
    let server = crate::api::local::ApiServer::start(ops.clone(), cfg)
        .map_err(io(format!("serving the local API on {} (apiSocket)", config.api_socket.display())))?;
    log::info!("local API on {}", server.socket().display());
    Ok((server, ops))
}

/// The Kubernetes API (`kube-accept`, `kube-watch`; `kube-conn` threads
/// per connection), unless `port` is 0.
fn start_kube(
    config: &Config,
    ops: Arc<crate::api::ops::Ops>,
    healthy_within: Duration,
) -> Result<Option<crate::api::kube::KubeServer>, DaemonError> {
    if config.port == 0 {
        log::info!("Kubernetes API off (port is 0)");
        return Ok(None);
    }
    let address = config.address.parse().unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
    let cfg = crate::api::kube::KubeConfig {
        address,
        port: config.port,
        root_dir: config.root_dir.clone(),
        healthy_within,
        authorization: config.api_authorization.clone(),
        cluster_ca_pem: cluster_ca(config),
    };
    let server = crate::api::kube::KubeServer::start(ops, cfg).map_err(|e| {
        io(format!("serving the Kubernetes API on {}:{} (address, port)", config.address, config.port))(
            std::io::Error::other(e.to_string()),
        )
    })?;
    log::info!(
        "Kubernetes API on https://{} (certificates in {})",
        server.local_addr(),
        crate::api::kube::pki::dir_of(&config.root_dir).display()
    );
    Ok(Some(server))
}

/// The cluster's CA (cluster mode): from the node's kubeconfig, else the
/// bootstrap kubeconfig (the node's is written by the bootstrap later).
fn cluster_ca(config: &Config) -> Option<String> {
    let k = config.kubeconfig.as_ref()?;
    let read = |p: &std::path::Path| crate::cluster::kubeconfig::Kubeconfig::read(p).ok().map(|k| k.ca_pem);
    read(k).or_else(|| config.bootstrap_kubeconfig.as_deref().and_then(read))
}

/// The node's address as the cluster should reach it: `address` when it is
/// one address of this machine (not loopback, not all of them); `None`:
/// the first IPv4 address.
fn node_ip(config: &Config) -> Option<std::net::IpAddr> {
    let ip: std::net::IpAddr = config.address.parse().ok()?;
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// The `cluster-node` thread when a kubeconfig is given (else standalone).
fn start_cluster(
    config: &Config,
    parts: &Parts,
    healthy_within: Duration,
    sources: Arc<crate::agent::source::Sources>,
    events: Option<crossbeam_channel::Receiver<crate::telemetry::events::Event>>,
    kube: Option<&crate::api::kube::KubeServer>,
) -> Result<Option<crate::cluster::Cluster>, DaemonError> {
    let (Some(kubeconfig), Some(events)) = (&config.kubeconfig, events) else { return Ok(None) };
    let loopback = config.address.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if kube.is_none() || loopback {
        // configured, and cannot work: said on the node, not only logged
        let msg = if kube.is_none() {
            "the node's server is off (port is 0): the API server cannot reach this node for logs, exec, attach or port-forward".to_string()
        } else {
            format!(
                "the node's server listens on {} (address): the API server cannot reach this node for logs, exec, attach or port-forward; set address to the node's IP",
                config.address
            )
        };
        log::warn!("cluster: {msg}");
        parts.events.event(
            &crate::telemetry::events::ObjectRef::node(&parts.node_name),
            crate::telemetry::events::EventType::Warning,
            "NodeServerUnreachable",
            &msg,
        );
    }
    let cfg = crate::cluster::node::ClusterConfig {
        kubeconfig: kubeconfig.clone(),
        bootstrap_kubeconfig: config.bootstrap_kubeconfig.clone(),
        root_dir: config.root_dir.clone(),
        kubelet_port: config.port,
        healthy_within,
        node_ip: node_ip(config),
    };
    crate::cluster::Cluster::start(parts.clone(), cfg, sources, events, kube.map(|k| k.cluster_auth()))
        .map(Some)
        .map_err(io("starting cluster mode"))
}

/// Run the daemon until SIGTERM or SIGINT.
pub fn run(mut config: Config) -> Result<(), DaemonError> {
    // One thread per pod: glibc would give each its own malloc arena (up to
    // 8 per core), each keeping freed memory. Two arenas are plenty for an
    // agent that mostly waits.
    crate::sys::limit_malloc_arenas(2);
    // a panic escaping any thread ends the agent (status 70) for systemd to
    // restart it: never a dead thread behind a healthy /healthz
    crate::base::thread::exit_on_panic(true);
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP]).map_err(io("installing signal handlers"))?;
    // a config error before the runtime's: apiGroup is part of the config
    api_group(&config)?;
    // one agent per rootDir and runtime, before either is touched
    let _instance = crate::base::instance::claim(
        &config.root_dir,
        &config.container_runtime_endpoint,
        std::path::Path::new(crate::base::instance::LOCK_DIR),
        crate::base::instance::WAIT,
    )?;
    let runtime = connect_runtime(&mut config)?;
    log::info!(
        "podwarden {} starting: node {}, staticPodPath {}, rootDir {}",
        env!("CARGO_PKG_VERSION"),
        node_name(&config),
        config.static_pod_path.display(),
        config.root_dir.display()
    );
    let prefix = if config.container_runtime_endpoint == "fake://" { "fake://" } else { "containerd://" };
    let running = start(&config, runtime, prefix)?;
    crate::base::notify::notify("READY=1");
    // systemd's watchdog (WatchdogSec=): pinged while the threads are live
    let (agent, within) = (running.parts.agent.clone(), healthy_within(&config));
    let watchdog = crate::base::watchdog::Watchdog::from_env(move || agent.liveness(within))
        .map_err(io("starting the watchdog thread"))?;
    for sig in signals.forever() {
        match sig {
            SIGHUP => {
                log::info!("SIGHUP: rescanning {}", config.static_pod_path.display());
                running.rescan();
            }
            _ => {
                log::info!("signal {sig}: stopping; pods keep running and will be adopted on restart");
                break;
            }
        }
    }
    crate::base::notify::notify("STOPPING=1");
    drop(watchdog);
    running.stop();
    Ok(())
}

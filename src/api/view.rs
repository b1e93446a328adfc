//! The typed views podwarden shows of its pods and its node: the v1
//! `PodList` (`/pods`, the local API's pod calls), the v1 `Node` and the
//! node report (`/node`, the API's node call, `podwarden node`). Built once,
//! here, from the narrow inputs each names (never the whole agent); the
//! HTTP endpoint and the API serialize them, the CLI deserializes them into
//! the same types.
//!
//! Serialized with [`to_json`]: object keys sorted at every level, byte for
//! byte what podwarden always wrote.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Node, NodeCondition, NodeStatus, NodeSystemInfo, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use crate::agent::Parts;
use crate::model;
use crate::pod::admission::Allocatable;
use crate::pod::status::StatusManager;
use crate::pod::workers::{Phase, WorkerInfo};

/// A v1 PodList (`{"apiVersion": "v1", "kind": "PodList", "metadata": {},
/// "items": [...]}`).
pub type PodList = k8s_openapi::List<Pod>;

/// What the pod list is built from.
pub struct PodSources<'a> {
    /// The pods the source wants, in the source's order.
    pub desired: &'a [Arc<Pod>],
    /// Every pod worker (the pods still terminating after their manifest
    /// went are among them).
    pub workers: &'a [WorkerInfo],
    /// Each pod's current v1 status.
    pub statuses: &'a StatusManager,
}

/// Every pod the source wants, with its status, and the static pods still
/// terminating after their manifest went (with a `deletionTimestamp`, shown
/// as Terminating) until their containers are stopped, as a v1 PodList:
/// a deleted pod is gone once nothing of it runs, not when its sandbox
/// and network are down too. `redact` replaces env values (the read-only
/// port).
pub fn pod_list(src: &PodSources, redact: bool) -> PodList {
    pod_list_of(src, redact, |_| true)
}

/// [`pod_list`] of the pods `keep` takes (looked at before anything is
/// copied: finding one pod among 110 copies one).
pub fn pod_list_of(src: &PodSources, redact: bool, keep: impl Fn(&Pod) -> bool) -> PodList {
    let wanted: HashSet<&str> = src.desired.iter().map(|p| model::uid(p)).collect();
    let going = src
        .workers
        .iter()
        .filter(|w| !wanted.contains(w.uid.as_str()) && w.phase < Phase::Terminated && !w.containers_stopped)
        .filter_map(|w| w.pod.as_ref())
        .filter(|p| model::is_static(p) && keep(p)) // not orphaned runtime pods
        .map(|p| {
            let mut pod = (**p).clone();
            pod.metadata.deletion_timestamp.get_or_insert_with(model::now_time);
            pod
        });
    let items = src
        .desired
        .iter()
        .filter(|p| keep(p))
        .map(|p| (**p).clone())
        .chain(going)
        .map(|mut pod| {
            pod.status = src.statuses.get(model::uid(&pod));
            // the API server sets qosClass when a pod is created: a pod
            // the agent has not written a status for yet shows it too
            let qos = model::qos::qos_class(&pod).as_str().to_string();
            pod.status.get_or_insert_with(Default::default).qos_class.get_or_insert(qos);
            if redact {
                redact_env(&mut pod);
            }
            pod
        })
        .collect();
    PodList { items, metadata: Default::default() }
}

/// Keep only the pods of `namespace` (all when empty).
pub fn in_namespace(mut list: PodList, namespace: &str) -> PodList {
    if !namespace.is_empty() {
        list.items.retain(|p| model::namespace(p) == namespace);
    }
    list
}

/// Replace every env value with a placeholder (the kubelet's read-only port
/// shows them; secrets end up there).
pub fn redact_env(pod: &mut Pod) {
    if let Some(spec) = pod.spec.as_mut() {
        for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
            for e in c.env.iter_mut().flatten() {
                if e.value.is_some() {
                    e.value = Some("<redacted>".into());
                }
            }
        }
    }
}

/// The manifest a pod was read from (its `podwarden.io/config.file`
/// annotation), if a manifest defines it.
pub fn manifest_path(pod: &Pod) -> Option<&str> {
    pod.metadata.annotations.as_ref()?.get(model::CONFIG_FILE_ANNOTATION).map(String::as_str)
}

/// The node report: the v1 Node plus what podwarden adds, as `/node` and
/// the API's node call return it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    pub node: Node,
    /// What the active pods request.
    pub allocated: Resources,
    pub graceful_shutdown: GracefulShutdown,
}

/// CPU, memory and pods as Kubernetes quantities (`2`, `1500m`;
/// `262144Ki`; `110`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    pub cpu: String,
    pub memory: String,
    pub pods: String,
}

/// The graceful node shutdown's state, as `podwarden node` explains it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GracefulShutdown {
    /// Configured and working.
    pub enabled: bool,
    /// `shutdownGracePeriod` (or the by-priority table) is set.
    pub configured: bool,
    /// A shutdown runs now (admission is closed).
    pub shutting_down: bool,
    pub inhibitor_lock_held: bool,
    /// Why the feature is off or not working now.
    pub problem: Option<String>,
    /// The last shutdown's start and end (RFC 3339).
    pub last_start_time: Option<String>,
    pub last_end_time: Option<String>,
}

/// Facts about the host the node report shows ([`HostInfo::read`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostInfo {
    /// `uname -r`.
    pub kernel_version: String,
    /// `uname -m`.
    pub machine: String,
    /// `PRETTY_NAME` of /etc/os-release.
    pub os_image: String,
    pub machine_id: String,
    pub boot_id: String,
}

impl HostInfo {
    /// Read from the running system (uname, /etc/os-release,
    /// /etc/machine-id, the boot ID); what cannot be read is empty.
    pub fn read() -> Self {
        let (kernel_version, machine) = crate::sys::uname().unwrap_or_default();
        let trimmed = |p: &str| std::fs::read_to_string(p).unwrap_or_default().trim().to_string();
        HostInfo {
            kernel_version,
            machine,
            os_image: os_image(),
            machine_id: trimmed("/etc/machine-id"),
            boot_id: trimmed("/proc/sys/kernel/random/boot_id"),
        }
    }
}

/// The pod list of the running agent: its desired pods, the static pods
/// still terminating, each with its status.
pub fn pods_of(parts: &Parts, redact: bool) -> PodList {
    let desired: Vec<_> = parts.agent.desired().into_iter().map(|d| d.pod).collect();
    let workers = parts.workers.snapshot();
    pod_list(&PodSources { desired: &desired, workers: &workers, statuses: &parts.statuses }, redact)
}

/// The pod `ns/name` (any namespace when `ns` is empty) as [`pods_of`]
/// shows it, without copying the others.
pub fn pod_named(parts: &Parts, ns: &str, name: &str) -> Option<Pod> {
    let desired: Vec<_> = parts.agent.desired().into_iter().map(|d| d.pod).collect();
    let workers = parts.workers.snapshot();
    let src = PodSources { desired: &desired, workers: &workers, statuses: &parts.statuses };
    let keep = |p: &Pod| model::name(p) == name && (ns.is_empty() || model::namespace(p) == ns);
    pod_list_of(&src, false, keep).items.into_iter().next()
}

/// The node report of the running agent; unhealthy when housekeeping or the
/// runtime did not answer within `healthy_within`.
pub fn node_of(parts: &Parts, healthy_within: Duration) -> NodeReport {
    let (shutdown, host) = (parts.shutdown.lock().clone(), HostInfo::read());
    node_report(NodeSources {
        node_name: &parts.node_name,
        allocatable: parts.admission.allocatable(),
        allocated: parts.agent.allocated(),
        unhealthy: parts.agent.health(healthy_within).err().map(|e| e.to_string()),
        shutting_down: parts.admission.is_shutting_down(),
        pressure: parts.admission.pressure().all(),
        shutdown: &shutdown,
        runtime_version: &parts.runtime.version(),
        host: &host,
    })
}

/// What the node report is built from.
pub struct NodeSources<'a> {
    pub node_name: &'a str,
    /// The node's capacity and what pods may use of it.
    pub allocatable: Allocatable,
    /// What the active pods request: (cpu millicores, memory bytes, pods).
    pub allocated: (i64, i64, usize),
    /// Why the agent is not healthy ([`crate::agent::manager::Agent::health`]), if
    /// it is not: the node is then not ready.
    pub unhealthy: Option<String>,
    /// A node shutdown runs (admission is closed).
    pub shutting_down: bool,
    /// The pressure conditions: whether each holds and since when.
    pub pressure: Vec<(crate::pod::admission::Pressure, bool, Option<std::time::SystemTime>)>,
    /// The graceful-shutdown state (a copy taken under its lock).
    pub shutdown: &'a crate::agent::node_shutdown::State,
    /// The container runtime's name and version.
    pub runtime_version: &'a str,
    pub host: &'a HostInfo,
}

/// The Ready condition: `(status, reason, message)`.
pub fn ready(shutting_down: bool, unhealthy: Option<String>) -> (bool, &'static str, String) {
    if shutting_down {
        return (false, "KubeletNotReady", "node is shutting down".into());
    }
    match unhealthy {
        None => (true, "KubeletReady", "podwarden is posting ready status".into()),
        Some(why) => (false, "KubeletNotReady", why),
    }
}

/// The node report of `src`.
pub fn node_report(src: NodeSources) -> NodeReport {
    let a = &src.allocatable;
    let (cpu, mem, pods) = src.allocated;
    let (ok, reason, message) = ready(src.shutting_down, src.unhealthy);
    let arch = go_arch(&src.host.machine).to_string();
    let resources = |cpu: i64, mem: i64, pods: usize| Resources {
        cpu: cpu_quantity(cpu),
        memory: memory_quantity(mem),
        pods: pods.to_string(),
    };
    let quantities = |r: Resources| -> BTreeMap<String, Quantity> {
        [("cpu", r.cpu), ("memory", r.memory), ("pods", r.pods)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), Quantity(v)))
            .collect()
    };
    let node = Node {
        metadata: ObjectMeta {
            name: Some(src.node_name.to_string()),
            labels: Some(BTreeMap::from([
                ("kubernetes.io/hostname".to_string(), src.node_name.to_string()),
                ("kubernetes.io/os".to_string(), "linux".to_string()),
                ("kubernetes.io/arch".to_string(), arch.clone()),
            ])),
            ..Default::default()
        },
        spec: None,
        status: Some(NodeStatus {
            capacity: Some(quantities(resources(a.cpu_capacity_millis, a.memory_capacity_bytes, a.pods))),
            allocatable: Some(quantities(resources(a.cpu_millis, a.memory_bytes, a.pods))),
            conditions: Some(
                std::iter::once(NodeCondition {
                    type_: "Ready".into(),
                    status: if ok { "True" } else { "False" }.into(),
                    reason: Some(reason.into()),
                    message: Some(message),
                    last_heartbeat_time: Some(model::now_time()),
                    last_transition_time: None,
                })
                .chain(src.pressure.iter().map(|(p, on, since)| {
                    let (reason, message) = p.reason_and_message(*on);
                    NodeCondition {
                        type_: p.condition().into(),
                        status: if *on { "True" } else { "False" }.into(),
                        reason: Some(reason.into()),
                        message: Some(message.into()),
                        last_heartbeat_time: Some(model::now_time()),
                        last_transition_time: since.and_then(|t| {
                            k8s_openapi::jiff::Timestamp::try_from(t)
                                .ok()
                                .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time)
                        }),
                    }
                }))
                .chain(src.shutdown.condition().map(|(status, reason, message)| NodeCondition {
                    type_: crate::agent::node_shutdown::CONDITION.into(),
                    status: status.into(),
                    reason: Some(reason.into()),
                    message: Some(message),
                    last_heartbeat_time: Some(model::now_time()),
                    last_transition_time: None,
                }))
                .collect(),
            ),
            node_info: Some(NodeSystemInfo {
                kubelet_version: concat!("podwarden-", env!("CARGO_PKG_VERSION")).into(),
                container_runtime_version: src.runtime_version.into(),
                kernel_version: src.host.kernel_version.clone(),
                os_image: src.host.os_image.clone(),
                operating_system: "linux".into(),
                architecture: arch,
                machine_id: src.host.machine_id.clone(),
                boot_id: src.host.boot_id.clone(),
                system_uuid: String::new(),
                kube_proxy_version: String::new(),
                swap: None,
            }),
            ..Default::default()
        }),
    };
    let st = src.shutdown;
    NodeReport {
        node,
        allocated: resources(cpu, mem, pods),
        graceful_shutdown: GracefulShutdown {
            enabled: st.configured && st.problem.is_none(),
            configured: st.configured,
            shutting_down: src.shutting_down,
            inhibitor_lock_held: st.lock_held,
            problem: st.problem.as_ref().map(|p| p.message.clone()),
            last_start_time: st.last_start.map(model::rfc3339),
            last_end_time: st.last_end.map(model::rfc3339),
        },
    }
}

/// `view` as JSON with its object keys sorted at every level (podwarden's
/// views always were; `serde_json`'s maps sort).
pub fn to_json<T: Serialize>(view: &T) -> Vec<u8> {
    serde_json::to_value(view).and_then(|v| serde_json::to_vec(&v)).unwrap_or_default()
}

/// The same, indented (`-o json`), with a final newline.
pub fn to_json_pretty<T: Serialize>(view: &T) -> String {
    serde_json::to_value(view).and_then(|v| serde_json::to_string_pretty(&v)).unwrap_or_default() + "\n"
}

/// The same as YAML (`-o yaml`).
pub fn to_yaml<T: Serialize>(view: &T) -> Result<String, serde_yaml_ng::Error> {
    let v = serde_json::to_value(view).map_err(<serde_yaml_ng::Error as serde::ser::Error>::custom)?;
    serde_yaml_ng::to_string(&v)
}

/// Format millicores as a Kubernetes CPU quantity (`2`, `1500m`).
pub fn cpu_quantity(millis: i64) -> String {
    if millis % 1000 == 0 { (millis / 1000).to_string() } else { format!("{millis}m") }
}

/// Format bytes as a memory quantity (`Ki` like the kubelet; plain bytes
/// when not a whole number of KiB).
pub fn memory_quantity(bytes: i64) -> String {
    if bytes != 0 && bytes % 1024 == 0 { format!("{}Ki", bytes / 1024) } else { bytes.to_string() }
}

/// A time as Kubernetes writes a v1 `Time` (`2026-01-02T03:04:05Z`).
pub fn time_text(t: &model::Time) -> String {
    serde_json::to_value(t).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// The time since `t` (a v1 `Time`), if it is in the past.
/// kubectl's short ages: `45s`, `3m20s`, `15m`, `4h5m`, `30h`, `3d4h`, `20d`, `2y100d`.
pub fn short_age(d: Duration) -> String {
    let s = d.as_secs();
    let (m, h) = (s / 60, s / 3600);
    let pair = |a: u64, au: &str, b: u64, bu: &str| if b == 0 { format!("{a}{au}") } else { format!("{a}{au}{b}{bu}") };
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        pair(m, "m", s % 60, "s")
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        pair(h, "h", m % 60, "m")
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        pair(h / 24, "d", h % 24, "h")
    } else if h < 24 * 365 * 2 {
        format!("{}d", h / 24)
    } else if h < 24 * 365 * 8 {
        pair(h / 24 / 365, "y", (h / 24) % 365, "d")
    } else {
        format!("{}y", h / 24 / 365)
    }
}

/// How long ago `t` was (`None`: in the future).
pub fn age_of(t: &model::Time) -> Option<std::time::Duration> {
    SystemTime::now().duration_since(SystemTime::from(t.0)).ok()
}

fn os_image() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=")).map(|v| v.trim().trim_matches('"').to_string())
        })
        .unwrap_or_else(|| "Linux".into())
}

fn go_arch(machine: &str) -> &str {
    match machine {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "armv7l" | "armv6l" => "arm",
        other => other,
    }
}

/// Annotation on a Secret in [`objects_of`]'s list: its values were left
/// out.
pub const REDACTED_ANNOTATION: &str = "podwarden.io/data-redacted";

/// The local ConfigMaps or Secrets in `namespace` (every namespace if
/// empty) as a v1 List, as `podwarden get configmaps|secrets` shows them
/// ([`object_value`] without `managedFields`). A Secret's values never
/// leave the daemon: each key is listed with an empty value and the object
/// carries [`REDACTED_ANNOTATION`]. The file an object comes from is the
/// `podwarden.io/config.file` annotation.
pub fn objects_of(parts: &Parts, kind: crate::model::objects::Kind, namespace: &str) -> serde_json::Value {
    let set = parts.objects.snapshot();
    let items: Vec<serde_json::Value> = set
        .values()
        .filter(|o| o.key.kind == kind && (namespace.is_empty() || o.key.namespace == namespace))
        .map(|o| {
            let mut v = object_value(o, false);
            v["metadata"]["annotations"][crate::model::CONFIG_FILE_ANNOTATION] = o.file.clone().into();
            if let Some(m) = v["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
            v
        })
        .collect();
    serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items})
}

/// The kubectl annotation that holds the last applied configuration (a
/// Secret's holds its values).
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A local ConfigMap or Secret as a v1 object: name, namespace, labels,
/// annotations, `managedFields`, the data and flags. With `reveal` a
/// Secret's values are there (base64, as stored: for the write path,
/// which patches them); without, each key has an empty value, the values
/// in the last applied configuration are emptied the same way and the
/// object carries [`REDACTED_ANNOTATION`].
pub fn object_value(o: &crate::model::objects::LocalObject, reveal: bool) -> serde_json::Value {
    use crate::model::objects::Kind;
    use serde_json::{Value, json};
    let b64 = |v: &[u8]| serde_json::to_value(k8s_openapi::ByteString(v.to_vec())).unwrap_or_default();
    let mut meta = json!({"name": o.key.name, "namespace": o.key.namespace});
    if !o.labels.is_empty() {
        meta["labels"] = json!(o.labels);
    }
    let mut annotations = o.annotations.clone();
    let secret = o.key.kind == Kind::Secret;
    if secret && !reveal {
        if let Some(text) = annotations.get_mut(LAST_APPLIED_ANNOTATION) {
            *text = redact_applied(text);
        }
        annotations.insert(REDACTED_ANNOTATION.into(), "true".into());
    }
    if !annotations.is_empty() {
        meta["annotations"] = json!(annotations);
    }
    if let Some(m) = &o.managed_fields {
        meta["managedFields"] = m.clone();
    }
    let mut v = json!({"apiVersion": "v1", "kind": o.key.kind.as_str(), "metadata": meta});
    match o.key.kind {
        Kind::ConfigMap => {
            let text = |k: &String| !o.binary_keys.contains(k);
            let data: BTreeMap<&String, String> = o
                .data
                .iter()
                .filter(|(k, _)| text(k))
                .map(|(k, v)| (k, String::from_utf8_lossy(v).into_owned()))
                .collect();
            let binary: BTreeMap<&String, Value> =
                o.data.iter().filter(|(k, _)| !text(k)).map(|(k, v)| (k, b64(v))).collect();
            if !data.is_empty() {
                v["data"] = json!(data);
            }
            if !binary.is_empty() {
                v["binaryData"] = json!(binary);
            }
        }
        Kind::Secret => {
            v["type"] = json!(o.type_.clone().unwrap_or_else(|| "Opaque".into()));
            let data: BTreeMap<&String, Value> =
                o.data.iter().map(|(k, val)| (k, if reveal { b64(val) } else { json!("") })).collect();
            if !data.is_empty() || !reveal {
                v["data"] = json!(data);
            }
        }
    }
    if o.immutable {
        v["immutable"] = true.into();
    }
    v
}

/// A Secret's last applied configuration with the values of `data` and
/// `stringData` emptied (the keys stay, so kubectl's three-way merge still
/// sees which keys were applied); anything that does not parse is emptied.
fn redact_applied(text: &str) -> String {
    let Ok(mut v) = serde_json::from_str::<serde_json::Value>(text) else { return String::new() };
    for field in ["data", "stringData"] {
        if let Some(m) = v.get_mut(field).and_then(serde_json::Value::as_object_mut) {
            for val in m.values_mut() {
                *val = "".into();
            }
        }
    }
    v.to_string()
}

/// A pod's container statuses (none before its first status).
fn container_statuses(p: &Pod) -> &[ContainerStatus] {
    p.status.as_ref().and_then(|s| s.container_statuses.as_deref()).unwrap_or_default()
}

/// A pod's containers.
fn containers(p: &Pod) -> &[Container] {
    p.spec.as_ref().map_or(&[], |s| &s.containers)
}

/// What `get pods` shows of a pod: READY (`ready`/`total`), STATUS and
/// RESTARTS, as kubectl's printPod computes them. Init containers first:
/// the first one not done decides the STATUS (`Init:1/2`,
/// `Init:CrashLoopBackOff`, `Init:Error`); sidecars count in READY. Then,
/// once initialized, the app containers: the first one (in spec order)
/// waiting or terminated with a reason decides.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSummary {
    pub ready: usize,
    pub total: usize,
    pub status: String,
    pub restarts: i64,
    /// When the newest counted restart's previous instance ended
    /// (kubectl's `5 (10s ago)`).
    pub last_restart: Option<Time>,
}

pub fn pod_summary(p: &Pod) -> PodSummary {
    let st = p.status.as_ref();
    let mut reason =
        st.and_then(|s| s.reason.clone().or_else(|| s.phase.clone())).unwrap_or_else(|| "Unknown".to_string());
    let inits = p.spec.as_ref().and_then(|s| s.init_containers.as_deref()).unwrap_or_default();
    let sidecar = |name: &str| inits.iter().any(|c| c.name == name && crate::model::is_sidecar(c));
    let total = containers(p).len() + inits.iter().filter(|c| crate::model::is_sidecar(c)).count();
    let mut ready = 0;
    let mut restarts: i64 = 0;
    let terminated_text = |t: &k8s_openapi::api::core::v1::ContainerStateTerminated| match t
        .reason
        .as_deref()
        .filter(|r| !r.is_empty())
    {
        Some(r) => r.to_string(),
        None => match t.signal.filter(|s| *s != 0) {
            Some(s) => format!("Signal:{s}"),
            None => format!("ExitCode:{}", t.exit_code),
        },
    };
    let init_statuses = st.and_then(|s| s.init_container_statuses.as_deref()).unwrap_or_default();
    let mut initializing = false;
    for (i, c) in init_statuses.iter().enumerate() {
        restarts += i64::from(c.restart_count);
        let state = c.state.as_ref();
        let terminated = state.and_then(|s| s.terminated.as_ref());
        let waiting = state.and_then(|s| s.waiting.as_ref()).and_then(|w| w.reason.as_deref()).unwrap_or("");
        if terminated.is_some_and(|t| t.exit_code == 0) {
            continue;
        }
        if sidecar(&c.name) && c.started == Some(true) {
            if c.ready {
                ready += 1;
            }
            continue;
        }
        initializing = true;
        reason = if let Some(t) = terminated {
            format!("Init:{}", terminated_text(t))
        } else if !waiting.is_empty() && waiting != "PodInitializing" {
            format!("Init:{waiting}")
        } else {
            format!("Init:{i}/{}", inits.len())
        };
        break;
    }
    let initialized = st
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Initialized" && c.status == "True"));
    if !initializing || initialized {
        // regular init containers' restarts no longer count
        restarts = init_statuses.iter().filter(|c| sidecar(&c.name)).map(|c| i64::from(c.restart_count)).sum();
        let mut running = false;
        for c in container_statuses(p).iter().rev() {
            restarts += i64::from(c.restart_count);
            let state = c.state.as_ref();
            if let Some(r) = state.and_then(|s| s.waiting.as_ref()?.reason.clone()).filter(|r| !r.is_empty()) {
                reason = r;
            } else if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
                reason = terminated_text(t);
            } else if c.ready && state.is_some_and(|s| s.running.is_some()) {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            let pod_ready = st
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    }
    if p.metadata.deletion_timestamp.is_some() {
        reason = "Terminating".into();
    }
    let counted = st
        .into_iter()
        .flat_map(|s| s.container_statuses.iter().flatten().chain(s.init_container_statuses.iter().flatten()))
        .filter(|c| c.restart_count > 0);
    let last_restart =
        counted.filter_map(|c| c.last_state.as_ref()?.terminated.as_ref()?.finished_at.clone()).max_by_key(|t| t.0);
    PodSummary { ready, total, status: reason, restarts, last_restart }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn pod(name: &str, uid: &str, source: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "default", "uid": uid,
                    "annotations": {"kubernetes.io/config.source": source, "podwarden.io/config.file": format!("/m/{name}.yaml")}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1", "env": [{"name": "TOKEN", "value": "s3cr3t"}]}]}
            }))
            .unwrap(),
        )
    }

    fn worker(p: &Arc<Pod>, phase: Phase) -> WorkerInfo {
        WorkerInfo {
            uid: model::uid(p).to_string(),
            phase,
            pod: Some(p.clone()),
            is_static: true,
            deleted: false,
            restart_requested: false,
            last_error: false,
            phase_since: Instant::now(),
            containers_stopped: false,
        }
    }

    #[test]
    fn the_pod_list_holds_desired_pods_with_status_and_leaving_static_pods_as_terminating() {
        let (a, gone, finished, orphan) =
            (pod("a", "ua", "file"), pod("gone", "ug", "file"), pod("done", "uf", "file"), pod("o", "uo", "api"));
        let stopped = pod("stopped", "us", "file");
        let statuses = StatusManager::new();
        statuses
            .set("ua", k8s_openapi::api::core::v1::PodStatus { phase: Some("Running".into()), ..Default::default() });
        let workers = [
            worker(&a, Phase::Syncing),
            worker(&gone, Phase::Terminating),
            worker(&finished, Phase::Terminated),
            worker(&orphan, Phase::Terminating),
            WorkerInfo { containers_stopped: true, ..worker(&stopped, Phase::Terminating) },
        ];
        let desired = [a.clone()];
        let src = PodSources { desired: &desired, workers: &workers, statuses: &statuses };
        let list = pod_list(&src, true);
        let names: Vec<&str> = list.items.iter().map(model::name).collect();
        assert_eq!(
            names,
            ["a", "gone"],
            "terminated pods, pods whose containers are all stopped and non-static pods are not listed"
        );
        assert_eq!(list.items[0].status.as_ref().and_then(|s| s.phase.as_deref()), Some("Running"));
        assert!(list.items[0].metadata.deletion_timestamp.is_none());
        assert!(list.items[1].metadata.deletion_timestamp.is_some(), "a leaving pod shows as Terminating");
        let env = |p: &Pod| p.spec.as_ref().unwrap().containers[0].env.as_ref().unwrap()[0].value.clone();
        assert_eq!(env(&list.items[0]).as_deref(), Some("<redacted>"));
        assert_eq!(env(&pod_list(&src, false).items[0]).as_deref(), Some("s3cr3t"));
        assert_eq!(in_namespace(pod_list(&src, false), "other").items.len(), 0);
        assert_eq!(in_namespace(pod_list(&src, false), "").items.len(), 2);
        // one pod picked before anything is copied: the same pod, status
        // and Terminating mark as in the whole list
        for (i, name) in ["a", "gone"].into_iter().enumerate() {
            let mut one = pod_list_of(&src, true, |p| model::name(p) == name).items;
            let mut want = list.items[i].clone();
            assert_eq!(one.len(), 1, "{name}");
            // "now" for a leaving pod: taken at each listing
            let when = |p: &mut Pod| p.metadata.deletion_timestamp.take().is_some();
            assert_eq!(when(&mut one[0]), when(&mut want), "{name}");
            assert_eq!(format!("{:?}", one[0]), format!("{want:?}"), "{name}");
        }
        assert!(pod_list_of(&src, false, |p| model::name(p) == "stopped").items.is_empty());
        assert_eq!(manifest_path(&list.items[0]), Some("/m/a.yaml"));
        // the JSON podwarden always wrote: keys sorted, apiVersion and kind
        // on the list and on each pod; and the CLI reads it back unchanged
        let json = String::from_utf8(to_json(&pod_list(&src, false))).unwrap();
        assert!(
            json.starts_with(r#"{"apiVersion":"v1","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"#),
            "{json}"
        );
        assert!(json.ends_with(r#""kind":"PodList","metadata":{}}"#), "{json}");
        let back: PodList = serde_json::from_str(&json).unwrap();
        assert_eq!(String::from_utf8(to_json(&back)).unwrap(), json);
    }

    #[test]
    fn the_node_report_keeps_its_json_shape() {
        let shutdown = crate::agent::node_shutdown::State {
            configured: true,
            problem: Some(crate::agent::node_shutdown::Problem { off: false, message: "no bus".into() }),
            lock_held: false,
            last_start: Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_500)),
            last_end: None,
        };
        let host = HostInfo {
            kernel_version: "6.1.0".into(),
            machine: "aarch64".into(),
            os_image: "Debian".into(),
            machine_id: "m1".into(),
            boot_id: "b1".into(),
        };
        let allocatable = Allocatable {
            cpu_millis: 1500,
            memory_bytes: 1 << 30,
            pods: 110,
            cpu_capacity_millis: 2000,
            memory_capacity_bytes: 2 << 30,
        };
        let report = node_report(NodeSources {
            node_name: "edge-1",
            allocatable,
            allocated: (250, 64 << 20, 2),
            unhealthy: Some("housekeeping has not run for 10s".into()),
            shutting_down: false,
            pressure: Vec::new(),
            shutdown: &shutdown,
            runtime_version: "containerd 2.0",
            host: &host,
        });
        let mut v: serde_json::Value = serde_json::from_slice(&to_json(&report)).unwrap();
        for i in 0..2 {
            let beat = v["node"]["status"]["conditions"][i]["lastHeartbeatTime"].take();
            assert!(beat.as_str().is_some_and(|t| t.ends_with('Z')), "{beat}");
        }
        let want = r#"{"allocated":{"cpu":"250m","memory":"65536Ki","pods":"2"},"gracefulShutdown":{"configured":true,"enabled":false,"inhibitorLockHeld":false,"lastEndTime":null,"lastStartTime":"1970-01-01T00:00:01.5Z","problem":"no bus","shuttingDown":false},"node":{"apiVersion":"v1","kind":"Node","metadata":{"labels":{"kubernetes.io/arch":"arm64","kubernetes.io/hostname":"edge-1","kubernetes.io/os":"linux"},"name":"edge-1"},"status":{"allocatable":{"cpu":"1500m","memory":"1048576Ki","pods":"110"},"capacity":{"cpu":"2","memory":"2097152Ki","pods":"110"},"conditions":[{"lastHeartbeatTime":null,"message":"housekeeping has not run for 10s","reason":"KubeletNotReady","status":"False","type":"Ready"},{"lastHeartbeatTime":null,"message":"graceful node shutdown unavailable for now: no bus; retrying every second","reason":"LogindUnavailable","status":"True","type":"GracefulNodeShutdownUnavailable"}],"nodeInfo":{"architecture":"arm64","bootID":"b1","containerRuntimeVersion":"containerd 2.0","kernelVersion":"6.1.0","kubeProxyVersion":"","kubeletVersion":"podwarden-0.1.0","machineID":"m1","operatingSystem":"linux","osImage":"Debian","systemUUID":""}}}}"#;
        assert_eq!(serde_json::to_string(&v).unwrap(), want);
        // the CLI reads it back into the same report (the heartbeat is a v1
        // Time: whole seconds on the wire)
        let back: NodeReport = serde_json::from_slice(&to_json(&report)).unwrap();
        assert_eq!(to_json(&back), to_json(&report));
        assert_eq!(back.graceful_shutdown, report.graceful_shutdown);
        assert_eq!(ready(true, None), (false, "KubeletNotReady", "node is shutting down".to_string()));
        assert_eq!(ready(false, None), (true, "KubeletReady", "podwarden is posting ready status".to_string()));
    }

    #[test]
    fn quantities() {
        assert_eq!(cpu_quantity(2000), "2");
        assert_eq!(cpu_quantity(1500), "1500m");
        assert_eq!(cpu_quantity(0), "0");
        assert_eq!(memory_quantity(256 * 1024 * 1024), "262144Ki");
        assert_eq!(memory_quantity(1000), "1000");
    }

    #[test]
    fn a_secret_is_shown_without_its_values_unless_revealed_for_a_write() {
        use crate::model::objects::{Kind, from_value};
        let applied = r#"{"apiVersion":"v1","kind":"Secret","stringData":{"token":"abc"},"data":{"p":"aHVudGVyMg=="}}"#;
        let (o, _) = from_value(
            Kind::Secret,
            "/m/s.yaml",
            serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "s", "labels": {"a": "b"}, "annotations": {LAST_APPLIED_ANNOTATION: applied},
                    "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
                "data": {"p": "aHVudGVyMg=="}, "stringData": {"token": "abc"}}),
        )
        .unwrap();
        let shown = object_value(&o, false);
        let text = shown.to_string();
        assert!(!text.contains("aHVudGVyMg==") && !text.contains("abc") && !text.contains("hunter2"), "{text}");
        assert_eq!(shown["data"], serde_json::json!({"p": "", "token": ""}));
        assert_eq!(shown["metadata"]["annotations"][REDACTED_ANNOTATION], "true");
        let last: serde_json::Value =
            serde_json::from_str(shown["metadata"]["annotations"][LAST_APPLIED_ANNOTATION].as_str().unwrap()).unwrap();
        assert_eq!(last["stringData"], serde_json::json!({"token": ""}), "the keys stay for kubectl's merge");
        assert_eq!(shown["metadata"]["managedFields"][0]["manager"], "kubectl");
        assert_eq!(shown["metadata"]["labels"]["a"], "b");
        let real = object_value(&o, true);
        assert_eq!(real["data"], serde_json::json!({"p": "aHVudGVyMg==", "token": "YWJj"}));
        assert_eq!(real["metadata"]["annotations"][LAST_APPLIED_ANNOTATION], applied);
        assert!(real["metadata"]["annotations"].get(REDACTED_ANNOTATION).is_none());
        // what is revealed is what a file holds: read back, the same object
        let (back, _) = from_value(Kind::Secret, "/m/s.yaml", real).unwrap();
        assert_eq!(back, o);
    }
}

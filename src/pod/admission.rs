//! Admission: every new pod is admitted or rejected before `sync_pod`
//! starts it, with the kubelet's reasons. A rejected pod is Failed with a
//! reason and message and never starts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::model::{self, Pod};

pub const REASON_NODE_SHUTDOWN: &str = "NodeShutdown";
/// Reason of a pod asking for an AppArmor profile on a host without it.
pub const REASON_APPARMOR: &str = "AppArmor";

/// The huge pages the machine has reserved, by resource name
/// (`hugepages-2Mi`: `nr_hugepages` × the page size, in bytes).
pub fn hugepages_allocatable() -> std::collections::BTreeMap<String, i64> {
    let mut out = std::collections::BTreeMap::new();
    for &bytes in crate::node::hugepages::page_sizes() {
        let kb = (bytes / 1024) as i64;
        let nr = std::path::Path::new(crate::node::hugepages::SYSFS).join(format!("hugepages-{kb}kB/nr_hugepages"));
        let pages: i64 =
            crate::base::fsutil::read_host_file(&nr, 64).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        let size = match kb {
            kb if kb % (1024 * 1024) == 0 => format!("{}Gi", kb / (1024 * 1024)),
            kb if kb % 1024 == 0 => format!("{}Mi", kb / 1024),
            kb => format!("{kb}Ki"),
        };
        out.insert(format!("hugepages-{size}"), pages.saturating_mul(kb * 1024));
    }
    out
}

/// Whether the kernel enforces AppArmor (the kubelet's check:
/// `/sys/module/apparmor/parameters/enabled` says `Y`).
pub fn apparmor_enabled() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled").is_ok_and(|s| s.trim() == "Y")
}
pub const MESSAGE_NODE_SHUTDOWN: &str = "Pod was rejected as the node is shutting down.";

/// What the node can give to pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocatable {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    pub pods: usize,
    /// The machine's capacity before reservations.
    pub cpu_capacity_millis: i64,
    pub memory_capacity_bytes: i64,
}

impl Allocatable {
    /// Capacity of this machine (CPUs, MemTotal) less the reservations.
    pub fn detect(max_pods: usize, reserved_cpu_millis: i64, reserved_memory_bytes: i64) -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as i64;
        let mem = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|kb| kb.parse::<i64>().ok())
            })
            .map_or(0, |kb| kb * 1024);
        Allocatable {
            cpu_millis: (cpus * 1000 - reserved_cpu_millis).max(0),
            memory_bytes: (mem - reserved_memory_bytes).max(0),
            pods: max_pods,
            cpu_capacity_millis: cpus * 1000,
            memory_capacity_bytes: mem,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
    /// What caused it, for what is decided on it later (readmission).
    pub cause: Cause,
}

/// What caused a rejection or an eviction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The node's pressure (an eviction for it, or a pod refused under
    /// it): the pod is admitted again once the node has no pressure.
    NodePressure,
    /// Anything else: the pod itself, or the node's state besides pressure.
    Other,
}

impl Rejection {
    fn new(reason: &str, message: String) -> Self {
        Rejection { reason: reason.into(), message, cause: Cause::Other }
    }
}

/// A pod's CPU (millicores) and memory (bytes) requests, as the kubelet
/// sums them ([`model::qos::pod_requests`]).
pub fn requests(pod: &Pod) -> (i64, i64) {
    model::qos::pod_requests(pod)
}

/// Host ports a pod asks for: (port, protocol, host IP).
fn host_ports(pod: &Pod) -> Vec<(i32, String, String)> {
    model::long_running(pod)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let hp = p.host_port.filter(|h| *h > 0)?;
            Some((hp, p.protocol.clone().unwrap_or_else(|| "TCP".into()), p.host_ip.clone().unwrap_or_default()))
        })
        .collect()
}

fn ips_overlap(a: &str, b: &str) -> bool {
    let wild = |s: &str| s.is_empty() || s == "0.0.0.0" || s == "::";
    wild(a) || wild(b) || a == b
}

/// A node condition the eviction manager sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pressure {
    Memory,
    Disk,
    Pid,
}

impl Pressure {
    pub const ALL: [Pressure; 3] = [Pressure::Memory, Pressure::Disk, Pressure::Pid];

    /// The condition type.
    pub fn condition(self) -> &'static str {
        match self {
            Pressure::Memory => "MemoryPressure",
            Pressure::Disk => "DiskPressure",
            Pressure::Pid => "PIDPressure",
        }
    }

    /// The kubelet's reason and message of the condition when `on` (True)
    /// or not.
    /// The node event's reason for a change of this condition
    /// (`NodeHasDiskPressure`): the condition's reason as the node says it.
    pub fn event_reason(self, on: bool) -> String {
        let (reason, _) = self.reason_and_message(on);
        format!("Node{}", reason.strip_prefix("Kubelet").unwrap_or(reason))
    }

    pub fn reason_and_message(self, on: bool) -> (&'static str, &'static str) {
        match (self, on) {
            (Pressure::Memory, true) => ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
            (Pressure::Memory, false) => ("KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            (Pressure::Disk, true) => ("KubeletHasDiskPressure", "kubelet has disk pressure"),
            (Pressure::Disk, false) => ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            (Pressure::Pid, true) => ("KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
            (Pressure::Pid, false) => ("KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        }
    }
}

/// The node's pressure conditions now, and when each last changed.
#[derive(Debug, Default)]
pub struct NodePressure {
    state: parking_lot::Mutex<std::collections::BTreeMap<Pressure, (bool, std::time::SystemTime)>>,
}

impl NodePressure {
    /// Set the conditions that hold (the others do not); returns the ones
    /// that changed, with their new value.
    pub fn set(&self, on: &[Pressure]) -> Vec<(Pressure, bool)> {
        let mut st = self.state.lock();
        let now = std::time::SystemTime::now();
        let mut changed = Vec::new();
        for p in Pressure::ALL {
            let v = on.contains(&p);
            let e = st.entry(p).or_insert((false, now));
            if e.0 != v {
                *e = (v, now);
                changed.push((p, v));
            }
        }
        changed
    }

    /// The conditions that hold.
    pub fn on(&self) -> Vec<Pressure> {
        self.state.lock().iter().filter(|(_, (v, _))| *v).map(|(p, _)| *p).collect()
    }

    /// Each condition, whether it holds and since when (`None`: never
    /// evaluated).
    pub fn all(&self) -> Vec<(Pressure, bool, Option<std::time::SystemTime>)> {
        let st = self.state.lock();
        Pressure::ALL.iter().map(|p| (*p, st.get(p).is_some_and(|e| e.0), st.get(p).map(|e| e.1))).collect()
    }
}

/// The reason of pods rejected or evicted for node pressure.
pub const REASON_EVICTED: &str = "Evicted";
/// The start of the message of a pod refused for the node's pressure.
pub const MESSAGE_NODE_CONDITION: &str = "The node had condition";

/// Pods the kubelet never evicts and always admits under pressure here:
/// priority 2000000000 and above (`system-cluster-critical`,
/// `system-node-critical`). Every podwarden pod is a static pod, which the
/// kubelet counts as critical too; podwarden does not, or nothing on the
/// node could ever be evicted.
pub fn is_critical(pod: &Pod) -> bool {
    // user classes are below 1000000000 (the config checks): only the
    // system classes and an explicit priority reach it
    model::is_critical(pod, &std::collections::BTreeMap::new())
}

/// The admission gate and the node's allocatable resources.
pub struct Admission {
    allocatable: Allocatable,
    shutting_down: AtomicBool,
    /// The node's pressure conditions (the eviction manager's).
    pressure: std::sync::Arc<NodePressure>,
    /// The Pod Security Standards level every pod from the static pod
    /// source is held to (`staticPodSecurityLevel`).
    pod_security: crate::model::pss::Level,
    /// The sysctls pods may set (the safe set, `allowedUnsafeSysctls`).
    sysctls: model::sysctl::Allowlist,
    apparmor_enabled: bool,
    /// What the node gives of resources besides CPU and memory
    /// (`ephemeral-storage`, `hugepages-<size>`), in bytes.
    other: std::collections::BTreeMap<String, i64>,
}

impl Admission {
    /// Admission for `allocatable`, reading nothing of the host: no AppArmor,
    /// the safe sysctls, no ephemeral storage or huge pages until the
    /// `with_` calls say otherwise.
    pub fn new(allocatable: Allocatable) -> Self {
        Admission {
            allocatable,
            shutting_down: AtomicBool::new(false),
            pod_security: crate::model::pss::Level::Privileged,
            sysctls: model::sysctl::Allowlist::new(&[]),
            apparmor_enabled: false,
            other: Default::default(),
            pressure: Default::default(),
        }
    }

    /// The node's pressure conditions, shared with the eviction manager.
    pub fn pressure(&self) -> std::sync::Arc<NodePressure> {
        self.pressure.clone()
    }

    /// Hold every pod to the Pod Security Standards `level`.
    pub fn with_pod_security(mut self, level: crate::model::pss::Level) -> Self {
        self.pod_security = level;
        self
    }

    /// What the node gives of `resource` (`ephemeral-storage`, a huge
    /// page size), in bytes.
    pub fn with_other(mut self, resource: &str, bytes: i64) -> Self {
        self.other.insert(resource.to_string(), bytes);
        self
    }

    /// The sysctls pods may set; the host's AppArmor support.
    pub fn with_security(mut self, sysctls: model::sysctl::Allowlist, apparmor_enabled: bool) -> Self {
        self.sysctls = sysctls;
        self.apparmor_enabled = apparmor_enabled;
        self
    }

    pub fn allocatable(&self) -> Allocatable {
        self.allocatable
    }

    /// Close (true) or reopen (false) admission for node shutdown.
    pub fn set_shutting_down(&self, v: bool) {
        self.shutting_down.store(v, Ordering::SeqCst);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Admit `pod` given the pods that are active on the node now.
    pub fn admit(&self, pod: &Pod, active: &[Arc<Pod>]) -> Result<(), Rejection> {
        if self.is_shutting_down() {
            return Err(Rejection::new(REASON_NODE_SHUTDOWN, MESSAGE_NODE_SHUTDOWN.into()));
        }
        // a property of the pod itself: judged before what the node has left
        crate::model::pss::enforce(self.pod_security, pod)
            .map_err(|v| Rejection::new(crate::model::pss::REASON, v.to_string()))?;
        // the eviction manager's: under memory pressure alone BestEffort
        // pods (that do not tolerate it) stay out, under any other all
        let on = self.pressure.on();
        if !on.is_empty() && !is_critical(pod) {
            let tolerates = pod.spec.iter().flat_map(|s| s.tolerations.iter().flatten()).any(|t| {
                t.key.as_deref().is_none_or(|k| k == "node.kubernetes.io/memory-pressure")
                    && t.effect.as_deref().is_none_or(|e| e.is_empty() || e == "NoSchedule")
                    && (t.key.is_some() || t.operator.as_deref() == Some("Exists"))
            });
            let best_effort = model::qos::qos_class(pod) == model::qos::QosClass::BestEffort;
            let memory_only = on == [Pressure::Memory];
            if !memory_only || (best_effort && !tolerates) {
                let names: Vec<&str> = on.iter().map(|p| p.condition()).collect();
                return Err(Rejection {
                    cause: Cause::NodePressure,
                    ..Rejection::new(REASON_EVICTED, format!("{MESSAGE_NODE_CONDITION}: [{}]. ", names.join(" ")))
                });
            }
        }
        self.sysctls.admit(pod).map_err(|m| Rejection::new(model::sysctl::REASON_FORBIDDEN, m.to_string()))?;
        let confined = model::all_containers(pod).any(|c| {
            crate::pod::phases::apparmor_profile(pod, c)
                .is_some_and(|p| p != crate::runtime::SecurityProfile::Unconfined)
        });
        if confined && !self.apparmor_enabled {
            return Err(Rejection::new(
                REASON_APPARMOR,
                "Cannot enforce AppArmor: AppArmor is not enabled on the host".into(),
            ));
        }
        let a = self.allocatable;
        let others: Vec<&Arc<Pod>> = active.iter().filter(|p| model::uid(p) != model::uid(pod)).collect();
        if others.len() + 1 > a.pods {
            return Err(Rejection::new(
                "OutOfpods",
                format!(
                    "Node didn't have enough resource: pods, requested: 1, used: {}, capacity: {}",
                    others.len(),
                    a.pods
                ),
            ));
        }
        let (cpu, mem) = requests(pod);
        let (used_cpu, used_mem) = others.iter().fold((0i64, 0i64), |(c, m), p| {
            let (pc, pm) = requests(p);
            (c.saturating_add(pc), m.saturating_add(pm))
        });
        if cpu > 0 && used_cpu.saturating_add(cpu) > a.cpu_millis {
            return Err(Rejection::new(
                "OutOfcpu",
                format!(
                    "Node didn't have enough resource: cpu, requested: {cpu}, used: {used_cpu}, capacity: {}",
                    a.cpu_millis
                ),
            ));
        }
        if mem > 0 && used_mem.saturating_add(mem) > a.memory_bytes {
            return Err(Rejection::new(
                "OutOfmemory",
                format!(
                    "Node didn't have enough resource: memory, requested: {mem}, used: {used_mem}, capacity: {}",
                    a.memory_bytes
                ),
            ));
        }
        // ephemeral storage and huge pages, as the kubelet's
        // noderesources fit: the allocatable less what the others request
        for res in model::qos::other_resources(pod) {
            let want = model::qos::pod_request(pod, &res);
            if want == 0 {
                continue;
            }
            let cap = self.other.get(&res).copied().unwrap_or(0);
            let used = others.iter().fold(0i64, |u, p| u.saturating_add(model::qos::pod_request(p, &res)));
            if used.saturating_add(want) > cap {
                return Err(Rejection::new(
                    &format!("OutOf{res}"),
                    format!(
                        "Node didn't have enough resource: {res}, requested: {want}, used: {used}, capacity: {cap}"
                    ),
                ));
            }
        }
        let wanted = host_ports(pod);
        for other in &others {
            for (port, proto, ip) in host_ports(other) {
                if let Some((p, pr, _)) =
                    wanted.iter().find(|(p, pr, i)| *p == port && *pr == proto && ips_overlap(i, &ip))
                {
                    // the kubelet's words (its scheduler predicate's); which
                    // pod holds the port goes to the log
                    log::info!(
                        "pod {}: host port {p}/{pr} is used by pod {}",
                        model::pod_ref(pod),
                        model::pod_ref(other)
                    );
                    return Err(Rejection::new(
                        "NodePorts",
                        "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
                            .to_string(),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pod(uid: &str, cpu: Option<&str>, mem: Option<&str>, host_port: Option<i32>) -> Arc<Pod> {
        let mut req = std::collections::BTreeMap::new();
        if let Some(c) = cpu {
            req.insert("cpu".to_string(), Quantity(c.into()));
        }
        if let Some(m) = mem {
            req.insert("memory".to_string(), Quantity(m.into()));
        }
        Arc::new(Pod {
            metadata: model::ObjectMeta { uid: Some(uid.into()), name: Some(uid.into()), ..Default::default() },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements { limits: Some(req), ..Default::default() }),
                    ports: host_port.map(|hp| {
                        vec![ContainerPort { container_port: 80, host_port: Some(hp), ..Default::default() }]
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        })
    }

    fn adm() -> Admission {
        Admission::new(Allocatable {
            cpu_millis: 1000,
            memory_bytes: 1 << 30,
            pods: 3,
            cpu_capacity_millis: 1000,
            memory_capacity_bytes: 1 << 30,
        })
    }

    #[test]
    fn ephemeral_storage_and_huge_pages_count_against_the_node() {
        let a = adm().with_other("ephemeral-storage", 10 << 30).with_other("hugepages-2Mi", 4 << 20);
        let with = |uid: &str, res: &str| {
            let mut p = (*pod(uid, None, None, None)).clone();
            let c = &mut p.spec.as_mut().unwrap().containers[0];
            let limits = c.resources.as_mut().unwrap().limits.as_mut().unwrap();
            for kv in res.split(',') {
                let (k, v) = kv.split_once('=').unwrap();
                limits.insert(k.into(), Quantity(v.into()));
            }
            Arc::new(p)
        };
        let first = with("a", "ephemeral-storage=6Gi,hugepages-2Mi=4Mi");
        assert_eq!(a.admit(&first, &[]), Ok(()));
        let r = a.admit(&with("b", "ephemeral-storage=6Gi"), std::slice::from_ref(&first)).unwrap_err();
        assert_eq!(r.reason, "OutOfephemeral-storage");
        assert_eq!(
            r.message,
            "Node didn't have enough resource: ephemeral-storage, requested: 6442450944, used: 6442450944, capacity: 10737418240"
        );
        let r = a.admit(&with("c", "hugepages-2Mi=2Mi"), std::slice::from_ref(&first)).unwrap_err();
        assert_eq!(r.reason, "OutOfhugepages-2Mi");
        // a size the node has none of
        let r = a.admit(&with("d", "hugepages-1Gi=1Gi"), &[]).unwrap_err();
        assert_eq!(r.reason, "OutOfhugepages-1Gi");
    }

    #[test]
    fn reasons_table() {
        let a = adm();
        let reason = |p: &Arc<Pod>, active: &[Arc<Pod>]| a.admit(p, active).err().map(|r| r.reason);
        assert_eq!(reason(&pod("a", Some("500m"), None, None), &[]), None);
        assert_eq!(
            reason(&pod("a", Some("600m"), None, None), &[pod("b", Some("500m"), None, None)]).as_deref(),
            Some("OutOfcpu")
        );
        assert_eq!(
            reason(&pod("a", None, Some("600Mi"), None), &[pod("b", None, Some("500Mi"), None)]).as_deref(),
            Some("OutOfmemory")
        );
        let three = [pod("b", None, None, None), pod("c", None, None, None), pod("d", None, None, None)];
        assert_eq!(reason(&pod("a", None, None, None), &three).as_deref(), Some("OutOfpods"));
        assert_eq!(
            reason(&pod("a", None, None, Some(8080)), &[pod("b", None, None, Some(8080))]).as_deref(),
            Some("NodePorts")
        );
        assert_eq!(reason(&pod("a", None, None, Some(8080)), &[pod("b", None, None, Some(8081))]), None);
        a.set_shutting_down(true);
        let r = a.admit(&pod("a", None, None, None), &[]).unwrap_err();
        assert_eq!(r.reason, REASON_NODE_SHUTDOWN);
        assert_eq!(r.message, MESSAGE_NODE_SHUTDOWN);
        a.set_shutting_down(false);
        assert!(a.admit(&pod("a", None, None, None), &[]).is_ok());
    }

    #[test]
    fn pod_security_level_rejects_with_upstreams_message() {
        let mut p = (*pod("a", None, None, Some(8080))).clone();
        p.spec.as_mut().unwrap().host_pid = Some(true);
        // default: privileged, nothing checked
        assert!(adm().admit(&p, &[]).is_ok());
        let a = adm().with_pod_security(crate::model::pss::Level::Baseline);
        let r = a.admit(&p, &[]).unwrap_err();
        assert_eq!(r.reason, "PodSecurity");
        assert_eq!(
            r.message,
            r#"violates PodSecurity "baseline:latest": host namespaces (hostPID=true), hostPort (container "c" uses hostPort 8080)"#
        );
        assert!(a.admit(&pod("b", None, None, None), &[]).is_ok());
    }

    #[test]
    fn the_pod_itself_is_not_counted_twice() {
        let a = adm();
        let p = pod("a", Some("800m"), None, None);
        assert!(a.admit(&p, std::slice::from_ref(&p)).is_ok());
    }
}

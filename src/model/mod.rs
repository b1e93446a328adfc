//! The pod model: Kubernetes v1 types from k8s-openapi plus the few derived
//! facts the rest of podwarden asks about a pod; reading and validating
//! manifests (`manifest`, the field table in `fields`, typed
//! [`field::FieldError`]s, every one found in a
//! [`field::FieldErrors`]), local ConfigMaps and Secrets (`objects`), the
//! name and key checks both make (`names`), and the pure rules derived
//! from a spec: quantities, QoS, sysctls, the downward API, the Pod
//! Security Standards (`pss`). YAML comes through the bounded parser
//! (`bounded_yaml`).
//!
//! Owns no state: everything here is a pure function of its input (and of
//! a manifest file's bytes). May use `sys` (libyaml) and `base` (bounded
//! file reads) only.

pub mod bounded_yaml;
pub mod downward;
pub mod field;
pub mod fields;
pub mod manifest;
pub mod names;
pub mod objects;
pub mod pss;
pub mod qos;
pub mod quantity;
pub mod quote;
pub mod sysctl;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod, PodCondition, PodIP, PodSpec, PodStatus,
};
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// A pod UID. Static pods get a 32-hex-digit UID derived from their manifest.
pub type Uid = String;

/// Annotation the kubelet uses for a pod's source (`file` for static pods).
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Annotation the kubelet uses for a static pod's hash (its UID).
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// Annotation naming the manifest file a pod came from (podwarden's own).
pub const CONFIG_FILE_ANNOTATION: &str = "podwarden.io/config.file";

/// Priority at or above which a pod is critical for node shutdown.
pub const CRITICAL_PRIORITY: i32 = 2_000_000_000;
/// Default termination grace period when a pod does not set one.
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

pub const PHASE_PENDING: &str = "Pending";
pub const PHASE_RUNNING: &str = "Running";
pub const PHASE_SUCCEEDED: &str = "Succeeded";
pub const PHASE_FAILED: &str = "Failed";

pub fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

pub fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or("")
}

pub fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// The kubelet's full name, `name_namespace`: static pods with the same full
/// name are one pod in different incarnations.
pub fn full_name(pod: &Pod) -> String {
    format!("{}_{}", name(pod), namespace(pod))
}

/// `namespace/name uid` for log lines about a pod.
pub fn pod_ref(pod: &Pod) -> String {
    format!("{}/{} {}", namespace(pod), name(pod), uid(pod))
}

pub fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Every pod from a manifest is static; only pods built from runtime data
/// (orphans) or a test's API pods are not.
pub fn is_static(pod: &Pod) -> bool {
    matches!(annotation(pod, CONFIG_SOURCE_ANNOTATION), Some(s) if s != "api")
}

pub fn spec(pod: &Pod) -> Option<&PodSpec> {
    pod.spec.as_ref()
}

/// The app containers (`spec.containers`).
pub fn containers(pod: &Pod) -> &[Container] {
    spec(pod).map(|s| s.containers.as_slice()).unwrap_or(&[])
}

/// The init containers (`spec.initContainers`), sidecars among them.
pub fn init_containers(pod: &Pod) -> &[Container] {
    spec(pod).and_then(|s| s.init_containers.as_deref()).unwrap_or(&[])
}

/// A sidecar: an init container with `restartPolicy: Always`, which runs
/// for the pod's life (KEP-753).
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Every container of the pod: init containers in order, then the app
/// containers. Names are unique across both lists.
pub fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    init_containers(pod).iter().chain(containers(pod))
}

/// The containers that run alongside the app containers and count for
/// readiness: the sidecars, then the app containers.
pub fn long_running(pod: &Pod) -> impl Iterator<Item = &Container> {
    init_containers(pod).iter().filter(|c| is_sidecar(c)).chain(containers(pod))
}

/// The container named `name`, init or app.
pub fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    all_containers(pod).find(|c| c.name == name)
}

/// `Always` (the default), `OnFailure` or `Never`.
pub fn restart_policy(pod: &Pod) -> &str {
    spec(pod).and_then(|s| s.restart_policy.as_deref()).unwrap_or("Always")
}

pub fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

pub fn is_terminal_phase(phase: Option<&str>) -> bool {
    matches!(phase, Some(PHASE_SUCCEEDED) | Some(PHASE_FAILED))
}

pub fn is_deleted(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

pub fn spec_grace_seconds(pod: &Pod) -> Option<i64> {
    spec(pod).and_then(|s| s.termination_grace_period_seconds)
}

/// The pod's priority: `spec.priority`, else resolved from
/// `priorityClassName` (the two system classes, then `classes`), else 0.
pub fn priority(pod: &Pod, classes: &BTreeMap<String, i32>) -> i32 {
    let Some(spec) = spec(pod) else { return 0 };
    if let Some(p) = spec.priority {
        return p;
    }
    match spec.priority_class_name.as_deref() {
        Some("system-node-critical") => 2_000_001_000,
        Some("system-cluster-critical") => 2_000_000_000,
        Some(other) => classes.get(other).copied().unwrap_or(0),
        None => 0,
    }
}

pub fn is_critical(pod: &Pod, classes: &BTreeMap<String, i32>) -> bool {
    priority(pod, classes) >= CRITICAL_PRIORITY
}

pub fn host_network(pod: &Pod) -> bool {
    spec(pod).and_then(|s| s.host_network).unwrap_or(false)
}

/// A minimal pod standing for a runtime-only pod (only runtime data known).
pub fn runtime_placeholder(uid: &str, name: &str, namespace: &str) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            uid: Some(uid.to_string()),
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        },
        spec: None,
        status: None,
    })
}

/// Now as a Kubernetes `Time`.
pub fn now_time() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// A wall-clock time as RFC 3339 (UTC, `Z`).
pub fn rfc3339(t: std::time::SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(t).map(|t| t.to_string()).unwrap_or_default()
}

/// A `Time` from Unix nanoseconds (as the CRI reports times).
pub fn time_from_unix_nanos(ns: i64) -> Option<Time> {
    if ns <= 0 {
        return None;
    }
    k8s_openapi::jiff::Timestamp::from_nanosecond(ns as i128).ok().map(Time)
}

/// 128-bit FNV-1a, hex encoded: a stable, dependency-free digest for static
/// pod UIDs (not a security boundary; UIDs only have to be deterministic).
pub fn fnv128_hex(parts: &[&[u8]]) -> String {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut h = OFFSET;
    for part in parts {
        for &b in *part {
            h ^= b as u128;
            h = h.wrapping_mul(PRIME);
        }
        // separator so ("ab","c") and ("a","bc") differ
        h ^= 0xff;
        h = h.wrapping_mul(PRIME);
    }
    format!("{h:032x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_is_stable_and_separates_parts() {
        assert_eq!(fnv128_hex(&[b"a"]), fnv128_hex(&[b"a"]));
        assert_ne!(fnv128_hex(&[b"ab", b"c"]), fnv128_hex(&[b"a", b"bc"]));
        assert_eq!(fnv128_hex(&[b""]).len(), 32);
    }

    #[test]
    fn priority_resolution() {
        let mut pod = Pod::default();
        let mut classes = BTreeMap::new();
        classes.insert("high".to_string(), 1000);
        assert_eq!(priority(&pod, &classes), 0);
        pod.spec = Some(PodSpec { priority_class_name: Some("system-node-critical".into()), ..Default::default() });
        assert_eq!(priority(&pod, &classes), 2_000_001_000);
        assert!(is_critical(&pod, &classes));
        pod.spec.as_mut().unwrap().priority_class_name = Some("high".into());
        assert_eq!(priority(&pod, &classes), 1000);
        pod.spec.as_mut().unwrap().priority = Some(7);
        assert_eq!(priority(&pod, &classes), 7);
    }
}

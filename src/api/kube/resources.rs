//! The node's objects as the Kubernetes API shows them (JSON): pods (the
//! same list as `podwarden get pods`; static pods as mirror pods), events,
//! namespaces, configmaps, secrets, this node, and `metrics.k8s.io`
//! metrics; and what the watch hub collects ([`collect`]).

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::agent::Parts;
use crate::api::view;
use crate::model;

use super::watch::{Item, Kind};

/// The annotation a pod created through the Kubernetes API carries (in
/// its manifest, value [`API_CREATED`]): without it a pod is the node's
/// static pod (a mirror pod to the API, not deletable through it).
pub const CREATED_BY_ANNOTATION: &str = "podwarden.io/created-by";
pub const API_CREATED: &str = "kubernetes-api";
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The Kubernetes version podwarden reports (see `/version`).
pub const KUBE_MINOR: u32 = 33;

/// `v1.33.0-podwarden.<version>`.
pub fn git_version() -> String {
    format!("v1.{KUBE_MINOR}.0-podwarden.{}", env!("CARGO_PKG_VERSION"))
}

/// A pod was made through the Kubernetes API (else: a static pod).
pub fn is_api_pod(pod: &Value) -> bool {
    pod.pointer(&format!("/metadata/annotations/{}", CREATED_BY_ANNOTATION.replace('/', "~1"))).and_then(Value::as_str)
        == Some(API_CREATED)
}

/// A pod as the API shows it: `creationTimestamp` (its start when the
/// manifest has none), static pods with the mirror annotations.
pub fn pod_json(pod: &model::Pod) -> Value {
    let mut v = serde_json::to_value(pod).unwrap_or_else(|_| json!({}));
    v["apiVersion"] = json!("v1");
    v["kind"] = json!("Pod");
    if v.pointer("/metadata/creationTimestamp").is_none_or(Value::is_null)
        && let Some(t) = v.pointer("/status/startTime").cloned()
    {
        v["metadata"]["creationTimestamp"] = t;
    }
    if !is_api_pod(&v) {
        let uid = model::uid(pod).to_string();
        let ann = v["metadata"].as_object_mut().map(|m| m.entry("annotations").or_insert_with(|| json!({})));
        if let Some(Value::Object(a)) = ann {
            a.insert(MIRROR_ANNOTATION.into(), json!(uid));
        }
    }
    v
}

fn rfc3339_secs(secs: f64) -> String {
    model::rfc3339(std::time::UNIX_EPOCH + Duration::from_secs_f64(secs.max(0.0)))
}

/// The events held, as v1 Events (named `<object>.<hash>`).
pub fn events(parts: &Parts) -> Vec<Value> {
    let mut names = BTreeSet::new();
    parts
        .events
        .list()
        .into_iter()
        .map(|e| {
            let o = &e.involved_object;
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (&o.kind, &o.namespace, &o.name, &o.uid, &o.field_path, &e.reason, &e.message).hash(&mut h);
            let mut name = format!("{}.{:016x}", o.name, h.finish());
            let mut i = 2;
            while !names.insert(name.clone()) {
                name = format!("{}.{:016x}-{i}", o.name, h.finish());
                i += 1;
            }
            let ns = if o.namespace.is_empty() { "default" } else { o.namespace.as_str() };
            let t = rfc3339_secs(e.timestamp);
            json!({
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": ns, "creationTimestamp": t},
                "involvedObject": {
                    "apiVersion": "v1", "kind": o.kind, "namespace": if o.namespace.is_empty() { Value::Null } else { json!(o.namespace) },
                    "name": o.name, "uid": o.uid, "fieldPath": if o.field_path.is_empty() { Value::Null } else { json!(o.field_path) },
                },
                "reason": e.reason,
                "message": e.message,
                "type": format!("{:?}", e.event_type),
                "count": e.count,
                "firstTimestamp": t,
                "lastTimestamp": t,
                "source": {"component": "kubelet", "host": parts.node_name},
                "reportingComponent": "kubelet",
                "reportingInstance": parts.node_name,
            })
        })
        .collect()
}

/// The local ConfigMaps or Secrets as v1 objects (`view::object_value`:
/// a Secret's values left out), with `managedFields` and the file each
/// comes from (`podwarden.io/config.file`).
pub fn objects(parts: &Parts, kind: model::objects::Kind) -> Vec<Value> {
    parts.objects.snapshot().values().filter(|o| o.key.kind == kind).map(|o| object_json(o)).collect()
}

/// One local object as [`objects`] shows it.
pub fn object_json(o: &model::objects::LocalObject) -> Value {
    let mut v = view::object_value(o, false);
    v["metadata"]["annotations"][model::CONFIG_FILE_ANNOTATION] = json!(o.file);
    v
}

/// The namespaces in use (pods, objects) and `default`.
pub fn namespaces(pods: &[Value], objects: &[Value]) -> Vec<Value> {
    let mut names: BTreeSet<String> = BTreeSet::from(["default".to_string()]);
    for o in pods.iter().chain(objects) {
        if let Some(ns) = o.pointer("/metadata/namespace").and_then(Value::as_str) {
            names.insert(ns.to_string());
        }
    }
    names
        .into_iter()
        .map(|n| {
            json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n}},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
        })
        .collect()
}

fn key(v: &Value) -> String {
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    format!("{}/{}", s("/metadata/namespace"), s("/metadata/name"))
}

/// Everything the watch hub follows, now.
pub fn collect(parts: &Parts) -> Vec<Item> {
    let pods: Vec<Value> = view::pods_of(parts, false).items.iter().map(pod_json).collect();
    let cms = objects(parts, model::objects::Kind::ConfigMap);
    let secrets = objects(parts, model::objects::Kind::Secret);
    let mut all: Vec<Value> = cms.clone();
    all.extend(secrets.iter().cloned());
    let ns = namespaces(&pods, &all);
    let mut out = Vec::new();
    for (kind, list) in [
        (Kind::Pods, pods),
        (Kind::Events, events(parts)),
        (Kind::ConfigMaps, cms),
        (Kind::Secrets, secrets),
        (Kind::Namespaces, ns),
    ] {
        out.extend(list.into_iter().map(|v| (kind, key(&v), v)));
    }
    out
}

/// This node as a v1 Node: the node report's, with its addresses, the
/// kubelet version podwarden reports and its images.
pub fn node(parts: &Parts, healthy_within: Duration) -> Value {
    let report = view::node_of(parts, healthy_within);
    let mut v = serde_json::to_value(&report.node).unwrap_or_else(|_| json!({}));
    v["apiVersion"] = json!("v1");
    v["kind"] = json!("Node");
    let mut addresses = Vec::new();
    if let Some(ip) = crate::sys::first_ipv4_address() {
        addresses.push(json!({"type": "InternalIP", "address": ip.to_string()}));
    }
    addresses.push(json!({"type": "Hostname", "address": parts.node_name}));
    v["status"]["addresses"] = json!(addresses);
    v["status"]["nodeInfo"]["kubeletVersion"] = json!(git_version());
    v["status"]["nodeInfo"]["kubeProxyVersion"] = json!("");
    if v.pointer("/metadata/creationTimestamp").is_none_or(Value::is_null) {
        v["metadata"]["creationTimestamp"] = json!(model::rfc3339(started()));
    }
    let images = parts
        .runtime
        .list_images(&crate::runtime::CallCtx::background(Duration::from_secs(2)))
        .unwrap_or_default()
        .into_iter()
        .take(50)
        .map(|i| {
            let mut names = i.digests.clone();
            names.extend(i.tags.iter().cloned());
            json!({"names": names, "sizeBytes": i.size})
        })
        .collect::<Vec<_>>();
    v["status"]["images"] = json!(images);
    v
}

/// When this process started (the node object's creation time).
fn started() -> std::time::SystemTime {
    static T: std::sync::OnceLock<std::time::SystemTime> = std::sync::OnceLock::new();
    *T.get_or_init(std::time::SystemTime::now)
}

fn cpu_text(nano: Option<u64>) -> String {
    format!("{}n", nano.unwrap_or(0))
}

fn mem_text(bytes: u64) -> String {
    format!("{}Ki", bytes / 1024)
}

/// `metrics.k8s.io/v1beta1` PodMetrics of every pod with stats (`None`:
/// no snapshot yet).
pub fn pod_metrics(parts: &Parts) -> Option<Vec<Value>> {
    let snap = parts.stats.last()?;
    let t = model::rfc3339(snap.time);
    Some(
        snap.pods
            .iter()
            .map(|p| {
                let containers: Vec<Value> = p
                    .containers
                    .iter()
                    .map(|c| {
                        json!({"name": c.name, "usage": {"cpu": cpu_text(c.cpu.usage_nano_cores),
                            "memory": mem_text(c.memory.working_set_bytes)}})
                    })
                    .collect();
                json!({"kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
                    "metadata": {"name": p.name, "namespace": p.namespace, "creationTimestamp": t},
                    "timestamp": t, "window": "10s", "containers": containers})
            })
            .collect(),
    )
}

/// `metrics.k8s.io/v1beta1` NodeMetrics of this node.
pub fn node_metrics(parts: &Parts) -> Option<Value> {
    let snap: Arc<crate::node::stats::Snapshot> = parts.stats.last()?;
    let t = model::rfc3339(snap.time);
    Some(json!({"kind": "NodeMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": {"name": parts.node_name, "creationTimestamp": t,
            "labels": {"kubernetes.io/hostname": parts.node_name}},
        "timestamp": t, "window": "10s",
        "usage": {"cpu": cpu_text(snap.node.cpu.usage_nano_cores), "memory": mem_text(snap.node.memory.working_set_bytes)}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_pods_are_mirror_pods_and_api_pods_are_not() {
        let p: model::Pod =
            serde_json::from_value(json!({"metadata": {"name": "a", "namespace": "default", "uid": "u1"},
            "status": {"startTime": "2026-01-01T00:00:00Z"}}))
            .unwrap();
        let v = pod_json(&p);
        assert_eq!(v["metadata"]["annotations"]["kubernetes.io/config.mirror"], "u1");
        assert_eq!(v["metadata"]["creationTimestamp"], "2026-01-01T00:00:00Z");
        assert!(!is_api_pod(&v));
        let p: model::Pod = serde_json::from_value(json!({"metadata": {"name": "a", "uid": "u1",
            "annotations": {"podwarden.io/created-by": "kubernetes-api"}}}))
        .unwrap();
        let v = pod_json(&p);
        assert!(is_api_pod(&v));
        assert!(v["metadata"]["annotations"].get("kubernetes.io/config.mirror").is_none());
    }

    #[test]
    fn namespaces_in_use_and_default() {
        let pods = vec![json!({"metadata": {"namespace": "web"}})];
        let objs = vec![json!({"metadata": {"namespace": "db"}})];
        let names: Vec<String> =
            namespaces(&pods, &objs).iter().map(|n| n["metadata"]["name"].as_str().unwrap().to_string()).collect();
        assert_eq!(names, ["db", "default", "web"]);
    }
}

//! The node's objects as the Kubernetes API shows them (JSON): pods (the
//! same list as `podwarden get pods`; static pods as mirror pods), events,
//! namespaces, configmaps, secrets, this node, and `metrics.k8s.io`
//! metrics; and what the watch hub collects ([`collect`]).

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::agent::Parts;
use crate::api::view;
use crate::model;

use crate::pod::workers::Phase;

use super::watch::{Delta, Kind, Tracker};

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

/// The events held, each with its v1 name (`<object>.<hash>`, made unique
/// in the order held).
fn named_events(parts: &Parts) -> Vec<(String, crate::telemetry::events::Event)> {
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
            (name, e)
        })
        .collect()
}

fn event_namespace(e: &crate::telemetry::events::Event) -> &str {
    let ns = e.involved_object.namespace.as_str();
    if ns.is_empty() { "default" } else { ns }
}

/// One event as a v1 Event named `name`.
fn event_json(parts: &Parts, name: &str, e: &crate::telemetry::events::Event) -> Value {
    let o = &e.involved_object;
    let t = rfc3339_secs(e.timestamp);
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": event_namespace(e), "creationTimestamp": t},
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
}

/// What one event's JSON is made of, hashed (its name aside).
fn event_fingerprint(e: &crate::telemetry::events::Event) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let o = &e.involved_object;
    (&o.kind, &o.namespace, &o.name, &o.uid, &o.field_path, &e.reason, &e.message).hash(&mut h);
    (format!("{:?}", e.event_type), e.count, e.timestamp.to_bits()).hash(&mut h);
    h.finish()
}

/// The events held, as v1 Events (named `<object>.<hash>`).
pub fn events(parts: &Parts) -> Vec<Value> {
    named_events(parts).iter().map(|(name, e)| event_json(parts, name, e)).collect()
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
    names.into_iter().map(|n| namespace_json(&n)).collect()
}

fn namespace_json(n: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n}},
        "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
}

fn key(v: &Value) -> String {
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    format!("{}/{}", s("/metadata/namespace"), s("/metadata/name"))
}

/// What a pod's object is made of: its manifest (the same `Arc` while
/// the source does not change it), its status' version, and whether it is
/// terminating after its manifest went.
struct PodSource {
    pod: Arc<model::Pod>,
    status: Option<u64>,
    going: bool,
}

impl PartialEq for PodSource {
    fn eq(&self, o: &Self) -> bool {
        self.status == o.status && self.going == o.going && (Arc::ptr_eq(&self.pod, &o.pod) || *self.pod == *o.pod)
    }
}

/// A pod as the API shows it, with its status now (as
/// [`view::pod_list`] makes it).
fn pod_object(pod: &model::Pod, going: bool, statuses: &crate::pod::status::StatusManager) -> Value {
    let mut pod = pod.clone();
    if going {
        pod.metadata.deletion_timestamp.get_or_insert_with(model::now_time);
    }
    pod.status = statuses.get(model::uid(&pod));
    // the API server sets qosClass when a pod is created
    let qos = model::qos::qos_class(&pod).as_str().to_string();
    pod.status.get_or_insert_with(Default::default).qos_class.get_or_insert(qos);
    pod_json(&pod)
}

fn pod_key(pod: &model::Pod) -> String {
    format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or(""), pod.metadata.name.as_deref().unwrap_or(""))
}

/// What the watch hub collects from: the pods (the same list as
/// [`view::pods_of`]), events, ConfigMaps, Secrets and namespaces, each
/// object rebuilt only when its source changed: a pod when its manifest or
/// its status' version changes, the events when the recorder's generation
/// changes (then only the events whose content changed), the ConfigMaps
/// and Secrets when the object store installs a new set.
pub struct Collector {
    parts: Parts,
    pods: Tracker<PodSource>,
    events: Tracker<u64>,
    events_seen: Option<u64>,
    objects_seen: Option<Arc<model::objects::ObjectSet>>,
    configmaps: Tracker<Value>,
    secrets: Tracker<Value>,
    namespaces: Tracker<()>,
}

impl Collector {
    pub fn new(parts: Parts) -> Self {
        Collector {
            parts,
            pods: Tracker::new(Kind::Pods),
            events: Tracker::new(Kind::Events),
            events_seen: None,
            objects_seen: None,
            configmaps: Tracker::new(Kind::ConfigMaps),
            secrets: Tracker::new(Kind::Secrets),
            namespaces: Tracker::new(Kind::Namespaces),
        }
    }

    /// Objects built so far (all kinds).
    pub fn built(&self) -> u64 {
        self.pods.built() + self.events.built() + self.configmaps.built() + self.secrets.built()
    }

    /// What changed since the last call (the first: everything).
    pub fn delta(&mut self) -> Delta {
        let mut out = Delta::default();
        let parts = &self.parts;
        // pods: the desired ones, then those terminating after their
        // manifest went (a desired pod's name wins)
        let desired: Vec<Arc<model::Pod>> = parts.agent.desired().into_iter().map(|d| d.pod).collect();
        let wanted: std::collections::HashSet<&str> = desired.iter().map(|p| model::uid(p)).collect();
        let workers = parts.workers.snapshot();
        let going = workers
            .iter()
            .filter(|w| !wanted.contains(w.uid.as_str()) && w.phase < Phase::Terminated && !w.containers_stopped)
            .filter_map(|w| w.pod.clone())
            .filter(|p| model::is_static(p));
        // (every version read before any pod is built: a status written
        // meanwhile is seen again next time)
        let now: Vec<(String, PodSource, (Arc<model::Pod>, bool))> = desired
            .iter()
            .map(|p| (p.clone(), false))
            .chain(going.map(|p| (p, true)))
            .map(|(pod, going)| {
                let status = parts.statuses.version(model::uid(&pod));
                (pod_key(&pod), PodSource { pod: pod.clone(), status, going }, (pod, going))
            })
            .collect();
        let statuses = &parts.statuses;
        self.pods.update(now, |(pod, going)| pod_object(&pod, going, statuses), &mut out);
        let mut namespaces_changed = !out.is_empty();

        let generation = parts.events.generation();
        if self.events_seen != Some(generation) {
            let now = named_events(parts)
                .into_iter()
                .map(|(name, e)| (format!("{}/{name}", event_namespace(&e)), event_fingerprint(&e), (name, e)));
            self.events.update(now, |(name, e)| event_json(parts, &name, &e), &mut out);
            self.events_seen = Some(generation);
        }

        let set = parts.objects.snapshot();
        if self.objects_seen.as_ref().is_none_or(|s| !Arc::ptr_eq(s, &set)) {
            let before = out.put.len() + out.gone.len();
            for (kind, tracker) in [
                (model::objects::Kind::ConfigMap, &mut self.configmaps),
                (model::objects::Kind::Secret, &mut self.secrets),
            ] {
                let now = objects(parts, kind).into_iter().map(|v| (key(&v), v.clone(), v));
                tracker.update(now, |v| v, &mut out);
            }
            namespaces_changed |= out.put.len() + out.gone.len() != before;
            self.objects_seen = Some(set);
        }

        if namespaces_changed {
            let in_use: BTreeSet<String> = self
                .pods
                .keys()
                .chain(self.configmaps.keys())
                .chain(self.secrets.keys())
                .filter_map(|k| k.split_once('/').map(|(ns, _)| ns))
                .filter(|ns| !ns.is_empty())
                .chain(["default"])
                .map(str::to_string)
                .collect();
            let now = in_use.into_iter().map(|n| (format!("/{n}"), (), n));
            self.namespaces.update(now, |n| namespace_json(&n), &mut out);
        }
        out
    }
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
    // the kubelet's order, largest first, 50 at most; the runtime lists in
    // no fixed order, and a Node whose images reorder would be patched for
    // nothing
    let mut images = parts
        .runtime
        .list_images(&crate::runtime::CallCtx::background(Duration::from_secs(2)))
        .unwrap_or_default()
        .into_iter()
        .map(|i| {
            let (mut digests, mut tags) = (i.digests, i.tags);
            digests.sort();
            tags.sort();
            digests.extend(tags);
            (i.size, digests)
        })
        .collect::<Vec<_>>();
    images.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let images: Vec<Value> =
        images.into_iter().take(50).map(|(size, names)| json!({"names": names, "sizeBytes": size})).collect();
    v["status"]["images"] = json!(images);
    v
}

/// When the agent started (the Node object's creation time): this
/// process's start as the kernel recorded it, so the same whenever the
/// Node is first asked for (read once; if `/proc` cannot tell, the first
/// call's time).
fn started() -> SystemTime {
    static T: std::sync::OnceLock<SystemTime> = std::sync::OnceLock::new();
    *T.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let boot = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        process_start(&stat, &boot, crate::sys::clock_ticks_per_second()).unwrap_or_else(SystemTime::now)
    })
}

/// A process's start from its `/proc/<pid>/stat` (`starttime`, field 22:
/// clock ticks since boot) and `/proc/stat` (`btime`: the boot, seconds
/// since the epoch).
fn process_start(stat: &str, proc_stat: &str, ticks_per_second: i64) -> Option<SystemTime> {
    // the command name (field 2) is in parentheses and may hold spaces
    let after_name = &stat[stat.rfind(')')? + 1..];
    let ticks: u64 = after_name.split_whitespace().nth(19)?.parse().ok()?;
    let boot: u64 = proc_stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    let per_second = u64::try_from(ticks_per_second).ok().filter(|t| *t > 0)?;
    let since_boot = Duration::from_secs(ticks / per_second)
        + Duration::from_nanos((ticks % per_second) * 1_000_000_000 / per_second);
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(boot) + since_boot)
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
    fn the_node_was_created_when_the_process_started() {
        // field 22 after a command name with a space and a parenthesis
        let stat = "4242 (pod warden) S 1 4242 4242 0 -1 4194560 10 0 0 0 3 4 0 0 20 0 9 0 250 1000 200";
        let boot = "cpu  1 2 3\nbtime 1767225600\nprocesses 9\n";
        let t = process_start(stat, boot, 100).unwrap();
        assert_eq!(t, SystemTime::UNIX_EPOCH + Duration::from_millis(1_767_225_600_000 + 2_500));
        assert_eq!(process_start("4242 (x) S 1", boot, 100), None);
        assert_eq!(process_start(stat, "cpu 1\n", 100), None);
        // this process: before the test ran, the same at every call
        let first = started();
        assert!(first <= SystemTime::now());
        assert!(SystemTime::now().duration_since(first).unwrap() < Duration::from_secs(24 * 3600));
        let own = process_start(
            &std::fs::read_to_string("/proc/self/stat").unwrap(),
            &std::fs::read_to_string("/proc/stat").unwrap(),
            crate::sys::clock_ticks_per_second(),
        )
        .unwrap();
        // the boot time is whole seconds and follows clock adjustments
        let apart = own.duration_since(first).or_else(|e| Ok::<_, ()>(e.duration())).unwrap();
        assert!(apart <= Duration::from_secs(1), "{own:?} {first:?}");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(started(), first);
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

//! `meta.k8s.io/v1` Tables as the API server prints its resources for
//! `kubectl get`: the same columns (priority 1 for `-o wide`) and cells,
//! each row with its object as `PartialObjectMetadata`. A pod's READY,
//! STATUS and RESTARTS are [`view::pod_summary`]'s (the CLI's too).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use crate::api::view;

/// A column: (name, type, priority, description).
type Col = (&'static str, &'static str, u8, &'static str);

const POD_COLUMNS: &[Col] = &[
    ("Name", "string", 0, "Name must be unique within a namespace."),
    ("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
    ("Status", "string", 0, "The aggregate status of the containers in this pod."),
    (
        "Restarts",
        "string",
        0,
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    ("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was created."),
    (
        "IP",
        "string",
        1,
        "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
    ),
    ("Node", "string", 1, "NodeName indicates in which node this pod is scheduled."),
    ("Nominated Node", "string", 1, "nominatedNodeName is set only when this pod preempts other pods on the node."),
    ("Readiness Gates", "string", 1, "If specified, all readiness gates will be evaluated for pod readiness."),
];

const EVENT_COLUMNS: &[Col] = &[
    ("Last Seen", "string", 0, "Time when this Event was last observed."),
    ("Type", "string", 0, "Type of this event (Normal, Warning), new types could be added in the future."),
    (
        "Reason",
        "string",
        0,
        "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
    ),
    ("Object", "string", 0, "The object that this event is about."),
    ("Subobject", "string", 1, "The subobject that this event is about."),
    ("Source", "string", 1, "The component reporting this event."),
    ("Message", "string", 0, "A human-readable description of the status of this operation."),
    ("First Seen", "string", 1, "The time at which the event was first recorded."),
    ("Count", "string", 1, "The number of times this event has occurred."),
    ("Name", "string", 1, "Name must be unique within a namespace."),
];

const NODE_COLUMNS: &[Col] = &[
    ("Name", "string", 0, "Name must be unique within a namespace."),
    ("Status", "string", 0, "The status of the node"),
    ("Roles", "string", 0, "The roles of the node"),
    ("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was created."),
    ("Version", "string", 0, "Kubelet Version reported by the node."),
    ("Internal-IP", "string", 1, "List of addresses reachable to the node."),
    ("External-IP", "string", 1, "List of addresses reachable to the node."),
    ("OS-Image", "string", 1, "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
    ("Kernel-Version", "string", 1, "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
    (
        "Container-Runtime",
        "string",
        1,
        "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
    ),
];

const NAMESPACE_COLUMNS: &[Col] = &[
    ("Name", "string", 0, "Name must be unique within a namespace."),
    ("Status", "string", 0, "The status of the namespace"),
    ("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was created."),
];

const CONFIGMAP_COLUMNS: &[Col] = &[
    ("Name", "string", 0, "Name must be unique within a namespace."),
    ("Data", "string", 0, "Data contains the configuration data."),
    ("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was created."),
];

const SECRET_COLUMNS: &[Col] = &[
    ("Name", "string", 0, "Name must be unique within a namespace."),
    ("Type", "string", 0, "Used to facilitate programmatic handling of secret data."),
    ("Data", "string", 0, "Data contains the secret data."),
    ("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was created."),
];

const DEFAULT_COLUMNS: &[Col] = &[
    ("Name", "string", 0, "Name must be unique within a namespace."),
    ("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was created."),
];

/// The resources a Table is made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Printer {
    Pods,
    Events,
    Nodes,
    Namespaces,
    ConfigMaps,
    Secrets,
    Other,
}

fn columns(p: Printer) -> &'static [Col] {
    match p {
        Printer::Pods => POD_COLUMNS,
        Printer::Events => EVENT_COLUMNS,
        Printer::Nodes => NODE_COLUMNS,
        Printer::Namespaces => NAMESPACE_COLUMNS,
        Printer::ConfigMaps => CONFIGMAP_COLUMNS,
        Printer::Secrets => SECRET_COLUMNS,
        Printer::Other => DEFAULT_COLUMNS,
    }
}

fn column_definitions(p: Printer) -> Value {
    columns(p)
        .iter()
        .map(|(name, ty, priority, description)| {
            let format = if *name == "Name" { "name" } else { "" };
            json!({"name": name, "type": ty, "format": format, "description": description, "priority": priority})
        })
        .collect()
}

/// The string at `ptr` (a JSON pointer of plain keys: no `~` escapes),
/// or "". Walked key by key: `Value::pointer` unescapes each key into a
/// new string, which a Table of 110 pods paid some 2,000 times.
fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    at(v, ptr).and_then(Value::as_str).unwrap_or("")
}

/// The value at `ptr`, a JSON pointer of plain keys (no `~` escapes).
fn at<'a>(v: &'a Value, ptr: &str) -> Option<&'a Value> {
    ptr.split('/').skip(1).try_fold(v, |v, k| v.get(k))
}

fn or_none(x: &str) -> String {
    if x.is_empty() { "<none>".into() } else { x.to_string() }
}

/// An RFC 3339 time (None: unset or not a time).
fn time_of(t: &str) -> Option<Time> {
    t.parse::<k8s_openapi::jiff::Timestamp>().ok().map(Time)
}

/// kubectl's age of a time (`<unknown>` when unset).
fn age_of_time(t: Option<&Time>) -> String {
    t.and_then(view::age_of).map_or_else(|| "<unknown>".into(), view::short_age)
}

/// kubectl's age of an RFC 3339 time (`<unknown>` when unset).
pub fn age_text(t: &str) -> String {
    age_of_time(time_of(t).as_ref())
}

/// A cell as a row keeps it between Tables: a cell that shows how long
/// ago something was is rendered when a Table is made, the others once.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Text(Box<str>),
    Int(i64),
    /// The age of a time (`<unknown>` when unset).
    Age(Option<Time>),
    /// A pod's restarts, and the time of the last where it counts
    /// (`3 (5m ago)`).
    Restarts(i64, Option<Time>),
}

impl Cell {
    fn text(s: impl Into<Box<str>>) -> Cell {
        Cell::Text(s.into())
    }

    fn age(t: &str) -> Cell {
        Cell::Age(time_of(t))
    }

    /// The cell as a Table shows it now.
    pub fn value(&self) -> Value {
        match self {
            Cell::Text(s) => Value::from(&**s),
            Cell::Int(n) => Value::from(*n),
            Cell::Age(t) => Value::from(age_of_time(t.as_ref())),
            Cell::Restarts(n, Some(t)) if *n > 0 => {
                Value::from(format!("{n} ({} ago)", view::age_of(t).map_or_else(|| "0s".into(), view::short_age)))
            }
            Cell::Restarts(n, _) => Value::from(n.to_string()),
        }
    }
}

/// Of a pod's JSON, what its cells are made of (read in place, without a
/// copy): the deletion time, the containers' names and restart policies,
/// the readiness gates and the status.
fn summary_pod(obj: &Value) -> Result<Pod, serde_json::Error> {
    use k8s_openapi::api::core::v1::{Container, PodReadinessGate, PodSpec};
    use serde::Deserialize;
    let containers = |p: &str| -> Vec<Container> {
        at(obj, p)
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .map(|c| Container {
                        name: s(c, "/name").to_string(),
                        restart_policy: c.get("restartPolicy").and_then(Value::as_str).map(str::to_string),
                        ..Default::default()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut pod = Pod::default();
    if let Some(t) = at(obj, "/metadata/deletionTimestamp").filter(|t| !t.is_null()) {
        pod.metadata.deletion_timestamp = Some(Deserialize::deserialize(t)?);
    }
    if obj.get("spec").is_some_and(|v| !v.is_null()) {
        let inits = containers("/spec/initContainers");
        let gates = match at(obj, "/spec/readinessGates").filter(|g| !g.is_null()) {
            Some(g) => Some(Vec::<PodReadinessGate>::deserialize(g)?),
            None => None,
        };
        pod.spec = Some(PodSpec {
            containers: containers("/spec/containers"),
            init_containers: at(obj, "/spec/initContainers").filter(|v| !v.is_null()).map(|_| inits),
            readiness_gates: gates,
            ..Default::default()
        });
    }
    if let Some(st) = obj.get("status").filter(|v| !v.is_null()) {
        pod.status = Some(summary_status(st)?);
    }
    Ok(pod)
}

/// Of a pod's status, what [`view::pod_summary`] reads: the reason and
/// phase, the conditions' types and statuses, each container's name,
/// restart count, readiness, state and last termination time. Nothing
/// else is copied or parsed (images, IDs, messages, the other times).
fn summary_status(st: &Value) -> Result<k8s_openapi::api::core::v1::PodStatus, serde_json::Error> {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
        PodCondition, PodStatus,
    };
    use serde::Deserialize;
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let int = |v: &Value, k: &str| v.get(k).and_then(Value::as_i64).unwrap_or(0) as i32;
    let state = |v: Option<&Value>, with_time: bool| -> Result<Option<ContainerState>, serde_json::Error> {
        let Some(v) = v.filter(|v| !v.is_null()) else { return Ok(None) };
        let terminated = match v.get("terminated").filter(|t| !t.is_null()) {
            Some(t) => Some(ContainerStateTerminated {
                exit_code: int(t, "exitCode"),
                signal: t.get("signal").and_then(Value::as_i64).map(|s| s as i32),
                reason: text(t, "reason"),
                finished_at: match t.get("finishedAt").filter(|f| with_time && !f.is_null()) {
                    Some(f) => Some(Deserialize::deserialize(f)?),
                    None => None,
                },
                ..Default::default()
            }),
            None => None,
        };
        Ok(Some(ContainerState {
            running: v.get("running").filter(|r| !r.is_null()).map(|_| ContainerStateRunning::default()),
            terminated,
            waiting: v
                .get("waiting")
                .filter(|w| !w.is_null())
                .map(|w| ContainerStateWaiting { reason: text(w, "reason"), message: None }),
        }))
    };
    let statuses = |k: &str| -> Result<Option<Vec<ContainerStatus>>, serde_json::Error> {
        let Some(list) = st.get(k).and_then(Value::as_array) else { return Ok(None) };
        list.iter()
            .map(|c| {
                let restart_count = int(c, "restartCount");
                Ok(ContainerStatus {
                    name: text(c, "name").unwrap_or_default(),
                    restart_count,
                    ready: c.get("ready").and_then(Value::as_bool).unwrap_or(false),
                    started: c.get("started").and_then(Value::as_bool),
                    state: state(c.get("state"), false)?,
                    // the time of the last restart, only where one counts
                    last_state: state(c.get("lastState"), restart_count > 0)?,
                    ..Default::default()
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    };
    Ok(PodStatus {
        reason: text(st, "reason"),
        phase: text(st, "phase"),
        conditions: st.get("conditions").and_then(Value::as_array).map(|cs| {
            cs.iter()
                .map(|c| PodCondition {
                    type_: text(c, "type").unwrap_or_default(),
                    status: text(c, "status").unwrap_or_default(),
                    ..Default::default()
                })
                .collect()
        }),
        init_container_statuses: statuses("initContainerStatuses")?,
        container_statuses: statuses("containerStatuses")?,
        ..Default::default()
    })
}

/// A pod's cells.
fn pod_cells(obj: &Value) -> Vec<Cell> {
    let Ok(pod) = summary_pod(obj) else {
        return vec![Cell::text(s(obj, "/metadata/name"))];
    };
    let sum = view::pod_summary(&pod);
    let gates = pod.spec.as_ref().and_then(|s| s.readiness_gates.as_ref()).filter(|g| !g.is_empty());
    let gates = match gates {
        None => "<none>".to_string(),
        Some(g) => {
            let conds = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
            let ok = g
                .iter()
                .filter(|gate| {
                    conds.is_some_and(|c| c.iter().any(|c| c.type_ == gate.condition_type && c.status == "True"))
                })
                .count();
            format!("{ok}/{}", g.len())
        }
    };
    vec![
        Cell::text(s(obj, "/metadata/name")),
        Cell::text(format!("{}/{}", sum.ready, sum.total)),
        Cell::text(sum.status),
        Cell::Restarts(sum.restarts, sum.last_restart),
        Cell::age(s(obj, "/metadata/creationTimestamp")),
        Cell::text(or_none(s(obj, "/status/podIP"))),
        Cell::text(or_none(s(obj, "/spec/nodeName"))),
        Cell::text(or_none(s(obj, "/status/nominatedNodeName"))),
        Cell::text(gates),
    ]
}

fn event_cells(obj: &Value) -> Vec<Cell> {
    let kind = s(obj, "/involvedObject/kind").to_lowercase();
    let object = format!("{kind}/{}", s(obj, "/involvedObject/name"));
    let source = match (s(obj, "/source/component"), s(obj, "/source/host")) {
        (c, "") => c.to_string(),
        (c, h) => format!("{c}, {h}"),
    };
    let count = obj.get("count").and_then(Value::as_i64).unwrap_or(1);
    vec![
        Cell::age(s(obj, "/lastTimestamp")),
        Cell::text(s(obj, "/type")),
        Cell::text(s(obj, "/reason")),
        Cell::text(object),
        Cell::text(s(obj, "/involvedObject/fieldPath")),
        Cell::text(source),
        Cell::text(s(obj, "/message").trim()),
        Cell::age(s(obj, "/firstTimestamp")),
        Cell::Int(count),
        Cell::text(s(obj, "/metadata/name")),
    ]
}

fn node_cells(obj: &Value) -> Vec<Cell> {
    let conds = obj.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    let ready = conds.iter().find(|c| c["type"] == "Ready").map(|c| c["status"] == "True");
    let mut status = match ready {
        Some(true) => "Ready".to_string(),
        Some(false) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if obj.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    let addr = |t: &str| {
        obj.pointer("/status/addresses")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|x| x["type"] == t))
            .and_then(|x| x["address"].as_str())
            .map_or_else(|| "<none>".to_string(), str::to_string)
    };
    let roles: Vec<String> = obj
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|l| l.keys().filter_map(|k| k.strip_prefix("node-role.kubernetes.io/")).map(str::to_string).collect())
        .unwrap_or_default();
    vec![
        Cell::text(s(obj, "/metadata/name")),
        Cell::text(status),
        Cell::text(if roles.is_empty() { "<none>".to_string() } else { roles.join(",") }),
        Cell::age(s(obj, "/metadata/creationTimestamp")),
        Cell::text(s(obj, "/status/nodeInfo/kubeletVersion")),
        Cell::text(addr("InternalIP")),
        Cell::text(addr("ExternalIP")),
        Cell::text(s(obj, "/status/nodeInfo/osImage")),
        Cell::text(s(obj, "/status/nodeInfo/kernelVersion")),
        Cell::text(s(obj, "/status/nodeInfo/containerRuntimeVersion")),
    ]
}

fn data_count(obj: &Value) -> usize {
    let n = |k: &str| obj.get(k).and_then(Value::as_object).map_or(0, |m| m.len());
    n("data") + n("binaryData")
}

/// One object's cells for `p`, as a row keeps them.
pub fn row_cells(p: Printer, obj: &Value) -> Vec<Cell> {
    let name = Cell::text(s(obj, "/metadata/name"));
    let age = Cell::age(s(obj, "/metadata/creationTimestamp"));
    match p {
        Printer::Pods => pod_cells(obj),
        Printer::Events => event_cells(obj),
        Printer::Nodes => node_cells(obj),
        Printer::Namespaces => vec![name, Cell::text(s(obj, "/status/phase")), age],
        Printer::ConfigMaps => vec![name, Cell::Int(data_count(obj) as i64), age],
        Printer::Secrets => vec![name, Cell::text(s(obj, "/type")), Cell::Int(data_count(obj) as i64), age],
        Printer::Other => vec![name, age],
    }
}

/// One object's cells for `p`, as a Table shows them now.
pub fn cells(p: Printer, obj: &Value) -> Vec<Value> {
    row_cells(p, obj).iter().map(Cell::value).collect()
}

/// A Table (JSON) of rows, each its cells and its object's metadata as
/// JSON text (the row's object is that metadata as
/// `PartialObjectMetadata`), at `resource_version`, with `cont` as the
/// list's continue token. Written out directly: the metadata, kept as
/// text, is not parsed to be written again.
pub fn render<'a>(
    p: Printer,
    rows: impl IntoIterator<Item = (&'a [Cell], &'a str)>,
    resource_version: &str,
    cont: Option<&str>,
) -> Vec<u8> {
    let mut meta = serde_json::Map::new();
    meta.insert("resourceVersion".into(), Value::from(resource_version));
    if let Some(c) = cont {
        meta.insert("continue".into(), Value::from(c));
    }
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(br#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":"#);
    write_json(&mut out, &Value::Object(meta));
    out.extend_from_slice(br#","columnDefinitions":"#);
    write_json(&mut out, &column_definitions(p));
    out.extend_from_slice(br#","rows":["#);
    for (i, (cells, metadata)) in rows.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"cells":["#);
        for (j, c) in cells.iter().enumerate() {
            if j > 0 {
                out.push(b',');
            }
            write_json(&mut out, &c.value());
        }
        out.extend_from_slice(
            br#"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":"#,
        );
        out.extend_from_slice(metadata.as_bytes());
        out.extend_from_slice(b"}}");
    }
    out.extend_from_slice(b"]}");
    out
}

fn write_json(out: &mut Vec<u8>, v: &Value) {
    // writing a Value into a Vec cannot fail
    let _ = serde_json::to_writer(out, v);
}

/// The metadata of `obj` as JSON text (`{}` when it has none).
pub fn metadata_text(obj: &Value) -> String {
    obj.get("metadata").map_or_else(|| "{}".to_string(), Value::to_string)
}

/// A Table (JSON) of `objects` at `resource_version`.
pub fn table<'a>(p: Printer, objects: impl IntoIterator<Item = &'a Value>, resource_version: &str) -> Vec<u8> {
    let rows: Vec<(Vec<Cell>, String)> = objects.into_iter().map(|o| (row_cells(p, o), metadata_text(o))).collect();
    render(p, rows.iter().map(|(c, m)| (c.as_slice(), m.as_str())), resource_version, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: Value) -> Value {
        let mut base = json!({"metadata": {"name": "web", "namespace": "default",
            "creationTimestamp": "2020-01-01T00:00:00Z"}, "spec": {"containers": [{"name": "a"}], "nodeName": "n1"}});
        for (k, x) in v.as_object().unwrap() {
            base[k] = x.clone();
        }
        base
    }

    #[test]
    fn pod_rows_have_the_api_servers_columns_and_cells() {
        let p = pod(json!({"status": {"phase": "Running", "podIP": "10.0.0.5", "containerStatuses": [
            {"name": "a", "ready": true, "restartCount": 0, "image": "i", "imageID": "", "state": {"running": {}}}]}}));
        let t: Value = serde_json::from_slice(&table(Printer::Pods, [&p], "7")).unwrap();
        let names: Vec<&str> =
            t["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]
        );
        let wide: Vec<i64> =
            t["columnDefinitions"].as_array().unwrap().iter().map(|c| c["priority"].as_i64().unwrap()).collect();
        assert_eq!(wide, [0, 0, 0, 0, 0, 1, 1, 1, 1]);
        let row = &t["rows"][0];
        let c = row["cells"].as_array().unwrap();
        assert_eq!(c[0..4].to_vec(), [json!("web"), json!("1/1"), json!("Running"), json!("0")]);
        assert!(row["cells"][4].as_str().unwrap().ends_with('d') || row["cells"][4].as_str().unwrap().ends_with('y'));
        assert_eq!(row["cells"][5], "10.0.0.5");
        assert_eq!(row["cells"][6], "n1");
        assert_eq!(row["cells"][7], "<none>");
        assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(row["object"]["metadata"]["namespace"], "default");
        assert_eq!(t["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn pod_status_cells_follow_kubectls_printer() {
        let cases = [
            (
                json!({"status": {"phase": "Pending", "initContainerStatuses": [
                {"name": "i1", "ready": false, "restartCount": 0, "image": "", "imageID": "", "state": {"waiting": {"reason": "PodInitializing"}}}]}}),
                "Init:0/2",
            ),
            (
                json!({"status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "ready": false, "restartCount": 5, "image": "", "imageID": "",
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2020-01-01T00:00:00Z"}}}]}}),
                "CrashLoopBackOff",
            ),
            (
                json!({"status": {"phase": "Succeeded", "containerStatuses": [
                {"name": "a", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}}),
                "Completed",
            ),
            (
                json!({"metadata": {"name": "web", "deletionTimestamp": "2020-01-01T00:00:00Z"}, "status": {"phase": "Running"}}),
                "Terminating",
            ),
        ];
        for (i, (v, want)) in cases.into_iter().enumerate() {
            let mut p = pod(v);
            if i == 0 {
                p["spec"]["initContainers"] = json!([{"name": "i1"}, {"name": "i2"}]);
            }
            let c = cells(Printer::Pods, &p);
            assert_eq!(c[2], want, "case {i}: {c:?}");
            if i == 1 {
                let r = c[3].as_str().unwrap();
                assert!(r.starts_with("5 (") && r.ends_with(" ago)"), "{r}");
            }
        }
    }

    #[test]
    fn other_printers() {
        let ev = json!({"metadata": {"name": "web.1"}, "type": "Normal", "reason": "Started", "message": "Started container a",
            "involvedObject": {"kind": "Pod", "name": "web", "fieldPath": "spec.containers{a}"}, "count": 2,
            "source": {"component": "kubelet", "host": "n1"}});
        let c = cells(Printer::Events, &ev);
        let c = c.as_slice();
        assert_eq!(
            c[1..5].to_vec(),
            [json!("Normal"), json!("Started"), json!("pod/web"), json!("spec.containers{a}")]
        );
        assert_eq!(c[5], "kubelet, n1");
        let node = json!({"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "10.1.1.1"}], "nodeInfo": {"kubeletVersion": "v1.33.0"}}});
        let c = cells(Printer::Nodes, &node);
        assert_eq!(c[0..3].to_vec(), [json!("n1"), json!("Ready"), json!("<none>")]);
        assert_eq!((c[4].clone(), c[5].clone(), c[6].clone()), (json!("v1.33.0"), json!("10.1.1.1"), json!("<none>")));
        let sec = json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"a": "", "b": ""}});
        assert_eq!(cells(Printer::Secrets, &sec)[1..3].to_vec(), [json!("Opaque"), json!(2)]);
    }

    #[test]
    fn a_pods_cells_read_in_place_are_those_of_the_whole_pod() {
        let obj = pod(json!({
            "metadata": {"name": "web", "namespace": "default", "creationTimestamp": "2020-01-01T00:00:00Z",
                "deletionTimestamp": "2030-01-01T00:00:00Z"},
            "spec": {"nodeName": "n1", "readinessGates": [{"conditionType": "x/ok"}],
                "initContainers": [{"name": "init", "image": "i"}, {"name": "side", "image": "i", "restartPolicy": "Always"}],
                "containers": [{"name": "a", "image": "i", "env": [{"name": "E", "value": "1"}]}, {"name": "b", "image": "i"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.2",
                "conditions": [{"type": "x/ok", "status": "True"}],
                "initContainerStatuses": [
                    {"name": "init", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                        "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                    {"name": "side", "ready": true, "restartCount": 2, "image": "i", "imageID": "",
                        "state": {"running": {"startedAt": "2020-01-01T00:00:00Z"}}}],
                "containerStatuses": [
                    {"name": "a", "ready": true, "restartCount": 1, "image": "i", "imageID": "",
                        "state": {"running": {}}, "lastState": {"terminated": {"exitCode": 1,
                        "finishedAt": "2020-01-01T00:00:00Z"}}},
                    {"name": "b", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}
        }));
        let whole: Pod = serde_json::from_value(obj.clone()).unwrap();
        let part = summary_pod(&obj).unwrap();
        assert_eq!(format!("{:?}", view::pod_summary(&part)), format!("{:?}", view::pod_summary(&whole)));
        let cells = cells(Printer::Pods, &obj);
        assert_eq!(cells[8], "1/1");
        assert_eq!(cells[2], "Terminating");

        // the other ways a summary is made: a status reason, an init
        // container failing or waiting, a signal, a completed pod, a last
        // state without a restart, nothing at all
        let init = |st: Value| {
            pod(json!({"metadata": {"name": "p"},
                "spec": {"initContainers": [{"name": "i", "image": "x"}], "containers": [{"name": "c", "image": "x"}]},
                "status": st}))
        };
        let c = |state: Value, last: Value, restarts: i32| {
            json!({"name": "c", "ready": false, "started": false, "restartCount": restarts, "image": "x",
                "imageID": "", "state": state, "lastState": last})
        };
        let cases = [
            init(json!({"phase": "Failed", "reason": "Evicted", "message": "m"})),
            init(json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "i", "ready": false, "restartCount": 3, "image": "x", "imageID": "",
                 "state": {"terminated": {"exitCode": 0, "signal": 9}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2021-01-01T00:00:00Z"}}}]})),
            init(json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "i", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                 "state": {"waiting": {"reason": "ImagePullBackOff", "message": "m"}}}]})),
            init(json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "i", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                 "state": {"waiting": {"reason": "PodInitializing"}}}]})),
            init(json!({"phase": "Running",
                "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "False"}],
                "containerStatuses": [c(json!({"terminated": {"exitCode": 0, "reason": "Completed"}}),
                    json!({"terminated": {"exitCode": 2, "finishedAt": "2022-01-01T00:00:00Z"}}), 0)]})),
            init(json!({"phase": "Running", "containerStatuses": [
                c(json!({"terminated": {"exitCode": 137, "signal": 9}}), json!({}), 4)]})),
            init(json!(null)),
            pod(json!({"metadata": {"name": "bare"}})),
        ];
        for obj in cases {
            let whole: Pod = serde_json::from_value(obj.clone()).unwrap();
            let part = summary_pod(&obj).unwrap();
            assert_eq!(format!("{:?}", view::pod_summary(&part)), format!("{:?}", view::pod_summary(&whole)), "{obj}");
        }
    }
}

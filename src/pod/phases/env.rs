//! A container's environment as the kubelet makes it: `env` in order, each
//! `value` expanded against the variables before it (`$(VAR)`, `$$` for a
//! literal `$`, unknown references left as written), each `valueFrom` read
//! from the downward API (`fieldRef`, `resourceFieldRef`) or a local
//! ConfigMap or Secret (`configMapKeyRef`, `secretKeyRef`), after the keys
//! of `envFrom`; then `command` and `args` expanded against the whole
//! environment.

use thiserror::Error;

use crate::model::downward::subscript;
use crate::model::objects::{Kind, LocalObject, ObjKey, ObjectSet};
use crate::model::{self, Container, Pod, quantity};

/// What the downward API reads besides the pod.
#[derive(Debug, Clone, Copy)]
pub struct Downward<'a> {
    /// The pod's IP (the node's for a host-network pod), once its sandbox
    /// has one.
    pub pod_ip: Option<&'a str>,
    /// The node's address.
    pub host_ip: Option<&'a str>,
    /// What the node gives to pods: the limits a container without its own
    /// are shown as (the kubelet's `defaultPodLimitsForDownwardAPI`).
    pub allocatable_cpu_millis: i64,
    pub allocatable_memory_bytes: i64,
    pub allocatable_ephemeral_bytes: i64,
    /// The local ConfigMaps and Secrets.
    pub objects: &'a ObjectSet,
    /// The service environment variables (cluster mode): under the
    /// container's own, which win, and readable by `$(VAR)`.
    pub services: &'a [(String, String)],
}

/// An environment variable the container cannot be given; the container is
/// not created (`CreateContainerConfigError`).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum EnvError {
    #[error("env {name}: fieldPath {path:?} is not supported")]
    FieldPath { name: String, path: String },
    #[error("env {name}: resource {resource:?} is not supported")]
    Resource { name: String, resource: String },
    #[error("env {name}: no container {container:?} in the pod")]
    NoContainer { name: String, container: String },
    #[error("env {name}: {what} {value:?} is not a quantity")]
    Quantity { name: String, what: &'static str, value: String },
    /// The kubelet's text for a missing object (`configmap "app" not
    /// found`).
    #[error("{} {:?} not found", .0.kind.resource(), .0.name)]
    NotFound(ObjKey),
    /// The kubelet's text for a missing key.
    #[error("couldn't find key {key} in {} {}/{}", .object.kind.as_str(), .object.namespace, .object.name)]
    MissingKey { object: ObjKey, key: String },
    /// A value the runtime cannot take as an environment variable (the
    /// value itself is never shown: it may be a secret).
    #[error("env {name}: key {key} of {object} {why}")]
    BadValue { name: String, object: ObjKey, key: String, why: &'static str },
}

/// The environment variables podwarden gives the container: the keys of
/// `envFrom` (in order, a later source overriding an earlier one), then
/// `env` (declaration order; a name set twice keeps its first place and its
/// last value).
pub fn environment(pod: &Pod, c: &Container, dw: &Downward) -> Result<Vec<(String, String)>, EnvError> {
    let ns = model::namespace(pod);
    let mut env: Vec<(String, String)> = dw.services.to_vec();
    let set = |env: &mut Vec<(String, String)>, name: &str, value: String| match env.iter_mut().find(|(n, _)| n == name)
    {
        Some(slot) => slot.1 = value,
        None => env.push((name.to_string(), value)),
    };
    for ef in c.env_from.iter().flatten() {
        let prefix = ef.prefix.as_deref().unwrap_or("");
        let (kind, name, optional) = match (&ef.config_map_ref, &ef.secret_ref) {
            (Some(r), _) => (Kind::ConfigMap, r.name.as_str(), r.optional.unwrap_or(false)),
            (None, Some(r)) => (Kind::Secret, r.name.as_str(), r.optional.unwrap_or(false)),
            (None, None) => continue,
        };
        let key = ObjKey::new(kind, ns, name);
        let Some(obj) = dw.objects.get(&key) else {
            if optional {
                continue;
            }
            return Err(EnvError::NotFound(key));
        };
        for k in obj.env_keys() {
            let var = format!("{prefix}{k}");
            let value = text(&var, obj, k)?;
            set(&mut env, &var, value);
        }
    }
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) if !v.is_empty() => expand(v, |name| lookup(&env, name)),
            (_, Some(from)) => {
                if let Some(f) = &from.field_ref {
                    field_value(pod, &f.field_path, dw)
                        .ok_or_else(|| EnvError::FieldPath { name: e.name.clone(), path: f.field_path.clone() })?
                } else if let Some(r) = &from.resource_field_ref {
                    resource_value(pod, c, &e.name, r, dw)?
                } else {
                    let (kind, name, key, optional) = match (&from.config_map_key_ref, &from.secret_key_ref) {
                        (Some(r), _) => (Kind::ConfigMap, &r.name, &r.key, r.optional.unwrap_or(false)),
                        (None, Some(r)) => (Kind::Secret, &r.name, &r.key, r.optional.unwrap_or(false)),
                        // the field table refuses every other source
                        (None, None) => continue,
                    };
                    let object = ObjKey::new(kind, ns, name);
                    // optional and missing: the variable is not set at all
                    // (a value from envFrom or an earlier entry stays), as
                    // in the kubelet
                    let Some(obj) = dw.objects.get(&object) else {
                        if optional {
                            continue;
                        }
                        return Err(EnvError::NotFound(object));
                    };
                    if obj.env_value(key).is_none() {
                        if optional {
                            continue;
                        }
                        return Err(EnvError::MissingKey { object, key: key.clone() });
                    }
                    text(&e.name, obj, key)?
                }
            }
            _ => String::new(),
        };
        set(&mut env, &e.name, value);
    }
    Ok(env)
}

/// The value of `key` of `obj` as an environment variable's text.
fn text(name: &str, obj: &LocalObject, key: &str) -> Result<String, EnvError> {
    let bad = |why| EnvError::BadValue { name: name.to_string(), object: obj.key.clone(), key: key.to_string(), why };
    let bytes = obj.env_value(key).unwrap_or_default();
    let s = std::str::from_utf8(bytes).map_err(|_| bad("is not valid UTF-8"))?;
    if s.contains('\0') {
        return Err(bad("holds a NUL byte, which an environment variable cannot"));
    }
    Ok(s.to_string())
}

/// `command` and `args` with `$(VAR)` expanded against `env`.
pub fn command_and_args(c: &Container, env: &[(String, String)]) -> (Vec<String>, Vec<String>) {
    let all =
        |v: &Option<Vec<String>>| v.iter().flatten().map(|s| expand(s, |name| lookup(env, name))).collect::<Vec<_>>();
    (all(&c.command), all(&c.args))
}

/// Why a `subPathExpr` cannot be expanded.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SubPathExprError {
    /// Variables it names that have no value (sorted, once each).
    #[error("missing value for {}", .0.join(", "))]
    Missing(Vec<String>),
    #[error("subPathExpr {expr:?} expands to an absolute path {out:?}")]
    Absolute { expr: String, out: String },
    #[error("subPathExpr {expr:?} expands to {out:?}, which contains '..'")]
    DotDot { expr: String, out: String },
}

/// `subPathExpr` expanded against the container's environment, as the
/// kubelet expands it: every reference must name a variable with a value,
/// and the result must be a relative path without `..`.
pub fn sub_path_expr(expr: &str, env: &[(String, String)]) -> Result<String, SubPathExprError> {
    let missing = std::cell::RefCell::new(Vec::new());
    let out = expand(expr, |name| match lookup(env, name) {
        Some(v) if !v.is_empty() => Some(v),
        _ => {
            missing.borrow_mut().push(name.to_string());
            Some(String::new())
        }
    });
    let mut missing = missing.into_inner();
    if !missing.is_empty() {
        missing.sort();
        missing.dedup();
        return Err(SubPathExprError::Missing(missing));
    }
    if out.starts_with('/') {
        return Err(SubPathExprError::Absolute { expr: expr.to_string(), out });
    }
    if out.split('/').any(|c| c == "..") {
        return Err(SubPathExprError::DotDot { expr: expr.to_string(), out });
    }
    Ok(out)
}

fn lookup(env: &[(String, String)], name: &str) -> Option<String> {
    env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
}

pub use crate::model::downward::expand;

/// The value of a downward-API field path for an environment variable, or
/// `None` if the path is not one of [`ENV_FIELD_PATHS`].
pub fn field_value(pod: &Pod, path: &str, dw: &Downward) -> Option<String> {
    let spec = model::spec(pod);
    let ip = |v: Option<&str>| v.unwrap_or_default().to_string();
    Some(match path {
        "metadata.name" => model::name(pod).to_string(),
        "metadata.namespace" => model::namespace(pod).to_string(),
        "metadata.uid" => model::uid(pod).to_string(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()).unwrap_or_default(),
        // one address each on this node: the lists are that address
        "status.hostIP" | "status.hostIPs" => ip(dw.host_ip),
        "status.podIP" | "status.podIPs" => ip(dw.pod_ip),
        other => {
            let (map, key) = subscript(other)?;
            let m = if map == "labels" { &pod.metadata.labels } else { &pod.metadata.annotations };
            m.as_ref().and_then(|m| m.get(key)).cloned().unwrap_or_default()
        }
    })
}

pub(crate) fn resource_value(
    pod: &Pod,
    c: &Container,
    name: &str,
    r: &k8s_openapi::api::core::v1::ResourceFieldSelector,
    dw: &Downward,
) -> Result<String, EnvError> {
    let target = match r.container_name.as_deref() {
        None | Some("") => c,
        Some(other) => model::find_container(pod, other)
            .ok_or_else(|| EnvError::NoContainer { name: name.into(), container: other.into() })?,
    };
    let bad = |what: &'static str, value: &str| EnvError::Quantity { name: name.into(), what, value: value.into() };
    let res = target.resources.as_ref();
    let get = |kind: &str, key: &str| {
        let m =
            if kind == "limits" { res.and_then(|r| r.limits.as_ref()) } else { res.and_then(|r| r.requests.as_ref()) };
        m.and_then(|m| m.get(key)).map(|q| q.0.clone())
    };
    let (kind, key) = r.resource.split_once('.').unwrap_or(("", ""));
    // a request defaults to the limit (API defaulting); a limit to what the
    // node gives to pods (the kubelet's defaulting for the downward API)
    // (a zero limit counts as none, as in the kubelet)
    let zero = |q: &String| quantity::parse(q).is_ok_and(|v| v == 0.0);
    let set = if kind == "requests" {
        get("requests", key).or_else(|| get("limits", key))
    } else {
        get("limits", key).filter(|q| !zero(q))
    };
    let divisor = r.divisor.as_ref().map(|q| q.0.as_str()).unwrap_or("1");
    match (kind, key) {
        ("limits" | "requests", "cpu") => {
            let millis = match set {
                Some(q) => quantity::cpu_millis(&q).map_err(|_| bad("cpu", &q))?,
                None if kind == "limits" => dw.allocatable_cpu_millis,
                None => 0,
            };
            let per = quantity::cpu_millis(divisor).map_err(|_| bad("divisor", divisor))?.max(1);
            Ok(ceil_div(millis, per).to_string())
        }
        ("limits" | "requests", "memory" | "ephemeral-storage") => {
            let allocatable =
                if key == "memory" { dw.allocatable_memory_bytes } else { dw.allocatable_ephemeral_bytes };
            let bytes = match set {
                Some(q) => quantity::bytes(&q).map_err(|_| bad("memory", &q))?,
                None if kind == "limits" => allocatable,
                None => 0,
            };
            let per = quantity::bytes(divisor).map_err(|_| bad("divisor", divisor))?.max(1);
            Ok(ceil_div(bytes, per).to_string())
        }
        _ => Err(EnvError::Resource { name: name.into(), resource: r.resource.clone() }),
    }
}

fn ceil_div(a: i64, b: i64) -> i64 {
    if a <= 0 { a / b } else { (a - 1) / b + 1 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::downward::divisor_allowed;

    fn map<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |n| pairs.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_string())
    }

    #[test]
    fn expansion_follows_kubernetes_rules() {
        let m = map(&[("A", "a"), ("B", "b"), ("EMPTY", "")]);
        let cases = [
            ("$(A)", "a"),
            ("x$(A)y$(B)z", "xaybz"),
            ("$(MISSING)", "$(MISSING)"),
            ("$$(A)", "$(A)"),
            ("$$$(A)", "$a"),
            ("$$$$", "$$"),
            ("$(A", "$(A"),
            ("$(A$(B)", "$(A$(B)"),
            ("$A", "$A"),
            ("$", "$"),
            ("a$", "a$"),
            ("$(EMPTY)x", "x"),
            ("$()", "$()"),
            ("ünï$(A)cødé", "ünïacødé"),
            ("$ü", "$ü"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, &m), want, "{input:?}");
        }
    }

    fn pod(yaml: &str) -> Pod {
        let v: serde_json::Value = serde_yaml_ng::from_str(yaml).unwrap();
        serde_json::from_value(v).unwrap()
    }

    static NO_OBJECTS: ObjectSet = ObjectSet::new();

    const DW: Downward = Downward {
        services: &[],
        pod_ip: Some("10.88.0.7"),
        host_ip: Some("192.168.1.2"),
        allocatable_cpu_millis: 2000,
        allocatable_memory_bytes: 4 << 30,
        allocatable_ephemeral_bytes: 100 << 30,
        objects: &NO_OBJECTS,
    };

    fn objects(docs: &[serde_json::Value]) -> ObjectSet {
        docs.iter()
            .map(|d| {
                let kind = if d["kind"] == "Secret" { Kind::Secret } else { Kind::ConfigMap };
                let (o, _) = crate::model::objects::from_value(kind, "f", d.clone()).unwrap();
                (o.key.clone(), std::sync::Arc::new(o))
            })
            .collect()
    }

    #[test]
    fn env_from_config_maps_and_secrets_as_the_kubelet() {
        use serde_json::json;
        let set = objects(&[
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "edge"},
                "data": {"MODE": "fast", "PATH": "/cfg", "shared": "from-cm"}, "binaryData": {"blob": "AAE="}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec", "namespace": "edge"},
                "stringData": {"token": "s3cr3t", "shared": "from-secret"}}),
        ]);
        let dw = Downward { objects: &set, ..DW };
        let p = pod(r#"
metadata: {name: web, namespace: edge}
spec:
  containers:
  - name: c
    image: busybox
    envFrom:
    - configMapRef: {name: cfg}
    - prefix: S_
      secretRef: {name: sec, optional: true}
    - configMapRef: {name: gone, optional: true}
    env:
    - {name: PATH, value: "$(PATH):/bin"}
    - {name: TOKEN, valueFrom: {secretKeyRef: {name: sec, key: token}}}
    - {name: MODE, valueFrom: {configMapKeyRef: {name: cfg, key: nope, optional: true}}}
    - {name: GONE, valueFrom: {configMapKeyRef: {name: gone, key: x, optional: true}}}
"#);
        let c = &p.spec.as_ref().unwrap().containers[0];
        let env = environment(&p, c, &dw).unwrap();
        let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("MODE"), Some("fast"), "optional missing key leaves the envFrom value");
        assert_eq!(get("PATH"), Some("/cfg:/bin"), "env expands against envFrom");
        assert_eq!(get("shared"), Some("from-cm"));
        assert_eq!(get("S_shared"), Some("from-secret"));
        assert_eq!(get("S_token"), Some("s3cr3t"));
        assert_eq!(get("TOKEN"), Some("s3cr3t"));
        assert_eq!(get("blob"), None, "binaryData never reaches the environment");
        assert_eq!(get("GONE"), None, "optional missing object: not set at all");
        // S_bin is not UTF-8: refused by name, the value never shown
        let set2 = objects(&[json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec", "namespace":
            "edge"}, "data": {"bin": "/w=="}})]);
        let p2 = pod(r#"
metadata: {name: web, namespace: edge}
spec:
  containers:
  - {name: c, image: busybox, envFrom: [{secretRef: {name: sec}}]}
"#);
        let e = environment(&p2, &p2.spec.as_ref().unwrap().containers[0], &Downward { objects: &set2, ..DW });
        assert_eq!(e.unwrap_err().to_string(), "env bin: key bin of Secret edge/sec is not valid UTF-8");
    }

    #[test]
    fn ephemeral_storage_reads_as_allocatable_or_zero() {
        let p = pod(r#"
metadata: {name: web}
spec:
  containers:
  - name: c
    image: busybox
    env:
    - {name: L, valueFrom: {resourceFieldRef: {resource: limits.ephemeral-storage, divisor: 1Gi}}}
    - {name: R, valueFrom: {resourceFieldRef: {resource: requests.ephemeral-storage}}}
"#);
        let env = environment(&p, &p.spec.as_ref().unwrap().containers[0], &DW).unwrap();
        assert_eq!(env, vec![("L".to_string(), "100".to_string()), ("R".to_string(), "0".to_string())]);
    }

    #[test]
    fn missing_objects_and_keys_give_the_kubelet_messages() {
        use serde_json::json;
        let set = objects(&[json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
            "data": {"a": "1"}})]);
        let dw = Downward { objects: &set, ..DW };
        let run = |env_yaml: &str| {
            let p =
                pod(&format!("metadata: {{name: web}}\nspec:\n  containers:\n  - name: c\n    image: b\n{env_yaml}"));
            environment(&p, &p.spec.as_ref().unwrap().containers[0], &dw).map_err(|e| e.to_string())
        };
        assert_eq!(
            run("    env: [{name: X, valueFrom: {configMapKeyRef: {name: other, key: a}}}]").unwrap_err(),
            "configmap \"other\" not found"
        );
        assert_eq!(
            run("    env: [{name: X, valueFrom: {secretKeyRef: {name: s, key: a}}}]").unwrap_err(),
            "secret \"s\" not found"
        );
        assert_eq!(
            run("    env: [{name: X, valueFrom: {configMapKeyRef: {name: cfg, key: b}}}]").unwrap_err(),
            "couldn't find key b in ConfigMap default/cfg"
        );
        assert_eq!(run("    envFrom: [{configMapRef: {name: nope}}]").unwrap_err(), "configmap \"nope\" not found");
        // another namespace's object is not visible
        let p = pod(
            "metadata: {name: web, namespace: x}\nspec:\n  containers:\n  - name: c\n    image: b\n    envFrom: [{configMapRef: {name: cfg}}]\n",
        );
        assert!(environment(&p, &p.spec.as_ref().unwrap().containers[0], &dw).is_err());
    }

    #[test]
    fn env_reads_the_downward_api_and_expands_in_order() {
        let p = pod(r#"
metadata: {name: web, namespace: edge, uid: u-1, labels: {app: shop}, annotations: {"team.io/owner": ops}}
spec:
  nodeName: node-a
  containers:
  - name: c
    image: busybox
    command: ["/bin/sh", "-c", "echo $(GREETING) $$(HOME) $(LATER)"]
    args: ["$(POD_NAME)"]
    resources: {limits: {cpu: 500m, memory: 64Mi}}
    env:
    - {name: EARLY, value: "$(POD_NAME)"}
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: NS, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
    - {name: UID, valueFrom: {fieldRef: {fieldPath: metadata.uid}}}
    - {name: APP, valueFrom: {fieldRef: {fieldPath: "metadata.labels['app']"}}}
    - {name: OWNER, valueFrom: {fieldRef: {fieldPath: "metadata.annotations['team.io/owner']"}}}
    - {name: NONE, valueFrom: {fieldRef: {fieldPath: "metadata.labels['none']"}}}
    - {name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
    - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
    - {name: POD_IPS, valueFrom: {fieldRef: {fieldPath: status.podIPs}}}
    - {name: HOST_IP, valueFrom: {fieldRef: {fieldPath: status.hostIP}}}
    - {name: GREETING, value: "hi $(POD_NAME) in $(NS)"}
    - {name: CPU, valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: 1m}}}
    - {name: MEM_MI, valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}}
    - {name: CPU_REQ, valueFrom: {resourceFieldRef: {resource: requests.cpu}}}
    - {name: OTHER_MEM, valueFrom: {resourceFieldRef: {containerName: d, resource: limits.memory}}}
    - {name: ZERO_CPU, valueFrom: {resourceFieldRef: {containerName: d, resource: limits.cpu}}}
    - {name: EARLY, value: "again"}
  - name: d
    image: busybox
    resources: {limits: {cpu: "0"}}
"#);
        let c = &p.spec.as_ref().unwrap().containers[0];
        let env = environment(&p, c, &DW).unwrap();
        let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str()).unwrap();
        // a reference to a later variable stays as written; the name keeps
        // its first place and takes its last value
        assert_eq!(env[0], ("EARLY".to_string(), "again".to_string()));
        assert_eq!(get("POD_NAME"), "web");
        assert_eq!(get("NS"), "edge");
        assert_eq!(get("UID"), "u-1");
        assert_eq!(get("APP"), "shop");
        assert_eq!(get("OWNER"), "ops");
        assert_eq!(get("NONE"), "");
        assert_eq!(get("NODE"), "node-a");
        assert_eq!(get("POD_IP"), "10.88.0.7");
        assert_eq!(get("POD_IPS"), "10.88.0.7");
        assert_eq!(get("HOST_IP"), "192.168.1.2");
        assert_eq!(get("GREETING"), "hi web in edge");
        assert_eq!(get("CPU"), "500");
        assert_eq!(get("MEM_MI"), "64");
        // cpu 500m with divisor 1 rounds up; a request defaults to the limit
        assert_eq!(get("CPU_REQ"), "1");
        // d has no limit: the node's allocatable memory
        assert_eq!(get("OTHER_MEM"), (4i64 << 30).to_string());
        // a zero limit is no limit: the node's allocatable cpu, in cores
        assert_eq!(get("ZERO_CPU"), "2");
        let (command, args) = command_and_args(c, &env);
        assert_eq!(command, ["/bin/sh", "-c", "echo hi web in edge $(HOME) $(LATER)"]);
        assert_eq!(args, ["web"]);
        let first = pod(
            "metadata: {name: a}\nspec: {containers: [{name: c, env: [{name: X, value: \"$(Y)\"}, {name: Y, value: y}]}]}\n",
        );
        let c = &first.spec.as_ref().unwrap().containers[0];
        assert_eq!(environment(&first, c, &DW).unwrap()[0].1, "$(Y)", "only earlier variables are visible");
    }

    #[test]
    fn sub_path_expr_is_expanded_as_the_kubelet_does() {
        let env = vec![("POD".to_string(), "web-1".to_string()), ("EMPTY".to_string(), String::new())];
        assert_eq!(sub_path_expr("logs/$(POD)", &env).unwrap(), "logs/web-1");
        assert_eq!(
            sub_path_expr("$(EMPTY)/$(NOPE)/$(POD)", &env).unwrap_err().to_string(),
            "missing value for EMPTY, NOPE"
        );
        assert!(sub_path_expr("/$(POD)", &env).unwrap_err().to_string().contains("absolute"));
        let up = vec![("X".to_string(), "..".to_string())];
        assert!(sub_path_expr("a/$(X)/b", &up).unwrap_err().to_string().contains("'..'"));
    }

    #[test]
    fn divisors_and_rounding() {
        assert!(divisor_allowed("limits.cpu", "1m") && divisor_allowed("requests.cpu", "1"));
        assert!(!divisor_allowed("limits.cpu", "2") && !divisor_allowed("limits.cpu", "1k"));
        for d in ["1", "1k", "1M", "1G", "1Ki", "1Mi", "1Gi", "1Ti"] {
            assert!(divisor_allowed("limits.memory", d), "{d}");
        }
        assert!(!divisor_allowed("limits.memory", "2Mi") && !divisor_allowed("limits.memory", "1m"));
        assert_eq!((ceil_div(1, 1000), ceil_div(1000, 1000), ceil_div(1001, 1000), ceil_div(0, 7)), (1, 1, 2, 0));
        let p = pod(
            "metadata: {name: a}\nspec: {containers: [{name: c, env: [{name: M, valueFrom: {resourceFieldRef: {resource: limits.memory, containerName: nope}}}]}]}\n",
        );
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(environment(&p, c, &DW).unwrap_err().to_string(), "env M: no container \"nope\" in the pod");
    }
}

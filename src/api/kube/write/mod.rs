//! The write side of the node's Kubernetes API, one room: what `kubectl
//! create`, `apply` (client- and server-side), `patch`, `edit` and
//! `delete` do to pods and to ConfigMaps and Secrets. Authorization is
//! the caller's (`routes`).
//!
//! - `pods`: pod create, PATCH (and server-side apply) and DELETE, each a
//!   manifest file through `api::ops` (static pods refused);
//! - `objects`: the same for ConfigMaps and Secrets, through `api::objects`;
//! - `patch`: JSON, merge and strategic merge patches, pure; `ssa`:
//!   server-side apply and `managedFields`, pure;
//! - `pbbody`: the protobuf bodies of client-go's typed clients and kubectl
//!   (a Pod, ConfigMap, Secret, DeleteOptions), decoded by the `pbschema`
//!   table to the JSON a JSON body gives.
//!
//! This file is what every write shares: a request's body as JSON
//! (`body_object`) and the new object's name (`identify`), the write
//! parameters (`fieldManager`, `force`, `fieldValidation`, `dryRun`:
//! [`Params`]), the result (`Patched`), the end of every write (identity
//! and status kept, `finish`), field validation through the manifest
//! parser's own field tables (`validate_fields`), what is stored
//! (`manifest_of`) and how each list field merges (`list_kind`, the
//! Kubernetes types' patch strategies). All but the first two are pure.
//!
//! What a patched Pod then *is* is the caller's decision: podwarden's pods
//! are manifests, so the server stores the result as the pod's new
//! manifest (`manifest_of`), exactly as `podwarden apply` of the edited
//! file does, and the pod is replaced; the API server's immutability rules
//! for running pods do not apply. The identity (apiVersion, kind, name,
//! namespace, uid) and the status cannot be changed by a write.

pub mod objects;
pub mod patch;
pub mod pbbody;
pub mod pbschema;
pub mod pods;
pub mod ssa;

use serde_json::{Value, json};

use crate::api::query::Query;
use crate::api::status::{ApiError, Res};
use crate::model::{fields, objects as model_objects};

use super::wire::Request;

/// A request body as JSON (`application/json`, YAML by its type, or a
/// protobuf Pod, ConfigMap, Secret or DeleteOptions: `pbbody`), at most
/// `max` bytes.
pub fn body_object(req: &Request, max: usize) -> Res<Value> {
    if req.body.len() > max {
        return Err(ApiError::too_large(format!("the request body is over {max} bytes")));
    }
    match req.header("content-type").unwrap_or("application/json") {
        t if t.starts_with("application/json") => serde_json::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("the request body is not JSON: {e}"))),
        t if t.contains("yaml") => serde_yaml_ng::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("the request body is not YAML: {e}"))),
        t if t.starts_with("application/vnd.kubernetes.protobuf") => pbbody::decode(&req.body).map_err(|e| {
            if e.unsupported { ApiError::unsupported_media_type(e.message) } else { ApiError::bad_request(e.message) }
        }),
        t => Err(ApiError::unsupported_media_type(format!("the body's type {t:?} is not supported: send JSON"))),
    }
}

/// The name of a new object of `kind` (`Pod`, `ConfigMap`, ...), its
/// namespace checked against the URL's and set.
pub fn identify(obj: &mut Value, kind: &str, ns: &str) -> Res<String> {
    let body_ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).filter(|n| !n.is_empty()).unwrap_or(ns);
    if body_ns != ns {
        return Err(ApiError::bad_request(format!(
            "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({ns})"
        )));
    }
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return Err(ApiError::invalid(format!("{kind} is invalid: metadata.name: Required value")));
    };
    meta.insert("namespace".into(), json!(ns));
    let name = meta.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    if name.is_empty() {
        return Err(ApiError::invalid(format!(
            "{kind} is invalid: metadata.name: Required value: name or generateName is required"
        )));
    }
    Ok(name)
}

/// The write parameters of `req`, stamped now.
pub fn params(req: &Request) -> Res<Params> {
    Params::from_query(&req.query, &crate::model::rfc3339(std::time::SystemTime::now()))
}

/// `fieldValidation`: what to do with fields the schema does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them and say so in `Warning` headers (the API server's default).
    #[default]
    Warn,
    /// Refuse the request (400), naming each.
    Strict,
}

/// The query parameters of a write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params {
    pub field_manager: Option<String>,
    pub force: bool,
    pub field_validation: FieldValidation,
    /// `dryRun=All`: the caller answers with the result and stores nothing.
    pub dry_run: bool,
    /// The time recorded in `managedFields` (RFC 3339).
    pub now: String,
}

/// The manager a write is recorded under: `fieldManager`, else the
/// User-Agent's product (before its first `/`), as the API server takes it.
pub fn manager_of(params: &Params, req: &Request) -> String {
    if let Some(m) = &params.field_manager {
        return m.clone();
    }
    match req.header("user-agent").and_then(|ua| ua.split('/').next()).map(str::trim) {
        Some(ua) if !ua.is_empty() => ua.chars().take(128).collect(),
        _ => "unknown".into(),
    }
}

impl Params {
    /// The write parameters of a request's query (`fieldManager=kubectl
    /// &force=false&fieldValidation=Strict&dryRun=All`); other parameters
    /// are left to the caller.
    pub fn from_query(query: &Query, now: &str) -> Res<Params> {
        let mut p = Params { now: now.to_string(), ..Params::default() };
        if let Some(m) = query.get("fieldManager") {
            if m.len() > 128 || m.chars().any(|c| c.is_control()) {
                return Err(ApiError::field_invalid(
                    "PatchOptions",
                    "",
                    "fieldManager",
                    "must be at most 128 printable characters",
                ));
            }
            p.field_manager = Some(m.to_string());
        }
        p.dry_run = match query.get("dryRun") {
            None | Some("") => false,
            Some("All") => true,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "dryRun: unsupported value {other:?}, the only supported value is All"
                )));
            }
        };
        p.force = query.flag("force")?;
        p.field_validation = match query.get("fieldValidation") {
            None | Some("Warn" | "") => FieldValidation::Warn,
            Some("Strict") => FieldValidation::Strict,
            Some("Ignore") => FieldValidation::Ignore,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "fieldValidation: invalid value {other:?}, expected Ignore, Warn or Strict"
                )));
            }
        };
        Ok(p)
    }
}

/// A write's result: the new object and the `Warning` headers to send
/// (`unknown field "spec.foo"`, as the API server words them).
#[derive(Debug, Clone, PartialEq)]
pub struct Patched {
    pub object: Value,
    pub warnings: Vec<String>,
}

/// The common end of every write: identity unchanged (400/409 as the API
/// server answers), status kept from `live`, fields checked.
pub fn finish(kind: &str, live: &Value, mut new: Value, params: &Params) -> Res<Patched> {
    let name = live.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    if !new.is_object() {
        return Err(ApiError::bad_request(format!("the patched {kind} is not an object")));
    }
    for (ptr, what) in [("/apiVersion", "apiVersion"), ("/kind", "kind")] {
        if new.pointer(ptr) != live.pointer(ptr) {
            return Err(ApiError::bad_request(format!(
                "{what} cannot be changed by a patch ({} to {})",
                live.pointer(ptr).unwrap_or(&Value::Null),
                new.pointer(ptr).unwrap_or(&Value::Null)
            )));
        }
    }
    for (ptr, what) in [("/metadata/name", "name"), ("/metadata/namespace", "namespace")] {
        if new.pointer(ptr) != live.pointer(ptr) {
            return Err(ApiError::bad_request(format!(
                "the {what} of the object ({}) does not match the {what} on the URL ({})",
                new.pointer(ptr).unwrap_or(&Value::Null),
                live.pointer(ptr).unwrap_or(&Value::Null)
            )));
        }
    }
    if let Some(uid) = new.pointer("/metadata/uid").filter(|u| !u.is_null())
        && Some(uid) != live.pointer("/metadata/uid")
    {
        return Err(ApiError::conflict(format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            live.pointer("/metadata/uid").unwrap_or(&Value::Null)
        )));
    }
    if let Some(rv) = new.pointer("/metadata/resourceVersion").filter(|v| !v.is_null())
        && Some(rv) != live.pointer("/metadata/resourceVersion")
    {
        return Err(ApiError::conflict(format!(
            "Operation cannot be fulfilled on {}s {name:?}: the object has been modified; please apply your changes to the latest version and try again",
            kind.to_ascii_lowercase()
        )));
    }
    // server-set metadata and the status are not written through a patch
    for key in ["uid", "resourceVersion", "creationTimestamp", "generation", "selfLink"] {
        match live.pointer(&format!("/metadata/{key}")) {
            Some(v) => new["metadata"][key] = v.clone(),
            None => {
                if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove(key);
                }
            }
        }
    }
    let map = new.as_object_mut().expect("checked above");
    match live.get("status") {
        Some(s) => {
            map.insert("status".into(), s.clone());
        }
        None => {
            if kind == "Pod" {
                map.remove("status");
            }
        }
    }
    let warnings = validate_fields(kind, name, &mut new, params.field_validation)?;
    Ok(Patched { object: new, warnings })
}

/// Check `obj`'s fields against podwarden's own field tables (the manifest
/// parser's, `model::fields` for a Pod and `model::objects` for a
/// ConfigMap or Secret): fields that podwarden rejects are 422 Invalid
/// (a Pod's every one, as causes);
/// fields that are not in the schema are refused (`Strict`, 400 with
/// `strict decoding error: unknown field "spec.foo"`) or dropped and
/// returned as warnings (`Warn`) or dropped silently (`Ignore`).
pub fn validate_fields(kind: &str, name: &str, obj: &mut Value, mode: FieldValidation) -> Res<Vec<String>> {
    let found = match kind {
        "Pod" => fields::check(obj).map_err(|e| ApiError::fields_invalid(kind, name, &e))?,
        "ConfigMap" | "Secret" => {
            let k = if kind == "Secret" { model_objects::Kind::Secret } else { model_objects::Kind::ConfigMap };
            let mut top = Vec::new();
            if let Value::Object(map) = &*obj {
                let probe = Value::Object(map.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
                match model_objects::from_value(k, "(request)", probe) {
                    Ok((_, w)) => top = w,
                    Err(e) => return Err(ApiError::fields_invalid(kind, name, &e)),
                }
            }
            top
        }
        _ => Vec::new(),
    };
    let unknown: Vec<String> = found.into_iter().filter(|w| w.starts_with("unknown field ")).collect();
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    if mode == FieldValidation::Strict {
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"v1\" cannot be handled as a {kind}: strict decoding error: {}",
            unknown.join(", ")
        )));
    }
    for w in &unknown {
        if let Some(path) = w.strip_prefix("unknown field ").and_then(|q| serde_json::from_str::<String>(q).ok()) {
            remove_shown_path(obj, &path);
        }
    }
    Ok(if mode == FieldValidation::Warn { unknown } else { Vec::new() })
}

/// Remove the field at a path as the field table shows it
/// (`spec.containers[0].foo`).
fn remove_shown_path(obj: &mut Value, path: &str) {
    let mut steps: Vec<Result<&str, usize>> = Vec::new();
    for part in path.split('.') {
        let (key, rest) = part.split_once('[').map_or((part, ""), |(k, r)| (k, r));
        steps.push(Ok(key));
        for idx in rest.split('[').filter(|s| !s.is_empty()) {
            match idx.trim_end_matches(']').parse() {
                Ok(i) => steps.push(Err(i)),
                Err(_) => return,
            }
        }
    }
    let Some((last, parents)) = steps.split_last() else { return };
    let mut at = obj;
    for s in parents {
        let next = match s {
            Ok(k) => at.get_mut(*k),
            Err(i) => at.get_mut(*i),
        };
        match next {
            Some(n) => at = n,
            None => return,
        }
    }
    if let (Ok(k), Some(m)) = (last, at.as_object_mut()) {
        m.remove(*k);
    }
}

/// The object to store as the pod's (or object's) manifest after a write:
/// without status and the fields the server sets; keeps the labels,
/// annotations (with `kubectl.kubernetes.io/last-applied-configuration`)
/// and `managedFields`, which the manifest parser accepts and ignores.
pub fn manifest_of(obj: &Value) -> Value {
    let mut m = obj.clone();
    if let Some(map) = m.as_object_mut() {
        map.remove("status");
    }
    if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in ["uid", "resourceVersion", "creationTimestamp", "generation", "selfLink"] {
            meta.remove(key);
        }
        if let Some(Value::Object(ann)) = meta.get_mut("annotations") {
            ann.retain(|k, _| !k.starts_with("kubernetes.io/config."));
            if ann.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    m
}

/// How a list field is merged, from the Kubernetes types'
/// `patchStrategy`/`patchMergeKey` tags (and `listMapKeys` for
/// server-side apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    /// Replaced whole (`atomic`, no patch strategy).
    Atomic,
    /// A set of scalars, merged by value (`patchStrategy: merge`).
    Set,
    /// Items merged by their `patchMergeKey`; server-side apply identifies
    /// them by all of `keys` (the first is the merge key).
    Map { keys: &'static [&'static str] },
}

const CONTAINER_LISTS: [&str; 3] = ["spec.containers[]", "spec.initContainers[]", "spec.ephemeralContainers[]"];

/// How the list at `path` (dotted JSON names, `[]` for list items, from
/// the object's root) of a `kind` merges.
pub fn list_kind(kind: &str, path: &str) -> ListKind {
    const NAME: &[&str] = &["name"];
    let map = |keys| ListKind::Map { keys };
    match path {
        "metadata.finalizers" => return ListKind::Set,
        "metadata.ownerReferences" => return map(&["uid"]),
        _ => {}
    }
    match kind {
        "Pod" => {
            for c in CONTAINER_LISTS {
                if let Some(field) = path.strip_prefix(c).and_then(|r| r.strip_prefix('.')) {
                    return match field {
                        "ports" => map(&["containerPort", "protocol"]),
                        "env" => map(NAME),
                        "volumeMounts" => map(&["mountPath"]),
                        "volumeDevices" => map(&["devicePath"]),
                        _ => ListKind::Atomic,
                    };
                }
            }
            match path {
                "spec.containers"
                | "spec.initContainers"
                | "spec.ephemeralContainers"
                | "spec.volumes"
                | "spec.imagePullSecrets"
                | "spec.schedulingGates"
                | "spec.resourceClaims" => map(NAME),
                "spec.hostAliases" => map(&["ip"]),
                "spec.topologySpreadConstraints" => map(&["topologyKey", "whenUnsatisfiable"]),
                "status.conditions" => map(&["type"]),
                "status.podIPs" | "status.hostIPs" => map(&["ip"]),
                "status.resourceClaimStatuses" => map(NAME),
                _ => ListKind::Atomic,
            }
        }
        "Node" => match path {
            "status.conditions" | "status.addresses" => map(&["type"]),
            _ => ListKind::Atomic,
        },
        _ => ListKind::Atomic,
    }
}

//! Writes to an existing object, as the API server does them, pure: the
//! three patch types kubectl sends (`application/json-patch+json`, RFC
//! 6902; `application/merge-patch+json`, RFC 7386;
//! `application/strategic-merge-patch+json`, lists merged by the
//! `patchMergeKey` of the Kubernetes types), server-side apply
//! (`application/apply-patch+yaml`, in `ssa`), the request's parameters
//! (`fieldManager`, `force`, `fieldValidation`), field validation through
//! the manifest parser's own field table; refusals are the APIs' one
//! error (`api::status::ApiError`) for the HTTPS server to send.
//!
//! The shared parts (parameters, validation, list strategies) are the
//! folder's (`write`).

use serde_json::{Map, Value};

use super::{ListKind, Params, Patched, finish, list_kind, ssa};
use crate::api::status::{ApiError, Cause, Res};
use crate::model::bounded_yaml;

/// Largest patch body read (the API server's limit is 3 MiB; a manifest
/// here is at most 1 MiB).
pub const MAX_PATCH_BYTES: usize = 1024 * 1024;

/// The body's format, from the request's `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    /// The patch type of a `Content-Type` (parameters such as `charset`
    /// ignored); 415 for anything else, listing what is accepted.
    pub fn from_content_type(content_type: &str) -> Res<PatchType> {
        let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        match media.as_str() {
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            "application/apply-patch+yaml" => Ok(PatchType::Apply),
            _ => Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, \
                 application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type:?})"
            ))),
        }
    }
}

/// Apply a PATCH request to `live` (the object as served, a `Pod`,
/// `ConfigMap` or `Secret`): parse the body by `content_type`, patch,
/// keep identity and status, check the fields by `params.field_validation`
/// and record the field manager in `managedFields`.
pub fn apply(kind: &str, live: &Value, body: &[u8], content_type: &str, params: &Params) -> Res<Patched> {
    let patch_type = PatchType::from_content_type(content_type)?;
    if body.len() > MAX_PATCH_BYTES {
        return Err(ApiError::too_large(format!(
            "the patch is {} bytes, over the limit of {MAX_PATCH_BYTES}",
            body.len()
        )));
    }
    if patch_type == PatchType::Apply {
        return ssa::server_side_apply(kind, Some(live), body, params);
    }
    if params.force {
        return Err(ApiError::invalid(
            "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch",
        )
        .with_causes(vec![Cause::new(
            "FieldValueForbidden",
            "force",
            "Forbidden: may not be specified for non-apply patch",
        )]));
    }
    let text = std::str::from_utf8(body).map_err(|e| ApiError::bad_request(format!("the patch is not UTF-8: {e}")))?;
    let patch = one_json(text)?;
    let patched = match patch_type {
        PatchType::Json => json_patch(live, &patch)?,
        PatchType::Merge => merge_patch(live, &patch),
        PatchType::Strategic => strategic_merge(kind, live, &patch)?,
        PatchType::Apply => unreachable!("handled above"),
    };
    let mut out = finish(kind, live, patched, params)?;
    let manager = params.field_manager.as_deref().unwrap_or(default_manager(patch_type));
    ssa::record_update(kind, Some(live), &mut out.object, manager, &params.now);
    Ok(out)
}

/// The manager a patch without `fieldManager` is recorded under (the API
/// server derives it from the user agent; kubectl always sends one).
fn default_manager(_: PatchType) -> &'static str {
    "unknown"
}

/// Exactly one JSON document, bounded like a manifest.
fn one_json(text: &str) -> Res<Value> {
    let mut docs = bounded_yaml::parse_json_bounded(text)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
    match docs.len() {
        1 => Ok(docs.remove(0)),
        n => Err(ApiError::bad_request(format!("invalid patch: expected one JSON document, got {n}"))),
    }
}

// ---- RFC 7386 JSON merge patch ----

/// RFC 7386: objects merged key by key, `null` removes a key, anything else
/// replaces.
pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    let Value::Object(p) = patch else { return patch.clone() };
    let mut out = match target {
        Value::Object(t) => t.clone(),
        _ => Map::new(),
    };
    for (k, v) in p {
        if v.is_null() {
            out.remove(k);
        } else {
            let merged = merge_patch(out.get(k).unwrap_or(&Value::Null), v);
            out.insert(k.clone(), merged);
        }
    }
    Value::Object(out)
}

/// The merge patch that turns `from` into `to` (RFC 7386's inverse; used
/// by the tests and for `managedFields` diffs).
pub fn merge_diff(from: &Value, to: &Value) -> Value {
    match (from, to) {
        (Value::Object(f), Value::Object(t)) => {
            let mut out = Map::new();
            for k in f.keys().filter(|k| !t.contains_key(*k)) {
                out.insert(k.clone(), Value::Null);
            }
            for (k, tv) in t {
                match f.get(k) {
                    Some(fv) if fv == tv => {}
                    Some(fv @ Value::Object(_)) if tv.is_object() => {
                        out.insert(k.clone(), merge_diff(fv, tv));
                    }
                    _ => {
                        out.insert(k.clone(), tv.clone());
                    }
                }
            }
            Value::Object(out)
        }
        _ => to.clone(),
    }
}

// ---- RFC 6902 JSON patch ----

/// Bounds: at most this many operations in one JSON patch.
const MAX_JSON_PATCH_OPS: usize = 10_000;

fn json_patch_error(patch: &Value, message: impl std::fmt::Display) -> ApiError {
    let shown = patch.to_string();
    let shown = if shown.len() > 512 {
        format!(
            "{}...",
            &shown[..shown.char_indices().take_while(|(i, _)| *i < 512).last().map_or(0, |(i, c)| i + c.len_utf8())]
        )
    } else {
        shown
    };
    ApiError::invalid(format!("the server rejected our request due to an error in our request: {message}"))
        .with_causes(vec![Cause::new("FieldValueInvalid", "patch", format!("Invalid value: {shown:?}: {message}"))])
}

/// RFC 6902: `add`, `remove`, `replace`, `move`, `copy`, `test`, in order,
/// all or nothing. Failing operations are 422 Invalid as the API server
/// answers them.
pub fn json_patch(doc: &Value, patch: &Value) -> Res<Value> {
    let Value::Array(ops) = patch else {
        return Err(ApiError::bad_request("a JSON patch is a list of operations"));
    };
    if ops.len() > MAX_JSON_PATCH_OPS {
        return Err(ApiError::bad_request(format!("a JSON patch has at most {MAX_JSON_PATCH_OPS} operations")));
    }
    let mut doc = doc.clone();
    for (i, op) in ops.iter().enumerate() {
        let fail = |m: String| json_patch_error(patch, format!("operation {i}: {m}"));
        let name = op.get("op").and_then(Value::as_str).ok_or_else(|| fail("missing \"op\"".into()))?;
        let path = op.get("path").and_then(Value::as_str).ok_or_else(|| fail("missing \"path\"".into()))?;
        let path = pointer(path).map_err(|e| fail(e.message))?;
        let value = || op.get("value").cloned().ok_or_else(|| fail("missing \"value\"".into()));
        let from = || -> Res<Vec<String>> {
            let f = op.get("from").and_then(Value::as_str).ok_or_else(|| fail("missing \"from\"".into()))?;
            pointer(f).map_err(|e| fail(e.message))
        };
        match name {
            "add" => add(&mut doc, &path, value()?).map_err(|e| fail(e.message))?,
            "remove" => {
                remove(&mut doc, &path).map_err(|e| fail(e.message))?;
            }
            "replace" => {
                remove(&mut doc, &path).map_err(|e| fail(e.message))?;
                add(&mut doc, &path, value()?).map_err(|e| fail(e.message))?;
            }
            "move" => {
                let from = from()?;
                if path.len() > from.len() && path[..from.len()] == from[..] {
                    return Err(fail("cannot move a value into itself".into()));
                }
                let v = remove(&mut doc, &from).map_err(|e| fail(e.message))?;
                add(&mut doc, &path, v).map_err(|e| fail(e.message))?;
            }
            "copy" => {
                let v = get(&doc, &from()?).cloned().ok_or_else(|| fail("\"from\" does not exist".into()))?;
                add(&mut doc, &path, v).map_err(|e| fail(e.message))?;
            }
            "test" => {
                let want = value()?;
                if get(&doc, &path) != Some(&want) {
                    return Err(fail(format!("testing value {} failed", show_pointer(&path))));
                }
            }
            other => return Err(fail(format!("unknown op {other:?}"))),
        }
    }
    Ok(doc)
}

/// Why one JSON patch operation failed: a 422 whose message
/// [`json_patch`] puts in context ([`json_patch_error`]).
fn op_failed(message: String) -> ApiError {
    ApiError::invalid(message)
}

/// A JSON pointer's reference tokens (`~1` is `/`, `~0` is `~`).
fn pointer(p: &str) -> Res<Vec<String>> {
    if p.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = p.strip_prefix('/') else {
        return Err(op_failed(format!("{p:?} is not a JSON pointer (must start with '/')")));
    };
    rest.split('/')
        .map(|t| {
            let mut out = String::with_capacity(t.len());
            let mut chars = t.chars();
            while let Some(c) = chars.next() {
                match (c, c == '~') {
                    (_, true) => match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => return Err(op_failed(format!("{p:?}: '~' must be followed by 0 or 1"))),
                    },
                    (c, false) => out.push(c),
                }
            }
            Ok(out)
        })
        .collect()
}

fn show_pointer(p: &[String]) -> String {
    p.iter().map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1"))).collect()
}

fn index(token: &str, len: usize, append: bool) -> Res<usize> {
    if append && token == "-" {
        return Ok(len);
    }
    let valid =
        !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit()) && (token == "0" || !token.starts_with('0'));
    match token.parse::<usize>() {
        Ok(i) if valid && (i < len || (append && i == len)) => Ok(i),
        _ => Err(op_failed(format!("index {token:?} is out of range (length {len})"))),
    }
}

fn get<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut at = doc;
    for t in path {
        at = match at {
            Value::Object(m) => m.get(t)?,
            Value::Array(a) => a.get(index(t, a.len(), false).ok()?)?,
            _ => return None,
        };
    }
    Some(at)
}

fn parent_of<'a>(doc: &'a mut Value, path: &[String]) -> Res<&'a mut Value> {
    let mut at = doc;
    for t in path {
        at = match at {
            Value::Object(m) => {
                m.get_mut(t).ok_or_else(|| op_failed(format!("{} does not exist", show_pointer(path))))?
            }
            Value::Array(a) => {
                let i = index(t, a.len(), false)?;
                &mut a[i]
            }
            _ => return Err(op_failed(format!("{} is not an object or a list", show_pointer(path)))),
        };
    }
    Ok(at)
}

fn add(doc: &mut Value, path: &[String], v: Value) -> Res<()> {
    let Some((last, parents)) = path.split_last() else {
        *doc = v;
        return Ok(());
    };
    match parent_of(doc, parents)? {
        Value::Object(m) => {
            m.insert(last.clone(), v);
            Ok(())
        }
        Value::Array(a) => {
            let i = index(last, a.len(), true)?;
            a.insert(i, v);
            Ok(())
        }
        _ => Err(op_failed(format!("cannot add {}: its parent is not an object or a list", show_pointer(path)))),
    }
}

fn remove(doc: &mut Value, path: &[String]) -> Res<Value> {
    let Some((last, parents)) = path.split_last() else {
        return Ok(std::mem::take(doc));
    };
    let missing = || format!("{} does not exist", show_pointer(path));
    match parent_of(doc, parents)? {
        Value::Object(m) => m.remove(last).ok_or_else(|| op_failed(missing())),
        Value::Array(a) => {
            let i = index(last, a.len(), false)?;
            Ok(a.remove(i))
        }
        _ => Err(op_failed(missing())),
    }
}

// ---- strategic merge patch ----

/// Whether `kind` takes strategic merge patches (built-in types only: the
/// API server answers 415 for others).
fn strategic_kind(kind: &str) -> bool {
    matches!(kind, "Pod" | "ConfigMap" | "Secret" | "Node" | "Namespace" | "Event")
}

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";
const SET_ORDER: &str = "$setElementOrder/";

/// Apply a strategic merge patch: maps merged key by key (`null` deletes),
/// lists by `list_kind`, with the directives `$patch: replace|merge|delete`,
/// `$retainKeys`, `$deleteFromPrimitiveList/<list>` and
/// `$setElementOrder/<list>`.
pub fn strategic_merge(kind: &str, live: &Value, patch: &Value) -> Res<Value> {
    if !strategic_kind(kind) {
        return Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - strategic merge patch is not supported for {kind}"
        )));
    }
    let Value::Object(p) = patch else {
        return Err(ApiError::bad_request("a strategic merge patch is a JSON object"));
    };
    let original = live.as_object().cloned().unwrap_or_default();
    match smp_map(kind, "", original, p)? {
        Some(m) => Ok(Value::Object(m)),
        None => Err(ApiError::bad_request("a strategic merge patch cannot delete the whole object")),
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

/// Merge patch map `p` into `original`; `None` when the map is deleted.
fn smp_map(
    kind: &str,
    path: &str,
    mut original: Map<String, Value>,
    p: &Map<String, Value>,
) -> Res<Option<Map<String, Value>>> {
    match p.get(DIRECTIVE).map(|d| d.as_str()) {
        None | Some(Some("merge")) => {}
        Some(Some("delete")) => return Ok(None),
        Some(Some("replace")) => {
            let mut rest = p.clone();
            rest.remove(DIRECTIVE);
            return smp_map(kind, path, Map::new(), &rest);
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Unknown patch type: {} in map at {}",
                other.map_or_else(|| p[DIRECTIVE].to_string(), str::to_string),
                if path.is_empty() { "(root)" } else { path }
            )));
        }
    }
    if let Some(retain) = p.get(RETAIN_KEYS) {
        let Value::Array(keys) = retain else {
            return Err(ApiError::bad_request(format!("{RETAIN_KEYS} at {path} must be a list of field names")));
        };
        let keys: Vec<&str> = keys.iter().filter_map(Value::as_str).collect();
        if let Some(k) = p.keys().find(|k| !k.starts_with('$') && !keys.contains(&k.as_str())) {
            return Err(ApiError::bad_request(format!(
                "{RETAIN_KEYS} at {path} does not list {k:?}, which the patch sets"
            )));
        }
        original.retain(|k, _| keys.contains(&k.as_str()));
    }
    for (k, v) in p {
        if let Some(field) = k.strip_prefix(DELETE_FROM) {
            let Value::Array(gone) = v else {
                return Err(ApiError::bad_request(format!("{k} at {path} must be a list")));
            };
            if let Some(Value::Array(list)) = original.get_mut(field) {
                list.retain(|x| !gone.contains(x));
            }
        }
    }
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        let at = child(path, k);
        if v.is_null() {
            original.remove(k);
            continue;
        }
        let merged = match (original.remove(k), v) {
            (Some(Value::Object(o)), Value::Object(pv)) => smp_map(kind, &at, o, pv)?.map(Value::Object),
            (None, Value::Object(pv)) => smp_map(kind, &at, Map::new(), pv)?.map(Value::Object),
            (Some(Value::Array(o)), Value::Array(pv)) => Some(Value::Array(smp_list(kind, &at, o, pv)?)),
            (None, Value::Array(pv)) => Some(Value::Array(smp_list(kind, &at, Vec::new(), pv)?)),
            (_, v) => Some(v.clone()),
        };
        if let Some(m) = merged {
            original.insert(k.clone(), m);
        }
    }
    for (k, v) in p {
        if let Some(field) = k.strip_prefix(SET_ORDER) {
            let Value::Array(order) = v else {
                return Err(ApiError::bad_request(format!("{k} at {path} must be a list")));
            };
            let list_path = child(path, field);
            if let Some(Value::Array(list)) = original.get_mut(field) {
                set_order(list, order, list_kind(kind, &list_path));
            }
        }
    }
    Ok(Some(original))
}

/// The merge-key value of a list item (the first key of a `Map` list).
fn merge_key(item: &Value, kind: ListKind) -> Option<&Value> {
    match kind {
        ListKind::Map { keys } => item.get(keys[0]),
        _ => Some(item),
    }
}

fn set_order(list: &mut [Value], order: &[Value], kind: ListKind) {
    let position = |item: &Value| -> usize {
        let key = merge_key(item, kind);
        order
            .iter()
            .position(|o| match kind {
                ListKind::Map { keys } => o.get(keys[0]).is_some() && o.get(keys[0]) == key,
                _ => Some(o) == key,
            })
            .unwrap_or(usize::MAX)
    };
    // stable: items the order does not name keep their relative place after
    list.sort_by_key(position);
}

fn smp_list(kind: &str, path: &str, original: Vec<Value>, p: &[Value]) -> Res<Vec<Value>> {
    let lk = list_kind(kind, path);
    let is_directive = |v: &Value, d: &str| v.get(DIRECTIVE).and_then(Value::as_str) == Some(d);
    let item_path = format!("{path}[]");
    if p.iter().any(|v| is_directive(v, "replace") && v.as_object().is_some_and(|m| m.len() == 1)) {
        let rest: Vec<Value> = p.iter().filter(|v| !is_directive(v, "replace")).cloned().collect();
        return smp_list(kind, path, Vec::new(), &rest);
    }
    match lk {
        // replaced as sent, as the API server replaces a list without a strategy
        ListKind::Atomic => Ok(p.to_vec()),
        ListKind::Set => {
            let mut out = original;
            for v in p {
                if !out.contains(v) {
                    out.push(v.clone());
                }
            }
            Ok(out)
        }
        ListKind::Map { keys } => {
            let key = keys[0];
            let mut out = original;
            for item in p {
                let Value::Object(m) = item else {
                    return Err(ApiError::bad_request(format!(
                        "{path}: list items must be objects (merged by {key:?})"
                    )));
                };
                let Some(kv) = m.get(key) else {
                    return Err(ApiError::bad_request(format!(
                        "{path}: map does not contain declared merge key: {key}"
                    )));
                };
                let found = out.iter().position(|o| o.get(key) == Some(kv));
                if is_directive(item, "delete") {
                    out.retain(|o| o.get(key) != Some(kv));
                    continue;
                }
                match found {
                    Some(i) => {
                        let o = match std::mem::take(&mut out[i]) {
                            Value::Object(o) => o,
                            _ => Map::new(),
                        };
                        match smp_map(kind, &item_path, o, m)? {
                            Some(merged) => out[i] = Value::Object(merged),
                            None => {
                                out.remove(i);
                            }
                        }
                    }
                    None => {
                        if let Some(new) = smp_map(kind, &item_path, Map::new(), m)? {
                            out.push(Value::Object(new));
                        }
                    }
                }
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{FieldValidation, manifest_of};
    use super::*;
    use crate::api::query::Query;
    use proptest::prelude::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "uid": "u1", "resourceVersion": "7",
                         "labels": {"app": "web"}, "finalizers": ["a", "b"]},
            "spec": {
                "containers": [
                    {"name": "app", "image": "nginx:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                     "ports": [{"containerPort": 80}], "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                    {"name": "side", "image": "busybox"}
                ],
                "volumes": [{"name": "data", "emptyDir": {}}],
                "tolerations": [{"key": "a", "operator": "Exists"}]
            },
            "status": {"phase": "Running"}
        })
    }

    /// The pod as served, without the fields podwarden refuses (finalizers,
    /// tolerations).
    fn live_pod() -> Value {
        let mut p = pod();
        p["metadata"].as_object_mut().unwrap().remove("finalizers");
        p["spec"].as_object_mut().unwrap().remove("tolerations");
        p
    }

    fn smp(patch: Value) -> Value {
        strategic_merge("Pod", &pod(), &patch).unwrap()
    }

    fn names(list: &Value) -> Vec<&str> {
        list.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect()
    }

    #[test]
    fn strategic_merge_merges_containers_by_name_and_env_by_name() {
        let out = smp(
            json!({"spec": {"containers": [{"name": "app", "image": "nginx:2", "env": [{"name": "C", "value": "3"}]}]}}),
        );
        assert_eq!(out["spec"]["containers"][0]["image"], "nginx:2");
        assert_eq!(names(&out["spec"]["containers"]), ["app", "side"]);
        assert_eq!(names(&out["spec"]["containers"][0]["env"]), ["A", "B", "C"]);
        // a new container is appended
        let out = smp(json!({"spec": {"containers": [{"name": "third", "image": "x"}]}}));
        assert_eq!(names(&out["spec"]["containers"]), ["app", "side", "third"]);
    }

    #[test]
    fn strategic_merge_keys_of_ports_mounts_volumes() {
        let out = smp(json!({"spec": {"containers": [{"name": "app",
            "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 443}],
            "volumeMounts": [{"mountPath": "/data", "readOnly": true}]}],
            "volumes": [{"name": "cache", "emptyDir": {}}]}}));
        let c = &out["spec"]["containers"][0];
        assert_eq!(c["ports"], json!([{"containerPort": 80, "name": "http"}, {"containerPort": 443}]));
        assert_eq!(c["volumeMounts"], json!([{"name": "data", "mountPath": "/data", "readOnly": true}]));
        assert_eq!(names(&out["spec"]["volumes"]), ["data", "cache"]);
    }

    #[test]
    fn strategic_merge_replaces_atomic_lists_and_unions_sets() {
        let out = smp(
            json!({"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}, "metadata": {"finalizers": ["b", "c"]}}),
        );
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "b", "operator": "Exists"}]));
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b", "c"]));
    }

    #[test]
    fn strategic_merge_null_deletes_a_key() {
        let out = smp(json!({"metadata": {"labels": {"app": null, "tier": "web"}}}));
        assert_eq!(out["metadata"]["labels"], json!({"tier": "web"}));
    }

    #[test]
    fn directive_patch_delete_removes_a_list_item_and_a_map() {
        let out = smp(json!({"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}));
        assert_eq!(names(&out["spec"]["containers"]), ["app"]);
        let out = smp(json!({"metadata": {"labels": {"$patch": "delete"}}}));
        assert!(out["metadata"].get("labels").is_none());
    }

    #[test]
    fn directive_patch_replace_on_a_map_and_a_list() {
        let out = smp(json!({"metadata": {"labels": {"$patch": "replace", "new": "1"}}}));
        assert_eq!(out["metadata"]["labels"], json!({"new": "1"}));
        let out = smp(json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "x"}]}}));
        assert_eq!(out["spec"]["containers"], json!([{"name": "only", "image": "x"}]));
    }

    #[test]
    fn directive_patch_merge_is_the_default() {
        assert_eq!(
            smp(json!({"metadata": {"labels": {"$patch": "merge", "x": "1"}}}))["metadata"]["labels"],
            json!({"app": "web", "x": "1"})
        );
    }

    #[test]
    fn an_unknown_directive_is_a_bad_request() {
        let err = strategic_merge("Pod", &pod(), &json!({"metadata": {"labels": {"$patch": "explode"}}})).unwrap_err();
        assert_eq!((err.code, err.reason), (400, "BadRequest"));
        assert!(err.message.contains("explode"), "{}", err.message);
    }

    #[test]
    fn directive_retain_keys_drops_the_other_source() {
        // a volume switched from emptyDir to hostPath, as kubectl sends it
        let out = smp(
            json!({"spec": {"volumes": [{"name": "data", "$retainKeys": ["hostPath", "name"], "hostPath": {"path": "/srv"}}]}}),
        );
        assert_eq!(out["spec"]["volumes"], json!([{"name": "data", "hostPath": {"path": "/srv"}}]));
        let err = strategic_merge(
            "Pod",
            &pod(),
            &json!({"spec": {"volumes": [{"name": "data", "$retainKeys": ["name"], "hostPath": {}}]}}),
        )
        .unwrap_err();
        assert_eq!(err.code, 400);
    }

    #[test]
    fn directive_delete_from_primitive_list() {
        let out = smp(json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}));
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn directive_set_element_order() {
        let out = smp(json!({"spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "app"}],
                                      "containers": [{"name": "app", "image": "nginx:3"}]}}));
        assert_eq!(names(&out["spec"]["containers"]), ["side", "app"]);
        assert_eq!(out["spec"]["containers"][1]["image"], "nginx:3");
        let out = smp(json!({"metadata": {"$setElementOrder/finalizers": ["b", "a"]}}));
        assert_eq!(out["metadata"]["finalizers"], json!(["b", "a"]));
    }

    #[test]
    fn a_merge_list_item_without_its_key_is_refused() {
        let err = strategic_merge("Pod", &pod(), &json!({"spec": {"containers": [{"image": "x"}]}})).unwrap_err();
        assert_eq!(err.message, "spec.containers: map does not contain declared merge key: name");
    }

    #[test]
    fn strategic_merge_of_other_kinds_is_415() {
        let err = strategic_merge("Widget", &json!({}), &json!({})).unwrap_err();
        assert_eq!((err.code, err.reason), (415, "UnsupportedMediaType"));
    }

    // RFC 7386 appendix A, every example
    #[test]
    fn merge_patch_rfc7386_examples() {
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (json!({"a":"b","b":"c"}), json!({"a":null}), json!({"b":"c"})),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (json!({"a":{"b":"c"}}), json!({"a":{"b":"d","c":null}}), json!({"a":{"b":"d"}})),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a":"b"}), json!(["c"]), json!(["c"])),
            (json!({"a":"foo"}), json!(null), json!(null)),
            (json!({"a":"foo"}), json!("bar"), json!("bar")),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (json!({}), json!({"a":{"bb":{"ccc":null}}}), json!({"a":{"bb":{}}})),
        ];
        for (target, patch, want) in cases {
            assert_eq!(merge_patch(&target, &patch), want, "{target} + {patch}");
        }
    }

    fn jp(doc: Value, patch: Value) -> Res<Value> {
        json_patch(&doc, &patch)
    }

    // RFC 6902 appendix A
    #[test]
    fn json_patch_rfc6902_examples() {
        let ok = |doc, patch, want: Value| assert_eq!(jp(doc, patch).unwrap(), want);
        ok(json!({"foo":"bar"}), json!([{"op":"add","path":"/baz","value":"qux"}]), json!({"baz":"qux","foo":"bar"}));
        ok(
            json!({"foo":["bar","baz"]}),
            json!([{"op":"add","path":"/foo/1","value":"qux"}]),
            json!({"foo":["bar","qux","baz"]}),
        );
        ok(json!({"baz":"qux","foo":"bar"}), json!([{"op":"remove","path":"/baz"}]), json!({"foo":"bar"}));
        ok(json!({"foo":["bar","qux","baz"]}), json!([{"op":"remove","path":"/foo/1"}]), json!({"foo":["bar","baz"]}));
        ok(
            json!({"baz":"qux","foo":"bar"}),
            json!([{"op":"replace","path":"/baz","value":"boo"}]),
            json!({"baz":"boo","foo":"bar"}),
        );
        ok(
            json!({"foo":{"bar":"baz","waldo":"fred"},"qux":{"corge":"grault"}}),
            json!([{"op":"move","from":"/foo/waldo","path":"/qux/thud"}]),
            json!({"foo":{"bar":"baz"},"qux":{"corge":"grault","thud":"fred"}}),
        );
        ok(
            json!({"foo":["all","grass","cows","eat"]}),
            json!([{"op":"move","from":"/foo/1","path":"/foo/3"}]),
            json!({"foo":["all","cows","eat","grass"]}),
        );
        ok(
            json!({"baz":"qux","foo":["a",2,"c"]}),
            json!([{"op":"test","path":"/baz","value":"qux"},{"op":"test","path":"/foo/1","value":2}]),
            json!({"baz":"qux","foo":["a",2,"c"]}),
        );
        ok(
            json!({"foo":"bar"}),
            json!([{"op":"add","path":"/child","value":{"grandchild":{}}}]),
            json!({"foo":"bar","child":{"grandchild":{}}}),
        );
        ok(
            json!({"foo":["bar"]}),
            json!([{"op":"add","path":"/foo/-","value":["abc","def"]}]),
            json!({"foo":["bar",["abc","def"]]}),
        );
        ok(json!({"/":9,"~1":10}), json!([{"op":"test","path":"/~01","value":10}]), json!({"/":9,"~1":10}));
        ok(json!({"a/b":1,"m~n":2}), json!([{"op":"copy","from":"/a~1b","path":"/m~0n"}]), json!({"a/b":1,"m~n":1}));
        ok(json!({"foo":1}), json!([{"op":"replace","path":"","value":[1]}]), json!([1]));
        // failures: all 422 Invalid, the document untouched
        let bad = |doc: Value, patch: Value| {
            let e = jp(doc, patch).unwrap_err();
            assert_eq!((e.code, e.reason), (422, "Invalid"), "{}", e.message);
            e.message
        };
        assert!(
            bad(json!({"baz":"qux"}), json!([{"op":"test","path":"/baz","value":"bar"}]))
                .contains("testing value /baz failed")
        );
        bad(json!({"foo":"bar"}), json!([{"op":"add","path":"/baz/bat","value":"qux"}]));
        bad(json!({"/":9,"~1":10}), json!([{"op":"test","path":"/~01","value":"10"}]));
        bad(json!({"foo":["bar"]}), json!([{"op":"add","path":"/foo/2","value":1}]));
        bad(json!({"foo":["bar"]}), json!([{"op":"remove","path":"/foo/01"}]));
        bad(json!({"foo":1}), json!([{"op":"remove","path":"/bar"}]));
        bad(json!({"foo":1}), json!([{"op":"replace","path":"/bar","value":1}]));
        bad(json!({"foo":{"a":1}}), json!([{"op":"move","from":"/foo","path":"/foo/b"}]));
        bad(json!({"foo":1}), json!([{"op":"frobnicate","path":"/foo"}]));
        bad(json!({"foo":1}), json!([{"op":"add","path":"foo","value":1}]));
        bad(json!({"foo":1}), json!([{"op":"add","path":"/a~2","value":1}]));
        assert_eq!(jp(json!({}), json!({"op": "add"})).unwrap_err().code, 400);
    }

    fn params(v: FieldValidation) -> Params {
        Params {
            field_validation: v,
            field_manager: Some("kubectl-patch".into()),
            now: "2026-11-25T20:00:00Z".into(),
            ..Params::default()
        }
    }

    #[test]
    fn apply_picks_the_patch_type_by_content_type() {
        let live = live_pod();
        let p = params(FieldValidation::Strict);
        let body = br#"{"spec":{"containers":[{"name":"app","image":"nginx:9"}]}}"#;
        let smp = apply("Pod", &live, body, "application/strategic-merge-patch+json", &p).unwrap();
        assert_eq!(names(&smp.object["spec"]["containers"]), ["app", "side"]);
        // the same body as a merge patch replaces the list
        let merge = apply("Pod", &live, body, "application/merge-patch+json; charset=utf-8", &p).unwrap();
        assert_eq!(names(&merge.object["spec"]["containers"]), ["app"]);
        let json = apply(
            "Pod",
            &live,
            br#"[{"op":"replace","path":"/spec/containers/1/image","value":"x"}]"#,
            "application/json-patch+json",
            &p,
        )
        .unwrap();
        assert_eq!(json.object["spec"]["containers"][1]["image"], "x");
        let err = apply("Pod", &live, body, "text/plain", &p).unwrap_err();
        assert_eq!((err.code, err.reason), (415, "UnsupportedMediaType"));
        let err = apply("Pod", &live, b"{", "application/merge-patch+json", &p).unwrap_err();
        assert_eq!(err.code, 400);
        let forced = Params { force: true, ..p.clone() };
        let err = apply("Pod", &live, body, "application/merge-patch+json", &forced).unwrap_err();
        assert_eq!((err.code, err.reason), (422, "Invalid"));
    }

    #[test]
    fn a_patch_keeps_identity_and_status_and_records_its_manager() {
        let live = live_pod();
        let p = params(FieldValidation::Strict);
        let out = apply(
            "Pod",
            &live,
            br#"{"status":{"phase":"Failed"},"metadata":{"labels":{"x":"y"}}}"#,
            "application/merge-patch+json",
            &p,
        )
        .unwrap();
        assert_eq!(out.object["status"], live["status"]);
        let mf = &out.object["metadata"]["managedFields"][0];
        assert_eq!((mf["manager"].as_str(), mf["operation"].as_str()), (Some("kubectl-patch"), Some("Update")));
        assert_eq!(mf["fieldsV1"], json!({"f:metadata": {"f:labels": {"f:x": {}}}}));
        for (patch, code) in [
            (json!({"metadata": {"name": "other"}}), 400),
            (json!({"metadata": {"namespace": "kube-system"}}), 400),
            (json!({"kind": "Secret"}), 400),
            (json!({"metadata": {"uid": "u2"}}), 409),
            (json!({"metadata": {"resourceVersion": "6"}}), 409),
        ] {
            let e = apply("Pod", &live, patch.to_string().as_bytes(), "application/merge-patch+json", &p).unwrap_err();
            assert_eq!(e.code, code, "{patch}: {}", e.message);
        }
        // the current resourceVersion is a precondition that holds
        assert!(
            apply("Pod", &live, br#"{"metadata":{"resourceVersion":"7"}}"#, "application/merge-patch+json", &p).is_ok()
        );
    }

    #[test]
    fn field_validation_strict_warn_ignore() {
        let live = live_pod();
        let body = br#"{"spec":{"foo":1,"containers":[{"name":"app","bar":2}]}}"#;
        let ct = "application/strategic-merge-patch+json";
        let err = apply("Pod", &live, body, ct, &params(FieldValidation::Strict)).unwrap_err();
        assert_eq!((err.code, err.reason), (400, "BadRequest"));
        assert_eq!(
            err.message,
            "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field \"spec.containers[0].bar\", unknown field \"spec.foo\""
        );
        let warn = apply("Pod", &live, body, ct, &params(FieldValidation::Warn)).unwrap();
        assert_eq!(warn.warnings, ["unknown field \"spec.containers[0].bar\"", "unknown field \"spec.foo\""]);
        assert!(warn.object["spec"].get("foo").is_none() && warn.object["spec"]["containers"][0].get("bar").is_none());
        let ignore = apply("Pod", &live, body, ct, &params(FieldValidation::Ignore)).unwrap();
        assert!(ignore.warnings.is_empty());
        assert_eq!(ignore.object["spec"], warn.object["spec"]);
        // a field podwarden refuses is 422 Invalid, naming it
        let err =
            apply("Pod", &live, br#"{"spec":{"affinity":{"nodeAffinity":{}}}}"#, ct, &params(FieldValidation::Ignore))
                .unwrap_err();
        assert_eq!((err.code, err.reason), (422, "Invalid"));
        assert!(err.message.starts_with("Pod \"web\" is invalid: spec.affinity"), "{}", err.message);
    }

    #[test]
    fn field_validation_of_a_config_map() {
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}, "data": {"a": "1"}});
        let err = apply(
            "ConfigMap",
            &live,
            br#"{"dta":{"b":"2"}}"#,
            "application/merge-patch+json",
            &params(FieldValidation::Strict),
        )
        .unwrap_err();
        assert!(err.message.ends_with("strict decoding error: unknown field \"dta\""), "{}", err.message);
        let ok = apply(
            "ConfigMap",
            &live,
            br#"{"data":{"b":"2"}}"#,
            "application/strategic-merge-patch+json",
            &params(FieldValidation::Strict),
        )
        .unwrap();
        assert_eq!(ok.object["data"], json!({"a": "1", "b": "2"}));
        // a second write to the object, now with managedFields, and an apply
        let again = apply(
            "ConfigMap",
            &ok.object,
            br#"{"data":{"a":null}}"#,
            "application/merge-patch+json",
            &params(FieldValidation::Strict),
        )
        .unwrap();
        assert_eq!(again.object["data"], json!({"b": "2"}));
        let applied = apply(
            "ConfigMap",
            &again.object,
            b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {c: '3'}\n",
            "application/apply-patch+yaml",
            &params(FieldValidation::Strict),
        )
        .unwrap();
        assert_eq!(applied.object["data"], json!({"b": "2", "c": "3"}));
        let entries: Vec<(&str, &str)> = applied.object["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["manager"].as_str().unwrap(), e["operation"].as_str().unwrap()))
            .collect();
        assert_eq!(entries, [("kubectl-patch", "Update"), ("kubectl-patch", "Apply")]);
    }

    #[test]
    fn params_from_the_query() {
        let p = Params::from_query(
            &Query::parse("fieldManager=kubectl%2Dedit&force=true&fieldValidation=Strict&dryRun=All"),
            "t",
        )
        .unwrap();
        assert_eq!(p.field_manager.as_deref(), Some("kubectl-edit"));
        assert!(p.force);
        assert_eq!(p.field_validation, FieldValidation::Strict);
        assert!(p.dry_run);
        assert_eq!(Params::from_query(&Query::parse("dryRun=Some"), "t").unwrap_err().code, 400);
        assert_eq!(Params::from_query(&Query::parse(""), "t").unwrap().field_validation, FieldValidation::Warn);
        assert_eq!(Params::from_query(&Query::parse("fieldValidation=Loud"), "t").unwrap_err().code, 400);
        assert_eq!(Params::from_query(&Query::parse("force=maybe"), "t").unwrap_err().code, 400);
    }

    #[test]
    fn manifest_of_drops_status_and_server_fields() {
        let mut live = live_pod();
        live["metadata"]["annotations"] =
            json!({"kubernetes.io/config.hash": "h", "kubectl.kubernetes.io/last-applied-configuration": "{}"});
        let m = manifest_of(&live);
        assert!(m.get("status").is_none());
        assert!(m["metadata"].get("uid").is_none() && m["metadata"].get("resourceVersion").is_none());
        assert_eq!(m["metadata"]["annotations"], json!({"kubectl.kubernetes.io/last-applied-configuration": "{}"}));
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-5i64..5).prop_map(|n| json!(n)),
            "[a-c]{0,2}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map("[a-d]", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Merge patches cannot carry nulls as values: a null in the target
    /// is only reachable when it was already there.
    fn without_nulls(v: Value) -> Value {
        match v {
            Value::Object(m) => {
                Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k, without_nulls(v))).collect())
            }
            other => other,
        }
    }

    fn json_object() -> impl Strategy<Value = Value> {
        prop::collection::btree_map("[a-d]", json_value(), 0..4).prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        /// Where no list has a merge strategy, a strategic merge patch is
        /// a merge patch: the diff of two objects takes one to the other.
        #[test]
        fn strategic_merge_without_strategies_is_merge_patch(from in json_object(), to in json_object()) {
            let to = without_nulls(to);
            let diff = merge_diff(&from, &to);
            prop_assert_eq!(strategic_merge("ConfigMap", &from, &diff).unwrap(), to);
        }

        #[test]
        fn merge_patch_of_the_diff_round_trips(from in json_value(), to in json_value()) {
            let to = without_nulls(to);
            let diff = merge_diff(&from, &to);
            prop_assert_eq!(merge_patch(&from, &diff), to);
        }
    }
}

//! Server-side apply and `managedFields`, pure, in a simple but honest
//! form of the API server's structured-merge-diff:
//!
//! - an applied configuration (`application/apply-patch+yaml`) is merged
//!   into the live object field by field; lists merge as `patch::list_kind`
//!   says (items of a list-map identified by all their keys, sets by value,
//!   other lists replaced whole);
//! - each manager's fields are kept in `metadata.managedFields` as
//!   `FieldsV1` (`f:<field>`, `k:{<keys>}`, `v:<value>`, `.`);
//! - applying a value to a field another manager owns, when the value
//!   differs, is a 409 Conflict naming the manager and the field unless
//!   `force=true`, which takes the field over;
//! - a field the applier owned before and no longer applies is removed
//!   unless another manager owns it too;
//! - other writes (patches, creation) give the fields they change to their
//!   manager as an `Update` entry, taking them from the others.
//!
//! Simplifications (documented, not hidden): ownership is compared by
//! exact path (an atomic list owned by one manager and an item path owned
//! by another do not conflict); no defaulting of the applied config except
//! a list-map key `protocol` (TCP); `apiVersion` is always `v1`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::{ListKind, Params, Patched, finish, list_kind, validate_fields};
use crate::api::status::{ApiError, Cause, Res};
use crate::model::bounded_yaml;

/// One field's path: `FieldsV1` elements (`f:spec`, `k:{"name":"a"}`, `v:"x"`).
pub type FieldPath = Vec<String>;
/// A manager's fields.
pub type FieldSet = BTreeSet<FieldPath>;

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: Option<String>,
    fields: FieldSet,
}

/// The table path (`spec.containers[].env`) of a field path.
fn table_path(path: &[String]) -> String {
    let mut out = String::new();
    for e in path {
        if let Some(f) = e.strip_prefix("f:") {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(f);
        } else {
            out.push_str("[]");
        }
    }
    out
}

/// The `k:` element of a list-map item (the key fields, JSON).
fn key_element(item: &Value, keys: &[&str]) -> Option<String> {
    let mut key = Map::new();
    for k in keys {
        match item.get(*k) {
            Some(v) => {
                key.insert((*k).to_string(), v.clone());
            }
            None if *k == "protocol" => {
                key.insert("protocol".into(), Value::String("TCP".into()));
            }
            None if *k == keys[0] => return None,
            None => {}
        }
    }
    Some(format!("k:{}", Value::Object(key)))
}

/// Every field path `value` sets, under `prefix`.
fn collect(kind: &str, value: &Value, prefix: &mut FieldPath, out: &mut FieldSet) {
    match value {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                prefix.push(format!("f:{k}"));
                collect(kind, v, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => match list_kind(kind, &table_path(prefix)) {
            ListKind::Atomic => {
                out.insert(prefix.clone());
            }
            ListKind::Set => {
                for it in items {
                    prefix.push(format!("v:{it}"));
                    out.insert(prefix.clone());
                    prefix.pop();
                }
            }
            ListKind::Map { keys } => {
                for it in items {
                    let Some(e) = key_element(it, keys) else { continue };
                    prefix.push(e);
                    out.insert(prefix.clone());
                    collect(kind, it, prefix, out);
                    prefix.pop();
                }
            }
        },
        _ => {
            out.insert(prefix.clone());
        }
    }
}

/// The fields of an object that managers own: everything but identity,
/// server-set metadata and (for the main resource) status.
fn owned_fields(kind: &str, obj: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    collect(kind, obj, &mut Vec::new(), &mut out);
    out.retain(|p| {
        let first = p.first().map(String::as_str);
        let meta = p.get(1).map(String::as_str);
        match first {
            Some("f:apiVersion" | "f:kind" | "f:status") => false,
            Some("f:metadata") => !matches!(
                meta,
                Some(
                    "f:name"
                        | "f:namespace"
                        | "f:uid"
                        | "f:resourceVersion"
                        | "f:creationTimestamp"
                        | "f:generation"
                        | "f:selfLink"
                        | "f:managedFields"
                        | "f:deletionTimestamp"
                        | "f:deletionGracePeriodSeconds"
                )
            ),
            _ => true,
        }
    });
    out
}

/// The value at a field path, if any.
fn value_at<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut at = obj;
    for e in path {
        at = step(at, e)?;
    }
    Some(at)
}

fn item_matches(item: &Value, e: &str) -> bool {
    if let Some(k) = e.strip_prefix("k:") {
        let Ok(Value::Object(key)) = serde_json::from_str::<Value>(k) else { return false };
        key.iter().all(|(f, v)| item.get(f) == Some(v) || (f == "protocol" && item.get(f).is_none() && v == "TCP"))
    } else if let Some(v) = e.strip_prefix("v:") {
        serde_json::from_str::<Value>(v).ok().as_ref() == Some(item)
    } else {
        false
    }
}

fn step<'a>(at: &'a Value, e: &str) -> Option<&'a Value> {
    match e.strip_prefix("f:") {
        Some(f) => at.get(f),
        None => at.as_array()?.iter().find(|it| item_matches(it, e)),
    }
}

/// Remove the field (or list item) at `path`; nothing when absent.
fn remove_at(obj: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else { return };
    let mut at = obj;
    for e in parents {
        let next = match e.strip_prefix("f:") {
            Some(f) => at.get_mut(f),
            None => at.as_array_mut().and_then(|a| a.iter_mut().find(|it| item_matches(it, e))),
        };
        match next {
            Some(n) => at = n,
            None => return,
        }
    }
    match last.strip_prefix("f:") {
        Some(f) => {
            if let Some(m) = at.as_object_mut() {
                m.remove(f);
            }
        }
        None => {
            if let Some(a) = at.as_array_mut() {
                a.retain(|it| !item_matches(it, last));
            }
        }
    }
}

/// `FieldsV1` of a set: a tree of elements, `.` where an element with
/// children is itself owned (list-map items).
fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut at = &mut root;
        for e in path {
            at = at
                .entry(e.clone())
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("built as objects");
        }
    }
    // a list-map item is owned as a whole too
    fn mark(m: &mut Map<String, Value>, set: &FieldSet, prefix: &mut FieldPath) {
        for (k, v) in m.iter_mut() {
            prefix.push(k.clone());
            if let Value::Object(children) = v {
                if !children.is_empty() && set.contains(prefix) {
                    children.insert(".".into(), Value::Object(Map::new()));
                }
                mark(children, set, prefix);
            }
            prefix.pop();
        }
    }
    mark(&mut root, set, &mut Vec::new());
    Value::Object(root)
}

fn from_fields_v1(v: &Value, prefix: &mut FieldPath, out: &mut FieldSet) {
    let Value::Object(m) = v else { return };
    if m.is_empty() && !prefix.is_empty() {
        out.insert(prefix.clone());
    }
    for (k, child) in m {
        if k == "." {
            out.insert(prefix.clone());
            continue;
        }
        prefix.push(k.clone());
        from_fields_v1(child, prefix, out);
        prefix.pop();
    }
}

fn entries_of(obj: Option<&Value>) -> Vec<Entry> {
    let Some(Value::Array(list)) = obj.and_then(|o| o.pointer("/metadata/managedFields")) else { return Vec::new() };
    list.iter()
        .filter_map(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).map(str::to_string);
            let mut fields = FieldSet::new();
            from_fields_v1(e.get("fieldsV1").unwrap_or(&Value::Null), &mut Vec::new(), &mut fields);
            Some(Entry {
                manager: s("manager")?,
                operation: s("operation").unwrap_or_else(|| "Update".into()),
                api_version: s("apiVersion").unwrap_or_else(|| "v1".into()),
                time: s("time").unwrap_or_default(),
                subresource: s("subresource"),
                fields,
            })
        })
        .collect()
}

fn set_entries(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = serde_json::json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&e.fields),
            });
            if let Some(s) = &e.subresource {
                v["subresource"] = Value::String(s.clone());
            }
            v
        })
        .collect();
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = Value::Object(Map::new());
    }
    let meta = obj["metadata"].as_object_mut().expect("made an object above");
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// A field path as the API server shows it in a conflict:
/// `.spec.containers[name="app"].image`.
pub fn show_path(path: &[String]) -> String {
    let mut out = String::new();
    for e in path {
        if let Some(f) = e.strip_prefix("f:") {
            out.push('.');
            out.push_str(f);
        } else if let Some(k) = e.strip_prefix("k:") {
            let parts: Vec<String> = match serde_json::from_str::<Value>(k) {
                Ok(Value::Object(m)) => m.iter().map(|(f, v)| format!("{f}={v}")).collect(),
                _ => vec![k.to_string()],
            };
            out.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = e.strip_prefix("v:") {
            out.push_str(&format!("[={v}]"));
        }
    }
    out
}

/// Merge an applied configuration into the live object.
fn merge(kind: &str, prefix: &mut FieldPath, live: Value, applied: &Value) -> Value {
    match (live, applied) {
        (Value::Object(mut l), Value::Object(a)) => {
            for (k, av) in a {
                prefix.push(format!("f:{k}"));
                if av.is_null() {
                    l.remove(k);
                } else {
                    let lv = l.remove(k).unwrap_or(Value::Null);
                    l.insert(k.clone(), merge(kind, prefix, lv, av));
                }
                prefix.pop();
            }
            Value::Object(l)
        }
        (Value::Array(mut l), Value::Array(a)) => match list_kind(kind, &table_path(prefix)) {
            ListKind::Atomic => Value::Array(a.clone()),
            ListKind::Set => {
                for v in a {
                    if !l.contains(v) {
                        l.push(v.clone());
                    }
                }
                Value::Array(l)
            }
            ListKind::Map { keys } => {
                for item in a {
                    let Some(e) = key_element(item, keys) else {
                        l.push(item.clone());
                        continue;
                    };
                    prefix.push(e.clone());
                    match l.iter().position(|it| item_matches(it, &e)) {
                        Some(i) => {
                            let old = std::mem::take(&mut l[i]);
                            l[i] = merge(kind, prefix, old, item);
                        }
                        None => l.push(merge(kind, prefix, Value::Object(Map::new()), item)),
                    }
                    prefix.pop();
                }
                Value::Array(l)
            }
        },
        (_, a) => a.clone(),
    }
}

/// The parsed apply body: one object of `kind`, `v1`, without
/// `managedFields`.
fn applied_config(kind: &str, body: &[u8]) -> Res<Value> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ApiError::bad_request(format!("the applied configuration is not UTF-8: {e}")))?;
    let mut docs =
        bounded_yaml::parse_bounded(text).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    if docs.len() != 1 {
        return Err(ApiError::bad_request(format!(
            "the applied configuration must be one document, got {}",
            docs.len()
        )));
    }
    let mut obj = docs.remove(0);
    if !obj.is_object() {
        return Err(ApiError::bad_request("the applied configuration is not an object"));
    }
    match obj.get("apiVersion").and_then(Value::as_str) {
        Some("v1") => {}
        other => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version (v1)",
                other.unwrap_or("")
            )));
        }
    }
    if obj.get("kind").and_then(Value::as_str) != Some(kind) {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({}) does not match the expected kind ({kind})",
            obj.get("kind").and_then(Value::as_str).unwrap_or("")
        )));
    }
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
        && meta.remove("managedFields").is_some_and(|m| !m.is_null())
    {
        return Err(ApiError::bad_request("metadata.managedFields must be nil in an applied configuration"));
    }
    Ok(obj)
}

/// Server-side apply of `body` (YAML or JSON) by `params.field_manager`
/// to `live`, or the creation of the object when `live` is `None`.
pub fn server_side_apply(kind: &str, live: Option<&Value>, body: &[u8], params: &Params) -> Res<Patched> {
    let Some(manager) = params.field_manager.as_deref().filter(|m| !m.is_empty()) else {
        return Err(ApiError::invalid(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        )
        .with_causes(vec![Cause::new(
            "FieldValueRequired",
            "fieldManager",
            "Required value: is required for apply patch",
        )]));
    };
    let applied = applied_config(kind, body)?;
    let new_set = owned_fields(kind, &applied);
    let mut entries = entries_of(live);
    let mine = entries.iter().position(|e| e.manager == manager && e.operation == "Apply" && e.subresource.is_none());
    let old_set = mine.map(|i| entries[i].fields.clone()).unwrap_or_default();

    // conflicts: fields others own whose value this apply changes
    let base = live.cloned().unwrap_or(Value::Null);
    let mut conflicts: BTreeMap<String, Vec<FieldPath>> = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) == mine {
            continue;
        }
        for p in new_set.intersection(&e.fields) {
            let item = p.last().is_some_and(|l| !l.starts_with("f:"));
            if !item && value_at(&base, p) != value_at(&applied, p) {
                conflicts.entry(e.manager.clone()).or_default().push(p.clone());
            }
        }
    }
    if !conflicts.is_empty() {
        if !params.force {
            return Err(conflict_error(&conflicts));
        }
        for e in entries.iter_mut() {
            if let Some(taken) = conflicts.get(&e.manager) {
                for p in taken {
                    e.fields.remove(p);
                }
            }
        }
    }

    let mut merged = merge(kind, &mut Vec::new(), base.clone(), &applied);
    // what this manager no longer applies goes, unless someone else owns it
    let others: FieldSet = entries
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != mine)
        .flat_map(|(_, e)| e.fields.iter().cloned())
        .collect();
    let mut gone: Vec<&FieldPath> = old_set.difference(&new_set).filter(|p| !others.contains(*p)).collect();
    gone.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in gone {
        remove_at(&mut merged, p);
    }

    let unchanged = live.is_some_and(|l| without_managed(l) == without_managed(&merged)) && old_set == new_set;
    if !unchanged {
        let entry = Entry {
            manager: manager.to_string(),
            operation: "Apply".into(),
            api_version: "v1".into(),
            time: params.now.clone(),
            subresource: None,
            fields: new_set,
        };
        match mine {
            Some(i) => entries[i] = entry,
            None => entries.push(entry),
        }
    }
    set_entries(&mut merged, &entries);
    match live {
        Some(l) => finish(kind, l, merged, params),
        None => {
            let name = merged.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
            if name.is_empty() {
                return Err(ApiError::field_invalid(kind, "", "metadata.name", "Required value: name is required"));
            }
            if let Some(m) = merged.as_object_mut() {
                m.remove("status");
            }
            let warnings = validate_fields(kind, &name, &mut merged, params.field_validation)?;
            Ok(Patched { object: merged, warnings })
        }
    }
}

fn without_managed(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    v
}

fn conflict_error(conflicts: &BTreeMap<String, Vec<FieldPath>>) -> ApiError {
    let n: usize = conflicts.values().map(Vec::len).sum();
    let mut causes = Vec::new();
    let mut parts = Vec::new();
    for (m, paths) in conflicts {
        for p in paths {
            causes.push(Cause::new("FieldManagerConflict", show_path(p), format!("conflict with {m:?} using v1")));
        }
        if paths.len() == 1 {
            parts.push(format!("conflict with {m:?} using v1: {}", show_path(&paths[0])));
        } else {
            let list: Vec<String> = paths.iter().map(|p| format!("- {}", show_path(p))).collect();
            parts.push(format!("conflicts with {m:?} using v1:\n{}", list.join("\n")));
        }
    }
    let s = if n == 1 { "" } else { "s" };
    ApiError::conflict(format!("Apply failed with {n} conflict{s}: {}", parts.join("\n"))).with_causes(causes)
}

/// Record a write other than apply (a patch, a creation, an update) by
/// `manager`: the fields it changed become its `Update` entry's, taken
/// from every other manager; fields it removed are nobody's. Nothing
/// changes when the object did not.
pub fn record_update(kind: &str, old: Option<&Value>, new: &mut Value, manager: &str, now: &str) {
    // a write that sets managedFields itself (kubectl's upgrade of
    // client-side-apply managers to server-side apply does, by a JSON
    // patch) is taken as written; otherwise they are the old object's
    let managed = |o: Option<&Value>| o.and_then(|o| o.pointer("/metadata/managedFields")).cloned();
    let mut entries = if managed(Some(new)) != managed(old) { entries_of(Some(new)) } else { entries_of(old) };
    let old_obj = old.cloned().unwrap_or(Value::Null);
    let new_fields = owned_fields(kind, new);
    let old_fields = owned_fields(kind, &old_obj);
    let changed: FieldSet = new_fields.iter().filter(|p| value_at(&old_obj, p) != value_at(new, p)).cloned().collect();
    let removed: FieldSet = old_fields.difference(&new_fields).cloned().collect();
    if changed.is_empty() && removed.is_empty() {
        set_entries(new, &entries);
        return;
    }
    for e in entries.iter_mut() {
        let mine = e.manager == manager;
        e.fields.retain(|p| !removed.contains(p) && (mine || !changed.contains(p)));
    }
    match entries.iter_mut().find(|e| e.manager == manager && e.operation == "Update" && e.subresource.is_none()) {
        Some(e) => {
            e.fields.extend(changed);
            e.time = now.to_string();
        }
        None => entries.push(Entry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version: "v1".into(),
            time: now.to_string(),
            subresource: None,
            fields: changed,
        }),
    }
    set_entries(new, &entries);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(manager: &str, force: bool) -> Params {
        Params { field_manager: Some(manager.into()), force, now: "2026-11-25T20:00:00Z".into(), ..Params::default() }
    }

    fn pod(image: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
               "spec": {"containers": [{"name": "app", "image": image}]}})
    }

    fn manager_fields(obj: &Value, manager: &str) -> Value {
        obj["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["manager"] == manager)
            .map(|e| e["fieldsV1"].clone())
            .unwrap_or(Value::Null)
    }

    #[test]
    fn apply_creates_and_records_the_appliers_fields() {
        let body = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels: {app: web}\nspec:\n  containers:\n  - name: app\n    image: nginx\n";
        let out = server_side_apply("Pod", None, body, &params("kubectl", false)).unwrap();
        assert_eq!(out.object["spec"]["containers"][0]["image"], "nginx");
        let f = manager_fields(&out.object, "kubectl");
        assert_eq!(
            f,
            json!({"f:metadata": {"f:labels": {"f:app": {}}},
                   "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
        );
        assert_eq!(out.object["metadata"]["managedFields"][0]["operation"], "Apply");
    }

    #[test]
    fn a_field_owned_by_another_manager_conflicts_unless_forced() {
        let mut live = pod("nginx:1");
        record_update("Pod", None, &mut live, "kubectl-client-side-apply", "t0");
        let body = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"name":"app","image":"nginx:2"}]}}"#;
        let err = server_side_apply("Pod", Some(&live), body, &params("kubectl", false)).unwrap_err();
        assert_eq!(err.code, 409);
        assert_eq!(
            err.message,
            "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using v1: .spec.containers[name=\"app\"].image"
        );
        assert_eq!(err.status()["details"]["causes"][0]["field"], ".spec.containers[name=\"app\"].image");
        // the same value is no conflict: both own it
        let same = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"name":"app","image":"nginx:1"}]}}"#;
        assert!(server_side_apply("Pod", Some(&live), same, &params("kubectl", false)).is_ok());
        // forced: the field changes hands
        let out = server_side_apply("Pod", Some(&live), body, &params("kubectl", true)).unwrap();
        assert_eq!(out.object["spec"]["containers"][0]["image"], "nginx:2");
        let old = manager_fields(&out.object, "kubectl-client-side-apply");
        assert!(old.pointer("/f:spec/f:containers/k:{\"name\":\"app\"}/f:image").is_none(), "{old}");
        assert!(
            manager_fields(&out.object, "kubectl")
                .pointer("/f:spec/f:containers/k:{\"name\":\"app\"}/f:image")
                .is_some()
        );
    }

    #[test]
    fn fields_no_longer_applied_are_removed_unless_others_own_them() {
        let first = b"apiVersion: v1\nkind: Pod\nmetadata: {name: web, labels: {a: '1', b: '2'}}\nspec: {containers: [{name: app, image: x}]}\n";
        let live = server_side_apply("Pod", None, first, &params("kubectl", false)).unwrap().object;
        let second = b"apiVersion: v1\nkind: Pod\nmetadata: {name: web, labels: {a: '1'}}\nspec: {containers: [{name: app, image: x}]}\n";
        let out = server_side_apply("Pod", Some(&live), second, &params("kubectl", false)).unwrap().object;
        assert_eq!(out["metadata"]["labels"], json!({"a": "1"}));
        // another manager's label survives this manager's removal of its own
        let mut shared = live.clone();
        shared["metadata"]["labels"]["c"] = json!("3");
        record_update("Pod", Some(&live), &mut shared, "labeler", "t1");
        let out = server_side_apply("Pod", Some(&shared), second, &params("kubectl", false)).unwrap().object;
        assert_eq!(out["metadata"]["labels"], json!({"a": "1", "c": "3"}));
    }

    #[test]
    fn list_map_items_merge_by_key_and_sets_by_value() {
        let first = b"apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: app, image: x, ports: [{containerPort: 80}]}]}\n";
        let live = server_side_apply("Pod", None, first, &params("one", false)).unwrap().object;
        let other = b"apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: side, image: y}]}\n";
        let out = server_side_apply("Pod", Some(&live), other, &params("two", false)).unwrap().object;
        let names: Vec<&str> =
            out["spec"]["containers"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["app", "side"]);
        // sets merge by value (podwarden refuses finalizers on a pod: merged directly)
        let merged = merge(
            "Pod",
            &mut Vec::new(),
            json!({"metadata": {"finalizers": ["a"]}}),
            &json!({"metadata": {"finalizers": ["b", "a"]}}),
        );
        assert_eq!(merged["metadata"]["finalizers"], json!(["a", "b"]));
        let f = manager_fields(&out, "one");
        assert!(
            f.pointer(
                "/f:spec/f:containers/k:{\"name\":\"app\"}/f:ports/k:{\"containerPort\":80,\"protocol\":\"TCP\"}"
            )
            .is_some(),
            "{f}"
        );
    }

    #[test]
    fn apply_needs_a_field_manager_and_the_right_kind() {
        let body = b"apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n";
        let mut p = params("", false);
        p.field_manager = None;
        assert_eq!(server_side_apply("Pod", None, body, &p).unwrap_err().code, 422);
        let err = server_side_apply("ConfigMap", None, body, &params("m", false)).unwrap_err();
        assert!(err.message.contains("does not match the expected kind (ConfigMap)"), "{}", err.message);
        let err = server_side_apply("Pod", None, b"a: [", &params("m", false)).unwrap_err();
        assert_eq!(err.code, 400);
    }

    #[test]
    fn reapplying_the_same_config_keeps_the_time() {
        let body = b"apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: app, image: x}]}\n";
        let live = server_side_apply("Pod", None, body, &params("m", false)).unwrap().object;
        let mut later = params("m", false);
        later.now = "2030-01-01T00:00:00Z".into();
        let again = server_side_apply("Pod", Some(&live), body, &later).unwrap().object;
        assert_eq!(again["metadata"]["managedFields"], live["metadata"]["managedFields"]);
    }

    #[test]
    fn a_write_of_managed_fields_is_taken_as_written() {
        let mut live = pod("x");
        record_update("Pod", None, &mut live, "kubectl-client-side-apply", "t0");
        let mut new = live.clone();
        new["metadata"]["managedFields"][0]["manager"] = json!("kubectl");
        new["metadata"]["managedFields"][0]["operation"] = json!("Apply");
        record_update("Pod", Some(&live), &mut new, "kubectl", "t1");
        let mf = new["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(mf.len(), 1);
        assert_eq!((mf[0]["manager"].as_str(), mf[0]["operation"].as_str()), (Some("kubectl"), Some("Apply")));
    }

    #[test]
    fn fields_v1_round_trips() {
        let obj = pod("x");
        let set = owned_fields("Pod", &obj);
        let mut back = FieldSet::new();
        from_fields_v1(&to_fields_v1(&set), &mut Vec::new(), &mut back);
        assert_eq!(back, set);
    }
}

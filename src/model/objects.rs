//! Local ConfigMaps and Secrets: v1 objects read beside the pods (their own
//! files in `staticPodPath`, or extra documents in a pod's file), validated
//! as the API server validates them, and kept in one store the pods read
//! from (environment, volumes) and `podwarden get configmaps|secrets` lists.
//!
//! Secret data is never formatted: `LocalObject`'s `Debug` names the keys
//! only, and no error message holds a value.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::field::{FieldError, FieldErrors};
use super::names::{check_key, is_dns1123_label, is_dns1123_subdomain};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::RwLock;
use serde_json::Value;

/// The kinds of object a manifest file may hold besides its pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    ConfigMap,
    Secret,
}

impl Kind {
    /// The kind as written in manifests (`ConfigMap`, `Secret`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::Secret => "Secret",
        }
    }

    /// The API resource name, as errors about a missing object use it
    /// (`configmap "app" not found`).
    pub fn resource(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmap",
            Kind::Secret => "secret",
        }
    }
}

/// An object's identity: kind, namespace, name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl ObjKey {
    pub fn new(kind: Kind, namespace: &str, name: &str) -> Self {
        ObjKey { kind, namespace: namespace.to_string(), name: name.to_string() }
    }
}

impl std::fmt::Display for ObjKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// A valid ConfigMap or Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct LocalObject {
    pub key: ObjKey,
    /// The file it was read from.
    pub file: String,
    /// Secret `type` (`Opaque` when unset); `None` for a ConfigMap.
    pub type_: Option<String>,
    pub immutable: bool,
    pub labels: BTreeMap<String, String>,
    /// The object's annotations (a Secret's may hold its values: kubectl's
    /// last-applied configuration); never formatted.
    pub annotations: BTreeMap<String, String>,
    /// `metadata.managedFields` as written (server-side apply's record),
    /// kept for the Kubernetes API.
    pub managed_fields: Option<Value>,
    /// Every key and its bytes: a ConfigMap's `data` and `binaryData`, a
    /// Secret's `data` with `stringData` merged over it.
    pub data: BTreeMap<String, Vec<u8>>,
    /// The ConfigMap keys that came from `binaryData` (never put in the
    /// environment, as the kubelet does not).
    pub binary_keys: BTreeSet<String>,
}

impl std::fmt::Debug for LocalObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // the keys only: a Secret's values never reach a log line
        f.debug_struct("LocalObject")
            .field("key", &self.key)
            .field("file", &self.file)
            .field("type", &self.type_)
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl LocalObject {
    /// The value of `key` for an environment variable: `data` only (not a
    /// ConfigMap's `binaryData`), as text.
    pub fn env_value(&self, key: &str) -> Option<&[u8]> {
        if self.binary_keys.contains(key) {
            return None;
        }
        self.data.get(key).map(Vec::as_slice)
    }

    /// Keys usable in the environment, in order.
    pub fn env_keys(&self) -> impl Iterator<Item = &str> {
        self.data.keys().filter(|k| !self.binary_keys.contains(*k)).map(String::as_str)
    }

    /// Total bytes of the data (keys and values).
    pub fn size(&self) -> usize {
        self.data.iter().map(|(k, v)| k.len() + v.len()).sum()
    }

    /// The same content where an immutable object may not change (data,
    /// binary keys, type, `immutable`); metadata may differ.
    pub fn same_content(&self, other: &LocalObject) -> bool {
        self.data == other.data
            && self.binary_keys == other.binary_keys
            && self.type_ == other.type_
            && self.immutable == other.immutable
    }
}

/// Every local object by key.
pub type ObjectSet = BTreeMap<ObjKey, Arc<LocalObject>>;

/// The objects the source last read. Readers take a snapshot (an `Arc`),
/// the source thread swaps in the next one.
#[derive(Default)]
pub struct ObjectStore {
    current: RwLock<Arc<ObjectSet>>,
}

impl ObjectStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn snapshot(&self) -> Arc<ObjectSet> {
        self.current.read().clone()
    }

    pub fn get(&self, key: &ObjKey) -> Option<Arc<LocalObject>> {
        self.current.read().get(key).cloned()
    }

    /// Install `next`; returns the keys that were added, changed or removed.
    pub fn replace(&self, next: ObjectSet) -> BTreeSet<ObjKey> {
        let mut cur = self.current.write();
        let mut changed = BTreeSet::new();
        for (k, v) in next.iter() {
            if cur.get(k).is_none_or(|old| **old != **v) {
                changed.insert(k.clone());
            }
        }
        for k in cur.keys() {
            if !next.contains_key(k) {
                changed.insert(k.clone());
            }
        }
        *cur = Arc::new(next);
        drop(cur);
        if !changed.is_empty() {
            crate::base::changes::bump();
        }
        changed
    }
}

/// Largest total size of one object's data, as the API server allows
/// (`MaxSecretSize`, also the ConfigMap limit).
pub const MAX_OBJECT_DATA_BYTES: usize = 1024 * 1024;

/// [`check_key`] for the key of `field`, as that field's error.
fn check_key_of(field: String, k: &str) -> Result<(), FieldError> {
    check_key(k).map_err(|e| FieldError::new(field, e.to_string()))
}

/// The fields a local object may set, and the output fields accepted and
/// ignored; anything else under `metadata` is rejected by name, an unknown
/// top-level field is warned about.
const OBJECT_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "data", "binaryData", "immutable"];
const SECRET_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "data", "stringData", "type", "immutable"];
const METADATA_FIELDS: &[&str] = &["name", "namespace", "labels", "annotations"];
const METADATA_OUTPUT: &[&str] =
    &["creationTimestamp", "resourceVersion", "uid", "generation", "managedFields", "selfLink"];

/// Secret types that need an API server (a token controller) podwarden
/// does not have.
const SECRET_TYPES_REJECTED: &[&str] = &["kubernetes.io/service-account-token"];

/// Required keys of the built-in Secret types.
fn required_secret_keys(type_: &str) -> &'static [&'static [&'static str]] {
    match type_ {
        "kubernetes.io/dockercfg" => &[&[".dockercfg"]],
        "kubernetes.io/dockerconfigjson" => &[&[".dockerconfigjson"]],
        "kubernetes.io/ssh-auth" => &[&["ssh-privatekey"]],
        "kubernetes.io/tls" => &[&["tls.crt"], &["tls.key"]],
        "kubernetes.io/basic-auth" => &[&["username", "password"]],
        _ => &[],
    }
}

/// Build a local object from one parsed document (its `kind` is
/// `ConfigMap` or `Secret`), checked as the API server checks it: every
/// refused field at once, metadata's first, then the data's. A document
/// that cannot be decoded at all (a wrong `apiVersion`, a value of the
/// wrong type) is one error, as the API server's decoding is. Returns the
/// object and warnings (unknown fields).
pub fn from_value(kind: Kind, file: &str, mut value: Value) -> Result<(LocalObject, Vec<String>), FieldErrors> {
    let mut warnings = Vec::new();
    let Value::Object(map) = &mut value else {
        return Err(FieldError::new("(top level)", format!("expected a {} object", kind.as_str())).into());
    };
    match map.get("apiVersion").and_then(Value::as_str) {
        Some("v1") => {}
        Some(other) => return Err(FieldError::new("apiVersion", format!("is {other:?}; expected \"v1\"")).into()),
        None => return Err(FieldError::new("apiVersion", "missing; expected \"v1\"").into()),
    }
    let allowed = if kind == Kind::Secret { SECRET_FIELDS } else { OBJECT_FIELDS };
    for k in map.keys() {
        if !allowed.contains(&k.as_str()) {
            warnings.push(format!("unknown field {k:?}"));
        }
    }
    map.retain(|k, _| allowed.contains(&k.as_str()));
    let mut errors = FieldErrors::new();
    let mut managed_fields = None;
    if let Some(Value::Object(meta)) = map.get_mut("metadata") {
        for (k, v) in meta.iter() {
            if k == "managedFields" {
                match v {
                    Value::Null => {}
                    Value::Array(entries) if entries.iter().all(Value::is_object) => managed_fields = Some(v.clone()),
                    _ => errors.push(FieldError::new("metadata.managedFields", "must be a list of objects")),
                }
                continue;
            }
            if METADATA_OUTPUT.contains(&k.as_str()) || METADATA_FIELDS.contains(&k.as_str()) || v.is_null() {
                continue;
            }
            errors
                .push(FieldError::new(format!("metadata.{k}"), format!("not supported for a local {}", kind.as_str())));
        }
        meta.retain(|k, _| METADATA_FIELDS.contains(&k.as_str()));
    }
    let decoded = match kind {
        Kind::ConfigMap => config_map(value),
        Kind::Secret => secret(value),
    };
    // (a document that does not decode has no name or data to check)
    let Decoded { meta, type_, immutable, data, binary_keys, errors: data_errors } =
        decoded.map_err(FieldErrors::from)?;
    let name = meta.name.clone().unwrap_or_default();
    if name.is_empty() {
        errors.push(FieldError::new("metadata.name", format!("missing; a {} needs a name", kind.as_str())));
    } else if !is_dns1123_subdomain(&name) {
        errors.push(FieldError::new(
            "metadata.name",
            format!("{name:?} is not a valid DNS-1123 subdomain (lowercase letters, digits, '-', '.')"),
        ));
    }
    let namespace = meta.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| "default".to_string());
    if !is_dns1123_label(&namespace) {
        errors.push(FieldError::new("metadata.namespace", format!("{namespace:?} is not a valid DNS-1123 label")));
    }
    errors.append(data_errors);
    let obj = LocalObject {
        key: ObjKey { kind, namespace, name },
        file: file.to_string(),
        type_,
        immutable,
        labels: meta.labels.unwrap_or_default(),
        annotations: meta.annotations.unwrap_or_default(),
        managed_fields,
        data,
        binary_keys,
    };
    let size = obj.size();
    if size > MAX_OBJECT_DATA_BYTES {
        errors.push(FieldError::new(
            "data",
            format!("{size} bytes of data: must have at most {MAX_OBJECT_DATA_BYTES} bytes"),
        ));
    }
    errors.into_result()?;
    Ok((obj, warnings))
}

/// What a ConfigMap or Secret document holds, and what is wrong with its
/// data.
struct Decoded {
    meta: ObjectMeta,
    /// A Secret's type.
    type_: Option<String>,
    immutable: bool,
    data: BTreeMap<String, Vec<u8>>,
    /// The keys from `binaryData`.
    binary_keys: BTreeSet<String>,
    errors: FieldErrors,
}

/// A deserialization error, at the field it names.
fn deserialize_error(e: serde_path_to_error::Error<serde_json::Error>) -> FieldError {
    FieldError::new(e.path().to_string(), e.into_inner().to_string())
}

/// A ConfigMap's data: `data` and `binaryData`, keys checked and distinct.
fn config_map(value: Value) -> Result<Decoded, FieldError> {
    let cm: ConfigMap = serde_path_to_error::deserialize(value).map_err(deserialize_error)?;
    let mut errors = FieldErrors::new();
    let mut data: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (k, v) in cm.data.unwrap_or_default() {
        errors.check(check_key_of(format!("data[{k:?}]"), &k));
        data.insert(k, v.into_bytes());
    }
    let mut binary = BTreeSet::new();
    for (k, v) in cm.binary_data.unwrap_or_default() {
        errors.check(check_key_of(format!("binaryData[{k:?}]"), &k));
        if data.contains_key(&k) {
            errors.push(FieldError::new(format!("binaryData[{k:?}]"), "duplicate of key present in data"));
            continue;
        }
        binary.insert(k.clone());
        data.insert(k, v.0);
    }
    Ok(Decoded {
        meta: cm.metadata,
        type_: None,
        immutable: cm.immutable.unwrap_or(false),
        data,
        binary_keys: binary,
        errors,
    })
}

/// A Secret's type and data: `stringData` merged over `data`, the keys its
/// type requires.
fn secret(value: Value) -> Result<Decoded, FieldError> {
    let s: Secret = serde_path_to_error::deserialize(value).map_err(deserialize_error)?;
    let mut errors = FieldErrors::new();
    let type_ = s.type_.filter(|t| !t.is_empty()).unwrap_or_else(|| "Opaque".to_string());
    if SECRET_TYPES_REJECTED.contains(&type_.as_str()) {
        errors.push(FieldError::new(
            "type",
            format!("{type_:?} needs an API server's token controller; podwarden has none (use Opaque)"),
        ));
    }
    let mut data: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (k, v) in s.data.unwrap_or_default() {
        errors.check(check_key_of(format!("data[{k:?}]"), &k));
        data.insert(k, v.0);
    }
    // the API server merges stringData over data when it stores a
    // Secret
    for (k, v) in s.string_data.unwrap_or_default() {
        errors.check(check_key_of(format!("stringData[{k:?}]"), &k));
        data.insert(k, v.into_bytes());
    }
    for any_of in required_secret_keys(&type_) {
        if !any_of.iter().any(|k| data.contains_key(*k)) {
            errors.push(FieldError::new("data", format!("a {type_} Secret needs the key {}", any_of.join(" or "))));
        }
    }
    Ok(Decoded {
        meta: s.metadata,
        type_: Some(type_),
        immutable: s.immutable.unwrap_or(false),
        data,
        binary_keys: BTreeSet::new(),
        errors,
    })
}

/// Every object a pod refers to (environment, volumes, image pull
/// secrets).
pub fn references(pod: &Pod) -> BTreeSet<ObjKey> {
    let ns = super::namespace(pod);
    let mut out = BTreeSet::new();
    let mut add = |kind, name: &str| {
        if !name.is_empty() {
            out.insert(ObjKey::new(kind, ns, name));
        }
    };
    let Some(spec) = pod.spec.as_ref() else { return out };
    for c in spec.containers.iter().chain(spec.init_containers.iter().flatten()) {
        for e in c.env.iter().flatten() {
            if let Some(from) = &e.value_from {
                if let Some(r) = &from.config_map_key_ref {
                    add(Kind::ConfigMap, &r.name);
                }
                if let Some(r) = &from.secret_key_ref {
                    add(Kind::Secret, &r.name);
                }
            }
        }
        for ef in c.env_from.iter().flatten() {
            if let Some(r) = &ef.config_map_ref {
                add(Kind::ConfigMap, &r.name);
            }
            if let Some(r) = &ef.secret_ref {
                add(Kind::Secret, &r.name);
            }
        }
    }
    for s in spec.image_pull_secrets.iter().flatten() {
        add(Kind::Secret, &s.name);
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(cm) = &v.config_map {
            add(Kind::ConfigMap, &cm.name);
        }
        if let Some(s) = &v.secret {
            add(Kind::Secret, s.secret_name.as_deref().unwrap_or(""));
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(cm) = &src.config_map {
                add(Kind::ConfigMap, &cm.name);
            }
            if let Some(s) = &src.secret {
                add(Kind::Secret, &s.name);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn config_map_data_and_binary_data() {
        let v = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"},
            "data": {"a.conf": "x=1\n"}, "binaryData": {"blob": "AAEC"}});
        let (o, w) = from_value(Kind::ConfigMap, "f.yaml", v).unwrap();
        assert!(w.is_empty());
        assert_eq!(o.key, ObjKey::new(Kind::ConfigMap, "default", "app"));
        assert_eq!(o.data["a.conf"], b"x=1\n");
        assert_eq!(o.data["blob"], vec![0u8, 1, 2]);
        assert_eq!(o.env_keys().collect::<Vec<_>>(), vec!["a.conf"]);
        assert!(o.env_value("blob").is_none());
    }

    #[test]
    fn secret_string_data_wins_and_debug_hides_values() {
        let v = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "prod"},
            "data": {"password": "c2VjcmV0MQ=="}, "stringData": {"password": "hunter2", "user": "me"}});
        let (o, _) = from_value(Kind::Secret, "f.yaml", v).unwrap();
        assert_eq!(o.data["password"], b"hunter2");
        assert_eq!(o.type_.as_deref(), Some("Opaque"));
        let dbg = format!("{o:?}");
        assert!(dbg.contains("password") && !dbg.contains("hunter2") && !dbg.contains("secret1"), "{dbg}");
    }

    #[test]
    fn bad_objects_are_named() {
        let bad = |kind, v: Value| from_value(kind, "f", v).unwrap_err().first().cloned().unwrap();
        let e = bad(Kind::ConfigMap, json!({"apiVersion": "v1", "metadata": {"name": "a"}, "data": {"a b": "x"}}));
        assert_eq!(e.field, "data[\"a b\"]");
        assert!(e.reason.contains("[-._a-zA-Z0-9]+"), "{}", e.reason);
        let e = bad(Kind::ConfigMap, json!({"apiVersion": "v1", "metadata": {"name": "a"}, "data": {"..x": "x"}}));
        assert!(e.reason.contains("must not start with '..'"), "{}", e.reason);
        let e = bad(Kind::ConfigMap, json!({"apiVersion": "v1", "metadata": {"name": "A_b"}}));
        assert_eq!(e.field, "metadata.name");
        let e = bad(Kind::ConfigMap, json!({"apiVersion": "v1", "metadata": {}}));
        assert!(e.reason.contains("missing"), "{}", e.reason);
        let e = bad(
            Kind::ConfigMap,
            json!({"apiVersion": "v1", "metadata": {"name": "a"}, "data": {"k": "x"}, "binaryData": {"k": "AA=="}}),
        );
        assert!(e.reason.contains("duplicate"), "{}", e.reason);
        let e = bad(Kind::Secret, json!({"apiVersion": "v1", "metadata": {"name": "a"}, "data": {"k": "not base64!"}}));
        assert!(e.field.contains("data"), "{e:?}");
        let e = bad(
            Kind::Secret,
            json!({"apiVersion": "v1", "metadata": {"name": "a"}, "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": "x"}}),
        );
        assert!(e.reason.contains("tls.key"), "{}", e.reason);
        let e = bad(
            Kind::Secret,
            json!({"apiVersion": "v1", "metadata": {"name": "a"},
            "type": "kubernetes.io/service-account-token"}),
        );
        assert_eq!(e.field, "type");
        let e = bad(Kind::Secret, json!({"apiVersion": "v1", "metadata": {"name": "a", "ownerReferences": [{}]}}));
        assert_eq!(e.field, "metadata.ownerReferences");
        let e = bad(Kind::ConfigMap, json!({"apiVersion": "v2", "metadata": {"name": "a"}}));
        assert_eq!(e.field, "apiVersion");
    }

    #[test]
    fn every_refused_field_at_once_metadata_first() {
        let v = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "Bad_Name", "namespace": "Prod", "ownerReferences": [{}], "finalizers": ["x"]},
            "type": "kubernetes.io/tls",
            "data": {"a b": "eA==", "ok": "eA=="}, "stringData": {"..x": "y", "c/d": "z"}});
        let errs = from_value(Kind::Secret, "f", v).unwrap_err();
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "metadata.finalizers",
                "metadata.ownerReferences",
                "metadata.name",
                "metadata.namespace",
                "data[\"a b\"]",
                "stringData[\"..x\"]",
                "stringData[\"c/d\"]",
                "data",
                "data",
            ],
            "{errs}"
        );
        assert!(errs.iter().any(|e| e.reason.contains("tls.crt")) && errs.iter().any(|e| e.reason.contains("tls.key")));
        // a ConfigMap's duplicate key and bad keys, all of them
        let v = json!({"apiVersion": "v1", "metadata": {"name": "a"}, "data": {"k": "x", "a b": "y"},
            "binaryData": {"k": "AA==", "c d": "AA=="}});
        let errs = from_value(Kind::ConfigMap, "f", v).unwrap_err();
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["data[\"a b\"]", "binaryData[\"c d\"]", "binaryData[\"k\"]"], "{errs}");
        // what does not decode stays one error
        let v = json!({"apiVersion": "v1", "metadata": {"name": "Bad_Name"}, "data": {"k": 1}});
        assert_eq!(from_value(Kind::ConfigMap, "f", v).unwrap_err().len(), 1);
    }

    #[test]
    fn annotations_and_managed_fields_are_kept_and_content_compared_without_them() {
        let mf = json!([{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {}}]);
        let v = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a",
            "annotations": {"note": "x"}, "managedFields": mf}, "data": {"k": "v"}, "immutable": true});
        let (o, _) = from_value(Kind::ConfigMap, "f", v.clone()).unwrap();
        assert_eq!(o.annotations.get("note").map(String::as_str), Some("x"));
        assert_eq!(o.managed_fields, Some(mf));
        let mut other = v.clone();
        other["metadata"]["annotations"]["note"] = json!("y");
        let (o2, _) = from_value(Kind::ConfigMap, "f", other).unwrap();
        assert!(o.same_content(&o2) && o != o2, "metadata differs, content does not");
        let mut changed = v.clone();
        changed["data"]["k"] = json!("w");
        assert!(!o.same_content(&from_value(Kind::ConfigMap, "f", changed).unwrap().0));
        let mut bad = v;
        bad["metadata"]["managedFields"] = json!("x");
        assert_eq!(from_value(Kind::ConfigMap, "f", bad).unwrap_err().first().unwrap().field, "metadata.managedFields");
    }

    #[test]
    fn output_metadata_is_ignored_and_unknown_fields_warned() {
        let v = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "creationTimestamp": null,
            "uid": "x"}, "dataa": {}});
        let (_, w) = from_value(Kind::ConfigMap, "f", v).unwrap();
        assert_eq!(w, vec!["unknown field \"dataa\"".to_string()]);
    }

    #[test]
    fn the_store_reports_changes() {
        let s = ObjectStore::new();
        let mk = |name: &str, v: &str| {
            let (o, _) = from_value(
                Kind::ConfigMap,
                "f",
                json!({"apiVersion": "v1", "metadata": {"name": name}, "data": {"k": v}}),
            )
            .unwrap();
            (o.key.clone(), Arc::new(o))
        };
        let set: ObjectSet = [mk("a", "1"), mk("b", "1")].into_iter().collect();
        assert_eq!(s.replace(set).len(), 2);
        let set: ObjectSet = [mk("a", "1"), mk("b", "2")].into_iter().collect();
        let changed = s.replace(set);
        assert_eq!(changed.into_iter().map(|k| k.name).collect::<Vec<_>>(), vec!["b"]);
        let changed = s.replace(ObjectSet::new());
        assert_eq!(changed.len(), 2);
    }
}

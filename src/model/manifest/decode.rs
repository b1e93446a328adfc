//! From a manifest's text to a Pod: YAML or JSON documents (bounded), the
//! kind and version, the field table's check (`fields`), YAML 1.1 octal
//! file modes, then the defaults and identity a static pod gets (namespace,
//! derived UID, source annotations, node).

use std::collections::BTreeMap;

use serde_json::Value;

use super::ManifestError;
use crate::model::field::{FieldError, FieldErrors};
use crate::model::{
    CONFIG_FILE_ANNOTATION, CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION, Pod, bounded_yaml, fields, fnv128_hex,
};

fn is_json(path: &str) -> bool {
    path.ends_with(".json")
}

/// The documents of `text`: JSON for a `.json` path, else YAML (empty
/// documents dropped); none at all is an error.
pub(super) fn to_values(path: &str, text: &str) -> Result<Vec<Value>, ManifestError> {
    let syntax = |format, e: bounded_yaml::YamlError| ManifestError::Syntax {
        path: path.to_string(),
        format,
        message: e.to_string(),
    };
    let docs: Vec<Value> = if is_json(path) {
        bounded_yaml::parse_json_bounded(text).map_err(|e| syntax("JSON", e))?
    } else {
        let all = bounded_yaml::parse_bounded(text).map_err(|e| syntax("YAML", e))?;
        all.into_iter().filter(|v| !v.is_null()).collect()
    };
    if docs.is_empty() {
        return Err(ManifestError::Empty { path: path.to_string() });
    }
    Ok(docs)
}

/// A Pod document decoded: the pod, the warnings about it, and the fields
/// the field table refuses (the pod is still there, to be validated: its
/// other fields are independent of those).
pub(super) struct Decoded {
    pub pod: Pod,
    pub warnings: Vec<String>,
    pub refused: FieldErrors,
}

/// A Pod document as a `Pod`: kind and version (either wrong is the one
/// error), the field table, then deserialization (its error names the
/// field, after those the table refused). `status` is dropped.
pub(super) fn to_pod(path: &str, mut value: Value, origin: fields::Origin) -> Result<Decoded, ManifestError> {
    let invalid = |errors: FieldErrors| ManifestError::Invalid { path: path.to_string(), errors };
    let one = |field: &str, message: String| invalid(FieldError::new(field, message).into());
    let Value::Object(map) = &value else {
        return Err(one("(top level)", "expected a Pod object".into()));
    };
    match map.get("kind").and_then(Value::as_str) {
        Some("Pod") => {}
        Some(other) => return Err(one("kind", format!("is {other:?}; only a Pod is accepted"))),
        None => return Err(one("kind", "missing; expected \"Pod\"".into())),
    }
    match map.get("apiVersion").and_then(Value::as_str) {
        Some("v1") => {}
        Some(other) => return Err(one("apiVersion", format!("is {other:?}; expected \"v1\""))),
        None => return Err(one("apiVersion", "missing; expected \"v1\"".into())),
    }
    // every set field must be one podwarden implements; fields that are
    // not in the schema are warnings
    let (warnings, mut refused) = match fields::check_in(&value, origin) {
        Ok(w) => (w, FieldErrors::new()),
        Err(e) => (Vec::new(), e),
    };
    // status is output: ignored, whatever it holds
    if let Value::Object(map) = &mut value {
        map.remove("status");
    }
    if let Some(volumes) = value.pointer_mut("/spec/volumes") {
        octal_modes(volumes);
    }
    match serde_path_to_error::deserialize::<_, Pod>(value) {
        Ok(pod) => Ok(Decoded { pod, warnings, refused }),
        Err(e) => {
            refused.push(FieldError::new(e.path().to_string(), e.into_inner().to_string()));
            Err(invalid(refused))
        }
    }
}

/// File modes written the YAML 1.1 way (`defaultMode: 0400`), which is how
/// kubectl reads manifests: podwarden's YAML is 1.2, where `0400` is not a
/// number, so a volume's `defaultMode` or `mode` made only of octal digits
/// after a leading 0 is read as the octal number it means.
fn octal_modes(v: &mut Value) {
    match v {
        Value::Array(items) => items.iter_mut().for_each(octal_modes),
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if let (true, Value::String(s)) = (k == "defaultMode" || k == "mode", &*v) {
                    if s.len() > 1
                        && s.starts_with('0')
                        && s.bytes().all(|b| (b'0'..=b'7').contains(&b))
                        && let Ok(n) = i64::from_str_radix(&s[1..], 8)
                    {
                        *v = Value::Number(n.into());
                    }
                } else {
                    octal_modes(v);
                }
            }
        }
        _ => {}
    }
}

/// Defaults and identity: namespace, source annotations, derived UID.
pub(super) fn finish(path: &str, mut pod: Pod, node_name: &str) -> Result<Pod, ManifestError> {
    if pod.metadata.namespace.as_deref().unwrap_or("").is_empty() {
        pod.metadata.namespace = Some("default".into());
    }
    if pod.metadata.uid.as_deref().unwrap_or("").is_empty() {
        // The content that defines the pod: metadata and spec as parsed
        // (status is ignored), so formatting and comments do not matter.
        let mut canon = pod.clone();
        canon.status = None;
        let json = serde_json::to_vec(&canon).map_err(|e| ManifestError::Syntax {
            path: path.to_string(),
            format: "Pod",
            message: e.to_string(),
        })?;
        pod.metadata.uid = Some(fnv128_hex(&[b"host:", node_name.as_bytes(), b"file:", path.as_bytes(), &json]));
    }
    // bound to this node, as the kubelet's file source does (after the UID:
    // the node name is already part of it)
    if let Some(spec) = pod.spec.as_mut()
        && spec.node_name.as_deref().unwrap_or("").is_empty()
    {
        spec.node_name = Some(node_name.to_string());
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let ann = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.insert(CONFIG_SOURCE_ANNOTATION.into(), "file".into());
    ann.insert(CONFIG_HASH_ANNOTATION.into(), uid);
    ann.insert(CONFIG_FILE_ANNOTATION.into(), path.to_string());
    Ok(pod)
}

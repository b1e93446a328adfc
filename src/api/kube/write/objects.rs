//! Writes of the local ConfigMaps and Secrets through the Kubernetes API
//! (authorization is the caller's): create (`POST`), `PATCH` (strategic
//! merge, merge and JSON patches through `patch`, server-side apply
//! through `ssa`, which also creates), and `DELETE`. What is stored is the
//! object in its canonical form (a Secret's `stringData` merged into
//! `data`, as the API server stores it; no status or server-set fields)
//! in a file of staticPodPath through `api::objects`: a new object gets a
//! file of its own; an object is replaced or removed only through a file
//! that holds it alone (one beside a pod or other objects is refused,
//! naming the file). Checked as the API server checks (422 `Invalid` with
//! its causes): `model::objects`' validation, the fields by
//! `fieldValidation`, and immutability (an immutable object's data, and a
//! Secret's type, keep their first value). The answer is the object as a
//! read shows it (a Secret's values left out), once the manifest watcher
//! has read the file.

use std::time::Duration;

use serde_json::{Value, json};

use crate::api::status::{ApiError, Cause, Res};
use crate::api::view;
use crate::model::objects::{self, Kind, LocalObject, ObjKey};

use super::super::ctx::Ctx;
use super::super::wire::{Reply, Request};
use super::super::{resources, watch};
use super::{Params, body_object, identify, params, patch, ssa};

/// The largest body taken (an object's data is at most 1 MiB).
pub const MAX_OBJECT_BODY: usize = 2 << 20;

/// How long a write waits for the manifest watcher to read it.
const SETTLE: Duration = Duration::from_secs(3);

/// The object kind of a resource name (`configmaps`, `secrets`).
pub fn kind_of(resource: &str) -> Option<Kind> {
    match resource {
        "configmaps" => Some(Kind::ConfigMap),
        "secrets" => Some(Kind::Secret),
        _ => None,
    }
}

fn resource(kind: Kind) -> &'static str {
    match kind {
        Kind::ConfigMap => "configmaps",
        Kind::Secret => "secrets",
    }
}

fn hub_kind(kind: Kind) -> watch::Kind {
    match kind {
        Kind::ConfigMap => watch::Kind::ConfigMaps,
        Kind::Secret => watch::Kind::Secrets,
    }
}

/// The object as a read serves it now (with its resourceVersion).
fn served(ctx: &Ctx, key: &ObjKey) -> Option<Value> {
    ctx.hub.find(hub_kind(key.kind), Some(&key.namespace), &key.name).map(|o| o.value())
}

/// `POST .../namespaces/NS/configmaps|secrets`.
pub fn create(ctx: &Ctx, req: &Request, kind: Kind, ns: &str) -> Res<Reply> {
    let mut obj = body_object(req, MAX_OBJECT_BODY)?;
    if obj.get("kind").and_then(Value::as_str) != Some(kind.as_str()) {
        return Err(ApiError::bad_request(format!("the body is not a {0} (kind: {0}, apiVersion: v1)", kind.as_str())));
    }
    let name = identify(&mut obj, kind.as_str(), ns)?;
    if obj.pointer("/metadata/resourceVersion").is_some_and(|v| !v.is_null() && v != "") {
        return Err(ApiError::bad_request("resourceVersion should not be set on objects to be created"));
    }
    let params = params(req)?;
    let warnings = super::validate_fields(kind.as_str(), &name, &mut obj, params.field_validation)?;
    log_warnings(kind, ns, &name, &warnings);
    let key = ObjKey::new(kind, ns, &name);
    if ctx.ops.object(&key).is_some() {
        return Err(ApiError::already_exists(resource(kind), &name));
    }
    ssa::record_update(kind.as_str(), None, &mut obj, &super::manager_of(&params, req), &params.now);
    store(ctx, &key, None, &obj, &params)
}

fn log_warnings(kind: Kind, ns: &str, name: &str, warnings: &[String]) {
    for w in warnings {
        log::debug!("{} {ns}/{name}: warning: {w}", kind.as_str());
    }
}

/// `PATCH .../namespaces/NS/configmaps|secrets/NAME`.
pub fn patch(ctx: &Ctx, req: &Request, kind: Kind, ns: &str, name: &str) -> Res<Reply> {
    let key = ObjKey::new(kind, ns, name);
    let live = ctx.ops.object(&key);
    let params = params(req)?;
    let ct = req.header("content-type").unwrap_or("");
    let patched = match &live {
        Some(l) => {
            let mut current = view::object_value(l, true);
            if let Some(rv) = served(ctx, &key).and_then(|v| v.pointer("/metadata/resourceVersion").cloned()) {
                current["metadata"]["resourceVersion"] = rv;
            }
            patch::apply(kind.as_str(), &current, &req.body, ct, &params)?
        }
        None if ct.starts_with("application/apply-patch") => {
            if req.body.len() > patch::MAX_PATCH_BYTES {
                return Err(ApiError::too_large("the applied configuration is over 1 MiB"));
            }
            let mut p = ssa::server_side_apply(kind.as_str(), None, &req.body, &params)?;
            identify(&mut p.object, kind.as_str(), ns)?;
            if p.object.pointer("/metadata/name").and_then(Value::as_str) != Some(name) {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    p.object.pointer("/metadata/name").unwrap_or(&Value::Null)
                )));
            }
            p
        }
        None => return Err(ApiError::not_found(resource(kind), name)),
    };
    log_warnings(kind, ns, name, &patched.warnings);
    store(ctx, &key, live.as_deref(), &patched.object, &params)
}

/// Annotations a read adds, never stored.
const SHOWN_ONLY: &[&str] = &[crate::model::CONFIG_FILE_ANNOTATION, view::REDACTED_ANNOTATION];

/// Check and store `new` as `key` (over `live`, or a new object), then
/// answer with the object as a read shows it.
fn store(ctx: &Ctx, key: &ObjKey, live: Option<&LocalObject>, new: &Value, params: &Params) -> Res<Reply> {
    let (kind, name) = (key.kind, key.name.as_str());
    let mut manifest = super::manifest_of(new);
    if let Some(ann) = manifest.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
        if key.kind == Kind::Secret && ann.contains_key(view::REDACTED_ANNOTATION) {
            return Err(ApiError::bad_request(format!(
                "secrets {name:?}: the object carries {}: it was read through the API, which leaves a Secret's values \
                 out; send the Secret with its values",
                view::REDACTED_ANNOTATION
            )));
        }
        ann.retain(|k, _| !SHOWN_ONLY.contains(&k.as_str()));
    }
    let (local, _) = objects::from_value(kind, "(request)", manifest)
        .map_err(|e| ApiError::fields_invalid(kind.as_str(), name, &e))?;
    if let Some(l) = live {
        immutable(l, &local)?;
    }
    let canonical = view::object_value(&local, true);
    let unchanged = live.is_some_and(|l| view::object_value(l, true) == canonical);
    let code = if live.is_some() { 200 } else { 201 };
    if params.dry_run || unchanged {
        let shown = match (unchanged, served(ctx, key)) {
            (true, Some(v)) => v,
            _ => {
                resources::object_json(&LocalObject { file: live.map(|l| l.file.clone()).unwrap_or_default(), ..local })
            }
        };
        return Ok(Reply::json(code, &shown));
    }
    let doc = document(kind, &canonical)?;
    let path = match live {
        Some(l) => ctx.ops.replace_object(l, &doc),
        None => ctx.ops.create_object(key, &doc),
    }?;
    let file = path.to_string_lossy().into_owned();
    let read = ctx
        .ops
        .wait_object(key, SETTLE, |o| o.is_some_and(|o| o.file == file && view::object_value(o, true) == canonical));
    let shown = if read { served(ctx, key) } else { None };
    let shown = shown.unwrap_or_else(|| {
        log::warn!("API: {key} written to {file}, not read back within {SETTLE:?}");
        resources::object_json(&LocalObject { file: file.clone(), ..local })
    });
    Ok(Reply::json(code, &shown))
}

/// The file's text: a comment naming its writer, then the object as YAML.
fn document(kind: Kind, canonical: &Value) -> Res<Vec<u8>> {
    let yaml = serde_yaml_ng::to_string(canonical).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(format!("# {} written by podwarden for the Kubernetes API; edit it or use kubectl\n{yaml}", kind.as_str())
        .into_bytes())
}

const IMMUTABLE: &str = "field is immutable when `immutable` is set";

/// The API server's update rules: a Secret's type never changes; an
/// immutable object's data and `immutable` keep their values.
fn immutable(live: &LocalObject, new: &LocalObject) -> Res<()> {
    let forbidden = |f: &str| Cause::new("FieldValueForbidden", f, format!("Forbidden: {IMMUTABLE}"));
    let mut causes = Vec::new();
    if live.key.kind == Kind::Secret && live.type_ != new.type_ {
        let t = new.type_.clone().unwrap_or_default();
        causes.push(Cause::new("FieldValueInvalid", "type", format!("Invalid value: {t:?}: field is immutable")));
    }
    if live.immutable {
        if !new.immutable {
            causes.push(forbidden("immutable"));
        }
        let text = |o: &LocalObject| -> Vec<(String, Vec<u8>)> {
            o.data.iter().filter(|(k, _)| !o.binary_keys.contains(*k)).map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let binary = |o: &LocalObject| -> Vec<(String, Vec<u8>)> {
            o.data.iter().filter(|(k, _)| o.binary_keys.contains(*k)).map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        if text(live) != text(new) {
            causes.push(forbidden("data"));
        }
        if binary(live) != binary(new) {
            causes.push(forbidden("binaryData"));
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
    let list = if shown.len() == 1 { shown[0].clone() } else { format!("[{}]", shown.join(", ")) };
    Err(ApiError::invalid(format!("{} {:?} is invalid: {list}", live.key.kind.as_str(), live.key.name))
        .with_causes(causes))
}

/// `DELETE .../namespaces/NS/configmaps|secrets/NAME`: the file that holds
/// the object alone is removed.
pub fn delete(ctx: &Ctx, req: &Request, kind: Kind, ns: &str, name: &str) -> Res<Reply> {
    let key = ObjKey::new(kind, ns, name);
    let Some(live) = ctx.ops.object(&key) else { return Err(ApiError::not_found(resource(kind), name)) };
    let dry_run = params(req)?.dry_run;
    let path = if dry_run { ctx.ops.sole_file(&live)? } else { ctx.ops.delete_object(&live)? };
    if !dry_run {
        let file = path.to_string_lossy().into_owned();
        if !ctx.ops.wait_object(&key, SETTLE, |o| o.is_none_or(|o| o.file != file)) {
            log::warn!("API: {key}: {file} removed, not seen gone within {SETTLE:?}");
        }
    }
    Ok(Reply::ok(&json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": name, "kind": resource(kind)}})))
}

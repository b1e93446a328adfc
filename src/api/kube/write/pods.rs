//! Writes of pods through the Kubernetes API (authorization is the
//! caller's): create (`POST`, the same manifest file as `podwarden
//! apply`), `PATCH` (strategic merge, merge or JSON patch through `patch`,
//! server-side apply through `ssa`, which also creates) and `DELETE` (the
//! kill and the manifest's removal, through `api::ops`). A pod written
//! through the API is marked `podwarden.io/created-by: kubernetes-api`;
//! any other pod is a static pod, shown as a mirror pod, which the API
//! neither patches nor deletes (403 naming its manifest). The patched pod
//! is a new version of its manifest (the pod is replaced).

use serde_json::{Value, json};

use crate::api::ops::Trust;
use crate::api::status::{ApiError, Res};

use super::super::ctx::Ctx;
use super::super::resources;
use super::super::watch::Kind;
use super::super::wire::{Reply, Request};
use super::{body_object, identify, manifest_of, params, patch, ssa};

/// The largest pod manifest taken.
const MAX_MANIFEST: usize = 1 << 20;

/// `POST .../namespaces/NS/pods`.
pub fn create(ctx: &Ctx, req: &Request, ns: &str) -> Res<Reply> {
    let mut pod = body_object(req, MAX_MANIFEST)?;
    if pod.get("kind").and_then(Value::as_str) != Some("Pod") {
        return Err(ApiError::bad_request("the body is not a Pod (kind: Pod, apiVersion: v1)"));
    }
    let name = identify(&mut pod, "Pod", ns)?;
    if ctx.ops.find(ns, &name).is_ok() {
        return Err(ApiError::already_exists("pods", &name));
    }
    if req.query.get("dryRun").is_some() {
        return Err(ApiError::bad_request("dryRun is not supported by podwarden"));
    }
    if pod.pointer("/metadata/resourceVersion").is_some_and(|v| !v.is_null() && v != "") {
        return Err(ApiError::bad_request("resourceVersion should not be set on objects to be created"));
    }
    // what the API server sets on a new object: a random UID (kept by the
    // manifest, so the pod keeps it through metadata changes), the creation
    // time, and the creator's managed fields
    let params = params(req)?;
    if let Some(meta) = pod["metadata"].as_object_mut() {
        meta.insert("uid".into(), json!(new_uid()));
        meta.insert("creationTimestamp".into(), json!(params.now));
    }
    ssa::record_update("Pod", None, &mut pod, &super::manager_of(&params, req), &params.now);
    // identify made sure metadata is an object
    if let Some(a) = pod["metadata"]
        .as_object_mut()
        .and_then(|m| m.entry("annotations").or_insert_with(|| json!({})).as_object_mut())
    {
        a.insert(resources::CREATED_BY_ANNOTATION.into(), json!(resources::API_CREATED));
    }
    let bytes = serde_json::to_vec_pretty(&pod).map_err(|e| ApiError::internal(e.to_string()))?;
    let applied =
        ctx.ops.apply(&bytes, &format!("pods/{name}"), Trust::Client).map_err(|e| e.for_object("Pod", &name))?;
    let mut out = resources::pod_json(&applied.pod);
    out["metadata"]["resourceVersion"] = json!(ctx.hub.resource_version().to_string());
    Ok(Reply::json(201, &out))
}

/// A random (version 4) UUID, as the API server gives a new object.
fn new_uid() -> String {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 16];
    // the system's random source does not fail on Linux once booted; a
    // zero UID would still be unique to this node's manifests
    let _ = ring::rand::SystemRandom::new().fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = crate::base::hex(&b);
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// The manifest file a static pod comes from (its annotation).
fn manifest_file(pod: &Value) -> &str {
    pod.pointer("/metadata/annotations/podwarden.io~1config.file").and_then(Value::as_str).unwrap_or("")
}

/// `PATCH .../namespaces/NS/pods/NAME`: strategic merge, merge or JSON
/// patch, or server-side apply, checked by the request's
/// `fieldValidation`; the result written as the pod's manifest.
pub fn patch(ctx: &Ctx, req: &Request, ns: &str, name: &str) -> Res<Reply> {
    let live = ctx.hub.find(Kind::Pods, Some(ns), name).map(|o| o.value());
    let live = live.as_ref();
    let params = params(req)?;
    let ct = req.header("content-type").unwrap_or("");
    let is_apply = ct.starts_with("application/apply-patch");
    if let Some(pod) = live
        && !resources::is_api_pod(pod)
    {
        return Err(ApiError::forbidden(format!(
            "pods \"{name}\" is forbidden: a static pod (manifest {}) cannot be changed through the API: edit its \
             manifest",
            manifest_file(pod)
        )));
    }
    let patched = match (live, is_apply) {
        (Some(pod), true) => ssa::server_side_apply("Pod", Some(pod), &req.body, &params),
        (Some(pod), false) => patch::apply("Pod", pod, &req.body, ct, &params),
        (None, true) => ssa::server_side_apply("Pod", None, &req.body, &params),
        (None, false) => return Err(ApiError::not_found("pods", name)),
    }?;
    for w in &patched.warnings {
        log::debug!("PATCH pods {ns}/{name}: warning: {w}");
    }
    if params.dry_run {
        return Ok(Reply::ok(&patched.object));
    }
    let mut manifest = manifest_of(&patched.object);
    // a change of metadata only is the same pod (its UID, creation time and
    // containers kept), as on the API server; a changed spec makes it a new
    // pod, which replaces it
    let same_pod = live.is_some_and(|l| l.get("spec") == patched.object.get("spec"));
    if let Some(meta) = manifest.get_mut("metadata").and_then(Value::as_object_mut) {
        if let Some(l) = live.filter(|_| same_pod) {
            for key in ["uid", "creationTimestamp"] {
                if let Some(v) = l["metadata"].get(key).filter(|v| v.is_string()) {
                    meta.insert(key.into(), v.clone());
                }
            }
        }
        meta.insert("namespace".into(), json!(ns));
        let ann = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = ann.as_object_mut() {
            a.insert(resources::CREATED_BY_ANNOTATION.into(), json!(resources::API_CREATED));
        }
    }
    let bytes = serde_json::to_vec_pretty(&manifest).map_err(|e| ApiError::internal(e.to_string()))?;
    let applied =
        ctx.ops.apply(&bytes, &format!("pods/{name}"), Trust::Client).map_err(|e| e.for_object("Pod", name))?;
    let mut out = resources::pod_json(&applied.pod);
    out["metadata"]["resourceVersion"] = json!(ctx.hub.resource_version().to_string());
    Ok(Reply::json(if live.is_some() { 200 } else { 201 }, &out))
}

/// `DELETE .../namespaces/NS/pods/NAME`: the grace period from the query,
/// else the `DeleteOptions` body, else the pod's own.
pub fn delete(ctx: &Ctx, req: &Request, ns: &str, name: &str) -> Res<Reply> {
    let Some(pod) = ctx.hub.find(Kind::Pods, Some(ns), name).map(|o| o.value()) else {
        return Err(ApiError::not_found("pods", name));
    };
    if !resources::is_api_pod(&pod) {
        return Err(ApiError::forbidden(format!(
            "pods \"{name}\" is forbidden: a static pod (manifest {}) cannot be deleted through the API: remove \
             its manifest or use `podwarden delete pod {name} -n {ns}`",
            manifest_file(&pod)
        )));
    }
    // DeleteOptions as JSON, YAML or protobuf (client-go's typed Delete)
    let body: Value = if req.body.is_empty() { json!({}) } else { super::body_object(req, 64 << 10)? };
    if body.get("dryRun").is_some_and(|d| d.as_array().is_some_and(|a| !a.is_empty())) {
        return Err(ApiError::bad_request("dryRun is not supported by podwarden"));
    }
    let grace = match req.query.int("gracePeriodSeconds")? {
        Some(g) => Some(g),
        None => body.get("gracePeriodSeconds").and_then(Value::as_i64),
    };
    ctx.ops.delete(ns, name, grace)?;
    let mut out = pod;
    out["metadata"]["deletionTimestamp"] = json!(crate::model::rfc3339(std::time::SystemTime::now()));
    if let Some(g) = grace {
        out["metadata"]["deletionGracePeriodSeconds"] = json!(g);
    }
    Ok(Reply::ok(&out))
}

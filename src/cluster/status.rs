//! The `cluster-status` thread: what this node tells the API about pods.
//!
//! - **status**: each API pod's status as the status manager has it, sent
//!   to `pods/NAME/status` as a merge patch against the status the API
//!   shows (only what differs; conditions other components own, such as
//!   `PodScheduled` or `DisruptionTarget`, kept), carrying the pod's UID so
//!   a pod of the same name made since is never written; compared when the
//!   status manager's version or the API's status changed (the node
//!   lifecycle controller turns `Ready` off on a node it lost: set back
//!   once the node is heard again);
//! - **refusals**: a pod podwarden cannot run is Failed with the field it
//!   does not implement (reason [`REASON_UNSUPPORTED`]);
//! - **deletion**: a pod being deleted whose containers are gone and whose
//!   terminal status the API has is deleted for good
//!   (`gracePeriodSeconds: 0`, UID precondition), as the kubelet ends a
//!   graceful deletion;
//! - **mirror pods**: each static pod gets one (annotation
//!   `kubernetes.io/config.mirror` with its hash, the Node as its one
//!   controller owner, named `NAME-NODE` as the kubelet names static pods),
//!   its status on it; a mirror pod deleted, stale or
//!   of no static pod is deleted (and made again when its static pod is
//!   there); a static pod that uses ConfigMaps or Secrets cannot be
//!   mirrored (NodeRestriction), which a warning event on the node says.
//!
//! Wakes on every change the process counts (`base::changes`: a pod's
//! status, the API's pods), every second while work no change announces
//! is pending (a retry, a deletion waiting for clean-up, a mirror pod
//! asked for), else every 10 s; every call is bounded by the client's
//! timeout.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::pods::{ApiPod, Kind, MIRROR_ANNOTATION, REASON_UNSUPPORTED};
use super::{ClusterError, Shared};
use crate::agent::Parts;
use crate::model::{self, Pod};
use crate::telemetry::events::{EventType, ObjectRef};

/// The node event of a static pod that cannot have a mirror pod.
pub const REASON_NO_MIRROR: &str = "MirrorPodRefused";
/// Pod conditions the kubelet owns: any other the API shows is kept.
const KUBELET_CONDITIONS: &[&str] =
    &["PodScheduled", "Ready", "Initialized", "ContainersReady", "PodReadyToStartContainers"];

/// A pod's status as last compared with the API's.
struct Sent {
    /// The status manager's version.
    version: u64,
    /// The API's status it was compared with.
    api: Arc<Value>,
    /// Patches sent in a row for this version because the API's status
    /// changed, without the API agreeing in between: a field the API
    /// server rewrites would otherwise be patched on every watch event, so
    /// after [`MAX_RESENDS`] only a new version is sent.
    resends: u32,
}

/// Patches of one status version after the API's status changed.
const MAX_RESENDS: u32 = 3;

/// What the thread remembers between passes.
#[derive(Default)]
struct State {
    /// The status manager's version last sent (or found equal) and the
    /// API's status it was compared with, by UID: either changing (a
    /// status of ours, or another component's write such as the node
    /// lifecycle controller's Ready=False while the node was cut off)
    /// compares them again.
    sent: HashMap<String, Sent>,
    /// Pods deleted for good (or found gone).
    finished: HashSet<String>,
    /// Static pods whose mirror pod cannot be made (told once each).
    unmirrorable: HashSet<String>,
    /// When a mirror pod was last asked for, by static pod UID.
    mirror_asked: HashMap<String, Instant>,
    /// The last pass left work that no change announces (a refused call
    /// to try again, a deletion waiting for the pod's clean-up, a mirror
    /// pod asked for): the next pass comes after [`BUSY_PASS`].
    busy: bool,
}

/// The pass interval while work is pending.
const BUSY_PASS: Duration = Duration::from_secs(1);
/// The pass interval when nothing is pending: every change the process
/// counts wakes the thread before that.
const IDLE_PASS: Duration = Duration::from_secs(10);

/// The `cluster-status` thread's loop; returns when `shared` stops.
pub fn run(parts: Parts, shared: Arc<Shared>) {
    let mut state = State::default();
    let mut seen = 0u64;
    let logged = crate::base::logging::RateLimit::new(Duration::from_secs(60));
    let mut failures = 0u32;
    loop {
        if shared.stopped() {
            return;
        }
        let before = seen;
        seen = crate::base::changes::wait_past(seen, if state.busy { BUSY_PASS } else { IDLE_PASS });
        log::trace!(
            "cluster: status pass ({}, busy {})",
            if seen == before { "timer" } else { "a change" },
            state.busy
        );
        let Some(client) = shared.client() else { continue };
        // the link back: after the Lease and the pods' list or watch
        if !shared.link_up() || !shared.view.lock().fresh_and_synced() {
            continue;
        }
        state.busy = true;
        match pass(&parts, &shared, &client, &mut state) {
            Ok(()) => failures = 0,
            // the server is there, one pod's call was refused: tried again
            // at the next pass, the others went on
            Err(e @ ClusterError::Api { .. }) => {
                if logged.allow().is_some() {
                    log::error!("cluster: pod status: {e} (retrying)");
                }
            }
            Err(e) => {
                failures += 1;
                if matches!(e, ClusterError::Unreachable(_) | ClusterError::Tls(_)) {
                    shared.link_lost(&e);
                }
                if logged.allow().is_some() || failures == 1 {
                    log::error!("cluster: pod status: {e} (attempt {failures}; retrying with back-off)");
                }
                if !shared.pause(super::node::backoff(failures)) {
                    return;
                }
            }
        }
    }
}

/// One pass over the API's pods and the static pods.
fn pass(parts: &Parts, shared: &Shared, client: &super::http::Client, state: &mut State) -> Result<(), ClusterError> {
    let pods: Vec<ApiPod> = shared.view.lock().pods.values().cloned().collect();
    state.sent.retain(|uid, _| pods.iter().any(|p| p.uid == *uid));
    state.finished.retain(|uid| pods.iter().any(|p| p.uid == *uid));
    // static pods by full name, and the mirror pods that show them
    let statics: BTreeMap<String, Arc<Pod>> = parts
        .agent
        .desired()
        .into_iter()
        .filter(|d| model::is_static(&d.pod))
        .map(|d| (model::full_name(&d.pod), d.pod))
        .collect();
    let mut mirrored: HashSet<String> = HashSet::new();
    // one pod's refusal (a missing namespace, a validation error) must not
    // hold the others back: logged, retried at the next pass; only a
    // server that cannot be reached ends the pass
    let mut first_error = None;
    let mut step = |r: Result<(), ClusterError>| -> Result<(), ClusterError> {
        match r {
            Ok(()) => Ok(()),
            Err(e @ (ClusterError::Unreachable(_) | ClusterError::Tls(_))) => Err(e),
            Err(e) => {
                log::debug!("cluster: {e}");
                first_error.get_or_insert(e);
                Ok(())
            }
        }
    };
    for p in &pods {
        if state.finished.contains(&p.uid) {
            continue;
        }
        match &p.kind {
            Kind::Run(pod) => {
                step(send_status(parts, client, state, p, model::uid(pod)))?;
                if p.deleted {
                    step(finish_deletion(parts, client, state, p))?;
                }
            }
            Kind::Refused(why) => step(refuse(client, state, p, why))?,
            Kind::Mirror(hash) => {
                let full = static_full_name(&parts.node_name, p);
                match statics.get(&full) {
                    Some(s) if !p.deleted && model::annotation(s, model::CONFIG_HASH_ANNOTATION) == Some(hash) => {
                        mirrored.insert(full);
                        step(send_status(parts, client, state, p, model::uid(s)))?;
                    }
                    _ => {
                        // deleted, stale, or of no static pod: gone for good,
                        // made again below when its static pod is there
                        log::info!("cluster: deleting mirror pod {}/{} {}", p.namespace, p.name, p.uid);
                        let r = delete_for_good(client, p);
                        if r.is_ok() {
                            state.finished.insert(p.uid.clone());
                        }
                        step(r)?;
                    }
                }
            }
        }
    }
    let node_uid = shared.node_uid();
    state.mirror_asked.retain(|uid, _| statics.values().any(|s| model::uid(s) == uid));
    let mut mirror_pending = false;
    for (full, s) in &statics {
        // a pod of that name still in the API (a mirror being deleted):
        // the mirror is made once it is gone
        let taken =
            pods.iter().any(|p| static_full_name(&parts.node_name, p) == *full && !state.finished.contains(&p.uid));
        if mirrored.contains(full) {
            continue;
        }
        mirror_pending |= !state.unmirrorable.contains(model::uid(s));
        if taken {
            continue;
        }
        let Some(node_uid) = &node_uid else { break };
        step(make_mirror(parts, client, state, s, node_uid))?;
    }
    state.busy =
        first_error.is_some() || mirror_pending || pods.iter().any(|p| p.deleted && !state.finished.contains(&p.uid));
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A mirror pod's name: the static pod's with the node's after a dash, as
/// the kubelet names static pods, so that nodes with a static pod of the
/// same name do not collide in the API.
pub fn mirror_name(node: &str, static_name: &str) -> String {
    format!("{static_name}-{node}")
}

/// The full name (`name_namespace`) of the static pod an API pod would be
/// the mirror of (its name without `-NODE`).
fn static_full_name(node: &str, p: &ApiPod) -> String {
    let name = p.name.strip_suffix(&format!("-{node}")).unwrap_or(&p.name);
    format!("{name}_{}", p.namespace)
}

/// The status manager's status of `source_uid` to the API pod `p`, when
/// its version changed since the last one sent.
fn send_status(
    parts: &Parts,
    client: &super::http::Client,
    state: &mut State,
    p: &ApiPod,
    source_uid: &str,
) -> Result<(), ClusterError> {
    let Some(version) = parts.statuses.version(source_uid) else { return Ok(()) };
    let resends = match state.sent.get(&p.uid) {
        Some(s) if s.version == version && Arc::ptr_eq(&s.api, &p.status) => return Ok(()),
        Some(s) if s.version == version && s.resends >= MAX_RESENDS => return Ok(()),
        Some(s) if s.version == version => s.resends + 1,
        _ => 0,
    };
    let sent = Sent { version, api: p.status.clone(), resends };
    let Some(status) = parts.statuses.get(source_uid) else { return Ok(()) };
    let mut ours = serde_json::to_value(&status).unwrap_or_else(|_| json!({}));
    keep_others(&p.status, &mut ours);
    // the API shows zero values podwarden leaves out (`lastProbeTime:
    // null`, `lastState: {}`): the same status, no patch
    let mut theirs = (*p.status).clone();
    prune(&mut theirs);
    prune(&mut ours);
    let Some(diff) = merge_diff(&theirs, &ours) else {
        // the API agrees: a later change of its status may be patched again
        state.sent.insert(p.uid.clone(), Sent { resends: 0, ..sent });
        return Ok(());
    };
    let body = json!({"metadata": {"uid": p.uid}, "status": diff});
    let r = client.send(
        "PATCH",
        &format!("{}/status", p.path()),
        "application/merge-patch+json",
        body.to_string().as_bytes(),
    )?;
    match r.status {
        200 => {
            state.sent.insert(p.uid.clone(), sent);
            Ok(())
        }
        // gone, or a new pod of that name: nothing to tell
        404 | 409 => {
            state.sent.insert(p.uid.clone(), sent);
            Ok(())
        }
        _ => Err(super::api_error(&format!("patching the status of pod {}/{}", p.namespace, p.name), &r)),
    }
}

/// Conditions and fields other components own, kept from the API's status.
fn keep_others(api: &Value, ours: &mut Value) {
    let Some(o) = ours.as_object_mut() else { return };
    let mut conds: Vec<Value> = o.get("conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    for c in api["conditions"].as_array().into_iter().flatten() {
        let t = c["type"].as_str().unwrap_or_default();
        let ours_has = conds.iter().any(|x| x["type"] == t);
        if !ours_has && (!KUBELET_CONDITIONS.contains(&t) || t == "PodScheduled") {
            conds.push(c.clone());
        }
    }
    if !conds.is_empty() {
        o.insert("conditions".into(), Value::Array(conds));
    }
    for key in ["nominatedNodeName", "resourceClaimStatuses", "extendedResourceClaimStatus"] {
        if let Some(v) = api.get(key).filter(|v| !v.is_null()) {
            o.insert(key.into(), v.clone());
        }
    }
}

/// Nulls and empty objects taken out, at every depth (in lists too): they
/// say nothing a missing key does not.
fn prune(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for x in m.values_mut() {
                prune(x);
            }
            m.retain(|_, x| !x.is_null() && !x.as_object().is_some_and(|o| o.is_empty()));
        }
        Value::Array(a) => a.iter_mut().for_each(prune),
        _ => {}
    }
}

/// RFC 7386's patch from `old` to `new`: changed and new keys, removed ones
/// as null; a list is replaced whole. `None` when they are equal.
pub fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) => {
                        if let Some(d) = merge_diff(ov, nv) {
                            patch.insert(k.clone(), d);
                        }
                    }
                    None if nv.is_null() => {}
                    None => {
                        patch.insert(k.clone(), nv.clone());
                    }
                }
            }
            for (k, ov) in o {
                if !n.contains_key(k) && !ov.is_null() {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

/// A pod podwarden cannot run: Failed with the reason, once.
fn refuse(client: &super::http::Client, state: &mut State, p: &ApiPod, why: &str) -> Result<(), ClusterError> {
    if p.status["phase"] == "Failed" || state.sent.contains_key(&p.uid) {
        return Ok(());
    }
    let body = json!({
        "metadata": {"uid": p.uid},
        "status": {
            "phase": "Failed",
            "reason": REASON_UNSUPPORTED,
            "message": format!("Pod was rejected: {why}"),
        },
    });
    let r = client.send(
        "PATCH",
        &format!("{}/status", p.path()),
        "application/merge-patch+json",
        body.to_string().as_bytes(),
    )?;
    match r.status {
        200 | 404 | 409 => {
            state.sent.insert(p.uid.clone(), Sent { version: 0, api: p.status.clone(), resends: MAX_RESENDS });
            Ok(())
        }
        _ => Err(super::api_error(&format!("failing pod {}/{}", p.namespace, p.name), &r)),
    }
}

/// A pod being deleted: once its worker is done and the API shows its
/// terminal status, deleted for good.
fn finish_deletion(
    parts: &Parts,
    client: &super::http::Client,
    state: &mut State,
    p: &ApiPod,
) -> Result<(), ClusterError> {
    let terminal = model::is_terminal_phase(p.status["phase"].as_str());
    if !terminal || !parts.agent.is_pod_cleaned_up(&p.uid) {
        return Ok(());
    }
    log::info!("cluster: pod {}/{} {} terminated: deleting it from the API", p.namespace, p.name, p.uid);
    delete_for_good(client, p)?;
    state.finished.insert(p.uid.clone());
    Ok(())
}

/// `DELETE` with no grace period and the pod's UID as precondition.
fn delete_for_good(client: &super::http::Client, p: &ApiPod) -> Result<(), ClusterError> {
    let body = json!({
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "gracePeriodSeconds": 0,
        "preconditions": {"uid": p.uid},
    });
    let r = client.send("DELETE", &p.path(), "application/json", body.to_string().as_bytes())?;
    match r.status {
        200 | 202 | 404 | 409 => Ok(()),
        _ => Err(super::api_error(&format!("deleting pod {}/{}", p.namespace, p.name), &r)),
    }
}

/// The mirror pod of static pod `s`: made unless it uses API objects
/// (then a warning event on the node, once). At most every 10 s a pod.
fn make_mirror(
    parts: &Parts,
    client: &super::http::Client,
    state: &mut State,
    s: &Arc<Pod>,
    node_uid: &str,
) -> Result<(), ClusterError> {
    let uid = model::uid(s).to_string();
    if state.unmirrorable.contains(&uid)
        || state.mirror_asked.get(&uid).is_some_and(|t| t.elapsed() < Duration::from_secs(10))
    {
        return Ok(());
    }
    state.mirror_asked.insert(uid.clone(), Instant::now());
    let refs = model::objects::references(s);
    if !refs.is_empty() {
        state.unmirrorable.insert(uid);
        let msg = format!(
            "static pod {}/{} has no mirror pod in the API: it uses {} (the API server lets a node mirror only pods that reference no ConfigMap, Secret or service account); it runs anyway",
            model::namespace(s),
            model::name(s),
            refs.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(", ")
        );
        log::warn!("cluster: {msg}");
        parts.events.event(&ObjectRef::node(&parts.node_name), EventType::Warning, REASON_NO_MIRROR, &msg);
        return Ok(());
    }
    let mut meta = json!({
        "name": mirror_name(&parts.node_name, model::name(s)),
        "namespace": model::namespace(s),
        "ownerReferences": [{
            "apiVersion": "v1", "kind": "Node", "name": parts.node_name, "uid": node_uid, "controller": true,
        }],
    });
    if let Some(labels) = &s.metadata.labels {
        meta["labels"] = json!(labels);
    }
    let mut annotations: BTreeMap<String, String> = s.metadata.annotations.clone().unwrap_or_default();
    annotations
        .insert(MIRROR_ANNOTATION.into(), model::annotation(s, model::CONFIG_HASH_ANNOTATION).unwrap_or(&uid).into());
    meta["annotations"] = json!(annotations);
    let body = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": s.spec});
    let path = format!("/api/v1/namespaces/{}/pods", model::namespace(s));
    let r = client.send("POST", &path, "application/json", body.to_string().as_bytes())?;
    match r.status {
        201 => {
            log::info!("cluster: made the mirror pod of static pod {}", model::pod_ref(s));
            Ok(())
        }
        // one of that name exists: the next pass sees it (and replaces a
        // stale one)
        409 => Ok(()),
        _ => {
            let e = super::api_error(&format!("making the mirror pod of {}", model::pod_ref(s)), &r);
            if matches!(r.status, 400 | 403 | 422) {
                // the API will not take it as it is: said once, then left
                state.unmirrorable.insert(uid);
                parts.events.event(
                    &ObjectRef::node(&parts.node_name),
                    EventType::Warning,
                    REASON_NO_MIRROR,
                    &format!("static pod {} has no mirror pod in the API: {e}; it runs anyway", model::pod_ref(s)),
                );
                return Ok(());
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_diff_names_changes_and_removals_and_replaces_lists() {
        let old = json!({"phase": "Pending", "reason": "x", "conditions": [{"type": "Ready", "status": "False"}], "same": {"a": 1}});
        let new = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "same": {"a": 1}, "podIP": "10.0.0.2"});
        assert_eq!(
            merge_diff(&old, &new).unwrap(),
            json!({"phase": "Running", "reason": null, "conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.2"})
        );
        assert_eq!(merge_diff(&new, &new), None);
        // nested objects patch field by field
        let a = json!({"s": {"x": 1, "y": 2}});
        let b = json!({"s": {"x": 1, "y": 3}});
        assert_eq!(merge_diff(&a, &b).unwrap(), json!({"s": {"y": 3}}));
    }

    #[test]
    fn zero_values_the_api_shows_are_no_change() {
        let mut api = json!({"conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null}],
            "containerStatuses": [{"name": "c", "lastState": {}, "state": {"running": {"startedAt": "t"}}}]});
        let mut ours = json!({"conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "c", "state": {"running": {"startedAt": "t"}}}]});
        assert!(merge_diff(&api, &ours).is_some(), "whole lists differ before pruning");
        prune(&mut api);
        prune(&mut ours);
        assert_eq!(merge_diff(&api, &ours), None);
    }

    #[test]
    fn conditions_of_other_components_are_kept() {
        let api = json!({"conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "DisruptionTarget", "status": "True"},
            {"type": "Ready", "status": "True"},
        ], "nominatedNodeName": "n"});
        let mut ours = json!({"conditions": [{"type": "Ready", "status": "False"}], "phase": "Running"});
        keep_others(&api, &mut ours);
        let types: Vec<&str> =
            ours["conditions"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["Ready", "PodScheduled", "DisruptionTarget"]);
        assert_eq!(ours["conditions"][0]["status"], "False", "ours wins for a kubelet condition");
        assert_eq!(ours["nominatedNodeName"], "n");
    }
}

//! The volumes whose files podwarden writes: `configMap`, `secret`,
//! `downwardAPI` and `projected` (configMap, secret and downwardAPI
//! sources). Their content is computed here (the kubelet's payloads: keys
//! or items, modes, optional objects and keys, the downward API's file
//! formats) and written by the atomic writer on every set-up pass, so an
//! edit of an object reaches the files at the pod's next pass (the source
//! asks for one when an object a pod uses changes).

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, KeyToPath, Pod, Volume};
use thiserror::Error;

use crate::model;
use crate::model::objects::{Kind, ObjKey, ObjectSet};
use crate::pod::phases::env::EnvError;
use crate::pod::volumes::atomic_writer::{FileData, PathError, Payload, check_path, clean};

/// The defaults of the API: every volume's files are 0644, except a
/// Secret's, which podwarden writes 0400 (readable by the container's root
/// user only) unless a `defaultMode` or `mode` says otherwise.
pub const DEFAULT_MODE: u32 = 0o644;
pub const SECRET_DEFAULT_MODE: u32 = 0o400;

/// The kinds of volume written here, with the kubelet's plugin directory
/// names (`pods/<uid>/volumes/<plugin>/<volume>`) and where their content
/// lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugin {
    ConfigMap,
    Secret,
    DownwardApi,
    Projected,
}

impl Plugin {
    pub fn of(v: &Volume) -> Option<Plugin> {
        if v.config_map.is_some() {
            Some(Plugin::ConfigMap)
        } else if v.secret.is_some() {
            Some(Plugin::Secret)
        } else if v.downward_api.is_some() {
            Some(Plugin::DownwardApi)
        } else if v.projected.is_some() {
            Some(Plugin::Projected)
        } else {
            None
        }
    }

    pub fn dir(self) -> &'static str {
        match self {
            Plugin::ConfigMap => "kubernetes.io~configmap",
            Plugin::Secret => "kubernetes.io~secret",
            Plugin::DownwardApi => "kubernetes.io~downward-api",
            Plugin::Projected => "kubernetes.io~projected",
        }
    }

    /// Whether the files live in memory (a tmpfs of their own): as in the
    /// kubelet, everything but a ConfigMap's, so Secrets never touch a disk.
    pub fn in_memory(self) -> bool {
        self != Plugin::ConfigMap
    }
}

/// Why a volume's content cannot be made (the kubelet's `FailedMount`
/// messages after `MountVolume.SetUp failed for volume "v" : `).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PayloadError {
    #[error("{} {:?} not found", .0.kind.resource(), .0.name)]
    NotFound(ObjKey),
    #[error("configmap references non-existent config key: {0}")]
    ConfigMapKey(String),
    #[error("secret references non-existent secret key: {0}")]
    SecretKey(String),
    #[error(transparent)]
    Path(#[from] PathError),
    /// `serviceAccountToken` on a node without a control plane.
    #[error("a service account token needs the cluster's API server (cluster mode)")]
    NoTokenIssuer,
    #[error("failed to fetch token: {0}")]
    Token(crate::pod::cluster::TokenError),
    #[error("downward API item {path:?}: {source}")]
    Downward {
        path: String,
        #[source]
        source: DownwardFileError,
    },
}

/// Why a downward API volume file cannot be made.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DownwardFileError {
    #[error("unsupported fieldPath: {0}")]
    FieldPath(String),
    #[error("needs a fieldRef or a resourceFieldRef")]
    NoSource,
    #[error("container {0} not found")]
    NoContainer(String),
    /// Boxed: an `EnvError` is large.
    #[error(transparent)]
    Resource(Box<EnvError>),
}

/// What the downward API reads besides the pod, for volume files.
#[derive(Debug, Clone, Copy)]
pub struct Node {
    pub allocatable_cpu_millis: i64,
    pub allocatable_memory_bytes: i64,
    pub allocatable_ephemeral_bytes: i64,
}

/// The files of volume `v` of `pod`, or `None` if it is not a volume kind
/// written here.
pub fn payload(
    pod: &Pod,
    v: &Volume,
    objects: &ObjectSet,
    node: Node,
    cluster: Option<&dyn crate::pod::cluster::ClusterFacts>,
) -> Option<Result<Payload, PayloadError>> {
    let ns = model::namespace(pod);
    let mut out = Payload::new();
    let r = if let Some(cm) = &v.config_map {
        let mode = cm.default_mode.map_or(DEFAULT_MODE, |m| m as u32);
        object_files(&mut out, objects, ObjKey::new(Kind::ConfigMap, ns, &cm.name), &cm.items, cm.optional, mode)
    } else if let Some(s) = &v.secret {
        let name = s.secret_name.as_deref().unwrap_or("");
        let mode = s.default_mode.map_or(SECRET_DEFAULT_MODE, |m| m as u32);
        object_files(&mut out, objects, ObjKey::new(Kind::Secret, ns, name), &s.items, s.optional, mode)
    } else if let Some(d) = &v.downward_api {
        let mode = d.default_mode.map_or(DEFAULT_MODE, |m| m as u32);
        downward_files(&mut out, pod, d.items.iter().flatten(), mode, node)
    } else if let Some(p) = &v.projected {
        (|| {
            for src in p.sources.iter().flatten() {
                if let Some(cm) = &src.config_map {
                    let mode = p.default_mode.map_or(DEFAULT_MODE, |m| m as u32);
                    let key = ObjKey::new(Kind::ConfigMap, ns, &cm.name);
                    object_files(&mut out, objects, key, &cm.items, cm.optional, mode)?;
                }
                if let Some(s) = &src.secret {
                    let mode = p.default_mode.map_or(SECRET_DEFAULT_MODE, |m| m as u32);
                    let key = ObjKey::new(Kind::Secret, ns, &s.name);
                    object_files(&mut out, objects, key, &s.items, s.optional, mode)?;
                }
                if let Some(d) = &src.downward_api {
                    let mode = p.default_mode.map_or(DEFAULT_MODE, |m| m as u32);
                    downward_files(&mut out, pod, d.items.iter().flatten(), mode, node)?;
                }
                if let Some(t) = &src.service_account_token {
                    // the token is a secret: 0600 unless the volume says
                    let mode = p.default_mode.map_or(SECRET_DEFAULT_MODE, |m| m as u32);
                    check_path(&t.path)?;
                    let Some(cluster) = cluster else { return Err(PayloadError::NoTokenIssuer) };
                    let audience = t.audience.as_deref().unwrap_or("");
                    let seconds = t.expiration_seconds.unwrap_or(3600);
                    let token = cluster.token(pod, audience, seconds).map_err(PayloadError::Token)?;
                    out.insert(clean(&t.path), FileData { data: token.into_bytes(), mode });
                }
            }
            Ok(())
        })()
    } else {
        return None;
    };
    Some(r.map(|()| out))
}

/// A ConfigMap's or Secret's files: every key, or the listed items.
fn object_files(
    out: &mut Payload,
    objects: &ObjectSet,
    key: ObjKey,
    items: &Option<Vec<KeyToPath>>,
    optional: Option<bool>,
    default_mode: u32,
) -> Result<(), PayloadError> {
    let optional = optional.unwrap_or(false);
    let kind = key.kind;
    let Some(obj) = objects.get(&key) else {
        // a missing optional object is an empty one
        return if optional { Ok(()) } else { Err(PayloadError::NotFound(key)) };
    };
    match items.as_ref().filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in &obj.data {
                check_path(k)?;
                out.insert(k.clone(), FileData { data: v.clone(), mode: default_mode });
            }
        }
        Some(items) => {
            for it in items {
                let Some(v) = obj.data.get(&it.key) else {
                    if optional {
                        continue;
                    }
                    return Err(match kind {
                        Kind::ConfigMap => PayloadError::ConfigMapKey(it.key.clone()),
                        Kind::Secret => PayloadError::SecretKey(it.key.clone()),
                    });
                };
                check_path(&it.path)?;
                let mode = it.mode.map_or(default_mode, |m| m as u32);
                out.insert(clean(&it.path), FileData { data: v.clone(), mode });
            }
        }
    }
    Ok(())
}

/// The downward API's files.
fn downward_files<'a>(
    out: &mut Payload,
    pod: &Pod,
    items: impl Iterator<Item = &'a DownwardAPIVolumeFile>,
    default_mode: u32,
    node: Node,
) -> Result<(), PayloadError> {
    for it in items {
        check_path(&it.path)?;
        let bad = |source| PayloadError::Downward { path: it.path.clone(), source };
        let text = if let Some(f) = &it.field_ref {
            field_file(pod, &f.field_path).ok_or_else(|| bad(DownwardFileError::FieldPath(f.field_path.clone())))?
        } else if let Some(r) = &it.resource_field_ref {
            resource_file(pod, r, node).map_err(bad)?
        } else {
            return Err(bad(DownwardFileError::NoSource));
        };
        let mode = it.mode.map_or(default_mode, |m| m as u32);
        out.insert(clean(&it.path), FileData { data: text.into_bytes(), mode });
    }
    Ok(())
}

/// A downward-API volume file for `path`: a scalar as it is, a whole map
/// as sorted `key="value"` lines (Go-quoted values, no final newline).
pub fn field_file(pod: &Pod, path: &str) -> Option<String> {
    let map = |m: &Option<std::collections::BTreeMap<String, String>>| {
        let lines: Vec<String> =
            m.iter().flatten().map(|(k, v)| format!("{k}={}", crate::model::quote::go_quote(v))).collect();
        lines.join("\n")
    };
    match path {
        "metadata.name" => Some(model::name(pod).to_string()),
        "metadata.namespace" => Some(model::namespace(pod).to_string()),
        "metadata.uid" => Some(model::uid(pod).to_string()),
        "metadata.labels" => Some(map(&pod.metadata.labels)),
        "metadata.annotations" => Some(map(&pod.metadata.annotations)),
        other => {
            let (m, key) = crate::model::downward::subscript(other)?;
            let m = if m == "labels" { &pod.metadata.labels } else { &pod.metadata.annotations };
            Some(m.as_ref().and_then(|m| m.get(key)).cloned().unwrap_or_default())
        }
    }
}

/// A `resourceFieldRef` file (`containerName` is required in volumes).
fn resource_file(
    pod: &Pod,
    r: &k8s_openapi::api::core::v1::ResourceFieldSelector,
    node: Node,
) -> Result<String, DownwardFileError> {
    let name = r.container_name.as_deref().unwrap_or("");
    let c = model::find_container(pod, name).ok_or_else(|| DownwardFileError::NoContainer(name.to_string()))?;
    let objects = ObjectSet::new();
    let dw = crate::pod::phases::env::Downward {
        pod_ip: None,
        host_ip: None,
        allocatable_cpu_millis: node.allocatable_cpu_millis,
        allocatable_memory_bytes: node.allocatable_memory_bytes,
        allocatable_ephemeral_bytes: node.allocatable_ephemeral_bytes,
        objects: &objects,
        services: &[],
    };
    crate::pod::phases::env::resource_value(pod, c, &r.resource, r, &dw)
        .map_err(|e| DownwardFileError::Resource(Box::new(e)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn set(docs: &[serde_json::Value]) -> ObjectSet {
        docs.iter()
            .map(|d| {
                let kind = if d["kind"] == "Secret" { Kind::Secret } else { Kind::ConfigMap };
                let (o, _) = crate::model::objects::from_value(kind, "f", d.clone()).unwrap();
                (o.key.clone(), Arc::new(o))
            })
            .collect()
    }

    const NODE: Node =
        Node { allocatable_cpu_millis: 2000, allocatable_memory_bytes: 1 << 30, allocatable_ephemeral_bytes: 10 << 30 };

    fn files(p: &Pod, i: usize, objs: &ObjectSet) -> Result<Vec<(String, String, u32)>, PayloadError> {
        let v = &p.spec.as_ref().unwrap().volumes.as_ref().unwrap()[i];
        payload(p, v, objs, NODE, None)
            .unwrap()
            .map(|pl| pl.into_iter().map(|(k, f)| (k, String::from_utf8(f.data).unwrap(), f.mode)).collect())
    }

    #[test]
    fn config_map_and_secret_payloads() {
        let objs = set(&[
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
                "data": {"a": "1", "b": "2"}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"pw": "x"}}),
        ]);
        let p = pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [], "volumes": [
            {"name": "all", "configMap": {"name": "cm"}},
            {"name": "some", "configMap": {"name": "cm", "defaultMode": 0o600,
                "items": [{"key": "b", "path": "dir/b.conf", "mode": 0o640}, {"key": "a", "path": "a"}]}},
            {"name": "sec", "secret": {"secretName": "s"}},
            {"name": "gone", "configMap": {"name": "nope"}},
            {"name": "opt", "configMap": {"name": "nope", "optional": true}},
            {"name": "badkey", "configMap": {"name": "cm", "items": [{"key": "zz", "path": "z"}]}},
            {"name": "optkey", "configMap": {"name": "cm", "optional": true, "items": [{"key": "zz", "path": "z"}]}},
            {"name": "sbad", "secret": {"secretName": "s", "items": [{"key": "zz", "path": "z"}]}},
        ]}}));
        assert_eq!(
            files(&p, 0, &objs).unwrap(),
            vec![("a".into(), "1".into(), 0o644), ("b".into(), "2".into(), 0o644)]
        );
        assert_eq!(
            files(&p, 1, &objs).unwrap(),
            vec![("a".into(), "1".into(), 0o600), ("dir/b.conf".into(), "2".into(), 0o640)]
        );
        assert_eq!(files(&p, 2, &objs).unwrap(), vec![("pw".into(), "x".into(), 0o400)]);
        assert_eq!(files(&p, 3, &objs).unwrap_err().to_string(), "configmap \"nope\" not found");
        assert!(files(&p, 4, &objs).unwrap().is_empty());
        assert_eq!(files(&p, 5, &objs).unwrap_err().to_string(), "configmap references non-existent config key: zz");
        assert!(files(&p, 6, &objs).unwrap().is_empty());
        assert_eq!(files(&p, 7, &objs).unwrap_err().to_string(), "secret references non-existent secret key: zz");
    }

    #[test]
    fn downward_and_projected_payloads() {
        let objs = set(&[json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
            "data": {"a": "1"}})]);
        let p = pod(json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u1",
            "labels": {"z": "last", "app": "web \"x\"\n"}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"memory": "64Mi"}}}], "volumes": [
            {"name": "dw", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                {"path": "mem", "resourceFieldRef": {"containerName": "c", "resource": "limits.memory",
                    "divisor": "1Mi"}},
                {"path": "cpu", "resourceFieldRef": {"containerName": "c", "resource": "limits.cpu",
                    "divisor": "1m"}}]}},
            {"name": "pj", "projected": {"sources": [
                {"configMap": {"name": "cm"}},
                {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
        ]}}));
        assert_eq!(
            files(&p, 0, &objs).unwrap(),
            vec![
                ("cpu".into(), "2000".into(), 0o644),
                ("labels".into(), "app=\"web \\\"x\\\"\\n\"\nz=\"last\"".into(), 0o644),
                ("mem".into(), "64".into(), 0o644),
                ("name".into(), "p".into(), 0o644),
            ]
        );
        // a ConfigMap in another namespace is not this pod's
        let p2 = pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [], "volumes": [
            {"name": "pj", "projected": {"sources": [{"configMap": {"name": "cm"}}]}}]}}));
        assert_eq!(files(&p2, 0, &objs).unwrap(), vec![("a".into(), "1".into(), 0o644)]);
        assert_eq!(files(&p, 1, &objs).unwrap_err().to_string(), "configmap \"cm\" not found");
    }
}

//! Which fields of a v1 Pod podwarden implements: one table, used by
//! manifest validation (a set field that podwarden would silently drop is
//! an error naming its path) and checked by a test against the full field
//! list of k8s-openapi's types, so a new Kubernetes version cannot add a
//! field that is silently ignored. README's "Pod spec fields" section is
//! this table.
//!
//! Paths are JSON names joined by `.`, with `[]` for the items of a list.
//! The table lists every field whose parents are all `Supported`; the
//! fields under a `Rejected`, `Only` or `Ignored` one are covered by it.
//! A field that is not in the schema at all (a typo) is not an error: it is
//! warned about by path, as kubectl does.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use serde_json::Value;

use super::field::{FieldError, FieldErrors};

/// What podwarden does with a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Implemented: it reaches the runtime or changes what podwarden does.
    Supported,
    /// Not implemented: a manifest that sets it is rejected.
    Rejected,
    /// Accepted only with this value (JSON), the one podwarden's behaviour
    /// matches; any other value is rejected.
    Only(&'static str),
    /// Output written by the API server (status, server-set metadata):
    /// accepted and ignored, as they carry no intent.
    Ignored,
}

use Support::{Ignored, Only, Rejected, Supported};

/// Every field path of a v1 Pod whose parents are all supported.
pub const FIELDS: &[(&str, Support)] = &[
    ("apiVersion", Supported),
    ("kind", Supported),
    ("metadata", Supported),
    ("metadata.annotations", Supported),
    ("metadata.creationTimestamp", Ignored),
    ("metadata.deletionGracePeriodSeconds", Rejected),
    ("metadata.deletionTimestamp", Rejected),
    ("metadata.finalizers", Rejected),
    ("metadata.generateName", Rejected),
    ("metadata.generation", Ignored),
    ("metadata.labels", Supported),
    ("metadata.managedFields", Ignored),
    ("metadata.name", Supported),
    ("metadata.namespace", Supported),
    ("metadata.ownerReferences", Rejected),
    ("metadata.resourceVersion", Ignored),
    ("metadata.selfLink", Ignored),
    ("metadata.uid", Supported),
    ("spec", Supported),
    ("spec.activeDeadlineSeconds", Supported),
    ("spec.affinity", Rejected),
    ("spec.automountServiceAccountToken", Only("false")),
    ("spec.containers", Supported),
    ("spec.containers[].args", Supported),
    ("spec.containers[].command", Supported),
    ("spec.containers[].env", Supported),
    ("spec.containers[].env[].name", Supported),
    ("spec.containers[].env[].value", Supported),
    ("spec.containers[].env[].valueFrom", Supported),
    ("spec.containers[].env[].valueFrom.configMapKeyRef", Supported),
    ("spec.containers[].env[].valueFrom.configMapKeyRef.key", Supported),
    ("spec.containers[].env[].valueFrom.configMapKeyRef.name", Supported),
    ("spec.containers[].env[].valueFrom.configMapKeyRef.optional", Supported),
    ("spec.containers[].env[].valueFrom.fieldRef", Supported),
    ("spec.containers[].env[].valueFrom.fieldRef.apiVersion", Only("\"v1\"")),
    ("spec.containers[].env[].valueFrom.fieldRef.fieldPath", Supported),
    ("spec.containers[].env[].valueFrom.fileKeyRef", Rejected),
    ("spec.containers[].env[].valueFrom.resourceFieldRef", Supported),
    ("spec.containers[].env[].valueFrom.resourceFieldRef.containerName", Supported),
    ("spec.containers[].env[].valueFrom.resourceFieldRef.divisor", Supported),
    ("spec.containers[].env[].valueFrom.resourceFieldRef.resource", Supported),
    ("spec.containers[].env[].valueFrom.secretKeyRef", Supported),
    ("spec.containers[].env[].valueFrom.secretKeyRef.key", Supported),
    ("spec.containers[].env[].valueFrom.secretKeyRef.name", Supported),
    ("spec.containers[].env[].valueFrom.secretKeyRef.optional", Supported),
    ("spec.containers[].envFrom", Supported),
    ("spec.containers[].envFrom[].configMapRef", Supported),
    ("spec.containers[].envFrom[].configMapRef.name", Supported),
    ("spec.containers[].envFrom[].configMapRef.optional", Supported),
    ("spec.containers[].envFrom[].prefix", Supported),
    ("spec.containers[].envFrom[].secretRef", Supported),
    ("spec.containers[].envFrom[].secretRef.name", Supported),
    ("spec.containers[].envFrom[].secretRef.optional", Supported),
    ("spec.containers[].image", Supported),
    ("spec.containers[].imagePullPolicy", Supported),
    ("spec.containers[].lifecycle", Supported),
    ("spec.containers[].lifecycle.postStart", Supported),
    ("spec.containers[].lifecycle.postStart.exec", Supported),
    ("spec.containers[].lifecycle.postStart.exec.command", Supported),
    ("spec.containers[].lifecycle.postStart.httpGet", Supported),
    ("spec.containers[].lifecycle.postStart.httpGet.host", Supported),
    ("spec.containers[].lifecycle.postStart.httpGet.httpHeaders", Supported),
    ("spec.containers[].lifecycle.postStart.httpGet.httpHeaders[].name", Supported),
    ("spec.containers[].lifecycle.postStart.httpGet.httpHeaders[].value", Supported),
    ("spec.containers[].lifecycle.postStart.httpGet.path", Supported),
    ("spec.containers[].lifecycle.postStart.httpGet.port", Supported),
    ("spec.containers[].lifecycle.postStart.httpGet.scheme", Supported),
    ("spec.containers[].lifecycle.postStart.sleep", Supported),
    ("spec.containers[].lifecycle.postStart.sleep.seconds", Supported),
    ("spec.containers[].lifecycle.postStart.tcpSocket", Rejected),
    ("spec.containers[].lifecycle.preStop", Supported),
    ("spec.containers[].lifecycle.preStop.exec", Supported),
    ("spec.containers[].lifecycle.preStop.exec.command", Supported),
    ("spec.containers[].lifecycle.preStop.httpGet", Supported),
    ("spec.containers[].lifecycle.preStop.httpGet.host", Supported),
    ("spec.containers[].lifecycle.preStop.httpGet.httpHeaders", Supported),
    ("spec.containers[].lifecycle.preStop.httpGet.httpHeaders[].name", Supported),
    ("spec.containers[].lifecycle.preStop.httpGet.httpHeaders[].value", Supported),
    ("spec.containers[].lifecycle.preStop.httpGet.path", Supported),
    ("spec.containers[].lifecycle.preStop.httpGet.port", Supported),
    ("spec.containers[].lifecycle.preStop.httpGet.scheme", Supported),
    ("spec.containers[].lifecycle.preStop.sleep", Supported),
    ("spec.containers[].lifecycle.preStop.sleep.seconds", Supported),
    ("spec.containers[].lifecycle.preStop.tcpSocket", Rejected),
    ("spec.containers[].lifecycle.stopSignal", Rejected),
    ("spec.containers[].livenessProbe", Supported),
    ("spec.containers[].livenessProbe.exec", Supported),
    ("spec.containers[].livenessProbe.exec.command", Supported),
    ("spec.containers[].livenessProbe.failureThreshold", Supported),
    ("spec.containers[].livenessProbe.grpc", Supported),
    ("spec.containers[].livenessProbe.grpc.port", Supported),
    ("spec.containers[].livenessProbe.grpc.service", Supported),
    ("spec.containers[].livenessProbe.httpGet", Supported),
    ("spec.containers[].livenessProbe.httpGet.host", Supported),
    ("spec.containers[].livenessProbe.httpGet.httpHeaders", Supported),
    ("spec.containers[].livenessProbe.httpGet.httpHeaders[].name", Supported),
    ("spec.containers[].livenessProbe.httpGet.httpHeaders[].value", Supported),
    ("spec.containers[].livenessProbe.httpGet.path", Supported),
    ("spec.containers[].livenessProbe.httpGet.port", Supported),
    ("spec.containers[].livenessProbe.httpGet.scheme", Supported),
    ("spec.containers[].livenessProbe.initialDelaySeconds", Supported),
    ("spec.containers[].livenessProbe.periodSeconds", Supported),
    ("spec.containers[].livenessProbe.successThreshold", Supported),
    ("spec.containers[].livenessProbe.tcpSocket", Supported),
    ("spec.containers[].livenessProbe.tcpSocket.host", Supported),
    ("spec.containers[].livenessProbe.tcpSocket.port", Supported),
    ("spec.containers[].livenessProbe.terminationGracePeriodSeconds", Supported),
    ("spec.containers[].livenessProbe.timeoutSeconds", Supported),
    ("spec.containers[].name", Supported),
    ("spec.containers[].ports", Supported),
    ("spec.containers[].ports[].containerPort", Supported),
    ("spec.containers[].ports[].hostIP", Supported),
    ("spec.containers[].ports[].hostPort", Supported),
    ("spec.containers[].ports[].name", Supported),
    ("spec.containers[].ports[].protocol", Supported),
    ("spec.containers[].readinessProbe", Supported),
    ("spec.containers[].readinessProbe.exec", Supported),
    ("spec.containers[].readinessProbe.exec.command", Supported),
    ("spec.containers[].readinessProbe.failureThreshold", Supported),
    ("spec.containers[].readinessProbe.grpc", Supported),
    ("spec.containers[].readinessProbe.grpc.port", Supported),
    ("spec.containers[].readinessProbe.grpc.service", Supported),
    ("spec.containers[].readinessProbe.httpGet", Supported),
    ("spec.containers[].readinessProbe.httpGet.host", Supported),
    ("spec.containers[].readinessProbe.httpGet.httpHeaders", Supported),
    ("spec.containers[].readinessProbe.httpGet.httpHeaders[].name", Supported),
    ("spec.containers[].readinessProbe.httpGet.httpHeaders[].value", Supported),
    ("spec.containers[].readinessProbe.httpGet.path", Supported),
    ("spec.containers[].readinessProbe.httpGet.port", Supported),
    ("spec.containers[].readinessProbe.httpGet.scheme", Supported),
    ("spec.containers[].readinessProbe.initialDelaySeconds", Supported),
    ("spec.containers[].readinessProbe.periodSeconds", Supported),
    ("spec.containers[].readinessProbe.successThreshold", Supported),
    ("spec.containers[].readinessProbe.tcpSocket", Supported),
    ("spec.containers[].readinessProbe.tcpSocket.host", Supported),
    ("spec.containers[].readinessProbe.tcpSocket.port", Supported),
    ("spec.containers[].readinessProbe.terminationGracePeriodSeconds", Supported),
    ("spec.containers[].readinessProbe.timeoutSeconds", Supported),
    ("spec.containers[].resizePolicy", Rejected),
    ("spec.containers[].resources", Supported),
    ("spec.containers[].resources.claims", Rejected),
    ("spec.containers[].resources.limits", Supported),
    ("spec.containers[].resources.requests", Supported),
    ("spec.containers[].restartPolicy", Rejected),
    ("spec.containers[].restartPolicyRules", Rejected),
    ("spec.containers[].securityContext", Supported),
    ("spec.containers[].securityContext.allowPrivilegeEscalation", Supported),
    ("spec.containers[].securityContext.appArmorProfile", Supported),
    ("spec.containers[].securityContext.appArmorProfile.localhostProfile", Supported),
    ("spec.containers[].securityContext.appArmorProfile.type", Supported),
    ("spec.containers[].securityContext.capabilities", Supported),
    ("spec.containers[].securityContext.capabilities.add", Supported),
    ("spec.containers[].securityContext.capabilities.drop", Supported),
    ("spec.containers[].securityContext.privileged", Supported),
    ("spec.containers[].securityContext.procMount", Only("\"Default\"")),
    ("spec.containers[].securityContext.readOnlyRootFilesystem", Supported),
    ("spec.containers[].securityContext.runAsGroup", Supported),
    ("spec.containers[].securityContext.runAsNonRoot", Supported),
    ("spec.containers[].securityContext.runAsUser", Supported),
    ("spec.containers[].securityContext.seLinuxOptions", Rejected),
    ("spec.containers[].securityContext.seccompProfile", Supported),
    ("spec.containers[].securityContext.seccompProfile.localhostProfile", Supported),
    ("spec.containers[].securityContext.seccompProfile.type", Supported),
    ("spec.containers[].securityContext.windowsOptions", Rejected),
    ("spec.containers[].startupProbe", Supported),
    ("spec.containers[].startupProbe.exec", Supported),
    ("spec.containers[].startupProbe.exec.command", Supported),
    ("spec.containers[].startupProbe.failureThreshold", Supported),
    ("spec.containers[].startupProbe.grpc", Supported),
    ("spec.containers[].startupProbe.grpc.port", Supported),
    ("spec.containers[].startupProbe.grpc.service", Supported),
    ("spec.containers[].startupProbe.httpGet", Supported),
    ("spec.containers[].startupProbe.httpGet.host", Supported),
    ("spec.containers[].startupProbe.httpGet.httpHeaders", Supported),
    ("spec.containers[].startupProbe.httpGet.httpHeaders[].name", Supported),
    ("spec.containers[].startupProbe.httpGet.httpHeaders[].value", Supported),
    ("spec.containers[].startupProbe.httpGet.path", Supported),
    ("spec.containers[].startupProbe.httpGet.port", Supported),
    ("spec.containers[].startupProbe.httpGet.scheme", Supported),
    ("spec.containers[].startupProbe.initialDelaySeconds", Supported),
    ("spec.containers[].startupProbe.periodSeconds", Supported),
    ("spec.containers[].startupProbe.successThreshold", Supported),
    ("spec.containers[].startupProbe.tcpSocket", Supported),
    ("spec.containers[].startupProbe.tcpSocket.host", Supported),
    ("spec.containers[].startupProbe.tcpSocket.port", Supported),
    ("spec.containers[].startupProbe.terminationGracePeriodSeconds", Supported),
    ("spec.containers[].startupProbe.timeoutSeconds", Supported),
    ("spec.containers[].stdin", Supported),
    ("spec.containers[].stdinOnce", Supported),
    ("spec.containers[].terminationMessagePath", Supported),
    ("spec.containers[].terminationMessagePolicy", Supported),
    ("spec.containers[].tty", Supported),
    ("spec.containers[].volumeDevices", Rejected),
    ("spec.containers[].volumeMounts", Supported),
    ("spec.containers[].volumeMounts[].mountPath", Supported),
    ("spec.containers[].volumeMounts[].mountPropagation", Supported),
    ("spec.containers[].volumeMounts[].name", Supported),
    ("spec.containers[].volumeMounts[].readOnly", Supported),
    ("spec.containers[].volumeMounts[].recursiveReadOnly", Rejected),
    ("spec.containers[].volumeMounts[].subPath", Supported),
    ("spec.containers[].volumeMounts[].subPathExpr", Supported),
    ("spec.containers[].workingDir", Supported),
    ("spec.dnsConfig", Supported),
    ("spec.dnsConfig.nameservers", Supported),
    ("spec.dnsConfig.options", Supported),
    ("spec.dnsConfig.options[].name", Supported),
    ("spec.dnsConfig.options[].value", Supported),
    ("spec.dnsConfig.searches", Supported),
    ("spec.dnsPolicy", Supported),
    ("spec.enableServiceLinks", Supported),
    ("spec.ephemeralContainers", Rejected),
    ("spec.hostAliases", Supported),
    ("spec.hostAliases[].hostnames", Supported),
    ("spec.hostAliases[].ip", Supported),
    ("spec.hostIPC", Supported),
    ("spec.hostNetwork", Supported),
    ("spec.hostPID", Supported),
    ("spec.hostUsers", Only("true")),
    ("spec.hostname", Supported),
    ("spec.hostnameOverride", Rejected),
    ("spec.imagePullSecrets", Supported),
    ("spec.imagePullSecrets[].name", Supported),
    ("spec.initContainers", Supported),
    ("spec.nodeName", Supported),
    ("spec.nodeSelector", Rejected),
    ("spec.os", Supported),
    ("spec.os.name", Supported),
    ("spec.overhead", Rejected),
    ("spec.preemptionPolicy", Rejected),
    ("spec.priority", Supported),
    ("spec.priorityClassName", Supported),
    ("spec.readinessGates", Rejected),
    ("spec.resourceClaims", Rejected),
    ("spec.resources", Rejected),
    ("spec.restartPolicy", Supported),
    ("spec.runtimeClassName", Rejected),
    ("spec.schedulerName", Rejected),
    ("spec.schedulingGates", Rejected),
    ("spec.securityContext", Supported),
    ("spec.securityContext.appArmorProfile", Supported),
    ("spec.securityContext.appArmorProfile.localhostProfile", Supported),
    ("spec.securityContext.appArmorProfile.type", Supported),
    ("spec.securityContext.fsGroup", Supported),
    ("spec.securityContext.fsGroupChangePolicy", Supported),
    ("spec.securityContext.runAsGroup", Supported),
    ("spec.securityContext.runAsNonRoot", Supported),
    ("spec.securityContext.runAsUser", Supported),
    ("spec.securityContext.seLinuxChangePolicy", Rejected),
    ("spec.securityContext.seLinuxOptions", Rejected),
    ("spec.securityContext.seccompProfile", Supported),
    ("spec.securityContext.seccompProfile.localhostProfile", Supported),
    ("spec.securityContext.seccompProfile.type", Supported),
    ("spec.securityContext.supplementalGroups", Supported),
    ("spec.securityContext.supplementalGroupsPolicy", Only("\"Merge\"")),
    ("spec.securityContext.sysctls", Supported),
    ("spec.securityContext.sysctls[].name", Supported),
    ("spec.securityContext.sysctls[].value", Supported),
    ("spec.securityContext.windowsOptions", Rejected),
    ("spec.serviceAccount", Rejected),
    ("spec.serviceAccountName", Rejected),
    ("spec.setHostnameAsFQDN", Only("false")),
    ("spec.shareProcessNamespace", Supported),
    ("spec.subdomain", Rejected),
    ("spec.terminationGracePeriodSeconds", Supported),
    ("spec.tolerations", Rejected),
    ("spec.topologySpreadConstraints", Rejected),
    ("spec.volumes", Supported),
    ("spec.volumes[].awsElasticBlockStore", Rejected),
    ("spec.volumes[].azureDisk", Rejected),
    ("spec.volumes[].azureFile", Rejected),
    ("spec.volumes[].cephfs", Rejected),
    ("spec.volumes[].cinder", Rejected),
    ("spec.volumes[].configMap", Supported),
    ("spec.volumes[].configMap.defaultMode", Supported),
    ("spec.volumes[].configMap.items", Supported),
    ("spec.volumes[].configMap.items[].key", Supported),
    ("spec.volumes[].configMap.items[].mode", Supported),
    ("spec.volumes[].configMap.items[].path", Supported),
    ("spec.volumes[].configMap.name", Supported),
    ("spec.volumes[].configMap.optional", Supported),
    ("spec.volumes[].csi", Rejected),
    ("spec.volumes[].downwardAPI", Supported),
    ("spec.volumes[].downwardAPI.defaultMode", Supported),
    ("spec.volumes[].downwardAPI.items", Supported),
    ("spec.volumes[].downwardAPI.items[].fieldRef", Supported),
    ("spec.volumes[].downwardAPI.items[].fieldRef.apiVersion", Only("\"v1\"")),
    ("spec.volumes[].downwardAPI.items[].fieldRef.fieldPath", Supported),
    ("spec.volumes[].downwardAPI.items[].mode", Supported),
    ("spec.volumes[].downwardAPI.items[].path", Supported),
    ("spec.volumes[].downwardAPI.items[].resourceFieldRef", Supported),
    ("spec.volumes[].downwardAPI.items[].resourceFieldRef.containerName", Supported),
    ("spec.volumes[].downwardAPI.items[].resourceFieldRef.divisor", Supported),
    ("spec.volumes[].downwardAPI.items[].resourceFieldRef.resource", Supported),
    ("spec.volumes[].emptyDir", Supported),
    ("spec.volumes[].emptyDir.medium", Supported),
    ("spec.volumes[].emptyDir.sizeLimit", Supported),
    ("spec.volumes[].ephemeral", Rejected),
    ("spec.volumes[].fc", Rejected),
    ("spec.volumes[].flexVolume", Rejected),
    ("spec.volumes[].flocker", Rejected),
    ("spec.volumes[].gcePersistentDisk", Rejected),
    ("spec.volumes[].gitRepo", Rejected),
    ("spec.volumes[].glusterfs", Rejected),
    ("spec.volumes[].hostPath", Supported),
    ("spec.volumes[].hostPath.path", Supported),
    ("spec.volumes[].hostPath.type", Supported),
    ("spec.volumes[].image", Rejected),
    ("spec.volumes[].iscsi", Rejected),
    ("spec.volumes[].name", Supported),
    ("spec.volumes[].nfs", Rejected),
    ("spec.volumes[].persistentVolumeClaim", Rejected),
    ("spec.volumes[].photonPersistentDisk", Rejected),
    ("spec.volumes[].portworxVolume", Rejected),
    ("spec.volumes[].projected", Supported),
    ("spec.volumes[].projected.defaultMode", Supported),
    ("spec.volumes[].projected.sources", Supported),
    ("spec.volumes[].projected.sources[].clusterTrustBundle", Rejected),
    ("spec.volumes[].projected.sources[].configMap", Supported),
    ("spec.volumes[].projected.sources[].configMap.items", Supported),
    ("spec.volumes[].projected.sources[].configMap.items[].key", Supported),
    ("spec.volumes[].projected.sources[].configMap.items[].mode", Supported),
    ("spec.volumes[].projected.sources[].configMap.items[].path", Supported),
    ("spec.volumes[].projected.sources[].configMap.name", Supported),
    ("spec.volumes[].projected.sources[].configMap.optional", Supported),
    ("spec.volumes[].projected.sources[].downwardAPI", Supported),
    ("spec.volumes[].projected.sources[].downwardAPI.items", Supported),
    ("spec.volumes[].projected.sources[].downwardAPI.items[].fieldRef", Supported),
    ("spec.volumes[].projected.sources[].downwardAPI.items[].fieldRef.apiVersion", Only("\"v1\"")),
    ("spec.volumes[].projected.sources[].downwardAPI.items[].fieldRef.fieldPath", Supported),
    ("spec.volumes[].projected.sources[].downwardAPI.items[].mode", Supported),
    ("spec.volumes[].projected.sources[].downwardAPI.items[].path", Supported),
    ("spec.volumes[].projected.sources[].downwardAPI.items[].resourceFieldRef", Supported),
    ("spec.volumes[].projected.sources[].downwardAPI.items[].resourceFieldRef.containerName", Supported),
    ("spec.volumes[].projected.sources[].downwardAPI.items[].resourceFieldRef.divisor", Supported),
    ("spec.volumes[].projected.sources[].downwardAPI.items[].resourceFieldRef.resource", Supported),
    ("spec.volumes[].projected.sources[].podCertificate", Rejected),
    ("spec.volumes[].projected.sources[].secret", Supported),
    ("spec.volumes[].projected.sources[].secret.items", Supported),
    ("spec.volumes[].projected.sources[].secret.items[].key", Supported),
    ("spec.volumes[].projected.sources[].secret.items[].mode", Supported),
    ("spec.volumes[].projected.sources[].secret.items[].path", Supported),
    ("spec.volumes[].projected.sources[].secret.name", Supported),
    ("spec.volumes[].projected.sources[].secret.optional", Supported),
    ("spec.volumes[].projected.sources[].serviceAccountToken", Rejected),
    ("spec.volumes[].quobyte", Rejected),
    ("spec.volumes[].rbd", Rejected),
    ("spec.volumes[].scaleIO", Rejected),
    ("spec.volumes[].secret", Supported),
    ("spec.volumes[].secret.defaultMode", Supported),
    ("spec.volumes[].secret.items", Supported),
    ("spec.volumes[].secret.items[].key", Supported),
    ("spec.volumes[].secret.items[].mode", Supported),
    ("spec.volumes[].secret.items[].path", Supported),
    ("spec.volumes[].secret.optional", Supported),
    ("spec.volumes[].secret.secretName", Supported),
    ("spec.volumes[].storageos", Rejected),
    ("spec.volumes[].vsphereVolume", Rejected),
    ("status", Ignored),
];

/// `spec.initContainers[]` holds the fields of `spec.containers[]` and
/// podwarden treats them alike, except in these rows (checked first).
/// What only validation can tell (hooks and probes only on a sidecar) is
/// checked there.
pub const INIT_CONTAINER_ROWS: &[(&str, Support)] = &[("spec.initContainers[].restartPolicy", Only("\"Always\""))];

const INIT: &str = "spec.initContainers[]";
const APP: &str = "spec.containers[]";

/// An init container's path as the app container's row it shares.
fn app_row(path: &str) -> Option<String> {
    path.strip_prefix("spec.initContainers").map(|rest| format!("spec.containers{rest}"))
}

/// A pod's fields as the API server gives them to a node differ from a
/// manifest's in these rows (checked first): what the control plane
/// writes and acts on itself (scheduling, ownership, deletion,
/// the service account's admission) is the node's to accept, not to
/// implement. A manifest that sets them still gets an error.
pub const API_ROWS: &[(&str, Support)] = &[
    // the API server's deletion, which the pod workers carry out
    ("metadata.deletionGracePeriodSeconds", Ignored),
    ("metadata.deletionTimestamp", Ignored),
    // the controllers' and the garbage collector's
    ("metadata.finalizers", Ignored),
    ("metadata.generateName", Ignored),
    ("metadata.ownerReferences", Ignored),
    // the scheduler's: the pod is bound to this node already
    ("spec.affinity", Ignored),
    ("spec.nodeSelector", Ignored),
    ("spec.preemptionPolicy", Ignored),
    ("spec.schedulerName", Ignored),
    ("spec.schedulingGates", Ignored),
    ("spec.tolerations", Ignored),
    ("spec.topologySpreadConstraints", Ignored),
    // the ServiceAccount admission's (the token volume it adds is checked
    // as any volume)
    ("spec.automountServiceAccountToken", Ignored),
    ("spec.serviceAccount", Ignored),
    ("spec.serviceAccountName", Ignored),
    // issued by the API server (TokenRequest): audience, expirationSeconds
    // and path are all implemented
    ("spec.volumes[].projected.sources[].serviceAccountToken", Ignored),
];

/// Where a pod comes from, which decides a few rows ([`API_ROWS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A manifest (a file, `podwarden apply`, the node's own API).
    Manifest,
    /// The cluster's API server (cluster mode).
    Api,
}

/// [`support`] for a pod from `origin`.
pub fn support_in(path: &str, origin: Origin) -> Option<Support> {
    if origin == Origin::Api
        && let Some(s) = API_ROWS.iter().find(|(p, _)| *p == path)
    {
        return Some(s.1);
    }
    support(path)
}

/// The message for a set field that podwarden does not implement.
pub const NOT_SUPPORTED: &str = "not supported by podwarden";

/// At most this many unknown-field warnings per manifest (then a count).
pub const MAX_WARNINGS: usize = 20;

struct Index {
    support: HashMap<&'static str, Support>,
    /// Paths that have fields listed under them (objects to walk into).
    parents: HashSet<String>,
}

static INDEX: LazyLock<Index> = LazyLock::new(|| {
    let support: HashMap<_, _> = FIELDS.iter().copied().collect();
    let mut parents = HashSet::new();
    for (path, _) in FIELDS {
        if let Some(i) = path.rfind('.') {
            parents.insert(path[..i].trim_end_matches("[]").to_string());
        }
    }
    parents.insert(String::new());
    Index { support, parents }
});

/// What podwarden does with the field at `path` (table notation); `None`
/// when it is not in the table.
pub fn support(path: &str) -> Option<Support> {
    if let Some(s) = INIT_CONTAINER_ROWS.iter().find(|(p, _)| *p == path) {
        return Some(s.1);
    }
    match app_row(path).filter(|_| path.starts_with(INIT)) {
        Some(app) => INDEX.support.get(app.as_str()).copied(),
        None => INDEX.support.get(path).copied(),
    }
}

/// Whether fields are listed under `path` (an object to walk into).
fn is_parent(path: &str) -> bool {
    match app_row(path) {
        Some(app) => INDEX.parents.contains(&app),
        None => INDEX.parents.contains(path),
    }
}

/// Whether a value counts as set: null, `""`, `[]` and `{}` say nothing
/// (as in the Kubernetes API, where they are the zero values). A volume's
/// source is set by being there at all (`emptyDir: {}` picks the type).
fn is_set(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    }
}

/// Check a parsed manifest against the table: every set field that is
/// rejected is an error (in the document's order); fields not in the
/// schema are returned as warnings (`unknown field "spec.contaners"`).
/// Values of the wrong type are left to deserialization, which names them.
pub fn check(pod: &Value) -> Result<Vec<String>, FieldErrors> {
    check_in(pod, Origin::Manifest)
}

/// [`check`] for a pod from `origin`.
pub fn check_in(pod: &Value, origin: Origin) -> Result<Vec<String>, FieldErrors> {
    let mut found = Found::default();
    walk(pod, "", "", origin, &mut found);
    if found.unknown > MAX_WARNINGS {
        found.warnings.push(format!("{} more unknown fields", found.unknown - MAX_WARNINGS));
    }
    found.errors.into_result().map(|()| found.warnings)
}

/// What a walk finds: rejected fields, warnings, and how many unknown
/// fields (the warnings show the first [`MAX_WARNINGS`]).
#[derive(Default)]
struct Found {
    errors: FieldErrors,
    warnings: Vec<String>,
    unknown: usize,
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() { key.to_string() } else { format!("{parent}.{key}") }
}

/// Walk an object at table path `table` (shown as `shown`).
fn walk(v: &Value, table: &str, shown: &str, origin: Origin, found: &mut Found) {
    let Value::Object(map) = v else { return };
    let volume = table == "spec.volumes[]";
    for (key, value) in map {
        let t = join(table, key);
        let s = join(shown, key);
        match support_in(&t, origin) {
            None => {
                found.unknown += 1;
                if found.unknown <= MAX_WARNINGS {
                    found.warnings.push(format!("unknown field {:?}", shorten(&s)));
                }
            }
            Some(Ignored) => {}
            Some(Rejected) if (volume && !value.is_null()) || is_set(value) => {
                found.errors.push(FieldError::new(s, NOT_SUPPORTED));
            }
            Some(Rejected) => {}
            Some(Only(want)) => {
                if !value.is_null() && serde_json::from_str::<Value>(want).ok().as_ref() != Some(value) {
                    let why = match t.as_str() {
                        "spec.hostUsers" => {
                            ": user namespaces need the runtime's support (containerd 2.0 or later), which the CRI of containerd 1.6 has not"
                        }
                        "spec.containers[].securityContext.procMount" => {
                            ": an unmasked /proc needs a user namespace (hostUsers: false), which containerd 1.6 cannot make"
                        }
                        _ => "",
                    };
                    found.errors.push(FieldError::new(s, format!("{value} is {NOT_SUPPORTED} (only {want}){why}")));
                }
            }
            Some(Supported) => match value {
                Value::Array(items) if is_parent(&t) => {
                    let item = format!("{t}[]");
                    for (i, it) in items.iter().enumerate() {
                        walk(it, &item, &format!("{s}[{i}]"), origin, found);
                    }
                }
                Value::Object(_) if is_parent(&t) => walk(value, &t, &s, origin, found),
                _ => {}
            },
        }
    }
}

/// A path as shown in a warning: at most 120 bytes (a key may be huge).
fn shorten(s: &str) -> String {
    const MAX: usize = 120;
    if s.len() <= MAX {
        return s.to_string();
    }
    let cut = (0..=MAX).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0);
    format!("{}...({} bytes)", &s[..cut], s.len())
}

/// The README table: one row per field, in table order.
pub fn markdown_table() -> String {
    let mut out = String::from("| field | podwarden |\n| --- | --- |\n");
    out.push_str(&format!("| `{INIT}.*` | as `{APP}.*`, except the rows below |\n"));
    for (path, s) in INIT_CONTAINER_ROWS.iter().chain(FIELDS) {
        let what = match s {
            Supported => "supported".to_string(),
            Rejected => "rejected".to_string(),
            Only(v) => format!("rejected unless `{v}`").replace("\"", ""),
            Ignored => "ignored (output)".to_string(),
        };
        out.push_str(&format!("| `{path}` | {what} |\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeSet;

    use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor};
    use serde_json::json;

    use super::*;

    type E = de::value::Error;

    /// A Deserializer that feeds a type a sample of every field it declares
    /// and records each struct field's path: k8s-openapi's `Deserialize`
    /// impls call `deserialize_struct` with their full field list.
    struct Walk<'a> {
        path: String,
        field: &'static str,
        out: &'a RefCell<BTreeSet<String>>,
        depth: usize,
    }

    impl<'a> Walk<'a> {
        /// A string every string-like type accepts (`Time` parses it); the
        /// Pod's own `apiVersion` and `kind` are checked by its impl.
        fn sample(&self) -> &'static str {
            match self.field {
                "apiVersion" => "v1",
                "kind" => "Pod",
                _ => "2020-01-01T00:00:00Z",
            }
        }

        fn child(&self, path: String, field: &'static str) -> Walk<'a> {
            assert!(self.depth < 40, "recursive type at {path}: the walk needs a cut-off");
            Walk { path, field, out: self.out, depth: self.depth + 1 }
        }
    }

    macro_rules! leaf {
        ($($m:ident => $v:ident($($val:expr)?)),* $(,)?) => {
            $(fn $m<V: Visitor<'de>>(self, v: V) -> Result<V::Value, E> { v.$v($($val)?) })*
        };
    }

    impl<'de> Deserializer<'de> for Walk<'_> {
        type Error = E;
        leaf!(
            deserialize_bool => visit_bool(false), deserialize_i8 => visit_i8(0), deserialize_i16 => visit_i16(0),
            deserialize_i32 => visit_i32(0), deserialize_i64 => visit_i64(0), deserialize_u8 => visit_u8(0),
            deserialize_u16 => visit_u16(0), deserialize_u32 => visit_u32(0), deserialize_u64 => visit_u64(0),
            deserialize_f32 => visit_f32(0.0), deserialize_f64 => visit_f64(0.0), deserialize_char => visit_char('x'),
            deserialize_bytes => visit_bytes(b"x"), deserialize_byte_buf => visit_bytes(b"x"),
            deserialize_unit => visit_unit(), deserialize_ignored_any => visit_unit(),
        );
        fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
            v.visit_str(self.sample())
        }
        fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
            v.visit_str(self.sample())
        }
        fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
            v.visit_str(self.sample())
        }
        fn deserialize_identifier<V: Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
            v.visit_str(self.sample())
        }
        fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
            v.visit_some(self)
        }
        fn deserialize_unit_struct<V: Visitor<'de>>(self, _: &'static str, v: V) -> Result<V::Value, E> {
            v.visit_unit()
        }
        fn deserialize_newtype_struct<V: Visitor<'de>>(self, _: &'static str, v: V) -> Result<V::Value, E> {
            v.visit_newtype_struct(self)
        }
        fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
            let p = format!("{}[]", self.path);
            v.visit_seq(One(Some(self.child(p, ""))))
        }
        fn deserialize_tuple<V: Visitor<'de>>(self, _: usize, v: V) -> Result<V::Value, E> {
            self.deserialize_seq(v)
        }
        fn deserialize_tuple_struct<V: Visitor<'de>>(self, _: &'static str, _: usize, v: V) -> Result<V::Value, E> {
            self.deserialize_seq(v)
        }
        fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
            // a map's values sit at `path{}` (none of the Pod's maps hold structs)
            let p = format!("{}{{}}", self.path);
            v.visit_map(Fields { keys: &["k"], i: 0, parent: self.child(p, ""), map: true })
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            v: V,
        ) -> Result<V::Value, E> {
            for f in fields {
                self.out.borrow_mut().insert(join(&self.path, f));
            }
            v.visit_map(Fields { keys: fields, i: 0, parent: self, map: false })
        }
        fn deserialize_enum<V: Visitor<'de>>(
            self,
            _: &'static str,
            _: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, E> {
            panic!("an enum at {}: teach the walk about it", self.path)
        }
    }

    struct One<'a>(Option<Walk<'a>>);

    impl<'de> SeqAccess<'de> for One<'_> {
        type Error = E;
        fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, s: T) -> Result<Option<T::Value>, E> {
            self.0.take().map(|w| s.deserialize(w)).transpose()
        }
    }

    struct Fields<'a> {
        keys: &'static [&'static str],
        i: usize,
        parent: Walk<'a>,
        map: bool,
    }

    impl<'de> MapAccess<'de> for Fields<'_> {
        type Error = E;
        fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, s: K) -> Result<Option<K::Value>, E> {
            let Some(k) = self.keys.get(self.i) else { return Ok(None) };
            s.deserialize(IntoDeserializer::<E>::into_deserializer(*k)).map(Some)
        }
        fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, s: T) -> Result<T::Value, E> {
            let k = self.keys[self.i];
            self.i += 1;
            let w = if self.map {
                Walk { path: self.parent.path.clone(), field: "", out: self.parent.out, depth: self.parent.depth }
            } else {
                self.parent.child(join(&self.parent.path, k), k)
            };
            s.deserialize(w)
        }
    }

    /// Every field path of k8s-openapi's v1 Pod.
    fn all_pod_fields() -> BTreeSet<String> {
        let out = RefCell::new(BTreeSet::new());
        let _pod: crate::model::Pod =
            serde::Deserialize::deserialize(Walk { path: String::new(), field: "", out: &out, depth: 0 })
                .expect("the walk feeds every type a value it accepts");
        out.into_inner()
    }

    #[test]
    fn table_covers_every_pod_field_and_nothing_else() {
        let all = all_pod_fields();
        assert!(all.len() > 1000, "the walk found only {} fields", all.len());
        assert!(all.contains("spec.containers[].readinessProbe.exec.command"));
        // a path needs a row when every field above it is supported
        let needs_row = |p: &str| {
            let mut prefix = String::new();
            for part in p.split('.').collect::<Vec<_>>().split_last().unwrap().1 {
                prefix = join(&prefix, part);
                if support(prefix.trim_end_matches("[]")) != Some(Supported) {
                    return false;
                }
            }
            true
        };
        let missing: Vec<&String> = all.iter().filter(|p| needs_row(p) && support(p).is_none()).collect();
        assert!(missing.is_empty(), "fields of v1 Pod missing from model::fields::FIELDS: {missing:#?}");
        let stale: Vec<&str> = FIELDS
            .iter()
            .chain(INIT_CONTAINER_ROWS)
            .map(|(p, _)| *p)
            .filter(|p| !all.contains(*p) || !needs_row(p))
            .collect();
        assert!(stale.is_empty(), "rows of model::fields::FIELDS that are not fields to list: {stale:?}");
        assert_eq!(INDEX.support.len(), FIELDS.len(), "a path is listed twice in model::fields::FIELDS");
        for (p, s) in FIELDS {
            if let Only(v) = s {
                assert!(serde_json::from_str::<Value>(v).is_ok(), "{p}: {v} is not JSON");
            }
        }
    }

    #[test]
    fn readme_holds_the_table() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
        let table = markdown_table();
        assert!(
            readme.contains(&table),
            "README.md's \"Pod spec fields\" section must hold model::fields::markdown_table():\n{table}"
        );
    }

    #[test]
    fn check_rejects_set_fields_and_warns_about_unknown_ones() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "creationTimestamp": null, "labels": {"any": "x"}},
            "spec": {"contaners": [], "containers": [{"name": "c", "image": "i", "tty": false, "imagePullPolicyy": "x",
                     "resources": {}, "env": [{"name": "a", "value": "b", "valueFrom": null}]}],
                     "volumes": [{"name": "v", "emptyDir": {}}]},
            "status": {"phase": "Running", "whatever": 1},
        });
        assert_eq!(
            check(&pod).unwrap(),
            vec!["unknown field \"spec.containers[0].imagePullPolicyy\"", "unknown field \"spec.contaners\""]
        );
        let reject = |path: &[&str], v: Value| {
            let mut p = pod.clone();
            let mut at = &mut p;
            for k in &path[..path.len() - 1] {
                at = match k.parse::<usize>() {
                    Ok(i) => &mut at[i],
                    Err(_) => &mut at[*k],
                };
            }
            at[path[path.len() - 1]] = v;
            let e = check(&p).unwrap_err();
            assert_eq!(e.len(), 1, "{e:?}");
            let e = e.first().unwrap().clone();
            (e.field, e.reason)
        };
        let e = |f: &str| (f.to_string(), NOT_SUPPORTED.to_string());
        assert_eq!(
            reject(&["spec", "containers", "0", "lifecycle"], json!({"stopSignal": "SIGUSR1"})),
            e("spec.containers[0].lifecycle.stopSignal")
        );
        assert_eq!(
            reject(
                &["spec", "containers", "0", "env", "0", "valueFrom"],
                json!({"fileKeyRef": {"path": "p", "key": "k", "volumeName": "v"}})
            ),
            e("spec.containers[0].env[0].valueFrom.fileKeyRef")
        );
        assert_eq!(
            reject(
                &["spec", "containers", "0", "env", "0", "valueFrom"],
                json!({"fieldRef": {"apiVersion": "v2", "fieldPath": "metadata.name"}})
            ),
            (
                "spec.containers[0].env[0].valueFrom.fieldRef.apiVersion".to_string(),
                "\"v2\" is not supported by podwarden (only \"v1\")".to_string()
            )
        );
        assert_eq!(reject(&["spec", "volumes", "0", "nfs"], json!({})), e("spec.volumes[0].nfs"));
        assert_eq!(
            reject(
                &["spec", "volumes", "0", "projected"],
                json!({"sources": [{"configMap": {"name": "a"}},
                {"serviceAccountToken": {"path": "token"}}]})
            ),
            e("spec.volumes[0].projected.sources[1].serviceAccountToken")
        );
        assert_eq!(
            reject(&["spec", "securityContext"], json!({"seLinuxOptions": {"level": "s0"}})),
            e("spec.securityContext.seLinuxOptions")
        );
        assert_eq!(
            reject(&["spec", "setHostnameAsFQDN"], json!(true)),
            ("spec.setHostnameAsFQDN".to_string(), "true is not supported by podwarden (only false)".to_string())
        );
        // zero values say nothing
        for zero in [json!(null), json!([]), json!({}), json!("")] {
            let mut p = pod.clone();
            p["spec"]["containers"][0]["lifecycle"] = zero.clone();
            p["spec"]["containers"][0]["envFrom"] = zero.clone();
            assert!(check(&p).is_ok(), "{zero}");
        }
    }

    #[test]
    fn warnings_are_capped() {
        let mut spec = serde_json::Map::new();
        for i in 0..30 {
            spec.insert(format!("x{i:02}"), json!(1));
        }
        let w = check(&json!({"spec": spec})).unwrap();
        assert_eq!(w.len(), MAX_WARNINGS + 1);
        assert_eq!(w[MAX_WARNINGS], "10 more unknown fields");
    }
}

//! Validating a parsed pod, as the API server validates it plus what
//! podwarden needs: the order of the checks, the pod's metadata and its
//! spec's own fields here; containers, volumes, probes and security
//! contexts in the files beside this one. The first refused field is the
//! error.

use std::collections::HashSet;

use super::{containers, security, volumes};
use crate::model::field::{FieldError, err};
use crate::model::names::{NAME_MAX, is_dns1123_label, is_dns1123_subdomain};
use crate::model::{Container, ObjectMeta, Pod, PodSpec};

/// Validate a parsed pod. Returns the failing field and why.
pub fn validate(pod: &Pod) -> Result<(), FieldError> {
    validate_metadata(&pod.metadata)?;
    let Some(spec) = pod.spec.as_ref() else {
        return err("spec", "missing; a pod needs a spec");
    };
    validate_spec(spec)?;
    security::validate_apparmor_annotations(pod)?;
    // init containers (sidecars among them), then app containers: names
    // unique across both, as the API server checks
    let all: Vec<&Container> = spec.init_containers.iter().flatten().chain(&spec.containers).collect();
    let volumes: HashSet<&str> = spec.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        volumes::validate_volume(i, v, &all)?;
    }
    if volumes.len() != spec.volumes.as_ref().map_or(0, Vec::len) {
        return err("spec.volumes", "volume names must be unique");
    }
    containers::validate_containers(spec, &all, &volumes)
}

/// Name, namespace and UID, and the log directory name they make.
fn validate_metadata(meta: &ObjectMeta) -> Result<(), FieldError> {
    let name = meta.name.as_deref().unwrap_or("");
    if name.is_empty() {
        return err("metadata.name", "missing; a pod needs a name");
    }
    if !is_dns1123_subdomain(name) {
        return err(
            "metadata.name",
            format!("{name:?} is not a valid DNS-1123 subdomain (lowercase letters, digits, '-', '.')"),
        );
    }
    let ns = meta.namespace.as_deref().unwrap_or("default");
    if !is_dns1123_label(ns) {
        return err("metadata.namespace", format!("{ns:?} is not a valid DNS-1123 label"));
    }
    if let Some(uid) = meta.uid.as_deref()
        && !uid.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
    {
        return err("metadata.uid", format!("{uid:?} may only hold letters, digits and '-'"));
    }
    // the pod's log directory is <podLogsDir>/<namespace>_<name>_<uid> (as
    // the kubelet names it); its pod directory <rootDir>/pods/<uid> is
    // shorter. Both must be file names the kernel takes.
    let uid = meta.uid.as_deref().unwrap_or("");
    let log_dir = ns.len() + name.len() + uid.len() + 2;
    if log_dir > NAME_MAX {
        return err(
            "metadata.name",
            format!(
                "the pod's log directory name (<namespace>_<name>_<uid>, here {} + {} + {} bytes and 2 separators) \
                 would be {log_dir} bytes, over the {NAME_MAX}-byte limit of a file name; use a shorter name",
                ns.len(),
                name.len(),
                uid.len()
            ),
        );
    }
    Ok(())
}

/// The spec's own fields (not its containers' or volumes'): at least one
/// container, no ephemeral ones, the restart policy, the pod security
/// context, deadlines, hostname, OS and DNS.
fn validate_spec(spec: &PodSpec) -> Result<(), FieldError> {
    if spec.containers.is_empty() {
        return err("spec.containers", "a pod needs at least one container");
    }
    if spec.ephemeral_containers.as_ref().is_some_and(|c| !c.is_empty()) {
        return err("spec.ephemeralContainers", "ephemeral containers cannot be set in a manifest");
    }
    if let Some(rp) = spec.restart_policy.as_deref()
        && !matches!(rp, "Always" | "OnFailure" | "Never")
    {
        return err("spec.restartPolicy", format!("{rp:?} is not one of Always, OnFailure, Never"));
    }
    if let Some(sc) = &spec.security_context {
        security::validate_pod_security_context(sc)?;
    }
    if let Some(d) = spec.active_deadline_seconds
        && !(1..=i64::from(i32::MAX)).contains(&d)
    {
        return err("spec.activeDeadlineSeconds", format!("{d} must be between 1 and 2147483647, inclusive"));
    }
    if let Some(g) = spec.termination_grace_period_seconds
        && g < 0
    {
        return err("spec.terminationGracePeriodSeconds", format!("{g} is negative; must be 0 or more"));
    }
    if let Some(h) = spec.hostname.as_deref()
        && !h.is_empty()
        && !is_dns1123_label(h)
    {
        return err("spec.hostname", format!("{h:?} is not a valid DNS-1123 label"));
    }
    if let Some(os) = spec.os.as_ref()
        && os.name != "linux"
    {
        return err("spec.os.name", format!("{:?}: this node runs linux", os.name));
    }
    validate_dns(spec)
}

/// dnsPolicy and dnsConfig, as the API server checks them: a known policy,
/// dnsConfig required with `None`, at most 3 nameservers (`sync::dns` forms
/// the resolver config from them).
fn validate_dns(spec: &PodSpec) -> Result<(), FieldError> {
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    if !matches!(policy, "ClusterFirst" | "ClusterFirstWithHostNet" | "Default" | "None") {
        return err(
            "spec.dnsPolicy",
            format!("{policy:?} is not one of ClusterFirst, ClusterFirstWithHostNet, Default, None"),
        );
    }
    let has_config = spec.dns_config.as_ref().is_some_and(|d| {
        d.nameservers.as_ref().is_some_and(|v| !v.is_empty())
            || d.searches.as_ref().is_some_and(|v| !v.is_empty())
            || d.options.as_ref().is_some_and(|v| !v.is_empty())
    });
    if policy == "None" && !has_config {
        return err("spec.dnsConfig", "required with dnsPolicy: None");
    }
    if let Some(n) = spec.dns_config.as_ref().and_then(|d| d.nameservers.as_ref()).filter(|n| n.len() > 3) {
        return err("spec.dnsConfig.nameservers", format!("{} nameservers: must not have more than 3", n.len()));
    }
    Ok(())
}

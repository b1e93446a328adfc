//! Validating a parsed pod, as the API server validates it plus what
//! podwarden needs: the order of the checks, the pod's metadata and its
//! spec's own fields here; containers, volumes, probes and security
//! contexts in the files beside this one.
//!
//! Every independent field is checked and every refusal kept, in the order
//! the API server's validation reports them for the same pod (its
//! `ValidatePodCreate`): the metadata, the pod's annotations, then the spec
//! as `ValidatePodSpec` goes through it: terminationGracePeriodSeconds,
//! volumes, containers, init containers, then restartPolicy, dnsPolicy,
//! the security context, dnsConfig, activeDeadlineSeconds, hostname and
//! os. Where one refusal makes the rest of the same object meaningless (a
//! volume with two sources, an env var with two value sources, a probe
//! with no handler) that object's other checks are skipped, as the API
//! server does in places; a field is refused once, for its first problem.

use std::collections::HashSet;

use super::{containers, security, volumes};
use crate::model::field::{FieldError, FieldErrors};
use crate::model::names::{NAME_MAX, is_dns1123_label, is_dns1123_subdomain};
use crate::model::{Container, ObjectMeta, Pod, PodSpec};

/// Validate a parsed pod: every refused field and why, in the API
/// server's order (at most [`crate::model::field::MAX_FIELD_ERRORS`]).
pub fn validate(pod: &Pod) -> Result<(), FieldErrors> {
    let mut errs = FieldErrors::new();
    validate_metadata(&pod.metadata, &mut errs);
    security::validate_apparmor_annotations(pod, &mut errs);
    match pod.spec.as_ref() {
        Some(spec) => validate_spec(spec, &mut errs),
        None => errs.push(FieldError::new("spec", "missing; a pod needs a spec")),
    }
    errs.into_result()
}

/// Name, namespace and UID, and the log directory name they make.
fn validate_metadata(meta: &ObjectMeta, errs: &mut FieldErrors) {
    let name = meta.name.as_deref().unwrap_or("");
    let name_ok = if name.is_empty() {
        errs.push(FieldError::new("metadata.name", "missing; a pod needs a name"));
        false
    } else if !is_dns1123_subdomain(name) {
        errs.push(FieldError::new(
            "metadata.name",
            format!("{name:?} is not a valid DNS-1123 subdomain (lowercase letters, digits, '-', '.')"),
        ));
        false
    } else {
        true
    };
    let ns = meta.namespace.as_deref().unwrap_or("default");
    if !is_dns1123_label(ns) {
        errs.push(FieldError::new("metadata.namespace", format!("{ns:?} is not a valid DNS-1123 label")));
    }
    if let Some(uid) = meta.uid.as_deref()
        && !uid.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
    {
        errs.push(FieldError::new("metadata.uid", format!("{uid:?} may only hold letters, digits and '-'")));
    }
    // the pod's log directory is <podLogsDir>/<namespace>_<name>_<uid> (as
    // the kubelet names it); its pod directory <rootDir>/pods/<uid> is
    // shorter. Both must be file names the kernel takes. (A name already
    // refused is not refused twice.)
    let uid = meta.uid.as_deref().unwrap_or("");
    let log_dir = ns.len() + name.len() + uid.len() + 2;
    if name_ok && log_dir > NAME_MAX {
        errs.push(FieldError::new(
            "metadata.name",
            format!(
                "the pod's log directory name (<namespace>_<name>_<uid>, here {} + {} + {} bytes and 2 separators) \
                 would be {log_dir} bytes, over the {NAME_MAX}-byte limit of a file name; use a shorter name",
                ns.len(),
                name.len(),
                uid.len()
            ),
        ));
    }
}

/// The spec, in `ValidatePodSpec`'s order.
fn validate_spec(spec: &PodSpec, errs: &mut FieldErrors) {
    if let Some(g) = spec.termination_grace_period_seconds
        && g < 0
    {
        errs.push(FieldError::new("spec.terminationGracePeriodSeconds", format!("{g} is negative; must be 0 or more")));
    }
    // init containers (sidecars among them) and app containers: names
    // unique across both, as the API server checks
    let all: Vec<&Container> = spec.init_containers.iter().flatten().chain(&spec.containers).collect();
    let volume_names: HashSet<&str> = spec.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        volumes::validate_volume(i, v, &all, errs);
    }
    if volume_names.len() != spec.volumes.as_ref().map_or(0, Vec::len) {
        errs.push(FieldError::new("spec.volumes", "volume names must be unique"));
    }
    containers::validate_containers(spec, &all, &volume_names, errs);
    if let Some(rp) = spec.restart_policy.as_deref()
        && !matches!(rp, "Always" | "OnFailure" | "Never")
    {
        errs.push(FieldError::new("spec.restartPolicy", format!("{rp:?} is not one of Always, OnFailure, Never")));
    }
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    if !matches!(policy, "ClusterFirst" | "ClusterFirstWithHostNet" | "Default" | "None") {
        errs.push(FieldError::new(
            "spec.dnsPolicy",
            format!("{policy:?} is not one of ClusterFirst, ClusterFirstWithHostNet, Default, None"),
        ));
    }
    if let Some(sc) = &spec.security_context {
        security::validate_pod_security_context(sc, errs);
    }
    validate_dns_config(spec, policy, errs);
    if let Some(d) = spec.active_deadline_seconds
        && !(1..=i64::from(i32::MAX)).contains(&d)
    {
        errs.push(FieldError::new(
            "spec.activeDeadlineSeconds",
            format!("{d} must be between 1 and 2147483647, inclusive"),
        ));
    }
    if let Some(h) = spec.hostname.as_deref()
        && !h.is_empty()
        && !is_dns1123_label(h)
    {
        errs.push(FieldError::new("spec.hostname", format!("{h:?} is not a valid DNS-1123 label")));
    }
    if let Some(os) = spec.os.as_ref()
        && os.name != "linux"
    {
        errs.push(FieldError::new("spec.os.name", format!("{:?}: this node runs linux", os.name)));
    }
}

/// dnsConfig, as the API server checks it: required with dnsPolicy `None`,
/// at most 3 nameservers (`sync::dns` forms the resolver config from them).
fn validate_dns_config(spec: &PodSpec, policy: &str, errs: &mut FieldErrors) {
    let has_config = spec.dns_config.as_ref().is_some_and(|d| {
        d.nameservers.as_ref().is_some_and(|v| !v.is_empty())
            || d.searches.as_ref().is_some_and(|v| !v.is_empty())
            || d.options.as_ref().is_some_and(|v| !v.is_empty())
    });
    if policy == "None" && !has_config {
        errs.push(FieldError::new("spec.dnsConfig", "required with dnsPolicy: None"));
        return;
    }
    if let Some(n) = spec.dns_config.as_ref().and_then(|d| d.nameservers.as_ref()).filter(|n| n.len() > 3) {
        errs.push(FieldError::new(
            "spec.dnsConfig.nameservers",
            format!("{} nameservers: must not have more than 3", n.len()),
        ));
    }
}

#[cfg(test)]
mod tests {
    use crate::model::field::{FieldErrors, MAX_FIELD_ERRORS, TOO_MANY};
    use crate::model::manifest::{ManifestError, parse};

    /// Ten independent refusals, written in another order than the API
    /// server reports them.
    const TEN: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: Web_1\n  namespace: Bad.NS\nspec:\n  \
                       restartPolicy: Sometimes\n  dnsPolicy: Nowhere\n  activeDeadlineSeconds: 30\n  \
                       terminationGracePeriodSeconds: -5\n  initContainers:\n  - name: init\n    image: busybox:1\n    \
                       terminationMessagePolicy: Loud\n  containers:\n  - name: app\n    imagePullPolicy: Sometimes\n    \
                       ports:\n    - containerPort: 70000\n  volumes:\n  - name: data\n    hostPath: {path: relative/dir}\n";

    /// The ten, in the API server's order: metadata, then the spec as
    /// `ValidatePodSpec` checks it (terminationGracePeriodSeconds,
    /// volumes, app containers field by field, init containers,
    /// restartPolicy, dnsPolicy).
    const TEN_ERRORS: [(&str, &str); 10] = [
        ("metadata.name", "\"Web_1\" is not a valid DNS-1123 subdomain (lowercase letters, digits, '-', '.')"),
        ("metadata.namespace", "\"Bad.NS\" is not a valid DNS-1123 label"),
        ("spec.terminationGracePeriodSeconds", "-5 is negative; must be 0 or more"),
        ("spec.volumes[0].hostPath.path", "\"relative/dir\" must be an absolute path"),
        ("spec.containers[0].image", "missing; every container needs an image"),
        ("spec.containers[0].ports[0].containerPort", "70000 is not in 1-65535"),
        ("spec.containers[0].imagePullPolicy", "\"Sometimes\" is not one of Always, IfNotPresent, Never"),
        ("spec.initContainers[0].terminationMessagePolicy", "\"Loud\" is not one of File, FallbackToLogsOnError"),
        ("spec.restartPolicy", "\"Sometimes\" is not one of Always, OnFailure, Never"),
        ("spec.dnsPolicy", "\"Nowhere\" is not one of ClusterFirst, ClusterFirstWithHostNet, Default, None"),
    ];

    fn refused(manifest: &str) -> FieldErrors {
        match parse("/m/p.yaml", manifest.as_bytes(), "n") {
            Err(ManifestError::Invalid { errors, .. }) => errors,
            other => panic!("expected refused fields, got {other:?}"),
        }
    }

    fn pairs(errors: &FieldErrors) -> Vec<(&str, &str)> {
        errors.iter().map(|e| (e.field.as_str(), e.reason.as_str())).collect()
    }

    #[test]
    fn ten_independent_errors_are_all_reported_in_the_api_servers_order() {
        let errors = refused(TEN);
        assert_eq!(pairs(&errors), TEN_ERRORS);
        // one line for a log or an event: all ten, no "more"
        let e = parse("/m/p.yaml", TEN.as_bytes(), "n").unwrap_err();
        let line: Vec<String> = TEN_ERRORS.iter().map(|(f, r)| format!("field {f}: {r}")).collect();
        assert_eq!(e.to_string(), format!("/m/p.yaml: {}", line.join("; ")));
        assert_eq!(e.lines(), line.iter().map(|l| format!("/m/p.yaml: {l}")).collect::<Vec<_>>());
        // an eleventh (activeDeadlineSeconds comes after dnsPolicy) is
        // counted in the line
        let eleven = TEN.replace("activeDeadlineSeconds: 30", "activeDeadlineSeconds: 0");
        let e = parse("/m/p.yaml", eleven.as_bytes(), "n").unwrap_err();
        assert_eq!(e.field_errors().unwrap().iter().last().unwrap().field, "spec.activeDeadlineSeconds");
        assert!(e.to_string().ends_with("; and 1 more"), "{e}");
        assert_eq!(e.lines().len(), 11);
    }

    #[test]
    fn checks_that_depend_on_a_refused_field_are_skipped() {
        // a bad name is not also "too long"; a refused source of a volume
        // is not also "no source"; an unsupported init restartPolicy is
        // said once (by the field table)
        let m = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {}_\nspec:\n  initContainers:\n  - name: i\n    \
             image: b\n    restartPolicy: Never\n  containers:\n  - name: c\n    image: b\n  volumes:\n  - name: v\n    \
             nfs: {{server: s, path: /x}}\n",
            "n".repeat(300)
        );
        let errors = refused(&m);
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["spec.initContainers[0].restartPolicy", "spec.volumes[0].nfs", "metadata.name"]);
        // the apps' host ports are checked after all apps, and a duplicate
        // name is reported after the container's own fields
        let m = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: b\n    \
                 ports: [{containerPort: 1, hostPort: 80}]\n  - name: c\n    image: b\n    imagePullPolicy: x\n    \
                 ports: [{containerPort: 2, hostPort: 80}]\n";
        let errors = refused(m);
        assert_eq!(
            errors.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(),
            ["spec.containers[1].imagePullPolicy", "spec.containers[1].name", "spec.containers[1].ports[0].hostPort"]
        );
    }

    #[test]
    fn a_manifest_with_more_errors_than_the_cap_ends_with_too_many_errors() {
        let n = MAX_FIELD_ERRORS + 200;
        let containers: String = (0..n).map(|i| format!("  - name: c{i}\n")).collect();
        let m = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n{containers}");
        let errors = refused(&m);
        assert_eq!(errors.len(), MAX_FIELD_ERRORS);
        assert_eq!(errors.total(), n);
        for (i, e) in errors.iter().take(MAX_FIELD_ERRORS - 1).enumerate() {
            assert_eq!(e.field, format!("spec.containers[{i}].image"));
        }
        let last = errors.iter().last().unwrap();
        assert_eq!((last.field.as_str(), last.reason.as_str()), ("", TOO_MANY));
        let e = parse("/m/p.yaml", m.as_bytes(), "n").unwrap_err();
        assert!(e.to_string().ends_with(&format!("; and {} more", n - 10)), "{e}");
        assert_eq!(e.lines().last().unwrap(), "/m/p.yaml: too many errors");
    }
}

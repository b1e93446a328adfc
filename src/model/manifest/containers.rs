//! A pod's containers, app containers then init containers (sidecars
//! among them), each as the API server validates it plus what podwarden
//! needs, in the API server's order: name, image, terminationMessagePolicy,
//! ports, environment (`env`, `valueFrom`, `envFrom`), volume mounts,
//! imagePullPolicy, resources, security profiles; then the name's
//! uniqueness, host ports, and hooks and probes (`probes`).

use std::collections::HashSet;
use std::path::Path;

use super::{probes, security};
use crate::model::field::{FieldError, FieldErrors, err};
use crate::model::names::{check_key, has_dot_dot, is_dns1123_label, is_dns1123_subdomain};
use crate::model::{Container, PodSpec};

/// A host port: (port, protocol, host IP).
type HostPort = (i32, String, String);

/// Every container of `spec`, as the API server's `ValidatePodSpec` goes
/// through them: app containers, host ports across them, then each init
/// container, then ephemeral ones (refused). `all` is the init and app
/// containers (for references by name), `volumes` the pod's volume names.
/// Names are unique across both lists; host ports across the pod.
pub(super) fn validate_containers(spec: &PodSpec, all: &[&Container], volumes: &HashSet<&str>, errs: &mut FieldErrors) {
    let mut names = HashSet::new();
    let mut host_ports: HashSet<HostPort> = HashSet::new();
    if spec.containers.is_empty() {
        errs.push(FieldError::new("spec.containers", "a pod needs at least one container"));
    }
    for (i, c) in spec.containers.iter().enumerate() {
        let f = format!("spec.containers[{i}]");
        validate_common(&f, c, all, volumes, errs);
        unique_name(&f, c, &mut names, errs);
        probes::validate_lifecycle_and_probes(&f, c, errs);
    }
    for (i, c) in spec.containers.iter().enumerate() {
        unique_host_ports(&format!("spec.containers[{i}]"), c, &mut host_ports, errs);
    }
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let f = format!("spec.initContainers[{i}]");
        validate_common(&f, c, all, volumes, errs);
        init_restart_policy(&f, c, errs);
        unique_name(&f, c, &mut names, errs);
        unique_host_ports(&f, c, &mut host_ports, errs);
        if crate::model::is_sidecar(c) {
            probes::validate_lifecycle_and_probes(&f, c, errs);
        } else {
            init_without_probes(&f, c, errs);
        }
    }
    if spec.ephemeral_containers.as_ref().is_some_and(|c| !c.is_empty()) {
        errs.push(FieldError::new("spec.ephemeralContainers", "ephemeral containers cannot be set in a manifest"));
    }
}

/// What every container is checked for, in the API server's order.
fn validate_common(f: &str, c: &Container, all: &[&Container], volumes: &HashSet<&str>, errs: &mut FieldErrors) {
    if !is_dns1123_label(&c.name) {
        errs.push(FieldError::new(format!("{f}.name"), format!("{:?} is not a valid DNS-1123 label", c.name)));
    }
    if c.image.as_deref().unwrap_or("").trim().is_empty() {
        errs.push(FieldError::new(format!("{f}.image"), "missing; every container needs an image"));
    }
    if let Some(p) = c.termination_message_policy.as_deref()
        && !matches!(p, "File" | "FallbackToLogsOnError")
    {
        errs.push(FieldError::new(
            format!("{f}.terminationMessagePolicy"),
            format!("{p:?} is not one of File, FallbackToLogsOnError"),
        ));
    }
    validate_ports(f, c, errs);
    validate_env(f, c, all, errs);
    validate_env_from(f, c, errs);
    validate_mounts(f, c, volumes, errs);
    if let Some(p) = c.image_pull_policy.as_deref()
        && !matches!(p, "Always" | "IfNotPresent" | "Never")
    {
        errs.push(FieldError::new(
            format!("{f}.imagePullPolicy"),
            format!("{p:?} is not one of Always, IfNotPresent, Never"),
        ));
    }
    validate_resources(f, c, errs);
    security::validate_container_profiles(f, c, errs);
}

/// The name unique across the pod's containers (a name already refused as
/// a label is not looked at again).
fn unique_name<'a>(f: &str, c: &'a Container, names: &mut HashSet<&'a str>, errs: &mut FieldErrors) {
    if is_dns1123_label(&c.name) && !names.insert(c.name.as_str()) {
        errs.push(FieldError::new(format!("{f}.name"), format!("duplicate container name {:?}", c.name)));
    }
}

/// `env`: every variable named, its `valueFrom` one known source.
fn validate_env(f: &str, c: &Container, all: &[&Container], errs: &mut FieldErrors) {
    for (j, e) in c.env.iter().flatten().enumerate() {
        if e.name.is_empty() {
            errs.push(FieldError::new(
                format!("{f}.env[{j}].name"),
                "missing; every environment variable needs a name",
            ));
        }
        if let Some(from) = &e.value_from {
            validate_value_from(&format!("{f}.env[{j}]"), e.value.as_deref(), from, all, errs);
        }
    }
}

/// `envFrom`: a prefix of printable ASCII but `=`, one object named.
fn validate_env_from(f: &str, c: &Container, errs: &mut FieldErrors) {
    for (j, ef) in c.env_from.iter().flatten().enumerate() {
        let ff = format!("{f}.envFrom[{j}]");
        if let Some(p) = ef.prefix.as_deref()
            && let Some(bad) = p.chars().find(|ch| *ch == '=' || !(' '..='~').contains(ch))
        {
            errs.push(FieldError::new(
                format!("{ff}.prefix"),
                format!("{p:?}: {bad:?} is not allowed (printable ASCII characters other than '=' are)"),
            ));
        }
        let (field, name) = match (&ef.config_map_ref, &ef.secret_ref) {
            (Some(_), Some(_)) => {
                errs.push(FieldError::new(ff, "may not have more than one field specified at a time"));
                continue;
            }
            (None, None) => {
                errs.push(FieldError::new(ff, "must specify one of: `configMapRef` or `secretRef`"));
                continue;
            }
            (Some(r), None) => (format!("{ff}.configMapRef.name"), r.name.as_str()),
            (None, Some(r)) => (format!("{ff}.secretRef.name"), r.name.as_str()),
        };
        if name.is_empty() {
            errs.push(FieldError::new(field, "missing; name the object"));
        } else if !is_dns1123_subdomain(name) {
            errs.push(FieldError::new(field, format!("{name:?} is not a valid DNS-1123 subdomain")));
        }
    }
}

/// `volumeMounts`: each of a volume of the pod, at its own path.
fn validate_mounts(f: &str, c: &Container, volumes: &HashSet<&str>, errs: &mut FieldErrors) {
    let mut mount_paths = HashSet::new();
    for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
        let mf = format!("{f}.volumeMounts[{j}]");
        if !volumes.contains(m.name.as_str()) {
            errs.push(FieldError::new(format!("{mf}.name"), format!("no volume named {:?} in spec.volumes", m.name)));
        }
        errs.check(mount_path(&mf, &m.mount_path, &mut mount_paths));
        let sub = m.sub_path.as_deref().filter(|s| !s.is_empty());
        let expr = m.sub_path_expr.as_deref().filter(|s| !s.is_empty());
        errs.check(sub_path(format!("{mf}.subPath"), sub));
        if sub.is_some() && expr.is_some() {
            errs.push(FieldError::new(format!("{mf}.subPathExpr"), "may not be specified when `subPath` is set"));
        } else {
            errs.check(sub_path(format!("{mf}.subPathExpr"), expr));
        }
        if let Some(p) = m.mount_propagation.as_deref() {
            // the API server's validateMountPropagation, its messages
            if !matches!(p, "Bidirectional" | "HostToContainer" | "None") {
                errs.push(FieldError::new(
                    format!("{mf}.mountPropagation"),
                    format!(
                        "Unsupported value: {p:?}: supported values: \"Bidirectional\", \"HostToContainer\", \"None\""
                    ),
                ));
            } else if p == "Bidirectional" && !c.security_context.as_ref().and_then(|s| s.privileged).unwrap_or(false) {
                errs.push(FieldError::new(
                    format!("{mf}.mountPropagation"),
                    "Bidirectional mount propagation is available only to privileged containers",
                ));
            }
        }
    }
}

/// A mount's path in the container: set, without NUL or `..`, not mounted
/// twice in the container (`seen`: the valid paths so far).
fn mount_path(mf: &str, mp: &str, seen: &mut HashSet<std::path::PathBuf>) -> Result<(), FieldError> {
    let field = format!("{mf}.mountPath");
    if mp.is_empty() {
        return err(field, "missing; a mount needs a path in the container");
    }
    if mp.contains('\0') {
        return err(field, format!("{mp:?} holds a NUL byte"));
    }
    if has_dot_dot(mp) {
        return err(field, format!("{mp:?} must not contain '..'"));
    }
    if !seen.insert(Path::new(mp).components().collect::<std::path::PathBuf>()) {
        return err(field, format!("{mp:?} is mounted twice in this container"));
    }
    Ok(())
}

/// A `subPath` or `subPathExpr` (when set): relative, without `..` or NUL.
fn sub_path(field: String, p: Option<&str>) -> Result<(), FieldError> {
    let Some(p) = p else { return Ok(()) };
    if p.starts_with('/') {
        return err(field, format!("{p:?} must be a relative path"));
    }
    if p.split('/').any(|c| c == "..") {
        return err(field, format!("{p:?} must not contain '..'"));
    }
    if p.contains('\0') {
        return err(field, format!("{p:?} holds a NUL byte"));
    }
    Ok(())
}

/// `ports`: numbers and protocols (host ports' uniqueness is
/// [`unique_host_ports`]').
fn validate_ports(f: &str, c: &Container, errs: &mut FieldErrors) {
    for (j, p) in c.ports.iter().flatten().enumerate() {
        let pf = format!("{f}.ports[{j}]");
        if !(1..=65535).contains(&p.container_port) {
            errs.push(FieldError::new(
                format!("{pf}.containerPort"),
                format!("{} is not in 1-65535", p.container_port),
            ));
        }
        if let Some(hp) = p.host_port.filter(|hp| *hp != 0 && !(1..=65535).contains(hp)) {
            errs.push(FieldError::new(format!("{pf}.hostPort"), format!("{hp} is not in 1-65535")));
        }
        let proto = p.protocol.as_deref().unwrap_or("TCP");
        if !matches!(proto, "TCP" | "UDP" | "SCTP") {
            errs.push(FieldError::new(format!("{pf}.protocol"), format!("{proto:?} is not one of TCP, UDP, SCTP")));
        }
    }
}

/// A host port (with its protocol and IP) used once in the pod; ports
/// already refused by [`validate_ports`] are not looked at.
fn unique_host_ports(f: &str, c: &Container, host_ports: &mut HashSet<HostPort>, errs: &mut FieldErrors) {
    for (j, p) in c.ports.iter().flatten().enumerate() {
        let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
        let Some(hp) = p.host_port.filter(|hp| (1..=65535).contains(hp)) else { continue };
        if !matches!(proto.as_str(), "TCP" | "UDP" | "SCTP") {
            continue;
        }
        let ip = p.host_ip.clone().unwrap_or_default();
        if !host_ports.insert((hp, proto.clone(), ip)) {
            errs.push(FieldError::new(format!("{f}.ports[{j}].hostPort"), format!("duplicate host port {hp}/{proto}")));
        }
    }
}

/// What the API server allows an init container's `restartPolicy`: only
/// `Always` (a sidecar).
fn init_restart_policy(f: &str, c: &Container, errs: &mut FieldErrors) {
    if let Some(p) = c.restart_policy.as_deref().filter(|p| *p != "Always") {
        errs.push(FieldError::new(
            format!("{f}.restartPolicy"),
            format!("Unsupported value: {p:?}: supported values: \"Always\""),
        ));
    }
}

/// Lifecycle hooks and probes only on a sidecar: a regular init container
/// runs to completion before anything probes it. Each one set is refused.
fn init_without_probes(f: &str, c: &Container, errs: &mut FieldErrors) {
    for (name, set) in [
        ("lifecycle", c.lifecycle.as_ref().is_some_and(|l| l.post_start.is_some() || l.pre_stop.is_some())),
        ("livenessProbe", c.liveness_probe.is_some()),
        ("readinessProbe", c.readiness_probe.is_some()),
        ("startupProbe", c.startup_probe.is_some()),
    ] {
        if set {
            errs.push(FieldError::new(
                format!("{f}.{name}"),
                "may not be set for init containers without restartPolicy=Always",
            ));
        }
    }
}

/// `env[].valueFrom`: one source, a downward-API path or resource an
/// environment variable may read, as the API server's validation checks.
/// No source, or more than one, is the one error (which source to check
/// is then unknown).
fn validate_value_from(
    f: &str,
    value: Option<&str>,
    from: &k8s_openapi::api::core::v1::EnvVarSource,
    containers: &[&Container],
    errs: &mut FieldErrors,
) {
    let vf = format!("{f}.valueFrom");
    let sources = [
        from.field_ref.is_some(),
        from.resource_field_ref.is_some(),
        from.config_map_key_ref.is_some(),
        from.secret_key_ref.is_some(),
    ];
    match sources.iter().filter(|s| **s).count() {
        0 => {
            let why = "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`";
            return errs.push(FieldError::new(vf, why));
        }
        1 => {}
        _ if value.is_some_and(|v| !v.is_empty()) => {
            return errs.push(FieldError::new(vf, "may not be specified when `value` is not empty"));
        }
        _ => return errs.push(FieldError::new(vf, "may not have more than one field specified at a time")),
    }
    let mut key_ref = |field: &str, name: &str, key: &str| {
        if name.is_empty() {
            errs.push(FieldError::new(format!("{vf}.{field}.name"), "missing; name the object"));
        } else if !is_dns1123_subdomain(name) {
            errs.push(FieldError::new(
                format!("{vf}.{field}.name"),
                format!("{name:?} is not a valid DNS-1123 subdomain"),
            ));
        }
        if let Err(e) = check_key(key) {
            errs.push(FieldError::new(format!("{vf}.{field}.key"), e.to_string()));
        }
    };
    if let Some(r) = &from.config_map_key_ref {
        key_ref("configMapKeyRef", &r.name, &r.key);
    }
    if let Some(r) = &from.secret_key_ref {
        key_ref("secretKeyRef", &r.name, &r.key);
    }
    if let Some(fr) = &from.field_ref {
        errs.check(env_field_ref(&vf, fr));
    }
    if let Some(rf) = &from.resource_field_ref {
        env_resource_field_ref(&vf, rf, containers, errs);
    }
    if value.is_some_and(|v| !v.is_empty()) {
        errs.push(FieldError::new(vf, "may not be specified when `value` is not empty"));
    }
}

/// `valueFrom.fieldRef`: a path an environment variable may read.
fn env_field_ref(vf: &str, fr: &k8s_openapi::api::core::v1::ObjectFieldSelector) -> Result<(), FieldError> {
    use crate::model::downward::{ENV_FIELD_PATHS, subscript};
    let p = fr.field_path.as_str();
    if ENV_FIELD_PATHS.contains(&p) || subscript(p).is_some_and(|(_, k)| !k.is_empty()) {
        Ok(())
    } else if p.is_empty() {
        err(format!("{vf}.fieldRef.fieldPath"), "missing; a fieldRef needs a fieldPath")
    } else {
        err(format!("{vf}.fieldRef.fieldPath"), format!("{p:?} is not one of {}", ENV_FIELD_PATHS.join(", ")))
    }
}

/// `valueFrom.resourceFieldRef`: a resource podwarden accounts for, of a
/// container of the pod, with a divisor the resource takes.
fn env_resource_field_ref(
    vf: &str,
    rf: &k8s_openapi::api::core::v1::ResourceFieldSelector,
    containers: &[&Container],
    errs: &mut FieldErrors,
) {
    use crate::model::downward::{RESOURCES, divisor_allowed};
    let rff = format!("{vf}.resourceFieldRef");
    let known = RESOURCES.contains(&rf.resource.as_str());
    if !known {
        errs.push(FieldError::new(
            format!("{rff}.resource"),
            format!(
                "{:?} is not one of {} (podwarden accounts for cpu, memory and ephemeral storage)",
                rf.resource,
                RESOURCES.join(", ")
            ),
        ));
    }
    if let Some(name) = rf.container_name.as_deref().filter(|n| !n.is_empty())
        && !containers.iter().any(|c| c.name == name)
    {
        errs.push(FieldError::new(format!("{rff}.containerName"), format!("no container named {name:?} in this pod")));
    }
    // the divisors allowed depend on the resource: none to check against
    // an unknown one
    if let Some(d) = &rf.divisor
        && known
        && !divisor_allowed(&rf.resource, &d.0)
    {
        let allowed = if rf.resource.ends_with(".cpu") {
            "1m, 1"
        } else {
            "1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei"
        };
        errs.push(FieldError::new(format!("{rff}.divisor"), format!("{:?} is not one of {allowed}", d.0)));
    }
}

/// Requests and limits: cpu, memory, ephemeral storage and huge pages
/// only (the others would be dropped), each a quantity; huge pages with
/// cpu or memory; a request at most its limit. A resource refused for its
/// name or quantity is not compared.
fn validate_resources(f: &str, c: &Container, errs: &mut FieldErrors) {
    let Some(r) = c.resources.as_ref() else { return };
    let value = |name: &str, q: &str| {
        if name == "cpu" { crate::model::quantity::cpu_millis(q) } else { crate::model::quantity::bytes(q) }
            .ok()
            .filter(|v| *v >= 0)
    };
    let mut refused: HashSet<(&str, &str)> = HashSet::new();
    for (kind, m) in [("limits", &r.limits), ("requests", &r.requests)] {
        for (name, q) in m.iter().flatten() {
            let rf = format!("{f}.resources.{kind}.{name}");
            let known = matches!(name.as_str(), "cpu" | "memory" | "ephemeral-storage")
                || name
                    .strip_prefix("hugepages-")
                    .is_some_and(|size| crate::model::quantity::bytes(size).is_ok_and(|b| b > 0));
            let why = if !known {
                "not supported by podwarden (cpu, memory, ephemeral-storage and hugepages-<size> are)".to_string()
            } else if value(name, &q.0).is_none() {
                format!("{:?} is not a quantity", q.0)
            } else {
                continue;
            };
            refused.insert((kind, name.as_str()));
            errs.push(FieldError::new(rf, why));
        }
    }
    let names = || r.limits.iter().chain(r.requests.iter()).flat_map(|m| m.keys());
    if names().any(|n| n.starts_with("hugepages-")) && !names().any(|n| n == "cpu" || n == "memory") {
        errs.push(FieldError::new(format!("{f}.resources"), "Forbidden: HugePages require cpu or memory"));
    }
    // a request is at most its limit; huge pages are not overcommitted
    for (name, q) in r.requests.iter().flatten() {
        if refused.contains(&("requests", name.as_str())) || refused.contains(&("limits", name.as_str())) {
            continue;
        }
        let limit = r.limits.as_ref().and_then(|l| l.get(name));
        let (req, lim) = (value(name, &q.0), limit.and_then(|l| value(name, &l.0)));
        let rf = format!("{f}.resources.requests.{name}");
        if name.starts_with("hugepages-") && req != lim {
            errs.push(FieldError::new(rf, format!("{:?} must be equal to the {name} limit", q.0)));
        } else if let (Some(a), Some(b), Some(l)) = (req, lim, limit)
            && a > b
        {
            errs.push(FieldError::new(rf, format!("{:?} must be less than or equal to {name} limit of {}", q.0, l.0)));
        }
    }
}

//! A pod's containers, init containers (sidecars among them) then app
//! containers, each as the API server validates it plus what podwarden
//! needs: name and image, environment (`env`, `envFrom`, `valueFrom`),
//! resources, security profiles, volume mounts, ports, then hooks and
//! probes (`probes`).

use std::collections::HashSet;
use std::path::Path;

use super::{probes, security};
use crate::model::field::{FieldError, err};
use crate::model::names::{check_key, has_dot_dot, is_dns1123_label, is_dns1123_subdomain};
use crate::model::{Container, PodSpec};

/// Every container of `spec`, in order; `all` is the init and app
/// containers (for references by name), `volumes` the pod's volume names.
/// Names are unique across both lists; host ports across the pod.
pub(super) fn validate_containers(
    spec: &PodSpec,
    all: &[&Container],
    volumes: &HashSet<&str>,
) -> Result<(), FieldError> {
    let mut names = HashSet::new();
    let mut host_ports: HashSet<(i32, String, String)> = HashSet::new();
    let listed = (spec.init_containers.iter().flatten().enumerate())
        .map(|(i, c)| (format!("spec.initContainers[{i}]"), c, true))
        .chain(spec.containers.iter().enumerate().map(|(i, c)| (format!("spec.containers[{i}]"), c, false)));
    for (f, c, init) in listed {
        if init {
            validate_init_container(&f, c)?;
        }
        validate_identity(&f, c, &mut names)?;
        validate_env(&f, c, all)?;
        validate_env_from(&f, c)?;
        validate_resources(&f, c)?;
        security::validate_container_profiles(&f, c)?;
        validate_mounts(&f, c, volumes)?;
        validate_ports(&f, c, &mut host_ports)?;
        probes::validate_lifecycle_and_probes(&f, c)?;
    }
    Ok(())
}

/// Name (unique in the pod), image and the two policies.
fn validate_identity<'a>(f: &str, c: &'a Container, names: &mut HashSet<&'a str>) -> Result<(), FieldError> {
    if !is_dns1123_label(&c.name) {
        return err(format!("{f}.name"), format!("{:?} is not a valid DNS-1123 label", c.name));
    }
    if !names.insert(c.name.as_str()) {
        return err(format!("{f}.name"), format!("duplicate container name {:?}", c.name));
    }
    if c.image.as_deref().unwrap_or("").trim().is_empty() {
        return err(format!("{f}.image"), "missing; every container needs an image");
    }
    if let Some(p) = c.image_pull_policy.as_deref()
        && !matches!(p, "Always" | "IfNotPresent" | "Never")
    {
        return err(format!("{f}.imagePullPolicy"), format!("{p:?} is not one of Always, IfNotPresent, Never"));
    }
    if let Some(p) = c.termination_message_policy.as_deref()
        && !matches!(p, "File" | "FallbackToLogsOnError")
    {
        return err(
            format!("{f}.terminationMessagePolicy"),
            format!("{p:?} is not one of File, FallbackToLogsOnError"),
        );
    }
    Ok(())
}

/// `env`: every variable named, its `valueFrom` one known source.
fn validate_env(f: &str, c: &Container, all: &[&Container]) -> Result<(), FieldError> {
    for (j, e) in c.env.iter().flatten().enumerate() {
        if e.name.is_empty() {
            return err(format!("{f}.env[{j}].name"), "missing; every environment variable needs a name");
        }
        if let Some(from) = &e.value_from {
            validate_value_from(&format!("{f}.env[{j}]"), e.value.as_deref(), from, all)?;
        }
    }
    Ok(())
}

/// `envFrom`: one object named, a prefix of printable ASCII but `=`.
fn validate_env_from(f: &str, c: &Container) -> Result<(), FieldError> {
    for (j, ef) in c.env_from.iter().flatten().enumerate() {
        let ff = format!("{f}.envFrom[{j}]");
        let name = match (&ef.config_map_ref, &ef.secret_ref) {
            (Some(_), Some(_)) => return err(ff, "may not have more than one field specified at a time"),
            (None, None) => return err(ff, "must specify one of: `configMapRef` or `secretRef`"),
            (Some(r), None) => (format!("{ff}.configMapRef.name"), r.name.as_str()),
            (None, Some(r)) => (format!("{ff}.secretRef.name"), r.name.as_str()),
        };
        if name.1.is_empty() {
            return err(name.0, "missing; name the object");
        }
        if !is_dns1123_subdomain(name.1) {
            return err(name.0, format!("{:?} is not a valid DNS-1123 subdomain", name.1));
        }
        if let Some(p) = ef.prefix.as_deref()
            && let Some(bad) = p.chars().find(|ch| *ch == '=' || !(' '..='~').contains(ch))
        {
            return err(
                format!("{ff}.prefix"),
                format!("{p:?}: {bad:?} is not allowed (printable ASCII characters other than '=' are)"),
            );
        }
    }
    Ok(())
}

/// `volumeMounts`: each of a volume of the pod, at its own path.
fn validate_mounts(f: &str, c: &Container, volumes: &HashSet<&str>) -> Result<(), FieldError> {
    let mut mount_paths = HashSet::new();
    for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
        let mf = format!("{f}.volumeMounts[{j}]");
        if !volumes.contains(m.name.as_str()) {
            return err(format!("{mf}.name"), format!("no volume named {:?} in spec.volumes", m.name));
        }
        if let Some(p) = m.mount_propagation.as_deref() {
            // the API server's validateMountPropagation, its messages
            if !matches!(p, "Bidirectional" | "HostToContainer" | "None") {
                return err(
                    format!("{mf}.mountPropagation"),
                    format!(
                        "Unsupported value: {p:?}: supported values: \"Bidirectional\", \"HostToContainer\", \"None\""
                    ),
                );
            }
            if p == "Bidirectional" && !c.security_context.as_ref().and_then(|s| s.privileged).unwrap_or(false) {
                return err(
                    format!("{mf}.mountPropagation"),
                    "Bidirectional mount propagation is available only to privileged containers",
                );
            }
        }
        let sub = m.sub_path.as_deref().filter(|s| !s.is_empty());
        let expr = m.sub_path_expr.as_deref().filter(|s| !s.is_empty());
        if sub.is_some() && expr.is_some() {
            return err(format!("{mf}.subPathExpr"), "may not be specified when `subPath` is set");
        }
        for (field, p) in [("subPath", sub), ("subPathExpr", expr)] {
            let Some(p) = p else { continue };
            if p.starts_with('/') {
                return err(format!("{mf}.{field}"), format!("{p:?} must be a relative path"));
            }
            if p.split('/').any(|c| c == "..") {
                return err(format!("{mf}.{field}"), format!("{p:?} must not contain '..'"));
            }
            if p.contains('\0') {
                return err(format!("{mf}.{field}"), format!("{p:?} holds a NUL byte"));
            }
        }
        let mp = m.mount_path.as_str();
        if mp.is_empty() {
            return err(format!("{mf}.mountPath"), "missing; a mount needs a path in the container");
        }
        if mp.contains('\0') {
            return err(format!("{mf}.mountPath"), format!("{mp:?} holds a NUL byte"));
        }
        if has_dot_dot(mp) {
            return err(format!("{mf}.mountPath"), format!("{mp:?} must not contain '..'"));
        }
        if !mount_paths.insert(Path::new(mp).components().collect::<std::path::PathBuf>()) {
            return err(format!("{mf}.mountPath"), format!("{mp:?} is mounted twice in this container"));
        }
    }
    Ok(())
}

/// `ports`: numbers and protocols; a host port (with its protocol and IP)
/// used once in the pod.
fn validate_ports(f: &str, c: &Container, host_ports: &mut HashSet<(i32, String, String)>) -> Result<(), FieldError> {
    for (j, p) in c.ports.iter().flatten().enumerate() {
        let pf = format!("{f}.ports[{j}]");
        if !(1..=65535).contains(&p.container_port) {
            return err(format!("{pf}.containerPort"), format!("{} is not in 1-65535", p.container_port));
        }
        let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
        if !matches!(proto.as_str(), "TCP" | "UDP" | "SCTP") {
            return err(format!("{pf}.protocol"), format!("{proto:?} is not one of TCP, UDP, SCTP"));
        }
        if let Some(hp) = p.host_port.filter(|hp| *hp != 0) {
            if !(1..=65535).contains(&hp) {
                return err(format!("{pf}.hostPort"), format!("{hp} is not in 1-65535"));
            }
            let ip = p.host_ip.clone().unwrap_or_default();
            if !host_ports.insert((hp, proto.clone(), ip)) {
                return err(format!("{pf}.hostPort"), format!("duplicate host port {hp}/{proto}"));
            }
        }
    }
    Ok(())
}

/// What the API server allows an init container: `restartPolicy` only
/// `Always` (a sidecar); lifecycle hooks and probes only on a sidecar (a
/// regular init container runs to completion before anything probes it).
fn validate_init_container(f: &str, c: &Container) -> Result<(), FieldError> {
    match c.restart_policy.as_deref() {
        None | Some("Always") => {}
        Some(p) => {
            return err(
                format!("{f}.restartPolicy"),
                format!("Unsupported value: {p:?}: supported values: \"Always\""),
            );
        }
    }
    if crate::model::is_sidecar(c) {
        return Ok(());
    }
    for (name, set) in [
        ("lifecycle", c.lifecycle.as_ref().is_some_and(|l| l.post_start.is_some() || l.pre_stop.is_some())),
        ("livenessProbe", c.liveness_probe.is_some()),
        ("readinessProbe", c.readiness_probe.is_some()),
        ("startupProbe", c.startup_probe.is_some()),
    ] {
        if set {
            return err(format!("{f}.{name}"), "may not be set for init containers without restartPolicy=Always");
        }
    }
    Ok(())
}

/// `env[].valueFrom`: one source, a downward-API path or resource an
/// environment variable may read, as the API server's validation checks.
fn validate_value_from(
    f: &str,
    value: Option<&str>,
    from: &k8s_openapi::api::core::v1::EnvVarSource,
    containers: &[&Container],
) -> Result<(), FieldError> {
    use crate::model::downward::{ENV_FIELD_PATHS, RESOURCES, divisor_allowed, subscript};
    let vf = format!("{f}.valueFrom");
    if value.is_some_and(|v| !v.is_empty()) {
        return err(vf, "may not be specified when `value` is not empty");
    }
    let sources = [
        from.field_ref.is_some(),
        from.resource_field_ref.is_some(),
        from.config_map_key_ref.is_some(),
        from.secret_key_ref.is_some(),
    ];
    match sources.iter().filter(|s| **s).count() {
        0 => {
            return err(vf, "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`");
        }
        1 => {}
        _ => return err(vf, "may not have more than one field specified at a time"),
    }
    let key_ref = |field: &str, name: &str, key: &str| -> Result<(), FieldError> {
        if name.is_empty() {
            return err(format!("{vf}.{field}.name"), "missing; name the object");
        }
        if !is_dns1123_subdomain(name) {
            return err(format!("{vf}.{field}.name"), format!("{name:?} is not a valid DNS-1123 subdomain"));
        }
        check_key(key).map_err(|e| FieldError::new(format!("{vf}.{field}.key"), e.to_string()))
    };
    if let Some(r) = &from.config_map_key_ref {
        return key_ref("configMapKeyRef", &r.name, &r.key);
    }
    if let Some(r) = &from.secret_key_ref {
        return key_ref("secretKeyRef", &r.name, &r.key);
    }
    match (&from.field_ref, &from.resource_field_ref) {
        (Some(_), Some(_)) | (None, None) => unreachable!("one source, counted above"),
        (Some(fr), None) => {
            let p = fr.field_path.as_str();
            let known = ENV_FIELD_PATHS.contains(&p) || subscript(p).is_some_and(|(_, k)| !k.is_empty());
            if known {
                Ok(())
            } else if p.is_empty() {
                err(format!("{vf}.fieldRef.fieldPath"), "missing; a fieldRef needs a fieldPath")
            } else {
                err(format!("{vf}.fieldRef.fieldPath"), format!("{p:?} is not one of {}", ENV_FIELD_PATHS.join(", ")))
            }
        }
        (None, Some(rf)) => {
            let rff = format!("{vf}.resourceFieldRef");
            if !RESOURCES.contains(&rf.resource.as_str()) {
                return err(
                    format!("{rff}.resource"),
                    format!(
                        "{:?} is not one of {} (podwarden accounts for cpu, memory and ephemeral storage)",
                        rf.resource,
                        RESOURCES.join(", ")
                    ),
                );
            }
            if let Some(name) = rf.container_name.as_deref().filter(|n| !n.is_empty())
                && !containers.iter().any(|c| c.name == name)
            {
                return err(format!("{rff}.containerName"), format!("no container named {name:?} in this pod"));
            }
            if let Some(d) = &rf.divisor
                && !divisor_allowed(&rf.resource, &d.0)
            {
                let allowed = if rf.resource.ends_with(".cpu") {
                    "1m, 1"
                } else {
                    "1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei"
                };
                return err(format!("{rff}.divisor"), format!("{:?} is not one of {allowed}", d.0));
            }
            Ok(())
        }
    }
}

/// Requests and limits: cpu and memory only (the others would be dropped),
/// each a quantity.
fn validate_resources(f: &str, c: &Container) -> Result<(), FieldError> {
    let Some(r) = c.resources.as_ref() else { return Ok(()) };
    let value = |name: &str, q: &str| {
        if name == "cpu" { crate::model::quantity::cpu_millis(q) } else { crate::model::quantity::bytes(q) }
            .ok()
            .filter(|v| *v >= 0)
    };
    for (kind, m) in [("limits", &r.limits), ("requests", &r.requests)] {
        for (name, q) in m.iter().flatten() {
            let rf = format!("{f}.resources.{kind}.{name}");
            let known = matches!(name.as_str(), "cpu" | "memory" | "ephemeral-storage")
                || name
                    .strip_prefix("hugepages-")
                    .is_some_and(|size| crate::model::quantity::bytes(size).is_ok_and(|b| b > 0));
            if !known {
                return err(rf, "not supported by podwarden (cpu, memory, ephemeral-storage and hugepages-<size> are)");
            }
            if value(name, &q.0).is_none() {
                return err(rf, format!("{:?} is not a quantity", q.0));
            }
        }
    }
    let names = || r.limits.iter().chain(r.requests.iter()).flat_map(|m| m.keys());
    if names().any(|n| n.starts_with("hugepages-")) && !names().any(|n| n == "cpu" || n == "memory") {
        return err(format!("{f}.resources"), "Forbidden: HugePages require cpu or memory");
    }
    // a request is at most its limit; huge pages are not overcommitted
    for (name, q) in r.requests.iter().flatten() {
        let limit = r.limits.as_ref().and_then(|l| l.get(name));
        let (req, lim) = (value(name, &q.0), limit.and_then(|l| value(name, &l.0)));
        let rf = format!("{f}.resources.requests.{name}");
        if name.starts_with("hugepages-") && req != lim {
            return err(rf, format!("{:?} must be equal to the {name} limit", q.0));
        }
        if let (Some(a), Some(b), Some(l)) = (req, lim, limit)
            && a > b
        {
            return err(rf, format!("{:?} must be less than or equal to {name} limit of {}", q.0, l.0));
        }
    }
    Ok(())
}

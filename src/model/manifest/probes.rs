//! A container's lifecycle hooks and probes, as the API server validates
//! them (one handler, the handler's fields, timings, thresholds), plus
//! what podwarden needs to run them: ports it can resolve, hosts and
//! headers that fit a request. A hook or probe without a handler, or with
//! more than one, is that one error (which handler to check is unknown).

use crate::model::Container;
use crate::model::field::{FieldError, FieldErrors, err};

/// `lifecycle` (postStart, preStop) and the three probes of container `f`.
pub(super) fn validate_lifecycle_and_probes(f: &str, c: &Container, errs: &mut FieldErrors) {
    if let Some(l) = &c.lifecycle {
        if let Some(h) = &l.post_start {
            validate_hook(&format!("{f}.lifecycle.postStart"), h, c, errs);
        }
        if let Some(h) = &l.pre_stop {
            validate_hook(&format!("{f}.lifecycle.preStop"), h, c, errs);
        }
    }
    for (name, probe, kind) in [
        ("livenessProbe", &c.liveness_probe, ProbeKind::Liveness),
        ("readinessProbe", &c.readiness_probe, ProbeKind::Readiness),
        ("startupProbe", &c.startup_probe, ProbeKind::Startup),
    ] {
        if let Some(p) = probe {
            validate_probe(&format!("{f}.{name}"), p, kind, c, errs);
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

/// A port a probe names: a number in 1-65535 or the name of a container
/// port (an IANA service name).
fn validate_probe_port(
    field: String,
    port: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString,
    c: &Container,
) -> Result<(), FieldError> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match port {
        IntOrString::Int(n) if (1..=65535).contains(n) => Ok(()),
        IntOrString::Int(n) => err(field, format!("{n} must be between 1 and 65535, inclusive")),
        IntOrString::String(s) if c.ports.iter().flatten().any(|p| p.name.as_deref() == Some(s.as_str())) => Ok(()),
        IntOrString::String(s) => err(field, format!("{s:?} is not the name of one of this container's ports")),
    }
}

/// A probe as the API server validates it, in its order: one handler and
/// the handler's fields, non-negative timings, a positive
/// `terminationGracePeriodSeconds`, then `successThreshold` 1 for
/// liveness and startup and no `terminationGracePeriodSeconds` on
/// readiness; plus what podwarden needs: a `host` is an address or a DNS
/// name (it goes into the request's `Host` header).
fn validate_probe(
    f: &str,
    p: &k8s_openapi::api::core::v1::Probe,
    kind: ProbeKind,
    c: &Container,
    errs: &mut FieldErrors,
) {
    let handlers = [p.exec.is_some(), p.http_get.is_some(), p.tcp_socket.is_some(), p.grpc.is_some()];
    match handlers.iter().filter(|h| **h).count() {
        0 => return errs.push(FieldError::new(f, "must specify a handler type (exec, httpGet, tcpSocket or grpc)")),
        1 => {}
        _ => return errs.push(FieldError::new(f, "may not specify more than 1 handler type")),
    }
    if let Some(e) = &p.exec
        && e.command.as_ref().is_none_or(|c| c.is_empty())
    {
        errs.push(FieldError::new(format!("{f}.exec.command"), "must have at least one element"));
    }
    if let Some(h) = &p.http_get {
        validate_http_get(&format!("{f}.httpGet"), h, c, errs);
    }
    if let Some(t) = &p.tcp_socket {
        errs.check(validate_probe_port(format!("{f}.tcpSocket.port"), &t.port, c));
        errs.check(probe_host(format!("{f}.tcpSocket.host"), &t.host));
    }
    if let Some(g) = &p.grpc
        && !(1..=65535).contains(&g.port)
    {
        errs.push(FieldError::new(
            format!("{f}.grpc.port"),
            format!("{} must be between 1 and 65535, inclusive", g.port),
        ));
    }
    let mut negative_success = false;
    for (name, v) in [
        ("initialDelaySeconds", p.initial_delay_seconds),
        ("timeoutSeconds", p.timeout_seconds),
        ("periodSeconds", p.period_seconds),
        ("successThreshold", p.success_threshold),
        ("failureThreshold", p.failure_threshold),
    ] {
        if let Some(v) = v
            && v < 0
        {
            negative_success |= name == "successThreshold";
            errs.push(FieldError::new(format!("{f}.{name}"), format!("{v} must be greater than or equal to 0")));
        }
    }
    let grace = format!("{f}.terminationGracePeriodSeconds");
    match (kind, p.termination_grace_period_seconds) {
        (ProbeKind::Readiness, Some(_)) => {
            errs.push(FieldError::new(grace, "must not be set for readinessProbes"));
        }
        (_, Some(g)) if g <= 0 => errs.push(FieldError::new(grace, format!("{g} must be greater than 0"))),
        _ => {}
    }
    if kind != ProbeKind::Readiness && !negative_success && p.success_threshold.is_some_and(|v| v > 1) {
        errs.push(FieldError::new(format!("{f}.successThreshold"), "must be 1"));
    }
}

/// A host a probe or hook names: an IP address, or a name the system
/// resolver can look up (dot-separated labels of letters, digits, `-` and
/// `_`, 253 characters at most, an optional final dot).
fn probe_host(field: String, host: &Option<String>) -> Result<(), FieldError> {
    let Some(h) = host.as_deref().filter(|h| !h.is_empty()) else { return Ok(()) };
    if h.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    let name = h.strip_suffix('.').unwrap_or(h);
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if h.len() <= 253 && name.split('.').all(label_ok) {
        return Ok(());
    }
    err(field, format!("{h:?} must be an IP address or a DNS name"))
}

/// `httpGet` of a probe or hook: its port, an IP host, headers and path
/// that fit in a request line.
fn validate_http_get(f: &str, h: &k8s_openapi::api::core::v1::HTTPGetAction, c: &Container, errs: &mut FieldErrors) {
    errs.check(validate_probe_port(format!("{f}.port"), &h.port, c));
    errs.check(probe_host(format!("{f}.host"), &h.host));
    if let Some(sch) = h.scheme.as_deref()
        && !matches!(sch, "HTTP" | "HTTPS")
    {
        errs.push(FieldError::new(
            format!("{f}.scheme"),
            format!("Unsupported value: {sch:?}: supported values: \"HTTP\", \"HTTPS\""),
        ));
    }
    for (i, hh) in h.http_headers.iter().flatten().enumerate() {
        let ok = !hh.name.is_empty()
            && hh.name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !ok {
            errs.push(FieldError::new(
                format!("{f}.httpHeaders[{i}].name"),
                format!("{:?} is not a valid HTTP header name", hh.name),
            ));
        }
        if hh.value.contains(['\r', '\n']) {
            errs.push(FieldError::new(format!("{f}.httpHeaders[{i}].value"), "must not contain a line break"));
        }
    }
    if h.path.as_deref().is_some_and(|p| p.contains([' ', '\r', '\n'])) {
        errs.push(FieldError::new(format!("{f}.path"), "must not contain spaces or line breaks"));
    }
}

/// A lifecycle hook: one handler (`exec`, `httpGet`, `sleep`) and its
/// fields.
fn validate_hook(f: &str, h: &k8s_openapi::api::core::v1::LifecycleHandler, c: &Container, errs: &mut FieldErrors) {
    match [h.exec.is_some(), h.http_get.is_some(), h.sleep.is_some(), h.tcp_socket.is_some()]
        .iter()
        .filter(|x| **x)
        .count()
    {
        0 => return errs.push(FieldError::new(f, "must specify a handler type (exec, httpGet or sleep)")),
        1 => {}
        _ => return errs.push(FieldError::new(f, "may not specify more than 1 handler type")),
    }
    if let Some(e) = &h.exec
        && e.command.as_ref().is_none_or(|c| c.is_empty())
    {
        errs.push(FieldError::new(format!("{f}.exec.command"), "must have at least one element"));
    }
    if let Some(g) = &h.http_get {
        validate_http_get(&format!("{f}.httpGet"), g, c, errs);
    }
    if let Some(s) = &h.sleep
        && s.seconds < 0
    {
        errs.push(FieldError::new(
            format!("{f}.sleep.seconds"),
            format!("{} must be greater than or equal to 0", s.seconds),
        ));
    }
}

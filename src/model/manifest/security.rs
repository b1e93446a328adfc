//! Security contexts: the pod's (`fsGroupChangePolicy`, seccomp and
//! AppArmor profiles, sysctl names) and a container's profiles, as the API
//! server validates them.

use k8s_openapi::api::core::v1::PodSecurityContext;

use crate::model::Container;
use crate::model::field::{FieldError, err};

/// The pod's `securityContext`.
pub(super) fn validate_pod_security_context(sc: &PodSecurityContext) -> Result<(), FieldError> {
    if let Some(p) = sc.fs_group_change_policy.as_deref()
        && !matches!(p, "OnRootMismatch" | "Always")
    {
        return err(
            "spec.securityContext.fsGroupChangePolicy",
            format!("Unsupported value: {p:?}: supported values: \"OnRootMismatch\", \"Always\""),
        );
    }
    let seccomp = sc.seccomp_profile.as_ref().map(|p| (&p.type_, &p.localhost_profile));
    validate_profile("spec.securityContext.seccompProfile", seccomp)?;
    let apparmor = sc.app_armor_profile.as_ref().map(|p| (&p.type_, &p.localhost_profile));
    validate_profile("spec.securityContext.appArmorProfile", apparmor)?;
    for (i, s) in sc.sysctls.iter().flatten().enumerate() {
        let name = crate::model::sysctl::normalize(&s.name);
        let ok = !name.is_empty()
            && name.len() <= 253
            && name
                .split(['.', '/'])
                .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b)));
        if !ok {
            return err(
                format!("spec.securityContext.sysctls[{i}].name"),
                format!("{:?} must have at most 253 characters and match the sysctl name format", s.name),
            );
        }
    }
    Ok(())
}

/// A container's seccomp and AppArmor profiles (`f` is the container's
/// field).
pub(super) fn validate_container_profiles(f: &str, c: &Container) -> Result<(), FieldError> {
    if let Some(sc) = &c.security_context {
        validate_profile(
            &format!("{f}.securityContext.seccompProfile"),
            sc.seccomp_profile.as_ref().map(|p| (&p.type_, &p.localhost_profile)),
        )?;
        validate_profile(
            &format!("{f}.securityContext.appArmorProfile"),
            sc.app_armor_profile.as_ref().map(|p| (&p.type_, &p.localhost_profile)),
        )?;
    }
    Ok(())
}

/// A seccomp or AppArmor profile `(type, localhostProfile)` as the API
/// server validates it: a known type, `localhostProfile` set exactly for
/// `Localhost`, a relative path without `..`.
fn validate_profile(f: &str, p: Option<(&String, &Option<String>)>) -> Result<(), FieldError> {
    let Some((kind, local)) = p else { return Ok(()) };
    let what = if f.ends_with("appArmorProfile") { "AppArmor" } else { "seccomp" };
    if !matches!(kind.as_str(), "RuntimeDefault" | "Unconfined" | "Localhost") {
        return err(
            format!("{f}.type"),
            format!("Unsupported value: {kind:?}: supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\""),
        );
    }
    match (kind.as_str(), local.as_deref()) {
        ("Localhost", None | Some("")) => {
            err(format!("{f}.localhostProfile"), format!("Required value: must be set when {what} type is Localhost"))
        }
        ("Localhost", Some(l)) if l.starts_with('/') || l.split('/').any(|c| c == "..") => {
            err(format!("{f}.localhostProfile"), format!("{l:?} must be a relative path without '..'"))
        }
        (k, Some(l)) if k != "Localhost" && !l.is_empty() => {
            err(format!("{f}.localhostProfile"), format!("can only be set when {what} type is Localhost"))
        }
        _ => Ok(()),
    }
}

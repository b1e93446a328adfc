//! Security contexts: the pod's (`fsGroupChangePolicy`, seccomp and
//! AppArmor profiles, sysctl names), a container's profiles and the AppArmor
//! annotations, as the API server validates them.

use k8s_openapi::api::core::v1::PodSecurityContext;

use crate::model::Container;
use crate::model::field::{FieldError, FieldErrors, err};

/// The pod's `securityContext`: each of its fields podwarden checks.
pub(super) fn validate_pod_security_context(sc: &PodSecurityContext, errs: &mut FieldErrors) {
    if let Some(p) = sc.fs_group_change_policy.as_deref()
        && !matches!(p, "OnRootMismatch" | "Always")
    {
        errs.push(FieldError::new(
            "spec.securityContext.fsGroupChangePolicy",
            format!("Unsupported value: {p:?}: supported values: \"OnRootMismatch\", \"Always\""),
        ));
    }
    let seccomp = sc.seccomp_profile.as_ref().map(|p| (&p.type_, &p.localhost_profile));
    errs.check(validate_profile("spec.securityContext.seccompProfile", seccomp));
    if let Some(p) = &sc.app_armor_profile {
        errs.check(validate_apparmor("spec.securityContext.appArmorProfile", p));
    }
    for (i, s) in sc.sysctls.iter().flatten().enumerate() {
        let name = crate::model::sysctl::normalize(&s.name);
        let ok = !name.is_empty()
            && name.len() <= 253
            && name
                .split(['.', '/'])
                .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b)));
        if !ok {
            errs.push(FieldError::new(
                format!("spec.securityContext.sysctls[{i}].name"),
                format!("{:?} must have at most 253 characters and match the sysctl name format", s.name),
            ));
        }
    }
}

/// A container's seccomp and AppArmor profiles (`f` is the container's
/// field).
pub(super) fn validate_container_profiles(f: &str, c: &Container, errs: &mut FieldErrors) {
    if let Some(sc) = &c.security_context {
        errs.check(validate_profile(
            &format!("{f}.securityContext.seccompProfile"),
            sc.seccomp_profile.as_ref().map(|p| (&p.type_, &p.localhost_profile)),
        ));
        if let Some(p) = &sc.app_armor_profile {
            errs.check(validate_apparmor(&format!("{f}.securityContext.appArmorProfile"), p));
        }
    }
}

/// The annotation form of a container's AppArmor profile, before the
/// container's name.
pub const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// The longest AppArmor profile name the API server takes (`PATH_MAX - 1`).
const APPARMOR_NAME_MAX: usize = 4095;

/// An `appArmorProfile` as the API server validates it: a known type,
/// `localhostProfile` set exactly for `Localhost`, not padded with
/// whitespace, at most 4095 bytes. It is a profile's name, not a path: a
/// name like `/usr/bin/foo` (a profile attached to a program) is fine.
fn validate_apparmor(f: &str, p: &k8s_openapi::api::core::v1::AppArmorProfile) -> Result<(), FieldError> {
    let kind = p.type_.as_str();
    let lf = format!("{f}.localhostProfile");
    match (kind, p.localhost_profile.as_deref()) {
        ("RuntimeDefault" | "Unconfined", None) => Ok(()),
        ("RuntimeDefault" | "Unconfined", Some(_)) => err(lf, "can only be set when AppArmor type is Localhost"),
        ("Localhost", None) => err(lf, "Required value: must be set when AppArmor type is Localhost"),
        ("Localhost", Some(l)) if l.trim() != l => err(lf, format!("{l:?} must not be padded with whitespace")),
        ("Localhost", Some("")) => err(lf, "Required value: must be set when AppArmor type is Localhost"),
        ("Localhost", Some(l)) if l.len() > APPARMOR_NAME_MAX => {
            err(lf, format!("Too long: may not be more than {APPARMOR_NAME_MAX} bytes"))
        }
        ("Localhost", Some(l)) if l.contains('\0') => err(lf, format!("{l:?} holds a NUL byte")),
        ("Localhost", Some(_)) => Ok(()),
        _ => err(
            format!("{f}.type"),
            format!("Unsupported value: {kind:?}: supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\""),
        ),
    }
}

/// The pod's AppArmor annotations
/// (`container.apparmor.security.beta.kubernetes.io/<container>`), as
/// the API server validates them on create: each names a container of the
/// pod, holds `runtime/default`, `unconfined` or `localhost/<name>`, and
/// agrees with the container's `appArmorProfile` (or the pod's) when one
/// is set.
pub(super) fn validate_apparmor_annotations(pod: &crate::model::Pod, errs: &mut FieldErrors) {
    for (key, value) in pod.metadata.annotations.iter().flatten() {
        let Some(name) = key.strip_prefix(APPARMOR_ANNOTATION_PREFIX) else { continue };
        errs.check(apparmor_annotation(pod, key, name, value));
    }
}

/// One AppArmor annotation, of container `name`.
fn apparmor_annotation(pod: &crate::model::Pod, key: &str, name: &str, value: &str) -> Result<(), FieldError> {
    let spec = crate::model::spec(pod);
    let pod_profile = spec.and_then(|s| s.security_context.as_ref()).and_then(|s| s.app_armor_profile.as_ref());
    let f = format!("metadata.annotations[{key}]");
    let Some(c) = crate::model::all_containers(pod).find(|c| c.name == name) else {
        return err(f, format!("{name:?}: container not found"));
    };
    let local = value.strip_prefix("localhost/");
    if !matches!(value, "runtime/default" | "unconfined") && local.is_none_or(str::is_empty) {
        return err(
            f,
            format!("invalid AppArmor profile name: {value:?} (runtime/default, unconfined or localhost/<profile>)"),
        );
    }
    let field = c.security_context.as_ref().and_then(|s| s.app_armor_profile.as_ref()).or(pod_profile);
    let Some(p) = field else { return Ok(()) };
    let same_type = match p.type_.as_str() {
        "RuntimeDefault" => value == "runtime/default",
        "Unconfined" => value == "unconfined",
        _ => local.is_some(),
    };
    if !same_type {
        return err(f, format!("{value:?}: apparmor type in annotation and field must match"));
    }
    if local.is_some() && local != p.localhost_profile.as_deref() {
        return err(f, format!("{value:?}: apparmor profile in annotation and field must match"));
    }
    Ok(())
}

/// A seccomp profile `(type, localhostProfile)` as the API server
/// validates it: a known type, `localhostProfile` set exactly for
/// `Localhost`, a relative path without `..`.
fn validate_profile(f: &str, p: Option<(&String, &Option<String>)>) -> Result<(), FieldError> {
    let Some((kind, local)) = p else { return Ok(()) };
    let what = "seccomp";
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

#[cfg(test)]
mod tests {
    use crate::model::field::FieldError;
    use crate::model::manifest::{ManifestError, parse};

    const POD: &str =
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: busybox\n";

    fn with(annotations: &str, container_sc: &str) -> String {
        let mut m = POD.to_string();
        if !annotations.is_empty() {
            m = m.replace("  name: p\n", &format!("  name: p\n  annotations:\n{annotations}"));
        }
        if !container_sc.is_empty() {
            m.push_str(&format!("    securityContext:\n      appArmorProfile: {container_sc}\n"));
        }
        m
    }

    fn error(m: &str) -> Option<(String, String)> {
        match parse("m.yaml", m.as_bytes(), "n") {
            Ok(_) => None,
            Err(ManifestError::Invalid { errors, .. }) => {
                let [FieldError { field, reason }] = errors.iter().as_slice() else { panic!("{errors:?}") };
                Some((field.clone(), reason.clone()))
            }
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn apparmor_localhost_names_are_names_not_paths() {
        for ok in ["podwarden-test", "/usr/bin/foo", "a/../b", "cri-containerd.apparmor.d"] {
            assert_eq!(error(&with("", &format!("{{type: Localhost, localhostProfile: {ok:?}}}"))), None, "{ok}");
        }
        let f = "spec.containers[0].securityContext.appArmorProfile.localhostProfile";
        for (bad, reason) in [
            ("{type: Localhost}", "Required value: must be set when AppArmor type is Localhost"),
            ("{type: Localhost, localhostProfile: ''}", "Required value: must be set when AppArmor type is Localhost"),
            ("{type: Localhost, localhostProfile: ' x'}", "\" x\" must not be padded with whitespace"),
            ("{type: RuntimeDefault, localhostProfile: x}", "can only be set when AppArmor type is Localhost"),
        ] {
            assert_eq!(error(&with("", bad)), Some((f.to_string(), reason.to_string())), "{bad}");
        }
        let long = "x".repeat(4096);
        let e = error(&with("", &format!("{{type: Localhost, localhostProfile: {long}}}"))).unwrap();
        assert_eq!(e, (f.to_string(), "Too long: may not be more than 4095 bytes".to_string()));
        // the pod's field follows the same rules
        let m = POD.replace("spec:\n", "spec:\n  securityContext:\n    appArmorProfile: {type: Localhost}\n");
        assert_eq!(error(&m).unwrap().0, "spec.securityContext.appArmorProfile.localhostProfile");
    }

    #[test]
    fn apparmor_annotations_as_the_api_server_checks_them() {
        let key = "container.apparmor.security.beta.kubernetes.io";
        for ok in ["runtime/default", "unconfined", "localhost/podwarden-test"] {
            assert_eq!(error(&with(&format!("    {key}/c: {ok}\n"), "")), None, "{ok}");
        }
        let f = format!("metadata.annotations[{key}/c]");
        for bad in ["localhost/", "podwarden-test", "runtime/strict", ""] {
            let (field, reason) = error(&with(&format!("    {key}/c: {bad:?}\n"), "")).unwrap();
            assert_eq!(field, f, "{bad}");
            assert!(reason.starts_with(&format!("invalid AppArmor profile name: {bad:?}")), "{reason}");
        }
        assert_eq!(
            error(&with(&format!("    {key}/other: runtime/default\n"), "")),
            Some((format!("metadata.annotations[{key}/other]"), "\"other\": container not found".to_string()))
        );
        // annotation and field together must agree
        let both = |a: &str, field: &str| error(&with(&format!("    {key}/c: {a}\n"), field));
        assert_eq!(both("runtime/default", "{type: RuntimeDefault}"), None);
        assert_eq!(both("localhost/x", "{type: Localhost, localhostProfile: x}"), None);
        assert_eq!(
            both("unconfined", "{type: RuntimeDefault}"),
            Some((f.clone(), "\"unconfined\": apparmor type in annotation and field must match".to_string()))
        );
        assert_eq!(
            both("localhost/y", "{type: Localhost, localhostProfile: x}"),
            Some((f.clone(), "\"localhost/y\": apparmor profile in annotation and field must match".to_string()))
        );
        // the pod's field stands for a container without its own
        let m = with(&format!("    {key}/c: unconfined\n"), "")
            .replace("spec:\n", "spec:\n  securityContext:\n    appArmorProfile: {type: RuntimeDefault}\n");
        assert_eq!(error(&m).unwrap().0, f);
    }

    #[test]
    fn hugepages_need_cpu_or_memory() {
        let m = format!("{POD}    resources:\n      limits: {{hugepages-2Mi: 4Mi}}\n");
        assert_eq!(
            error(&m),
            Some(("spec.containers[0].resources".into(), "Forbidden: HugePages require cpu or memory".into()))
        );
        assert_eq!(error(&format!("{POD}    resources:\n      limits: {{hugepages-2Mi: 4Mi, cpu: 100m}}\n")), None);
    }

    #[test]
    fn hugepages_empty_dir_media() {
        let vol = |medium: &str| format!("{POD}  volumes:\n  - name: v\n    emptyDir: {{{medium}}}\n");
        for ok in ["medium: HugePages", "medium: HugePages-2Mi", "medium: HugePages-1Gi", "medium: Memory"] {
            assert_eq!(error(&vol(ok)), None, "{ok}");
        }
        let e = error(&vol("medium: HugePages-big")).unwrap();
        assert_eq!(e.0, "spec.volumes[0].emptyDir.medium");
        assert!(e.1.contains("the page size after HugePages- must be a positive quantity"), "{}", e.1);
        let e = error(&vol("medium: Disk")).unwrap();
        assert_eq!(
            e,
            (
                "spec.volumes[0].emptyDir.medium".into(),
                "\"Disk\" is not supported by podwarden (\"\", Memory, HugePages or HugePages-<size>)".into()
            )
        );
        let e = error(&vol("medium: HugePages, sizeLimit: 4Mi")).unwrap();
        assert_eq!(e.0, "spec.volumes[0].emptyDir.sizeLimit");
        assert_eq!(crate::model::manifest::hugepages_medium_size("HugePages"), Some(0));
        assert_eq!(crate::model::manifest::hugepages_medium_size("HugePages-2Mi"), Some(2 << 20));
        assert_eq!(crate::model::manifest::hugepages_medium_size("HugePages-0"), None);
        assert_eq!(crate::model::manifest::hugepages_medium_size("Memory"), None);
    }
}

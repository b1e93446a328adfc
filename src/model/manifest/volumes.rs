//! A pod's volumes, as the API server validates them: one source each,
//! the sources podwarden implements (emptyDir, hostPath, configMap, secret,
//! downwardAPI, projected), modes, and the files a volume podwarden writes
//! may hold (relative paths, no `..`, no duplicates).

use std::collections::HashSet;

use crate::model::Container;
use crate::model::field::{FieldError, FieldErrors, err};
use crate::model::names::{NAME_MAX, check_key, has_dot_dot, is_dns1123_label, is_dns1123_subdomain};

/// A volume, as the API server's `ValidateVolumes` checks it: its source
/// (exactly one, of the kinds podwarden implements, with values podwarden
/// implements), then its name. Two sources are one error: which to check
/// is unknown.
pub(super) fn validate_volume(
    i: usize,
    v: &k8s_openapi::api::core::v1::Volume,
    containers: &[&Container],
    errs: &mut FieldErrors,
) {
    let f = format!("spec.volumes[{i}]");
    let sources: Vec<&str> = [
        ("emptyDir", v.empty_dir.is_some()),
        ("hostPath", v.host_path.is_some()),
        ("configMap", v.config_map.is_some()),
        ("secret", v.secret.is_some()),
        ("downwardAPI", v.downward_api.is_some()),
        ("projected", v.projected.is_some()),
    ]
    .into_iter()
    .filter_map(|(n, set)| set.then_some(n))
    .collect();
    if sources.len() > 1 {
        errs.push(FieldError::new(&f, format!("more than one volume source ({})", sources.join(", "))));
    } else if v.config_map.is_some() || v.secret.is_some() || v.downward_api.is_some() || v.projected.is_some() {
        validate_projection(&f, v, containers, errs);
    } else if let Some(ed) = &v.empty_dir {
        validate_empty_dir(&f, ed, errs);
    } else if let Some(hp) = &v.host_path {
        validate_host_path(&f, hp, errs);
    } else {
        errs.push(FieldError::new(
            &f,
            "no volume source; podwarden supports emptyDir, hostPath, configMap, secret, downwardAPI and projected",
        ));
    }
    if !is_dns1123_label(&v.name) {
        errs.push(FieldError::new(format!("{f}.name"), format!("{:?} is not a valid DNS-1123 label", v.name)));
    }
}

/// An emptyDir: a medium podwarden implements, a size limit that is a
/// quantity (none on huge pages).
fn validate_empty_dir(f: &str, ed: &k8s_openapi::api::core::v1::EmptyDirVolumeSource, errs: &mut FieldErrors) {
    let medium = ed.medium.as_deref().unwrap_or("");
    let huge = medium == "HugePages" || medium.starts_with("HugePages-");
    if huge && hugepages_medium_size(medium).is_none() {
        errs.push(FieldError::new(
            format!("{f}.emptyDir.medium"),
            format!("{medium:?}: the page size after HugePages- must be a positive quantity (HugePages-2Mi)"),
        ));
    }
    if !huge && !matches!(medium, "" | "Memory") {
        errs.push(FieldError::new(
            format!("{f}.emptyDir.medium"),
            format!("{medium:?} is not supported by podwarden (\"\", Memory, HugePages or HugePages-<size>)"),
        ));
    }
    if huge && ed.size_limit.is_some() {
        // the kubelet mounts hugetlbfs without a size: the containers'
        // hugepages limits bound it, not this
        errs.push(FieldError::new(
            format!("{f}.emptyDir.sizeLimit"),
            format!("not supported by podwarden with medium {medium} (the hugepages-<size> limits bound it)"),
        ));
    } else if let Some(q) = &ed.size_limit
        && crate::model::quantity::bytes(&q.0).is_err()
    {
        // Memory: it sizes the tmpfs; on disk, usage is measured and
        // reported against it (housekeeping)
        errs.push(FieldError::new(format!("{f}.emptyDir.sizeLimit"), format!("{:?} is not a quantity", q.0)));
    }
}

/// A hostPath: an absolute path without `..` or NUL, a known type.
fn validate_host_path(f: &str, hp: &k8s_openapi::api::core::v1::HostPathVolumeSource, errs: &mut FieldErrors) {
    let p = hp.path.as_str();
    let pf = format!("{f}.hostPath.path");
    if p.contains('\0') {
        errs.push(FieldError::new(pf, format!("{p:?} holds a NUL byte")));
    } else if !p.starts_with('/') {
        errs.push(FieldError::new(pf, format!("{p:?} must be an absolute path")));
    } else if has_dot_dot(p) {
        errs.push(FieldError::new(pf, format!("{p:?} must not contain '..'")));
    }
    let kind = hp.type_.as_deref().unwrap_or("");
    if !matches!(
        kind,
        "" | "DirectoryOrCreate" | "Directory" | "FileOrCreate" | "File" | "Socket" | "CharDevice" | "BlockDevice"
    ) {
        errs.push(FieldError::new(
            format!("{f}.hostPath.type"),
            format!(
                "{kind:?} is not one of DirectoryOrCreate, Directory, FileOrCreate, File, Socket, CharDevice, BlockDevice"
            ),
        ));
    }
}

/// A mode, as the API server checks it.
fn check_mode(field: String, m: Option<i32>) -> Result<(), FieldError> {
    match m {
        Some(m) if !(0..=0o777).contains(&m) => {
            err(field, format!("{m}: must be a number between 0 and 0777 (octal), both inclusive"))
        }
        _ => Ok(()),
    }
}

/// A file path in a volume podwarden writes (the atomic writer's rules).
fn check_item_path(field: String, p: &str, paths: &mut HashSet<String>) -> Result<(), FieldError> {
    if p.is_empty() {
        return err(field, "missing; an item needs a path");
    }
    if p.starts_with('/') {
        return err(field, format!("{p:?} must be a relative path"));
    }
    if p.contains('\0') {
        return err(field, format!("{p:?} holds a NUL byte"));
    }
    let parts: Vec<&str> = p.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    if parts.contains(&"..") {
        return err(field, format!("{p:?} must not contain '..'"));
    }
    if parts.first().is_some_and(|c| c.starts_with("..")) {
        return err(field, format!("{p:?} must not start with '..'"));
    }
    if parts.is_empty() {
        return err(field, format!("{p:?} names no file"));
    }
    if parts.iter().any(|c| c.len() > NAME_MAX) || p.len() > 4096 {
        return err(field, format!("{p:?} is too long (4096 bytes, {NAME_MAX} per file name)"));
    }
    if !paths.insert(parts.join("/")) {
        return err(field, format!("{p:?}: conflicting duplicate paths"));
    }
    Ok(())
}

/// `items` of a configMap or secret volume (or projected source).
fn check_key_items(
    f: &str,
    items: &Option<Vec<k8s_openapi::api::core::v1::KeyToPath>>,
    paths: &mut HashSet<String>,
    errs: &mut FieldErrors,
) {
    for (j, it) in items.iter().flatten().enumerate() {
        let itf = format!("{f}.items[{j}]");
        if let Err(e) = check_key(&it.key) {
            errs.push(FieldError::new(format!("{itf}.key"), e.to_string()));
        }
        errs.check(check_item_path(format!("{itf}.path"), &it.path, paths));
        errs.check(check_mode(format!("{itf}.mode"), it.mode));
    }
}

/// `items` of a downwardAPI volume (or projected source): the paths a
/// volume may show (whole label and annotation maps too), resources of a
/// named container.
fn check_downward_items(
    f: &str,
    items: &Option<Vec<k8s_openapi::api::core::v1::DownwardAPIVolumeFile>>,
    containers: &[&Container],
    paths: &mut HashSet<String>,
    errs: &mut FieldErrors,
) {
    use crate::model::downward::{VOLUME_FIELD_PATHS, subscript};
    for (j, it) in items.iter().flatten().enumerate() {
        let itf = format!("{f}.items[{j}]");
        errs.check(check_item_path(format!("{itf}.path"), &it.path, paths));
        errs.check(check_mode(format!("{itf}.mode"), it.mode));
        match (&it.field_ref, &it.resource_field_ref) {
            (Some(_), Some(_)) => {
                errs.push(FieldError::new(itf, "fieldRef and resourceFieldRef can not be specified simultaneously"))
            }
            (None, None) => errs.push(FieldError::new(itf, "must specify one of: `fieldRef` or `resourceFieldRef`")),
            (Some(fr), None) => {
                let p = fr.field_path.as_str();
                if !(VOLUME_FIELD_PATHS.contains(&p) || subscript(p).is_some_and(|(_, k)| !k.is_empty())) {
                    errs.push(FieldError::new(
                        format!("{itf}.fieldRef.fieldPath"),
                        format!("{p:?} is not one of {}", VOLUME_FIELD_PATHS.join(", ")),
                    ));
                }
            }
            (None, Some(rf)) => resource_item(&format!("{itf}.resourceFieldRef"), rf, containers, errs),
        }
    }
}

/// A downwardAPI item's `resourceFieldRef`: a named container of the pod,
/// a resource podwarden accounts for, a divisor the resource takes.
fn resource_item(
    rff: &str,
    rf: &k8s_openapi::api::core::v1::ResourceFieldSelector,
    containers: &[&Container],
    errs: &mut FieldErrors,
) {
    use crate::model::downward::{RESOURCES, divisor_allowed};
    let name = rf.container_name.as_deref().unwrap_or("");
    if name.is_empty() {
        errs.push(FieldError::new(format!("{rff}.containerName"), "must specify container name"));
    } else if !containers.iter().any(|c| c.name == name) {
        errs.push(FieldError::new(format!("{rff}.containerName"), format!("no container named {name:?} in this pod")));
    }
    if !RESOURCES.contains(&rf.resource.as_str()) {
        errs.push(FieldError::new(
            format!("{rff}.resource"),
            format!("{:?} is not one of {}", rf.resource, RESOURCES.join(", ")),
        ));
    } else if let Some(d) = &rf.divisor
        && !divisor_allowed(&rf.resource, &d.0)
    {
        errs.push(FieldError::new(format!("{rff}.divisor"), format!("{:?} is not an allowed divisor", d.0)));
    }
}

/// The name of the object a volume shows: set, a DNS-1123 subdomain.
fn object_name(field: String, name: &str) -> Result<(), FieldError> {
    if name.is_empty() {
        return err(field, "missing; name the object");
    }
    if !is_dns1123_subdomain(name) {
        return err(field, format!("{name:?} is not a valid DNS-1123 subdomain"));
    }
    Ok(())
}

/// configMap, secret, downwardAPI and projected volumes: the files they
/// show at paths unique in the volume.
fn validate_projection(
    f: &str,
    v: &k8s_openapi::api::core::v1::Volume,
    containers: &[&Container],
    errs: &mut FieldErrors,
) {
    let mut paths = HashSet::new();
    if let Some(cm) = &v.config_map {
        let cf = format!("{f}.configMap");
        errs.check(object_name(format!("{cf}.name"), &cm.name));
        errs.check(check_mode(format!("{cf}.defaultMode"), cm.default_mode));
        check_key_items(&cf, &cm.items, &mut paths, errs);
    }
    if let Some(sec) = &v.secret {
        let sf = format!("{f}.secret");
        errs.check(object_name(format!("{sf}.secretName"), sec.secret_name.as_deref().unwrap_or("")));
        errs.check(check_mode(format!("{sf}.defaultMode"), sec.default_mode));
        check_key_items(&sf, &sec.items, &mut paths, errs);
    }
    if let Some(d) = &v.downward_api {
        let df = format!("{f}.downwardAPI");
        errs.check(check_mode(format!("{df}.defaultMode"), d.default_mode));
        check_downward_items(&df, &d.items, containers, &mut paths, errs);
    }
    if let Some(p) = &v.projected {
        let pf = format!("{f}.projected");
        errs.check(check_mode(format!("{pf}.defaultMode"), p.default_mode));
        for (j, src) in p.sources.iter().flatten().enumerate() {
            projected_source(&format!("{pf}.sources[{j}]"), src, containers, &mut paths, errs);
        }
    }
}

/// One source of a projected volume: exactly one kind, and its files.
fn projected_source(
    sf: &str,
    src: &k8s_openapi::api::core::v1::VolumeProjection,
    containers: &[&Container],
    paths: &mut HashSet<String>,
    errs: &mut FieldErrors,
) {
    // a serviceAccountToken source is possible only in a pod from the API
    // (the manifest check refuses it elsewhere)
    let set = [
        src.config_map.is_some(),
        src.secret.is_some(),
        src.downward_api.is_some(),
        src.service_account_token.is_some(),
    ];
    match set.iter().filter(|b| **b).count() {
        0 => return errs.push(FieldError::new(sf, "must specify one of: `configMap`, `secret` or `downwardAPI`")),
        1 => {}
        _ => return errs.push(FieldError::new(sf, "may not specify more than 1 volume type per source")),
    }
    if let Some(t) = &src.service_account_token {
        let tf = format!("{sf}.serviceAccountToken");
        errs.check(check_item_path(format!("{tf}.path"), &t.path, paths));
        if t.expiration_seconds.is_some_and(|s| s < 600) {
            errs.push(FieldError::new(
                format!("{tf}.expirationSeconds"),
                "may not specify a duration less than 10 minutes",
            ));
        }
    }
    if let Some(cm) = &src.config_map {
        errs.check(object_name(format!("{sf}.configMap.name"), &cm.name));
        check_key_items(&format!("{sf}.configMap"), &cm.items, paths, errs);
    }
    if let Some(s) = &src.secret {
        errs.check(object_name(format!("{sf}.secret.name"), &s.name));
        check_key_items(&format!("{sf}.secret"), &s.items, paths, errs);
    }
    if let Some(d) = &src.downward_api {
        check_downward_items(&format!("{sf}.downwardAPI"), &d.items, containers, paths, errs);
    }
}

/// The page size (bytes) of an emptyDir medium `HugePages-<size>`;
/// `Some(0)` for `HugePages` (the size the pod's containers ask for);
/// `None` for another medium or a size that is not a positive quantity.
pub fn hugepages_medium_size(medium: &str) -> Option<u64> {
    if medium == "HugePages" {
        return Some(0);
    }
    let size = medium.strip_prefix("HugePages-")?;
    crate::model::quantity::bytes(size).ok().and_then(|b| u64::try_from(b).ok()).filter(|b| *b > 0)
}

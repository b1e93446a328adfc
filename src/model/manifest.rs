//! Reading and validating static pod manifests.
//!
//! A manifest is one v1 Pod in YAML or JSON. Every error names the file and,
//! where there is one, the field, so an operator can fix the input.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde_json::Value;
use thiserror::Error;

use super::field::{FieldError, err};
use super::names::{NAME_MAX, check_key, has_dot_dot, is_dns1123_label, is_dns1123_subdomain};
use super::{
    CONFIG_FILE_ANNOTATION, CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION, Pod, bounded_yaml, fields, fnv128_hex,
};

/// Largest manifest podwarden reads.
pub const MAX_MANIFEST_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Error)]
pub enum ManifestError {
    #[error("{path}: cannot read manifest: {source}")]
    Unreadable {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: is a directory, not a manifest file")]
    Directory { path: String },
    #[error("{path}: dangling symlink (its target does not exist)")]
    DanglingSymlink { path: String },
    #[error("{path}: not a regular file")]
    NotRegular { path: String },
    #[error("{path}: manifest is {size} bytes, over the limit of {MAX_MANIFEST_BYTES} bytes")]
    TooLarge { path: String, size: u64 },
    #[error("{path}: not valid UTF-8 (first bad byte at offset {offset})")]
    NotUtf8 { path: String, offset: usize },
    #[error("{path}: holds {count} Pods; a manifest holds at most one Pod (and any ConfigMaps and Secrets)")]
    MultiDocument { path: String, count: usize },
    #[error("{path}: empty manifest; expected one Pod")]
    Empty { path: String },
    #[error("{path}: holds no Pod (only ConfigMaps and Secrets); expected one Pod")]
    NoPod { path: String },
    #[error("{path}: cannot parse {format}: {message}")]
    Syntax { path: String, format: &'static str, message: String },
    /// A field refused: `<path>: field <field>: <reason>`.
    #[error("{path}: {error}")]
    Invalid { path: String, error: FieldError },
}

impl ManifestError {
    pub fn path(&self) -> &str {
        match self {
            ManifestError::Unreadable { path, .. }
            | ManifestError::Directory { path }
            | ManifestError::DanglingSymlink { path }
            | ManifestError::NotRegular { path }
            | ManifestError::TooLarge { path, .. }
            | ManifestError::NotUtf8 { path, .. }
            | ManifestError::MultiDocument { path, .. }
            | ManifestError::Empty { path }
            | ManifestError::NoPod { path }
            | ManifestError::Syntax { path, .. }
            | ManifestError::Invalid { path, .. } => path,
        }
    }
}

/// A valid manifest's pod and the warnings about it (fields that are not
/// part of a v1 Pod, by path: `unknown field "spec.contaners"`).
#[derive(Debug, Clone)]
pub struct Parsed {
    pub pod: Pod,
    pub warnings: Vec<String>,
}

impl std::ops::Deref for Parsed {
    type Target = Pod;
    fn deref(&self) -> &Pod {
        &self.pod
    }
}

/// Read one manifest file: checks the file type and size before reading.
/// The file is opened non-blocking and only if it is a regular file inside
/// its directory (a symlink is followed only while it stays there): a
/// FIFO, a device or a link to `/dev/zero` or `/etc/shadow` is an error at
/// once, never a hang or a read of something else.
pub fn read_file(path: &Path, node_name: &str) -> Result<Parsed, ManifestError> {
    read_file_all(path, node_name)?.pod.ok_or_else(|| ManifestError::NoPod { path: path.display().to_string() })
}

/// [`read_file`], for a file that may hold no Pod: everything in it.
pub fn read_file_all(path: &Path, node_name: &str) -> Result<FileContent, ManifestError> {
    use crate::base::fsutil::{FileError, Links};
    let p = path.display().to_string();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().map(Path::new).unwrap_or(path);
    let buf =
        crate::base::fsutil::read_regular_in(dir, name, Links::StayInside, MAX_MANIFEST_BYTES).map_err(
            |e| match e {
                FileError::Directory { .. } => ManifestError::Directory { path: p.clone() },
                FileError::Dangling { .. } => ManifestError::DanglingSymlink { path: p.clone() },
                FileError::NotRegular { .. } => ManifestError::NotRegular { path: p.clone() },
                FileError::TooLarge { size, .. } => ManifestError::TooLarge { path: p.clone(), size },
                FileError::Io { source, .. } => ManifestError::Unreadable { path: p.clone(), source },
                FileError::NotFound { .. } => ManifestError::Unreadable {
                    path: p.clone(),
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
                },
                FileError::Outside { dir, .. } => ManifestError::Unreadable {
                    path: p.clone(),
                    source: std::io::Error::other(format!("a symlink leading outside {dir}; not followed")),
                },
                FileError::Symlink { path: link } => ManifestError::Unreadable {
                    path: p.clone(),
                    source: std::io::Error::other(format!("{link} was replaced by a symlink while being read")),
                },
            },
        )?;
    parse_all(&p, &buf, node_name)
}

/// The path under which the agent's file source reads `file`, which is part
/// of the pod's derived UID: `staticPodPath` joined with the file name when
/// the file is in that directory (however it is named here: relative, via
/// a symlink), else the file's absolute path. Symlinks are not resolved,
/// as the source does not resolve them.
pub fn source_path(file: &Path, static_pod_path: &Path) -> std::path::PathBuf {
    let abs = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    let same_dir = |a: &Path, b: &Path| {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
            _ => false,
        }
    };
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) if same_dir(dir, static_pod_path) => static_pod_path.join(name),
        _ => abs,
    }
}

fn is_json(path: &str) -> bool {
    path.ends_with(".json")
}

/// Parse and validate manifest bytes. `path` names the input in errors and
/// takes part in the derived UID; `.json` selects JSON, anything else YAML.
/// The input must hold a Pod (and may hold ConfigMaps and Secrets too).
pub fn parse(path: &str, bytes: &[u8], node_name: &str) -> Result<Pod, ManifestError> {
    parse_full(path, bytes, node_name).map(|p| p.pod)
}

/// [`parse`], with the warnings about the manifest.
pub fn parse_full(path: &str, bytes: &[u8], node_name: &str) -> Result<Parsed, ManifestError> {
    let content = parse_all(path, bytes, node_name)?;
    content.pod.ok_or_else(|| ManifestError::NoPod { path: path.to_string() })
}

/// What one manifest file holds: at most one Pod, any number of ConfigMaps
/// and Secrets (YAML documents separated by `---`, as `podman kube play`
/// reads them; a JSON file holds one object).
#[derive(Debug, Clone, Default)]
pub struct FileContent {
    pub pod: Option<Parsed>,
    pub objects: Vec<super::objects::LocalObject>,
    /// Warnings about the objects (the pod's are in `pod`).
    pub warnings: Vec<String>,
}

/// Parse and validate every document of a manifest file.
///
/// Bounded whatever the input: at most [`MAX_MANIFEST_BYTES`], parsed
/// within [`yaml`]'s depth, node and byte budget (aliases counted expanded)
/// before any value is built.
pub fn parse_all(path: &str, bytes: &[u8], node_name: &str) -> Result<FileContent, ManifestError> {
    use super::objects::{self, Kind};
    let path_s = path.to_string();
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge { path: path_s, size: bytes.len() as u64 });
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|e| ManifestError::NotUtf8 { path: path_s.clone(), offset: e.valid_up_to() })?;
    let docs = to_values(path, text)?;
    let many = docs.len() > 1;
    let pods = docs.iter().filter(|d| d.get("kind").and_then(Value::as_str) == Some("Pod")).count();
    if pods > 1 {
        return Err(ManifestError::MultiDocument { path: path_s, count: pods });
    }
    let mut content = FileContent::default();
    let mut seen = HashSet::new();
    for (i, doc) in docs.into_iter().enumerate() {
        // in a file of several documents, a field is named with its
        // document: `documents[1].data["a b"]`
        let invalid = |error: FieldError| ManifestError::Invalid {
            path: path_s.clone(),
            error: if many { error.under(&format!("documents[{i}]")) } else { error },
        };
        let kind = match doc.get("kind").and_then(Value::as_str) {
            Some("ConfigMap") => Kind::ConfigMap,
            Some("Secret") => Kind::Secret,
            Some("Pod") => {
                let (pod, warnings) = to_pod(path, doc).map_err(|e| match e {
                    ManifestError::Invalid { error, .. } => invalid(error),
                    other => other,
                })?;
                let mut pod = finish(path, pod, node_name)?;
                validate(&pod).map_err(invalid)?;
                pod.status = None;
                content.pod =
                    Some(Parsed { pod, warnings: warnings.into_iter().map(|w| at_warning(many, i, w)).collect() });
                continue;
            }
            Some(other) => {
                let why = format!("is {other:?}; a manifest holds a Pod, ConfigMaps and Secrets");
                return Err(invalid(FieldError::new("kind", why)));
            }
            None if !doc.is_object() => return Err(invalid(FieldError::new("(top level)", "expected a Pod object"))),
            None => return Err(invalid(FieldError::new("kind", "missing; expected \"Pod\""))),
        };
        let (obj, warnings) = objects::from_value(kind, path, doc).map_err(invalid)?;
        if !seen.insert(obj.key.clone()) {
            let why = format!("{} is defined twice in this file", obj.key);
            return Err(invalid(FieldError::new("metadata.name", why)));
        }
        content.warnings.extend(warnings.into_iter().map(|w| at_warning(many, i, w)));
        content.objects.push(obj);
    }
    Ok(content)
}

/// A warning about document `i` of a file of several documents.
fn at_warning(many: bool, i: usize, w: String) -> String {
    if many { format!("documents[{i}]: {w}") } else { w }
}

fn to_values(path: &str, text: &str) -> Result<Vec<Value>, ManifestError> {
    let syntax = |format, e: bounded_yaml::YamlError| ManifestError::Syntax {
        path: path.to_string(),
        format,
        message: e.to_string(),
    };
    let docs: Vec<Value> = if is_json(path) {
        bounded_yaml::parse_json_bounded(text).map_err(|e| syntax("JSON", e))?
    } else {
        let all = bounded_yaml::parse_bounded(text).map_err(|e| syntax("YAML", e))?;
        all.into_iter().filter(|v| !v.is_null()).collect()
    };
    if docs.is_empty() {
        return Err(ManifestError::Empty { path: path.to_string() });
    }
    Ok(docs)
}

fn to_pod(path: &str, mut value: Value) -> Result<(Pod, Vec<String>), ManifestError> {
    let invalid = |field: &str, message: String| ManifestError::Invalid {
        path: path.to_string(),
        error: FieldError::new(field, message),
    };
    let Value::Object(map) = &value else {
        return Err(invalid("(top level)", "expected a Pod object".into()));
    };
    match map.get("kind").and_then(Value::as_str) {
        Some("Pod") => {}
        Some(other) => return Err(invalid("kind", format!("is {other:?}; only a Pod is accepted"))),
        None => return Err(invalid("kind", "missing; expected \"Pod\"".into())),
    }
    match map.get("apiVersion").and_then(Value::as_str) {
        Some("v1") => {}
        Some(other) => return Err(invalid("apiVersion", format!("is {other:?}; expected \"v1\""))),
        None => return Err(invalid("apiVersion", "missing; expected \"v1\"".into())),
    }
    // every set field must be one podwarden implements; fields that are
    // not in the schema are warnings
    let warnings = fields::check(&value).map_err(|error| ManifestError::Invalid { path: path.to_string(), error })?;
    // status is output: ignored, whatever it holds
    if let Value::Object(map) = &mut value {
        map.remove("status");
    }
    if let Some(volumes) = value.pointer_mut("/spec/volumes") {
        octal_modes(volumes);
    }
    let pod = serde_path_to_error::deserialize::<_, Pod>(value).map_err(|e| {
        let field = e.path().to_string();
        invalid(&field, e.into_inner().to_string())
    })?;
    Ok((pod, warnings))
}

/// File modes written the YAML 1.1 way (`defaultMode: 0400`), which is how
/// kubectl reads manifests: podwarden's YAML is 1.2, where `0400` is not a
/// number, so a volume's `defaultMode` or `mode` made only of octal digits
/// after a leading 0 is read as the octal number it means.
fn octal_modes(v: &mut Value) {
    match v {
        Value::Array(items) => items.iter_mut().for_each(octal_modes),
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if let (true, Value::String(s)) = (k == "defaultMode" || k == "mode", &*v) {
                    if s.len() > 1
                        && s.starts_with('0')
                        && s.bytes().all(|b| (b'0'..=b'7').contains(&b))
                        && let Ok(n) = i64::from_str_radix(&s[1..], 8)
                    {
                        *v = Value::Number(n.into());
                    }
                } else {
                    octal_modes(v);
                }
            }
        }
        _ => {}
    }
}

/// Defaults and identity: namespace, source annotations, derived UID.
fn finish(path: &str, mut pod: Pod, node_name: &str) -> Result<Pod, ManifestError> {
    if pod.metadata.namespace.as_deref().unwrap_or("").is_empty() {
        pod.metadata.namespace = Some("default".into());
    }
    if pod.metadata.uid.as_deref().unwrap_or("").is_empty() {
        // The content that defines the pod: metadata and spec as parsed
        // (status is ignored), so formatting and comments do not matter.
        let mut canon = pod.clone();
        canon.status = None;
        let json = serde_json::to_vec(&canon).map_err(|e| ManifestError::Syntax {
            path: path.to_string(),
            format: "Pod",
            message: e.to_string(),
        })?;
        pod.metadata.uid = Some(fnv128_hex(&[b"host:", node_name.as_bytes(), b"file:", path.as_bytes(), &json]));
    }
    // bound to this node, as the kubelet's file source does (after the UID:
    // the node name is already part of it)
    if let Some(spec) = pod.spec.as_mut()
        && spec.node_name.as_deref().unwrap_or("").is_empty()
    {
        spec.node_name = Some(node_name.to_string());
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let ann = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.insert(CONFIG_SOURCE_ANNOTATION.into(), "file".into());
    ann.insert(CONFIG_HASH_ANNOTATION.into(), uid);
    ann.insert(CONFIG_FILE_ANNOTATION.into(), path.to_string());
    Ok(pod)
}

/// Validate a parsed pod. Returns the failing field and why.
pub fn validate(pod: &Pod) -> Result<(), FieldError> {
    let name = pod.metadata.name.as_deref().unwrap_or("");
    if name.is_empty() {
        return err("metadata.name", "missing; a pod needs a name");
    }
    if !is_dns1123_subdomain(name) {
        return err(
            "metadata.name",
            format!("{name:?} is not a valid DNS-1123 subdomain (lowercase letters, digits, '-', '.')"),
        );
    }
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    if !is_dns1123_label(ns) {
        return err("metadata.namespace", format!("{ns:?} is not a valid DNS-1123 label"));
    }
    if let Some(uid) = pod.metadata.uid.as_deref()
        && !uid.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
    {
        return err("metadata.uid", format!("{uid:?} may only hold letters, digits and '-'"));
    }
    // the pod's log directory is <podLogsDir>/<namespace>_<name>_<uid> (as
    // the kubelet names it); its pod directory <rootDir>/pods/<uid> is
    // shorter. Both must be file names the kernel takes.
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
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
    let Some(spec) = pod.spec.as_ref() else {
        return err("spec", "missing; a pod needs a spec");
    };
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
            let name = super::sysctl::normalize(&s.name);
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
    validate_dns(spec)?;
    // init containers (sidecars among them), then app containers: names
    // unique across both, as the API server checks
    let all: Vec<&super::Container> = spec.init_containers.iter().flatten().chain(&spec.containers).collect();
    let volumes: HashSet<&str> = spec.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        validate_volume(i, v, &all)?;
    }
    if volumes.len() != spec.volumes.as_ref().map_or(0, Vec::len) {
        return err("spec.volumes", "volume names must be unique");
    }
    let mut names = HashSet::new();
    let mut host_ports: HashSet<(i32, String, String)> = HashSet::new();
    let listed = (spec.init_containers.iter().flatten().enumerate())
        .map(|(i, c)| (format!("spec.initContainers[{i}]"), c, true))
        .chain(spec.containers.iter().enumerate().map(|(i, c)| (format!("spec.containers[{i}]"), c, false)));
    for (f, c, init) in listed {
        if init {
            validate_init_container(&f, c)?;
        }
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
        for (j, e) in c.env.iter().flatten().enumerate() {
            if e.name.is_empty() {
                return err(format!("{f}.env[{j}].name"), "missing; every environment variable needs a name");
            }
            if let Some(from) = &e.value_from {
                validate_value_from(&format!("{f}.env[{j}]"), e.value.as_deref(), from, &all)?;
            }
        }
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
        validate_resources(&f, c)?;
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
        if let Some(l) = &c.lifecycle {
            if let Some(h) = &l.post_start {
                validate_hook(&format!("{f}.lifecycle.postStart"), h, c)?;
            }
            if let Some(h) = &l.pre_stop {
                validate_hook(&format!("{f}.lifecycle.preStop"), h, c)?;
            }
        }
        for (name, probe, kind) in [
            ("livenessProbe", &c.liveness_probe, ProbeKind::Liveness),
            ("readinessProbe", &c.readiness_probe, ProbeKind::Readiness),
            ("startupProbe", &c.startup_probe, ProbeKind::Startup),
        ] {
            if let Some(p) = probe {
                validate_probe(&format!("{f}.{name}"), p, kind, c)?;
            }
        }
    }
    Ok(())
}

/// What the API server allows an init container: `restartPolicy` only
/// `Always` (a sidecar); lifecycle hooks and probes only on a sidecar (a
/// regular init container runs to completion before anything probes it).
fn validate_init_container(f: &str, c: &super::Container) -> Result<(), FieldError> {
    match c.restart_policy.as_deref() {
        None | Some("Always") => {}
        Some(p) => {
            return err(
                format!("{f}.restartPolicy"),
                format!("Unsupported value: {p:?}: supported values: \"Always\""),
            );
        }
    }
    if super::is_sidecar(c) {
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
    c: &super::Container,
) -> Result<(), FieldError> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match port {
        IntOrString::Int(n) if (1..=65535).contains(n) => Ok(()),
        IntOrString::Int(n) => err(field, format!("{n} must be between 1 and 65535, inclusive")),
        IntOrString::String(s) if c.ports.iter().flatten().any(|p| p.name.as_deref() == Some(s.as_str())) => Ok(()),
        IntOrString::String(s) => err(field, format!("{s:?} is not the name of one of this container's ports")),
    }
}

/// A probe as the API server validates it (one handler, non-negative
/// timings, `successThreshold` 1 for liveness and startup,
/// `terminationGracePeriodSeconds` positive and not on readiness), plus
/// what podwarden needs: a `host` is an address or a DNS name (it goes
/// into the request's `Host` header).
fn validate_probe(
    f: &str,
    p: &k8s_openapi::api::core::v1::Probe,
    kind: ProbeKind,
    c: &super::Container,
) -> Result<(), FieldError> {
    let handlers = [p.exec.is_some(), p.http_get.is_some(), p.tcp_socket.is_some(), p.grpc.is_some()];
    match handlers.iter().filter(|h| **h).count() {
        0 => return err(f.to_string(), "must specify a handler type (exec, httpGet, tcpSocket or grpc)"),
        1 => {}
        _ => return err(f.to_string(), "may not specify more than 1 handler type"),
    }
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
            return err(format!("{f}.{name}"), format!("{v} must be greater than or equal to 0"));
        }
    }
    if kind != ProbeKind::Readiness && p.success_threshold.is_some_and(|v| v > 1) {
        return err(format!("{f}.successThreshold"), "must be 1");
    }
    if let Some(g) = p.termination_grace_period_seconds {
        if kind == ProbeKind::Readiness {
            return err(format!("{f}.terminationGracePeriodSeconds"), "must not be set for readinessProbes");
        }
        if g <= 0 {
            return err(format!("{f}.terminationGracePeriodSeconds"), format!("{g} must be greater than 0"));
        }
    }
    if let Some(e) = &p.exec
        && e.command.as_ref().is_none_or(|c| c.is_empty())
    {
        return err(format!("{f}.exec.command"), "must have at least one element");
    }
    if let Some(h) = &p.http_get {
        validate_http_get(&format!("{f}.httpGet"), h, c)?;
    }
    if let Some(t) = &p.tcp_socket {
        validate_probe_port(format!("{f}.tcpSocket.port"), &t.port, c)?;
        probe_host(format!("{f}.tcpSocket.host"), &t.host)?;
    }
    if let Some(g) = &p.grpc
        && !(1..=65535).contains(&g.port)
    {
        return err(format!("{f}.grpc.port"), format!("{} must be between 1 and 65535, inclusive", g.port));
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
fn validate_http_get(
    f: &str,
    h: &k8s_openapi::api::core::v1::HTTPGetAction,
    c: &super::Container,
) -> Result<(), FieldError> {
    validate_probe_port(format!("{f}.port"), &h.port, c)?;
    probe_host(format!("{f}.host"), &h.host)?;
    if let Some(sch) = h.scheme.as_deref()
        && !matches!(sch, "HTTP" | "HTTPS")
    {
        return err(
            format!("{f}.scheme"),
            format!("Unsupported value: {sch:?}: supported values: \"HTTP\", \"HTTPS\""),
        );
    }
    for (i, hh) in h.http_headers.iter().flatten().enumerate() {
        let ok = !hh.name.is_empty()
            && hh.name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !ok {
            return err(format!("{f}.httpHeaders[{i}].name"), format!("{:?} is not a valid HTTP header name", hh.name));
        }
        if hh.value.contains(['\r', '\n']) {
            return err(format!("{f}.httpHeaders[{i}].value"), "must not contain a line break");
        }
    }
    if h.path.as_deref().is_some_and(|p| p.contains([' ', '\r', '\n'])) {
        return err(format!("{f}.path"), "must not contain spaces or line breaks");
    }
    Ok(())
}

/// A lifecycle hook: one handler (`exec`, `httpGet`, `sleep`).
fn validate_hook(
    f: &str,
    h: &k8s_openapi::api::core::v1::LifecycleHandler,
    c: &super::Container,
) -> Result<(), FieldError> {
    match [h.exec.is_some(), h.http_get.is_some(), h.sleep.is_some(), h.tcp_socket.is_some()]
        .iter()
        .filter(|x| **x)
        .count()
    {
        0 => return err(f.to_string(), "must specify a handler type (exec, httpGet or sleep)"),
        1 => {}
        _ => return err(f.to_string(), "may not specify more than 1 handler type"),
    }
    if let Some(e) = &h.exec
        && e.command.as_ref().is_none_or(|c| c.is_empty())
    {
        return err(format!("{f}.exec.command"), "must have at least one element");
    }
    if let Some(s) = &h.sleep
        && s.seconds < 0
    {
        return err(format!("{f}.sleep.seconds"), format!("{} must be greater than or equal to 0", s.seconds));
    }
    if let Some(g) = &h.http_get {
        validate_http_get(&format!("{f}.httpGet"), g, c)?;
    }
    Ok(())
}

/// `env[].valueFrom`: one source, a downward-API path or resource an
/// environment variable may read, as the API server's validation checks.
fn validate_value_from(
    f: &str,
    value: Option<&str>,
    from: &k8s_openapi::api::core::v1::EnvVarSource,
    containers: &[&super::Container],
) -> Result<(), FieldError> {
    use super::downward::{ENV_FIELD_PATHS, RESOURCES, divisor_allowed, subscript};
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

/// dnsPolicy and dnsConfig, as the API server checks them: a known policy,
/// dnsConfig required with `None`, at most 3 nameservers (`sync::dns` forms
/// the resolver config from them).
fn validate_dns(spec: &super::PodSpec) -> Result<(), FieldError> {
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

/// A volume: exactly one source, emptyDir or hostPath, with values
/// podwarden implements.
fn validate_volume(
    i: usize,
    v: &k8s_openapi::api::core::v1::Volume,
    containers: &[&super::Container],
) -> Result<(), FieldError> {
    let f = format!("spec.volumes[{i}]");
    if !is_dns1123_label(&v.name) {
        return err(format!("{f}.name"), format!("{:?} is not a valid DNS-1123 label", v.name));
    }
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
        return err(f, format!("more than one volume source ({})", sources.join(", ")));
    }
    if v.config_map.is_some() || v.secret.is_some() || v.downward_api.is_some() || v.projected.is_some() {
        return validate_projection(&f, v, containers);
    }
    match (&v.empty_dir, &v.host_path) {
        (Some(_), Some(_)) => unreachable!("counted above"),
        (None, None) => err(
            f,
            "no volume source; podwarden supports emptyDir, hostPath, configMap, secret, downwardAPI and projected",
        ),
        (Some(ed), None) => {
            let medium = ed.medium.as_deref().unwrap_or("");
            if !matches!(medium, "" | "Memory") {
                return err(
                    format!("{f}.emptyDir.medium"),
                    format!("{medium:?} is not supported by podwarden (\"\" or Memory)"),
                );
            }
            if let Some(q) = &ed.size_limit {
                // Memory: it sizes the tmpfs; on disk, usage is measured
                // and reported against it (housekeeping)
                if super::quantity::bytes(&q.0).is_err() {
                    return err(format!("{f}.emptyDir.sizeLimit"), format!("{:?} is not a quantity", q.0));
                }
            }
            Ok(())
        }
        (None, Some(hp)) => {
            let p = hp.path.as_str();
            let pf = format!("{f}.hostPath.path");
            if p.contains('\0') {
                return err(pf, format!("{p:?} holds a NUL byte"));
            }
            if !p.starts_with('/') {
                return err(pf, format!("{p:?} must be an absolute path"));
            }
            if has_dot_dot(p) {
                return err(pf, format!("{p:?} must not contain '..'"));
            }
            let kind = hp.type_.as_deref().unwrap_or("");
            if !matches!(
                kind,
                "" | "DirectoryOrCreate"
                    | "Directory"
                    | "FileOrCreate"
                    | "File"
                    | "Socket"
                    | "CharDevice"
                    | "BlockDevice"
            ) {
                return err(
                    format!("{f}.hostPath.type"),
                    format!(
                        "{kind:?} is not one of DirectoryOrCreate, Directory, FileOrCreate, File, Socket, CharDevice, BlockDevice"
                    ),
                );
            }
            Ok(())
        }
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
) -> Result<(), FieldError> {
    for (j, it) in items.iter().flatten().enumerate() {
        let itf = format!("{f}.items[{j}]");
        check_key(&it.key).map_err(|e| FieldError::new(format!("{itf}.key"), e.to_string()))?;
        check_item_path(format!("{itf}.path"), &it.path, paths)?;
        check_mode(format!("{itf}.mode"), it.mode)?;
    }
    Ok(())
}

/// `items` of a downwardAPI volume (or projected source): the paths a
/// volume may show (whole label and annotation maps too), resources of a
/// named container.
fn check_downward_items(
    f: &str,
    items: &Option<Vec<k8s_openapi::api::core::v1::DownwardAPIVolumeFile>>,
    containers: &[&super::Container],
    paths: &mut HashSet<String>,
) -> Result<(), FieldError> {
    use super::downward::{RESOURCES, VOLUME_FIELD_PATHS, divisor_allowed, subscript};
    for (j, it) in items.iter().flatten().enumerate() {
        let itf = format!("{f}.items[{j}]");
        check_item_path(format!("{itf}.path"), &it.path, paths)?;
        check_mode(format!("{itf}.mode"), it.mode)?;
        match (&it.field_ref, &it.resource_field_ref) {
            (Some(_), Some(_)) => return err(itf, "fieldRef and resourceFieldRef can not be specified simultaneously"),
            (None, None) => return err(itf, "must specify one of: `fieldRef` or `resourceFieldRef`"),
            (Some(fr), None) => {
                let p = fr.field_path.as_str();
                if !(VOLUME_FIELD_PATHS.contains(&p) || subscript(p).is_some_and(|(_, k)| !k.is_empty())) {
                    return err(
                        format!("{itf}.fieldRef.fieldPath"),
                        format!("{p:?} is not one of {}", VOLUME_FIELD_PATHS.join(", ")),
                    );
                }
            }
            (None, Some(rf)) => {
                let rff = format!("{itf}.resourceFieldRef");
                let name = rf.container_name.as_deref().unwrap_or("");
                if name.is_empty() {
                    return err(format!("{rff}.containerName"), "must specify container name");
                }
                if !containers.iter().any(|c| c.name == name) {
                    return err(format!("{rff}.containerName"), format!("no container named {name:?} in this pod"));
                }
                if !RESOURCES.contains(&rf.resource.as_str()) {
                    return err(
                        format!("{rff}.resource"),
                        format!("{:?} is not one of {}", rf.resource, RESOURCES.join(", ")),
                    );
                }
                if let Some(d) = &rf.divisor
                    && !divisor_allowed(&rf.resource, &d.0)
                {
                    return err(format!("{rff}.divisor"), format!("{:?} is not an allowed divisor", d.0));
                }
            }
        }
    }
    Ok(())
}

/// configMap, secret, downwardAPI and projected volumes.
fn validate_projection(
    f: &str,
    v: &k8s_openapi::api::core::v1::Volume,
    containers: &[&super::Container],
) -> Result<(), FieldError> {
    let mut paths = HashSet::new();
    let object_name = |field: String, name: &str| -> Result<(), FieldError> {
        if name.is_empty() {
            return err(field, "missing; name the object");
        }
        if !is_dns1123_subdomain(name) {
            return err(field, format!("{name:?} is not a valid DNS-1123 subdomain"));
        }
        Ok(())
    };
    if let Some(cm) = &v.config_map {
        let cf = format!("{f}.configMap");
        object_name(format!("{cf}.name"), &cm.name)?;
        check_mode(format!("{cf}.defaultMode"), cm.default_mode)?;
        check_key_items(&cf, &cm.items, &mut paths)?;
    }
    if let Some(sec) = &v.secret {
        let sf = format!("{f}.secret");
        object_name(format!("{sf}.secretName"), sec.secret_name.as_deref().unwrap_or(""))?;
        check_mode(format!("{sf}.defaultMode"), sec.default_mode)?;
        check_key_items(&sf, &sec.items, &mut paths)?;
    }
    if let Some(d) = &v.downward_api {
        let df = format!("{f}.downwardAPI");
        check_mode(format!("{df}.defaultMode"), d.default_mode)?;
        check_downward_items(&df, &d.items, containers, &mut paths)?;
    }
    if let Some(p) = &v.projected {
        let pf = format!("{f}.projected");
        check_mode(format!("{pf}.defaultMode"), p.default_mode)?;
        for (j, src) in p.sources.iter().flatten().enumerate() {
            let sf = format!("{pf}.sources[{j}]");
            let set = [src.config_map.is_some(), src.secret.is_some(), src.downward_api.is_some()];
            match set.iter().filter(|b| **b).count() {
                0 => return err(sf, "must specify one of: `configMap`, `secret` or `downwardAPI`"),
                1 => {}
                _ => return err(sf, "may not specify more than 1 volume type per source"),
            }
            if let Some(cm) = &src.config_map {
                object_name(format!("{sf}.configMap.name"), &cm.name)?;
                check_key_items(&format!("{sf}.configMap"), &cm.items, &mut paths)?;
            }
            if let Some(s) = &src.secret {
                object_name(format!("{sf}.secret.name"), &s.name)?;
                check_key_items(&format!("{sf}.secret"), &s.items, &mut paths)?;
            }
            if let Some(d) = &src.downward_api {
                check_downward_items(&format!("{sf}.downwardAPI"), &d.items, containers, &mut paths)?;
            }
        }
    }
    Ok(())
}

/// Requests and limits: cpu and memory only (the others would be dropped),
/// each a quantity.
fn validate_resources(f: &str, c: &super::Container) -> Result<(), FieldError> {
    let Some(r) = c.resources.as_ref() else { return Ok(()) };
    let value = |name: &str, q: &str| {
        if name == "cpu" { super::quantity::cpu_millis(q) } else { super::quantity::bytes(q) }.ok().filter(|v| *v >= 0)
    };
    for (kind, m) in [("limits", &r.limits), ("requests", &r.requests)] {
        for (name, q) in m.iter().flatten() {
            let rf = format!("{f}.resources.{kind}.{name}");
            let known = matches!(name.as_str(), "cpu" | "memory" | "ephemeral-storage")
                || name
                    .strip_prefix("hugepages-")
                    .is_some_and(|size| super::quantity::bytes(size).is_ok_and(|b| b > 0));
            if !known {
                return err(rf, "not supported by podwarden (cpu, memory, ephemeral-storage and hugepages-<size> are)");
            }
            if value(name, &q.0).is_none() {
                return err(rf, format!("{:?} is not a quantity", q.0));
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str =
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox\n";

    fn field_of(r: Result<Pod, ManifestError>) -> String {
        match r {
            Err(ManifestError::Invalid { error: FieldError { field, .. }, .. }) => field,
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn good_manifest_gets_defaults_and_stable_uid() {
        let a = parse("/m/web.yaml", GOOD.as_bytes(), "node1").unwrap();
        let b = parse("/m/web.yaml", GOOD.as_bytes(), "node1").unwrap();
        assert_eq!(a.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(a.metadata.uid, b.metadata.uid);
        assert_eq!(a.metadata.uid.as_ref().unwrap().len(), 32);
        assert!(super::super::is_static(&a));
        // same content, other node: other uid; edited content: other uid
        let c = parse("/m/web.yaml", GOOD.as_bytes(), "node2").unwrap();
        assert_ne!(a.metadata.uid, c.metadata.uid);
        let edited = GOOD.replace("busybox", "busybox:2");
        let d = parse("/m/web.yaml", edited.as_bytes(), "node1").unwrap();
        assert_ne!(a.metadata.uid, d.metadata.uid);
        // formatting and comments do not change it
        let reformatted = format!("# a comment\n{}", GOOD.replace("  name: web", "  name:   web"));
        let e = parse("/m/web.yaml", reformatted.as_bytes(), "node1").unwrap();
        assert_eq!(a.metadata.uid, e.metadata.uid);
    }

    #[test]
    fn explicit_uid_is_kept() {
        let m = GOOD.replace("  name: web", "  name: web\n  uid: fixed-1");
        let p = parse("x.yaml", m.as_bytes(), "n").unwrap();
        assert_eq!(p.metadata.uid.as_deref(), Some("fixed-1"));
    }

    #[test]
    fn json_manifest_parses() {
        let j = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#;
        assert!(parse("p.json", j.as_bytes(), "n").is_ok());
        let two = format!("{j}\n{j}");
        assert!(matches!(parse("p.json", two.as_bytes(), "n"), Err(ManifestError::MultiDocument { count: 2, .. })));
    }

    #[test]
    fn rejects_each_invalid_case_naming_the_field() {
        let cases: &[(&str, &str)] = &[
            (&GOOD.replace("kind: Pod", "kind: Deployment"), "kind"),
            (&GOOD.replace("apiVersion: v1", "apiVersion: apps/v1"), "apiVersion"),
            (&GOOD.replace("  name: web", "  name: Web_1"), "metadata.name"),
            (&GOOD.replace("  name: web", "  name: web\n  namespace: Bad.NS"), "metadata.namespace"),
            ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers: []\n", "spec.containers"),
            ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n", "spec"),
            (&GOOD.replace("- name: c", "- name: C!"), "spec.containers[0].name"),
            (&format!("{GOOD}  - name: c\n    image: other\n"), "spec.containers[1].name"),
            (&GOOD.replace("spec:\n", "spec:\n  restartPolicy: Sometimes\n"), "spec.restartPolicy"),
            (
                &GOOD.replace("spec:\n", "spec:\n  terminationGracePeriodSeconds: -5\n"),
                "spec.terminationGracePeriodSeconds",
            ),
            (
                &GOOD.replace("spec:\n", "spec:\n  terminationGracePeriodSeconds: soon\n"),
                "spec.terminationGracePeriodSeconds",
            ),
            (
                &format!(
                    "{}    ports:\n    - containerPort: 80\n      hostPort: 8080\n  - name: d\n    image: i\n    ports:\n    - containerPort: 81\n      hostPort: 8080\n",
                    GOOD
                ),
                "spec.containers[1].ports[0].hostPort",
            ),
            (
                &GOOD.replace("    image: busybox\n", "    image: busybox\n    imagePullPolicy: Sometimes\n"),
                "spec.containers[0].imagePullPolicy",
            ),
            (&GOOD.replace("    image: busybox\n", ""), "spec.containers[0].image"),
        ];
        for (text, field) in cases {
            assert_eq!(&field_of(parse("m.yaml", text.as_bytes(), "n")), field, "manifest:\n{text}");
        }
    }

    #[test]
    fn value_from_is_checked_as_the_api_server_checks_it() {
        let with_env = |env: &str| format!("{GOOD}    env:\n    - name: X\n{env}  - name: d\n    image: i\n");
        let invalid = |env: &str| match parse("m.yaml", with_env(env).as_bytes(), "n") {
            Err(ManifestError::Invalid { error: FieldError { field, reason: message }, .. }) => (field, message),
            other => panic!("expected a field error for {env:?}, got {other:?}"),
        };
        let ok = [
            "      valueFrom: {fieldRef: {fieldPath: metadata.name}}\n",
            "      valueFrom: {fieldRef: {apiVersion: v1, fieldPath: status.podIPs}}\n",
            "      valueFrom: {fieldRef: {fieldPath: \"metadata.labels['app.kubernetes.io/name']\"}}\n",
            "      value: \"\"\n      valueFrom: {fieldRef: {fieldPath: spec.nodeName}}\n",
            "      valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}\n",
            "      valueFrom: {resourceFieldRef: {containerName: d, resource: requests.cpu, divisor: 1m}}\n",
        ];
        for env in ok {
            assert!(parse("m.yaml", with_env(env).as_bytes(), "n").is_ok(), "{env}");
        }
        let f = "spec.containers[0].env[0].valueFrom";
        let cases = [
            (
                "      value: x\n      valueFrom: {fieldRef: {fieldPath: metadata.name}}\n",
                f.to_string(),
                "may not be specified when `value` is not empty",
            ),
            (
                "      valueFrom: {fieldRef: {fieldPath: metadata.name}, resourceFieldRef: {resource: limits.cpu}}\n",
                f.to_string(),
                "may not have more than one field specified at a time",
            ),
            (
                "      valueFrom: {}\n",
                f.to_string(),
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            ),
            (
                "      valueFrom: {fieldRef: {fieldPath: metadata.labels}}\n",
                format!("{f}.fieldRef.fieldPath"),
                "\"metadata.labels\" is not one of metadata.name, metadata.namespace, metadata.uid, metadata.labels['<KEY>'], metadata.annotations['<KEY>'], spec.nodeName, spec.serviceAccountName, status.hostIP, status.hostIPs, status.podIP, status.podIPs",
            ),
            (
                "      valueFrom: {resourceFieldRef: {resource: limits.hugepages-2Mi}}\n",
                format!("{f}.resourceFieldRef.resource"),
                "\"limits.hugepages-2Mi\" is not one of limits.cpu, limits.memory, limits.ephemeral-storage, requests.cpu, requests.memory, requests.ephemeral-storage (podwarden accounts for cpu, memory and ephemeral storage)",
            ),
            (
                "      valueFrom: {resourceFieldRef: {resource: limits.cpu, containerName: nope}}\n",
                format!("{f}.resourceFieldRef.containerName"),
                "no container named \"nope\" in this pod",
            ),
            (
                "      valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: 1Mi}}\n",
                format!("{f}.resourceFieldRef.divisor"),
                "\"1Mi\" is not one of 1m, 1",
            ),
            (
                "      valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 3k}}\n",
                format!("{f}.resourceFieldRef.divisor"),
                "\"3k\" is not one of 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei",
            ),
        ];
        for (env, field, message) in cases {
            assert_eq!(invalid(env), (field, message.to_string()), "{env}");
        }
    }

    #[test]
    fn mount_propagation_is_checked_as_the_api_server_checks_it() {
        let pod = |mode: &str, privileged: bool| {
            format!(
                "{GOOD}    securityContext: {{privileged: {privileged}}}\n    volumeMounts:\n    - {{name: v, mountPath: /v, mountPropagation: {mode:?}}}\n  volumes:\n  - {{name: v, hostPath: {{path: /srv}}}}\n"
            )
        };
        let result = |mode: &str, privileged: bool| match parse("m.yaml", pod(mode, privileged).as_bytes(), "n") {
            Ok(_) => Ok(()),
            Err(ManifestError::Invalid { error: FieldError { field, reason: message }, .. }) => Err((field, message)),
            Err(e) => panic!("{e}"),
        };
        for (mode, privileged) in
            [("None", false), ("HostToContainer", false), ("HostToContainer", true), ("Bidirectional", true)]
        {
            assert_eq!(result(mode, privileged), Ok(()), "{mode} privileged: {privileged}");
        }
        let f = "spec.containers[0].volumeMounts[0].mountPropagation".to_string();
        assert_eq!(
            result("Bidirectional", false),
            Err((f.clone(), "Bidirectional mount propagation is available only to privileged containers".into()))
        );
        for bad in ["rshared", "", "hostToContainer"] {
            assert_eq!(
                result(bad, true),
                Err((
                    f.clone(),
                    format!(
                        "Unsupported value: {bad:?}: supported values: \"Bidirectional\", \"HostToContainer\", \"None\""
                    )
                )),
            );
        }
    }

    #[test]
    fn empty_dir_size_limit_on_disk_or_memory_is_a_quantity() {
        for medium in ["", "Memory"] {
            let m = format!("{GOOD}  volumes:\n  - name: v\n    emptyDir: {{medium: {medium:?}, sizeLimit: 1Gi}}\n");
            assert!(parse("m.yaml", m.as_bytes(), "n").is_ok(), "{m}");
            let bad = m.replace("1Gi", "lots");
            match parse("m.yaml", bad.as_bytes(), "n") {
                Err(ManifestError::Invalid { error: FieldError { field, .. }, .. }) => {
                    assert_eq!(field, "spec.volumes[0].emptyDir.sizeLimit")
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn rejects_bad_documents() {
        let multi = format!("{GOOD}---\n{GOOD}");
        assert!(matches!(parse("m.yaml", multi.as_bytes(), "n"), Err(ManifestError::MultiDocument { count: 2, .. })));
        assert!(matches!(parse("m.yaml", b"\n# nothing\n", "n"), Err(ManifestError::Empty { .. })));
        assert!(matches!(parse("m.yaml", b"a: [b", "n"), Err(ManifestError::Syntax { .. })));
        assert!(matches!(parse("m.yaml", b"kind: Pod\xff\xfe", "n"), Err(ManifestError::NotUtf8 { offset: 9, .. })));
        let big = vec![b'#'; (MAX_MANIFEST_BYTES + 1) as usize];
        assert!(matches!(parse("m.yaml", &big, "n"), Err(ManifestError::TooLarge { .. })));
        let e = parse("dir/m.yaml", b"- 1\n", "n").unwrap_err();
        assert!(e.to_string().starts_with("dir/m.yaml: "), "{e}");
    }

    #[test]
    fn warnings_come_back_with_the_pod() {
        let m = GOOD.replace("spec:\n", "spec:\n  contaners: []\n  hostNetwork: false\n");
        let p = parse_full("m.yaml", m.as_bytes(), "n").unwrap();
        assert_eq!(p.warnings, vec!["unknown field \"spec.contaners\"".to_string()]);
        // unknown fields do not change the pod or its UID
        let plain = parse("m.yaml", GOOD.replace("spec:\n", "spec:\n  hostNetwork: false\n").as_bytes(), "n").unwrap();
        assert_eq!(p.pod, plain);
    }

    #[test]
    fn source_path_is_the_one_the_agent_reads() {
        let d = std::env::temp_dir().join(format!("pw-source-path-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("manifests")).unwrap();
        std::os::unix::fs::symlink(d.join("manifests"), d.join("link")).unwrap();
        let spp = d.join("manifests");
        let want = spp.join("web.yaml");
        assert_eq!(source_path(&d.join("link/web.yaml"), &spp), want);
        assert_eq!(source_path(&d.join("manifests/./web.yaml"), &spp), want);
        assert_eq!(source_path(&d.join("other.yaml"), &spp), d.join("other.yaml"));
        assert!(source_path(Path::new("rel.yaml"), &spp).is_absolute());
        let _ = std::fs::remove_dir_all(&d);
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;
        use std::time::{Duration, Instant};

        /// Pieces YAML's grammar turns on, to build inputs that get past the
        /// first byte more often than random bytes do.
        fn yamlish() -> impl Strategy<Value = String> {
            let piece = prop_oneof![
                Just("[".to_string()),
                Just("]".to_string()),
                Just("{".to_string()),
                Just("}".to_string()),
                Just(", ".to_string()),
                Just(": ".to_string()),
                Just("- ".to_string()),
                Just("\n".to_string()),
                Just("  ".to_string()),
                Just("&a ".to_string()),
                Just("*a".to_string()),
                Just("&b ".to_string()),
                Just("*b".to_string()),
                Just("? ".to_string()),
                Just("'q'".to_string()),
                Just("\"d\\n\"".to_string()),
                Just("|\n  x\n".to_string()),
                Just("---\n".to_string()),
                Just("!!str ".to_string()),
                Just("!!int ".to_string()),
                Just("# c\n".to_string()),
                Just("~".to_string()),
                Just("0x1f".to_string()),
                Just("1.5".to_string()),
                Just("true".to_string()),
                Just("spec".to_string()),
                Just("containers".to_string()),
                Just("name".to_string()),
                "[a-z]{1,3}",
            ];
            proptest::collection::vec(piece, 0..60).prop_map(|v| v.concat())
        }

        fn name() -> impl Strategy<Value = String> {
            "[a-z][a-z0-9-]{0,20}[a-z0-9]"
        }

        fn container() -> impl Strategy<Value = Container> {
            (
                name(),
                "[a-z]{1,8}(:[0-9]{1,3})?",
                proptest::option::of(proptest::collection::vec("[ -~]{0,12}", 0..4)),
                proptest::option::of(proptest::collection::vec(("[A-Z_]{1,6}", "[ -~]{0,10}"), 0..3)),
                proptest::option::of(1..65535i32),
            )
                .prop_map(|(name, image, command, env, port)| Container {
                    name,
                    image: Some(image),
                    command,
                    env: env.map(|e| {
                        e.into_iter()
                            .map(|(n, v)| k8s_openapi::api::core::v1::EnvVar {
                                name: n,
                                value: Some(v),
                                ..Default::default()
                            })
                            .collect()
                    }),
                    ports: port.map(|p| {
                        vec![k8s_openapi::api::core::v1::ContainerPort { container_port: p, ..Default::default() }]
                    }),
                    ..Default::default()
                })
        }

        fn pod() -> impl Strategy<Value = Pod> {
            (
                name(),
                proptest::option::of(name()),
                proptest::collection::vec(container(), 1..3),
                proptest::option::of(prop_oneof![Just("Always"), Just("OnFailure"), Just("Never")]),
                proptest::option::of(proptest::collection::btree_map("[a-z]{1,5}", "[a-z0-9]{0,5}", 0..3)),
                proptest::option::of(0..100i64),
            )
                .prop_map(|(name, ns, mut containers, policy, labels, grace)| {
                    // container names must be unique
                    for (i, c) in containers.iter_mut().enumerate() {
                        c.name = format!("{}-{i}", c.name);
                    }
                    Pod {
                        metadata: ObjectMeta { name: Some(name), namespace: ns, labels, ..Default::default() },
                        spec: Some(PodSpec {
                            containers,
                            restart_policy: policy.map(str::to_string),
                            termination_grace_period_seconds: grace,
                            ..Default::default()
                        }),
                        status: None,
                    }
                })
        }

        use crate::model::{Container, ObjectMeta, PodSpec};

        fn bounded<T>(f: impl FnOnce() -> T) -> T {
            let t = Instant::now();
            let r = f();
            assert!(t.elapsed() < Duration::from_secs(1), "took {:?}", t.elapsed());
            r
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
                let _ = bounded(|| parse_full("p.yaml", &bytes, "n"));
                let _ = bounded(|| parse_full("p.json", &bytes, "n"));
            }

            #[test]
            fn yamlish_text_never_panics_and_agrees_with_serde_yaml_ng(text in yamlish()) {
                let ours = bounded(|| bounded_yaml::parse_bounded(&text));
                let _ = bounded(|| parse_full("p.yaml", text.as_bytes(), "n"));
                // where both read it, they read the same
                let theirs: Result<Vec<Value>, _> = serde_yaml_ng::Deserializer::from_str(&text)
                    .map(<Value as serde::Deserialize>::deserialize)
                    .collect();
                // (serde_yaml_ng reads an empty stream as one null document)
                if let (Ok(mut a), Ok(mut b)) = (ours, theirs) {
                    a.retain(|v| !v.is_null());
                    b.retain(|v| !v.is_null());
                    prop_assert_eq!(a, b, "{:?}", text);
                }
            }

            #[test]
            fn valid_pods_round_trip(p in pod(), json in any::<bool>()) {
                let (file, text) = if json {
                    ("p.json", serde_json::to_string(&p).unwrap())
                } else {
                    ("p.yaml", serde_yaml_ng::to_string(&p).unwrap())
                };
                let got = bounded(|| parse_full(file, text.as_bytes(), "n"));
                let got = got.map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
                prop_assert!(got.warnings.is_empty(), "{:?}", got.warnings);
                prop_assert_eq!(&got.pod.spec.as_ref().unwrap().containers, &p.spec.as_ref().unwrap().containers);
                prop_assert_eq!(&got.pod.metadata.name, &p.metadata.name);
                prop_assert_eq!(&got.pod.metadata.labels, &p.metadata.labels);
                prop_assert_eq!(
                    got.pod.metadata.namespace.as_deref(),
                    Some(p.metadata.namespace.as_deref().unwrap_or("default"))
                );
                prop_assert_eq!(&got.pod.spec.as_ref().unwrap().restart_policy, &p.spec.as_ref().unwrap().restart_policy);
            }
        }
    }
    #[test]
    fn a_file_holds_a_pod_and_its_config_maps_and_secrets() {
        let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {a: '1'}\n---\n\
                    apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: b}]\n---\n\
                    apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: x}\nstringData: {k: v}\n";
        let c = parse_all("/m/p.yaml", yaml.as_bytes(), "n").unwrap();
        assert_eq!(super::super::name(&c.pod.unwrap()), "p");
        let keys: Vec<String> = c.objects.iter().map(|o| o.key.to_string()).collect();
        assert_eq!(keys, vec!["ConfigMap default/cfg", "Secret x/s"]);
        // the pod's UID does not depend on the objects beside it
        let alone = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: b}]\n";
        let p1 = parse("/m/p.yaml", alone.as_bytes(), "n").unwrap();
        let p2 = parse("/m/p.yaml", yaml.as_bytes(), "n").unwrap();
        assert_eq!(super::super::uid(&p1), super::super::uid(&p2));
        // objects only: fine for the source, not a pod
        let only = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n";
        assert!(parse_all("/m/c.yaml", only.as_bytes(), "n").unwrap().pod.is_none());
        assert!(matches!(parse("/m/c.yaml", only.as_bytes(), "n"), Err(ManifestError::NoPod { .. })));
        // a bad document is named by its index
        let bad = format!("{alone}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cfg}}\ndata: {{'a b': x}}\n");
        let e = parse_all("/m/p.yaml", bad.as_bytes(), "n").unwrap_err().to_string();
        assert_eq!(
            e.split(':').take(2).collect::<Vec<_>>().join(":"),
            "/m/p.yaml: field documents[1].data[\"a b\"]",
            "{e}"
        );
        let twice = format!("{alone}---\n{alone}");
        assert!(matches!(
            parse_all("/m/p.yaml", twice.as_bytes(), "n"),
            Err(ManifestError::MultiDocument { count: 2, .. })
        ));
        let dup = format!("{only}---\n{only}");
        assert!(parse_all("/m/c.yaml", dup.as_bytes(), "n").unwrap_err().to_string().contains("defined twice"));
        let other = "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n";
        assert!(parse_all("/m/s.yaml", other.as_bytes(), "n").unwrap_err().to_string().contains("\"Service\""));
    }

    #[test]
    fn config_volumes_and_env_from_are_checked() {
        let invalid = |spec_tail: &str| {
            let y = format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n  - name: c\n    image: b\n{spec_tail}"
            );
            match parse("/m/p.yaml", y.as_bytes(), "n").unwrap_err() {
                ManifestError::Invalid { error: FieldError { field, reason: message }, .. } => (field, message),
                e => panic!("{e}"),
            }
        };
        let (f, m) = invalid("  volumes: [{name: v, configMap: {}}]\n");
        assert_eq!((f.as_str(), m.as_str()), ("spec.volumes[0].configMap.name", "missing; name the object"));
        let (f, m) = invalid("  volumes: [{name: v, secret: {secretName: s, defaultMode: 4095}}]\n");
        assert_eq!(f, "spec.volumes[0].secret.defaultMode");
        assert!(m.contains("between 0 and 0777"), "{m}");
        let (f, m) = invalid("  volumes: [{name: v, configMap: {name: c, items: [{key: a, path: ../x}]}}]\n");
        assert_eq!(f, "spec.volumes[0].configMap.items[0].path");
        assert!(m.contains("'..'"), "{m}");
        let (f, _) = invalid("  volumes: [{name: v, configMap: {name: c, items: [{key: a, path: /x}]}}]\n");
        assert_eq!(f, "spec.volumes[0].configMap.items[0].path");
        let (f, m) = invalid(
            "  volumes: [{name: v, projected: {sources: [{configMap: {name: c, items: [{key: a, path: x}]}}, \
             {secret: {name: s, items: [{key: b, path: x}]}}]}}]\n",
        );
        assert_eq!(f, "spec.volumes[0].projected.sources[1].secret.items[0].path");
        assert!(m.contains("conflicting duplicate paths"), "{m}");
        let (f, m) =
            invalid("  volumes: [{name: v, downwardAPI: {items: [{path: x, fieldRef: {fieldPath: status.podIP}}]}}]\n");
        assert_eq!(f, "spec.volumes[0].downwardAPI.items[0].fieldRef.fieldPath");
        assert!(m.contains("metadata.labels"), "{m}");
        let (f, m) = invalid(
            "  volumes: [{name: v, downwardAPI: {items: [{path: x, resourceFieldRef: {resource: limits.cpu}}]}}]\n",
        );
        assert_eq!(
            (f.as_str(), m.as_str()),
            ("spec.volumes[0].downwardAPI.items[0].resourceFieldRef.containerName", "must specify container name")
        );
        let (f, _) = invalid("  volumes: [{name: v, configMap: {name: c}, emptyDir: {}}]\n");
        assert_eq!(f, "spec.volumes[0]");
        let (f, m) = invalid("    envFrom: [{prefix: 'A=', configMapRef: {name: c}}]\n");
        assert_eq!(f, "spec.containers[0].envFrom[0].prefix");
        assert!(m.contains("'='"), "{m}");
        let (f, _) = invalid("    envFrom: [{configMapRef: {name: c}, secretRef: {name: s}}]\n");
        assert_eq!(f, "spec.containers[0].envFrom[0]");
        let (f, m) = invalid("    env: [{name: X, valueFrom: {secretKeyRef: {name: s, key: 'a/b'}}}]\n");
        assert_eq!(f, "spec.containers[0].env[0].valueFrom.secretKeyRef.key");
        assert!(m.contains("[-._a-zA-Z0-9]+"), "{m}");
        let ok = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: b\n\
                  \x20   envFrom: [{prefix: P_, configMapRef: {name: c, optional: true}}]\n\
                  \x20 volumes:\n  - {name: a, configMap: {name: c, defaultMode: 0400}}\n\
                  \x20 - {name: b, projected: {sources: [{secret: {name: s}}, {downwardAPI: {items: [{path: l, \
                  fieldRef: {fieldPath: metadata.labels}}]}}]}}\n";
        let p = parse("/m/p.yaml", ok.as_bytes(), "n").unwrap();
        let v = &p.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
        assert_eq!(v.config_map.as_ref().unwrap().default_mode, Some(0o400), "0400 is octal, as kubectl reads it");
    }
}

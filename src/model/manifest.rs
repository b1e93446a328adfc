//! Reading and validating static pod manifests.
//!
//! A manifest is one v1 Pod in YAML or JSON. Every error names the file and,
//! where there is one, the field, so an operator can fix the input.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde_json::Value;
use thiserror::Error;

use super::{CONFIG_FILE_ANNOTATION, CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION, Pod, fnv128_hex};

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
    #[error("{path}: holds {count} documents; a manifest must hold exactly one Pod")]
    MultiDocument { path: String, count: usize },
    #[error("{path}: empty manifest; expected one Pod")]
    Empty { path: String },
    #[error("{path}: cannot parse {format}: {message}")]
    Syntax { path: String, format: &'static str, message: String },
    #[error("{path}: field {field}: {message}")]
    Invalid { path: String, field: String, message: String },
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
            | ManifestError::Syntax { path, .. }
            | ManifestError::Invalid { path, .. } => path,
        }
    }
}

/// Read one manifest file: checks the file type and size before reading.
/// The file is opened non-blocking and only if it is a regular file inside
/// its directory (a symlink is followed only while it stays there): a
/// FIFO, a device or a link to `/dev/zero` or `/etc/shadow` is an error at
/// once, never a hang or a read of something else.
pub fn read_file(path: &Path, node_name: &str) -> Result<Pod, ManifestError> {
    use crate::fsutil::{FileError, Links};
    let p = path.display().to_string();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().map(Path::new).unwrap_or(path);
    let buf =
        crate::fsutil::read_regular_in(dir, name, Links::StayInside, MAX_MANIFEST_BYTES).map_err(|e| match e {
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
        })?;
    parse(&p, &buf, node_name)
}

fn is_json(path: &str) -> bool {
    path.ends_with(".json")
}

/// Parse and validate manifest bytes. `path` names the input in errors and
/// takes part in the derived UID; `.json` selects JSON, anything else YAML.
pub fn parse(path: &str, bytes: &[u8], node_name: &str) -> Result<Pod, ManifestError> {
    let path_s = path.to_string();
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge { path: path_s, size: bytes.len() as u64 });
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|e| ManifestError::NotUtf8 { path: path_s.clone(), offset: e.valid_up_to() })?;
    let value = to_value(path, text)?;
    let pod = to_pod(path, value)?;
    let mut pod = finish(path, pod, node_name)?;
    validate(&pod).map_err(|(field, message)| ManifestError::Invalid { path: path_s, field, message })?;
    pod.status = None;
    Ok(pod)
}

fn to_value(path: &str, text: &str) -> Result<Value, ManifestError> {
    let syntax = |format, message: String| ManifestError::Syntax { path: path.to_string(), format, message };
    let mut docs: Vec<Value> = Vec::new();
    if is_json(path) {
        for v in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
            docs.push(v.map_err(|e| syntax("JSON", e.to_string()))?);
        }
    } else {
        for d in serde_yaml_ng::Deserializer::from_str(text) {
            let v: Value = serde::Deserialize::deserialize(d).map_err(|e| syntax("YAML", e.to_string()))?;
            if !v.is_null() {
                docs.push(v);
            }
        }
    }
    match docs.len() {
        0 => Err(ManifestError::Empty { path: path.to_string() }),
        1 => Ok(docs.pop().expect("one document")),
        count => Err(ManifestError::MultiDocument { path: path.to_string(), count }),
    }
}

fn to_pod(path: &str, value: Value) -> Result<Pod, ManifestError> {
    let invalid = |field: &str, message: String| ManifestError::Invalid {
        path: path.to_string(),
        field: field.to_string(),
        message,
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
    serde_path_to_error::deserialize::<_, Pod>(value).map_err(|e| {
        let field = e.path().to_string();
        invalid(&field, e.into_inner().to_string())
    })
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

type FieldError = (String, String);

fn err<T>(field: impl Into<String>, message: impl Into<String>) -> Result<T, FieldError> {
    Err((field.into(), message.into()))
}

/// RFC 1123 label: lowercase alphanumerics and '-', alphanumeric at both
/// ends, at most 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// RFC 1123 subdomain: labels joined by '.', at most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
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
    let Some(spec) = pod.spec.as_ref() else {
        return err("spec", "missing; a pod needs a spec");
    };
    if spec.containers.is_empty() {
        return err("spec.containers", "a pod needs at least one container");
    }
    if spec.init_containers.as_ref().is_some_and(|c| !c.is_empty()) {
        return err("spec.initContainers", "init containers are not supported by podwarden yet");
    }
    if spec.ephemeral_containers.as_ref().is_some_and(|c| !c.is_empty()) {
        return err("spec.ephemeralContainers", "ephemeral containers cannot be set in a manifest");
    }
    if let Some(rp) = spec.restart_policy.as_deref()
        && !matches!(rp, "Always" | "OnFailure" | "Never")
    {
        return err("spec.restartPolicy", format!("{rp:?} is not one of Always, OnFailure, Never"));
    }
    if let Some(g) = spec.termination_grace_period_seconds
        && g < 0
    {
        return err("spec.terminationGracePeriodSeconds", format!("{g} is negative; must be 0 or more"));
    }
    let volumes: HashSet<&str> = spec.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        if !is_dns1123_label(&v.name) {
            return err(format!("spec.volumes[{i}].name"), format!("{:?} is not a valid DNS-1123 label", v.name));
        }
    }
    if volumes.len() != spec.volumes.as_ref().map_or(0, Vec::len) {
        return err("spec.volumes", "volume names must be unique");
    }
    let mut names = HashSet::new();
    let mut host_ports: HashSet<(i32, String, String)> = HashSet::new();
    for (i, c) in spec.containers.iter().enumerate() {
        let f = format!("spec.containers[{i}]");
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
        for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
            if !volumes.contains(m.name.as_str()) {
                return err(
                    format!("{f}.volumeMounts[{j}].name"),
                    format!("no volume named {:?} in spec.volumes", m.name),
                );
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
            Err(ManifestError::Invalid { field, .. }) => field,
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
    fn dns_names() {
        assert!(is_dns1123_label("a-1"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("a-"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_subdomain("a.b-c.d"));
        assert!(!is_dns1123_subdomain("a..b"));
    }
}

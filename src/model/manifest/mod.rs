//! Reading and validating static pod manifests: the errors, reading a
//! file, and a file's documents in order (`parse_all`). Text becomes a Pod
//! in `decode`; the Pod is validated in `validate` (its metadata and spec)
//! and the files it calls: `containers`, `volumes`, `probes`, `security`.
//!
//! A manifest is one v1 Pod in YAML or JSON. Every error names the file and,
//! where there is one, the field, so an operator can fix the input.

mod containers;
mod decode;
mod probes;
mod security;
mod validate;
mod volumes;

use std::collections::HashSet;
use std::path::Path;

use serde_json::Value;
use thiserror::Error;

use super::Pod;
use super::field::{FieldError, FieldErrors};
use decode::{finish, to_pod, to_values};
pub use security::APPARMOR_ANNOTATION_PREFIX;
pub use validate::validate;
pub use volumes::hugepages_medium_size;

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
    /// Fields refused, every one found (in the API server's order, at
    /// most [`crate::model::field::MAX_FIELD_ERRORS`]). Shown on one line:
    /// `<path>: field <field>: <reason>`, several separated by `; ` and
    /// summarized after [`crate::model::field::SUMMARY_SHOWN`] (`and N
    /// more`); [`ManifestError::lines`] has each.
    #[error("{path}: {errors}")]
    Invalid { path: String, errors: FieldErrors },
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

    /// The refused fields, for an `Invalid` manifest.
    pub fn field_errors(&self) -> Option<&FieldErrors> {
        match self {
            ManifestError::Invalid { errors, .. } => Some(errors),
            _ => None,
        }
    }

    /// The error as lines naming the file: one per refused field (`<path>:
    /// field <field>: <reason>`) for an `Invalid` manifest, else the one.
    pub fn lines(&self) -> Vec<String> {
        match self {
            ManifestError::Invalid { path, errors } => errors.iter().map(|e| format!("{path}: {e}")).collect(),
            other => vec![other.to_string()],
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
    // every document's refused fields, in order: the documents are
    // independent of one another
    let mut errors = FieldErrors::new();
    for (i, doc) in docs.into_iter().enumerate() {
        // in a file of several documents, a field is named with its
        // document: `documents[1].data["a b"]`
        let mut refuse = |e: FieldErrors| errors.append(if many { e.under(&format!("documents[{i}]")) } else { e });
        let kind = match doc.get("kind").and_then(Value::as_str) {
            Some("ConfigMap") => Kind::ConfigMap,
            Some("Secret") => Kind::Secret,
            Some("Pod") => {
                let decoded = match to_pod(path, doc, crate::model::fields::Origin::Manifest) {
                    Ok(d) => d,
                    Err(ManifestError::Invalid { errors, .. }) => {
                        refuse(errors);
                        continue;
                    }
                    Err(other) => return Err(other),
                };
                let mut pod = finish(path, decoded.pod, node_name)?;
                let mut refused = decoded.refused;
                if let Err(e) = validate(&pod) {
                    refused.append(not_explained(&refused, e));
                }
                if !refused.is_empty() {
                    refuse(refused);
                    continue;
                }
                pod.status = None;
                let warnings = decoded.warnings.into_iter().map(|w| at_warning(many, i, w)).collect();
                content.pod = Some(Parsed { pod, warnings });
                continue;
            }
            Some(other) => {
                let why = format!("is {other:?}; a manifest holds a Pod, ConfigMaps and Secrets");
                refuse(FieldError::new("kind", why).into());
                continue;
            }
            None if !doc.is_object() => {
                refuse(FieldError::new("(top level)", "expected a Pod object").into());
                continue;
            }
            None => {
                refuse(FieldError::new("kind", "missing; expected \"Pod\"").into());
                continue;
            }
        };
        let (obj, warnings) = match objects::from_value(kind, path, doc) {
            Ok(o) => o,
            Err(e) => {
                refuse(e);
                continue;
            }
        };
        if !seen.insert(obj.key.clone()) {
            let why = format!("{} is defined twice in this file", obj.key);
            refuse(FieldError::new("metadata.name", why).into());
            continue;
        }
        content.warnings.extend(warnings.into_iter().map(|w| at_warning(many, i, w)));
        content.objects.push(obj);
    }
    if !errors.is_empty() {
        return Err(ManifestError::Invalid { path: path_s, errors });
    }
    Ok(content)
}

/// A pod as the cluster's API server gives it to this node (cluster mode):
/// the fields the control plane owns accepted ([`crate::model::fields::API_ROWS`]),
/// every other field checked as a manifest's, then validated. It keeps its
/// UID, and is marked as the API's (`kubernetes.io/config.source: api`);
/// what changes with every write (`resourceVersion`, `managedFields`) and
/// the status are dropped, so an unchanged pod compares equal.
pub fn from_api(value: Value) -> Result<Pod, ManifestError> {
    let ns = value.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("").to_string();
    let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    let path = format!("pods/{ns}/{name}");
    let decoded = to_pod(&path, value, crate::model::fields::Origin::Api)?;
    let mut errors = decoded.refused;
    let mut pod = decoded.pod;
    if pod.metadata.uid.as_deref().unwrap_or("").is_empty() {
        errors.push(FieldError::new("metadata.uid", "missing in a pod from the API server"));
    }
    if ns.is_empty() {
        errors.push(FieldError::new("metadata.namespace", "missing in a pod from the API server"));
    }
    pod.metadata.resource_version = None;
    pod.metadata.managed_fields = None;
    pod.status = None;
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(crate::model::CONFIG_SOURCE_ANNOTATION.into(), "api".into());
    if let Err(e) = validate(&pod) {
        errors.append(not_explained(&errors, e));
    }
    match errors.into_result() {
        Ok(()) => Ok(pod),
        Err(errors) => Err(ManifestError::Invalid { path, errors }),
    }
}

/// Validation's errors that the fields the table refused do not already
/// say: a field is refused once (an init container's `restartPolicy:
/// Never` is not also an unsupported value), and neither what is inside a
/// refused field nor the list item that holds it for lacking it (a volume
/// whose only source is refused has no source podwarden supports).
fn not_explained(refused: &FieldErrors, found: FieldErrors) -> FieldErrors {
    let inside = |inner: &str, outer: &str| {
        inner.strip_prefix(outer).is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
    };
    found.keeping(|e| {
        !refused.iter().any(|r| {
            e.field == r.field || inside(&e.field, &r.field) || (e.field.ends_with(']') && inside(&r.field, &e.field))
        })
    })
}

/// A warning about document `i` of a file of several documents.
fn at_warning(many: bool, i: usize, w: String) -> String {
    if many { format!("documents[{i}]: {w}") } else { w }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str =
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox\n";

    /// The one refused field of an invalid manifest: (field, reason).
    fn one(errors: &FieldErrors) -> (String, String) {
        assert_eq!(errors.len(), 1, "expected one refused field: {errors:?}");
        let e = errors.first().unwrap();
        (e.field.clone(), e.reason.clone())
    }

    fn field_of(r: Result<Pod, ManifestError>) -> String {
        match r {
            Err(ManifestError::Invalid { errors, .. }) => one(&errors).0,
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
            Err(ManifestError::Invalid { errors, .. }) => one(&errors),
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
            Err(ManifestError::Invalid { errors, .. }) => Err(one(&errors)),
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
                Err(ManifestError::Invalid { errors, .. }) => {
                    assert_eq!(one(&errors).0, "spec.volumes[0].emptyDir.sizeLimit")
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
        use crate::model::bounded_yaml;
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
        // every document's refused fields, each named with its document
        let both = format!("{}---\n{}", alone.replace("image: b", "image: ''"), bad.split("---\n").nth(1).unwrap());
        let e = parse_all("/m/p.yaml", both.as_bytes(), "n").unwrap_err();
        let fields: Vec<&str> = e.field_errors().unwrap().iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["documents[0].spec.containers[0].image", "documents[1].data[\"a b\"]"]);
    }

    #[test]
    fn config_volumes_and_env_from_are_checked() {
        let invalid = |spec_tail: &str| {
            let y = format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n  - name: c\n    image: b\n{spec_tail}"
            );
            match parse("/m/p.yaml", y.as_bytes(), "n").unwrap_err() {
                ManifestError::Invalid { errors, .. } => one(&errors),
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

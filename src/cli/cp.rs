//! `podwarden cp`: files into and out of a pod's container as kubectl
//! copies them, tar over exec. Out of the pod: `tar cf - -C DIR NAME`, read
//! here with every entry kept inside the destination. Into it: an archive
//! made here, through `head -c SIZE | tar -xmf - -C DIR` (the runtime's
//! WebSocket protocol cannot end the command's stdin, `head` ends it).

use std::path::Path;

use crate::api::pb::api;
use crate::cli::args::Args;
use crate::cli::error::{CliError, Result, usage};
use crate::cli::stream::{Conn, Input, session};
use crate::cli::tar;

/// The largest archive `cp` holds in memory, either way.
const MAX_ARCHIVE: usize = 1 << 30;

/// `[NS/]POD:PATH`: (namespace, pod, path); `None` for a local path.
fn remote(arg: &str) -> Option<(Option<String>, String, String)> {
    if arg.starts_with('/') || arg.starts_with('.') {
        return None;
    }
    let (pod, path) = arg.split_once(':')?;
    let (ns, pod) = match pod.split_once('/') {
        Some((ns, pod)) => (Some(ns.to_string()), pod.to_string()),
        None => (None, pod.to_string()),
    };
    (!pod.is_empty()).then_some((ns, pod, path.to_string()))
}

/// (directory, name) of a path in the container.
fn split(path: &str) -> (String, String) {
    let trimmed = path.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        Some(("", name)) => ("/".into(), name.into()),
        Some((dir, name)) => (dir.into(), name.into()),
        None => (".".into(), trimmed.into()),
    }
}

pub(super) fn cp(a: &Args) -> Result<()> {
    let [src, dst] = a.rest.as_slice() else {
        return Err(usage("cp: give a source and a destination, one of them [NAMESPACE/]POD:PATH"));
    };
    match (remote(src), remote(dst)) {
        (Some(r), None) => from_pod(a, r, Path::new(dst)),
        (None, Some(r)) => to_pod(a, Path::new(src), r),
        (Some(_), Some(_)) => Err(usage("cp: one side must be a local path (podwarden does not copy pod to pod)")),
        (None, None) => Err(usage("cp: one side must be [NAMESPACE/]POD:PATH")),
    }
}

/// Run `command` in the pod with `input` as stdin: its stdout (at most
/// [`MAX_ARCHIVE`] bytes) if it exits 0.
fn run(a: &Args, ns: &str, pod: &str, command: Vec<String>, input: Option<Vec<u8>>) -> Result<Vec<u8>> {
    let req = api::StreamRequest {
        pod: protobuf::MessageField::some(api::PodRef { namespace: ns.into(), name: pod.into(), ..Default::default() }),
        container: a.container.clone().unwrap_or_default(),
        command: command.clone(),
        stdin: input.is_some(),
        stdout: true,
        stderr: true,
        ..Default::default()
    };
    let url = a.client()?.stream("exec", &req)?.url;
    let mut conn = Conn::open(&url, "")?;
    let mut out = Limited(Vec::new());
    let mut err = Limited(Vec::new());
    let input = input.map_or(Input::None, |b| Input::Bytes(b, 0));
    let code = session(&mut conn, input, false, &mut out, &mut err)?;
    if code != 0 {
        return Err(CliError::Stream(format!(
            "cp: {} in pod {ns}/{pod} failed (exit {code}): {}",
            command.join(" "),
            String::from_utf8_lossy(&err.0).trim()
        )));
    }
    Ok(out.0)
}

/// A buffer that refuses to grow past [`MAX_ARCHIVE`].
struct Limited(Vec<u8>);

impl std::io::Write for Limited {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + b.len() > MAX_ARCHIVE {
            return Err(std::io::Error::other(format!("more than {MAX_ARCHIVE} bytes")));
        }
        self.0.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn from_pod(a: &Args, (ns, pod, path): (Option<String>, String, String), dest: &Path) -> Result<()> {
    if path.is_empty() {
        return Err(usage("cp: name the path in the pod (POD:PATH)"));
    }
    let ns = ns.unwrap_or_else(|| a.ns());
    let (dir, name) = split(&path);
    let archive = run(a, &ns, &pod, vec!["tar".into(), "cf".into(), "-".into(), "-C".into(), dir, name.clone()], None)?;
    tar::extract(&archive, &name, dest).map_err(|e| CliError::Stream(format!("cp: {ns}/{pod}:{path}: {e}")))?;
    Ok(())
}

fn to_pod(a: &Args, src: &Path, (ns, pod, path): (Option<String>, String, String)) -> Result<()> {
    let ns = ns.unwrap_or_else(|| a.ns());
    let local_name = src.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| ".".into());
    // `pod:/dir/` (or an empty path): into that directory under the local name
    let (dir, name) = if path.is_empty() || path.ends_with('/') {
        (if path.is_empty() { ".".to_string() } else { path.clone() }, local_name)
    } else {
        split(&path)
    };
    let archive = tar::archive(src, &name, MAX_ARCHIVE).map_err(|e| CliError::Stream(format!("cp: {e}")))?;
    let script = "head -c \"$1\" | tar -xmf - -C \"$0\"";
    let command = vec!["sh".into(), "-c".into(), script.into(), dir, archive.len().to_string()];
    run(a, &ns, &pod, command, Some(archive))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_paths_as_kubectl_reads_them() {
        assert_eq!(remote("web:/tmp/x"), Some((None, "web".into(), "/tmp/x".into())));
        assert_eq!(remote("e2e/web:/tmp/x"), Some((Some("e2e".into()), "web".into(), "/tmp/x".into())));
        assert_eq!(remote("/local/a:b"), None);
        assert_eq!(remote("./a:b"), None);
        assert_eq!(remote("plain"), None);
        assert_eq!(split("/tmp/x"), ("/tmp".into(), "x".into()));
        assert_eq!(split("/x/"), ("/".into(), "x".into()));
        assert_eq!(split("x"), (".".into(), "x".into()));
    }
}

//! Volume set-up that needs the host: tmpfs for `emptyDir.medium: Memory`,
//! `hostPath` type checks, and unmounting what a pod left before its
//! directory is removed.

use std::ffi::CString;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Why a volume could not be set up (the pod's FailedMount event).
#[derive(Debug, Error)]
pub enum VolumeError {
    #[error("{} holds a NUL byte", .0.display())]
    NulInPath(PathBuf),
    #[error("mounting tmpfs at {}: {source}", path.display())]
    Mount {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("hostPath {path} is not {what} (type {kind})")]
    WrongType { path: String, what: &'static str, kind: String },
    #[error("creating {}: {source}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("creating hostPath {path}: {source}")]
    CreateHostPath {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("hostPath {path} (type {kind}): {source}")]
    Missing {
        path: String,
        kind: String,
        #[source]
        source: std::io::Error,
    },
    #[error("unknown hostPath type {0:?}")]
    UnknownType(String),
}

fn cstr(p: &Path) -> Result<CString, VolumeError> {
    CString::new(p.as_os_str().as_encoded_bytes()).map_err(|_| VolumeError::NulInPath(p.to_path_buf()))
}

fn is_mount_point(p: &Path) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else { return false };
    let want = p.display().to_string();
    mounts.lines().any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
}

/// Mount a tmpfs at `p` (once), limited to `limit` bytes if given.
pub fn mount_tmpfs(p: &Path, limit: Option<i64>) -> Result<(), VolumeError> {
    if is_mount_point(p) {
        return Ok(());
    }
    let target = cstr(p)?;
    let opts = CString::new(match limit {
        Some(b) if b > 0 => format!("mode=0777,size={b}"),
        _ => "mode=0777".into(),
    })
    .expect("no NUL");
    crate::sys::mount_tmpfs(&target, &opts).map_err(|source| VolumeError::Mount { path: p.to_path_buf(), source })
}

/// Unmount every mount at or below `dir` (deepest first).
pub fn unmount_all_under(dir: &Path) {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else { return };
    let prefix = dir.display().to_string();
    let mut targets: Vec<&str> = mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|m| *m == prefix || m.starts_with(&format!("{prefix}/")))
        .collect();
    targets.sort_by_key(|t| std::cmp::Reverse(t.len()));
    for t in targets {
        if let Ok(c) = CString::new(t)
            && let Err(e) = crate::sys::unmount_detach(&c)
        {
            log::warn!("cannot unmount {t}: {e}");
        }
    }
}

/// Check (or create) a hostPath volume by its `type`, as the kubelet does.
pub fn check_host_path(path: &str, kind: &str) -> Result<(), VolumeError> {
    let p = Path::new(path);
    let meta = std::fs::metadata(p);
    let want = |ok: bool, what: &'static str| {
        if ok { Ok(()) } else { Err(VolumeError::WrongType { path: path.into(), what, kind: kind.into() }) }
    };
    let create_host_path = |source| VolumeError::CreateHostPath { path: path.into(), source };
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" => match meta {
            Ok(m) => want(m.is_dir(), "a directory"),
            // 0755 as the kubelet creates it (with its usual umask 022)
            Err(_) => crate::fsutil::create_dir_mode(p, 0o755).map_err(create_host_path),
        },
        "FileOrCreate" => match meta {
            Ok(m) => want(m.is_file(), "a file"),
            Err(_) => {
                if let Some(parent) = p.parent() {
                    std::fs::create_dir_all(parent)
                        .map_err(|source| VolumeError::Create { path: parent.to_path_buf(), source })?;
                }
                // 0644 as the kubelet creates it (with its usual umask 022)
                use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o644)
                    .open(p)
                    .and_then(|f| f.set_permissions(std::fs::Permissions::from_mode(0o644)))
                    .map_err(create_host_path)
            }
        },
        other => {
            let m = meta.map_err(|source| VolumeError::Missing { path: path.into(), kind: other.into(), source })?;
            let ft = m.file_type();
            match other {
                "Directory" => want(ft.is_dir(), "a directory"),
                "File" => want(ft.is_file(), "a file"),
                "Socket" => want(ft.is_socket(), "a socket"),
                "CharDevice" => want(ft.is_char_device(), "a character device"),
                "BlockDevice" => want(ft.is_block_device(), "a block device"),
                _ => Err(VolumeError::UnknownType(other.into())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_path_types() {
        let d = std::env::temp_dir().join(format!("pw-hostpath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let dir = d.join("made");
        assert!(check_host_path(dir.to_str().unwrap(), "Directory").is_err());
        assert!(check_host_path(dir.to_str().unwrap(), "DirectoryOrCreate").is_ok());
        assert!(dir.is_dir());
        assert!(check_host_path(dir.to_str().unwrap(), "File").is_err());
        let f = d.join("f/file");
        assert!(check_host_path(f.to_str().unwrap(), "FileOrCreate").is_ok());
        assert!(check_host_path(f.to_str().unwrap(), "File").is_ok());
        assert!(check_host_path(f.to_str().unwrap(), "DirectoryOrCreate").is_err());
        assert!(check_host_path("/dev/null", "CharDevice").is_ok());
        let e = check_host_path("/dev/null", "Socket").unwrap_err();
        assert_eq!(e.to_string(), "hostPath /dev/null is not a socket (type Socket)");
        assert!(check_host_path("/anything", "").is_ok());
        assert!(check_host_path("/", "Weird").is_err());
        let _ = std::fs::remove_dir_all(&d);
    }
}

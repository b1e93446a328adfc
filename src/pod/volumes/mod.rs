//! Volume set-up that needs the host: tmpfs for `emptyDir.medium: Memory`,
//! hugetlbfs for `medium: HugePages` and `HugePages-<size>`, `hostPath`
//! type checks, and unmounting what a pod left before its directory is
//! removed.

pub mod atomic_writer;
pub mod projection;
pub mod usage;

use std::ffi::CString;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Entries an `fsGroup` ownership walk changes at most (a volume is new or
/// small when it runs; this bounds a pathological one).
pub const OWNERSHIP_MAX_ENTRIES: usize = 100_000;

/// The permission bits `fsGroup` adds: group read (and write unless the
/// volume is read-only); directories also group search and setgid.
fn ownership_mask(read_only: bool) -> u32 {
    if read_only { 0o440 } else { 0o660 }
}

/// Whether volume `dir` already has `fsGroup` ownership at its root (group
/// `gid`, the mask's bits, setgid): `fsGroupChangePolicy: OnRootMismatch`
/// then skips the walk.
pub fn owned_at_root(dir: &Path, gid: u32, read_only: bool) -> bool {
    use std::os::unix::fs::MetadataExt;
    let want = ownership_mask(read_only) | 0o110 | 0o2000;
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.gid() == gid && m.mode() & want == want)
}

/// The kubelet's `SetVolumeOwnership`: every entry of `dir` (depth
/// first, children before their directory, links not followed) gets group
/// `gid`; files and directories get the mask's bits, directories also
/// group search and setgid, so what containers create inherits the group.
/// At most [`OWNERSHIP_MAX_ENTRIES`] entries.
pub fn set_ownership(dir: &Path, gid: u32, read_only: bool) -> std::io::Result<usize> {
    use std::os::unix::fs::PermissionsExt;
    let mask = ownership_mask(read_only);
    let mut done = 0usize;
    // (path, children listed)
    let mut stack = vec![(dir.to_path_buf(), false)];
    while let Some((p, listed)) = stack.pop() {
        let m = std::fs::symlink_metadata(&p)?;
        if m.is_dir() && !listed {
            stack.push((p.clone(), true));
            for e in std::fs::read_dir(&p)? {
                stack.push((e?.path(), false));
            }
            continue;
        }
        done += 1;
        if done > OWNERSHIP_MAX_ENTRIES {
            return Err(std::io::Error::other(format!(
                "more than {OWNERSHIP_MAX_ENTRIES} entries under {}",
                dir.display()
            )));
        }
        std::os::unix::fs::lchown(&p, None, Some(gid))?;
        if m.file_type().is_symlink() {
            continue;
        }
        let mut mode = m.permissions().mode() & 0o7777 | mask;
        if m.is_dir() {
            mode |= 0o110 | 0o2000;
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(done)
}

/// A volume of the pod that could not be set up: the text of the pod's
/// `FailedMount` event (and of the set-up pass's error).
#[derive(Debug, Error)]
pub enum MountError {
    /// An emptyDir or hostPath that failed its checks or its mount.
    #[error("volume {volume:?}: {source}")]
    Volume {
        volume: String,
        #[source]
        source: VolumeError,
    },
    /// A volume whose files podwarden writes, or whose group it sets (the
    /// kubelet's `MountVolume.SetUp failed` text).
    #[error("MountVolume.SetUp failed for volume {volume:?} : {source}")]
    SetUp {
        volume: String,
        #[source]
        source: SetUpError,
    },
}

/// What failed in a volume's `MountVolume.SetUp`.
#[derive(Debug, Error)]
pub enum SetUpError {
    #[error("creating {}: {source}", dir.display())]
    CreateDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Tmpfs(VolumeError),
    #[error(transparent)]
    Payload(projection::PayloadError),
    #[error("writing {}: {source}", dir.display())]
    Write {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("setting fsGroup {gid}: {source}")]
    FsGroup {
        gid: u32,
        #[source]
        source: std::io::Error,
    },
}

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
    #[error("mounting hugetlbfs (pagesize={page_size}) at {}: {source}", path.display())]
    MountHugetlbfs {
        path: PathBuf,
        page_size: u64,
        #[source]
        source: std::io::Error,
    },
    /// The kubelet's texts for a `HugePages` medium the pod's requests do
    /// not settle.
    #[error("medium: {0} can't be used if container requests multiple huge page sizes")]
    HugePagesSizes(String),
    #[error("medium {0}: hugePages storage requested, but there is no resource request for huge pages")]
    HugePagesNoRequest(String),
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
    /// The subPath resolves (through symlinks in the volume) to a place
    /// outside the volume.
    #[error("subPath {sub:?} resolves outside its volume ({})", resolved.display())]
    SubPathOutside { sub: String, resolved: PathBuf },
    #[error("bind-mounting the subPath at {}: {source}", path.display())]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("subPath {sub:?}: {source}")]
    SubPath {
        sub: String,
        #[source]
        source: std::io::Error,
    },
}

fn cstr(p: &Path) -> Result<CString, VolumeError> {
    CString::new(p.as_os_str().as_encoded_bytes()).map_err(|_| VolumeError::NulInPath(p.to_path_buf()))
}

/// The mount points at or below `dir` (`None`: the mount table cannot be
/// read).
fn mounts_under(dir: &Path) -> Option<Vec<String>> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let prefix = dir.display().to_string();
    let below = format!("{prefix}/");
    Some(
        mounts
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter(|m| *m == prefix || m.starts_with(&below))
            .map(String::from)
            .collect(),
    )
}

fn is_mount_point(p: &Path) -> bool {
    let want = p.display().to_string();
    mounts_under(p).is_some_and(|m| m.contains(&want))
}

/// Whether `p` is on another device than its parent (a mount of another
/// filesystem there).
fn has_own_device(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::symlink_metadata(p), p.parent().map(std::fs::symlink_metadata)) {
        (Ok(a), Some(Ok(b))) => a.dev() != b.dev(),
        _ => false,
    }
}

/// Mount a tmpfs at `p` (once), limited to `limit` bytes if given, its
/// root directory with `mode`.
pub fn mount_tmpfs(p: &Path, limit: Option<i64>, mode: u32) -> Result<(), VolumeError> {
    // every set-up pass asks: a tmpfs has a device of its own, so two stats
    // answer (the mount table, read for bind mounts, grows with the pods)
    if has_own_device(p) {
        return Ok(());
    }
    let target = cstr(p)?;
    let opts = CString::new(match limit {
        Some(b) if b > 0 => format!("mode={mode:04o},size={b}"),
        _ => format!("mode={mode:04o}"),
    })
    .expect("no NUL");
    crate::sys::mount_tmpfs(&target, &opts).map_err(|source| VolumeError::Mount { path: p.to_path_buf(), source })
}

/// The page size (bytes) of an emptyDir with a huge pages `medium`, as
/// the kubelet settles it from the pod's containers and init containers:
/// `HugePages-<size>` needs a container asking for `hugepages-<size>`;
/// `HugePages` takes the one size they ask for (more than one is an
/// error).
pub fn hugepages_page_size(medium: &str, pod: &crate::model::Pod) -> Result<u64, VolumeError> {
    let wanted = crate::model::manifest::hugepages_medium_size(medium).unwrap_or(0);
    let mut found: Option<u64> = None;
    for c in crate::model::all_containers(pod) {
        let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        for name in requests.into_iter().flat_map(|r| r.keys()) {
            let Some(size) = name.strip_prefix("hugepages-") else { continue };
            let Some(size) = crate::model::quantity::bytes(size).ok().and_then(|b| u64::try_from(b).ok()) else {
                continue;
            };
            if wanted == 0 {
                if found.is_some_and(|f| f != size) {
                    return Err(VolumeError::HugePagesSizes(medium.to_string()));
                }
                found = Some(size);
            } else if size == wanted {
                found = Some(size);
            }
        }
    }
    found.ok_or_else(|| VolumeError::HugePagesNoRequest(medium.to_string()))
}

/// Mount a hugetlbfs of `page_size` pages at `p` (once), its root
/// directory with `mode`.
pub fn mount_hugetlbfs(p: &Path, page_size: u64, mode: u32) -> Result<(), VolumeError> {
    if has_own_device(p) {
        return Ok(());
    }
    let target = cstr(p)?;
    let opts = CString::new(format!("pagesize={page_size},mode={mode:04o}")).expect("no NUL");
    crate::sys::mount_hugetlbfs(&target, &opts).map_err(|source| VolumeError::MountHugetlbfs {
        path: p.to_path_buf(),
        page_size,
        source,
    })
}

/// Make `sub` (a relative path without `..`) of the volume at `volume`
/// available at `target`, as the kubelet does for `subPath`: symlinks in
/// the volume may be followed only while they stay inside it; the path is
/// then opened component by component without following any link, and the
/// opened object is bind-mounted onto `target` from its descriptor. A
/// container that swaps a component for a symlink meanwhile gets an error,
/// never a mount of something outside the volume. A missing subPath is
/// created as a directory (0755). `target` is made (an empty file or
/// directory) under the pod's directory; a mount already there is replaced.
pub fn prepare_subpath(volume: &Path, sub: &str, target: &Path) -> Result<(), VolumeError> {
    use std::os::fd::AsFd;
    let io = |source| VolumeError::SubPath { sub: sub.into(), source };
    let root = std::fs::canonicalize(volume).map_err(io)?;
    // the existing part, resolved, must stay inside the volume
    let full = root.join(sub);
    let mut existing = full.clone();
    while std::fs::symlink_metadata(&existing).is_err() && existing != root {
        existing.pop();
    }
    let resolved = std::fs::canonicalize(&existing).map_err(io)?;
    let Ok(inside) = resolved.strip_prefix(&root) else {
        return Err(VolumeError::SubPathOutside { sub: sub.into(), resolved });
    };
    let missing = full.strip_prefix(&existing).map_err(|_| io(std::io::ErrorKind::InvalidInput.into()))?;
    let name =
        |c: &std::ffi::OsStr| CString::new(c.as_encoded_bytes()).map_err(|_| VolumeError::NulInPath(full.clone()));
    // walk the resolved path without following anything, creating what is
    // missing as directories
    let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let root_c = cstr(&root)?;
    let mut fd = crate::sys::openat(None, &root_c, flags | libc::O_DIRECTORY).map_err(io)?;
    for c in inside.components().chain(missing.components()) {
        let n = name(c.as_os_str())?;
        fd = match crate::sys::openat(Some(fd.as_fd()), &n, flags) {
            Ok(next) => next,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                crate::sys::mkdirat(fd.as_fd(), &n, 0o755).map_err(io)?;
                let dir = crate::sys::openat(
                    Some(fd.as_fd()),
                    &n,
                    libc::O_RDONLY | libc::O_DIRECTORY | flags & !libc::O_PATH,
                )
                .map_err(io)?;
                // 0755 whatever the umask, as the kubelet makes it
                use std::os::unix::fs::PermissionsExt;
                std::fs::File::from(dir).set_permissions(std::fs::Permissions::from_mode(0o755)).map_err(io)?;
                crate::sys::openat(Some(fd.as_fd()), &n, flags).map_err(io)?
            }
            Err(e) => return Err(io(e)),
        };
        let st = crate::sys::fstat(fd.as_fd()).map_err(io)?;
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            // a symlink where the resolved path had none: it changed
            return Err(io(std::io::Error::from_raw_os_error(libc::ELOOP)));
        }
    }
    let st = crate::sys::fstat(fd.as_fd()).map_err(io)?;
    let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    let create = |source| VolumeError::Create { path: target.to_path_buf(), source };
    if is_mount_point(target) {
        crate::sys::unmount_detach(&cstr(target)?).map_err(create)?;
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(create)?;
    }
    match std::fs::symlink_metadata(target) {
        Ok(m) if m.is_dir() == is_dir && !m.file_type().is_symlink() => {}
        Ok(_) => {
            return Err(create(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "in the way")));
        }
        Err(_) if is_dir => std::fs::create_dir(target).map_err(create)?,
        Err(_) => {
            std::fs::OpenOptions::new().write(true).create_new(true).open(target).map_err(create)?;
        }
    }
    crate::sys::bind_mount_fd(fd.as_fd(), &cstr(target)?)
        .map_err(|source| VolumeError::Bind { path: target.to_path_buf(), source })
}

/// Whether anything is still mounted at or below `dir`: its content must
/// then not be removed (it would reach into what is mounted there).
pub fn has_mounts_under(dir: &Path) -> bool {
    mounts_under(dir).is_none_or(|m| !m.is_empty())
}

/// Unmount every mount at or below `dir` (deepest first).
pub fn unmount_all_under(dir: &Path) {
    let Some(mut targets) = mounts_under(dir) else { return };
    targets.sort_by_key(|t| std::cmp::Reverse(t.len()));
    for t in targets {
        if let Ok(c) = CString::new(t.as_str())
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
            Err(_) => crate::base::fsutil::create_dir_mode(p, 0o755).map_err(create_host_path),
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
    fn hugepages_page_size_from_the_pods_requests() {
        let pod = |reqs: &[&str]| -> crate::model::Pod {
            let containers: Vec<serde_json::Value> = reqs
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let mut m = serde_json::Map::new();
                    if !r.is_empty() {
                        m.insert(format!("hugepages-{r}"), serde_json::json!("4Mi"));
                    }
                    serde_json::json!({"name": format!("c{i}"), "resources": {"requests": m, "limits": m}})
                })
                .collect();
            serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": containers}}))
                .unwrap()
        };
        assert_eq!(hugepages_page_size("HugePages", &pod(&["2Mi", ""])).unwrap(), 2 << 20);
        assert_eq!(hugepages_page_size("HugePages-1Gi", &pod(&["2Mi", "1Gi"])).unwrap(), 1 << 30);
        assert_eq!(
            hugepages_page_size("HugePages", &pod(&["2Mi", "1Gi"])).unwrap_err().to_string(),
            "medium: HugePages can't be used if container requests multiple huge page sizes"
        );
        assert_eq!(
            hugepages_page_size("HugePages-2Mi", &pod(&["1Gi"])).unwrap_err().to_string(),
            "medium HugePages-2Mi: hugePages storage requested, but there is no resource request for huge pages"
        );
        assert!(matches!(hugepages_page_size("HugePages", &pod(&[""])), Err(VolumeError::HugePagesNoRequest(_))));
    }

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

    /// subPath as the kubelet prepares it (a real bind mount: needs root,
    /// as the test script runs the suite).
    #[test]
    fn sub_paths_stay_inside_their_volume() {
        let d = std::env::temp_dir().join(format!("pw-subpath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let vol = d.join("vol");
        std::fs::create_dir_all(vol.join("conf")).unwrap();
        std::fs::write(vol.join("conf/app.ini"), "x=1\n").unwrap();
        std::os::unix::fs::symlink("conf", vol.join("inside")).unwrap();
        std::os::unix::fs::symlink("/etc", vol.join("escape")).unwrap();
        std::os::unix::fs::symlink("../../..", vol.join("conf/up")).unwrap();
        let t = |n: &str| d.join("targets").join(n);
        // a file, through a symlink that stays inside
        prepare_subpath(&vol, "inside/app.ini", &t("file")).unwrap();
        assert_eq!(std::fs::read_to_string(t("file")).unwrap(), "x=1\n");
        // prepared again (a container restart): the mount is replaced
        prepare_subpath(&vol, "inside/app.ini", &t("file")).unwrap();
        // a missing directory is made, 0755
        prepare_subpath(&vol, "data/new", &t("dir")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(vol.join("data/new")).unwrap().permissions().mode() & 0o777, 0o755);
        std::fs::write(t("dir").join("w"), "y").unwrap();
        assert_eq!(std::fs::read_to_string(vol.join("data/new/w")).unwrap(), "y");
        // symlinks that lead out are refused, naming where they lead
        for sub in ["escape", "escape/passwd", "conf/up/etc"] {
            let e = prepare_subpath(&vol, sub, &t("bad")).unwrap_err();
            assert!(matches!(e, VolumeError::SubPathOutside { .. }), "{sub}: {e}");
        }
        assert_eq!(
            prepare_subpath(&vol, "escape", &t("bad")).unwrap_err().to_string(),
            "subPath \"escape\" resolves outside its volume (/etc)"
        );
        assert!(!is_mount_point(&t("bad")));
        assert!(has_mounts_under(&d));
        unmount_all_under(&d);
        assert!(!has_mounts_under(&d));
        std::fs::remove_dir_all(&d).unwrap();
        // the volume's content was not touched by removing the targets
    }
}

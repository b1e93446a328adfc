//! Writing a volume's files the way the kubelet's atomic writer does, so a
//! container never reads a torn or half-updated set: every version is a
//! complete timestamped directory (`..2026_11_23_10_00_00.123`), `..data`
//! is a symlink to the current one, each top-level name is a symlink
//! through `..data` (`key -> ..data/key`), and an update switches `..data`
//! to the next directory with one `rename`.
//!
//! Only podwarden writes here (containers get the volume read-only), but
//! nothing read back is followed: the old version is walked without
//! following links.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const DATA_DIR: &str = "..data";
const NEW_DATA_DIR: &str = "..data_tmp";
const MAX_PATH: usize = 4096;
const MAX_NAME: usize = 255;

/// One file of a volume: its bytes and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileData {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// A volume's content: relative path -> file.
pub type Payload = BTreeMap<String, FileData>;

/// Why a payload path is refused (the kubelet's writer's messages).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PathError {
    #[error("invalid path: must not be empty: {0:?}")]
    Empty(String),
    #[error("invalid path: must be relative path: {0}")]
    Absolute(String),
    #[error("invalid path: must be less than or equal to {MAX_PATH} characters")]
    TooLong,
    #[error("invalid path: must not contain a NUL byte: {0:?}")]
    Nul(String),
    #[error("invalid path: must not contain '..': {0}")]
    DotDot(String),
    #[error("invalid path: filenames must be less than or equal to {MAX_NAME} characters")]
    NameTooLong,
    #[error("invalid path: must not start with '..': {0}")]
    DotDotStart(String),
}

/// Check a payload path as the kubelet's writer does (its messages).
pub fn check_path(p: &str) -> Result<(), PathError> {
    if p.is_empty() {
        return Err(PathError::Empty(p.to_string()));
    }
    if p.starts_with('/') {
        return Err(PathError::Absolute(p.to_string()));
    }
    if p.len() > MAX_PATH {
        return Err(PathError::TooLong);
    }
    if p.contains('\0') {
        return Err(PathError::Nul(p.to_string()));
    }
    let parts: Vec<&str> = p.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    if parts.contains(&"..") {
        return Err(PathError::DotDot(p.to_string()));
    }
    if parts.iter().any(|c| c.len() > MAX_NAME) {
        return Err(PathError::NameTooLong);
    }
    if parts.first().is_some_and(|c| c.starts_with("..")) {
        return Err(PathError::DotDotStart(p.to_string()));
    }
    if parts.is_empty() {
        return Err(PathError::Empty(p.to_string()));
    }
    Ok(())
}

/// `p` with `.` and empty components removed (`filepath.Clean` for a
/// checked relative path).
pub fn clean(p: &str) -> String {
    Path::new(p)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The files of a version directory (relative paths), walked without
/// following links, and every directory on their way.
fn read_version(dir: &Path) -> std::io::Result<(BTreeMap<String, FileData>, BTreeSet<String>)> {
    let mut files = BTreeMap::new();
    let mut dirs = BTreeSet::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, rel)) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            let ft = e.file_type()?;
            if ft.is_dir() {
                dirs.insert(r.clone());
                stack.push((e.path(), r));
            } else if ft.is_file() {
                let meta = e.metadata()?;
                let data = std::fs::read(e.path())?;
                files.insert(r, FileData { data, mode: meta.permissions().mode() & 0o7777 });
            }
        }
    }
    Ok((files, dirs))
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Make a new version directory in `target`, named as the kubelet names
/// them.
fn new_version_dir(target: &Path) -> std::io::Result<String> {
    let stamp = k8s_openapi::jiff::Timestamp::now().strftime("..%Y_%m_%d_%H_%M_%S").to_string();
    loop {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let name = format!("{stamp}.{}{nanos:09}{n}", std::process::id());
        match std::fs::DirBuilder::new().mode(0o755).create(target.join(&name)) {
            Ok(()) => {
                std::fs::set_permissions(target.join(&name), std::fs::Permissions::from_mode(0o755))?;
                return Ok(name);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Write `payload` into the volume directory `target` (which exists).
/// Returns whether anything changed; an identical payload writes nothing.
/// Paths must have passed [`check_path`].
pub fn write(target: &Path, payload: &Payload) -> std::io::Result<bool> {
    let payload: Payload = payload.iter().map(|(k, v)| (clean(k), v.clone())).collect();
    let old = match std::fs::read_link(target.join(DATA_DIR)) {
        Ok(p) => Some(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let mut to_remove: BTreeSet<String> = BTreeSet::new();
    if let Some(old) = &old {
        let (files, dirs) = read_version(&target.join(old))?;
        if files == payload && dirs.iter().all(|d| payload.keys().any(|k| k.starts_with(&format!("{d}/")))) {
            return Ok(false);
        }
        let mut wanted: BTreeSet<String> = BTreeSet::new();
        for k in payload.keys() {
            let mut p = PathBuf::new();
            for c in k.split('/') {
                p.push(c);
                wanted.insert(p.to_string_lossy().into_owned());
            }
        }
        to_remove = files.keys().chain(dirs.iter()).filter(|p| !wanted.contains(*p)).cloned().collect();
    }
    let version = new_version_dir(target)?;
    let vdir = target.join(&version);
    let written = (|| -> std::io::Result<()> {
        for (rel, f) in &payload {
            let path = vdir.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::DirBuilder::new().recursive(true).mode(0o755).create(parent)?;
            }
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)?;
            file.write_all(&f.data)?;
            // the mode exactly, whatever the umask
            file.set_permissions(std::fs::Permissions::from_mode(f.mode))?;
        }
        // the names containers see: one link per top-level name, through
        // ..data (nested paths resolve through their top directory's link)
        for rel in payload.keys() {
            let first = rel.split('/').next().unwrap_or(rel);
            let link = target.join(first);
            match std::fs::symlink_metadata(&link) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    std::os::unix::fs::symlink(Path::new(DATA_DIR).join(first), &link)?
                }
                Err(e) => return Err(e),
            }
        }
        let tmp = target.join(NEW_DATA_DIR);
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        std::os::unix::fs::symlink(&version, &tmp)?;
        // the switch: readers see the old version or the new one
        std::fs::rename(&tmp, target.join(DATA_DIR))
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&vdir);
        return Err(e);
    }
    for p in to_remove.iter().filter(|p| !p.contains('/')) {
        if let Err(e) = std::fs::remove_file(target.join(p)) {
            log::warn!("{}: removing {p}: {e}", target.display());
        }
    }
    if let Some(old) = old {
        let old = target.join(old);
        // only a version directory of ours, never a path elsewhere
        if old.parent() == Some(target) {
            let _ = std::fs::remove_dir_all(old);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pw-aw-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn payload(items: &[(&str, &str, u32)]) -> Payload {
        items.iter().map(|(k, v, m)| (k.to_string(), FileData { data: v.as_bytes().to_vec(), mode: *m })).collect()
    }

    #[test]
    fn layout_updates_and_removals() {
        use std::os::unix::fs::MetadataExt;
        let d = tmp("layout");
        assert!(write(&d, &payload(&[("a", "1", 0o644), ("dir/b", "2", 0o400)])).unwrap());
        assert_eq!(std::fs::read_link(d.join("a")).unwrap(), Path::new("..data/a"));
        assert_eq!(std::fs::read_link(d.join("dir")).unwrap(), Path::new("..data/dir"));
        assert_eq!(std::fs::read_to_string(d.join("dir/b")).unwrap(), "2");
        assert_eq!(std::fs::metadata(d.join("dir/b")).unwrap().mode() & 0o777, 0o400);
        assert_eq!(std::fs::metadata(d.join("a")).unwrap().mode() & 0o777, 0o644);
        let v1 = std::fs::read_link(d.join("..data")).unwrap();
        assert!(v1.to_str().unwrap().starts_with("..20"), "{v1:?}");
        // the same content: nothing written
        assert!(!write(&d, &payload(&[("a", "1", 0o644), ("dir/b", "2", 0o400)])).unwrap());
        assert_eq!(std::fs::read_link(d.join("..data")).unwrap(), v1);
        // an edit and a removal: a new version, the old one gone
        assert!(write(&d, &payload(&[("a", "3", 0o644)])).unwrap());
        let v2 = std::fs::read_link(d.join("..data")).unwrap();
        assert_ne!(v1, v2);
        assert!(!d.join(&v1).exists());
        assert_eq!(std::fs::read_to_string(d.join("a")).unwrap(), "3");
        assert!(std::fs::symlink_metadata(d.join("dir")).is_err(), "the removed name's link is gone");
        let names: BTreeSet<String> =
            std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(names, [String::from("..data"), "a".into(), v2.to_string_lossy().into_owned()].into());
        // a mode change alone is written
        assert!(write(&d, &payload(&[("a", "3", 0o600)])).unwrap());
        assert_eq!(std::fs::metadata(d.join("a")).unwrap().mode() & 0o777, 0o600);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn readers_never_see_a_torn_version() {
        let d = tmp("torn");
        let big = |c: char| c.to_string().repeat(64 * 1024);
        write(&d, &payload(&[("k", &big('a'), 0o644)])).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (d2, stop2) = (d.clone(), stop.clone());
        let reader = crate::base::thread::spawn("torn-reader", None, move || {
            let mut reads = 0;
            while !stop2.load(Ordering::Relaxed) {
                if let Ok(s) = std::fs::read_to_string(d2.join("k")) {
                    let first = s.chars().next().unwrap();
                    assert!(s.len() == 64 * 1024 && s.chars().all(|c| c == first), "torn read");
                    reads += 1;
                }
            }
            reads
        })
        .unwrap();
        for i in 0..200 {
            write(&d, &payload(&[("k", &big(if i % 2 == 0 { 'b' } else { 'c' }), 0o644)])).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn paths_are_checked_with_the_kubelet_messages() {
        assert!(check_path("a/b.conf").is_ok());
        assert!(check_path("./a").is_ok());
        let err = |p: &str| check_path(p).unwrap_err().to_string();
        assert_eq!(err(""), "invalid path: must not be empty: \"\"");
        assert_eq!(err("/etc/x"), "invalid path: must be relative path: /etc/x");
        assert_eq!(err("a/../../x"), "invalid path: must not contain '..': a/../../x");
        assert_eq!(err("..data"), "invalid path: must not start with '..': ..data");
        assert!(err(&"x".repeat(256)).contains("255"));
        assert_eq!(clean("./a//b/"), "a/b");
    }
}

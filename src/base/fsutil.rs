//! Files podwarden reads and writes, with their boundaries held.
//!
//! Writing: readers see the old content or the new, never a half-written
//! file, and the file has its final mode from the moment it exists (the
//! temporary file is created with it; nothing is chmod'ed wider after the
//! rename).
//!
//! Reading: every file another party may have put in place (manifests in
//! `staticPodPath`, container logs, termination messages) is opened with
//! [`open_regular_in`]: without following symlinks out of the directory it
//! belongs to, non-blocking, checked to be a regular file before a byte is
//! read, and read with a size bound. A FIFO, a device or a symlink to
//! `/dev/zero` is an error at once, never a hang or an unbounded read.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use thiserror::Error;

/// Mode of the files podwarden writes for itself (manifests, state):
/// root only. apiGroup members read pods through the API, not the files.
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// Write `bytes` to `path` with mode 0600 (see [`write_atomically_mode`]).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomically_mode(path, bytes, PRIVATE_FILE_MODE)
}

/// Write `bytes` to `path` through `.<name>.tmp` in the same directory,
/// created with `mode` (the process umask cannot widen it; a mode wider
/// than the umask allows is set on the temporary file before it gets its
/// name), synced, then renamed over `path` (the directory synced too).
pub fn write_atomically_mode(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let tmp = write_tmp(path, bytes, mode)?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(path)
}

/// Like [`write_atomically`], but fails with `AlreadyExists` instead of
/// replacing a file that exists at `path` (`renameat2(RENAME_NOREPLACE)`):
/// a file created by someone else meanwhile is never overwritten.
pub fn write_new_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = write_tmp(path, bytes, PRIVATE_FILE_MODE)?;
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other);
    let (from, to) = (c(&tmp)?, c(path)?);
    if let Err(e) = crate::sys::rename_noreplace(&from, &to) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(path)
}

fn write_tmp(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<PathBuf> {
    let dir = path.parent().ok_or_else(|| std::io::Error::other(format!("{} has no directory", path.display())))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp"));
    // a leftover (or planted) temporary file: never write through it
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)?;
    // the umask may have narrowed `mode` (UMask=0077); widen it back on
    // the still private temporary file
    if f.metadata()?.permissions().mode() & 0o7777 != mode {
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(tmp)
}

fn sync_dir(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

/// Create `dir` (and its parents) and give `dir` itself `mode`, whatever
/// the umask: for directories a container user must reach (the kubelet
/// does the same for emptyDir, 0777, and for log directories, 0755).
pub fn create_dir_mode(dir: &Path, mode: u32) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let m = std::fs::symlink_metadata(dir)?;
    if m.is_dir() && m.permissions().mode() & 0o7777 != mode {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Read a host file the administrator controls (`/etc/hosts`, the
/// `resolvConf`), symlinks followed: a regular file only (opened
/// `O_NONBLOCK`, so a FIFO put there cannot block the caller), at most
/// `max` bytes of it, as text.
pub fn read_host_file(path: &Path, max: u64) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"));
    }
    let mut text = String::new();
    f.take(max).read_to_string(&mut text)?;
    Ok(text)
}

/// How symlinks below the directory a file belongs to are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// No component below the directory may be a symlink (logs and
    /// termination messages: containerd and podwarden write regular files
    /// there, anything else was planted).
    Refuse,
    /// Symlinks are followed while they lead to a file inside the
    /// directory (manifests: the kubelet follows symlinks in
    /// `staticPodPath`, e.g. an atomically swapped `..data` link), never
    /// out of it.
    StayInside,
}

/// Why a file was not read. Each message starts with the path.
#[derive(Debug, Error)]
pub enum FileError {
    #[error("{path}: does not exist")]
    NotFound { path: String },
    #[error("{path}: dangling symlink (its target does not exist)")]
    Dangling { path: String },
    #[error("{path}: is a symlink; not followed")]
    Symlink { path: String },
    #[error("{path}: leads outside {dir}; not read")]
    Outside { path: String, dir: String },
    #[error("{path}: is a directory, not a file")]
    Directory { path: String },
    #[error("{path}: not a regular file (a {kind}); not read")]
    NotRegular { path: String, kind: &'static str },
    #[error("{path}: is {size} bytes, over the limit of {max} bytes")]
    TooLarge { path: String, size: u64, max: u64 },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl FileError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, FileError::NotFound { .. })
    }
}

fn kind_of(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFIFO => "FIFO",
        libc::S_IFCHR => "character device",
        libc::S_IFBLK => "block device",
        libc::S_IFSOCK => "socket",
        libc::S_IFLNK => "symlink",
        libc::S_IFDIR => "directory",
        _ => "special file",
    }
}

fn cstr(s: &std::ffi::OsStr) -> std::io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| std::io::Error::other("path holds a NUL byte"))
}

fn openat(dir: Option<&OwnedFd>, name: &std::ffi::OsStr, flags: i32) -> std::io::Result<OwnedFd> {
    let c = cstr(name)?;
    crate::sys::openat(dir.map(|d| d.as_fd()), &c, flags | libc::O_CLOEXEC | libc::O_NOCTTY)
}

fn fstat(fd: &OwnedFd) -> std::io::Result<libc::stat> {
    crate::sys::fstat(fd.as_fd())
}

/// Open the regular file `rel` (relative, no `..`) inside `dir` for
/// reading: non-blocking, never through a symlink that leaves `dir` (none
/// at all with [`Links::Refuse`]), and only if it is a regular file (a
/// FIFO or device is never opened for reading). Returns the file and its
/// size.
pub fn open_regular_in(dir: &Path, rel: impl AsRef<Path>, links: Links) -> Result<(File, u64), FileError> {
    let rel = rel.as_ref();
    let full = dir.join(rel);
    let path = full.display().to_string();
    let outside = || FileError::Outside { path: path.clone(), dir: dir.display().to_string() };
    let io = |source: std::io::Error| FileError::Io { path: path.clone(), source };
    // relative, and no `..`: the name alone cannot leave `dir`
    if !rel.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(outside());
    }
    if links == Links::StayInside {
        let is_link = std::fs::symlink_metadata(&full).map(|m| m.file_type().is_symlink());
        let resolved = match std::fs::canonicalize(&full) {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(match is_link {
                    Ok(true) => FileError::Dangling { path },
                    _ => FileError::NotFound { path },
                });
            }
            Err(e) => return Err(io(e)),
        };
        let base = std::fs::canonicalize(dir).map_err(io)?;
        let inner = resolved.strip_prefix(&base).map_err(|_| outside())?.to_path_buf();
        // walk the resolved path without following anything: a link
        // swapped in since is refused, not followed out
        return open_walk(&base, &inner, &path);
    }
    open_walk(dir, rel, &path)
}

fn open_walk(dir: &Path, rel: &Path, path: &str) -> Result<(File, u64), FileError> {
    let io = |source: std::io::Error| FileError::Io { path: path.to_string(), source };
    let parts: Vec<&std::ffi::OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let Some((last, middle)) = parts.split_last() else {
        return Err(FileError::Directory { path: path.to_string() });
    };
    let mut at = openat(None, dir.as_os_str(), libc::O_PATH | libc::O_DIRECTORY).map_err(io)?;
    for (i, part) in middle.iter().enumerate() {
        at = match openat(Some(&at), part, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW) {
            Ok(fd) => fd,
            Err(e) => {
                let sub: PathBuf = dir.join(parts[..=i].iter().collect::<PathBuf>());
                return Err(match e.raw_os_error() {
                    Some(libc::ENOENT) => FileError::NotFound { path: path.to_string() },
                    Some(libc::ENOTDIR | libc::ELOOP)
                        if std::fs::symlink_metadata(&sub).is_ok_and(|m| m.file_type().is_symlink()) =>
                    {
                        FileError::Symlink { path: sub.display().to_string() }
                    }
                    _ => FileError::Io { path: sub.display().to_string(), source: e },
                });
            }
        };
    }
    // O_PATH first: the file's type is checked before it is opened for
    // reading, so a FIFO or device is never opened
    let handle = match openat(Some(&at), last, libc::O_PATH | libc::O_NOFOLLOW) {
        Ok(fd) => fd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(FileError::NotFound { path: path.to_string() });
        }
        Err(e) => return Err(io(e)),
    };
    let st = fstat(&handle).map_err(io)?;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => {}
        libc::S_IFLNK => return Err(FileError::Symlink { path: path.to_string() }),
        libc::S_IFDIR => return Err(FileError::Directory { path: path.to_string() }),
        m => return Err(FileError::NotRegular { path: path.to_string(), kind: kind_of(m) }),
    }
    let fd = openat(Some(&at), last, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW).map_err(io)?;
    let again = fstat(&fd).map_err(io)?;
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
        return Err(io(std::io::Error::other("replaced while being opened")));
    }
    let file = File::from(fd);
    let len = file.metadata().map_err(io)?.size();
    Ok((file, len))
}

/// Read the whole regular file `rel` inside `dir` if it holds at most
/// `max` bytes ([`FileError::TooLarge`] otherwise, without reading it).
pub fn read_regular_in(dir: &Path, rel: impl AsRef<Path>, links: Links, max: u64) -> Result<Vec<u8>, FileError> {
    let rel = rel.as_ref();
    let (f, len) = open_regular_in(dir, rel, links)?;
    let path = || dir.join(rel).display().to_string();
    if len > max {
        return Err(FileError::TooLarge { path: path(), size: len, max });
    }
    let mut buf = Vec::with_capacity(len as usize);
    f.take(max + 1).read_to_end(&mut buf).map_err(|source| FileError::Io { path: path(), source })?;
    if buf.len() as u64 > max {
        // it grew while being read
        return Err(FileError::TooLarge { path: path(), size: buf.len() as u64, max });
    }
    Ok(buf)
}

/// The last `max` bytes (at most) of the regular file `rel` inside `dir`,
/// read from the end (seek): a file of any size costs `max` bytes.
/// Returns the bytes and whether the file began before them.
pub fn read_tail_in(dir: &Path, rel: impl AsRef<Path>, links: Links, max: u64) -> Result<(Vec<u8>, bool), FileError> {
    let rel = rel.as_ref();
    let (mut f, len) = open_regular_in(dir, rel, links)?;
    let io = |source| FileError::Io { path: dir.join(rel).display().to_string(), source };
    let start = len.saturating_sub(max);
    f.seek(SeekFrom::Start(start)).map_err(io)?;
    let mut buf = Vec::with_capacity(max.min(len) as usize);
    f.take(max).read_to_end(&mut buf).map_err(io)?;
    Ok((buf, start > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("podwarden-fsutil-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn mkfifo(p: &Path) {
        let c = CString::new(p.as_os_str().as_bytes()).unwrap();
        crate::sys::mkfifo(&c, 0o600).unwrap();
    }

    #[test]
    fn reads_regular_files_and_refuses_everything_else_at_once() {
        let d = tmp("kinds");
        let out = tmp("kinds-outside");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/ok.yaml"), "hello").unwrap();
        std::fs::write(out.join("secret"), "secret").unwrap();
        mkfifo(&d.join("fifo"));
        std::os::unix::fs::symlink("/dev/zero", d.join("zero")).unwrap();
        std::os::unix::fs::symlink(out.join("secret"), d.join("escape")).unwrap();
        std::os::unix::fs::symlink("sub/ok.yaml", d.join("inside")).unwrap();
        std::os::unix::fs::symlink(&out, d.join("outdir")).unwrap();
        std::os::unix::fs::symlink("missing", d.join("dangling")).unwrap();
        let read = |rel: &str, links| read_regular_in(&d, rel, links, 100).map_err(|e| e.to_string());
        let p = |rel: &str| d.join(rel).display().to_string();
        assert_eq!(read("sub/ok.yaml", Links::Refuse).unwrap(), b"hello");
        assert_eq!(read("inside", Links::StayInside).unwrap(), b"hello");
        for links in [Links::Refuse, Links::StayInside] {
            let fifo = read("fifo", links).unwrap_err();
            assert_eq!(fifo, format!("{}: not a regular file (a FIFO); not read", p("fifo")));
            assert!(read("missing", links).unwrap_err().ends_with(": does not exist"));
            assert!(read("../x", links).unwrap_err().contains("leads outside"));
            assert!(read("sub", links).unwrap_err().ends_with("is a directory, not a file"));
        }
        assert_eq!(read("zero", Links::Refuse).unwrap_err(), format!("{}: is a symlink; not followed", p("zero")));
        assert_eq!(
            read("zero", Links::StayInside).unwrap_err(),
            format!("{}: leads outside {}; not read", p("zero"), d.display())
        );
        assert!(read("escape", Links::StayInside).unwrap_err().contains("leads outside"));
        assert!(read("escape", Links::Refuse).unwrap_err().contains("is a symlink"));
        assert!(read("inside", Links::Refuse).unwrap_err().contains("is a symlink"));
        assert_eq!(
            read("outdir/secret", Links::Refuse).unwrap_err(),
            format!("{}: is a symlink; not followed", p("outdir"))
        );
        assert!(read("outdir/secret", Links::StayInside).unwrap_err().contains("leads outside"));
        assert!(read("dangling", Links::StayInside).unwrap_err().contains("dangling symlink"));
        std::fs::write(d.join("big"), vec![b'x'; 101]).unwrap();
        assert_eq!(
            read("big", Links::Refuse).unwrap_err(),
            format!("{}: is 101 bytes, over the limit of 100 bytes", p("big"))
        );
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_dir_all(&out).unwrap();
    }

    fn vm_rss_kib() -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        s.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().trim().trim_end_matches(" kB").parse().unwrap()
    }

    #[test]
    fn the_tail_of_a_2_gib_sparse_file_costs_only_the_tail() {
        let d = tmp("sparse");
        let f = std::fs::File::create(d.join("termination-log")).unwrap();
        f.set_len(2 << 30).unwrap(); // sparse: no disk used
        (&f).seek(SeekFrom::End(-6)).unwrap();
        (&f).write_all(b"last!\n").unwrap();
        let before = vm_rss_kib();
        let (tail, cut) = read_tail_in(&d, "termination-log", Links::Refuse, 4096).unwrap();
        let grew = vm_rss_kib().saturating_sub(before);
        assert_eq!((tail.len(), cut), (4096, true));
        assert!(tail.ends_with(b"last!\n"));
        assert!(grew < 1024, "reading the tail of 2 GiB moved RSS by {grew} KiB");
        // and the whole-file reader refuses it without reading
        let e = read_regular_in(&d, "termination-log", Links::Refuse, 1 << 20).unwrap_err();
        assert!(e.to_string().ends_with("is 2147483648 bytes, over the limit of 1048576 bytes"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn writes_are_private_from_creation_and_never_replace_with_write_new() {
        let d = tmp("write");
        let p = d.join("a.yaml");
        write_atomically(&p, b"one").unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        write_atomically_mode(&d.join("hosts"), b"h", 0o644).unwrap();
        assert_eq!(std::fs::metadata(d.join("hosts")).unwrap().permissions().mode() & 0o777, 0o644);
        let e = write_new_atomically(&p, b"two").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        assert!(!d.join(".a.yaml.tmp").exists());
        write_new_atomically(&d.join("b.yaml"), b"b").unwrap();
        assert_eq!(std::fs::read(d.join("b.yaml")).unwrap(), b"b");
        // a planted temporary symlink is not written through
        std::os::unix::fs::symlink(d.join("victim"), d.join(".c.yaml.tmp")).unwrap();
        write_atomically(&d.join("c.yaml"), b"c").unwrap();
        assert!(!d.join("victim").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}

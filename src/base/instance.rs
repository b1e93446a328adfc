//! One agent per node. Two agents on one container runtime each take the
//! other's pods for orphans and stop them; two on one `rootDir` overwrite
//! each other's checkpoints and records. So `podwarden run` holds an
//! exclusive lock (`flock`) on a file for each thing it must not share:
//! `<rootDir>/podwarden.lock`, and one per runtime endpoint in
//! [`LOCK_DIR`], named by a hash of the endpoint's socket path made
//! canonical (two spellings of one socket, a symlink among them, meet).
//! A second agent waits a few seconds (the first may be on its way out, as
//! in a restart) and then refuses to start, naming the first agent's pid
//! and the shared thing.
//!
//! The kernel drops a lock with the last descriptor of its process,
//! however the process ends (SIGKILL too): a crashed agent leaves nothing
//! that stops the next. Each file holds its holder's pid and what it locks,
//! only for the refusal's message.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the runtime endpoints' locks are (the FHS's place for locks).
pub const LOCK_DIR: &str = "/run/lock/podwarden";

/// How long a second agent waits for the first to let go.
pub const WAIT: Duration = Duration::from_secs(5);

/// The locks, held for as long as this lives (the agent's life).
#[derive(Debug)]
pub struct Instance {
    _held: Vec<File>,
}

#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    #[error(
        "another podwarden (pid {pid}) already uses {what}; one agent per {kind}: stop that one first \
         (it holds {})",
        path.display()
    )]
    Taken { what: String, kind: &'static str, pid: String, path: PathBuf },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Takes the locks of `root_dir` and of the runtime `endpoint` (none for
/// the in-memory `fake://`), the endpoints' in `lock_dir`, waiting up to
/// `wait` for each.
pub fn claim(root_dir: &Path, endpoint: &str, lock_dir: &Path, wait: Duration) -> Result<Instance, InstanceError> {
    let mut held = Vec::new();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| InstanceError::Io { path, source }
    };
    std::fs::create_dir_all(root_dir).map_err(io(root_dir))?;
    let root = root_dir.canonicalize().map_err(io(root_dir))?;
    held.push(lock(&root.join("podwarden.lock"), &format!("rootDir {}", root.display()), "rootDir", wait)?);
    if endpoint != "fake://" {
        let socket = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
        // a socket not there yet (the runtime starting) is named as written
        let canonical = Path::new(socket).canonicalize().unwrap_or_else(|_| PathBuf::from(socket));
        std::fs::create_dir_all(lock_dir).map_err(io(lock_dir))?;
        let digest = ring::digest::digest(&ring::digest::SHA256, canonical.as_os_str().as_encoded_bytes());
        let file = lock_dir.join(format!("runtime-{}.lock", &super::hex(digest.as_ref())[..16]));
        let what = format!("the container runtime at unix://{}", canonical.display());
        held.push(lock(&file, &what, "container runtime", wait)?);
    }
    Ok(Instance { _held: held })
}

/// An exclusive lock on `path`, waited for up to `wait`; the file then
/// says who holds it and what it stands for.
fn lock(path: &Path, what: &str, kind: &'static str, wait: Duration) -> Result<File, InstanceError> {
    let io = |source| InstanceError::Io { path: path.to_path_buf(), source };
    let mut file =
        OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o644).open(path).map_err(io)?;
    let until = Instant::now() + wait;
    let mut told = false;
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(TryLockError::WouldBlock) if Instant::now() < until => {
                if !told {
                    log::info!("{what} is locked by another podwarden ({}): waiting up to {wait:?}", holder(&mut file));
                    told = true;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(InstanceError::Taken {
                    what: what.to_string(),
                    kind,
                    pid: holder(&mut file),
                    path: path.to_path_buf(),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    file.write_all(format!("{}\n{what}\n", std::process::id()).as_bytes()).map_err(io)?;
    Ok(file)
}

/// The pid the lock file names (its first line), or why it is not known.
fn holder(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file.rewind().and_then(|_| file.take(256).read_to_string(&mut text));
    match text.lines().next().map(str::trim).filter(|p| p.parse::<u32>().is_ok()) {
        Some(pid) => pid.to_string(),
        None => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pw-instance-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_second_agent_on_the_same_root_dir_or_runtime_is_refused_by_name() {
        let d = temp("second");
        let socket = d.join("containerd.sock");
        std::fs::write(&socket, "").unwrap();
        let link = d.join("link.sock");
        std::os::unix::fs::symlink(&socket, &link).unwrap();
        let locks = d.join("locks");
        let ep = format!("unix://{}", socket.display());
        let first = claim(&d.join("root"), &ep, &locks, Duration::ZERO).unwrap();

        // the same rootDir, another runtime
        let e = claim(&d.join("root"), "fake://", &locks, Duration::ZERO).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(&format!("pid {}", std::process::id())), "{msg}");
        assert!(msg.contains("rootDir") && msg.contains(&d.join("root").display().to_string()), "{msg}");

        // another rootDir, the same socket through a symlink
        let t = Instant::now();
        let e = claim(&d.join("root2"), &format!("unix://{}", link.display()), &locks, Duration::from_millis(300))
            .unwrap_err();
        assert!(t.elapsed() >= Duration::from_millis(300), "it waited for the first to let go");
        let msg = e.to_string();
        assert!(msg.contains(&format!("the container runtime at unix://{}", socket.display())), "{msg}");
        assert!(msg.contains(&format!("pid {}", std::process::id())), "{msg}");

        // gone with the first (its descriptors closed, as at any exit)
        drop(first);
        let again = claim(&d.join("root2"), &format!("unix://{}", link.display()), &locks, Duration::ZERO);
        assert!(again.is_ok(), "{again:?}");
        // the file names the holder
        let text = std::fs::read_to_string(d.join("root2/podwarden.lock")).unwrap();
        assert_eq!(text.lines().next(), Some(std::process::id().to_string().as_str()));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_fake_runtime_takes_only_the_root_dir() {
        let d = temp("fake");
        let _a = claim(&d.join("a"), "fake://", &d.join("locks"), Duration::ZERO).unwrap();
        let _b = claim(&d.join("b"), "fake://", &d.join("locks"), Duration::ZERO).unwrap();
        assert!(!d.join("locks").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}

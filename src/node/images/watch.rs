//! The `credentials-watch` thread: inotify on the directories of the
//! keyring's docker config files (`<rootDir>/config.json`, the working
//! directory's, `$HOME/.docker/config.json`, `/.docker/config.json` and the
//! legacy `.dockercfg` ones), so that a changed credential is read within
//! a second instead of after the keyring's 5 minutes. A directory that does
//! not exist yet is looked for again every [`RESCAN`]. Bounded: one watch
//! per directory (at most the handful the kubelet's search path names),
//! events read into a fixed buffer, a change reported at most every
//! [`SETTLE`].

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use inotify::{Inotify, WatchDescriptor, WatchMask};

/// How often directories that could not be watched are tried again.
pub const RESCAN: Duration = Duration::from_secs(30);
/// Writes closer together than this are one change (an editor's write,
/// rename and chmod).
pub const SETTLE: Duration = Duration::from_millis(100);

/// Owns the thread; dropping it stops and joins it.
pub struct CredentialWatch {
    wake: Arc<File>,
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
}

impl Drop for CredentialWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        crate::sys::eventfd_poke(&self.wake);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

impl CredentialWatch {
    /// Watch `files` (their directories); `on_change` runs on the thread
    /// after one of them was written, created, moved or removed, and must
    /// not block for long.
    pub fn start(files: Vec<PathBuf>, on_change: impl Fn() + Send + 'static) -> std::io::Result<Self> {
        let wake = Arc::new(File::from(crate::sys::eventfd(libc::EFD_CLOEXEC | libc::EFD_NONBLOCK)?));
        let stop = Arc::new(AtomicBool::new(false));
        let inotify = Inotify::init()?;
        let (w, s) = (wake.clone(), stop.clone());
        let join = crate::base::thread::spawn("credentials-watch", None, move || {
            Watch::new(inotify, &files).run(&w, &s, &on_change)
        })?;
        Ok(CredentialWatch { wake, stop, join: Some(join) })
    }
}

struct Watch {
    inotify: Inotify,
    /// Each directory and the file names in it that matter.
    dirs: HashMap<PathBuf, HashSet<OsString>>,
    watched: HashMap<WatchDescriptor, PathBuf>,
}

impl Watch {
    fn new(inotify: Inotify, files: &[PathBuf]) -> Self {
        let mut dirs: HashMap<PathBuf, HashSet<OsString>> = HashMap::new();
        for f in files {
            if let (Some(d), Some(n)) = (f.parent(), f.file_name()) {
                dirs.entry(d.to_path_buf()).or_default().insert(n.to_os_string());
            }
        }
        let mut w = Watch { inotify, dirs, watched: HashMap::new() };
        w.add_missing();
        w
    }

    /// Watch every directory not watched yet that exists now.
    fn add_missing(&mut self) {
        let mask = WatchMask::CLOSE_WRITE
            | WatchMask::MOVED_TO
            | WatchMask::MOVED_FROM
            | WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::ATTRIB
            | WatchMask::ONLYDIR;
        let missing: Vec<PathBuf> =
            self.dirs.keys().filter(|d| !self.watched.values().any(|w| w == *d)).cloned().collect();
        for d in missing {
            if let Ok(wd) = self.inotify.watches().add(&d, mask) {
                log::debug!("registry credentials: watching {}", d.display());
                self.watched.insert(wd, d);
            }
        }
    }

    /// Read the events; true if one concerns a docker config file.
    fn read(&mut self, buf: &mut [u8]) -> bool {
        let mut hit = false;
        while let Ok(events) = self.inotify.read_events(buf) {
            let mut any = false;
            for ev in events {
                any = true;
                if ev.mask.contains(inotify::EventMask::IGNORED) {
                    self.watched.remove(&ev.wd);
                    continue;
                }
                let (Some(dir), Some(name)) = (self.watched.get(&ev.wd), ev.name) else { continue };
                hit |= self.dirs.get(dir).is_some_and(|names| names.contains(name));
            }
            if !any {
                break;
            }
        }
        hit
    }

    fn run(mut self, wake: &File, stop: &AtomicBool, on_change: &dyn Fn()) {
        let mut buf = vec![0u8; 4 << 10];
        let mut rescan = crate::base::cancel::deadline_in(RESCAN);
        let mut due: Option<Instant> = None;
        loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let now = Instant::now();
            if due.is_some_and(|t| now >= t) {
                due = None;
                log::info!("registry credentials: a docker config file changed; reading it again");
                on_change();
            }
            if now >= rescan {
                self.add_missing();
                rescan = crate::base::cancel::deadline_in(RESCAN);
            }
            let until = due.map_or(rescan, |t| t.min(rescan));
            let mut fds = [
                libc::pollfd { fd: wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: self.inotify.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            ];
            let ms = until.saturating_duration_since(Instant::now()).as_millis().min(i32::MAX as u128) as i32;
            if !matches!(crate::sys::poll(&mut fds, ms.max(1)), Ok(n) if n > 0) {
                continue;
            }
            if fds[1].revents != 0 && self.read(&mut buf) && due.is_none() {
                due = Some(crate::base::cancel::deadline_in(SETTLE));
            }
            if fds[0].revents != 0 {
                use std::io::Read;
                let _ = (&*wake).read(&mut [0u8; 8]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_config_file_is_reported_and_other_files_are_not() {
        let d = std::env::temp_dir().join(format!("podwarden-credwatch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let missing = d.join("later");
        let (tx, rx) = crossbeam_channel::unbounded();
        let w = CredentialWatch::start(vec![d.join("config.json"), missing.join("config.json")], move || {
            let _ = tx.send(());
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        std::fs::write(d.join("other.json"), b"{}").unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(400)).is_err(), "another file is no change");
        std::fs::write(d.join("config.json.tmp"), b"{}").unwrap();
        std::fs::rename(d.join("config.json.tmp"), d.join("config.json")).unwrap();
        assert!(rx.recv_timeout(Duration::from_secs(1)).is_ok(), "a renamed-in config.json is a change");
        std::fs::write(d.join("config.json"), b"{\"auths\":{}}").unwrap();
        assert!(rx.recv_timeout(Duration::from_secs(1)).is_ok(), "a rewritten one too");
        drop(w);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

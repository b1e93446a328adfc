//! The manifest watcher thread: inotify on `staticPodPath` plus a periodic
//! rescan (`fileCheckFrequency`), and a rescan on demand (SIGHUP).

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use inotify::{Inotify, WatchMask};

use super::FileSource;
use crate::model::Pod;
use crate::model::objects::ObjectSet;
use std::sync::Arc;

/// Owns the watcher thread. `rescan()` asks for a scan now; dropping the
/// handle stops and joins the thread.
pub struct SourceHandle {
    wake: Arc<File>,
    cmd: crossbeam_channel::Sender<Cmd>,
    join: Option<JoinHandle<()>>,
}

enum Cmd {
    Rescan,
    Stop,
}

impl SourceHandle {
    pub fn rescan(&self) {
        let _ = self.cmd.send(Cmd::Rescan);
        crate::sys::eventfd_poke(&self.wake);
    }

    /// A function that asks for a scan now (for the local API); does
    /// nothing once the watcher has stopped.
    pub fn rescanner(&self) -> Arc<dyn Fn() + Send + Sync> {
        let (cmd, wake) = (self.cmd.clone(), self.wake.clone());
        Arc::new(move || {
            if cmd.send(Cmd::Rescan).is_ok() {
                crate::sys::eventfd_poke(&wake);
            }
        })
    }
}

impl Drop for SourceHandle {
    fn drop(&mut self) {
        let _ = self.cmd.send(Cmd::Stop);
        crate::sys::eventfd_poke(&self.wake);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// Start watching. `apply` gets every scan's full pod list and objects
/// (ConfigMaps, Secrets); `report` every newly found problem as (file,
/// message).
pub fn start_watcher(
    mut source: FileSource,
    period: Duration,
    apply: impl Fn(Vec<Arc<Pod>>, ObjectSet) + Send + 'static,
    report: impl Fn(&str, &str) + Send + 'static,
) -> std::io::Result<SourceHandle> {
    let wake = Arc::new(File::from(crate::sys::eventfd(libc::EFD_CLOEXEC | libc::EFD_NONBLOCK)?));
    let (tx, rx) = crossbeam_channel::unbounded();
    let wake2 = wake.clone();
    let join = crate::base::thread::spawn("source-file", None, move || {
        let mut inotify = Inotify::init().ok();
        if inotify.is_none() {
            log::warn!("inotify unavailable; relying on the periodic rescan of staticPodPath");
        }
        let mut watching = false;
        let mut buf = [0u8; 4096];
        let mut next_scan = Instant::now();
        let mut first = true;
        loop {
            if !watching && let Some(ino) = inotify.as_mut() {
                let mask = WatchMask::CREATE
                    | WatchMask::CLOSE_WRITE
                    | WatchMask::MOVED_TO
                    | WatchMask::MOVED_FROM
                    | WatchMask::DELETE
                    | WatchMask::ATTRIB
                    | WatchMask::DELETE_SELF
                    | WatchMask::MOVE_SELF;
                watching = ino.watches().add(source.dir(), mask).is_ok();
            }
            let now = Instant::now();
            if now >= next_scan {
                let r = source.scan();
                for (file, msg) in &r.errors {
                    report(file, msg);
                }
                // The first scan always counts (an unreadable directory is an
                // empty source: nothing is desired); later, an unreadable
                // directory keeps the pods as they are.
                match r.pods {
                    Some(pods) => apply(pods, r.objects.unwrap_or_default()),
                    None if first => apply(Vec::new(), ObjectSet::new()),
                    None => {}
                }
                first = false;
                next_scan = crate::base::cancel::deadline_in(period);
            }
            let timeout = next_scan.saturating_duration_since(Instant::now());
            let mut fds = vec![libc::pollfd { fd: wake2.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
            if let Some(ino) = inotify.as_ref().filter(|_| watching) {
                fds.push(libc::pollfd { fd: ino.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            }
            let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
            if !matches!(crate::sys::poll(&mut fds, ms.max(1)), Ok(n) if n > 0) {
                continue;
            }
            if fds[0].revents != 0 {
                // reset the counter (8 bytes); the commands say what to do
                let _ = (&*wake2).read(&mut [0u8; 8]);
                for c in rx.try_iter() {
                    match c {
                        Cmd::Stop => return,
                        Cmd::Rescan => next_scan = Instant::now(),
                    }
                }
            }
            if fds.len() > 1 && fds[1].revents != 0 {
                if let Some(ino) = inotify.as_mut() {
                    while let Ok(events) = ino.read_events(&mut buf) {
                        let mut any = false;
                        for ev in events {
                            any = true;
                            if ev.mask.intersects(
                                inotify::EventMask::DELETE_SELF
                                    | inotify::EventMask::MOVE_SELF
                                    | inotify::EventMask::IGNORED,
                            ) {
                                watching = false;
                            }
                        }
                        if !any {
                            break;
                        }
                    }
                }
                next_scan = Instant::now();
            }
        }
    })?;
    Ok(SourceHandle { wake, cmd: tx, join: Some(join) })
}

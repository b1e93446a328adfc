//! Container log rotation: the `log-monitor` thread and its `log-rotate-<n>`
//! workers (`containerLogMaxWorkers`).
//!
//! As the kubelet's container log manager, every
//! `containerLogMonitorInterval` the monitor lists the running containers
//! and has each one's live log checked (and rotated when it reached
//! `containerLogMaxSize`: [`crate::logs::rotation::rotate`]). Unlike the
//! kubelet, it also watches the containers' log directories (inotify,
//! `IN_MODIFY`): a log that is being written is checked as it grows, at most
//! every [`QUIET`], so a container writing fast cannot fill the disk in the
//! time between two passes.
//!
//! A new container's log is known before the container starts: the pod
//! worker tells [`NewLogs`] right after `CreateContainer`, and the monitor
//! watches its directory and checks it from its first byte (reading
//! inotify every [`HOT`] and rotating at half the limit for its first
//! second: a container may start with a burst). While a log grows fast
//! enough to pass the limit within 200 ms (a burst, seen within the last
//! second) the monitor reads inotify again after [`HOT`] instead of
//! [`QUIET`] and rotates at half the limit, so a burst is rotated as it
//! grows: many
//! times a second if need be (rotated names carry `-001` to `-999` within
//! a second).
//!
//! The monitor never touches a file's content or waits for the runtime
//! beyond its list: checks go to the workers through a bounded queue, one
//! per container at a time. A worker compresses and calls
//! `ReopenContainerLog`; nothing else waits for it. Every pass also has the
//! newest rotated file of a log idle for a whole interval compressed (the
//! kubelet leaves it plain for good).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use inotify::{Inotify, WatchDescriptor, WatchMask};
use parking_lot::Mutex;

use crate::logs::rotation::{Outcome, Policy};
use crate::runtime::{CallCtx, ContainerState, Runtime, RuntimeError};

/// After the writes of a log woke the monitor, it reads the next ones only
/// this much later: a container writing all the time costs a few checks a
/// second, not one per write (inotify merges the events meanwhile).
pub const QUIET: Duration = Duration::from_millis(100);

/// While a log grows past half the limit, the monitor reads inotify again
/// this soon: a burst of 100 MiB/s fills a 1 MiB log in 10 ms.
pub const HOT: Duration = Duration::from_millis(2);

/// A log growing fast enough to pass the limit within this is a burst.
const FAST_WITHIN: Duration = Duration::from_millis(200);

/// How long the monitor stays that quick after it last saw a log past half
/// the limit (a rotation leaves the live log small, and it is past the
/// limit again a few milliseconds later) or was told of a new log.
const HOT_FOR: Duration = Duration::from_secs(1);

/// The most checks waiting for a worker.
const QUEUE: usize = 1024;

/// New containers' logs, told by the pod workers right after
/// `CreateContainer` (before the container starts), so the monitor checks
/// them from their first byte instead of from the next pass that lists
/// the container. Shared by the workers (`created`) and the monitor.
#[derive(Default)]
pub struct NewLogs {
    pending: Mutex<Vec<Target>>,
    wake: Mutex<Option<Arc<File>>>,
}

impl std::fmt::Debug for NewLogs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewLogs").field("pending", &self.pending.lock().len()).finish()
    }
}

impl NewLogs {
    /// Container `id` will write `<dir>/<live>` (e.g. `0.log`). Never
    /// blocks; beyond [`QUEUE`] waiting ones the log is left to the next
    /// pass.
    pub fn created(&self, id: &str, dir: PathBuf, live: String) {
        {
            let mut p = self.pending.lock();
            if p.len() >= QUEUE {
                return;
            }
            p.push(Target { id: id.to_string(), dir, live });
        }
        if let Some(w) = self.wake.lock().as_ref() {
            crate::sys::eventfd_poke(w);
        }
    }

    fn take(&self) -> Vec<Target> {
        std::mem::take(&mut *self.pending.lock())
    }
}

/// What rotation needs to know; from the config.
#[derive(Debug, Clone)]
pub struct Settings {
    pub pod_logs_dir: PathBuf,
    pub policy: Policy,
    pub interval: Duration,
    pub workers: u32,
    /// The longest a runtime call (list, reopen) may take.
    pub timeout: Duration,
    /// The relist's newest list, used instead of a list of its own when
    /// fresh.
    pub pod_cache: Option<Arc<crate::runtime::cache::PodCache>>,
    /// Where the pod workers tell of new containers' logs.
    pub new_logs: Arc<NewLogs>,
}

/// One running container's live log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    id: String,
    dir: PathBuf,
    live: String,
}

/// Owns the monitor and the workers; dropping it stops and joins them.
pub struct LogRotation {
    wake: Arc<File>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    joins: Vec<JoinHandle<()>>,
}

impl Drop for LogRotation {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        crate::sys::eventfd_poke(&self.wake);
        for j in self.joins.drain(..) {
            let _ = j.join();
        }
    }
}

/// The live logs of the running containers the runtime lists (or the
/// relist listed less than [`crate::runtime::cache::FRESH`] ago).
fn running(runtime: &dyn Runtime, s: &Settings) -> Result<Vec<Target>, RuntimeError> {
    let pods = match s.pod_cache.as_ref().and_then(|c| c.recent(crate::runtime::cache::FRESH)) {
        Some(p) => p,
        None => Arc::new(runtime.list_pods(&CallCtx::background(s.timeout))?),
    };
    let mut out = Vec::new();
    for p in pods.iter() {
        let pod_dir = s.pod_logs_dir.join(crate::logs::reader::pod_dir_name(&p.namespace, &p.name, &p.uid));
        for c in p.containers.iter().filter(|c| c.state == ContainerState::Running) {
            out.push(Target { id: c.id.clone(), dir: pod_dir.join(&c.name), live: format!("{}.log", c.attempt) });
        }
    }
    Ok(out)
}

/// Check one live log and rotate it if it reached `max_size`; true when it
/// rotated.
fn check(runtime: &dyn Runtime, s: &Settings, t: &Target, max_size: u64) -> bool {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let stamp = crate::sys::local_timestamp(now);
    let reopen = || runtime.reopen_container_log(&CallCtx::background(s.timeout), &t.id);
    let policy = crate::logs::rotation::Policy { max_size, ..s.policy };
    match crate::logs::rotation::rotate(&t.dir, &t.live, policy, &stamp, reopen) {
        Ok(Outcome::Rotated(to)) => {
            log::debug!("container {}: log rotated to {}", t.id, to.display());
            return true;
        }
        Ok(Outcome::Reopened) => log::info!("container {}: its log {} was missing; reopened", t.id, t.live),
        Ok(Outcome::Small | Outcome::Later) => {}
        Err(e) => {
            // a container's log that cannot be rotated is retried every
            // pass: say so at most once a minute
            static FAILED: crate::base::logging::RateLimit =
                crate::base::logging::RateLimit::new(Duration::from_secs(60));
            if let Some(held) = FAILED.allow() {
                let more = crate::base::logging::held_back(held, Duration::from_secs(60));
                log::warn!("container {}: log rotation failed: {e}{more}", t.id);
            }
        }
    }
    false
}

/// Start the monitor and `settings.workers` workers.
pub fn start(runtime: Arc<dyn Runtime>, settings: Settings) -> std::io::Result<LogRotation> {
    let wake = Arc::new(File::from(crate::sys::eventfd(libc::EFD_CLOEXEC | libc::EFD_NONBLOCK)?));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (tx, rx) = crossbeam_channel::bounded::<(Target, u64)>(QUEUE);
    // containers queued or being checked: one check each at a time
    let busy: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut joins = Vec::new();
    // compression on its own thread: a rotation never waits for one
    let (ztx, zrx) = crossbeam_channel::bounded::<Compress>(QUEUE);
    let zbusy: Arc<Mutex<HashSet<PathBuf>>> = Arc::default();
    {
        let (zbusy, idle) = (zbusy.clone(), settings.interval);
        joins.push(crate::base::thread::spawn("log-compress", None, move || {
            for job in zrx {
                match job {
                    Compress::Older(t) => {
                        zbusy.lock().remove(&t.dir.join(&t.live));
                        crate::logs::rotation::compress_older(&t.dir, &t.live);
                    }
                    Compress::Idle(dir) => {
                        zbusy.lock().remove(&dir);
                        crate::logs::rotation::compress_idle(&dir, idle);
                    }
                }
            }
        })?);
    }
    for n in 0..settings.workers.max(1) {
        let (rx, runtime, s, busy) = (rx.clone(), runtime.clone(), settings.clone(), busy.clone());
        let (ztx, zbusy) = (ztx.clone(), zbusy.clone());
        joins.push(crate::base::thread::spawn(format!("log-rotate-{n}"), None, move || {
            for (t, max_size) in rx {
                if check(&*runtime, &s, &t, max_size)
                    && zbusy.lock().insert(t.dir.join(&t.live))
                    && ztx.try_send(Compress::Older(t.clone())).is_err()
                {
                    zbusy.lock().remove(&t.dir.join(&t.live));
                }
                busy.lock().remove(&t.id);
            }
        })?);
    }
    drop(rx);
    *settings.new_logs.wake.lock() = Some(wake.clone());
    let (wake2, stop2) = (wake.clone(), stop.clone());
    joins.push(crate::base::thread::spawn("log-monitor", None, move || {
        Monitor::new(runtime, settings, tx, busy, (ztx, zbusy)).run(&wake2, &stop2);
    })?);
    Ok(LogRotation { wake, stop, joins })
}

/// A compression job.
enum Compress {
    /// After a rotation: every rotated file of the log but the newest.
    Older(Target),
    /// A container directory at a pass: the logs idle for an interval,
    /// their newest rotated file too.
    Idle(PathBuf),
}

/// How long a log told by [`NewLogs`] stays known without a pass listing
/// its container (a pass lists only running containers, from a list that
/// may be older than the start).
const NEW_LOG_KEPT: Duration = Duration::from_secs(30);

/// What a watched directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `podLogsDir`: pod directories appear here.
    Root,
    /// `<ns>_<pod>_<uid>`: container directories appear here.
    Pod,
    /// `<container>`: its log files are written here.
    Container,
}

/// The soonest a write to a log the monitor does not know yet (a container
/// started since the last pass) makes it list the containers again.
const RELIST_AFTER: Duration = Duration::from_secs(1);

struct Monitor {
    runtime: Arc<dyn Runtime>,
    s: Settings,
    tx: crossbeam_channel::Sender<(Target, u64)>,
    busy: Arc<Mutex<HashSet<String>>>,
    inotify: Option<Inotify>,
    /// Every watched directory below `podLogsDir` (and it).
    watched: HashMap<WatchDescriptor, (Kind, PathBuf)>,
    /// The running containers' live logs by directory, from the last pass.
    targets: HashMap<PathBuf, Vec<Target>>,
    /// A log the last pass did not know grew past the limit.
    relist: bool,
    last_pass: Option<Instant>,
    /// Logs told by [`NewLogs`], and when: kept across passes for
    /// [`NEW_LOG_KEPT`].
    told: Vec<(Target, Instant)>,
    /// Each live log's size at the last look, and when (how fast it
    /// grows); cleared at each pass, at most [`QUEUE`] entries.
    sizes: HashMap<PathBuf, (u64, Instant)>,
    /// The compression queue and the directories and logs in it.
    compress: (crossbeam_channel::Sender<Compress>, Arc<Mutex<HashSet<PathBuf>>>),
}

impl Monitor {
    fn new(
        runtime: Arc<dyn Runtime>,
        s: Settings,
        tx: crossbeam_channel::Sender<(Target, u64)>,
        busy: Arc<Mutex<HashSet<String>>>,
        compress: (crossbeam_channel::Sender<Compress>, Arc<Mutex<HashSet<PathBuf>>>),
    ) -> Self {
        let inotify = match Inotify::init() {
            Ok(i) => Some(i),
            Err(e) => {
                log::warn!(
                    "container logs: inotify unavailable ({e}); logs are checked every containerLogMonitorInterval only"
                );
                None
            }
        };
        Monitor {
            runtime,
            s,
            tx,
            busy,
            inotify,
            watched: HashMap::new(),
            targets: HashMap::new(),
            relist: false,
            last_pass: None,
            told: Vec::new(),
            sizes: HashMap::new(),
            compress,
        }
    }

    /// Know and watch the logs the workers told of since the last look;
    /// true if there were any.
    fn take_new(&mut self) -> bool {
        let new = self.s.new_logs.take();
        let any = !new.is_empty();
        for t in new {
            if self.inotify.is_some() && !self.watched.values().any(|(_, d)| *d == t.dir) {
                let dir = t.dir.clone();
                self.watch(Kind::Container, &dir);
            }
            self.know(&t);
            self.told.push((t, Instant::now()));
        }
        any
    }

    fn know(&mut self, t: &Target) {
        let ts = self.targets.entry(t.dir.clone()).or_default();
        if !ts.contains(t) {
            ts.push(t.clone());
        }
    }

    /// Queue a check of `t` unless one is queued or running.
    fn queue(&self, t: &Target) {
        self.queue_at(t, self.s.policy.max_size);
    }

    /// Queue a check that rotates `t` once it holds `max_size` bytes.
    fn queue_at(&self, t: &Target, max_size: u64) {
        if !self.busy.lock().insert(t.id.clone()) {
            return;
        }
        if self.tx.try_send((t.clone(), max_size)).is_err() {
            // full: the next pass or write queues it again
            self.busy.lock().remove(&t.id);
        }
    }

    /// Watch `dir` as `kind` and, below the container level, the
    /// directories already in it (made before the watch).
    fn watch(&mut self, kind: Kind, dir: &std::path::Path) {
        let Some(ino) = self.inotify.as_mut() else { return };
        let mask = match kind {
            Kind::Root | Kind::Pod => WatchMask::CREATE | WatchMask::MOVED_TO,
            Kind::Container => WatchMask::MODIFY,
        } | WatchMask::ONLYDIR
            | WatchMask::DONT_FOLLOW;
        match ino.watches().add(dir, mask) {
            Ok(wd) => {
                self.watched.insert(wd, (kind, dir.to_path_buf()));
            }
            Err(e) => {
                log::debug!("container logs: cannot watch {}: {e}", dir.display());
                return;
            }
        }
        let below = match kind {
            Kind::Root => Kind::Pod,
            Kind::Pod => Kind::Container,
            Kind::Container => return,
        };
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten().take(10_000) {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                self.watch(below, &e.path());
            }
        }
    }

    /// A full pass: list the running containers, check every live log,
    /// watch the log directories.
    fn pass(&mut self) {
        self.last_pass = Some(Instant::now());
        self.relist = false;
        let targets = match running(&*self.runtime, &self.s) {
            Ok(t) => t,
            Err(e) => {
                log::debug!("container logs: cannot list the running containers: {e}");
                return;
            }
        };
        self.targets.clear();
        for t in &targets {
            self.targets.entry(t.dir.clone()).or_default().push(t.clone());
            self.queue(t);
        }
        self.told.retain(|(t, at)| at.elapsed() < NEW_LOG_KEPT && !targets.iter().any(|l| l.id == t.id));
        self.sizes.clear();
        for (t, _) in self.told.clone() {
            self.know(&t);
        }
        let root = self.s.pod_logs_dir.clone();
        self.watch(Kind::Root, &root);
        // the newest rotated file of a log idle for an interval
        let dirs: Vec<PathBuf> =
            self.watched.values().filter(|(k, _)| *k == Kind::Container).map(|(_, d)| d.clone()).collect();
        let (ztx, zbusy) = &self.compress;
        for d in dirs {
            if zbusy.lock().insert(d.clone()) && ztx.try_send(Compress::Idle(d.clone())).is_err() {
                zbusy.lock().remove(&d);
            }
        }
    }

    /// Read the events: watch new directories, check the live logs written
    /// to that reached the limit (half of it when `quick`: a burst).
    /// Returns (a burst: a live log growing fast enough to pass the limit
    /// within [`FAST_WITHIN`], or found at twice it: rotate at half the
    /// limit; look again after [`HOT`]: that, or a live log past half the
    /// limit).
    fn events(&mut self, buf: &mut [u8], quick: bool) -> (bool, bool) {
        let mut new_dirs: Vec<(Kind, PathBuf)> = Vec::new();
        let mut written: Vec<(PathBuf, String)> = Vec::new();
        if let Some(ino) = self.inotify.as_mut() {
            while let Ok(events) = ino.read_events(buf) {
                let mut any = false;
                for ev in events {
                    any = true;
                    if ev.mask.contains(inotify::EventMask::IGNORED) {
                        self.watched.remove(&ev.wd);
                        continue;
                    }
                    let (Some((kind, dir)), Some(name)) = (self.watched.get(&ev.wd), ev.name) else { continue };
                    match kind {
                        Kind::Root | Kind::Pod if ev.mask.contains(inotify::EventMask::ISDIR) => {
                            let below = if *kind == Kind::Root { Kind::Pod } else { Kind::Container };
                            new_dirs.push((below, dir.join(name)));
                        }
                        Kind::Container => {
                            let name = name.to_string_lossy().into_owned();
                            if !written.iter().any(|(d, n)| d == dir && *n == name) {
                                written.push((dir.clone(), name));
                            }
                        }
                        _ => {}
                    }
                }
                if !any {
                    break;
                }
            }
        }
        for (kind, dir) in new_dirs {
            self.watch(kind, &dir);
        }
        let mut hot = false;
        let mut soon = false;
        for (dir, name) in written {
            let known = self.targets.get(&dir).and_then(|ts| ts.iter().find(|t| t.live == name)).cloned();
            let live = known.is_some() || name.strip_suffix(".log").is_some_and(|n| n.parse::<u32>().is_ok());
            if !live {
                continue;
            }
            let size = std::fs::symlink_metadata(dir.join(&name)).map_or(0, |m| m.len());
            let half = self.s.policy.max_size / 2;
            // fast: at this rate the log would pass the limit within
            // FAST_WITHIN (a rotation since the last look: from zero)
            let now = Instant::now();
            // past half the limit: look again soon (the cadence only)
            soon |= size >= half;
            // twice the limit at a look: it grew that much between looks
            hot |= size >= 2 * self.s.policy.max_size;
            let key = dir.join(&name);
            if let Some((before, at)) = self.sizes.get(&key) {
                let grown = if size >= *before { size - before } else { size };
                let secs = now.duration_since(*at).as_secs_f64().max(0.001);
                hot |= grown as f64 / secs * FAST_WITHIN.as_secs_f64() >= self.s.policy.max_size as f64;
            }
            if self.sizes.len() < QUEUE || self.sizes.contains_key(&key) {
                self.sizes.insert(key, (size, now));
            }
            // while logs grow this fast (burst), a log is rotated at half
            // the limit: it grows on while the rotation is made, and would
            // end far past the limit otherwise
            let due = if quick { half.max(1) } else { self.s.policy.max_size };
            if size < due {
                continue;
            }
            match known {
                Some(t) => self.queue_at(&t, due),
                // a container started since the last pass: list again soon
                None => self.relist = true,
            }
        }
        (hot, soon || hot)
    }

    fn run(mut self, wake: &File, stop: &std::sync::atomic::AtomicBool) {
        let mut next_pass = Instant::now();
        let mut quiet_until = Instant::now();
        let mut hot_until = Instant::now();
        // rotate at half the limit until then (a burst)
        let mut quick_until = Instant::now();
        let mut buf = vec![0u8; 4 << 10];
        loop {
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            let now = Instant::now();
            let relist_due = self.relist && self.last_pass.is_none_or(|t| now >= t + RELIST_AFTER);
            if now >= next_pass || relist_due {
                self.pass();
                next_pass = crate::base::cancel::deadline_in(self.s.interval);
            }
            let mut until = next_pass;
            if self.relist
                && let Some(t) = self.last_pass
            {
                until = until.min(t + RELIST_AFTER);
            }
            let listen = Instant::now() >= quiet_until;
            if !listen {
                until = until.min(quiet_until);
            }
            let mut fds = vec![libc::pollfd { fd: wake.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
            if listen && let Some(ino) = self.inotify.as_ref() {
                fds.push(libc::pollfd { fd: ino.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            }
            let ms = until.saturating_duration_since(Instant::now()).as_millis().min(i32::MAX as u128) as i32;
            if !matches!(crate::sys::poll(&mut fds, ms.max(1)), Ok(n) if n > 0) {
                continue;
            }
            if fds[0].revents != 0 {
                let _ = (&*wake).read(&mut [0u8; 8]);
                // a new container may start with a burst: quick from its first byte
                if self.take_new() {
                    hot_until = crate::base::cancel::deadline_in(HOT_FOR);
                    quick_until = hot_until;
                }
            }
            if fds.len() > 1 && fds[1].revents != 0 {
                let (burst, soon) = self.events(&mut buf, Instant::now() < quick_until);
                if burst {
                    quick_until = crate::base::cancel::deadline_in(HOT_FOR);
                }
                if soon {
                    hot_until = crate::base::cancel::deadline_in(HOT_FOR);
                }
                let quiet = if Instant::now() < hot_until { HOT } else { QUIET };
                quiet_until = crate::base::cancel::deadline_in(quiet);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::runtime::Op;
    use crate::runtime::fake::FakeRuntime;

    /// A directory removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            let d = std::env::temp_dir().join(format!("podwarden-monitor-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            TempDir(d)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Poll `cond` every 5 ms until it holds; fail after `within`.
    fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
        let end = Instant::now() + within;
        while Instant::now() < end {
            if cond() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(cond(), "timed out after {within:?} waiting for {what}");
    }

    /// The file names in `dir`, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().into_string().unwrap()).collect();
        v.sort();
        v
    }

    /// A running pod's container log directory in `root`, made.
    fn log_dir(root: &Path, ns: &str, name: &str, uid: &str, container: &str) -> PathBuf {
        let d = root.join(crate::logs::reader::pod_dir_name(ns, name, uid)).join(container);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn settings(root: &Path, policy: Policy, interval: Duration) -> Settings {
        Settings {
            pod_logs_dir: root.to_path_buf(),
            policy,
            interval,
            workers: 1,
            timeout: Duration::from_secs(5),
            pod_cache: None,
            new_logs: Arc::default(),
        }
    }

    const POLICY: Policy = Policy { max_size: 1000, max_files: 5 };

    /// Rotated files of `0.log` in `dir` (compressed or not).
    fn rotated(dir: &Path) -> Vec<String> {
        names(dir).into_iter().filter(|n| n.starts_with("0.log.")).collect()
    }

    #[test]
    fn the_first_pass_rotates_a_running_containers_log_over_the_limit_and_reopens_it() {
        let root = TempDir::new("pass");
        let fake = Arc::new(FakeRuntime::new());
        fake.set_recording(true);
        fake.add_running_pod("u1", "web", "default", "c", None);
        fake.add_running_pod("u2", "done", "default", "c", None);
        assert!(fake.exit_container("u2", "c", 0));
        let live = log_dir(&root.0, "default", "web", "u1", "c");
        let exited = log_dir(&root.0, "default", "done", "u2", "c");
        std::fs::write(live.join("0.log"), vec![b'a'; 1500]).unwrap();
        std::fs::write(exited.join("0.log"), vec![b'a'; 1500]).unwrap();
        // a long interval: only the first pass, at start, can rotate it
        let rotation = start(fake.clone(), settings(&root.0, POLICY, Duration::from_secs(3600))).unwrap();
        wait_for("the running container's log rotated", Duration::from_secs(5), || rotated(&live).len() == 1);
        // renamed to 0.log.<YYYYMMDD-hhmmss>, the live name reopened by the runtime
        let to = &rotated(&live)[0];
        assert_eq!(to.len(), "0.log.".len() + "YYYYMMDD-hhmmss".len(), "{to}");
        assert_eq!(std::fs::read(live.join(to)).unwrap().len(), 1500);
        assert!(!live.join("0.log").exists(), "the fake runtime does not write a new live log");
        assert_eq!(fake.calls_for("u1", Op::ReopenContainerLog).len(), 1);
        drop(rotation);
        // an exited container's log is not its to rotate
        assert_eq!(names(&exited), ["0.log"]);
        assert!(fake.calls_for("u2", Op::ReopenContainerLog).is_empty());
    }

    #[test]
    fn a_log_growing_past_the_limit_is_rotated_as_it_is_written_not_at_the_next_pass() {
        let root = TempDir::new("grow");
        let fake = Arc::new(FakeRuntime::new());
        fake.add_running_pod("u1", "web", "default", "c", None);
        let live = log_dir(&root.0, "default", "web", "u1", "c");
        std::fs::write(live.join("0.log"), b"small\n").unwrap();
        fake.set_recording(true);
        let rotation = start(fake.clone(), settings(&root.0, POLICY, Duration::from_secs(3600))).unwrap();
        // the first pass lists the containers, checks the log (small: kept)
        // and watches its directory
        let listed = || fake.calls().iter().any(|c| c.op == Op::ListPodSandbox);
        wait_for("the first pass's list", Duration::from_secs(5), listed);
        // the container writes on: inotify, not the hour-long interval,
        // brings the check (written again while the watch may still be
        // being set up, right after the list)
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut writes = 0;
        while rotated(&live).is_empty() && Instant::now() < deadline {
            let mut f = std::fs::OpenOptions::new().append(true).open(live.join("0.log")).unwrap();
            std::io::Write::write_all(&mut f, &[b'b'; 1200]).unwrap();
            drop(f);
            writes += 1;
            let until = Instant::now() + Duration::from_millis(500);
            while rotated(&live).is_empty() && Instant::now() < until.min(deadline) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let r = rotated(&live);
        assert_eq!(r.len(), 1, "not rotated within 5 s of the writes: {:?}", names(&live));
        let content = std::fs::read(live.join(&r[0])).unwrap();
        assert!(content.starts_with(b"small\n"));
        assert_eq!(content.len(), 6 + writes * 1200);
        assert_eq!(fake.calls_for("u1", Op::ReopenContainerLog).len(), 1);
        drop(rotation);
    }

    #[test]
    fn rotated_files_beyond_container_log_max_files_are_removed_and_older_ones_compressed() {
        let root = TempDir::new("maxfiles");
        let fake = Arc::new(FakeRuntime::new());
        fake.add_running_pod("u1", "web", "default", "c", None);
        let live = log_dir(&root.0, "default", "web", "u1", "c");
        let old = ["0.log.20200101-000001", "0.log.20200101-000002", "0.log.20200101-000003"];
        for n in old {
            std::fs::write(live.join(n), b"2020-01-01T00:00:00Z stdout F old\n").unwrap();
        }
        std::fs::write(live.join("0.log"), vec![b'a'; 1500]).unwrap();
        // three files in all: the live one and two rotated
        let policy = Policy { max_size: 1000, max_files: 3 };
        let rotation = start(fake.clone(), settings(&root.0, policy, Duration::from_secs(3600))).unwrap();
        let done = |r: &[String]| r.len() == 2 && r[0] == "0.log.20200101-000003.gz" && !r[1].starts_with("0.log.2020");
        wait_for("the oldest removed, the older compressed", Duration::from_secs(5), || done(&rotated(&live)));
        let r = rotated(&live);
        assert_eq!(std::fs::read(live.join(&r[1])).unwrap().len(), 1500, "the newest stays plain: {r:?}");
        assert!(!names(&live).iter().any(|n| n.ends_with(crate::logs::rotation::TMP)));
        drop(rotation);
    }

    #[test]
    fn dropping_the_handle_stops_every_thread_promptly() {
        let root = TempDir::new("stop");
        let fake = Arc::new(FakeRuntime::new());
        let rotation = start(fake, settings(&root.0, POLICY, Duration::from_secs(3600))).unwrap();
        let t = Instant::now();
        drop(rotation);
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }
}

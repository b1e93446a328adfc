//! The logind side of graceful node shutdown: a small [`Logind`] trait
//! (what podwarden asks of systemd-logind), a fake for tests, and the
//! logind thread that holds a delay inhibitor lock and turns
//! `PrepareForShutdown` into a [`Runner::run`] on its own `shutdown`
//! thread (so the logind thread keeps listening) / [`Runner::cancel`].
//!
//! The D-Bus implementation of the trait (`dbus_impl`: the dbus crate on
//! the system bus) talks to the real systemd-logind; the thread's logic is
//! tested here against the fake, and end to end against systemd-logind in
//! tests/logind.rs, tests/shutdown_e2e.rs and the Debian VM (tests/vm.rs).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use thiserror::Error;

use crate::agent::node_shutdown::{Report, Runner};
use crate::base::cancel::CancelToken;

#[derive(Debug, Error)]
pub enum LogindError {
    /// Nothing to connect to, or not connected (no bus error behind it).
    #[error("no system bus or logind: {0}")]
    Unavailable(String),
    /// The bus refused: `context` says what was asked (may be empty).
    #[error("no system bus or logind: {context}{source}")]
    Bus {
        context: String,
        #[source]
        source: dbus::Error,
    },
    #[error("logind call {call} failed: {}", .source.message().unwrap_or("no message"))]
    Call {
        call: &'static str,
        #[source]
        source: dbus::Error,
    },
}

/// What logind tells podwarden.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `PrepareForShutdown(b)` from the current owner of org.freedesktop.login1.
    PrepareForShutdown(bool),
    /// The bus connection broke, or logind's owner changed: reconnect.
    Lost,
}

/// A held inhibitor lock; dropping it releases the lock.
pub trait InhibitLock: Send {}

/// The calls podwarden makes to logind.
pub trait Logind: Send + Sync {
    /// (Re)connect to the bus.
    fn connect(&self) -> Result<(), LogindError>;
    /// `InhibitDelayMaxUSec`.
    fn inhibit_delay_max(&self) -> Result<Duration, LogindError>;
    /// Make logind re-read its configuration (SIGHUP through systemd's
    /// `KillUnit("systemd-logind.service")`).
    fn reload(&self) -> Result<(), LogindError>;
    /// `Manager.Inhibit("shutdown", who, why, "delay")`.
    fn inhibit(&self, who: &str, why: &str) -> Result<Box<dyn InhibitLock>, LogindError>;
    /// The next event, waiting at most `timeout`.
    fn next_event(&self, timeout: Duration) -> Result<Option<Event>, LogindError>;
}

/// A scriptable logind for tests: events are queued by the test; the fake
/// records whether a lock is held.
#[derive(Default)]
pub struct FakeLogind {
    events: Mutex<VecDeque<Event>>,
    arrived: Condvar,
    locks_held: Arc<std::sync::atomic::AtomicUsize>,
    pub inhibits: std::sync::atomic::AtomicUsize,
    pub delay_max: Mutex<Duration>,
    pub down: AtomicBool,
}

struct FakeLock(Arc<std::sync::atomic::AtomicUsize>);

impl InhibitLock for FakeLock {}

impl Drop for FakeLock {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl FakeLogind {
    pub fn new(delay_max: Duration) -> Self {
        let f = FakeLogind::default();
        *f.delay_max.lock() = delay_max;
        f
    }

    pub fn send(&self, e: Event) {
        self.events.lock().push_back(e);
        self.arrived.notify_all();
    }

    pub fn locks_held(&self) -> usize {
        self.locks_held.load(Ordering::SeqCst)
    }
}

impl Logind for FakeLogind {
    fn connect(&self) -> Result<(), LogindError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(LogindError::Unavailable("fake logind is down".into()));
        }
        Ok(())
    }

    fn inhibit_delay_max(&self) -> Result<Duration, LogindError> {
        Ok(*self.delay_max.lock())
    }

    fn reload(&self) -> Result<(), LogindError> {
        Ok(())
    }

    fn inhibit(&self, _who: &str, _why: &str) -> Result<Box<dyn InhibitLock>, LogindError> {
        self.connect()?;
        self.inhibits.fetch_add(1, Ordering::SeqCst);
        self.locks_held.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(FakeLock(self.locks_held.clone())))
    }

    fn next_event(&self, timeout: Duration) -> Result<Option<Event>, LogindError> {
        let mut q = self.events.lock();
        if q.is_empty() {
            self.arrived.wait_for(&mut q, timeout);
        }
        Ok(q.pop_front())
    }
}

/// Graceful shutdown settings.
#[derive(Debug, Clone)]
pub struct ShutdownConfig {
    /// Priority groups (priority, seconds), lowest first.
    pub groups: Vec<(i32, i64)>,
    pub priority_classes: std::collections::BTreeMap<String, i32>,
    pub root_dir: std::path::PathBuf,
    /// Where podwarden's logind drop-in goes (`/etc/systemd/logind.conf.d`);
    /// `None`: never write one.
    pub dropin_dir: Option<std::path::PathBuf>,
}

/// Name of podwarden's logind drop-in.
pub const DROPIN: &str = "99-podwarden.conf";

/// Directories logind reads drop-ins from, besides `/etc`'s.
const OTHER_DROPIN_DIRS: &[&str] = &["/run/systemd/logind.conf.d", "/usr/lib/systemd/logind.conf.d"];

/// Why logind's `InhibitDelayMaxSec` could not be raised to what
/// podwarden needs.
#[derive(Debug, Error)]
pub enum InhibitDelayError {
    #[error(transparent)]
    Logind(#[from] LogindError),
    #[error("logind's InhibitDelayMaxSec is {}s, below the {}s podwarden needs", .current.as_secs(), .want.as_secs())]
    TooLow { current: Duration, want: Duration },
    #[error("writing {}: {source}", .path.display())]
    WriteDropIn {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "logind's InhibitDelayMaxSec is still {}s after writing {}: {file} is read after it and sets InhibitDelayMaxSec={value}",
        .current.as_secs(),
        .path.display()
    )]
    Overridden { current: Duration, path: std::path::PathBuf, file: String, value: String },
    #[error(
        "logind's InhibitDelayMaxSec is still {}s after writing {} and reloading logind",
        .current.as_secs(),
        .path.display()
    )]
    NotRaised { current: Duration, path: std::path::PathBuf },
}

/// Make logind's `InhibitDelayMaxSec` at least `want`: write a drop-in,
/// reload logind, read the value back. On failure, say which later drop-in
/// overrides ours.
pub fn ensure_inhibit_delay(
    logind: &dyn Logind,
    want: Duration,
    dropin_dir: Option<&std::path::Path>,
) -> Result<Duration, InhibitDelayError> {
    let cur = logind.inhibit_delay_max()?;
    if cur >= want {
        return Ok(cur);
    }
    let Some(dir) = dropin_dir else {
        return Err(InhibitDelayError::TooLow { current: cur, want });
    };
    let path = dir.join(DROPIN);
    std::fs::create_dir_all(dir)
        .and_then(|()| {
            // 0644 like every file in /etc/systemd: configuration, no secret
            crate::base::fsutil::write_atomically_mode(
                &path,
                format!(
                    "# written by podwarden: its shutdownGracePeriod\n[Login]\nInhibitDelayMaxSec={}\n",
                    want.as_secs()
                )
                .as_bytes(),
                0o644,
            )
        })
        .map_err(|source| InhibitDelayError::WriteDropIn { path: path.clone(), source })?;
    logind.reload()?;
    let end = std::time::Instant::now() + Duration::from_secs(5);
    let mut now = cur;
    while std::time::Instant::now() < end {
        now = logind.inhibit_delay_max()?;
        if now >= want {
            log::info!("logind: InhibitDelayMaxSec raised to {}s through {}", now.as_secs(), path.display());
            return Ok(now);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(match later_override(dir) {
        Some((file, value)) => InhibitDelayError::Overridden { current: now, path, file, value },
        None => InhibitDelayError::NotRaised { current: now, path },
    })
}

/// Why podwarden could not write its drop-in into a directory, found
/// without writing anything (`podwarden validate`).
#[derive(Debug, Error)]
pub enum DropInDirError {
    #[error("{} is not a directory", .0.display())]
    NotADirectory(std::path::PathBuf),
    #[error("{} is not writable: {source}", .dir.display())]
    NotWritable {
        dir: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// It does not exist, and `at`, the nearest path above it that does,
    /// is no directory or cannot be written.
    #[error("{} does not exist and cannot be created: {}: {source}", .dir.display(), .at.display())]
    CannotCreate {
        dir: std::path::PathBuf,
        at: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Whether [`ensure_inhibit_delay`] could write its drop-in into `dir`
/// (making it first if need be), as far as can be told without writing:
/// the directory, or the nearest existing one above it, is a directory this
/// process may write (`faccessat`; a read-only mount or an immutable
/// directory refuses even root). Run by another user than root, a mode
/// that refuses that user (`EACCES`) says nothing about the agent, which
/// runs as root: not reported.
pub fn check_dropin_dir(dir: &std::path::Path) -> Result<(), DropInDirError> {
    let writable = |p: &std::path::Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        match crate::sys::writable(&c) {
            Err(e) if e.raw_os_error() == Some(libc::EACCES) && crate::sys::effective_uid() != 0 => Ok(()),
            r => r,
        }
    };
    if let Ok(m) = std::fs::metadata(dir) {
        if !m.is_dir() {
            return Err(DropInDirError::NotADirectory(dir.to_path_buf()));
        }
        return writable(dir).map_err(|source| DropInDirError::NotWritable { dir: dir.to_path_buf(), source });
    }
    let cannot = |at: &std::path::Path, source| DropInDirError::CannotCreate {
        dir: dir.to_path_buf(),
        at: at.to_path_buf(),
        source,
    };
    for at in dir.ancestors().skip(1).filter(|a| !a.as_os_str().is_empty()) {
        match std::fs::metadata(at) {
            Ok(m) if m.is_dir() => return writable(at).map_err(|e| cannot(at, e)),
            Ok(_) => return Err(cannot(at, std::io::Error::from_raw_os_error(libc::ENOTDIR))),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => continue,
            Err(e) => return Err(cannot(at, e)),
        }
    }
    Ok(())
}

/// `podwarden validate`'s warning about graceful node shutdown: configured,
/// and logind's `InhibitDelayMaxSec` may have to be raised to `need`, but
/// the drop-in could not be written.
#[derive(Debug, Error)]
#[error(
    "shutdownGracePeriod needs logind's InhibitDelayMaxSec at {}s or more, and podwarden could not write its drop-in \
     {DROPIN} (logindDropInDir): {source}; graceful node shutdown will be off unless InhibitDelayMaxSec is already \
     that high",
    .need.as_secs()
)]
pub struct DropInWarning {
    pub need: Duration,
    #[source]
    pub source: DropInDirError,
}

/// [`DropInWarning`] for `config`, if graceful node shutdown is configured
/// and its drop-in directory fails [`check_dropin_dir`].
pub fn dropin_warning(config: &crate::config::Config) -> Option<DropInWarning> {
    let groups = crate::agent::node_shutdown::groups_from_config(
        config.shutdown_grace_period.as_secs() as i64,
        config.shutdown_grace_period_critical_pods.as_secs() as i64,
        &config.shutdown_grace_period_by_pod_priority,
    );
    let need = Duration::from_secs(groups.iter().map(|(_, g)| (*g).max(0) as u64).sum());
    if need.is_zero() {
        return None;
    }
    check_dropin_dir(&config.logind_drop_in_dir).err().map(|source| DropInWarning { need, source })
}

/// A drop-in that sorts after podwarden's and sets InhibitDelayMaxSec.
fn later_override(dir: &std::path::Path) -> Option<(String, String)> {
    let mut files: Vec<std::path::PathBuf> = std::iter::once(dir.to_path_buf())
        .chain(OTHER_DROPIN_DIRS.iter().map(std::path::PathBuf::from))
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|r| r.flatten().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "conf"))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().as_ref() > DROPIN))
        .collect();
    files.sort_by_key(|p| p.file_name().map(|n| n.to_os_string()));
    files.iter().rev().find_map(|p| {
        let text = std::fs::read_to_string(p).ok()?;
        let v = text.lines().rev().find_map(|l| l.trim().strip_prefix("InhibitDelayMaxSec="))?;
        Some((p.display().to_string(), v.trim().to_string()))
    })
}

impl ShutdownConfig {
    pub fn total(&self) -> Duration {
        Duration::from_secs(self.groups.iter().map(|(_, g)| *g.max(&0) as u64).sum())
    }
}

/// Owns the logind thread; dropping it stops and joins the thread (a
/// shutdown run in progress stops waiting at once).
pub struct LogindThread {
    stop: CancelToken,
    join: Option<JoinHandle<()>>,
}

impl LogindThread {
    /// Start the logind thread; a node shutdown acts on `runner`'s parts
    /// and shows itself in its shared state.
    pub fn start(logind: Arc<dyn Logind>, runner: Runner, cfg: ShutdownConfig) -> std::io::Result<Self> {
        let stop = CancelToken::new();
        let s = stop.clone();
        let join = crate::base::thread::spawn("logind", None, move || run(&*logind, &runner, &cfg, &s))?;
        Ok(LogindThread { stop, join: Some(join) })
    }
}

impl Drop for LogindThread {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// A node shutdown running on its own `shutdown` thread, so the logind
/// thread keeps polling logind (a cancel, a stop) while the windows run.
struct InFlight {
    cancel: CancelToken,
    join: JoinHandle<Report>,
    /// The delay inhibitor lock: the `shutdown` thread releases it the
    /// moment its run is over (not at the logind thread's next poll); a
    /// cancel takes it back.
    lock: Arc<Mutex<Option<Box<dyn InhibitLock>>>>,
}

impl InFlight {
    fn start(runner: &Runner, cfg: &ShutdownConfig, lock: Option<Box<dyn InhibitLock>>) -> std::io::Result<Self> {
        let cancel = CancelToken::new();
        let lock = Arc::new(Mutex::new(lock));
        let (r, c, groups, classes, root, held) = (
            runner.clone(),
            cancel.clone(),
            cfg.groups.clone(),
            cfg.priority_classes.clone(),
            cfg.root_dir.clone(),
            lock.clone(),
        );
        let join = crate::base::thread::spawn("shutdown", None, move || {
            let report = r.run(&groups, &classes, Some(&root), &c);
            if !c.is_cancelled() {
                // release: every pod's containers stopped or the windows are over
                let released = held.lock().take();
                r.state.lock().lock_held = false;
                drop(released);
                log::info!(
                    "logind: {} pod(s) stopped{}; inhibitor lock released",
                    report.killed.len(),
                    if report.timed_out { " (some at the end of their window)" } else { "" }
                );
            }
            report
        })?;
        Ok(InFlight { cancel, join, lock })
    }

    /// Stop the run now and wait for it (it returns within a wait slice).
    /// Returns what it did and its lock (unless the run ended first and
    /// released it).
    fn cancel(self) -> (Option<Report>, Option<Box<dyn InhibitLock>>) {
        self.cancel.cancel();
        let report = self.join.join().ok();
        let lock = self.lock.lock().take();
        (report, lock)
    }
}

/// The run is over (it released its lock): note the pods it stopped.
fn finished(run: InFlight, runner: &Runner, stopped: &mut Vec<crate::model::Uid>) {
    let report = run.join.join().ok();
    // a run that panicked still holds it
    drop(run.lock.lock().take());
    runner.state.lock().lock_held = false;
    if let Some(report) = report {
        *stopped = report.killed;
    }
}

/// How often the logind thread looks at its stop token between events.
const POLL: Duration = Duration::from_millis(200);

/// What podwarden tells logind it is holding the shutdown for.
const WHO: &str = "podwarden";
const WHY: &str = "Kubernetes pods shutting down";

/// After an event: keep listening, or reconnect (and take the lock again).
enum Flow {
    Listen,
    Reconnect,
}

/// After (re)connecting.
enum Connected {
    /// Connected; the delay lock taken (`None`: a shutdown run holds one).
    Lock(Option<Box<dyn InhibitLock>>),
    /// Not now: try again (after a second's wait).
    Retry,
    /// Graceful node shutdown cannot work (logind's delay is wrong): the
    /// thread ends.
    Off,
}

/// The logind thread's state, kept across reconnects.
struct Watch<'a> {
    logind: &'a dyn Logind,
    runner: &'a Runner,
    cfg: &'a ShutdownConfig,
    stop: &'a CancelToken,
    /// Warned that logind is unavailable (once until the lock is back).
    warned: bool,
    /// `InhibitDelayMaxSec` checked (once, at the first connection).
    checked: bool,
    /// Pods this shutdown stopped (`false` may come from a restarted
    /// logind).
    stopped: Vec<crate::model::Uid>,
    /// The shutdown running now.
    in_flight: Option<InFlight>,
    /// A shutdown was signalled and not cancelled.
    shutting_down: bool,
}

impl Watch<'_> {
    /// What the node view shows: the problem, and whether a lock is held
    /// (by this thread or by a shutdown run).
    fn problem(&self, p: Option<crate::agent::node_shutdown::Problem>, held: bool) {
        let mut st = self.runner.state.lock();
        st.problem = p;
        st.lock_held = held;
    }

    /// A problem for now (logind unreachable, retried).
    fn for_now(message: String) -> Option<crate::agent::node_shutdown::Problem> {
        Some(crate::agent::node_shutdown::Problem { off: false, message })
    }

    /// A Warning event on the node (logged too, at warning): graceful
    /// shutdown is configured and cannot work, now or at all; `podwarden
    /// node` also shows why.
    fn tell(&self, reason: &str, message: &str) {
        let node = crate::telemetry::events::ObjectRef::node(&self.runner.node_name);
        self.runner.events.event(&node, crate::telemetry::events::EventType::Warning, reason, message);
    }

    /// No bus or no logind (yet): warn once (log and event), show why, wait
    /// a second.
    fn unavailable(&mut self, e: &dyn std::fmt::Display, run_holds_lock: bool) {
        if !self.warned && !self.shutting_down && !self.stop.is_cancelled() {
            self.tell(
                crate::agent::node_shutdown::REASON_UNAVAILABLE,
                &format!("graceful node shutdown unavailable for now: {e}; retrying every second"),
            );
            self.warned = true;
        }
        self.problem(Self::for_now(e.to_string()), run_holds_lock);
        self.stop.sleep(Duration::from_secs(1));
    }

    /// A shutdown run that is over: note the pods it stopped, release its
    /// lock.
    fn reap(&mut self) {
        if let Some(run) = self.in_flight.take_if(|r| r.join.is_finished()) {
            finished(run, self.runner, &mut self.stopped);
        }
    }

    /// (Re)connect (the first time also checking logind's delay) and take
    /// the delay lock unless a shutdown run holds one.
    fn connect(&mut self) -> Connected {
        if !self.checked {
            if let Err(e) = self.logind.connect() {
                self.unavailable(&e, false);
                return Connected::Retry;
            }
            match ensure_inhibit_delay(self.logind, self.cfg.total(), self.cfg.dropin_dir.as_deref()) {
                Ok(_) => self.checked = true,
                Err(e) => {
                    // configured but cannot work: an error, not a warning
                    let node = crate::telemetry::events::ObjectRef::node(&self.runner.node_name);
                    let off = crate::agent::node_shutdown::REASON_OFF;
                    self.runner.events.failure(&node, off, &format!("graceful node shutdown is off: {e}"));
                    let problem = crate::agent::node_shutdown::Problem { off: true, message: e.to_string() };
                    self.problem(Some(problem), false);
                    return Connected::Off;
                }
            }
        }
        if let Err(e) = self.logind.connect() {
            self.unavailable(&e, self.in_flight.is_some());
            return Connected::Retry;
        }
        let mut lock = None;
        if self.in_flight.is_none() {
            match self.logind.inhibit(WHO, WHY) {
                Ok(l) => lock = Some(l),
                Err(e) => {
                    self.unavailable(&e, false);
                    return Connected::Retry;
                }
            }
        }
        if self.warned {
            log::info!("logind: inhibitor lock taken again");
        }
        self.warned = false;
        self.problem(None, true);
        Connected::Lock(lock)
    }

    /// Handle logind's events on this connection until it is lost (or the
    /// lock cannot be taken again) or the thread is stopped; `lock` is
    /// released when it returns.
    fn listen(&mut self, mut lock: Option<Box<dyn InhibitLock>>) {
        while !self.stop.is_cancelled() {
            let event = self.logind.next_event(POLL);
            self.reap();
            let flow = match event {
                Ok(None) => Flow::Listen,
                Ok(Some(Event::PrepareForShutdown(true))) => self.shutdown_coming(&mut lock),
                Ok(Some(Event::PrepareForShutdown(false))) => self.shutdown_cancelled(&mut lock),
                Ok(Some(Event::Lost)) | Err(_) => self.lost(),
            };
            if let Flow::Reconnect = flow {
                break;
            }
        }
        drop(lock);
    }

    /// `PrepareForShutdown(true)`: the run starts on its own thread with
    /// the lock (a repeated signal during the same shutdown is ignored).
    fn shutdown_coming(&mut self, lock: &mut Option<Box<dyn InhibitLock>>) -> Flow {
        if self.shutting_down {
            return Flow::Listen;
        }
        log::info!("logind: shutdown coming; stopping pods within {:?}", self.cfg.total());
        match InFlight::start(self.runner, self.cfg, lock.take()) {
            Ok(run) => {
                self.in_flight = Some(run);
                self.shutting_down = true;
            }
            Err(e) => log::error!("logind: cannot start the shutdown thread: {e}"),
        }
        Flow::Listen
    }

    /// `PrepareForShutdown(false)`: a run in progress stops at once, the
    /// stopped pods start again, the lock is held again (reconnect when it
    /// cannot be taken).
    fn shutdown_cancelled(&mut self, lock: &mut Option<Box<dyn InhibitLock>>) -> Flow {
        if !self.shutting_down {
            return Flow::Listen;
        }
        self.shutting_down = false;
        if let Some(run) = self.in_flight.take() {
            log::info!("logind: shutdown cancelled while it ran; stopping it");
            let (report, run_lock) = run.cancel();
            if let Some(r) = report {
                self.stopped = r.killed;
            }
            if run_lock.is_some() {
                *lock = run_lock;
            }
        }
        log::info!("logind: shutdown cancelled; reopening admission and restarting stopped pods");
        self.runner.cancel(&self.stopped);
        self.stopped.clear();
        if lock.is_none() {
            match self.logind.inhibit(WHO, WHY) {
                Ok(l) => *lock = Some(l),
                Err(e) => {
                    log::warn!("logind: cannot take the inhibitor lock again: {e}");
                    self.runner.state.lock().lock_held = false;
                    return Flow::Reconnect;
                }
            }
        }
        self.runner.state.lock().lock_held = true;
        Flow::Listen
    }

    /// The bus connection broke, or logind's owner changed.
    fn lost(&mut self) -> Flow {
        if self.shutting_down || self.stop.is_cancelled() {
            // the machine is going down (the bus and logind stop with it)
            // or the agent is: nothing to warn about
            log::info!("logind: connection lost while the node or the agent stops");
            self.warned = true;
            return Flow::Reconnect;
        }
        log::warn!("logind: connection lost; reconnecting");
        self.problem(Self::for_now("connection to logind lost; reconnecting".into()), self.in_flight.is_some());
        Flow::Reconnect
    }

    /// The thread stops: a run in progress stops waiting (its pods go on
    /// stopping).
    fn stopping(&mut self) {
        if let Some(run) = self.in_flight.take() {
            log::info!("logind: stopping while a node shutdown runs; it stops waiting");
            drop(run.cancel());
        }
        self.runner.state.lock().lock_held = false;
    }
}

/// The logind thread: connect, hold the delay lock, act on logind's
/// events; reconnect every second while logind is away.
fn run(logind: &dyn Logind, runner: &Runner, cfg: &ShutdownConfig, stop: &CancelToken) {
    let mut watch = Watch {
        logind,
        runner,
        cfg,
        stop,
        warned: false,
        checked: false,
        stopped: Vec::new(),
        in_flight: None,
        shutting_down: false,
    };
    runner.state.lock().configured = true;
    runner.load_state(&cfg.root_dir);
    while !stop.is_cancelled() {
        watch.reap();
        match watch.connect() {
            Connected::Lock(lock) => watch.listen(lock),
            Connected::Retry => {}
            Connected::Off => return,
        }
    }
    watch.stopping();
}

/// logind over D-Bus (the system bus; `DBUS_SYSTEM_BUS_ADDRESS` is honoured).
pub mod dbus_impl {
    use std::collections::VecDeque;
    use std::sync::Arc;
    use std::time::Duration;

    use dbus::blocking::Connection;
    use dbus::message::MatchRule;
    use parking_lot::Mutex;

    use super::{Event, InhibitLock, Logind, LogindError};

    const DEST: &str = "org.freedesktop.login1";
    const PATH: &str = "/org/freedesktop/login1";
    const MANAGER: &str = "org.freedesktop.login1.Manager";
    const CALL_TIMEOUT: Duration = Duration::from_secs(5);

    struct Lock(#[allow(dead_code)] dbus::arg::OwnedFd);

    impl InhibitLock for Lock {}

    /// See the module docs. Only signals from the current owner of
    /// org.freedesktop.login1 count: any local client may broadcast a
    /// `PrepareForShutdown` on the system bus.
    #[derive(Default)]
    pub struct DbusLogind {
        conn: Mutex<Option<Connection>>,
        events: Arc<Mutex<VecDeque<Event>>>,
    }

    fn err(call: &'static str, e: dbus::Error) -> LogindError {
        LogindError::Call { call, source: e }
    }

    impl DbusLogind {
        pub fn new() -> Self {
            Self::default()
        }

        fn with_conn<T>(&self, f: impl FnOnce(&Connection) -> Result<T, LogindError>) -> Result<T, LogindError> {
            let guard = self.conn.lock();
            match guard.as_ref() {
                Some(c) => f(c),
                None => Err(LogindError::Unavailable("not connected".into())),
            }
        }
    }

    impl Logind for DbusLogind {
        fn connect(&self) -> Result<(), LogindError> {
            let conn =
                Connection::new_system().map_err(|source| LogindError::Bus { context: String::new(), source })?;
            let owner: String = conn
                .with_proxy("org.freedesktop.DBus", "/org/freedesktop/DBus", CALL_TIMEOUT)
                .method_call("org.freedesktop.DBus", "GetNameOwner", (DEST,))
                .map(|(o,): (String,)| o)
                .map_err(|source| LogindError::Bus { context: format!("{DEST} is not on the bus: "), source })?;
            self.events.lock().clear();
            let q = self.events.clone();
            // Filtered by the bus on interface, member and path; the sender is
            // checked here against logind's unique name, so a broadcast by
            // any other client is ignored.
            let rule = MatchRule::new_signal(MANAGER, "PrepareForShutdown").with_path(PATH);
            conn.add_match(rule, move |(active,): (bool,), _, msg: &dbus::Message| {
                match msg.sender() {
                    Some(s) if *s == *owner => q.lock().push_back(Event::PrepareForShutdown(active)),
                    // anyone on the bus can send these: at most one line a minute
                    other => {
                        static FORGED: crate::base::logging::RateLimit =
                            crate::base::logging::RateLimit::new(Duration::from_secs(60));
                        if let Some(held) = FORGED.allow() {
                            log::warn!(
                                "ignoring PrepareForShutdown({active}) from {}: not logind ({owner}){}",
                                other.map_or_else(|| "an unknown sender".to_string(), |s| s.to_string()),
                                crate::base::logging::held_back(held, Duration::from_secs(60))
                            );
                        }
                    }
                }
                true
            })
            .map_err(|e| err("AddMatch", e))?;
            let q = self.events.clone();
            let rule =
                MatchRule::new_signal("org.freedesktop.DBus", "NameOwnerChanged").with_sender("org.freedesktop.DBus");
            conn.add_match(rule, move |(name, _old, _new): (String, String, String), _, _| {
                if name == DEST {
                    q.lock().push_back(Event::Lost);
                }
                true
            })
            .map_err(|e| err("AddMatch", e))?;
            *self.conn.lock() = Some(conn);
            Ok(())
        }

        fn inhibit_delay_max(&self) -> Result<Duration, LogindError> {
            self.with_conn(|c| {
                use dbus::blocking::stdintf::org_freedesktop_dbus::Properties;
                let us: u64 = c
                    .with_proxy(DEST, PATH, CALL_TIMEOUT)
                    .get(MANAGER, "InhibitDelayMaxUSec")
                    .map_err(|e| err("Get InhibitDelayMaxUSec", e))?;
                Ok(Duration::from_micros(us))
            })
        }

        fn reload(&self) -> Result<(), LogindError> {
            self.with_conn(|c| {
                c.with_proxy("org.freedesktop.systemd1", "/org/freedesktop/systemd1", CALL_TIMEOUT)
                    .method_call::<(), _, _, _>(
                        "org.freedesktop.systemd1.Manager",
                        "KillUnit",
                        ("systemd-logind.service", "main", libc::SIGHUP),
                    )
                    .map_err(|e| err("KillUnit systemd-logind.service SIGHUP", e))
            })
        }

        fn inhibit(&self, who: &str, why: &str) -> Result<Box<dyn InhibitLock>, LogindError> {
            self.with_conn(|c| {
                let (fd,): (dbus::arg::OwnedFd,) = c
                    .with_proxy(DEST, PATH, CALL_TIMEOUT)
                    .method_call(MANAGER, "Inhibit", ("shutdown", who, why, "delay"))
                    .map_err(|e| err("Inhibit", e))?;
                Ok(Box::new(Lock(fd)) as Box<dyn InhibitLock>)
            })
        }

        fn next_event(&self, timeout: Duration) -> Result<Option<Event>, LogindError> {
            if let Some(e) = self.events.lock().pop_front() {
                return Ok(Some(e));
            }
            let lost = self.with_conn(|c| c.process(timeout).map_err(|e| err("process", e)));
            if lost.is_err() {
                *self.conn.lock() = None;
                return Ok(Some(Event::Lost));
            }
            Ok(self.events.lock().pop_front())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{DropInDirError, check_dropin_dir};

    #[test]
    fn a_dropin_dir_that_cannot_be_written_or_made_is_named_with_why() {
        let base = std::env::temp_dir().join(format!("pw-dropin-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        // there and writable; or not there and can be made
        assert!(check_dropin_dir(&base).is_ok());
        assert!(check_dropin_dir(&base.join("a/b/logind.conf.d")).is_ok());
        // a file where the directory should be
        let file = base.join("file");
        std::fs::write(&file, "").unwrap();
        let e = check_dropin_dir(&file).unwrap_err();
        assert!(matches!(&e, DropInDirError::NotADirectory(p) if *p == file), "{e:?}");
        assert_eq!(e.to_string(), format!("{} is not a directory", file.display()));
        // a file above it: cannot be made, and where it stops is named
        let under = file.join("sub/logind.conf.d");
        let e = check_dropin_dir(&under).unwrap_err();
        match &e {
            DropInDirError::CannotCreate { dir, at, source } => {
                assert_eq!((dir, at), (&under, &file));
                assert_eq!(source.raw_os_error(), Some(libc::ENOTDIR));
            }
            other => panic!("{other:?}"),
        }
        assert!(
            e.to_string().starts_with(&format!(
                "{} does not exist and cannot be created: {}: ",
                under.display(),
                file.display()
            )),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&base);
    }
}

//! The runtime's container events, followed by the `runtime-events`
//! thread: a container created, started, exited, OOM-killed or removed is
//! told the moment the runtime knows it, so that the pod's worker acts at
//! once instead of at the next relist (the kubelet's evented PLEG). The
//! relist stays the safety net, and the only source on a runtime without
//! an event stream. A broken stream is opened again with a back-off
//! (0.5 s doubling to 30 s), and every (re)opening is followed by a
//! catch-up (the events missed meanwhile).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{ContainerState, Runtime, RuntimeError, RuntimePod};
use crate::base::cancel::CancelToken;

/// What happened to a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Created,
    Started,
    Exited,
    Oom,
    Deleted,
}

/// One container event (the ID may be a sandbox's: its pause container).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerEvent {
    pub container_id: String,
    pub kind: Kind,
    /// For [`Kind::Exited`], when the stream tells: the container's exit.
    pub exit: Option<Exit>,
}

/// A container's exit as the runtime's event told it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub code: i32,
    /// Unix nanoseconds.
    pub at_ns: i64,
}

impl ContainerEvent {
    /// Does `list` (a relist's) show what the event told? The CRI's view
    /// of a container follows containerd's task events by a few
    /// milliseconds: a list made at once may still show it running. An
    /// event about something the list does not hold is seen (another
    /// client's container, or one already removed).
    pub fn seen_in(&self, list: &[RuntimePod]) -> bool {
        let id = self.container_id.as_str();
        let container = list.iter().flat_map(|p| &p.containers).find(|c| c.id == id);
        let sandbox = list.iter().flat_map(|p| &p.sandboxes).find(|s| s.id == id);
        match self.kind {
            Kind::Exited | Kind::Oom => {
                container.is_none_or(|c| c.state == ContainerState::Exited) && sandbox.is_none_or(|s| !s.ready)
            }
            Kind::Started => container.is_none_or(|c| c.state != ContainerState::Created),
            Kind::Created | Kind::Deleted => true,
        }
    }
}

/// Which event stream the runtime serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The CRI's `GetContainerEvents` (containerd 1.7+, CRI-O).
    Cri,
    /// containerd's own event service (containerd 1.6).
    Containerd,
    /// The fake runtime's.
    Fake,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Cri => "cri",
            Source::Containerd => "containerd",
            Source::Fake => "fake",
        }
    }
}

/// What [`Runtime::watch_events`] tells its caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// The stream is open: events from now on will come.
    Opened(Source),
    Event(ContainerEvent),
}

/// How long after an event a list may still not show it: the CRI's view
/// follows containerd's events (a sandbox is in the CRI's list only once
/// RunPodSandbox is over, after its task's start event), so only a list
/// begun this long after the last event is vouched for by a quiet stream.
pub const SETTLE: Duration = Duration::from_secs(1);

/// The stream's state, for the metrics and the node view.
#[derive(Debug, Default)]
pub struct StreamState {
    source: Mutex<Option<Source>>,
    open: AtomicBool,
    /// The runtime has no event stream (the relist alone).
    unsupported: AtomicBool,
    /// Streams opened, the first one included.
    opened: AtomicU64,
    /// Streams that broke (or could not be opened) and were tried again.
    broken: AtomicU64,
    events: AtomicU64,
    /// When the stream last opened or told of a change: a runtime list
    /// begun after this, with the stream open since, is still the
    /// runtime's state (see [`StreamState::quiet_since`]).
    changed_at: Mutex<Option<Instant>>,
}

impl StreamState {
    /// The stream is open and told of nothing (and did not open) within
    /// [`SETTLE`] before `t` or after it: a list begun at `t` still shows
    /// every sandbox and container as the runtime has them, as far as the
    /// runtime's events tell (task create, start, exit, OOM and delete;
    /// container create and delete).
    pub fn quiet_since(&self, t: Instant) -> bool {
        self.open.load(Ordering::SeqCst) && self.changed_at.lock().is_some_and(|c| c + SETTLE < t)
    }

    fn changed(&self) {
        *self.changed_at.lock() = Some(Instant::now());
    }

    /// Tests: the stream opened at `at` and told of nothing since.
    #[cfg(test)]
    pub fn open_since(&self, at: Instant) {
        *self.source.lock() = Some(Source::Fake);
        *self.changed_at.lock() = Some(at);
        self.open.store(true, Ordering::SeqCst);
    }

    /// Tests: an event now.
    #[cfg(test)]
    pub fn event_now(&self) {
        self.changed();
    }

    /// The source of the open stream, if one is open.
    pub fn open_source(&self) -> Option<Source> {
        if self.open.load(Ordering::Relaxed) { *self.source.lock() } else { None }
    }

    pub fn is_unsupported(&self) -> bool {
        self.unsupported.load(Ordering::Relaxed)
    }

    /// Streams opened (the first included).
    pub fn opened_total(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Streams that broke or could not be opened.
    pub fn broken_total(&self) -> u64 {
        self.broken.load(Ordering::Relaxed)
    }

    pub fn events_total(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }
}

/// The back-off before opening a broken stream again.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Owns the `runtime-events` thread; dropping it stops and joins it.
pub struct EventStream {
    cancel: CancelToken,
    join: Option<JoinHandle<()>>,
}

impl EventStream {
    /// Follow `runtime`'s events on the `runtime-events` thread.
    /// `on_change` gets each event (`Some`) and, after every (re)opening,
    /// `None`: look at everything, events may have been missed. It runs on
    /// the stream's thread and must not block.
    pub fn start(
        runtime: Arc<dyn Runtime>,
        state: Arc<StreamState>,
        on_change: impl Fn(Option<&ContainerEvent>) + Send + 'static,
    ) -> std::io::Result<Self> {
        let cancel = CancelToken::new();
        let c = cancel.clone();
        let join =
            crate::base::thread::spawn("runtime-events", None, move || follow(&*runtime, &state, &c, &on_change))?;
        Ok(EventStream { cancel, join: Some(join) })
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(j) = self.join.take() {
            // a quiet stream parks its thread between looks at the token:
            // woken, it sees the cancel now, not a poll period later (an
            // agent stopped by systemd at power-off exits that much sooner)
            j.thread().unpark();
            let _ = j.join();
        }
    }
}

fn follow(
    runtime: &dyn Runtime,
    state: &StreamState,
    cancel: &CancelToken,
    on_change: &dyn Fn(Option<&ContainerEvent>),
) {
    let mut retry = RETRY_FIRST;
    let mut was_broken = false;
    loop {
        let r = runtime.watch_events(cancel, &mut |note| match note {
            Note::Opened(source) => {
                *state.source.lock() = Some(source);
                state.changed();
                state.open.store(true, Ordering::SeqCst);
                state.opened.fetch_add(1, Ordering::Relaxed);
                if was_broken {
                    log::info!("the runtime's event stream ({}) is open again", source.name());
                } else {
                    log::info!("following the runtime's container events ({})", source.name());
                }
                retry = RETRY_FIRST;
                on_change(None);
            }
            Note::Event(e) => {
                state.events.fetch_add(1, Ordering::Relaxed);
                state.changed();
                log::trace!("runtime event: {:?} {}", e.kind, e.container_id);
                on_change(Some(&e));
            }
        });
        state.open.store(false, Ordering::SeqCst);
        match r {
            Ok(()) => return,
            Err(RuntimeError::Unimplemented { .. }) => {
                state.unsupported.store(true, Ordering::Relaxed);
                log::info!("the runtime has no container event stream: the relist (every second) sees pod changes");
                return;
            }
            Err(e) => {
                if cancel.is_cancelled() {
                    return;
                }
                state.broken.fetch_add(1, Ordering::Relaxed);
                // the relist, rare while the stream was open, is every
                // second again from now on
                on_change(None);
                if !was_broken {
                    log::warn!(
                        "the runtime's event stream broke: {e}; opening it again (meanwhile the relist sees changes)"
                    );
                } else {
                    log::debug!("the runtime's event stream: {e}; trying again in {retry:?}");
                }
                was_broken = true;
                if cancel.sleep(retry) {
                    return;
                }
                retry = (retry * 2).min(RETRY_MAX);
            }
        }
    }
}

//! Cooperative cancellation for one pass of pod work, and the start gate that
//! makes "no container is started after termination was requested" strict.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock};

/// `t + d`, saturating far in the future (about a century) instead of
/// panicking ("overflow when adding duration to instant") on a huge `d`.
pub fn add_saturating(t: Instant, d: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    t.checked_add(d.min(FAR)).or_else(|| t.checked_add(Duration::from_secs(24 * 3600))).unwrap_or(t)
}

/// `Instant::now() + d`, saturating (see [`add_saturating`]).
pub fn deadline_in(d: Duration) -> Instant {
    add_saturating(Instant::now(), d)
}

/// Cancelled once; every clone sees it. `receiver()` becomes disconnected on
/// cancellation, so a thread can `select!` on it beside other channels.
#[derive(Clone)]
pub struct CancelToken(Arc<TokenInner>);

struct TokenInner {
    cancelled: AtomicBool,
    tx: Mutex<Option<Sender<()>>>,
    rx: Receiver<()>,
    /// Threads parked on something else (a gRPC stream) that cancelling
    /// unparks.
    parked: Mutex<Vec<std::thread::Thread>>,
}

impl Default for CancelToken {
    fn default() -> Self {
        Self::new()
    }
}

impl CancelToken {
    pub fn new() -> Self {
        let (tx, rx) = crossbeam_channel::bounded(0);
        CancelToken(Arc::new(TokenInner {
            cancelled: AtomicBool::new(false),
            tx: Mutex::new(Some(tx)),
            rx,
            parked: Mutex::new(Vec::new()),
        }))
    }

    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::SeqCst);
        self.0.tx.lock().take();
        for t in self.0.parked.lock().drain(..) {
            t.unpark();
        }
    }

    /// Unpark the calling thread when this is cancelled (at once if it
    /// already is): a thread that parks between looks at the token sees
    /// the cancellation without polling for it.
    pub fn unpark_me_on_cancel(&self) {
        let me = std::thread::current();
        let mut parked = self.0.parked.lock();
        if self.is_cancelled() {
            me.unpark();
        } else if !parked.iter().any(|t| t.id() == me.id()) {
            parked.push(me);
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::SeqCst)
    }

    /// Disconnected once cancelled; never carries a message.
    pub fn receiver(&self) -> &Receiver<()> {
        &self.0.rx
    }

    /// Sleep until `deadline` or cancellation. Returns true when cancelled.
    pub fn sleep_until(&self, deadline: Instant) -> bool {
        if self.is_cancelled() {
            return true;
        }
        let _ = self.0.rx.recv_deadline(deadline);
        self.is_cancelled()
    }

    pub fn sleep(&self, d: Duration) -> bool {
        self.sleep_until(deadline_in(d))
    }
}

/// Per-pod gate closed forever once termination is requested. Starting a
/// sandbox or container happens under the read side after checking the gate;
/// closing takes the write side, so once `close` returns no start is in
/// flight and none can begin.
#[derive(Default)]
pub struct StartGate {
    closed: AtomicBool,
    lock: RwLock<()>,
}

/// Returned by [`StartGate::run`] when the gate is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateClosed;

impl StartGate {
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Run `start` unless the gate is closed.
    pub fn run<T>(&self, start: impl FnOnce() -> T) -> Result<T, GateClosed> {
        let _read = self.lock.read();
        if self.is_closed() {
            return Err(GateClosed);
        }
        Ok(start())
    }

    /// Close the gate and wait up to `max_wait` for a start in flight to
    /// return. Returns false if a start was still in flight after the wait
    /// (it will be stopped by the terminating phase).
    pub fn close(&self, max_wait: Duration) -> bool {
        self.closed.store(true, Ordering::SeqCst);
        self.lock.try_write_for(max_wait).is_some()
    }
}

//! The housekeeping thread: [`Agent::relist`] every second (while the
//! runtime's event stream is open, only on its events and in a pass whose
//! newest list is older than [`crate::runtime::cache::EVENTED_RELIST`]), and at
//! once when the stream tells of a change ([`Waker::relist_now`]);
//! every 2 s or at once when woken ([`Waker::wake`]), [`Agent::housekeeping`]
//! instead (a housekeeping pass relists too, from the same runtime list).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::agent::manager::Agent;
use crate::runtime::events::ContainerEvent;

#[derive(Default)]
struct Flags {
    wake: bool,
    /// A relist is wanted now (a runtime event), not a whole pass.
    relist: bool,
    /// The events asking for it, each with when it came: until a list
    /// shows what an event told (the CRI's view of a container follows
    /// containerd's task events by a few milliseconds), the relist is
    /// repeated every [`SETTLE_RETRY`], for at most [`SETTLE_FOR`].
    events: Vec<(ContainerEvent, Instant)>,
    /// Relist again at this time (an event not yet seen in a list).
    retry_at: Option<Instant>,
    stop: bool,
}

/// Events kept for the settle check; beyond this a burst only asks for a
/// relist (the next ones are compared again).
const MAX_PENDING_EVENTS: usize = 1024;
/// How often a relist is repeated while an event is not yet in the list.
const SETTLE_RETRY: Duration = Duration::from_millis(15);
/// How long an event waits to be seen in a list before the periodic
/// relist is left to find it.
const SETTLE_FOR: Duration = Duration::from_secs(1);

/// Why the periodic function runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Period,
    Woken,
    Relist,
}

/// Wakes housekeeping from any thread.
#[derive(Clone, Default)]
pub struct Waker(Arc<(Mutex<Flags>, Condvar)>);

impl Waker {
    pub fn wake(&self) {
        self.0.0.lock().wake = true;
        self.0.1.notify_all();
    }

    /// Relist now (a runtime event): requests made while a relist runs
    /// are served by one more relist after it. With the event, the relist
    /// is repeated shortly until a list shows it (see [`Flags::events`]).
    pub fn relist_now(&self, event: Option<&ContainerEvent>) {
        let mut f = self.0.0.lock();
        f.relist = true;
        if let Some(e) = event
            && f.events.len() < MAX_PENDING_EVENTS
        {
            f.events.push((e.clone(), Instant::now()));
        }
        drop(f);
        self.0.1.notify_all();
    }

    /// Take the events waiting to be seen in a list.
    fn take_events(&self) -> Vec<(ContainerEvent, Instant)> {
        std::mem::take(&mut self.0.0.lock().events)
    }

    /// Put back the events a list did not show yet, and relist again soon.
    fn settle_later(&self, mut unseen: Vec<(ContainerEvent, Instant)>) {
        unseen.retain(|(_, at)| at.elapsed() < SETTLE_FOR);
        if unseen.is_empty() {
            return;
        }
        let mut f = self.0.0.lock();
        f.events.extend(unseen);
        f.retry_at = Some(crate::base::cancel::deadline_in(SETTLE_RETRY));
    }

    fn stop(&self) {
        self.0.0.lock().stop = true;
        self.0.1.notify_all();
    }
}

/// How often free heap memory goes back to the kernel: soon enough that a
/// burst (110 pods starting: 1.5 MiB) does not linger in the RSS, rarely
/// enough that the trim's walk over the free chunks costs nothing
/// measurable (`scripts/bench.sh footprint`'s CPU figure).
const TRIM_PERIOD: Duration = Duration::from_secs(5);

/// Give the pages of free heap memory back to the kernel. glibc keeps what
/// freed chunks cover resident (only the top of each arena is trimmed by
/// itself), so memory a burst used (starting many pods, a big list) would
/// stay in the RSS for good.
fn trim_heap() {
    crate::sys::malloc_trim();
}

/// Owns a periodic thread; dropping it stops and joins the thread.
pub struct Periodic {
    waker: Waker,
    join: Option<JoinHandle<()>>,
}

/// The housekeeping thread.
pub type Housekeeping = Periodic;

impl Periodic {
    /// The daemon's housekeeping thread: a relist every `relist`, replaced
    /// by a housekeeping pass every `period` or when woken. One runtime list
    /// a relist period serves both.
    /// Every [`TRIM_PERIOD`] it also hands the allocator's free memory
    /// back to the kernel.
    /// While the runtime's event stream is open, its events ask for the
    /// relists, and a housekeeping pass works from the newest list unless
    /// it is older than [`EVENTED_RELIST`].
    pub fn with_relist(agent: Arc<Agent>, period: Duration, relist: Duration) -> std::io::Result<Self> {
        let mut next_pass = Instant::now();
        let mut next_trim = crate::base::cancel::deadline_in(TRIM_PERIOD);
        // while the stream is open, the thread wakes for the passes only;
        // a pass lists when the newest list is older than EVENTED_RELIST
        let cache = agent.pod_cache();
        let relist_period = move || if cache.events_open() { period.max(relist) } else { relist };
        Self::run("housekeeping", relist_period, move |cause, waker| {
            // the events asking for this run (a housekeeping pass relists
            // too): those its list does not show yet ask for another soon
            let events = waker.take_events();
            if cause == Cause::Woken || Instant::now() >= next_pass {
                agent.housekeeping();
                next_pass = crate::base::cancel::deadline_in(period);
            } else {
                agent.relist();
            }
            if !events.is_empty() {
                let list = agent.last_list().unwrap_or_default();
                waker.settle_later(events.into_iter().filter(|(e, _)| !e.seen_in(&list)).collect());
            }
            if Instant::now() >= next_trim {
                trim_heap();
                next_trim = crate::base::cancel::deadline_in(TRIM_PERIOD);
            }
        })
    }

    /// A thread named `name` running `f` at once, then every `period` or
    /// when woken.
    pub fn every(name: &str, period: Duration, mut f: impl FnMut() + Send + 'static) -> std::io::Result<Self> {
        Self::run(name, move || period, move |_, _| f())
    }

    /// Run `f` at once, then every `period` or when woken; `f` is told
    /// why. A relist request does not move the next periodic run.
    fn run(
        name: &str,
        period: impl Fn() -> Duration + Send + 'static,
        mut f: impl FnMut(Cause, &Waker) + Send + 'static,
    ) -> std::io::Result<Self> {
        let waker = Waker::default();
        let w = waker.clone();
        let join = crate::base::thread::spawn(name, None, move || {
            let mut next = Instant::now();
            let mut cause;
            loop {
                {
                    let (m, cv) = &*w.0;
                    let mut f = m.lock();
                    loop {
                        let now = Instant::now();
                        let retry = f.retry_at.is_some_and(|t| now >= t);
                        if f.stop || f.wake || f.relist || retry || now >= next {
                            break;
                        }
                        let until = f.retry_at.map_or(next, |t| t.min(next));
                        cv.wait_until(&mut f, until);
                    }
                    if f.stop {
                        return;
                    }
                    f.relist = false;
                    f.retry_at = None;
                    cause = if std::mem::take(&mut f.wake) {
                        Cause::Woken
                    } else if Instant::now() >= next {
                        Cause::Period
                    } else {
                        Cause::Relist
                    };
                }
                f(cause, &w);
                if cause != Cause::Relist {
                    next = crate::base::cancel::deadline_in(period());
                }
            }
        })?;
        Ok(Housekeeping { waker, join: Some(join) })
    }

    pub fn waker(&self) -> Waker {
        self.waker.clone()
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        self.waker.stop();
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

//! The housekeeping thread: [`Agent::relist`] every second and, every 2 s or
//! at once when woken through its condvar, [`Agent::housekeeping`] instead
//! (a housekeeping pass relists too, from the same runtime list).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::agent::manager::Agent;

#[derive(Default)]
struct Flags {
    wake: bool,
    stop: bool,
}

/// Wakes housekeeping from any thread.
#[derive(Clone, Default)]
pub struct Waker(Arc<(Mutex<Flags>, Condvar)>);

impl Waker {
    pub fn wake(&self) {
        self.0.0.lock().wake = true;
        self.0.1.notify_all();
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
    pub fn with_relist(agent: Arc<Agent>, period: Duration, relist: Duration) -> std::io::Result<Self> {
        let mut next_pass = Instant::now();
        let mut next_trim = crate::base::cancel::deadline_in(TRIM_PERIOD);
        Self::run("housekeeping", relist, move |woken| {
            if woken || Instant::now() >= next_pass {
                agent.housekeeping();
                next_pass = crate::base::cancel::deadline_in(period);
            } else {
                agent.relist();
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
        Self::run(name, period, move |_| f())
    }

    /// Run `f` at once, then every `period` or when woken; `f` is told
    /// whether it was woken.
    fn run(name: &str, period: Duration, mut f: impl FnMut(bool) + Send + 'static) -> std::io::Result<Self> {
        let waker = Waker::default();
        let w = waker.clone();
        let join = crate::base::thread::spawn(name, None, move || {
            let mut next = Instant::now();
            let mut woken;
            loop {
                {
                    let (m, cv) = &*w.0;
                    let mut f = m.lock();
                    while !f.stop && !f.wake && Instant::now() < next {
                        cv.wait_until(&mut f, next);
                    }
                    if f.stop {
                        return;
                    }
                    woken = std::mem::take(&mut f.wake);
                }
                f(woken);
                next = crate::base::cancel::deadline_in(period);
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

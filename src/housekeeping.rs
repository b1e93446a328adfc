//! Periodic threads: housekeeping runs [`Agent::housekeeping`] every 2 s (or
//! at once when woken through its condvar); relist runs [`Agent::relist`]
//! every second.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::agent::Agent;

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

/// Owns a periodic thread; dropping it stops and joins the thread.
pub struct Periodic {
    waker: Waker,
    join: Option<JoinHandle<()>>,
}

/// The housekeeping thread.
pub type Housekeeping = Periodic;

impl Periodic {
    /// The housekeeping thread of `agent`.
    pub fn start(agent: Arc<Agent>, period: Duration) -> std::io::Result<Self> {
        Self::run("housekeeping", period, move || agent.housekeeping())
    }

    /// The relist thread of `agent`.
    pub fn relist(agent: Arc<Agent>, period: Duration) -> std::io::Result<Self> {
        Self::run("relist", period, move || agent.relist())
    }

    /// Run `f` at once, then every `period` or when woken.
    pub fn run(name: &str, period: Duration, f: impl Fn() + Send + 'static) -> std::io::Result<Self> {
        let waker = Waker::default();
        let w = waker.clone();
        let join = crate::thread::spawn(name, None, move || {
            let mut next = Instant::now();
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
                    f.wake = false;
                }
                f();
                next = Instant::now() + period;
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

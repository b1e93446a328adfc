//! The housekeeping thread: runs [`Agent::housekeeping`] every period, or at
//! once when woken through its condvar.

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

/// Owns the housekeeping thread; dropping it stops and joins the thread.
pub struct Housekeeping {
    waker: Waker,
    join: Option<JoinHandle<()>>,
}

impl Housekeeping {
    pub fn start(agent: Arc<Agent>, period: Duration) -> std::io::Result<Self> {
        let waker = Waker::default();
        let w = waker.clone();
        let join = crate::thread::spawn("housekeeping", None, move || {
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
                agent.housekeeping();
                next = Instant::now() + period;
            }
        })?;
        Ok(Housekeeping { waker, join: Some(join) })
    }

    pub fn waker(&self) -> Waker {
        self.waker.clone()
    }
}

impl Drop for Housekeeping {
    fn drop(&mut self) {
        self.waker.stop();
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

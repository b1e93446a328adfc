//! Container restart back-off: the first restart is immediate, then 10 s
//! doubling to 300 s; reset after the container stayed up for twice the
//! maximum.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

#[derive(Debug, Clone, Copy)]
struct Entry {
    delay: Duration,
    last: Instant,
}

pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: Mutex<HashMap<(String, String), Entry>>,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff { initial, max, entries: Mutex::new(HashMap::new()) }
    }

    /// May the container restart now? `Err(remaining, current delay)` while
    /// in back-off; `Ok(())` records the restart.
    pub fn try_restart(&self, uid: &str, container: &str, now: Instant) -> Result<(), (Duration, Duration)> {
        let mut m = self.entries.lock();
        let key = (uid.to_string(), container.to_string());
        match m.get_mut(&key) {
            None => {
                m.insert(key, Entry { delay: self.initial, last: now });
                Ok(())
            }
            Some(e) if now.duration_since(e.last) > self.max.saturating_mul(2) => {
                e.delay = self.initial;
                e.last = now;
                Ok(())
            }
            Some(e) if now < crate::base::cancel::add_saturating(e.last, e.delay) => {
                Err((crate::base::cancel::add_saturating(e.last, e.delay) - now, e.delay))
            }
            Some(e) => {
                e.delay = e.delay.saturating_mul(2).min(self.max);
                e.last = now;
                Ok(())
            }
        }
    }

    /// Start over for one key (it succeeded).
    pub fn forget(&self, uid: &str, key: &str) {
        self.entries.lock().remove(&(uid.to_string(), key.to_string()));
    }

    pub fn forget_pod(&self, uid: &str) {
        self.entries.lock().retain(|(u, _), _| u != uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_and_resets() {
        let b = Backoff::new(Duration::from_secs(10), Duration::from_secs(300));
        let t0 = Instant::now();
        assert!(b.try_restart("u", "c", t0).is_ok());
        assert_eq!(
            b.try_restart("u", "c", t0 + Duration::from_secs(1)),
            Err((Duration::from_secs(9), Duration::from_secs(10)))
        );
        let mut t = t0 + Duration::from_secs(10);
        let mut delays = vec![];
        for _ in 0..7 {
            assert!(b.try_restart("u", "c", t).is_ok());
            let (_, d) = b.try_restart("u", "c", t).unwrap_err();
            delays.push(d.as_secs());
            t += d;
        }
        assert_eq!(delays, vec![20, 40, 80, 160, 300, 300, 300]);
        // stayed up a long time: back to the initial delay
        assert!(b.try_restart("u", "c", t + Duration::from_secs(601)).is_ok());
        let (_, d) = b.try_restart("u", "c", t + Duration::from_secs(602)).unwrap_err();
        assert_eq!(d.as_secs(), 10);
        b.forget_pod("u");
        assert!(b.try_restart("u", "c", t).is_ok());
    }
}

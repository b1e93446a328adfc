//! One process-wide change counter: bumped (cheaply, never waiting on a
//! reader) whenever something an API may be watching changes (a pod's
//! status, an event, the local objects), waited on by whoever serves
//! watches. The writers only count; what changed is found by the reader.

use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

static SEQ: Mutex<u64> = Mutex::new(0);
static CHANGED: Condvar = Condvar::new();

/// Something changed: wake the waiters.
pub fn bump() {
    *SEQ.lock() += 1;
    CHANGED.notify_all();
}

/// The counter now.
pub fn current() -> u64 {
    *SEQ.lock()
}

/// Wait until the counter passes `seen` or `timeout` passes; the counter
/// then.
pub fn wait_past(seen: u64, timeout: Duration) -> u64 {
    let end = Instant::now() + timeout;
    let mut n = SEQ.lock();
    while *n <= seen {
        if CHANGED.wait_until(&mut n, end).timed_out() {
            break;
        }
    }
    *n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bump_wakes_a_waiter_and_a_quiet_wait_times_out() {
        let seen = current();
        let t =
            crate::base::thread::spawn("test-wait", None, move || wait_past(seen, Duration::from_secs(10))).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        bump();
        assert!(t.join().unwrap() > seen);
        let now = current();
        let start = Instant::now();
        assert_eq!(wait_past(now + 1_000_000, Duration::from_millis(30)), current());
        assert!(start.elapsed() >= Duration::from_millis(30));
    }
}

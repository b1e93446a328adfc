//! The one place threads are spawned: every thread gets a name, and callers
//! say how much stack they want on purpose.
//!
//! A panic that escapes a thread's function is never silent: it is logged
//! (naming the thread), recorded so `/healthz` and the node's Ready condition
//! fail from then on ([`panicked`]), and, in `podwarden run`
//! ([`exit_on_panic`]), the process exits with [`PANIC_EXIT_CODE`] so that
//! systemd (`Restart=always`) starts a fresh agent, which adopts the running
//! pods. A dead housekeeping, manifest, logind, API or HTTP thread behind a
//! healthy health check would leave the node silently unmanaged; a restart
//! costs a second or two and nothing that runs. Pod workers catch a panic of
//! one sync pass themselves (their bookkeeping outside the pass is covered
//! here like any thread).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{Builder, JoinHandle};

use parking_lot::Mutex;

/// Stack size for pod worker threads. A worker's deepest path is a sync pass
/// (runtime calls, status generation); 256 KiB of address space leaves ample
/// room while only the touched pages count towards RSS.
pub const WORKER_STACK: usize = 256 * 1024;

/// Stack size for short helper threads (parallel container stops).
pub const HELPER_STACK: usize = 128 * 1024;

/// Exit status of `podwarden run` after a thread panicked (EX_SOFTWARE).
pub const PANIC_EXIT_CODE: i32 = 70;

/// The first thread that panicked: (thread name, panic message).
static PANICKED: Mutex<Option<(String, String)>> = Mutex::new(None);
static EXIT_ON_PANIC: AtomicBool = AtomicBool::new(false);

/// Make a panic escaping any thread end the process with
/// [`PANIC_EXIT_CODE`] (after logging it). `podwarden run` sets this; tests
/// that run the agent in-process do not, and see [`panicked`] instead.
pub fn exit_on_panic(on: bool) {
    EXIT_ON_PANIC.store(on, Ordering::SeqCst);
}

/// The first thread that panicked and its message, if any did.
pub fn panicked() -> Option<(String, String)> {
    PANICKED.lock().clone()
}

/// The message of a panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}

/// Record (and, when asked to, act on) a panic that ended thread `name`.
fn on_panic(name: &str, message: &str) {
    {
        let mut first = PANICKED.lock();
        if first.is_none() {
            *first = Some((name.to_string(), message.to_string()));
        }
    }
    if EXIT_ON_PANIC.load(Ordering::SeqCst) {
        log::error!(
            "thread {name} panicked: {message}; exiting with status {PANIC_EXIT_CODE} so that a fresh agent is \
             started (pods keep running and are adopted)"
        );
        crate::base::notify::notify("STOPPING=1");
        // No unwinding of other threads and no exit handlers (grpc's C++
        // statics while its threads run): end now, with a clear status.
        crate::sys::exit_now(PANIC_EXIT_CODE);
    }
    log::error!("thread {name} panicked: {message}; the agent reports itself unhealthy from now on");
}

/// Spawn a named thread. Names longer than 15 bytes are truncated by the
/// kernel in `/proc`, so keep the distinguishing part first. A panic that
/// escapes `f` is handled as the module docs say (and then propagates to
/// `join` as usual).
pub fn spawn<F, T>(name: impl Into<String>, stack: Option<usize>, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let name = name.into();
    let mut b = Builder::new().name(name.clone());
    if let Some(s) = stack {
        b = b.stack_size(s);
    }
    #[allow(clippy::disallowed_methods)]
    b.spawn(move || {
        // started from a gRPC thread (an API call's handler), it would
        // otherwise keep gRPC's timer slack in its own timeouts
        crate::sys::own_timer_slack();
        run_catching(&name, f)
    })
}

/// Run `f`; a panic is recorded (see [`panicked`]) and goes on unwinding.
fn run_catching<T>(name: &str, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            // a reused worker thread renames itself: report its current name
            let current = std::fs::read_to_string("/proc/thread-self/comm")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| name.to_string());
            on_panic(&current, &panic_message(payload.as_ref()));
            std::panic::resume_unwind(payload)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_thread_started_from_a_thread_with_timer_slack_takes_the_own_slack_again() {
        let own = crate::sys::timer_slack();
        let (inside, started) = crate::sys::with_timer_slack(40_000_000, || {
            let inside = crate::sys::timer_slack();
            (inside, super::spawn("test-slack", None, crate::sys::timer_slack).unwrap().join().unwrap())
        });
        assert_eq!(inside, 40_000_000, "the slack was not set");
        assert_eq!(started, own, "the new thread kept the slack of the thread that started it");
        assert_eq!(crate::sys::timer_slack(), own, "the caller's slack was not put back");
    }

    #[test]
    fn a_panic_is_recorded_and_reaches_join() {
        let h = super::spawn("test-panics", None, || {
            if std::hint::black_box(true) {
                panic!("on purpose");
            }
        })
        .unwrap();
        assert!(h.join().is_err());
        let (name, msg) = super::panicked().expect("recorded");
        assert_eq!((name.as_str(), msg.as_str()), ("test-panics", "on purpose"));
    }
}

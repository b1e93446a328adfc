//! Process plumbing every other layer stands on, none of it about pods:
//! cancellation and deadlines (`cancel`), named threads and the panic rule
//! (`thread`), bounded and atomic file access (`fsutil`), logging for the
//! journal (`logging`), systemd notification (`notify`) and its watchdog
//! (`watchdog`), the restart back-off (`backoff`), the change counter API
//! watches wait on (`changes`), test-only hang points (`faults`) and the
//! locks that keep one agent per rootDir and runtime (`instance`).
//!
//! Owns nothing shared but the panic record. May use `sys` only.

pub mod backoff;
pub mod cancel;
pub mod changes;
pub mod faults;
pub mod fsutil;
pub mod instance;
pub mod logging;
pub mod notify;
pub mod thread;
pub mod watchdog;

/// `b` as lower-case hex, two digits a byte.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The wall clock in nanoseconds since the Unix epoch (0 before it), the
/// unit of the CRI's timestamps.
pub fn unix_now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

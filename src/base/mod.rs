//! Process plumbing every other layer stands on, none of it about pods:
//! cancellation and deadlines (`cancel`), named threads and the panic rule
//! (`thread`), bounded and atomic file access (`fsutil`), logging for the
//! journal (`logging`), systemd notification (`notify`) and its watchdog
//! (`watchdog`), the restart back-off (`backoff`), the change counter API
//! watches wait on (`changes`) and test-only hang points (`faults`).
//!
//! Owns nothing shared but the panic record. May use `sys` only.

pub mod backoff;
pub mod cancel;
pub mod changes;
pub mod faults;
pub mod fsutil;
pub mod logging;
pub mod notify;
pub mod thread;
pub mod watchdog;

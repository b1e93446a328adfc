//! The one place threads are spawned: every thread gets a name, and callers
//! say how much stack they want on purpose.

use std::io;
use std::thread::{Builder, JoinHandle};

/// Stack size for pod worker threads. A worker's deepest path is a sync pass
/// (runtime calls, status generation); 256 KiB of address space leaves ample
/// room while only the touched pages count towards RSS.
pub const WORKER_STACK: usize = 256 * 1024;

/// Stack size for short helper threads (parallel container stops).
pub const HELPER_STACK: usize = 128 * 1024;

/// Spawn a named thread. Names longer than 15 bytes are truncated by the
/// kernel in `/proc`, so keep the distinguishing part first.
pub fn spawn<F, T>(name: impl Into<String>, stack: Option<usize>, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let mut b = Builder::new().name(name.into());
    if let Some(s) = stack {
        b = b.stack_size(s);
    }
    #[allow(clippy::disallowed_methods)]
    b.spawn(f)
}

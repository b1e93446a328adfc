//! Test-only faults in a real agent, for tests of what the machine does
//! about them (systemd's watchdog): [`hang_point`] makes the calling thread
//! hang for good when a file says so.
//!
//! Off unless the agent's environment has `PODWARDEN_TEST_FAULTS` set to an
//! absolute directory (a test sets it with a unit drop-in); only root can
//! set a service's environment, and without it a hang point reads no file
//! and costs one atomic load. The variable is read once.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// The environment variable that switches the faults on: a directory.
pub const ENV: &str = "PODWARDEN_TEST_FAULTS";

/// The directory whose `test-hang-<point>` files hang, if faults are on.
fn dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let v = std::env::var_os(ENV)?;
        let p = PathBuf::from(v);
        if p.is_absolute() {
            log::warn!("{ENV}={}: test faults are on (hang points)", p.display());
            Some(p)
        } else {
            log::warn!("{ENV}={} ignored: not an absolute directory", p.display());
            None
        }
    })
    .as_deref()
}

/// The file that makes hang point `point` hang, under `dir`.
pub fn hang_file(dir: &Path, point: &str) -> PathBuf {
    dir.join(format!("test-hang-{point}"))
}

/// If faults are on and `<dir>/test-hang-<point>` exists: remove it (so a
/// restarted agent does not hang again) and never return, as a thread in a
/// deadlock would not. Otherwise return at once.
pub fn hang_point(point: &str) {
    let Some(dir) = dir() else { return };
    let file = hang_file(dir, point);
    if std::fs::remove_file(&file).is_err() {
        return;
    }
    log::warn!("test fault: {point} hangs from now on ({} was there)", file.display());
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

//! systemd's service watchdog (`WatchdogSec=`): the `watchdog` thread sends
//! `WATCHDOG=1` while a liveness test passes, so that systemd kills and
//! restarts an agent whose threads hang.

use std::ffi::OsString;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::base::cancel::CancelToken;
use crate::base::notify::send;

/// Why systemd's watchdog settings in the environment are not used.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum WatchdogEnvError {
    #[error("WATCHDOG_USEC={0:?} is not a positive number of microseconds")]
    Usec(String),
    #[error("WATCHDOG_PID={0:?} is not a process ID")]
    Pid(String),
}

/// The watchdog interval systemd asks this process for, read as
/// `sd_watchdog_enabled(3)` reads it: `WATCHDOG_USEC` (microseconds, more
/// than 0) and, when `WATCHDOG_PID` is set, only if it names this process
/// (a child that inherited the variables must not ping for its parent).
/// `Ok(None)`: no watchdog.
pub fn watchdog_interval() -> Result<Option<Duration>, WatchdogEnvError> {
    let var = |n| std::env::var_os(n).map(|v| v.to_string_lossy().into_owned());
    watchdog_from(var("WATCHDOG_USEC").as_deref(), var("WATCHDOG_PID").as_deref(), std::process::id())
}

/// [`watchdog_interval`] from the two variables' values and our PID.
fn watchdog_from(usec: Option<&str>, pid: Option<&str>, ours: u32) -> Result<Option<Duration>, WatchdogEnvError> {
    let Some(usec) = usec else { return Ok(None) };
    let micros = match usec.parse::<u64>() {
        Ok(n) if n > 0 => n,
        _ => return Err(WatchdogEnvError::Usec(usec.to_string())),
    };
    if let Some(pid) = pid {
        match pid.parse::<u32>() {
            Ok(p) if p > 0 => {
                if p != ours {
                    return Ok(None);
                }
            }
            _ => return Err(WatchdogEnvError::Pid(pid.to_string())),
        }
    }
    Ok(Some(Duration::from_micros(micros)))
}

/// How often an unhealthy agent looks again: a recovery pings within a
/// second.
const RECHECK: Duration = Duration::from_secs(1);

/// When the next look at the liveness test is due after one that passed
/// (`live`) or failed: half the interval after a ping, as systemd advises,
/// at most [`RECHECK`] after a failure.
fn next_check(interval: Duration, live: bool) -> Duration {
    let half = (interval / 2).max(Duration::from_millis(10));
    if live { half } else { half.min(RECHECK) }
}

/// The `watchdog` thread: sends `WATCHDOG=1` every half interval while
/// `live` passes, and nothing while it fails, so that systemd kills (with
/// `WatchdogSignal=`, SIGABRT) and restarts (`Restart=`) an agent that
/// stayed unhealthy for a whole `WatchdogSec`. It waits on nothing but its
/// timer and `live`, which must not wait for a pod, a client or the
/// runtime. Dropping it stops and joins the thread.
pub struct Watchdog {
    stop: CancelToken,
    join: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Start pinging `$NOTIFY_SOCKET` if systemd asked for a watchdog
    /// (`WatchdogSec=`); `None` if it did not (or its variables are wrong,
    /// which is logged).
    pub fn from_env<E, F>(live: F) -> std::io::Result<Option<Watchdog>>
    where
        E: std::fmt::Display,
        F: Fn() -> Result<(), E> + Send + 'static,
    {
        let interval = match watchdog_interval() {
            Ok(Some(i)) => i,
            Ok(None) => return Ok(None),
            Err(e) => {
                log::warn!("systemd's watchdog ignored: {e}");
                return Ok(None);
            }
        };
        log::info!("systemd watchdog: {}s; pinging while the agent's threads are live", interval.as_secs_f64());
        Self::start(std::env::var_os("NOTIFY_SOCKET"), interval, live).map(Some)
    }

    /// Ping `socket` (a `$NOTIFY_SOCKET` value) as [`Watchdog`] says.
    pub fn start<E, F>(socket: Option<OsString>, interval: Duration, live: F) -> std::io::Result<Watchdog>
    where
        E: std::fmt::Display,
        F: Fn() -> Result<(), E> + Send + 'static,
    {
        let stop = CancelToken::new();
        let token = stop.clone();
        let join = crate::base::thread::spawn("watchdog", None, move || {
            // since when the test fails (logged once per failure)
            let mut failing: Option<Instant> = None;
            loop {
                let ok = match live() {
                    Ok(()) => {
                        if let Some(since) = failing.take() {
                            log::info!(
                                "watchdog: live again after {:.1}s; pinging systemd again",
                                since.elapsed().as_secs_f64()
                            );
                        }
                        // a bounded wait: a stuck systemd must not stop the
                        // thread's next look
                        send(socket.as_deref(), "WATCHDOG=1", Some(RECHECK));
                        true
                    }
                    Err(e) => {
                        if failing.is_none() {
                            log::error!(
                                "watchdog: not pinging systemd: {e}; systemd restarts the agent if this lasts {}s \
                                 (WatchdogSec)",
                                interval.as_secs_f64()
                            );
                            failing = Some(Instant::now());
                        }
                        false
                    }
                };
                if token.sleep(next_check(interval, ok)) {
                    return;
                }
            }
        })?;
        Ok(Watchdog { stop, join: Some(join) })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn watchdog_usec_and_pid_read_as_sd_watchdog_enabled_reads_them() {
        use super::{WatchdogEnvError, watchdog_from};
        use std::time::Duration;
        assert_eq!(watchdog_from(None, None, 7), Ok(None), "no WatchdogSec=");
        assert_eq!(watchdog_from(None, Some("7"), 7), Ok(None));
        assert_eq!(watchdog_from(Some("30000000"), None, 7), Ok(Some(Duration::from_secs(30))));
        assert_eq!(watchdog_from(Some("30000000"), Some("7"), 7), Ok(Some(Duration::from_secs(30))));
        assert_eq!(watchdog_from(Some("1500"), Some("7"), 7), Ok(Some(Duration::from_micros(1500))));
        // inherited from a parent: not ours to ping
        assert_eq!(watchdog_from(Some("30000000"), Some("8"), 7), Ok(None));
        for bad in ["", "0", "-1", "30s", " 30", "18446744073709551616"] {
            assert_eq!(watchdog_from(Some(bad), None, 7), Err(WatchdogEnvError::Usec(bad.into())), "{bad:?}");
        }
        for bad in ["", "0", "x", "-7"] {
            assert_eq!(watchdog_from(Some("1000000"), Some(bad), 7), Err(WatchdogEnvError::Pid(bad.into())), "{bad:?}");
        }
    }

    #[test]
    fn half_the_interval_between_pings_a_second_between_looks_while_failing() {
        use super::next_check;
        use std::time::Duration;
        assert_eq!(next_check(Duration::from_secs(30), true), Duration::from_secs(15));
        assert_eq!(next_check(Duration::from_secs(30), false), Duration::from_secs(1));
        assert_eq!(next_check(Duration::from_millis(400), false), Duration::from_millis(200));
        assert_eq!(next_check(Duration::from_micros(1), true), Duration::from_millis(10), "a floor");
    }

    #[test]
    fn pings_only_while_live() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::time::{Duration, Instant};
        let dir = std::env::temp_dir().join(format!("pw-watchdog-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let rx = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let live = Arc::new(AtomicBool::new(false));
        let looks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (l, n) = (live.clone(), looks.clone());
        let interval = Duration::from_millis(200); // a look every 100 ms
        let dog = super::Watchdog::start(Some(path.clone().into_os_string()), interval, move || {
            n.fetch_add(1, Ordering::SeqCst);
            if l.load(Ordering::SeqCst) { Ok(()) } else { Err("housekeeping has not run for 10s") }
        })
        .unwrap();
        // unhealthy: looked at several times, never a ping
        let t = Instant::now();
        let mut buf = [0u8; 64];
        while t.elapsed() < Duration::from_millis(700) {
            assert!(rx.recv(&mut buf).is_err(), "a ping while unhealthy");
        }
        assert!(looks.load(Ordering::SeqCst) >= 3, "looked {} times", looks.load(Ordering::SeqCst));
        // live: pings at half the interval
        live.store(true, Ordering::SeqCst);
        let t = Instant::now();
        let mut pings = 0;
        while t.elapsed() < Duration::from_millis(700) {
            if let Ok(n) = rx.recv(&mut buf) {
                assert_eq!(&buf[..n], b"WATCHDOG=1");
                pings += 1;
            }
        }
        assert!((3..=9).contains(&pings), "{pings} pings in 700 ms at 100 ms");
        // unhealthy again: the pings stop
        live.store(false, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(150));
        while rx.recv(&mut buf).is_ok() {}
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(500) {
            assert!(rx.recv(&mut buf).is_err(), "a ping after the test failed");
        }
        drop(dog); // stops and joins at once
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! Logging through `log` + `env_logger`. Under systemd (`JOURNAL_STREAM`
//! set) each line starts with its syslog priority (`<3>`..`<7>`) and carries
//! no timestamp, so journald keeps the levels (`journalctl -p warning`).

use std::io::Write;

/// The syslog priority journald reads from a `<N>` line prefix.
pub fn syslog_priority(level: log::Level) -> u8 {
    match level {
        log::Level::Error => 3,
        log::Level::Warn => 4,
        log::Level::Info => 6,
        log::Level::Debug | log::Level::Trace => 7,
    }
}

/// Set up logging; `RUST_LOG` wins over `default_level`.
pub fn init(default_level: &str) {
    let env = env_logger::Env::default().default_filter_or(default_level);
    let mut b = env_logger::Builder::from_env(env);
    // milliseconds: the order of a pod's steps is read from them
    b.format_timestamp_millis();
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        b.format(|buf, rec| writeln!(buf, "<{}>{}: {}", syslog_priority(rec.level()), rec.target(), rec.args()));
    }
    let _ = b.try_init();
}

/// Bounds how often one kind of warning is written: the first at once,
/// then at most one per `period`, which says how many were held back
/// meanwhile. For warnings an outside party can trigger at will (forged
/// D-Bus signals, refused API peers), so they cannot flood the journal.
#[derive(Debug)]
pub struct RateLimit {
    period: std::time::Duration,
    state: parking_lot::Mutex<(Option<std::time::Instant>, u64)>,
}

impl RateLimit {
    pub const fn new(period: std::time::Duration) -> Self {
        RateLimit { period, state: parking_lot::Mutex::new((None, 0)) }
    }

    /// `Some(held back since the last line)` if a line may be written
    /// now; `None` (and counted) if not.
    pub fn allow(&self) -> Option<u64> {
        let mut st = self.state.lock();
        let now = std::time::Instant::now();
        match st.0 {
            Some(last) if now.duration_since(last) < self.period => {
                st.1 += 1;
                None
            }
            _ => {
                let held = std::mem::take(&mut st.1);
                st.0 = Some(now);
                Some(held)
            }
        }
    }
}

/// ` (N more like this in the last ...)` for a line [`RateLimit::allow`]
/// let through, or nothing.
pub fn held_back(n: u64, period: std::time::Duration) -> String {
    if n == 0 { String::new() } else { format!(" ({n} more like this in the last {}s not logged)", period.as_secs()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rate_limit_lets_the_first_through_then_one_per_period_with_a_count() {
        let r = RateLimit::new(Duration::from_millis(200));
        assert_eq!(r.allow(), Some(0));
        for _ in 0..1000 {
            assert_eq!(r.allow(), None);
        }
        std::thread::sleep(Duration::from_millis(210));
        assert_eq!(r.allow(), Some(1000));
        assert_eq!(r.allow(), None);
        assert_eq!(held_back(0, Duration::from_secs(60)), "");
        assert_eq!(held_back(7, Duration::from_secs(60)), " (7 more like this in the last 60s not logged)");
    }
}

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
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        b.format(|buf, rec| writeln!(buf, "<{}>{}: {}", syslog_priority(rec.level()), rec.target(), rec.args()));
    }
    let _ = b.try_init();
}

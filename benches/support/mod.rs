//! What the benchmarks against the private containerd share: its socket,
//! a call context, wall-clock nanoseconds, /proc fields, and the JSON last
//! line.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use podwarden::runtime::CallCtx;

pub mod http;

/// The image `scripts/e2e-env.sh` builds from busybox-static.
pub const IMAGE: &str = "localhost/busybox:e2e";

pub fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64
}

pub fn call() -> CallCtx {
    CallCtx::background(Duration::from_secs(60))
}

/// The private containerd's socket; fails with how to start it.
pub fn socket() -> String {
    let s = std::env::var("PODWARDEN_E2E_SOCKET").unwrap_or_else(|_| "/run/podwarden-e2e/containerd.sock".into());
    assert!(Path::new(&s).exists(), "{s} is missing: run `scripts/e2e-env.sh up` first (scripts/bench.sh does)");
    s
}

/// A numeric field of `/proc/<pid>/status` (`VmRSS:`, `Threads:`), 0 if absent.
pub fn proc_status(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

/// The benchmark's last line: one JSON object (whole numbers without
/// decimals, others with `decimals`).
pub fn print_json(out: &BTreeMap<&str, f64>, decimals: usize) {
    let fields: Vec<String> = out
        .iter()
        .map(|(k, v)| if v.fract() == 0.0 { format!("\"{k}\":{v:.0}") } else { format!("\"{k}\":{v:.decimals$}") })
        .collect();
    println!("{{{}}}", fields.join(","));
}

//! The process's gRPC environments and the timer slack of the threads
//! gRPC starts.

use std::sync::Arc;
use std::time::Duration;

use grpcio::Environment;

/// The process's gRPC environment for the runtime (one completion-queue
/// thread, `grpc`), shared by the CRI client, the gRPC probes and the
/// CLI's client; the local API has its own (`api::local`).
pub fn grpc_env() -> Arc<Environment> {
    static ENV: std::sync::OnceLock<Arc<Environment>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| Arc::new(new_grpc_env("grpc"))).clone()
}

/// The timer slack of the threads gRPC starts: its two timer threads wake
/// about once a second each to look at their timer shards, and without
/// slack the shards' windows (999 and 1,000 ms, from gRPC's rounding)
/// drift apart, so each thread wakes twice a second instead. Every delay
/// gRPC times here is 100 ms or longer, less 20 % jitter (call deadlines,
/// retry and reconnect back-offs, keepalive).
pub const GRPC_TIMER_SLACK: Duration = Duration::from_millis(50);

/// A gRPC environment with one completion-queue thread named after
/// `prefix`. The first one initialises gRPC, which starts gRPC's own
/// threads from this thread: they are started with [`GRPC_TIMER_SLACK`]
/// (a thread inherits its creator's slack), and this thread's slack is put
/// back afterwards. Without slack (a kernel that refuses it) everything
/// works, with more wake-ups.
pub fn new_grpc_env(prefix: &str) -> Environment {
    with_grpc_slack(|| grpcio::EnvBuilder::new().cq_count(1).name_prefix(prefix).build())
}

/// Run `f` (a step that may make gRPC start threads: its initialisation,
/// and the first channel or server, which starts its event engine with
/// that engine's timer thread) with [`GRPC_TIMER_SLACK`] on this thread,
/// so the threads it starts inherit it; this thread's own slack is put
/// back afterwards. A kernel that refuses the slack only costs wake-ups.
/// Threads podwarden starts from gRPC's threads (an API call's worker)
/// take the process's own slack again ([`crate::sys::own_timer_slack`]).
pub fn with_grpc_slack<T>(f: impl FnOnce() -> T) -> T {
    crate::sys::with_timer_slack(GRPC_TIMER_SLACK.as_nanos() as u64, f)
}

//! The soak (`scripts/bench.sh soak`, issue 42): 10,000 pod lifecycles
//! (`PODWARDEN_SOAK_LIFECYCLES`) on the private containerd with the
//! private logind, pods with an init container, an emptyDir, a Secret
//! volume and an exec readiness probe, created and removed through
//! manifests, edits and kubectl, 12 at once (`PODWARDEN_SOAK_CONCURRENCY`),
//! while containerd is killed and started again about every 500
//! lifecycles, the agent (SIGKILL) every 700, logind every 1,000, and a
//! manifest is written half and then completed every 1,000. After each
//! fault and at the end: what is left over that no pod owns, by kind, and
//! pods running twice; the agent's RSS, anonymous RSS and open fds every
//! 250 lifecycles, each with every soak pod ended and the agent idle (see
//! the driver). `rss_slope_kib_per_1k` is the slope within each agent
//! process from its own 1,000th lifecycle on: an agent started again by a
//! fault fills its bounded stores (the event ring, the watch hub's objects
//! and history) anew, as the first one did.
//! The driver is `tests/soak_driver/`, shared with `tests/soak.rs`. The
//! last line is one JSON object; the exit status is 1 when anything leaked.
//! `PODWARDEN_SOAK_SAMPLE_EVERY` samples more or less often;
//! `PODWARDEN_SOAK_FAULTS=0` runs without faults;
//! `PODWARDEN_SOAK_AGENT_KILLS=0` without the agent's kills only: one
//! agent process for the whole run, through containerd's and logind's
//! restarts, so that its slope past its own first 1,000 lifecycles rests
//! on many samples (with an agent killed about every 700 lifecycles
//! hardly one lives that long).

#[path = "../tests/soak_driver/mod.rs"]
mod soak_driver;

use std::path::{Path, PathBuf};

use soak_driver::*;

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

fn main() {
    let bin = std::env::var("PODWARDEN_BIN").unwrap_or_else(|_| "/usr/bin/podwarden".into());
    assert!(Path::new(&bin).exists(), "{bin} is missing: build the release binary first (scripts/bench.sh soak does)");
    let lifecycles = env_u64("PODWARDEN_SOAK_LIFECYCLES", 10_000);
    // one fault per this many lifecycles, at least one of each kind
    let every = |n: u64| ((lifecycles + n / 2) / n).max(1);
    // PODWARDEN_SOAK_FAULTS=0: no faults at all (an agent's RSS over its
    // whole life, for comparison)
    let mut faults = if env_u64("PODWARDEN_SOAK_FAULTS", 1) == 0 {
        [0; 4]
    } else {
        [every(500), every(700), every(1000), every(1000)]
    };
    // PODWARDEN_SOAK_AGENT_KILLS=0: the other faults, one agent process
    // (its RSS slope past its first 1,000 lifecycles, through containerd's
    // and logind's restarts)
    if env_u64("PODWARDEN_SOAK_AGENT_KILLS", 1) == 0 {
        faults[1] = 0;
    }
    let opts = Opts {
        bin: PathBuf::from(bin),
        repo: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        lifecycles,
        concurrency: env_u64("PODWARDEN_SOAK_CONCURRENCY", 12) as usize,
        seed: seed_from_env(),
        faults,
        sample_every: env_u64("PODWARDEN_SOAK_SAMPLE_EVERY", 250),
    };
    let r = run(&opts);
    if !r.clean() {
        println!("{}", r.failure_text());
    }
    // the RSS slope after the first 1,000 lifecycles (over all of a shorter run)
    println!("{}", r.json(if lifecycles >= 2000 { 1000 } else { 0 }));
    if !r.clean() {
        std::process::exit(1);
    }
}

//! The short soak (issue 42): 500 pod lifecycles on the private containerd
//! (`scripts/e2e-env.sh up`) with the private logind
//! (`scripts/logind-env.sh up`), two faults of each kind (containerd, the
//! agent and logind killed and started again, a manifest written half then
//! completed), nothing left over after each fault and at the end, no pod
//! running twice, the agent's RSS bounded. `scripts/bench.sh soak` runs the
//! same driver (`tests/soak_driver/`) for 10,000 lifecycles.
//!
//! `PODWARDEN_SOAK_SEED` repeats a run's choices (the seed is printed
//! first); `PODWARDEN_SOAK_LIFECYCLES` changes the count.
//! `PODWARDEN_E2E_RUN` (with `PODWARDEN_E2E_SOCKET`) and
//! `PODWARDEN_LOGIND_DIR` put it on a second environment the scripts
//! started beside the default one, but not while another agent runs pods
//! there: both make their pod cgroups under `kubepods`, and each kills the
//! processes in pod cgroups its own runtime lists nothing of (as two
//! kubelets on one machine would).

mod soak_driver;

use std::path::PathBuf;

use soak_driver::*;

#[test]
fn five_hundred_lifecycles_with_faults_leave_nothing_behind() {
    let lifecycles = std::env::var("PODWARDEN_SOAK_LIFECYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
    let opts = Opts {
        bin: PathBuf::from(env!("CARGO_BIN_EXE_podwarden")),
        repo: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        lifecycles,
        concurrency: 12,
        seed: seed_from_env(),
        faults: [2; 4],
        // a slope needs points: every 100 here (the bench: every 500)
        sample_every: 100,
    };
    let r = run(&opts);
    // the slope over the whole run (there is no "after the first 1,000")
    println!("{}", r.json(0));
    println!("soak: wall time {:.1} s", r.wall_s);
    assert!(r.clean(), "the soak left something behind or ran a pod twice:\n{}", r.failure_text());
    assert_eq!(r.lifecycles, lifecycles, "lifecycles done");
    assert_eq!(r.faults.values().sum::<u64>(), 8, "faults injected: {:?}", r.faults);
    // generous: an agent with a dozen pods takes some 10-15 MiB here
    let bound = r.rss_first() + 40 * 1024;
    assert!(
        r.rss_max() <= bound,
        "the agent's RSS grew to {} KiB (first {} KiB, bound {bound} KiB): {:?}\n{}",
        r.rss_max(),
        r.rss_first(),
        r.samples,
        r.failure_text()
    );
}

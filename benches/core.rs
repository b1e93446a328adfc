//! Core benchmark on the zero-latency fake runtime (run it with
//! `scripts/bench.sh core`). Prints one JSON object as its last line:
//! - `lifecycles_wall_s`: wall time for 10,000 pod lifecycles
//!   (create -> running -> kill -> finished), target <= 2 s on 2 cores;
//! - `update_pod_per_s`: update_pod calls per second on live pods from 2
//!   threads at once;
//! - `rss_per_worker_kib`: resident memory per idle pod worker with 110
//!   pods, target <= 64 KiB.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use podwarden::cli::daemon::Tuning;
use podwarden::config::Config;
use podwarden::model::{self, Container, ObjectMeta, Pod, PodSpec};
use podwarden::pod::workers::{KillPodOptions, Observer, Phase, PodWorkers, UpdatePodOptions, UpdateType};
use podwarden::runtime::fake::FakeRuntime;

fn pod(i: usize, round: usize) -> Arc<Pod> {
    let mut ann = std::collections::BTreeMap::new();
    ann.insert(model::CONFIG_SOURCE_ANNOTATION.to_string(), "file".to_string());
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(format!("p{i}")),
            namespace: Some("default".into()),
            uid: Some(format!("r{round}-p{i}")),
            annotations: Some(ann),
            ..Default::default()
        },
        spec: Some(PodSpec {
            termination_grace_period_seconds: Some(1),
            containers: vec![Container { name: "c".into(), image: Some("busybox:1".into()), ..Default::default() }],
            ..Default::default()
        }),
        status: None,
    })
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Where pod directories go: `PODWARDEN_BENCH_DIR`, else tmpfs at
/// `/dev/shm` (the runtime is zero-latency; so is the disk), else the temp dir.
fn bench_dir() -> std::path::PathBuf {
    if let Some(d) = std::env::var_os("PODWARDEN_BENCH_DIR") {
        return d.into();
    }
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() { shm.into() } else { std::env::temp_dir() }
}

struct Setup {
    fake: Arc<FakeRuntime>,
    finished: Arc<Finished>,
    workers: PodWorkers,
    _root: std::path::PathBuf,
}

fn setup() -> Setup {
    let root = bench_dir().join(format!("podwarden-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let fake = Arc::new(FakeRuntime::new());
    fake.set_recording(false);
    let finished = Arc::new(Finished::default());
    // the production wiring; resync rare enough not to count
    let config = Config {
        container_runtime_endpoint: "fake://".into(),
        root_dir: root.join("root"),
        pod_logs_dir: root.join("logs"),
        runtime_request_timeout: Duration::from_secs(10),
        sync_frequency: Duration::from_secs(3600),
        ..Config::default()
    };
    let tuning = Tuning { observer: Some(finished.clone()), ..Tuning::default() };
    let workers = podwarden::cli::daemon::assemble(&config, fake.clone(), "fake://", tuning).workers;
    Setup { fake, finished, workers, _root: root }
}

/// Poll a counter until it reaches `n` (cheap: no lock, no allocation).
fn wait_count(what: &str, n: u64, count: impl Fn() -> u64) {
    let end = Instant::now() + Duration::from_secs(60);
    while count() < n {
        assert!(Instant::now() < end, "{what}: {} of {n} after 60 s", count());
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Counts pods that reached Finished.
#[derive(Default)]
struct Finished(AtomicU64);

impl Observer for Finished {
    fn phase_changed(&self, _uid: &str, _from: Phase, to: Phase) {
        if to == Phase::Finished {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// create -> running -> kill -> finished for `total` pods, `batch` at a time.
fn lifecycles(s: &Setup, total: usize, batch: usize) -> f64 {
    let start = Instant::now();
    let mut round = 0;
    let mut done = 0;
    while done < total {
        let n = batch.min(total - done);
        let pods: Vec<Arc<Pod>> = (0..n).map(|i| pod(i, round)).collect();
        let t0 = Instant::now();
        let started = s.fake.started_total();
        let finished = s.finished.0.load(Ordering::SeqCst);
        for p in &pods {
            s.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
        }
        wait_count("running", started + n as u64, || s.fake.started_total());
        let t_run = Instant::now();
        let mut waits = Vec::with_capacity(n);
        for p in &pods {
            let (opts, rx) = KillPodOptions::with_completion();
            s.workers.update_pod(UpdatePodOptions::kill(p.clone(), opts));
            waits.push(rx);
        }
        for rx in waits {
            rx.recv_timeout(Duration::from_secs(60)).expect("terminated");
        }
        let t_term = Instant::now();
        wait_count("finished", finished + n as u64, || s.finished.0.load(Ordering::SeqCst));
        let t_fin = Instant::now();
        s.workers.sync_known_pods(&HashSet::new());
        if std::env::var_os("PODWARDEN_BENCH_PHASES").is_some() {
            eprintln!(
                "batch {round}: start {:?} kill->terminated {:?} ->finished {:?} remove {:?}",
                t_run - t0,
                t_term - t_run,
                t_fin - t_term,
                t_fin.elapsed()
            );
        }
        assert!(s.workers.snapshot().is_empty());
        done += n;
        round += 1;
    }
    start.elapsed().as_secs_f64()
}

fn main() {
    // Let `cargo bench` pass its flags without us treating them as input.
    let total: usize = std::env::var("PODWARDEN_BENCH_LIFECYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let s = setup();

    // RSS per idle worker with 110 pods.
    let before = rss_kib();
    let pods: Vec<Arc<Pod>> = (0..110).map(|i| pod(i, 999_999)).collect();
    for p in &pods {
        s.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    }
    wait_count("running", 110, || s.fake.started_total());
    std::thread::sleep(Duration::from_millis(300)); // idle
    let after = rss_kib();
    let threads_110 = s.workers.worker_threads();
    let rss_per_worker = (after.saturating_sub(before)) as f64 / 110.0;

    // update_pod calls per second on the 110 live pods from 2 threads.
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let mut hs = Vec::new();
    for t in 0..2 {
        let (w, pods, stop, calls) = (s.workers.clone(), pods.clone(), stop.clone(), calls.clone());
        hs.push(
            podwarden::base::thread::spawn(format!("bench-update-{t}"), None, move || {
                let mut i = t;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    w.update_pod(UpdatePodOptions::new(UpdateType::Sync, pods[i % pods.len()].clone()));
                    i += 7;
                    n += 1;
                }
                calls.fetch_add(n, Ordering::Relaxed);
            })
            .expect("spawn"),
        );
    }
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    let update_per_s = calls.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64();
    for p in &pods {
        s.workers.update_pod(UpdatePodOptions::kill(p.clone(), KillPodOptions::default()));
    }
    let uids: Vec<String> = pods.iter().map(|p| model::uid(p).to_string()).collect();
    s.workers
        .wait_until(Instant::now() + Duration::from_secs(60), |ph| uids.iter().all(|u| ph(u) == Some(Phase::Finished)));
    s.workers.sync_known_pods(&HashSet::new());

    // 10,000 lifecycles, 100 in flight at a time.
    let batch: usize = std::env::var("PODWARDEN_BENCH_BATCH").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let wall = lifecycles(&s, total, batch);
    let _ = std::fs::remove_dir_all(&s._root);

    println!(
        "lifecycles: {total} in {wall:.3} s ({:.0}/s); update_pod: {update_per_s:.0}/s from 2 threads; \
         RSS {before} KiB -> {after} KiB with {threads_110} idle workers = {rss_per_worker:.1} KiB each",
        total as f64 / wall
    );
    println!(
        "{{\"lifecycles\":{total},\"lifecycles_wall_s\":{wall:.3},\"lifecycles_per_s\":{:.0},\"target_lifecycles_wall_s\":2.0,\"ratio_to_target_wall\":{:.3},\"update_pod_per_s\":{update_per_s:.0},\"rss_per_worker_kib\":{rss_per_worker:.1},\"target_rss_per_worker_kib\":64,\"ratio_to_target_rss\":{:.3},\"workers\":{threads_110},\"worker_stack_kib\":{},\"pod_dirs\":\"{}\"}}",
        total as f64 / wall,
        wall / 2.0,
        rss_per_worker / 64.0,
        podwarden::base::thread::WORKER_STACK / 1024,
        bench_dir().display()
    );
}

//! Footprint benchmark (`scripts/bench.sh footprint` builds and installs the
//! .deb and prepares the private containerd): the installed
//! `/usr/bin/podwarden` idle with 0 and then 110 running pods, RSS and
//! threads sampled every second, CPU time and wake-ups (context switches of
//! all its threads) over 60 s each; the binary's
//! size; `podwarden get pods -A` latency with 110 pods. The last line is
//! one JSON object.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use podwarden::runtime::cri::CriRuntime;
use podwarden::runtime::{CallCtx, ContainerState, Runtime};

mod support;
use support::{Agent, IMAGE, cpu_ticks, proc_status, socket, thread_switches, wakeups_per_s, write_atomically};

const PODS: usize = 110;

fn window() -> Duration {
    Duration::from_secs(std::env::var("FOOTPRINT_WINDOW_S").ok().and_then(|s| s.parse().ok()).unwrap_or(60))
}

struct Sample {
    /// Anonymous (private) memory: RSS less the file-backed code pages of
    /// the binary and shared libraries.
    anon_kib_median: u64,
    rss_kib_max: u64,
    rss_kib_median: u64,
    threads_max: u64,
    cpu_core: f64,
    /// Context switches of all threads a second: how often it wakes.
    wakeups_per_s: f64,
    /// The threads that woke most (name, a second).
    wakers: Vec<(String, f64)>,
}

/// Sample RSS and threads each second for the window; CPU over the window.
fn idle(pid: u32) -> Sample {
    let hz = podwarden::sys::clock_ticks_per_second() as f64;
    let t0 = Instant::now();
    let c0 = cpu_ticks(pid);
    let w0 = thread_switches(pid);
    let mut rss = Vec::new();
    let mut anon = Vec::new();
    let mut threads = 0;
    while t0.elapsed() < window() {
        std::thread::sleep(Duration::from_secs(1));
        rss.push(proc_status(pid, "VmRSS:"));
        anon.push(proc_status(pid, "RssAnon:"));
        threads = threads.max(proc_status(pid, "Threads:"));
    }
    let cpu = (cpu_ticks(pid) - c0) as f64 / hz / t0.elapsed().as_secs_f64();
    let (wakeups_per_s, mut wakers) = wakeups_per_s(&w0, &thread_switches(pid), t0.elapsed().as_secs_f64());
    wakers.truncate(6);
    rss.sort();
    anon.sort();
    Sample {
        anon_kib_median: anon[anon.len() / 2],
        rss_kib_max: *rss.last().unwrap(),
        rss_kib_median: rss[rss.len() / 2],
        threads_max: threads,
        cpu_core: cpu,
        wakeups_per_s,
        wakers,
    }
}

/// The busiest threads, for the report: `name n/s, ...`.
fn wakers(s: &Sample) -> String {
    s.wakers.iter().map(|(n, w)| format!("{n} {w:.1}/s")).collect::<Vec<_>>().join(", ")
}

fn manifest(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: bench\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 5\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while :; do sleep 60 & wait; done\"]\n"
    )
}

fn running(cri: &CriRuntime) -> usize {
    cri.list_pods(&CallCtx::background(Duration::from_secs(30)))
        .unwrap_or_default()
        .iter()
        .filter(|p| p.name.starts_with("fp-"))
        .filter(|p| p.containers.iter().any(|c| c.state == ContainerState::Running))
        .count()
}

fn main() {
    let cri = CriRuntime::connect(&format!("unix://{}", socket()), Duration::from_secs(10)).unwrap();
    let bin = support::bin("footprint");
    let agent = Agent::start("footprint", "readOnlyPort: 0\n", Stdio::inherit());
    let (dir, pid, api) = (agent.dir.clone(), agent.pid(), agent.api());
    std::thread::sleep(Duration::from_secs(5));
    let zero = idle(pid);
    println!(
        "0 pods: RSS {} KiB (max {}; anonymous {}), {} threads, {:.3} % of one core, {:.1} wake-ups/s ({})",
        zero.rss_kib_median,
        zero.rss_kib_max,
        zero.anon_kib_median,
        zero.threads_max,
        zero.cpu_core * 100.0,
        zero.wakeups_per_s,
        wakers(&zero)
    );

    for i in 0..PODS {
        let name = format!("fp-{i}");
        write_atomically(&dir, &format!("{name}.yaml"), &manifest(&name));
    }
    let t = Instant::now();
    while running(&cri) < PODS {
        assert!(t.elapsed() < Duration::from_secs(300), "only {} of {PODS} pods running after 300 s", running(&cri));
        std::thread::sleep(Duration::from_millis(500));
    }
    let start_all_s = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(10)); // let the start-up work settle
    let full = idle(pid);
    println!(
        "{PODS} pods (all running after {start_all_s:.1} s): RSS {} KiB (max {}; anonymous {}), {} threads, {:.3} % of one core, {:.1} wake-ups/s ({})",
        full.rss_kib_median,
        full.rss_kib_max,
        full.anon_kib_median,
        full.threads_max,
        full.cpu_core * 100.0,
        full.wakeups_per_s,
        wakers(&full)
    );

    let mut lat = Vec::new();
    for _ in 0..21 {
        let t = Instant::now();
        let out = Command::new(&bin).args(["get", "pods", "-A", "--socket"]).arg(&api).output().unwrap();
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(out.status.success(), "get pods failed: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), PODS + 1);
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let binary = std::fs::metadata(&bin).unwrap().len();
    println!("podwarden get pods -A with {PODS} pods: median {:.1} ms; binary {binary} bytes", lat[lat.len() / 2]);

    // clean up: remove the pods
    for e in std::fs::read_dir(dir.join("manifests")).unwrap().flatten() {
        std::fs::remove_file(e.path()).unwrap();
    }
    let t = Instant::now();
    while cri
        .list_pods(&CallCtx::background(Duration::from_secs(30)))
        .unwrap_or_default()
        .iter()
        .any(|p| p.name.starts_with("fp-"))
        && t.elapsed() < Duration::from_secs(120)
    {
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(agent);

    let mut out: BTreeMap<&str, f64> = BTreeMap::new();
    out.insert("pods", PODS as f64);
    out.insert("window_s", window().as_secs() as f64);
    out.insert("rss_kib_0", zero.rss_kib_median as f64);
    out.insert("rss_kib_0_max", zero.rss_kib_max as f64);
    out.insert("threads_0", zero.threads_max as f64);
    out.insert("rss_anon_kib_0", zero.anon_kib_median as f64);
    out.insert("rss_anon_kib_110", full.anon_kib_median as f64);
    out.insert("cpu_core_0", zero.cpu_core);
    out.insert("rss_kib_110", full.rss_kib_median as f64);
    out.insert("rss_kib_110_max", full.rss_kib_max as f64);
    out.insert("threads_110", full.threads_max as f64);
    out.insert("cpu_core_110", full.cpu_core);
    out.insert("wakeups_per_s_0", zero.wakeups_per_s);
    out.insert("wakeups_per_s_110", full.wakeups_per_s);
    out.insert("rss_110_over_0_ratio", full.rss_kib_median as f64 / zero.rss_kib_median as f64);
    out.insert("rss_kib_110_over_target_ratio", full.rss_kib_max as f64 / (16.0 * 1024.0));
    out.insert("all_running_s", start_all_s);
    out.insert("binary_bytes", binary as f64);
    out.insert("binary_over_target_ratio", binary as f64 / (12.0 * 1024.0 * 1024.0));
    out.insert("cli_get_pods_ms", lat[lat.len() / 2]);
    support::print_json(&out, 4);
}

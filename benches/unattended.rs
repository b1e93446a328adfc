//! The unattended-node benchmark on the private containerd
//! (`scripts/bench.sh unattended` prepares it), with the release binary
//! and the default log policy (containerLogMaxSize 10Mi,
//! containerLogMaxFiles 5):
//! - a container writing 1 GiB of log as fast as it can: the bytes its log
//!   files hold on disk afterwards (allocated blocks), the most they held
//!   while it wrote (sampled every 100 ms), and its write rate;
//! - a container writing 100 MiB right at its start: the most its log
//!   files held at once (sampled every 2 ms), against twice the limit;
//! - podwarden's RSS and CPU (stats taken every 2 s among it) with 110
//!   pods running;
//! - the eviction manager's reaction: memory threshold crossed to kill
//!   started;
//! - one image garbage collection removing 20 unused 1 MiB images.
//!
//! The last line is one JSON object.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use podwarden::runtime::cri::CriRuntime;
use podwarden::runtime::{ContainerState, Runtime};

mod support;
use support::{Agent, IMAGE, call, proc_status, socket, write_atomically};

const GIB: u64 = 1 << 30;
const MANY: usize = 110;

fn manifest(name: &str, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: bench\nspec:\n  hostNetwork: true\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", {command:?}]\n"
    )
}

/// Allocated bytes of every file below `dir`.
fn on_disk(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => on_disk(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

fn pods(cri: &CriRuntime, prefix: &str) -> Vec<podwarden::runtime::RuntimePod> {
    cri.list_pods(&call()).unwrap().into_iter().filter(|p| p.name.starts_with(prefix)).collect()
}

fn remove_all(cri: &CriRuntime, agent: &Agent) {
    for e in std::fs::read_dir(agent.dir.join("manifests")).unwrap().flatten() {
        std::fs::remove_file(e.path()).unwrap();
    }
    let end = Instant::now() + Duration::from_secs(180);
    while cri.list_pods(&call()).unwrap().iter().any(|p| p.namespace == "bench") {
        assert!(Instant::now() < end, "pods not removed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// 1 GiB of 1000-byte lines as fast as the runtime takes them.
fn logs(cri: &CriRuntime, out: &mut BTreeMap<&'static str, f64>) {
    let agent = Agent::start("unattended", "readOnlyPort: 0\n", Stdio::inherit());
    std::thread::sleep(Duration::from_millis(700));
    let cmd = format!("yes \"$(printf '%0999d' 0)\" | head -c {GIB}");
    write_atomically(&agent.dir, "chatty.yaml", &manifest("chatty", &cmd));
    let logs = agent.dir.join("logs");
    let mut peak = 0;
    let started = Instant::now();
    let mut running_at = None;
    loop {
        peak = peak.max(on_disk(&logs));
        let p = pods(cri, "chatty");
        let state = p.first().and_then(|p| p.containers.first()).map(|c| c.state);
        if running_at.is_none() && state.is_some() {
            running_at = Some(Instant::now());
        }
        if state == Some(ContainerState::Exited) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(1800), "1 GiB not written in 30 min");
        std::thread::sleep(Duration::from_millis(100));
    }
    let secs = running_at.map_or(0.0, |t| t.elapsed().as_secs_f64());
    // the last writes may come after the last check: a monitor pass (10 s)
    // rotates what is over the limit
    std::thread::sleep(Duration::from_secs(12));
    let after = on_disk(&logs);
    let mut files: Vec<(String, u64)> =
        std::fs::read_dir(logs.read_dir().unwrap().flatten().next().unwrap().path().join("main"))
            .unwrap()
            .flatten()
            .map(|e| (e.file_name().into_string().unwrap(), e.metadata().unwrap().len()))
            .collect();
    files.sort();
    println!("1 GiB written in {secs:.1} s; log files after: {files:?}");
    println!("log bytes on disk: {after} after, {peak} at most while writing");
    out.insert("log_bytes_on_disk_after_1gib", after as f64);
    out.insert("log_bytes_on_disk_peak", peak as f64);
    out.insert("log_target_bytes", (5 * 10 * 1024 * 1024) as f64);
    out.insert("log_write_mib_per_s", 1024.0 / secs.max(0.001));
    remove_all(cri, &agent);
    burst_at_start(cri, &agent, out);
}

/// A container that writes 100 MiB as fast as it can from its first
/// instant: the most its log files held at once (sampled every 2 ms from
/// before it starts), against twice the 50 MiB they may hold.
fn burst_at_start(cri: &CriRuntime, agent: &Agent, out: &mut BTreeMap<&'static str, f64>) {
    let cmd = "yes \"$(printf '%0999d' 0)\" | head -c 104857600; sleep 3600";
    write_atomically(&agent.dir, "burst.yaml", &manifest("burst", cmd));
    let logs = agent.dir.join("logs");
    let (mut peak, mut last, mut still) = (0u64, 0u64, Instant::now());
    let started = Instant::now();
    // this pod's directory only (the 1 GiB pod's may still be going)
    let mine = || -> u64 {
        let Ok(es) = std::fs::read_dir(&logs) else { return 0 };
        es.flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("bench_burst_"))
            .map(|e| on_disk(&e.path()))
            .sum()
    };
    loop {
        let now = mine();
        peak = peak.max(now);
        // written and idle for 2 s (the container sleeps after its burst)
        if now != last {
            (last, still) = (now, Instant::now());
        } else if now > 0 && still.elapsed() > Duration::from_secs(2) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(300), "100 MiB not written in 5 min");
        std::thread::sleep(Duration::from_millis(2));
    }
    println!("a 100 MiB burst at a container's start: its log files held {peak} bytes at most");
    out.insert("log_bytes_peak_burst_at_start", peak as f64);
    out.insert("log_bytes_peak_burst_bound", (2 * 5 * 10 * 1024 * 1024) as f64);
    out.insert("log_bytes_peak_burst_ratio", peak as f64 / (5.0 * 10.0 * 1024.0 * 1024.0));
    remove_all(cri, agent);
}

fn rss(cri: &CriRuntime, out: &mut BTreeMap<&'static str, f64>) {
    let agent = Agent::start("unattended", "readOnlyPort: 0\n", Stdio::inherit());
    std::thread::sleep(Duration::from_millis(700));
    for i in 0..MANY {
        let name = format!("many-{i}");
        write_atomically(
            &agent.dir,
            &format!("{name}.yaml"),
            &manifest(&name, "trap 'exit 0' TERM; while :; do sleep 1 & wait; done"),
        );
    }
    let end = Instant::now() + Duration::from_secs(300);
    loop {
        let running = pods(cri, "many-")
            .iter()
            .filter(|p| p.containers.iter().any(|c| c.state == ContainerState::Running))
            .count();
        if running == MANY {
            break;
        }
        assert!(Instant::now() < end, "only {running} of {MANY} pods running after 300 s");
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(12));
    let rss = proc_status(agent.pid(), "VmRSS:");
    let threads = proc_status(agent.pid(), "Threads:");
    println!("{MANY} pods: RSS {rss} KiB, {threads} threads");
    out.insert("rss_kib_110", rss as f64);
    out.insert("threads_110", threads as f64);
    // the agent's whole CPU over a minute with 110 pods, the node's signals
    // every housekeepingInterval (2 s) and the pods' stats every 10 s among
    // it: an upper bound of what collecting stats costs
    let hz = podwarden::sys::clock_ticks_per_second() as f64;
    let (t0, c0) = (Instant::now(), support::cpu_ticks(agent.pid()));
    std::thread::sleep(Duration::from_secs(60));
    let cores = (support::cpu_ticks(agent.pid()) - c0) as f64 / hz / t0.elapsed().as_secs_f64();
    let summary_pods = std::process::Command::new(podwarden_bin())
        .args(["top", "pods", "-n", "bench", "--socket"])
        .arg(agent.api())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().count().saturating_sub(1))
        .unwrap_or(0);
    println!("{MANY} pods: podwarden uses {cores:.4} cores (stats of {summary_pods} pods every 10 s among it)");
    assert_eq!(summary_pods, MANY, "top pods shows every pod");
    out.insert("stats_cpu_core_110", cores);
    remove_all(cri, &agent);
}

/// 20 unused images of 1 MiB each, collected by one garbage collection
/// (every byte wanted: high 1 %, low 0 %): its duration.
fn image_gc(cri: std::sync::Arc<CriRuntime>, out: &mut BTreeMap<&'static str, f64>) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/e2e-env.sh");
    for i in 0..20 {
        let ok = std::process::Command::new(script)
            .args(["extra-image", &format!("localhost/bench-gc-{i}:e2e"), "1024"])
            .status()
            .unwrap()
            .success();
        assert!(ok, "scripts/e2e-env.sh extra-image failed");
    }
    let policy = podwarden::node::images::gc::Policy {
        high_percent: 1,
        low_percent: 0,
        min_age: Duration::ZERO,
        max_age: Duration::ZERO,
    };
    let events = std::sync::Arc::new(podwarden::telemetry::events::EventRecorder::new(64));
    let metrics = std::sync::Arc::new(podwarden::telemetry::metrics::Metrics::new());
    let gc = podwarden::node::images::gc::ImageGc::new(cri, policy, events, metrics, "bench", Duration::from_secs(30));
    let t = Instant::now();
    let r = gc.collect(Instant::now()).unwrap();
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let ours = r.removed.len();
    println!("image GC: removed {ours} images ({} bytes) in {ms:.0} ms", r.freed_bytes);
    assert!(ours >= 20, "the 20 images removed: {r:?}");
    out.insert("image_gc_ms", ms);
    out.insert("image_gc_removed", ours as f64);
}

fn podwarden_bin() -> String {
    support::bin("unattended")
}

/// kubepods' memory limit, restored when dropped.
struct KubepodsLimit(String);

impl Drop for KubepodsLimit {
    fn drop(&mut self) {
        let _ = std::fs::write("/sys/fs/cgroup/memory/kubepods/memory.limit_in_bytes", &self.0);
    }
}

fn kubepods(file: &str) -> String {
    std::fs::read_to_string(format!("/sys/fs/cgroup/memory/kubepods/{file}")).unwrap_or_default()
}

/// Threshold crossed to kill started, three times: `kubepods` is made
/// 120 MiB larger than what the pods' working set is, with the threshold
/// `memory.available<100Mi` (so `allocatableMemory.available<100Mi`); a
/// BestEffort pod takes 40 MB and then touches a marker, which the bench
/// polls every 5 ms; the kill's start is when its container ended (it dies
/// on SIGTERM at once), as containerd records it.
fn eviction(cri: &CriRuntime, out: &mut BTreeMap<&'static str, f64>) {
    let agent = Agent::start(
        "unattended",
        "readOnlyPort: 0\nevictionHard: {memory.available: 100Mi}\nevictionPressureTransitionPeriod: 3s\n",
        Stdio::inherit(),
    );
    let state = agent.dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let _restore = KubepodsLimit(kubepods("memory.limit_in_bytes").trim().to_string());
    let mut samples = Vec::new();
    for round in 0..3 {
        let usage: i64 = kubepods("memory.usage_in_bytes").trim().parse().unwrap();
        let inactive: i64 = kubepods("memory.stat")
            .lines()
            .find_map(|l| l.strip_prefix("total_inactive_file ")?.trim().parse().ok())
            .unwrap_or(0);
        std::fs::write(
            "/sys/fs/cgroup/memory/kubepods/memory.limit_in_bytes",
            (usage - inactive + (120 << 20)).to_string(),
        )
        .unwrap();
        let marker = state.join(format!("hog-{round}"));
        let name = format!("hog-{round}");
        let yaml = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: bench\nspec:\n  hostNetwork: true\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 0\n  volumes: [{{name: state, hostPath: {{path: {}}}}}]\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sh, -c, \"sleep 1; s=$(head -c 40000000 /dev/zero | tr '\\\\0' x); touch /state/hog-{round}; trap 'exit 0' TERM; while :; do sleep 1 & wait; done\"]\n    volumeMounts: [{{name: state, mountPath: /state}}]\n",
            state.display()
        );
        write_atomically(&agent.dir, &format!("{name}.yaml"), &yaml);
        let end = Instant::now() + Duration::from_secs(60);
        while !marker.exists() {
            assert!(Instant::now() < end, "the hog never took its memory");
            std::thread::sleep(Duration::from_millis(5));
        }
        let crossed = support::now_ns();
        // the kill's start: the container no longer running (it exits on
        // SIGTERM at once), seen by polling every 20 ms
        let finished = loop {
            let p = pods(cri, &name);
            if p.first().and_then(|p| p.containers.first()).is_some_and(|c| c.state != ContainerState::Running) {
                break support::now_ns();
            }
            assert!(Instant::now() < end, "the hog was not evicted within 60 s");
            std::thread::sleep(Duration::from_millis(20));
        };
        let ms = (finished - crossed) as f64 / 1e6;
        println!("eviction {round}: threshold crossed to kill started {ms:.0} ms");
        samples.push(ms);
        remove_all(cri, &agent);
        // the pressure condition clears after the transition period
        std::thread::sleep(Duration::from_secs(5));
    }
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    out.insert("eviction_reaction_ms", samples[1]);
    out.insert("eviction_reaction_ms_max", samples[2]);
    out.insert("eviction_target_ms", 2000.0 + 1000.0);
}

fn main() {
    let cri =
        std::sync::Arc::new(CriRuntime::connect(&format!("unix://{}", socket()), Duration::from_secs(10)).unwrap());
    let mut out = BTreeMap::new();
    logs(&cri, &mut out);
    rss(&cri, &mut out);
    // no agent runs now: the collection sees no container, so every image
    // but the runtime's sandbox image is unused; the e2e busybox image is
    // imported again by the next `scripts/e2e-env.sh up`
    eviction(&cri, &mut out);
    image_gc(cri.clone(), &mut out);
    support::print_json(&out, 4);
}

//! Start benchmark on the private containerd (`scripts/bench.sh start`
//! prepares it): per-pod start latency of a direct CRI client ("raw") and of
//! podwarden (manifests dropped into staticPodPath) for N = 1 and N = 30
//! host-network busybox pods, measured with containerd's own container start
//! times; stop latency with grace 0; podwarden's RSS and threads with 0 and
//! 30 pods. The last line is one JSON object.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use podwarden::runtime::cri::CriRuntime;
use podwarden::runtime::{ContainerState, Runtime, SecurityProfile};

mod support;
use support::{IMAGE, call, now_ns, proc_status, socket};

const REPS: usize = 7;

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

/// One raw pod (no seccomp profile, as podwarden's pods here); returns its
/// start latency and UID.
fn raw_pod(cri: &CriRuntime, i: usize, tag: &str) -> (f64, String) {
    let uid = format!("bench-raw-{}-{tag}-{i}", std::process::id());
    let name = format!("raw-{}-{tag}-{i}", std::process::id());
    (support::raw_pod(cri, &uid, &name, SecurityProfile::Unconfined), uid)
}

fn raw(cri: &Arc<CriRuntime>, n: usize, tag: &str) -> Vec<f64> {
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let cri = cri.clone();
            let tag = tag.to_string();
            podwarden::base::thread::spawn(format!("raw-{i}"), None, move || raw_pod(&cri, i, &tag)).unwrap()
        })
        .collect();
    let results: Vec<(f64, String)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for (_, uid) in &results {
        support::remove_raw_pod(cri, uid);
    }
    results.into_iter().map(|r| r.0).collect()
}

struct Agent {
    dir: PathBuf,
    child: Child,
}

impl Agent {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("podwarden-bench-start-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("manifests")).unwrap();
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "staticPodPath: {0}/manifests\ncontainerRuntimeEndpoint: unix://{1}\nrootDir: {0}/root\napiSocket: {0}/api.sock\npodLogsDir: {0}/logs\nnodeName: bench\nreadOnlyPort: 0\nhousekeepingInterval: 2s\n",
                dir.display(),
                socket()
            ),
        )
        .unwrap();
        // the binary under test: $PODWARDEN_BIN (to compare two builds
        // in one run), else this build's
        let bin = std::env::var("PODWARDEN_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_podwarden").to_string());
        let child = Command::new(bin)
            .args(["run", "--config", config.to_str().unwrap()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        Agent { dir, child }
    }

    fn proc_field(&self, key: &str) -> u64 {
        proc_status(self.child.id(), key)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn manifest(name: &str, grace: i64) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: bench\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: {grace}\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while :; do sleep 1 & wait; done\"]\n"
    )
}

/// Drop `n` manifests at once; per-pod latency from the write to
/// containerd's start time of its container.
fn podwarden(cri: &CriRuntime, agent: &Agent, n: usize, tag: &str) -> (Vec<f64>, f64, Vec<String>) {
    let t0 = now_ns();
    let begin = Instant::now();
    for i in 0..n {
        let name = format!("pw-{tag}-{i}");
        let tmp = agent.dir.join(format!("{name}.tmp"));
        std::fs::write(&tmp, manifest(&name, 0)).unwrap();
        std::fs::rename(&tmp, agent.dir.join("manifests").join(format!("{name}.yaml"))).unwrap();
    }
    let end = Instant::now() + Duration::from_secs(120);
    loop {
        let pods: Vec<_> =
            cri.list_pods(&call()).unwrap().into_iter().filter(|p| p.name.starts_with(&format!("pw-{tag}-"))).collect();
        let running = pods.iter().filter(|p| p.containers.iter().any(|c| c.state == ContainerState::Running)).count();
        if running == n {
            let all_running_s = begin.elapsed().as_secs_f64();
            let mut lat = Vec::new();
            let mut uids = Vec::new();
            for p in pods {
                let rp = cri.pod_status(&call(), &p.uid).unwrap();
                lat.push((rp.containers[0].started_at_ns - t0) as f64 / 1e6);
                uids.push(p.uid);
            }
            return (lat, all_running_s, uids);
        }
        assert!(Instant::now() < end, "only {running} of {n} podwarden pods running after 120 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Remove every manifest; per pod, the time until containerd saw its
/// container exit. Waits until podwarden removed the pods.
fn stop_latencies(cri: &CriRuntime, agent: &Agent, uids: &[String]) -> Vec<f64> {
    let t0 = now_ns();
    for e in std::fs::read_dir(agent.dir.join("manifests")).unwrap().flatten() {
        std::fs::remove_file(e.path()).unwrap();
    }
    let end = Instant::now() + Duration::from_secs(60);
    let mut stops = Vec::new();
    for uid in uids {
        loop {
            let rp = cri.pod_status(&call(), uid).unwrap();
            match rp.containers.first() {
                Some(c) if c.state == ContainerState::Exited => {
                    stops.push((c.finished_at_ns - t0) as f64 / 1e6);
                    break;
                }
                None => break, // already removed: its exit time is gone
                _ => {}
            }
            assert!(Instant::now() < end, "pod {uid} did not stop");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let end = Instant::now() + Duration::from_secs(60);
    while cri.list_pods(&call()).unwrap().iter().any(|p| p.name.starts_with("pw-")) {
        assert!(Instant::now() < end, "pods not removed");
        std::thread::sleep(Duration::from_millis(50));
    }
    stops
}

fn main() {
    let cri = Arc::new(CriRuntime::connect(&format!("unix://{}", socket()), Duration::from_secs(10)).unwrap());
    // warm up containerd (image unpack, CNI, shim start)
    raw(&cri, 1, "warm");

    // The raw client first, with no agent running (an agent would take the
    // raw pods, which carry the pod-UID label, for orphans).
    // N = 1 is repeated (REPS times, one pod at a time) for a stable median.
    let raw_runs: Vec<Vec<f64>> =
        vec![(0..REPS).flat_map(|r| raw(&cri, 1, &format!("n1r{r}"))).collect(), raw(&cri, 30, "n30")];

    let agent = Agent::start();
    std::thread::sleep(Duration::from_secs(1));
    let rss_0 = agent.proc_field("VmRSS:");
    let mut out = BTreeMap::new();
    let mut summary = Vec::new();
    let mut last = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (k, n) in [1usize, 30].into_iter().enumerate() {
        let mut r = raw_runs[k].clone();
        let reps = if n == 1 { REPS } else { 1 };
        let mut p = Vec::new();
        let mut stops = Vec::new();
        let mut all_running_s = 0.0;
        for rep in 0..reps {
            let (lat, all, uids) = podwarden(&cri, &agent, n, &format!("n{n}r{rep}"));
            p.extend(lat);
            all_running_s = all;
            if n == 30 {
                out.insert("rss_kib_30", agent.proc_field("VmRSS:") as f64);
                out.insert("threads_30", agent.proc_field("Threads:") as f64);
            }
            stops.extend(stop_latencies(&cri, &agent, &uids));
        }
        let (raw_med, pw_med) = (percentile(&mut r, 0.5), percentile(&mut p, 0.5));
        let (raw_p99, pw_p99) = (percentile(&mut r, 0.99), percentile(&mut p, 0.99));
        let stop_med = if stops.is_empty() { f64::NAN } else { percentile(&mut stops, 0.5) };
        summary.push(format!(
            "N={n}: raw median {raw_med:.1} ms p99 {raw_p99:.1} ms; podwarden median {pw_med:.1} ms p99 {pw_p99:.1} ms \
             ({} samples); all running after {all_running_s:.3} s; stop (grace 0) median {stop_med:.1} ms",
            p.len()
        ));
        last = (raw_med, pw_med, raw_p99, pw_p99, all_running_s, stop_med);
        out.insert(if n == 1 { "n1_raw_median_ms" } else { "raw_median_ms" }, raw_med);
        out.insert(if n == 1 { "n1_podwarden_median_ms" } else { "podwarden_median_ms" }, pw_med);
        out.insert(if n == 1 { "n1_p99_ms" } else { "p99_ms" }, pw_p99);
        out.insert(if n == 1 { "n1_raw_p99_ms" } else { "raw_p99_ms" }, raw_p99);
        out.insert(if n == 1 { "n1_ratio_median" } else { "ratio_median" }, pw_med / raw_med);
        out.insert(if n == 1 { "n1_added_median_ms" } else { "added_median_ms" }, pw_med - raw_med);
        out.insert(if n == 1 { "n1_stop_latency_ms" } else { "stop_latency_ms" }, stop_med);
        if n == 30 {
            out.insert("all_running_s", all_running_s);
        }
    }
    out.insert("n", 30.0);
    out.insert("rss_kib_0", rss_0 as f64);
    for s in summary {
        println!("{s}");
    }
    support::print_json(&out, 3);
    let _ = last;
}

//! Isolation benchmark on the private containerd (`scripts/bench.sh
//! isolation` prepares it): the start latency of a Burstable pod (its own
//! pod cgroup with limits, the runtime's seccomp profile) against the same
//! pod with `cgroupsPerQOS: false` and `seccompDefault: false`, alternating
//! rounds of each so drift hits both; then podwarden's RSS with 110 such
//! pods running. Latency: from the manifest's write to containerd's start
//! time of the container. A direct CRI client starting the same pod with
//! and without the runtime's seccomp profile tells what the profile costs
//! the runtime itself. The last line is one JSON object.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use podwarden::runtime::cri::CriRuntime;
use podwarden::runtime::{ContainerState, Runtime, SecurityProfile};

mod support;
use support::{Agent, IMAGE, call, now_ns, proc_status, socket, write_atomically};

/// Pods started one at a time per round and mode.
const PER_ROUND: usize = 5;
const ROUNDS: usize = 3;
const MANY: usize = 110;

/// The configs compared: both (pod cgroups and the runtime's seccomp
/// profile), neither, and each alone (to tell their costs apart).
const MODES: [(&str, &str); 4] = [
    ("with", "cgroupsPerQOS: true\nseccompDefault: true\n"),
    ("without", "cgroupsPerQOS: false\nseccompDefault: false\n"),
    ("cgroups", "cgroupsPerQOS: true\nseccompDefault: false\n"),
    ("seccomp", "cgroupsPerQOS: false\nseccompDefault: true\n"),
];

fn manifest(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: bench\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while :; do sleep 1 & wait; done\"]\n    resources: {{requests: {{cpu: 10m, memory: 8Mi}}, limits: {{memory: 32Mi}}}}\n"
    )
}

/// Wait until `n` pods named `prefix*` run; their containers' start times.
fn wait_running(cri: &CriRuntime, prefix: &str, n: usize) -> Vec<i64> {
    let end = Instant::now() + Duration::from_secs(300);
    let poll = if n == 1 { Duration::from_millis(5) } else { Duration::from_millis(500) };
    loop {
        let pods: Vec<_> = cri.list_pods(&call()).unwrap().into_iter().filter(|p| p.name.starts_with(prefix)).collect();
        let running: Vec<&str> = pods
            .iter()
            .filter(|p| p.containers.iter().any(|c| c.state == ContainerState::Running))
            .map(|p| p.uid.as_str())
            .collect();
        if running.len() == n {
            return running
                .iter()
                .map(|uid| cri.pod_status(&call(), uid).unwrap().containers[0].started_at_ns)
                .collect();
        }
        assert!(Instant::now() < end, "only {} of {n} pods {prefix}* running after 300 s", running.len());
        std::thread::sleep(poll);
    }
}

/// Remove every manifest and wait until the pods are gone.
fn remove_all(cri: &CriRuntime, agent: &Agent) {
    for e in std::fs::read_dir(agent.dir.join("manifests")).unwrap().flatten() {
        std::fs::remove_file(e.path()).unwrap();
    }
    let end = Instant::now() + Duration::from_secs(120);
    while cri.list_pods(&call()).unwrap().iter().any(|p| p.namespace == "bench") {
        assert!(Instant::now() < end, "pods not removed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `PER_ROUND` pods started one after the other; their start latencies.
fn round(cri: &CriRuntime, mode: &str, config: &str, r: usize) -> Vec<f64> {
    let agent =
        Agent::start("isolation", &format!("readOnlyPort: 0\nhousekeepingInterval: 2s\n{config}"), Stdio::inherit());
    std::thread::sleep(Duration::from_millis(700));
    let mut lat = Vec::new();
    for i in 0..PER_ROUND {
        let name = format!("iso-{mode}-{r}-{i}");
        let t0 = now_ns();
        write_atomically(&agent.dir, &format!("{name}.yaml"), &manifest(&name));
        let started = wait_running(cri, &name, 1);
        lat.push((started[0] - t0) as f64 / 1e6);
    }
    remove_all(cri, &agent);
    lat
}

/// A direct CRI client's pod with `seccomp`: its start latency (the pod
/// is removed again).
fn raw_pod(cri: &CriRuntime, name: &str, seccomp: SecurityProfile) -> f64 {
    let uid = format!("bench-iso-raw-{}-{name}", std::process::id());
    let ms = support::raw_pod(cri, &uid, name, seccomp);
    support::remove_raw_pod(cri, &uid);
    ms
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let cri = Arc::new(CriRuntime::connect(&format!("unix://{}", socket()), Duration::from_secs(10)).unwrap());
    // the runtime alone (no agent runs: it would take these pods for
    // orphans), alternating with and without the profile
    let (mut raw_with, mut raw_without) = (Vec::new(), Vec::new());
    for i in 0..ROUNDS * PER_ROUND + 1 {
        let w = raw_pod(&cri, &format!("raw-with-{i}"), SecurityProfile::RuntimeDefault);
        let wo = raw_pod(&cri, &format!("raw-without-{i}"), SecurityProfile::Unconfined);
        if i > 0 {
            raw_with.push(w);
            raw_without.push(wo);
        }
    }
    let (rw, rwo) = (median(&mut raw_with), median(&mut raw_without));
    println!("direct CRI client: {rw:.1} ms with the runtime's seccomp profile, {rwo:.1} ms unconfined");
    // warm up containerd (shim, image, seccomp) with each mode
    for (mode, config) in MODES {
        round(&cri, &format!("warm-{mode}"), config, 0);
    }
    let mut lat: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for r in 0..ROUNDS {
        for (mode, config) in MODES {
            lat.entry(mode).or_default().extend(round(&cri, mode, config, r));
        }
    }
    let med: BTreeMap<&str, f64> = lat.iter_mut().map(|(m, v)| (*m, median(v))).collect();
    for (m, v) in &med {
        println!("pod start median {m}: {v:.1} ms ({} samples)", lat[m].len());
    }
    let agent = Agent::start(
        "isolation",
        &format!("readOnlyPort: 0\nhousekeepingInterval: 2s\n{}", MODES[0].1),
        Stdio::inherit(),
    );
    std::thread::sleep(Duration::from_millis(700));
    for i in 0..MANY {
        let name = format!("iso-many-{i}");
        write_atomically(&agent.dir, &format!("{name}.yaml"), &manifest(&name));
    }
    wait_running(&cri, "iso-many-", MANY);
    std::thread::sleep(Duration::from_secs(5));
    let rss = proc_status(agent.pid(), "VmRSS:");
    let threads = proc_status(agent.pid(), "Threads:");
    println!("{MANY} pods with pod cgroups and seccomp: RSS {rss} KiB, {threads} threads");
    remove_all(&cri, &agent);
    let mut out = BTreeMap::new();
    out.insert("pod_start_ms_median", med["with"]);
    out.insert("pod_start_ms_median_without", med["without"]);
    out.insert("ratio", med["with"] / med["without"]);
    out.insert("ratio_cgroups_only", med["cgroups"] / med["without"]);
    out.insert("ratio_seccomp_only", med["seccomp"] / med["without"]);
    out.insert("raw_seccomp_ms_median", rw);
    out.insert("raw_unconfined_ms_median", rwo);
    out.insert("raw_ratio_seccomp", rw / rwo);
    out.insert("rss_kib_110", rss as f64);
    out.insert("threads_110", threads as f64);
    out.insert("samples", lat["with"].len() as f64);
    support::print_json(&out, 3);
}

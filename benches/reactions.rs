//! How fast podwarden reacts, on the private containerd (`scripts/bench.sh
//! reactions` prepares it), with the release binary, all in one run:
//! - an init chain (five `true` init containers, a sidecar, main), 10
//!   rounds: from each exit to the next start (containerd's own times),
//!   median and max, and from the sidecar's start to main's; each step
//!   split at containerd's record of the next container: the exit to the
//!   record (`init_chain_step_to_record_ms`: the event, podwarden's pass,
//!   CreateContainer) and the record to its start (`runtime_start_ms`:
//!   containerd's StartContainer alone, the floor of every step);
//! - the same chain with `runtimeEvents: false`, 5 rounds: each step as the
//!   relist alone (every second) moves it on (`relist_init_chain_step_ms`,
//!   median, and `relist_init_chain_step_max_ms`);
//! - CreateContainer and StartContainer made by this bench as a bare CRI
//!   client, no agent running (`bare_create_container_ms`,
//!   `bare_start_container_ms`, medians of 10);
//! - deletion of a pod whose container exits at once on SIGTERM, 10
//!   rounds: from the container's exit (containerd's event, seen by this
//!   bench's own subscription) to the pod gone from `/pods`, median;
//! - podwarden's CPU and RSS with 110 running pods, with the runtime's
//!   event stream open and with `runtimeEvents: false` (the relist alone).
//!
//! The last line is one JSON object.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use podwarden::runtime::cri::CriRuntime;
use podwarden::runtime::events::{Kind, Note};
use podwarden::runtime::{ContainerState, Runtime};

mod support;
use support::{Agent, IMAGE, call, proc_status, socket, write_atomically};

const ROUNDS: usize = 10;
const MANY: usize = 110;
const RUN: &str = "trap 'exit 0' TERM; while :; do sleep 1 & wait; done";

fn container(name: &str, extra: &str, command: &str) -> String {
    format!(
        "  - name: {name}\n    image: {IMAGE}\n    imagePullPolicy: Never\n{extra}    command: [\"sh\", \"-c\", {command:?}]\n"
    )
}

fn chain(name: &str) -> String {
    let inits: String = (1..=5).map(|i| container(&format!("i{i}"), "", "true")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: bench\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n  initContainers:\n{inits}{}  containers:\n{}",
        container("side", "    restartPolicy: Always\n", RUN),
        container("main", "", RUN)
    )
}

fn simple(name: &str, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: bench\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 5\n  containers:\n{}",
        container("main", "", command)
    )
}

fn pod_of(cri: &CriRuntime, name: &str) -> Option<podwarden::runtime::RuntimePod> {
    let uid = cri.list_pods(&call()).ok()?.into_iter().find(|p| p.name == name)?.uid;
    cri.pod_status(&call(), &uid).ok()
}

fn wait(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < end, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn gone_from_containerd(cri: &CriRuntime) {
    wait("bench pods removed", Duration::from_secs(180), || {
        cri.list_pods(&call()).unwrap().iter().all(|p| p.namespace != "bench")
    });
}

fn remove_manifests(agent: &Agent) {
    for e in std::fs::read_dir(agent.dir.join("manifests")).unwrap().flatten() {
        std::fs::remove_file(e.path()).unwrap();
    }
}

/// The init chain with the runtime's events, `ROUNDS` times: its figures.
fn init_chain(cri: &CriRuntime, out: &mut BTreeMap<&'static str, f64>) {
    init_chain_with(cri, "", ROUNDS, Some(out));
}

/// The init chain with the relist alone: the steps of `ROUNDS / 2` rounds.
fn relist_init_chain(cri: &CriRuntime, out: &mut BTreeMap<&'static str, f64>) {
    let mut steps = init_chain_with(cri, "runtimeEvents: false\n", ROUNDS / 2, None);
    println!("init chain steps with the relist alone (ms): {steps:?}");
    out.insert("relist_init_chain_step_max_ms", steps.iter().cloned().fold(0.0, f64::max));
    out.insert("relist_init_chain_step_ms", median(&mut steps));
}

/// The init chain `rounds` times with `extra` config lines: every step
/// (from each exit to the next start, containerd's times). With `out`,
/// the figures of the chain with events go there.
fn init_chain_with(
    cri: &CriRuntime,
    extra: &str,
    rounds: usize,
    out: Option<&mut BTreeMap<&'static str, f64>>,
) -> Vec<f64> {
    let agent = Agent::start("reactions", &format!("readOnlyPort: 0\nsyncFrequency: 60s\n{extra}"), Stdio::inherit());
    std::thread::sleep(Duration::from_millis(1500));
    let (mut steps, mut side_main) = (Vec::new(), Vec::new());
    // each step split where containerd stamps the next container's record
    // (`created_at`, near the end of CreateContainer): before it the
    // exit's way to podwarden, its pass and CreateContainer; after it
    // containerd's StartContainer alone (runc creating and starting the
    // task), which no agent can shorten
    let (mut before_record, mut runtime_start) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let name = format!("chain-{r}");
        write_atomically(&agent.dir, &format!("{name}.yaml"), &chain(&name));
        wait("main running", Duration::from_secs(60), || {
            pod_of(cri, &name).and_then(|p| p.latest("main").map(|c| c.state == ContainerState::Running)) == Some(true)
        });
        let p = pod_of(cri, &name).unwrap();
        let c = |n: &str| p.latest(n).unwrap().clone();
        let ms = |a: i64, b: i64| (b - a) as f64 / 1e6;
        let order = ["i1", "i2", "i3", "i4", "i5", "side"];
        for w in order.windows(2) {
            steps.push(ms(c(w[0]).finished_at_ns, c(w[1]).started_at_ns));
            before_record.push(ms(c(w[0]).finished_at_ns, c(w[1]).created_at_ns));
            runtime_start.push(ms(c(w[1]).created_at_ns, c(w[1]).started_at_ns));
        }
        runtime_start.push(ms(c("main").created_at_ns, c("main").started_at_ns));
        side_main.push(ms(c("side").started_at_ns, c("main").started_at_ns));
        std::fs::remove_file(agent.dir.join("manifests").join(format!("{name}.yaml"))).unwrap();
        gone_from_containerd(cri);
    }
    let Some(out) = out else { return steps };
    let all = steps.clone();
    let max = steps.iter().cloned().fold(0.0, f64::max);
    println!("init chain steps (ms): {steps:?}");
    println!("sidecar to main (ms): {side_main:?}");
    out.insert("init_chain_step_ms", median(&mut steps));
    out.insert("init_chain_step_max_ms", max);
    out.insert("sidecar_to_main_ms", median(&mut side_main));
    println!("exit to the next container's record (ms): {before_record:?}");
    println!("containerd's StartContainer, record to started (ms): {runtime_start:?}");
    out.insert("init_chain_step_to_record_ms", median(&mut before_record));
    out.insert("runtime_start_ms", median(&mut runtime_start));
    all
}

/// The floor of a step with no agent at all: this bench as a bare CRI
/// client, one sandbox, then 10 times CreateContainer of `true` and
/// StartContainer, each call's wall time, the two calls the kubelet or
/// podwarden makes for each init container once the previous one exited.
fn bare_start(cri: &CriRuntime, out: &mut BTreeMap<&'static str, f64>) {
    use podwarden::runtime::{ContainerConfig, LABEL_POD_UID, SandboxConfig};
    let uid = format!("bench-bare-start-{}", std::process::id());
    let labels: BTreeMap<String, String> = [(LABEL_POD_UID.to_string(), uid.clone())].into();
    let sb = SandboxConfig {
        name: "bare-start".into(),
        namespace: "bench".into(),
        uid: uid.clone(),
        host_network: true,
        log_directory: format!("/tmp/podwarden-bench-logs/{uid}"),
        labels: labels.clone(),
        ..Default::default()
    };
    let id = cri.run_sandbox(&call(), &sb).expect("RunPodSandbox");
    let (mut creates, mut times) = (Vec::new(), Vec::new());
    for i in 0..=ROUNDS {
        let cc = ContainerConfig {
            name: format!("c{i}"),
            image: IMAGE.into(),
            command: vec!["true".into()],
            log_path: format!("c{i}/0.log"),
            labels: labels.clone(),
            ..Default::default()
        };
        let t = Instant::now();
        let cid = cri.create_container(&call(), &id, &cc, &sb).expect("CreateContainer");
        let created = t.elapsed();
        cri.start_container(&call(), &cid).expect("StartContainer");
        // the first container of a sandbox: not counted
        if i > 0 {
            creates.push(created.as_secs_f64() * 1000.0);
            times.push((t.elapsed() - created).as_secs_f64() * 1000.0);
        }
    }
    support::remove_raw_pod(cri, &uid);
    println!("CreateContainer by a bare CRI client (ms): {creates:?}");
    println!("StartContainer by a bare CRI client (ms): {times:?}");
    out.insert("bare_create_container_ms", median(&mut creates));
    out.insert("bare_start_container_ms", median(&mut times));
}

fn exit_to_gone(cri: &CriRuntime, out: &mut BTreeMap<&'static str, f64>) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let agent = Agent::start("reactions", &format!("readOnlyPort: {port}\nsyncFrequency: 60s\n"), Stdio::inherit());
    // this bench's own subscription to containerd's events: when each
    // container exited
    let exits: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let cancel = podwarden::base::cancel::CancelToken::new();
    let (e, c) = (exits.clone(), cancel.clone());
    let watcher = podwarden::base::thread::spawn("bench-exits", None, move || {
        let cri = CriRuntime::connect(&format!("unix://{}", socket()), Duration::from_secs(10)).unwrap();
        let _ = cri.watch_events(&c, &mut |n| {
            if let Note::Event(ev) = n
                && ev.kind == Kind::Exited
            {
                e.lock().push((ev.container_id, Instant::now()));
            }
        });
    })
    .unwrap();
    let get = |path: &str| -> Option<String> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes()).ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        Some(body)
    };
    wait("the agent's HTTP endpoint", Duration::from_secs(20), || get("/healthz").is_some());
    std::thread::sleep(Duration::from_millis(1000));
    let mut gaps = Vec::new();
    for r in 0..ROUNDS {
        let name = format!("quick-{r}");
        write_atomically(&agent.dir, &format!("{name}.yaml"), &simple(&name, RUN));
        wait("running", Duration::from_secs(60), || {
            pod_of(cri, &name).and_then(|p| p.latest("main").map(|c| c.state == ContainerState::Running)) == Some(true)
        });
        let id = pod_of(cri, &name).unwrap().latest("main").unwrap().id.clone();
        std::fs::remove_file(agent.dir.join("manifests").join(format!("{name}.yaml"))).unwrap();
        let quoted = format!("\"{name}\"");
        wait("gone from /pods", Duration::from_secs(30), || get("/pods").is_some_and(|b| !b.contains(&quoted)));
        let gone = Instant::now();
        wait("the exit event", Duration::from_secs(5), || exits.lock().iter().any(|(c, _)| *c == id));
        let exited = exits.lock().iter().find(|(c, _)| *c == id).unwrap().1;
        gaps.push(gone.saturating_duration_since(exited).as_secs_f64() * 1000.0);
        gone_from_containerd(cri);
    }
    cancel.cancel();
    let _ = watcher.join();
    println!("exit to gone (ms): {gaps:?}");
    out.insert("exit_to_gone_ms", median(&mut gaps));
}

/// podwarden's CPU (cores) over 60 s and its RSS (KiB) with 110 running pods.
fn many(cri: &CriRuntime, extra: &str) -> (f64, f64) {
    let agent = Agent::start("reactions", &format!("readOnlyPort: 0\n{extra}"), Stdio::inherit());
    std::thread::sleep(Duration::from_millis(700));
    for i in 0..MANY {
        let name = format!("many-{i}");
        write_atomically(&agent.dir, &format!("{name}.yaml"), &simple(&name, RUN));
    }
    wait("110 pods running", Duration::from_secs(300), || {
        cri.list_pods(&call())
            .unwrap()
            .iter()
            .filter(|p| p.namespace == "bench" && p.containers.iter().any(|c| c.state == ContainerState::Running))
            .count()
            == MANY
    });
    std::thread::sleep(Duration::from_secs(15));
    // 60 s of the scheduler's own count: the agent uses about 0.009
    // cores, and clock ticks over a minute were off by as much as the
    // 0.001 core compared
    let meter = support::CpuMeter::attach(agent.pid());
    let (t0, c0) = (Instant::now(), meter.seconds());
    std::thread::sleep(Duration::from_secs(60));
    let cores = (meter.seconds() - c0) / t0.elapsed().as_secs_f64();
    println!("CPU counted by {}", meter.how());
    drop(meter);
    let rss = proc_status(agent.pid(), "VmRSS:") as f64;
    remove_manifests(&agent);
    gone_from_containerd(cri);
    (cores, rss)
}

fn main() {
    let cri = CriRuntime::connect(&format!("unix://{}", socket()), Duration::from_secs(10)).unwrap();
    let mut out = BTreeMap::new();
    bare_start(&cri, &mut out);
    init_chain(&cri, &mut out);
    relist_init_chain(&cri, &mut out);
    exit_to_gone(&cri, &mut out);
    let (events_cpu, rss) = many(&cri, "");
    let (relist_cpu, _) = many(&cri, "runtimeEvents: false\n");
    println!("110 pods: {events_cpu:.4} cores with events, {relist_cpu:.4} with the relist alone; RSS {rss} KiB");
    out.insert("events_cpu_core_110", events_cpu);
    out.insert("relist_cpu_core_110", relist_cpu);
    out.insert("rss_kib_110", rss);
    support::print_json(&out, 4);
}

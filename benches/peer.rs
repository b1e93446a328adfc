//! Bench `peer` (issue 41): the real kubelet and podwarden, each alone in
//! turn on the same private containerd, with the same pods, in rounds that
//! alternate which goes first. Every ratio is podwarden ÷ kubelet over the
//! medians of the rounds, and each key's raw figures are printed beside it.
//!
//! Both agents run at their defaults where a default decides a figure: the
//! kubelet watches the manifest directory with inotify and rereads it every
//! 20 s (`fileCheckFrequency`), syncs every 60 s (`syncFrequency`) and
//! relists every second (its generic PLEG); podwarden watches with inotify,
//! rereads every 20 s, syncs every 60 s and takes the runtime's events.
//! Every pod's process exits on SIGTERM, so no grace period decides a
//! figure.
//!
//! Beside the keys, each idle window also counts how often the
//! agent wakes (the context switches of all its threads a second, as bench
//! `footprint` counts them) and its CPU: `wakeups_ratio_0` and
//! `cpu_ratio_0` over 30 s with no pod, `wakeups_ratio_110` over the 60 s
//! of `cpu_ratio_110`.
//!
//! After each round the runtime's own floor under `remove30`: the same 30
//! pods made and stopped by this bench through the CRI, a thread a pod
//! (`remove30_ms_cri_floor`, and `remove30_floor_to_kubelet_ratio`: no
//! agent's `remove30_ratio` can be lower).
//!
//! Then the same rounds with both agents joined to the real control plane
//! (`benches/peer/cluster.rs`): `status_lag_ratio` (a container started →
//! the API shows its pod Running), `exec_via_apiserver_ratio` (`kubectl
//! exec` through the API server), and the joined agent's RSS.
//!
//! `PODWARDEN_PEER_ROUNDS` (default 2) sets the rounds;
//! `PODWARDEN_PEER_PODS` (default 110) the pods of the idle figures;
//! `PODWARDEN_PEER_CLUSTER=0` leaves the joined rounds out.

#[path = "support/mod.rs"]
mod support;

#[path = "peer/mod.rs"]
mod peer;

#[path = "peer/cluster.rs"]
mod joined;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use podwarden::runtime::cri::CriRuntime;
use podwarden::runtime::{ContainerState, Runtime, RuntimePod};

use peer::{Kind, Side};
use support::{call, now_ns, socket};

const NS: &str = "peer";
const IDLE: &str = "trap 'exit 0' TERM; sleep 1000000 & wait";

fn pod_yaml(name: &str, init: &str, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n  terminationGracePeriodSeconds: 5\n{init}  containers:\n  - name: main\n    image: {}\n    imagePullPolicy: Never\n    command: [sh, -c, \"{command}\"]\n",
        support::IMAGE
    )
}

fn cri() -> CriRuntime {
    CriRuntime::connect(&format!("unix://{}", socket()), Duration::from_secs(5)).expect("connect to the e2e containerd")
}

/// The pods of namespace [`NS`] whose name starts with `prefix`, as the
/// runtime holds them (with the containers' times).
fn runtime_pods(cri: &CriRuntime, prefix: &str) -> Vec<RuntimePod> {
    cri.list_pods(&call())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.namespace == NS && p.name.starts_with(prefix))
        .filter_map(|p| cri.pod_status(&call(), &p.uid).ok())
        .collect()
}

/// How many pods of namespace [`NS`] named `prefix…` have their main
/// container running, from the (cheap) list.
fn running(cri: &CriRuntime, prefix: &str) -> usize {
    cri.list_pods(&call())
        .unwrap_or_default()
        .iter()
        .filter(|p| p.namespace == NS && p.name.starts_with(prefix))
        .filter(|p| p.containers.iter().any(|c| c.name == "main" && c.state == ContainerState::Running))
        .count()
}

fn running_main(p: &RuntimePod) -> Option<i64> {
    p.containers.iter().find(|c| c.name == "main" && c.state == ContainerState::Running).map(|c| c.started_at_ns)
}

fn wait_until<T>(what: &str, side: &Side, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "{}: {what} not within {timeout:?}:\n{}", side.kind.name(), side.log_tail(30));
        // not faster: containerd 1.6.20 was seen to crash on a list
        // beside many sandboxes being made (a map iterated and written)
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// No pod of namespace [`NS`] named `prefix…` has a ready sandbox or a
/// running container.
fn all_stopped(cri: &CriRuntime, prefix: &str) -> bool {
    !cri.list_pods(&call())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.namespace == NS && p.name.starts_with(prefix))
        .any(|p| p.sandboxes.iter().any(|s| s.ready) || p.containers.iter().any(|c| c.state == ContainerState::Running))
}

/// The runtime's own floor under `remove30`: 30 pods of the same kind (the
/// pod network, the same image and command) made by this bench through the
/// CRI, then each stopped by a thread of its own as soon as they all run
/// (StopContainer with the same 5 s grace, then StopPodSandbox: what any
/// agent must ask at the least), until no sandbox is ready and no
/// container runs. No agent runs meanwhile.
fn remove30_floor() -> f64 {
    use podwarden::runtime::{ContainerConfig, LABEL_POD_UID, SandboxConfig};
    peer::clear_runtime();
    let cri = cri();
    let pods: Vec<(String, String)> = std::thread::scope(|sc| {
        let made: Vec<_> = (0..30)
            .map(|i| {
                let cri = &cri;
                sc.spawn(move || {
                    let (name, uid) = (format!("f{i:02}"), format!("peer-floor-{i:02}"));
                    let labels = BTreeMap::from([(LABEL_POD_UID.to_string(), uid.clone())]);
                    let sb = SandboxConfig {
                        name: name.clone(),
                        namespace: NS.into(),
                        uid: uid.clone(),
                        log_directory: format!("/tmp/podwarden-bench-logs/{uid}"),
                        labels: labels.clone(),
                        ..Default::default()
                    };
                    let id = cri.run_sandbox(&call(), &sb).expect("RunPodSandbox");
                    let cc = ContainerConfig {
                        name: "main".into(),
                        image: support::IMAGE.into(),
                        command: vec!["sh".into(), "-c".into(), IDLE.into()],
                        log_path: "main/0.log".into(),
                        labels,
                        ..Default::default()
                    };
                    let cid = cri.create_container(&call(), &id, &cc, &sb).expect("CreateContainer");
                    cri.start_container(&call(), &cid).expect("StartContainer");
                    (id, cid)
                })
            })
            .collect();
        made.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let t0 = Instant::now();
    std::thread::scope(|sc| {
        for (sandbox, container) in &pods {
            let cri = &cri;
            sc.spawn(move || {
                cri.stop_container(&call(), container, Duration::from_secs(5)).expect("StopContainer");
                cri.stop_sandbox(&call(), sandbox).expect("StopPodSandbox");
            });
        }
    });
    let end = Instant::now() + Duration::from_secs(60);
    while !all_stopped(&cri, "f") {
        assert!(Instant::now() < end, "the floor's 30 pods not stopped within 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = t0.elapsed().as_secs_f64() * 1e3;
    peer::clear_runtime();
    took
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((p / 100.0) * (v.len() as f64 - 1.0)).round() as usize;
    v[i.min(v.len() - 1)]
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    percentile(&mut v, 50.0)
}

fn rss_kib(pid: u32) -> f64 {
    support::proc_status(pid, "VmRSS:") as f64
}

/// How often `pid` wakes (its threads' context switches a second) and the
/// share of a core it uses, over `window` of sleep here.
fn idle_window(pid: u32, window: Duration) -> (f64, f64) {
    let (w0, c0, t0) = (support::thread_switches(pid), support::cpu_ms(pid), Instant::now());
    std::thread::sleep(window);
    let secs = t0.elapsed().as_secs_f64();
    let wakeups = support::wakeups_per_s(&w0, &support::thread_switches(pid), secs).0;
    (wakeups, (support::cpu_ms(pid) - c0) / (secs * 1e3))
}

/// One side's figures of one round.
fn round(kind: Kind, pods_idle: usize) -> BTreeMap<&'static str, f64> {
    let mut out = BTreeMap::new();
    peer::clear_runtime();
    peer::prepare(&[]);
    let side = Side::start(kind);
    let pid = side.child.id();
    let cri = cri();
    let m = peer::manifests();

    // idle with no pod: settled for 10 s, then 30 s of wake-ups and CPU
    std::thread::sleep(Duration::from_secs(10));
    out.insert("rss_kib_0", rss_kib(pid));
    let (wakeups, cpu) = idle_window(pid, Duration::from_secs(30));
    out.insert("wakeups_per_s_0", wakeups);
    out.insert("cpu_core_0", cpu);

    // 30 manifests written at once → every container running
    let t0 = now_ns();
    for i in 0..30 {
        std::fs::write(m.join(format!("s{i:02}.yaml")), pod_yaml(&format!("s{i:02}"), "", IDLE)).unwrap();
    }
    // the list is cheap; each pod's status (its start time) is read once
    // every container runs, so the polling loads neither agent
    wait_until("30 pods running", &side, Duration::from_secs(300), || (running(&cri, "s") == 30).then_some(()));
    let starts: Vec<f64> =
        runtime_pods(&cri, "s").iter().filter_map(running_main).map(|t| (t - t0) as f64 / 1e6).collect();
    assert_eq!(starts.len(), 30, "{}: the 30 pods' start times", side.kind.name());
    let (mut a, mut b) = (starts.clone(), starts);
    out.insert("start30_p50_ms", percentile(&mut a, 50.0));
    out.insert("start30_p99_ms", percentile(&mut b, 99.0));

    // 30 manifests removed → every sandbox stopped (or removed)
    let t0 = Instant::now();
    for i in 0..30 {
        std::fs::remove_file(m.join(format!("s{i:02}.yaml"))).unwrap();
    }
    wait_until("30 pods stopped", &side, Duration::from_secs(300), || all_stopped(&cri, "s").then_some(()));
    out.insert("remove30_ms", t0.elapsed().as_secs_f64() * 1e3);

    // one init container exits → the next starts
    let init = format!(
        "  initContainers:\n  - {{name: one, image: {0}, imagePullPolicy: Never, command: [sh, -c, 'sleep 1']}}\n  - {{name: two, image: {0}, imagePullPolicy: Never, command: [sh, -c, 'true']}}\n",
        support::IMAGE
    );
    std::fs::write(m.join("init.yaml"), pod_yaml("init", &init, IDLE)).unwrap();
    let step = wait_until("the init step", &side, Duration::from_secs(120), || {
        let p = runtime_pods(&cri, "init").into_iter().next()?;
        let one = p.containers.iter().find(|c| c.name == "one" && c.finished_at_ns > 0)?;
        let two = p.containers.iter().find(|c| c.name == "two" && c.started_at_ns > 0)?;
        Some((two.started_at_ns - one.finished_at_ns) as f64 / 1e6)
    });
    out.insert("init_step_ms", step);
    std::fs::remove_file(m.join("init.yaml")).unwrap();

    // a container exits 1 → it runs again (the first restart)
    std::fs::write(m.join("crash.yaml"), pod_yaml("crash", "", "sleep 1; exit 1")).unwrap();
    let restart = wait_until("the first restart", &side, Duration::from_secs(120), || {
        let p = runtime_pods(&cri, "crash").into_iter().next()?;
        let first = p.containers.iter().find(|c| c.name == "main" && c.attempt == 0 && c.finished_at_ns > 0)?;
        let again = p.containers.iter().find(|c| c.name == "main" && c.attempt == 1 && c.started_at_ns > 0)?;
        Some((again.started_at_ns - first.finished_at_ns) as f64 / 1e6)
    });
    out.insert("crash_restart_ms", restart);
    std::fs::remove_file(m.join("crash.yaml")).unwrap();
    wait_until("the init and crash pods stopped", &side, Duration::from_secs(120), || {
        let live = cri
            .list_pods(&call())
            .unwrap_or_default()
            .into_iter()
            .any(|p| p.containers.iter().any(|c| c.state == ContainerState::Running));
        (!live).then_some(())
    });

    // idle with `pods_idle` pods, once the agent shows none of the others:
    // a removed pod counts for admission until it has finished (both
    // agents), and 110 is both agents' maxPods
    wait_until("the agent holding no pod", &side, Duration::from_secs(180), || {
        let busy = cri.list_pods(&call()).unwrap_or_default().iter().any(|p| p.sandboxes.iter().any(|s| s.ready));
        (side.pods().is_empty() && !busy).then_some(())
    });
    // and the workers' clean-up after the sandbox's stop
    std::thread::sleep(Duration::from_secs(5));
    for i in 0..pods_idle {
        std::fs::write(m.join(format!("i{i:03}.yaml")), pod_yaml(&format!("i{i:03}"), "", IDLE)).unwrap();
    }
    wait_until("the idle pods running", &side, Duration::from_secs(900), || {
        (running(&cri, "i") == pods_idle).then_some(())
    });
    std::thread::sleep(Duration::from_secs(20));
    let (wakeups, cpu) = idle_window(pid, Duration::from_secs(60));
    out.insert("cpu_core_110", cpu);
    out.insert("wakeups_per_s_110", wakeups);
    out.insert("rss_kib_110", rss_kib(pid));
    side.stop();
    peer::clear_runtime();
    out
}

fn stripped_size(bin: &Path) -> f64 {
    let tmp = std::env::temp_dir().join(format!("podwarden-peer-strip-{}", std::process::id()));
    std::fs::copy(bin, &tmp).unwrap();
    let _ = std::process::Command::new("strip").arg(&tmp).status();
    let n = std::fs::metadata(&tmp).unwrap().len() as f64;
    let _ = std::fs::remove_file(&tmp);
    n
}

fn main() {
    let rounds: usize = std::env::var("PODWARDEN_PEER_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let pods_idle: usize = std::env::var("PODWARDEN_PEER_PODS").ok().and_then(|v| v.parse().ok()).unwrap_or(110);
    let mut seen: BTreeMap<(Kind, &'static str), Vec<f64>> = BTreeMap::new();
    // both joined to the control plane, in turn, the same rounds (first:
    // they need the control plane up, and fail soonest)
    let joined_rounds = if joined::wanted() { rounds } else { 0 };
    if joined_rounds > 0 {
        let c = joined::control_plane();
        for r in 0..joined_rounds {
            let order = if r % 2 == 0 { [Kind::Kubelet, Kind::Podwarden] } else { [Kind::Podwarden, Kind::Kubelet] };
            for kind in order {
                let fig = joined::round(kind, &c);
                println!("peer: joined round {} {}: {fig:?}", r + 1, kind.name());
                for (k, v) in fig {
                    seen.entry((kind, k)).or_default().push(v);
                }
            }
        }
    }
    let mut floor = Vec::new();
    for r in 0..rounds {
        let order = if r % 2 == 0 { [Kind::Kubelet, Kind::Podwarden] } else { [Kind::Podwarden, Kind::Kubelet] };
        for kind in order {
            let fig = round(kind, pods_idle);
            println!("peer: round {} {}: {fig:?}", r + 1, kind.name());
            for (k, v) in fig {
                seen.entry((kind, k)).or_default().push(v);
            }
        }
        floor.push(remove30_floor());
        println!("peer: round {} the CRI's floor: remove30_ms {:.0}", r + 1, floor[r]);
    }
    let mut out: BTreeMap<&str, f64> = BTreeMap::new();
    let mut keys = vec![
        ("rss_ratio_0", "rss_kib_0"),
        ("rss_ratio_110", "rss_kib_110"),
        ("cpu_ratio_110", "cpu_core_110"),
        ("cpu_ratio_0", "cpu_core_0"),
        ("wakeups_ratio_0", "wakeups_per_s_0"),
        ("wakeups_ratio_110", "wakeups_per_s_110"),
        ("start30_p50_ratio", "start30_p50_ms"),
        ("start30_p99_ratio", "start30_p99_ms"),
        ("remove30_ratio", "remove30_ms"),
        ("init_step_ratio", "init_step_ms"),
        ("crash_restart_ratio", "crash_restart_ms"),
    ];
    if joined_rounds > 0 {
        keys.extend([
            ("status_lag_ratio", "status_lag_ms"),
            ("status_lag_max_ratio", "status_lag_max_ms"),
            ("exec_via_apiserver_ratio", "exec_via_apiserver_ms"),
            ("rss_joined_ratio", "rss_kib_joined"),
        ]);
    }
    for (ratio, fig) in keys {
        let k = median(&seen[&(Kind::Kubelet, fig)]);
        let p = median(&seen[&(Kind::Podwarden, fig)]);
        out.insert(ratio, if k > 0.0 { p / k } else { f64::NAN });
        out.insert(Box::leak(format!("{fig}_kubelet").into_boxed_str()), k);
        out.insert(Box::leak(format!("{fig}_podwarden").into_boxed_str()), p);
    }
    // how far any agent could go: the runtime's own time for the 30
    // stops, against the kubelet's whole
    let floor = median(&floor);
    out.insert("remove30_ms_cri_floor", floor);
    out.insert("remove30_floor_to_kubelet_ratio", floor / median(&seen[&(Kind::Kubelet, "remove30_ms")]));
    let (kb, pb) = (stripped_size(&peer::kubelet_bin()), stripped_size(&peer::podwarden_bin()));
    out.insert("binary_bytes_kubelet", kb);
    out.insert("binary_bytes_podwarden", pb);
    out.insert("binary_bytes_ratio", pb / kb);
    out.insert("rounds", rounds as f64);
    out.insert("joined_rounds", joined_rounds as f64);
    out.insert("pods_idle", pods_idle as f64);
    support::print_json(&out, 4);
}

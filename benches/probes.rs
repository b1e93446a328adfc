//! Probe benchmark (`scripts/bench.sh probes` builds and installs the .deb
//! and prepares the private containerd). The installed `/usr/bin/podwarden`
//! runs 110 host-network pods, each a busybox `httpd` on its own port:
//! first without probes, then (the manifests rewritten) each with an
//! `httpGet` readiness and a `tcpSocket` liveness probe every 10 s. For both
//! it samples RSS and threads every second and its CPU time over a window
//! (30 s, `PROBES_WINDOW_S`). Then:
//! - `readiness_flip_ms`: pod 0's page (a hostPath file) is removed and
//!   `/pods` polled until its Ready condition is False; the time, less one
//!   period (the most a failure can wait for the next probe), max over 3;
//! - `kill_with_hung_probe_ms`: a pod whose exec liveness probe hangs (in
//!   flight for 30 s) and the same pod without the probe are deleted; the
//!   extra time to their last container's exit, median over 3.
//!
//! The last line is one JSON object.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use podwarden::runtime::cri::CriRuntime;
use podwarden::runtime::{CallCtx, ContainerState, Runtime};

mod support;
use support::{Agent, IMAGE, cpu_ticks, proc_status, socket, write_atomically};

const PODS: usize = 110;
const BASE_PORT: u16 = 21000;
const PERIOD: Duration = Duration::from_secs(10);

fn window() -> Duration {
    Duration::from_secs(std::env::var("PROBES_WINDOW_S").ok().and_then(|s| s.parse().ok()).unwrap_or(30))
}

/// RSS median (KiB), threads max, CPU (cores) over the window.
fn sample(pid: u32) -> (u64, u64, f64) {
    let hz = podwarden::sys::clock_ticks_per_second() as f64;
    let t0 = Instant::now();
    let c0 = cpu_ticks(pid);
    let (mut rss, mut threads) = (Vec::new(), 0);
    while t0.elapsed() < window() {
        std::thread::sleep(Duration::from_secs(1));
        rss.push(proc_status(pid, "VmRSS:"));
        threads = threads.max(proc_status(pid, "Threads:"));
    }
    let cpu = (cpu_ticks(pid) - c0) as f64 / hz / t0.elapsed().as_secs_f64();
    rss.sort();
    (rss[rss.len() / 2], threads, cpu)
}

/// Pod `i`: httpd on its own port serving `www` (pod 0: a hostPath the
/// bench controls), with or without the two probes.
fn manifest(i: usize, probes: bool, dir: &Path) -> String {
    let port = BASE_PORT + i as u16;
    let (www, volume) = if i == 0 {
        (
            "/www".to_string(),
            format!(
                "    volumeMounts: [{{name: www, mountPath: /www}}]\n  volumes:\n  - {{name: www, hostPath: {{path: {}}}}}\n",
                dir.join("www0").display()
            ),
        )
    } else {
        ("/tmp/www".to_string(), String::new())
    };
    let probe_yaml = if probes {
        format!(
            "    readinessProbe:\n      httpGet: {{path: /index.html, port: {port}}}\n      periodSeconds: 10\n      failureThreshold: 1\n    livenessProbe:\n      tcpSocket: {{port: {port}}}\n      periodSeconds: 10\n"
        )
    } else {
        String::new()
    };
    let script = format!(
        "mkdir -p {www}; [ -f {www}/index.html ] || echo ok > {www}/index.html; trap 'exit 0' TERM; httpd -f -p {port} -h {www} & while :; do sleep 60 & wait; done"
    );
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p-{i}\n  namespace: bench\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 5\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", {script:?}]\n{probe_yaml}{volume}"
    )
}

/// A pod for the kill measurement: traps SIGTERM and exits at once; with
/// `hung`, an exec liveness probe that never answers within its 30 s.
fn kill_manifest(name: &str, hung: bool) -> String {
    let probe = if hung {
        "    livenessProbe:\n      exec: {command: [sleep, \"3600\"]}\n      periodSeconds: 1\n      timeoutSeconds: 30\n"
    } else {
        ""
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: bench\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 5\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while :; do sleep 1; done\"]\n{probe}"
    )
}

fn running_named(cri: &CriRuntime, prefix: &str) -> usize {
    cri.list_pods(&CallCtx::background(Duration::from_secs(30)))
        .unwrap_or_default()
        .iter()
        .filter(|p| p.name.starts_with(prefix))
        .filter(|p| p.containers.iter().any(|c| c.state == ContainerState::Running))
        .count()
}

/// Wait until containerd holds no pod whose name starts with `prefix`
/// (sandboxes included); whether that happened within `timeout`.
fn all_gone(cri: &CriRuntime, prefix: &str, timeout: Duration) -> bool {
    let t = Instant::now();
    loop {
        let pods = cri.list_pods(&CallCtx::background(Duration::from_secs(30))).unwrap_or_default();
        if !pods.iter().any(|p| p.name.starts_with(prefix)) {
            return true;
        }
        if t.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn pods_json(addr: SocketAddr) -> serde_json::Value {
    support::http::get(addr, "/pods", Duration::from_secs(5))
        .and_then(|(_, body)| serde_json::from_str(&body).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// Pod name -> Ready condition status (pods with a readiness probe; the
/// others count as not ready).
fn readiness(addr: SocketAddr) -> BTreeMap<String, bool> {
    let v = pods_json(addr);
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let probed = p["spec"]["containers"][0]["readinessProbe"].is_object();
            let ready = probed
                && p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True");
            (p["metadata"]["name"].as_str().unwrap_or("").to_string(), ready)
        })
        .collect()
}

fn main() {
    let cri = CriRuntime::connect(&format!("unix://{}", socket()), Duration::from_secs(10)).unwrap();
    let port = 10900 + (std::process::id() % 50) as u16;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let agent =
        Agent::start("probes", &format!("maxPods: 120\nreadOnlyPort: {port}\naddress: 127.0.0.1\n"), Stdio::null());
    let (dir, pid) = (agent.dir.clone(), agent.pid());
    std::fs::create_dir_all(dir.join("www0")).unwrap();
    std::fs::write(dir.join("www0/index.html"), "ok\n").unwrap();

    // 110 pods without probes
    for i in 0..PODS {
        write_atomically(&dir, &format!("p-{i}.yaml"), &manifest(i, false, &dir));
    }
    let t = Instant::now();
    while running_named(&cri, "p-") < PODS {
        assert!(t.elapsed() < Duration::from_secs(300), "only {} of {PODS} pods running", running_named(&cri, "p-"));
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(10));
    let (rss_plain, threads_plain, cpu_plain) = sample(pid);
    println!(
        "{PODS} pods without probes: RSS {rss_plain} KiB, {threads_plain} threads, {:.3} % of one core",
        cpu_plain * 100.0
    );

    // the same pods with an httpGet readiness and a tcpSocket liveness
    // probe; the old ones go first (admission counts a pod until it is
    // gone: 220 would not fit in maxPods 110)
    for i in 0..PODS {
        std::fs::remove_file(dir.join("manifests").join(format!("p-{i}.yaml"))).unwrap();
    }
    assert!(all_gone(&cri, "p-", Duration::from_secs(120)), "the pods without probes are not gone");
    std::thread::sleep(Duration::from_secs(3));
    for i in 0..PODS {
        write_atomically(&dir, &format!("p-{i}.yaml"), &manifest(i, true, &dir));
    }
    let t = Instant::now();
    loop {
        let r = readiness(addr);
        let probed = (0..PODS).filter(|i| r.get(&format!("p-{i}")) == Some(&true)).count();
        if probed == PODS && running_named(&cri, "p-") == PODS {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(300), "only {probed} of {PODS} probed pods ready");
        std::thread::sleep(Duration::from_millis(500));
    }
    let ready_all_s = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(10));
    let (rss, threads, cpu) = sample(pid);
    println!(
        "{PODS} pods with 2 probes each (all ready after {ready_all_s:.1} s): RSS {rss} KiB, {threads} threads, {:.3} % of one core",
        cpu * 100.0
    );

    // readiness flip: the page goes, Ready goes False
    let mut flips = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        std::fs::remove_file(dir.join("www0/index.html")).unwrap();
        while readiness(addr).get("p-0") != Some(&false) {
            assert!(t.elapsed() < Duration::from_secs(30), "p-0 still Ready 30 s after its page went");
            std::thread::sleep(Duration::from_millis(5));
        }
        flips.push(t.elapsed().as_secs_f64() * 1000.0 - PERIOD.as_secs_f64() * 1000.0);
        std::fs::write(dir.join("www0/index.html"), "ok\n").unwrap();
        let t = Instant::now();
        while readiness(addr).get("p-0") != Some(&true) {
            assert!(t.elapsed() < Duration::from_secs(30), "p-0 not Ready again");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let flip_max = flips.iter().cloned().fold(f64::MIN, f64::max);
    println!("readiness flip (less one period) over 3: {flips:.0?} ms");

    // a kill while an exec probe hangs, against the same pod without it
    let kill_time = |name: &str, hung: bool| {
        write_atomically(&dir, &format!("{name}.yaml"), &kill_manifest(name, hung));
        let t = Instant::now();
        while running_named(&cri, name) < 1 {
            assert!(t.elapsed() < Duration::from_secs(60), "{name} not running");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_secs(3)); // a probe is in flight by now
        let t = Instant::now();
        std::fs::remove_file(dir.join("manifests").join(format!("{name}.yaml"))).unwrap();
        while running_named(&cri, name) > 0 {
            assert!(t.elapsed() < Duration::from_secs(60), "{name} still running");
            std::thread::sleep(Duration::from_millis(2));
        }
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        // its sandbox gone too before the next round
        all_gone(&cri, name, Duration::from_secs(30));
        ms
    };
    let mut extra = Vec::new();
    for round in 0..3 {
        let plain = kill_time(&format!("kplain-{round}"), false);
        let hung = kill_time(&format!("khung-{round}"), true);
        extra.push(hung - plain);
        println!("delete: {plain:.0} ms without a probe, {hung:.0} ms with a hung exec probe");
    }
    extra.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let kill_extra = extra[1];

    for e in std::fs::read_dir(dir.join("manifests")).unwrap().flatten() {
        std::fs::remove_file(e.path()).unwrap();
    }
    all_gone(&cri, "p-", Duration::from_secs(120));
    drop(agent);

    let mut out: BTreeMap<&str, f64> = BTreeMap::new();
    out.insert("pods", PODS as f64);
    out.insert("window_s", window().as_secs() as f64);
    out.insert("all_ready_s", ready_all_s);
    out.insert("cpu_core_110_no_probes", cpu_plain);
    out.insert("rss_kib_110_no_probes", rss_plain as f64);
    out.insert("threads_110_no_probes", threads_plain as f64);
    out.insert("cpu_core_110_probes", cpu);
    out.insert("rss_kib_110_probes", rss as f64);
    out.insert("threads_110_probes", threads as f64);
    out.insert("cpu_over_target_ratio", cpu / 0.01);
    out.insert("rss_over_target_ratio", rss as f64 / 16384.0);
    out.insert("threads_over_no_probes", threads as f64 - threads_plain as f64);
    out.insert("readiness_flip_ms", flip_max);
    out.insert("readiness_flip_over_target_ratio", flip_max.max(0.0) / 200.0);
    out.insert("kill_with_hung_probe_ms", kill_extra);
    out.insert("kill_with_hung_probe_over_target_ratio", kill_extra.max(0.0) / 100.0);
    support::print_json(&out, 4);
}

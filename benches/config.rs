//! ConfigMap benchmark (`scripts/bench.sh config` builds and installs the
//! .deb and prepares the private containerd): the installed
//! `/usr/bin/podwarden` runs 110 pods, each mounting its own ConfigMap and
//! Secret (extra documents in the pod's file); RSS is sampled every second
//! over a window (60 s, `CONFIG_WINDOW_S`); then one pod's ConfigMap is
//! edited 20 times (the file replaced atomically, as editors and `apply`
//! write) and the time from each edit to the new content in the pod's
//! mounted file (the volume directory the container's mount shows) is
//! measured. The last line is one JSON object.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use podwarden::runtime::cri::CriRuntime;
use podwarden::runtime::{CallCtx, ContainerState, Runtime};

mod support;
use support::{Agent, IMAGE, proc_status, socket, write_atomically};

const PODS: usize = 110;
const EDITS: usize = 20;
const TARGET_MS: f64 = 2000.0;
const TARGET_RSS_KIB: f64 = 16384.0;

fn window() -> Duration {
    Duration::from_secs(std::env::var("CONFIG_WINDOW_S").ok().and_then(|s| s.parse().ok()).unwrap_or(60))
}

/// Pod `name` with its ConfigMap (`value` under key `app.conf`) and Secret.
fn manifest(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: bench\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 5\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while :; do sleep 60 & wait; done\"]\n    volumeMounts:\n    - {{name: config, mountPath: /etc/app}}\n    - {{name: creds, mountPath: /run/creds}}\n  volumes:\n  - {{name: config, configMap: {{name: {name}-config}}}}\n  - {{name: creds, secret: {{secretName: {name}-creds}}}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}-config, namespace: bench}}\ndata:\n  app.conf: \"{value}\"\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: {name}-creds, namespace: bench}}\nstringData: {{token: bench-token-{name}}}\n"
    )
}

fn running(cri: &CriRuntime) -> usize {
    cri.list_pods(&CallCtx::background(Duration::from_secs(30)))
        .unwrap_or_default()
        .iter()
        .filter(|p| p.name.starts_with("cm-"))
        .filter(|p| p.containers.iter().any(|c| c.state == ContainerState::Running))
        .count()
}

fn main() {
    let cri = CriRuntime::connect(&format!("unix://{}", socket()), Duration::from_secs(10)).unwrap();
    let agent = Agent::start("config", "readOnlyPort: 0\n", Stdio::inherit());
    let (dir, pid) = (agent.dir.clone(), agent.pid());
    for i in 0..PODS {
        write_atomically(&dir, &format!("cm-{i}.yaml"), &manifest(&format!("cm-{i}"), "v=start"));
    }
    let t = Instant::now();
    while running(&cri) < PODS {
        assert!(t.elapsed() < Duration::from_secs(300), "only {} of {PODS} pods running after 300 s", running(&cri));
        std::thread::sleep(Duration::from_millis(500));
    }
    let start_all_s = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(10)); // let the start-up work settle
    let t0 = Instant::now();
    let mut rss = Vec::new();
    while t0.elapsed() < window() {
        std::thread::sleep(Duration::from_secs(1));
        rss.push(proc_status(pid, "VmRSS:"));
    }
    rss.sort();
    let (rss_median, rss_max) = (rss[rss.len() / 2], *rss.last().unwrap());
    println!(
        "{PODS} pods with a ConfigMap and a Secret each (running after {start_all_s:.1} s): RSS {rss_median} KiB (max {rss_max})"
    );

    // the mounted file of pod cm-0's ConfigMap, found by its volume's path
    let pods = dir.join("root/pods");
    let file = std::fs::read_dir(&pods)
        .unwrap()
        .flatten()
        .map(|e| e.path().join("volumes/kubernetes.io~configmap/config/app.conf"))
        .find(|f| {
            std::fs::read_to_string(f).is_ok_and(|s| s == "v=start") && {
                // the pod whose file is cm-0: its Secret names it
                let creds =
                    f.parent().unwrap().parent().unwrap().parent().unwrap().join("kubernetes.io~secret/creds/token");
                std::fs::read_to_string(creds).is_ok_and(|s| s == "bench-token-cm-0")
            }
        })
        .expect("cm-0's mounted ConfigMap file");
    let mut ms = Vec::new();
    for i in 0..EDITS {
        let want = format!("v={i}");
        let t = Instant::now();
        write_atomically(&dir, "cm-0.yaml", &manifest("cm-0", &want));
        while std::fs::read_to_string(&file).map_or(true, |s| s != want) {
            assert!(t.elapsed() < Duration::from_secs(30), "edit {i} not in the mounted file after 30 s");
            std::thread::sleep(Duration::from_millis(1));
        }
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(300));
    }
    let mut sorted = ms.clone();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let (median, max) = (sorted[sorted.len() / 2], *sorted.last().unwrap());
    println!("ConfigMap edit to mounted file over {EDITS} edits: median {median:.1} ms, max {max:.1} ms");

    for e in std::fs::read_dir(dir.join("manifests")).unwrap().flatten() {
        std::fs::remove_file(e.path()).unwrap();
    }
    let t = Instant::now();
    while cri
        .list_pods(&CallCtx::background(Duration::from_secs(30)))
        .unwrap_or_default()
        .iter()
        .any(|p| p.name.starts_with("cm-"))
        && t.elapsed() < Duration::from_secs(120)
    {
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(agent);

    let mut out: BTreeMap<&str, f64> = BTreeMap::new();
    out.insert("pods", PODS as f64);
    out.insert("edits", EDITS as f64);
    out.insert("window_s", window().as_secs() as f64);
    out.insert("all_running_s", start_all_s);
    out.insert("configmap_edit_to_file_ms_median", median);
    out.insert("configmap_edit_to_file_ms_max", max);
    out.insert("configmap_edit_median_over_target_ratio", median / TARGET_MS);
    out.insert("configmap_edit_max_over_target_ratio", max / TARGET_MS);
    out.insert("rss_kib_110_pods_with_configmaps", rss_median as f64);
    out.insert("rss_kib_110_pods_with_configmaps_max", rss_max as f64);
    out.insert("rss_kib_110_over_target_ratio", rss_max as f64 / TARGET_RSS_KIB);
    support::print_json(&out, 4);
}

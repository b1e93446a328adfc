//! The real reboot of a cluster node while its control plane is away: the
//! Debian 12 VM (systemd, Debian's containerd) joins the control plane of
//! `scripts/cluster-env.sh` on the host with `podwarden join`, through the
//! one way out `scripts/vm-env.sh` opens (`VM_API_FORWARD`: the guest's
//! `kubernetes:6443` is carried to the VM's partitionable port on the
//! host's loopback; nothing leaves this machine). Pods bound to it by the
//! API (one with a Secret volume and its service account token) and a
//! static pod run; the link is cut (every packet of that port dropped: to
//! the node the control plane is gone, silent); the machine reboots. After
//! the boot the API's pods and the static pod run again from the node's
//! record (handed over before the first API call fails, running within
//! 60 s of podwarden's start under emulation), the node says so in its log;
//! the link back, the node is Ready in the API with a `StartedFromRecord`
//! condition, the API shows the containers the node started offline, and
//! nothing is started again because the link came back.
//!
//! The control plane keeps running for the other tests (the host's nodes
//! use other ports): for the guest, a port whose packets are all dropped is
//! a control plane that is away, and a harder one than a stopped server
//! (whose port would refuse at once).
//!
//! Needs what tests/vm.rs needs and the control plane (`scripts/cluster-env.sh
//! up`); scripts/test.sh prepares both.

mod guest;

use guest::*;
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

const NODE: &str = "pw-vm";
const NS: &str = "pw-vm";

struct ControlPlane {
    admin: String,
    token: String,
    ca_hash: String,
    vm_port: String,
}

fn control_plane() -> ControlPlane {
    let script = root().join("scripts/cluster-env.sh");
    let out = Command::new(&script).arg("env").output().expect("run scripts/cluster-env.sh env");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let var = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("PODWARDEN_CLUSTER_{k}=")))
            .map(str::to_string)
            .unwrap_or_else(|| {
                panic!(
                    "no control plane (`scripts/cluster-env.sh env` prints no PODWARDEN_CLUSTER_{k}: {}): prepare it \
                     with `sudo scripts/cluster-env.sh up` (scripts/test.sh does this before the tests)",
                    String::from_utf8_lossy(&out.stderr).trim()
                )
            })
    };
    let cp = ControlPlane {
        admin: var("ADMIN_KUBECONFIG"),
        token: var("TOKEN"),
        ca_hash: var("CA_HASH"),
        vm_port: var("VM_PARTITION_PORT"),
    };
    let (code, _, err) = kubectl(&cp, &["get", "--raw", "/readyz"]);
    assert!(
        code == 0,
        "the test control plane is not running ({err}): prepare it with `sudo scripts/cluster-env.sh up` \
         (scripts/test.sh does this before the tests)"
    );
    cp
}

/// The real kubectl 1.33: in /usr/lib/google-cloud-sdk/bin or on PATH.
fn kubectl_bin() -> PathBuf {
    let mut places = vec![PathBuf::from("/usr/lib/google-cloud-sdk/bin/kubectl.1.33")];
    if let Some(path) = std::env::var_os("PATH") {
        places.extend(std::env::split_paths(&path).map(|d| d.join("kubectl.1.33")));
    }
    places.into_iter().find(|p| p.is_file()).expect("kubectl.1.33 is missing (/usr/lib/google-cloud-sdk/bin or PATH)")
}

/// kubectl as the cluster's admin, `input` on its stdin: (exit code,
/// stdout, stderr).
fn kubectl_in(cp: &ControlPlane, args: &[&str], input: &str) -> (i32, String, String) {
    let mut child = Command::new(kubectl_bin())
        .args(["--kubeconfig", &cp.admin, "--request-timeout", "20s"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), s(&out.stdout), s(&out.stderr))
}

fn kubectl(cp: &ControlPlane, args: &[&str]) -> (i32, String, String) {
    kubectl_in(cp, args, "")
}

fn ok(cp: &ControlPlane, args: &[&str]) -> String {
    let (code, out, err) = kubectl(cp, args);
    assert_eq!(code, 0, "kubectl {args:?}: {out}{err}");
    out
}

fn get(cp: &ControlPlane, args: &[&str]) -> Value {
    let out = ok(cp, &[args, &["-o", "json"]].concat());
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("kubectl {args:?}: not JSON ({e}): {out}"))
}

fn apply(cp: &ControlPlane, object: &Value) {
    let (code, out, err) = kubectl_in(cp, &["apply", "-f", "-"], &object.to_string());
    assert_eq!(code, 0, "kubectl apply {object}: {out}{err}");
}

fn condition(node: &Value, kind: &str) -> Option<(String, String)> {
    let c = node["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == kind)?;
    Some((c["status"].as_str()?.to_string(), c["message"].as_str().unwrap_or_default().to_string()))
}

fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < end, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn partition(how: &str) {
    let out = Command::new(root().join("scripts/cluster-env.sh")).args(["partition", how, "vm"]).output().unwrap();
    assert!(out.status.success(), "partition {how} vm: {}", String::from_utf8_lossy(&out.stderr));
}

/// The VM's link healed, its Node and namespace gone, however the test ends.
struct Forget<'a>(&'a ControlPlane);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        partition("heal");
        let _ = kubectl(self.0, &["delete", "namespace", NS, "--ignore-not-found", "--wait=false"]);
        let _ = kubectl(self.0, &["-n", NS, "delete", "pods", "--all", "--force", "--grace-period=0"]);
        let _ = kubectl(self.0, &["delete", "node", NODE, "--ignore-not-found"]);
    }
}

/// A pod that appends `start <uptime> <secret>` to `/var/pw/<name>` each
/// time its container starts, then sleeps until SIGTERM.
fn recording(name: &str, secret: bool) -> Value {
    let pass = if secret { "$(cat /etc/creds/pass)" } else { "-" };
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "volumes": [{"name": "pw", "hostPath": {"path": "/var/pw", "type": "DirectoryOrCreate"}}],
            "containers": [{
                "name": "c", "image": "localhost/busybox:e2e", "imagePullPolicy": "Never",
                "volumeMounts": [{"name": "pw", "mountPath": "/var/pw"}],
                "command": ["sh", "-c", format!(
                    "echo start $(cut -d' ' -f1 /proc/uptime) {pass} >> /var/pw/{name}; \
                     trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done")],
            }],
        },
    });
    if secret {
        pod["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "creds", "secret": {"secretName": "creds"}}));
        pod["spec"]["containers"][0]["volumeMounts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "creds", "mountPath": "/etc/creds"}));
    }
    pod
}

/// The API's pods: bound to the node, tolerating its absence for as long
/// as it lasts (else the taint manager deletes them after 300 s of an
/// unreachable node: the cluster's decision, which would win).
fn api_pod(name: &str, secret: bool) -> Value {
    let mut pod = recording(name, secret);
    pod["metadata"]["namespace"] = json!(NS);
    pod["spec"]["nodeName"] = json!(NODE);
    pod["spec"]["tolerations"] = json!([
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    ]);
    pod
}

/// The `start` moments (seconds since the boot) recorded by pod `name`,
/// with what it read from its Secret.
fn starts(vm: &Vm, name: &str) -> Vec<(f64, String)> {
    vm.sh(&format!("cat /var/pw/{name}"))
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("start ")?.split(' ');
            Some((w.next()?.parse().ok()?, w.next().unwrap_or_default().to_string()))
        })
        .collect()
}

/// Each pod's (namespace/name → container ID) as the node's own API has it.
fn local_ids(vm: &Vm) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = pods(vm)["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let id = p["status"]["containerStatuses"][0]["containerID"].as_str().unwrap_or_default().to_string();
            (
                format!(
                    "{}/{}",
                    p["metadata"]["namespace"].as_str().unwrap_or(""),
                    p["metadata"]["name"].as_str().unwrap_or("")
                ),
                id,
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_node_rebooted_while_its_control_plane_is_away_runs_its_pods_and_catches_up() {
    let _one = ONE_AT_A_TIME.lock();
    let cp = control_plane();
    let _forget = Forget(&cp);
    // what an earlier, interrupted run left
    drop(Forget(&cp));
    wait_for("an earlier run's namespace gone", Duration::from_secs(120), || {
        kubectl(&cp, &["get", "namespace", NS]).0 != 0
    });

    let vm = Vm::up_with("pw-cluster", &[("VM_API_FORWARD", &format!("127.0.0.1:{}", cp.vm_port))]);
    // a resumed VM keeps the clock of the moment its base was saved: the
    // host's time, for the certificates' validity (a reboot reads it from
    // the emulated RTC, which follows the host)
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    vm.sh(&format!("date -u -s @{now} >/dev/null"));
    // a persistent journal, to read the boot that is shut down
    vm.sh("mkdir -p /var/log/journal && systemctl restart systemd-journald");
    vm.sh("echo '10.0.2.100 kubernetes' >> /etc/hosts");
    let local = serde_json::to_string(&recording("local", false)).unwrap();
    install_and_start(&vm, &[&format!("nodeName: {NODE}")], &[("local", &format!("{local}\n"))]);
    let joined = vm.sh(&format!(
        "podwarden join --server https://kubernetes:6443 --token {} --discovery-token-ca-cert-hash {} 2>&1",
        cp.token, cp.ca_hash
    ));
    vm.note(&format!("joined: {}", joined.trim()));
    // cluster-info names the server as the host reaches it; the guest
    // reaches it as `kubernetes` (a name the server's certificate carries)
    vm.sh("sed -i 's#server: https://127.0.0.1:[0-9]*#server: https://kubernetes:6443#' /etc/podwarden/bootstrap-kubeconfig");
    vm.sh(
        "grep -q 'server: https://kubernetes:6443' /etc/podwarden/bootstrap-kubeconfig && systemctl restart podwarden",
    );
    wait_for("the VM's node Ready in the API", Duration::from_secs(240), || {
        let (code, out, _) = kubectl(&cp, &["get", "node", NODE, "-o", "json"]);
        code == 0
            && serde_json::from_str::<Value>(&out)
                .ok()
                .and_then(|n| condition(&n, "Ready"))
                .is_some_and(|(s, _)| s == "True")
    });
    vm.note("the node is Ready in the API");
    // a zone of its own: the node lifecycle controller judges a zone's
    // disruption apart from the host's test nodes (tests/cluster_e2e.rs
    // runs beside this test, partitions its nodes and removes the other
    // nodes of its zone)
    ok(&cp, &["label", "node", NODE, "topology.kubernetes.io/zone=pw-vm", "--overwrite"]);

    ok(&cp, &["create", "namespace", NS]);
    ok(&cp, &["-n", NS, "create", "secret", "generic", "creds", "--from-literal=pass=k33p"]);
    apply(&cp, &api_pod("api-a", true));
    apply(&cp, &api_pod("api-b", false));
    let mirror = format!("local-{NODE}");
    let running_in_api = |cp: &ControlPlane, ns: &str, name: &str| {
        let (code, out, _) = kubectl(cp, &["-n", ns, "get", "pod", name, "-o", "json"]);
        (code == 0).then(|| serde_json::from_str::<Value>(&out).unwrap()).filter(|p| {
            p["status"]["phase"] == "Running"
                && p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
    };
    wait_for("the pods Running and Ready in the API", Duration::from_secs(300), || {
        running_in_api(&cp, NS, "api-a").is_some()
            && running_in_api(&cp, NS, "api-b").is_some()
            && running_in_api(&cp, "default", &mirror).is_some()
    });
    vm.note("the pods run, the API shows them");
    let uids: Vec<String> = ["api-a", "api-b"]
        .iter()
        .map(|n| get(&cp, &["-n", NS, "get", "pod", n])["metadata"]["uid"].as_str().unwrap().to_string())
        .collect();
    vm.wait(
        "the record holds both API pods",
        Duration::from_secs(60),
        &format!(
            "grep -q {} /var/lib/podwarden/cluster/pods.json && grep -q {} /var/lib/podwarden/cluster/pods.json",
            uids[0], uids[1]
        ),
    );
    assert_eq!(vm.sh("stat -c %a /var/lib/podwarden/cluster/objects/secret_pw-vm_creds.json").trim(), "600");

    // the control plane goes away (silent), then the machine reboots
    partition("cut");
    // queued, not waited for: the shutdown may cut the ssh session before
    // a waiting `systemctl reboot` could answer (ssh's status 255)
    vm.sh("systemctl --no-block reboot");
    let down = Command::new(root().join("scripts/vm-env.sh")).args(["wait-down", &vm.name, "180"]).status().unwrap();
    assert!(down.success(), "the VM did not reboot within 180 s");
    let name = vm.name.clone();
    std::mem::forget(vm); // the same machine: its overlay stays
    let vm = Vm::again(&name);
    for (ns, pod) in [(NS, "api-a"), (NS, "api-b"), ("default", "local")] {
        vm.wait(
            &format!("{pod} Running after the boot, the control plane away"),
            Duration::from_secs(240),
            &format!("podwarden get pods -A | grep -E '^{ns} +{pod} +1/1 +Running'"),
        );
    }
    eprintln!(
        "the boot, podwarden and containerd:\n{}",
        vm.sh("journalctl -b 0 -u podwarden -u containerd -o short-monotonic --no-pager | head -n 80")
    );
    // podwarden's start in this boot: systemd's first line of its unit.
    // The first call to the silent API server fails only once it has
    // timed out (11 s after podwarden's start here), which can come after
    // the pods run on a quick boot: the journal is read again until that
    // failure is in it
    let stamp = |v: &Value| v["__MONOTONIC_TIMESTAMP"].as_str().and_then(|s| s.parse::<f64>().ok()).map(|us| us / 1e6);
    let journal_lines = || -> Vec<Value> {
        let journal = vm.sh("journalctl -b 0 -u podwarden -o json --no-pager");
        journal.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    };
    let failure = |v: &&Value| v["MESSAGE"].as_str().is_some_and(|m| m.contains("could not be reached at the start"));
    let mut lines = journal_lines();
    let read_until = Instant::now() + Duration::from_secs(60);
    while !lines.iter().any(|v| failure(&v)) && Instant::now() < read_until {
        std::thread::sleep(Duration::from_secs(1));
        lines = journal_lines();
    }
    let started = lines.first().and_then(stamp).expect("podwarden's unit in this boot's journal");
    let told = lines.iter().find(|v| v["MESSAGE"].as_str().is_some_and(|m| m.contains("from the node's record")));
    let messages: Vec<&str> = lines.iter().filter_map(|v| v["MESSAGE"].as_str()).collect();
    assert!(told.is_some(), "no word of the record in podwarden's log:\n{}", messages.join("\n"));
    // the record's pods go to the workers at once, before the first call
    // to the API server has failed (the rest of the way is containerd's
    // sandboxes under emulation)
    let handed = told.and_then(stamp).unwrap();
    let failed = lines.iter().find(failure).and_then(stamp);
    vm.note(&format!(
        "the record's pods handed over {:.1} s after podwarden's start, the first call failed {:.1} s after it",
        handed - started,
        failed.unwrap_or(f64::NAN) - started
    ));
    assert!(failed.is_some(), "no failed first call in podwarden's log within 60 s:\n{}", messages.join("\n"));
    assert!(failed.is_some_and(|f| handed < f), "the record waited for the API server:\n{}", messages.join("\n"));
    assert!(handed - started < 15.0, "the record's pods were handed over {:.1} s after the start", handed - started);
    for pod in ["api-a", "api-b", "local"] {
        let s = starts(&vm, pod);
        assert_eq!(s.len(), 2, "{pod} started once before the reboot and once after: {s:?}");
        let (at, pass) = &s[1];
        vm.note(&format!(
            "{pod} started {at:.1} s after the boot, {:.1} s after podwarden's start ({started:.1} s)",
            at - started
        ));
        // 30 s of a real machine's boot; here containerd makes the
        // sandboxes under emulation, beside a loaded test lane (11 to 33 s
        // measured), so the bound is 60 s; the agent's own part, the
        // hand-over before the first API call fails, is asserted above
        assert!(*at - started < 60.0, "{pod} ran {:.1} s after podwarden's start", at - started);
        if pod == "api-a" {
            assert_eq!(pass, "k33p", "the recorded Secret is in the volume");
        }
    }
    let offline = local_ids(&vm);
    assert!(offline.iter().all(|(_, id)| !id.is_empty()), "{offline:?}");

    // the control plane back: Ready, the record's start told, the API's
    // statuses those of the containers started offline
    partition("heal");
    let healed = Instant::now();
    wait_for("the node Ready again with a StartedFromRecord condition", Duration::from_secs(180), || {
        let (code, out, err) = kubectl(&cp, &["get", "node", NODE, "-o", "json"]);
        assert!(code == 0, "the Node is gone from the API server: {err}");
        let n: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(n["metadata"]["labels"]["topology.kubernetes.io/zone"], "pw-vm", "the node's labels were lost");
        condition(&n, "Ready").is_some_and(|(s, _)| s == "True")
            && condition(&n, "StartedFromRecord")
                .is_some_and(|(s, m)| s == "True" && m.contains("from the node's record"))
    });
    vm.note(&format!("Ready in the API {:.1} s after the link came back", healed.elapsed().as_secs_f64()));
    for (ns, pod) in [(NS, "api-a"), (NS, "api-b"), ("default", "local")] {
        let api_name = if pod == "local" { mirror.clone() } else { pod.to_string() };
        let want = offline.iter().find(|(k, _)| *k == format!("{ns}/{pod}")).map(|(_, id)| id.clone()).unwrap();
        wait_for(&format!("{ns}/{api_name}'s status caught up"), Duration::from_secs(120), || {
            running_in_api(&cp, ns, &api_name)
                .is_some_and(|p| p["status"]["containerStatuses"][0]["containerID"].as_str() == Some(want.as_str()))
        });
    }
    vm.note(&format!("statuses caught up {:.1} s after the link came back", healed.elapsed().as_secs_f64()));
    // nothing started again because the link came back
    std::thread::sleep(Duration::from_secs(10));
    assert_eq!(local_ids(&vm), offline, "containers changed after the link came back");
    for pod in ["api-a", "api-b", "local"] {
        assert_eq!(starts(&vm, pod).len(), 2, "{pod} started again after the link came back");
    }
}

//! End-to-end tests: the real `podwarden` binary against the private
//! containerd that `scripts/e2e-env.sh up` starts (runc, CNI, images built
//! from busybox-static). Observed through the CRI (podwarden's own client,
//! used here as a test-side helper) and the status the daemon serves on its
//! read-only `/pods` endpoint.
//!
//! The tests share one containerd, so they run one at a time (each agent
//! would treat another agent's pods as orphans).

mod agent;
mod common;

use agent::*;
use common::EVICTION;
use std::sync::Arc;

#[test]
fn pods_start_with_cni_and_host_network_and_stop_cleanly_on_removal() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("start");
    a.write("cni.yaml", &pod_yaml("cni", "  terminationGracePeriodSeconds: 30\n", TRAPPING));
    a.write("host.yaml", &pod_yaml("host", "  hostNetwork: true\n", TRAPPING));
    let cni = a.uid("cni");
    let host = a.uid("host");
    wait_for("both running, their shells trapping SIGTERM", Duration::from_secs(30), || {
        a.trapping(&cni) == 1 && a.trapping(&host) == 1
    });
    // the pod IP shows in status and in the managed /etc/hosts
    let mut ip = String::new();
    wait_for("pod IP in status", Duration::from_secs(10), || {
        ip = a.pod("cni").and_then(|p| p["status"]["podIP"].as_str().map(str::to_string)).unwrap_or_default();
        !ip.is_empty()
    });
    assert!(ip.starts_with(&pod_ip_prefix()), "pod IP {ip} from the e2e CNI range");
    // the CRI channel started gRPC's event engine: its timer thread too
    // has gRPC's timer slack
    common::assert_grpc_timer_slack(a.child.as_ref().unwrap().id());
    let st = a.pod("cni").unwrap()["status"].clone();
    assert_eq!(st["phase"], "Running");
    assert_eq!(st["containerStatuses"][0]["ready"], true);
    assert!(st["containerStatuses"][0]["containerID"].as_str().unwrap().starts_with("containerd://"));
    let hosts = std::fs::read_to_string(a.root().join("pods").join(&cni).join("etc-hosts")).unwrap();
    assert!(hosts.contains(&format!("{ip}\tcni")), "{hosts}");
    // a host-network pod gets the node's file under the kubelet's header
    let host_hosts = std::fs::read_to_string(a.root().join("pods").join(&host).join("etc-hosts")).unwrap();
    let node_hosts = std::fs::read_to_string("/etc/hosts").unwrap();
    assert_eq!(host_hosts, format!("# Kubernetes-managed hosts file (host network).\n{node_hosts}"));
    // removal: a trapping container stops at once despite a 30 s grace period
    let t = Instant::now();
    a.remove("cni.yaml");
    wait_for("cni pod gone from containerd", Duration::from_secs(20), || {
        let rp = a.runtime_pod(&cni);
        rp.sandboxes.is_empty() && rp.containers.is_empty()
    });
    assert!(t.elapsed() < Duration::from_secs(10), "took {:?}", t.elapsed());
    wait_for("pod dir removed", Duration::from_secs(10), || !a.root().join("pods").join(&cni).exists());
    a.clean_up(&[&cni, &host]);
}

#[test]
fn container_ignoring_sigterm_is_killed_at_the_end_of_its_grace_period() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("stubborn");
    a.write("s.yaml", &pod_yaml("stubborn", "  terminationGracePeriodSeconds: 3\n", STUBBORN));
    let uid = a.uid("stubborn");
    wait_for("running", Duration::from_secs(30), || a.running(&uid) == 1);
    let t = Instant::now();
    a.remove("s.yaml");
    wait_for("stopped", Duration::from_secs(30), || a.running(&uid) == 0);
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(2500), "stopped after {took:?}, before its 3 s grace period");
    assert!(took < Duration::from_secs(10), "stopped after {took:?}");
    a.clean_up(&[&uid]);
}

#[test]
fn orphan_sandbox_with_podwarden_labels_is_stopped_and_removed() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("orphan");
    let uid = "e2e-orphan-0001";
    let mut labels = std::collections::BTreeMap::new();
    labels.insert(podwarden::runtime::LABEL_POD_UID.to_string(), uid.to_string());
    let cfg = SandboxConfig {
        name: "ghost".into(),
        namespace: "e2e".into(),
        uid: uid.into(),
        hostname: "ghost".into(),
        log_directory: a.dir.0.join("ghost-logs").display().to_string(),
        labels,
        ..Default::default()
    };
    let id = a.cri.run_sandbox(&call(), &cfg).expect("make an orphan sandbox");
    assert!(!id.is_empty());
    wait_for("orphan removed", Duration::from_secs(30), || a.runtime_pod(uid).sandboxes.is_empty());
    assert!(a.log().contains("orphaned runtime pod"), "{}", a.log());
    a.clean_up(&[]);
}

/// A process left in the cgroup of a pod the runtime does not know (what
/// containerd killed between starting a container's `runc init` and
/// recording it leaves: the process waits for good, the CRI lists
/// nothing) is killed, as the kubelet kills what is left in an orphaned
/// pod cgroup, and the cgroup goes. Before, the cgroup was skipped as busy
/// at every pass and the process lived on (found by the soak).
#[test]
fn a_process_left_in_an_orphaned_pod_cgroup_is_killed_and_the_cgroup_removed() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("orphancg");
    let uid = format!("e2e-orphancg-{}", std::process::id());
    let pod = format!("kubepods/besteffort/pod{uid}");
    let root = Path::new("/sys/fs/cgroup");
    // the hierarchies the agent made its QoS cgroups in (v2: the one tree)
    let bases: Vec<PathBuf> = if root.join("cgroup.controllers").exists() {
        vec![root.to_path_buf()]
    } else {
        std::fs::read_dir(root)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join("kubepods/besteffort").is_dir() && !p.ends_with("cpuset"))
            .collect()
    };
    assert!(!bases.is_empty(), "no hierarchy holds kubepods/besteffort");
    for b in &bases {
        std::fs::create_dir_all(b.join(&pod).join("lostcontainer")).unwrap();
    }
    // the lost process, in one hierarchy's container cgroup
    let mut child = Command::new("sleep").arg("600").spawn().unwrap();
    let procs = bases[0].join(&pod).join("lostcontainer/cgroup.procs");
    std::fs::write(&procs, child.id().to_string()).unwrap();
    let end = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() >= end {
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let gone = || bases.iter().all(|b| !b.join(&pod).exists());
    if status.is_some() {
        wait_for("the orphaned pod cgroup removed", Duration::from_secs(20), gone);
    }
    let log = a.log();
    if status.is_none() || !gone() {
        let _ = child.kill();
        let _ = child.wait();
        for b in &bases {
            let _ = std::fs::remove_dir(b.join(&pod).join("lostcontainer"));
            let _ = std::fs::remove_dir(b.join(&pod));
        }
    }
    use std::os::unix::process::ExitStatusExt;
    let status = status.unwrap_or_else(|| panic!("the process left in {pod} still runs 90 s on:\n{log}"));
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
    assert!(gone(), "{pod} is left:\n{log}");
    assert!(log.contains("still held processes no runtime knows of: 1 killed"), "{log}");
    a.clean_up(&[]);
}

#[test]
fn image_missing_with_pull_policy_never_shows_a_waiting_reason_and_other_pods_run() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("noimage");
    a.write("ghost.yaml", &pod_yaml("ghost", "", TRAPPING).replace(IMAGE, "localhost/does-not-exist:1"));
    a.write("fine.yaml", &pod_yaml("fine", "", TRAPPING));
    let fine = a.uid("fine");
    let ghost = a.uid("ghost");
    wait_for("fine running", Duration::from_secs(30), || a.running(&fine) == 1);
    wait_for("ErrImageNeverPull", Duration::from_secs(20), || {
        a.pod("ghost")
            .is_some_and(|p| p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImageNeverPull")
    });
    assert_eq!(a.pod("ghost").unwrap()["status"]["phase"], "Pending");
    a.clean_up(&[&fine, &ghost]);
}

#[test]
fn restart_policies_back_off_and_termination_message() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("policies");
    a.write(
        "never.yaml",
        &pod_yaml("never", "  restartPolicy: Never\n", "echo 'bad config' > /dev/termination-log; exit 1"),
    );
    a.write("ok.yaml", &pod_yaml("onfail-ok", "  restartPolicy: OnFailure\n", "exit 0"));
    a.write("crash.yaml", &pod_yaml("crash", "  restartPolicy: Always\n", "exit 1"));
    a.write("never-ok.yaml", &pod_yaml("never-ok", "  restartPolicy: Never\n", "exit 0"));
    a.write("onfail-bad.yaml", &pod_yaml("onfail-bad", "  restartPolicy: OnFailure\n", "exit 1"));
    a.write("always-ok.yaml", &pod_yaml("always-ok", "  restartPolicy: Always\n", "exit 0"));
    a.write(
        "fallback.yaml",
        &(pod_yaml("fallback", "  restartPolicy: Never\n", "echo last words; exit 3")
            + "    terminationMessagePolicy: FallbackToLogsOnError\n"),
    );
    a.write("broken.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: Not_Valid\nspec:\n  containers: []\n");
    let never = a.uid("never");
    let ok = a.uid("onfail-ok");
    let crash = a.uid("crash");
    wait_for("Never pod Failed", Duration::from_secs(30), || {
        a.pod("never").is_some_and(|p| p["status"]["phase"] == "Failed")
    });
    let st = a.pod("never").unwrap()["status"].clone();
    let term = &st["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(term["exitCode"], 1);
    assert_eq!(term["message"], "bad config\n", "verbatim, as the kubelet keeps it");
    wait_for("OnFailure exit 0 Succeeded", Duration::from_secs(30), || {
        a.pod("onfail-ok").is_some_and(|p| p["status"]["phase"] == "Succeeded")
    });
    wait_for("crash loop back-off visible", Duration::from_secs(40), || {
        a.pod("crash").is_some_and(|p| {
            let cs = &p["status"]["containerStatuses"][0];
            cs["state"]["waiting"]["reason"] == "CrashLoopBackOff" && cs["restartCount"].as_i64().unwrap_or(0) >= 1
        })
    });
    let restarts = a.runtime_pod(&never).containers.len();
    assert_eq!(restarts, 1, "a Never pod's container is not restarted");
    let never_ok = a.uid("never-ok");
    let onfail_bad = a.uid("onfail-bad");
    let always_ok = a.uid("always-ok");
    let fallback = a.uid("fallback");
    wait_for("Never exit 0 Succeeded", Duration::from_secs(30), || {
        a.pod("never-ok").is_some_and(|p| p["status"]["phase"] == "Succeeded")
    });
    for name in ["onfail-bad", "always-ok"] {
        wait_for(&format!("{name} restarted"), Duration::from_secs(40), || {
            a.pod(name).is_some_and(|p| p["status"]["containerStatuses"][0]["restartCount"].as_i64().unwrap_or(0) >= 1)
        });
        assert_eq!(a.pod(name).unwrap()["status"]["phase"], "Running", "{name} keeps running (restarting)");
    }
    wait_for("fallback message from the log", Duration::from_secs(30), || {
        a.pod("fallback")
            .is_some_and(|p| p["status"]["containerStatuses"][0]["state"]["terminated"]["message"] == "last words\n")
    });
    // the invalid manifest is reported naming its file, and hurts nobody
    assert!(a.log().contains("broken.yaml: field metadata.name"), "{}", a.log());
    a.clean_up(&[&never, &ok, &crash, &never_ok, &onfail_bad, &always_ok, &fallback]);
}

#[test]
fn edited_manifest_stops_the_old_pod_before_the_new_one_starts() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("edit");
    a.write("e.yaml", &pod_yaml("edit", "  terminationGracePeriodSeconds: 2\n", STUBBORN));
    let old = a.uid("edit");
    wait_for("old running", Duration::from_secs(30), || a.running(&old) == 1);
    a.write("e.yaml", &pod_yaml("edit", "  terminationGracePeriodSeconds: 2\n", TRAPPING));
    let mut new = String::new();
    wait_for("new uid", Duration::from_secs(20), || {
        new = a.uid("edit");
        new != old
    });
    wait_for("new running", Duration::from_secs(30), || a.running(&new) == 1);
    let old_rp = a.runtime_pod(&old);
    let new_rp = a.runtime_pod(&new);
    let new_started = new_rp.containers[0].started_at_ns;
    for c in &old_rp.containers {
        assert_eq!(c.state, ContainerState::Exited);
        assert!(c.finished_at_ns <= new_started, "old container ran until after the new one started");
    }
    a.clean_up(&[&old, &new]);
}

#[test]
fn agent_killed_and_restarted_adopts_running_pods() {
    let _serial = SERIAL.lock();
    // debug lines of the agent module: one per housekeeping pass
    let mut a = Agent::start_with("adopt", "", &[("RUST_LOG", "info,podwarden::agent::manager=debug")]);
    a.write("keep.yaml", &pod_yaml("keep", "", TRAPPING));
    a.write("drop.yaml", &pod_yaml("drop", "", TRAPPING));
    let keep = a.uid("keep");
    let drop_uid = a.uid("drop");
    wait_for("running", Duration::from_secs(30), || a.running(&keep) == 1 && a.running(&drop_uid) == 1);
    let before = a.runtime_pod(&keep);
    a.kill9();
    a.remove("drop.yaml");
    a.write("new.yaml", &pod_yaml("new", "", TRAPPING));
    a.spawn();
    let new = a.uid("new");
    wait_for("new running", Duration::from_secs(30), || a.running(&new) == 1);
    wait_for("dropped pod removed", Duration::from_secs(30), || {
        let rp = a.runtime_pod(&drop_uid);
        rp.sandboxes.is_empty() && rp.containers.is_empty()
    });
    // a few housekeeping passes (500 ms apart) after that: none touches the
    // adopted pod
    let passes = || a.log().matches("housekeeping: pass done").count();
    let seen = passes();
    wait_for("three more housekeeping passes", Duration::from_secs(20), || passes() >= seen + 3);
    let after = a.runtime_pod(&keep);
    assert_eq!(after.sandboxes.len(), 1, "no duplicate sandbox");
    assert_eq!(after.containers.len(), 1, "no second container");
    assert_eq!(after.containers[0].id, before.containers[0].id, "the adopted container was not restarted");
    assert_eq!(after.containers[0].state, ContainerState::Running);
    a.clean_up(&[&keep, &drop_uid, &new]);
}

#[test]
fn missing_runtime_socket_is_a_clear_start_up_error() {
    let d = TempDir::new("nosock");
    let config = d.0.join("c.yaml");
    // start the agent on `endpoint`: it must fail at once; returns stderr
    let fail_with = |endpoint: &str| {
        std::fs::write(
            &config,
            format!(
                "containerRuntimeEndpoint: {endpoint}\nrootDir: {}\nport: 0\nreadOnlyPort: 0\nstaticPodPath: {}\n{EVICTION}",
                d.0.join("r").display(),
                d.0.display()
            ),
        )
        .unwrap();
        let out = Command::new(BIN).args(["run", "--config", config.to_str().unwrap()]).output().unwrap();
        assert_eq!(out.status.code(), Some(69), "EX_UNAVAILABLE");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let err = fail_with("unix:///run/podwarden-e2e-missing.sock");
    assert!(err.contains("/run/podwarden-e2e-missing.sock"), "{err}");
    assert!(err.contains("is containerd running?"), "{err}");

    // a socket that does not speak CRI v1 (containerd's ttrpc socket)
    let ttrpc = format!("{}.ttrpc", socket());
    let err = fail_with(&format!("unix://{ttrpc}"));
    assert!(err.contains(&ttrpc) && err.contains("does not answer the CRI v1 API"), "{err}");
}

/// A `cgroupDriver` that is not containerd's stops the agent at start with
/// a config error naming containerd's setting (the test containerd runs
/// runc with `SystemdCgroup = false`: cgroupfs).
#[test]
fn a_cgroup_driver_other_than_containerds_stops_the_agent() {
    let d = TempDir::new("driver");
    let config = d.0.join("c.yaml");
    std::fs::write(
        &config,
        format!(
            "containerRuntimeEndpoint: unix://{}\nrootDir: {}\nport: 0\nreadOnlyPort: 0\nstaticPodPath: {}\ncgroupDriver: systemd\napiSocket: {}\n{EVICTION}",
            socket(),
            d.0.join("r").display(),
            d.0.display(),
            d.0.join("api.sock").display()
        ),
    )
    .unwrap();
    let out = Command::new(BIN).args(["run", "--config", config.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "EX_CONFIG: {err}");
    assert!(
        err.contains("field cgroupDriver: \"systemd\" does not match containerd's cgroup driver: its runc runtime has SystemdCgroup = false"),
        "{err}"
    );
}

/// The pod cgroups on containerd (cgroupfs driver, cgroup v1 on this
/// machine): the kernel's files of the pod cgroup hold the pod's limits,
/// each container is inside its pod's cgroup with its own limits, and a
/// container that goes over its memory limit is OOM-killed, reported
/// `OOMKilled` and restarted. The pod's cgroup goes with the pod.
#[test]
fn pod_cgroups_hold_the_limits_and_oom_kills_restart_on_containerd() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("cgroups");
    let hog = "i=0; s=x; while [ $i -lt 26 ]; do s=$s$s; i=$((i+1)); done; sleep 1";
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: capped, namespace: e2e}}\nspec:\n  terminationGracePeriodSeconds: 1\n  initContainers:\n  - name: init\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"true\"]\n    resources: {{limits: {{cpu: 100m, memory: 16Mi}}}}\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sh, -c, {TRAPPING:?}]\n    resources: {{limits: {{cpu: 250m, memory: 48Mi}}}}\n  - name: hog\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sh, -c, {hog:?}]\n    resources: {{limits: {{cpu: 100m, memory: 16Mi}}}}\n"
    );
    a.write("capped.yaml", &pod);
    let uid = a.uid("capped");
    let pod_cg = format!("kubepods/pod{uid}");
    let read = |ctl: &str, rel: &str| {
        std::fs::read_to_string(format!("/sys/fs/cgroup/{ctl}/{rel}")).map(|s| s.trim().to_string()).unwrap_or_default()
    };
    wait_for("main running", Duration::from_secs(30), || {
        a.runtime_pod(&uid).containers.iter().any(|c| c.name == "main" && c.state == ContainerState::Running)
    });
    // Guaranteed: directly under kubepods, the sum of the limits
    assert_eq!(read("memory", &format!("{pod_cg}/memory.limit_in_bytes")), (64i64 << 20).to_string());
    assert_eq!(read("cpu", &format!("{pod_cg}/cpu.cfs_quota_us")), "35000");
    assert_eq!(read("cpu", &format!("{pod_cg}/cpu.shares")), "358");
    // main is created in a later pass than the sandbox (after the init
    // container's exit): in the pod's cgroup all the same
    let main = a.runtime_pod(&uid).containers.into_iter().find(|c| c.name == "main").unwrap();
    assert_eq!(
        read("memory", &format!("{pod_cg}/{}/memory.limit_in_bytes", main.id)),
        (48i64 << 20).to_string(),
        "main's cgroup is not in the pod's {pod_cg}"
    );
    assert_eq!(read("cpu", &format!("{pod_cg}/{}/cpu.cfs_quota_us", main.id)), "25000");
    // the hog goes over 16Mi: OOMKilled, restarted (restartPolicy Always)
    let hog_status = || {
        a.pod("capped")
            .and_then(|p| p["status"]["containerStatuses"].as_array()?.iter().find(|c| c["name"] == "hog").cloned())
            .unwrap_or_default()
    };
    wait_for("the hog OOM-killed and restarted", Duration::from_secs(60), || {
        let h = hog_status();
        h["restartCount"].as_i64().unwrap_or(0) >= 1 && h["lastState"]["terminated"]["reason"] == "OOMKilled"
    });
    assert_eq!(hog_status()["lastState"]["terminated"]["exitCode"], 137);
    // kubepods exists with the node's limit
    assert!(!read("memory", "kubepods/memory.limit_in_bytes").is_empty());
    a.remove("capped.yaml");
    wait_for("the pod's cgroup removed", Duration::from_secs(30), || {
        !std::path::Path::new(&format!("/sys/fs/cgroup/memory/{pod_cg}")).exists()
    });
    a.clean_up(&[&uid]);
}

/// Puts a cgroup file back as it was when dropped.
struct Restore(std::path::PathBuf, String);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, &self.1);
    }
}

/// When the pods' memory runs short, the kernel's OOM killer takes the
/// BestEffort pod first (its oom_score_adj 1000), not the Burstable one
/// (500: it requests half the machine) nor the pod that asked for the
/// memory last (Guaranteed). Measured in `kubepods` made small for the
/// test (just above what the pods hold), not by exhausting the machine.
#[test]
fn a_best_effort_pod_is_the_oom_killers_first_choice_on_containerd() {
    let _serial = SERIAL.lock();
    // the kernel's order, with the eviction manager out of the way (kubepods
    // made this small would be memory pressure for it)
    let mut a = Agent::start_with("oom-order", "evictionHard: {}\n", &[]);
    let state = a.root().parent().unwrap().join("oom-state");
    std::fs::create_dir_all(&state).unwrap();
    // `be` and `bu` hold 40 MB each in a shell string (grown by doubling:
    // up to twice that, and the same in both); `late` then needs 20 MB at
    // once, in one buffer dd reads into, so what the kernel frees by killing
    // one of the others is always enough for it (a string grown by copying
    // needs its old and new block together, a peak of three times its
    // length, and took the Burstable pod with it when the BestEffort pod's
    // 40 MB were not enough)
    let hold = |marker: &str| {
        let take = if marker == "late" {
            "dd if=/dev/zero of=/dev/null bs=20000000 count=1 2>/dev/null".to_string()
        } else {
            "s=$(head -c 40000000 /dev/zero | tr '\\0' x)".to_string()
        };
        format!("{take} && touch /state/{marker}; while :; do sleep 1; done")
    };
    let pod = |name: &str, resources: &str, policy: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: e2e}}\nspec:\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: 1\n  volumes: [{{name: state, hostPath: {{path: {}}}}}]\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sh, -c, {:?}]\n    volumeMounts: [{{name: state, mountPath: /state}}]\n    resources: {resources}\n",
            state.display(),
            hold(name)
        )
    };
    let half = mem_total_bytes() / 2;
    a.write("be.yaml", &pod("be", "{}", "Never"));
    a.write("bu.yaml", &pod("bu", &format!("{{requests: {{memory: {half}}}}}"), "Never"));
    let (be, bu) = (a.uid("be"), a.uid("bu"));
    wait_for("both hold their memory", Duration::from_secs(60), || {
        state.join("be").exists() && state.join("bu").exists()
    });
    // kubepods just above what the pods cannot give back (their anonymous
    // and shared memory, not the page cache earlier tests left charged
    // there, which the kernel would reclaim for `late` before killing
    // anyone), plus the kernel memory charged there (v1 counts it in the
    // usage; what earlier tests' pods left, dentries and inodes, is dropped
    // first, or it would be reclaimed for `late` too): the next 20 MB do
    // not fit
    let limit = std::path::PathBuf::from("/sys/fs/cgroup/memory/kubepods/memory.limit_in_bytes");
    let _restore = Restore(limit.clone(), std::fs::read_to_string(&limit).unwrap().trim().to_string());
    std::fs::write("/proc/sys/vm/drop_caches", "2").expect("drop the reclaimable slab caches");
    let stat = std::fs::read_to_string("/sys/fs/cgroup/memory/kubepods/memory.stat").unwrap();
    let field = |k: &str| -> i64 {
        stat.lines().find_map(|l| l.strip_prefix(k)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0)
    };
    let held = field("total_rss") + field("total_shmem") + field("total_mapped_file");
    assert!(held >= 60_000_000, "the two pods hold {held} bytes, not their 80 MB: {stat}");
    let kmem: i64 = std::fs::read_to_string("/sys/fs/cgroup/memory/kubepods/memory.kmem.usage_in_bytes")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let to = held + kmem + (8 << 20);
    // (the kernel reclaims the cache to fit; the write fails only if it cannot)
    std::fs::write(&limit, to.to_string())
        .unwrap_or_else(|e| panic!("kubepods limited to {to} bytes (kmem {kmem}): {e}\n{stat}"));
    a.write("late.yaml", &pod("late", "{limits: {cpu: 100m, memory: 200Mi}}", "Never"));
    let late = a.uid("late");
    let state_of =
        |name: &str| a.pod(name).map(|p| p["status"]["containerStatuses"][0]["state"].clone()).unwrap_or_default();
    wait_for("the BestEffort pod killed", Duration::from_secs(60), || state_of("be")["terminated"]["exitCode"] == 137);
    wait_for("the late pod holds its memory", Duration::from_secs(30), || state.join("late").exists());
    assert!(state_of("bu")["running"].is_object(), "the Burstable pod runs on: {}", state_of("bu"));
    assert!(state_of("late")["running"].is_object(), "the Guaranteed pod runs on: {}", state_of("late"));
    drop(_restore);
    a.clean_up(&[&be, &bu, &late]);
}

/// A unix-socket proxy to the e2e containerd whose first connection is cut
/// (both ways, nothing answered) at the first request sent after `arm`;
/// later connections are forwarded as they are.
struct CuttingProxy {
    path: std::path::PathBuf,
    armed: Arc<std::sync::atomic::AtomicBool>,
    cut: Arc<std::sync::atomic::AtomicBool>,
}

impl CuttingProxy {
    fn start(path: std::path::PathBuf) -> Self {
        use std::os::unix::net::{UnixListener, UnixStream};
        use std::sync::atomic::Ordering::SeqCst;
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (a, c) = (armed.clone(), cut.clone());
        podwarden::base::thread::spawn("proxy", None, move || {
            for (n, client) in listener.incoming().flatten().enumerate() {
                let server = UnixStream::connect(socket()).unwrap();
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                podwarden::base::thread::spawn("proxy-down", None, move || {
                    let _ = std::io::copy(&mut &s2, &mut &c2);
                    let _ = c2.shutdown(std::net::Shutdown::Both);
                })
                .unwrap();
                let (a, c) = (a.clone(), c.clone());
                podwarden::base::thread::spawn("proxy-up", None, move || {
                    let mut buf = [0u8; 16384];
                    loop {
                        let k = match std::io::Read::read(&mut &client, &mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(k) => k,
                        };
                        if n == 0 && a.load(SeqCst) {
                            c.store(true, SeqCst);
                            break;
                        }
                        if std::io::Write::write_all(&mut &server, &buf[..k]).is_err() {
                            break;
                        }
                    }
                    let _ = client.shutdown(std::net::Shutdown::Both);
                    let _ = server.shutdown(std::net::Shutdown::Both);
                })
                .unwrap();
            }
        })
        .unwrap();
        CuttingProxy { path, armed, cut }
    }
}

/// A connection that closes under a call that only reads (containerd
/// restarting, a GOAWAY: "Socket closed") is retried on a new connection
/// within the call's deadline; the relist does not fail for it.
#[test]
fn a_read_call_whose_connection_is_cut_is_retried_on_a_new_connection_on_containerd() {
    use podwarden::runtime::Runtime;
    use std::sync::atomic::Ordering::SeqCst;
    let dir = std::env::temp_dir().join(format!("pw-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let proxy = CuttingProxy::start(dir.join("cri.sock"));
    let endpoint = format!("unix://{}", proxy.path.display());
    let rt = CriRuntime::connect(&endpoint, Duration::from_secs(5)).unwrap();
    rt.list_pods(&call()).unwrap();
    // the connection settles (settings, window updates), then the next
    // request is cut off unanswered
    std::thread::sleep(Duration::from_millis(300));
    proxy.armed.store(true, SeqCst);
    let t = Instant::now();
    let listed = rt.list_pods(&call());
    let took = t.elapsed();
    assert!(proxy.cut.load(SeqCst), "the proxy never cut the connection");
    listed.unwrap_or_else(|e| panic!("ListPodSandbox over a cut connection: {e}"));
    assert!(took < Duration::from_secs(5), "the retry took {took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// containerd 1.6 can lose a container's exit while it restarts: the CRI
/// shows the container running for good and its StopContainer never
/// returns, while the shim knows the process ended. A stop running past
/// its grace period makes the CRI client ask the shim (containerd's task
/// service), to say so at error level. The question works on this
/// containerd: a running container's task is running with its pid, and
/// once the container is stopped there is no task left.
#[test]
fn the_shim_is_asked_for_a_containers_process_on_containerd() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("shimask");
    a.write("p.yaml", &pod_yaml("asked", "  terminationGracePeriodSeconds: 2\n", STUBBORN));
    let uid = a.uid("asked");
    wait_for("running", Duration::from_secs(30), || a.running(&uid) == 1);
    let cri = cri();
    let id = cri.pod_status(&call(), &uid).unwrap().containers[0].id.clone();
    let shim = cri.shim_process(&id).expect("containerd's task service answers for a running container");
    assert!(shim.running && !shim.stopped && shim.pid > 0, "a running container's task: {shim:?}");
    assert!(std::fs::read_to_string(format!("/proc/{}/cmdline", shim.pid)).is_ok_and(|c| c.starts_with("sh")));
    a.remove("p.yaml");
    wait_for("pod removed", Duration::from_secs(30), || {
        cri.pod_status(&call(), &uid).is_ok_and(|rp| rp.sandboxes.is_empty() && rp.containers.is_empty())
    });
    assert_eq!(cri.shim_process(&id), None, "a task left after the container was removed");
    a.clean_up(&[&uid]);
}

#[test]
fn containerd_restarted_during_a_deletion_the_pod_still_finishes() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("crestart");
    a.write("p.yaml", &pod_yaml("survivor", "  terminationGracePeriodSeconds: 3\n", STUBBORN));
    let uid = a.uid("survivor");
    wait_for("running", Duration::from_secs(30), || a.running(&uid) == 1);
    let pid = containerd_pid().expect("the e2e containerd's pid file");
    // stopping the private containerd the e2e script started.
    podwarden::sys::kill(pid, libc::SIGKILL).unwrap();
    wait_for("containerd gone", Duration::from_secs(10), || podwarden::sys::kill(pid, 0).is_err());
    a.remove("p.yaml");
    // the termination fails meanwhile (and is retried after back-off)
    wait_for("a failed termination pass", Duration::from_secs(30), || {
        a.log().lines().any(|l| l.contains(&format!("e2e/survivor {uid}: Terminating failed")))
    });
    // in a session of its own: the restarted containerd is shared and must
    // outlive this test's process group
    let out = Command::new("setsid").args(["-w", "scripts/e2e-env.sh", "up"]).output().unwrap();
    assert!(out.status.success(), "restarting containerd: {}", String::from_utf8_lossy(&out.stderr));
    // the agent was not restarted; its worker retries until the pod is gone
    let cri = cri();
    wait_for("pod removed after containerd came back", Duration::from_secs(60), || {
        cri.pod_status(&call(), &uid).is_ok_and(|rp| rp.sandboxes.is_empty() && rp.containers.is_empty())
    });
    assert!(a.child.as_mut().unwrap().try_wait().unwrap().is_none(), "the agent kept running");
    a.cri = cri;
    a.clean_up(&[&uid]);
}

#[test]
fn volumes_empty_dir_memory_and_host_path() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("volumes");
    let host_dir = a.dir.0.join("hostdata");
    let spec = format!(
        "  volumes:\n  - name: scratch\n    emptyDir:\n      medium: Memory\n      sizeLimit: 16Mi\n  - name: data\n    hostPath:\n      path: {}\n      type: DirectoryOrCreate\n",
        host_dir.display()
    );
    let yaml = pod_yaml(
        "vols",
        &spec,
        "echo hello > /data/out; echo x > /scratch/x; trap 'exit 0' TERM; while :; do sleep 1; done",
    ) + "    volumeMounts:\n    - name: scratch\n      mountPath: /scratch\n    - name: data\n      mountPath: /data\n";
    a.write("v.yaml", &yaml);
    let uid = a.uid("vols");
    wait_for("running", Duration::from_secs(30), || a.running(&uid) == 1);
    wait_for("file written through hostPath", Duration::from_secs(10), || {
        std::fs::read_to_string(host_dir.join("out")).is_ok_and(|s| s.trim() == "hello")
    });
    let scratch = a.root().join("pods").join(&uid).join("volumes/kubernetes.io~empty-dir/scratch");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        mounts.lines().any(|l| l.contains(scratch.to_str().unwrap()) && l.starts_with("tmpfs")),
        "emptyDir medium Memory is a tmpfs"
    );
    assert_eq!(std::fs::read_to_string(scratch.join("x")).unwrap().trim(), "x");
    // a hostPath whose type does not match keeps the pod from starting
    a.write(
        "bad.yaml",
        &(pod_yaml(
            "badvol",
            "  volumes:\n  - name: d\n    hostPath:\n      path: /etc/hostname\n      type: Directory\n",
            TRAPPING,
        ) + "    volumeMounts:\n    - name: d\n      mountPath: /d\n"),
    );
    let bad = a.uid("badvol");
    wait_for("FailedMount reported", Duration::from_secs(20), || a.log().contains("FailedMount"));
    assert_eq!(a.running(&bad), 0);
    a.remove("v.yaml");
    wait_for("pod dir removed", Duration::from_secs(30), || !a.root().join("pods").join(&uid).exists());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts.contains(scratch.to_str().unwrap()), "tmpfs unmounted");
    assert!(host_dir.join("out").exists(), "hostPath content stays");
    a.clean_up(&[&uid, &bad]);
}

#[test]
fn image_pull_failure_is_a_waiting_reason_not_a_crash() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("pull");
    a.write(
        "p.yaml",
        &pod_yaml("nopull", "", TRAPPING)
            .replace(IMAGE, "localhost/nowhere:1")
            .replace("imagePullPolicy: Never", "imagePullPolicy: IfNotPresent"),
    );
    let uid = a.uid("nopull");
    wait_for("ErrImagePull or ImagePullBackOff", Duration::from_secs(60), || {
        a.pod("nopull").is_some_and(|p| {
            let r = &p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"];
            r == "ErrImagePull" || r == "ImagePullBackOff"
        })
    });
    assert!(a.child.as_mut().unwrap().try_wait().unwrap().is_none(), "the agent keeps running");
    a.clean_up(&[&uid]);
}

#[test]
fn metrics_pass_promtool_and_count_pods_and_orphans_and_pods_redacts_env() {
    let _serial = SERIAL.lock();
    assert!(
        Command::new("promtool").arg("--version").output().is_ok(),
        "promtool is missing: install the Debian package prometheus (scripts/test.sh does)"
    );
    let mut a = Agent::start("metrics");
    a.write("keep.yaml", &(pod_yaml("keep", "", TRAPPING) + "    env:\n    - name: SECRET\n      value: hunter2\n"));
    a.write("gone.yaml", &pod_yaml("gone", "", TRAPPING));
    // an image no registry has: pulling it fails (a runtime error)
    a.write(
        "nopull.yaml",
        &pod_yaml("nopull", "", TRAPPING)
            .replace(IMAGE, "localhost:1/nowhere:1")
            .replace("imagePullPolicy: Never", "imagePullPolicy: Always"),
    );
    let keep = a.uid("keep");
    let gone = a.uid("gone");
    let nopull = a.uid("nopull");
    wait_for("running", Duration::from_secs(30), || a.running(&keep) == 1 && a.running(&gone) == 1);
    // the start duration is observed when podwarden sees the pod running,
    // which can be a moment after containerd runs its container
    wait_for("reported Running", Duration::from_secs(30), || {
        ["keep", "gone"].iter().all(|n| a.pod(n).is_some_and(|p| p["status"]["phase"] == "Running"))
    });
    wait_for("pull failed", Duration::from_secs(30), || {
        a.get("/metrics").is_some_and(|t| t.contains("operation_type=\"pull_image\""))
    });
    a.remove("nopull.yaml");
    a.remove("gone.yaml");
    // an orphan made behind podwarden's back
    let mut labels = std::collections::BTreeMap::new();
    labels.insert(podwarden::runtime::LABEL_POD_UID.to_string(), "e2e-metrics-orphan".to_string());
    let cfg = SandboxConfig {
        name: "stray".into(),
        namespace: "e2e".into(),
        uid: "e2e-metrics-orphan".into(),
        hostname: "stray".into(),
        log_directory: a.dir.0.join("stray").display().to_string(),
        labels,
        ..Default::default()
    };
    a.cri.run_sandbox(&call(), &cfg).unwrap();
    wait_for("orphan and removed pod gone", Duration::from_secs(30), || {
        a.runtime_pod("e2e-metrics-orphan").sandboxes.is_empty() && a.runtime_pod(&gone).sandboxes.is_empty()
    });
    // a housekeeping pass after the removals refreshes the gauges: wait
    // until they show one pod, then check everything on that text
    let mut text = String::new();
    poll_until(Duration::from_secs(20), || {
        text = a.get("/metrics").unwrap_or_default();
        [
            "kubelet_desired_pods{static=\"true\"}",
            "kubelet_active_pods{static=\"true\"}",
            "kubelet_working_pods{config=\"desired\",lifecycle=\"sync\",static=\"true\"}",
            "kubelet_running_pods",
            "kubelet_running_containers{container_state=\"running\"}",
        ]
        .iter()
        .all(|s| metric(&text, s) == Some(1.0))
    });
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(metric(&text, "kubelet_desired_pods{static=\"true\"}"), Some(1.0), "{text}");
    assert_eq!(metric(&text, "kubelet_active_pods{static=\"true\"}"), Some(1.0), "{text}");
    assert_eq!(metric(&text, "kubelet_orphaned_runtime_pods_total"), Some(1.0), "{text}");
    assert_eq!(
        metric(&text, "kubelet_working_pods{config=\"desired\",lifecycle=\"sync\",static=\"true\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(metric(&text, "kubelet_running_pods"), Some(1.0), "{text}");
    assert_eq!(metric(&text, "kubelet_running_containers{container_state=\"running\"}"), Some(1.0), "{text}");
    assert!(metric(&text, "kubelet_pod_worker_duration_seconds_count{operation_type=\"sync\"}").unwrap_or(0.0) >= 1.0);
    // both pods that ran were timed from admission to running
    let starts = metric(&text, "kubelet_pod_start_duration_seconds_count").unwrap();
    let sum = metric(&text, "kubelet_pod_start_duration_seconds_sum").unwrap();
    assert_eq!(starts, 2.0, "{text}");
    assert!(sum > 0.0 && sum < 60.0, "{text}");
    assert!(metric(&text, "kubelet_runtime_operations_errors_total{operation_type=\"pull_image\"}").unwrap() >= 1.0);
    assert_eq!(metric(&text, "kubelet_graceful_shutdown_start_time_seconds"), Some(0.0), "{text}");
    // /pods: a v1 PodList with env values redacted
    let body = a.get("/pods").unwrap();
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["apiVersion"], "v1");
    assert!(!body.contains("hunter2"), "env values must not leak: {body}");
    let env = &a.pod("keep").unwrap()["spec"]["containers"][0]["env"][0];
    assert_eq!(env["name"], "SECRET");
    assert_eq!(env["value"], "<redacted>");
    a.clean_up(&[&keep, &gone, &nopull]);
}

/// The downward API in env (`fieldRef`, `resourceFieldRef`) and `$(VAR)`
/// expansion in env values and the command reach a real container.
#[test]
fn downward_api_env_and_expansion_reach_the_container() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("downward");
    // after podwarden's expansion the shell sees `$(POD_NAME)` (from `$$`)
    // and `$(UNKNOWN)` (left as written) in single quotes, so prints them
    let script = "echo \"$(GREETING)|$POD_NAME|$NS|$APP|$POD_IP|$HOST_IP|$NODE|$MEM_MI|$CPU_M|\"'$$(POD_NAME)|$(UNKNOWN)' > /dev/termination-log";
    a.write(
        "dw.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: dw\n  namespace: e2e\n  labels: {{app: shop}}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", {script:?}]\n    resources: {{limits: {{memory: 64Mi, cpu: 250m}}}}\n    env:\n    - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}\n    - {{name: NS, valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}}}\n    - {{name: APP, valueFrom: {{fieldRef: {{fieldPath: \"metadata.labels['app']\"}}}}}}\n    - {{name: POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}\n    - {{name: HOST_IP, valueFrom: {{fieldRef: {{fieldPath: status.hostIP}}}}}}\n    - {{name: NODE, valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}}}\n    - {{name: MEM_MI, valueFrom: {{resourceFieldRef: {{resource: limits.memory, divisor: 1Mi}}}}}}\n    - {{name: CPU_M, valueFrom: {{resourceFieldRef: {{resource: limits.cpu, divisor: 1m}}}}}}\n    - {{name: GREETING, value: \"hi $(POD_NAME) in $(NS)\"}}\n"
        ),
    );
    let uid = a.uid("dw");
    wait_for("dw Succeeded", Duration::from_secs(30), || {
        a.pod("dw").is_some_and(|p| p["status"]["phase"] == "Succeeded")
    });
    let p = a.pod("dw").unwrap();
    let pod_ip = p["status"]["podIP"].as_str().unwrap().to_string();
    let host_ip = p["status"]["hostIP"].as_str().unwrap().to_string();
    let node = p["spec"]["nodeName"].as_str().unwrap().to_string();
    assert!(!pod_ip.is_empty() && pod_ip != host_ip, "a CNI pod IP: {pod_ip}");
    let message = p["status"]["containerStatuses"][0]["state"]["terminated"]["message"].as_str().unwrap().to_string();
    assert_eq!(
        message.trim_end(),
        format!("hi dw in e2e|dw|e2e|shop|{pod_ip}|{host_ip}|{node}|64|250|$(POD_NAME)|$(UNKNOWN)")
    );
    a.clean_up(&[&uid]);
}

/// Name resolution as the kubelet sets it up without cluster DNS: a
/// ClusterFirst pod falls back to the node's resolver config (with the
/// kubelet's MissingClusterDNS warning) and gets its dnsConfig merged in;
/// hostAliases reach /etc/hosts, on the host network too.
#[test]
fn dns_config_is_merged_and_host_aliases_reach_host_network_pods() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("dns");
    let show = "cat /etc/resolv.conf /etc/hosts > /dev/termination-log";
    a.write(
        "merged.yaml",
        &(pod_yaml(
            "merged",
            "  restartPolicy: Never\n  dnsConfig:\n    nameservers: [192.0.2.53]\n    searches: [pods.example]\n    options: [{name: ndots, value: \"3\"}]\n  hostAliases:\n  - {ip: 192.0.2.10, hostnames: [db, db.local]}\n",
            show,
        )),
    );
    a.write(
        "hostnet.yaml",
        &pod_yaml(
            "hostnet",
            "  restartPolicy: Never\n  hostNetwork: true\n  hostAliases:\n  - {ip: 192.0.2.11, hostnames: [cache]}\n",
            show,
        ),
    );
    let merged = a.uid("merged");
    let hostnet = a.uid("hostnet");
    let message = |name: &str| {
        a.pod(name).and_then(|p| {
            p["status"]["containerStatuses"][0]["state"]["terminated"]["message"].as_str().map(String::from)
        })
    };
    wait_for("both pods ran", Duration::from_secs(30), || message("merged").is_some() && message("hostnet").is_some());
    let m = message("merged").unwrap();
    let node = podwarden::pod::phases::dns::host(std::path::Path::new("/etc/resolv.conf"));
    for s in node.servers.iter().take(2) {
        assert!(m.contains(&format!("nameserver {s}")), "the node's nameserver {s} is kept:\n{m}");
    }
    assert!(m.contains("nameserver 192.0.2.53"), "{m}");
    assert!(m.contains("pods.example") && m.contains("ndots:3"), "{m}");
    assert!(m.contains("# Entries added by HostAliases.\n192.0.2.10\tdb\tdb.local"), "{m}");
    let h = message("hostnet").unwrap();
    assert!(h.contains("# Kubernetes-managed hosts file (host network).\n"), "{h}");
    assert!(h.contains("192.0.2.11\tcache"), "{h}");
    // the kubelet's warning for the ClusterFirst pod, not for the
    // host-network one (ClusterFirst means Default there)
    let log = a.log();
    assert!(log.contains("MissingClusterDNS") && log.contains(&format!("pod: \"merged_e2e({merged})\"")), "{log}");
    assert!(!log.contains(&format!("hostnet_e2e({hostnet})\". kubelet does not have ClusterDNS")), "{log}");
    a.clean_up(&[&merged, &hostnet]);
}

/// subPath and subPathExpr mount one file or directory of a volume; a
/// subPath that a symlink in the volume leads outside it is refused
/// (CreateContainerConfigError), and the pod's clean-up leaves the volume's
/// content alone.
#[test]
fn sub_paths_mount_part_of_a_volume_and_never_outside_it() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("subpath");
    let vol = a.root().parent().unwrap().join("hostvol");
    std::fs::create_dir_all(vol.join("conf")).unwrap();
    std::fs::write(vol.join("conf/app.ini"), "answer=42\n").unwrap();
    std::os::unix::fs::symlink("/etc", vol.join("escape")).unwrap();
    let volumes =
        format!("  restartPolicy: Never\n  volumes:\n  - name: v\n    hostPath: {{path: {}}}\n", vol.display());
    a.write(
        "sub.yaml",
        &(pod_yaml("sub", &volumes, "cat /app.ini > /dev/termination-log; echo hi > /out/from-$(POD)")
            + "    env:\n    - {name: POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}\n    volumeMounts:\n    - {name: v, mountPath: /app.ini, subPath: conf/app.ini, readOnly: true}\n    - {name: v, mountPath: /out, subPathExpr: \"out/$(POD)\"}\n"),
    );
    a.write(
        "esc.yaml",
        &(pod_yaml("esc", &volumes, "cat /x/passwd")
            + "    volumeMounts:\n    - {name: v, mountPath: /x, subPath: escape}\n"),
    );
    let sub = a.uid("sub");
    let esc = a.uid("esc");
    wait_for("sub Succeeded", Duration::from_secs(30), || {
        a.pod("sub").is_some_and(|p| p["status"]["phase"] == "Succeeded")
    });
    let p = a.pod("sub").unwrap();
    assert_eq!(p["status"]["containerStatuses"][0]["state"]["terminated"]["message"], "answer=42\n");
    assert_eq!(std::fs::read_to_string(vol.join("out/sub/from-sub")).unwrap(), "hi\n");
    let mut reason = String::new();
    wait_for("esc refused", Duration::from_secs(30), || {
        let w = a.pod("esc").map(|p| p["status"]["containerStatuses"][0]["state"]["waiting"].clone());
        reason = w.as_ref().map(|w| format!("{} {}", w["reason"], w["message"])).unwrap_or_default();
        reason.contains("CreateContainerConfigError")
    });
    assert!(
        reason.contains("failed to prepare subPath for volumeMount \\\"v\\\" of container \\\"main\\\": subPath \\\"escape\\\" resolves outside its volume (/etc)"),
        "{reason}"
    );
    assert_eq!(a.runtime_pod(&esc).containers.len(), 0, "no container was created");
    a.clean_up(&[&sub, &esc]);
    // the pods are gone; the volume's content is as it was
    assert_eq!(std::fs::read_to_string(vol.join("conf/app.ini")).unwrap(), "answer=42\n");
    assert!(vol.join("out/sub/from-sub").exists());
    let _ = std::fs::remove_dir_all(&vol);
}

/// Local ConfigMaps and Secrets reach a container through env, envFrom, a
/// volume, a subPath and a tmpfs-backed 0400 Secret file; a ConfigMap edit
/// reaches the mounted file without a restart (the subPath keeps the old
/// version, as in the kubelet); a missing ConfigMap is
/// CreateContainerConfigError until its file is written; no secret value
/// shows on /pods or in the log.
#[test]
fn config_maps_and_secrets_reach_the_container_and_follow_edits() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("config");
    let out = a.root().parent().unwrap().join("cfg-out");
    std::fs::create_dir_all(&out).unwrap();
    let config_map = |answer: u32| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: app, namespace: e2e}}\ndata:\n  greeting: hello\n  app.ini: \"answer={answer}\\n\"\n"
        )
    };
    a.write("app-config.yaml", &config_map(1));
    // the container records what it sees, and keeps copying the mounted
    // file (atomically) so the test sees what the container sees
    let script = "echo \"$GREETING|$CM_greeting|$PASSWORD|$(stat -L -c %a /secret/password)|$(cat /secret/password)|$(cat /podinfo/name)|$(cat /podinfo/labels)\" > /out/env; cat /etc/app.ini > /out/sub; while :; do cat /cfg/app.ini > /out/.ini && mv /out/.ini /out/ini; sleep 0.1; done";
    let pod = format!(
        "{}    env:\n    - {{name: GREETING, valueFrom: {{configMapKeyRef: {{name: app, key: greeting}}}}}}\n    - {{name: PASSWORD, valueFrom: {{secretKeyRef: {{name: creds, key: password}}}}}}\n    envFrom:\n    - {{prefix: CM_, configMapRef: {{name: app}}}}\n    volumeMounts:\n    - {{name: cfg, mountPath: /cfg}}\n    - {{name: cfg, mountPath: /etc/app.ini, subPath: app.ini}}\n    - {{name: secret, mountPath: /secret}}\n    - {{name: podinfo, mountPath: /podinfo}}\n    - {{name: out, mountPath: /out}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: creds, namespace: e2e}}\nstringData: {{password: s3cr3t-pw}}\n",
        pod_yaml(
            "cfg",
            &format!(
                "  terminationGracePeriodSeconds: 1\n  volumes:\n  - {{name: cfg, configMap: {{name: app}}}}\n  - {{name: secret, secret: {{secretName: creds}}}}\n  - name: podinfo\n    downwardAPI:\n      items:\n      - {{path: name, fieldRef: {{fieldPath: metadata.name}}}}\n      - {{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}\n  - {{name: out, hostPath: {{path: {}}}}}\n",
                out.display()
            ),
            script
        )
        .replace("  namespace: e2e\n", "  namespace: e2e\n  labels: {app: shop, tier: \"a b\"}\n")
    );
    a.write("cfg.yaml", &pod);
    let uid = a.uid("cfg");
    wait_for("the container's report", Duration::from_secs(30), || out.join("ini").exists());
    assert_eq!(
        std::fs::read_to_string(out.join("env")).unwrap().trim_end(),
        "hello|hello|s3cr3t-pw|400|s3cr3t-pw|cfg|app=\"shop\"\ntier=\"a b\""
    );
    assert_eq!(std::fs::read_to_string(out.join("ini")).unwrap(), "answer=1\n");
    assert_eq!(std::fs::read_to_string(out.join("sub")).unwrap(), "answer=1\n");
    // the Secret lives on a tmpfs of its own under rootDir, 0400
    let secret_dir = a.root().join(format!("pods/{uid}/volumes/kubernetes.io~secret/secret"));
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        mounts.lines().any(|l| l.starts_with("tmpfs ") && l.split(' ').nth(1) == Some(secret_dir.to_str().unwrap())),
        "the Secret volume is a tmpfs: {mounts}"
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(secret_dir.join("password")).unwrap().mode() & 0o777, 0o400);
    // an edit reaches the mounted file, without a restart
    a.write("app-config.yaml", &config_map(2));
    wait_for("the edit in the container", Duration::from_secs(10), || {
        std::fs::read_to_string(out.join("ini")).is_ok_and(|s| s == "answer=2\n")
    });
    let p = a.pod("cfg").unwrap();
    assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 0);
    assert!(p["status"]["containerStatuses"][0]["state"]["running"].is_object());
    // `podwarden get configmaps|secrets`: names, counts, never a secret value
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(BIN)
            .args(args)
            .args(["-n", "e2e", "--socket", a.api_socket().to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let cms = cli(&["get", "configmaps"]);
    assert!(cms.lines().next().unwrap().starts_with("NAME"), "{cms}");
    assert!(cms.lines().any(|l| l.split_whitespace().take(2).eq(["app", "2"])), "{cms}");
    let secrets = cli(&["get", "secrets"]);
    assert!(secrets.lines().any(|l| l.split_whitespace().take(3).eq(["creds", "Opaque", "1"])), "{secrets}");
    for args in [&["get", "secrets", "-o", "yaml"][..], &["get", "secret", "creds", "-o", "json"]] {
        let text = cli(args);
        assert!(text.contains("password") && !text.contains("s3cr3t") && !text.contains("czNjcjN0"), "{text}");
    }
    // no secret value on /pods or in the log
    let pods = a.get("/pods").unwrap();
    assert!(!pods.contains("s3cr3t-pw"), "/pods shows a secret value");
    assert!(!a.log().contains("s3cr3t-pw"), "the log shows a secret value");

    // a missing ConfigMap: CreateContainerConfigError with the kubelet's
    // message, and the pod starts once it is written
    a.write(
        "late.yaml",
        &(pod_yaml("late", "  restartPolicy: Never\n", "echo $LATE > /dev/termination-log")
            + "    env:\n    - {name: LATE, valueFrom: {configMapKeyRef: {name: late-config, key: v}}}\n"),
    );
    let late = a.uid("late");
    let mut waiting = String::new();
    wait_for("late waits for its ConfigMap", Duration::from_secs(30), || {
        let w = a.pod("late").map(|p| p["status"]["containerStatuses"][0]["state"]["waiting"].clone());
        waiting = w.as_ref().map(|w| format!("{} {}", w["reason"], w["message"])).unwrap_or_default();
        waiting.contains("CreateContainerConfigError")
    });
    assert!(waiting.contains("configmap \\\"late-config\\\" not found"), "{waiting}");
    assert_eq!(a.runtime_pod(&late).containers.len(), 0, "no container was created");
    a.write(
        "late-config.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: late-config, namespace: e2e}\ndata: {v: arrived}\n",
    );
    wait_for("late Succeeded", Duration::from_secs(30), || {
        a.pod("late").is_some_and(|p| p["status"]["phase"] == "Succeeded")
    });
    assert_eq!(a.pod("late").unwrap()["status"]["containerStatuses"][0]["state"]["terminated"]["message"], "arrived\n");
    a.clean_up(&[&uid, &late]);
    // the pod's directory, and the tmpfs in it, are gone
    assert!(!mounts_now().contains(&uid), "a mount of the pod is left");
    let _ = std::fs::remove_dir_all(&out);
}

fn mounts_now() -> String {
    std::fs::read_to_string("/proc/self/mounts").unwrap()
}

/// Mount points a test made in its own temp dir, unmounted (recursively,
/// lazily) when it ends, whatever happened.
struct Mounts(Vec<PathBuf>);

impl Mounts {
    fn run(args: &[&str]) {
        let out = Command::new(args[0]).args(&args[1..]).output().expect("run mount");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Make `dir` a mount point of its own with `propagation`
    /// (`--make-rshared`, `--make-private`), as an administrator would.
    fn bind_self(&mut self, dir: &Path, propagation: &str) {
        std::fs::create_dir_all(dir).unwrap();
        let d = dir.to_str().unwrap();
        Self::run(&["mount", "--bind", d, d]);
        self.0.push(dir.to_path_buf());
        Self::run(&["mount", propagation, d]);
    }
}

impl Drop for Mounts {
    fn drop(&mut self) {
        for d in self.0.iter().rev() {
            let _ = Command::new("umount").args(["-R", "-l"]).arg(d).output();
        }
    }
}

/// `mountPropagation` on containerd. containerd requires the source of a
/// HostToContainer mount to be on a shared or slave mount, and of a
/// Bidirectional one on a shared mount (its CRI plugin checks the mount
/// holding the source); on a private one the container is refused with
/// containerd's "is not a shared or slave mount" (CreateContainerError).
/// systemd makes `/` shared at boot, so on a usual host any hostPath
/// qualifies; this test's environment mounts `/` private, so the test makes
/// its host directory a shared mount point of its own (`mount --bind` and
/// `--make-rshared`). With HostToContainer a tmpfs the host mounts below
/// the hostPath after the container started is seen inside it; with
/// Bidirectional a privileged container's tmpfs below the hostPath is seen
/// on the host.
#[test]
fn mount_propagation_host_to_container_and_bidirectional_on_containerd() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start_with("propagation", "allowPrivileged: true\n", &[]);
    let mut mounts = Mounts(Vec::new());
    let shared = a.dir.0.join("shared");
    let private = a.dir.0.join("private");
    let out = a.dir.0.join("out");
    std::fs::create_dir_all(&out).unwrap();
    mounts.bind_self(&shared, "--make-rshared");
    mounts.bind_self(&private, "--make-private");
    let volumes = |path: &Path| {
        format!(
            "  volumes:\n  - {{name: h, hostPath: {{path: {}}}}}\n  - {{name: out, hostPath: {{path: {}}}}}\n",
            path.display(),
            out.display()
        )
    };
    // the container copies what it sees below the hostPath to `out`
    let watcher = |name: &str, path: &Path| {
        pod_yaml(
            name,
            &volumes(path),
            &format!(
                "trap 'exit 0' TERM; while :; do cat /h/sub/marker > /out/{name}.tmp 2>/dev/null && mv /out/{name}.tmp /out/{name}; sleep 0.2; done"
            ),
        ) + "    volumeMounts:\n    - {name: h, mountPath: /h, mountPropagation: HostToContainer}\n    - {name: out, mountPath: /out}\n"
    };
    a.write("h2c.yaml", &watcher("h2c", &shared));
    a.write("refused.yaml", &watcher("refused", &private));
    let bidi = pod_yaml(
        "bidi",
        &volumes(&shared),
        "mkdir -p /h/fromc && mount -t tmpfs tmpfs /h/fromc && echo inside > /h/fromc/m; trap 'exit 0' TERM; while :; do sleep 1; done",
    ) + "    securityContext: {privileged: true}\n    volumeMounts:\n    - {name: h, mountPath: /h, mountPropagation: Bidirectional}\n";
    a.write("bidi.yaml", &bidi);
    let h2c = a.uid("h2c");
    let refused = a.uid("refused");
    let bidi = a.uid("bidi");
    wait_for("h2c running", Duration::from_secs(30), || a.running(&h2c) == 1);
    // a mount the host makes after the container started reaches it
    let sub = shared.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    Mounts::run(&["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", sub.to_str().unwrap()]);
    std::fs::write(sub.join("marker"), "from the host\n").unwrap();
    wait_for("the container sees the host's new mount", Duration::from_secs(10), || {
        std::fs::read_to_string(out.join("h2c")).is_ok_and(|s| s == "from the host\n")
    });
    // the privileged container's mount reaches the host
    wait_for("the host sees the container's mount", Duration::from_secs(30), || {
        std::fs::read_to_string(shared.join("fromc/m")).is_ok_and(|s| s == "inside\n")
    });
    assert_eq!(a.running(&bidi), 1);
    // on a private mount containerd refuses HostToContainer
    let mut waiting = String::new();
    wait_for("refused on a private mount", Duration::from_secs(30), || {
        let w = a.pod("refused").map(|p| p["status"]["containerStatuses"][0]["state"]["waiting"].clone());
        waiting = w.map(|w| format!("{} {}", w["reason"], w["message"])).unwrap_or_default();
        waiting.contains("CreateContainerError")
    });
    assert!(waiting.contains("is not a shared or slave mount"), "{waiting}");
    assert_eq!(a.running(&refused), 0);
    a.clean_up(&[&h2c, &refused, &bidi]);
    drop(mounts);
}

/// Probes on containerd: an httpGet readiness probe (busybox httpd on the
/// pod IP, files the test controls through a hostPath) flips Ready both
/// ways; a tcpSocket liveness probe on a named port keeps the container; an
/// exec startup and liveness probe hold back and then restart the other
/// container with the probe's grace period.
#[test]
fn probes_of_each_handler_drive_ready_and_restarts_on_containerd() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("probes");
    let www = a.root().parent().unwrap().join("probe-www");
    let state = a.root().parent().unwrap().join("probe-state");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(www.join("index.html"), "up\n").unwrap();
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: probed, namespace: e2e}}\nspec:\n  terminationGracePeriodSeconds: 30\n  volumes:\n  - {{name: www, hostPath: {{path: {www}}}}}\n  - {{name: state, hostPath: {{path: {state}}}}}\n  containers:\n  - name: web\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; httpd -f -p 8080 -h /www & while :; do sleep 1; done\"]\n    ports: [{{name: http, containerPort: 8080}}]\n    volumeMounts: [{{name: www, mountPath: /www}}]\n    readinessProbe:\n      httpGet: {{path: /ready.html, port: http}}\n      periodSeconds: 1\n      failureThreshold: 1\n    livenessProbe:\n      tcpSocket: {{port: http}}\n      periodSeconds: 1\n  - name: worker\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"touch /state/healthy; echo $$ >> /state/starts; trap '' TERM; while :; do sleep 1; done\"]\n    volumeMounts: [{{name: state, mountPath: /state}}]\n    startupProbe:\n      exec: {{command: [test, -f, /state/healthy]}}\n      periodSeconds: 1\n    livenessProbe:\n      exec: {{command: [cat, /state/healthy]}}\n      periodSeconds: 1\n      failureThreshold: 2\n      terminationGracePeriodSeconds: 2\n",
        www = www.display(),
        state = state.display(),
    );
    a.write("probed.yaml", &pod);
    let uid = a.uid("probed");
    let status = |name: &str| {
        a.pod("probed")
            .and_then(|p| p["status"]["containerStatuses"].as_array()?.iter().find(|c| c["name"] == name).cloned())
    };
    let condition = |kind: &str| {
        a.pod("probed").and_then(|p| {
            p["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == kind).map(|c| c["status"].clone())
        })
    };
    wait_for("both running", Duration::from_secs(30), || a.running(&uid) == 2);
    // web: running, not ready (404 for /ready.html); worker started and ready
    wait_for("the readiness failure event", Duration::from_secs(10), || {
        a.log().contains("Readiness probe failed: HTTP probe failed with statuscode: 404")
    });
    wait_for("worker started and ready", Duration::from_secs(10), || {
        status("worker").is_some_and(|c| c["started"] == true && c["ready"] == true)
    });
    assert_eq!(status("web").unwrap()["ready"], false);
    assert_eq!(condition("Ready"), Some(serde_json::json!("False")));
    // the page appears: ready within a period or two
    let t = std::time::Instant::now();
    std::fs::write(www.join("ready.html"), "ok\n").unwrap();
    wait_for("web ready", Duration::from_secs(5), || status("web").is_some_and(|c| c["ready"] == true));
    wait_for("pod Ready", Duration::from_secs(5), || condition("Ready") == Some(serde_json::json!("True")));
    eprintln!("ready after {:?}", t.elapsed());
    // and goes: not ready again, the container is never restarted for it
    std::fs::remove_file(www.join("ready.html")).unwrap();
    wait_for("web not ready", Duration::from_secs(5), || status("web").is_some_and(|c| c["ready"] == false));
    assert_eq!(status("web").unwrap()["restartCount"], 0, "readiness and a passing tcp liveness never restart");
    // the worker's liveness fails twice: killed with the probe's 2 s grace
    // (it ignores SIGTERM) and started again, which recreates the file
    std::fs::remove_file(state.join("healthy")).unwrap();
    let t = std::time::Instant::now();
    wait_for("worker restarted", Duration::from_secs(20), || {
        status("worker").is_some_and(|c| c["restartCount"] == 1 && c["state"]["running"].is_object())
    });
    let took = t.elapsed();
    assert!(took < Duration::from_secs(10), "two failures, a 2 s grace, a restart: {took:?}");
    assert!(a.log().contains("Container worker failed liveness probe, will be restarted"), "{}", a.log());
    assert!(a.log().contains("Liveness probe failed: cat: can't open '/state/healthy': No such file or directory"));
    // running is reported before the new shell has written its line
    wait_for("the second start's line", Duration::from_secs(5), || {
        std::fs::read_to_string(state.join("starts")).is_ok_and(|s| s.lines().count() == 2)
    });
    let metrics = a.get("/metrics").unwrap();
    for series in [
        "prober_probe_total{container=\"web\",namespace=\"e2e\",pod=\"probed\",probe_type=\"Readiness\"",
        "prober_probe_total{container=\"web\",namespace=\"e2e\",pod=\"probed\",probe_type=\"Liveness\"",
        "prober_probe_total{container=\"worker\",namespace=\"e2e\",pod=\"probed\",probe_type=\"Startup\"",
        "prober_probe_duration_seconds_count{container=\"worker\",namespace=\"e2e\",pod=\"probed\",probe_type=\"Liveness\"}",
    ] {
        assert!(metrics.lines().any(|l| l.starts_with(series)), "{series} in:\n{metrics}");
    }
    // describe shows each container's probes and the probe events
    let out = std::process::Command::new(BIN)
        .args(["describe", "pod", "probed", "-n", "e2e", "--socket", a.api_socket().to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "    Readiness:      http-get http://:http/ready.html delay=0s timeout=1s period=1s #success=1 #failure=1",
        "    Liveness:       tcp-socket :http delay=0s timeout=1s period=1s #success=1 #failure=3",
        "    Startup:        exec [test -f /state/healthy] delay=0s timeout=1s period=1s #success=1 #failure=3",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
    }
    assert!(text.contains("Unhealthy") && text.contains("Killing"), "{text}");
    a.clean_up(&[&uid]);
}

/// Probes and hooks naming a host by name on containerd: the agent looks
/// `localhost` up (the node's resolver) and probes the node's HTTPS server
/// by it, SNI and `Host` carrying the name; a preStop `httpGet` hook
/// reaches a plain server by name; a name with no address fails the probe
/// with Go's lookup error and keeps its container unready, while the other
/// container becomes ready.
#[test]
fn probes_and_hooks_by_host_name_on_containerd() {
    let _serial = SERIAL.lock();
    let tls = https_server("127.0.0.1");
    // a plain server on the node recording the requests it gets
    let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let plain_port = plain.local_addr().unwrap().port();
    let (seen_tx, seen) = crossbeam_channel::unbounded::<String>();
    podwarden::base::thread::spawn("test-http", None, move || {
        use std::io::{Read, Write};
        for conn in plain.incoming() {
            let Ok(mut c) = conn else { return };
            let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = vec![0u8; 4096];
            let mut n = 0;
            while !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") && n < buf.len() {
                match c.read(&mut buf[n..]) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => n += k,
                }
            }
            let _ = seen_tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        }
    })
    .unwrap();
    let mut a = Agent::start("probe-host-names");
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: named, namespace: e2e}}\nspec:\n  terminationGracePeriodSeconds: 5\n  containers:\n  - name: web\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sh, -c, {TRAPPING:?}]\n    readinessProbe:\n      httpGet: {{host: localhost, port: {}, scheme: HTTPS, path: /healthz}}\n      periodSeconds: 1\n    livenessProbe:\n      tcpSocket: {{host: localhost, port: {plain_port}}}\n      periodSeconds: 1\n    lifecycle:\n      preStop:\n        httpGet: {{host: localhost, port: {plain_port}, path: /pre-stop}}\n  - name: lost\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sh, -c, {TRAPPING:?}]\n    readinessProbe:\n      tcpSocket: {{host: nothing-here.invalid, port: 80}}\n      periodSeconds: 1\n",
        tls.port
    );
    a.write("named.yaml", &pod);
    let uid = a.uid("named");
    wait_for("running", Duration::from_secs(30), || a.running(&uid) == 2);
    let ready = |i: usize| a.pod("named").map(|p| p["status"]["containerStatuses"][i]["ready"].clone());
    wait_for("web ready through localhost", Duration::from_secs(10), || ready(1) == Some(serde_json::json!(true)));
    wait_for("the lookup failure event", Duration::from_secs(30), || {
        a.log().contains("Readiness probe failed: dial tcp: lookup nothing-here.invalid: ")
    });
    assert_eq!(ready(0), Some(serde_json::json!(false)), "the container probing a name with no address");
    let restarts = a.pod("named").map(|p| p["status"]["containerStatuses"][1]["restartCount"].clone());
    assert_eq!(restarts, Some(serde_json::json!(0)), "the liveness probe by name passes");
    while seen.try_recv().is_ok() {}
    a.remove("named.yaml");
    wait_for("stopped", Duration::from_secs(30), || a.running(&uid) == 0);
    let hook = seen.try_iter().find(|r| r.starts_with("GET /pre-stop ")).expect("the preStop hook's request");
    assert!(hook.contains(&format!("Host: localhost:{plain_port}\r\n")), "{hook}");
    assert!(hook.contains("User-Agent: kube-lifecycle/"), "{hook}");
    a.clean_up(&[&uid]);
}

/// Lifecycle hooks on containerd: postStart runs in the started
/// container; preStop runs before the stop signal when the manifest goes.
#[test]
fn post_start_and_pre_stop_hooks_run_in_the_container_on_containerd() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("hooks");
    let state = a.root().parent().unwrap().join("hook-state");
    std::fs::create_dir_all(&state).unwrap();
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: hooked, namespace: e2e}}\nspec:\n  terminationGracePeriodSeconds: 10\n  volumes: [{{name: state, hostPath: {{path: {}}}}}]\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"trap 'echo term >> /state/log; exit 0' TERM; while :; do sleep 0.2; done\"]\n    volumeMounts: [{{name: state, mountPath: /state}}]\n    lifecycle:\n      postStart:\n        exec: {{command: [sh, -c, \"echo post >> /state/log\"]}}\n      preStop:\n        exec: {{command: [sh, -c, \"echo pre >> /state/log; sleep 1\"]}}\n",
        state.display()
    );
    a.write("hooked.yaml", &pod);
    let uid = a.uid("hooked");
    wait_for("running", Duration::from_secs(30), || a.running(&uid) == 1);
    wait_for("the postStart hook's line", Duration::from_secs(10), || {
        std::fs::read_to_string(state.join("log")).is_ok_and(|s| s.contains("post"))
    });
    let t = std::time::Instant::now();
    a.remove("hooked.yaml");
    wait_for("stopped", Duration::from_secs(30), || a.running(&uid) == 0);
    let took = t.elapsed();
    let log = std::fs::read_to_string(state.join("log")).unwrap();
    assert_eq!(log, "post\npre\nterm\n", "preStop before the stop signal");
    assert!(took >= Duration::from_secs(1), "the hook's sleep ran before the stop: {took:?}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    a.clean_up(&[&uid]);
}

/// A gRPC readiness probe on containerd: `grpc.health.v1.Health/Check`
/// against a health server on the node (a host-network pod's IP is the
/// node's), Ready following SERVING and NOT_SERVING.
#[test]
fn grpc_probe_follows_the_health_service_on_containerd() {
    let _serial = SERIAL.lock();
    let server = podwarden::pod::prober::grpc::test_server::HealthServer::start("0.0.0.0", 0).unwrap();
    server.set_serving(false);
    let mut a = Agent::start("grpc-probe");
    let pod = pod_yaml("grpcd", "  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n", TRAPPING).replace(
        "    command:",
        &format!("    readinessProbe:\n      grpc: {{port: {}}}\n      periodSeconds: 1\n      failureThreshold: 1\n    command:", server.port),
    );
    a.write("grpcd.yaml", &pod);
    let uid = a.uid("grpcd");
    wait_for("running", Duration::from_secs(30), || a.running(&uid) == 1);
    wait_for("the NOT_SERVING event", Duration::from_secs(10), || {
        a.log().contains("Readiness probe failed: service unhealthy (responded with \"NOT_SERVING\")")
    });
    let ready = || a.pod("grpcd").map(|p| p["status"]["containerStatuses"][0]["ready"].clone());
    assert_eq!(ready(), Some(serde_json::json!(false)));
    server.set_serving(true);
    wait_for("ready once SERVING", Duration::from_secs(5), || ready() == Some(serde_json::json!(true)));
    server.set_serving(false);
    wait_for("not ready again", Duration::from_secs(5), || ready() == Some(serde_json::json!(false)));
    a.clean_up(&[&uid]);
}

/// `podwarden get pods` for one pod: its READY, STATUS and RESTARTS.
fn get_pod_columns(a: &Agent, name: &str) -> Vec<String> {
    let out = std::process::Command::new(BIN)
        .args(["get", "pods", name, "-n", "e2e", "--socket"])
        .arg(a.api_socket())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines().nth(1).map(|l| l.split_whitespace().skip(1).take(3).map(str::to_string).collect()).unwrap_or_default()
}

/// Init containers on containerd: one at a time in order before the app
/// container, a failed one retried, statuses as the kubelet's; an agent
/// restart adopting the running pod runs none again; a new sandbox (the
/// old one stopped behind the agent's back) runs them all again before
/// the app, restart counts going on.
#[test]
fn init_containers_run_in_order_and_again_in_a_new_sandbox_on_containerd() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("init");
    let state = a.root().parent().unwrap().join("init-state");
    std::fs::create_dir_all(&state).unwrap();
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: initd, namespace: e2e}}\nspec:\n  terminationGracePeriodSeconds: 2\n  volumes: [{{name: state, hostPath: {{path: {}}}}}]\n  initContainers:\n  - name: first\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sh, -c, \"echo first >> /state/log\"]\n    volumeMounts: [{{name: state, mountPath: /state}}]\n  - name: second\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sh, -c, \"if [ -e /state/failed-once ]; then echo second >> /state/log; else touch /state/failed-once; echo second-failed >> /state/log; exit 1; fi\"]\n    volumeMounts: [{{name: state, mountPath: /state}}]\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sh, -c, \"echo main >> /state/log; trap 'exit 0' TERM; while :; do sleep 0.2; done\"]\n    volumeMounts: [{{name: state, mountPath: /state}}]\n",
        state.display()
    );
    let log = || std::fs::read_to_string(state.join("log")).unwrap_or_default();
    a.write("initd.yaml", &pod);
    let uid = a.uid("initd");
    wait_for("main runs", Duration::from_secs(60), || log().contains("main"));
    assert_eq!(log(), "first\nsecond-failed\nsecond\nmain\n", "in order, the failed one again, then the app");
    wait_for("the status says Running", Duration::from_secs(10), || {
        get_pod_columns(&a, "initd")[..2] == ["1/1", "Running"]
    });
    let p = a.pod("initd").unwrap();
    let st = &p["status"];
    let inits = st["initContainerStatuses"].as_array().unwrap();
    assert_eq!(inits[0]["name"], "first");
    assert_eq!(inits[0]["state"]["terminated"]["reason"], "Completed");
    assert_eq!(inits[0]["ready"], true);
    assert_eq!(inits[1]["restartCount"], 1);
    assert_eq!(inits[1]["lastState"]["terminated"]["exitCode"], 1);
    let cond =
        |t: &str| st["conditions"].as_array().unwrap().iter().find(|c| c["type"] == t).unwrap()["status"].clone();
    assert_eq!(cond("Initialized"), "True");
    assert_eq!(cond("Ready"), "True");

    // an agent restart adopts the running pod: nothing runs again
    a.kill9();
    a.spawn();
    assert_holds_for("no init container runs on adoption", Duration::from_secs(4), || {
        log() == "first\nsecond-failed\nsecond\nmain\n"
    });
    assert_eq!(a.pod("initd").unwrap()["status"]["phase"], "Running");

    // the sandbox dies: a new one, the init containers first again
    let sandbox = a.runtime_pod(&uid).ready_sandbox().unwrap().id.clone();
    a.cri.stop_sandbox(&call(), &sandbox).unwrap();
    wait_for("main runs in the new sandbox", Duration::from_secs(60), || log().matches("main").count() == 2);
    assert_eq!(log(), "first\nsecond-failed\nsecond\nmain\nfirst\nsecond\nmain\n");
    wait_for("Running again", Duration::from_secs(10), || get_pod_columns(&a, "initd")[..2] == ["1/1", "Running"]);
    let p = a.pod("initd").unwrap();
    let inits = p["status"]["initContainerStatuses"].as_array().unwrap().clone();
    assert_eq!(inits[0]["restartCount"], 1, "counts go on in the new sandbox: {inits:?}");
    assert_eq!(inits[1]["restartCount"], 2, "{inits:?}");
    let logs_dir = a.root().parent().unwrap().join("logs").join(format!("e2e_initd_{uid}")).join("first");
    assert!(logs_dir.join("0.log").is_file() && logs_dir.join("1.log").is_file(), "one log per run of first");
    a.clean_up(&[&uid]);
}

/// Under restartPolicy Never a failed init container fails the pod:
/// `Init:Error`, nothing after it runs.
#[test]
fn a_failed_init_container_fails_a_never_pod_on_containerd() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("init-never");
    let pod = pod_yaml("doomed", "  restartPolicy: Never\n  terminationGracePeriodSeconds: 1\n", TRAPPING).replace(
        "  containers:\n",
        &format!("  initContainers:\n  - name: bad\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sh, -c, \"exit 3\"]\n  - name: never\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"true\"]\n  containers:\n"),
    );
    a.write("doomed.yaml", &pod);
    let uid = a.uid("doomed");
    wait_for("failed", Duration::from_secs(60), || a.pod("doomed").is_some_and(|p| p["status"]["phase"] == "Failed"));
    assert_eq!(get_pod_columns(&a, "doomed"), ["0/1", "Init:Error", "0"]);
    let p = a.pod("doomed").unwrap();
    assert_eq!(p["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"], 3);
    let names: Vec<String> = a.runtime_pod(&uid).containers.iter().map(|c| c.name.clone()).collect();
    assert_eq!(names, ["bad"], "neither the second init container nor the app ran");
    a.clean_up(&[&uid]);
}

/// Sidecars on containerd: each started (its startup probe passed) before
/// the next init container; one that exits is started again; the app
/// completing finishes the pod (Succeeded) though sidecars run; they stop
/// after the app, in reverse order.
#[test]
fn sidecars_start_in_turn_restart_and_stop_last_on_containerd() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("sidecars");
    let state = a.root().parent().unwrap().join("sidecar-state");
    std::fs::create_dir_all(&state).unwrap();
    let mount = "    volumeMounts: [{name: state, mountPath: /state}]\n";
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: sided, namespace: e2e}}\nspec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 10\n  volumes: [{{name: state, hostPath: {{path: {}}}}}]\n  initContainers:\n  - name: proxy\n    image: {IMAGE}\n    imagePullPolicy: Never\n    restartPolicy: Always\n    command: [sh, -c, \"trap 'echo proxy-term >> /state/log; exit 0' TERM; sleep 2; touch /tmp/up; echo proxy-up >> /state/log; while :; do sleep 0.2; done\"]\n    startupProbe:\n      exec: {{command: [test, -e, /tmp/up]}}\n      periodSeconds: 1\n      failureThreshold: 30\n{mount}  - name: setup\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sh, -c, \"echo setup >> /state/log\"]\n{mount}  - name: logger\n    image: {IMAGE}\n    imagePullPolicy: Never\n    restartPolicy: Always\n    command: [sh, -c, \"trap 'echo logger-term >> /state/log; exit 0' TERM; echo logger >> /state/log; while [ ! -e /state/stop-logger ]; do sleep 0.2; done; rm /state/stop-logger; echo logger-exit >> /state/log; exit 1\"]\n{mount}  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sh, -c, \"echo main >> /state/log; while [ ! -e /state/stop-main ]; do sleep 0.2; done; echo main-done >> /state/log\"]\n{mount}",
        state.display()
    );
    let log = || std::fs::read_to_string(state.join("log")).unwrap_or_default();
    a.write("sided.yaml", &pod);
    let uid = a.uid("sided");
    wait_for("main runs", Duration::from_secs(60), || log().contains("main"));
    assert_eq!(log(), "proxy-up\nsetup\nlogger\nmain\n", "each init container in turn, the proxy once started");
    wait_for("3/3 Running", Duration::from_secs(10), || get_pod_columns(&a, "sided")[..2] == ["3/3", "Running"]);
    // a sidecar that exits is started again (the pod's policy is Never)
    std::fs::write(state.join("stop-logger"), "").unwrap();
    wait_for("logger again", Duration::from_secs(30), || log().ends_with("logger-exit\nlogger\n"));
    wait_for("logger's restart counted", Duration::from_secs(10), || {
        a.pod("sided").is_some_and(|p| p["status"]["initContainerStatuses"][2]["restartCount"] == 1)
    });
    // the app completes: the sidecars stop after it, the last one first
    std::fs::write(state.join("stop-main"), "").unwrap();
    wait_for("succeeded", Duration::from_secs(60), || {
        a.pod("sided").is_some_and(|p| p["status"]["phase"] == "Succeeded")
    });
    wait_for("all stopped", Duration::from_secs(30), || a.running(&uid) == 0);
    assert_eq!(
        log(),
        "proxy-up\nsetup\nlogger\nmain\nlogger-exit\nlogger\nmain-done\nlogger-term\nproxy-term\n",
        "the sidecars stop after the app, in reverse order"
    );
    a.clean_up(&[&uid]);
}

/// The machine's memory as the agent reads it (MemTotal).
fn mem_total_bytes() -> i64 {
    let m = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: i64 =
        m.lines().find(|l| l.starts_with("MemTotal:")).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// QoS classes and OOM score adjustments on containerd, read from the
/// kernel inside each container (`/proc/self/oom_score_adj`): BestEffort
/// 1000, Burstable by the kubelet's formula from the memory request, and
/// Guaranteed -997, which containerd (`restrict_oom_score_adj`) raises to
/// its own score where it may not go lower (this machine: no
/// CAP_SYS_RESOURCE). `qosClass` in the status and in `describe`.
#[test]
fn qos_classes_and_oom_scores_on_containerd() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("qos");
    let state = a.root().parent().unwrap().join("qos-state");
    std::fs::create_dir_all(&state).unwrap();
    let pod = |name: &str, resources: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: e2e}}\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes: [{{name: state, hostPath: {{path: {}}}}}]\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sh, -c, \"cat /proc/self/oom_score_adj > /state/{name}; {TRAPPING}\"]\n    volumeMounts: [{{name: state, mountPath: /state}}]\n    resources: {resources}\n",
            state.display()
        )
    };
    a.write("be.yaml", &pod("besteffort", "{}"));
    a.write("bu.yaml", &pod("burstable", "{requests: {memory: 256Mi}}"));
    a.write("gu.yaml", &pod("guaranteed", "{limits: {cpu: 100m, memory: 64Mi}}"));
    let uids: Vec<String> = ["besteffort", "burstable", "guaranteed"].iter().map(|n| a.uid(n)).collect();
    let score = |name: &str| std::fs::read_to_string(state.join(name)).ok().and_then(|s| s.trim().parse::<i64>().ok());
    wait_for("every container wrote its score", Duration::from_secs(30), || {
        ["besteffort", "burstable", "guaranteed"].iter().all(|n| score(n).is_some())
    });
    assert_eq!(score("besteffort"), Some(1000));
    let expected = (1000 - 1000 * (256i64 << 20) / mem_total_bytes()).clamp(3, 999);
    assert_eq!(score("burstable"), Some(expected));
    let containerd_pid = containerd_pid().expect("the e2e containerd's pid file");
    let containerd_adj: i64 =
        std::fs::read_to_string(format!("/proc/{containerd_pid}/oom_score_adj")).unwrap().trim().parse().unwrap();
    assert_eq!(score("guaranteed"), Some((-997i64).max(containerd_adj)));
    for (name, class) in [("besteffort", "BestEffort"), ("burstable", "Burstable"), ("guaranteed", "Guaranteed")] {
        let p = a.pod(name).unwrap();
        assert_eq!(p["status"]["qosClass"], class, "{name}");
    }
    let out = std::process::Command::new(BIN)
        .args(["describe", "pod", "burstable", "-n", "e2e", "--socket"])
        .arg(a.api_socket())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("QoS Class:    Burstable\n"), "{out:?}");
    let refs: Vec<&str> = uids.iter().map(String::as_str).collect();
    a.clean_up(&refs);
}

/// activeDeadlineSeconds on containerd: the pod is killed when it has been
/// active that long and ends Failed with the kubelet's reason and message,
/// although its container exits 0 on the stop signal.
#[test]
fn active_deadline_fails_the_pod_on_containerd() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("deadline");
    a.write(
        "dl.yaml",
        &pod_yaml("deadline", "  activeDeadlineSeconds: 3\n  terminationGracePeriodSeconds: 5\n", TRAPPING),
    );
    let uid = a.uid("deadline");
    wait_for("running", Duration::from_secs(30), || a.running(&uid) == 1);
    let t = std::time::Instant::now();
    wait_for("stopped at the deadline", Duration::from_secs(15), || a.running(&uid) == 0);
    let p = a.pod("deadline").unwrap();
    assert!(t.elapsed() >= Duration::from_secs(1), "stopped too early: {:?}", t.elapsed());
    assert_eq!(p["status"]["phase"], "Failed", "{p}");
    assert_eq!(p["status"]["reason"], "DeadlineExceeded");
    assert_eq!(p["status"]["message"], "Pod was active on the node longer than the specified deadline");
    assert!(a.log().contains("DeadlineExceeded: Pod was active on the node longer than the specified deadline"));
    // a pod of the past stays failed: not restarted
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(a.running(&uid), 0);
    a.clean_up(&[&uid]);
}

/// The security context on containerd, read from the kernel inside the
/// containers: user, group and supplementary groups (`fsGroup` first),
/// `Seccomp:` and `NoNewPrivs:` of `/proc/self/status` for RuntimeDefault,
/// Unconfined and a Localhost profile under `<rootDir>/seccomp` (which
/// denies mkdir), a safe sysctl's value, one PID namespace for the pod
/// (`shareProcessNamespace`). `runAsNonRoot` against the image's user
/// (root) stops the container with the kubelet's message; an unsafe
/// sysctl and an AppArmor profile on this host without AppArmor are
/// refused at admission with the kubelet's reasons.
#[test]
fn security_context_reaches_the_kernel_on_containerd() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("security");
    let state = a.root().parent().unwrap().join("sec-state");
    std::fs::create_dir_all(&state).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let profiles = a.root().join("seccomp/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("no-mkdir.json"),
        r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let report = "id > /state/$N.id; grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status > /state/$N.status; \
                  cat /proc/sys/net/ipv4/ip_local_port_range > /state/$N.sysctl; ls /proc | grep -c '^[0-9]' > /state/$N.procs; \
                  touch /scratch/$N; stat -c '%g %a' /scratch /scratch/$N > /state/$N.scratch; \
                  if mkdir /scratch/d.$N 2>/dev/null; then echo made > /state/$N.mkdir; else echo denied > /state/$N.mkdir; fi; ";
    let container = |name: &str, sc: &str| {
        format!(
            "  - name: {name}\n    image: {IMAGE}\n    imagePullPolicy: Never\n    env: [{{name: N, value: {name}}}]\n    command: [sh, -c, {:?}]\n    volumeMounts: [{{name: state, mountPath: /state}}, {{name: scratch, mountPath: /scratch}}]\n    securityContext: {sc}\n",
            format!("{report}{TRAPPING}")
        )
    };
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: secure, namespace: e2e}}\nspec:\n  terminationGracePeriodSeconds: 1\n  shareProcessNamespace: true\n  securityContext:\n    runAsUser: 1000\n    runAsGroup: 3000\n    fsGroup: 2000\n    supplementalGroups: [4000]\n    seccompProfile: {{type: RuntimeDefault}}\n    sysctls: [{{name: net.ipv4.ip_local_port_range, value: \"20000 30000\"}}]\n  volumes: [{{name: state, hostPath: {{path: {}}}}}, {{name: scratch, emptyDir: {{}}}}]\n  containers:\n{}{}{}",
        state.display(),
        container("confined", "{allowPrivilegeEscalation: false}"),
        container("open", "{seccompProfile: {type: Unconfined}, runAsUser: 1001}"),
        container("local", "{seccompProfile: {type: Localhost, localhostProfile: profiles/no-mkdir.json}}"),
    );
    a.write("secure.yaml", &pod);
    let root_image = pod_yaml("rooted", "  securityContext: {runAsNonRoot: true}\n", TRAPPING);
    a.write("rooted.yaml", &root_image);
    let unsafe_sysctl =
        pod_yaml("tuned", "  securityContext:\n    sysctls: [{name: net.core.somaxconn, value: \"1024\"}]\n", TRAPPING);
    a.write("tuned.yaml", &unsafe_sysctl);
    let armored = pod_yaml("armored", "  securityContext:\n    appArmorProfile: {type: RuntimeDefault}\n", TRAPPING);
    a.write("armored.yaml", &armored);
    let uid = a.uid("secure");
    let read = |f: &str| std::fs::read_to_string(state.join(f)).unwrap_or_default();
    wait_for("every container reported", Duration::from_secs(30), || {
        ["confined", "open", "local"].iter().all(|n| !read(&format!("{n}.mkdir")).is_empty())
    });
    assert_eq!(read("confined.id").trim(), "uid=1000 gid=3000 groups=2000,3000,4000");
    assert_eq!(read("open.id").trim(), "uid=1001 gid=3000 groups=2000,3000,4000");
    assert_eq!(read("confined.status"), "NoNewPrivs:\t1\nSeccomp:\t2\n");
    assert_eq!(read("open.status"), "NoNewPrivs:\t0\nSeccomp:\t0\n");
    assert_eq!(read("local.status"), "NoNewPrivs:\t0\nSeccomp:\t2\n");
    assert_eq!(read("local.mkdir").trim(), "denied", "the Localhost profile denies mkdir");
    // fsGroup: the emptyDir is the group's and setgid, so new files are too
    assert_eq!(read("open.scratch"), "2000 2777\n2000 644\n");
    assert_eq!(read("confined.mkdir").trim(), "made", "RuntimeDefault allows mkdir");
    assert_eq!(read("confined.sysctl").split_whitespace().collect::<Vec<_>>(), ["20000", "30000"]);
    // one PID namespace: each container sees the pause process and the
    // others' shells, not just its own
    let procs: usize = read("confined.procs").trim().parse().unwrap();
    assert!(procs >= 4, "a shared PID namespace shows the pod's processes, saw {procs}");
    let waiting =
        || a.pod("rooted").map(|p| p["status"]["containerStatuses"][0]["state"]["waiting"].clone()).unwrap_or_default();
    wait_for("runAsNonRoot refused", Duration::from_secs(30), || waiting()["reason"] == "CreateContainerConfigError");
    let rooted_uid = a.uid("rooted");
    assert_eq!(
        waiting()["message"],
        format!(
            "container has runAsNonRoot and image will run as root (pod: \"rooted_e2e({rooted_uid})\", container: main)"
        )
    );
    let tuned = a.pod("tuned").unwrap();
    assert_eq!(tuned["status"]["reason"], "SysctlForbidden");
    assert_eq!(
        tuned["status"]["message"],
        "Pod was rejected: forbidden sysctl: \"net.core.somaxconn\" not allowlisted"
    );
    let armored = a.pod("armored").unwrap();
    assert_eq!(armored["status"]["reason"], "AppArmor");
    assert_eq!(
        armored["status"]["message"],
        "Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host"
    );
    a.clean_up(&[&uid, &rooted_uid]);
}

/// An HTTPS server on `ip` with the test certificate (self-signed, for
/// another name).
fn https_server(ip: &str) -> podwarden::pod::prober::net::test_tls::HttpsServer {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls");
    podwarden::pod::prober::net::test_tls::HttpsServer::start(ip, &dir.join("cert.pem"), &dir.join("key.pem")).unwrap()
}

/// An HTTPS readiness probe on containerd: a host-network pod probing an
/// HTTPS server on the node whose certificate is self-signed for another
/// name (no certificate checks, as the kubelet); Ready follows its status.
#[test]
fn https_probe_skips_certificate_checks_on_containerd() {
    let _serial = SERIAL.lock();
    let server = https_server("0.0.0.0");
    server.set_status(503);
    let mut a = Agent::start("https-probe");
    let pod = pod_yaml("tlsd", "  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n", TRAPPING).replace(
        "    command:",
        &format!(
            "    readinessProbe:\n      httpGet: {{port: {}, scheme: HTTPS, path: /healthz}}\n      periodSeconds: 1\n      failureThreshold: 1\n    command:",
            server.port
        ),
    );
    a.write("tlsd.yaml", &pod);
    let uid = a.uid("tlsd");
    wait_for("running", Duration::from_secs(30), || a.running(&uid) == 1);
    wait_for("the 503 event", Duration::from_secs(10), || {
        a.log().contains("Readiness probe failed: HTTP probe failed with statuscode: 503")
    });
    let ready = || a.pod("tlsd").map(|p| p["status"]["containerStatuses"][0]["ready"].clone());
    assert_eq!(ready(), Some(serde_json::json!(false)));
    server.set_status(200);
    wait_for("ready once it answers 200", Duration::from_secs(5), || ready() == Some(serde_json::json!(true)));
    a.clean_up(&[&uid]);
}

fn image_names() -> Vec<String> {
    let out =
        Command::new("ctr").args(["--address", &socket(), "-n", "k8s.io", "images", "ls", "-q"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

fn extra_image(name: &str) {
    let ok = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/e2e-env.sh"))
        .args(["extra-image", name, "256"])
        .status()
        .unwrap()
        .success();
    assert!(ok, "scripts/e2e-env.sh extra-image {name} failed (is the environment up? scripts/e2e-env.sh up)");
}

#[test]
fn unused_images_are_garbage_collected_and_images_in_use_and_the_sandbox_image_stay_on_containerd() {
    let _serial = SERIAL.lock();
    for n in ["a", "b", "c"] {
        extra_image(&format!("localhost/gc-{n}:e2e"));
    }
    // every byte over the threshold: all unused images old enough go
    let mut a = Agent::start_with(
        "imagegc",
        "imageGCHighThresholdPercent: 1\nimageGCLowThresholdPercent: 0\nimageMinimumGCAge: 8s\nimageGCPeriod: 2s\n",
        &[],
    );
    a.write("user.yaml", &pod_yaml("user", "", TRAPPING));
    let uid = a.uid("user");
    wait_for("the pod running", Duration::from_secs(30), || a.running(&uid) == 1);
    wait_for("the unused images removed", Duration::from_secs(30), || {
        !image_names().iter().any(|n| n.starts_with("localhost/gc-"))
    });
    let names = image_names();
    assert!(names.contains(&IMAGE.to_string()), "the image in use stays: {names:?}");
    assert!(names.contains(&"localhost/pause:e2e".to_string()), "the sandbox image stays: {names:?}");
    // a new image is young: it stays for imageMinimumGCAge, then goes
    extra_image("localhost/gc-d:e2e");
    let t = Instant::now();
    assert_holds_for("a young image stays", Duration::from_secs(5), || {
        image_names().contains(&"localhost/gc-d:e2e".to_string())
    });
    wait_for("the young image removed once old enough", Duration::from_secs(20), || {
        !image_names().contains(&"localhost/gc-d:e2e".to_string())
    });
    assert!(t.elapsed() >= Duration::from_secs(7), "removed after {:?}", t.elapsed());
    // counted when the collection that removed them ends
    wait_for("4 images counted", Duration::from_secs(10), || {
        let m = a.get("/metrics").unwrap_or_default();
        metric(&m, "kubelet_image_garbage_collected_total{reason=\"space\"}").is_some_and(|n| n >= 4.0)
    });
    // the disk cannot get to 0 %: the kubelet's warning on the node
    let events = a.get("/events").unwrap_or_default();
    assert!(a.log().contains("FreeDiskSpaceFailed") || events.contains("FreeDiskSpaceFailed"), "{}", a.log());
    assert!(a.log().contains("Attempted to free "), "{}", a.log());
    a.clean_up(&[&uid]);
}

/// A tmpfs of `mib` MiB mounted at `dir` until dropped.
struct SmallFs(PathBuf);

impl SmallFs {
    fn mount(dir: &Path, mib: u64) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "cannot mount a tmpfs at {}", dir.display());
        SmallFs(dir.to_path_buf())
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn node_condition(a: &Agent, kind: &str) -> Value {
    let node: Value = serde_json::from_str(&a.get("/node").unwrap_or_default()).unwrap_or_default();
    node["node"]["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind).cloned())
        .unwrap_or_default()
}

/// Disk pressure on a real small filesystem: `rootDir` on a 64 MiB tmpfs,
/// `nodefs.available<50%`. The pod that fills its emptyDir is evicted
/// with the kubelet's reason and message, the quiet one runs on, a new pod
/// is refused while the node has DiskPressure; once the pressure has been
/// gone for the transition period the evicted pod is admitted again.
#[test]
fn disk_pressure_evicts_the_pod_that_fills_the_disk_and_admits_it_again_later_on_containerd() {
    let _serial = SERIAL.lock();
    let state = std::env::temp_dir().join(format!("podwarden-evict-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).unwrap();
    let mut fs = None;
    let mut a = Agent::start_prepared(
        "diskpressure",
        "evictionHard: {nodefs.available: 50%}\nevictionPressureTransitionPeriod: 4s\n",
        |dir| fs = Some(SmallFs::mount(&dir.join("root"), 64)),
    );
    let _fs = fs;
    let filler = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: filler, namespace: e2e}}\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes: [{{name: scratch, emptyDir: {{}}}}, {{name: state, hostPath: {{path: {}}}}}]\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sh, -c, \"if [ ! -e /state/filled ]; then touch /state/filled; head -c 40000000 /dev/zero > /scratch/big; fi; trap 'exit 0' TERM; while :; do sleep 1; done\"]\n    volumeMounts: [{{name: scratch, mountPath: /scratch}}, {{name: state, mountPath: /state}}]\n",
        state.display()
    );
    a.write("quiet.yaml", &pod_yaml("quiet", "", TRAPPING));
    let quiet = a.uid("quiet");
    wait_for("the quiet pod running", Duration::from_secs(30), || a.running(&quiet) == 1);
    assert_eq!(node_condition(&a, "DiskPressure")["status"], "False", "no pressure yet");
    a.write("filler.yaml", &filler);
    let uid = a.uid("filler");
    wait_for("the filler evicted", Duration::from_secs(60), || {
        a.pod("filler").is_some_and(|p| p["status"]["reason"] == "Evicted" && p["status"]["phase"] == "Failed")
    });
    let st = a.pod("filler").unwrap()["status"].clone();
    let msg = st["message"].as_str().unwrap();
    assert!(
        msg.starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: 32Mi, available: "),
        "{msg}"
    );
    let c = node_condition(&a, "DiskPressure");
    assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("True"), Some("KubeletHasDiskPressure")), "{c}");
    // admission refuses new pods under disk pressure, the kubelet's way
    a.write("late.yaml", &pod_yaml("late", "", TRAPPING));
    wait_for("the late pod rejected", Duration::from_secs(20), || {
        a.pod("late")
            .is_some_and(|p| p["status"]["message"] == "Pod was rejected: The node had condition: [DiskPressure]. ")
    });
    assert_eq!(a.running(&quiet), 1, "the quiet pod runs on");
    // the evicted pod's volume is gone: the pressure ends, and after the
    // transition period both pods come (back)
    wait_for("the filler admitted again and running", Duration::from_secs(60), || {
        a.pod("filler").is_some_and(|p| p["status"]["phase"] == "Running")
    });
    assert_eq!(node_condition(&a, "DiskPressure")["status"], "False");
    wait_for("the late pod admitted", Duration::from_secs(20), || {
        a.pod("late").is_some_and(|p| p["status"]["phase"] == "Running")
    });
    let metrics = a.get("/metrics").unwrap();
    assert_eq!(metric(&metrics, "kubelet_evictions{eviction_signal=\"nodefs.available\"}"), Some(1.0));
    let late = a.uid("late");
    a.clean_up(&[&quiet, &uid, &late]);
    let _ = std::fs::remove_dir_all(&state);
}

/// Memory pressure in a cgroup of limited size: `kubepods` made just
/// larger than the threshold above what the pods use, so a BestEffort pod
/// taking 40 MB crosses `allocatableMemory.available` (the kubelet's copy
/// of `memory.available<100Mi` for the pods' cgroup) without the machine
/// running short. The hog is evicted, BestEffort pods are refused and
/// Burstable ones admitted under MemoryPressure.
#[test]
fn memory_pressure_in_the_pods_cgroup_evicts_the_best_effort_hog_on_containerd() {
    let _serial = SERIAL.lock();
    let state = std::env::temp_dir().join(format!("podwarden-mem-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).unwrap();
    let mut a = Agent::start_with(
        "mempressure",
        "evictionHard: {memory.available: 100Mi}\nevictionPressureTransitionPeriod: 4s\n",
        &[("RUST_LOG", "info,podwarden::agent::eviction=debug")],
    );
    a.write("steady.yaml", &(pod_yaml("steady", "", TRAPPING) + "    resources: {requests: {memory: 64Mi}}\n"));
    let steady = a.uid("steady");
    wait_for("the steady pod running", Duration::from_secs(30), || a.running(&steady) == 1);
    let limit = PathBuf::from("/sys/fs/cgroup/memory/kubepods/memory.limit_in_bytes");
    let _restore = Restore(limit.clone(), std::fs::read_to_string(&limit).unwrap().trim().to_string());
    let usage: i64 = std::fs::read_to_string("/sys/fs/cgroup/memory/kubepods/memory.usage_in_bytes")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // the working set, as the kubelet counts it: inactive file pages are
    // reclaimable, so they count as available
    let inactive: i64 = std::fs::read_to_string("/sys/fs/cgroup/memory/kubepods/memory.stat")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("total_inactive_file ")?.trim().parse().ok())
        .unwrap();
    std::fs::write(&limit, (usage - inactive + (120 << 20)).to_string()).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(node_condition(&a, "MemoryPressure")["status"], "False", "120 MiB left, the threshold 100: no pressure");
    let hog = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: hog, namespace: e2e}}\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes: [{{name: state, hostPath: {{path: {}}}}}]\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sh, -c, \"if [ ! -e /state/hogged ]; then touch /state/hogged; s=$(head -c 40000000 /dev/zero | tr '\\\\0' x); fi; trap 'exit 0' TERM; while :; do sleep 1; done\"]\n    volumeMounts: [{{name: state, mountPath: /state}}]\n",
        state.display()
    );
    a.write("hog.yaml", &hog);
    let uid = a.uid("hog");
    wait_for("the hog evicted", Duration::from_secs(60), || {
        a.pod("hog").is_some_and(|p| p["status"]["reason"] == "Evicted")
    });
    let msg = a.pod("hog").unwrap()["status"]["message"].as_str().unwrap().to_string();
    assert!(msg.starts_with("The node was low on resource: memory. Threshold quantity: 100Mi, available: "), "{msg}");
    assert!(
        msg.contains("Container main was using ") && msg.ends_with("request is 0, has larger consumption of memory. "),
        "{msg}"
    );
    assert_eq!(node_condition(&a, "MemoryPressure")["reason"], "KubeletHasInsufficientMemory");
    a.write("be.yaml", &pod_yaml("be", "", TRAPPING));
    a.write("bu.yaml", &(pod_yaml("bu", "", TRAPPING) + "    resources: {requests: {memory: 8Mi}}\n"));
    wait_for("BestEffort refused, Burstable admitted", Duration::from_secs(20), || {
        a.pod("be")
            .is_some_and(|p| p["status"]["message"] == "Pod was rejected: The node had condition: [MemoryPressure]. ")
            && a.pod("bu").is_some_and(|p| p["status"]["phase"] == "Running")
    });
    assert_eq!(a.running(&steady), 1, "the steady pod runs on");
    drop(_restore);
    let (be, bu) = (a.uid("be"), a.uid("bu"));
    a.clean_up(&[&steady, &uid, &be, &bu]);
    let _ = std::fs::remove_dir_all(&state);
}

/// An emptyDir over its `sizeLimit`: the pod is evicted with the kubelet's
/// message whatever the node has left, and stays Failed (it would fill the
/// volume again).
#[test]
fn an_empty_dir_over_its_size_limit_evicts_its_pod_for_good_on_containerd() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("sizelimit");
    a.write(
        "over.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: over, namespace: e2e}}\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes: [{{name: scratch, emptyDir: {{sizeLimit: 1Mi}}}}]\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [sh, -c, \"head -c 4000000 /dev/zero > /scratch/big; trap 'exit 0' TERM; while :; do sleep 1; done\"]\n    volumeMounts: [{{name: scratch, mountPath: /scratch}}]\n"
        ),
    );
    let uid = a.uid("over");
    wait_for("the pod evicted", Duration::from_secs(40), || {
        a.pod("over").is_some_and(|p| p["status"]["reason"] == "Evicted")
    });
    assert_eq!(
        a.pod("over").unwrap()["status"]["message"],
        "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". "
    );
    wait_for("its containers stopped", Duration::from_secs(20), || a.running(&uid) == 0);
    assert_holds_for("it stays evicted", Duration::from_secs(6), || {
        a.pod("over").is_some_and(|p| p["status"]["reason"] == "Evicted") && a.running(&uid) == 0
    });
    a.clean_up(&[&uid]);
}

/// `sha256:<hex>` of `bytes` (sha256sum).
fn sha256(bytes: &[u8]) -> String {
    let mut c = Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    c.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = String::from_utf8(c.wait_with_output().unwrap().stdout).unwrap();
    format!("sha256:{}", out.split_whitespace().next().unwrap())
}

/// A registry on 127.0.0.1 (plain HTTP, as containerd 1.6 speaks to a
/// loopback registry without hosts.toml) that serves the manifest and
/// config of `stall/busybox:1` and then stalls in the middle of its layer:
/// 64 KiB of a 10 MiB blob, then nothing, until dropped. It records the
/// paths asked for.
struct StallingRegistry {
    addr: String,
    asked: Arc<Mutex<Vec<String>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl StallingRegistry {
    fn start() -> Self {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let config: Vec<u8> = br#"{"architecture":"amd64","os":"linux","config":{},"rootfs":{"type":"layers","diff_ids":["sha256:0000000000000000000000000000000000000000000000000000000000000000"]}}"#.to_vec();
        let layer_digest = sha256(b"a layer that never arrives");
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{{"mediaType":"application/vnd.docker.container.image.v1+json","size":{},"digest":"{}"}},"layers":[{{"mediaType":"application/vnd.docker.image.rootfs.diff.tar","size":10485760,"digest":"{layer_digest}"}}]}}"#,
            config.len(),
            sha256(&config)
        );
        let (asked, stop) = (Arc::new(Mutex::new(Vec::new())), Arc::new(std::sync::atomic::AtomicBool::new(false)));
        let (a, s) = (asked.clone(), stop.clone());
        listener.set_nonblocking(true).unwrap();
        podwarden::base::thread::spawn("stall-registry", None, move || {
            while !s.load(Ordering::Relaxed) {
                let Ok((conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                conn.set_nonblocking(false).unwrap();
                let (a, s, config, manifest, layer) = (a.clone(), s.clone(), config.clone(), manifest.clone(), layer_digest.clone());
                podwarden::base::thread::spawn("stall-conn", None, move || {
                    let mut conn = conn;
                    let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
                    loop {
                        let mut line = String::new();
                        if std::io::BufRead::read_line(&mut reader, &mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        // the rest of the head
                        loop {
                            let mut h = String::new();
                            if std::io::BufRead::read_line(&mut reader, &mut h).unwrap_or(0) == 0 || h == "\r\n" {
                                break;
                            }
                        }
                        let mut parts = line.split_whitespace();
                        let (method, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default().to_string());
                        a.lock().push(format!("{method} {path}"));
                        let (ctype, body): (&str, Vec<u8>) = if path == "/v2/" {
                            ("application/json", b"{}".to_vec())
                        } else if path.ends_with("/manifests/1") || path.ends_with(&format!("/manifests/{}", sha256(manifest.as_bytes()))) {
                            ("application/vnd.docker.distribution.manifest.v2+json", manifest.clone().into_bytes())
                        } else if path.ends_with(&format!("/blobs/{}", sha256(&config))) {
                            ("application/octet-stream", config.clone())
                        } else if path.ends_with(&format!("/blobs/{layer}")) {
                            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 10485760\r\n\r\n";
                            let _ = conn.write_all(head.as_bytes());
                            let _ = conn.write_all(&vec![0u8; 64 << 10]);
                            while !s.load(Ordering::Relaxed) {
                                std::thread::sleep(Duration::from_millis(50));
                            }
                            return;
                        } else {
                            let _ = conn.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
                            continue;
                        };
                        let digest = sha256(&body);
                        let head = format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nDocker-Content-Digest: {digest}\r\nDocker-Distribution-Api-Version: registry/2.0\r\nContent-Length: {}\r\n\r\n",
                            body.len()
                        );
                        let _ = conn.write_all(head.as_bytes());
                        if method != "HEAD" {
                            let _ = conn.write_all(&body);
                        }
                    }
                })
                .unwrap();
            }
        })
        .unwrap();
        StallingRegistry { addr, asked, stop }
    }

    fn image(&self) -> String {
        format!("{}/stall/busybox:1", self.addr)
    }

    fn layer_asked(&self) -> bool {
        self.asked.lock().iter().any(|p| p.contains("/blobs/") && !p.contains("HEAD"))
    }
}

impl Drop for StallingRegistry {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn a_stalled_pull_is_cut_by_lack_of_progress_and_a_pod_in_a_stalled_pull_can_be_deleted() {
    let _serial = SERIAL.lock();
    let reg = StallingRegistry::start();
    let yaml = |name: &str| {
        pod_yaml(name, "", TRAPPING)
            .replace(IMAGE, &reg.image())
            .replace("imagePullPolicy: Never", "imagePullPolicy: IfNotPresent")
    };
    // without a progress deadline the pull waits forever, and deleting the
    // pod still ends it at once
    let mut a = Agent::start_with("stall", "imagePullProgressDeadline: 0s\n", &[]);
    a.write("p.yaml", &yaml("stalled"));
    let uid = a.uid("stalled");
    wait_for("the layer download began", Duration::from_secs(30), || reg.layer_asked());
    assert_holds_for("the pull waits (no deadline)", Duration::from_secs(3), || {
        a.pod("stalled")
            .is_some_and(|p| p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] != "ErrImagePull")
    });
    let t = Instant::now();
    a.remove("p.yaml");
    wait_for("the pod is gone from /pods", Duration::from_secs(10), || a.pod("stalled").is_none());
    eprintln!("deleted during a stalled pull in {:?}", t.elapsed());
    a.clean_up(&[&uid]);
    drop(a);
    // with a deadline of 3s, the stalled download is cancelled
    let mut a = Agent::start_with("stall", "imagePullProgressDeadline: 3s\n", &[]);
    a.write("p.yaml", &yaml("cut"));
    let uid = a.uid("cut");
    let mut message = String::new();
    wait_for("the stalled pull is cut", Duration::from_secs(30), || {
        a.pod("cut").is_some_and(|p| {
            let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
            message = w["message"].as_str().unwrap_or_default().to_string();
            w["reason"] == "ErrImagePull"
        })
    });
    assert!(message.contains("no progress for") && message.contains("imagePullProgressDeadline"), "{message}");
    assert!(a.log().contains("no progress for"), "logged");
    assert!(a.child.as_mut().unwrap().try_wait().unwrap().is_none(), "the agent keeps running");
    a.clean_up(&[&uid]);
}

/// PIDs available now, as podwarden counts them: `pid_max` less the
/// kernel's count of processes and threads.
fn pids_available() -> i64 {
    let max: i64 = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap();
    let used: i64 = loadavg.split_whitespace().nth(3).unwrap().split_once('/').unwrap().1.parse().unwrap();
    max - used
}

/// A soft `pid.available` threshold a little below what the node has now:
/// a pod that starts 200 processes crosses it (nothing near exhausting
/// the machine's PIDs). PIDPressure shows at once; the pod with the most
/// processes is evicted only after the soft grace period, with the
/// kubelet's message and `evictionMaxPodGracePeriod`.
#[test]
fn a_soft_pid_threshold_evicts_the_pod_with_most_processes_after_its_grace_period_on_containerd() {
    let _serial = SERIAL.lock();
    let threshold = pids_available() - 100;
    let mut a = Agent::start_with(
        "pidpressure",
        &format!(
            "evictionSoft: {{pid.available: \"{threshold}\"}}\nevictionSoftGracePeriod: {{pid.available: 4s}}\n\
             evictionMaxPodGracePeriod: 2\n"
        ),
        &[("RUST_LOG", "info,podwarden::agent::eviction=debug")],
    );
    a.write("steady.yaml", &pod_yaml("steady", "", TRAPPING));
    let steady = a.uid("steady");
    wait_for("the steady pod running", Duration::from_secs(30), || a.running(&steady) == 1);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(node_condition(&a, "PIDPressure")["status"], "False", "100 PIDs of margin: no pressure");
    a.write(
        "forks.yaml",
        &pod_yaml(
            "forks",
            "  terminationGracePeriodSeconds: 30\n",
            "for i in $(seq 200); do sleep 1000 & done; trap '' TERM; while :; do sleep 1; done",
        ),
    );
    let forks = a.uid("forks");
    let mut pressure_at = None;
    wait_for("PIDPressure", Duration::from_secs(30), || {
        let c = node_condition(&a, "PIDPressure");
        (c["status"] == "True").then(|| pressure_at = Some(Instant::now())).is_some()
    });
    let pressure_at = pressure_at.unwrap();
    assert_eq!(node_condition(&a, "PIDPressure")["reason"], "KubeletHasInsufficientPID");
    assert!(a.pod("forks").is_some_and(|p| p["status"]["reason"] != "Evicted"), "not evicted before the grace period");
    wait_for("the forking pod evicted", Duration::from_secs(30), || {
        a.pod("forks").is_some_and(|p| p["status"]["reason"] == "Evicted")
    });
    let waited = pressure_at.elapsed();
    assert!(
        waited >= Duration::from_millis(3000),
        "evicted {waited:?} after the pressure showed; the grace period is 4s"
    );
    let msg = a.pod("forks").unwrap()["status"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with(&format!("The node was low on resource: pids. Threshold quantity: {threshold}, available: ")),
        "{msg}"
    );
    // it ignores SIGTERM: its own 30 s grace period, capped by
    // evictionMaxPodGracePeriod, ends in SIGKILL after 2 s
    wait_for("the forking pod stopped well before its own 30 s", Duration::from_secs(12), || a.running(&forks) == 0);
    assert_eq!(a.running(&steady), 1, "the steady pod runs on");
    a.clean_up(&[&steady, &forks]);
}

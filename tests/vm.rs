//! podwarden on the machine its users run: a Debian 12 VM (QEMU, TCG) with
//! systemd as PID 1, cgroup v2, AppArmor, journald, logind and Debian's
//! containerd, made by `scripts/vm-env.sh` from Debian's packages. Nothing
//! inside the VM is faked: the package is installed with apt, the unit runs
//! under systemd, logs go to the journal.
//!
//! Needs: the VM image (`scripts/vm-env.sh build`), the e2e images
//! (`scripts/e2e-env.sh up`) and the `.deb` to test in `PODWARDEN_DEB`
//! (`scripts/package.sh --profile ci`); `scripts/test.sh` prepares all
//! three. The VMs run one at a time (a lock), each with a hard time limit.

mod guest;

use guest::*;
use std::time::Duration;

const WEB: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - name: c
    image: localhost/busybox:e2e
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done"]
"#;

/// The container IDs and restart counts of every pod, one line each.
const CONTAINERS: &str =
    "podwarden get pods -A -o json | tr -d ' ' | tr ',' '\\n' | grep -E '\"(containerID|restartCount)\"' | sort";

#[test]
fn the_deb_on_a_real_systemd_machine() {
    let deb = deb();
    let _one = ONE_AT_A_TIME.lock();
    let vm = Vm::up("pw-deb");
    vm.put(&deb, "/root/podwarden.deb");

    // apt installs it with what the machine has (no network in the VM): the
    // unit is enabled, not started
    vm.sh("apt-get install -y -q /root/podwarden.deb >/root/apt.log 2>&1 || { cat /root/apt.log; exit 1; }");
    assert_eq!(vm.sh("systemctl is-enabled podwarden").trim(), "enabled");
    assert_eq!(vm.run("systemctl is-active podwarden").stdout, b"inactive\n", "installing must not start it");
    assert!(vm.sh("ls -d /etc/systemd/logind.conf.d").contains("logind.conf.d"), "the package makes the drop-in dir");

    // configure graceful shutdown, a static pod, then start: Type=notify,
    // active only after READY
    vm.sh(
        "sed -i 's/^#\\? *shutdownGracePeriod: .*/shutdownGracePeriod: 20s/; \
         s/^#\\? *shutdownGracePeriodCriticalPods: .*/shutdownGracePeriodCriticalPods: 5s/' /etc/podwarden/config.yaml && \
         echo '# edited by the administrator' >> /etc/podwarden/config.yaml",
    );
    vm.sh(&format!("cat > /etc/podwarden/manifests/web.yaml <<'EOF'\n{WEB}EOF"));
    vm.sh("rm -rf /etc/systemd/logind.conf.d && systemctl start podwarden");
    let show = vm.sh("systemctl show podwarden -p Type -p ActiveState -p SubState -p NRestarts");
    for want in ["Type=notify", "ActiveState=active", "SubState=running", "NRestarts=0"] {
        assert!(show.contains(want), "systemctl show: {show}");
    }
    vm.wait(
        "the static pod Running",
        Duration::from_secs(300),
        "podwarden get pods -A | grep -E '^default +web +1/1 +Running'",
    );

    // graceful node shutdown is on: the drop-in (its directory made again by
    // the unit before podwarden starts), logind took it, podwarden holds
    // the delay lock
    let dropin = vm.sh("cat /etc/systemd/logind.conf.d/99-podwarden.conf");
    assert!(dropin.contains("InhibitDelayMaxSec=20"), "{dropin}");
    let delay =
        vm.sh("busctl get-property org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager InhibitDelayMaxUSec");
    assert_eq!(delay.trim(), "t 20000000");
    let locks = vm.sh("systemd-inhibit --list --no-pager --no-legend");
    assert!(
        locks.lines().any(|l| l.starts_with("podwarden") && l.contains("shutdown") && l.ends_with("delay")),
        "{locks}"
    );

    // the journal keeps podwarden's priorities: a broken manifest is a warning
    vm.sh("echo 'kind: [' > /etc/podwarden/manifests/broken.yaml");
    let warning = vm.wait(
        "the broken manifest in the journal at warning",
        Duration::from_secs(180),
        "journalctl -u podwarden -o json --no-pager | grep broken.yaml | grep '\"PRIORITY\":\"4\"'",
    );
    assert!(warning.contains("broken.yaml"));
    vm.sh("rm /etc/podwarden/manifests/broken.yaml");

    // reinstalling restarts the agent, not the containers, and keeps the
    // edited config
    let before = vm.sh(CONTAINERS);
    assert!(before.contains("\"restartCount\":0"), "{before}");
    let pid = vm.sh("systemctl show podwarden -p MainPID --value");
    vm.sh(
        "apt-get install -y -q --reinstall /root/podwarden.deb >/root/apt.log 2>&1 || { cat /root/apt.log; exit 1; }",
    );
    vm.wait(
        "the agent restarted",
        Duration::from_secs(180),
        &format!(
            "test \"$(systemctl show podwarden -p MainPID --value)\" != {} && systemctl is-active podwarden",
            pid.trim()
        ),
    );
    vm.wait(
        "the pod Running after the restart",
        Duration::from_secs(180),
        "podwarden get pods -A | grep -E '^default +web +1/1 +Running'",
    );
    assert_eq!(vm.sh(CONTAINERS), before, "same containers, no restart, after the reinstall");
    assert!(vm.sh("cat /etc/podwarden/config.yaml").contains("# edited by the administrator"));

    // purge: the agent, its files and its logind drop-in go; the pods'
    // containers keep running (as a removed kubelet's do) and the manifests
    // the administrator wrote stay
    vm.sh("apt-get purge -y -q podwarden >/root/apt.log 2>&1 || { cat /root/apt.log; exit 1; }");
    assert!(vm.run("test -e /usr/bin/podwarden").status.code() == Some(1), "binary removed");
    assert!(vm.run("test -e /etc/podwarden/config.yaml").status.code() == Some(1), "config removed");
    assert!(vm.run("test -e /etc/systemd/logind.conf.d/99-podwarden.conf").status.code() == Some(1), "drop-in removed");
    assert!(vm.run("test -e /var/lib/podwarden").status.code() == Some(1), "state removed");
    assert!(vm.sh("cat /etc/podwarden/manifests/web.yaml").contains("name: web"), "the administrator's manifests stay");
    assert_eq!(vm.run("systemctl is-active podwarden").stdout, b"inactive\n");
    let running = vm.sh("ctr -n k8s.io tasks ls | grep -c RUNNING || true");
    assert!(running.trim().parse::<u32>().unwrap_or(0) >= 2, "the pod's sandbox and container still run: {running}");
}

#[test]
fn cgroup_v2_pod_limits_and_oom_scores_read_back_from_the_kernel() {
    let _one = ONE_AT_A_TIME.lock();
    let vm = Vm::up("pw-cgroupv2");
    let (burstable, guaranteed, besteffort) = qos_pods();
    let hog = pod_yaml(
        "hog",
        "    resources:\n      limits: {memory: 16Mi}\n",
        "x=0123456789abcdef; while true; do x=$x$x; done",
    );
    install_and_start(
        &vm,
        &["cgroupDriver: cgroupfs", "podPidsLimit: 123"],
        &[("burstable", &burstable), ("guaranteed", &guaranteed), ("besteffort", &besteffort), ("hog", &hog)],
    );
    for name in ["burstable", "guaranteed", "besteffort"] {
        vm.wait(
            &format!("{name} Running"),
            Duration::from_secs(300),
            &format!("podwarden get pods -A | grep -E '^default +{name} +1/1 +Running'"),
        );
    }
    let cg = "/sys/fs/cgroup";
    assert_eq!(vm.sh(&format!("stat -fc %T {cg}")).trim(), "cgroup2fs", "the VM runs the unified hierarchy");

    // the pod level, as the kubelet sets it
    let b = uid_of(&vm, "burstable");
    let read = |path: String| vm.sh(&format!("cat {path}")).trim().to_string();
    assert_eq!(read(format!("{cg}/kubepods/burstable/pod{b}/memory.max")), "67108864");
    assert_eq!(read(format!("{cg}/kubepods/burstable/pod{b}/cpu.max")), "50000 100000");
    // cpu.shares 102 (100m) as cpu.weight: 1 + (102 - 2) * 9999 / 262142
    assert_eq!(read(format!("{cg}/kubepods/burstable/pod{b}/cpu.weight")), "4");
    assert_eq!(read(format!("{cg}/kubepods/burstable/pod{b}/pids.max")), "123");
    let g = uid_of(&vm, "guaranteed");
    assert_eq!(read(format!("{cg}/kubepods/pod{g}/memory.max")), "50331648");
    assert_eq!(read(format!("{cg}/kubepods/pod{g}/cpu.max")), "20000 100000");
    let e = uid_of(&vm, "besteffort");
    assert_eq!(read(format!("{cg}/kubepods/besteffort/pod{e}/memory.max")), "max");
    // cpu.shares 2 for BestEffort: weight 1
    assert_eq!(read(format!("{cg}/kubepods/besteffort/cpu.weight")), "1");

    // kubepods carries the allocatable podwarden computed and logged
    let logged =
        vm.sh("journalctl -u podwarden --no-pager | grep -o 'kubepods limited to [0-9]*m CPU and [0-9]* bytes'");
    let bytes = logged.split_whitespace().nth(6).expect("bytes in the log line").to_string();
    assert_eq!(read(format!("{cg}/kubepods/memory.max")), bytes, "{logged}");

    // oom_score_adj by QoS, not clamped (root in the VM has CAP_SYS_RESOURCE)
    // (the container's own process: the sandbox's pause process gets -998)
    let score = |name: &str| {
        let list = pods(&vm);
        let pod = list["items"].as_array().into_iter().flatten().find(|p| p["metadata"]["name"] == name);
        let id = pod
            .and_then(|p| p["status"]["containerStatuses"][0]["containerID"].as_str())
            .and_then(|id| id.strip_prefix("containerd://"))
            .unwrap_or_else(|| panic!("no container ID for {name}: {list}"))
            .to_string();
        vm.sh(&format!("cat /proc/$(ctr -n k8s.io tasks ls | awk '$1 == \"{id}\" {{print $2}}')/oom_score_adj"))
            .trim()
            .to_string()
    };
    assert_eq!(score("guaranteed"), "-997", "Guaranteed");
    assert_eq!(score("besteffort"), "1000", "BestEffort");
    let burst_score: i64 = score("burstable").parse().expect("one score");
    assert!((2..1000).contains(&burst_score), "Burstable between 2 and 999: {burst_score}");

    // a container over its memory limit is killed by the kernel: OOMKilled
    vm.wait(
        "the hog OOMKilled",
        Duration::from_secs(300),
        "podwarden get pods -A -o json | tr -d ' ' | grep -q '\"reason\":\"OOMKilled\"'",
    );
}

//! The systemd cgroup driver on the machine its users run: the Debian 12
//! VM (`scripts/vm-env.sh`, systemd 252, cgroup v2, Debian's containerd)
//! with containerd switched to `SystemdCgroup = true` and podwarden to
//! `cgroupDriver: systemd`. The slices podwarden starts through systemd's
//! D-Bus API are read back from the kernel (`/sys/fs/cgroup/kubepods.slice`)
//! and from systemd (`systemctl show`): the pods' limits, the QoS levels,
//! `kubepods.slice` at the allocatable, huge pages on a pod's slice, a
//! deleted pod's slice stopped, an orphan's removed by housekeeping, and
//! with `cgroupDriver` unset containerd's driver taken.
//!
//! Needs what tests/vm.rs needs: the VM image (`scripts/vm-env.sh build`),
//! the e2e images (`scripts/e2e-env.sh up`) and the `.deb` in
//! `PODWARDEN_DEB` (`scripts/package.sh --profile ci`).

mod guest;

use guest::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const CG: &str = "/sys/fs/cgroup";

/// `systemctl show <unit> -p ...` as a map.
fn show(vm: &Vm, unit: &str) -> BTreeMap<String, String> {
    vm.sh(&format!("systemctl show {unit} -p MemoryMax -p CPUWeight -p CPUQuotaPerSecUSec -p TasksMax -p ActiveState"))
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn read(vm: &Vm, path: &str) -> String {
    vm.sh(&format!("cat {path}")).trim().to_string()
}

/// The pod's slice: (unit, directory).
fn slice(qos: Option<&str>, uid: &str) -> (String, String) {
    let uid = uid.replace('-', "_");
    match qos {
        None => (format!("kubepods-pod{uid}.slice"), format!("{CG}/kubepods.slice/kubepods-pod{uid}.slice")),
        Some(q) => (
            format!("kubepods-{q}-pod{uid}.slice"),
            format!("{CG}/kubepods.slice/kubepods-{q}.slice/kubepods-{q}-pod{uid}.slice"),
        ),
    }
}

/// podwarden.service as systemd sees it now: ActiveState, SubState,
/// Result, ExecMainStatus, NRestarts.
fn agent_unit(vm: &Vm) -> BTreeMap<String, String> {
    vm.sh("systemctl show podwarden -p ActiveState -p SubState -p Result -p ExecMainStatus -p NRestarts")
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The agent does not start, as systemd sees it: over about ten seconds
/// (its restarts are 2 s apart, Restart=always) podwarden.service is never
/// active, and is seen failed, or waiting to restart, after a main process
/// that exited non-zero. A journal line alone would pass with an agent that
/// logs the problem and runs on.
fn assert_does_not_start(vm: &Vm, what: &str) {
    let out = vm
        .sh("for i in $(seq 20); do systemctl show podwarden -p ActiveState -p SubState -p Result -p ExecMainStatus \
         | tr '\\n' ' '; echo; sleep 0.5; done");
    let looks: Vec<BTreeMap<&str, &str>> =
        out.lines().map(|l| l.split_whitespace().filter_map(|kv| kv.split_once('=')).collect()).collect();
    assert_eq!(looks.len(), 20, "{what}: {looks:?}");
    assert!(looks.iter().all(|u| u["ActiveState"] != "active"), "{what}: the agent runs: {looks:?}");
    assert!(
        looks.iter().any(|u| matches!(u["SubState"], "failed" | "auto-restart")
            && u["Result"] != "success"
            && u["ExecMainStatus"] != "0"),
        "{what}: never seen failed: {looks:?}"
    );
    vm.note(&format!("{what}: podwarden.service {:?}", looks.last().unwrap()));
}

/// Waits until systemd has no unit `unit` and its directory is gone;
/// how long that took.
fn wait_gone(vm: &Vm, what: &str, unit: &str, dir: &str) -> Duration {
    let t = Instant::now();
    vm.wait(
        what,
        Duration::from_secs(90),
        &format!("! systemctl list-units --all --plain --no-legend 'kubepods*' | grep -q {unit} && ! test -e {dir}"),
    );
    t.elapsed()
}

#[test]
fn systemd_driver_slices_read_back_from_systemd_and_the_kernel() {
    let started = Instant::now();
    let _one = ONE_AT_A_TIME.lock();
    let vm = Vm::up("pw-sysd");
    assert_eq!(vm.sh(&format!("stat -fc %T {CG}")).trim(), "cgroup2fs", "the VM runs the unified hierarchy");
    // containerd's runc with the systemd cgroup driver
    vm.sh("sed -i 's/SystemdCgroup = false/SystemdCgroup = true/' /etc/containerd/config.toml \
         && grep -q 'SystemdCgroup = true' /etc/containerd/config.toml && systemctl restart containerd");
    vm.wait("containerd answers", Duration::from_secs(60), "ctr version >/dev/null");

    let (burstable, guaranteed, besteffort) = qos_pods();
    // BestEffort with an init container: its app container is created in a
    // later pass than the sandbox, and must land in the pod's slice too
    let besteffort = besteffort.replace(
        "  containers:\n",
        "  initContainers:\n  - name: init\n    image: localhost/busybox:e2e\n    command: [\"true\"]\n  containers:\n",
    );
    assert!(besteffort.contains("initContainers"), "{besteffort}");
    // huge pages: requests equal to limits, with a memory request
    let huge = pod_yaml("huge", "    resources:\n      limits: {memory: 32Mi, hugepages-2Mi: 4Mi}\n", SLEEP);
    install_and_start(
        &vm,
        &["cgroupDriver: systemd", "podPidsLimit: 123"],
        &[("burstable", &burstable), ("guaranteed", &guaranteed), ("besteffort", &besteffort), ("huge", &huge)],
    );
    let t = Instant::now();
    for name in ["burstable", "guaranteed", "besteffort", "huge"] {
        vm.wait(
            &format!("{name} Running"),
            Duration::from_secs(300),
            &format!("podwarden get pods -A | grep -E '^default +{name} +1/1 +Running'"),
        );
    }
    eprintln!("four pods Running after {:?}", t.elapsed());

    // kubepods.slice carries the allocatable podwarden computed and logged
    let logged =
        vm.sh("journalctl -u podwarden --no-pager | grep -o 'kubepods limited to [0-9]*m CPU and [0-9]* bytes'");
    let bytes = logged.split_whitespace().nth(6).expect("bytes in the log line").to_string();
    assert_eq!(read(&vm, &format!("{CG}/kubepods.slice/memory.max")), bytes, "{logged}");
    let kp = show(&vm, "kubepods.slice");
    assert_eq!(kp["MemoryMax"], bytes, "{kp:?}");
    assert_eq!(kp["ActiveState"], "active", "{kp:?}");
    eprintln!("kubepods.slice: {kp:?} ({logged})");

    // Burstable: the pod's limits, podPidsLimit as TasksMax
    let b = uid_of(&vm, "burstable");
    let (unit, dir) = slice(Some("burstable"), &b);
    assert_eq!(read(&vm, &format!("{dir}/memory.max")), "67108864");
    assert_eq!(read(&vm, &format!("{dir}/cpu.max")), "50000 100000");
    // cpu.shares 102 (100m) as cpu.weight: 1 + (102 - 2) * 9999 / 262142
    assert_eq!(read(&vm, &format!("{dir}/cpu.weight")), "4");
    assert_eq!(read(&vm, &format!("{dir}/pids.max")), "123");
    // no huge pages asked for: none allowed (the kubelet's 0)
    assert_eq!(read(&vm, &format!("{dir}/hugetlb.2MB.max")), "0");
    let s = show(&vm, &unit);
    assert_eq!(
        (s["MemoryMax"].as_str(), s["CPUWeight"].as_str(), s["CPUQuotaPerSecUSec"].as_str(), s["TasksMax"].as_str()),
        ("67108864", "4", "500ms", "123"),
        "{unit}: {s:?}"
    );
    // the container runs inside the pod's slice (containerd's scope in it)
    let procs = vm.sh(&format!("cat $(find {dir} -name cgroup.procs) | wc -l"));
    assert!(procs.trim().parse::<u32>().unwrap_or(0) >= 2, "the pause and the container process in {dir}: {procs}");

    // Guaranteed: directly under kubepods.slice
    let g = uid_of(&vm, "guaranteed");
    let (gunit, gdir) = slice(None, &g);
    assert_eq!(read(&vm, &format!("{gdir}/memory.max")), "50331648");
    assert_eq!(read(&vm, &format!("{gdir}/cpu.max")), "20000 100000");
    assert_eq!(read(&vm, &format!("{gdir}/pids.max")), "123");
    let s = show(&vm, &gunit);
    assert_eq!(
        (s["MemoryMax"].as_str(), s["CPUQuotaPerSecUSec"].as_str(), s["TasksMax"].as_str()),
        ("50331648", "200ms", "123"),
        "{gunit}: {s:?}"
    );

    // BestEffort: the level's weight (2 shares), the pod unlimited
    assert_eq!(read(&vm, &format!("{CG}/kubepods.slice/kubepods-besteffort.slice/cpu.weight")), "1");
    assert_eq!(show(&vm, "kubepods-besteffort.slice")["CPUWeight"], "1");
    let e = uid_of(&vm, "besteffort");
    let (eunit, edir) = slice(Some("besteffort"), &e);
    assert_eq!(read(&vm, &format!("{edir}/memory.max")), "max");
    assert_eq!(read(&vm, &format!("{edir}/cpu.max")), "max 100000");
    assert_eq!(read(&vm, &format!("{edir}/cpu.weight")), "1");
    assert_eq!(show(&vm, &eunit)["MemoryMax"], "infinity");
    // its container, made after the init container's exit, in the slice
    let procs = vm.sh(&format!("cat $(find {edir} -name cgroup.procs) | wc -l"));
    assert!(
        procs.trim().parse::<u32>().unwrap_or(0) >= 2,
        "the pause and the container made after the init container in {edir}: {procs}"
    );

    // huge pages on the pod's slice, written beside systemd
    let h = uid_of(&vm, "huge");
    let (_, hdir) = slice(Some("burstable"), &h);
    assert_eq!(read(&vm, &format!("{hdir}/hugetlb.2MB.max")), "4194304");
    assert_eq!(read(&vm, &format!("{hdir}/memory.max")), "33554432");

    // a deleted pod's slice is stopped: systemd forgets it, its cgroup goes
    vm.sh("rm /etc/podwarden/manifests/burstable.yaml");
    let took = wait_gone(&vm, "the deleted pod's slice gone", &unit, &dir);
    eprintln!("burstable's slice gone {took:?} after its manifest was removed");

    // an orphan: the agent stopped, the pod's manifest removed meanwhile;
    // the restarted agent kills the pod and housekeeping removes its slice
    vm.sh("systemctl stop podwarden && rm /etc/podwarden/manifests/besteffort.yaml");
    assert!(vm.run(&format!("test -d {edir}")).status.success(), "the slice stays while the agent is down");
    vm.sh("systemctl start podwarden");
    let took = wait_gone(&vm, "the orphan's slice gone", &eunit, &edir);
    eprintln!("the orphan's slice gone {took:?} after the agent's restart");
    // by housekeeping: a pod known only from the runtime has no clean-up pass
    let rel = edir.trim_start_matches(CG);
    vm.sh(&format!("journalctl -u podwarden --no-pager | grep -q 'pod {e}: removed its orphaned cgroup {rel}'"));

    // the slices that stayed were updated, not refused, at the restart
    // (systemd had them: SetUnitProperties)
    assert_eq!(show(&vm, &gunit)["MemoryMax"], "50331648");
    assert_eq!(read(&vm, &format!("{hdir}/hugetlb.2MB.max")), "4194304");

    // cgroupDriver unset: containerd's (SystemdCgroup = true) is taken
    vm.sh("sed -i '/^cgroupDriver:/d' /etc/podwarden/config.yaml && systemctl restart podwarden");
    vm.wait(
        "the runtime's driver taken",
        Duration::from_secs(180),
        "journalctl -u podwarden --no-pager | grep -q 'cgroupDriver not set: systemd, containerd'",
    );
    vm.wait(
        "guaranteed adopted",
        Duration::from_secs(180),
        "podwarden get pods -A | grep -E '^default +guaranteed +1/1 +Running'",
    );
    // what assert_does_not_start reads, of an agent that runs
    let up = agent_unit(&vm);
    assert_eq!((up["ActiveState"].as_str(), up["SubState"].as_str()), ("active", "running"), "{up:?}");
    assert!(
        vm.sh("journalctl -u podwarden --no-pager | grep -c 'pod cgroups: systemd driver'")
            .trim()
            .parse::<u32>()
            .unwrap()
            >= 3,
        "every start used the systemd driver"
    );
    // set explicitly to what containerd does not use: stops at start
    vm.sh("echo 'cgroupDriver: cgroupfs' >> /etc/podwarden/config.yaml && systemctl restart podwarden || true");
    vm.wait(
        "the mismatch refused",
        Duration::from_secs(180),
        "journalctl -u podwarden --no-pager | grep -q 'does not match containerd.s cgroup driver'",
    );
    assert_does_not_start(&vm, "cgroupDriver cgroupfs on containerd's systemd");

    // systemd out of reach with cgroupDriver systemd: the agent does not
    // start, and says why (no silent fallback to making cgroups itself)
    vm.sh("mkdir -p /run/systemd/system/podwarden.service.d \
         && printf '[Service]\nEnvironment=DBUS_SYSTEM_BUS_ADDRESS=unix:path=/run/pw-no-bus\n' \
         > /run/systemd/system/podwarden.service.d/no-bus.conf \
         && sed -i '/^cgroupDriver:/d' /etc/podwarden/config.yaml \
         && echo 'cgroupDriver: systemd' >> /etc/podwarden/config.yaml \
         && systemctl daemon-reload && systemctl reset-failed podwarden; systemctl restart podwarden || true");
    let said = vm.wait(
        "the agent refusing to start without systemd",
        Duration::from_secs(180),
        "journalctl -u podwarden --no-pager | grep -m1 'cgroupDriver systemd: cannot reach systemd on the system bus'",
    );
    eprintln!("without systemd: {}", said.trim());
    assert_does_not_start(&vm, "cgroupDriver systemd without systemd");
    eprintln!("the whole test took {:?}", started.elapsed());
}

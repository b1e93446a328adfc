//! `scripts/bench.sh machine`: podwarden on the machine users run, a Debian
//! 12 VM (QEMU with software emulation, so every figure is several times
//! what the same machine gives on hardware; compare figures of one run).
//!
//! - `vm_boot_s`: QEMU started to sshd answering.
//! - `pod_start_ms_cgroupfs`, `pod_start_ms_systemd`: a manifest moved into
//!   `staticPodPath` to the container's first instruction (it writes the
//!   guest's uptime), median of 10 pods started one after the other, with
//!   containerd and podwarden on the cgroupfs driver, then both on the
//!   systemd driver (`SystemdCgroup = true`, `cgroupDriver: systemd`).
//! - `release_after_last_exit_ms`: `systemctl reboot` with three pods
//!   (one exits at SIGTERM, one 2 s after it, one system-node-critical):
//!   the last pod exit to podwarden releasing logind's delay lock.
//! - `poweroff_after_slowest_pod_ms`: the same reboot, the last pod exit to
//!   the kernel restarting the machine.
//!
//! The moments are read from the guest's clocks (all counted from its
//! boot). Needs the VM image, the e2e images and `PODWARDEN_DEB`
//! (scripts/bench.sh prepares them).

#[path = "../tests/guest/mod.rs"]
mod guest;

use guest::*;
use std::time::Duration;

const STARTS: usize = 10;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// `STARTS` pods started one after the other: each one's start in ms.
fn pod_starts(vm: &Vm, tag: &str) -> Vec<f64> {
    let mut out = Vec::new();
    for i in 0..STARTS {
        let name = format!("start-{tag}-{i}");
        let yaml = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes:\n  \
             - name: pw\n    hostPath: {{path: /var/pw-start, type: DirectoryOrCreate}}\n  containers:\n  - name: c\n    \
             image: localhost/busybox:e2e\n    volumeMounts: [{{name: pw, mountPath: /var/pw-start}}]\n    \
             command: [\"sh\", \"-c\", \"cut -d' ' -f1 /proc/uptime > /var/pw-start/{name}; exec sleep 3600\"]\n"
        );
        vm.sh(&format!("cat > /root/{name}.yaml <<'EOF'\n{yaml}EOF"));
        let t0: f64 = vm
            .sh(&format!("cut -d' ' -f1 /proc/uptime; mv /root/{name}.yaml /etc/podwarden/manifests/{name}.yaml"))
            .trim()
            .parse()
            .expect("uptime");
        let started: f64 = vm
            .wait(
                &format!("{name} started"),
                Duration::from_secs(120),
                &format!("cat /var/pw-start/{name} 2>/dev/null | grep ."),
            )
            .trim()
            .parse()
            .expect("the container's uptime");
        out.push((started - t0) * 1000.0);
        vm.sh(&format!("rm /etc/podwarden/manifests/{name}.yaml"));
        vm.wait(
            &format!("{name} removed"),
            Duration::from_secs(120),
            &format!("! podwarden get pods -A | grep -q ' {name} '"),
        );
    }
    eprintln!("pod starts ({tag}), ms: {out:.0?}");
    out
}

fn main() {
    // the start-up figures: one machine, both drivers
    let vm = Vm::up("pw-bench");
    let run_dir = std::env::var("VM_RUN").unwrap_or_else(|_| "/run/podwarden-vm".into());
    let vm_boot_s: f64 = std::fs::read_to_string(format!("{run_dir}/pw-bench/boot_seconds"))
        .expect("vm-env.sh writes boot_seconds")
        .trim()
        .parse()
        .expect("seconds");
    install_and_start(&vm, &["cgroupDriver: cgroupfs"], &[]);
    vm.wait("the agent answering", Duration::from_secs(120), "podwarden get pods -A");
    let cgroupfs = pod_starts(&vm, "cgroupfs");
    vm.sh(
        "systemctl stop podwarden && sed -i 's/SystemdCgroup = false/SystemdCgroup = true/' /etc/containerd/config.toml && \
         systemctl restart containerd && sed -i 's/^cgroupDriver: cgroupfs/cgroupDriver: systemd/' \
         /etc/podwarden/config.yaml && systemctl start podwarden",
    );
    vm.wait("the agent answering (systemd driver)", Duration::from_secs(120), "podwarden get pods -A");
    let systemd = pod_starts(&vm, "systemd");
    drop(vm);

    // the reboot figures, on a fresh machine
    let r = reboot_with_recording_pods(Vm::up("pw-bench-reboot"));
    eprintln!("{:?}\n{}", r.moments, r.journal);
    let m = r.moments;
    let last = m.last_exit();
    let release_ms = (m.released - last) * 1000.0;
    let poweroff_ms = (m.restart - last) * 1000.0;
    let (cg, sd) = (median(cgroupfs), median(systemd));
    println!(
        "{{\"bench\":\"machine\",\"vm_boot_s\":{vm_boot_s},\"pod_start_ms_cgroupfs\":{cg:.0},\"pod_start_ms_systemd\":{sd:.0},\
         \"systemd_over_cgroupfs\":{:.2},\"release_after_last_exit_ms\":{release_ms:.0},\
         \"poweroff_after_slowest_pod_ms\":{poweroff_ms:.0},\"reboot_asked_to_restart_s\":{:.2},\
         \"goal_release_ms\":250,\"goal_poweroff_ms\":2000}}",
        sd / cg,
        m.restart - m.asked
    );
}

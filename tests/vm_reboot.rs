//! A real reboot of the machine users run (a Debian 12 VM: systemd as PID 1,
//! systemd-logind, journald, Debian's containerd): `systemctl reboot` with
//! pods running. podwarden's own `InhibitDelayMaxSec` drop-in lets logind
//! wait for it; the pods get their preStop hooks and SIGTERM inside
//! `shutdownGracePeriod`, the critical pod last; the machine powers off
//! soon after the slowest pod instead of waiting out the delay; after the
//! boot the static pods run again.
//!
//! The moments are read from the guest's own clocks, all counted from its
//! boot: the pods write `/proc/uptime` into a hostPath file, podwarden's
//! journal lines carry their monotonic time (the journal is made
//! persistent to read the previous boot), and the kernel stamps its last
//! console line (`reboot: Restarting system`).
//!
//! Needs what tests/vm.rs needs (scripts/test.sh prepares it).

mod guest;

use guest::*;
use std::time::Duration;

/// A pod that records its moments (TERM received, exit, preStop) in
/// `/var/pw/<name>`: `term_delay` seconds between TERM and exit.
fn recording_pod(name: &str, critical: bool, term_delay: u32) -> String {
    let now = "$(cut -d\" \" -f1 /proc/uptime)";
    let stall = if term_delay > 0 { format!("sleep {term_delay}; ") } else { String::new() };
    let priority = if critical { "  priorityClassName: system-node-critical\n" } else { "" };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n{priority}  terminationGracePeriodSeconds: 30\n  \
         volumes:\n  - name: pw\n    hostPath: {{path: /var/pw, type: DirectoryOrCreate}}\n  containers:\n  - name: c\n    \
         image: localhost/busybox:e2e\n    volumeMounts: [{{name: pw, mountPath: /var/pw}}]\n    \
         command: [\"sh\", \"-c\", {cmd:?}]\n    lifecycle:\n      preStop:\n        exec:\n          \
         command: [\"sh\", \"-c\", {hook:?}]\n",
        cmd = format!(
            "trap 'echo term {now} >> /var/pw/{name}; {stall}echo exit {now} >> /var/pw/{name}; exit 0' TERM; \
             while true; do sleep 1 & wait $!; done"
        ),
        hook = format!("echo prestop {now} >> /var/pw/{name}"),
    )
}

/// The moments `what` recorded in `/var/pw/<name>` (seconds since boot).
fn moments(records: &str, what: &str) -> Vec<f64> {
    records.lines().filter_map(|l| l.strip_prefix(what)?.strip_prefix(' ')?.trim().parse().ok()).collect()
}

fn one(vm: &Vm, name: &str, what: &str) -> f64 {
    let records = vm.sh(&format!("cat /var/pw/{name}"));
    let m = moments(&records, what);
    assert_eq!(m.len(), 1, "one {what} for {name}: {records}");
    m[0]
}

/// The kernel's stamp (seconds since boot) of its console line containing `what`.
fn console_stamp(console: &str, what: &str) -> Option<f64> {
    console
        .lines()
        .filter(|l| l.contains(what))
        .find_map(|l| l.split_once('[')?.1.split_once(']')?.0.trim().parse().ok())
}

/// The monotonic time (seconds since boot) of podwarden's journal line
/// containing `what` in the previous boot.
fn journal_stamp(vm: &Vm, what: &str) -> Option<f64> {
    let out = vm.sh("journalctl -b -1 -u podwarden -o json --no-pager");
    out.lines().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        v["MESSAGE"].as_str()?.contains(what).then_some(())?;
        Some(v["__MONOTONIC_TIMESTAMP"].as_str()?.parse::<f64>().ok()? / 1e6)
    })
}

#[test]
fn a_real_reboot_stops_the_pods_in_order_within_the_grace_period_and_starts_them_again() {
    let _one = ONE_AT_A_TIME.lock();
    let vm = Vm::up("pw-reboot");
    // a persistent journal, to read the boot that is shut down
    vm.sh("mkdir -p /var/log/journal && systemctl restart systemd-journald");
    install_and_start(
        &vm,
        &["shutdownGracePeriod: 20s", "shutdownGracePeriodCriticalPods: 5s"],
        &[
            ("quick", &recording_pod("quick", false, 0)),
            ("slow", &recording_pod("slow", false, 2)),
            ("critical", &recording_pod("critical", true, 0)),
        ],
    );
    for name in ["quick", "slow", "critical"] {
        vm.wait(
            &format!("{name} Running"),
            Duration::from_secs(120),
            &format!("podwarden get pods -A | grep -E '^default +{name} +1/1 +Running'"),
        );
    }
    let locks = vm.sh("systemd-inhibit --list --no-pager --no-legend");
    assert!(locks.lines().any(|l| l.starts_with("podwarden") && l.ends_with("delay")), "{locks}");

    // the reboot, as an administrator asks for it
    let asked: f64 = vm
        .sh("cut -d' ' -f1 /proc/uptime; systemctl reboot")
        .trim()
        .parse()
        .expect("the guest's uptime before the reboot");
    let out = std::process::Command::new(root().join("scripts/vm-env.sh"))
        .args(["wait-down", &vm.name, "120"])
        .status()
        .unwrap();
    assert!(out.success(), "the VM did not reboot within 120 s");
    let console = String::from_utf8_lossy(
        &std::process::Command::new(root().join("scripts/vm-env.sh"))
            .args(["console", &vm.name])
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned();
    let restart = console_stamp(&console, "reboot: Restarting system")
        .unwrap_or_else(|| panic!("no 'reboot: Restarting system' on the console:\n{console}"));

    // the machine comes back (the same disk) and the static pods run again
    let vm = Vm::up(&vm.name.clone());
    for name in ["quick", "slow", "critical"] {
        vm.wait(
            &format!("{name} Running again after the boot"),
            Duration::from_secs(180),
            &format!("podwarden get pods -A | grep -E '^default +{name} +1/1 +Running'"),
        );
    }

    // what happened during the shutdown, on the guest's clock
    let prestop = one(&vm, "quick", "prestop");
    let quick_term = one(&vm, "quick", "term");
    let quick_exit = one(&vm, "quick", "exit");
    let slow_exit = one(&vm, "slow", "exit");
    let critical_term = one(&vm, "critical", "term");
    let critical_exit = one(&vm, "critical", "exit");
    let released = journal_stamp(&vm, "inhibitor lock released").expect("the release in the previous boot's journal");
    eprintln!(
        "podwarden's journal of the shutdown:\n{}",
        vm.sh(
            "journalctl -b -1 -u podwarden -o short-monotonic --no-pager | grep -iE 'shutdown|logind|kill' | tail -n 30"
        )
    );
    eprintln!(
        "reboot asked at {asked:.2}; quick preStop {prestop:.2} TERM {quick_term:.2} exit {quick_exit:.2}; slow exit \
         {slow_exit:.2}; critical TERM {critical_term:.2} exit {critical_exit:.2}; lock released {released:.3}; \
         restart {restart:.3}"
    );
    assert!(asked < prestop && prestop <= quick_term, "the preStop hook runs before SIGTERM");
    assert!(critical_term >= quick_exit.max(slow_exit), "the critical pod is stopped after the others");
    let last_exit = quick_exit.max(slow_exit).max(critical_exit);
    assert!(last_exit - asked < 20.0, "every pod stopped within shutdownGracePeriod");
    assert!(released >= last_exit, "the lock is released after the last exit");
    assert!(released - last_exit < 2.0, "the lock is released {:.3} s after the last exit", released - last_exit);
    // the whole delay (20 s) is not waited out
    assert!(restart - last_exit < 10.0, "power-off {:.3} s after the slowest pod", restart - last_exit);
    assert!(restart - asked < 20.0, "the reboot took {:.3} s", restart - asked);
}

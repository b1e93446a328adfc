//! systemd's watchdog on the machine users run (a Debian 12 VM, see
//! tests/vm.rs): a hung agent is killed and restarted by systemd
//! (`WatchdogSec=` in the unit, `WATCHDOG=1` from the agent while its
//! threads are live), and its pods keep running through it.
//!
//! The hang is the agent's test-only fault switch: a unit drop-in sets
//! `PODWARDEN_TEST_FAULTS=/run/podwarden`, and the file
//! `/run/podwarden/test-hang-housekeeping` makes the housekeeping thread
//! hang for good inside its pass, holding the source lock (the file is
//! removed as the hang starts, so the restarted agent runs normally).
//!
//! Needs what tests/vm.rs needs (`PODWARDEN_DEB`, the VM image, the e2e
//! images).

mod guest;

use guest::*;
use std::time::{Duration, Instant};

/// The container IDs and restart counts of every pod, one line each.
const CONTAINERS: &str =
    "podwarden get pods -A -o json | tr -d ' ' | tr ',' '\\n' | grep -E '\"(containerID|restartCount)\"' | sort";

/// `/healthz` on the read-only port: status line and body (bash's
/// /dev/tcp, nothing to install in the VM).
const HEALTHZ: &str = "exec 3<>/dev/tcp/127.0.0.1/10255 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && \
                       timeout 5 cat <&3 | tr -d '\\r'";

/// A monotonic-enough clock in the guest: seconds since the epoch.
fn guest_now(vm: &Vm) -> f64 {
    vm.sh("date +%s.%N").trim().parse().expect("date +%s.%N")
}

/// The time of the first journal line of the unit matching `pattern`
/// (seconds since the epoch, `-o short-unix`), after `since`.
fn journal_time(vm: &Vm, pattern: &str, since: f64) -> f64 {
    let out = vm.sh(&format!(
        "journalctl -u podwarden -o short-unix --no-pager --since=@{} | grep -m1 -F {}",
        since.floor() as u64,
        shell_quote(pattern)
    ));
    out.split_whitespace().next().and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("a time in {out:?}"))
}

#[test]
fn a_hung_agent_is_killed_by_the_watchdog_and_restarted_with_its_pods_untouched() {
    let _one = ONE_AT_A_TIME.lock();
    let t_test = Instant::now();
    let vm = Vm::up("pw-wd-watchdog");
    // the fault switch, before the unit is even installed (drop-ins are
    // read when the unit is loaded)
    vm.sh(
        "mkdir -p /etc/systemd/system/podwarden.service.d && printf '[Service]\\nEnvironment=PODWARDEN_TEST_FAULTS=/run/podwarden\\n' \
         > /etc/systemd/system/podwarden.service.d/test-faults.conf",
    );
    let web = pod_yaml("web", "", "trap 'exit 0' TERM; while true; do sleep 0.2; done");
    install_and_start(&vm, &[], &[("web", &web)]);
    let show = vm.sh("systemctl show podwarden -p WatchdogUSec -p Restart -p NRestarts -p ActiveState");
    for want in ["WatchdogUSec=30s", "Restart=always", "NRestarts=0", "ActiveState=active"] {
        assert!(show.contains(want), "systemctl show: {show}");
    }
    vm.wait(
        "the static pod Running",
        Duration::from_secs(300),
        "podwarden get pods -A | grep -E '^default +web +1/1 +Running'",
    );
    vm.wait("/healthz ok", Duration::from_secs(30), &format!("{HEALTHZ} | grep -x ok"));
    let journal = vm.sh("journalctl -u podwarden --no-pager");
    assert!(journal.contains("systemd watchdog: 30s"), "the agent saw WATCHDOG_USEC:\n{journal}");
    assert!(journal.contains("test faults are on"), "{journal}");
    // a starting agent is not stale: no false alarm before its first pass
    assert!(!journal.contains("not pinging"), "{journal}");
    let before = vm.sh(CONTAINERS);
    assert!(before.contains("\"restartCount\":0") && before.contains("containerd://"), "{before}");
    let pid = vm.sh("systemctl show podwarden -p MainPID --value").trim().to_string();

    // the housekeeping thread hangs (the next pass, within 2 s)
    let hung_at = guest_now(&vm);
    vm.sh("touch /run/podwarden/test-hang-housekeeping");
    let t_hang = Instant::now();

    // /healthz fails within the health window (10 s) of the last pass
    let body = vm.wait(
        "/healthz failing",
        Duration::from_secs(40),
        &format!("{HEALTHZ} > /tmp/h; grep -q '^HTTP/1.1 500' /tmp/h && cat /tmp/h"),
    );
    assert!(body.contains("housekeeping has not run for 10s"), "{body}");
    let t_unhealthy = t_hang.elapsed();
    assert!(vm.run("test -e /run/podwarden/test-hang-housekeeping").status.code() == Some(1), "the hang took the file");
    let journal = vm.sh("journalctl -u podwarden --no-pager");
    assert!(journal.contains("test fault: housekeeping hangs"), "{journal}");
    // the agent says why it stops pinging, at its next look (it looks
    // every half WatchdogSec, 15 s, while live)
    vm.wait(
        "the watchdog's reason in the journal",
        Duration::from_secs(30),
        "journalctl -u podwarden --no-pager | grep 'watchdog: not pinging systemd: housekeeping has not run for 10s'",
    );

    // systemd: no ping for 30 s, kill, restart (Restart=always, 2 s later)
    vm.wait(
        "the agent restarted by systemd",
        Duration::from_secs(120),
        &format!(
            "systemctl show podwarden -p NRestarts --value | grep -x 1 && \
             test \"$(systemctl show podwarden -p MainPID --value)\" != {pid} && systemctl is-active podwarden"
        ),
    );
    let t_restarted = t_hang.elapsed();
    let journal = vm.sh("journalctl -u podwarden --no-pager");
    assert!(journal.contains("Watchdog timeout"), "systemd's own line:\n{journal}");
    let timeout_at = journal_time(&vm, "Watchdog timeout", hung_at);
    // the new agent's first line: the same start-up line as the first one
    let started_at = {
        let out = vm.sh(&format!(
            "journalctl -u podwarden -o short-unix --no-pager --since=@{} | grep -F 'podwarden 0' | grep -F starting | tail -n1",
            hung_at.floor() as u64
        ));
        out.split_whitespace().next().and_then(|t| t.parse::<f64>().ok()).expect("the restarted agent's start line")
    };
    eprintln!(
        "watchdog: hang at {hung_at:.1}; /healthz failing after {:.1}s (seen over ssh); systemd's watchdog timeout \
         after {:.1}s; the new agent starting after {:.1}s; restart seen over ssh after {:.1}s",
        t_unhealthy.as_secs_f64(),
        timeout_at - hung_at,
        started_at - hung_at,
        t_restarted.as_secs_f64()
    );
    // systemd kills 30 s (WatchdogSec) after the last ping. The last ping
    // is the last look (every 15 s) at which housekeeping had run within
    // 10 s; the last good pass ended within 2 s of the hang either way, so
    // that look came after hang - 7 s and before hang + 12 s: the timeout
    // falls between 23 and 42 s after the hang (plus the guest's jitter)
    assert!(
        timeout_at - hung_at > 22.0 && timeout_at - hung_at < 60.0,
        "timeout {:.1}s after the hang",
        timeout_at - hung_at
    );

    // the pods were not touched: same containers, no restart, Running, and
    // the new agent is healthy
    vm.wait(
        "the pod Running under the new agent",
        Duration::from_secs(180),
        "podwarden get pods -A | grep -E '^default +web +1/1 +Running'",
    );
    vm.wait("/healthz ok again", Duration::from_secs(30), &format!("{HEALTHZ} | grep -x ok"));
    assert_eq!(vm.sh(CONTAINERS), before, "same container, restartCount 0, after the watchdog restart");
    let show = vm.sh("systemctl show podwarden -p NRestarts -p Result");
    assert!(show.contains("NRestarts=1"), "{show}");
    eprintln!("vm_watchdog: {:.0}s in all", t_test.elapsed().as_secs_f64());
}

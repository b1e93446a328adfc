//! Graceful shutdown against systemd's own systemd-logind on a private
//! system bus (`scripts/logind-env.sh up`; scripts/test.sh runs it). logind
//! emits a real `PrepareForShutdown` when asked to power off and honours the
//! delay inhibitor lock; the test systemd refuses to start poweroff.target,
//! so nothing is ever powered off and logind then sends `false`.

mod bus;
mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bus::*;
use common::*;
use parking_lot::Mutex;
use podwarden::agent::node_shutdown::logind::dbus_impl::DbusLogind;
use podwarden::agent::node_shutdown::logind::{Event, Logind, LogindThread};

static SERIAL: Mutex<()> = Mutex::new(());

/// The next event `l` reports, waiting up to `within`.
fn next(l: &DbusLogind, within: Duration) -> Option<Event> {
    let mut got = None;
    poll_until(within, || {
        got = l.next_event(Duration::from_millis(100)).unwrap();
        got.is_some()
    });
    got
}

/// The logind thread on `h`'s agent (shutdownGracePeriod 4 s, critical
/// 2 s), once it holds its lock.
fn start_thread(h: &Harness) -> LogindThread {
    let thread = h.logind_thread(Arc::new(DbusLogind::new()), 4, 2);
    wait_for("lock taken", Duration::from_secs(5), || podwarden_inhibitors() == 1);
    thread
}

#[test]
fn real_logind_shutdown_signal_delay_lock_and_forged_broadcast() {
    let _s = SERIAL.lock();
    bus();
    let l = DbusLogind::new();
    l.connect().expect("connect to the private system bus");
    assert_eq!(l.inhibit_delay_max().unwrap(), Duration::from_secs(5));
    let lock = l.inhibit("podwarden", "test").unwrap();
    assert_eq!(podwarden_inhibitors(), 1);
    // any client may broadcast the signal; only logind's counts. The bus
    // delivers the forged `true` before logind's own, so had it counted, the
    // event after logind's `true` would be a second `true`, not its `false`
    forge_prepare_for_shutdown();
    power_off();
    assert_eq!(next(&l, Duration::from_secs(3)), Some(Event::PrepareForShutdown(true)));
    let t = Instant::now();
    drop(lock); // logind goes on at once instead of waiting InhibitDelayMaxSec
    assert_eq!(
        next(&l, Duration::from_secs(4)),
        Some(Event::PrepareForShutdown(false)),
        "the forged broadcast was ignored, logind's own signals came in order"
    );
    assert!(t.elapsed() < Duration::from_secs(3), "logind waited {:?} after the lock was released", t.elapsed());
    assert_eq!(podwarden_inhibitors(), 0);
}

#[test]
fn logind_thread_stops_pods_on_a_real_shutdown_and_restarts_them_when_cancelled() {
    let _s = SERIAL.lock();
    bus();
    let h = Harness::new();
    h.fake.set_term_delay("c", Some(Duration::from_millis(300)));
    h.agent.apply_source(vec![arc(pod("a", "ra")), arc(pod("b", "rb"))]);
    for u in ["ra", "rb"] {
        wait_for("running", Duration::from_secs(5), || h.fake.live_containers(u) == 1);
    }
    let thread = start_thread(&h);
    let t = Instant::now();
    power_off();
    wait_for("pods stopped", Duration::from_secs(5), || {
        h.fake.live_containers("ra") + h.fake.live_containers("rb") == 0
    });
    wait_for("lock released and taken again after the cancel", Duration::from_secs(6), || {
        !h.admission.is_shutting_down() && podwarden_inhibitors() == 1
    });
    assert!(t.elapsed() < Duration::from_secs(4), "took {:?}: the lock was held to the end of the window", t.elapsed());
    assert!(h.root.0.join("graceful_node_shutdown_state").exists());
    wait_for("stopped pods run again", Duration::from_secs(5), || {
        h.agent.housekeeping();
        h.fake.live_containers("ra") + h.fake.live_containers("rb") == 2
    });
    drop(thread);
    wait_for("lock released on stop", Duration::from_secs(3), || podwarden_inhibitors() == 0);
}

#[test]
fn logind_restarted_the_lock_is_taken_again() {
    let _s = SERIAL.lock();
    bus();
    let h = Harness::new();
    let thread = start_thread(&h);
    let pid: i32 = std::fs::read_to_string("/run/podwarden-logind/logind.pid").unwrap().trim().parse().unwrap();
    let _ = podwarden::sys::kill(pid, libc::SIGTERM);
    wait_for("logind gone", Duration::from_secs(5), || podwarden::sys::kill(pid, 0).is_err());
    // in a session of its own: the restarted logind is shared and must
    // outlive this test's process group
    let out = Command::new("setsid").args(["-w", "scripts/logind-env.sh", "up"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let t = Instant::now();
    wait_for("lock re-taken", Duration::from_secs(5), || podwarden_inhibitors() == 1);
    assert!(t.elapsed() < Duration::from_secs(3), "re-taken after {:?}", t.elapsed());
    drop(thread);
}

#[test]
fn inhibit_delay_is_raised_through_a_drop_in_and_a_later_drop_in_is_named() {
    use podwarden::agent::node_shutdown::logind::ensure_inhibit_delay;
    let _s = SERIAL.lock();
    bus();
    let dir = std::path::PathBuf::from("/run/podwarden-logind/logind.conf.d");
    let later = dir.join("99-zz-later.conf");
    let ours = dir.join(podwarden::agent::node_shutdown::logind::DROPIN);
    let l = DbusLogind::new();
    l.connect().unwrap();
    assert_eq!(l.inhibit_delay_max().unwrap(), Duration::from_secs(5));
    let got = ensure_inhibit_delay(&l, Duration::from_secs(30), Some(&dir)).expect("raise InhibitDelayMaxSec");
    assert_eq!(got, Duration::from_secs(30));
    assert!(std::fs::read_to_string(&ours).unwrap().contains("InhibitDelayMaxSec=30"));
    // a drop-in read after ours keeps the value low: a clear error naming it
    std::fs::write(&later, "[Login]\nInhibitDelayMaxSec=7\n").unwrap();
    let err = ensure_inhibit_delay(&l, Duration::from_secs(60), Some(&dir)).unwrap_err().to_string();
    assert!(err.contains("99-zz-later.conf") && err.contains("InhibitDelayMaxSec=7"), "{err}");
    // put logind back as the other tests expect it
    std::fs::remove_file(&later).unwrap();
    std::fs::remove_file(&ours).unwrap();
    l.reload().unwrap();
    wait_for("InhibitDelayMaxSec back to 5 s", Duration::from_secs(5), || {
        l.inhibit_delay_max().unwrap() == Duration::from_secs(5)
    });
}

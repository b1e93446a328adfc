//! The private system bus with systemd's own systemd-logind that
//! `scripts/logind-env.sh up` starts, as the tests use it: `dbus-send` for
//! logind calls and forged signals, as the kubelet's node tests do.
#![allow(dead_code)]

use std::process::Command;
use std::sync::Once;
use std::time::Duration;

static ENV: Once = Once::new();
pub const SOCK: &str = "/run/podwarden-logind/system_bus_socket";
/// Where the private logind reads its `/etc/systemd/logind.conf.d` from.
pub const DROPIN_DIR: &str = "/run/podwarden-logind/logind.conf.d";

/// The bus address; fails with how to prepare the environment if it is not
/// running. Also points this process's system bus at it.
pub fn bus() -> String {
    assert!(
        std::path::Path::new(SOCK).exists(),
        "the logind test environment is not running ({SOCK} is missing): prepare it with \
         `sudo scripts/logind-env.sh up` (scripts/test.sh does this before the tests)"
    );
    let addr = format!("unix:path={SOCK}");
    // SAFETY: set once, before any thread of this test binary reads it.
    // (podwarden's lib denies unsafe outside `sys`; this test helper needs
    // the one thing `sys` cannot make safe: changing the environment)
    #[allow(unsafe_code)]
    ENV.call_once(|| unsafe { std::env::set_var("DBUS_SYSTEM_BUS_ADDRESS", &addr) });
    addr
}

/// `dbus-send --system --print-reply ARGS`: stdout and stderr.
pub fn dbus_send(args: &[&str]) -> String {
    let out = Command::new("dbus-send")
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus())
        .args(["--system", "--print-reply"])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

/// Ask logind to power off. It returns once logind has scheduled the
/// shutdown (and sent the signal); logind checks the caller's credentials on
/// the bus, so the caller must still be connected: dbus_send waits for the
/// reply.
pub fn power_off() {
    let out = dbus_send(&[
        "--dest=org.freedesktop.login1",
        "/org/freedesktop/login1",
        "org.freedesktop.login1.Manager.PowerOff",
        "boolean:false",
    ]);
    // not only no "Error": a bus that cannot be reached answers nothing
    assert!(out.starts_with("method return "), "PowerOff: {out}");
}

/// Broadcast `PrepareForShutdown(true)` from an ordinary bus client.
pub fn forge_prepare_for_shutdown() {
    let st = Command::new("dbus-send")
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus())
        .args([
            "--system",
            "--type=signal",
            "/org/freedesktop/login1",
            "org.freedesktop.login1.Manager.PrepareForShutdown",
            "boolean:true",
        ])
        .status()
        .unwrap();
    assert!(st.success());
}

/// How many inhibitor locks named "podwarden" logind holds, from its
/// answer. A failed call (the bus or logind down) names none either, and is
/// no "none": it panics with the error.
pub fn podwarden_inhibitors() -> usize {
    let out = dbus_send(&[
        "--dest=org.freedesktop.login1",
        "/org/freedesktop/login1",
        "org.freedesktop.login1.Manager.ListInhibitors",
    ]);
    assert!(out.starts_with("method return "), "logind's ListInhibitors failed: {out}");
    out.matches("\"podwarden\"").count()
}

/// logind's `InhibitDelayMaxUSec`, read over the bus.
pub fn inhibit_delay_max() -> Duration {
    let out = dbus_send(&[
        "--dest=org.freedesktop.login1",
        "/org/freedesktop/login1",
        "org.freedesktop.DBus.Properties.Get",
        "string:org.freedesktop.login1.Manager",
        "string:InhibitDelayMaxUSec",
    ]);
    let us: u64 = out
        .split_whitespace()
        .skip_while(|w| *w != "uint64")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("InhibitDelayMaxUSec: {out}"));
    Duration::from_micros(us)
}

/// Remove the test drop-ins and reload logind so it is back at its 5 s.
pub fn reset_logind() {
    for e in std::fs::read_dir(DROPIN_DIR).into_iter().flatten().flatten() {
        let _ = std::fs::remove_file(e.path());
    }
    reload_logind();
    crate::common::wait_for("InhibitDelayMaxSec back to 5 s", Duration::from_secs(5), || {
        inhibit_delay_max() == Duration::from_secs(5)
    });
}

/// SIGHUP to the private logind: it reads its config and drop-ins again.
pub fn reload_logind() {
    let pid: i32 = std::fs::read_to_string("/run/podwarden-logind/logind.pid").unwrap().trim().parse().unwrap();
    // reloading the private logind the test script started.
    let _ = podwarden::sys::kill(pid, libc::SIGHUP);
}

//! systemd's watchdog as the real `podwarden run` (simulated runtime) sees
//! it, with this test in systemd's place: `NOTIFY_SOCKET` is a datagram
//! socket the test reads, `WATCHDOG_USEC` the interval. The agent pings
//! while its threads are live and stops once the housekeeping thread hangs
//! (the test-only fault switch), when `/healthz` fails too. The machine's
//! side (systemd killing and restarting the unit) is tests/vm_watchdog.rs.

mod common;

use common::EVICTION;
use std::io::{Read, Write};
use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::{TempDir, wait_for};

const BIN: &str = env!("CARGO_BIN_EXE_podwarden");

struct Run {
    child: Child,
    dir: TempDir,
    port: u16,
    notify: UnixDatagram,
}

impl Run {
    /// `podwarden run` on the simulated runtime with `env`; returns once it
    /// said READY=1.
    fn start(tag: &str, env: &[(&str, String)]) -> Run {
        let dir = TempDir::new(tag);
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = dir.0.join("c.yaml");
        std::fs::write(
            &config,
            format!(
                "staticPodPath: {}\ncontainerRuntimeEndpoint: fake://\nrootDir: {}\napiSocket: {}/api.sock\n\
                 address: 127.0.0.1\nport: 0\nreadOnlyPort: {port}\nhousekeepingInterval: 500ms\n{EVICTION}",
                dir.0.join("m").display(),
                dir.0.join("r").display(),
                dir.0.display()
            ),
        )
        .unwrap();
        let sock = dir.0.join("notify.sock");
        let notify = UnixDatagram::bind(&sock).unwrap();
        notify.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let child = Command::new(BIN)
            .args(["run", "--config", config.to_str().unwrap()])
            .env("NOTIFY_SOCKET", &sock)
            .env("RUST_LOG", "info")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stderr(std::fs::File::create(dir.0.join("stderr")).unwrap())
            .spawn()
            .unwrap();
        let run = Run { child, dir, port, notify };
        let ready = run.messages(Duration::from_secs(20), |m| m == "READY=1");
        assert!(ready.iter().any(|m| m == "READY=1"), "no READY=1: {ready:?}\n{}", run.log());
        run
    }

    /// The messages received within `window`, stopping early after one
    /// that `stop_at` accepts.
    fn messages(&self, window: Duration, stop_at: impl Fn(&str) -> bool) -> Vec<String> {
        let end = Instant::now() + window;
        let mut out = Vec::new();
        let mut buf = [0u8; 256];
        while Instant::now() < end {
            if let Ok(n) = self.notify.recv(&mut buf) {
                let m = String::from_utf8_lossy(&buf[..n]).to_string();
                let stop = stop_at(&m);
                out.push(m);
                if stop {
                    break;
                }
            }
        }
        out
    }

    /// `/healthz`: (status code, body).
    fn healthz(&self) -> (u16, String) {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(s, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let code = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
        (code, out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("stderr")).unwrap_or_default()
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        // a hung housekeeping never lets SIGTERM's clean stop finish
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn pings_while_live_and_stops_when_housekeeping_hangs_as_healthz_fails() {
    let faults = TempDir::new("faults");
    let run = Run::start(
        "watchdog",
        &[("WATCHDOG_USEC", "2000000".into()), ("PODWARDEN_TEST_FAULTS", faults.0.display().to_string())],
    );
    // every half interval (1 s) while live
    let pings = run.messages(Duration::from_millis(3500), |_| false);
    let n = pings.iter().filter(|m| *m == "WATCHDOG=1").count();
    assert!((2..=5).contains(&n), "{pings:?}\n{}", run.log());
    assert_eq!(run.healthz(), (200, "ok".to_string()));
    let log = run.log();
    assert!(log.contains("systemd watchdog: 2s"), "{log}");
    assert!(log.contains("test faults are on"), "{log}");

    // housekeeping hangs: /healthz fails within its window (10 s), and from
    // then on no ping
    let hang = faults.0.join("test-hang-housekeeping");
    std::fs::write(&hang, "").unwrap();
    let t = Instant::now();
    wait_for("/healthz failing", Duration::from_secs(20), || run.healthz().0 == 500);
    let failed_after = t.elapsed();
    assert_eq!(run.healthz(), (500, "housekeeping has not run for 10s".to_string()));
    assert!(!hang.exists(), "the hang takes its file (a restarted agent would not hang again)");
    // a ping sent just before the failure may still be queued
    let _ = run.messages(Duration::from_millis(1200), |_| false);
    let late = run.messages(Duration::from_secs(4), |_| false);
    assert!(late.is_empty(), "pings while unhealthy: {late:?}");
    let log = run.log();
    assert!(log.contains("test fault: housekeeping hangs from now on"), "{log}");
    assert_eq!(
        log.matches("watchdog: not pinging systemd: housekeeping has not run for 10s").count(),
        1,
        "said once: {log}"
    );
    assert!(failed_after > Duration::from_secs(7) && failed_after < Duration::from_secs(15), "{failed_after:?}");
}

#[test]
fn a_watchdog_meant_for_another_process_or_none_is_not_pinged() {
    // WATCHDOG_PID names another process (a parent's variables inherited)
    let run = Run::start("watchdog-pid", &[("WATCHDOG_USEC", "1000000".into()), ("WATCHDOG_PID", "1".into())]);
    let got = run.messages(Duration::from_secs(2), |_| false);
    assert!(got.is_empty(), "{got:?}");
    assert!(!run.log().contains("systemd watchdog:"), "{}", run.log());
    drop(run);
    // a broken value: ignored with a warning, the agent runs
    let run = Run::start("watchdog-bad", &[("WATCHDOG_USEC", "30s".into())]);
    wait_for("the warning", Duration::from_secs(5), || {
        run.log().contains("systemd's watchdog ignored: WATCHDOG_USEC=\"30s\" is not a positive number")
    });
    assert!(run.messages(Duration::from_secs(2), |_| false).is_empty());
    wait_for("healthy", Duration::from_secs(10), || run.healthz().0 == 200);
}

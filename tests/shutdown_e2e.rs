//! Graceful node shutdown end to end: the real `podwarden` binary with real
//! containerd pods (`scripts/e2e-env.sh up`) and systemd's own
//! systemd-logind on a private system bus (`scripts/logind-env.sh up`).
//! `dbus-send` asks logind to power off; logind sends a real
//! `PrepareForShutdown(true)`, waits for the delay lock, is refused
//! poweroff.target by the stand-in systemd and sends `false`.
//!
//! The tests share containerd and logind, so they run one at a time.

mod agent;
mod bus;
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agent::*;
use bus::*;
use podwarden::agent::node_shutdown::logind::dbus_impl::DbusLogind;
use podwarden::agent::node_shutdown::logind::{Event, Logind};

/// Start an agent with graceful shutdown configured (`shutdown` config
/// lines) on the private system bus.
fn start(tag: &str, shutdown: &str) -> Agent {
    let addr = bus();
    let extra = format!("logindDropInDir: {DROPIN_DIR}\n{shutdown}");
    let a = Agent::start_with(tag, &extra, &[("DBUS_SYSTEM_BUS_ADDRESS", &addr)]);
    wait_for("the inhibitor lock", Duration::from_secs(10), || {
        node(&a)["gracefulShutdown"]["inhibitorLockHeld"] == true
    });
    assert_eq!(podwarden_inhibitors(), 1);
    a
}

/// The agent's `/node`: a 200 with JSON, or the test fails (never an
/// empty report read as "no such field").
fn node(a: &Agent) -> Value {
    let body = a.get("/node").expect("/node answers 200");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("/node is not JSON ({e}): {body}"))
}

/// What the observer thread of a [`Timeline`] saw.
#[derive(Default)]
struct Observed {
    /// When each watched pod was first seen with no running container.
    gone: BTreeMap<String, Duration>,
    /// Lists of containerd's pods done so far.
    lists: u64,
    /// Why the observer stopped: a failed list (no absence can be read
    /// after it).
    failed: Option<String>,
}

/// When each watched pod was first seen with no running container, from a
/// thread polling containerd every 50 ms.
struct Timeline {
    t0: Instant,
    seen: Arc<Mutex<Observed>>,
    stop: Arc<AtomicBool>,
    join: Option<std::thread::JoinHandle<()>>,
}

impl Timeline {
    fn start(uids: &[String]) -> Self {
        let t0 = Instant::now();
        let seen = Arc::new(Mutex::new(Observed::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (o, s, uids) = (seen.clone(), stop.clone(), uids.to_vec());
        // connected here: a thread that dies connecting would see nothing gone
        let cri = cri();
        #[allow(clippy::disallowed_methods)] // a test-side observer thread
        let join = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                // a failed list is no list: never "every pod is gone"
                let pods = match cri.list_pods(&call()) {
                    Ok(pods) => pods,
                    Err(e) => {
                        o.lock().failed = Some(format!("at {:?}: {e}", t0.elapsed()));
                        return;
                    }
                };
                let mut o = o.lock();
                for u in &uids {
                    let running = pods
                        .iter()
                        .filter(|p| &p.uid == u)
                        .any(|p| p.containers.iter().any(|c| c.state == ContainerState::Running));
                    if !running {
                        o.gone.entry(u.clone()).or_insert_with(|| t0.elapsed());
                    }
                }
                o.lists += 1;
                drop(o);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Timeline { t0, seen, stop, join: Some(join) }
    }

    /// When `uid` was first seen with no running container. `None` only
    /// when a list begun after this call still shows it running; a failed
    /// list, or none for 40 s, fails the test.
    fn gone(&self, uid: &str) -> Option<Duration> {
        let from = self.seen.lock().lists;
        let end = Instant::now() + Duration::from_secs(40);
        loop {
            let o = self.seen.lock();
            if let Some(e) = &o.failed {
                panic!("listing containerd's pods failed {e}: whether pod {uid} runs is unknown");
            }
            if let Some(t) = o.gone.get(uid) {
                return Some(*t);
            }
            // the list counted in `from` may have begun before this call
            if o.lists >= from + 2 {
                return None;
            }
            drop(o);
            assert!(Instant::now() < end, "no list of containerd's pods for 40 s: whether pod {uid} runs is unknown");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn wait_gone(&self, uid: &str, within: Duration) -> Duration {
        wait_for(&format!("pod {uid} stopped"), within, || self.gone(uid).is_some());
        self.gone(uid).unwrap()
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// `PrepareForShutdown` values seen, with when.
type Seen = Arc<Mutex<Vec<(bool, Duration)>>>;

/// Logind's own signals as a bus client sees them, with their time.
fn signals(t0: Instant) -> (Seen, Arc<AtomicBool>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let l = DbusLogind::new();
    l.connect().expect("connect to the private system bus");
    let (s, st) = (seen.clone(), stop.clone());
    #[allow(clippy::disallowed_methods)] // a test-side observer thread
    std::thread::spawn(move || {
        while !st.load(Ordering::SeqCst) {
            if let Ok(Some(Event::PrepareForShutdown(b))) = l.next_event(Duration::from_millis(100)) {
                s.lock().push((b, t0.elapsed()));
            }
        }
    });
    (seen, stop)
}

fn reason(a: &Agent, name: &str) -> Option<String> {
    a.pod(name).and_then(|p| p["status"]["reason"].as_str().map(str::to_string))
}

fn start_pods(a: &Agent, pods: &[(&str, &str, &str)]) -> Vec<String> {
    for (name, spec, cmd) in pods {
        a.write(&format!("{name}.yaml"), &pod_yaml(name, spec, cmd));
    }
    let uids: Vec<String> = pods.iter().map(|(n, _, _)| a.uid(n)).collect();
    wait_for("pods running", Duration::from_secs(60), || uids.iter().all(|u| a.running(u) == 1));
    uids
}

const CRITICAL: &str = "  priorityClassName: system-node-critical\n";

#[test]
fn grace_20_critical_10_normal_pods_first_own_shorter_grace_admission_closed_lock_released_after_the_last_pod() {
    let _serial = SERIAL.lock();
    let _logind = Reset;
    let mut a = start("shutdown-20-10", "shutdownGracePeriod: 20s\nshutdownGracePeriodCriticalPods: 10s\n");
    // logind allowed 5 s; podwarden raised it for its 20 s
    assert_eq!(inhibit_delay_max(), Duration::from_secs(20));
    assert!(std::fs::read_to_string(format!("{DROPIN_DIR}/99-podwarden.conf")).unwrap().contains("=20"));
    let uids = start_pods(
        &a,
        &[
            ("web", "", STUBBORN),
            ("quick", "  terminationGracePeriodSeconds: 2\n", STUBBORN),
            ("dns", &format!("{CRITICAL}  terminationGracePeriodSeconds: 3\n"), STUBBORN),
            ("vip", CRITICAL, TRAPPING),
        ],
    );
    let [web, quick, dns, vip] = [&uids[0], &uids[1], &uids[2], &uids[3]];
    let tl = Timeline::start(&uids);
    let (sig, sig_stop) = signals(tl.t0);
    power_off();

    // shutting down: node not ready, admission closed
    wait_for("node shutting down", Duration::from_secs(3), || node(&a)["gracefulShutdown"]["shuttingDown"] == true);
    let n = node(&a);
    assert_eq!(n["node"]["status"]["conditions"][0]["status"], "False");
    assert_eq!(n["node"]["status"]["conditions"][0]["message"], "node is shutting down");
    a.write("late.yaml", &pod_yaml("late", "", TRAPPING));
    wait_for("late pod rejected", Duration::from_secs(10), || reason(&a, "late").as_deref() == Some("NodeShutdown"));
    // the kubelet's rejectPod prefix before the handler's message
    assert_eq!(
        a.pod("late").unwrap()["status"]["message"],
        "Pod was rejected: Pod was rejected as the node is shutting down."
    );

    // a normal pod with its own shorter grace period (2 s) goes first
    let t_quick = tl.wait_gone(quick, Duration::from_secs(8));
    assert!(t_quick > Duration::from_millis(1500) && t_quick < Duration::from_secs(5), "quick stopped at {t_quick:?}");
    assert!(tl.gone(web).is_none(), "web is killed only at the end of the normal window");
    // the normal window is 20 - 10 = 10 s; critical pods run meanwhile
    let t_web = tl.wait_gone(web, Duration::from_secs(14));
    assert!(t_web > Duration::from_millis(9500) && t_web < Duration::from_millis(12500), "web stopped at {t_web:?}");
    // critical pods still run when the normal ones stop: none was seen gone
    // before web (a loaded machine may see web and vip go in one poll)
    for p in [dns, vip] {
        let t = tl.gone(p);
        assert!(t.is_none_or(|t| t >= t_web), "critical pod {p} stopped at {t:?}, before web at {t_web:?}");
    }
    wait_for("web's status says why", Duration::from_secs(3), || reason(&a, "web").as_deref() == Some("Terminated"));
    assert_eq!(a.pod("web").unwrap()["status"]["message"], "Pod was terminated in response to imminent node shutdown.");
    // critical: vip exits on SIGTERM, dns ignores it and gets its own 3 s
    let t_vip = tl.wait_gone(vip, Duration::from_secs(5));
    let t_dns = tl.wait_gone(dns, Duration::from_secs(8));
    assert!(t_vip < t_web + Duration::from_secs(2), "vip stopped at {t_vip:?}");
    assert!(t_dns > t_web + Duration::from_millis(2500) && t_dns < t_web + Duration::from_secs(5), "dns at {t_dns:?}");

    // the lock goes as soon as the last pod is gone: logind moves on (and,
    // refused poweroff.target, cancels) long before its 20 s
    wait_for("shutdown cancelled by logind", Duration::from_secs(10), || sig.lock().iter().any(|(b, _)| !b));
    sig_stop.store(true, Ordering::SeqCst);
    let t_false = sig.lock().iter().find(|(b, _)| !b).unwrap().1;
    assert!(t_false < t_dns + Duration::from_secs(1), "lock released at {t_false:?}, last pod gone at {t_dns:?}");
    assert!(t_false < Duration::from_secs(18), "logind waited its full delay ({t_false:?})");

    // state file and metrics
    let state: Value =
        serde_json::from_slice(&std::fs::read(a.root().join("graceful_node_shutdown_state")).unwrap()).unwrap();
    assert!(state["startTime"].as_str().unwrap().ends_with('Z'), "{state}");
    assert!(state["endTime"].as_str().unwrap().ends_with('Z'), "{state}");
    let metrics = a.get("/metrics").unwrap();
    let start = metric(&metrics, "kubelet_graceful_shutdown_start_time_seconds").unwrap();
    let end = metric(&metrics, "kubelet_graceful_shutdown_end_time_seconds").unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!(end - start > 12.0 && end - start < 18.0 && now - start < 60.0, "start {start} end {end}");

    // cancelled: the lock is held again, admission open, every pod runs again
    wait_for("lock taken again", Duration::from_secs(5), || podwarden_inhibitors() == 1);
    let late = a.uid("late");
    wait_for("all pods run again", Duration::from_secs(60), || uids.iter().chain([&late]).all(|u| a.running(u) == 1));
    assert_eq!(node(&a)["node"]["status"]["conditions"][0]["status"], "True");
    a.write("after.yaml", &pod_yaml("after", "", TRAPPING));
    let after = a.uid("after");
    wait_for("a new pod runs", Duration::from_secs(30), || a.running(&after) == 1);
    let mut all: Vec<&str> = uids.iter().map(String::as_str).collect();
    all.extend([late.as_str(), after.as_str()]);
    a.clean_up(&all);
}

#[test]
fn priority_groups_stop_in_ascending_priority_order() {
    let _serial = SERIAL.lock();
    let _logind = Reset;
    let mut a = start(
        "shutdown-priority",
        "priorityClasses:\n  low: 10\n  mid: 1000\n  high: 5000\nshutdownGracePeriodByPodPriority:\n\
         - {priority: 0, shutdownGracePeriodSeconds: 2}\n- {priority: 1000, shutdownGracePeriodSeconds: 2}\n\
         - {priority: 5000, shutdownGracePeriodSeconds: 2}\n",
    );
    let class = |c: &str| format!("  priorityClassName: {c}\n");
    let (low, mid, high) = (class("low"), class("mid"), class("high"));
    let uids = start_pods(
        &a,
        &[
            ("high-a", &high, STUBBORN),
            ("mid-a", &mid, STUBBORN),
            ("low-a", &low, STUBBORN),
            ("high-b", &high, STUBBORN),
            ("low-b", &low, STUBBORN),
            ("mid-b", &mid, STUBBORN),
            ("plain", "", STUBBORN),
        ],
    );
    let tl = Timeline::start(&uids);
    power_off();
    let t: Vec<Duration> = uids.iter().map(|u| tl.wait_gone(u, Duration::from_secs(15))).collect();
    // groups: {low-a, low-b, plain} then {mid-a, mid-b} then {high-a, high-b}
    let groups = [vec![t[2], t[4], t[6]], vec![t[1], t[5]], vec![t[0], t[3]]];
    for w in groups.windows(2) {
        let last = w[0].iter().max().unwrap();
        let first = w[1].iter().min().unwrap();
        assert!(last < first, "a group stopped before a lower-priority one was done: {groups:?}");
    }
    let high_last = *groups[2].iter().max().unwrap();
    assert!(high_last > Duration::from_secs(5) && high_last < Duration::from_secs(8), "{groups:?}");
    wait_for("lock taken again after the cancel", Duration::from_secs(10), || podwarden_inhibitors() == 1);
    let all: Vec<&str> = uids.iter().map(String::as_str).collect();
    a.clean_up(&all);
}

#[test]
fn inhibit_delay_raised_to_30s_and_a_later_drop_in_is_a_clear_start_up_error() {
    let _serial = SERIAL.lock();
    let _logind = Reset;
    bus();
    assert_eq!(inhibit_delay_max(), Duration::from_secs(5));
    let mut a = start("shutdown-delay", "shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n");
    assert_eq!(inhibit_delay_max(), Duration::from_secs(30), "read back from logind after the reload");
    let ours = std::fs::read_to_string(format!("{DROPIN_DIR}/99-podwarden.conf")).unwrap();
    assert!(ours.contains("[Login]") && ours.contains("InhibitDelayMaxSec=30"), "{ours}");
    assert!(a.log().contains("InhibitDelayMaxSec raised to 30s"), "{}", a.log());
    a.kill9();
    drop(a);

    // an unattended-upgrades style drop-in sorting after ours keeps it at 7 s
    std::fs::write(format!("{DROPIN_DIR}/99-zz-unattended.conf"), "[Login]\nInhibitDelayMaxSec=7\n").unwrap();
    reload_logind();
    wait_for("logind at 7 s", Duration::from_secs(5), || inhibit_delay_max() == Duration::from_secs(7));
    let addr = bus();
    let extra = format!("logindDropInDir: {DROPIN_DIR}\nshutdownGracePeriod: 30s\n");
    let mut a = Agent::start_with("shutdown-delay-2", &extra, &[("DBUS_SYSTEM_BUS_ADDRESS", &addr)]);
    wait_for("the start-up error", Duration::from_secs(15), || a.log().contains("graceful node shutdown is off"));
    let log = a.log();
    let line = log.lines().find(|l| l.contains("graceful node shutdown is off")).unwrap();
    assert!(line.contains("99-zz-unattended.conf") && line.contains("InhibitDelayMaxSec=7"), "{line}");
    assert!(line.contains("GracefulNodeShutdownOff"), "a Warning event on the node: {line}");
    assert!(line.contains(" ERROR "), "configured but cannot work: logged at error level: {line}");
    let n = node(&a);
    assert_eq!(n["gracefulShutdown"]["enabled"], false);
    assert!(n["gracefulShutdown"]["problem"].as_str().unwrap().contains("99-zz-unattended.conf"), "{n}");
    assert_eq!(podwarden_inhibitors(), 0);
    // everything else works
    let uids = start_pods(&a, &[("still-runs", "", TRAPPING)]);
    a.clean_up(&[&uids[0]]);
}

#[test]
fn dbus_and_logind_restarted_lock_retaken_within_2s_and_a_shutdown_still_handled() {
    let _serial = SERIAL.lock();
    let _logind = Reset;
    let mut a = start("shutdown-restart", "shutdownGracePeriod: 4s\nshutdownGracePeriodCriticalPods: 1s\n");
    let uids = start_pods(&a, &[("survivor", "", TRAPPING)]);
    for what in ["down", "up"] {
        // in a session of its own: the restarted bus and logind are shared
        // and must outlive this test's process group
        let out = std::process::Command::new("setsid").args(["-w", "scripts/logind-env.sh", what]).output().unwrap();
        assert!(out.status.success(), "logind-env.sh {what}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let t = Instant::now();
    wait_for("lock re-taken", Duration::from_secs(5), || podwarden_inhibitors() == 1);
    assert!(t.elapsed() < Duration::from_secs(2), "re-taken after {:?}", t.elapsed());
    let tl = Timeline::start(&uids);
    power_off();
    let gone = tl.wait_gone(&uids[0], Duration::from_secs(6));
    assert!(gone < Duration::from_secs(3), "stopped at {gone:?} (it exits on SIGTERM)");
    wait_for("runs again after the cancel", Duration::from_secs(30), || a.running(&uids[0]) == 1);
    a.clean_up(&[&uids[0]]);
}

#[test]
fn prepare_for_shutdown_broadcast_by_another_client_is_ignored() {
    let _serial = SERIAL.lock();
    let _logind = Reset;
    let mut a = start("shutdown-forged", "shutdownGracePeriod: 4s\n");
    let uids = start_pods(&a, &[("target", "", TRAPPING)]);
    let tl = Timeline::start(&uids);
    forge_prepare_for_shutdown();
    // the agent saw the broadcast and said why it ignores it
    wait_for("the forged signal seen and ignored", Duration::from_secs(10), || {
        a.log().contains("ignoring PrepareForShutdown(true) from ")
    });
    assert!(a.log().contains(": not logind ("), "{}", a.log());
    assert!(tl.gone(&uids[0]).is_none(), "a forged signal stopped a pod");
    assert_eq!(node(&a)["gracefulShutdown"]["shuttingDown"], false);
    assert_eq!(podwarden_inhibitors(), 1);
    assert!(!a.log().contains("shutdown coming"), "{}", a.log());
    a.clean_up(&[&uids[0]]);
}

/// Puts logind back at its 5 s when a test ends (pass or fail).
/// A preStop hook runs during a graceful node shutdown, before the stop
/// signal, inside the pod's window (the shutdown's grace period caps the
/// pod's 30 s; the hook's 2 s come out of it).
#[test]
fn pre_stop_hooks_run_before_the_stop_signal_during_a_node_shutdown() {
    let _serial = SERIAL.lock();
    let _logind = Reset;
    let mut a = start("shutdown-prestop", "shutdownGracePeriod: 8s\n");
    let state = a.root().parent().unwrap().join("prestop-state");
    std::fs::create_dir_all(&state).unwrap();
    let spec = format!(
        "  terminationGracePeriodSeconds: 30\n  volumes: [{{name: state, hostPath: {{path: {}}}}}]\n",
        state.display()
    );
    let command = "trap 'echo term >> /state/log; exit 0' TERM; while :; do sleep 0.2; done";
    let yaml = pod_yaml("drained", &spec, command).replace(
        "    command:",
        "    volumeMounts: [{name: state, mountPath: /state}]\n    lifecycle:\n      preStop:\n        exec: {command: [sh, -c, \"echo pre >> /state/log; sleep 2\"]}\n    command:",
    );
    a.write("drained.yaml", &yaml);
    let uid = a.uid("drained");
    wait_for("running", Duration::from_secs(60), || a.running(&uid) == 1);
    let tl = Timeline::start(std::slice::from_ref(&uid));
    power_off();
    let gone = tl.wait_gone(&uid, Duration::from_secs(15));
    assert_eq!(std::fs::read_to_string(state.join("log")).unwrap(), "pre\nterm\n", "preStop, then the signal");
    assert!(gone >= Duration::from_secs(2) && gone < Duration::from_secs(8), "inside the 8 s window: {gone:?}");
    wait_for("lock taken again after the cancel", Duration::from_secs(10), || podwarden_inhibitors() == 1);
    a.clean_up(&[&uid]);
}

struct Reset;

impl Drop for Reset {
    fn drop(&mut self) {
        if std::path::Path::new(SOCK).exists() {
            reset_logind();
        }
    }
}

/// A read-only bind mount of a directory, undone when dropped.
struct ReadOnly(PathBuf);

impl ReadOnly {
    fn mount(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let run = |args: &[&str]| {
            let st = Command::new("mount").args(args).status().unwrap();
            assert!(st.success(), "mount {args:?}");
        };
        let d = dir.to_str().unwrap();
        run(&["--bind", d, d]);
        let ro = ReadOnly(dir.to_path_buf());
        run(&["-o", "remount,ro,bind", d]);
        ro
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The node condition `kind`; `Null` only when the node's conditions (which
/// must be there) lack it.
fn condition(a: &Agent, kind: &str) -> Value {
    let n = node(a);
    let conditions = n["node"]["status"]["conditions"].as_array().unwrap_or_else(|| panic!("no conditions in {n}"));
    conditions.iter().find(|c| c["type"] == kind).cloned().unwrap_or_default()
}

/// Graceful node shutdown set up wrong does not pass quietly, and does not
/// touch liveness: `validate` warns about a drop-in directory podwarden
/// cannot write (read-only; under a file), exit status 0; the agent on
/// such a directory shows the node condition `GracefulNodeShutdownUnavailable`
/// True (`GracefulNodeShutdownOff`) with the path and the error, as on a
/// bus without logind (`LogindUnavailable`, retried), while `/healthz` stays
/// 200 and the node Ready; set up right, the condition is False.
#[test]
fn an_unwritable_drop_in_dir_is_warned_by_validate_and_shown_as_a_node_condition_healthz_stays_ok() {
    let _serial = SERIAL.lock();
    let _logind = Reset;
    let addr = bus();
    assert_eq!(inhibit_delay_max(), Duration::from_secs(5), "logind at 5 s: 30 s needs the drop-in");
    let tmp = TempDir::new("dropin-ro");
    let ro_dir = tmp.0.join("logind.conf.d");
    let _ro = ReadOnly::mount(&ro_dir);
    assert!(std::fs::write(ro_dir.join("probe"), "").is_err(), "read-only even for root");

    // validate: a warning naming the file, the directory and why; exit 0
    let validate = |dir: &Path| {
        let config = tmp.0.join("config.yaml");
        std::fs::write(&config, format!("shutdownGracePeriod: 30s\nlogindDropInDir: {}\n", dir.display())).unwrap();
        let out = Command::new(BIN).args(["validate", "--config", config.to_str().unwrap()]).output().unwrap();
        let (stdout, stderr) =
            (String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string());
        assert_eq!(out.status.code(), Some(0), "a warning, not an error: {stderr}");
        assert_eq!(stdout, format!("{}: ok: config\n", config.display()));
        (config, stderr)
    };
    let (config, stderr) = validate(&ro_dir);
    let want = format!(
        "Warning: {}: shutdownGracePeriod needs logind's InhibitDelayMaxSec at 30s or more, and podwarden could not \
         write its drop-in 99-podwarden.conf (logindDropInDir): {} is not writable: Read-only file system (os error \
         30); graceful node shutdown will be off unless InhibitDelayMaxSec is already that high\n",
        config.display(),
        ro_dir.display()
    );
    assert_eq!(stderr, want);
    let file = tmp.0.join("a-file");
    std::fs::write(&file, "").unwrap();
    let (_, stderr) = validate(&file.join("logind.conf.d"));
    assert!(
        stderr.contains(&format!(
            "{}/logind.conf.d does not exist and cannot be created: {}: Not a directory (os error 20)",
            file.display(),
            file.display()
        )),
        "{stderr}"
    );
    let (_, stderr) = validate(&tmp.0.join("new/logind.conf.d"));
    assert_eq!(stderr, "", "a directory it can make: no warning");

    // the agent on the read-only directory: off for good, said by the node
    // condition; liveness and readiness untouched
    let extra = format!("logindDropInDir: {}\nshutdownGracePeriod: 30s\n", ro_dir.display());
    let mut a = Agent::start_with("dropin-ro", &extra, &[("DBUS_SYSTEM_BUS_ADDRESS", &addr)]);
    wait_for("the condition", Duration::from_secs(15), || {
        condition(&a, "GracefulNodeShutdownUnavailable")["status"] == "True"
    });
    let c = condition(&a, "GracefulNodeShutdownUnavailable");
    assert_eq!(c["reason"], "GracefulNodeShutdownOff", "{c}");
    let message = c["message"].as_str().unwrap();
    assert_eq!(
        message,
        format!(
            "graceful node shutdown is off: writing {}/99-podwarden.conf: Read-only file system (os error 30)",
            ro_dir.display()
        )
    );
    // the Warning event too, its log line at error level (a configured
    // feature that cannot work: `journalctl -p err` shows it)
    let log = a.log();
    let line = log.lines().find(|l| l.contains("GracefulNodeShutdownOff")).unwrap_or_else(|| panic!("no event: {log}"));
    assert!(line.contains(" ERROR "), "not at error level: {line}");
    assert_eq!(node(&a)["gracefulShutdown"]["enabled"], false);
    assert_eq!(podwarden_inhibitors(), 0);
    assert_holds_for("/healthz 200 ok and the node Ready", Duration::from_secs(3), || {
        a.get("/healthz").as_deref() == Some("ok") && condition(&a, "Ready")["status"] == "True"
    });
    // `podwarden node`: the problem, and no pressure from the new condition
    let out = Command::new(BIN).args(["node", "--socket", a.api_socket().to_str().unwrap()]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Graceful shutdown: off: writing "), "{text}");
    assert!(text.contains("Pressure:          none"), "{text}");
    a.kill9();
    drop(a);

    // no logind on the bus: unavailable for now, retried; healthz still ok
    let nobody = format!("unix:path={}", tmp.0.join("no-bus").display());
    let mut a = Agent::start_with("dropin-nobus", &extra, &[("DBUS_SYSTEM_BUS_ADDRESS", &nobody)]);
    wait_for("the condition", Duration::from_secs(15), || {
        condition(&a, "GracefulNodeShutdownUnavailable")["status"] == "True"
    });
    let c = condition(&a, "GracefulNodeShutdownUnavailable");
    assert_eq!(c["reason"], "LogindUnavailable", "{c}");
    assert!(c["message"].as_str().unwrap().ends_with("; retrying every second"), "{c}");
    assert_holds_for("/healthz 200 ok", Duration::from_secs(2), || a.get("/healthz").as_deref() == Some("ok"));
    a.kill9();
    drop(a);

    // set up right (4 s fits logind's 5 s): False
    let a = start("dropin-ok", "shutdownGracePeriod: 4s\nshutdownGracePeriodCriticalPods: 1s\n");
    let c = condition(&a, "GracefulNodeShutdownUnavailable");
    assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("False"), Some("GracefulNodeShutdownOn")), "{c}");
    // a node without shutdownGracePeriod has no such condition (as the kubelet)
    drop(a);
    let a = Agent::start("dropin-none");
    assert_eq!(condition(&a, "GracefulNodeShutdownUnavailable"), Value::Null);
    assert_eq!(condition(&a, "Ready")["status"], "True");
}

//! Reactions on the real containerd (`scripts/e2e-env.sh up`): each init
//! container, sidecar and app container starts right after what it waits
//! for, from containerd's event service (containerd 1.6 has no CRI
//! `GetContainerEvents`) or, with `runtimeEvents: false`, from the relist
//! alone; the stream is opened again after containerd restarts; a new
//! container's log burst is rotated as it grows.
//! Times are containerd's own (`startedAt`/`finishedAt` in nanoseconds).
//! The bounds here only tell a reaction from a wait for the relist, the
//! resync or a monitor pass, each 5x or more apart; what a reaction takes
//! is measured by `scripts/bench.sh reactions` (and `unattended` for the
//! log burst). (A deleted pod's leaving `/pods` at its containers' stop,
//! tens of milliseconds before its sandbox's, is told apart on the fake
//! runtime with a slow sandbox stop: tests/scenarios.rs.)

mod agent;
mod common;

use agent::*;

/// Init containers in the chain.
const INITS: usize = 8;

/// The relist every second (it runs every `housekeepingInterval`, at most
/// a second apart; these agents' default is 500 ms), what a step waits
/// for when the runtime's events are not acted on.
const RELIST_1S: &str = "housekeepingInterval: 1s\n";

/// [`INITS`] init containers that exit at once, a sidecar, the app.
fn chain_pod(name: &str) -> String {
    let run = "trap 'exit 0' TERM; while :; do sleep 0.2; done";
    let inits: String = (1..=INITS)
        .map(|i| format!("  - {{name: i{i}, image: {IMAGE}, imagePullPolicy: Never, command: [\"true\"]}}\n"))
        .collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: e2e}}\nspec:\n  terminationGracePeriodSeconds: 2\n  initContainers:\n{inits}  - {{name: side, image: {IMAGE}, imagePullPolicy: Never, restartPolicy: Always, command: [sh, -c, {run:?}]}}\n  containers:\n  - {{name: main, image: {IMAGE}, imagePullPolicy: Never, command: [sh, -c, {run:?}]}}\n",
    )
}

/// One step of the chain, from what the container waited for (the exit
/// of the one before it; for main, the sidecar's start) in milliseconds:
/// to containerd's record of it (the end of CreateContainer: the event's
/// way to podwarden, its pass and the create) and to its start (that and
/// containerd's StartContainer, which no agent can shorten).
#[derive(Debug)]
struct Step {
    name: String,
    to_record: f64,
    to_start: f64,
}

fn steps(a: &Agent, uid: &str) -> Vec<Step> {
    let rp = a.runtime_pod(uid);
    let get = |n: &str| rp.latest(n).unwrap_or_else(|| panic!("container {n} in {rp:?}")).clone();
    let ms = |from: i64, to: i64| (to - from) as f64 / 1e6;
    let mut order: Vec<String> = (1..=INITS).map(|i| format!("i{i}")).collect();
    order.push("side".into());
    let mut out = Vec::new();
    for w in order.windows(2) {
        let (prev, next) = (get(&w[0]), get(&w[1]));
        out.push(Step {
            name: w[1].clone(),
            to_record: ms(prev.finished_at_ns, next.created_at_ns),
            to_start: ms(prev.finished_at_ns, next.started_at_ns),
        });
    }
    let (side, main) = (get("side"), get("main"));
    out.push(Step {
        name: "main".into(),
        to_record: ms(side.started_at_ns, main.created_at_ns),
        to_start: ms(side.started_at_ns, main.started_at_ns),
    });
    out
}

/// No step waited for the resync (60 s in these agents): each started
/// within 5 s of what it waited for, 12x below.
fn assert_no_step_waited_for_the_resync(s: &[Step]) {
    for st in s {
        assert!(st.to_start < 5000.0, "{} started {} ms after what it waited for: {s:?}", st.name, st.to_start);
    }
}

/// Each step was acted on at once, not at the relist ([`RELIST_1S`]):
/// with events the agent's part of a step (to the record) took 14-42 ms
/// here; a step left to the relist waits out the rest of the second the
/// container before it used to start and exit, 920-950 ms (the first
/// step, and main's, which the sidecar's pass starts, can be quicker).
/// The median of the chain's 9 steps is bounded at 150 ms, 6x below the
/// relist's: one step slowed by a loaded machine does not move it.
fn assert_each_step_at_once(s: &[Step]) {
    let mut to_record: Vec<f64> = s.iter().map(|st| st.to_record).collect();
    to_record.sort_by(f64::total_cmp);
    let median = to_record[to_record.len() / 2];
    assert!(median < 150.0, "the median step took {median} ms to the next record (a relist's wait?): {s:?}");
    assert_no_step_waited_for_the_resync(s);
}

fn run_chain(a: &Agent, name: &str) -> (String, Vec<Step>) {
    a.write(&format!("{name}.yaml"), &chain_pod(name));
    let uid = a.uid(name);
    wait_for("main runs", Duration::from_secs(60), || {
        a.runtime_pod(&uid).latest("main").is_some_and(|c| c.state == ContainerState::Running)
    });
    let s = steps(a, &uid);
    eprintln!("{name}: steps (ms) {s:?}");
    (uid, s)
}

fn metrics(a: &Agent) -> String {
    a.get("/metrics").expect("/metrics answers")
}

/// With containerd's events every step follows at once: none waits for
/// the relist (1 s) or the resync (60 s here).
#[test]
fn each_step_of_an_init_chain_follows_at_once_with_containerd_events() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start_with("react-events", &format!("syncFrequency: 60s\n{RELIST_1S}"), &[]);
    wait_for("the event stream open", Duration::from_secs(10), || {
        metric(&metrics(&a), "podwarden_runtime_event_stream_open{source=\"containerd\"}") == Some(1.0)
    });
    let (uid, s) = run_chain(&a, "chain");
    assert_each_step_at_once(&s);
    let m = metrics(&a);
    assert!(metric(&m, "podwarden_runtime_events_total").unwrap() >= 8.0, "{m}");
    assert_eq!(metric(&m, "podwarden_runtime_event_stream_opens_total"), Some(1.0));
    assert_eq!(metric(&m, "podwarden_runtime_event_stream_breaks_total"), Some(0.0));
    a.clean_up(&[&uid]);
}

/// `runtimeEvents: false`: no stream, and the relist (every second) still
/// moves each step on, never the resync (what a step takes then is
/// `scripts/bench.sh reactions`' `relist_init_chain_step_ms`).
#[test]
fn without_events_the_relist_moves_each_step_on() {
    let _serial = SERIAL.lock();
    let mut a =
        Agent::start_with("react-relist", &format!("syncFrequency: 60s\nruntimeEvents: false\n{RELIST_1S}"), &[]);
    let (uid, s) = run_chain(&a, "chain-relist");
    assert_no_step_waited_for_the_resync(&s);
    let m = metrics(&a);
    assert_eq!(metric(&m, "podwarden_runtime_event_stream_open"), Some(0.0), "{m}");
    assert_eq!(metric(&m, "podwarden_runtime_events_total"), Some(0.0));
    a.clean_up(&[&uid]);
}

fn containerd_pid() -> i32 {
    // the containerd the tests use (scripts/e2e-env.sh's PODWARDEN_E2E_RUN)
    let run = std::env::var("PODWARDEN_E2E_RUN").unwrap_or_else(|_| "/run/podwarden-e2e".into());
    std::fs::read_to_string(format!("{run}/containerd.pid"))
        .expect("the e2e containerd's pid file")
        .trim()
        .parse()
        .unwrap()
}

/// containerd killed and started again: the stream breaks, is opened
/// again (counted), and steps follow at once again.
#[test]
fn the_event_stream_is_opened_again_after_containerd_restarts() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start_with("react-restart", &format!("syncFrequency: 60s\n{RELIST_1S}"), &[]);
    wait_for("the event stream open", Duration::from_secs(10), || {
        metric(&metrics(&a), "podwarden_runtime_event_stream_opens_total") == Some(1.0)
    });
    let pid = containerd_pid();
    podwarden::sys::kill(pid, libc::SIGKILL).unwrap();
    wait_for("containerd gone", Duration::from_secs(10), || podwarden::sys::kill(pid, 0).is_err());
    // the failed call wakes the stream's thread (its own poll is every
    // 30 s): the break is seen in milliseconds, 3 s under a loaded run
    wait_for("the break counted", Duration::from_secs(3), || {
        metric(&metrics(&a), "podwarden_runtime_event_stream_breaks_total").is_some_and(|n| n >= 1.0)
    });
    assert_eq!(metric(&metrics(&a), "podwarden_runtime_event_stream_open"), Some(0.0));
    // in a session of its own: the restarted containerd is shared and must
    // outlive this test's process group
    let out = Command::new("setsid").args(["-w", "scripts/e2e-env.sh", "up"]).output().unwrap();
    assert!(out.status.success(), "restarting containerd: {}", String::from_utf8_lossy(&out.stderr));
    wait_for("the stream open again", Duration::from_secs(40), || {
        let m = metrics(&a);
        metric(&m, "podwarden_runtime_event_stream_opens_total").is_some_and(|n| n >= 2.0)
            && metric(&m, "podwarden_runtime_event_stream_open{source=\"containerd\"}") == Some(1.0)
    });
    a.cri = cri();
    let (uid, s) = run_chain(&a, "chain-again");
    assert_each_step_at_once(&s);
    assert!(a.log().contains("the runtime's event stream (containerd) is open again"), "{}", a.log());
    assert!(!a.log().contains("did not wake its thread"), "{}", a.log());
    a.clean_up(&[&uid]);
}

/// containerd killed and started again.
fn restart_containerd() {
    let pid = containerd_pid();
    podwarden::sys::kill(pid, libc::SIGKILL).unwrap();
    wait_for("containerd gone", Duration::from_secs(10), || podwarden::sys::kill(pid, 0).is_err());
    // in a session of its own: the restarted containerd is shared and must
    // outlive this test's process group
    let out = Command::new("setsid").args(["-w", "scripts/e2e-env.sh", "up"]).output().unwrap();
    assert!(out.status.success(), "restarting containerd: {}", String::from_utf8_lossy(&out.stderr));
}

/// A container whose record containerd lost in a restart (its status
/// checkpoint unreadable: what a CreateContainer or StartContainer cut
/// short by containerd's kill leaves) shows in the CRI's UNKNOWN state,
/// though its process may run. The agent kills it (its process is gone)
/// and runs a new instance, as the kubelet does; before, such a container
/// stayed unknown for good and the pod never ran again (seen in the soak).
#[test]
fn a_container_containerd_lost_track_of_is_killed_and_run_again() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start_with("react-unknown", "", &[]);
    a.write(
        "lost.yaml",
        &pod_yaml(
            "lost",
            "  terminationGracePeriodSeconds: 2
",
            "sleep 3600",
        ),
    );
    let uid = a.uid("lost");
    wait_for("main runs", Duration::from_secs(60), || {
        a.runtime_pod(&uid).latest("main").is_some_and(|c| c.state == ContainerState::Running)
    });
    let first = a.runtime_pod(&uid).latest("main").unwrap().clone();
    let pid = a.cri.shim_process(&first.id).expect("the shim knows the container").pid as i32;
    assert!(pid > 0 && podwarden::sys::kill(pid, 0).is_ok(), "its process {pid} runs");
    let dir = std::env::var("PODWARDEN_E2E_DIR").unwrap_or_else(|_| "/var/lib/podwarden-e2e".into());
    let status = format!("{dir}/root/io.containerd.grpc.v1.cri/containers/{}/status", first.id);
    assert!(std::path::Path::new(&status).is_file(), "containerd's status checkpoint {status} is missing");
    std::fs::write(&status, b"not a checkpoint").unwrap();
    restart_containerd();
    a.cri = cri();
    // the CRI itself says it lost track (or the agent already acted)
    let seen = a.cri.list_pods(&call()).unwrap();
    let state = seen.iter().flat_map(|p| &p.containers).find(|c| c.id == first.id).map(|c| c.state);
    assert!(matches!(state, Some(ContainerState::Unknown | ContainerState::Exited)), "{state:?}");
    wait_for("a new instance of main runs", Duration::from_secs(60), || {
        a.runtime_pod(&uid).latest("main").is_some_and(|c| c.id != first.id && c.state == ContainerState::Running)
    });
    assert!(podwarden::sys::kill(pid, 0).is_err(), "the lost instance's process {pid} was killed");
    let rp = a.runtime_pod(&uid);
    let running = rp.containers.iter().filter(|c| c.state == ContainerState::Running).count();
    assert_eq!(running, 1, "one instance runs: {rp:?}");
    assert_eq!(rp.latest("main").unwrap().attempt, first.attempt + 1);
    assert!(a.log().contains(r#"is in "unknown" state, try killing it before restart"#), "{}", a.log());
    wait_for("restartCount 1", Duration::from_secs(10), || {
        a.pod("lost").is_some_and(|p| p["status"]["containerStatuses"][0]["restartCount"] == 1)
    });
    a.clean_up(&[&uid]);
}

/// Bytes of the regular files in `dir` (their length: a file being
/// compressed counts twice, as on disk).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|es| es.flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

/// What the burst writes.
const BURST_BYTES: u64 = 100_000_000;

/// A container that writes 100 MB of lines as fast as it can right after
/// it starts (`containerLogMaxSize: 1Mi`, `containerLogMaxFiles: 3`): its
/// log is rotated as it grows, not at the next monitor pass (every 10 s
/// here, after the burst); once it is idle for a monitor interval, every
/// rotated file is compressed.
#[test]
fn a_log_burst_from_a_new_container_is_rotated_as_it_grows() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start_with(
        "react-burst",
        "containerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 10s\n",
        &[],
    );
    let cmd = format!(
        "yes \"$(printf '%0999d' 0)\" | head -c {BURST_BYTES}; for i in 1 2 3 4 5; do echo burst-done; sleep 0.2; done; sleep 3600"
    );
    a.write("burst.yaml", &pod_yaml("burst", "  terminationGracePeriodSeconds: 1\n", &cmd));
    let uid = a.uid("burst");
    let dir = a.dir.0.join("logs").join(format!("e2e_burst_{uid}")).join("main");
    let (mut peak, mut samples) = (0u64, 0);
    let start = Instant::now();
    // the marker line ends the live log (read its tail only: the sampling
    // must not slow the machine it measures)
    let done = || {
        use std::io::{Seek, SeekFrom};
        let Ok(mut f) = std::fs::File::open(dir.join("0.log")) else { return false };
        let len = f.metadata().map_or(0, |m| m.len());
        let mut tail = Vec::new();
        f.seek(SeekFrom::Start(len.saturating_sub(4096))).is_ok()
            && f.read_to_end(&mut tail).is_ok()
            && tail.windows(10).any(|w| w == b"burst-done")
    };
    let mut series = Vec::new();
    while samples % 10 != 0 || !done() {
        let b = dir_bytes(&dir);
        series.push((start.elapsed().as_millis(), b));
        peak = peak.max(b);
        samples += 1;
        assert!(start.elapsed() < Duration::from_secs(90), "the burst did not end within 90 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!("burst: {BURST_BYTES} bytes in {secs:.1} s, peak {peak} bytes on disk over {samples} samples");
    // rotated as it grows: at no moment more than 16 MiB, 6x below the
    // 100 MB a log rotated only at the monitor's passes holds (the bug this
    // guards against left all of a burst, never rotated); the files may
    // hold 3 MiB, and the most they hold in a burst (twice that with the
    // byte budget) is `scripts/bench.sh unattended`'s
    // log_bytes_peak_burst_at_start
    assert!(peak <= 16 << 20, "the log files held {peak} bytes at once (limit 3 MiB); (ms, bytes): {series:?}");
    // idle for a monitor interval (10 s): the newest rotated file is compressed too
    wait_for("every rotated file compressed", Duration::from_secs(30), || {
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .filter(|n| n != "0.log")
            .collect();
        !names.is_empty() && names.iter().all(|n| n.ends_with(".gz"))
    });
    a.clean_up(&[&uid]);
}

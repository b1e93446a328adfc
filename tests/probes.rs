//! Probe rules on the fake runtime: readiness drives `ready` and the
//! conditions, a liveness failure kills and restarts with the probe's
//! grace, a startup probe holds the others back, a hung probe delays no
//! kill.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use podwarden::model;
use podwarden::pod::workers::{KillPodOptions, Phase, UpdatePodOptions, UpdateType};
use podwarden::runtime::ExecResult;
use podwarden::runtime::fake::Op;

const T: Duration = Duration::from_secs(10);

fn parsed(yaml: &str) -> Arc<model::Pod> {
    Arc::new(model::manifest::parse("p.yaml", yaml.as_bytes(), "node").expect("a valid manifest"))
}

fn probed(name: &str, probes: &str) -> Arc<model::Pod> {
    parsed(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  terminationGracePeriodSeconds: 20\n  containers:\n  - name: c\n    image: busybox:1\n{probes}"
    ))
}

fn exit(code: i32, out: &str) -> Option<ExecResult> {
    Some(ExecResult { exit_code: code, stdout: out.as_bytes().to_vec(), stderr: vec![] })
}

fn container(h: &Harness, uid: &str) -> Option<k8s_openapi::api::core::v1::ContainerStatus> {
    h.statuses.get(uid)?.container_statuses?.into_iter().next()
}

fn condition(h: &Harness, uid: &str, kind: &str) -> Option<String> {
    h.statuses.get(uid)?.conditions?.into_iter().find(|c| c.type_ == kind).map(|c| c.status)
}

fn events(h: &Harness, reason: &str) -> Vec<String> {
    h.events.list().into_iter().filter(|e| e.reason == reason).map(|e| e.message).collect()
}

#[test]
fn readiness_decides_ready_and_the_conditions() {
    let h = Harness::new();
    h.fake.set_exec_result("c", exit(1, "nope"));
    let p = probed("r", "    readinessProbe:\n      exec: {command: [check]}\n      periodSeconds: 1\n");
    let uid = model::uid(&p).to_string();
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("running", T, || h.fake.live_containers(&uid) == 1);
    // the probe may fail before the pass that started the container has
    // written its status (an earlier status shows it waiting): wait for both
    wait_for("a failed readiness probe", T, || {
        !events(&h, "Unhealthy").is_empty()
            && container(&h, &uid).is_some_and(|c| c.state.is_some_and(|s| s.running.is_some()))
    });
    let st = container(&h, &uid).unwrap();
    assert!(st.state.unwrap().running.is_some());
    assert!(!st.ready, "running but not ready before the first success");
    assert_eq!(st.started, Some(true));
    assert_eq!(condition(&h, &uid, "Ready").as_deref(), Some("False"));
    assert_eq!(events(&h, "Unhealthy")[0], "Readiness probe failed: nope");
    // the probe passes: ready within a period
    h.fake.set_exec_result("c", exit(0, ""));
    wait_for("ready", T, || container(&h, &uid).is_some_and(|c| c.ready));
    assert_eq!(condition(&h, &uid, "Ready").as_deref(), Some("True"));
    assert_eq!(condition(&h, &uid, "ContainersReady").as_deref(), Some("True"));
    // failing again (failureThreshold 3): not ready after three failures
    h.fake.set_exec_result("c", exit(1, "down"));
    wait_for("not ready again", T, || container(&h, &uid).is_some_and(|c| !c.ready));
    assert_eq!(h.fake.live_containers(&uid), 1, "readiness never kills");
    assert_eq!(container(&h, &uid).unwrap().restart_count, 0);
    let m = podwarden::telemetry::metrics::render(&h.metrics);
    assert!(
        m.lines().any(|l| l.starts_with(
            "prober_probe_total{container=\"c\",namespace=\"default\",pod=\"r\",probe_type=\"Readiness\""
        ) && l.contains("result=\"failed\"")),
        "{m}"
    );
}

#[test]
fn a_liveness_failure_kills_with_the_probes_grace_and_restarts() {
    let h = Harness::new();
    h.fake.set_exec_result("c", exit(0, ""));
    let p = probed(
        "l",
        "    livenessProbe:\n      exec: {command: [alive]}\n      periodSeconds: 1\n      failureThreshold: 2\n      terminationGracePeriodSeconds: 3\n",
    );
    let uid = model::uid(&p).to_string();
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("running", T, || h.fake.live_containers(&uid) == 1);
    wait_for("a liveness probe ran", T, || !h.fake.calls_for(&uid, Op::ExecSync).is_empty());
    // the status is written right after the probe is set up (the probe may run first)
    wait_for("ready once started (no readiness probe)", T, || container(&h, &uid).is_some_and(|c| c.ready));
    let t = Instant::now();
    // the first instance is stuck from now on; the next one is healthy
    // whenever it is probed, however late this thread sees it start
    h.fake.set_exec_result_of_attempt("c", 0, exit(1, "stuck"));
    wait_for("restarted", T, || {
        container(&h, &uid).is_some_and(|c| c.restart_count == 1 && c.state.as_ref().unwrap().running.is_some())
    });
    assert!(t.elapsed() >= Duration::from_millis(900), "two failures a period apart");
    assert_eq!(events(&h, "Killing"), ["Container c failed liveness probe, will be restarted"]);
    // two failures in a row: one event, counted twice (the recorder
    // folds a repeat of its newest event)
    let unhealthy: Vec<(String, u32)> =
        h.events.list().into_iter().filter(|e| e.reason == "Unhealthy").map(|e| (e.message, e.count)).collect();
    assert_eq!(unhealthy, [("Liveness probe failed: stuck".to_string(), 2)]);
    let stops: Vec<u64> =
        h.fake.calls_for(&uid, Op::StopContainer).iter().filter_map(|c| c.timeout.map(|t| t.as_secs())).collect();
    assert_eq!(stops, [3], "the probe's terminationGracePeriodSeconds, not the pod's 20");
    // the new instance starts from scratch: healthy until proven otherwise
    assert_holds_for("the new container stays", Duration::from_secs(2), || {
        container(&h, &uid).is_some_and(|c| c.restart_count == 1)
    });
}

/// A container that ignores SIGTERM, killed for its liveness: the SIGKILL
/// at the end of the grace period is podwarden's own, so the restart
/// follows at once (no settling as for a kill from outside).
#[test]
fn a_liveness_kill_that_ends_in_sigkill_restarts_at_once() {
    let h = Harness::new();
    h.fake.set_term_delay("c", None);
    h.fake.set_exec_result_of_attempt("c", 0, exit(1, "stuck"));
    let p = probed(
        "k9",
        "    livenessProbe:\n      exec: {command: [alive]}\n      periodSeconds: 1\n      failureThreshold: 1\n      terminationGracePeriodSeconds: 1\n",
    );
    let uid = model::uid(&p).to_string();
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("the kill", T, || !h.fake.calls_for(&uid, Op::StopContainer).is_empty());
    // from the container's end (the SIGKILL after the 1 s grace) to the
    // second StartContainer: the same pass starts it again at once; a kill
    // taken for one from outside would wait out OUTSIDE_KILL_SETTLE (2 s)
    // first. The bound is 5x below those 2 s; the 1 ms poll may miss the
    // moment nothing runs (then the restart came within a poll).
    let t = Instant::now();
    let mut ended = None;
    let restarted = loop {
        if h.fake.calls_for(&uid, Op::StartContainer).len() >= 2 {
            break Instant::now();
        }
        if ended.is_none() && h.fake.live_containers(&uid) == 0 {
            ended = Some(Instant::now());
        }
        assert!(t.elapsed() < T, "not started again within {T:?}");
        std::thread::sleep(Duration::from_millis(1));
    };
    let gap = restarted - ended.unwrap_or(restarted);
    eprintln!("started again {gap:?} after the container ended (seen: {})", ended.is_some());
    assert!(gap < Duration::from_millis(400), "started again {gap:?} after the container ended");
    wait_for("restarted", T, || {
        container(&h, &uid).is_some_and(|c| c.restart_count == 1 && c.state.as_ref().unwrap().running.is_some())
    });
    let last = container(&h, &uid).unwrap().last_state.unwrap().terminated.unwrap();
    assert_eq!(last.exit_code, 137, "killed at the end of the probe's grace period");
    assert_eq!(h.fake.calls_for(&uid, Op::StartContainer).len(), 2);
}

#[test]
fn under_restart_policy_never_a_liveness_failure_ends_the_container() {
    let h = Harness::new();
    h.fake.set_exec_result("c", exit(1, ""));
    h.fake.set_term_exit_code("c", 143); // a process that dies of SIGTERM
    let p = parsed(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: n, namespace: default}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: busybox:1\n    livenessProbe:\n      exec: {command: [alive]}\n      periodSeconds: 1\n      failureThreshold: 1\n",
    );
    let uid = model::uid(&p).to_string();
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("failed", T, || h.status_phase(&uid).as_deref() == Some("Failed"));
    assert_eq!(events(&h, "Killing"), ["Container c failed liveness probe"]);
    assert_eq!(h.fake.calls_for(&uid, Op::StartContainer).len(), 1);
}

#[test]
fn a_startup_probe_holds_liveness_and_readiness_back() {
    let h = Harness::new();
    h.fake.set_exec_result("c", exit(1, "warming"));
    let p = probed(
        "s",
        "    startupProbe:\n      exec: {command: [started]}\n      periodSeconds: 1\n      failureThreshold: 30\n    livenessProbe:\n      exec: {command: [alive]}\n      periodSeconds: 1\n      failureThreshold: 1\n",
    );
    let uid = model::uid(&p).to_string();
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("running", T, || h.fake.live_containers(&uid) == 1);
    wait_for("two startup probes", T, || h.fake.calls_for(&uid, Op::ExecSync).len() >= 2);
    let targets: Vec<String> = h.fake.calls_for(&uid, Op::ExecSync).into_iter().map(|c| c.target).collect();
    assert!(targets.iter().all(|t| t == "started"), "liveness waits for startup: {targets:?}");
    let st = container(&h, &uid).unwrap();
    assert_eq!(st.started, Some(false));
    assert!(!st.ready, "not started, not ready");
    assert_eq!(h.fake.live_containers(&uid), 1, "a liveness failure would have killed it");
    h.fake.set_exec_result("c", exit(0, ""));
    wait_for("started", T, || container(&h, &uid).is_some_and(|c| c.started == Some(true) && c.ready));
    wait_for("liveness runs now", T, || h.fake.calls_for(&uid, Op::ExecSync).iter().any(|c| c.target == "alive"));
}

#[test]
fn a_hung_exec_probe_does_not_delay_a_kill() {
    let h = Harness::new();
    h.fake.set_exec_result("c", None);
    let p = probed(
        "k",
        "    livenessProbe:\n      exec: {command: [hang]}\n      periodSeconds: 1\n      timeoutSeconds: 30\n",
    );
    let uid = model::uid(&p).to_string();
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("a probe in flight", T, || !h.fake.calls_for(&uid, Op::ExecSync).is_empty());
    let (mut opts, done) = KillPodOptions::with_completion();
    opts.grace_period_override = Some(1);
    let t = Instant::now();
    h.workers.update_pod(UpdatePodOptions::kill(p.clone(), opts));
    done.recv_timeout(T).expect("terminated");
    // the container ends at once on SIGTERM: a kill that waited for the
    // probe in flight would take its 30 s timeout, 10x this bound (the
    // kill's own time is `scripts/bench.sh probes`' kill_with_hung_probe_ms)
    assert!(t.elapsed() < Duration::from_secs(3), "the kill took {:?}", t.elapsed());
    h.wait_phase(&uid, Phase::Finished, T);
}

#[test]
fn post_start_runs_after_the_start_and_its_failure_kills_and_restarts() {
    let h = Harness::new();
    h.fake.set_exec_result("c", exit(0, ""));
    let p = probed("h", "    lifecycle:\n      postStart:\n        exec: {command: [setup]}\n");
    let uid = model::uid(&p).to_string();
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("running", T, || h.status_phase(&uid).as_deref() == Some("Running"));
    let calls = h.fake.calls_for(&uid, Op::ExecSync);
    assert_eq!(calls.len(), 1);
    let started = h.fake.calls_for(&uid, Op::StartContainer)[0].seq;
    assert!(calls[0].seq > started, "postStart runs after StartContainer");
    assert_eq!(calls[0].target, "setup");
    // a failing hook: FailedPostStartHook, the container killed, started
    // again; the hook of the second instance passes, so exactly one of each
    let h2 = Harness::new();
    h2.fake.set_exec_result("c", exit(0, ""));
    h2.fake.set_exec_result_of_attempt("c", 0, exit(3, "no config"));
    h2.fake.set_term_exit_code("c", 143);
    let p = probed("h2", "    lifecycle:\n      postStart:\n        exec: {command: [setup]}\n");
    let uid = model::uid(&p).to_string();
    h2.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("running again", T, || {
        container(&h2, &uid).is_some_and(|c| c.restart_count == 1 && c.state.as_ref().unwrap().running.is_some())
    });
    assert_eq!(events(&h2, "FailedPostStartHook"), ["PostStartHook failed"]);
    assert_eq!(events(&h2, "Killing"), ["FailedPostStartHook"]);
    let stops: Vec<u64> =
        h2.fake.calls_for(&uid, Op::StopContainer).iter().filter_map(|c| c.timeout.map(|t| t.as_secs())).collect();
    assert_eq!(stops, [20], "the pod's grace period");
    assert_eq!(h2.fake.calls_for(&uid, Op::StartContainer).len(), 2);
    assert_eq!(
        h2.fake.calls_for(&uid, Op::ExecSync).iter().map(|c| c.target.clone()).collect::<Vec<_>>(),
        ["setup", "setup"]
    );
}

#[test]
fn pre_stop_runs_before_the_stop_and_its_time_comes_off_the_grace_period() {
    let h = Harness::new();
    let p = probed("ps", "    lifecycle:\n      preStop:\n        sleep: {seconds: 2}\n");
    let uid = model::uid(&p).to_string();
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("running", T, || h.fake.live_containers(&uid) == 1);
    let (mut opts, done) = KillPodOptions::with_completion();
    opts.grace_period_override = Some(10);
    let t = Instant::now();
    h.workers.update_pod(UpdatePodOptions::kill(p.clone(), opts));
    done.recv_timeout(T).expect("terminated");
    assert!(t.elapsed() >= Duration::from_secs(2), "the sleep hook ran first: {:?}", t.elapsed());
    let stops: Vec<u64> =
        h.fake.calls_for(&uid, Op::StopContainer).iter().filter_map(|c| c.timeout.map(|t| t.as_secs())).collect();
    assert_eq!(stops, [8], "10 s less the hook's 2 s");
    // an exec preStop hook that fails: an event, and the stop goes on with
    // at least the kubelet's 2 s
    let h = Harness::new();
    h.fake.set_exec_result("c", exit(1, "drain failed"));
    let p = probed("pe", "    lifecycle:\n      preStop:\n        exec: {command: [drain]}\n");
    let uid = model::uid(&p).to_string();
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("running", T, || h.fake.live_containers(&uid) == 1);
    let (mut opts, done) = KillPodOptions::with_completion();
    opts.grace_period_override = Some(1);
    h.workers.update_pod(UpdatePodOptions::kill(p.clone(), opts));
    done.recv_timeout(T).expect("terminated");
    assert_eq!(events(&h, "FailedPreStopHook"), ["PreStopHook failed"]);
    let stops: Vec<u64> =
        h.fake.calls_for(&uid, Op::StopContainer).iter().filter_map(|c| c.timeout.map(|t| t.as_secs())).collect();
    assert_eq!(stops, [2], "the kubelet's minimum after a preStop hook");
    assert_eq!(h.fake.calls_for(&uid, Op::ExecSync).iter().map(|c| c.target.clone()).collect::<Vec<_>>(), ["drain"]);
}

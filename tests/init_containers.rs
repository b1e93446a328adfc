//! Init containers and sidecars on the fake runtime: one at a time in
//! order before the app containers, failures by restartPolicy, the status
//! kubectl shows (`Init:N/M`, `Init:CrashLoopBackOff`, `PodInitializing`),
//! re-runs in a new sandbox but not on adoption, sidecars started in turn,
//! restarted always, not holding a completed pod, stopped last in reverse
//! order.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
use podwarden::model;
use podwarden::pod::workers::{KillPodOptions, Phase, UpdatePodOptions, UpdateType};
use podwarden::runtime::fake::Op;
use podwarden::runtime::{CallCtx, ExecResult, Runtime};

const T: Duration = Duration::from_secs(10);

fn parsed(yaml: &str) -> Arc<model::Pod> {
    Arc::new(model::manifest::parse("p.yaml", yaml.as_bytes(), "node").expect("a valid manifest"))
}

/// A pod with these init containers (YAML list items) and one app
/// container `app`.
fn pod_with(name: &str, policy: &str, inits: &str) -> Arc<model::Pod> {
    parsed(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: 10\n  initContainers:\n{inits}  containers:\n  - name: app\n    image: busybox:1\n"
    ))
}

/// The pod's worker is past termination.
fn wait_done(h: &Harness, uid: &str) {
    wait_for("terminated", T, || matches!(h.phase(uid), Some(Phase::Terminated | Phase::Finished)));
}

fn status(h: &Harness, uid: &str) -> PodStatus {
    h.statuses.get(uid).unwrap_or_default()
}

fn init_status(h: &Harness, uid: &str, name: &str) -> Option<ContainerStatus> {
    status(h, uid).init_container_statuses?.into_iter().find(|c| c.name == name)
}

fn app_status(h: &Harness, uid: &str) -> Option<ContainerStatus> {
    status(h, uid).container_statuses?.into_iter().find(|c| c.name == "app")
}

/// What `get pods` shows: (READY, STATUS).
fn shown(h: &Harness, p: &model::Pod) -> (String, String) {
    let mut p = p.clone();
    p.status = h.statuses.get(model::uid(&p));
    let (ready, status, _) = podwarden::cli::pod_columns(&p);
    (ready, status)
}

fn condition(h: &Harness, uid: &str, kind: &str) -> Option<(String, Option<String>, Option<String>)> {
    status(h, uid).conditions?.into_iter().find(|c| c.type_ == kind).map(|c| (c.status, c.reason, c.message))
}

/// Names of the containers created for `uid`, in order.
fn created(h: &Harness, uid: &str) -> Vec<String> {
    h.fake.calls_for(uid, Op::CreateContainer).into_iter().map(|c| c.target).collect()
}

/// Whether the latest `name` container of `uid` runs, as the runtime
/// answers; a failed status call is no "not running": it panics.
fn running(h: &Harness, uid: &str, name: &str) -> bool {
    let rp = h
        .fake
        .pod_status(&CallCtx::background(T), uid)
        .unwrap_or_else(|e| panic!("pod status of {uid} from the runtime: {e}"));
    rp.latest(name).is_some_and(|l| l.state == podwarden::runtime::ContainerState::Running)
}

#[test]
fn init_containers_run_one_at_a_time_in_order_before_the_app() {
    let h = Harness::new();
    let p = pod_with("ordered", "Always", "  - name: a\n    image: busybox:1\n  - name: b\n    image: busybox:1\n");
    let uid = model::uid(&p).to_string();
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("a runs", T, || running(&h, &uid, "a"));
    assert_holds_for("only a while it runs", Duration::from_millis(500), || created(&h, &uid) == ["a"]);
    assert_eq!(shown(&h, &p), ("0/1".into(), "Init:0/2".into()));
    let (st, reason, message) = condition(&h, &uid, "Initialized").unwrap();
    assert_eq!(st, "False");
    assert_eq!(reason.as_deref(), Some("ContainersNotInitialized"));
    assert_eq!(message.as_deref(), Some("containers with incomplete status: [a b]"));
    let app = app_status(&h, &uid).unwrap();
    assert_eq!(app.state.unwrap().waiting.unwrap().reason.as_deref(), Some("PodInitializing"));
    assert_eq!(h.status_phase(&uid).as_deref(), Some("Pending"));

    assert!(h.fake.exit_container(&uid, "a", 0));
    wait_for("b runs", T, || running(&h, &uid, "b"));
    assert_eq!(created(&h, &uid), ["a", "b"]);
    wait_for("Init:1/2 shown", T, || shown(&h, &p).1 == "Init:1/2");
    let a = init_status(&h, &uid, "a").unwrap();
    assert!(a.ready, "a regular init container is ready once it exited 0");
    assert_eq!(a.state.unwrap().terminated.unwrap().reason.as_deref(), Some("Completed"));

    assert!(h.fake.exit_container(&uid, "b", 0));
    wait_for("app runs", T, || running(&h, &uid, "app"));
    assert_eq!(created(&h, &uid), ["a", "b", "app"]);
    wait_for("Running shown", T, || shown(&h, &p) == ("1/1".into(), "Running".into()));
    assert_eq!(condition(&h, &uid, "Initialized").unwrap().0, "True");
    assert_eq!(condition(&h, &uid, "Ready").unwrap().0, "True");
    assert_eq!(h.status_phase(&uid).as_deref(), Some("Running"));
    // the app restarting does not run the init containers again
    assert!(h.fake.exit_container(&uid, "app", 1));
    wait_for("app restarted", T, || app_status(&h, &uid).is_some_and(|c| c.restart_count == 1));
    assert_eq!(created(&h, &uid), ["a", "b", "app", "app"]);
}

#[test]
fn a_failed_init_container_is_retried_with_back_off() {
    let h = Harness::with(Opts { container_backoff: Duration::from_secs(3), ..Opts::default() });
    let p = pod_with("retry", "OnFailure", "  - name: a\n    image: busybox:1\n");
    let uid = model::uid(&p).to_string();
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("a runs", T, || running(&h, &uid, "a"));
    assert!(h.fake.exit_container(&uid, "a", 1));
    wait_for("a again", T, || init_status(&h, &uid, "a").is_some_and(|c| c.restart_count == 1));
    wait_for("a runs again", T, || running(&h, &uid, "a"));
    // second failure: inside the back-off the pod shows it
    assert!(h.fake.exit_container(&uid, "a", 2));
    wait_for("Init:CrashLoopBackOff", T, || shown(&h, &p).1 == "Init:CrashLoopBackOff");
    let a = init_status(&h, &uid, "a").unwrap();
    assert_eq!(a.last_state.unwrap().terminated.unwrap().exit_code, 2);
    assert!(
        h.events.list().iter().any(|e| e.reason == "BackOff"
            && e.message.starts_with("Back-off restarting failed container a in pod retry_default(")
            && e.involved_object.field_path == "spec.initContainers{a}"),
        "{:?}",
        h.events.list()
    );
    assert_eq!(h.status_phase(&uid).as_deref(), Some("Pending"));
    assert!(!created(&h, &uid).contains(&"app".to_string()), "no app container before init succeeds");
    wait_for("a runs a third time", T, || init_status(&h, &uid, "a").is_some_and(|c| c.restart_count == 2));
    wait_for("a runs", T, || running(&h, &uid, "a"));
    assert!(h.fake.exit_container(&uid, "a", 0));
    wait_for("app runs", T, || running(&h, &uid, "app"));
}

#[test]
fn under_restart_policy_never_a_failed_init_container_fails_the_pod() {
    let h = Harness::new();
    let p = pod_with("never", "Never", "  - name: a\n    image: busybox:1\n  - name: b\n    image: busybox:1\n");
    let uid = model::uid(&p).to_string();
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("a runs", T, || running(&h, &uid, "a"));
    assert!(h.fake.exit_container(&uid, "a", 3));
    wait_for("failed", T, || h.status_phase(&uid).as_deref() == Some("Failed"));
    wait_done(&h, &uid);
    assert_eq!(created(&h, &uid), ["a"], "neither b nor the app ran");
    assert_eq!(shown(&h, &p).1, "Init:Error");
    assert_eq!(init_status(&h, &uid, "a").unwrap().state.unwrap().terminated.unwrap().exit_code, 3);
}

#[test]
fn a_new_sandbox_runs_the_init_containers_again_an_adopting_agent_does_not() {
    let fake = Arc::new(podwarden::runtime::fake::FakeRuntime::new());
    let h = Harness::on(fake.clone(), Opts { container_backoff: Duration::from_millis(100), ..Opts::default() });
    let p = pod_with("again", "Always", "  - name: a\n    image: busybox:1\n");
    let uid = model::uid(&p).to_string();
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("a runs", T, || running(&h, &uid, "a"));
    assert!(h.fake.exit_container(&uid, "a", 0));
    wait_for("app runs", T, || running(&h, &uid, "app"));
    // the sandbox dies (a reboot, an OOM-killed pause): a new one, and
    // the init container runs in it first
    let rp = fake.pod_status(&CallCtx::background(T), &uid).unwrap();
    let old = rp.ready_sandbox().unwrap().id.clone();
    fake.stop_sandbox(&CallCtx::background(T), &old).unwrap();
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Sync, p.clone()));
    wait_for("a runs again", T, || created(&h, &uid) == ["a", "app", "a"]);
    assert!(running(&h, &uid, "a"));
    assert!(!running(&h, &uid, "app"), "the app waits for the init container");
    assert!(h.fake.exit_container(&uid, "a", 0));
    wait_for("app runs again", T, || running(&h, &uid, "app"));
    drop(h);

    // another agent on the same runtime adopts the running pod: no init
    // container runs again
    fake.clear_calls();
    let h2 = Harness::on(fake.clone(), Opts::default());
    h2.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("status", T, || h2.status_phase(&uid).as_deref() == Some("Running"));
    assert_holds_for("nothing created", Duration::from_millis(500), || created(&h2, &uid).is_empty());
    assert_eq!(condition(&h2, &uid, "Initialized").unwrap().0, "True");
}

const SIDECAR: &str = "  - name: proxy\n    image: busybox:1\n    restartPolicy: Always\n    startupProbe:\n      exec: {command: [up]}\n      periodSeconds: 1\n      failureThreshold: 30\n";

#[test]
fn a_sidecar_starts_before_the_next_and_restarts_always() {
    let h = Harness::with(Opts { container_backoff: Duration::from_millis(100), ..Opts::default() });
    h.fake.set_exec_result("proxy", Some(ExecResult { exit_code: 1, stdout: vec![], stderr: vec![] }));
    let p = pod_with("side", "Never", &format!("{SIDECAR}  - name: setup\n    image: busybox:1\n"));
    let uid = model::uid(&p).to_string();
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("proxy runs", T, || running(&h, &uid, "proxy"));
    wait_for("its startup probe failed", T, || h.events.list().iter().any(|e| e.reason == "Unhealthy"));
    assert_holds_for("setup waits for the startup probe", Duration::from_millis(1500), || {
        created(&h, &uid) == ["proxy"]
    });
    assert_eq!(shown(&h, &p), ("0/2".into(), "Init:0/2".into()));
    let proxy = init_status(&h, &uid, "proxy").unwrap();
    assert_eq!(proxy.started, Some(false));
    h.fake.set_exec_result("proxy", Some(ExecResult { exit_code: 0, stdout: vec![], stderr: vec![] }));
    wait_for("setup runs", T, || running(&h, &uid, "setup"));
    assert_eq!(created(&h, &uid), ["proxy", "setup"]);
    wait_for("Init:1/2 with the sidecar ready", T, || shown(&h, &p) == ("1/2".into(), "Init:1/2".into()));
    assert!(h.fake.exit_container(&uid, "setup", 0));
    wait_for("app runs", T, || running(&h, &uid, "app"));
    wait_for("2/2 Running", T, || shown(&h, &p) == ("2/2".into(), "Running".into()));
    // a sidecar that exits is started again, under restartPolicy Never too
    assert!(h.fake.exit_container(&uid, "proxy", 0));
    wait_for("proxy restarted", T, || {
        init_status(&h, &uid, "proxy").is_some_and(|c| c.restart_count == 1) && running(&h, &uid, "proxy")
    });
    assert_eq!(created(&h, &uid).iter().filter(|n| *n == "setup").count(), 1, "regular init ran once");
    // the app completes: the pod succeeds though the sidecar still ran,
    // and the sidecar is stopped
    assert!(h.fake.exit_container(&uid, "app", 0));
    wait_for("succeeded", T, || h.status_phase(&uid).as_deref() == Some("Succeeded"));
    wait_done(&h, &uid);
    assert_eq!(h.fake.live_containers(&uid), 0, "the sidecar was stopped");
}

/// A sidecar without a startup probe has started once it runs: the next
/// container starts in the same pass, and the sidecar is started once,
/// not again by the app containers' walk (which first saw the pod without
/// it).
#[test]
fn a_sidecar_without_a_startup_probe_lets_the_next_start_in_the_same_pass_once() {
    let h = Harness::new();
    let p = pod_with(
        "side-quick",
        "Always",
        "  - name: proxy\n    image: busybox:1\n    restartPolicy: Always\n  - name: log\n    image: busybox:1\n    restartPolicy: Always\n",
    );
    let uid = model::uid(&p).to_string();
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("app runs", T, || running(&h, &uid, "app"));
    assert_holds_for("nothing started twice", Duration::from_millis(500), || {
        created(&h, &uid) == ["proxy", "log", "app"]
    });
    wait_for("3/3 Running", T, || shown(&h, &p) == ("3/3".into(), "Running".into()));
    for name in ["proxy", "log"] {
        assert_eq!(init_status(&h, &uid, name).map(|c| c.restart_count), Some(0), "{name}");
    }
}

#[test]
fn sidecars_stop_after_the_app_containers_in_reverse_order() {
    let h = Harness::new();
    let p = pod_with(
        "order",
        "Always",
        "  - name: first\n    image: busybox:1\n    restartPolicy: Always\n  - name: second\n    image: busybox:1\n    restartPolicy: Always\n",
    );
    let uid = model::uid(&p).to_string();
    h.fake.set_term_delay("app", Some(Duration::from_millis(600)));
    h.fake.set_term_delay("second", Some(Duration::from_millis(300)));
    h.workers.update_pod(UpdatePodOptions::new(UpdateType::Create, p.clone()));
    wait_for("all run", T, || running(&h, &uid, "app") && running(&h, &uid, "second"));
    assert_eq!(created(&h, &uid), ["first", "second", "app"]);
    let (opts, done) = KillPodOptions::with_completion();
    let t = std::time::Instant::now();
    h.workers.update_pod(UpdatePodOptions::kill(p.clone(), opts));
    // when each was seen stopped
    let mut stopped: std::collections::HashMap<&str, Duration> = Default::default();
    while stopped.len() < 3 && t.elapsed() < T {
        for n in ["app", "second", "first"] {
            if !stopped.contains_key(n) && !running(&h, &uid, n) {
                stopped.insert(n, t.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    done.recv_timeout(T).expect("terminated");
    let (app, second, first) = (stopped["app"], stopped["second"], stopped["first"]);
    assert!(app <= second && second <= first, "app, then second, then first: {stopped:?}");
    assert!(app >= Duration::from_millis(550), "the app took its 0.6 s: {stopped:?}");
    assert!(second >= app + Duration::from_millis(250), "second stopped only after the app: {stopped:?}");
}

#[test]
fn validation_names_init_container_fields() {
    let bad = |yaml: &str| model::manifest::parse("p.yaml", yaml.as_bytes(), "node").unwrap_err().to_string();
    let base = "apiVersion: v1\nkind: Pod\nmetadata: {name: v}\nspec:\n  containers:\n  - name: app\n    image: i\n  initContainers:\n  - name: init\n    image: i\n";
    let e = bad(&format!("{base}    readinessProbe:\n      exec: {{command: [x]}}\n"));
    assert!(
        e.contains("spec.initContainers[0].readinessProbe")
            && e.contains("may not be set for init containers without restartPolicy=Always"),
        "{e}"
    );
    let e = bad(&format!("{base}    restartPolicy: OnFailure\n"));
    assert!(e.contains("spec.initContainers[0].restartPolicy"), "{e}");
    let e = bad(&base.replace("- name: init", "- name: app"));
    // the API server checks app containers first, then init containers
    // against every name: the duplicate is the init container's
    assert!(e.contains("spec.initContainers[0].name") && e.contains("duplicate container name"), "{e}");
    let e = bad(&format!("{base}    volumeDevices: [{{name: d, devicePath: /dev/x}}]\n"));
    assert!(e.contains("spec.initContainers[0].volumeDevices"), "{e}");
    let e = bad(&base
        .replace("  initContainers:\n", "  ephemeralContainers:\n  - name: dbg\n    image: i\n  initContainers:\n"));
    assert!(e.contains("spec.ephemeralContainers"), "{e}");
    // a sidecar may have probes and hooks
    let ok = format!(
        "{base}    restartPolicy: Always\n    readinessProbe:\n      exec: {{command: [x]}}\n    lifecycle:\n      preStop:\n        sleep: {{seconds: 1}}\n"
    );
    model::manifest::parse("p.yaml", ok.as_bytes(), "node").expect("a sidecar with a probe and a hook");
}

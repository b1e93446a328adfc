//! Issue 9, the lifecycle boundaries: UID claims between manifests,
//! admission of pods that left their source but still terminate, the status
//! after a cancelled node shutdown, errors that cannot heal, and threads that
//! panic. On the fake runtime; where the static pod source matters, the
//! agent is assembled by `daemon::start` exactly as `podwarden run` does.

mod common;

use common::EVICTION;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use podwarden::cli::daemon::Running;
use podwarden::config::Config;
use podwarden::model::{self, Pod};
use podwarden::pod::workers::{KillPodOptions, Phase, UpdatePodOptions};
use podwarden::runtime::fake::{FakeRuntime, Op};

const T: Duration = Duration::from_secs(10);

fn with_cpu(mut p: Pod, cpu: &str) -> Pod {
    let mut req = BTreeMap::new();
    req.insert("cpu".to_string(), k8s_openapi::apimachinery::pkg::api::resource::Quantity(cpu.into()));
    p.spec.as_mut().unwrap().containers[0].resources =
        Some(k8s_openapi::api::core::v1::ResourceRequirements { requests: Some(req), ..Default::default() });
    p
}

/// The whole agent as `podwarden run` assembles it, on `fake`, with its
/// manifests in `<dir>/manifests`.
fn start_agent(dir: &Path, fake: &Arc<FakeRuntime>) -> Running {
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let yaml = format!(
        "staticPodPath: {}\ncontainerRuntimeEndpoint: fake://\nrootDir: {}\napiSocket: {}/api.sock\npodLogsDir: {}\nnodeName: node-a\nport: 0\nreadOnlyPort: 0\nfileCheckFrequency: 1h\nhousekeepingInterval: 200ms\n{EVICTION}",
        manifests.display(),
        dir.join("root").display(),
        dir.display(),
        dir.join("logs").display()
    );
    let config = Config::parse("test-config.yaml", &yaml).unwrap();
    podwarden::cli::daemon::start(&config, fake.clone(), "fake://").unwrap()
}

fn desired_by_name(r: &Running, name: &str) -> Option<Arc<Pod>> {
    r.parts.agent.desired().into_iter().map(|d| d.pod).find(|p| model::name(p) == name)
}

const VICTIM: &str =
    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: victim\nspec:\n  containers:\n  - name: c\n    image: busybox:1\n";

/// Defect 10: a manifest naming another pod's UID must not displace it, and
/// removing the claimant must change nothing.
#[test]
fn a_manifest_claiming_another_pods_uid_is_refused_and_the_first_pod_keeps_running() {
    let d = TempDir::new("uidclaim");
    let fake = Arc::new(FakeRuntime::new());
    let r = start_agent(&d.0, &fake);
    let manifests = d.0.join("manifests");
    std::fs::write(manifests.join("victim.yaml"), VICTIM).unwrap();
    wait_for("victim desired", T, || desired_by_name(&r, "victim").is_some());
    let victim = desired_by_name(&r, "victim").unwrap();
    let uid = model::uid(&victim).to_string();
    wait_for("victim running", T, || fake.live_containers(&uid) == 1);

    // the claimant sorts before the victim's file and names its UID
    let claimant = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: claimant\n  uid: {uid}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: busybox:1\n"
    );
    std::fs::write(manifests.join("0-claim.yaml"), &claimant).unwrap();
    let want = format!(
        "{}: metadata.uid \"{uid}\" is already used by {}; ignoring this file",
        manifests.join("0-claim.yaml").display(),
        manifests.join("victim.yaml").display()
    );
    wait_for("the claim reported", T, || {
        r.parts.events.list().iter().any(|e| e.reason == "InvalidManifest" && e.message == want)
    });
    let after_claim = r.parts.agent.desired();
    assert_eq!(after_claim.len(), 1);
    assert_eq!(model::name(&after_claim[0].pod), "victim", "the UID stays with its first manifest");
    assert_eq!(r.parts.workers.phase(&uid), Some(Phase::Syncing));

    // rescans do not report it again
    r.rescan();
    std::fs::write(manifests.join("marker1.yaml"), VICTIM.replace("victim", "marker1")).unwrap();
    wait_for("marker1 desired", T, || desired_by_name(&r, "marker1").is_some());
    assert_eq!(r.parts.events.list().iter().filter(|e| e.message == want).count(), 1, "reported once");

    // removing the claimant changes nothing for the victim
    std::fs::remove_file(manifests.join("0-claim.yaml")).unwrap();
    std::fs::write(manifests.join("marker2.yaml"), VICTIM.replace("victim", "marker2")).unwrap();
    wait_for("marker2 desired (a scan after the removal)", T, || desired_by_name(&r, "marker2").is_some());
    let victim_now = desired_by_name(&r, "victim").expect("victim still desired");
    assert_eq!(model::uid(&victim_now), uid);
    assert_eq!(victim_now.spec, victim.spec);
    assert_eq!(r.parts.workers.phase(&uid), Some(Phase::Syncing));
    assert_eq!(fake.live_containers(&uid), 1, "the victim keeps running");
    assert!(fake.calls_for(&uid, Op::StopContainer).is_empty(), "the victim was never stopped");
    wait_for("victim Running", T, || {
        r.parts.statuses.get(&uid).is_some_and(|s| s.phase.as_deref() == Some("Running") && s.reason.is_none())
    });
    r.stop();
}

/// Defect 11: a pod removed from its source still holds its CPU while it
/// terminates (SIGTERM ignored, 10 s grace): a new pod must not be admitted
/// onto it.
#[test]
fn a_pod_that_left_its_source_counts_for_admission_until_it_finished() {
    let h = Harness::with(Opts { cpu_millis: 1000, ..Opts::default() });
    h.fake.set_term_delay("c", None); // ignores SIGTERM: killed at the end of its grace
    let hog = arc(with_grace(with_cpu(pod("hog", "hog1"), "800m"), 10));
    h.agent.apply_source(vec![hog.clone()]);
    wait_for("hog running", T, || h.fake.live_containers("hog1") == 1);
    h.agent.apply_source(vec![]);
    wait_for("hog terminating", T, || h.phase("hog1") == Some(Phase::Terminating));
    assert_eq!(h.agent.allocated(), (800, 0, 1), "the terminating pod is still allocated");

    let newcomer = arc(with_cpu(pod("newcomer", "new1"), "500m"));
    h.agent.apply_source(vec![newcomer.clone()]);
    let st = h.statuses.get("new1").expect("a rejected pod has a status");
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    assert_eq!(st.reason.as_deref(), Some("OutOfcpu"));
    assert_eq!(
        st.message.as_deref(),
        Some("Pod was rejected: Node didn't have enough resource: cpu, requested: 500, used: 800, capacity: 1000")
    );
    assert!(h.fake.calls_for("new1", Op::RunPodSandbox).is_empty());
    assert_eq!(h.phase("hog1"), Some(Phase::Terminating), "rejected while the hog still terminates");

    // once the hog is finished its CPU is free again
    let (mut opts, done) = KillPodOptions::with_completion();
    opts.grace_period_override = Some(1);
    h.workers.update_pod(UpdatePodOptions::kill(hog, opts));
    done.recv_timeout(T).unwrap();
    h.wait_phase("hog1", Phase::Finished, T);
    let third = arc(with_cpu(pod("third", "third1"), "500m"));
    h.agent.apply_source(vec![newcomer, third]);
    wait_for("third admitted and running", T, || h.fake.live_containers("third1") == 1);
    assert_eq!(h.statuses.get("new1").unwrap().reason.as_deref(), Some("OutOfcpu"), "a rejection stays");
}

/// Defect 14: after `PrepareForShutdown(false)` a pod that runs again has the
/// status of a running pod, not "Terminated" with the shutdown message.
#[test]
fn a_pod_started_again_after_a_cancelled_shutdown_has_a_running_status() {
    use podwarden::agent::node_shutdown::logind::{Event, FakeLogind};
    let h = Harness::new();
    h.fake.set_term_delay("c", Some(Duration::from_millis(100)));
    h.agent.apply_source(vec![arc(pod("web", "web1"))]);
    wait_for("web running", T, || h.fake.live_containers("web1") == 1);
    let logind = Arc::new(FakeLogind::new(Duration::from_secs(30)));
    let thread = h.logind_thread(logind.clone(), 20, 10);
    wait_for("lock taken", T, || logind.locks_held() == 1);
    logind.send(Event::PrepareForShutdown(true));
    wait_for("web killed for the shutdown", T, || {
        h.statuses.get("web1").is_some_and(|s| s.reason.as_deref() == Some(podwarden::agent::node_shutdown::REASON))
    });
    let st = h.statuses.get("web1").unwrap();
    assert_eq!(st.message.as_deref(), Some(podwarden::agent::node_shutdown::MESSAGE));
    logind.send(Event::PrepareForShutdown(false));
    wait_for("admission open again", T, || !h.admission.is_shutting_down());
    wait_for("web runs again", T, || {
        h.agent.housekeeping();
        h.fake.live_containers("web1") == 1
    });
    wait_for("web's status is Running", T, || h.status_phase("web1").as_deref() == Some("Running"));
    let st = h.statuses.get("web1").unwrap();
    assert_eq!(st.reason, None, "no shutdown reason on a running pod");
    assert_eq!(st.message, None, "no shutdown message on a running pod");
    let cs = &st.container_statuses.unwrap()[0];
    assert!(cs.ready && cs.state.as_ref().unwrap().running.is_some());
    drop(thread);
}

/// Defect 9 (second half): a 253-character pod name makes its log directory
/// name longer than NAME_MAX. Removing the pod must not leave its worker
/// retrying "File name too long" forever: reported once, the pod finishes.
#[test]
fn clean_up_that_cannot_heal_is_reported_once_and_the_pod_finishes() {
    let h = Harness::new();
    // podLogsDir exists on a real node (the kernel then reports the name,
    // not a missing parent)
    std::fs::create_dir_all(h.root.0.join("logs")).unwrap();
    let name = format!("{}.{}.{}.{}", "a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(61));
    assert_eq!(name.len(), 253);
    let p = arc(pod(&name, "long1"));
    h.agent.apply_source(vec![p.clone()]);
    wait_for("long-named pod running", T, || h.fake.live_containers("long1") == 1);
    // its log directory (as the runtime would have made it) cannot even be
    // looked at: its name is over NAME_MAX
    h.agent.apply_source(vec![]);
    h.wait_phase("long1", Phase::Finished, T);
    let cleanup: Vec<_> = h.events.list().into_iter().filter(|e| e.reason == "FailedCleanup").collect();
    assert_eq!(cleanup.len(), 1, "{cleanup:?}");
    assert_eq!(cleanup[0].count, 1, "reported once");
    assert!(cleanup[0].message.contains("File name too long"), "{}", cleanup[0].message);
    assert!(cleanup[0].message.ends_with("left as it is (this error cannot heal)"), "{}", cleanup[0].message);
    assert_eq!(h.fake.live_containers("long1"), 0);
    assert_eq!(h.fake.object_count(), 0, "its runtime objects are removed all the same");
}

/// An error that cannot heal in set-up fails the pod once (status reason
/// and message, event) instead of a back-off loop; the worker finishes.
#[test]
fn set_up_error_that_cannot_heal_fails_the_pod_without_retrying() {
    let h = Harness::new(); // back-off 50 ms
    const MSG: &str =
        "failed to create pod log directory \"/var/log/pods/x\": mkdir /var/log/pods/x: file name too long";
    // as podwarden's CRI client refuses a log directory the kernel would
    let too_long = podwarden::runtime::RuntimeError::PathTooLong {
        op: Op::RunPodSandbox,
        what: "pod log directory",
        path: "/var/log/pods/x".into(),
    };
    h.fake.fail_with_error(Op::RunPodSandbox, Some("perm1"), 1000, too_long);
    h.agent.apply_source(vec![arc(pod("perm", "perm1"))]);
    h.wait_phase("perm1", Phase::Finished, T);
    assert_eq!(h.fake.calls_for("perm1", Op::RunPodSandbox).len(), 1, "not retried");
    let st = h.statuses.get("perm1").unwrap();
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    assert_eq!(st.reason.as_deref(), Some(podwarden::pod::phases::REASON_SETUP_FAILED));
    assert_eq!(
        st.message.as_deref(),
        Some(format!("RunPodSandbox failed: {MSG}; not retried: this error cannot heal").as_str())
    );
    let ev: Vec<_> = h.events.list().into_iter().filter(|e| e.reason == "SetupFailed").collect();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].message, st.message.unwrap());
    // still desired, not restarted by housekeeping
    h.agent.housekeeping();
    h.agent.housekeeping();
    assert_eq!(h.phase("perm1"), Some(Phase::Finished));
    assert_eq!(h.fake.calls_for("perm1", Op::RunPodSandbox).len(), 1);
    // an error that may heal is still retried until it does
    h.fake.fail(Op::RunPodSandbox, Some("heal1"), 2);
    h.agent.apply_source(vec![arc(pod("perm", "perm1")), arc(pod("heal", "heal1"))]);
    wait_for("heal running after retries", T, || h.fake.live_containers("heal1") == 1);
    assert_eq!(h.fake.calls_for("heal1", Op::RunPodSandbox).len(), 3);
}

/// Defect 13: a huge rescan period used to kill the manifest thread
/// ("overflow when adding duration to instant") after its first scan; it
/// must keep watching.
#[test]
fn the_manifest_watcher_survives_a_huge_period() {
    use parking_lot::Mutex;
    let d = TempDir::new("hugeperiod");
    std::fs::write(d.0.join("a.yaml"), VICTIM.replace("victim", "a")).unwrap();
    let seen: Arc<Mutex<Vec<usize>>> = Arc::default();
    let s2 = seen.clone();
    let source = podwarden::agent::source::FileSource::new(&d.0, "node-a");
    let handle = podwarden::agent::source::start_watcher(
        source,
        Duration::MAX,
        move |pods, _| s2.lock().push(pods.len()),
        |_, _| {},
    )
    .unwrap();
    wait_for("first scan", T, || seen.lock().first() == Some(&1));
    std::fs::write(d.0.join("b.yaml"), VICTIM.replace("victim", "b")).unwrap();
    wait_for("b picked up by inotify", T, || seen.lock().last() == Some(&2));
    handle.rescan();
    let n = seen.lock().len();
    wait_for("an explicit rescan", T, || seen.lock().len() > n);
    drop(handle);
}

/// Defect 13: a thread that panics makes the agent unhealthy at once (and
/// the node not ready); in `podwarden run` it also ends the process (see
/// `a_panicking_thread_ends_podwarden_run`). Never a dead thread behind a
/// healthy health check.
#[test]
fn a_panicking_thread_makes_the_agent_unhealthy() {
    let d = TempDir::new("panic");
    let fake = Arc::new(FakeRuntime::new());
    let r = start_agent(&d.0, &fake);
    let within = Duration::from_secs(60);
    wait_for("healthy", T, || r.parts.agent.health(within).is_ok());
    fake.panic_on(Op::ListPodSandbox, None, 1);
    wait_for("unhealthy", T, || r.parts.agent.health(within).is_err());
    let e = r.parts.agent.health(within).unwrap_err().to_string();
    // whichever thread lists the pods first: housekeeping's relist, the
    // eviction manager's stats, the log monitor's pass
    let thread = e.strip_prefix("thread ").and_then(|r| r.strip_suffix(" panicked: injected panic in ListPodSandbox"));
    assert!(thread.is_some_and(|t| ["housekeeping", "eviction", "log-monitor"].contains(&t)), "{e}");
    let (ready, _, message) = podwarden::api::view::ready(
        r.parts.admission.is_shutting_down(),
        r.parts.agent.health(within).err().map(|e| e.to_string()),
    );
    assert!(!ready);
    assert_eq!(message, e);
    r.stop();
}

/// The real binary: a panicking thread is logged and `podwarden run` exits
/// with status 70 at once, for systemd to restart it.
#[test]
fn a_panicking_thread_ends_podwarden_run() {
    let d = TempDir::new("panicbin");
    std::fs::create_dir_all(d.0.join("manifests")).unwrap();
    let config = d.0.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "staticPodPath: {}\ncontainerRuntimeEndpoint: fake://\nrootDir: {}\napiSocket: {}/api.sock\npodLogsDir: {}\nnodeName: node-a\nport: 0\nreadOnlyPort: 0\nhousekeepingInterval: 200ms\n{EVICTION}",
            d.0.join("manifests").display(),
            d.0.join("root").display(),
            d.0.display(),
            d.0.join("logs").display()
        ),
    )
    .unwrap();
    let t = Instant::now();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_podwarden"))
        .args(["run", "--config", config.to_str().unwrap()])
        .env("PODWARDEN_FAKE_PANIC", "ListPodSandbox")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let exited = poll_until(T, || child.try_wait().unwrap().is_some());
    if !exited {
        let _ = child.kill();
    }
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(exited, "still running {:?} after the panic: {err}", t.elapsed());
    assert_eq!(status.code(), Some(podwarden::base::thread::PANIC_EXIT_CODE), "{err}");
    let named = ["housekeeping", "eviction", "log-monitor"].iter().any(|t| {
        err.contains(&format!(
            "thread {t} panicked: injected panic in ListPodSandbox; exiting with status 70 so that a fresh agent is started (pods keep running and are adopted)"
        ))
    });
    assert!(named, "{err}");
}

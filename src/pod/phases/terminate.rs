//! `sync_terminating_pod` (stop every container in parallel with the grace
//! period, then the sandbox) and `sync_terminated_pod` (clean up).

use std::sync::Arc;

use crossbeam_channel::select;

use crate::model::{self, Pod};
use crate::pod::phases::PodSync;
use crate::pod::status::{GenerateInput, generate};
use crate::pod::workers::{StatusFn, SyncCtx, SyncError};
use crate::runtime::{CallCtx, ContainerInfo, ContainerState, RuntimeError, RuntimePod};
use crate::telemetry::events::{EventType, ObjectRef};

impl PodSync {
    /// Stop the live containers of `rp` in parallel, each with `grace`
    /// seconds (a container's preStop hook first, its time taken off the
    /// grace period), then its sandboxes. Interrupted by cancellation (a
    /// shorter grace period or a newer update); stops in flight finish on
    /// their own.
    fn stop_all(&self, ctx: &SyncCtx, rp: &RuntimePod, grace: i64, pod: Option<&Arc<Pod>>) -> Result<(), SyncError> {
        let live: Vec<_> = rp.live_containers().cloned().collect();
        if let Some(p) = pod {
            for c in &live {
                self.events.event(
                    &ObjectRef::container(p, &c.name),
                    EventType::Normal,
                    "Killing",
                    &format!("Stopping container {} with grace period {grace}s", c.name),
                );
            }
        }
        let pod_ip = pod.and_then(|p| self.hook_ip(p, rp));
        ctx.containers_stopping(&live.iter().map(|c| c.id.clone()).collect::<Vec<_>>());
        if let [c] = live.as_slice() {
            // One container: stop it on this thread (stop_container returns
            // on cancellation by contract).
            match self.stopper().stop(&ctx.cancel, pod.map(|p| &**p), pod_ip.as_deref(), c, grace) {
                Ok(()) | Err(RuntimeError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        } else if !live.is_empty() {
            self.stop_in_parallel(ctx, &live, grace, pod, pod_ip)?;
        }
        ctx.cancel_check()?;
        ctx.containers_stopped();
        for s in rp.sandboxes.iter().filter(|s| s.ready) {
            match self.runtime.stop_sandbox(&self.call_plain(ctx), &s.id) {
                Ok(()) | Err(RuntimeError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Stop `live` (two or more containers), every one on a helper thread
    /// of its own. Sidecars stop last, in reverse spec order (the
    /// kubelet's termination ordering): each one's preStop hook starts at
    /// once, its stop waits until the app containers and the sidecars
    /// after it are down, at most its grace period, and the wait comes off
    /// that period (2 s at least remain). The first error is returned once
    /// all are done.
    fn stop_in_parallel(
        &self,
        ctx: &SyncCtx,
        live: &[ContainerInfo],
        grace: i64,
        pod: Option<&Arc<Pod>>,
        pod_ip: Option<String>,
    ) -> Result<(), SyncError> {
        let spec_index = |name: &str| {
            pod.and_then(|p| model::init_containers(p).iter().position(|c| c.name == name && model::is_sidecar(c)))
        };
        // the live sidecars (indices into `live`), last in spec order first
        let mut order: Vec<(usize, usize)> =
            live.iter().enumerate().filter_map(|(i, c)| spec_index(&c.name).map(|k| (k, i))).collect();
        order.sort_by(|a, b| b.cmp(a));
        let order: Vec<usize> = order.into_iter().map(|(_, i)| i).collect();
        let mut turns: Vec<Option<crossbeam_channel::Sender<()>>> = vec![None; live.len()];
        let (tx, rx) = crossbeam_channel::bounded(live.len());
        for (i, c) in live.iter().enumerate() {
            let turn = order.contains(&i).then(|| {
                let (go, wait) = crossbeam_channel::bounded(1);
                turns[i] = Some(go);
                wait
            });
            let stopper = self.stopper();
            let cancel = ctx.cancel.clone();
            let pod = pod.cloned();
            let ip = pod_ip.clone();
            let info = c.clone();
            let tx = tx.clone();
            let short: String = ctx.uid.chars().take(8).collect();
            crate::base::thread::spawn(format!("stop-{short}"), Some(crate::base::thread::HELPER_STACK), move || {
                let r = match turn {
                    None => stopper.stop(&cancel, pod.as_deref(), ip.as_deref(), &info, grace),
                    Some(wait) => stop_in_turn(&stopper, &cancel, pod.as_deref(), ip.as_deref(), &info, grace, &wait),
                };
                let _ = tx.send((i, r));
            })
            .map_err(|source| SyncError::StopThread { container: c.id.clone(), source })?;
        }
        drop(tx);
        // Once no app container is left, the sidecars get their turn in
        // `order`, each when the one before it is done (one that ended
        // before its turn is passed over).
        let mut done = vec![false; live.len()];
        let mut apps_left = live.len() - order.len();
        let mut next = 0;
        let mut release = |done: &[bool]| {
            while let Some(&j) = order.get(next) {
                if let Some(go) = turns[j].take() {
                    let _ = go.send(());
                }
                if !done[j] {
                    return;
                }
                next += 1;
            }
        };
        if apps_left == 0 {
            release(&done);
        }
        let mut first_err = None;
        for _ in 0..live.len() {
            select! {
                recv(rx) -> r => match r {
                    Ok((i, r)) => {
                        done[i] = true;
                        if !order.contains(&i) {
                            apps_left -= 1;
                        }
                        if apps_left == 0 {
                            release(&done);
                        }
                        match r {
                            Ok(()) | Err(RuntimeError::NotFound { .. }) => {}
                            Err(RuntimeError::Cancelled { .. }) => return Err(SyncError::Cancelled),
                            Err(e) => { first_err.get_or_insert(e); }
                        }
                    }
                    Err(_) => break,
                },
                recv(ctx.cancel.receiver()) -> _ => return Err(SyncError::Cancelled),
            }
        }
        if let Some(e) = first_err {
            return Err(e.into());
        }
        Ok(())
    }

    fn call_plain(&self, ctx: &SyncCtx) -> CallCtx {
        CallCtx::new(self.cfg.call_timeout, &ctx.cancel)
    }

    pub(super) fn terminating(
        &self,
        ctx: &SyncCtx,
        pod: &Arc<Pod>,
        grace: i64,
        status_fns: &[StatusFn],
    ) -> Result<(), SyncError> {
        let uid = model::uid(pod).to_string();
        // start errors never show on, nor delay, a terminating pod
        self.forget_pod(&uid);
        let mut rp = self.runtime.pod_status(&self.call_plain(ctx), &uid)?;
        if let Err(e) = self.stop_all(ctx, &rp, grace, Some(pod)) {
            // the kubelet's event for a kill that failed (a stop past its
            // deadline, containerd losing the exit, the runtime down); a
            // shorter grace period or a newer update is no failure
            if !matches!(e, SyncError::Cancelled) {
                let msg = format!("error killing pod: {e}");
                self.events.event(&ObjectRef::pod(pod), EventType::Warning, "FailedKillPod", &msg);
            }
            return Err(e);
        }
        // only the stopped containers changed: ask for just their status
        let stopped: Vec<String> = rp.live_containers().map(|c| c.id.clone()).collect();
        if !stopped.is_empty() {
            self.runtime.refresh_containers(&self.call_plain(ctx), &mut rp, &stopped)?;
        }
        self.fill_messages(pod, &mut rp);
        let succeeded = !model::containers(pod).is_empty()
            && model::containers(pod)
                .iter()
                .all(|c| rp.latest(&c.name).is_some_and(|l| l.state == ContainerState::Exited && l.exit_code == 0));
        // a pod failed for a reason (its deadline, a set-up error) stays
        // failed whatever its containers' exit codes
        let failed_for_reason = self
            .statuses
            .get(&uid)
            .is_some_and(|s| s.phase.as_deref() == Some(model::PHASE_FAILED) && s.reason.is_some());
        let phase = if succeeded && !failed_for_reason { model::PHASE_SUCCEEDED } else { model::PHASE_FAILED };
        let waiting = Default::default();
        self.statuses.replace_with(&uid, |old| {
            let mut status = generate(
                pod,
                &rp,
                &GenerateInput {
                    old,
                    waiting: &waiting,
                    terminal_phase: Some(phase),
                    id_prefix: &self.cfg.id_prefix,
                    host_ip: self.cfg.host_ip.as_deref(),
                    probes: self.prober.as_ref().map(|p| &**p.results()),
                },
            );
            for f in status_fns {
                f(&mut status);
            }
            Some(status)
        });
        Ok(())
    }

    pub(super) fn terminating_runtime(&self, ctx: &SyncCtx, pod: &RuntimePod, grace: i64) -> Result<(), SyncError> {
        let rp = self.runtime.pod_status(&self.call_plain(ctx), &pod.uid)?;
        self.stop_all(ctx, &rp, grace, None)?;
        // Nothing configures this pod: nobody will clean it up later.
        self.remove_runtime_objects(ctx, &pod.uid)
    }

    fn remove_runtime_objects(&self, ctx: &SyncCtx, uid: &str) -> Result<(), SyncError> {
        let rp = self.runtime.pod_status(&self.call_plain(ctx), uid)?;
        for c in &rp.containers {
            match self.runtime.remove_container(&self.call_plain(ctx), &c.id) {
                Ok(()) | Err(RuntimeError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        for s in &rp.sandboxes {
            if s.ready {
                self.runtime.stop_sandbox(&self.call_plain(ctx), &s.id)?;
            }
            match self.runtime.remove_sandbox(&self.call_plain(ctx), &s.id) {
                Ok(()) | Err(RuntimeError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    pub(super) fn terminated(&self, ctx: &SyncCtx, pod: &Arc<Pod>, remove_content: bool) -> Result<(), SyncError> {
        let uid = model::uid(pod).to_string();
        self.forget_terminated_pod(&uid);
        if !remove_content {
            // Terminal but still desired: keep the exited containers (their
            // state survives an agent restart, their logs stay readable).
            return Ok(());
        }
        self.remove_runtime_objects(ctx, &uid)?;
        if let Some(cg) = &self.cfg.cgroups
            && let Err(e) = cg.remove_pod(pod)
        {
            log::warn!("pod {}: removing its cgroup: {e}", model::pod_ref(pod));
        }
        crate::pod::volumes::unmount_all_under(&self.cfg.pod_dir(&uid));
        if crate::pod::volumes::has_mounts_under(&self.cfg.pod_dir(&uid)) {
            // removing the directory would reach into what is mounted in it
            // (a subPath bind mount is a volume's own content)
            return Err(SyncError::StillMounted { dir: self.cfg.pod_dir(&uid) });
        }
        for dir in [self.cfg.pod_dir(&uid), self.cfg.pod_log_dir(pod)] {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    let e = SyncError::Io { what: format!("removing {}", dir.display()), source };
                    if !e.is_permanent() {
                        return Err(e);
                    }
                    // Reported once; the clean-up goes on and the pod
                    // finishes (a retry would fail the same way forever).
                    let msg = format!("{e}; left as it is (this error cannot heal)");
                    log::error!("pod {}: clean-up: {msg}", model::pod_ref(pod));
                    self.events.event(&ObjectRef::pod(pod), EventType::Warning, "FailedCleanup", &msg);
                }
            }
        }
        Ok(())
    }
}

/// Stop a sidecar in its turn: its preStop hook now, then wait for `turn`
/// (at most the grace period left), then the stop with what is left of
/// the grace period after the wait (2 s at least, as in the kubelet).
fn stop_in_turn(
    stopper: &crate::pod::phases::Stopper,
    cancel: &crate::base::cancel::CancelToken,
    pod: Option<&Pod>,
    ip: Option<&str>,
    c: &crate::runtime::ContainerInfo,
    grace: i64,
    turn: &crossbeam_channel::Receiver<()>,
) -> Result<(), RuntimeError> {
    let left = stopper.pre_stop(cancel, pod, ip, c, grace)?;
    let t = std::time::Instant::now();
    select! {
        recv(turn) -> _ => {}
        recv(cancel.receiver()) -> _ => return Err(RuntimeError::Cancelled { op: crate::runtime::Op::StopContainer }),
        default(std::time::Duration::from_secs(left.max(0) as u64)) => {}
    }
    let waited = t.elapsed();
    let left = if waited.as_secs() > 0 { crate::pod::phases::hooks::grace_after_pre_stop(left, waited) } else { left };
    stopper.stop_now(cancel, c, left)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::pod::phases::SyncConfig;
    use crate::runtime::fake::{FakeRuntime, Op};
    use crate::runtime::{ContainerConfig, Runtime, SandboxConfig};

    const UID: &str = "u-stop";

    struct Setup {
        fake: Arc<FakeRuntime>,
        events: Arc<crate::telemetry::events::EventRecorder>,
        sync: PodSync,
        pod: Arc<Pod>,
    }

    /// A pod with `apps` app containers and `sidecars` (init containers
    /// with restartPolicy Always), every one running in the fake.
    fn running(apps: &[&str], sidecars: &[&str]) -> Setup {
        let list = |names: &[&str]| {
            names
                .iter()
                .map(|n| format!("  - name: {n}\n    image: i\n    restartPolicy: Always\n"))
                .collect::<String>()
        };
        let apps_yaml: String = apps.iter().map(|n| format!("  - name: {n}\n    image: i\n")).collect();
        let yaml = format!(
            "metadata:\n  name: p\n  namespace: ns\n  uid: {UID}\nspec:\n  initContainers:\n{}  containers:\n{apps_yaml}",
            list(sidecars)
        );
        let pod: Pod = serde_yaml_ng::from_str(&yaml.replace("  initContainers:\n  containers:", "  containers:"))
            .expect("the test pod");
        let fake = Arc::new(FakeRuntime::new());
        let ctx = CallCtx::background(Duration::from_secs(5));
        let sandbox = SandboxConfig { name: "p".into(), namespace: "ns".into(), uid: UID.into(), ..Default::default() };
        let sid = fake.run_sandbox(&ctx, &sandbox).expect("sandbox");
        for name in sidecars.iter().chain(apps) {
            let c = ContainerConfig { name: name.to_string(), image: "i".into(), ..Default::default() };
            let id = fake.create_container(&ctx, &sid, &c, &sandbox).expect("create");
            fake.start_container(&ctx, &id).expect("start");
        }
        let events = Arc::new(crate::telemetry::events::EventRecorder::new(64));
        let cfg = SyncConfig { call_timeout: Duration::from_secs(5), ..SyncConfig::for_tests() };
        let sync = PodSync::new(fake.clone(), Arc::new(crate::pod::status::StatusManager::new()), events.clone(), cfg);
        fake.clear_calls();
        Setup { fake, events, sync, pod: Arc::new(pod) }
    }

    impl Setup {
        fn runtime_pod(&self) -> RuntimePod {
            self.fake.pod_status(&CallCtx::background(Duration::from_secs(5)), UID).expect("pod status")
        }

        fn stop_all(&self, ctx: &SyncCtx, grace: i64) -> Result<(), SyncError> {
            self.sync.stop_all(ctx, &self.runtime_pod(), grace, Some(&self.pod))
        }

        /// The container names of the StopContainer calls, in call order,
        /// with their timeouts.
        fn stops(&self) -> Vec<(String, Option<Duration>)> {
            let rp = self.runtime_pod();
            let name = |id: &str| rp.containers.iter().find(|c| c.id == id).map(|c| c.name.clone()).unwrap_or_default();
            let mut calls = self.fake.calls_for(UID, Op::StopContainer);
            calls.sort_by_key(|c| c.seq);
            calls.iter().map(|c| (name(&c.target), c.timeout)).collect()
        }
    }

    #[test]
    fn every_container_is_stopped_with_the_grace_period_then_the_sandbox() {
        for apps in [&["one"][..], &["a", "b", "c"][..]] {
            let s = running(apps, &[]);
            s.stop_all(&SyncCtx::detached(UID), 7).expect("stopped");
            let mut stops = s.stops();
            stops.sort();
            let want: Vec<_> = apps.iter().map(|n| (n.to_string(), Some(Duration::from_secs(7)))).collect();
            assert_eq!(stops, want);
            assert_eq!(s.fake.live_containers(UID), 0);
            assert_eq!(s.fake.ready_sandboxes(UID), 0, "the sandbox is stopped too");
            let last_stop = s.fake.calls_for(UID, Op::StopContainer).iter().map(|c| c.seq).max();
            let sandbox_stops = s.fake.calls_for(UID, Op::StopPodSandbox);
            assert_eq!(sandbox_stops.len(), 1);
            assert!(Some(sandbox_stops[0].seq) > last_stop, "the sandbox after its containers");
            // the kubelet's Killing event for each
            let mut killing: Vec<_> =
                s.events.list().into_iter().filter(|e| e.reason == "Killing").map(|e| e.message).collect();
            killing.sort();
            let want: Vec<_> = apps.iter().map(|n| format!("Stopping container {n} with grace period 7s")).collect();
            assert_eq!(killing, want);
        }
    }

    #[test]
    fn sidecars_stop_after_the_app_containers_in_reverse_order() {
        let s = running(&["app", "web"], &["first", "second"]);
        s.fake.set_term_delay("app", Some(Duration::from_millis(600)));
        s.fake.set_term_delay("second", Some(Duration::from_millis(200)));
        let watch = {
            let fake = s.fake.clone();
            crate::base::thread::spawn("test-watch", None, move || {
                std::thread::sleep(Duration::from_millis(250));
                fake.live_containers(UID)
            })
            .expect("a watcher thread")
        };
        s.stop_all(&SyncCtx::detached(UID), 30).expect("stopped");
        // while an app container was still stopping, both sidecars ran
        assert_eq!(watch.join().expect("watcher"), 3, "app and both sidecars still running at 250 ms");
        let order: Vec<String> = s.stops().into_iter().map(|(n, _)| n).collect();
        assert_eq!(order.len(), 4, "{order:?}");
        let mut apps = order[..2].to_vec();
        apps.sort();
        assert_eq!(apps, ["app", "web"], "the app containers first: {order:?}");
        assert_eq!(order[2..], ["second", "first"], "then the sidecars, last in the spec first");
        // a wait under a second takes nothing off their grace period
        assert!(s.stops().iter().all(|(_, t)| *t == Some(Duration::from_secs(30))), "{:?}", s.stops());
        assert_eq!(s.fake.live_containers(UID), 0);
        assert_eq!(s.fake.ready_sandboxes(UID), 0);
    }

    #[test]
    fn a_stop_error_is_reported_and_the_sandbox_left_running() {
        // one container (stopped on the calling thread), then several
        for apps in [&["one"][..], &["a", "b"][..]] {
            let s = running(apps, &[]);
            s.fake.fail(Op::StopContainer, Some(UID), 1);
            match s.stop_all(&SyncCtx::detached(UID), 5) {
                Err(SyncError::Runtime(RuntimeError::Failed { op: Op::StopContainer, .. })) => {}
                other => panic!("{apps:?}: {other:?}"),
            }
            // the others were stopped all the same; the sandbox was not
            assert_eq!(s.fake.calls_for(UID, Op::StopContainer).len(), apps.len());
            assert_eq!(s.fake.live_containers(UID), 1);
            assert!(s.fake.calls_for(UID, Op::StopPodSandbox).is_empty());
            assert_eq!(s.fake.ready_sandboxes(UID), 1);
            // the next pass finishes the job
            s.stop_all(&SyncCtx::detached(UID), 5).expect("stopped on the next pass");
            assert_eq!(s.fake.live_containers(UID), 0);
            assert_eq!(s.fake.ready_sandboxes(UID), 0);
        }
    }

    #[test]
    fn a_container_already_gone_is_not_an_error() {
        let s = running(&["a", "b"], &[]);
        let mut rp = s.runtime_pod();
        let mut ghost = rp.containers[0].clone();
        ghost.id = "ctr-gone".into();
        ghost.name = "ghost".into();
        rp.containers.push(ghost);
        s.sync.stop_all(&SyncCtx::detached(UID), &rp, 5, Some(&s.pod)).expect("stopped");
        assert_eq!(s.fake.live_containers(UID), 0);
        assert_eq!(s.fake.ready_sandboxes(UID), 0);
    }

    #[test]
    fn cancellation_ends_the_stop_at_once() {
        for apps in [&["stubborn"][..], &["stubborn", "b"][..]] {
            let s = running(apps, &[]);
            // ignores SIGTERM: its stop takes the whole grace period
            s.fake.set_term_delay("stubborn", None);
            let ctx = SyncCtx::detached(UID);
            let cancel = ctx.cancel.clone();
            let canceller = crate::base::thread::spawn("test-cancel", None, move || {
                std::thread::sleep(Duration::from_millis(200));
                cancel.cancel();
            })
            .expect("a canceller thread");
            let t = Instant::now();
            let r = s.stop_all(&ctx, 60);
            canceller.join().expect("canceller");
            assert!(matches!(r, Err(SyncError::Cancelled)), "{apps:?}: {r:?}");
            assert!(t.elapsed() < Duration::from_secs(10), "returned after {:?}", t.elapsed());
            assert!(s.fake.calls_for(UID, Op::StopPodSandbox).is_empty(), "no sandbox stop once cancelled");
        }
    }

    #[test]
    fn a_kill_that_fails_is_a_failed_kill_pod_event_and_a_cancelled_one_is_not() {
        let lost = "the container's process ended (exit status 143) but containerd never handled the exit";
        let s = running(&["app"], &[]);
        s.fake.fail_with_error(
            Op::StopContainer,
            Some(UID),
            1,
            RuntimeError::Failed {
                op: Op::StopContainer,
                code: crate::runtime::Code::DeadlineExceeded,
                message: lost.into(),
            },
        );
        let r = s.sync.terminating(&SyncCtx::detached(UID), &s.pod, 5, &[]);
        assert!(matches!(r, Err(SyncError::Runtime(_))), "{r:?}");
        let failed: Vec<_> = s.events.list().into_iter().filter(|e| e.reason == "FailedKillPod").collect();
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert_eq!(failed[0].message, format!("error killing pod: StopContainer failed: {lost}"));
        assert_eq!(failed[0].event_type, EventType::Warning);
        // the retry succeeds: no second event
        s.sync.terminating(&SyncCtx::detached(UID), &s.pod, 5, &[]).expect("stopped");
        assert_eq!(s.events.list().iter().filter(|e| e.reason == "FailedKillPod").count(), 1);

        let s = running(&["stubborn"], &[]);
        s.fake.set_term_delay("stubborn", None);
        let ctx = SyncCtx::detached(UID);
        ctx.cancel.cancel();
        let r = s.sync.terminating(&ctx, &s.pod, 60, &[]);
        assert!(matches!(r, Err(SyncError::Cancelled)), "{r:?}");
        assert!(s.events.list().iter().all(|e| e.reason != "FailedKillPod"));
    }

    #[test]
    fn whose_pre_stop_hooks_ran_is_forgotten_once_the_pod_is_terminated() {
        let mut s = running(&["app"], &[]);
        let yaml = format!(
            "metadata:\n  name: p\n  namespace: ns\n  uid: {UID}\nspec:\n  containers:\n  - name: app\n    image: i\n    \
             lifecycle:\n      preStop:\n        exec:\n          command: [\"true\"]\n"
        );
        s.pod = Arc::new(serde_yaml_ng::from_str(&yaml).expect("the test pod"));
        s.stop_all(&SyncCtx::detached(UID), 5).expect("stopped");
        assert_eq!(s.fake.calls_for(UID, Op::ExecSync).len(), 1, "the preStop hook ran");
        assert_eq!(s.sync.pre_stop_ran.lock().len(), 1);
        s.sync.terminated(&SyncCtx::detached(UID), &s.pod, true).expect("cleaned up");
        assert!(s.sync.pre_stop_ran.lock().is_empty(), "a pod gone leaves no record of its hooks");
    }
}

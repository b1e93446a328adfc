//! `sync_pod`: one set-up pass. Pod dirs and volumes (`volume_setup`),
//! the sandbox (`sandbox`), then the containers in order: init containers
//! one at a time (sidecars stay running), then the app containers, each
//! pulled, configured (`container_config`), created and started;
//! restarts by restartPolicy with back-off; terminal detection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::base::unix_now_ns as now_ns;
use crate::model::{self, Container, Pod};
use crate::pod::phases::PodSync;
use crate::pod::status::{GenerateInput, generate};
use crate::pod::workers::{SyncCtx, SyncError, SyncResult, UpdateType};
use crate::runtime::{ContainerState, RuntimeError, RuntimePod, SandboxConfig};
use crate::telemetry::events::{EventType, ObjectRef};

/// Does restartPolicy restart a container that exited with `code`?
fn should_restart(policy: &str, code: i32) -> bool {
    match policy {
        "Always" => true,
        "OnFailure" => code != 0,
        _ => false,
    }
}

/// The sandbox a container is started in.
struct InSandbox<'a> {
    id: &'a str,
    config: &'a SandboxConfig,
    /// The pod's IP (the node's for a host-network pod), for the downward
    /// API.
    pod_ip: Option<&'a str>,
    /// Containers this pass stopped itself (a liveness or startup probe
    /// failed): a SIGKILL that ended them was ours, nothing to settle.
    killed: &'a [String],
}

/// Where a pod's initialization stands after a pass.
enum Init {
    /// Every init container done (or the app containers already run);
    /// `acted` if this pass started one (a sidecar).
    Done { acted: bool },
    /// Waiting for an init container; `acted` if this pass started one (or
    /// a sidecar before it).
    Waiting { acted: bool, retry: Option<Duration> },
}

/// What a pass did with one container.
enum Step {
    /// Nothing: it runs, or it exited and is not to run again.
    Unchanged,
    /// Started now (or tried to); try again after this long if given.
    Started(Option<Duration>),
    /// Waiting out its restart back-off for this long.
    BackOff(Duration),
}

/// The exit code a container killed in the runtime's unknown state is
/// judged by (containerd's for an exit it could not see).
const UNKNOWN_EXIT_CODE: i32 = 255;

/// How long a container killed by SIGKILL from outside (not OOM-killed)
/// waits before it is restarted. The runtime's StopPodSandbox (someone's
/// `crictl stopp`, containerd's own clean-up) kills the containers first,
/// then tears the network down and only then stops the sandbox: a restart
/// acted on in between, from the exit event, would start the container
/// again in a sandbox being stopped, before the new sandbox (and its init
/// containers) that the sandbox's stop calls for. Its exit event wakes the
/// worker long before this ends.
const OUTSIDE_KILL_SETTLE: Duration = Duration::from_secs(2);

/// The part of [`OUTSIDE_KILL_SETTLE`] still to wait before restarting a
/// container that exited with `code` and `reason` at `finished_at_ns`
/// (wall clock), if any.
fn outside_kill_settle(code: i32, reason: &str, finished_at_ns: i64, now_ns: i64) -> Option<Duration> {
    if code != 128 + 9 || reason == "OOMKilled" || finished_at_ns <= 0 {
        return None;
    }
    let age = Duration::from_nanos(now_ns.saturating_sub(finished_at_ns).max(0) as u64);
    OUTSIDE_KILL_SETTLE.checked_sub(age).filter(|d| !d.is_zero())
}

/// Whether an app container was created or runs: the pod was initialized
/// (the kubelet's test, which an agent restart adopting a running pod
/// passes; exited app containers do not count, so after a reboot the init
/// containers run again).
fn app_started(pod: &Pod, rp: &RuntimePod) -> bool {
    model::containers(pod).iter().any(|c| {
        rp.latest(&c.name).is_some_and(|l| {
            matches!(l.state, ContainerState::Running | ContainerState::Created | ContainerState::Unknown)
        })
    })
}

impl PodSync {
    pub(super) fn setup(
        &self,
        ctx: &SyncCtx,
        _update_type: UpdateType,
        pod: &Arc<Pod>,
    ) -> Result<SyncResult, SyncError> {
        ctx.check()?;
        let uid = model::uid(pod).to_string();
        let mut rp = self.status(ctx, &uid)?;
        ctx.check()?;
        if is_terminal(pod, &rp) {
            // Every container is done and none may run again (seen, for
            // example, after an agent restart): no new sandbox for it.
            self.write_status(ctx, pod, &rp);
            return Ok(SyncResult { terminal: true, requeue_after: None });
        }
        // the status as read, first (as the kubelet's syncPod): an exit
        // shows while the pass acts on it (a restart, the next init
        // container, an image pull that takes minutes), and a pod whose
        // volumes cannot be set up yet shows Pending, its containers
        // ContainerCreating
        self.write_status(ctx, pod, &rp);
        self.make_dirs(pod)?;
        let mut sandbox = self.sandbox_config(pod, &rp);
        let ready = self.ensure_sandbox(ctx, pod, &mut rp, &mut sandbox)?;
        // whether this pass changed anything in the runtime: if not, the
        // status comes from what was read at its start (a steady-state
        // resync then costs one pod status, not two)
        let mut acted = ready.made;
        let (sandbox_id, pod_ip) = (ready.id, ready.ip);
        self.write_etc_hosts(pod, pod_ip.as_deref())?;
        let policy = model::restart_policy(pod).to_string();
        // a container whose liveness or startup probe failed is killed
        // (with the probe's grace period, if it has one) and, read again
        // as exited, restarted below by the restart policy
        let killed = self.kill_unhealthy(ctx, pod, &rp, &policy)?;
        let rp = if killed.is_empty() {
            rp
        } else {
            acted = true;
            self.fresh_status(ctx, &uid)?
        };
        let mut requeue: Option<Duration> = None;
        let mut requeue_in = |d: Duration| requeue = Some(requeue.map_or(d, |r: Duration| r.min(d)));
        let ip = if model::host_network(pod) { self.cfg.host_ip.as_deref() } else { pod_ip.as_deref() };
        let into = InSandbox { id: &sandbox_id, config: &sandbox, pod_ip: ip, killed: &killed };
        // Init containers first, one at a time, in order; then the app
        // containers (the kubelet's computeInitContainerActions).
        let mut started_sidecar = false;
        let init_done = match self.initialize(ctx, pod, &rp, &policy, &into)? {
            Init::Done { acted: a } => {
                acted |= a;
                started_sidecar = a;
                true
            }
            Init::Waiting { acted: a, retry } => {
                acted |= a;
                if let Some(d) = retry {
                    requeue_in(d);
                }
                false
            }
        };
        // the walk started a sidecar and went on: what follows reads the
        // pod as it is now (the sidecar running), not as the pass began
        let rp = if started_sidecar { self.fresh_status(ctx, &uid)? } else { rp };
        if init_done {
            // the sidecars, then the app containers; sidecars run for the
            // pod's life: restarted whenever they exit, whatever the pod's
            // restartPolicy (and only their instances in this sandbox count)
            for c in model::long_running(pod) {
                ctx.check()?;
                let sidecar = model::is_sidecar(c);
                let latest = if sidecar { rp.latest_in(&c.name, &sandbox_id) } else { rp.latest(&c.name) };
                match self.step(ctx, pod, c, &rp, latest, |code| sidecar || should_restart(&policy, code), &into)? {
                    Step::Started(retry) => {
                        acted = true;
                        if let Some(d) = retry {
                            requeue_in(d);
                        }
                    }
                    Step::BackOff(d) => requeue_in(d),
                    Step::Unchanged => {}
                }
            }
        }
        ctx.check()?;
        let rp = if acted { self.fresh_status(ctx, &uid)? } else { rp };
        let terminal = is_terminal(pod, &rp);
        self.write_status(ctx, pod, &rp);
        Ok(SyncResult { terminal, requeue_after: requeue })
    }

    /// Run the init containers: the first one not done yet is started (or
    /// restarted, with back-off, after a failure its restartPolicy
    /// retries) and the pass waits for it; a sidecar is done once running
    /// and started (its postStart returned, its startup probe passed).
    /// A pod whose app containers already run (an agent restart adopting
    /// it) was initialized: nothing re-runs. Only instances in the current
    /// sandbox count, so a new sandbox runs them all again.
    fn initialize(
        &self,
        ctx: &SyncCtx,
        pod: &Pod,
        rp: &RuntimePod,
        policy: &str,
        into: &InSandbox,
    ) -> Result<Init, SyncError> {
        let inits = model::init_containers(pod);
        if inits.is_empty() || app_started(pod, rp) {
            return Ok(Init::Done { acted: false });
        }
        let mut acted = false;
        for c in inits {
            ctx.check()?;
            let latest = rp.latest_in(&c.name, into.id);
            let sidecar = model::is_sidecar(c);
            match latest {
                Some(l) if l.state == ContainerState::Running => {
                    if sidecar && self.started(pod, c, &l.id) {
                        continue;
                    }
                    return Ok(Init::Waiting { acted, retry: None });
                }
                Some(l) if l.state == ContainerState::Exited && l.exit_code == 0 && !sidecar => continue,
                _ => {}
            }
            // regular init containers retry unless the pod never restarts
            // (then it fails: see is_terminal); sidecars always
            let restart = |code: i32| sidecar || (code != 0 && policy != "Never");
            return Ok(match self.step(ctx, pod, c, rp, latest, restart, into)? {
                // a sidecar without a startup probe has started once it runs
                // (its postStart returned): the next container starts in
                // this same pass, not after the start's event comes back
                Step::Started(None) if sidecar && c.startup_probe.is_none() => {
                    acted = true;
                    continue;
                }
                Step::Started(retry) => Init::Waiting { acted: true, retry },
                Step::BackOff(d) => Init::Waiting { acted, retry: Some(d) },
                Step::Unchanged => Init::Waiting { acted, retry: None },
            });
        }
        Ok(Init::Done { acted })
    }

    /// One past the highest `<n>.log` in the container's log directory
    /// (0 without one). Only regular files count: what a container's log
    /// was (a FIFO or a link put there is no earlier instance's log).
    fn attempt_from_logs(&self, pod: &Pod, name: &str) -> u32 {
        let dir = self.cfg.pod_log_dir(pod).join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else { return 0 };
        entries
            .flatten()
            .take(10_000)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".log")?.parse::<u32>().ok())
            .max()
            .map_or(0, |n| n.saturating_add(1))
    }

    /// Whether the running instance `id` of `c` counts as started: no
    /// startup probe, or it passed.
    fn started(&self, pod: &Pod, c: &Container, id: &str) -> bool {
        match &self.prober {
            Some(p) => p.results().started(model::uid(pod), c, id),
            None => true,
        }
    }

    /// Bring one container to what it should be: running, or exited for
    /// good. `latest` is its newest instance that counts; `restart` says
    /// whether an exit code runs it again (after the restart back-off).
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        ctx: &SyncCtx,
        pod: &Pod,
        c: &Container,
        rp: &RuntimePod,
        latest: Option<&crate::runtime::ContainerInfo>,
        restart: impl Fn(i32) -> bool,
        into: &InSandbox,
    ) -> Result<Step, SyncError> {
        let uid = model::uid(pod);
        let attempt = match latest {
            Some(l) if l.state == ContainerState::Running => return Ok(Step::Unchanged),
            Some(l) if l.state == ContainerState::Unknown => {
                // The runtime cannot say whether it runs (its record was
                // lost: a create or start cut short by the runtime's own
                // restart). The kubelet's way: kill it first, so that two
                // instances never run, then run a new one without
                // back-off, whatever the restart policy; a regular init
                // container in that state has failed, and one that may
                // not run again fails the pod (the next pass reads it
                // exited).
                let init = model::init_containers(pod).iter().any(|i| i.name == c.name);
                self.kill_unknown(ctx, pod, c, init, rp, l)?;
                if init && !model::is_sidecar(c) && !restart(UNKNOWN_EXIT_CODE) {
                    return Ok(Step::Started(None));
                }
                l.attempt + 1
            }
            Some(l) if l.state == ContainerState::Created => {
                // created but never started (a start that failed): retry it
                self.runtime.remove_container(&self.call(ctx), &l.id)?;
                l.attempt
            }
            Some(l) => {
                if !restart(l.exit_code) {
                    return Ok(Step::Unchanged);
                }
                if let Some(left) = outside_kill_settle(l.exit_code, &l.reason, l.finished_at_ns, now_ns())
                    && !into.killed.contains(&l.id)
                {
                    return Ok(Step::BackOff(left));
                }
                if let Err((left, delay)) = self.backoff.try_restart(uid, &c.name, Instant::now()) {
                    self.events.event(
                        &ObjectRef::container(pod, &c.name),
                        EventType::Warning,
                        "BackOff",
                        &format!(
                            "Back-off restarting failed container {} in pod {}_{}({uid})",
                            c.name,
                            model::name(pod),
                            model::namespace(pod)
                        ),
                    );
                    self.remember(
                        ctx,
                        &c.name,
                        "CrashLoopBackOff",
                        format!(
                            "back-off {}s restarting failed container={} pod={}_{}({uid})",
                            delay.as_secs(),
                            c.name,
                            model::name(pod),
                            model::namespace(pod),
                        ),
                    );
                    return Ok(Step::BackOff(left));
                }
                // keep the newest exited instance (for lastState and
                // `logs --previous`), remove older ones
                for old in rp
                    .containers
                    .iter()
                    .filter(|o| o.name == c.name && o.id != l.id && o.state == ContainerState::Exited)
                {
                    self.runtime.remove_container(&self.call(ctx), &old.id)?;
                    // its log goes with it, rotated files too (the kubelet's
                    // removeContainerLog)
                    let dir = self.cfg.pod_log_dir(pod).join(&c.name);
                    crate::logs::rotation::remove_instance(&dir, &format!("{}.log", old.attempt));
                }
                l.attempt + 1
            }
            // restart counts go on across sandboxes; where the runtime
            // forgot the old instances (a purge, a wiped runtime), from
            // the log files, as the kubelet does: a new instance never
            // writes into an old one's log
            None => rp.latest(&c.name).map_or_else(|| self.attempt_from_logs(pod, &c.name), |l| l.attempt + 1),
        };
        Ok(Step::Started(self.start_container(ctx, pod, c, into, attempt)?))
    }

    /// Kill `l`, an instance of `c` (an init container if `init`) in the
    /// runtime's unknown state, with the pod's grace period (its preStop
    /// hook first), and say so as the kubelet does.
    fn kill_unknown(
        &self,
        ctx: &SyncCtx,
        pod: &Pod,
        c: &Container,
        init: bool,
        rp: &RuntimePod,
        l: &crate::runtime::ContainerInfo,
    ) -> Result<(), SyncError> {
        let grace = model::spec_grace_seconds(pod).unwrap_or(30).max(0);
        let what = if init { "Init container" } else { "Container" };
        let message = format!("{what} is in \"unknown\" state, try killing it before restart");
        self.events.event(&ObjectRef::container(pod, &c.name), EventType::Normal, "Killing", &message);
        log::warn!("pod {}: container {} ({}): {message} (grace {grace}s)", model::pod_ref(pod), c.name, l.id);
        ctx.check()?;
        let ip = self.hook_ip(pod, rp);
        match self.stopper().stop(&ctx.cancel, Some(pod), ip.as_deref(), l, grace) {
            Ok(()) | Err(RuntimeError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Kill the running containers whose liveness or startup probe failed,
    /// as the kubelet does: the `Killing` event with its message, the
    /// probe's `terminationGracePeriodSeconds` if set, else the pod's.
    /// Returns the IDs of those it killed.
    fn kill_unhealthy(
        &self,
        ctx: &SyncCtx,
        pod: &Pod,
        rp: &RuntimePod,
        policy: &str,
    ) -> Result<Vec<String>, SyncError> {
        let Some(prober) = &self.prober else { return Ok(Vec::new()) };
        let uid = model::uid(pod);
        let mut killed = Vec::new();
        for c in model::long_running(pod) {
            let Some(l) = rp.latest(&c.name).filter(|l| l.state == ContainerState::Running) else { continue };
            let Some(kind) = prober.results().failed(uid, c, &l.id) else { continue };
            let probe = crate::pod::prober::probe_of(c, kind);
            let grace = probe
                .and_then(|p| p.termination_grace_period_seconds)
                .or_else(|| model::spec_grace_seconds(pod))
                .unwrap_or(30)
                .max(0);
            let what = kind.label().to_lowercase();
            // the kubelet's texts; a sidecar always restarts
            let message = if model::is_sidecar(c) {
                format!("Init container {} failed {what} probe", c.name)
            } else if policy == "Never" {
                format!("Container {} failed {what} probe", c.name)
            } else {
                format!("Container {} failed {what} probe, will be restarted", c.name)
            };
            self.events.event(&ObjectRef::container(pod, &c.name), EventType::Normal, "Killing", &message);
            log::info!("pod {}: {message} (grace {grace}s)", model::pod_ref(pod));
            ctx.check()?;
            // preStop first; the stop returns on cancellation: a pod
            // deletion during it takes over at once
            let ip = self.hook_ip(pod, rp);
            match self.stopper().stop(&ctx.cancel, Some(pod), ip.as_deref(), l, grace) {
                Ok(()) | Err(RuntimeError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            killed.push(l.id.clone());
        }
        Ok(killed)
    }

    /// Store the pod's status from the runtime's view, unless termination
    /// was requested meanwhile (the terminating phase writes that status).
    fn write_status(&self, ctx: &SyncCtx, pod: &Arc<Pod>, rp: &RuntimePod) {
        if let Some(m) = &self.metrics
            && !model::containers(pod).is_empty()
            && model::containers(pod)
                .iter()
                .all(|c| rp.latest(&c.name).is_some_and(|l| l.state == crate::runtime::ContainerState::Running))
        {
            m.pod_running(model::uid(pod));
        }
        if let Some(prober) = &self.prober
            && crate::pod::prober::has_probes(pod)
            && !ctx.termination_requested()
        {
            let ip = self.hook_ip(pod, rp);
            let seen = model::long_running(pod)
                .filter_map(|c| rp.latest(&c.name))
                .map(|l| crate::pod::prober::Seen {
                    name: l.name.clone(),
                    id: l.id.clone(),
                    running: l.state == ContainerState::Running,
                    started_at_ns: l.started_at_ns,
                })
                .collect();
            prober.observe(pod, ip.as_deref(), seen);
        }
        let waiting = self.reasons_for(model::uid(pod));
        let mut rp = rp.clone();
        self.fill_messages(pod, &mut rp);
        let rp = &rp;
        self.statuses.replace_with(model::uid(pod), |old| {
            (!ctx.termination_requested()).then(|| {
                generate(
                    pod,
                    rp,
                    &GenerateInput {
                        old,
                        waiting: &waiting,
                        terminal_phase: None,
                        id_prefix: &self.cfg.id_prefix,
                        host_ip: self.cfg.host_ip.as_deref(),
                        probes: self.prober.as_ref().map(|p| &**p.results()),
                    },
                )
            })
        });
    }

    /// Pull (by policy), create and start one container in `sandbox`. Start errors are
    /// remembered as the container's Waiting reason; returns when to retry.
    fn start_container(
        &self,
        ctx: &SyncCtx,
        pod: &Pod,
        c: &Container,
        sandbox: &InSandbox,
        attempt: u32,
    ) -> Result<Option<Duration>, SyncError> {
        let uid = model::uid(pod);
        let obj = ObjectRef::container(pod, &c.name);
        let image = c.image.clone().unwrap_or_default();
        let _ = uid;
        if let Err(no) = self.ensure_image(ctx, pod, c, &image)? {
            // after the image's own event, the kubelet's `Failed` for the
            // container (`Error: ErrImageNeverPull`, `Error: ErrImagePull`, …)
            self.events.event(&obj, EventType::Warning, "Failed", &format!("Error: {}", no.reason));
            self.remember(ctx, &c.name, no.reason, no.message);
            return Ok(Some(no.retry));
        }
        let config = match self
            .verify_run_as_non_root(ctx, pod, c, &image)
            .and_then(|()| self.verify_apparmor(pod, c))
            .and_then(|()| self.container_config(pod, c, sandbox.pod_ip, attempt))
        {
            Ok(config) => config,
            Err(e) => {
                // as the kubelet: the container is not created; the pod
                // shows why and the next pass tries again
                let msg = e.to_string();
                self.remember(ctx, &c.name, "CreateContainerConfigError", msg.clone());
                self.events.event(&obj, EventType::Warning, "Failed", &format!("Error: {msg}"));
                return Ok(Some(self.cfg.backoff_max));
            }
        };
        if config.security.privileged && !self.cfg.allow_privileged {
            let msg = format!(
                "container {} asks for privileged mode, which this node does not allow (allowPrivileged: false)",
                c.name
            );
            self.remember(ctx, &c.name, "CreateContainerConfigError", msg.clone());
            self.events.event(&obj, EventType::Warning, "Failed", &msg);
            return Ok(Some(self.cfg.backoff_max));
        }
        if config.resources.hugepage_limits.iter().any(|l| l.limit > 0)
            && self.runtime.drops_hugepage_limits(&self.call(ctx)).ok().flatten() == Some(true)
        {
            // the container runs as under the kubelet, but the pod says
            // that its limits reach no cgroup
            let msg = format!(
                "the runtime drops hugetlb limits (containerd: disable_hugetlb_controller = true): the hugepages \
                 limits of container {} are not set on its cgroup",
                c.name
            );
            log::warn!("pod {}: {msg}", model::pod_ref(pod));
            self.events.event(&obj, EventType::Warning, "HugePagesNotEnforced", &msg);
        }
        // the container's log directory, as the kubelet makes it: watched
        // by the log monitor before the container writes its first byte
        let log_dir = self.cfg.pod_log_dir(pod).join(&c.name);
        if let Err(e) = std::fs::create_dir_all(&log_dir) {
            log::warn!("pod {}: cannot create the log directory {}: {e}", model::pod_ref(pod), log_dir.display());
        }
        let id = match self.runtime.create_container(&self.call(ctx), sandbox.id, &config, sandbox.config) {
            Ok(id) => id,
            Err(RuntimeError::Cancelled { .. }) => return Err(SyncError::Cancelled),
            Err(e) => {
                self.remember(ctx, &c.name, "CreateContainerError", e.to_string());
                self.events.event(&obj, EventType::Warning, "Failed", &format!("Error: {e}"));
                return Ok(Some(self.cfg.backoff_initial));
            }
        };
        if let Some(n) = &self.new_logs {
            n.created(&id, log_dir, format!("{}.log", config.attempt));
        }
        // the kubelet's event and words for a container created
        self.events.event(&obj, EventType::Normal, "Created", &format!("Created container: {}", c.name));
        match ctx.start(|| self.runtime.start_container(&self.call(ctx), &id))? {
            Ok(()) => {
                self.forget(uid, &c.name);
                self.events.event(&obj, EventType::Normal, "Started", &format!("Started container {}", c.name));
                self.post_start(ctx, pod, c, &id, sandbox.pod_ip)
            }
            Err(RuntimeError::Cancelled { .. }) => Err(SyncError::Cancelled),
            Err(e) => {
                self.remember(ctx, &c.name, "RunContainerError", e.to_string());
                self.events.event(&obj, EventType::Warning, "Failed", &format!("Error: {e}"));
                Ok(Some(self.cfg.backoff_initial))
            }
        }
    }

    /// The container's postStart hook, right after it started: the pass
    /// waits for it (bounded by the runtime request timeout). A failure is
    /// the kubelet's: `FailedPostStartHook`, the container killed (its
    /// preStop hook runs) and restarted by the restart policy, its status
    /// `PostStartHookError` with the hook's message until then.
    fn post_start(
        &self,
        ctx: &SyncCtx,
        pod: &Pod,
        c: &Container,
        id: &str,
        pod_ip: Option<&str>,
    ) -> Result<Option<Duration>, SyncError> {
        let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) else { return Ok(None) };
        let deadline = crate::base::cancel::deadline_in(self.cfg.call_timeout);
        let Err(message) =
            crate::pod::phases::hooks::run(&*self.runtime, &ctx.cancel, pod, c, id, hook, pod_ip, deadline)
        else {
            return Ok(None);
        };
        ctx.check()?;
        let obj = ObjectRef::container(pod, &c.name);
        log::warn!("pod {}: {message}", model::pod_ref(pod));
        self.events.event(&obj, EventType::Warning, "FailedPostStartHook", "PostStartHook failed");
        self.events.event(&obj, EventType::Normal, "Killing", "FailedPostStartHook");
        let grace = model::spec_grace_seconds(pod).unwrap_or(30).max(0);
        let info = crate::runtime::ContainerInfo { id: id.to_string(), name: c.name.clone(), ..Default::default() };
        match self.stopper().stop(&ctx.cancel, Some(pod), pod_ip, &info, grace) {
            Ok(()) | Err(RuntimeError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        self.remember(ctx, &c.name, "PostStartHookError", message.to_string());
        Ok(Some(self.cfg.backoff_initial))
    }
}

/// Terminal: restartPolicy will never run an app container of this pod
/// again: every app container exited for good (running sidecars do not
/// hold the pod), or, under `Never`, an init container failed.
pub fn is_terminal(pod: &Pod, rp: &RuntimePod) -> bool {
    let policy = model::restart_policy(pod);
    if policy == "Always" {
        return false;
    }
    if policy == "Never"
        && !app_started(pod, rp)
        && model::init_containers(pod)
            .iter()
            .filter(|c| !model::is_sidecar(c))
            .any(|c| rp.latest(&c.name).is_some_and(|l| l.state == ContainerState::Exited && l.exit_code != 0))
    {
        return true;
    }
    let cs = model::containers(pod);
    !cs.is_empty()
        && cs.iter().all(|c| {
            rp.latest(&c.name)
                .is_some_and(|l| l.state == ContainerState::Exited && !should_restart(policy, l.exit_code))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_pull_policy() {
        use crate::pod::phases::pull_policy;
        let c = |image: &str| Container { name: "c".into(), image: Some(image.into()), ..Default::default() };
        assert_eq!(pull_policy(&c("busybox")), "Always");
        assert_eq!(pull_policy(&c("busybox:latest")), "Always");
        assert_eq!(pull_policy(&c("busybox:1.36")), "IfNotPresent");
        assert_eq!(pull_policy(&c("reg:5000/busybox")), "Always");
        assert_eq!(pull_policy(&c("busybox@sha256:abc")), "IfNotPresent");
    }

    #[test]
    fn a_recent_sigkill_from_outside_waits_and_nothing_else_does() {
        let s = 1_000_000_000i64;
        let now = 100 * s;
        assert_eq!(outside_kill_settle(137, "Error", now - s / 2, now), Some(Duration::from_millis(1500)));
        assert_eq!(outside_kill_settle(137, "Error", now - 3 * s, now), None, "long ago");
        assert_eq!(outside_kill_settle(137, "OOMKilled", now, now), None, "an OOM kill restarts at once");
        assert_eq!(outside_kill_settle(1, "Error", now, now), None);
        assert_eq!(outside_kill_settle(0, "Completed", now, now), None);
        assert_eq!(outside_kill_settle(137, "Error", 0, now), None, "no exit time");
        assert_eq!(outside_kill_settle(137, "Error", now + s, now), Some(OUTSIDE_KILL_SETTLE), "a clock step back");
    }

    #[test]
    fn restart_table() {
        assert!(should_restart("Always", 0));
        assert!(should_restart("OnFailure", 1));
        assert!(!should_restart("OnFailure", 0));
        assert!(!should_restart("Never", 1));
    }
}

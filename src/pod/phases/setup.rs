//! `sync_pod`: pod dirs and volumes, images, the sandbox, containers in
//! order, restarts by restartPolicy with back-off, terminal detection.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::quantity;
use crate::model::{self, Container, Pod};
use crate::pod::phases::PodSync;
use crate::pod::status::{GenerateInput, generate};
use crate::pod::volumes::projection::{self, Node, Plugin};
use crate::pod::volumes::{MountError, SetUpError};
use crate::pod::workers::{SyncCtx, SyncError, SyncResult, UpdateType};
use crate::runtime::{
    ANNOTATION_GRACE, ANNOTATION_RESTART_COUNT, ContainerConfig, ContainerState, LABEL_CONTAINER_NAME, LABEL_POD_NAME,
    LABEL_POD_NAMESPACE, LABEL_POD_UID, Mount, PortMapping, Propagation, Resources, RuntimeError, RuntimePod,
    SandboxConfig, Security, SecurityProfile,
};
use crate::telemetry::events::{EventType, ObjectRef};

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> SyncError {
    move |source| SyncError::Io { what, source }
}

/// Does restartPolicy restart a container that exited with `code`?
fn should_restart(policy: &str, code: i32) -> bool {
    match policy {
        "Always" => true,
        "OnFailure" => code != 0,
        _ => false,
    }
}

/// Why a container's config cannot be made: the container is not created
/// (`CreateContainerConfigError`) and the next pass tries again.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Env(#[from] crate::pod::phases::env::EnvError),
    #[error("failed to prepare subPath for volumeMount {mount:?} of container {container:?}: {source}")]
    SubPath {
        mount: String,
        container: String,
        #[source]
        source: crate::pod::volumes::VolumeError,
    },
    #[error("failed to prepare subPath for volumeMount {mount:?} of container {container:?}: {source}")]
    SubPathExpr {
        mount: String,
        container: String,
        #[source]
        source: crate::pod::phases::env::SubPathExprError,
    },
    /// The kubelet's `translateMountPropagation` error (validation keeps
    /// such a value out).
    #[error("invalid MountPropagation mode: {0:?}")]
    Propagation(String),
    /// `runAsNonRoot` cannot be verified or is broken (the kubelet's
    /// `verifyRunAsNonRoot` texts).
    #[error("{0}")]
    NonRoot(String),
}

/// The node's security settings that fill what a pod leaves unset.
pub struct SecurityDefaults {
    /// `seccompDefault`.
    pub seccomp_default: bool,
    /// Where `Localhost` seccomp profiles live (`<rootDir>/seccomp`).
    pub seccomp_root: std::path::PathBuf,
    pub apparmor_enabled: bool,
}

/// The sandbox a container is started in.
struct InSandbox<'a> {
    id: &'a str,
    config: &'a SandboxConfig,
    /// The pod's IP (the node's for a host-network pod), for the downward
    /// API.
    pod_ip: Option<&'a str>,
}

/// Where a pod's initialization stands after a pass.
enum Init {
    /// Every init container done (or the app containers already run).
    Done,
    /// Waiting for an init container; `acted` if this pass started one.
    Waiting { acted: bool, retry: Option<Duration> },
}

/// What a pass did with one container.
enum Step {
    /// Nothing: it runs (or is in an unknown state), or it exited and is
    /// not to run again.
    Unchanged,
    /// Started now (or tried to); try again after this long if given.
    Started(Option<Duration>),
    /// Waiting out its restart back-off for this long.
    BackOff(Duration),
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
        self.make_dirs(pod)?;
        let mut rp = self.status(ctx, &uid)?;
        ctx.check()?;
        if is_terminal(pod, &rp) {
            // Every container is done and none may run again (seen, for
            // example, after an agent restart): no new sandbox for it.
            self.write_status(ctx, pod, &rp);
            return Ok(SyncResult { terminal: true, requeue_after: None });
        }
        let mut sandbox = self.sandbox_config(pod, &rp);
        // whether this pass changed anything in the runtime: if not, the
        // status comes from what was read at its start (a steady-state
        // resync then costs one pod status, not two)
        let mut acted = false;
        let (sandbox_id, pod_ip) = match rp.ready_sandbox() {
            Some(s) => (s.id.clone(), s.ip.clone()),
            None => {
                // A new sandbox (first start, or the old one died): whatever
                // ran in an old sandbox is stopped and started again.
                for c in rp.live_containers() {
                    self.runtime.stop_container(&self.call(ctx), &c.id, Duration::from_secs(1))?;
                }
                // init containers run again in the new sandbox: their old
                // instances go (the kubelet's purge; restart counts go on
                // from the log files)
                for c in rp.containers.iter().filter(|c| model::init_containers(pod).iter().any(|i| i.name == c.name)) {
                    match self.runtime.remove_container(&self.call(ctx), &c.id) {
                        Ok(()) | Err(RuntimeError::NotFound { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                acted = true;
                // the resolver config is formed (and `resolvConf` read) for
                // a new sandbox only, with the kubelet's warnings about it;
                // the runtime reads it nowhere else
                let (dns, warnings) = crate::pod::phases::dns::pod_dns(pod, &self.cfg.resolv_conf);
                for (reason, message) in warnings {
                    self.events.event(&ObjectRef::pod(pod), EventType::Warning, reason, &message);
                }
                sandbox.dns = Some(dns);
                // the pod's cgroup with its limits, the sandbox's parent
                if let Some(cg) = &self.cfg.cgroups {
                    sandbox.cgroup_parent = cg.ensure_pod(pod).map_err(|e| {
                        let e = SyncError::PodCgroup(e);
                        let msg = e.to_string();
                        self.events.event(&ObjectRef::pod(pod), EventType::Warning, "FailedCreatePodSandBox", &msg);
                        e
                    })?;
                }
                let id = ctx.start(|| self.runtime.run_sandbox(&self.call(ctx), &sandbox))??;
                // the old containers, now exited, stay: restart counts
                // and lastState go on
                rp = self.fresh_status(ctx, &uid)?;
                let ip = if model::host_network(pod) {
                    None
                } else {
                    rp.sandboxes.iter().find(|s| s.id == id).and_then(|s| s.ip.clone())
                };
                (id, ip)
            }
        };
        self.write_etc_hosts(pod, pod_ip.as_deref())?;
        let policy = model::restart_policy(pod).to_string();
        // a container whose liveness or startup probe failed is killed
        // (with the probe's grace period, if it has one) and, read again
        // as exited, restarted below by the restart policy
        let rp = if self.kill_unhealthy(ctx, pod, &rp, &policy)? {
            acted = true;
            self.fresh_status(ctx, &uid)?
        } else {
            rp
        };
        let mut requeue: Option<Duration> = None;
        let mut requeue_in = |d: Duration| requeue = Some(requeue.map_or(d, |r: Duration| r.min(d)));
        let ip = if model::host_network(pod) { self.cfg.host_ip.as_deref() } else { pod_ip.as_deref() };
        let into = InSandbox { id: &sandbox_id, config: &sandbox, pod_ip: ip };
        // Init containers first, one at a time, in order; then the app
        // containers (the kubelet's computeInitContainerActions).
        let init_done = match self.initialize(ctx, pod, &rp, &policy, &into)? {
            Init::Done => true,
            Init::Waiting { acted: a, retry } => {
                acted |= a;
                if let Some(d) = retry {
                    requeue_in(d);
                }
                false
            }
        };
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
            return Ok(Init::Done);
        }
        for c in inits {
            ctx.check()?;
            let latest = rp.latest_in(&c.name, into.id);
            let sidecar = model::is_sidecar(c);
            match latest {
                Some(l) if l.state == ContainerState::Running => {
                    if sidecar && self.started(pod, c, &l.id) {
                        continue;
                    }
                    return Ok(Init::Waiting { acted: false, retry: None });
                }
                Some(l) if l.state == ContainerState::Exited && l.exit_code == 0 && !sidecar => continue,
                Some(l) if l.state == ContainerState::Unknown => {
                    return Ok(Init::Waiting { acted: false, retry: None });
                }
                _ => {}
            }
            // regular init containers retry unless the pod never restarts
            // (then it fails: see is_terminal); sidecars always
            let restart = |code: i32| sidecar || (code != 0 && policy != "Never");
            return Ok(match self.step(ctx, pod, c, rp, latest, restart, into)? {
                Step::Started(retry) => Init::Waiting { acted: true, retry },
                Step::BackOff(d) => Init::Waiting { acted: false, retry: Some(d) },
                Step::Unchanged => Init::Waiting { acted: false, retry: None },
            });
        }
        Ok(Init::Done)
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
            Some(l) if matches!(l.state, ContainerState::Running | ContainerState::Unknown) => {
                return Ok(Step::Unchanged);
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

    /// Kill the running containers whose liveness or startup probe failed,
    /// as the kubelet does: the `Killing` event with its message, the
    /// probe's `terminationGracePeriodSeconds` if set, else the pod's.
    /// Returns whether it killed any.
    fn kill_unhealthy(&self, ctx: &SyncCtx, pod: &Pod, rp: &RuntimePod, policy: &str) -> Result<bool, SyncError> {
        let Some(prober) = &self.prober else { return Ok(false) };
        let uid = model::uid(pod);
        let mut killed = false;
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
            killed = true;
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
            self.remember(ctx, &c.name, no.reason, no.message);
            return Ok(Some(no.retry));
        }
        let config = match self
            .verify_run_as_non_root(ctx, pod, c, &image)
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
        let id = match self.runtime.create_container(&self.call(ctx), sandbox.id, &config, sandbox.config) {
            Ok(id) => id,
            Err(RuntimeError::Cancelled { .. }) => return Err(SyncError::Cancelled),
            Err(e) => {
                self.remember(ctx, &c.name, "CreateContainerError", e.to_string());
                self.events.event(&obj, EventType::Warning, "Failed", &format!("Error: {e}"));
                return Ok(Some(self.cfg.backoff_initial));
            }
        };
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
        self.remember(ctx, &c.name, "PostStartHookError", message);
        Ok(Some(self.cfg.backoff_initial))
    }

    fn etc_hosts_path(&self, pod: &Pod) -> PathBuf {
        self.cfg.pod_dir(model::uid(pod)).join("etc-hosts")
    }

    /// The managed `/etc/hosts` of a pod, as the kubelet writes it: for a
    /// pod on the host network the node's own file, otherwise localhost and
    /// the pod's IP with its hostname; then `hostAliases`. Rewritten only
    /// when it changes.
    fn write_etc_hosts(&self, pod: &Pod, ip: Option<&str>) -> Result<(), SyncError> {
        let spec = model::spec(pod);
        let mut text = if model::host_network(pod) {
            let mut t = String::from("# Kubernetes-managed hosts file (host network).\n");
            t.push_str(&node_hosts_file());
            t
        } else {
            let hostname = spec.and_then(|s| s.hostname.clone()).unwrap_or_else(|| model::name(pod).to_string());
            let mut t = String::from(
                "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
            );
            if let Some(ip) = ip {
                t.push_str(&format!("{ip}\t{hostname}\n"));
            }
            t
        };
        let aliases = spec.and_then(|s| s.host_aliases.as_ref()).filter(|a| !a.is_empty());
        if let Some(aliases) = aliases {
            text.push_str("\n# Entries added by HostAliases.\n");
            for a in aliases {
                text.push_str(&format!("{}\t{}\n", a.ip, a.hostnames.clone().unwrap_or_default().join("\t")));
            }
        }
        let path = self.etc_hosts_path(pod);
        // the container may write its /etc/hosts: read at most what it
        // should hold, never whatever it wrote
        let dir = self.cfg.pod_dir(model::uid(pod));
        let old = crate::base::fsutil::read_regular_in(
            &dir,
            "etc-hosts",
            crate::base::fsutil::Links::Refuse,
            text.len() as u64,
        );
        if old.is_ok_and(|old| old == text.as_bytes()) {
            return Ok(());
        }
        // 0644 as the kubelet writes it: containers running as any user
        // read their /etc/hosts (it holds no secret)
        crate::base::fsutil::write_atomically_mode(&path, text.as_bytes(), 0o644)
            .map_err(io_err(format!("writing {}", path.display())))
    }

    /// The host file behind a container's termination message path,
    /// created empty; `None` when it cannot be made (the container then
    /// runs without one).
    pub(super) fn termination_log_path(&self, pod: &Pod, c: &Container, attempt: u32) -> Option<PathBuf> {
        let dir = self.cfg.pod_dir(model::uid(pod)).join("containers").join(&c.name).join(attempt.to_string());
        let file = dir.join("termination-log");
        if file.exists() {
            return Some(file);
        }
        // 0666 whatever the umask, as the kubelet makes it: a container
        // running as any user writes its termination message
        let create = || {
            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
            std::fs::create_dir_all(&dir)?;
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o666)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&file)?;
            f.set_permissions(std::fs::Permissions::from_mode(0o666))
        };
        match create() {
            Ok(()) => Some(file),
            Err(e) => {
                log::warn!("pod {}: cannot create {}: {e}", model::pod_ref(pod), file.display());
                None
            }
        }
    }

    fn make_dirs(&self, pod: &Pod) -> Result<(), SyncError> {
        let dir = self.cfg.pod_dir(model::uid(pod));
        std::fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        for v in model::spec(pod).and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
            if let Some(ed) = &v.empty_dir {
                let p = self.empty_dir_path(pod, &v.name);
                // 0777 whatever the umask, as the kubelet makes it
                crate::base::fsutil::create_dir_mode(&p, 0o777).map_err(io_err(format!("creating {}", p.display())))?;
                if ed.medium.as_deref() == Some("Memory") {
                    let limit = ed.size_limit.as_ref().and_then(|q| quantity::bytes(&q.0).ok());
                    crate::pod::volumes::mount_tmpfs(&p, limit, 0o777)
                        .map_err(|e| self.failed_mount(pod, &v.name, e))?;
                }
                self.own_volume(pod, &v.name, &p, false, false)?;
            } else if let Some(hp) = &v.host_path {
                crate::pod::volumes::check_host_path(&hp.path, hp.type_.as_deref().unwrap_or(""))
                    .map_err(|e| self.failed_mount(pod, &v.name, e))?;
            } else if let Some(plugin) = Plugin::of(v) {
                self.write_projection(pod, v, plugin)?;
            }
        }
        Ok(())
    }

    /// A configMap, secret, downwardAPI or projected volume: its files
    /// made from the objects as they are now and written atomically (a
    /// pass that finds them unchanged writes nothing). Secrets and the
    /// downward API live on a tmpfs of their own, as in the kubelet.
    fn write_projection(
        &self,
        pod: &Pod,
        v: &k8s_openapi::api::core::v1::Volume,
        plugin: Plugin,
    ) -> Result<(), SyncError> {
        let dir = self.projection_path(pod, &v.name, plugin);
        let setup_failed = |source| self.mount_failed(pod, MountError::SetUp { volume: v.name.clone(), source });
        crate::base::fsutil::create_dir_mode(&dir, 0o755)
            .map_err(|source| setup_failed(SetUpError::CreateDir { dir: dir.clone(), source }))?;
        if plugin.in_memory() {
            crate::pod::volumes::mount_tmpfs(&dir, None, 0o755).map_err(|e| setup_failed(SetUpError::Tmpfs(e)))?;
        }
        let objects = self.objects.snapshot();
        let node = Node {
            allocatable_cpu_millis: self.cfg.allocatable_cpu_millis,
            allocatable_memory_bytes: self.cfg.allocatable_memory_bytes,
            allocatable_ephemeral_bytes: self.cfg.allocatable_ephemeral_bytes,
        };
        let payload = projection::payload(pod, v, &objects, node)
            .unwrap_or_else(|| Ok(Default::default()))
            .map_err(|e| setup_failed(SetUpError::Payload(e)))?;
        match crate::pod::volumes::atomic_writer::write(&dir, &payload) {
            Ok(true) => {
                log::info!("pod {}: volume {:?} written ({} files)", model::pod_ref(pod), v.name, payload.len());
                self.own_volume(pod, &v.name, &dir, true, true)?;
            }
            Ok(false) => {}
            Err(source) => return Err(setup_failed(SetUpError::Write { dir, source })),
        }
        Ok(())
    }

    /// `fsGroup` ownership of a volume the pod owns (emptyDir, configMap,
    /// secret, downwardAPI, projected): walked when its root is not owned
    /// yet, or, under `fsGroupChangePolicy: Always`, when it was just
    /// (re)written (`changed`). A hostPath is never touched.
    fn own_volume(&self, pod: &Pod, name: &str, dir: &Path, read_only: bool, changed: bool) -> Result<(), SyncError> {
        let psc = model::spec(pod).and_then(|s| s.security_context.as_ref());
        let Some(gid) = psc.and_then(|s| s.fs_group).and_then(|g| u32::try_from(g).ok()) else { return Ok(()) };
        let always = psc.and_then(|s| s.fs_group_change_policy.as_deref()) != Some("OnRootMismatch");
        if crate::pod::volumes::owned_at_root(dir, gid, read_only) && !(always && changed) {
            return Ok(());
        }
        match crate::pod::volumes::set_ownership(dir, gid, read_only) {
            Ok(n) => {
                log::info!("pod {}: volume {name:?}: group {gid} set on {n} entries (fsGroup)", model::pod_ref(pod));
                Ok(())
            }
            Err(source) => Err(self.mount_failed(
                pod,
                MountError::SetUp { volume: name.to_string(), source: SetUpError::FsGroup { gid, source } },
            )),
        }
    }

    fn projection_path(&self, pod: &Pod, volume: &str, plugin: Plugin) -> PathBuf {
        self.cfg.pod_dir(model::uid(pod)).join("volumes").join(plugin.dir()).join(volume)
    }

    fn failed_mount(&self, pod: &Pod, volume: &str, source: crate::pod::volumes::VolumeError) -> SyncError {
        self.mount_failed(pod, MountError::Volume { volume: volume.to_string(), source })
    }

    /// The pod's `FailedMount` event for `e`, and the pass's error.
    fn mount_failed(&self, pod: &Pod, e: MountError) -> SyncError {
        self.events.event(&ObjectRef::pod(pod), EventType::Warning, "FailedMount", &e.to_string());
        SyncError::Mount(e)
    }

    fn empty_dir_path(&self, pod: &Pod, volume: &str) -> PathBuf {
        self.cfg.pod_dir(model::uid(pod)).join("volumes/kubernetes.io~empty-dir").join(volume)
    }

    fn pod_labels(pod: &Pod) -> BTreeMap<String, String> {
        let mut l: BTreeMap<String, String> = pod.metadata.labels.clone().unwrap_or_default();
        l.insert(LABEL_POD_UID.into(), model::uid(pod).into());
        l.insert(LABEL_POD_NAME.into(), model::name(pod).into());
        l.insert(LABEL_POD_NAMESPACE.into(), model::namespace(pod).into());
        l
    }

    fn sandbox_config(&self, pod: &Pod, rp: &RuntimePod) -> SandboxConfig {
        let attempt = rp.sandboxes.iter().map(|s| s.attempt + 1).max().unwrap_or(0);
        SandboxConfig {
            name: model::name(pod).into(),
            namespace: model::namespace(pod).into(),
            uid: model::uid(pod).into(),
            attempt,
            hostname: model::spec(pod)
                .and_then(|s| s.hostname.clone())
                .unwrap_or_else(|| model::name(pod).chars().take(63).collect()),
            log_directory: self.cfg.pod_log_dir(pod).display().to_string(),
            host_network: model::host_network(pod),
            host_pid: model::spec(pod).and_then(|s| s.host_pid).unwrap_or(false),
            host_ipc: model::spec(pod).and_then(|s| s.host_ipc).unwrap_or(false),
            // as the kubelet: privileged when any container is (and only
            // where privileged containers may run at all)
            privileged: self.cfg.allow_privileged
                && model::all_containers(pod)
                    .any(|c| c.security_context.as_ref().and_then(|s| s.privileged).unwrap_or(false)),
            // made (with the pod's limits) when a sandbox is created
            cgroup_parent: String::new(),
            share_pid: model::spec(pod).and_then(|s| s.share_process_namespace).unwrap_or(false),
            supplemental_groups: supplemental_groups(pod),
            seccomp: seccomp_profile(
                model::spec(pod).and_then(|s| s.security_context.as_ref()?.seccomp_profile.as_ref()),
                &self.security_defaults(),
            ),
            sysctls: model::spec(pod)
                .and_then(|s| s.security_context.as_ref()?.sysctls.as_ref())
                .map(|l| l.iter().map(|s| (s.name.clone(), s.value.clone())).collect())
                .unwrap_or_default(),
            // the app containers' and the sidecars' (which serve as long)
            port_mappings: model::long_running(pod)
                .flat_map(|c| c.ports.iter().flatten())
                .filter(|p| p.host_port.is_some_and(|h| h > 0))
                .map(|p| PortMapping {
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    container_port: p.container_port,
                    host_port: p.host_port.unwrap_or(0),
                    host_ip: p.host_ip.clone().unwrap_or_default(),
                })
                .collect(),
            // formed when a sandbox is created (`sync_pod`)
            dns: None,
            labels: Self::pod_labels(pod),
            annotations: pod.metadata.annotations.clone().unwrap_or_default(),
        }
    }

    fn security_defaults(&self) -> SecurityDefaults {
        SecurityDefaults {
            seccomp_default: self.cfg.seccomp_default,
            seccomp_root: self.cfg.root_dir.join("seccomp"),
            apparmor_enabled: self.cfg.apparmor_enabled,
        }
    }

    /// The kubelet's `verifyRunAsNonRoot`: with `runAsNonRoot`, an explicit
    /// `runAsUser` must not be 0, and without one the image's user (from
    /// `ImageStatus`; none at all is root) must be a numeric uid other
    /// than 0.
    fn verify_run_as_non_root(&self, ctx: &SyncCtx, pod: &Pod, c: &Container, image: &str) -> Result<(), ConfigError> {
        let psc = model::spec(pod).and_then(|s| s.security_context.as_ref());
        let csc = c.security_context.as_ref();
        if !csc.and_then(|s| s.run_as_non_root).or(psc.and_then(|s| s.run_as_non_root)).unwrap_or(false) {
            return Ok(());
        }
        let who = format!("{}_{}({})", model::name(pod), model::namespace(pod), model::uid(pod));
        if let Some(u) = csc.and_then(|s| s.run_as_user).or(psc.and_then(|s| s.run_as_user)) {
            if u == 0 {
                return Err(ConfigError::NonRoot(format!(
                    "container's runAsUser breaks non-root policy (pod: {who:?}, container: {})",
                    c.name
                )));
            }
            return Ok(());
        }
        let info =
            self.runtime.image_status(&self.call(ctx), image).map_err(|e| ConfigError::NonRoot(e.to_string()))?;
        let (uid, username) = info.map(|i| (i.uid, i.username)).unwrap_or_default();
        match (uid, username.as_str()) {
            (None, "") | (Some(0), _) => Err(ConfigError::NonRoot(format!(
                "container has runAsNonRoot and image will run as root (pod: {who:?}, container: {})",
                c.name
            ))),
            (None, name) => Err(ConfigError::NonRoot(format!(
                "container has runAsNonRoot and image has non-numeric user ({name}), cannot verify user is non-root (pod: {who:?}, container: {})",
                c.name
            ))),
            (Some(_), _) => Ok(()),
        }
    }

    fn container_config(
        &self,
        pod: &Pod,
        c: &Container,
        pod_ip: Option<&str>,
        attempt: u32,
    ) -> Result<ContainerConfig, ConfigError> {
        let objects = self.objects.snapshot();
        let downward = crate::pod::phases::env::Downward {
            pod_ip,
            host_ip: self.cfg.host_ip.as_deref(),
            allocatable_cpu_millis: self.cfg.allocatable_cpu_millis,
            allocatable_memory_bytes: self.cfg.allocatable_memory_bytes,
            allocatable_ephemeral_bytes: self.cfg.allocatable_ephemeral_bytes,
            objects: &objects,
        };
        let env = crate::pod::phases::env::environment(pod, c, &downward)?;
        let (command, args) = crate::pod::phases::env::command_and_args(c, &env);
        let mut labels = Self::pod_labels(pod);
        labels.insert(LABEL_CONTAINER_NAME.into(), c.name.clone());
        let mut annotations = BTreeMap::new();
        annotations.insert(ANNOTATION_RESTART_COUNT.to_string(), attempt.to_string());
        annotations.insert(
            "io.kubernetes.container.terminationMessagePath".to_string(),
            c.termination_message_path.clone().unwrap_or_else(|| "/dev/termination-log".into()),
        );
        annotations.insert(
            ANNOTATION_GRACE.to_string(),
            model::spec_grace_seconds(pod).unwrap_or(model::DEFAULT_GRACE_SECONDS).to_string(),
        );
        let volumes = model::spec(pod).and_then(|s| s.volumes.as_ref());
        let mut mounts: Vec<Mount> = Vec::new();
        for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
            let Some(v) = volumes.and_then(|vs| vs.iter().find(|v| v.name == m.name)) else { continue };
            // the volumes whose files podwarden writes are read-only in
            // every container, as in the kubelet
            let mut read_only = m.read_only.unwrap_or(false);
            let host = if v.empty_dir.is_some() {
                self.empty_dir_path(pod, &v.name)
            } else if let Some(hp) = &v.host_path {
                PathBuf::from(&hp.path)
            } else if let Some(plugin) = Plugin::of(v) {
                read_only = true;
                self.projection_path(pod, &v.name, plugin)
            } else {
                continue;
            };
            let sub =
                match (m.sub_path.as_deref().filter(|s| !s.is_empty()), m.sub_path_expr.as_deref()) {
                    (Some(sub), _) => Some(sub.to_string()),
                    (None, Some(expr)) if !expr.is_empty() => {
                        Some(crate::pod::phases::env::sub_path_expr(expr, &env).map_err(|e| {
                            ConfigError::SubPathExpr { mount: m.name.clone(), container: c.name.clone(), source: e }
                        })?)
                    }
                    _ => None,
                };
            let host = match sub {
                None => host,
                Some(sub) => {
                    // pods/<uid>/volume-subpaths/<volume>/<container>/<index>,
                    // the kubelet's layout
                    let target = self
                        .cfg
                        .pod_dir(model::uid(pod))
                        .join("volume-subpaths")
                        .join(&m.name)
                        .join(&c.name)
                        .join(i.to_string());
                    crate::pod::volumes::prepare_subpath(&host, &sub, &target).map_err(|source| {
                        ConfigError::SubPath { mount: m.name.clone(), container: c.name.clone(), source }
                    })?;
                    target
                }
            };
            mounts.push(Mount {
                host_path: host.display().to_string(),
                container_path: m.mount_path.clone(),
                readonly: read_only,
                propagation: propagation(m.mount_propagation.as_deref())?,
            });
        }
        let mut mounts: Vec<Mount> = mounts;
        if !c.volume_mounts.iter().flatten().any(|m| m.mount_path == "/etc/hosts") {
            mounts.push(Mount {
                host_path: self.etc_hosts_path(pod).display().to_string(),
                container_path: "/etc/hosts".into(),
                readonly: false,
                propagation: Propagation::Private,
            });
        }
        if let Some(log) = self.termination_log_path(pod, c, attempt) {
            mounts.push(Mount {
                host_path: log.display().to_string(),
                container_path: c.termination_message_path.clone().unwrap_or_else(|| "/dev/termination-log".into()),
                readonly: false,
                propagation: Propagation::Private,
            });
        }
        Ok(ContainerConfig {
            name: c.name.clone(),
            attempt,
            image: c.image.clone().unwrap_or_default(),
            command,
            args,
            env,
            working_dir: c.working_dir.clone().unwrap_or_default(),
            log_path: format!("{}/{attempt}.log", c.name),
            mounts,
            resources: Resources {
                oom_score_adj: model::qos::oom_score_adj(pod, c, self.cfg.memory_capacity_bytes),
                ..resources(c)
            },
            security: security(pod, c, &self.security_defaults()),
            labels,
            annotations,
        })
    }
}

/// A volumeMount's `mountPropagation` as the kubelet translates it for the
/// runtime: unset and `None` are private, `HostToContainer` rslave,
/// `Bidirectional` rshared.
fn propagation(mode: Option<&str>) -> Result<Propagation, ConfigError> {
    match mode {
        None | Some("None") => Ok(Propagation::Private),
        Some("HostToContainer") => Ok(Propagation::HostToContainer),
        Some("Bidirectional") => Ok(Propagation::Bidirectional),
        Some(other) => Err(ConfigError::Propagation(other.to_string())),
    }
}

/// Linux resources from requests and limits, as the kubelet maps them:
/// shares from the CPU request (limit if no request), CFS quota from the CPU
/// limit over a 100 ms period, memory limit in bytes.
pub fn resources(c: &Container) -> Resources {
    let get =
        |m: Option<&std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
         k: &str| m.and_then(|m| m.get(k)).map(|q| q.0.clone());
    let r = c.resources.as_ref();
    let limits = r.and_then(|r| r.limits.as_ref());
    let requests = r.and_then(|r| r.requests.as_ref());
    let cpu_limit = get(limits, "cpu").and_then(|q| quantity::cpu_millis(&q).ok());
    let cpu_request = get(requests, "cpu").and_then(|q| quantity::cpu_millis(&q).ok()).or(cpu_limit);
    let mem_limit = get(limits, "memory").and_then(|q| quantity::bytes(&q).ok());
    Resources {
        cpu_shares: crate::node::cgroups::shares(cpu_request.unwrap_or(0)),
        cpu_quota: cpu_limit.map_or(0, crate::node::cgroups::quota),
        cpu_period: if cpu_limit.is_some() { crate::node::cgroups::CPU_PERIOD } else { 0 },
        memory_limit_bytes: mem_limit.unwrap_or(0),
        oom_score_adj: 0,
    }
}

/// The pod's `fsGroup` then its `supplementalGroups`, the groups every
/// container's processes get besides their own.
pub fn supplemental_groups(pod: &Pod) -> Vec<i64> {
    let psc = model::spec(pod).and_then(|s| s.security_context.as_ref());
    let fs_group = psc.and_then(|s| s.fs_group);
    fs_group.into_iter().chain(psc.and_then(|s| s.supplemental_groups.clone()).unwrap_or_default()).collect()
}

/// A `seccompProfile` as the runtime gets it: `Localhost` names a file
/// under the seccomp root; unset is `RuntimeDefault` with `seccompDefault`,
/// else `Unconfined` (the kubelet's rules).
pub fn seccomp_profile(
    p: Option<&k8s_openapi::api::core::v1::SeccompProfile>,
    d: &SecurityDefaults,
) -> SecurityProfile {
    match p.map(|p| (p.type_.as_str(), p.localhost_profile.as_deref())) {
        None if d.seccomp_default => SecurityProfile::RuntimeDefault,
        None => SecurityProfile::Unconfined,
        Some(("RuntimeDefault", _)) => SecurityProfile::RuntimeDefault,
        Some(("Localhost", Some(f))) => SecurityProfile::Localhost(d.seccomp_root.join(f).display().to_string()),
        Some(_) => SecurityProfile::Unconfined,
    }
}

/// The AppArmor profile container `c` asks for: its
/// `securityContext.appArmorProfile`, else the annotation
/// `container.apparmor.security.beta.kubernetes.io/<name>`, else the
/// pod's; `None` when none is set.
pub fn apparmor_profile(pod: &Pod, c: &Container) -> Option<SecurityProfile> {
    let field = |p: &k8s_openapi::api::core::v1::AppArmorProfile| match p.type_.as_str() {
        "RuntimeDefault" => SecurityProfile::RuntimeDefault,
        "Localhost" => SecurityProfile::Localhost(p.localhost_profile.clone().unwrap_or_default()),
        _ => SecurityProfile::Unconfined,
    };
    let annotation = |v: &str| match v {
        "runtime/default" => SecurityProfile::RuntimeDefault,
        "unconfined" => SecurityProfile::Unconfined,
        v => SecurityProfile::Localhost(v.strip_prefix("localhost/").unwrap_or(v).to_string()),
    };
    let psc = model::spec(pod).and_then(|s| s.security_context.as_ref());
    c.security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.as_ref())
        .map(field)
        .or_else(|| {
            let key = format!("{APPARMOR_ANNOTATION_PREFIX}{}", c.name);
            pod.metadata.annotations.as_ref().and_then(|a| a.get(&key)).map(|v| annotation(v))
        })
        .or_else(|| psc.and_then(|s| s.app_armor_profile.as_ref()).map(field))
}

/// The annotation form of a container's AppArmor profile, before its name.
pub const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// Security settings from the pod's and the container's security contexts
/// (the container's win), with the node's defaults.
pub fn security(pod: &Pod, c: &Container, d: &SecurityDefaults) -> Security {
    let psc = model::spec(pod).and_then(|s| s.security_context.as_ref());
    let csc = c.security_context.as_ref();
    let caps = csc.and_then(|s| s.capabilities.as_ref());
    let seccomp = csc.and_then(|s| s.seccomp_profile.as_ref()).or(psc.and_then(|s| s.seccomp_profile.as_ref()));
    Security {
        run_as_user: csc.and_then(|s| s.run_as_user).or(psc.and_then(|s| s.run_as_user)),
        run_as_group: csc.and_then(|s| s.run_as_group).or(psc.and_then(|s| s.run_as_group)),
        supplemental_groups: supplemental_groups(pod),
        seccomp: seccomp_profile(seccomp, d),
        apparmor: if d.apparmor_enabled { apparmor_profile(pod, c) } else { None },
        privileged: csc.and_then(|s| s.privileged).unwrap_or(false),
        readonly_rootfs: csc.and_then(|s| s.read_only_root_filesystem).unwrap_or(false),
        add_capabilities: caps.and_then(|c| c.add.clone()).unwrap_or_default(),
        drop_capabilities: caps.and_then(|c| c.drop.clone()).unwrap_or_default(),
        no_new_privs: csc.and_then(|s| s.allow_privilege_escalation) == Some(false),
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

/// The node's `/etc/hosts` (at most 1 MiB), for pods on the host network;
/// empty if it cannot be read.
fn node_hosts_file() -> String {
    crate::base::fsutil::read_host_file(Path::new("/etc/hosts"), 1 << 20).unwrap_or_else(|e| {
        log::warn!("/etc/hosts: {e}; host-network pods get only their hostAliases");
        String::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_pull_policy() {
        use crate::pod::phases::pull::pull_policy;
        let c = |image: &str| Container { name: "c".into(), image: Some(image.into()), ..Default::default() };
        assert_eq!(pull_policy(&c("busybox")), "Always");
        assert_eq!(pull_policy(&c("busybox:latest")), "Always");
        assert_eq!(pull_policy(&c("busybox:1.36")), "IfNotPresent");
        assert_eq!(pull_policy(&c("reg:5000/busybox")), "Always");
        assert_eq!(pull_policy(&c("busybox@sha256:abc")), "IfNotPresent");
    }

    #[test]
    fn the_sandbox_is_privileged_when_a_container_is_and_the_node_allows_it() {
        use crate::pod::phases::SyncConfig;
        let priv_pod: Pod = serde_yaml_ng::from_str(
            "metadata:\n  name: p\n  uid: u1\nspec:\n  containers:\n  - name: a\n    image: i\n  - name: b\n    image: i\n    securityContext:\n      privileged: true\n",
        )
        .unwrap();
        let plain: Pod = serde_yaml_ng::from_str(
            "metadata:\n  name: q\n  uid: u2\nspec:\n  containers:\n  - name: a\n    image: i\n",
        )
        .unwrap();
        let sync = |allow: bool| {
            let cfg = SyncConfig {
                root_dir: "/nonexistent/root".into(),
                pod_logs_dir: "/nonexistent/logs".into(),
                call_timeout: Duration::from_secs(1),
                backoff_initial: Duration::from_secs(1),
                backoff_max: Duration::from_secs(1),
                id_prefix: "fake://".into(),
                host_ip: None,
                allow_privileged: allow,
                allocatable_cpu_millis: 1000,
                allocatable_memory_bytes: 1 << 30,
                allocatable_ephemeral_bytes: 10 << 30,
                memory_capacity_bytes: 4 << 30,
                resolv_conf: "/etc/resolv.conf".into(),
                seccomp_default: false,
                apparmor_enabled: false,
                cgroups: None,
                max_parallel_pulls: 1,
            };
            PodSync::new(
                Arc::new(crate::runtime::fake::FakeRuntime::new()),
                Arc::new(crate::pod::status::StatusManager::new()),
                Arc::new(crate::telemetry::events::EventRecorder::new(10)),
                cfg,
            )
        };
        let rp = RuntimePod::default();
        assert!(sync(true).sandbox_config(&priv_pod, &rp).privileged);
        assert!(!sync(true).sandbox_config(&plain, &rp).privileged);
        // not allowed: its containers are refused anyway; the sandbox stays plain
        assert!(!sync(false).sandbox_config(&priv_pod, &rp).privileged);
    }

    #[test]
    fn restart_table() {
        assert!(should_restart("Always", 0));
        assert!(should_restart("OnFailure", 1));
        assert!(!should_restart("OnFailure", 0));
        assert!(!should_restart("Never", 1));
    }
}

//! `sync_pod`: pod dirs and volumes, images, the sandbox, containers in
//! order, restarts by restartPolicy with back-off, terminal detection.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::PodSync;
use crate::events::{EventType, ObjectRef};
use crate::model::{self, Container, Pod};
use crate::podworkers::{SyncCtx, SyncError, SyncResult, UpdateType};
use crate::runtime::{
    ANNOTATION_GRACE, ANNOTATION_RESTART_COUNT, ContainerConfig, ContainerState, LABEL_CONTAINER_NAME, LABEL_POD_NAME,
    LABEL_POD_NAMESPACE, LABEL_POD_UID, Mount, RuntimeError, RuntimePod, SandboxConfig,
};
use crate::status::{GenerateInput, generate};

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> SyncError {
    move |source| SyncError::Io { what, source }
}

/// The kubelet's default pull policy: Always for `:latest` or no tag.
pub fn pull_policy(c: &Container) -> &str {
    if let Some(p) = c.image_pull_policy.as_deref() {
        return p;
    }
    let image = c.image.as_deref().unwrap_or("");
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') {
        return "IfNotPresent";
    }
    match last.split_once(':') {
        None => "Always",
        Some((_, "latest")) => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// Does restartPolicy restart a container that exited with `code`?
fn should_restart(policy: &str, code: i32) -> bool {
    match policy {
        "Always" => true,
        "OnFailure" => code != 0,
        _ => false,
    }
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
        let rp = self.runtime.pod_status(&self.call(ctx), &uid)?;
        ctx.check()?;
        if is_terminal(pod, &rp) {
            // Every container is done and none may run again (seen, for
            // example, after an agent restart): no new sandbox for it.
            self.write_status(ctx, pod, &rp);
            return Ok(SyncResult { terminal: true, requeue_after: None });
        }
        let sandbox = self.sandbox_config(pod, &rp);
        let sandbox_id = match rp.ready_sandbox() {
            Some(s) => s.id.clone(),
            None => {
                // A new sandbox (first start, or the old one died): whatever
                // ran in an old sandbox is stopped and started again.
                for c in rp.live_containers() {
                    self.runtime.stop_container(&self.call(ctx), &c.id, Duration::from_secs(1))?;
                }
                // `rp` keeps the old containers: restart counts continue.
                ctx.start(|| self.runtime.run_sandbox(&self.call(ctx), &sandbox))??
            }
        };
        let policy = model::restart_policy(pod).to_string();
        let mut requeue: Option<Duration> = None;
        let mut requeue_in = |d: Duration| requeue = Some(requeue.map_or(d, |r: Duration| r.min(d)));
        for c in model::containers(pod) {
            ctx.check()?;
            let latest = rp.latest(&c.name).cloned();
            let attempt = match &latest {
                Some(l) if matches!(l.state, ContainerState::Running | ContainerState::Unknown) => continue,
                Some(l) if l.state == ContainerState::Created => {
                    // created but never started (a start that failed): retry it
                    self.runtime.remove_container(&self.call(ctx), &l.id)?;
                    l.attempt
                }
                Some(l) => {
                    if !should_restart(&policy, l.exit_code) {
                        continue;
                    }
                    if let Err((left, delay)) = self.backoff.try_restart(&uid, &c.name, Instant::now()) {
                        self.remember(
                            ctx,
                            &c.name,
                            "CrashLoopBackOff",
                            format!(
                                "back-off {}s restarting failed container={} pod={}",
                                delay.as_secs(),
                                c.name,
                                model::name(pod)
                            ),
                        );
                        requeue_in(left);
                        continue;
                    }
                    // keep the newest exited instance (for lastState and
                    // `logs --previous`), remove older ones
                    for old in rp
                        .containers
                        .iter()
                        .filter(|o| o.name == c.name && o.id != l.id && o.state == ContainerState::Exited)
                    {
                        self.runtime.remove_container(&self.call(ctx), &old.id)?;
                    }
                    l.attempt + 1
                }
                None => 0,
            };
            if let Some(wait) = self.start_container(ctx, pod, c, &sandbox_id, &sandbox, attempt)? {
                requeue_in(wait);
            }
        }
        ctx.check()?;
        let rp = self.runtime.pod_status(&self.call(ctx), &uid)?;
        let terminal = is_terminal(pod, &rp);
        self.write_status(ctx, pod, &rp);
        Ok(SyncResult { terminal, requeue_after: requeue })
    }

    /// Store the pod's status from the runtime's view, unless termination
    /// was requested meanwhile (the terminating phase writes that status).
    fn write_status(&self, ctx: &SyncCtx, pod: &Pod, rp: &RuntimePod) {
        let waiting = self.reasons_for(model::uid(pod));
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
                    },
                )
            })
        });
    }

    /// Pull (by policy), create and start one container. Start errors are
    /// remembered as the container's Waiting reason; returns when to retry.
    fn start_container(
        &self,
        ctx: &SyncCtx,
        pod: &Pod,
        c: &Container,
        sandbox_id: &str,
        sandbox: &SandboxConfig,
        attempt: u32,
    ) -> Result<Option<Duration>, SyncError> {
        let uid = model::uid(pod);
        let obj = ObjectRef::pod(pod);
        let image = c.image.clone().unwrap_or_default();
        let pulled = match pull_policy(c) {
            "Never" => match self.runtime.image_status(&self.call(ctx), &image)? {
                Some(r) => Ok(r),
                None => Err(RuntimeError::ImageNeverPull { image: image.clone() }),
            },
            "IfNotPresent" => match self.runtime.image_status(&self.call(ctx), &image)? {
                Some(r) => Ok(r),
                None => self.runtime.pull_image(&self.call(ctx), &image),
            },
            _ => self.runtime.pull_image(&self.call(ctx), &image),
        };
        if let Err(e) = pulled {
            let (reason, retry) = match &e {
                RuntimeError::ImageNeverPull { .. } => ("ErrImageNeverPull", self.cfg.backoff_initial),
                _ => {
                    let seen = self
                        .reasons_for(uid)
                        .get(&c.name)
                        .is_some_and(|w| w.reason == "ErrImagePull" || w.reason == "ImagePullBackOff");
                    (if seen { "ImagePullBackOff" } else { "ErrImagePull" }, self.cfg.backoff_initial)
                }
            };
            if matches!(e, RuntimeError::Cancelled { .. }) {
                return Err(SyncError::Cancelled);
            }
            self.remember(ctx, &c.name, reason, e.to_string());
            self.events.event(&obj, EventType::Warning, "Failed", &format!("{reason}: {e}"));
            return Ok(Some(retry));
        }
        let config = self.container_config(pod, c, attempt);
        let id = match self.runtime.create_container(&self.call(ctx), sandbox_id, &config, sandbox) {
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
                Ok(None)
            }
            Err(RuntimeError::Cancelled { .. }) => Err(SyncError::Cancelled),
            Err(e) => {
                self.remember(ctx, &c.name, "RunContainerError", e.to_string());
                self.events.event(&obj, EventType::Warning, "Failed", &format!("Error: {e}"));
                Ok(Some(self.cfg.backoff_initial))
            }
        }
    }

    fn make_dirs(&self, pod: &Pod) -> Result<(), SyncError> {
        let dir = self.cfg.pod_dir(model::uid(pod));
        std::fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        for v in model::spec(pod).and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
            if v.empty_dir.is_some() {
                let p = self.empty_dir_path(pod, &v.name);
                std::fs::create_dir_all(&p).map_err(io_err(format!("creating {}", p.display())))?;
            }
        }
        Ok(())
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
            labels: Self::pod_labels(pod),
            annotations: pod.metadata.annotations.clone().unwrap_or_default(),
        }
    }

    fn container_config(&self, pod: &Pod, c: &Container, attempt: u32) -> ContainerConfig {
        let mut labels = Self::pod_labels(pod);
        labels.insert(LABEL_CONTAINER_NAME.into(), c.name.clone());
        let mut annotations = BTreeMap::new();
        annotations.insert(ANNOTATION_RESTART_COUNT.to_string(), attempt.to_string());
        annotations.insert(
            ANNOTATION_GRACE.to_string(),
            model::spec_grace_seconds(pod).unwrap_or(model::DEFAULT_GRACE_SECONDS).to_string(),
        );
        let volumes = model::spec(pod).and_then(|s| s.volumes.as_ref());
        let mounts = c
            .volume_mounts
            .iter()
            .flatten()
            .filter_map(|m| {
                let v = volumes?.iter().find(|v| v.name == m.name)?;
                let host = if v.empty_dir.is_some() {
                    self.empty_dir_path(pod, &v.name).display().to_string()
                } else {
                    v.host_path.as_ref()?.path.clone()
                };
                Some(Mount {
                    host_path: host,
                    container_path: m.mount_path.clone(),
                    readonly: m.read_only.unwrap_or(false),
                })
            })
            .collect();
        ContainerConfig {
            name: c.name.clone(),
            attempt,
            image: c.image.clone().unwrap_or_default(),
            command: c.command.clone().unwrap_or_default(),
            args: c.args.clone().unwrap_or_default(),
            env: c.env.iter().flatten().map(|e| (e.name.clone(), e.value.clone().unwrap_or_default())).collect(),
            working_dir: c.working_dir.clone().unwrap_or_default(),
            log_path: format!("{}/{attempt}.log", c.name),
            mounts,
            labels,
            annotations,
        }
    }
}

/// Terminal: restartPolicy will never run a container of this pod again.
pub fn is_terminal(pod: &Pod, rp: &RuntimePod) -> bool {
    let policy = model::restart_policy(pod);
    if policy == "Always" {
        return false;
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
        let c = |image: &str| Container { name: "c".into(), image: Some(image.into()), ..Default::default() };
        assert_eq!(pull_policy(&c("busybox")), "Always");
        assert_eq!(pull_policy(&c("busybox:latest")), "Always");
        assert_eq!(pull_policy(&c("busybox:1.36")), "IfNotPresent");
        assert_eq!(pull_policy(&c("reg:5000/busybox")), "Always");
        assert_eq!(pull_policy(&c("busybox@sha256:abc")), "IfNotPresent");
    }

    #[test]
    fn restart_table() {
        assert!(should_restart("Always", 0));
        assert!(should_restart("OnFailure", 1));
        assert!(!should_restart("OnFailure", 0));
        assert!(!should_restart("Never", 1));
    }
}

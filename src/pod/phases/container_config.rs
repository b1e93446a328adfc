//! A container's config for the runtime: its environment and command, its
//! mounts (volumes, subPaths, `/etc/hosts`, the termination log), its
//! resources and security settings; and the kubelet's `runAsNonRoot`
//! check. A config that cannot be made is a `ConfigError`
//! (`CreateContainerConfigError`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::model::quantity;
use crate::model::{self, Container, Pod};
use crate::pod::phases::PodSync;
use crate::pod::phases::security::{
    APPARMOR_PROFILES, APPARMOR_PROFILES_MAX, apparmor_profile, apparmor_profile_listed, security,
};
use crate::pod::volumes::projection::Plugin;
use crate::pod::workers::SyncCtx;
use crate::runtime::{
    ANNOTATION_GRACE, ANNOTATION_RESTART_COUNT, ContainerConfig, LABEL_CONTAINER_NAME, Mount, Propagation, Resources,
};

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
    /// The container's `Localhost` AppArmor profile is not loaded on the
    /// node (it is loaded with `apparmor_parser`; the next pass looks
    /// again).
    #[error("Cannot enforce AppArmor: profile {0:?} is not loaded on the node")]
    AppArmorNotLoaded(String),
}

impl PodSync {
    /// A `Localhost` AppArmor profile must be loaded before the container
    /// is made: the runtime would fail its start with a text that does not
    /// name the profile, again on every retry. Checked only when AppArmor
    /// is on and the kernel's list can be read whole; anything else is the
    /// runtime's to decide.
    pub(super) fn verify_apparmor(&self, pod: &Pod, c: &Container) -> Result<(), ConfigError> {
        if !self.cfg.apparmor_enabled {
            return Ok(());
        }
        let Some(crate::runtime::SecurityProfile::Localhost(name)) = apparmor_profile(pod, c) else {
            return Ok(());
        };
        let path = std::path::Path::new(APPARMOR_PROFILES);
        match crate::base::fsutil::read_host_file(path, APPARMOR_PROFILES_MAX) {
            Ok(list) if (list.len() as u64) < APPARMOR_PROFILES_MAX && !apparmor_profile_listed(&list, &name) => {
                Err(ConfigError::AppArmorNotLoaded(name))
            }
            _ => Ok(()),
        }
    }

    /// The kubelet's `verifyRunAsNonRoot`: with `runAsNonRoot`, an explicit
    /// `runAsUser` must not be 0, and without one the image's user (from
    /// `ImageStatus`; none at all is root) must be a numeric uid other
    /// than 0.
    pub(super) fn verify_run_as_non_root(
        &self,
        ctx: &SyncCtx,
        pod: &Pod,
        c: &Container,
        image: &str,
    ) -> Result<(), ConfigError> {
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

    pub(super) fn container_config(
        &self,
        pod: &Pod,
        c: &Container,
        pod_ip: Option<&str>,
        attempt: u32,
    ) -> Result<ContainerConfig, ConfigError> {
        let objects = self.objects.snapshot();
        let links = pod.spec.as_ref().and_then(|s| s.enable_service_links).unwrap_or(true);
        let services =
            self.cluster.get().map(|c| c.service_env(crate::model::namespace(pod), links)).unwrap_or_default();
        let downward = crate::pod::phases::env::Downward {
            services: &services,
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
                hugepage_limits: crate::node::hugepages::container_limits(c, crate::node::hugepages::page_sizes()),
                ..resources(c)
            },
            security: security(pod, c, &self.security_defaults()),
            labels,
            annotations,
            stdin: c.stdin.unwrap_or(false),
            stdin_once: c.stdin_once.unwrap_or(false),
            tty: c.tty.unwrap_or(false),
        })
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
        hugepage_limits: Vec::new(),
    }
}

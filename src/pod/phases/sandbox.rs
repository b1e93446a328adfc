//! A pod's sandbox: its config from the pod, a new one when none is ready
//! (what ran in the old one stopped, the pod's DNS config and cgroup), and
//! the pod's managed `/etc/hosts`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::model::{self, Pod};
use crate::pod::phases::security::{seccomp_profile, supplemental_groups};
use crate::pod::phases::{PodSync, io_err};
use crate::pod::workers::{SyncCtx, SyncError};
use crate::runtime::{
    LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID, PortMapping, RuntimeError, RuntimePod, SandboxConfig,
};
use crate::telemetry::events::{EventType, ObjectRef};

/// The sandbox a set-up pass runs the pod's containers in.
pub(super) struct Ready {
    pub id: String,
    /// The pod's IP (none on the host network).
    pub ip: Option<String>,
    /// This pass made it.
    pub made: bool,
}

impl PodSync {
    /// The pod's ready sandbox, or a new one when it has none (first
    /// start, or the old one died): whatever ran in an old sandbox is
    /// stopped (to start again in the new one) and its init containers
    /// removed; the new sandbox gets the pod's DNS config (`sandbox.dns`)
    /// and cgroup. `rp` is read again after a new one.
    pub(super) fn ensure_sandbox(
        &self,
        ctx: &SyncCtx,
        pod: &Pod,
        rp: &mut RuntimePod,
        sandbox: &mut SandboxConfig,
    ) -> Result<Ready, SyncError> {
        if let Some(s) = rp.ready_sandbox() {
            return Ok(Ready { id: s.id.clone(), ip: s.ip.clone(), made: false });
        }
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
        // the resolver config is formed (and `resolvConf` read) for
        // a new sandbox only, with the kubelet's warnings about it;
        // the runtime reads it nowhere else
        let (dns, warnings) = crate::pod::phases::dns::pod_dns(pod, &self.cfg.resolv_conf);
        for (reason, message) in warnings {
            self.events.event(&ObjectRef::pod(pod), EventType::Warning, reason, &message);
        }
        sandbox.dns = Some(dns);
        // the pod's cgroup with its limits, the sandbox's parent (which
        // `sandbox_config` names)
        if let Some(cg) = &self.cfg.cgroups {
            cg.ensure_pod(pod).map_err(|e| {
                let e = SyncError::PodCgroup(e);
                let msg = e.to_string();
                self.events.event(&ObjectRef::pod(pod), EventType::Warning, "FailedCreatePodSandBox", &msg);
                e
            })?;
        }
        // in turns (see `sandbox_starts`); a pod killed meanwhile starts nothing
        let Some(turn) = self.sandbox_starts.enter_within(&ctx.cancel, Some(super::SANDBOX_TURN_WAIT)) else {
            return Err(SyncError::Cancelled);
        };
        let id = ctx.start(|| self.runtime.run_sandbox(&self.call(ctx), sandbox))??;
        drop(turn);
        // the old containers, now exited, stay: restart counts
        // and lastState go on
        *rp = self.fresh_status(ctx, model::uid(pod))?;
        let ip = if model::host_network(pod) {
            None
        } else {
            rp.sandboxes.iter().find(|s| s.id == id).and_then(|s| s.ip.clone())
        };
        Ok(Ready { id, ip, made: true })
    }

    pub(super) fn sandbox_config(&self, pod: &Pod, rp: &RuntimePod) -> SandboxConfig {
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
            // made (with the pod's limits) when a sandbox is created; every
            // container of the pod is created in it, in whichever pass
            cgroup_parent: self
                .cfg
                .cgroups
                .as_ref()
                .map(|cg| crate::node::cgroups::pod_cgroup(cg.driver, pod))
                .unwrap_or_default(),
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

    pub(super) fn pod_labels(pod: &Pod) -> BTreeMap<String, String> {
        let mut l: BTreeMap<String, String> = pod.metadata.labels.clone().unwrap_or_default();
        l.insert(LABEL_POD_UID.into(), model::uid(pod).into());
        l.insert(LABEL_POD_NAME.into(), model::name(pod).into());
        l.insert(LABEL_POD_NAMESPACE.into(), model::namespace(pod).into());
        l
    }

    pub(super) fn etc_hosts_path(&self, pod: &Pod) -> PathBuf {
        self.cfg.pod_dir(model::uid(pod)).join("etc-hosts")
    }

    /// The managed `/etc/hosts` of a pod, as the kubelet writes it: for a
    /// pod on the host network the node's own file, otherwise localhost and
    /// the pod's IP with its hostname; then `hostAliases`. Rewritten only
    /// when it changes.
    pub(super) fn write_etc_hosts(&self, pod: &Pod, ip: Option<&str>) -> Result<(), SyncError> {
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
    use std::sync::Arc;

    /// A pod sync on the fake runtime with `cfg`.
    fn with_config(cfg: crate::pod::phases::SyncConfig) -> PodSync {
        PodSync::new(
            Arc::new(crate::runtime::fake::FakeRuntime::new()),
            Arc::new(crate::pod::status::StatusManager::new()),
            Arc::new(crate::telemetry::events::EventRecorder::new(10)),
            cfg,
        )
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
        let sync = |allow: bool| with_config(SyncConfig { allow_privileged: allow, ..SyncConfig::for_tests() });
        let rp = RuntimePod::default();
        assert!(sync(true).sandbox_config(&priv_pod, &rp).privileged);
        assert!(!sync(true).sandbox_config(&plain, &rp).privileged);
        // not allowed: its containers are refused anyway; the sandbox stays plain
        assert!(!sync(false).sandbox_config(&priv_pod, &rp).privileged);
    }

    /// Every pass's sandbox config names the pod's cgroup, not only the
    /// pass that makes the sandbox: containerd takes a container's cgroup
    /// parent from the config given to CreateContainer (with the systemd
    /// driver runc refuses a container without it).
    #[test]
    fn the_sandbox_config_names_the_pods_cgroup_in_every_pass() {
        use crate::node::cgroups::{Cgroups, Driver, pod_cgroup};
        use crate::pod::phases::SyncConfig;
        let pod: Pod = serde_yaml_ng::from_str(
            "metadata:\n  name: p\n  uid: 0a1b-2c\nspec:\n  containers:\n  - name: a\n    image: i\n",
        )
        .unwrap();
        // only names are made here: no cgroup filesystem is read or written
        let root = std::path::Path::new("/nonexistent/cgroup");
        for driver in [Driver::Cgroupfs, Driver::Systemd] {
            let sync =
                with_config(SyncConfig { cgroups: Some(Cgroups::detect(driver, root)), ..SyncConfig::for_tests() });
            // the config is the same whatever the runtime shows
            let rp = RuntimePod::default();
            let parent = sync.sandbox_config(&pod, &rp).cgroup_parent;
            assert_eq!(parent, pod_cgroup(driver, &pod));
            assert!(parent.contains("pod0a1b"), "{parent}");
        }
        let plain = with_config(SyncConfig::for_tests());
        // no pod cgroups: the runtime's own default
        assert_eq!(plain.sandbox_config(&pod, &RuntimePod::default()).cgroup_parent, "");
    }
}

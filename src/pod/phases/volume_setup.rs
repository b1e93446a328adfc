//! Setting up a pod's volumes on each set-up pass: its directory,
//! emptyDirs (a tmpfs for `medium: Memory`, a hugetlbfs for `HugePages`),
//! hostPath checks, the files of configMap, secret, downwardAPI and
//! projected volumes, `fsGroup` ownership; a failure is the pod's
//! `FailedMount` event.

use std::path::{Path, PathBuf};

use crate::model::quantity;
use crate::model::{self, Pod};
use crate::pod::phases::{PodSync, io_err};
use crate::pod::volumes::projection::{self, Node, Plugin};
use crate::pod::volumes::{MountError, SetUpError};
use crate::pod::workers::SyncError;
use crate::telemetry::events::{EventType, ObjectRef};

impl PodSync {
    pub(super) fn make_dirs(&self, pod: &Pod) -> Result<(), SyncError> {
        let dir = self.cfg.pod_dir(model::uid(pod));
        std::fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        for v in model::spec(pod).and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
            if let Some(ed) = &v.empty_dir {
                let p = self.empty_dir_path(pod, &v.name);
                // 0777 whatever the umask, as the kubelet makes it
                crate::base::fsutil::create_dir_mode(&p, 0o777).map_err(io_err(format!("creating {}", p.display())))?;
                let medium = ed.medium.as_deref().unwrap_or("");
                if medium == "Memory" {
                    let limit = ed.size_limit.as_ref().and_then(|q| quantity::bytes(&q.0).ok());
                    crate::pod::volumes::mount_tmpfs(&p, limit, 0o777)
                        .map_err(|e| self.failed_mount(pod, &v.name, e))?;
                } else if model::manifest::hugepages_medium_size(medium).is_some() {
                    crate::pod::volumes::hugepages_page_size(medium, pod)
                        .and_then(|size| crate::pod::volumes::mount_hugetlbfs(&p, size, 0o777))
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
        let cluster = self.cluster.get();
        let payload = projection::payload(pod, v, &objects, node, cluster.as_deref())
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

    pub(super) fn projection_path(&self, pod: &Pod, volume: &str, plugin: Plugin) -> PathBuf {
        self.cfg.pod_dir(model::uid(pod)).join("volumes").join(plugin.dir()).join(volume)
    }

    fn failed_mount(&self, pod: &Pod, volume: &str, source: crate::pod::volumes::VolumeError) -> SyncError {
        self.mount_failed(pod, MountError::Volume { volume: volume.to_string(), source })
    }

    /// The pod's `FailedMount` event for `e`, and the pass's error.
    fn mount_failed(&self, pod: &Pod, e: MountError) -> SyncError {
        self.events.event(&ObjectRef::pod(pod), EventType::Warning, "FailedMount", &e.to_string());
        SyncError::Mount(Box::new(e))
    }

    pub(super) fn empty_dir_path(&self, pod: &Pod, volume: &str) -> PathBuf {
        self.cfg.pod_dir(model::uid(pod)).join("volumes/kubernetes.io~empty-dir").join(volume)
    }
}

//! A runtime that counts failed calls by operation for
//! `kubelet_runtime_operations_errors_total` (cancelled calls are not
//! runtime errors: podwarden cancelled them). The counter is a
//! [`FailedCalls`], which the metrics implement: the runtime layer knows
//! nothing of the metrics.

use std::sync::Arc;
use std::time::Duration;

use super::{Auth, CallCtx, ContainerConfig, ImageInfo, Op, Result, Runtime, RuntimeError, RuntimePod, SandboxConfig};

/// Where failed runtime calls are counted, by the operation that failed.
pub trait FailedCalls: Send + Sync {
    fn failed(&self, op: Op);
}

pub struct Metered {
    inner: Arc<dyn Runtime>,
    failed: Arc<dyn FailedCalls>,
}

impl Metered {
    pub fn new(inner: Arc<dyn Runtime>, failed: Arc<dyn FailedCalls>) -> Self {
        Metered { inner, failed }
    }

    fn count<T>(&self, op: Op, r: Result<T>) -> Result<T> {
        // a cancelled call did not fail; an optional call the runtime
        // lacks (stats) is a fact about it, not a failure
        if let Err(e) = &r
            && !matches!(e, RuntimeError::Cancelled { .. } | RuntimeError::Unimplemented { .. })
        {
            self.failed.failed(op);
        }
        r
    }
}

impl Runtime for Metered {
    fn version(&self) -> String {
        self.inner.version()
    }

    fn list_pods(&self, ctx: &CallCtx) -> Result<Vec<RuntimePod>> {
        self.count(Op::ListPodSandbox, self.inner.list_pods(ctx))
    }

    fn pod_status(&self, ctx: &CallCtx, uid: &str) -> Result<RuntimePod> {
        self.count(Op::PodSandboxStatus, self.inner.pod_status(ctx, uid))
    }

    fn refresh_containers(&self, ctx: &CallCtx, rp: &mut RuntimePod, ids: &[String]) -> Result<()> {
        let r = self.inner.refresh_containers(ctx, rp, ids);
        self.count(Op::ContainerStatus, r)
    }

    fn systemd_cgroup(&self, ctx: &CallCtx) -> Result<Option<bool>> {
        self.inner.systemd_cgroup(ctx)
    }

    fn drops_hugepage_limits(&self, ctx: &CallCtx) -> Result<Option<bool>> {
        self.inner.drops_hugepage_limits(ctx)
    }

    fn sandbox_image(&self, ctx: &CallCtx) -> Result<Option<String>> {
        self.inner.sandbox_image(ctx)
    }

    fn image_status(&self, ctx: &CallCtx, image: &str) -> Result<Option<ImageInfo>> {
        self.count(Op::ImageStatus, self.inner.image_status(ctx, image))
    }

    fn pull_image(&self, ctx: &CallCtx, image: &str, auth: Option<&Auth>) -> Result<String> {
        self.count(Op::PullImage, self.inner.pull_image(ctx, image, auth))
    }

    fn run_sandbox(&self, ctx: &CallCtx, config: &SandboxConfig) -> Result<String> {
        self.count(Op::RunPodSandbox, self.inner.run_sandbox(ctx, config))
    }

    fn stop_sandbox(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        self.count(Op::StopPodSandbox, self.inner.stop_sandbox(ctx, id))
    }

    fn remove_sandbox(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        self.count(Op::RemovePodSandbox, self.inner.remove_sandbox(ctx, id))
    }

    fn create_container(
        &self,
        ctx: &CallCtx,
        sandbox_id: &str,
        config: &ContainerConfig,
        sandbox: &SandboxConfig,
    ) -> Result<String> {
        self.count(Op::CreateContainer, self.inner.create_container(ctx, sandbox_id, config, sandbox))
    }

    fn start_container(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        self.count(Op::StartContainer, self.inner.start_container(ctx, id))
    }

    fn stop_container(&self, ctx: &CallCtx, id: &str, timeout: Duration) -> Result<()> {
        self.count(Op::StopContainer, self.inner.stop_container(ctx, id, timeout))
    }

    fn remove_container(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        self.count(Op::RemoveContainer, self.inner.remove_container(ctx, id))
    }

    fn list_images(&self, ctx: &CallCtx) -> Result<Vec<super::ImageInfo>> {
        self.count(Op::ListImages, self.inner.list_images(ctx))
    }

    fn remove_image(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        self.count(Op::RemoveImage, self.inner.remove_image(ctx, id))
    }

    fn image_fs_info(&self, ctx: &CallCtx) -> Result<Vec<super::ImageFs>> {
        self.count(Op::ImageFsInfo, self.inner.image_fs_info(ctx))
    }

    fn list_container_stats(&self, ctx: &CallCtx) -> Result<Vec<super::ContainerStats>> {
        self.count(Op::ListContainerStats, self.inner.list_container_stats(ctx))
    }

    fn list_sandbox_stats(&self, ctx: &CallCtx) -> Result<Vec<super::SandboxStats>> {
        self.count(Op::ListPodSandboxStats, self.inner.list_sandbox_stats(ctx))
    }

    fn reopen_container_log(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        self.count(Op::ReopenContainerLog, self.inner.reopen_container_log(ctx, id))
    }

    /// A stream that breaks counts as a failed `GetContainerEvents` (the
    /// end at cancellation and a runtime without a stream do not).
    fn watch_events(
        &self,
        cancel: &crate::base::cancel::CancelToken,
        on: &mut dyn FnMut(super::events::Note),
    ) -> Result<()> {
        self.count(Op::GetContainerEvents, self.inner.watch_events(cancel, on))
    }

    fn exec_sync(&self, id: &str, cmd: &[String], timeout: Duration, done: super::ExecDone) {
        let failed = self.failed.clone();
        self.inner.exec_sync(
            id,
            cmd,
            timeout,
            Box::new(move |r| {
                if let Err(e) = &r
                    && !matches!(e, RuntimeError::Cancelled { .. })
                {
                    failed.failed(Op::ExecSync);
                }
                done(r)
            }),
        )
    }

    fn exec(&self, ctx: &CallCtx, id: &str, cmd: &[String], streams: super::Streams) -> Result<String> {
        self.count(Op::Exec, self.inner.exec(ctx, id, cmd, streams))
    }

    fn attach(&self, ctx: &CallCtx, id: &str, streams: super::Streams) -> Result<String> {
        self.count(Op::Attach, self.inner.attach(ctx, id, streams))
    }

    fn port_forward(&self, ctx: &CallCtx, sandbox_id: &str, ports: &[u16]) -> Result<String> {
        self.count(Op::PortForward, self.inner.port_forward(ctx, sandbox_id, ports))
    }
}

//! A runtime that counts failed calls by operation for
//! `kubelet_runtime_operations_errors_total` (cancelled calls are not
//! runtime errors: podwarden cancelled them).

use std::sync::Arc;
use std::time::Duration;

use super::{CallCtx, ContainerConfig, Result, Runtime, RuntimeError, RuntimePod, SandboxConfig};
use crate::metrics::Metrics;

pub struct Metered {
    inner: Arc<dyn Runtime>,
    metrics: Arc<Metrics>,
}

impl Metered {
    pub fn new(inner: Arc<dyn Runtime>, metrics: Arc<Metrics>) -> Self {
        Metered { inner, metrics }
    }

    fn count<T>(&self, op: &'static str, r: Result<T>) -> Result<T> {
        if let Err(e) = &r
            && !matches!(e, RuntimeError::Cancelled { .. })
        {
            self.metrics.runtime_error(op);
        }
        r
    }
}

impl Runtime for Metered {
    fn version(&self) -> String {
        self.inner.version()
    }

    fn list_pods(&self, ctx: &CallCtx) -> Result<Vec<RuntimePod>> {
        self.count("list_podsandbox", self.inner.list_pods(ctx))
    }

    fn pod_status(&self, ctx: &CallCtx, uid: &str) -> Result<RuntimePod> {
        self.count("podsandbox_status", self.inner.pod_status(ctx, uid))
    }

    fn refresh_containers(&self, ctx: &CallCtx, rp: &mut RuntimePod, ids: &[String]) -> Result<()> {
        let r = self.inner.refresh_containers(ctx, rp, ids);
        self.count("container_status", r)
    }

    fn image_status(&self, ctx: &CallCtx, image: &str) -> Result<Option<String>> {
        self.count("image_status", self.inner.image_status(ctx, image))
    }

    fn pull_image(&self, ctx: &CallCtx, image: &str) -> Result<String> {
        self.count("pull_image", self.inner.pull_image(ctx, image))
    }

    fn run_sandbox(&self, ctx: &CallCtx, config: &SandboxConfig) -> Result<String> {
        self.count("run_podsandbox", self.inner.run_sandbox(ctx, config))
    }

    fn stop_sandbox(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        self.count("stop_podsandbox", self.inner.stop_sandbox(ctx, id))
    }

    fn remove_sandbox(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        self.count("remove_podsandbox", self.inner.remove_sandbox(ctx, id))
    }

    fn create_container(
        &self,
        ctx: &CallCtx,
        sandbox_id: &str,
        config: &ContainerConfig,
        sandbox: &SandboxConfig,
    ) -> Result<String> {
        self.count("create_container", self.inner.create_container(ctx, sandbox_id, config, sandbox))
    }

    fn start_container(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        self.count("start_container", self.inner.start_container(ctx, id))
    }

    fn stop_container(&self, ctx: &CallCtx, id: &str, timeout: Duration) -> Result<()> {
        self.count("stop_container", self.inner.stop_container(ctx, id, timeout))
    }

    fn remove_container(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        self.count("remove_container", self.inner.remove_container(ctx, id))
    }
}

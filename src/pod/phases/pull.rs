//! Images for containers, as the kubelet's image manager brings them: the
//! pull policy, a back-off per pod and image (10 s doubling to 5 min:
//! `ImagePullBackOff`), pulls one at a time (`serializeImagePulls`) or at
//! most `maxParallelImagePulls` at once, the `Pulling`/`Pulled`/`Failed`/
//! `BackOff` events with the kubelet's texts, and
//! `kubelet_image_pull_duration_seconds`.
//!
//! A pull has no deadline (the kubelet sets none: a large image on a slow
//! link takes what it takes); it ends when the runtime answers or the pod's
//! pass is cancelled.

use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::model::{self, Container, Pod};
use crate::pod::phases::{PodSync, SyncCtx, SyncError};
use crate::runtime::{Auth, CallCtx, RuntimeError};
use crate::telemetry::events::{EventType, ObjectRef};

/// The kubelet's image pull back-off.
pub const PULL_BACKOFF_INITIAL: Duration = Duration::from_secs(10);
pub const PULL_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// The deadline of a pull: none to speak of (a cancelled pass ends it).
const PULL_DEADLINE: Duration = Duration::from_secs(30 * 24 * 3600);

/// How many pulls may run at once (0: any number).
pub struct PullGate {
    max: usize,
    running: Mutex<usize>,
    freed: Condvar,
}

impl PullGate {
    pub fn new(max: usize) -> Self {
        PullGate { max, running: Mutex::new(0), freed: Condvar::new() }
    }

    /// Wait for a turn; `None` when `ctx` was cancelled first.
    fn enter(&self, ctx: &SyncCtx) -> Option<PullTurn<'_>> {
        let mut n = self.running.lock();
        while self.max > 0 && *n >= self.max {
            if ctx.cancel.is_cancelled() {
                return None;
            }
            self.freed.wait_for(&mut n, Duration::from_millis(100));
        }
        *n += 1;
        Some(PullTurn(self))
    }
}

struct PullTurn<'a>(&'a PullGate);

impl Drop for PullTurn<'_> {
    fn drop(&mut self) {
        *self.0.running.lock() -= 1;
        self.0.freed.notify_one();
    }
}

/// Why a container's image is not there: its Waiting reason and message,
/// and when to try again.
pub(super) struct NoImage {
    pub reason: &'static str,
    pub message: String,
    pub retry: Duration,
}

/// The kubelet's default pull policy: Always for `:latest` or no tag.
pub fn pull_policy(c: &Container) -> &str {
    if let Some(p) = c.image_pull_policy.as_deref() {
        return p;
    }
    let image = c.image.as_deref().unwrap_or_default();
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

/// A duration as Go prints it in the kubelet's pull message (`1.234s`,
/// `512ms`).
fn go_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        let s = format!("{:.3}", d.as_secs_f64());
        format!("{}s", s.trim_end_matches('0').trim_end_matches('.'))
    }
}

impl PodSync {
    /// Pull `image` anonymously when `creds` is empty, else with each
    /// credential in turn until one works, as the kubelet does: no
    /// anonymous pull after credentials failed. The error of several
    /// failures lists each distinct message once, `[a, b]`.
    fn pull_with(&self, ctx: &SyncCtx, image: &str, creds: &[Auth]) -> Result<String, RuntimeError> {
        let call = CallCtx::new(PULL_DEADLINE, &ctx.cancel);
        if creds.is_empty() {
            return self.runtime.pull_image(&call, image, None);
        }
        let mut messages: Vec<String> = Vec::new();
        for auth in creds {
            match self.runtime.pull_image(&call, image, Some(auth)) {
                Ok(id) => return Ok(id),
                Err(e @ RuntimeError::Cancelled { .. }) => return Err(e),
                Err(e) if creds.len() == 1 => return Err(e),
                Err(e) => {
                    let m = match e {
                        RuntimeError::ImagePull { message, .. } => message,
                        e => e.to_string(),
                    };
                    if !messages.contains(&m) {
                        messages.push(m);
                    }
                }
            }
        }
        let message = if messages.len() == 1 { messages.remove(0) } else { format!("[{}]", messages.join(", ")) };
        Err(RuntimeError::ImagePull { image: image.into(), message })
    }

    /// Make sure `c`'s image is there, pulling it by its policy. `Ok(Err)`:
    /// it is not, and why (remembered as the container's Waiting reason by
    /// the caller).
    pub(super) fn ensure_image(
        &self,
        ctx: &SyncCtx,
        pod: &Pod,
        c: &Container,
        image: &str,
    ) -> Result<Result<String, NoImage>, SyncError> {
        let obj = ObjectRef::container(pod, &c.name);
        let uid = model::uid(pod);
        let policy = pull_policy(c);
        if policy != "Always" {
            match self.runtime.image_status(&self.call(ctx), image) {
                Ok(Some(r)) => {
                    self.events.event(
                        &obj,
                        EventType::Normal,
                        "Pulled",
                        &format!("Container image {image:?} already present on machine"),
                    );
                    return Ok(Ok(r.id));
                }
                Ok(None) if policy == "Never" => {
                    let message = format!("Container image {image:?} is not present with pull policy of Never");
                    self.events.event(&obj, EventType::Warning, "ErrImageNeverPull", &message);
                    return Ok(Err(NoImage { reason: "ErrImageNeverPull", message, retry: self.cfg.backoff_initial }));
                }
                Ok(None) => {}
                Err(RuntimeError::Cancelled { .. }) => return Err(SyncError::Cancelled),
                Err(e) => return Err(e.into()),
            }
        }
        let key = format!("image:{image}");
        if let Err((left, _)) = self.image_backoff.try_restart(uid, &key, Instant::now()) {
            let message = format!("Back-off pulling image {image:?}");
            self.events.event(&obj, EventType::Normal, "BackOff", &message);
            return Ok(Err(NoImage { reason: "ImagePullBackOff", message, retry: left }));
        }
        let asked = Instant::now();
        self.events.event(&obj, EventType::Normal, "Pulling", &format!("Pulling image {image:?}"));
        // credentials before the turn: a slow plugin holds no other pull up
        let creds = self.keyring.lookup(image, &ctx.cancel);
        let Some(turn) = self.pulls.enter(ctx) else { return Err(SyncError::Cancelled) };
        let began = Instant::now();
        let pulled = self.pull_with(ctx, image, &creds);
        drop(turn);
        match pulled {
            Ok(id) => {
                let took = began.elapsed();
                self.image_backoff.forget(uid, &key);
                let size = self.runtime.image_status(&self.call(ctx), image).ok().flatten().map_or(0, |i| i.size);
                if let Some(m) = &self.metrics {
                    m.image_pulled(size, took.as_secs_f64());
                }
                self.events.event(
                    &obj,
                    EventType::Normal,
                    "Pulled",
                    &format!(
                        "Successfully pulled image {image:?} in {} ({} including waiting). Image size: {size} bytes.",
                        go_duration(took),
                        go_duration(asked.elapsed())
                    ),
                );
                Ok(Ok(id))
            }
            Err(RuntimeError::Cancelled { .. }) => Err(SyncError::Cancelled),
            Err(e) => {
                let message = e.to_string();
                self.events.event(
                    &obj,
                    EventType::Warning,
                    "Failed",
                    &format!("Failed to pull image {image:?}: {message}"),
                );
                self.events.event(&obj, EventType::Warning, "Failed", "Error: ErrImagePull");
                Ok(Err(NoImage { reason: "ErrImagePull", message, retry: PULL_BACKOFF_INITIAL }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_messages_print_durations_as_go_does() {
        assert_eq!(go_duration(Duration::from_millis(512)), "512ms");
        assert_eq!(go_duration(Duration::from_millis(1234)), "1.234s");
        assert_eq!(go_duration(Duration::from_secs(3)), "3s");
        assert_eq!(go_duration(Duration::from_millis(2500)), "2.5s");
    }

    #[test]
    fn the_gate_lets_max_pulls_through_at_once() {
        let gate = PullGate::new(1);
        let ctx = SyncCtx::detached("u");
        let first = gate.enter(&ctx).unwrap();
        ctx.cancel.cancel();
        assert!(gate.enter(&ctx).is_none(), "a second waits, and gives up when cancelled");
        drop(first);
        assert!(gate.enter(&ctx).is_some());
        let any = PullGate::new(0);
        let _a = any.enter(&ctx).unwrap();
        let _b = any.enter(&ctx).unwrap();
    }
}

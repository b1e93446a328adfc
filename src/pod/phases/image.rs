//! A container's image, as a step of the pod's set-up: present already,
//! or pulled by its policy through the node's gate, back-off and
//! credentials (`node::images`), with the kubelet's `Pulling`/`Pulled`/
//! `Failed`/`BackOff` events and `kubelet_image_pull_duration_seconds`.
//!
//! A pull has no deadline (the kubelet sets none); it ends when the runtime
//! answers or the pod's pass is cancelled.

use std::time::{Duration, Instant};

use crate::model::objects::{Kind, ObjKey};
use crate::model::{self, Container, Pod};
use crate::node::images::credentials;
use crate::node::images::pull::{PULL_BACKOFF_INITIAL, PULL_DEADLINE, go_duration, pull_policy};
use crate::node::images::pull_secrets::{PullSecretError, pull_secrets_keyring};
use crate::pod::phases::{PodSync, SyncCtx, SyncError};
use crate::runtime::{Auth, CallCtx, RuntimeError};
use crate::telemetry::events::{EventType, ObjectRef};

/// Why a container's image is not there: its Waiting reason and message,
/// and when to try again.
pub(super) struct NoImage {
    pub reason: &'static str,
    pub message: String,
    pub retry: Duration,
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

    /// A pull that failed with `message`: the kubelet's two `Failed`
    /// events, and `ErrImagePull` until the back-off's first retry.
    fn pull_failed(&self, obj: &ObjectRef, image: &str, message: String) -> NoImage {
        // (the container's `Failed: Error: ErrImagePull` follows, from the caller)
        self.events.event(obj, EventType::Warning, "Failed", &format!("Failed to pull image {image:?}: {message}"));
        NoImage { reason: "ErrImagePull", message, retry: PULL_BACKOFF_INITIAL }
    }

    /// The credentials for `image` of `pod`'s image pull secrets, as the
    /// kubelet reads them: a Secret that is not there is said in a
    /// `FailedToRetrieveImagePullSecret` warning and the pull goes on
    /// without it; a Secret whose docker config cannot be read fails the
    /// pull (`Err` names the Secret).
    fn pull_secret_creds(&self, pod: &Pod, image: &str) -> Result<Vec<Auth>, PullSecretError> {
        let names: Vec<&str> = pod
            .spec
            .as_ref()
            .and_then(|s| s.image_pull_secrets.as_ref())
            .into_iter()
            .flatten()
            .map(|r| r.name.as_str())
            .filter(|n| !n.is_empty())
            .collect();
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let objects = self.objects.snapshot();
        let (mut found, mut missing) = (Vec::new(), Vec::new());
        for name in names {
            match objects.get(&ObjKey::new(Kind::Secret, model::namespace(pod), name)) {
                Some(o) => found.push(o.clone()),
                None => missing.push(name),
            }
        }
        if !missing.is_empty() {
            self.events.event(
                &ObjectRef::pod(pod),
                EventType::Warning,
                "FailedToRetrieveImagePullSecret",
                &format!(
                    "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                    missing.join(", ")
                ),
            );
        }
        let refs: Vec<&crate::model::objects::LocalObject> = found.iter().map(|o| &**o).collect();
        let ring = pull_secrets_keyring(&refs)?;
        Ok(ring.lookup(&credentials::repository(image)))
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
        // the pod's image pull secrets first, then the node's credentials
        let pod_creds = match self.pull_secret_creds(pod, image) {
            Ok(c) => c,
            Err(e) => return Ok(Err(self.pull_failed(&obj, image, e.to_string()))),
        };
        // per credentials: new ones for the image retry at once
        let key = format!("image:{image}#{:x}#{:x}", self.keyring.docker_digest(image), digest(&pod_creds));
        if let Err((left, _)) = self.image_backoff.try_restart(uid, &key, Instant::now()) {
            let message = format!("Back-off pulling image {image:?}");
            self.events.event(&obj, EventType::Normal, "BackOff", &message);
            return Ok(Err(NoImage { reason: "ImagePullBackOff", message, retry: left }));
        }
        let asked = Instant::now();
        self.events.event(&obj, EventType::Normal, "Pulling", &format!("Pulling image {image:?}"));
        // credentials before the turn: a slow plugin holds no other pull up
        let mut creds = pod_creds;
        creds.extend(self.keyring.lookup(image, &ctx.cancel));
        let Some(turn) = self.pulls.enter(&ctx.cancel) else { return Err(SyncError::Cancelled) };
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
            Err(e) => Ok(Err(self.pull_failed(&obj, image, e.to_string()))),
        }
    }
}

/// A digest of `creds` (0: none), for the pull back-off's key.
fn digest(creds: &[Auth]) -> u64 {
    use std::hash::{Hash, Hasher};
    if creds.is_empty() {
        return 0;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for a in creds {
        a.username.hash(&mut h);
        a.password().hash(&mut h);
    }
    h.finish().max(1)
}

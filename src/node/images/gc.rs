//! Image garbage collection as the kubelet's image manager does it
//! (`imageGCHighThresholdPercent`, `imageGCLowThresholdPercent`,
//! `imageMinimumGCAge`, `imageMaximumGCAge`):
//! - every image the runtime lists is tracked from when it was first seen
//!   and when a container (of any state) last used it;
//! - images unused for longer than `imageMaximumGCAge` (when set) are
//!   removed (reason "age");
//! - when the image filesystem is `imageGCHighThresholdPercent` full,
//!   unused images are removed least recently used first until it is back
//!   to `imageGCLowThresholdPercent` (reason "space"); images seen for less
//!   than `imageMinimumGCAge` stay; when not enough could be freed, a
//!   `FreeDiskSpaceFailed` warning names the figures.
//!
//! An image in use, pinned by the runtime or the runtime's sandbox image is
//! never removed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use thiserror::Error;

use crate::runtime::{CallCtx, ImageInfo, Runtime, RuntimeError};
use crate::telemetry::events::{EventRecorder, EventType, ObjectRef};
use crate::telemetry::metrics::Metrics;

/// Why a collection (or a reclaim) could not run; shown in the
/// `ImageGCFailed` event.
#[derive(Debug, Error)]
pub enum ImageGcError {
    /// Listing images, containers or the image filesystem failed.
    #[error("{0}")]
    Runtime(#[from] RuntimeError),
    #[error("the runtime names no image filesystem")]
    NoImageFs,
    #[error("image filesystem {mount}: cannot measure it")]
    Unmeasurable { mount: String },
    #[error("the image filesystem reports no capacity")]
    NoCapacity,
}

/// The thresholds and ages, from the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub high_percent: u8,
    pub low_percent: u8,
    pub min_age: Duration,
    /// Zero: images are not removed for their age.
    pub max_age: Duration,
}

#[derive(Debug, Clone)]
struct Record {
    first_seen: Instant,
    /// When a container last used it (`None`: never, since first seen).
    last_used: Option<Instant>,
    size: u64,
}

impl Record {
    fn last_used_or_seen(&self) -> Instant {
        self.last_used.unwrap_or(self.first_seen)
    }
}

/// What one collection did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Removed images (IDs) and the bytes they held.
    pub removed: Vec<String>,
    pub freed_bytes: u64,
}

pub struct ImageGc {
    runtime: Arc<dyn Runtime>,
    policy: Policy,
    events: Arc<EventRecorder>,
    metrics: Arc<Metrics>,
    node: String,
    timeout: Duration,
    records: Mutex<HashMap<String, Record>>,
    sandbox_image: Mutex<Option<String>>,
}

fn names(i: &ImageInfo) -> impl Iterator<Item = &str> {
    std::iter::once(i.id.as_str()).chain(i.tags.iter().map(String::as_str)).chain(i.digests.iter().map(String::as_str))
}

impl ImageGc {
    pub fn new(
        runtime: Arc<dyn Runtime>,
        policy: Policy,
        events: Arc<EventRecorder>,
        metrics: Arc<Metrics>,
        node: &str,
        timeout: Duration,
    ) -> Self {
        ImageGc {
            runtime,
            policy,
            events,
            metrics,
            node: node.to_string(),
            timeout,
            records: Mutex::new(HashMap::new()),
            sandbox_image: Mutex::new(None),
        }
    }

    fn call(&self) -> CallCtx {
        CallCtx::background(self.timeout)
    }

    /// List the images and the containers: record new images and the use of
    /// those in use. Returns the images and which of them (IDs) are in use
    /// or kept (pinned, the sandbox image).
    fn detect(&self, now: Instant) -> Result<(Vec<ImageInfo>, HashSet<String>), ImageGcError> {
        if self.sandbox_image.lock().is_none() {
            *self.sandbox_image.lock() = self.runtime.sandbox_image(&self.call()).ok().flatten();
        }
        let images = self.runtime.list_images(&self.call())?;
        let pods = self.runtime.list_pods(&self.call())?;
        let used: HashSet<&str> = pods
            .iter()
            .flat_map(|p| &p.containers)
            .flat_map(|c| [c.image_ref.as_str(), c.image.as_str()])
            .filter(|s| !s.is_empty())
            .collect();
        let sandbox = self.sandbox_image.lock().clone();
        let mut keep = HashSet::new();
        let mut records = self.records.lock();
        records.retain(|id, _| images.iter().any(|i| i.id == *id));
        for i in &images {
            let r = records.entry(i.id.clone()).or_insert(Record { first_seen: now, last_used: None, size: i.size });
            r.size = i.size;
            let in_use = names(i).any(|n| used.contains(n));
            if in_use {
                r.last_used = Some(now);
            }
            let is_sandbox = sandbox.as_deref().is_some_and(|s| names(i).any(|n| n == s));
            if in_use || i.pinned || is_sandbox {
                keep.insert(i.id.clone());
            }
        }
        Ok((images, keep))
    }

    /// The image filesystem's capacity and available bytes.
    fn fs_usage(&self) -> Result<(u64, u64), ImageGcError> {
        let fs = self.runtime.image_fs_info(&self.call())?;
        let mount = fs.first().map(|f| f.mountpoint.clone()).filter(|m| !m.is_empty());
        let mount = mount.ok_or(ImageGcError::NoImageFs)?;
        let Some(f) = crate::node::stats::fs_of(std::path::Path::new(&mount), None) else {
            return Err(ImageGcError::Unmeasurable { mount });
        };
        Ok((f.capacity_bytes, f.available_bytes))
    }

    /// Remove `candidates` (IDs), oldest use first, until `want` bytes
    /// are freed (`None`: all of them). Returns the removed IDs and bytes.
    fn remove(&self, mut candidates: Vec<(String, Record)>, want: Option<u64>) -> (Vec<String>, u64) {
        candidates.sort_by_key(|(_, r)| (r.last_used_or_seen(), r.first_seen));
        let mut removed = Vec::new();
        let mut freed = 0;
        for (id, r) in candidates {
            if want.is_some_and(|w| freed >= w) {
                break;
            }
            match self.runtime.remove_image(&self.call(), &id) {
                Ok(()) => {
                    log::info!("image garbage collection: removed image {id} ({} bytes)", r.size);
                    self.records.lock().remove(&id);
                    freed += r.size;
                    removed.push(id);
                }
                Err(e) => log::warn!("image garbage collection: cannot remove image {id}: {e}"),
            }
        }
        (removed, freed)
    }

    /// One collection at `now`.
    pub fn collect(&self, now: Instant) -> Result<Report, ImageGcError> {
        let r = self.run(now);
        if let Err(e) = &r {
            self.events.event(
                &ObjectRef::node(&self.node),
                EventType::Warning,
                "ImageGCFailed",
                &format!("Failed to garbage collect images: {e}"),
            );
        }
        r
    }

    fn unused(&self, images: &[ImageInfo], keep: &HashSet<String>) -> Vec<(String, Record)> {
        let records = self.records.lock();
        images
            .iter()
            .filter(|i| !keep.contains(&i.id))
            .filter_map(|i| records.get(&i.id).map(|r| (i.id.clone(), r.clone())))
            .collect()
    }

    fn run(&self, now: Instant) -> Result<Report, ImageGcError> {
        let (images, keep) = self.detect(now)?;
        let mut report = Report::default();
        if !self.policy.max_age.is_zero() {
            let old: Vec<(String, Record)> = self
                .unused(&images, &keep)
                .into_iter()
                .filter(|(_, r)| now.saturating_duration_since(r.last_used_or_seen()) > self.policy.max_age)
                .collect();
            let (removed, freed) = self.remove(old, None);
            self.metrics.images_collected("age", removed.len() as u64);
            report.removed.extend(removed);
            report.freed_bytes += freed;
        }
        let (capacity, available) = self.fs_usage()?;
        if capacity == 0 {
            return Err(ImageGcError::NoCapacity);
        }
        let usage = 100 - (available.saturating_mul(100) / capacity).min(100) as u8;
        if usage >= self.policy.high_percent {
            let want = (capacity.saturating_mul(100 - self.policy.low_percent as u64) / 100).saturating_sub(available);
            let (removed, freed) = self.free(now, want, &images, &keep);
            report.removed.extend(removed);
            report.freed_bytes += freed;
            if freed < want {
                let msg = format!(
                    "Failed to garbage collect required amount of images. Attempted to free {want} bytes, but only found {freed} bytes eligible to free."
                );
                self.events.event(&ObjectRef::node(&self.node), EventType::Warning, "FreeDiskSpaceFailed", &msg);
            }
        }
        Ok(report)
    }

    /// Free `want` bytes of unused images seen for at least the minimum age,
    /// least recently used first.
    fn free(&self, now: Instant, want: u64, images: &[ImageInfo], keep: &HashSet<String>) -> (Vec<String>, u64) {
        let candidates: Vec<(String, Record)> = self
            .unused(images, keep)
            .into_iter()
            .filter(|(_, r)| now.saturating_duration_since(r.first_seen) >= self.policy.min_age)
            .collect();
        let (removed, freed) = self.remove(candidates, Some(want));
        self.metrics.images_collected("space", removed.len() as u64);
        (removed, freed)
    }

    /// Free at least `want` bytes of unused images now (node-pressure
    /// reclaim): the same rules as a collection over the high threshold.
    pub fn free_bytes(&self, now: Instant, want: u64) -> Result<u64, ImageGcError> {
        let (images, keep) = self.detect(now)?;
        Ok(self.free(now, want, &images, &keep).1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::fake::FakeRuntime;

    fn image(id: &str, tag: &str, size: u64) -> ImageInfo {
        ImageInfo { id: id.into(), tags: vec![tag.into()], size, ..Default::default() }
    }

    fn gc(fake: &Arc<FakeRuntime>, policy: Policy) -> (ImageGc, Arc<EventRecorder>, Arc<Metrics>) {
        let events = Arc::new(EventRecorder::new(64));
        let metrics = Arc::new(Metrics::new());
        let g = ImageGc::new(fake.clone(), policy, events.clone(), metrics.clone(), "node", Duration::from_secs(5));
        (g, events, metrics)
    }

    #[test]
    fn over_the_high_threshold_unused_images_go_least_recently_used_first_and_young_ones_stay() {
        let fake = Arc::new(FakeRuntime::new());
        // a filesystem that is always full enough: / in percent terms
        fake.set_image_fs("/");
        for (id, size) in [("sha256:a", 10), ("sha256:b", 20), ("sha256:c", 30)] {
            fake.add_image(image(id, &format!("img/{id}"), size));
        }
        let policy =
            Policy { high_percent: 0, low_percent: 0, min_age: Duration::from_secs(60), max_age: Duration::ZERO };
        let (g, events, metrics) = gc(&fake, policy);
        let t0 = Instant::now();
        // seen now: younger than the minimum age, nothing goes
        let r = g.collect(t0).unwrap();
        assert!(r.removed.is_empty(), "{r:?}");
        assert!(events.list().iter().any(|e| e.reason == "FreeDiskSpaceFailed"
            && e.message.starts_with("Failed to garbage collect required amount of images. Attempted to free ")));
        // later: all three are old enough and unused; with low 0 the goal
        // is every byte, so all go, oldest use first (never used: by when
        // first seen, then in list order)
        let r = g.collect(t0 + Duration::from_secs(61)).unwrap();
        let mut removed = r.removed.clone();
        removed.sort();
        assert_eq!(removed, ["sha256:a", "sha256:b", "sha256:c"]);
        assert_eq!(r.freed_bytes, 60);
        assert_eq!(metrics.images_collected_total().get("space"), Some(&3));
    }

    #[test]
    fn a_filesystem_that_cannot_be_measured_fails_the_collection_with_an_event() {
        let fake = Arc::new(FakeRuntime::new());
        fake.set_image_fs("/nonexistent/podwarden-image-fs");
        let policy = Policy { high_percent: 85, low_percent: 80, min_age: Duration::ZERO, max_age: Duration::ZERO };
        let (g, events, _) = gc(&fake, policy);
        let e = g.collect(Instant::now()).unwrap_err();
        assert!(matches!(&e, ImageGcError::Unmeasurable { mount } if mount == "/nonexistent/podwarden-image-fs"));
        assert!(events.list().iter().any(|ev| ev.reason == "ImageGCFailed"
            && ev.message
                == "Failed to garbage collect images: image filesystem /nonexistent/podwarden-image-fs: cannot measure it"));
    }

    #[test]
    fn the_maximum_age_removes_images_unused_that_long_and_keeps_pinned_and_sandbox_images() {
        let fake = Arc::new(FakeRuntime::new());
        fake.set_image_fs("/");
        fake.add_image(image("sha256:old", "img/old", 5));
        fake.add_image(ImageInfo { pinned: true, ..image("sha256:pinned", "img/pinned", 5) });
        // nothing is over the high threshold at 100 %
        let policy =
            Policy { high_percent: 100, low_percent: 90, min_age: Duration::ZERO, max_age: Duration::from_secs(3600) };
        let (g, _, metrics) = gc(&fake, policy);
        let t0 = Instant::now();
        assert!(g.collect(t0).unwrap().removed.is_empty());
        let r = g.collect(t0 + Duration::from_secs(3601)).unwrap();
        assert_eq!(r.removed, ["sha256:old"]);
        assert_eq!(metrics.images_collected_total().get("age"), Some(&1));
        assert_eq!(fake.list_images(&CallCtx::background(Duration::from_secs(1))).unwrap().len(), 1);
    }
}

//! The event recorder: one `event(...)` method, a bounded in-memory ring,
//! and a log line per event.

use std::collections::VecDeque;
use std::time::SystemTime;

use parking_lot::Mutex;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EventType {
    Normal,
    Warning,
}

/// What an event is about: a pod, a manifest file, or the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The part of the object: `spec.containers{web}`, as the kubelet
    /// names a container in its events' `involvedObject.fieldPath`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field_path: String,
}

impl ObjectRef {
    pub fn pod(pod: &crate::model::Pod) -> Self {
        ObjectRef {
            kind: "Pod".into(),
            namespace: crate::model::namespace(pod).into(),
            name: crate::model::name(pod).into(),
            uid: crate::model::uid(pod).into(),
            field_path: String::new(),
        }
    }

    /// A container of `pod` (init or app).
    pub fn container(pod: &crate::model::Pod, name: &str) -> Self {
        let list = if crate::model::init_containers(pod).iter().any(|c| c.name == name) {
            "initContainers"
        } else {
            "containers"
        };
        ObjectRef { field_path: format!("spec.{list}{{{name}}}"), ..Self::pod(pod) }
    }

    pub fn file(path: &str) -> Self {
        ObjectRef {
            kind: "File".into(),
            namespace: String::new(),
            name: path.into(),
            uid: String::new(),
            field_path: String::new(),
        }
    }

    pub fn node(name: &str) -> Self {
        ObjectRef {
            kind: "Node".into(),
            namespace: String::new(),
            name: name.into(),
            uid: String::new(),
            field_path: String::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub involved_object: ObjectRef,
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub reason: String,
    pub message: String,
    /// Seconds since the Unix epoch.
    pub timestamp: f64,
    /// How many times this same event repeated in a row.
    pub count: u32,
}

pub struct EventRecorder {
    ring: Mutex<VecDeque<Event>>,
    capacity: usize,
    /// Changes of the ring so far (see [`EventRecorder::generation`]).
    generation: std::sync::atomic::AtomicU64,
}

impl EventRecorder {
    pub fn new(capacity: usize) -> Self {
        EventRecorder {
            ring: Mutex::new(VecDeque::with_capacity(capacity.min(64))),
            capacity: capacity.max(1),
            generation: Default::default(),
        }
    }

    /// Record an event. A repeat of the newest event bumps its count
    /// instead of filling the ring.
    pub fn event(&self, object: &ObjectRef, event_type: EventType, reason: &str, message: &str) {
        let what = if object.namespace.is_empty() {
            format!("{} {}", object.kind, object.name)
        } else {
            format!("{}/{} {}", object.namespace, object.name, object.uid)
        };
        match event_type {
            EventType::Normal => log::info!("{what}: {reason}: {message}"),
            EventType::Warning => log::warn!("{what}: {reason}: {message}"),
        }
        let timestamp =
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        let mut ring = self.ring.lock();
        if let Some(last) = ring.back_mut()
            && last.involved_object == *object
            && last.reason == reason
            && last.message == message
        {
            last.count += 1;
            last.timestamp = timestamp;
            self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(ring);
            crate::base::changes::bump();
            return;
        }
        if ring.len() == self.capacity {
            ring.pop_front();
        }
        ring.push_back(Event {
            involved_object: object.clone(),
            event_type,
            reason: reason.into(),
            message: message.into(),
            timestamp,
            count: 1,
        });
        self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        drop(ring);
        crate::base::changes::bump();
    }

    /// Changes so far: the same number means the same events (a reader
    /// that built from them need not look again).
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Every event held, oldest first.
    pub fn list(&self) -> Vec<Event> {
        self.ring.lock().iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_is_bounded_and_folds_repeats() {
        let r = EventRecorder::new(2);
        let o = ObjectRef::file("/a.yaml");
        r.event(&o, EventType::Warning, "Bad", "x");
        r.event(&o, EventType::Warning, "Bad", "x");
        assert_eq!(r.list().len(), 1);
        assert_eq!(r.list()[0].count, 2);
        r.event(&o, EventType::Normal, "B", "y");
        r.event(&o, EventType::Normal, "C", "z");
        let l = r.list();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].reason, "B");
        assert_eq!(l[1].reason, "C");
    }
}

//! The event recorder: one `event(...)` method, a bounded in-memory ring,
//! and a log line per event; and one consumer that gets every occurrence
//! (cluster mode's `cluster-events` thread, [`EventRecorder::subscribe`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use crossbeam_channel::{Receiver, Sender, TrySendError};
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
    generation: AtomicU64,
    /// The one consumer of every occurrence, if any ([`EventRecorder::subscribe`]).
    subscriber: Mutex<Option<Sender<Event>>>,
    /// Occurrences the consumer's full queue did not take.
    dropped: AtomicU64,
}

impl EventRecorder {
    pub fn new(capacity: usize) -> Self {
        EventRecorder {
            ring: Mutex::new(VecDeque::with_capacity(capacity.min(64))),
            capacity: capacity.max(1),
            generation: Default::default(),
            subscriber: Mutex::new(None),
            dropped: AtomicU64::new(0),
        }
    }

    /// Every event recorded from now on, repeats included (the ring folds
    /// those into its newest entry; here each comes with `count` 1 and its
    /// own time), through a queue of `capacity`. The recorder never waits
    /// on the consumer: an event that finds the queue full is dropped and
    /// counted ([`EventRecorder::dropped`]). There is one consumer: a
    /// second call replaces the first, whose receiver then sees the
    /// channel closed.
    pub fn subscribe(&self, capacity: usize) -> Receiver<Event> {
        let (tx, rx) = crossbeam_channel::bounded(capacity.max(1));
        *self.subscriber.lock() = Some(tx);
        rx
    }

    /// Events the consumer's queue had no room for, so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// One occurrence to the consumer, if there is one; never waits. Called
    /// under the ring's lock, so the consumer sees the ring's order.
    fn hand_over(&self, make: impl FnOnce() -> Event) {
        let mut sub = self.subscriber.lock();
        let Some(tx) = sub.as_ref() else { return };
        match tx.try_send(make()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            // the consumer is gone (cluster mode stopped): no more clones
            Err(TrySendError::Disconnected(_)) => *sub = None,
        }
    }

    /// Record an event. A repeat of the newest event bumps its count
    /// instead of filling the ring.
    pub fn event(&self, object: &ObjectRef, event_type: EventType, reason: &str, message: &str) {
        let level = match event_type {
            EventType::Normal => log::Level::Info,
            EventType::Warning => log::Level::Warn,
        };
        self.record(object, event_type, reason, message, level);
    }

    /// A Warning event about a configured feature that cannot work (graceful
    /// node shutdown that logind's settings turn off, say): logged at error
    /// level, as the kubelet logs a manager that fails to start, so that
    /// `journalctl -p err` shows it.
    pub fn failure(&self, object: &ObjectRef, reason: &str, message: &str) {
        self.record(object, EventType::Warning, reason, message, log::Level::Error);
    }

    fn record(&self, object: &ObjectRef, event_type: EventType, reason: &str, message: &str, level: log::Level) {
        let what = if object.namespace.is_empty() {
            format!("{} {}", object.kind, object.name)
        } else {
            format!("{}/{} {}", object.namespace, object.name, object.uid)
        };
        log::log!(level, "{what}: {reason}: {message}");
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
            self.hand_over(|| Event {
                involved_object: object.clone(),
                event_type,
                reason: reason.into(),
                message: message.into(),
                timestamp,
                count: 1,
            });
            self.generation.fetch_add(1, Ordering::SeqCst);
            drop(ring);
            crate::base::changes::bump();
            return;
        }
        if ring.len() == self.capacity {
            ring.pop_front();
        }
        let event = Event {
            involved_object: object.clone(),
            event_type,
            reason: reason.into(),
            message: message.into(),
            timestamp,
            count: 1,
        };
        self.hand_over(|| event.clone());
        ring.push_back(event);
        self.generation.fetch_add(1, Ordering::SeqCst);
        drop(ring);
        crate::base::changes::bump();
    }

    /// Changes so far: the same number means the same events (a reader
    /// that built from them need not look again).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
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

    #[test]
    fn the_subscriber_gets_every_occurrence_and_a_full_queue_drops() {
        let r = EventRecorder::new(8);
        let o = ObjectRef::node("n1");
        r.event(&o, EventType::Normal, "Before", "not delivered");
        let rx = r.subscribe(2);
        r.event(&o, EventType::Warning, "Bad", "x");
        r.event(&o, EventType::Warning, "Bad", "x");
        // the queue is full: this one is dropped, and the recorder goes on
        r.event(&o, EventType::Warning, "Bad", "x");
        assert_eq!(r.dropped(), 1);
        assert_eq!(r.list().last().unwrap().count, 3, "the ring still folds repeats");
        let got: Vec<Event> = rx.try_iter().collect();
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|e| e.reason == "Bad" && e.count == 1), "each repeat on its own");
        assert!(got[0].timestamp <= got[1].timestamp);
        // room again: delivered
        r.event(&o, EventType::Normal, "C", "z");
        assert_eq!(rx.try_recv().unwrap().reason, "C");
        // a consumer gone is let go of, not counted as drops
        drop(rx);
        r.event(&o, EventType::Normal, "D", "w");
        r.event(&o, EventType::Normal, "D", "w");
        assert_eq!(r.dropped(), 1);
        assert!(r.subscriber.lock().is_none());
        // a new consumer sees only what comes after it
        let rx = r.subscribe(4);
        r.event(&o, EventType::Normal, "E", "v");
        assert_eq!(rx.try_iter().map(|e| e.reason).collect::<Vec<_>>(), ["E"]);
    }
}

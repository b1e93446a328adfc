//! The `cluster-events` thread: the node's events sent to the API server as
//! core/v1 Events, correlated as the kubelet's recorder (client-go's)
//! correlates them, so that `kubectl get events` and `kubectl describe`
//! show what they show for a kubelet.
//!
//! Every occurrence the recorder hands over
//! ([`EventRecorder::subscribe`](crate::telemetry::events::EventRecorder::subscribe))
//! goes through a [`Correlator`], pure, in the kubelet's order:
//! - **aggregation**: events alike but for their message (same source,
//!   object, type and reason) that bring [`AGGREGATE_MAX_EVENTS`] distinct
//!   messages, each within [`AGGREGATE_INTERVAL`] of the one before, become
//!   one event whose message is [`COMBINED`] and the newest message;
//! - **dedup**: an event seen before (the same in field path and message
//!   too, or the same aggregate) is a PATCH of the API event it made: count
//!   plus one, lastTimestamp, message ([`LRU_ENTRIES`] remembered);
//! - **spam filter**: per source, object and type, a token bucket of
//!   [`SPAM_BURST`] refilled one every [`SPAM_REFILL`] seconds; an event
//!   without a token is dropped.
//!
//! Events about a manifest file stay local: the API has no such object.
//!
//! The thread holds what it has to send, in order, at most [`HELD`] (the
//! oldest dropped first): while the node has no identity yet, and while the
//! server cannot be reached (then the oldest is tried again after
//! `node::backoff`, at most [`MAX_TRIES`] times). An event the API refuses
//! (409, any other error status) is dropped, as the kubelet drops it. Sends
//! are paced as the kubelet's event client is (50 a second, bursts of
//! 100). The recorder never waits on this thread; the thread waits on its
//! queue at most a second at a time, so it ends within a second and one
//! call of the stop.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use serde_json::{Value, json};

use super::http::Response;
use super::{ClusterError, Shared};
use crate::agent::Parts;
use crate::base::logging::{RateLimit, held_back};
use crate::telemetry::events::{Event, EventType};

/// The recorder's queue to this thread, as client-go's broadcaster's.
pub const QUEUE: usize = 1000;
/// Events held for sending (no identity yet, the server unreachable).
pub const HELD: usize = 1000;
/// Tries of one event while the server cannot be reached, as the kubelet's.
pub const MAX_TRIES: u32 = 12;
/// Bytes of a message sent; longer ones are cut at a character boundary.
pub const MAX_MESSAGE: usize = 1024;
/// Distinct messages of similar events that make an aggregate.
pub const AGGREGATE_MAX_EVENTS: usize = 10;
/// Seconds between similar events for them to count together.
pub const AGGREGATE_INTERVAL: f64 = 600.0;
/// Entries each of the correlator's caches remembers (least recently used
/// forgotten first).
pub const LRU_ENTRIES: usize = 4096;
/// Events one object may have at once before the spam filter drops.
pub const SPAM_BURST: f64 = 25.0;
/// Seconds for the spam filter to give an object one more event.
pub const SPAM_REFILL: f64 = 300.0;
/// The start of an aggregate event's message.
pub const COMBINED: &str = "(combined from similar events): ";
/// The source and reporting component, as the kubelet's.
pub const COMPONENT: &str = "kubelet";
/// The kubelet's event client: `eventRecordQPS` and `eventBurst`.
const SEND_QPS: f64 = 50.0;
const SEND_BURST: f64 = 100.0;
/// The longest wait on the queue (how soon the stop is seen).
const TICK: Duration = Duration::from_secs(1);
/// The longest object name (a DNS subdomain).
const MAX_NAME: usize = 253;
const STRATEGIC_MERGE: &str = "application/strategic-merge-patch+json";

/// What to do with one occurrence.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// `POST` this Event.
    Create(Value),
    /// `PATCH` (strategic merge) the API event `name`; `full` is the event
    /// as it would be created, for when the API no longer has it.
    Patch { name: String, namespace: String, patch: Value, full: Value },
    /// Not sent (a file's event, or the spam filter's).
    Drop,
}

/// client-go's EventCorrelator for one node's events: aggregation, dedup,
/// spam filter. Time is each event's own (`timestamp`), so the outcome
/// depends on the events alone.
pub struct Correlator {
    node: String,
    /// Keys are hashes of their fields with a key made for this process: a
    /// message someone chooses cannot be made to collide with another.
    keys: RandomState,
    /// Similar events (aggregate key): the distinct messages seen.
    similar: Lru<Similar>,
    /// Each event (or aggregate) sent: the API event it is.
    seen: Lru<Seen>,
    /// Each source, object and type: its token bucket.
    spam: Lru<Bucket>,
    /// The last event name's nanoseconds: names never repeat, even for
    /// events of one object within the clock's resolution.
    last_nanos: u64,
}

/// Similar events: the hashes of their distinct messages, oldest first.
struct Similar {
    messages: VecDeque<u64>,
    last: f64,
}

/// An event the API has (or was sent): its name and how often it came.
struct Seen {
    name: String,
    first: f64,
    count: u64,
}

impl Correlator {
    pub fn new(node: &str) -> Self {
        Correlator {
            node: node.to_string(),
            keys: RandomState::new(),
            similar: Lru::new(LRU_ENTRIES),
            seen: Lru::new(LRU_ENTRIES),
            spam: Lru::new(LRU_ENTRIES),
            last_nanos: 0,
        }
    }

    fn hash(&self, fields: &[&str]) -> u64 {
        let mut h = self.keys.build_hasher();
        for f in fields {
            h.write(f.as_bytes());
            // never in UTF-8: fields cannot run into each other
            h.write_u8(0xff);
        }
        h.finish()
    }

    /// What to send for `e`, and the caches updated as client-go's are
    /// (an event the spam filter drops still counts as seen).
    pub fn correlate(&mut self, e: &Event) -> Action {
        let o = &e.involved_object;
        if o.kind == "File" {
            return Action::Drop;
        }
        let now = e.timestamp;
        let message = cap(&e.message);
        let event_type = match e.event_type {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        // the kubelet's node reference carries the node's name as its UID
        let uid = if o.kind == "Node" { o.name.as_str() } else { o.uid.as_str() };
        let node = self.node.as_str();
        let source = [COMPONENT, node, &o.kind, &o.namespace, &o.name, uid, "v1", event_type];
        let aggregate_key = self.hash(&[&["aggregate"], &source[..], &[&e.reason, COMPONENT, node]].concat());
        let event_key = self.hash(&[&["event"], &source[..], &[&e.reason, &o.field_path, &message]].concat());
        let spam_key = self.hash(&[&["spam"], &source[..]].concat());
        let message_key = self.hash(&[&message]);

        // aggregation
        let similar = self.similar.entry(aggregate_key, || Similar { messages: VecDeque::new(), last: f64::MIN });
        if now - similar.last > AGGREGATE_INTERVAL {
            similar.messages.clear();
        }
        if !similar.messages.contains(&message_key) {
            similar.messages.push_back(message_key);
        }
        similar.last = now;
        let (message, key) = if similar.messages.len() < AGGREGATE_MAX_EVENTS {
            (message, event_key)
        } else {
            // one forgotten, so the next new message is combined too
            similar.messages.pop_front();
            (cap(&format!("{COMBINED}{message}")), aggregate_key)
        };

        // dedup
        let (name, first, count) = match self.seen.get_mut(key) {
            Some(s) => {
                s.count += 1;
                (s.name.clone(), s.first, s.count)
            }
            None => {
                let name = self.name(&o.name, now);
                self.seen.insert(key, Seen { name: name.clone(), first: now, count: 1 });
                (name, now, 1)
            }
        };

        // spam filter
        if !self.spam.entry(spam_key, || Bucket::full(SPAM_BURST, now)).take(now, SPAM_BURST, 1.0 / SPAM_REFILL) {
            return Action::Drop;
        }

        let namespace = if o.namespace.is_empty() { "default".to_string() } else { o.namespace.clone() };
        let mut involved = json!({"kind": o.kind, "name": o.name, "uid": uid, "apiVersion": "v1"});
        if !o.namespace.is_empty() {
            involved["namespace"] = json!(o.namespace);
        }
        if !o.field_path.is_empty() {
            involved["fieldPath"] = json!(o.field_path);
        }
        let last = time(now);
        let full = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": e.reason,
            "message": message,
            "type": event_type,
            "source": {"component": COMPONENT, "host": self.node},
            "firstTimestamp": time(first),
            "lastTimestamp": last,
            "count": count,
            "reportingComponent": COMPONENT,
            "reportingInstance": self.node,
        });
        if count == 1 {
            return Action::Create(full);
        }
        let patch = json!({"count": count, "lastTimestamp": last, "message": message});
        Action::Patch { name, namespace, patch, full }
    }

    /// `<object>.<hex nanoseconds>`, as client-go names events; an object
    /// name too long for that is cut (and ends in a letter or digit).
    fn name(&mut self, object: &str, now: f64) -> String {
        let nanos = ((now.max(0.0) * 1e9) as u64).max(self.last_nanos + 1);
        self.last_nanos = nanos;
        let suffix = format!(".{nanos:x}");
        let mut base = object;
        if base.len() + suffix.len() > MAX_NAME {
            base = base[..base.floor_char_boundary(MAX_NAME - suffix.len())].trim_end_matches(['-', '.']);
        }
        if base.is_empty() {
            base = "event";
        }
        format!("{base}{suffix}")
    }
}

/// A message within [`MAX_MESSAGE`] bytes.
fn cap(message: &str) -> String {
    message[..message.floor_char_boundary(MAX_MESSAGE)].to_string()
}

/// Seconds since the epoch as an API `Time` (RFC 3339, whole seconds, UTC).
fn time(t: f64) -> String {
    crate::model::rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(t.max(0.0) as u64))
}

/// A token bucket: `burst` tokens, refilled at `rate` a second.
struct Bucket {
    tokens: f64,
    last: f64,
}

impl Bucket {
    fn full(burst: f64, now: f64) -> Self {
        Bucket { tokens: burst, last: now }
    }

    fn refill(&mut self, now: f64, burst: f64, rate: f64) {
        // a clock set back gives nothing, and takes nothing away
        if now > self.last {
            self.tokens = (self.tokens + (now - self.last) * rate).min(burst);
            self.last = now;
        }
    }

    /// A token if there is one.
    fn take(&mut self, now: f64, burst: f64, rate: f64) -> bool {
        self.refill(now, burst, rate);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Seconds until a token is there (0: now).
    fn wait(&mut self, now: f64, burst: f64, rate: f64) -> f64 {
        self.refill(now, burst, rate);
        ((1.0 - self.tokens) / rate).max(0.0)
    }
}

/// A map of at most `cap` entries that forgets the least recently used.
struct Lru<V> {
    cap: usize,
    tick: u64,
    map: HashMap<u64, (V, u64)>,
    /// Last use → key.
    order: BTreeMap<u64, u64>,
}

impl<V> Lru<V> {
    fn new(cap: usize) -> Self {
        Lru { cap: cap.max(1), tick: 0, map: HashMap::new(), order: BTreeMap::new() }
    }

    fn touch(&mut self, key: u64) {
        if let Some((_, used)) = self.map.get_mut(&key) {
            self.order.remove(used);
            self.tick += 1;
            *used = self.tick;
            self.order.insert(self.tick, key);
        }
    }

    fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        self.touch(key);
        self.map.get_mut(&key).map(|(v, _)| v)
    }

    fn insert(&mut self, key: u64, value: V) {
        if let Some((_, used)) = self.map.remove(&key) {
            self.order.remove(&used);
        }
        while self.map.len() >= self.cap {
            let Some((_, oldest)) = self.order.pop_first() else { break };
            self.map.remove(&oldest);
        }
        self.tick += 1;
        self.order.insert(self.tick, key);
        self.map.insert(key, (value, self.tick));
    }

    /// The entry of `key`, made by `make` if there is none.
    fn entry(&mut self, key: u64, make: impl FnOnce() -> V) -> &mut V {
        if self.map.contains_key(&key) {
            self.touch(key);
        } else {
            self.insert(key, make());
        }
        let (v, _) = self.map.get_mut(&key).expect("present: touched or inserted");
        v
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// One call to the API server: method, path, content type, body.
type Call<'a> = dyn FnMut(&str, &str, &str, &[u8]) -> Result<Response, ClusterError> + 'a;

/// How a send ended.
#[derive(Debug)]
enum Outcome {
    Sent,
    /// The API said no (or the call cannot work): not tried again.
    Refused(ClusterError),
    /// The server was not reached: tried again later.
    Retry(ClusterError),
}

/// Send one action: a POST, or a PATCH (a POST of the whole event when
/// the API no longer has it).
fn deliver(call: &mut Call, action: &Action) -> Outcome {
    fn post(call: &mut Call, body: &Value) -> (Result<Response, ClusterError>, String) {
        let ns = body["metadata"]["namespace"].as_str().unwrap_or("default");
        let name = body["metadata"]["name"].as_str().unwrap_or_default();
        let r =
            call("POST", &format!("/api/v1/namespaces/{ns}/events"), "application/json", body.to_string().as_bytes());
        (r, format!("creating event {ns}/{name}"))
    }
    let (r, what) = match action {
        Action::Drop => return Outcome::Sent,
        Action::Create(body) => post(call, body),
        Action::Patch { name, namespace, patch, full } => {
            let path = format!("/api/v1/namespaces/{namespace}/events/{name}");
            match call("PATCH", &path, STRATEGIC_MERGE, patch.to_string().as_bytes()) {
                // gone (expired, or its create was dropped): made anew
                Ok(r) if r.status == 404 => post(call, full),
                r => (r, format!("patching event {namespace}/{name}")),
            }
        }
    };
    match r {
        Ok(r) if (200..300).contains(&r.status) => Outcome::Sent,
        Ok(r) => Outcome::Refused(super::api_error(&what, &r)),
        // client-go tries again on anything that is not an API status
        Err(e @ (ClusterError::Unreachable(_) | ClusterError::Tls(_) | ClusterError::Protocol(_))) => Outcome::Retry(e),
        Err(e) => Outcome::Refused(e),
    }
}

/// What an action is about, for the log.
fn describe(action: &Action) -> String {
    let body = match action {
        Action::Create(b) => b,
        Action::Patch { full, .. } => full,
        Action::Drop => return String::new(),
    };
    let o = &body["involvedObject"];
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let object = match s(&o["namespace"]) {
        ns if ns.is_empty() => format!("{} {}", s(&o["kind"]), s(&o["name"])),
        ns => format!("{} {ns}/{}", s(&o["kind"]), s(&o["name"])),
    };
    format!("{} on {object}", s(&body["reason"]))
}

/// An action waiting to be sent.
struct Pending {
    action: Action,
    tries: u32,
}

/// What the thread holds to send, oldest first.
#[derive(Default)]
struct Outbox {
    queue: VecDeque<Pending>,
    /// Events dropped because [`HELD`] were waiting, not yet logged.
    overflow: u64,
}

/// What became of the oldest held event.
#[derive(Debug, PartialEq)]
enum Head {
    /// Sent or dropped: the next one may go.
    Done,
    /// Kept: try again after this.
    Later(Duration),
}

impl Outbox {
    /// Hold `action` to send. A patch of an event already held (not yet
    /// sent) updates that one: repeats while the server is away cost no
    /// room.
    fn push(&mut self, action: Action) {
        match &action {
            Action::Drop => return,
            Action::Patch { name, namespace, patch, full } if self.merge(name, namespace, patch, full) => return,
            _ => {}
        }
        if self.queue.len() >= HELD {
            self.queue.pop_front();
            self.overflow += 1;
        }
        self.queue.push_back(Pending { action, tries: 0 });
    }

    fn merge(&mut self, name: &str, namespace: &str, patch: &Value, full: &Value) -> bool {
        for p in self.queue.iter_mut().rev() {
            match &mut p.action {
                Action::Patch { name: n, namespace: ns, patch: held, full: held_full }
                    if n == name && ns == namespace =>
                {
                    *held = patch.clone();
                    *held_full = full.clone();
                    return true;
                }
                // a create tried before may have reached the server: its
                // retry would be refused (409) with the count in it
                Action::Create(body)
                    if p.tries == 0
                        && body["metadata"]["name"] == name
                        && body["metadata"]["namespace"] == namespace =>
                {
                    for k in ["count", "lastTimestamp", "message"] {
                        body[k] = patch[k].clone();
                    }
                    return true;
                }
                _ => {}
            }
        }
        false
    }

    /// Send the oldest held event, if any.
    fn send_head(&mut self, call: &mut Call, logged: &RateLimit) -> Head {
        let Some(mut p) = self.queue.pop_front() else { return Head::Done };
        match deliver(call, &p.action) {
            Outcome::Sent => Head::Done,
            // a create retried after it got through: it is there
            Outcome::Refused(ClusterError::Api { status: 409, .. }) => Head::Done,
            Outcome::Refused(e) => {
                if let Some(n) = logged.allow() {
                    log::warn!("cluster: event {} not sent: {e}{}", describe(&p.action), held_back(n, LOG_EVERY));
                }
                Head::Done
            }
            Outcome::Retry(e) => {
                p.tries += 1;
                if p.tries >= MAX_TRIES {
                    if let Some(n) = logged.allow() {
                        log::warn!(
                            "cluster: event {} dropped after {MAX_TRIES} tries: {e}{}",
                            describe(&p.action),
                            held_back(n, LOG_EVERY)
                        );
                    }
                    return Head::Done;
                }
                if let Some(n) = logged.allow() {
                    log::warn!(
                        "cluster: event {} not sent (try {}, {} held): {e}; retrying{}",
                        describe(&p.action),
                        p.tries,
                        self.queue.len() + 1,
                        held_back(n, LOG_EVERY)
                    );
                }
                self.queue.push_front(p);
                Head::Later(super::node::backoff(self.queue[0].tries))
            }
        }
    }
}

/// Failures are logged at most this often.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// The `cluster-events` thread's loop: every event from `rx` correlated
/// and sent; returns when `shared` stops (or the recorder lets go of `rx`).
pub fn run(parts: Parts, shared: Arc<Shared>, rx: Receiver<Event>) {
    let mut correlator = Correlator::new(&parts.node_name);
    let mut out = Outbox::default();
    let logged = RateLimit::new(LOG_EVERY);
    let lost = RateLimit::new(LOG_EVERY);
    let started = Instant::now();
    let mut pace = Bucket::full(SEND_BURST, 0.0);
    let mut next_try = Instant::now();
    let mut recorder_dropped = parts.events.dropped();
    loop {
        if shared.stopped() {
            return;
        }
        // held while the link is down: the Lease goes first when it is back
        let client = if out.queue.is_empty() || !shared.link_up() { None } else { shared.client() };
        let wait = match client {
            Some(_) => next_try.saturating_duration_since(Instant::now()).min(TICK),
            None => TICK,
        };
        if !wait.is_zero() {
            match rx.recv_timeout(wait) {
                Ok(e) => out.push(correlator.correlate(&as_in_the_api(&parts, e))),
                Err(RecvTimeoutError::Timeout) => {}
                // a new consumer took the recorder's events
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        take_all(&parts, &rx, &mut correlator, &mut out);
        let dropped = parts.events.dropped();
        if (dropped > recorder_dropped || out.overflow > 0) && lost.allow().is_some() {
            log::warn!(
                "cluster: {} event(s) not sent to the API server: {} found the recorder's queue full, {} found {HELD} already held",
                dropped - recorder_dropped + out.overflow,
                dropped - recorder_dropped,
                out.overflow
            );
            recorder_dropped = dropped;
            out.overflow = 0;
        }
        let Some(client) = client else { continue };
        if Instant::now() < next_try {
            continue;
        }
        let mut call = |method: &str, path: &str, ct: &str, body: &[u8]| client.send(method, path, ct, body);
        while !out.queue.is_empty() && !shared.stopped() {
            let wait = pace.wait(started.elapsed().as_secs_f64(), SEND_BURST, SEND_QPS);
            if wait > 0.0 {
                next_try = Instant::now() + Duration::from_secs_f64(wait);
                break;
            }
            pace.take(started.elapsed().as_secs_f64(), SEND_BURST, SEND_QPS);
            let head = out.send_head(&mut call, &logged);
            // a send may take the call's whole timeout: keep the recorder's
            // queue moving
            take_all(&parts, &rx, &mut correlator, &mut out);
            if let Head::Later(d) = head {
                next_try = Instant::now() + d;
                break;
            }
        }
    }
}

/// Every event already in the queue, correlated and held.
fn take_all(parts: &Parts, rx: &Receiver<Event>, correlator: &mut Correlator, out: &mut Outbox) {
    while let Ok(e) = rx.try_recv() {
        out.push(correlator.correlate(&as_in_the_api(parts, e)));
    }
}

/// An event about a static pod names its mirror pod (`NAME-NODE`, the
/// name the API and `kubectl get events` know it by), as the kubelet's
/// events name static pods; any other event is as recorded.
fn as_in_the_api(parts: &Parts, mut e: Event) -> Event {
    let o = &mut e.involved_object;
    if o.kind == "Pod" && parts.agent.desired_pod(&o.uid).is_some_and(|d| crate::model::is_static(&d.pod)) {
        o.name = super::status::mirror_name(&parts.node_name, &o.name);
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::events::ObjectRef;

    const T0: f64 = 1_700_000_000.0;

    fn pod_ref() -> ObjectRef {
        ObjectRef {
            kind: "Pod".into(),
            namespace: "ns1".into(),
            name: "web".into(),
            uid: "u-1".into(),
            field_path: String::new(),
        }
    }

    fn ev(o: &ObjectRef, reason: &str, message: &str, at: f64) -> Event {
        Event {
            involved_object: o.clone(),
            event_type: EventType::Warning,
            reason: reason.into(),
            message: message.into(),
            timestamp: at,
            count: 1,
        }
    }

    fn created(a: Action) -> Value {
        match a {
            Action::Create(v) => v,
            other => panic!("not a create: {other:?}"),
        }
    }

    fn patched(a: Action) -> (String, String, Value, Value) {
        match a {
            Action::Patch { name, namespace, patch, full } => (name, namespace, patch, full),
            other => panic!("not a patch: {other:?}"),
        }
    }

    #[test]
    fn a_first_event_is_created_as_the_kubelet_makes_it() {
        let mut c = Correlator::new("node-a");
        let o = ObjectRef { field_path: "spec.containers{app}".into(), ..pod_ref() };
        let v = created(c.correlate(&ev(&o, "BackOff", "Back-off restarting", T0 + 0.5)));
        let name = format!("web.{:x}", (T0 + 0.5) as u64 * 1_000_000_000 + 500_000_000);
        assert_eq!(
            v,
            json!({
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": "ns1"},
                "involvedObject": {"kind": "Pod", "namespace": "ns1", "name": "web", "uid": "u-1", "apiVersion": "v1", "fieldPath": "spec.containers{app}"},
                "reason": "BackOff",
                "message": "Back-off restarting",
                "type": "Warning",
                "source": {"component": "kubelet", "host": "node-a"},
                "firstTimestamp": "2023-11-14T22:13:20Z",
                "lastTimestamp": "2023-11-14T22:13:20Z",
                "count": 1,
                "reportingComponent": "kubelet",
                "reportingInstance": "node-a",
            })
        );
    }

    #[test]
    fn node_events_go_to_default_with_the_node_name_as_uid_and_files_stay_local() {
        let mut c = Correlator::new("node-a");
        let mut e = ev(&ObjectRef::node("node-a"), "Starting", "Starting kubelet.", T0);
        e.event_type = EventType::Normal;
        let v = created(c.correlate(&e));
        assert_eq!(v["metadata"]["namespace"], "default");
        assert_eq!(v["type"], "Normal");
        assert_eq!(v["involvedObject"], json!({"kind": "Node", "name": "node-a", "uid": "node-a", "apiVersion": "v1"}));
        assert_eq!(c.correlate(&ev(&ObjectRef::file("/etc/pods/a.yaml"), "Bad", "x", T0)), Action::Drop);
    }

    #[test]
    fn a_repeat_patches_count_time_and_message_of_the_same_event() {
        let mut c = Correlator::new("n");
        let first = created(c.correlate(&ev(&pod_ref(), "Unhealthy", "probe failed", T0)));
        let (name, ns, patch, full) = patched(c.correlate(&ev(&pod_ref(), "Unhealthy", "probe failed", T0 + 10.0)));
        assert_eq!(name, first["metadata"]["name"]);
        assert_eq!(ns, "ns1");
        assert_eq!(patch, json!({"count": 2, "lastTimestamp": "2023-11-14T22:13:30Z", "message": "probe failed"}));
        assert_eq!(full["firstTimestamp"], first["firstTimestamp"]);
        assert_eq!(full["metadata"]["name"], first["metadata"]["name"]);
        assert_eq!(full["count"], 2);
        let (_, _, patch, _) = patched(c.correlate(&ev(&pod_ref(), "Unhealthy", "probe failed", T0 + 20.0)));
        assert_eq!(patch["count"], 3);
        // another container of the pod is another event
        let other = ObjectRef { field_path: "spec.containers{b}".into(), ..pod_ref() };
        created(c.correlate(&ev(&other, "Unhealthy", "probe failed", T0 + 21.0)));
    }

    #[test]
    fn ten_distinct_messages_within_ten_minutes_become_one_aggregate() {
        let mut c = Correlator::new("n");
        let mut names = Vec::new();
        for i in 0..9 {
            let v = created(c.correlate(&ev(&pod_ref(), "Failed", &format!("error {i}"), T0 + 500.0 * i as f64)));
            assert_eq!(v["message"], format!("error {i}"));
            names.push(v["metadata"]["name"].clone());
        }
        let agg = created(c.correlate(&ev(&pod_ref(), "Failed", "error 9", T0 + 4600.0)));
        assert_eq!(agg["message"], "(combined from similar events): error 9");
        assert!(!names.contains(&agg["metadata"]["name"]));
        // the next new message patches the aggregate
        let (name, _, patch, _) = patched(c.correlate(&ev(&pod_ref(), "Failed", "error 10", T0 + 4601.0)));
        assert_eq!(name, agg["metadata"]["name"]);
        assert_eq!(patch["count"], 2);
        assert_eq!(patch["message"], "(combined from similar events): error 10");
        // another reason is not similar
        created(c.correlate(&ev(&pod_ref(), "Other", "error 11", T0 + 4602.0)));
        // after ten quiet minutes, a new message is its own event again
        let v = created(c.correlate(&ev(&pod_ref(), "Failed", "error 12", T0 + 4601.0 + 601.0)));
        assert_eq!(v["message"], "error 12");
    }

    #[test]
    fn similar_events_further_apart_than_ten_minutes_are_not_aggregated() {
        let mut c = Correlator::new("n");
        for i in 0..20 {
            let v = created(c.correlate(&ev(&pod_ref(), "Failed", &format!("error {i}"), T0 + 601.0 * i as f64)));
            assert_eq!(v["message"], format!("error {i}"));
        }
    }

    #[test]
    fn an_object_gets_twenty_five_events_then_one_every_five_minutes() {
        let mut c = Correlator::new("n");
        for i in 0..25 {
            assert_ne!(c.correlate(&ev(&pod_ref(), "R", "same", T0 + i as f64 * 0.01)), Action::Drop, "{i}");
        }
        assert_eq!(c.correlate(&ev(&pod_ref(), "R", "same", T0 + 1.0)), Action::Drop);
        assert_eq!(c.correlate(&ev(&pod_ref(), "Other", "x", T0 + 2.0)), Action::Drop, "any reason");
        // the Normal events of the object have their own bucket
        let mut normal = ev(&pod_ref(), "Pulled", "y", T0 + 2.0);
        normal.event_type = EventType::Normal;
        assert!(matches!(c.correlate(&normal), Action::Create(_)));
        // so has another object
        let other = ObjectRef { name: "db".into(), uid: "u-2".into(), ..pod_ref() };
        assert!(matches!(c.correlate(&ev(&other, "R", "same", T0 + 2.0)), Action::Create(_)));
        // one more after five minutes; the dropped ones still counted
        let (_, _, patch, _) = patched(c.correlate(&ev(&pod_ref(), "R", "same", T0 + 301.0)));
        assert_eq!(patch["count"], 27);
        assert_eq!(c.correlate(&ev(&pod_ref(), "R", "same", T0 + 302.0)), Action::Drop);
    }

    #[test]
    fn messages_and_names_are_bounded_and_names_unique() {
        let mut c = Correlator::new("n");
        let long = "é".repeat(1000);
        let v = created(c.correlate(&ev(&pod_ref(), "R", &long, T0)));
        let m = v["message"].as_str().unwrap();
        assert_eq!(m.len(), 1024);
        assert!(long.starts_with(m));
        let a = created(c.correlate(&ev(&pod_ref(), "A", "x", T0)));
        let b = created(c.correlate(&ev(&pod_ref(), "B", "x", T0)));
        assert_ne!(a["metadata"]["name"], b["metadata"]["name"], "same instant, two names");
        // cut after its 236th byte, a dash that may not end a name
        let o = ObjectRef { name: format!("{}-{}", "a".repeat(235), "b".repeat(17)), ..pod_ref() };
        let v = created(c.correlate(&ev(&o, "R", "x", T0)));
        let name = v["metadata"]["name"].as_str().unwrap();
        assert!(name.len() <= 253, "{}", name.len());
        let (base, hex) = name.rsplit_once('.').unwrap();
        assert_eq!(base, "a".repeat(235));
        assert!(u64::from_str_radix(hex, 16).is_ok(), "{name}");
        assert_eq!(v["involvedObject"]["name"], o.name, "the object's own name is whole");
    }

    #[test]
    fn the_lru_forgets_the_least_recently_used() {
        let mut l = Lru::new(2);
        l.insert(1, "a");
        l.insert(2, "b");
        assert!(l.get_mut(1).is_some());
        l.insert(3, "c");
        assert!(l.get_mut(2).is_none(), "2 was the least recently used");
        assert_eq!(l.len(), 2);
        *l.entry(4, || "d") = "D";
        assert!(l.get_mut(1).is_none());
        assert_eq!(l.get_mut(4), Some(&mut "D"));
        assert_eq!(*l.entry(3, || "new"), "c");
    }

    fn answer(status: u16) -> Result<Response, ClusterError> {
        Ok(Response { status, body: br#"{"message":"m"}"#.to_vec() })
    }

    #[test]
    fn a_patch_of_an_event_gone_posts_it_again_and_refusals_are_final() {
        let mut c = Correlator::new("n");
        let create = c.correlate(&ev(&pod_ref(), "R", "x", T0));
        let patch = c.correlate(&ev(&pod_ref(), "R", "x", T0 + 1.0));
        let mut calls = Vec::new();
        let mut call = |m: &str, p: &str, ct: &str, b: &[u8]| {
            calls.push((m.to_string(), p.to_string(), ct.to_string(), serde_json::from_slice::<Value>(b).unwrap()));
            answer(if m == "PATCH" { 404 } else { 201 })
        };
        assert!(matches!(deliver(&mut call, &patch), Outcome::Sent));
        assert_eq!(calls.len(), 2);
        let name = created(create)["metadata"]["name"].as_str().unwrap().to_string();
        assert_eq!(calls[0].0, "PATCH");
        assert_eq!(calls[0].1, format!("/api/v1/namespaces/ns1/events/{name}"));
        assert_eq!(calls[0].2, "application/strategic-merge-patch+json");
        assert_eq!((calls[1].0.as_str(), calls[1].1.as_str()), ("POST", "/api/v1/namespaces/ns1/events"));
        assert_eq!(calls[1].3["count"], 2, "made anew with the count so far");
        assert_eq!(calls[1].3["metadata"]["name"], name.as_str());

        let mut out = Outbox::default();
        let logged = RateLimit::new(LOG_EVERY);
        for status in [409, 403, 422] {
            out.push(c.correlate(&ev(&pod_ref(), &format!("S{status}"), "x", T0)));
            assert_eq!(out.send_head(&mut |_: &str, _: &str, _: &str, _: &[u8]| answer(status), &logged), Head::Done);
            assert!(out.queue.is_empty(), "{status}: dropped");
        }
    }

    #[test]
    fn an_unreachable_server_keeps_the_event_for_twelve_tries() {
        let mut c = Correlator::new("n");
        let mut out = Outbox::default();
        out.push(c.correlate(&ev(&pod_ref(), "R", "x", T0)));
        out.push(c.correlate(&ev(&pod_ref(), "Next", "x", T0)));
        let logged = RateLimit::new(LOG_EVERY);
        let mut tries = 0;
        let mut down = |_: &str, _: &str, _: &str, _: &[u8]| {
            tries += 1;
            Err(ClusterError::Unreachable("refused".into()))
        };
        for i in 1..MAX_TRIES {
            assert!(matches!(out.send_head(&mut down, &logged), Head::Later(_)), "{i}");
            assert_eq!(out.queue.len(), 2);
            assert_eq!(out.queue[0].tries, i);
        }
        assert_eq!(out.send_head(&mut down, &logged), Head::Done);
        assert_eq!(tries, MAX_TRIES);
        assert_eq!(out.queue.len(), 1, "dropped after the last try; the next one waits");
        assert_eq!(created(out.queue[0].action.clone())["reason"], "Next");
    }

    #[test]
    fn held_events_are_bounded_and_repeats_fold_into_them() {
        let mut c = Correlator::new("n");
        let mut out = Outbox::default();
        // repeats of a held create fold into it
        out.push(c.correlate(&ev(&pod_ref(), "R", "x", T0)));
        out.push(c.correlate(&ev(&pod_ref(), "R", "x", T0 + 5.0)));
        out.push(c.correlate(&ev(&pod_ref(), "R", "x", T0 + 9.0)));
        assert_eq!(out.queue.len(), 1);
        let v = created(out.queue[0].action.clone());
        assert_eq!((v["count"].clone(), v["lastTimestamp"].clone()), (json!(3), json!("2023-11-14T22:13:29Z")));
        assert_eq!(v["firstTimestamp"], "2023-11-14T22:13:20Z");
        // once tried, a create takes no more: its repeat is a patch after it
        out.queue[0].tries = 1;
        out.push(c.correlate(&ev(&pod_ref(), "R", "x", T0 + 10.0)));
        out.push(c.correlate(&ev(&pod_ref(), "R", "x", T0 + 11.0)));
        assert_eq!(out.queue.len(), 2);
        let (_, _, patch, full) = patched(out.queue[1].action.clone());
        assert_eq!((patch["count"].clone(), full["count"].clone()), (json!(5), json!(5)));
        // at most HELD: the oldest goes
        for i in 0..HELD {
            let o = ObjectRef { name: format!("p{i}"), ..pod_ref() };
            out.push(c.correlate(&ev(&o, "R", "x", T0)));
        }
        assert_eq!(out.queue.len(), HELD);
        assert_eq!(out.overflow, 2);
        assert_eq!(created(out.queue[0].action.clone())["involvedObject"]["name"], "p0");
        out.push(Action::Drop);
        assert_eq!(out.queue.len(), HELD);
    }
}

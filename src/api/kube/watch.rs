//! Watches served from the state podwarden holds, without a relist per
//! watcher: one [`Hub`] keeps the objects it last saw of each watched kind
//! (pods, events, configmaps, secrets, namespaces), each with the
//! resourceVersion of its last change, and a bounded history of changes.
//! A sync (on the `kube-watch` thread when `base::changes` counts a
//! change, at least every second, and before every list) collects the
//! objects once (while no one watches, only lists and new watches sync),
//! compares them with what it held, numbers the changes
//! (ADDED, MODIFIED, DELETED) and hands each to every watcher of its kind
//! with `try_send` on the watcher's bounded channel: the hub never waits
//! for a watcher. A watcher whose channel is full is marked lagging and
//! ended with `410 Expired`, as is a watch from a resourceVersion older
//! than the history; kubectl then lists again.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use parking_lot::Mutex;
use serde_json::Value;

use super::wire::ApiError;

/// The kinds the hub watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Pods,
    Events,
    ConfigMaps,
    Secrets,
    Namespaces,
}

/// One object as collected: its kind, key (namespace/name) and JSON.
pub type Item = (Kind, String, Value);

/// What the hub collects from (everything of every kind, now).
pub type Collect = Box<dyn Fn() -> Vec<Item> + Send + Sync>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One numbered change.
#[derive(Debug)]
pub struct Change {
    pub rv: u64,
    pub kind: Kind,
    pub event: EventType,
    /// The object after the change (the last state for DELETED), with
    /// its resourceVersion.
    pub object: Arc<Value>,
    /// The object before (MODIFIED).
    pub prev: Option<Arc<Value>>,
}

/// Changes kept for watches that start from a resourceVersion.
pub const HISTORY: usize = 1024;
/// Changes a watcher may have waiting before it is ended as too slow.
pub const WATCHER_BUFFER: usize = 256;
/// Watchers at once (each is a connection, which the server bounds too).
pub const MAX_WATCHERS: usize = 256;

struct Watcher {
    kind: Kind,
    tx: Sender<Arc<Change>>,
    lagged: Arc<AtomicBool>,
    /// The subscription was dropped.
    closed: Arc<AtomicBool>,
}

#[derive(Default)]
struct State {
    rv: u64,
    items: HashMap<(Kind, String), Arc<Value>>,
    history: VecDeque<Arc<Change>>,
    watchers: Vec<Watcher>,
}

impl State {
    /// The oldest resourceVersion a watch may start from.
    fn oldest(&self) -> u64 {
        self.history.front().map_or(self.rv, |c| c.rv - 1)
    }

    fn publish(&mut self, c: Change) {
        let c = Arc::new(c);
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(c.clone());
        self.watchers.retain(|w| {
            if w.closed.load(Ordering::Relaxed) {
                return false;
            }
            if w.kind != c.kind {
                return true;
            }
            match w.tx.try_send(c.clone()) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    w.lagged.store(true, Ordering::SeqCst);
                    false
                }
                Err(TrySendError::Disconnected(_)) => false,
            }
        });
    }
}

/// The hub (shared: an `Arc`).
pub struct Hub {
    state: Mutex<State>,
    /// Serializes syncs (collecting happens outside the state's lock).
    syncing: Mutex<()>,
    collect: Collect,
    stop: AtomicBool,
}

fn with_rv(mut v: Value, rv: u64) -> Value {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
    v
}

fn without_rv(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    v
}

/// What a watcher gets next.
#[derive(Debug)]
pub enum Next {
    Change(Arc<Change>),
    /// Nothing within the wait.
    Idle,
    /// Too slow (its buffer filled) or the hub stopped: end with 410.
    Expired,
}

/// A registered watch: the changes since its resourceVersion, then live
/// ones.
pub struct Subscription {
    pub backlog: Vec<Arc<Change>>,
    rx: Receiver<Arc<Change>>,
    lagged: Arc<AtomicBool>,
    closed: Arc<AtomicBool>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Relaxed);
    }
}

impl Subscription {
    pub fn next(&self, wait: Duration) -> Next {
        if self.lagged.load(Ordering::SeqCst) && self.rx.is_empty() {
            return Next::Expired;
        }
        match self.rx.recv_timeout(wait) {
            Ok(c) => Next::Change(c),
            Err(RecvTimeoutError::Timeout) => Next::Idle,
            Err(RecvTimeoutError::Disconnected) => Next::Expired,
        }
    }
}

impl Hub {
    pub fn new(collect: Collect) -> Arc<Hub> {
        Arc::new(Hub {
            state: Mutex::new(State::default()),
            syncing: Mutex::new(()),
            collect,
            stop: AtomicBool::new(false),
        })
    }

    /// Collect now and publish what changed.
    pub fn sync(&self) {
        let _one = self.syncing.lock();
        let now = (self.collect)();
        let mut st = self.state.lock();
        let mut seen = std::collections::HashSet::with_capacity(now.len());
        for (kind, key, mut obj) in now {
            let k = (kind, key);
            if let Some(old) = st.items.get(&k) {
                // a terminating pod's deletionTimestamp is made when shown:
                // keep the first one
                if let Some(t) = old.pointer("/metadata/deletionTimestamp").cloned()
                    && let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut)
                    && m.contains_key("deletionTimestamp")
                {
                    m.insert("deletionTimestamp".into(), t);
                }
            }
            let prev = st.items.get(&k).cloned();
            let changed = prev.as_ref().is_none_or(|p| without_rv(p) != obj);
            if changed {
                st.rv += 1;
                let obj = Arc::new(with_rv(obj, st.rv));
                st.items.insert(k.clone(), obj.clone());
                let event = if prev.is_some() { EventType::Modified } else { EventType::Added };
                let rv = st.rv;
                st.publish(Change { rv, kind, event, object: obj, prev });
            }
            seen.insert(k);
        }
        let gone: Vec<(Kind, String)> = st.items.keys().filter(|k| !seen.contains(*k)).cloned().collect();
        for k in gone {
            if let Some(old) = st.items.remove(&k) {
                st.rv += 1;
                let rv = st.rv;
                let object = Arc::new(with_rv((*old).clone(), rv));
                st.publish(Change { rv, kind: k.0, event: EventType::Deleted, object, prev: Some(old) });
            }
        }
    }

    /// The objects of `kind` now (after a sync) and the resourceVersion
    /// they are at.
    pub fn list(&self, kind: Kind) -> (u64, Vec<Arc<Value>>) {
        self.sync();
        let st = self.state.lock();
        let mut items: Vec<(&String, &Arc<Value>)> =
            st.items.iter().filter(|((k, _), _)| *k == kind).map(|((_, key), v)| (key, v)).collect();
        items.sort_by(|a, b| a.0.cmp(b.0));
        (st.rv, items.into_iter().map(|(_, v)| v.clone()).collect())
    }

    /// The resourceVersion now.
    pub fn resource_version(&self) -> u64 {
        self.state.lock().rv
    }

    /// Watch `kind` from `from` (`None` or 0: the current objects as
    /// ADDED, then changes). A resourceVersion older than the history
    /// kept is 410 Expired, as the API server answers.
    pub fn watch(&self, kind: Kind, from: Option<u64>) -> Result<Subscription, ApiError> {
        self.sync();
        let mut st = self.state.lock();
        st.watchers.retain(|w| !w.closed.load(Ordering::Relaxed));
        if st.watchers.len() >= MAX_WATCHERS {
            return Err(ApiError::too_many());
        }
        let backlog: Vec<Arc<Change>> = match from {
            None | Some(0) => {
                let mut items: Vec<(&String, &Arc<Value>)> =
                    st.items.iter().filter(|((k, _), _)| *k == kind).map(|((_, key), v)| (key, v)).collect();
                items.sort_by(|a, b| a.0.cmp(b.0));
                items
                    .into_iter()
                    .map(|(_, v)| {
                        let rv =
                            v.pointer("/metadata/resourceVersion").and_then(Value::as_str).and_then(|s| s.parse().ok());
                        Arc::new(Change {
                            rv: rv.unwrap_or(st.rv),
                            kind,
                            event: EventType::Added,
                            object: v.clone(),
                            prev: None,
                        })
                    })
                    .collect()
            }
            Some(n) if n < st.oldest() => {
                return Err(ApiError::expired(format!("too old resource version: {n} ({})", st.oldest() + 1)));
            }
            Some(n) if n > st.rv => {
                return Err(ApiError::new(
                    504,
                    "Timeout",
                    format!("Too large resource version: {n}, current: {}", st.rv),
                ));
            }
            Some(n) => st.history.iter().filter(|c| c.kind == kind && c.rv > n).cloned().collect(),
        };
        let (tx, rx) = crossbeam_channel::bounded(WATCHER_BUFFER);
        let (lagged, closed) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        st.watchers.push(Watcher { kind, tx, lagged: lagged.clone(), closed: closed.clone() });
        Ok(Subscription { backlog, rx, lagged, closed })
    }

    /// Watchers registered now.
    pub fn watchers(&self) -> usize {
        let mut st = self.state.lock();
        st.watchers.retain(|w| !w.closed.load(Ordering::Relaxed));
        st.watchers.len()
    }

    /// The `kube-watch` thread: while anyone watches, a sync after each
    /// change (at most every 100 ms) and every second; ends with
    /// [`Hub::stop`].
    pub fn start(self: &Arc<Self>) -> std::io::Result<JoinHandle<()>> {
        let hub = self.clone();
        crate::base::thread::spawn("kube-watch", Some(crate::base::thread::WORKER_STACK), move || {
            let mut seen = crate::base::changes::current();
            while !hub.stop.load(Ordering::SeqCst) {
                seen = crate::base::changes::wait_past(seen, Duration::from_secs(1));
                if hub.stop.load(Ordering::SeqCst) {
                    break;
                }
                // without watchers nothing is collected here: a list or a
                // new watch syncs first, and numbers what changed since
                if hub.watchers() > 0 {
                    hub.sync();
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            // every watcher ends (Disconnected: 410, and kubectl re-lists)
            hub.state.lock().watchers.clear();
        })
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        crate::base::changes::bump();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hub() -> (Arc<Hub>, Arc<Mutex<Vec<Item>>>) {
        let data: Arc<Mutex<Vec<Item>>> = Arc::new(Mutex::new(Vec::new()));
        let d = data.clone();
        (Hub::new(Box::new(move || d.lock().clone())), data)
    }

    fn pod(name: &str, phase: &str) -> Item {
        (Kind::Pods, format!("default/{name}"), json!({"metadata": {"name": name}, "status": {"phase": phase}}))
    }

    #[test]
    fn changes_are_numbered_and_watchers_get_them_from_their_version() {
        let (h, data) = hub();
        data.lock().push(pod("a", "Pending"));
        let (rv, items) = h.list(Kind::Pods);
        assert_eq!((rv, items.len()), (1, 1));
        assert_eq!(items[0]["metadata"]["resourceVersion"], "1");
        let w = h.watch(Kind::Pods, Some(rv)).unwrap();
        assert!(w.backlog.is_empty());
        data.lock()[0] = pod("a", "Running");
        h.sync();
        h.sync(); // nothing new: no change
        let Next::Change(c) = w.next(Duration::from_secs(1)) else { panic!("a change") };
        assert_eq!((c.event, c.rv, c.object["status"]["phase"].as_str()), (EventType::Modified, 2, Some("Running")));
        assert!(matches!(w.next(Duration::from_millis(10)), Next::Idle));
        data.lock().clear();
        h.sync();
        let Next::Change(c) = w.next(Duration::from_secs(1)) else { panic!("a change") };
        assert_eq!((c.event, c.rv), (EventType::Deleted, 3));
        // from an older version: the history since
        let w2 = h.watch(Kind::Pods, Some(1)).unwrap();
        assert_eq!(w2.backlog.iter().map(|c| c.rv).collect::<Vec<_>>(), [2, 3]);
        // from nothing: the current objects as ADDED (none now)
        assert!(h.watch(Kind::Pods, None).unwrap().backlog.is_empty());
        assert!(h.watch(Kind::Events, Some(0)).unwrap().backlog.is_empty());
    }

    #[test]
    fn a_version_older_than_the_history_is_expired_and_a_slow_watcher_is_ended() {
        let (h, data) = hub();
        data.lock().push(pod("a", "0"));
        h.sync();
        let slow = h.watch(Kind::Pods, Some(1)).unwrap();
        for i in 1..=(HISTORY + 10) {
            data.lock()[0] = pod("a", &i.to_string());
            h.sync();
        }
        let e = h.watch(Kind::Pods, Some(1)).err().expect("too old");
        assert_eq!((e.code, e.reason), (410, "Expired"));
        let mut got = 0;
        loop {
            match slow.next(Duration::from_millis(10)) {
                Next::Change(_) => got += 1,
                Next::Expired => break,
                Next::Idle => panic!("a lagging watcher must be ended"),
            }
        }
        assert_eq!(got, WATCHER_BUFFER, "it got what its buffer held, then the end");
        assert_eq!(h.watchers(), 0);
        let w = h.watch(Kind::Pods, None).unwrap();
        assert_eq!(h.watchers(), 1);
        drop(w);
        assert_eq!(h.watchers(), 0, "a dropped watch is forgotten");
    }
}

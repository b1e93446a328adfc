//! Watches served from the state podwarden holds, without a relist per
//! watcher: one [`Hub`] keeps the objects it last saw of each watched kind
//! (pods, events, configmaps, secrets, namespaces), each with the
//! resourceVersion of its last change, and a bounded history of changes.
//! A sync asks the collector for a [`Delta`]: only the objects whose source
//! changed since the last sync, rebuilt (the collector keeps a fingerprint
//! of what it built each object from: a [`Tracker`] per kind), and the keys
//! that went. The hub compares each rebuilt object with the one it holds
//! (in place: no copy), numbers the real changes (ADDED, MODIFIED, DELETED)
//! and hands each to every watcher of its kind with `try_send` on the
//! watcher's bounded channel: the hub never waits for a watcher. A sync
//! runs before every list and new watch (it costs next to nothing when
//! nothing changed) and, while anyone watches, on the `kube-watch` thread
//! within [`COALESCE`] of a change that `base::changes` counts (and every
//! second). A watcher whose channel has no room for all of a sync's
//! changes is marked lagging and ended with `410 Expired`, as is a watch
//! from a resourceVersion older than the history; kubectl then lists again.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::api::status::ApiError;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use serde_json::Value;

use super::table::{self, Cell, Printer};

/// The kinds the hub watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Pods,
    Events,
    ConfigMaps,
    Secrets,
    Namespaces,
}

impl Kind {
    /// How a Table shows the kind.
    pub fn printer(self) -> Printer {
        match self {
            Kind::Pods => Printer::Pods,
            Kind::Events => Printer::Events,
            Kind::ConfigMaps => Printer::ConfigMaps,
            Kind::Secrets => Printer::Secrets,
            Kind::Namespaces => Printer::Namespaces,
        }
    }
}

/// One object as the hub holds it: its JSON as compact text (with its
/// resourceVersion) and what lists, Tables and lookups read of many
/// objects without parsing it (a Table row's cells, its namespace and
/// name). A pod held as a `Value` tree took 11 KiB (each JSON object a
/// B-tree node of some 600 bytes, however few its keys), as text 1.5 KiB;
/// the hub holds every object and the versions in its history, and
/// serves most reads by writing out the text as it is.
#[derive(Debug)]
pub struct Stored {
    pub rv: u64,
    pub namespace: Box<str>,
    pub name: Box<str>,
    json: Box<str>,
    /// Where the value of `metadata` lies in `json` (empty: none).
    meta: (u32, u32),
    /// `metadata.deletionTimestamp`.
    deletion: Option<Box<str>>,
    cells: Box<[Cell]>,
}

impl Stored {
    /// `obj` (of `kind`) at `rv`.
    pub fn new(kind: Kind, obj: Value, rv: u64) -> Stored {
        let obj = with_rv(obj, rv);
        let text = |p: &str| -> Box<str> { obj.pointer(p).and_then(Value::as_str).unwrap_or("").into() };
        let (json, meta) = compact(&obj);
        Stored {
            rv,
            namespace: text("/metadata/namespace"),
            name: text("/metadata/name"),
            deletion: obj.pointer("/metadata/deletionTimestamp").and_then(Value::as_str).map(Into::into),
            cells: table::row_cells(kind.printer(), &obj).into_boxed_slice(),
            json,
            meta,
        }
    }

    /// The object's JSON text.
    pub fn json(&self) -> &str {
        &self.json
    }

    /// The object, parsed.
    pub fn value(&self) -> Value {
        serde_json::from_str(&self.json).unwrap_or(Value::Null)
    }

    /// Its Table row: the cells and the metadata's JSON text.
    pub fn row(&self) -> (&[Cell], &str) {
        let (a, b) = (self.meta.0 as usize, self.meta.1 as usize);
        (&self.cells, if a < b { &self.json[a..b] } else { "{}" })
    }

    /// About what it takes in memory: its texts and cells.
    fn weight(&self) -> usize {
        let cells: usize = self
            .cells
            .iter()
            .map(|c| std::mem::size_of::<Cell>() + if let Cell::Text(t) = c { t.len() } else { 0 })
            .sum();
        std::mem::size_of::<Self>()
            + self.json.len()
            + self.namespace.len()
            + self.name.len()
            + self.deletion.as_ref().map_or(0, |d| d.len())
            + cells
    }

    /// In `ns` (None: any).
    pub fn in_namespace(&self, ns: Option<&str>) -> bool {
        ns.is_none_or(|ns| *self.namespace == *ns)
    }
}

/// `obj` as compact JSON text (as `serde_json::to_string` writes it), and
/// the range of its `metadata`'s value in it.
fn compact(obj: &Value) -> (Box<str>, (u32, u32)) {
    let Value::Object(m) = obj else { return (obj.to_string().into_boxed_str(), (0, 0)) };
    let mut out: Vec<u8> = Vec::with_capacity(2048);
    let mut meta = (0, 0);
    out.push(b'{');
    for (i, (k, v)) in m.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // writing JSON into a Vec cannot fail
        let _ = serde_json::to_writer(&mut out, k);
        out.push(b':');
        let start = out.len();
        let _ = serde_json::to_writer(&mut out, v);
        if k == "metadata" {
            meta = (start as u32, out.len() as u32);
        }
    }
    out.push(b'}');
    let text = String::from_utf8(out).unwrap_or_default();
    (text.into_boxed_str(), meta)
}

/// One object as collected: its kind, key (namespace/name) and JSON.
pub type Item = (Kind, String, Value);

/// What changed at the sources since the collector's last call: the
/// objects rebuilt (new ones and those whose source changed) and the keys
/// that went.
#[derive(Debug, Default)]
pub struct Delta {
    pub put: Vec<Item>,
    pub gone: Vec<(Kind, String)>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.put.is_empty() && self.gone.is_empty()
    }
}

/// What the hub collects from: the changes since its last call (the first
/// call: everything).
pub type Collect = Box<dyn FnMut() -> Delta + Send>;

/// What a collector last built of one kind: each key's fingerprint of its
/// source (a version, a pointer, a hash: whatever changes when the object
/// would), so that only objects whose source changed are rebuilt.
pub struct Tracker<F> {
    kind: Kind,
    seen: HashMap<String, F>,
    built: u64,
}

impl<F: PartialEq> Tracker<F> {
    pub fn new(kind: Kind) -> Self {
        Tracker { kind, seen: HashMap::new(), built: 0 }
    }

    /// `now`: every object of the kind now, as its key, fingerprint and
    /// what it is built from (a key given twice counts once: the first).
    /// Builds (with `build`) the new objects and those whose fingerprint
    /// changed, into `out`, and adds the keys not in `now` to `out.gone`.
    pub fn update<T>(
        &mut self,
        now: impl IntoIterator<Item = (String, F, T)>,
        mut build: impl FnMut(T) -> Value,
        out: &mut Delta,
    ) {
        let mut present: HashSet<String> = HashSet::with_capacity(self.seen.len());
        for (key, fp, src) in now {
            if present.contains(&key) {
                continue;
            }
            if self.seen.get(&key) != Some(&fp) {
                out.put.push((self.kind, key.clone(), build(src)));
                self.built += 1;
                self.seen.insert(key.clone(), fp);
            }
            present.insert(key);
        }
        let kind = self.kind;
        self.seen.retain(|k, _| {
            let keep = present.contains(k);
            if !keep {
                out.gone.push((kind, k.clone()));
            }
            keep
        });
    }

    /// Objects built so far.
    pub fn built(&self) -> u64 {
        self.built
    }

    /// The keys held now.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.seen.keys()
    }
}

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
    pub object: Arc<Stored>,
    /// The object before (MODIFIED).
    pub prev: Option<Arc<Stored>>,
}

/// Changes kept for watches that start from a resourceVersion.
pub const HISTORY: usize = 1024;
/// And the most their objects may weigh together. A change's object is
/// often the only copy of that version (the hub holds the newest), so a
/// history of 1,024 pod changes held some 3-5 MiB: most of a busy agent's
/// heap. 512 KiB keeps a few hundred changes (110 pods starting make about
/// 450); a watch resumed from further back is answered 410, as the API
/// server's watch cache answers one older than its window, and its client
/// lists again.
pub const HISTORY_BYTES: usize = 512 << 10;
/// Changes a watcher may have waiting before it is ended as too slow.
pub const WATCHER_BUFFER: usize = 256;
/// Watchers at once: each is a connection, and the server allows a third
/// more connections than this (`server::MAX_CONNS`) for everything else;
/// one more is answered 429 with Retry-After, as the API server does.
pub const MAX_WATCHERS: usize = 192;
/// How long the `kube-watch` thread lets a burst of changes gather before
/// it syncs (one sync for the burst).
pub const COALESCE: Duration = Duration::from_millis(5);

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
    items: HashMap<(Kind, String), Arc<Stored>>,
    history: VecDeque<Arc<Change>>,
    /// What the history's objects weigh ([`Stored::weight`]).
    history_bytes: usize,
    watchers: Vec<Watcher>,
}

impl State {
    /// The oldest resourceVersion a watch may start from.
    fn oldest(&self) -> u64 {
        self.history.front().map_or(self.rv, |c| c.rv - 1)
    }

    /// Record one sync's changes and hand them to the watchers. A watcher
    /// takes a sync's changes of its kind whole or not at all: one whose
    /// buffer has no room for them all is marked lagging (410 once it has
    /// read what its buffer holds), however fast it reads; so a burst
    /// larger than [`WATCHER_BUFFER`] ends every watcher of its kind,
    /// whoever wins the race between the hub and the watcher's thread.
    fn publish(&mut self, changes: Vec<Change>) {
        let changes: Vec<Arc<Change>> = changes.into_iter().map(Arc::new).collect();
        for c in &changes {
            self.history_bytes += c.object.weight();
            self.history.push_back(c.clone());
            while self.history.len() > HISTORY || (self.history_bytes > HISTORY_BYTES && self.history.len() > 1) {
                if let Some(old) = self.history.pop_front() {
                    self.history_bytes -= old.object.weight();
                }
            }
        }
        self.watchers.retain(|w| {
            if w.closed.load(Ordering::Relaxed) {
                return false;
            }
            let mut mine = changes.iter().filter(|c| c.kind == w.kind);
            let n = mine.clone().count();
            if n == 0 {
                return true;
            }
            // the hub is the only sender and sends under the state's
            // lock: the room seen here cannot shrink before the sends, so
            // a send fails only when the watch is gone
            if w.tx.len() + n > WATCHER_BUFFER {
                w.lagged.store(true, Ordering::SeqCst);
                return false;
            }
            mine.all(|c| w.tx.try_send(c.clone()).is_ok())
        });
    }
}

/// The hub (shared: an `Arc`).
pub struct Hub {
    state: Mutex<State>,
    /// The collector; its lock serializes syncs (collecting happens
    /// outside the state's lock).
    collect: Mutex<Collect>,
    stop: AtomicBool,
}

fn with_rv(mut v: Value, rv: u64) -> Value {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("resourceVersion".into(), Value::String(rv.to_string()));
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
            collect: Mutex::new(collect),
            stop: AtomicBool::new(false),
        })
    }

    /// Collect what changed and publish it. The changed objects are
    /// compared and built outside the state's lock (syncs are serialized
    /// by the collector's lock, and only a sync changes the objects or
    /// the version), then published at once: a list or watch sees all
    /// of a sync or none of it.
    pub fn sync(&self) {
        let mut collect = self.collect.lock();
        let delta = (*collect)();
        if delta.is_empty() {
            return;
        }
        let (mut rv, prevs, gone) = {
            let st = self.state.lock();
            let prevs: Vec<Option<Arc<Stored>>> =
                delta.put.iter().map(|(kind, key, _)| st.items.get(&(*kind, key.clone())).cloned()).collect();
            let gone: Vec<((Kind, String), Arc<Stored>)> =
                delta.gone.into_iter().filter_map(|k| st.items.get(&k).cloned().map(|o| (k, o))).collect();
            (st.rv, prevs, gone)
        };
        let mut changes = Vec::new();
        let mut put = Vec::new();
        for ((kind, key, mut obj), prev) in delta.put.into_iter().zip(prevs) {
            if let Some(old) = &prev {
                if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                    // a terminating pod's deletionTimestamp is made when
                    // shown: keep the first one
                    if let Some(t) = &old.deletion
                        && m.contains_key("deletionTimestamp")
                    {
                        m.insert("deletionTimestamp".into(), Value::from(&**t));
                    }
                    // with the version it holds, the same object is equal
                    m.insert("resourceVersion".into(), Value::String(old.rv.to_string()));
                }
                if compact(&obj).0 == old.json {
                    continue;
                }
            }
            rv += 1;
            let object = Arc::new(Stored::new(kind, obj, rv));
            put.push(((kind, key), object.clone()));
            let event = if prev.is_some() { EventType::Modified } else { EventType::Added };
            changes.push(Change { rv, kind, event, object, prev });
        }
        let mut removed = Vec::new();
        for (k, old) in gone {
            rv += 1;
            let object = Arc::new(Stored::new(k.0, old.value(), rv));
            changes.push(Change { rv, kind: k.0, event: EventType::Deleted, object, prev: Some(old) });
            removed.push(k);
        }
        if changes.is_empty() {
            return;
        }
        let mut st = self.state.lock();
        st.items.extend(put);
        for k in &removed {
            st.items.remove(k);
        }
        st.rv = rv;
        st.publish(changes);
    }

    /// The objects of `kind` now (after a sync) and the resourceVersion
    /// they are at.
    pub fn list(&self, kind: Kind) -> (u64, Vec<Arc<Stored>>) {
        self.sync();
        let st = self.state.lock();
        let mut items: Vec<(&String, &Arc<Stored>)> =
            st.items.iter().filter(|((k, _), _)| *k == kind).map(|((_, key), v)| (key, v)).collect();
        items.sort_by(|a, b| a.0.cmp(b.0));
        (st.rv, items.into_iter().map(|(_, v)| v.clone()).collect())
    }

    /// The object of `kind` named `name` in `ns` (None: any namespace)
    /// now (after a sync).
    pub fn find(&self, kind: Kind, ns: Option<&str>, name: &str) -> Option<Arc<Stored>> {
        self.sync();
        let st = self.state.lock();
        st.items.iter().find(|((k, _), o)| *k == kind && o.in_namespace(ns) && *o.name == *name).map(|(_, o)| o.clone())
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
                let mut items: Vec<(&String, &Arc<Stored>)> =
                    st.items.iter().filter(|((k, _), _)| *k == kind).map(|((_, key), v)| (key, v)).collect();
                items.sort_by(|a, b| a.0.cmp(b.0));
                items
                    .into_iter()
                    .map(|(_, v)| {
                        Arc::new(Change { rv: v.rv, kind, event: EventType::Added, object: v.clone(), prev: None })
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
        let first = st.watchers.is_empty();
        st.watchers.push(Watcher { kind, tx, lagged: lagged.clone(), closed: closed.clone() });
        drop(st);
        if first {
            // the `kube-watch` thread sleeps while nobody watches
            crate::base::changes::bump();
        }
        Ok(Subscription { backlog, rx, lagged, closed })
    }

    /// Watchers registered now.
    pub fn watchers(&self) -> usize {
        let mut st = self.state.lock();
        st.watchers.retain(|w| !w.closed.load(Ordering::Relaxed));
        st.watchers.len()
    }

    /// The `kube-watch` thread: while anyone watches, a sync [`COALESCE`]
    /// after a change and every second; with no watcher it sleeps until a
    /// change (the first watcher's included); ends with [`Hub::stop`].
    pub fn start(self: &Arc<Self>) -> std::io::Result<JoinHandle<()>> {
        let hub = self.clone();
        // read here, not on the new thread: a change made before that
        // thread first ran would otherwise count as seen, and wait a second
        let mut seen = crate::base::changes::current();
        crate::base::thread::spawn("kube-watch", Some(crate::base::thread::WORKER_STACK), move || {
            while !hub.stop.load(Ordering::SeqCst) {
                let idle = if hub.watchers() > 0 { Duration::from_secs(1) } else { Duration::from_secs(60) };
                seen = crate::base::changes::wait_past(seen, idle);
                if hub.stop.load(Ordering::SeqCst) {
                    break;
                }
                // without watchers nothing is collected here: a list or a
                // new watch syncs first, and numbers what changed since
                if hub.watchers() > 0 {
                    std::thread::sleep(COALESCE);
                    seen = crate::base::changes::current();
                    hub.sync();
                }
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

    /// A hub over a list of pods (the source) whose collector fingerprints
    /// each pod by its whole JSON; with the number of objects built.
    fn hub() -> (Arc<Hub>, Arc<Mutex<Vec<Item>>>, Arc<std::sync::atomic::AtomicU64>) {
        let data: Arc<Mutex<Vec<Item>>> = Arc::new(Mutex::new(Vec::new()));
        let built = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (d, b) = (data.clone(), built.clone());
        let mut pods = Tracker::new(Kind::Pods);
        let collect = move || {
            let mut out = Delta::default();
            let now: Vec<(String, Value, Value)> =
                d.lock().iter().map(|(_, k, v)| (k.clone(), v.clone(), v.clone())).collect();
            pods.update(now, |v| v, &mut out);
            b.store(pods.built(), Ordering::SeqCst);
            out
        };
        (Hub::new(Box::new(collect)), data, built)
    }

    fn pod(name: &str, phase: &str) -> Item {
        (Kind::Pods, format!("default/{name}"), json!({"metadata": {"name": name}, "status": {"phase": phase}}))
    }

    #[test]
    fn an_object_is_held_as_its_compact_json_with_its_rows_metadata_in_place() {
        let v = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "namespace": "ns", "labels": {"x": "y \"q\" \u{e9}"}},
            "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running"}});
        let o = Stored::new(Kind::Pods, v.clone(), 7);
        let mut want = v;
        want["metadata"]["resourceVersion"] = json!("7");
        assert_eq!(o.json(), serde_json::to_string(&want).unwrap());
        assert_eq!(o.value(), want);
        let (cells, meta) = o.row();
        assert_eq!(serde_json::from_str::<Value>(meta).unwrap(), want["metadata"]);
        assert_eq!((cells[0].value(), cells[2].value()), (json!("a"), json!("Running")));
        assert_eq!((&*o.namespace, &*o.name, o.rv), ("ns", "a", 7));
        assert!(o.in_namespace(Some("ns")) && o.in_namespace(None) && !o.in_namespace(Some("n")));
        assert_eq!(Stored::new(Kind::Events, json!({"kind": "Event"}), 1).row().1, "{}");
    }

    #[test]
    fn changes_are_numbered_and_watchers_get_them_from_their_version() {
        let (h, data, _) = hub();
        data.lock().push(pod("a", "Pending"));
        let (rv, items) = h.list(Kind::Pods);
        assert_eq!((rv, items.len()), (1, 1));
        assert_eq!(items[0].value()["metadata"]["resourceVersion"], "1");
        let w = h.watch(Kind::Pods, Some(rv)).unwrap();
        assert!(w.backlog.is_empty());
        data.lock()[0] = pod("a", "Running");
        h.sync();
        h.sync(); // nothing new: no change
        let Next::Change(c) = w.next(Duration::from_secs(1)) else { panic!("a change") };
        assert_eq!(
            (c.event, c.rv, c.object.value()["status"]["phase"].as_str()),
            (EventType::Modified, 2, Some("Running"))
        );
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
        let (h, data, _) = hub();
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

    #[test]
    fn the_history_holds_at_most_its_weight_of_objects() {
        let (h, data, _) = hub();
        let big = "x".repeat(64 << 10);
        let version = |i: usize| {
            let mut p = pod("a", &i.to_string());
            p.2["metadata"]["annotations"] = json!({"big": big});
            p
        };
        data.lock().push(version(0));
        h.sync();
        for i in 1..=20 {
            data.lock()[0] = version(i);
            h.sync();
        }
        let st = h.state.lock();
        let (n, bytes) = (st.history.len(), st.history_bytes);
        assert_eq!(bytes, st.history.iter().map(|c| c.object.weight()).sum::<usize>(), "kept in step");
        drop(st);
        assert!(bytes <= HISTORY_BYTES && n < 10, "{n} changes, {bytes} bytes");
        assert!(n >= HISTORY_BYTES / (70 << 10), "as many as fit: {n}");
        // a watch from before the oldest kept change is expired; one from
        // the newest version is served
        let e = h.watch(Kind::Pods, Some(2)).err().expect("too old");
        assert_eq!((e.code, e.reason), (410, "Expired"));
        assert!(h.watch(Kind::Pods, Some(21)).is_ok());
    }

    #[test]
    fn a_burst_larger_than_the_buffer_ends_even_a_watcher_that_keeps_up() {
        let (h, data, _) = hub();
        let fits = h.watch(Kind::Pods, None).unwrap();
        data.lock().extend((0..WATCHER_BUFFER).map(|i| pod(&format!("p{i}"), "Pending")));
        h.sync();
        let mut got = 0;
        while let Next::Change(_) = fits.next(Duration::from_millis(10)) {
            got += 1;
        }
        assert_eq!(got, WATCHER_BUFFER, "a sync that fits is delivered whole");
        // an empty buffer, and one change more than it holds in one sync
        let events = h.watch(Kind::Events, None).unwrap();
        data.lock().extend((0..=WATCHER_BUFFER).map(|i| pod(&format!("q{i}"), "Pending")));
        h.sync();
        assert!(matches!(fits.next(Duration::from_millis(10)), Next::Expired), "none of the burst, then the end");
        assert!(matches!(events.next(Duration::from_millis(10)), Next::Idle), "another kind's watcher goes on");
        assert_eq!(h.watchers(), 1);
        // the burst is in the history and the list at once
        let (rv, items) = h.list(Kind::Pods);
        assert_eq!((rv as usize, items.len()), (2 * WATCHER_BUFFER + 1, 2 * WATCHER_BUFFER + 1));
    }

    #[test]
    fn a_sync_rebuilds_only_what_changed_and_a_gone_object_is_deleted() {
        let (h, data, built) = hub();
        data.lock().extend((0..10).map(|i| pod(&format!("p{i}"), "Pending")));
        let w = h.watch(Kind::Pods, None).unwrap();
        assert_eq!((w.backlog.len(), built.load(Ordering::SeqCst)), (10, 10));
        let rv = h.resource_version();
        h.sync();
        let _ = h.list(Kind::Pods);
        assert_eq!(built.load(Ordering::SeqCst), 10, "nothing changed: nothing rebuilt");
        assert_eq!(h.resource_version(), rv);
        data.lock()[3] = pod("p3", "Running");
        h.sync();
        assert_eq!(built.load(Ordering::SeqCst), 11, "one pod changed: one rebuilt");
        let Next::Change(c) = w.next(Duration::from_secs(1)) else { panic!("a change") };
        assert_eq!((c.event, c.object.value()["metadata"]["name"].as_str()), (EventType::Modified, Some("p3")));
        assert_eq!(c.prev.as_ref().unwrap().value()["status"]["phase"], "Pending");
        data.lock().remove(5);
        h.sync();
        assert_eq!(built.load(Ordering::SeqCst), 11, "a removal rebuilds nothing");
        let Next::Change(c) = w.next(Duration::from_secs(1)) else { panic!("a change") };
        assert_eq!((c.event, c.object.value()["metadata"]["name"].as_str()), (EventType::Deleted, Some("p5")));
        assert_eq!(c.object.value()["metadata"]["resourceVersion"], (rv + 2).to_string());
        assert!(matches!(w.next(Duration::from_millis(10)), Next::Idle));
        assert_eq!(h.list(Kind::Pods).1.len(), 9);
    }

    #[test]
    fn a_rebuilt_object_equal_to_the_one_held_is_no_change() {
        // every call: the same pod again, as if its source was written
        // without a change
        let h = Hub::new(Box::new(|| Delta { put: vec![pod("a", "Running")], gone: vec![] }));
        let (rv, items) = h.list(Kind::Pods);
        assert_eq!((rv, items.len()), (1, 1));
        let w = h.watch(Kind::Pods, Some(rv)).unwrap();
        h.sync();
        assert_eq!(h.resource_version(), 1);
        assert!(matches!(w.next(Duration::from_millis(10)), Next::Idle));
    }

    #[test]
    fn the_watch_thread_sends_a_change_within_milliseconds() {
        let (h, data, _) = hub();
        data.lock().push(pod("a", "Pending"));
        let t = h.start().unwrap();
        let w = h.watch(Kind::Pods, Some(h.resource_version())).unwrap();
        data.lock()[0] = pod("a", "Running");
        let start = std::time::Instant::now();
        crate::base::changes::bump();
        let Next::Change(c) = w.next(Duration::from_secs(2)) else { panic!("a change") };
        assert_eq!(c.object.value()["status"]["phase"], "Running");
        assert!(start.elapsed() < Duration::from_millis(500), "{:?}: not woken by the change", start.elapsed());
        h.stop();
        t.join().unwrap();
    }
}

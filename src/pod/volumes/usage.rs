//! Disk-backed emptyDir usage: measured by housekeeping, bounded, and
//! reported (a gauge per volume, and a Warning event once a volume goes
//! over its `sizeLimit`). Nothing is evicted: enforcement comes with
//! eviction. `medium: Memory` volumes are tmpfs mounts sized by their limit
//! and are not measured here.
//!
//! The walk counts what `du` counts (allocated blocks, `st_blocks * 512`,
//! each hard-linked inode once), as the kubelet's `fs.DiskUsage` does: it
//! never follows a symlink, stays on the volume's filesystem, and opens
//! each directory relative to its parent's descriptor (`O_NOFOLLOW`), so a
//! container that swaps a directory for a symlink mid-walk cannot send it
//! elsewhere. It stops at a number of entries, a time and a depth, so a
//! container that creates millions of files cannot stall housekeeping; the
//! usage is then a lower bound.

use std::collections::{HashMap, HashSet};
use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::{self, Pod};
use crate::telemetry::events::{EventRecorder, EventType, ObjectRef};
use crate::telemetry::metrics::{EmptyDirUsage, Metrics};

/// Where one walk stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Entries (files, directories, links...) counted at most.
    pub entries: u64,
    /// Time spent at most.
    pub time: Duration,
    /// Directory levels below the volume descended at most (each open
    /// level holds one descriptor).
    pub depth: usize,
}

/// Housekeeping's caps for one volume.
pub const CAPS: Caps = Caps { entries: 200_000, time: Duration::from_millis(200), depth: 64 };

/// What one walk counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Allocated bytes (`st_blocks * 512`), hard links once.
    pub bytes: u64,
    /// Entries counted, the volume's directory included.
    pub entries: u64,
    /// False when a cap stopped the walk: `bytes` is then a lower bound.
    pub complete: bool,
}

fn cstring(name: &std::ffi::OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

const DIR_FLAGS: libc::c_int = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// The entries of the directory open as `fd`: read through
/// `/proc/self/fd/N`, which reopens that very directory (not a path a
/// container could swap); each entry is stat'ed relative to it without
/// following links (std's `DirEntry::metadata` is `fstatat(dirfd, name,
/// AT_SYMLINK_NOFOLLOW)`).
fn entries(fd: &OwnedFd) -> io::Result<std::fs::ReadDir> {
    use std::os::fd::AsRawFd;
    std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Measure the directory `dir` as `du` would, within `caps`.
pub fn measure(dir: &Path, caps: Caps) -> io::Result<Usage> {
    let started = Instant::now();
    let root = crate::sys::openat(None, &cstring(dir.as_os_str())?, DIR_FLAGS)?;
    let st = crate::sys::fstat(root.as_fd())?;
    let dev = st.st_dev;
    let mut usage = Usage { bytes: (st.st_blocks as u64).saturating_mul(512), entries: 1, complete: true };
    // inodes with more than one link, counted once
    let mut linked: HashSet<u64> = HashSet::new();
    // depth-first: each level holds its directory's descriptor and the
    // names of its subdirectories not yet walked
    let mut stack: Vec<(OwnedFd, Vec<OsString>)> = Vec::new();
    let mut current = Some(root);
    'walk: loop {
        if let Some(fd) = current.take() {
            let mut subdirs = Vec::new();
            let list = match entries(&fd) {
                Ok(l) => l,
                // gone or replaced meanwhile: nothing to count
                Err(_) => continue 'walk,
            };
            for e in list {
                let Ok(e) = e else { continue };
                let Ok(md) = e.metadata() else { continue }; // removed meanwhile
                if md.dev() != dev {
                    continue; // another filesystem mounted inside: not this volume's
                }
                usage.entries += 1;
                if md.nlink() <= 1 || md.is_dir() || linked.insert(md.ino()) {
                    usage.bytes = usage.bytes.saturating_add(md.blocks().saturating_mul(512));
                }
                if md.is_dir() {
                    subdirs.push(e.file_name());
                }
                if usage.entries >= caps.entries
                    || (usage.entries.is_multiple_of(256) && started.elapsed() >= caps.time)
                {
                    usage.complete = false;
                    break 'walk;
                }
            }
            if stack.len() >= caps.depth {
                if !subdirs.is_empty() {
                    usage.complete = false;
                }
                continue 'walk;
            }
            stack.push((fd, subdirs));
        }
        // the next subdirectory to walk, from the deepest level that has one
        loop {
            let Some((fd, pending)) = stack.last_mut() else { break 'walk };
            let Some(name) = pending.pop() else {
                stack.pop();
                continue;
            };
            let Ok(c) = cstring(&name) else { continue };
            // a directory swapped for a symlink since it was listed fails
            // here (O_NOFOLLOW) and is skipped
            if let Ok(child) = crate::sys::openat(Some(fd.as_fd()), &c, DIR_FLAGS) {
                current = Some(child);
                break;
            }
        }
        if started.elapsed() >= caps.time {
            usage.complete = false;
            break;
        }
    }
    Ok(usage)
}

/// `<rootDir>/pods/<uid>/volumes/kubernetes.io~empty-dir/<volume>`, the
/// kubelet's layout (where `sync` makes the volume).
pub fn empty_dir_path(root_dir: &Path, uid: &str, volume: &str) -> PathBuf {
    root_dir.join("pods").join(uid).join("volumes/kubernetes.io~empty-dir").join(volume)
}

/// The event reason for a volume over its `sizeLimit`. Not the kubelet's
/// `Evicted`: nothing is evicted.
pub const REASON_OVER_LIMIT: &str = "EmptyDirSizeLimitExceeded";

/// The event message: the kubelet eviction manager's text for an emptyDir
/// over its limit, then what podwarden does about it.
pub fn over_limit_message(volume: &str, limit: &str) -> String {
    format!(
        "Usage of EmptyDir volume {volume:?} exceeds the limit {limit:?}. \
         The pod was not evicted: podwarden measures and reports disk-backed emptyDir usage, it does not enforce sizeLimit yet."
    )
}

/// A disk-backed emptyDir of a pod: the pod, the volume's name, its limit
/// (as written, in bytes).
type Volume<'a> = (&'a Arc<Pod>, &'a str, Option<(&'a str, i64)>);

struct Tracked {
    measured: Instant,
    usage: Usage,
    /// Over its limit at the last measure (the event was sent).
    over: bool,
    /// A capped walk was logged.
    capped_logged: bool,
}

/// Housekeeping's emptyDir usage: when each volume was last measured and
/// whether it is over its limit.
pub struct EmptyDirs {
    root_dir: PathBuf,
    /// Each volume is measured at most this often.
    interval: Duration,
    /// One pass measures volumes for at most this long; the others wait
    /// for the next pass (oldest first).
    pass_budget: Duration,
    caps: Caps,
    tracked: HashMap<(String, String), Tracked>,
}

impl EmptyDirs {
    /// Measure each volume at most every 10 s, within [`CAPS`], 300 ms per
    /// pass.
    pub fn new(root_dir: PathBuf) -> Self {
        Self::with(root_dir, Duration::from_secs(10), Duration::from_millis(300), CAPS)
    }

    pub fn with(root_dir: PathBuf, interval: Duration, pass_budget: Duration, caps: Caps) -> Self {
        EmptyDirs { root_dir, interval, pass_budget, caps, tracked: HashMap::new() }
    }

    /// A pass that measures every volume, however recently it was (the
    /// pass's time budget and the walks' caps still hold).
    pub fn pass_now(&mut self, pods: &[Arc<Pod>], events: &EventRecorder, metrics: &Metrics) {
        let interval = std::mem::replace(&mut self.interval, Duration::ZERO);
        self.pass(pods, events, metrics);
        self.interval = interval;
    }

    /// One pass over `pods` (the admitted ones): measure the disk-backed
    /// emptyDirs that are due and exist, send the over-limit event on the
    /// way over (once, again only after it went back under), and replace
    /// the metrics' gauges with every volume known.
    pub fn pass(&mut self, pods: &[Arc<Pod>], events: &EventRecorder, metrics: &Metrics) {
        let started = Instant::now();
        let mut volumes: Vec<Volume<'_>> = Vec::new();
        for pod in pods {
            for v in model::spec(pod).and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
                let Some(ed) = &v.empty_dir else { continue };
                if !ed.medium.as_deref().unwrap_or("").is_empty() {
                    continue;
                }
                let limit = ed
                    .size_limit
                    .as_ref()
                    .and_then(|q| crate::model::quantity::bytes(&q.0).ok().map(|b| (q.0.as_str(), b)))
                    .filter(|(_, b)| *b > 0);
                volumes.push((pod, v.name.as_str(), limit));
            }
        }
        let keep: HashSet<(String, String)> =
            volumes.iter().map(|(p, v, _)| (model::uid(p).to_string(), v.to_string())).collect();
        self.tracked.retain(|k, _| keep.contains(k));
        // the least recently measured first (never measured: first of all)
        volumes
            .sort_by_key(|(p, v, _)| self.tracked.get(&(model::uid(p).to_string(), v.to_string())).map(|t| t.measured));
        let mut gauges = Vec::new();
        for (pod, volume, limit) in volumes {
            let key = (model::uid(pod).to_string(), volume.to_string());
            let due = self.tracked.get(&key).is_none_or(|t| t.measured.elapsed() >= self.interval);
            if due && started.elapsed() < self.pass_budget {
                let dir = empty_dir_path(&self.root_dir, &key.0, volume);
                match measure(&dir, self.caps) {
                    Ok(usage) => {
                        let t = self.tracked.entry(key.clone()).or_insert(Tracked {
                            measured: Instant::now(),
                            usage,
                            over: false,
                            capped_logged: false,
                        });
                        t.measured = Instant::now();
                        t.usage = usage;
                        if !usage.complete && !t.capped_logged {
                            t.capped_logged = true;
                            log::warn!(
                                "pod {}: emptyDir {volume:?}: measuring stopped after {} entries (caps: {} entries, {} ms); \
                                 its usage ({} bytes) is a lower bound",
                                model::pod_ref(pod),
                                usage.entries,
                                self.caps.entries,
                                self.caps.time.as_millis(),
                                usage.bytes
                            );
                        }
                        let over = limit.is_some_and(|(_, b)| usage.bytes > b as u64);
                        if over && !t.over {
                            let (written, _) = limit.unwrap_or_default();
                            events.event(
                                &ObjectRef::pod(pod),
                                EventType::Warning,
                                REASON_OVER_LIMIT,
                                &over_limit_message(volume, written),
                            );
                        }
                        t.over = over;
                    }
                    // not made yet, or removed: nothing to report
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        self.tracked.remove(&key);
                    }
                    Err(e) => {
                        log::debug!("pod {}: emptyDir {volume:?}: cannot measure: {e}", model::pod_ref(pod));
                    }
                }
            }
            if let Some(t) = self.tracked.get(&key) {
                gauges.push(EmptyDirUsage {
                    namespace: model::namespace(pod).to_string(),
                    pod: model::name(pod).to_string(),
                    volume: volume.to_string(),
                    used_bytes: t.usage.bytes,
                    used_inodes: t.usage.entries,
                    limit_bytes: limit.map(|(_, b)| b as u64),
                });
            }
        }
        metrics.set_empty_dirs(gauges);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("podwarden-usage-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn allocated(p: &Path) -> u64 {
        std::fs::symlink_metadata(p).unwrap().blocks() * 512
    }

    #[test]
    fn counts_allocated_blocks_of_files_and_directories_like_du() {
        let d = temp("du");
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        std::fs::write(d.join("a/one"), vec![7u8; 100_000]).unwrap();
        std::fs::write(d.join("a/b/two"), vec![7u8; 10_000]).unwrap();
        // a sparse file: its length is not what it holds
        let f = std::fs::File::create(d.join("sparse")).unwrap();
        f.set_len(1 << 30).unwrap();
        // a hard link counts once
        std::fs::hard_link(d.join("a/one"), d.join("one-again")).unwrap();
        let u = measure(&d, CAPS).unwrap();
        let expect: u64 = ["", "a", "a/b", "a/one", "a/b/two", "sparse"].iter().map(|p| allocated(&d.join(p))).sum();
        assert_eq!(u, Usage { bytes: expect, entries: 7, complete: true });
        assert!(u.bytes >= 110_000 && u.bytes < 1 << 20, "{u:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn symlinks_are_counted_not_followed() {
        let d = temp("links");
        let outside = temp("links-outside");
        std::fs::write(outside.join("big"), vec![1u8; 1 << 20]).unwrap();
        std::os::unix::fs::symlink(&outside, d.join("dir-link")).unwrap();
        std::os::unix::fs::symlink(outside.join("big"), d.join("file-link")).unwrap();
        std::os::unix::fs::symlink("/", d.join("root-link")).unwrap();
        let u = measure(&d, CAPS).unwrap();
        let expect: u64 = ["", "dir-link", "file-link", "root-link"].iter().map(|p| allocated(&d.join(p))).sum();
        assert_eq!(u, Usage { bytes: expect, entries: 4, complete: true });
        assert!(u.bytes < 1 << 20, "the linked megabyte is not counted: {u:?}");
        // the volume itself must not be a symlink either
        std::os::unix::fs::symlink(&outside, d.join("v")).unwrap();
        let e = measure(&d.join("v"), CAPS).unwrap_err();
        assert!(matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_dir_all(&outside).unwrap();
    }

    #[test]
    fn the_walk_stops_at_its_caps() {
        let d = temp("caps");
        for i in 0..50 {
            std::fs::write(d.join(format!("f{i}")), b"x").unwrap();
        }
        let u = measure(&d, Caps { entries: 20, ..CAPS }).unwrap();
        assert_eq!((u.entries, u.complete), (20, false));
        // depth: a chain deeper than the cap is not descended
        let mut deep = d.join("deep");
        for _ in 0..10 {
            deep = deep.join("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("bottom"), vec![1u8; 100_000]).unwrap();
        let shallow = measure(&d, Caps { depth: 3, ..CAPS }).unwrap();
        assert!(!shallow.complete);
        let full = measure(&d, CAPS).unwrap();
        assert!(full.complete);
        assert_eq!(full.entries, 1 + 50 + 11 + 1);
        assert!(full.bytes >= shallow.bytes + 100_000, "{full:?} {shallow:?}");
        // time: a zero budget stops at the first check
        let timed = measure(&d, Caps { time: Duration::ZERO, ..CAPS }).unwrap();
        assert!(!timed.complete);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_million_files_cost_no_more_than_the_caps() {
        // 20,000 files with a 5,000-entry cap: stops there, quickly
        let d = temp("many");
        for i in 0..20_000 {
            std::fs::File::create(d.join(format!("{i}"))).unwrap();
        }
        let t = Instant::now();
        let u = measure(&d, Caps { entries: 5_000, ..CAPS }).unwrap();
        assert_eq!((u.entries, u.complete), (5_000, false));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn pod_with(volumes: &str) -> Arc<Pod> {
        let yaml = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: ns\n  uid: u1\nspec:\n  containers:\n  - name: c\n    image: i\n  volumes:\n{volumes}"
        );
        Arc::new(crate::model::manifest::parse("p.yaml", yaml.as_bytes(), "n").unwrap())
    }

    #[test]
    fn a_pass_now_measures_what_the_interval_would_skip() {
        let root = temp("now");
        let pod = pod_with("  - {name: free, emptyDir: {}}\n");
        let dir = empty_dir_path(&root, "u1", "free");
        std::fs::create_dir_all(&dir).unwrap();
        let (events, metrics) = (EventRecorder::new(16), Metrics::new());
        let mut t = EmptyDirs::with(root.clone(), Duration::from_secs(3600), Duration::from_secs(5), CAPS);
        let used = |m: &Metrics| m.empty_dirs().iter().find(|u| u.volume == "free").unwrap().used_bytes;
        t.pass(std::slice::from_ref(&pod), &events, &metrics);
        let empty = used(&metrics);
        std::fs::write(dir.join("fill"), vec![1u8; 300_000]).unwrap();
        t.pass(std::slice::from_ref(&pod), &events, &metrics);
        assert_eq!(used(&metrics), empty, "not due: the old size");
        t.pass_now(std::slice::from_ref(&pod), &events, &metrics);
        assert!(used(&metrics) >= 300_000, "measured now: {}", used(&metrics));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn over_the_limit_sends_one_event_per_crossing_and_the_gauges_follow() {
        let root = temp("tracker");
        let pod = pod_with(
            "  - {name: small, emptyDir: {sizeLimit: 64Ki}}\n  - {name: free, emptyDir: {}}\n  - {name: mem, emptyDir: {medium: Memory, sizeLimit: 1Mi}}\n",
        );
        let small = empty_dir_path(&root, "u1", "small");
        std::fs::create_dir_all(&small).unwrap();
        std::fs::create_dir_all(empty_dir_path(&root, "u1", "free")).unwrap();
        std::fs::create_dir_all(empty_dir_path(&root, "u1", "mem")).unwrap();
        let events = EventRecorder::new(16);
        let metrics = Metrics::new();
        let mut t = EmptyDirs::with(root.clone(), Duration::ZERO, Duration::from_secs(5), CAPS);
        let over_events = |events: &EventRecorder| {
            events.list().into_iter().filter(|e| e.reason == REASON_OVER_LIMIT).collect::<Vec<_>>()
        };
        t.pass(std::slice::from_ref(&pod), &events, &metrics);
        assert!(over_events(&events).is_empty());
        let g = metrics.empty_dirs();
        let names: Vec<_> = g.iter().map(|u| (u.volume.as_str(), u.limit_bytes)).collect();
        assert_eq!(names, [("small", Some(65536)), ("free", None)], "Memory volumes are not measured");
        std::fs::write(small.join("fill"), vec![1u8; 200_000]).unwrap();
        t.pass(std::slice::from_ref(&pod), &events, &metrics);
        t.pass(std::slice::from_ref(&pod), &events, &metrics);
        let ev = over_events(&events);
        assert_eq!((ev.len(), ev[0].count), (1, 1), "{ev:?}");
        assert_eq!(ev[0].event_type, EventType::Warning);
        assert!(
            ev[0].message.starts_with("Usage of EmptyDir volume \"small\" exceeds the limit \"64Ki\". "),
            "{}",
            ev[0].message
        );
        let used = metrics.empty_dirs().iter().find(|u| u.volume == "small").unwrap().used_bytes;
        assert!(used >= 200_000, "{used}");
        // back under, then over again: a second event
        std::fs::remove_file(small.join("fill")).unwrap();
        t.pass(std::slice::from_ref(&pod), &events, &metrics);
        std::fs::write(small.join("fill"), vec![1u8; 200_000]).unwrap();
        t.pass(std::slice::from_ref(&pod), &events, &metrics);
        // (the recorder counts a repeat of its newest event)
        assert_eq!(over_events(&events).iter().map(|e| e.count).sum::<u32>(), 2);
        // the pod gone: its gauges go
        t.pass(&[], &events, &metrics);
        assert!(metrics.empty_dirs().is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }
}

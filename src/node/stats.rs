//! Resource stats, as the kubelet's Summary API and `/metrics/resource`
//! give them: pods and containers from the runtime (CRI
//! `ListPodSandboxStats`; where the runtime lacks it, the sum of
//! `ListContainerStats`), the node from the kernel (`/proc/stat`,
//! `/proc/meminfo`, `/proc/loadavg`, `pid_max`), filesystems from
//! `statvfs` (`rootDir` as nodefs, the runtime's image filesystem as
//! imagefs), log files from their allocated blocks, emptyDir volumes from
//! the housekeeping walk (`sync::usage`).
//!
//! [`Collector::collect`] takes one snapshot (CPU rates from the previous
//! one); the `eviction` thread takes one every monitoring period and the
//! HTTP handlers, the API and eviction read the last one.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::base::unix_now_ns as now_ns;
use crate::runtime::{CallCtx, ContainerState, Runtime, RuntimeError, Usage};

/// CPU time used and its rate since the previous snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cpu {
    pub usage_core_nanos: u64,
    pub usage_nano_cores: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    pub working_set_bytes: u64,
    pub usage_bytes: u64,
    pub rss_bytes: u64,
    /// Only for the node (and containers with a limit, not tracked).
    pub available_bytes: Option<u64>,
    pub page_faults: u64,
    pub major_page_faults: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fs {
    pub capacity_bytes: u64,
    pub available_bytes: u64,
    pub used_bytes: u64,
    pub inodes: u64,
    pub inodes_free: u64,
    pub inodes_used: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerStat {
    pub name: String,
    pub start_time_ns: i64,
    pub cpu: Cpu,
    pub memory: Memory,
    /// Its writable layer.
    pub rootfs_used_bytes: u64,
    /// Its log files (every instance's).
    pub logs_used_bytes: u64,
    /// Inodes of its writable layer and of its log files.
    pub rootfs_inodes_used: u64,
    pub logs_inodes_used: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodStat {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub start_time_ns: i64,
    pub cpu: Cpu,
    pub memory: Memory,
    pub containers: Vec<ContainerStat>,
    /// Disk-backed emptyDir volumes: (name, used bytes).
    pub volumes: Vec<(String, u64)>,
    /// Containers' writable layers and logs, and disk-backed emptyDirs.
    pub ephemeral_used_bytes: u64,
    /// The inodes of the same (ranks pods under inode pressure).
    pub ephemeral_inodes_used: u64,
    pub processes: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeStat {
    pub cpu: Cpu,
    pub memory: Memory,
    /// `rootDir`'s filesystem.
    pub fs: Fs,
    /// The runtime's image filesystem (`None`: not reported).
    pub image_fs: Option<Fs>,
    pub max_pid: u64,
    pub processes: u64,
    /// The pods' cgroup (`kubepods`): its memory limit and working set.
    pub allocatable_memory: Option<(u64, u64)>,
}

/// One snapshot.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub time: SystemTime,
    pub node: NodeStat,
    pub pods: Vec<PodStat>,
}

/// Takes snapshots; keeps the last.
pub struct Collector {
    runtime: Arc<dyn Runtime>,
    root_dir: PathBuf,
    pod_logs_dir: PathBuf,
    timeout: Duration,
    metrics: Option<Arc<crate::telemetry::metrics::Metrics>>,
    /// Cumulative CPU by key (container ID, `pod:<uid>`, `node`) at the
    /// previous snapshot, and when.
    previous: Mutex<HashMap<String, (u64, i64)>>,
    last: Mutex<Option<Arc<Snapshot>>>,
    /// The runtime answered `Unimplemented` to `ListPodSandboxStats`.
    no_sandbox_stats: std::sync::atomic::AtomicBool,
    /// The runtime's last `ImageFsInfo` answer (when, the mountpoint, the
    /// bytes its images use), reused for [`IMAGE_FS_INFO_TTL`].
    image_fs_info: Mutex<Option<(Instant, String, u64)>>,
    /// The pod cgroups, for `kubepods`' memory.
    cgroups: Option<crate::node::cgroups::Cgroups>,
    /// The relist's newest list, reused when fresh.
    pod_cache: Option<Arc<crate::runtime::cache::PodCache>>,
}

/// `statvfs` of `path` as filesystem stats with `used` as given (or
/// capacity minus free when `None`).
pub fn fs_of(path: &Path, used: Option<u64>) -> Option<Fs> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    let v = crate::sys::statvfs(&c).ok()?;
    let f = v.frsize;
    let capacity = v.blocks.saturating_mul(f);
    let available = v.bavail.saturating_mul(f);
    Some(Fs {
        capacity_bytes: capacity,
        available_bytes: available,
        used_bytes: used.unwrap_or_else(|| capacity.saturating_sub(v.bfree.saturating_mul(f))),
        inodes: v.files,
        inodes_free: v.ffree,
        inodes_used: v.files.saturating_sub(v.ffree),
    })
}

/// The node's CPU time (all CPUs, nanoseconds) from `/proc/stat`.
fn node_cpu_nanos() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/stat") else { return 0 };
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else { return 0 };
    // user nice system idle iowait irq softirq steal: all but idle and iowait
    let f: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let busy: u64 = f.iter().enumerate().filter(|(i, _)| *i != 3 && *i != 4 && *i < 8).map(|(_, v)| v).sum();
    let hz = crate::sys::clock_ticks_per_second().max(1) as u64;
    busy.saturating_mul(1_000_000_000 / hz)
}

/// The node's memory from `/proc/meminfo`: usage (total minus free),
/// working set (usage minus inactive file pages), RSS (anonymous pages),
/// available (total minus working set), as the kubelet computes
/// `memory.available`.
pub fn node_memory() -> Memory {
    let Ok(text) = std::fs::read_to_string("/proc/meminfo") else { return Memory::default() };
    let kib = |key: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    let total = kib("MemTotal:");
    let usage = total.saturating_sub(kib("MemFree:"));
    let working_set = usage.saturating_sub(kib("Inactive(file):"));
    Memory {
        working_set_bytes: working_set,
        usage_bytes: usage,
        rss_bytes: kib("AnonPages:"),
        available_bytes: Some(total.saturating_sub(working_set)),
        page_faults: 0,
        major_page_faults: 0,
    }
}

/// How long the runtime's `ImageFsInfo` answer (where the images are, and
/// the bytes they use: a figure for the stats, not for eviction, which
/// reads the filesystem's free space itself every pass) stands.
const IMAGE_FS_INFO_TTL: Duration = Duration::from_secs(30);

/// (pid_max, the number of processes and threads now).
fn pids() -> (u64, u64) {
    let max = std::fs::read_to_string("/proc/sys/kernel/pid_max").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    let cur = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().nth(3)?.split_once('/')?.1.parse().ok())
        .unwrap_or(0);
    (max, cur)
}

/// Allocated bytes and number of the regular files directly in `dir`.
fn files_usage(dir: &Path) -> (u64, u64) {
    let Ok(entries) = std::fs::read_dir(dir) else { return (0, 0) };
    entries
        .flatten()
        .take(10_000)
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .fold((0, 0), |(b, n), m| (b + m.blocks() * 512, n + 1))
}

fn memory_of(u: &Usage) -> Memory {
    Memory {
        working_set_bytes: u.memory_working_set_bytes.unwrap_or(0),
        usage_bytes: u.memory_usage_bytes.unwrap_or(0),
        rss_bytes: u.memory_rss_bytes.unwrap_or(0),
        available_bytes: None,
        page_faults: u.page_faults.unwrap_or(0),
        major_page_faults: u.major_page_faults.unwrap_or(0),
    }
}

impl Collector {
    pub fn new(runtime: Arc<dyn Runtime>, root_dir: &Path, pod_logs_dir: &Path, timeout: Duration) -> Self {
        Collector {
            runtime,
            root_dir: root_dir.to_path_buf(),
            pod_logs_dir: pod_logs_dir.to_path_buf(),
            timeout,
            metrics: None,
            previous: Mutex::new(HashMap::new()),
            last: Mutex::new(None),
            no_sandbox_stats: std::sync::atomic::AtomicBool::new(false),
            image_fs_info: Mutex::new(None),
            cgroups: None,
            pod_cache: None,
        }
    }

    /// Take the pods from the relist's list in `cache` when it is younger
    /// than [`crate::runtime::cache::FRESH`].
    pub fn with_pod_cache(mut self, cache: Arc<crate::runtime::cache::PodCache>) -> Self {
        self.pod_cache = Some(cache);
        self
    }

    /// Read `kubepods`' memory from these cgroups.
    pub fn with_cgroups(mut self, cgroups: Option<crate::node::cgroups::Cgroups>) -> Self {
        self.cgroups = cgroups;
        self
    }

    /// Take emptyDir usage from these metrics (the housekeeping walk's).
    pub fn with_metrics(mut self, metrics: Arc<crate::telemetry::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The last snapshot.
    pub fn last(&self) -> Option<Arc<Snapshot>> {
        self.last.lock().clone()
    }

    /// The rate of `key`'s cumulative CPU `nanos` at `at_ns` since the
    /// previous snapshot (nanocores), recording this one in `next`.
    fn rate(&self, next: &mut HashMap<String, (u64, i64)>, key: String, nanos: u64, at_ns: i64) -> Cpu {
        let prev = self.previous.lock().get(&key).copied();
        next.insert(key, (nanos, at_ns));
        let usage_nano_cores = prev.and_then(|(n, t)| {
            let dt = at_ns.checked_sub(t).filter(|d| *d > 0)?;
            Some((nanos.checked_sub(n)? as u128 * 1_000_000_000 / dt as u128) as u64)
        });
        Cpu { usage_core_nanos: nanos, usage_nano_cores }
    }

    /// The node's filesystems measured now: `rootDir`'s and the runtime's
    /// image filesystem (`None`: the runtime does not name one).
    /// The runtime is asked where its images are (and how much they
    /// use) at most every [`IMAGE_FS_INFO_TTL`]; the filesystem's free
    /// space and inodes are read every time.
    pub fn filesystems(&self) -> (Fs, Option<Fs>) {
        let known = self.image_fs_info.lock().clone().filter(|(at, _, _)| at.elapsed() < IMAGE_FS_INFO_TTL);
        let info = known.map(|(_, m, u)| (m, u)).or_else(|| {
            let fs = self.runtime.image_fs_info(&CallCtx::background(self.timeout)).ok()?;
            let f = fs.into_iter().next()?;
            *self.image_fs_info.lock() = Some((Instant::now(), f.mountpoint.clone(), f.used_bytes));
            Some((f.mountpoint, f.used_bytes))
        });
        let image_fs = info.and_then(|(mountpoint, used)| fs_of(Path::new(&mountpoint), Some(used)));
        (fs_of(&self.root_dir, None).unwrap_or_default(), image_fs)
    }

    /// The node's own figures measured now, without the pods' (no rate
    /// for its CPU, and not kept as the last snapshot): what the eviction
    /// manager observes between two snapshots. One runtime call
    /// (`ImageFsInfo`) at most.
    pub fn node(&self) -> NodeStat {
        let (max_pid, processes) = pids();
        let (fs, image_fs) = self.filesystems();
        NodeStat {
            cpu: Cpu { usage_core_nanos: node_cpu_nanos(), usage_nano_cores: None },
            memory: node_memory(),
            fs,
            image_fs,
            max_pid,
            processes,
            allocatable_memory: self.cgroups.as_ref().and_then(|c| c.kubepods_memory()),
        }
    }

    /// Take a snapshot now.
    pub fn collect(&self) -> Result<Arc<Snapshot>, RuntimeError> {
        let ctx = CallCtx::background(self.timeout);
        // the relist's list (every second) when it is fresh: one list fewer
        let pods = match self.pod_cache.as_ref().and_then(|c| c.recent(crate::runtime::cache::FRESH)) {
            Some(p) => p,
            None => Arc::new(self.runtime.list_pods(&ctx)?),
        };
        // no pod, nothing to measure: no call (an idle node's stats pass
        // costs no runtime round trip)
        let no_pods = pods.iter().all(|p| p.sandboxes.is_empty() && p.containers.is_empty());
        let sandboxes = if no_pods {
            Some(Vec::new())
        } else if self.no_sandbox_stats.load(std::sync::atomic::Ordering::Relaxed) {
            None
        } else {
            match self.runtime.list_sandbox_stats(&ctx) {
                Ok(s) => Some(s),
                Err(RuntimeError::Unimplemented { .. }) => {
                    self.no_sandbox_stats.store(true, std::sync::atomic::Ordering::Relaxed);
                    None
                }
                // containerd 1.6 fails the whole list while one sandbox is
                // being stopped ("not in ready state"): this snapshot sums
                // the containers' stats instead of having none
                Err(e) => {
                    log::debug!("stats: {e}; the containers' stats instead");
                    None
                }
            }
        };
        let listed;
        let containers: Vec<&crate::runtime::ContainerStats> = match &sandboxes {
            Some(s) => s.iter().flat_map(|s| &s.containers).collect(),
            None => {
                listed = self.runtime.list_container_stats(&ctx)?;
                listed.iter().collect()
            }
        };
        let empty_dirs = self.metrics.as_ref().map(|m| m.empty_dirs()).unwrap_or_default();
        let mut next = HashMap::new();
        let mut out = Vec::new();
        for p in pods.iter().filter(|p| p.sandboxes.iter().any(|s| s.ready)) {
            let log_dir = self.pod_logs_dir.join(crate::logs::reader::pod_dir_name(&p.namespace, &p.name, &p.uid));
            let mut cs = Vec::new();
            for c in p.containers.iter().filter(|c| c.state == ContainerState::Running) {
                let st = containers.iter().find(|s| s.id == c.id);
                let u = st.map(|s| s.usage).unwrap_or_default();
                let (logs_bytes, logs_files) = files_usage(&log_dir.join(&c.name));
                let at = if u.timestamp_ns > 0 { u.timestamp_ns } else { now_ns() };
                cs.push(ContainerStat {
                    name: c.name.clone(),
                    start_time_ns: c.started_at_ns,
                    cpu: self.rate(&mut next, c.id.clone(), u.cpu_core_nanos.unwrap_or(0), at),
                    memory: memory_of(&u),
                    rootfs_used_bytes: st.and_then(|s| s.rootfs_bytes).unwrap_or(0),
                    logs_used_bytes: logs_bytes,
                    rootfs_inodes_used: st.and_then(|s| s.rootfs_inodes).unwrap_or(0),
                    logs_inodes_used: logs_files,
                });
            }
            let sb = sandboxes.as_ref().and_then(|s| s.iter().find(|s| s.pod_uid == p.uid && s.usage.timestamp_ns > 0));
            let (cpu_nanos, memory, processes, at) = match sb {
                Some(s) => {
                    (s.usage.cpu_core_nanos.unwrap_or(0), memory_of(&s.usage), s.processes, s.usage.timestamp_ns)
                }
                None => {
                    let mut m = Memory::default();
                    for c in &cs {
                        m.working_set_bytes += c.memory.working_set_bytes;
                        m.usage_bytes += c.memory.usage_bytes;
                        m.rss_bytes += c.memory.rss_bytes;
                        m.page_faults += c.memory.page_faults;
                        m.major_page_faults += c.memory.major_page_faults;
                    }
                    (cs.iter().map(|c| c.cpu.usage_core_nanos).sum(), m, None, now_ns())
                }
            };
            let own: Vec<_> = empty_dirs.iter().filter(|e| e.namespace == p.namespace && e.pod == p.name).collect();
            let volumes: Vec<(String, u64)> = own.iter().map(|e| (e.volume.clone(), e.used_bytes)).collect();
            let inodes = cs.iter().map(|c| c.rootfs_inodes_used + c.logs_inodes_used).sum::<u64>()
                + own.iter().map(|e| e.used_inodes).sum::<u64>();
            let ephemeral = cs.iter().map(|c| c.rootfs_used_bytes + c.logs_used_bytes).sum::<u64>()
                + volumes.iter().map(|(_, b)| b).sum::<u64>();
            out.push(PodStat {
                uid: p.uid.clone(),
                name: p.name.clone(),
                namespace: p.namespace.clone(),
                start_time_ns: p.sandboxes.iter().filter(|s| s.ready).map(|s| s.created_at_ns).max().unwrap_or(0),
                cpu: self.rate(&mut next, format!("pod:{}", p.uid), cpu_nanos, at),
                memory,
                containers: cs,
                volumes,
                ephemeral_used_bytes: ephemeral,
                ephemeral_inodes_used: inodes,
                processes,
            });
        }
        let mut node = self.node();
        node.cpu = self.rate(&mut next, "node".into(), node.cpu.usage_core_nanos, now_ns());
        *self.previous.lock() = next;
        let snap = Arc::new(Snapshot { time: SystemTime::now(), node, pods: out });
        *self.last.lock() = Some(snap.clone());
        Ok(snap)
    }
}

fn time_of(ns: i64) -> Value {
    crate::model::time_from_unix_nanos(ns).map_or(Value::Null, |t| json!(t.0.to_string()))
}

fn cpu_json(c: &Cpu, time: &Value) -> Value {
    let mut v = json!({"time": time, "usageCoreNanoSeconds": c.usage_core_nanos});
    if let Some(n) = c.usage_nano_cores {
        v["usageNanoCores"] = json!(n);
    }
    v
}

fn memory_json(m: &Memory, time: &Value) -> Value {
    let mut v = json!({
        "time": time,
        "usageBytes": m.usage_bytes,
        "workingSetBytes": m.working_set_bytes,
        "rssBytes": m.rss_bytes,
        "pageFaults": m.page_faults,
        "majorPageFaults": m.major_page_faults,
    });
    if let Some(a) = m.available_bytes {
        v["availableBytes"] = json!(a);
    }
    v
}

fn fs_json(f: &Fs, time: &Value) -> Value {
    json!({
        "time": time,
        "availableBytes": f.available_bytes,
        "capacityBytes": f.capacity_bytes,
        "usedBytes": f.used_bytes,
        "inodesFree": f.inodes_free,
        "inodes": f.inodes,
        "inodesUsed": f.inodes_used,
    })
}

/// The Summary API's JSON (`/stats/summary`) of a snapshot.
pub fn summary(s: &Snapshot, node_name: &str) -> Value {
    let time = json!(crate::model::rfc3339(s.time));
    let mut node = json!({
        "nodeName": node_name,
        "cpu": cpu_json(&s.node.cpu, &time),
        "memory": memory_json(&s.node.memory, &time),
        "fs": fs_json(&s.node.fs, &time),
        "rlimit": {"time": time, "maxpid": s.node.max_pid, "curproc": s.node.processes},
    });
    if let Some(i) = &s.node.image_fs {
        node["runtime"] = json!({"imageFs": fs_json(i, &time)});
    }
    let pods: Vec<Value> = s
        .pods
        .iter()
        .map(|p| {
            let containers: Vec<Value> = p
                .containers
                .iter()
                .map(|c| {
                    json!({
                        "name": c.name,
                        "startTime": time_of(c.start_time_ns),
                        "cpu": cpu_json(&c.cpu, &time),
                        "memory": memory_json(&c.memory, &time),
                        "rootfs": {"time": time, "usedBytes": c.rootfs_used_bytes, "inodesUsed": c.rootfs_inodes_used},
                        "logs": {"time": time, "usedBytes": c.logs_used_bytes, "inodesUsed": c.logs_inodes_used},
                    })
                })
                .collect();
            let volumes: Vec<Value> =
                p.volumes.iter().map(|(n, b)| json!({"time": time, "usedBytes": b, "name": n})).collect();
            let mut v = json!({
                "podRef": {"name": p.name, "namespace": p.namespace, "uid": p.uid},
                "startTime": time_of(p.start_time_ns),
                "containers": containers,
                "cpu": cpu_json(&p.cpu, &time),
                "memory": memory_json(&p.memory, &time),
                "volume": volumes,
                "ephemeral-storage": {"time": time, "usedBytes": p.ephemeral_used_bytes, "inodesUsed": p.ephemeral_inodes_used},
            });
            if let Some(n) = p.processes {
                v["process_stats"] = json!({"process_count": n});
            }
            v
        })
        .collect();
    json!({"node": node, "pods": pods})
}

/// `/metrics/resource` in the Prometheus text format, the kubelet's names
/// (samples carry the snapshot's time, as the kubelet's do).
pub fn resource_metrics(s: Option<&Snapshot>) -> String {
    use std::fmt::Write;
    const SCRAPE_ERROR: &str = "1 if there was an error while getting container metrics, 0 otherwise";
    let mut out = String::new();
    let head = |out: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} [STABLE] {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
    };
    let Some(s) = s else {
        head(&mut out, "resource_scrape_error", "gauge", SCRAPE_ERROR);
        let _ = writeln!(out, "resource_scrape_error 1");
        return out;
    };
    let ms = s.time.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let secs = |n: u64| n as f64 / 1e9;
    let esc = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    // one series per container, then per pod, with their labels
    let per_container =
        |out: &mut String, name: &str, kind: &str, help: &str, value: &dyn Fn(&ContainerStat) -> f64| {
            head(out, name, kind, help);
            for p in &s.pods {
                for c in &p.containers {
                    let (c_name, ns, pod) = (esc(&c.name), esc(&p.namespace), esc(&p.name));
                    let _ = writeln!(
                        out,
                        "{name}{{container=\"{c_name}\",namespace=\"{ns}\",pod=\"{pod}\"}} {} {ms}",
                        value(c)
                    );
                }
            }
        };
    let per_pod = |out: &mut String, name: &str, kind: &str, help: &str, value: &dyn Fn(&PodStat) -> f64| {
        head(out, name, kind, help);
        for p in &s.pods {
            let (ns, pod) = (esc(&p.namespace), esc(&p.name));
            let _ = writeln!(out, "{name}{{namespace=\"{ns}\",pod=\"{pod}\"}} {} {ms}", value(p));
        }
    };
    per_container(
        &mut out,
        "container_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the container in core-seconds",
        &|c| secs(c.cpu.usage_core_nanos),
    );
    per_container(
        &mut out,
        "container_memory_working_set_bytes",
        "gauge",
        "Current working set of the container in bytes",
        &|c| c.memory.working_set_bytes as f64,
    );
    per_container(
        &mut out,
        "container_start_time_seconds",
        "gauge",
        "Start time of the container since unix epoch in seconds",
        &|c| c.start_time_ns as f64 / 1e9,
    );
    head(
        &mut out,
        "node_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the node in core-seconds",
    );
    let _ = writeln!(out, "node_cpu_usage_seconds_total {} {ms}", secs(s.node.cpu.usage_core_nanos));
    head(&mut out, "node_memory_working_set_bytes", "gauge", "Current working set of the node in bytes");
    let _ = writeln!(out, "node_memory_working_set_bytes {} {ms}", s.node.memory.working_set_bytes);
    per_pod(
        &mut out,
        "pod_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the pod in core-seconds",
        &|p| secs(p.cpu.usage_core_nanos),
    );
    per_pod(&mut out, "pod_memory_working_set_bytes", "gauge", "Current working set of the pod in bytes", &|p| {
        p.memory.working_set_bytes as f64
    });
    head(&mut out, "resource_scrape_error", "gauge", SCRAPE_ERROR);
    let _ = writeln!(out, "resource_scrape_error 0");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::fake::FakeRuntime;

    #[test]
    fn node_figures_come_from_the_kernel() {
        let m = node_memory();
        assert!(m.working_set_bytes > 0 && m.working_set_bytes <= m.usage_bytes);
        assert!(m.available_bytes.unwrap() > 0);
        assert!(node_cpu_nanos() > 0);
        let (max, cur) = pids();
        assert!(max >= 32768 && cur > 0 && cur < max, "{max} {cur}");
        let fs = fs_of(Path::new("/"), None).unwrap();
        assert!(fs.capacity_bytes > fs.available_bytes && fs.inodes > 0);
    }

    #[test]
    fn without_sandbox_stats_a_pod_is_the_sum_of_its_containers_and_rates_come_from_two_snapshots() {
        use crate::runtime::{CallCtx, ContainerConfig, SandboxConfig};
        let fake = Arc::new(FakeRuntime::new());
        let ctx = CallCtx::background(Duration::from_secs(5));
        let sb = SandboxConfig { name: "p".into(), namespace: "ns".into(), uid: "u1".into(), ..Default::default() };
        let sid = fake.run_sandbox(&ctx, &sb).unwrap();
        let mut ids = Vec::new();
        for name in ["a", "b"] {
            let cfg = ContainerConfig { name: name.into(), image: "img".into(), ..Default::default() };
            let id = fake.create_container(&ctx, &sid, &cfg, &sb).unwrap();
            fake.start_container(&ctx, &id).unwrap();
            ids.push(id);
        }
        let set = |id: &str, cpu: u64, mem: u64, t: i64| {
            fake.set_usage(
                id,
                Usage {
                    timestamp_ns: t,
                    cpu_core_nanos: Some(cpu),
                    memory_working_set_bytes: Some(mem),
                    ..Default::default()
                },
            )
        };
        set(&ids[0], 1_000_000_000, 10 << 20, 1_000_000_000);
        set(&ids[1], 2_000_000_000, 20 << 20, 1_000_000_000);
        let dir = std::env::temp_dir();
        let c = Collector::new(fake.clone(), &dir, &dir.join("no-logs-here"), Duration::from_secs(5));
        let s = c.collect().unwrap();
        assert_eq!(s.pods.len(), 1);
        let p = &s.pods[0];
        assert_eq!((p.name.as_str(), p.namespace.as_str()), ("p", "ns"));
        assert_eq!(p.memory.working_set_bytes, 30 << 20);
        assert_eq!(p.cpu.usage_core_nanos, 3_000_000_000);
        assert_eq!(p.containers[0].cpu.usage_nano_cores, None, "no rate from one snapshot");
        // a second later: a used 0.5 s of CPU, b none
        set(&ids[0], 1_500_000_000, 10 << 20, 2_000_000_000);
        set(&ids[1], 2_000_000_000, 20 << 20, 2_000_000_000);
        let s = c.collect().unwrap();
        let a = s.pods[0].containers.iter().find(|x| x.name == "a").unwrap();
        assert_eq!(a.cpu.usage_nano_cores, Some(500_000_000));
        let j = summary(&s, "node-1");
        assert_eq!(j["node"]["nodeName"], "node-1");
        assert_eq!(j["pods"][0]["podRef"]["namespace"], "ns");
        assert_eq!(j["pods"][0]["memory"]["workingSetBytes"], 30u64 << 20);
        assert!(j["node"]["memory"]["availableBytes"].as_u64().unwrap() > 0);
        let m = resource_metrics(Some(&s));
        assert!(m.contains("pod_memory_working_set_bytes{namespace=\"ns\",pod=\"p\"} 31457280 "), "{m}");
        assert!(
            m.contains("container_cpu_usage_seconds_total{container=\"a\",namespace=\"ns\",pod=\"p\"} 1.5 "),
            "{m}"
        );
        assert!(m.ends_with("resource_scrape_error 0\n"));
    }
}

//! The kubelet's cgroup hierarchy for pods: `kubepods` (limited to the
//! node's allocatable), the QoS cgroups `burstable` and `besteffort`, and a
//! cgroup per pod holding its pod-level limits, which the runtime gets as
//! the sandbox's cgroup parent (so every container of the pod is inside).
//!
//! Names follow `cgroupDriver`: with `cgroupfs`
//! `/kubepods/burstable/pod<uid>` (Guaranteed pods directly under
//! `/kubepods`), with `systemd` the slices
//! `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`
//! (dashes in the UID become underscores). With `cgroupfs` podwarden makes
//! the cgroups and writes their limits itself, on cgroup v1 (the `cpu`,
//! `cpuacct`, `memory`, `pids` and `hugetlb` hierarchies) or v2 (one tree,
//! the controllers enabled down the path). With `systemd` the slices are
//! transient systemd units podwarden starts, changes and stops through
//! systemd's D-Bus API, their limits as unit properties (`systemd`); what
//! systemd cannot set (huge pages) is written in the slice's cgroup after.
//!
//! Pod-level limits are the kubelet's `ResourceConfigForPod`: CPU shares
//! from the requests (2 for BestEffort), a CFS quota only when every
//! container limits CPU, a memory limit only when every container limits
//! memory, `overhead` added to both, huge pages as the containers' sum
//! (`hugetlb`).

pub mod hugetlb;
pub mod systemd;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;

use crate::model::qos::QosClass;
use crate::model::{self, Pod};

/// Why a cgroup could not be made, limited or removed.
#[derive(Debug, Error)]
pub enum CgroupError {
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Systemd(#[from] systemd::SystemdError),
    /// Processes still run in it: it stays, for a later clean-up.
    #[error("{name} still has processes; not removed")]
    Busy { name: String },
}

impl CgroupError {
    /// The kernel refused a value as busy (a limit below the usage).
    fn is_ebusy(&self) -> bool {
        matches!(self, CgroupError::Io { source, .. } if source.raw_os_error() == Some(libc::EBUSY))
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io { path: path.to_path_buf(), source }
}

/// `cgroupDriver`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    Systemd,
    Cgroupfs,
}

impl Driver {
    /// `systemd`; anything else is `cgroupfs` (the config allows only
    /// these two; empty, the runtime's driver, is resolved before).
    pub fn parse(s: &str) -> Driver {
        if s == "systemd" { Driver::Systemd } else { Driver::Cgroupfs }
    }

    pub fn name(self) -> &'static str {
        match self {
            Driver::Systemd => "systemd",
            Driver::Cgroupfs => "cgroupfs",
        }
    }
}

/// The cgroup filesystem's version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// The CFS period the kubelet uses (µs).
pub const CPU_PERIOD: i64 = 100_000;
const MIN_SHARES: i64 = 2;
const MAX_SHARES: i64 = 262_144;
const MIN_QUOTA: i64 = 1000;

/// CPU shares for `millis` millicores (the kubelet's `MilliCPUToShares`).
pub fn shares(millis: i64) -> i64 {
    if millis <= 0 { MIN_SHARES } else { (millis.saturating_mul(1024) / 1000).clamp(MIN_SHARES, MAX_SHARES) }
}

/// A CFS quota for `millis` millicores over [`CPU_PERIOD`]; 0: none.
pub fn quota(millis: i64) -> i64 {
    if millis <= 0 { 0 } else { (millis.saturating_mul(CPU_PERIOD) / 1000).max(MIN_QUOTA) }
}

/// cgroup v2's `cpu.weight` for v1 shares (the kubelet's conversion).
pub fn cpu_weight(shares: i64) -> i64 {
    if shares >= MAX_SHARES { 10_000 } else { 1 + ((shares.max(MIN_SHARES) - 2) * 9999) / 262_142 }
}

/// Limits of one cgroup (`None`: not limited).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    pub cpu_shares: Option<i64>,
    /// CFS quota over [`CPU_PERIOD`].
    pub cpu_quota: Option<i64>,
    pub memory_bytes: Option<i64>,
    /// `pids.max` (the config's `podPidsLimit` for a pod's cgroup).
    pub pids: Option<i64>,
    /// Huge pages by page size (bytes), 0 for a size not named (a pod's
    /// cgroup); `None`: left as they are (the node's and QoS cgroups).
    pub hugetlb: Option<BTreeMap<u64, i64>>,
}

/// The pod's limit of `resource`: its app containers' and sidecars'
/// together, or an init container's if larger (it runs alone); `None` when
/// a container has no such limit.
fn pod_limit(pod: &Pod, resource: &str) -> Option<i64> {
    let limit = |c: &model::Container| {
        let q = c.resources.as_ref()?.limits.as_ref()?.get(resource)?;
        Some(model::qos::amount(resource, &q.0)).filter(|v| *v > 0)
    };
    let mut sum = 0i64;
    for c in model::long_running(pod) {
        sum = sum.saturating_add(limit(c)?);
    }
    for c in model::init_containers(pod).iter().filter(|c| !model::is_sidecar(c)) {
        sum = sum.max(limit(c)?);
    }
    Some(sum)
}

/// A pod's limits (`ResourceConfigForPod`).
pub fn pod_limits(pod: &Pod) -> Limits {
    let spec = model::spec(pod);
    let overhead = |k: &str| {
        let q = spec.and_then(|s| s.overhead.as_ref()).and_then(|o| o.get(k));
        q.map_or(0, |q| model::qos::amount(k, &q.0))
    };
    let cpu_request = model::qos::pod_request(pod, "cpu").saturating_add(overhead("cpu"));
    let cpu_limit = pod_limit(pod, "cpu").map(|l| l.saturating_add(overhead("cpu")));
    let mem_limit = pod_limit(pod, "memory").map(|l| l.saturating_add(overhead("memory")));
    let hugetlb = Some(hugetlb::pod_hugepages(pod));
    match model::qos::qos_class(pod) {
        QosClass::BestEffort => Limits { cpu_shares: Some(MIN_SHARES), hugetlb, ..Default::default() },
        _ => Limits {
            cpu_shares: Some(shares(cpu_request)),
            cpu_quota: cpu_limit.map(quota),
            memory_bytes: mem_limit,
            pids: None,
            hugetlb,
        },
    }
}

/// The names, from the top, of the cgroups above and of a pod's.
fn components(pod: &Pod) -> Vec<String> {
    let mut c = vec!["kubepods".to_string()];
    match model::qos::qos_class(pod) {
        QosClass::Guaranteed => {}
        QosClass::Burstable => c.push("burstable".into()),
        QosClass::BestEffort => c.push("besteffort".into()),
    }
    c.push(format!("pod{}", model::uid(pod)));
    c
}

/// A cgroup's name under `driver`, from its components: `/a/b/c` for
/// cgroupfs, `/a.slice/a-b.slice/a-b-c.slice` for systemd (with `-` in a
/// component written `_`).
pub fn name(driver: Driver, components: &[String]) -> String {
    match driver {
        Driver::Cgroupfs => format!("/{}", components.join("/")),
        Driver::Systemd => {
            let mut out = String::new();
            let mut prefix = String::new();
            for c in components {
                let c = c.replace('-', "_");
                prefix = if prefix.is_empty() { c } else { format!("{prefix}-{c}") };
                out.push_str(&format!("/{prefix}.slice"));
            }
            out
        }
    }
}

/// The pod's cgroup (the sandbox's cgroup parent).
pub fn pod_cgroup(driver: Driver, pod: &Pod) -> String {
    name(driver, &components(pod))
}

/// The node's pod cgroups and where they live.
#[derive(Debug, Clone)]
pub struct Cgroups {
    pub driver: Driver,
    pub version: Version,
    /// The cgroup filesystem's mount point (`/sys/fs/cgroup`).
    pub root: PathBuf,
    /// `podPidsLimit`: every pod cgroup's `pids.max` (`None`: unlimited).
    pub pod_pids_limit: Option<i64>,
    /// The connection to systemd (used by the `systemd` driver only; it
    /// connects at its first call).
    pub systemd: Arc<systemd::Systemd>,
    /// v1: every mounted hierarchy's top (podwarden's, `blkio`, `cpuset`,
    /// `devices`, `freezer`, the named `systemd` one ...), read once at
    /// [`Cgroups::detect`]; v2: none.
    hierarchies: Vec<PathBuf>,
}

/// cgroup v1 hierarchies podwarden makes pod cgroups in (cpuset is left
/// to the runtime, which fills it in as it creates a container's).
const V1_CONTROLLERS: &[&str] = &["cpu", "cpuacct", "memory", "pids", "hugetlb"];

/// cgroup v2 controllers podwarden enables down to the pod cgroups.
const V2_CONTROLLERS: &[&str] = &["cpu", "memory", "pids", "hugetlb"];

impl Cgroups {
    /// The machine's cgroup filesystem under `root`: v2 when `root` is a
    /// cgroup2 mount (`cgroup.controllers` at its top), else v1.
    pub fn detect(driver: Driver, root: &Path) -> Cgroups {
        let version = if root.join("cgroup.controllers").exists() { Version::V2 } else { Version::V1 };
        let systemd = Arc::new(systemd::Systemd::new());
        // a hierarchy's top has cgroup.procs; `cpu` and `cpuacct` are often
        // links to `cpu,cpuacct`, counted once through it
        let hierarchies = match version {
            Version::V1 => std::fs::read_dir(root)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()) && e.path().join("cgroup.procs").exists())
                .map(|e| e.path())
                .collect(),
            Version::V2 => Vec::new(),
        };
        Cgroups { driver, version, root: root.to_path_buf(), pod_pids_limit: None, systemd, hierarchies }
    }

    /// Every pod cgroup gets `pids.max` = `limit` when it is positive (the
    /// kubelet's `podPidsLimit`; -1 or 0: unlimited).
    pub fn with_pod_pids_limit(mut self, limit: i64) -> Cgroups {
        self.pod_pids_limit = Some(limit).filter(|l| *l > 0);
        self
    }

    /// The directories of cgroup `name`: one per v1 hierarchy this machine
    /// mounts, one on v2.
    fn dirs(&self, name: &str) -> Vec<PathBuf> {
        let rel = name.trim_start_matches('/');
        match self.version {
            Version::V1 => {
                V1_CONTROLLERS.iter().map(|c| self.root.join(c)).filter(|h| h.exists()).map(|h| h.join(rel)).collect()
            }
            Version::V2 => vec![self.root.join(rel)],
        }
    }

    /// The directories of cgroup `name` in every hierarchy: on v1 besides
    /// podwarden's own those of every other mounted hierarchy (`blkio`,
    /// `cpuset`, `devices`, `freezer`, the named `systemd` one ...), where
    /// the runtime makes the pod's path as the parent of its containers'
    /// and leaves it when they go, as the kubelet removes it from all.
    fn dirs_everywhere(&self, name: &str) -> Vec<PathBuf> {
        let mut dirs = self.dirs(name);
        let rel = name.trim_start_matches('/');
        for h in &self.hierarchies {
            let d = h.join(rel);
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
        dirs
    }

    /// Make cgroup `name` (its parents too) and set `limits`: with
    /// `cgroupfs` directories and files, with `systemd` a slice started (or
    /// changed) through systemd, then the huge pages in its directory.
    pub fn ensure(&self, name: &str, limits: &Limits) -> Result<(), CgroupError> {
        match self.driver {
            Driver::Systemd => {
                let unit = systemd::unit_of(name);
                self.systemd.ensure_slice(
                    unit,
                    &systemd::start_properties(unit, self.version, limits),
                    &systemd::resource_properties(self.version, limits),
                )?;
                if let Some(pages) = &limits.hugetlb {
                    self.write_hugetlb(name, pages)?;
                }
                Ok(())
            }
            Driver::Cgroupfs => {
                if self.version == Version::V2 {
                    self.enable_controllers(name, V2_CONTROLLERS)?;
                }
                for d in self.dirs(name) {
                    std::fs::create_dir_all(&d).map_err(io(&d))?;
                    self.write_limits(&d, limits)?;
                }
                Ok(())
            }
        }
    }

    /// Huge page limits where systemd cannot set them: the hugetlb
    /// controller enabled above `name` (v2; systemd leaves a controller it
    /// does not know alone), the files written in its directory.
    fn write_hugetlb(&self, name: &str, pages: &BTreeMap<u64, i64>) -> Result<(), CgroupError> {
        let dir = match self.version {
            Version::V2 => {
                self.enable_controllers(name, &["hugetlb"])?;
                self.root.join(name.trim_start_matches('/'))
            }
            Version::V1 => {
                let h = self.root.join("hugetlb");
                if !h.exists() {
                    return Ok(());
                }
                let d = h.join(name.trim_start_matches('/'));
                std::fs::create_dir_all(&d).map_err(io(&d))?;
                d
            }
        };
        hugetlb::write(&dir, self.version, pages).map_err(io(&dir))
    }

    /// cgroup v2: `controllers` (those the machine has) enabled in every
    /// cgroup above `name` (a controller must be in the parent's
    /// `cgroup.subtree_control` to be used below it), the cgroups made.
    fn enable_controllers(&self, name: &str, controllers: &[&str]) -> Result<(), CgroupError> {
        let mut dir = self.root.clone();
        let parts: Vec<&str> = name.trim_start_matches('/').split('/').collect();
        for p in &parts {
            let available = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
            let want: Vec<String> = controllers
                .iter()
                .filter(|c| available.split_whitespace().any(|a| a == **c))
                .map(|c| format!("+{c}"))
                .collect();
            if !want.is_empty() {
                let f = dir.join("cgroup.subtree_control");
                std::fs::write(&f, want.join(" ")).map_err(io(&f))?;
            }
            dir = dir.join(p);
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        }
        Ok(())
    }

    fn write_limits(&self, dir: &Path, l: &Limits) -> Result<(), CgroupError> {
        let write = |file: &str, value: String| -> Result<(), CgroupError> {
            let p = dir.join(file);
            if !p.exists() {
                return Ok(()); // this hierarchy has no such file
            }
            std::fs::write(&p, value).map_err(io(&p))
        };
        // the same file on v1 (the pids hierarchy) and v2
        write("pids.max", l.pids.filter(|p| *p > 0).map_or("max".to_string(), |p| p.to_string()))?;
        if let Some(pages) = &l.hugetlb {
            hugetlb::write(dir, self.version, pages).map_err(io(dir))?;
        }
        match self.version {
            Version::V1 => {
                if let Some(s) = l.cpu_shares {
                    write("cpu.shares", s.to_string())?;
                }
                write("cpu.cfs_period_us", CPU_PERIOD.to_string())?;
                write("cpu.cfs_quota_us", l.cpu_quota.filter(|q| *q > 0).unwrap_or(-1).to_string())?;
                write("memory.limit_in_bytes", l.memory_bytes.filter(|m| *m > 0).unwrap_or(-1).to_string())?;
            }
            Version::V2 => {
                if let Some(s) = l.cpu_shares {
                    write("cpu.weight", cpu_weight(s).to_string())?;
                }
                let q = l.cpu_quota.filter(|q| *q > 0).map_or("max".to_string(), |q| q.to_string());
                write("cpu.max", format!("{q} {CPU_PERIOD}"))?;
                let m = l.memory_bytes.filter(|m| *m > 0).map_or("max".to_string(), |m| m.to_string());
                write("memory.max", m)?;
            }
        }
        Ok(())
    }

    /// The node's cgroups: `kubepods` with the node's limits (allocatable
    /// when `enforceNodeAllocatable` has `pods`, else the machine's), and
    /// the QoS cgroups (besteffort with 2 shares).
    pub fn ensure_node(&self, cpu_millis: i64, memory_bytes: i64) -> Result<(), CgroupError> {
        let kubepods = vec!["kubepods".to_string()];
        let node =
            Limits { cpu_shares: Some(shares(cpu_millis)), memory_bytes: Some(memory_bytes), ..Default::default() };
        if let Err(e) = self.ensure(&name(self.driver, &kubepods), &node) {
            // the pods already use more than the new limit (the kernel
            // refuses it): they keep running under the old one
            if !e.is_ebusy() {
                return Err(e);
            }
            log::warn!("kubepods: cannot lower its limits below what the pods use now: {e}");
        }
        let qos = |q: &str| name(self.driver, &["kubepods".to_string(), q.to_string()]);
        self.ensure(&qos("burstable"), &Limits::default())?;
        self.ensure(&qos("besteffort"), &Limits { cpu_shares: Some(MIN_SHARES), ..Default::default() })
    }

    /// Make the pod's cgroup with its limits; its name for the runtime.
    pub fn ensure_pod(&self, pod: &Pod) -> Result<String, CgroupError> {
        let n = pod_cgroup(self.driver, pod);
        self.ensure(&n, &Limits { pids: self.pod_pids_limit, ..pod_limits(pod) })?;
        Ok(n)
    }

    /// Remove the pod's cgroup once nothing runs in it (the runtime has
    /// removed its containers'); see [`Cgroups::remove`].
    pub fn remove_pod(&self, pod: &Pod) -> Result<(), CgroupError> {
        self.remove(&pod_cgroup(self.driver, pod))
    }

    /// Whether a process runs in cgroup `name` or below (v2: its
    /// `cgroup.events`; v1: any `cgroup.procs` in any hierarchy, three
    /// levels deep). A cgroup that is not there has none.
    pub fn populated(&self, name: &str) -> bool {
        match self.version {
            Version::V2 => std::fs::read_to_string(self.memory_dir(name).join("cgroup.events"))
                .is_ok_and(|e| e.lines().any(|l| l.trim() == "populated 1")),
            Version::V1 => {
                fn any_procs(dir: &Path, depth: u32) -> bool {
                    if std::fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty()) {
                        return true;
                    }
                    depth > 0
                        && std::fs::read_dir(dir)
                            .into_iter()
                            .flatten()
                            .flatten()
                            .any(|e| e.file_type().is_ok_and(|t| t.is_dir()) && any_procs(&e.path(), depth - 1))
                }
                self.dirs_everywhere(name).iter().any(|d| any_procs(d, 3))
            }
        }
    }

    /// The processes in cgroup `name` and below (v2: its tree; v1: every
    /// hierarchy, three levels deep), each once.
    pub fn processes(&self, name: &str) -> Vec<libc::pid_t> {
        fn walk(dir: &Path, depth: u32, out: &mut std::collections::BTreeSet<libc::pid_t>) {
            if let Ok(p) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                out.extend(p.lines().filter_map(|l| l.trim().parse::<libc::pid_t>().ok()).filter(|p| *p > 1));
            }
            if depth == 0 {
                return;
            }
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    walk(&e.path(), depth - 1, out);
                }
            }
        }
        let mut out = std::collections::BTreeSet::new();
        for d in self.dirs_everywhere(name) {
            walk(&d, 3, &mut out);
        }
        out.into_iter().collect()
    }

    /// Kill (SIGKILL) every process in cgroup `name` and below, as the
    /// kubelet does to what is left in an orphaned pod's cgroup before it
    /// removes it: the processes of a container its runtime no longer
    /// knows (containerd killed between starting a container's `runc init`
    /// and recording it leaves that process waiting for good). v2 kernels
    /// with `cgroup.kill` kill the whole tree at once; otherwise each
    /// process read from `cgroup.procs`. The processes signalled.
    pub fn kill_all(&self, name: &str) -> usize {
        let pids = self.processes(name);
        if self.version == Version::V2 {
            let kill = self.memory_dir(name).join("cgroup.kill");
            if kill.exists() && std::fs::write(&kill, "1").is_ok() {
                return pids.len();
            }
        }
        pids.iter().filter(|p| crate::sys::kill(**p, libc::SIGKILL).is_ok()).count()
    }

    /// Remove cgroup `name` when nothing runs in it ([`CgroupError::Busy`]
    /// otherwise, for a later clean-up): with `systemd` its slice stopped
    /// (systemd removes its cgroup; a slice systemd does not know is
    /// gone already), with `cgroupfs` its directories, children first.
    /// What podwarden made itself beside systemd (v1's hugetlb directory)
    /// goes too.
    pub fn remove(&self, name: &str) -> Result<(), CgroupError> {
        if self.populated(name) {
            return Err(CgroupError::Busy { name: name.to_string() });
        }
        if self.driver == Driver::Systemd {
            self.systemd.stop_slice(systemd::unit_of(name))?;
        }
        for d in self.dirs_everywhere(name) {
            if !d.exists() {
                continue;
            }
            // what the runtime left (empty container cgroups)
            if let Ok(entries) = std::fs::read_dir(&d) {
                for e in entries.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        let _ = std::fs::remove_dir(e.path());
                    }
                }
            }
            match std::fs::remove_dir(&d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(CgroupError::Io { path: d, source: e }),
            }
        }
        Ok(())
    }

    /// How long ago cgroup `name`'s directories last changed (their
    /// mtimes, set when the kernel made their inodes; on v1 the newest of
    /// every hierarchy's); `None` when none can be read.
    pub fn unchanged_for(&self, name: &str) -> Option<std::time::Duration> {
        self.dirs_everywhere(name)
            .iter()
            .filter_map(|d| std::fs::metadata(d).ok()?.modified().ok()?.elapsed().ok())
            .min()
    }

    /// The pod cgroups on this machine, found in the tree (v2) or in
    /// every hierarchy (v1: the runtime makes a pod's path in each, and an
    /// older podwarden removed it from its own only) under `kubepods` and
    /// the QoS cgroups: (the UID as the name gives it, the cgroup's name),
    /// each once. With `systemd` the UID's dashes are underscores.
    pub fn pod_cgroups(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for qos in [&[][..], &["burstable"][..], &["besteffort"][..]] {
            let mut c = vec!["kubepods".to_string()];
            c.extend(qos.iter().map(|q| q.to_string()));
            let parent = name(self.driver, &c);
            let entries = self.dirs_everywhere(&parent).into_iter().filter_map(|d| std::fs::read_dir(d).ok()).flatten();
            for e in entries.flatten() {
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let entry = e.file_name().to_string_lossy().into_owned();
                let uid = match self.driver {
                    Driver::Cgroupfs => entry.strip_prefix("pod"),
                    Driver::Systemd => entry
                        .strip_suffix(".slice")
                        .and_then(|s| s.rsplit('-').next())
                        .and_then(|s| s.strip_prefix("pod")),
                };
                if let Some(uid) = uid.filter(|u| !u.is_empty()) {
                    let found = (uid.to_string(), format!("{parent}/{entry}"));
                    if !out.contains(&found) {
                        out.push(found);
                    }
                }
            }
        }
        out
    }

    /// `kubepods`' memory: (limit, working set = usage minus inactive file
    /// pages), as the kubelet's `allocatableMemory.available` sees it;
    /// `None` without a limit or the files.
    pub fn kubepods_memory(&self) -> Option<(u64, u64)> {
        let dir = self.memory_dir(&name(self.driver, &["kubepods".to_string()]));
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
        let (limit, usage, inactive_key) = match self.version {
            Version::V1 => (read("memory.limit_in_bytes")?, read("memory.usage_in_bytes")?, "total_inactive_file "),
            Version::V2 => (read("memory.max")?, read("memory.current")?, "inactive_file "),
        };
        let limit: u64 = limit.trim().parse().ok().filter(|l| *l < 1 << 62)?;
        let usage: u64 = usage.trim().parse().ok()?;
        let inactive: u64 =
            read("memory.stat")?.lines().find_map(|l| l.strip_prefix(inactive_key)?.trim().parse().ok()).unwrap_or(0);
        Some((limit, usage.saturating_sub(inactive)))
    }

    /// The directory of cgroup `name` in the memory hierarchy (v1) or the
    /// tree (v2), where its memory files are.
    pub fn memory_dir(&self, name: &str) -> PathBuf {
        let rel = name.trim_start_matches('/');
        match self.version {
            Version::V1 => self.root.join("memory").join(rel),
            Version::V2 => self.root.join(rel),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(resources: &[&str]) -> Pod {
        let mut y = String::from("metadata: {name: p, uid: 1234-abcd}\nspec:\n  containers:\n");
        for (i, r) in resources.iter().enumerate() {
            y.push_str(&format!("  - name: c{i}\n    image: i\n    resources: {r}\n"));
        }
        serde_yaml_ng::from_str(&y).unwrap()
    }

    #[test]
    fn names_for_each_driver() {
        let be = pod(&["{}"]);
        let bu = pod(&["{requests: {cpu: 100m}}"]);
        let gu = pod(&["{limits: {cpu: 1, memory: 1Gi}}"]);
        assert_eq!(pod_cgroup(Driver::Cgroupfs, &be), "/kubepods/besteffort/pod1234-abcd");
        assert_eq!(pod_cgroup(Driver::Cgroupfs, &bu), "/kubepods/burstable/pod1234-abcd");
        assert_eq!(pod_cgroup(Driver::Cgroupfs, &gu), "/kubepods/pod1234-abcd");
        assert_eq!(
            pod_cgroup(Driver::Systemd, &bu),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice"
        );
        assert_eq!(pod_cgroup(Driver::Systemd, &gu), "/kubepods.slice/kubepods-pod1234_abcd.slice");
    }

    #[test]
    fn pod_limits_as_the_kubelet_sets_them() {
        let none = Some(BTreeMap::new());
        assert_eq!(
            pod_limits(&pod(&["{}"])),
            Limits { cpu_shares: Some(2), hugetlb: none.clone(), ..Default::default() }
        );
        let g = pod(&["{limits: {cpu: 500m, memory: 64Mi}}", "{limits: {cpu: 250m, memory: 32Mi}}"]);
        assert_eq!(
            pod_limits(&g),
            Limits {
                cpu_shares: Some(768),
                cpu_quota: Some(75_000),
                memory_bytes: Some(96 << 20),
                pids: None,
                hugetlb: none.clone()
            }
        );
        // one container without a memory limit: no pod memory limit
        let b = pod(&["{limits: {cpu: 500m, memory: 64Mi}}", "{requests: {cpu: 100m}}"]);
        assert_eq!(
            pod_limits(&b),
            Limits { cpu_shares: Some(614), cpu_quota: None, memory_bytes: None, pids: None, hugetlb: none }
        );
        assert_eq!(shares(1), 2);
        assert_eq!(quota(1), 1000);
        assert_eq!(cpu_weight(2), 1);
        assert_eq!(cpu_weight(1024), 39);
        assert_eq!(cpu_weight(262_144), 10_000);
    }

    #[test]
    fn a_v1_pod_cgroup_goes_from_every_hierarchy_the_runtime_made_it_in() {
        let root = std::env::temp_dir().join(format!("pw-cg1-rm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let pod = "kubepods/besteffort/podabc";
        // podwarden's hierarchies and two only the runtime writes in
        for h in ["memory", "cpu", "pids", "blkio", "freezer"] {
            std::fs::create_dir_all(root.join(h).join(pod).join("0123abcd")).unwrap();
            std::fs::write(root.join(h).join("cgroup.procs"), "").unwrap();
        }
        // a directory that is no hierarchy is left alone
        std::fs::create_dir_all(root.join("not-a-hierarchy").join(pod)).unwrap();
        let cg = Cgroups::detect(Driver::Cgroupfs, &root);
        assert_eq!(cg.version, Version::V1);
        cg.remove(&format!("/{pod}")).unwrap();
        for h in ["memory", "cpu", "pids", "blkio", "freezer"] {
            assert!(!root.join(h).join(pod).exists(), "{h}: the pod's cgroup is left");
            assert!(root.join(h).join("kubepods/besteffort").exists(), "{h}: its parent stays");
        }
        assert!(root.join("not-a-hierarchy").join(pod).exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn what_is_left_in_a_pod_cgroup_in_any_hierarchy_is_killed() {
        let root = std::env::temp_dir().join(format!("pw-cg1-kill-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for h in ["memory", "cpu", "devices"] {
            std::fs::create_dir_all(root.join(h).join("kubepods/besteffort/podleft/0123abcd")).unwrap();
            std::fs::write(root.join(h).join("cgroup.procs"), "").unwrap();
        }
        // a process in a container's cgroup of the runtime's hierarchy only
        let mut child = std::process::Command::new("sleep").arg("600").spawn().unwrap();
        let procs = format!("{}\n", child.id());
        std::fs::write(root.join("devices/kubepods/besteffort/podleft/0123abcd/cgroup.procs"), &procs).unwrap();
        let cg = Cgroups::detect(Driver::Cgroupfs, &root);
        assert_eq!(cg.processes("/kubepods/besteffort/podleft"), [child.id() as libc::pid_t]);
        assert_eq!(cg.kill_all("/kubepods/besteffort/podleft"), 1);
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn v1_pod_cgroups_left_in_other_hierarchies_are_found_and_their_processes_seen() {
        let root = std::env::temp_dir().join(format!("pw-cg1-find-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for h in ["memory", "cpu", "blkio", "devices"] {
            std::fs::create_dir_all(root.join(h).join("kubepods/besteffort")).unwrap();
            std::fs::write(root.join(h).join("cgroup.procs"), "").unwrap();
        }
        // one pod in podwarden's hierarchies and the runtime's, one left
        // only where an older podwarden never removed it
        for h in ["memory", "cpu", "blkio"] {
            std::fs::create_dir_all(root.join(h).join("kubepods/besteffort/podboth")).unwrap();
        }
        for h in ["blkio", "devices"] {
            std::fs::create_dir_all(root.join(h).join("kubepods/besteffort/podleft/0123abcd")).unwrap();
        }
        let cg = Cgroups::detect(Driver::Cgroupfs, &root);
        let mut found = cg.pod_cgroups();
        found.sort();
        assert_eq!(
            found,
            [
                ("both".to_string(), "/kubepods/besteffort/podboth".to_string()),
                ("left".to_string(), "/kubepods/besteffort/podleft".to_string()),
            ],
            "each once, wherever it is"
        );
        assert!(cg.unchanged_for("/kubepods/besteffort/podleft").is_some(), "its age read where it is");
        // a process in the runtime's hierarchy only keeps it
        std::fs::write(root.join("devices/kubepods/besteffort/podleft/0123abcd/cgroup.procs"), "42\n").unwrap();
        assert!(cg.populated("/kubepods/besteffort/podleft"));
        assert!(matches!(cg.remove("/kubepods/besteffort/podleft"), Err(CgroupError::Busy { .. })));
        std::fs::remove_file(root.join("devices/kubepods/besteffort/podleft/0123abcd/cgroup.procs")).unwrap();
        cg.remove("/kubepods/besteffort/podleft").unwrap();
        assert!(!root.join("blkio/kubepods/besteffort/podleft").exists());
        assert!(!root.join("devices/kubepods/besteffort/podleft").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn cgroup_v2_files_are_written_with_the_controllers_enabled() {
        let root = std::env::temp_dir().join(format!("pw-cg2-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("cgroup.controllers"), "cpuset cpu io memory hugetlb pids\n").unwrap();
        let cg = Cgroups::detect(Driver::Cgroupfs, &root);
        assert_eq!(cg.version, Version::V2);
        // a fake tree: the files a kernel would show exist beforehand
        let dir = root.join("kubepods/pod1234-abcd");
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["cpu.weight", "cpu.max", "memory.max", "pids.max", "hugetlb.2MB.max", "hugetlb.1GB.max"] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        let g = pod(&["{limits: {cpu: 500m, memory: 64Mi, hugepages-2Mi: 4Mi}}"]);
        assert_eq!(cg.ensure_pod(&g).unwrap(), "/kubepods/pod1234-abcd");
        assert_eq!(std::fs::read_to_string(dir.join("pids.max")).unwrap(), "max", "no podPidsLimit: unlimited");
        let cg = cg.with_pod_pids_limit(123);
        assert_eq!(cg.ensure_pod(&g).unwrap(), "/kubepods/pod1234-abcd");
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(read("cpu.weight"), cpu_weight(512).to_string());
        assert_eq!(read("cpu.max"), "50000 100000");
        assert_eq!(read("memory.max"), (64i64 << 20).to_string());
        assert_eq!(read("pids.max"), "123", "podPidsLimit");
        assert_eq!(read("hugetlb.2MB.max"), "4194304", "the pod's huge pages");
        assert_eq!(read("hugetlb.1GB.max"), "0", "a size it does not ask for");
        assert_eq!(
            std::fs::read_to_string(root.join("cgroup.subtree_control")).unwrap(),
            "+cpu +memory +pids +hugetlb"
        );

        // found as a pod cgroup; removed only when no process runs in it
        assert_eq!(cg.pod_cgroups(), [("1234-abcd".to_string(), "/kubepods/pod1234-abcd".to_string())]);
        for f in std::fs::read_dir(&dir).unwrap() {
            std::fs::remove_file(f.unwrap().path()).unwrap();
        }
        std::fs::write(dir.join("cgroup.events"), "populated 1\nfrozen 0\n").unwrap();
        assert!(matches!(cg.remove("/kubepods/pod1234-abcd"), Err(CgroupError::Busy { .. })));
        assert!(dir.exists());
        std::fs::remove_file(dir.join("cgroup.events")).unwrap();
        cg.remove("/kubepods/pod1234-abcd").unwrap();
        assert!(!dir.exists());
        cg.remove("/kubepods/pod1234-abcd").expect("a cgroup already gone");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn without_systemd_the_systemd_driver_fails_loudly() {
        let root = std::env::temp_dir().join(format!("pw-cgnosd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        let mut cg = Cgroups::detect(Driver::Systemd, &root);
        cg.systemd = Arc::new(systemd::Systemd::at(&format!("unix:path={}/no-bus", root.display())));
        let e = cg.ensure_pod(&pod(&["{requests: {cpu: 100m}}"])).unwrap_err();
        assert!(matches!(e, CgroupError::Systemd(systemd::SystemdError::Connect { .. })), "{e:?}");
        assert!(e.to_string().starts_with("cgroupDriver systemd: cannot reach systemd on the system bus: "), "{e}");
        let e = cg.ensure_node(1000, 1 << 30).unwrap_err();
        assert!(e.to_string().contains("cannot reach systemd"), "{e}");
        // nothing made behind systemd's back
        assert!(!root.join("kubepods.slice").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn systemd_pod_slices_are_found_by_their_names() {
        let root = std::env::temp_dir().join(format!("pw-cgsd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in [
            "kubepods.slice/kubepods-pod1_2.slice",
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod3_4.slice",
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod5.slice",
            "kubepods.slice/kubepods-besteffort.slice/cri-containerd-x.scope",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        let cg = Cgroups::detect(Driver::Systemd, &root);
        let mut found = cg.pod_cgroups();
        found.sort();
        assert_eq!(
            found,
            [
                ("1_2".to_string(), "/kubepods.slice/kubepods-pod1_2.slice".to_string()),
                (
                    "3_4".to_string(),
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod3_4.slice".to_string()
                ),
                (
                    "5".to_string(),
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod5.slice".to_string()
                ),
            ]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}

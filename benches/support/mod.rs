//! What the benchmarks against the private containerd share: its socket,
//! a call context, wall-clock nanoseconds, /proc fields, and the JSON last
//! line.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use podwarden::runtime::cri::CriRuntime;
use podwarden::runtime::{
    CallCtx, ContainerConfig, LABEL_POD_UID, Runtime, RuntimePod, SandboxConfig, Security, SecurityProfile,
};

pub mod cluster;
pub mod http;

/// The image `scripts/e2e-env.sh` builds from busybox-static.
pub const IMAGE: &str = "localhost/busybox:e2e";

pub fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64
}

pub fn call() -> CallCtx {
    CallCtx::background(Duration::from_secs(60))
}

/// The private containerd's socket; fails with how to start it.
pub fn socket() -> String {
    let s = std::env::var("PODWARDEN_E2E_SOCKET").unwrap_or_else(|_| "/run/podwarden-e2e/containerd.sock".into());
    assert!(Path::new(&s).exists(), "{s} is missing: run `scripts/e2e-env.sh up` first (scripts/bench.sh does)");
    s
}

/// What a direct CRI client does for a pod: RunPodSandbox, CreateContainer,
/// StartContainer of one host-network busybox pod `name` (UID `uid`), with
/// `seccomp` on the sandbox and the container. Returns the latency from the
/// first request to containerd's container start time.
pub fn raw_pod(cri: &CriRuntime, uid: &str, name: &str, seccomp: SecurityProfile) -> f64 {
    let mut labels = BTreeMap::new();
    labels.insert(LABEL_POD_UID.to_string(), uid.to_string());
    let sb = SandboxConfig {
        name: name.into(),
        namespace: "bench".into(),
        uid: uid.into(),
        host_network: true,
        log_directory: format!("/tmp/podwarden-bench-logs/{uid}"),
        labels: labels.clone(),
        seccomp: seccomp.clone(),
        ..Default::default()
    };
    let t0 = now_ns();
    let id = cri.run_sandbox(&call(), &sb).expect("RunPodSandbox");
    let cc = ContainerConfig {
        name: "main".into(),
        image: IMAGE.into(),
        command: vec!["sh".into(), "-c".into(), "trap 'exit 0' TERM; while :; do sleep 1 & wait; done".into()],
        log_path: "main/0.log".into(),
        labels,
        security: Security { seccomp, ..Default::default() },
        ..Default::default()
    };
    let cid = cri.create_container(&call(), &id, &cc, &sb).expect("CreateContainer");
    cri.start_container(&call(), &cid).expect("StartContainer");
    let rp = cri.pod_status(&call(), uid).unwrap();
    (rp.containers[0].started_at_ns - t0) as f64 / 1e6
}

/// Stop and remove a direct client's pod (containers, then sandboxes).
pub fn remove_raw_pod(cri: &CriRuntime, uid: &str) {
    remove_pod(cri, &cri.pod_status(&call(), uid).unwrap());
}

/// Stop and remove what the runtime holds of `rp`: its containers, then
/// its sandboxes. Errors are ignored (a later list shows what is left).
pub fn remove_pod(cri: &CriRuntime, rp: &RuntimePod) {
    for c in &rp.containers {
        let _ = cri.stop_container(&call(), &c.id, Duration::ZERO);
        let _ = cri.remove_container(&call(), &c.id);
    }
    for s in &rp.sandboxes {
        let _ = cri.stop_sandbox(&call(), &s.id);
        let _ = cri.remove_sandbox(&call(), &s.id);
    }
}

/// A numeric field of `/proc/<pid>/status` (`VmRSS:`, `Threads:`), 0 if absent.
pub fn proc_status(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

/// The benchmark's last line: one JSON object (whole numbers without
/// decimals, others with `decimals`).
pub fn print_json(out: &BTreeMap<&str, f64>, decimals: usize) {
    let fields: Vec<String> = out
        .iter()
        .map(|(k, v)| if v.fract() == 0.0 { format!("\"{k}\":{v:.0}") } else { format!("\"{k}\":{v:.decimals$}") })
        .collect();
    println!("{{{}}}", fields.join(","));
}

/// The podwarden binary a bench runs: `$PODWARDEN_BIN`, else the installed
/// one; fails with how to get it (`bench`: the name for scripts/bench.sh).
pub fn bin(bench: &str) -> String {
    let b = std::env::var("PODWARDEN_BIN").unwrap_or_else(|_| "/usr/bin/podwarden".into());
    assert!(Path::new(&b).exists(), "{b} is missing: install the package first (scripts/bench.sh {bench} does)");
    b
}

/// utime + stime of a process, in clock ticks.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // fields after the command (which may hold spaces) in parentheses
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12) // utime, stime (fields 14 and 15 of stat)
}

/// Each thread's context switches so far (voluntary and not): name, count.
/// A thread's wake-ups are its switches, one in and one out per sleep.
pub fn thread_switches(pid: u32) -> std::collections::HashMap<u32, (String, u64)> {
    let mut out = std::collections::HashMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let Ok(tid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let name = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default().trim().to_string();
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        let n: u64 = status
            .lines()
            .filter(|l| l.starts_with("voluntary_ctxt_switches:") || l.starts_with("nonvoluntary_ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        out.insert(tid, (name, n));
    }
    out
}

/// Wake-ups a second of the process over the window between two
/// [`thread_switches`] readings (threads that came or went meanwhile
/// count from zero), and the busiest names (a pod worker's name counts
/// as `pod-*`), most first.
pub fn wakeups_per_s(
    before: &std::collections::HashMap<u32, (String, u64)>,
    after: &std::collections::HashMap<u32, (String, u64)>,
    secs: f64,
) -> (f64, Vec<(String, f64)>) {
    let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
    for (tid, (name, n)) in after {
        let was = before.get(tid).map_or(0, |(_, b)| *b);
        let name = if name.starts_with("pod-") { "pod-*".to_string() } else { name.clone() };
        *by_name.entry(name).or_default() += n.saturating_sub(was);
    }
    let total = by_name.values().sum::<u64>() as f64 / secs;
    let mut names: Vec<(String, f64)> = by_name.into_iter().map(|(k, v)| (k, v as f64 / secs)).collect();
    names.sort_by(|a, b| b.1.total_cmp(&a.1));
    (total, names)
}

/// CPU time of a process so far, in milliseconds (clock ticks: 10 ms
/// steps).
pub fn cpu_ms(pid: u32) -> f64 {
    cpu_ticks(pid) as f64 * 1000.0 / podwarden::sys::clock_ticks_per_second() as f64
}

/// The private containerd's pid, from the file `scripts/e2e-env.sh up`
/// keeps naming it.
pub fn containerd_pid() -> Option<u32> {
    std::fs::read_to_string("/run/podwarden-e2e/containerd.pid").ok()?.trim().parse().ok()
}

/// A `podwarden run` the bench started in its own directory: killed and
/// the directory removed when dropped.
pub struct Agent {
    pub dir: PathBuf,
    pub child: Child,
}

impl Agent {
    /// Start the installed (or `$PODWARDEN_BIN`) `podwarden run` for the
    /// bench `bench` in a fresh directory: manifests, root, logs and the
    /// API socket in it, node `bench`, on the private containerd, with the
    /// `extra` config lines; its stderr goes to `stderr`.
    pub fn start(bench: &str, extra: &str, stderr: Stdio) -> Agent {
        let bin = bin(bench);
        let dir = std::env::temp_dir().join(format!("podwarden-bench-{bench}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("manifests")).unwrap();
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "staticPodPath: {0}/manifests\ncontainerRuntimeEndpoint: unix://{1}\nrootDir: {0}/root\npodLogsDir: {0}/logs\napiSocket: {0}/api.sock\nnodeName: bench\n{extra}",
                dir.display(),
                socket(),
            ),
        )
        .unwrap();
        let child = Command::new(&bin)
            .args(["run", "--config", config.to_str().unwrap()])
            // warnings, unless PODWARDEN_BENCH_LOG says otherwise (a `RUST_LOG` filter)
            .env("RUST_LOG", std::env::var("PODWARDEN_BENCH_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        Agent { dir, child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The agent's API socket.
    pub fn api(&self) -> PathBuf {
        self.dir.join("api.sock")
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Write `dir/manifests/file` as editors and `apply` do: a temporary file
/// renamed over it.
pub fn write_atomically(dir: &Path, file: &str, text: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join("manifests").join(file)).unwrap();
}

/// A process's CPU time as the scheduler counts it, to the nanosecond: the
/// process is moved into a cgroup of its own (cgroup v1 `cpuacct.usage`,
/// or v2 `cpu.stat`'s `usage_usec`), which also counts its threads that
/// ended. Where no such cgroup can be made it falls back to utime + stime,
/// sampled at each clock tick: an agent using 0.009 cores gets some 135
/// ticks a minute at 250 Hz, give or take a dozen, as much as the 0.001
/// core a bench compares.
pub struct CpuMeter {
    pid: u32,
    /// The cgroup made for the process, its usage file, and the cgroup it
    /// came from (its `cgroup.procs`).
    cgroup: Option<(PathBuf, PathBuf, PathBuf)>,
}

impl CpuMeter {
    pub fn attach(pid: u32) -> CpuMeter {
        let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        let v1 = own.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
            ctl.split(',').any(|c| c == "cpuacct").then(|| (ctl.to_string(), path.to_string()))
        });
        let (base, usage) = match v1 {
            Some((ctl, path)) => (format!("/sys/fs/cgroup/{ctl}{path}"), "cpuacct.usage"),
            None => match own.lines().find_map(|l| l.strip_prefix("0::")) {
                Some(path) => (format!("/sys/fs/cgroup{path}"), "cpu.stat"),
                None => return CpuMeter { pid, cgroup: None },
            },
        };
        let dir = Path::new(&base).join(format!("podwarden-bench-cpu-{pid}"));
        let _ = std::fs::remove_dir(&dir);
        let moved = std::fs::create_dir(&dir).is_ok()
            && std::fs::write(dir.join("cgroup.procs"), pid.to_string()).is_ok()
            && dir.join(usage).exists();
        if !moved {
            let _ = std::fs::remove_dir(&dir);
            println!("cgroup {} cannot be made: CPU from clock ticks", dir.display());
            return CpuMeter { pid, cgroup: None };
        }
        CpuMeter { pid, cgroup: Some((dir.clone(), dir.join(usage), Path::new(&base).join("cgroup.procs"))) }
    }

    /// CPU seconds so far (in the cgroup: since [`CpuMeter::attach`]).
    pub fn seconds(&self) -> f64 {
        match &self.cgroup {
            None => cpu_ticks(self.pid) as f64 / podwarden::sys::clock_ticks_per_second() as f64,
            Some((_, usage, _)) => {
                let text = std::fs::read_to_string(usage).unwrap();
                match text.lines().find_map(|l| l.strip_prefix("usage_usec ")) {
                    Some(us) => us.trim().parse::<f64>().unwrap() / 1e6,
                    None => text.trim().parse::<f64>().unwrap() / 1e9,
                }
            }
        }
    }

    /// How the time is counted, for the bench's output.
    pub fn how(&self) -> &'static str {
        if self.cgroup.is_some() { "the scheduler's time (cgroup)" } else { "clock ticks" }
    }
}

impl Drop for CpuMeter {
    fn drop(&mut self) {
        if let Some((dir, _, back)) = self.cgroup.take() {
            let _ = std::fs::write(back, self.pid.to_string());
            let _ = std::fs::remove_dir(dir);
        }
    }
}

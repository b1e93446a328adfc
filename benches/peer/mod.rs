//! The real kubelet beside podwarden (issue 41): each agent, alone in turn,
//! runs the same static pods on the same private containerd
//! (`scripts/e2e-env.sh`), with the same node name and the same manifest
//! directory (a static pod's UID hashes its file's path), and answers on a
//! read-only port. Used by `benches/peer_diff.rs` (the kubelet as the
//! oracle for pod status) and `benches/peer.rs` (the figures side by side).
//!
//! The kubelet is `tools/cluster`'s build of `k8s.io/kubernetes`'s
//! `cmd/kubelet` (`scripts/peer-diff.sh` and `scripts/bench.sh peer` build
//! it), run standalone: no API server, `--config` with `staticPodPath`.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use podwarden::runtime::Runtime;
use podwarden::runtime::cri::CriRuntime;

use crate::support::{call, socket};

/// Both agents' node name: static pods are named `NAME-peer`.
pub const NODE: &str = "peer";
/// Where both agents read manifests and keep their state, in turn.
pub const DIR: &str = "/var/lib/podwarden-peer";
/// The kubelet's pod cgroups go under this root (each v1 hierarchy, or
/// the v2 tree), so nothing of its mixes with podwarden's `kubepods`.
pub const KUBELET_CGROUP_ROOT: &str = "podwarden-peer";
/// The disk thresholds absolute for both, so how full this machine's disk
/// is decides nothing; memory as both agents' default.
pub const EVICTION: &str = "evictionHard: {memory.available: 100Mi, nodefs.available: 512Mi, nodefs.inodesFree: 1%, imagefs.available: 512Mi}\n";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Kubelet,
    Podwarden,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Kubelet => "kubelet",
            Kind::Podwarden => "podwarden",
        }
    }
}

/// One agent running in [`DIR`]: killed (SIGKILL, pods left running, as
/// after a crash) when dropped; [`Side::stop`] first for a clean stop.
pub struct Side {
    pub kind: Kind,
    pub child: Child,
    pub read_only: SocketAddr,
    pub started: Instant,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The kubelet binary: `$PODWARDEN_KUBELET`, else tools/cluster's build.
pub fn kubelet_bin() -> PathBuf {
    let p = std::env::var("PODWARDEN_KUBELET")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/cluster-bin/kubelet"));
    assert!(
        p.exists(),
        "{} is missing: build it with `PODWARDEN_CLUSTER_KUBELET=1 tools/cluster/build.sh` (scripts/peer-diff.sh does)",
        p.display()
    );
    p
}

/// podwarden: `$PODWARDEN_BIN`, else the binary this target was built with.
pub fn podwarden_bin() -> PathBuf {
    std::env::var("PODWARDEN_BIN").map(PathBuf::from).unwrap_or_else(|_| env!("CARGO_BIN_EXE_podwarden").into())
}

pub fn manifests() -> PathBuf {
    Path::new(DIR).join("manifests")
}

pub fn logs() -> PathBuf {
    Path::new(DIR).join("logs")
}

/// The cgroup v1 hierarchies (or the v2 root) under which the kubelet's
/// root is made and removed.
fn cgroup_bases() -> Vec<PathBuf> {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        return vec![PathBuf::from("/sys/fs/cgroup")];
    }
    ["cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb", "blkio", "devices", "freezer", "systemd"]
        .iter()
        .map(|c| Path::new("/sys/fs/cgroup").join(c))
        .filter(|p| p.is_dir())
        .collect()
}

/// The kubelet's cgroup root ([`KUBELET_CGROUP_ROOT`]) in each hierarchy:
/// the kubelet wants it to exist.
pub fn make_kubelet_cgroup_root() {
    for base in cgroup_bases() {
        let root = base.join(KUBELET_CGROUP_ROOT);
        std::fs::create_dir_all(&root).unwrap();
        // a new v1 cpuset holds no CPU and no memory node
        for f in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(v) = std::fs::read_to_string(base.join(f)) {
                let _ = std::fs::write(root.join(f), v.trim());
            }
        }
    }
}

/// Remove `dir` and every cgroup under it, deepest first.
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Every sandbox and container of the private containerd stopped and
/// removed, and the kubelet's cgroup root gone: the state each side
/// starts from.
pub fn clear_runtime() {
    let cri = CriRuntime::connect(&format!("unix://{}", socket()), Duration::from_secs(5))
        .expect("connect to the e2e containerd");
    for round in 0.. {
        let pods = cri.list_pods(&call()).expect("list the e2e containerd's pods");
        if pods.is_empty() {
            break;
        }
        assert!(round < 3, "the e2e containerd still holds pods after three rounds of removal: {pods:?}");
        for rp in &pods {
            crate::support::remove_pod(&cri, rp);
        }
    }
    for base in cgroup_bases() {
        remove_cgroup_tree(&base.join(KUBELET_CGROUP_ROOT));
    }
    remove_kubelet_iptables();
}

/// The iptables chains a kubelet started with `makeIPTablesUtilChains`
/// (its default) leaves behind when it stops: `KUBE-FIREWALL`, jumped to
/// from `INPUT` and `OUTPUT`, drops packets to 127.0.0.0/8 that did not
/// come from loopback (other tests on this machine route to local
/// addresses), and the `KUBE-KUBELET-CANARY` and `KUBE-IPTABLES-HINT`
/// chains. The peers run with that setting off ([`kubelet_common`]); this
/// removes what a run from before, or one killed mid-way, left.
pub fn remove_kubelet_iptables() {
    let run = |tool: &str, args: &[&str]| {
        Command::new(tool).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    };
    for tool in ["iptables", "ip6tables"] {
        for from in ["INPUT", "OUTPUT"] {
            // a jump added once per start: remove every copy
            for _ in 0..64 {
                if !run(tool, &["-w", "5", "-t", "filter", "-D", from, "-j", "KUBE-FIREWALL"]) {
                    break;
                }
            }
        }
        let chains = [
            ("filter", "KUBE-FIREWALL"),
            ("mangle", "KUBE-KUBELET-CANARY"),
            ("nat", "KUBE-KUBELET-CANARY"),
            ("filter", "KUBE-KUBELET-CANARY"),
            ("mangle", "KUBE-IPTABLES-HINT"),
        ];
        for (table, chain) in chains {
            if run(tool, &["-w", "5", "-t", table, "-F", chain]) {
                run(tool, &["-w", "5", "-t", table, "-X", chain]);
            }
        }
    }
}

/// A fresh [`DIR`] holding `files` (name, text) in its manifest directory.
pub fn prepare(files: &[(String, String)]) {
    let _ = umount_under(Path::new(DIR));
    let _ = std::fs::remove_dir_all(DIR);
    std::fs::create_dir_all(manifests()).unwrap();
    std::fs::create_dir_all(logs()).unwrap();
    for (name, text) in files {
        std::fs::write(manifests().join(name), text).unwrap();
    }
}

/// Unmount what an agent killed mid-way left mounted under `dir` (tmpfs
/// volumes, the kubelet's projected volumes), deepest first.
pub fn umount_under(dir: &Path) -> std::io::Result<()> {
    let prefix = format!("{}/", dir.display());
    let mut points: Vec<String> = std::fs::read_to_string("/proc/self/mounts")?
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .filter(|m| m.starts_with(&prefix))
        .map(|m| m.replace("\\040", " "))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let _ = Command::new("umount").arg("-l").arg(&p).status();
    }
    Ok(())
}

/// The kubelet's `--node-ip`: this host's source address toward its IPv4
/// default route, the address the kubelet falls back to itself. Without
/// it, the standalone kubelet builds its node's addresses at every pod's
/// admission, on its sync loop, and first looks the node's name up in DNS
/// (`nodestatus.NodeAddress`); here that lookup sometimes waits 5 s for
/// the resolver, which held 15 of 30 pods back by 5 s (its goroutines,
/// taken during the stall, showed the sync loop in `net.LookupIP`). A
/// node's admin sets `--node-ip` or makes the name resolve; the bench does
/// the first.
fn host_ip() -> Option<String> {
    let out = Command::new("ip").args(["-4", "route", "get", "1.1.1.1"]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == "src" {
            return words.next().map(str::to_string);
        }
    }
    None
}

impl Side {
    /// Start `kind` on [`DIR`] (already prepared); its log goes to
    /// `DIR/KIND.log`. Waits until its read-only port answers `/healthz`.
    pub fn start(kind: Kind) -> Side {
        let (ro, port, healthz) = (free_port(), free_port(), free_port());
        let dir = Path::new(DIR);
        let log = std::fs::File::create(dir.join(format!("{}.log", kind.name()))).unwrap();
        let mut cmd = match kind {
            Kind::Kubelet => {
                make_kubelet_cgroup_root();
                let config = dir.join("kubelet.yaml");
                std::fs::write(&config, kubelet_config(ro, port, healthz)).unwrap();
                let mut c = Command::new(kubelet_bin());
                c.arg(format!("--config={}", config.display()))
                    .arg(format!("--root-dir={}/root", DIR))
                    .arg(format!("--cert-dir={}/pki", DIR))
                    .arg(format!("--hostname-override={NODE}"))
                    // events reach only the log without an API server:
                    // `Event occurred` lines at level 3
                    .arg("--v=3");
                match host_ip() {
                    Some(ip) => c.arg(format!("--node-ip={ip}")),
                    None => {
                        eprintln!(
                            "peer: no IPv4 default route: the kubelet looks its node name up in DNS at each admission"
                        );
                        &mut c
                    }
                };
                c
            }
            Kind::Podwarden => {
                let config = dir.join("podwarden.yaml");
                std::fs::write(
                    &config,
                    format!(
                        "staticPodPath: {DIR}/manifests\ncontainerRuntimeEndpoint: unix://{}\nrootDir: {DIR}/root\n\
                         podLogsDir: {DIR}/logs\napiSocket: {DIR}/api.sock\nnodeName: {NODE}\naddress: 127.0.0.1\n\
                         readOnlyPort: {ro}\nport: {port}\n{EVICTION}",
                        socket()
                    ),
                )
                .unwrap();
                let mut c = Command::new(podwarden_bin());
                c.args(["run", "--config", config.to_str().unwrap()]).env("RUST_LOG", "info");
                c
            }
        };
        let child = cmd.stdin(Stdio::null()).stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap();
        let mut side = Side { kind, child, read_only: SocketAddr::from(([127, 0, 0, 1], ro)), started: Instant::now() };
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            if get(side.read_only, "/healthz", Duration::from_secs(2)).is_some_and(|(c, _)| c == 200) {
                break;
            }
            if let Ok(Some(st)) = side.child.try_wait() {
                panic!("{} exited at its start ({st}):\n{}", kind.name(), side.log_tail(40));
            }
            assert!(Instant::now() < end, "{} not healthy 60 s after its start:\n{}", kind.name(), side.log_tail(40));
            std::thread::sleep(Duration::from_millis(50));
        }
        side.started = Instant::now();
        side
    }

    /// The pods on its read-only port's `/pods` (the kubelet fills in its
    /// static pods' status there, having no API server to send it to).
    pub fn pods(&self) -> Vec<serde_json::Value> {
        let (code, body) = get(self.read_only, "/pods", Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{}: no answer from /pods", self.kind.name()));
        assert_eq!(code, 200, "{}: /pods: {body}", self.kind.name());
        let v: serde_json::Value = serde_json::from_str(&body).expect("/pods is JSON");
        v["items"].as_array().cloned().unwrap_or_default()
    }

    pub fn log_tail(&self, n: usize) -> String {
        let text =
            std::fs::read_to_string(Path::new(DIR).join(format!("{}.log", self.kind.name()))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// SIGTERM, and wait up to 30 s (both agents leave their pods running).
    pub fn stop(mut self) {
        let _ = podwarden::sys::kill(self.child.id() as i32, libc::SIGTERM);
        let end = Instant::now() + Duration::from_secs(30);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kubelet_config(ro: u16, port: u16, healthz: u16) -> String {
    // - anonymous authentication and AlwaysAllow: the read-only port
    //   needs none, the secure one is not used (loopback only)
    let auth =
        "authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}\nauthorization: {mode: AlwaysAllow}\n";
    format!(
        "staticPodPath: {DIR}/manifests\npodLogsDir: {DIR}/logs\n{}",
        kubelet_common("127.0.0.1", port, ro, healthz, auth)
    )
}

/// What both of the kubelet's configurations (standalone, joined) hold.
/// Each setting the host needs, and why:
/// - cgroupDriver cgroupfs: this host has no systemd (and cgroup v1);
/// - failCgroupV1 false: the kubelet refuses cgroup v1 otherwise (1.31+);
/// - failSwapOn false: a machine with swap must not stop the peer;
/// - cgroupRoot: its pod cgroups apart from podwarden's `kubepods`;
/// - resolvConf: the host's, as podwarden's default;
/// - evictionHard: as for podwarden, absolute disk thresholds;
/// - makeIPTablesUtilChains false: its `KUBE-FIREWALL` chain outlives it
///   and drops other tests' traffic to local addresses (and its canary
///   check each minute is not part of a pod's lifecycle).
pub fn kubelet_common(address: &str, port: u16, ro: u16, healthz: u16, auth: &str) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         containerRuntimeEndpoint: unix://{}\n\
         address: {address}\nport: {port}\nreadOnlyPort: {ro}\nhealthzBindAddress: 127.0.0.1\nhealthzPort: {healthz}\n\
         {auth}cgroupDriver: cgroupfs\ncgroupRoot: /{KUBELET_CGROUP_ROOT}\nfailCgroupV1: false\nfailSwapOn: false\n\
         resolvConf: /etc/resolv.conf\nmakeIPTablesUtilChains: false\n{EVICTION}",
        socket()
    )
}

/// One `GET path` (HTTP/1.0, so the server closes and does not chunk): the
/// status and the body, or None when no answer came within `timeout`.
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: peer\r\n\r\n").ok()?;
    let mut out = Vec::new();
    s.take(64 << 20).read_to_end(&mut out).ok()?;
    let out = String::from_utf8_lossy(&out);
    let (head, body) = out.split_once("\r\n\r\n")?;
    let code = head.split(' ').nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

//! Both agents joined to the real control plane of `scripts/cluster-env.sh
//! up` (issue 41), each alone in turn on the same private containerd:
//! podwarden with `podwarden join` and `podwarden run`, the kubelet as
//! kubeadm joins one (a bootstrap kubeconfig with the cluster's bootstrap
//! token, its client certificate from a CSR the controller-manager
//! approves and signs, a self-signed serving certificate). Each serves the
//! API server on the nodes' routable address and authenticates it the
//! same way: client certificates of the cluster's CA, a TokenReview for a
//! bearer token, a SubjectAccessReview for every request.
//!
//! Per side and round:
//! - `status_lag_ms`: bare pods with `spec.nodeName` made one at a time
//!   through the API; from the container's start as containerd records it
//!   to the moment a watch of the namespace receives the pod Running (both
//!   wall clocks of this machine). The median of [`PODS`] pods, and the
//!   slowest as `status_lag_max_ms`;
//! - `exec_via_apiserver_ms`: `kubectl exec POD -- true` as the cluster's
//!   admin (kubectl, the API server, the agent's exec relay, containerd's
//!   stream server): the median of [`EXECS`] after one unmeasured.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use podwarden::runtime::cri::CriRuntime;
use podwarden::runtime::{ContainerState, Runtime};
use serde_json::json;

use crate::peer::{self, Kind};
use crate::support::cluster::{
    self as cl, Cluster, Node, Seen, Spot, api, api_ok, clean_leftovers, make_namespace, median, node_state, wait,
    watch_running,
};
use crate::support::{IMAGE, call};

/// Pods whose status lag is measured, per side and round.
pub const PODS: usize = 20;
/// `kubectl exec`s measured, per side and round.
pub const EXECS: usize = 10;
const RUN: &str = "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done";
const PREPARE: &str = "run `scripts/bench.sh peer` (it starts scripts/e2e-env.sh and scripts/cluster-env.sh)";

/// Each side's node; its name is also its pods' namespace.
pub static KUBELET: Spot = Spot {
    node: "peer-kubelet",
    ns: "peer-kubelet",
    work: "/var/lib/podwarden-peer-cluster/kubelet",
    max_pods: 110,
    prepare: PREPARE,
};
pub static PODWARDEN: Spot = Spot {
    node: "peer-podwarden",
    ns: "peer-podwarden",
    work: "/var/lib/podwarden-peer-cluster/podwarden",
    max_pods: 110,
    prepare: PREPARE,
};

pub fn spot(kind: Kind) -> &'static Spot {
    match kind {
        Kind::Kubelet => &KUBELET,
        Kind::Podwarden => &PODWARDEN,
    }
}

/// The control plane (a panic saying how to start it when it is missing).
pub fn control_plane() -> Cluster {
    cl::cluster(&KUBELET)
}

/// The kubelet joined: killed, its pods, Node and namespace removed when
/// dropped.
struct JoinedKubelet {
    child: Child,
    admin: podwarden::cluster::http::Client,
}

impl JoinedKubelet {
    fn start(c: &Cluster) -> JoinedKubelet {
        let dir = KUBELET.work();
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        // the bootstrap kubeconfig kubeadm join writes: the cluster's CA,
        // the bootstrap token
        let boot = dir.join("bootstrap-kubelet.conf");
        std::fs::write(
            &boot,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{}\", certificate-authority: {}}}\n\
                 users:\n- name: boot\n  user: {{token: {}}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: boot}}\n\
                 current-context: c\n",
                c.server,
                c.ca.display(),
                c.token
            ),
        )
        .unwrap();
        // kubeadm's authentication and authorization: x509 of the cluster's
        // CA, webhooks to the API server, no anonymous requests
        let auth = format!(
            "authentication: {{anonymous: {{enabled: false}}, webhook: {{enabled: true}}, x509: {{clientCAFile: {}}}}}\n\
             authorization: {{mode: Webhook}}\npodLogsDir: {}/logs\n",
            c.ca.display(),
            dir.display()
        );
        let config = dir.join("config.yaml");
        let (port, healthz) = (peer::free_port(), peer::free_port());
        std::fs::write(&config, peer::kubelet_common(&c.node_ip, port, 0, healthz, &auth)).unwrap();
        peer::make_kubelet_cgroup_root();
        let log = std::fs::File::create(dir.join("agent.log")).unwrap();
        let child = Command::new(peer::kubelet_bin())
            .arg(format!("--config={}", config.display()))
            .arg(format!("--bootstrap-kubeconfig={}", boot.display()))
            .arg(format!("--kubeconfig={}/kubelet.conf", dir.display()))
            .arg(format!("--cert-dir={}/pki", dir.display()))
            .arg(format!("--root-dir={}/root", dir.display()))
            .arg(format!("--hostname-override={}", KUBELET.node))
            .arg(format!("--node-ip={}", c.node_ip))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        std::fs::write(dir.join("agent.pid"), child.id().to_string()).unwrap();
        let mut k = JoinedKubelet { child, admin: c.admin.clone() };
        let end = Instant::now() + Duration::from_secs(120);
        while !node_state(&c.admin, KUBELET.node).1 {
            if let Ok(Some(st)) = k.child.try_wait() {
                panic!("the kubelet exited at its start ({st}):\n{}", KUBELET.log_tail());
            }
            assert!(Instant::now() < end, "the kubelet's Node not Ready within 120 s:\n{}", KUBELET.log_tail());
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = k.child.try_wait();
        k
    }
}

impl Drop for JoinedKubelet {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("cleaning up after a failure; the kubelet's log ends:\n{}", KUBELET.log_tail());
        }
        let (ns, node) = (KUBELET.ns, KUBELET.node);
        let _ = api(
            &self.admin,
            "DELETE",
            &format!("/api/v1/namespaces/{ns}/pods"),
            Some(&json!({"gracePeriodSeconds": 0})),
        );
        let cri = CriRuntime::connect(&format!("unix://{}", cl::e2e_socket()), Duration::from_secs(5)).ok();
        if let Some(cri) = &cri {
            let end = Instant::now() + Duration::from_secs(60);
            while !cl::runtime_pods(cri, ns).is_empty() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(cri) = &cri {
            cl::remove_runtime_pods(cri, ns);
        }
        let _ = api(&self.admin, "DELETE", &format!("/api/v1/nodes/{node}"), None);
        let _ = api(&self.admin, "DELETE", &format!("/api/v1/namespaces/{ns}"), None);
        let _ = peer::umount_under(&KUBELET.work());
        let _ = std::fs::remove_dir_all(KUBELET.work());
    }
}

/// One side's agent, joined.
enum Joined {
    Kubelet(JoinedKubelet),
    Podwarden(Box<Node>),
}

/// The container `main`'s start, as containerd records it, of pod `name`
/// of namespace `ns` (None until it runs).
fn started_ns(cri: &CriRuntime, ns: &str, name: &str) -> Option<i64> {
    let pods = cri.list_pods(&call()).ok()?;
    let p = pods.iter().find(|p| p.namespace == ns && p.name == name)?;
    let st = cri.pod_status(&call(), &p.uid).ok()?;
    st.containers.iter().find(|c| c.name == "main" && c.state == ContainerState::Running).map(|c| c.started_at_ns)
}

fn kubectl(c: &Cluster, args: &[&str]) -> std::process::Output {
    Command::new("kubectl")
        .arg(format!("--kubeconfig={}", c.admin_kubeconfig.display()))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("kubectl runs")
}

/// One side's figures of one round, joined to the control plane.
pub fn round(kind: Kind, c: &Cluster) -> BTreeMap<&'static str, f64> {
    let spot = spot(kind);
    let cri = cl::cri(spot);
    clean_leftovers(c, &cri, spot);
    peer::clear_runtime();
    std::fs::create_dir_all(spot.work()).unwrap();
    make_namespace(c, spot.ns);
    let seen = Arc::new(Seen::default());
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_running(c.admin.clone(), spot.ns, seen.clone(), stop.clone());
    let joined = match kind {
        Kind::Kubelet => Joined::Kubelet(JoinedKubelet::start(c)),
        Kind::Podwarden => {
            let bin = peer::podwarden_bin();
            let cri = cl::cri(spot);
            Joined::Podwarden(Box::new(cl::join(c, cri, bin.to_str().unwrap(), spot, &c.server, &c.node_ip).0))
        }
    };
    let pid = match &joined {
        Joined::Kubelet(k) => k.child.id(),
        Joined::Podwarden(n) => n.pid(),
    };

    // a container started → its status in the API, one pod at a time
    let mut lags = Vec::new();
    for i in 0..PODS {
        let name = format!("lag-{i:02}");
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": spot.ns},
            "spec": {
                "nodeName": spot.node,
                "automountServiceAccountToken": false,
                "terminationGracePeriodSeconds": 5,
                "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", RUN]}],
            },
        });
        api_ok(&c.admin, "POST", &format!("/api/v1/namespaces/{}/pods", spot.ns), Some(&pod), &[201]);
        let (_, seen_ns) = seen
            .wait_both(&name, Duration::from_secs(120))
            .unwrap_or_else(|| panic!("{}: pod {name} not Running in the API within 120 s", kind.name()));
        let mut started = None;
        wait(
            &format!("{}: pod {name}'s start in containerd", kind.name()),
            Duration::from_secs(30),
            Duration::from_millis(100),
            || {
                started = started_ns(&cri, spot.ns, &name);
                started.is_some()
            },
        );
        lags.push((seen_ns - started.unwrap()) as f64 / 1e6);
        std::thread::sleep(Duration::from_millis(300));
    }

    // kubectl exec through the API server; the first one unmeasured
    let mut execs = Vec::new();
    for i in 0..=EXECS {
        let t0 = Instant::now();
        let out = kubectl(c, &["-n", spot.ns, "exec", "lag-00", "--", "true"]);
        let took = t0.elapsed().as_secs_f64() * 1e3;
        assert!(out.status.success(), "{}: kubectl exec: {}", kind.name(), String::from_utf8_lossy(&out.stderr));
        if i > 0 {
            execs.push(took);
        }
    }
    let rss = crate::support::proc_status(pid, "VmRSS:") as f64;

    stop.store(true, Ordering::SeqCst);
    let _ = watcher.join();
    drop(joined);
    peer::clear_runtime();
    let mut out = BTreeMap::new();
    out.insert("status_lag_ms", median(&lags));
    out.insert("status_lag_max_ms", lags.iter().copied().fold(0.0, f64::max));
    out.insert("exec_via_apiserver_ms", median(&execs));
    out.insert("rss_kib_joined", rss);
    out
}

/// Whether the bench's joined part runs (`PODWARDEN_PEER_CLUSTER=0` skips
/// it, and says so in the JSON: `joined_rounds` 0).
pub fn wanted() -> bool {
    std::env::var("PODWARDEN_PEER_CLUSTER").map_or(true, |v| v != "0")
}

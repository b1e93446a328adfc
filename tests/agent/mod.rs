//! The real `podwarden` binary as a test sees it: started with a generated
//! config against the private containerd that `scripts/e2e-env.sh up`
//! starts, observed through the CRI and its read-only HTTP endpoint.
#![allow(dead_code, unused_imports)]

pub use std::io::{Read, Write};
pub use std::path::{Path, PathBuf};
pub use std::process::{Child, Command, Stdio};
pub use std::time::{Duration, Instant};

pub use crate::common::{TempDir, assert_holds_for, poll_until, wait_for};
pub use parking_lot::Mutex;

pub mod kubectl;
pub use podwarden::runtime::cri::CriRuntime;
pub use podwarden::runtime::{CallCtx, ContainerState, Runtime, RuntimePod, SandboxConfig};
pub use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_podwarden");
pub const IMAGE: &str = "localhost/busybox:e2e";
pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn socket() -> String {
    let s = std::env::var("PODWARDEN_E2E_SOCKET").unwrap_or_else(|_| "/run/podwarden-e2e/containerd.sock".into());
    assert!(
        Path::new(&s).exists(),
        "the end-to-end environment is not running ({s} is missing): prepare it with `sudo scripts/e2e-env.sh up` \
         (scripts/test.sh does this before the tests)"
    );
    s
}

/// The e2e environment's run directory (`PODWARDEN_E2E_RUN`, as
/// `scripts/e2e-env.sh` has it): its containerd's pid file is there.
pub fn e2e_run() -> String {
    std::env::var("PODWARDEN_E2E_RUN").unwrap_or_else(|_| "/run/podwarden-e2e".into())
}

/// The e2e containerd's pid (from the pid file `scripts/e2e-env.sh` writes).
pub fn containerd_pid() -> Option<i32> {
    std::fs::read_to_string(format!("{}/containerd.pid", e2e_run())).ok()?.trim().parse().ok()
}

/// The pods' CNI range's first two octets (`PODWARDEN_E2E_SUBNET`, as
/// `scripts/e2e-env.sh` has it), with the dot: `10.89.`.
pub fn pod_ip_prefix() -> String {
    let subnet = std::env::var("PODWARDEN_E2E_SUBNET").unwrap_or_else(|_| "10.89.0.0/16".into());
    let octets: Vec<&str> = subnet.split('.').take(2).collect();
    format!("{}.", octets.join("."))
}

pub fn cri() -> CriRuntime {
    CriRuntime::connect(&format!("unix://{}", socket()), Duration::from_secs(5)).expect("connect to the e2e containerd")
}

pub fn call() -> CallCtx {
    CallCtx::background(Duration::from_secs(30))
}

/// Stop and remove every podwarden-labelled sandbox (and so its
/// containers) in the private containerd.
pub fn clear_runtime(cri: &CriRuntime) {
    let pods = cri.list_pods(&call()).expect("list the e2e containerd's pods");
    for rp in pods {
        for sb in &rp.sandboxes {
            eprintln!("e2e: removing leftover sandbox {} of pod {}/{} ({})", sb.id, rp.namespace, rp.name, rp.uid);
            cri.stop_sandbox(&call(), &sb.id).expect("stop a leftover sandbox");
            cri.remove_sandbox(&call(), &sb.id).expect("remove a leftover sandbox");
        }
    }
    let left = cri.list_pods(&call()).expect("list the e2e containerd's pods");
    assert!(left.iter().all(|rp| rp.sandboxes.is_empty() && rp.containers.is_empty()), "left over: {left:?}");
}

/// A listener on a free loopback port (held until dropped).
pub fn bind_free() -> std::net::TcpListener {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap()
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub struct Agent {
    pub dir: TempDir,
    pub port: u16,
    /// The Kubernetes API's port (HTTPS).
    pub kube_port: u16,
    pub child: Option<Child>,
    pub cri: CriRuntime,
    /// Config lines added to the generated config.
    pub extra_config: String,
    /// Environment for the daemon.
    pub env: Vec<(String, String)>,
    /// Arguments after `run --config FILE` (cluster mode's kubeconfigs).
    pub run_args: Vec<String>,
}

impl Agent {
    pub fn start(tag: &str) -> Self {
        Self::start_with(tag, "", &[])
    }

    /// Start with `extra` config lines and `env` for the daemon, on a
    /// runtime cleared of pods an earlier test or `scripts/demo.sh` left
    /// behind (a new agent would count them as its orphans).
    pub fn start_with(tag: &str, extra: &str, env: &[(&str, &str)]) -> Self {
        Self::launch(tag, extra, env, &[], |_| {})
    }

    /// Start as [`Agent::start_with`] with `args` after `run --config FILE`.
    #[allow(dead_code)]
    pub fn start_args(tag: &str, extra: &str, args: &[&str]) -> Self {
        Self::launch(tag, extra, &[], args, |_| {})
    }

    /// Start as [`Agent::start_with`], after `prepare` has seen the agent's
    /// directory (to mount a small filesystem as its root, say).
    #[allow(dead_code)]
    pub fn start_prepared(tag: &str, extra: &str, prepare: impl FnOnce(&Path)) -> Self {
        Self::launch(tag, extra, &[], &[], prepare)
    }

    fn launch(tag: &str, extra: &str, env: &[(&str, &str)], args: &[&str], prepare: impl FnOnce(&Path)) -> Self {
        let dir = TempDir::new(&format!("e2e-{tag}"));
        std::fs::create_dir_all(dir.0.join("manifests")).unwrap();
        prepare(&dir.0);
        let cri = cri();
        clear_runtime(&cri);
        // two ports held at once: picked one after the other, the kernel
        // may hand the same free port out twice (it did, in a full run)
        let (ro, kube) = (bind_free(), bind_free());
        let (port, kube_port) = (ro.local_addr().unwrap().port(), kube.local_addr().unwrap().port());
        drop((ro, kube));
        let mut a = Agent {
            port,
            kube_port,
            dir,
            child: None,
            cri,
            extra_config: extra.to_string(),
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            run_args: args.iter().map(|a| a.to_string()).collect(),
        };
        a.spawn();
        a
    }

    pub fn manifests(&self) -> PathBuf {
        self.dir.0.join("manifests")
    }

    pub fn api_socket(&self) -> PathBuf {
        self.dir.0.join("api.sock")
    }

    pub fn root(&self) -> PathBuf {
        self.dir.0.join("root")
    }

    pub fn spawn(&mut self) {
        let config = self.dir.0.join("config.yaml");
        let base = format!(
            "staticPodPath: {}\ncontainerRuntimeEndpoint: unix://{}\nrootDir: {}\napiSocket: {}\npodLogsDir: {}\nnodeName: e2e\nfileCheckFrequency: 2s\nhousekeepingInterval: 500ms\nsyncFrequency: 5s\naddress: 127.0.0.1\nreadOnlyPort: {}\nport: {}\n{}",
            self.manifests().display(),
            socket(),
            self.root().display(),
            self.api_socket().display(),
            self.dir.0.join("logs").display(),
            self.port,
            self.kube_port,
            crate::common::EVICTION
        );
        // a key the test's extra lines set replaces the default line
        let overridden = |line: &str| {
            let key = line.split(':').next().unwrap_or_default();
            self.extra_config.lines().any(|l| l.split(':').next() == Some(key))
        };
        let kept: String = base.lines().filter(|l| !overridden(l)).map(|l| format!("{l}\n")).collect();
        std::fs::write(&config, kept + &self.extra_config).unwrap();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.0.join("podwarden.log")).unwrap();
        let child = Command::new(BIN)
            .args(["run", "--config", config.to_str().unwrap()])
            .args(&self.run_args)
            .env("RUST_LOG", std::env::var("PODWARDEN_TEST_LOG").unwrap_or_else(|_| "info".into()))
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        // refused until the agent listens: the one place no answer is expected
        wait_for("the agent's HTTP endpoint", Duration::from_secs(20), || {
            self.try_get("/healthz").is_ok_and(|(code, _)| code == 200)
        });
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("podwarden.log")).unwrap_or_default()
    }

    /// `GET path` on the read-only port: the status code and body of the
    /// answer, or why there was none (connection refused, timed out, not
    /// an HTTP answer). For waiting on the agent's start and for a test that
    /// wants to see it down.
    pub fn try_get(&self, path: &str) -> Result<(u16, String), String> {
        // the address the test's config gives the agent, else loopback
        let host = self
            .extra_config
            .lines()
            .find_map(|l| l.strip_prefix("address:"))
            .map(str::trim)
            .filter(|a| *a != "0.0.0.0")
            .unwrap_or("127.0.0.1")
            .to_string();
        let mut s = std::net::TcpStream::connect((host.as_str(), self.port)).map_err(|e| format!("connect: {e}"))?;
        // generous: a slow answer is not a missing one
        s.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").map_err(|e| format!("send: {e}"))?;
        let mut out = String::new();
        s.read_to_string(&mut out).map_err(|e| format!("read: {e} (after {out:?})"))?;
        let (head, body) = out.split_once("\r\n\r\n").ok_or_else(|| format!("no HTTP head in {out:?}"))?;
        let code = head
            .strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.get(..3))
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("no HTTP status line in {head:?}"))?;
        Ok((code, body.to_string()))
    }

    /// The body of a 200 answer to `GET path`; `None` for an answer with
    /// another status (404, `/healthz` 500 when unhealthy, `/stats/summary`
    /// 503 before the first stats). No answer at all is a failure, not an
    /// absence: it panics (the agent's log follows, from `Drop`).
    pub fn get(&self, path: &str) -> Option<String> {
        match self.try_get(path) {
            Ok((200, body)) => Some(body),
            Ok(_) => None,
            Err(e) => panic!("GET {path} on the agent's port {}: no answer: {e}", self.port),
        }
    }

    /// The pods of `/pods`. Anything but a 200 with a pod list panics: an
    /// empty list must come from the agent, never from a failed request.
    pub fn pods(&self) -> Vec<Value> {
        let (code, body) = self.try_get("/pods").unwrap_or_else(|e| panic!("GET /pods: no answer: {e}"));
        assert_eq!(code, 200, "GET /pods: {body}");
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET /pods: not JSON ({e}): {body}"));
        v["items"].as_array().cloned().unwrap_or_else(|| panic!("GET /pods: no items array: {body}"))
    }

    /// The pod `name` of `/pods`; `None` only when the agent's list lacks it.
    pub fn pod(&self, name: &str) -> Option<Value> {
        self.pods().into_iter().find(|p| p["metadata"]["name"] == name)
    }

    pub fn uid(&self, name: &str) -> String {
        let mut uid = String::new();
        wait_for(&format!("pod {name} in /pods"), Duration::from_secs(20), || {
            uid = self.pod(name).and_then(|p| p["metadata"]["uid"].as_str().map(str::to_string)).unwrap_or_default();
            !uid.is_empty()
        });
        uid
    }

    pub fn runtime_pod(&self, uid: &str) -> RuntimePod {
        self.cri.pod_status(&call(), uid).expect("pod status from containerd")
    }

    pub fn running(&self, uid: &str) -> usize {
        self.runtime_pod(uid).containers.iter().filter(|c| c.state == ContainerState::Running).count()
    }

    /// Running containers of the pod whose first process catches SIGTERM
    /// (for [`TRAPPING`]: its shell has run `trap`). A container's PID 1
    /// ignores a signal it has no handler for, so a pod removed in the
    /// moment between its start and the `trap` waits out its grace period.
    pub fn trapping(&self, uid: &str) -> usize {
        self.runtime_pod(uid)
            .containers
            .iter()
            .filter(|c| c.state == ContainerState::Running && catches_sigterm(&c.id))
            .count()
    }

    pub fn write(&self, file: &str, yaml: &str) {
        let tmp = self.manifests().join(format!(".{file}.tmp"));
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, self.manifests().join(file)).unwrap();
    }

    pub fn remove(&self, file: &str) {
        std::fs::remove_file(self.manifests().join(file)).unwrap();
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Remove every manifest and wait until containerd holds none of our pods.
    pub fn clean_up(&mut self, uids: &[&str]) {
        for e in std::fs::read_dir(self.manifests()).unwrap().flatten() {
            let _ = std::fs::remove_file(e.path());
        }
        if self.child.is_some() {
            wait_for("all pods removed from containerd", Duration::from_secs(60), || {
                uids.iter().all(|u| {
                    let rp = self.runtime_pod(u);
                    rp.sandboxes.is_empty() && rp.containers.is_empty()
                })
            });
            // the pod directories go right after (their mounts first): an
            // agent stopped before that leaves mounts in the temp dir
            wait_for("the pods' directories removed", Duration::from_secs(30), || {
                uids.iter().all(|u| !self.root().join("pods").join(u).exists())
            });
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = podwarden::sys::kill(c.id() as i32, libc::SIGTERM);
            // a clean stop takes milliseconds; SIGKILL after 5 s (no panic in drop)
            poll_until(Duration::from_secs(5), || c.try_wait().ok().flatten().is_some());
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("---- podwarden log ----\n{}", self.log());
        }
    }
}

/// What `out` (a child's stdout) prints, read as it comes by a thread of
/// its own until it ends: the text so far and the thread.
#[allow(dead_code)]
pub fn read_as_it_comes(
    mut out: impl Read + Send + 'static,
) -> (std::sync::Arc<Mutex<String>>, std::thread::JoinHandle<()>) {
    let text = std::sync::Arc::new(Mutex::new(String::new()));
    let t = text.clone();
    let reader = podwarden::base::thread::spawn("test-reader", None, move || {
        let mut buf = [0u8; 65536];
        while let Ok(n @ 1..) = out.read(&mut buf) {
            t.lock().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
    .unwrap();
    (text, reader)
}

pub fn pod_yaml(name: &str, extra_spec: &str, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: e2e\nspec:\n{extra_spec}  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", {command:?}]\n"
    )
}

/// Whether a process of the container `id` (found by its cgroup) has a
/// SIGTERM handler (`SigCgt` in its status).
pub fn catches_sigterm(id: &str) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else { return false };
    procs.flatten().any(|p| {
        let dir = p.path();
        std::fs::read_to_string(dir.join("cgroup")).is_ok_and(|cg| cg.contains(id))
            && std::fs::read_to_string(dir.join("status")).is_ok_and(|st| {
                st.lines()
                    .find_map(|l| l.strip_prefix("SigCgt:"))
                    .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
                    .is_some_and(|m| m & (1 << (15 - 1)) != 0)
            })
    })
}

/// Traps SIGTERM and exits at once.
pub const TRAPPING: &str = "trap 'exit 0' TERM; while :; do sleep 1; done";
/// Ignores SIGTERM: only SIGKILL at the end of the grace period stops it.
pub const STUBBORN: &str = "trap '' TERM; while :; do sleep 1; done";

/// The value of one series in Prometheus text.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
}

/// The private registry `scripts/e2e-env.sh up` starts: its image, host,
/// user and password.
pub struct Registry {
    pub host: String,
    pub image: String,
    pub user: String,
    pub password: String,
}

pub fn registry() -> Registry {
    let var = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let file = var("PODWARDEN_E2E_REGISTRY_PASSWORD_FILE", "/var/lib/podwarden-e2e/registry/password");
    let password = std::fs::read_to_string(&file).unwrap_or_else(|e| {
        panic!("the e2e registry is not set up ({file}: {e}): prepare it with `sudo scripts/e2e-env.sh up`")
    });
    Registry {
        host: var("PODWARDEN_E2E_REGISTRY", "127.0.0.1:5443"),
        image: var("PODWARDEN_E2E_PRIVATE_IMAGE", "127.0.0.1:5443/e2e/busybox:private"),
        user: var("PODWARDEN_E2E_REGISTRY_USER", "podwarden-e2e"),
        password: password.trim().to_string(),
    }
}

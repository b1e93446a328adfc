//! Hostile-input benchmark (`scripts/bench.sh hostile` prepares the private
//! containerd): the podwarden binary against containerd, fed what a hostile
//! local user or container can feed it.
//!
//! - `reject_ms_max`: a 1 MiB YAML alias bomb and an 80k-deep flow sequence,
//!   each through `apply` (the call's round trip) and through a file in
//!   `staticPodPath` (from the rename into the directory to the warning
//!   event naming the file, polled every 2 ms through the API), 3 times each.
//! - `rss_delta_kib_max`: the agent's peak RSS (VmHWM, reset through
//!   `/proc/<pid>/clear_refs` before each input) while it rejects each of
//!   those, minus its RSS before.
//! - `api_ms_p99_during_hostile_apply`: `version` round trips while another
//!   client applies the hostile manifests in a loop.
//! - `healthz_ms_p99_slow_clients`: `/healthz` while 100 clients hold idle or
//!   trickling connections to the read-only port.
//! - `delete_during_start_ms`: the longest `delete` of 10 pods, each deleted
//!   0-270 ms after the agent picked up its applied manifest (while its
//!   sandbox and container are being started).
//! - `termination_log_2gib_rss_delta_kib`: a container makes its
//!   termination-log a 2 GiB (sparse) file ending in a line of text and
//!   fails; the agent's peak RSS until it recorded that line as the
//!   termination message, minus its RSS before (a freed 2 GiB buffer would
//!   not show in VmRSS afterwards, so the peak is what counts).
//!
//! Every client talks to loopback or the agent's unix socket; loops are
//! bounded in count and time. The last line is one JSON object.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use podwarden::cli::client::Client;

mod support;
use support::{IMAGE, print_json, proc_status, socket};

struct Agent {
    dir: PathBuf,
    child: Child,
    http: SocketAddr,
}

impl Agent {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("podwarden-bench-hostile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("manifests")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "staticPodPath: {0}/manifests\ncontainerRuntimeEndpoint: unix://{1}\nrootDir: {0}/root\napiSocket: {0}/api.sock\npodLogsDir: {0}/logs\nnodeName: bench\nreadOnlyPort: {port}\nhousekeepingInterval: 2s\n",
                dir.display(),
                socket()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("agent.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_podwarden"))
            .args(["run", "--config", config.to_str().unwrap()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let agent = Agent { dir, child, http: SocketAddr::from(([127, 0, 0, 1], port)) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(agent.api_socket().exists() && agent.healthz_ms().is_some()) {
            assert!(Instant::now() < deadline, "podwarden did not become healthy: {}", agent.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        agent
    }

    fn api_socket(&self) -> PathBuf {
        self.dir.join("api.sock")
    }

    fn client(&self) -> Client {
        Client::connect(self.api_socket().to_str().unwrap()).unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    fn rss_kib(&self) -> u64 {
        proc_status(self.child.id(), "VmRSS:")
    }

    /// Reset the agent's peak RSS to its current RSS; returns that RSS.
    fn reset_peak(&self) -> u64 {
        std::fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5").unwrap();
        self.rss_kib()
    }

    /// The agent's peak RSS since the last `reset_peak`, minus `base`.
    fn peak_over(&self, base: u64) -> i64 {
        proc_status(self.child.id(), "VmHWM:") as i64 - base as i64
    }

    /// One `/healthz` round trip in ms, `None` unless it says ok.
    fn healthz_ms(&self) -> Option<f64> {
        let t = Instant::now();
        let mut s = TcpStream::connect_timeout(&self.http, Duration::from_secs(5)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        (body.starts_with("HTTP/1.1 200") && body.ends_with("ok")).then(|| ms(t.elapsed()))
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn p99(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() * 99).div_ceil(100)).saturating_sub(1)]
}

/// About 1 MiB of YAML whose aliases would expand to 10^30 nodes.
fn alias_bomb() -> Vec<u8> {
    let mut y = String::from(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bomb\nspec:\n  containers:\n  - name: c\n    image: i\nx0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for i in 1..30 {
        let p = i - 1;
        y.push_str(&format!("x{i}: &a{i} [*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p}]\n"));
    }
    while y.len() < 1024 * 1024 - 64 {
        y.push_str("# padding padding padding padding padding padding padding padding\n");
    }
    y.into_bytes()
}

/// An 80,000-deep flow sequence under an unknown key (160 KB).
fn deep_nesting() -> Vec<u8> {
    let mut y = String::from(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: deep\nspec:\n  containers:\n  - name: c\n    image: i\nx: ",
    );
    y.push_str(&"[".repeat(80_000));
    y.push_str(&"]".repeat(80_000));
    y.push('\n');
    y.into_bytes()
}

/// Milliseconds until the agent reports a warning event naming `file`.
fn reject_via_file(agent: &Agent, client: &Client, name: &str, bytes: &[u8]) -> f64 {
    let tmp = agent.dir.join(format!(".{name}"));
    std::fs::write(&tmp, bytes).unwrap();
    let target = agent.dir.join("manifests").join(name);
    let seen = |c: &Client| c.events(None).unwrap().iter().filter(|e| e.object.contains(name)).count();
    let before = seen(client);
    let t = Instant::now();
    std::fs::rename(&tmp, &target).unwrap();
    while seen(client) == before {
        assert!(t.elapsed() < Duration::from_secs(60), "no event for {name}: {}", agent.log());
        std::thread::sleep(Duration::from_millis(2));
    }
    let took = ms(t.elapsed());
    std::fs::remove_file(&target).unwrap();
    took
}

fn reject_via_apply(client: &Client, bytes: &[u8]) -> f64 {
    let t = Instant::now();
    let r = client.apply(bytes.to_vec(), "hostile.yaml");
    let took = ms(t.elapsed());
    assert!(r.is_err(), "a hostile manifest was accepted: {r:?}");
    took
}

fn pod_yaml(name: &str, policy: &str, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", {command:?}]\n"
    )
}

fn main() {
    let agent = Agent::start();
    let client = agent.client();
    let mut out: BTreeMap<&str, f64> = BTreeMap::new();

    // rejections through apply and the file source, and what they cost
    let inputs = [("bomb.yaml", alias_bomb()), ("deep.yaml", deep_nesting())];
    let (mut reject_max, mut rss_max) = (0f64, 0i64);
    for _ in 0..3 {
        for (name, bytes) in &inputs {
            let base = agent.reset_peak();
            reject_max = reject_max.max(reject_via_apply(&client, bytes));
            rss_max = rss_max.max(agent.peak_over(base));
            let base = agent.reset_peak();
            reject_max = reject_max.max(reject_via_file(&agent, &client, name, bytes));
            rss_max = rss_max.max(agent.peak_over(base));
        }
    }
    out.insert("reject_ms_max", reject_max);
    out.insert("rss_delta_kib_max", rss_max as f64);

    // API latency while another client applies hostile manifests
    let stop = Arc::new(AtomicBool::new(false));
    let applier = {
        let (stop, sock) = (stop.clone(), agent.api_socket());
        let inputs = inputs.clone();
        podwarden::base::thread::spawn("hostile-apply", None, move || {
            let c = Client::connect(sock.to_str().unwrap()).unwrap();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) && n < 2000 {
                let _ = c.apply(inputs[n % 2].1.clone(), "hostile.yaml");
                n += 1;
            }
            n
        })
        .unwrap()
    };
    let mut lat = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        client.version().unwrap();
        lat.push(ms(t.elapsed()));
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    let applied = applier.join().unwrap();
    out.insert("api_ms_p99_during_hostile_apply", p99(lat));
    out.insert("hostile_applies_meanwhile", applied as f64);

    // /healthz with 100 slow clients (half idle, half trickling)
    out.insert("healthz_ms_p99_slow_clients", support::http::healthz_p99_with_slow_clients(agent.http, 100));

    // delete while the pod is starting
    let mut delete_max = 0f64;
    for i in 0..10u64 {
        let name = format!("starting-{i}");
        client.apply(pod_yaml(&name, "Always", "sleep 3600").into_bytes(), "-").unwrap();
        // apply returns once the file is written; the agent knows the pod
        // (and starts it) a moment later
        let t = Instant::now();
        while client.get_pod("default", &name).is_err() {
            assert!(t.elapsed() < Duration::from_secs(30), "{name} never appeared");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(30 * i));
        let t = Instant::now();
        client.delete("default", &name, Some(1)).unwrap();
        delete_max = delete_max.max(ms(t.elapsed()));
    }
    out.insert("delete_during_start_ms", delete_max);
    wait_no_pods(&client);

    // a container that makes its termination-log 2 GiB
    let cmd = "dd if=/dev/zero of=/dev/termination-log bs=1 count=0 seek=2147483648 2>/dev/null; echo the-end >> /dev/termination-log; exit 3";
    let base = agent.reset_peak();
    client.apply(pod_yaml("termlog", "Never", cmd).into_bytes(), "-").unwrap();
    let t = Instant::now();
    loop {
        let pods = client.list_pods("").unwrap();
        let done = pods.items.iter().any(|p| {
            podwarden::model::name(p) == "termlog"
                && p.status.iter().flat_map(|s| s.container_statuses.iter().flatten()).take(1).any(|c| {
                    c.state
                        .as_ref()
                        .and_then(|s| s.terminated.as_ref()?.message.as_deref())
                        .is_some_and(|m| m.ends_with("the-end"))
                })
        });
        if done {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(120), "termlog pod did not fail with its message: {pods:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    out.insert("termination_log_2gib_rss_delta_kib", agent.peak_over(base).max(0) as f64);
    client.delete("default", "termlog", Some(1)).unwrap();
    wait_no_pods(&client);
    print_json(&out, 1);
}

fn wait_no_pods(client: &Client) {
    let t = Instant::now();
    while !client.list_pods("").unwrap().items.is_empty() {
        assert!(t.elapsed() < Duration::from_secs(120), "pods did not go away");
        std::thread::sleep(Duration::from_millis(100));
    }
}

//! Shutdown benchmark (`scripts/bench.sh shutdown` prepares the private
//! containerd and the private logind): the release build of podwarden with
//! 50 running pods; logind is asked to power off and the time from its
//! `PrepareForShutdown(true)` to podwarden's inhibitor lock going away is
//! measured from a bus client polling `ListInhibitors` every 2 ms (and
//! logind's `PrepareForShutdown(false)`, sent as soon as no delay lock is
//! left, as an upper bound).
//!
//! - "exit": containers exit on SIGTERM; reference is the last
//!   container's exit as containerd's event stream tells it (its
//!   `TaskExit`'s `exited_at`: the CRI list shows the exit only after
//!   containerd's clean-up, which the lock no longer waits for).
//! - "ignore": containers ignore SIGTERM, shutdownGracePeriod 3 s;
//!   reference is the signal + 3 s.
//!
//! The last line is one JSON object.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dbus::blocking::Connection;
use dbus::message::MatchRule;
use parking_lot::Mutex;
use podwarden::runtime::cri::CriRuntime;
use podwarden::runtime::{ContainerState, Runtime};

mod support;
use support::{IMAGE, call, now_ns, socket};

const PODS: usize = 50;
const REPS: usize = 3;
const IGNORE_GRACE_S: u64 = 3;
const BUS: &str = "/run/podwarden-logind/system_bus_socket";

struct Agent {
    dir: PathBuf,
    child: Child,
}

impl Agent {
    fn start(tag: &str, grace_s: u64) -> Self {
        let dir = std::env::temp_dir().join(format!("podwarden-bench-shutdown-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("manifests")).unwrap();
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "staticPodPath: {0}/manifests\ncontainerRuntimeEndpoint: unix://{1}\nrootDir: {0}/root\napiSocket: {0}/api.sock\npodLogsDir: {0}/logs\nnodeName: bench\nreadOnlyPort: 0\nhousekeepingInterval: 2s\nshutdownGracePeriod: {grace_s}s\nlogindDropInDir: {0}/logind.conf.d\n",
                dir.display(),
                socket()
            ),
        )
        .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_podwarden"))
            .args(["run", "--config", config.to_str().unwrap()])
            .env("RUST_LOG", "warn")
            .env("DBUS_SYSTEM_BUS_ADDRESS", format!("unix:path={BUS}"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        Agent { dir, child }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn manifest(name: &str, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: bench\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 30\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", {command:?}]\n"
    )
}

/// (what, who, why, mode, uid, pid) as `ListInhibitors` returns them.
type Inhibitor = (String, String, String, String, u32, u32);

fn podwarden_locks(conn: &Connection) -> usize {
    let p = conn.with_proxy("org.freedesktop.login1", "/org/freedesktop/login1", Duration::from_secs(5));
    let (list,): (Vec<Inhibitor>,) =
        p.method_call("org.freedesktop.login1.Manager", "ListInhibitors", ()).expect("ListInhibitors");
    list.iter().filter(|i| i.1 == "podwarden").count()
}

fn wait(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Run {
    /// Wall-clock ns of logind's `true`, podwarden's lock gone, logind's `false`.
    signal_ns: i64,
    release_ns: i64,
    false_ns: Option<i64>,
    /// Latest container exit containerd recorded, and how many exits it saw.
    last_exit_ns: i64,
    exits: usize,
}

/// One run: start the agent with 50 pods, power off, measure, clean up.
fn run(cri: &Arc<CriRuntime>, tag: &str, command: &str, grace_s: u64) -> Run {
    let agent = Agent::start(tag, grace_s);
    let conn = Connection::new_address(&format!("unix:path={BUS}")).expect("connect to the private system bus");
    // keep the connection registered (Hello) before calling
    let signals: Arc<Mutex<Vec<(bool, i64)>>> = Arc::default();
    let s = signals.clone();
    let rule = MatchRule::new_signal("org.freedesktop.login1.Manager", "PrepareForShutdown");
    conn.add_match(rule, move |(b,): (bool,), _, _| {
        s.lock().push((b, now_ns()));
        true
    })
    .expect("match PrepareForShutdown");
    for i in 0..PODS {
        let name = format!("sd-{tag}-{i}");
        let tmp = agent.dir.join(format!("{name}.tmp"));
        std::fs::write(&tmp, manifest(&name, command)).unwrap();
        std::fs::rename(&tmp, agent.dir.join("manifests").join(format!("{name}.yaml"))).unwrap();
    }
    let ours = |p: &podwarden::runtime::RuntimePod| p.name.starts_with(&format!("sd-{tag}-"));
    wait("50 pods running", Duration::from_secs(120), || {
        cri.list_pods(&call())
            .unwrap()
            .iter()
            .filter(|p| ours(p))
            .filter(|p| p.containers.iter().any(|c| c.state == ContainerState::Running))
            .count()
            == PODS
    });
    wait("the inhibitor lock", Duration::from_secs(10), || podwarden_locks(&conn) == 1);

    // each container's exit as containerd's event stream tells it (its
    // TaskExit's exited_at): the CRI list shows a container exited only
    // after containerd's clean-up, which the lock no longer waits for
    let ids: std::collections::HashSet<String> = cri
        .list_pods(&call())
        .unwrap()
        .iter()
        .filter(|p| ours(p))
        .flat_map(|p| p.containers.iter().map(|c| c.id.clone()))
        .collect();
    let exits: Arc<Mutex<BTreeMap<String, i64>>> = Arc::default();
    let cancel = podwarden::base::cancel::CancelToken::new();
    let poller = {
        let (cri, exits, cancel) = (cri.clone(), exits.clone(), cancel.clone());
        podwarden::base::thread::spawn("exit-events", None, move || {
            let _ = cri.watch_events(&cancel, &mut |note| {
                if let podwarden::runtime::events::Note::Event(e) = note
                    && ids.contains(&e.container_id)
                    && let Some(x) = e.exit
                {
                    exits.lock().entry(e.container_id.clone()).or_insert(x.at_ns);
                }
            });
        })
        .unwrap()
    };
    std::thread::sleep(Duration::from_millis(300)); // the stream open

    let p = conn.with_proxy("org.freedesktop.login1", "/org/freedesktop/login1", Duration::from_secs(10));
    let _: () = p.method_call("org.freedesktop.login1.Manager", "PowerOff", (false,)).expect("PowerOff");
    let end = Instant::now() + Duration::from_secs(60);
    let mut signal_ns = None;
    let release_ns = loop {
        conn.process(Duration::from_millis(2)).unwrap();
        if signal_ns.is_none() {
            signal_ns = signals.lock().iter().find(|(b, _)| *b).map(|(_, t)| *t);
        }
        if signal_ns.is_some() && podwarden_locks(&conn) == 0 {
            break now_ns();
        }
        if let Some((_, t)) = signals.lock().iter().find(|(b, _)| !*b) {
            break *t; // logind moved on: the lock is gone (the poll missed the gap)
        }
        assert!(Instant::now() < end, "the inhibitor lock was not released within 60 s");
    };
    let signal_ns = signal_ns.unwrap();
    let end = Instant::now() + Duration::from_secs(30);
    while !signals.lock().iter().any(|(b, _)| !*b) && Instant::now() < end {
        conn.process(Duration::from_millis(50)).unwrap();
    }
    let end = Instant::now() + Duration::from_secs(10);
    while exits.lock().len() < PODS && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    cancel.cancel();
    poller.join().unwrap();
    let false_ns = signals.lock().iter().find(|(b, _)| !*b).map(|(_, t)| *t);
    let exits = exits.lock().clone();
    let last_exit_ns = exits.values().copied().filter(|t| *t < release_ns + 5_000_000_000).max().unwrap_or(0);

    // clean up: the cancel restarted the pods; remove them
    for e in std::fs::read_dir(agent.dir.join("manifests")).unwrap().flatten() {
        std::fs::remove_file(e.path()).unwrap();
    }
    wait("pods removed", Duration::from_secs(120), || !cri.list_pods(&call()).unwrap().iter().any(&ours));
    drop(agent);
    Run { signal_ns, release_ns, false_ns, last_exit_ns, exits: exits.len() }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    assert!(Path::new(BUS).exists(), "{BUS} is missing: run `scripts/logind-env.sh up` first (scripts/bench.sh does)");
    let cri = Arc::new(CriRuntime::connect(&format!("unix://{}", socket()), Duration::from_secs(10)).unwrap());
    let ms = |a: i64, b: i64| (a - b) as f64 / 1e6;
    let mut out: BTreeMap<&str, f64> = BTreeMap::new();

    let mut after_exit = Vec::new();
    let mut after_signal = Vec::new();
    let mut exit_after_signal = Vec::new();
    for r in 0..REPS {
        let run = run(&cri, &format!("exit{r}"), "trap 'exit 0' TERM; while :; do sleep 1 & wait; done", 5);
        assert!(run.exits >= PODS, "saw {} container exits of {PODS}", run.exits);
        println!(
            "exit on SIGTERM, run {r}: last exit {:.1} ms after the signal, lock released {:.1} ms after it \
             ({:.1} ms after the signal; logind's false {:.1} ms after the signal)",
            ms(run.last_exit_ns, run.signal_ns),
            ms(run.release_ns, run.last_exit_ns),
            ms(run.release_ns, run.signal_ns),
            run.false_ns.map_or(f64::NAN, |f| ms(f, run.signal_ns)),
        );
        after_exit.push(ms(run.release_ns, run.last_exit_ns));
        after_signal.push(ms(run.release_ns, run.signal_ns));
        exit_after_signal.push(ms(run.last_exit_ns, run.signal_ns));
    }
    let mut after_deadline = Vec::new();
    for r in 0..REPS {
        let run = run(&cri, &format!("ignore{r}"), "trap '' TERM; while :; do sleep 1; done", IGNORE_GRACE_S);
        let deadline = run.signal_ns + (IGNORE_GRACE_S as i64) * 1_000_000_000;
        let last = if run.last_exit_ns == 0 {
            "not seen by the poller".to_string()
        } else {
            format!("{:.1} ms after it", ms(run.last_exit_ns, deadline))
        };
        println!(
            "ignore SIGTERM (grace {IGNORE_GRACE_S} s), run {r}: lock released {:.1} ms after the deadline; last exit {last}",
            ms(run.release_ns, deadline),
        );
        after_deadline.push(ms(run.release_ns, deadline));
    }
    out.insert("pods", PODS as f64);
    out.insert("reps", REPS as f64);
    out.insert("release_after_last_exit_ms", median(after_exit.clone()));
    out.insert("release_after_last_exit_ms_max", after_exit.iter().copied().fold(f64::MIN, f64::max));
    out.insert("release_after_signal_ms", median(after_signal.clone()));
    out.insert("last_exit_after_signal_ms", median(exit_after_signal.clone()));
    // share of the shutdown spent after the last container was gone
    out.insert("release_over_last_exit_ratio", median(after_signal) / median(exit_after_signal));
    out.insert("grace_s", IGNORE_GRACE_S as f64);
    out.insert("release_after_deadline_ms", median(after_deadline.clone()));
    out.insert("release_after_deadline_ms_max", after_deadline.iter().copied().fold(f64::MIN, f64::max));
    support::print_json(&out, 3);
}

//! The node's Kubernetes API as the official client libraries read it:
//! Python's `kubernetes` (from PyPI) and JavaScript's `@kubernetes/client-node`
//! (from npm), none of them written here (Go's client-go: see the end). Each runs the same scenario
//! (`tools/clients/SCENARIO.md`) against a real podwarden on the real
//! containerd and fails at the first answer that differs from what the
//! API server would give; `tools/clients/prepare.sh` installs them
//! (scripts/test.sh runs it).
//!
//! The scenario's fixed pod is a static pod `base` in namespace `clients`:
//! `main` prints `line N` every 200 ms and serves an echo server on 8080,
//! `reader` (stdin open) copies its stdin to its stdout for attach.

mod agent;
mod common;

use agent::kubectl::kubeconfig;
use agent::*;

const NS: &str = "clients";

/// The fixed pod of the scenario.
fn base_pod() -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: base\n  namespace: {NS}\nspec:\n  terminationGracePeriodSeconds: 1\n  \
         containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    ports: [{{containerPort: 8080}}]\n    \
         command: [\"sh\", \"-c\", {main:?}]\n  - name: reader\n    image: {IMAGE}\n    imagePullPolicy: Never\n    \
         stdin: true\n    command: [\"cat\"]\n",
        main = "trap 'exit 0' TERM; nc -ll -p 8080 -e cat & i=0; \
                while :; do echo line $i; i=$((i+1)); sleep 0.2 & wait $!; done",
    )
}

/// Where `tools/clients/prepare.sh` puts what it installs.
fn clients_dir() -> PathBuf {
    let dir = std::env::var_os("PODWARDEN_CLIENTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/clients"));
    assert!(
        dir.join("ready").is_file(),
        "the client libraries are not installed ({} has no `ready`): run `tools/clients/prepare.sh` \
         (scripts/test.sh does)",
        dir.display()
    );
    dir
}

/// Runs `client` (its program and arguments) against a fresh agent with the
/// scenario's pod; fails the test with the client's output unless it
/// exits 0.
fn scenario(tag: &str, client: &[PathBuf]) {
    let _serial = SERIAL.lock();
    let a = Agent::start_with(tag, "", &[]);
    let admin = kubeconfig(&a, "admin.yaml", &[]);
    a.write("base.yaml", &base_pod());
    let uid = a.uid("base");
    wait_for("base running", Duration::from_secs(30), || a.running(&uid) == 2);
    // `main` has printed a few lines (the scenario's log steps read three)
    let log = a.dir.0.join(format!("logs/{NS}_base_{uid}/main/0.log"));
    wait_for("main's first lines", Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.lines().count() >= 4)
    });
    let t = Instant::now();
    let out = Command::new(&client[0])
        .args(&client[1..])
        .env("KUBECONFIG", &admin)
        .env("HOME", &a.dir.0)
        .env("PW_NAMESPACE", NS)
        .env("PW_POD", "base")
        .env("PW_IMAGE", IMAGE)
        .env("PW_NODE", "e2e")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", client[0].display()));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{tag} ({:.1} s):\n{text}", t.elapsed().as_secs_f64());
    assert!(out.status.success(), "the {tag} client failed ({:?}):\n{text}\nthe agent's log:\n{}", out.status, a.log());
    // every step said it passed
    for step in STEPS {
        assert!(
            text.lines().any(|l| l == format!("ok {step}")),
            "the {tag} client did not report `ok {step}`:\n{text}"
        );
    }
}

/// The scenario's steps, each reported as `ok STEP` by every client.
const STEPS: &[&str] = &[
    "list",
    "get",
    "logs-tail",
    "logs-follow",
    "exec-exit-code",
    "exec-stdin",
    "attach",
    "port-forward",
    "create-watch",
    "apply",
    "delete",
];

#[test]
fn python_client() {
    let dir = clients_dir();
    scenario("python", &[dir.join("venv/bin/python"), root().join("tools/clients/python/scenario.py")]);
}

#[test]
fn javascript_client() {
    clients_dir();
    scenario("javascript", &[PathBuf::from("node"), root().join("tools/clients/js/scenario.mjs")]);
}

/// Go's client-go scenario (tools/clients/go, built by
/// `tools/clients/prepare.sh`); fails saying how to build it when it is
/// missing.
fn go_scenario() -> PathBuf {
    let program = clients_dir().join("go-scenario");
    assert!(
        program.is_file(),
        "client-go's scenario is not built ({} is missing): run `tools/clients/prepare.sh` (Go 1.24 or newer; \
         scripts/test.sh does)",
        program.display()
    );
    program
}

/// Go's client-go with exec, attach and port-forward over SPDY. Its typed
/// clients send a Pod and DeleteOptions as protobuf (`write::pbbody`).
#[test]
fn go_client_spdy() {
    scenario("go-spdy", &[go_scenario(), PathBuf::from("-streams=spdy")]);
}

/// Go's client-go with exec, attach and port-forward over WebSocket
/// (`-streams=websocket`: `NewWebSocketExecutor`'s v5.channel.k8s.io and
/// `NewSPDYOverWebsocketDialer`'s SPDY inside WebSocket), which podwarden
/// translates to SPDY/3.1 for containerd (`api::websocket`).
#[test]
fn go_client_websocket() {
    scenario("go-websocket", &[go_scenario(), PathBuf::from("-streams=websocket")]);
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

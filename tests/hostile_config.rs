//! Issue 9, hostile and malformed configs through the real binary:
//! `podwarden run --config X` exits 1 at once with the exact error naming
//! the field and the value; a real kubeadm-generated KubeletConfiguration
//! (zero durations meaning the default) loads and runs.

mod common;

use common::EVICTION;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{TempDir, wait_for};

const BIN: &str = env!("CARGO_BIN_EXE_podwarden");

/// (case, config text, the error after "<config path>: ").
const CASES: &[(&str, &str, &str)] = &[
    (
        "overflowing duration",
        "syncFrequency: 99999999999999999999h\n",
        "field syncFrequency: \"99999999999999999999h\" is invalid: out of range: expected 0s to 24h0m0s",
    ),
    (
        "rescan period that overflowed the watcher's deadline",
        "fileCheckFrequency: 2562047h\n",
        "field fileCheckFrequency: \"2562047h\" is invalid: out of range: expected 0s to 24h0m0s",
    ),
    (
        "negative duration",
        "runtimeRequestTimeout: -5s\n",
        "field runtimeRequestTimeout: \"-5s\" is invalid: must not be negative",
    ),
    (
        "garbage duration",
        "housekeepingInterval: 5parsecs\n",
        "field housekeepingInterval: \"5parsecs\" is invalid: expected a duration such as 30s, 1m30s or 500ms",
    ),
    (
        "housekeeping too rare",
        "housekeepingInterval: 1h\n",
        "field housekeepingInterval: \"1h\" is invalid: out of range: expected 0s to 10m0s",
    ),
    (
        "duration as a number",
        "syncFrequency: 30\n",
        "field syncFrequency: 30 is invalid: expected a duration string such as 30s",
    ),
    (
        "shutdown grace over a day",
        "shutdownGracePeriod: 25h\n",
        "field shutdownGracePeriod: \"25h\" is invalid: out of range: expected 0s to 24h0m0s",
    ),
    ("huge maxPods", "maxPods: 1000000\n", "field maxPods: 1000000 is invalid: expected an integer from 0 to 10000"),
    ("fractional maxPods", "maxPods: 1.5\n", "field maxPods: 1.5 is invalid: expected an integer from 0 to 10000"),
    ("negative maxPods", "maxPods: -1\n", "field maxPods: -1 is invalid: expected an integer from 0 to 10000"),
    ("wrong type", "maxPods: lots\n", "field maxPods: \"lots\" is invalid: expected an integer from 0 to 10000"),
    ("address not an IP", "address: localhost\n", "field address: \"localhost\" is invalid: expected an IP address"),
    (
        "port out of range",
        "readOnlyPort: 70000\n",
        "field readOnlyPort: 70000 is invalid: expected an integer from 0 to 65535",
    ),
    ("empty staticPodPath", "staticPodPath: \"\"\n", "field staticPodPath: \"\" is invalid: expected an absolute path"),
    (
        "relative rootDir",
        "rootDir: var/lib/podwarden\n",
        "field rootDir: \"var/lib/podwarden\" is invalid: expected an absolute path",
    ),
    (
        "list where a path belongs",
        "staticPodPath: [/a, /b]\n",
        "field staticPodPath: [\"/a\",\"/b\"] is invalid: expected a non-empty string",
    ),
    (
        "reserved memory beyond any machine",
        "systemReserved:\n  memory: 2Ei\n",
        "field systemReserved.memory: \"2Ei\" is invalid: out of range: expected at most 1Ei",
    ),
    (
        "reserved cpu beyond any machine (the sum overflowed)",
        "systemReserved:\n  cpu: \"9e18\"\nkubeReserved:\n  cpu: \"9e18\"\n",
        "field systemReserved.cpu: \"9e18\" is invalid: out of range: expected at most 1M (cores)",
    ),
    (
        "critical pods' period over the total",
        "shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s\n",
        "field shutdownGracePeriodCriticalPods: \"20s\" is invalid: must not exceed shutdownGracePeriod",
    ),
    (
        "apiGroup no host has (looked up at start, not while parsing)",
        "apiGroup: no-such-group-pw\n",
        "field apiGroup: \"no-such-group-pw\" is invalid: expected a group that exists in /etc/group",
    ),
    ("not a mapping", "- a\n- b\n", "cannot parse YAML: expected a mapping of fields"),
    ("another kind", "kind: Pod\n", "field kind: \"Pod\" is invalid: expected KubeletConfiguration"),
];

fn run_config(path: &std::path::Path) -> (Option<i32>, String, Duration) {
    let t = Instant::now();
    let out = Command::new(BIN).args(["run", "--config", path.to_str().unwrap()]).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned(), t.elapsed())
}

#[test]
fn hostile_configs_stop_podwarden_run_at_once_naming_field_and_value() {
    let d = TempDir::new("hostilecfg");
    for (i, (case, text, want)) in CASES.iter().enumerate() {
        let path = d.0.join(format!("config-{i}.yaml"));
        std::fs::write(&path, text).unwrap();
        let (code, err, took) = run_config(&path);
        assert_eq!(code, Some(78), "{case}: {err}");
        assert!(took < Duration::from_secs(5), "{case}: took {took:?}");
        let last = err.lines().last().unwrap_or_default();
        assert_eq!(last, format!("podwarden: {}: {want}", path.display()), "{case}");
    }
}

#[test]
fn oversized_and_binary_configs_are_refused_unparsed() {
    let d = TempDir::new("bigcfg");
    let big = d.0.join("big.yaml");
    let mut f = std::fs::File::create(&big).unwrap();
    let line = format!("# {}\n", "x".repeat(1022));
    for _ in 0..2048 {
        f.write_all(line.as_bytes()).unwrap(); // 2 MiB of comments
    }
    drop(f);
    let (code, err, took) = run_config(&big);
    assert_eq!(code, Some(78), "{err}");
    assert!(took < Duration::from_secs(5));
    assert_eq!(
        err.lines().last().unwrap(),
        format!("podwarden: {}: larger than 1048576 bytes (1 MiB); not a config file", big.display())
    );
    let bin = d.0.join("latin1.yaml");
    std::fs::write(&bin, b"nodeName: caf\xe9\n").unwrap();
    let (code, err, _) = run_config(&bin);
    assert_eq!(code, Some(78), "{err}");
    assert_eq!(
        err.lines().last().unwrap(),
        format!("podwarden: {}: cannot parse YAML: not UTF-8 (invalid byte at offset 13)", bin.display())
    );
    // /dev/zero is not read without bound
    let (code, err, took) = run_config(std::path::Path::new("/dev/zero"));
    assert_eq!(code, Some(78), "{err}");
    assert!(took < Duration::from_secs(5));
    assert_eq!(
        err.lines().last().unwrap(),
        "podwarden: /dev/zero: larger than 1048576 bytes (1 MiB); not a config file"
    );
    // a FIFO is refused at once, not waited on
    let fifo = d.0.join("fifo.yaml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    podwarden::sys::mkfifo(&c, 0o600).unwrap();
    let (code, err, took) = run_config(&fifo);
    assert_eq!(code, Some(78), "{err}");
    assert!(took < Duration::from_secs(5), "a FIFO config took {took:?}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with(&format!("podwarden: {}: ", fifo.display())), "{last}");
    assert!(last.ends_with("a FIFO, not a config file; not read"), "{last}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// The config `kubeadm init` writes to /var/lib/kubelet/config.yaml (every
/// unset duration `0s`, `containerRuntimeEndpoint: ""`) loads, and the agent
/// runs on it: zero durations are the kubelet's defaults, not "must be
/// greater than 0".
#[test]
fn a_kubeadm_generated_config_loads_and_runs() {
    let d = TempDir::new("kubeadmcfg");
    let manifests = d.0.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let fixture =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kubeadm-kubelet-config.yaml"))
            .unwrap();
    assert!(fixture.contains("syncFrequency: 0s\n") && fixture.contains("fileCheckFrequency: 0s\n"));
    // the machine-specific paths point into the test's directory
    let port = free_port();
    let text = fixture
        .replace("staticPodPath: /etc/kubernetes/manifests", &format!("staticPodPath: {}", manifests.display()))
        .replace("containerRuntimeEndpoint: \"\"", "containerRuntimeEndpoint: fake://")
        + &format!(
            "rootDir: {}\napiSocket: {}/api.sock\npodLogsDir: {}\nnodeName: node-k\nport: 0\nreadOnlyPort: {port}\n{EVICTION}",
            d.0.join("root").display(),
            d.0.display(),
            d.0.join("logs").display()
        );
    let config = d.0.join("config.yaml");
    std::fs::write(&config, text).unwrap();
    std::fs::write(
        manifests.join("web.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox:1\n",
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["run", "--config", config.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Duration::from_secs(15);
    let pods_dir = d.0.join("root/pods");
    wait_for("the static pod set up", t, || std::fs::read_dir(&pods_dir).is_ok_and(|mut r| r.next().is_some()));
    wait_for("/healthz ok", t, || http_get(port, "/healthz").is_some_and(|r| r.ends_with("ok")));
    let pods = http_get(port, "/pods").unwrap();
    assert!(pods.contains("\"name\":\"web\""), "{pods}");
    assert!(child.try_wait().unwrap().is_none(), "still running");
    podwarden::sys::kill(child.id() as i32, libc::SIGTERM).unwrap();
    let mut status = None;
    wait_for("exit after SIGTERM", t, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.unwrap().success());
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(!err.contains("must be greater than 0"), "{err}");
    // kubelet fields podwarden does not use: one warning each
    assert!(err.contains("unknown field \"authentication\" ignored"), "{err}");
    assert!(err.contains("unknown field \"streamingConnectionIdleTimeout\" ignored"), "{err}");
    assert_eq!(err.matches("unknown field \"clusterDNS\" ignored").count(), 1, "{err}");
}

#[test]
fn yaml_bombs_in_a_config_are_refused_before_they_expand() {
    let d = TempDir::new("bombcfg");
    let mut bomb = String::from("maxPods: 10\nx0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..20 {
        let p = i - 1;
        bomb.push_str(&format!("x{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"));
    }
    let deep = format!("maxPods: 10\nx: {}{}\n", "[".repeat(80_000), "]".repeat(80_000));
    let cases = [
        ("bomb.yaml", bomb, "cannot parse YAML: alias expansion exceeds 65536 nodes".to_string()),
        ("deep.yaml", deep, "cannot parse YAML: nesting deeper than 100 levels at line 2 column 103".to_string()),
    ];
    for (name, text, want) in cases {
        let path = d.0.join(name);
        std::fs::write(&path, text).unwrap();
        let (code, err, took) = run_config(&path);
        assert_eq!(code, Some(78), "{name}: {err}");
        assert_eq!(err.lines().last().unwrap_or_default(), format!("podwarden: {}: {want}", path.display()), "{name}");
        assert!(took < Duration::from_secs(2), "{name} took {took:?}");
    }
}

/// `validate` without `nodeName` derives UIDs with the host name, as `run`
/// does (the config leaves it unset; the binary reads the host name).
#[test]
fn validate_without_a_node_name_takes_the_host_name() {
    let d = TempDir::new("validatehost");
    let config = d.0.join("c.yaml");
    std::fs::write(&config, format!("staticPodPath: {}\n", d.0.join("manifests").display())).unwrap();
    let pod = d.0.join("p.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: busybox:1\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["validate", "--config", config.to_str().unwrap(), pod.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_lowercase();
    let want = podwarden::model::manifest::read_file(&pod, &host).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("uid {}", podwarden::model::uid(&want))), "{stdout}");
    let other = podwarden::model::manifest::read_file(&pod, "localhost-not-this-host").unwrap();
    assert!(!stdout.contains(podwarden::model::uid(&other)), "{stdout}");
}

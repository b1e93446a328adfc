//! The real `podwarden` binary: `run` on the simulated runtime (manifests in,
//! pod directories out, signals), `validate`, and bad input at start.

mod common;

use common::EVICTION;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{TempDir, wait_for};

const BIN: &str = env!("CARGO_BIN_EXE_podwarden");

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: NAME\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: busybox:1\n";

fn pod_dirs(root: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root.join("root/pods"))
        .map(|r| r.flatten().map(|e| e.file_name().to_string_lossy().to_string()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// The UID `podwarden validate` reports for `file` on node "test-node" (an
/// explicit config, so an installed /etc/podwarden/config.yaml plays no part).
fn uid_of(file: &std::path::Path) -> String {
    let config = file.with_file_name("uid-of-config.yaml");
    std::fs::write(&config, "nodeName: test-node\n").unwrap();
    let out = Command::new(BIN)
        .args(["validate", "--config", config.to_str().unwrap(), file.to_str().unwrap()])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout).to_string();
    s.rsplit("uid ").next().unwrap().trim().to_string()
}

/// Prints the daemon's log file when the test fails.
struct ShowOnPanic(std::path::PathBuf);

impl Drop for ShowOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- podwarden log ----\n{}", std::fs::read_to_string(&self.0).unwrap_or_default());
        }
    }
}

/// Kills the daemon when the test fails (a hung one would outlive it).
struct KillOnPanic(i32);

impl Drop for KillOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = podwarden::sys::kill(self.0, libc::SIGKILL);
        }
    }
}

/// `podwarden run` on the fake runtime in `d` (manifests, root, logs
/// there; `extra` config lines after the common ones), its stderr in
/// `d/stderr`.
fn run_fake(d: &TempDir, socket: &std::path::Path, extra: &str) -> std::process::Child {
    let manifests = d.0.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let config = d.0.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "staticPodPath: {}\ncontainerRuntimeEndpoint: fake://\nrootDir: {}\napiSocket: {}\npodLogsDir: {}\nnodeName: node-a\nport: 0\nreadOnlyPort: 0\n{EVICTION}{extra}",
            manifests.display(),
            d.0.join("root").display(),
            socket.display(),
            d.0.join("logs").display()
        ),
    )
    .unwrap();
    Command::new(BIN)
        .args(["run", "--config", config.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.0.join("stderr")).unwrap())
        .spawn()
        .unwrap()
}

/// `d`'s manifest directory, made with pod `a` in it.
fn manifests_with_pod_a(d: &TempDir) -> std::path::PathBuf {
    let manifests = d.0.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::write(manifests.join("a.yaml"), POD.replace("NAME", "a")).unwrap();
    manifests
}

/// SIGTERM to `child`; its exit status within `t`.
fn terminate(child: &mut std::process::Child, t: Duration, what: &str) -> std::process::ExitStatus {
    podwarden::sys::kill(child.id() as i32, libc::SIGTERM).unwrap();
    let mut status = None;
    wait_for(what, t, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    status.unwrap()
}

#[test]
fn run_follows_manifests_and_stops_cleanly_on_sigterm() {
    let d = TempDir::new("daemon");
    let manifests = manifests_with_pod_a(&d);
    let mut child = run_fake(
        &d,
        &d.0.join("api.sock"),
        "fileCheckFrequency: 1h\nhousekeepingInterval: 200ms\nsomeKubeletField: true\n",
    );
    let _show = ShowOnPanic(d.0.join("stderr"));
    let pid = child.id() as i32;
    let t = Duration::from_secs(10);
    wait_for("pod a's directory", t, || pod_dirs(&d.0).len() == 1);
    // the same process (PID) runs again with glibc's per-thread caches off
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    assert!(environ.split('\0').any(|v| v == "PODWARDEN_MALLOC_TUNED=1"), "{environ}");
    assert!(environ.contains("GLIBC_TUNABLES=glibc.malloc.tcache_count=0"), "{environ}");
    let a_uid = pod_dirs(&d.0).remove(0);
    // inotify: a new manifest is picked up without waiting for the 1 h rescan
    std::fs::write(manifests.join("b.yaml"), POD.replace("NAME", "b")).unwrap();
    wait_for("pod b's directory", t, || pod_dirs(&d.0).len() == 2);
    let b_uid = pod_dirs(&d.0).into_iter().find(|u| *u != a_uid).unwrap();
    // removal: the pod is killed, its directory cleaned up
    std::fs::remove_file(manifests.join("a.yaml")).unwrap();
    wait_for("pod a's directory removed", t, || pod_dirs(&d.0) == vec![b_uid.clone()]);
    // SIGHUP rescans and does not stop the agent. A manifest rewritten
    // through a hard link outside staticPodPath raises no inotify event
    // there, so with the 1 h rescan only SIGHUP can pick the change up.
    let outside = d.0.join("c-outside.yaml");
    std::fs::write(&outside, POD.replace("NAME", "c")).unwrap();
    std::fs::hard_link(&outside, manifests.join("c.yaml")).unwrap();
    wait_for("pod c's directory", t, || pod_dirs(&d.0).len() == 2);
    let c_uid = pod_dirs(&d.0).into_iter().find(|u| *u != b_uid).unwrap();
    std::fs::write(&outside, POD.replace("NAME", "c2")).unwrap(); // the same inode
    podwarden::sys::kill(pid, libc::SIGHUP).unwrap();
    wait_for("the SIGHUP rescan replaced pod c by c2", t, || {
        let dirs = pod_dirs(&d.0);
        dirs.len() == 2 && dirs.contains(&b_uid) && !dirs.contains(&c_uid)
    });
    assert!(child.try_wait().unwrap().is_none(), "SIGHUP must not stop the agent");
    // SIGTERM stops it cleanly without killing pods
    assert!(terminate(&mut child, t, "exit after SIGTERM").success());
    assert_eq!(pod_dirs(&d.0).len(), 2, "pods are left as they are");
    let err = std::fs::read_to_string(d.0.join("stderr")).unwrap();
    assert!(err.contains("unknown field \"someKubeletField\" ignored"), "{err}");
    assert!(err.contains("pods keep running"), "{err}");
}

/// On the fake runtime no CRI channel starts gRPC's event engine: the
/// local API's servers do, and its timer thread gets gRPC's slack there.
#[test]
fn grpcs_timer_threads_run_with_a_timer_slack_and_the_agents_own_without() {
    let d = TempDir::new("daemon-slack");
    manifests_with_pod_a(&d);
    let mut child = run_fake(&d, &d.0.join("api.sock"), "");
    let _show = ShowOnPanic(d.0.join("stderr"));
    let _kill = KillOnPanic(child.id() as i32);
    wait_for("pod a's directory", Duration::from_secs(10), || pod_dirs(&d.0).len() == 1);
    common::assert_grpc_timer_slack(child.id());
    assert!(terminate(&mut child, Duration::from_secs(10), "exit after SIGTERM").success());
}

/// The local API's accept was woken at shutdown by a connection to its
/// socket's path: with the file removed (a cleanup of /run, an operator's
/// rm) none came, and the agent hung in its shutdown for good.
#[test]
fn sigterm_stops_it_even_when_its_api_socket_file_was_removed() {
    let d = TempDir::new("daemon-nosock");
    let socket = d.0.join("api.sock");
    let mut child = run_fake(&d, &socket, "");
    let _show = ShowOnPanic(d.0.join("stderr"));
    let _kill = KillOnPanic(child.id() as i32);
    let t = Duration::from_secs(10);
    wait_for("the API socket", t, || socket.exists());
    std::fs::remove_file(&socket).unwrap();
    // another file at the path now: not the agent's to remove
    std::fs::write(&socket, "someone else's").unwrap();
    assert!(terminate(&mut child, t, "exit after SIGTERM with the socket file gone").success());
    assert_eq!(std::fs::read_to_string(&socket).unwrap(), "someone else's");
}

#[test]
fn bad_config_and_missing_runtime_fail_at_start_naming_the_input() {
    let d = TempDir::new("badcfg");
    let config = d.0.join("config.yaml");
    std::fs::write(&config, "syncFrequency: sometimes\n").unwrap();
    let out = Command::new(BIN).args(["run", "--config", config.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(78), "EX_CONFIG");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("config.yaml: field syncFrequency: \"sometimes\" is invalid"), "{err}");

    std::fs::write(
        &config,
        format!(
            "containerRuntimeEndpoint: unix:///nonexistent.sock\nrootDir: {}\napiSocket: {}/api.sock\n",
            d.0.join("r").display(),
            d.0.display()
        ),
    )
    .unwrap();
    let out = Command::new(BIN).args(["run", "--config", config.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(69), "EX_UNAVAILABLE");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unix:///nonexistent.sock"), "{err}");

    let out = Command::new(BIN).args(["run", "--config", "/nonexistent/config.yaml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(78), "EX_CONFIG");
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/config.yaml"));
}

#[test]
fn validate_reports_each_file() {
    let d = TempDir::new("validate");
    let good = d.0.join("good.yaml");
    let bad = d.0.join("bad.yaml");
    std::fs::write(&good, POD.replace("NAME", "good")).unwrap();
    std::fs::write(&bad, POD.replace("NAME", "Bad_Name")).unwrap();
    let out = Command::new(BIN).args(["validate", good.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok: pod good_default uid "));
    assert_eq!(uid_of(&good).len(), 32);
    let out = Command::new(BIN).args(["validate", good.to_str().unwrap(), bad.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.yaml: field metadata.name"), "{err}");
    // the UID is the one the agent derives with the config's nodeName
    let config = d.0.join("config.yaml");
    std::fs::write(&config, "nodeName: edge-7\n").unwrap();
    let out = Command::new(BIN)
        .args(["validate", "--config", config.to_str().unwrap(), good.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let want = podwarden::model::manifest::read_file(&good, "edge-7").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("uid {}", podwarden::model::uid(&want))), "{stdout}");
    assert!(!stdout.contains(&uid_of(&good)), "another node name, another UID: {stdout}");
    // a bad config is an error naming it
    std::fs::write(&config, "nodeName: [1]\n").unwrap();
    let out = Command::new(BIN)
        .args(["validate", "--config", config.to_str().unwrap(), good.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "EX_CONFIG");
    assert!(String::from_utf8_lossy(&out.stderr).contains("config.yaml"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A manifest with ten independent refused fields, written in another
/// order than the API server reports them.
const TEN_ERRORS: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: Web_1\n  namespace: Bad.NS\nspec:\n  restartPolicy: Sometimes\n  dnsPolicy: Nowhere\n  terminationGracePeriodSeconds: -5\n  initContainers:\n  - name: init\n    image: busybox:1\n    terminationMessagePolicy: Loud\n  containers:\n  - name: app\n    imagePullPolicy: Sometimes\n    ports:\n    - containerPort: 70000\n  volumes:\n  - name: data\n    hostPath: {path: relative/dir}\n";

/// TEN_ERRORS' fields and reasons, in the API server's order.
const TEN_REFUSED: [&str; 10] = [
    "field metadata.name: \"Web_1\" is not a valid DNS-1123 subdomain (lowercase letters, digits, '-', '.')",
    "field metadata.namespace: \"Bad.NS\" is not a valid DNS-1123 label",
    "field spec.terminationGracePeriodSeconds: -5 is negative; must be 0 or more",
    "field spec.volumes[0].hostPath.path: \"relative/dir\" must be an absolute path",
    "field spec.containers[0].image: missing; every container needs an image",
    "field spec.containers[0].ports[0].containerPort: 70000 is not in 1-65535",
    "field spec.containers[0].imagePullPolicy: \"Sometimes\" is not one of Always, IfNotPresent, Never",
    "field spec.initContainers[0].terminationMessagePolicy: \"Loud\" is not one of File, FallbackToLogsOnError",
    "field spec.restartPolicy: \"Sometimes\" is not one of Always, OnFailure, Never",
    "field spec.dnsPolicy: \"Nowhere\" is not one of ClusterFirst, ClusterFirstWithHostNet, Default, None",
];

#[test]
fn validate_prints_every_refused_field_of_a_file_in_order() {
    let d = TempDir::new("validate-all");
    let config = d.0.join("config.yaml");
    std::fs::write(&config, "nodeName: test-node\n").unwrap();
    let good = d.0.join("good.yaml");
    let bad = d.0.join("ten.yaml");
    std::fs::write(&good, POD.replace("NAME", "good")).unwrap();
    std::fs::write(&bad, TEN_ERRORS).unwrap();
    let out = Command::new(BIN)
        .args(["validate", "--config", config.to_str().unwrap(), bad.to_str().unwrap(), good.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let mut want: Vec<String> = TEN_REFUSED.iter().map(|e| format!("{}: {e}", bad.display())).collect();
    want.push("podwarden: some manifests are invalid".into());
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().collect::<Vec<_>>(), want, "one line each, in order");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with(&format!("{}: ok: pod good_default uid ", good.display())), "{stdout}");
}

#[test]
fn the_agent_logs_and_records_a_bad_manifests_refused_fields_on_one_bounded_line() {
    let d = TempDir::new("daemon-invalid");
    let manifests = manifests_with_pod_a(&d);
    // ten refused fields, and twelve (two more containers without an image)
    std::fs::write(manifests.join("ten.yaml"), TEN_ERRORS).unwrap();
    let twelve = TEN_ERRORS.replace("  volumes:\n", "  - name: b\n  - name: c\n  volumes:\n");
    std::fs::write(manifests.join("twelve.yaml"), twelve).unwrap();
    let socket = d.0.join("api.sock");
    let mut child = run_fake(&d, &socket, "fileCheckFrequency: 1h\n");
    let _kill = KillOnPanic(child.id() as i32);
    let _show = ShowOnPanic(d.0.join("stderr"));
    let t = Duration::from_secs(10);
    wait_for("pod a's directory", t, || pod_dirs(&d.0).len() == 1);
    let ten = format!("{}: {}", manifests.join("ten.yaml").display(), TEN_REFUSED.join("; "));
    // the twelve: the ten's first eight, then the two new containers' images
    let mut first: Vec<&str> = TEN_REFUSED[..7].to_vec();
    first.extend([
        "field spec.containers[1].image: missing; every container needs an image",
        "field spec.containers[2].image: missing; every container needs an image",
        TEN_REFUSED[7],
    ]);
    let twelve = format!("{}: {}; and 2 more", manifests.join("twelve.yaml").display(), first.join("; "));
    let log = || std::fs::read_to_string(d.0.join("stderr")).unwrap_or_default();
    wait_for("both reported in the log", t, || log().contains(&ten) && log().contains(&twelve));
    for line in [&ten, &twelve] {
        let l = log().lines().find(|l| l.contains(line.as_str())).unwrap().to_string();
        assert!(l.contains("InvalidManifest: ") && l.ends_with(line.as_str()), "{l}");
    }
    // the events carry the same messages
    let out = Command::new(BIN).args(["events", "-o", "json", "--socket", socket.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let events: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let messages: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "InvalidManifest")
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(messages.contains(&ten.as_str()) && messages.contains(&twelve.as_str()), "{messages:#?}");
    assert!(terminate(&mut child, t, "exit after SIGTERM").success());
}

#[test]
fn under_systemd_log_lines_carry_their_syslog_priority() {
    let d = TempDir::new("journal");
    let config = d.0.join("c.yaml");
    std::fs::write(
        &config,
        format!(
            "staticPodPath: {}\ncontainerRuntimeEndpoint: fake://\nrootDir: {}\napiSocket: {}/api.sock\nport: 0\nreadOnlyPort: 0\nbogusField: 1\n",
            d.0.join("m").display(),
            d.0.join("r").display(),
            d.0.display()
        ),
    )
    .unwrap();
    let stderr = d.0.join("stderr");
    let mut child = Command::new(BIN)
        .args(["run", "--config", config.to_str().unwrap()])
        .env("JOURNAL_STREAM", "8:1234")
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    // the local API is the last part started
    wait_for("the agent started", Duration::from_secs(10), || {
        std::fs::read_to_string(&stderr).is_ok_and(|e| e.contains("local API on"))
    });
    let _ = podwarden::sys::kill(child.id() as i32, libc::SIGTERM);
    let status = child.wait().unwrap();
    let err = std::fs::read_to_string(&stderr).unwrap();
    assert!(status.success(), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines.iter().any(|l| l.starts_with("<4>") && l.contains("unknown field \"bogusField\"")), "{err}");
    assert!(lines.iter().any(|l| l.starts_with("<6>") && l.contains("starting")), "{err}");
    assert!(lines.iter().all(|l| l.starts_with('<')), "every line has a priority and no timestamp: {err}");
}

#[test]
fn without_a_system_bus_graceful_shutdown_is_off_with_one_warning_and_pods_still_run() {
    let d = TempDir::new("nobus");
    let manifests = manifests_with_pod_a(&d);
    let config = d.0.join("c.yaml");
    std::fs::write(
        &config,
        format!(
            "staticPodPath: {}\ncontainerRuntimeEndpoint: fake://\nrootDir: {}\napiSocket: {}/api.sock\nport: 0\nreadOnlyPort: 0\nshutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 5s\n{EVICTION}",
            manifests.display(),
            d.0.join("root").display(),
            d.0.display()
        ),
    )
    .unwrap();
    let bus = d.0.join("system_bus_socket");
    let stderr = d.0.join("stderr");
    let log = || std::fs::read_to_string(&stderr).unwrap_or_default();
    let mut child = Command::new(BIN)
        .args(["run", "--config", config.to_str().unwrap()])
        .env("DBUS_SYSTEM_BUS_ADDRESS", format!("unix:path={}", bus.display()))
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    wait_for("pod started anyway", Duration::from_secs(10), || pod_dirs(&d.0).len() == 1);
    wait_for("the warning", Duration::from_secs(10), || log().contains("graceful node shutdown unavailable"));
    // from now on the socket exists but no bus answers on it: each
    // reconnect attempt (one a second) shows as a connection, closed at once
    let listener = std::os::unix::net::UnixListener::bind(&bus).unwrap();
    listener.set_nonblocking(true).unwrap();
    let mut attempts = 0;
    wait_for("two more connection attempts", Duration::from_secs(10), || {
        while let Ok((conn, _)) = listener.accept() {
            drop(conn);
            attempts += 1;
        }
        attempts >= 2
    });
    let _ = podwarden::sys::kill(child.id() as i32, libc::SIGTERM);
    assert!(child.wait().unwrap().success());
    let err = log();
    assert_eq!(err.matches("graceful node shutdown unavailable").count(), 1, "one warning: {err}");
}

#[test]
fn a_users_own_tcache_tunable_is_kept_and_run_does_not_execute_again() {
    let d = TempDir::new("daemon-tunables");
    let config = d.0.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "staticPodPath: {0}/manifests\ncontainerRuntimeEndpoint: fake://\nrootDir: {0}/root\napiSocket: {0}/api.sock\npodLogsDir: {0}/logs\nport: 0\nreadOnlyPort: 0\n{EVICTION}",
            d.0.display()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(d.0.join("manifests")).unwrap();
    let mut child = Command::new(BIN)
        .args(["run", "--config", config.to_str().unwrap()])
        .env("GLIBC_TUNABLES", "glibc.malloc.tcache_count=3")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    wait_for("the API socket", Duration::from_secs(10), || d.0.join("api.sock").exists());
    let environ = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap()).into_owned();
    podwarden::sys::kill(pid, libc::SIGTERM).unwrap();
    let _ = child.wait();
    assert!(environ.split('\0').any(|v| v == "GLIBC_TUNABLES=glibc.malloc.tcache_count=3"), "{environ}");
    assert!(!environ.contains("PODWARDEN_MALLOC_TUNED"), "{environ}");
}

#[test]
fn a_credential_provider_config_naming_a_missing_plugin_stops_the_start() {
    let d = TempDir::new("credcfg");
    std::fs::create_dir_all(d.0.join("bin")).unwrap();
    std::fs::write(
        d.0.join("providers.yaml"),
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: ecr-login\n  \
         matchImages: ['*.example']\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
    )
    .unwrap();
    let config = d.0.join("config.yaml");
    let base = format!(
        "containerRuntimeEndpoint: fake://\nrootDir: {0}/root\napiSocket: {0}/api.sock\nstaticPodPath: {0}/manifests\n\
         podLogsDir: {0}/logs\nport: 0\nreadOnlyPort: 0\n{EVICTION}",
        d.0.display()
    );
    std::fs::write(
        &config,
        format!(
            "{base}imageCredentialProviderConfig: {0}/providers.yaml\nimageCredentialProviderBinDir: {0}/bin\n",
            d.0.display()
        ),
    )
    .unwrap();
    let out = Command::new(BIN).args(["run", "--config", config.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(78), "EX_CONFIG");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("config.yaml")
            && err.contains("imageCredentialProviderBinDir")
            && err.contains(&format!("plugin binary executable {}/bin/ecr-login did not exist", d.0.display())),
        "{err}"
    );
    // a provider config the kubelet would refuse: named, with the reason
    std::fs::write(
        d.0.join("providers.yaml"),
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n",
    )
    .unwrap();
    let out = Command::new(BIN).args(["run", "--config", config.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(78), "EX_CONFIG");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("providers.yaml") && err.contains("at least 1 item in plugins is required"), "{err}");
    // without a bin dir, the config is refused before anything starts
    std::fs::write(&config, format!("{base}imageCredentialProviderConfig: {}/providers.yaml\n", d.0.display()))
        .unwrap();
    let out = Command::new(BIN).args(["run", "--config", config.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(78), "EX_CONFIG");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("field imageCredentialProviderBinDir") && err.contains("required with"), "{err}");
}

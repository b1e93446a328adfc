//! More of the Kubernetes API end to end with the real kubectl 1.27 and
//! 1.33 (beside `kubectl_e2e`): attach to a container with stdin and a
//! terminal, `exec -it` under a pty, ConfigMaps and Secrets written
//! through kubectl (apply client- and server-side, patch, create, delete,
//! and the refusals), the kubelet's `/run`, aggregated discovery, and a
//! watch that falls too far behind (410 Expired).
//!
//! The tests share one containerd, so they run one at a time.

mod agent;
mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use agent::kubectl::*;
use agent::*;

/// bob may read (not secrets, not write) in e2e.
const AUTHZ: &str = "apiAuthorization:\n  rules:\n  - users: [bob]\n    verbs: [read]\n    namespaces: [e2e]\n";

/// Answers each line it reads.
const READER: &str = "while read l; do echo got:$l; done";

/// A pod whose one container keeps stdin open (and has a terminal with
/// `tty`), answering each line.
fn stdin_pod(name: &str, tty: bool) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: e2e\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    stdin: true\n    tty: {tty}\n    command: [\"sh\", \"-c\", {READER:?}]\n"
    )
}

/// Everything `r` gives within `max`, or until `done` holds of it (asked
/// after each read and every 200 ms).
fn read_until(r: impl Read + Send + 'static, max: Duration, mut done: impl FnMut(&str) -> bool) -> String {
    let (tx, rx) = crossbeam_channel::unbounded::<Vec<u8>>();
    let mut r = r;
    podwarden::base::thread::spawn("test-read", None, move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    })
    .unwrap();
    let end = Instant::now() + max;
    let mut seen = Vec::new();
    while !done(&String::from_utf8_lossy(&seen)) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match rx.recv_timeout(left.min(Duration::from_millis(200))) {
            Ok(b) => seen.extend(b),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        }
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// `script -qfec CMD /dev/null`: CMD under a pty, with the agent's
/// kubeconfig; stdin piped.
fn under_pty(a: &Agent, kc: &Path, cmd: &str) -> Child {
    Command::new("script")
        .args(["-qfec", cmd, "/dev/null"])
        .env("HOME", &a.dir.0)
        .env("KUBECONFIG", kc)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("script (util-linux) runs a command under a pty")
}

fn wait_exit(c: &mut Child, max: Duration) -> i32 {
    let mut code = None;
    poll_until(max, || {
        code = c.try_wait().unwrap().map(|s| s.code().unwrap_or(-1));
        code.is_some()
    });
    code.unwrap_or_else(|| {
        let _ = c.kill();
        panic!("still running after {max:?}")
    })
}

#[test]
fn kubectl_attach_and_exec_under_a_terminal() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start_with("kubectl-tty", "", &[]);
    let admin = kubeconfig(&a, "admin.yaml", &[]);
    a.write("in.yaml", &stdin_pod("in", false));
    a.write("tty.yaml", &stdin_pod("tty", true));
    let (u_in, u_tty) = (a.uid("in"), a.uid("tty"));
    wait_for("both running", Duration::from_secs(30), || a.running(&u_in) == 1 && a.running(&u_tty) == 1);
    for v in VERSIONS {
        // attach -i: the input reaches the container's stdin, its answer comes back
        let mut c = kubectl_cmd(&a, v, &admin)
            .args(["attach", "-i", "-n", "e2e", "in"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let line = format!("hello-{v}");
        let mut stdin = c.stdin.take().unwrap();
        writeln!(stdin, "{line}").unwrap();
        let want = format!("got:{line}");
        let out = read_until(c.stdout.take().unwrap(), Duration::from_secs(30), |s| s.contains(&want));
        let _ = c.kill();
        let _ = c.wait();
        assert!(out.contains(&want), "{v}: attach -i: {out:?}");
        // attach -it to the container's terminal, under a pty of our own
        let bin = kubectl_bin(v);
        let mut c = under_pty(&a, &admin, &format!("{} attach -it -n e2e tty", bin.display()));
        let mut stdin = c.stdin.take().unwrap();
        let want = format!("got:tty-{v}");
        let out = read_until(c.stdout.take().unwrap(), Duration::from_secs(30), |s| {
            // typed (every 200 ms) until answered: the first keys may come
            // before the stream is up
            let _ = stdin.write_all(format!("tty-{v}\r").as_bytes());
            s.contains(&want)
        });
        let _ = c.kill();
        let _ = c.wait();
        assert!(out.contains(&want), "{v}: attach -it: {out:?}");
        // exec -it under a pty: the command has a terminal, its exit code is kubectl's
        let cmd = format!(
            "{} exec -it -n e2e in -- sh -c 'test -t 0 && test -t 1 && echo TERMINAL; tty; exit 7'",
            bin.display()
        );
        let mut c = under_pty(&a, &admin, &cmd);
        let out = read_until(c.stdout.take().unwrap(), Duration::from_secs(30), |_| false);
        let code = wait_exit(&mut c, Duration::from_secs(10));
        assert!(out.contains("TERMINAL") && out.contains("/dev/pts/"), "{v}: exec -it: {out:?}");
        assert_eq!(code, 7, "{v}: exec -it's exit code: {out:?}");
        // without a terminal of its own, kubectl asks for none
        let (code, out, err) =
            kubectl(&a, v, &admin, &["exec", "-it", "-n", "e2e", "in", "--", "sh", "-c", "test -t 0 || echo NOTTY"]);
        assert_eq!((code, out.trim()), (0, "NOTTY"), "{v}: {err}");
    }
    a.clean_up(&[&u_in, &u_tty]);
}

fn cm_yaml(name: &str, data: &[(&str, &str)], extra: &str) -> String {
    let data: String = data.iter().map(|(k, v)| format!("  {k}: {v:?}\n")).collect();
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: e2e\n{extra}data:\n{data}")
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn kubectl_writes_config_maps_and_secrets_as_files() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start_with("kubectl-objects", AUTHZ, &[]);
    let admin = kubeconfig(&a, "admin.yaml", &[]);
    let bob = kubeconfig(&a, "bob.yaml", &["--user", "bob"]);
    let write = |name: &str, text: &str| {
        let p = a.dir.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    for v in VERSIONS {
        let tag = v.replace('.', "");
        // a ConfigMap: created by client-side apply into a file of its own
        let name = format!("app{tag}");
        let f = write(&format!("{name}.yaml"), &cm_yaml(&name, &[("a", "1"), ("b", "true")], ""));
        assert_eq!(ok(&a, v, &admin, &["apply", "-f", &f]), format!("configmap/{name} created\n"), "{v}");
        let stored = a.manifests().join(format!("e2e_configmap_{name}.yaml"));
        assert!(stored.exists(), "{v}: {:?}", std::fs::read_dir(a.manifests()).unwrap().collect::<Vec<_>>());
        assert_eq!(mode(&stored), 0o600, "{v}");
        let got = json_of(&ok(&a, v, &admin, &["get", "cm", &name, "-n", "e2e", "-o", "json"]));
        assert_eq!(got["data"], serde_json::json!({"a": "1", "b": "true"}), "{v}");
        assert!(got["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].is_string());
        // a key removed, one changed, one added: the three-way merge removes it
        write(&format!("{name}.yaml"), &cm_yaml(&name, &[("a", "2"), ("c", "x")], ""));
        assert_eq!(ok(&a, v, &admin, &["apply", "-f", &f]), format!("configmap/{name} configured\n"), "{v}");
        let got = json_of(&ok(&a, v, &admin, &["get", "cm", &name, "-n", "e2e", "-o", "json"]));
        assert_eq!(got["data"], serde_json::json!({"a": "2", "c": "x"}), "{v}");
        assert_eq!(ok(&a, v, &admin, &["apply", "-f", &f]), format!("configmap/{name} unchanged\n"), "{v}");
        // patches: merge, then JSON
        ok(&a, v, &admin, &["patch", "cm", &name, "-n", "e2e", "--type=merge", "-p", r#"{"data":{"d":"4"}}"#]);
        ok(
            &a,
            v,
            &admin,
            &["patch", "cm", &name, "-n", "e2e", "--type=json", "-p", r#"[{"op":"remove","path":"/data/a"}]"#],
        );
        let got = json_of(&ok(&a, v, &admin, &["get", "cm", &name, "-n", "e2e", "-o", "json"]));
        assert_eq!(got["data"], serde_json::json!({"c": "x", "d": "4"}), "{v}");
        assert!(std::fs::read_to_string(&stored).unwrap().contains("d: '4'"), "{v}: the file holds the change");
        // server-side apply takes the object over (with --force-conflicts)
        write(&format!("{name}.yaml"), &cm_yaml(&name, &[("c", "ssa")], ""));
        let out = ok(&a, v, &admin, &["apply", "--server-side", "--force-conflicts", "-f", &f]);
        assert!(out.contains("serverside-applied"), "{v}: {out}");
        let got = json_of(&ok(&a, v, &admin, &["get", "cm", &name, "-n", "e2e", "-o", "json"]));
        assert_eq!(got["data"]["c"], "ssa", "{v}");
        // refused as the API server refuses: an invalid key, an unknown field
        let bad = write("bad.yaml", &cm_yaml(&name, &[("a b", "1")], ""));
        let err = fails(&a, v, &admin, &["apply", "-f", &bad]);
        assert!(err.contains("is invalid") && err.contains("a b"), "{v}: {err}");
        let unknown = write("unknown.yaml", &cm_yaml(&name, &[("c", "1")], "dataa: {}\n"));
        let err = fails(&a, v, &admin, &["apply", "-f", &unknown]);
        assert!(err.contains("dataa"), "{v}: {err}");
        // a reader may not write
        let err = fails(&a, v, &bob, &["apply", "-f", &f]);
        assert!(err.contains("Forbidden") && err.contains("configmaps"), "{v}: {err}");
        // delete: the file goes
        assert_eq!(ok(&a, v, &admin, &["delete", "cm", &name, "-n", "e2e"]), format!("configmap \"{name}\" deleted\n"));
        assert!(!stored.exists(), "{v}");
        assert!(fails(&a, v, &admin, &["get", "cm", &name, "-n", "e2e"]).contains("NotFound"), "{v}");
        // server-side apply creates too
        let out = ok(&a, v, &admin, &["apply", "--server-side", "-f", &f]);
        assert!(out.contains("serverside-applied") && stored.exists(), "{v}: {out}");
        ok(&a, v, &admin, &["delete", "cm", &name, "-n", "e2e"]);

        // a Secret: its values in its file (0600), never in what is read
        let s = format!("pw{tag}");
        let out =
            ok(&a, v, &admin, &["create", "secret", "generic", &s, "-n", "e2e", "--from-literal=password=hunter2"]);
        assert_eq!(out, format!("secret/{s} created\n"), "{v}");
        let stored = a.manifests().join(format!("e2e_secret_{s}.yaml"));
        assert_eq!(mode(&stored), 0o600, "{v}");
        assert!(std::fs::read_to_string(&stored).unwrap().contains("aHVudGVyMg=="), "{v}: base64 of the value");
        let got = json_of(&ok(&a, v, &admin, &["get", "secret", &s, "-n", "e2e", "-o", "json"]));
        assert_eq!(got["data"], serde_json::json!({"password": ""}), "{v}: values are left out");
        let err = fails(&a, v, &bob, &["get", "secret", &s, "-n", "e2e"]);
        assert!(err.contains("Forbidden"), "{v}: {err}");
        // apply with stringData: merged into data as the API server stores it
        let sf = write(
            "secret.yaml",
            &format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {s}\n  namespace: e2e\nstringData:\n  token: abc\n"
            ),
        );
        let out = ok(&a, v, &admin, &["apply", "-f", &sf]);
        assert!(out.contains("configured"), "{v}: {out}");
        let text = std::fs::read_to_string(&stored).unwrap();
        assert!(text.contains("YWJj") && !text.contains("\nstringData:"), "{v}: {text}");
        let got = json_of(&ok(&a, v, &admin, &["get", "secret", &s, "-n", "e2e", "-o", "json"]));
        let last = got["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].as_str().unwrap();
        assert!(last.contains("token") && !last.contains("abc"), "{v}: the last applied values are left out: {last}");
        // a Secret's type is immutable
        let typed = write(
            "typed.yaml",
            &format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {s}\n  namespace: e2e\ntype: kubernetes.io/basic-auth\nstringData:\n  password: x\n"
            ),
        );
        let err = fails(&a, v, &admin, &["apply", "-f", &typed]);
        assert!(err.contains("field is immutable") && err.contains("type"), "{v}: {err}");
        assert_eq!(ok(&a, v, &admin, &["delete", "secret", &s, "-n", "e2e"]), format!("secret \"{s}\" deleted\n"));
        assert!(!stored.exists(), "{v}");
    }
    // an immutable ConfigMap keeps its data
    let f = write("frozen.yaml", &cm_yaml("frozen", &[("a", "1")], "immutable: true\n"));
    ok(&a, "1.33", &admin, &["apply", "-f", &f]);
    write("frozen.yaml", &cm_yaml("frozen", &[("a", "2")], "immutable: true\n"));
    let err = fails(&a, "1.33", &admin, &["apply", "-f", &f]);
    assert!(err.contains("data: Forbidden: field is immutable when `immutable` is set"), "{err}");
    let got = json_of(&ok(&a, "1.33", &admin, &["get", "cm", "frozen", "-n", "e2e", "-o", "json"]));
    assert_eq!(got["data"]["a"], "1");
    // an object beside a static pod is the file's: refused, naming it
    a.write("static.yaml", &format!("{}---\n{}", pod_yaml("static", "", TRAPPING), cm_yaml("side", &[("k", "v")], "")));
    wait_for("side served", Duration::from_secs(20), || {
        kubectl(&a, "1.33", &admin, &["get", "cm", "side", "-n", "e2e"]).0 == 0
    });
    for v in VERSIONS {
        let err = fails(&a, v, &admin, &["delete", "cm", "side", "-n", "e2e"]);
        assert!(err.contains("Forbidden") && err.contains("static.yaml") && err.contains("edit"), "{v}: {err}");
        let err =
            fails(&a, v, &admin, &["patch", "cm", "side", "-n", "e2e", "--type=merge", "-p", r#"{"data":{"k":"w"}}"#]);
        assert!(err.contains("Forbidden") && err.contains("static.yaml"), "{v}: {err}");
    }
    assert!(a.manifests().join("static.yaml").exists());
    // a change through kubectl reaches a pod as an edit of the file would
    let live = write("live.yaml", &cm_yaml("live", &[("v", "one")], ""));
    ok(&a, "1.33", &admin, &["apply", "-f", &live]);
    a.write(
        "reader.yaml",
        &pod_yaml("reader", "  volumes:\n  - name: cfg\n    configMap: {name: live}\n", TRAPPING)
            .replace("    command:", "    volumeMounts:\n    - {name: cfg, mountPath: /cfg}\n    command:"),
    );
    let (u_static, u_reader) = (a.uid("static"), a.uid("reader"));
    wait_for("reader running", Duration::from_secs(30), || a.running(&u_reader) == 1);
    let cat = |a: &Agent| {
        let (code, out, err) = kubectl(a, "1.33", &admin, &["exec", "-n", "e2e", "reader", "--", "cat", "/cfg/v"]);
        if code != 0 {
            eprintln!("cat /cfg/v: {code} {err}");
        }
        out
    };
    wait_for("the pod sees the value", Duration::from_secs(30), || cat(&a) == "one");
    write("live.yaml", &cm_yaml("live", &[("v", "two")], ""));
    ok(&a, "1.27", &admin, &["apply", "-f", &live]);
    wait_for("the pod sees the new value", Duration::from_secs(60), || cat(&a) == "two");
    a.clean_up(&[&u_static, &u_reader]);
}

#[test]
fn the_kubelet_run_endpoint_runs_a_command() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start_with("kubectl-run", AUTHZ, &[]);
    let admin = kubeconfig(&a, "admin.yaml", &[]);
    let bob = kubeconfig(&a, "bob.yaml", &["--user", "bob"]);
    a.write("sh.yaml", &pod_yaml("sh", "", TRAPPING));
    let uid = a.uid("sh");
    wait_for("sh running", Duration::from_secs(30), || a.running(&uid) == 1);
    // the form body: cmd=<command>, `&` and `+` encoded
    let body = |cmd: &str| {
        let p = a.dir.0.join("cmd.txt");
        let cmd = cmd.strip_prefix("cmd=").unwrap().replace('%', "%25").replace('&', "%26").replace('+', "%2B");
        std::fs::write(&p, format!("cmd={cmd}")).unwrap();
        p.to_str().unwrap().to_string()
    };
    for v in VERSIONS {
        // kubectl create --raw POSTs the file: cmd= as a form body
        let f = body("cmd=sh -c echo${IFS}out;echo${IFS}err>&2");
        let out = ok(&a, v, &admin, &["create", "--raw", "/run/e2e/sh/main", "-f", &f]);
        assert_eq!(out, "out\nerr\n", "{v}: stdout then stderr");
        let f = body("cmd=cat /etc/hostname");
        let out = ok(&a, v, &admin, &["create", "--raw", &format!("/run/e2e/sh/{uid}/main"), "-f", &f]);
        assert_eq!(out.trim(), "sh", "{v}: the path with the pod's UID");
        let err = fails(&a, v, &admin, &["create", "--raw", "/run/e2e/sh/not-the-uid/main", "-f", &f]);
        assert!(err.contains("NotFound") || err.contains("not found"), "{v}: {err}");
        // a failing command: its exit code
        let f = body("cmd=sh -c exit${IFS}3");
        let err = fails(&a, v, &admin, &["create", "--raw", "/run/e2e/sh/main", "-f", &f]);
        assert!(err.contains("exit code 3"), "{v}: {err}");
        // the exec right is needed
        let f = body("cmd=true");
        let err = fails(&a, v, &bob, &["create", "--raw", "/run/e2e/sh/main", "-f", &f]);
        assert!(err.contains("Forbidden"), "{v}: {err}");
        // GET is not /run
        let err = fails(&a, v, &admin, &["get", "--raw", "/run/e2e/sh/main?cmd=true"]);
        assert!(err.contains("MethodNotAllowed") || err.contains("405"), "{v}: {err}");
    }
    // the query form, and the answer's type
    let mut tls = tls_connect(&a, &admin);
    let (code, head, out) = request(&mut tls, "POST", "/run/e2e/sh/main?cmd=echo%20q", &[], b"");
    assert_eq!((code, String::from_utf8_lossy(&out).as_ref()), (200, "q\n"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/plain"), "{head}");
    a.clean_up(&[&uid]);
}

#[test]
fn both_kubectl_versions_use_aggregated_discovery() {
    let _serial = SERIAL.lock();
    let a = Agent::start_with("kubectl-discovery", "", &[]);
    let admin = kubeconfig(&a, "admin.yaml", &[]);
    for (v, form) in [("1.27", "v2beta1"), ("1.33", "v2")] {
        let cache = TempDir::new(&format!("kube-cache-{v}"));
        let cache_dir = cache.0.to_str().unwrap();
        let (code, out, log) = kubectl(&a, v, &admin, &["get", "po,cm", "-n", "e2e", "-v=8", "--cache-dir", cache_dir]);
        assert_eq!(code, 0, "{v}: {log}");
        assert!(out.is_empty() || out.contains("NAME"), "{v}: {out}");
        let want = format!("Content-Type: application/json;g=apidiscovery.k8s.io;v={form};as=APIGroupDiscoveryList");
        assert_eq!(log.matches(&want).count(), 2, "{v}: /api and /apis answered aggregated: {log}");
        // with the aggregated answers no group version is asked for on its own
        for gv in ["/api/v1?", "/apis/metrics.k8s.io/v1beta1?", "/apis/authentication.k8s.io/v1?"] {
            assert!(!log.lines().any(|l| l.contains("GET") && l.contains(gv)), "{v}: {gv} was read: {log}");
        }
        let res = ok(&a, v, &admin, &["api-resources", "--cache-dir", cache_dir]);
        let pods = res.lines().find(|l| l.starts_with("pods ")).unwrap_or_else(|| panic!("{v}: {res}"));
        assert_eq!(pods.split_whitespace().take(4).collect::<Vec<_>>(), ["pods", "po", "v1", "true"], "{v}: {res}");
        assert!(res.lines().any(|l| l.starts_with("configmaps ") && l.contains(" cm ")), "{v}: {res}");
        assert!(res.contains("metrics.k8s.io/v1beta1"), "{v}: {res}");
        // the short names come from it
        ok(&a, v, &admin, &["get", "cm", "-n", "e2e", "--cache-dir", cache_dir]);
    }
    // a client that does not ask gets the plain lists
    let mut tls = tls_connect(&a, &admin);
    let (code, head, body) = request(&mut tls, "GET", "/api", &[("Accept", "application/json")], b"");
    assert_eq!(code, 200);
    assert!(head.contains("Content-Type: application/json\r\n"), "{head}");
    assert_eq!(json_of(&String::from_utf8_lossy(&body))["kind"], "APIVersions");
}

/// Reads a chunked body to its end: the JSON lines it carried.
fn chunked_lines(tls: &mut Tls) -> Vec<Value> {
    let mut body = Vec::new();
    let _ = tls.read_to_end(&mut body);
    let mut out = Vec::new();
    let mut rest = &body[..];
    let mut data = Vec::new();
    while let Some(i) = rest.windows(2).position(|w| w == b"\r\n") {
        let len = usize::from_str_radix(std::str::from_utf8(&rest[..i]).unwrap().trim(), 16).unwrap();
        if len == 0 {
            break;
        }
        data.extend_from_slice(&rest[i + 2..i + 2 + len]);
        rest = &rest[i + 2 + len + 2..];
    }
    for line in data.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        out.push(serde_json::from_slice(line).unwrap());
    }
    out
}

/// A child whose stdout and stderr are gathered into one text.
fn gathered(mut c: Command) -> (Child, Arc<Mutex<String>>) {
    let mut c = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    for r in [Box::new(c.stdout.take().unwrap()) as Box<dyn Read + Send>, Box::new(c.stderr.take().unwrap())] {
        let log = log.clone();
        let mut r = r;
        podwarden::base::thread::spawn("test-log", None, move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                log.lock().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
        .unwrap();
    }
    (c, log)
}

/// The list requests (not watches) of one object's informer in a `-v=6`
/// log (1.27: `GET URL 200 OK`, 1.33: `"Response" verb="GET" url="URL"`).
fn lists_of(log: &str, name: &str) -> usize {
    let sel = format!("fieldSelector=metadata.name%3D{name}");
    log.lines().filter(|l| l.contains("round_trippers") && l.contains(&sel) && !l.contains("watch=true")).count()
}

#[test]
fn a_watch_that_falls_too_far_behind_ends_with_410_expired() {
    let _serial = SERIAL.lock();
    let a = Agent::start_with("kubectl-watch", "", &[]);
    let admin = kubeconfig(&a, "admin.yaml", &[]);
    a.write("first.yaml", &cm_yaml("first", &[("k", "v")], ""));
    wait_for("first served", Duration::from_secs(20), || {
        kubectl(&a, "1.33", &admin, &["get", "cm", "first", "-n", "e2e"]).0 == 0
    });
    // a client that asks for a watch and then does not read
    let mut slow = tls_connect(&a, &admin);
    let (code, head) = request_head(&mut slow, "GET", "/api/v1/namespaces/e2e/configmaps?watch=true", &[], b"");
    assert_eq!(code, 200, "{head}");
    // kubectl get -w, stopped (SIGSTOP) while the changes come: it falls behind too
    let mut getters: Vec<(&str, Child, Arc<Mutex<String>>)> = VERSIONS
        .iter()
        .map(|v| {
            let mut c = kubectl_cmd(&a, v, &admin);
            c.args(["get", "cm", "-n", "e2e", "-w", "-v=6"]);
            let (c, log) = gathered(c);
            (*v, c, log)
        })
        .collect();
    // kubectl wait: an informer (list, then watch) on one object
    let mut waiters: Vec<(&str, Child, Arc<Mutex<String>>)> = VERSIONS
        .iter()
        .map(|v| {
            let mut c = kubectl_cmd(&a, v, &admin);
            c.args(["wait", "--for=delete", "configmap/first", "-n", "e2e", "--timeout=120s", "-v=6"]);
            let (c, log) = gathered(c);
            (*v, c, log)
        })
        .collect();
    for (v, _, log) in getters.iter().chain(&waiters) {
        wait_for(&format!("kubectl {v} watching"), Duration::from_secs(20), || log.lock().contains("watch=true"));
    }
    for (_, c, _) in &getters {
        podwarden::sys::kill(c.id() as i32, libc::SIGSTOP).unwrap();
    }
    // 3000 ConfigMaps at once: many more changes than a watcher's buffer
    let many: Vec<String> = (0..3000).map(|i| cm_yaml(&format!("many-{i}"), &[("i", &i.to_string())], "")).collect();
    a.write("many.yaml", &many.join("---\n"));
    wait_for("3001 ConfigMaps served", Duration::from_secs(30), || {
        let (code, out, _) = kubectl(&a, "1.33", &admin, &["get", "cm", "-n", "e2e", "-o", "name"]);
        code == 0 && out.lines().count() == 3001
    });
    std::thread::sleep(Duration::from_secs(1));
    for (_, c, _) in &getters {
        podwarden::sys::kill(c.id() as i32, libc::SIGCONT).unwrap();
    }
    // the slow client gets what its buffer held, then 410 Expired
    let events = chunked_lines(&mut slow);
    let last = events.last().expect("watch events");
    assert_eq!(last["type"], "ERROR", "{last}");
    assert_eq!((last["object"]["code"].as_i64(), last["object"]["reason"].as_str()), (Some(410), Some("Expired")));
    let added = events.iter().filter(|e| e["type"] == "ADDED").count();
    assert!((1..3001).contains(&added), "{added} ADDED before the end");
    // kubectl get -w prints the Status and ends (it does not watch again,
    // with an API server neither), having shown part of the changes
    for (v, c, log) in &mut getters {
        let code = wait_exit(c, Duration::from_secs(30));
        let text = log.lock().clone();
        assert_eq!(code, 0, "{v}: {text}");
        let rows = text.lines().filter(|l| l.starts_with("many-")).count();
        assert!(
            text.contains("Expired") && rows < 3000,
            "{v}: {rows} rows: {}",
            &text[text.len().saturating_sub(2000)..]
        );
    }
    // kubectl wait's informer lists again after the 410 and goes on watching
    for (v, _, log) in &waiters {
        let relisted = || {
            let text = log.lock();
            text.contains("fell too far behind") && lists_of(&text, "first") >= 2
        };
        assert!(
            poll_until(Duration::from_secs(30), relisted),
            "kubectl {v} wait did not list again within 30 s: {}",
            log.lock()
        );
    }
    a.remove("first.yaml");
    for (v, c, log) in &mut waiters {
        let code = wait_exit(c, Duration::from_secs(30));
        assert_eq!(code, 0, "{v}: kubectl wait saw the delete after listing again: {}", log.lock());
    }
}

/// A flood on the Kubernetes API's port by clients that never finish a TLS
/// handshake (300 connections that send nothing and 20 that stop inside a
/// ClientHello, held open; then all of it again, as an attacker who
/// reconnects would) does not keep an operator out: kubectl (1.27 and
/// 1.33) answers at once every time, and so does the read-only port's
/// `/healthz`. The node drops the flood's connections beyond the budget of
/// connections without a client certificate.
#[test]
fn many_idle_connections_do_not_block_healthz_or_kubectl() {
    use podwarden::api::kube::gate;
    let _serial = SERIAL.lock();
    let a = Agent::start_with("kubectl-many", "", &[]);
    let admin = kubeconfig(&a, "admin.yaml", &[]);
    // discovery cached before the flood: each call below is one connection
    ok(&a, "1.33", &admin, &["get", "pods", "-A"]);
    ok(&a, "1.27", &admin, &["get", "pods", "-A"]);
    let connect = || std::net::TcpStream::connect(("127.0.0.1", a.kube_port)).unwrap();
    // a TLS record header (handshake, 512 bytes) and the ClientHello's first bytes
    let cut_hello = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03];
    let mut slowest = Duration::ZERO;
    for wave in 0..2 {
        let mut flood: Vec<std::net::TcpStream> = (0..300).map(|_| connect()).collect();
        for _ in 0..20 {
            let mut s = connect();
            s.write_all(&cut_hello).unwrap();
            flood.push(s);
        }
        // the accept thread has taken them all in (or the check below
        // measures the backlog, not the gate)
        std::thread::sleep(Duration::from_millis(300));
        for round in 0..4 {
            for v in VERSIONS {
                let t = Instant::now();
                let (code, out, err) = kubectl(&a, v, &admin, &["--request-timeout", "5s", "get", "pods", "-A"]);
                let took = t.elapsed();
                assert_eq!(code, 0, "wave {wave} round {round}, kubectl {v} after {took:?}: {out}{err}");
                // refused, a kubectl waits out its 5 s timeout or the node's
                // 5 s handshake deadline: 1 s is one fifth of that
                assert!(took < Duration::from_secs(1), "wave {wave} round {round}, kubectl {v} took {took:?}");
                slowest = slowest.max(took);
            }
            let t = Instant::now();
            assert_eq!(a.get("/healthz").as_deref().map(str::trim), Some("ok"), "wave {wave} round {round}");
            assert!(t.elapsed() < Duration::from_secs(1), "/healthz took {:?}", t.elapsed());
        }
        // the node closed every flood connection beyond one address's share
        let closed = flood
            .iter()
            .filter(|s| {
                s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
                match (&**s).read(&mut [0u8; 1]) {
                    Ok(0) => true,
                    Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
                    Ok(_) => false,
                }
            })
            .count();
        assert!(closed >= flood.len() - gate::PER_ADDRESS, "wave {wave}: {closed} of {} closed", flood.len());
    }
    eprintln!("the slowest kubectl call under the flood: {slowest:?}");
    assert!(a.log().contains("without a client certificate dropped"), "the drops are logged: {}", a.log());
}

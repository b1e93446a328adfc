//! The Kubernetes API end to end with the real kubectl 1.27 and 1.33: a
//! real daemon on the private containerd of `scripts/e2e-env.sh up`,
//! kubeconfigs from `podwarden kubeconfig`, HOME and KUBECONFIG in the
//! test's temp dir (kubectl caches discovery under ~/.kube/cache).
//!
//! The tests share one containerd, so they run one at a time.

mod agent;
mod common;

use agent::kubectl::*;
use agent::*;

const AUTHZ: &str = "apiAuthorization:\n  rules:\n  - users: [bob]\n    verbs: [read]\n    namespaces: [e2e]\n";

/// The second image of `scripts/e2e-env.sh up` (busybox too, with
/// another entrypoint, so another image ID).
const OTHER_IMAGE: &str = "localhost/pause:e2e";

/// The ID containerd gives `image`.
/// What containerd may name `image` by in a container's `imageRef`: its
/// ID, or (once the same image was also pulled from a registry, as the
/// registry tests do) one of its repo digests.
fn image_refs(a: &Agent, image: &str) -> Vec<String> {
    let info = a.cri.image_status(&call(), image).unwrap();
    let info = info.unwrap_or_else(|| panic!("{image} is not in containerd: run scripts/e2e-env.sh up"));
    std::iter::once(info.id).chain(info.digests).collect()
}

/// Prints a counter; the crash pod exits after a few lines and restarts.
const COUNTER: &str = "trap 'exit 0' TERM; i=0; while :; do echo line $i; i=$((i+1)); sleep 0.2 & wait; done";
const CRASH: &str = "echo run-$(cat /proc/sys/kernel/random/uuid); sleep 1; exit 3";

#[test]
fn kubectl_reads_creates_watches_and_deletes_pods() {
    let _serial = SERIAL.lock();
    let before_start = std::time::SystemTime::now();
    let mut a = Agent::start_with("kubectl", AUTHZ, &[]);
    let after_start = std::time::SystemTime::now();
    let admin = kubeconfig(&a, "admin.yaml", &[]);
    let manifest = a.dir.0.join("web.yaml");
    std::fs::write(&manifest, pod_yaml("web", "", COUNTER)).unwrap();
    let m = manifest.to_str().unwrap();
    // created through the API: the same manifest file podwarden apply writes
    assert_eq!(ok(&a, "1.33", &admin, &["create", "--validate=false", "-f", m]), "pod/web created\n");
    a.write("crash.yaml", &pod_yaml("crash", "", CRASH));
    let (web, crash) = (a.uid("web"), a.uid("crash"));
    assert!(
        a.manifests().join("e2e_web.json").exists(),
        "{:?}",
        std::fs::read_dir(a.manifests()).unwrap().collect::<Vec<_>>()
    );
    wait_for("web running", Duration::from_secs(30), || a.running(&web) == 1);
    for v in VERSIONS {
        wait_for("web Running in kubectl get", Duration::from_secs(20), || {
            ok(&a, v, &admin, &["get", "pods", "-n", "e2e"]).contains("Running")
        });
        let all = ok(&a, v, &admin, &["get", "pods", "-A"]);
        let head: Vec<&str> = all.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(head, ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"], "{v}: {all}");
        let row = all.lines().find(|l| l.contains(" web ")).unwrap_or_else(|| panic!("{v}: {all}"));
        assert_eq!(
            row.split_whitespace().take(5).collect::<Vec<_>>(),
            ["e2e", "web", "1/1", "Running", "0"],
            "{v}: {all}"
        );
        let wide = ok(&a, v, &admin, &["get", "pods", "-n", "e2e", "-o", "wide"]);
        assert!(wide.lines().next().unwrap().contains("NOMINATED NODE") && wide.contains(" e2e "), "{v}: {wide}");
        let y: Value =
            serde_yaml_ng::from_str(&ok(&a, v, &admin, &["get", "pod", "web", "-n", "e2e", "-o", "yaml"])).unwrap();
        assert_eq!((y["kind"].as_str(), y["metadata"]["uid"].as_str()), (Some("Pod"), Some(web.as_str())), "{v}");
        let d = ok(&a, v, &admin, &["describe", "pod", "web", "-n", "e2e"]);
        assert!(d.contains("Status:") && d.contains("Running") && d.contains("Started"), "{v}: {d}");
        let n = ok(&a, v, &admin, &["describe", "node", "e2e"]);
        assert!(n.contains("KubeletReady") && n.contains("Non-terminated Pods:"), "{v}: {n}");
        // the Node was created when the agent started, not when first asked
        // for (seconds after the start by now)
        let created = ok(&a, v, &admin, &["get", "node", "e2e", "-o", "jsonpath={.metadata.creationTimestamp}"]);
        let created = std::time::SystemTime::from(created.trim().parse::<k8s_openapi::jiff::Timestamp>().unwrap());
        let second = Duration::from_secs(1);
        assert!(
            created + second >= before_start && created <= after_start + second,
            "{v}: the node's creationTimestamp {created:?} is not the agent's start ({before_start:?} to {after_start:?})"
        );
        assert!(n.lines().any(|l| l.split_whitespace().take(2).eq(["e2e", "web"])), "{v}: the node's pods: {n}");
        let ev = ok(&a, v, &admin, &["get", "events", "-n", "e2e"]);
        assert!(ev.starts_with("LAST SEEN") && ev.contains("pod/web") && ev.contains("Started"), "{v}: {ev}");
        let who = ok(&a, v, &admin, &["auth", "whoami"]);
        assert!(who.contains("admin") && who.contains("podwarden:admins"), "{v}: {who}");
        // logs: all, --tail, --timestamps
        let logs = ok(&a, v, &admin, &["logs", "web", "-n", "e2e"]);
        assert!(logs.starts_with("line 0\n"), "{v}: {logs}");
        let tail = ok(&a, v, &admin, &["logs", "web", "-n", "e2e", "--tail", "2"]);
        assert_eq!(tail.lines().count(), 2, "{v}: {tail}");
        let ts = ok(&a, v, &admin, &["logs", "web", "-n", "e2e", "--tail", "1", "--timestamps"]);
        let (t, text) = ts.trim_end().split_once(' ').unwrap();
        assert!(t.parse::<k8s_openapi::jiff::Timestamp>().is_ok() && text.starts_with("line "), "{v}: {ts}");
        // top (the first stats snapshot comes with the eviction thread's pass)
        let mut top = String::new();
        wait_for("kubectl top pods", Duration::from_secs(30), || {
            let (code, out, _) = kubectl(&a, v, &admin, &["top", "pods", "-n", "e2e"]);
            top = out;
            code == 0 && top.contains("web")
        });
        assert!(top.starts_with("NAME") && top.contains("CPU(cores)"), "{v}: {top}");
        let topn = ok(&a, v, &admin, &["top", "node"]);
        assert!(topn.contains("e2e") && topn.contains("MEMORY"), "{v}: {topn}");
    }
    // logs -f (follow=true): lines logged after it started keep coming
    // while kubectl runs, each once and in order; kubectl's output is read
    // as it comes, by a thread of its own
    let mut follow = kubectl_cmd(&a, "1.33", &admin)
        .args(["logs", "-f", "web", "-n", "e2e"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (followed, reader) = read_as_it_comes(follow.stdout.take().unwrap());
    let lines = || followed.lock().lines().count();
    wait_for("logs -f printing", Duration::from_secs(20), || lines() > 0);
    // what was logged by now, kubectl's first answer included
    let logged = ok(&a, "1.33", &admin, &["logs", "web", "-n", "e2e"]).lines().count();
    wait_for("logs -f printing lines logged after it started", Duration::from_secs(20), || {
        let exited = follow.try_wait().unwrap();
        assert!(exited.is_none(), "kubectl logs -f exited ({exited:?}) after {} lines", lines());
        lines() >= logged + 3
    });
    assert!(follow.try_wait().unwrap().is_none(), "kubectl logs -f still follows");
    let _ = follow.kill();
    let _ = follow.wait();
    reader.join().unwrap();
    let seen = followed.lock().clone();
    // whole lines (kubectl may have been killed in the middle of one)
    let whole = &seen[..seen.rfind('\n').map_or(0, |i| i + 1)];
    let numbers: Vec<usize> = whole
        .lines()
        .map(|l| l.strip_prefix("line ").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{l:?} in {seen}")))
        .collect();
    assert_eq!(numbers, (0..numbers.len()).collect::<Vec<_>>(), "logs -f printed each line once, in order: {seen}");
    // --previous and the restarts column of a crashing pod
    wait_for("crash restarted", Duration::from_secs(60), || {
        a.pod("crash").is_some_and(|p| p["status"]["containerStatuses"][0]["restartCount"].as_i64().unwrap_or(0) >= 1)
    });
    for v in VERSIONS {
        let prev = ok(&a, v, &admin, &["logs", "crash", "-n", "e2e", "--previous"]);
        assert!(prev.starts_with("run-"), "{v}: {prev}");
        let row = ok(&a, v, &admin, &["get", "pod", "crash", "-n", "e2e"]);
        assert!(row.contains(" ago)"), "{v}: restarts show the last restart: {row}");
    }
    // get -w sees a change (1.33 and 1.27), delete waits until the pod is gone
    let watch = |v: &str| {
        Command::new(kubectl_bin(v))
            .args(["get", "pods", "-n", "e2e", "-w"])
            .env("HOME", &a.dir.0)
            .env("KUBECONFIG", &admin)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut watchers: Vec<Child> = VERSIONS.iter().map(|v| watch(v)).collect();
    std::thread::sleep(Duration::from_secs(2));
    let t = Instant::now();
    assert_eq!(ok(&a, "1.27", &admin, &["delete", "pod", "web", "-n", "e2e"]), "pod \"web\" deleted\n");
    assert!(a.pod("web").is_none(), "delete returned before the pod was gone");
    eprintln!("kubectl delete took {:?}", t.elapsed());
    assert!(!a.manifests().join("e2e_web.json").exists());
    std::thread::sleep(Duration::from_secs(1));
    for (w, v) in watchers.iter_mut().zip(VERSIONS) {
        let _ = w.kill();
        let mut text = String::new();
        w.stdout.take().unwrap().read_to_string(&mut text).unwrap();
        let _ = w.wait();
        let web_rows: Vec<&str> = text.lines().filter(|l| l.starts_with("web ")).collect();
        assert!(web_rows.len() >= 2 && web_rows.iter().any(|l| l.contains("Terminating")), "{v} get -w: {text}");
    }
    // a static pod cannot be deleted through the API
    let (code, _, err) = kubectl(&a, "1.33", &admin, &["delete", "pod", "crash", "-n", "e2e", "--wait=false"]);
    assert!(code != 0 && err.contains("Error from server (Forbidden)") && err.contains("static pod"), "{err}");
    a.clean_up(&[&web, &crash]);
}

#[test]
fn kubectl_refusals_no_certificate_other_ca_forbidden_and_revoked() {
    let _serial = SERIAL.lock();
    let a = Agent::start_with("kubectl-refuse", AUTHZ, &[]);
    let bob = kubeconfig(&a, "bob.yaml", &["--user", "bob"]);
    for v in VERSIONS {
        ok(&a, v, &bob, &["get", "pods", "-n", "e2e"]); // read in e2e: allowed
        let (code, _, err) = kubectl(&a, v, &bob, &["get", "pods", "-n", "kube-system"]);
        assert_eq!(code, 1, "{v}");
        assert!(
            err.contains("Error from server (Forbidden): pods is forbidden: User \"bob\" cannot list resource \"pods\" in API group \"\" in the namespace \"kube-system\""),
            "{v}: {err}"
        );
        let (_, _, err) = kubectl(&a, v, &bob, &["get", "secrets", "-n", "e2e"]);
        assert!(err.contains("Forbidden") && err.contains("secrets"), "{v}: read is not secrets: {err}");
        let (_, _, err) = kubectl(&a, v, &bob, &["get", "pods", "-A"]);
        assert!(err.contains("Forbidden") && err.contains("at the cluster scope"), "{v}: {err}");
    }
    // no client certificate: 401 (a bearer token, which podwarden does not
    // take, keeps kubectl 1.27 from prompting for a user name)
    let text = std::fs::read_to_string(&bob).unwrap();
    let anonymous: String = text
        .lines()
        .filter(|l| !l.contains("client-key-data"))
        .map(|l| {
            if l.contains("client-certificate-data") {
                "    token: not-a-podwarden-credential\n".to_string()
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let anon = a.dir.0.join("anon.yaml");
    std::fs::write(&anon, anonymous).unwrap();
    for v in VERSIONS {
        let (code, _, err) = kubectl(&a, v, &anon, &["get", "pods"]);
        assert!(code != 0 && err.contains("Unauthorized"), "{v}: {err}");
    }
    // a certificate from another CA: the TLS handshake fails
    let other = TempDir::new("other-ca");
    podwarden::api::kube::pki::ensure(&other.0, "elsewhere", &["elsewhere".to_string()]).unwrap();
    let c = podwarden::api::kube::pki::issue_client(
        &other.0,
        "mallory",
        &["podwarden:admins".into()],
        Duration::from_secs(3600),
    )
    .unwrap();
    let b64 = |s: &str| podwarden::api::kube::pki::base64(s.as_bytes());
    let foreign: String = text
        .lines()
        .map(|l| {
            if l.contains("client-certificate-data") {
                format!("    client-certificate-data: {}\n", b64(&c.cert_pem))
            } else if l.contains("client-key-data") {
                format!("    client-key-data: {}\n", b64(&c.key_pem))
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let foreign_kc = a.dir.0.join("foreign.yaml");
    std::fs::write(&foreign_kc, foreign).unwrap();
    for v in VERSIONS {
        let (code, _, err) = kubectl(&a, v, &foreign_kc, &["get", "pods"]);
        assert!(
            code != 0
                && !err.contains("Error from server")
                && (err.contains("tls") || err.contains("certificate") || err.contains("EOF")),
            "{v}: {err}"
        );
    }
    // revoked: refused from then on, without a restart
    let out = Command::new(BIN)
        .args(["kubeconfig", "--revoke-user", "bob", "--config"])
        .arg(a.dir.0.join("config.yaml"))
        .output()
        .unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).starts_with("revoked "));
    for v in VERSIONS {
        let (code, _, err) = kubectl(&a, v, &bob, &["get", "pods", "-n", "e2e"]);
        assert!(code != 0 && err.contains("Unauthorized"), "{v}: {err}");
    }
    let admin = kubeconfig(&a, "admin.yaml", &[]);
    ok(&a, "1.33", &admin, &["get", "pods", "-A"]);
}

/// kubectl exec (exit code, stdin), cp both ways and port-forward (bytes
/// identical) through the node's API: the relay to containerd's streaming
/// server (1.27 speaks SPDY; 1.33 WebSocket v5 and SPDY inside WebSocket,
/// which podwarden translates to SPDY for containerd).
#[test]
fn kubectl_exec_cp_and_port_forward_through_the_relay() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start_with("kubectl-exec", "", &[]);
    let admin = kubeconfig(&a, "admin.yaml", &[]);
    a.write(
        "sh.yaml",
        &pod_yaml("sh", "", "trap 'exit 0' TERM; nc -ll -p 8080 -e cat & while :; do sleep 1 & wait $!; done"),
    );
    let uid = a.uid("sh");
    wait_for("sh running", Duration::from_secs(30), || a.running(&uid) == 1);
    // exec's own arguments end the line (the harness's --request-timeout
    // would go to the command)
    let exec = |v: &str, args: &[&str]| {
        let out = Command::new(kubectl_bin(v))
            .args(["--request-timeout", "20s", "exec", "-n", "e2e", "sh", "--"])
            .args(args)
            .env("HOME", &a.dir.0)
            .env("KUBECONFIG", &admin)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    for v in VERSIONS {
        assert_eq!(exec(v, &["echo", "hello"]), (0, "hello\n".to_string()), "{v}");
        assert_eq!(exec(v, &["sh", "-c", "exit 3"]).0, 3, "{v}: the command's exit status");
        // stdin
        let out = Command::new(kubectl_bin(v))
            .args(["--request-timeout", "20s", "exec", "-i", "-n", "e2e", "sh", "--", "wc", "-c"])
            .env("HOME", &a.dir.0)
            .env("KUBECONFIG", &admin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                c.stdin.take().unwrap().write_all(&[b'x'; 12345])?;
                c.wait_with_output()
            })
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "12345", "{v}: stdin reached the command");
        // cp both ways
        let local = a.dir.0.join(format!("cp-{v}.bin"));
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&local, &data).unwrap();
        ok(&a, v, &admin, &["cp", local.to_str().unwrap(), "e2e/sh:/tmp/in.bin"]);
        let back = a.dir.0.join(format!("back-{v}.bin"));
        ok(&a, v, &admin, &["cp", "e2e/sh:/tmp/in.bin", back.to_str().unwrap()]);
        assert!(std::fs::read(&back).unwrap() == data, "{v}: cp both ways gives the same bytes");
        // port-forward: an echo server in the pod
        let port = free_port();
        let mut pf = Command::new(kubectl_bin(v))
            .args(["port-forward", "-n", "e2e", "pod/sh", &format!("{port}:8080")])
            .env("HOME", &a.dir.0)
            .env("KUBECONFIG", &admin)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut conn = None;
        wait_for("port-forward listening", Duration::from_secs(20), || {
            conn = std::net::TcpStream::connect(("127.0.0.1", port)).ok();
            conn.is_some()
        });
        let mut conn = conn.unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let payload: Vec<u8> = (0..1_000_000u32).map(|i| (i % 253) as u8).collect();
        let mut w = conn.try_clone().unwrap();
        let p2 = payload.clone();
        let writer = podwarden::base::thread::spawn("pf-write", None, move || w.write_all(&p2)).unwrap();
        let mut got = vec![0u8; payload.len()];
        conn.read_exact(&mut got).unwrap();
        writer.join().unwrap().unwrap();
        assert!(got == payload, "{v}: port-forward echoed the same bytes");
        let _ = pf.kill();
        let _ = pf.wait();
    }
    a.clean_up(&[&uid]);
}

/// Default `kubectl apply` (strict validation, client-side: the OpenAPI
/// documents, then POST and a strategic merge patch), `apply
/// --server-side`, and `kubectl patch`, on 1.27 (OpenAPI v2 protobuf) and
/// 1.33 (v3): an unknown field is refused by name; a changed image
/// replaces the pod (a new UID running the new image, the old pod gone
/// from containerd); a static pod is not patched.
#[test]
fn kubectl_apply_and_patch_with_strict_validation() {
    let _serial = SERIAL.lock();
    let a = Agent::start_with("kubectl-apply", "", &[]);
    let admin = kubeconfig(&a, "admin.yaml", &[]);
    for v in VERSIONS {
        let name = format!("ap{}", v.replace('.', ""));
        let file = a.dir.0.join(format!("{name}.yaml"));
        std::fs::write(&file, pod_yaml(&name, "", COUNTER)).unwrap();
        let f = file.to_str().unwrap();
        assert_eq!(ok(&a, v, &admin, &["apply", "-f", f]), format!("pod/{name} created\n"), "{v}");
        let uid = a.uid(&name);
        wait_for("running", Duration::from_secs(30), || a.running(&uid) == 1);
        // an unknown field: refused by name, nothing changed
        let bad = a.dir.0.join(format!("{name}-bad.yaml"));
        std::fs::write(&bad, pod_yaml(&name, "  foo: 1\n", COUNTER)).unwrap();
        let (code, _, err) = kubectl(&a, v, &admin, &["apply", "-f", bad.to_str().unwrap()]);
        assert_ne!(code, 0, "{v}: an unknown field is refused");
        assert!(err.contains("foo"), "{v}: the refusal names the field: {err}");
        // a label through a strategic merge patch (client-side apply)
        let labelled =
            pod_yaml(&name, "", COUNTER).replace("  namespace: e2e\n", "  namespace: e2e\n  labels: {tier: web}\n");
        std::fs::write(&file, labelled).unwrap();
        assert_eq!(ok(&a, v, &admin, &["apply", "-f", f]), format!("pod/{name} configured\n"), "{v}");
        wait_for("the label shows", Duration::from_secs(20), || {
            ok(&a, v, &admin, &["get", "pods", "-n", "e2e", "-l", "tier=web", "-o", "name"]).contains(&name)
        });
        // kubectl patch (merge)
        ok(
            &a,
            v,
            &admin,
            &["patch", "-n", "e2e", "pod", &name, "--type=merge", "-p", r#"{"metadata":{"labels":{"patched":"yes"}}}"#],
        );
        wait_for("the patch shows", Duration::from_secs(20), || {
            ok(&a, v, &admin, &["get", "pods", "-n", "e2e", "-l", "patched=yes", "-o", "name"]).contains(&name)
        });
        // a changed image replaces the pod: a new UID (an applied pod's UID
        // comes from its manifest's content) whose container runs the new
        // image, and the old pod gone from containerd
        let named = || -> Vec<Value> { a.pods().into_iter().filter(|p| p["metadata"]["name"] == *name).collect() };
        let uid_of = |p: &Value| p["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        let mut old = String::new();
        wait_for("one pod, patched and running", Duration::from_secs(30), || {
            let ps = named();
            old = ps.first().map(uid_of).unwrap_or_default();
            ps.len() == 1 && ps[0]["metadata"]["labels"]["patched"] == "yes" && a.running(&old) == 1
        });
        let image_of = |uid: &str| -> Option<String> {
            let rp = a.runtime_pod(uid);
            rp.containers.iter().find(|c| c.state == ContainerState::Running).map(|c| c.image_ref.clone())
        };
        let (busybox, pause) = (image_refs(&a, IMAGE), image_refs(&a, OTHER_IMAGE));
        let runs = image_of(&old);
        assert!(
            runs.as_ref().is_some_and(|r| busybox.contains(r)),
            "{v}: the pod runs {IMAGE} ({busybox:?}), not {runs:?}"
        );
        let changed = std::fs::read_to_string(&file).unwrap().replace(IMAGE, OTHER_IMAGE);
        std::fs::write(&file, changed).unwrap();
        assert_eq!(ok(&a, v, &admin, &["apply", "-f", f]), format!("pod/{name} configured\n"), "{v}");
        let mut new = String::new();
        wait_for("a new pod running the new image", Duration::from_secs(60), || {
            let ps = named();
            new = ps.first().map(uid_of).unwrap_or_default();
            ps.len() == 1 && new != old && image_of(&new).is_some()
        });
        let runs = image_of(&new);
        assert!(
            runs.as_ref().is_some_and(|r| pause.contains(r)),
            "{v}: the new pod runs {OTHER_IMAGE} ({pause:?}), not {runs:?}"
        );
        let fields = "jsonpath={.metadata.uid} {.spec.containers[0].image} {.metadata.labels.patched}";
        let shown = ok(&a, v, &admin, &["get", "pod", &name, "-n", "e2e", "-o", fields]);
        assert_eq!(shown, format!("{new} {OTHER_IMAGE} yes"), "{v}: kubectl shows the new pod");
        wait_for("the old pod gone from containerd", Duration::from_secs(60), || {
            let rp = a.runtime_pod(&old);
            rp.sandboxes.is_empty() && rp.containers.is_empty()
        });
        // server-side apply
        let ss = a.dir.0.join(format!("{name}-ss.yaml"));
        std::fs::write(&ss, pod_yaml(&format!("{name}-ss"), "", COUNTER)).unwrap();
        let out = ok(&a, v, &admin, &["apply", "--server-side", "-f", ss.to_str().unwrap()]);
        assert!(out.contains("serverside-applied"), "{v}: {out}");
    }
    // a static pod is not patched through the API
    a.write("static.yaml", &pod_yaml("static", "", COUNTER));
    let st = a.uid("static");
    wait_for("static running", Duration::from_secs(30), || a.running(&st) == 1);
    let (code, _, err) = kubectl(
        &a,
        "1.33",
        &admin,
        &["patch", "-n", "e2e", "pod", "static", "--type=merge", "-p", r#"{"metadata":{"labels":{"x":"y"}}}"#],
    );
    assert_ne!(code, 0);
    assert!(err.contains("Forbidden") || err.contains("forbidden"), "{err}");
    // the UIDs change with each edit: clean up by what containerd holds
    for e in std::fs::read_dir(a.manifests()).unwrap().flatten() {
        let _ = std::fs::remove_file(e.path());
    }
    wait_for("every pod gone", Duration::from_secs(60), || {
        a.cri.list_pods(&call()).unwrap().iter().all(|p| p.sandboxes.is_empty())
    });
}

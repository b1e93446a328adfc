//! exec, attach, port-forward and cp end to end: the real `podwarden`
//! binary as daemon (on the private containerd of `scripts/e2e-env.sh up`)
//! and as client, whose streams go to containerd's streaming server; and
//! the relay (`api::stream::serve`) on an in-process agent, with the
//! upgrade answers kubectl's versions get and the numbers of the issue's
//! bench (exec and port-forward, direct against relayed).
//!
//! The tests share one containerd, so they run one at a time.

mod agent;
mod common;

use agent::*;
use common::EVICTION;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

/// The pod: an echo server on 8080 (`nc -ll -e cat`), a line every 200 ms
/// on stdout.
const ECHO_AND_COUNT: &str =
    "trap 'exit 0' TERM; nc -ll -p 8080 -e cat & i=0; while :; do echo line $i; i=$((i+1)); sleep 0.2 & wait $!; done";

/// A named thread (podwarden's rule for every thread).
fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
    podwarden::base::thread::spawn("stream-test", None, f).unwrap()
}

fn cli(a: &Agent, args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    cli_as(a, None, args, stdin)
}

fn cli_as(a: &Agent, ids: Option<(u32, u32)>, args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut cmd = match ids {
        Some((uid, gid)) => {
            let mut c = Command::new("setpriv");
            c.args([format!("--reuid={uid}"), format!("--regid={gid}"), "--clear-groups".into(), BIN.into()]);
            c
        }
        None => Command::new(BIN),
    };
    // --socket before `--`: everything after it is the command
    let mut full: Vec<String> = Vec::new();
    let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    full.extend(args[..split].iter().map(|s| s.to_string()));
    full.push("--socket".into());
    full.push(a.api_socket().to_string_lossy().into_owned());
    full.extend(args[split..].iter().map(|s| s.to_string()));
    let mut child =
        cmd.args(&full).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let writer = spawn(move || {
        let _ = input.write_all(&data);
        // stdin stays open a moment: v4 cannot pass its end on anyway
        drop(input);
    });
    let out = wait_output(child, Duration::from_secs(60));
    writer.join().unwrap();
    out
}

/// Wait for `child` (at most `limit`, then kill it and fail).
fn wait_output(child: Child, limit: Duration) -> (i32, String, String) {
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => {
            let out = out.unwrap();
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
        }
        Err(_) => {
            let _ = podwarden::sys::kill(pid, libc::SIGKILL);
            panic!("the CLI did not end within {limit:?}");
        }
    }
}

fn start_pod(a: &Agent, name: &str, extra_spec: &str) -> String {
    a.write(&format!("{name}.yaml"), &pod_yaml(name, extra_spec, ECHO_AND_COUNT));
    let uid = a.uid(name);
    wait_for(&format!("{name} running"), Duration::from_secs(30), || a.running(&uid) == 1);
    uid
}

#[test]
fn exec_exit_codes_stdin_tty_attach_and_refusals() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("exec");
    let uid = start_pod(&a, "web", "");

    // exit codes: the command's
    let (code, out, err) = cli(&a, &["exec", "web", "-n", "e2e", "--", "echo", "hello"], b"");
    assert_eq!((code, out.as_str()), (0, "hello\n"), "{err}");
    let (code, _, err) = cli(&a, &["exec", "web", "-n", "e2e", "--", "true"], b"");
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cli(&a, &["exec", "web", "-n", "e2e", "--", "sh", "-c", "echo oops >&2; exit 3"], b"");
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("oops") && err.contains("command terminated with exit code 3"), "{err}");
    let (code, _, err) = cli(&a, &["exec", "web", "-n", "e2e", "--", "sh", "-c", "nope-not-here"], b"");
    assert_eq!(code, 127, "a shell's command not found: {err}");
    let (code, _, err) = cli(&a, &["exec", "web", "-n", "e2e", "--", "/nope-not-here"], b"");
    // containerd answers a Status InternalError (no exit code), kubectl
    // prints it and exits 1: so does podwarden
    assert_eq!(code, 1, "a missing binary: {err}");
    assert!(
        err.contains("Internal error occurred")
            && err.contains("\"/nope-not-here\": stat /nope-not-here: no such file"),
        "{err}"
    );

    // stdin
    let (code, out, err) =
        cli(&a, &["exec", "-i", "web", "-n", "e2e", "--", "sh", "-c", "read x; echo got:$x; exit 4"], b"hello\n");
    assert_eq!((code, out.as_str()), (4, "got:hello\n"), "{err}");

    // -it under a pty (script): the command sees a terminal of the pty's size
    let cmd = format!(
        "stty cols 91 rows 33; {BIN} exec -it web -n e2e --socket {} -- sh -c 'tty; sleep 1; stty size; exit 5'",
        a.api_socket().display()
    );
    let child = Command::new("script")
        .args(["-qefc", &cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (code, out, err) = wait_output(child, Duration::from_secs(30));
    assert!(out.contains("/dev/pts/") && out.contains("33 91"), "a terminal of the pty's size: {out:?} {err}");
    assert_eq!(code, 5, "{out} {err}");

    // attach: the main process's output from now on
    let mut attach = Command::new(BIN)
        .args(["attach", "web", "-n", "e2e", "--socket"])
        .arg(a.api_socket())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut so = attach.stdout.take().unwrap();
    let got = Arc::new(Mutex::new(String::new()));
    let g = got.clone();
    spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = so.read(&mut buf) {
            g.lock().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    wait_for("attach printing the container's lines", Duration::from_secs(15), || {
        got.lock().matches("line ").count() >= 3
    });
    podwarden::sys::kill(attach.id() as i32, libc::SIGINT).unwrap();
    let status = attach.wait().unwrap();
    assert_eq!(status.code(), Some(130), "SIGINT ends attach (the container runs on)");
    assert_eq!(a.running(&uid), 1);

    // refusals name what is wrong
    let (code, _, err) = cli(&a, &["exec", "nope", "-n", "e2e", "--", "true"], b"");
    assert!(code == 1 && err.contains("pod e2e/nope not found"), "{code} {err}");
    let (code, _, err) = cli(&a, &["exec", "web", "-n", "e2e", "-c", "side", "--", "true"], b"");
    assert!(code == 1 && err.contains("container side is not valid for pod e2e/web"), "{code} {err}");
    let (code, _, err) = cli(&a, &["attach", "web", "-n", "e2e", "-c", "side"], b"");
    assert!(code == 1 && err.contains("container side"), "{code} {err}");
    let (code, _, err) = cli(&a, &["exec", "web", "-n", "e2e"], b"");
    assert!(code == 1 && err.contains("podwarden exec POD -- CMD"), "{code} {err}");
    // not root, not in apiGroup: refused at the socket
    std::fs::set_permissions(a.api_socket(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, _, err) = cli_as(&a, Some((65534, 65534)), &["exec", "web", "-n", "e2e", "--", "true"], b"");
    assert_eq!(code, 77, "EX_NOPERM: {err}");
    assert!(err.contains("uid 65534 is not root"), "{err}");
    a.clean_up(&[&uid]);
}

#[test]
fn an_api_group_member_streams_only_into_pods_of_its_pod_security_level() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start_with("exec-group", "apiGroup: nogroup\n", &[]);
    let web = start_pod(&a, "web", "");
    let host = start_pod(&a, "host", "  hostNetwork: true\n");
    let nobody = Some((65534, 65534));
    let (code, out, err) = cli_as(&a, nobody, &["exec", "web", "-n", "e2e", "--", "echo", "in"], b"");
    assert_eq!((code, out.as_str()), (0, "in\n"), "{err}");
    let (code, _, err) = cli_as(&a, nobody, &["exec", "host", "-n", "e2e", "--", "echo", "in"], b"");
    assert_eq!(code, 77, "EX_NOPERM: {err}");
    assert!(err.contains("forbidden") && err.contains("hostNetwork"), "{err}");
    // root may
    let (code, out, err) = cli(&a, &["exec", "host", "-n", "e2e", "--", "echo", "in"], b"");
    assert_eq!((code, out.as_str()), (0, "in\n"), "{err}");
    a.clean_up(&[&web, &host]);
}

/// 16 MiB of pseudo-random bytes.
fn payload(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e3779b97f4a7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Send `data` to `addr` and read as much back (an echo server), both at
/// once; the bytes read.
fn echo_through(addr: (&str, u16), data: &[u8]) -> Vec<u8> {
    try_echo(addr, data).unwrap()
}

fn try_echo(addr: (&str, u16), data: &[u8]) -> std::io::Result<Vec<u8>> {
    let s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut w = s.try_clone()?;
    let send = data.to_vec();
    let writer = spawn(move || w.write_all(&send));
    let mut back = vec![0u8; data.len()];
    let r = (&s).read_exact(&mut back);
    writer.join().unwrap()?;
    r.map(|_| back)
}

/// A `podwarden port-forward` child, killed when dropped: a test that
/// fails must not leave it running (it would hold the e2e lock that the
/// test run's `flock` handed down).
struct Forward(Child);

impl std::ops::Deref for Forward {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Forward {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `podwarden port-forward` running: the child and its local port.
fn port_forward(a: &Agent, pod: &str, spec: &str) -> (Forward, u16) {
    let mut pf = Command::new(BIN)
        .args(["port-forward", pod, spec, "-n", "e2e", "--socket"])
        .arg(a.api_socket())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = std::io::BufReader::new(pf.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    // "Forwarding from 127.0.0.1:PORT -> REMOTE"
    let port = line.split(':').nth(1).and_then(|r| r.split_whitespace().next()).and_then(|p| p.parse().ok());
    (Forward(pf), port.unwrap_or_else(|| panic!("port-forward printed {line:?}")))
}

/// A forwarded port nothing listens on in the pod: the local connection
/// is closed (as kubectl's port-forward closes it on the stream's error),
/// never left open and silent; the next connection is served again.
#[test]
fn port_forward_to_a_closed_port_closes_the_local_connection() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("pf-closed");
    let uid = start_pod(&a, "web", "");
    let (mut pf, port) = port_forward(&a, "web", "0:9999");
    for round in 0..2 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let _ = s.write_all(b"anyone there?");
        let mut buf = [0u8; 64];
        match s.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("round {round}: the local connection was not closed: {other:?}"),
        }
    }
    pf.kill().unwrap();
    pf.wait().unwrap();
    a.clean_up(&[&uid]);
}

#[test]
fn port_forward_carries_16_mib_both_ways_byte_for_byte_and_cp_copies_both_ways() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("pf");
    let uid = start_pod(&a, "web", "");
    let (mut pf, port) = port_forward(&a, "web", "0:8080");
    let data = payload(16 << 20);
    let t = Instant::now();
    let back = echo_through(("127.0.0.1", port), &data);
    eprintln!("port-forward: 16 MiB each way in {:?}", t.elapsed());
    assert!(back == data, "the bytes came back as they went");
    // a second connection gets its own stream
    assert_eq!(echo_through(("127.0.0.1", port), b"again"), b"again");
    pf.kill().unwrap();
    pf.wait().unwrap();
    let (code, _, err) = cli(&a, &["port-forward", "web", "80a", "-n", "e2e"], b"");
    assert!(code == 1 && err.contains("\"80a\""), "{err}");

    // cp: a file and a directory, both ways
    let dir = TempDir::new("cp");
    let file = dir.0.join("blob.bin");
    std::fs::write(&file, payload(3 << 20)).unwrap();
    let tree = dir.0.join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    std::fs::write(tree.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(tree.join("sub").join("b.txt"), "beta\n").unwrap();
    let ok = |args: &[&str]| {
        let (code, out, err) = cli(&a, args, b"");
        assert_eq!(code, 0, "podwarden {args:?}: {err}");
        out
    };
    ok(&["cp", file.to_str().unwrap(), "e2e/web:/tmp/blob.bin"]);
    ok(&["cp", tree.to_str().unwrap(), "e2e/web:/tmp/tree"]);
    let sums = ok(&[
        "exec",
        "web",
        "-n",
        "e2e",
        "--",
        "sh",
        "-c",
        "wc -c < /tmp/blob.bin; cat /tmp/tree/a.txt /tmp/tree/sub/b.txt",
    ]);
    assert_eq!(sums, format!("{}\nalpha\nbeta\n", 3 << 20), "what arrived in the pod");
    let back = dir.0.join("back.bin");
    ok(&["cp", "e2e/web:/tmp/blob.bin", back.to_str().unwrap()]);
    assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&file).unwrap());
    let back_tree = dir.0.join("back-tree");
    ok(&["cp", "e2e/web:/tmp/tree", back_tree.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(back_tree.join("sub").join("b.txt")).unwrap(), "beta\n");
    assert_eq!(std::fs::read_to_string(back_tree.join("a.txt")).unwrap(), "alpha\n");
    let (code, _, err) = cli(&a, &["cp", "e2e/web:/tmp/nope", dir.0.join("x").to_str().unwrap()], b"");
    assert!(code == 1 && err.contains("nope"), "a missing file names it: {err}");
    a.clean_up(&[&uid]);
}

// ---- the relay (api::stream::serve), on an agent in this process ----

use podwarden::api::query::Query;
use podwarden::api::stream::{self, StreamTarget, UpgradeRequest};
use tungstenite::{Message, WebSocket};

/// A plain-TCP stand-in for the kube API's connection thread: reads the
/// request head, takes the target from a kubelet-style path
/// (`/exec/NS/POD/C?...`, `/attach/...`, `/portForward/NS/POD?...`) and
/// calls `serve`.
/// Every upgrade the relay server saw: `METHOD UPGRADE PROTOCOLS PATH`.
static UPGRADES: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn relay_server(parts: podwarden::agent::Parts) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    spawn(move || {
        for conn in l.incoming().flatten() {
            let parts = parts.clone();
            spawn(move || {
                let mut conn = conn;
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let end = loop {
                    let n = conn.read(&mut chunk).unwrap();
                    assert!(n > 0 && buf.len() < 65536, "a whole head");
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break p + 4;
                    }
                };
                let req = UpgradeRequest::parse(&buf[..end], &buf[end..]).unwrap();
                let (path, query) = req.target.split_once('?').unwrap_or((&req.target, ""));
                let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
                // kubectl's: /api/v1/namespaces/NS/pods/NAME[/exec|attach|portforward]
                // the discovery kubectl reads first
                let discovery = match path {
                    "/api" => Some(
                        r#"{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"127.0.0.1"}]}"#,
                    ),
                    "/apis" => Some(r#"{"kind":"APIGroupList","apiVersion":"v1","groups":[]}"#),
                    "/api/v1" => Some(
                        r#"{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["get","list"],"shortNames":["po"]},{"name":"pods/exec","singularName":"","namespaced":true,"kind":"PodExecOptions","verbs":["create","get"]},{"name":"pods/attach","singularName":"","namespaced":true,"kind":"PodAttachOptions","verbs":["create","get"]},{"name":"pods/portforward","singularName":"","namespaced":true,"kind":"PodPortForwardOptions","verbs":["create","get"]}]}"#,
                    ),
                    "/version" => Some(r#"{"major":"1","minor":"33","gitVersion":"v1.33.0"}"#),
                    _ => None,
                };
                if let Some(body) = discovery {
                    let _ = write!(
                        conn,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    return;
                }
                let (kind, ns, pod, container) = match seg.as_slice() {
                    ["api", "v1", "namespaces", ns, "pods", pod, kind] => (*kind, *ns, *pod, ""),
                    ["api", "v1", "namespaces", ns, "pods", pod] => {
                        let body = match stream::find_pod(&parts, ns, pod) {
                            Ok(p) => serde_json::to_string(&p).unwrap(),
                            Err(e) => String::from_utf8(e.http_response()).unwrap(),
                        };
                        let _ = write!(
                            conn,
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        return;
                    }
                    ["portForward", ns, pod] => ("portforward", *ns, *pod, ""),
                    [kind, ns, pod, c] => (*kind, *ns, *pod, *c),
                    _ => {
                        let body = format!(
                            "{{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"reason\":\"NotFound\",\"code\":404,\"message\":\"{path} not served by the test\"}}"
                        );
                        let _ = write!(
                            conn,
                            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        return;
                    }
                };
                let offered = [req.values("Sec-WebSocket-Protocol"), req.values("X-Stream-Protocol-Version")].concat();
                UPGRADES.lock().push(format!(
                    "{} {} {} {kind}",
                    req.method,
                    req.values("Upgrade").join(","),
                    offered.join(",")
                ));
                let target = StreamTarget::from_query(kind, ns, pod, container, &Query::parse(query)).unwrap();
                let _ = stream::serve(&parts, Box::new(conn), &req, target, |_| Ok(()));
            });
        }
    });
    port
}

/// The answer head to a raw upgrade request.
fn raw_upgrade(port: u16, head: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut chunk) {
            Ok(n @ 1..) => got.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    // a refusal's body too
    s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    while let Ok(n @ 1..) = s.read(&mut chunk) {
        got.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn ws(addr: &str, path: &str, protocol: &str) -> Result<WebSocket<std::net::TcpStream>, String> {
    use tungstenite::client::IntoClientRequest;
    let tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_nodelay(true).unwrap();
    let mut req = format!("ws://{addr}{path}").into_client_request().unwrap();
    req.headers_mut().insert("Sec-WebSocket-Protocol", protocol.parse().unwrap());
    match tungstenite::client(req, tcp) {
        Ok((ws, _)) => Ok(ws),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r))) => {
            Err(format!("{} {}", r.status().as_u16(), String::from_utf8_lossy(r.body().as_deref().unwrap_or_default())))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Run an exec session to its end: (stdout, the final status).
fn ws_exec(mut w: WebSocket<std::net::TcpStream>) -> (String, String) {
    let (mut out, mut status) = (String::new(), String::new());
    loop {
        match w.read() {
            Ok(Message::Binary(b)) if b.len() > 1 && b[0] == 1 => out.push_str(&String::from_utf8_lossy(&b[1..])),
            Ok(Message::Binary(b)) if b.len() > 1 && b[0] == 3 => status = String::from_utf8_lossy(&b[1..]).into(),
            Ok(Message::Close(_)) | Err(_) => return (out, status),
            Ok(_) => {}
        }
    }
}

/// A v5 exec session: `messages` (each its channel byte and data) sent
/// 100 ms apart, then CLOSE of stdin (255, 0); (stdout, stderr, the final
/// status) once the server closed.
fn ws_exec_v5(mut w: WebSocket<std::net::TcpStream>, messages: &[&[u8]]) -> (String, String, String) {
    for m in messages {
        w.send(Message::binary(m.to_vec())).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    w.send(Message::binary(vec![255u8, 0])).unwrap();
    w.get_ref().set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let (mut out, mut err, mut status) = (String::new(), String::new(), String::new());
    loop {
        match w.read() {
            Ok(Message::Binary(b)) if !b.is_empty() => {
                let text = String::from_utf8_lossy(&b[1..]);
                match b[0] {
                    1 => out.push_str(&text),
                    2 => err.push_str(&text),
                    3 => status.push_str(&text),
                    c => panic!("a message on channel {c}"),
                }
            }
            Ok(Message::Close(_)) | Err(tungstenite::Error::ConnectionClosed) => return (out, err, status),
            Ok(_) => {}
            Err(e) => panic!("the v5 session broke: {e} (stdout {out:?}, stderr {err:?}, status {status:?})"),
        }
    }
}

/// `total` bytes through a port-forward stream to the echo server, in
/// 1 MiB round trips: the seconds it took.
fn ws_echo(mut w: WebSocket<std::net::TcpStream>, total: usize) -> f64 {
    let data = payload(1 << 20);
    let t = Instant::now();
    let mut first = [true, true];
    for _ in 0..total / data.len() {
        let mut msg = vec![0u8];
        msg.extend_from_slice(&data);
        w.send(Message::binary(msg)).unwrap();
        let mut got = 0;
        while got < data.len() {
            match w.read().unwrap() {
                Message::Binary(b) if !b.is_empty() && b[0] < 2 => {
                    let skip = if std::mem::replace(&mut first[b[0] as usize], false) { 3 } else { 1 };
                    let part = &b[skip.min(b.len())..];
                    assert!(b[0] == 0 || part.is_empty(), "error channel: {}", String::from_utf8_lossy(part));
                    assert_eq!(part, &data[got..got + part.len()], "the echo is byte for byte");
                    got += part.len();
                }
                _ => {}
            }
        }
    }
    t.elapsed().as_secs_f64()
}

#[test]
fn the_relay_answers_each_kubectl_protocol_as_containerd_allows() {
    let _serial = SERIAL.lock();
    let dir = TempDir::new("relay");
    let manifests = dir.0.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let config_file = dir.0.join("config.yaml");
    std::fs::write(
        &config_file,
        format!(
            "staticPodPath: {}\ncontainerRuntimeEndpoint: unix://{}\nrootDir: {}\napiSocket: {}\npodLogsDir: {}\nnodeName: e2e\nfileCheckFrequency: 1s\nhousekeepingInterval: 500ms\ncgroupDriver: cgroupfs\naddress: 127.0.0.1\nreadOnlyPort: {}\n{EVICTION}",
            manifests.display(),
            socket(),
            dir.0.join("root").display(),
            dir.0.join("api.sock").display(),
            dir.0.join("logs").display(),
            free_port()
        ),
    )
    .unwrap();
    let config = podwarden::config::Config::load(&config_file).unwrap();
    let cri_rt = cri();
    clear_runtime(&cri_rt);
    let runtime: Arc<dyn Runtime> = Arc::new(cri());
    let running = podwarden::cli::daemon::start(&config, runtime, "containerd://").unwrap();
    let parts = running.parts.clone();
    std::fs::write(manifests.join("web.yaml"), pod_yaml("web", "", ECHO_AND_COUNT)).unwrap();
    running.rescan();
    let exec_target =
        StreamTarget::from_query("exec", "e2e", "web", "", &Query::parse("command=true&stdout=1")).unwrap();
    wait_for("web running", Duration::from_secs(30), || stream::runtime_url(&parts, &exec_target, |_| Ok(())).is_ok());
    let port = relay_server(parts.clone());
    let addr = format!("127.0.0.1:{port}");

    // kubectl 1.27-1.29: SPDY/3.1 exec and port-forward, relayed to 101
    let spdy = |path: &str, versions: &str| {
        raw_upgrade(
            port,
            &format!(
                "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {versions}\r\nContent-Length: 0\r\n\r\n"
            ),
        )
    };
    let a = spdy(
        "/exec/e2e/web/main?command=true&stdout=true",
        "v4.channel.k8s.io, v3.channel.k8s.io, v2.channel.k8s.io, channel.k8s.io",
    );
    assert!(
        a.starts_with("HTTP/1.1 101 ")
            && a.contains("Upgrade: SPDY/3.1")
            && a.contains("X-Stream-Protocol-Version: v4.channel.k8s.io"),
        "{a}"
    );
    let a = spdy("/portForward/e2e/web", "portforward.k8s.io");
    assert!(a.starts_with("HTTP/1.1 101 ") && a.contains("X-Stream-Protocol-Version: portforward.k8s.io"), "{a}");
    // the runtime's own refusal passes through (SPDY with v5 only)
    let a = spdy("/exec/e2e/web/main?command=true&stdout=true", "v5.channel.k8s.io");
    assert!(a.starts_with("HTTP/1.1 403 ") && a.contains("unable to negotiate protocol"), "{a}");

    // kubectl 1.30+ and client-go: WebSocket v5 exec, translated to SPDY
    // for the runtime; stdin's CLOSE reaches the command as its end
    let w = ws(&addr, "/exec/e2e/web/main?command=sh&command=-c&command=cat%3Becho%20end%20%3E%262%3Bexit%203&stdin=1&stdout=1&stderr=1", "v5.channel.k8s.io").unwrap();
    let (out, err, status) = ws_exec_v5(w, &[b"\x00in\n", b"\x00put\n"]);
    assert_eq!((out.as_str(), err.as_str()), ("in\nput\n", "end\n"), "{status}");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!((status["status"].as_str(), status["reason"].as_str()), (Some("Failure"), Some("NonZeroExitCode")));
    assert_eq!(status["details"]["causes"][0]["message"].as_str(), Some("3"), "{status}");
    let w = ws(&addr, "/exec/e2e/web/main?command=echo&command=hi&stdout=1", "v5.channel.k8s.io").unwrap();
    let (out, _, status) = ws_exec_v5(w, &[]);
    assert_eq!(out, "hi\n");
    assert!(status.contains("\"Success\""), "{status}");
    // a terminal: its size from channel 4 (the resize stream)
    let w = ws(
        &addr,
        "/exec/e2e/web/main?command=sh&command=-c&command=read%20x%3Bstty%20size&stdin=1&stdout=1&tty=1",
        "v5.channel.k8s.io",
    )
    .unwrap();
    let (out, _, status) = ws_exec_v5(w, &[b"\x04{\"Width\":100,\"Height\":40}", b"\x00go\n"]);
    assert!(out.ends_with("40 100\r\n") && status.contains("\"Success\""), "{out:?} {status}");
    // a protocol neither the runtime nor podwarden serves: a Status
    let e = ws(&addr, "/portForward/e2e/web?ports=8080", "portforward.k8s.io").unwrap_err();
    assert!(
        e.starts_with("400 ") && e.contains("\"reason\":\"BadRequest\"") && e.contains("portforward.k8s.io"),
        "{e}"
    );
    // what containerd serves over WebSocket is relayed
    let w = ws(&addr, "/exec/e2e/web/main?command=echo&command=hi&stdout=1", "v4.channel.k8s.io").unwrap();
    let (out, status) = ws_exec(w);
    assert_eq!(out, "hi\n");
    assert!(status.contains("\"Success\""), "{status}");
    // refusals name the pod or container
    let e = ws(&addr, "/exec/e2e/nope/main?command=true&stdout=1", "v4.channel.k8s.io").unwrap_err();
    assert!(e.starts_with("404 ") && e.contains("pod e2e/nope not found"), "{e}");
    let e = ws(&addr, "/exec/e2e/web/side?command=true&stdout=1", "v4.channel.k8s.io").unwrap_err();
    assert!(e.starts_with("400 ") && e.contains("container side is not valid"), "{e}");

    // 16 MiB each way through the relayed port-forward, byte for byte
    // (what the relay costs against the runtime's own URLs, for exec and
    // port-forward, is `scripts/bench.sh api`'s exec_ratio and
    // portforward_ratio)
    let secs = ws_echo(ws(&addr, "/portForward/e2e/web?port=8080", "v4.channel.k8s.io").unwrap(), 16 << 20);
    eprintln!("port-forward through the relay: 16 MiB each way in {secs:.2} s");

    kubectl_through_the_relay(&dir, port);

    std::fs::remove_file(manifests.join("web.yaml")).unwrap();
    running.rescan();
    wait_for("web removed", Duration::from_secs(60), || {
        cri_rt.list_pods(&call()).unwrap().iter().all(|p| p.sandboxes.is_empty())
    });
    running.stop();
}

/// The real kubectl binaries (`kubectl.1.27`, `kubectl.1.33`) where these
/// machines have them, else on PATH.
fn kubectl(version: &str) -> PathBuf {
    let name = format!("kubectl.{version}");
    let mut places = vec![PathBuf::from("/usr/lib/google-cloud-sdk/bin").join(&name)];
    places.extend(std::env::var_os("PATH").iter().flat_map(std::env::split_paths).map(|d| d.join(&name)));
    places.into_iter().find(|p| p.exists()).unwrap_or_else(|| {
        panic!("{name} is missing: install kubectl {version} as {name} on PATH or in /usr/lib/google-cloud-sdk/bin")
    })
}

/// kubectl 1.27 (SPDY) and 1.33 (WebSocket v5, SPDY inside WebSocket)
/// through the relay: exec's exit code and stdin, port-forward's bytes.
/// The test's server answers kubectl's GET of the pod from the agent.
fn kubectl_through_the_relay(dir: &TempDir, port: u16) {
    let config = dir.0.join("kubeconfig");
    std::fs::write(
        &config,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: pw\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: pw\n    user: u\n    namespace: e2e\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    for version in ["1.27", "1.33"] {
        let run = |args: &[&str], stdin: &[u8]| {
            let mut child = Command::new(kubectl(version))
                .arg("--kubeconfig")
                .arg(&config)
                .arg("--cache-dir")
                .arg(dir.0.join("kube-cache"))
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut input = child.stdin.take().unwrap();
            input.write_all(stdin).unwrap();
            drop(input);
            wait_output(child, Duration::from_secs(60))
        };
        UPGRADES.lock().clear();
        let (code, out, err) = run(&["exec", "web", "-c", "main", "--", "sh", "-c", "echo out; exit 3"], b"");
        assert_eq!((code, out.as_str()), (3, "out\n"), "kubectl {version} exec: {err}");
        // 1.27: SPDY; 1.33: WebSocket v5 (translated to SPDY here)
        let seen = UPGRADES.lock().clone();
        let want = if version == "1.27" {
            vec!["POST SPDY/3.1 v4.channel.k8s.io,v3.channel.k8s.io,v2.channel.k8s.io,channel.k8s.io exec"]
        } else {
            vec!["GET websocket v5.channel.k8s.io exec"]
        };
        assert_eq!(seen, want, "kubectl {version}'s upgrades");
        let (code, out, err) = run(&["exec", "-i", "web", "-c", "main", "--", "sh", "-c", "cat; echo end"], b"in\n");
        assert_eq!((code, out.as_str()), (0, "in\nend\n"), "kubectl {version} exec -i (stdin's end passed on): {err}");
        // port-forward: 16 MiB through the echo server
        UPGRADES.lock().clear();
        let mut pf = Command::new(kubectl(version))
            .arg("--kubeconfig")
            .arg(&config)
            .args(["port-forward", "pod/web", ":8080"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut lines = std::io::BufReader::new(pf.stdout.take().unwrap());
        std::io::BufRead::read_line(&mut lines, &mut line).unwrap();
        // kubectl prints a line per connection: its stdout stays read
        spawn(move || std::io::copy(&mut lines, &mut std::io::sink()));
        let local: u16 = line
            .split(':')
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("kubectl {version} port-forward printed {line:?}"));
        std::thread::sleep(Duration::from_millis(500));
        if let Ok(Some(st)) = pf.try_wait() {
            let out = pf.wait_with_output().unwrap();
            panic!("kubectl {version} port-forward ended ({st}): {}", String::from_utf8_lossy(&out.stderr));
        }
        if false {
            let _ = pf.kill();
            let out = pf.wait_with_output().unwrap();
            panic!(
                "kubectl {version} port-forward ({line:?}) is not listening: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let data = payload(16 << 20);
        let t = Instant::now();
        let back = match try_echo(("127.0.0.1", local), &data) {
            Ok(b) => b,
            Err(e) => {
                let _ = pf.kill();
                let out = pf.wait_with_output().unwrap();
                panic!("kubectl {version} port-forward: {e}: {}", String::from_utf8_lossy(&out.stderr));
            }
        };
        eprintln!("kubectl {version} port-forward through the relay: 16 MiB each way in {:?}", t.elapsed());
        // 1.33: SPDY inside WebSocket, tunnelled here
        let want = if version == "1.27" {
            vec!["POST SPDY/3.1 portforward.k8s.io portforward"]
        } else {
            vec!["GET websocket SPDY/3.1+portforward.k8s.io portforward"]
        };
        assert_eq!(*UPGRADES.lock(), want, "kubectl {version} port-forward's upgrades");
        assert!(back == data, "kubectl {version} port-forward: the bytes came back as they went");
        pf.kill().unwrap();
        pf.wait().unwrap();
    }
}

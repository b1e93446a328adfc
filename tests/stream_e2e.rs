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
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

/// The pod: an echo server on 8080 (`nc -ll -e cat`), a line every 200 ms
/// on stdout.
const ECHO_AND_COUNT: &str =
    "trap 'exit 0' TERM; nc -ll -p 8080 -e cat & i=0; while :; do echo line $i; i=$((i+1)); sleep 0.2 & wait $!; done";

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
    let writer = std::thread::spawn(move || {
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
    std::thread::spawn(move || {
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
    assert!(err.contains("Internal error occurred") && err.contains("\"/nope-not-here\": stat /nope-not-here: no such file"), "{err}");

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
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = so.read(&mut buf) {
            g.lock().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    wait_for("attach printing the container's lines", Duration::from_secs(15), || got.lock().matches("line ").count() >= 3);
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
    let s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut w = s.try_clone().unwrap();
    let send = data.to_vec();
    let writer = std::thread::spawn(move || w.write_all(&send).unwrap());
    let mut back = vec![0u8; data.len()];
    (&s).read_exact(&mut back).unwrap();
    writer.join().unwrap();
    back
}

/// `podwarden port-forward` running: the child and its local port.
fn port_forward(a: &Agent, pod: &str, spec: &str) -> (Child, u16) {
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
    (pf, port.unwrap_or_else(|| panic!("port-forward printed {line:?}")))
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
    let sums = ok(&["exec", "web", "-n", "e2e", "--", "sh", "-c", "wc -c < /tmp/blob.bin; cat /tmp/tree/a.txt /tmp/tree/sub/b.txt"]);
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

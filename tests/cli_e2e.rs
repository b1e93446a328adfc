//! The CLI and the local API end to end: the real `podwarden` binary as
//! daemon (on the private containerd of `scripts/e2e-env.sh up`) and as
//! client, every verb and output format, errors and exit codes, the
//! socket's mode and peer-credential checks.
//!
//! The tests share one containerd, so they run one at a time.

mod agent;
mod common;

use common::EVICTION;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};

use agent::*;
use std::sync::Arc;

/// Run the CLI against the agent's socket: (exit code, stdout, stderr).
fn cli(a: &Agent, args: &[&str]) -> (i32, String, String) {
    cli_as(a, None, args)
}

/// The same as another user (`setpriv --reuid/--regid`).
fn cli_as(a: &Agent, ids: Option<(u32, u32)>, args: &[&str]) -> (i32, String, String) {
    let socket = a.api_socket();
    let mut cmd = match ids {
        Some((uid, gid)) => {
            let mut c = Command::new("setpriv");
            c.args([format!("--reuid={uid}"), format!("--regid={gid}"), "--clear-groups".into(), BIN.into()]);
            c
        }
        None => Command::new(BIN),
    };
    let out = cmd.args(args).arg("--socket").arg(&socket).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

fn ok(a: &Agent, args: &[&str]) -> String {
    let (code, out, err) = cli(a, args);
    assert_eq!(code, 0, "podwarden {args:?} failed: {err}");
    assert!(err.is_empty(), "podwarden {args:?} wrote to stderr: {err}");
    out
}

fn fails(a: &Agent, args: &[&str]) -> String {
    let (code, out, err) = cli(a, args);
    assert_eq!(code, 1, "podwarden {args:?} should fail: {out}");
    assert!(out.is_empty(), "podwarden {args:?} printed on failure: {out}");
    err
}

/// `podwarden logs -f POD -n e2e` running, what it printed so far (read
/// as it comes, by the returned thread).
fn follow_logs(a: &Agent, pod: &str) -> (Child, Arc<Mutex<String>>, std::thread::JoinHandle<()>) {
    let mut follow = Command::new(BIN)
        .args(["logs", "-f", pod, "-n", "e2e", "--socket"])
        .arg(a.api_socket())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (followed, reader) = read_as_it_comes(follow.stdout.take().unwrap());
    (follow, followed, reader)
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Where each column starts in a table line.
fn column_starts(line: &str) -> Vec<usize> {
    let b = line.as_bytes();
    (0..b.len()).filter(|&i| b[i] != b' ' && (i == 0 || (i >= 3 && &b[i - 3..i] == b"   "))).collect()
}

const COUNTER: &str = "trap 'exit 0' TERM; i=0; while :; do echo line $i; i=$((i+1)); sleep 0.2 & wait; done";

#[test]
fn every_verb_and_output_format_against_the_daemon() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("cli");
    let file = a.dir.0.join("hello.yaml");
    std::fs::write(&file, pod_yaml("hello", "", COUNTER)).unwrap();
    let f = file.to_str().unwrap();
    assert_eq!(ok(&a, &["apply", "-f", f]), "pod/hello created\n");
    assert_eq!(ok(&a, &["apply", "-f", f]), "pod/hello unchanged\n");
    let written = a.manifests().join("e2e_hello.yaml");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), std::fs::read_to_string(&file).unwrap());
    let uid = a.uid("hello");
    wait_for("hello running", Duration::from_secs(30), || a.running(&uid) == 1);
    wait_for("hello Running in get pods", Duration::from_secs(10), || {
        ok(&a, &["get", "pods", "-n", "e2e"]).contains("Running")
    });

    // tables
    let t = ok(&a, &["get", "pods", "-n", "e2e"]);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 2, "{t}");
    assert_eq!(lines[0].split_whitespace().collect::<Vec<_>>(), ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    assert_eq!(lines[1].split_whitespace().take(4).collect::<Vec<_>>(), ["hello", "1/1", "Running", "0"]);
    assert_eq!(column_starts(lines[0]), column_starts(lines[1]), "columns aligned:\n{t}");
    let w = ok(&a, &["get", "pods", "-n", "e2e", "-o", "wide"]);
    let row: Vec<&str> = w.lines().nth(1).unwrap().split_whitespace().collect();
    assert!(row[5].parse::<std::net::Ipv4Addr>().is_ok() && row[6] == "e2e", "{w}");
    let all = ok(&a, &["get", "pods", "-A"]);
    assert!(all.starts_with("NAMESPACE") && all.contains("\ne2e "), "{all}");
    assert_eq!(ok(&a, &["get", "pods"]), "No resources found in default namespace.\n");
    // json and yaml: a v1 PodList; one pod: a v1 Pod
    let list = json(&ok(&a, &["get", "pods", "-n", "e2e", "-o", "json"]));
    assert_eq!((list["apiVersion"].as_str(), list["kind"].as_str()), (Some("v1"), Some("PodList")));
    let pod = &list["items"][0];
    assert_eq!(pod["status"]["phase"], "Running");
    assert_eq!(pod["spec"]["nodeName"], "e2e");
    let yaml: Value = serde_yaml_ng::from_str(&ok(&a, &["get", "pods", "-A", "-o", "yaml"])).unwrap();
    assert_eq!(yaml["kind"], "PodList");
    assert_eq!(yaml["items"][0]["metadata"]["uid"], uid.as_str());
    let one = json(&ok(&a, &["get", "pod", "hello", "-n", "e2e", "-o", "json"]));
    assert_eq!((one["kind"].as_str(), one["metadata"]["name"].as_str()), (Some("Pod"), Some("hello")));

    // describe, events, node, version
    let d = ok(&a, &["describe", "pod", "hello", "-n", "e2e"]);
    for want in ["Name:         hello", "Namespace:    e2e", "Status:       Running", "Ready:          True", "Events:"]
    {
        assert!(d.contains(want), "describe lacks {want:?}:\n{d}");
    }
    assert!(d.contains(written.to_str().unwrap()), "describe names the manifest:\n{d}");
    let ev = ok(&a, &["events"]);
    assert!(ev.starts_with("LAST SEEN") && ev.contains("Started") && ev.contains("pod/e2e/hello"), "{ev}");
    let evj = json(&ok(&a, &["events", "-o", "json"]));
    assert!(evj.as_array().unwrap().iter().any(|e| e["reason"] == "Started" && e["uid"] == uid.as_str()), "{evj}");
    let n = ok(&a, &["node"]);
    assert!(n.contains("Ready:             True") && n.contains("containerd"), "{n}");
    let nj = json(&ok(&a, &["node", "-o", "json"]));
    assert_eq!(nj["node"]["status"]["conditions"][0]["type"], "Ready");
    assert_eq!(nj["allocated"]["pods"], "1");
    assert_eq!(nj["gracefulShutdown"]["configured"], false);
    let v = ok(&a, &["version"]);
    assert!(v.contains("Client Version: podwarden") && v.contains("Server Version: podwarden"), "{v}");
    assert!(v.contains("containerd"), "{v}");

    // logs: whole, tail, follow
    wait_for("some log lines", Duration::from_secs(10), || ok(&a, &["logs", "hello", "-n", "e2e"]).contains("line 3"));
    let l = ok(&a, &["logs", "hello", "-n", "e2e"]);
    assert!(l.starts_with("line 0\nline 1\n"), "CRI prefixes stripped: {l}");
    let tail = ok(&a, &["logs", "hello", "-n", "e2e", "--tail", "2"]);
    assert_eq!(tail.lines().count(), 2, "{tail}");
    // what -f printed so far, read as it comes
    let (mut follow, followed, reader) = follow_logs(&a, "hello");
    let lines = || followed.lock().lines().count();
    wait_for("logs -f printing", Duration::from_secs(10), || lines() > 0);
    let before = ok(&a, &["logs", "hello", "-n", "e2e"]).lines().count();
    // the container writes a line every 200 ms: -f keeps printing them
    wait_for("logs -f printing lines written after it started", Duration::from_secs(10), || lines() > before + 2);
    // delete with the default grace: the container exits on SIGTERM and -f ends
    assert_eq!(ok(&a, &["delete", "pod", "hello", "-n", "e2e"]), "pod \"hello\" deleted\n");
    assert!(!written.exists(), "the manifest is removed");
    let mut status = None;
    wait_for("logs -f ended after the container stopped", Duration::from_secs(15), || {
        status = follow.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.unwrap().success());
    reader.join().unwrap();
    let followed = followed.lock().clone();
    let n = followed.lines().count();
    assert!(n > before + 2, "-f kept printing: {n} lines, {before} when it had been running a while");
    assert!(followed.starts_with("line 0\n"));
    wait_for("hello gone", Duration::from_secs(30), || a.runtime_pod(&uid).sandboxes.is_empty());
    a.clean_up(&[&uid]);
}

#[test]
fn errors_name_the_input_and_exit_1() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("cli-errors");
    let before: Vec<_> = std::fs::read_dir(a.manifests()).unwrap().flatten().map(|e| e.path()).collect();
    let bad = a.dir.0.join("bad.yaml");
    std::fs::write(&bad, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: x\n  restartPolicy: Sometimes\n").unwrap();
    let err = fails(&a, &["apply", "-f", bad.to_str().unwrap()]);
    assert!(err.contains("bad.yaml") && err.contains("restartPolicy") && err.contains("Sometimes"), "{err}");
    let after: Vec<_> = std::fs::read_dir(a.manifests()).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(before, after, "an invalid manifest is not written");
    let err = fails(&a, &["apply", "-f", "/nonexistent.yaml"]);
    assert!(err.contains("/nonexistent.yaml"), "{err}");
    let err = fails(&a, &["get", "pod", "nope", "-n", "e2e"]);
    assert!(err.contains("pod e2e/nope not found"), "{err}");
    let err = fails(&a, &["delete", "pod", "nope"]);
    assert!(err.contains("pod default/nope not found"), "{err}");
    let err = fails(&a, &["logs", "nope"]);
    assert!(err.contains("default/nope"), "{err}");
    let err = fails(&a, &["get", "pods", "-o", "table"]);
    assert!(err.contains("\"table\"") && err.contains("wide, json, yaml"), "{err}");
    let err = fails(&a, &["delete", "pod", "x", "--grace-period", "-3"]);
    assert!(err.contains("--grace-period"), "{err}");
    let out = Command::new(BIN).args(["get", "pods", "--socket", "/nonexistent/api.sock"]).output().unwrap();
    let (code, err) = (out.status.code(), String::from_utf8_lossy(&out.stderr));
    assert_eq!(code, Some(69), "EX_UNAVAILABLE");
    assert!(err.contains("/nonexistent/api.sock") && err.contains("does not exist"), "{err}");
    // --help for every verb
    for verb in ["run", "validate", "get", "describe", "logs", "events", "node", "top", "apply", "delete", "version"] {
        let out = Command::new(BIN).args([verb, "--help"]).output().unwrap();
        assert!(out.status.success(), "{verb} --help");
        assert!(String::from_utf8_lossy(&out.stdout).contains("Usage:"), "{verb} --help");
    }
    a.clean_up(&[]);
}

/// The numbers `n` of the `line <n> ...` lines of `text`, in order.
fn numbers(text: &str) -> Vec<u32> {
    text.lines().filter_map(|l| l.strip_prefix("line ")?.split(' ').next()?.parse().ok()).collect()
}

/// Resource stats from containerd: the Summary API on the read-only port,
/// `/metrics/resource` (checked by promtool), `podwarden top`.
#[test]
fn stats_summary_resource_metrics_and_top_on_containerd() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("stats");
    // busy: a shell loop burning CPU, 20 MB held, a few log lines
    a.write(
        "busy.yaml",
        &pod_yaml("busy", "", "s=$(head -c 20000000 /dev/zero | tr '\\0' x); echo started; while :; do :; done"),
    );
    let uid = a.uid("busy");
    wait_for("busy running", Duration::from_secs(30), || a.running(&uid) == 1);
    let summary =
        || -> Value { serde_json::from_str(&a.get("/stats/summary").unwrap_or_default()).unwrap_or_default() };
    let busy = |s: &Value| s["pods"].as_array().and_then(|p| p.iter().find(|p| p["podRef"]["name"] == "busy").cloned());
    wait_for("a CPU rate and the memory for the busy pod", Duration::from_secs(30), || {
        busy(&summary()).is_some_and(|p| {
            p["cpu"]["usageNanoCores"].as_u64().unwrap_or(0) > 100_000_000
                && p["memory"]["workingSetBytes"].as_u64().unwrap_or(0) > 20_000_000
        })
    });
    let s = summary();
    let p = busy(&s).unwrap();
    assert_eq!(p["podRef"]["uid"], uid.as_str());
    assert_eq!(p["containers"][0]["name"], "main");
    assert!(p["containers"][0]["logs"]["usedBytes"].as_u64().unwrap() > 0, "{p}");
    assert!(p["ephemeral-storage"]["usedBytes"].as_u64().is_some(), "{p}");
    // the log file is an inode; containerd reports the writable layer's
    assert!(p["containers"][0]["logs"]["inodesUsed"].as_u64().unwrap() >= 1, "{p}");
    assert!(p["containers"][0]["rootfs"]["inodesUsed"].as_u64().is_some(), "{p}");
    assert!(
        p["ephemeral-storage"]["inodesUsed"].as_u64().unwrap()
            >= p["containers"][0]["logs"]["inodesUsed"].as_u64().unwrap(),
        "{p}"
    );
    let n = &s["node"];
    assert_eq!(n["nodeName"], "e2e");
    assert!(n["memory"]["availableBytes"].as_u64().unwrap() > 0 && n["fs"]["capacityBytes"].as_u64().unwrap() > 0);
    assert!(n["runtime"]["imageFs"]["capacityBytes"].as_u64().unwrap() > 0, "{n}");
    assert!(n["rlimit"]["maxpid"].as_u64().unwrap() > 0);
    let m = a.get("/metrics/resource").unwrap();
    assert!(m.contains("container_cpu_usage_seconds_total{container=\"main\",namespace=\"e2e\",pod=\"busy\"}"), "{m}");
    assert!(m.contains("pod_memory_working_set_bytes{namespace=\"e2e\",pod=\"busy\"}"), "{m}");
    assert!(m.contains("\nresource_scrape_error 0\n"), "{m}");
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/test.sh installs it)");
    check.stdin.take().unwrap().write_all(m.as_bytes()).unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let top = ok(&a, &["top", "pods", "-n", "e2e"]);
    let lines: Vec<&str> = top.lines().collect();
    assert!(lines[0].starts_with("NAME") && lines[0].contains("CPU(cores)   MEMORY(bytes)"), "{top}");
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(row[0], "busy", "{top}");
    let cpu: u64 = row[1].trim_end_matches('m').parse().unwrap();
    let mem: u64 = row[2].trim_end_matches("Mi").parse().unwrap();
    assert!(cpu >= 100 && mem >= 19, "{top}");
    let topn = ok(&a, &["top", "node"]);
    assert!(topn.starts_with("NAME   CPU(cores)   CPU(%)   MEMORY(bytes)   MEMORY(%)\ne2e "), "{topn}");
    a.clean_up(&[&uid]);
}

#[test]
fn container_logs_are_rotated_compressed_and_read_across_rotations() {
    let _serial = SERIAL.lock();
    // 64 KiB per file, 5 files: the live one, one rotated, three compressed
    let mut a = Agent::start_with(
        "logrotate",
        "containerLogMaxSize: 64Ki\ncontainerLogMaxFiles: 5\ncontainerLogMonitorInterval: 3s\n",
        &[],
    );
    // 4000 lines of 150 bytes (600 KB: about 9 rotations), a line every
    // 2 ms or so (5 files hold about 4 s of it: a follower that lags more
    // than that loses lines, as any reader of a rotated log would), then
    // quiet
    let pad = "x".repeat(140);
    a.write(
        "chatty.yaml",
        &pod_yaml(
            "chatty",
            "",
            &format!(
                "i=0; while [ $i -lt 4000 ]; do echo \"line $i {pad}\"; i=$((i+1)); usleep 2000; done; sleep 3600"
            ),
        ),
    );
    let uid = a.uid("chatty");
    wait_for("chatty running", Duration::from_secs(30), || {
        a.pod("chatty").is_some_and(|p| p["status"]["containerStatuses"][0]["state"]["running"].is_object())
    });
    let (mut follow, followed, reader) = follow_logs(&a, "chatty");
    if !poll_until(Duration::from_secs(90), || numbers(&followed.lock()).last() == Some(&3999)) {
        let got = numbers(&followed.lock());
        let files: Vec<String> = std::fs::read_dir(a.dir.0.join("logs"))
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|p| std::fs::read_dir(p.path().join("main")).into_iter().flatten().flatten())
            .map(|f| {
                // the first and last line numbers in each file
                let text = if f.file_name().to_string_lossy().ends_with(".gz") {
                    Command::new("zcat").arg(f.path()).output().map(|o| o.stdout).unwrap_or_default()
                } else {
                    std::fs::read(f.path()).unwrap_or_default()
                };
                let n: Vec<u32> = String::from_utf8_lossy(&text)
                    .lines()
                    .filter_map(|l| l.splitn(4, ' ').nth(3)?.strip_prefix("line ")?.split(' ').next()?.parse().ok())
                    .collect();
                format!("{}: {:?}..{:?}", f.file_name().to_string_lossy(), n.first(), n.last())
            })
            .collect();
        panic!(
            "-f printed {} lines in 90 s, the last {:?}; the log files now: {files:?}; podwarden's log:\n{}",
            got.len(),
            got.last(),
            a.log()
        );
    }
    let _ = follow.kill();
    let _ = follow.wait();
    reader.join().unwrap();
    // every line once, in order, across the rotations
    let got = numbers(&followed.lock());
    let wrong = got.iter().enumerate().find(|(i, n)| *i as u32 != **n);
    assert!(
        wrong.is_none() && got.len() == 4000,
        "logs -f across rotations: {} lines, first out of order at {wrong:?}",
        got.len()
    );

    let dir = a.dir.0.join("logs").join(format!("e2e_chatty_{uid}")).join("main");
    let files = || -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| (e.file_name().into_string().unwrap(), e.metadata().unwrap().len()))
            .collect();
        v.sort();
        v
    };
    // the last write may have come after the last check: the next pass
    // (3 s) rotates what is over the limit
    std::thread::sleep(Duration::from_secs(4));
    let f = files();
    // the live file and four rotated files; the log idle for a monitor
    // interval (3 s), the newest rotated one is compressed too (the
    // kubelet leaves it plain); rotated names are `0.log.<YYYYMMDD-hhmmss>`
    // (with `-<kkk>` for another rotation within a second)
    assert_eq!(f.len(), 5, "containerLogMaxFiles 5: {f:?}");
    wait_for("every rotated file compressed once the log is idle", Duration::from_secs(10), || {
        files().iter().filter(|(n, _)| n.ends_with(".gz")).count() == 4
    });
    let f = files();
    assert_eq!(f.len(), 5, "containerLogMaxFiles 5: {f:?}");
    assert_eq!(f[0].0, "0.log", "{f:?}");
    let stamp = |n: &str| {
        let n = n.split_once('-').map_or(n, |(d, rest)| if rest.len() > 6 { &n[..d.len() + 7] } else { n });
        n.len() == 15 && n.as_bytes()[8] == b'-' && n.bytes().filter(u8::is_ascii_digit).count() == 14
    };
    let gz = f.iter().find(|(n, _)| n.ends_with(".gz")).unwrap_or_else(|| panic!("a compressed file: {f:?}"));
    for (n, _) in f.iter().filter(|(n, _)| n != "0.log") {
        assert!(n.strip_prefix("0.log.").and_then(|n| n.strip_suffix(".gz")).is_some_and(stamp), "{f:?}");
    }
    let on_disk: u64 = f.iter().map(|(_, n)| n).sum();
    // the live file may be over the limit by what came in before the
    // check (about 100 ms of writes)
    assert!(on_disk < 4 * 64 * 1024 + 3 * 32 * 1024, "{on_disk} bytes on disk for 760 KB written: {f:?}");
    let content = podwarden::logs::rotation::read_compressed(&dir.join(&gz.0), 0, u64::MAX).unwrap();
    assert!(content.starts_with(b"20") && content.ends_with(b"\n"), "gzip holding CRI log lines");
    assert!(gz.1 * 3 < content.len() as u64, "compressed {} bytes of {}", gz.1, content.len());

    // without -f: what is still on disk, oldest first, ending at the last line
    let all = numbers(&ok(&a, &["logs", "chatty", "-n", "e2e"]));
    let first = all[0];
    assert!(first > 0, "the oldest files were removed");
    assert!(
        all.iter().zip(first..).all(|(a, b)| *a == b) && all.last() == Some(&3999),
        "{} lines from {first}",
        all.len()
    );
    // a tail reaching back into the rotated files
    let tail = numbers(&ok(&a, &["logs", "chatty", "-n", "e2e", "--tail", "700"]));
    assert!(
        tail.iter().zip(3300..).all(|(a, b)| *a == b) && tail.len() == 700,
        "{} lines from {:?}",
        tail.len(),
        tail.first()
    );
    assert!(!a.log().contains("log rotation failed"), "{}", a.log());
    a.clean_up(&[&uid]);
}

#[test]
fn delete_with_a_grace_period_override_and_logs_of_the_previous_instance() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("cli-grace");
    // ignores SIGTERM and asks for 30 s: --grace-period 1 cuts that short
    a.write("stubborn.yaml", &pod_yaml("stubborn", "  terminationGracePeriodSeconds: 30\n", STUBBORN));
    // prints a different line each run, then crashes: restarted
    a.write("crashy.yaml", &pod_yaml("crashy", "", "echo run $(cat /proc/sys/kernel/random/uuid); sleep 1; exit 1"));
    let stubborn = a.uid("stubborn");
    let crashy = a.uid("crashy");
    wait_for("stubborn running", Duration::from_secs(30), || a.running(&stubborn) == 1);
    let err = fails(&a, &["logs", "crashy", "-n", "e2e", "--previous"]);
    assert!(err.contains("previous terminated container") && err.contains("e2e/crashy"), "{err}");

    let t = Instant::now();
    ok(&a, &["delete", "pod", "stubborn", "-n", "e2e", "--grace-period", "1"]);
    wait_for("stubborn stopped", Duration::from_secs(10), || a.running(&stubborn) == 0);
    assert!(t.elapsed() < Duration::from_secs(4), "stopped after {:?}: the override was not used", t.elapsed());

    wait_for("crashy restarted", Duration::from_secs(40), || {
        a.pod("crashy").is_some_and(|p| p["status"]["containerStatuses"][0]["restartCount"].as_i64() >= Some(1))
    });
    wait_for("the new instance logged", Duration::from_secs(10), || {
        ok(&a, &["logs", "crashy", "-n", "e2e"]).starts_with("run ")
    });
    let cur = ok(&a, &["logs", "crashy", "-n", "e2e"]);
    let prev = ok(&a, &["logs", "crashy", "-n", "e2e", "-p"]);
    assert!(prev.starts_with("run ") && cur.starts_with("run ") && prev != cur, "previous {prev:?} current {cur:?}");
    a.clean_up(&[&stubborn, &crashy]);
}

#[test]
fn socket_is_0600_and_other_users_are_refused_unless_in_api_group() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("cli-perm");
    let meta = std::fs::metadata(a.api_socket()).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let nobody = Some((65534, 65534));
    let (code, _, err) = cli_as(&a, nobody, &["get", "pods"]);
    assert_eq!(code, 77, "EX_NOPERM");
    assert!(err.contains("permission denied"), "{err}");
    // even with the file opened up, the peer check refuses it
    std::fs::set_permissions(a.api_socket(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, _, err) = cli_as(&a, nobody, &["get", "pods"]);
    assert_eq!(code, 77, "EX_NOPERM");
    assert!(err.contains("refused") && err.contains("uid 65534 is not root"), "{err}");
    assert!(a.log().contains("refused a connection"), "{}", a.log());
    a.kill9();
    drop(a);

    // apiGroup: its members get in (socket 0660, group-owned), others do not
    let mut a = Agent::start_with("cli-group", "apiGroup: nogroup\n", &[]);
    let meta = std::fs::metadata(a.api_socket()).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(std::os::unix::fs::MetadataExt::gid(&meta), 65534);
    let (code, out, err) = cli_as(&a, nobody, &["get", "pods", "-A"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("No resources found"), "{out}");
    std::fs::set_permissions(a.api_socket(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, _, err) = cli_as(&a, Some((65534, 1)), &["get", "pods"]);
    assert_eq!(code, 77, "EX_NOPERM");
    assert!(err.contains("not in group nogroup"), "{err}");
    a.clean_up(&[]);
}

/// Remove the image's name from containerd (only that name: CRI
/// RemoveImage would drop every name of the image, busybox's too).
fn forget_image(image: &str) {
    let _ = Command::new("ctr").args(["--address", &socket(), "-n", "k8s.io", "images", "rm", image]).output();
}

fn private_pod(name: &str, image: &str) -> String {
    pod_yaml(name, "", TRAPPING).replace(IMAGE, image).replace("imagePullPolicy: Never", "imagePullPolicy: Always")
}

fn waiting(a: &Agent, name: &str) -> Option<(String, String)> {
    let p = a.pod(name)?;
    let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
    Some((w["reason"].as_str()?.to_string(), w["message"].as_str().unwrap_or_default().to_string()))
}

/// Everything podwarden and containerd showed: the daemon's log, events,
/// describe, get -o json, containerd's log.
fn everything_shown(a: &Agent, pod: &str) -> String {
    let containerd_log =
        std::env::var("PODWARDEN_E2E_DIR").unwrap_or_else(|_| "/var/lib/podwarden-e2e".into()) + "/containerd.log";
    [
        a.log(),
        ok(a, &["events", "-o", "json"]),
        ok(a, &["describe", "pod", pod, "-n", "e2e"]),
        ok(a, &["get", "pods", "-o", "json"]),
        a.get("/pods").unwrap_or_default(),
        std::fs::read_to_string(containerd_log).unwrap_or_default(),
    ]
    .join("\n")
}

#[test]
fn private_registry_pulls_need_the_right_credentials_and_nothing_shows_the_password() {
    let _serial = SERIAL.lock();
    let reg = registry();
    forget_image(&reg.image);
    let home = TempDir::new("registry-home");
    let env = [("HOME", home.0.to_str().unwrap()), ("RUST_LOG", "debug")];
    let mut a = Agent::start_with("registry", "", &env);
    let b64 = |s: &str| {
        let out = Command::new("base64").arg("-w0").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        out.stdin.as_ref().unwrap().write_all(s.as_bytes()).unwrap();
        String::from_utf8(out.wait_with_output().unwrap().stdout).unwrap()
    };
    let wrong = "not-the-password-7f3a";
    let mut seen = String::new();
    // 1: no credentials anywhere; 2: the wrong password in
    // <rootDir>/config.json; 3: the right one (read at the first pull after
    // a start: the keyring keeps a docker config for 5 minutes)
    for (step, password) in [(1, None), (2, Some(wrong)), (3, Some(reg.password.as_str()))] {
        if let Some(p) = password {
            a.kill9();
            let auth = b64(&format!("{}:{p}", reg.user));
            std::fs::write(
                a.root().join("config.json"),
                format!(r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#, reg.host),
            )
            .unwrap();
            a.spawn();
        }
        let name = format!("private-{step}");
        a.write("p.yaml", &private_pod(&name, &reg.image));
        let uid = a.uid(&name);
        if step < 3 {
            let mut got = None;
            wait_for("the pull fails", Duration::from_secs(60), || {
                got = waiting(&a, &name).filter(|(r, _)| r == "ErrImagePull" || r == "ImagePullBackOff");
                got.is_some()
            });
            let events = ok(&a, &["events", "-o", "json"]);
            assert!(
                events.contains("401 Unauthorized") && events.contains("Failed to pull image"),
                "step {step}: the registry's error in the Failed event: {events}"
            );
        } else {
            wait_for("the pod runs from the private registry", Duration::from_secs(60), || a.running(&uid) == 1);
            let pulled = ok(&a, &["events"]);
            assert!(pulled.contains(&format!("Successfully pulled image \"{}\"", reg.image)), "{pulled}");
        }
        seen += &everything_shown(&a, &name);
        a.clean_up(&[&uid]);
    }
    assert!(seen.contains(&reg.user), "the user name may show; the check reads real output");
    for secret in [reg.password.as_str(), wrong, &b64(&format!("{}:{}", reg.user, reg.password))] {
        assert!(!seen.contains(secret), "a credential was shown");
    }
    forget_image(&reg.image);
}

/// A pod's `imagePullSecrets` name Secrets (local objects here, the API's
/// in cluster mode) whose docker config the pull uses before the node's:
/// without the Secret the pull fails (401) with a
/// `FailedToRetrieveImagePullSecret` warning; the Secret written, the pod
/// runs at once (the pods that use an object are synced when it changes,
/// and new credentials end the pull's back-off); the password shows
/// nowhere.
#[test]
fn image_pull_secrets_supply_the_pods_registry_credentials() {
    let _serial = SERIAL.lock();
    let reg = registry();
    forget_image(&reg.image);
    let home = TempDir::new("pull-secret-home");
    let mut a = Agent::start_with("pull-secret", "", &[("HOME", home.0.to_str().unwrap())]);
    let pod = private_pod("pulls", &reg.image).replace("spec:\n", "spec:\n  imagePullSecrets:\n  - name: regcred\n");
    assert!(pod.contains("imagePullSecrets"), "{pod}");
    a.write("p.yaml", &pod);
    let uid = a.uid("pulls");
    wait_for("the pull fails without the Secret", Duration::from_secs(60), || {
        waiting(&a, "pulls").is_some_and(|(r, _)| r == "ErrImagePull" || r == "ImagePullBackOff")
    });
    let events = ok(&a, &["events", "-o", "json"]);
    assert!(events.contains("FailedToRetrieveImagePullSecret"), "{events}");
    assert!(events.contains("Unable to retrieve some image pull secrets (regcred)"), "{events}");
    assert!(events.contains("401 Unauthorized"), "{events}");
    let auth = {
        let out = Command::new("base64").arg("-w0").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        out.stdin.as_ref().unwrap().write_all(format!("{}:{}", reg.user, reg.password).as_bytes()).unwrap();
        String::from_utf8(out.wait_with_output().unwrap().stdout).unwrap()
    };
    let config = format!(r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#, reg.host);
    let written = Instant::now();
    a.write(
        "regcred.yaml",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: regcred, namespace: e2e}}\ntype: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '{config}'\n"
        ),
    );
    wait_for("the pod runs with the Secret's credentials", Duration::from_secs(30), || a.running(&uid) == 1);
    let took = written.elapsed();
    eprintln!("running {took:?} after the Secret was written");
    assert!(took < Duration::from_secs(8), "{took:?}: the pull back-off was waited");
    let seen = everything_shown(&a, "pulls");
    for secret in [reg.password.as_str(), auth.as_str()] {
        assert!(!seen.contains(secret), "a credential was shown");
    }
    a.clean_up(&[&uid]);
    forget_image(&reg.image);
}

/// A docker config written while a pod is in ImagePullBackOff is read at
/// once (inotify, not the keyring's 5 minutes) and the pod's pull is tried
/// again then, not after its back-off.
#[test]
fn a_registry_credential_written_while_a_pod_backs_off_is_used_at_once() {
    let _serial = SERIAL.lock();
    let reg = registry();
    forget_image(&reg.image);
    let home = TempDir::new("registry-later");
    let mut a = Agent::start_with("registry-later", "", &[("HOME", home.0.to_str().unwrap())]);
    a.write("p.yaml", &private_pod("later", &reg.image));
    let uid = a.uid("later");
    wait_for("the pull fails and backs off", Duration::from_secs(60), || {
        waiting(&a, "later").is_some_and(|(r, _)| r == "ImagePullBackOff")
    });
    let auth = {
        let out = Command::new("base64").arg("-w0").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        out.stdin.as_ref().unwrap().write_all(format!("{}:{}", reg.user, reg.password).as_bytes()).unwrap();
        String::from_utf8(out.wait_with_output().unwrap().stdout).unwrap()
    };
    // as an operator would: a new file renamed into place
    let tmp = a.root().join("config.json.new");
    std::fs::write(&tmp, format!(r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#, reg.host)).unwrap();
    let written = Instant::now();
    std::fs::rename(&tmp, a.root().join("config.json")).unwrap();
    wait_for("the pod runs from the private registry", Duration::from_secs(30), || a.running(&uid) == 1);
    let took = written.elapsed();
    eprintln!("running {took:?} after the credential was written");
    assert!(
        took < Duration::from_secs(8),
        "{took:?}: the back-off (10 s, then 20 s) or the keyring's 5 min was waited"
    );
    assert!(a.log().contains("a docker config file changed"), "{}", a.log());
    a.clean_up(&[&uid]);
    forget_image(&reg.image);
}

#[test]
fn a_credential_provider_plugin_supplies_registry_credentials_and_its_answer_is_cached() {
    let _serial = SERIAL.lock();
    let reg = registry();
    forget_image(&reg.image);
    let dir = TempDir::new("registry-plugin");
    let bin = dir.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let plugin = bin.join("e2e-login");
    // records each request; answers with the registry's credentials, for
    // the whole registry, for 5 minutes
    std::fs::write(
        &plugin,
        format!(
            "#!/bin/sh\ncat >> {0}/requests; echo >> {0}/requests\n\
             printf '{{\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"kind\":\"CredentialProviderResponse\",\
             \"cacheKeyType\":\"Registry\",\"cacheDuration\":\"5m\",\"auth\":{{\"%s\":{{\"username\":\"%s\",\"password\":\"%s\"}}}}}}' \
             \"$REGISTRY\" \"$1\" \"$(cat \"$PASSWORD_FILE\")\"\n",
            dir.0.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let password_file = dir.0.join("password");
    std::fs::write(&password_file, &reg.password).unwrap();
    std::fs::write(
        dir.0.join("providers.yaml"),
        format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: e2e-login\n  \
             matchImages: ['{0}']\n  defaultCacheDuration: 0s\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  \
             args: ['{1}']\n  env:\n  - {{name: REGISTRY, value: '{0}'}}\n  - {{name: PASSWORD_FILE, value: '{2}'}}\n",
            reg.host,
            reg.user,
            password_file.display()
        ),
    )
    .unwrap();
    let extra = format!(
        "imageCredentialProviderConfig: {}\nimageCredentialProviderBinDir: {}\n",
        dir.0.join("providers.yaml").display(),
        bin.display()
    );
    let home = TempDir::new("registry-home");
    let mut a =
        Agent::start_with("registry-plugin", &extra, &[("HOME", home.0.to_str().unwrap()), ("RUST_LOG", "debug")]);
    let requests = || std::fs::read_to_string(dir.0.join("requests")).unwrap_or_default();
    let mut seen = String::new();
    for name in ["plugin-1", "plugin-2"] {
        a.write("p.yaml", &private_pod(name, &reg.image));
        let uid = a.uid(name);
        wait_for("the pod runs with the plugin's credentials", Duration::from_secs(60), || a.running(&uid) == 1);
        let described = ok(&a, &["describe", "pod", name, "-n", "e2e"]);
        assert!(described.contains("Successfully pulled image"), "{name} was pulled: {described}");
        seen += &everything_shown(&a, name);
        a.clean_up(&[&uid]);
        // pulled again from the registry by the next pod
        forget_image(&reg.image);
    }
    let asked: Vec<Value> = requests().lines().filter(|l| !l.is_empty()).map(json).collect();
    assert_eq!(asked.len(), 1, "the second pull used the cached answer: {asked:?}");
    assert_eq!(asked[0]["kind"], "CredentialProviderRequest");
    assert_eq!(asked[0]["apiVersion"], "credentialprovider.kubelet.k8s.io/v1");
    let repo = reg.image.rsplit_once(':').unwrap().0;
    assert_eq!(asked[0]["image"], repo, "the repository, without the tag");
    assert!(!seen.contains(&reg.password), "the password was shown");
}

/// One agent per node: a second `podwarden run` on the same containerd (its
/// own rootDir) or on the same rootDir (another runtime) refuses to start
/// within seconds, naming the first agent's pid and what they would share,
/// and the first's pod runs on untouched; the first killed with SIGKILL,
/// the next starts and adopts the pod.
#[test]
fn a_second_agent_on_the_same_runtime_or_root_dir_is_refused() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("one-agent");
    a.write("keep.yaml", &pod_yaml("keep", "", "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"));
    let uid = a.uid("keep");
    wait_for("keep running", Duration::from_secs(30), || a.running(&uid) == 1);
    let id = a.runtime_pod(&uid).containers[0].id.clone();
    let first = a.child.as_ref().unwrap().id();
    let second = TempDir::new("e2e-one-agent-second");
    std::fs::create_dir_all(second.0.join("manifests")).unwrap();
    let run_second = |endpoint: &str, root: &Path| {
        let config = second.0.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "staticPodPath: {}\ncontainerRuntimeEndpoint: {endpoint}\nrootDir: {}\napiSocket: {}\npodLogsDir: {}\n\
                 nodeName: second\naddress: 127.0.0.1\nreadOnlyPort: {}\nport: {}\n{EVICTION}",
                second.0.join("manifests").display(),
                root.display(),
                second.0.join("api.sock").display(),
                second.0.join("logs").display(),
                free_port(),
                free_port()
            ),
        )
        .unwrap();
        let t = Instant::now();
        let out = Command::new(BIN)
            .args(["run", "--config", config.to_str().unwrap()])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (out.status, String::from_utf8_lossy(&out.stderr).into_owned(), t.elapsed())
    };
    // the same containerd, another rootDir
    let (status, err, took) = run_second(&format!("unix://{}", socket()), &second.0.join("root"));
    assert!(!status.success(), "a second agent on the same runtime started: {err}");
    assert!(took < Duration::from_secs(15), "refused after {took:?}");
    let runtime = Path::new(&socket()).canonicalize().unwrap();
    assert!(
        err.contains(&format!(
            "another podwarden (pid {first}) already uses the container runtime at unix://{}",
            runtime.display()
        )),
        "{err}"
    );
    // the same rootDir, another runtime
    let (status, err, _) = run_second("fake://", &a.root());
    assert!(!status.success(), "a second agent on the same rootDir started: {err}");
    assert!(
        err.contains(&format!(
            "another podwarden (pid {first}) already uses rootDir {}",
            a.root().canonicalize().unwrap().display()
        )),
        "{err}"
    );
    // the first agent's pod untouched
    let rp = a.runtime_pod(&uid);
    assert_eq!((rp.containers.len(), rp.containers[0].id.as_str()), (1, id.as_str()), "{rp:?}");
    assert!(a.try_get("/healthz").is_ok_and(|(code, _)| code == 200));
    // killed with SIGKILL: nothing left stops the next, which adopts the pod
    a.kill9();
    a.spawn();
    wait_for("the pod adopted", Duration::from_secs(20), || {
        a.pod("keep").is_some_and(|p| p["status"]["phase"] == "Running")
    });
    assert_eq!(a.runtime_pod(&uid).containers[0].id, id, "the same container after the restart");
    a.clean_up(&[&uid]);
}

//! The kubelet as the oracle (issue 41): every manifest of `tests/peer/`
//! runs under the real kubelet and under podwarden, each alone on the same
//! private containerd, and the pod statuses both report after the same
//! wait are compared field by field, with the logs the containers wrote
//! (what they see: `/etc/hosts`, `/etc/resolv.conf`, environment, downward
//! API files). A difference is either listed, with its reason, in
//! `docs/kubelet-differences.md`, or a failure.
//!
//! Run by `scripts/peer-diff.sh` (which builds the kubelet and prepares the
//! containerd). One line per manifest (`same`, `deliberate: …`,
//! `differs: …`), a closing count, and a JSON last line; the exit status is
//! 1 when a difference is not in the table.
//!
//! `PODWARDEN_PEER_ONLY=a,b` runs only those manifests (file stems);
//! `PODWARDEN_PEER_WAIT` changes the wait (seconds, default 40).

#[path = "support/mod.rs"]
mod support;

#[path = "peer/mod.rs"]
mod peer;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use peer::{Kind, NODE, Side};

/// How long after the others a manifest marked `# peer-diff: later` is
/// written.
const LATER: Duration = Duration::from_secs(10);

/// A manifest of the corpus: its file, its text, and the pod it makes.
struct Case {
    stem: String,
    file: String,
    text: String,
    /// written [`LATER`] after the others (the second of two pods that
    /// conflict: the kubelet admits static pods seen together in no
    /// particular order)
    later: bool,
    /// the namespace and the name the manifest gives
    ns: String,
    name: String,
}

impl Case {
    /// The pod's `namespace/name` on `kind`'s read-only port: the kubelet
    /// names a static pod `NAME-NODE`, podwarden keeps the manifest's name
    /// (DESIGN.md; a deliberate difference).
    fn key(&self, kind: Kind) -> String {
        match kind {
            Kind::Kubelet => format!("{}/{}-{NODE}", self.ns, self.name),
            Kind::Podwarden => format!("{}/{}", self.ns, self.name),
        }
    }
}

fn corpus() -> Vec<Case> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peer");
    let only: Option<BTreeSet<String>> =
        std::env::var("PODWARDEN_PEER_ONLY").ok().map(|v| v.split(',').map(str::to_string).collect());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|p| {
            let stem = p.file_stem()?.to_string_lossy().into_owned();
            if only.as_ref().is_some_and(|o| !o.contains(&stem)) {
                return None;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let meta = |k: &str| {
                text.lines()
                    .skip_while(|l| !l.starts_with("metadata:"))
                    .skip(1)
                    .take_while(|l| l.starts_with(' '))
                    .find_map(|l| l.trim().strip_prefix(&format!("{k}: ")).map(str::to_string))
            };
            let name = meta("name").unwrap_or_else(|| panic!("{}: no metadata.name", p.display()));
            let ns = meta("namespace").unwrap_or_else(|| "default".into());
            Some(Case {
                file: p.file_name()?.to_string_lossy().into_owned(),
                later: text.lines().any(|l| l.trim() == "# peer-diff: later"),
                stem,
                text,
                ns,
                name,
            })
        })
        .collect()
}

/// One observation of one pod, flattened: field → value. A pod the agent
/// does not show is `present: no`.
type Record = BTreeMap<String, String>;

fn state_text(s: &Value) -> String {
    if let Some(w) = s.get("waiting") {
        return format!("waiting {}", w["reason"].as_str().unwrap_or("-"));
    }
    if s.get("running").is_some() {
        return "running".into();
    }
    if let Some(t) = s.get("terminated") {
        return format!("terminated {} {}", t["reason"].as_str().unwrap_or("-"), t["exitCode"]);
    }
    "-".into()
}

/// The container's log as its process wrote it (CRI log lines, partial
/// lines joined), with the pod's IPs and UID replaced by placeholders.
fn container_log(pod: &Value, container: &str, attempt: u32) -> Option<String> {
    let m = &pod["metadata"];
    let dir = format!("{}_{}_{}", m["namespace"].as_str()?, m["name"].as_str()?, m["uid"].as_str()?);
    let path = peer::logs().join(dir).join(container).join(format!("{attempt}.log"));
    let raw = std::fs::read_to_string(path).ok()?;
    // each stream on its own: how containerd interleaves a container's
    // stdout and stderr lines in the file is the moment's
    let (mut stdout, mut stderr) = (String::new(), String::new());
    for line in raw.lines() {
        let mut parts = line.splitn(4, ' ');
        let (_ts, stream, tag) = (parts.next()?, parts.next()?, parts.next()?);
        let out = if stream == "stderr" { &mut stderr } else { &mut stdout };
        out.push_str(parts.next().unwrap_or(""));
        if tag == "F" {
            out.push('\n');
        }
    }
    let joined = if stderr.is_empty() { stdout } else { format!("{stdout}(stderr)\n{stderr}") };
    Some(normalize_log(pod, &joined))
}

fn normalize(pod: &Value, text: &str) -> String {
    let mut t = text.to_string();
    let st = &pod["status"];
    for (k, ph) in [("podIP", "<pod-ip>"), ("hostIP", "<host-ip>")] {
        if let Some(ip) = st[k].as_str().filter(|s| !s.is_empty()) {
            t = t.replace(ip, ph);
        }
    }
    if let Some(uid) = pod["metadata"]["uid"].as_str() {
        t = t.replace(uid, "<uid>");
    }
    timestamps_out(&t)
}

/// What a container printed, normalized: [`normalize`], and the pod's own
/// name (its host name) as `<pod-name>` where it stands as a word.
fn normalize_log(pod: &Value, text: &str) -> String {
    let t = normalize(pod, text);
    let Some(name) = pod["metadata"]["name"].as_str() else { return t };
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    let mut out = String::with_capacity(t.len());
    let mut rest = t.as_str();
    while let Some(i) = rest.find(name) {
        let (before, after) = (rest[..i].chars().next_back(), rest[i + name.len()..].chars().next());
        out.push_str(&rest[..i]);
        out.push_str(if word(before) || word(after) { name } else { "<pod-name>" });
        rest = &rest[i + name.len()..];
    }
    out.push_str(rest);
    out
}

/// RFC 3339 times (`2026-11-29T23:11:55.966503599Z`) replaced by `<time>`.
fn timestamps_out(t: &str) -> String {
    let b = t.as_bytes();
    let shape = b"dddd-dd-ddTdd:dd:dd";
    let mut out = String::with_capacity(t.len());
    let mut i = 0;
    while i < b.len() {
        let fits = b.len() - i >= shape.len()
            && shape.iter().zip(&b[i..]).all(|(s, c)| if *s == b'd' { c.is_ascii_digit() } else { s == c });
        if fits {
            let mut j = i + shape.len();
            if b.get(j) == Some(&b'.') {
                j += 1;
                while b.get(j).is_some_and(u8::is_ascii_digit) {
                    j += 1;
                }
            }
            if b.get(j) == Some(&b'Z') {
                j += 1;
            }
            out.push_str("<time>");
            i = j;
        } else {
            let ch = t[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn record(pod: Option<&Value>) -> Record {
    let mut r = Record::new();
    let Some(pod) = pod else {
        r.insert("present".into(), "no".into());
        return r;
    };
    r.insert("present".into(), "yes".into());
    r.insert("name".into(), pod["metadata"]["name"].as_str().unwrap_or("-").into());
    r.insert("uid".into(), pod["metadata"]["uid"].as_str().unwrap_or("-").into());
    let st = &pod["status"];
    for k in ["phase", "reason", "message"] {
        r.insert(k.into(), normalize(pod, st[k].as_str().unwrap_or("-")));
    }
    r.insert("podIP".into(), if st["podIP"].as_str().is_some_and(|s| !s.is_empty()) { "set" } else { "-" }.into());
    for c in st["conditions"].as_array().into_iter().flatten() {
        r.insert(
            format!("condition.{}", c["type"].as_str().unwrap_or("?")),
            format!("{} {}", c["status"].as_str().unwrap_or("-"), c["reason"].as_str().unwrap_or("-")),
        );
    }
    for (kind, list) in [("init", "initContainerStatuses"), ("container", "containerStatuses")] {
        for c in st[list].as_array().into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or("?");
            let p = format!("{kind}.{name}");
            r.insert(format!("{p}.state"), state_text(&c["state"]));
            r.insert(format!("{p}.last"), state_text(&c["lastState"]));
            r.insert(format!("{p}.ready"), c["ready"].to_string());
            r.insert(format!("{p}.started"), c.get("started").map_or("-".into(), |v| v.to_string()));
            r.insert(format!("{p}.restarts"), c["restartCount"].to_string());
            let msg = c["state"]["terminated"]["message"]
                .as_str()
                .or_else(|| c["lastState"]["terminated"]["message"].as_str())
                .unwrap_or("-");
            r.insert(format!("{p}.message"), normalize(pod, msg));
            if let Some(log) = container_log(pod, name, 0) {
                r.insert(format!("{p}.log"), log);
            }
        }
    }
    r
}

/// The observations of every case under one agent, taken `wait` after it
/// answered its health check.
fn observe(kind: Kind, cases: &[Case], wait: Duration) -> BTreeMap<String, Record> {
    peer::clear_runtime();
    let files: Vec<(String, String)> =
        cases.iter().filter(|c| !c.later).map(|c| (c.file.clone(), c.text.clone())).collect();
    peer::prepare(&files);
    let side = Side::start(kind);
    eprintln!("peer-diff: {} started; observing in {wait:?}", kind.name());
    std::thread::sleep(LATER);
    for c in cases.iter().filter(|c| c.later) {
        let tmp = peer::manifests().join(format!(".{}", c.file));
        std::fs::write(&tmp, &c.text).unwrap();
        std::fs::rename(&tmp, peer::manifests().join(&c.file)).unwrap();
    }
    std::thread::sleep(wait.saturating_sub(LATER));
    let pods = side.pods();
    let by_key: BTreeMap<String, &Value> = pods
        .iter()
        .filter_map(|p| {
            let m = &p["metadata"];
            Some((format!("{}/{}", m["namespace"].as_str()?, m["name"].as_str()?), p))
        })
        .collect();
    let log = Path::new(peer::DIR).join(format!("{}.log", kind.name()));
    let events = pod_events(kind, &std::fs::read_to_string(&log).unwrap_or_default());
    let out = cases
        .iter()
        .map(|c| {
            let key = c.key(kind);
            let mut r = record(by_key.get(&key).copied());
            if let Some(reasons) = events.get(&key) {
                r.insert("events".into(), reasons.join(" "));
            }
            (c.stem.clone(), r)
        })
        .collect();
    let keep = std::env::temp_dir().join(format!("podwarden-peer-{}.log", kind.name()));
    let _ = std::fs::copy(&log, &keep);
    side.stop();
    peer::clear_runtime();
    out
}

/// Each pod's event reasons in the order they first came, from the
/// agent's log: the standalone kubelet's events reach only its log
/// (`"Event occurred" object="NS/NAME" … reason="R"`, at `--v=3`),
/// podwarden's are logged as `NS/NAME UID: R: message`.
fn pod_events(kind: Kind, log: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in log.lines() {
        let found = match kind {
            Kind::Kubelet => (|| {
                let rest = line.split_once("\"Event occurred\" object=\"")?.1;
                let (object, rest) = rest.split_once('"')?;
                rest.contains("kind=\"Pod\"").then_some(())?;
                let reason = rest.split_once(" reason=\"")?.1.split_once('"')?.0;
                Some((object.to_string(), reason.to_string()))
            })(),
            Kind::Podwarden => (|| {
                let rest = line.split_once("podwarden::telemetry::events] ")?.1;
                let (object, rest) = rest.split_once(' ')?;
                object.contains('/').then_some(())?;
                let reason = rest.split_once(": ")?.1.split_once(':')?.0;
                Some((object.to_string(), reason.to_string()))
            })(),
        };
        if let Some((object, reason)) = found {
            let seen = out.entry(object).or_default();
            if !seen.contains(&reason) {
                seen.push(reason);
            }
        }
    }
    out
}

/// A row of `docs/kubelet-differences.md`: a difference that is deliberate.
struct Deliberate {
    manifest: String,
    field: String,
}

impl Deliberate {
    fn covers(&self, manifest: &str, field: &str) -> bool {
        (self.manifest == "*" || self.manifest == manifest)
            && match self.field.strip_suffix('*') {
                Some(prefix) => field.starts_with(prefix),
                None => self.field == field,
            }
    }
}

fn deliberate_table() -> Vec<Deliberate> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/kubelet-differences.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(|c| c.trim().trim_matches('`')).collect();
            (cells.len() >= 3).then(|| Deliberate { manifest: cells[0].to_string(), field: cells[1].to_string() })
        })
        .collect()
}

/// Two values the same, give or take what timing moves: restart counts
/// within a third (at least one), and a container's current state while
/// it is restarting on both sides (between back-offs it runs, waits or has
/// just ended by chance of the moment).
fn same(field: &str, kubelet: &str, podwarden: &str, rk: &Record, rp: &Record) -> bool {
    if kubelet == podwarden {
        return true;
    }
    // whether a container (by its field prefix), or any with None, has
    // restarted in both records
    let restarting = |prefix: Option<&str>| {
        let one = |r: &Record| {
            r.iter().any(|(k, v)| {
                k.strip_suffix(".restarts").is_some_and(|p| prefix.is_none_or(|want| p == want))
                    && v.parse::<i64>().is_ok_and(|n| n > 0)
            })
        };
        one(rk) && one(rp)
    };
    if field.ends_with(".restarts") {
        let (a, b) = (kubelet.parse::<i64>().unwrap_or(-1), podwarden.parse::<i64>().unwrap_or(-1));
        return a >= 0 && b >= 0 && (a - b).abs() <= (a.max(b) / 3).max(1);
    }
    if let Some(prefix) = field.strip_suffix(".state") {
        // a pull back-off shows ErrImagePull after each failed pull and
        // ImagePullBackOff while it waits: which one a moment shows is
        // the timing of the agent's passes
        let pulling = |s: &str| s == "waiting ErrImagePull" || s == "waiting ImagePullBackOff";
        let cycling = |s: &str| {
            s == "running"
                || s.starts_with("terminated")
                || s == "waiting CrashLoopBackOff"
                // the kubelet's reason between a failed start and the
                // back-off its next sync finds
                || s == "waiting RunContainerError"
        };
        return (pulling(kubelet) && pulling(podwarden))
            || (restarting(Some(prefix)) && cycling(kubelet) && cycling(podwarden));
    }
    if field == "condition.Ready" || field == "condition.ContainersReady" {
        // a pod's readiness flips with a restarting container's state
        return restarting(None);
    }
    if let Some(prefix) = field.strip_suffix(".ready").or_else(|| field.strip_suffix(".started")) {
        // a restarting container's readiness flips with its state
        return restarting(Some(prefix));
    }
    false
}

fn short(v: &str) -> String {
    let one = v.replace('\n', "⏎");
    if one.chars().count() > 160 { format!("{}…", one.chars().take(160).collect::<String>()) } else { one }
}

fn main() {
    let cases = corpus();
    assert!(!cases.is_empty(), "no manifests in tests/peer");
    let wait =
        Duration::from_secs(std::env::var("PODWARDEN_PEER_WAIT").ok().and_then(|v| v.parse().ok()).unwrap_or(40));
    let table = deliberate_table();
    let kubelet = observe(Kind::Kubelet, &cases, wait);
    let podwarden = observe(Kind::Podwarden, &cases, wait);
    let (mut n_same, mut n_deliberate, mut n_differs) = (0, 0, 0);
    for c in &cases {
        let (rk, rp) = (&kubelet[&c.stem], &podwarden[&c.stem]);
        let fields: BTreeSet<&String> = rk.keys().chain(rp.keys()).collect();
        let (mut undocumented, mut documented) = (Vec::new(), Vec::new());
        for f in fields {
            let (a, b) = (rk.get(f).map_or("(none)", String::as_str), rp.get(f).map_or("(none)", String::as_str));
            if same(f, a, b, rk, rp) {
                continue;
            }
            let line = format!("{f}: kubelet {}, podwarden {}", short(a), short(b));
            if table.iter().any(|d| d.covers(&c.stem, f)) {
                documented.push(line);
            } else {
                undocumented.push(line);
            }
        }
        if !undocumented.is_empty() {
            n_differs += 1;
            println!("differs {}: {}", c.stem, undocumented.join("; "));
            if !documented.is_empty() {
                println!("  (and deliberate: {})", documented.join("; "));
            }
        } else if !documented.is_empty() {
            n_deliberate += 1;
            println!("deliberate {}: {}", c.stem, documented.join("; "));
        } else {
            n_same += 1;
            println!("same {}", c.stem);
        }
    }
    println!(
        "peer-diff: {} manifests: {n_same} the same, {n_deliberate} with deliberate differences only, {n_differs} differ",
        cases.len()
    );
    println!(
        "{{\"manifests\":{},\"same\":{n_same},\"deliberate\":{n_deliberate},\"differs\":{n_differs},\"wait_s\":{}}}",
        cases.len(),
        wait.as_secs()
    );
    if n_differs > 0 {
        std::process::exit(1);
    }
}

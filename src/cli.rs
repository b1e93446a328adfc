//! The kubectl-like client verbs of the `podwarden` binary, on the local
//! API: `get pods`, `describe pod`, `logs`, `events`, `node`, `apply`,
//! `delete pod`, `version`. Output follows kubectl (aligned tables, `-o
//! json|yaml|wide`); errors are returned as the message to print.

use std::io::{Read, Write};
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::api::client::{Client, default_socket};

pub const VERBS: &[&str] = &["get", "describe", "logs", "events", "node", "apply", "delete"];

const GET_HELP: &str = "\
Show pods.

Usage:
  podwarden get pods [NAME] [-o wide|json|yaml] [-n NAMESPACE | -A] [--socket PATH]

Options:
  -o, --output FORMAT     wide (adds IP and NODE), json (a v1 PodList, or a Pod with NAME) or yaml
  -n, --namespace NS      only this namespace (default: default)
  -A, --all-namespaces    every namespace (adds a NAMESPACE column)
      --socket PATH       the daemon's API socket (default $PODWARDEN_SOCKET, else /run/podwarden/podwarden.sock)
";

const DESCRIBE_HELP: &str = "\
Show a pod in detail: status, containers, conditions, its manifest and events.

Usage:
  podwarden describe pod NAME [-n NAMESPACE] [--socket PATH]
";

const LOGS_HELP: &str = "\
Print a container's log.

Usage:
  podwarden logs POD [-n NAMESPACE] [-c CONTAINER] [-f] [--previous] [--tail N] [--socket PATH]

Options:
  -c, --container NAME    the container (needed when the pod has several)
  -f, --follow            keep printing new lines until the container stops
  -p, --previous          the log of the container's previous instance
      --tail N            only the last N lines
";

const EVENTS_HELP: &str = "\
Show recent events (pods admitted, rejected, started, killed; bad manifests).

Usage:
  podwarden events [-n NAMESPACE | -A] [-o json] [--socket PATH]
";

const NODE_HELP: &str = "\
Show the node: readiness, capacity, allocatable and allocated resources, and
the graceful-shutdown state (why it is off, if it is).

Usage:
  podwarden node [-o json] [--socket PATH]
";

const APPLY_HELP: &str = "\
Validate a Pod manifest and write it into staticPodPath (atomically); the
pod is created, or replaced if its manifest changed.

Usage:
  podwarden apply -f FILE|- [--socket PATH]
";

const DELETE_HELP: &str = "\
Remove a pod's manifest and kill the pod.

Usage:
  podwarden delete pod NAME [-n NAMESPACE] [--grace-period SECONDS] [--socket PATH]

Options:
  --grace-period N    seconds the containers get to stop (0: at once); on a
                      pod already terminating, a shorter period takes over
";

const VERSION_HELP: &str = "\
Print the client's and the daemon's versions.

Usage:
  podwarden version [--socket PATH]
";

/// Parsed common flags and the remaining positional arguments.
#[derive(Default)]
struct Args {
    socket: Option<String>,
    namespace: Option<String>,
    all: bool,
    output: Option<String>,
    container: Option<String>,
    follow: bool,
    previous: bool,
    tail: Option<u64>,
    file: Option<String>,
    grace: Option<i64>,
    help: bool,
    rest: Vec<String>,
}

fn parse(args: &[String], verb: &str) -> Result<Args, String> {
    let mut a = Args::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            inline.clone().or_else(|| it.next().cloned()).ok_or_else(|| format!("{verb}: {name} needs a value"))
        };
        match flag {
            "-h" | "--help" => a.help = true,
            "--socket" => a.socket = Some(value("--socket")?),
            "-n" | "--namespace" => a.namespace = Some(value("--namespace")?),
            "-A" | "--all-namespaces" => a.all = true,
            "-o" | "--output" => a.output = Some(value("--output")?),
            s if s.starts_with("-o") && s.len() > 2 && inline.is_none() => a.output = Some(s[2..].to_string()),
            "-c" | "--container" => a.container = Some(value("--container")?),
            "-f" | "--filename" if verb == "apply" => a.file = Some(value("-f")?),
            "-f" | "--follow" => a.follow = true,
            "-p" | "--previous" => a.previous = true,
            "--tail" => {
                let v = value("--tail")?;
                a.tail = Some(v.parse().map_err(|_| format!("{verb}: --tail {v:?}: expected a number of lines"))?);
            }
            "--grace-period" => {
                let v = value("--grace-period")?;
                let n: i64 = v.parse().map_err(|_| format!("{verb}: --grace-period {v:?}: expected seconds"))?;
                if n < 0 {
                    return Err(format!("{verb}: --grace-period {n}: must not be negative"));
                }
                a.grace = Some(n);
            }
            s if s.starts_with('-') && s != "-" => {
                return Err(format!("{verb}: unknown flag {s:?} (see podwarden {verb} --help)"));
            }
            _ => a.rest.push(arg.clone()),
        }
    }
    Ok(a)
}

impl Args {
    fn client(&self) -> Result<Client, String> {
        Client::connect(&self.socket.clone().unwrap_or_else(default_socket))
    }

    fn ns(&self) -> String {
        self.namespace.clone().unwrap_or_else(|| "default".into())
    }

    fn output(&self, allowed: &[&str], verb: &str) -> Result<&str, String> {
        match self.output.as_deref() {
            None => Ok(""),
            Some(o) if allowed.contains(&o) => Ok(o),
            Some(o) => Err(format!("{verb}: output format {o:?} is not supported (use {})", allowed.join(", "))),
        }
    }

    /// The single resource name after an optional kind word (`pod`, `pods`, `po`).
    fn kind_and_name(&self, verb: &str, need_name: bool) -> Result<Option<String>, String> {
        let mut rest = self.rest.iter();
        match rest.next().map(String::as_str) {
            Some("pod" | "pods" | "po") => {}
            Some(other) => return Err(format!("{verb}: podwarden knows only pods, not {other:?}")),
            None => return Err(format!("{verb}: name the kind: {verb} pod{}", if need_name { " NAME" } else { "s" })),
        }
        let name = rest.next().cloned();
        if let Some(extra) = rest.next() {
            return Err(format!("{verb}: unexpected argument {extra:?}"));
        }
        if need_name && name.is_none() {
            return Err(format!("{verb}: name the pod: {verb} pod NAME"));
        }
        Ok(name)
    }
}

/// Run a client verb. `args` are the words after the verb.
pub fn run(verb: &str, args: &[String]) -> Result<(), String> {
    let a = parse(args, verb)?;
    let help = match verb {
        "get" => GET_HELP,
        "describe" => DESCRIBE_HELP,
        "logs" => LOGS_HELP,
        "events" => EVENTS_HELP,
        "node" => NODE_HELP,
        "apply" => APPLY_HELP,
        "delete" => DELETE_HELP,
        "version" => VERSION_HELP,
        _ => return Err(format!("unknown command {verb:?}")),
    };
    if a.help {
        print!("{help}");
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    let text = match verb {
        "get" => get(&a)?,
        "describe" => describe(&a)?,
        "logs" => return logs(&a, &mut out),
        "events" => events(&a)?,
        "node" => node(&a)?,
        "apply" => apply(&a)?,
        "delete" => delete(&a)?,
        _ => version(&a)?,
    };
    out.write_all(text.as_bytes()).map_err(|e| format!("writing output: {e}"))
}

fn json_text(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default() + "\n"
}

fn yaml_text(v: &Value) -> Result<String, String> {
    serde_yaml_ng::to_string(v).map_err(|e| format!("formatting YAML: {e}"))
}

/// kubectl's short ages: `45s`, `3m20s`, `15m`, `4h5m`, `30h`, `3d4h`, `20d`, `2y100d`.
pub fn age(d: Duration) -> String {
    let s = d.as_secs();
    let (m, h) = (s / 60, s / 3600);
    let pair = |a: u64, au: &str, b: u64, bu: &str| if b == 0 { format!("{a}{au}") } else { format!("{a}{au}{b}{bu}") };
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        pair(m, "m", s % 60, "s")
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        pair(h, "h", m % 60, "m")
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        pair(h / 24, "d", h % 24, "h")
    } else if h < 24 * 365 * 2 {
        format!("{}d", h / 24)
    } else if h < 24 * 365 * 8 {
        pair(h / 24 / 365, "y", (h / 24) % 365, "d")
    } else {
        format!("{}y", h / 24 / 365)
    }
}

fn since(t: &Value) -> String {
    t.as_str()
        .and_then(|s| s.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .and_then(|t| SystemTime::now().duration_since(SystemTime::from(t)).ok())
        .map_or_else(|| "<unknown>".into(), age)
}

/// Columns separated by three spaces, each as wide as its widest cell.
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..cols).map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}   ", w = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The STATUS column as kubectl computes it.
pub fn pod_status(p: &Value) -> String {
    let st = &p["status"];
    let mut reason = st["reason"].as_str().or(st["phase"].as_str()).unwrap_or("Unknown").to_string();
    for c in st["containerStatuses"].as_array().into_iter().flatten() {
        if let Some(r) = c["state"]["waiting"]["reason"].as_str().filter(|r| !r.is_empty()) {
            reason = r.to_string();
        } else if let Some(t) = c["state"]["terminated"].as_object() {
            reason = match t.get("reason").and_then(Value::as_str).filter(|r| !r.is_empty()) {
                Some(r) => r.to_string(),
                None => match t.get("signal").and_then(Value::as_i64).filter(|s| *s != 0) {
                    Some(s) => format!("Signal:{s}"),
                    None => format!("ExitCode:{}", t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)),
                },
            };
        }
    }
    if p["metadata"]["deletionTimestamp"].is_string() {
        reason = "Terminating".into();
    }
    reason
}

fn pod_row(p: &Value, wide: bool, with_ns: bool) -> Vec<String> {
    let cs = p["status"]["containerStatuses"].as_array().cloned().unwrap_or_default();
    let total = p["spec"]["containers"].as_array().map_or(0, Vec::len);
    let ready = cs.iter().filter(|c| c["ready"] == true).count();
    let restarts: i64 = cs.iter().filter_map(|c| c["restartCount"].as_i64()).sum();
    let mut row = Vec::new();
    if with_ns {
        row.push(p["metadata"]["namespace"].as_str().unwrap_or("").to_string());
    }
    row.extend([
        p["metadata"]["name"].as_str().unwrap_or("").to_string(),
        format!("{ready}/{total}"),
        pod_status(p),
        restarts.to_string(),
        since(&p["status"]["startTime"]),
    ]);
    if wide {
        row.push(p["status"]["podIP"].as_str().unwrap_or("<none>").to_string());
        row.push(p["spec"]["nodeName"].as_str().unwrap_or("<none>").to_string());
    }
    row
}

fn get(a: &Args) -> Result<String, String> {
    let name = a.kind_and_name("get", false)?;
    let fmt = a.output(&["wide", "json", "yaml"], "get")?;
    let c = a.client()?;
    if let Some(name) = name {
        let (pod, _) = c.get_pod(&a.ns(), &name)?;
        return match fmt {
            "json" => Ok(json_text(&pod)),
            "yaml" => yaml_text(&pod),
            _ => {
                let mut head = vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE"];
                if fmt == "wide" {
                    head.extend(["IP", "NODE"]);
                }
                Ok(table(&[head.iter().map(|s| s.to_string()).collect(), pod_row(&pod, fmt == "wide", false)]))
            }
        };
    }
    let ns = if a.all { String::new() } else { a.ns() };
    let list = c.list_pods(&ns)?;
    match fmt {
        "json" => Ok(json_text(&list)),
        "yaml" => yaml_text(&list),
        _ => {
            let items = list["items"].as_array().cloned().unwrap_or_default();
            if items.is_empty() {
                return Ok(if a.all {
                    "No resources found\n".into()
                } else {
                    format!("No resources found in {} namespace.\n", a.ns())
                });
            }
            let mut head = Vec::new();
            if a.all {
                head.push("NAMESPACE");
            }
            head.extend(["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
            if fmt == "wide" {
                head.extend(["IP", "NODE"]);
            }
            let mut rows = vec![head.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
            rows.extend(items.iter().map(|p| pod_row(p, fmt == "wide", a.all)));
            Ok(table(&rows))
        }
    }
}

fn kv_map(v: &Value) -> String {
    match v.as_object() {
        Some(m) if !m.is_empty() => m
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join("\n              "),
        _ => "<none>".into(),
    }
}

fn state_text(s: &Value, indent: &str) -> String {
    let Some((name, body)) = s.as_object().and_then(|m| m.iter().next()) else {
        return "<none>".into();
    };
    let mut out = match name.as_str() {
        "running" => "Running".to_string(),
        "waiting" => "Waiting".to_string(),
        _ => "Terminated".to_string(),
    };
    for (k, label) in [
        ("reason", "Reason"),
        ("message", "Message"),
        ("exitCode", "Exit Code"),
        ("startedAt", "Started"),
        ("finishedAt", "Finished"),
    ] {
        if let Some(v) = body.get(k).filter(|v| !v.is_null()) {
            let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            out.push_str(&format!("\n{indent}  {:<14}{v}", format!("{label}:")));
        }
    }
    out
}

fn describe(a: &Args) -> Result<String, String> {
    let name = a.kind_and_name("describe", true)?.unwrap_or_default();
    let c = a.client()?;
    let (p, manifest) = c.get_pod(&a.ns(), &name)?;
    let events = c.events(Some((&a.ns(), &name)))?;
    let (m, spec, st) = (&p["metadata"], &p["spec"], &p["status"]);
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{:<14}{v}\n", format!("{k}:")));
    line("Name", s(&m["name"]));
    line("Namespace", s(&m["namespace"]));
    line("UID", s(&m["uid"]));
    line("Priority", spec["priority"].as_i64().unwrap_or(0).to_string());
    if let Some(pc) = spec["priorityClassName"].as_str() {
        line("Priority Class", pc.to_string());
    }
    line("Manifest", manifest);
    line("Start Time", st["startTime"].as_str().unwrap_or("<unset>").to_string());
    line("Labels", kv_map(&m["labels"]));
    line("Status", pod_status(&p));
    if let Some(r) = st["reason"].as_str() {
        line("Reason", r.to_string());
    }
    if let Some(msg) = st["message"].as_str() {
        line("Message", msg.to_string());
    }
    line("IP", st["podIP"].as_str().unwrap_or("").to_string());
    line("Grace Period", format!("{}s", spec["terminationGracePeriodSeconds"].as_i64().unwrap_or(30)));
    out.push_str("Containers:\n");
    let statuses = st["containerStatuses"].as_array().cloned().unwrap_or_default();
    for ctr in spec["containers"].as_array().into_iter().flatten() {
        let cname = ctr["name"].as_str().unwrap_or("");
        let cs = statuses.iter().find(|c| c["name"] == cname).cloned().unwrap_or(Value::Null);
        out.push_str(&format!("  {cname}:\n"));
        let mut cl = |k: &str, v: String| out.push_str(&format!("    {:<16}{v}\n", format!("{k}:")));
        cl("Container ID", s(&cs["containerID"]));
        cl("Image", s(&ctr["image"]));
        cl("Image ID", s(&cs["imageID"]));
        if let Some(cmd) = ctr["command"].as_array() {
            cl("Command", cmd.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" "));
        }
        cl("State", state_text(&cs["state"], "    "));
        if cs["lastState"].as_object().is_some_and(|o| !o.is_empty()) {
            cl("Last State", state_text(&cs["lastState"], "    "));
        }
        cl("Ready", if cs["ready"] == true { "True".into() } else { "False".into() });
        cl("Restart Count", cs["restartCount"].as_i64().unwrap_or(0).to_string());
    }
    out.push_str("Conditions:\n");
    let mut rows = vec![vec!["  Type".to_string(), "Status".to_string()]];
    for cond in st["conditions"].as_array().into_iter().flatten() {
        rows.push(vec![format!("  {}", s(&cond["type"])), s(&cond["status"])]);
    }
    out.push_str(&table(&rows));
    if events.is_empty() {
        out.push_str("Events:       <none>\n");
    } else {
        out.push_str("Events:\n");
        let mut rows = vec![["  Type", "Reason", "Age", "Message"].iter().map(|s| s.to_string()).collect::<Vec<_>>()];
        for e in &events {
            rows.push(vec![
                format!("  {}", e.type_),
                e.reason.clone(),
                since(&Value::from(e.time.clone())),
                e.message.clone(),
            ]);
        }
        out.push_str(&table(&rows));
    }
    Ok(out)
}

fn logs(a: &Args, out: &mut impl Write) -> Result<(), String> {
    let name = match a.rest.as_slice() {
        [n] => n.clone(),
        [] => return Err("logs: name the pod: podwarden logs POD [-c CONTAINER]".into()),
        [_, extra, ..] => return Err(format!("logs: unexpected argument {extra:?}")),
    };
    let c = a.client()?;
    let mut req = crate::api::pb::api::LogsRequest {
        pod: Some(crate::api::pb::api::PodRef { namespace: a.ns(), name, ..Default::default() }).into(),
        container: a.container.clone().unwrap_or_default(),
        previous: a.previous,
        tail_lines: a.tail.unwrap_or(0),
        ..Default::default()
    };
    let mut first = true;
    loop {
        let r = match c.logs(&req) {
            Ok(r) => r,
            // followed to the end: the pod went away
            Err(_) if !first => return Ok(()),
            Err(e) => return Err(e),
        };
        first = false;
        out.write_all(&r.data).and_then(|()| out.flush()).map_err(|e| format!("writing output: {e}"))?;
        let more = r.next_offset > req.offset;
        req.offset = r.next_offset;
        req.tail_lines = 0;
        if !a.follow || (!r.running && !more) {
            return Ok(());
        }
        if !more {
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

fn events(a: &Args) -> Result<String, String> {
    let fmt = a.output(&["json"], "events")?;
    let c = a.client()?;
    let mut evs = c.events(None)?;
    if let Some(ns) = a.namespace.as_ref().filter(|_| !a.all) {
        evs.retain(|e| e.object.starts_with(&format!("pod/{ns}/")));
    }
    if fmt == "json" {
        let items: Vec<Value> = evs
            .iter()
            .map(|e| {
                serde_json::json!({"time": e.time, "type": e.type_, "reason": e.reason, "object": e.object,
                                   "uid": e.uid, "message": e.message})
            })
            .collect();
        return Ok(json_text(&Value::from(items)));
    }
    if evs.is_empty() {
        return Ok("No events found.\n".into());
    }
    let mut rows =
        vec![["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"].iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for e in &evs {
        rows.push(vec![
            since(&Value::from(e.time.clone())),
            e.type_.clone(),
            e.reason.clone(),
            e.object.clone(),
            e.message.clone(),
        ]);
    }
    Ok(table(&rows))
}

fn node(a: &Args) -> Result<String, String> {
    let fmt = a.output(&["json", "yaml"], "node")?;
    let r = a.client()?.node()?;
    match fmt {
        "json" => return Ok(json_text(&r)),
        "yaml" => return yaml_text(&r),
        _ => {}
    }
    let (n, gs) = (&r["node"], &r["gracefulShutdown"]);
    let s = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    let res = |v: &Value| format!("cpu {}, memory {}, pods {}", s(&v["cpu"]), s(&v["memory"]), s(&v["pods"]));
    let cond = &n["status"]["conditions"][0];
    let shutdown = if gs["configured"] != true {
        "not configured (shutdownGracePeriod is 0)".to_string()
    } else if let Some(p) = gs["problem"].as_str() {
        format!("off: {p}")
    } else if gs["inhibitorLockHeld"] == true {
        "enabled (inhibitor lock held)".to_string()
    } else {
        "enabled".to_string()
    };
    let last = match (gs["lastStartTime"].as_str(), gs["lastEndTime"].as_str()) {
        (Some(s), Some(e)) => format!("{s} to {e}"),
        (Some(s), None) => format!("{s} (still running)"),
        _ => "never".into(),
    };
    let rows = [
        ("Name", s(&n["metadata"]["name"])),
        ("Ready", format!("{} ({}: {})", s(&cond["status"]), s(&cond["reason"]), s(&cond["message"]))),
        ("Runtime", s(&n["status"]["nodeInfo"]["containerRuntimeVersion"])),
        ("Agent", s(&n["status"]["nodeInfo"]["kubeletVersion"])),
        (
            "OS",
            format!("{} ({})", s(&n["status"]["nodeInfo"]["osImage"]), s(&n["status"]["nodeInfo"]["kernelVersion"])),
        ),
        ("Capacity", res(&n["status"]["capacity"])),
        ("Allocatable", res(&n["status"]["allocatable"])),
        ("Allocated", res(&r["allocated"])),
        ("Graceful shutdown", shutdown),
        ("Shutting down", if gs["shuttingDown"] == true { "yes".into() } else { "no".into() }),
        ("Last shutdown", last),
    ];
    Ok(rows.iter().map(|(k, v)| format!("{:<19}{v}\n", format!("{k}:"))).collect())
}

fn apply(a: &Args) -> Result<String, String> {
    let file = a.file.clone().ok_or("apply: name the manifest with -f FILE (or -f - for standard input)")?;
    if let Some(extra) = a.rest.first() {
        return Err(format!("apply: unexpected argument {extra:?}"));
    }
    // at most one byte over the daemon's limit: it names the limit, and
    // `-f /dev/zero` cannot fill this process
    let max = crate::model::manifest::MAX_MANIFEST_BYTES + 1;
    let mut bytes = Vec::new();
    if file == "-" {
        std::io::stdin()
            .take(max)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("apply: reading standard input: {e}"))?;
    } else {
        std::fs::File::open(&file)
            .and_then(|f| f.take(max).read_to_end(&mut bytes))
            .map_err(|e| format!("apply: {file}: {e}"))?;
    }
    if bytes.len() as u64 >= max {
        return Err(format!("apply: {file}: manifest is over the limit of {} bytes", max - 1));
    }
    let r = a.client()?.apply(bytes, &file)?;
    // kubectl's form: fields the daemon does not know, on stderr
    for w in &r.warnings {
        eprintln!("Warning: {w}");
    }
    Ok(format!("pod/{} {}\n", r.name, r.result))
}

fn delete(a: &Args) -> Result<String, String> {
    let name = a.kind_and_name("delete", true)?.unwrap_or_default();
    a.client()?.delete(&a.ns(), &name, a.grace)?;
    Ok(format!("pod \"{name}\" deleted\n"))
}

fn version(a: &Args) -> Result<String, String> {
    // the client's version shows even when the daemon cannot be reached
    println!("Client Version: podwarden {}", env!("CARGO_PKG_VERSION"));
    let v = a.client()?.version()?;
    Ok(format!(
        "Server Version: podwarden {}\nRuntime Version: {} (CRI {})\n",
        v.version, v.runtime_version, v.cri_api_version
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_like_kubectl() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (200, "3m20s"),
            (540, "9m"),
            (900, "15m"),
            (4 * 3600 + 300, "4h5m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (20 * 86400, "20d"),
            (3 * 365 * 86400 + 100 * 86400, "3y100d"),
        ];
        for (s, want) in cases {
            assert_eq!(age(Duration::from_secs(s)), want, "{s}s");
        }
    }

    #[test]
    fn tables_align_columns_with_three_spaces() {
        let t = table(&[
            vec!["NAME".into(), "READY".into(), "STATUS".into()],
            vec!["web-server".into(), "1/1".into(), "Running".into()],
        ]);
        assert_eq!(t, "NAME         READY   STATUS\nweb-server   1/1     Running\n");
    }

    #[test]
    fn status_column_prefers_container_reasons_like_kubectl() {
        let p: Value = serde_json::json!({"status": {"phase": "Running", "containerStatuses": [
            {"state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        assert_eq!(pod_status(&p), "CrashLoopBackOff");
        let p: Value = serde_json::json!({"status": {"phase": "Failed", "reason": "NodeShutdown"}});
        assert_eq!(pod_status(&p), "NodeShutdown");
        let p: Value = serde_json::json!({"status": {"phase": "Succeeded", "containerStatuses": [
            {"state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]}});
        assert_eq!(pod_status(&p), "Completed");
    }
}

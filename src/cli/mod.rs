//! The `podwarden` binary's commands: `run` starts the daemon (`daemon`: the
//! one wiring of every part and its threads), every other verb is a client
//! of the local API (`client`). May use every layer.
//!
//! The kubectl-like client verbs, on the local API: `get pods`, `describe pod`, `logs`, `events`, `node`, `apply`,
//! `delete pod`, `version`. Output follows kubectl (aligned tables, `-o
//! json|yaml|wide`). The pods and the node are the typed views of
//! [`crate::api::view`], as the daemon sent them; errors are [`CliError`]s, each
//! with its exit status.

pub mod client;
pub mod daemon;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, ContainerState, ContainerStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use thiserror::Error;

use crate::api::view;
use crate::cli::client::{Client, ClientError, FailureKind, default_socket};
use crate::model::{Pod, Time};

pub const VERBS: &[&str] = &["get", "describe", "logs", "events", "node", "top", "apply", "delete"];

const GET_HELP: &str = "\
Show pods, or the local ConfigMaps and Secrets (a Secret's values are never shown).

Usage:
  podwarden get pods [NAME] [-o wide|json|yaml] [-n NAMESPACE | -A] [--socket PATH]
  podwarden get configmaps|secrets [NAME] [-o json|yaml] [-n NAMESPACE | -A] [--socket PATH]

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

const TOP_HELP: &str = "\
Show what pods or the node use now, as kubectl top: CPU in millicores,
memory (working set) in MiB; the node's against its allocatable. From the
last stats snapshot (taken every housekeepingInterval).

Usage:
  podwarden top pods [-n NAMESPACE | -A] [--socket PATH]
  podwarden top node [--socket PATH]
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

/// Why a client verb failed. The CLI prints it (`podwarden: ...`) and exits
/// with [`CliError::exit_code`].
#[derive(Debug, Error)]
pub enum CliError {
    /// Bad arguments: the message names the argument and the fix.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Reading the manifest or writing the output.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("apply: {file}: manifest is over the limit of {limit} bytes")]
    TooLarge { file: String, limit: u64 },
    #[error("formatting YAML: {0}")]
    Yaml(#[source] serde_yaml_ng::Error),
    /// A named ConfigMap or Secret that does not exist (kubectl's text).
    #[error("{0}")]
    NotFound(String),
}

/// The exit statuses of `podwarden` (sysexits.h names), as the man page's
/// EXIT STATUS and `podwarden help` list them.
pub mod exit {
    /// Any other failure: a pod or container not found, an invalid
    /// manifest or argument, a file in the way (kubectl's status for these).
    pub const FAILURE: u8 = 1;
    /// EX_UNAVAILABLE: `run` cannot reach the container runtime; a client
    /// verb cannot reach the agent's API socket (or it does not answer).
    pub const UNAVAILABLE: u8 = 69;
    /// EX_SOFTWARE: a thread of `podwarden run` panicked
    /// ([`crate::base::thread::PANIC_EXIT_CODE`]).
    pub const SOFTWARE: u8 = 70;
    /// EX_NOPERM: the agent refused the caller: not root and not in
    /// `apiGroup`, the socket's mode, or a pod its Pod Security level forbids.
    pub const NOPERM: u8 = 77;
    /// EX_CONFIG: the config file cannot be read or is invalid.
    pub const CONFIG: u8 = 78;
}

impl CliError {
    /// The process's exit status for this error ([`exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Client(e) => match e.kind() {
                FailureKind::Unavailable => exit::UNAVAILABLE,
                FailureKind::Refused => exit::NOPERM,
                FailureKind::Failed => exit::FAILURE,
            },
            _ => exit::FAILURE,
        }
    }
}

type Result<T> = std::result::Result<T, CliError>;

fn usage(msg: impl Into<String>) -> CliError {
    CliError::Usage(msg.into())
}

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

fn parse(args: &[String], verb: &str) -> Result<Args> {
    let mut a = Args::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = |name: &str| -> Result<String> {
            inline.clone().or_else(|| it.next().cloned()).ok_or_else(|| usage(format!("{verb}: {name} needs a value")))
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
                a.tail =
                    Some(v.parse().map_err(|_| usage(format!("{verb}: --tail {v:?}: expected a number of lines")))?);
            }
            "--grace-period" => {
                let v = value("--grace-period")?;
                let n: i64 = v.parse().map_err(|_| usage(format!("{verb}: --grace-period {v:?}: expected seconds")))?;
                if n < 0 {
                    return Err(usage(format!("{verb}: --grace-period {n}: must not be negative")));
                }
                a.grace = Some(n);
            }
            s if s.starts_with('-') && s != "-" => {
                return Err(usage(format!("{verb}: unknown flag {s:?} (see podwarden {verb} --help)")));
            }
            _ => a.rest.push(arg.clone()),
        }
    }
    Ok(a)
}

impl Args {
    fn client(&self) -> Result<Client> {
        Ok(Client::connect(&self.socket.clone().unwrap_or_else(default_socket))?)
    }

    fn ns(&self) -> String {
        self.namespace.clone().unwrap_or_else(|| "default".into())
    }

    fn output(&self, allowed: &[&str], verb: &str) -> Result<&str> {
        match self.output.as_deref() {
            None => Ok(""),
            Some(o) if allowed.contains(&o) => Ok(o),
            Some(o) => Err(usage(format!("{verb}: output format {o:?} is not supported (use {})", allowed.join(", ")))),
        }
    }

    /// The single resource name after an optional kind word (`pod`, `pods`, `po`).
    fn kind_and_name(&self, verb: &str, need_name: bool) -> Result<Option<String>> {
        let mut rest = self.rest.iter();
        match rest.next().map(String::as_str) {
            Some("pod" | "pods" | "po") => {}
            Some(other) => return Err(usage(format!("{verb}: podwarden knows only pods, not {other:?}"))),
            None => {
                return Err(usage(format!(
                    "{verb}: name the kind: {verb} pod{}",
                    if need_name { " NAME" } else { "s" }
                )));
            }
        }
        let name = rest.next().cloned();
        if let Some(extra) = rest.next() {
            return Err(usage(format!("{verb}: unexpected argument {extra:?}")));
        }
        if need_name && name.is_none() {
            return Err(usage(format!("{verb}: name the pod: {verb} pod NAME")));
        }
        Ok(name)
    }
}

/// Run a client verb. `args` are the words after the verb.
pub fn run(verb: &str, args: &[String]) -> Result<()> {
    let a = parse(args, verb)?;
    let help = match verb {
        "get" => GET_HELP,
        "describe" => DESCRIBE_HELP,
        "logs" => LOGS_HELP,
        "events" => EVENTS_HELP,
        "node" => NODE_HELP,
        "top" => TOP_HELP,
        "apply" => APPLY_HELP,
        "delete" => DELETE_HELP,
        "version" => VERSION_HELP,
        _ => return Err(usage(format!("unknown command {verb:?}"))),
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
        "top" => top(&a)?,
        "apply" => apply(&a)?,
        "delete" => delete(&a)?,
        _ => version(&a)?,
    };
    out.write_all(text.as_bytes()).map_err(writing)
}

fn writing(source: std::io::Error) -> CliError {
    CliError::Io { what: "writing output".into(), source }
}

fn yaml_text<T: serde::Serialize>(v: &T) -> Result<String> {
    view::to_yaml(v).map_err(CliError::Yaml)
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

/// The age of a time the daemon sent as text (an event's), else `<unknown>`.
fn since_text(t: &str) -> String {
    t.parse::<k8s_openapi::jiff::Timestamp>().ok().map(Time).as_ref().map_or_else(|| "<unknown>".into(), since)
}

/// The age of `t`, else `<unknown>` (in the future).
fn since(t: &Time) -> String {
    view::age_of(t).map_or_else(|| "<unknown>".into(), age)
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

/// A pod's container statuses (none before its first status).
fn container_statuses(p: &Pod) -> &[ContainerStatus] {
    p.status.as_ref().and_then(|s| s.container_statuses.as_deref()).unwrap_or_default()
}

/// A pod's containers.
fn containers(p: &Pod) -> &[Container] {
    p.spec.as_ref().map_or(&[], |s| &s.containers)
}

/// The STATUS column as kubectl computes it.
pub fn pod_status(p: &Pod) -> String {
    pod_summary(p).status
}

/// What `get pods` shows of a pod: READY (`ready`/`total`), STATUS and
/// RESTARTS, as kubectl's printPod computes them. Init containers first:
/// the first one not done decides the STATUS (`Init:1/2`,
/// `Init:CrashLoopBackOff`, `Init:Error`); sidecars count in READY. Then,
/// once initialized, the app containers: the first one (in spec order)
/// waiting or terminated with a reason decides.
struct Summary {
    ready: usize,
    total: usize,
    status: String,
    restarts: i64,
}

fn pod_summary(p: &Pod) -> Summary {
    let st = p.status.as_ref();
    let mut reason =
        st.and_then(|s| s.reason.clone().or_else(|| s.phase.clone())).unwrap_or_else(|| "Unknown".to_string());
    let inits = p.spec.as_ref().and_then(|s| s.init_containers.as_deref()).unwrap_or_default();
    let sidecar = |name: &str| inits.iter().any(|c| c.name == name && crate::model::is_sidecar(c));
    let total = containers(p).len() + inits.iter().filter(|c| crate::model::is_sidecar(c)).count();
    let mut ready = 0;
    let mut restarts: i64 = 0;
    let terminated_text = |t: &k8s_openapi::api::core::v1::ContainerStateTerminated| match t
        .reason
        .as_deref()
        .filter(|r| !r.is_empty())
    {
        Some(r) => r.to_string(),
        None => match t.signal.filter(|s| *s != 0) {
            Some(s) => format!("Signal:{s}"),
            None => format!("ExitCode:{}", t.exit_code),
        },
    };
    let init_statuses = st.and_then(|s| s.init_container_statuses.as_deref()).unwrap_or_default();
    let mut initializing = false;
    for (i, c) in init_statuses.iter().enumerate() {
        restarts += i64::from(c.restart_count);
        let state = c.state.as_ref();
        let terminated = state.and_then(|s| s.terminated.as_ref());
        let waiting = state.and_then(|s| s.waiting.as_ref()).and_then(|w| w.reason.as_deref()).unwrap_or("");
        if terminated.is_some_and(|t| t.exit_code == 0) {
            continue;
        }
        if sidecar(&c.name) && c.started == Some(true) {
            if c.ready {
                ready += 1;
            }
            continue;
        }
        initializing = true;
        reason = if let Some(t) = terminated {
            format!("Init:{}", terminated_text(t))
        } else if !waiting.is_empty() && waiting != "PodInitializing" {
            format!("Init:{waiting}")
        } else {
            format!("Init:{i}/{}", inits.len())
        };
        break;
    }
    let initialized = st
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Initialized" && c.status == "True"));
    if !initializing || initialized {
        // regular init containers' restarts no longer count
        restarts = init_statuses.iter().filter(|c| sidecar(&c.name)).map(|c| i64::from(c.restart_count)).sum();
        let mut running = false;
        for c in container_statuses(p).iter().rev() {
            restarts += i64::from(c.restart_count);
            let state = c.state.as_ref();
            if let Some(r) = state.and_then(|s| s.waiting.as_ref()?.reason.clone()).filter(|r| !r.is_empty()) {
                reason = r;
            } else if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
                reason = terminated_text(t);
            } else if c.ready && state.is_some_and(|s| s.running.is_some()) {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            let pod_ready = st
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    }
    if p.metadata.deletion_timestamp.is_some() {
        reason = "Terminating".into();
    }
    Summary { ready, total, status: reason, restarts }
}

/// The READY, STATUS and RESTARTS columns of `get pods` for `p`.
pub fn pod_columns(p: &Pod) -> (String, String, i64) {
    let s = pod_summary(p);
    (format!("{}/{}", s.ready, s.total), s.status, s.restarts)
}

fn pod_row(p: &Pod, wide: bool, with_ns: bool) -> Vec<String> {
    let sum = pod_summary(p);
    let st = p.status.as_ref();
    let mut row = Vec::new();
    if with_ns {
        row.push(p.metadata.namespace.clone().unwrap_or_default());
    }
    row.extend([
        p.metadata.name.clone().unwrap_or_default(),
        format!("{}/{}", sum.ready, sum.total),
        sum.status,
        sum.restarts.to_string(),
        st.and_then(|s| s.start_time.as_ref()).map_or_else(|| "<unknown>".into(), since),
    ]);
    if wide {
        row.push(st.and_then(|s| s.pod_ip.clone()).unwrap_or_else(|| "<none>".into()));
        row.push(p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_else(|| "<none>".into()));
    }
    row
}

/// `get configmaps|secrets`: NAME, (TYPE,) DATA and the file each comes
/// from; a Secret's values never reach the client.
fn get_objects(a: &Args, kind: &str) -> Result<String> {
    let mut rest = a.rest.iter().skip(1);
    let name = rest.next().cloned();
    if let Some(extra) = rest.next() {
        return Err(usage(format!("get: unexpected argument {extra:?}")));
    }
    let fmt = a.output(&["json", "yaml"], "get")?;
    let ns = if a.all { String::new() } else { a.ns() };
    let mut list = a.client()?.list_objects(kind, &ns)?;
    if let Some(name) = &name {
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let Some(one) = items.into_iter().find(|o| o["metadata"]["name"] == name.as_str()) else {
            let resource = if kind == "Secret" { "secrets" } else { "configmaps" };
            return Err(CliError::NotFound(format!("{resource} \"{name}\" not found")));
        };
        list = one;
    }
    match fmt {
        "json" => Ok(format!("{}\n", serde_json::to_string_pretty(&list).unwrap_or_default())),
        "yaml" => yaml_text(&list),
        _ => {
            let items: Vec<serde_json::Value> = match list["items"].as_array() {
                Some(items) => items.clone(),
                None => vec![list.clone()],
            };
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
            head.push("NAME");
            if kind == "Secret" {
                head.push("TYPE");
            }
            head.extend(["DATA", "FILE"]);
            let mut rows = vec![head.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
            for o in &items {
                let text = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
                let count = |v: &serde_json::Value| v.as_object().map_or(0, |m| m.len());
                let mut row = Vec::new();
                if a.all {
                    row.push(text(&o["metadata"]["namespace"]));
                }
                row.push(text(&o["metadata"]["name"]));
                if kind == "Secret" {
                    row.push(text(&o["type"]));
                }
                row.push((count(&o["data"]) + count(&o["binaryData"])).to_string());
                row.push(text(&o["metadata"]["annotations"][crate::model::CONFIG_FILE_ANNOTATION]));
                rows.push(row);
            }
            Ok(table(&rows))
        }
    }
}

fn get(a: &Args) -> Result<String> {
    match a.rest.first().map(String::as_str) {
        Some("configmaps" | "configmap" | "cm") => return get_objects(a, "ConfigMap"),
        Some("secrets" | "secret") => return get_objects(a, "Secret"),
        _ => {}
    }
    let name = a.kind_and_name("get", false)?;
    let fmt = a.output(&["wide", "json", "yaml"], "get")?;
    let c = a.client()?;
    if let Some(name) = name {
        let (pod, _) = c.get_pod(&a.ns(), &name)?;
        return match fmt {
            "json" => Ok(view::to_json_pretty(&pod)),
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
        "json" => Ok(view::to_json_pretty(&list)),
        "yaml" => yaml_text(&list),
        _ => {
            if list.items.is_empty() {
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
            rows.extend(list.items.iter().map(|p| pod_row(p, fmt == "wide", a.all)));
            Ok(table(&rows))
        }
    }
}

fn kv_map(m: Option<&BTreeMap<String, String>>) -> String {
    match m {
        Some(m) if !m.is_empty() => {
            m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("\n              ")
        }
        _ => "<none>".into(),
    }
}

/// A container state as `kubectl describe` shows it; `<none>` when unset.
/// A probe as `kubectl describe` shows it: the handler, then the timing.
fn probe_text(p: &k8s_openapi::api::core::v1::Probe) -> String {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let port = |p: &IntOrString| match p {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => s.clone(),
    };
    let handler = if let Some(e) = &p.exec {
        format!("exec [{}]", e.command.clone().unwrap_or_default().join(" "))
    } else if let Some(h) = &p.http_get {
        format!(
            "http-get {}://{}:{}{}",
            h.scheme.as_deref().unwrap_or("HTTP").to_lowercase(),
            h.host.as_deref().unwrap_or(""),
            port(&h.port),
            h.path.as_deref().unwrap_or("")
        )
    } else if let Some(t) = &p.tcp_socket {
        format!("tcp-socket {}:{}", t.host.as_deref().unwrap_or(""), port(&t.port))
    } else {
        "unknown".to_string()
    };
    let t = crate::pod::prober::Timing::of(p);
    format!(
        "{handler} delay={}s timeout={}s period={}s #success={} #failure={}",
        t.initial_delay.as_secs(),
        t.timeout.as_secs(),
        t.period.as_secs(),
        t.success_threshold,
        t.failure_threshold
    )
}

fn state_text(s: Option<&ContainerState>, indent: &str) -> String {
    let Some(s) = s else { return "<none>".into() };
    let time = |t: &Option<Time>| t.as_ref().map(view::time_text);
    // (name, reason, message, exit code, started, finished)
    let (name, reason, message, exit_code, started, finished) = if let Some(r) = &s.running {
        ("Running", None, None, None, time(&r.started_at), None)
    } else if let Some(t) = &s.terminated {
        (
            "Terminated",
            t.reason.clone(),
            t.message.clone(),
            Some(t.exit_code),
            time(&t.started_at),
            time(&t.finished_at),
        )
    } else if let Some(w) = &s.waiting {
        ("Waiting", w.reason.clone(), w.message.clone(), None, None, None)
    } else {
        return "<none>".into();
    };
    let mut out = name.to_string();
    for (label, v) in [
        ("Reason", reason),
        ("Message", message),
        ("Exit Code", exit_code.map(|c| c.to_string())),
        ("Started", started),
        ("Finished", finished),
    ] {
        if let Some(v) = v {
            out.push_str(&format!("\n{indent}  {:<14}{v}", format!("{label}:")));
        }
    }
    out
}

/// A state with something in it (`lastState` is `{}` until a restart).
fn state_is_set(s: Option<&ContainerState>) -> bool {
    s.is_some_and(|s| s.running.is_some() || s.terminated.is_some() || s.waiting.is_some())
}

/// A lifecycle hook as `describe` shows it.
fn hook_text(h: &k8s_openapi::api::core::v1::LifecycleHandler) -> String {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    if let Some(e) = &h.exec {
        format!("exec [{}]", e.command.clone().unwrap_or_default().join(" "))
    } else if let Some(g) = &h.http_get {
        let port = match &g.port {
            IntOrString::Int(n) => n.to_string(),
            IntOrString::String(s) => s.clone(),
        };
        format!(
            "http-get {}://{}:{port}{}",
            g.scheme.as_deref().unwrap_or("HTTP").to_lowercase(),
            g.host.as_deref().unwrap_or(""),
            g.path.as_deref().unwrap_or("")
        )
    } else if let Some(s) = &h.sleep {
        format!("sleep {}s", s.seconds)
    } else {
        "unknown".to_string()
    }
}

/// One container's part of `describe pod`: its status, probes, hooks and
/// its last failed probe (from the events, which name the container).
fn describe_container(
    out: &mut String,
    ctr: &Container,
    statuses: &[ContainerStatus],
    events: &[crate::api::pb::api::Event],
) {
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    let cs = statuses.iter().find(|c| c.name == ctr.name).cloned().unwrap_or_default();
    out.push_str(&format!("  {}:\n", ctr.name));
    let mut cl = |k: &str, v: String| out.push_str(&format!("    {:<15} {v}\n", format!("{k}:")));
    cl("Container ID", s(&cs.container_id));
    cl("Image", s(&ctr.image));
    cl("Image ID", cs.image_id.clone());
    if let Some(cmd) = &ctr.command {
        cl("Command", cmd.join(" "));
    }
    if let Some(p) = &ctr.restart_policy {
        cl("Restart Policy", p.clone());
    }
    cl("State", state_text(cs.state.as_ref(), "    "));
    if state_is_set(cs.last_state.as_ref()) {
        cl("Last State", state_text(cs.last_state.as_ref(), "    "));
    }
    cl("Ready", if cs.ready { "True".into() } else { "False".into() });
    cl("Restart Count", cs.restart_count.to_string());
    for (label, probe) in
        [("Liveness", &ctr.liveness_probe), ("Readiness", &ctr.readiness_probe), ("Startup", &ctr.startup_probe)]
    {
        if let Some(p) = probe {
            cl(label, probe_text(p));
        }
    }
    if let Some(l) = &ctr.lifecycle {
        if let Some(h) = &l.post_start {
            cl("Post Start Hook", hook_text(h));
        }
        if let Some(h) = &l.pre_stop {
            cl("Pre Stop Hook", hook_text(h));
        }
    }
    let suffix = format!("{{{}}}", ctr.name);
    if let Some(e) = events.iter().rev().find(|e| e.reason == "Unhealthy" && e.field_path.ends_with(&suffix)) {
        cl("Last Probe Failure", format!("{} ({} ago)", e.message, since_text(&e.time)));
    }
}

fn describe(a: &Args) -> Result<String> {
    let name = a.kind_and_name("describe", true)?.unwrap_or_default();
    let c = a.client()?;
    let (p, manifest) = c.get_pod(&a.ns(), &name)?;
    let events = c.events(Some((&a.ns(), &name)))?;
    let m = &p.metadata;
    let spec = p.spec.clone().unwrap_or_default();
    let st = p.status.clone().unwrap_or_default();
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{:<14}{v}\n", format!("{k}:")));
    line("Name", s(&m.name));
    line("Namespace", s(&m.namespace));
    line("UID", s(&m.uid));
    line("Priority", spec.priority.unwrap_or(0).to_string());
    if let Some(pc) = &spec.priority_class_name {
        line("Priority Class", pc.clone());
    }
    line("Manifest", manifest);
    line("Start Time", st.start_time.as_ref().map_or_else(|| "<unset>".into(), view::time_text));
    line("Labels", kv_map(m.labels.as_ref()));
    line("Status", pod_status(&p));
    if let Some(r) = &st.reason {
        line("Reason", r.clone());
    }
    if let Some(msg) = &st.message {
        line("Message", msg.clone());
    }
    line("IP", s(&st.pod_ip));
    line("Grace Period", format!("{}s", spec.termination_grace_period_seconds.unwrap_or(30)));
    let inits = spec.init_containers.clone().unwrap_or_default();
    if !inits.is_empty() {
        out.push_str("Init Containers:\n");
        let statuses = st.init_container_statuses.clone().unwrap_or_default();
        for ctr in &inits {
            describe_container(&mut out, ctr, &statuses, &events);
        }
    }
    out.push_str("Containers:\n");
    let statuses = st.container_statuses.clone().unwrap_or_default();
    for ctr in &spec.containers {
        describe_container(&mut out, ctr, &statuses, &events);
    }
    out.push_str("Conditions:\n");
    let mut rows = vec![vec!["  Type".to_string(), "Status".to_string()]];
    for cond in st.conditions.iter().flatten() {
        rows.push(vec![format!("  {}", cond.type_), cond.status.clone()]);
    }
    out.push_str(&table(&rows));
    out.push_str(&format!("{:<14}{}\n", "QoS Class:", s(&st.qos_class)));
    if events.is_empty() {
        out.push_str("Events:       <none>\n");
    } else {
        out.push_str("Events:\n");
        let mut rows = vec![["  Type", "Reason", "Age", "Message"].iter().map(|s| s.to_string()).collect::<Vec<_>>()];
        for e in &events {
            rows.push(vec![format!("  {}", e.type_), e.reason.clone(), since_text(&e.time), e.message.clone()]);
        }
        out.push_str(&table(&rows));
    }
    Ok(out)
}

fn logs(a: &Args, out: &mut impl Write) -> Result<()> {
    let name = match a.rest.as_slice() {
        [n] => n.clone(),
        [] => return Err(usage("logs: name the pod: podwarden logs POD [-c CONTAINER]")),
        [_, extra, ..] => return Err(usage(format!("logs: unexpected argument {extra:?}"))),
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
    let mut failures = 0;
    loop {
        let r = match c.logs(&req) {
            Ok(r) => r,
            // followed to the end: the pod (or its log) went away
            Err(ClientError::Call(grpcio::Error::RpcFailure(s)))
                if !first && s.code() == grpcio::RpcStatusCode::NOT_FOUND =>
            {
                return Ok(());
            }
            // anything else while following (a file rotated away between
            // listing and reading, a restart of the daemon): try again a
            // few times before giving up with the error
            Err(_) if !first && failures < 10 => {
                failures += 1;
                std::thread::sleep(Duration::from_millis(250));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        failures = 0;
        first = false;
        out.write_all(&r.data).and_then(|()| out.flush()).map_err(writing)?;
        // the cursor moved: read on (across rotated files too)
        let more = (&r.next_file, &r.next_first_time, r.next_offset) != (&req.file, &req.first_time, req.offset);
        req.file = r.next_file;
        req.first_time = r.next_first_time;
        req.last_time = r.next_last_time;
        req.offset = r.next_offset;
        req.tail_lines = 0;
        // without -f: everything there is now; with -f: on while the
        // container runs
        if !more && (!a.follow || !r.running) {
            return Ok(());
        }
        if !more {
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// One event as `events -o json` prints it.
#[derive(serde::Serialize)]
struct EventView<'a> {
    time: &'a str,
    #[serde(rename = "type")]
    type_: &'a str,
    reason: &'a str,
    object: &'a str,
    uid: &'a str,
    message: &'a str,
}

fn events(a: &Args) -> Result<String> {
    let fmt = a.output(&["json"], "events")?;
    let c = a.client()?;
    let mut evs = c.events(None)?;
    if let Some(ns) = a.namespace.as_ref().filter(|_| !a.all) {
        evs.retain(|e| e.object.starts_with(&format!("pod/{ns}/")));
    }
    if fmt == "json" {
        let items: Vec<EventView> = evs
            .iter()
            .map(|e| EventView {
                time: &e.time,
                type_: &e.type_,
                reason: &e.reason,
                object: &e.object,
                uid: &e.uid,
                message: &e.message,
            })
            .collect();
        return Ok(view::to_json_pretty(&items));
    }
    if evs.is_empty() {
        return Ok("No events found.\n".into());
    }
    let mut rows =
        vec![["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"].iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for e in &evs {
        rows.push(vec![since_text(&e.time), e.type_.clone(), e.reason.clone(), e.object.clone(), e.message.clone()]);
    }
    Ok(table(&rows))
}

fn node(a: &Args) -> Result<String> {
    let fmt = a.output(&["json", "yaml"], "node")?;
    let r = a.client()?.node()?;
    match fmt {
        "json" => return Ok(view::to_json_pretty(&r)),
        "yaml" => return yaml_text(&r),
        _ => {}
    }
    let (n, gs) = (&r.node, &r.graceful_shutdown);
    let status = n.status.clone().unwrap_or_default();
    let info = status.node_info.clone().unwrap_or_default();
    let res = |cpu: &str, memory: &str, pods: &str| format!("cpu {cpu}, memory {memory}, pods {pods}");
    let quantities = |m: &Option<BTreeMap<String, Quantity>>| {
        let q = |k: &str| m.as_ref().and_then(|m| m.get(k)).map_or("", |q| q.0.as_str()).to_string();
        res(&q("cpu"), &q("memory"), &q("pods"))
    };
    let cond = status.conditions.as_ref().and_then(|c| c.first()).cloned().unwrap_or_default();
    let shutdown = if !gs.configured {
        "not configured (shutdownGracePeriod is 0)".to_string()
    } else if let Some(p) = &gs.problem {
        format!("off: {p}")
    } else if gs.inhibitor_lock_held {
        "enabled (inhibitor lock held)".to_string()
    } else {
        "enabled".to_string()
    };
    let last = match (&gs.last_start_time, &gs.last_end_time) {
        (Some(s), Some(e)) => format!("{s} to {e}"),
        (Some(s), None) => format!("{s} (still running)"),
        _ => "never".into(),
    };
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    let pressure: Vec<String> = status
        .conditions
        .iter()
        .flatten()
        .filter(|c| c.type_ != "Ready" && c.status == "True")
        .map(|c| format!("{} ({})", c.type_, s(&c.message)))
        .collect();
    let rows = [
        ("Name", s(&n.metadata.name)),
        ("Ready", format!("{} ({}: {})", cond.status, s(&cond.reason), s(&cond.message))),
        ("Pressure", if pressure.is_empty() { "none".into() } else { pressure.join(", ") }),
        ("Runtime", info.container_runtime_version.clone()),
        ("Agent", info.kubelet_version.clone()),
        ("OS", format!("{} ({})", info.os_image, info.kernel_version)),
        ("Capacity", quantities(&status.capacity)),
        ("Allocatable", quantities(&status.allocatable)),
        ("Allocated", res(&r.allocated.cpu, &r.allocated.memory, &r.allocated.pods)),
        ("Graceful shutdown", shutdown),
        ("Shutting down", if gs.shutting_down { "yes".into() } else { "no".into() }),
        ("Last shutdown", last),
    ];
    Ok(rows.iter().map(|(k, v)| format!("{:<19}{v}\n", format!("{k}:"))).collect())
}

fn top(a: &Args) -> Result<String> {
    let what = match a.rest.as_slice() {
        [w] if w == "pods" || w == "pod" || w == "po" => "pods",
        [w] if w == "node" || w == "nodes" || w == "no" => "node",
        _ => return Err(usage("top: name what: podwarden top pods|node")),
    };
    let c = a.client()?;
    let s = c.stats()?;
    let millis = |v: &serde_json::Value| v["usageNanoCores"].as_u64().unwrap_or(0) / 1_000_000;
    let mib = |v: &serde_json::Value| v["workingSetBytes"].as_u64().unwrap_or(0) / (1024 * 1024);
    if what == "node" {
        let r = c.node()?;
        let alloc = r.node.status.and_then(|s| s.allocatable).unwrap_or_default();
        let q = |k: &str, f: fn(&str) -> i64| alloc.get(k).map_or(0, |q| f(&q.0));
        let (cpu_alloc, mem_alloc) = (
            q("cpu", |s| crate::model::quantity::cpu_millis(s).unwrap_or(0)),
            q("memory", |s| crate::model::quantity::bytes(s).unwrap_or(0)),
        );
        let n = &s["node"];
        let (cpu, mem) = (millis(&n["cpu"]), mib(&n["memory"]));
        let pct = |used: u64, of: i64| if of > 0 { format!("{}%", used as i64 * 100 / of) } else { "<unknown>".into() };
        let rows = vec![
            vec!["NAME".into(), "CPU(cores)".into(), "CPU(%)".into(), "MEMORY(bytes)".into(), "MEMORY(%)".into()],
            vec![
                n["nodeName"].as_str().unwrap_or("").to_string(),
                format!("{cpu}m"),
                pct(cpu, cpu_alloc),
                format!("{mem}Mi"),
                pct(mem * 1024 * 1024, mem_alloc),
            ],
        ];
        return Ok(table(&rows));
    }
    let ns = a.ns();
    let mut rows = vec![
        if a.all {
            vec!["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"]
        } else {
            vec!["NAME", "CPU(cores)", "MEMORY(bytes)"]
        }
        .into_iter()
        .map(String::from)
        .collect::<Vec<String>>(),
    ];
    let mut pods: Vec<&serde_json::Value> = s["pods"]
        .as_array()
        .map(|p| p.iter().filter(|p| a.all || p["podRef"]["namespace"] == ns.as_str()).collect())
        .unwrap_or_default();
    pods.sort_by_key(|p| (p["podRef"]["namespace"].as_str().unwrap_or(""), p["podRef"]["name"].as_str().unwrap_or("")));
    if pods.is_empty() {
        return Err(CliError::NotFound(if a.all {
            "No resources found".into()
        } else {
            format!("No resources found in {ns} namespace.")
        }));
    }
    for p in pods {
        let mut row = Vec::new();
        if a.all {
            row.push(p["podRef"]["namespace"].as_str().unwrap_or("").to_string());
        }
        row.push(p["podRef"]["name"].as_str().unwrap_or("").to_string());
        row.push(format!("{}m", millis(&p["cpu"])));
        row.push(format!("{}Mi", mib(&p["memory"])));
        rows.push(row);
    }
    Ok(table(&rows))
}

fn apply(a: &Args) -> Result<String> {
    let file =
        a.file.clone().ok_or_else(|| usage("apply: name the manifest with -f FILE (or -f - for standard input)"))?;
    if let Some(extra) = a.rest.first() {
        return Err(usage(format!("apply: unexpected argument {extra:?}")));
    }
    // at most one byte over the daemon's limit: it names the limit, and
    // `-f /dev/zero` cannot fill this process
    let max = crate::model::manifest::MAX_MANIFEST_BYTES + 1;
    let mut bytes = Vec::new();
    if file == "-" {
        std::io::stdin()
            .take(max)
            .read_to_end(&mut bytes)
            .map_err(|source| CliError::Io { what: "apply: reading standard input".into(), source })?;
    } else {
        std::fs::File::open(&file)
            .and_then(|f| f.take(max).read_to_end(&mut bytes))
            .map_err(|source| CliError::Io { what: format!("apply: {file}"), source })?;
    }
    if bytes.len() as u64 >= max {
        return Err(CliError::TooLarge { file, limit: max - 1 });
    }
    let r = a.client()?.apply(bytes, &file)?;
    // kubectl's form: fields the daemon does not know, on stderr
    for w in &r.warnings {
        eprintln!("Warning: {w}");
    }
    Ok(format!("pod/{} {}\n", r.name, r.result))
}

fn delete(a: &Args) -> Result<String> {
    let name = a.kind_and_name("delete", true)?.unwrap_or_default();
    a.client()?.delete(&a.ns(), &name, a.grace)?;
    Ok(format!("pod \"{name}\" deleted\n"))
}

fn version(a: &Args) -> Result<String> {
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
        let pod = |v: serde_json::Value| -> Pod { serde_json::from_value(v).unwrap() };
        let p = pod(serde_json::json!({"status": {"phase": "Running", "containerStatuses": [
            {"state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}));
        assert_eq!(pod_status(&p), "CrashLoopBackOff");
        let p = pod(serde_json::json!({"status": {"phase": "Failed", "reason": "NodeShutdown"}}));
        assert_eq!(pod_status(&p), "NodeShutdown");
        let p = pod(serde_json::json!({"status": {"phase": "Succeeded", "containerStatuses": [
            {"state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]}}));
        assert_eq!(pod_status(&p), "Completed");
        let p = pod(serde_json::json!({"status": {"phase": "Running", "containerStatuses": [
            {"state": {"terminated": {"exitCode": 0, "signal": 9}}}]}}));
        assert_eq!(pod_status(&p), "Signal:9");
        let p = pod(serde_json::json!({"status": {"phase": "Running", "containerStatuses": [
            {"state": {"terminated": {"exitCode": 3}}}]}}));
        assert_eq!(pod_status(&p), "ExitCode:3");
        let p = pod(serde_json::json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Running"}}));
        assert_eq!(pod_status(&p), "Terminating");
        assert_eq!(pod_status(&pod(serde_json::json!({}))), "Unknown");
    }

    #[test]
    fn container_states_read_like_kubectl_describe() {
        let state = |v: serde_json::Value| -> ContainerState { serde_json::from_value(v).unwrap() };
        assert_eq!(state_text(None, "  "), "<none>");
        assert_eq!(state_text(Some(&state(serde_json::json!({}))), "  "), "<none>");
        assert!(!state_is_set(Some(&state(serde_json::json!({})))));
        let s = state(serde_json::json!({"terminated": {"reason": "Error", "exitCode": 2,
            "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:05Z"}}));
        assert_eq!(
            state_text(Some(&s), "  "),
            "Terminated\n    Reason:       Error\n    Exit Code:    2\n    Started:      2026-01-01T00:00:00Z\n    \
             Finished:     2026-01-01T00:00:05Z"
        );
        let s = state(serde_json::json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}));
        assert_eq!(state_text(Some(&s), ""), "Waiting\n  Reason:       CrashLoopBackOff\n  Message:      back-off");
    }

    #[test]
    fn exit_codes_by_kind_of_failure() {
        let rpc = |code| CliError::Client(ClientError::Call(grpcio::Error::RpcFailure(grpcio::RpcStatus::new(code))));
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(CliError::Usage("x".into()).exit_code(), 1);
        assert_eq!(CliError::Client(ClientError::NoSocket { socket: "s".into(), source: io() }).exit_code(), 69);
        assert_eq!(CliError::Client(ClientError::NotListening { socket: "s".into(), source: io() }).exit_code(), 69);
        assert_eq!(
            CliError::Client(ClientError::SocketPermission { socket: "s".into(), source: io() }).exit_code(),
            77
        );
        assert_eq!(CliError::Client(ClientError::Refused { reason: "r".into() }).exit_code(), 77);
        assert_eq!(rpc(grpcio::RpcStatusCode::PERMISSION_DENIED).exit_code(), 77);
        assert_eq!(rpc(grpcio::RpcStatusCode::UNAVAILABLE).exit_code(), 69);
        assert_eq!(rpc(grpcio::RpcStatusCode::DEADLINE_EXCEEDED).exit_code(), 69);
        assert_eq!(rpc(grpcio::RpcStatusCode::NOT_FOUND).exit_code(), 1, "kubectl's status for not found");
        assert_eq!(rpc(grpcio::RpcStatusCode::INVALID_ARGUMENT).exit_code(), 1);
        assert_eq!(rpc(grpcio::RpcStatusCode::ALREADY_EXISTS).exit_code(), 1);
        assert_eq!(rpc(grpcio::RpcStatusCode::INTERNAL).exit_code(), 1);
    }
}

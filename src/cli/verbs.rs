//! The client verbs but `describe`: `get`, `logs`, `events`, `node`,
//! `top`, `apply`, `delete`, `version`, each returning its output (`logs`
//! writes it as it reads).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::view;
use crate::cli::args::Args;
use crate::cli::client::ClientError;
use crate::cli::error::{CliError, Result, usage, writing};
use crate::cli::output::{pod_row, since_text, table, yaml_text};

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
                return Ok(format!("{}\n", a.no_resources()));
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

pub(super) fn get(a: &Args) -> Result<String> {
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
                return Ok(format!("{}\n", a.no_resources()));
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

pub(super) fn logs(a: &Args, out: &mut impl Write) -> Result<()> {
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
    let mut stopped_seen = false;
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
        // container runs, and once it has stopped, until a second look
        // 250 ms later finds nothing more either (a rotation in progress
        // can hide the next file for a moment: the follower would end
        // before the container's last lines)
        if !more && !a.follow {
            return Ok(());
        }
        if !more && !r.running {
            if stopped_seen {
                return Ok(());
            }
            stopped_seen = true;
        } else {
            stopped_seen = false;
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

pub(super) fn events(a: &Args) -> Result<String> {
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

pub(super) fn node(a: &Args) -> Result<String> {
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
        .filter(|c| c.type_.ends_with("Pressure") && c.status == "True")
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

pub(super) fn top(a: &Args) -> Result<String> {
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
        return Err(CliError::NotFound(a.no_resources()));
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

pub(super) fn apply(a: &Args) -> Result<String> {
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

pub(super) fn delete(a: &Args) -> Result<String> {
    let name = a.kind_and_name("delete", true)?.unwrap_or_default();
    a.client()?.delete(&a.ns(), &name, a.grace)?;
    Ok(format!("pod \"{name}\" deleted\n"))
}

pub(super) fn version(a: &Args) -> Result<String> {
    // the client's version shows even when the daemon cannot be reached
    println!("Client Version: podwarden {}", env!("CARGO_PKG_VERSION"));
    let v = a.client()?.version()?;
    Ok(format!(
        "Server Version: podwarden {}\nRuntime Version: {} (CRI {})\n",
        v.version, v.runtime_version, v.cri_api_version
    ))
}

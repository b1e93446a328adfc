//! The read side of the node's Kubernetes API (authorization is the
//! caller's, `routes`, except for nodes and metrics, whose rule depends
//! on the path): lists (selectors, `limit`/`continue`, Tables) and gets of
//! the resources the watch hub holds, their watches (a chunked stream of
//! events, bookmarks, `ERROR` when the watcher fell behind), the Node
//! and `metrics.k8s.io`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::api::status::{ApiError, Res};
use crate::config::api_authz::Right;

use super::authz::User;
use super::ctx::Ctx;
use super::resources;
use super::select::{Filter, Selector};
use super::table::{self, Printer};
use super::watch::{self, Kind, Next, Stored};
use super::wire::{ChunkSink, Reply, Request};

/// A resource the API serves from the hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource {
    pub name: &'static str,
    pub kind: Kind,
    pub printer: Printer,
    pub list_kind: &'static str,
    pub fields: &'static [&'static str],
    pub right: Right,
    pub namespaced: bool,
}

const META_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];
const POD_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];
const EVENT_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

const RESOURCES: &[Resource] = &[
    Resource {
        name: "pods",
        kind: Kind::Pods,
        printer: Printer::Pods,
        list_kind: "PodList",
        fields: POD_FIELDS,
        right: Right::Read,
        namespaced: true,
    },
    Resource {
        name: "events",
        kind: Kind::Events,
        printer: Printer::Events,
        list_kind: "EventList",
        fields: EVENT_FIELDS,
        right: Right::Read,
        namespaced: true,
    },
    Resource {
        name: "configmaps",
        kind: Kind::ConfigMaps,
        printer: Printer::ConfigMaps,
        list_kind: "ConfigMapList",
        fields: META_FIELDS,
        right: Right::Read,
        namespaced: true,
    },
    Resource {
        name: "secrets",
        kind: Kind::Secrets,
        printer: Printer::Secrets,
        list_kind: "SecretList",
        fields: &["metadata.name", "metadata.namespace", "type"],
        right: Right::Secrets,
        namespaced: true,
    },
    Resource {
        name: "namespaces",
        kind: Kind::Namespaces,
        printer: Printer::Namespaces,
        list_kind: "NamespaceList",
        fields: &["metadata.name", "status.phase"],
        right: Right::Read,
        namespaced: false,
    },
];

/// The resource of that name the API serves.
pub fn resource(name: &str) -> Option<Resource> {
    RESOURCES.iter().find(|r| r.name == name).copied()
}

fn filter(req: &Request, fields: &[&str]) -> Res<Filter> {
    Ok(Filter {
        labels: Selector::labels(req.query.get("labelSelector").unwrap_or(""))?,
        fields: Selector::fields(req.query.get("fieldSelector").unwrap_or(""), fields)?,
    })
}

fn ns_matches(obj: &Value, ns: Option<&str>) -> bool {
    ns.is_none_or(|ns| obj.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns))
}

/// A list of `r` (in `ns`, or all), JSON or a Table.
pub fn list(ctx: &Ctx, req: &Request, r: Resource, ns: Option<&str>) -> Res<Reply> {
    let f = filter(req, r.fields)?;
    let (rv, items) = ctx.hub.list(r.kind);
    // selectors read the object (parsed: a list with one is rare); the
    // namespace is kept beside it
    let mut items: Vec<&Stored> =
        items.iter().map(|o| &**o).filter(|o| o.in_namespace(ns) && (f.is_empty() || f.matches(&o.value()))).collect();
    let offset: usize = req.query.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
    let limit = req.query.int("limit")?.filter(|l| *l > 0).map(|l| l as usize);
    items = items.into_iter().skip(offset).collect();
    let mut cont = None;
    if let Some(l) = limit
        && items.len() > l
    {
        items.truncate(l);
        cont = Some((offset + l).to_string());
    }
    let rv = rv.to_string();
    if req.wants_table() {
        return Ok(Reply::bytes(200, table::render(r.printer, items.iter().map(|o| o.row()), &rv, cont.as_deref())));
    }
    // the list written out around each object's text
    let mut meta = serde_json::Map::new();
    meta.insert("resourceVersion".into(), json!(rv));
    if let Some(c) = cont {
        meta.insert("continue".into(), json!(c));
    }
    let head = json!({"kind": r.list_kind, "apiVersion": "v1", "metadata": meta}).to_string();
    let mut body = Vec::with_capacity(head.len() + 16 + items.iter().map(|o| o.json().len() + 1).sum::<usize>());
    body.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
    body.extend_from_slice(br#","items":["#);
    for (i, o) in items.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(o.json().as_bytes());
    }
    body.extend_from_slice(b"]}");
    Ok(Reply::bytes(200, body))
}

/// A watch of `r` (in `ns`, or all): a chunked stream of events.
pub fn watch(ctx: &Ctx, req: &Request, r: Resource, ns: Option<&str>) -> Res<Reply> {
    let f = filter(req, r.fields)?;
    watch_stream(ctx, req, r, ns, f)
}

/// One object of `r`, JSON or a Table.
pub fn get(ctx: &Ctx, req: &Request, r: Resource, ns: Option<&str>, name: &str) -> Res<Reply> {
    let found = ctx.hub.find(r.kind, if r.namespaced { ns } else { None }, name);
    let Some(obj) = found else { return Err(ApiError::not_found(r.name, name)) };
    if req.wants_table() {
        return Ok(Reply::bytes(200, table::render(r.printer, [obj.row()], &obj.rv.to_string(), None)));
    }
    Ok(Reply::bytes(200, obj.json().as_bytes().to_vec()))
}

/// The Node (this node) and the NodeList of it.
pub fn nodes(ctx: &Ctx, user: &User, req: &Request, rest: &[&str]) -> Res<Reply> {
    if req.method != "GET" {
        return Err(ApiError::method_not_allowed(format!("{} is not supported on nodes by podwarden", req.method)));
    }
    if !ctx.authz.allows_somewhere(user, Right::Read) {
        ctx.check(user, if rest.is_empty() { "list" } else { "get" }, "nodes", None, Right::Read)?;
    }
    let node = resources::node(&ctx.ops.parts, ctx.healthy_within);
    let rv = ctx.hub.resource_version().to_string();
    let name = &ctx.ops.parts.node_name;
    match rest {
        [] => {
            let f = filter(req, &["metadata.name"])?;
            let items: Vec<&Value> = [&node].into_iter().filter(|n| f.matches(n)).collect();
            if req.query.flag("watch")? {
                return Err(ApiError::method_not_allowed("watching nodes is not supported by podwarden"));
            }
            if req.wants_table() {
                return Ok(Reply::bytes(200, table::table(Printer::Nodes, items, &rv)));
            }
            Ok(Reply::ok(
                &json!({"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items}),
            ))
        }
        [n] if n == name => {
            if req.wants_table() {
                return Ok(Reply::bytes(200, table::table(Printer::Nodes, [&node], &rv)));
            }
            Ok(Reply::ok(&node))
        }
        [n] => Err(ApiError::not_found("nodes", n)),
        _ => Err(ApiError::no_route()),
    }
}

/// `metrics.k8s.io/v1beta1`: pods' and the node's.
pub fn metrics(ctx: &Ctx, user: &User, rest: &[&str]) -> Res<Reply> {
    let parts = &ctx.ops.parts;
    let none_yet = || ApiError::unavailable("no resource metrics collected yet: try again in a few seconds");
    let list = |kind: &str, items: Vec<Value>| json!({"kind": kind, "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {}, "items": items});
    let pods = |ns: Option<&str>, name: Option<&str>| -> Res<Vec<Value>> {
        Ok(resources::pod_metrics(parts)
            .ok_or_else(none_yet)?
            .into_iter()
            .filter(|p| ns_matches(p, ns) && name.is_none_or(|n| p["metadata"]["name"] == n))
            .collect())
    };
    match rest {
        ["pods"] => {
            ctx.check(user, "list", "pods.metrics.k8s.io", None, Right::Read)?;
            Ok(Reply::ok(&list("PodMetricsList", pods(None, None)?)))
        }
        ["namespaces", ns, "pods"] => {
            ctx.check(user, "list", "pods.metrics.k8s.io", Some(ns), Right::Read)?;
            Ok(Reply::ok(&list("PodMetricsList", pods(Some(ns), None)?)))
        }
        ["namespaces", ns, "pods", name] => {
            ctx.check(user, "get", "pods.metrics.k8s.io", Some(ns), Right::Read)?;
            pods(Some(ns), Some(name))?
                .pop()
                .map(|p| Reply::ok(&p))
                .ok_or_else(|| ApiError::not_found("pods.metrics.k8s.io", name))
        }
        ["nodes"] | ["nodes", _] => {
            if !ctx.authz.allows_somewhere(user, Right::Read) {
                ctx.check(user, "list", "nodes.metrics.k8s.io", None, Right::Read)?;
            }
            let node = resources::node_metrics(parts).ok_or_else(none_yet)?;
            match rest {
                ["nodes"] => Ok(Reply::ok(&list("NodeMetricsList", vec![node]))),
                [_, n] if *n == parts.node_name => Ok(Reply::ok(&node)),
                [_, n] => Err(ApiError::not_found("nodes.metrics.k8s.io", n)),
                _ => Err(ApiError::no_route()),
            }
        }
        _ => Err(ApiError::no_route()),
    }
}

/// One watch event's JSON line: the object, or a Table of its one row.
fn event_line(event: &str, obj: &Stored, printer: Option<Printer>) -> Vec<u8> {
    let mut line = Vec::with_capacity(obj.json().len() + 64);
    line.extend_from_slice(br#"{"type":""#);
    line.extend_from_slice(event.as_bytes());
    line.extend_from_slice(br#"","object":"#);
    match printer {
        Some(p) => line.extend_from_slice(&table::render(p, [obj.row()], &obj.rv.to_string(), None)),
        None => line.extend_from_slice(obj.json().as_bytes()),
    }
    line.extend_from_slice(b"}\n");
    line
}

/// How long a watch without `timeoutSeconds` lasts (the API server picks
/// 30–60 min; kubectl watches again).
const DEFAULT_WATCH: Duration = Duration::from_secs(1800);

fn watch_stream(ctx: &Ctx, req: &Request, r: Resource, ns: Option<&str>, f: Filter) -> Res<Reply> {
    let from = match req.query.get("resourceVersion") {
        None | Some("") => None,
        Some(v) => Some(v.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {v:?}")))?),
    };
    let timeout =
        req.query.int("timeoutSeconds")?.filter(|t| *t > 0).map_or(DEFAULT_WATCH, |t| Duration::from_secs(t as u64));
    let sub = ctx.hub.watch(r.kind, from)?;
    let printer = req.wants_table().then_some(r.printer);
    let bookmarks = req.query.flag("allowWatchBookmarks")?;
    let (ns, stop, hub) = (ns.map(str::to_string), ctx.stop.clone(), ctx.hub.clone());
    let run = move |sink: &mut dyn ChunkSink| -> std::io::Result<()> {
        let end = Instant::now() + timeout;
        // selectors read the object, parsed only for a watch that has them
        let visible = |o: &Stored| o.in_namespace(ns.as_deref()) && (f.is_empty() || f.matches(&o.value()));
        let send = |sink: &mut dyn ChunkSink, c: &watch::Change| -> std::io::Result<()> {
            let now = visible(&c.object);
            let before = c.prev.as_deref().is_some_and(&visible);
            let event = match (c.event, before, now) {
                (watch::EventType::Deleted, _, true) => "DELETED",
                (watch::EventType::Modified, true, false) => "DELETED",
                (watch::EventType::Modified, false, true) => "ADDED",
                (_, _, true) => c.event.as_str(),
                _ => return Ok(()),
            };
            sink.chunk(&event_line(event, &c.object, printer))
        };
        for c in &sub.backlog {
            send(sink, c)?;
        }
        let mut last_bookmark = Instant::now();
        while Instant::now() < end && !stop.load(Ordering::SeqCst) {
            match sub.next(Duration::from_secs(1)) {
                Next::Change(c) => send(sink, &c)?,
                Next::Expired => {
                    let e = ApiError::expired("the watch fell too far behind: list again");
                    let mut line =
                        serde_json::to_vec(&json!({"type": "ERROR", "object": e.status()})).unwrap_or_default();
                    line.push(b'\n');
                    return sink.chunk(&line);
                }
                Next::Idle => {
                    if sink.client_gone() {
                        return Ok(());
                    }
                    if bookmarks && last_bookmark.elapsed() > Duration::from_secs(30) {
                        last_bookmark = Instant::now();
                        let rv = hub.resource_version().to_string();
                        let kind = match r.kind {
                            Kind::Pods => "Pod",
                            Kind::Events => "Event",
                            Kind::ConfigMaps => "ConfigMap",
                            Kind::Secrets => "Secret",
                            Kind::Namespaces => "Namespace",
                        };
                        let o = json!({"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": rv}});
                        let mut line =
                            serde_json::to_vec(&json!({"type": "BOOKMARK", "object": o})).unwrap_or_default();
                        line.push(b'\n');
                        sink.chunk(&line)?;
                    }
                }
            }
        }
        Ok(())
    };
    Ok(Reply::Stream { content_type: "application/json", run: Box::new(run) })
}

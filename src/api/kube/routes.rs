//! Which handler answers a request, after the identity check and before
//! each handler's authorization: discovery, the core/v1 resources, metrics,
//! self-subject reviews, the kubelet's own paths. exec, attach and
//! port-forward (`pods/exec` ..., `/exec`, `/attach`, `/portForward`) go to
//! the relay in `api::stream` ([`streaming`]), `/run` to `run`, PATCH of
//! pods to `api::kube::patch`/`ssa` ([`patch`]), writes of ConfigMaps and
//! Secrets to `objwrite`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::api::ops::Trust;
use crate::api::status::{ApiError, Res};
use crate::config::api_authz::Right;

use super::authz::{Ask, User};
use super::ctx::Ctx;
use super::select::{Filter, Selector};
use super::table::{self, Printer};
use super::watch::{self, Kind, Next, Stored};
use super::wire::{ChunkSink, Reply, Request};
use super::{discovery, logs, objwrite, resources, run};

/// A resource the API serves from the hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Resource {
    name: &'static str,
    kind: Kind,
    printer: Printer,
    list_kind: &'static str,
    fields: &'static [&'static str],
    right: Right,
    namespaced: bool,
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

fn resource(name: &str) -> Option<Resource> {
    RESOURCES.iter().find(|r| r.name == name).copied()
}

/// The answer to `req` from `user` (`None`: no client certificate).
pub fn handle(ctx: &Ctx, user: Option<&User>, req: &Request) -> Reply {
    let Some(user) = user else { return ApiError::unauthorized().into() };
    if user.cluster
        && let Err(e) = cluster_door(ctx, user, req)
    {
        return e.into();
    }
    route(ctx, user, req).unwrap_or_else(Reply::from)
}

/// A caller the cluster authenticated (the API server, a service account's
/// token): only the kubelet's own paths, each as the cluster's
/// `SubjectAccessReview` allows on `nodes/<subresource>` of this node.
fn cluster_door(ctx: &Ctx, user: &User, req: &Request) -> Res<()> {
    let first = req.path.trim_start_matches('/').split('/').next().unwrap_or("");
    if !matches!(
        first,
        "containerLogs" | "exec" | "attach" | "portForward" | "run" | "healthz" | "pods" | "stats" | "metrics"
    ) {
        return Err(ApiError::no_route());
    }
    let (verb, sub) = super::authz::kubelet_attributes(&req.method, &req.path);
    let auth = ctx.cluster_auth.get().ok_or_else(ApiError::unauthorized)?;
    if auth.allowed(user, verb, sub)? {
        return Ok(());
    }
    // the kubelet's text
    Err(ApiError::forbidden(format!("Forbidden (user={}, verb={verb}, resource=nodes, subresource={sub})", user.name)))
}

fn segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

fn route(ctx: &Ctx, user: &User, req: &Request) -> Res<Reply> {
    let seg = segments(&req.path);
    let get = req.method == "GET" || req.method == "HEAD";
    match (req.method.as_str(), seg.as_slice()) {
        (_, ["healthz" | "livez" | "readyz"]) if get => {
            Ok(Reply::Full { status: 200, content_type: "text/plain", body: b"ok".to_vec() })
        }
        (_, ["version"]) if get => Ok(Reply::ok(&discovery::version())),
        // what kubectl's strict apply and explain read (1.27/1.28: v2 as
        // protobuf, served as octet-stream: Go's mime parser refuses the
        // `@` of the protobuf type; 1.29+: v3)
        (_, ["openapi", "v2"] | ["swagger-2.0.0.pb-v1"]) if get => Ok(Reply::Full {
            status: 200,
            content_type: "application/octet-stream",
            body: crate::api::kube::openapi::v2_protobuf(),
        }),
        (_, ["openapi", "v3"]) if get => Ok(Reply::Full {
            status: 200,
            content_type: "application/json",
            body: crate::api::kube::openapi::v3_index(),
        }),
        (_, ["openapi", "v3", rest @ ..]) if get => crate::api::kube::openapi::v3_doc(&rest.join("/"))
            .map(|body| Reply::Full { status: 200, content_type: "application/json", body })
            .ok_or_else(ApiError::no_route),
        (_, [top @ ("api" | "apis")]) if get => {
            let core = *top == "api";
            if let Some(form) = discovery::Aggregated::negotiate(req.header("accept").unwrap_or("")) {
                let body = serde_json::to_vec(&discovery::aggregated(form, core)).unwrap_or_default();
                return Ok(Reply::Full { status: 200, content_type: form.content_type(), body });
            }
            Ok(Reply::ok(&if core { discovery::core_versions(&ctx.server_address) } else { discovery::groups() }))
        }
        (_, ["api", v]) if get => discovery::resources("", v).map(|v| Reply::ok(&v)).ok_or_else(ApiError::no_route),
        (_, ["apis", g, v]) if get => discovery::resources(g, v).map(|v| Reply::ok(&v)).ok_or_else(ApiError::no_route),
        ("POST", ["apis", "authentication.k8s.io", v @ ("v1" | "v1beta1" | "v1alpha1"), "selfsubjectreviews"]) => {
            Ok(Reply::json(201, &self_review(user, v)))
        }
        (_, ["apis", "metrics.k8s.io", "v1beta1", rest @ ..]) => metrics(ctx, user, req, rest),
        (_, ["api", "v1", "nodes", rest @ ..]) => nodes(ctx, user, req, rest),
        (_, ["api", "v1", "namespaces"]) => collection(ctx, user, req, resource("namespaces"), None),
        (_, ["api", "v1", "namespaces", name]) => object(ctx, user, req, resource("namespaces"), None, name),
        (_, ["api", "v1", r]) => collection(ctx, user, req, resource(r), None),
        (_, ["api", "v1", "namespaces", ns, r]) => collection(ctx, user, req, resource(r), Some(ns)),
        (_, ["api", "v1", "namespaces", ns, "pods", name, "log"]) => {
            check(ctx, user, req, "get", "pods/log", Some(ns), Right::Read)?;
            logs::pod_log(ctx, req, ns, name, req.query.get("container").unwrap_or(""))
        }
        (_, ["api", "v1", "namespaces", ns, "pods", name, sub @ ("exec" | "attach" | "portforward")]) => {
            check(ctx, user, req, "create", &format!("pods/{sub}"), Some(ns), Right::Exec)?;
            Ok(streaming(ctx, user, req, ns, name, sub))
        }
        (_, ["api", "v1", "namespaces", ns, "pods", name, "status"]) => {
            object(ctx, user, req, resource("pods"), Some(ns), name)
        }
        (_, ["api", "v1", "namespaces", ns, r, name]) => object(ctx, user, req, resource(r), Some(ns), name),
        // the kubelet's own paths: what the cluster reads of the node
        // (metrics-server, `kubectl get --raw .../proxy/stats/summary`)
        (_, ["pods"]) if get && user.cluster => {
            let body = crate::api::view::to_json(&crate::api::view::pods_of(&ctx.ops.parts, false));
            Ok(Reply::Full { status: 200, content_type: "application/json", body })
        }
        (_, ["stats", "summary"]) if get && user.cluster => match ctx.ops.parts.stats.last() {
            Some(s) => Ok(Reply::ok(
                &serde_json::to_value(crate::node::stats::summary(&s, &ctx.ops.parts.node_name)).unwrap_or_default(),
            )),
            None => Err(ApiError::unavailable("no stats collected yet")),
        },
        (_, ["metrics", "resource"]) if get && user.cluster => Ok(Reply::Full {
            status: 200,
            content_type: "text/plain; version=0.0.4",
            body: crate::node::stats::resource_metrics(ctx.ops.parts.stats.last().as_deref()).into_bytes(),
        }),
        (_, ["metrics"]) if get && user.cluster => Ok(Reply::Full {
            status: 200,
            content_type: "text/plain; version=0.0.4",
            body: crate::telemetry::metrics::render(&ctx.ops.parts.metrics).into_bytes(),
        }),
        (_, ["containerLogs", ns, pod, container]) if get => {
            check(ctx, user, req, "get", "pods/log", Some(ns), Right::Read)?;
            logs::pod_log(ctx, req, ns, pod, container)
        }
        (_, ["run", rest @ ..]) if rest.len() >= 3 => {
            check(ctx, user, req, "create", "nodes/proxy:run", Some(rest[0]), Right::Exec)?;
            run::run(ctx, req, rest)
        }
        (_, [verb @ ("exec" | "attach" | "portForward"), ns, pod, ..]) => {
            check(ctx, user, req, "create", &format!("nodes/proxy:{verb}"), Some(ns), Right::Exec)?;
            Ok(streaming(ctx, user, req, ns, pod, verb))
        }
        _ => Err(ApiError::no_route()),
    }
}

/// 403 unless `user` may.
fn check(
    ctx: &Ctx,
    user: &User,
    _req: &Request,
    verb: &str,
    resource: &str,
    ns: Option<&str>,
    right: Right,
) -> Res<()> {
    ctx.authz.check(user, Ask { verb, resource, group: "", namespace: ns, right })
}

/// exec, attach, port-forward (and the kubelet's `/exec`, `/run`,
/// `/attach`, `/portForward`): the hook the streaming relay fills
/// (`api::stream`); authorization is done. It may answer
/// [`Reply::Upgrade`] to take the connection over.
pub fn streaming(ctx: &Ctx, _user: &User, req: &Request, ns: &str, pod: &str, what: &str) -> Reply {
    use crate::api::stream::{StreamTarget, UpgradeRequest};
    let kind = match what {
        "exec" | "attach" => what,
        "portforward" | "portForward" => "portforward",
        _ => return ApiError::bad_request(format!("{what} for pod {ns}/{pod}: not a streaming request")).into(),
    };
    // the kubelet's paths name the container: /exec/NS/POD/CONTAINER
    let segments: Vec<&str> = req.path.trim_start_matches('/').split('/').collect();
    let container = if segments.first().is_some_and(|s| *s != "api") { segments.get(3).copied() } else { None };
    let target = match StreamTarget::from_query(kind, ns, pod, container.unwrap_or(""), &req.query) {
        Ok(t) => t,
        Err(e) => return e.into(),
    };
    let up = UpgradeRequest {
        method: req.method.clone(),
        target: format!("{}?{}", req.path, req.query.raw()),
        headers: req.headers.iter().map(|(k, v)| (k.clone(), v.as_bytes().to_vec())).collect(),
        rest: Vec::new(),
    };
    let parts = ctx.ops.parts.clone();
    Reply::Upgrade(Box::new(move |conn| {
        // authorization is done: every pod of the namespace the right covers
        crate::api::stream::serve(&parts, Box::new(conn), &up, target, |_| Ok(()))
    }))
}

/// PATCH of a pod (authorization is done): strategic merge, merge or JSON
/// patch, or server-side apply (`api::kube::patch`, `api::kube::ssa`),
/// checked by the request's `fieldValidation`; the patched pod is a new
/// version of its manifest, written as `podwarden apply` writes it (the
/// pod is replaced). Static pods are not patched through the API.
pub fn patch(ctx: &Ctx, _user: &User, req: &Request, r: &str, ns: &str, name: &str) -> Reply {
    patch_pod(ctx, req, r, ns, name).unwrap_or_else(Reply::from)
}

fn patch_pod(ctx: &Ctx, req: &Request, r: &str, ns: &str, name: &str) -> Res<Reply> {
    use crate::api::kube::{patch, ssa, write};
    let live = ctx.hub.find(Kind::Pods, Some(ns), name).map(|o| o.value());
    let live = live.as_ref();
    let now = crate::model::rfc3339(std::time::SystemTime::now());
    let params = write::Params::from_query(&req.query, &now)?;
    let ct = req.header("content-type").unwrap_or("");
    let is_apply = ct.starts_with("application/apply-patch");
    if let Some(pod) = live
        && !resources::is_api_pod(pod)
    {
        let file = pod.pointer("/metadata/annotations/podwarden.io~1config.file").and_then(Value::as_str).unwrap_or("");
        return Err(ApiError::forbidden(format!(
            "{r} \"{name}\" is forbidden: a static pod (manifest {file}) cannot be changed through the API: edit its \
             manifest"
        )));
    }
    let patched = match (live, is_apply) {
        (Some(pod), true) => ssa::server_side_apply("Pod", Some(pod), &req.body, &params),
        (Some(pod), false) => patch::apply("Pod", pod, &req.body, ct, &params),
        (None, true) => ssa::server_side_apply("Pod", None, &req.body, &params),
        (None, false) => return Err(ApiError::not_found(r, name)),
    };
    let patched = patched?;
    for w in &patched.warnings {
        log::debug!("PATCH {r} {ns}/{name}: warning: {w}");
    }
    if params.dry_run {
        return Ok(Reply::ok(&patched.object));
    }
    let mut manifest = write::manifest_of(&patched.object);
    if let Some(meta) = manifest.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("namespace".into(), json!(ns));
        let ann = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = ann.as_object_mut() {
            a.insert(resources::CREATED_BY_ANNOTATION.into(), json!(resources::API_CREATED));
        }
    }
    let bytes = serde_json::to_vec_pretty(&manifest).map_err(|e| ApiError::internal(e.to_string()))?;
    let applied = ctx.ops.apply(&bytes, &format!("pods/{name}"), Trust::Client)?;
    let mut out = resources::pod_json(&applied.pod);
    out["metadata"]["resourceVersion"] = json!(ctx.hub.resource_version().to_string());
    Ok(Reply::json(if live.is_some() { 200 } else { 201 }, &out))
}

fn self_review(user: &User, version: &str) -> Value {
    let mut groups = user.groups.clone();
    groups.push("system:authenticated".into());
    json!({"kind": "SelfSubjectReview", "apiVersion": format!("authentication.k8s.io/{version}"),
        "metadata": {"creationTimestamp": null},
        "status": {"userInfo": {"username": user.name, "groups": groups}}})
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

/// A collection: list (JSON or Table), watch, or create (pods, configmaps,
/// secrets).
fn collection(ctx: &Ctx, user: &User, req: &Request, r: Option<Resource>, ns: Option<&str>) -> Res<Reply> {
    let Some(r) = r else { return Err(ApiError::no_route()) };
    match (req.method.as_str(), objwrite::kind_of(r.name)) {
        ("GET" | "HEAD", _) => {}
        ("POST", _) if r.name == "pods" => {
            let ns = ns.unwrap_or("default");
            check(ctx, user, req, "create", "pods", Some(ns), Right::Write)?;
            return create_pod(ctx, req, ns);
        }
        ("POST", Some(kind)) => {
            let ns = ns.unwrap_or("default");
            check(ctx, user, req, "create", r.name, Some(ns), Right::Write)?;
            return objwrite::create(ctx, req, kind, ns);
        }
        (m, _) => return Err(ApiError::method_not_allowed(format!("{m} is not supported on {} by podwarden", r.name))),
    }
    let watching = req.query.flag("watch")?;
    let verb = if watching { "watch" } else { "list" };
    check(ctx, user, req, verb, r.name, ns, r.right)?;
    let f = filter(req, r.fields)?;
    if watching {
        return watch_stream(ctx, req, r, ns, f);
    }
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

/// One object: get (JSON or Table), patch or delete (pods, configmaps,
/// secrets).
fn object(ctx: &Ctx, user: &User, req: &Request, r: Option<Resource>, ns: Option<&str>, name: &str) -> Res<Reply> {
    let Some(r) = r else { return Err(ApiError::no_route()) };
    let ns_text = ns.unwrap_or("");
    match (req.method.as_str(), objwrite::kind_of(r.name)) {
        ("GET" | "HEAD", _) => {}
        ("DELETE", _) if r.name == "pods" => {
            check(ctx, user, req, "delete", "pods", ns, Right::Write)?;
            return delete_pod(ctx, req, ns_text, name);
        }
        ("PATCH", _) if r.name == "pods" => {
            check(ctx, user, req, "patch", "pods", ns, Right::Write)?;
            return Ok(patch(ctx, user, req, r.name, ns_text, name));
        }
        ("PATCH", Some(kind)) => {
            check(ctx, user, req, "patch", r.name, ns, Right::Write)?;
            return objwrite::patch(ctx, req, kind, ns_text, name);
        }
        ("DELETE", Some(kind)) => {
            check(ctx, user, req, "delete", r.name, ns, Right::Write)?;
            return objwrite::delete(ctx, req, kind, ns_text, name);
        }
        (m, _) => return Err(ApiError::method_not_allowed(format!("{m} is not supported on {} by podwarden", r.name))),
    }
    check(ctx, user, req, "get", r.name, ns, r.right)?;
    let found = ctx.hub.find(r.kind, if r.namespaced { ns } else { None }, name);
    let Some(obj) = found else { return Err(ApiError::not_found(r.name, name)) };
    if req.wants_table() {
        return Ok(Reply::bytes(200, table::render(r.printer, [obj.row()], &obj.rv.to_string(), None)));
    }
    Ok(Reply::bytes(200, obj.json().as_bytes().to_vec()))
}

/// The largest pod manifest taken.
const MAX_MANIFEST: usize = 1 << 20;

fn create_pod(ctx: &Ctx, req: &Request, ns: &str) -> Res<Reply> {
    let mut pod = objwrite::body_object(req, MAX_MANIFEST)?;
    if pod.get("kind").and_then(Value::as_str) != Some("Pod") {
        return Err(ApiError::bad_request("the body is not a Pod (kind: Pod, apiVersion: v1)"));
    }
    let name = objwrite::identify(&mut pod, "Pod", ns)?;
    // identify made sure metadata is an object
    if let Some(a) = pod["metadata"]
        .as_object_mut()
        .and_then(|m| m.entry("annotations").or_insert_with(|| json!({})).as_object_mut())
    {
        a.insert(resources::CREATED_BY_ANNOTATION.into(), json!(resources::API_CREATED));
    }
    if ctx.ops.find(ns, &name).is_ok() {
        return Err(ApiError::already_exists("pods", &name));
    }
    if req.query.get("dryRun").is_some() {
        return Err(ApiError::bad_request("dryRun is not supported by podwarden"));
    }
    let bytes = serde_json::to_vec_pretty(&pod).map_err(|e| ApiError::internal(e.to_string()))?;
    let applied = ctx.ops.apply(&bytes, &format!("pods/{name}"), Trust::Client)?;
    let mut out = resources::pod_json(&applied.pod);
    out["metadata"]["resourceVersion"] = json!(ctx.hub.resource_version().to_string());
    Ok(Reply::json(201, &out))
}

fn delete_pod(ctx: &Ctx, req: &Request, ns: &str, name: &str) -> Res<Reply> {
    let Some(pod) = ctx.hub.find(Kind::Pods, Some(ns), name).map(|o| o.value()) else {
        return Err(ApiError::not_found("pods", name));
    };
    if !resources::is_api_pod(&pod) {
        let file = pod.pointer("/metadata/annotations/podwarden.io~1config.file").and_then(Value::as_str).unwrap_or("");
        return Err(ApiError::forbidden(format!(
            "pods \"{name}\" is forbidden: a static pod (manifest {file}) cannot be deleted through the API: remove \
             its manifest or use `podwarden delete pod {name} -n {ns}`"
        )));
    }
    let body: Value = if req.body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("DeleteOptions is not JSON: {e}")))?
    };
    let grace = match req.query.int("gracePeriodSeconds")? {
        Some(g) => Some(g),
        None => body.get("gracePeriodSeconds").and_then(Value::as_i64),
    };
    ctx.ops.delete(ns, name, grace)?;
    let mut out = pod;
    out["metadata"]["deletionTimestamp"] = json!(crate::model::rfc3339(std::time::SystemTime::now()));
    if let Some(g) = grace {
        out["metadata"]["deletionGracePeriodSeconds"] = json!(g);
    }
    Ok(Reply::ok(&out))
}

fn nodes(ctx: &Ctx, user: &User, req: &Request, rest: &[&str]) -> Res<Reply> {
    if req.method != "GET" {
        return Err(ApiError::method_not_allowed(format!("{} is not supported on nodes by podwarden", req.method)));
    }
    if !ctx.authz.allows_somewhere(user, Right::Read) {
        check(ctx, user, req, if rest.is_empty() { "list" } else { "get" }, "nodes", None, Right::Read)?;
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

fn metrics(ctx: &Ctx, user: &User, req: &Request, rest: &[&str]) -> Res<Reply> {
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
            check(ctx, user, req, "list", "pods.metrics.k8s.io", None, Right::Read)?;
            Ok(Reply::ok(&list("PodMetricsList", pods(None, None)?)))
        }
        ["namespaces", ns, "pods"] => {
            check(ctx, user, req, "list", "pods.metrics.k8s.io", Some(ns), Right::Read)?;
            Ok(Reply::ok(&list("PodMetricsList", pods(Some(ns), None)?)))
        }
        ["namespaces", ns, "pods", name] => {
            check(ctx, user, req, "get", "pods.metrics.k8s.io", Some(ns), Right::Read)?;
            pods(Some(ns), Some(name))?
                .pop()
                .map(|p| Reply::ok(&p))
                .ok_or_else(|| ApiError::not_found("pods.metrics.k8s.io", name))
        }
        ["nodes"] | ["nodes", _] => {
            if !ctx.authz.allows_somewhere(user, Right::Read) {
                check(ctx, user, req, "list", "nodes.metrics.k8s.io", None, Right::Read)?;
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

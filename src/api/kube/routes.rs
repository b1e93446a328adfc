//! Which handler answers a request: the identity check (401 without
//! one; a caller the cluster authenticated only on the kubelet's own
//! paths, as its `SubjectAccessReview` allows), each handler's
//! authorization (403), then dispatch: discovery and OpenAPI, reads
//! (`read`: lists, gets, watches, the node, metrics), writes (`write`:
//! pods, ConfigMaps and Secrets), logs (`logs`), exec, attach and
//! port-forward (`pods/exec` ..., `/exec`, `/attach`, `/portForward`: the
//! relay in `api::stream`, [`streaming`]), `/run` (`run`), self-subject
//! reviews and the kubelet's `/pods`, `/stats/summary`, `/metrics`.

use serde_json::{Value, json};

use crate::api::status::{ApiError, Res};
use crate::config::api_authz::Right;

use super::authz::User;
use super::ctx::Ctx;
use super::read::{self, Resource, resource};
use super::wire::{Reply, Request};
use super::write::{objects, pods};
use super::{discovery, logs, run};

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
        (_, ["apis", "metrics.k8s.io", "v1beta1", rest @ ..]) => read::metrics(ctx, user, rest),
        (_, ["api", "v1", "nodes", rest @ ..]) => read::nodes(ctx, user, req, rest),
        (_, ["api", "v1", "namespaces"]) => collection(ctx, user, req, resource("namespaces"), None),
        (_, ["api", "v1", "namespaces", name]) => object(ctx, user, req, resource("namespaces"), None, name),
        (_, ["api", "v1", r]) => collection(ctx, user, req, resource(r), None),
        (_, ["api", "v1", "namespaces", ns, r]) => collection(ctx, user, req, resource(r), Some(ns)),
        (_, ["api", "v1", "namespaces", ns, "pods", name, "log"]) => {
            ctx.check(user, "get", "pods/log", Some(ns), Right::Read)?;
            logs::pod_log(ctx, req, ns, name, req.query.get("container").unwrap_or(""))
        }
        (_, ["api", "v1", "namespaces", ns, "pods", name, sub @ ("exec" | "attach" | "portforward")]) => {
            ctx.check(user, "create", &format!("pods/{sub}"), Some(ns), Right::Exec)?;
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
            ctx.check(user, "get", "pods/log", Some(ns), Right::Read)?;
            logs::pod_log(ctx, req, ns, pod, container)
        }
        (_, ["run", rest @ ..]) if rest.len() >= 3 => {
            ctx.check(user, "create", "nodes/proxy:run", Some(rest[0]), Right::Exec)?;
            run::run(ctx, req, rest)
        }
        (_, [verb @ ("exec" | "attach" | "portForward"), ns, pod, ..]) => {
            ctx.check(user, "create", &format!("nodes/proxy:{verb}"), Some(ns), Right::Exec)?;
            Ok(streaming(ctx, user, req, ns, pod, verb))
        }
        _ => Err(ApiError::no_route()),
    }
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

fn self_review(user: &User, version: &str) -> Value {
    let mut groups = user.groups.clone();
    groups.push("system:authenticated".into());
    json!({"kind": "SelfSubjectReview", "apiVersion": format!("authentication.k8s.io/{version}"),
        "metadata": {"creationTimestamp": null},
        "status": {"userInfo": {"username": user.name, "groups": groups}}})
}

/// A collection: list (JSON or Table), watch, or create (pods, configmaps,
/// secrets).
fn collection(ctx: &Ctx, user: &User, req: &Request, r: Option<Resource>, ns: Option<&str>) -> Res<Reply> {
    let Some(r) = r else { return Err(ApiError::no_route()) };
    match (req.method.as_str(), objects::kind_of(r.name)) {
        ("GET" | "HEAD", _) => {
            let watching = req.query.flag("watch")?;
            ctx.check(user, if watching { "watch" } else { "list" }, r.name, ns, r.right)?;
            if watching { read::watch(ctx, req, r, ns) } else { read::list(ctx, req, r, ns) }
        }
        ("POST", _) if r.name == "pods" => {
            let ns = ns.unwrap_or("default");
            ctx.check(user, "create", "pods", Some(ns), Right::Write)?;
            pods::create(ctx, req, ns)
        }
        ("POST", Some(kind)) => {
            let ns = ns.unwrap_or("default");
            ctx.check(user, "create", r.name, Some(ns), Right::Write)?;
            objects::create(ctx, req, kind, ns)
        }
        (m, _) => Err(ApiError::method_not_allowed(format!("{m} is not supported on {} by podwarden", r.name))),
    }
}

/// One object: get (JSON or Table), patch or delete (pods, configmaps,
/// secrets).
fn object(ctx: &Ctx, user: &User, req: &Request, r: Option<Resource>, ns: Option<&str>, name: &str) -> Res<Reply> {
    let Some(r) = r else { return Err(ApiError::no_route()) };
    let ns_text = ns.unwrap_or("");
    match (req.method.as_str(), objects::kind_of(r.name)) {
        ("GET" | "HEAD", _) => {
            ctx.check(user, "get", r.name, ns, r.right)?;
            read::get(ctx, req, r, ns, name)
        }
        ("DELETE", _) if r.name == "pods" => {
            ctx.check(user, "delete", "pods", ns, Right::Write)?;
            pods::delete(ctx, req, ns_text, name)
        }
        ("PATCH", _) if r.name == "pods" => {
            ctx.check(user, "patch", "pods", ns, Right::Write)?;
            pods::patch(ctx, req, ns_text, name)
        }
        ("PATCH", Some(kind)) => {
            ctx.check(user, "patch", r.name, ns, Right::Write)?;
            objects::patch(ctx, req, kind, ns_text, name)
        }
        ("DELETE", Some(kind)) => {
            ctx.check(user, "delete", r.name, ns, Right::Write)?;
            objects::delete(ctx, req, kind, ns_text, name)
        }
        (m, _) => Err(ApiError::method_not_allowed(format!("{m} is not supported on {} by podwarden", r.name))),
    }
}

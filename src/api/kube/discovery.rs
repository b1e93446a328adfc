//! Discovery: `/version`, `/api`, `/apis` and each group version's
//! APIResourceList, all from one resource table ([`GROUP_VERSIONS`]).
//! `/api` and `/apis` answer in the aggregated form
//! (`apidiscovery.k8s.io` `APIGroupDiscoveryList`, every group version's
//! resources in one answer) when the request's `Accept` offers it: `v2`
//! (kubectl 1.30+) or `v2beta1` (1.27–1.29), the `Content-Type` naming the
//! form sent, as client-go reads it; plain `APIVersions`/`APIGroupList`
//! otherwise.

use serde_json::{Value, json};

use super::resources::{KUBE_MINOR, git_version};

/// `/version`. The minor is 33: the newest kubectl on these machines, so
/// the `kubectl` dispatcher picks kubectl 1.33 (skew ±1 with 1.32 and
/// 1.34 clients as Kubernetes supports it).
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": KUBE_MINOR.to_string(),
        "gitVersion": git_version(),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("linux/{}", std::env::consts::ARCH),
    })
}

/// One resource or subresource (`pods/log`) of a group version.
#[derive(Debug, Clone, Copy)]
pub struct Res {
    pub name: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    pub kind: &'static str,
    pub verbs: &'static [&'static str],
    pub short: &'static [&'static str],
    pub categories: &'static [&'static str],
}

const fn res(name: &'static str, singular: &'static str, namespaced: bool, kind: &'static str) -> Res {
    Res { name, singular, namespaced, kind, verbs: READ, short: &[], categories: &[] }
}

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "get", "list", "patch", "watch"];
const STREAM: &[&str] = &["create", "get"];

const CORE: &[Res] = &[
    Res { verbs: WRITE, short: &["cm"], ..res("configmaps", "configmap", true, "ConfigMap") },
    Res { short: &["ev"], ..res("events", "event", true, "Event") },
    Res { short: &["ns"], ..res("namespaces", "namespace", false, "Namespace") },
    Res { short: &["no"], ..res("nodes", "node", false, "Node") },
    Res { verbs: WRITE, short: &["po"], categories: &["all"], ..res("pods", "pod", true, "Pod") },
    Res { verbs: STREAM, ..res("pods/attach", "", true, "PodAttachOptions") },
    Res { verbs: STREAM, ..res("pods/exec", "", true, "PodExecOptions") },
    Res { verbs: &["get"], ..res("pods/log", "", true, "Pod") },
    Res { verbs: STREAM, ..res("pods/portforward", "", true, "PodPortForwardOptions") },
    Res { verbs: &["get"], ..res("pods/status", "", true, "Pod") },
    Res { verbs: WRITE, ..res("secrets", "secret", true, "Secret") },
];

const METRICS: &[Res] = &[
    Res { verbs: &["get", "list"], ..res("nodes", "", false, "NodeMetrics") },
    Res { verbs: &["get", "list"], ..res("pods", "", true, "PodMetrics") },
];

const AUTHN: &[Res] = &[Res { verbs: &["create"], ..res("selfsubjectreviews", "", false, "SelfSubjectReview") }];

/// Every group version served, a group's preferred version first: (group
/// (`""`: core), version, resources).
pub const GROUP_VERSIONS: &[(&str, &str, &[Res])] = &[
    ("", "v1", CORE),
    ("metrics.k8s.io", "v1beta1", METRICS),
    ("authentication.k8s.io", "v1", AUTHN),
    ("authentication.k8s.io", "v1beta1", AUTHN),
    ("authentication.k8s.io", "v1alpha1", AUTHN),
];

/// The named groups (not core), in order, each once.
fn named_groups() -> Vec<&'static str> {
    let mut out: Vec<&str> = Vec::new();
    for (g, _, _) in GROUP_VERSIONS {
        if !g.is_empty() && !out.contains(g) {
            out.push(g);
        }
    }
    out
}

fn versions_of(group: &str) -> Vec<&'static str> {
    GROUP_VERSIONS.iter().filter(|(g, _, _)| *g == group).map(|(_, v, _)| *v).collect()
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() { version.to_string() } else { format!("{group}/{version}") }
}

pub fn core_versions(server: &str) -> Value {
    json!({"kind": "APIVersions", "versions": versions_of(""),
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}]})
}

pub fn groups() -> Value {
    let groups: Vec<Value> = named_groups()
        .into_iter()
        .map(|g| {
            let versions: Vec<Value> =
                versions_of(g).iter().map(|v| json!({"groupVersion": group_version(g, v), "version": v})).collect();
            json!({"name": g, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// The APIResourceList of `group/version` (`""` group: core `v1`).
pub fn resources(group: &str, version: &str) -> Option<Value> {
    let (_, _, res) = GROUP_VERSIONS.iter().find(|(g, v, _)| *g == group && *v == version)?;
    let resources: Vec<Value> = res
        .iter()
        .map(|r| {
            let mut v = json!({"name": r.name, "singularName": r.singular, "namespaced": r.namespaced,
                "kind": r.kind, "verbs": r.verbs});
            if !r.short.is_empty() {
                v["shortNames"] = json!(r.short);
            }
            if !r.categories.is_empty() {
                v["categories"] = json!(r.categories);
            }
            v
        })
        .collect();
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version(group, version),
        "resources": resources}))
}

/// The aggregated discovery versions, as `Accept` and `Content-Type`
/// name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregated {
    V2,
    V2beta1,
}

impl Aggregated {
    pub fn version(self) -> &'static str {
        match self {
            Aggregated::V2 => "v2",
            Aggregated::V2beta1 => "v2beta1",
        }
    }

    /// The answer's `Content-Type` (client-go decides by it which form it
    /// got).
    pub fn content_type(self) -> &'static str {
        match self {
            Aggregated::V2 => "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            Aggregated::V2beta1 => "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
        }
    }

    /// The first aggregated form an `Accept` header offers as JSON (in the
    /// client's order; protobuf offers and other media types are skipped).
    pub fn negotiate(accept: &str) -> Option<Aggregated> {
        accept.split(',').find_map(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next()?.to_ascii_lowercase();
            if media != "application/json" {
                return None;
            }
            let (mut g, mut v, mut as_) = ("", "", "");
            for p in parts {
                match p.split_once('=') {
                    Some(("g", x)) => g = x,
                    Some(("v", x)) => v = x,
                    Some(("as", x)) => as_ = x,
                    _ => {}
                }
            }
            if g != "apidiscovery.k8s.io" || as_ != "APIGroupDiscoveryList" {
                return None;
            }
            match v {
                "v2" => Some(Aggregated::V2),
                "v2beta1" => Some(Aggregated::V2beta1),
                _ => None,
            }
        })
    }
}

/// One group version's resources in the aggregated form: each resource
/// with its subresources (`pods/log` under `pods`).
fn discovery_version(group: &str, version: &str, res: &[Res]) -> Value {
    let kind = |k: &str| json!({"group": group, "version": version, "kind": k});
    let resources: Vec<Value> = res
        .iter()
        .filter(|r| !r.name.contains('/'))
        .map(|r| {
            let subs: Vec<Value> = res
                .iter()
                .filter_map(|s| {
                    let sub = s.name.strip_prefix(r.name)?.strip_prefix('/')?;
                    Some(json!({"subresource": sub, "responseKind": kind(s.kind), "verbs": s.verbs}))
                })
                .collect();
            let mut v = json!({
                "resource": r.name,
                "responseKind": kind(r.kind),
                "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                "singularResource": r.singular,
                "verbs": r.verbs,
            });
            if !r.short.is_empty() {
                v["shortNames"] = json!(r.short);
            }
            if !r.categories.is_empty() {
                v["categories"] = json!(r.categories);
            }
            if !subs.is_empty() {
                v["subresources"] = json!(subs);
            }
            v
        })
        .collect();
    json!({"version": version, "resources": resources, "freshness": "Current"})
}

/// The APIGroupDiscoveryList of `/api` (`core`: the core group alone) or
/// `/apis` (every named group, preferred version first).
pub fn aggregated(form: Aggregated, core: bool) -> Value {
    let groups: Vec<&str> = if core { vec![""] } else { named_groups() };
    let items: Vec<Value> = groups
        .into_iter()
        .map(|g| {
            let versions: Vec<Value> = GROUP_VERSIONS
                .iter()
                .filter(|(gg, _, _)| *gg == g)
                .map(|(_, v, res)| discovery_version(g, v, res))
                .collect();
            let mut meta = json!({"creationTimestamp": null});
            if !g.is_empty() {
                meta["name"] = json!(g);
            }
            json!({"metadata": meta, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": format!("apidiscovery.k8s.io/{}", form.version()),
        "metadata": {}, "items": items})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_lists_what_kubectl_needs() {
        assert_eq!(version()["minor"], "33");
        assert!(version()["gitVersion"].as_str().unwrap().starts_with("v1.33.0-podwarden."));
        let core = resources("", "v1").unwrap();
        let pods = core["resources"].as_array().unwrap().iter().find(|r| r["name"] == "pods").unwrap();
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["categories"], json!(["all"]));
        assert_eq!(pods["singularName"], "pod");
        assert!(resources("metrics.k8s.io", "v1beta1").is_some());
        assert!(resources("coordination.k8s.io", "v1").is_none());
        let g = groups();
        assert_eq!(g["groups"][0]["preferredVersion"]["groupVersion"], "metrics.k8s.io/v1beta1");
        assert_eq!(g["groups"][1]["versions"].as_array().unwrap().len(), 3);
        let cm = core["resources"].as_array().unwrap().iter().find(|r| r["name"] == "configmaps").unwrap();
        assert!(cm["verbs"].as_array().unwrap().contains(&json!("patch")), "{cm}");
    }

    #[test]
    fn accept_headers_pick_the_aggregated_form_kubectl_offers_first() {
        // kubectl 1.33 and 1.27 as they send it
        let k133 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        let k127 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(Aggregated::negotiate(k133), Some(Aggregated::V2));
        assert_eq!(Aggregated::negotiate(k127), Some(Aggregated::V2beta1));
        let proto = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList, application/json; g=apidiscovery.k8s.io; v=v2beta1; as=APIGroupDiscoveryList";
        assert_eq!(Aggregated::negotiate(proto), Some(Aggregated::V2beta1), "protobuf is skipped, spaces allowed");
        assert_eq!(Aggregated::negotiate("application/json"), None);
        assert_eq!(Aggregated::negotiate("application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList"), None);
        assert_eq!(Aggregated::negotiate("application/json;as=Table;v=v1;g=meta.k8s.io"), None);
    }

    #[test]
    fn the_aggregated_list_holds_every_resource_with_its_subresources() {
        let core = aggregated(Aggregated::V2, true);
        assert_eq!(core["apiVersion"], "apidiscovery.k8s.io/v2");
        assert_eq!(core["kind"], "APIGroupDiscoveryList");
        let items = core["items"].as_array().unwrap();
        assert_eq!(items.len(), 1);
        assert!(items[0]["metadata"].get("name").is_none(), "the core group has no name");
        let v1 = &items[0]["versions"][0];
        assert_eq!((v1["version"].as_str(), v1["freshness"].as_str()), (Some("v1"), Some("Current")));
        let res = v1["resources"].as_array().unwrap();
        assert!(res.iter().all(|r| !r["resource"].as_str().unwrap().contains('/')));
        let pods = res.iter().find(|r| r["resource"] == "pods").unwrap();
        assert_eq!(pods["scope"], "Namespaced");
        assert_eq!(pods["singularResource"], "pod");
        assert_eq!(pods["responseKind"], json!({"group": "", "version": "v1", "kind": "Pod"}));
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["categories"], json!(["all"]));
        let subs: Vec<&str> =
            pods["subresources"].as_array().unwrap().iter().map(|s| s["subresource"].as_str().unwrap()).collect();
        assert_eq!(subs, ["attach", "exec", "log", "portforward", "status"]);
        let exec = pods["subresources"].as_array().unwrap().iter().find(|s| s["subresource"] == "exec").unwrap();
        assert_eq!(exec["responseKind"]["kind"], "PodExecOptions");
        assert_eq!(exec["verbs"], json!(["create", "get"]));
        let nodes = res.iter().find(|r| r["resource"] == "nodes").unwrap();
        assert_eq!(nodes["scope"], "Cluster");
        // every plain resource is in the aggregated form
        let plain = resources("", "v1").unwrap();
        assert_eq!(
            plain["resources"].as_array().unwrap().len(),
            res.len() + pods["subresources"].as_array().unwrap().len()
        );
        let apis = aggregated(Aggregated::V2beta1, false);
        assert_eq!(apis["apiVersion"], "apidiscovery.k8s.io/v2beta1");
        let names: Vec<&str> =
            apis["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["metrics.k8s.io", "authentication.k8s.io"]);
        let authn = &apis["items"][1]["versions"];
        assert_eq!(authn[0]["version"], "v1", "the preferred version first");
        let pm = &apis["items"][0]["versions"][0]["resources"][1];
        assert_eq!(pm["responseKind"], json!({"group": "metrics.k8s.io", "version": "v1beta1", "kind": "PodMetrics"}));
    }
}

//! Discovery as the API server answers it without aggregation: `/version`,
//! `/api`, `/apis`, and each group version's APIResourceList. kubectl
//! 1.27–1.33 offer the aggregated form first and take these plain answers
//! (the `Content-Type` says which it got).

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

pub fn core_versions(server: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}]})
}

/// The groups besides core, each with its versions (preferred first).
pub const GROUPS: &[(&str, &[&str])] =
    &[("metrics.k8s.io", &["v1beta1"]), ("authentication.k8s.io", &["v1", "v1beta1", "v1alpha1"])];

pub fn groups() -> Value {
    let groups: Vec<Value> = GROUPS
        .iter()
        .map(|(g, vs)| {
            let versions: Vec<Value> =
                vs.iter().map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v})).collect();
            json!({"name": g, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// One resource: (name, namespaced, kind, verbs, short names, categories).
type Res =
    (&'static str, bool, &'static str, &'static [&'static str], &'static [&'static str], &'static [&'static str]);

const CORE: &[Res] = &[
    ("configmaps", true, "ConfigMap", &["get", "list", "watch"], &["cm"], &[]),
    ("events", true, "Event", &["get", "list", "watch"], &["ev"], &[]),
    ("namespaces", false, "Namespace", &["get", "list", "watch"], &["ns"], &[]),
    ("nodes", false, "Node", &["get", "list", "watch"], &["no"], &[]),
    ("pods", true, "Pod", &["create", "delete", "get", "list", "patch", "watch"], &["po"], &["all"]),
    ("pods/attach", true, "PodAttachOptions", &["create", "get"], &[], &[]),
    ("pods/exec", true, "PodExecOptions", &["create", "get"], &[], &[]),
    ("pods/log", true, "Pod", &["get"], &[], &[]),
    ("pods/portforward", true, "PodPortForwardOptions", &["create", "get"], &[], &[]),
    ("pods/status", true, "Pod", &["get"], &[], &[]),
    ("secrets", true, "Secret", &["get", "list", "watch"], &[], &[]),
];

const METRICS: &[Res] = &[
    ("nodes", false, "NodeMetrics", &["get", "list"], &[], &[]),
    ("pods", true, "PodMetrics", &["get", "list"], &[], &[]),
];

const AUTHN: &[Res] = &[("selfsubjectreviews", false, "SelfSubjectReview", &["create"], &[], &[])];

fn list(group_version: &str, res: &[Res]) -> Value {
    let resources: Vec<Value> = res
        .iter()
        .map(|(name, namespaced, kind, verbs, short, cats)| {
            let mut r =
                json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": verbs});
            if !short.is_empty() {
                r["shortNames"] = json!(short);
            }
            if !cats.is_empty() {
                r["categories"] = json!(cats);
            }
            r
        })
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
}

/// The APIResourceList of `group/version` (`""` group: core `v1`).
pub fn resources(group: &str, version: &str) -> Option<Value> {
    match (group, version) {
        ("", "v1") => Some(list("v1", CORE)),
        ("metrics.k8s.io", "v1beta1") => Some(list("metrics.k8s.io/v1beta1", METRICS)),
        ("authentication.k8s.io", "v1" | "v1beta1" | "v1alpha1") => {
            Some(list(&format!("authentication.k8s.io/{version}"), AUTHN))
        }
        _ => None,
    }
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
        assert!(resources("metrics.k8s.io", "v1beta1").is_some());
        assert!(resources("coordination.k8s.io", "v1").is_none());
        let g = groups();
        assert_eq!(g["groups"][0]["preferredVersion"]["groupVersion"], "metrics.k8s.io/v1beta1");
    }
}

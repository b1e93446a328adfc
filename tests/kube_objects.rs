//! The Kubernetes API's writes of local ConfigMaps and Secrets, its
//! refusal of an invalid pod (every refused field), its aggregated
//! discovery and the kubelet's `/run`, in process: the agent's
//! parts on the fake runtime, `Ops` over a staticPodPath in a temp dir
//! whose "rescan" is the manifest source's scan run at once, and requests
//! handed to `routes::handle` as the HTTPS server hands them.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use common::*;
use parking_lot::Mutex;
use podwarden::agent::source::file::FileSource;
use podwarden::api::kube::authz::{Authorizer, User};
use podwarden::api::kube::ctx::Ctx;
use podwarden::api::kube::routes;
use podwarden::api::kube::watch::Hub;
use podwarden::api::kube::wire::{Reply, Request};
use podwarden::api::ops::{Ops, OpsConfig};
use podwarden::config::api_authz::{ApiAuthorization, AuthzRule, Right};
use serde_json::{Value, json};

struct Api {
    h: Harness,
    ctx: Ctx,
    dir: PathBuf,
}

fn api() -> Api {
    let h = Harness::new();
    let dir = h.root.0.join("manifests");
    std::fs::create_dir_all(&dir).unwrap();
    let source = Arc::new(Mutex::new(FileSource::new(&dir, h.parts.node_name.clone())));
    let agent = h.agent.clone();
    let rescan: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        if let Some(objects) = source.lock().scan().objects {
            agent.apply_objects(objects);
        }
    });
    let ops = Ops::new(
        h.parts.clone(),
        OpsConfig {
            static_pod_path: dir.clone(),
            pod_logs_dir: h.root.0.join("logs"),
            node_name: h.parts.node_name.clone(),
            rescan,
            root_pod_security: podwarden::model::pss::Level::Privileged,
            group_pod_security: podwarden::model::pss::Level::Baseline,
        },
    );
    let mut collector = podwarden::api::kube::resources::Collector::new(h.parts.clone());
    let ctx = Ctx {
        ops,
        hub: Hub::new(Box::new(move || collector.delta())),
        authz: Authorizer::new(ApiAuthorization {
            rules: vec![AuthzRule {
                users: vec!["bob".into()],
                verbs: vec![Right::Read],
                namespaces: vec!["e2e".into()],
                ..Default::default()
            }],
            ..Default::default()
        }),
        healthy_within: Duration::from_secs(60),
        server_address: "127.0.0.1:10250".into(),
        stop: Arc::new(AtomicBool::new(false)),
        cluster_auth: Default::default(),
    };
    Api { h, ctx, dir }
}

fn admin() -> User {
    User { name: "admin".into(), groups: vec!["podwarden:admins".into()], cluster: false }
}

fn bob() -> User {
    User { name: "bob".into(), groups: Vec::new(), cluster: false }
}

/// (status, content type, body as JSON or text).
fn call(api: &Api, user: &User, method: &str, target: &str, ctype: &str, body: &str) -> (u16, String, Value) {
    let (path, query) = podwarden::api::kube::wire::split_target(target);
    let mut headers = vec![("accept".to_string(), "application/json".to_string())];
    if !ctype.is_empty() {
        headers.push(("content-type".into(), ctype.into()));
    }
    let req = Request { method: method.into(), path, query, headers, body: body.as_bytes().to_vec() };
    match routes::handle(&api.ctx, Some(user), &req) {
        Reply::Full { status, content_type, body } => {
            let v =
                serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
            (status, content_type.to_string(), v)
        }
        other => panic!("{method} {target}: {other:?}"),
    }
}

const CMS: &str = "/api/v1/namespaces/e2e/configmaps";
const SECRETS: &str = "/api/v1/namespaces/e2e/secrets";

fn file_mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn config_maps_are_created_patched_and_deleted_as_files_of_their_own() {
    let api = api();
    let a = admin();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app", "labels": {"x": "1"}},
        "data": {"a": "1", "b": "true", "c": "0123", "n": "null", "multi": "l1\nl2\n", "u": "é: ünï"},
        "binaryData": {"blob": "AAEC"}});
    let (code, _, got) =
        call(&api, &a, "POST", &format!("{CMS}?fieldManager=kubectl-create"), "application/json", &cm.to_string());
    assert_eq!(code, 201, "{got}");
    assert_eq!(got["data"], cm["data"], "the values survive the file's YAML");
    assert_eq!(got["binaryData"]["blob"], "AAEC");
    assert_eq!(got["metadata"]["namespace"], "e2e");
    assert!(got["metadata"]["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()));
    assert_eq!(got["metadata"]["managedFields"][0]["manager"], "kubectl-create");
    let file = api.dir.join("e2e_configmap_app.yaml");
    assert_eq!(files(&api.dir), ["e2e_configmap_app.yaml"]);
    assert_eq!(file_mode(&file), 0o600);
    assert_eq!(got["metadata"]["annotations"]["podwarden.io/config.file"], file.display().to_string());
    // the same name again
    let (code, _, got) = call(&api, &a, "POST", CMS, "application/json", &cm.to_string());
    assert_eq!((code, got["reason"].as_str()), (409, Some("AlreadyExists")), "{got}");
    // a strategic merge patch: a key changed, one removed
    let p = r#"{"data": {"a": "2", "b": null}}"#;
    let (code, _, got) = call(
        &api,
        &a,
        "PATCH",
        &format!("{CMS}/app?fieldManager=kubectl"),
        "application/strategic-merge-patch+json",
        p,
    );
    assert_eq!(code, 200, "{got}");
    assert_eq!((got["data"]["a"].as_str(), got["data"].get("b")), (Some("2"), None));
    let (_, _, read) = call(&api, &a, "GET", &format!("{CMS}/app"), "", "");
    assert_eq!(read["data"], got["data"], "a read shows the write");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("# ConfigMap written by podwarden") && text.contains("a: '2'"), "{text}");
    // JSON and merge patches
    let (code, _, got) = call(
        &api,
        &a,
        "PATCH",
        &format!("{CMS}/app"),
        "application/json-patch+json",
        r#"[{"op": "add", "path": "/data/j", "value": "x"}]"#,
    );
    assert_eq!((code, got["data"]["j"].as_str()), (200, Some("x")), "{got}");
    let (code, _, got) = call(
        &api,
        &a,
        "PATCH",
        &format!("{CMS}/app"),
        "application/merge-patch+json",
        r#"{"metadata": {"labels": {"y": "2"}}}"#,
    );
    assert_eq!((code, got["metadata"]["labels"]["y"].as_str()), (200, Some("2")), "{got}");
    // a stale resourceVersion is a conflict
    let (code, _, got) = call(
        &api,
        &a,
        "PATCH",
        &format!("{CMS}/app"),
        "application/merge-patch+json",
        r#"{"metadata": {"resourceVersion": "999999"}, "data": {"a": "3"}}"#,
    );
    assert_eq!(code, 409, "{got}");
    // invalid: the API server's 422 with its causes; nothing written
    let before = std::fs::read_to_string(&file).unwrap();
    let (code, _, got) = call(
        &api,
        &a,
        "PATCH",
        &format!("{CMS}/app"),
        "application/merge-patch+json",
        r#"{"data": {"a b": "x", "c d": "y"}}"#,
    );
    assert_eq!((code, got["reason"].as_str()), (422, Some("Invalid")), "{got}");
    assert!(got["message"].as_str().unwrap().starts_with("ConfigMap \"app\" is invalid: [data"), "{got}");
    // every bad key, one cause each, as the API server lists them
    let causes = got["details"]["causes"].as_array().unwrap();
    let fields: Vec<&str> = causes.iter().map(|c| c["field"].as_str().unwrap()).collect();
    assert_eq!(fields, ["data[\"a b\"]", "data[\"c d\"]"], "{got}");
    assert_eq!(got["details"]["causes"][0]["reason"], "FieldValueInvalid", "{got}");
    let (code, _, got) = call(
        &api,
        &a,
        "PATCH",
        &format!("{CMS}/app?fieldValidation=Strict"),
        "application/merge-patch+json",
        r#"{"dataa": {}}"#,
    );
    assert_eq!(code, 400, "{got}");
    assert!(got["message"].as_str().unwrap().contains("unknown field \"dataa\""), "{got}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
    // dry run: answered, not written
    let (code, _, got) = call(
        &api,
        &a,
        "PATCH",
        &format!("{CMS}/app?dryRun=All"),
        "application/merge-patch+json",
        r#"{"data": {"a": "dry"}}"#,
    );
    assert_eq!((code, got["data"]["a"].as_str()), (200, Some("dry")));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
    // a reader may not write; a write needs the namespace's write right
    for (m, t, ct, b) in [
        ("POST", CMS.to_string(), "application/json", cm.to_string()),
        ("PATCH", format!("{CMS}/app"), "application/merge-patch+json", "{}".to_string()),
        ("DELETE", format!("{CMS}/app"), "", String::new()),
    ] {
        let (code, _, got) = call(&api, &bob(), m, &t, ct, &b);
        assert_eq!(code, 403, "{m}: {got}");
        assert!(got["message"].as_str().unwrap().contains("User \"bob\" cannot"), "{got}");
    }
    // delete: the file goes, a read is 404
    let (code, _, got) =
        call(&api, &a, "DELETE", &format!("{CMS}/app"), "application/json", r#"{"propagationPolicy":"Background"}"#);
    assert_eq!((code, got["status"].as_str()), (200, Some("Success")), "{got}");
    assert!(files(&api.dir).is_empty());
    let (code, _, _) = call(&api, &a, "GET", &format!("{CMS}/app"), "", "");
    assert_eq!(code, 404);
    let (code, _, _) = call(&api, &a, "DELETE", &format!("{CMS}/app"), "", "");
    assert_eq!(code, 404);
}

#[test]
fn server_side_apply_creates_updates_and_reports_conflicts() {
    let api = api();
    let a = admin();
    let applied = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  k: one\n";
    let url = format!("{CMS}/ssa?fieldManager=alice");
    let (code, _, got) = call(&api, &a, "PATCH", &url, "application/apply-patch+yaml", applied);
    assert_eq!(code, 201, "{got}");
    assert_eq!(got["data"]["k"], "one");
    assert!(api.dir.join("e2e_configmap_ssa.yaml").exists());
    // the same apply again: nothing to write
    let (code, _, _) = call(&api, &a, "PATCH", &url, "application/apply-patch+yaml", applied);
    assert_eq!(code, 200);
    // another manager changing alice's field: 409 unless forced
    let bob_apply = applied.replace("one", "two");
    let (code, _, got) =
        call(&api, &a, "PATCH", &format!("{CMS}/ssa?fieldManager=bob"), "application/apply-patch+yaml", &bob_apply);
    assert_eq!((code, got["reason"].as_str()), (409, Some("Conflict")), "{got}");
    let (code, _, got) = call(
        &api,
        &a,
        "PATCH",
        &format!("{CMS}/ssa?fieldManager=bob&force=true"),
        "application/apply-patch+yaml",
        &bob_apply,
    );
    assert_eq!((code, got["data"]["k"].as_str()), (200, Some("two")), "{got}");
    // a name that is not the URL's
    let (code, _, _) =
        call(&api, &a, "PATCH", &format!("{CMS}/other?fieldManager=x"), "application/apply-patch+yaml", applied);
    assert_eq!(code, 400);
}

const PODS: &str = "/api/v1/namespaces/e2e/pods";

/// A pod with ten independent refused fields (in another order than the
/// API server reports them) and, in that order, the fields and reasons.
fn ten_errors() -> (Value, [(&'static str, &'static str); 10]) {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "Web_1"}, "spec": {
        "hostname": "Not_A_Label", "restartPolicy": "Sometimes", "dnsPolicy": "Nowhere",
        "terminationGracePeriodSeconds": -5,
        "initContainers": [{"name": "init", "image": "busybox:1", "terminationMessagePolicy": "Loud"}],
        "containers": [{"name": "app", "imagePullPolicy": "Sometimes", "ports": [{"containerPort": 70000}]}],
        "volumes": [{"name": "data", "hostPath": {"path": "relative/dir"}}]}});
    let refused = [
        ("metadata.name", "\"Web_1\" is not a valid DNS-1123 subdomain (lowercase letters, digits, '-', '.')"),
        ("spec.terminationGracePeriodSeconds", "-5 is negative; must be 0 or more"),
        ("spec.volumes[0].hostPath.path", "\"relative/dir\" must be an absolute path"),
        ("spec.containers[0].image", "missing; every container needs an image"),
        ("spec.containers[0].ports[0].containerPort", "70000 is not in 1-65535"),
        ("spec.containers[0].imagePullPolicy", "\"Sometimes\" is not one of Always, IfNotPresent, Never"),
        ("spec.initContainers[0].terminationMessagePolicy", "\"Loud\" is not one of File, FallbackToLogsOnError"),
        ("spec.restartPolicy", "\"Sometimes\" is not one of Always, OnFailure, Never"),
        ("spec.dnsPolicy", "\"Nowhere\" is not one of ClusterFirst, ClusterFirstWithHostNet, Default, None"),
        ("spec.hostname", "\"Not_A_Label\" is not a valid DNS-1123 label"),
    ];
    (pod, refused)
}

#[test]
fn an_invalid_pod_is_refused_with_every_field_as_the_api_server_lists_them() {
    let api = api();
    let a = admin();
    let (pod, refused) = ten_errors();
    let want_causes: Vec<Value> =
        refused.iter().map(|(f, m)| json!({"reason": "FieldValueInvalid", "field": f, "message": m})).collect();
    let shown: Vec<String> = refused.iter().map(|(f, m)| format!("{f}: {m}")).collect();
    let want_message = format!("Pod \"Web_1\" is invalid: [{}]", shown.join(", "));
    // create, and server-side apply of a new pod: the same 422
    let ssa = format!("{PODS}/Web_1?fieldManager=kubectl");
    for (method, target, ctype) in
        [("POST", PODS, "application/json"), ("PATCH", ssa.as_str(), "application/apply-patch+yaml")]
    {
        let (code, _, got) = call(&api, &a, method, target, ctype, &pod.to_string());
        assert_eq!((code, got["reason"].as_str()), (422, Some("Invalid")), "{method}: {got}");
        assert_eq!(got["message"], want_message.as_str(), "{method}");
        assert_eq!(got["details"]["name"], "Web_1", "{method}: {got}");
        assert_eq!(got["details"]["kind"], "Pod", "{method}: {got}");
        assert_eq!(got["details"]["causes"], Value::Array(want_causes.clone()), "{method}");
    }
    assert_eq!(files(&api.dir), Vec::<String>::new(), "nothing written");
    // fields podwarden does not implement: each a cause, with the rest
    let mut two = pod.clone();
    two["spec"]["hostUsers"] = json!(false);
    two["spec"]["containers"][0]["lifecycle"] = json!({"stopSignal": "SIGUSR1"});
    let (code, _, got) = call(&api, &a, "POST", PODS, "application/json", &two.to_string());
    assert_eq!(code, 422, "{got}");
    let fields: Vec<&str> =
        got["details"]["causes"].as_array().unwrap().iter().map(|c| c["field"].as_str().unwrap()).collect();
    assert_eq!(fields[..2], ["spec.containers[0].lifecycle.stopSignal", "spec.hostUsers"], "{got}");
    assert_eq!(fields[2..], refused.map(|(f, _)| f), "{got}");
    // a patch of a field podwarden does not implement: the same, checked
    // against the field table before anything is written
    let (code, _, got) = call(&api, &a, "PATCH", &ssa, "application/apply-patch+yaml", &two.to_string());
    assert_eq!(code, 422, "{got}");
    assert_eq!(
        got["message"],
        "Pod \"Web_1\" is invalid: [spec.containers[0].lifecycle.stopSignal: not supported by podwarden, \
         spec.hostUsers: false is not supported by podwarden (only true): user namespaces need the runtime's \
         support (containerd 2.0 or later), which the CRI of containerd 1.6 has not]",
        "{got}"
    );
    assert_eq!(files(&api.dir), Vec::<String>::new(), "nothing written");
}

#[test]
fn secrets_store_their_values_and_reads_leave_them_out() {
    let api = api();
    let a = admin();
    let s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db",
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"stringData\":{\"password\":\"hunter2\"}}"}},
        "stringData": {"password": "hunter2"}});
    let (code, _, got) = call(&api, &a, "POST", SECRETS, "application/json", &s.to_string());
    assert_eq!(code, 201, "{got}");
    assert_eq!(got["data"], json!({"password": ""}), "the answer leaves the value out");
    assert_eq!(got["type"], "Opaque");
    assert!(!got.to_string().contains("hunter2"), "{got}");
    let file = api.dir.join("e2e_secret_db.yaml");
    assert_eq!(file_mode(&file), 0o600);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("aHVudGVyMg==") && !text.contains("\nstringData:"),
        "stored as the API server stores it: {text}"
    );
    let (code, _, got) = call(&api, &a, "GET", &format!("{SECRETS}/db"), "", "");
    assert_eq!(code, 200);
    assert!(!got.to_string().contains("hunter2"), "{got}");
    assert_eq!(got["metadata"]["annotations"]["podwarden.io/data-redacted"], "true");
    // a patch works on the real values: a key added, the old one kept
    let (code, _, _) = call(
        &api,
        &a,
        "PATCH",
        &format!("{SECRETS}/db"),
        "application/strategic-merge-patch+json",
        r#"{"stringData": {"user": "me"}}"#,
    );
    assert_eq!(code, 200);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("aHVudGVyMg==") && text.contains("bWU="), "{text}");
    // a Secret read through the API and written back is refused
    let (_, _, read) = call(&api, &a, "GET", &format!("{SECRETS}/db"), "", "");
    let (code, _, got) = call(
        &api,
        &a,
        "PATCH",
        &format!("{SECRETS}/db"),
        "application/merge-patch+json",
        &json!({"metadata": read["metadata"], "data": read["data"]}).to_string(),
    );
    assert_eq!(code, 400, "{got}");
    assert!(got["message"].as_str().unwrap().contains("data-redacted"), "{got}");
    assert!(std::fs::read_to_string(&file).unwrap().contains("aHVudGVyMg=="));
    // the type never changes
    let (code, _, got) = call(
        &api,
        &a,
        "PATCH",
        &format!("{SECRETS}/db"),
        "application/merge-patch+json",
        r#"{"type": "kubernetes.io/basic-auth"}"#,
    );
    assert_eq!(code, 422, "{got}");
    assert_eq!(got["details"]["causes"][0]["field"], "type");
    assert!(got["message"].as_str().unwrap().contains("field is immutable"), "{got}");
    // a reader of pods never sees secrets
    let (code, _, _) = call(&api, &bob(), "GET", SECRETS, "", "");
    assert_eq!(code, 403);
}

#[test]
fn immutable_objects_keep_their_data_and_shared_files_are_refused_by_name() {
    let api = api();
    let a = admin();
    let frozen = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "frozen"}, "data": {"k": "1"}, "immutable": true});
    assert_eq!(call(&api, &a, "POST", CMS, "application/json", &frozen.to_string()).0, 201);
    let (code, _, got) = call(
        &api,
        &a,
        "PATCH",
        &format!("{CMS}/frozen"),
        "application/merge-patch+json",
        r#"{"data": {"k": "2"}, "immutable": false}"#,
    );
    assert_eq!(code, 422, "{got}");
    assert_eq!(
        got["message"],
        "ConfigMap \"frozen\" is invalid: [immutable: Forbidden: field is immutable when `immutable` is set, data: Forbidden: field is immutable when `immutable` is set]"
    );
    // its labels may change
    let (code, _, got) = call(
        &api,
        &a,
        "PATCH",
        &format!("{CMS}/frozen"),
        "application/merge-patch+json",
        r#"{"metadata": {"labels": {"l": "1"}}}"#,
    );
    assert_eq!((code, got["metadata"]["labels"]["l"].as_str()), (200, Some("1")), "{got}");
    // objects defined beside a pod, or beside each other: the file's
    let cm =
        |n: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {n}, namespace: e2e}}\ndata: {{k: v}}\n");
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: e2e}\nspec:\n  containers: [{name: c, image: busybox}]\n";
    std::fs::write(api.dir.join("web.yaml"), format!("{pod}---\n{}", cm("side"))).unwrap();
    std::fs::write(api.dir.join("pair.yaml"), format!("{}---\n{}", cm("one"), cm("two"))).unwrap();
    std::fs::write(api.dir.join("mine.yaml"), cm("alone")).unwrap();
    (api.ctx.ops.cfg.rescan)();
    for (name, file, beside) in [("side", "web.yaml", "pod e2e/web"), ("one", "pair.yaml", "ConfigMap e2e/two")] {
        for (m, ct, body) in [("PATCH", "application/merge-patch+json", r#"{"data": {"k": "w"}}"#), ("DELETE", "", "")]
        {
            let (code, _, got) = call(&api, &a, m, &format!("{CMS}/{name}"), ct, body);
            assert_eq!(code, 403, "{m} {name}: {got}");
            let msg = got["message"].as_str().unwrap();
            assert!(msg.contains(&api.dir.join(file).display().to_string()) && msg.contains(beside), "{msg}");
            assert!(msg.ends_with("edit that file"), "{msg}");
        }
    }
    // a hand-written file that holds one object alone is the object's
    let (code, _, _) =
        call(&api, &a, "PATCH", &format!("{CMS}/alone"), "application/merge-patch+json", r#"{"data": {"k": "w"}}"#);
    assert_eq!(code, 200);
    assert!(std::fs::read_to_string(api.dir.join("mine.yaml")).unwrap().contains("k: w"));
    assert_eq!(call(&api, &a, "DELETE", &format!("{CMS}/alone"), "", "").0, 200);
    assert!(!api.dir.join("mine.yaml").exists());
    // a file of the name that holds something else is never replaced
    std::fs::write(api.dir.join("e2e_configmap_taken.yaml"), "# not a manifest of the API's\n").unwrap();
    let taken = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "taken"}, "data": {"k": "v"}});
    assert_eq!(call(&api, &a, "POST", CMS, "application/json", &taken.to_string()).0, 201);
    assert_eq!(
        std::fs::read_to_string(api.dir.join("e2e_configmap_taken.yaml")).unwrap(),
        "# not a manifest of the API's\n"
    );
    assert!(api.dir.join("e2e_configmap_taken-2.yaml").exists());
    assert!(files(&api.dir).contains(&"web.yaml".to_string()));
}

#[test]
fn aggregated_discovery_is_negotiated_by_accept() {
    let api = api();
    let req = |accept: &str| Request {
        method: "GET".into(),
        path: "/apis".into(),
        headers: vec![("accept".into(), accept.into())],
        ..Default::default()
    };
    let v2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    match routes::handle(&api.ctx, Some(&admin()), &req(v2)) {
        Reply::Full { status: 200, content_type, body } => {
            assert_eq!(content_type, "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList");
            let v: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["kind"], "APIGroupDiscoveryList");
            assert_eq!(v["items"][0]["metadata"]["name"], "metrics.k8s.io");
        }
        other => panic!("{other:?}"),
    }
    match routes::handle(&api.ctx, Some(&admin()), &req("application/json")) {
        Reply::Full { status: 200, content_type, body } => {
            assert_eq!(content_type, "application/json");
            assert_eq!(serde_json::from_slice::<Value>(&body).unwrap()["kind"], "APIGroupList");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn run_answers_the_command_output_and_needs_exec() {
    let api = api();
    let p = arc(pod("web", "u1"));
    api.h.agent.apply_source(vec![p]);
    wait_for("container running", Duration::from_secs(10), || api.h.fake.live_containers("u1") == 1);
    api.h.fake.set_exec_result(
        "c",
        Some(podwarden::runtime::ExecResult { exit_code: 0, stdout: b"out\n".to_vec(), stderr: b"err\n".to_vec() }),
    );
    let (code, ctype, got) =
        call(&api, &admin(), "POST", "/run/default/web/c", "application/x-www-form-urlencoded", "cmd=ls+-l");
    assert_eq!((code, got.as_str()), (200, Some("out\nerr\n")));
    assert!(ctype.starts_with("text/plain"));
    let (code, _, _) = call(&api, &admin(), "POST", "/run/default/web/u1/c?cmd=ls", "", "");
    assert_eq!(code, 200, "with the pod's UID");
    let (code, _, _) = call(&api, &admin(), "POST", "/run/default/web/u2/c?cmd=ls", "", "");
    assert_eq!(code, 404, "another UID");
    let (code, _, _) = call(&api, &admin(), "GET", "/run/default/web/c?cmd=ls", "", "");
    assert_eq!(code, 405);
    let (code, _, got) = call(&api, &admin(), "POST", "/run/default/web/nope?cmd=ls", "", "");
    assert_eq!(code, 400, "{got}");
    let (code, _, got) = call(&api, &bob(), "POST", "/run/default/web/c?cmd=ls", "", "");
    assert_eq!(code, 403, "{got}");
    api.h.fake.set_exec_result(
        "c",
        Some(podwarden::runtime::ExecResult { exit_code: 2, stdout: b"half".to_vec(), stderr: Vec::new() }),
    );
    let (code, _, got) = call(&api, &admin(), "POST", "/run/default/web/c?cmd=false", "", "");
    assert_eq!((code, got["reason"].as_str()), (500, Some("NonZeroExitCode")), "{got}");
    assert_eq!(got["details"]["causes"][0]["message"], "2");
}

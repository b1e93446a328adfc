//! kubectl in the loop for the write path of the node's Kubernetes API:
//! the real kubectl 1.27 (OpenAPI v2 protobuf) and 1.33 (OpenAPI v3)
//! against a tiny plain-HTTP server in this test that serves discovery,
//! podwarden's OpenAPI documents and one namespace of pods through
//! `api::kube::write::patch` / `ssa`. Proves that default (strict) `kubectl
//! apply`, `apply --server-side`, `patch` (strategic, merge, JSON) and
//! `explain` work against those documents, and records the requests each
//! version makes.
//!
//! Needs the kubectl binaries (`kubectl.1.27`, `kubectl.1.33`) on PATH or
//! in /usr/lib/google-cloud-sdk/bin; fails with how to get them otherwise.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use podwarden::api::kube::openapi;
use podwarden::api::kube::write::{self, patch, ssa};
use podwarden::api::query::Query;
use podwarden::api::status::ApiError;
use serde_json::{Value, json};

fn kubectl(minor: u32) -> PathBuf {
    let name = format!("kubectl.1.{minor}");
    let mut dirs: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    dirs.push("/usr/lib/google-cloud-sdk/bin".into());
    dirs.push("/usr/local/bin".into());
    dirs.into_iter().map(|d| d.join(&name)).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!(
            "{name} not found on PATH or in /usr/lib/google-cloud-sdk/bin: install kubectl {minor} as {name} \
             (the google-cloud-sdk package ships kubectl.1.27 ... kubectl.1.33) to run this test"
        )
    })
}

#[derive(Default)]
struct State {
    pods: BTreeMap<String, Value>,
    resource_version: u64,
    requests: Vec<String>,
}

struct Server {
    port: u16,
    state: Arc<Mutex<State>>,
}

const NOW: &str = "2026-11-25T20:00:00Z";

fn status(e: &ApiError) -> (u16, Vec<(String, String)>, Vec<u8>) {
    (e.code, Vec::new(), e.body())
}

fn not_found(name: &str) -> ApiError {
    ApiError::missing(format!("pods {name:?} not found"))
}

fn json_ok(code: u16, v: &Value, warnings: &[String]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let headers = warnings.iter().map(|w| ("Warning".to_string(), format!("299 - {:?}", w))).collect();
    (code, headers, v.to_string().into_bytes())
}

fn handle(
    state: &Mutex<State>,
    minor: u32,
    v3: bool,
    method: &str,
    target: &str,
    ctype: &str,
    body: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut st = state.lock();
    st.requests.push(format!("{method} {target} {ctype}").trim_end().to_string());
    let pods_prefix = "/api/v1/namespaces/default/pods";
    match (method, path) {
        ("GET", "/version") => json_ok(200, &json!({"major": "1", "minor": minor.to_string(), "gitVersion": format!("v1.{minor}.0"), "platform": "linux/amd64"}), &[]),
        ("GET", "/api") => json_ok(200, &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}), &[]),
        ("GET", "/apis") => json_ok(200, &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []}), &[]),
        ("GET", "/api/v1") => json_ok(
            200,
            &json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod", "shortNames": ["po"],
                 "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]},
                {"name": "configmaps", "singularName": "configmap", "namespaced": true, "kind": "ConfigMap", "shortNames": ["cm"],
                 "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}]}),
            &[],
        ),
        ("GET", "/openapi/v2") => (
            200,
            // what the API server answers: the Accept value itself ('@') is no
            // media type Go's mime package parses
            vec![("Content-Type".into(), "application/octet-stream".into())],
            openapi::v2_protobuf(),
        ),
        ("GET", "/openapi/v3") if v3 => (200, vec![], openapi::v3_index()),
        ("GET", p) if v3 && p.starts_with("/openapi/v3/") => match openapi::v3_doc(&p["/openapi/v3/".len()..]) {
            Some(doc) => (200, vec![], doc),
            None => (404, vec![], b"{}".to_vec()),
        },
        ("POST", p) if p == pods_prefix => {
            let params = match write::Params::from_query(&Query::parse(query), NOW) {
                Ok(p) => p,
                Err(e) => return status(&e),
            };
            let mut pod: Value = match serde_json::from_slice(body) {
                Ok(v) => v,
                Err(e) => return status(&ApiError::bad_request(e.to_string())),
            };
            let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
            let warnings = match write::validate_fields("Pod", &name, &mut pod, params.field_validation) {
                Ok(w) => w,
                Err(e) => return status(&e),
            };
            st.resource_version += 1;
            pod["metadata"]["namespace"] = json!("default");
            pod["metadata"]["uid"] = json!(format!("uid-{name}"));
            pod["metadata"]["resourceVersion"] = json!(st.resource_version.to_string());
            let manager = params.field_manager.clone().unwrap_or_else(|| "unknown".into());
            ssa::record_update("Pod", None, &mut pod, &manager, NOW);
            st.pods.insert(name, pod.clone());
            json_ok(201, &pod, &warnings)
        }
        (m, p) if p.starts_with(&format!("{pods_prefix}/")) => {
            let name = p[pods_prefix.len() + 1..].to_string();
            let live = st.pods.get(&name).cloned();
            match (m, live) {
                ("GET", Some(pod)) => json_ok(200, &pod, &[]),
                ("PATCH", live) => {
                    let params = match write::Params::from_query(&Query::parse(query), NOW) {
                        Ok(p) => p,
                        Err(e) => return status(&e),
                    };
                    let result = match &live {
                        Some(l) => patch::apply("Pod", l, body, ctype, &params),
                        None if ctype.starts_with("application/apply-patch+yaml") => {
                            ssa::server_side_apply("Pod", None, body, &params).map(|mut p| {
                                p.object["metadata"]["namespace"] = json!("default");
                                p.object["metadata"]["uid"] = json!(format!("uid-{name}"));
                                p
                            })
                        }
                        None => Err(not_found(&name)),
                    };
                    match result {
                        Ok(mut out) => {
                            st.resource_version += 1;
                            out.object["metadata"]["resourceVersion"] = json!(st.resource_version.to_string());
                            st.pods.insert(name, out.object.clone());
                            json_ok(if live.is_some() { 200 } else { 201 }, &out.object, &out.warnings)
                        }
                        Err(e) => status(&e),
                    }
                }
                _ => status(&not_found(&name)),
            }
        }
        _ => (404, vec![], json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": format!("{path} not found")}).to_string().into_bytes()),
    }
}

fn serve_one(state: &Mutex<State>, minor: u32, v3: bool, stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
    let (mut length, mut ctype) = (0usize, String::new());
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = v.trim().parse().unwrap_or(0),
                "content-type" => ctype = v.trim().to_string(),
                _ => {}
            }
        }
    }
    let mut body = vec![0; length.min(4 << 20)];
    reader.read_exact(&mut body)?;
    let (code, headers, out) = handle(state, minor, v3, &method, &target, &ctype, &body);
    let mut w = stream;
    let mut head = format!("HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n", out.len());
    if !headers.iter().any(|(k, _)| k == "Content-Type") {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes())?;
    w.write_all(&out)?;
    w.flush()
}

/// The test server for kubectl 1.`minor`; `v3`: serve `/openapi/v3` (else 404).
fn start(minor: u32, v3: bool) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let state = Arc::new(Mutex::new(State::default()));
    let st = state.clone();
    podwarden::base::thread::spawn("kube-write-test", None, move || {
        for stream in listener.incoming().flatten() {
            let st = st.clone();
            let _ = podwarden::base::thread::spawn("kube-write-conn", None, move || {
                let _ = serve_one(&st, minor, v3, stream);
            });
        }
    })
    .unwrap();
    Server { port, state }
}

struct Kubectl {
    bin: PathBuf,
    dir: PathBuf,
}

impl Kubectl {
    fn new(minor: u32, server: &Server) -> Kubectl {
        let dir = std::env::temp_dir().join(format!("podwarden-kube-write-{minor}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: node\n  cluster:\n    server: http://127.0.0.1:{}\n\
             users:\n- name: me\n  user: {{}}\ncontexts:\n- name: node\n  context: {{cluster: node, user: me, namespace: default}}\n\
             current-context: node\n",
            server.port
        );
        std::fs::write(dir.join("config"), config).unwrap();
        Kubectl { bin: kubectl(minor), dir }
    }

    fn file(&self, name: &str, text: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }

    /// Run kubectl: (success, stdout, stderr).
    fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(&self.bin)
            .args([
                "--kubeconfig",
                &self.dir.join("config").to_string_lossy(),
                "--cache-dir",
                &self.dir.join("cache").to_string_lossy(),
                "--request-timeout=20s",
            ])
            .args(args)
            .env("HOME", &self.dir)
            .env("KUBE_EDITOR", "sed -i s/nginx:5/nginx:6/")
            .env_remove("KUBECONFIG")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args);
        assert!(ok, "kubectl {}: failed\nstdout: {out}\nstderr: {err}", args.join(" "));
        out
    }
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn pod_yaml(image: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels:\n    app: web\nspec:\n{extra}  containers:\n  - name: app\n    image: {image}\n"
    )
}

fn take_requests(server: &Server) -> Vec<String> {
    std::mem::take(&mut server.state.lock().requests)
}

fn pod(server: &Server) -> Value {
    server.state.lock().pods.get("web").cloned().expect("the pod exists")
}

fn writes_against(minor: u32, v3: bool) -> BTreeMap<&'static str, Vec<String>> {
    let server = start(minor, v3);
    let k = Kubectl::new(minor, &server);
    let mut seen = BTreeMap::new();

    // create, then update: client-side apply with strict validation
    let f = k.file("pod.yaml", &pod_yaml("nginx:1", ""));
    assert!(k.ok(&["apply", "-f", &f]).contains("pod/web created"));
    seen.insert("apply (create)", take_requests(&server));
    let f = k.file("pod.yaml", &pod_yaml("nginx:2", ""));
    assert!(k.ok(&["apply", "-f", &f]).contains("pod/web configured"));
    seen.insert("apply (update)", take_requests(&server));
    let p = pod(&server);
    assert_eq!(p["spec"]["containers"][0]["image"], "nginx:2");
    assert!(
        p["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap()
            .contains("nginx:2")
    );

    // an unknown field: refused by the server, named
    let f = k.file("bad.yaml", &pod_yaml("nginx:3", "  foo: 1\n"));
    let (ok, _, err) = k.run(&["apply", "-f", &f]);
    assert!(!ok, "apply of an unknown field succeeded");
    assert!(err.contains("strict decoding error: unknown field \"spec.foo\""), "{err}");
    seen.insert("apply (unknown field)", take_requests(&server));
    assert_eq!(pod(&server)["spec"]["containers"][0]["image"], "nginx:2");

    // patches of every type
    k.ok(&["patch", "pod", "web", "-p", r#"{"metadata":{"labels":{"tier":"front"}}}"#]);
    k.ok(&["patch", "pod", "web", "--type=merge", "-p", r#"{"metadata":{"labels":{"app":null}}}"#]);
    k.ok(&[
        "patch",
        "pod",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/containers/0/image","value":"nginx:4"}]"#,
    ]);
    seen.insert("patch (strategic, merge, json)", take_requests(&server));
    let p = pod(&server);
    assert_eq!(p["metadata"]["labels"], json!({"tier": "front"}));
    assert_eq!(p["spec"]["containers"][0]["image"], "nginx:4");
    let (ok, _, err) = k.run(&[
        "patch",
        "pod",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/spec/containers/0/image","value":"x"}]"#,
    ]);
    assert!(!ok && err.contains("testing value /spec/containers/0/image failed"), "{err}");
    take_requests(&server);

    // server-side apply: the image was last set by the JSON patch's manager
    let f = k.file("pod.yaml", &pod_yaml("nginx:5", ""));
    let (ok, _, err) = k.run(&["apply", "--server-side", "-f", &f]);
    assert!(!ok && err.contains("conflict with \"kubectl-patch\""), "{err}");
    seen.insert("apply --server-side (conflict)", take_requests(&server));
    assert!(k.ok(&["apply", "--server-side", "--force-conflicts", "-f", &f]).contains("serverside-applied"));
    seen.insert("apply --server-side --force-conflicts", take_requests(&server));
    let p = pod(&server);
    assert_eq!(p["spec"]["containers"][0]["image"], "nginx:5");
    let managers: Vec<&str> =
        p["metadata"]["managedFields"].as_array().unwrap().iter().filter_map(|e| e["manager"].as_str()).collect();
    assert!(managers.contains(&"kubectl"), "{managers:?}");

    // edit (strategic merge patch), label and annotate
    k.ok(&["edit", "pod", "web"]);
    k.ok(&["label", "pod", "web", "edited=yes"]);
    k.ok(&["annotate", "pod", "web", "note=hi"]);
    seen.insert("edit, label, annotate", take_requests(&server));
    let p = pod(&server);
    assert_eq!(p["spec"]["containers"][0]["image"], "nginx:6");
    assert_eq!(p["metadata"]["labels"]["edited"], "yes");
    assert_eq!(p["metadata"]["annotations"]["note"], "hi");

    // --validate=warn: the unknown field dropped, the server's warning shown
    let f = k.file("warn.yaml", &pod_yaml("nginx:6", "  foo: 1\n"));
    let (ok, _, err) = k.run(&["apply", "--server-side", "--force-conflicts", "--validate=warn", "-f", &f]);
    assert!(ok, "{err}");
    assert!(err.contains("Warning: unknown field \"spec.foo\""), "{err}");
    assert!(pod(&server)["spec"].get("foo").is_none());
    seen.insert("apply --server-side --validate=warn", take_requests(&server));

    // explain: the definitions
    let out = k.ok(&["explain", "pod.spec.containers"]);
    assert!(out.contains("List of containers belonging to the pod"), "{out}");
    assert!(out.contains("image"), "{out}");
    let out = k.ok(&["explain", "configmap.data"]);
    assert!(out.contains("Data contains the configuration data"), "{out}");
    seen.insert("explain", take_requests(&server));
    seen
}

fn report(minor: u32, seen: &BTreeMap<&'static str, Vec<String>>) {
    for (what, reqs) in seen {
        eprintln!("kubectl 1.{minor} {what}:");
        for r in reqs {
            eprintln!("    {r}");
        }
    }
}

fn any(seen: &BTreeMap<&'static str, Vec<String>>, step: &str, pred: impl Fn(&str) -> bool) -> bool {
    seen[step].iter().any(|r| pred(r))
}

#[test]
fn kubectl_1_27_writes_with_the_openapi_v2_protobuf() {
    // without /openapi/v3, so that everything rests on the v2 protobuf
    let seen = writes_against(27, false);
    report(27, &seen);
    assert!(any(&seen, "apply (update)", |r| r.starts_with("GET /openapi/v2")));
    assert!(any(&seen, "explain", |r| r.starts_with("GET /openapi/v2")));
    assert!(any(&seen, "apply (update)", |r| r.starts_with("PATCH /api/v1/namespaces/default/pods/web?")
        && r.contains("fieldValidation=Strict")
        && r.ends_with("application/strategic-merge-patch+json")));
    assert!(any(&seen, "apply --server-side --force-conflicts", |r| r.contains("fieldManager=kubectl")
        && r.contains("force=true")
        && r.ends_with("application/apply-patch+yaml")));
}

#[test]
fn kubectl_1_33_writes_with_the_openapi_v3_documents() {
    let seen = writes_against(33, true);
    report(33, &seen);
    assert!(any(&seen, "apply (update)", |r| r.starts_with("GET /openapi/v3?")));
    assert!(seen.values().flatten().any(|r| r.starts_with("GET /openapi/v3/api/v1?hash=")));
    assert!(any(&seen, "apply (update)", |r| r.contains("fieldValidation=Strict")
        && r.ends_with("application/strategic-merge-patch+json")));
}

/// The v2 protobuf read back by an independent decoder: protoc, with the
/// message subset in tests/fixtures (field numbers and wire types as
/// kubectl's parser expects them). Every field must be known to it.
#[test]
fn v2_protobuf_decodes_with_protoc() {
    let dir = std::env::temp_dir().join(format!("podwarden-openapi-v2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bytes = dir.join("doc.pb");
    std::fs::write(&bytes, openapi::v2_protobuf()).unwrap();
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let out = Command::new(std::env::var("PROTOC").unwrap_or_else(|_| "protoc".into()))
        .arg(format!("-I{fixtures}"))
        .args(["--decode=openapi.v2.Document", "openapi_v2_subset.proto"])
        .stdin(std::fs::File::open(&bytes).unwrap())
        .output()
        .expect("run protoc (Debian package protobuf-compiler, also needed by the build)");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "protoc --decode failed: {}", String::from_utf8_lossy(&out.stderr));
    let unknown: Vec<&str> =
        text.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())).collect();
    assert!(unknown.is_empty(), "fields protoc does not know: {:?}", &unknown[..unknown.len().min(5)]);
    assert!(text.starts_with("swagger: \"2.0\""), "{}", &text[..200.min(text.len())]);
    assert!(text.contains("name: \"/api/v1/namespaces/{namespace}/pods/{name}\""));
    assert!(text.contains("name: \"fieldValidation\""));
    assert!(text.contains("name: \"x-kubernetes-group-version-kind\""));
    assert!(text.contains("yaml: \"{\\\"group\\\":\\\"\\\",\\\"kind\\\":\\\"Pod\\\",\\\"version\\\":\\\"v1\\\"}\""));
    assert!(text.contains("name: \"io.k8s.api.core.v1.PodSpec\""));
    assert!(text.contains("description: \"List of containers belonging to the pod."));
}

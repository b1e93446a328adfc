//! The real kubectl (1.27 and 1.33) and a raw TLS client against a
//! running agent's Kubernetes API: the binaries found on PATH or in
//! /usr/lib/google-cloud-sdk/bin, kubeconfigs from `podwarden kubeconfig`,
//! HOME and KUBECONFIG in the test's temp dir (kubectl caches discovery
//! under ~/.kube/cache).

use std::net::TcpStream;
use std::sync::Arc;

use super::*;

pub const VERSIONS: &[&str] = &["1.27", "1.33"];

/// kubectl 1.`minor`: in /usr/lib/google-cloud-sdk/bin or on PATH.
pub fn kubectl_bin(minor: &str) -> PathBuf {
    let name = format!("kubectl.{minor}");
    let mut places = vec![PathBuf::from("/usr/lib/google-cloud-sdk/bin").join(&name)];
    if let Some(path) = std::env::var_os("PATH") {
        places.extend(std::env::split_paths(&path).map(|d| d.join(&name)));
    }
    places.into_iter().find(|p| p.is_file()).unwrap_or_else(|| {
        panic!(
            "{name} is missing: these tests need the real kubectl {minor} as {name} in /usr/lib/google-cloud-sdk/bin \
             or on PATH (install the Google Cloud SDK's kubectl component, or put the binary there)"
        )
    })
}

/// kubectl `minor` with `kubeconfig` and the agent's temp dir as HOME.
pub fn kubectl_cmd(a: &Agent, minor: &str, kubeconfig: &Path) -> Command {
    let mut c = Command::new(kubectl_bin(minor));
    c.env("HOME", &a.dir.0).env("KUBECONFIG", kubeconfig);
    c
}

/// Run kubectl `minor` with `kubeconfig`: (exit code, stdout, stderr).
pub fn kubectl(a: &Agent, minor: &str, kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    // the flag first: after `exec ... --` it would be the command's
    let out = kubectl_cmd(a, minor, kubeconfig)
        .args(["--request-timeout", "20s"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// kubectl's stdout; the call must succeed.
pub fn ok(a: &Agent, minor: &str, kc: &Path, args: &[&str]) -> String {
    let (code, out, err) = kubectl(a, minor, kc, args);
    assert_eq!(code, 0, "kubectl {minor} {args:?} failed: {err}\n{out}");
    out
}

/// kubectl's stderr; the call must fail.
pub fn fails(a: &Agent, minor: &str, kc: &Path, args: &[&str]) -> String {
    let (code, out, err) = kubectl(a, minor, kc, args);
    assert_ne!(code, 0, "kubectl {minor} {args:?} succeeded: {out}");
    err
}

/// `podwarden kubeconfig ARGS` against the agent's config, written to a
/// file (once the Kubernetes API listens: its CA is made before).
pub fn kubeconfig(a: &Agent, file: &str, args: &[&str]) -> PathBuf {
    wait_for("the Kubernetes API listening", Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", a.kube_port)).is_ok()
    });
    let out = Command::new(BIN)
        .arg("kubeconfig")
        .args(args)
        .arg("--config")
        .arg(a.dir.0.join("config.yaml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "podwarden kubeconfig {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let path = a.dir.0.join(file);
    std::fs::write(&path, &out.stdout).unwrap();
    path
}

/// A TLS connection to the agent's Kubernetes API with the kubeconfig's
/// CA and client certificate.
pub type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

pub fn tls_connect(a: &Agent, kubeconfig: &Path) -> Tls {
    let kc: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(kubeconfig).unwrap()).unwrap();
    let field = |v: &Value, k: &str| -> Vec<u8> {
        let b64 = v[k].as_str().unwrap_or_else(|| panic!("{k} in the kubeconfig"));
        let pem: k8s_openapi::ByteString = serde_json::from_value(Value::String(b64.into())).unwrap();
        pem.0
    };
    let pem = |b: Vec<u8>| podwarden::api::kube::pki::pem_der(&String::from_utf8(b).unwrap()).unwrap();
    let ca = pem(field(&kc["clusters"][0]["cluster"], "certificate-authority-data"));
    let cert = pem(field(&kc["users"][0]["user"], "client-certificate-data"));
    let key = pem(field(&kc["users"][0]["user"], "client-key-data"));
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from(ca)).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![rustls::pki_types::CertificateDer::from(cert)],
            rustls::pki_types::PrivateKeyDer::Pkcs8(rustls::pki_types::PrivatePkcs8KeyDer::from(key)),
        )
        .unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", a.kube_port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    rustls::StreamOwned::new(rustls::ClientConnection::new(Arc::new(config), name).unwrap(), tcp)
}

/// Send one request and read the answer's head: (status, head text).
pub fn request_head(tls: &mut Tls, method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    let mut head = format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    tls.write_all(head.as_bytes()).unwrap();
    tls.write_all(body).unwrap();
    tls.flush().unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(tls.read(&mut b).unwrap(), 1, "the answer's head ended early: {}", String::from_utf8_lossy(&got));
        got.push(b[0]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, text)
}

/// One whole request: (status, head, body) of a `Content-Length` answer.
pub fn request(
    tls: &mut Tls,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let (code, head) = request_head(tls, method, target, headers, body);
    let len: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0);
    let mut out = vec![0u8; len];
    tls.read_exact(&mut out).unwrap();
    (code, head, out)
}

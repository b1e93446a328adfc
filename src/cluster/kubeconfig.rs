//! Kubeconfig files, as the kubelet reads and writes them: the current
//! context's cluster (server, CA) and user (client certificate and key, or
//! a token), each either inline (`*-data`, base64) or a file path (relative
//! to the kubeconfig's folder).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::ClusterError;
use super::http::{Client, Credentials};
use crate::api::kube::pki;

/// At most this many bytes of a kubeconfig or a file it names.
pub const MAX_FILE: u64 = 1 << 20;

/// What a kubeconfig's current context says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kubeconfig {
    pub path: PathBuf,
    pub server: String,
    pub ca_pem: String,
    pub user: User,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum User {
    Token(String),
    Cert { cert_pem: String, key_pem: String },
}

fn bad(path: &Path, why: impl std::fmt::Display) -> ClusterError {
    ClusterError::Config(format!("kubeconfig {}: {why}", path.display()))
}

fn read_text(path: &Path) -> Result<String, ClusterError> {
    crate::base::fsutil::read_host_file(path, MAX_FILE).map_err(|e| bad(path, e))
}

impl Kubeconfig {
    /// Read `path` (its current context, or its only one).
    pub fn read(path: &Path) -> Result<Self, ClusterError> {
        let text = read_text(path)?;
        let v: Value = serde_yaml_ng::from_str(&text).map_err(|e| bad(path, e))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let named = |list: &str, name: &str| -> Option<Value> {
            v[list].as_array()?.iter().find(|e| e["name"].as_str() == Some(name)).cloned()
        };
        let context = match v["current-context"].as_str().filter(|c| !c.is_empty()) {
            Some(c) => named("contexts", c).ok_or_else(|| bad(path, format!("no context {c:?}")))?,
            None => match v["contexts"].as_array().map(Vec::as_slice) {
                Some([only]) => only.clone(),
                _ => return Err(bad(path, "no current-context")),
            },
        };
        let cluster_name =
            context["context"]["cluster"].as_str().ok_or_else(|| bad(path, "the context names no cluster"))?;
        let user_name = context["context"]["user"].as_str().ok_or_else(|| bad(path, "the context names no user"))?;
        let cluster =
            named("clusters", cluster_name).ok_or_else(|| bad(path, format!("no cluster {cluster_name:?}")))?;
        let cluster = &cluster["cluster"];
        let server = cluster["server"].as_str().ok_or_else(|| bad(path, "the cluster has no server"))?.to_string();
        let pem = |data: &str, file: &str, what: &str, of: &Value| -> Result<Option<String>, ClusterError> {
            if let Some(d) = of[data].as_str() {
                let bytes = pki::decode_base64(d).ok_or_else(|| bad(path, format!("{data} is not base64")))?;
                return String::from_utf8(bytes).map(Some).map_err(|_| bad(path, format!("{data} is not PEM")));
            }
            match of[file].as_str() {
                Some(f) => read_text(&dir.join(f)).map(Some).map_err(|e| bad(path, format!("{what}: {e}"))),
                None => Ok(None),
            }
        };
        let ca_pem =
            pem("certificate-authority-data", "certificate-authority", "the CA", cluster)?.ok_or_else(|| {
                bad(path, "the cluster has no certificate-authority(-data): the server cannot be checked")
            })?;
        let user = named("users", user_name).ok_or_else(|| bad(path, format!("no user {user_name:?}")))?;
        let user = &user["user"];
        let user = if let Some(t) = user["token"].as_str() {
            User::Token(t.to_string())
        } else {
            let cert = pem("client-certificate-data", "client-certificate", "the client certificate", user)?;
            let key = pem("client-key-data", "client-key", "the client key", user)?;
            match (cert, key) {
                (Some(cert_pem), Some(key_pem)) => User::Cert { cert_pem, key_pem },
                _ => {
                    return Err(bad(
                        path,
                        format!("user {user_name:?} has neither a token nor a client certificate and key"),
                    ));
                }
            }
        };
        Ok(Kubeconfig { path: path.to_path_buf(), server, ca_pem, user })
    }

    /// A client of this kubeconfig's server as its user.
    pub fn client(&self) -> Result<Client, ClusterError> {
        let creds = match &self.user {
            User::Token(t) => Credentials::Token(t.clone()),
            User::Cert { cert_pem, key_pem } => {
                Credentials::Cert { cert_pem: cert_pem.clone(), key_pem: key_pem.clone() }
            }
        };
        Client::new(&self.server, Some(&self.ca_pem), creds)
    }
}

/// A kubeconfig's text: one cluster (`server`, CA inline), one user with
/// `user` (a token inline, or a client certificate and key by path: a
/// rotation replaces the file, not the kubeconfig), one current context.
pub fn render(server: &str, ca_pem: &str, user_name: &str, user: &UserRef<'_>) -> String {
    let user_fields = match user {
        UserRef::Token(t) => format!("    token: {t}\n"),
        UserRef::CertFile(p) => {
            let p = p.display();
            format!("    client-certificate: {p}\n    client-key: {p}\n")
        }
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: default-cluster\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\ncontexts:\n- name: default-context\n  context:\n    cluster: default-cluster\n    namespace: default\n    user: {user_name}\ncurrent-context: default-context\nusers:\n- name: {user_name}\n  user:\n{user_fields}",
        pki::base64(ca_pem.as_bytes())
    )
}

/// How [`render`] names the user's credentials.
pub enum UserRef<'a> {
    Token(&'a str),
    /// One PEM file with the certificate and its key.
    CertFile(&'a Path),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rendered_kubeconfig_reads_back_with_files_relative_to_it() {
        let dir = std::env::temp_dir().join(format!("podwarden-kc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ca = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let token = dir.join("token.conf");
        std::fs::write(
            &token,
            render(
                "https://127.0.0.1:6443",
                ca,
                "tls-bootstrap-token-user",
                &UserRef::Token("abcdef.0123456789abcdef"),
            ),
        )
        .unwrap();
        let k = Kubeconfig::read(&token).unwrap();
        assert_eq!((k.server.as_str(), k.ca_pem.as_str()), ("https://127.0.0.1:6443", ca));
        assert_eq!(k.user, User::Token("abcdef.0123456789abcdef".into()));
        let pem = "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n-----BEGIN EC PRIVATE KEY-----\nCCCC\n-----END EC PRIVATE KEY-----\n";
        std::fs::write(dir.join("client.pem"), pem).unwrap();
        let certs = dir.join("node.conf");
        std::fs::write(&certs, render("https://h:1", ca, "default-auth", &UserRef::CertFile(Path::new("client.pem"))))
            .unwrap();
        let k = Kubeconfig::read(&certs).unwrap();
        assert_eq!(k.user, User::Cert { cert_pem: pem.into(), key_pem: pem.into() });
        // no CA: refused by name
        std::fs::write(&certs, "apiVersion: v1\nclusters:\n- name: c\n  cluster:\n    server: https://h:1\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\nusers:\n- name: u\n  user: {token: t}\n").unwrap();
        let e = Kubeconfig::read(&certs).unwrap_err().to_string();
        assert!(e.contains("certificate-authority") && e.contains("node.conf"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! `podwarden kubeconfig`: a kubeconfig (YAML, on stdout) for the node's
//! Kubernetes API with a new client certificate signed by the node CA
//! (`<rootDir>/pki`, made by the daemon's first start), or `--revoke` /
//! `--revoke-user` to refuse certificates from then on (the running daemon
//! reads the list on every request). Root only: it reads the CA's key.

use std::time::Duration;

use crate::api::kube::pki;
use crate::cli::error::{CliError, Result, usage};
use crate::config::Config;

pub const HELP: &str = "\
Print a kubeconfig for kubectl with a new client certificate, or revoke
certificates. Root only (reads the node CA's key under rootDir/pki).

Usage:
  podwarden kubeconfig [--user NAME] [--group G]... [--namespace NS] [--expires DURATION] [--server URL] [--config FILE]
  podwarden kubeconfig --revoke SERIAL... | --revoke-user NAME... [--config FILE]

Options:
      --user NAME        the certificate's user (CN; default admin)
      --group G          a group (O); repeatable (default: the config's apiAuthorization.adminGroup
                         for the default user, none otherwise)
      --namespace NS     the context's namespace (default: default)
      --expires DURATION how long the certificate is valid (Go duration; default 8760h)
      --server URL       the server (default https://<address>:<port> from the config)
      --revoke SERIAL    refuse the certificate with this serial (hex)
      --revoke-user NAME refuse every certificate issued to NAME

Example:
  podwarden kubeconfig > ~/.kube/config && kubectl get pods -A
";

#[derive(Debug, Default)]
struct Opts {
    user: Option<String>,
    groups: Vec<String>,
    namespace: Option<String>,
    expires: Option<Duration>,
    server: Option<String>,
    revoke: Vec<String>,
    revoke_users: Vec<String>,
}

fn parse(args: &[&String]) -> Result<Opts> {
    let mut o = Opts::default();
    let known = ["--user", "--group", "--namespace", "-n", "--expires", "--server", "--revoke", "--revoke-user"];
    for (flag, v) in crate::cli::args::flag_values(args, "kubeconfig", &known, HELP)? {
        match flag.as_str() {
            "--user" => o.user = Some(v),
            "--group" => o.groups.push(v),
            "--namespace" | "-n" => o.namespace = Some(v),
            "--expires" => {
                let d = crate::config::parse_duration_checked(&v)
                    .map_err(|e| usage(format!("kubeconfig: --expires {v:?}: {e:?} (a Go duration such as 720h)")))?;
                if d < Duration::from_secs(60) {
                    return Err(usage(format!("kubeconfig: --expires {v:?}: at least 1m")));
                }
                o.expires = Some(d);
            }
            "--server" => o.server = Some(v),
            "--revoke" => o.revoke.push(v),
            _ => o.revoke_users.push(v),
        }
    }
    if o.user.as_deref().is_some_and(|u| u.trim().is_empty()) {
        return Err(usage("kubeconfig: --user needs a non-empty name"));
    }
    Ok(o)
}

fn pki_error(e: pki::PkiError) -> CliError {
    CliError::Io { what: "kubeconfig".into(), source: std::io::Error::other(e.to_string()) }
}

/// `podwarden kubeconfig ARGS` with `config`: the text to print.
pub fn run(config: &Config, args: &[&String]) -> Result<String> {
    let o = parse(args)?;
    let root = &config.root_dir;
    if !o.revoke.is_empty() || !o.revoke_users.is_empty() {
        let added = pki::revoke(root, &o.revoke, &o.revoke_users).map_err(pki_error)?;
        if added.is_empty() {
            return Ok("no certificate newly revoked\n".into());
        }
        return Ok(added.iter().map(|s| format!("revoked {s}\n")).collect());
    }
    let user = o.user.clone().unwrap_or_else(|| "admin".into());
    let groups = if o.groups.is_empty() && o.user.is_none() {
        vec![config.api_authorization.admin_group.clone()]
    } else {
        o.groups.clone()
    };
    let lifetime = o.expires.unwrap_or(Duration::from_secs(365 * 86400));
    let issued = pki::issue_client(root, &user, &groups, lifetime).map_err(pki_error)?;
    let host = match config.address.as_str() {
        "0.0.0.0" | "::" | "" => "127.0.0.1".to_string(),
        a if a.contains(':') => format!("[{a}]"),
        a => a.to_string(),
    };
    let server = o.server.clone().unwrap_or_else(|| format!("https://{host}:{}", config.port));
    let ns = o.namespace.clone().unwrap_or_else(|| "default".into());
    let b64 = |s: &str| pki::base64(s.as_bytes());
    Ok(format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: podwarden\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {user_q}\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: podwarden\n  context:\n    cluster: podwarden\n    user: {user_q}\n    namespace: {ns_q}\ncurrent-context: podwarden\n# certificate serial {serial} (revoke with: podwarden kubeconfig --revoke {serial})\n",
        ca = b64(&issued.ca_pem),
        cert = b64(&issued.cert_pem),
        key = b64(&issued.key_pem),
        user_q = serde_json::to_string(&user).unwrap_or_default(),
        ns_q = serde_json::to_string(&ns).unwrap_or_default(),
        serial = issued.serial,
    ))
}

//! `podwarden join`: kubeadm join's discovery by bootstrap token
//! ([`crate::cluster::join`]), then the bootstrap kubeconfig written for
//! `podwarden run --bootstrap-kubeconfig`, and what to start.

use std::path::PathBuf;

use crate::cli::error::{CliError, Result, usage};
use crate::cluster::join;
use crate::config::Config;

pub const HELP: &str = "\
Join a Kubernetes cluster as kubeadm join does: read the cluster's
kube-public/cluster-info, check it against the bootstrap token's signature
and the CA's public key hash, and write the bootstrap kubeconfig. Then
`podwarden run --kubeconfig K --bootstrap-kubeconfig B` asks the cluster for
the node's client certificate and registers the node.

Usage:
  podwarden join --server URL --token ID.SECRET --discovery-token-ca-cert-hash sha256:HEX...
                 [--bootstrap-kubeconfig FILE] [--kubeconfig FILE] [--config FILE]

Options:
      --server URL                          the API server (https://HOST:PORT)
      --token ID.SECRET                     a bootstrap token (kubeadm token create)
      --discovery-token-ca-cert-hash HASH   sha256:HEX of the cluster CA's public key
                                            (repeatable; kubeadm token create --print-join-command)
      --bootstrap-kubeconfig FILE           where to write (default /etc/podwarden/bootstrap-kubeconfig)
      --kubeconfig FILE                     the node's kubeconfig, written by `run` (default
                                            /etc/podwarden/kubeconfig)
";

/// Where `run` looks for the kubeconfigs when it is given none.
pub const DEFAULT_KUBECONFIG: &str = "/etc/podwarden/kubeconfig";
pub const DEFAULT_BOOTSTRAP: &str = "/etc/podwarden/bootstrap-kubeconfig";

#[derive(Debug, Default)]
struct Opts {
    server: Option<String>,
    token: Option<String>,
    pins: Vec<String>,
    bootstrap: Option<PathBuf>,
    kubeconfig: Option<PathBuf>,
}

fn parse(args: &[&String]) -> Result<Opts> {
    let mut o = Opts::default();
    let known = ["--server", "--token", "--discovery-token-ca-cert-hash", "--bootstrap-kubeconfig", "--kubeconfig"];
    for (flag, v) in crate::cli::args::flag_values(args, "join", &known, HELP)? {
        match flag.as_str() {
            "--server" => o.server = Some(v),
            "--token" => o.token = Some(v),
            "--discovery-token-ca-cert-hash" => o.pins.push(v),
            "--bootstrap-kubeconfig" => o.bootstrap = Some(v.into()),
            _ => o.kubeconfig = Some(v.into()),
        }
    }
    Ok(o)
}

fn failed(e: crate::cluster::ClusterError) -> CliError {
    CliError::Io { what: "join".into(), source: std::io::Error::other(e.to_string()) }
}

/// `podwarden join ARGS`: the text to print.
pub fn run(config: &Config, args: &[&String]) -> Result<String> {
    let o = parse(args)?;
    let server = o.server.ok_or_else(|| usage(format!("join: --server is required\n\n{HELP}")))?;
    let token = o.token.ok_or_else(|| usage(format!("join: --token is required\n\n{HELP}")))?;
    let token = join::Token::parse(&token).map_err(|e| usage(format!("join: --token: {e}")))?;
    if o.pins.is_empty() {
        return Err(usage(
            "join: --discovery-token-ca-cert-hash is required: without it the cluster's CA cannot be trusted"
                .to_string(),
        ));
    }
    let pins = o
        .pins
        .iter()
        .map(|p| join::parse_pin(p))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| usage(format!("join: {e}")))?;
    let bootstrap = o.bootstrap.unwrap_or_else(|| DEFAULT_BOOTSTRAP.into());
    let kubeconfig = o.kubeconfig.unwrap_or_else(|| DEFAULT_KUBECONFIG.into());
    let found = join::discover(&server, &token, &pins).map_err(failed)?;
    join::write_bootstrap(&bootstrap, &found, &token).map_err(failed)?;
    let node = crate::cli::daemon::node_name(config);
    let service = if bootstrap == std::path::Path::new(DEFAULT_BOOTSTRAP)
        && kubeconfig == std::path::Path::new(DEFAULT_KUBECONFIG)
    {
        "(the packaged service takes both when present: systemctl restart podwarden)\n"
    } else {
        ""
    };
    Ok(format!(
        "Cluster {server} found: its CA matches the pinned hash and cluster-info is signed by token {id}.\n\
         Wrote the bootstrap kubeconfig {b}.\n\
         Start the node (it asks for its client certificate as system:node:{node}, then registers):\n  \
         podwarden run --kubeconfig {k} --bootstrap-kubeconfig {b}\n{service}",
        server = found.server,
        id = token.id,
        b = bootstrap.display(),
        k = kubeconfig.display(),
    ))
}

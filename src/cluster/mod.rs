//! Cluster mode: podwarden as a node of a Kubernetes control plane. Without
//! a kubeconfig nothing here runs and podwarden is the standalone agent.
//!
//! - `http`: the synchronous HTTPS client (one connection a call, every
//!   step bounded);
//! - `kubeconfig`: reading and writing kubeconfigs;
//! - `join`: `podwarden join`'s discovery by bootstrap token;
//! - `bootstrap`: the node's client certificate from a CSR;
//! - `node`: the `cluster-node` thread: the Node object, its Lease every
//!   10 s and its status.
//!
//! May use every layer below the edges, and the node API's `pki` helpers.

pub mod bootstrap;
pub mod http;
pub mod join;
pub mod kubeconfig;
pub mod node;

/// What can go wrong talking to the control plane.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A bad kubeconfig, flag or server URL: the input is named.
    #[error("{0}")]
    Config(String),
    /// The server could not be reached or did not answer in time.
    #[error("the API server is unreachable: {0}")]
    Unreachable(String),
    /// TLS failed (an unknown CA, a bad certificate).
    #[error("TLS: {0}")]
    Tls(String),
    /// The server's answer was not HTTP or not what the API gives.
    #[error("unexpected answer: {0}")]
    Protocol(String),
    /// The API answered with an error status.
    #[error("{what}: HTTP {status}: {message}")]
    Api { what: String, status: u16, message: String },
    /// Discovery's checks failed (signature, CA pin).
    #[error("discovery refused: {0}")]
    Discovery(String),
    /// The cluster refused the node (a denied CSR, no signer).
    #[error("{0}")]
    Refused(String),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

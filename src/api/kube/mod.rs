//! The Kubernetes API of this node (issue 28), for kubectl: HTTPS on
//! `address:port` (the kubelet's secure port, 10250 by default; 0 turns it
//! off) with client certificates from the node CA.
//!
//! - `server`: TLS, connections and HTTP/1.1 (bounded: count, sizes,
//!   deadlines);
//! - `pki`: the node CA, the serving and client certificates, revocation;
//! - `authz`: the config's rights per user and group;
//! - `routes`: which handler answers, after the identity check and each
//!   handler's authorization (`ctx`: what handlers serve from);
//! - `read`: lists, gets and watches, the node, metrics; `discovery`,
//!   `openapi` (what `kubectl apply` and `explain` read), `resources` (the
//!   objects as JSON), `table` (kubectl's columns), `select` (label and
//!   field selectors), `watch` (the hub: no relist per watcher);
//! - `write/`: every write (pods, ConfigMaps, Secrets: create, patch,
//!   server-side apply, delete), one folder;
//! - `logs`, `run`, and exec/attach/port-forward handed to `api::stream`;
//! - `wire`: requests (their query parsed once, `api::query`) and answers
//!   (errors are `api::status::ApiError`).

pub mod authz;
pub mod ctx;
pub mod discovery;
pub mod gate;
pub mod logs;
pub mod openapi;
pub mod pki;
pub mod read;
pub mod resources;
pub mod routes;
pub mod run;
pub mod select;
pub mod server;
pub mod table;
pub mod watch;
pub mod wire;
pub mod write;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::api::ops::Ops;
use crate::config::api_authz::ApiAuthorization;

/// The server's settings.
#[derive(Debug, Clone)]
pub struct KubeConfig {
    pub address: std::net::IpAddr,
    pub port: u16,
    pub root_dir: PathBuf,
    pub healthy_within: Duration,
    pub authorization: ApiAuthorization,
    /// The cluster's CA (cluster mode): its client certificates (the API
    /// server's) are taken too, as cluster callers.
    pub cluster_ca_pem: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("the node's certificates: {0}")]
    Pki(#[from] pki::PkiError),
    #[error("{0}")]
    Tls(#[from] server::TlsSetupError),
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("starting a thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// The running server: dropping it stops the accept and watch threads
/// (connection threads end by their own deadlines, streams within a
/// second).
pub struct KubeServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    hub: Arc<watch::Hub>,
    accept: Option<JoinHandle<()>>,
    hub_thread: Option<JoinHandle<()>>,
    cluster_auth: Arc<authz::ClusterAuthSlot>,
}

impl KubeServer {
    pub fn start(ops: Arc<Ops>, cfg: KubeConfig) -> Result<KubeServer, KubeError> {
        let names = pki::serving_names(&ops.parts.node_name);
        let id = pki::ensure(&cfg.root_dir, &ops.parts.node_name, &names)?;
        let (tls, cluster_ca) = server::tls_config_with(&id, cfg.cluster_ca_pem.as_deref())?;
        let cluster_auth = Arc::new(authz::ClusterAuthSlot::default());
        let addr = SocketAddr::new(cfg.address, cfg.port);
        let listener = TcpListener::bind(addr).map_err(|source| KubeError::Listen { addr, source })?;
        let addr = listener.local_addr().map_err(|source| KubeError::Listen { addr, source })?;
        let parts = ops.parts.clone();
        let mut collector = resources::Collector::new(parts);
        let hub = watch::Hub::new(Box::new(move || collector.delta()));
        let stop = Arc::new(AtomicBool::new(false));
        let ctx = ctx::Ctx {
            ops,
            hub: hub.clone(),
            authz: authz::Authorizer::new(cfg.authorization.clone()),
            healthy_within: cfg.healthy_within,
            server_address: addr.to_string(),
            stop: stop.clone(),
            cluster_auth: cluster_auth.clone(),
        };
        let shared = Arc::new(server::Shared {
            ctx,
            tls,
            cluster_ca,
            revoked: server::Revoked::new(id.dir.join(pki::REVOKED)),
            active: AtomicUsize::new(0),
            gate: Default::default(),
        });
        let hub_thread = hub.start().map_err(KubeError::Thread)?;
        let st = stop.clone();
        let accept = crate::base::thread::spawn("kube-accept", Some(crate::base::thread::HELPER_STACK), move || {
            server::accept_loop(listener, shared, st)
        })
        .map_err(KubeError::Thread)?;
        Ok(KubeServer { addr, stop, hub, accept: Some(accept), hub_thread: Some(hub_thread), cluster_auth })
    }

    /// Where cluster mode installs the cluster's authenticator.
    pub fn cluster_auth(&self) -> Arc<authz::ClusterAuthSlot> {
        self.cluster_auth.clone()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for KubeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1)); // wake accept
        if let Some(j) = self.accept.take() {
            let _ = j.join();
        }
        self.hub.stop();
        if let Some(j) = self.hub_thread.take() {
            let _ = j.join();
        }
    }
}

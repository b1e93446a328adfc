//! The agent: who decides which pods run. The pod manager (`manager`:
//! desired pods, admission, dispatch to the pod workers, relist), the
//! `housekeeping` thread, the static pod `source` (files and their watcher),
//! node-pressure `eviction` and graceful `node_shutdown` through logind.
//! [`Parts`] is every core part connected, as `cli::daemon::assemble` wires
//! them (the one wiring, used by `podwarden run`, the tests and the
//! benches); the edges (HTTP, the local API, the node view, the logind
//! thread) are handed the parts they read from here, none reaches them
//! through the [`Agent`].
//!
//! Owns the desired pods and the node-level decisions to kill. May use
//! every layer below (`pod`, `node`, `logs`, `telemetry`, `runtime`,
//! `config`, `model`, `base`, `sys`); never `api` or `cli`.

pub mod eviction;
pub mod housekeeping;
pub mod manager;
pub mod node_shutdown;
pub mod source;

use std::sync::Arc;

use crate::agent::manager::Agent;
use crate::agent::node_shutdown::{Runner, SharedState};
use crate::pod::admission::Admission;
use crate::pod::status::StatusManager;
use crate::pod::workers::PodWorkers;
use crate::runtime::Runtime;
use crate::runtime::cache::PodCache;
use crate::telemetry::events::EventRecorder;
use crate::telemetry::metrics::Metrics;

/// Every core part, connected: cheap to clone (shared handles).
#[derive(Clone)]
pub struct Parts {
    /// The pod manager (desired pods, admission results, housekeeping).
    pub agent: Arc<Agent>,
    pub workers: PodWorkers,
    /// The runtime as everything else calls it (metered).
    pub runtime: Arc<dyn Runtime>,
    pub statuses: Arc<StatusManager>,
    pub events: Arc<EventRecorder>,
    pub admission: Arc<Admission>,
    pub metrics: Arc<Metrics>,
    /// What the last relist saw, shared by the agent and the sync phases.
    pub pod_cache: Arc<PodCache>,
    /// The local ConfigMaps and Secrets the source last read.
    pub objects: Arc<crate::model::objects::ObjectStore>,
    /// Graceful node shutdown as the logind thread and the shutdown run
    /// leave it; shown by the node view.
    pub shutdown: SharedState,
    /// The node's name (resolved: the host name unless configured).
    pub node_name: String,
    /// Resource stats: the eviction manager takes the snapshots, the views
    /// read the last.
    pub stats: Arc<crate::node::stats::Collector>,
    /// The runtime's event stream as the `runtime-events` thread leaves it
    /// (metrics, the node view).
    pub runtime_events: Arc<crate::runtime::events::StreamState>,
    /// New containers' logs, told by the workers to the log monitor.
    pub new_logs: Arc<crate::logs::monitor::NewLogs>,
    /// Where pulls find registry credentials.
    pub keyring: Arc<crate::node::images::credentials::Keyring>,
    /// The control plane's tokens and service variables for the sync
    /// phases (filled in cluster mode).
    pub cluster: Arc<crate::pod::cluster::ClusterSlot>,
}

impl Parts {
    /// The parts a node shutdown acts on.
    pub fn shutdown_runner(&self) -> Runner {
        Runner {
            workers: self.workers.clone(),
            admission: self.admission.clone(),
            metrics: self.metrics.clone(),
            agent: self.agent.clone(),
            state: self.shutdown.clone(),
            events: self.events.clone(),
            node_name: self.node_name.clone(),
        }
    }
}

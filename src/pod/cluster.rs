//! What a pod of a cluster node takes from the control plane besides its
//! spec and objects: service account tokens (a projected
//! `serviceAccountToken` source, through `TokenRequest`) and the service
//! environment variables (`KUBERNETES_SERVICE_HOST` and the others). The
//! `cluster` edge implements [`ClusterFacts`] and installs it in the
//! [`ClusterSlot`] the sync phases read; a standalone node leaves the slot
//! empty (no service variables; a token volume cannot be in its pods: the
//! manifest check refuses it).

use std::sync::Arc;

use parking_lot::RwLock;

use crate::model::Pod;

/// Why a token could not be had (the API server's refusal, no identity
/// yet, the server away): shown in the pod's `FailedMount` event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TokenError(pub String);

/// What the control plane gives pods.
pub trait ClusterFacts: Send + Sync {
    /// A token of `pod`'s service account for `audience` (empty: the API
    /// server's own), valid about `expiration_seconds`, bound to the pod.
    /// Called on the pod's worker thread: bounded by the client's timeout.
    fn token(&self, pod: &Pod, audience: &str, expiration_seconds: i64) -> Result<String, TokenError>;
    /// The service environment variables of a pod in `namespace`: the
    /// `kubernetes` service's always, the namespace's services' when
    /// `links` (`enableServiceLinks`).
    fn service_env(&self, namespace: &str, links: bool) -> Vec<(String, String)>;
    /// Why the node's identity is refused by its control plane (`None`
    /// while it is accepted, or while the server cannot be reached at
    /// all): `/healthz` says it.
    fn identity_problem(&self) -> Option<String> {
        None
    }
}

/// Where the sync phases find the control plane's facts (empty when
/// standalone).
#[derive(Default)]
pub struct ClusterSlot(RwLock<Option<Arc<dyn ClusterFacts>>>);

impl ClusterSlot {
    pub fn set(&self, facts: Arc<dyn ClusterFacts>) {
        *self.0.write() = Some(facts);
    }

    pub fn get(&self) -> Option<Arc<dyn ClusterFacts>> {
        self.0.read().clone()
    }
}

//! Cluster mode: podwarden as a node of a Kubernetes control plane. Without
//! a kubeconfig nothing here runs and podwarden is the standalone agent.
//!
//! - `http`: the synchronous HTTPS client (one connection a call, every
//!   step bounded);
//! - `kubeconfig`: reading and writing kubeconfigs;
//! - `join`: `podwarden join`'s discovery by bootstrap token;
//! - `bootstrap`: the node's client certificate from a CSR;
//! - `node`: the `cluster-node` thread: the node's identity, the Node
//!   object, its Lease every 10 s and its status;
//! - `pods`: the `cluster-pods` thread: the pods bound to this node, listed
//!   and watched, handed to the agent with the static pods;
//! - `status`: the `cluster-status` thread: pod statuses, the end of a
//!   graceful deletion, mirror pods.
//!
//! The threads share [`Shared`]: the identity `node` made, the Node's UID,
//! the API's view of the pods, and one stop signal.
//!
//! May use every layer below the edges, and the node API's `pki` helpers.

pub mod bootstrap;
pub mod events;
pub mod http;
pub mod join;
pub mod kubeconfig;
pub mod node;
pub mod nodeauth;
pub mod objects;
pub mod pods;
pub mod record;
pub mod reflector;
pub mod services;
pub mod status;
pub mod tokens;

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// What the cluster threads share.
pub struct Shared {
    /// What the API assigned the node, kept on disk ([`record`]).
    pub record: record::Record,
    /// The pods started from the record before the API answered: when it
    /// was written and how many (said on the node once it can be).
    pub from_record: Mutex<Option<(u64, usize)>>,
    /// The pods the record holds (written again only when they change).
    pub recorded: Mutex<Vec<Arc<crate::model::Pod>>>,
    /// Record files that cannot be written are said on the node at most
    /// every ten minutes.
    record_failed: crate::base::logging::RateLimit,
    /// The node's events and name (the record's failures are said there).
    events: Arc<crate::telemetry::events::EventRecorder>,
    node_name: String,
    client: Mutex<Option<http::Client>>,
    /// The Node's UID once registered (mirror pods' owner).
    pub node_uid: Mutex<Option<String>>,
    /// The API's pods bound to this node.
    pub view: Mutex<pods::View>,
    /// Why the API server refuses the node's identity, while it does.
    pub identity_problem: Mutex<Option<String>>,
    /// The link: the node thread's last pass reached the API server. The
    /// other threads call only while it is up, so after an outage the
    /// Lease goes first, then the pods' list or watch, then statuses and
    /// events: one ordered reconnect, no storm.
    link: Mutex<bool>,
    /// When the link went down, while it is (said once it is back).
    lost_at: Mutex<Option<std::time::Instant>>,
    link_changed: Condvar,
    stop: Mutex<bool>,
    stopped: Condvar,
}

impl Shared {
    pub fn new(
        root_dir: &std::path::Path,
        events: Arc<crate::telemetry::events::EventRecorder>,
        node_name: &str,
    ) -> Self {
        Shared {
            record: record::Record::new(root_dir),
            from_record: Mutex::new(None),
            recorded: Mutex::new(Vec::new()),
            record_failed: crate::base::logging::RateLimit::new(Duration::from_secs(600)),
            events,
            node_name: node_name.to_string(),
            client: Mutex::new(None),
            node_uid: Mutex::new(None),
            view: Mutex::new(pods::View::default()),
            identity_problem: Mutex::new(None),
            link: Mutex::new(false),
            lost_at: Mutex::new(None),
            link_changed: Condvar::new(),
            stop: Mutex::new(false),
            stopped: Condvar::new(),
        }
    }

    /// Whether the link is up (see [`Shared::link_back`]).
    pub fn link_up(&self) -> bool {
        *self.link.lock()
    }

    /// The node thread reached the API server (its Lease renewed).
    pub fn link_back(&self) {
        let mut up = self.link.lock();
        if !*up {
            *up = true;
            if let Some(at) = self.lost_at.lock().take() {
                log::warn!(
                    "cluster: the API server answers again, {:.1} s after the link was lost",
                    at.elapsed().as_secs_f64()
                );
            }
            self.link_changed.notify_all();
        }
    }

    /// A call could not reach the API server (`why`): the others wait for
    /// the node thread, and the API's view of the pods is stale until the
    /// pods' reflector is connected again. Logged once a loss, when it
    /// happens (a half-open link is found by the calls' bounds on
    /// silence).
    pub fn link_lost(&self, why: &ClusterError) {
        let mut up = self.link.lock();
        if *up {
            *self.lost_at.lock() = Some(std::time::Instant::now());
            log::warn!("cluster: the link to the API server is lost ({why}); the pods run on, the node tries again");
        }
        *up = false;
        self.view.lock().fresh = false;
    }

    /// A file of the record (`what`) could not be written: logged and a
    /// warning event on the node, at most every ten minutes while it lasts
    /// (a node started while its control plane is away would run an older
    /// record, or none).
    pub fn record_failed(&self, what: &str, e: &record::RecordError) {
        if self.record_failed.allow().is_none() {
            log::debug!("cluster: the node's record of {what} cannot be written: {e}");
            return;
        }
        log::error!("cluster: the node's record of {what} cannot be written: {e}");
        self.events.event(
            &crate::telemetry::events::ObjectRef::node(&self.node_name),
            crate::telemetry::events::EventType::Warning,
            "ClusterRecordUnwritable",
            &format!(
                "The node's record of {what} cannot be written ({e}): started while its control plane is away, \
                 the node would run an older record"
            ),
        );
    }

    /// Wait until the link is up; `false` when stopped or `go_on` says no
    /// first (looked at every 500 ms).
    pub fn wait_link(&self, go_on: &dyn Fn() -> bool) -> bool {
        loop {
            if self.stopped() || !go_on() {
                return false;
            }
            let mut up = self.link.lock();
            if *up {
                return true;
            }
            self.link_changed.wait_for(&mut up, Duration::from_millis(500));
        }
    }

    /// The node's client, once its identity is known.
    pub fn client(&self) -> Option<http::Client> {
        self.client.lock().clone()
    }

    pub fn set_client(&self, c: Option<http::Client>) {
        *self.client.lock() = c;
    }

    pub fn node_uid(&self) -> Option<String> {
        self.node_uid.lock().clone()
    }

    pub fn stopped(&self) -> bool {
        *self.stop.lock()
    }

    /// Sleep `d` unless stopped; `false` once stopped.
    pub fn pause(&self, d: Duration) -> bool {
        let mut stopped = self.stop.lock();
        if !*stopped {
            self.stopped.wait_for(&mut stopped, d);
        }
        !*stopped
    }

    fn stop(&self) {
        *self.stop.lock() = true;
        self.stopped.notify_all();
        crate::base::changes::bump();
    }
}

/// Cluster mode's threads (`cluster-node`, `cluster-pods`,
/// `cluster-status`); dropping it stops and joins them (each within one
/// call to the API server).
pub struct Cluster {
    shared: Arc<Shared>,
    objects: Arc<objects::Objects>,
    joins: Vec<JoinHandle<()>>,
}

/// Tokens and service variables for the sync phases.
struct Facts {
    tokens: tokens::Tokens,
    services: Arc<Mutex<services::Services>>,
    shared: Arc<Shared>,
}

impl crate::pod::cluster::ClusterFacts for Facts {
    fn token(
        &self,
        pod: &crate::model::Pod,
        audience: &str,
        expiration_seconds: i64,
    ) -> Result<String, crate::pod::cluster::TokenError> {
        self.tokens.token(pod, audience, expiration_seconds).map_err(|e| crate::pod::cluster::TokenError(e.to_string()))
    }

    fn service_env(&self, namespace: &str, links: bool) -> Vec<(String, String)> {
        services::env_for(&self.services.lock(), namespace, links)
    }

    fn identity_problem(&self) -> Option<String> {
        self.shared.identity_problem.lock().clone()
    }
}

impl Cluster {
    pub fn start(
        parts: crate::agent::Parts,
        cfg: node::ClusterConfig,
        sources: Arc<crate::agent::source::Sources>,
        events_rx: crossbeam_channel::Receiver<crate::telemetry::events::Event>,
        node_auth: Option<Arc<crate::api::kube::authz::ClusterAuthSlot>>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::new(&cfg.root_dir, parts.events.clone(), &parts.node_name));
        let objects = objects::Objects::new(shared.clone(), sources.clone());
        let mut c = Cluster { shared: shared.clone(), objects: objects.clone(), joins: Vec::new() };
        let svcs = Arc::new(Mutex::new(services::Services::new()));
        let tokens = tokens::Tokens::new(shared.clone());
        // what the API last assigned runs at once, before any call to it
        pods::start_from_record(&parts, &shared, &sources, &objects, &tokens);
        parts.cluster.set(Arc::new(Facts { tokens, services: svcs.clone(), shared: shared.clone() }));
        if let Some(slot) = node_auth {
            slot.set(Arc::new(nodeauth::NodeAuth::new(shared.clone(), &parts.node_name)));
        }
        let stack = Some(crate::base::thread::HELPER_STACK);
        let (p, s) = (parts.clone(), shared.clone());
        c.joins.push(crate::base::thread::spawn("cluster-events", stack, move || events::run(p, s, events_rx))?);
        let (p, s) = (parts.clone(), shared.clone());
        c.joins.push(crate::base::thread::spawn("cluster-node", stack, move || node::run(p, cfg, s))?);
        let (p, s) = (parts.clone(), shared.clone());
        c.joins.push(crate::base::thread::spawn("cluster-pods", stack, move || pods::run(p, s, sources, objects))?);
        let s = shared.clone();
        c.joins.push(crate::base::thread::spawn("cluster-services", stack, move || services::run(s, svcs))?);
        let (p, s) = (parts, shared);
        c.joins.push(crate::base::thread::spawn("cluster-status", stack, move || status::run(p, s))?);
        Ok(c)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shared.stop();
        for j in self.joins.drain(..) {
            let _ = j.join();
        }
        self.objects.stop();
    }
}

/// A random number of seconds below `range` (a watch's timeout is 5 min
/// plus this, so a node's watches do not end in step).
pub fn jitter(range: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    u64::from(nanos) % range.max(1)
}

/// An error answer of the API server, with its `Status` message.
pub fn api_error(what: &str, r: &http::Response) -> ClusterError {
    let message = serde_json::from_slice::<serde_json::Value>(&r.body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| r.text());
    ClusterError::Api { what: what.into(), status: r.status, message }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_that_cannot_be_written_is_a_warning_on_the_node_every_ten_minutes() {
        let root = std::env::temp_dir().join(format!("pw-shared-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // a directory where the pods' file goes: the rename over it fails
        std::fs::create_dir_all(root.join("cluster/pods.json/x")).unwrap();
        let events = Arc::new(crate::telemetry::events::EventRecorder::new(16));
        let shared = Shared::new(&root, events.clone(), "edge-1");
        for _ in 0..3 {
            let e = shared.record.save_pods(&[]).expect_err("pods.json is a directory");
            shared.record_failed("its pods", &e);
        }
        let said = events.list();
        assert_eq!(said.len(), 1, "{said:?}");
        assert_eq!(said[0].reason, "ClusterRecordUnwritable");
        assert_eq!(said[0].involved_object, crate::telemetry::events::ObjectRef::node("edge-1"));
        assert!(said[0].message.contains("pods.json"), "{}", said[0].message);
        let _ = std::fs::remove_dir_all(&root);
    }
}

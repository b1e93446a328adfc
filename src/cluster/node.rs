//! The `cluster-node` thread: this node as the control plane sees it.
//!
//! - identity: the node kubeconfig's client certificate; when there is none
//!   (or it expires within [`RENEW_MARGIN`]) and a bootstrap kubeconfig is
//!   given, a new one from a CSR ([`super::bootstrap`]);
//! - the Node: created once (a Node of that name already there is this
//!   node's, as the kubelet takes it), its status (capacity, allocatable,
//!   conditions, addresses, nodeInfo, the kubelet endpoint's port, images)
//!   patched when it changes and at least every [`STATUS_REPORT`];
//! - its Lease in `kube-node-lease`, renewed every [`LEASE_RENEW`]
//!   (duration [`LEASE_SECONDS`]), owned by the Node.
//!
//! Every call is bounded ([`CALL_TIMEOUT`]); a failed step is retried at
//! the next tick with back-off and jitter, and the thread waits on its stop
//! condvar only, so dropping the handle ends it within one call.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use super::bootstrap;
use super::http::Client;
use super::kubeconfig::Kubeconfig;
use super::{ClusterError, Shared, api_error};
use crate::agent::Parts;
use crate::telemetry::events::{EventType, ObjectRef};

pub const LEASE_SECONDS: u64 = 40;
/// A quarter of the lease's duration, as the kubelet renews.
pub const LEASE_RENEW: Duration = Duration::from_secs(10);
/// The status is sent at least this often, changed or not.
pub const STATUS_REPORT: Duration = Duration::from_secs(300);
/// How often the status is looked at from the start until it first says
/// Ready (the kubelet's fast status update at start, so a joined node is
/// Ready in the API as soon as it is, not at the next 10 s tick); only a
/// change is sent, so this costs no requests.
pub const FAST_STATUS: Duration = Duration::from_millis(250);
/// How long the fast start lasts at most: a node that is not Ready by
/// then is looked at every [`LEASE_RENEW`] like any other.
pub const FAST_FOR: Duration = Duration::from_secs(60);
/// A client certificate closer than this to its end is replaced.
pub const RENEW_MARGIN: Duration = Duration::from_secs(60);
/// One call to the API server, from connect to the answer's end.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Failed passes in a row before the node gets a warning event.
pub const WARN_AFTER: u32 = 3;
/// The warning again at most this often while the failures last.
pub const WARN_EVERY: Duration = Duration::from_secs(300);
/// How long a CSR may wait for its signature before it is asked again.
pub const CSR_WAIT: Duration = Duration::from_secs(300);
/// While the API server is unreachable its port is tried this often (a
/// TCP connection, nothing more), so the Lease is renewed within about a
/// second of the link's return whatever the back-off has grown to.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// What cluster mode needs besides the agent's parts.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The node's kubeconfig (written by the bootstrap when missing).
    pub kubeconfig: PathBuf,
    /// The bootstrap kubeconfig (a token), if the node may ask for an identity.
    pub bootstrap_kubeconfig: Option<PathBuf>,
    pub root_dir: PathBuf,
    /// The port the API server reaches this node on (`daemonEndpoints`).
    pub kubelet_port: u16,
    pub healthy_within: Duration,
    /// The address the API server reaches the node's server on (the
    /// Node's InternalIP); `None`: the machine's first IPv4 address.
    pub node_ip: Option<std::net::IpAddr>,
}

/// The `cluster-node` thread's loop; returns when `shared` stops.
pub fn run(parts: Parts, cfg: ClusterConfig, shared: Arc<Shared>) {
    Link::new(parts, cfg, shared).run()
}

/// The thread's state.
struct Link {
    parts: Parts,
    cfg: ClusterConfig,
    shared: Arc<Shared>,
    client: Option<Client>,
    /// When the client certificate is to be replaced (rotation).
    rotate_at: Option<SystemTime>,
    /// The Node's UID once it is known to exist.
    node_uid: Option<String>,
    lease_made: bool,
    /// When the Lease is next due (renewed every [`LEASE_RENEW`]).
    lease_due: Instant,
    /// When the Lease was last renewed.
    renewed: Option<Instant>,
    /// A status with Ready true was sent: the fast start is over.
    ready_sent: bool,
    /// When the thread started (the fast start lasts [`FAST_FOR`]).
    since: Instant,
    /// The status last sent (heartbeat times left out) and when.
    sent: Option<(Value, Instant)>,
    /// Each condition's status and since when (lastTransitionTime).
    transitions: BTreeMap<String, (String, String)>,
    failures: u32,
    logged: crate::base::logging::RateLimit,
    /// When the last warning event about the link was sent.
    warned: Option<Instant>,
    /// This run started its pods from the record, the API server away: a
    /// `StartedFromRecord` condition (true, with this message) in every
    /// status the run sends. A run that reached the server at its start
    /// sends none, and so clears one an earlier run left (a merge patch
    /// replaces the whole list).
    from_record: Option<String>,
}

impl Link {
    fn new(parts: Parts, cfg: ClusterConfig, shared: Arc<Shared>) -> Self {
        Link {
            parts,
            cfg,
            shared,
            client: None,
            rotate_at: None,
            node_uid: None,
            lease_made: false,
            lease_due: Instant::now(),
            renewed: None,
            ready_sent: false,
            since: Instant::now(),
            sent: None,
            transitions: BTreeMap::new(),
            failures: 0,
            logged: crate::base::logging::RateLimit::new(Duration::from_secs(60)),
            warned: None,
            from_record: None,
        }
    }

    /// Sleep `d` unless stopped; `false` once stopped.
    fn pause(&self, d: Duration) -> bool {
        self.shared.pause(d)
    }

    fn run(mut self) {
        log::info!(
            "cluster mode: node {} with kubeconfig {}{}",
            self.parts.node_name,
            self.cfg.kubeconfig.display(),
            self.cfg.bootstrap_kubeconfig.as_ref().map(|b| format!(" (bootstrap {})", b.display())).unwrap_or_default()
        );
        let mut next = Instant::now();
        let mut unreachable = false;
        loop {
            let go_on = if unreachable {
                self.wait_for_server(next)
            } else {
                self.pause(next.saturating_duration_since(Instant::now()))
            };
            if !go_on {
                return;
            }
            let started = Instant::now();
            match self.tick() {
                Ok(()) => {
                    unreachable = false;
                    self.shared.link_back();
                    if let Some(was) = self.shared.identity_problem.lock().take() {
                        log::info!("cluster: the API server accepts the node's identity again (was: {was})");
                    }
                    // the API answered first: the record's pods were only
                    // its list's head start
                    self.shared.from_record.lock().take();
                    if self.failures > 0 {
                        log::info!("cluster: the API server answers again after {} failed attempt(s)", self.failures);
                    }
                    if self.warned.take().is_some() {
                        self.parts.events.event(
                            &ObjectRef::node(&self.parts.node_name),
                            EventType::Normal,
                            "ClusterReachable",
                            "The node reaches its control plane again",
                        );
                    }
                    self.failures = 0;
                    next = self.lease_due;
                    if !self.ready_sent && self.since.elapsed() < FAST_FOR {
                        next = next.min(started + FAST_STATUS);
                    }
                }
                Err(e) => {
                    self.failures += 1;
                    unreachable = matches!(e, ClusterError::Unreachable(_));
                    if matches!(e, ClusterError::Unreachable(_) | ClusterError::Tls(_)) {
                        self.shared.link_lost(&e);
                    } else if self.client.is_some() {
                        // the server answered, with an error of its own
                        self.shared.link_back();
                    }
                    if let Some((written, n)) = self.shared.from_record.lock().take() {
                        let msg = format!(
                            "The API server could not be reached at the start ({e}): {n} pod(s) run from the node's record of {}",
                            super::record::when(written)
                        );
                        log::warn!("cluster: {msg}");
                        self.from_record = Some(msg.clone());
                        // true since the start, not since the first status
                        let since = crate::model::rfc3339(SystemTime::now());
                        self.transitions.insert("StartedFromRecord".into(), ("True".into(), since));
                        // held by the events thread until the server answers
                        self.parts.events.event(
                            &ObjectRef::node(&self.parts.node_name),
                            EventType::Warning,
                            "StartedFromRecord",
                            &msg,
                        );
                    }
                    if matches!(e, ClusterError::Api { status: 401, .. }) {
                        // the identity is no longer accepted: read it (or bootstrap) again
                        self.client = None;
                        self.shared.set_client(None);
                    }
                    if self.client.is_some() && !bootstrap::usable(&self.cfg.kubeconfig, Duration::ZERO) {
                        // expired (while the server was away, or every
                        // rotation failed): a new one through the
                        // bootstrap kubeconfig, the pods running on
                        log::warn!(
                            "cluster: the node's client certificate ({}) has expired: asking for a new one{}",
                            self.cfg.kubeconfig.display(),
                            if self.cfg.bootstrap_kubeconfig.is_some() { " with the bootstrap kubeconfig" } else { "" }
                        );
                        self.client = None;
                        self.shared.set_client(None);
                    }
                    let refused = match &e {
                        ClusterError::Api { status: 401 | 403, .. }
                        | ClusterError::Refused(_)
                        | ClusterError::Config(_) => true,
                        ClusterError::Tls(m) => !m.contains("timed out") && !m.contains("reset"),
                        _ => false,
                    };
                    if refused {
                        *self.shared.identity_problem.lock() = Some(e.to_string());
                    }
                    if self.logged.allow().is_some() || self.failures == 1 {
                        log::error!("cluster: {e} (attempt {}; retrying with back-off)", self.failures);
                    }
                    self.warn(&e);
                    next = Instant::now() + backoff(self.failures);
                }
            }
        }
    }

    /// After a call found the server unreachable: wait until `until` (the
    /// back-off), or until its port, tried every [`PROBE_EVERY`], accepts
    /// a connection after refusing or ignoring one (the link is back: go
    /// now, after a jitter of up to half a second so that nodes cut off
    /// together do not call together). `false` once stopped.
    fn wait_for_server(&self, until: Instant) -> bool {
        let Some(client) = self.client.clone() else {
            return self.pause(until.saturating_duration_since(Instant::now()));
        };
        let mut was_down = false;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            // one try a second: a dropped SYN takes the whole second, a
            // refusal comes at once and the rest of it is slept
            let tried = Instant::now();
            if client.reachable(PROBE_EVERY.min(left)) {
                if !was_down {
                    // the port answers but the calls did not (a server
                    // that hangs): the back-off alone decides
                    return self.pause(until.saturating_duration_since(Instant::now()));
                }
                log::debug!("cluster: the API server's port answers again");
                return self.pause(jitter(Duration::from_millis(500)));
            }
            was_down = true;
            if !self.pause(PROBE_EVERY.saturating_sub(tried.elapsed()).min(left)) {
                return false;
            }
        }
    }

    /// A Warning event on the node once [`WARN_AFTER`] passes in a row
    /// failed, again every [`WARN_EVERY`] while it lasts: cluster mode is
    /// configured and does not work (`podwarden events`, `kubectl describe
    /// node` on the node's API).
    fn warn(&mut self, e: &ClusterError) {
        if self.failures < WARN_AFTER || self.warned.is_some_and(|t| t.elapsed() < WARN_EVERY) {
            return;
        }
        self.warned = Some(Instant::now());
        let reason = match e {
            ClusterError::Api { status: 401 | 403, .. } | ClusterError::Tls(_) | ClusterError::Refused(_) => {
                "ClusterAuthenticationFailed"
            }
            ClusterError::Config(_) => "ClusterConfigInvalid",
            _ => "ClusterUnreachable",
        };
        self.parts.events.event(
            &ObjectRef::node(&self.parts.node_name),
            EventType::Warning,
            reason,
            &format!(
                "The node is not part of its cluster ({} attempts failed): {e}; pods keep running, retrying",
                self.failures
            ),
        );
    }

    /// One pass: identity, Node, Lease, status.
    fn tick(&mut self) -> Result<(), ClusterError> {
        let client = match &self.client {
            Some(c) => c.clone(),
            None => {
                let c = self.identity()?;
                self.client = Some(c.clone());
                self.shared.set_client(Some(c.clone()));
                self.rotate_at = self.rotation_deadline();
                c
            }
        };
        if self.node_uid.is_none() {
            let uid = self.register(&client)?;
            *self.shared.node_uid.lock() = Some(uid.clone());
            self.node_uid = Some(uid);
        }
        if Instant::now() >= self.lease_due {
            self.renew_lease(&client)?;
            self.lease_due = Instant::now() + LEASE_RENEW;
            // a Lease late by a whole renewal (an outage, a hung agent):
            // the node lifecycle controller may have set the Node's
            // conditions to Unknown, so the status goes again now, not at
            // the next 5-minute report
            if self.renewed.replace(Instant::now()).is_some_and(|t| t.elapsed() > 2 * LEASE_RENEW) {
                self.sent = None;
            }
        }
        self.report_status(&client)?;
        if self.rotate_at.is_some_and(|t| SystemTime::now() >= t) {
            self.rotate(&client);
        }
        Ok(())
    }

    /// When the node's certificate is to be replaced: at 70 to 90 % of its
    /// life (as the kubelet's certificate manager, jittered so that nodes
    /// do not ask together), its life counted from when its file was
    /// written. `None` for an identity that is not a certificate file.
    fn rotation_deadline(&self) -> Option<SystemTime> {
        let pem = bootstrap::client_pem(&self.cfg.root_dir);
        let k = Kubeconfig::read(&self.cfg.kubeconfig).ok()?;
        let super::kubeconfig::User::Cert { cert_pem, .. } = &k.user else { return None };
        let end = bootstrap::expiry(cert_pem)?;
        let start = std::fs::metadata(&pem).and_then(|m| m.modified()).unwrap_or_else(|_| SystemTime::now());
        Some(rotation_point(start, end, super::jitter(1000) as f64 / 1000.0))
    }

    /// A new certificate asked for with the current one (the cluster
    /// approves a node's renewal of its own), stored, and the client
    /// switched to it; the old one serves until then, and a failure is
    /// tried again in 5 minutes.
    fn rotate(&mut self, client: &Client) {
        let node = self.parts.node_name.clone();
        let result = Kubeconfig::read(&self.cfg.kubeconfig).and_then(|k| {
            let (cert, key) = bootstrap::request_certificate(client, &node, CSR_WAIT, &|d| self.pause(d))?;
            bootstrap::store(&self.cfg.root_dir, &self.cfg.kubeconfig, &k.server, &k.ca_pem, &cert, &key)?;
            let mut c = Kubeconfig::read(&self.cfg.kubeconfig)?.client()?;
            c.timeout = CALL_TIMEOUT;
            Ok((c, cert))
        });
        match result {
            Ok((c, cert)) => {
                log::info!(
                    "cluster: node {node} rotated its client certificate (now until {})",
                    bootstrap::expiry(&cert).map(crate::model::rfc3339).unwrap_or_default()
                );
                self.client = Some(c.clone());
                self.shared.set_client(Some(c));
                self.rotate_at = self.rotation_deadline();
            }
            Err(e) => {
                log::error!(
                    "cluster: rotating the node's client certificate: {e}; the current one serves, retrying in 5 minutes"
                );
                self.rotate_at = Some(SystemTime::now() + Duration::from_secs(300));
            }
        }
    }

    /// A client with the node's identity, bootstrapping one if needed.
    fn identity(&self) -> Result<Client, ClusterError> {
        let usable = bootstrap::usable(&self.cfg.kubeconfig, RENEW_MARGIN);
        if !usable {
            let Some(boot) = &self.cfg.bootstrap_kubeconfig else {
                return Err(ClusterError::Config(format!(
                    "kubeconfig {} holds no usable identity and no bootstrap kubeconfig is given",
                    self.cfg.kubeconfig.display()
                )));
            };
            let b = Kubeconfig::read(boot)?;
            let mut c = b.client()?;
            c.timeout = CALL_TIMEOUT;
            let (cert, key) = bootstrap::request_certificate(&c, &self.parts.node_name, CSR_WAIT, &|d| self.pause(d))?;
            bootstrap::store(&self.cfg.root_dir, &self.cfg.kubeconfig, &b.server, &b.ca_pem, &cert, &key)?;
            log::info!(
                "cluster: node {} has its client certificate (until {}); kubeconfig {}",
                self.parts.node_name,
                bootstrap::expiry(&cert).map(crate::model::rfc3339).unwrap_or_default(),
                self.cfg.kubeconfig.display()
            );
        }
        let mut c = Kubeconfig::read(&self.cfg.kubeconfig)?.client()?;
        c.timeout = CALL_TIMEOUT;
        Ok(c)
    }

    fn node_path(&self) -> String {
        format!("/api/v1/nodes/{}", self.parts.node_name)
    }

    /// Create the Node (or take the one of that name): its UID.
    fn register(&self, client: &Client) -> Result<String, ClusterError> {
        let full = crate::api::kube::resources::node(&self.parts, self.cfg.healthy_within);
        let body = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.parts.node_name,
                "labels": full["metadata"]["labels"],
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": {},
        });
        let r = client.send("POST", "/api/v1/nodes", "application/json", body.to_string().as_bytes())?;
        let node: Value = match r.status {
            201 => serde_json::from_slice(&r.body).map_err(|e| ClusterError::Protocol(format!("the Node: {e}")))?,
            409 => {
                let r = client.get(&self.node_path())?;
                if r.status != 200 {
                    return Err(api_error("reading the Node", &r));
                }
                serde_json::from_slice(&r.body).map_err(|e| ClusterError::Protocol(format!("the Node: {e}")))?
            }
            _ => return Err(api_error("registering the Node", &r)),
        };
        let uid = node["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        log::info!(
            "cluster: node {} {} (uid {uid})",
            self.parts.node_name,
            if r.status == 201 { "registered" } else { "was registered before" }
        );
        Ok(uid)
    }

    fn renew_lease(&mut self, client: &Client) -> Result<(), ClusterError> {
        let name = &self.parts.node_name;
        let path = format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}");
        let now = micro_time(SystemTime::now());
        if self.lease_made {
            let patch =
                json!({"spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now}});
            let r = client.send("PATCH", &path, "application/merge-patch+json", patch.to_string().as_bytes())?;
            match r.status {
                200 => return Ok(()),
                404 => self.lease_made = false,
                _ => return Err(api_error("renewing the Lease", &r)),
            }
        }
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": "kube-node-lease",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": self.node_uid}],
            },
            "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now},
        });
        let r = client.send(
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
            "application/json",
            lease.to_string().as_bytes(),
        )?;
        match r.status {
            201 => {}
            409 => {} // made by an earlier run: renewed from the next tick
            _ => return Err(api_error("creating the Lease", &r)),
        }
        self.lease_made = true;
        if r.status == 409 {
            return self.renew_lease(client);
        }
        Ok(())
    }

    /// The status as it is now, with each condition's transition time.
    fn status(&mut self) -> Value {
        let full = crate::api::kube::resources::node(&self.parts, self.cfg.healthy_within);
        let mut status = full["status"].clone();
        let now = crate::model::rfc3339(SystemTime::now());
        if let (Some(msg), Some(conds)) = (&self.from_record, status["conditions"].as_array_mut()) {
            conds.push(json!({"type": "StartedFromRecord", "status": "True", "reason": "APIServerUnreachableAtStart",
                              "message": msg}));
        }
        if let Some(conds) = status["conditions"].as_array_mut() {
            for c in conds {
                let t = c["type"].as_str().unwrap_or_default().to_string();
                let s = c["status"].as_str().unwrap_or_default().to_string();
                let since = match self.transitions.get(&t) {
                    Some((old, since)) if *old == s => since.clone(),
                    _ => now.clone(),
                };
                self.transitions.insert(t, (s, since.clone()));
                c["lastTransitionTime"] = json!(since);
                c["lastHeartbeatTime"] = json!(now);
            }
        }
        status["daemonEndpoints"] = json!({"kubeletEndpoint": {"Port": self.cfg.kubelet_port}});
        if let Some(ip) = self.cfg.node_ip {
            status["addresses"] = json!([
                {"type": "InternalIP", "address": ip.to_string()},
                {"type": "Hostname", "address": self.parts.node_name},
            ]);
        }
        // the kubelet's forms: `containerd://1.6.20`, its Ready message
        if let Some(v) = status["nodeInfo"]["containerRuntimeVersion"].as_str()
            && let Some((name, version)) = v.split_once(' ')
        {
            status["nodeInfo"]["containerRuntimeVersion"] = json!(format!("{name}://{version}"));
        }
        if let Some(ready) =
            status["conditions"].as_array_mut().and_then(|cs| cs.iter_mut().find(|c| c["type"] == "Ready"))
            && ready["reason"] == "KubeletReady"
        {
            ready["message"] = json!("kubelet is posting ready status");
        }
        status
    }

    fn report_status(&mut self, client: &Client) -> Result<(), ClusterError> {
        let status = self.status();
        let key = without_heartbeats(&status);
        if let Some((last, at)) = &self.sent
            && *last == key
            && at.elapsed() < STATUS_REPORT
        {
            return Ok(());
        }
        if let Some((last, _)) = &self.sent {
            log::debug!("cluster: the Node's status changed in {}", changed_keys(last, &key).join(", "));
        }
        let patch = json!({"status": status});
        let r = client.send(
            "PATCH",
            &format!("{}/status", self.node_path()),
            "application/merge-patch+json",
            patch.to_string().as_bytes(),
        )?;
        match r.status {
            200 => {
                self.ready_sent |= is_ready(&key);
                self.sent = Some((key, Instant::now()));
                Ok(())
            }
            404 => {
                // the Node was deleted: register it again at the next tick
                log::warn!(
                    "cluster: the Node {} is gone from the API server: registering it again",
                    self.parts.node_name
                );
                self.node_uid = None;
                self.lease_made = false;
                self.sent = None;
                Err(api_error("patching the Node's status", &r))
            }
            _ => Err(api_error("patching the Node's status", &r)),
        }
    }
}

/// The status with the conditions' heartbeat times left out: what decides
/// whether it changed.
fn without_heartbeats(status: &Value) -> Value {
    let mut s = status.clone();
    if let Some(conds) = s["conditions"].as_array_mut() {
        for c in conds {
            if let Some(o) = c.as_object_mut() {
                o.remove("lastHeartbeatTime");
            }
        }
    }
    s
}

/// Whether `status` says the node is Ready.
fn is_ready(status: &Value) -> bool {
    status["conditions"].as_array().is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// The fields of `new` (top level, conditions by type) that differ from
/// `old`: what a status patch is sent for.
fn changed_keys(old: &Value, new: &Value) -> Vec<String> {
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else { return vec!["status".into()] };
    let mut out = Vec::new();
    for k in o.keys().chain(n.keys().filter(|k| !o.contains_key(*k))) {
        if o.get(k) == n.get(k) {
            continue;
        }
        if k == "conditions" {
            let by_type = |v: Option<&Value>| -> BTreeMap<String, Value> {
                v.and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|c| (c["type"].as_str().unwrap_or_default().to_string(), c.clone()))
                    .collect()
            };
            let (a, b) = (by_type(o.get(k)), by_type(n.get(k)));
            for t in a.keys().chain(b.keys().filter(|t| !a.contains_key(*t))) {
                if a.get(t) != b.get(t) {
                    out.push(format!("conditions[{t}]"));
                }
            }
        } else {
            out.push(k.clone());
        }
    }
    out
}

/// Back-off after `failures` failed passes: 1 s doubling to 30 s, with up
/// to a fifth more at random (nodes that lost the server together do not
/// come back in step).
pub fn backoff(failures: u32) -> Duration {
    let base = Duration::from_secs(1 << failures.saturating_sub(1).min(5)).min(Duration::from_secs(30));
    base + jitter(base / 5)
}

/// A duration between zero and `max`, different each call (the clock's
/// nanoseconds).
pub fn jitter(max: Duration) -> Duration {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    max.mul_f64(f64::from(nanos % 1000) / 1000.0)
}

/// The rotation point of a certificate valid from `start` to `end`: 70 %
/// of its life plus `jitter` (0 to 1) times 20 %.
pub fn rotation_point(start: SystemTime, end: SystemTime, jitter: f64) -> SystemTime {
    let life = end.duration_since(start).unwrap_or_default();
    start + life.mul_f64(0.7 + 0.2 * jitter.clamp(0.0, 1.0))
}

/// A `MicroTime`: RFC 3339 in UTC with microseconds.
pub fn micro_time(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let whole = SystemTime::UNIX_EPOCH + Duration::from_secs(d.as_secs());
    let base = crate::model::rfc3339(whole);
    format!("{}.{:06}Z", base.trim_end_matches('Z'), d.subsec_micros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_is_rotated_at_seventy_to_ninety_percent_of_its_life() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let end = start + Duration::from_secs(1000);
        assert_eq!(rotation_point(start, end, 0.0), start + Duration::from_secs(700));
        assert_eq!(rotation_point(start, end, 1.0), start + Duration::from_secs(900));
        assert_eq!(rotation_point(start, end, 0.5), start + Duration::from_secs(800));
        assert_eq!(rotation_point(end, start, 0.5), end, "an odd certificate: at once");
    }

    #[test]
    fn micro_times_have_six_digits_and_z() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(micro_time(t), "2023-11-14T22:13:20.123456Z");
        let whole = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(micro_time(whole), "2023-11-14T22:13:20.000000Z");
    }

    #[test]
    fn back_off_doubles_to_thirty_seconds_with_a_fifth_of_jitter() {
        for (n, base) in [(1, 1), (2, 2), (3, 4), (5, 16), (6, 30), (40, 30)] {
            let b = backoff(n);
            let base = Duration::from_secs(base);
            assert!(b >= base && b <= base + base / 5, "{n}: {b:?}");
        }
    }

    #[test]
    fn a_status_change_is_named_by_field_and_condition() {
        let old = json!({"images": [1], "conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure"}]});
        let new = json!({"images": [2], "conditions": [{"type": "Ready", "status": "False"}, {"type": "DiskPressure"}],
            "addresses": []});
        assert_eq!(changed_keys(&old, &new), ["conditions[Ready]", "images", "addresses"]);
        assert!(changed_keys(&old, &old).is_empty());
    }

    #[test]
    fn only_heartbeats_do_not_count_as_a_change() {
        let a = json!({"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "1", "lastTransitionTime": "0"}]});
        let mut b = a.clone();
        b["conditions"][0]["lastHeartbeatTime"] = json!("2");
        assert_eq!(without_heartbeats(&a), without_heartbeats(&b));
        b["conditions"][0]["status"] = json!("False");
        assert_ne!(without_heartbeats(&a), without_heartbeats(&b));
    }
}

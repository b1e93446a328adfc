//! Service account tokens for projected `serviceAccountToken` volumes:
//! `TokenRequest` (`serviceaccounts/NAME/token`) with the volume's audience
//! and expiry, bound to the pod (so the API server's NodeRestriction lets
//! this node ask, and the token dies with the pod), cached per pod,
//! service account, audience and expiry, and asked again once 80 % of its
//! life has passed or it is a day old, as the kubelet's token manager
//! does. The sync phases rewrite the volume every pass, so a renewed token
//! reaches the file within `syncFrequency`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde_json::{Value, json};

use super::record::{TokenRecord, epoch};
use super::{ClusterError, Shared};
use crate::model::{self, Pod};

/// Cached tokens at most (a node's pods times their token volumes).
const MAX_CACHED: usize = 4096;

#[derive(Clone)]
struct Cached {
    token: String,
    issued: SystemTime,
    expires: SystemTime,
}

impl Cached {
    /// Ask again: 80 % of its life gone, or a day old.
    fn stale(&self, now: SystemTime) -> bool {
        let life = self.expires.duration_since(self.issued).unwrap_or_default();
        let age = now.duration_since(self.issued).unwrap_or_default();
        age >= life.mul_f64(0.8) || age >= Duration::from_secs(24 * 3600)
    }
}

/// The node's token cache.
pub struct Tokens {
    shared: Arc<Shared>,
    cache: Mutex<HashMap<(String, String, String, i64), Cached>>,
}

impl Tokens {
    pub fn new(shared: Arc<Shared>) -> Self {
        Tokens { shared, cache: Mutex::new(HashMap::new()) }
    }

    /// A token of the pod's service account (see [`crate::pod::cluster::ClusterFacts::token`]).
    pub fn token(&self, pod: &Pod, audience: &str, seconds: i64) -> Result<String, ClusterError> {
        let sa = pod.spec.as_ref().and_then(|s| s.service_account_name.clone()).filter(|s| !s.is_empty());
        let sa = sa.unwrap_or_else(|| "default".to_string());
        let key = (model::uid(pod).to_string(), sa.clone(), audience.to_string(), seconds);
        let now = SystemTime::now();
        let cached = self.cache.lock().get(&key).cloned();
        if let Some(c) = &cached
            && !c.stale(now)
        {
            return Ok(c.token.clone());
        }
        match self.request(pod, &sa, audience, seconds) {
            Ok(fresh) => {
                let token = fresh.token.clone();
                let mut cache = self.cache.lock();
                cache.retain(|_, c| c.expires > now);
                if cache.len() < MAX_CACHED {
                    cache.insert(key, fresh);
                }
                // kept on disk: a node started while the API is away
                // mounts the tokens it still has
                let all: Vec<TokenRecord> = cache
                    .iter()
                    .map(|(k, c)| TokenRecord {
                        key: k.clone(),
                        token: c.token.clone(),
                        issued: epoch(c.issued),
                        expires: epoch(c.expires),
                    })
                    .collect();
                drop(cache);
                if let Err(e) = self.shared.record.save_tokens(&all) {
                    self.shared.record_failed("its pods' tokens", &e);
                }
                Ok(token)
            }
            // a token still valid serves while a new one cannot be had
            Err(e) => match cached.filter(|c| c.expires > now) {
                Some(c) => {
                    log::warn!(
                        "pod {}: renewing its service account token: {e}; the current one serves",
                        model::pod_ref(pod)
                    );
                    Ok(c.token)
                }
                None => Err(e),
            },
        }
    }

    /// The unexpired tokens of the node's record (at the start).
    pub fn load_record(&self) {
        match self.shared.record.load_tokens() {
            Ok(all) => {
                let now = SystemTime::now();
                let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
                let mut cache = self.cache.lock();
                for t in all.into_iter().filter(|t| at(t.expires) > now).take(MAX_CACHED) {
                    cache.insert(t.key, Cached { token: t.token, issued: at(t.issued), expires: at(t.expires) });
                }
            }
            Err(e) => log::error!("cluster: the node's recorded tokens are not used: {e}"),
        }
    }

    fn request(&self, pod: &Pod, sa: &str, audience: &str, seconds: i64) -> Result<Cached, ClusterError> {
        let client = self
            .shared
            .client()
            .ok_or_else(|| ClusterError::Unreachable("the node has no identity in its cluster yet".into()))?;
        let body = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": if audience.is_empty() { json!([]) } else { json!([audience]) },
                "expirationSeconds": seconds,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": model::name(pod), "uid": model::uid(pod)},
            },
        });
        let path = format!("/api/v1/namespaces/{}/serviceaccounts/{sa}/token", model::namespace(pod));
        let issued = SystemTime::now();
        let r = client.send("POST", &path, "application/json", body.to_string().as_bytes())?;
        if r.status != 201 && r.status != 200 {
            return Err(super::api_error(&format!("requesting a token of service account {sa}"), &r));
        }
        let v: Value = serde_json::from_slice(&r.body)
            .map_err(|e| ClusterError::Protocol(format!("the TokenRequest's answer: {e}")))?;
        let token = v["status"]["token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ClusterError::Protocol("the TokenRequest has no token".into()))?;
        let expires = v["status"]["expirationTimestamp"]
            .as_str()
            .and_then(parse_time)
            .unwrap_or(issued + Duration::from_secs(seconds.max(600) as u64));
        Ok(Cached { token: token.to_string(), issued, expires })
    }
}

/// An RFC 3339 time in UTC (`2026-11-29T01:02:03Z`).
fn parse_time(s: &str) -> Option<SystemTime> {
    let t: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time = serde_json::from_value(json!(s)).ok()?;
    let secs = t.0.as_second();
    (secs >= 0).then(|| SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_renewed_after_four_fifths_of_its_life_or_a_day() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let c = Cached { token: "t".into(), issued: t0, expires: t0 + Duration::from_secs(3600) };
        assert!(!c.stale(t0 + Duration::from_secs(2879)));
        assert!(c.stale(t0 + Duration::from_secs(2880)));
        let year = Cached { expires: t0 + Duration::from_secs(365 * 86400), ..c };
        assert!(!year.stale(t0 + Duration::from_secs(86399)));
        assert!(year.stale(t0 + Duration::from_secs(86400)));
        assert_eq!(parse_time("1970-01-12T13:46:40Z"), Some(t0));
    }
}

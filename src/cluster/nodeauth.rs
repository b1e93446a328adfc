//! The cluster's say on who may call this node's kubelet paths (cluster
//! mode), as the kubelet's webhook authentication and authorization: a
//! bearer token is whoever the API server's `TokenReview` says (cached 2
//! minutes), and a caller may do what its `SubjectAccessReview` on
//! `nodes/<subresource>` of this node allows (cached 5 minutes when
//! allowed, 30 s when not). Called on the caller's own `kube-conn` thread;
//! every call is bounded by the client's timeout.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};

use super::Shared;
use crate::api::kube::authz::{ClusterAuth, User};
use crate::api::status::ApiError;

const TOKEN_TTL: Duration = Duration::from_secs(120);
const ALLOWED_TTL: Duration = Duration::from_secs(300);
const DENIED_TTL: Duration = Duration::from_secs(30);
/// Cache entries at most, each cache.
const MAX_CACHED: usize = 1024;

/// A token's user (`None`: refused) and when it was asked.
type TokenAnswer = (Option<User>, Instant);

/// A review's question: user, groups, verb, subresource.
type ReviewKey = (String, Vec<String>, String, String);

pub struct NodeAuth {
    shared: Arc<Shared>,
    node: String,
    /// By the token's SHA-256: the user (`None`: refused) and when asked.
    tokens: Mutex<HashMap<[u8; 32], TokenAnswer>>,
    /// By user, groups, verb, subresource: allowed and when asked.
    reviews: Mutex<HashMap<ReviewKey, (bool, Instant)>>,
}

impl NodeAuth {
    pub fn new(shared: Arc<Shared>, node: &str) -> Self {
        NodeAuth { shared, node: node.to_string(), tokens: Mutex::default(), reviews: Mutex::default() }
    }

    fn post(&self, path: &str, body: &Value) -> Result<Value, ApiError> {
        let unavailable = |m: String| ApiError::new(503, "ServiceUnavailable", m);
        let client =
            self.shared.client().ok_or_else(|| unavailable("the node has no identity in its cluster yet".into()))?;
        let r = client
            .send("POST", path, "application/json", body.to_string().as_bytes())
            .map_err(|e| unavailable(format!("asking the API server: {e}")))?;
        if r.status != 201 && r.status != 200 {
            return Err(ApiError::internal(super::api_error(path, &r).to_string()));
        }
        serde_json::from_slice(&r.body).map_err(|e| ApiError::internal(format!("{path}: {e}")))
    }
}

fn bounded<K: std::hash::Hash + Eq, V>(m: &mut HashMap<K, (V, Instant)>, ttl: Duration) {
    if m.len() >= MAX_CACHED {
        m.retain(|_, (_, at)| at.elapsed() < ttl);
        if m.len() >= MAX_CACHED {
            m.clear();
        }
    }
}

impl ClusterAuth for NodeAuth {
    fn review_token(&self, token: &str) -> Result<Option<User>, ApiError> {
        let key: [u8; 32] =
            ring::digest::digest(&ring::digest::SHA256, token.as_bytes()).as_ref().try_into().unwrap_or([0; 32]);
        if let Some((u, at)) = self.tokens.lock().get(&key)
            && at.elapsed() < TOKEN_TTL
        {
            return Ok(u.clone());
        }
        let v = self.post(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}),
        )?;
        let user = (v["status"]["authenticated"] == true).then(|| User {
            name: v["status"]["user"]["username"].as_str().unwrap_or_default().to_string(),
            groups: v["status"]["user"]["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|g| g.as_str().map(str::to_string))
                .collect(),
            cluster: true,
        });
        let mut cache = self.tokens.lock();
        bounded(&mut cache, TOKEN_TTL);
        cache.insert(key, (user.clone(), Instant::now()));
        Ok(user)
    }

    fn allowed(&self, user: &User, verb: &str, subresource: &str) -> Result<bool, ApiError> {
        let key = (user.name.clone(), user.groups.clone(), verb.to_string(), subresource.to_string());
        if let Some((ok, at)) = self.reviews.lock().get(&key)
            && at.elapsed() < if *ok { ALLOWED_TTL } else { DENIED_TTL }
        {
            return Ok(*ok);
        }
        let v = self.post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            &json!({
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user.name,
                    "groups": user.groups,
                    "resourceAttributes": {
                        "verb": verb, "resource": "nodes", "subresource": subresource, "name": self.node,
                    },
                },
            }),
        )?;
        let ok = v["status"]["allowed"] == true;
        let mut cache = self.reviews.lock();
        bounded(&mut cache, ALLOWED_TTL);
        cache.insert(key, (ok, Instant::now()));
        Ok(ok)
    }
}

//! What the Kubernetes API's handlers serve from ([`Ctx`]) and how an
//! operation's error reads as the API server's.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::api::ops::{ErrorKind, OpError, Ops};

use super::authz::Authorizer;
use super::watch::Hub;
use super::wire::ApiError;

/// What the handlers serve from.
pub struct Ctx {
    pub ops: Arc<Ops>,
    pub hub: Arc<Hub>,
    pub authz: Authorizer,
    pub healthy_within: Duration,
    /// `host:port` as clients reach the server.
    pub server_address: String,
    /// The server stops: streams end.
    pub stop: Arc<AtomicBool>,
    /// The cluster's authenticator and authorizer (cluster mode).
    pub cluster_auth: Arc<super::authz::ClusterAuthSlot>,
}

/// An operation's error as the API server's.
pub fn op_error(e: OpError, name: &str) -> ApiError {
    match e.kind {
        ErrorKind::Invalid => ApiError::new(422, "Invalid", e.message),
        ErrorKind::Forbidden => ApiError::forbidden(e.message),
        ErrorKind::NotFound => {
            let mut e = ApiError::new(404, "NotFound", e.message);
            e.details = Some((name.to_string(), "pods".into()));
            e
        }
        ErrorKind::AlreadyExists => ApiError::new(409, "AlreadyExists", e.message),
        ErrorKind::Precondition => ApiError::bad_request(e.message),
        ErrorKind::Internal => ApiError::internal(e.message),
        ErrorKind::Busy => ApiError::new(429, "TooManyRequests", e.message),
        ErrorKind::Conflict => ApiError::new(409, "Conflict", e.message),
    }
}

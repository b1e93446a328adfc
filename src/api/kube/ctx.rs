//! What the Kubernetes API's handlers serve from ([`Ctx`]).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::api::ops::Ops;
use crate::api::status::Res;
use crate::config::api_authz::Right;

use super::authz::{Ask, Authorizer, User};
use super::watch::Hub;

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

impl Ctx {
    /// 403 unless `user` may `verb` `resource` (in `ns`, or cluster-wide).
    pub fn check(&self, user: &User, verb: &str, resource: &str, ns: Option<&str>, right: Right) -> Res<()> {
        self.authz.check(user, Ask { verb, resource, group: "", namespace: ns, right })
    }
}

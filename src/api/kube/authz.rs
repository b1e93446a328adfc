//! Who may do what: the identity a client certificate carries ([`User`]:
//! CN and O entries) checked against the config's `apiAuthorization`
//! ([`Authorizer`]). Rights: `read` (get, list, watch, logs; never
//! secrets), `secrets` (read secrets; `write` includes it), `write`
//! (create, update, patch, delete), `exec` (exec, attach, port-forward);
//! each in every namespace or the ones a rule names. Cluster-wide asks
//! (a list across namespaces, nodes, namespaces) need a rule without
//! namespaces. Members of `adminGroup` may do everything. A refusal is the
//! API server's 403.

use std::sync::Arc;

use crate::api::status::ApiError;
use crate::config::api_authz::{ApiAuthorization, Right};

/// An authenticated client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
    /// Authenticated by the cluster (its CA's client certificate, or a
    /// bearer token its `TokenReview` accepted): authorized by the
    /// cluster's `SubjectAccessReview` on `nodes/<subresource>`, and only
    /// on the kubelet's paths.
    pub cluster: bool,
}

/// The cluster's authentication and authorization of callers of the
/// kubelet's paths (cluster mode), as the kubelet's webhook modes do; the
/// `cluster` edge fills the [`ClusterAuthSlot`].
pub trait ClusterAuth: Send + Sync {
    /// The user a bearer token is (`TokenReview`), `None` when the cluster
    /// does not accept it.
    fn review_token(&self, token: &str) -> Result<Option<User>, ApiError>;
    /// Whether `user` may `verb` on `nodes/<subresource>` of this node
    /// (`SubjectAccessReview`).
    fn allowed(&self, user: &User, verb: &str, subresource: &str) -> Result<bool, ApiError>;
}

/// Where the server finds the cluster's authenticator (empty standalone).
#[derive(Default)]
pub struct ClusterAuthSlot(parking_lot::RwLock<Option<Arc<dyn ClusterAuth>>>);

impl ClusterAuthSlot {
    pub fn set(&self, a: Arc<dyn ClusterAuth>) {
        *self.0.write() = Some(a);
    }

    pub fn get(&self) -> Option<Arc<dyn ClusterAuth>> {
        self.0.read().clone()
    }
}

/// The kubelet's mapping of a request to `nodes/<subresource>` and a verb
/// (its `GetRequestAttributes`): `/stats` → `stats`, `/metrics` →
/// `metrics`, `/logs` → `log`, `/spec` → `spec`, anything else → `proxy`;
/// GET/HEAD `get`, POST `create`, PUT `update`, PATCH `patch`, DELETE
/// `delete`.
pub fn kubelet_attributes(method: &str, path: &str) -> (&'static str, &'static str) {
    let verb = match method {
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "get",
    };
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    let sub = match first {
        "stats" => "stats",
        "metrics" => "metrics",
        "logs" => "log",
        "spec" => "spec",
        _ => "proxy",
    };
    (verb, sub)
}

/// One ask: the Kubernetes verb and resource (for the message), the right
/// it needs and where.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// `get`, `list`, `watch`, `create`, `delete`, `patch`, `update`.
    pub verb: &'a str,
    /// `pods`, `pods/log`, `secrets` ...
    pub resource: &'a str,
    /// API group (`""` for core).
    pub group: &'a str,
    /// `None`: cluster-wide (a cluster-scoped resource or every namespace).
    pub namespace: Option<&'a str>,
    pub right: Right,
}

/// The rules of the config.
#[derive(Debug, Clone, Default)]
pub struct Authorizer {
    cfg: ApiAuthorization,
}

impl Authorizer {
    pub fn new(cfg: ApiAuthorization) -> Self {
        Authorizer { cfg }
    }

    pub fn is_admin(&self, user: &User) -> bool {
        user.groups.contains(&self.cfg.admin_group)
    }

    /// `user` holds `right` in `namespace` (`None`: everywhere).
    pub fn allows(&self, user: &User, right: Right, namespace: Option<&str>) -> bool {
        if self.is_admin(user) {
            return true;
        }
        self.cfg.rules.iter().any(|r| {
            let who = r.users.contains(&user.name) || r.groups.iter().any(|g| user.groups.contains(g));
            let what = r.verbs.contains(&right) || (right == Right::Secrets && r.verbs.contains(&Right::Write));
            let where_ = r.namespaces.is_empty() || namespace.is_some_and(|ns| r.namespaces.iter().any(|n| n == ns));
            who && what && where_
        })
    }

    /// `user` holds `right` somewhere (cluster-scoped reads such as the
    /// node need read in some namespace).
    pub fn allows_somewhere(&self, user: &User, right: Right) -> bool {
        if self.is_admin(user) {
            return true;
        }
        self.cfg.rules.iter().any(|r| {
            (r.users.contains(&user.name) || r.groups.iter().any(|g| user.groups.contains(g)))
                && r.verbs.contains(&right)
        })
    }

    /// The API server's 403 unless `user` may do `ask`.
    pub fn check(&self, user: &User, ask: Ask) -> Result<(), ApiError> {
        // a cluster caller was authorized at the door (SubjectAccessReview)
        if user.cluster || self.allows(user, ask.right, ask.namespace) {
            return Ok(());
        }
        let (res, sub) = ask.resource.split_once('/').unwrap_or((ask.resource, ""));
        let scope = match ask.namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        let full = if sub.is_empty() { res.to_string() } else { format!("{res}/{sub}") };
        let what = if ask.group.is_empty() { res.to_string() } else { format!("{res}.{}", ask.group) };
        Err(ApiError::forbidden(format!(
            "{what} is forbidden: User \"{}\" cannot {} resource \"{full}\" in API group \"{}\" {scope}: podwarden's \
             apiAuthorization grants no {} right here",
            user.name,
            ask.verb,
            ask.group,
            ask.right.as_str()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::api_authz::AuthzRule;

    fn authz() -> Authorizer {
        Authorizer::new(ApiAuthorization {
            admin_group: "podwarden:admins".into(),
            rules: vec![
                AuthzRule {
                    users: vec!["bob".into()],
                    verbs: vec![Right::Read],
                    namespaces: vec!["default".into()],
                    ..Default::default()
                },
                AuthzRule { groups: vec!["ops".into()], verbs: vec![Right::Read, Right::Exec], ..Default::default() },
                AuthzRule {
                    users: vec!["dev".into()],
                    verbs: vec![Right::Write],
                    namespaces: vec!["dev".into()],
                    ..Default::default()
                },
            ],
        })
    }

    fn user(name: &str, groups: &[&str]) -> User {
        User { name: name.into(), groups: groups.iter().map(|g| g.to_string()).collect(), cluster: false }
    }

    #[test]
    fn rules_grant_rights_per_namespace_and_admins_everything() {
        let a = authz();
        let bob = user("bob", &[]);
        assert!(a.allows(&bob, Right::Read, Some("default")));
        assert!(!a.allows(&bob, Right::Read, Some("kube-system")));
        assert!(!a.allows(&bob, Right::Read, None), "a list across namespaces needs a cluster-wide rule");
        assert!(a.allows_somewhere(&bob, Right::Read));
        assert!(!a.allows(&bob, Right::Exec, Some("default")));
        let ops = user("eve", &["ops"]);
        assert!(a.allows(&ops, Right::Exec, Some("x")) && a.allows(&ops, Right::Read, None));
        assert!(!a.allows(&ops, Right::Write, Some("x")));
        let admin = user("admin", &["podwarden:admins"]);
        for r in [Right::Read, Right::Write, Right::Exec, Right::Secrets] {
            assert!(a.allows(&admin, r, None));
        }
        assert!(!a.allows_somewhere(&user("nobody", &[]), Right::Read));
    }

    #[test]
    fn secrets_need_their_own_right_or_write() {
        let a = authz();
        assert!(!a.allows(&user("bob", &[]), Right::Secrets, Some("default")), "read is not secrets");
        assert!(!a.allows(&user("eve", &["ops"]), Right::Secrets, Some("default")));
        assert!(a.allows(&user("dev", &[]), Right::Secrets, Some("dev")), "write includes secrets");
    }

    #[test]
    fn refusals_read_like_the_api_server() {
        let a = authz();
        let ask = Ask { verb: "list", resource: "pods", group: "", namespace: Some("kube-system"), right: Right::Read };
        let e = a.check(&user("bob", &[]), ask).unwrap_err();
        assert_eq!((e.code, e.reason), (403, "Forbidden"));
        assert!(
            e.message.starts_with(
                "pods is forbidden: User \"bob\" cannot list resource \"pods\" in API group \"\" in the namespace \"kube-system\""
            ),
            "{}",
            e.message
        );
        let ask = Ask { verb: "list", resource: "nodes", group: "", namespace: None, right: Right::Read };
        let e = a.check(&user("x", &[]), ask).unwrap_err();
        assert!(e.message.contains("at the cluster scope"), "{}", e.message);
        let ask = Ask { verb: "get", resource: "pods/log", group: "", namespace: Some("default"), right: Right::Read };
        assert!(a.check(&user("bob", &[]), ask).is_ok());
    }
}

//! `apiAuthorization`: who may do what through the Kubernetes API
//! (podwarden-only). Users and groups are the client certificates' subject
//! CN and O entries; each rule grants rights (`read`, `write`, `exec`,
//! `secrets`) in every namespace or in the ones it names; members of
//! `adminGroup` may do everything.

use serde::{Deserialize, Serialize};

/// The rights a rule grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Right {
    /// get, list, watch of pods (their logs and status too), events,
    /// nodes, namespaces, configmaps, metrics.
    Read,
    /// create, apply, patch, delete (pods, configmaps, secrets).
    Write,
    /// exec, attach, port-forward (and so `kubectl cp`).
    Exec,
    /// Reading secrets: never part of `read` (a pod reader must not see
    /// them); `write` includes it.
    Secrets,
}

impl Right {
    pub fn as_str(self) -> &'static str {
        match self {
            Right::Read => "read",
            Right::Write => "write",
            Right::Exec => "exec",
            Right::Secrets => "secrets",
        }
    }
}

/// One grant: these users and groups have these rights in these
/// namespaces (none: every namespace).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthzRule {
    pub users: Vec<String>,
    pub groups: Vec<String>,
    pub verbs: Vec<Right>,
    pub namespaces: Vec<String>,
}

/// The whole field.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiAuthorization {
    /// Members may do everything (`podwarden kubeconfig` puts its default
    /// user `admin` in it).
    pub admin_group: String,
    pub rules: Vec<AuthzRule>,
}

/// The default admin group.
pub const ADMIN_GROUP: &str = "podwarden:admins";

impl Default for ApiAuthorization {
    fn default() -> Self {
        ApiAuthorization { admin_group: ADMIN_GROUP.into(), rules: Vec::new() }
    }
}

impl ApiAuthorization {
    /// What the rules mean: each names someone and grants something; an
    /// empty name is refused. `Err((path below apiAuthorization, why))`.
    pub fn check(&self) -> Result<(), (Vec<String>, String)> {
        if self.admin_group.trim().is_empty() {
            return Err((vec!["adminGroup".into()], "expected a non-empty group name".into()));
        }
        for (i, r) in self.rules.iter().enumerate() {
            let at = |f: &str| vec!["rules".to_string(), i.to_string(), f.to_string()];
            if r.users.is_empty() && r.groups.is_empty() {
                return Err((at("users"), "a rule names at least one user or group".into()));
            }
            if r.verbs.is_empty() {
                return Err((at("verbs"), "a rule grants at least one of read, write, exec, secrets".into()));
            }
            for (f, list) in [("users", &r.users), ("groups", &r.groups), ("namespaces", &r.namespaces)] {
                if let Some(j) = list.iter().position(|s| s.trim().is_empty()) {
                    let mut p = at(f);
                    p.push(j.to_string());
                    return Err((p, "expected a non-empty name".into()));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError};

    fn field_of(yaml: &str) -> (String, String) {
        match Config::parse("c.yaml", yaml) {
            Err(ConfigError::Invalid { field, allowed, .. }) => (field, allowed),
            other => panic!("{yaml}: expected an invalid field, got {other:?}"),
        }
    }

    #[test]
    fn rules_are_read_and_bad_ones_name_their_field() {
        let c = Config::parse(
            "c.yaml",
            "apiAuthorization:\n  adminGroup: ops\n  rules:\n  - users: [bob]\n    verbs: [read, exec]\n    namespaces: [default]\n",
        )
        .unwrap();
        assert_eq!(c.api_authorization.admin_group, "ops");
        assert_eq!(c.api_authorization.rules[0].verbs, [super::Right::Read, super::Right::Exec]);
        assert_eq!(field_of("apiAuthorization:\n  rules:\n  - verbs: [read]\n").0, "apiAuthorization.rules[0].users");
        assert_eq!(field_of("apiAuthorization:\n  rules:\n  - users: [a]\n").0, "apiAuthorization.rules[0].verbs");
        let (f, why) = field_of("apiAuthorization:\n  rules:\n  - users: [a]\n    verbs: [delete]\n");
        assert!(f.starts_with("apiAuthorization.rules[0].verbs"), "{f}");
        assert!(why.contains("read"), "{why}");
        assert_eq!(field_of("apiAuthorization:\n  adminGroup: \"\"\n").0, "apiAuthorization.adminGroup");
        assert!(field_of("apiAuthorization:\n  rulez: []\n").0.starts_with("apiAuthorization"));
        assert_eq!(field_of("port: 70000\n").0, "port");
    }
}

//! A pod's image pull secrets as a keyring: the credentials its
//! `imagePullSecrets` name, tried before the node's (the kubelet's
//! `MakeDockerKeyring` over the pod's Secrets).

use std::collections::BTreeMap;

use thiserror::Error;

use super::credentials::{BasicKeyring, DockerConfigError, DockerConfigJson, DockerEntry, keyring_of};
use crate::model::objects::LocalObject;

/// An image pull secret that holds no usable docker config.
#[derive(Debug, Error)]
#[error("image pull secret {secret}: {source}")]
pub struct PullSecretError {
    pub secret: String,
    pub source: DockerConfigError,
}

/// The keyring of a pod's image pull secrets, as the kubelet makes it: a
/// `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson`
/// (`{"auths": {...}}`) and a `kubernetes.io/dockercfg` Secret's
/// `.dockercfg` (the entries alone); a Secret of another type adds
/// nothing. `Err` names the Secret and what is wrong, never a value.
pub fn pull_secrets_keyring(secrets: &[&LocalObject]) -> Result<BasicKeyring, PullSecretError> {
    let mut ring = BasicKeyring::default();
    for s in secrets {
        let parsed = match s.type_.as_deref() {
            Some("kubernetes.io/dockerconfigjson") => s.data.get(".dockerconfigjson").map(|b| {
                serde_json::from_slice::<DockerConfigJson>(b).map_err(DockerConfigError::Parse).map(|c| c.auths)
            }),
            Some("kubernetes.io/dockercfg") => s
                .data
                .get(".dockercfg")
                .map(|b| serde_json::from_slice::<BTreeMap<String, DockerEntry>>(b).map_err(DockerConfigError::Parse)),
            _ => None,
        };
        let entries = match parsed {
            None => continue,
            Some(Ok(e)) => e,
            Some(Err(source)) => return Err(PullSecretError { secret: s.key.to_string(), source }),
        };
        let one = keyring_of(entries).map_err(|source| PullSecretError { secret: s.key.to_string(), source })?;
        for (key, auths) in one.keys {
            for a in auths {
                ring.add(&key, a);
            }
        }
    }
    Ok(ring)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::images::credentials::repository;

    #[test]
    fn image_pull_secrets_of_both_docker_types_make_one_keyring_and_others_add_nothing() {
        use crate::model::objects::{Kind, from_value};
        let secret = |name: &str, type_: &str, key: &str, value: &str| {
            let v = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": "ns"}, "type": type_, "stringData": {key: value}});
            from_value(Kind::Secret, "test", v).unwrap().0
        };
        // "bob:pw2" in base64
        let json = secret(
            "a",
            "kubernetes.io/dockerconfigjson",
            ".dockerconfigjson",
            r#"{"auths": {"reg.example:5000": {"username": "alice", "password": "pw1"}}}"#,
        );
        let cfg = secret(
            "b",
            "kubernetes.io/dockercfg",
            ".dockercfg",
            r#"{"reg.example:5000/team": {"auth": "Ym9iOnB3Mg=="}}"#,
        );
        let opaque =
            secret("c", "Opaque", ".dockerconfigjson", r#"{"auths": {"reg.example:5000": {"username": "eve"}}}"#);
        let ring = pull_secrets_keyring(&[&json, &cfg, &opaque]).unwrap();
        let found = ring.lookup(&repository("reg.example:5000/team/app:v1"));
        assert_eq!(
            found.iter().map(|a| a.username.as_str()).collect::<Vec<_>>(),
            ["bob", "alice"],
            "the most specific key first; the Opaque Secret adds nothing"
        );
        assert_eq!(found[0].password(), "pw2");
        assert!(ring.lookup(&repository("other.example/app")).is_empty());
        let bad = secret("d", "kubernetes.io/dockerconfigjson", ".dockerconfigjson", "{not json");
        let e = pull_secrets_keyring(&[&bad]).unwrap_err().to_string();
        assert!(e.starts_with("image pull secret Secret ns/d: "), "{e}");
    }
}

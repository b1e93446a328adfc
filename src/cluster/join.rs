//! Discovery by bootstrap token, as `kubeadm join` does it: read
//! `kube-public/cluster-info` anonymously (the server not yet trusted),
//! check its kubeconfig against the token's signature
//! (`jws-kubeconfig-<id>`, HS256 keyed by the token's secret, the payload
//! detached) and its CA against the pinned hashes (SHA-256 of the CA's
//! SubjectPublicKeyInfo), read it again over TLS trusting that CA, and
//! write the bootstrap kubeconfig the daemon's TLS bootstrap starts from.

use std::path::Path;

use serde_json::Value;

use super::ClusterError;
use super::http::{Client, Credentials};
use super::kubeconfig::{self, UserRef};
use crate::api::kube::pki;

const CLUSTER_INFO: &str = "/api/v1/namespaces/kube-public/configmaps/cluster-info";

/// A bootstrap token `ID.SECRET` (6 and 16 of `[a-z0-9]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub id: String,
    pub secret: String,
}

impl Token {
    pub fn parse(text: &str) -> Result<Self, ClusterError> {
        let ok = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        match text.split_once('.') {
            Some((id, secret)) if ok(id, 6) && ok(secret, 16) => Ok(Token { id: id.into(), secret: secret.into() }),
            _ => Err(ClusterError::Config(
                "the token is not a bootstrap token: ID.SECRET, 6 and 16 characters of [a-z0-9]".into(),
            )),
        }
    }

    pub fn text(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }
}

/// A `sha256:HEX` pin of a CA's public key.
pub fn parse_pin(text: &str) -> Result<[u8; 32], ClusterError> {
    let bad =
        || ClusterError::Config(format!("--discovery-token-ca-cert-hash {text:?}: expected sha256:<64 hex digits>"));
    let hex = text.strip_prefix("sha256:").ok_or_else(bad)?;
    if hex.len() != 64 {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// SHA-256 of a certificate's SubjectPublicKeyInfo (kubeadm's CA pin).
pub fn spki_sha256(cert_der: &[u8]) -> Option<[u8; 32]> {
    let spki = pki::subject_public_key_info(cert_der)?;
    let d = ring::digest::digest(&ring::digest::SHA256, spki);
    d.as_ref().try_into().ok()
}

/// `sha256:HEX` of `pin`.
pub fn pin_text(pin: &[u8; 32]) -> String {
    format!("sha256:{}", crate::base::hex(pin))
}

fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    let std: String = text
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    pki::decode_base64(&std)
}

fn base64url(data: &[u8]) -> String {
    pki::base64(data).trim_end_matches('=').replace('+', "-").replace('/', "_")
}

/// Whether `jws` (compact, payload detached: `HEADER..SIGNATURE`) signs
/// `payload` with `token` (HS256, `kid` the token's ID).
pub fn detached_jws_valid(jws: &str, payload: &str, token: &Token) -> bool {
    let mut parts = jws.split('.');
    let (Some(header), Some(""), Some(sig), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let Some(h) = base64url_decode(header).and_then(|h| serde_json::from_slice::<Value>(&h).ok()) else {
        return false;
    };
    if h["alg"] != "HS256" || h["kid"].as_str().is_some_and(|k| k != token.id) {
        return false;
    }
    let Some(sig) = base64url_decode(sig) else { return false };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, token.secret.as_bytes());
    let signed = format!("{header}.{}", base64url(payload.as_bytes()));
    ring::hmac::verify(&key, signed.as_bytes(), &sig).is_ok()
}

/// What discovery found: the server and its CA, checked.
#[derive(Debug)]
pub struct Discovered {
    pub server: String,
    pub ca_pem: String,
}

/// Discover the cluster through `server` with `token`, its CA pinned by
/// one of `pins`.
pub fn discover(server: &str, token: &Token, pins: &[[u8; 32]]) -> Result<Discovered, ClusterError> {
    let refused = |why: String| ClusterError::Discovery(format!("{server}: {why}"));
    let insecure = Client::new(server, None, Credentials::Anonymous)?;
    let r = insecure.get(CLUSTER_INFO)?;
    if r.status != 200 {
        return Err(refused(format!("reading cluster-info: HTTP {}: {}", r.status, r.text())));
    }
    let cm: Value = serde_json::from_slice(&r.body).map_err(|e| refused(format!("cluster-info is not JSON: {e}")))?;
    let kc = cm["data"]["kubeconfig"].as_str().ok_or_else(|| refused("cluster-info has no kubeconfig".into()))?;
    let sig_key = format!("jws-kubeconfig-{}", token.id);
    let jws = cm["data"][sig_key.as_str()].as_str().ok_or_else(|| {
        refused(format!(
            "cluster-info has no {sig_key}: the token is unknown to the cluster, expired, or not yet signed \
             (the controller-manager's bootstrapsigner signs it)"
        ))
    })?;
    if !detached_jws_valid(jws, kc, token) {
        return Err(refused(format!("{sig_key} does not sign cluster-info's kubeconfig with this token")));
    }
    let v: Value = serde_yaml_ng::from_str(kc).map_err(|e| refused(format!("cluster-info's kubeconfig: {e}")))?;
    let cluster = &v["clusters"][0]["cluster"];
    let ca_data = cluster["certificate-authority-data"]
        .as_str()
        .ok_or_else(|| refused("cluster-info's kubeconfig has no certificate-authority-data".into()))?;
    let ca_pem = pki::decode_base64(ca_data)
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| refused("cluster-info's CA is not base64 PEM".into()))?;
    let found: Vec<[u8; 32]> = pki::pem_certs(&ca_pem).iter().filter_map(|d| spki_sha256(d)).collect();
    if found.is_empty() {
        return Err(refused("cluster-info's CA holds no certificate".into()));
    }
    if !found.iter().any(|f| pins.contains(f)) {
        let shown: Vec<String> = found.iter().map(pin_text).collect();
        return Err(refused(format!(
            "the cluster CA's public key {} matches no --discovery-token-ca-cert-hash",
            shown.join(", ")
        )));
    }
    let new_server = cluster["server"].as_str().unwrap_or(server).to_string();
    // the same, read again over TLS trusting the CA just checked
    let secure = Client::new(server, Some(&ca_pem), Credentials::Anonymous)?;
    let again = secure.get(CLUSTER_INFO)?;
    let cm2: Value = serde_json::from_slice(&again.body).unwrap_or(Value::Null);
    if again.status != 200 || cm2["data"]["kubeconfig"].as_str() != Some(kc) {
        return Err(refused("cluster-info read over TLS with its CA differs from the first read".into()));
    }
    Ok(Discovered { server: new_server, ca_pem })
}

/// Write the bootstrap kubeconfig (0600) for `found` with `token`.
pub fn write_bootstrap(path: &Path, found: &Discovered, token: &Token) -> Result<(), ClusterError> {
    let text =
        kubeconfig::render(&found.server, &found.ca_pem, "tls-bootstrap-token-user", &UserRef::Token(&token.text()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| ClusterError::Io(dir.display().to_string(), e))?;
    }
    crate::base::fsutil::write_atomically_mode(path, text.as_bytes(), 0o600)
        .map_err(|e| ClusterError::Io(path.display().to_string(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_pins_are_checked_for_shape() {
        assert_eq!(Token::parse("abcdef.0123456789abcdef").unwrap().id, "abcdef");
        for bad in
            ["abcdef0123456789abcdef", "ABCDEF.0123456789abcdef", "abcde.0123456789abcdef", "abcdef.0123456789abcde"]
        {
            assert!(Token::parse(bad).is_err(), "{bad}");
        }
        let hex = "0f".repeat(32);
        assert_eq!(parse_pin(&format!("sha256:{hex}")).unwrap(), [0x0f; 32]);
        assert_eq!(pin_text(&[0x0f; 32]), format!("sha256:{hex}"));
        assert!(
            parse_pin(&hex).is_err()
                && parse_pin("sha256:0f").is_err()
                && parse_pin(&format!("sha256:{}", "zz".repeat(32))).is_err()
        );
    }

    #[test]
    fn a_detached_signature_is_valid_only_for_its_payload_and_token() {
        let t = Token::parse("abcdef.0123456789abcdef").unwrap();
        let header = base64url(br#"{"alg":"HS256","kid":"abcdef"}"#);
        let payload = "apiVersion: v1\nkind: Config\n";
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, t.secret.as_bytes());
        let sig = ring::hmac::sign(&key, format!("{header}.{}", base64url(payload.as_bytes())).as_bytes());
        let jws = format!("{header}..{}", base64url(sig.as_ref()));
        assert!(detached_jws_valid(&jws, payload, &t));
        assert!(!detached_jws_valid(&jws, "apiVersion: v1\nkind: Other\n", &t), "another payload");
        let other = Token::parse("abcdef.fedcba9876543210").unwrap();
        assert!(!detached_jws_valid(&jws, payload, &other), "another secret");
        let none = format!("{}..{}", base64url(br#"{"alg":"none","kid":"abcdef"}"#), base64url(sig.as_ref()));
        assert!(!detached_jws_valid(&none, payload, &t), "alg none");
        assert!(!detached_jws_valid("x.y.z", payload, &t), "an attached payload");
    }
}

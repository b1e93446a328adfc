//! The node's client identity, as the kubelet's TLS bootstrap makes it: an
//! ECDSA P-256 key made here (never leaving the node), a
//! `certificates.k8s.io/v1` CertificateSigningRequest for
//! `kubernetes.io/kube-apiserver-client-kubelet` (CN `system:node:NAME`, O
//! `system:nodes`, usages digital signature and client auth, no names),
//! sent with the bootstrap kubeconfig's token; the controller-manager
//! approves and signs it; the certificate and key are kept together in
//! `<rootDir>/pki/kubelet-client-current.pem` (0600) and the node's
//! kubeconfig names that file.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use super::ClusterError;
use super::http::Client;
use super::kubeconfig::{self, Kubeconfig, UserRef};
use crate::api::kube::pki;

pub const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The certificate and key, in one file.
pub const CLIENT_PEM: &str = "kubelet-client-current.pem";
const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// Where the node's client certificate lives.
pub fn client_pem(root_dir: &Path) -> PathBuf {
    pki::dir_of(root_dir).join(CLIENT_PEM)
}

/// A PEM certificate's notAfter.
pub fn expiry(cert_pem: &str) -> Option<SystemTime> {
    pki::not_after(pki::pem_certs(cert_pem).first()?)
}

/// Whether `kubeconfig` holds a client certificate that is valid for at
/// least `margin` more.
pub fn usable(kubeconfig: &Path, margin: Duration) -> bool {
    let Ok(k) = Kubeconfig::read(kubeconfig) else { return false };
    match &k.user {
        kubeconfig::User::Cert { cert_pem, .. } => expiry(cert_pem).is_some_and(|t| t > SystemTime::now() + margin),
        kubeconfig::User::Token(_) => true,
    }
}

/// A new key and the CSR's PEM for `node`.
pub fn new_request(node: &str) -> Result<(rcgen::KeyPair, String), ClusterError> {
    let key = rcgen::KeyPair::generate().map_err(|e| ClusterError::Tls(format!("making a key: {e}")))?;
    let mut params =
        rcgen::CertificateParams::new(Vec::<String>::new()).map_err(|e| ClusterError::Tls(format!("the CSR: {e}")))?;
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "system:nodes");
    dn.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params.distinguished_name = dn;
    let csr = params.serialize_request(&key).map_err(|e| ClusterError::Tls(format!("the CSR: {e}")))?;
    let pem = csr.pem().map_err(|e| ClusterError::Tls(format!("the CSR: {e}")))?;
    Ok((key, pem))
}

/// Ask `client`'s server for a certificate for `node` and wait (at most
/// `wait`) until it is signed: (certificate PEM, key PEM). Between polls it
/// sleeps with `pause`, which returns false when the caller is stopping.
pub fn request_certificate(
    client: &Client,
    node: &str,
    wait: Duration,
    pause: &dyn Fn(Duration) -> bool,
) -> Result<(String, String), ClusterError> {
    let (key, csr_pem) = new_request(node)?;
    let body = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": pki::base64(csr_pem.as_bytes()),
            "signerName": SIGNER,
            "usages": ["digital signature", "client auth"],
        },
    });
    let r = client.send("POST", CSRS, "application/json", body.to_string().as_bytes())?;
    if r.status != 201 {
        return Err(ClusterError::Api { what: "creating the CSR".into(), status: r.status, message: r.text() });
    }
    let made: Value = serde_json::from_slice(&r.body).map_err(|e| ClusterError::Protocol(format!("the CSR: {e}")))?;
    let name = made["metadata"]["name"].as_str().unwrap_or_default().to_string();
    log::info!("cluster: asked for the node's client certificate in CSR {name} (signer {SIGNER})");
    let start = Instant::now();
    let (pause_for, mut delay) = (pause, Duration::from_millis(200));
    loop {
        let r = client.get(&format!("{CSRS}/{name}"))?;
        if r.status != 200 {
            return Err(ClusterError::Api { what: format!("reading CSR {name}"), status: r.status, message: r.text() });
        }
        let csr: Value =
            serde_json::from_slice(&r.body).map_err(|e| ClusterError::Protocol(format!("CSR {name}: {e}")))?;
        for c in csr["status"]["conditions"].as_array().into_iter().flatten() {
            if matches!(c["type"].as_str(), Some("Denied" | "Failed")) && c["status"] != "False" {
                return Err(ClusterError::Refused(format!(
                    "CSR {name} was {}: {} {}",
                    c["type"].as_str().unwrap_or_default().to_lowercase(),
                    c["reason"].as_str().unwrap_or_default(),
                    c["message"].as_str().unwrap_or_default()
                )));
            }
        }
        if let Some(cert) = csr["status"]["certificate"].as_str().filter(|c| !c.is_empty()) {
            let pem = pki::decode_base64(cert)
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| ClusterError::Protocol(format!("CSR {name}: the certificate is not base64 PEM")))?;
            log::info!("cluster: CSR {name} signed after {:?}", start.elapsed());
            return Ok((pem, key.serialize_pem()));
        }
        if start.elapsed() >= wait {
            return Err(ClusterError::Refused(format!(
                "CSR {name} was not approved and signed within {wait:?} (is the controller-manager's csrapproving and \
                 csrsigning running, and may system:bootstrappers create node client CSRs?)"
            )));
        }
        if !pause_for(delay) {
            return Err(ClusterError::Refused(format!("stopped while waiting for CSR {name}")));
        }
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

/// Keep `cert_pem` and `key_pem` at [`client_pem`] (0600) and write the
/// node's kubeconfig at `kubeconfig` (0600) for `server` and `ca_pem`.
pub fn store(
    root_dir: &Path,
    kubeconfig: &Path,
    server: &str,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Result<(), ClusterError> {
    let io = |p: &Path| {
        let p = p.display().to_string();
        move |e| ClusterError::Io(p, e)
    };
    let pem_path = client_pem(root_dir);
    let dir = pki::dir_of(root_dir);
    crate::base::fsutil::create_dir_mode(&dir, 0o700).map_err(io(&dir))?;
    let both = format!("{}\n{}", cert_pem.trim_end(), key_pem);
    crate::base::fsutil::write_atomically_mode(&pem_path, both.as_bytes(), 0o600).map_err(io(&pem_path))?;
    if let Some(d) = kubeconfig.parent() {
        std::fs::create_dir_all(d).map_err(io(d))?;
    }
    let text = kubeconfig::render(server, ca_pem, "default-auth", &UserRef::CertFile(&pem_path));
    crate::base::fsutil::write_atomically_mode(kubeconfig, text.as_bytes(), 0o600).map_err(io(kubeconfig))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_names_the_node_and_its_group_and_nothing_else() {
        let (_key, pem) = new_request("edge-1").unwrap();
        let der = pki::pem_der(&pem).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----"), "{pem}");
        let has = |needle: &[u8]| der.windows(needle.len()).any(|w| w == needle);
        assert!(has(b"system:node:edge-1") && has(b"system:nodes"));
        // no subjectAltName extension (OID 2.5.29.17) asked for
        assert!(!has(&[0x06, 0x03, 0x55, 0x1d, 0x11]));
    }
}

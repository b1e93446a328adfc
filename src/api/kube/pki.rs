//! The Kubernetes API's identity: a node CA and a serving certificate made
//! on first start under `<rootDir>/pki/` (dir 0700, files 0600), reused on
//! restart, the serving certificate made again when it expires within a
//! week or its names changed; client certificates for `podwarden
//! kubeconfig` (CN the user, O entries the groups, as Kubernetes reads
//! them), the issued ledger and the revocation list.
//!
//! Generation is rcgen's (ECDSA P-256 through ring, the provider rustls
//! already uses). Reading a client certificate needs three fields (serial,
//! subject CN and O): a minimal DER walk ([`ClientCert::parse`]), bounded
//! by the certificate's own length.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber,
};

/// The files under the PKI directory.
pub const CA_CERT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const SERVING_CERT: &str = "serving.crt";
pub const SERVING_KEY: &str = "serving.key";
/// One revoked serial (lowercase hex) a line; `#` comments.
pub const REVOKED: &str = "revoked";
/// One issued client certificate a line: `<serial> <user> <not-after unix>`.
pub const ISSUED: &str = "issued";

/// The CA lives ten years; a serving certificate one year.
const CA_LIFETIME: Duration = Duration::from_secs(10 * 365 * 86400);
const SERVING_LIFETIME: Duration = Duration::from_secs(365 * 86400);
/// A serving certificate this close to its end is made again.
const RENEW_BEFORE: Duration = Duration::from_secs(7 * 86400);
/// Largest PKI file read.
const MAX_FILE: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {why}")]
    Bad { path: String, why: String },
    #[error("making a certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PkiError + '_ {
    move |source| PkiError::Io { path: path.display().to_string(), source }
}

/// The PKI directory of a root dir.
pub fn dir_of(root_dir: &Path) -> PathBuf {
    root_dir.join("pki")
}

/// The serving certificate and the CA, as the server needs them (PEM).
#[derive(Debug, Clone)]
pub struct Identity {
    pub dir: PathBuf,
    pub ca_pem: String,
    pub serving_cert_pem: String,
    pub serving_key_pem: String,
}

fn read(path: &Path) -> Result<Option<String>, PkiError> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
        Ok(m) if !m.is_file() || m.len() > MAX_FILE => {
            return Err(PkiError::Bad {
                path: path.display().to_string(),
                why: "not a regular file of at most 1 MiB".into(),
            });
        }
        Ok(_) => {}
    }
    std::fs::read_to_string(path).map(Some).map_err(io_err(path))
}

fn write(path: &Path, text: &str) -> Result<(), PkiError> {
    crate::base::fsutil::write_atomically_mode(path, text.as_bytes(), crate::base::fsutil::PRIVATE_FILE_MODE)
        .map_err(io_err(path))
}

fn odt(t: SystemTime) -> time::OffsetDateTime {
    time::OffsetDateTime::from(t)
}

/// A random positive 16-byte serial number.
pub fn random_serial() -> Result<Vec<u8>, PkiError> {
    let path = Path::new("/dev/urandom");
    let mut b = [0u8; 16];
    std::io::Read::read_exact(&mut std::fs::File::open(path).map_err(io_err(path))?, &mut b).map_err(io_err(path))?;
    b[0] = (b[0] & 0x7f) | 0x40;
    Ok(b.to_vec())
}

/// Hex of a serial, as the revocation list holds it.
pub fn serial_hex(serial: &[u8]) -> String {
    let s = crate::base::hex(serial);
    let t = s.trim_start_matches('0');
    if t.is_empty() { "0".into() } else { t.into() }
}

/// The CA's parameters (its name is fixed by the node: an issuer made
/// again from them signs certificates that chain to the stored CA).
fn ca_params(node: &str) -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("podwarden-ca@{node}"));
    dn.push(DnType::OrganizationName, "podwarden");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    p
}

/// The CA of `dir` (made on first use): its certificate (PEM) and key.
fn ca(dir: &Path, node: &str, create: bool) -> Result<(String, KeyPair), PkiError> {
    let (cert_path, key_path) = (dir.join(CA_CERT), dir.join(CA_KEY));
    if let (Some(cert), Some(key)) = (read(&cert_path)?, read(&key_path)?) {
        let key = KeyPair::from_pem(&key).map_err(|e| PkiError::Bad {
            path: key_path.display().to_string(),
            why: format!("not a private key: {e}"),
        })?;
        return Ok((cert, key));
    }
    if !create {
        return Err(PkiError::Bad {
            path: cert_path.display().to_string(),
            why: "no node CA yet: start podwarden (with the Kubernetes API on) once first".into(),
        });
    }
    let key = KeyPair::generate()?;
    let mut p = ca_params(node);
    let now = SystemTime::now();
    p.not_before = odt(now - Duration::from_secs(3600));
    p.not_after = odt(now + CA_LIFETIME);
    p.serial_number = Some(SerialNumber::from_slice(&random_serial()?));
    let cert = p.self_signed(&key)?;
    write(&key_path, &key.serialize_pem())?;
    write(&cert_path, &cert.pem())?;
    Ok((cert.pem(), key))
}

fn issuer_name(ca_pem: &str, path: &Path) -> Result<String, PkiError> {
    let der = pem_der(ca_pem)
        .ok_or_else(|| PkiError::Bad { path: path.display().to_string(), why: "not a PEM certificate".into() })?;
    ClientCert::parse(&der)
        .map(|c| c.user)
        .ok_or_else(|| PkiError::Bad { path: path.display().to_string(), why: "cannot read the CA's name".into() })
}

/// The issuer that signs with the stored CA.
fn issuer<'a>(dir: &Path, ca_pem: &str, key: &'a KeyPair) -> Result<Issuer<'a, &'a KeyPair>, PkiError> {
    // the stored CA's CN fixes the node name it was made for
    let cn = issuer_name(ca_pem, &dir.join(CA_CERT))?;
    let node = cn.strip_prefix("podwarden-ca@").unwrap_or(&cn);
    Ok(Issuer::new(ca_params(node), key))
}

/// The names the serving certificate carries.
pub fn serving_names(node: &str) -> Vec<String> {
    let mut names = vec![node.to_string(), "localhost".into(), "127.0.0.1".into(), "::1".into()];
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_string();
    if !host.is_empty() && !names.contains(&host) {
        names.push(host);
    }
    if let Some(ip) = crate::sys::first_ipv4_address() {
        names.push(ip.to_string());
    }
    names
}

/// The identity of `root_dir` for node `node`: the CA and serving
/// certificate, made when missing, the serving one made again when it
/// ends within a week or does not carry `names`.
pub fn ensure(root_dir: &Path, node: &str, names: &[String]) -> Result<Identity, PkiError> {
    let dir = dir_of(root_dir);
    crate::base::fsutil::create_dir_mode(&dir, 0o700).map_err(io_err(&dir))?;
    let (ca_pem, ca_key) = ca(&dir, node, true)?;
    let (cert_path, key_path) = (dir.join(SERVING_CERT), dir.join(SERVING_KEY));
    let names_path = dir.join("serving.names");
    let wanted = names.join(",");
    if let (Some(cert), Some(key), Some(had)) = (read(&cert_path)?, read(&key_path)?, read(&names_path)?) {
        let fresh =
            pem_der(&cert).and_then(|d| not_after(&d)).is_some_and(|end| end > SystemTime::now() + RENEW_BEFORE);
        if fresh && had.trim() == wanted {
            return Ok(Identity { dir, ca_pem, serving_cert_pem: cert, serving_key_pem: key });
        }
        log::info!("Kubernetes API: making a new serving certificate (the old one ends soon or names {had:?})");
    }
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.subject_alt_names = names
        .iter()
        .map(|n| match n.parse::<std::net::IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => n.clone().try_into().map(SanType::DnsName),
        })
        .collect::<Result<_, _>>()?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("{node}@podwarden"));
    p.distinguished_name = dn;
    let now = SystemTime::now();
    p.not_before = odt(now - Duration::from_secs(3600));
    p.not_after = odt(now + SERVING_LIFETIME);
    p.serial_number = Some(SerialNumber::from_slice(&random_serial()?));
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.use_authority_key_identifier_extension = true;
    let cert = p.signed_by(&key, &issuer(&dir, &ca_pem, &ca_key)?)?;
    write(&key_path, &key.serialize_pem())?;
    write(&cert_path, &cert.pem())?;
    write(&names_path, &wanted)?;
    Ok(Identity { dir, ca_pem, serving_cert_pem: cert.pem(), serving_key_pem: key.serialize_pem() })
}

/// A client certificate made by [`issue_client`].
#[derive(Debug, Clone)]
pub struct IssuedCert {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub serial: String,
}

/// A client certificate for `user` in `groups`, valid for `lifetime`,
/// signed by the node CA of `root_dir` (which must exist), recorded in
/// the issued ledger.
pub fn issue_client(
    root_dir: &Path,
    user: &str,
    groups: &[String],
    lifetime: Duration,
) -> Result<IssuedCert, PkiError> {
    let dir = dir_of(root_dir);
    let (ca_pem, ca_key) = ca(&dir, "", false)?;
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    if groups.len() > MAX_GROUPS {
        return Err(PkiError::Bad { path: "--group".into(), why: format!("at most {MAX_GROUPS} groups") });
    }
    // rcgen keeps one entry per attribute type: each group goes in as a
    // placeholder type 2.5.4.(90+i) (encoded as long as O's 2.5.4.10),
    // patched to O below and signed again
    let mut dn = DistinguishedName::new();
    for (i, g) in groups.iter().enumerate() {
        dn.push(DnType::CustomDnType(vec![2, 5, 4, 90 + i as u64]), rcgen::DnValue::Utf8String(g.clone()));
    }
    dn.push(DnType::CommonName, user);
    p.distinguished_name = dn;
    let now = SystemTime::now();
    p.not_before = odt(now - Duration::from_secs(300));
    p.not_after = odt(now + lifetime);
    let serial = random_serial()?;
    p.serial_number = Some(SerialNumber::from_slice(&serial));
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p.use_authority_key_identifier_extension = true;
    let cert = p.signed_by(&key, &issuer(&dir, &ca_pem, &ca_key)?)?;
    let der = with_groups_as_o(cert.der(), groups.len(), &ca_key).ok_or_else(|| PkiError::Bad {
        path: "client certificate".into(),
        why: "cannot re-encode its groups".into(),
    })?;
    let cert_pem = pem("CERTIFICATE", &der);
    let hex = serial_hex(&serial);
    let end = (now + lifetime).duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
    let ledger = dir.join(ISSUED);
    let mut text = read(&ledger)?.unwrap_or_default();
    text.push_str(&format!("{hex} {user} {end}\n"));
    write(&ledger, &text)?;
    Ok(IssuedCert { ca_pem, cert_pem, key_pem: key.serialize_pem(), serial: hex })
}

/// Groups a client certificate may carry.
pub const MAX_GROUPS: usize = 30;

/// DER length bytes.
fn der_len(n: usize) -> Vec<u8> {
    if n < 0x80 {
        return vec![n as u8];
    }
    let bytes: Vec<u8> = n.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
    let mut out = vec![0x80 | bytes.len() as u8];
    out.extend(bytes);
    out
}

fn der_tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend(der_len(content.len()));
    out.extend_from_slice(content);
    out
}

/// `cert` with its `n` placeholder attribute types (2.5.4.90+i) made O
/// (2.5.4.10), signed again by `ca`.
fn with_groups_as_o(cert: &[u8], n: usize, ca: &KeyPair) -> Option<Vec<u8>> {
    let (0x30, body, _) = der(cert)? else { return None };
    let (tbs_tag, tbs_content, rest) = der(body)?;
    let (_, alg, _) = der(rest)?;
    let mut tbs = der_tlv(tbs_tag, tbs_content);
    for i in 0..n {
        let placeholder = [0x06, 0x03, 0x55, 0x04, 90 + i as u8];
        let at = tbs.windows(5).position(|w| w == placeholder)?;
        tbs[at + 4] = 0x0a;
    }
    let sig = rcgen::SigningKey::sign(ca, &tbs).ok()?;
    let mut bits = vec![0u8];
    bits.extend(sig);
    let mut content = tbs;
    content.extend(der_tlv(0x30, alg));
    content.extend(der_tlv(0x03, &bits));
    Some(der_tlv(0x30, &content))
}

/// PEM of DER bytes.
fn pem(label: &str, der: &[u8]) -> String {
    let b = base64(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Revoke certificates: the serials given and every serial the ledger
/// records for `users`. Returns the serials newly added.
pub fn revoke(root_dir: &Path, serials: &[String], users: &[String]) -> Result<Vec<String>, PkiError> {
    let dir = dir_of(root_dir);
    let ledger = read(&dir.join(ISSUED))?.unwrap_or_default();
    let mut wanted: Vec<String> = serials.iter().map(|s| normalize_serial(s)).collect();
    for line in ledger.lines() {
        let mut f = line.split_whitespace();
        if let (Some(serial), Some(user)) = (f.next(), f.next())
            && users.iter().any(|u| u == user)
        {
            wanted.push(serial.to_string());
        }
    }
    let path = dir.join(REVOKED);
    let mut text = read(&path)?.unwrap_or_default();
    let had = parse_revoked(&text);
    let mut added = Vec::new();
    for s in wanted {
        if !had.contains(&s) && !added.contains(&s) {
            text.push_str(&s);
            text.push('\n');
            added.push(s);
        }
    }
    write(&path, &text)?;
    Ok(added)
}

/// A serial as the list holds it: lowercase hex without separators or
/// leading zeros.
pub fn normalize_serial(s: &str) -> String {
    let hex: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect::<String>().to_ascii_lowercase();
    let t = hex.trim_start_matches('0');
    if t.is_empty() { "0".into() } else { t.into() }
}

/// The serials of a revocation list's text.
pub fn parse_revoked(text: &str) -> std::collections::HashSet<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(normalize_serial)
        .collect()
}

/// The first PEM block's DER bytes.
pub fn pem_der(pem: &str) -> Option<Vec<u8>> {
    let start = pem.find("-----BEGIN")?;
    let body_start = pem[start..].find('\n')? + start + 1;
    let end = pem[body_start..].find("-----END")? + body_start;
    decode_base64(&pem[body_start..end])
}

/// Every PEM block as (label, DER bytes), in order.
pub fn pem_blocks(pem: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find("-----BEGIN ") {
        let label_start = start + "-----BEGIN ".len();
        let Some(label_len) = rest[label_start..].find("-----") else { break };
        let label = rest[label_start..label_start + label_len].to_string();
        let Some(end) = rest[start..].find("-----END").map(|e| e + start) else { break };
        if let Some(d) = pem_der(&rest[start..]) {
            out.push((label, d));
        }
        rest = &rest[end + "-----END".len()..];
        rest = rest.find('\n').map_or("", |n| &rest[n + 1..]);
    }
    out
}

/// The DER bytes of every `CERTIFICATE` block, in order.
pub fn pem_certs(pem: &str) -> Vec<Vec<u8>> {
    pem_blocks(pem).into_iter().filter(|(l, _)| l == "CERTIFICATE").map(|(_, d)| d).collect()
}

/// The first private key block's DER bytes (`PRIVATE KEY`, `EC PRIVATE
/// KEY`, `RSA PRIVATE KEY`).
pub fn pem_private_key(pem: &str) -> Option<Vec<u8>> {
    pem_blocks(pem).into_iter().find(|(l, _)| l.ends_with("PRIVATE KEY")).map(|(_, d)| d)
}

/// Standard base64 (padding, line breaks and spaces allowed).
pub fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\n' | b'\r' | b' ' => continue,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// Base64 (standard, padded) of `data`: the kubeconfig's `*-data` fields.
pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// One DER element: (tag, content, rest).
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        (rest[..n].iter().fold(0usize, |a, b| (a << 8) | *b as usize), &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// What the server reads of a client certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    /// Lowercase hex, as [`normalize_serial`].
    pub serial: String,
    /// The subject's CN.
    pub user: String,
    /// The subject's O entries.
    pub groups: Vec<String>,
}

const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
const OID_O: &[u8] = &[0x55, 0x04, 0x0a];

impl ClientCert {
    /// Serial, subject CN and O of a DER certificate (`None` if it is not
    /// one).
    pub fn parse(cert: &[u8]) -> Option<ClientCert> {
        let (_, tbs, _) = tbs_fields(cert)?;
        let (serial, rest) = tbs;
        let (_, _sig, rest) = der(rest)?; // signature algorithm
        let (_, _issuer, rest) = der(rest)?;
        let (_, _validity, rest) = der(rest)?;
        let (0x30, subject, _) = der(rest)? else { return None };
        let (mut user, mut groups) = (String::new(), Vec::new());
        let mut rdns = subject;
        while !rdns.is_empty() {
            let (_, set, more) = der(rdns)?;
            rdns = more;
            let mut atvs = set;
            while !atvs.is_empty() {
                let (_, atv, more) = der(atvs)?;
                atvs = more;
                let (0x06, oid, v) = der(atv)? else { return None };
                let (_, value, _) = der(v)?;
                let value = String::from_utf8_lossy(value).into_owned();
                if oid == OID_CN {
                    user = value;
                } else if oid == OID_O {
                    groups.push(value);
                }
            }
        }
        Some(ClientCert { serial: serial_hex(serial), user, groups })
    }
}

/// The TBS certificate's serial and what follows it.
type Tbs<'a> = (&'a [u8], &'a [u8]);

fn tbs_fields(cert: &[u8]) -> Option<(u8, Tbs<'_>, ())> {
    let (0x30, body, _) = der(cert)? else { return None };
    let (0x30, tbs, _) = der(body)? else { return None };
    let (tag, content, rest) = der(tbs)?;
    let (serial, rest) = if tag == 0xa0 {
        let (0x02, s, r) = der(rest)? else { return None };
        (s, r)
    } else if tag == 0x02 {
        (content, rest)
    } else {
        return None;
    };
    Some((0, (serial, rest), ()))
}

/// A certificate's SubjectPublicKeyInfo, whole (tag and length included).
pub fn subject_public_key_info(cert: &[u8]) -> Option<&[u8]> {
    let (_, (_, rest), _) = tbs_fields(cert)?;
    let (_, _sig, rest) = der(rest)?;
    let (_, _issuer, rest) = der(rest)?;
    let (_, _validity, rest) = der(rest)?;
    let (_, _subject, rest) = der(rest)?;
    let (0x30, _, after) = der(rest)? else { return None };
    Some(&rest[..rest.len() - after.len()])
}

/// A certificate's notAfter.
pub fn not_after(cert: &[u8]) -> Option<SystemTime> {
    let (_, (_, rest), _) = tbs_fields(cert)?;
    let (_, _sig, rest) = der(rest)?;
    let (_, _issuer, rest) = der(rest)?;
    let (0x30, validity, _) = der(rest)? else { return None };
    let (_, _nb, rest) = der(validity)?;
    let (tag, t, _) = der(rest)?;
    let t = std::str::from_utf8(t).ok()?;
    // UTCTime YYMMDDHHMMSSZ or GeneralizedTime YYYYMMDDHHMMSSZ
    let (year, rest) = match tag {
        0x17 => {
            let y: i32 = t.get(..2)?.parse().ok()?;
            (if y >= 50 { 1900 + y } else { 2000 + y }, t.get(2..)?)
        }
        0x18 => (t.get(..4)?.parse().ok()?, t.get(4..)?),
        _ => return None,
    };
    let n = |i: usize| -> Option<u8> { rest.get(i..i + 2)?.parse().ok() };
    let month = time::Month::try_from(n(0)?).ok()?;
    let date = time::Date::from_calendar_date(year, month, n(2)?).ok()?;
    let dt = date.with_hms(n(4)?, n(6)?, n(8)?).ok()?.assume_utc();
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(dt.unix_timestamp()).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("podwarden-pki-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    #[test]
    fn the_identity_is_made_once_private_and_reused() {
        use std::os::unix::fs::PermissionsExt;
        let root = tmp("ensure");
        let names = vec!["node-a".to_string(), "127.0.0.1".into(), "::1".into()];
        let a = ensure(&root, "node-a", &names).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&a.dir), 0o700);
        for f in [CA_CERT, CA_KEY, SERVING_CERT, SERVING_KEY] {
            assert_eq!(mode(&a.dir.join(f)), 0o600, "{f}");
        }
        let b = ensure(&root, "node-a", &names).unwrap();
        assert_eq!((a.ca_pem.clone(), a.serving_cert_pem.clone()), (b.ca_pem, b.serving_cert_pem), "reused");
        // other names: a new serving certificate from the same CA
        let c = ensure(&root, "node-a", &["node-a".to_string(), "10.0.0.9".into()]).unwrap();
        assert_eq!(a.ca_pem, c.ca_pem);
        assert_ne!(a.serving_cert_pem, c.serving_cert_pem);
        let end = not_after(&pem_der(&c.serving_cert_pem).unwrap()).unwrap();
        let left = end.duration_since(SystemTime::now()).unwrap();
        assert!(left > Duration::from_secs(360 * 86400) && left <= SERVING_LIFETIME, "{left:?}");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn client_certificates_carry_user_groups_and_serial_and_can_be_revoked() {
        let root = tmp("client");
        assert!(issue_client(&root, "bob", &[], Duration::from_secs(60)).is_err(), "no CA yet");
        ensure(&root, "n", &["n".to_string()]).unwrap();
        let groups = vec!["ops".to_string(), "podwarden:admins".into()];
        let c = issue_client(&root, "bob", &groups, Duration::from_secs(3600)).unwrap();
        let parsed = ClientCert::parse(&pem_der(&c.cert_pem).unwrap()).unwrap();
        assert_eq!(parsed, ClientCert { serial: c.serial.clone(), user: "bob".into(), groups });
        let other = issue_client(&root, "carol", &[], Duration::from_secs(3600)).unwrap();
        assert_eq!(revoke(&root, &[], &["bob".into()]).unwrap(), vec![c.serial.clone()]);
        assert!(revoke(&root, &[], &["bob".into()]).unwrap().is_empty(), "once");
        let list = parse_revoked(&std::fs::read_to_string(dir_of(&root).join(REVOKED)).unwrap());
        assert!(list.contains(&c.serial) && !list.contains(&other.serial));
        let upper = other.serial.to_uppercase();
        assert_eq!(revoke(&root, &[format!("00:{upper}")], &[]).unwrap(), vec![other.serial.clone()]);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn der_and_base64_reject_what_they_cannot_read() {
        assert_eq!(ClientCert::parse(&[0x30, 0x82, 0xff]), None);
        assert_eq!(ClientCert::parse(&[]), None);
        assert_eq!(base64(b"hello!?"), "aGVsbG8hPw==");
        assert_eq!(decode_base64("aGVsbG8hPw==").unwrap(), b"hello!?");
        assert_eq!(normalize_serial("00:AB:cd"), "abcd");
    }
}

//! The protobuf request bodies of kubectl's typed clients
//! (`application/vnd.kubernetes.protobuf`: kubectl 1.33's `create
//! configmap` and `create secret`): the `k8s\0` envelope (apimachinery's
//! `runtime.Unknown`: type meta and the raw message) around a v1
//! ConfigMap or Secret, decoded to the JSON object the write path takes.
//! Only what a create carries is read (metadata's name, namespace, labels,
//! annotations, and the fields a local object may not have so that they
//! are refused by name; data, binaryData, stringData, type, immutable);
//! other fields are skipped. Every length is checked against the input,
//! so no input reads past its end or allocates more than it holds.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// The envelope's first bytes.
const MAGIC: &[u8] = b"k8s\0";

/// Why a body cannot be read: malformed (400), or a kind not decoded here
/// (`unsupported`: 415, the client may send JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PbError {
    pub unsupported: bool,
    pub message: String,
}

fn bad(m: impl Into<String>) -> PbError {
    PbError { unsupported: false, message: m.into() }
}

/// One field of a message: its number and value.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// A fixed 32- or 64-bit value (not used by these messages).
    Fixed,
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, PbError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let (&b, rest) = self.buf.split_first().ok_or_else(|| bad("a varint runs past the end"))?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(bad("a varint longer than 10 bytes"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], PbError> {
        if n > self.buf.len() {
            return Err(bad("a field runs past the end"));
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }

    /// The next field, `None` at the end.
    fn next(&mut self) -> Result<Option<(u64, Field<'a>)>, PbError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = match key & 7 {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Field::Fixed
            }
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| bad("a length too large"))?;
                Field::Bytes(self.take(n)?)
            }
            5 => {
                self.take(4)?;
                Field::Fixed
            }
            t => return Err(bad(format!("wire type {t} is not used by these messages"))),
        };
        Ok(Some((key >> 3, field)))
    }
}

fn fields(buf: &[u8]) -> impl Iterator<Item = Result<(u64, Field<'_>), PbError>> {
    let mut r = Reader { buf };
    std::iter::from_fn(move || r.next().transpose())
}

fn text(b: &[u8], what: &str) -> Result<String, PbError> {
    String::from_utf8(b.to_vec()).map_err(|_| bad(format!("{what} is not UTF-8")))
}

/// A map entry (`key` = 1, `value` = 2).
fn entry(b: &[u8]) -> Result<(String, Vec<u8>), PbError> {
    let (mut k, mut v) = (String::new(), Vec::new());
    for f in fields(b) {
        match f? {
            (1, Field::Bytes(x)) => k = text(x, "a map key")?,
            (2, Field::Bytes(x)) => v = x.to_vec(),
            _ => {}
        }
    }
    Ok((k, v))
}

fn base64(b: &[u8]) -> Value {
    serde_json::to_value(k8s_openapi::ByteString(b.to_vec())).unwrap_or(Value::Null)
}

/// ObjectMeta: what a local object may set, and markers for what it may
/// not (so that validation names them).
fn metadata(b: &[u8]) -> Result<Value, PbError> {
    let mut m = Map::new();
    let (mut labels, mut annotations) = (BTreeMap::new(), BTreeMap::new());
    for f in fields(b) {
        match f? {
            (1, Field::Bytes(x)) => {
                m.insert("name".into(), json!(text(x, "metadata.name")?));
            }
            (2, Field::Bytes(x)) if !x.is_empty() => {
                m.insert("generateName".into(), json!(text(x, "metadata.generateName")?));
            }
            (3, Field::Bytes(x)) => {
                m.insert("namespace".into(), json!(text(x, "metadata.namespace")?));
            }
            (6, Field::Bytes(x)) if !x.is_empty() => {
                m.insert("resourceVersion".into(), json!(text(x, "metadata.resourceVersion")?));
            }
            (11, Field::Bytes(x)) => {
                let (k, v) = entry(x)?;
                labels.insert(k, text(&v, "a label")?);
            }
            (12, Field::Bytes(x)) => {
                let (k, v) = entry(x)?;
                annotations.insert(k, text(&v, "an annotation")?);
            }
            (13, Field::Bytes(_)) => {
                m.insert("ownerReferences".into(), json!([{}]));
            }
            (14, Field::Bytes(x)) => {
                let list = m.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(l) = list.as_array_mut() {
                    l.push(json!(text(x, "a finalizer")?));
                }
            }
            _ => {}
        }
    }
    if !labels.is_empty() {
        m.insert("labels".into(), json!(labels));
    }
    if !annotations.is_empty() {
        m.insert("annotations".into(), json!(annotations));
    }
    Ok(Value::Object(m))
}

/// A v1 ConfigMap message as JSON.
fn config_map(b: &[u8]) -> Result<Value, PbError> {
    let mut v = json!({"apiVersion": "v1", "kind": "ConfigMap"});
    let (mut data, mut binary) = (Map::new(), Map::new());
    for f in fields(b) {
        match f? {
            (1, Field::Bytes(x)) => v["metadata"] = metadata(x)?,
            (2, Field::Bytes(x)) => {
                let (k, val) = entry(x)?;
                data.insert(k, json!(text(&val, "a data value")?));
            }
            (3, Field::Bytes(x)) => {
                let (k, val) = entry(x)?;
                binary.insert(k, base64(&val));
            }
            (4, Field::Varint(n)) => v["immutable"] = json!(n != 0),
            _ => {}
        }
    }
    if !data.is_empty() {
        v["data"] = Value::Object(data);
    }
    if !binary.is_empty() {
        v["binaryData"] = Value::Object(binary);
    }
    Ok(v)
}

/// A v1 Secret message as JSON.
fn secret(b: &[u8]) -> Result<Value, PbError> {
    let mut v = json!({"apiVersion": "v1", "kind": "Secret"});
    let (mut data, mut string_data) = (Map::new(), Map::new());
    for f in fields(b) {
        match f? {
            (1, Field::Bytes(x)) => v["metadata"] = metadata(x)?,
            (2, Field::Bytes(x)) => {
                let (k, val) = entry(x)?;
                data.insert(k, base64(&val));
            }
            (3, Field::Bytes(x)) if !x.is_empty() => v["type"] = json!(text(x, "type")?),
            (4, Field::Bytes(x)) => {
                let (k, val) = entry(x)?;
                string_data.insert(k, json!(text(&val, "a stringData value")?));
            }
            (5, Field::Varint(n)) => v["immutable"] = json!(n != 0),
            _ => {}
        }
    }
    if !data.is_empty() {
        v["data"] = Value::Object(data);
    }
    if !string_data.is_empty() {
        v["stringData"] = Value::Object(string_data);
    }
    Ok(v)
}

/// meta/v1 DeleteOptions (client-go's typed `Delete` sends it as
/// protobuf): gracePeriodSeconds (1), preconditions (2: uid 1,
/// resourceVersion 2), orphanDependents (3), propagationPolicy (4), dryRun
/// (5, repeated).
fn delete_options(b: &[u8]) -> Result<Value, PbError> {
    let mut out = Map::new();
    let mut dry_run = Vec::new();
    for f in fields(b) {
        match f? {
            // an int64 varint: two's complement
            (1, Field::Varint(v)) => {
                out.insert("gracePeriodSeconds".into(), json!(v as i64));
            }
            (2, Field::Bytes(p)) => {
                let mut pre = Map::new();
                for g in fields(p) {
                    match g? {
                        (1, Field::Bytes(x)) => {
                            pre.insert("uid".into(), json!(text(x, "preconditions.uid")?));
                        }
                        (2, Field::Bytes(x)) => {
                            pre.insert("resourceVersion".into(), json!(text(x, "preconditions.resourceVersion")?));
                        }
                        _ => {}
                    }
                }
                out.insert("preconditions".into(), Value::Object(pre));
            }
            (3, Field::Varint(v)) => {
                out.insert("orphanDependents".into(), json!(v != 0));
            }
            (4, Field::Bytes(x)) => {
                out.insert("propagationPolicy".into(), json!(text(x, "propagationPolicy")?));
            }
            (5, Field::Bytes(x)) => dry_run.push(json!(text(x, "dryRun")?)),
            _ => {}
        }
    }
    if !dry_run.is_empty() {
        out.insert("dryRun".into(), Value::Array(dry_run));
    }
    out.insert("kind".into(), json!("DeleteOptions"));
    out.insert("apiVersion".into(), json!("v1"));
    Ok(Value::Object(out))
}

/// A protobuf body (`k8s\0` + `runtime.Unknown`) holding a v1 ConfigMap,
/// Secret or DeleteOptions, as JSON.
pub fn decode(body: &[u8]) -> Result<Value, PbError> {
    let rest = body.strip_prefix(MAGIC).ok_or_else(|| bad("the body does not start with the k8s protobuf magic"))?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), None);
    for f in fields(rest) {
        match f? {
            (1, Field::Bytes(tm)) => {
                for g in fields(tm) {
                    match g? {
                        (1, Field::Bytes(x)) => api_version = text(x, "apiVersion")?,
                        (2, Field::Bytes(x)) => kind = text(x, "kind")?,
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(x)) => raw = Some(x),
            (3, Field::Bytes(x)) if !x.is_empty() => return Err(bad("an encoded (compressed) body is not supported")),
            _ => {}
        }
    }
    let raw = raw.ok_or_else(|| bad("the envelope holds no object"))?;
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap") => config_map(raw),
        ("v1", "Secret") => secret(raw),
        ("v1" | "meta.k8s.io/v1", "DeleteOptions") => delete_options(raw),
        (v, k) => {
            Err(PbError { unsupported: true, message: format!("a protobuf {k} ({v}) is not taken here: send JSON") })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes(field: u64, b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        varint(field << 3 | 2, &mut out);
        varint(b.len() as u64, &mut out);
        out.extend_from_slice(b);
        out
    }

    fn entry_of(field: u64, k: &str, v: &[u8]) -> Vec<u8> {
        bytes(field, &[bytes(1, k.as_bytes()), bytes(2, v)].concat())
    }

    fn envelope(kind: &str, raw: &[u8]) -> Vec<u8> {
        let tm = [bytes(1, b"v1"), bytes(2, kind.as_bytes())].concat();
        [MAGIC.to_vec(), bytes(1, &tm), bytes(2, raw), bytes(3, b""), bytes(4, b"")].concat()
    }

    #[test]
    fn delete_options_as_client_gos_typed_delete_sends_them() {
        // an empty DeleteOptions, byte for byte as client-go 0.34 sent it
        let empty = b"k8s\x00\n\x13\n\x02v1\x12\rDeleteOptions\x12\x00\x1a\x00\"\x00";
        assert_eq!(decode(empty).unwrap(), json!({"kind": "DeleteOptions", "apiVersion": "v1"}));
        // gracePeriodSeconds 0, preconditions, propagationPolicy, dryRun
        let mut raw = Vec::new();
        varint(1 << 3, &mut raw);
        varint(0, &mut raw);
        raw.extend(bytes(2, &[bytes(1, b"u-1"), bytes(2, b"42")].concat()));
        raw.extend(bytes(4, b"Background"));
        raw.extend(bytes(5, b"All"));
        let mut negative = Vec::new();
        varint(1 << 3, &mut negative);
        varint(-1i64 as u64, &mut negative);
        assert_eq!(
            decode(&envelope("DeleteOptions", &raw)).unwrap(),
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                   "preconditions": {"uid": "u-1", "resourceVersion": "42"}, "propagationPolicy": "Background",
                   "dryRun": ["All"]})
        );
        assert_eq!(decode(&envelope("DeleteOptions", &negative)).unwrap()["gracePeriodSeconds"], -1);
        // cut short: an error, never a read past the end
        let whole = envelope("DeleteOptions", &raw);
        assert!(!decode(&whole[..whole.len() - 3]).unwrap_err().unsupported);
    }

    #[test]
    fn a_secret_and_a_config_map_as_kubectl_sends_them() {
        let meta = [
            bytes(1, b"db"),
            bytes(3, b"prod"),
            entry_of(11, "app", b"web"),
            // creationTimestamp: an empty Time, as Go encodes it
            bytes(8, b""),
        ]
        .concat();
        let mut raw = [bytes(1, &meta), entry_of(2, "password", b"hunter2"), bytes(3, b"Opaque")].concat();
        varint(5 << 3, &mut raw);
        varint(1, &mut raw);
        let v = decode(&envelope("Secret", &raw)).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": true,
                "metadata": {"name": "db", "namespace": "prod", "labels": {"app": "web"}},
                "data": {"password": "aHVudGVyMg=="}})
        );
        let raw =
            [bytes(1, &bytes(1, b"cfg")), entry_of(2, "a.conf", b"x=1\n"), entry_of(3, "bin", &[0, 1, 2])].concat();
        let v = decode(&envelope("ConfigMap", &raw)).unwrap();
        assert_eq!(v["data"], json!({"a.conf": "x=1\n"}));
        assert_eq!(v["binaryData"], json!({"bin": "AAEC"}));
        assert_eq!(v["metadata"], json!({"name": "cfg"}));
    }

    #[test]
    fn fields_a_local_object_may_not_have_are_kept_to_be_refused() {
        let meta = [bytes(1, b"x"), bytes(2, b"gen-"), bytes(13, b"\x0a\x01a"), bytes(14, b"f")].concat();
        let v = decode(&envelope("ConfigMap", &bytes(1, &meta))).unwrap();
        assert_eq!(v["metadata"]["generateName"], "gen-");
        assert_eq!(v["metadata"]["ownerReferences"], json!([{}]));
        assert_eq!(v["metadata"]["finalizers"], json!(["f"]));
    }

    #[test]
    fn bad_bodies_are_errors_never_panics() {
        assert!(decode(b"{\"kind\":\"Secret\"}").is_err());
        let e = decode(&envelope("Pod", b"")).unwrap_err();
        assert!(e.unsupported && e.message.contains("Pod"), "{e:?}");
        let good = envelope("Secret", &[bytes(1, &bytes(1, b"db")), entry_of(2, "k", b"v")].concat());
        // every truncation and every single-byte change: an error or a value, never a panic
        for n in 0..good.len() {
            let _ = decode(&good[..n]);
            for b in [0x00, 0x7f, 0x80, 0xff] {
                let mut c = good.clone();
                c[n] = b;
                let _ = decode(&c);
            }
        }
        // a length far past the end
        let mut huge = MAGIC.to_vec();
        varint(2 << 3 | 2, &mut huge);
        varint(u64::MAX >> 1, &mut huge);
        assert!(decode(&huge).is_err());
        let mut long = MAGIC.to_vec();
        long.extend_from_slice(&[0xff; 11]);
        assert!(decode(&long).is_err());
    }
}

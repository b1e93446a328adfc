//! The protobuf request bodies of Go's client-go typed clients and of
//! kubectl (`application/vnd.kubernetes.protobuf`): the `k8s\0` envelope
//! (apimachinery's `runtime.Unknown`: type meta and the raw message)
//! around a v1 Pod, ConfigMap, Secret or a meta/v1 DeleteOptions, decoded
//! by the schema in `pbschema` to the JSON object the write path takes
//! from a JSON body, so that everything after (validation, the refusal of
//! fields podwarden does not implement, by name) is shared.
//!
//! The JSON is what Go's encoding of the same object gives: a plain
//! (non-pointer) scalar that Go marks `omitempty` is left out when zero
//! (Go's protobuf encoder writes it always), a pointer's zero is kept
//! (`terminationGracePeriodSeconds: 0`); `bytes` in base64; a Quantity as
//! its text; an IntOrString as a number or a string; Time as RFC 3339 to
//! the second, MicroTime to the microsecond (a zero time, an empty message,
//! is left out: unset); Duration as Go's text (`1h0m0s`); FieldsV1 and
//! RawExtension as the JSON they hold; `,inline` messages merged into their
//! parent. A field number the schema does not know is skipped (proto's
//! tolerance); a known field with the wrong wire type is an error, never
//! dropped. Every length is checked against the input (nothing is read
//! past its end or allocated beyond what it holds) and messages nest at
//! most `MAX_DEPTH` deep; a malformed body is an error naming the field.

use serde_json::{Map, Value, json};

use super::pbschema::{F, INLINE, Kind, M, OMIT, PTR, REP, meta, pod};

/// The envelope's first bytes.
const MAGIC: &[u8] = b"k8s\0";

/// How deep messages may nest (a Pod's deepest is about 10).
pub const MAX_DEPTH: usize = 32;

/// Why a body cannot be read: malformed (400), or a kind not decoded here
/// (`unsupported`: 415, the client may send JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PbError {
    pub unsupported: bool,
    pub message: String,
    /// Where, innermost first (made into the message at the top).
    path: Vec<String>,
}

fn bad(m: impl Into<String>) -> PbError {
    PbError { unsupported: false, message: m.into(), path: Vec::new() }
}

impl PbError {
    /// The error, `segment` (a field's JSON name) one level further out.
    fn at(mut self, segment: String) -> PbError {
        if !segment.is_empty() {
            self.path.push(segment);
        }
        self
    }
}

/// One field of a message on the wire.
#[derive(Clone, Copy)]
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// A fixed 32- or 64-bit value (no Kubernetes message has one).
    Fixed(u8),
}

impl Field<'_> {
    fn wire(&self) -> &'static str {
        match self {
            Field::Varint(_) => "a varint",
            Field::Bytes(_) => "length-delimited bytes",
            Field::Fixed(1) => "a fixed 64-bit value",
            Field::Fixed(_) => "a fixed 32-bit value",
        }
    }
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
            return Err(bad(format!("a field of {n} bytes runs past the end ({} left)", self.buf.len())));
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
        if key >> 3 == 0 {
            return Err(bad("a field numbered 0"));
        }
        let field = match key & 7 {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Field::Fixed(1)
            }
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| bad("a length too large"))?;
                Field::Bytes(self.take(n)?)
            }
            5 => {
                self.take(4)?;
                Field::Fixed(5)
            }
            t => return Err(bad(format!("wire type {t} (groups or unknown) is not used by Kubernetes messages"))),
        };
        Ok(Some((key >> 3, field)))
    }
}

fn fields(buf: &[u8]) -> impl Iterator<Item = Result<(u64, Field<'_>), PbError>> {
    let mut r = Reader { buf };
    std::iter::from_fn(move || r.next().transpose())
}

fn text(b: &[u8]) -> Result<&str, PbError> {
    std::str::from_utf8(b).map_err(|_| bad("a string that is not UTF-8"))
}

fn base64(b: &[u8]) -> Value {
    serde_json::to_value(k8s_openapi::ByteString(b.to_vec())).unwrap_or(Value::Null)
}

fn wrong(kind: &str, got: Field) -> PbError {
    bad(format!("{} where {kind} is expected", got.wire()))
}

fn bytes_of<'a>(got: Field<'a>, kind: &str) -> Result<&'a [u8], PbError> {
    match got {
        Field::Bytes(b) => Ok(b),
        other => Err(wrong(kind, other)),
    }
}

/// The fields of `b`, a message `m`, into `out` (merged: a message sent
/// twice is one, as proto merges it).
fn message_into(m: &'static M, b: &[u8], depth: usize, out: &mut Map<String, Value>) -> Result<(), PbError> {
    if depth > MAX_DEPTH {
        return Err(bad(format!("messages nested more than {MAX_DEPTH} deep")));
    }
    for f in fields(b) {
        let (n, got) = f?;
        // a number the schema does not know: skipped, as proto does
        let Some(field) = m.field(n) else { continue };
        put(field, got, depth, out).map_err(|e| {
            let index = match out.get(field.json) {
                _ if field.flags & REP == 0 => String::new(),
                Some(Value::Array(a)) => format!("[{}]", a.len()),
                _ => "[0]".to_string(),
            };
            e.at(format!("{}{index}", field.json))
        })?;
    }
    Ok(())
}

/// A varint as the signed integer of `kind` (proto's int32 and int64 are
/// two's complement, an int32 sign-extended to 64 bits).
fn int(kind: Kind, v: u64) -> Result<i64, PbError> {
    match kind {
        Kind::I32 => i32::try_from(v as i64).map(i64::from).map_err(|_| bad(format!("{v} is out of an int32's range"))),
        _ => Ok(v as i64),
    }
}

/// One field's value into `out`: set, appended (repeated), or merged
/// (inline messages, maps).
fn put(f: &F, got: Field, depth: usize, out: &mut Map<String, Value>) -> Result<(), PbError> {
    let rep = f.flags & REP != 0;
    let value = match (f.kind, got) {
        (Kind::Msg(m), got) => {
            let b = bytes_of(got, "a message")?;
            if f.flags & INLINE != 0 {
                return message_into(m, b, depth + 1, out);
            }
            if !rep && let Some(Value::Object(o)) = out.get_mut(f.json) {
                return message_into(m, b, depth + 1, o);
            }
            let mut o = Map::new();
            message_into(m, b, depth + 1, &mut o)?;
            Some(Value::Object(o))
        }
        (Kind::MapStr | Kind::MapBytes | Kind::MapQuantity, got) => {
            let (k, v) = entry(f.kind, bytes_of(got, "a map entry")?, depth)?;
            let map = out.entry(f.json).or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(o) = map {
                o.insert(k, v);
            }
            return Ok(());
        }
        // a packed repeated scalar: its varints one after another
        (Kind::Bool | Kind::I32 | Kind::I64, Field::Bytes(b)) if rep => {
            let mut r = Reader { buf: b };
            while !r.buf.is_empty() {
                let v = r.varint()?;
                push(out, f.json, if matches!(f.kind, Kind::Bool) { json!(v != 0) } else { json!(int(f.kind, v)?) });
            }
            return Ok(());
        }
        (Kind::Bool, Field::Varint(v)) => Some(json!(v != 0)).filter(|_| v != 0 || keeps_zero(f)),
        (Kind::I32 | Kind::I64, Field::Varint(v)) => Some(json!(int(f.kind, v)?)).filter(|_| v != 0 || keeps_zero(f)),
        (Kind::Bool | Kind::I32 | Kind::I64, other) => return Err(wrong("a varint", other)),
        (Kind::Str, got) => {
            let s = text(bytes_of(got, "a string")?)?;
            Some(json!(s)).filter(|_| !s.is_empty() || keeps_zero(f))
        }
        (Kind::Bytes, got) => {
            let b = bytes_of(got, "bytes")?;
            Some(base64(b)).filter(|_| !b.is_empty() || keeps_zero(f))
        }
        (special, got) => special_value(special, bytes_of(got, "a message")?, depth + 1)?,
    };
    match value {
        Some(v) if rep => push(out, f.json, v),
        Some(v) => {
            out.insert(f.json.to_string(), v);
        }
        None => {}
    }
    Ok(())
}

/// Whether a zero value of a plain field is kept in JSON: a pointer's
/// always, a plain field's unless `omitempty`; repeated ones always.
fn keeps_zero(f: &F) -> bool {
    f.flags & (PTR | REP) != 0 || f.flags & OMIT == 0
}

fn push(out: &mut Map<String, Value>, key: &str, v: Value) {
    match out.entry(key).or_insert_with(|| Value::Array(Vec::new())) {
        Value::Array(a) => a.push(v),
        other => *other = Value::Array(vec![v]),
    }
}

/// A map entry (`key` = 1, `value` = 2) of a map of `kind`.
fn entry(kind: Kind, b: &[u8], depth: usize) -> Result<(String, Value), PbError> {
    let (mut k, mut v) = (String::new(), None);
    for f in fields(b) {
        match f? {
            (1, got) => k = text(bytes_of(got, "a map key")?)?.to_string(),
            (2, got) => {
                let b = bytes_of(got, "a map value").map_err(|e| e.at(format!("[{k}]")))?;
                v = Some(match kind {
                    Kind::MapStr => json!(text(b).map_err(|e| e.at(format!("[{k}]")))?),
                    Kind::MapBytes => base64(b),
                    _ => special_value(Kind::Quantity, b, depth + 1)
                        .map_err(|e| e.at(format!("[{k}]")))?
                        .unwrap_or_else(|| json!("0")),
                })
            }
            _ => {}
        }
    }
    let v = v.unwrap_or_else(|| match kind {
        Kind::MapQuantity => json!("0"),
        _ => json!(""),
    });
    Ok((k, v))
}

/// The varint and bytes fields of a small message by number (the special
/// messages have at most three).
fn small(b: &[u8]) -> Result<[Option<Field<'_>>; 4], PbError> {
    let mut out = [None; 4];
    for f in fields(b) {
        let (n, got) = f?;
        if let Some(slot) = usize::try_from(n).ok().and_then(|n| out.get_mut(n)) {
            *slot = Some(got);
        }
    }
    Ok(out)
}

fn varint_of(f: Option<Field>, what: &str) -> Result<u64, PbError> {
    match f {
        None => Ok(0),
        Some(Field::Varint(v)) => Ok(v),
        Some(other) => Err(wrong(what, other).at(what.to_string())),
    }
}

fn raw_of<'a>(f: Option<Field<'a>>, what: &str) -> Result<&'a [u8], PbError> {
    match f {
        None => Ok(&[]),
        Some(got) => bytes_of(got, "bytes").map_err(|e| e.at(what.to_string())),
    }
}

/// A message with its own JSON form: `None` when it is left out (a zero
/// time, an empty raw JSON).
fn special_value(kind: Kind, b: &[u8], depth: usize) -> Result<Option<Value>, PbError> {
    if depth > MAX_DEPTH {
        return Err(bad(format!("messages nested more than {MAX_DEPTH} deep")));
    }
    let f = small(b)?;
    Ok(match kind {
        Kind::Quantity => {
            let s = text(raw_of(f[1], "string")?)?;
            // a zero Quantity is written as "0"
            Some(json!(if s.is_empty() { "0" } else { s }))
        }
        Kind::IntOrString => match varint_of(f[1], "type")? {
            0 => Some(json!(int(Kind::I32, varint_of(f[2], "intVal")?)?)),
            1 => Some(json!(text(raw_of(f[3], "strVal")?)?)),
            t => return Err(bad(format!("an IntOrString of type {t} (0 int, 1 string)"))),
        },
        Kind::Time | Kind::MicroTime if b.is_empty() => None,
        Kind::Time | Kind::MicroTime => {
            let secs = varint_of(f[1], "seconds")? as i64;
            let nanos = int(Kind::I32, varint_of(f[2], "nanos")?)?;
            Some(json!(timestamp(secs, nanos, matches!(kind, Kind::MicroTime))?))
        }
        Kind::Duration => Some(json!(go_duration(varint_of(f[1], "duration")? as i64))),
        // FieldsV1, RawExtension: the JSON they hold
        _ => {
            let raw = raw_of(f[1], "raw")?;
            if raw.is_empty() {
                None
            } else {
                Some(serde_json::from_slice(raw).map_err(|e| bad(format!("the raw JSON is not JSON: {e}")))?)
            }
        }
    })
}

/// Seconds and nanoseconds since 1970 in RFC 3339, UTC, as Go's metav1
/// writes them: `2006-01-02T15:04:05Z`, or with microseconds
/// (`.000000Z`).
fn timestamp(secs: i64, nanos: i64, micro: bool) -> Result<String, PbError> {
    if !(0..1_000_000_000).contains(&nanos) {
        return Err(bad(format!("a time's nanos {nanos} is not in 0..1e9")));
    }
    let t = time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .filter(|t| (0..=9999).contains(&t.year()))
        .ok_or_else(|| bad(format!("a time of {secs} s is outside the years 0 to 9999")))?;
    let frac = if micro { format!(".{:06}", nanos / 1000) } else { String::new() };
    Ok(format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{frac}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    ))
}

/// Nanoseconds as Go's `time.Duration.String`: `1h2m3.5s`, `1.5ms`, `0s`.
fn go_duration(d: i64) -> String {
    /// `v / unit` with its fraction, trailing zeros dropped.
    fn frac(v: u64, unit: u64) -> String {
        let (whole, rest) = (v / unit, v % unit);
        if rest == 0 {
            return whole.to_string();
        }
        let width = unit.ilog10() as usize;
        format!("{whole}.{}", format!("{rest:0width$}").trim_end_matches('0'))
    }
    const S: u64 = 1_000_000_000;
    let u = d.unsigned_abs();
    let body = match u {
        0 => return "0s".into(),
        1..1_000 => format!("{u}ns"),
        1_000..1_000_000 => format!("{}µs", frac(u, 1_000)),
        1_000_000..S => format!("{}ms", frac(u, 1_000_000)),
        _ => {
            let (h, m, s) = (u / (3600 * S), u / (60 * S) % 60, frac(u % (60 * S), S));
            match (h, m) {
                (0, 0) => format!("{s}s"),
                (0, m) => format!("{m}m{s}s"),
                (h, m) => format!("{h}h{m}m{s}s"),
            }
        }
    };
    if d < 0 { format!("-{body}") } else { body }
}

/// The message a protobuf body's envelope names (apiVersion, kind).
fn schema_of(api_version: &str, kind: &str) -> Option<&'static M> {
    match (api_version, kind) {
        ("v1", "Pod") => Some(&pod::POD),
        ("v1", "ConfigMap") => Some(&pod::CONFIG_MAP),
        ("v1", "Secret") => Some(&pod::SECRET),
        ("v1" | "meta.k8s.io/v1", "DeleteOptions") => Some(&meta::DELETE_OPTIONS),
        _ => None,
    }
}

/// A protobuf body (`k8s\0` + `runtime.Unknown`) holding a v1 Pod,
/// ConfigMap, Secret or DeleteOptions, as JSON.
pub fn decode(body: &[u8]) -> Result<Value, PbError> {
    let rest = body.strip_prefix(MAGIC).ok_or_else(|| bad("the body does not start with the k8s protobuf magic"))?;
    let (mut api_version, mut kind, mut raw) = ("", "", None);
    for f in fields(rest) {
        match f.map_err(|e| malformed(e, "the envelope"))? {
            (1, Field::Bytes(tm)) => {
                for g in fields(tm) {
                    match g.map_err(|e| malformed(e, "the envelope's typeMeta"))? {
                        (1, Field::Bytes(x)) => api_version = text(x).map_err(|e| malformed(e, "apiVersion"))?,
                        (2, Field::Bytes(x)) => kind = text(x).map_err(|e| malformed(e, "kind"))?,
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
    let Some(m) = schema_of(api_version, kind) else {
        return Err(PbError {
            unsupported: true,
            message: format!("a protobuf {kind} ({api_version}) is not taken here: send JSON"),
            path: Vec::new(),
        });
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!(kind));
    message_into(m, raw, 1, &mut out).map_err(|e| malformed(e, &format!("the {kind}")))?;
    Ok(Value::Object(out))
}

/// The error at the top: where in `what` and what is wrong.
fn malformed(e: PbError, what: &str) -> PbError {
    let mut at = String::new();
    for seg in e.path.iter().rev() {
        if !at.is_empty() && !seg.starts_with('[') {
            at.push('.');
        }
        at.push_str(seg);
    }
    let place = if at.is_empty() { String::new() } else { format!(" at {at}") };
    bad(format!("the protobuf body is malformed: {what}{place}: {}", e.message))
}

#[cfg(test)]
mod tests {
    use super::*;

    // a tiny encoder: what Go's generated marshallers write

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

    /// A length-delimited field.
    fn bytes(field: u64, b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        varint(field << 3 | 2, &mut out);
        varint(b.len() as u64, &mut out);
        out.extend_from_slice(b);
        out
    }

    fn s(field: u64, t: &str) -> Vec<u8> {
        bytes(field, t.as_bytes())
    }

    /// A varint field (an int64 or int32 as two's complement).
    fn v(field: u64, x: i64) -> Vec<u8> {
        let mut out = Vec::new();
        varint(field << 3, &mut out);
        varint(x as u64, &mut out);
        out
    }

    fn msg(field: u64, parts: &[Vec<u8>]) -> Vec<u8> {
        bytes(field, &parts.concat())
    }

    fn entry_of(field: u64, k: &str, val: &[u8]) -> Vec<u8> {
        bytes(field, &[bytes(1, k.as_bytes()), bytes(2, val)].concat())
    }

    fn quantity(field: u64, k: &str, q: &str) -> Vec<u8> {
        entry_of(field, k, &s(1, q))
    }

    fn envelope(kind: &str, raw: &[u8]) -> Vec<u8> {
        let tm = [bytes(1, b"v1"), bytes(2, kind.as_bytes())].concat();
        [MAGIC.to_vec(), bytes(1, &tm), bytes(2, raw), bytes(3, b""), bytes(4, b"")].concat()
    }

    fn int_port(field: u64, p: i64) -> Vec<u8> {
        msg(field, &[v(1, 0), v(2, p), s(3, "")])
    }

    fn str_port(field: u64, p: &str) -> Vec<u8> {
        msg(field, &[v(1, 1), v(2, 0), s(3, p)])
    }

    #[test]
    fn a_pod_with_many_fields_as_client_go_sends_it() {
        let meta = msg(
            1,
            &[
                s(1, "web"),
                s(2, ""),
                s(3, "prod"),
                s(4, ""),
                s(5, ""),
                s(6, ""),
                v(7, 0),
                // creationTimestamp: a zero Time, empty
                bytes(8, b""),
                entry_of(11, "app", b"web"),
                entry_of(12, "note", b"a b"),
                s(14, "example.com/f"),
                msg(
                    17,
                    &[
                        s(1, "kubectl"),
                        s(2, "Update"),
                        s(3, "v1"),
                        msg(4, &[v(1, 1_700_000_000), v(2, 5)]),
                        s(6, "FieldsV1"),
                        msg(7, &[s(1, r#"{"f:spec":{}}"#)]),
                        s(8, ""),
                    ],
                ),
            ],
        );
        let env = [
            // value
            msg(7, &[s(1, "MODE"), s(2, "fast")]),
            // valueFrom a secret's key (LocalObjectReference inline)
            msg(7, &[s(1, "PASS"), s(2, ""), msg(3, &[msg(4, &[msg(1, &[s(1, "db")]), s(2, "password"), v(3, 1)])])]),
            // valueFrom a field
            msg(7, &[s(1, "NODE"), msg(3, &[msg(1, &[s(1, "v1"), s(2, "spec.nodeName")])])]),
        ]
        .concat();
        let resources =
            msg(8, &[quantity(1, "memory", "128Mi"), quantity(1, "cpu", "500m"), quantity(2, "cpu", "250m")]);
        let probe = msg(
            10,
            &[
                msg(1, &[msg(2, &[s(1, "/healthz"), int_port(2, 8080), s(3, ""), s(4, "HTTP")])]),
                v(2, 0),
                v(3, 1),
                v(4, 10),
                v(5, 0),
                v(6, 3),
            ],
        );
        let readiness = msg(11, &[msg(1, &[msg(3, &[str_port(1, "http"), s(2, "")])]), v(2, 5)]);
        let container = msg(
            2,
            &[
                s(1, "main"),
                s(2, "busybox"),
                s(3, "sh"),
                s(3, "-c"),
                s(4, "echo hi"),
                s(5, ""),
                msg(6, &[s(1, "http"), v(2, 0), v(3, 8080), s(4, "TCP"), s(5, "")]),
                env,
                resources,
                msg(9, &[s(1, "data"), v(2, 1), s(3, "/data"), s(4, "")]),
                probe,
                readiness,
                s(13, "/dev/termination-log"),
                s(14, "IfNotPresent"),
                msg(
                    15,
                    &[
                        msg(1, &[s(1, "NET_ADMIN"), s(2, "ALL")]),
                        v(2, 0),
                        v(4, 1000),
                        v(5, 1),
                        v(7, 0),
                        msg(11, &[s(1, "RuntimeDefault")]),
                    ],
                ),
                v(16, 0),
                v(17, 0),
                v(18, 0),
            ],
        );
        let volumes = [
            msg(1, &[s(1, "data"), msg(2, &[msg(2, &[s(1, "Memory"), msg(2, &[s(1, "1Gi")])])])]),
            msg(
                1,
                &[
                    s(1, "cfg"),
                    msg(
                        2,
                        &[msg(19, &[msg(1, &[s(1, "app-config")]), msg(2, &[s(1, "a"), s(2, "a.conf")]), v(3, 0o644)])],
                    ),
                ],
            ),
            msg(1, &[s(1, "tls"), msg(2, &[msg(6, &[s(1, "tls"), v(3, 0o400), v(4, 1)])])]),
            msg(1, &[s(1, "host"), msg(2, &[msg(1, &[s(1, "/var/log"), s(2, "Directory")])])]),
        ]
        .concat();
        let affinity = msg(
            18,
            &[msg(
                1,
                &[msg(1, &[msg(1, &[msg(1, &[s(1, "kubernetes.io/os"), s(2, "In"), s(3, "linux"), s(3, "plan9")])])])],
            )],
        );
        let spec = msg(
            2,
            &[
                volumes,
                container,
                s(3, "Always"),
                // terminationGracePeriodSeconds 0: a pointer, kept
                v(4, 0),
                s(6, "ClusterFirst"),
                entry_of(7, "disk", b"ssd"),
                s(8, ""),
                v(11, 0),
                // securityContext: supplementalGroups one plain, two packed
                msg(14, &[v(2, 1000), v(4, 4000), bytes(4, &[0xa0, 0x1f, 0xc0, 0x3e]), v(5, 2000)]),
                affinity,
                msg(
                    22,
                    &[s(1, "node.kubernetes.io/not-ready"), s(2, "Exists"), s(3, ""), s(4, "NoExecute"), v(5, 300)],
                ),
                msg(22, &[s(1, "dedicated"), s(2, "Equal"), s(3, "edge"), s(4, "NoSchedule")]),
                // an unknown field number: skipped
                v(999, 7),
            ],
        );
        let status = msg(3, &[s(1, "Pending"), msg(7, &[v(1, 1_700_000_000)])]);
        let got = decode(&envelope("Pod", &[meta, spec, status].concat())).unwrap();
        let want = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web", "namespace": "prod",
                "labels": {"app": "web"}, "annotations": {"note": "a b"},
                "finalizers": ["example.com/f"],
                "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                    "time": "2023-11-14T22:13:20Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
            },
            "spec": {
                "volumes": [
                    {"name": "data", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                    {"name": "cfg", "configMap": {"name": "app-config", "items": [{"key": "a", "path": "a.conf"}],
                        "defaultMode": 420}},
                    {"name": "tls", "secret": {"secretName": "tls", "defaultMode": 256, "optional": true}},
                    {"name": "host", "hostPath": {"path": "/var/log", "type": "Directory"}}
                ],
                "containers": [{
                    "name": "main", "image": "busybox", "command": ["sh", "-c"], "args": ["echo hi"],
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": [
                        {"name": "MODE", "value": "fast"},
                        {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password",
                            "optional": true}}},
                        {"name": "NODE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}}
                    ],
                    "resources": {"limits": {"memory": "128Mi", "cpu": "500m"}, "requests": {"cpu": "250m"}},
                    "volumeMounts": [{"name": "data", "readOnly": true, "mountPath": "/data"}],
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                        "timeoutSeconds": 1, "periodSeconds": 10, "failureThreshold": 3},
                    "readinessProbe": {"tcpSocket": {"port": "http"}, "initialDelaySeconds": 5},
                    "terminationMessagePath": "/dev/termination-log",
                    "imagePullPolicy": "IfNotPresent",
                    "securityContext": {"capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
                        "privileged": false, "runAsUser": 1000, "runAsNonRoot": true,
                        "allowPrivilegeEscalation": false, "seccompProfile": {"type": "RuntimeDefault"}}
                }],
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 0,
                "dnsPolicy": "ClusterFirst",
                "nodeSelector": {"disk": "ssd"},
                "securityContext": {"runAsUser": 1000, "supplementalGroups": [4000, 4000, 8000], "fsGroup": 2000},
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms":
                    [{"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux", "plan9"]}]}]}}},
                "tolerations": [
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                        "tolerationSeconds": 300},
                    {"key": "dedicated", "operator": "Equal", "value": "edge", "effect": "NoSchedule"}
                ]
            },
            "status": {"phase": "Pending", "startTime": "2023-11-14T22:13:20Z"}
        });
        assert_eq!(got, want, "\n{}\n", serde_json::to_string_pretty(&got).unwrap());
    }

    #[test]
    fn delete_options_as_client_gos_typed_delete_sends_them() {
        // an empty DeleteOptions, byte for byte as client-go 0.34 sent it
        let empty = b"k8s\x00\n\x13\n\x02v1\x12\rDeleteOptions\x12\x00\x1a\x00\"\x00";
        assert_eq!(decode(empty).unwrap(), json!({"kind": "DeleteOptions", "apiVersion": "v1"}));
        // gracePeriodSeconds 0 (kept: a pointer), preconditions, orphanDependents, propagationPolicy, dryRun
        let raw = [v(1, 0), msg(2, &[s(1, "u-1"), s(2, "42")]), v(3, 0), s(4, "Background"), s(5, "All")].concat();
        assert_eq!(
            decode(&envelope("DeleteOptions", &raw)).unwrap(),
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                   "preconditions": {"uid": "u-1", "resourceVersion": "42"}, "orphanDependents": false,
                   "propagationPolicy": "Background", "dryRun": ["All"]})
        );
        assert_eq!(decode(&envelope("DeleteOptions", &v(1, -1))).unwrap()["gracePeriodSeconds"], -1);
        // cut short: an error, never a read past the end
        let whole = envelope("DeleteOptions", &raw);
        assert!(!decode(&whole[..whole.len() - 3]).unwrap_err().unsupported);
    }

    #[test]
    fn a_secret_and_a_config_map_as_kubectl_sends_them() {
        let meta = [s(1, "db"), s(3, "prod"), entry_of(11, "app", b"web"), bytes(8, b"")].concat();
        let raw = [bytes(1, &meta), entry_of(2, "password", b"hunter2"), s(3, "Opaque"), v(5, 1)].concat();
        assert_eq!(
            decode(&envelope("Secret", &raw)).unwrap(),
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": true,
                "metadata": {"name": "db", "namespace": "prod", "labels": {"app": "web"}},
                "data": {"password": "aHVudGVyMg=="}})
        );
        let raw = [msg(1, &[s(1, "cfg")]), entry_of(2, "a.conf", b"x=1\n"), entry_of(3, "bin", &[0, 1, 2])].concat();
        let v = decode(&envelope("ConfigMap", &raw)).unwrap();
        assert_eq!(v["data"], json!({"a.conf": "x=1\n"}));
        assert_eq!(v["binaryData"], json!({"bin": "AAEC"}));
        assert_eq!(v["metadata"], json!({"name": "cfg"}));
    }

    #[test]
    fn fields_a_local_object_may_not_have_come_through_to_be_refused() {
        let meta = [s(1, "x"), s(2, "gen-"), msg(13, &[s(1, "ReplicaSet"), s(3, "rs"), s(4, "u"), s(5, "apps/v1")])];
        let v = decode(&envelope("ConfigMap", &msg(1, &meta))).unwrap();
        assert_eq!(v["metadata"]["generateName"], "gen-");
        assert_eq!(
            v["metadata"]["ownerReferences"],
            json!([{"kind": "ReplicaSet", "name": "rs", "uid": "u", "apiVersion": "apps/v1"}])
        );
    }

    #[test]
    fn special_messages_take_their_json_forms() {
        assert_eq!(timestamp(0, 0, false).unwrap(), "1970-01-01T00:00:00Z");
        assert_eq!(timestamp(1_136_214_245, 999_999_999, false).unwrap(), "2006-01-02T15:04:05Z");
        assert_eq!(timestamp(1_136_214_245, 123_456_789, true).unwrap(), "2006-01-02T15:04:05.123456Z");
        assert_eq!(timestamp(-1, 0, false).unwrap(), "1969-12-31T23:59:59Z");
        assert!(timestamp(i64::MAX, 0, false).is_err() && timestamp(0, -1, false).is_err());
        for (ns, text) in [
            (0, "0s"),
            (1, "1ns"),
            (1_500, "1.5µs"),
            (1_500_000, "1.5ms"),
            (3_500_000_000, "3.5s"),
            (123_000_000_000, "2m3s"),
            (3_600_000_000_000, "1h0m0s"),
            (-90_000_000_000, "-1m30s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ] {
            assert_eq!(go_duration(ns), text);
        }
        let special = |k: Kind, parts: &[Vec<u8>]| special_value(k, &parts.concat(), 1);
        assert_eq!(special(Kind::Duration, &[v(1, 60_000_000_000)]).unwrap(), Some(json!("1m0s")));
        assert_eq!(
            special(Kind::MicroTime, &[v(1, 0), v(2, 1000)]).unwrap(),
            Some(json!("1970-01-01T00:00:00.000001Z"))
        );
        assert_eq!(special(Kind::Time, &[]).unwrap(), None);
        assert_eq!(special(Kind::RawExtension, &[s(1, r#"{"a":[1]}"#)]).unwrap(), Some(json!({"a": [1]})));
        assert!(special(Kind::FieldsV1, &[s(1, "{")]).unwrap_err().message.contains("not JSON"));
        assert_eq!(special(Kind::Quantity, &[]).unwrap(), Some(json!("0")));
        assert_eq!(special(Kind::IntOrString, &[v(1, 0), v(2, -5)]).unwrap(), Some(json!(-5)));
        assert!(special(Kind::IntOrString, &[v(1, 2)]).is_err());
        assert!(special(Kind::IntOrString, &[v(1, 0), v(2, 1 << 40)]).is_err());
    }

    fn pod_error(raw: &[u8]) -> String {
        let e = decode(&envelope("Pod", raw)).unwrap_err();
        assert!(!e.unsupported, "{e:?}");
        e.message
    }

    #[test]
    fn malformed_bodies_are_errors_naming_the_place() {
        let ports = |tail: Vec<u8>| msg(2, &[msg(2, &[s(1, "c"), msg(6, &[v(3, 80)]), bytes(6, &tail)])]);
        // a truncated varint inside the second port
        let m = pod_error(&ports(vec![3 << 3, 0x80]));
        assert!(m.contains("at spec.containers[0].ports[1]: a varint runs past the end"), "{m}");
        // a length past the end
        let m = pod_error(&ports(vec![1 << 3 | 2, 9, b'x']));
        assert!(m.contains("at spec.containers[0].ports[1]: a field of 9 bytes runs past the end"), "{m}");
        // a known field with the wrong wire type: never dropped
        let m = pod_error(&ports(s(3, "80")));
        assert!(
            m.contains("at spec.containers[0].ports[1].containerPort: length-delimited bytes where a varint"),
            "{m}"
        );
        let m = pod_error(&msg(2, &[v(2, 1)]));
        assert!(m.contains("at spec.containers[0]: a varint where a message is expected"), "{m}");
        let m = pod_error(&msg(1, &[entry_of(11, "k", &[0xff])]));
        assert!(m.contains("at metadata.labels[k]: a string that is not UTF-8"), "{m}");
        // wire types 3, 4 (groups) and 6, 7
        assert!(pod_error(&[3 << 3 | 3]).contains("wire type 3"));
        assert!(pod_error(&[0]).contains("numbered 0"));
        // nesting too deep: the schema nests about 10 deep and has no
        // cycle, so only a start near the limit reaches it
        let e = message_into(&pod::POD, &msg(2, &[msg(2, &[s(1, "c")])]), MAX_DEPTH - 1, &mut Map::new());
        let m = malformed(e.unwrap_err(), "the Pod").message;
        assert!(m.contains("at spec.containers[0]: messages nested more than 32 deep"), "{m}");
        let m = decode(b"k8s\0\x12\x05\x0a\x03").unwrap_err().message;
        assert!(m.contains("the envelope") && m.contains("past the end"), "{m}");
    }

    #[test]
    fn bad_bodies_are_errors_never_panics() {
        assert!(decode(b"{\"kind\":\"Secret\"}").is_err());
        let e = decode(&envelope("Node", b"")).unwrap_err();
        assert!(e.unsupported && e.message.contains("Node"), "{e:?}");
        let good = envelope(
            "Pod",
            &[msg(1, &[s(1, "p"), entry_of(11, "k", b"v")]), msg(2, &[msg(2, &[s(1, "c"), int_port(99, 1)])])].concat(),
        );
        // every truncation and every single-byte change: an error or a value, never a panic
        for n in 0..good.len() {
            let _ = decode(&good[..n]);
            for b in [0x00, 0x02, 0x7f, 0x80, 0xff] {
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

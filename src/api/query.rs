//! A request's query, parsed once as the API server reads it, and handed
//! to every handler ([`Query`]): the pairs percent-decoded in order (`+`
//! a space), a parameter's value its first one (Go's `url.Values.Get`, the
//! API server's conversions), repeated parameters (`command`, `ports`) in
//! order, unknown parameters ignored.
//!
//! - Booleans ([`Query::flag`]) as Go's `strconv.ParseBool`: `1 t T TRUE
//!   true True` are true, `0 f F FALSE false False` false; anything else is
//!   a 400 `BadRequest` naming the parameter. A parameter given without a
//!   value (`?watch`) is true, absent false.
//! - Integers ([`Query::int`]: `tailLines`, `limitBytes`, `sinceSeconds`,
//!   `limit`, `timeoutSeconds`, `gracePeriodSeconds`) as the API server's
//!   conversion reads them (`strconv.ParseInt`, base 10, 64 bits): a bad
//!   value, an empty one included, is a 400 `BadRequest` with Go's text
//!   (`strconv.ParseInt: parsing "x": invalid syntax`), after the name.
//!
//! The raw text is kept ([`Query::raw`]) for what goes on a request line
//! again (the stream relay's request to the runtime).

use crate::api::status::{ApiError, Res};

/// A parsed query string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    raw: String,
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Parse `raw` (the text after `?`, or a form body): `k=v` pairs split
    /// at `&`, each side percent-decoded; a pair without `=` has an empty
    /// value.
    pub fn parse(raw: &str) -> Query {
        let raw = raw.strip_prefix('?').unwrap_or(raw);
        let pairs = raw
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (decode(k, true), decode(v, true))
            })
            .collect();
        Query { raw: raw.to_string(), pairs }
    }

    /// A query of these (decoded) pairs, encoded.
    pub fn from_pairs<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)]) -> Query {
        let raw = pairs.iter().map(|(k, v)| format!("{}={}", encode(k.as_ref()), encode(v.as_ref())));
        Query::parse(&raw.collect::<Vec<_>>().join("&"))
    }

    /// The query as it came (still encoded), for a request line.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// Every pair, decoded, in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The value of `name`: its first.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Every value of any of `names`, in the order given.
    pub fn all<'a>(&'a self, names: &'a [&str]) -> impl Iterator<Item = &'a str> + 'a {
        self.pairs.iter().filter(|(k, _)| names.contains(&k.as_str())).map(|(_, v)| v.as_str())
    }

    /// A boolean parameter: absent false, without a value true, else as
    /// `strconv.ParseBool`; another value is a 400 naming `name`.
    pub fn flag(&self, name: &str) -> Res<bool> {
        match self.get(name) {
            None => Ok(false),
            Some("") => Ok(true),
            Some(v) => parse_bool(v).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "query parameter {name}: strconv.ParseBool: parsing {v:?}: invalid syntax"
                ))
            }),
        }
    }

    /// An integer parameter (none when absent); a bad value is the API
    /// server's 400, after the name.
    pub fn int(&self, name: &str) -> Res<Option<i64>> {
        let Some(v) = self.get(name) else { return Ok(None) };
        v.parse::<i64>().map(Some).map_err(|e| {
            let why = match e.kind() {
                std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => "value out of range",
                _ => "invalid syntax",
            };
            ApiError::bad_request(format!("query parameter {name}: strconv.ParseInt: parsing {v:?}: {why}"))
        })
    }
}

/// Go's `strconv.ParseBool`.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// `s` percent-decoded (an escape that is not two hex digits stays as it
/// is; bytes that are not UTF-8 become U+FFFD); `+` is a space in a query,
/// itself in a path.
pub fn decode(s: &str, plus_is_space: bool) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if plus_is_space => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `s` for a query (RFC 3986 unreserved characters kept, the rest
/// percent-encoded).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_decoded_in_order() {
        let q = Query::parse("labelSelector=app%3Dweb&watch&fieldSelector=a+b&x=%zz%4");
        assert_eq!(
            q.pairs(),
            [
                ("labelSelector".to_string(), "app=web".to_string()),
                ("watch".into(), String::new()),
                ("fieldSelector".into(), "a b".into()),
                ("x".into(), "%zz%4".into())
            ]
        );
        assert_eq!(q.raw(), "labelSelector=app%3Dweb&watch&fieldSelector=a+b&x=%zz%4");
        assert_eq!(Query::parse("?a=1").get("a"), Some("1"));
        assert_eq!(Query::parse("").pairs(), []);
        assert_eq!(decode("/a+b%2Fc", false), "/a+b/c");
        assert_eq!(decode("%E2%9C%93%", true), "✓%");
    }

    #[test]
    fn a_value_is_the_first_and_repeated_ones_keep_their_order() {
        let q =
            Query::parse("command=sh&command=-c&command=echo%20hi+there&container=a&container=b&ports=80,81&port=7");
        assert_eq!(q.all(&["command"]).collect::<Vec<_>>(), ["sh", "-c", "echo hi there"]);
        assert_eq!(q.get("container"), Some("a"));
        assert_eq!(q.all(&["ports", "port"]).collect::<Vec<_>>(), ["80,81", "7"]);
        assert_eq!(q.get("nope"), None, "unknown parameters are only ignored");
    }

    #[test]
    fn booleans_are_gos_parse_bool() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert!(Query::parse(&format!("stdin={t}")).flag("stdin").unwrap(), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert!(!Query::parse(&format!("stdin={f}")).flag("stdin").unwrap(), "{f}");
        }
        // what the official Python client sends
        let q = Query::parse("stdout=True&stderr=True");
        assert!(q.flag("stdout").unwrap() && q.flag("stderr").unwrap());
        assert!(!q.flag("stdin").unwrap(), "absent is false");
        assert!(Query::parse("watch").flag("watch").unwrap(), "a bare parameter is true");
        for bad in ["yes", "tRUE", "on", "2"] {
            let e = Query::parse(&format!("stdin={bad}")).flag("stdin").unwrap_err();
            assert_eq!((e.code, e.reason), (400, "BadRequest"), "{bad}");
            assert!(e.message.contains("stdin") && e.message.contains(&format!("{bad:?}")), "{e}");
        }
        assert_eq!(
            Query::parse("stdin=yes").flag("stdin").unwrap_err().message,
            "query parameter stdin: strconv.ParseBool: parsing \"yes\": invalid syntax"
        );
    }

    #[test]
    fn integers_are_the_api_servers() {
        let q =
            Query::parse("tailLines=10&limitBytes=-1&sinceSeconds=%2B5&limit=x&timeoutSeconds=&n=99999999999999999999");
        assert_eq!(q.int("tailLines").unwrap(), Some(10));
        assert_eq!(q.int("limitBytes").unwrap(), Some(-1));
        assert_eq!(q.int("sinceSeconds").unwrap(), Some(5));
        assert_eq!(q.int("absent").unwrap(), None);
        let e = q.int("limit").unwrap_err();
        assert_eq!((e.code, e.reason), (400, "BadRequest"));
        assert_eq!(e.message, "query parameter limit: strconv.ParseInt: parsing \"x\": invalid syntax");
        assert!(q.int("timeoutSeconds").unwrap_err().message.ends_with("parsing \"\": invalid syntax"));
        assert!(q.int("n").unwrap_err().message.ends_with(": value out of range"));
    }

    #[test]
    fn pairs_are_encoded_again() {
        let q = Query::from_pairs(&[("fieldManager", "kubectl x"), ("a", "/=")]);
        assert_eq!(q.raw(), "fieldManager=kubectl%20x&a=%2F%3D");
        assert_eq!(q.get("fieldManager"), Some("kubectl x"));
    }
}

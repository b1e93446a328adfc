//! Label and field selectors as the API server reads them (`app=web`,
//! `tier!=db`, `env in (a,b)`, `!legacy`, `key`; fields with `=`, `==`,
//! `!=`), matched against an object's JSON: labels under
//! `metadata.labels`, fields by their dotted path.

use crate::api::status::ApiError;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Eq(String),
    Ne(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

/// A parsed selector: every requirement must hold.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    reqs: Vec<(String, Op)>,
}

/// Split on commas outside parentheses.
fn terms(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter().map(str::trim).filter(|t| !t.is_empty()).collect()
}

fn bad(kind: &str, s: &str, why: &str) -> ApiError {
    ApiError::bad_request(format!("unable to parse requirement: {kind} selector {s:?}: {why}"))
}

impl Selector {
    /// A label selector (`labelSelector`).
    pub fn labels(s: &str) -> Result<Selector, ApiError> {
        let mut reqs = Vec::new();
        for t in terms(s) {
            let set = |rest: &str| -> Result<Vec<String>, ApiError> {
                let inner = rest.trim().strip_prefix('(').and_then(|r| r.strip_suffix(')'));
                let inner = inner.ok_or_else(|| bad("label", s, "expected a parenthesized list of values"))?;
                Ok(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
            };
            let (key, op) = if let Some(k) = t.strip_prefix('!') {
                (k.trim().to_string(), Op::NotExists)
            } else if let Some((k, v)) = t.split_once("!=") {
                (k.trim().to_string(), Op::Ne(v.trim().to_string()))
            } else if let Some((k, v)) = t.split_once("==") {
                (k.trim().to_string(), Op::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = t.split_once('=') {
                (k.trim().to_string(), Op::Eq(v.trim().to_string()))
            } else if let Some((k, rest)) = t.split_once(" notin ") {
                (k.trim().to_string(), Op::NotIn(set(rest)?))
            } else if let Some((k, rest)) = t.split_once(" in ") {
                (k.trim().to_string(), Op::In(set(rest)?))
            } else {
                (t.to_string(), Op::Exists)
            };
            if key.is_empty() || key.contains(char::is_whitespace) {
                return Err(bad("label", s, "a requirement needs a key"));
            }
            reqs.push((key, op));
        }
        Ok(Selector { reqs })
    }

    /// A field selector (`fieldSelector`): `=`, `==`, `!=` on the fields
    /// `allowed` names (as the API server, which refuses others).
    pub fn fields(s: &str, allowed: &[&str]) -> Result<Selector, ApiError> {
        let mut reqs = Vec::new();
        for t in terms(s) {
            let (k, op) = if let Some((k, v)) = t.split_once("!=") {
                (k, Op::Ne(v.trim().to_string()))
            } else if let Some((k, v)) = t.split_once("==") {
                (k, Op::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = t.split_once('=') {
                (k, Op::Eq(v.trim().to_string()))
            } else {
                return Err(bad("field", s, "expected field=value, field==value or field!=value"));
            };
            let k = k.trim();
            if !allowed.contains(&k) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {k} (supported: {})",
                    allowed.join(", ")
                )));
            }
            reqs.push((k.to_string(), op));
        }
        Ok(Selector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Every requirement holds for the labels of `obj`.
    pub fn matches_labels(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        self.reqs.iter().all(|(k, op)| holds(op, labels.and_then(|l| l.get(k)).and_then(Value::as_str)))
    }

    /// Every requirement holds for the fields of `obj` (a field not set
    /// is the empty string, as the API server's field sets have it).
    pub fn matches_fields(&self, obj: &Value) -> bool {
        self.reqs.iter().all(|(k, op)| {
            let mut v = obj;
            for part in k.split('.') {
                v = v.get(part).unwrap_or(&Value::Null);
            }
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            holds(op, Some(&text))
        })
    }
}

fn holds(op: &Op, v: Option<&str>) -> bool {
    match op {
        Op::Eq(want) => v == Some(want.as_str()),
        Op::Ne(want) => v != Some(want.as_str()),
        Op::In(set) => v.is_some_and(|v| set.iter().any(|s| s == v)),
        Op::NotIn(set) => v.is_none_or(|v| !set.iter().any(|s| s == v)),
        Op::Exists => v.is_some(),
        Op::NotExists => v.is_none(),
    }
}

/// The label and field selectors of a request, both to hold.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub labels: Selector,
    pub fields: Selector,
}

impl Filter {
    /// No requirement: every object matches.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches_labels(obj) && self.fields.matches_fields(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors_as_the_api_server() {
        let o = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        let m = |s: &str| Selector::labels(s).unwrap().matches_labels(&o);
        assert!(m("app=web"));
        assert!(m("app==web,tier!=db"));
        assert!(m("app in (web, api)"));
        assert!(!m("app notin (web)"));
        assert!(m("tier"));
        assert!(m("!legacy"));
        assert!(!m("!app"));
        assert!(!m("app=api"));
        assert!(m(""));
        assert!(Selector::labels("app in web").is_err());
        assert!(Selector::labels("=x").is_err());
    }

    #[test]
    fn field_selectors_name_their_fields() {
        let allowed = ["metadata.name", "status.phase", "spec.nodeName"];
        let o = json!({"metadata": {"name": "a"}, "status": {"phase": "Running"}, "spec": {"nodeName": "n"}});
        let m = |s: &str| Selector::fields(s, &allowed).unwrap().matches_fields(&o);
        assert!(m("metadata.name=a"));
        assert!(m("status.phase!=Failed,status.phase!=Succeeded"));
        assert!(!m("status.phase==Failed"));
        assert!(m("spec.nodeName=n"));
        let e = Selector::fields("spec.hostname=x", &allowed).unwrap_err();
        assert_eq!((e.code, e.reason), (400, "BadRequest"));
        assert!(e.message.contains("spec.hostname"), "{}", e.message);
        assert!(Selector::fields("metadata.name", &allowed).is_err());
    }
}

//! The one error of the node's APIs: a refusal as the API server words it,
//! which every API path turns into what its client reads. [`ApiError`] is
//! an HTTP code, the `Status` reason, a message and, where the API server
//! gives them, `details` (the object's name and kind, the causes a 422
//! lists). The Kubernetes API sends it as the JSON `meta/v1 Status`
//! ([`ApiError::status`]), the stream relay as a whole HTTP response on
//! the connection it took over ([`ApiError::http_response`]), a watch as
//! an `ERROR` event's object, and the local gRPC API maps its reason to a
//! gRPC code (`api::local`). What the APIs do to pods and objects
//! (`api::ops`, `api::objects`) fails with it too, so no server converts
//! one error into another.
//!
//! Constructors are per reason; the messages are the callers' (the API
//! server's wording where kubectl or a test reads it).

use serde_json::{Value, json};

use crate::model::field::{FieldErrors, TOO_MANY};

/// A refused request: a `meta/v1 Status` with its HTTP code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    /// The `Status` reason (`BadRequest`, `NotFound`, `Invalid`, ...).
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Details>,
}

/// A `Status`'s `details`: the object concerned (empty when unnamed) and
/// the causes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Details {
    pub name: String,
    /// The resource (`pods`, `configmaps`).
    pub kind: String,
    pub causes: Vec<Cause>,
}

/// One of `details.causes`: its type (`FieldValueInvalid`,
/// `FieldManagerConflict`, `ExitCode`, ...), the field (empty: none) and
/// the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub reason: String,
    pub field: String,
    pub message: String,
}

impl Cause {
    pub fn new(reason: impl Into<String>, field: impl Into<String>, message: impl Into<String>) -> Self {
        Cause { reason: reason.into(), field: field.into(), message: message.into() }
    }
}

/// The causes of a 422 for refused fields, in order: each field's path and
/// reason, its type as the API server's (`FieldValueNotSupported` for an
/// `Unsupported value: ...`, `FieldValueTooMany` for the capped list's
/// last entry, `FieldValueInvalid` for the rest).
pub fn causes_of(errors: &FieldErrors) -> Vec<Cause> {
    errors
        .iter()
        .map(|e| {
            let r = e.reason.as_str();
            let kind = if e.field.is_empty() && r == TOO_MANY {
                "FieldValueTooMany"
            } else if r.starts_with("Unsupported value:") {
                "FieldValueNotSupported"
            } else if r.starts_with("Required value") {
                "FieldValueRequired"
            } else if r.starts_with("Forbidden") {
                "FieldValueForbidden"
            } else if r.starts_with("Too long") {
                "FieldValueTooLong"
            } else {
                "FieldValueInvalid"
            };
            Cause::new(kind, &e.field, &e.reason)
        })
        .collect()
}

/// A handler's result.
pub type Res<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError { code, reason, message: message.into(), details: None }
    }

    /// The same error naming the object it concerns (`details.name` and
    /// `details.kind`).
    pub fn with_details(mut self, name: impl Into<String>, kind: impl Into<String>) -> Self {
        let d = self.details.get_or_insert_with(Details::default);
        d.name = name.into();
        d.kind = kind.into();
        self
    }

    /// The same error with these `details.causes`.
    pub fn with_causes(mut self, causes: Vec<Cause>) -> Self {
        if !causes.is_empty() {
            self.details.get_or_insert_with(Details::default).causes = causes;
        }
        self
    }

    /// The causes (none without details).
    pub fn causes(&self) -> &[Cause] {
        self.details.as_ref().map_or(&[], |d| d.causes.as_slice())
    }

    /// 400: the request itself is wrong.
    pub fn bad_request(m: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", m)
    }
    /// 401: no identity.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }
    pub fn forbidden(m: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", m)
    }
    /// `pods "web" not found`, naming the object in details.
    pub fn not_found(resource: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{resource} \"{name}\" not found")).with_details(name, resource)
    }
    /// 404 with a message of the caller's.
    pub fn missing(m: impl Into<String>) -> Self {
        Self::new(404, "NotFound", m)
    }
    /// A path nothing serves.
    pub fn no_route() -> Self {
        Self::missing("the server could not find the requested resource")
    }
    pub fn method_not_allowed(m: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", m)
    }
    /// 409: the object changed meanwhile, or a field manager owns a field.
    pub fn conflict(m: impl Into<String>) -> Self {
        Self::new(409, "Conflict", m)
    }
    /// `pods "web" already exists`, naming the object in details.
    pub fn already_exists(resource: &str, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{resource} \"{name}\" already exists")).with_details(name, resource)
    }
    /// 409 `AlreadyExists` with a message of the caller's.
    pub fn exists(m: impl Into<String>) -> Self {
        Self::new(409, "AlreadyExists", m)
    }
    /// 410: a resource version too old to watch from.
    pub fn expired(m: impl Into<String>) -> Self {
        Self::new(410, "Expired", m)
    }
    /// 413: a body over its bound.
    pub fn too_large(m: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", m)
    }
    pub fn unsupported_media_type(m: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", m)
    }
    /// 422 with a message of the caller's (no causes).
    pub fn invalid(m: impl Into<String>) -> Self {
        Self::new(422, "Invalid", m)
    }
    /// 422 for one field: `<Kind> "<name>" is invalid: <field>: <message>`,
    /// with a `FieldValueInvalid` cause.
    pub fn field_invalid(kind: &str, name: &str, field: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        Self::invalid(format!("{kind} {name:?} is invalid: {field}: {message}")).with_causes(vec![Cause::new(
            "FieldValueInvalid",
            field,
            message,
        )])
    }
    /// 422 for the refused fields of an object, as the API server's
    /// `NewInvalid` answers a field error list: a cause per error, in
    /// order, and the message [`ApiError::for_object`] words.
    pub fn fields_invalid(kind: &str, name: &str, errors: &FieldErrors) -> Self {
        Self::invalid(format!("{kind} {name:?} is invalid")).with_causes(causes_of(errors)).for_object(kind, name)
    }
    /// An `Invalid` error with causes, said of object `kind` `name` as the
    /// API server says it: `<Kind> "<name>" is invalid: <field>: <message>`
    /// for one cause, `[<field>: <message>, ...]` for several (a repeated
    /// one shown once), and `details` naming the object. Any other error
    /// is returned as it is.
    pub fn for_object(self, kind: &str, name: &str) -> Self {
        if self.reason != "Invalid" || self.causes().is_empty() {
            return self;
        }
        let mut shown: Vec<String> = Vec::new();
        for c in self.causes() {
            let s = if c.field.is_empty() { c.message.clone() } else { format!("{}: {}", c.field, c.message) };
            if !shown.contains(&s) {
                shown.push(s);
            }
        }
        let list = if shown.len() == 1 { shown.remove(0) } else { format!("[{}]", shown.join(", ")) };
        let causes = self.details.map(|d| d.causes).unwrap_or_default();
        Self::invalid(format!("{kind} {name:?} is invalid: {list}")).with_details(name, kind).with_causes(causes)
    }
    /// 429 with a message of the caller's: a queue is full, try again.
    pub fn busy(m: impl Into<String>) -> Self {
        Self::new(429, "TooManyRequests", m)
    }
    /// 429: the server's connections are all taken.
    pub fn too_many() -> Self {
        Self::busy("too many requests: the node's API serves a bounded number of connections")
    }
    pub fn internal(m: impl Into<String>) -> Self {
        Self::new(500, "InternalError", m)
    }
    pub fn not_implemented(m: impl Into<String>) -> Self {
        Self::new(501, "NotImplemented", m)
    }
    /// 503: what the answer needs is not there yet, or the runtime is away.
    pub fn unavailable(m: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", m)
    }

    /// The `meta/v1 Status` object (`details` only when given; a cause's
    /// empty field left out, as the API server leaves it out).
    pub fn status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            let mut details = serde_json::Map::new();
            if !d.name.is_empty() {
                details.insert("name".into(), json!(d.name));
            }
            if !d.kind.is_empty() {
                details.insert("kind".into(), json!(d.kind));
            }
            if !d.causes.is_empty() {
                let causes: Vec<Value> = d
                    .causes
                    .iter()
                    .map(|c| {
                        let mut o = json!({"reason": c.reason, "message": c.message});
                        if !c.field.is_empty() {
                            o["field"] = json!(c.field);
                        }
                        o
                    })
                    .collect();
                details.insert("causes".into(), Value::Array(causes));
            }
            v["details"] = Value::Object(details);
        }
        v
    }

    /// The `Status` as JSON text.
    pub fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&self.status()).unwrap_or_default()
    }

    /// A complete HTTP/1.1 response carrying the `Status`, closing the
    /// connection (for a connection taken over, as the stream relay's).
    pub fn http_response(&self) -> Vec<u8> {
        let body = self.body();
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.code,
            reason_phrase(self.code),
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        out
    }
}

/// The HTTP reason phrase of a code this crate sends.
pub fn reason_phrase(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_not_found_names_the_object() {
        let s = ApiError::not_found("pods", "web").status();
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["code"], 404);
        assert_eq!(s["message"], "pods \"web\" not found");
        assert_eq!(s["details"], json!({"name": "web", "kind": "pods"}));
        assert_eq!(s["kind"], "Status");
        assert_eq!(s["apiVersion"], "v1");
        assert_eq!(s["status"], "Failure");
    }

    #[test]
    fn the_status_text_is_the_api_servers() {
        // keys sorted (serde_json's map), no details when none are given
        assert_eq!(
            String::from_utf8(ApiError::bad_request("no").body()).unwrap(),
            r#"{"apiVersion":"v1","code":400,"kind":"Status","message":"no","metadata":{},"reason":"BadRequest","status":"Failure"}"#
        );
    }

    #[test]
    fn a_field_error_lists_its_cause() {
        let s = ApiError::field_invalid("Pod", "web", "spec.x", "bad").status();
        assert_eq!(s["code"], 422);
        assert_eq!(s["reason"], "Invalid");
        assert_eq!(s["message"], "Pod \"web\" is invalid: spec.x: bad");
        assert_eq!(
            s["details"],
            json!({"causes": [{"reason": "FieldValueInvalid", "field": "spec.x", "message": "bad"}]})
        );
        // a cause without a field has none
        let e = ApiError::new(500, "NonZeroExitCode", "exit 3").with_causes(vec![Cause::new("ExitCode", "", "3")]);
        assert_eq!(e.status()["details"], json!({"causes": [{"reason": "ExitCode", "message": "3"}]}));
        assert_eq!(e.causes().len(), 1);
        assert!(ApiError::internal("x").causes().is_empty());
    }

    #[test]
    fn refused_fields_are_every_cause_and_one_message_as_the_api_servers() {
        use crate::model::field::{FieldError, MAX_FIELD_ERRORS};
        let mut errors = FieldErrors::new();
        errors.push(FieldError::new("spec.a", "bad"));
        errors.push(FieldError::new("spec.b", "Unsupported value: \"x\": supported values: \"y\""));
        errors.push(FieldError::new("spec.a", "bad"));
        let s = ApiError::fields_invalid("Pod", "web", &errors).status();
        assert_eq!((s["code"].as_u64(), s["reason"].as_str()), (Some(422), Some("Invalid")));
        // a repeated error is said once in the message, as ToAggregate does
        assert_eq!(
            s["message"],
            "Pod \"web\" is invalid: [spec.a: bad, spec.b: Unsupported value: \"x\": supported values: \"y\"]"
        );
        assert_eq!(
            s["details"],
            json!({"name": "web", "kind": "Pod", "causes": [
                {"reason": "FieldValueInvalid", "field": "spec.a", "message": "bad"},
                {"reason": "FieldValueNotSupported", "field": "spec.b", "message": "Unsupported value: \"x\": supported values: \"y\""},
                {"reason": "FieldValueInvalid", "field": "spec.a", "message": "bad"},
            ]})
        );
        // one error: no brackets
        let one = ApiError::fields_invalid("Pod", "web", &FieldError::new("spec.a", "bad").into());
        assert_eq!(one.message, "Pod \"web\" is invalid: spec.a: bad");
        // another error is left as it is; an Invalid with causes is reworded
        let local = ApiError::invalid("pods/web: field spec.a: bad").with_causes(causes_of(&errors));
        assert_eq!(local.clone().for_object("Pod", "web").message, s["message"]);
        assert_eq!(ApiError::invalid("x").for_object("Pod", "web").message, "x");
        assert_eq!(ApiError::forbidden("no").for_object("Pod", "web").message, "no");
        // the cap's last entry has no field and says so
        let mut many = FieldErrors::new();
        for i in 0..MAX_FIELD_ERRORS + 5 {
            many.push(FieldError::new(format!("spec.x[{i}]"), "bad"));
        }
        let s = ApiError::fields_invalid("Pod", "web", &many).status();
        let causes = s["details"]["causes"].as_array().unwrap();
        assert_eq!(causes.len(), MAX_FIELD_ERRORS);
        assert_eq!(causes[MAX_FIELD_ERRORS - 1], json!({"reason": "FieldValueTooMany", "message": "too many errors"}));
        assert!(s["message"].as_str().unwrap().ends_with("spec.x[998]: bad, too many errors]"));
    }

    #[test]
    fn a_taken_over_connection_gets_a_whole_response() {
        let r = String::from_utf8(ApiError::unavailable("away").http_response()).unwrap();
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{head}");
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())), "{head}");
        assert!(head.ends_with("Connection: close"), "{head}");
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["reason"], "ServiceUnavailable");
    }
}

//! The Kubernetes API's requests and answers as the handlers see them: a
//! parsed request ([`Request`]), an answer ([`Reply`]: whole, or a chunked
//! stream written by a closure on the connection's thread; an error is
//! the APIs' one error, `api::status::ApiError`, sent as its `Status`).

use serde_json::Value;

use crate::api::query::{self, Query};
use crate::api::status::ApiError;

/// A parsed request (head and a bounded body).
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub method: String,
    /// The path, percent-decoded, without the query.
    pub path: String,
    /// The query, parsed once (`api::query`).
    pub query: Query,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The client asked for a `meta.k8s.io/v1` Table.
    pub fn wants_table(&self) -> bool {
        self.header("accept").is_some_and(|a| {
            a.split(',').any(|m| {
                let m: Vec<&str> = m.split(';').map(str::trim).collect();
                m.contains(&"as=Table") && (m.contains(&"v=v1") || m.contains(&"v=v1beta1"))
            })
        })
    }
}

/// Split a request target into its decoded path and its parsed query.
pub fn split_target(target: &str) -> (String, Query) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    (query::decode(path, false), Query::parse(query))
}

/// Writes a streamed answer's chunks (the connection's chunked encoding).
pub trait ChunkSink {
    /// Send one chunk now (flushed); an error ends the stream.
    fn chunk(&mut self, data: &[u8]) -> std::io::Result<()>;
    /// The client went away or sent something (a streamed answer checks
    /// between chunks).
    fn client_gone(&mut self) -> bool;
}

/// A streamed answer: runs on the connection's own thread.
pub type Stream = Box<dyn FnOnce(&mut dyn ChunkSink) -> std::io::Result<()> + Send>;

/// The connection itself, for a protocol upgrade (the TLS stream: reads
/// and writes carry the connection's deadlines).
pub trait Duplex: std::io::Read + std::io::Write {}

impl<T: std::io::Read + std::io::Write> Duplex for T {}

/// The connection an upgrade takes over: the TLS stream itself.
pub type Conn = rustls::StreamOwned<rustls::ServerConnection, std::net::TcpStream>;

/// An upgraded connection's handler: it writes its own `101` head and
/// owns the connection until it returns (the connection is closed then).
pub type Upgrade = Box<dyn FnOnce(Conn) -> std::io::Result<()> + Send>;

/// An answer.
pub enum Reply {
    Full {
        status: u16,
        content_type: &'static str,
        body: Vec<u8>,
    },
    Stream {
        content_type: &'static str,
        run: Stream,
    },
    /// A protocol upgrade (exec, attach, port-forward: the streaming hook).
    Upgrade(Upgrade),
}

impl Reply {
    pub fn json(status: u16, v: &Value) -> Reply {
        Reply::Full { status, content_type: "application/json", body: serde_json::to_vec(v).unwrap_or_default() }
    }

    pub fn ok(v: &Value) -> Reply {
        Reply::json(200, v)
    }

    /// JSON already written.
    pub fn bytes(status: u16, body: Vec<u8>) -> Reply {
        Reply::Full { status, content_type: "application/json", body }
    }

    /// An error: its `Status` with its code.
    pub fn error(e: &ApiError) -> Reply {
        Reply::bytes(e.code, e.body())
    }
}

impl From<ApiError> for Reply {
    fn from(e: ApiError) -> Reply {
        Reply::error(&e)
    }
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Full { status, body, .. } => write!(f, "Full({status}, {} bytes)", body.len()),
            Reply::Stream { content_type, .. } => write!(f, "Stream({content_type})"),
            Reply::Upgrade(_) => f.write_str("Upgrade"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_split_and_decode() {
        let (p, q) = split_target("/api/v1/namespaces/a+b/pods?labelSelector=app%3Dweb&watch&fieldSelector=a+b");
        assert_eq!(p, "/api/v1/namespaces/a+b/pods", "a plus in a path is itself");
        assert_eq!(q.get("labelSelector"), Some("app=web"));
        assert_eq!(q.get("fieldSelector"), Some("a b"));
        assert_eq!(q.raw(), "labelSelector=app%3Dweb&watch&fieldSelector=a+b");
        assert_eq!(split_target("/x%zz%4").0, "/x%zz%4");
    }

    #[test]
    fn table_accept_headers_are_recognized() {
        let mut r = Request::default();
        r.headers.push(("accept".into(), "application/json;as=Table;v=v1;g=meta.k8s.io,application/json".into()));
        assert!(r.wants_table());
        r.headers[0].1 = "application/vnd.kubernetes.protobuf,application/json".into();
        assert!(!r.wants_table());
    }

    #[test]
    fn errors_are_statuses() {
        match Reply::from(ApiError::not_found("pods", "web")) {
            Reply::Full { status, content_type, body } => {
                assert_eq!((status, content_type), (404, "application/json"));
                let s: Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(s["reason"], "NotFound");
                assert_eq!(s["details"]["name"], "web");
            }
            other => panic!("{other:?}"),
        }
    }
}

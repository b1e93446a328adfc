//! The local API's client, as the CLI uses it: one channel on the unix
//! socket, one call at a time. Errors say what failed and what to check
//! ([`ClientError`]); the CLI prints them and picks the exit status from
//! [`ClientError::kind`].

use std::path::Path;
use std::time::Duration;

use grpcio::{CallOption, ChannelBuilder, RpcStatusCode};
use thiserror::Error;

use crate::api::pb::api;
use crate::api::pb::api_grpc::PodWardenClient;
use crate::api::view::{NodeReport, PodList};
use crate::model::Pod;

/// Default socket: `$PODWARDEN_SOCKET`, else `/run/podwarden/podwarden.sock`
/// (an empty `$PODWARDEN_SOCKET` counts as unset, as a shell's `X= cmd`
/// means).
pub fn default_socket() -> String {
    socket_from(std::env::var("PODWARDEN_SOCKET").ok())
}

fn socket_from(env: Option<String>) -> String {
    env.filter(|s| !s.is_empty()).unwrap_or_else(|| "/run/podwarden/podwarden.sock".into())
}

pub struct Client {
    inner: PodWardenClient,
    timeout: Duration,
}

/// Why a call to the daemon failed.
#[derive(Debug, Error)]
pub enum ClientError {
    #[error("cannot reach podwarden: {socket} does not exist (is `podwarden run` running? see --socket)")]
    NoSocket {
        socket: String,
        #[source]
        source: std::io::Error,
    },
    #[error("permission denied on {socket}: run as root or as a member of the configured apiGroup")]
    SocketPermission {
        socket: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot reach podwarden: nothing listens on {socket} (is `podwarden run` running?)")]
    NotListening {
        socket: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot reach podwarden at {socket}: {source}")]
    Connect {
        socket: String,
        #[source]
        source: std::io::Error,
    },
    /// The daemon's peer check refused this client (its GOAWAY's text).
    #[error("the podwarden daemon refused this client: {reason}")]
    Refused { reason: String },
    /// The call failed: the daemon's status, or gRPC's own error.
    #[error("{}", call_message(.0))]
    Call(#[source] grpcio::Error),
    /// The daemon's answer did not decode as the view it should be.
    #[error("bad {what} from the daemon: {source}")]
    Decode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// What kind of failure a [`ClientError`] is (the CLI's exit status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The daemon cannot be reached or does not answer (no socket, nothing
    /// listening, UNAVAILABLE, a deadline passed).
    Unavailable,
    /// The daemon answered and refused: the peer check, the socket's mode,
    /// PERMISSION_DENIED (Pod Security), UNAUTHENTICATED.
    Refused,
    /// Anything else: not found, an invalid manifest or argument, a file in
    /// the way, an internal error.
    Failed,
}

impl ClientError {
    pub fn kind(&self) -> FailureKind {
        match self {
            ClientError::NoSocket { .. } | ClientError::NotListening { .. } | ClientError::Connect { .. } => {
                FailureKind::Unavailable
            }
            ClientError::SocketPermission { .. } | ClientError::Refused { .. } => FailureKind::Refused,
            ClientError::Call(grpcio::Error::RpcFailure(s)) => match s.code() {
                RpcStatusCode::UNAVAILABLE | RpcStatusCode::DEADLINE_EXCEEDED => FailureKind::Unavailable,
                RpcStatusCode::PERMISSION_DENIED | RpcStatusCode::UNAUTHENTICATED => FailureKind::Refused,
                _ => FailureKind::Failed,
            },
            ClientError::Call(_) | ClientError::Decode { .. } => FailureKind::Failed,
        }
    }

    /// The daemon's status code, when the daemon answered the call.
    pub fn code(&self) -> Option<RpcStatusCode> {
        match self {
            ClientError::Call(grpcio::Error::RpcFailure(s)) => Some(s.code()),
            _ => None,
        }
    }
}

/// A failed call as the user reads it: the daemon's message (it names the
/// pod and what is wrong), or what gRPC says.
fn call_message(e: &grpcio::Error) -> String {
    match e {
        grpcio::Error::RpcFailure(s) if s.code() == RpcStatusCode::UNAVAILABLE => {
            format!("podwarden is not answering: {}", s.message())
        }
        grpcio::Error::RpcFailure(s) => s.message().to_string(),
        other => other.to_string(),
    }
}

type Result<T> = std::result::Result<T, ClientError>;

/// The daemon checks a client's credentials when it connects and answers a
/// refused one with an HTTP/2 GOAWAY saying why (gRPC itself would only
/// retry until the deadline). Read the first frames of a probe connection:
/// the daemon's SETTINGS means accepted, a GOAWAY carries the reason.
fn refused(mut probe: std::os::unix::net::UnixStream) -> Result<()> {
    use std::io::{Read, Write};
    let _ = probe.set_read_timeout(Some(Duration::from_millis(500)));
    // the HTTP/2 client preface and an empty SETTINGS: an accepting
    // daemon's gRPC answers with its SETTINGS at once
    let _ = probe.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    while buf.len() < 9 {
        match probe.read(&mut chunk) {
            Ok(0) | Err(_) => return Ok(()), // let the real call report it
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let mut at = 0;
    while at + 9 <= buf.len() {
        let len = u32::from_be_bytes([0, buf[at], buf[at + 1], buf[at + 2]]) as usize;
        if buf[at + 3] == 0x7 {
            // GOAWAY: give it a moment to arrive whole
            while buf.len() < at + 9 + len {
                match probe.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let debug = buf.get(at + 17..(at + 9 + len).min(buf.len())).unwrap_or_default();
            return Err(ClientError::Refused { reason: String::from_utf8_lossy(debug).into_owned() });
        }
        if buf[at + 3] == 0x4 {
            return Ok(()); // SETTINGS: gRPC took the connection
        }
        at += 9 + len;
        if at >= buf.len() {
            match probe.read(&mut chunk) {
                Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => break,
            }
        }
    }
    Ok(())
}

impl Client {
    /// Connect to the daemon's socket. Errors say what to check.
    pub fn connect(socket: &str) -> Result<Self> {
        let path = Path::new(socket);
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(probe) => refused(probe)?,
            Err(source) => {
                let socket = socket.to_string();
                return Err(match source.kind() {
                    std::io::ErrorKind::NotFound => ClientError::NoSocket { socket, source },
                    std::io::ErrorKind::PermissionDenied => ClientError::SocketPermission { socket, source },
                    std::io::ErrorKind::ConnectionRefused => ClientError::NotListening { socket, source },
                    _ => ClientError::Connect { socket, source },
                });
            }
        }
        let env = crate::runtime::grpc::grpc_env();
        let ch = ChannelBuilder::new(env).connect(&format!("unix:{socket}"));
        Ok(Client { inner: PodWardenClient::new(ch), timeout: Duration::from_secs(30) })
    }

    fn opt(&self) -> CallOption {
        CallOption::default().timeout(self.timeout)
    }

    pub fn version(&self) -> Result<api::VersionResponse> {
        self.inner.version_opt(&api::VersionRequest::default(), self.opt()).map_err(ClientError::Call)
    }

    /// A v1 PodList (all namespaces when `namespace` is empty).
    pub fn list_pods(&self, namespace: &str) -> Result<PodList> {
        let req = api::ListPodsRequest { namespace: namespace.into(), ..Default::default() };
        let r = self.inner.list_pods_opt(&req, self.opt()).map_err(ClientError::Call)?;
        serde_json::from_slice(&r.pod_list_json).map_err(|source| ClientError::Decode { what: "pod list", source })
    }

    /// A pod and the manifest that defines it.
    pub fn get_pod(&self, namespace: &str, name: &str) -> Result<(Pod, String)> {
        let req = api::PodRef { namespace: namespace.into(), name: name.into(), ..Default::default() };
        let r = self.inner.get_pod_opt(&req, self.opt()).map_err(ClientError::Call)?;
        let pod = serde_json::from_slice(&r.pod_json).map_err(|source| ClientError::Decode { what: "pod", source })?;
        Ok((pod, r.manifest_path))
    }

    pub fn events(&self, pod: Option<(&str, &str)>) -> Result<Vec<api::Event>> {
        let req = api::ListEventsRequest {
            pod: pod
                .map(|(ns, name)| api::PodRef { namespace: ns.into(), name: name.into(), ..Default::default() })
                .into(),
            ..Default::default()
        };
        Ok(self.inner.list_events_opt(&req, self.opt()).map_err(ClientError::Call)?.events)
    }

    pub fn node(&self) -> Result<NodeReport> {
        let r = self.inner.get_node_opt(&api::GetNodeRequest::default(), self.opt()).map_err(ClientError::Call)?;
        serde_json::from_slice(&r.node_json).map_err(|source| ClientError::Decode { what: "node report", source })
    }

    pub fn logs(&self, req: &api::LogsRequest) -> Result<api::LogsResponse> {
        self.inner.container_logs_opt(req, self.opt()).map_err(ClientError::Call)
    }

    pub fn apply(&self, manifest: Vec<u8>, source: &str) -> Result<api::ApplyResponse> {
        let req = api::ApplyRequest { manifest, source: source.into(), ..Default::default() };
        self.inner.apply_opt(&req, self.opt()).map_err(ClientError::Call)
    }

    pub fn delete(&self, namespace: &str, name: &str, grace: Option<i64>) -> Result<api::DeleteResponse> {
        let req = api::DeleteRequest {
            pod: Some(api::PodRef { namespace: namespace.into(), name: name.into(), ..Default::default() }).into(),
            grace_period_seconds: grace.unwrap_or(0),
            has_grace_period: grace.is_some(),
            ..Default::default()
        };
        self.inner.delete_opt(&req, self.opt()).map_err(ClientError::Call)
    }

    /// The last stats snapshot (Summary API JSON).
    /// The runtime's streaming URL for `kind` (`exec`, `attach`,
    /// `portforward`) and the container it is for.
    pub fn stream(&self, kind: &str, req: &api::StreamRequest) -> Result<api::StreamResponse> {
        let r = match kind {
            "exec" => self.inner.exec_opt(req, self.opt()),
            "attach" => self.inner.attach_opt(req, self.opt()),
            _ => self.inner.port_forward_opt(req, self.opt()),
        };
        r.map_err(ClientError::Call)
    }

    pub fn stats(&self) -> Result<serde_json::Value> {
        let r = self.inner.get_stats_opt(&api::GetStatsRequest::default(), self.opt()).map_err(ClientError::Call)?;
        serde_json::from_slice(&r.summary_json).map_err(|source| ClientError::Decode { what: "stats summary", source })
    }

    /// The local ConfigMaps or Secrets (`kind`) as a v1 List (JSON); a
    /// Secret's values are never in it.
    pub fn list_objects(&self, kind: &str, namespace: &str) -> Result<serde_json::Value> {
        let req = api::ListObjectsRequest { kind: kind.into(), namespace: namespace.into(), ..Default::default() };
        let r = self.inner.list_objects_opt(&req, self.opt()).map_err(ClientError::Call)?;
        serde_json::from_slice(&r.list_json).map_err(|source| ClientError::Decode { what: "object list", source })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_empty_socket_variable_means_the_default() {
        assert_eq!(super::socket_from(None), "/run/podwarden/podwarden.sock");
        assert_eq!(super::socket_from(Some(String::new())), "/run/podwarden/podwarden.sock");
        assert_eq!(super::socket_from(Some("/tmp/x.sock".into())), "/tmp/x.sock");
    }
}

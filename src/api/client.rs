//! The local API's client, as the CLI uses it: one channel on the unix
//! socket, one call at a time, errors as the message to print.

use std::path::Path;
use std::time::Duration;

use grpcio::{CallOption, ChannelBuilder};

use super::pb::api;
use super::pb::api_grpc::PodWardenClient;

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

fn message(e: grpcio::Error) -> String {
    match e {
        grpcio::Error::RpcFailure(s) if s.code() == grpcio::RpcStatusCode::UNAVAILABLE => {
            format!("podwarden is not answering: {}", s.message())
        }
        grpcio::Error::RpcFailure(s) => s.message().to_string(),
        other => other.to_string(),
    }
}

/// The daemon checks a client's credentials when it connects and answers a
/// refused one with an HTTP/2 GOAWAY saying why (gRPC itself would only
/// retry until the deadline). Read the first frames of a probe connection:
/// the daemon's SETTINGS means accepted, a GOAWAY carries the reason.
fn refused(mut probe: std::os::unix::net::UnixStream) -> Result<(), String> {
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
            return Err(format!("the podwarden daemon refused this client: {}", String::from_utf8_lossy(debug)));
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
    pub fn connect(socket: &str) -> Result<Self, String> {
        let path = Path::new(socket);
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(probe) => refused(probe)?,
            Err(e) => {
                return Err(match e.kind() {
                    std::io::ErrorKind::NotFound => {
                        format!(
                            "cannot reach podwarden: {socket} does not exist (is `podwarden run` running? see --socket)"
                        )
                    }
                    std::io::ErrorKind::PermissionDenied => {
                        format!("permission denied on {socket}: run as root or as a member of the configured apiGroup")
                    }
                    std::io::ErrorKind::ConnectionRefused => {
                        format!("cannot reach podwarden: nothing listens on {socket} (is `podwarden run` running?)")
                    }
                    _ => format!("cannot reach podwarden at {socket}: {e}"),
                });
            }
        }
        let env = crate::runtime::cri::grpc_env();
        let ch = ChannelBuilder::new(env).connect(&format!("unix:{socket}"));
        Ok(Client { inner: PodWardenClient::new(ch), timeout: Duration::from_secs(30) })
    }

    fn opt(&self) -> CallOption {
        CallOption::default().timeout(self.timeout)
    }

    pub fn version(&self) -> Result<api::VersionResponse, String> {
        self.inner.version_opt(&api::VersionRequest::default(), self.opt()).map_err(message)
    }

    /// A v1 PodList (all namespaces when `namespace` is empty).
    pub fn list_pods(&self, namespace: &str) -> Result<serde_json::Value, String> {
        let req = api::ListPodsRequest { namespace: namespace.into(), ..Default::default() };
        let r = self.inner.list_pods_opt(&req, self.opt()).map_err(message)?;
        serde_json::from_slice(&r.pod_list_json).map_err(|e| format!("bad pod list from the daemon: {e}"))
    }

    pub fn get_pod(&self, namespace: &str, name: &str) -> Result<(serde_json::Value, String), String> {
        let req = api::PodRef { namespace: namespace.into(), name: name.into(), ..Default::default() };
        let r = self.inner.get_pod_opt(&req, self.opt()).map_err(message)?;
        let pod = serde_json::from_slice(&r.pod_json).map_err(|e| format!("bad pod from the daemon: {e}"))?;
        Ok((pod, r.manifest_path))
    }

    pub fn events(&self, pod: Option<(&str, &str)>) -> Result<Vec<api::Event>, String> {
        let req = api::ListEventsRequest {
            pod: pod
                .map(|(ns, name)| api::PodRef { namespace: ns.into(), name: name.into(), ..Default::default() })
                .into(),
            ..Default::default()
        };
        Ok(self.inner.list_events_opt(&req, self.opt()).map_err(message)?.events)
    }

    pub fn node(&self) -> Result<serde_json::Value, String> {
        let r = self.inner.get_node_opt(&api::GetNodeRequest::default(), self.opt()).map_err(message)?;
        serde_json::from_slice(&r.node_json).map_err(|e| format!("bad node report from the daemon: {e}"))
    }

    pub fn logs(&self, req: &api::LogsRequest) -> Result<api::LogsResponse, String> {
        self.inner.container_logs_opt(req, self.opt()).map_err(message)
    }

    pub fn apply(&self, manifest: Vec<u8>, source: &str) -> Result<api::ApplyResponse, String> {
        let req = api::ApplyRequest { manifest, source: source.into(), ..Default::default() };
        self.inner.apply_opt(&req, self.opt()).map_err(message)
    }

    pub fn delete(&self, namespace: &str, name: &str, grace: Option<i64>) -> Result<api::DeleteResponse, String> {
        let req = api::DeleteRequest {
            pod: Some(api::PodRef { namespace: namespace.into(), name: name.into(), ..Default::default() }).into(),
            grace_period_seconds: grace.unwrap_or(0),
            has_grace_period: grace.is_some(),
            ..Default::default()
        };
        self.inner.delete_opt(&req, self.opt()).map_err(message)
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

//! `grpc` probes: the standard `grpc.health.v1.Health/Check` on the pod's
//! IP, over the CRI client's gRPC environment as an asynchronous call (its
//! completion-queue thread only hands the result back; nothing waits).
//! The outcomes and texts are the kubelet's (`pkg/probe/grpc`): every
//! result is a success or a failure, never an error.

use std::net::SocketAddr;
use std::time::Duration;

use grpcio::{CallOption, ChannelBuilder, RpcStatusCode};

use super::state::Outcome;

#[allow(clippy::all, clippy::pedantic, dead_code, unused_imports, unused_mut, unused_qualifications, missing_docs)]
#[allow(non_camel_case_types, non_snake_case, non_upper_case_globals, unreachable_pub, deprecated)]
pub mod pb {
    pub mod api {
        include!(concat!(env!("OUT_DIR"), "/health/api.rs"));
    }
    pub mod api_grpc {
        include!(concat!(env!("OUT_DIR"), "/health/api_grpc.rs"));
    }
}

use pb::api::{HealthCheckRequest, health_check_response::ServingStatus};

/// Start `Check(service)` at `addr`, bounded by `timeout`; `done` gets the
/// outcome on the gRPC completion-queue thread (or at once when the call
/// cannot be made).
pub fn check(addr: SocketAddr, service: &str, timeout: Duration, done: Box<dyn FnOnce(Outcome) + Send>) {
    let target = addr.to_string();
    let channel = ChannelBuilder::new(crate::runtime::grpc::grpc_env())
        .primary_user_agent(super::net::PROBE_USER_AGENT)
        // a health answer is a few bytes: the pod may send no more than this
        .max_receive_message_len(4096)
        .connect(&target);
    let client = pb::api_grpc::HealthClient::new(channel);
    let mut req = HealthCheckRequest::new();
    req.service = service.to_string();
    // wait for the connection within the timeout, as the kubelet's blocking
    // dial does, instead of failing at the first refused attempt
    let opt = CallOption::default().timeout(timeout).wait_for_ready(true);
    let secs = timeout.as_secs();
    match client.check_async_opt(&req, opt) {
        Err(e) => done(Outcome::Failure(format!("error: failed to connect service at {target:?}: {e}"))),
        Ok(receiver) => {
            let keep = client.clone();
            client.spawn(async move {
                let _keep = keep; // the channel lives until the answer
                done(match receiver.await {
                    Ok(r) => match r.status.enum_value() {
                        Ok(ServingStatus::SERVING) => Outcome::Success,
                        Ok(s) => Outcome::Failure(format!("service unhealthy (responded with {:?})", format!("{s:?}"))),
                        Err(n) => Outcome::Failure(format!("service unhealthy (responded with \"{n}\")")),
                    },
                    Err(grpcio::Error::RpcFailure(s)) if s.code() == RpcStatusCode::DEADLINE_EXCEEDED => {
                        Outcome::Failure(format!("timeout: health rpc did not complete within {secs}s"))
                    }
                    Err(grpcio::Error::RpcFailure(s)) if s.code() == RpcStatusCode::UNIMPLEMENTED => Outcome::Failure(
                        format!(
                            "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                            s.message()
                        ),
                    ),
                    Err(grpcio::Error::RpcFailure(s)) if s.code() == RpcStatusCode::UNAVAILABLE => Outcome::Failure(
                        format!("error: failed to connect service at {target:?}: {}", s.message()),
                    ),
                    Err(e) => Outcome::Failure(format!("error: health rpc probe failed: {e}")),
                })
            });
        }
    }
}

/// A health server for the tests (unit and end to end): `Check` answers
/// with the status currently set; `0.0.0.0:port` (0: any free port).
pub mod test_server {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI32, Ordering};

    use super::pb::api::{HealthCheckResponse, health_check_response::ServingStatus};
    use super::pb::api_grpc::{Health, create_health};

    #[derive(Clone)]
    struct Svc(Arc<AtomicI32>);

    impl Health for Svc {
        fn check(
            &mut self,
            ctx: grpcio::RpcContext,
            _req: super::pb::api::HealthCheckRequest,
            sink: grpcio::UnarySink<HealthCheckResponse>,
        ) {
            let mut r = HealthCheckResponse::new();
            r.status = protobuf::EnumOrUnknown::from_i32(self.0.load(Ordering::SeqCst));
            let reply = sink.success(r);
            ctx.spawn(async move {
                let _ = reply.await;
            });
        }
    }

    /// A running health server; dropping it stops it.
    pub struct HealthServer {
        pub port: u16,
        status: Arc<AtomicI32>,
        _server: grpcio::Server,
    }

    impl HealthServer {
        pub fn start(host: &str, port: u16) -> std::io::Result<HealthServer> {
            let status = Arc::new(AtomicI32::new(ServingStatus::SERVING as i32));
            let env = Arc::new(grpcio::EnvBuilder::new().cq_count(1).name_prefix("test-health").build());
            let mut server = grpcio::ServerBuilder::new(env)
                .register_service(create_health(Svc(status.clone())))
                .build()
                .map_err(std::io::Error::other)?;
            let port = server
                .add_listening_port(format!("{host}:{port}"), grpcio::ServerCredentials::insecure())
                .map_err(std::io::Error::other)?;
            server.start();
            Ok(HealthServer { port, status, _server: server })
        }

        pub fn set_serving(&self, serving: bool) {
            let s = if serving { ServingStatus::SERVING } else { ServingStatus::NOT_SERVING };
            self.status.store(s as i32, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(addr: SocketAddr) -> Outcome {
        let (tx, rx) = crossbeam_channel::bounded(1);
        check(
            addr,
            "",
            Duration::from_secs(1),
            Box::new(move |o| {
                let _ = tx.send(o);
            }),
        );
        rx.recv_timeout(Duration::from_secs(5)).expect("an outcome")
    }

    #[test]
    fn serving_not_serving_and_nobody_listening() {
        let s = test_server::HealthServer::start("127.0.0.1", 0).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", s.port).parse().unwrap();
        assert_eq!(run(addr), Outcome::Success);
        s.set_serving(false);
        assert_eq!(run(addr), Outcome::Failure("service unhealthy (responded with \"NOT_SERVING\")".into()));
        drop(s);
        match run(addr) {
            Outcome::Failure(m) => assert!(
                m.starts_with("timeout: health rpc did not complete within 1s")
                    || m.starts_with(&format!("error: failed to connect service at \"{addr}\"")),
                "{m}"
            ),
            o => panic!("{o:?}"),
        }
    }
}

//! The node's interfaces for other programs: the local gRPC API on a unix
//! socket (`local`, proto/podwarden/api.proto), the read-only HTTP endpoint
//! (`http`: health, pods, metrics, stats), the typed views both serve
//! (`view`), what they do to pods (`ops`) and to local ConfigMaps and
//! Secrets (`objects`), exec/attach/port-forward (`stream`: the runtime's
//! streaming URL, and the relay of an upgraded connection to it), and the
//! one error all of them fail with (`status`: a `meta/v1 Status`); an
//! HTTP request's query parsed once as the API server parses it
//! (`query`). Owns
//! every listening socket; may use every layer below (the agent and its
//! parts), never the CLI.

pub mod duplex;
pub mod http;
pub mod kube;
pub mod local;
pub mod objects;
pub mod ops;
pub mod query;
pub mod spdy;
pub mod status;
pub mod stream;
pub mod view;
pub mod websocket;

/// The generated types of podwarden's own API (server here, client in
/// `cli::client`).
#[allow(clippy::all, clippy::pedantic, dead_code, unused_imports, unused_mut, unused_qualifications, missing_docs)]
#[allow(non_camel_case_types, non_snake_case, non_upper_case_globals, unreachable_pub, deprecated)]
pub mod pb {
    pub mod api {
        include!(concat!(env!("OUT_DIR"), "/podwarden/api.rs"));
    }
    pub mod api_grpc {
        include!(concat!(env!("OUT_DIR"), "/podwarden/api_grpc.rs"));
    }
}

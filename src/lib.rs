//! podwarden: a small, synchronous node agent that runs Kubernetes pods on
//! one machine through a CRI runtime. See ARCHITECTURE.md for the map.
//!
//! The modules are layers, lowest first; each imports only its own layer
//! and those before it (`tests/module_graph.rs` checks it).

// leaves: no running part of podwarden
// every foreign call, behind safe functions: the one module allowed unsafe
pub mod base;
pub mod config;
pub mod model;
#[allow(unsafe_code)]
pub mod sys;
// the runtime boundary and what reports on it
pub mod logs;
pub mod runtime;
pub mod telemetry;
// the node's resources, then the pods that use them
pub mod node;
pub mod pod;
// orchestration: which pods run
pub mod agent;
// edges: where the outside comes in
pub mod api;
pub mod cli;
pub mod cluster;

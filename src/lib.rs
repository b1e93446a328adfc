//! podwarden: a small, synchronous node agent that runs Kubernetes pods on
//! one machine through a CRI runtime. See ARCHITECTURE.md for the map.

pub mod cancel;
pub mod events;
pub mod model;
pub mod podworkers;
pub mod runtime;
pub mod status;
pub mod sync;
pub mod thread;
pub mod admission;
pub mod agent;
pub mod housekeeping;
pub mod metrics;
pub mod source;
pub mod config;
pub mod daemon;
pub mod logging;

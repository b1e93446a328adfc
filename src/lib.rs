//! podwarden: a small, synchronous node agent that runs Kubernetes pods on
//! one machine through a CRI runtime. See ARCHITECTURE.md for the map.

pub mod admission;
pub mod agent;
pub mod api;
pub mod cancel;
pub mod cgroups;
pub mod cli;
pub mod config;
pub mod credentials;
pub mod daemon;
pub mod events;
pub mod eviction;
pub mod fsutil;
pub mod housekeeping;
pub mod http;
pub mod images;
pub mod logging;
pub mod logind;
pub mod logrotate;
pub mod metrics;
pub mod model;

pub mod notify;
pub mod parts;
pub mod podworkers;
pub mod prober;
pub mod pss;
pub mod runtime;
pub mod shutdown;
pub mod source;
pub mod stats;
pub mod status;
pub mod sync;
// every foreign call, behind safe functions: the one module allowed unsafe
#[allow(unsafe_code)]
pub mod sys;
pub mod thread;
pub mod view;

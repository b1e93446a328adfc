//! One pod's life: the pod workers and their lifecycle state machine
//! (`workers`), the three phases they run against the runtime (`phases`:
//! set-up, termination, clean-up), volumes (`volumes`), probes (`prober`),
//! admission (`admission`), the status manager (`status`) and what a
//! cluster node's pods take from the control plane (`cluster`).
//!
//! Owns every pod's lifecycle state, probe state and status. May use
//! `base`, `sys`, `model`, `config`, `runtime`, `telemetry`, `logs` and
//! `node`; never the agent or the edges above it.

pub mod admission;
pub mod cluster;
pub mod phases;
pub mod prober;
pub mod status;
pub mod volumes;
pub mod workers;

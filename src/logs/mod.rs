//! Container logs in the kubelet's layout
//! (`/var/log/pods/<ns>_<name>_<uid>/<container>/<n>.log`): reading them
//! back across rotations (`reader`), rotating and compressing them on disk
//! (`rotation`), and the `log-monitor` thread with its workers that decide
//! when (`monitor`).
//!
//! Owns the log files' rotation; the runtime writes them. May use `base`,
//! `sys` and `runtime` (the list of containers, `ReopenContainerLog`).

pub mod monitor;
pub mod reader;
pub mod rotation;

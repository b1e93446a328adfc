//! The Kubernetes API of this node (issue 28), for kubectl.
pub mod authz;
pub mod pki;
pub mod select;
pub mod table;
pub mod watch;
pub mod wire;

//! Images on the node: the registry credentials a pull presents
//! (`credentials`: the docker config keyring and credential provider
//! plugins), how pulls are admitted and paced (`pull`: the pull policy,
//! the back-off, the gate of pulls at once, the pull messages' durations)
//! and image garbage collection (`gc`, run by the eviction thread).
//!
//! The pull itself runs on the pod's thread as a step of its set-up
//! (`pod::phases`), through the gate and policy defined here; nothing here
//! knows a pod worker.

pub mod credentials;
pub mod gc;
pub mod pull;
pub mod pull_secrets;
pub mod watch;

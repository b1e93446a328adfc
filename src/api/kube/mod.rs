//! The node's Kubernetes API (issue 28): what `kubectl apply`, `patch`,
//! `edit` and `explain` need, as pure functions the HTTPS server calls —
//! the OpenAPI documents (`openapi`), patches and field validation
//! (`patch`), server-side apply and `managedFields` (`ssa`), what every
//! write shares: errors, parameters, validation, list strategies (`write`).

pub mod openapi;
pub mod patch;
pub mod ssa;
pub mod write;

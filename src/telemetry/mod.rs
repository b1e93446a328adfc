//! What the agent tells the outside about itself: the event recorder
//! (`events`, a bounded ring) and the metrics under the kubelet's names
//! (`metrics`, counters, histograms and their Prometheus text).
//!
//! Owns the event ring and the metric values; every layer above records
//! into them. May use `base`, `model` and `runtime` (the operation names of
//! failed calls).

pub mod events;
pub mod metrics;

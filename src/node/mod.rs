//! What the node gives its pods and how it measures them: the kubelet's
//! cgroup hierarchy and pod limits (`cgroups`), huge page sizes and a
//! container's hugetlb limits (`hugepages`), images (pull gate,
//! credentials, garbage collection: `images`) and resource statistics
//! (`stats`, the Summary API's source and the eviction signals).
//!
//! Owns the node's cgroups, the image records and the last stats snapshot.
//! May use `base`, `sys`, `model`, `config`, `runtime`, `telemetry` and
//! `logs`; never a pod worker (the `pod` layer uses this one).

pub mod cgroups;
pub mod hugepages;
pub mod images;
pub mod stats;

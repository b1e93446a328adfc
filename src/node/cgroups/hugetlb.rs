//! Pod-level huge page limits (the hugetlb controller), for both drivers:
//! a pod's cgroup gets, for every page size the kernel offers, the sum of
//! its containers' `hugepages-<size>` limits, and 0 for a size it does not
//! ask for, as the kubelet's `ResourceConfigForPod` and its cgroup
//! manager set them. systemd has no property for them: with the systemd
//! driver the files are written in the slice's cgroup once the slice
//! exists.
//!
//! The files are named by the kernel's page size names
//! (`hugetlb.2MB.max` on cgroup v2, `hugetlb.2MB.limit_in_bytes` on v1).

use std::collections::BTreeMap;
use std::path::Path;

use super::Version;
use crate::model::{self, Pod};

/// The kernel's name of a huge page size in the hugetlb files (`2MB`,
/// `1GB`, `64KB`): the spelling the runtime uses too.
pub fn size_name(page_bytes: u64) -> String {
    crate::node::hugepages::runtime_size(page_bytes).unwrap_or_else(|| format!("{page_bytes}B"))
}

/// The pod's huge pages by page size (bytes): its app containers' and
/// sidecars' together, or an init container's if larger (it runs alone).
pub fn pod_hugepages(pod: &Pod) -> BTreeMap<u64, i64> {
    let mut sum: BTreeMap<u64, i64> = BTreeMap::new();
    for c in model::long_running(pod) {
        for (page, v) in crate::node::hugepages::container_pages(c) {
            let e = sum.entry(page).or_default();
            *e = e.saturating_add(v);
        }
    }
    for c in model::init_containers(pod).iter().filter(|c| !model::is_sidecar(c)) {
        for (page, v) in crate::node::hugepages::container_pages(c) {
            let e = sum.entry(page).or_default();
            *e = (*e).max(v);
        }
    }
    sum
}

/// The page size named in a hugetlb limit file of `version`
/// (`hugetlb.2MB.max` → `2MB`); not the reservation files (`.rsvd.`).
fn limit_file_size(version: Version, file: &str) -> Option<&str> {
    let suffix = match version {
        Version::V2 => ".max",
        Version::V1 => ".limit_in_bytes",
    };
    let size = file.strip_prefix("hugetlb.")?.strip_suffix(suffix)?;
    (!size.contains('.')).then_some(size)
}

/// Write `pages` (page size in bytes → bytes) into the hugetlb limit files
/// in `dir`, 0 for every size the kernel offers there that `pages` does
/// not name; nothing when `dir` has no hugetlb files (the controller is
/// not enabled there).
pub fn write(dir: &Path, version: Version, pages: &BTreeMap<u64, i64>) -> std::io::Result<()> {
    let by_name: BTreeMap<String, i64> = pages.iter().map(|(p, v)| (size_name(*p), *v)).collect();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let Some(size) = limit_file_size(version, &file) else { continue };
        let v = by_name.get(size).copied().unwrap_or(0).max(0);
        std::fs::write(e.path(), v.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_size_names_are_the_kernels() {
        assert_eq!(size_name(2 << 20), "2MB");
        assert_eq!(size_name(1 << 30), "1GB");
        assert_eq!(size_name(64 << 10), "64KB");
        assert_eq!(size_name(32 << 20), "32MB");
        assert_eq!(limit_file_size(Version::V2, "hugetlb.2MB.max"), Some("2MB"));
        assert_eq!(limit_file_size(Version::V2, "hugetlb.2MB.rsvd.max"), None);
        assert_eq!(limit_file_size(Version::V2, "hugetlb.2MB.current"), None);
        assert_eq!(limit_file_size(Version::V1, "hugetlb.1GB.limit_in_bytes"), Some("1GB"));
        assert_eq!(limit_file_size(Version::V1, "hugetlb.1GB.rsvd.limit_in_bytes"), None);
    }

    #[test]
    fn a_pods_huge_pages_are_its_containers_sum() {
        let y = "metadata: {name: p, uid: u}\nspec:\n  initContainers:\n  - name: i\n    image: i\n    resources: {limits: {hugepages-2Mi: 8Mi, memory: 8Mi}, requests: {hugepages-2Mi: 8Mi}}\n  containers:\n  - name: a\n    image: i\n    resources: {limits: {hugepages-2Mi: 4Mi, memory: 8Mi}}\n  - name: b\n    image: i\n    resources: {limits: {hugepages-2Mi: 2Mi, hugepages-1Gi: 1Gi, cpu: 1}}\n";
        let pod: Pod = serde_yaml_ng::from_str(y).unwrap();
        let h = pod_hugepages(&pod);
        assert_eq!(h.get(&(2 << 20)), Some(&(8 << 20)), "the init container's 8Mi is more than 4Mi + 2Mi");
        assert_eq!(h.get(&(1 << 30)), Some(&(1 << 30)));

        let dir = std::env::temp_dir().join(format!("pw-hugetlb-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["hugetlb.2MB.max", "hugetlb.2MB.rsvd.max", "hugetlb.1GB.max", "hugetlb.2MB.current"] {
            std::fs::write(dir.join(f), "max").unwrap();
        }
        write(&dir, Version::V2, &BTreeMap::from([(2 << 20, 4 << 20)])).unwrap();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(read("hugetlb.2MB.max"), "4194304");
        assert_eq!(read("hugetlb.1GB.max"), "0", "a size the pod does not ask for");
        assert_eq!(read("hugetlb.2MB.rsvd.max"), "max");
        assert_eq!(read("hugetlb.2MB.current"), "max");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

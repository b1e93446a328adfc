//! Huge pages as the node has them: the page sizes the kernel supports
//! (`/sys/kernel/mm/hugepages`), their CRI spelling (`2MB`, `1GB`), and a
//! container's hugetlb limits as the kubelet sends them to the runtime
//! (every size the node supports, 0 unless the container's
//! `hugepages-<size>` limit says otherwise).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use crate::model::Container;
use crate::runtime::HugepageLimit;

/// Where the kernel lists its huge page sizes (`hugepages-2048kB`).
pub const SYSFS: &str = "/sys/kernel/mm/hugepages";

/// The huge page sizes under `dir` (bytes, ascending); none when it cannot
/// be read.
pub fn page_sizes_in(dir: &Path) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut sizes: Vec<u64> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let kb: u64 = name.strip_prefix("hugepages-")?.strip_suffix("kB")?.parse().ok()?;
            kb.checked_mul(1024)
        })
        .collect();
    sizes.sort_unstable();
    sizes
}

/// The machine's huge page sizes, read once (they are fixed at boot).
pub fn page_sizes() -> &'static [u64] {
    static SIZES: OnceLock<Vec<u64>> = OnceLock::new();
    SIZES.get_or_init(|| page_sizes_in(Path::new(SYSFS)))
}

/// A page size as the runtime spells it: the largest binary unit that
/// divides it (`2097152` → `2MB`, `1073741824` → `1GB`, `65536` → `64KB`);
/// `None` for a size no unit divides into a number up to 1024.
pub fn runtime_size(bytes: u64) -> Option<String> {
    const UNITS: [&str; 6] = ["B", "KB", "MB", "GB", "TB", "PB"];
    let (mut n, mut i) = (bytes, 0);
    while n > 0 && n.is_multiple_of(1024) && i < UNITS.len() - 1 {
        n /= 1024;
        i += 1;
    }
    (n > 0 && (n <= 1024 || i == UNITS.len() - 1)).then(|| format!("{n}{}", UNITS[i]))
}

/// A container's `hugepages-<size>` amounts (limit, else request:
/// validation makes them equal), in bytes by page size in bytes.
pub fn container_pages(c: &Container) -> BTreeMap<u64, i64> {
    let mut out = BTreeMap::new();
    let Some(r) = c.resources.as_ref() else { return out };
    for m in [&r.requests, &r.limits].into_iter().flatten() {
        for (name, q) in m {
            let Some(size) = name.strip_prefix("hugepages-") else { continue };
            let Some(page) = crate::model::quantity::bytes(size).ok().filter(|b| *b > 0) else { continue };
            out.insert(page as u64, crate::model::qos::amount(name, &q.0));
        }
    }
    out
}

/// The hugetlb limits of container `c` on a node with page `sizes`: each
/// size at 0, except those its `hugepages-<size>` limits name. A limit for
/// a size the node does not have is sent too: the runtime then fails the
/// container, as it should (admission keeps such pods out first).
pub fn container_limits(c: &Container, sizes: &[u64]) -> Vec<HugepageLimit> {
    let mut out: Vec<HugepageLimit> =
        sizes.iter().filter_map(|&s| runtime_size(s)).map(|page_size| HugepageLimit { page_size, limit: 0 }).collect();
    for (page, bytes) in container_pages(c) {
        let Some(page_size) = runtime_size(page) else { continue };
        let limit = u64::try_from(bytes).unwrap_or(0);
        match out.iter_mut().find(|l| l.page_size == page_size) {
            Some(l) => l.limit = limit,
            None => out.push(HugepageLimit { page_size, limit }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_as_the_runtime_spells_them() {
        assert_eq!(runtime_size(2 << 20).as_deref(), Some("2MB"));
        assert_eq!(runtime_size(1 << 30).as_deref(), Some("1GB"));
        assert_eq!(runtime_size(64 << 10).as_deref(), Some("64KB"));
        assert_eq!(runtime_size(16 << 30).as_deref(), Some("16GB"));
        assert_eq!(runtime_size(512).as_deref(), Some("512B"));
        // not a whole number of any unit up to 1024
        assert_eq!(runtime_size(2_000_000), None);
        assert_eq!(runtime_size(0), None);
    }

    #[test]
    fn page_sizes_from_the_kernels_directory() {
        let d = std::env::temp_dir().join(format!("pw-hugepages-{}", std::process::id()));
        for n in ["hugepages-2048kB", "hugepages-1048576kB", "other", "hugepages-xkB"] {
            std::fs::create_dir_all(d.join(n)).unwrap();
        }
        assert_eq!(page_sizes_in(&d), vec![2 << 20, 1 << 30]);
        assert_eq!(page_sizes_in(&d.join("missing")), Vec::<u64>::new());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn every_size_limited_and_the_asked_ones_set() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "resources": {
                "limits": {"hugepages-2Mi": "4Mi", "memory": "64Mi"},
                "requests": {"hugepages-2Mi": "4Mi", "memory": "64Mi"}
            }
        }))
        .unwrap();
        let l = |s: &str, n: u64| HugepageLimit { page_size: s.into(), limit: n };
        assert_eq!(container_limits(&c, &[2 << 20, 1 << 30]), vec![l("2MB", 4 << 20), l("1GB", 0)]);
        // a node without huge pages: only what the container asks for
        assert_eq!(container_limits(&c, &[]), vec![l("2MB", 4 << 20)]);
        let plain: Container = serde_json::from_value(serde_json::json!({"name": "c"})).unwrap();
        assert_eq!(container_limits(&plain, &[2 << 20]), vec![l("2MB", 0)]);
        assert_eq!(container_limits(&plain, &[]), vec![]);
    }
}

//! The downward API's vocabulary, checked when a manifest is read and used
//! when a container's environment is made (`sync::env`).

use super::quantity;

/// The paths `fieldRef` may name in an environment variable.
pub const ENV_FIELD_PATHS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "metadata.labels['<KEY>']",
    "metadata.annotations['<KEY>']",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

/// The paths `fieldRef` may name in a downwardAPI volume file (the whole
/// label and annotation maps too; no spec or status fields).
pub const VOLUME_FIELD_PATHS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "metadata.labels",
    "metadata.annotations",
    "metadata.labels['<KEY>']",
    "metadata.annotations['<KEY>']",
];

/// `metadata.labels['key']` → `("labels", "key")`.
pub fn subscript(path: &str) -> Option<(&str, &str)> {
    for map in ["labels", "annotations"] {
        if let Some(rest) = path.strip_prefix("metadata.").and_then(|p| p.strip_prefix(map))
            && let Some(key) = rest.strip_prefix("['").and_then(|r| r.strip_suffix("']"))
        {
            return Some((map, key));
        }
    }
    None
}

/// The resources `resourceFieldRef` may name (no hugepages: podwarden does
/// not account for them).
pub const RESOURCES: &[&str] = &[
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
];

/// Whether `divisor` (a quantity) is one the API allows for `resource`:
/// `1m` or `1` for cpu; `1`, a decimal (`1k` … `1E`) or binary (`1Ki` …
/// `1Ei`) unit for memory.
pub fn divisor_allowed(resource: &str, divisor: &str) -> bool {
    if resource.ends_with(".cpu") {
        return matches!(quantity::cpu_millis(divisor), Ok(1 | 1000));
    }
    // a whole number of bytes (`1m` is a thousandth of one)
    let Ok(v) = quantity::parse(divisor) else { return false };
    (0..=6).any(|i| v == 1000f64.powi(i)) || (1..=6).any(|i| v == (1u64 << (10 * i)) as f64)
}

/// Expand `$(NAME)` references in `input`: a known name becomes its value,
/// an unknown one stays as written, `$$` is a literal `$`, and a `$` that
/// starts no reference is kept (Kubernetes' expansion rules).
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        match after.chars().next() {
            // a `$` at the very end stays
            None => {
                out.push('$');
                rest = after;
            }
            Some('$') => {
                out.push('$');
                rest = &after[1..];
            }
            Some('(') => match after.find(')') {
                Some(close) => {
                    let name = &after[1..close];
                    match lookup(name) {
                        Some(v) => out.push_str(&v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &after[close + 1..];
                }
                // no closing parenthesis: `$(` is kept and scanning goes on
                // after it
                None => {
                    out.push_str("$(");
                    rest = &after[1..];
                }
            },
            Some(ch) => {
                out.push('$');
                out.push(ch);
                rest = &after[ch.len_utf8()..];
            }
        }
    }
    out.push_str(rest);
    out
}

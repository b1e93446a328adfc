//! Pod sysctls as the kubelet admits them: the safe set, plus what the
//! node's `allowedUnsafeSysctls` lists (names or `prefix*` patterns), each
//! refused when it belongs to a namespace the pod shares with the host.

use thiserror::Error;

/// The kernel namespace a sysctl lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    Net,
    Ipc,
}

impl Namespace {
    fn word(self) -> &'static str {
        match self {
            Namespace::Net => "Net",
            Namespace::Ipc => "IPC",
        }
    }
}

/// The sysctls any pod may set (the kubelet's safe set; this kernel is
/// newer than every version they are gated on).
pub const SAFE: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

/// Reason of a pod refused for a sysctl.
pub const REASON_FORBIDDEN: &str = "SysctlForbidden";

/// A sysctl name with dots as separators (`net/ipv4/x` is `net.ipv4.x`; a
/// name whose first separator is a slash has its dots and slashes swapped,
/// as the kubelet normalizes them).
pub fn normalize(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| {
                if c == '.' {
                    '/'
                } else if c == '/' {
                    '.'
                } else {
                    c
                }
            })
            .collect(),
        _ => name.to_string(),
    }
}

/// The namespace of sysctl `name` (or of every name a `prefix` starts),
/// `None` for a sysctl of the whole node.
pub fn namespace(name: &str) -> Option<Namespace> {
    const IPC: &[&str] = &[
        "kernel.sem",
        "kernel.shmall",
        "kernel.shmmax",
        "kernel.shmmni",
        "kernel.shm_rmid_forced",
        "kernel.msgmax",
        "kernel.msgmnb",
        "kernel.msgmni",
    ];
    let name = normalize(name);
    if IPC.contains(&name.as_str()) || name.starts_with("fs.mqueue.") || name == "kernel.shm" || name == "kernel.msg" {
        return Some(Namespace::Ipc);
    }
    // patterns: `kernel.shm*` and `kernel.msg*` stay in the IPC namespace
    if name.starts_with("kernel.shm") || name.starts_with("kernel.msg") {
        return Some(Namespace::Ipc);
    }
    name.starts_with("net.").then_some(Namespace::Net)
}

/// What a node allows: the safe set and its `allowedUnsafeSysctls`.
#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    names: Vec<String>,
    prefixes: Vec<String>,
}

impl Allowlist {
    /// The safe set plus `unsafe_allowed` (names or `prefix*` patterns,
    /// checked by the config to be namespaced).
    pub fn new(unsafe_allowed: &[String]) -> Allowlist {
        let mut a = Allowlist { names: SAFE.iter().map(|s| s.to_string()).collect(), prefixes: Vec::new() };
        for s in unsafe_allowed {
            match s.strip_suffix('*') {
                Some(p) => a.prefixes.push(normalize(p)),
                None => a.names.push(normalize(s)),
            }
        }
        a
    }

    /// Whether a pod (sharing the host's network or IPC namespace or not)
    /// may set `name`; the error is the kubelet's.
    pub fn check(&self, name: &str, host_network: bool, host_ipc: bool) -> Result<(), SysctlError> {
        let n = normalize(name);
        let allowed = self.names.contains(&n) || self.prefixes.iter().any(|p| n.starts_with(p.as_str()));
        if !allowed {
            return Err(SysctlError::NotAllowlisted { name: name.to_string() });
        }
        match namespace(&n) {
            Some(ns @ Namespace::Net) if host_network => {
                Err(SysctlError::HostNamespace { name: name.to_string(), namespace: ns })
            }
            Some(ns @ Namespace::Ipc) if host_ipc => {
                Err(SysctlError::HostNamespace { name: name.to_string(), namespace: ns })
            }
            _ => Ok(()),
        }
    }

    /// A pod's sysctls, in order: the first one refused, as the kubelet's
    /// admission message (`forbidden sysctl: ...`).
    pub fn admit(&self, pod: &super::Pod) -> Result<(), Forbidden> {
        let Some(spec) = super::spec(pod) else { return Ok(()) };
        let sysctls = spec.security_context.as_ref().and_then(|s| s.sysctls.as_ref());
        for s in sysctls.into_iter().flatten() {
            self.check(&s.name, spec.host_network.unwrap_or(false), spec.host_ipc.unwrap_or(false))?;
        }
        Ok(())
    }
}

/// Why a node refuses a sysctl, in the kubelet's words.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SysctlError {
    /// Neither safe nor in `allowedUnsafeSysctls`.
    #[error("{name:?} not allowlisted")]
    NotAllowlisted { name: String },
    /// In a namespace the pod shares with the host.
    #[error("{name:?} not allowed with host {} enabled", namespace.word())]
    HostNamespace { name: String, namespace: Namespace },
}

/// A pod refused for a sysctl: the kubelet's admission message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("forbidden sysctl: {0}")]
pub struct Forbidden(#[from] pub SysctlError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_safe_set_and_the_allowed_patterns() {
        let a = Allowlist::new(&["net.core.somaxconn".into(), "kernel.msg*".into()]);
        // the errors as the kubelet words them
        let check = |name, host_network, host_ipc| a.check(name, host_network, host_ipc).map_err(|e| e.to_string());
        assert_eq!(check("net.ipv4.ip_local_port_range", false, false), Ok(()));
        assert_eq!(check("net/ipv4/ip_local_port_range", false, false), Ok(()));
        assert_eq!(check("net.core.somaxconn", false, false), Ok(()));
        assert_eq!(check("kernel.msgmax", false, false), Ok(()));
        assert_eq!(check("kernel.sem", false, false), Err("\"kernel.sem\" not allowlisted".into()));
        assert_eq!(
            check("net.core.somaxconn", true, false),
            Err("\"net.core.somaxconn\" not allowed with host Net enabled".into())
        );
        assert_eq!(
            check("kernel.shm_rmid_forced", false, true),
            Err("\"kernel.shm_rmid_forced\" not allowed with host IPC enabled".into())
        );
        assert_eq!(
            Allowlist::new(&[]).check("net.core.somaxconn", false, false).unwrap_err().to_string(),
            "\"net.core.somaxconn\" not allowlisted"
        );
    }

    #[test]
    fn namespaces_and_names() {
        assert_eq!(namespace("net.core.somaxconn"), Some(Namespace::Net));
        assert_eq!(namespace("kernel.msg"), Some(Namespace::Ipc));
        assert_eq!(namespace("fs.mqueue.msg_max"), Some(Namespace::Ipc));
        assert_eq!(namespace("vm.swappiness"), None);
        assert_eq!(namespace("kernel.pid_max"), None);
        assert_eq!(normalize("net/ipv4/conf/eth0.100/forwarding"), "net.ipv4.conf.eth0/100.forwarding");
    }
}

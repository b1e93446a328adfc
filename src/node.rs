//! The node as the status side shows it: a v1 `Node` (Ready condition,
//! capacity, allocatable, node info) plus what podwarden adds: resources
//! the active pods hold and the graceful-shutdown state. Served on the
//! read-only `/node` endpoint and by the local API.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::model;
use crate::parts::Parts;

/// Format millicores as a Kubernetes CPU quantity (`2`, `1500m`).
pub fn cpu_quantity(millis: i64) -> String {
    if millis % 1000 == 0 { (millis / 1000).to_string() } else { format!("{millis}m") }
}

/// Format bytes as a memory quantity (`Ki` like the kubelet; plain bytes
/// when not a whole number of KiB).
pub fn memory_quantity(bytes: i64) -> String {
    if bytes != 0 && bytes % 1024 == 0 { format!("{}Ki", bytes / 1024) } else { bytes.to_string() }
}

fn uname() -> (String, String) {
    crate::sys::uname().unwrap_or_default()
}

fn os_image() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=")).map(|v| v.trim().trim_matches('"').to_string())
        })
        .unwrap_or_else(|| "Linux".into())
}

fn go_arch(machine: &str) -> &str {
    match machine {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "armv7l" | "armv6l" => "arm",
        other => other,
    }
}

/// The Ready condition: `(status, reason, message)`.
pub fn ready(parts: &Parts, healthy_within: Duration) -> (bool, &'static str, String) {
    if parts.admission.is_shutting_down() {
        return (false, "KubeletNotReady", "node is shutting down".into());
    }
    match parts.agent.health(healthy_within) {
        Ok(()) => (true, "KubeletReady", "podwarden is posting ready status".into()),
        Err(e) => (false, "KubeletNotReady", e.to_string()),
    }
}

/// The node report: `{"node": <v1 Node>, "allocated": {...},
/// "gracefulShutdown": {...}}`.
pub fn report(parts: &Parts, healthy_within: Duration, runtime_version: &str) -> Value {
    let a = parts.admission.allocatable();
    let (cpu, mem, pods) = parts.agent.allocated();
    let (kernel, machine) = uname();
    let (ok, reason, message) = ready(parts, healthy_within);
    let now = model::rfc3339(SystemTime::now());
    let arch = go_arch(&machine).to_string();
    let node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": parts.node_name,
            "labels": {
                "kubernetes.io/hostname": parts.node_name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": arch,
            },
        },
        "status": {
            "capacity": {
                "cpu": cpu_quantity(a.cpu_capacity_millis),
                "memory": memory_quantity(a.memory_capacity_bytes),
                "pods": a.pods.to_string(),
            },
            "allocatable": {
                "cpu": cpu_quantity(a.cpu_millis),
                "memory": memory_quantity(a.memory_bytes),
                "pods": a.pods.to_string(),
            },
            "conditions": [{
                "type": "Ready",
                "status": if ok { "True" } else { "False" },
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
            }],
            "nodeInfo": {
                "kubeletVersion": concat!("podwarden-", env!("CARGO_PKG_VERSION")),
                "containerRuntimeVersion": runtime_version,
                "kernelVersion": kernel,
                "osImage": os_image(),
                "operatingSystem": "linux",
                "architecture": arch,
                "machineID": std::fs::read_to_string("/etc/machine-id").unwrap_or_default().trim(),
                "bootID": std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default().trim(),
                "systemUUID": "",
                "kubeProxyVersion": "",
            },
        },
    });
    let st = parts.shutdown.lock().clone();
    json!({
        "node": node,
        "allocated": {"cpu": cpu_quantity(cpu), "memory": memory_quantity(mem), "pods": pods.to_string()},
        "gracefulShutdown": {
            "enabled": st.configured && st.problem.is_none(),
            "configured": st.configured,
            "shuttingDown": parts.admission.is_shutting_down(),
            "inhibitorLockHeld": st.lock_held,
            "problem": st.problem,
            "lastStartTime": st.last_start.map(model::rfc3339),
            "lastEndTime": st.last_end.map(model::rfc3339),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(cpu_quantity(2000), "2");
        assert_eq!(cpu_quantity(1500), "1500m");
        assert_eq!(cpu_quantity(0), "0");
        assert_eq!(memory_quantity(256 * 1024 * 1024), "262144Ki");
        assert_eq!(memory_quantity(1000), "1000");
    }
}

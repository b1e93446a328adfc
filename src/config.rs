//! The agent's configuration: YAML, with the kubelet's
//! `KubeletConfiguration` (kubelet.config.k8s.io/v1beta1) names and formats
//! for every field that means the same. Unknown fields get one warning each;
//! invalid values are rejected naming the field, the value and what is
//! allowed. Defaults live in [`Config::default`], and only there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use thiserror::Error;

use crate::model::quantity;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("{path}: cannot read config: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: cannot parse YAML: {message}")]
    Syntax { path: String, message: String },
    #[error("{path}: field {field}: {value} is invalid: {allowed}")]
    Invalid { path: String, field: String, value: String, allowed: String },
}

/// One `shutdownGracePeriodByPodPriority` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityGrace {
    pub priority: i32,
    pub shutdown_grace_period_seconds: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub static_pod_path: PathBuf,
    pub container_runtime_endpoint: String,
    pub runtime_request_timeout: Duration,
    pub sync_frequency: Duration,
    pub file_check_frequency: Duration,
    pub housekeeping_interval: Duration,
    pub shutdown_grace_period: Duration,
    pub shutdown_grace_period_critical_pods: Duration,
    pub shutdown_grace_period_by_pod_priority: Vec<PriorityGrace>,
    pub address: String,
    pub read_only_port: u16,
    pub max_pods: usize,
    /// Reserved CPU in millicores and memory in bytes (system + kube).
    pub reserved_cpu_millis: i64,
    pub reserved_memory_bytes: i64,
    pub cgroup_driver: String,
    pub root_dir: PathBuf,
    pub api_socket: PathBuf,
    pub node_name: String,
    pub pod_logs_dir: PathBuf,
    pub priority_classes: BTreeMap<String, i32>,
    /// Containers may run privileged (podwarden-only; default false).
    pub allow_privileged: bool,
    /// Where podwarden writes its logind drop-in when `shutdownGracePeriod`
    /// exceeds logind's `InhibitDelayMaxSec` (podwarden-only).
    pub logind_drop_in_dir: PathBuf,
    /// Group (name, gid) whose members may use the local API besides root
    /// (podwarden-only; default none).
    pub api_group: Option<(String, u32)>,
    /// Serve env values on the read-only `/pods` (podwarden-only; default
    /// false: they are redacted, unlike the kubelet's).
    pub read_only_port_shows_env: bool,
    /// Pod Security Standards level for manifests in `staticPodPath` (root's
    /// files) and pods applied through the API by root (podwarden-only;
    /// default privileged).
    pub static_pod_security_level: crate::pss::Level,
    /// Pod Security Standards level for pods applied through the API by a
    /// non-root member of `apiGroup` (podwarden-only; default baseline).
    pub api_group_pod_security_level: crate::pss::Level,
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_lowercase())
        .unwrap_or_else(|_| "localhost".into())
}

impl Default for Config {
    fn default() -> Self {
        Config {
            static_pod_path: "/etc/podwarden/manifests".into(),
            container_runtime_endpoint: "unix:///run/containerd/containerd.sock".into(),
            runtime_request_timeout: Duration::from_secs(120),
            sync_frequency: Duration::from_secs(60),
            file_check_frequency: Duration::from_secs(20),
            housekeeping_interval: Duration::from_secs(2),
            shutdown_grace_period: Duration::ZERO,
            shutdown_grace_period_critical_pods: Duration::ZERO,
            shutdown_grace_period_by_pod_priority: Vec::new(),
            address: "127.0.0.1".into(),
            read_only_port: 10255,
            max_pods: 110,
            reserved_cpu_millis: 0,
            reserved_memory_bytes: 0,
            cgroup_driver: "systemd".into(),
            root_dir: "/var/lib/podwarden".into(),
            api_socket: "/run/podwarden/podwarden.sock".into(),
            node_name: hostname(),
            pod_logs_dir: "/var/log/pods".into(),
            priority_classes: BTreeMap::new(),
            allow_privileged: false,
            logind_drop_in_dir: "/etc/systemd/logind.conf.d".into(),
            api_group: None,
            read_only_port_shows_env: false,
            static_pod_security_level: crate::pss::Level::Privileged,
            api_group_pod_security_level: crate::pss::Level::Baseline,
        }
    }
}

/// Parse a Go duration (`1m30s`, `500ms`, `2h`, `0`).
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if n == 0 {
            return None;
        }
        let num: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let mult = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += num * mult;
        rest = &rest[u..];
    }
    Some(Duration::from_secs_f64(total))
}

const KNOWN_KUBELET_IGNORED: &[&str] = &[
    // Fields a real kubelet config carries that podwarden accepts and does
    // not act on are warned about like any unknown field; see load().
];

struct Fields<'a> {
    path: &'a str,
    map: &'a serde_json::Map<String, Value>,
}

impl Fields<'_> {
    fn bad(&self, field: &str, value: &Value, allowed: &str) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.into(),
            field: field.into(),
            value: value.to_string(),
            allowed: allowed.into(),
        }
    }

    fn string(&self, field: &str) -> Result<Option<String>, ConfigError> {
        match self.map.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
            Some(v) => Err(self.bad(field, v, "expected a non-empty string")),
        }
    }

    fn path(&self, field: &str) -> Result<Option<PathBuf>, ConfigError> {
        match self.string(field)? {
            Some(s) if s.starts_with('/') => Ok(Some(s.into())),
            Some(s) => Err(self.bad(field, &Value::String(s), "expected an absolute path")),
            None => Ok(None),
        }
    }

    fn duration(&self, field: &str) -> Result<Option<Duration>, ConfigError> {
        match self.map.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v @ Value::String(s)) => parse_duration(s)
                .map(Some)
                .ok_or_else(|| self.bad(field, v, "expected a duration such as 30s, 1m30s or 500ms")),
            Some(v) => Err(self.bad(field, v, "expected a duration string such as 30s")),
        }
    }

    fn int(&self, field: &str, min: i64, max: i64) -> Result<Option<i64>, ConfigError> {
        match self.map.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_i64() {
                Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
                _ => Err(self.bad(field, v, &format!("expected an integer from {min} to {max}"))),
            },
        }
    }

    /// `systemReserved`/`kubeReserved`: cpu and memory quantities.
    fn reserved(&self, field: &str) -> Result<(i64, i64), ConfigError> {
        let Some(v) = self.map.get(field).filter(|v| !v.is_null()) else {
            return Ok((0, 0));
        };
        let Some(m) = v.as_object() else {
            return Err(self.bad(field, v, "expected a map such as {cpu: 100m, memory: 256Mi}"));
        };
        let mut cpu = 0;
        let mut mem = 0;
        for (k, q) in m {
            let f = format!("{field}.{k}");
            let s = q.as_str().ok_or_else(|| self.bad(&f, q, "expected a quantity string"))?;
            match k.as_str() {
                "cpu" => cpu = quantity::cpu_millis(s).map_err(|e| self.bad(&f, q, &e.to_string()))?,
                "memory" => mem = quantity::bytes(s).map_err(|e| self.bad(&f, q, &e.to_string()))?,
                "ephemeral-storage" | "pid" => {
                    log::warn!("{}: {f} is accepted but not enforced by podwarden", self.path);
                }
                _ => return Err(self.bad(&f, q, "expected one of cpu, memory, ephemeral-storage, pid")),
            }
        }
        Ok((cpu, mem))
    }
}

const FIELDS: &[&str] = &[
    "kind",
    "apiVersion",
    "staticPodPath",
    "containerRuntimeEndpoint",
    "runtimeRequestTimeout",
    "syncFrequency",
    "fileCheckFrequency",
    "housekeepingInterval",
    "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods",
    "shutdownGracePeriodByPodPriority",
    "address",
    "readOnlyPort",
    "maxPods",
    "systemReserved",
    "kubeReserved",
    "cgroupDriver",
    "rootDir",
    "apiSocket",
    "nodeName",
    "podLogsDir",
    "priorityClasses",
    "allowPrivileged",
    "logindDropInDir",
    "apiGroup",
    "readOnlyPortShowsEnv",
    "staticPodSecurityLevel",
    "apiGroupPodSecurityLevel",
];

impl Config {
    /// Load and validate a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: p.clone(), source })?;
        Self::parse(&p, &text)
    }

    /// Parse and validate config text; `path` names the input in errors.
    pub fn parse(path: &str, text: &str) -> Result<Self, ConfigError> {
        let v: Value = if text.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            serde_yaml_ng::from_str(text)
                .map_err(|e| ConfigError::Syntax { path: path.into(), message: e.to_string() })?
        };
        let Value::Object(map) = &v else {
            return Err(ConfigError::Syntax { path: path.into(), message: "expected a mapping of fields".into() });
        };
        let f = Fields { path, map };
        let mut c = Config::default();
        if let Some(k) = f.string("kind")?
            && k != "KubeletConfiguration"
        {
            return Err(f.bad("kind", &Value::String(k), "expected KubeletConfiguration"));
        }
        if let Some(a) = f.string("apiVersion")?
            && a != "kubelet.config.k8s.io/v1beta1"
        {
            return Err(f.bad("apiVersion", &Value::String(a), "expected kubelet.config.k8s.io/v1beta1"));
        }
        for k in map.keys() {
            if !FIELDS.contains(&k.as_str()) && !KNOWN_KUBELET_IGNORED.contains(&k.as_str()) {
                log::warn!("{path}: unknown field {k:?} ignored");
            }
        }
        if let Some(p) = f.path("staticPodPath")? {
            c.static_pod_path = p;
        }
        if let Some(e) = f.string("containerRuntimeEndpoint")? {
            if !(e.starts_with("unix://") || e.starts_with('/') || e == "fake://") {
                return Err(f.bad("containerRuntimeEndpoint", &Value::String(e), "expected unix:///path/to/socket"));
            }
            c.container_runtime_endpoint = e;
        }
        let positive = |field: &str, d: Option<Duration>| -> Result<Option<Duration>, ConfigError> {
            match d {
                Some(d) if d.is_zero() => Err(f.bad(field, &map[field], "must be greater than 0")),
                d => Ok(d),
            }
        };
        if let Some(d) = positive("runtimeRequestTimeout", f.duration("runtimeRequestTimeout")?)? {
            c.runtime_request_timeout = d;
        }
        if let Some(d) = positive("syncFrequency", f.duration("syncFrequency")?)? {
            c.sync_frequency = d;
        }
        if let Some(d) = positive("fileCheckFrequency", f.duration("fileCheckFrequency")?)? {
            c.file_check_frequency = d;
        }
        if let Some(d) = positive("housekeepingInterval", f.duration("housekeepingInterval")?)? {
            c.housekeeping_interval = d;
        }
        if let Some(d) = f.duration("shutdownGracePeriod")? {
            c.shutdown_grace_period = d;
        }
        if let Some(d) = f.duration("shutdownGracePeriodCriticalPods")? {
            c.shutdown_grace_period_critical_pods = d;
        }
        if c.shutdown_grace_period_critical_pods > c.shutdown_grace_period {
            return Err(f.bad(
                "shutdownGracePeriodCriticalPods",
                &map["shutdownGracePeriodCriticalPods"],
                "must not exceed shutdownGracePeriod",
            ));
        }
        if let Some(v) = map.get("shutdownGracePeriodByPodPriority").filter(|v| !v.is_null()) {
            let field = "shutdownGracePeriodByPodPriority";
            let list = v.as_array().ok_or_else(|| f.bad(field, v, "expected a list"))?;
            for (i, e) in list.iter().enumerate() {
                let fe = format!("{field}[{i}]");
                let prio = e.get("priority").and_then(Value::as_i64);
                let secs = e.get("shutdownGracePeriodSeconds").and_then(Value::as_i64);
                match (prio, secs) {
                    (Some(p), Some(s)) if i32::try_from(p).is_ok() && s >= 0 => c
                        .shutdown_grace_period_by_pod_priority
                        .push(PriorityGrace { priority: p as i32, shutdown_grace_period_seconds: s }),
                    _ => {
                        return Err(f.bad(
                            &fe,
                            e,
                            "expected {priority: <int32>, shutdownGracePeriodSeconds: <non-negative int>}",
                        ));
                    }
                }
            }
            if !c.shutdown_grace_period.is_zero() && !c.shutdown_grace_period_by_pod_priority.is_empty() {
                return Err(f.bad(
                    field,
                    v,
                    "cannot be combined with shutdownGracePeriod/shutdownGracePeriodCriticalPods",
                ));
            }
        }
        if let Some(a) = f.string("address")? {
            if a.parse::<std::net::IpAddr>().is_err() {
                return Err(f.bad("address", &Value::String(a), "expected an IP address"));
            }
            c.address = a;
        }
        if let Some(p) = f.int("readOnlyPort", 0, 65535)? {
            c.read_only_port = p as u16;
        }
        if let Some(n) = f.int("maxPods", 1, 10_000)? {
            c.max_pods = n as usize;
        }
        let (sc, sm) = f.reserved("systemReserved")?;
        let (kc, km) = f.reserved("kubeReserved")?;
        c.reserved_cpu_millis = sc + kc;
        c.reserved_memory_bytes = sm + km;
        if let Some(d) = f.string("cgroupDriver")? {
            if d != "systemd" && d != "cgroupfs" {
                return Err(f.bad("cgroupDriver", &Value::String(d), "expected systemd or cgroupfs"));
            }
            c.cgroup_driver = d;
        }
        if let Some(p) = f.path("rootDir")? {
            c.root_dir = p;
        }
        if let Some(p) = f.path("apiSocket")? {
            c.api_socket = p;
        }
        if let Some(n) = f.string("nodeName")? {
            if !crate::model::manifest::is_dns1123_subdomain(&n) {
                return Err(f.bad("nodeName", &Value::String(n), "expected a DNS-1123 subdomain"));
            }
            c.node_name = n;
        }
        if let Some(p) = f.path("podLogsDir")? {
            c.pod_logs_dir = p;
        }
        if let Some(p) = f.path("logindDropInDir")? {
            c.logind_drop_in_dir = p;
        }
        if let Some(g) = f.string("apiGroup")? {
            let Some(gid) = crate::api::group_id(&g) else {
                return Err(f.bad("apiGroup", &Value::String(g), "expected a group that exists in /etc/group"));
            };
            c.api_group = Some((g, gid));
        }
        match map.get("readOnlyPortShowsEnv") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => c.read_only_port_shows_env = *b,
            Some(v) => return Err(f.bad("readOnlyPortShowsEnv", v, "expected true or false")),
        }
        match map.get("allowPrivileged") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => c.allow_privileged = *b,
            Some(v) => return Err(f.bad("allowPrivileged", v, "expected true or false")),
        }
        for (field, level) in [
            ("staticPodSecurityLevel", &mut c.static_pod_security_level),
            ("apiGroupPodSecurityLevel", &mut c.api_group_pod_security_level),
        ] {
            if let Some(s) = f.string(field)? {
                *level = crate::pss::Level::parse(&s)
                    .ok_or_else(|| f.bad(field, &Value::String(s), "expected privileged, baseline or restricted"))?;
            }
        }
        if let Some(v) = map.get("priorityClasses").filter(|v| !v.is_null()) {
            let m =
                v.as_object().ok_or_else(|| f.bad("priorityClasses", v, "expected a map of class name to integer"))?;
            for (k, p) in m {
                let n = p
                    .as_i64()
                    .filter(|n| i32::try_from(*n).is_ok() && *n < 1_000_000_000)
                    .ok_or_else(|| f.bad(&format!("priorityClasses.{k}"), p, "expected an integer below 1000000000"))?;
                c.priority_classes.insert(k.clone(), n as i32);
            }
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_packaged_config_is_the_defaults_written_down() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/config.yaml");
        let c = Config::load(std::path::Path::new(path)).expect("the packaged config loads");
        assert_eq!(c, Config::default(), "packaging/config.yaml must show every default");
        let text = std::fs::read_to_string(path).unwrap();
        for field in FIELDS.iter().filter(|f| !["nodeName", "apiGroup", "shutdownGracePeriodByPodPriority"].contains(f))
        {
            assert!(text.contains(&format!("\n{field}:")), "packaging/config.yaml does not document {field}");
        }
    }

    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("10"), None);
        assert_eq!(parse_duration("1x"), None);
        assert_eq!(parse_duration(""), None);
    }

    #[test]
    fn kubelet_style_config_loads() {
        let c = Config::parse(
            "c.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: /etc/kubernetes/manifests\nsyncFrequency: 1m\nfileCheckFrequency: 20s\nshutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\nmaxPods: 50\nsystemReserved:\n  cpu: 500m\n  memory: 256Mi\nkubeReserved:\n  cpu: 100m\nauthentication:\n  anonymous:\n    enabled: false\nclusterDNS: [10.96.0.10]\n",
        )
        .unwrap();
        assert_eq!(c.static_pod_path, PathBuf::from("/etc/kubernetes/manifests"));
        assert_eq!(c.shutdown_grace_period, Duration::from_secs(30));
        assert_eq!(c.max_pods, 50);
        assert_eq!(c.reserved_cpu_millis, 600);
        assert_eq!(c.reserved_memory_bytes, 256 << 20);
    }

    #[test]
    fn pod_security_levels_load() {
        let c = Config::parse("c.yaml", "staticPodSecurityLevel: baseline\napiGroupPodSecurityLevel: restricted\n")
            .unwrap();
        assert_eq!(c.static_pod_security_level, crate::pss::Level::Baseline);
        assert_eq!(c.api_group_pod_security_level, crate::pss::Level::Restricted);
        let d = Config::default();
        assert_eq!(
            (d.static_pod_security_level, d.api_group_pod_security_level),
            (crate::pss::Level::Privileged, crate::pss::Level::Baseline)
        );
        match Config::parse("c.yaml", "apiGroupPodSecurityLevel: strict\n") {
            Err(e) => assert_eq!(
                e.to_string(),
                "c.yaml: field apiGroupPodSecurityLevel: \"strict\" is invalid: expected privileged, baseline or restricted"
            ),
            Ok(_) => panic!("an unknown level loads"),
        }
    }

    #[test]
    fn invalid_values_name_the_field() {
        let field = |text: &str| match Config::parse("c.yaml", text) {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected an invalid field for {text:?}, got {other:?}"),
        };
        assert_eq!(field("syncFrequency: often"), "syncFrequency");
        assert_eq!(field("syncFrequency: 0"), "syncFrequency");
        assert_eq!(field("maxPods: -1"), "maxPods");
        assert_eq!(field("readOnlyPort: 70000"), "readOnlyPort");
        assert_eq!(field("staticPodPath: relative/dir"), "staticPodPath");
        assert_eq!(field("kind: Pod"), "kind");
        assert_eq!(field("systemReserved: {cpu: lots}"), "systemReserved.cpu");
        assert_eq!(field("cgroupDriver: other"), "cgroupDriver");
        assert_eq!(field("address: here"), "address");
        assert_eq!(
            field("shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s"),
            "shutdownGracePeriodCriticalPods"
        );
        assert_eq!(field("containerRuntimeEndpoint: tcp://x"), "containerRuntimeEndpoint");
        assert_eq!(field("staticPodSecurityLevel: Baseline"), "staticPodSecurityLevel");
        assert_eq!(field("apiGroupPodSecurityLevel: none"), "apiGroupPodSecurityLevel");
        assert!(matches!(Config::parse("c.yaml", "a: [b"), Err(ConfigError::Syntax { .. })));
    }
}

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
    #[error("{path}: larger than {limit} bytes (1 MiB); not a config file")]
    TooLarge { path: String, limit: u64 },
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

/// Why a duration string was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationError {
    /// Not a Go duration (`30s`, `1m30s`, `500ms`, `1.5h`, `0`).
    Syntax,
    /// A negative duration (`-5s`).
    Negative,
    /// More than `u64::MAX` nanoseconds (about 584 years).
    TooLarge,
}

/// Parse a Go duration (`1m30s`, `500ms`, `2h`, `1.5h`, `0`; units ns, us,
/// µs, ms, s, m, h; an optional sign), as `time.ParseDuration` does. Integer
/// arithmetic, saturating: no input overflows or panics; values beyond
/// `u64::MAX` nanoseconds are `TooLarge`, negative ones `Negative`.
pub fn parse_duration_checked(s: &str) -> Result<Duration, DurationError> {
    const LIMIT: u128 = u64::MAX as u128;
    let s = s.trim();
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(DurationError::Syntax);
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_digits = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_digits = "";
        if let Some(r) = rest.strip_prefix('.') {
            let n = r.bytes().take_while(u8::is_ascii_digit).count();
            frac_digits = &r[..n];
            rest = &r[n..];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(DurationError::Syntax);
        }
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let unit: u128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(DurationError::Syntax),
        };
        rest = &rest[unit_len..];
        let int = int_digits.bytes().fold(0u128, |a, d| a.saturating_mul(10).saturating_add(u128::from(d - b'0')));
        // at most 20 fraction digits count (beyond a nanosecond anyway)
        let (frac, scale) =
            frac_digits.bytes().take(20).fold((0u128, 1u128), |(f, sc), d| (f * 10 + u128::from(d - b'0'), sc * 10));
        total = total.saturating_add(int.saturating_mul(unit)).saturating_add(frac * unit / scale);
    }
    if total > LIMIT {
        return Err(DurationError::TooLarge);
    }
    if negative && total > 0 {
        return Err(DurationError::Negative);
    }
    Ok(Duration::new((total / 1_000_000_000) as u64, (total % 1_000_000_000) as u32))
}

/// Parse a Go duration (see [`parse_duration_checked`]); `None` if it is
/// not one, negative or too large.
pub fn parse_duration(s: &str) -> Option<Duration> {
    parse_duration_checked(s).ok()
}

/// A duration as Go prints it (`1h0m0s`, `20s`, `500ms`): for messages.
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    if d < Duration::from_secs(1) {
        let ns = d.as_nanos();
        return if ns.is_multiple_of(1_000_000) {
            format!("{}ms", ns / 1_000_000)
        } else if ns.is_multiple_of(1_000) {
            format!("{}us", ns / 1_000)
        } else {
            format!("{ns}ns")
        };
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let frac = match d.subsec_nanos() {
        0 => String::new(),
        n => format!(".{n:09}").trim_end_matches('0').to_string(),
    };
    match (h, m) {
        (0, 0) => format!("{s}{frac}s"),
        (0, _) => format!("{m}m{s}{frac}s"),
        _ => format!("{h}h{m}m{s}{frac}s"),
    }
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
        if let Some(v @ Value::String(s)) = self.map.get(field)
            && s.trim().is_empty()
        {
            return Err(self.bad(field, v, "expected an absolute path"));
        }
        match self.string(field)? {
            Some(s) if s.starts_with('/') => Ok(Some(s.into())),
            Some(s) => Err(self.bad(field, &Value::String(s), "expected an absolute path")),
            None => Ok(None),
        }
    }

    /// A path field where an empty string means the default (kubelet).
    fn path_or_default(&self, field: &str) -> Result<Option<PathBuf>, ConfigError> {
        match self.map.get(field) {
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            _ => self.path(field),
        }
    }

    /// A string field where an empty string means the default, as the
    /// kubelet defaults it (kubeadm writes `containerRuntimeEndpoint: ""`).
    fn string_or_default(&self, field: &str) -> Result<Option<String>, ConfigError> {
        match self.map.get(field) {
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            _ => self.string(field),
        }
    }

    /// A duration field, at most `max`. `0s` is returned as zero: callers
    /// where zero means the default drop it (see [`Fields::period`]).
    fn duration(&self, field: &str, max: Duration) -> Result<Option<Duration>, ConfigError> {
        match self.map.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v @ Value::String(s)) => match parse_duration_checked(s) {
                Ok(d) if d <= max => Ok(Some(d)),
                Ok(_) | Err(DurationError::TooLarge) => {
                    Err(self.bad(field, v, &format!("out of range: expected 0s to {}", format_duration(max))))
                }
                Err(DurationError::Negative) => Err(self.bad(field, v, "must not be negative")),
                Err(DurationError::Syntax) => {
                    Err(self.bad(field, v, "expected a duration such as 30s, 1m30s or 500ms"))
                }
            },
            Some(v) => Err(self.bad(field, v, "expected a duration string such as 30s")),
        }
    }

    /// A period or timeout: zero (`0s`, as kubeadm writes it) means the
    /// default, as the kubelet's defaulting does; at most `max`.
    fn period(&self, field: &str, max: Duration) -> Result<Option<Duration>, ConfigError> {
        Ok(self.duration(field, max)?.filter(|d| !d.is_zero()))
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
                "cpu" => {
                    cpu = quantity::cpu_millis(s).map_err(|e| self.bad(&f, q, &e.to_string()))?;
                    if cpu > MAX_RESERVED_CPU_MILLIS {
                        return Err(self.bad(&f, q, "out of range: expected at most 1M (cores)"));
                    }
                }
                "memory" => {
                    mem = quantity::bytes(s).map_err(|e| self.bad(&f, q, &e.to_string()))?;
                    if mem > MAX_RESERVED_MEMORY_BYTES {
                        return Err(self.bad(&f, q, "out of range: expected at most 1Ei"));
                    }
                }
                "ephemeral-storage" | "pid" => {
                    log::warn!("{}: {f} is accepted but not enforced by podwarden", self.path);
                }
                _ => return Err(self.bad(&f, q, "expected one of cpu, memory, ephemeral-storage, pid")),
            }
        }
        Ok((cpu, mem))
    }
}

/// A config file is read up to this size; a larger one is refused.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Bounds of `systemReserved`/`kubeReserved` (each; their sum cannot
/// overflow).
const MAX_RESERVED_CPU_MILLIS: i64 = 1_000_000_000;
const MAX_RESERVED_MEMORY_BYTES: i64 = 1 << 60;

/// Upper bounds of the duration fields: periods and timeouts up to a day,
/// housekeeping (which the health check and orphan clean-up depend on) up to
/// ten minutes.
const MAX_PERIOD: Duration = Duration::from_secs(24 * 3600);
const MAX_HOUSEKEEPING: Duration = Duration::from_secs(600);

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
        let read = |source| ConfigError::Read { path: p.clone(), source };
        // a FIFO would block the start until someone writes to it
        if std::os::unix::fs::FileTypeExt::is_fifo(&std::fs::metadata(path).map_err(read)?.file_type()) {
            return Err(read(std::io::Error::other("a FIFO, not a config file; not read")));
        }
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(std::fs::File::open(path).map_err(read)?, MAX_CONFIG_BYTES + 1),
            &mut bytes,
        )
        .map_err(read)?;
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge { path: p, limit: MAX_CONFIG_BYTES });
        }
        let text = String::from_utf8(bytes).map_err(|e| ConfigError::Syntax {
            path: p.clone(),
            message: format!("not UTF-8 (invalid byte at offset {})", e.utf8_error().valid_up_to()),
        })?;
        Self::parse(&p, &text)
    }

    /// Parse and validate config text; `path` names the input in errors.
    pub fn parse(path: &str, text: &str) -> Result<Self, ConfigError> {
        // the manifests' bounded parser: alias expansion and nesting are
        // limited before any value is built
        let syntax = |message: String| ConfigError::Syntax { path: path.into(), message };
        let mut docs = crate::model::yaml::parse_bounded(text).map_err(|e| syntax(e.to_string()))?;
        docs.retain(|d| !d.is_null());
        let v = match docs.len() {
            0 => Value::Object(Default::default()),
            1 => docs.pop().expect("one document"),
            n => return Err(syntax(format!("holds {n} documents; a config is one KubeletConfiguration"))),
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
        if let Some(e) = f.string_or_default("containerRuntimeEndpoint")? {
            if !(e.starts_with("unix://") || e.starts_with('/') || e == "fake://") {
                return Err(f.bad("containerRuntimeEndpoint", &Value::String(e), "expected unix:///path/to/socket"));
            }
            c.container_runtime_endpoint = e;
        }
        // Zero periods and timeouts mean the default, as in the kubelet
        // (kubeadm writes `0s` for every duration it does not set).
        if let Some(d) = f.period("runtimeRequestTimeout", MAX_PERIOD)? {
            c.runtime_request_timeout = d;
        }
        if let Some(d) = f.period("syncFrequency", MAX_PERIOD)? {
            c.sync_frequency = d;
        }
        if let Some(d) = f.period("fileCheckFrequency", MAX_PERIOD)? {
            c.file_check_frequency = d;
        }
        if let Some(d) = f.period("housekeepingInterval", MAX_HOUSEKEEPING)? {
            c.housekeeping_interval = d;
        }
        // zero here means "off", as in the kubelet
        if let Some(d) = f.duration("shutdownGracePeriod", MAX_PERIOD)? {
            c.shutdown_grace_period = d;
        }
        if let Some(d) = f.duration("shutdownGracePeriodCriticalPods", MAX_PERIOD)? {
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
                    (Some(p), Some(s))
                        if i32::try_from(p).is_ok() && (0..=MAX_PERIOD.as_secs() as i64).contains(&s) =>
                    {
                        c.shutdown_grace_period_by_pod_priority
                            .push(PriorityGrace { priority: p as i32, shutdown_grace_period_seconds: s })
                    }
                    _ => {
                        return Err(f.bad(
                            &fe,
                            e,
                            "expected {priority: <int32>, shutdownGracePeriodSeconds: <0 to 86400>}",
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
        if let Some(a) = f.string_or_default("address")? {
            if a.parse::<std::net::IpAddr>().is_err() {
                return Err(f.bad("address", &Value::String(a), "expected an IP address"));
            }
            c.address = a;
        }
        if let Some(p) = f.int("readOnlyPort", 0, 65535)? {
            c.read_only_port = p as u16;
        }
        // 0 means the default (110), as in the kubelet
        if let Some(n) = f.int("maxPods", 0, 10_000)?.filter(|n| *n > 0) {
            c.max_pods = n as usize;
        }
        let (sc, sm) = f.reserved("systemReserved")?;
        let (kc, km) = f.reserved("kubeReserved")?;
        c.reserved_cpu_millis = sc + kc;
        c.reserved_memory_bytes = sm + km;
        if let Some(d) = f.string_or_default("cgroupDriver")? {
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
        if let Some(p) = f.path_or_default("podLogsDir")? {
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
        assert_eq!(parse_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration(".5s"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h0m0s"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("3\u{b5}s"), Some(Duration::from_micros(3)));
        assert_eq!(parse_duration("7ns"), Some(Duration::from_nanos(7)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
        assert_eq!(parse_duration("-0s"), Some(Duration::ZERO));
        assert_eq!(parse_duration("+5s"), Some(Duration::from_secs(5)));
        for bad in ["10", "1x", "", "-", "s", ".s", "1..5s", "5parsecs", "1s2", "1 s"] {
            assert_eq!(parse_duration_checked(bad), Err(DurationError::Syntax), "{bad:?}");
        }
        assert_eq!(parse_duration_checked("-5s"), Err(DurationError::Negative));
        assert_eq!(parse_duration_checked("99999999999999999999h"), Err(DurationError::TooLarge));
        assert_eq!(parse_duration_checked("18446744073709551615ns"), Ok(Duration::from_nanos(u64::MAX)));
        assert_eq!(parse_duration_checked("18446744073709551616ns"), Err(DurationError::TooLarge));
        assert_eq!(parse_duration_checked(&"9".repeat(5000)), Err(DurationError::Syntax));
        assert_eq!(parse_duration_checked(&format!("{}s", "9".repeat(5000))), Err(DurationError::TooLarge));
        assert_eq!(format_duration(Duration::from_secs(86400)), "24h0m0s");
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_duration(Duration::from_millis(20)), "20ms");
    }

    mod prop {
        use super::super::*;
        use proptest::prelude::*;

        const UNITS: &[(&str, u64)] = &[
            ("ns", 1),
            ("us", 1_000),
            ("ms", 1_000_000),
            ("s", 1_000_000_000),
            ("m", 60_000_000_000),
            ("h", 3_600_000_000_000),
        ];

        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

            /// No input panics or overflows; an accepted value is never
            /// negative and fits the limit.
            #[test]
            fn any_string_parses_or_is_refused(s in ".{0,64}") {
                let _ = parse_duration_checked(&s);
            }

            #[test]
            fn any_duration_like_string_parses_or_is_refused(s in "[-+]?([0-9]{0,25}(\\.[0-9]{0,25})?(ns|us|ms|s|m|h|x|)){0,6}") {
                if let Ok(d) = parse_duration_checked(&s) {
                    prop_assert!(d.as_nanos() <= u64::MAX as u128);
                }
            }

            /// Sums of whole numbers of units parse to exactly their value.
            #[test]
            fn sums_of_units_are_exact(parts in proptest::collection::vec((0u64..1_000_000, 0usize..6), 1..5)) {
                let text: String = parts.iter().map(|(n, u)| format!("{n}{}", UNITS[*u].0)).collect();
                let want: u128 = parts.iter().map(|(n, u)| u128::from(*n) * u128::from(UNITS[*u].1)).sum();
                prop_assert_eq!(parse_duration_checked(&text).map(|d| d.as_nanos()), Ok(want));
            }

            /// What format_duration prints parses back to the same value.
            #[test]
            fn formatted_durations_parse_back(ns in 0u64..=u64::MAX) {
                let d = Duration::from_nanos(ns);
                prop_assert_eq!(parse_duration_checked(&format_duration(d)), Ok(d));
            }

            /// Any duration field of the config: accepted within range, else a
            /// clear error naming the field; never a panic.
            #[test]
            fn config_duration_fields_never_panic(s in "[-+]?[0-9]{0,30}(\\.[0-9]{0,5})?(ns|us|ms|s|m|h)") {
                for field in ["syncFrequency", "fileCheckFrequency", "runtimeRequestTimeout", "housekeepingInterval", "shutdownGracePeriod"] {
                    match Config::parse("c.yaml", &format!("{field}: \"{s}\"\n")) {
                        Ok(_) => {}
                        Err(ConfigError::Invalid { field: f, .. }) => prop_assert_eq!(f, field),
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                }
            }
        }
    }

    #[test]
    fn a_kubeadm_generated_config_loads_with_the_kubelet_defaults() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kubeadm-kubelet-config.yaml");
        let c = Config::load(std::path::Path::new(path)).expect("kubeadm's config loads");
        let d = Config::default();
        assert_eq!(c.static_pod_path, PathBuf::from("/etc/kubernetes/manifests"));
        assert_eq!(c.cgroup_driver, "systemd");
        // every `0s` is the default, as the kubelet's defaulting makes it
        assert_eq!(c.sync_frequency, Duration::from_secs(60));
        assert_eq!(c.file_check_frequency, Duration::from_secs(20));
        assert_eq!(c.runtime_request_timeout, Duration::from_secs(120));
        assert_eq!(c.housekeeping_interval, d.housekeeping_interval);
        // `containerRuntimeEndpoint: ""` is the default endpoint
        assert_eq!(c.container_runtime_endpoint, "unix:///run/containerd/containerd.sock");
        // shutdownGracePeriod 0s: graceful shutdown off, as in the kubelet
        assert_eq!(c.shutdown_grace_period, Duration::ZERO);
        assert_eq!(c.shutdown_grace_period_critical_pods, Duration::ZERO);
        assert_eq!(c.max_pods, 110);
        assert_eq!(c, Config { static_pod_path: c.static_pod_path.clone(), ..d });
    }

    #[test]
    fn zero_and_empty_mean_the_default_where_the_kubelet_says_so() {
        let c = Config::parse(
            "c.yaml",
            "syncFrequency: 0s\nfileCheckFrequency: \"0\"\nruntimeRequestTimeout: 0ms\nhousekeepingInterval: 0h\nmaxPods: 0\naddress: \"\"\ncgroupDriver: \"\"\npodLogsDir: \"\"\n",
        )
        .unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn out_of_range_values_name_field_value_and_range() {
        let msg = |text: &str| Config::parse("c.yaml", text).unwrap_err().to_string();
        assert_eq!(
            msg("syncFrequency: 99999999999999999999h"),
            "c.yaml: field syncFrequency: \"99999999999999999999h\" is invalid: out of range: expected 0s to 24h0m0s"
        );
        assert_eq!(
            msg("fileCheckFrequency: 2562047h"),
            "c.yaml: field fileCheckFrequency: \"2562047h\" is invalid: out of range: expected 0s to 24h0m0s"
        );
        assert_eq!(
            msg("housekeepingInterval: 11m"),
            "c.yaml: field housekeepingInterval: \"11m\" is invalid: out of range: expected 0s to 10m0s"
        );
        assert_eq!(
            msg("runtimeRequestTimeout: -5s"),
            "c.yaml: field runtimeRequestTimeout: \"-5s\" is invalid: must not be negative"
        );
        assert_eq!(
            msg("systemReserved: {memory: 2Ei}"),
            "c.yaml: field systemReserved.memory: \"2Ei\" is invalid: out of range: expected at most 1Ei"
        );
        assert_eq!(
            msg("kubeReserved: {cpu: \"1e300\"}"),
            "c.yaml: field kubeReserved.cpu: \"1e300\" is invalid: out of range: expected at most 1M (cores)"
        );
        assert_eq!(
            msg("shutdownGracePeriodByPodPriority: [{priority: 1, shutdownGracePeriodSeconds: 86401}]"),
            "c.yaml: field shutdownGracePeriodByPodPriority[0]: {\"priority\":1,\"shutdownGracePeriodSeconds\":86401} is invalid: expected {priority: <int32>, shutdownGracePeriodSeconds: <0 to 86400>}"
        );
    }

    #[test]
    fn a_config_over_1_mib_is_refused_unread() {
        let path = std::env::temp_dir().join(format!("pw-big-config-{}.yaml", std::process::id()));
        std::fs::write(&path, format!("# {}\n", "x".repeat(1 << 20))).unwrap();
        let e = Config::load(&path).unwrap_err().to_string();
        let _ = std::fs::remove_file(&path);
        assert!(e.ends_with("larger than 1048576 bytes (1 MiB); not a config file"), "{e}");
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
        assert_eq!(field("syncFrequency: 0"), "syncFrequency"); // a number, not a duration string
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

//! The agent's configuration: YAML, with the kubelet's
//! `KubeletConfiguration` (kubelet.config.k8s.io/v1beta1) names and formats
//! for every field that means the same. Unknown fields get one warning each;
//! invalid values are rejected naming the field, the value and what is
//! allowed.
//!
//! Pure: parsing reads nothing but the text and looks nothing up. What the
//! config leaves to the host (the node name when `nodeName` is not set,
//! `apiGroup`'s gid) is resolved by the daemon at start. May use `model`
//! (quantities, sysctl patterns, the Pod Security levels, the bounded YAML
//! parser) only.
//!
//! [`Config`] is deserialized by serde in two passes:
//! - the field deserializers (`de`) check what each value is: its type and
//!   syntax (a duration, a quantity, an absolute path, a level), and for
//!   integers the bounds their message names;
//! - `Config::validate` (`validate`) checks what the values mean: ranges,
//!   the kubelet's "zero or empty means the default", combinations of
//!   fields.
//!
//! This file holds the struct, its defaults and reading a file; Go
//! durations are in `duration`, eviction signals and thresholds in
//! `eviction`.
//!
//! Adding a field: the struct field (with its doc and, unless a plain
//! camelCase name and type do, a `deserialize_with`), its default in
//! [`Config::default`] and in `packaging/config.yaml` (a test compares the
//! two), and its checks in `Config::validate` if it has any.

pub mod api_authz;
mod de;
mod duration;
mod eviction;
mod validate;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use thiserror::Error;

use crate::model::pss::Level;
pub use duration::{DurationError, format_duration, parse_duration, parse_duration_checked};
pub use eviction::{Amount, AmountError, Signal, Threshold, ThresholdError, ThresholdReason};

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

/// `systemReserved` or `kubeReserved`: what admission leaves to the system.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reserved {
    /// `cpu`, in millicores.
    pub cpu_millis: i64,
    /// `memory`, in bytes.
    pub memory_bytes: i64,
    /// The keys given that podwarden accepts and does not enforce
    /// (`ephemeral-storage`, `pid`), in order: each gets a warning.
    pub not_enforced: Vec<String>,
}

/// The configuration. Each field's YAML name is its camelCase name; its
/// default is in [`Config::default`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Config {
    /// `KubeletConfiguration`, the one kind a config may be.
    #[serde(deserialize_with = "de::string")]
    pub kind: String,
    /// `kubelet.config.k8s.io/v1beta1`, the one version.
    #[serde(deserialize_with = "de::string")]
    pub api_version: String,
    /// Static pod manifests: every `*.yaml`, `*.yml`, `*.json` here.
    #[serde(deserialize_with = "de::path")]
    pub static_pod_path: PathBuf,
    /// The CRI runtime: `unix:///path`, `/path`, or `fake://` (simulated).
    /// Empty means the default (kubeadm writes `""`).
    #[serde(deserialize_with = "de::string_or_empty")]
    pub container_runtime_endpoint: String,
    /// The longest a runtime call may take; zero means the default.
    #[serde(deserialize_with = "de::duration")]
    pub runtime_request_timeout: Duration,
    /// How often each pod is synced; zero means the default.
    #[serde(deserialize_with = "de::duration")]
    pub sync_frequency: Duration,
    /// Follow the runtime's container events (the CRI's
    /// `GetContainerEvents`, or containerd's event service) so that a
    /// container's start or exit is acted on at once; false: the relist
    /// (every second) alone sees them, as the kubelet without its
    /// `EventedPLEG` feature (podwarden-only; default true).
    #[serde(deserialize_with = "de::boolean")]
    pub runtime_events: bool,
    /// How often `staticPodPath` is rescanned; zero means the default.
    #[serde(deserialize_with = "de::duration")]
    pub file_check_frequency: Duration,
    /// How often housekeeping runs (podwarden-only); zero means the default.
    #[serde(deserialize_with = "de::duration")]
    pub housekeeping_interval: Duration,
    /// Graceful node shutdown's whole window; zero turns it off.
    #[serde(deserialize_with = "de::duration")]
    pub shutdown_grace_period: Duration,
    /// The part of `shutdownGracePeriod` kept for critical pods.
    #[serde(deserialize_with = "de::duration")]
    pub shutdown_grace_period_critical_pods: Duration,
    /// Grace per priority group, instead of the two periods above.
    #[serde(deserialize_with = "de::priority_graces")]
    pub shutdown_grace_period_by_pod_priority: Vec<PriorityGrace>,
    /// The IP address of the read-only HTTP endpoint and of the Kubernetes
    /// API (`port`); empty means the default.
    #[serde(deserialize_with = "de::string_or_empty")]
    pub address: String,
    /// The Kubernetes API's HTTPS port (the kubelet's secure port); 0
    /// turns it off.
    #[serde(deserialize_with = "de::int::<_, _, 0, 65535>")]
    pub port: u16,
    /// Who may do what through the Kubernetes API (podwarden-only).
    pub api_authorization: api_authz::ApiAuthorization,
    /// The read-only HTTP endpoint's port; 0 turns it off.
    #[serde(deserialize_with = "de::int::<_, _, 0, 65535>")]
    pub read_only_port: u16,
    /// Pods beyond this are rejected; 0 means the default.
    #[serde(deserialize_with = "de::int::<_, _, 0, 10_000>")]
    pub max_pods: usize,
    /// Reserved for the system (cpu, memory).
    pub system_reserved: Reserved,
    /// Reserved for the kubelet (cpu, memory); podwarden adds it to
    /// `systemReserved`.
    pub kube_reserved: Reserved,
    /// Reserved CPU in millicores and memory in bytes (system + kube):
    /// computed by `Config::validate`, not a field of the file.
    #[serde(skip)]
    pub reserved_cpu_millis: i64,
    #[serde(skip)]
    pub reserved_memory_bytes: i64,
    /// Containers without a seccomp profile run with the runtime's default
    /// profile instead of none.
    #[serde(deserialize_with = "de::boolean")]
    pub seccomp_default: bool,
    /// Sysctls (or `prefix*` patterns) pods may set beyond the safe ones;
    /// each must be namespaced.
    #[serde(deserialize_with = "de::sysctl_patterns")]
    pub allowed_unsafe_sysctls: Vec<String>,
    /// Pods in the kubelet's cgroup hierarchy (`kubepods`, QoS cgroups, a
    /// cgroup per pod with its limits).
    #[serde(rename = "cgroupsPerQOS", deserialize_with = "de::boolean")]
    pub cgroups_per_qos: bool,
    /// `pods` (limit `kubepods` to the allocatable) or nothing.
    #[serde(deserialize_with = "de::enforce_node_allocatable")]
    pub enforce_node_allocatable: Vec<String>,
    /// The most processes (threads included) in any pod: every pod
    /// cgroup's `pids.max`; -1 or 0 is unlimited (the kubelet's
    /// `podPidsLimit`).
    #[serde(deserialize_with = "de::int::<_, _, -1, 4_194_304>")]
    pub pod_pids_limit: i64,
    /// `systemd` or `cgroupfs`; must be containerd's. Empty (the default):
    /// containerd's (its runc runtime's `SystemdCgroup`, read through the
    /// CRI `Status`), `cgroupfs` when it does not say, as the kubelet
    /// takes the runtime's driver since 1.28 (`KubeletCgroupDriverFromCRI`).
    #[serde(deserialize_with = "de::string_or_empty")]
    pub cgroup_driver: String,
    /// Pod data and the shutdown state file (podwarden-only).
    #[serde(deserialize_with = "de::path")]
    pub root_dir: PathBuf,
    /// The local API's socket (podwarden-only).
    #[serde(deserialize_with = "de::path")]
    pub api_socket: PathBuf,
    /// Cluster mode: the node's kubeconfig (`run --kubeconfig`, as the
    /// kubelet's flag; not a config field). `None`: standalone.
    #[serde(skip)]
    pub kubeconfig: Option<PathBuf>,
    /// Cluster mode: the bootstrap kubeconfig (`run --bootstrap-kubeconfig`).
    #[serde(skip)]
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// The node's name; `None`: the host name, which the daemon reads at
    /// start (`daemon::node_name`).
    #[serde(deserialize_with = "de::some_string")]
    pub node_name: Option<String>,
    /// Container logs, in the kubelet's layout; empty means the default.
    #[serde(deserialize_with = "de::path_or_empty")]
    pub pod_logs_dir: PathBuf,
    /// A container's live log is rotated once it is this large (bytes; the
    /// YAML holds a quantity such as `10Mi`).
    #[serde(deserialize_with = "de::byte_quantity")]
    pub container_log_max_size: u64,
    /// The most log files a container keeps: the live one and the rotated
    /// ones, compressed but for the newest.
    #[serde(deserialize_with = "de::int::<_, _, 0, 1000>")]
    pub container_log_max_files: u32,
    /// How often every running container's log is checked (and cleaned
    /// up) whether or not it was written.
    #[serde(deserialize_with = "de::duration")]
    pub container_log_monitor_interval: Duration,
    /// Image garbage collection starts when the image filesystem is this
    /// full (percent).
    #[serde(rename = "imageGCHighThresholdPercent", deserialize_with = "de::int::<_, _, 0, 100>")]
    pub image_gc_high_threshold_percent: u8,
    /// ... and frees until it is this full.
    #[serde(rename = "imageGCLowThresholdPercent", deserialize_with = "de::int::<_, _, 0, 100>")]
    pub image_gc_low_threshold_percent: u8,
    /// An image seen for less than this is not collected.
    #[serde(rename = "imageMinimumGCAge", deserialize_with = "de::duration")]
    pub image_minimum_gc_age: Duration,
    /// An image unused for longer than this is collected; zero: never.
    #[serde(rename = "imageMaximumGCAge", deserialize_with = "de::duration")]
    pub image_maximum_gc_age: Duration,
    /// How often images are collected (podwarden-only; the kubelet's fixed
    /// period).
    #[serde(rename = "imageGCPeriod", deserialize_with = "de::duration")]
    pub image_gc_period: Duration,
    /// Images are pulled one at a time.
    #[serde(deserialize_with = "de::boolean")]
    pub serialize_image_pulls: bool,
    /// With `serializeImagePulls: false`, at most this many pulls at once;
    /// 0 (unset): any number.
    #[serde(deserialize_with = "de::int::<_, _, 0, 1000>")]
    pub max_parallel_image_pulls: u32,
    /// A pull whose downloads make no progress for this long is cancelled
    /// (the kubelet's `--image-pull-progress-deadline`, containerd 1.7's
    /// `image_pull_progress_timeout`); 0: never. A pull has no deadline
    /// otherwise.
    #[serde(deserialize_with = "de::duration")]
    pub image_pull_progress_deadline: Duration,
    /// Registry credentials from plugins: a `CredentialProviderConfig`
    /// file (or a directory of them); empty: no plugins. The docker config
    /// keyring (`<rootDir>/config.json`, ...) is read in any case.
    #[serde(deserialize_with = "de::path_or_empty")]
    pub image_credential_provider_config: PathBuf,
    /// Where the credential provider plugins' executables are.
    #[serde(deserialize_with = "de::path_or_empty")]
    pub image_credential_provider_bin_dir: PathBuf,
    /// Node-pressure eviction: signal (`memory.available`,
    /// `nodefs.available`, `nodefs.inodesFree`, `imagefs.available`,
    /// `imagefs.inodesFree`, `pid.available`) to threshold (`100Mi`,
    /// `10%`); met, pods are evicted at once.
    #[serde(deserialize_with = "de::string_map")]
    pub eviction_hard: BTreeMap<String, String>,
    /// ... met for the signal's `evictionSoftGracePeriod`.
    #[serde(deserialize_with = "de::string_map")]
    pub eviction_soft: BTreeMap<String, String>,
    #[serde(deserialize_with = "de::string_map")]
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// What an eviction frees beyond the threshold, per signal.
    #[serde(deserialize_with = "de::string_map")]
    pub eviction_minimum_reclaim: BTreeMap<String, String>,
    /// The longest grace period of a soft eviction (0: the pod's own).
    #[serde(deserialize_with = "de::int::<_, _, 0, 86400>")]
    pub eviction_max_pod_grace_period: i64,
    /// A pressure condition stays true this long after its threshold is
    /// no longer met.
    #[serde(deserialize_with = "de::duration")]
    pub eviction_pressure_transition_period: Duration,
    /// How many containers' logs are rotated at once.
    #[serde(deserialize_with = "de::int::<_, _, 0, 64>")]
    pub container_log_max_workers: u32,
    /// The resolver config that pods with `dnsPolicy: Default` inherit (and
    /// `ClusterFirst` ones: this node has no cluster DNS); empty means the
    /// default.
    #[serde(deserialize_with = "de::path_or_empty")]
    pub resolv_conf: PathBuf,
    /// `priorityClassName` to priority for pods that name a class.
    #[serde(deserialize_with = "de::priority_classes")]
    pub priority_classes: BTreeMap<String, i32>,
    /// Containers may run privileged (podwarden-only; default false).
    #[serde(deserialize_with = "de::boolean")]
    pub allow_privileged: bool,
    /// Where podwarden writes its logind drop-in when `shutdownGracePeriod`
    /// exceeds logind's `InhibitDelayMaxSec` (podwarden-only).
    #[serde(deserialize_with = "de::path")]
    pub logind_drop_in_dir: PathBuf,
    /// The group whose members may use the local API besides root
    /// (podwarden-only; default none). Its gid is looked up at start by the
    /// daemon, which refuses a group that does not exist.
    #[serde(deserialize_with = "de::some_string")]
    pub api_group: Option<String>,
    /// Serve env values on the read-only `/pods` (podwarden-only; default
    /// false: they are redacted, unlike the kubelet's).
    #[serde(deserialize_with = "de::boolean")]
    pub read_only_port_shows_env: bool,
    /// Pod Security Standards level for manifests in `staticPodPath` (root's
    /// files) and pods applied through the API by root (podwarden-only;
    /// default privileged).
    #[serde(deserialize_with = "de::level")]
    pub static_pod_security_level: Level,
    /// Pod Security Standards level for pods applied through the API by a
    /// non-root member of `apiGroup` (podwarden-only; default baseline).
    #[serde(deserialize_with = "de::level")]
    pub api_group_pod_security_level: Level,
}

impl Default for Config {
    /// The defaults: the one place in the code they are written.
    /// `packaging/config.yaml` shows them (a test compares the two).
    fn default() -> Self {
        Config {
            kind: "KubeletConfiguration".into(),
            api_version: "kubelet.config.k8s.io/v1beta1".into(),
            static_pod_path: "/etc/podwarden/manifests".into(),
            container_runtime_endpoint: "unix:///run/containerd/containerd.sock".into(),
            runtime_request_timeout: Duration::from_secs(120),
            sync_frequency: Duration::from_secs(60),
            runtime_events: true,
            file_check_frequency: Duration::from_secs(20),
            housekeeping_interval: Duration::from_secs(2),
            shutdown_grace_period: Duration::ZERO,
            shutdown_grace_period_critical_pods: Duration::ZERO,
            shutdown_grace_period_by_pod_priority: Vec::new(),
            address: "127.0.0.1".into(),
            read_only_port: 10255,
            port: 10250,
            api_authorization: api_authz::ApiAuthorization::default(),
            max_pods: 110,
            system_reserved: Reserved::default(),
            kube_reserved: Reserved::default(),
            reserved_cpu_millis: 0,
            reserved_memory_bytes: 0,
            cgroup_driver: String::new(),
            pod_pids_limit: -1,
            cgroups_per_qos: true,
            enforce_node_allocatable: vec!["pods".into()],
            seccomp_default: false,
            allowed_unsafe_sysctls: Vec::new(),
            root_dir: "/var/lib/podwarden".into(),
            api_socket: "/run/podwarden/podwarden.sock".into(),
            kubeconfig: None,
            bootstrap_kubeconfig: None,
            node_name: None,
            pod_logs_dir: "/var/log/pods".into(),
            container_log_max_size: 10 << 20,
            container_log_max_files: 5,
            container_log_monitor_interval: Duration::from_secs(10),
            container_log_max_workers: 1,
            eviction_hard: [
                ("imagefs.available", "15%"),
                ("memory.available", "100Mi"),
                ("nodefs.available", "10%"),
                ("nodefs.inodesFree", "5%"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            eviction_soft: BTreeMap::new(),
            eviction_soft_grace_period: BTreeMap::new(),
            eviction_minimum_reclaim: BTreeMap::new(),
            eviction_max_pod_grace_period: 0,
            eviction_pressure_transition_period: Duration::from_secs(300),
            serialize_image_pulls: true,
            image_pull_progress_deadline: Duration::from_secs(60),
            image_credential_provider_config: PathBuf::new(),
            image_credential_provider_bin_dir: PathBuf::new(),
            max_parallel_image_pulls: 0,
            image_gc_high_threshold_percent: 85,
            image_gc_low_threshold_percent: 80,
            image_minimum_gc_age: Duration::from_secs(120),
            image_maximum_gc_age: Duration::ZERO,
            image_gc_period: Duration::from_secs(300),
            resolv_conf: "/etc/resolv.conf".into(),
            priority_classes: BTreeMap::new(),
            allow_privileged: false,
            logind_drop_in_dir: "/etc/systemd/logind.conf.d".into(),
            api_group: None,
            read_only_port_shows_env: false,
            static_pod_security_level: Level::Privileged,
            api_group_pod_security_level: Level::Baseline,
        }
    }
}

/// A config file is read up to this size; a larger one is refused.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Upper bound of the periods and timeouts: a day (`housekeepingInterval`
/// has its own, in `validate`).
const MAX_PERIOD: Duration = Duration::from_secs(24 * 3600);

/// What a `shutdownGracePeriodByPodPriority` entry must be.
const PRIORITY_GRACE_ALLOWED: &str = "expected {priority: <int32>, shutdownGracePeriodSeconds: <0 to 86400>}";

/// One step of a field's path: a map key or a list index.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// A field's path as errors name it: `systemReserved.cpu`,
/// `shutdownGracePeriodByPodPriority[0]`.
struct FieldPath<'a>(&'a [Seg]);

impl fmt::Display for FieldPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Seg::Key(k) if i == 0 => f.write_str(k)?,
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// The value at `at` in the file as parsed (`null` if there is none).
fn value_at<'a>(raw: &'a Value, at: &[Seg]) -> &'a Value {
    at.iter()
        .try_fold(raw, |v, s| match s {
            Seg::Key(k) => v.get(k),
            Seg::Index(n) => v.get(n),
        })
        .unwrap_or(&Value::Null)
}

/// The YAML names of `Config`'s fields, as serde's derive declares them
/// (`deserialize_struct`'s field list): the known fields, for the
/// unknown-field warnings.
fn field_names() -> &'static [&'static str] {
    use serde::de::{Deserializer, Error as _, Visitor};
    type E = serde::de::value::Error;
    struct Names<'a>(&'a mut &'static [&'static str]);
    impl<'de> Deserializer<'de> for Names<'_> {
        type Error = E;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, E> {
            Err(E::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, E> {
            *self.0 = fields;
            Err(E::custom("field names taken"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut names: &'static [&'static str] = &[];
    let _ = Config::deserialize(Names(&mut names));
    names
}

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
    /// Warnings (unknown fields, values accepted and not enforced) are
    /// logged.
    pub fn parse(path: &str, text: &str) -> Result<Self, ConfigError> {
        let mut warnings = Vec::new();
        let config = Self::parse_with_warnings(path, text, &mut warnings);
        for w in warnings {
            log::warn!("{w}");
        }
        config
    }

    /// [`Config::parse`], handing the warnings to the caller (in the order
    /// found; those found before an error too).
    pub fn parse_with_warnings(path: &str, text: &str, warnings: &mut Vec<String>) -> Result<Self, ConfigError> {
        // the manifests' bounded parser: alias expansion and nesting are
        // limited before any value is built
        let syntax = |message: String| ConfigError::Syntax { path: path.into(), message };
        let mut docs = crate::model::bounded_yaml::parse_bounded(text).map_err(|e| syntax(e.to_string()))?;
        docs.retain(|d| !d.is_null());
        let v = match docs.len() {
            0 => Value::Object(Default::default()),
            1 => docs.pop().expect("one document"),
            n => return Err(syntax(format!("holds {n} documents; a config is one KubeletConfiguration"))),
        };
        let Value::Object(mut map) = v else {
            return Err(syntax("expected a mapping of fields".into()));
        };
        let known = field_names();
        for k in map.keys().filter(|k| !known.contains(&k.as_str())) {
            warnings.push(format!("{path}: unknown field {k:?} ignored"));
        }
        // `field: null` (or `field:`) is not set, as an absent field
        map.retain(|_, v| !v.is_null());
        let raw = Value::Object(map);
        let invalid = |at: &[Seg], allowed: String| ConfigError::Invalid {
            path: path.into(),
            field: FieldPath(at).to_string(),
            value: value_at(&raw, at).to_string(),
            allowed,
        };
        let config = serde_path_to_error::deserialize::<_, Config>(&raw).map_err(|e| {
            let at: Vec<Seg> = e
                .path()
                .iter()
                .filter_map(|s| match s {
                    serde_path_to_error::Segment::Map { key } => Some(Seg::Key(key.clone())),
                    serde_path_to_error::Segment::Seq { index } => Some(Seg::Index(*index)),
                    _ => None,
                })
                .collect();
            invalid(&at, e.into_inner().to_string())
        })?;
        let config = config.validate().map_err(|r| invalid(&r.at, r.allowed))?;
        for (field, r) in [("systemReserved", &config.system_reserved), ("kubeReserved", &config.kube_reserved)] {
            for k in &r.not_enforced {
                warnings.push(format!("{path}: {field}.{k} is accepted but not enforced by podwarden"));
            }
        }
        Ok(config)
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
        // every field is shown with its default value; the three without
        // one to show are shown commented out
        let commented = ["nodeName", "apiGroup", "shutdownGracePeriodByPodPriority"];
        for field in field_names() {
            let line = if commented.contains(field) { format!("\n# {field}:") } else { format!("\n{field}:") };
            assert!(text.contains(&line), "packaging/config.yaml does not document {field}");
        }
    }

    use super::*;

    mod prop {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

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
        // kubeadm points pods at systemd-resolved's upstream servers
        assert_eq!(c.resolv_conf, PathBuf::from("/run/systemd/resolve/resolv.conf"));
        assert_eq!(
            c,
            Config {
                static_pod_path: c.static_pod_path.clone(),
                resolv_conf: c.resolv_conf.clone(),
                cgroup_driver: "systemd".into(),
                ..d
            }
        );
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
        assert_eq!(c.static_pod_security_level, crate::model::pss::Level::Baseline);
        assert_eq!(c.api_group_pod_security_level, crate::model::pss::Level::Restricted);
        let d = Config::default();
        assert_eq!(
            (d.static_pod_security_level, d.api_group_pod_security_level),
            (crate::model::pss::Level::Privileged, crate::model::pss::Level::Baseline)
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
    fn container_log_fields_load_and_are_checked_as_the_kubelet_does() {
        let c = Config::parse("c.yaml", "containerLogMaxSize: 64Ki\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\ncontainerLogMaxWorkers: 2\n").unwrap();
        assert_eq!(
            (
                c.container_log_max_size,
                c.container_log_max_files,
                c.container_log_monitor_interval,
                c.container_log_max_workers
            ),
            (65536, 3, Duration::from_secs(3), 2)
        );
        let msg = |text: &str| Config::parse("c.yaml", text).unwrap_err().to_string();
        assert_eq!(
            msg("containerLogMaxFiles: 1"),
            "c.yaml: field containerLogMaxFiles: 1 is invalid: must be greater than 1"
        );
        assert_eq!(
            msg("containerLogMonitorInterval: 2s"),
            "c.yaml: field containerLogMonitorInterval: \"2s\" is invalid: must be a duration of at least 3s"
        );
        assert_eq!(
            msg("containerLogMaxWorkers: 0"),
            "c.yaml: field containerLogMaxWorkers: 0 is invalid: must be at least 1"
        );
        assert_eq!(
            msg("containerLogMaxSize: 10"),
            "c.yaml: field containerLogMaxSize: 10 is invalid: expected at least 1Ki"
        );
        assert!(
            msg("containerLogMaxSize: lots").starts_with("c.yaml: field containerLogMaxSize: \"lots\" is invalid: ")
        );
        assert!(msg("containerLogMaxSize: 2Ti").ends_with("expected a quantity from 0 to 1Ti, such as 10Mi"));
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

    /// Every refusal's whole message, as the hand-written parser before the
    /// serde config gave it (checked against both).
    #[test]
    fn every_refusal_keeps_its_message() {
        let cases: &[(&str, &str)] = &[
            ("kind: \"  \"", "field kind: \"  \" is invalid: expected a non-empty string"),
            ("apiVersion: v1", "field apiVersion: \"v1\" is invalid: expected kubelet.config.k8s.io/v1beta1"),
            ("staticPodPath: 5", "field staticPodPath: 5 is invalid: expected a non-empty string"),
            ("podLogsDir: relative", "field podLogsDir: \"relative\" is invalid: expected an absolute path"),
            ("podLogsDir: \" \"", "field podLogsDir: \" \" is invalid: expected an absolute path"),
            ("logindDropInDir: \"\"", "field logindDropInDir: \"\" is invalid: expected an absolute path"),
            ("apiSocket: {a: 1}", "field apiSocket: {\"a\":1} is invalid: expected a non-empty string"),
            (
                "containerRuntimeEndpoint: \" \"",
                "field containerRuntimeEndpoint: \" \" is invalid: expected a non-empty string",
            ),
            (
                "containerRuntimeEndpoint: tcp://x",
                "field containerRuntimeEndpoint: \"tcp://x\" is invalid: expected unix:///path/to/socket",
            ),
            ("address: [1]", "field address: [1] is invalid: expected a non-empty string"),
            ("readOnlyPort: \"80\"", "field readOnlyPort: \"80\" is invalid: expected an integer from 0 to 65535"),
            ("readOnlyPort: -1", "field readOnlyPort: -1 is invalid: expected an integer from 0 to 65535"),
            ("maxPods: 1.0", "field maxPods: 1.0 is invalid: expected an integer from 0 to 10000"),
            ("syncFrequency: 1.5", "field syncFrequency: 1.5 is invalid: expected a duration string such as 30s"),
            ("syncFrequency: true", "field syncFrequency: true is invalid: expected a duration string such as 30s"),
            (
                "fileCheckFrequency: 24h0m1s",
                "field fileCheckFrequency: \"24h0m1s\" is invalid: out of range: expected 0s to 24h0m0s",
            ),
            (
                "shutdownGracePeriodCriticalPods: 1s",
                "field shutdownGracePeriodCriticalPods: \"1s\" is invalid: must not exceed shutdownGracePeriod",
            ),
            (
                "shutdownGracePeriodCriticalPods: 2s\nshutdownGracePeriod: 1500ms",
                "field shutdownGracePeriodCriticalPods: \"2s\" is invalid: must not exceed shutdownGracePeriod",
            ),
            (
                "shutdownGracePeriodByPodPriority: {a: 1}",
                "field shutdownGracePeriodByPodPriority: {\"a\":1} is invalid: expected a list",
            ),
            (
                "shutdownGracePeriodByPodPriority: 3",
                "field shutdownGracePeriodByPodPriority: 3 is invalid: expected a list",
            ),
            (
                "shutdownGracePeriodByPodPriority: [{priority: 1}]",
                "field shutdownGracePeriodByPodPriority[0]: {\"priority\":1} is invalid: expected {priority: <int32>, shutdownGracePeriodSeconds: <0 to 86400>}",
            ),
            (
                "shutdownGracePeriodByPodPriority: [{priority: 10, shutdownGracePeriodSeconds: 5}, 7]",
                "field shutdownGracePeriodByPodPriority[1]: 7 is invalid: expected {priority: <int32>, shutdownGracePeriodSeconds: <0 to 86400>}",
            ),
            (
                "shutdownGracePeriodByPodPriority: [{priority: 3000000000, shutdownGracePeriodSeconds: 5}]",
                "field shutdownGracePeriodByPodPriority[0]: {\"priority\":3000000000,\"shutdownGracePeriodSeconds\":5} is invalid: expected {priority: <int32>, shutdownGracePeriodSeconds: <0 to 86400>}",
            ),
            (
                "shutdownGracePeriodByPodPriority: [{priority: 1, shutdownGracePeriodSeconds: -1}]",
                "field shutdownGracePeriodByPodPriority[0]: {\"priority\":1,\"shutdownGracePeriodSeconds\":-1} is invalid: expected {priority: <int32>, shutdownGracePeriodSeconds: <0 to 86400>}",
            ),
            (
                "shutdownGracePeriod: 10s\nshutdownGracePeriodByPodPriority: [{priority: 1, shutdownGracePeriodSeconds: 5}]",
                "field shutdownGracePeriodByPodPriority: [{\"priority\":1,\"shutdownGracePeriodSeconds\":5}] is invalid: cannot be combined with shutdownGracePeriod/shutdownGracePeriodCriticalPods",
            ),
            (
                "systemReserved: 5",
                "field systemReserved: 5 is invalid: expected a map such as {cpu: 100m, memory: 256Mi}",
            ),
            (
                "systemReserved: [cpu]",
                "field systemReserved: [\"cpu\"] is invalid: expected a map such as {cpu: 100m, memory: 256Mi}",
            ),
            (
                "kubeReserved: {gpu: \"1\"}",
                "field kubeReserved.gpu: \"1\" is invalid: expected one of cpu, memory, ephemeral-storage, pid",
            ),
            ("kubeReserved: {cpu: 1}", "field kubeReserved.cpu: 1 is invalid: expected a quantity string"),
            ("kubeReserved: {pid: 100}", "field kubeReserved.pid: 100 is invalid: expected a quantity string"),
            (
                "systemReserved: {memory: lots}",
                "field systemReserved.memory: \"lots\" is invalid: invalid quantity \"lots\": expected a number with an optional suffix (m, k, M, G, Ki, Mi, Gi, ...)",
            ),
            (
                "kubeReserved: {memory: 1Ki, cpu: 2000000001m}",
                "field kubeReserved.cpu: \"2000000001m\" is invalid: out of range: expected at most 1M (cores)",
            ),
            ("cgroupDriver: other", "field cgroupDriver: \"other\" is invalid: expected systemd or cgroupfs"),
            (
                "allowedUnsafeSysctls: [net.core.somaxconn, vm.swappiness]",
                "field allowedUnsafeSysctls: [\"net.core.somaxconn\",\"vm.swappiness\"] is invalid: the sysctl \"vm.swappiness\" is not known to be namespaced",
            ),
            (
                "allowedUnsafeSysctls: [\"net.*.x*\"]",
                "field allowedUnsafeSysctls: [\"net.*.x*\"] is invalid: \"net.*.x*\" is not a sysctl name or prefix* pattern",
            ),
            ("seccompDefault: yes", "field seccompDefault: \"yes\" is invalid: expected true or false"),
            ("nodeName: Node_1", "field nodeName: \"Node_1\" is invalid: expected a DNS-1123 subdomain"),
            ("nodeName: \"\"", "field nodeName: \"\" is invalid: expected a non-empty string"),
            ("apiGroup: 5", "field apiGroup: 5 is invalid: expected a non-empty string"),
            ("readOnlyPortShowsEnv: 1", "field readOnlyPortShowsEnv: 1 is invalid: expected true or false"),
            ("runtimeEvents: \"no\"", "field runtimeEvents: \"no\" is invalid: expected true or false"),
            ("allowPrivileged: \"true\"", "field allowPrivileged: \"true\" is invalid: expected true or false"),
            ("staticPodSecurityLevel: 3", "field staticPodSecurityLevel: 3 is invalid: expected a non-empty string"),
            (
                "priorityClasses: [a]",
                "field priorityClasses: [\"a\"] is invalid: expected a map of class name to integer",
            ),
            (
                "priorityClasses: {high: 1000000000}",
                "field priorityClasses.high: 1000000000 is invalid: expected an integer below 1000000000",
            ),
            (
                "priorityClasses: {a.b: x}",
                "field priorityClasses.a.b: \"x\" is invalid: expected an integer below 1000000000",
            ),
            ("a: 1\n---\nb: 2\n", "cannot parse YAML: holds 2 documents; a config is one KubeletConfiguration"),
            ("just text", "cannot parse YAML: expected a mapping of fields"),
        ];
        for (text, want) in cases {
            match Config::parse("c.yaml", text) {
                Err(e) => assert_eq!(e.to_string(), format!("c.yaml: {want}"), "{text:?}"),
                Ok(_) => panic!("{text:?} loads"),
            }
        }
    }

    /// Parsing looks nothing up: an `apiGroup` no host has and an unset
    /// `nodeName` load as written (the daemon resolves both at start).
    #[test]
    fn parsing_reads_nothing_of_the_host() {
        let c = Config::parse("c.yaml", "apiGroup: no-such-group-on-any-host\n").unwrap();
        assert_eq!(c.api_group.as_deref(), Some("no-such-group-on-any-host"));
        assert_eq!(c.node_name, None);
        assert_eq!(Config::default().node_name, None);
        let c = Config::parse("c.yaml", "nodeName: edge-1\n").unwrap();
        assert_eq!(c.node_name.as_deref(), Some("edge-1"));
    }

    #[test]
    fn the_defaults_pass_their_own_validation() {
        assert_eq!(Config::default().validate(), Ok(Config::default()));
        // the known fields are serde's: every file field, not the computed sums
        let names = field_names();
        assert!(names.contains(&"kind") && names.contains(&"systemReserved") && names.contains(&"apiGroup"));
        assert!(!names.contains(&"reservedCpuMillis"));
        assert_eq!(Config::parse("c.yaml", "").unwrap(), Config::default());
        assert_eq!(Config::parse("c.yaml", "# nothing\n---\n").unwrap(), Config::default());
    }

    /// One warning per unknown field (also when it is null), one per
    /// reservation podwarden does not enforce; a null known field is unset.
    #[test]
    fn unknown_fields_and_unenforced_reservations_are_warned_about_once_each() {
        let mut w = Vec::new();
        let c = Config::parse_with_warnings(
            "c.yaml",
            "clusterDNS: [10.96.0.10]\nauthentication: {anonymous: {enabled: false}}\nresolvConf:\nmaxPods: null\nsyncFrequency:\nkubeReserved: {pid: \"100\", cpu: 100m}\nsystemReserved: {ephemeral-storage: 1Gi}\n",
            &mut w,
        )
        .unwrap();
        assert_eq!(
            w,
            [
                "c.yaml: unknown field \"authentication\" ignored",
                "c.yaml: unknown field \"clusterDNS\" ignored",
                "c.yaml: systemReserved.ephemeral-storage is accepted but not enforced by podwarden",
                "c.yaml: kubeReserved.pid is accepted but not enforced by podwarden",
            ]
        );
        assert_eq!((c.max_pods, c.sync_frequency), (110, Duration::from_secs(60)));
        assert_eq!((c.reserved_cpu_millis, c.reserved_memory_bytes), (100, 0));
        // the unknown fields are warned about even when a value is refused
        let mut w = Vec::new();
        assert!(Config::parse_with_warnings("c.yaml", "bogus: 1\nmaxPods: x\n", &mut w).is_err());
        assert_eq!(w, ["c.yaml: unknown field \"bogus\" ignored"]);
    }
}

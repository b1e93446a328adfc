//! Pod-count metrics as plain counters, kept under the kubelet's names; the
//! HTTP endpoint renders them. Also the pod worker duration histogram.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::runtime::Op;
use crate::runtime::metered::FailedCalls;

/// `le` bounds of the duration histograms (seconds), Prometheus defaults.
pub const BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// `le` bounds of `kubelet_image_pull_duration_seconds`, the kubelet's.
pub const PULL_BUCKETS: [f64; 19] = [
    0.5, 1.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0,
    2700.0, 3600.0,
];

#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    pub bounds: &'static [f64],
    pub counts: Vec<u64>,
    pub count: u64,
    pub sum: f64,
}

impl Default for Histogram {
    /// With the Prometheus default bounds ([`BUCKETS`]).
    fn default() -> Self {
        Histogram::with(&BUCKETS)
    }
}

impl Histogram {
    pub fn with(bounds: &'static [f64]) -> Self {
        Histogram { bounds, counts: vec![0; bounds.len()], count: 0, sum: 0.0 }
    }

    pub fn observe(&mut self, v: f64) {
        for (i, b) in self.bounds.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += v;
    }
}

/// Gauges refreshed by housekeeping.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gauges {
    /// `kubelet_desired_pods{static}`: index 0 = "false", 1 = "true".
    pub desired_pods: [i64; 2],
    /// `kubelet_active_pods{static}`.
    pub active_pods: [i64; 2],
    /// `kubelet_mirror_pods` (podwarden has no API server: always 0).
    pub mirror_pods: i64,
    /// `kubelet_working_pods{lifecycle,config,static}`.
    pub working_pods: BTreeMap<(String, String, String), i64>,
    /// `kubelet_running_pods`: pods with a ready sandbox.
    pub running_pods: i64,
    /// `kubelet_running_containers{container_state}`.
    pub running_containers: BTreeMap<String, i64>,
}

/// One disk-backed emptyDir's measured usage (housekeeping,
/// `sync::usage`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmptyDirUsage {
    pub namespace: String,
    pub pod: String,
    pub volume: String,
    /// Allocated bytes, as `du` counts them (a lower bound when the walk
    /// was capped).
    pub used_bytes: u64,
    /// Inodes: the files and directories counted.
    pub used_inodes: u64,
    /// Its `sizeLimit`, if it has one.
    pub limit_bytes: Option<u64>,
}

#[derive(Default)]
pub struct Metrics {
    /// `kubelet_restarted_pods_total{static}`.
    pub restarted_pods_total: [AtomicU64; 2],
    /// `kubelet_orphaned_runtime_pods_total`.
    pub orphaned_runtime_pods_total: AtomicU64,
    pub gauges: Mutex<Gauges>,
    /// `kubelet_pod_worker_duration_seconds{operation_type}`.
    pub pod_worker_duration: Mutex<BTreeMap<&'static str, Histogram>>,
    /// `kubelet_graceful_shutdown_{start,end}_time_seconds` (Unix seconds).
    shutdown_times: Mutex<[Option<f64>; 2]>,
    /// `kubelet_pod_start_duration_seconds`, and when each pod not yet
    /// running was first seen.
    pod_start_duration: Mutex<Histogram>,
    first_seen: Mutex<std::collections::HashMap<String, std::time::Instant>>,
    /// `kubelet_runtime_operations_errors_total{operation_type}`.
    runtime_errors: Mutex<BTreeMap<&'static str, u64>>,
    /// `podwarden_emptydir_{used,limit}_bytes{namespace,pod,volume}`.
    empty_dirs: Mutex<Vec<EmptyDirUsage>>,
    /// `prober_probe_total` and `prober_probe_duration_seconds` by probe.
    probes: Mutex<BTreeMap<ProbeSeries, ProbeCounts>>,
    /// `kubelet_image_pull_duration_seconds{image_size_in_bytes}`.
    image_pulls: Mutex<BTreeMap<&'static str, Histogram>>,
    /// `kubelet_image_garbage_collected_total{reason}`: "age", "space".
    images_collected: Mutex<BTreeMap<&'static str, u64>>,
    /// `kubelet_evictions{eviction_signal}`.
    evictions: Mutex<BTreeMap<String, u64>>,
    /// `kubelet_credential_provider_plugin_duration{plugin_name}` and
    /// `kubelet_credential_provider_plugin_errors{plugin_name}`.
    credential_plugins: Mutex<BTreeMap<String, (Histogram, u64)>>,
    /// The runtime's event stream (the `runtime-events` thread writes it):
    /// `podwarden_runtime_event_stream_{opens,breaks}_total`,
    /// `podwarden_runtime_event_stream_open`, `podwarden_runtime_events_total`.
    pub runtime_events: std::sync::Arc<crate::runtime::events::StreamState>,
}

/// The kubelet's `image_size_in_bytes` label of a pull.
pub fn image_size_label(bytes: u64) -> &'static str {
    const MB: u64 = 1_000_000;
    const GB: u64 = 1_000_000_000;
    match bytes {
        b if b < 10 * MB => "0-10MB",
        b if b < 100 * MB => "10MB-100MB",
        b if b < 500 * MB => "100MB-500MB",
        b if b < GB => "500MB-1GB",
        b if b < 5 * GB => "1GB-5GB",
        b if b < 10 * GB => "5GB-10GB",
        b if b < 20 * GB => "10GB-20GB",
        b if b < 30 * GB => "20GB-30GB",
        b if b < 40 * GB => "30GB-40GB",
        b if b < 60 * GB => "40GB-60GB",
        b if b < 100 * GB => "60GB-100GB",
        _ => "GT100GB",
    }
}

/// The labels of one probe's series.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProbeSeries {
    /// `Liveness`, `Readiness`, `Startup`.
    pub probe_type: &'static str,
    pub container: String,
    pub pod: String,
    pub namespace: String,
    pub pod_uid: String,
}

/// Results by `result` label and the duration histogram of one probe.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProbeCounts {
    /// successful, failed, unknown
    pub results: [u64; 3],
    pub duration: Histogram,
}

/// A probe's result as `prober_probe_total` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    Successful = 0,
    Failed = 1,
    Unknown = 2,
}

impl Metrics {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn inc_restarted(&self, is_static: bool) {
        self.restarted_pods_total[is_static as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn restarted(&self, is_static: bool) -> u64 {
        self.restarted_pods_total[is_static as usize].load(Ordering::Relaxed)
    }

    pub fn inc_orphaned(&self) {
        self.orphaned_runtime_pods_total.fetch_add(1, Ordering::Relaxed);
    }

    pub fn orphaned(&self) -> u64 {
        self.orphaned_runtime_pods_total.load(Ordering::Relaxed)
    }

    /// A pod was admitted: its start duration counts from now.
    pub fn pod_seen(&self, uid: &str) {
        self.first_seen.lock().entry(uid.to_string()).or_insert_with(std::time::Instant::now);
    }

    /// A pod's containers all run: observe its start duration (once).
    pub fn pod_running(&self, uid: &str) {
        if let Some(t) = self.first_seen.lock().remove(uid) {
            self.pod_start_duration.lock().observe(t.elapsed().as_secs_f64());
        }
    }

    /// Forget pods that are gone before they ran.
    pub fn retain_seen(&self, keep: impl Fn(&str) -> bool) {
        self.first_seen.lock().retain(|u, _| keep(u));
    }

    pub fn pod_start_duration(&self) -> Histogram {
        self.pod_start_duration.lock().clone()
    }

    /// A runtime call failed.
    pub fn runtime_error(&self, op: Op) {
        *self.runtime_errors.lock().entry(op.metric_label()).or_default() += 1;
    }

    pub fn runtime_errors(&self) -> BTreeMap<&'static str, u64> {
        self.runtime_errors.lock().clone()
    }

    /// The last graceful node shutdown's start and end (Unix seconds).
    pub fn set_shutdown_times(&self, start: Option<f64>, end: Option<f64>) {
        *self.shutdown_times.lock() = [start, end];
    }

    pub fn shutdown_times(&self) -> [Option<f64>; 2] {
        *self.shutdown_times.lock()
    }

    pub fn gauges(&self) -> Gauges {
        self.gauges.lock().clone()
    }

    /// Replace the disk-backed emptyDirs' usage (every volume measured).
    pub fn set_empty_dirs(&self, usage: Vec<EmptyDirUsage>) {
        *self.empty_dirs.lock() = usage;
    }

    /// One probe run: counted by result; its duration is observed for
    /// successes and unknowns only, as the kubelet does.
    pub fn probe_done(&self, series: &ProbeSeries, result: ProbeResult, seconds: f64) {
        let mut probes = self.probes.lock();
        let c = probes.entry(series.clone()).or_default();
        c.results[result as usize] += 1;
        if result != ProbeResult::Failed {
            c.duration.observe(seconds);
        }
    }

    /// Drop the series of probes that are gone (the kubelet deletes them
    /// with their worker).
    pub fn retain_probes(&self, keep: impl Fn(&ProbeSeries) -> bool) {
        self.probes.lock().retain(|s, _| keep(s));
    }

    pub fn probes(&self) -> BTreeMap<ProbeSeries, ProbeCounts> {
        self.probes.lock().clone()
    }

    /// A successful pull of an image of `size` bytes that took `seconds`.
    pub fn image_pulled(&self, size: u64, seconds: f64) {
        self.image_pulls
            .lock()
            .entry(image_size_label(size))
            .or_insert_with(|| Histogram::with(&PULL_BUCKETS))
            .observe(seconds);
    }

    /// `n` images removed by garbage collection for `reason` ("age" or
    /// "space").
    pub fn images_collected(&self, reason: &'static str, n: u64) {
        *self.images_collected.lock().entry(reason).or_default() += n;
    }

    /// A run of credential provider plugin `name` that took `seconds`;
    /// `failed`: it gave no usable answer.
    pub fn credential_plugin_ran(&self, name: &str, seconds: f64, failed: bool) {
        let mut m = self.credential_plugins.lock();
        let (h, errors) = m.entry(name.to_string()).or_default();
        h.observe(seconds);
        *errors += u64::from(failed);
    }

    /// A pod evicted for `signal`.
    pub fn evicted(&self, signal: &str) {
        *self.evictions.lock().entry(signal.to_string()).or_default() += 1;
    }

    pub fn images_collected_total(&self) -> BTreeMap<&'static str, u64> {
        self.images_collected.lock().clone()
    }

    pub fn empty_dirs(&self) -> Vec<EmptyDirUsage> {
        self.empty_dirs.lock().clone()
    }
}

impl FailedCalls for Metrics {
    fn failed(&self, op: Op) {
        self.runtime_error(op);
    }
}

impl Metrics {
    /// One pass of a pod worker ended; `op` is `kubelet_pod_worker_duration_seconds`'
    /// label (`sync`, `terminating`, `terminated`).
    pub fn pod_worker_pass(&self, op: &'static str, took: Duration) {
        self.pod_worker_duration.lock().entry(op).or_default().observe(took.as_secs_f64());
    }
}

/// One histogram's series; `labels` is empty or ends with a comma.
fn histogram(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    use std::fmt::Write;
    for (i, b) in h.bounds.iter().enumerate() {
        let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{b}\"}} {}", h.counts[i]);
    }
    let _ = writeln!(out, "{name}_bucket{{{labels}le=\"+Inf\"}} {}", h.count);
    let plain = labels.trim_end_matches(',');
    let braces = if plain.is_empty() { String::new() } else { format!("{{{plain}}}") };
    let _ = writeln!(out, "{name}_sum{braces} {}", h.sum);
    let _ = writeln!(out, "{name}_count{braces} {}", h.count);
}

/// One sample: `name value`, or `name{labels} value` when it has labels.
fn sample(out: &mut String, name: &str, labels: &str, value: impl std::fmt::Display) {
    use std::fmt::Write;
    let _ =
        if labels.is_empty() { writeln!(out, "{name} {value}") } else { writeln!(out, "{name}{{{labels}}} {value}") };
}

/// A pair of series by the `static` label: index 0 = "false", 1 = "true".
fn by_static(out: &mut String, name: &str, v: [impl std::fmt::Display; 2]) {
    for (s, v) in ["false", "true"].into_iter().zip(v) {
        sample(out, name, &format!("static=\"{s}\""), v);
    }
}

/// One series per key of `m`, labelled `label="<key>"`.
fn by_label<K: std::fmt::Display, V: std::fmt::Display>(out: &mut String, name: &str, label: &str, m: &BTreeMap<K, V>) {
    for (k, v) in m {
        sample(out, name, &format!("{label}=\"{k}\""), v);
    }
}

/// What one render reads of the metrics, taken once, before any is written.
struct Snapshot {
    gauges: Gauges,
    restarted: [u64; 2],
    orphaned: u64,
    image_pulls: BTreeMap<&'static str, Histogram>,
    /// By plugin name: its duration histogram and its errors.
    credential_plugins: BTreeMap<String, (Histogram, u64)>,
    evictions: BTreeMap<String, u64>,
    images_collected: BTreeMap<&'static str, u64>,
    pod_worker_duration: BTreeMap<&'static str, Histogram>,
    pod_start_duration: Histogram,
    runtime_errors: BTreeMap<&'static str, u64>,
    shutdown_times: [Option<f64>; 2],
    /// Sorted by namespace, pod, volume.
    empty_dirs: Vec<EmptyDirUsage>,
    probes: BTreeMap<ProbeSeries, ProbeCounts>,
    /// Opened, broken, events, the open stream's source.
    runtime_events: (u64, u64, u64, Option<&'static str>),
}

impl Snapshot {
    fn of(m: &Metrics) -> Self {
        let mut empty_dirs = m.empty_dirs();
        empty_dirs.sort_by(|a, b| (&a.namespace, &a.pod, &a.volume).cmp(&(&b.namespace, &b.pod, &b.volume)));
        Snapshot {
            gauges: m.gauges(),
            restarted: [m.restarted(false), m.restarted(true)],
            orphaned: m.orphaned(),
            image_pulls: m.image_pulls.lock().clone(),
            credential_plugins: m.credential_plugins.lock().clone(),
            evictions: m.evictions.lock().clone(),
            images_collected: m.images_collected_total(),
            pod_worker_duration: m.pod_worker_duration.lock().clone(),
            pod_start_duration: m.pod_start_duration(),
            runtime_errors: m.runtime_errors(),
            shutdown_times: m.shutdown_times(),
            empty_dirs,
            probes: m.probes(),
            runtime_events: (
                m.runtime_events.opened_total(),
                m.runtime_events.broken_total(),
                m.runtime_events.events_total(),
                m.runtime_events.open_source().map(|s| s.name()),
            ),
        }
    }
}

/// One metric family: its `# HELP` and `# TYPE` lines, then its series.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    /// Writes the family's series (`name` is the family's).
    series: fn(out: &mut String, name: &str, s: &Snapshot),
}

const GAUGE: &str = "gauge";
const COUNTER: &str = "counter";
const HISTOGRAM: &str = "histogram";

/// Every family, in the order `/metrics` shows them.
const FAMILIES: &[Family] = &[
    Family {
        name: "kubelet_desired_pods",
        kind: GAUGE,
        help: "The number of pods the kubelet is being instructed to run.",
        series: |out, name, s| by_static(out, name, s.gauges.desired_pods),
    },
    Family {
        name: "kubelet_active_pods",
        kind: GAUGE,
        help: "The number of pods the kubelet considers active and which are being considered when admitting new pods.",
        series: |out, name, s| by_static(out, name, s.gauges.active_pods),
    },
    Family {
        name: "kubelet_mirror_pods",
        kind: GAUGE,
        help: "The number of mirror pods the kubelet will try to create (podwarden has no API server: always 0).",
        series: |out, name, s| sample(out, name, "", s.gauges.mirror_pods),
    },
    Family {
        name: "kubelet_working_pods",
        kind: GAUGE,
        help: "Number of pods the kubelet is actually running, broken down by lifecycle phase, whether the pod is desired, orphaned, or runtime only, and whether the pod is static.",
        series: |out, name, s| {
            for ((lifecycle, config, st), v) in &s.gauges.working_pods {
                sample(out, name, &format!("config=\"{config}\",lifecycle=\"{lifecycle}\",static=\"{st}\""), v);
            }
        },
    },
    Family {
        name: "kubelet_restarted_pods_total",
        kind: COUNTER,
        help: "Number of pods that have been restarted because they were deleted and recreated with the same UID while the kubelet was watching them.",
        series: |out, name, s| by_static(out, name, s.restarted),
    },
    Family {
        name: "kubelet_orphaned_runtime_pods_total",
        kind: COUNTER,
        help: "Number of pods that have been detected in the container runtime without being already known to the pod worker.",
        series: |out, name, s| sample(out, name, "", s.orphaned),
    },
    Family {
        name: "kubelet_running_pods",
        kind: GAUGE,
        help: "Number of pods that have a running pod sandbox.",
        series: |out, name, s| sample(out, name, "", s.gauges.running_pods),
    },
    Family {
        name: "kubelet_running_containers",
        kind: GAUGE,
        help: "Number of containers currently running.",
        series: |out, name, s| by_label(out, name, "container_state", &s.gauges.running_containers),
    },
    Family {
        name: "kubelet_image_pull_duration_seconds",
        kind: HISTOGRAM,
        help: "Duration in seconds to pull an image.",
        series: |out, name, s| {
            for (size, h) in &s.image_pulls {
                histogram(out, name, &format!("image_size_in_bytes=\"{size}\","), h);
            }
        },
    },
    Family {
        name: "kubelet_credential_provider_plugin_duration",
        kind: HISTOGRAM,
        help: "Duration of execution in seconds for credential provider plugin",
        series: |out, name, s| {
            for (plugin, (h, _)) in &s.credential_plugins {
                histogram(out, name, &format!("plugin_name=\"{plugin}\","), h);
            }
        },
    },
    Family {
        name: "kubelet_credential_provider_plugin_errors",
        kind: COUNTER,
        help: "Number of errors from credential provider plugin",
        series: |out, name, s| {
            for (plugin, (_, n)) in &s.credential_plugins {
                sample(out, name, &format!("plugin_name=\"{plugin}\""), n);
            }
        },
    },
    Family {
        name: "kubelet_evictions",
        kind: COUNTER,
        help: "Cumulative number of pod evictions by eviction signal",
        series: |out, name, s| by_label(out, name, "eviction_signal", &s.evictions),
    },
    Family {
        name: "kubelet_image_garbage_collected_total",
        kind: COUNTER,
        help: "Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
        series: |out, name, s| by_label(out, name, "reason", &s.images_collected),
    },
    Family {
        name: "kubelet_pod_worker_duration_seconds",
        kind: HISTOGRAM,
        help: "Duration in seconds to sync a single pod, broken down by operation type.",
        series: |out, name, s| {
            for (op, h) in &s.pod_worker_duration {
                histogram(out, name, &format!("operation_type=\"{op}\","), h);
            }
        },
    },
    Family {
        name: "kubelet_pod_start_duration_seconds",
        kind: HISTOGRAM,
        help: "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
        series: |out, name, s| histogram(out, name, "", &s.pod_start_duration),
    },
    Family {
        name: "kubelet_runtime_operations_errors_total",
        kind: COUNTER,
        help: "Cumulative number of runtime operation errors by operation type.",
        series: |out, name, s| by_label(out, name, "operation_type", &s.runtime_errors),
    },
    Family {
        name: "kubelet_graceful_shutdown_start_time_seconds",
        kind: GAUGE,
        help: "Last graceful shutdown start time since unix epoch in seconds",
        series: |out, name, s| sample(out, name, "", s.shutdown_times[0].unwrap_or(0.0)),
    },
    Family {
        name: "kubelet_graceful_shutdown_end_time_seconds",
        kind: GAUGE,
        help: "Last graceful shutdown end time since unix epoch in seconds",
        series: |out, name, s| sample(out, name, "", s.shutdown_times[1].unwrap_or(0.0)),
    },
    Family {
        name: "podwarden_emptydir_used_bytes",
        kind: GAUGE,
        help: "Bytes allocated in a disk-backed emptyDir volume, as du counts them, measured by housekeeping (a lower bound when the walk reached its caps).",
        series: |out, name, s| {
            for u in &s.empty_dirs {
                sample(out, name, &empty_dir_labels(u), u.used_bytes);
            }
        },
    },
    Family {
        name: "podwarden_emptydir_limit_bytes",
        kind: GAUGE,
        help: "The sizeLimit of a disk-backed emptyDir volume.",
        series: |out, name, s| {
            for u in &s.empty_dirs {
                if let Some(l) = u.limit_bytes {
                    sample(out, name, &empty_dir_labels(u), l);
                }
            }
        },
    },
    Family {
        name: "prober_probe_total",
        kind: COUNTER,
        help: "Cumulative number of a liveness, readiness or startup probe for a container by result.",
        series: |out, name, s| {
            for (p, c) in &s.probes {
                for (i, result) in ["successful", "failed", "unknown"].iter().enumerate() {
                    if c.results[i] > 0 {
                        let labels =
                            format!("{},pod_uid=\"{}\",result=\"{result}\"", probe_labels(p), escape(&p.pod_uid));
                        sample(out, name, &labels, c.results[i]);
                    }
                }
            }
        },
    },
    Family {
        name: "prober_probe_duration_seconds",
        kind: HISTOGRAM,
        help: "Duration in seconds for a probe response.",
        series: |out, name, s| {
            for (p, c) in &s.probes {
                if c.duration.count > 0 {
                    histogram(out, name, &format!("{},", probe_labels(p)), &c.duration);
                }
            }
        },
    },
    Family {
        name: "podwarden_runtime_event_stream_opens_total",
        kind: COUNTER,
        help: "The number of times the runtime's container event stream was opened (the first time included; the kubelet counts the same as kubelet_evented_pleg_connection_success_count).",
        series: |out, name, s| sample(out, name, "", s.runtime_events.0),
    },
    Family {
        name: "podwarden_runtime_event_stream_breaks_total",
        kind: COUNTER,
        help: "The number of times the runtime's container event stream broke or could not be opened (the kubelet: kubelet_evented_pleg_connection_error_count).",
        series: |out, name, s| sample(out, name, "", s.runtime_events.1),
    },
    Family {
        name: "podwarden_runtime_events_total",
        kind: COUNTER,
        help: "Container events received from the runtime's event stream.",
        series: |out, name, s| sample(out, name, "", s.runtime_events.2),
    },
    Family {
        name: "podwarden_runtime_event_stream_open",
        kind: GAUGE,
        help: "1 while the runtime's container event stream is open (source: cri or containerd), 0 while only the relist sees changes.",
        series: |out, name, s| match s.runtime_events.3 {
            Some(src) => sample(out, name, &format!("source=\"{src}\""), 1),
            None => sample(out, name, "", 0),
        },
    },
];

/// An emptyDir's labels.
fn empty_dir_labels(u: &EmptyDirUsage) -> String {
    format!("namespace=\"{}\",pod=\"{}\",volume=\"{}\"", escape(&u.namespace), escape(&u.pod), escape(&u.volume))
}

/// A probe's labels but `pod_uid` (the duration histogram has none).
fn probe_labels(s: &ProbeSeries) -> String {
    format!(
        "container=\"{}\",namespace=\"{}\",pod=\"{}\",probe_type=\"{}\"",
        escape(&s.container),
        escape(&s.namespace),
        escape(&s.pod),
        s.probe_type
    )
}

/// Render every metric in the Prometheus text format (0.0.4).
pub fn render(m: &Metrics) -> String {
    use std::fmt::Write;
    let snapshot = Snapshot::of(m);
    let mut out = String::new();
    for f in FAMILIES {
        let _ = writeln!(out, "# HELP {} {}\n# TYPE {} {}", f.name, f.help, f.name, f.kind);
        (f.series)(&mut out, f.name, &snapshot);
    }
    out
}

/// A label value in the text format: backslash, quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let mut h = Histogram::default();
        h.observe(0.003);
        h.observe(0.2);
        assert_eq!(h.counts[0], 1);
        assert_eq!(h.counts[5], 2);
        assert_eq!(h.count, 2);
    }

    #[test]
    fn failed_runtime_calls_are_counted_under_the_kubelets_labels() {
        use crate::runtime::fake::FakeRuntime;
        use crate::runtime::metered::Metered;
        use crate::runtime::{CallCtx, Runtime, SandboxConfig};
        let fake = std::sync::Arc::new(FakeRuntime::new());
        let metrics = std::sync::Arc::new(Metrics::new());
        let rt = Metered::new(fake.clone(), metrics.clone());
        let ctx = CallCtx::background(Duration::from_secs(5));
        let sandbox =
            SandboxConfig { name: "p".into(), namespace: "default".into(), uid: "u".into(), ..Default::default() };
        fake.fail(Op::RunPodSandbox, None, 2);
        let e = rt.run_sandbox(&ctx, &sandbox).unwrap_err();
        assert_eq!(e.to_string(), "RunPodSandbox failed: injected fault");
        assert!(rt.run_sandbox(&ctx, &sandbox).is_err());
        let id = rt.run_sandbox(&ctx, &sandbox).unwrap();
        fake.fail(Op::PodSandboxStatus, None, 1);
        assert!(rt.pod_status(&ctx, "u").is_err());
        // a cancelled call is podwarden's doing, not a runtime error
        fake.set_latency(Op::StopPodSandbox, Duration::from_secs(5));
        let cancel = crate::base::cancel::CancelToken::new();
        cancel.cancel();
        let e = rt.stop_sandbox(&CallCtx::new(Duration::from_secs(5), &cancel), &id).unwrap_err();
        assert_eq!(e.to_string(), "StopPodSandbox was cancelled");
        let counted: Vec<_> = metrics.runtime_errors().into_iter().collect();
        assert_eq!(counted, [("podsandbox_status", 1), ("run_podsandbox", 2)]);
        let text = render(&metrics);
        assert!(
            text.contains("kubelet_runtime_operations_errors_total{operation_type=\"run_podsandbox\"} 2\n"),
            "{text}"
        );
    }

    /// Every family in its place with its header, and the samples of each
    /// (buckets aside) as `/metrics` has always shown them.
    #[test]
    fn every_family_renders_its_header_and_series_in_order() {
        let m = Metrics::new();
        {
            let mut g = m.gauges.lock();
            g.desired_pods = [3, 1];
            g.active_pods = [2, 1];
            g.working_pods.insert(("sync".into(), "desired".into(), "false".into()), 2);
            g.working_pods.insert(("terminating".into(), "orphan".into(), "true".into()), 1);
            g.running_pods = 4;
            g.running_containers.insert("running".into(), 5);
            g.running_containers.insert("exited".into(), 1);
        }
        m.inc_restarted(true);
        m.inc_orphaned();
        m.image_pulled(5_000_000, 1.5);
        m.image_pulled(50_000_000, 30.0);
        m.credential_plugin_ran("ecr", 0.2, false);
        m.credential_plugin_ran("gcr", 1.2, true);
        m.evicted("memory.available");
        m.images_collected("age", 2);
        m.pod_worker_pass("sync", Duration::from_millis(30));
        m.pod_seen("u1");
        m.pod_running("u1");
        m.runtime_error(Op::RunPodSandbox);
        m.set_shutdown_times(Some(12.5), None);
        let dir = |ns: &str, pod: &str, volume: &str, used_bytes, limit_bytes| EmptyDirUsage {
            namespace: ns.into(),
            pod: pod.into(),
            volume: volume.into(),
            used_bytes,
            used_inodes: 1,
            limit_bytes,
        };
        m.set_empty_dirs(vec![dir("z", "p\"q", "v", 10, Some(100)), dir("a", "p", "v\\", 20, None)]);
        let s = ProbeSeries {
            probe_type: "Liveness",
            container: "c".into(),
            pod: "p".into(),
            namespace: "n".into(),
            pod_uid: "u".into(),
        };
        m.probe_done(&s, ProbeResult::Successful, 0.01);
        m.probe_done(&s, ProbeResult::Failed, 0.02);
        m.probe_done(&ProbeSeries { probe_type: "Readiness", ..s.clone() }, ProbeResult::Failed, 0.02);
        let text = render(&m);
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE")).collect();
        assert_eq!(
            types,
            [
                "# TYPE kubelet_desired_pods gauge",
                "# TYPE kubelet_active_pods gauge",
                "# TYPE kubelet_mirror_pods gauge",
                "# TYPE kubelet_working_pods gauge",
                "# TYPE kubelet_restarted_pods_total counter",
                "# TYPE kubelet_orphaned_runtime_pods_total counter",
                "# TYPE kubelet_running_pods gauge",
                "# TYPE kubelet_running_containers gauge",
                "# TYPE kubelet_image_pull_duration_seconds histogram",
                "# TYPE kubelet_credential_provider_plugin_duration histogram",
                "# TYPE kubelet_credential_provider_plugin_errors counter",
                "# TYPE kubelet_evictions counter",
                "# TYPE kubelet_image_garbage_collected_total counter",
                "# TYPE kubelet_pod_worker_duration_seconds histogram",
                "# TYPE kubelet_pod_start_duration_seconds histogram",
                "# TYPE kubelet_runtime_operations_errors_total counter",
                "# TYPE kubelet_graceful_shutdown_start_time_seconds gauge",
                "# TYPE kubelet_graceful_shutdown_end_time_seconds gauge",
                "# TYPE podwarden_emptydir_used_bytes gauge",
                "# TYPE podwarden_emptydir_limit_bytes gauge",
                "# TYPE prober_probe_total counter",
                "# TYPE prober_probe_duration_seconds histogram",
                "# TYPE podwarden_runtime_event_stream_opens_total counter",
                "# TYPE podwarden_runtime_event_stream_breaks_total counter",
                "# TYPE podwarden_runtime_events_total counter",
                "# TYPE podwarden_runtime_event_stream_open gauge",
            ]
        );
        let samples: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.contains("_bucket"))
            .filter(|l| !l.starts_with("kubelet_pod_start_duration_seconds_sum"))
            .collect();
        assert_eq!(
            samples,
            [
                "kubelet_desired_pods{static=\"false\"} 3",
                "kubelet_desired_pods{static=\"true\"} 1",
                "kubelet_active_pods{static=\"false\"} 2",
                "kubelet_active_pods{static=\"true\"} 1",
                "kubelet_mirror_pods 0",
                "kubelet_working_pods{config=\"desired\",lifecycle=\"sync\",static=\"false\"} 2",
                "kubelet_working_pods{config=\"orphan\",lifecycle=\"terminating\",static=\"true\"} 1",
                "kubelet_restarted_pods_total{static=\"false\"} 0",
                "kubelet_restarted_pods_total{static=\"true\"} 1",
                "kubelet_orphaned_runtime_pods_total 1",
                "kubelet_running_pods 4",
                "kubelet_running_containers{container_state=\"exited\"} 1",
                "kubelet_running_containers{container_state=\"running\"} 5",
                "kubelet_image_pull_duration_seconds_sum{image_size_in_bytes=\"0-10MB\"} 1.5",
                "kubelet_image_pull_duration_seconds_count{image_size_in_bytes=\"0-10MB\"} 1",
                "kubelet_image_pull_duration_seconds_sum{image_size_in_bytes=\"10MB-100MB\"} 30",
                "kubelet_image_pull_duration_seconds_count{image_size_in_bytes=\"10MB-100MB\"} 1",
                "kubelet_credential_provider_plugin_duration_sum{plugin_name=\"ecr\"} 0.2",
                "kubelet_credential_provider_plugin_duration_count{plugin_name=\"ecr\"} 1",
                "kubelet_credential_provider_plugin_duration_sum{plugin_name=\"gcr\"} 1.2",
                "kubelet_credential_provider_plugin_duration_count{plugin_name=\"gcr\"} 1",
                "kubelet_credential_provider_plugin_errors{plugin_name=\"ecr\"} 0",
                "kubelet_credential_provider_plugin_errors{plugin_name=\"gcr\"} 1",
                "kubelet_evictions{eviction_signal=\"memory.available\"} 1",
                "kubelet_image_garbage_collected_total{reason=\"age\"} 2",
                "kubelet_pod_worker_duration_seconds_sum{operation_type=\"sync\"} 0.03",
                "kubelet_pod_worker_duration_seconds_count{operation_type=\"sync\"} 1",
                "kubelet_pod_start_duration_seconds_count 1",
                "kubelet_runtime_operations_errors_total{operation_type=\"run_podsandbox\"} 1",
                "kubelet_graceful_shutdown_start_time_seconds 12.5",
                "kubelet_graceful_shutdown_end_time_seconds 0",
                "podwarden_emptydir_used_bytes{namespace=\"a\",pod=\"p\",volume=\"v\\\\\"} 20",
                "podwarden_emptydir_used_bytes{namespace=\"z\",pod=\"p\\\"q\",volume=\"v\"} 10",
                "podwarden_emptydir_limit_bytes{namespace=\"z\",pod=\"p\\\"q\",volume=\"v\"} 100",
                "prober_probe_total{container=\"c\",namespace=\"n\",pod=\"p\",probe_type=\"Liveness\",pod_uid=\"u\",result=\"successful\"} 1",
                "prober_probe_total{container=\"c\",namespace=\"n\",pod=\"p\",probe_type=\"Liveness\",pod_uid=\"u\",result=\"failed\"} 1",
                "prober_probe_total{container=\"c\",namespace=\"n\",pod=\"p\",probe_type=\"Readiness\",pod_uid=\"u\",result=\"failed\"} 1",
                "prober_probe_duration_seconds_sum{container=\"c\",namespace=\"n\",pod=\"p\",probe_type=\"Liveness\"} 0.01",
                "prober_probe_duration_seconds_count{container=\"c\",namespace=\"n\",pod=\"p\",probe_type=\"Liveness\"} 1",
                "podwarden_runtime_event_stream_opens_total 0",
                "podwarden_runtime_event_stream_breaks_total 0",
                "podwarden_runtime_events_total 0",
                "podwarden_runtime_event_stream_open 0",
            ]
        );
        assert!(text.contains("# HELP kubelet_mirror_pods The number of mirror pods the kubelet will try to create (podwarden has no API server: always 0).\n# TYPE kubelet_mirror_pods gauge\nkubelet_mirror_pods 0\n"), "{text}");
        assert!(
            text.contains("kubelet_image_pull_duration_seconds_bucket{image_size_in_bytes=\"0-10MB\",le=\"0.5\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("prober_probe_duration_seconds_bucket{container=\"c\",namespace=\"n\",pod=\"p\",probe_type=\"Liveness\",le=\"+Inf\"} 1\n"), "{text}");
        assert!(text.contains("kubelet_pod_start_duration_seconds_bucket{le=\"+Inf\"} 1\n"), "{text}");
    }
}

//! `Config::validate`: what the field deserializers cannot check alone
//! (ranges, zero and empty values meaning the default, combinations of
//! fields), by section: identity and endpoint, periods, node, logs,
//! eviction, images. The first refused value is the error.

use std::time::Duration;

use super::{Config, MAX_PERIOD, Seg, format_duration};

/// Bounds of `systemReserved`/`kubeReserved` (each; their sum cannot
/// overflow).
const MAX_RESERVED_CPU_MILLIS: i64 = 1_000_000_000;
const MAX_RESERVED_MEMORY_BYTES: i64 = 1 << 60;

/// Upper bound of `housekeepingInterval` (the health check and orphan
/// clean-up depend on it): ten minutes.
const MAX_HOUSEKEEPING: Duration = Duration::from_secs(600);
/// The smallest `containerLogMaxSize`: below it a rotation would hold a
/// handful of lines.
const MIN_LOG_SIZE: u64 = 1024;

/// A value [`Config::validate`] refuses: where, and what is allowed.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Refused {
    pub(super) at: Vec<Seg>,
    pub(super) allowed: String,
}

fn refused(field: &str, allowed: impl Into<String>) -> Refused {
    Refused { at: vec![Seg::Key(field.into())], allowed: allowed.into() }
}

/// `field` is over `max`: out of range, from `min`.
fn out_of_range(field: &str, min: &str, max: Duration) -> Refused {
    refused(field, format!("out of range: expected {min} to {}", format_duration(max)))
}

impl Config {
    /// What the field deserializers cannot check alone: ranges, zero and
    /// empty values meaning the default (as the kubelet's defaulting makes
    /// them), combinations of fields; and the reservations' sums.
    pub(super) fn validate(mut self) -> Result<Self, Refused> {
        let d = Config::default();
        self.validate_identity(&d)?;
        self.validate_periods(&d)?;
        self.validate_node(&d)?;
        self.validate_logs()?;
        self.validate_eviction(&d)?;
        self.validate_images(&d)?;
        Ok(self)
    }

    /// `kind`, `apiVersion` and the runtime endpoint.
    fn validate_identity(&mut self, d: &Config) -> Result<(), Refused> {
        if self.kind != d.kind {
            return Err(refused("kind", format!("expected {}", d.kind)));
        }
        if self.api_version != d.api_version {
            return Err(refused("apiVersion", format!("expected {}", d.api_version)));
        }
        // kubeadm writes `containerRuntimeEndpoint: ""`; the kubelet defaults it
        if self.container_runtime_endpoint.is_empty() {
            self.container_runtime_endpoint = d.container_runtime_endpoint.clone();
        }
        let e = &self.container_runtime_endpoint;
        if !(e.starts_with("unix://") || e.starts_with('/') || e == "fake://") {
            return Err(refused("containerRuntimeEndpoint", "expected unix:///path/to/socket"));
        }
        Ok(())
    }

    /// The periods and timeouts, and graceful node shutdown's.
    fn validate_periods(&mut self, d: &Config) -> Result<(), Refused> {
        // Zero periods and timeouts mean the default, as in the kubelet
        // (kubeadm writes `0s` for every duration it does not set); zero
        // shutdown periods mean "off", as in the kubelet.
        for (field, value, default, max) in [
            ("runtimeRequestTimeout", &mut self.runtime_request_timeout, Some(d.runtime_request_timeout), MAX_PERIOD),
            ("syncFrequency", &mut self.sync_frequency, Some(d.sync_frequency), MAX_PERIOD),
            ("fileCheckFrequency", &mut self.file_check_frequency, Some(d.file_check_frequency), MAX_PERIOD),
            ("housekeepingInterval", &mut self.housekeeping_interval, Some(d.housekeeping_interval), MAX_HOUSEKEEPING),
            ("shutdownGracePeriod", &mut self.shutdown_grace_period, None, MAX_PERIOD),
            ("shutdownGracePeriodCriticalPods", &mut self.shutdown_grace_period_critical_pods, None, MAX_PERIOD),
        ] {
            if *value > max {
                return Err(out_of_range(field, "0s", max));
            }
            if let Some(default) = default
                && value.is_zero()
            {
                *value = default;
            }
        }
        if self.shutdown_grace_period_critical_pods > self.shutdown_grace_period {
            return Err(refused("shutdownGracePeriodCriticalPods", "must not exceed shutdownGracePeriod"));
        }
        if !self.shutdown_grace_period.is_zero() && !self.shutdown_grace_period_by_pod_priority.is_empty() {
            return Err(refused(
                "shutdownGracePeriodByPodPriority",
                "cannot be combined with shutdownGracePeriod/shutdownGracePeriodCriticalPods",
            ));
        }
        Ok(())
    }

    /// The node: address, pods, reservations (and their sums), cgroup
    /// driver, name, and the directories that default when empty.
    fn validate_node(&mut self, d: &Config) -> Result<(), Refused> {
        if self.address.is_empty() {
            self.address = d.address.clone();
        }
        if self.address.parse::<std::net::IpAddr>().is_err() {
            return Err(refused("address", "expected an IP address"));
        }
        if let Err((at, allowed)) = self.api_authorization.check() {
            let at = std::iter::once("apiAuthorization".to_string())
                .chain(at)
                .map(|s| match s.parse::<usize>() {
                    Ok(i) => Seg::Index(i),
                    Err(_) => Seg::Key(s),
                })
                .collect();
            return Err(Refused { at, allowed });
        }
        if self.max_pods == 0 {
            self.max_pods = d.max_pods;
        }
        for (field, r) in [("systemReserved", &self.system_reserved), ("kubeReserved", &self.kube_reserved)] {
            let at = |key: &str| vec![Seg::Key(field.into()), Seg::Key(key.into())];
            if r.cpu_millis > MAX_RESERVED_CPU_MILLIS {
                return Err(Refused { at: at("cpu"), allowed: "out of range: expected at most 1M (cores)".into() });
            }
            if r.memory_bytes > MAX_RESERVED_MEMORY_BYTES {
                return Err(Refused { at: at("memory"), allowed: "out of range: expected at most 1Ei".into() });
            }
        }
        self.reserved_cpu_millis = self.system_reserved.cpu_millis + self.kube_reserved.cpu_millis;
        self.reserved_memory_bytes = self.system_reserved.memory_bytes + self.kube_reserved.memory_bytes;
        // empty stays empty: the daemon takes the runtime's driver
        if !self.cgroup_driver.is_empty() && self.cgroup_driver != "systemd" && self.cgroup_driver != "cgroupfs" {
            return Err(refused("cgroupDriver", "expected systemd or cgroupfs"));
        }
        if let Some(n) = &self.node_name
            && !crate::model::names::is_dns1123_subdomain(n)
        {
            return Err(refused("nodeName", "expected a DNS-1123 subdomain"));
        }
        if self.pod_logs_dir.as_os_str().is_empty() {
            self.pod_logs_dir = d.pod_logs_dir.clone();
        }
        if self.resolv_conf.as_os_str().is_empty() {
            self.resolv_conf = d.resolv_conf.clone();
        }
        Ok(())
    }

    /// Container logs: rotation size and files, the monitor, the workers.
    fn validate_logs(&self) -> Result<(), Refused> {
        // the kubelet's checks; its defaulting fills only unset fields, so
        // an explicit 0 is refused here too
        if self.container_log_max_size < MIN_LOG_SIZE {
            return Err(refused("containerLogMaxSize", "expected at least 1Ki"));
        }
        if self.container_log_max_files < 2 {
            return Err(refused("containerLogMaxFiles", "must be greater than 1"));
        }
        if self.container_log_monitor_interval < Duration::from_secs(3) {
            return Err(refused("containerLogMonitorInterval", "must be a duration of at least 3s"));
        }
        if self.container_log_monitor_interval > MAX_PERIOD {
            return Err(out_of_range("containerLogMonitorInterval", "3s", MAX_PERIOD));
        }
        if self.container_log_max_workers < 1 {
            return Err(refused("containerLogMaxWorkers", "must be at least 1"));
        }
        Ok(())
    }

    /// The pressure transition period and the thresholds.
    fn validate_eviction(&mut self, d: &Config) -> Result<(), Refused> {
        // 0s is the default, as the kubelet's defaulting makes it
        if self.eviction_pressure_transition_period.is_zero() {
            self.eviction_pressure_transition_period = d.eviction_pressure_transition_period;
        }
        if self.eviction_pressure_transition_period > MAX_PERIOD {
            return Err(out_of_range("evictionPressureTransitionPeriod", "0s", MAX_PERIOD));
        }
        if let Err(e) = self.thresholds() {
            return Err(Refused { at: vec![Seg::Key(e.field.into()), Seg::Key(e.key)], allowed: e.reason.to_string() });
        }
        Ok(())
    }

    /// Pulls, credential providers and image garbage collection.
    fn validate_images(&mut self, d: &Config) -> Result<(), Refused> {
        if self.serialize_image_pulls && self.max_parallel_image_pulls > 1 {
            return Err(refused(
                "maxParallelImagePulls",
                "cannot be larger than 1 unless serializeImagePulls is false",
            ));
        }
        if !self.image_credential_provider_config.as_os_str().is_empty()
            && self.image_credential_provider_bin_dir.as_os_str().is_empty()
        {
            return Err(refused("imageCredentialProviderBinDir", "required with imageCredentialProviderConfig"));
        }
        if self.image_gc_low_threshold_percent >= self.image_gc_high_threshold_percent {
            return Err(refused("imageGCLowThresholdPercent", "must be less than imageGCHighThresholdPercent"));
        }
        for (field, v) in [
            ("imageMinimumGCAge", self.image_minimum_gc_age),
            ("imageMaximumGCAge", self.image_maximum_gc_age),
            ("imageGCPeriod", self.image_gc_period),
            ("imagePullProgressDeadline", self.image_pull_progress_deadline),
        ] {
            if v > MAX_PERIOD {
                return Err(out_of_range(field, "0s", MAX_PERIOD));
            }
        }
        // as the kubelet's defaulting: 0s is the default minimum age
        if self.image_minimum_gc_age.is_zero() {
            self.image_minimum_gc_age = d.image_minimum_gc_age;
        }
        if !self.image_maximum_gc_age.is_zero() && self.image_maximum_gc_age <= self.image_minimum_gc_age {
            return Err(refused("imageMaximumGCAge", "must be greater than imageMinimumGCAge"));
        }
        if self.image_gc_period.is_zero() {
            self.image_gc_period = d.image_gc_period;
        }
        Ok(())
    }
}

//! Pod Security Standards: the upstream levels `privileged`, `baseline` and
//! `restricted` at their latest version, as the API server's PodSecurity
//! admission evaluates them (k8s.io/pod-security-admission, Kubernetes 1.36:
//! policy version v1.35, which `latest` resolves to there).
//!
//! Pure: a pod in, the forbidden reasons and details out, with the
//! upstream check IDs, reasons, details and order, so an operator sees the
//! message kubectl would show:
//! `violates PodSecurity "baseline:latest": host namespaces
//! (hostNetwork=true), hostPath volumes (volume "v")`.
//!
//! The checks read the pod as given; they do not depend on which fields
//! the rest of podwarden supports (a field podwarden rejects is still
//! judged correctly here).
//!
//! Order: upstream runs the baseline checks sorted by check ID, then the
//! restricted ones sorted by ID; at `restricted`, a restricted check
//! replaces the baseline checks it overrides (`restrictedVolumes` replaces
//! `hostPathVolumes`, `capabilities_restricted` replaces
//! `capabilities_baseline`, `seccompProfile_restricted` replaces
//! `seccompProfile_baseline`, `procMount_restricted` replaces `procMount`).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{ContainerPort, Lifecycle, PodSpec, Probe, SecurityContext};

use crate::model::{ObjectMeta, Pod};

/// The reason a pod rejected for its security gets (podwarden's; upstream
/// answers the API request with `Forbidden` and the same message).
pub const REASON: &str = "PodSecurity";

/// A Pod Security Standards level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Unrestricted: no check.
    Privileged,
    /// Prevents known privilege escalations.
    Baseline,
    /// Baseline plus hardening best practice.
    Restricted,
}

impl Level {
    pub const NAMES: &[&str] = &["privileged", "baseline", "restricted"];

    /// The upstream spelling (`privileged`, `baseline`, `restricted`).
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One failed check: upstream's `ForbiddenReason` and `ForbiddenDetail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forbidden {
    pub reason: String,
    pub detail: String,
}

fn forbidden(reason: impl Into<String>, detail: impl Into<String>) -> Option<Forbidden> {
    Some(Forbidden { reason: reason.into(), detail: detail.into() })
}

type Check = fn(&ObjectMeta, &PodSpec) -> Option<Forbidden>;

/// The baseline checks, sorted by upstream check ID.
const BASELINE: &[(&str, Check)] = &[
    ("appArmorProfile", app_armor_profile),
    ("capabilities_baseline", capabilities_baseline),
    ("hostNamespaces", host_namespaces),
    ("hostPathVolumes", host_path_volumes),
    ("hostPorts", host_ports),
    ("hostProbesAndHostLifecycle", host_probes_and_host_lifecycle),
    ("privileged", privileged),
    ("procMount", proc_mount_baseline),
    ("seLinuxOptions", se_linux_options),
    ("seccompProfile_baseline", seccomp_profile_baseline),
    ("sysctls", sysctls),
    ("windowsHostProcess", windows_host_process),
];

/// The restricted checks, sorted by upstream check ID, with the baseline
/// checks each overrides.
const RESTRICTED: &[(&str, Check, &[&str])] = &[
    ("allowPrivilegeEscalation", allow_privilege_escalation, &[]),
    ("capabilities_restricted", capabilities_restricted, &["capabilities_baseline"]),
    ("procMount_restricted", proc_mount, &["procMount"]),
    ("restrictedVolumes", restricted_volumes, &["hostPathVolumes"]),
    ("runAsNonRoot", run_as_non_root, &[]),
    ("runAsUser", run_as_user, &[]),
    ("seccompProfile_restricted", seccomp_profile_restricted, &["seccompProfile_baseline"]),
];

/// The check IDs run at `level`, in upstream order.
pub fn check_ids(level: Level) -> Vec<&'static str> {
    checks(level).into_iter().map(|(id, _)| id).collect()
}

fn checks(level: Level) -> Vec<(&'static str, Check)> {
    match level {
        Level::Privileged => Vec::new(),
        Level::Baseline => BASELINE.to_vec(),
        Level::Restricted => {
            let overridden: BTreeSet<&str> = RESTRICTED.iter().flat_map(|(_, _, o)| o.iter().copied()).collect();
            BASELINE
                .iter()
                .filter(|(id, _)| !overridden.contains(id))
                .copied()
                .chain(RESTRICTED.iter().map(|(id, c, _)| (*id, *c)))
                .collect()
        }
    }
}

/// Every check of `level` the pod fails, in upstream order.
pub fn evaluate(level: Level, pod: &Pod) -> Vec<Forbidden> {
    let empty = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&empty);
    checks(level).into_iter().filter_map(|(_, check)| check(&pod.metadata, spec)).collect()
}

/// Upstream's `ForbiddenDetail` of the aggregate: `reason (detail), ...`.
pub fn forbidden_detail(results: &[Forbidden]) -> String {
    results
        .iter()
        .map(|f| if f.detail.is_empty() { f.reason.clone() } else { format!("{} ({})", f.reason, f.detail) })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A pod the level forbids; shown as the PodSecurity admission's message:
/// `violates PodSecurity "baseline:latest": ...`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("violates PodSecurity \"{level}:latest\": {detail}")]
pub struct Violation {
    pub level: Level,
    /// Upstream's `ForbiddenDetail` ([`forbidden_detail`]).
    pub detail: String,
}

/// Ok, or why `level` forbids `pod`.
pub fn enforce(level: Level, pod: &Pod) -> Result<(), Violation> {
    let results = evaluate(level, pod);
    if results.is_empty() {
        return Ok(());
    }
    Err(Violation { level, detail: forbidden_detail(&results) })
}

// ---- helpers (upstream's joinQuote, pluralize, visitContainers) ----

fn join_quote<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    let items: Vec<String> = items.into_iter().map(|s| format!("\"{}\"", s.as_ref())).collect();
    items.join(", ")
}

fn pluralize<'a>(singular: &'a str, plural: &'a str, count: usize) -> &'a str {
    if count == 1 { singular } else { plural }
}

/// `container "a"` / `containers "a", "b"`.
fn containers_phrase(names: &[&str]) -> String {
    format!("{} {}", pluralize("container", "containers", names.len()), join_quote(names))
}

/// What the checks read of a container, init container or ephemeral
/// container (upstream visits all three, in that order).
struct ContainerView<'a> {
    name: &'a str,
    sc: Option<&'a SecurityContext>,
    ports: &'a [ContainerPort],
    probes: [Option<&'a Probe>; 3],
    lifecycle: Option<&'a Lifecycle>,
}

fn visit_containers(spec: &PodSpec) -> Vec<ContainerView<'_>> {
    let mut out = Vec::new();
    for c in spec.init_containers.iter().flatten().chain(spec.containers.iter()) {
        out.push(ContainerView {
            name: &c.name,
            sc: c.security_context.as_ref(),
            ports: c.ports.as_deref().unwrap_or(&[]),
            probes: [c.liveness_probe.as_ref(), c.readiness_probe.as_ref(), c.startup_probe.as_ref()],
            lifecycle: c.lifecycle.as_ref(),
        });
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        out.push(ContainerView {
            name: &c.name,
            sc: c.security_context.as_ref(),
            ports: c.ports.as_deref().unwrap_or(&[]),
            probes: [c.liveness_probe.as_ref(), c.readiness_probe.as_ref(), c.startup_probe.as_ref()],
            lifecycle: c.lifecycle.as_ref(),
        });
    }
    out
}

fn is_windows(spec: &PodSpec) -> bool {
    spec.os.as_ref().is_some_and(|os| os.name == "windows")
}

/// KEP-127: a pod in a user namespace (`hostUsers: false`) is relaxed for
/// runAsNonRoot, runAsUser and (baseline) procMount from policy v1.35.
fn in_user_namespace(spec: &PodSpec) -> bool {
    spec.host_users == Some(false)
}

/// `setter1 and setter2`, where container setters are one phrase.
fn setters(pod: bool, containers: &[&str]) -> Vec<String> {
    let mut s = Vec::new();
    if pod {
        s.push("pod".to_string());
    }
    if !containers.is_empty() {
        s.push(containers_phrase(containers));
    }
    s
}

// ---- baseline ----

use crate::model::manifest::APPARMOR_ANNOTATION_PREFIX;

/// appArmorProfile: the profile type (field) must be RuntimeDefault or
/// Localhost; the deprecated annotation must be empty, `runtime/default` or
/// `localhost/*`.
fn app_armor_profile(meta: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let allowed_type = |t: &str| matches!(t, "RuntimeDefault" | "Localhost");
    let mut bad_values = BTreeSet::new();
    let mut pod_bad = false;
    if let Some(p) = spec.security_context.as_ref().and_then(|s| s.app_armor_profile.as_ref())
        && !allowed_type(&p.type_)
    {
        pod_bad = true;
        bad_values.insert(p.type_.clone());
    }
    let mut bad_containers = Vec::new();
    for c in visit_containers(spec) {
        if let Some(p) = c.sc.and_then(|s| s.app_armor_profile.as_ref())
            && !allowed_type(&p.type_)
        {
            bad_containers.push(c.name);
            bad_values.insert(p.type_.clone());
        }
    }
    let mut setters = setters(pod_bad, &bad_containers);
    let mut bad_values: Vec<String> = bad_values.into_iter().collect();
    let mut annotations: Vec<String> = meta
        .annotations
        .iter()
        .flatten()
        .filter(|(k, v)| {
            k.starts_with(APPARMOR_ANNOTATION_PREFIX)
                && !(v.is_empty() || *v == "runtime/default" || v.starts_with("localhost/"))
        })
        .map(|(k, v)| format!("{k}={}", crate::model::quote::go_quote(v)))
        .collect();
    if !annotations.is_empty() {
        annotations.sort();
        setters.push(pluralize("annotation", "annotations", annotations.len()).to_string());
        bad_values.extend(annotations);
    }
    if setters.is_empty() {
        return None;
    }
    forbidden(
        pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", bad_values.len()),
        format!("{} must not set AppArmor profile type to {}", setters.join(" and "), join_quote(&bad_values)),
    )
}

const CAPABILITIES_BASELINE: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// capabilities_baseline: only the runtime's default set may be added.
fn capabilities_baseline(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut bad = Vec::new();
    let mut caps = BTreeSet::new();
    for c in visit_containers(spec) {
        let add = c.sc.and_then(|s| s.capabilities.as_ref()).and_then(|k| k.add.as_ref());
        let mut valid = true;
        for cap in add.into_iter().flatten() {
            if !CAPABILITIES_BASELINE.contains(&cap.as_str()) {
                valid = false;
                caps.insert(cap.as_str());
            }
        }
        if !valid {
            bad.push(c.name);
        }
    }
    if bad.is_empty() {
        return None;
    }
    forbidden(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad),
            join_quote(caps)
        ),
    )
}

/// hostNamespaces: hostNetwork, hostPID and hostIPC must be unset or false.
fn host_namespaces(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut used = Vec::new();
    if spec.host_network == Some(true) {
        used.push("hostNetwork=true");
    }
    if spec.host_pid == Some(true) {
        used.push("hostPID=true");
    }
    if spec.host_ipc == Some(true) {
        used.push("hostIPC=true");
    }
    if used.is_empty() {
        return None;
    }
    forbidden("host namespaces", used.join(", "))
}

/// hostPathVolumes: no hostPath volume.
fn host_path_volumes(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let names: Vec<&str> =
        spec.volumes.iter().flatten().filter(|v| v.host_path.is_some()).map(|v| v.name.as_str()).collect();
    if names.is_empty() {
        return None;
    }
    forbidden("hostPath volumes", format!("{} {}", pluralize("volume", "volumes", names.len()), join_quote(&names)))
}

/// hostPorts: no container asks for a host port.
fn host_ports(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut bad = Vec::new();
    let mut ports = BTreeSet::new();
    for c in visit_containers(spec) {
        let mut valid = true;
        for p in c.ports {
            if let Some(hp) = p.host_port.filter(|hp| *hp != 0) {
                valid = false;
                ports.insert(hp.to_string());
            }
        }
        if !valid {
            bad.push(c.name);
        }
    }
    if bad.is_empty() {
        return None;
    }
    forbidden(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.into_iter().collect::<Vec<_>>().join(", ")
        ),
    )
}

/// hostProbesAndHostLifecycle (v1.34+): probes and lifecycle handlers may
/// not name a host.
fn host_probes_and_host_lifecycle(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut bad = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    for c in visit_containers(spec) {
        let mut seen = |host: Option<&String>| {
            if let Some(h) = host.filter(|h| !h.is_empty()) {
                bad.insert(c.name);
                hosts.insert(h.clone());
            }
        };
        for p in c.probes.into_iter().flatten() {
            seen(p.http_get.as_ref().and_then(|a| a.host.as_ref()));
            seen(p.tcp_socket.as_ref().and_then(|a| a.host.as_ref()));
        }
        for h in c.lifecycle.into_iter().flat_map(|l| [l.post_start.as_ref(), l.pre_stop.as_ref()]).flatten() {
            seen(h.http_get.as_ref().and_then(|a| a.host.as_ref()));
            seen(h.tcp_socket.as_ref().and_then(|a| a.host.as_ref()));
        }
    }
    if bad.is_empty() {
        return None;
    }
    let bad: Vec<&str> = bad.into_iter().collect();
    forbidden(
        "probe or lifecycle host",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("probe or lifecycle host", "probe or lifecycle hosts", hosts.len()),
            join_quote(&hosts)
        ),
    )
}

/// privileged: no privileged container.
fn privileged(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let bad: Vec<&str> = visit_containers(spec)
        .into_iter()
        .filter(|c| c.sc.and_then(|s| s.privileged) == Some(true))
        .map(|c| c.name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    forbidden("privileged", format!("{} must not set securityContext.privileged=true", containers_phrase(&bad)))
}

/// procMount (upstream procMount_1_0): the proc mount type must be unset
/// or Default.
fn proc_mount(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for c in visit_containers(spec) {
        if let Some(t) = c.sc.and_then(|s| s.proc_mount.as_ref())
            && t != "Default"
        {
            bad.push(c.name);
            types.insert(t.as_str());
        }
    }
    if bad.is_empty() {
        return None;
    }
    forbidden(
        "procMount",
        format!("{} must not set securityContext.procMount to {}", containers_phrase(&bad), join_quote(types)),
    )
}

/// procMount at baseline v1.35: relaxed for pods in a user namespace.
fn proc_mount_baseline(meta: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    if in_user_namespace(spec) {
        return None;
    }
    proc_mount(meta, spec)
}

const SELINUX_TYPES: &[&str] = &["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"];

/// seLinuxOptions (v1.31): the type must be one of the container types;
/// user and role must not be set.
fn se_linux_options(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut bad_types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut valid = |o: &k8s_openapi::api::core::v1::SELinuxOptions| {
        let mut ok = true;
        let t = o.type_.as_deref().unwrap_or("");
        if !SELINUX_TYPES.contains(&t) {
            ok = false;
            bad_types.insert(t.to_string());
        }
        if o.user.as_deref().is_some_and(|u| !u.is_empty()) {
            ok = false;
            set_user = true;
        }
        if o.role.as_deref().is_some_and(|r| !r.is_empty()) {
            ok = false;
            set_role = true;
        }
        ok
    };
    let pod_bad = spec.security_context.as_ref().and_then(|s| s.se_linux_options.as_ref()).is_some_and(|o| !valid(o));
    let mut bad = Vec::new();
    for c in visit_containers(spec) {
        if let Some(o) = c.sc.and_then(|s| s.se_linux_options.as_ref())
            && !valid(o)
        {
            bad.push(c.name);
        }
    }
    let setters = setters(pod_bad, &bad);
    if setters.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        data.push(format!("{} {}", pluralize("type", "types", bad_types.len()), join_quote(&bad_types)));
    }
    if set_user {
        data.push("user may not be set".to_string());
    }
    if set_role {
        data.push("role may not be set".to_string());
    }
    forbidden(
        "seLinuxOptions",
        format!("{} set forbidden securityContext.seLinuxOptions: {}", setters.join(" and "), data.join("; ")),
    )
}

fn valid_seccomp(t: &str) -> bool {
    t == "Localhost" || t == "RuntimeDefault"
}

/// seccompProfile_baseline (v1.19): a seccomp profile, where set, must be
/// RuntimeDefault or Localhost.
fn seccomp_profile_baseline(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut bad_values = BTreeSet::new();
    let mut pod_bad = false;
    if let Some(p) = spec.security_context.as_ref().and_then(|s| s.seccomp_profile.as_ref())
        && !valid_seccomp(&p.type_)
    {
        pod_bad = true;
        bad_values.insert(p.type_.as_str());
    }
    let mut bad = Vec::new();
    for c in visit_containers(spec) {
        if let Some(p) = c.sc.and_then(|s| s.seccomp_profile.as_ref())
            && !valid_seccomp(&p.type_)
        {
            bad.push(c.name);
            bad_values.insert(p.type_.as_str());
        }
    }
    let setters = setters(pod_bad, &bad);
    if setters.is_empty() {
        return None;
    }
    forbidden(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            setters.join(" and "),
            join_quote(bad_values)
        ),
    )
}

/// sysctls: only the safe set.
fn sysctls(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let bad: Vec<&str> = spec
        .security_context
        .iter()
        .flat_map(|s| s.sysctls.iter().flatten())
        .filter(|s| !crate::model::sysctl::SAFE.contains(&s.name.as_str()))
        .map(|s| s.name.as_str())
        .collect();
    if bad.is_empty() {
        return None;
    }
    forbidden("forbidden sysctls", bad.join(", "))
}

/// windowsHostProcess: no Windows HostProcess container.
fn windows_host_process(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let host_process = |w: Option<&k8s_openapi::api::core::v1::WindowsSecurityContextOptions>| {
        w.and_then(|w| w.host_process) == Some(true)
    };
    let bad: Vec<&str> = visit_containers(spec)
        .into_iter()
        .filter(|c| host_process(c.sc.and_then(|s| s.windows_options.as_ref())))
        .map(|c| c.name)
        .collect();
    let pod_bad = host_process(spec.security_context.as_ref().and_then(|s| s.windows_options.as_ref()));
    let setters = setters(pod_bad, &bad);
    if setters.is_empty() {
        return None;
    }
    forbidden(
        "hostProcess",
        format!("{} must not set securityContext.windowsOptions.hostProcess=true", setters.join(" and ")),
    )
}

// ---- restricted ----

/// allowPrivilegeEscalation (v1.25): every container must set it to false
/// (Windows pods exempt).
fn allow_privilege_escalation(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    if is_windows(spec) {
        return None;
    }
    let bad: Vec<&str> = visit_containers(spec)
        .into_iter()
        .filter(|c| c.sc.and_then(|s| s.allow_privilege_escalation) != Some(false))
        .map(|c| c.name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    forbidden(
        "allowPrivilegeEscalation != false",
        format!("{} must set securityContext.allowPrivilegeEscalation=false", containers_phrase(&bad)),
    )
}

/// capabilities_restricted (v1.25): drop ALL, add at most
/// NET_BIND_SERVICE (Windows pods exempt).
fn capabilities_restricted(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    if is_windows(spec) {
        return None;
    }
    let mut missing_drop_all = Vec::new();
    let mut adding = Vec::new();
    let mut caps = BTreeSet::new();
    for c in visit_containers(spec) {
        let Some(k) = c.sc.and_then(|s| s.capabilities.as_ref()) else {
            missing_drop_all.push(c.name);
            continue;
        };
        if !k.drop.iter().flatten().any(|d| d == "ALL") {
            missing_drop_all.push(c.name);
        }
        let mut added_forbidden = false;
        for a in k.add.iter().flatten().filter(|a| *a != "NET_BIND_SERVICE") {
            added_forbidden = true;
            caps.insert(a.as_str());
        }
        if added_forbidden {
            adding.push(c.name);
        }
    }
    let mut details = Vec::new();
    if !missing_drop_all.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop_all)
        ));
    }
    if !adding.is_empty() {
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(caps)
        ));
    }
    if details.is_empty() {
        return None;
    }
    forbidden("unrestricted capabilities", details.join("; "))
}

/// restrictedVolumes: only the volume types that cannot reach the host.
fn restricted_volumes(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for v in spec.volumes.iter().flatten() {
        if v.config_map.is_some()
            || v.csi.is_some()
            || v.downward_api.is_some()
            || v.empty_dir.is_some()
            || v.ephemeral.is_some()
            || v.image.is_some()
            || v.persistent_volume_claim.is_some()
            || v.projected.is_some()
            || v.secret.is_some()
        {
            continue;
        }
        bad.push(v.name.as_str());
        let t = if v.host_path.is_some() {
            "hostPath"
        } else if v.gce_persistent_disk.is_some() {
            "gcePersistentDisk"
        } else if v.aws_elastic_block_store.is_some() {
            "awsElasticBlockStore"
        } else if v.git_repo.is_some() {
            "gitRepo"
        } else if v.nfs.is_some() {
            "nfs"
        } else if v.iscsi.is_some() {
            "iscsi"
        } else if v.glusterfs.is_some() {
            "glusterfs"
        } else if v.rbd.is_some() {
            "rbd"
        } else if v.flex_volume.is_some() {
            "flexVolume"
        } else if v.cinder.is_some() {
            "cinder"
        } else if v.cephfs.is_some() {
            "cephfs"
        } else if v.flocker.is_some() {
            "flocker"
        } else if v.fc.is_some() {
            "fc"
        } else if v.azure_file.is_some() {
            "azureFile"
        } else if v.vsphere_volume.is_some() {
            "vsphereVolume"
        } else if v.quobyte.is_some() {
            "quobyte"
        } else if v.azure_disk.is_some() {
            "azureDisk"
        } else if v.photon_persistent_disk.is_some() {
            "photonPersistentDisk"
        } else if v.portworx_volume.is_some() {
            "portworxVolume"
        } else if v.scale_io.is_some() {
            "scaleIO"
        } else if v.storageos.is_some() {
            "storageos"
        } else {
            "unknown"
        };
        types.insert(t);
    }
    if bad.is_empty() {
        return None;
    }
    forbidden(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("restricted volume type", "restricted volume types", types.len()),
            join_quote(types)
        ),
    )
}

/// runAsNonRoot (v1.35): the pod or every container must set it to true
/// (pods in a user namespace exempt).
fn run_as_non_root(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    if in_user_namespace(spec) {
        return None;
    }
    let pod_value = spec.security_context.as_ref().and_then(|s| s.run_as_non_root);
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in visit_containers(spec) {
        match c.sc.and_then(|s| s.run_as_non_root) {
            Some(false) => explicit.push(c.name),
            Some(true) => {}
            None if pod_value != Some(true) => implicit.push(c.name),
            None => {}
        }
    }
    let setters = setters(pod_value == Some(false), &explicit);
    if !setters.is_empty() {
        return forbidden(
            "runAsNonRoot != true",
            format!("{} must not set securityContext.runAsNonRoot=false", setters.join(" and ")),
        );
    }
    if !implicit.is_empty() {
        return forbidden(
            "runAsNonRoot != true",
            format!("pod or {} must set securityContext.runAsNonRoot=true", containers_phrase(&implicit)),
        );
    }
    None
}

/// runAsUser (v1.35): neither the pod nor a container may set runAsUser=0
/// (pods in a user namespace exempt).
fn run_as_user(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    if in_user_namespace(spec) {
        return None;
    }
    let pod_bad = spec.security_context.as_ref().and_then(|s| s.run_as_user) == Some(0);
    let bad: Vec<&str> = visit_containers(spec)
        .into_iter()
        .filter(|c| c.sc.and_then(|s| s.run_as_user) == Some(0))
        .map(|c| c.name)
        .collect();
    let setters = setters(pod_bad, &bad);
    if setters.is_empty() {
        return None;
    }
    forbidden("runAsUser=0", format!("{} must not set runAsUser=0", setters.join(" and ")))
}

/// seccompProfile_restricted (v1.25): the pod or every container must set
/// a RuntimeDefault or Localhost profile (Windows pods exempt).
fn seccomp_profile_restricted(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    if is_windows(spec) {
        return None;
    }
    let mut bad_values = BTreeSet::new();
    let mut pod_bad = false;
    let mut pod_set = false;
    if let Some(p) = spec.security_context.as_ref().and_then(|s| s.seccomp_profile.as_ref()) {
        if valid_seccomp(&p.type_) {
            pod_set = true;
        } else {
            pod_bad = true;
            bad_values.insert(p.type_.as_str());
        }
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in visit_containers(spec) {
        match c.sc.and_then(|s| s.seccomp_profile.as_ref()) {
            Some(p) if !valid_seccomp(&p.type_) => {
                explicit.push(c.name);
                bad_values.insert(p.type_.as_str());
            }
            Some(_) => {}
            None if !pod_set => implicit.push(c.name),
            None => {}
        }
    }
    let setters = setters(pod_bad, &explicit);
    if !setters.is_empty() {
        return forbidden(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.join(" and "),
                join_quote(bad_values)
            ),
        );
    }
    if !implicit.is_empty() {
        return forbidden(
            "seccompProfile",
            format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_phrase(&implicit)
            ),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod from YAML (serde only: no podwarden validation).
    fn pod(yaml: &str) -> Pod {
        serde_yaml_ng::from_str(yaml).unwrap_or_else(|e| panic!("test pod does not parse: {e}\n{yaml}"))
    }

    /// A pod whose spec is `spec` (YAML, indented by two) plus one plain
    /// container `c`.
    fn with_spec(spec: &str) -> Pod {
        pod(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n{spec}  containers:\n  - name: c\n    image: i\n"
        ))
    }

    /// A pod with one container `c` whose securityContext is `sc` (YAML,
    /// indented by six).
    fn with_sc(sc: &str) -> Pod {
        pod(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: i\n    securityContext:\n{sc}"
        ))
    }

    /// What one check says about a pod: (reason, detail), or None.
    fn run(check: Check, p: &Pod) -> Option<(String, String)> {
        check(&p.metadata, p.spec.as_ref().unwrap()).map(|f| (f.reason, f.detail))
    }

    #[track_caller]
    fn forbids(check: Check, p: &Pod, reason: &str, detail: &str) {
        assert_eq!(run(check, p), Some((reason.to_string(), detail.to_string())));
    }

    #[track_caller]
    fn allows(check: Check, p: &Pod) {
        assert_eq!(run(check, p), None);
    }

    const PLAIN: &str =
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: i\n";

    #[test]
    fn levels_parse_and_print() {
        for name in Level::NAMES {
            assert_eq!(Level::parse(name).unwrap().as_str(), *name);
        }
        assert_eq!(Level::parse("Baseline"), None);
        assert_eq!(Level::parse(""), None);
    }

    #[test]
    fn check_ids_and_order_per_level() {
        assert!(check_ids(Level::Privileged).is_empty());
        assert_eq!(
            check_ids(Level::Baseline),
            [
                "appArmorProfile",
                "capabilities_baseline",
                "hostNamespaces",
                "hostPathVolumes",
                "hostPorts",
                "hostProbesAndHostLifecycle",
                "privileged",
                "procMount",
                "seLinuxOptions",
                "seccompProfile_baseline",
                "sysctls",
                "windowsHostProcess"
            ]
        );
        assert_eq!(
            check_ids(Level::Restricted),
            [
                "appArmorProfile",
                "hostNamespaces",
                "hostPorts",
                "hostProbesAndHostLifecycle",
                "privileged",
                "seLinuxOptions",
                "sysctls",
                "windowsHostProcess",
                "allowPrivilegeEscalation",
                "capabilities_restricted",
                "procMount_restricted",
                "restrictedVolumes",
                "runAsNonRoot",
                "runAsUser",
                "seccompProfile_restricted"
            ]
        );
        // upstream sorts IDs bytewise (Go string order)
        let mut sorted: Vec<&str> = BASELINE.iter().map(|(id, _)| *id).collect();
        sorted.sort();
        assert_eq!(sorted, BASELINE.iter().map(|(id, _)| *id).collect::<Vec<_>>());
        let mut sorted: Vec<&str> = RESTRICTED.iter().map(|(id, _, _)| *id).collect();
        sorted.sort();
        assert_eq!(sorted, RESTRICTED.iter().map(|(id, _, _)| *id).collect::<Vec<_>>());
    }

    #[test]
    fn the_aggregate_message_is_upstreams() {
        let p = with_spec("  hostNetwork: true\n  volumes:\n  - name: v\n    hostPath:\n      path: /\n");
        assert_eq!(
            enforce(Level::Baseline, &p).unwrap_err().to_string(),
            r#"violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), hostPath volumes (volume "v")"#
        );
        assert_eq!(enforce(Level::Privileged, &p), Ok(()));
        assert_eq!(enforce(Level::Baseline, &pod(PLAIN)), Ok(()));
        // restricted: the overriding check stands where restricted checks go
        assert_eq!(
            enforce(Level::Restricted, &p).unwrap_err().to_string(),
            concat!(
                r#"violates PodSecurity "restricted:latest": host namespaces (hostNetwork=true), "#,
                r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), "#,
                r#"unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), "#,
                r#"restricted volume types (volume "v" uses restricted volume type "hostPath"), "#,
                r#"runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), "#,
                r#"seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#
            )
        );
        // a pod without a spec is judged as an empty one
        let bare = Pod::default();
        assert!(evaluate(Level::Restricted, &bare).is_empty());
    }

    #[test]
    fn a_restricted_pod_passes_every_level() {
        let p = pod(concat!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n",
            "  securityContext:\n    runAsNonRoot: true\n    seccompProfile:\n      type: RuntimeDefault\n",
            "  volumes:\n  - name: e\n    emptyDir: {}\n",
            "  containers:\n  - name: c\n    image: i\n    securityContext:\n      allowPrivilegeEscalation: false\n",
            "      capabilities:\n        drop: [ALL]\n        add: [NET_BIND_SERVICE]\n"
        ));
        for level in [Level::Privileged, Level::Baseline, Level::Restricted] {
            assert_eq!(enforce(level, &p), Ok(()), "{level}");
        }
    }

    #[test]
    fn app_armor() {
        forbids(
            app_armor_profile,
            &with_sc("      appArmorProfile:\n        type: Unconfined\n"),
            "forbidden AppArmor profile",
            r#"container "c" must not set AppArmor profile type to "Unconfined""#,
        );
        forbids(
            app_armor_profile,
            &with_spec("  securityContext:\n    appArmorProfile:\n      type: Unconfined\n"),
            "forbidden AppArmor profile",
            r#"pod must not set AppArmor profile type to "Unconfined""#,
        );
        let annotated = pod(&PLAIN.replace(
            "  name: p\n",
            "  name: p\n  annotations:\n    container.apparmor.security.beta.kubernetes.io/c: unconfined\n",
        ));
        forbids(
            app_armor_profile,
            &annotated,
            "forbidden AppArmor profile",
            r#"annotation must not set AppArmor profile type to "container.apparmor.security.beta.kubernetes.io/c="unconfined"""#,
        );
        allows(app_armor_profile, &with_sc("      appArmorProfile:\n        type: RuntimeDefault\n"));
        allows(
            app_armor_profile,
            &with_sc("      appArmorProfile:\n        type: Localhost\n        localhostProfile: x\n"),
        );
        let ok = PLAIN.replace(
            "  name: p\n",
            "  name: p\n  annotations:\n    container.apparmor.security.beta.kubernetes.io/c: localhost/x\n",
        );
        allows(app_armor_profile, &pod(&ok));
    }

    #[test]
    fn capabilities_baseline_check() {
        forbids(
            capabilities_baseline,
            &with_sc("      capabilities:\n        add: [ALL]\n"),
            "non-default capabilities",
            r#"container "c" must not include "ALL" in securityContext.capabilities.add"#,
        );
        forbids(
            capabilities_baseline,
            &with_sc("      capabilities:\n        add: [SYS_ADMIN, CHOWN, NET_RAW]\n"),
            "non-default capabilities",
            r#"container "c" must not include "NET_RAW", "SYS_ADMIN" in securityContext.capabilities.add"#,
        );
        allows(capabilities_baseline, &with_sc("      capabilities:\n        add: [CHOWN, NET_BIND_SERVICE]\n"));
    }

    #[test]
    fn host_namespaces_check() {
        forbids(
            host_namespaces,
            &with_spec("  hostNetwork: true\n  hostPID: true\n  hostIPC: true\n"),
            "host namespaces",
            "hostNetwork=true, hostPID=true, hostIPC=true",
        );
        forbids(host_namespaces, &with_spec("  hostPID: true\n"), "host namespaces", "hostPID=true");
        allows(host_namespaces, &with_spec("  hostNetwork: false\n"));
    }

    #[test]
    fn host_path_check() {
        forbids(
            host_path_volumes,
            &with_spec(
                "  volumes:\n  - name: a\n    hostPath:\n      path: /\n  - name: e\n    emptyDir: {}\n  - name: b\n    hostPath:\n      path: /etc\n",
            ),
            "hostPath volumes",
            r#"volumes "a", "b""#,
        );
        allows(host_path_volumes, &with_spec("  volumes:\n  - name: e\n    emptyDir: {}\n"));
    }

    #[test]
    fn host_ports_check() {
        let p = pod(concat!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n",
            "  - name: a\n    image: i\n    ports:\n    - containerPort: 80\n      hostPort: 8080\n    - containerPort: 81\n      hostPort: 80\n",
            "  - name: b\n    image: i\n    ports:\n    - containerPort: 90\n"
        ));
        forbids(host_ports, &p, "hostPort", r#"container "a" uses hostPorts 80, 8080"#);
        let one =
            pod(&PLAIN
                .replace("    image: i\n", "    image: i\n    ports:\n    - containerPort: 80\n      hostPort: 80\n"));
        forbids(host_ports, &one, "hostPort", r#"container "c" uses hostPort 80"#);
        let none = pod(&PLAIN.replace("    image: i\n", "    image: i\n    ports:\n    - containerPort: 80\n"));
        allows(host_ports, &none);
    }

    #[test]
    fn host_probes_check() {
        let p = pod(&PLAIN.replace(
            "    image: i\n",
            "    image: i\n    livenessProbe:\n      httpGet:\n        host: 10.0.0.1\n        port: 80\n    lifecycle:\n      preStop:\n        tcpSocket:\n          host: example.com\n          port: 80\n",
        ));
        forbids(
            host_probes_and_host_lifecycle,
            &p,
            "probe or lifecycle host",
            r#"container "c" uses probe or lifecycle hosts "10.0.0.1", "example.com""#,
        );
        let ok =
            pod(&PLAIN
                .replace("    image: i\n", "    image: i\n    readinessProbe:\n      tcpSocket:\n        port: 80\n"));
        allows(host_probes_and_host_lifecycle, &ok);
    }

    #[test]
    fn privileged_check() {
        let p = pod(concat!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n",
            "  initContainers:\n  - name: init\n    image: i\n    securityContext:\n      privileged: true\n",
            "  containers:\n  - name: c\n    image: i\n    securityContext:\n      privileged: true\n",
            "  - name: d\n    image: i\n    securityContext:\n      privileged: false\n"
        ));
        forbids(privileged, &p, "privileged", r#"containers "init", "c" must not set securityContext.privileged=true"#);
        forbids(
            privileged,
            &with_sc("      privileged: true\n"),
            "privileged",
            r#"container "c" must not set securityContext.privileged=true"#,
        );
        allows(privileged, &with_sc("      privileged: false\n"));
    }

    #[test]
    fn proc_mount_check() {
        let unmasked = with_sc("      procMount: Unmasked\n");
        forbids(
            proc_mount_baseline,
            &unmasked,
            "procMount",
            r#"container "c" must not set securityContext.procMount to "Unmasked""#,
        );
        allows(proc_mount_baseline, &with_sc("      procMount: Default\n"));
        // baseline relaxes it in a user namespace, restricted does not
        let userns = pod(&format!(
            "{}  hostUsers: false\n",
            PLAIN.replace("    image: i\n", "    image: i\n    securityContext:\n      procMount: Unmasked\n")
        ));
        allows(proc_mount_baseline, &userns);
        forbids(
            proc_mount,
            &userns,
            "procMount",
            r#"container "c" must not set securityContext.procMount to "Unmasked""#,
        );
    }

    #[test]
    fn se_linux_check() {
        forbids(
            se_linux_options,
            &with_sc("      seLinuxOptions:\n        type: spc_t\n"),
            "seLinuxOptions",
            r#"container "c" set forbidden securityContext.seLinuxOptions: type "spc_t""#,
        );
        forbids(
            se_linux_options,
            &with_spec("  securityContext:\n    seLinuxOptions:\n      user: u\n      role: r\n"),
            "seLinuxOptions",
            "pod set forbidden securityContext.seLinuxOptions: user may not be set; role may not be set",
        );
        allows(
            se_linux_options,
            &with_sc("      seLinuxOptions:\n        type: container_engine_t\n        level: s0:c1\n"),
        );
    }

    #[test]
    fn seccomp_baseline_check() {
        forbids(
            seccomp_profile_baseline,
            &pod(&format!(
                "{}  securityContext:\n    seccompProfile:\n      type: Unconfined\n",
                PLAIN.replace(
                    "    image: i\n",
                    "    image: i\n    securityContext:\n      seccompProfile:\n        type: Unconfined\n"
                )
            )),
            "seccompProfile",
            r#"pod and container "c" must not set securityContext.seccompProfile.type to "Unconfined""#,
        );
        allows(seccomp_profile_baseline, &with_sc("      seccompProfile:\n        type: RuntimeDefault\n"));
        allows(seccomp_profile_baseline, &pod(PLAIN));
    }

    #[test]
    fn sysctls_check() {
        forbids(
            sysctls,
            &with_spec(
                "  securityContext:\n    sysctls:\n    - name: kernel.msgmax\n      value: \"1\"\n    - name: net.ipv4.tcp_rmem\n      value: \"4096 131072 6291456\"\n    - name: net.core.somaxconn\n      value: \"1\"\n",
            ),
            "forbidden sysctls",
            "kernel.msgmax, net.core.somaxconn",
        );
        allows(
            sysctls,
            &with_spec("  securityContext:\n    sysctls:\n    - name: net.ipv4.tcp_syncookies\n      value: \"1\"\n"),
        );
    }

    #[test]
    fn windows_host_process_check() {
        forbids(
            windows_host_process,
            &with_sc("      windowsOptions:\n        hostProcess: true\n"),
            "hostProcess",
            r#"container "c" must not set securityContext.windowsOptions.hostProcess=true"#,
        );
        allows(windows_host_process, &with_sc("      windowsOptions:\n        hostProcess: false\n"));
    }

    #[test]
    fn allow_privilege_escalation_check() {
        forbids(
            allow_privilege_escalation,
            &pod(PLAIN),
            "allowPrivilegeEscalation != false",
            r#"container "c" must set securityContext.allowPrivilegeEscalation=false"#,
        );
        forbids(
            allow_privilege_escalation,
            &with_sc("      allowPrivilegeEscalation: true\n"),
            "allowPrivilegeEscalation != false",
            r#"container "c" must set securityContext.allowPrivilegeEscalation=false"#,
        );
        allows(allow_privilege_escalation, &with_sc("      allowPrivilegeEscalation: false\n"));
        allows(allow_privilege_escalation, &with_spec("  os:\n    name: windows\n"));
    }

    #[test]
    fn capabilities_restricted_check() {
        forbids(
            capabilities_restricted,
            &with_sc("      capabilities:\n        drop: [NET_RAW]\n        add: [SYS_ADMIN, NET_BIND_SERVICE]\n"),
            "unrestricted capabilities",
            r#"container "c" must set securityContext.capabilities.drop=["ALL"]; container "c" must not include "SYS_ADMIN" in securityContext.capabilities.add"#,
        );
        allows(
            capabilities_restricted,
            &with_sc("      capabilities:\n        drop: [ALL]\n        add: [NET_BIND_SERVICE]\n"),
        );
    }

    #[test]
    fn restricted_volumes_check() {
        forbids(
            restricted_volumes,
            &with_spec(
                "  volumes:\n  - name: h\n    hostPath:\n      path: /\n  - name: s\n    secret:\n      secretName: x\n  - name: n\n    nfs:\n      server: s\n      path: /\n",
            ),
            "restricted volume types",
            r#"volumes "h", "n" use restricted volume types "hostPath", "nfs""#,
        );
        allows(
            restricted_volumes,
            &with_spec(
                "  volumes:\n  - name: e\n    emptyDir: {}\n  - name: i\n    image:\n      reference: busybox\n",
            ),
        );
    }

    #[test]
    fn run_as_non_root_check() {
        forbids(
            run_as_non_root,
            &pod(PLAIN),
            "runAsNonRoot != true",
            r#"pod or container "c" must set securityContext.runAsNonRoot=true"#,
        );
        forbids(
            run_as_non_root,
            &with_sc("      runAsNonRoot: false\n"),
            "runAsNonRoot != true",
            r#"container "c" must not set securityContext.runAsNonRoot=false"#,
        );
        allows(run_as_non_root, &with_spec("  securityContext:\n    runAsNonRoot: true\n"));
        allows(run_as_non_root, &with_spec("  hostUsers: false\n"));
    }

    #[test]
    fn run_as_user_check() {
        forbids(
            run_as_user,
            &pod(&format!(
                "{}  securityContext:\n    runAsUser: 0\n",
                PLAIN.replace("    image: i\n", "    image: i\n    securityContext:\n      runAsUser: 0\n")
            )),
            "runAsUser=0",
            r#"pod and container "c" must not set runAsUser=0"#,
        );
        allows(run_as_user, &with_sc("      runAsUser: 1000\n"));
        allows(run_as_user, &pod(PLAIN));
    }

    #[test]
    fn seccomp_restricted_check() {
        forbids(
            seccomp_profile_restricted,
            &pod(PLAIN),
            "seccompProfile",
            r#"pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#,
        );
        forbids(
            seccomp_profile_restricted,
            &with_sc("      seccompProfile:\n        type: Unconfined\n"),
            "seccompProfile",
            r#"container "c" must not set securityContext.seccompProfile.type to "Unconfined""#,
        );
        allows(
            seccomp_profile_restricted,
            &with_spec("  securityContext:\n    seccompProfile:\n      type: RuntimeDefault\n"),
        );
    }
}

//! A container's security settings from the pod's and its own security
//! contexts, with the node's defaults (`seccompDefault`, AppArmor): user
//! and groups, capabilities, seccomp and AppArmor profiles.

use crate::model::{self, Container, Pod};
use crate::pod::phases::PodSync;
use crate::runtime::{Security, SecurityProfile};

/// The node's security settings that fill what a pod leaves unset.
pub struct SecurityDefaults {
    /// `seccompDefault`.
    pub seccomp_default: bool,
    /// Where `Localhost` seccomp profiles live (`<rootDir>/seccomp`).
    pub seccomp_root: std::path::PathBuf,
    pub apparmor_enabled: bool,
}

impl PodSync {
    pub(super) fn security_defaults(&self) -> SecurityDefaults {
        SecurityDefaults {
            seccomp_default: self.cfg.seccomp_default,
            seccomp_root: self.cfg.root_dir.join("seccomp"),
            apparmor_enabled: self.cfg.apparmor_enabled,
        }
    }
}

/// The pod's `fsGroup` then its `supplementalGroups`, the groups every
/// container's processes get besides their own.
pub fn supplemental_groups(pod: &Pod) -> Vec<i64> {
    let psc = model::spec(pod).and_then(|s| s.security_context.as_ref());
    let fs_group = psc.and_then(|s| s.fs_group);
    fs_group.into_iter().chain(psc.and_then(|s| s.supplemental_groups.clone()).unwrap_or_default()).collect()
}

/// A `seccompProfile` as the runtime gets it: `Localhost` names a file
/// under the seccomp root; unset is `RuntimeDefault` with `seccompDefault`,
/// else `Unconfined` (the kubelet's rules).
pub fn seccomp_profile(
    p: Option<&k8s_openapi::api::core::v1::SeccompProfile>,
    d: &SecurityDefaults,
) -> SecurityProfile {
    match p.map(|p| (p.type_.as_str(), p.localhost_profile.as_deref())) {
        None if d.seccomp_default => SecurityProfile::RuntimeDefault,
        None => SecurityProfile::Unconfined,
        Some(("RuntimeDefault", _)) => SecurityProfile::RuntimeDefault,
        Some(("Localhost", Some(f))) => SecurityProfile::Localhost(d.seccomp_root.join(f).display().to_string()),
        Some(_) => SecurityProfile::Unconfined,
    }
}

/// The AppArmor profile container `c` asks for: its
/// `securityContext.appArmorProfile`, else the annotation
/// `container.apparmor.security.beta.kubernetes.io/<name>`, else the
/// pod's; `None` when none is set.
pub fn apparmor_profile(pod: &Pod, c: &Container) -> Option<SecurityProfile> {
    let field = |p: &k8s_openapi::api::core::v1::AppArmorProfile| match p.type_.as_str() {
        "RuntimeDefault" => SecurityProfile::RuntimeDefault,
        "Localhost" => SecurityProfile::Localhost(p.localhost_profile.clone().unwrap_or_default()),
        _ => SecurityProfile::Unconfined,
    };
    let annotation = |v: &str| match v {
        "runtime/default" => SecurityProfile::RuntimeDefault,
        "unconfined" => SecurityProfile::Unconfined,
        v => SecurityProfile::Localhost(v.strip_prefix("localhost/").unwrap_or(v).to_string()),
    };
    let psc = model::spec(pod).and_then(|s| s.security_context.as_ref());
    c.security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.as_ref())
        .map(field)
        .or_else(|| {
            let key = format!("{APPARMOR_ANNOTATION_PREFIX}{}", c.name);
            pod.metadata.annotations.as_ref().and_then(|a| a.get(&key)).map(|v| annotation(v))
        })
        .or_else(|| psc.and_then(|s| s.app_armor_profile.as_ref()).map(field))
}

pub use crate::model::manifest::APPARMOR_ANNOTATION_PREFIX;

/// Where the kernel lists the AppArmor profiles it has loaded, one
/// `<name> (<mode>)` a line.
pub const APPARMOR_PROFILES: &str = "/sys/kernel/security/apparmor/profiles";

/// Most of the profile list read (a machine has a few hundred profiles).
pub const APPARMOR_PROFILES_MAX: u64 = 4 << 20;

/// Whether `list` (the kernel's profile list) names profile `name`.
pub fn apparmor_profile_listed(list: &str, name: &str) -> bool {
    list.lines().any(|l| l.rsplit_once(" (").is_some_and(|(n, _)| n == name))
}

/// Security settings from the pod's and the container's security contexts
/// (the container's win), with the node's defaults.
pub fn security(pod: &Pod, c: &Container, d: &SecurityDefaults) -> Security {
    let psc = model::spec(pod).and_then(|s| s.security_context.as_ref());
    let csc = c.security_context.as_ref();
    let caps = csc.and_then(|s| s.capabilities.as_ref());
    let seccomp = csc.and_then(|s| s.seccomp_profile.as_ref()).or(psc.and_then(|s| s.seccomp_profile.as_ref()));
    Security {
        run_as_user: csc.and_then(|s| s.run_as_user).or(psc.and_then(|s| s.run_as_user)),
        run_as_group: csc.and_then(|s| s.run_as_group).or(psc.and_then(|s| s.run_as_group)),
        supplemental_groups: supplemental_groups(pod),
        seccomp: seccomp_profile(seccomp, d),
        apparmor: if d.apparmor_enabled { apparmor_profile(pod, c) } else { None },
        privileged: csc.and_then(|s| s.privileged).unwrap_or(false),
        readonly_rootfs: csc.and_then(|s| s.read_only_root_filesystem).unwrap_or(false),
        add_capabilities: caps.and_then(|c| c.add.clone()).unwrap_or_default(),
        drop_capabilities: caps.and_then(|c| c.drop.clone()).unwrap_or_default(),
        no_new_privs: csc.and_then(|s| s.allow_privilege_escalation) == Some(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_list_as_the_kernel_writes_it() {
        let list = "cri-containerd.apparmor.d (enforce)\n/usr/bin/man (enforce)\npodwarden-test (complain)\n\
                    with space (x) (enforce)\n";
        for name in ["cri-containerd.apparmor.d", "/usr/bin/man", "podwarden-test", "with space (x)"] {
            assert!(apparmor_profile_listed(list, name), "{name}");
        }
        for name in ["podwarden", "enforce", "", "man"] {
            assert!(!apparmor_profile_listed(list, name), "{name}");
        }
    }

    fn pod(yaml: &str) -> Pod {
        crate::model::manifest::parse("m.yaml", yaml.as_bytes(), "n").unwrap()
    }

    #[test]
    fn a_containers_profile_from_its_field_then_the_annotation_then_the_pod() {
        let base = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n    \
                    container.apparmor.security.beta.kubernetes.io/b: localhost/from-annotation\n\
                    spec:\n  containers:\n  \
                    - name: a\n    image: busybox\n    securityContext:\n      appArmorProfile: {type: Unconfined}\n  \
                    - name: b\n    image: busybox\n  - name: c\n    image: busybox\n";
        let p = pod(base);
        let spec = crate::model::spec(&p).unwrap();
        let of = |i: usize| apparmor_profile(&p, &spec.containers[i]);
        assert_eq!(of(0), Some(SecurityProfile::Unconfined));
        assert_eq!(of(1), Some(SecurityProfile::Localhost("from-annotation".into())));
        assert_eq!(of(2), None);
        let p = pod(&base
            .replace("spec:\n", "spec:\n  securityContext:\n    appArmorProfile: {type: RuntimeDefault}\n")
            .replace(
                "    container.apparmor.security.beta.kubernetes.io/b: localhost/from-annotation\n",
                "    container.apparmor.security.beta.kubernetes.io/b: runtime/default\n",
            ));
        let spec = crate::model::spec(&p).unwrap();
        assert_eq!(apparmor_profile(&p, &spec.containers[0]), Some(SecurityProfile::Unconfined));
        assert_eq!(apparmor_profile(&p, &spec.containers[2]), Some(SecurityProfile::RuntimeDefault));
        let none =
            pod("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: a\n    image: b\n");
        assert_eq!(apparmor_profile(&none, &crate::model::spec(&none).unwrap().containers[0]), None);
    }
}

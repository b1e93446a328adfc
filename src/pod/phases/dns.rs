//! A pod's resolver config as the kubelet forms it on a node without
//! cluster DNS: `dnsPolicy` picks the base (the host's `resolvConf` for
//! `Default`, and for `ClusterFirst`, which falls back to it with a
//! `MissingClusterDNS` warning; nothing for `None`), `dnsConfig` is merged
//! in (nameservers and searches appended without duplicates, options by
//! name, the pod's winning), and the kubelet's limits are applied (3
//! nameservers, 32 search domains of at most 2048 characters together),
//! each cut reported as a `DNSConfigForming` warning.

use std::path::Path;

use crate::model::{self, Pod};
use crate::runtime::DnsConfig;

/// The most nameservers a resolver uses (glibc's MAXNS).
pub const MAX_NAMESERVERS: usize = 3;
/// The most search domains, and their total length, the kubelet passes on.
pub const MAX_SEARCHES: usize = 32;
pub const MAX_SEARCH_CHARS: usize = 2048;
/// The most of `resolvConf` read: a resolver config is a few lines.
const MAX_RESOLV_CONF_BYTES: u64 = 64 * 1024;

/// A warning event to record about the pod's DNS: `(reason, message)`.
pub type Warning = (&'static str, String);

/// The resolver config of `pod`, and what to warn about.
pub fn pod_dns(pod: &Pod, resolv_conf: &Path) -> (DnsConfig, Vec<Warning>) {
    let spec = model::spec(pod);
    let policy = spec.and_then(|s| s.dns_policy.as_deref()).unwrap_or("ClusterFirst");
    let mut warnings = Vec::new();
    let mut dns = match policy {
        "None" => DnsConfig::default(),
        "Default" => host(resolv_conf),
        // ClusterFirst is Default for a host-network pod; otherwise, and
        // for ClusterFirstWithHostNet, it wants cluster DNS, which a node
        // on its own does not have: the kubelet falls back to Default
        _ => {
            if policy == "ClusterFirstWithHostNet" || !model::host_network(pod) {
                warnings.push((
                    "MissingClusterDNS",
                    format!(
                        "pod: \"{}\". kubelet does not have ClusterDNS IP configured and cannot create Pod using \
                         \"ClusterFirst\" policy. Falling back to \"Default\" policy.",
                        pod_text(pod)
                    ),
                ));
            }
            host(resolv_conf)
        }
    };
    if let Some(c) = spec.and_then(|s| s.dns_config.as_ref()) {
        for s in c.nameservers.iter().flatten() {
            if !dns.servers.contains(s) {
                dns.servers.push(s.clone());
            }
        }
        for s in c.searches.iter().flatten() {
            if !dns.searches.contains(s) {
                dns.searches.push(s.clone());
            }
        }
        for o in c.options.iter().flatten() {
            let name = o.name.clone().unwrap_or_default();
            let text = match &o.value {
                Some(v) => format!("{name}:{v}"),
                None => name.clone(),
            };
            match dns.options.iter_mut().find(|x| option_name(x) == name) {
                Some(old) => *old = text,
                None => dns.options.push(text),
            }
        }
    }
    if dns.servers.len() > MAX_NAMESERVERS {
        dns.servers.truncate(MAX_NAMESERVERS);
        warnings.push((
            "DNSConfigForming",
            format!(
                "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line \
                 is: {}",
                dns.servers.join(" ")
            ),
        ));
    }
    let mut chars = 0;
    let within = dns
        .searches
        .iter()
        .take_while(|s| {
            chars += s.len() + 1;
            chars - 1 <= MAX_SEARCH_CHARS
        })
        .count()
        .min(MAX_SEARCHES);
    if within < dns.searches.len() {
        dns.searches.truncate(within);
        warnings.push((
            "DNSConfigForming",
            format!(
                "Search Line limits were exceeded, some search paths have been omitted, the applied search line \
                 is: {}",
                dns.searches.join(" ")
            ),
        ));
    }
    (dns, warnings)
}

/// `name:value` → `name`.
fn option_name(option: &str) -> &str {
    option.split(':').next().unwrap_or(option)
}

/// `name_namespace(uid)`, as the kubelet names a pod in messages.
fn pod_text(pod: &Pod) -> String {
    format!("{}_{}({})", model::name(pod), model::namespace(pod), model::uid(pod))
}

/// The host's resolver config: its `nameserver` lines, the last `search`
/// (or `domain`) line, its `options`. An unreadable file gives nothing
/// (logged): the pod then resolves only what its dnsConfig names.
pub fn host(path: &Path) -> DnsConfig {
    match crate::base::fsutil::read_host_file(path, MAX_RESOLV_CONF_BYTES) {
        Ok(text) => parse_resolv_conf(&text),
        Err(e) => {
            log::warn!("resolvConf {}: {e}; pods get no nameserver from the host", path.display());
            DnsConfig::default()
        }
    }
}

/// Parse resolv.conf text as the kubelet does (`#`/`;` comments; the last
/// search line wins).
pub fn parse_resolv_conf(text: &str) -> DnsConfig {
    let mut dns = DnsConfig::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => dns.servers.extend(words.next().map(String::from)),
            Some("search") | Some("domain") => dns.searches = words.map(String::from).collect(),
            Some("options") => {
                for o in words {
                    match dns.options.iter_mut().find(|x| option_name(x) == option_name(o)) {
                        Some(old) => *old = o.to_string(),
                        None => dns.options.push(o.to_string()),
                    }
                }
            }
            _ => {}
        }
    }
    dns
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: &str) -> Pod {
        let y = format!("metadata: {{name: web, namespace: ns, uid: u1}}\nspec:\n  containers: [{{name: c}}]\n{spec}");
        let v: serde_json::Value = serde_yaml_ng::from_str(&y).unwrap();
        serde_json::from_value(v).unwrap()
    }

    fn host_file(text: &str) -> std::path::PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("pw-resolv-{}-{n}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    const HOST: &str = "# host\nnameserver 10.0.0.1\nnameserver 10.0.0.2 ; second\nsearch old.example\nsearch lan example.org\noptions ndots:2 edns0\n";

    #[test]
    fn the_host_file_is_read_as_the_kubelet_reads_it() {
        let d = parse_resolv_conf(HOST);
        assert_eq!(d.servers, ["10.0.0.1", "10.0.0.2"]);
        assert_eq!(d.searches, ["lan", "example.org"]);
        assert_eq!(d.options, ["ndots:2", "edns0"]);
    }

    #[test]
    fn policies_and_the_pods_dns_config() {
        let f = host_file(HOST);
        // ClusterFirst (the default) falls back to the host's, with the
        // kubelet's warning; the pod's dnsConfig is merged in
        let (d, w) = pod_dns(
            &pod(
                "  dnsConfig:\n    nameservers: [10.0.0.2, 1.1.1.1]\n    searches: [pod.local, lan]\n    options: [{name: ndots, value: \"5\"}, {name: rotate}]\n",
            ),
            &f,
        );
        assert_eq!(d.servers, ["10.0.0.1", "10.0.0.2", "1.1.1.1"]);
        assert_eq!(d.searches, ["lan", "example.org", "pod.local"]);
        assert_eq!(d.options, ["ndots:5", "edns0", "rotate"]);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].0, "MissingClusterDNS");
        assert_eq!(
            w[0].1,
            "pod: \"web_ns(u1)\". kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy."
        );
        // Default, and ClusterFirst on the host network: the host's, no warning
        for spec in ["  dnsPolicy: Default\n", "  hostNetwork: true\n"] {
            let (d, w) = pod_dns(&pod(spec), &f);
            assert_eq!((d.servers.len(), w.len()), (2, 0), "{spec}");
        }
        // ClusterFirstWithHostNet wants cluster DNS: the warning
        let (_, w) = pod_dns(&pod("  hostNetwork: true\n  dnsPolicy: ClusterFirstWithHostNet\n"), &f);
        assert_eq!(w.len(), 1);
        // None: dnsConfig alone
        let (d, w) = pod_dns(&pod("  dnsPolicy: None\n  dnsConfig: {nameservers: [9.9.9.9], searches: [a.b]}\n"), &f);
        assert_eq!(
            (d.servers, d.searches, d.options, w.len()),
            (vec!["9.9.9.9".to_string()], vec!["a.b".to_string()], vec![], 0)
        );
        // an unreadable host file: nothing from the host
        let (d, _) = pod_dns(&pod("  dnsPolicy: Default\n"), Path::new("/nonexistent/resolv.conf"));
        assert!(d.servers.is_empty());
        let _ = std::fs::remove_file(f);
    }

    #[test]
    fn limits_are_applied_and_reported() {
        let f = host_file("nameserver 1.0.0.1\nnameserver 1.0.0.2\nnameserver 1.0.0.3\n");
        let searches: Vec<String> = (0..40).map(|i| format!("d{i}.example")).collect();
        let spec = format!(
            "  dnsPolicy: Default\n  dnsConfig:\n    nameservers: [1.0.0.4]\n    searches: [{}]\n",
            searches.join(", ")
        );
        let (d, w) = pod_dns(&pod(&spec), &f);
        assert_eq!(d.servers, ["1.0.0.1", "1.0.0.2", "1.0.0.3"]);
        assert_eq!(d.searches.len(), MAX_SEARCHES);
        assert_eq!(w[0], ("DNSConfigForming", "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 1.0.0.1 1.0.0.2 1.0.0.3".to_string()));
        assert!(w[1].1.starts_with("Search Line limits were exceeded, some search paths have been omitted, the applied search line is: d0.example d1.example"));
        // the total length counts too
        let long: Vec<String> = (0..10).map(|i| format!("{i}{}", "x".repeat(250))).collect();
        let (d, _) =
            pod_dns(&pod(&format!("  dnsPolicy: None\n  dnsConfig:\n    searches: [{}]\n", long.join(", "))), &f);
        assert_eq!(d.searches.len(), 8, "8 x 252 = 2016 characters with separators fit, 9 do not");
        let _ = std::fs::remove_file(f);
    }
}

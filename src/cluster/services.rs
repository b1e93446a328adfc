//! The `cluster-services` thread and the service environment variables.
//!
//! The kubelet gives every container the `kubernetes` service's variables
//! (`KUBERNETES_SERVICE_HOST`, `KUBERNETES_SERVICE_PORT`, ...) and, with
//! `enableServiceLinks` (the default), those of every service of the pod's
//! namespace that has a cluster IP: `NAME_SERVICE_HOST`,
//! `NAME_SERVICE_PORT`, `NAME_SERVICE_PORT_PORTNAME`, and Docker's link
//! variables `NAME_PORT`, `NAME_PORT_P_PROTO`, `..._PROTO`, `..._PORT`,
//! `..._ADDR`. The services are listed and watched (all namespaces, as the
//! Node authorizer allows a node) and kept here, a few fields each.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

use super::Shared;

/// A service as its variables need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub cluster_ip: String,
    /// (name, port, protocol), in order.
    pub ports: Vec<(String, i64, String)>,
}

/// The services by (namespace, name).
pub type Services = BTreeMap<(String, String), Service>;

/// A service as the API gives it; `None` without a cluster IP (headless,
/// or not a service).
fn read(v: &Value) -> Option<((String, String), Option<Service>)> {
    let ns = v["metadata"]["namespace"].as_str()?.to_string();
    let name = v["metadata"]["name"].as_str()?.to_string();
    let ip = v["spec"]["clusterIP"].as_str().unwrap_or("");
    let svc = (!ip.is_empty() && ip != "None").then(|| Service {
        cluster_ip: ip.to_string(),
        ports: v["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                (
                    p["name"].as_str().unwrap_or("").to_string(),
                    p["port"].as_i64().unwrap_or(0),
                    p["protocol"].as_str().filter(|s| !s.is_empty()).unwrap_or("TCP").to_string(),
                )
            })
            .collect(),
    });
    Some(((ns, name), svc))
}

/// `my-svc` → `MY_SVC`.
fn var_name(s: &str) -> String {
    s.to_ascii_uppercase().replace('-', "_")
}

/// The variables of a pod in `namespace`, as the kubelet makes them.
pub fn env_for(services: &Services, namespace: &str, links: bool) -> Vec<(String, String)> {
    let mut chosen: BTreeMap<&str, &Service> = BTreeMap::new();
    for ((ns, name), s) in services {
        if ns == "default" && name == "kubernetes" {
            chosen.entry(name).or_insert(s);
        } else if ns == namespace && links {
            chosen.insert(name, s);
        }
    }
    let mut out = Vec::new();
    for (name, s) in chosen {
        let prefix = var_name(name);
        out.push((format!("{prefix}_SERVICE_HOST"), s.cluster_ip.clone()));
        if let Some((_, port, _)) = s.ports.first() {
            out.push((format!("{prefix}_SERVICE_PORT"), port.to_string()));
        }
        for (pname, port, _) in &s.ports {
            if !pname.is_empty() {
                out.push((format!("{prefix}_SERVICE_PORT_{}", var_name(pname)), port.to_string()));
            }
        }
        for (i, (_, port, proto)) in s.ports.iter().enumerate() {
            let host_port = if s.cluster_ip.contains(':') {
                format!("[{}]:{port}", s.cluster_ip)
            } else {
                format!("{}:{port}", s.cluster_ip)
            };
            let lower = proto.to_ascii_lowercase();
            let url = format!("{lower}://{host_port}");
            if i == 0 {
                out.push((format!("{prefix}_PORT"), url.clone()));
            }
            let p = format!("{prefix}_PORT_{port}_{}", proto.to_ascii_uppercase());
            out.push((p.clone(), url));
            out.push((format!("{p}_PROTO"), lower));
            out.push((format!("{p}_PORT"), port.to_string()));
            out.push((format!("{p}_ADDR"), s.cluster_ip.clone()));
        }
    }
    out
}

/// The `cluster-services` thread's loop: the services listed and watched
/// into `services`; returns when `shared` stops.
pub fn run(shared: Arc<Shared>, services: Arc<Mutex<Services>>) {
    let mut store = ServiceStore(&services);
    super::reflector::Reflector { what: "services", collection: "/api/v1/services" }.run(&shared, &mut store, &|| true);
}

/// The reflector's store of the services.
struct ServiceStore<'a>(&'a Mutex<Services>);

impl super::reflector::Store for ServiceStore<'_> {
    fn replace(&mut self, items: Vec<Value>) {
        *self.0.lock() = items.iter().filter_map(read).filter_map(|(k, s)| Some((k, s?))).collect();
    }

    fn upsert(&mut self, object: Value) {
        if let Some((k, s)) = read(&object) {
            let mut all = self.0.lock();
            match s {
                Some(s) => all.insert(k, s),
                None => all.remove(&k),
            };
        }
    }

    fn delete(&mut self, object: Value) {
        if let Some((k, _)) = read(&object) {
            self.0.lock().remove(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_kubernetes_service_always_and_the_namespace_s_with_links() {
        let mut all = Services::new();
        for v in [
            json!({"metadata": {"namespace": "default", "name": "kubernetes"}, "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}}),
            json!({"metadata": {"namespace": "app", "name": "my-db"}, "spec": {"clusterIP": "10.96.0.9", "ports": [{"port": 5432}, {"name": "metrics", "port": 9100, "protocol": "UDP"}]}}),
            json!({"metadata": {"namespace": "app", "name": "headless"}, "spec": {"clusterIP": "None"}}),
            json!({"metadata": {"namespace": "other", "name": "x"}, "spec": {"clusterIP": "10.96.0.7", "ports": [{"port": 1}]}}),
        ] {
            if let Some((k, Some(s))) = read(&v) {
                all.insert(k, s);
            }
        }
        let env: BTreeMap<String, String> = env_for(&all, "app", true).into_iter().collect();
        assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
        assert_eq!(env["KUBERNETES_SERVICE_PORT"], "443");
        assert_eq!(env["KUBERNETES_SERVICE_PORT_HTTPS"], "443");
        assert_eq!(env["KUBERNETES_PORT"], "tcp://10.96.0.1:443");
        assert_eq!(env["KUBERNETES_PORT_443_TCP_ADDR"], "10.96.0.1");
        assert_eq!(env["MY_DB_SERVICE_HOST"], "10.96.0.9");
        assert_eq!(env["MY_DB_SERVICE_PORT"], "5432");
        assert_eq!(env["MY_DB_SERVICE_PORT_METRICS"], "9100");
        assert_eq!(env["MY_DB_PORT"], "tcp://10.96.0.9:5432");
        assert_eq!(env["MY_DB_PORT_9100_UDP"], "udp://10.96.0.9:9100");
        assert_eq!(env["MY_DB_PORT_9100_UDP_PROTO"], "udp");
        assert!(!env.keys().any(|k| k.starts_with("HEADLESS") || k.starts_with("X_")), "{env:?}");
        let no_links: Vec<String> = env_for(&all, "app", false).into_iter().map(|(k, _)| k).collect();
        assert!(no_links.iter().all(|k| k.starts_with("KUBERNETES_")), "{no_links:?}");
    }
}

//! Quality of service, as the kubelet derives it from requests and limits:
//! the pod's QoS class and each container's OOM score adjustment. Pure:
//! the machine's memory capacity is an argument.

use std::collections::BTreeMap;

use super::{Container, Pod, quantity};

/// A pod's QoS class (`status.qosClass`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

/// The OOM score adjustment of Guaranteed pods' containers (and of
/// node-critical pods').
pub const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
/// The OOM score adjustment of BestEffort pods' containers.
pub const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;
/// The OOM score adjustment the kubelet gives itself (podwarden's unit
/// sets it for podwarden).
pub const AGENT_OOM_SCORE_ADJ: i64 = -999;

/// The compute resources QoS looks at.
const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// A quantity of `resource` in its unit (millicores, bytes); 0 when it does
/// not parse (validation refused those already).
pub fn amount(resource: &str, q: &str) -> i64 {
    let r = if resource == "cpu" { quantity::cpu_millis(q) } else { quantity::bytes(q) };
    r.unwrap_or(0)
}

/// A container's limits of `QOS_RESOURCES` above zero.
fn limits(c: &Container) -> BTreeMap<&'static str, i64> {
    let l = c.resources.as_ref().and_then(|r| r.limits.as_ref());
    QOS_RESOURCES.iter().filter_map(|k| Some((*k, amount(k, &l?.get(*k)?.0)))).filter(|(_, v)| *v > 0).collect()
}

/// A container's requests of `QOS_RESOURCES` above zero, a missing request
/// taking its limit (the API server's defaulting, which the kubelet applies
/// to static pods too).
fn requests(c: &Container) -> BTreeMap<&'static str, i64> {
    let r = c.resources.as_ref();
    let req = r.and_then(|r| r.requests.as_ref());
    let lim = r.and_then(|r| r.limits.as_ref());
    QOS_RESOURCES
        .iter()
        .filter_map(|k| {
            let q = req.and_then(|m| m.get(*k)).or_else(|| lim.and_then(|m| m.get(*k)))?;
            Some((*k, amount(k, &q.0)))
        })
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// One container's request of `resource` (millicores for CPU, bytes
/// otherwise): the request, else the limit (as the API server defaults
/// it).
fn container_request(c: &Container, resource: &str) -> i64 {
    let Some(r) = c.resources.as_ref() else { return 0 };
    let q =
        r.requests.as_ref().and_then(|m| m.get(resource)).or_else(|| r.limits.as_ref().and_then(|m| m.get(resource)));
    q.map_or(0, |q| amount(resource, &q.0))
}

/// A pod's request of `resource`, as the kubelet sums it: the app
/// containers and the sidecars together, or, if more, what initialization
/// needs at its peak (each init container with the sidecars started
/// before it).
pub fn pod_request(pod: &Pod, resource: &str) -> i64 {
    // saturating: a pod asking for 8Ei must not overflow the sums
    let mut sum = super::containers(pod).iter().fold(0i64, |a, c| a.saturating_add(container_request(c, resource)));
    let (mut sidecars, mut peak) = (0i64, 0i64);
    for c in super::init_containers(pod) {
        let r = container_request(c, resource);
        let now = if super::is_sidecar(c) {
            sum = sum.saturating_add(r);
            sidecars = sidecars.saturating_add(r);
            sidecars
        } else {
            sidecars.saturating_add(r)
        };
        peak = peak.max(now);
    }
    sum.max(peak)
}

/// A pod's CPU (millicores) and memory (bytes) requests ([`pod_request`]).
pub fn pod_requests(pod: &Pod) -> (i64, i64) {
    (pod_request(pod, "cpu"), pod_request(pod, "memory"))
}

/// The resources besides CPU and memory that a pod's containers ask for
/// (`ephemeral-storage`, `hugepages-<size>`), each once.
pub fn other_resources(pod: &Pod) -> std::collections::BTreeSet<String> {
    super::all_containers(pod)
        .filter_map(|c| c.resources.as_ref())
        .flat_map(|r| r.requests.iter().chain(r.limits.iter()).flat_map(|m| m.keys()))
        .filter(|k| !QOS_RESOURCES.contains(&k.as_str()))
        .cloned()
        .collect()
}

/// The pod's QoS class, over its app and init containers: BestEffort when
/// none requests or limits CPU or memory; Guaranteed when every container
/// limits both and every request equals its limit; Burstable otherwise.
pub fn qos_class(pod: &Pod) -> QosClass {
    let mut sum_req: BTreeMap<&str, i64> = BTreeMap::new();
    let mut sum_lim: BTreeMap<&str, i64> = BTreeMap::new();
    let mut guaranteed = true;
    for c in super::all_containers(pod) {
        for (k, v) in requests(c) {
            let e = sum_req.entry(k).or_default();
            *e = e.saturating_add(v);
        }
        let l = limits(c);
        if l.len() < QOS_RESOURCES.len() {
            guaranteed = false;
        }
        for (k, v) in l {
            let e = sum_lim.entry(k).or_default();
            *e = e.saturating_add(v);
        }
    }
    if sum_req.is_empty() && sum_lim.is_empty() {
        return QosClass::BestEffort;
    }
    if guaranteed && sum_req.iter().all(|(k, v)| sum_lim.get(k) == Some(v)) && sum_req.len() == sum_lim.len() {
        return QosClass::Guaranteed;
    }
    QosClass::Burstable
}

/// A node-critical pod (a static pod of `system-node-critical` priority):
/// the last the OOM killer should pick.
fn node_critical(pod: &Pod) -> bool {
    super::spec(pod).and_then(|s| s.priority_class_name.as_deref()) == Some("system-node-critical")
}

/// The memory request of `c` in bytes (its limit when it has no request).
fn memory_request(c: &Container) -> i64 {
    requests(c).get("memory").copied().unwrap_or(0)
}

/// The OOM score adjustment of container `c` of `pod` on a machine with
/// `memory_capacity` bytes, as the kubelet computes it: -997 for
/// Guaranteed and node-critical pods, 1000 for BestEffort, and for
/// Burstable `1000 - 1000 × request / capacity`, kept between 3 (above any
/// Guaranteed container) and 999 (below BestEffort). A sidecar takes the
/// lowest of its own and the app containers' scores, so it is not killed
/// before the containers it serves.
pub fn oom_score_adj(pod: &Pod, c: &Container, memory_capacity: i64) -> i64 {
    if node_critical(pod) {
        return GUARANTEED_OOM_SCORE_ADJ;
    }
    match qos_class(pod) {
        QosClass::Guaranteed => return GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => return BEST_EFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {}
    }
    let capacity = memory_capacity.max(1);
    let score = |req: i64| 1000 - (req.saturating_mul(1000) / capacity).min(1000);
    let mut adj = score(memory_request(c));
    if super::is_sidecar(c) {
        let apps = super::containers(pod).iter().map(|a| score(memory_request(a)));
        adj = apps.fold(adj, i64::min);
    }
    if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ {
        return 1000 + GUARANTEED_OOM_SCORE_ADJ;
    }
    if adj == BEST_EFFORT_OOM_SCORE_ADJ {
        return adj - 1;
    }
    adj
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn with(resources: &[&str]) -> Pod {
        let mut y = String::from("metadata: {name: p}\nspec:\n  containers:\n");
        for (i, r) in resources.iter().enumerate() {
            y.push_str(&format!("  - name: c{i}\n    image: i\n    resources: {r}\n"));
        }
        pod(&y)
    }

    #[test]
    fn classes_as_the_kubelet_computes_them() {
        use QosClass::*;
        assert_eq!(qos_class(&with(&["{}"])), BestEffort);
        assert_eq!(qos_class(&with(&["{limits: {cpu: 0}}"])), BestEffort);
        // limits only: requests default to them
        assert_eq!(qos_class(&with(&["{limits: {cpu: 100m, memory: 64Mi}}"])), Guaranteed);
        assert_eq!(
            qos_class(&with(&["{requests: {cpu: 100m, memory: 64Mi}, limits: {cpu: 100m, memory: 64Mi}}"])),
            Guaranteed
        );
        // the same amount in another unit is equal
        assert_eq!(
            qos_class(&with(&["{requests: {cpu: '0.1', memory: 64Mi}, limits: {cpu: 100m, memory: 67108864}}"])),
            Guaranteed
        );
        assert_eq!(qos_class(&with(&["{requests: {cpu: 50m}, limits: {cpu: 100m, memory: 64Mi}}"])), Burstable);
        assert_eq!(qos_class(&with(&["{limits: {cpu: 100m}}"])), Burstable);
        assert_eq!(qos_class(&with(&["{requests: {memory: 1Gi}}"])), Burstable);
        // one container without limits makes the pod Burstable
        assert_eq!(qos_class(&with(&["{limits: {cpu: 1, memory: 1Gi}}", "{}"])), Burstable);
        // other resources do not count
        assert_eq!(qos_class(&with(&["{limits: {ephemeral-storage: 1Gi}}"])), BestEffort);
        // init containers count
        let p = pod(
            "metadata: {name: p}\nspec:\n  initContainers:\n  - {name: i, image: i, resources: {requests: {memory: 1Mi}}}\n  containers:\n  - {name: c, image: i}\n",
        );
        assert_eq!(qos_class(&p), Burstable);
    }

    #[test]
    fn oom_score_adjustments_as_the_kubelet_sets_them() {
        let cap = 4 * 1024 * 1024 * 1024i64; // 4 GiB
        let g = with(&["{limits: {cpu: 1, memory: 1Gi}}"]);
        assert_eq!(oom_score_adj(&g, &model_c(&g, 0), cap), -997);
        let be = with(&["{}"]);
        assert_eq!(oom_score_adj(&be, &model_c(&be, 0), cap), 1000);
        // Burstable: 1000 - 1000 * 1Gi / 4Gi
        let b = with(&["{requests: {memory: 1Gi}}", "{requests: {cpu: 1}}", "{requests: {memory: 4Gi}}"]);
        assert_eq!(oom_score_adj(&b, &model_c(&b, 0), cap), 750);
        // no memory request: 999, never BestEffort's 1000
        assert_eq!(oom_score_adj(&b, &model_c(&b, 1), cap), 999);
        // the whole machine requested: 3, never a Guaranteed score
        assert_eq!(oom_score_adj(&b, &model_c(&b, 2), cap), 3);
        // node-critical pods are as Guaranteed
        let mut nc = be.clone();
        nc.spec.as_mut().unwrap().priority_class_name = Some("system-node-critical".into());
        assert_eq!(oom_score_adj(&nc, &model_c(&nc, 0), cap), -997);
        // a sidecar takes the lowest score of the app containers
        let s = pod(
            "metadata: {name: p}\nspec:\n  initContainers:\n  - {name: s, image: i, restartPolicy: Always}\n  containers:\n  - {name: c, image: i, resources: {requests: {memory: 2Gi}}}\n",
        );
        let sidecar = &s.spec.as_ref().unwrap().init_containers.as_ref().unwrap()[0];
        assert_eq!(oom_score_adj(&s, sidecar, cap), 500);
    }

    fn model_c(p: &Pod, i: usize) -> Container {
        p.spec.as_ref().unwrap().containers[i].clone()
    }
}

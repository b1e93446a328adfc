//! A node cut off from its control plane, against the real control plane of
//! `scripts/cluster-env.sh up` and the real containerd of
//! `scripts/e2e-env.sh up`, with the release binary (`scripts/bench.sh
//! offline` prepares all three), as node `pw-offline` with its pods in
//! namespace `pw-offline`. The node joins through the port `scripts/
//! cluster-env.sh partition cut|heal` silences (every packet of its
//! connections dropped, in both directions: a half-open link, not a refused
//! one) and opens again.
//!
//! With a Deployment of 110 pods on the node, each mounting a Secret, taking
//! a ConfigMap key into its environment and a service account token:
//!
//! - `record_bytes_110`: the node's record (`rootDir/cluster`: the pods,
//!   the objects they use, their tokens) once it holds the 110 pods;
//! - a partition of `OFFLINE_PARTITION_S` (120 s): `partition_detect_s`,
//!   from the cut until the agent's log says the link is lost (its
//!   warning's time, to the millisecond); the pods keep running with the
//!   same containers (checked every 10 s); `reconnect_lease_ms`, from the
//!   heal until the API server receives the node's first Lease renewal
//!   (the audit log's `requestReceivedTimestamp`); `reconnect_requests`,
//!   the node's requests the API server received in the 30 s after the
//!   heal (each counted once, a watch when it opens), listed by URI, and
//!   split into `reconnect_pod_status_patches` (after 50 s the node
//!   lifecycle controller turns every pod's Ready off: one patch a pod
//!   sets it back) and `reconnect_requests_beyond_status`;
//! - `start_online_running_ms` and `start_offline_running_ms`: the agent
//!   killed, containerd's pods of the namespace removed (a reboot), then
//!   the agent started with the API server reachable, or with it cut off,
//!   until containerd runs a container of each of the 110 pods; alternating,
//!   `OFFLINE_ROUNDS` (2) rounds of each, medians, and their ratio. After
//!   an offline start the link is healed and the test waits until the API
//!   shows the 110 pods Running again with the containers the outage
//!   started (`restarted_after_heal` counts those that changed: 0).
//!
//! Before it runs, whatever an interrupted run left is removed and the
//! partition healed; after, the namespace is deleted (its pods stopped by
//! the node), the agent stopped, the Node deleted and containerd checked
//! for the namespace's pods. The last line is one JSON object.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use podwarden::runtime::cri::CriRuntime;
use podwarden::runtime::{ContainerState, Runtime};
use serde_json::{Value, json};

mod support;
use support::cluster::{
    Node, Spot, api_ok, api_pods, audit_events, audit_len, clean_leftovers, cluster, cri, join, make_namespace, median,
    ms, node_state, round, runtime_pods, secs_env, wait,
};
use support::{IMAGE, call};

const NODE: &str = "pw-offline";
const NS: &str = "pw-offline";
const PODS: usize = 110;
static SPOT: Spot = Spot {
    node: NODE,
    ns: NS,
    work: "/tmp/podwarden-bench-offline",
    max_pods: 120,
    prepare: "run `scripts/e2e-env.sh up` and `scripts/cluster-env.sh up` as root first (scripts/bench.sh offline does)",
};
/// An idle pod that reads what the record must keep: the Secret's file,
/// the ConfigMap's key and the token.
const RUN: &str = "test -s /creds/password && test -n \"$MODE\" && \
                   test -s /var/run/secrets/kubernetes.io/serviceaccount/token || exit 3; \
                   trap 'exit 0' TERM; while :; do sleep 3600 & wait; done";
/// Targets of the issue.
const DETECT_S_TARGET: f64 = 15.0;
const LEASE_MS_TARGET: f64 = 2000.0;
const START_RATIO_TARGET: f64 = 1.2;
const REQUESTS_TARGET: usize = 20;
/// The agent's log line when a call finds the link gone.
const LOST: &str = "the link to the API server is lost";

fn partition(how: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cluster-env.sh");
    let out = Command::new(&script).args(["partition", how]).output().unwrap();
    assert!(out.status.success(), "partition {how}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Heals the partition however the bench ends.
struct Healed;

impl Drop for Healed {
    fn drop(&mut self) {
        partition("heal");
    }
}

/// An RFC 3339 time (the audit log's, the agent log's).
fn parse_time(s: &str) -> Option<SystemTime> {
    let t: k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime = serde_json::from_value(json!(s)).ok()?;
    let us = t.0.as_microsecond();
    (us >= 0).then(|| SystemTime::UNIX_EPOCH + Duration::from_micros(us as u64))
}

fn secs_between(a: SystemTime, b: SystemTime) -> f64 {
    b.duration_since(a).map(|d| d.as_secs_f64()).unwrap_or_else(|e| -e.duration().as_secs_f64())
}

/// The time of the agent log's first line holding `needle` at or after
/// `after`.
fn logged_after(needle: &str, after: SystemTime) -> Option<SystemTime> {
    let text = std::fs::read_to_string(SPOT.work().join("agent.log")).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| parse_time(l.strip_prefix('[')?.split_whitespace().next()?))
        .find(|t| *t >= after)
}

/// The node's requests in the audit log after byte `from`, once each (a
/// watch when it opens): (received, verb, URI).
fn received(audit_log: &Path, from: u64) -> Vec<(SystemTime, String, String)> {
    let user = format!("system:node:{NODE}");
    let mut seen = HashSet::new();
    let mut out: Vec<_> = audit_events(audit_log, from, audit_len(audit_log))
        .into_iter()
        .filter(|e| e["user"]["username"] == user.as_str())
        .filter(|e| seen.insert(e["auditID"].as_str().unwrap_or_default().to_string()))
        .filter_map(|e| {
            let at = parse_time(e["requestReceivedTimestamp"].as_str()?)?;
            Some((at, e["verb"].as_str()?.to_string(), e["requestURI"].as_str()?.to_string()))
        })
        .collect();
    out.sort();
    out
}

/// Containerd's pods of the namespace running a container: pod UID to
/// container ID.
fn running(cri: &CriRuntime) -> BTreeMap<String, String> {
    let pods = cri.list_pods(&call()).unwrap_or_else(|e| panic!("list containerd's pods: {e}"));
    pods.into_iter()
        .filter(|p| p.namespace == NS)
        .filter_map(|p| {
            let c = p.containers.iter().find(|c| c.state == ContainerState::Running)?;
            Some((p.uid.clone(), c.id.clone()))
        })
        .collect()
}

/// The API's view of the Deployment's pods: UID to the container ID of
/// those Running (without the runtime's `containerd://`).
fn running_in_api(c: &podwarden::cluster::http::Client) -> BTreeMap<String, String> {
    api_pods(c, NS, "app%3Doffline")
        .iter()
        .filter(|p| p["status"]["phase"] == "Running" && p["spec"]["nodeName"] == NODE)
        .filter_map(|p| {
            let id = p["status"]["containerStatuses"][0]["containerID"].as_str()?;
            Some((p["metadata"]["uid"].as_str()?.to_string(), id.rsplit('/').next()?.to_string()))
        })
        .collect()
}

/// The bytes of every file under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            _ => e.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}

/// The agent (re)started after a reboot-like loss of its pods, with the
/// API server cut off or not: until containerd runs all the pods.
fn restart_round(node: &mut Node, offline: bool) -> f64 {
    node.kill9();
    support::cluster::remove_runtime_pods(&node.cri, NS);
    assert!(runtime_pods(&node.cri, NS).is_empty(), "containerd's pods of {NS} could not be removed");
    if offline {
        partition("cut");
    }
    let t0 = Instant::now();
    node.spawn();
    wait(
        &format!("{PODS} pods running in containerd after a start {}", if offline { "offline" } else { "online" }),
        Duration::from_secs(300),
        Duration::from_millis(100),
        || {
            node.check_alive();
            running(&node.cri).len() == PODS
        },
    );
    ms(t0.elapsed())
}

/// After a start: the link healed (if cut), then the node Ready and the
/// API showing every pod Running with the container it runs: how many
/// containers changed meanwhile.
fn caught_up(node: &mut Node, offline: bool) -> usize {
    let before = running(&node.cri);
    if offline {
        partition("heal");
    }
    let admin = node.admin.clone();
    wait("the node Ready and the API caught up", Duration::from_secs(300), Duration::from_millis(500), || {
        node.check_alive();
        node_state(&admin, NODE).1 && running_in_api(&admin) == running(&node.cri)
    });
    let after = running(&node.cri);
    before.iter().filter(|(uid, id)| after.get(*uid) != Some(*id)).count()
}

fn main() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        println!("offline bench failed: {info}");
        default_hook(info);
    }));
    let started = Instant::now();
    let c = cluster(&SPOT);
    let cri = cri(&SPOT);
    let bin = support::bin("offline");
    let cut_for = secs_env("OFFLINE_PARTITION_S", 120);
    let rounds = secs_env("OFFLINE_ROUNDS", 2).as_secs() as usize;
    partition("heal");
    let _healed = Healed;
    clean_leftovers(&c, &cri, &SPOT);
    make_namespace(&c, NS);
    println!(
        "setup: node {NODE} ({bin}) through {}, namespace {NS}, a Deployment of {PODS} pods with a Secret, a \
         ConfigMap and a token each; a partition of {} s; {rounds} starts online and offline each",
        c.partitionable,
        cut_for.as_secs()
    );
    let mut out: BTreeMap<&str, Value> = BTreeMap::new();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
                        "stringData": {"password": "k33p"}});
    api_ok(&c.admin, "POST", &format!("/api/v1/namespaces/{NS}/secrets"), Some(&secret), &[201]);
    let cm =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"mode": "offline"}});
    api_ok(&c.admin, "POST", &format!("/api/v1/namespaces/{NS}/configmaps"), Some(&cm), &[201]);
    let (mut node, _) = join(&c, cri, &bin, &SPOT, &c.partitionable, "127.0.0.1");

    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "offline", "namespace": NS},
        "spec": {
            "replicas": PODS,
            "selector": {"matchLabels": {"app": "offline"}},
            "template": {
                "metadata": {"labels": {"app": "offline"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": NODE},
                    "terminationGracePeriodSeconds": 5,
                    "volumes": [{"name": "creds", "secret": {"secretName": "creds"}}],
                    "containers": [{
                        "name": "main", "image": IMAGE, "imagePullPolicy": "Never",
                        "command": ["sh", "-c", RUN],
                        "env": [{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}}],
                        "volumeMounts": [{"name": "creds", "mountPath": "/creds"}],
                    }],
                },
            },
        },
    });
    let t = Instant::now();
    api_ok(&c.admin, "POST", &format!("/apis/apps/v1/namespaces/{NS}/deployments"), Some(&deployment), &[201]);
    wait(&format!("{PODS} pods Running in the API"), Duration::from_secs(900), Duration::from_secs(1), || {
        node.check_alive();
        running_in_api(&c.admin).len() == PODS
    });
    println!("{PODS} pods Running in the API after {:.1} s", t.elapsed().as_secs_f64());

    // the record holds them all
    let record = SPOT.work().join("root/cluster");
    let uids: Vec<String> = running_in_api(&c.admin).into_keys().collect();
    wait("the record holding the 110 pods", Duration::from_secs(60), Duration::from_millis(500), || {
        let text = std::fs::read_to_string(record.join("pods.json")).unwrap_or_default();
        uids.iter().all(|u| text.contains(u.as_str()))
    });
    std::thread::sleep(Duration::from_secs(10));
    let record_bytes = bytes_under(&record);
    println!("the record: {record_bytes} bytes under {}", record.display());
    out.insert("record_bytes_110", json!(record_bytes));

    // a partition: found, outlived, one clean reconnect
    let containers = running(&node.cri);
    assert_eq!(containers.len(), PODS);
    let cut_at = SystemTime::now();
    let t_cut = Instant::now();
    partition("cut");
    let mut detected = None;
    let mut checks = 0;
    while t_cut.elapsed() < cut_for {
        std::thread::sleep(Duration::from_millis(250));
        node.check_alive();
        if detected.is_none() {
            detected = logged_after(LOST, cut_at);
        }
        if t_cut.elapsed().as_secs() / 10 > checks {
            checks += 1;
            assert_eq!(running(&node.cri), containers, "the pods' containers changed during the partition");
        }
    }
    let detected = detected.unwrap_or_else(|| panic!("the agent's log never said \"{LOST}\" in the partition"));
    let detect_s = secs_between(cut_at, detected);
    println!("the partition found {detect_s:.1} s after the cut");
    out.insert("partition_detect_s", round(detect_s, 1));
    out.insert("partition_detect_s_ok", json!(detect_s <= DETECT_S_TARGET));
    out.insert("partition_s", json!(cut_for.as_secs()));

    let mark = audit_len(&c.audit_log);
    let healed_at = SystemTime::now();
    let t_heal = Instant::now();
    partition("heal");
    let mut lease = None;
    wait("the node's Lease renewed after the heal", Duration::from_secs(60), Duration::from_millis(100), || {
        lease = received(&c.audit_log, mark)
            .into_iter()
            .find(|r| r.0 >= healed_at && r.2.contains(&format!("/leases/{NODE}")) && r.1 != "get")
            .map(|r| r.0);
        lease.is_some()
    });
    let lease_ms = secs_between(healed_at, lease.unwrap()) * 1000.0;
    println!("the first Lease renewal {lease_ms:.0} ms after the heal");
    out.insert("reconnect_lease_ms", round(lease_ms, 0));
    out.insert("reconnect_lease_ms_ok", json!(lease_ms <= LEASE_MS_TARGET));
    std::thread::sleep(Duration::from_secs(31).saturating_sub(t_heal.elapsed()));
    let window: Vec<_> = received(&c.audit_log, mark)
        .into_iter()
        .filter(|r| r.0 >= healed_at && secs_between(healed_at, r.0) < 30.0)
        .collect();
    println!("the node's requests in the 30 s after the heal: {}", window.len());
    for (at, verb, uri) in &window {
        println!("  +{:>6.3} s  {verb} {uri}", secs_between(healed_at, *at));
    }
    // the node lifecycle controller turned every pod's Ready off while
    // the node was lost (after 50 s): one patch a pod sets it back, as the
    // kubelet's status manager would
    let mending =
        window.iter().filter(|r| r.1 == "patch" && r.2.contains("/pods/") && r.2.ends_with("/status")).count();
    let others = window.len() - mending;
    println!("of which {mending} pod status patches setting Ready back, {others} others");
    out.insert("reconnect_requests", json!(window.len()));
    out.insert("reconnect_requests_ok", json!(window.len() <= REQUESTS_TARGET));
    out.insert("reconnect_pod_status_patches", json!(mending));
    out.insert("reconnect_requests_beyond_status", json!(others));
    out.insert("reconnect_requests_beyond_status_ok", json!(others <= REQUESTS_TARGET));
    let admin = c.admin.clone();
    wait("the node Ready after the partition", Duration::from_secs(60), Duration::from_millis(200), || {
        node_state(&admin, NODE).1
    });
    let changed = containers.iter().filter(|(uid, id)| running(&node.cri).get(*uid) != Some(*id)).count();
    assert_eq!(changed, 0, "containers changed over the partition and the reconnect");

    // starts: online and offline in turn
    let (mut online, mut offline, mut restarted) = (Vec::new(), Vec::new(), 0);
    for r in 0..rounds {
        for cut in if r % 2 == 0 { [false, true] } else { [true, false] } {
            let took = restart_round(&mut node, cut);
            let n = caught_up(&mut node, cut);
            println!(
                "a start {}: {PODS} pods running in {took:.0} ms; {n} restarted once the API caught up",
                if cut { "with the API server cut off" } else { "online" }
            );
            restarted += n;
            if cut { offline.push(took) } else { online.push(took) }
        }
    }
    let (on, off) = (median(&online), median(&offline));
    println!(
        "starts with {PODS} pods: online {online:.0?} ms, offline {offline:.0?} ms; ratio of medians {:.2}",
        off / on
    );
    out.insert("start_online_running_ms", round(on, 0));
    out.insert("start_offline_running_ms", round(off, 0));
    out.insert("start_offline_over_online_ratio", round(off / on, 2));
    out.insert("start_offline_over_online_ratio_ok", json!(off / on <= START_RATIO_TARGET));
    out.insert("restarted_after_heal", json!(restarted));
    out.insert("pods", json!(PODS));

    // clean up: the namespace deleted, its pods stopped by the node
    api_ok(&c.admin, "DELETE", &format!("/api/v1/namespaces/{NS}"), None, &[200, 202]);
    let end = Instant::now() + Duration::from_secs(300);
    while Instant::now() < end && !runtime_pods(&node.cri, NS).is_empty() {
        std::thread::sleep(Duration::from_secs(1));
    }
    node.force_clean(Duration::from_secs(120));
    let left = runtime_pods(&node.cri, NS);
    assert!(left.is_empty(), "containerd still has {} pods of {NS} after the clean-up: {left:?}", left.len());
    drop(node);
    println!("run took {:.0} s", started.elapsed().as_secs_f64());
    println!("{}", serde_json::to_string(&out).unwrap());
}

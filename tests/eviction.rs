//! The eviction manager's passes on the fake runtime: the pods' stats are
//! gathered every stats period, not at every pass, unless a threshold is
//! to be acted on; the node's own signals are read at every pass.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use podwarden::agent::eviction::{Manager, Settings};
use podwarden::config::{Amount, Signal, Threshold};
use podwarden::runtime::fake::Op;
use podwarden::telemetry::events::EventType;

/// An eviction manager on `h` with `thresholds` whose pods' stats are
/// gathered every `period`.
fn manager(h: &Harness, thresholds: Vec<Threshold>, period: Duration) -> Manager {
    Manager::new(
        Settings {
            thresholds,
            max_pod_grace: 0,
            transition: Duration::from_secs(300),
            priority_classes: BTreeMap::new(),
            node_name: "node".into(),
            stats_period: period,
        },
        h.parts.stats.clone(),
        None,
        h.agent.clone(),
        h.admission.pressure(),
        h.events.clone(),
        h.metrics.clone(),
    )
}

/// The runtime calls that gather the pods' stats so far.
fn stats_calls(h: &Harness) -> usize {
    h.fake.calls().iter().filter(|c| matches!(c.op, Op::ListPodSandboxStats | Op::ListContainerStats)).count()
}

fn image_fs_calls(h: &Harness) -> usize {
    h.fake.calls().iter().filter(|c| c.op == Op::ImageFsInfo).count()
}

/// A hard `pid.available` threshold every node meets: all of its PIDs.
fn always_met() -> Threshold {
    Threshold {
        signal: Signal::PidAvailable,
        value: Amount::Percent(100.0),
        grace: Duration::ZERO,
        soft: false,
        min_reclaim: None,
    }
}

#[test]
fn between_two_snapshots_a_pass_reads_the_nodes_signals_without_the_pods_stats() {
    let h = Harness::new();
    h.agent.apply_source(vec![arc(pod("a", "uid-a"))]);
    wait_for("pod a runs", Duration::from_secs(10), || h.fake.live_containers("uid-a") == 1);
    let m = manager(&h, Vec::new(), Duration::from_secs(3600));
    h.fake.clear_calls();
    m.synchronize();
    let first = stats_calls(&h);
    assert!(first >= 1, "the first pass gathers the pods' stats");
    let snap = h.parts.stats.last().expect("the first pass keeps its snapshot");
    assert_eq!(snap.pods.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["a"]);
    for _ in 0..4 {
        m.synchronize();
    }
    assert_eq!(stats_calls(&h), first, "no pods' stats again within the stats period");
    // the image filesystem's free space is read (statvfs) at every pass;
    // where it is, and what the images use, is asked once in 30 s
    assert_eq!(image_fs_calls(&h), 1, "ImageFsInfo once in five passes");
    assert!(Arc::ptr_eq(&snap, &h.parts.stats.last().unwrap()), "the kept snapshot is the first pass's");

    // a period of zero: every pass gathers them (one call each now that
    // the fake has answered that it lacks ListPodSandboxStats)
    let every = manager(&h, Vec::new(), Duration::ZERO);
    every.synchronize();
    every.synchronize();
    assert_eq!(stats_calls(&h), first + 2);
    assert!(!Arc::ptr_eq(&snap, &h.parts.stats.last().unwrap()), "a new snapshot is kept");
}

#[test]
fn a_threshold_met_between_two_snapshots_ranks_the_pods_by_stats_gathered_then() {
    let h = Harness::new();
    h.agent.apply_source(vec![arc(pod("a", "uid-a")), arc(pod("b", "uid-b"))]);
    wait_for("both pods run", Duration::from_secs(10), || {
        h.fake.live_containers("uid-a") == 1 && h.fake.live_containers("uid-b") == 1
    });
    let m = manager(&h, vec![always_met()], Duration::from_secs(3600));
    h.fake.clear_calls();
    // the first pass: a snapshot, the pressure, one pod evicted
    m.synchronize();
    let first = stats_calls(&h);
    assert!(first >= 1);
    let evicted = |h: &Harness| {
        ["a", "b"].into_iter().filter(|n| h.agent.admitted().iter().all(|p| podwarden::model::name(p) != *n)).count()
    };
    assert_eq!(evicted(&h), 1, "one pod a pass");
    assert!(h.admission.pressure().on().contains(&podwarden::pod::admission::Pressure::Pid));
    // once it has terminated, the next pass (within the stats period)
    // gathers the stats again to rank the pods left, and evicts the other
    wait_for("the evicted pod stopped", Duration::from_secs(10), || {
        h.fake.live_containers("uid-a") + h.fake.live_containers("uid-b") == 1
    });
    let mut passes = 0;
    while evicted(&h) < 2 && passes < 50 {
        m.synchronize();
        passes += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(evicted(&h), 2, "the second pod evicted within {passes} passes");
    assert!(stats_calls(&h) > first, "stats gathered again under pressure");
}

#[test]
fn a_failed_stats_call_leaves_the_nodes_signals_and_conditions_going() {
    let h = Harness::new();
    h.agent.apply_source(vec![arc(pod("a", "uid-a"))]);
    wait_for("pod a runs", Duration::from_secs(10), || h.fake.live_containers("uid-a") == 1);
    // the sandboxes' stats fail (containerd 1.6 while a sandbox stops):
    // the containers' stats make the snapshot
    h.fake.fail(Op::ListPodSandboxStats, None, 1);
    h.parts.stats.collect().expect("a snapshot from the containers' stats");
    let snap = h.parts.stats.last().unwrap();
    assert_eq!(snap.pods.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["a"]);
    // every stats call fails: the pass still sets the node's conditions
    // (and, with nothing to rank the pods by, evicts none)
    h.fake.fail(Op::ListPodSandboxStats, None, 100);
    h.fake.fail(Op::ListContainerStats, None, 100);
    let m = manager(&h, vec![always_met()], Duration::from_secs(3600));
    m.synchronize();
    assert!(h.admission.pressure().on().contains(&podwarden::pod::admission::Pressure::Pid));
    assert_eq!(h.agent.admitted().len(), 1, "no pod evicted without its stats");
    // one failed pass is not news; a second one is a warning on the node,
    // not repeated at every pass
    let warnings = || {
        h.events
            .list()
            .into_iter()
            .filter(|e| e.reason == "EvictionStatsUnavailable")
            .map(|e| (e.involved_object.kind.clone(), e.involved_object.name.clone(), e.event_type, e.count))
            .collect::<Vec<_>>()
    };
    assert!(warnings().is_empty(), "a warning after one failed pass");
    m.synchronize();
    m.synchronize();
    assert_eq!(warnings(), [("Node".to_string(), "node".to_string(), EventType::Warning, 1)]);
    let message = h.events.list().into_iter().find(|e| e.reason == "EvictionStatsUnavailable").unwrap().message;
    assert!(message.contains("no pod can be ranked for eviction"), "{message}");
    assert_eq!(h.agent.admitted().len(), 1, "no pod evicted without its stats");
    // the runtime is back: the next pass takes the stats and acts
    h.fake.clear_faults();
    m.synchronize();
    assert!(h.agent.admitted().is_empty(), "pod a evicted");
}

/// An evicted pod that has terminated but is not cleaned up yet (its
/// sandbox's removal is slow, so its volumes are still on disk) holds the
/// next eviction back, as the kubelet waits for `podCleanedUpFunc`: the
/// pressure it caused may still show. Once it is cleaned up, the next pass
/// may evict another.
#[test]
fn the_next_eviction_waits_until_the_evicted_pod_is_cleaned_up() {
    let h = Harness::new();
    h.agent.apply_source(vec![arc(pod("a", "uid-a")), arc(pod("b", "uid-b"))]);
    wait_for("both pods run", Duration::from_secs(10), || {
        h.fake.live_containers("uid-a") == 1 && h.fake.live_containers("uid-b") == 1
    });
    // within the runtime call deadline of the harness (2 s)
    h.fake.set_latency(Op::RemovePodSandbox, Duration::from_millis(1800));
    let m = manager(&h, vec![always_met()], Duration::from_secs(3600));
    m.synchronize();
    let evicted: Vec<String> = ["uid-a", "uid-b"]
        .into_iter()
        .filter(|u| h.agent.admitted().iter().all(|p| podwarden::model::uid(p) != *u))
        .map(str::to_string)
        .collect();
    assert_eq!(evicted.len(), 1, "one pod a pass");
    let first = evicted[0].clone();
    // terminated (its containers stopped), its clean-up still running
    wait_for("the evicted pod terminated", Duration::from_secs(10), || h.fake.live_containers(&first) == 0);
    wait_for("its sandbox's removal under way", Duration::from_secs(10), || {
        !h.fake.calls_for(&first, Op::RemovePodSandbox).is_empty()
    });
    assert!(!h.agent.is_pod_cleaned_up(&first), "the slow removal is still under way");
    for _ in 0..5 {
        m.synchronize();
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(h.agent.admitted().len(), 1, "no second eviction while the first pod's clean-up runs");
    // cleaned up: the next pass evicts the other
    wait_for("the evicted pod cleaned up", Duration::from_secs(10), || h.agent.is_pod_cleaned_up(&first));
    m.synchronize();
    assert!(h.agent.admitted().is_empty(), "the second pod evicted once the first is cleaned up");
}

//! The runtime's event stream on the fake runtime, with the housekeeping
//! thread as `podwarden run` starts it: an init container's exit moves the
//! pod on at once (the relist and the resync are 30 s here); a runtime
//! without a stream leaves the relist alone; a broken stream is opened
//! again and counted.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use podwarden::agent::housekeeping::Housekeeping;
use podwarden::model;
use podwarden::runtime::events::EventStream;
use podwarden::runtime::{CallCtx, ContainerState, Runtime};

const LONG: Duration = Duration::from_secs(30);
/// A step that an event (or, without a stream, the 300 ms relist) moved
/// on: 10x below `LONG`, the relist and resync period a step would wait
/// for without them. What a step takes is `scripts/bench.sh reactions`'
/// `init_chain_step_ms` (with events) and `relist_init_chain_step_ms`.
const AT_ONCE: Duration = Duration::from_secs(3);

fn chain() -> Arc<model::Pod> {
    Arc::new(
        model::manifest::parse(
            "p.yaml",
            b"apiVersion: v1\nkind: Pod\nmetadata: {name: chain, namespace: default}\nspec:\n  initContainers:\n  - {name: a, image: busybox:1}\n  - {name: b, image: busybox:1}\n  containers:\n  - {name: app, image: busybox:1}\n",
            "node",
        )
        .expect("a valid manifest"),
    )
}

/// Whether the latest `name` container of `uid` runs, as the runtime
/// answers; a failed status call is no "not running": it panics.
fn running(h: &Harness, uid: &str, name: &str) -> bool {
    let rp = h
        .fake
        .pod_status(&CallCtx::background(LONG), uid)
        .unwrap_or_else(|e| panic!("pod status of {uid} from the runtime: {e}"));
    rp.latest(name).is_some_and(|l| l.state == ContainerState::Running)
}

/// A harness whose resync and relist are 30 s, with the housekeeping
/// thread and (when `events`) the runtime-events thread running.
fn start(events: bool, relist: Duration) -> (Harness, Housekeeping, Option<EventStream>) {
    let h = Harness::with(Opts { resync: Some(LONG), ..Opts::default() });
    h.fake.set_events(events);
    let hk = Housekeeping::with_relist(h.agent.clone(), LONG, relist).unwrap();
    let stream = podwarden::cli::daemon::runtime_events(&h.parts, hk.waker()).unwrap();
    (h, hk, Some(stream))
}

/// `exit` ends and `name` runs within [`AT_ONCE`].
fn step(h: &Harness, uid: &str, exit: &str, name: &str) {
    let t = Instant::now();
    assert!(h.fake.exit_container(uid, exit, 0), "{exit} was running");
    wait_for(&format!("{name} to run after {exit} exited"), AT_ONCE, || running(h, uid, name));
    eprintln!("{name} ran {:?} after {exit} exited", t.elapsed());
}

#[test]
fn an_init_containers_exit_moves_the_pod_on_at_once_with_events() {
    let (h, _hk, _s) = start(true, LONG);
    wait_for("the stream open", Duration::from_secs(5), || h.parts.runtime_events.open_source().is_some());
    let p = chain();
    let uid = model::uid(&p).to_string();
    h.agent.apply_source(vec![p]);
    wait_for("a runs", Duration::from_secs(5), || running(&h, &uid, "a"));
    step(&h, &uid, "a", "b");
    step(&h, &uid, "b", "app");
    assert!(h.parts.runtime_events.events_total() >= 4);
}

#[test]
fn without_an_event_stream_the_relist_alone_moves_the_pod_on() {
    let (h, _hk, _s) = start(false, Duration::from_millis(300));
    wait_for("the stream given up", Duration::from_secs(5), || h.parts.runtime_events.is_unsupported());
    assert_eq!(h.parts.runtime_events.opened_total(), 0);
    let p = chain();
    let uid = model::uid(&p).to_string();
    h.agent.apply_source(vec![p]);
    wait_for("a runs", Duration::from_secs(5), || running(&h, &uid, "a"));
    // the first step too: the pod is new to the relist that sees a's exit
    step(&h, &uid, "a", "b");
    step(&h, &uid, "b", "app");
    assert_eq!(h.parts.runtime_events.events_total(), 0);
}

#[test]
fn a_broken_stream_is_opened_again_and_counted() {
    let (h, _hk, _s) = start(true, LONG);
    wait_for("the stream open", Duration::from_secs(5), || h.fake.event_watchers() == 1);
    h.fake.break_event_streams();
    wait_for("opened again", Duration::from_secs(5), || h.parts.runtime_events.opened_total() == 2);
    assert_eq!(h.parts.runtime_events.broken_total(), 1);
    assert_eq!(h.fake.event_watchers(), 1);
    let p = chain();
    let uid = model::uid(&p).to_string();
    h.agent.apply_source(vec![p]);
    wait_for("a runs", Duration::from_secs(5), || running(&h, &uid, "a"));
    step(&h, &uid, "a", "b");
}

/// The kubelet's PLEG sees a container it never saw as an event: a pod
/// new to a relist wakes its worker, or an init container that exited
/// before any list saw the pod would wait for the resync (the 10 s, or
/// `syncFrequency`, first step of an init chain).
#[test]
fn a_pod_new_to_the_relist_whose_first_init_container_already_exited_moves_on() {
    let h = Harness::with(Opts { resync: Some(LONG), ..Opts::default() });
    h.fake.set_events(false);
    h.agent.relist(); // the first list: the pod is not there yet
    let p = chain();
    let uid = model::uid(&p).to_string();
    h.agent.apply_source(vec![p]);
    wait_for("a runs", Duration::from_secs(5), || running(&h, &uid, "a"));
    assert!(h.fake.exit_container(&uid, "a", 0));
    h.agent.relist(); // sees the pod for the first time, a already done
    wait_for("b runs after one relist", Duration::from_secs(2), || running(&h, &uid, "b"));
}

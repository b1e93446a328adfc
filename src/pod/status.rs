//! The status manager: the v1 PodStatus of every pod podwarden knows, built
//! from the pod's spec, the runtime's view and the worker's state.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::model::{
    self, ContainerState as KState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod, PodCondition, PodIP, PodStatus, Time, Uid,
};
use crate::runtime::{ContainerInfo, ContainerState, RuntimePod};

/// Kubelet's message for pods rejected while the node shuts down, and the
/// like, are built by callers; this module only stores and generates.
#[derive(Default)]
pub struct StatusManager {
    statuses: Mutex<Versioned>,
}

/// Each pod's status with the version of its last write (numbered from
/// one counter, so a version is never reused): a reader that keeps the
/// version it last built from sees whether a pod's status was written
/// since without copying or comparing it.
#[derive(Default)]
struct Versioned {
    map: HashMap<Uid, (PodStatus, u64)>,
    last: u64,
}

impl Versioned {
    fn put(&mut self, uid: &str, status: PodStatus) {
        self.last += 1;
        self.map.insert(uid.to_string(), (status, self.last));
    }
}

impl StatusManager {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, uid: &str) -> Option<PodStatus> {
        self.statuses.lock().map.get(uid).map(|(s, _)| s.clone())
    }

    /// The version of a pod's status (changes with every write of it).
    pub fn version(&self, uid: &str) -> Option<u64> {
        self.statuses.lock().map.get(uid).map(|(_, v)| *v)
    }

    pub fn set(&self, uid: &str, status: PodStatus) {
        let mut m = self.statuses.lock();
        if m.map.get(uid).map(|(s, _)| s) != Some(&status) {
            m.put(uid, status);
            drop(m);
            crate::base::changes::bump();
        }
    }

    /// Change the stored status in place (creating an empty one).
    pub fn update(&self, uid: &str, f: impl FnOnce(&mut PodStatus)) {
        let mut m = self.statuses.lock();
        m.last += 1;
        let v = m.last;
        let e = m.map.entry(uid.to_string()).or_default();
        f(&mut e.0);
        e.1 = v;
        drop(m);
        crate::base::changes::bump();
    }

    /// Replace a pod's status with one built from the current one (under
    /// the lock, without copying it out); `None` keeps it as it is, and so
    /// does a status equal to it (no new version, no wake-up: a pod's
    /// periodic sync that finds nothing new costs its readers nothing).
    pub fn replace_with(&self, uid: &str, f: impl FnOnce(Option<&PodStatus>) -> Option<PodStatus>) {
        let mut m = self.statuses.lock();
        let old = m.map.get(uid).map(|(s, _)| s);
        if let Some(new) = f(old)
            && old != Some(&new)
        {
            m.put(uid, new);
            drop(m);
            crate::base::changes::bump();
        }
    }

    pub fn remove(&self, uid: &str) {
        if self.statuses.lock().map.remove(uid).is_some() {
            crate::base::changes::bump();
        }
    }

    /// Forget statuses of pods that are not in `keep`.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut m = self.statuses.lock();
        let before = m.map.len();
        m.map.retain(|uid, _| keep(uid));
        let gone = m.map.len() != before;
        drop(m);
        if gone {
            crate::base::changes::bump();
        }
    }

    pub fn len(&self) -> usize {
        self.statuses.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A remembered container start error, shown as its Waiting reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub reason: String,
    pub message: String,
}

fn time(ns: i64) -> Option<Time> {
    model::time_from_unix_nanos(ns)
}

fn terminated_state(c: &ContainerInfo, id_prefix: &str) -> KState {
    KState {
        terminated: Some(ContainerStateTerminated {
            exit_code: c.exit_code,
            reason: Some(if c.reason.is_empty() {
                if c.exit_code == 0 { "Completed" } else { "Error" }.to_string()
            } else {
                c.reason.clone()
            }),
            message: (!c.message.is_empty()).then(|| c.message.clone()),
            started_at: time(c.started_at_ns),
            finished_at: time(c.finished_at_ns),
            container_id: Some(format!("{id_prefix}{}", c.id)),
            signal: None,
        }),
        ..Default::default()
    }
}

fn waiting_state(reason: &str, message: Option<&str>) -> KState {
    KState {
        waiting: Some(ContainerStateWaiting { reason: Some(reason.to_string()), message: message.map(str::to_string) }),
        ..Default::default()
    }
}

/// Which list a container is in, for its status.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    App,
    /// A regular init container: ready once it exited 0.
    Init,
    Sidecar,
}

/// The status of one container from its newest and previous instances;
/// before its first instance it waits with `default_waiting`.
fn container_status(
    spec: &model::Container,
    rp: &RuntimePod,
    waiting: Option<&Waiting>,
    input: &GenerateInput,
    uid: &str,
    role: Role,
    default_waiting: &str,
) -> ContainerStatus {
    let id_prefix = input.id_prefix;
    let latest = rp.latest(&spec.name);
    let previous = latest.and_then(|l| {
        rp.containers.iter().filter(|c| c.name == spec.name && c.attempt < l.attempt).max_by_key(|c| c.attempt)
    });
    let image = spec.image.clone().unwrap_or_default();
    let mut st = ContainerStatus {
        name: spec.name.clone(),
        image: latest.map(|l| l.image.clone()).unwrap_or(image),
        image_id: latest.map(|l| l.image_ref.clone()).unwrap_or_default(),
        container_id: latest.map(|l| format!("{id_prefix}{}", l.id)),
        restart_count: latest.map_or(0, |l| l.attempt as i32),
        ready: false,
        started: Some(false),
        ..Default::default()
    };
    match latest {
        Some(l) if l.state == ContainerState::Running => {
            st.state = Some(KState {
                running: Some(ContainerStateRunning { started_at: time(l.started_at_ns) }),
                ..Default::default()
            });
            // started: no startup probe, or it passed; ready: started and
            // the readiness probe (if any) passed last
            let (started, ready) = match input.probes {
                Some(p) => (p.started(uid, spec, &l.id), p.ready(uid, spec, &l.id)),
                None => (true, true),
            };
            st.ready = ready && role != Role::Init;
            st.started = Some(started);
            st.last_state = previous.map(|p| terminated_state(p, id_prefix));
        }
        Some(l) if l.state == ContainerState::Exited => {
            if let Some(w) = waiting {
                // restarting: waiting now, the exited run is the last state
                st.state = Some(waiting_state(&w.reason, Some(&w.message)));
                st.last_state = Some(terminated_state(l, id_prefix));
            } else {
                st.state = Some(terminated_state(l, id_prefix));
                st.last_state = previous.map(|p| terminated_state(p, id_prefix));
                st.ready = role == Role::Init && l.exit_code == 0;
            }
        }
        Some(_) => {
            st.state = Some(waiting_state(
                waiting.map_or(default_waiting, |w| w.reason.as_str()),
                waiting.map(|w| w.message.as_str()),
            ));
            st.last_state = previous.map(|p| terminated_state(p, id_prefix));
        }
        None => {
            st.state = Some(waiting_state(
                waiting.map_or(default_waiting, |w| w.reason.as_str()),
                waiting.map(|w| w.message.as_str()),
            ));
        }
    }
    st
}

fn is_running(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|x| x.running.is_some())
}

fn terminated_code(s: &ContainerStatus) -> Option<i32> {
    s.state.as_ref().and_then(|x| x.terminated.as_ref()).map(|t| t.exit_code)
}

/// Whether an init container is done for initialization: a regular one
/// exited 0, a sidecar runs and has started.
fn init_done(spec: &model::Container, s: &ContainerStatus) -> bool {
    if model::is_sidecar(spec) { is_running(s) && s.started == Some(true) } else { terminated_code(s) == Some(0) }
}

/// Whether an app container has run (runs, or ran to an end): the pod was
/// initialized.
fn any_app_started(statuses: &[ContainerStatus]) -> bool {
    statuses.iter().any(|s| is_running(s) || terminated_code(s).is_some())
}

/// The pod phase, as the kubelet's getPhase: Failed when an init container
/// failed and the pod never restarts; Pending while initializing (no app
/// container has run yet); else from the app containers (sidecars do not
/// count).
fn phase_with_init(
    pod: &Pod,
    inits: &[(&model::Container, &ContainerStatus)],
    statuses: &[ContainerStatus],
) -> &'static str {
    let mut pending = 0;
    let mut failed = 0;
    for (spec, s) in inits {
        if model::is_sidecar(spec) {
            if !init_done(spec, s) {
                pending += 1;
            }
            continue;
        }
        let last_failed = s.last_state.as_ref().and_then(|l| l.terminated.as_ref()).is_some_and(|t| t.exit_code != 0);
        match terminated_code(s) {
            Some(0) => {}
            Some(_) => failed += 1,
            None if !is_running(s) && last_failed => failed += 1,
            None => pending += 1,
        }
    }
    if failed > 0 && model::restart_policy(pod) == "Never" {
        return model::PHASE_FAILED;
    }
    if (pending > 0 || failed > 0) && !any_app_started(statuses) {
        return model::PHASE_PENDING;
    }
    phase_of(pod, statuses)
}

/// The pod phase from container states, as the kubelet computes it.
pub fn phase_of(pod: &Pod, statuses: &[ContainerStatus]) -> &'static str {
    let (mut waiting, mut running, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for s in statuses {
        let state = s.state.as_ref();
        if state.and_then(|x| x.running.as_ref()).is_some() {
            running += 1;
        } else if let Some(t) = state.and_then(|x| x.terminated.as_ref()) {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if s.last_state.as_ref().and_then(|l| l.terminated.as_ref()).is_some() {
            stopped += 1;
        } else {
            waiting += 1;
        }
    }
    if waiting > 0 || statuses.is_empty() {
        return model::PHASE_PENDING;
    }
    if running > 0 {
        return model::PHASE_RUNNING;
    }
    match model::restart_policy(pod) {
        "Always" => model::PHASE_RUNNING,
        "OnFailure" if stopped == succeeded => model::PHASE_SUCCEEDED,
        "OnFailure" => model::PHASE_RUNNING,
        _ if stopped == succeeded => model::PHASE_SUCCEEDED,
        _ => model::PHASE_FAILED,
    }
}

fn condition(type_: &str, ok: bool, old: Option<&PodStatus>, now: &Time) -> PodCondition {
    condition_why(type_, ok, None, old, now)
}

/// A condition with the kubelet's reason and message (`ContainersNotReady`,
/// `containers with unready status: [a b]`).
fn condition_why(
    type_: &str,
    ok: bool,
    why: Option<(&str, String)>,
    old: Option<&PodStatus>,
    now: &Time,
) -> PodCondition {
    let status = if ok { "True" } else { "False" }.to_string();
    let since = old
        .and_then(|o| o.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    let (reason, message) = match why {
        Some((r, m)) => (Some(r.to_string()), (!m.is_empty()).then_some(m)),
        None => (None, None),
    };
    PodCondition {
        type_: type_.to_string(),
        status,
        last_transition_time: Some(since),
        reason,
        message,
        ..Default::default()
    }
}

/// Names as Go prints a `[]string`: `[a b]`.
fn go_list(names: &[&str]) -> String {
    format!("[{}]", names.join(" "))
}

/// Inputs to [`generate`] beyond the pod and the runtime's view.
pub struct GenerateInput<'a> {
    pub old: Option<&'a PodStatus>,
    /// Remembered Waiting reasons by container name.
    pub waiting: &'a HashMap<String, Waiting>,
    /// Force this terminal phase (set once the pod is terminal).
    pub terminal_phase: Option<&'a str>,
    /// `containerd://` and the like.
    pub id_prefix: &'a str,
    /// The node's address, the pod IP of host-network pods.
    pub host_ip: Option<&'a str>,
    /// Probe results (started, ready); without them a running container
    /// is started and ready.
    pub probes: Option<&'a crate::pod::prober::Results>,
}

/// Build the v1 PodStatus.
pub fn generate(pod: &Pod, rp: &RuntimePod, input: &GenerateInput) -> PodStatus {
    let now = model::now_time();
    let uid = model::uid(pod);
    let inits = model::init_containers(pod);
    // containers not created yet wait for initialization, as the kubelet
    // shows them, in a pod that has init containers
    let default_waiting = if inits.is_empty() { "ContainerCreating" } else { "PodInitializing" };
    let status_of = |c: &model::Container, role: Role| {
        container_status(c, rp, input.waiting.get(&c.name), input, uid, role, default_waiting)
    };
    let init_statuses: Vec<ContainerStatus> =
        inits.iter().map(|c| status_of(c, if model::is_sidecar(c) { Role::Sidecar } else { Role::Init })).collect();
    let statuses: Vec<ContainerStatus> = model::containers(pod).iter().map(|c| status_of(c, Role::App)).collect();
    let paired: Vec<(&model::Container, &ContainerStatus)> = inits.iter().zip(&init_statuses).collect();
    let phase = input.terminal_phase.unwrap_or_else(|| phase_with_init(pod, &paired, &statuses)).to_string();
    let terminal = model::is_terminal_phase(Some(&phase));
    // readiness: the app containers and the sidecars
    let unready: Vec<&str> = paired
        .iter()
        .filter(|(c, _)| model::is_sidecar(c))
        .map(|(_, s)| *s)
        .chain(&statuses)
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    let all_ready = !statuses.is_empty() && unready.is_empty() && !terminal;
    // a finished pod's readiness says how it finished, as the kubelet's does
    let ready_why = if all_ready {
        None
    } else if phase == model::PHASE_SUCCEEDED {
        Some(("PodCompleted", String::new()))
    } else if phase == model::PHASE_FAILED {
        Some(("PodFailed", String::new()))
    } else {
        Some(("ContainersNotReady", format!("containers with unready status: {}", go_list(&unready))))
    };
    let incomplete: Vec<&str> = paired.iter().filter(|(c, s)| !init_done(c, s)).map(|(c, _)| c.name.as_str()).collect();
    let init_why = if phase == model::PHASE_SUCCEEDED {
        Some(("PodCompleted", String::new()))
    } else if incomplete.is_empty() || any_app_started(&statuses) {
        None
    } else {
        Some(("ContainersNotInitialized", format!("containers with incomplete status: {}", go_list(&incomplete))))
    };
    let initialized = init_why.as_ref().is_none_or(|(r, _)| *r == "PodCompleted");
    let pod_ip = if model::host_network(pod) {
        input.host_ip.map(str::to_string)
    } else {
        rp.ready_sandbox().and_then(|s| s.ip.clone())
    }
    .or_else(|| input.old.and_then(|o| o.pod_ip.clone()).filter(|_| !terminal));
    // The reason and message belong to the phase they were given with, as
    // in the kubelet: kept while the phase stays, dropped when it changes (a
    // pod started again after a cancelled node shutdown is no longer
    // "Terminated").
    let same_phase = input.old.filter(|o| o.phase.as_deref() == Some(phase.as_str()));
    // the kubelet's PodReadyToStartContainers: the pod's sandbox is ready
    // and, off the host's network, has its IP (no new sandbox is needed)
    let sandbox_ready = rp.ready_sandbox().is_some_and(|s| model::host_network(pod) || s.ip.is_some()) && !terminal;
    // by name, as the kubelet lists them (init containers keep spec order)
    let mut statuses = statuses;
    statuses.sort_by(|a, b| a.name.cmp(&b.name));
    PodStatus {
        phase: Some(phase),
        conditions: Some(vec![
            condition("PodReadyToStartContainers", sandbox_ready, input.old, &now),
            condition("PodScheduled", true, input.old, &now),
            condition_why("Initialized", initialized, init_why, input.old, &now),
            condition_why("ContainersReady", all_ready, ready_why.clone(), input.old, &now),
            condition_why("Ready", all_ready, ready_why, input.old, &now),
        ]),
        pod_ips: pod_ip.clone().map(|ip| vec![PodIP { ip }]),
        pod_ip,
        host_ip: input.host_ip.map(str::to_string),
        start_time: Some(input.old.and_then(|o| o.start_time.clone()).unwrap_or(now)),
        container_statuses: Some(statuses),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        qos_class: Some(model::qos::qos_class(pod).as_str().to_string()),
        reason: same_phase.and_then(|o| o.reason.clone()),
        message: same_phase.and_then(|o| o.message.clone()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Container, PodSpec};

    fn pod(policy: &str) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                containers: vec![Container { name: "c".into(), image: Some("i".into()), ..Default::default() }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn exited(code: i32, attempt: u32) -> ContainerInfo {
        ContainerInfo {
            id: format!("id{attempt}"),
            sandbox_id: "s".into(),
            name: "c".into(),
            attempt,
            image: "i".into(),
            image_ref: "sha256:i".into(),
            state: ContainerState::Exited,
            created_at_ns: 1,
            started_at_ns: 1,
            finished_at_ns: 2,
            exit_code: code,
            reason: String::new(),
            message: String::new(),
            grace: None,
        }
    }

    fn gen_phase(policy: &str, c: Option<ContainerInfo>, waiting: Option<Waiting>) -> (String, ContainerStatus) {
        let p = pod(policy);
        let rp = RuntimePod { containers: c.into_iter().collect(), ..Default::default() };
        let mut w = HashMap::new();
        if let Some(x) = waiting {
            w.insert("c".to_string(), x);
        }
        let s = generate(&p, &rp, &input(&w));
        (s.phase.unwrap(), s.container_statuses.unwrap().remove(0))
    }

    fn input(waiting: &HashMap<String, Waiting>) -> GenerateInput<'_> {
        GenerateInput { old: None, waiting, terminal_phase: None, id_prefix: "fake://", host_ip: None, probes: None }
    }

    #[test]
    fn container_statuses_by_name_unready_list_in_spec_order() {
        let mut p = pod("Always");
        let spec = p.spec.as_mut().unwrap();
        spec.containers[0].name = "web".into();
        spec.containers.push(Container { name: "db".into(), image: Some("i".into()), ..Default::default() });
        let s = generate(&p, &RuntimePod::default(), &input(&HashMap::new()));
        let names: Vec<&str> = s.container_statuses.iter().flatten().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["db", "web"]);
        let ready = s.conditions.iter().flatten().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.message.as_deref(), Some("containers with unready status: [web db]"));
    }

    #[test]
    fn a_sync_that_regenerates_the_same_status_makes_no_new_version() {
        let p = pod("Always");
        let mut running = exited(0, 1);
        running.state = ContainerState::Running;
        let rp = RuntimePod { containers: vec![running], ..Default::default() };
        let m = StatusManager::new();
        let waiting = HashMap::new();
        let regen = |old: Option<&PodStatus>| Some(generate(&p, &rp, &GenerateInput { old, ..input(&waiting) }));
        m.replace_with("u1", regen);
        let v = m.version("u1").unwrap();
        let seq = crate::base::changes::current();
        m.replace_with("u1", regen);
        assert_eq!(m.version("u1"), Some(v), "the same status again is no change");
        m.replace_with("u1", |_| Some(PodStatus { phase: Some("Failed".into()), ..Default::default() }));
        assert!(m.version("u1").unwrap() > v);
        assert!(crate::base::changes::current() > seq);
    }

    #[test]
    fn phase_table() {
        assert_eq!(gen_phase("Always", None, None).0, "Pending");
        let mut running = exited(0, 0);
        running.state = ContainerState::Running;
        assert_eq!(gen_phase("Never", Some(running), None).0, "Running");
        assert_eq!(gen_phase("Never", Some(exited(0, 0)), None).0, "Succeeded");
        assert_eq!(gen_phase("Never", Some(exited(1, 0)), None).0, "Failed");
        assert_eq!(gen_phase("OnFailure", Some(exited(0, 0)), None).0, "Succeeded");
        assert_eq!(gen_phase("OnFailure", Some(exited(1, 0)), None).0, "Running");
        assert_eq!(gen_phase("Always", Some(exited(0, 0)), None).0, "Running");
    }

    #[test]
    fn reason_and_message_last_only_as_long_as_their_phase() {
        let p = pod("Always");
        let mut running = exited(0, 1);
        running.state = ContainerState::Running;
        let rp = RuntimePod { containers: vec![running], ..Default::default() };
        let old = PodStatus {
            phase: Some("Failed".into()),
            reason: Some("Terminated".into()),
            message: Some("Pod was terminated in response to imminent node shutdown.".into()),
            ..Default::default()
        };
        let make = |terminal_phase| {
            let w = HashMap::new();
            let input = GenerateInput {
                old: Some(&old),
                waiting: &w,
                terminal_phase,
                id_prefix: "",
                host_ip: None,
                probes: None,
            };
            let s = generate(&p, &rp, &input);
            (s.phase.unwrap(), s.reason, s.message)
        };
        assert_eq!(make(None), ("Running".to_string(), None, None), "started again: a running pod's status");
        let (phase, reason, message) = make(Some("Failed"));
        assert_eq!((phase.as_str(), reason.as_deref()), ("Failed", Some("Terminated")));
        assert!(message.is_some());
    }

    #[test]
    fn crash_loop_shows_waiting_reason_and_last_state() {
        let w = Waiting { reason: "CrashLoopBackOff".into(), message: "back-off 10s".into() };
        let (phase, cs) = gen_phase("Always", Some(exited(1, 3)), Some(w));
        assert_eq!(phase, "Running");
        assert_eq!(cs.restart_count, 3);
        let state = cs.state.unwrap();
        assert_eq!(state.waiting.unwrap().reason.as_deref(), Some("CrashLoopBackOff"));
        assert_eq!(cs.last_state.unwrap().terminated.unwrap().exit_code, 1);
    }
}

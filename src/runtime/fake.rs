//! An in-process runtime for unit tests, scenario tests, the stress test and
//! the core benchmark: records every call, scripts latency, injects faults
//! (fail call X for pod Y N times, hang until the deadline, lose all state as
//! a runtime restart would) and models SIGTERM handling per container name.
//!
//! Never a substitute for the end-to-end suite against containerd.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::base::unix_now_ns as now_ns;

use super::{
    Auth, CallCtx, Code, ContainerConfig, ContainerInfo, ContainerState, ImageInfo, Result, Runtime, RuntimeError,
    RuntimePod, SandboxConfig, SandboxInfo,
};

/// The fake's operations are the CRI methods ([`super::Op`]); it serves
/// all but `Version`, `ListContainers` and `ContainerStatus` (a list or a
/// status is one call here).
pub use super::Op;

/// One recorded call. `seq` is a global order shared with [`FakeRuntime::seq_now`].
#[derive(Debug, Clone)]
pub struct Call {
    pub seq: u64,
    pub op: Op,
    pub uid: String,
    pub target: String,
    /// The stop timeout of a StopContainer call.
    pub timeout: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultKind {
    /// Fail at once with an error.
    Error,
    /// Block until the call's deadline (or cancellation), then fail.
    Hang,
    /// Panic in the calling thread (tests of what a panicking thread does).
    Panic,
    /// Fail at once with this error (a status code and message as the
    /// runtime answers, or one podwarden's client finds before the call).
    ErrorWith(RuntimeError),
}

#[derive(Debug, Clone)]
struct Fault {
    op: Op,
    uid: Option<String>,
    remaining: u32,
    kind: FaultKind,
}

#[derive(Debug, Clone)]
struct FakeSandbox {
    info: SandboxInfo,
}

#[derive(Debug, Clone)]
struct FakeContainer {
    info: ContainerInfo,
    uid: String,
    /// The mounts it was created with (propagation included), as the
    /// runtime would set them up.
    mounts: Vec<super::Mount>,
}

#[derive(Default)]
struct State {
    sandboxes: HashMap<String, FakeSandbox>,
    containers: HashMap<String, FakeContainer>,
    /// Pod UID -> ids of its sandboxes and containers.
    by_uid: HashMap<String, HashSet<String>>,
    missing_images: HashSet<String>,
    /// Registry (`host[:port]`) -> the credentials its pulls need, as a
    /// registry with htpasswd authentication answers.
    registries: HashMap<String, Auth>,
    /// Every pull: the image and the user name it was given.
    pulls: Vec<(String, Option<String>)>,
    /// Images `list_images` shows (by ID), added by the tests.
    images: BTreeMap<String, ImageInfo>,
    /// What `image_fs_info` names as the image filesystem.
    image_fs_mountpoint: String,
    /// What `list_container_stats` reports per container ID.
    usage: HashMap<String, super::Usage>,
    calls: Vec<Call>,
    faults: Vec<Fault>,
    latency: HashMap<Op, Duration>,
    /// Container name -> time it takes to exit after SIGTERM; `None` ignores
    /// SIGTERM (killed at the end of the grace period, exit 137).
    term_delay: HashMap<String, Option<Duration>>,
    /// Containers named so: how long `StopContainer` goes on after their
    /// exit (told by its event), as containerd's clean-up of the task.
    stop_cleanup: HashMap<String, Duration>,
    /// Container name -> exit code on SIGTERM (default 0: a trapping shell).
    term_exit: HashMap<String, i32>,
    /// Container name -> what an exec in it returns (default: exit 0, no
    /// output); `None` hangs until the exec's timeout.
    exec: HashMap<String, Option<super::ExecResult>>,
    /// per (container name, attempt): wins over `exec`
    exec_attempt: HashMap<(String, u32), Option<super::ExecResult>>,
    /// Where the streaming URLs of `exec`, `attach` and `port_forward`
    /// point (default `fake://stream`): a test's own streaming server.
    stream_base: Option<String>,
    next_id: u64,
}

impl State {
    fn index(&mut self, uid: &str, id: &str) {
        self.by_uid.entry(uid.to_string()).or_default().insert(id.to_string());
    }

    fn unindex(&mut self, uid: &str, id: &str) {
        if let Some(set) = self.by_uid.get_mut(uid) {
            set.remove(id);
            if set.is_empty() {
                self.by_uid.remove(uid);
            }
        }
    }
}

/// See the module docs.
pub struct FakeRuntime {
    state: Mutex<State>,
    seq: AtomicU64,
    record: AtomicBool,
    started: AtomicU64,
    /// The open event streams (bounded; a full one is cut, as a runtime
    /// drops a client that does not read).
    watchers: Mutex<Vec<crossbeam_channel::Sender<super::events::ContainerEvent>>>,
    /// Whether the fake serves an event stream (as containerd does).
    events_on: AtomicBool,
}

impl Default for FakeRuntime {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeRuntime {
    /// Make the streaming calls answer with URLs under `base`
    /// (`http://127.0.0.1:PORT`): `{base}/exec/<container>`,
    /// `{base}/attach/<container>`, `{base}/portforward/<sandbox>`.
    pub fn set_stream_base(&self, base: &str) {
        self.state.lock().stream_base = Some(base.trim_end_matches('/').to_string());
    }

    /// The URL of a streaming call on a running container (`what`: exec or
    /// attach), as the runtime answers it.
    fn stream_url(&self, op: Op, what: &str, id: &str) -> Result<String> {
        let st = self.state.lock();
        let base = st.stream_base.clone().unwrap_or_else(|| "fake://stream".into());
        match st.containers.get(id) {
            Some(c) if c.info.state == ContainerState::Running => Ok(format!("{base}/{what}/{id}")),
            Some(_) => Err(RuntimeError::Failed {
                op,
                code: Code::Unknown,
                message: format!("container {id} is in {:?} state", c_state(&st, id)),
            }),
            None => Err(RuntimeError::NotFound { what: format!("container {id}") }),
        }
    }

    pub fn new() -> Self {
        FakeRuntime {
            state: Mutex::new(State::default()),
            seq: AtomicU64::new(1),
            record: AtomicBool::new(true),
            started: AtomicU64::new(0),
            watchers: Mutex::new(Vec::new()),
            events_on: AtomicBool::new(true),
        }
    }

    /// Serve an event stream or not (a runtime without one: the relist
    /// alone sees changes). On by default; off cuts the open streams.
    pub fn set_events(&self, on: bool) {
        self.events_on.store(on, Ordering::SeqCst);
        if !on {
            self.watchers.lock().clear();
        }
    }

    /// Cut every open event stream (as a runtime restarting does).
    pub fn break_event_streams(&self) {
        self.watchers.lock().clear();
    }

    /// Event streams open now.
    pub fn event_watchers(&self) -> usize {
        self.watchers.lock().len()
    }

    fn emit(&self, id: &str, kind: super::events::Kind) {
        let e = super::events::ContainerEvent { container_id: id.to_string(), kind, exit: None };
        self.watchers.lock().retain(|w| w.try_send(e.clone()).is_ok());
    }

    /// Keep (true, the default) or stop recording calls; the benchmark turns
    /// it off so the record does not grow without bound.
    pub fn set_recording(&self, on: bool) {
        self.record.store(on, Ordering::SeqCst);
    }

    /// The global sequence number the next call will get.
    pub fn seq_now(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst)
    }

    /// Containers started successfully since creation (cheap to poll).
    pub fn started_total(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().calls.clone()
    }

    pub fn calls_for(&self, uid: &str, op: Op) -> Vec<Call> {
        self.state.lock().calls.iter().filter(|c| c.uid == uid && c.op == op).cloned().collect()
    }

    pub fn clear_calls(&self) {
        self.state.lock().calls.clear();
    }

    pub fn set_latency(&self, op: Op, d: Duration) {
        self.state.lock().latency.insert(op, d);
    }

    pub fn clear_latency(&self) {
        self.state.lock().latency.clear();
    }

    /// Fail the next `times` calls of `op` (for pod `uid`, or any pod).
    pub fn fail(&self, op: Op, uid: Option<&str>, times: u32) {
        self.inject(op, uid, times, FaultKind::Error);
    }

    /// Make the next `times` calls of `op` hang until their deadline.
    pub fn hang(&self, op: Op, uid: Option<&str>, times: u32) {
        self.inject(op, uid, times, FaultKind::Hang);
    }

    /// Fail the next `times` calls of `op` with status `code` and
    /// `message`, as the runtime answers them.
    pub fn fail_with(&self, op: Op, uid: Option<&str>, times: u32, code: Code, message: &str) {
        let e = RuntimeError::Failed { op, code, message: message.to_string() };
        self.inject(op, uid, times, FaultKind::ErrorWith(e));
    }

    /// Fail the next `times` calls of `op` with `error`, for example
    /// [`RuntimeError::PathTooLong`], an error retrying cannot cure (the
    /// fake creates no directories: it never finds one itself).
    pub fn fail_with_error(&self, op: Op, uid: Option<&str>, times: u32, error: RuntimeError) {
        self.inject(op, uid, times, FaultKind::ErrorWith(error));
    }

    /// Make the next `times` calls of `op` panic in the calling thread.
    pub fn panic_on(&self, op: Op, uid: Option<&str>, times: u32) {
        self.inject(op, uid, times, FaultKind::Panic);
    }

    fn inject(&self, op: Op, uid: Option<&str>, times: u32, kind: FaultKind) {
        self.state.lock().faults.push(Fault { op, uid: uid.map(str::to_string), remaining: times, kind });
    }

    pub fn clear_faults(&self) {
        self.state.lock().faults.clear();
    }

    /// Forget every sandbox and container, as a runtime that lost its state.
    pub fn lose_state(&self) {
        let mut st = self.state.lock();
        st.sandboxes.clear();
        st.containers.clear();
        st.by_uid.clear();
    }

    /// Containers named `name` take `delay` to exit after SIGTERM
    /// (`None`: they ignore it and are killed at the deadline).
    pub fn set_term_delay(&self, name: &str, delay: Option<Duration>) {
        self.state.lock().term_delay.insert(name.to_string(), delay);
    }

    /// `StopContainer` of containers named `name` returns `cleanup` after
    /// their exit (and its event), as containerd's returns once the
    /// task's clean-up is done.
    pub fn set_stop_cleanup(&self, name: &str, cleanup: Duration) {
        self.state.lock().stop_cleanup.insert(name.to_string(), cleanup);
    }

    pub fn set_term_exit_code(&self, name: &str, code: i32) {
        self.state.lock().term_exit.insert(name.to_string(), code);
    }

    /// What an exec in containers named `name` returns from now on;
    /// `None`: it hangs until its timeout.
    pub fn set_exec_result(&self, name: &str, result: Option<super::ExecResult>) {
        self.state.lock().exec.insert(name.to_string(), result);
    }

    /// What an exec in the instance `attempt` of containers named `name`
    /// returns (wins over [`Self::set_exec_result`]): a test's script for
    /// one instance, whatever the test thread's pace.
    pub fn set_exec_result_of_attempt(&self, name: &str, attempt: u32, result: Option<super::ExecResult>) {
        self.state.lock().exec_attempt.insert((name.to_string(), attempt), result);
    }

    /// Pulls of this image fail and it is not present.
    pub fn make_image_missing(&self, image: &str) {
        self.state.lock().missing_images.insert(image.to_string());
    }

    /// Pulls of images from `registry` (`host[:port]`, the image's first
    /// component) need `auth`: without it they fail as a registry with
    /// htpasswd authentication answers.
    pub fn require_auth(&self, registry: &str, auth: Auth) {
        self.state.lock().registries.insert(registry.to_string(), auth);
    }

    /// Every pull so far: the image and the user name it carried.
    pub fn pulls(&self) -> Vec<(String, Option<String>)> {
        self.state.lock().pulls.clone()
    }

    /// Add an image that `list_images` shows.
    pub fn add_image(&self, info: ImageInfo) {
        self.state.lock().images.insert(info.id.clone(), info);
    }

    /// What the stats say container `id` uses.
    pub fn set_usage(&self, id: &str, usage: super::Usage) {
        self.state.lock().usage.insert(id.to_string(), usage);
    }

    /// Where `image_fs_info` says the images are.
    pub fn set_image_fs(&self, mountpoint: &str) {
        self.state.lock().image_fs_mountpoint = mountpoint.to_string();
    }

    /// Make the running container `name` of pod `uid` exit with `code`.
    pub fn exit_container(&self, uid: &str, name: &str, code: i32) -> bool {
        let hit = self.alter_running(uid, name, |i| {
            i.state = ContainerState::Exited;
            i.exit_code = code;
            i.finished_at_ns = now_ns();
            i.reason = if code == 0 { "Completed" } else { "Error" }.into();
        });
        for id in &hit {
            self.emit(id, super::events::Kind::Exited);
        }
        !hit.is_empty()
    }

    /// Put the running container `name` of pod `uid` in containerd's unknown
    /// state (a record lost); a stop ends it: exit code 255, reason `Unknown`.
    pub fn make_unknown(&self, uid: &str, name: &str) -> bool {
        !self.alter_running(uid, name, |i| i.state = ContainerState::Unknown).is_empty()
    }

    /// `f` applied to the running containers `name` of pod `uid`; their IDs.
    fn alter_running(&self, uid: &str, name: &str, f: impl Fn(&mut ContainerInfo)) -> Vec<String> {
        let mut st = self.state.lock();
        let mut hit = Vec::new();
        for c in st.containers.values_mut() {
            if c.uid == uid && c.info.name == name && c.info.state == ContainerState::Running {
                f(&mut c.info);
                hit.push(c.info.id.clone());
            }
        }
        hit
    }

    /// Containers of `uid` that are running or created.
    pub fn live_containers(&self, uid: &str) -> usize {
        self.state
            .lock()
            .containers
            .values()
            .filter(|c| c.uid == uid && matches!(c.info.state, ContainerState::Running | ContainerState::Created))
            .count()
    }

    /// The mounts of the newest container named `name` of pod `uid`, as it
    /// was created (empty when there is none).
    pub fn mounts_of(&self, uid: &str, name: &str) -> Vec<super::Mount> {
        let st = self.state.lock();
        st.containers
            .values()
            .filter(|c| c.uid == uid && c.info.name == name)
            .max_by_key(|c| (c.info.attempt, c.info.created_at_ns))
            .map(|c| c.mounts.clone())
            .unwrap_or_default()
    }

    /// Live (running or created) containers per pod UID, read atomically.
    pub fn live_by_uid(&self) -> HashMap<String, usize> {
        let mut m = HashMap::new();
        for c in self.state.lock().containers.values() {
            if matches!(c.info.state, ContainerState::Running | ContainerState::Created) {
                *m.entry(c.uid.clone()).or_default() += 1;
            }
        }
        m
    }

    pub fn ready_sandboxes(&self, uid: &str) -> usize {
        self.state.lock().sandboxes.values().filter(|s| s.info.uid == uid && s.info.ready).count()
    }

    /// Total sandboxes and containers the fake holds.
    pub fn object_count(&self) -> usize {
        let st = self.state.lock();
        st.sandboxes.len() + st.containers.len()
    }

    /// Insert a sandbox with one running container directly, as if another
    /// agent (or an earlier podwarden) had made it.
    pub fn add_running_pod(&self, uid: &str, name: &str, namespace: &str, container: &str, grace: Option<i64>) {
        let mut st = self.state.lock();
        st.next_id += 1;
        let sid = format!("sb-{}", st.next_id);
        st.index(uid, &sid);
        st.sandboxes.insert(
            sid.clone(),
            FakeSandbox {
                info: SandboxInfo {
                    id: sid.clone(),
                    uid: uid.into(),
                    name: name.into(),
                    namespace: namespace.into(),
                    attempt: 0,
                    ready: true,
                    created_at_ns: now_ns(),
                    ip: Some("10.88.0.99".into()),
                },
            },
        );
        st.next_id += 1;
        let cid = format!("ctr-{}", st.next_id);
        st.index(uid, &cid);
        st.containers.insert(
            cid.clone(),
            FakeContainer {
                uid: uid.into(),
                info: ContainerInfo {
                    id: cid,
                    sandbox_id: sid,
                    name: container.into(),
                    image: "busybox".into(),
                    image_ref: "sha256:busybox".into(),
                    state: ContainerState::Running,
                    created_at_ns: now_ns(),
                    started_at_ns: now_ns(),
                    grace,
                    ..Default::default()
                },
                mounts: Vec::new(),
            },
        );
    }

    /// Record the call, apply latency and faults.
    fn enter(&self, ctx: &CallCtx, op: Op, uid: &str, target: &str) -> Result<()> {
        self.enter_with(ctx, op, uid, target, None)
    }

    fn enter_with(&self, ctx: &CallCtx, op: Op, uid: &str, target: &str, timeout: Option<Duration>) -> Result<()> {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        let (fault, latency) = {
            let mut st = self.state.lock();
            if self.record.load(Ordering::Relaxed) {
                st.calls.push(Call { seq, op, uid: uid.to_string(), target: target.to_string(), timeout });
            }
            let mut fault = None;
            if let Some(f) = st
                .faults
                .iter_mut()
                .find(|f| f.op == op && f.remaining > 0 && f.uid.as_deref().is_none_or(|u| u == uid))
            {
                f.remaining -= 1;
                fault = Some(f.kind.clone());
            }
            st.faults.retain(|f| f.remaining > 0);
            (fault, st.latency.get(&op).copied().unwrap_or_default())
        };
        if !latency.is_zero() {
            self.wait(ctx, op, crate::base::cancel::deadline_in(latency))?;
        }
        match fault {
            None => Ok(()),
            Some(FaultKind::Error) => {
                Err(RuntimeError::Failed { op, code: Code::Unknown, message: "injected fault".into() })
            }
            Some(FaultKind::ErrorWith(e)) => Err(e),
            Some(FaultKind::Panic) => panic!("injected panic in {}", op.name()),
            Some(FaultKind::Hang) => {
                self.wait(ctx, op, ctx.deadline)?;
                Err(RuntimeError::DeadlineExceeded { op })
            }
        }
    }

    /// Sleep until `until`, failing if the call's deadline or cancellation
    /// comes first.
    fn wait(&self, ctx: &CallCtx, op: Op, until: Instant) -> Result<()> {
        let end = until.min(ctx.deadline);
        if ctx.cancel.sleep_until(end) {
            return Err(RuntimeError::Cancelled { op });
        }
        if until > ctx.deadline {
            return Err(RuntimeError::DeadlineExceeded { op });
        }
        Ok(())
    }

    fn uid_of_container(&self, id: &str) -> String {
        self.state.lock().containers.get(id).map(|c| c.uid.clone()).unwrap_or_default()
    }

    fn uid_of_sandbox(&self, id: &str) -> String {
        self.state.lock().sandboxes.get(id).map(|s| s.info.uid.clone()).unwrap_or_default()
    }

    fn pods(st: &State, only: Option<&str>) -> Vec<RuntimePod> {
        if let Some(uid) = only {
            let mut p = RuntimePod { uid: uid.to_string(), ..Default::default() };
            for id in st.by_uid.get(uid).into_iter().flatten() {
                if let Some(s) = st.sandboxes.get(id) {
                    p.name = s.info.name.clone();
                    p.namespace = s.info.namespace.clone();
                    p.sandboxes.push(s.info.clone());
                } else if let Some(c) = st.containers.get(id) {
                    p.containers.push(c.info.clone());
                }
            }
            p.sandboxes.sort_by(|a, b| a.id.cmp(&b.id));
            p.containers.sort_by(|a, b| a.id.cmp(&b.id));
            return if p.sandboxes.is_empty() && p.containers.is_empty() { vec![] } else { vec![p] };
        }
        let mut by_uid: BTreeMap<String, RuntimePod> = BTreeMap::new();
        for s in st.sandboxes.values() {
            if only.is_some_and(|u| u != s.info.uid) {
                continue;
            }
            let p = by_uid
                .entry(s.info.uid.clone())
                .or_insert_with(|| RuntimePod { uid: s.info.uid.clone(), ..Default::default() });
            p.name = s.info.name.clone();
            p.namespace = s.info.namespace.clone();
            p.sandboxes.push(s.info.clone());
        }
        for c in st.containers.values() {
            if only.is_some_and(|u| u != c.uid) {
                continue;
            }
            by_uid
                .entry(c.uid.clone())
                .or_insert_with(|| RuntimePod { uid: c.uid.clone(), ..Default::default() })
                .containers
                .push(c.info.clone());
        }
        for p in by_uid.values_mut() {
            p.sandboxes.sort_by(|a, b| a.id.cmp(&b.id));
            p.containers.sort_by(|a, b| a.id.cmp(&b.id));
        }
        by_uid.into_values().collect()
    }
}

impl Runtime for FakeRuntime {
    fn version(&self) -> String {
        "fake 0".into()
    }

    fn list_pods(&self, ctx: &CallCtx) -> Result<Vec<RuntimePod>> {
        self.enter(ctx, Op::ListPodSandbox, "", "")?;
        Ok(Self::pods(&self.state.lock(), None))
    }

    fn pod_status(&self, ctx: &CallCtx, uid: &str) -> Result<RuntimePod> {
        self.enter(ctx, Op::PodSandboxStatus, uid, uid)?;
        let st = self.state.lock();
        Ok(Self::pods(&st, Some(uid))
            .pop()
            .unwrap_or_else(|| RuntimePod { uid: uid.to_string(), ..Default::default() }))
    }

    fn image_status(&self, ctx: &CallCtx, image: &str) -> Result<Option<ImageInfo>> {
        self.enter(ctx, Op::ImageStatus, "", image)?;
        let st = self.state.lock();
        // the fake's images have no user: they run as root
        Ok((!st.missing_images.contains(image))
            .then(|| ImageInfo { id: format!("sha256:{image}"), ..Default::default() }))
    }

    fn pull_image(&self, ctx: &CallCtx, image: &str, auth: Option<&Auth>) -> Result<String> {
        self.enter(ctx, Op::PullImage, "", image)?;
        let mut st = self.state.lock();
        st.pulls.push((image.to_string(), auth.map(|a| a.username.clone())));
        if st.missing_images.contains(image) {
            return Err(RuntimeError::ImagePull { image: image.into(), message: "not found in any registry".into() });
        }
        let registry = image.split('/').next().unwrap_or_default();
        if let Some(want) = st.registries.get(registry)
            && auth != Some(want)
        {
            return Err(RuntimeError::ImagePull {
                image: image.into(),
                message: format!(
                    "failed to resolve reference \"{image}\": unexpected status from HEAD request to \
                     https://{registry}/v2/: 401 Unauthorized"
                ),
            });
        }
        Ok(format!("sha256:{image}"))
    }

    fn run_sandbox(&self, ctx: &CallCtx, config: &SandboxConfig) -> Result<String> {
        self.enter(ctx, Op::RunPodSandbox, &config.uid, &config.name)?;
        let mut st = self.state.lock();
        st.next_id += 1;
        let id = format!("sb-{}", st.next_id);
        let ip = (!config.host_network).then(|| format!("10.88.{}.{}", (st.next_id >> 8) & 255, st.next_id & 255));
        st.index(&config.uid, &id);
        st.sandboxes.insert(
            id.clone(),
            FakeSandbox {
                info: SandboxInfo {
                    id: id.clone(),
                    uid: config.uid.clone(),
                    name: config.name.clone(),
                    namespace: config.namespace.clone(),
                    attempt: config.attempt,
                    ready: true,
                    created_at_ns: now_ns(),
                    ip,
                },
            },
        );
        Ok(id)
    }

    fn stop_sandbox(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        let uid = self.uid_of_sandbox(id);
        self.enter(ctx, Op::StopPodSandbox, &uid, id)?;
        let mut st = self.state.lock();
        let t = now_ns();
        for c in st.containers.values_mut() {
            if c.info.sandbox_id == id && c.info.state != ContainerState::Exited {
                c.info.state = ContainerState::Exited;
                c.info.exit_code = 137;
                c.info.finished_at_ns = t;
                c.info.reason = "Error".into();
            }
        }
        if let Some(s) = st.sandboxes.get_mut(id) {
            s.info.ready = false;
        }
        drop(st);
        self.emit(id, super::events::Kind::Exited);
        Ok(())
    }

    fn remove_sandbox(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        let uid = self.uid_of_sandbox(id);
        self.enter(ctx, Op::RemovePodSandbox, &uid, id)?;
        let mut st = self.state.lock();
        if st.sandboxes.get(id).is_some_and(|s| s.info.ready) {
            return Err(RuntimeError::Failed {
                op: Op::RemovePodSandbox,
                code: Code::Unknown,
                message: format!("sandbox {id} is still running"),
            });
        }
        let Some(sb) = st.sandboxes.remove(id) else {
            return Ok(());
        };
        st.unindex(&sb.info.uid, id);
        let gone: Vec<(String, String)> = st
            .by_uid
            .get(&sb.info.uid)
            .into_iter()
            .flatten()
            .filter(|cid| st.containers.get(*cid).is_some_and(|c| c.info.sandbox_id == id))
            .map(|cid| (cid.clone(), sb.info.uid.clone()))
            .collect();
        for (cid, uid) in gone {
            st.containers.remove(&cid);
            st.unindex(&uid, &cid);
        }
        Ok(())
    }

    fn create_container(
        &self,
        ctx: &CallCtx,
        sandbox_id: &str,
        config: &ContainerConfig,
        sandbox: &SandboxConfig,
    ) -> Result<String> {
        self.enter(ctx, Op::CreateContainer, &sandbox.uid, &config.name)?;
        let mut st = self.state.lock();
        if !st.sandboxes.get(sandbox_id).is_some_and(|s| s.info.ready) {
            return Err(RuntimeError::NotFound { what: format!("ready sandbox {sandbox_id}") });
        }
        if st.missing_images.contains(&config.image) {
            return Err(RuntimeError::NotFound { what: format!("image {}", config.image) });
        }
        if config.security.privileged && !sandbox.privileged {
            // as containerd's CRI plugin
            return Err(RuntimeError::Failed {
                op: Op::CreateContainer,
                code: Code::Unknown,
                message: "no privileged container allowed in sandbox".into(),
            });
        }
        st.next_id += 1;
        let id = format!("ctr-{}", st.next_id);
        st.index(&sandbox.uid, &id);
        st.containers.insert(
            id.clone(),
            FakeContainer {
                uid: sandbox.uid.clone(),
                info: ContainerInfo {
                    id: id.clone(),
                    sandbox_id: sandbox_id.to_string(),
                    name: config.name.clone(),
                    attempt: config.attempt,
                    image: config.image.clone(),
                    image_ref: format!("sha256:{}", config.image),
                    state: ContainerState::Created,
                    created_at_ns: now_ns(),
                    started_at_ns: 0,
                    finished_at_ns: 0,
                    exit_code: 0,
                    reason: String::new(),
                    message: String::new(),
                    grace: config.annotations.get(super::ANNOTATION_GRACE).and_then(|g| g.parse().ok()),
                },
                mounts: config.mounts.clone(),
            },
        );
        drop(st);
        self.emit(&id, super::events::Kind::Created);
        Ok(id)
    }

    fn start_container(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        let uid = self.uid_of_container(id);
        self.enter(ctx, Op::StartContainer, &uid, id)?;
        let mut st = self.state.lock();
        let c = st.containers.get_mut(id).ok_or_else(|| RuntimeError::NotFound { what: format!("container {id}") })?;
        if c.info.state != ContainerState::Created {
            return Err(RuntimeError::Failed {
                op: Op::StartContainer,
                code: Code::Unknown,
                message: format!("container {id} is not in created state"),
            });
        }
        c.info.state = ContainerState::Running;
        c.info.started_at_ns = now_ns();
        self.started.fetch_add(1, Ordering::SeqCst);
        drop(st);
        self.emit(id, super::events::Kind::Started);
        Ok(())
    }

    fn stop_container(&self, ctx: &CallCtx, id: &str, timeout: Duration) -> Result<()> {
        let uid = self.uid_of_container(id);
        self.enter_with(ctx, Op::StopContainer, &uid, id, Some(timeout))?;
        let (delay, term_code, name) = {
            let st = self.state.lock();
            let Some(c) = st.containers.get(id) else {
                return Err(RuntimeError::NotFound { what: format!("container {id}") });
            };
            if c.info.state != ContainerState::Running {
                drop(st);
                let mut st = self.state.lock();
                if let Some(c) = st.containers.get_mut(id)
                    && matches!(c.info.state, ContainerState::Created | ContainerState::Unknown)
                {
                    if c.info.state == ContainerState::Unknown {
                        (c.info.exit_code, c.info.reason) = (255, "Unknown".into());
                    }
                    c.info.state = ContainerState::Exited;
                    c.info.finished_at_ns = now_ns();
                }
                return Ok(());
            }
            (
                st.term_delay.get(&c.info.name).copied().unwrap_or(Some(Duration::ZERO)),
                st.term_exit.get(&c.info.name).copied().unwrap_or(0),
                c.info.name.clone(),
            )
        };
        let (wait, code) = match delay {
            Some(d) if d <= timeout => (d, term_code),
            _ => (timeout, 137),
        };
        if !wait.is_zero() {
            self.wait(ctx, Op::StopContainer, crate::base::cancel::deadline_in(wait))?;
        }
        let mut st = self.state.lock();
        if let Some(c) = st.containers.get_mut(id)
            && c.info.state == ContainerState::Running
        {
            c.info.state = ContainerState::Exited;
            c.info.exit_code = code;
            c.info.finished_at_ns = now_ns();
            c.info.reason = if code == 0 { "Completed" } else { "Error" }.into();
        }
        let cleanup = st.stop_cleanup.get(&name).copied().unwrap_or_default();
        drop(st);
        self.emit(id, super::events::Kind::Exited);
        if !cleanup.is_zero() {
            self.wait(ctx, Op::StopContainer, crate::base::cancel::deadline_in(cleanup))?;
        }
        Ok(())
    }

    fn remove_container(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        let uid = self.uid_of_container(id);
        self.enter(ctx, Op::RemoveContainer, &uid, id)?;
        let mut st = self.state.lock();
        if st.containers.get(id).is_some_and(|c| c.info.state == ContainerState::Running) {
            return Err(RuntimeError::Failed {
                op: Op::RemoveContainer,
                code: Code::Unknown,
                message: format!("container {id} is running"),
            });
        }
        if let Some(c) = st.containers.remove(id) {
            st.unindex(&c.uid, id);
        }
        drop(st);
        self.emit(id, super::events::Kind::Deleted);
        Ok(())
    }

    fn list_images(&self, ctx: &CallCtx) -> Result<Vec<ImageInfo>> {
        self.enter(ctx, Op::ListImages, "", "")?;
        Ok(self.state.lock().images.values().cloned().collect())
    }

    fn remove_image(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        self.enter(ctx, Op::RemoveImage, "", id)?;
        match self.state.lock().images.remove(id) {
            Some(_) => Ok(()),
            None => Err(RuntimeError::NotFound { what: format!("image {id}") }),
        }
    }

    fn image_fs_info(&self, ctx: &CallCtx) -> Result<Vec<super::ImageFs>> {
        self.enter(ctx, Op::ImageFsInfo, "", "")?;
        let st = self.state.lock();
        Ok(vec![super::ImageFs {
            // the fake holds its images in memory: say the root filesystem
            mountpoint: if st.image_fs_mountpoint.is_empty() { "/".into() } else { st.image_fs_mountpoint.clone() },
            used_bytes: st.images.values().map(|i| i.size).sum(),
            inodes_used: st.images.len() as u64,
        }])
    }

    fn list_container_stats(&self, ctx: &CallCtx) -> Result<Vec<super::ContainerStats>> {
        self.enter(ctx, Op::ListContainerStats, "", "")?;
        let st = self.state.lock();
        Ok(st
            .containers
            .iter()
            .filter(|(_, c)| c.info.state == ContainerState::Running)
            .map(|(id, c)| super::ContainerStats {
                id: id.clone(),
                name: c.info.name.clone(),
                pod_uid: c.uid.clone(),
                usage: st.usage.get(id).copied().unwrap_or_default(),
                ..Default::default()
            })
            .collect())
    }

    fn list_sandbox_stats(&self, ctx: &CallCtx) -> Result<Vec<super::SandboxStats>> {
        self.enter(ctx, Op::ListPodSandboxStats, "", "")?;
        // as a runtime without the call: the caller sums the containers
        Err(RuntimeError::Unimplemented { op: Op::ListPodSandboxStats })
    }

    fn reopen_container_log(&self, ctx: &CallCtx, id: &str) -> Result<()> {
        let uid = self.uid_of_container(id);
        self.enter(ctx, Op::ReopenContainerLog, &uid, id)?;
        match self.state.lock().containers.get(id) {
            Some(c) if c.info.state == ContainerState::Running => Ok(()),
            Some(_) => Err(RuntimeError::Failed {
                op: Op::ReopenContainerLog,
                code: Code::Unknown,
                message: format!("container {id} is not running"),
            }),
            None => Err(RuntimeError::NotFound { what: format!("container {id}") }),
        }
    }

    fn watch_events(
        &self,
        cancel: &crate::base::cancel::CancelToken,
        on: &mut dyn FnMut(super::events::Note),
    ) -> Result<()> {
        use super::events::{Note, Source};
        if !self.events_on.load(Ordering::SeqCst) {
            return Err(RuntimeError::Unimplemented { op: Op::GetContainerEvents });
        }
        let (tx, rx) = crossbeam_channel::bounded(1024);
        self.watchers.lock().push(tx);
        on(Note::Opened(Source::Fake));
        loop {
            crossbeam_channel::select! {
                recv(rx) -> e => match e {
                    Ok(e) => on(Note::Event(e)),
                    Err(_) => return Err(RuntimeError::Unavailable("fake: the event stream was cut".into())),
                },
                recv(cancel.receiver()) -> _ => return Ok(()),
            }
        }
    }

    fn exec_sync(&self, id: &str, cmd: &[String], timeout: Duration, done: super::ExecDone) {
        let uid = self.uid_of_container(id);
        if let Err(e) = self.enter(&CallCtx::background(timeout), Op::ExecSync, &uid, &cmd.join(" ")) {
            return done(Err(e));
        }
        let script = {
            let st = self.state.lock();
            match st.containers.get(id) {
                Some(c) if c.info.state == ContainerState::Running => {
                    let of_attempt = st.exec_attempt.get(&(c.info.name.clone(), c.info.attempt));
                    Ok(of_attempt
                        .or_else(|| st.exec.get(&c.info.name))
                        .cloned()
                        .unwrap_or(Some(super::ExecResult::default())))
                }
                _ => Err(RuntimeError::Failed {
                    op: Op::ExecSync,
                    code: Code::Unknown,
                    message: format!("container {id} is not running"),
                }),
            }
        };
        match script {
            Err(e) => done(Err(e)),
            Ok(Some(r)) => done(Ok(r)),
            Ok(None) => {
                // a hung command: the runtime gives up at the timeout
                let spawned = crate::base::thread::spawn("fake-exec", None, move || {
                    std::thread::sleep(timeout);
                    done(Err(RuntimeError::DeadlineExceeded { op: Op::ExecSync }));
                });
                if let Err(e) = spawned {
                    log::warn!("fake runtime: exec timer: {e}");
                }
            }
        }
    }

    fn exec(&self, ctx: &CallCtx, id: &str, cmd: &[String], _streams: super::Streams) -> Result<String> {
        self.enter(ctx, Op::Exec, &self.uid_of_container(id), &cmd.join(" "))?;
        self.stream_url(Op::Exec, "exec", id)
    }

    fn attach(&self, ctx: &CallCtx, id: &str, _streams: super::Streams) -> Result<String> {
        self.enter(ctx, Op::Attach, &self.uid_of_container(id), id)?;
        self.stream_url(Op::Attach, "attach", id)
    }

    fn port_forward(&self, ctx: &CallCtx, sandbox_id: &str, ports: &[u16]) -> Result<String> {
        let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
        self.enter(ctx, Op::PortForward, &self.uid_of_sandbox(sandbox_id), &ports.join(","))?;
        let st = self.state.lock();
        let base = st.stream_base.clone().unwrap_or_else(|| "fake://stream".into());
        match st.sandboxes.get(sandbox_id) {
            Some(sb) if sb.info.ready => Ok(format!("{base}/portforward/{sandbox_id}")),
            Some(_) => Err(RuntimeError::Failed {
                op: Op::PortForward,
                code: Code::Unknown,
                message: format!("sandbox {sandbox_id} is not ready"),
            }),
            None => Err(RuntimeError::NotFound { what: format!("sandbox {sandbox_id}") }),
        }
    }
}

/// A container's state for a message.
fn c_state(st: &State, id: &str) -> ContainerState {
    st.containers.get(id).map(|c| c.info.state).unwrap_or_default()
}

//! Liveness, readiness and startup probes: one `prober` thread runs every
//! probe of every pod, with the kubelet's rules ([`state`]).
//!
//! Who does what:
//! - a pod worker's set-up pass reports the containers it saw
//!   ([`Prober::observe`]); termination stops liveness and startup
//!   ([`Prober::stop_liveness_and_startup`]), the end of the pod removes its
//!   probes ([`Prober::remove`]). These only queue a message: a worker
//!   never waits for the prober.
//! - the prober thread keeps each probe's [`state::ProbeState`], starts the
//!   probes that are due and waits, in one `poll`, for the earliest
//!   deadline, its queue (an eventfd) and every TCP/HTTP probe in flight
//!   ([`net`]: non-blocking sockets). Exec probes are CRI `ExecSync` calls
//!   that do not block ([`crate::runtime::Runtime::exec_sync`]) and gRPC
//!   probes asynchronous `Health/Check` calls ([`grpc`]): the gRPC
//!   completion thread queues their result. Nothing a probe does can stop
//!   another probe or a pod worker: a hung probe costs its timeout, on no
//!   thread.
//! - results go to [`Results`] (read by the sync phases and the status);
//!   a change that matters (readiness, startup passed, liveness or startup
//!   failed) asks the pod's worker for a sync pass. The worker kills a
//!   container whose liveness or startup probe failed; a kill never waits
//!   for a probe, and a probe result for a container that is gone is
//!   dropped.

pub mod grpc;
pub mod net;
pub mod resolve;
pub mod state;

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};
use k8s_openapi::api::core::v1::{Container, Probe};
use parking_lot::Mutex;

use crate::model::{self, Pod};
use crate::runtime::{Runtime, RuntimeError};
use crate::telemetry::events::{EventRecorder, EventType, ObjectRef};
use crate::telemetry::metrics::{Metrics, ProbeResult, ProbeSeries};
pub use state::{Cached, Kind, Outcome, Timing};

/// Output of an exec probe kept at most (the kubelet's 10 KiB).
pub const MAX_EXEC_OUTPUT: usize = 10 * 1024;

/// A container as a sync pass saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub name: String,
    pub id: String,
    pub running: bool,
    /// When it started (Unix nanoseconds; 0 if unknown).
    pub started_at_ns: i64,
}

/// The probe results of the current container instances, by pod UID and
/// container name.
#[derive(Default)]
pub struct Results {
    map: Mutex<HashMap<String, HashMap<String, Entry>>>,
}

#[derive(Debug, Clone)]
struct Entry {
    id: String,
    cached: [Option<Cached>; 3],
}

fn slot(kind: Kind) -> usize {
    match kind {
        Kind::Liveness => 0,
        Kind::Readiness => 1,
        Kind::Startup => 2,
    }
}

impl Results {
    /// The cached result of `kind` for container instance `id`.
    pub fn get(&self, uid: &str, name: &str, id: &str, kind: Kind) -> Option<Cached> {
        let map = self.map.lock();
        let e = map.get(uid)?.get(name)?;
        if e.id != id {
            return None;
        }
        e.cached[slot(kind)]
    }

    fn set(&self, uid: &str, name: &str, id: &str, kind: Kind, value: Cached) {
        let mut map = self.map.lock();
        let e = map
            .entry(uid.to_string())
            .or_default()
            .entry(name.to_string())
            .or_insert_with(|| Entry { id: id.to_string(), cached: [None; 3] });
        if e.id != id {
            *e = Entry { id: id.to_string(), cached: [None; 3] };
        }
        e.cached[slot(kind)] = Some(value);
    }

    fn remove_pod(&self, uid: &str) {
        self.map.lock().remove(uid);
    }

    /// Whether the running container instance `id` of `c` has started: it
    /// has no startup probe, or that probe passed.
    pub fn started(&self, uid: &str, c: &Container, id: &str) -> bool {
        c.startup_probe.is_none() || self.get(uid, &c.name, id, Kind::Startup) == Some(Cached::Success)
    }

    /// Whether the running container instance `id` of `c` is ready: started,
    /// and its readiness probe (if any) passed last.
    pub fn ready(&self, uid: &str, c: &Container, id: &str) -> bool {
        self.started(uid, c, id)
            && (c.readiness_probe.is_none() || self.get(uid, &c.name, id, Kind::Readiness) == Some(Cached::Success))
    }

    /// The probe whose failure means the container instance must be killed
    /// (liveness, or a startup probe that gave up).
    pub fn failed(&self, uid: &str, c: &Container, id: &str) -> Option<Kind> {
        [Kind::Liveness, Kind::Startup].into_iter().find(|k| self.get(uid, &c.name, id, *k) == Some(Cached::Failure))
    }
}

/// The probe of `kind` in `c`'s spec.
pub fn probe_of(c: &Container, kind: Kind) -> Option<&Probe> {
    match kind {
        Kind::Liveness => c.liveness_probe.as_ref(),
        Kind::Readiness => c.readiness_probe.as_ref(),
        Kind::Startup => c.startup_probe.as_ref(),
    }
}

/// Whether the pod has any probe (only those pods are sent to the prober).
pub fn has_probes(pod: &Pod) -> bool {
    model::long_running(pod).any(|c| Kind::ALL.iter().any(|k| probe_of(c, *k).is_some()))
}

/// Called with a pod whose probe results changed in a way its worker must
/// act on.
pub type Resync = Box<dyn Fn(Arc<Pod>) + Send + Sync>;

enum Cmd {
    Observe { pod: Arc<Pod>, pod_ip: Option<String>, seen: Vec<Seen> },
    StopLivenessAndStartup(String),
    Remove(String),
    Done { token: u64, outcome: Outcome },
    Stop,
}

/// Handle on the prober thread; dropping it stops the thread.
pub struct Prober {
    tx: Sender<Cmd>,
    wake: Arc<File>,
    results: Arc<Results>,
    resync: Arc<Mutex<Option<Resync>>>,
    join: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// What the prober thread uses.
pub struct ProberDeps {
    pub runtime: Arc<dyn Runtime>,
    pub events: Arc<EventRecorder>,
    pub metrics: Option<Arc<Metrics>>,
}

fn wake(f: &File) {
    let _ = (&*f).write(&1u64.to_ne_bytes());
}

impl Prober {
    pub fn start(deps: ProberDeps) -> std::io::Result<Arc<Prober>> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let wake_fd = File::from(crate::sys::eventfd(libc::EFD_CLOEXEC | libc::EFD_NONBLOCK)?);
        let wake = Arc::new(wake_fd);
        let results = Arc::new(Results::default());
        let resync: Arc<Mutex<Option<Resync>>> = Arc::new(Mutex::new(None));
        let mut looper = Loop {
            deps,
            rx,
            tx: tx.clone(),
            wake: wake.clone(),
            results: results.clone(),
            resync: resync.clone(),
            pods: HashMap::new(),
            inflight: HashMap::new(),
            next_token: 1,
        };
        let join = crate::base::thread::spawn("prober", Some(128 * 1024), move || looper.run())?;
        Ok(Arc::new(Prober { tx, wake, results, resync, join: Mutex::new(Some(join)) }))
    }

    /// Who acts on changed results (the pod workers); set once they exist.
    pub fn set_resync(&self, f: Resync) {
        *self.resync.lock() = Some(f);
    }

    pub fn results(&self) -> &Arc<Results> {
        &self.results
    }

    fn send(&self, cmd: Cmd) {
        if self.tx.send(cmd).is_ok() {
            wake(&self.wake);
        }
    }

    /// A set-up pass saw these containers of `pod` (running on `pod_ip`,
    /// the node's for a host-network pod).
    pub fn observe(&self, pod: &Arc<Pod>, pod_ip: Option<&str>, seen: Vec<Seen>) {
        self.send(Cmd::Observe { pod: pod.clone(), pod_ip: pod_ip.map(str::to_string), seen });
    }

    /// The pod is terminating: no more liveness or startup probes
    /// (readiness goes on until the containers stop, as in the kubelet).
    pub fn stop_liveness_and_startup(&self, uid: &str) {
        self.send(Cmd::StopLivenessAndStartup(uid.to_string()));
    }

    /// The pod is gone: its probes, results and metric series too.
    pub fn remove(&self, uid: &str) {
        self.send(Cmd::Remove(uid.to_string()));
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.send(Cmd::Stop);
        if let Some(j) = self.join.lock().take() {
            // the last owner can be the prober thread itself (its resync
            // held the pod workers when everything else let go): it ends on
            // the Stop message, it cannot join itself
            if j.thread().id() != std::thread::current().id() {
                let _ = j.join();
            }
        }
    }
}

struct ContainerProbes {
    id: Option<String>,
    running: bool,
    probes: Vec<state::ProbeState>,
}

struct PodProbes {
    pod: Arc<Pod>,
    pod_ip: Option<String>,
    terminating: bool,
    containers: HashMap<String, ContainerProbes>,
}

struct InFlight {
    uid: String,
    container: String,
    kind: Kind,
    id: String,
    started: Instant,
    /// A TCP or HTTP probe; `None` for an exec whose result comes as `Done`.
    net: Option<net::NetProbe>,
    deadline: Instant,
}

struct Loop {
    deps: ProberDeps,
    rx: Receiver<Cmd>,
    tx: Sender<Cmd>,
    wake: Arc<File>,
    results: Arc<Results>,
    resync: Arc<Mutex<Option<Resync>>>,
    pods: HashMap<String, PodProbes>,
    inflight: HashMap<u64, InFlight>,
    next_token: u64,
}

fn since_start(started_at_ns: i64) -> Duration {
    if started_at_ns <= 0 {
        return Duration::ZERO;
    }
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    now.saturating_sub(Duration::from_nanos(started_at_ns as u64))
}

/// The longest the prober's thread sleeps with nothing due (a safety net:
/// every command wakes it at once).
const IDLE_POLL_MS: i32 = 60_000;

impl Loop {
    fn run(&mut self) {
        loop {
            // the queue first: observations, removals, exec results
            loop {
                match self.rx.try_recv() {
                    Ok(Cmd::Stop) => return,
                    Ok(cmd) => self.handle(cmd),
                    Err(_) => break,
                }
            }
            let now = Instant::now();
            self.start_due(now);
            self.expire(now);
            // wait for the next due probe, deadline, socket or message
            let next = self
                .pods
                .values()
                .flat_map(|p| p.containers.values())
                .filter(|c| c.running)
                .flat_map(|c| c.probes.iter().map(|s| s.next_due()))
                .chain(self.inflight.values().map(|f| f.deadline))
                .min();
            // every command writes the wake fd: with nothing due the
            // thread sleeps (an idle node's prober wakes once a minute)
            let timeout = next.map_or(IDLE_POLL_MS, |t| {
                let left = t.saturating_duration_since(Instant::now());
                (left.as_millis().min(IDLE_POLL_MS as u128) as i32) + i32::from(!left.is_zero())
            });
            let mut tokens = Vec::new();
            let mut fds = vec![libc::pollfd { fd: self.wake.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
            for (t, f) in &self.inflight {
                if let Some(n) = &f.net {
                    tokens.push(*t);
                    fds.push(libc::pollfd { fd: n.fd(), events: n.events(), revents: 0 });
                }
            }
            match crate::sys::poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("prober: poll: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            }
            if fds[0].revents != 0 {
                let mut buf = [0u8; 8];
                let _ = (&*self.wake).read(&mut buf);
            }
            for (i, t) in tokens.into_iter().enumerate() {
                if fds[i + 1].revents == 0 {
                    continue;
                }
                let done = self.inflight.get_mut(&t).and_then(|f| f.net.as_mut()).and_then(|n| n.advance());
                if let Some(outcome) = done {
                    self.finish(t, outcome);
                }
            }
        }
    }

    fn handle(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Observe { pod, pod_ip, seen } => self.observe(pod, pod_ip, seen),
            Cmd::StopLivenessAndStartup(uid) => {
                if let Some(p) = self.pods.get_mut(&uid) {
                    p.terminating = true;
                }
            }
            Cmd::Remove(uid) => {
                self.pods.remove(&uid);
                self.inflight.retain(|_, f| f.uid != uid);
                self.results.remove_pod(&uid);
                if let Some(m) = &self.deps.metrics {
                    m.retain_probes(|s| s.pod_uid != uid);
                }
            }
            Cmd::Done { token, outcome } => self.finish(token, outcome),
            Cmd::Stop => {}
        }
    }

    fn observe(&mut self, pod: Arc<Pod>, pod_ip: Option<String>, seen: Vec<Seen>) {
        let uid = model::uid(&pod).to_string();
        let now = Instant::now();
        let entry = self.pods.entry(uid.clone()).or_insert_with(|| PodProbes {
            pod: pod.clone(),
            pod_ip: None,
            terminating: false,
            containers: HashMap::new(),
        });
        entry.pod = pod.clone();
        entry.pod_ip = pod_ip;
        let mut changed = false;
        for c in model::long_running(&pod) {
            let kinds: Vec<Kind> = Kind::ALL.into_iter().filter(|k| probe_of(c, *k).is_some()).collect();
            if kinds.is_empty() {
                entry.containers.remove(&c.name);
                continue;
            }
            let cp = entry.containers.entry(c.name.clone()).or_insert_with(|| ContainerProbes {
                id: None,
                running: false,
                probes: kinds
                    .iter()
                    .map(|k| state::ProbeState::new(*k, Timing::of(probe_of(c, *k).expect("filtered")), now))
                    .collect(),
            });
            let s = seen.iter().find(|s| s.name == c.name);
            let (id, running, ago) = match s {
                Some(s) => (Some(s.id.as_str()), s.running, since_start(s.started_at_ns)),
                None => (None, false, Duration::ZERO),
            };
            cp.running = running;
            let new_instance = id != cp.id.as_deref();
            cp.id = id.map(str::to_string);
            for p in &mut cp.probes {
                let moved = p.observe(id, running, ago, now);
                if let Some(id) = id {
                    if new_instance || moved {
                        self.results.set(&uid, &c.name, id, p.kind, p.cached());
                    }
                    changed |= moved;
                }
                // a container not ready yet is probed for readiness at once
                // (the kubelet's manual trigger), not a period later
                if p.kind == Kind::Readiness && running && p.cached() != Cached::Success && new_instance {
                    p.trigger(now);
                }
            }
        }
        if changed {
            self.resync(&pod);
        }
    }

    fn resync(&self, pod: &Arc<Pod>) {
        if let Some(f) = self.resync.lock().as_ref() {
            f(pod.clone());
        }
    }

    fn start_due(&mut self, now: Instant) {
        let mut starts = Vec::new();
        for (uid, p) in &mut self.pods {
            for (name, c) in &mut p.containers {
                let Some(id) = c.id.clone() else { continue };
                let started =
                    c.probes.iter().find(|s| s.kind == Kind::Startup).is_none_or(|s| s.cached() == Cached::Success);
                for s in &mut c.probes {
                    if p.terminating && s.kind != Kind::Readiness {
                        continue;
                    }
                    if !s.due(now, c.running, started) {
                        continue;
                    }
                    let busy =
                        self.inflight.values().any(|f| f.uid == *uid && f.container == *name && f.kind == s.kind);
                    if busy {
                        continue;
                    }
                    s.started_probe(now);
                    starts.push((uid.clone(), name.clone(), s.kind, id.clone(), s.timing.timeout));
                }
            }
        }
        for (uid, name, kind, id, timeout) in starts {
            self.start(uid, name, kind, id, timeout, now);
        }
    }

    fn start(&mut self, uid: String, name: String, kind: Kind, id: String, timeout: Duration, now: Instant) {
        let Some(p) = self.pods.get(&uid) else { return };
        let pod = p.pod.clone();
        let Some(c) = model::find_container(&pod, &name) else { return };
        let Some(probe) = probe_of(c, kind) else { return };
        let token = self.next_token;
        self.next_token += 1;
        let deadline = crate::base::cancel::add_saturating(now, timeout);
        let mut flight = InFlight { uid, container: name, kind, id: id.clone(), started: now, net: None, deadline };
        let immediate = if let Some(exec) = &probe.exec {
            let cmd = exec_command(c, exec.command.as_deref().unwrap_or_default());
            let shown = cmd.join(" ");
            // the exec's own timeout ends it; the deadline here is only a
            // backstop for a runtime that never answers
            let done = self.in_flight_elsewhere(token, flight, now, timeout + Duration::from_secs(15));
            self.deps.runtime.exec_sync(&id, &cmd, timeout, Box::new(move |r| done(exec_outcome(&shown, r))));
            return;
        } else if let Some(g) = &probe.grpc {
            // the pod's IP, never a host of its own (the field has none)
            let port = u16::try_from(g.port).unwrap_or(0);
            match p.pod_ip.as_deref().and_then(|ip| net::socket_addr(ip, port)) {
                None => Err(Outcome::Error(TargetError::NoPodIp.to_string())),
                Some(addr) => {
                    let done = self.in_flight_elsewhere(token, flight, now, timeout + Duration::from_secs(5));
                    grpc::check(addr, g.service.as_deref().unwrap_or(""), timeout, done);
                    return;
                }
            }
        } else if let Some(t) = &probe.tcp_socket {
            match target(p.pod_ip.as_deref(), t.host.as_deref(), &t.port, c) {
                Ok((host, port)) => net::NetProbe::tcp(&host, port, deadline),
                Err(e) => Err(Outcome::Error(e.to_string())),
            }
        } else if let Some(h) = &probe.http_get {
            match net::HttpGet::of(h, p.pod_ip.as_deref(), c, net::PROBE_USER_AGENT) {
                Ok(get) => net::NetProbe::http(get, deadline),
                Err(e) => Err(Outcome::Error(e.to_string())),
            }
        } else {
            Err(Outcome::Error("no handler".into()))
        };
        match immediate {
            Ok(n) => {
                flight.net = Some(n);
                self.inflight.insert(token, flight);
            }
            Err(outcome) => {
                self.inflight.insert(token, flight);
                self.finish(token, outcome);
            }
        }
    }

    /// Record a probe whose result another thread delivers (an exec or
    /// gRPC call completed on the gRPC completion-queue thread), with a
    /// backstop deadline `backstop` from `now`; the returned completion
    /// queues the outcome and wakes the loop.
    fn in_flight_elsewhere(
        &mut self,
        token: u64,
        mut flight: InFlight,
        now: Instant,
        backstop: Duration,
    ) -> Box<dyn FnOnce(Outcome) + Send> {
        flight.deadline = crate::base::cancel::add_saturating(now, backstop);
        self.inflight.insert(token, flight);
        let (tx, waker) = (self.tx.clone(), self.wake.clone());
        Box::new(move |outcome| {
            if tx.send(Cmd::Done { token, outcome }).is_ok() {
                wake(&waker);
            }
        })
    }

    fn expire(&mut self, now: Instant) {
        let late: Vec<(u64, Outcome)> = self
            .inflight
            .iter()
            .filter(|(_, f)| f.deadline <= now)
            .map(|(t, f)| {
                let o = match &f.net {
                    Some(n) => n.timed_out(),
                    None => Outcome::Error("the container runtime did not answer the exec".into()),
                };
                (*t, o)
            })
            .collect();
        for (t, o) in late {
            self.finish(t, o);
        }
    }

    fn finish(&mut self, token: u64, outcome: Outcome) {
        let Some(f) = self.inflight.remove(&token) else { return };
        let Some(p) = self.pods.get_mut(&f.uid) else { return };
        let pod = p.pod.clone();
        let Some(c) = p.containers.get_mut(&f.container) else { return };
        if c.id.as_deref() != Some(f.id.as_str()) {
            return; // a result for an instance that is gone
        }
        let Some(s) = c.probes.iter_mut().find(|s| s.kind == f.kind) else { return };
        let series = ProbeSeries {
            probe_type: f.kind.label(),
            container: f.container.clone(),
            pod: model::name(&pod).to_string(),
            namespace: model::namespace(&pod).to_string(),
            pod_uid: f.uid.clone(),
        };
        let obj = ObjectRef::container(&pod, &f.container);
        let label = f.kind.label();
        match &outcome {
            Outcome::Success => {}
            Outcome::Failure(m) => {
                self.deps.events.event(&obj, EventType::Warning, "Unhealthy", &format!("{label} probe failed: {m}"))
            }
            Outcome::Warning(m) => {
                self.deps.events.event(&obj, EventType::Warning, "ProbeWarning", &format!("{label} probe warning: {m}"))
            }
            Outcome::Error(m) => self.deps.events.event(
                &obj,
                EventType::Warning,
                "Unhealthy",
                &format!("{label} probe errored and resulted in unknown state: {m}"),
            ),
        }
        if let Some(m) = &self.deps.metrics {
            let result = match &outcome {
                Outcome::Success | Outcome::Warning(_) => Some(ProbeResult::Successful),
                Outcome::Failure(_) => Some(ProbeResult::Failed),
                Outcome::Error(_) => None,
            };
            if let Some(r) = result {
                m.probe_done(&series, r, f.started.elapsed().as_secs_f64());
            }
        }
        let recorded = s.record(&f.id, &outcome);
        if let Some(value) = recorded.changed {
            log::info!(
                "pod {}: container {} {} probe: {}",
                model::pod_ref(&pod),
                f.container,
                label.to_lowercase(),
                match value {
                    Cached::Success => "success",
                    Cached::Failure => "failure",
                    Cached::Unknown => "unknown",
                }
            );
            self.results.set(&f.uid, &f.container, &f.id, f.kind, value);
            self.resync(&pod);
        }
    }
}

/// Why a probe or hook has nowhere to connect to; the texts are the
/// kubelet's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// A port name that is neither one of the container's nor a number.
    #[error("strconv.Atoi: parsing {0:?}: invalid syntax")]
    PortName(String),
    /// A port number outside 1..=65535.
    #[error("invalid port number: {0}")]
    PortNumber(i32),
    /// No `host` and the pod has no IP yet.
    #[error("the pod has no IP address yet")]
    NoPodIp,
}

/// The container's port a probe names: a number, or the name of one of the
/// container's ports. The error is the kubelet's.
pub fn resolve_port(
    port: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString,
    c: &Container,
) -> Result<u16, TargetError> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let n = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => {
            match c.ports.iter().flatten().find(|p| p.name.as_deref() == Some(name.as_str())) {
                Some(p) => p.container_port,
                None => match name.parse::<i32>() {
                    Ok(n) => n,
                    Err(_) => return Err(TargetError::PortName(name.clone())),
                },
            }
        }
    };
    u16::try_from(n).ok().filter(|p| *p > 0).ok_or(TargetError::PortNumber(n))
}

/// Where a probe or hook connects: its `host` (an address or a name) or
/// the pod's IP, and its port (by number or by the container's port name).
pub(crate) fn target(
    pod_ip: Option<&str>,
    host: Option<&str>,
    port: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString,
    c: &Container,
) -> Result<(String, u16), TargetError> {
    let port = resolve_port(port, c)?;
    let host = host.filter(|h| !h.is_empty()).or(pod_ip).ok_or(TargetError::NoPodIp)?;
    Ok((host.to_string(), port))
}

/// What an exec wrote, as probes and hooks report it: stdout then stderr,
/// [`MAX_EXEC_OUTPUT`] bytes at most.
pub(crate) fn exec_output(r: &crate::runtime::ExecResult) -> String {
    let mut out = Vec::with_capacity((r.stdout.len() + r.stderr.len()).min(MAX_EXEC_OUTPUT));
    out.extend_from_slice(&r.stdout);
    out.extend_from_slice(&r.stderr);
    out.truncate(MAX_EXEC_OUTPUT);
    String::from_utf8_lossy(&out).into_owned()
}

/// An exec probe's command with `$(VAR)` expanded from the container's
/// literal `env` values only, as the kubelet does for probes.
pub fn exec_command(c: &Container, cmd: &[String]) -> Vec<String> {
    let env: HashMap<&str, &str> = c
        .env
        .iter()
        .flatten()
        .filter(|e| e.value_from.is_none())
        .map(|e| (e.name.as_str(), e.value.as_deref().unwrap_or("")))
        .collect();
    cmd.iter().map(|a| crate::model::downward::expand(a, |k| env.get(k).map(|v| v.to_string()))).collect()
}

/// The outcome of an exec probe from the runtime's answer: exit 0 succeeds,
/// another exit fails with the output (stdout then stderr, 10 KiB at most),
/// the runtime's timeout fails with the kubelet's text, any other error is
/// an error (counted for neither threshold).
pub fn exec_outcome(cmd: &str, r: Result<crate::runtime::ExecResult, RuntimeError>) -> Outcome {
    match r {
        Ok(r) if r.exit_code == 0 => Outcome::Success,
        Ok(r) => Outcome::Failure(exec_output(&r)),
        // the runtime's timeout: containerd answers DEADLINE_EXCEEDED
        // ("timeout 1s exceeded"), the code the CRI client maps here
        Err(RuntimeError::DeadlineExceeded { .. }) => Outcome::Failure(format!("command {cmd:?} timed out")),
        Err(e) => Outcome::Error(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::ExecResult;

    #[test]
    fn exec_outcomes_are_the_kubelets() {
        let ok = ExecResult { exit_code: 0, stdout: b"fine".to_vec(), stderr: vec![] };
        assert_eq!(exec_outcome("true", Ok(ok)), Outcome::Success);
        let bad = ExecResult { exit_code: 1, stdout: b"out ".to_vec(), stderr: b"err".to_vec() };
        assert_eq!(exec_outcome("false", Ok(bad)), Outcome::Failure("out err".into()));
        let big = ExecResult { exit_code: 2, stdout: vec![b'x'; 20_000], stderr: vec![] };
        assert!(matches!(exec_outcome("x", Ok(big)), Outcome::Failure(m) if m.len() == MAX_EXEC_OUTPUT));
        assert_eq!(
            exec_outcome("sleep 10", Err(RuntimeError::DeadlineExceeded { op: crate::runtime::Op::ExecSync })),
            Outcome::Failure("command \"sleep 10\" timed out".into())
        );
        assert!(matches!(exec_outcome("x", Err(RuntimeError::Unavailable("gone".into()))), Outcome::Error(_)));
    }

    #[test]
    fn ports_by_number_or_name() {
        use k8s_openapi::api::core::v1::ContainerPort;
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        let c = Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort { name: Some("http".into()), container_port: 8080, ..Default::default() }]),
            ..Default::default()
        };
        assert_eq!(resolve_port(&IntOrString::Int(80), &c), Ok(80));
        assert_eq!(resolve_port(&IntOrString::String("http".into()), &c), Ok(8080));
        assert_eq!(resolve_port(&IntOrString::String("9090".into()), &c), Ok(9090));
        let e = resolve_port(&IntOrString::String("web".into()), &c).unwrap_err();
        assert_eq!(e, TargetError::PortName("web".into()));
        assert_eq!(e.to_string(), "strconv.Atoi: parsing \"web\": invalid syntax");
        let e = resolve_port(&IntOrString::Int(70000), &c).unwrap_err();
        assert_eq!(e, TargetError::PortNumber(70000));
        assert_eq!(e.to_string(), "invalid port number: 70000");
        assert_eq!(
            target(None, None, &IntOrString::Int(80), &c).unwrap_err().to_string(),
            "the pod has no IP address yet"
        );
        assert_eq!(target(None, Some("db"), &IntOrString::Int(80), &c), Ok(("db".into(), 80)));
    }

    #[test]
    fn exec_commands_expand_only_literal_env() {
        use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource};
        let c = Container {
            name: "c".into(),
            env: Some(vec![
                EnvVar { name: "A".into(), value: Some("1".into()), ..Default::default() },
                EnvVar { name: "B".into(), value_from: Some(EnvVarSource::default()), ..Default::default() },
            ]),
            ..Default::default()
        };
        assert_eq!(exec_command(&c, &["echo".into(), "$(A)$(B)$$(A)".into()]), ["echo", "1$(B)$(A)"]);
    }
}

//! What the node's APIs do to pods, shared by every server: the local gRPC
//! API (`local`) and the Kubernetes API (`kube`). A pod applied through
//! either is the same pod: a manifest file in `staticPodPath` (it survives
//! restarts, the manifest watcher picks it up, admission decides), held to
//! the caller's Pod Security level; a delete kills the pod (on `api-kill`,
//! never on the caller's thread) and removes its manifest.
//!
//! Errors are the APIs' one error, [`ApiError`] (a `meta/v1 Status`; the
//! gRPC server maps its reason to a code), with a message naming the pod.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use crate::agent::Parts;
use crate::agent::manager::Agent;
use crate::api::status::{ApiError, Res};
use crate::api::view::{self, PodList};
use crate::base::fsutil::{FileError, Links};
use crate::logs::reader;
use crate::model::{self, Pod};
use crate::pod::workers::KillPodOptions;

/// What the operations need besides the agent's parts.
#[derive(Clone)]
pub struct OpsConfig {
    pub static_pod_path: PathBuf,
    pub pod_logs_dir: PathBuf,
    pub node_name: String,
    /// Asks the manifest watcher for a scan now.
    pub rescan: Arc<dyn Fn() + Send + Sync>,
    /// Pod Security Standards level of root's pods (the static pods'
    /// level: root's manifests count like root's files).
    pub root_pod_security: crate::model::pss::Level,
    /// Pod Security Standards level of every other caller's pods (an
    /// `apiGroup` member, a Kubernetes API client).
    pub group_pod_security: crate::model::pss::Level,
}

/// Who asks, as far as Pod Security is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// Root on the local socket: the static pods' level.
    Root,
    /// An `apiGroup` member on the local socket.
    Member,
    /// A Kubernetes API client (a client certificate).
    Client,
}

impl Trust {
    fn who(self) -> &'static str {
        match self {
            Trust::Root => "root",
            Trust::Member => "an apiGroup member",
            Trust::Client => "a Kubernetes API client",
        }
    }
}

/// What [`Ops::apply`] did.
#[derive(Debug, Clone)]
pub struct Applied {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub manifest_path: String,
    /// `created`, `configured` or `unchanged`.
    pub result: &'static str,
    pub warnings: Vec<String>,
    /// The pod as its manifest defines it (no status yet).
    pub pod: Pod,
}

/// What [`Ops::delete`] did.
#[derive(Debug, Clone)]
pub struct Deleted {
    pub uid: String,
    /// The manifest removed (empty when the manifest was already gone).
    pub manifest_path: String,
    /// The pod as it was (when its manifest still defined it).
    pub pod: Option<Pod>,
}

/// One read of a container's log ([`Ops::logs`]).
#[derive(Debug, Clone, Default)]
pub struct LogQuery {
    pub namespace: String,
    pub name: String,
    /// Empty: the pod's only container.
    pub container: String,
    pub previous: bool,
    /// Where a follower is (none: from the start, or the tail).
    pub cursor: Option<reader::Cursor>,
    /// At most this many bytes (0: the reader's chunk).
    pub limit: u64,
    /// The last this many lines (0: all).
    pub tail_lines: usize,
    /// Keep each line's CRI time stamp (`<RFC 3339> ` before the text).
    pub timestamps: bool,
}

/// What [`Ops::logs`] read.
#[derive(Debug, Clone)]
pub struct LogRead {
    pub data: Vec<u8>,
    pub next: reader::Cursor,
    /// The container runs (a follower waits for more).
    pub running: bool,
    pub container: String,
}

/// Kills waiting for `api-kill`.
const KILL_QUEUE: usize = 256;

/// A kill for `api-kill`: the pod's UID and the options.
type Kill = (String, KillPodOptions);

/// The shared operations (cheap to share: an `Arc`).
pub struct Ops {
    pub parts: Parts,
    pub cfg: OpsConfig,
    kill: OnDemand<Kill>,
}

/// A bounded queue whose consumer thread starts with the first item: most
/// nodes' API never applies, reads a log or deletes, and an idle edge agent
/// keeps no thread waiting for work that never comes.
pub struct OnDemand<T> {
    tx: Sender<T>,
    start: parking_lot::Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl<T: Send + 'static> OnDemand<T> {
    pub fn new(cap: usize, name: &'static str, stack: usize, run: impl FnOnce(Receiver<T>) + Send + 'static) -> Self {
        let (tx, rx) = crossbeam_channel::bounded::<T>(cap);
        let start = move || {
            if let Err(e) = crate::base::thread::spawn(name, Some(stack), move || run(rx)) {
                // its queue fills and calls fail as busy, naming the cause in the log
                log::error!("API: cannot start thread {name}: {e}");
            }
        };
        OnDemand { tx, start: parking_lot::Mutex::new(Some(Box::new(start))) }
    }

    /// Queue `item` without waiting (starting the thread the first time).
    pub fn try_send(&self, item: T) -> Result<(), TrySendError<T>> {
        if let Some(start) = self.start.lock().take() {
            start();
        }
        self.tx.try_send(item)
    }
}

/// `api-kill`: runs the kills `delete` handed over, in order. A kill may
/// wait (up to the pod workers' start-gate wait) for a container start in
/// flight; only this thread waits, never an API call.
fn kill_loop(agent: &Agent, rx: Receiver<Kill>) {
    for (uid, opts) in rx {
        let t = Instant::now();
        agent.kill_pod(&uid, opts);
        if t.elapsed() > Duration::from_secs(1) {
            log::info!("API: the kill of pod {uid} waited {:?} for a container start", t.elapsed());
        }
    }
}

/// What a file in staticPodPath holds, as far as `apply` is concerned.
enum Holder {
    /// Nothing: the name is free.
    Free,
    /// This pod (the same namespace and name); `true` if byte for byte
    /// what is being applied.
    Same(bool),
    /// Something else, described.
    Other(String),
}

impl Ops {
    pub fn new(parts: Parts, cfg: OpsConfig) -> Arc<Self> {
        let agent = parts.agent.clone();
        let kill =
            OnDemand::new(KILL_QUEUE, "api-kill", crate::base::thread::HELPER_STACK, move |rx| kill_loop(&agent, rx));
        Arc::new(Ops { parts, cfg, kill })
    }

    /// The v1 PodList of `namespace` (all when empty).
    pub fn pods(&self, namespace: &str) -> PodList {
        view::in_namespace(view::pods_of(&self.parts, false), namespace)
    }

    /// The pod `ns/name`.
    pub fn find(&self, ns: &str, name: &str) -> Res<Pod> {
        view::pod_named(&self.parts, ns, name).ok_or_else(|| {
            ApiError::missing(format!(
                "pod {ns}/{name} not found (no manifest in {} defines it)",
                self.cfg.static_pod_path.display()
            ))
            .with_details(name, "pods")
        })
    }

    /// Where a pod's manifest is, if a manifest defines it.
    pub fn manifest_of(pod: &Pod) -> Option<PathBuf> {
        view::manifest_path(pod).map(PathBuf::from)
    }

    /// What the file `path` in staticPodPath holds. `known` says the agent
    /// last read pod `ns/name` from it (it then counts as this pod's file
    /// even if it no longer parses: it was edited since).
    fn holder(&self, path: &Path, manifest: &[u8], ns: &str, name: &str, known: bool) -> Holder {
        let dir = &self.cfg.static_pod_path;
        let Some(file) = path.file_name() else { return Holder::Other("is not a file name".into()) };
        let bytes = match crate::base::fsutil::read_regular_in(
            dir,
            file,
            Links::StayInside,
            model::manifest::MAX_MANIFEST_BYTES,
        ) {
            Ok(b) => b,
            Err(FileError::NotFound { .. }) => return Holder::Free,
            Err(e) => {
                let msg = e.to_string();
                let why = msg.strip_prefix(&format!("{}: ", path.display())).unwrap_or(&msg);
                return Holder::Other(format!("cannot be read ({why})"));
            }
        };
        if bytes == manifest {
            return Holder::Same(true);
        }
        match model::manifest::parse(&path.to_string_lossy(), &bytes, &self.cfg.node_name) {
            Ok(p) if model::namespace(&p) == ns && model::name(&p) == name => Holder::Same(false),
            Ok(p) => Holder::Other(format!("holds pod {}/{}", model::namespace(&p), model::name(&p))),
            Err(_) if known => Holder::Same(false),
            Err(_) => Holder::Other("holds a manifest that does not validate".into()),
        }
    }

    /// Validate a manifest (`source` names it in errors) and write it into
    /// staticPodPath: over the file that holds the same pod (namespace and
    /// name), else into a free file (`<name>.yaml` in namespace default,
    /// `<ns>_<name>.yaml`, then `<ns>_<name>-2.yaml` ...). A file holding
    /// anything else (another pod, an invalid manifest, a FIFO) is never
    /// replaced.
    pub fn apply(&self, manifest: &[u8], source: &str, trust: Trust) -> Res<Applied> {
        let source = if source.is_empty() { "-" } else { source };
        // 422 naming the input (the Kubernetes API words it for its
        // object: `ApiError::for_object`), a cause per refused field
        let bad = |e: &model::manifest::ManifestError, msg: String| {
            let causes = e.field_errors().map(crate::api::status::causes_of).unwrap_or_default();
            ApiError::invalid(msg).with_causes(causes)
        };
        // a first parse names the pod; the file it goes to fixes its UID
        let probe =
            model::manifest::parse_full(source, manifest, &self.cfg.node_name).map_err(|e| bad(&e, e.to_string()))?;
        let (ns, name) = (model::namespace(&probe).to_string(), model::name(&probe).to_string());
        // the caller's Pod Security level, before anything is looked at or written
        self.pod_security(&probe, trust)?;
        let known = self.find(&ns, &name).ok().as_ref().and_then(Self::manifest_of);
        let json = manifest.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        let ext = if json { "json" } else { "yaml" };
        let dir = &self.cfg.static_pod_path;
        let mut candidates: Vec<PathBuf> = known.iter().cloned().collect();
        if ns == "default" {
            candidates.push(dir.join(format!("{name}.{ext}")));
        }
        candidates.push(dir.join(format!("{ns}_{name}.{ext}")));
        candidates.extend((2..=9).map(|i| dir.join(format!("{ns}_{name}-{i}.{ext}"))));
        let internal = |path: &Path, e: std::io::Error| {
            ApiError::internal(format!("pod {ns}/{name}: writing {}: {e}", path.display()))
        };
        // files that hold something else: (file, what)
        let mut taken: Vec<(PathBuf, String)> = Vec::new();
        for path in candidates {
            if taken.iter().any(|(p, _)| *p == path) {
                continue;
            }
            let is_known = known.as_ref() == Some(&path);
            // (result, write: None no, Some(true) replacing, Some(false) a new file)
            let (result, write) = match self.holder(&path, manifest, &ns, &name, is_known) {
                Holder::Other(what) => {
                    taken.push((path, what));
                    continue;
                }
                Holder::Same(true) => ("unchanged", None),
                Holder::Same(false) => ("configured", Some(true)),
                Holder::Free => (if known.is_some() { "configured" } else { "created" }, Some(false)),
            };
            let path_str = path.to_string_lossy().into_owned();
            let pod = model::manifest::parse(&path_str, manifest, &self.cfg.node_name)
                .map_err(|e| bad(&e, e.to_string().replacen(&path_str, source, 1)))?;
            match write {
                None => {}
                Some(true) => crate::base::fsutil::write_atomically(&path, manifest).map_err(|e| internal(&path, e))?,
                Some(false) => match crate::base::fsutil::write_new_atomically(&path, manifest) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        taken.push((path, "was created meanwhile".into()));
                        continue;
                    }
                    Err(e) => return Err(internal(&path, e)),
                },
            }
            log::info!("API: pod {ns}/{name} {result} ({})", path.display());
            // the watcher picks the file up (inotify, and this nudge); the
            // call does not wait for it
            (self.cfg.rescan)();
            return Ok(Applied {
                namespace: ns,
                name,
                uid: model::uid(&pod).to_string(),
                manifest_path: path_str,
                result,
                warnings: probe.warnings.clone(),
                pod,
            });
        }
        let files: Vec<String> = taken.iter().map(|(p, what)| format!("{} {what}", p.display())).collect();
        Err(ApiError::exists(format!(
            "pod {ns}/{name}: no free manifest file for it in {}: {}; podwarden never replaces a file that holds \
             another pod (remove or rename one)",
            dir.display(),
            files.join("; ")
        )))
    }

    /// The Pod Security Standards level of this caller, enforced before
    /// anything is written; the error is the API server's.
    pub fn pod_security(&self, pod: &model::Pod, trust: Trust) -> Res<()> {
        let level = match trust {
            Trust::Root => self.cfg.root_pod_security,
            Trust::Member | Trust::Client => self.cfg.group_pod_security,
        };
        crate::model::pss::enforce(level, pod).map_err(|m| {
            let (ns, name) = (model::namespace(pod), model::name(pod));
            log::warn!("API: refused pod {ns}/{name} from {}: {m}", trust.who());
            ApiError::forbidden(format!("pods \"{name}\" is forbidden: {m}"))
        })
    }

    /// Kill a pod (handed to `api-kill`: a kill may wait for a container
    /// start in flight) with `grace` seconds (none: the pod's own) and
    /// remove its manifest; returns at once.
    pub fn delete(&self, ns: &str, name: &str, grace: Option<i64>) -> Res<Deleted> {
        if let Some(g) = grace
            && g < 0
        {
            return Err(ApiError::invalid(format!("pod {ns}/{name}: grace period {g} must not be negative")));
        }
        // a pod whose manifest is already gone may still be terminating
        let pod = self.find(ns, name).ok();
        let uid = match &pod {
            Some(p) => model::uid(p).to_string(),
            None => self
                .parts
                .workers
                .snapshot()
                .into_iter()
                .find(|w| w.pod.as_ref().is_some_and(|p| model::namespace(p) == ns && model::name(p) == name))
                .map(|w| w.uid)
                .ok_or_else(|| ApiError::missing(format!("pod {ns}/{name} not found")).with_details(name, "pods"))?,
        };
        let opts = KillPodOptions { grace_period_override: grace, ..Default::default() };
        self.kill
            .try_send((uid.clone(), opts))
            .map_err(|_| ApiError::busy("podwarden is busy: too many kills queued; try again"))?;
        let mut path = String::new();
        if let Some(p) = pod.as_ref().and_then(Self::manifest_of) {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(ApiError::internal(format!(
                        "pod {ns}/{name}: removing {}: {e} (the pod is being killed; it comes back on restart)",
                        p.display()
                    )));
                }
            }
            path = p.to_string_lossy().into_owned();
        }
        log::info!("API: pod {ns}/{name} deleted");
        (self.cfg.rescan)();
        Ok(Deleted { uid, manifest_path: path, pod })
    }

    /// The names of a pod's containers (init containers after the app
    /// containers, as the kubelet accepts them for logs).
    fn container_names(pod: &Pod) -> Vec<String> {
        let spec = pod.spec.iter();
        spec.clone()
            .flat_map(|s| &s.containers)
            .chain(spec.flat_map(|s| s.init_containers.iter().flatten()))
            .map(|c| c.name.clone())
            .collect()
    }

    /// Read a container's log (bounded: one chunk of the reader's).
    pub fn logs(&self, q: &LogQuery) -> Res<LogRead> {
        let (ns, name) = (q.namespace.as_str(), q.name.as_str());
        let pod = self.find(ns, name)?;
        let names = Self::container_names(&pod);
        let apps: Vec<&String> = pod.spec.iter().flat_map(|s| &s.containers).map(|c| &c.name).collect();
        let container = if q.container.is_empty() {
            match apps.as_slice() {
                [one] => (*one).clone(),
                _ => {
                    return Err(ApiError::invalid(format!(
                        "pod {ns}/{name} has several containers: name one with -c ({})",
                        apps.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                    )));
                }
            }
        } else if names.contains(&q.container) {
            q.container.clone()
        } else {
            return Err(ApiError::missing(format!(
                "container {} is not in pod {ns}/{name} (it has {})",
                q.container,
                names.join(", ")
            ))
            .with_details(name, "pods"));
        };
        let uid = model::uid(&pod);
        let pod_dir = reader::pod_dir_name(ns, name, uid);
        let dir = self.cfg.pod_logs_dir.join(&pod_dir).join(&container);
        let no_log = || {
            if q.previous {
                ApiError::bad_request(format!(
                    "previous terminated container {container:?} in pod {ns}/{name} not found"
                ))
            } else {
                ApiError::missing(format!(
                    "container {container:?} in pod {ns}/{name} has no log yet (has it started?)"
                ))
                .with_details(name, "pods")
            }
        };
        // a rotation renames the live file, asks the runtime to reopen it
        // and renames it back if that fails: a read in between finds no
        // live file for a moment
        let path = (0..5)
            .find_map(|i| {
                if i > 0 {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                reader::pick(&dir, q.previous)
            })
            .ok_or_else(no_log)?;
        let live = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        // opened below podLogsDir without following any symlink there
        let rel_dir = Path::new(&pod_dir).join(&container);
        let read = if q.timestamps { reader::read_instance_timestamped } else { reader::read_instance };
        let chunk = read(&self.cfg.pod_logs_dir, &rel_dir, &live, q.cursor.as_ref(), q.limit, q.tail_lines).map_err(
            |e| match e {
                FileError::NotFound { .. } => no_log(),
                FileError::Io { .. } => ApiError::internal(format!("container {container:?} in pod {ns}/{name}: {e}")),
                e => ApiError::bad_request(format!(
                    "container {container:?} in pod {ns}/{name}: cannot read its log: {e}"
                )),
            },
        )?;
        let statuses = pod
            .status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten().chain(s.init_container_statuses.iter().flatten()));
        let running = !q.previous
            && statuses
                .into_iter()
                .any(|c| c.name == container && c.state.as_ref().is_some_and(|s| s.running.is_some()));
        Ok(LogRead { data: chunk.data, next: chunk.next, running, container })
    }
}

//! The `podwarden` binary: parse arguments, set up logging, call the
//! library, map the top error to an exit code.

use std::path::PathBuf;
use std::process::ExitCode;

use podwarden::cli::daemon::DaemonError;
use podwarden::cli::{CliError, exit};
use podwarden::config::{Config, ConfigError};

const USAGE: &str = "\
podwarden: run Kubernetes pods on this machine through a CRI runtime

Usage:
  podwarden run [--config FILE] [--kubeconfig FILE [--bootstrap-kubeconfig FILE]]
                                    run the node agent (default config: /etc/podwarden/config.yaml if present;
                                    with a kubeconfig, also a node of that cluster)
  podwarden join --server URL --token ID.SECRET --discovery-token-ca-cert-hash sha256:HEX
                                    find a cluster by bootstrap token and write the bootstrap kubeconfig
  podwarden validate [--config FILE] [FILE...]  check a config and pod manifests, print each pod's UID
  podwarden kubeconfig [--user NAME] [--group G]... [--revoke SERIAL]  a kubeconfig for kubectl (root)

Client commands (talk to the running agent over its local API socket):
  podwarden get pods [NAME] [-o wide|json|yaml] [-n NS | -A]
  podwarden describe pod NAME [-n NS]
  podwarden logs POD [-n NS] [-c CONTAINER] [-f] [--previous] [--tail N]
  podwarden events [-n NS | -A] [-o json]
  podwarden node [-o json|yaml]
  podwarden top pods [-n NS | -A] | top node
  podwarden apply -f FILE|-
  podwarden delete pod NAME [-n NS] [--grace-period N]
  podwarden exec [-i] [-t] POD [-c CONTAINER] [-n NS] -- CMD [ARG...]
  podwarden attach [-i] [-t] POD [-c CONTAINER] [-n NS]
  podwarden port-forward POD [LOCAL:]REMOTE... [-n NS] [--address IP]
  podwarden cp [NS/]POD:PATH LOCAL | cp LOCAL [NS/]POD:PATH [-c CONTAINER]
  podwarden version
  Every client command takes --socket PATH (default $PODWARDEN_SOCKET, else
  /run/podwarden/podwarden.sock) and --help.

  podwarden help                    this text

Exit status (the error message goes to stderr):
  0   success
  1   any other error: a pod or container not found, an invalid manifest or
      argument, a file in the way
  69  the container runtime cannot be reached when `run` starts; a client
      command cannot reach the agent's API socket, or the agent does not answer
  70  a thread of `podwarden run` panicked (systemd restarts the agent)
  77  the agent refused the caller: not root and not in apiGroup, or a pod
      its Pod Security level forbids
  78  the config file cannot be read or is invalid
  exec exits with the command's status; a signal ending a session, 128+N
";

const RUN_USAGE: &str = "\
Run the node agent: follow the static pod manifests, run their pods through
the CRI runtime, serve the local API and the read-only HTTP endpoint, and
(with shutdownGracePeriod set) stop pods gracefully when logind announces a
shutdown. SIGTERM/SIGINT stop the agent and leave the pods running; SIGHUP
rescans the manifests.

Without --kubeconfig and --bootstrap-kubeconfig, /etc/podwarden/kubeconfig
and /etc/podwarden/bootstrap-kubeconfig are taken when present (as `podwarden
join` leaves them). With a kubeconfig the agent is also a node of that Kubernetes cluster: it
registers its Node, renews its Lease and reports its status. With
--bootstrap-kubeconfig (as `podwarden join` writes it) and no usable identity
in --kubeconfig, it first asks the cluster for a client certificate (a CSR)
and writes --kubeconfig itself.

Usage:
  podwarden run [--config FILE] [--kubeconfig FILE [--bootstrap-kubeconfig FILE]]

Options:
  -c, --config FILE   the config (KubeletConfiguration field names); default
                      /etc/podwarden/config.yaml if present, else built-in
                      defaults (see podwarden(8))
      --kubeconfig FILE            the node's kubeconfig (cluster mode)
      --bootstrap-kubeconfig FILE  a kubeconfig with a bootstrap token, for
                                   the node's first client certificate
";

const VALIDATE_USAGE: &str = "\
Check pod manifests as the agent would read them from staticPodPath, and
print each valid pod's full name and UID; errors name the file and field.
Fields that are not part of a v1 Pod (typos) are warned about on stderr.
The UID depends on the node name, taken from the config as `run` takes it,
and on the file's path as the agent reads it (staticPodPath/NAME for a file
in staticPodPath, else its absolute path).

With --config and no manifest, only the config is checked. A config that
`run` could not carry out on this host is warned about on stderr:
graceful node shutdown (shutdownGracePeriod) when podwarden cannot write its
logind drop-in into logindDropInDir (not a directory, read-only, or missing
and impossible to create).

Usage:
  podwarden validate [--config FILE] [FILE...]

Exit status: 0 if every file is a valid pod (warnings do not count), 78 if
the config is bad, 1 otherwise.
";

/// Why the command failed; each kind has its exit status.
#[derive(Debug, thiserror::Error)]
enum MainError {
    /// Bad arguments (the message includes the usage).
    #[error("{0}")]
    Usage(String),
    /// The config cannot be read or is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A config value that names something on the host that is not there
    /// (`apiGroup`), found at start; the message names the config file.
    #[error("{}{source}", file.as_ref().map(|f| format!("{}: ", f.display())).unwrap_or_default())]
    ConfigValue {
        file: Option<PathBuf>,
        #[source]
        source: DaemonError,
    },
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    #[error(transparent)]
    Cli(#[from] CliError),
    /// `validate` printed each invalid manifest's error already.
    #[error("some manifests are invalid")]
    InvalidManifests,
}

impl MainError {
    fn exit_code(&self) -> u8 {
        match self {
            MainError::Config(_) | MainError::ConfigValue { .. } => exit::CONFIG,
            MainError::Daemon(DaemonError::Runtime { .. }) => exit::UNAVAILABLE,
            MainError::Cli(e) => e.exit_code(),
            MainError::Usage(_) | MainError::Daemon(_) | MainError::InvalidManifests => exit::FAILURE,
        }
    }
}

fn run(args: &[String]) -> Result<(), MainError> {
    match args.first().map(String::as_str) {
        Some("run") => {
            let Some((config_path, rest)) = config_args(&args[1..], RUN_USAGE)? else {
                return Ok(());
            };
            let (kubeconfig, bootstrap) = cluster_args(&rest)?;
            // one thread per pod: glibc's per-thread caches off before the
            // first thread starts (returns only if that cannot be done)
            if let Some(e) = podwarden::sys::reexec_with_malloc_tunables() {
                log::warn!("could not re-execute with GLIBC_TUNABLES={}: {e}", podwarden::sys::MALLOC_TUNABLES);
            }
            let file = config_file(config_path);
            let mut config = load_config(file.clone())?;
            config.kubeconfig = kubeconfig;
            config.bootstrap_kubeconfig = bootstrap;
            podwarden::cli::daemon::run(config).map_err(|e| match e {
                // apiGroup, the cgroup driver and the credential provider
                // plugins are looked up at start; their errors name the config
                e @ (DaemonError::ApiGroup { .. } | DaemonError::CgroupDriver { .. } | DaemonError::Credentials(_)) => {
                    MainError::ConfigValue { file, source: e }
                }
                e => MainError::Daemon(e),
            })
        }
        Some("validate") => {
            let Some((config_path, files)) = config_args(&args[1..], VALIDATE_USAGE)? else {
                return Ok(());
            };
            if files.is_empty() && config_path.is_none() {
                return Err(MainError::Usage(format!(
                    "validate: name a config (--config) or at least one manifest file\n\n{VALIDATE_USAGE}"
                )));
            }
            // the UID depends on the node name and on the path the agent
            // reads the file under: take both from the config the agent
            // would use
            let file = config_file(config_path);
            let config = load_config(file.clone())?;
            let name = file.as_ref().map_or("the default config".into(), |f| f.display().to_string());
            if let Some(w) = podwarden::agent::node_shutdown::logind::dropin_warning(&config) {
                eprintln!("Warning: {name}: {w}");
            }
            if files.is_empty() {
                println!("{name}: ok: config");
            }
            let node_name = podwarden::cli::daemon::node_name(&config);
            let mut failed = false;
            for f in files {
                let path = podwarden::model::manifest::source_path(f.as_ref(), &config.static_pod_path);
                match podwarden::model::manifest::read_file_all(&path, &node_name) {
                    Ok(content) => {
                        let pod_warnings = content.pod.iter().flat_map(|p| p.warnings.iter());
                        for w in content.warnings.iter().chain(pod_warnings) {
                            eprintln!("Warning: {f}: {w}");
                        }
                        if let Some(p) = &content.pod {
                            println!("{f}: ok: pod {} uid {}", podwarden::model::full_name(p), podwarden::model::uid(p))
                        }
                        for o in &content.objects {
                            println!("{f}: ok: {} ({} keys)", o.key, o.data.len())
                        }
                    }
                    Err(e) => {
                        // every refused field on a line of its own
                        for line in e.lines() {
                            eprintln!("{line}");
                        }
                        failed = true;
                    }
                }
            }
            if failed { Err(MainError::InvalidManifests) } else { Ok(()) }
        }
        Some(verb @ ("join" | "kubeconfig")) => {
            let help = if verb == "join" { podwarden::cli::join::HELP } else { podwarden::cli::kubeconfig::HELP };
            let Some((config_path, rest)) = config_args(&args[1..], help)? else {
                return Ok(());
            };
            let config = load_config(config_file(config_path))?;
            let text = if verb == "join" {
                podwarden::cli::join::run(&config, &rest)?
            } else {
                podwarden::cli::kubeconfig::run(&config, &rest)?
            };
            print!("{text}");
            Ok(())
        }
        Some("--version") => {
            println!("podwarden {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Some(verb) if verb == "version" || podwarden::cli::VERBS.contains(&verb) => {
            Ok(podwarden::cli::run(verb, &args[1..])?)
        }
        Some("help") | Some("-h") | Some("--help") | None => {
            print!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(MainError::Usage(format!("unknown command {other:?}\n\n{USAGE}"))),
    }
}

/// The config file named (if any) and the other arguments.
type ConfigArgs<'a> = (Option<PathBuf>, Vec<&'a String>);

/// `--config FILE` (or `-c`, `--config=FILE`) and `--help` among `args`: the
/// config file named and the other arguments, or `None` once `usage` is
/// printed for `--help`.
fn config_args<'a>(args: &'a [String], usage: &str) -> Result<Option<ConfigArgs<'a>>, MainError> {
    let mut path: Option<PathBuf> = None;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => {
                print!("{usage}");
                return Ok(None);
            }
            "--config" | "-c" => {
                path = Some(it.next().ok_or_else(|| MainError::Usage("--config needs a file".into()))?.into())
            }
            s if s.starts_with("--config=") => path = Some(s["--config=".len()..].into()),
            _ => rest.push(a),
        }
    }
    Ok(Some((path, rest)))
}

/// `run`'s cluster flags: `--kubeconfig FILE` and `--bootstrap-kubeconfig
/// FILE` (the kubelet's). Without them podwarden is standalone.
fn cluster_args(rest: &[&String]) -> Result<(Option<PathBuf>, Option<PathBuf>), MainError> {
    let (mut kubeconfig, mut bootstrap) = (None, None);
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let slot = match flag {
            "--kubeconfig" => &mut kubeconfig,
            "--bootstrap-kubeconfig" => &mut bootstrap,
            _ => return Err(MainError::Usage(format!("run: unknown argument {a:?}\n\n{RUN_USAGE}"))),
        };
        let value = match inline {
            Some(v) => v,
            None => {
                it.next().map(|s| s.to_string()).ok_or_else(|| MainError::Usage(format!("run: {flag} needs a file")))?
            }
        };
        *slot = Some(PathBuf::from(value));
    }
    // as the config file: the packaged service's defaults when present
    // (`podwarden join` writes the bootstrap one there)
    if kubeconfig.is_none() && bootstrap.is_none() {
        let (k, b) = (
            PathBuf::from(podwarden::cli::join::DEFAULT_KUBECONFIG),
            PathBuf::from(podwarden::cli::join::DEFAULT_BOOTSTRAP),
        );
        if k.exists() || b.exists() {
            bootstrap = b.exists().then_some(b);
            kubeconfig = Some(k);
        }
    }
    if bootstrap.is_some() && kubeconfig.is_none() {
        return Err(MainError::Usage(
            "run: --bootstrap-kubeconfig needs --kubeconfig (where the node's own kubeconfig is written)".into(),
        ));
    }
    Ok((kubeconfig, bootstrap))
}

/// The config file: `path`, else `/etc/podwarden/config.yaml` if present,
/// else none (the defaults).
fn config_file(path: Option<PathBuf>) -> Option<PathBuf> {
    let default = PathBuf::from("/etc/podwarden/config.yaml");
    path.or_else(|| default.exists().then_some(default))
}

/// The config in `file`, else the defaults.
fn load_config(file: Option<PathBuf>) -> Result<Config, ConfigError> {
    match file {
        Some(p) => Config::load(&p),
        None => Ok(Config::default()),
    }
}

fn main() -> ExitCode {
    // gRPC's backup poller wakes the process every 5 s (and its timer
    // threads with it) to poll channels no thread polls; grpcio's
    // completion-queue threads always poll. Before any thread starts.
    podwarden::sys::default_env_single_threaded("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "0");
    podwarden::base::logging::init("info");
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("podwarden: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

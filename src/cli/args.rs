//! The client verbs' command line: each verb's help text, the common
//! flags ([`Args`]) and what they name (the client, the namespace, the
//! output format, the pod).

use crate::cli::client::{Client, default_socket};
use crate::cli::error::{Result, usage};

/// `args` of a verb whose every flag takes a value (`--flag VALUE` or
/// `--flag=VALUE`): the (flag, value) pairs in order. `known` names the
/// flags; any other argument is refused with `help`.
pub(crate) fn flag_values(args: &[&String], verb: &str, known: &[&str], help: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        if !known.contains(&flag) {
            return Err(usage(format!("{verb}: unknown argument {flag:?}\n\n{help}")));
        }
        let value = match inline {
            Some(v) => v,
            None => it.next().map(|s| s.to_string()).ok_or_else(|| usage(format!("{verb}: {flag} needs a value")))?,
        };
        out.push((flag.to_string(), value));
    }
    Ok(out)
}

const GET_HELP: &str = "\
Show pods, or the local ConfigMaps and Secrets (a Secret's values are never shown).

Usage:
  podwarden get pods [NAME] [-o wide|json|yaml] [-n NAMESPACE | -A] [--socket PATH]
  podwarden get configmaps|secrets [NAME] [-o json|yaml] [-n NAMESPACE | -A] [--socket PATH]

Options:
  -o, --output FORMAT     wide (adds IP and NODE), json (a v1 PodList, or a Pod with NAME) or yaml
  -n, --namespace NS      only this namespace (default: default)
  -A, --all-namespaces    every namespace (adds a NAMESPACE column)
      --socket PATH       the daemon's API socket (default $PODWARDEN_SOCKET, else /run/podwarden/podwarden.sock)
";

const DESCRIBE_HELP: &str = "\
Show a pod in detail: status, containers, conditions, its manifest and events.

Usage:
  podwarden describe pod NAME [-n NAMESPACE] [--socket PATH]
";

const LOGS_HELP: &str = "\
Print a container's log.

Usage:
  podwarden logs POD [-n NAMESPACE] [-c CONTAINER] [-f] [--previous] [--tail N] [--socket PATH]

Options:
  -c, --container NAME    the container (needed when the pod has several)
  -f, --follow            keep printing new lines until the container stops
  -p, --previous          the log of the container's previous instance
      --tail N            only the last N lines
";

const EVENTS_HELP: &str = "\
Show recent events (pods admitted, rejected, started, killed; bad manifests).

Usage:
  podwarden events [-n NAMESPACE | -A] [-o json] [--socket PATH]
";

const NODE_HELP: &str = "\
Show the node: readiness, capacity, allocatable and allocated resources, and
the graceful-shutdown state (why it is off, if it is).

Usage:
  podwarden node [-o json] [--socket PATH]
";

const TOP_HELP: &str = "\
Show what pods or the node use now, as kubectl top: CPU in millicores,
memory (working set) in MiB; the node's against its allocatable. From the
last stats snapshot (taken every housekeepingInterval).

Usage:
  podwarden top pods [-n NAMESPACE | -A] [--socket PATH]
  podwarden top node [--socket PATH]
";

const APPLY_HELP: &str = "\
Validate a Pod manifest and write it into staticPodPath (atomically); the
pod is created, or replaced if its manifest changed.

Usage:
  podwarden apply -f FILE|- [--socket PATH]
";

const DELETE_HELP: &str = "\
Remove a pod's manifest and kill the pod.

Usage:
  podwarden delete pod NAME [-n NAMESPACE] [--grace-period SECONDS] [--socket PATH]

Options:
  --grace-period N    seconds the containers get to stop (0: at once); on a
                      pod already terminating, a shorter period takes over
";

const VERSION_HELP: &str = "\
Print the client's and the daemon's versions.

Usage:
  podwarden version [--socket PATH]
";

const EXEC_HELP: &str = "\
Run a command in a pod's container (through the runtime's streaming server).
podwarden exits with the command's exit status.

Usage:
  podwarden exec [-i] [-t] POD [-c CONTAINER] [-n NAMESPACE] [--socket PATH] -- COMMAND [ARG...]

Options:
  -i, --stdin             pass stdin to the command (its end is not passed on:
                          the command must end by itself)
  -t, --tty               a terminal: the local one in raw mode, resized with it
  -c, --container NAME    the container (default: the pod's default container)
";

const ATTACH_HELP: &str = "\
Attach to the main process of a pod's container: its output, and stdin with -i.

Usage:
  podwarden attach [-i] [-t] POD [-c CONTAINER] [-n NAMESPACE] [--socket PATH]
";

const PORT_FORWARD_HELP: &str = "\
Forward local ports to a pod's ports: each connection to 127.0.0.1:LOCAL
reaches REMOTE in the pod's network namespace. Runs until interrupted.

Usage:
  podwarden port-forward POD [LOCAL:]REMOTE... [-n NAMESPACE] [--address IP] [--socket PATH]

Options:
  --address IP    where to listen (default 127.0.0.1); LOCAL 0 or empty: any free port
";

const CP_HELP: &str = "\
Copy files and directories into or out of a pod's container, as tar over
exec (the container needs `tar`, and `sh` and `head` to copy into it).

Usage:
  podwarden cp [NAMESPACE/]POD:PATH LOCAL [-c CONTAINER] [--socket PATH]
  podwarden cp LOCAL [NAMESPACE/]POD:PATH [-c CONTAINER] [--socket PATH]

Entries of the pod's archive that would land outside LOCAL (absolute
paths, `..`) are refused; symbolic links are not copied.
";

/// Parsed common flags and the remaining positional arguments.
#[derive(Default)]
pub(crate) struct Args {
    pub(super) socket: Option<String>,
    pub(super) namespace: Option<String>,
    pub(super) all: bool,
    pub(super) output: Option<String>,
    pub(super) container: Option<String>,
    pub(super) follow: bool,
    pub(super) previous: bool,
    pub(super) tail: Option<u64>,
    pub(super) file: Option<String>,
    pub(super) grace: Option<i64>,
    /// exec, attach: `-i`, `-t`.
    pub(super) stdin: bool,
    pub(super) tty: bool,
    /// port-forward: where to listen.
    pub(super) address: Option<String>,
    pub(super) help: bool,
    pub(super) rest: Vec<String>,
}

/// Parse the words after `verb`.
pub(crate) fn parse(args: &[String], verb: &str) -> Result<Args> {
    let mut a = Args::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--" {
            // exec: the command, verbatim
            a.rest.extend(it.by_ref().cloned());
            break;
        }
        let streaming = matches!(verb, "exec" | "attach");
        if streaming
            && arg.len() > 1
            && arg.starts_with('-')
            && !arg.starts_with("--")
            && arg[1..].chars().all(|c| c == 'i' || c == 't')
        {
            a.stdin |= arg.contains('i');
            a.tty |= arg.contains('t');
            continue;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = |name: &str| -> Result<String> {
            inline.clone().or_else(|| it.next().cloned()).ok_or_else(|| usage(format!("{verb}: {name} needs a value")))
        };
        match flag {
            "-h" | "--help" => a.help = true,
            "--socket" => a.socket = Some(value("--socket")?),
            "-n" | "--namespace" => a.namespace = Some(value("--namespace")?),
            "-A" | "--all-namespaces" => a.all = true,
            "-o" | "--output" => a.output = Some(value("--output")?),
            s if s.starts_with("-o") && s.len() > 2 && inline.is_none() => a.output = Some(s[2..].to_string()),
            "-c" | "--container" => a.container = Some(value("--container")?),
            "-f" | "--filename" if verb == "apply" => a.file = Some(value("-f")?),
            "-f" | "--follow" => a.follow = true,
            "--stdin" if streaming => a.stdin = true,
            "--tty" if streaming => a.tty = true,
            "--address" if verb == "port-forward" => a.address = Some(value("--address")?),
            "-p" | "--previous" => a.previous = true,
            "--tail" => {
                let v = value("--tail")?;
                a.tail =
                    Some(v.parse().map_err(|_| usage(format!("{verb}: --tail {v:?}: expected a number of lines")))?);
            }
            "--grace-period" => {
                let v = value("--grace-period")?;
                let n: i64 = v.parse().map_err(|_| usage(format!("{verb}: --grace-period {v:?}: expected seconds")))?;
                if n < 0 {
                    return Err(usage(format!("{verb}: --grace-period {n}: must not be negative")));
                }
                a.grace = Some(n);
            }
            s if s.starts_with('-') && s != "-" => {
                return Err(usage(format!("{verb}: unknown flag {s:?} (see podwarden {verb} --help)")));
            }
            _ => a.rest.push(arg.clone()),
        }
    }
    Ok(a)
}

impl Args {
    pub(super) fn client(&self) -> Result<Client> {
        Ok(Client::connect(&self.socket.clone().unwrap_or_else(default_socket))?)
    }

    /// kubectl's text for an empty list in the namespace (or all of them)
    /// these arguments name.
    pub(super) fn no_resources(&self) -> String {
        if self.all { "No resources found".into() } else { format!("No resources found in {} namespace.", self.ns()) }
    }

    pub(super) fn ns(&self) -> String {
        self.namespace.clone().unwrap_or_else(|| "default".into())
    }

    pub(super) fn output(&self, allowed: &[&str], verb: &str) -> Result<&str> {
        match self.output.as_deref() {
            None => Ok(""),
            Some(o) if allowed.contains(&o) => Ok(o),
            Some(o) => Err(usage(format!("{verb}: output format {o:?} is not supported (use {})", allowed.join(", ")))),
        }
    }

    /// The single resource name after an optional kind word (`pod`, `pods`, `po`).
    pub(super) fn kind_and_name(&self, verb: &str, need_name: bool) -> Result<Option<String>> {
        let mut rest = self.rest.iter();
        match rest.next().map(String::as_str) {
            Some("pod" | "pods" | "po") => {}
            Some(other) => return Err(usage(format!("{verb}: podwarden knows only pods, not {other:?}"))),
            None => {
                return Err(usage(format!(
                    "{verb}: name the kind: {verb} pod{}",
                    if need_name { " NAME" } else { "s" }
                )));
            }
        }
        let name = rest.next().cloned();
        if let Some(extra) = rest.next() {
            return Err(usage(format!("{verb}: unexpected argument {extra:?}")));
        }
        if need_name && name.is_none() {
            return Err(usage(format!("{verb}: name the pod: {verb} pod NAME")));
        }
        Ok(name)
    }
}

/// The help text of `verb`, `None` for a verb podwarden does not have.
pub(super) fn help(verb: &str) -> Option<&'static str> {
    Some(match verb {
        "get" => GET_HELP,
        "describe" => DESCRIBE_HELP,
        "logs" => LOGS_HELP,
        "events" => EVENTS_HELP,
        "node" => NODE_HELP,
        "top" => TOP_HELP,
        "apply" => APPLY_HELP,
        "delete" => DELETE_HELP,
        "version" => VERSION_HELP,
        "exec" => EXEC_HELP,
        "attach" => ATTACH_HELP,
        "port-forward" => PORT_FORWARD_HELP,
        "cp" => CP_HELP,
        _ => return None,
    })
}

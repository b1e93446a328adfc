//! The `podwarden` binary's commands: `run` starts the daemon (`daemon`: the
//! one wiring of every part and its threads), every other verb is a client
//! of the local API (`client`). May use every layer.
//!
//! The kubectl-like client verbs, on the local API: `get pods`, `describe pod`, `logs`, `events`, `node`, `apply`,
//! `delete pod`, `version`; `exec`, `attach`, `port-forward` and `cp`
//! (`stream`, `cp`: the runtime's streaming server, over WebSocket). Output follows kubectl (aligned tables, `-o
//! json|yaml|wide`). The pods and the node are the typed views of
//! [`crate::api::view`], as the daemon sent them; errors are [`CliError`]s, each
//! with its exit status.

mod args;
pub mod client;
mod cp;
pub mod daemon;
mod describe;
mod error;
pub mod join;
pub mod kubeconfig;
mod output;
mod stream;
mod tar;
mod verbs;

use std::io::Write;

pub use error::{CliError, exit};
pub use output::{age, pod_columns, pod_status, table};

use error::{Result, usage, writing};

pub const VERBS: &[&str] =
    &["get", "describe", "logs", "events", "node", "top", "apply", "delete", "exec", "attach", "port-forward", "cp"];

/// Run a client verb. `args` are the words after the verb.
pub fn run(verb: &str, args: &[String]) -> Result<()> {
    let a = args::parse(args, verb)?;
    let Some(help) = args::help(verb) else {
        return Err(usage(format!("unknown command {verb:?}")));
    };
    if a.help {
        print!("{help}");
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    let text = match verb {
        "get" => verbs::get(&a)?,
        "describe" => describe::describe(&a)?,
        "logs" => return verbs::logs(&a, &mut out),
        "events" => verbs::events(&a)?,
        "node" => verbs::node(&a)?,
        "top" => verbs::top(&a)?,
        "apply" => verbs::apply(&a)?,
        "delete" => verbs::delete(&a)?,
        "exec" => return stream::exec(&a),
        "attach" => return stream::attach(&a),
        "port-forward" => return stream::port_forward(&a),
        "cp" => return cp::cp(&a),
        _ => verbs::version(&a)?,
    };
    out.write_all(text.as_bytes()).map_err(writing)
}

//! Why a client verb failed ([`CliError`], each kind with its exit
//! status) and the exit statuses of `podwarden` ([`exit`]).

use thiserror::Error;

use crate::cli::client::{ClientError, FailureKind};

/// Why a client verb failed. The CLI prints it (`podwarden: ...`) and exits
/// with [`CliError::exit_code`].
#[derive(Debug, Error)]
pub enum CliError {
    /// Bad arguments: the message names the argument and the fix.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Reading the manifest or writing the output.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("apply: {file}: manifest is over the limit of {limit} bytes")]
    TooLarge { file: String, limit: u64 },
    #[error("formatting YAML: {0}")]
    Yaml(#[source] serde_yaml_ng::Error),
    /// A named ConfigMap or Secret that does not exist (kubectl's text).
    #[error("{0}")]
    NotFound(String),
    /// exec, attach, port-forward, cp: the stream to the runtime failed.
    #[error("{0}")]
    Stream(String),
    /// The remote command ended with this non-zero status (exec): podwarden
    /// exits with it.
    #[error("command terminated with exit code {0}")]
    Exit(u8),
    /// A signal ended the session (exit status 128 + the signal); the
    /// terminal is restored, the remote command runs on.
    #[error("interrupted by signal {0}")]
    Signal(u8),
}

/// The exit statuses of `podwarden` (sysexits.h names), as the man page's
/// EXIT STATUS and `podwarden help` list them.
pub mod exit {
    /// Any other failure: a pod or container not found, an invalid
    /// manifest or argument, a file in the way (kubectl's status for these).
    pub const FAILURE: u8 = 1;
    /// EX_UNAVAILABLE: `run` cannot reach the container runtime; a client
    /// verb cannot reach the agent's API socket (or it does not answer).
    pub const UNAVAILABLE: u8 = 69;
    /// EX_SOFTWARE: a thread of `podwarden run` panicked
    /// ([`crate::base::thread::PANIC_EXIT_CODE`]).
    pub const SOFTWARE: u8 = 70;
    /// EX_NOPERM: the agent refused the caller: not root and not in
    /// `apiGroup`, the socket's mode, or a pod its Pod Security level forbids.
    pub const NOPERM: u8 = 77;
    /// EX_CONFIG: the config file cannot be read or is invalid.
    pub const CONFIG: u8 = 78;
}

impl CliError {
    /// The process's exit status for this error ([`exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Client(e) => match e.kind() {
                FailureKind::Unavailable => exit::UNAVAILABLE,
                FailureKind::Refused => exit::NOPERM,
                FailureKind::Failed => exit::FAILURE,
            },
            CliError::Exit(code) => *code,
            CliError::Signal(sig) => 128 + *sig,
            _ => exit::FAILURE,
        }
    }
}

pub(crate) type Result<T> = std::result::Result<T, CliError>;

pub(crate) fn usage(msg: impl Into<String>) -> CliError {
    CliError::Usage(msg.into())
}

/// An error writing the output.
pub(crate) fn writing(source: std::io::Error) -> CliError {
    CliError::Io { what: "writing output".into(), source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_by_kind_of_failure() {
        let rpc = |code| CliError::Client(ClientError::Call(grpcio::Error::RpcFailure(grpcio::RpcStatus::new(code))));
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(CliError::Usage("x".into()).exit_code(), 1);
        assert_eq!(CliError::Client(ClientError::NoSocket { socket: "s".into(), source: io() }).exit_code(), 69);
        assert_eq!(CliError::Client(ClientError::NotListening { socket: "s".into(), source: io() }).exit_code(), 69);
        assert_eq!(
            CliError::Client(ClientError::SocketPermission { socket: "s".into(), source: io() }).exit_code(),
            77
        );
        assert_eq!(CliError::Client(ClientError::Refused { reason: "r".into() }).exit_code(), 77);
        assert_eq!(rpc(grpcio::RpcStatusCode::PERMISSION_DENIED).exit_code(), 77);
        assert_eq!(rpc(grpcio::RpcStatusCode::UNAVAILABLE).exit_code(), 69);
        assert_eq!(rpc(grpcio::RpcStatusCode::DEADLINE_EXCEEDED).exit_code(), 69);
        assert_eq!(rpc(grpcio::RpcStatusCode::NOT_FOUND).exit_code(), 1, "kubectl's status for not found");
        assert_eq!(rpc(grpcio::RpcStatusCode::INVALID_ARGUMENT).exit_code(), 1);
        assert_eq!(rpc(grpcio::RpcStatusCode::ALREADY_EXISTS).exit_code(), 1);
        assert_eq!(rpc(grpcio::RpcStatusCode::INTERNAL).exit_code(), 1);
    }
}

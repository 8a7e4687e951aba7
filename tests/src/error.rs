//! Typed errors of the Open vSwitch harness.

use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while building, driving or tearing down a harness.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A program could not be started at all (missing binary, permissions).
    #[error("cannot run `{program}`: {source} (are Open vSwitch and iproute2 installed? run scripts/deps.sh)")]
    Spawn {
        /// The program that failed to start.
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A command ran and exited unsuccessfully.
    #[error("`{command}` failed ({status}): {stderr}")]
    CommandFailed {
        /// The command line, for the reader.
        command: String,
        /// Exit status as text.
        status: String,
        /// What the command wrote on stderr (trimmed).
        stderr: String,
        /// What the command wrote on stdout (trimmed).
        stdout: String,
    },
    /// A daemon exited while we were waiting for it to come up.
    #[error("{daemon} exited during start-up ({status}); log tail:\n{log_tail}")]
    DaemonDied {
        /// Daemon name.
        daemon: String,
        /// Its exit status.
        status: String,
        /// The last lines of its log file.
        log_tail: String,
    },
    /// Something did not become ready in time.
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout {
        /// What we waited for.
        what: String,
        /// How long we waited.
        timeout: Duration,
    },
    /// A filesystem operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// The operation (e.g. "create dir").
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A socket or thread operation failed.
    #[error("{context}: {source}")]
    Net {
        /// What we were doing.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Entering a network namespace failed.
    #[error("cannot enter network namespace {ns}: {source}")]
    Setns {
        /// Namespace name.
        ns: String,
        /// The errno.
        #[source]
        source: nix::Error,
    },
    /// A tool printed something we could not understand.
    #[error("cannot parse output of {what}: {detail}")]
    Parse {
        /// Which output.
        what: String,
        /// What was wrong.
        detail: String,
    },
    /// The harness was asked for something impossible (bad names, clashing ports, ...).
    #[error("invalid harness request: {0}")]
    Invalid(String),
}

/// Result alias for harness operations.
pub type Result<T, E = HarnessError> = std::result::Result<T, E>;

//! `flowmesh-cni`: turns one CNI invocation (environment + stdin) into one request to the
//! shim and the shim's answer into stdout + exit status. Synchronous and small: it runs once
//! per pod operation.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::cni::{code, version_json, CniEnv, CniError, Command, NetConf, LATEST_VERSION};
use crate::protocol::{ShimRequest, ShimResponse, DEFAULT_SOCKET, MAX_MESSAGE, SOCKET_ENV};

/// How long the plugin waits for the shim's answer (ADD waits for the controller's flows).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(120);

/// What the plugin prints and how it exits.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// JSON printed on stdout (nothing for a successful DEL/CHECK/STATUS/GC).
    pub stdout: Option<Value>,
    /// Process exit status.
    pub exit_code: i32,
}

/// Runs one invocation: `get` reads the environment, `stdin` is the network configuration.
pub fn run(get: impl Fn(&str) -> Option<String>, stdin: &[u8]) -> Outcome {
    // VERSION must work with any (or no) configuration.
    if get("CNI_COMMAND").as_deref() == Some("VERSION") {
        let v = NetConf::parse(stdin)
            .map(|c| c.cni_version)
            .unwrap_or_else(|_| LATEST_VERSION.to_owned());
        return Outcome {
            stdout: Some(version_json(&v)),
            exit_code: 0,
        };
    }
    let conf = match NetConf::parse(stdin) {
        Ok(c) => c,
        Err(e) => return failure(&e, LATEST_VERSION),
    };
    match invoke(&get, &conf) {
        Ok(stdout) => Outcome {
            stdout,
            exit_code: 0,
        },
        Err(e) => failure(&e, &conf.cni_version),
    }
}

fn failure(e: &CniError, version: &str) -> Outcome {
    Outcome {
        stdout: Some(e.to_json(version)),
        exit_code: 1,
    }
}

/// The socket path: `FLOWMESH_CNI_SOCKET`, else the configuration's `socket`, else the default.
pub fn socket_path(get: &impl Fn(&str) -> Option<String>, conf: &NetConf) -> PathBuf {
    get(SOCKET_ENV)
        .filter(|s| !s.is_empty())
        .or_else(|| conf.socket.clone())
        .unwrap_or_else(|| DEFAULT_SOCKET.to_owned())
        .into()
}

fn invoke(
    get: &impl Fn(&str) -> Option<String>,
    conf: &NetConf,
) -> Result<Option<Value>, CniError> {
    let env = CniEnv::from_lookup(get)?;
    conf.check_command(env.command)?;
    let socket = socket_path(get, conf);
    let request = ShimRequest {
        command: env.command,
        container_id: env.container_id,
        netns: env.netns,
        ifname: env.ifname,
        args: env.args,
        config: conf.raw.clone(),
    };
    let unavailable = |e: std::io::Error| {
        let (c, msg) = match (env.command, e.kind()) {
            (Command::Status, _) => (code::NOT_AVAILABLE, "flowmesh-shim is not available"),
            (_, ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
                (code::TRY_AGAIN, "flowmesh-shim is not running")
            }
            _ => (code::IO_FAILURE, "cannot reach flowmesh-shim"),
        };
        CniError::new(c, msg, format!("socket {}: {e}", socket.display()))
    };
    let mut stream = UnixStream::connect(&socket).map_err(unavailable)?;
    let io = |what: &str, e: std::io::Error| {
        let c = if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut {
            code::TRY_AGAIN
        } else {
            code::IO_FAILURE
        };
        CniError::new(c, format!("flowmesh-shim {what} failed"), e.to_string())
    };
    stream
        .set_read_timeout(Some(RESPONSE_TIMEOUT))
        .map_err(|e| io("socket setup", e))?;
    let body = serde_json::to_vec(&request)
        .map_err(|e| CniError::new(code::INTERNAL, "cannot encode the request", e.to_string()))?;
    stream.write_all(&body).map_err(|e| io("request", e))?;
    stream
        .shutdown(std::net::Shutdown::Write)
        .map_err(|e| io("request", e))?;
    let mut reply = Vec::new();
    stream
        .take(MAX_MESSAGE + 1)
        .read_to_end(&mut reply)
        .map_err(|e| io("response", e))?;
    let response: ShimResponse = serde_json::from_slice(&reply).map_err(|e| {
        CniError::new(
            code::PROTOCOL,
            "flowmesh-shim sent a malformed response",
            format!("{e} ({} bytes)", reply.len()),
        )
    })?;
    match response {
        ShimResponse::Ok { result } => Ok(result),
        ShimResponse::Error(e) => Err(e),
    }
}

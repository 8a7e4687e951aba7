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

/// Refuses a socket path that is (or sits in a directory that is) a symbolic link, that is
/// not a socket, or that another user owns: the plugin runs as root and must talk only to
/// the shim's own root-only socket. A missing socket passes (connect reports it).
pub fn check_socket(socket: &std::path::Path) -> Result<(), CniError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let refuse = |detail: String| {
        CniError::new(
            code::IO_FAILURE,
            "refusing the flowmesh-shim socket",
            format!("socket {}: {detail}", socket.display()),
        )
    };
    let me = nix::unistd::geteuid().as_raw();
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(m) = std::fs::symlink_metadata(dir) {
            if m.file_type().is_symlink() {
                return Err(refuse(format!(
                    "its directory {} is a symbolic link",
                    dir.display()
                )));
            }
        }
    }
    let m = match std::fs::symlink_metadata(socket) {
        Ok(m) => m,
        Err(_) => return Ok(()),
    };
    if m.file_type().is_symlink() {
        return Err(refuse("is a symbolic link".into()));
    }
    if !m.file_type().is_socket() {
        return Err(refuse("is not a unix socket".into()));
    }
    if m.uid() != 0 && m.uid() != me {
        return Err(refuse(format!(
            "is owned by uid {}, not root (the shim's socket is root-only)",
            m.uid()
        )));
    }
    Ok(())
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
    check_socket(&socket)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinked_or_foreign_sockets_are_refused() {
        let dir = std::env::temp_dir().join(format!("flowmesh-plugin-sock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let real = dir.join("cni.sock");
        let _l = std::os::unix::net::UnixListener::bind(&real).expect("bind");
        assert!(check_socket(&real).is_ok());
        // A missing socket is for connect to report.
        assert!(check_socket(&dir.join("absent.sock")).is_ok());
        let link = dir.join("link.sock");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let e = check_socket(&link).expect_err("symlink refused");
        assert_eq!(e.code, code::IO_FAILURE);
        assert!(e.details.contains("symbolic link"), "{}", e.details);
        let linked_dir = dir.join("linked-dir");
        std::os::unix::fs::symlink(&dir, &linked_dir).expect("dir symlink");
        assert!(check_socket(&linked_dir.join("cni.sock")).is_err());
        let file = dir.join("plain");
        std::fs::write(&file, b"x").expect("file");
        assert!(check_socket(&file).is_err());
        // Through the plugin: the invocation fails with the refusal, never reaching a shim.
        let env = |k: &str| match k {
            "CNI_COMMAND" => Some("ADD".to_string()),
            "CNI_CONTAINERID" => Some("c1".to_string()),
            "CNI_NETNS" => Some("/var/run/netns/x".to_string()),
            "CNI_IFNAME" => Some("eth0".to_string()),
            "CNI_PATH" => Some("/opt/cni/bin".to_string()),
            "FLOWMESH_CNI_SOCKET" => Some(link.display().to_string()),
            _ => None,
        };
        let out = run(
            env,
            br#"{"cniVersion":"1.0.0","name":"flowmesh","type":"flowmesh-cni"}"#,
        );
        assert_eq!(out.exit_code, 1);
        let text = out.stdout.map(|v| v.to_string()).unwrap_or_default();
        assert!(text.contains("symbolic link"), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

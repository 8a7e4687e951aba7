//! The CNI socket: accepts plugin connections, one request each, served concurrently
//! (operations on one container are serialized by [`PodManager`]).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tracing::{debug, warn};

use crate::cni::{code, CniError};
use crate::pod::PodManager;
use crate::protocol::{ShimRequest, ShimResponse, MAX_MESSAGE};

/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Socket set-up failures.
#[derive(Debug, thiserror::Error)]
#[error("CNI socket {path}: {op}: {source}")]
pub struct SocketError {
    /// Socket or directory path.
    pub path: PathBuf,
    /// What failed.
    pub op: &'static str,
    /// Cause.
    pub source: std::io::Error,
}

/// Creates the socket's directory (mode 0700, owned by root, so only root can connect),
/// removes a stale socket file and binds.
pub fn bind(path: &Path) -> Result<UnixListener, SocketError> {
    let err = |op, p: &Path| {
        let p = p.to_owned();
        move |source| SocketError {
            path: p,
            op,
            source,
        }
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(err("create directory", dir))?;
    std::os::unix::fs::chown(dir, Some(0), Some(0)).map_err(err("chown root", dir))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(err("chmod 0700", dir))?;
    match std::fs::remove_file(path) {
        Ok(()) => debug!(path = %path.display(), "removed a stale socket"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err("remove stale socket", path)(e)),
    }
    let l = UnixListener::bind(path).map_err(err("bind", path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(err("chmod 0600", path))?;
    Ok(l)
}

/// Serves until `shutdown` completes, then removes the socket file.
pub async fn serve(
    listener: UnixListener,
    path: PathBuf,
    pods: Arc<PodManager>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok((conn, _)) => {
                    let pods = Arc::clone(&pods);
                    tokio::spawn(async move { handle_conn(conn, pods).await });
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    let _ = std::fs::remove_file(&path);
}

async fn handle_conn(mut conn: UnixStream, pods: Arc<PodManager>) {
    let mut buf = Vec::new();
    let read = tokio::time::timeout(
        REQUEST_TIMEOUT,
        (&mut conn).take(MAX_MESSAGE + 1).read_to_end(&mut buf),
    )
    .await;
    let response = match read {
        Err(_) => ShimResponse::Error(CniError::new(code::PROTOCOL, "request timed out", "")),
        Ok(Err(e)) => ShimResponse::Error(CniError::new(
            code::IO_FAILURE,
            "cannot read the request",
            e.to_string(),
        )),
        Ok(Ok(_)) if buf.len() as u64 > MAX_MESSAGE => ShimResponse::Error(CniError::new(
            code::PROTOCOL,
            "request too large",
            format!("limit {MAX_MESSAGE} bytes"),
        )),
        Ok(Ok(_)) => match serde_json::from_slice::<ShimRequest>(&buf) {
            Ok(req) => pods.handle(req).await,
            Err(e) => ShimResponse::Error(CniError::new(
                code::DECODE,
                "malformed request",
                e.to_string(),
            )),
        },
    };
    let body = match serde_json::to_vec(&response) {
        Ok(b) => b,
        Err(e) => {
            warn!(error = %e, "cannot encode a response");
            return;
        }
    };
    if let Err(e) = conn.write_all(&body).await {
        warn!(error = %e, "cannot send the response (plugin gone?)");
    }
    let _ = conn.shutdown().await;
}

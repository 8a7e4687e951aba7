//! The controller's HTTP endpoints:
//! * `--metrics-listen`: Prometheus `/metrics` with `/healthz` and `/readyz`. In plaintext only
//!   on a loopback address; anywhere else over TLS with client certificates
//!   (`--metrics-tls-cert`, `--metrics-tls-key`, `--metrics-client-ca`), where only admin and
//!   read-only certificates may read (`403` for any other certificate of the CA).
//! * `--health-listen`: `/healthz` and `/readyz` only, in plaintext, for the kubelet's probes
//!   (`host: 127.0.0.1` on the host network); `/readyz` names no switch there, it counts them.

use super::StartError;
use crate::core::CoreHandle;
use crate::identity::{identity_of, Identity};
use axum::extract::ConnectInfo;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;

/// TLS handshakes in progress at once on the metrics listener; more connections are closed.
const MAX_HANDSHAKES: usize = 64;
/// How long a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// PEM files of the metrics listener's TLS.
#[derive(Clone, Debug)]
pub struct MetricsTls {
    /// The controller's certificate (chain).
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The CA whose signature every client certificate must carry.
    pub client_ca: PathBuf,
}

fn tls_error(what: &str, path: &Path, e: impl std::fmt::Display) -> StartError {
    StartError::MetricsTls(format!("{what} {}: {e}", path.display()))
}

/// The rustls server config of `t`: its certificate, and client certificates required and
/// verified against its CA (WebPKI: signature, validity).
pub(super) fn tls_config(t: &MetricsTls) -> Result<Arc<rustls::ServerConfig>, StartError> {
    let read = |what: &str, p: &Path| std::fs::read(p).map_err(|e| tls_error(what, p, e));
    let certs = |what: &str, p: &Path| -> Result<Vec<CertificateDer<'static>>, StartError> {
        let pem = read(what, p)?;
        let v = rustls_pemfile::certs(&mut &pem[..])
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| tls_error(what, p, e))?;
        if v.is_empty() {
            return Err(tls_error(what, p, "no PEM CERTIFICATE block"));
        }
        Ok(v)
    };
    let chain = certs("certificate (--metrics-tls-cert)", &t.cert)?;
    let key_pem = read("private key (--metrics-tls-key)", &t.key)?;
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut &key_pem[..])
        .map_err(|e| tls_error("private key (--metrics-tls-key)", &t.key, e))?
        .ok_or_else(|| {
            tls_error(
                "private key (--metrics-tls-key)",
                &t.key,
                "no PEM PRIVATE KEY block",
            )
        })?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in certs("client CA (--metrics-client-ca)", &t.client_ca)? {
        roots
            .add(ca)
            .map_err(|e| tls_error("client CA (--metrics-client-ca)", &t.client_ca, e))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| tls_error("client CA (--metrics-client-ca)", &t.client_ca, e))?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StartError::MetricsTls(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| tls_error("certificate and key (--metrics-tls-cert/-key)", &t.cert, e))?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// Who is on the other end of a metrics connection.
#[derive(Clone, Debug)]
struct Peer {
    addr: SocketAddr,
    who: Option<Identity>,
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(s: axum::serve::IncomingStream<'_, TlsListener>) -> Self {
        s.remote_addr().clone()
    }
}

/// Accepts TCP connections and hands on those whose TLS handshake (with a verified client
/// certificate) completed; handshakes run beside each other, so a slow client holds up no
/// other.
struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, Peer)>,
    local: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl TlsListener {
    fn new(tcp: TcpListener, cfg: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let (tx, rx) = mpsc::channel(MAX_HANDSHAKES);
        let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
        let limit = Arc::new(Semaphore::new(MAX_HANDSHAKES));
        let accepting = tokio::spawn(async move {
            loop {
                let (stream, addr) = match tcp.accept().await {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::debug!(error = %e, "metrics listener: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    tracing::debug!(%addr, "metrics listener: too many TLS handshakes in progress; closed");
                    continue;
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let who = tls
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|c| c.first())
                                .and_then(|c| identity_of(c.as_ref()).ok());
                            let _ = tx.send((tls, Peer { addr, who })).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%addr, error = %e, "metrics listener: TLS handshake refused")
                        }
                        Err(_) => {
                            tracing::debug!(%addr, "metrics listener: TLS handshake timed out")
                        }
                    }
                });
            }
        });
        Ok(TlsListener {
            rx,
            local,
            accepting,
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = Peer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(x) => x,
            // The accepting task is gone: nothing comes any more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(Peer {
            addr: self.local,
            who: None,
        })
    }
}

/// Only admin and read-only certificates read the metrics.
async fn only_readers(
    ConnectInfo(peer): ConnectInfo<Peer>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    match &peer.who {
        Some(Identity::Admin(_) | Identity::ReadOnly(_)) => next.run(req).await,
        other => {
            let who = other
                .as_ref()
                .map_or("an unreadable certificate".to_string(), |w| w.to_string());
            tracing::warn!(addr = %peer.addr, caller = %who, path = %req.uri().path(), "metrics request refused");
            (
                StatusCode::FORBIDDEN,
                format!(
                    "{who} may not read the metrics: they take a certificate with \
                     O=flowmesh:read-only or O=flowmesh:admin (flowmeshctl certs admin NAME --read-only)\n"
                ),
            )
                .into_response()
        }
    }
}

/// `/readyz`: 200 once every known switch is connected and in sync (or, on a standby, has
/// granted this replica the slave role: [`super::switches_not_ready`]) and the store answers
/// (with the Kubernetes datastore: every kind listed and no watch failing, the view a standby
/// needs to take the lead); else 503 saying why, the switches named (`named`) or counted.
async fn readyz(core: CoreHandle, named: bool) -> (StatusCode, String) {
    let (statuses, store) = core
        .read(|c| (c.switch_statuses(), c.store_problem()))
        .await
        .unwrap_or_default();
    if let Some(why) = store {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: the store is unavailable: {why}\n"),
        );
    }
    let waiting = super::switches_not_ready(&statuses);
    match (waiting.is_empty(), named) {
        (true, _) => (StatusCode::OK, "ready\n".to_string()),
        (false, true) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: switches not in sync: {}\n", waiting.join(", ")),
        ),
        (false, false) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {} switches not in sync\n", waiting.len()),
        ),
    }
}

fn health_routes(core: CoreHandle, named: bool) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let core = core.clone();
                async move { readyz(core, named).await }
            }),
        )
}

fn metrics_routes(core: CoreHandle) -> axum::Router {
    let c = core.clone();
    health_routes(core, true).route(
        "/metrics",
        get(move || {
            let core = c.clone();
            async move {
                let statuses = core.read(|c| c.switch_statuses()).await.unwrap_or_default();
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4",
                    )],
                    core.metrics.render(&statuses),
                )
            }
        }),
    )
}

/// Serve `/metrics`, `/healthz` and `/readyz` until `stop`: over TLS with client
/// certificates when `tls` is given, else in plaintext (the caller allows that on loopback
/// only).
pub(super) async fn serve_metrics(
    core: CoreHandle,
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let app = metrics_routes(core);
    let served = match tls {
        Some(cfg) => match TlsListener::new(listener, cfg) {
            Ok(l) => {
                let app = app.layer(axum::middleware::from_fn(only_readers));
                axum::serve(l, app.into_make_service_with_connect_info::<Peer>())
                    .with_graceful_shutdown(stop)
                    .await
            }
            Err(e) => Err(e),
        },
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .await
        }
    };
    if let Err(e) = served {
        tracing::error!(error = %e, "metrics server stopped");
    }
}

/// Serve `/healthz` and `/readyz` (switches counted, not named) until `stop`.
pub(super) async fn serve_health(
    core: CoreHandle,
    listener: TcpListener,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) {
    if let Err(e) = axum::serve(listener, health_routes(core, false))
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::error!(error = %e, "health server stopped");
    }
}

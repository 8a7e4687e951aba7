//! Running the controller: the state backend, the core, the gRPC server (admin + node API,
//! reflection, health), the metrics/health HTTP endpoint and the OpenFlow listener.

use crate::core::{load_model, Core, CoreConfig, CoreHandle};
use crate::grpc::{AdminService, NodeService};
use crate::metrics::Metrics;
use crate::state::{EmbeddedStore, StateBackend};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use topology::ClusterNetworkConfig;

/// Everything the controller needs to start.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Cluster network config from `--config` (None: stored, or the embedded default).
    pub cluster: Option<ClusterNetworkConfig>,
    /// Where the embedded database lives.
    pub data_dir: PathBuf,
    /// OpenFlow listen address.
    pub openflow_listen: SocketAddr,
    /// gRPC listen address.
    pub grpc_listen: SocketAddr,
    /// Metrics/health listen address (None: off).
    pub metrics_listen: Option<SocketAddr>,
    /// Audit interval.
    pub audit_interval: Duration,
    /// Echo interval for switch liveness (the timeout is the same again).
    pub echo_interval: Duration,
    /// TLS for switch connections: controller certificate, key, and the CA that signs switch
    /// certificates (PEM files). None: plain TCP.
    pub openflow_tls: Option<(PathBuf, PathBuf, PathBuf)>,
}

/// Why the controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The state backend failed.
    #[error("{0}")]
    Store(#[from] crate::state::StoreError),
    /// The stored state or config was refused.
    #[error("{0}")]
    State(#[from] crate::error::ApiError),
    /// The OpenFlow TLS files are unusable.
    #[error("OpenFlow TLS: {0}")]
    Tls(#[from] ofproto::session::TlsError),
    /// A listen address is busy or not allowed.
    #[error("cannot listen on {what} {addr}: {source} (is another flowmesh-controller running? choose another address with {flag})")]
    Listen {
        what: &'static str,
        addr: SocketAddr,
        flag: &'static str,
        source: std::io::Error,
    },
}

/// A running controller.
pub struct Running {
    /// The core.
    pub core: CoreHandle,
    /// The bound gRPC address.
    pub grpc_addr: SocketAddr,
    /// The bound OpenFlow address.
    pub openflow_addr: SocketAddr,
    /// The bound metrics address.
    pub metrics_addr: Option<SocketAddr>,
}

async fn bind(
    what: &'static str,
    flag: &'static str,
    addr: SocketAddr,
) -> Result<tokio::net::TcpListener, StartError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Listen {
            what,
            addr,
            flag,
            source,
        })
}

/// Start everything; the tasks run until the process exits.
pub async fn start(cfg: ServerConfig) -> Result<Running, StartError> {
    let store: Arc<dyn StateBackend> = Arc::new(EmbeddedStore::open(&cfg.data_dir)?);
    let (model, changes) = load_model(store.as_ref(), cfg.cluster.as_ref())?;
    if !changes.is_empty() {
        store.apply(&changes)?;
    }
    tracing::info!(
        backend = store.name(),
        nodes = model.node_count(),
        pods = model.pod_count(),
        "state loaded"
    );
    // Bind every listener before starting anything, so a busy port fails cleanly.
    let grpc = bind("gRPC", "--grpc-listen", cfg.grpc_listen).await?;
    let tls = match &cfg.openflow_tls {
        Some((cert, key, ca)) => {
            let pem = ofproto::session::TlsPem::from_files(cert, key, ca)?;
            Some(ofproto::session::server_config(&pem)?)
        }
        None => None,
    };
    let mut session_cfg = ofproto::session::SessionConfig::default();
    session_cfg.fsm.echo_interval = cfg.echo_interval;
    session_cfg.fsm.echo_timeout = cfg.echo_interval;
    let (of, of_events) = ofproto::session::Listener::bind(cfg.openflow_listen, tls, session_cfg)
        .await
        .map_err(|source| StartError::Listen {
            what: "OpenFlow",
            addr: cfg.openflow_listen,
            flag: "--openflow-listen",
            source,
        })?;
    let metrics_l = match cfg.metrics_listen {
        Some(a) => Some(bind("metrics", "--metrics-listen", a).await?),
        None => None,
    };
    let metrics = Arc::new(Metrics::default());
    let core = Core::spawn(
        model,
        store,
        CoreConfig {
            audit_interval: cfg.audit_interval,
        },
        metrics.clone(),
    )?;
    let grpc_addr = grpc.local_addr().map_err(|source| StartError::Listen {
        what: "gRPC",
        addr: cfg.grpc_listen,
        flag: "--grpc-listen",
        source,
    })?;
    let openflow_addr = of.local_addr();
    let metrics_addr = metrics_l.as_ref().and_then(|l| l.local_addr().ok());
    let core_for_of = core.clone();

    tokio::spawn(serve_grpc(core.clone(), grpc));
    if let Some(l) = metrics_l {
        tokio::spawn(serve_metrics(core.clone(), l));
    }
    tokio::spawn(async move {
        // The listener accepts for as long as it lives.
        let _listener = of;
        crate::switches::forward_events(core_for_of, of_events).await;
    });
    tracing::info!(%grpc_addr, %openflow_addr, ?metrics_addr, "flowmesh-controller running");
    Ok(Running {
        core,
        grpc_addr,
        openflow_addr,
        metrics_addr,
    })
}

async fn serve_grpc(core: CoreHandle, listener: tokio::net::TcpListener) {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<proto::admin::admin_server::AdminServer<AdminService>>()
        .await;
    health_reporter
        .set_serving::<proto::node::node_api_server::NodeApiServer<NodeService>>()
        .await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
        .build_v1();
    // Small request/response messages: without TCP_NODELAY, Nagle and delayed ACKs add ~40 ms.
    let incoming = {
        use tokio_stream::StreamExt;
        tokio_stream::wrappers::TcpListenerStream::new(listener).map(|s| {
            s.inspect(|s| {
                let _ = s.set_nodelay(true);
            })
        })
    };
    let mut builder = tonic::transport::Server::builder();
    let router = builder
        .add_service(health_service)
        .add_service(proto::admin::admin_server::AdminServer::new(
            AdminService::new(core.clone()),
        ))
        .add_service(proto::node::node_api_server::NodeApiServer::new(
            NodeService::new(core),
        ));
    let router = match reflection {
        Ok(r) => router.add_service(r),
        Err(e) => {
            tracing::error!(error = %e, "gRPC reflection unavailable");
            router
        }
    };
    if let Err(e) = router.serve_with_incoming(incoming).await {
        tracing::error!(error = %e, "gRPC server stopped");
    }
}

async fn serve_metrics(core: CoreHandle, listener: tokio::net::TcpListener) {
    use axum::routing::get;
    let c1 = core.clone();
    let c2 = core.clone();
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let core = c1.clone();
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
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let core = c2.clone();
                async move {
                    let statuses = core.read(|c| c.switch_statuses()).await.unwrap_or_default();
                    let waiting: Vec<String> = statuses
                        .iter()
                        .filter(|s| !s.unknown)
                        .filter(|s| {
                            !(s.connected.load(Ordering::Relaxed)
                                && s.synced.load(Ordering::Relaxed))
                        })
                        .map(|s| s.node.clone())
                        .collect();
                    if waiting.is_empty() {
                        (axum::http::StatusCode::OK, "ready\n".to_string())
                    } else {
                        (
                            axum::http::StatusCode::SERVICE_UNAVAILABLE,
                            format!("not ready: switches not in sync: {}\n", waiting.join(", ")),
                        )
                    }
                }
            }),
        );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "metrics server stopped");
    }
}

//! Running the controller: the state backend, the core, the gRPC server (admin + node API,
//! reflection, health), the metrics and health HTTP endpoints ([`http`]) and the OpenFlow
//! listener.

mod http;

pub use http::MetricsTls;

use crate::api::auth::AuthzLayer;
use crate::api::grpc::AdminService;
use crate::api::node_guard::{NodeGuard, NodeTrust};
use crate::core::{Core, CoreConfig, CoreHandle};
use crate::observe::{Metrics, SwitchStatus};
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
    /// `policyAuditConfig` from `--config` (None: OpenShift's defaults).
    pub policy_audit: Option<topology::model::audit::AuditConfig>,
    /// The `--config` file and the text it was read with: watched for `policyAuditConfig`
    /// changes, applied while running.
    pub config_file: Option<(PathBuf, String)>,
    /// Where the embedded database lives.
    pub data_dir: PathBuf,
    /// OpenFlow listen address.
    pub openflow_listen: SocketAddr,
    /// Serve plaintext OpenFlow on an address that is not loopback (`--openflow-insecure`).
    pub openflow_insecure: bool,
    /// What one OpenFlow peer, and all of them together, may hold.
    pub openflow_limits: OpenFlowLimits,
    /// gRPC listen address.
    pub grpc_listen: SocketAddr,
    /// Metrics/health listen address (None: off). Plaintext only on loopback: elsewhere it
    /// needs `metrics_tls`.
    pub metrics_listen: Option<SocketAddr>,
    /// TLS with client certificates for the metrics listener.
    pub metrics_tls: Option<MetricsTls>,
    /// A plaintext listener of `/healthz` and `/readyz` only, for the kubelet (None: off).
    pub health_listen: Option<SocketAddr>,
    /// Audit interval: each switch is read whole at most this often.
    pub audit_interval: Duration,
    /// Whole-table audits started per second across all switches (`switches::AuditPacer`).
    pub audit_rate: f64,
    /// Echo interval for switch liveness.
    pub echo_interval: Duration,
    /// The echo timeout's floor (it adapts to the switch; see `ofproto::session::FsmConfig`).
    pub echo_timeout: Duration,
    /// The underlay probe of egress nodes (egress-IP failover's liveness signal).
    pub egress_probe: crate::resources::egress_probe::ProbeConfig,
    /// How long a node's shim may stop watching its egress IPs before the node counts as
    /// offline for them (`CoreConfig::shim_grace`).
    pub shim_grace: Duration,
    /// TLS for switch connections: controller certificate, key, and the CA that signs switch
    /// certificates (PEM files). None: plain TCP.
    pub openflow_tls: Option<(PathBuf, PathBuf, PathBuf)>,
    /// The egress firewall's DNS resolver.
    pub egress_dns: crate::resources::egress_firewall::dns::DnsConfig,
    /// Where desired state lives (None: the embedded database in `data_dir`).
    pub etcd: Option<crate::state::etcd::EtcdConfig>,
    /// The Kubernetes datastore (`--datastore kubernetes`; exclusive with `etcd`).
    pub kube: Option<crate::state::kube::KubeConfig>,
    /// With etcd or Kubernetes: this replica's id (None: HOSTNAME:GRPC_PORT).
    pub replica_id: Option<String>,
    /// With etcd: the leader lease's TTL in seconds.
    pub leader_ttl_secs: i64,
    /// TLS with client certificates for the gRPC APIs. None: plaintext, allowed only when
    /// `grpc_listen` is a loopback address.
    pub grpc_tls: Option<GrpcTls>,
    /// Embedded and etcd datastores: node certificates register only nodes an admin added
    /// (`--nodes-preregistered`).
    pub nodes_preregistered: bool,
}

/// The OpenFlow listener's limits (docs/operations.md, "Limits of the OpenFlow listener").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFlowLimits {
    /// Connections in all (`--openflow-max-connections`).
    pub max_connections: usize,
    /// Connections from one peer address (`--openflow-max-connections-per-peer`).
    pub max_per_peer: usize,
    /// Ports one switch may report (`--openflow-max-ports`).
    pub max_ports: usize,
    /// Bytes one multipart reply may take (`--openflow-max-multipart-bytes`).
    pub max_multipart_bytes: usize,
}

impl Default for OpenFlowLimits {
    fn default() -> Self {
        OpenFlowLimits {
            max_connections: ofproto::session::listener::DEFAULT_MAX_CONNECTIONS,
            max_per_peer: ofproto::session::listener::DEFAULT_MAX_PER_PEER,
            max_ports: ofproto::session::fsm::DEFAULT_MAX_PORTS,
            max_multipart_bytes: ofproto::session::fsm::DEFAULT_MAX_MULTIPART_BYTES,
        }
    }
}

/// PEM files of the gRPC listener's TLS (docs/security.md).
#[derive(Clone, Debug)]
pub struct GrpcTls {
    /// The controller's certificate (chain).
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The CA whose signature every client certificate must carry.
    pub client_ca: PathBuf,
}

/// Why the controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The state backend failed.
    #[error("{0}")]
    Store(#[from] crate::state::StoreError),
    /// The configuration is invalid.
    #[error("{0}")]
    Config(String),
    /// The stored state or config was refused.
    #[error("{0}")]
    State(#[from] crate::error::ApiError),
    /// The OpenFlow TLS files are unusable.
    #[error("OpenFlow TLS: {0}")]
    Tls(#[from] ofproto::session::TlsError),
    /// The gRPC TLS files are unusable.
    #[error("gRPC TLS: {0}")]
    GrpcTls(String),
    /// The metrics TLS files are unusable.
    #[error("metrics TLS: {0}")]
    MetricsTls(String),
    /// Plaintext metrics on an address other hosts can reach.
    #[error("refusing to serve the metrics in plaintext on {0}, which is not a loopback address: anyone who reaches it could read node names, datapath ids and error counts. Give --metrics-tls-cert, --metrics-tls-key and --metrics-client-ca (TLS with client certificates; see docs/operations.md, \"Health and metrics\"), or listen on 127.0.0.1; the kubelet's probes use --health-listen")]
    MetricsPlaintextNotLoopback(SocketAddr),
    /// Plaintext gRPC on an address other hosts can reach.
    #[error("refusing to serve the admin and node APIs in plaintext on {0}, which is not a loopback address: anyone who reaches it could change the cluster network. Give --grpc-tls-cert, --grpc-tls-key and --grpc-client-ca (see docs/security.md; `flowmeshctl certs` makes a lab CA), or listen on 127.0.0.1")]
    PlaintextNotLoopback(SocketAddr),
    /// Plaintext OpenFlow on an address other hosts can reach, without `--openflow-insecure`.
    #[error("refusing to serve OpenFlow in plaintext on {0}, which is not a loopback address: anyone who reaches it could claim a node's datapath id, receive that node's flow table and push its real switch aside. Give --openflow-tls-cert, --openflow-tls-key and --openflow-ca (see docs/security.md; `flowmeshctl certs lab` makes a lab CA), listen on 127.0.0.1, or accept the risk with --openflow-insecure")]
    OpenFlowPlaintextNotLoopback(SocketAddr),
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
    /// Whether the metrics are served over TLS.
    pub metrics_tls: bool,
    /// The bound health address.
    pub health_addr: Option<SocketAddr>,
    /// Tells the servers to stop accepting and finish what they are doing.
    stop: tokio::sync::watch::Sender<bool>,
    /// The servers a graceful shutdown waits for, by name.
    servers: Vec<(&'static str, tokio::task::JoinHandle<()>)>,
}

/// How a graceful shutdown went.
#[derive(Debug)]
pub struct Shutdown {
    /// How long it took.
    pub took: Duration,
    /// The servers that had not finished when the grace period ended (empty: clean).
    pub abandoned: Vec<&'static str>,
}

impl Running {
    /// Stop gracefully: the gRPC and metrics servers stop accepting and finish the calls in
    /// flight (a mutation in flight is stored and acknowledged, or fails, before its call
    /// ends), for at most `grace`. Switch sessions are not waited for: they are closed at exit
    /// and the switches keep their flows and reconnect to the next controller. Logs what it
    /// waits for and what it gave up on.
    pub async fn shutdown(self, grace: Duration) -> Shutdown {
        let t0 = std::time::Instant::now();
        let names: Vec<&str> = self.servers.iter().map(|(n, _)| *n).collect();
        tracing::info!(
            waiting_for = %names.join(", "),
            grace_ms = grace.as_millis() as u64,
            "shutting down: stopped accepting; waiting for the calls in flight to finish"
        );
        let _ = self.stop.send(true);
        let deadline = tokio::time::Instant::now() + grace;
        let mut abandoned = Vec::new();
        for (name, mut task) in self.servers {
            match tokio::time::timeout_at(deadline, &mut task).await {
                Ok(_) => tracing::info!(server = name, "shutting down: server stopped"),
                Err(_) => {
                    task.abort();
                    tracing::warn!(
                        server = name,
                        grace_ms = grace.as_millis() as u64,
                        "shutting down: calls still open after the grace period (e.g. a watch stream); closing them"
                    );
                    abandoned.push(name);
                }
            }
        }
        let took = t0.elapsed();
        tracing::info!(took_ms = took.as_millis() as u64, "shutdown complete");
        Shutdown { took, abandoned }
    }
}

/// A future that resolves once `stop` says true (or its sender is gone).
async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
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

/// Load the model from the store and store what it adds (a new config, the default
/// namespace), guarded by the listed revisions: a replica starting at the same time makes the
/// write conflict, and the listing is read again.
fn load_and_initialise(
    store: &dyn StateBackend,
    cluster: Option<&ClusterNetworkConfig>,
) -> Result<
    (
        topology::ClusterModel,
        crate::state::Listing,
        Vec<crate::core::load::Skipped>,
    ),
    StartError,
> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let listing = store.list()?;
        let records = listing.records.iter().map(|(r, _)| r.clone()).collect();
        let crate::core::load::Loaded {
            model,
            changes,
            skipped,
        } = crate::core::load_model_from(records, cluster)?;
        if changes.is_empty() {
            return Ok((model, listing, skipped));
        }
        let revs: std::collections::HashMap<_, _> = listing
            .records
            .iter()
            .map(|(r, rev)| (r.key(), *rev))
            .collect();
        let guarded: Vec<crate::state::Guarded> = changes
            .into_iter()
            .map(|c| crate::state::Guarded {
                expected: revs.get(&c.key()).copied().unwrap_or(0),
                change: c,
            })
            .collect();
        match store.apply_guarded(&guarded) {
            Ok(_) => {}
            Err(crate::state::StoreError::Conflict { .. }) if attempt < 5 => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Start everything; the tasks run until [`Running::shutdown`] or the process exits.
pub async fn start(cfg: ServerConfig) -> Result<Running, StartError> {
    let mut etcd_store = None;
    let mut kube_store = None;
    let mut cluster = cfg.cluster.clone();
    let store: Arc<dyn StateBackend> = match (&cfg.etcd, &cfg.kube) {
        (Some(e), _) => {
            let s = Arc::new(crate::state::etcd::EtcdStore::connect(e.clone())?);
            etcd_store = Some(s.clone());
            s
        }
        (None, Some(k)) => {
            let kc = k.clone();
            // The store blocks on its own runtime: connect off this one.
            let s = tokio::task::spawn_blocking(move || crate::state::kube::KubeStore::connect(kc))
                .await
                .map_err(|e| crate::state::StoreError::Unavailable(e.to_string()))??;
            let s = Arc::new(s);
            // The Cluster Network Operator's Network objects, where they exist, say what the
            // cluster network is.
            let base = cluster.clone().unwrap_or_else(crate::state::default_config);
            if let Some(c) = crate::api::kube_sync::openshift_network_config(s.client(), &base)
                .await
                .map_err(crate::state::StoreError::Unavailable)?
            {
                cluster = Some(c);
            }
            kube_store = Some(s.clone());
            s
        }
        (None, None) => Arc::new(EmbeddedStore::open(&cfg.data_dir)?),
    };
    // With a shared store, replicas elect a leader; a replica starts as a standby.
    let leadership = match (&etcd_store, &kube_store) {
        (None, None) => crate::ha::Leadership::alone(),
        _ => crate::ha::Leadership::standby(),
    };
    let (mut model, listing, skipped) = {
        let store = store.clone();
        tokio::task::spawn_blocking(move || load_and_initialise(store.as_ref(), cluster.as_ref()))
            .await
            .map_err(|e| crate::state::StoreError::Unavailable(e.to_string()))??
    };
    tracing::info!(
        backend = store.name(),
        nodes = model.node_count(),
        pods = model.pod_count(),
        "state loaded"
    );
    if let Some(a) = &cfg.policy_audit {
        model
            .set_audit_config(a.clone())
            .map_err(|e| StartError::Config(format!("--config: {e}")))?;
    }
    let grpc_tls = grpc_tls_config(&cfg)?;
    let grpc_enforce = grpc_tls.is_some();
    // HTTP/2 pings find a dead peer (a node cut off without a reset) within seconds, so a
    // shim's egress watch ends and its grace starts (docs/operations.md).
    let builder = || {
        tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(1)))
            .http2_keepalive_timeout(Some(Duration::from_secs(2)))
    };
    let grpc_server = match grpc_tls {
        Some(t) => builder()
            .tls_config(t)
            .map_err(|e| StartError::GrpcTls(tls_error_chain(&e)))?,
        None => builder(),
    };
    // Bind every listener before starting anything, so a busy port fails cleanly.
    let grpc = bind("gRPC", "--grpc-listen", cfg.grpc_listen).await?;
    let tls = openflow_tls_config(&cfg)?;
    let mut session_cfg = ofproto::session::SessionConfig::default();
    session_cfg.fsm.echo_interval = cfg.echo_interval;
    session_cfg.fsm.echo_timeout = cfg.echo_timeout;
    session_cfg.fsm.max_ports = cfg.openflow_limits.max_ports;
    session_cfg.fsm.max_multipart_bytes = cfg.openflow_limits.max_multipart_bytes;
    let limits = ofproto::session::ListenerLimits {
        max_connections: cfg.openflow_limits.max_connections,
        max_per_peer: cfg.openflow_limits.max_per_peer,
    };
    let (of, of_events) =
        ofproto::session::Listener::bind_with_limits(cfg.openflow_listen, tls, session_cfg, limits)
            .await
            .map_err(|source| StartError::Listen {
                what: "OpenFlow",
                addr: cfg.openflow_listen,
                flag: "--openflow-listen",
                source,
            })?;
    let metrics_tls = match (&cfg.metrics_tls, cfg.metrics_listen) {
        (Some(t), Some(_)) => Some(http::tls_config(t)?),
        (None, Some(a)) if !a.ip().is_loopback() => {
            return Err(StartError::MetricsPlaintextNotLoopback(a))
        }
        _ => None,
    };
    let metrics_l = match cfg.metrics_listen {
        Some(a) => Some(bind("metrics", "--metrics-listen", a).await?),
        None => None,
    };
    let health_l = match cfg.health_listen {
        Some(a) => Some(bind("health", "--health-listen", a).await?),
        None => None,
    };
    let mut metrics = Metrics::default();
    metrics.kube = kube_store.as_ref().map(|k| k.counters());
    let metrics = Arc::new(metrics);
    let core = Core::spawn_watched(
        model,
        store,
        Some(listing),
        CoreConfig {
            audit_interval: cfg.audit_interval,
            shim_grace: cfg.shim_grace,
            leadership: leadership.clone(),
            egress_dns_names_per_namespace: cfg.egress_dns.limits.names_per_namespace,
            ..CoreConfig::default()
        },
        metrics.clone(),
    )?;
    if let Some((path, text)) = &cfg.config_file {
        tokio::spawn(crate::resources::audit::watch_config_file(
            core.clone(),
            path.clone(),
            text.clone(),
        ));
    }
    if !skipped.is_empty() {
        tracing::error!(
            records = skipped.len(),
            "stored records that do not fit the model were left out (each is logged above; the metric flowmesh_stored_records_refused counts them)"
        );
    }
    core.read(move |c| c.set_refused(skipped)).await?;
    let grpc_addr = grpc.local_addr().map_err(|source| StartError::Listen {
        what: "gRPC",
        addr: cfg.grpc_listen,
        flag: "--grpc-listen",
        source,
    })?;
    let openflow_addr = of.local_addr();
    let metrics_addr = metrics_l.as_ref().and_then(|l| l.local_addr().ok());
    let health_addr = health_l.as_ref().and_then(|l| l.local_addr().ok());
    let metrics_over_tls = metrics_tls.is_some();
    let core_for_of = core.clone();

    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut servers = vec![(
        "gRPC",
        tokio::spawn(serve_grpc(
            core.clone(),
            grpc,
            (grpc_server, grpc_enforce),
            NodeTrust {
                kube: kube_store.clone(),
                preregistered_only: cfg.nodes_preregistered,
            },
            stopped(stop_rx.clone()),
        )),
    )];
    if let Some(l) = metrics_l {
        servers.push((
            "metrics",
            tokio::spawn(http::serve_metrics(
                core.clone(),
                l,
                metrics_tls,
                stopped(stop_rx.clone()),
            )),
        ));
    }
    if let Some(l) = health_l {
        servers.push((
            "health",
            tokio::spawn(http::serve_health(
                core.clone(),
                l,
                stopped(stop_rx.clone()),
            )),
        ));
    }
    let replica_id = cfg.replica_id.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "controller".into());
        format!("{host}:{}", grpc_addr.port())
    });
    let me = crate::ha::ReplicaInfo {
        id: replica_id.clone(),
        grpc: grpc_addr.to_string(),
        openflow: openflow_addr.to_string(),
        started: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        ..Default::default()
    };
    if let Some(ks) = &kube_store {
        let lease = crate::ha::lease::LeaseConfig {
            namespace: ks.namespace().to_string(),
            name: "flowmesh-controller".into(),
            id: replica_id.clone(),
            duration: Duration::from_secs(cfg.leader_ttl_secs.max(1) as u64),
        };
        leadership.set_registry(Arc::new(crate::ha::lease::KubeRegistry {
            client: ks.client(),
            namespace: lease.namespace.clone(),
            lease: lease.name.clone(),
            id: replica_id.clone(),
        }));
        servers.push((
            "leader election",
            tokio::spawn(crate::ha::lease::run(
                ks.client(),
                lease,
                me.clone(),
                leadership.clone(),
                ks.fence(),
                {
                    let ks = ks.clone();
                    Box::new(move || ks.view_is_current())
                },
                stop_rx.clone(),
            )),
        ));
        servers.push((
            "kubernetes reactions",
            tokio::spawn(crate::api::kube_sync::run(
                core.clone(),
                ks.clone(),
                leadership.clone(),
                stop_rx.clone(),
            )),
        ));
    }
    if let Some(es) = &etcd_store {
        let id = replica_id.clone();
        leadership.set_registry(Arc::new(crate::ha::etcd::EtcdRegistry {
            client: Box::new(es.client()),
            prefix: crate::ha::etcd::ha_prefix(es.prefix()),
            id: id.clone(),
        }));
        servers.push((
            "leader election",
            tokio::spawn(crate::ha::etcd::run(
                es.client(),
                crate::ha::etcd::ha_prefix(es.prefix()),
                crate::ha::etcd::HaConfig {
                    id,
                    ttl_secs: cfg.leader_ttl_secs,
                },
                me,
                leadership.clone(),
                es.fence(),
                stop_rx.clone(),
            )),
        ));
    }
    tokio::spawn(crate::resources::egress_probe::run(
        core.clone(),
        cfg.egress_probe.clone(),
    ));
    tokio::spawn(crate::resources::egress_firewall::dns::run(
        core.clone(),
        cfg.egress_dns.clone(),
    ));
    let audit_rate = cfg.audit_rate;
    tokio::spawn(async move {
        // The listener accepts for as long as it lives.
        let _listener = of;
        crate::switches::forward_events(core_for_of, of_events, audit_rate).await;
    });
    tracing::info!(%grpc_addr, %openflow_addr, ?metrics_addr, metrics_tls = metrics_over_tls, ?health_addr, "flowmesh-controller running");
    Ok(Running {
        core,
        grpc_addr,
        openflow_addr,
        metrics_addr,
        metrics_tls: metrics_over_tls,
        health_addr,
        stop,
        servers,
    })
}

/// The OpenFlow listener's TLS: a switch must present a certificate of `--openflow-ca` that
/// names a node (`CN=system:node:NAME, O=system:nodes`), or its handshake is refused. None:
/// plaintext, refused on an address that is not loopback unless `--openflow-insecure`.
fn openflow_tls_config(
    cfg: &ServerConfig,
) -> Result<Option<Arc<rustls::ServerConfig>>, StartError> {
    let Some((cert, key, ca)) = &cfg.openflow_tls else {
        let addr = cfg.openflow_listen;
        if !addr.ip().is_loopback() {
            if !cfg.openflow_insecure {
                return Err(StartError::OpenFlowPlaintextNotLoopback(addr));
            }
            tracing::warn!(
                %addr,
                "OpenFlow in plaintext on a non-loopback address (--openflow-insecure): any host that reaches it can claim a node's datapath id and receive its flow table (use --openflow-tls-cert/--openflow-tls-key/--openflow-ca)"
            );
        }
        return Ok(None);
    };
    let pem = ofproto::session::TlsPem::from_files(cert, key, ca)?;
    let names_a_node: ofproto::session::ClientCheck = Arc::new(|der: &[u8]| {
        match crate::identity::switch_node_of(der) {
            Some(_) => Ok(()),
            None => {
                let who = crate::identity::identity_of(der)
                    .map(|i| i.to_string())
                    .unwrap_or_else(|e| e);
                Err(format!(
                    "the switch certificate names no node ({who}); a switch must present its node's certificate (CN=system:node:NAME, O=system:nodes)"
                ))
            }
        }
    });
    Ok(Some(ofproto::session::server_config_checked(
        &pem,
        Some(names_a_node),
    )?))
}

/// The gRPC listener's TLS, or None for plaintext on loopback (logged); plaintext elsewhere
/// is refused.
fn grpc_tls_config(
    cfg: &ServerConfig,
) -> Result<Option<tonic::transport::ServerTlsConfig>, StartError> {
    let Some(t) = &cfg.grpc_tls else {
        if !cfg.grpc_listen.ip().is_loopback() {
            return Err(StartError::PlaintextNotLoopback(cfg.grpc_listen));
        }
        tracing::warn!(
            addr = %cfg.grpc_listen,
            "gRPC in plaintext on loopback, without authentication: every local user has full admin and node API access (use --grpc-tls-cert/--grpc-tls-key/--grpc-client-ca for TLS with client certificates)"
        );
        return Ok(None);
    };
    let read = |what: &str, p: &PathBuf| {
        std::fs::read(p)
            .map_err(|e| StartError::GrpcTls(format!("reading {what} {}: {e}", p.display())))
    };
    let cert = read("certificate (--grpc-tls-cert)", &t.cert)?;
    let key = read("private key (--grpc-tls-key)", &t.key)?;
    let ca = read("client CA (--grpc-client-ca)", &t.client_ca)?;
    // tonic loads the PEM lazily; check it here so a bad file fails at start with its name.
    let pem_ok = |what: &str, p: &PathBuf, data: &[u8], tag: &str| {
        if String::from_utf8_lossy(data).contains(tag) {
            Ok(())
        } else {
            Err(StartError::GrpcTls(format!(
                "{what} {}: no PEM {tag} block",
                p.display()
            )))
        }
    };
    pem_ok("certificate", &t.cert, &cert, "-----BEGIN CERTIFICATE")?;
    pem_ok("private key", &t.key, &key, "PRIVATE KEY-----")?;
    pem_ok("client CA", &t.client_ca, &ca, "-----BEGIN CERTIFICATE")?;
    tracing::info!(addr = %cfg.grpc_listen, "gRPC over TLS; clients need a certificate signed by {}", t.client_ca.display());
    Ok(Some(
        tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(cert, key))
            .client_ca_root(tonic::transport::Certificate::from_pem(ca))
            .timeout(Duration::from_secs(10)),
    ))
}

fn tls_error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

async fn serve_grpc(
    core: CoreHandle,
    listener: tokio::net::TcpListener,
    (builder, enforce): (tonic::transport::Server, bool),
    trust: NodeTrust,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<proto::admin::admin_server::AdminServer<AdminService>>()
        .await;
    health_reporter
        .set_serving::<proto::node::node_api_server::NodeApiServer<NodeGuard>>()
        .await;
    // Both reflection versions (v1alpha is what many clients still speak), each listing every
    // served service: the APIs, health, and both reflection services.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .include_reflection_service(false)
            .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(
                tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
            )
    };
    let reflection_v1 = reflection().build_v1();
    let reflection_v1alpha = reflection().build_v1alpha();
    // Small request/response messages: without TCP_NODELAY, Nagle and delayed ACKs add ~40 ms.
    let incoming = {
        use tokio_stream::StreamExt;
        tokio_stream::wrappers::TcpListenerStream::new(listener).map(|s| {
            s.inspect(|s| {
                let _ = s.set_nodelay(true);
            })
        })
    };
    let mut builder = builder.layer(AuthzLayer { enforce });
    let router = builder
        .add_service(health_service)
        .add_service(proto::admin::admin_server::AdminServer::new(
            AdminService::new(core.clone()),
        ))
        .add_service(proto::node::node_api_server::NodeApiServer::new(
            NodeGuard::new(core, trust),
        ));
    let router = match (reflection_v1, reflection_v1alpha) {
        (Ok(v1), Ok(v1alpha)) => router.add_service(v1).add_service(v1alpha),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "gRPC reflection unavailable");
            router
        }
    };
    if let Err(e) = router.serve_with_incoming_shutdown(incoming, stop).await {
        tracing::error!(error = %e, "gRPC server stopped");
    }
}

/// The nodes whose switch keeps this replica from being ready. A switch is ready when it is
/// connected and either holds exactly the desired flows or has granted this replica the slave
/// role: a standby never writes, so its switches never become "in sync" through it, yet it is
/// ready to take over (warm model, role held). Found by the real cluster (issue 29): with the
/// standbys never Ready, the controller Deployment never became available.
pub fn switches_not_ready(statuses: &[Arc<SwitchStatus>]) -> Vec<String> {
    statuses
        .iter()
        .filter(|s| !s.unknown)
        .filter(|s| {
            let standby = s
                .role
                .lock()
                .map(|r| r.as_str() == "slave")
                .unwrap_or(false);
            !(s.connected.load(Ordering::Relaxed) && (s.synced.load(Ordering::Relaxed) || standby))
        })
        .map(|s| s.node.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(node: &str, connected: bool, synced: bool, role: &str) -> Arc<SwitchStatus> {
        let s = SwitchStatus {
            node: node.into(),
            ..Default::default()
        };
        s.connected.store(connected, Ordering::Relaxed);
        s.synced.store(synced, Ordering::Relaxed);
        *s.role.lock().expect("role lock") = role.into();
        Arc::new(s)
    }

    #[test]
    fn a_standby_holding_the_slave_role_is_ready() {
        let leader = [
            status("a", true, true, "master"),
            status("b", true, false, "master"),
        ];
        assert_eq!(switches_not_ready(&leader), vec!["b".to_string()]);
        let standby = [
            status("a", true, false, "slave"),
            status("b", true, false, "slave"),
        ];
        assert!(switches_not_ready(&standby).is_empty());
        // Not connected, or no role granted yet: not ready.
        let waiting = [
            status("a", false, false, "slave"),
            status("b", true, false, ""),
        ];
        assert_eq!(
            switches_not_ready(&waiting),
            vec!["a".to_string(), "b".to_string()]
        );
        // A single replica (no role requested) is ready once in sync.
        assert!(switches_not_ready(&[status("a", true, true, "")]).is_empty());
    }
}

//! flowmesh-controller: the centralized OpenFlow 1.3 controller, on its embedded state store
//! by default.

use clap::Parser;
use controller::server::{start, ServerConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// flowmesh-controller: computes every node's flow table and keeps every switch in sync.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Print the CustomResourceDefinitions of the network.openshift.io/v1 kinds flowmesh reads
    /// (what deploy/crds.yaml holds) and exit.
    #[arg(long)]
    print_crds: bool,
    /// YAML file with the cluster network config (clusterNetworks, serviceNetwork, mode,
    /// vxlanPort, mtu) and optionally policyAuditConfig (rateLimit, maxFileSize, maxLogFiles,
    /// destination, syslogFacility; re-read while running). Without it the stored config, or
    /// the embedded default, is used.
    #[arg(long, env = "FLOWMESH_CONFIG")]
    config: Option<PathBuf>,
    /// Directory of the embedded state database.
    #[arg(long, env = "FLOWMESH_DATA_DIR", default_value = "/var/lib/flowmesh")]
    data_dir: PathBuf,
    /// OpenFlow listen address for switch connections.
    #[arg(long, default_value = "0.0.0.0:6653")]
    openflow_listen: SocketAddr,
    /// gRPC listen address (admin and node APIs).
    #[arg(long, default_value = "127.0.0.1:9650")]
    grpc_listen: SocketAddr,
    /// Prometheus /metrics, /healthz and /readyz listen address.
    #[arg(long, default_value = "127.0.0.1:9651")]
    metrics_listen: Option<SocketAddr>,
    /// Seconds between audits that re-read every switch and repair drift.
    #[arg(long, default_value_t = 30.0)]
    audit_interval: f64,
    /// Seconds of switch idleness before an echo request (a dead switch is declared after
    /// twice this).
    #[arg(long, default_value_t = 2.0)]
    echo_interval: f64,
    /// Seconds a node's shim may stop watching its egress IPs (node API `WatchEgress`) before
    /// the node counts as offline for egress IPs, as if its switch were gone.
    #[arg(long, default_value_t = 5.0)]
    shim_grace: f64,
    /// PEM certificate of the controller for TLS switch connections (with --openflow-tls-key
    /// and --openflow-ca; switches then use `ssl:` targets and `ovs-vsctl set-ssl`).
    #[arg(long, requires_all = ["openflow_tls_key", "openflow_ca"])]
    openflow_tls_cert: Option<PathBuf>,
    /// PEM private key of the controller for TLS switch connections.
    #[arg(long, requires_all = ["openflow_tls_cert", "openflow_ca"])]
    openflow_tls_key: Option<PathBuf>,
    /// PEM CA certificate that signs the switches' certificates.
    #[arg(long, requires_all = ["openflow_tls_cert", "openflow_tls_key"])]
    openflow_ca: Option<PathBuf>,
    /// PEM certificate of the controller for the gRPC APIs (with --grpc-tls-key and
    /// --grpc-client-ca: TLS, and every client must present a certificate of that CA; see
    /// docs/security.md). Without TLS, --grpc-listen must be a loopback address.
    #[arg(long, requires_all = ["grpc_tls_key", "grpc_client_ca"])]
    grpc_tls_cert: Option<PathBuf>,
    /// PEM private key of --grpc-tls-cert.
    #[arg(long, requires_all = ["grpc_tls_cert", "grpc_client_ca"])]
    grpc_tls_key: Option<PathBuf>,
    /// PEM CA certificate that signs the node, admin and read-only client certificates.
    #[arg(long, requires_all = ["grpc_tls_cert", "grpc_tls_key"])]
    grpc_client_ca: Option<PathBuf>,
    /// Log filter (tracing EnvFilter syntax), e.g. `info` or `controller=debug`.
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    log: String,
    /// Log line format on stderr: `text` (coloured only when stderr is a terminal and NO_COLOR
    /// is unset) or `json` (one JSON object per line, for log collectors).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Same as `--log-format json`.
    #[arg(long, conflicts_with = "log_format")]
    log_json: bool,
    /// Seconds a graceful shutdown (SIGTERM, SIGINT) waits for calls in flight before closing
    /// them.
    #[arg(long, default_value_t = 5.0)]
    shutdown_grace: f64,
    /// Nameserver (IP or IP:PORT) that resolves the egress firewall's dnsName rules (default:
    /// the nameservers of /etc/resolv.conf).
    #[arg(long)]
    egress_dns_server: Option<String>,
    /// Seconds: a dnsName is never resolved more often than this, whatever its TTL.
    #[arg(long, default_value_t = 2.0)]
    egress_dns_ttl_floor: f64,
    /// Seconds: a dnsName is resolved at least this often, whatever its TTL.
    #[arg(long, default_value_t = 1800.0)]
    egress_dns_ttl_ceiling: f64,
    /// Where desired state lives: `embedded` (a database in --data-dir), `etcd` (an etcd v3
    /// cluster shared by several controller replicas; see --etcd-endpoints) or `kubernetes`
    /// (the API server's Node, Namespace, Pod, NetworkPolicy and OpenShift network objects;
    /// in-cluster config or --kubeconfig).
    #[arg(long, value_enum, default_value_t = Datastore::Embedded, env = "FLOWMESH_DATASTORE")]
    datastore: Datastore,
    /// etcd client URLs, comma-separated (with --datastore etcd).
    #[arg(long, env = "FLOWMESH_ETCD_ENDPOINTS")]
    etcd_endpoints: Option<String>,
    /// Key prefix of flowmesh's records in etcd.
    #[arg(long, default_value = "/flowmesh/")]
    etcd_prefix: String,
    /// PEM CA certificate of the etcd servers (https:// endpoints).
    #[arg(long)]
    etcd_ca: Option<PathBuf>,
    /// PEM client certificate for etcd (with --etcd-key).
    #[arg(long, requires = "etcd_key")]
    etcd_cert: Option<PathBuf>,
    /// PEM client key for etcd (with --etcd-cert).
    #[arg(long, requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    /// A kubeconfig file (with --datastore kubernetes; default: the in-cluster config, or
    /// $KUBECONFIG, or ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The namespace of the controller's own Kubernetes objects: its ConfigMaps and the
    /// leader-election Lease `flowmesh-controller` (with --datastore kubernetes).
    #[arg(long, env = "FLOWMESH_KUBE_NAMESPACE", default_value = "flowmesh")]
    kube_namespace: String,
    /// This replica's id among several sharing one etcd or Kubernetes API (default:
    /// HOSTNAME:GRPC_PORT).
    #[arg(long, env = "FLOWMESH_REPLICA_ID")]
    replica_id: Option<String>,
    /// Seconds: the leader's lease (etcd lease TTL, or the Kubernetes Lease's
    /// leaseDurationSeconds). A leader that dies is replaced within about this long. On etcd
    /// it must outlast the election that follows the loss of etcd's raft leader: at least
    /// 4 s with etcd's default --election-timeout (see --etcd-election-timeout).
    #[arg(long, default_value_t = 5)]
    leader_ttl: i64,
    /// Milliseconds: the --election-timeout the etcd members run with (etcd's default is
    /// 1000). It decides the smallest safe --leader-ttl; a smaller TTL is refused.
    #[arg(long, default_value_t = 1000)]
    etcd_election_timeout: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Datastore {
    Embedded,
    Etcd,
    Kubernetes,
}

/// The Kubernetes settings from the flags (None: another datastore).
fn kube_config(args: &Args) -> Result<Option<controller::state::kube::KubeConfig>, String> {
    match args.datastore {
        Datastore::Kubernetes => Ok(Some(controller::state::kube::KubeConfig {
            kubeconfig: args.kubeconfig.clone(),
            namespace: args.kube_namespace.clone(),
            ..Default::default()
        })),
        _ if args.kubeconfig.is_some() => Err("--kubeconfig needs --datastore kubernetes".into()),
        _ => Ok(None),
    }
}

/// The etcd settings from the flags (None: the embedded datastore).
fn etcd_config(args: &Args) -> Result<Option<controller::state::etcd::EtcdConfig>, String> {
    match args.datastore {
        Datastore::Embedded | Datastore::Kubernetes => {
            if args.etcd_endpoints.is_some() {
                return Err("--etcd-endpoints needs --datastore etcd".into());
            }
            Ok(None)
        }
        Datastore::Etcd => {
            let eps = args.etcd_endpoints.as_deref().ok_or(
                "--datastore etcd needs --etcd-endpoints URL,... (e.g. http://127.0.0.1:2379)",
            )?;
            let mut c = controller::state::etcd::EtcdConfig::new(eps).map_err(|e| e.to_string())?;
            c.prefix = args.etcd_prefix.clone();
            c.ca = args.etcd_ca.clone();
            c.cert = args.etcd_cert.clone();
            c.key = args.etcd_key.clone();
            Ok(Some(c))
        }
    }
}

/// `--leader-ttl`, refused when losing one etcd member could cost the leadership.
fn leader_ttl(args: &Args) -> Result<i64, String> {
    if args.leader_ttl < 1 {
        return Err(format!(
            "--leader-ttl {}: give whole seconds, at least 1",
            args.leader_ttl
        ));
    }
    if args.datastore == Datastore::Etcd {
        if args.etcd_election_timeout == 0 {
            return Err("--etcd-election-timeout 0: give etcd's --election-timeout in milliseconds (etcd's default: 1000)".into());
        }
        let e = std::time::Duration::from_millis(args.etcd_election_timeout);
        let min = controller::ha::etcd::min_safe_ttl_secs(e);
        if args.leader_ttl < min {
            return Err(format!(
                "--leader-ttl {}: too short for etcd members with an election timeout of {} ms; \
                 losing etcd's raft leader stops lease renewals for up to two election timeouts, \
                 which would cost this controller its leadership. Give at least {min} (or, if the \
                 members run with a shorter --election-timeout, say so with --etcd-election-timeout)",
                args.leader_ttl, args.etcd_election_timeout
            ));
        }
    }
    Ok(args.leader_ttl)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// The `--config` file: the cluster network, `policyAuditConfig` if it has one, and its text.
type ConfigFile = (
    topology::ClusterNetworkConfig,
    Option<topology::model::audit::AuditConfig>,
    String,
);

fn load_config(path: &PathBuf) -> Result<ConfigFile, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read --config {}: {e}", path.display()))?;
    let (cluster, audit) = controller::resources::audit::parse_config_file(&text)
        .map_err(|e| format!("--config {}: {e}", path.display()))?;
    Ok((cluster, audit, text))
}

fn seconds(flag: &str, v: f64) -> Result<Duration, String> {
    if v.is_finite() && v > 0.0 && v < 1e6 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(format!(
            "{flag} must be a positive number of seconds, not {v}"
        ))
    }
}

fn init_logging(args: &Args) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if args.log_json || args.log_format == LogFormat::Json {
        builder.json().init();
    } else {
        let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        builder.with_ansi(colour).init();
    }
}

/// The first of SIGTERM and SIGINT, by name.
async fn termination() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            return tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
            };
        }
    }
    let _ = tokio::signal::ctrl_c().await;
    "SIGINT"
}

/// The egress firewall resolver's settings from the flags.
fn flowmesh_controller_dns(
    args: &Args,
) -> Result<controller::resources::egress_firewall::dns::DnsConfig, String> {
    let server = match &args.egress_dns_server {
        None => None,
        Some(s) => Some(
            s.parse::<std::net::SocketAddr>()
                .or_else(|_| {
                    s.parse::<std::net::IpAddr>()
                        .map(|ip| std::net::SocketAddr::new(ip, 53))
                })
                .map_err(|_| {
                    format!("--egress-dns-server {s:?}: expected IP or IP:PORT, e.g. 10.0.0.2:53")
                })?,
        ),
    };
    Ok(controller::resources::egress_firewall::dns::DnsConfig {
        server,
        ttl_floor: seconds("--egress-dns-ttl-floor", args.egress_dns_ttl_floor)?,
        ttl_ceiling: seconds("--egress-dns-ttl-ceiling", args.egress_dns_ttl_ceiling)?,
        ..Default::default()
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.print_crds {
        return match kinds::openshift::crds_yaml() {
            Ok(y) => {
                print!("{y}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("flowmesh-controller: cannot write the CRDs: {e}");
                ExitCode::FAILURE
            }
        };
    }
    init_logging(&args);
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("flowmesh-controller: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = rt.block_on(run(args));
    // Whatever is still running (switch sessions, a store write in a blocking thread) gets a
    // moment; then the process exits.
    rt.shutdown_timeout(Duration::from_millis(500));
    code
}

async fn run(args: Args) -> ExitCode {
    let json_logs = args.log_json || args.log_format == LogFormat::Json;
    let cfg = (|| -> Result<ServerConfig, String> {
        let file = args.config.as_ref().map(load_config).transpose()?;
        Ok(ServerConfig {
            cluster: file.as_ref().map(|(c, _, _)| c.clone()),
            policy_audit: file.as_ref().and_then(|(_, a, _)| a.clone()),
            config_file: args
                .config
                .clone()
                .zip(file.as_ref().map(|(_, _, t)| t.clone())),
            data_dir: args.data_dir.clone(),
            openflow_listen: args.openflow_listen,
            grpc_listen: args.grpc_listen,
            metrics_listen: args.metrics_listen,
            audit_interval: seconds("--audit-interval", args.audit_interval)?,
            echo_interval: seconds("--echo-interval", args.echo_interval)?,
            shim_grace: seconds("--shim-grace", args.shim_grace)?,
            openflow_tls: match (
                &args.openflow_tls_cert,
                &args.openflow_tls_key,
                &args.openflow_ca,
            ) {
                (Some(c), Some(k), Some(a)) => Some((c.clone(), k.clone(), a.clone())),
                _ => None,
            },
            egress_dns: flowmesh_controller_dns(&args)?,
            etcd: etcd_config(&args)?,
            kube: kube_config(&args)?,
            replica_id: args.replica_id.clone(),
            leader_ttl_secs: leader_ttl(&args)?,
            grpc_tls: match (
                &args.grpc_tls_cert,
                &args.grpc_tls_key,
                &args.grpc_client_ca,
            ) {
                (Some(c), Some(k), Some(a)) => Some(controller::server::GrpcTls {
                    cert: c.clone(),
                    key: k.clone(),
                    client_ca: a.clone(),
                }),
                _ => None,
            },
        })
    })();
    let grace = match seconds("--shutdown-grace", args.shutdown_grace) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("flowmesh-controller: {e}");
            return ExitCode::from(2);
        }
    };
    let cfg = match cfg {
        Ok(c) => c,
        Err(e) => {
            eprintln!("flowmesh-controller: {e}");
            return ExitCode::from(2);
        }
    };
    match start(cfg).await {
        Ok(r) => {
            // In JSON mode every line is JSON: the log's "running" line carries the addresses.
            if !json_logs {
                eprintln!(
                    "flowmesh-controller: gRPC on {}, OpenFlow on {}{}",
                    r.grpc_addr,
                    r.openflow_addr,
                    r.metrics_addr
                        .map(|a| format!(", metrics on http://{a}/metrics"))
                        .unwrap_or_default()
                );
            }
            let signal = termination().await;
            tracing::info!(signal, "termination requested");
            // The shutdown logs what it waits for, what it gave up on and how long it took.
            r.shutdown(grace).await;
            ExitCode::SUCCESS
        }
        Err(e) => {
            if json_logs {
                tracing::error!(error = %e, "cannot start");
            } else {
                eprintln!("flowmesh-controller: {e}");
            }
            ExitCode::FAILURE
        }
    }
}

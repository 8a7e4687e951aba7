//! flowmesh-controller: the centralized OpenFlow 1.3 controller, on its embedded state store
//! by default.

use clap::Parser;
use controller::server::{start, ServerConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

// The global allocator: jemalloc (the default feature; its decay settings:
// JEMALLOC_SYS_WITH_MALLOC_CONF in .cargo/config.toml, _RJEM_MALLOC_CONF at run time), mimalloc
// (`--no-default-features --features mimalloc`; MIMALLOC_* at run time) or glibc's malloc
// (`--no-default-features`); docs/operations.md, "Memory and the allocator".
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// flowmesh-controller: computes every node's flow table and keeps every switch in sync.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Print the CustomResourceDefinitions of the network.openshift.io/v1 kinds flowmesh reads
    /// (what deploy/crds.yaml holds) and exit.
    #[arg(long)]
    print_crds: bool,
    /// Print the CustomResourceDefinitions of flowmesh's own flowmesh.io/v1 kinds
    /// (PodAttachment; what deploy/kubernetes/05-crds.yaml holds) and exit.
    #[arg(long)]
    print_flowmesh_crds: bool,
    /// YAML file with the cluster network config (clusterNetworks, serviceNetwork, mode,
    /// vxlanPort, mtu) and optionally policyAuditConfig (rateLimit, maxFileSize, maxLogFiles,
    /// destination, syslogFacility; re-read while running). Without it the stored config, or
    /// the embedded default, is used.
    #[arg(long, env = "FLOWMESH_CONFIG")]
    config: Option<PathBuf>,
    /// Directory of the embedded state database.
    #[arg(long, env = "FLOWMESH_DATA_DIR", default_value = "/var/lib/flowmesh")]
    data_dir: PathBuf,
    /// OpenFlow listen address for switch connections. Loopback by default; an address other
    /// hosts can reach needs OpenFlow TLS (--openflow-tls-cert, --openflow-tls-key,
    /// --openflow-ca) or --openflow-insecure.
    #[arg(long, default_value = "127.0.0.1:6653")]
    openflow_listen: SocketAddr,
    /// Serve plaintext OpenFlow on a non-loopback --openflow-listen: anyone who reaches the
    /// port can then claim a node's datapath id and receive its flow table. For labs on a
    /// network only the switches reach; use OpenFlow TLS otherwise.
    #[arg(long)]
    openflow_insecure: bool,
    /// OpenFlow connections held at once, in all (a connection over it is closed at once).
    #[arg(long, default_value_t = ofproto::session::listener::DEFAULT_MAX_CONNECTIONS)]
    openflow_max_connections: usize,
    /// OpenFlow connections held at once from one peer IP address.
    #[arg(long, default_value_t = ofproto::session::listener::DEFAULT_MAX_PER_PEER)]
    openflow_max_connections_per_peer: usize,
    /// Ports one switch may report (PORT_DESC plus PORT_STATUS adds); a switch reporting
    /// more is disconnected.
    #[arg(long, default_value_t = ofproto::session::fsm::DEFAULT_MAX_PORTS)]
    openflow_max_ports: usize,
    /// Bytes one multipart reply of a switch (e.g. its whole flow table) may take; a switch
    /// sending more is disconnected.
    #[arg(long, default_value_t = ofproto::session::fsm::DEFAULT_MAX_MULTIPART_BYTES)]
    openflow_max_multipart_bytes: usize,
    /// gRPC listen address (admin and node APIs).
    #[arg(long, default_value = "127.0.0.1:9650")]
    grpc_listen: SocketAddr,
    /// Prometheus /metrics, /healthz and /readyz listen address. Plaintext only on a loopback
    /// address; anywhere else it needs --metrics-tls-cert, --metrics-tls-key and
    /// --metrics-client-ca.
    #[arg(long, default_value = "127.0.0.1:9651")]
    metrics_listen: Option<SocketAddr>,
    /// PEM certificate of the controller for the metrics listener (with --metrics-tls-key and
    /// --metrics-client-ca): HTTPS with client certificates; only admin and read-only
    /// certificates read the metrics.
    #[arg(long, requires_all = ["metrics_tls_key", "metrics_client_ca"])]
    metrics_tls_cert: Option<PathBuf>,
    /// PEM private key of --metrics-tls-cert.
    #[arg(long, requires_all = ["metrics_tls_cert", "metrics_client_ca"])]
    metrics_tls_key: Option<PathBuf>,
    /// PEM CA certificate(s) that sign the metrics clients' certificates (e.g. Prometheus').
    #[arg(long, requires_all = ["metrics_tls_cert", "metrics_tls_key"])]
    metrics_client_ca: Option<PathBuf>,
    /// Plaintext listener of /healthz and /readyz only, for the kubelet's probes (e.g.
    /// 127.0.0.1:9652 with the probes' host: 127.0.0.1). Off unless given.
    #[arg(long)]
    health_listen: Option<SocketAddr>,
    /// Seconds between audits that re-read a switch whole and repair drift (changes made
    /// behind the controller's back, which the digest marker cannot see).
    #[arg(long, default_value_t = 300.0)]
    audit_interval: f64,
    /// Whole-table audits started per second across all switches: the audits' bound (at
    /// 1,000 switches and 2 per second, every switch is audited within 500 s).
    #[arg(long, default_value_t = controller::switches::DEFAULT_AUDIT_RATE)]
    audit_rate: f64,
    /// Seconds of switch idleness before an echo request.
    #[arg(long, default_value_t = 5.0)]
    echo_interval: f64,
    /// Seconds an echo request may go unanswered before the switch is dropped: a floor that
    /// adapts to the switch (4 times its slowest recent answer), and no echo timeout applies
    /// while the switch works on a bundle or read the controller sent (up to 180 s of
    /// silence). Egress-IP failover does not wait for it (--egress-probe-timeout).
    #[arg(long, default_value_t = 15.0)]
    echo_timeout: f64,
    /// Seconds between ICMP echo probes of every egress node's underlay address, egress-IP
    /// failover's liveness signal; 0 turns the probe off.
    #[arg(long, default_value_t = 0.1)]
    egress_probe_interval: f64,
    /// Seconds without an answer after which an egress node that answered before is offline
    /// for egress IPs (its automatic IPs move, its manual ones drop out).
    #[arg(long, default_value_t = 0.5)]
    egress_probe_timeout: f64,
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
    /// The most distinct dnsNames one project's EgressNetworkPolicy may use (a policy with
    /// more is refused, naming the first rule over the limit).
    #[arg(long, default_value_t = topology::model::DEFAULT_MAX_DNS_NAMES_PER_NAMESPACE)]
    egress_dns_names_per_namespace: usize,
    /// Seconds: after a burst of 3, a dnsName's changed addresses are stored (and pushed to
    /// the switches) at most once per this interval; only the latest answer is kept.
    #[arg(long, default_value_t = 10.0)]
    egress_dns_write_interval: f64,
    /// Changed dnsName addresses stored per second, all names together.
    #[arg(long, default_value_t = controller::resources::egress_firewall::schedule::DEFAULT_WRITES_PER_SECOND)]
    egress_dns_writes_per_second: u32,
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
    /// With --datastore kubernetes, for upgrading from a version that kept pod attachments in
    /// the Pod annotation flowmesh.io/attachment: take a pod's attachment from it when the pod
    /// has no PodAttachment, the annotation's node is the Pod's spec.nodeName and its IP the
    /// Pod's status.podIP; the leader writes the PodAttachment and removes the annotation.
    /// Without it the annotation is ignored and reported (docs/operations.md, "Upgrading").
    #[arg(long)]
    import_attachment_annotations: bool,
    /// With the embedded or etcd datastore: a node certificate registers only a node an admin
    /// added first (`flowmeshctl node add NAME --ip IP --dpid DPID`). Without it a node's first
    /// registration pins its IP and datapath id (docs/security.md).
    #[arg(long)]
    nodes_preregistered: bool,
    /// This replica's id among several sharing one etcd or Kubernetes API (default:
    /// HOSTNAME:GRPC_PORT).
    #[arg(long, env = "FLOWMESH_REPLICA_ID")]
    replica_id: Option<String>,
    /// Seconds: the leader's lease (etcd lease TTL, or the Kubernetes Lease's
    /// leaseDurationSeconds). A leader that dies is replaced within about this long. On etcd
    /// it must outlast the election that follows the loss of etcd's raft leader: at least
    /// 5 s with etcd's default --election-timeout (see --etcd-election-timeout).
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
            import_attachment_annotations: args.import_attachment_annotations,
            ..Default::default()
        })),
        _ if args.kubeconfig.is_some() => Err("--kubeconfig needs --datastore kubernetes".into()),
        _ if args.import_attachment_annotations => {
            Err("--import-attachment-annotations needs --datastore kubernetes".into())
        }
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

/// The OpenFlow listener's limits from the flags (each at least 1).
fn openflow_limits(args: &Args) -> Result<controller::server::OpenFlowLimits, String> {
    for (flag, v) in [
        ("--openflow-max-connections", args.openflow_max_connections),
        (
            "--openflow-max-connections-per-peer",
            args.openflow_max_connections_per_peer,
        ),
        ("--openflow-max-ports", args.openflow_max_ports),
        (
            "--openflow-max-multipart-bytes",
            args.openflow_max_multipart_bytes,
        ),
    ] {
        if v == 0 {
            return Err(format!("{flag} 0: give at least 1"));
        }
    }
    Ok(controller::server::OpenFlowLimits {
        max_connections: args.openflow_max_connections,
        max_per_peer: args.openflow_max_connections_per_peer,
        max_ports: args.openflow_max_ports,
        max_multipart_bytes: args.openflow_max_multipart_bytes,
    })
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

/// SIGTERM and SIGINT, caught from the moment [`Termination::catch`] returns. Until a
/// handler is installed a signal takes its default action and kills the process without its
/// shutdown; a handler installed only once the server runs left a window in which a SIGTERM
/// sent on the "running" line (as a supervisor may) did exactly that.
struct Termination {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Termination {
    fn catch() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// The first of SIGTERM and SIGINT, by name (one that came before this call counts).
    async fn wait(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
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
    if args.egress_dns_names_per_namespace == 0 {
        return Err("--egress-dns-names-per-namespace 0: give at least 1".into());
    }
    if args.egress_dns_writes_per_second == 0 {
        return Err("--egress-dns-writes-per-second 0: give at least 1".into());
    }
    Ok(controller::resources::egress_firewall::dns::DnsConfig {
        server,
        ttl_floor: seconds("--egress-dns-ttl-floor", args.egress_dns_ttl_floor)?,
        ttl_ceiling: seconds("--egress-dns-ttl-ceiling", args.egress_dns_ttl_ceiling)?,
        limits: controller::resources::egress_firewall::schedule::Limits {
            names_per_namespace: args.egress_dns_names_per_namespace,
            write_interval: seconds(
                "--egress-dns-write-interval",
                args.egress_dns_write_interval,
            )?,
            writes_per_second: args.egress_dns_writes_per_second,
            ..Default::default()
        },
        ..Default::default()
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.print_crds || args.print_flowmesh_crds {
        let yaml = if args.print_crds {
            kinds::openshift::crds_yaml()
        } else {
            kinds::flowmesh::crds_yaml()
        };
        return match yaml {
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
            openflow_insecure: args.openflow_insecure,
            openflow_limits: openflow_limits(&args)?,
            grpc_listen: args.grpc_listen,
            metrics_listen: args.metrics_listen,
            metrics_tls: match (
                &args.metrics_tls_cert,
                &args.metrics_tls_key,
                &args.metrics_client_ca,
            ) {
                (Some(c), Some(k), Some(a)) => Some(controller::server::MetricsTls {
                    cert: c.clone(),
                    key: k.clone(),
                    client_ca: a.clone(),
                }),
                _ => None,
            },
            health_listen: args.health_listen,
            audit_interval: seconds("--audit-interval", args.audit_interval)?,
            audit_rate: if args.audit_rate.is_finite() && args.audit_rate >= 0.001 {
                args.audit_rate
            } else {
                return Err(format!(
                    "--audit-rate must be at least 0.001 audits per second, not {}",
                    args.audit_rate
                ));
            },
            echo_interval: seconds("--echo-interval", args.echo_interval)?,
            echo_timeout: seconds("--echo-timeout", args.echo_timeout)?,
            egress_probe: controller::resources::egress_probe::ProbeConfig {
                interval: if args.egress_probe_interval == 0.0 {
                    std::time::Duration::ZERO
                } else {
                    seconds("--egress-probe-interval", args.egress_probe_interval)?
                },
                timeout: seconds("--egress-probe-timeout", args.egress_probe_timeout)?,
            },
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
            nodes_preregistered: match args.datastore {
                Datastore::Kubernetes if args.nodes_preregistered => {
                    return Err("--nodes-preregistered is for the embedded and etcd datastores: with --datastore kubernetes a node registers only as the Node the API server has".into())
                }
                _ => args.nodes_preregistered,
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
    let mut signals = match Termination::catch() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("flowmesh-controller: cannot catch SIGTERM and SIGINT: {e}");
            return ExitCode::FAILURE;
        }
    };
    // A start can wait on its datastore (loading the state, an API server that does not
    // answer): a termination then ends it rather than waiting for it. Nothing is spawned
    // before the start's last wait, so ending it there leaves nothing half-started.
    let started = tokio::select! {
        r = start(cfg) => r,
        signal = signals.wait() => {
            tracing::info!(signal, "termination requested while starting: exiting before serving");
            return ExitCode::SUCCESS;
        }
    };
    match started {
        Ok(r) => {
            // In JSON mode every line is JSON: the log's "running" line carries the addresses.
            if !json_logs {
                let scheme = if r.metrics_tls { "https" } else { "http" };
                eprintln!(
                    "flowmesh-controller: gRPC on {}, OpenFlow on {}{}{}",
                    r.grpc_addr,
                    r.openflow_addr,
                    r.metrics_addr
                        .map(|a| format!(", metrics on {scheme}://{a}/metrics"))
                        .unwrap_or_default(),
                    r.health_addr
                        .map(|a| format!(", health on http://{a}/healthz"))
                        .unwrap_or_default()
                );
            }
            let signal = signals.wait().await;
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

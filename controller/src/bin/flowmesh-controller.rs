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
    /// YAML file with the cluster network config (clusterNetworks, serviceNetwork, mode,
    /// vxlanPort, mtu). Without it the stored config, or the embedded default, is used.
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
    /// Log filter (tracing EnvFilter syntax), e.g. `info` or `controller=debug`.
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    log: String,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
}

fn load_config(path: &PathBuf) -> Result<topology::ClusterNetworkConfig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read --config {}: {e}", path.display()))?;
    let cfg: topology::ClusterNetworkConfig =
        serde_yaml::from_str(&text).map_err(|e| format!("--config {}: {e}", path.display()))?;
    cfg.validate()
        .map_err(|e| format!("--config {}: {e}", path.display()))?;
    Ok(cfg)
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

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if args.log_json {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .json()
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let cfg = (|| -> Result<ServerConfig, String> {
        Ok(ServerConfig {
            cluster: args.config.as_ref().map(load_config).transpose()?,
            data_dir: args.data_dir.clone(),
            openflow_listen: args.openflow_listen,
            grpc_listen: args.grpc_listen,
            metrics_listen: args.metrics_listen,
            audit_interval: seconds("--audit-interval", args.audit_interval)?,
            echo_interval: seconds("--echo-interval", args.echo_interval)?,
            openflow_tls: match (
                &args.openflow_tls_cert,
                &args.openflow_tls_key,
                &args.openflow_ca,
            ) {
                (Some(c), Some(k), Some(a)) => Some((c.clone(), k.clone(), a.clone())),
                _ => None,
            },
        })
    })();
    let cfg = match cfg {
        Ok(c) => c,
        Err(e) => {
            eprintln!("flowmesh-controller: {e}");
            return ExitCode::from(2);
        }
    };
    match start(cfg).await {
        Ok(r) => {
            eprintln!(
                "flowmesh-controller: gRPC on {}, OpenFlow on {}{}",
                r.grpc_addr,
                r.openflow_addr,
                r.metrics_addr
                    .map(|a| format!(", metrics on http://{a}/metrics"))
                    .unwrap_or_default()
            );
            let _ = tokio::signal::ctrl_c().await;
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("flowmesh-controller: {e}");
            ExitCode::FAILURE
        }
    }
}

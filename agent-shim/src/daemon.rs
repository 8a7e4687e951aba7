//! `flowmesh-shim`'s main loop: register the node, set it up, serve the CNI socket until
//! SIGTERM/SIGINT.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use proto::node::RegisterNodeRequest;
use tracing::{info, warn};

use crate::netlink::{Netlink, NetlinkError};
use crate::node::{ensure_node, BridgeSpec, NodeSettings, SetupError};
use crate::nodeapi::{NodeApi, NodeApiError};
use crate::ovs::Vsctl;
use crate::pod::{PodManager, RestoreOutcome};
use crate::protocol::DEFAULT_SOCKET;
use crate::server::{self, SocketError};

/// Command line of `flowmesh-shim`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "flowmesh-shim",
    about = "flowmesh node daemon: br0, tun0, host NAT and the CNI socket"
)]
pub struct Args {
    /// Node name, as registered with the controller.
    #[arg(long)]
    pub node_name: String,
    /// The node's underlay IPv4 address (VXLAN endpoint).
    #[arg(long)]
    pub node_ip: Ipv4Addr,
    /// The controller's node API (gRPC), e.g. http://172.31.0.254:6640; with several
    /// controller replicas, their URLs comma-separated (calls go to any live one).
    #[arg(long)]
    pub controller: String,
    /// OpenFlow controller target set on the bridge, e.g. tcp:172.31.0.254:6653; with several
    /// replicas, their targets comma-separated (the bridge connects to each). An ssl:
    /// target makes the switch use --cert/--key/--ca too (`ovs-vsctl set-ssl`).
    #[arg(long)]
    pub openflow_target: Option<String>,
    /// Longest wait between the switch's reconnection attempts to each OpenFlow target, in
    /// milliseconds (`Controller.max_backoff`; Open vSwitch's own default is 8000, so a
    /// switch that lost its controllers for a while, e.g. a node whose link was down, stayed
    /// up to 8 s without flows updates after they were back). At least 1000 (the schema's
    /// minimum).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1000..))]
    pub openflow_max_backoff_ms: u32,
    /// PEM CA certificate that signed the controller's certificate. With --cert and --key:
    /// the node API over TLS (https:// --controller) with this node's certificate
    /// (CN=system:node:NAME, O=system:nodes; see docs/security.md).
    #[arg(long, requires_all = ["cert", "key"])]
    pub ca: Option<PathBuf>,
    /// PEM certificate of this node.
    #[arg(long, requires_all = ["ca", "key"])]
    pub cert: Option<PathBuf>,
    /// PEM private key of --cert.
    #[arg(long, requires_all = ["ca", "cert"])]
    pub key: Option<PathBuf>,
    /// Datapath id of the bridge, hexadecimal (1 to 16 digits, optional 0x). Default: the
    /// node IP as a number (10.0.0.1 → 000000000a000001), unique as node addresses are, and
    /// what the controller's Kubernetes datastore gives a node before its shim registers.
    #[arg(long, value_parser = parse_dpid)]
    pub dpid: Option<u64>,
    /// Integration bridge.
    #[arg(long, default_value = "br0")]
    pub bridge: String,
    /// Bridge datapath_type to set (e.g. netdev for the userspace datapath).
    #[arg(long)]
    pub datapath_type: Option<String>,
    /// Path of the CNI socket (its directory becomes mode 0700, owned by root).
    #[arg(long, default_value = DEFAULT_SOCKET)]
    pub cni_socket: PathBuf,
    /// Deadline of each node API call, in seconds (AttachPod waits for the flows).
    #[arg(long, default_value_t = 30)]
    pub node_api_timeout: u64,
    /// Milliseconds between egress-IP reconciles (re-adding an address removed behind the
    /// shim's back, repairing the egress nftables table); lists from the controller apply at
    /// once.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(50..))]
    pub egress_reconcile_interval_ms: u64,
    /// Seconds between re-checks of the node set-up (br0's settings, vxlan0, tun0 with its
    /// address and routes, forwarding, the host nftables table): whatever was changed or
    /// deleted behind the shim's back is put back (0: only at start).
    #[arg(long, default_value_t = 10)]
    pub node_reconcile_interval: u64,
    /// NetworkManager's configuration directory: when it exists, the shim writes
    /// `flowmesh.conf` there so br0, vxlan0, tun0 and pod veths stay unmanaged.
    #[arg(long, default_value = "/etc/NetworkManager/conf.d")]
    pub networkmanager_conf_dir: PathBuf,
    /// Remove what the shim set up on this node (br0 and its ports, the nftables tables, the
    /// NetworkManager file), print what was removed as JSON, and exit. Needs no controller.
    #[arg(long)]
    pub uninstall: bool,
    /// Register and set the node up, print the changes made as JSON, and exit.
    #[arg(long)]
    pub setup_only: bool,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Open vSwitch's run directory, where br0's OpenFlow management socket (`BRIDGE.mgmt`)
    /// is: the audit logger's connection to the bridge.
    #[arg(long, env = "OVS_RUNDIR", default_value = "/var/run/openvswitch")]
    pub ovs_rundir: PathBuf,
    /// The network policy audit log (rotated at policyAuditConfig.maxFileSize).
    #[arg(long, default_value = crate::audit::DEFAULT_LOG_FILE)]
    pub audit_log_file: PathBuf,
    /// The syslog socket of the audit destination `libc`.
    #[arg(long, default_value = "/dev/log")]
    pub syslog_socket: PathBuf,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Parses a hexadecimal datapath id.
pub fn parse_dpid(s: &str) -> Result<u64, String> {
    let hex = s.strip_prefix("0x").unwrap_or(s);
    if hex.is_empty() || hex.len() > 16 {
        return Err(format!("{s:?}: a datapath id has 1 to 16 hex digits"));
    }
    u64::from_str_radix(hex, 16).map_err(|e| format!("{s:?}: {e}"))
}

/// Why the shim stopped.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Bad --controller URL.
    #[error("bad --controller URL {0}")]
    Url(String),
    /// Unusable --ca/--cert/--key.
    #[error("TLS: {0}")]
    Tls(String),
    /// OVS refused the switch's SSL settings.
    #[error("ovs-vsctl set-ssl: {0}")]
    SwitchSsl(String),
    /// RegisterNode was refused.
    #[error(transparent)]
    Register(#[from] NodeApiError),
    /// Node setup failed.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// Netlink could not be opened.
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    /// The CNI socket could not be served.
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// Signal handling could not be installed.
    #[error("signal handler: {0}")]
    Signal(std::io::Error),
}

/// Registers until the controller answers (retrying while it is unreachable).
async fn register(api: &NodeApi, args: &Args) -> Result<proto::node::NodeConfig, NodeApiError> {
    let mut delay = Duration::from_millis(200);
    loop {
        let req = RegisterNodeRequest {
            name: args.node_name.clone(),
            node_ip: args.node_ip.to_string(),
            dpid: args.dpid.unwrap_or(u64::from(u32::from(args.node_ip))),
        };
        match api.register(req).await {
            Ok(c) => return Ok(c),
            Err(e) if e.is_transient() => {
                warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "controller not reachable yet");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
}

/// The first of SIGTERM and SIGINT (one caught before this call counts).
async fn terminated(term: &mut tokio::signal::unix::Signal, int: &mut tokio::signal::unix::Signal) {
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Runs the shim.
pub async fn run(args: Args) -> Result<(), DaemonError> {
    if args.uninstall {
        let removed = crate::node::uninstall(
            &Vsctl::default(),
            &Netlink::connect()?,
            &args.bridge,
            Some(&args.networkmanager_conf_dir),
        )
        .await?;
        for r in &removed {
            info!(removed = %r, "uninstall");
        }
        println!("{}", serde_json::json!({ "removed": removed }));
        return Ok(());
    }
    // Caught from here on: a SIGTERM while the shim registers (which waits for the controller)
    // or sets up the node must reach an orderly exit, not the default action. One during the
    // node's set-up is served once the set-up is whole.
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Signal)?;
    let tls = match (&args.ca, &args.cert, &args.key) {
        (Some(ca), Some(cert), Some(key)) => {
            Some(crate::nodeapi::client_tls(ca, cert, key).map_err(DaemonError::Tls)?)
        }
        _ => None,
    };
    let urls: Vec<&str> = args.controller.split(',').map(str::trim).collect();
    if tls.is_some() && !urls.iter().all(|u| u.starts_with("https://")) {
        return Err(DaemonError::Url(format!(
            "{}: with --ca/--cert/--key the controller URL must be https://",
            args.controller
        )));
    }
    if tls.is_none() && urls.iter().any(|u| u.starts_with("https://")) {
        return Err(DaemonError::Tls(
            "an https:// controller needs --ca, --cert and --key (this node's certificate)".into(),
        ));
    }
    let api = NodeApi::new(
        &args.controller,
        Duration::from_secs(args.node_api_timeout),
        tls,
    )
    .map_err(|e| DaemonError::Url(format!("{}: {e}", args.controller)))?;
    let config = tokio::select! {
        c = register(&api, &args) => c?,
        _ = terminated(&mut term, &mut int) => {
            info!("termination requested while registering: exiting");
            return Ok(());
        }
    };
    let settings = NodeSettings::try_from(&config)?;
    info!(node = %settings.node, subnet = %settings.subnet, gateway = %settings.gateway, mtu = settings.mtu, "registered");
    let vsctl = Vsctl::default();
    if let Some(target) = args
        .openflow_target
        .as_deref()
        .filter(|t| t.split(',').any(|t| t.trim().starts_with("ssl:")))
    {
        let (Some(ca), Some(cert), Some(key)) = (&args.ca, &args.cert, &args.key) else {
            return Err(DaemonError::Tls(format!(
                "--openflow-target {target} needs --ca, --cert and --key (the switch presents this node's certificate)"
            )));
        };
        let paths = [key, cert, ca].map(|p| p.display().to_string());
        vsctl
            .run(&["set-ssl", &paths[0], &paths[1], &paths[2]])
            .await
            .map_err(|e| DaemonError::SwitchSsl(e.to_string()))?;
        info!(cert = %paths[1], "switch SSL set: br0 presents this node's certificate to the controller");
    }
    let nl = Netlink::connect()?;
    let spec = BridgeSpec {
        bridge: args.bridge.clone(),
        datapath_type: args.datapath_type.clone(),
        dpid: args.dpid.unwrap_or(u64::from(u32::from(args.node_ip))),
        controller: args.openflow_target.clone(),
        max_backoff_ms: args.openflow_max_backoff_ms,
        node_ip: args.node_ip,
        nm_conf_dir: Some(args.networkmanager_conf_dir.clone()),
    };
    let changes = ensure_node(&vsctl, &nl, &spec, &settings).await?;
    info!(changes = changes.len(), "node set up");
    for c in &changes {
        info!(change = %c, "setup");
    }
    if args.setup_only {
        println!("{}", serde_json::json!({ "changes": changes }));
        return Ok(());
    }
    let reconnected = Arc::new(tokio::sync::Notify::new());
    tokio::spawn(crate::egress::run(
        api.clone(),
        settings.node.clone(),
        crate::egress::HostEgress::new(nl.clone(), args.node_ip),
        Duration::from_millis(args.egress_reconcile_interval_ms),
        reconnected.clone(),
    ));
    // Re-register whenever the controller answers again after its stream broke (a restart,
    // a new leader): RegisterNode is idempotent, and a controller that lost the node (a
    // fresh datastore) learns it again at once.
    {
        let (api, args, subnet) = (api.clone(), args.clone(), settings.subnet);
        tokio::spawn(async move {
            loop {
                reconnected.notified().await;
                match register(&api, &args).await {
                    Ok(c) => {
                        info!(node = %args.node_name, "re-registered with the controller");
                        if NodeSettings::try_from(&c).is_ok_and(|s| s.subnet != subnet) {
                            warn!(node = %args.node_name, "the controller now gives this node another subnet: restart the shim (its pods keep the old addresses)");
                        }
                    }
                    Err(e) => warn!(error = %e, "re-registering with the controller failed"),
                }
            }
        });
    }
    tokio::spawn(crate::audit::run(
        api.clone(),
        crate::audit::AuditOptions {
            node: settings.node.clone(),
            mgmt_socket: args.ovs_rundir.join(format!("{}.mgmt", args.bridge)),
            log_file: args.audit_log_file.clone(),
            syslog_socket: args.syslog_socket.clone(),
            hostname: args.node_name.clone(),
        },
    ));
    let pods = Arc::new(PodManager::new(
        vsctl.clone(),
        nl.clone(),
        api,
        args.bridge.clone(),
        settings.clone(),
    ));
    let reclaimed = pods.reclaim_orphans().await;
    if !reclaimed.is_empty() {
        info!(ports = %reclaimed.join(","), "removed the ports of pods deleted while the shim was down");
    }
    if args.node_reconcile_interval > 0 {
        let (vsctl, nl, spec, settings, pods) = (
            vsctl.clone(),
            nl.clone(),
            spec.clone(),
            settings.clone(),
            pods.clone(),
        );
        let every = Duration::from_secs(args.node_reconcile_interval);
        // A bridge or port deleted behind the shim's back is repaired at once, not at the next
        // tick (a deleted br0 takes every pod of the node off the network).
        let deleted = Arc::new(tokio::sync::Notify::new());
        for table in crate::ovs::WATCHED_TABLES {
            tokio::spawn(crate::ovs::watch_deletions(table, deleted.clone()));
        }
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = deleted.notified() => {}
                }
                match ensure_node(&vsctl, &nl, &spec, &settings).await {
                    Ok(changes) => {
                        for c in changes {
                            warn!(change = %c, "node set-up repaired (changed behind the shim's back)");
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "node set-up check failed; retrying");
                        continue;
                    }
                }
                match pods.restore_ports().await {
                    Ok(done) => {
                        for d in done {
                            match d {
                                RestoreOutcome::Done(d) => {
                                    warn!(port = %d, "pod port repaired (vanished from the bridge behind the shim's back)")
                                }
                                RestoreOutcome::Failed(e) => {
                                    warn!(error = %e, "pod port repair failed; retrying at the next check")
                                }
                            }
                        }
                    }
                    Err(e) => {
                        warn!(error = %e.msg, details = %e.details, "pod port check failed; retrying")
                    }
                }
            }
        });
    }
    // The socket appears once the node is clean: a CNI call never meets a half-done start.
    let listener = server::bind(&args.cni_socket)?;
    info!(socket = %args.cni_socket.display(), "serving CNI requests");
    let shutdown = async move {
        terminated(&mut term, &mut int).await;
        info!("shutting down");
    };
    server::serve(listener, args.cni_socket.clone(), pods, shutdown).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpids_are_hex() {
        assert_eq!(parse_dpid("0000000000000001"), Ok(1));
        assert_eq!(parse_dpid("0xff"), Ok(255));
        assert!(parse_dpid("").is_err());
        assert!(parse_dpid("00000000000000001").is_err());
        assert!(parse_dpid("xyz").is_err());
    }
}

//! `flowmeshctl`: the command-line client of the controller's admin API, with `oc` habits.
//!
//! `mod.rs` holds the clap types and the dispatch; `commands` runs them against the API,
//! `output` renders tables/JSON/YAML, `errors` turns statuses into actionable messages.

pub mod args;
pub mod certs;
pub mod certs_command;
pub mod client;
mod commands;
pub mod config;
pub mod egress;
pub mod errors;
pub mod output;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use args::{PodName, TraceDestination};
use errors::CliError;
use output::OutputFormat;

/// Operate a flowmesh-controller: nodes, namespaces, pods, isolation, flows and traces.
#[derive(Debug, Parser)]
#[command(name = "flowmeshctl", version, propagate_version = true)]
pub struct Cli {
    /// Admin API address of flowmesh-controller (default: the config file's, else
    /// http://127.0.0.1:9650). https:// (implied by --ca/--cert/--key) uses TLS.
    #[arg(long, global = true, env = "FLOWMESH_SERVER", value_parser = args::server_url)]
    pub server: Option<String>,
    /// PEM CA certificate that signed the controller's certificate (TLS).
    #[arg(long, global = true, env = "FLOWMESH_CA")]
    pub ca: Option<PathBuf>,
    /// PEM client certificate (O=flowmesh:admin or O=flowmesh:read-only; see
    /// docs/security.md).
    #[arg(long, global = true, env = "FLOWMESH_CERT")]
    pub cert: Option<PathBuf>,
    /// PEM private key of --cert.
    #[arg(long, global = true, env = "FLOWMESH_KEY")]
    pub key: Option<PathBuf>,
    /// kubeconfig-style config file with servers and credentials (default:
    /// ~/.flowmesh/config when it exists; see docs/cli.md).
    #[arg(long, global = true, env = "FLOWMESHCONFIG")]
    pub flowmeshconfig: Option<PathBuf>,
    /// Context of the config file to use (default: its current-context).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Deadline of each call, e.g. 500ms, 10s, 2m.
    #[arg(long, global = true, default_value = "30s", value_parser = args::duration)]
    pub timeout: Duration,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `flowmeshctl` subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Add or delete nodes (each gets a HostSubnet).
    #[command(subcommand)]
    Node(NodeCommand),
    /// Create or delete namespaces (each gets a NetNamespace and NETID).
    #[command(subcommand, visible_alias = "ns")]
    Namespace(NamespaceCommand),
    /// Attach or detach pods (what the node shim does on CNI ADD/DEL).
    #[command(subcommand)]
    Pod(PodCommand),
    /// List objects: hostsubnets, netnamespaces, pods, networkpolicies, switches,
    /// clusternetwork, events.
    Get(GetArgs),
    /// Administrative commands (`adm pod-network ...`).
    #[command(subcommand)]
    Adm(AdmCommand),
    /// Apply a multi-document YAML manifest in one transaction.
    Apply(ApplyArgs),
    /// Print a node's flows in ovs-ofctl dump-flows syntax (desired by default).
    DumpFlows(DumpFlowsArgs),
    /// Simulate a packet through every switch on its path and print the verdict.
    Trace(TraceArgs),
    /// Print controller events (with --watch, follow them).
    Events(EventsArgs),
    /// Add, change or remove labels of a pod or a namespace, as `kubectl label` does:
    /// KEY=VALUE sets, KEY- removes; changing a value needs --overwrite.
    #[command(subcommand)]
    Label(LabelCommand),
    /// Add, change or remove annotations of a NetNamespace, as `kubectl annotate` does:
    /// KEY=VALUE sets, KEY- removes; changing a value needs --overwrite. flowmesh keeps
    /// netnamespace.network.openshift.io/multicast-enabled (true or false).
    #[command(subcommand)]
    Annotate(AnnotateCommand),
    /// Delete an object by kind and name (`delete networkpolicy NS/NAME`).
    Delete(DeleteArgs),
    /// Change egress IPs the way `oc patch` does (`patch netnamespace NAME --egress-ips=...`,
    /// `patch hostsubnet NODE --egress-cidrs=...|--egress-ips=...`).
    #[command(subcommand)]
    Patch(egress::PatchCommand),
    /// Make lab certificates: a self-signed CA, and controller, node, admin and read-only
    /// certificates signed by it (docs/security.md).
    #[command(subcommand)]
    Certs(certs_command::CertsCommand),
    /// Decode OpenFlow messages given as hex (one message or a stream) and print them as
    /// `ovs-ofctl ofp-print` does. Needs no controller.
    OfpPrint {
        /// Hex bytes; several arguments are joined, whitespace, ':' and '0x' are ignored.
        /// With no argument, hex is read from standard input.
        hex: Vec<String>,
    },
}

/// `label ...`
#[derive(Debug, Subcommand)]
pub enum LabelCommand {
    /// Label a pod.
    #[command(visible_alias = "po")]
    Pod {
        /// The pod, NAMESPACE/POD.
        pod: PodName,
        /// KEY=VALUE to set, KEY- to remove.
        #[arg(required = true)]
        labels: Vec<String>,
        /// Allow changing the value of a label that is set.
        #[arg(long)]
        overwrite: bool,
    },
    /// Label a namespace.
    #[command(visible_alias = "ns")]
    Namespace {
        /// Namespace name.
        name: String,
        /// KEY=VALUE to set, KEY- to remove.
        #[arg(required = true)]
        labels: Vec<String>,
        /// Allow changing the value of a label that is set.
        #[arg(long)]
        overwrite: bool,
    },
}

/// `annotate ...`
#[derive(Debug, Subcommand)]
pub enum AnnotateCommand {
    /// Annotate a NetNamespace (the namespace of the same name).
    #[command(visible_aliases = ["netnamespaces", "netns"])]
    Netnamespace {
        /// Namespace name.
        name: String,
        /// KEY=VALUE to set, KEY- to remove.
        #[arg(required = true)]
        annotations: Vec<String>,
        /// Allow changing the value of an annotation that is set.
        #[arg(long)]
        overwrite: bool,
    },
    /// Annotate a Namespace: k8s.ovn.org/acl-logging (network policy audit logging); the
    /// NetNamespace's multicast annotation given here goes to the NetNamespace.
    #[command(visible_aliases = ["namespaces", "ns"])]
    Namespace {
        /// Namespace name.
        name: String,
        /// KEY=VALUE to set, KEY- to remove.
        #[arg(required = true)]
        annotations: Vec<String>,
        /// Allow changing the value of an annotation that is set.
        #[arg(long)]
        overwrite: bool,
    },
}

/// Kinds of `delete`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DeleteKind {
    /// A NetworkPolicy, NAMESPACE/NAME.
    #[value(aliases = ["networkpolicies", "netpol"])]
    Networkpolicy,
    /// A project's EgressNetworkPolicy, NAMESPACE/NAME.
    #[value(aliases = ["egressnetworkpolicies", "egressfirewall"])]
    Egressnetworkpolicy,
}

/// `delete KIND NAME`
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// What to delete.
    #[arg(value_enum)]
    pub kind: DeleteKind,
    /// The object: NAMESPACE/NAME.
    pub name: PodName,
}

/// `node ...`
#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Register a node; the controller allocates its subnet.
    Add {
        /// Node name.
        name: String,
        /// Underlay IPv4 address of the node.
        #[arg(long)]
        ip: std::net::Ipv4Addr,
        /// Datapath id of the node's bridge, decimal or 0x hex.
        #[arg(long, value_parser = args::dpid)]
        dpid: u64,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum)]
        output: Option<OutputFormat>,
    },
    /// Remove a node and release its subnet.
    #[command(visible_alias = "rm")]
    Delete {
        /// Node name.
        name: String,
    },
}

/// `namespace ...`
#[derive(Debug, Subcommand)]
pub enum NamespaceCommand {
    /// Create a namespace; the controller allocates its NETID.
    Create {
        /// Namespace name.
        name: String,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum)]
        output: Option<OutputFormat>,
    },
    /// Delete a namespace.
    #[command(visible_alias = "rm")]
    Delete {
        /// Namespace name.
        name: String,
    },
}

/// `pod ...`
#[derive(Debug, Subcommand)]
pub enum PodCommand {
    /// Attach a pod's OVS port; prints the pod's IP once its flows are acknowledged.
    Attach {
        /// Node the pod runs on.
        #[arg(long)]
        node: String,
        /// Namespace of the pod.
        #[arg(short = 'n', long)]
        namespace: String,
        /// Pod name.
        #[arg(long)]
        name: String,
        /// Host-side OVS port name on the node's bridge.
        #[arg(long)]
        port: String,
        /// OpenFlow port number (default: looked up on the switch by port name).
        #[arg(long, value_parser = args::ofport)]
        ofport: Option<u32>,
        /// Output format (default: the IP alone).
        #[arg(short = 'o', long = "output", value_enum)]
        output: Option<OutputFormat>,
    },
    /// Detach a pod and release its IP.
    Detach {
        /// Namespace of the pod.
        #[arg(short = 'n', long)]
        namespace: String,
        /// Pod name.
        #[arg(long)]
        name: String,
    },
}

/// Resource kinds of `get`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Resource {
    /// Nodes and their subnets.
    #[value(aliases = ["hostsubnet", "hs", "nodes", "node"])]
    Hostsubnets,
    /// Namespaces and their NETIDs.
    #[value(aliases = ["netnamespace", "netns", "namespaces", "namespace"])]
    Netnamespaces,
    /// Attached pods.
    #[value(aliases = ["pod", "po"])]
    Pods,
    /// OpenFlow switches and their sync state.
    #[value(aliases = ["switch", "sw"])]
    Switches,
    /// Controller replicas, the leader, and the OpenFlow role each holds per switch.
    #[value(aliases = ["controller", "replicas"])]
    Controllers,
    /// The cluster network config.
    #[value(aliases = ["clusternetworks", "cn"])]
    Clusternetwork,
    /// Controller events.
    #[value(aliases = ["event", "ev"])]
    Events,
    /// NetworkPolicies (with -n, of one namespace).
    #[value(aliases = ["networkpolicy", "netpol"])]
    Networkpolicies,
    /// EgressNetworkPolicies (with -n, of one namespace), with status and DNS addresses.
    #[value(aliases = ["egressnetworkpolicy", "egressfirewalls"])]
    Egressnetworkpolicies,
}

/// `get KIND [NAME...]`
#[derive(Debug, Args)]
pub struct GetArgs {
    /// What to list.
    #[arg(value_enum)]
    pub resource: Resource,
    /// Only these objects (an unknown name is an error).
    pub names: Vec<String>,
    /// Only pods or NetworkPolicies of this namespace.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Objects of every namespace, as kubectl's `-A` (also the default without `-n`).
    #[arg(short = 'A', long = "all-namespaces", conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// For events: keep following new events.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: OutputFormat,
}

/// `adm ...`
#[derive(Debug, Subcommand)]
pub enum AdmCommand {
    /// Manage namespace isolation (multitenant mode).
    #[command(subcommand, name = "pod-network")]
    PodNetwork(PodNetworkCommand),
}

/// `adm pod-network ...`
#[derive(Debug, Subcommand)]
pub enum PodNetworkCommand {
    /// Give the projects the NETID of --to, so their pods reach each other.
    JoinProjects {
        /// The project whose network the others join.
        #[arg(long)]
        to: String,
        /// Projects to join.
        #[arg(required_unless_present = "selector", conflicts_with = "selector")]
        projects: Vec<String>,
        /// Instead of names: the projects whose labels match this selector (e.g. team=a).
        #[arg(short = 'l', long)]
        selector: Option<String>,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: OutputFormat,
    },
    /// Give each project a NETID of its own.
    IsolateProjects {
        /// Projects to isolate.
        #[arg(required_unless_present = "selector", conflicts_with = "selector")]
        projects: Vec<String>,
        /// Instead of names: the projects whose labels match this selector (e.g. team=a).
        #[arg(short = 'l', long)]
        selector: Option<String>,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: OutputFormat,
    },
    /// Give the projects NETID 0: they reach and are reached by every pod.
    MakeProjectsGlobal {
        /// Projects to make global.
        #[arg(required_unless_present = "selector", conflicts_with = "selector")]
        projects: Vec<String>,
        /// Instead of names: the projects whose labels match this selector (e.g. team=a).
        #[arg(short = 'l', long)]
        selector: Option<String>,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: OutputFormat,
    },
}

/// `apply -f FILE`
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Manifest file; `-` reads stdin.
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
    /// Only check the manifest locally and print what would be applied.
    #[arg(long)]
    pub dry_run: bool,
}

/// `dump-flows NODE`
#[derive(Debug, Args)]
pub struct DumpFlowsArgs {
    /// Node name.
    pub node: String,
    /// The flows read from the switch instead of the desired ones.
    #[arg(long, conflicts_with = "diff")]
    pub installed: bool,
    /// Desired versus installed, as a diff.
    #[arg(long)]
    pub diff: bool,
}

/// `trace --from NS/POD --to NS/POD|IP`
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Source pod, NAMESPACE/POD.
    #[arg(long)]
    pub from: PodName,
    /// Destination pod (NAMESPACE/POD) or IPv4 address.
    #[arg(long)]
    pub to: TraceDestination,
    /// Trace a TCP packet to this port (default: ICMP echo).
    #[arg(long, value_parser = args::l4_port, conflicts_with = "udp")]
    pub tcp: Option<u16>,
    /// Trace a UDP packet to this port.
    #[arg(long, value_parser = args::l4_port)]
    pub udp: Option<u16>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: OutputFormat,
}

/// `events`
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Keep following new events (until interrupted).
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Output format (json: one object per line).
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: OutputFormat,
}

/// Entry point of the `flowmeshctl` binary: parse, run, print errors, exit.
pub fn main() {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => {}
        Err(CliError::StdoutClosed) => {}
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(e.exit_code());
        }
    }
}

/// Run one parsed command line.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    commands::run(cli).await
}

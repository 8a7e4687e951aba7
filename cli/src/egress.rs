//! `flowmeshctl patch netnamespace|hostsubnet`: egress IPs in `oc patch` habits.

use clap::Subcommand;
use proto::admin;

use super::client::Conn;
use super::errors::{CliError, Operation, Target};
use super::output::{self, HostSubnetView, NetNamespaceView, OutputFormat};

/// `patch ...`
#[derive(Debug, Subcommand)]
pub enum PatchCommand {
    /// Set a namespace's egress IPs (NetNamespace.egressIPs): its traffic to destinations
    /// outside the cluster leaves with one of them as source. `--egress-ips=` clears them.
    #[command(visible_aliases = ["netnamespaces", "netns"])]
    Netnamespace {
        /// Namespace name.
        name: String,
        /// Comma-separated IPv4 addresses (replaces the list).
        #[arg(long = "egress-ips", value_name = "IP,IP...")]
        egress_ips: String,
        /// Output format (default: a one-line confirmation).
        #[arg(short = 'o', long = "output", value_enum)]
        output: Option<OutputFormat>,
    },
    /// Set a node's egress IPs (HostSubnet.egressIPs, manual: the IPs it hosts) or egress
    /// CIDRs (HostSubnet.egressCIDRs, automatic: ranges the controller assigns from). An
    /// empty value clears the list.
    #[command(visible_aliases = ["hostsubnets", "hs"])]
    Hostsubnet {
        /// Node name.
        node: String,
        /// Comma-separated IPv4 addresses (replaces the list).
        #[arg(long = "egress-ips", value_name = "IP,IP...")]
        egress_ips: Option<String>,
        /// Comma-separated IPv4 CIDRs (replaces the list).
        #[arg(long = "egress-cidrs", value_name = "CIDR,CIDR...")]
        egress_cidrs: Option<String>,
        /// Output format (default: a one-line confirmation).
        #[arg(short = 'o', long = "output", value_enum)]
        output: Option<OutputFormat>,
    },
}

fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Run a `patch` command; returns what to print.
pub async fn patch(conn: Conn, c: PatchCommand) -> Result<String, CliError> {
    match c {
        PatchCommand::Netnamespace {
            name,
            egress_ips,
            output,
        } => {
            let op = Operation::new(
                "patch",
                Target::Object {
                    kind: "netnamespace",
                    name: name.clone(),
                    command: "patch netnamespace",
                },
            );
            let req = conn.request(admin::PatchNetNamespaceRequest {
                name: name.clone(),
                egress_ips: list(&egress_ips),
            });
            let n = conn
                .call(op, conn.client.clone().patch_net_namespace(req))
                .await?;
            match output {
                None => Ok(format!("netnamespace/{name} patched\n")),
                Some(f) => output::render_one(&NetNamespaceView::from(&n), f)
                    .map_err(|e| CliError::Output(e.to_string())),
            }
        }
        PatchCommand::Hostsubnet {
            node,
            egress_ips,
            egress_cidrs,
            output,
        } => {
            let op = Operation::new(
                "patch",
                Target::Object {
                    kind: "hostsubnet",
                    name: node.clone(),
                    command: "patch hostsubnet",
                },
            );
            if egress_ips.is_none() && egress_cidrs.is_none() {
                return Err(CliError::Input {
                    op: Box::new(op),
                    detail: "give --egress-ips=IP,... (manual) or --egress-cidrs=CIDR,... (automatic); an empty value clears the list".into(),
                });
            }
            let req = conn.request(admin::PatchHostSubnetRequest {
                node: node.clone(),
                set_egress_ips: egress_ips.is_some(),
                egress_ips: egress_ips.as_deref().map(list).unwrap_or_default(),
                set_egress_cidrs: egress_cidrs.is_some(),
                egress_cidrs: egress_cidrs.as_deref().map(list).unwrap_or_default(),
            });
            let h = conn
                .call(op, conn.client.clone().patch_host_subnet(req))
                .await?;
            match output {
                None => Ok(format!("hostsubnet/{node} patched\n")),
                Some(f) => output::render_one(&HostSubnetView::from(&h), f)
                    .map_err(|e| CliError::Output(e.to_string())),
            }
        }
    }
}

//! The host's nftables table `ip flowmesh`: it masquerades pod traffic leaving the cluster
//! networks, so a host outside the cluster sees the node's address (openshift-sdn's
//! OPENSHIFT-MASQUERADE); accepts the VXLAN port and tun0's traffic in its own input and
//! forward chains (openshift-sdn's OPENSHIFT-FIREWALL-ALLOW and -FORWARD); and keeps the
//! kernel from sending ICMP redirects into tun0.
//!
//! The redirects come with services: the host DNATs a pod's packet to a service IP and routes
//! it out of tun0, the interface it came in on, to a destination tun0 reaches directly, so
//! Linux sends the pod an ICMP redirect naming the endpoint as gateway (rate-limited: the
//! service e2e test counts 9 per node). Pods with default sysctls ignore them (no route is
//! learned), but a pod that honoured one would address service traffic to the endpoint's MAC,
//! which tun0 does not accept. `send_redirects=0` takes effect only when also set for `all`
//! interfaces, so the table drops just the redirects that leave through tun0.
//!
//! An `accept` in these chains is final only for this table: a host firewall that drops in
//! its own table or chain (firewalld, an iptables INPUT policy of DROP) must be told about
//! tun0 and the VXLAN port separately (see docs/operations.md).

use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::net::Ipv4Net;

/// Family and name of flowmesh's table.
pub const TABLE: &str = "ip flowmesh";

/// `nft` failures.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    /// nft could not be started or fed.
    #[error("cannot run nft: {0}")]
    Spawn(#[from] std::io::Error),
    /// nft refused the ruleset.
    #[error("nft -f failed ({status}): {stderr}")]
    Failed {
        /// Exit status.
        status: String,
        /// Its stderr.
        stderr: String,
    },
}

/// The table, written exactly as `nft list table ip flowmesh` prints it (so the two compare
/// equal token by token when nothing needs changing). Networks are sorted and deduplicated.
pub fn render(cluster_networks: &[Ipv4Net], vxlan_port: u16) -> String {
    let tun0 = crate::net::TUN0;
    let mut nets: Vec<Ipv4Net> = cluster_networks.iter().map(Ipv4Net::network).collect();
    nets.sort();
    nets.dedup();
    let elements = nets
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "table {TABLE} {{\n\
         \tset cluster-networks {{\n\
         \t\ttype ipv4_addr\n\
         \t\tflags interval\n\
         \t\telements = {{ {elements} }}\n\
         \t}}\n\
         \n\
         \tchain input {{\n\
         \t\ttype filter hook input priority filter; policy accept;\n\
         \t\tudp dport {vxlan_port} accept\n\
         \t\tiifname \"{tun0}\" accept\n\
         \t}}\n\
         \n\
         \tchain forward {{\n\
         \t\ttype filter hook forward priority filter; policy accept;\n\
         \t\tiifname \"{tun0}\" accept\n\
         \t\toifname \"{tun0}\" accept\n\
         \t}}\n\
         \n\
         \tchain output {{\n\
         \t\ttype filter hook output priority filter; policy accept;\n\
         \t\toifname \"{tun0}\" icmp type redirect drop\n\
         \t}}\n\
         \n\
         \tchain postrouting {{\n\
         \t\ttype nat hook postrouting priority srcnat; policy accept;\n\
         \t\tip saddr @cluster-networks ip daddr != @cluster-networks masquerade\n\
         \t}}\n\
         }}\n"
    )
}

/// Whether two rulesets are the same text up to whitespace.
pub fn same_ruleset(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
}

/// The current table as nft lists it (None when it does not exist).
pub async fn current() -> Result<Option<String>, NftError> {
    current_table(TABLE).await
}

/// Table `table` (`FAMILY NAME`, e.g. `ip flowmesh`) as nft lists it (None when it does not
/// exist).
pub async fn current_table(table: &str) -> Result<Option<String>, NftError> {
    let mut args = vec!["list", "table"];
    args.extend(table.split_whitespace());
    let out = Command::new("nft").args(&args).output().await?;
    Ok(out
        .status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// Makes the table match `render(cluster_networks, vxlan_port)`; replaces it atomically (one
/// `nft -f` transaction) only when it differs. Returns whether it changed anything.
pub async fn ensure(cluster_networks: &[Ipv4Net], vxlan_port: u16) -> Result<bool, NftError> {
    ensure_table(TABLE, &render(cluster_networks, vxlan_port)).await
}

/// Makes table `table` (`FAMILY NAME`) read `want` (which must be written as `nft list table`
/// prints it); replaces it atomically only when it differs. Returns whether it changed.
pub async fn ensure_table(table: &str, want: &str) -> Result<bool, NftError> {
    if current_table(table)
        .await?
        .is_some_and(|have| same_ruleset(&have, want))
    {
        return Ok(false);
    }
    // Declaring the table first makes the delete valid whether or not it exists.
    run_script(&format!("table {table}\ndelete table {table}\n{want}")).await?;
    Ok(true)
}

/// Removes table `table` (`FAMILY NAME`) if it exists; returns whether it did.
pub async fn delete_table(table: &str) -> Result<bool, NftError> {
    if current_table(table).await?.is_none() {
        return Ok(false);
    }
    run_script(&format!("delete table {table}\n")).await?;
    Ok(true)
}

/// Runs one `nft -f -` transaction.
async fn run_script(script: &str) -> Result<(), NftError> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(script.as_bytes()).await?;
    }
    let out = child.wait_with_output().await?;
    if !out.status.success() {
        return Err(NftError::Failed {
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_sorts_masks_and_dedups() {
        let nets: Vec<Ipv4Net> = ["10.200.0.0/16", "10.128.0.1/14", "10.128.0.0/14"]
            .iter()
            .map(|s| s.parse().expect("valid"))
            .collect();
        let text = render(&nets, 4789);
        assert!(
            text.contains("elements = { 10.128.0.0/14, 10.200.0.0/16 }"),
            "{text}"
        );
        assert!(same_ruleset(&text, &text.replace('\t', "    ")));
        assert!(!same_ruleset(&text, &text.replace("masquerade", "accept")));
    }

    /// The host firewall part opens the VXLAN port and tun0, nothing else, and drops only
    /// ICMP redirects into tun0.
    #[test]
    fn render_opens_only_vxlan_and_tun0() {
        let nets: Vec<Ipv4Net> = vec!["10.128.0.0/14".parse().expect("valid")];
        let text = render(&nets, 4790);
        let rules: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| l.ends_with("accept") || l.ends_with("drop") || l.ends_with("masquerade"))
            .filter(|l| !l.starts_with("type "))
            .collect();
        assert_eq!(
            rules,
            [
                "udp dport 4790 accept",
                "iifname \"tun0\" accept",
                "iifname \"tun0\" accept",
                "oifname \"tun0\" accept",
                "oifname \"tun0\" icmp type redirect drop",
                "ip saddr @cluster-networks ip daddr != @cluster-networks masquerade",
            ]
        );
        assert_eq!(text.matches("policy accept;").count(), 4, "{text}");
    }
}

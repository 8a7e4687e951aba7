//! TX checksum offload off on a pod's interface (`ethtool -K IF tx off` inside the pod's
//! network namespace): Open vSwitch's userspace datapath (`datapath_type=netdev`) reads a veth's
//! packets with the partial checksums the kernel left for hardware that never computes them,
//! so TCP from such a pod is dropped by its peer. Found by the real cluster (issue 29): pods
//! made by kubelet on a userspace-datapath node could ARP but not connect.

use std::path::Path;

use tokio::process::Command;

/// The command line that turns TX checksum offload off on `ifname` in the namespace `netns`.
pub fn tx_checksum_off_command(netns: &Path, ifname: &str) -> Vec<String> {
    vec![
        "nsenter".into(),
        format!("--net={}", netns.display()),
        "--".into(),
        "ethtool".into(),
        "-K".into(),
        ifname.into(),
        "tx".into(),
        "off".into(),
    ]
}

/// Runs [`tx_checksum_off_command`]; the error says what failed and what it printed.
pub async fn disable_tx_checksum(netns: &Path, ifname: &str) -> Result<(), String> {
    let argv = tx_checksum_off_command(netns, ifname);
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .output()
        .await
        .map_err(|e| format!("cannot run {}: {e} (is ethtool installed?)", argv.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} failed ({}): {}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_enters_the_pod_namespace() {
        assert_eq!(
            tx_checksum_off_command(Path::new("/var/run/netns/cni-1"), "eth0").join(" "),
            "nsenter --net=/var/run/netns/cni-1 -- ethtool -K eth0 tx off"
        );
    }
}

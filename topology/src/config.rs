//! The cluster network configuration (one object per cluster) and its validation.

use crate::cidr::Ipv4Cidr;
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;

/// Default VXLAN UDP port.
pub const DEFAULT_VXLAN_PORT: u16 = 4789;
/// Default overlay MTU.
pub const DEFAULT_MTU: u32 = 1450;

/// Isolation mode of the pod network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// No isolation: every pod is effectively global (NETID 0).
    Subnet,
    /// Per-namespace NETIDs; NETID 0 is global.
    Multitenant,
    /// NETIDs key the flows, isolation comes from NetworkPolicy; join/isolate are refused.
    Networkpolicy,
}

impl Mode {
    /// The plugin id OpenShift SDN uses for this mode (written into the version marker).
    pub fn plugin_id(self) -> u8 {
        match self {
            Mode::Subnet => 0,
            Mode::Multitenant => 1,
            Mode::Networkpolicy => 2,
        }
    }
}

/// One cluster range: node subnets of length `host_prefix` are cut from `cidr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetworkEntry {
    /// The range, e.g. `10.128.0.0/14`.
    pub cidr: Ipv4Cidr,
    /// Prefix length of each node subnet, e.g. 23.
    pub host_prefix: u8,
}

/// The cluster network configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetworkConfig {
    /// Pod ranges, tried in order for node subnets.
    pub cluster_networks: Vec<ClusterNetworkEntry>,
    /// The service range (kube-proxy on the host handles it).
    pub service_network: Ipv4Cidr,
    /// Isolation mode.
    pub mode: Mode,
    /// VXLAN UDP port.
    #[serde(default = "default_vxlan_port")]
    pub vxlan_port: u16,
    /// Overlay MTU.
    #[serde(default = "default_mtu")]
    pub mtu: u32,
}

fn default_vxlan_port() -> u16 {
    DEFAULT_VXLAN_PORT
}
fn default_mtu() -> u32 {
    DEFAULT_MTU
}

/// Why a cluster network configuration (or a change of it) was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// No cluster range at all.
    #[error("clusterNetworks is empty: at least one {{cidr, hostPrefix}} range is required")]
    NoClusterNetworks,
    /// A hostPrefix shorter than its range or too long to hold a pod.
    #[error(
        "clusterNetworks[{index}] {cidr}: hostPrefix {host_prefix} must be between {min} and 30"
    )]
    HostPrefixDoesNotFit {
        /// Position in clusterNetworks.
        index: usize,
        /// The range.
        cidr: Ipv4Cidr,
        /// The refused hostPrefix.
        host_prefix: u8,
        /// The shortest allowed (the range's own prefix).
        min: u8,
    },
    /// Two cluster ranges overlap.
    #[error("clusterNetworks[{a}] {cidr_a} overlaps clusterNetworks[{b}] {cidr_b}")]
    ClusterNetworksOverlap {
        /// First index.
        a: usize,
        /// First range.
        cidr_a: Ipv4Cidr,
        /// Second index.
        b: usize,
        /// Second range.
        cidr_b: Ipv4Cidr,
    },
    /// A cluster range overlaps the service network.
    #[error("clusterNetworks[{index}] {cidr} overlaps the serviceNetwork {service}")]
    OverlapsServiceNetwork {
        /// Index of the cluster range.
        index: usize,
        /// The cluster range.
        cidr: Ipv4Cidr,
        /// The service network.
        service: Ipv4Cidr,
    },
    /// vxlanPort 0.
    #[error("vxlanPort must be 1..=65535, got {0}")]
    BadVxlanPort(u16),
    /// MTU out of 576..=65536.
    #[error("mtu must be 576..=65536, got {0}")]
    BadMtu(u32),
    /// A running cluster's ranges cannot change.
    #[error("cannot change {what} of a running cluster (it has {nodes} nodes): {detail}")]
    ChangeRefused {
        /// Which setting.
        what: &'static str,
        /// Number of nodes.
        nodes: usize,
        /// What exactly differs.
        detail: String,
    },
}

/// Why a node IP was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeIpError {
    /// Node IP inside a pod range.
    #[error(
        "node IP {ip} lies inside cluster network {cidr}; node IPs must be outside the pod ranges"
    )]
    InClusterNetwork {
        /// The IP.
        ip: Ipv4Addr,
        /// The range.
        cidr: Ipv4Cidr,
    },
    /// Node IP inside the service range.
    #[error("node IP {ip} lies inside the service network {cidr}")]
    InServiceNetwork {
        /// The IP.
        ip: Ipv4Addr,
        /// The service range.
        cidr: Ipv4Cidr,
    },
    /// Unspecified, loopback, multicast or broadcast.
    #[error("node IP {0} is not a usable unicast address")]
    NotUnicast(Ipv4Addr),
}

impl ClusterNetworkConfig {
    /// A config with one cluster range and the default port and MTU.
    pub fn new(cidr: Ipv4Cidr, host_prefix: u8, service_network: Ipv4Cidr, mode: Mode) -> Self {
        ClusterNetworkConfig {
            cluster_networks: vec![ClusterNetworkEntry { cidr, host_prefix }],
            service_network,
            mode,
            vxlan_port: DEFAULT_VXLAN_PORT,
            mtu: DEFAULT_MTU,
        }
    }

    /// Check every rule; the first broken one is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.cluster_networks.is_empty() {
            return Err(ConfigError::NoClusterNetworks);
        }
        for (i, e) in self.cluster_networks.iter().enumerate() {
            if e.host_prefix < e.cidr.prefix() || e.host_prefix > 30 {
                return Err(ConfigError::HostPrefixDoesNotFit {
                    index: i,
                    cidr: e.cidr,
                    host_prefix: e.host_prefix,
                    min: e.cidr.prefix(),
                });
            }
            for (j, o) in self.cluster_networks.iter().enumerate().skip(i + 1) {
                if e.cidr.overlaps(&o.cidr) {
                    return Err(ConfigError::ClusterNetworksOverlap {
                        a: i,
                        cidr_a: e.cidr,
                        b: j,
                        cidr_b: o.cidr,
                    });
                }
            }
            if e.cidr.overlaps(&self.service_network) {
                return Err(ConfigError::OverlapsServiceNetwork {
                    index: i,
                    cidr: e.cidr,
                    service: self.service_network,
                });
            }
        }
        if self.vxlan_port == 0 {
            return Err(ConfigError::BadVxlanPort(self.vxlan_port));
        }
        if !(576..=65536).contains(&self.mtu) {
            return Err(ConfigError::BadMtu(self.mtu));
        }
        Ok(())
    }

    /// Check that `ip` may be a node IP: unicast and outside every cluster and service range.
    pub fn check_node_ip(&self, ip: Ipv4Addr) -> Result<(), NodeIpError> {
        if ip.is_unspecified() || ip.is_loopback() || ip.is_multicast() || ip.is_broadcast() {
            return Err(NodeIpError::NotUnicast(ip));
        }
        if let Some(e) = self.cluster_networks.iter().find(|e| e.cidr.contains(ip)) {
            return Err(NodeIpError::InClusterNetwork { ip, cidr: e.cidr });
        }
        if self.service_network.contains(ip) {
            return Err(NodeIpError::InServiceNetwork {
                ip,
                cidr: self.service_network,
            });
        }
        Ok(())
    }

    /// Check that `new` may replace `self` on a cluster with `nodes` nodes: with nodes, the
    /// existing ranges and the service network must stay (the model checks a mode change); new ranges may be appended.
    pub fn check_change(
        &self,
        new: &ClusterNetworkConfig,
        nodes: usize,
    ) -> Result<(), ConfigError> {
        new.validate()?;
        if nodes == 0 {
            return Ok(());
        }
        let kept = new.cluster_networks.len() >= self.cluster_networks.len()
            && self
                .cluster_networks
                .iter()
                .zip(&new.cluster_networks)
                .all(|(a, b)| a == b);
        if !kept {
            return Err(ConfigError::ChangeRefused {
                what: "clusterNetworks",
                nodes,
                detail: "existing ranges must stay unchanged and in order (new ranges may only be appended)".into(),
            });
        }
        if self.service_network != new.service_network {
            return Err(ConfigError::ChangeRefused {
                what: "serviceNetwork",
                nodes,
                detail: format!("{} -> {}", self.service_network, new.service_network),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> ClusterNetworkConfig {
        ClusterNetworkConfig::new(
            "10.128.0.0/14".parse().expect("cidr"),
            23,
            "172.30.0.0/16".parse().expect("cidr"),
            Mode::Multitenant,
        )
    }

    #[test]
    fn validation_errors() {
        assert_eq!(base().validate(), Ok(()));
        let mut c = base();
        c.cluster_networks[0].host_prefix = 13;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::HostPrefixDoesNotFit { .. })
        ));
        c.cluster_networks[0].host_prefix = 31;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::HostPrefixDoesNotFit { .. })
        ));
        let mut c = base();
        c.cluster_networks.push(ClusterNetworkEntry {
            cidr: "10.130.0.0/16".parse().expect("cidr"),
            host_prefix: 24,
        });
        assert!(matches!(
            c.validate(),
            Err(ConfigError::ClusterNetworksOverlap { a: 0, b: 1, .. })
        ));
        let mut c = base();
        c.service_network = "10.129.0.0/16".parse().expect("cidr");
        assert!(matches!(
            c.validate(),
            Err(ConfigError::OverlapsServiceNetwork { .. })
        ));
        let mut c = base();
        c.cluster_networks.clear();
        assert_eq!(c.validate(), Err(ConfigError::NoClusterNetworks));
        let mut c = base();
        c.mtu = 100;
        assert_eq!(c.validate(), Err(ConfigError::BadMtu(100)));
    }

    #[test]
    fn node_ip_rules() {
        let c = base();
        assert!(c.check_node_ip(Ipv4Addr::new(192, 168, 1, 1)).is_ok());
        assert!(matches!(
            c.check_node_ip(Ipv4Addr::new(10, 129, 0, 1)),
            Err(NodeIpError::InClusterNetwork { .. })
        ));
        assert!(matches!(
            c.check_node_ip(Ipv4Addr::new(172, 30, 0, 1)),
            Err(NodeIpError::InServiceNetwork { .. })
        ));
        assert!(c.check_node_ip(Ipv4Addr::LOCALHOST).is_err());
    }

    #[test]
    fn changes_of_running_cluster() {
        let a = base();
        let mut b = base();
        b.cluster_networks[0].host_prefix = 24;
        assert!(a.check_change(&b, 0).is_ok());
        assert!(matches!(
            a.check_change(&b, 3),
            Err(ConfigError::ChangeRefused { .. })
        ));
        let mut b = base();
        b.cluster_networks.push(ClusterNetworkEntry {
            cidr: "10.200.0.0/16".parse().expect("cidr"),
            host_prefix: 24,
        });
        assert!(a.check_change(&b, 3).is_ok());
        let mut b = base();
        b.mode = Mode::Subnet;
        // The mode may change on a running cluster; the model decides (NETIDs).
        assert!(a.check_change(&b, 3).is_ok());
    }

    #[test]
    fn serde_defaults() {
        let j = r#"{"clusterNetworks":[{"cidr":"10.128.0.0/14","hostPrefix":23}],
                    "serviceNetwork":"172.30.0.0/16","mode":"multitenant"}"#;
        let c: ClusterNetworkConfig = serde_json::from_str(j).expect("parse");
        assert_eq!(c, base());
        assert!(serde_json::from_str::<ClusterNetworkConfig>(
            r#"{"clusterNetworks":[{"cidr":"fd00::/48","hostPrefix":64}],"serviceNetwork":"172.30.0.0/16","mode":"subnet"}"#
        )
        .is_err());
    }
}

//! The records a backend stores: the model's own saved forms, one object per record, so a
//! change writes only what it touched.

use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use topology::model::{EgressSnapshot, NamespaceInfo, NetworkPolicy, NodeRecord, PodRecord};
use topology::ClusterNetworkConfig;

/// Allocation cursors that are not part of any one object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CursorsRecord {
    /// Node subnet cursors, one per cluster range.
    pub subnet_cursors: Vec<u64>,
    /// NETID cursor.
    pub netid_cursor: u32,
}

/// Any stored record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "spec")]
pub enum Record {
    /// The cluster network config (a singleton).
    ClusterNetwork(ClusterNetworkConfig),
    /// A node with its HostSubnet.
    Node(NodeRecord),
    /// A namespace with its NETID.
    Namespace(NamespaceInfo),
    /// An attached pod.
    Pod(PodRecord),
    /// Allocation cursors (a singleton).
    Cursors(CursorsRecord),
    /// A NetworkPolicy.
    NetworkPolicy(NetworkPolicy),
    /// Egress IPs: NetNamespace and HostSubnet egress fields, automatic placements (a singleton).
    EgressIps(EgressSnapshot),
    /// A project's EgressNetworkPolicy.
    EgressNetworkPolicy(topology::model::EgressFirewall),
    /// The last resolved addresses of an egress firewall's DNS name.
    EgressDns(DnsRecord),
}

/// The key of a record: its kind and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordKey {
    /// The cluster network config.
    ClusterNetwork,
    /// A node by name.
    Node(String),
    /// A namespace by name.
    Namespace(String),
    /// A pod by namespace and name.
    Pod(String, String),
    /// The allocation cursors.
    Cursors,
    /// A NetworkPolicy by namespace and name.
    NetworkPolicy(String, String),
    /// The egress-IP state.
    EgressIps,
    /// An EgressNetworkPolicy by namespace (one per project).
    EgressNetworkPolicy(String),
    /// A DNS name's resolved addresses.
    EgressDns(String),
}

impl RecordKey {
    /// The storage key string (`node/NAME`, `pod/NS/NAME`, ...).
    pub fn as_string(&self) -> String {
        match self {
            RecordKey::ClusterNetwork => "clusternetwork/default".to_string(),
            RecordKey::Node(n) => format!("node/{n}"),
            RecordKey::Namespace(n) => format!("namespace/{n}"),
            RecordKey::Pod(ns, n) => format!("pod/{ns}/{n}"),
            RecordKey::Cursors => "cursors/default".to_string(),
            RecordKey::NetworkPolicy(ns, n) => format!("networkpolicy/{ns}/{n}"),
            RecordKey::EgressIps => "egressips/default".to_string(),
            RecordKey::EgressNetworkPolicy(ns) => format!("egressnetworkpolicy/{ns}"),
            RecordKey::EgressDns(n) => format!("egressdns/{n}"),
        }
    }
}

impl RecordKey {
    /// The key of a storage key string (the inverse of [`RecordKey::as_string`]).
    pub fn parse(s: &str) -> Option<RecordKey> {
        let (kind, rest) = s.split_once('/')?;
        let two = || {
            rest.split_once('/')
                .filter(|(a, b)| !a.is_empty() && !b.is_empty() && !b.contains('/'))
                .map(|(a, b)| (a.to_string(), b.to_string()))
        };
        let one = || Some(rest.to_string()).filter(|r| !r.is_empty() && !r.contains('/'));
        Some(match kind {
            "clusternetwork" if rest == "default" => RecordKey::ClusterNetwork,
            "cursors" if rest == "default" => RecordKey::Cursors,
            "egressips" if rest == "default" => RecordKey::EgressIps,
            "node" => RecordKey::Node(one()?),
            "namespace" => RecordKey::Namespace(one()?),
            "egressnetworkpolicy" => RecordKey::EgressNetworkPolicy(one()?),
            "egressdns" => RecordKey::EgressDns(one()?),
            "pod" => {
                let (a, b) = two()?;
                RecordKey::Pod(a, b)
            }
            "networkpolicy" => {
                let (a, b) = two()?;
                RecordKey::NetworkPolicy(a, b)
            }
            _ => return None,
        })
    }
}

impl Record {
    /// The record's key.
    pub fn key(&self) -> RecordKey {
        match self {
            Record::ClusterNetwork(_) => RecordKey::ClusterNetwork,
            Record::Node(n) => RecordKey::Node(n.info.name.clone()),
            Record::Namespace(n) => RecordKey::Namespace(n.name.clone()),
            Record::Pod(p) => RecordKey::Pod(p.info.key.namespace.clone(), p.info.key.name.clone()),
            Record::Cursors(_) => RecordKey::Cursors,
            Record::NetworkPolicy(p) => {
                RecordKey::NetworkPolicy(p.namespace.clone(), p.name.clone())
            }
            Record::EgressIps(_) => RecordKey::EgressIps,
            Record::EgressNetworkPolicy(f) => RecordKey::EgressNetworkPolicy(f.namespace.clone()),
            Record::EgressDns(d) => RecordKey::EgressDns(d.name.clone()),
        }
    }
}

/// The stored record of a name's addresses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsRecord {
    /// The name.
    pub name: String,
    /// Its addresses.
    pub addresses: Vec<Ipv4Addr>,
}

/// The embedded default cluster network: OpenShift's defaults, multitenant.
pub fn default_config() -> ClusterNetworkConfig {
    ClusterNetworkConfig {
        cluster_networks: vec![topology::ClusterNetworkEntry {
            cidr: topology::Ipv4Cidr::new(std::net::Ipv4Addr::new(10, 128, 0, 0), 14),
            host_prefix: 23,
        }],
        service_network: topology::Ipv4Cidr::new(std::net::Ipv4Addr::new(172, 30, 0, 0), 16),
        mode: topology::Mode::Multitenant,
        vxlan_port: topology::config::DEFAULT_VXLAN_PORT,
        mtu: topology::config::DEFAULT_MTU,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_keys_parse_back() {
        for k in [
            RecordKey::ClusterNetwork,
            RecordKey::Cursors,
            RecordKey::EgressIps,
            RecordKey::Node("n1".into()),
            RecordKey::Namespace("ns".into()),
            RecordKey::Pod("ns".into(), "p".into()),
            RecordKey::NetworkPolicy("ns".into(), "deny".into()),
            RecordKey::EgressNetworkPolicy("ns".into()),
            RecordKey::EgressDns("www.example.com".into()),
        ] {
            assert_eq!(RecordKey::parse(&k.as_string()), Some(k));
        }
        for bad in [
            "",
            "node",
            "node/",
            "pod/ns",
            "pod/ns/p/x",
            "cursors/x",
            "what/x",
        ] {
            assert_eq!(RecordKey::parse(bad), None, "{bad}");
        }
    }
}

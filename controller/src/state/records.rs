//! The records a backend stores, in the JSON shape of their Kubernetes/OpenShift counterparts.

use serde::{Deserialize, Serialize};

/// One cluster network range.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetworkEntry {
    /// IPv4 CIDR.
    pub cidr: String,
    /// Prefix length of each node's subnet.
    pub host_prefix: u8,
}

/// The cluster network config (ClusterNetwork `default`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRecord {
    /// Ranges, tried in order.
    pub cluster_networks: Vec<ClusterNetworkEntry>,
    /// Service CIDR.
    pub service_network: String,
    /// `subnet`, `multitenant` or `networkpolicy`.
    pub mode: String,
    /// VXLAN UDP port.
    pub vxlan_port: u16,
    /// Overlay MTU.
    pub mtu: u32,
}

/// A node and its HostSubnet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRecord {
    /// Node name.
    pub name: String,
    /// Underlay IPv4 address.
    #[serde(rename = "nodeIP")]
    pub node_ip: String,
    /// Datapath id of the node's br0.
    pub dpid: u64,
    /// Allocated subnet (CIDR).
    pub subnet: String,
}

/// A namespace and its NetNamespace NETID.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceRecord {
    /// Namespace name.
    pub name: String,
    /// NETID (VNID).
    pub netid: u32,
}

/// An attached pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRecord {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Node name.
    pub node: String,
    /// Host-side OVS port name.
    pub port_name: String,
    /// OpenFlow port number.
    pub ofport: u32,
    /// Allocated IPv4 address.
    pub ip: String,
}

/// Any stored record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum Record {
    /// The cluster network config (a singleton).
    ClusterNetwork(ClusterRecord),
    /// A node.
    Node(NodeRecord),
    /// A namespace.
    Namespace(NamespaceRecord),
    /// A pod.
    Pod(PodRecord),
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
}

impl RecordKey {
    /// The storage key string (`node/NAME`, `pod/NS/NAME`, ...).
    pub fn as_string(&self) -> String {
        match self {
            RecordKey::ClusterNetwork => "clusternetwork/default".to_string(),
            RecordKey::Node(n) => format!("node/{n}"),
            RecordKey::Namespace(n) => format!("namespace/{n}"),
            RecordKey::Pod(ns, n) => format!("pod/{ns}/{n}"),
        }
    }
}

impl Record {
    /// The record's key.
    pub fn key(&self) -> RecordKey {
        match self {
            Record::ClusterNetwork(_) => RecordKey::ClusterNetwork,
            Record::Node(n) => RecordKey::Node(n.name.clone()),
            Record::Namespace(n) => RecordKey::Namespace(n.name.clone()),
            Record::Pod(p) => RecordKey::Pod(p.namespace.clone(), p.name.clone()),
        }
    }
}

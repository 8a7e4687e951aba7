//! The global cluster model: nodes, pods, namespaces and NETIDs in one petgraph graph (the
//! VXLAN tunnels are the full mesh between the nodes, implied by the node set), with the
//! allocators. Every mutation validates first, then changes state, and returns
//! which nodes' flows it affects. No I/O.

use crate::alloc::{
    pod_mac, AllocError, HostSubnetAllocator, NetIdAllocator, PodIpAllocator, NETID_GLOBAL,
    NETID_MAX,
};
use crate::cidr::Ipv4Cidr;
use crate::config::{ClusterNetworkConfig, ConfigError, Mode, NodeIpError};
use petgraph::stable_graph::{NodeIndex, StableUnGraph};
use petgraph::visit::EdgeRef;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

pub use egress_firewall::{
    normalize_dns_name, EgressAction, EgressFirewall, EgressFirewallError, EgressRule, EgressTo,
    FirewallPlan, FirewallStatus, DEFAULT_MAX_DNS_NAMES_PER_NAMESPACE, MAX_EGRESS_RULES,
};
pub use egress_ip::{
    egress_mark, EgressError, EgressIpStatus, EgressPlan, EgressSnapshot, HostSubnetEgress,
};
pub use labels::{LabelSelector, Labels, Requirement, SelectorOp};
#[cfg(test)]
pub(crate) use namespaces::NODE_SET_WORK;
pub use policy::{
    ContainerPort, NetworkPolicy, Peer, PodMeta, PolicyError, PolicyKey, PolicyPort, PolicyRule,
    PortSpec, Protocol,
};

/// The namespace whose NETID is always 0.
pub const DEFAULT_NAMESPACE: &str = "default";

/// A pod's identity: namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PodKey {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
}

impl PodKey {
    /// A key from namespace and name.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        PodKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for PodKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A node as the pipeline sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// Underlay IP (VXLAN endpoint).
    pub ip: Ipv4Addr,
    /// Datapath id of its br0.
    pub dpid: u64,
    /// Its pod subnet (HostSubnet).
    pub subnet: Ipv4Cidr,
}

impl NodeInfo {
    /// The gateway (tun0) address: the subnet's first address.
    pub fn gateway(&self) -> Ipv4Addr {
        self.subnet.addr_at(1).unwrap_or(self.subnet.network())
    }
}

/// A namespace and its NETID.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceInfo {
    /// Namespace name.
    pub name: String,
    /// Its NETID (0 = global).
    pub netid: u32,
    /// `metadata.labels`.
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    pub labels: Labels,
    /// The multicast annotation is `true` (see `multicast`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub multicast: bool,
    /// What the namespace's `k8s.ovn.org/acl-logging` annotation logs (see `audit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acl_logging: Option<audit::AclLogging>,
}

/// A pod attached to a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodInfo {
    /// Namespace and name.
    pub key: PodKey,
    /// The node it runs on.
    pub node: String,
    /// The OVS port name of its host-side veth.
    pub port_name: String,
    /// Its OpenFlow port number on the node's br0.
    pub ofport: u32,
    /// Its IP (from the node subnet).
    pub ip: Ipv4Addr,
    /// `metadata.labels`.
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    pub labels: Labels,
    /// Named container ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ContainerPort>,
}

impl PodInfo {
    /// Its MAC: `0a:58:` + IPv4 bytes.
    pub fn mac(&self) -> [u8; 6] {
        pod_mac(self.ip)
    }
}

/// Which nodes' flows a mutation affects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Affected {
    /// Every node (node set, tunnels or config changed).
    pub all_nodes: bool,
    /// These nodes (when not `all_nodes`).
    pub nodes: BTreeSet<String>,
}

impl Affected {
    /// Nothing affected.
    pub fn none() -> Self {
        Affected::default()
    }
    /// Every node affected.
    pub fn all() -> Self {
        Affected {
            all_nodes: true,
            nodes: BTreeSet::new(),
        }
    }
    /// One node affected.
    pub fn node(name: &str) -> Self {
        let mut a = Affected::none();
        a.nodes.insert(name.to_string());
        a
    }
    /// Whether `node` is affected.
    pub fn contains(&self, node: &str) -> bool {
        self.all_nodes || self.nodes.contains(node)
    }
    /// Whether nothing is affected.
    pub fn is_empty(&self) -> bool {
        !self.all_nodes && self.nodes.is_empty()
    }
    /// Merge another result into this one.
    pub fn merge(&mut self, other: Affected) {
        self.all_nodes |= other.all_nodes;
        self.nodes.extend(other.nodes);
    }
}

/// Why a model operation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The configuration is invalid or the change is refused.
    #[error("cluster network config: {0}")]
    Config(#[from] ConfigError),
    /// A node IP is not acceptable.
    #[error("node {node}: {source}")]
    NodeIp {
        /// Node name.
        node: String,
        /// The rule broken.
        source: NodeIpError,
    },
    /// An allocation failed.
    #[error("{context}: {source}")]
    Alloc {
        /// What was being allocated.
        context: String,
        /// The allocator's error.
        source: AllocError,
    },
    /// Another node already has this IP.
    #[error("node {node}: IP {ip} is already used by node {other}")]
    NodeIpInUse {
        /// Node name.
        node: String,
        /// The IP.
        ip: Ipv4Addr,
        /// The node holding it.
        other: String,
    },
    /// Another node already has this datapath id.
    #[error("node {node}: datapath id {dpid:#018x} is already registered by node {other}")]
    DatapathInUse {
        /// Node name.
        node: String,
        /// The datapath id.
        dpid: u64,
        /// The node holding it.
        other: String,
    },
    /// No such node.
    #[error("unknown node {0:?}")]
    UnknownNode(String),
    /// No such namespace.
    #[error("unknown namespace {0:?}")]
    UnknownNamespace(String),
    /// No such pod.
    #[error("unknown pod {0}")]
    UnknownPod(PodKey),
    /// The pod exists already.
    #[error("pod {0} already exists")]
    PodExists(PodKey),
    /// Another pod on the node has this ofport.
    #[error("pod {pod}: ofport {ofport} on node {node} is already used by pod {other}")]
    OfportInUse {
        /// The pod.
        pod: PodKey,
        /// The node.
        node: String,
        /// The ofport.
        ofport: u32,
        /// The pod holding it.
        other: PodKey,
    },
    /// ofport 0, 1 (vxlan0), 2 (tun0) or reserved.
    #[error(
        "pod {pod}: ofport {ofport} is reserved (1 = vxlan0, 2 = tun0, >= 0xffffff00 special)"
    )]
    ReservedOfport {
        /// The pod.
        pod: PodKey,
        /// The ofport.
        ofport: u32,
    },
    /// The operation is not allowed in this mode.
    #[error("{op} is not allowed in {mode:?} mode")]
    ModeRefuses {
        /// The operation.
        op: &'static str,
        /// The cluster's mode.
        mode: Mode,
    },
    /// The `default` namespace always has NETID 0.
    #[error("the {DEFAULT_NAMESPACE:?} namespace always has NETID 0; {0} refused")]
    DefaultNamespace(&'static str),
    /// Saved state names an object twice.
    #[error("saved state holds {kind} {name:?} twice")]
    Duplicate {
        /// Object kind.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// No such NetworkPolicy.
    #[error("unknown networkpolicy {namespace}/{name}")]
    UnknownPolicy {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// A policy, label or named port is invalid.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// Namespaces share a NETID, which networkpolicy mode does not allow.
    #[error("namespaces {namespaces} share NETID {netid}; networkpolicy mode needs one NETID per namespace (isolate them first: flowmeshctl adm pod-network isolate-projects ...)")]
    SharedNetId {
        /// The NETID.
        netid: u32,
        /// The namespaces sharing it, comma-separated.
        namespaces: String,
    },
    /// An egress-IP request is invalid.
    #[error(transparent)]
    Egress(#[from] EgressError),
    /// The audit settings are invalid.
    #[error("{0}")]
    AuditConfig(String),
    /// An EgressNetworkPolicy is refused.
    #[error(transparent)]
    EgressFirewall(#[from] EgressFirewallError),
    /// A NETID in saved state is out of range.
    #[error("namespace {namespace}: NETID {netid} is out of range (0..=16777215)")]
    BadNetId {
        /// Namespace.
        namespace: String,
        /// The value.
        netid: u32,
    },
}

#[derive(Clone, Debug)]
enum Vertex {
    Node,
    Pod,
    Namespace,
    NetId,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Edge {
    /// Pod runs on node.
    PodOnNode,
    /// Pod belongs to namespace.
    PodInNamespace,
    /// Namespace uses NETID.
    NamespaceNetId,
}

#[derive(Clone, Debug)]
struct NodeEntry {
    info: NodeInfo,
    vertex: NodeIndex,
    pod_ips: PodIpAllocator,
    /// The node's pods, each with its version (see [`ClusterModel::node_pod_versions`]).
    pods: BTreeMap<PodKey, u64>,
    /// The ofports in use (the pod holding one is found among `pods` when needed).
    ofports: BTreeSet<u32>,
}

#[derive(Clone, Debug)]
struct NamespaceEntry {
    netid: u32,
    vertex: NodeIndex,
    labels: Labels,
    multicast: bool,
    acl_logging: Option<audit::AclLogging>,
    /// The `policy_epoch` at which a policy of this namespace last came, went or was stamped.
    policies_stamp: u64,
}

impl NamespaceEntry {
    fn info(&self, name: &str) -> NamespaceInfo {
        NamespaceInfo {
            name: name.to_string(),
            netid: self.netid,
            labels: self.labels.clone(),
            multicast: self.multicast,
            acl_logging: self.acl_logging,
        }
    }
}

/// A policy and the `policy_epoch` at which its spec or what its peers select last changed.
#[derive(Clone, Debug)]
struct StampedPolicy {
    policy: NetworkPolicy,
    stamp: u64,
}

#[derive(Clone, Debug)]
struct PodEntry {
    info: PodInfo,
    vertex: NodeIndex,
}

/// A pod entry in the pod table: boxed, ordered by its key (held once, in the entry).
#[derive(Clone, Debug)]
struct PodBox(Box<PodEntry>);

impl std::borrow::Borrow<PodKey> for PodBox {
    fn borrow(&self) -> &PodKey {
        &self.0.info.key
    }
}
impl PartialEq for PodBox {
    fn eq(&self, other: &Self) -> bool {
        self.0.info.key == other.0.info.key
    }
}
impl Eq for PodBox {}
impl PartialOrd for PodBox {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for PodBox {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.info.key.cmp(&other.0.info.key)
    }
}

/// Every pod by key. A B-tree of pointers: an entry in a map by key would hold the key twice
/// and, at ~200 bytes, leave the tree's half-filled leaves with much unused room (150,000 pods:
/// 109 MiB of model before, of which B-tree nodes 85 MiB).
#[derive(Clone, Debug, Default)]
struct PodTable(BTreeSet<PodBox>);

impl PodTable {
    fn get(&self, key: &PodKey) -> Option<&PodEntry> {
        self.0.get(key).map(|b| &*b.0)
    }
    fn contains_key(&self, key: &PodKey) -> bool {
        self.0.contains(key)
    }
    fn insert(&mut self, e: PodEntry) {
        self.0.replace(PodBox(Box::new(e)));
    }
    fn remove(&mut self, key: &PodKey) -> Option<PodEntry> {
        self.0.take(key).map(|b| *b.0)
    }
    /// Change an entry in place (its key must stay): taken out and put back.
    fn update<R>(&mut self, key: &PodKey, f: impl FnOnce(&mut PodEntry) -> R) -> Option<R> {
        let mut b = self.0.take(key)?;
        let r = f(&mut b.0);
        debug_assert!(b.0.info.key == *key);
        self.0.insert(b);
        Some(r)
    }
    fn values(&self) -> impl DoubleEndedIterator<Item = &PodEntry> + '_ {
        self.0.iter().map(|b| &*b.0)
    }
    /// The entries from `from` on, by key.
    fn starting_at<'a>(&'a self, from: &PodKey) -> impl Iterator<Item = &'a PodEntry> + 'a {
        self.0
            .range::<PodKey, _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded))
            .map(|b| &*b.0)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// A node as saved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Name, IP, datapath id and subnet.
    #[serde(flatten)]
    pub info: NodeInfo,
    /// Pod IP allocation cursor.
    pub pod_ip_cursor: u64,
}

/// A pod as saved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRecord {
    /// The pod.
    #[serde(flatten)]
    pub info: PodInfo,
}

/// Serializable saved state: restoring it gives a model with identical future behaviour.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelSnapshot {
    /// The cluster network config.
    pub config: ClusterNetworkConfig,
    /// Nodes.
    pub nodes: Vec<NodeRecord>,
    /// Namespaces.
    pub namespaces: Vec<NamespaceInfo>,
    /// Pods.
    pub pods: Vec<PodRecord>,
    /// Node subnet allocation cursors, one per cluster range.
    pub subnet_cursors: Vec<u64>,
    /// NETID allocation cursor.
    pub netid_cursor: u32,
    /// NetworkPolicies.
    #[serde(default)]
    pub policies: Vec<NetworkPolicy>,
    /// Egress IPs: requests, node settings, automatic placements.
    #[serde(default, skip_serializing_if = "EgressSnapshot::is_empty")]
    pub egress: EgressSnapshot,
    /// EgressNetworkPolicies (one per project).
    #[serde(default)]
    pub egress_firewalls: Vec<EgressFirewall>,
    /// The last resolved addresses of the firewalls' DNS names.
    #[serde(default)]
    pub egress_dns: BTreeMap<String, Vec<Ipv4Addr>>,
}

/// What to attach: a pod on a node's OVS port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodAttach<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Pod name.
    pub name: &'a str,
    /// Node.
    pub node: &'a str,
    /// OVS port name.
    pub port_name: &'a str,
    /// OpenFlow port number.
    pub ofport: u32,
}

/// The cluster model.
#[derive(Clone, Debug)]
pub struct ClusterModel {
    config: ClusterNetworkConfig,
    subnets: HostSubnetAllocator,
    netids: NetIdAllocator,
    graph: StableUnGraph<Vertex, Edge>,
    nodes: BTreeMap<String, NodeEntry>,
    namespaces: BTreeMap<String, NamespaceEntry>,
    pods: PodTable,
    netid_vertices: BTreeMap<u32, NodeIndex>,
    node_ips: BTreeMap<Ipv4Addr, String>,
    dpids: BTreeMap<u64, String>,
    /// Each policy with its stamp (see [`Self::policy_stamp`]).
    policies: BTreeMap<PolicyKey, StampedPolicy>,
    policy_index: policy::PolicyIndex,
    egress: egress_ip::EgressState,
    node_epoch: u64,
    config_epoch: u64,
    policy_epoch: u64,
    namespace_epoch: u64,
    /// Bumped by changes whose effect on policies is not tracked per policy (NETIDs,
    /// namespaces coming and going): every policy is stale.
    policy_reset_epoch: u64,
    /// Namespaces by label (key, value), for namespace selectors with `matchLabels`.
    ns_by_label: BTreeMap<(String, String), BTreeSet<String>>,
    /// For each namespace with pods, how many of its pods run on each node: a namespace's
    /// node set without walking its pods (see `nodes_of_namespace`).
    namespace_nodes: BTreeMap<String, BTreeMap<String, usize>>,
    firewalls: egress_firewall::EgressFirewalls,
    netid_changes: u64,
    /// The last pod version handed out (see [`ClusterModel::node_pod_versions`]).
    pod_version: u64,
    /// Namespaces with the multicast annotation set.
    multicast_namespaces: usize,
    /// Namespaces with audit logging on.
    logged_namespaces: usize,
    /// The audit settings.
    audit: audit::AuditConfig,
    /// Bumped by every change of audit logging (see `audit`).
    audit_epoch: u64,
}

impl ClusterModel {
    /// An empty cluster with a validated config.
    pub fn new(config: ClusterNetworkConfig) -> Result<Self, ModelError> {
        config.validate()?;
        Ok(ClusterModel {
            subnets: HostSubnetAllocator::new(&config.cluster_networks),
            config,
            netids: NetIdAllocator::new(),
            graph: StableUnGraph::default(),
            nodes: BTreeMap::new(),
            namespaces: BTreeMap::new(),
            pods: PodTable::default(),
            netid_vertices: BTreeMap::new(),
            node_ips: BTreeMap::new(),
            dpids: BTreeMap::new(),
            policies: BTreeMap::new(),
            policy_index: Default::default(),
            egress: Default::default(),
            node_epoch: 0,
            config_epoch: 0,
            policy_epoch: 0,
            namespace_epoch: 0,
            policy_reset_epoch: 0,
            ns_by_label: BTreeMap::new(),
            namespace_nodes: BTreeMap::new(),
            firewalls: Default::default(),
            netid_changes: 0,
            pod_version: 0,
            multicast_namespaces: 0,
            logged_namespaces: 0,
            audit: audit::AuditConfig::default(),
            audit_epoch: 0,
        })
    }

    /// Use another NETID allocator (e.g. a narrow range in tests); only before any namespace.
    pub fn with_netid_allocator(mut self, a: NetIdAllocator) -> Self {
        if self.namespaces.is_empty() {
            self.netids = a;
        }
        self
    }

    /// The cluster network config.
    pub fn config(&self) -> &ClusterNetworkConfig {
        &self.config
    }

    /// Replace the config; ranges and service network of a cluster with nodes are kept
    /// (ranges may be appended). The mode may change: to networkpolicy only when every
    /// namespace has a NETID of its own; from subnet, namespaces get fresh NETIDs. Affects
    /// every node (each switch takes the change as one bundle).
    pub fn update_config(&mut self, new: ClusterNetworkConfig) -> Result<Affected, ModelError> {
        self.config.check_change(&new, self.nodes.len())?;
        // Decided before the mode change, which writes the new mode into the config itself.
        let changed = new != self.config;
        if new.mode != self.config.mode {
            self.change_mode(new.mode)?;
        }
        if self.nodes.is_empty() {
            self.subnets = HostSubnetAllocator::new(&new.cluster_networks);
        } else {
            self.subnets.extend_ranges(&new.cluster_networks);
        }
        if !changed {
            return Ok(Affected::none());
        }
        self.config = new;
        self.config_epoch += 1;
        Ok(Affected::all())
    }

    /// Counter bumped whenever the node set, a node's IP or subnet changes.
    pub fn node_epoch(&self) -> u64 {
        self.node_epoch
    }

    /// Counter bumped whenever the config changes.
    pub fn config_epoch(&self) -> u64 {
        self.config_epoch
    }
}

pub mod audit;
pub mod egress_firewall;
mod egress_ip;
pub mod labels;
pub mod multicast;
mod namespaces;
mod nodes;
mod pods;
pub mod policy;
mod snapshot;
mod sync;

#[cfg(test)]
mod tests;

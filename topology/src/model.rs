//! The global cluster model: nodes, VXLAN tunnels, pods, namespaces and NETIDs in one petgraph
//! graph, with the allocators. Every mutation validates first, then changes state, and returns
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
    /// A VXLAN tunnel between two nodes.
    Tunnel,
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
    pods: BTreeSet<PodKey>,
    ofports: BTreeMap<u32, PodKey>,
}

#[derive(Clone, Debug)]
struct NamespaceEntry {
    netid: u32,
    vertex: NodeIndex,
    pods: BTreeSet<String>,
}

#[derive(Clone, Debug)]
struct PodEntry {
    info: PodInfo,
    vertex: NodeIndex,
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
    pods: BTreeMap<PodKey, PodEntry>,
    netid_vertices: BTreeMap<u32, NodeIndex>,
    node_ips: BTreeMap<Ipv4Addr, String>,
    dpids: BTreeMap<u64, String>,
    node_epoch: u64,
    config_epoch: u64,
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
            pods: BTreeMap::new(),
            netid_vertices: BTreeMap::new(),
            node_ips: BTreeMap::new(),
            dpids: BTreeMap::new(),
            node_epoch: 0,
            config_epoch: 0,
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

    /// Replace the config; ranges, service network and mode of a cluster with nodes are kept
    /// (ranges may be appended). Affects every node.
    pub fn update_config(&mut self, new: ClusterNetworkConfig) -> Result<Affected, ModelError> {
        self.config.check_change(&new, self.nodes.len())?;
        if self.nodes.is_empty() {
            self.subnets = HostSubnetAllocator::new(&new.cluster_networks);
        } else {
            self.subnets.extend_ranges(&new.cluster_networks);
        }
        if new == self.config {
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

    // ---- nodes ----

    /// Add a node (allocating its subnet), or update the IP / datapath id of an existing one
    /// (its subnet is kept). Re-adding identical values changes nothing.
    pub fn add_node(
        &mut self,
        name: &str,
        ip: Ipv4Addr,
        dpid: u64,
    ) -> Result<(NodeInfo, Affected), ModelError> {
        self.config
            .check_node_ip(ip)
            .map_err(|source| ModelError::NodeIp {
                node: name.to_string(),
                source,
            })?;
        if let Some(other) = self.node_ips.get(&ip).filter(|o| o.as_str() != name) {
            return Err(ModelError::NodeIpInUse {
                node: name.to_string(),
                ip,
                other: other.clone(),
            });
        }
        if let Some(other) = self.dpids.get(&dpid).filter(|o| o.as_str() != name) {
            return Err(ModelError::DatapathInUse {
                node: name.to_string(),
                dpid,
                other: other.clone(),
            });
        }
        if let Some(e) = self.nodes.get_mut(name) {
            if e.info.ip == ip && e.info.dpid == dpid {
                return Ok((e.info.clone(), Affected::none()));
            }
            self.node_ips.remove(&e.info.ip);
            self.dpids.remove(&e.info.dpid);
            e.info.ip = ip;
            e.info.dpid = dpid;
            self.node_ips.insert(ip, name.to_string());
            self.dpids.insert(dpid, name.to_string());
            self.node_epoch += 1;
            return Ok((e.info.clone(), Affected::all()));
        }
        let subnet = self
            .subnets
            .allocate()
            .map_err(|source| ModelError::Alloc {
                context: format!("node {name}: subnet"),
                source,
            })?;
        let info = NodeInfo {
            name: name.to_string(),
            ip,
            dpid,
            subnet,
        };
        self.insert_node(info.clone(), PodIpAllocator::new(subnet));
        Ok((info, Affected::all()))
    }

    fn insert_node(&mut self, info: NodeInfo, pod_ips: PodIpAllocator) {
        let v = self.graph.add_node(Vertex::Node);
        for other in self.nodes.values() {
            self.graph.add_edge(v, other.vertex, Edge::Tunnel);
        }
        self.node_ips.insert(info.ip, info.name.clone());
        self.dpids.insert(info.dpid, info.name.clone());
        self.nodes.insert(
            info.name.clone(),
            NodeEntry {
                info,
                vertex: v,
                pod_ips,
                pods: BTreeSet::new(),
                ofports: BTreeMap::new(),
            },
        );
        self.node_epoch += 1;
    }

    /// Delete a node: its pods go with it and its subnet is released.
    pub fn delete_node(&mut self, name: &str) -> Result<Affected, ModelError> {
        let pods: Vec<PodKey> = self
            .nodes
            .get(name)
            .ok_or_else(|| ModelError::UnknownNode(name.to_string()))?
            .pods
            .iter()
            .cloned()
            .collect();
        for p in pods {
            self.delete_pod(&p.namespace, &p.name)?;
        }
        if let Some(e) = self.nodes.remove(name) {
            self.graph.remove_node(e.vertex);
            self.subnets.release(e.info.subnet);
            self.node_ips.remove(&e.info.ip);
            self.dpids.remove(&e.info.dpid);
        }
        self.node_epoch += 1;
        Ok(Affected::all())
    }

    /// A node by name.
    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.nodes.get(name).map(|e| &e.info)
    }

    /// The node whose bridge has this datapath id.
    pub fn node_by_dpid(&self, dpid: u64) -> Option<&NodeInfo> {
        self.dpids.get(&dpid).and_then(|n| self.node(n))
    }

    /// The node with this underlay IP.
    pub fn node_by_ip(&self, ip: Ipv4Addr) -> Option<&NodeInfo> {
        self.node_ips.get(&ip).and_then(|n| self.node(n))
    }

    /// All nodes, by name.
    pub fn nodes(&self) -> impl Iterator<Item = &NodeInfo> {
        self.nodes.values().map(|e| &e.info)
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The nodes `name` has a VXLAN tunnel to (every other node), from the graph.
    pub fn tunnel_peers(&self, name: &str) -> Vec<&NodeInfo> {
        let Some(e) = self.nodes.get(name) else {
            return Vec::new();
        };
        let peers: BTreeSet<NodeIndex> = self
            .graph
            .edges(e.vertex)
            .filter(|r| *r.weight() == Edge::Tunnel)
            .map(|r| {
                if r.source() == e.vertex {
                    r.target()
                } else {
                    r.source()
                }
            })
            .collect();
        self.nodes
            .values()
            .filter(|o| peers.contains(&o.vertex))
            .map(|o| &o.info)
            .collect()
    }

    /// Number of tunnel edges in the graph (n·(n−1)/2 for n nodes).
    pub fn tunnel_count(&self) -> usize {
        self.graph
            .edge_weights()
            .filter(|w| **w == Edge::Tunnel)
            .count()
    }

    // ---- namespaces ----

    /// Add a namespace: `default` gets NETID 0; in multitenant and networkpolicy modes others
    /// get a fresh NETID; in subnet mode every namespace is global. Re-adding is a no-op.
    pub fn add_namespace(&mut self, name: &str) -> Result<(NamespaceInfo, Affected), ModelError> {
        if let Some(e) = self.namespaces.get(name) {
            return Ok((
                NamespaceInfo {
                    name: name.to_string(),
                    netid: e.netid,
                },
                Affected::none(),
            ));
        }
        let netid = if name == DEFAULT_NAMESPACE || self.config.mode == Mode::Subnet {
            NETID_GLOBAL
        } else {
            self.netids.allocate().map_err(|source| ModelError::Alloc {
                context: format!("namespace {name}: NETID"),
                source,
            })?
        };
        self.insert_namespace(name, netid);
        Ok((
            NamespaceInfo {
                name: name.to_string(),
                netid,
            },
            Affected::none(),
        ))
    }

    fn netid_vertex(&mut self, netid: u32) -> NodeIndex {
        if let Some(v) = self.netid_vertices.get(&netid) {
            return *v;
        }
        let v = self.graph.add_node(Vertex::NetId);
        self.netid_vertices.insert(netid, v);
        v
    }

    fn insert_namespace(&mut self, name: &str, netid: u32) {
        let v = self.graph.add_node(Vertex::Namespace);
        let nv = self.netid_vertex(netid);
        self.graph.add_edge(v, nv, Edge::NamespaceNetId);
        self.namespaces.insert(
            name.to_string(),
            NamespaceEntry {
                netid,
                vertex: v,
                pods: BTreeSet::new(),
            },
        );
    }

    /// Delete a namespace with its pods; its NETID is freed when no namespace uses it.
    pub fn delete_namespace(&mut self, name: &str) -> Result<Affected, ModelError> {
        let pods: Vec<String> = self
            .namespaces
            .get(name)
            .ok_or_else(|| ModelError::UnknownNamespace(name.to_string()))?
            .pods
            .iter()
            .cloned()
            .collect();
        let mut affected = Affected::none();
        for p in pods {
            affected.merge(self.delete_pod(name, &p)?);
        }
        if let Some(e) = self.namespaces.remove(name) {
            self.graph.remove_node(e.vertex);
            self.netids.release(e.netid);
            self.drop_netid_vertex_if_unused(e.netid);
        }
        Ok(affected)
    }

    fn drop_netid_vertex_if_unused(&mut self, netid: u32) {
        if let Some(&v) = self.netid_vertices.get(&netid) {
            if self.graph.edges(v).next().is_none() {
                self.graph.remove_node(v);
                self.netid_vertices.remove(&netid);
            }
        }
    }

    /// A namespace by name.
    pub fn namespace(&self, name: &str) -> Option<NamespaceInfo> {
        self.namespaces.get(name).map(|e| NamespaceInfo {
            name: name.to_string(),
            netid: e.netid,
        })
    }

    /// All namespaces, by name.
    pub fn namespaces(&self) -> impl Iterator<Item = NamespaceInfo> + '_ {
        self.namespaces.iter().map(|(n, e)| NamespaceInfo {
            name: n.clone(),
            netid: e.netid,
        })
    }

    /// The namespaces sharing NETID `netid`, from the graph.
    pub fn namespaces_with_netid(&self, netid: u32) -> Vec<String> {
        let Some(&nv) = self.netid_vertices.get(&netid) else {
            return Vec::new();
        };
        let vs: BTreeSet<NodeIndex> = self
            .graph
            .edges(nv)
            .map(|r| {
                if r.source() == nv {
                    r.target()
                } else {
                    r.source()
                }
            })
            .collect();
        self.namespaces
            .iter()
            .filter(|(_, e)| vs.contains(&e.vertex))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The NETID that keys a pod's flows: its namespace's, or 0 in subnet mode.
    pub fn effective_netid(&self, namespace: &str) -> u32 {
        if self.config.mode == Mode::Subnet {
            return NETID_GLOBAL;
        }
        self.namespaces
            .get(namespace)
            .map_or(NETID_GLOBAL, |e| e.netid)
    }

    fn check_netid_change(&self, op: &'static str, name: &str) -> Result<(), ModelError> {
        if self.config.mode != Mode::Multitenant {
            return Err(ModelError::ModeRefuses {
                op,
                mode: self.config.mode,
            });
        }
        if !self.namespaces.contains_key(name) {
            return Err(ModelError::UnknownNamespace(name.to_string()));
        }
        Ok(())
    }

    fn set_netid(&mut self, name: &str, netid: u32) -> Result<Affected, ModelError> {
        let Some(old) = self.namespaces.get(name).map(|e| e.netid) else {
            return Err(ModelError::UnknownNamespace(name.to_string()));
        };
        if old == netid {
            return Ok(Affected::none());
        }
        self.netids
            .retain(netid)
            .map_err(|source| ModelError::Alloc {
                context: format!("namespace {name}: NETID"),
                source,
            })?;
        self.netids.release(old);
        let nv = self.netid_vertex(netid);
        let Some(e) = self.namespaces.get_mut(name) else {
            return Err(ModelError::UnknownNamespace(name.to_string()));
        };
        e.netid = netid;
        let v = e.vertex;
        let old_edges: Vec<_> = self
            .graph
            .edges(v)
            .filter(|r| *r.weight() == Edge::NamespaceNetId)
            .map(|r| r.id())
            .collect();
        for id in old_edges {
            self.graph.remove_edge(id);
        }
        self.graph.add_edge(v, nv, Edge::NamespaceNetId);
        self.drop_netid_vertex_if_unused(old);
        Ok(self.nodes_of_namespace(name))
    }

    fn nodes_of_namespace(&self, name: &str) -> Affected {
        let mut a = Affected::none();
        if let Some(e) = self.namespaces.get(name) {
            for p in &e.pods {
                if let Some(pe) = self.pods.get(&PodKey::new(name, p.as_str())) {
                    a.nodes.insert(pe.info.node.clone());
                }
            }
        }
        a
    }

    /// `join-projects --to=target names…`: each namespace takes `target`'s NETID.
    pub fn join(&mut self, names: &[&str], target: &str) -> Result<Affected, ModelError> {
        self.check_netid_change("join", target)?;
        for n in names {
            self.check_netid_change("join", n)?;
            if *n == DEFAULT_NAMESPACE && target != DEFAULT_NAMESPACE {
                return Err(ModelError::DefaultNamespace("join"));
            }
        }
        let netid = self.effective_netid(target);
        let mut a = Affected::none();
        for n in names {
            a.merge(self.set_netid(n, netid)?);
        }
        Ok(a)
    }

    /// `isolate-projects`: the namespace gets a fresh NETID, unless it already has a non-global
    /// NETID of its own.
    pub fn isolate(&mut self, name: &str) -> Result<Affected, ModelError> {
        self.check_netid_change("isolate", name)?;
        if name == DEFAULT_NAMESPACE {
            return Err(ModelError::DefaultNamespace("isolate"));
        }
        let cur = self.effective_netid(name);
        if cur != NETID_GLOBAL && self.netids.users(cur) == 1 {
            return Ok(Affected::none());
        }
        let fresh = self.netids.allocate().map_err(|source| ModelError::Alloc {
            context: format!("namespace {name}: NETID"),
            source,
        })?;
        let r = self.set_netid(name, fresh);
        // set_netid retained once more; allocate already counted one reference.
        self.netids.release(fresh);
        r
    }

    /// `make-projects-global`: the namespace gets NETID 0.
    pub fn make_global(&mut self, name: &str) -> Result<Affected, ModelError> {
        self.check_netid_change("make-global", name)?;
        self.set_netid(name, NETID_GLOBAL)
    }

    // ---- pods ----

    /// Attach a pod: allocate its IP from the node subnet. Affects the pod's node.
    pub fn add_pod(&mut self, p: PodAttach<'_>) -> Result<(PodInfo, Affected), ModelError> {
        let key = PodKey::new(p.namespace, p.name);
        self.check_pod(&key, p.node, p.ofport)?;
        let node = self
            .nodes
            .get_mut(p.node)
            .ok_or_else(|| ModelError::UnknownNode(p.node.to_string()))?;
        let ip = node
            .pod_ips
            .allocate()
            .map_err(|source| ModelError::Alloc {
                context: format!("pod {key} on node {}: IP", p.node),
                source,
            })?;
        let info = PodInfo {
            key,
            node: p.node.to_string(),
            port_name: p.port_name.to_string(),
            ofport: p.ofport,
            ip,
        };
        self.insert_pod(info.clone());
        Ok((info, Affected::node(p.node)))
    }

    fn check_pod(&self, key: &PodKey, node: &str, ofport: u32) -> Result<(), ModelError> {
        if self.pods.contains_key(key) {
            return Err(ModelError::PodExists(key.clone()));
        }
        if !self.namespaces.contains_key(&key.namespace) {
            return Err(ModelError::UnknownNamespace(key.namespace.clone()));
        }
        let n = self
            .nodes
            .get(node)
            .ok_or_else(|| ModelError::UnknownNode(node.to_string()))?;
        if ofport <= 2 || ofport >= ofproto::action::port::MAX {
            return Err(ModelError::ReservedOfport {
                pod: key.clone(),
                ofport,
            });
        }
        if let Some(other) = n.ofports.get(&ofport) {
            return Err(ModelError::OfportInUse {
                pod: key.clone(),
                node: node.to_string(),
                ofport,
                other: other.clone(),
            });
        }
        Ok(())
    }

    fn insert_pod(&mut self, info: PodInfo) {
        let v = self.graph.add_node(Vertex::Pod);
        if let Some(n) = self.nodes.get_mut(&info.node) {
            self.graph.add_edge(v, n.vertex, Edge::PodOnNode);
            n.pods.insert(info.key.clone());
            n.ofports.insert(info.ofport, info.key.clone());
        }
        if let Some(ns) = self.namespaces.get_mut(&info.key.namespace) {
            self.graph.add_edge(v, ns.vertex, Edge::PodInNamespace);
            ns.pods.insert(info.key.name.clone());
        }
        self.pods
            .insert(info.key.clone(), PodEntry { info, vertex: v });
    }

    /// Detach a pod and release its IP. Affects its node.
    pub fn delete_pod(&mut self, namespace: &str, name: &str) -> Result<Affected, ModelError> {
        let key = PodKey::new(namespace, name);
        let e = self
            .pods
            .remove(&key)
            .ok_or_else(|| ModelError::UnknownPod(key.clone()))?;
        self.graph.remove_node(e.vertex);
        if let Some(n) = self.nodes.get_mut(&e.info.node) {
            n.pods.remove(&key);
            n.ofports.remove(&e.info.ofport);
            n.pod_ips.release(e.info.ip);
        }
        if let Some(ns) = self.namespaces.get_mut(namespace) {
            ns.pods.remove(name);
        }
        Ok(Affected::node(&e.info.node))
    }

    /// Record a new OVS port for a pod (e.g. after OVS renumbered it). Affects its node.
    pub fn set_pod_port(
        &mut self,
        namespace: &str,
        name: &str,
        port_name: &str,
        ofport: u32,
    ) -> Result<Affected, ModelError> {
        let key = PodKey::new(namespace, name);
        let node = self
            .pods
            .get(&key)
            .ok_or_else(|| ModelError::UnknownPod(key.clone()))?
            .info
            .node
            .clone();
        if ofport <= 2 || ofport >= ofproto::action::port::MAX {
            return Err(ModelError::ReservedOfport { pod: key, ofport });
        }
        if let Some(other) = self
            .pods_on_node(&node)
            .find(|p| p.ofport == ofport && p.key != key)
        {
            return Err(ModelError::OfportInUse {
                pod: key.clone(),
                node,
                ofport,
                other: other.key.clone(),
            });
        }
        if let Some(e) = self.pods.get_mut(&key) {
            if let Some(n) = self.nodes.get_mut(&node) {
                n.ofports.remove(&e.info.ofport);
                n.ofports.insert(ofport, key.clone());
            }
            e.info.port_name = port_name.to_string();
            e.info.ofport = ofport;
        }
        Ok(Affected::node(&node))
    }

    /// A pod by namespace and name.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&PodInfo> {
        self.pods
            .get(&PodKey::new(namespace, name))
            .map(|e| &e.info)
    }

    /// All pods, by key.
    pub fn pods(&self) -> impl Iterator<Item = &PodInfo> {
        self.pods.values().map(|e| &e.info)
    }

    /// The pods on a node, by key.
    pub fn pods_on_node<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a PodInfo> + 'a {
        self.nodes
            .get(node)
            .into_iter()
            .flat_map(|n| n.pods.iter())
            .filter_map(|k| self.pods.get(k).map(|e| &e.info))
    }

    /// Number of pods.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    // ---- saved state ----

    /// The saved form of one node (for backends that store objects one by one).
    pub fn node_record(&self, name: &str) -> Option<NodeRecord> {
        self.nodes.get(name).map(|e| NodeRecord {
            info: e.info.clone(),
            pod_ip_cursor: e.pod_ips.cursor(),
        })
    }

    /// The node subnet allocation cursors, one per cluster range (saved with the model).
    pub fn subnet_cursors(&self) -> Vec<u64> {
        self.subnets.cursors().to_vec()
    }

    /// The NETID allocation cursor (saved with the model).
    pub fn netid_cursor(&self) -> u32 {
        self.netids.cursor()
    }

    /// The state to save: restoring it gives identical future allocations.
    pub fn snapshot(&self) -> ModelSnapshot {
        ModelSnapshot {
            config: self.config.clone(),
            nodes: self
                .nodes
                .values()
                .map(|e| NodeRecord {
                    info: e.info.clone(),
                    pod_ip_cursor: e.pod_ips.cursor(),
                })
                .collect(),
            namespaces: self.namespaces().collect(),
            pods: self
                .pods
                .values()
                .map(|e| PodRecord {
                    info: e.info.clone(),
                })
                .collect(),
            subnet_cursors: self.subnets.cursors().to_vec(),
            netid_cursor: self.netids.cursor(),
        }
    }

    /// Rebuild a model from saved state, checking every object (duplicates, addresses outside
    /// their ranges, unknown references).
    pub fn restore(s: &ModelSnapshot) -> Result<Self, ModelError> {
        let mut m = ClusterModel::new(s.config.clone())?;
        for r in &s.nodes {
            let n = &r.info;
            if m.nodes.contains_key(&n.name) {
                return Err(ModelError::Duplicate {
                    kind: "node",
                    name: n.name.clone(),
                });
            }
            m.config
                .check_node_ip(n.ip)
                .map_err(|source| ModelError::NodeIp {
                    node: n.name.clone(),
                    source,
                })?;
            if let Some(other) = m.node_ips.get(&n.ip) {
                return Err(ModelError::NodeIpInUse {
                    node: n.name.clone(),
                    ip: n.ip,
                    other: other.clone(),
                });
            }
            if let Some(other) = m.dpids.get(&n.dpid) {
                return Err(ModelError::DatapathInUse {
                    node: n.name.clone(),
                    dpid: n.dpid,
                    other: other.clone(),
                });
            }
            m.subnets
                .reserve(n.subnet)
                .map_err(|source| ModelError::Alloc {
                    context: format!("node {}: subnet", n.name),
                    source,
                })?;
            let mut ips = PodIpAllocator::new(n.subnet);
            ips.set_cursor(r.pod_ip_cursor);
            m.insert_node(n.clone(), ips);
        }
        for ns in &s.namespaces {
            if m.namespaces.contains_key(&ns.name) {
                return Err(ModelError::Duplicate {
                    kind: "namespace",
                    name: ns.name.clone(),
                });
            }
            if ns.netid > NETID_MAX {
                return Err(ModelError::BadNetId {
                    namespace: ns.name.clone(),
                    netid: ns.netid,
                });
            }
            let netid = if m.config.mode == Mode::Subnet || ns.name == DEFAULT_NAMESPACE {
                NETID_GLOBAL
            } else {
                ns.netid
            };
            m.netids.retain(netid).map_err(|source| ModelError::Alloc {
                context: format!("namespace {}: NETID", ns.name),
                source,
            })?;
            m.insert_namespace(&ns.name, netid);
        }
        for r in &s.pods {
            let p = &r.info;
            m.check_pod(&p.key, &p.node, p.ofport)
                .map_err(|e| match e {
                    ModelError::PodExists(k) => ModelError::Duplicate {
                        kind: "pod",
                        name: k.to_string(),
                    },
                    e => e,
                })?;
            let node = m
                .nodes
                .get_mut(&p.node)
                .ok_or_else(|| ModelError::UnknownNode(p.node.clone()))?;
            node.pod_ips
                .reserve(p.ip)
                .map_err(|source| ModelError::Alloc {
                    context: format!("pod {}: IP", p.key),
                    source,
                })?;
            m.insert_pod(p.clone());
        }
        m.subnets.set_cursors(&s.subnet_cursors);
        m.netids.set_cursor(s.netid_cursor);
        Ok(m)
    }
}

#[cfg(test)]
mod tests;

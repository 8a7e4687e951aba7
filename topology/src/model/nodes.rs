//! Nodes: add (subnet allocation), update, delete, look-ups and the tunnel mesh.

use super::*;

impl ClusterModel {
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

    pub(super) fn insert_node(&mut self, info: NodeInfo, pod_ips: PodIpAllocator) {
        // The tunnels are the full mesh between the nodes: implied by the node set rather
        // than held as n·(n−1)/2 edges (2 M for 2,000 nodes, 80 MiB of edge list).
        let v = self.graph.add_node(Vertex::Node);
        self.node_ips.insert(info.ip, info.name.clone());
        self.dpids.insert(info.dpid, info.name.clone());
        self.nodes.insert(
            info.name.clone(),
            NodeEntry {
                info,
                vertex: v,
                pod_ips,
                pods: BTreeMap::new(),
                ofports: BTreeSet::new(),
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
            .keys()
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
        self.forget_node_egress(name);
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

    /// The nodes `name` has a VXLAN tunnel to: every other node (the mesh is full).
    pub fn tunnel_peers(&self, name: &str) -> Vec<&NodeInfo> {
        if !self.nodes.contains_key(name) {
            return Vec::new();
        }
        self.nodes
            .values()
            .filter(|o| o.info.name != name)
            .map(|o| &o.info)
            .collect()
    }

    /// Number of tunnels: n·(n−1)/2 for n nodes.
    pub fn tunnel_count(&self) -> usize {
        let n = self.nodes.len();
        n * n.saturating_sub(1) / 2
    }
}

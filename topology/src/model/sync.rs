//! Store sync: bring one saved object into the model as it is stored (written by another
//! controller replica, or found by a relist), with the same bookkeeping and the same
//! [`Affected`] answer as the mutation that produced it. Applying a value the model already
//! holds changes nothing and affects nothing, so a replica's own writes coming back through its
//! store's watch are harmless.

use super::*;

impl ClusterModel {
    /// Make node `r.info.name` exactly `r` (added with its stored subnet, or updated).
    pub fn sync_node(&mut self, r: &NodeRecord) -> Result<Affected, ModelError> {
        let n = &r.info;
        if let Some(e) = self.nodes.get_mut(&n.name) {
            if e.info.subnet == n.subnet {
                e.pod_ips.set_cursor(r.pod_ip_cursor);
                let (_, a) = self.add_node(&n.name, n.ip, n.dpid)?;
                return Ok(a);
            }
            // Another subnet: the node was deleted and re-added elsewhere.
            self.delete_node(&n.name)?;
        }
        self.config
            .check_node_ip(n.ip)
            .map_err(|source| ModelError::NodeIp {
                node: n.name.clone(),
                source,
            })?;
        if let Some(other) = self.node_ips.get(&n.ip) {
            return Err(ModelError::NodeIpInUse {
                node: n.name.clone(),
                ip: n.ip,
                other: other.clone(),
            });
        }
        if let Some(other) = self.dpids.get(&n.dpid) {
            return Err(ModelError::DatapathInUse {
                node: n.name.clone(),
                dpid: n.dpid,
                other: other.clone(),
            });
        }
        self.subnets
            .reserve(n.subnet)
            .map_err(|source| ModelError::Alloc {
                context: format!("node {}: subnet", n.name),
                source,
            })?;
        let mut ips = PodIpAllocator::new(n.subnet);
        ips.set_cursor(r.pod_ip_cursor);
        self.insert_node(n.clone(), ips);
        Ok(Affected::all())
    }

    /// Node `name` is no longer stored (absent already: nothing to do).
    pub fn sync_node_deleted(&mut self, name: &str) -> Result<Affected, ModelError> {
        if !self.nodes.contains_key(name) {
            return Ok(Affected::none());
        }
        self.delete_node(name)
    }

    /// Make namespace `ns.name` exactly `ns` (NETID, labels, multicast, audit logging).
    pub fn sync_namespace(&mut self, ns: &NamespaceInfo) -> Result<Affected, ModelError> {
        if ns.netid > NETID_MAX {
            return Err(ModelError::BadNetId {
                namespace: ns.name.clone(),
                netid: ns.netid,
            });
        }
        let netid = if self.config.mode == Mode::Subnet || ns.name == DEFAULT_NAMESPACE {
            NETID_GLOBAL
        } else {
            ns.netid
        };
        let mut affected = Affected::none();
        if !self.namespaces.contains_key(&ns.name) {
            self.netids
                .retain(netid)
                .map_err(|source| ModelError::Alloc {
                    context: format!("namespace {}: NETID", ns.name),
                    source,
                })?;
            self.insert_namespace(&ns.name, netid);
            self.namespace_epoch += 1;
            if self.is_policy_mode() && !self.policies.is_empty() {
                // As for an added namespace: selectors matching no labels now select it.
                self.policy_epoch += 1;
                self.policy_reset_epoch += 1;
                let none = Labels::new();
                let hit: BTreeSet<&str> = self
                    .candidate_policies(&ns.name, &none, &none)
                    .filter(|p| p.namespace_selectors().any(|s| s.matches(&none)))
                    .map(|p| p.namespace.as_str())
                    .collect();
                affected.merge(self.nodes_of_namespaces(hit));
            }
        } else {
            affected.merge(self.set_netid(&ns.name, netid)?);
        }
        affected.merge(self.set_namespace_labels(&ns.name, ns.labels.clone())?);
        affected.merge(self.set_multicast(&ns.name, ns.multicast)?);
        affected.merge(self.set_acl_logging(&ns.name, ns.acl_logging)?);
        Ok(affected)
    }

    /// Namespace `name` is no longer stored.
    pub fn sync_namespace_deleted(&mut self, name: &str) -> Result<Affected, ModelError> {
        if !self.namespaces.contains_key(name) {
            return Ok(Affected::none());
        }
        self.delete_namespace(name)
    }

    /// Make pod `r.info.key` exactly `r` (attached with its stored IP and port, or updated).
    pub fn sync_pod(&mut self, r: &PodRecord) -> Result<Affected, ModelError> {
        let p = &r.info;
        let mut affected = Affected::none();
        if let Some(cur) = self.pods.get(&p.key).map(|e| e.info.clone()) {
            if cur == *p {
                return Ok(Affected::none());
            }
            if cur.node == p.node && cur.ip == p.ip {
                if cur.ofport != p.ofport || cur.port_name != p.port_name {
                    affected.merge(self.set_pod_port(
                        &p.key.namespace,
                        &p.key.name,
                        &p.port_name,
                        p.ofport,
                    )?);
                }
                affected.merge(self.set_pod_meta(
                    &p.key.namespace,
                    &p.key.name,
                    PodMeta {
                        labels: p.labels.clone(),
                        ports: p.ports.clone(),
                    },
                )?);
                return Ok(affected);
            }
            affected.merge(self.delete_pod(&p.key.namespace, &p.key.name)?);
        }
        self.check_pod(&p.key, &p.node, p.ofport)?;
        policy::check_container_ports(&p.key, &p.ports).map_err(PolicyError::from)?;
        labels::check_labels(&format!("pod {}", p.key), &p.labels).map_err(PolicyError::from)?;
        let node = self
            .nodes
            .get_mut(&p.node)
            .ok_or_else(|| ModelError::UnknownNode(p.node.clone()))?;
        node.pod_ips
            .reserve(p.ip)
            .map_err(|source| ModelError::Alloc {
                context: format!("pod {}: IP", p.key),
                source,
            })?;
        self.insert_pod(p.clone());
        if self.is_policy_mode() && !self.policies.is_empty() {
            self.policy_epoch += 1;
        }
        affected.merge(self.pod_policy_change(None, Some(p)));
        affected.merge(self.multicast_nodes_of_pod(p));
        affected.merge(Affected::node(&p.node));
        Ok(affected)
    }

    /// Pod `namespace/name` is no longer stored.
    pub fn sync_pod_deleted(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Affected, ModelError> {
        if !self.pods.contains_key(&PodKey::new(namespace, name)) {
            return Ok(Affected::none());
        }
        self.delete_pod(namespace, name)
    }

    /// Set the allocation cursors as stored (they affect no flow).
    pub fn sync_cursors(&mut self, subnet_cursors: &[u64], netid_cursor: u32) {
        let mut c = subnet_cursors.to_vec();
        c.resize(self.config.cluster_networks.len(), 0);
        self.subnets.set_cursors(&c);
        self.netids.set_cursor(netid_cursor);
    }

    /// Make the egress-IP state exactly `s` (every node's table 101 may change).
    pub fn sync_egress(&mut self, s: &EgressSnapshot) -> Result<Affected, ModelError> {
        if self.egress_snapshot() == s {
            return Ok(Affected::none());
        }
        let cur = self.egress_snapshot().clone();
        for node in cur.nodes.keys().filter(|n| !s.nodes.contains_key(*n)) {
            if self.nodes.contains_key(node) {
                self.set_host_subnet_egress(node, HostSubnetEgress::default())?;
            }
        }
        for ns in cur
            .namespaces
            .keys()
            .filter(|n| !s.namespaces.contains_key(*n))
        {
            if self.namespaces.contains_key(ns) {
                self.set_namespace_egress_ips(ns, &[])?;
            }
        }
        self.restore_egress(s)?;
        Ok(Affected::all())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClusterNetworkConfig;

    fn config(mode: Mode) -> ClusterNetworkConfig {
        ClusterNetworkConfig::new(
            "10.128.0.0/14".parse().expect("c"),
            23,
            "172.30.0.0/16".parse().expect("s"),
            mode,
        )
    }

    /// A replica that syncs every stored object of another ends with the same snapshot, and
    /// syncing the same values again affects nothing.
    #[test]
    fn syncing_records_reproduces_the_writers_model() {
        let mut a = ClusterModel::new(config(Mode::Multitenant)).expect("model");
        for ns in ["default", "x", "y"] {
            a.add_namespace(ns).expect("ns");
        }
        a.add_node("n1", "192.168.1.1".parse().expect("ip"), 1)
            .expect("n1");
        a.add_node("n2", "192.168.1.2".parse().expect("ip"), 2)
            .expect("n2");
        for (i, ns) in ["x", "y"].iter().enumerate() {
            a.add_pod(PodAttach {
                namespace: ns,
                name: "p",
                node: "n1",
                port_name: &format!("veth{i}"),
                ofport: 10 + i as u32,
            })
            .expect("pod");
        }
        a.join(&["y"], "x").expect("join");

        let mut b = ClusterModel::new(config(Mode::Multitenant)).expect("model");
        let s = a.snapshot();
        for ns in &s.namespaces {
            b.sync_namespace(ns).expect("sync ns");
        }
        for n in &s.nodes {
            b.sync_node(n).expect("sync node");
        }
        for p in &s.pods {
            b.sync_pod(p).expect("sync pod");
        }
        b.sync_cursors(&s.subnet_cursors, s.netid_cursor);
        b.sync_egress(&s.egress).expect("egress");
        assert_eq!(b.snapshot(), s);

        // Again: nothing changes.
        for ns in &s.namespaces {
            assert!(b.sync_namespace(ns).expect("ns").is_empty());
        }
        for n in &s.nodes {
            assert!(b.sync_node(n).expect("node").is_empty());
        }
        for p in &s.pods {
            assert!(b.sync_pod(p).expect("pod").is_empty());
        }

        // A pod moved to another port, then deleted; a node deleted.
        let mut moved = s.pods[0].clone();
        moved.info.ofport = 40;
        let af = b.sync_pod(&moved).expect("move");
        assert!(af.contains("n1"), "{af:?}");
        assert_eq!(b.pod("x", "p").map(|p| p.ofport), Some(40));
        b.sync_pod_deleted("x", "p").expect("delete");
        assert!(b.pod("x", "p").is_none());
        assert!(b
            .sync_pod_deleted("x", "p")
            .expect("absent is fine")
            .is_empty());
        assert!(b.sync_node_deleted("n2").expect("node").all_nodes);
        assert!(b.node("n2").is_none());
    }

    #[test]
    fn a_stored_pod_outside_its_nodes_subnet_is_refused() {
        let mut m = ClusterModel::new(config(Mode::Subnet)).expect("model");
        m.add_namespace("default").expect("ns");
        m.add_node("n1", "192.168.1.1".parse().expect("ip"), 1)
            .expect("n1");
        let bad = PodRecord {
            info: PodInfo {
                key: PodKey::new("default", "p"),
                node: "n1".into(),
                port_name: "veth".into(),
                ofport: 5,
                ip: "10.200.0.5".parse().expect("ip"),
                labels: Labels::new(),
                ports: Vec::new(),
            },
        };
        assert!(m.sync_pod(&bad).is_err());
        assert!(m.pod("default", "p").is_none());
    }
}

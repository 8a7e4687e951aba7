//! Saved state: per-object records, snapshot and restore.

use super::*;

impl ClusterModel {
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
            policies: self.policies.values().map(|e| e.policy.clone()).collect(),
            egress: self.egress_snapshot().clone(),
            egress_firewalls: self.snapshot_egress_firewalls().0,
            egress_dns: self.snapshot_egress_firewalls().1,
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
            if !ns.labels.is_empty() {
                labels::check_labels(&format!("namespace {}", ns.name), &ns.labels)
                    .map_err(PolicyError::from)?;
                m.replace_namespace_labels(&ns.name, ns.labels.clone());
            }
            if ns.multicast {
                m.set_multicast(&ns.name, true)?;
            }
            if ns.acl_logging.is_some() {
                m.set_acl_logging(&ns.name, ns.acl_logging)?;
            }
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
            policy::check_container_ports(&p.key, &p.ports).map_err(PolicyError::from)?;
            labels::check_labels(&format!("pod {}", p.key), &p.labels)
                .map_err(PolicyError::from)?;
            m.insert_pod(p.clone());
        }
        for p in &s.policies {
            if m.policies.contains_key(&p.key()) {
                return Err(ModelError::Duplicate {
                    kind: "networkpolicy",
                    name: format!("{}/{}", p.namespace, p.name),
                });
            }
            m.apply_policy(p.clone())?;
        }
        m.restore_egress(&s.egress)?;
        m.restore_egress_firewalls(&s.egress_firewalls, &s.egress_dns)?;
        m.subnets.set_cursors(&s.subnet_cursors);
        m.netids.set_cursor(s.netid_cursor);
        Ok(m)
    }
}

//! Namespaces and NETIDs: add, delete, join, isolate, make global.

use super::*;

impl ClusterModel {
    /// Add a namespace: `default` gets NETID 0; in multitenant and networkpolicy modes others
    /// get a fresh NETID; in subnet mode every namespace is global. Re-adding is a no-op.
    pub fn add_namespace(&mut self, name: &str) -> Result<(NamespaceInfo, Affected), ModelError> {
        if let Some(e) = self.namespaces.get(name) {
            return Ok((e.info(name), Affected::none()));
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
        self.namespace_epoch += 1;
        // A namespace selector that matches no labels (`{}`, `NotIn`, `DoesNotExist`) selects
        // the new namespace: its NETID joins those policies' peers.
        let mut affected = Affected::none();
        if self.is_policy_mode() && !self.policies.is_empty() {
            self.policy_epoch += 1;
            self.policy_reset_epoch += 1;
            let none = Labels::new();
            let hit: BTreeSet<&str> = self
                .candidate_policies(name, &none, &none)
                .filter(|p| p.namespace_selectors().any(|s| s.matches(&none)))
                .map(|p| p.namespace.as_str())
                .collect();
            affected.merge(self.nodes_of_namespaces(hit));
        }
        Ok((
            NamespaceInfo {
                name: name.to_string(),
                netid,
                labels: Labels::new(),
                multicast: false,
                acl_logging: None,
            },
            affected,
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

    pub(super) fn insert_namespace(&mut self, name: &str, netid: u32) {
        let v = self.graph.add_node(Vertex::Namespace);
        let nv = self.netid_vertex(netid);
        self.graph.add_edge(v, nv, Edge::NamespaceNetId);
        self.namespaces.insert(
            name.to_string(),
            NamespaceEntry {
                netid,
                vertex: v,
                labels: Labels::new(),
                multicast: false,
                acl_logging: None,
                policies_stamp: self.policy_epoch,
            },
        );
    }

    /// Delete a namespace with its pods; its NETID is freed when no namespace uses it.
    pub fn delete_namespace(&mut self, name: &str) -> Result<Affected, ModelError> {
        if !self.namespaces.contains_key(name) {
            return Err(ModelError::UnknownNamespace(name.to_string()));
        }
        let pods: Vec<String> = self.pods_in(name).map(|p| p.key.name.clone()).collect();
        let mut affected = Affected::none();
        for p in pods {
            affected.merge(self.delete_pod(name, &p)?);
        }
        let before = self.policies.len();
        self.policies.retain(|(ns, _), _| ns != name);
        if self.policies.len() != before {
            self.policy_epoch += 1;
            self.policy_reset_epoch += 1;
            self.policy_index = Default::default();
            for e in self.policies.values() {
                self.policy_index.insert(&e.policy);
            }
        }
        self.replace_namespace_labels(name, Labels::new());
        affected.merge(self.drop_egress_firewall_of(name));
        if let Some(e) = self.namespaces.remove(name) {
            self.namespace_epoch += 1;
            if e.multicast {
                self.multicast_namespaces -= 1;
            }
            if e.acl_logging.is_some() {
                self.logged_namespaces -= 1;
            }
            if self.is_policy_mode() && !self.policies.is_empty() {
                // Its NETID leaves the peers of every namespace selector that matched it.
                self.policy_epoch += 1;
                self.policy_reset_epoch += 1;
                let hit: Vec<String> = self
                    .candidate_policies(name, &e.labels, &e.labels)
                    .filter(|p| p.namespace_selectors().any(|s| s.matches(&e.labels)))
                    .map(|p| p.namespace.clone())
                    .collect();
                for ns in hit {
                    affected.merge(self.nodes_of_namespace(&ns));
                }
            }
            if self.namespace_has_egress(name) {
                self.forget_namespace_egress(name);
                affected = Affected::all();
            }
            self.graph.remove_node(e.vertex);
            self.netids.release(e.netid);
            self.drop_netid_vertex_if_unused(e.netid);
            // The NETID's other namespaces may all want multicast now.
            affected.merge(self.multicast_nodes(e.netid));
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
        self.namespaces.get(name).map(|e| e.info(name))
    }

    /// All namespaces, by name.
    pub fn namespaces(&self) -> impl Iterator<Item = NamespaceInfo> + '_ {
        self.namespaces.iter().map(|(n, e)| e.info(n))
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

    pub(super) fn set_netid(&mut self, name: &str, netid: u32) -> Result<Affected, ModelError> {
        let Some(old) = self.namespaces.get(name).map(|e| e.netid) else {
            return Err(ModelError::UnknownNamespace(name.to_string()));
        };
        if old == netid {
            return Ok(Affected::none());
        }
        self.policy_epoch += 1;
        self.policy_reset_epoch += 1;
        let multicast = self.multicast_nodes(old);
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
        self.netid_changes += 1;
        let mut a = self.egress_firewall_netid_change(old, netid);
        if self.namespace_has_egress(name) {
            // Its egress IPs now serve another NETID: every node's table 101 changes.
            self.reallocate_egress_ips();
            return Ok(Affected::all());
        }
        a.merge(multicast);
        a.merge(self.multicast_nodes(netid));
        a.merge(self.nodes_of_namespace(name));
        Ok(a)
    }

    /// The nodes with a pod of namespace `name`: from the per-node counts, so its cost is
    /// the namespace's nodes, not its pods.
    pub(super) fn nodes_of_namespace(&self, name: &str) -> Affected {
        let mut a = Affected::none();
        for node in self
            .namespace_nodes
            .get(name)
            .into_iter()
            .flat_map(|c| c.keys())
        {
            #[cfg(test)]
            NODE_SET_WORK.with(|w| w.set(w.get() + 1));
            a.nodes.insert(node.clone());
        }
        a
    }

    /// The nodes with a pod of any of `names`, each namespace looked at once however often
    /// it is named (many policies of one namespace name it once each).
    pub(super) fn nodes_of_namespaces<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Affected {
        let names: BTreeSet<&str> = names.into_iter().collect();
        let mut a = Affected::none();
        for n in names {
            a.merge(self.nodes_of_namespace(n));
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

    /// Switch the cluster's mode (see [`ClusterModel::update_config`]).
    pub(super) fn change_mode(&mut self, mode: Mode) -> Result<(), ModelError> {
        if mode == Mode::Networkpolicy && self.config.mode == Mode::Multitenant {
            let mut by_netid: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
            for (n, e) in &self.namespaces {
                if e.netid != NETID_GLOBAL {
                    by_netid.entry(e.netid).or_default().push(n);
                }
            }
            if let Some((netid, names)) = by_netid.into_iter().find(|(_, v)| v.len() > 1) {
                return Err(ModelError::SharedNetId {
                    netid,
                    namespaces: names.join(", "),
                });
            }
        }
        if self.config.mode == Mode::Subnet {
            // Subnet mode stored every namespace as global: give each its own NETID.
            let names: Vec<String> = self
                .namespaces
                .iter()
                .filter(|(n, e)| e.netid == NETID_GLOBAL && n.as_str() != DEFAULT_NAMESPACE)
                .map(|(n, _)| n.clone())
                .collect();
            // On a copy, so that running out of NETIDs half-way changes nothing.
            let mut next = self.clone();
            for n in names {
                let netid = next.netids.allocate().map_err(|source| ModelError::Alloc {
                    context: format!("mode change: namespace {n}: NETID"),
                    source,
                })?;
                next.set_netid(&n, netid)?;
                next.netids.release(netid);
            }
            *self = next;
        }
        self.config.mode = mode;
        Ok(())
    }
}

#[cfg(test)]
thread_local! {
    /// Node names `nodes_of_namespace` visited on this thread: the work of marking which
    /// nodes a change affects (a test bounds it).
    pub(crate) static NODE_SET_WORK: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

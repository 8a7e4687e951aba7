//! Pods: attach (IP allocation), detach, port changes, look-ups.

use super::*;

impl ClusterModel {
    /// Attach a pod: allocate its IP from the node subnet. Affects the pod's node.
    pub fn add_pod(&mut self, p: PodAttach<'_>) -> Result<(PodInfo, Affected), ModelError> {
        self.add_pod_with(p, PodMeta::default())
    }

    /// Attach a pod with its labels and named ports. Affects the pod's node and, in
    /// networkpolicy mode, the nodes whose policies may select it as a peer.
    pub fn add_pod_with(
        &mut self,
        p: PodAttach<'_>,
        meta: PodMeta,
    ) -> Result<(PodInfo, Affected), ModelError> {
        let key = PodKey::new(p.namespace, p.name);
        self.check_pod(&key, p.node, p.ofport)?;
        policy::check_container_ports(&key, &meta.ports).map_err(PolicyError::from)?;
        labels::check_labels(&format!("pod {key}"), &meta.labels).map_err(PolicyError::from)?;
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
            labels: meta.labels,
            ports: meta.ports,
        };
        self.insert_pod(info.clone());
        if self.is_policy_mode() && !self.policies.is_empty() {
            self.policy_epoch += 1;
        }
        let mut affected = self.pod_policy_change(None, Some(&info));
        affected.merge(self.multicast_nodes_of_pod(&info));
        Ok((info, affected))
    }

    pub(super) fn check_pod(
        &self,
        key: &PodKey,
        node: &str,
        ofport: u32,
    ) -> Result<(), ModelError> {
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
        if n.ofports.contains(&ofport) {
            let other = self
                .pods_on_node(node)
                .find(|p| p.ofport == ofport)
                .map_or_else(|| key.clone(), |p| p.key.clone());
            return Err(ModelError::OfportInUse {
                pod: key.clone(),
                node: node.to_string(),
                ofport,
                other,
            });
        }
        Ok(())
    }

    pub(super) fn insert_pod(&mut self, info: PodInfo) {
        let v = self.graph.add_node(Vertex::Pod);
        if let Some(n) = self.nodes.get_mut(&info.node) {
            self.graph.add_edge(v, n.vertex, Edge::PodOnNode);
            self.pod_version += 1;
            n.pods.insert(info.key.clone(), self.pod_version);
            n.ofports.insert(info.ofport);
        }
        if let Some(ns) = self.namespaces.get(&info.key.namespace) {
            self.graph.add_edge(v, ns.vertex, Edge::PodInNamespace);
        }
        *self
            .namespace_nodes
            .entry(info.key.namespace.clone())
            .or_default()
            .entry(info.node.clone())
            .or_default() += 1;
        self.pods.insert(PodEntry { info, vertex: v });
    }

    /// Take a removed pod out of its namespace's per-node counts.
    fn forget_namespace_pod(&mut self, p: &PodInfo) {
        let Some(counts) = self.namespace_nodes.get_mut(&p.key.namespace) else {
            return;
        };
        if let Some(c) = counts.get_mut(&p.node) {
            *c -= 1;
            if *c == 0 {
                counts.remove(&p.node);
            }
        }
        if counts.is_empty() {
            self.namespace_nodes.remove(&p.key.namespace);
        }
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
        self.forget_namespace_pod(&e.info);
        if self.is_policy_mode() && !self.policies.is_empty() {
            self.policy_epoch += 1;
        }
        let mut affected = self.pod_policy_change(Some(&e.info), None);
        affected.merge(self.multicast_nodes_of_pod(&e.info));
        Ok(affected)
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
        let old = self.pods.update(&key, |e| {
            let old = e.info.ofport;
            e.info.port_name = port_name.to_string();
            e.info.ofport = ofport;
            old
        });
        if let (Some(old), Some(n)) = (old, self.nodes.get_mut(&node)) {
            n.ofports.remove(&old);
            n.ofports.insert(ofport);
            self.pod_version += 1;
            if let Some(v) = n.pods.get_mut(&key) {
                *v = self.pod_version;
            }
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
            .flat_map(|n| n.pods.keys())
            .filter_map(|k| self.pods.get(k).map(|e| &e.info))
    }

    /// The pods on a node, by key, each with its *version*: a number that changes whenever
    /// the pod's entry does (attach, port change; a pod detached and attached again gets a
    /// new one), and that no other pod has had. An incremental consumer compares versions
    /// instead of the pods themselves. The namespace's NETID is not part of a pod's version
    /// (see [`Self::netid_epoch`]).
    pub fn node_pod_versions<'a>(
        &'a self,
        node: &str,
    ) -> impl Iterator<Item = (&'a PodKey, u64)> + 'a {
        self.nodes
            .get(node)
            .into_iter()
            .flat_map(|n| n.pods.iter().map(|(k, v)| (k, *v)))
    }

    /// Number of pods on a node.
    pub fn node_pod_count(&self, node: &str) -> usize {
        self.nodes.get(node).map_or(0, |n| n.pods.len())
    }

    /// Number of pods.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }
}

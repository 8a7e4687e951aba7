//! Multicast between the pods of a project (OpenShift SDN's NetNamespace annotation
//! `netnamespace.network.openshift.io/multicast-enabled`).
//!
//! Rules:
//! * Multicast is per NETID: a datagram sent by a pod reaches the pods whose namespace has the
//!   same NETID, on every node, and no other pod. Joined projects share a NETID, so they share
//!   multicast.
//! * A NETID has multicast only when **every** namespace using it has the annotation set to
//!   `true` (as OpenShift SDN): a project that did not ask for multicast never receives it,
//!   even when it is joined to one that did.
//! * NETID 0 (global projects) is no wildcard for multicast: a global project exchanges
//!   multicast only with the other global projects, and only when all of them (`default`
//!   included) enabled it. Being global is about reaching and being reached by unicast (DNS,
//!   monitoring); flooding every project's multicast to it would leak each tenant's group
//!   traffic to every global pod and multiply the copies on the wire.
//! * Subnet mode has no multicast (as OpenShift SDN): the annotation is kept, and takes effect
//!   when the cluster moves to multitenant or networkpolicy mode.

use super::*;

/// The annotation that enables multicast on a NetNamespace (or Namespace).
pub const MULTICAST_ANNOTATION: &str = "netnamespace.network.openshift.io/multicast-enabled";

/// The annotation's value as flowmesh reads it: `true` or `false` (any case), or why not.
pub fn parse_multicast_value(value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!(
            "{MULTICAST_ANNOTATION} must be \"true\" or \"false\", not {value:?}"
        )),
    }
}

impl ClusterModel {
    /// Set or clear a namespace's multicast annotation. Affects the nodes with pods of its
    /// NETID (their multicast flows and groups appear or go).
    pub fn set_multicast(&mut self, name: &str, enabled: bool) -> Result<Affected, ModelError> {
        let e = self
            .namespaces
            .get_mut(name)
            .ok_or_else(|| ModelError::UnknownNamespace(name.to_string()))?;
        if e.multicast == enabled {
            return Ok(Affected::none());
        }
        e.multicast = enabled;
        let netid = e.netid;
        if enabled {
            self.multicast_namespaces += 1;
        } else {
            self.multicast_namespaces -= 1;
        }
        Ok(self.netid_pod_nodes(netid))
    }

    /// Whether the namespace carries the annotation `true` (`None`: no such namespace).
    pub fn multicast_annotated(&self, name: &str) -> Option<bool> {
        self.namespaces.get(name).map(|e| e.multicast)
    }

    /// Whether any namespace has the multicast annotation (without it no node has multicast
    /// flows).
    pub fn any_multicast_annotated(&self) -> bool {
        self.multicast_namespaces > 0
    }

    /// Whether pods of `netid` exchange multicast: not subnet mode, and every namespace with
    /// this NETID (at least one) has the annotation.
    pub fn multicast_enabled(&self, netid: u32) -> bool {
        if self.config.mode == Mode::Subnet {
            return false;
        }
        let names = self.namespaces_with_netid(netid);
        !names.is_empty()
            && names
                .iter()
                .all(|n| self.namespaces.get(n).is_some_and(|e| e.multicast))
    }

    /// Whether the pods of namespace `name` exchange multicast (cheap when it is not
    /// annotated: the common case).
    pub fn namespace_multicast_enabled(&self, name: &str) -> bool {
        match self.namespaces.get(name) {
            Some(e) if e.multicast => self.multicast_enabled(e.netid),
            _ => false,
        }
    }

    /// The nodes with pods of `netid`, each with those pods' ofports (sorted), by node name.
    pub fn netid_members(&self, netid: u32) -> BTreeMap<String, Vec<u32>> {
        let mut out: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for ns in self.namespaces_with_netid(netid) {
            for p in self.pods_in(&ns) {
                out.entry(p.node.clone()).or_default().push(p.ofport);
            }
        }
        for v in out.values_mut() {
            v.sort_unstable();
        }
        out
    }

    /// Every node with a pod of `netid`.
    fn netid_pod_nodes(&self, netid: u32) -> Affected {
        let mut a = Affected::none();
        a.nodes.extend(self.netid_members(netid).into_keys());
        a
    }

    /// The nodes whose multicast flows a change of `netid` (its namespaces, their pods, the
    /// NETID itself) may touch: those with pods of it, when any of its namespaces has the
    /// annotation; none otherwise.
    pub(super) fn multicast_nodes(&self, netid: u32) -> Affected {
        let names = self.namespaces_with_netid(netid);
        if names
            .iter()
            .any(|n| self.namespaces.get(n).is_some_and(|e| e.multicast))
        {
            self.netid_pod_nodes(netid)
        } else {
            Affected::none()
        }
    }

    /// The nodes a pod's arrival or departure touches through multicast: every node with a
    /// pod of its NETID (their replication groups name the pod's node) and its own node.
    pub(super) fn multicast_nodes_of_pod(&self, pod: &PodInfo) -> Affected {
        if !self.namespace_multicast_enabled(&pod.key.namespace) {
            return Affected::none();
        }
        let mut a = self.netid_pod_nodes(self.effective_netid(&pod.key.namespace));
        a.nodes.insert(pod.node.clone());
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClusterNetworkConfig;

    fn cluster(mode: Mode) -> ClusterModel {
        let config = ClusterNetworkConfig::new(
            "10.128.0.0/14".parse().expect("cidr"),
            23,
            "172.30.0.0/16".parse().expect("cidr"),
            mode,
        );
        let mut m = ClusterModel::new(config).expect("model");
        for (i, n) in ["n1", "n2", "n3"].into_iter().enumerate() {
            m.add_node(n, Ipv4Addr::new(192, 168, 0, 1 + i as u8), 1 + i as u64)
                .expect("node");
        }
        for ns in ["default", "a", "b"] {
            m.add_namespace(ns).expect("ns");
        }
        for (ns, name, node, port) in [
            ("a", "a1", "n1", 3),
            ("a", "a2", "n2", 3),
            ("b", "b1", "n3", 3),
        ] {
            m.add_pod(PodAttach {
                namespace: ns,
                name,
                node,
                port_name: name,
                ofport: port,
            })
            .expect("pod");
        }
        m
    }

    #[test]
    fn values() {
        assert_eq!(parse_multicast_value("true"), Ok(true));
        assert_eq!(parse_multicast_value(" False "), Ok(false));
        assert!(parse_multicast_value("yes").is_err());
        assert!(parse_multicast_value("").is_err());
    }

    #[test]
    fn enabling_affects_the_nodes_of_the_netid_only() {
        let mut m = cluster(Mode::Multitenant);
        let a = m.set_multicast("a", true).expect("set");
        assert_eq!(a.nodes, ["n1", "n2"].map(String::from).into());
        assert!(m.namespace_multicast_enabled("a"));
        assert!(!m.namespace_multicast_enabled("b"));
        assert!(m.set_multicast("a", true).expect("again").is_empty());
        assert!(matches!(
            m.set_multicast("nope", true),
            Err(ModelError::UnknownNamespace(_))
        ));
        // A pod of an enabled NETID touches every node of the NETID; of another, its own.
        let (_, a) = m
            .add_pod(PodAttach {
                namespace: "a",
                name: "a3",
                node: "n3",
                port_name: "a3",
                ofport: 4,
            })
            .expect("pod");
        assert_eq!(a.nodes, ["n1", "n2", "n3"].map(String::from).into());
        let a = m.delete_pod("a", "a3").expect("delete");
        assert_eq!(a.nodes, ["n1", "n2", "n3"].map(String::from).into());
        let (_, a) = m
            .add_pod(PodAttach {
                namespace: "b",
                name: "b2",
                node: "n1",
                port_name: "b2",
                ofport: 5,
            })
            .expect("pod");
        assert_eq!(a.nodes, ["n1"].map(String::from).into());
    }

    #[test]
    fn a_shared_netid_needs_every_namespace() {
        let mut m = cluster(Mode::Multitenant);
        m.set_multicast("a", true).expect("set");
        let a = m.join(&["b"], "a").expect("join");
        // Joining b (not annotated) switches a's multicast off: a's nodes and b's change.
        assert_eq!(a.nodes, ["n1", "n2", "n3"].map(String::from).into());
        assert!(!m.namespace_multicast_enabled("a"));
        m.set_multicast("b", true).expect("set");
        assert!(m.namespace_multicast_enabled("a") && m.namespace_multicast_enabled("b"));
        m.set_multicast("b", false).expect("clear");
        // Deleting the one that did not ask enables it again for the other.
        let a = m.delete_namespace("b").expect("delete");
        assert!(a.nodes.contains("n1") && a.nodes.contains("n2"));
        assert!(m.namespace_multicast_enabled("a"));
    }

    #[test]
    fn global_is_no_wildcard_and_subnet_mode_has_none() {
        let mut m = cluster(Mode::Multitenant);
        m.set_multicast("a", true).expect("set");
        m.make_global("a").expect("global");
        // NETID 0 is shared with default, which did not ask.
        assert!(!m.namespace_multicast_enabled("a"));
        m.set_multicast("default", true).expect("set");
        assert!(m.namespace_multicast_enabled("a"));
        assert!(m.multicast_enabled(0));

        let mut s = cluster(Mode::Subnet);
        s.set_multicast("a", true).expect("kept");
        assert_eq!(s.multicast_annotated("a"), Some(true));
        assert!(!s.namespace_multicast_enabled("a"));
    }

    #[test]
    fn the_annotation_survives_snapshot_and_restore() {
        let mut m = cluster(Mode::Multitenant);
        m.set_multicast("a", true).expect("set");
        let r = ClusterModel::restore(&m.snapshot()).expect("restore");
        assert_eq!(r.multicast_annotated("a"), Some(true));
        assert_eq!(r.multicast_annotated("b"), Some(false));
        assert_eq!(r.snapshot(), m.snapshot());
    }
}

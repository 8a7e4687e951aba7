//! Multicast flows and groups of one node (tables 110, 111, 120), for every NETID that has
//! multicast (see `model::multicast` for the rules) and a pod on the node.
//!
//! Per such NETID `N` (cookie: feature Multicast, kind NETID, object N):
//! * t110 p100 `reg0=N` → goto 111 (from local pods; every other multicast is dropped by
//!   the table's default);
//! * t111 p100 `reg0=N` → `group:0x02000000+N`, goto 120: head-end replication, one bucket
//!   per *other* node that has a pod of N (`move:reg0→tun_id`, `set_field:IP→tun_dst`,
//!   `output:1`), sorted by node IP; no bucket when there is none;
//! * t120 p100 `reg0=N` → `group:0x01000000+N`: local delivery, one bucket `output:PORT` per
//!   local pod of N, sorted by ofport (OVS skips the bucket of the sender's own port).
//!
//! Both groups are `all` groups. The flows of N stay as they are while pods come and go; only
//! the groups' buckets change (OFPGC_MODIFY), and a NETID's flows and groups appear and go
//! with its first and last local pod.

use super::builder::{FlowBuilder, PipelineError};
use super::cookie::{self, Feature, ObjectKind};
use super::groups::{group_id, GroupPurpose};
use super::priority::Band;
use super::regs;
use super::tables::TableId;
use crate::model::{ClusterModel, PodInfo};
use ofproto::{Action, Bucket, Flow, Group, GroupType, Match};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// The cookie of a NETID's multicast flows.
pub fn multicast_cookie(netid: u32) -> u64 {
    cookie::cookie(Feature::Multicast, ObjectKind::NetId, netid)
}

/// What one NETID's multicast on one node depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MulticastInputs {
    /// The NETID.
    pub netid: u32,
    /// ofports of its local pods, sorted.
    pub local_ports: Vec<u32>,
    /// Underlay IPs of the other nodes with pods of it, sorted.
    pub remote_nodes: Vec<Ipv4Addr>,
}

/// The multicast inputs of `node`: one entry per NETID with multicast and a local pod.
pub fn node_inputs(model: &ClusterModel, node: &str) -> Vec<MulticastInputs> {
    let pods: Vec<&PodInfo> = model.pods_on_node(node).collect();
    pods_inputs(model, node, &pods)
}

/// [`node_inputs`] of the node's pods `pods`.
fn pods_inputs(model: &ClusterModel, node: &str, pods: &[&PodInfo]) -> Vec<MulticastInputs> {
    let mut enabled: BTreeMap<u32, bool> = BTreeMap::new();
    for p in pods {
        if !model.multicast_annotated(&p.key.namespace).unwrap_or(false) {
            continue; // every namespace of the NETID must have it: this one has not
        }
        let netid = model.effective_netid(&p.key.namespace);
        enabled
            .entry(netid)
            .or_insert_with(|| model.multicast_enabled(netid));
    }
    let mut out = Vec::new();
    for (netid, on) in enabled {
        if !on {
            continue;
        }
        let members = model.netid_members(netid);
        let local_ports = members.get(node).cloned().unwrap_or_default();
        let mut remote_nodes: Vec<Ipv4Addr> = members
            .keys()
            .filter(|n| n.as_str() != node)
            .filter_map(|n| model.node(n).map(|i| i.ip))
            .collect();
        remote_nodes.sort_unstable();
        out.push(MulticastInputs {
            netid,
            local_ports,
            remote_nodes,
        });
    }
    out
}

/// The flows (unsorted) and groups of one NETID's multicast on one node.
pub fn netid_multicast(i: &MulticastInputs) -> Result<([Flow; 3], [Group; 2]), PipelineError> {
    use TableId as T;
    let ck = multicast_cookie(i.netid);
    let m = || Match::new().reg(regs::REG_SRC_NETID, i.netid);
    let local = group_id(GroupPurpose::MulticastLocal, i.netid);
    let remote = group_id(GroupPurpose::MulticastRemote, i.netid);
    let flows = [
        FlowBuilder::new(T::MulticastFilter, Band::PerObject, ck)
            .matching(m())
            .goto(T::MulticastReplicate)
            .build()?,
        FlowBuilder::new(T::MulticastReplicate, Band::PerObject, ck)
            .matching(m())
            .action(Action::Group(remote))
            .goto(T::MulticastDeliver)
            .build()?,
        FlowBuilder::new(T::MulticastDeliver, Band::PerObject, ck)
            .matching(m())
            .action(Action::Group(local))
            .build()?,
    ];
    let groups = [
        Group {
            group_id: local,
            group_type: GroupType::All,
            buckets: i
                .local_ports
                .iter()
                .map(|p| Bucket::new(vec![Action::output(*p)]))
                .collect(),
        },
        Group {
            group_id: remote,
            group_type: GroupType::All,
            buckets: i
                .remote_nodes
                .iter()
                .map(|ip| Bucket::new(regs::to_tunnel(*ip)))
                .collect(),
        },
    ];
    Ok((flows, groups))
}

/// Every multicast flow (sorted) and group (by id) of `node`.
pub fn node_multicast(
    model: &ClusterModel,
    node: &str,
) -> Result<(Vec<Flow>, Vec<Group>), PipelineError> {
    let pods: Vec<&PodInfo> = model.pods_on_node(node).collect();
    pods_multicast(model, node, &pods)
}

/// [`node_multicast`] of the node's pods `pods` (looked up once by the caller).
pub(super) fn pods_multicast(
    model: &ClusterModel,
    node: &str,
    pods: &[&PodInfo],
) -> Result<(Vec<Flow>, Vec<Group>), PipelineError> {
    let mut flows = Vec::new();
    let mut groups = Vec::new();
    for i in pods_inputs(model, node, pods) {
        let (f, g) = netid_multicast(&i)?;
        flows.extend(f);
        groups.extend(g);
    }
    flows.sort_unstable_by(super::flowset::key_cmp);
    groups.sort_by_key(|g| g.group_id);
    Ok((flows, groups))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClusterNetworkConfig, Mode};
    use crate::model::PodAttach;

    fn cluster() -> ClusterModel {
        let config = ClusterNetworkConfig::new(
            "10.128.0.0/14".parse().expect("cidr"),
            23,
            "172.30.0.0/16".parse().expect("cidr"),
            Mode::Multitenant,
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
            ("a", "a1", "n1", 5),
            ("a", "a2", "n1", 3),
            ("a", "a3", "n2", 3),
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
    fn nothing_without_the_annotation() {
        let m = cluster();
        for n in ["n1", "n2", "n3"] {
            let (f, g) = node_multicast(&m, n).expect("flows");
            assert!(f.is_empty() && g.is_empty());
        }
    }

    #[test]
    fn groups_name_local_ports_and_other_nodes_with_pods() {
        let mut m = cluster();
        m.set_multicast("a", true).expect("set");
        let netid = m.effective_netid("a");
        let i = node_inputs(&m, "n1");
        assert_eq!(
            i,
            vec![MulticastInputs {
                netid,
                local_ports: vec![3, 5],
                remote_nodes: vec![Ipv4Addr::new(192, 168, 0, 2)], // n3 has no pod of a
            }]
        );
        let (f, g) = node_multicast(&m, "n1").expect("flows");
        assert_eq!(f.len(), 3);
        assert_eq!(
            f.iter().map(|f| f.table).collect::<Vec<_>>(),
            vec![110, 111, 120]
        );
        assert_eq!(
            g.iter().map(|g| g.group_id).collect::<Vec<_>>(),
            vec![0x0100_0000 + netid, 0x0200_0000 + netid]
        );
        assert_eq!(g[0].buckets.len(), 2);
        assert_eq!(g[1].buckets.len(), 1);
        assert!(node_multicast(&m, "n3").expect("flows").0.is_empty());
        // The flows stay when a pod leaves a node that keeps another; only the group changes.
        m.delete_pod("a", "a2").expect("delete");
        let (f2, g2) = node_multicast(&m, "n1").expect("flows");
        assert_eq!(f2, f);
        assert_eq!(g2[0].buckets.len(), 1);
        assert_eq!(g2[1], g[1]);
    }

    /// A pod arriving on another node changes only the replication group of the nodes that
    /// have pods of the NETID: one group modify, no flow change.
    #[test]
    fn pods_coming_and_going_modify_groups_in_place() {
        use crate::FlowSet;
        let mut m = cluster();
        m.set_multicast("a", true).expect("set");
        let before = crate::pipeline::compute_node(&m, "n2").expect("flows");
        m.add_pod(PodAttach {
            namespace: "a",
            name: "a4",
            node: "n3",
            port_name: "a4",
            ofport: 7,
        })
        .expect("pod");
        let after = crate::pipeline::compute_node(&m, "n2").expect("flows");
        let d = FlowSet::diff(&before, &after);
        assert!(d.adds.is_empty() && d.deletes.is_empty() && d.modifies.is_empty());
        assert!(d.group_adds.is_empty() && d.group_deletes.is_empty());
        let netid = m.effective_netid("a");
        assert_eq!(
            d.group_modifies
                .iter()
                .map(|g| (g.group_id, g.buckets.len()))
                .collect::<Vec<_>>(),
            vec![(0x0200_0000 + netid, 2)]
        );
        // The last pod of the NETID leaving a node removes its flows and groups there.
        let before = crate::pipeline::compute_node(&m, "n3").expect("flows");
        m.delete_pod("a", "a4").expect("delete");
        let after = crate::pipeline::compute_node(&m, "n3").expect("flows");
        let d = FlowSet::diff(&before, &after);
        let multicast_deletes = d
            .deletes
            .iter()
            .filter(|f| [110, 111, 120].contains(&f.table))
            .count();
        assert_eq!((multicast_deletes, d.group_deletes.len()), (3, 2));
    }

    /// Where a multicast UDP datagram (or IGMP report) from `ns/pod` is delivered, sorted,
    /// with the nodes its VXLAN copies went to.
    fn send(
        m: &ClusterModel,
        ns: &str,
        pod: &str,
        proto: u8,
    ) -> (Vec<(String, String)>, Vec<String>) {
        use crate::sim::{Packet, Simulator, L3};
        let sets: BTreeMap<String, crate::FlowSet> = m
            .nodes()
            .map(|n| {
                (
                    n.name.clone(),
                    crate::pipeline::compute_node(m, &n.name).expect("flows"),
                )
            })
            .collect();
        let p = m.pod(ns, pod).cloned().expect("pod");
        let (dst, port) = if proto == 2 {
            (Ipv4Addr::new(224, 0, 0, 22), 0)
        } else {
            (Ipv4Addr::new(239, 1, 2, 3), 5000)
        };
        let pkt = Packet::l3(
            p.ofport,
            p.mac(),
            [0x01, 0x00, 0x5e, 0x01, 0x02, 0x03],
            L3::Ipv4 {
                src: p.ip,
                dst,
                proto,
                src_port: 40000,
                dst_port: port,
            },
        );
        let t = Simulator::from_model(m, &sets).trace(&p.node, pkt);
        let mut got: Vec<(String, String)> = t
            .delivered()
            .into_iter()
            .map(|(n, p)| (n.to_string(), p.to_string()))
            .collect();
        got.sort();
        let mut hops: Vec<String> = t.tunnels.iter().filter_map(|h| h.to.clone()).collect();
        hops.sort();
        (got, hops)
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn every_pod_of_the_netid_once_and_no_other() {
        let mut m = cluster();
        // Without the annotation nothing is delivered.
        assert_eq!(send(&m, "a", "a1", 17), (vec![], vec![]));
        m.set_multicast("a", true).expect("set");
        // From n1: the other local pod and the pod on n2; n3 (no pod of a) gets no copy.
        assert_eq!(
            send(&m, "a", "a1", 17),
            (pairs(&[("n1", "a2"), ("n2", "a3")]), vec!["n2".to_string()])
        );
        assert_eq!(
            send(&m, "a", "a3", 17),
            (pairs(&[("n1", "a1"), ("n1", "a2")]), vec!["n1".to_string()])
        );
        // IGMP goes the same way.
        assert_eq!(
            send(&m, "a", "a1", 2).0,
            pairs(&[("n1", "a2"), ("n2", "a3")])
        );
        // b did not ask.
        assert_eq!(send(&m, "b", "b1", 17), (vec![], vec![]));
        // A pod of a on n3: n3 now gets one copy.
        m.add_pod(PodAttach {
            namespace: "a",
            name: "a4",
            node: "n3",
            port_name: "a4",
            ofport: 7,
        })
        .expect("pod");
        assert_eq!(
            send(&m, "a", "a1", 17),
            (
                pairs(&[("n1", "a2"), ("n2", "a3"), ("n3", "a4")]),
                vec!["n2".to_string(), "n3".to_string()]
            )
        );
        // b joined to a without the annotation switches it off for both; with it, b's pod
        // receives too.
        m.join(&["b"], "a").expect("join");
        assert_eq!(send(&m, "a", "a1", 17), (vec![], vec![]));
        m.set_multicast("b", true).expect("set");
        assert!(send(&m, "a", "a1", 17)
            .0
            .contains(&("n3".into(), "b1".into())));
    }

    #[test]
    fn a_global_project_gets_only_netid_0_multicast() {
        let mut m = cluster();
        m.set_multicast("a", true).expect("set");
        m.make_global("b").expect("global");
        m.set_multicast("b", true).expect("set");
        // b (global, annotated) does not receive a's multicast.
        assert_eq!(
            send(&m, "a", "a1", 17).0,
            pairs(&[("n1", "a2"), ("n2", "a3")])
        );
        // NETID 0 needs default too.
        assert_eq!(send(&m, "b", "b1", 17).0, vec![]);
        m.set_multicast("default", true).expect("set");
        m.add_pod(PodAttach {
            namespace: "default",
            name: "d1",
            node: "n1",
            port_name: "d1",
            ofport: 9,
        })
        .expect("pod");
        assert_eq!(send(&m, "b", "b1", 17).0, pairs(&[("n1", "d1")]));
    }

    #[test]
    fn networkpolicy_mode_delivers_to_the_namespace() {
        let config = ClusterNetworkConfig::new(
            "10.128.0.0/14".parse().expect("cidr"),
            23,
            "172.30.0.0/16".parse().expect("cidr"),
            Mode::Networkpolicy,
        );
        let mut m = ClusterModel::new(config).expect("model");
        for (i, n) in ["n1", "n2"].into_iter().enumerate() {
            m.add_node(n, Ipv4Addr::new(192, 168, 0, 1 + i as u8), 1 + i as u64)
                .expect("node");
        }
        m.add_namespace("a").expect("ns");
        for (name, node) in [("a1", "n1"), ("a2", "n2")] {
            m.add_pod(PodAttach {
                namespace: "a",
                name,
                node,
                port_name: name,
                ofport: 3,
            })
            .expect("pod");
        }
        m.set_multicast("a", true).expect("set");
        assert_eq!(send(&m, "a", "a1", 17).0, pairs(&[("n2", "a2")]));
    }
}

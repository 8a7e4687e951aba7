//! Table 101, egress IPs: for every NETID with requested egress IPs, its outside traffic goes
//! to a select group (group id = NETID, see [`super::groups`]) with one bucket per usable
//! egress node, or is dropped when there is none. Tables 31 → 99 → 100 → 101 are reached only
//! by traffic to destinations outside the cluster and service networks, so pod-to-pod and
//! pod-to-service traffic never meets these flows.
//!
//! Per NETID `V` with requested IPs, on every node:
//!
//! | priority | match | actions |
//! |---|---|---|
//! | 1000 | `ip,reg0=V,ct_state=-trk` | `ct(table=101)` (track it, so replies are told apart) |
//! | 200 | `ip,reg0=V,ct_state=+trk+rpl` | `output:2` (replies never use an egress IP) |
//! | 190 | `in_port=1,ip,reg0=V` | drop (only where this node hosts none of V's IPs: a packet tunnelled here for an IP this node no longer holds is neither relayed nor sent out with the node's address) |
//! | 100 | `ip,reg0=V` | `group:V`, preceded by `ct(commit)` when every bucket is remote; drop when V has no usable egress IP |
//!
//! Group `V` (select): on a node hosting one of V's IPs, only the local bucket
//! `set_field:<egress MAC>->eth_src,set_field:<gateway MAC>->eth_dst,set_field:<mark>->pkt_mark,
//! output:2` (the host marks what arrives on tun0 from the egress MAC and SNATs the mark to the
//! egress IP; the kernel datapath also carries `pkt_mark` into the skb mark); elsewhere one bucket per usable egress node
//! `move:reg0->tun_id[0..31],set_field:<node IP>->tun_dst,output:1`. The gateway MAC is
//! `0a:58:` + the gateway IPv4 bytes (the shim gives tun0 that address); the mark is
//! [`egress_mark`]`(V)`; the egress MAC is [`egress_src_mac`]`(V)`. Traffic tunnelled to the egress node keeps reg0 = V, so there it goes
//! 0 → 10 → 30 → 31 → 99 → 100 → 101 like local traffic (the egress firewall of table 100
//! applies on the egress node too) and takes the local bucket.

use super::builder::{FlowBuilder, PipelineError};
use super::cookie::{self, Feature, ObjectKind};
use super::groups::{group_id, GroupPurpose};
use super::priority::Band;
use super::regs::{self, OFPORT_TUN0, OFPORT_VXLAN};
use super::tables::TableId;
use crate::alloc::pod_mac;
use crate::model::{egress_mark, ClusterModel, EgressPlan, NodeInfo};
use ofproto::oxm::ct_state::{RPL, TRK};
use ofproto::oxm::eth_type::IPV4;
use ofproto::{Action, Bucket, Field, Flow, Group, GroupType, Match};

/// Weight of every bucket: all egress nodes of a NETID share its connections equally.
pub const BUCKET_WEIGHT: u16 = 100;

/// The cookie of NETID `netid`'s egress-IP flows.
pub fn egress_cookie(netid: u32) -> u64 {
    cookie::cookie(Feature::EgressIp, ObjectKind::NetId, netid)
}

/// The MAC tun0 carries on a node (`0a:58:` + gateway IPv4 bytes): the destination MAC of
/// egress traffic handed to the egress node's host.
pub fn gateway_mac(node: &NodeInfo) -> [u8; 6] {
    pod_mac(node.gateway())
}

/// The source MAC the local bucket of NETID `netid`'s group writes (`0a:59:00` + the NETID's
/// three bytes): the egress node's host selects the NETID's SNAT by it, because with the
/// userspace datapath the packet mark does not reach the kernel (see docs/pipeline.md).
pub fn egress_src_mac(netid: u32) -> [u8; 6] {
    let b = netid.to_be_bytes();
    [0x0a, 0x59, 0x00, b[1], b[2], b[3]]
}

/// Table 101's flows and the egress groups of `node`, sorted.
pub fn egress_flows(
    model: &ClusterModel,
    node: &NodeInfo,
) -> Result<(Vec<Flow>, Vec<Group>), PipelineError> {
    let plan = model.egress_plan();
    egress_flows_for(model, &plan, node)
}

/// As [`egress_flows`], with the plan already computed.
pub fn egress_flows_for(
    model: &ClusterModel,
    plan: &EgressPlan,
    node: &NodeInfo,
) -> Result<(Vec<Flow>, Vec<Group>), PipelineError> {
    use TableId as T;
    let mut flows = Vec::with_capacity(plan.netids.len() * 4);
    let mut groups = Vec::new();
    for (&netid, usable) in &plan.netids {
        let ck = egress_cookie(netid);
        let fb = |b| FlowBuilder::new(T::EgressIp, b, ck);
        let this = || Match::new().eth_type(IPV4).reg(regs::REG_SRC_NETID, netid);
        flows.push(
            fb(Band::Conntrack)
                .matching(this().ct_state(0, TRK))
                .action(regs::ct_recirc(T::EgressIp.number()))
                .build()?,
        );
        flows.push(
            fb(Band::General)
                .matching(this().ct_state(TRK | RPL, TRK | RPL))
                .action(Action::output(OFPORT_TUN0))
                .build()?,
        );
        let local = usable.iter().any(|(n, _)| *n == node.name);
        if usable.is_empty() {
            flows.push(fb(Band::PerObject).matching(this()).build()?);
            continue;
        }
        let gid = group_id(GroupPurpose::EgressIp, netid);
        let buckets: Vec<Bucket> = if local {
            vec![Bucket {
                weight: BUCKET_WEIGHT,
                ..Bucket::new(vec![
                    Action::set_field(Field::EthSrc, &egress_src_mac(netid)),
                    Action::set_field(Field::EthDst, &gateway_mac(node)),
                    Action::set_field_u64(Field::PktMark, u64::from(egress_mark(netid))),
                    Action::output(OFPORT_TUN0),
                ])
            }]
        } else {
            usable
                .iter()
                .filter_map(|(n, _)| model.node(n))
                .map(|n| Bucket {
                    weight: BUCKET_WEIGHT,
                    ..Bucket::new(regs::to_tunnel(n.ip))
                })
                .collect()
        };
        groups.push(Group {
            group_id: gid,
            group_type: GroupType::Select,
            buckets,
        });
        if !local {
            flows.push(
                fb(Band::EgressNoRelay)
                    .matching(this().in_port(OFPORT_VXLAN))
                    .build()?,
            );
        }
        let actions = if local {
            vec![Action::Group(gid)]
        } else {
            vec![regs::ct_commit(), Action::Group(gid)]
        };
        flows.push(
            fb(Band::PerObject)
                .matching(this())
                .actions(actions)
                .build()?,
        );
    }
    flows.sort_by(super::flowset::key_cmp);
    groups.sort_by_key(|g| g.group_id);
    Ok((flows, groups))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClusterNetworkConfig, Mode};
    use crate::model::{HostSubnetEgress, PodAttach};
    use crate::pipeline::compute_node;
    use crate::sim::{Outcome, Packet, Simulator};
    use std::collections::BTreeMap;
    use std::net::Ipv4Addr;

    const OUTSIDE: Ipv4Addr = Ipv4Addr::new(192, 168, 50, 9);

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().expect("ip")
    }

    /// Three nodes on 192.168.0.0/24, namespaces `a` and `b` with a pod on every node.
    fn cluster(mode: Mode) -> ClusterModel {
        let config = ClusterNetworkConfig::new(
            "10.128.0.0/14".parse().expect("cidr"),
            23,
            "172.30.0.0/16".parse().expect("cidr"),
            mode,
        );
        let mut m = ClusterModel::new(config).expect("model");
        for i in 1..=3u8 {
            m.add_node(
                &format!("n{i}"),
                Ipv4Addr::new(192, 168, 0, i),
                u64::from(i),
            )
            .expect("node");
        }
        for ns in ["a", "b"] {
            m.add_namespace(ns).expect("ns");
            for i in 1..=3u8 {
                let name = format!("{ns}{i}");
                m.add_pod(PodAttach {
                    namespace: ns,
                    name: &name,
                    node: &format!("n{i}"),
                    port_name: &name,
                    ofport: if ns == "a" { 3 } else { 4 },
                })
                .expect("pod");
            }
        }
        m
    }

    fn sets(m: &ClusterModel) -> BTreeMap<String, crate::FlowSet> {
        m.nodes()
            .map(|n| (n.name.clone(), compute_node(m, &n.name).expect("flows")))
            .collect()
    }

    /// Where a packet from pod `ns/pod` to `dst` ends: (node whose host got it, pkt_mark).
    fn egress_of(m: &ClusterModel, ns: &str, pod: &str, dst: Ipv4Addr) -> Vec<Outcome> {
        let p = m.pod(ns, pod).cloned().expect("pod");
        let sim = Simulator::from_model(m, &sets(m));
        sim.trace(&p.node, Packet::l4(p.ofport, p.mac(), p.ip, dst, 6, 443))
            .outcomes
    }

    /// Node `node` hosts `addr` (manual `HostSubnet.egressIPs`) and namespace `ns` asks for it.
    fn manual_egress(m: &mut ClusterModel, node: &str, ns: &str, addr: &str) {
        m.set_host_subnet_egress(
            node,
            HostSubnetEgress {
                egress_ips: vec![ip(addr)],
                egress_cidrs: vec![],
            },
        )
        .expect("hostsubnet");
        m.set_namespace_egress_ips(ns, &[ip(addr)])
            .expect("netnamespace");
    }

    fn host(node: &str) -> Outcome {
        Outcome::Host { node: node.into() }
    }

    /// The egress node holds the NETID's egress firewall even without pods of it: traffic
    /// relayed to it over VXLAN is judged there (t100) before it takes the local bucket.
    #[test]
    fn the_egress_node_holds_the_netids_firewall() {
        use crate::model::{EgressAction, EgressFirewall, EgressRule, EgressTo};
        let mut m = cluster(Mode::Multitenant);
        m.delete_pod("a", "a2").expect("a2 gone");
        let netid = m.effective_netid("a");
        let t100 = |m: &ClusterModel, node: &str| {
            compute_node(m, node)
                .expect("flows")
                .table(100)
                .filter(|f| f.to_string().contains(&format!("reg0={netid:#x}")))
                .count()
        };
        m.apply_egress_firewall(EgressFirewall {
            namespace: "a".into(),
            name: "fw".into(),
            rules: vec![EgressRule {
                action: EgressAction::Deny,
                to: EgressTo::Cidr("192.168.50.0/24".parse().expect("cidr")),
            }],
        })
        .expect("firewall");
        assert!(t100(&m, "n1") > 0);
        assert_eq!(t100(&m, "n2"), 0, "no pod of a, no egress IP yet");
        manual_egress(&mut m, "n2", "a", "192.168.0.100");
        assert_eq!(
            t100(&m, "n2"),
            t100(&m, "n1"),
            "the egress node judges a's traffic"
        );
        assert!(m.nodes_of_netid(netid).nodes.contains("n2"));
    }

    #[test]
    fn manual_egress_ip_steers_every_node_to_the_egress_node() {
        let mut m = cluster(Mode::Multitenant);
        manual_egress(&mut m, "n2", "a", "192.168.0.100");
        for pod in ["a1", "a2", "a3"] {
            assert_eq!(egress_of(&m, "a", pod, OUTSIDE), vec![host("n2")], "{pod}");
        }
        // Namespace b leaves from its own node; in-cluster traffic is untouched.
        assert_eq!(egress_of(&m, "b", "b1", OUTSIDE), vec![host("n1")]);
        let a3 = m.pod("a", "a3").map(|p| p.ip).expect("a3");
        let t = egress_of(&m, "a", "a1", a3);
        assert!(
            matches!(t.as_slice(), [Outcome::Delivered { node, .. }] if node == "n3"),
            "{t:?}"
        );
        assert_eq!(
            egress_of(&m, "a", "a1", ip("172.30.0.10")),
            vec![host("n1")],
            "services go to the pod's own host"
        );
        // The local bucket marks the packet and addresses tun0's deterministic MAC.
        let n2 = m.node("n2").cloned().expect("n2");
        let netid = m.effective_netid("a");
        let (flows, groups) = egress_flows(&m, &n2).expect("flows");
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].group_id, netid);
        assert_eq!(
            groups[0].buckets[0].actions,
            vec![
                Action::set_field(Field::EthSrc, &egress_src_mac(netid)),
                Action::set_field(Field::EthDst, &gateway_mac(&n2)),
                Action::set_field_u64(Field::PktMark, u64::from(egress_mark(netid))),
                Action::output(2),
            ]
        );
        assert!(flows.iter().all(|f| f.cookie == egress_cookie(netid)));
        // Remote nodes commit (the reply is then +rpl); the egress node does not need to.
        let n1 = m.node("n1").cloned().expect("n1");
        let (flows1, _) = egress_flows(&m, &n1).expect("flows");
        assert_eq!(flows1.len(), 4, "{flows1:?}");
        assert_eq!(flows.len(), 3, "{flows:?}");
    }

    #[test]
    fn no_usable_node_drops_and_failover_moves_or_drops_buckets() {
        let mut m = cluster(Mode::Networkpolicy);
        m.set_namespace_egress_ips("a", &[ip("192.168.0.100")])
            .expect("netnamespace");
        // Requested, no node hosts it: dropped everywhere, never from the node's address.
        for pod in ["a1", "a2"] {
            let t = egress_of(&m, "a", pod, OUTSIDE);
            assert!(
                matches!(t.as_slice(), [Outcome::Dropped { by, .. }] if by.table == 101),
                "{t:?}"
            );
        }
        let st = &m.egress_plan().ips[&ip("192.168.0.100")];
        assert!(!st.usable);
        assert!(st.reason.as_deref().is_some_and(|r| r.contains("no node")));
        // Automatic: both n2 and n3 may host it; it goes to one of them.
        for n in ["n2", "n3"] {
            m.set_host_subnet_egress(
                n,
                HostSubnetEgress {
                    egress_ips: vec![],
                    egress_cidrs: vec!["192.168.0.0/24".parse().expect("cidr")],
                },
            )
            .expect("hostsubnet");
        }
        let first = m.egress_plan().ips[&ip("192.168.0.100")]
            .node
            .clone()
            .expect("placed");
        assert_eq!(first, "n2", "the fewest IPs, then by name");
        assert_eq!(egress_of(&m, "a", "a1", OUTSIDE), vec![host("n2")]);
        // n2 goes offline: the IP moves to n3.
        assert!(m.set_node_online("n2", false).all_nodes);
        assert_eq!(egress_of(&m, "a", "a1", OUTSIDE), vec![host("n3")]);
        // n2 back: the IP stays on n3 (healthy nodes keep their IPs).
        assert!(m.set_node_online("n2", true).is_empty());
        assert_eq!(egress_of(&m, "a", "a1", OUTSIDE), vec![host("n3")]);
        // Both down: dropped.
        m.set_node_online("n2", false);
        m.set_node_online("n3", false);
        let t = egress_of(&m, "a", "a1", OUTSIDE);
        assert!(
            matches!(t.as_slice(), [Outcome::Dropped { by, .. }] if by.table == 101),
            "{t:?}"
        );
    }

    #[test]
    fn manual_failover_keeps_the_other_nodes_bucket() {
        let mut m = cluster(Mode::Multitenant);
        for (n, e) in [("n2", "192.168.0.100"), ("n3", "192.168.0.101")] {
            m.set_host_subnet_egress(
                n,
                HostSubnetEgress {
                    egress_ips: vec![ip(e)],
                    egress_cidrs: vec![],
                },
            )
            .expect("hostsubnet");
        }
        m.set_namespace_egress_ips("a", &[ip("192.168.0.100"), ip("192.168.0.101")])
            .expect("netnamespace");
        let n1 = m.node("n1").cloned().expect("n1");
        let (_, groups) = egress_flows(&m, &n1).expect("flows");
        assert_eq!(groups[0].buckets.len(), 2, "connections spread over both");
        // Each bucket reaches its egress node.
        let p = m.pod("a", "a1").cloned().expect("a1");
        for (b, want) in [(0, "n2"), (1, "n3")] {
            let sim = Simulator::from_model(&m, &sets(&m))
                .with_options(crate::sim::TraceOptions { select_bucket: b });
            let t = sim.trace("n1", Packet::l4(3, p.mac(), p.ip, OUTSIDE, 6, 443));
            assert_eq!(t.outcomes, vec![host(want)]);
        }
        assert!(
            m.set_node_online("n2", false).all_nodes,
            "the manual bucket drops out"
        );
        let (_, groups) = egress_flows(&m, &n1).expect("flows");
        assert_eq!(groups[0].buckets.len(), 1);
        assert_eq!(egress_of(&m, "a", "a1", OUTSIDE), vec![host("n3")]);
        // A packet tunnelled to n2 (the old egress node) for NETID a is not sent out there.
        let n2 = m.node("n2").cloned().expect("n2");
        let (flows2, _) = egress_flows(&m, &n2).expect("flows");
        assert!(flows2
            .iter()
            .any(|f| f.priority == Band::EgressNoRelay.value() && f.instructions.is_empty()));
    }

    #[test]
    fn replies_never_use_the_egress_ip() {
        // networkpolicy mode commits a connection the host opened to a pod (table 80), so the
        // pod's answer is +rpl when it reaches table 101.
        let mut m = cluster(Mode::Networkpolicy);
        manual_egress(&mut m, "n2", "a", "192.168.0.100");
        let p = m.pod("a", "a1").cloned().expect("a1");
        let sim = Simulator::from_model(&m, &sets(&m));
        let mut inbound = Packet::l4(2, [2, 0, 0, 0, 0, 1], OUTSIDE, p.ip, 6, 8080);
        if let crate::sim::L3::Ipv4 { src_port, .. } = &mut inbound.l3 {
            *src_port = 55000;
        }
        let t = sim.trace("n1", inbound);
        assert_eq!(t.delivered(), vec![("n1", "a1")], "{t:?}");
        let mut reply = Packet::l4(p.ofport, p.mac(), p.ip, OUTSIDE, 6, 55000);
        if let crate::sim::L3::Ipv4 { src_port, .. } = &mut reply.l3 {
            *src_port = 8080;
        }
        let t = sim.trace("n1", reply);
        assert_eq!(t.outcomes, vec![host("n1")], "{t:?}");
        assert!(t
            .steps
            .iter()
            .any(|s| s.table == 101 && s.priority == Some(Band::General.value())));
        // A new connection from the same pod takes the egress IP.
        assert_eq!(egress_of(&m, "a", "a1", OUTSIDE), vec![host("n2")]);
    }

    #[test]
    fn validation_refuses_what_cannot_work() {
        let mut m = cluster(Mode::Multitenant);
        let one = |s: &str| vec![ip(s)];
        for (bad, what) in [
            ("10.128.4.5", "cluster network"),
            ("172.30.1.1", "service network"),
            ("192.168.0.1", "node n1"),
            ("224.0.0.5", "unicast"),
        ] {
            let e = m
                .set_namespace_egress_ips("a", &one(bad))
                .expect_err(bad)
                .to_string();
            assert!(e.contains(what), "{bad}: {e}");
        }
        m.set_namespace_egress_ips("a", &one("192.168.0.100"))
            .expect("ok");
        let e = m
            .set_namespace_egress_ips("b", &one("192.168.0.100"))
            .expect_err("claimed")
            .to_string();
        assert!(e.contains("netnamespace/a"), "{e}");
        let e = m
            .set_namespace_egress_ips("b", &[ip("192.168.0.7"), ip("192.168.0.7")])
            .expect_err("twice")
            .to_string();
        assert!(e.contains("twice"), "{e}");
        m.set_host_subnet_egress(
            "n1",
            HostSubnetEgress {
                egress_ips: one("192.168.0.100"),
                egress_cidrs: vec![],
            },
        )
        .expect("n1");
        let e = m
            .set_host_subnet_egress(
                "n2",
                HostSubnetEgress {
                    egress_ips: one("192.168.0.100"),
                    egress_cidrs: vec![],
                },
            )
            .expect_err("two nodes")
            .to_string();
        assert!(e.contains("hostsubnet/n1"), "{e}");
        let e = m
            .set_host_subnet_egress(
                "n2",
                HostSubnetEgress {
                    egress_ips: one("192.168.0.101"),
                    egress_cidrs: vec!["192.168.0.0/24".parse().expect("cidr")],
                },
            )
            .expect_err("both")
            .to_string();
        assert!(e.contains("not both"), "{e}");
        let e = m
            .set_host_subnet_egress(
                "n2",
                HostSubnetEgress {
                    egress_ips: vec![],
                    egress_cidrs: vec!["10.0.0.0/8".parse().expect("cidr")],
                },
            )
            .expect_err("overlap")
            .to_string();
        assert!(e.contains("cluster network"), "{e}");
        // A refused change changed nothing.
        assert_eq!(m.namespace_egress_ips("b"), &[] as &[Ipv4Addr]);
        assert!(m.host_subnet_egress("n2").is_empty());
    }

    #[test]
    fn automatic_placement_balances_and_keeps_one_ip_per_netid_per_node() {
        let mut m = cluster(Mode::Multitenant);
        m.add_namespace("c").expect("c");
        for n in ["n1", "n2", "n3"] {
            m.set_host_subnet_egress(
                n,
                HostSubnetEgress {
                    egress_ips: vec![],
                    egress_cidrs: vec!["192.168.0.0/24".parse().expect("cidr")],
                },
            )
            .expect("hostsubnet");
        }
        m.set_namespace_egress_ips("a", &[ip("192.168.0.100"), ip("192.168.0.101")])
            .expect("a");
        m.set_namespace_egress_ips("b", &[ip("192.168.0.110")])
            .expect("b");
        m.set_namespace_egress_ips("c", &[ip("192.168.0.120")])
            .expect("c");
        let plan = m.egress_plan();
        let mut per: BTreeMap<String, usize> = BTreeMap::new();
        for s in plan.ips.values() {
            assert!(s.usable, "{s:?}");
            assert!(s.automatic);
            *per.entry(s.node.clone().expect("node")).or_default() += 1;
        }
        assert_eq!(per.values().max(), Some(&2));
        assert_eq!(per.len(), 3, "{per:?}");
        let a_nodes: Vec<_> = plan.netids[&m.effective_netid("a")]
            .iter()
            .map(|(n, _)| n.clone())
            .collect();
        assert_eq!(a_nodes.len(), 2);
        assert_ne!(a_nodes[0], a_nodes[1], "one IP of a NETID per node");
        // Saved and restored: same placement, same flows.
        let snap = m.snapshot();
        let r = ClusterModel::restore(&snap).expect("restore");
        assert_eq!(r.egress_plan(), plan);
        for n in m.nodes() {
            assert_eq!(
                compute_node(&r, &n.name).expect("r"),
                compute_node(&m, &n.name).expect("m")
            );
        }
        // Deleting a node releases its IPs to the others; deleting a namespace its requests.
        let gone = plan.ips[&ip("192.168.0.110")]
            .node
            .clone()
            .expect("b's node");
        m.delete_node(&gone).expect("delete");
        assert!(m.egress_plan().ips[&ip("192.168.0.110")].usable);
        m.delete_namespace("c").expect("delete c");
        assert!(!m.egress_plan().ips.contains_key(&ip("192.168.0.120")));
    }

    /// A placement that differs from a fresh allocation (it moved on a failover) survives
    /// save and restore, whatever order the namespaces come back in.
    #[test]
    fn moved_placements_survive_a_restore() {
        let mut m = cluster(Mode::Multitenant);
        for n in ["n2", "n3"] {
            m.set_host_subnet_egress(
                n,
                HostSubnetEgress {
                    egress_ips: vec![],
                    egress_cidrs: vec!["192.168.0.0/24".parse().expect("cidr")],
                },
            )
            .expect("hostsubnet");
        }
        m.set_namespace_egress_ips("b", &[ip("192.168.0.100")])
            .expect("b");
        assert_eq!(
            m.egress_plan().ips[&ip("192.168.0.100")].node.as_deref(),
            Some("n2")
        );
        m.set_node_online("n2", false);
        m.set_node_online("n2", true);
        m.set_host_subnet_egress(
            "n1",
            HostSubnetEgress {
                egress_ips: vec![ip("192.168.0.101")],
                egress_cidrs: vec![],
            },
        )
        .expect("n1");
        m.set_namespace_egress_ips("a", &[ip("192.168.0.101")])
            .expect("a");
        let plan = m.egress_plan();
        assert_eq!(plan.ips[&ip("192.168.0.100")].node.as_deref(), Some("n3"));
        assert_eq!(plan.ips[&ip("192.168.0.101")].node.as_deref(), Some("n1"));
        let r = ClusterModel::restore(&m.snapshot()).expect("restore");
        assert_eq!(r.egress_plan(), plan);
    }

    #[test]
    fn egress_macs_are_local_unicast_and_carry_the_netid() {
        assert_eq!(
            egress_src_mac(0x00ab_cdef),
            [0x0a, 0x59, 0, 0xab, 0xcd, 0xef]
        );
        assert_eq!(egress_src_mac(0), [0x0a, 0x59, 0, 0, 0, 0]);
        assert_eq!(
            egress_src_mac(1)[0] & 0x03,
            0x02,
            "locally administered unicast"
        );
    }

    #[test]
    fn the_mark_avoids_the_kubelet_and_kube_proxy_bits() {
        assert_eq!(egress_mark(0), 0xff00_0000);
        assert_eq!(egress_mark(42), 42);
        assert_eq!(egress_mark(0x8000 | 0x4000 | 7), 0x1100_0007);
    }
}

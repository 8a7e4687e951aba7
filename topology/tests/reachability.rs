//! Done-when properties: the simulated reachability of every pod pair equals DESIGN §3's
//! isolation rule; spoofing is dropped; ARP resolves; the host reaches its local pods.

mod common;

use common::*;
use proptest::prelude::*;
use std::net::Ipv4Addr;
use topology::sim::{Outcome, Packet, Simulator};
use topology::{ClusterModel, Mode, PodInfo};

fn allowed(m: &ClusterModel, a: &PodInfo, b: &PodInfo) -> bool {
    let (x, y) = (
        m.effective_netid(&a.key.namespace),
        m.effective_netid(&b.key.namespace),
    );
    m.config().mode == Mode::Subnet || x == y || x == 0 || y == 0
}

fn check_cluster(m: &ClusterModel) -> Result<(), TestCaseError> {
    let flows = all_flows(m);
    let sim = Simulator::from_model(m, &flows);
    let pods: Vec<&PodInfo> = m.pods().collect();
    for a in &pods {
        let node_a = m.node(&a.node).expect("node");
        for b in &pods {
            if a.key == b.key {
                continue;
            }
            // IPv4 a -> b.
            let t = sim.trace(&a.node, Packet::ipv4(a.ofport, a.mac(), a.ip, b.ip));
            let want: Vec<(&str, &str)> = if allowed(m, a, b) {
                vec![(b.node.as_str(), b.port_name.as_str())]
            } else {
                vec![]
            };
            prop_assert_eq!(t.delivered(), want, "{} -> {}: {:?}", a.key, b.key, t);
            if !allowed(m, a, b) {
                prop_assert!(t.dropped());
                // Dropped on the receiving node, in table 80.
                let last = t.steps.last().expect("steps");
                prop_assert_eq!((last.node.as_str(), last.table), (b.node.as_str(), 80));
            }
            // ARP resolves every pod, local or remote, regardless of NETIDs.
            let t = sim.trace(&a.node, Packet::arp_request(a.ofport, a.mac(), a.ip, b.ip));
            prop_assert_eq!(
                t.delivered(),
                vec![(b.node.as_str(), b.port_name.as_str())],
                "ARP {} -> {}",
                a.key,
                b.key
            );
            // Spoofed source IP (b's), MAC (b's) and ARP sha: dropped.
            let t = sim.trace(&a.node, Packet::ipv4(a.ofport, a.mac(), b.ip, b.ip));
            prop_assert!(t.dropped(), "spoofed IP delivered: {:?}", t);
            let t = sim.trace(&a.node, Packet::ipv4(a.ofport, b.mac(), a.ip, b.ip));
            prop_assert!(t.dropped(), "spoofed MAC delivered: {:?}", t);
            let mut arp = Packet::arp_request(a.ofport, a.mac(), a.ip, b.ip);
            if let topology::sim::L3::Arp { sha, .. } = &mut arp.l3 {
                *sha = b.mac();
            }
            prop_assert!(sim.trace(&a.node, arp).dropped(), "spoofed ARP sha");
            // VXLAN injection from a pod: dropped even towards an allowed peer.
            let t = sim.trace(&a.node, Packet::l4(a.ofport, a.mac(), a.ip, b.ip, 17, 4789));
            prop_assert!(t.dropped(), "VXLAN injection: {:?}", t);
        }
        // The host reaches its local pods; pods reach the host, services and the outside.
        let gw = node_a.gateway();
        let t = sim.trace(&a.node, Packet::ipv4(2, [0x0a, 0x58, 0, 0, 0, 1], gw, a.ip));
        prop_assert_eq!(t.delivered(), vec![(a.node.as_str(), a.port_name.as_str())]);
        for dst in [gw, Ipv4Addr::new(172, 30, 0, 10), Ipv4Addr::new(8, 8, 8, 8)] {
            let t = sim.trace(&a.node, Packet::ipv4(a.ofport, a.mac(), a.ip, dst));
            prop_assert_eq!(t.to_host(), vec![a.node.as_str()], "to {}", dst);
        }
        // DNS to the node's own IP goes to the host.
        let t = sim.trace(
            &a.node,
            Packet::l4(a.ofport, a.mac(), a.ip, node_a.ip, 17, 53),
        );
        prop_assert_eq!(t.to_host(), vec![a.node.as_str()]);
    }
    // VXLAN from an unknown source is dropped in table 10; from a known one it is accepted.
    for n in m.nodes() {
        for p in m.pods_on_node(&n.name) {
            let mut pkt = Packet::ipv4(1, [2; 6], Ipv4Addr::new(10, 200, 0, 1), p.ip);
            pkt.tun_src = Ipv4Addr::new(203, 0, 113, 9);
            let t = sim.trace(&n.name, pkt);
            prop_assert!(t.dropped());
            let in_t10 =
                matches!(t.outcomes.first(), Some(Outcome::Dropped { by, .. }) if by.table == 10);
            prop_assert!(in_t10, "not dropped in table 10: {:?}", t);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn reachability_matches_isolation_rules(s in spec()) {
        let m = build(&s);
        check_cluster(&m)?;
    }
}

#[test]
fn fixed_multitenant_cluster() {
    let s = Spec {
        mode: Mode::Multitenant,
        nodes: 3,
        namespaces: 4,
        pods: vec![(1, 0), (1, 1), (2, 0), (2, 2), (3, 1), (0, 2), (1, 0)],
        ops: vec![Op::Join(3, 1)],
    };
    let m = build(&s);
    check_cluster(&m).expect("properties hold");
    // Spot checks: ns2 is isolated from ns1 across nodes, ns3 joined ns1.
    let flows = all_flows(&m);
    let sim = Simulator::from_model(&m, &flows);
    let p0 = m.pod("ns1", "pod0").expect("pod");
    let p3 = m.pod("ns2", "pod3").expect("pod");
    let p4 = m.pod("ns3", "pod4").expect("pod");
    assert!(sim
        .trace(&p0.node, Packet::ipv4(p0.ofport, p0.mac(), p0.ip, p3.ip))
        .dropped());
    let t = sim.trace(&p0.node, Packet::ipv4(p0.ofport, p0.mac(), p0.ip, p4.ip));
    assert_eq!(t.delivered(), vec![("node1", "veth4")]);
    // The path crosses VXLAN: node0 t90, then node1 t0 (twice: the service zone's lookup of
    // a packet to the local subnet recirculates) -> t10 -> ... -> t80.
    let tables: Vec<(&str, u8)> = t.steps.iter().map(|s| (s.node.as_str(), s.table)).collect();
    assert_eq!(
        tables,
        [
            ("node0", 0),
            ("node0", 20),
            ("node0", 27),
            ("node0", 30),
            ("node0", 31),
            ("node0", 90),
            ("node1", 0),
            ("node1", 0),
            ("node1", 10),
            ("node1", 30),
            ("node1", 31),
            ("node1", 70),
            ("node1", 80)
        ]
    );
}

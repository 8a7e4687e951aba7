//! The egress firewall (table 100) against real Open vSwitch: a 2-node multitenant cluster
//! whose projects have EgressNetworkPolicies, installed into dummy-datapath bridges, every
//! flow read back identically, and packets judged by the topology simulator and
//! `ofproto/trace` alike: rule order (Allow then Deny of overlapping CIDRs, and the reverse),
//! default allow, a final `0.0.0.0/0` Deny, a DNS rule's resolved address, joined projects
//! with different firewalls (all egress dropped), and the cluster network, service network
//! and DNS-to-node exemptions.

mod pipeline_ovs_judge;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use pipeline_ovs_judge::{flowsets, installed, rendered, Judge};
use topology::model::{EgressAction, EgressFirewall, EgressRule, EgressTo, PodAttach};
use topology::{ClusterModel, ClusterNetworkConfig, Mode, Packet};

const NODES: [(&str, Ipv4Addr, u64); 2] = [
    ("node-a", Ipv4Addr::new(192, 168, 60, 11), 0xa1),
    ("node-b", Ipv4Addr::new(192, 168, 60, 12), 0xb2),
];

/// (namespace, pod, node, ofport)
const PODS: [(&str, &str, &str, u32); 6] = [
    ("allowfirst", "p", "node-a", 3),
    ("denyfirst", "p", "node-a", 4),
    ("open", "p", "node-a", 5),
    ("j1", "p", "node-b", 3),
    ("j2", "p", "node-b", 4),
    ("denyfirst", "q", "node-b", 5),
];

fn rule(action: EgressAction, to: &str) -> EgressRule {
    EgressRule {
        action,
        to: match to.parse() {
            Ok(c) => EgressTo::Cidr(c),
            Err(_) => EgressTo::DnsName(to.to_string()),
        },
    }
}

fn cluster() -> ClusterModel {
    use EgressAction::*;
    let config = ClusterNetworkConfig::new(
        "10.128.0.0/14".parse().expect("cidr"),
        23,
        "172.30.0.0/16".parse().expect("cidr"),
        Mode::Multitenant,
    );
    let mut m = ClusterModel::new(config).expect("model");
    for (name, ip, dpid) in NODES {
        m.add_node(name, ip, dpid).expect("node");
    }
    for ns in ["default", "allowfirst", "denyfirst", "open", "j1", "j2"] {
        m.add_namespace(ns).expect("namespace");
    }
    m.join(&["j2"], "j1").expect("join");
    for (ns, name, node, ofport) in PODS {
        m.add_pod(PodAttach {
            namespace: ns,
            name,
            node,
            port_name: &format!("{ns}-{name}"),
            ofport,
        })
        .expect("pod");
    }
    let fws = [
        (
            "allowfirst",
            vec![
                rule(Allow, "198.51.100.0/24"),
                rule(Deny, "198.51.0.0/16"),
                rule(Deny, "blocked.example"),
            ],
        ),
        (
            "denyfirst",
            vec![
                rule(Deny, "198.51.100.0/24"),
                rule(Allow, "198.51.0.0/16"),
                rule(Allow, "allowed.example"),
                rule(Deny, "0.0.0.0/0"),
            ],
        ),
        ("j1", vec![rule(Deny, "203.0.113.0/24")]),
    ];
    for (ns, rules) in fws {
        m.apply_egress_firewall(EgressFirewall {
            namespace: ns.into(),
            name: "fw".into(),
            rules,
        })
        .expect("firewall");
    }
    let a: BTreeSet<Ipv4Addr> = [Ipv4Addr::new(203, 0, 113, 9)].into();
    m.set_egress_dns_addresses("blocked.example", a.clone());
    m.set_egress_dns_addresses("allowed.example", a);
    m
}

/// (namespace, pod, destination, (IP protocol, destination port), allowed)
type Case<'a> = (&'a str, &'a str, Ipv4Addr, Option<(u8, u16)>, bool);

#[test]
fn egress_firewall_simulator_and_ofproto_trace_agree() {
    let m = cluster();
    let sets = flowsets(&m);
    let sbx = installed(&m, &sets);
    for (node, fs) in &sets {
        let ours = rendered(fs);
        let theirs = sbx.dump_flows(node).expect("dump-flows");
        assert_eq!(
            ours, theirs,
            "{node}: dump-flows differs from our rendering"
        );
        assert!(
            fs.table(100).count() > 1,
            "{node}: the firewall flows are there"
        );
    }
    let mut j = Judge::new(&sbx, &m, &sets);
    let pod = |ns: &str, name: &str| m.pod(ns, name).expect("pod").clone();
    let remote = pod("j1", "p");
    let node_a_ip = NODES[0].1;
    // (from, destination, protocol/port, reaches the host = allowed)
    let ip = |a, b, c, d| Ipv4Addr::new(a, b, c, d);
    let cases: Vec<Case> = vec![
        // Allow 198.51.100.0/24 before Deny 198.51.0.0/16.
        ("allowfirst", "p", ip(198, 51, 100, 7), None, true),
        ("allowfirst", "p", ip(198, 51, 7, 7), None, false),
        ("allowfirst", "p", ip(8, 8, 8, 8), None, true),
        ("allowfirst", "p", ip(203, 0, 113, 9), None, false),
        ("allowfirst", "p", ip(203, 0, 113, 10), None, true),
        // Deny 198.51.100.0/24 before Allow 198.51.0.0/16; final 0.0.0.0/0 Deny.
        ("denyfirst", "p", ip(198, 51, 100, 7), None, false),
        ("denyfirst", "p", ip(198, 51, 7, 7), None, true),
        ("denyfirst", "p", ip(8, 8, 8, 8), None, false),
        ("denyfirst", "p", ip(203, 0, 113, 9), Some((6, 443)), true),
        ("denyfirst", "q", ip(198, 51, 100, 7), None, false),
        // Exemptions: service network, DNS to the node's own IP.
        ("denyfirst", "p", ip(172, 30, 0, 10), Some((6, 443)), true),
        ("denyfirst", "p", node_a_ip, Some((17, 53)), true),
        ("denyfirst", "p", node_a_ip, Some((6, 53)), true),
        ("denyfirst", "p", node_a_ip, Some((6, 22)), false),
        // No firewall: default allow.
        ("open", "p", ip(198, 51, 100, 7), None, true),
        ("open", "p", ip(8, 8, 8, 8), None, true),
        // Joined projects with different firewalls: everything leaving is dropped.
        ("j1", "p", ip(8, 8, 8, 8), None, false),
        ("j2", "p", ip(8, 8, 8, 8), None, false),
    ];
    for (ns, name, dst, l4, allowed) in cases {
        let p = pod(ns, name);
        let pkt = match l4 {
            None => Packet::ipv4(p.ofport, p.mac(), p.ip, dst),
            Some((proto, port)) => Packet::l4(p.ofport, p.mac(), p.ip, dst, proto, port),
        };
        let label = format!("{ns}/{name} -> {dst} {l4:?}");
        let t = j.check(&label, &p.node, pkt);
        assert_eq!(
            t.to_host() == vec![p.node.as_str()],
            allowed,
            "{label}: simulator {t:?}"
        );
        assert_eq!(t.dropped(), !allowed, "{label}");
    }
    // Cluster network: the denyfirst pod (0.0.0.0/0 Deny) still reaches its own project's pod
    // on the other node over VXLAN, and the table-100 drop never sees it.
    let a = pod("denyfirst", "p");
    let b = pod("denyfirst", "q");
    let t = j.check(
        "denyfirst/p -> denyfirst/q (cluster network)",
        &a.node,
        Packet::ipv4(a.ofport, a.mac(), a.ip, b.ip),
    );
    assert_eq!(t.delivered(), vec![(b.node.as_str(), "denyfirst-q")]);
    let t = j.check(
        "j1/p -> denyfirst/q (cluster network, isolated)",
        &remote.node,
        Packet::ipv4(remote.ofport, remote.mac(), remote.ip, b.ip),
    );
    assert!(t.delivered().is_empty());
    assert!(
        j.mismatches.is_empty(),
        "{} of {} packets disagree:\n{}",
        j.mismatches.len(),
        j.packets,
        j.mismatches.join("\n")
    );
    assert_eq!(j.agreed, j.packets);
    println!(
        "egress firewall: {} packets, simulator and ofproto/trace agree",
        j.packets
    );
}

//! Multicast (tables 110, 111, 120 and their groups) against real Open vSwitch: a 3-node
//! multitenant cluster where `red` and `green` (joined to red) have multicast and pods on
//! node-a and node-b only, `blue` has pods everywhere and no multicast, `ops` is global with
//! the annotation (while `default` has none). Every node's flows and groups are installed as
//! text and must read back identically (`dump-flows`, `dump-groups`), and a multicast UDP
//! datagram and an IGMP report from every pod are judged by `ofproto/trace` against the
//! simulator, node by node across the VXLAN copies.
//!
//! Run (root, Open vSwitch 3.1): `cargo test -p flowmesh-tests --test multicast_ovs -- --nocapture`.

#[allow(dead_code)]
mod pipeline_ovs_judge;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use pipeline_ovs_judge::{flowsets, rendered, sandbox, Judge};
use topology::model::PodAttach;
use topology::sim::L3;
use topology::{ClusterModel, ClusterNetworkConfig, Mode, Packet};

const NODES: [(&str, Ipv4Addr, u64); 3] = [
    ("node-a", Ipv4Addr::new(192, 168, 60, 11), 0xa1),
    ("node-b", Ipv4Addr::new(192, 168, 60, 12), 0xb2),
    ("node-c", Ipv4Addr::new(192, 168, 60, 13), 0xc3),
];

/// (namespace, pod, node, ofport)
const PODS: [(&str, &str, &str, u32); 9] = [
    ("red", "r-a1", "node-a", 3),
    ("red", "r-a2", "node-a", 4),
    ("red", "r-b1", "node-b", 3),
    ("green", "g-b1", "node-b", 4),
    ("blue", "b-a1", "node-a", 5),
    ("blue", "b-b1", "node-b", 5),
    ("blue", "b-c1", "node-c", 3),
    ("ops", "o-c1", "node-c", 4),
    ("default", "d-a1", "node-a", 6),
];

fn cluster() -> ClusterModel {
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
    for ns in ["default", "red", "green", "blue", "ops"] {
        m.add_namespace(ns).expect("namespace");
    }
    m.join(&["green"], "red").expect("join");
    m.make_global("ops").expect("global");
    for ns in ["red", "green", "ops"] {
        m.set_multicast(ns, true).expect("annotate");
    }
    for (ns, name, node, ofport) in PODS {
        m.add_pod(PodAttach {
            namespace: ns,
            name,
            node,
            port_name: name,
            ofport,
        })
        .expect("pod");
    }
    m
}

/// A multicast datagram (UDP to 239.1.2.3:5000) or IGMPv3 report (to 224.0.0.22) from a pod.
fn packet(m: &ClusterModel, ns: &str, pod: &str, igmp: bool) -> (String, Packet) {
    let p = m.pod(ns, pod).cloned().expect("pod");
    let (dst, proto, port, mac) = if igmp {
        (Ipv4Addr::new(224, 0, 0, 22), 2, 0, [1, 0, 0x5e, 0, 0, 0x16])
    } else {
        (Ipv4Addr::new(239, 1, 2, 3), 17, 5000, [1, 0, 0x5e, 1, 2, 3])
    };
    let pkt = Packet::l3(
        p.ofport,
        p.mac(),
        mac,
        L3::Ipv4 {
            src: p.ip,
            dst,
            proto,
            src_port: 40000,
            dst_port: port,
        },
    );
    (p.node, pkt)
}

#[test]
fn multicast_flows_and_groups_read_back_and_trace_like_the_simulator() {
    let m = cluster();
    let sets = flowsets(&m);
    let sbx = sandbox(&m);
    let mut groups_total = 0;
    for (node, fs) in &sets {
        // Groups first: the flows name them.
        let ours_g: Vec<String> = {
            let mut v: Vec<String> = fs.groups().iter().map(|g| g.to_string()).collect();
            v.sort();
            v
        };
        for g in &ours_g {
            sbx.ofctl(&["-O", "OpenFlow13", "add-group", node, g])
                .unwrap_or_else(|e| panic!("{node}: OVS refuses group {g}: {e}"));
        }
        let ours = rendered(fs);
        sbx.add_flows(node, &ours)
            .unwrap_or_else(|e| panic!("{node}: OVS refuses our flows: {e}"));
        assert_eq!(ours, sbx.dump_flows(node).expect("dump-flows"), "{node}");
        let theirs_g = sbx
            .ofctl(&["-O", "OpenFlow13", "dump-groups", node])
            .expect("dump-groups");
        let mut theirs_g: Vec<String> = theirs_g
            .lines()
            .skip(1)
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect();
        theirs_g.sort();
        assert_eq!(ours_g, theirs_g, "{node}: groups differ from dump-groups");
        groups_total += ours_g.len();
    }
    // red+green on node-a and node-b; nothing of theirs on node-c; ops (global) has the
    // annotation but default has not, so NETID 0 has none.
    let red = m.effective_netid("red");
    let gid = |purpose: u32| purpose << 24 | red;
    let ids = |n: &str| -> Vec<u32> { sets[n].groups().iter().map(|g| g.group_id).collect() };
    assert_eq!(ids("node-a"), vec![gid(1), gid(2)]);
    assert_eq!(ids("node-b"), vec![gid(1), gid(2)]);
    assert_eq!(ids("node-c"), Vec::<u32>::new());
    let remote_a = &sets["node-a"].groups()[1];
    assert_eq!(
        remote_a.buckets.len(),
        1,
        "node-a replicates to node-b only"
    );
    assert_eq!(groups_total, 4);

    let mut judge = Judge::new(&sbx, &m, &sets);
    let mut delivered: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (ns, pod, _, _) in PODS {
        for igmp in [false, true] {
            let (node, p) = packet(&m, ns, pod, igmp);
            let label = format!("{ns}/{pod} {}", if igmp { "igmp" } else { "udp" });
            let t = judge.check(&label, &node, p);
            let mut got: Vec<String> = t
                .delivered()
                .into_iter()
                .map(|(n, port)| format!("{n}/{port}"))
                .collect();
            got.sort();
            if !igmp {
                delivered.insert(format!("{ns}/{pod}"), got.clone());
            }
            // Never to node-c over VXLAN: no pod of red there.
            assert!(
                t.tunnels.iter().all(|h| h.to.as_deref() != Some("node-c")),
                "{label}: a copy went to node-c: {:?}",
                t.tunnels
            );
        }
    }
    assert!(
        judge.mismatches.is_empty(),
        "{} of {} packets disagree:\n{}",
        judge.packets - judge.agreed,
        judge.packets,
        judge.mismatches.join("\n")
    );
    let want = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        delivered["red/r-a1"],
        want(&["node-a/r-a2", "node-b/g-b1", "node-b/r-b1"])
    );
    assert_eq!(
        delivered["green/g-b1"],
        want(&["node-a/r-a1", "node-a/r-a2", "node-b/r-b1"])
    );
    for silent in ["blue/b-a1", "blue/b-c1", "ops/o-c1", "default/d-a1"] {
        assert_eq!(delivered[silent], Vec::<String>::new(), "{silent}");
    }
    println!(
        "{} packets judged ({} node verdicts), {} groups read back",
        judge.packets, judge.node_checks, groups_total
    );
}

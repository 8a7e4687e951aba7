//! The pipeline against real Open vSwitch: a 3-node multitenant cluster computed by
//! `topology`, installed into one dummy-datapath bridge per node, read back with `dump-flows`,
//! and judged packet by packet with `ofproto/trace` against the topology simulator.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Instant;

use flowmesh_tests::{BridgeSpec, OvsSandbox};
use topology::model::PodAttach;
use topology::{ClusterModel, ClusterNetworkConfig, FlowSet, Mode, Pipeline};

/// One node of the test cluster: name, underlay IP, datapath id.
const NODES: [(&str, Ipv4Addr, u64); 3] = [
    ("node-a", Ipv4Addr::new(192, 168, 50, 11), 0xa1),
    ("node-b", Ipv4Addr::new(192, 168, 50, 12), 0xb2),
    (
        "node-c",
        Ipv4Addr::new(192, 168, 50, 13),
        0x00c3_0000_0000_00c3,
    ),
];

/// Pods: (namespace, name, node, ofport).
const PODS: [(&str, &str, &str, u32); 8] = [
    ("shop", "web-0", "node-a", 3),
    ("db", "pg-0", "node-a", 4),
    ("default", "dns-a", "node-a", 7),
    ("web", "front-0", "node-b", 3),
    ("ops", "mon-0", "node-b", 5),
    ("lab", "x-0", "node-b", 6),
    ("shop", "cart-0", "node-c", 9),
    ("db", "pg-1", "node-c", 4),
];

/// The cluster: `default` (NETID 0), `ops` made global, `web` joined to `shop`, `db` and `lab`
/// each isolated.
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
    for ns in ["default", "shop", "web", "db", "ops", "lab"] {
        m.add_namespace(ns).expect("namespace");
    }
    m.join(&["web"], "shop").expect("join");
    m.make_global("ops").expect("global");
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

fn flowsets(m: &ClusterModel) -> BTreeMap<String, FlowSet> {
    let mut p = Pipeline::new();
    m.nodes()
        .map(|n| (n.name.clone(), p.node_flows(m, &n.name).expect("flows")))
        .collect()
}

/// Our own rendering of a FlowSet, normalized like `OvsSandbox::dump_flows`.
fn rendered(fs: &FlowSet) -> Vec<String> {
    let mut v: Vec<String> = fs.iter().map(|f| f.to_string()).collect();
    v.sort();
    v
}

fn sandbox(m: &ClusterModel) -> OvsSandbox {
    let mut b = OvsSandbox::builder().vxlan_dst_port(m.config().vxlan_port);
    for n in m.nodes() {
        let mut spec = BridgeSpec::new(n.name.clone(), n.dpid).local_ip(n.ip);
        for p in m.pods_on_node(&n.name) {
            spec = spec.pod(p.port_name.clone(), p.ofport);
        }
        b = b.bridge(spec);
    }
    b.start().expect("sandbox starts")
}

#[test]
fn flows_read_back_identically() {
    let t0 = Instant::now();
    let m = cluster();
    let sets = flowsets(&m);
    let sbx = sandbox(&m);
    let mut total = 0;
    for (node, fs) in &sets {
        let ours = rendered(fs);
        sbx.add_flows(node, &ours).expect("OVS accepts our flows");
        let theirs = sbx.dump_flows(node).expect("dump-flows");
        let only_ours: Vec<_> = ours.iter().filter(|l| !theirs.contains(l)).collect();
        let only_theirs: Vec<_> = theirs.iter().filter(|l| !ours.contains(l)).collect();
        assert!(
            only_ours.is_empty() && only_theirs.is_empty(),
            "{node}: rendering differs from dump-flows\nours only:\n{}\nOVS only:\n{}",
            only_ours
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            only_theirs
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
        assert_eq!(ours, theirs, "{node}");
        assert!(fs.groups().is_empty() == sbx.dump_groups(node).expect("groups").is_empty());
        total += ours.len();
        if std::env::var_os("PIPELINE_OVS_PRINT").is_some() {
            println!("{node}:\n{}", theirs.join("\n"));
        }
    }
    println!(
        "{} flows on {} bridges read back identically in {:.2}s",
        total,
        sets.len(),
        t0.elapsed().as_secs_f64()
    );
}

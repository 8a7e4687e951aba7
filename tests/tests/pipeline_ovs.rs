//! The pipeline against real Open vSwitch: a 3-node cluster (multitenant and subnet mode)
//! computed by `topology`, installed as text into one dummy-datapath bridge per node, read back
//! with `dump-flows` (must equal our rendering line for line), and judged packet by packet with
//! `ofproto/trace` against the topology simulator (`pipeline_ovs_judge`): every ordered pod
//! pair (ICMP, TCP, ARP) on one node and across VXLAN, the host, gateways, services, external
//! traffic, spoofing, VXLAN injection and VXLAN from strangers. Also checks that the golden
//! files of `topology/tests/golden` are exactly what OVS prints.

mod pipeline_ovs_judge;

use std::net::Ipv4Addr;
use std::time::Instant;

use ofproto::oxm::ct_state;

use flowmesh_tests::{BridgeSpec, OvsSandbox};
use pipeline_ovs_judge::{flowsets, installed, rendered, sandbox, Judge};
use topology::alloc::{NetIdAllocator, NETID_MAX};
use topology::model::PodAttach;
use topology::sim::L3;
use topology::{ClusterModel, ClusterNetworkConfig, Mode, Outcome, Packet};

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

/// Pods: (namespace, name, node, ofport); one sits on a large ofport.
const PODS: [(&str, &str, &str, u32); 8] = [
    ("shop", "web-0", "node-a", 3),
    ("db", "pg-0", "node-a", 4),
    ("default", "dns-a", "node-a", 7),
    ("web", "front-0", "node-b", 3),
    ("ops", "mon-0", "node-b", 5),
    ("lab", "x-0", "node-b", 65000),
    ("shop", "cart-0", "node-c", 9),
    ("db", "pg-1", "node-c", 4),
];

/// The cluster. Multitenant: `default` (NETID 0), `ops` made global, `web` joined to `shop`,
/// `db` and `lab` each isolated, with NETIDs allocated at the top of the 24-bit range (the
/// VNI's full width). Subnet: the same namespaces and pods, no NETIDs.
fn cluster(mode: Mode) -> ClusterModel {
    let config = ClusterNetworkConfig::new(
        "10.128.0.0/14".parse().expect("cidr"),
        23,
        "172.30.0.0/16".parse().expect("cidr"),
        mode,
    );
    let mut m = ClusterModel::new(config)
        .expect("model")
        .with_netid_allocator(NetIdAllocator::with_range(0xff_fff0, NETID_MAX));
    for (name, ip, dpid) in NODES {
        m.add_node(name, ip, dpid).expect("node");
    }
    for ns in ["default", "shop", "web", "db", "ops", "lab"] {
        m.add_namespace(ns).expect("namespace");
    }
    if mode == Mode::Multitenant {
        m.join(&["web"], "shop").expect("join");
        m.make_global("ops").expect("global");
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

#[test]
fn flows_read_back_identically_multitenant() {
    read_back(Mode::Multitenant);
}

#[test]
fn flows_read_back_identically_subnet() {
    read_back(Mode::Subnet);
}

/// Installs every node's FlowSet (as text) into its bridge; `dump-flows` must print exactly
/// our rendering, and neither side may hold groups.
fn read_back(mode: Mode) {
    let t0 = Instant::now();
    let m = cluster(mode);
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
        // The pipeline has no groups yet; when it gets some, render and compare them here.
        assert!(fs.groups().is_empty(), "{node}: groups to compare");
        assert_eq!(
            sbx.dump_groups(node).expect("dump-groups"),
            Vec::<String>::new()
        );
        total += ours.len();
    }
    println!(
        "{mode:?}: {} flows on {} bridges read back identically in {:.2}s",
        total,
        sets.len(),
        t0.elapsed().as_secs_f64()
    );
}

/// A pod as the judge needs it.
#[derive(Clone, Debug)]
struct P {
    label: String,
    node: String,
    ofport: u32,
    ip: Ipv4Addr,
    mac: [u8; 6],
    netid: u32,
}

fn pods(m: &ClusterModel) -> Vec<P> {
    m.pods()
        .map(|p| P {
            label: p.key.to_string(),
            node: p.node.clone(),
            ofport: p.ofport,
            ip: p.ip,
            mac: p.mac(),
            netid: m.effective_netid(&p.key.namespace),
        })
        .collect()
}

/// Multitenant isolation (DESIGN §3): same NETID, or either side global.
fn allowed(a: &P, b: &P) -> bool {
    a.netid == b.netid || a.netid == 0 || b.netid == 0
}

fn outcome_is(t: &topology::Trace, want: &[Outcome]) -> bool {
    t.outcomes == want
}

fn delivered(node: &str, ofport: u32, port: &str) -> Outcome {
    Outcome::Delivered {
        node: node.to_owned(),
        ofport,
        port: port.to_owned(),
    }
}

fn dropped_in(t: &topology::Trace, node: &str, table: u8) -> bool {
    matches!(t.outcomes.as_slice(), [Outcome::Dropped { node: n, by }] if n == node && by.table == table)
}

fn host(node: &str) -> Outcome {
    Outcome::Host {
        node: node.to_owned(),
    }
}

#[test]
fn ofproto_trace_agrees_with_the_simulator_multitenant() {
    judge_cluster(Mode::Multitenant);
}

#[test]
fn ofproto_trace_agrees_with_the_simulator_subnet() {
    judge_cluster(Mode::Subnet);
}

/// Every packet of the catalogue below through the simulator and `ofproto/trace` on the
/// cluster's bridges; both must agree on every node, and the simulator's verdict must be the
/// behaviour DESIGN §3/§4 asks for.
fn judge_cluster(mode: Mode) {
    let t0 = Instant::now();
    let m = cluster(mode);
    let sets = flowsets(&m);
    let sbx = installed(&m, &sets);
    let installed = t0.elapsed();
    let pods = pods(&m);
    let port_name = |p: &P| {
        m.pods()
            .find(|q| q.ip == p.ip)
            .map(|q| q.port_name.clone())
            .unwrap_or_default()
    };
    let node = |name: &str| m.node(name).cloned().expect("node");
    let mut j = Judge::new(&sbx, &m, &sets);
    let mut expectation_failures: Vec<String> = Vec::new();
    let mut expect = |ok: bool, what: String| {
        if !ok {
            expectation_failures.push(what);
        }
    };

    // Every ordered pod pair, ICMP and TCP, same node and across VXLAN.
    let (mut pairs, mut isolated, mut crossing) = (0, 0, 0);
    for a in &pods {
        for b in &pods {
            if a.ip == b.ip {
                continue;
            }
            for (proto, packet) in [
                ("icmp", Packet::ipv4(a.ofport, a.mac, a.ip, b.ip)),
                ("tcp", Packet::l4(a.ofport, a.mac, a.ip, b.ip, 6, 8080)),
            ] {
                let label = format!("{proto} {} -> {}", a.label, b.label);
                let t = j.check(&label, &a.node, packet);
                pairs += 1;
                isolated += usize::from(!allowed(a, b));
                crossing += usize::from(a.node != b.node);
                if allowed(a, b) {
                    expect(
                        outcome_is(&t, &[delivered(&b.node, b.ofport, &port_name(b))]),
                        format!("{label}: expected delivery, got {:?}", t.outcomes),
                    );
                } else {
                    expect(
                        dropped_in(&t, &b.node, 80),
                        format!("{label}: expected isolation drop, got {:?}", t.outcomes),
                    );
                }
                let crosses = a.node != b.node;
                expect(
                    t.tunnels.len() == usize::from(crosses)
                        && t.tunnels.iter().all(|h| {
                            h.tun_id == u64::from(a.netid) && h.tun_dst == node(&b.node).ip
                        }),
                    format!("{label}: tunnel hops {:?}", t.tunnels),
                );
            }
        }
    }

    // ARP requests and replies between every pod pair (no isolation for ARP).
    for a in &pods {
        for b in &pods {
            if a.ip == b.ip {
                continue;
            }
            let reply = Packet::l3(
                a.ofport,
                a.mac,
                b.mac,
                L3::Arp {
                    op: 2,
                    spa: a.ip,
                    tpa: b.ip,
                    sha: a.mac,
                    tha: b.mac,
                },
            );
            for (what, p) in [
                ("request", Packet::arp_request(a.ofport, a.mac, a.ip, b.ip)),
                ("reply", reply),
            ] {
                let label = format!("arp {what} {} -> {}", a.label, b.label);
                let t = j.check(&label, &a.node, p);
                expect(
                    outcome_is(&t, &[delivered(&b.node, b.ofport, &port_name(b))]),
                    format!("{label}: expected it at the pod, got {:?}", t.outcomes),
                );
            }
        }
        // Every node's gateway, ARP and ICMP: the own one directly, remote ones over VXLAN.
        for n in m.nodes() {
            let gw = n.gateway();
            for (what, p) in [
                ("arp", Packet::arp_request(a.ofport, a.mac, a.ip, gw)),
                ("icmp", Packet::ipv4(a.ofport, a.mac, a.ip, gw)),
            ] {
                let label = format!("{what} {} -> gateway of {}", a.label, n.name);
                let t = j.check(&label, &a.node, p);
                expect(
                    outcome_is(&t, &[host(&n.name)]),
                    format!("{label}: {:?}", t.outcomes),
                );
            }
        }
    }

    // The host reaches every pod, local or remote, from the gateway address and from its own
    // underlay address (host-network traffic), and ARPs for every pod (remote ones tunnelled).
    for n in m.nodes() {
        let gw = n.gateway();
        let gw_mac = topology::alloc::pod_mac(gw);
        for b in &pods {
            let to_b = [delivered(&b.node, b.ofport, &port_name(b))];
            for (what, p) in [
                ("", Packet::ipv4(2, gw_mac, gw, b.ip)),
                (" (node IP)", Packet::ipv4(2, gw_mac, n.ip, b.ip)),
                (" arp", Packet::arp_request(2, gw_mac, gw, b.ip)),
            ] {
                let label = format!("host {}{what} -> {}", n.name, b.label);
                let t = j.check(&label, &n.name, p);
                expect(outcome_is(&t, &to_b), format!("{label}: {:?}", t.outcomes));
            }
        }
        // Multicast from the host: from another host address it is dropped in table 0 (p250);
        // from the gateway the p400 host-source flow wins (as in OpenShift SDN) and table 110
        // drops it (no multicast-enabled NETID).
        let mcast = Ipv4Addr::new(224, 0, 0, 251);
        for (src, table) in [(n.ip, 0), (gw, 110)] {
            let label = format!("host {} multicast from {src}", n.name);
            let t = j.check(&label, &n.name, Packet::ipv4(2, gw_mac, src, mcast));
            expect(
                dropped_in(&t, &n.name, table),
                format!(
                    "{label}: expected a drop in table {table}, got {:?}",
                    t.outcomes
                ),
            );
        }
    }

    // Per pod: spoofing, VXLAN injection, and the ways out to the host.
    for a in &pods {
        let b = pods.iter().find(|q| q.ip != a.ip).expect("a second pod");
        let n = node(&a.node);
        let stolen_ip = Ipv4Addr::from(u32::from(a.ip) + 100);
        let cases: Vec<(&str, Packet, u8)> = vec![
            (
                "wrong source IP",
                Packet::ipv4(a.ofport, a.mac, stolen_ip, b.ip),
                20,
            ),
            (
                "wrong source MAC",
                Packet::ipv4(a.ofport, [0x0a, 0x58, 0xde, 0xad, 0xbe, 0xef], a.ip, b.ip),
                20,
            ),
            (
                "another pod's IP and MAC",
                Packet::ipv4(a.ofport, b.mac, b.ip, a.ip),
                20,
            ),
            (
                "ARP with a wrong sender IP",
                Packet::arp_request(a.ofport, a.mac, stolen_ip, b.ip),
                20,
            ),
            (
                "ARP with a wrong sender MAC",
                Packet::l3(
                    a.ofport,
                    a.mac,
                    [0xff; 6],
                    L3::Arp {
                        op: 1,
                        spa: a.ip,
                        tpa: b.ip,
                        sha: [0x0a, 0x58, 1, 2, 3, 4],
                        tha: [0; 6],
                    },
                ),
                20,
            ),
            (
                "UDP to the VXLAN port",
                Packet::l4(a.ofport, a.mac, a.ip, b.ip, 17, m.config().vxlan_port),
                20,
            ),
            (
                "multicast",
                Packet::ipv4(a.ofport, a.mac, a.ip, Ipv4Addr::new(224, 0, 0, 251)),
                110,
            ),
        ];
        for (what, p, table) in cases {
            let label = format!("{} {what}", a.label);
            let t = j.check(&label, &a.node, p);
            expect(
                dropped_in(&t, &a.node, table),
                format!(
                    "{label}: expected a drop in table {table}, got {:?}",
                    t.outcomes
                ),
            );
        }
        let to_host: Vec<(&str, Packet)> = vec![
            ("gateway", Packet::ipv4(a.ofport, a.mac, a.ip, n.gateway())),
            (
                "service",
                Packet::l4(a.ofport, a.mac, a.ip, Ipv4Addr::new(172, 30, 0, 10), 6, 443),
            ),
            (
                "external",
                Packet::ipv4(a.ofport, a.mac, a.ip, Ipv4Addr::new(8, 8, 8, 8)),
            ),
            (
                "external TCP",
                Packet::l4(a.ofport, a.mac, a.ip, Ipv4Addr::new(1, 1, 1, 1), 6, 443),
            ),
            (
                "DNS to the node",
                Packet::l4(a.ofport, a.mac, a.ip, n.ip, 17, 53),
            ),
        ];
        for (what, p) in to_host {
            let label = format!("{} -> {what}", a.label);
            let t = j.check(&label, &a.node, p);
            expect(
                outcome_is(&t, &[host(&a.node)]),
                format!("{label}: expected tun0, got {:?}", t.outcomes),
            );
        }
        // Service traffic coming back from the host's kube-proxy (source = this pod, DNATed
        // to every pod, itself included: the service hairpin) keeps the pod's NETID.
        for b in &pods {
            let label = format!("service return {} -> {}", a.label, b.label);
            let t = j.check(
                &label,
                &a.node,
                Packet::ipv4(2, [0x0a, 0x58, 0, 0, 0, 1], a.ip, b.ip),
            );
            if allowed(a, b) {
                expect(
                    outcome_is(&t, &[delivered(&b.node, b.ofport, &port_name(b))]),
                    format!("{label}: {:?}", t.outcomes),
                );
            } else {
                expect(
                    dropped_in(&t, &b.node, 80),
                    format!("{label}: {:?}", t.outcomes),
                );
            }
        }
        // The endpoint's answer to such a connection, as the service zone's lookup leaves it
        // on the client's node (a reply, ct_mark 1): back to the client's host, from a local
        // endpoint or over VXLAN (ofproto/trace cannot make a lookup return a mark, so the
        // packets arrive tracked).
        let a_node = m.node(&a.node).cloned().expect("node");
        for b in pods.iter().filter(|b| b.ip != a.ip) {
            let label = format!("service reply {} -> {}", b.label, a.label);
            let mut p = if b.node == a.node {
                Packet::ipv4(b.ofport, b.mac, b.ip, a.ip)
            } else {
                let mut p = Packet::ipv4(1, b.mac, b.ip, a.ip);
                p.tun_id = u64::from(b.netid);
                p.tun_src = m.node(&b.node).expect("node").ip;
                p.tun_dst = a_node.ip;
                p
            };
            p.ct_state = ct_state::TRK | ct_state::EST | ct_state::RPL;
            p.ct_zone = topology::pipeline::regs::CT_ZONE_SERVICE;
            p.ct_mark = topology::pipeline::regs::CT_MARK_HOST_DNAT;
            let t = j.check(&label, &a.node, p);
            expect(
                outcome_is(&t, &[host(&a.node)]),
                format!("{label}: expected tun0, got {:?}", t.outcomes),
            );
        }
    }

    // VXLAN from a sender that is no node, and VXLAN carrying non-cluster traffic.
    for n in m.nodes() {
        let b = pods.iter().find(|q| q.node == n.name).expect("a local pod");
        let peer = m.nodes().find(|x| x.name != n.name).expect("a peer");
        let src = pods
            .iter()
            .find(|q| q.node == peer.name)
            .expect("a remote pod");
        let mut unknown = Packet::ipv4(1, src.mac, src.ip, b.ip);
        unknown.tun_id = u64::from(src.netid);
        unknown.tun_src = Ipv4Addr::new(192, 168, 50, 99);
        unknown.tun_dst = n.ip;
        let label = format!("vxlan from unknown sender to {}", b.label);
        let t = j.check(&label, &n.name, unknown);
        expect(
            dropped_in(&t, &n.name, 10),
            format!("{label}: {:?}", t.outcomes),
        );

        let mut known = Packet::ipv4(1, src.mac, src.ip, b.ip);
        known.tun_id = u64::from(src.netid);
        known.tun_src = peer.ip;
        known.tun_dst = n.ip;
        let label = format!("vxlan from {} to {}", peer.name, b.label);
        let t = j.check(&label, &n.name, known);
        let ok = if allowed(src, b) {
            outcome_is(&t, &[delivered(&b.node, b.ofport, &port_name(b))])
        } else {
            dropped_in(&t, &n.name, 80)
        };
        expect(ok, format!("{label}: {:?}", t.outcomes));

        let mut outside = Packet::ipv4(
            1,
            src.mac,
            Ipv4Addr::new(8, 8, 8, 8),
            Ipv4Addr::new(1, 1, 1, 1),
        );
        outside.tun_src = peer.ip;
        outside.tun_dst = n.ip;
        let label = format!("vxlan with outside traffic into {}", n.name);
        let t = j.check(&label, &n.name, outside);
        expect(
            dropped_in(&t, &n.name, 0),
            format!("{label}: {:?}", t.outcomes),
        );
    }

    let elapsed = t0.elapsed();
    println!(
        "pipeline_ovs {mode:?}: {} pod pairs (ICMP+TCP; {} across VXLAN, {} isolated), {} packets judged, {} agreed, {} node verdicts compared; flows installed in {:.2}s, total {:.2}s",
        pairs,
        crossing,
        isolated,
        j.packets,
        j.agreed,
        j.node_checks,
        installed.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    assert!(
        j.mismatches.is_empty(),
        "{} of {} packets: the simulator and ofproto/trace disagree:\n{}",
        j.mismatches.len(),
        j.packets,
        j.mismatches.join("\n")
    );
    assert!(
        expectation_failures.is_empty(),
        "{} expectations failed:\n{}",
        expectation_failures.len(),
        expectation_failures.join("\n")
    );
    assert_eq!(j.agreed, j.packets);
}

/// The judge is not blind: a switch that differs from the computed flows in one isolation
/// flow and one tunnel destination is caught on exactly the packets those flows decide.
#[test]
fn the_judge_catches_a_divergent_switch() {
    let m = cluster(Mode::Multitenant);
    let sets = flowsets(&m);
    let sbx = installed(&m, &sets);
    let shop = m.effective_netid("shop");
    let c = m.node("node-c").cloned().expect("node-c");
    sbx.ofctl(&[
        "--strict",
        "del-flows",
        "node-c",
        &format!("table=80,priority=100,reg0={shop},reg1={shop}"),
    ])
    .expect("del-flows");
    sbx.ofctl(&[
        "--strict",
        "mod-flows",
        "node-a",
        &format!(
            "table=90,priority=100,ip,nw_dst={} actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:192.168.50.99->tun_dst,output:1",
            c.subnet
        ),
    ])
    .expect("mod-flows");
    let pods = pods(&m);
    let pod = |label: &str| {
        pods.iter()
            .find(|p| p.label == label)
            .cloned()
            .expect("pod")
    };
    let mut j = Judge::new(&sbx, &m, &sets);
    for (a, b) in [
        ("shop/web-0", "shop/cart-0"),  // node-a's tunnel flow differs
        ("web/front-0", "shop/cart-0"), // node-c's isolation flow is missing
        ("db/pg-0", "default/dns-a"),   // untouched: local on node-a
    ] {
        let (a, b) = (pod(a), pod(b));
        j.check(
            &format!("{} -> {}", a.label, b.label),
            &a.node,
            Packet::ipv4(a.ofport, a.mac, a.ip, b.ip),
        );
    }
    assert_eq!((j.packets, j.agreed), (3, 1), "{}", j.mismatches.join("\n"));
    let heads: Vec<&str> = j
        .mismatches
        .iter()
        .map(|m| m.split(" with ").next().unwrap_or(""))
        .collect();
    assert_eq!(
        heads,
        [
            "shop/web-0 -> shop/cart-0: on node-a",
            "shop/web-0 -> shop/cart-0: on node-c",
            "web/front-0 -> shop/cart-0: on node-c"
        ]
    );
    assert!(
        j.mismatches[0].contains("tun_dst: 192.168.50.99"),
        "{}",
        j.mismatches[0]
    );
}

/// The golden files of `topology/tests/golden` are Open vSwitch's own canonical text: each,
/// installed into a bridge, reads back line for line.
#[test]
fn golden_files_are_what_ovs_prints() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology/tests/golden");
    let mut files: Vec<(String, Vec<String>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".flows"))
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).expect("read golden file");
            let lines = text.lines().map(str::to_owned).collect();
            (e.file_name().to_string_lossy().into_owned(), lines)
        })
        .collect();
    files.sort();
    assert!(
        files.len() >= 4,
        "golden files missing in {}",
        dir.display()
    );
    let sbx = OvsSandbox::builder()
        .bridges((0..files.len()).map(|i| BridgeSpec::new(format!("golden{i}"), 0x100 + i as u64)))
        .start()
        .expect("sandbox starts");
    for (i, (name, lines)) in files.iter().enumerate() {
        let bridge = format!("golden{i}");
        let mut sorted = lines.clone();
        sorted.sort();
        assert_eq!(&sorted, lines, "{name} is not sorted");
        sbx.add_flows(&bridge, lines)
            .unwrap_or_else(|e| panic!("{name}: OVS refuses it: {e}"));
        assert_eq!(
            &sbx.dump_flows(&bridge).expect("dump-flows"),
            lines,
            "{name}"
        );
    }
}

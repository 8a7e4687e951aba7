//! Audit logging against real Open vSwitch: a 2-node networkpolicy cluster whose namespace
//! `shop` has `k8s.ovn.org/acl-logging` is computed by `topology`, installed into one
//! dummy-datapath bridge per node with its audit meter, read back (`dump-flows`,
//! `dump-meters`: equal to our rendering), and judged with `ofproto/trace` against the
//! simulator (`pipeline_ovs_judge`, which compares the `controller(...)` copies as well as the
//! path and outputs): allowed and denied TCP, UDP and ICMP as new connections on one node and
//! across VXLAN, then the established packets and replies of the allowed ones, and traffic of
//! a namespace without logging. Every packet the simulator logs, OVS's trace logs, with the
//! same controller id and userdata, and no other. The egress firewall's logging twins
//! likewise, including a connection relayed to an egress-IP node (judged again there, logged
//! only on the pod's node).

mod pipeline_ovs_judge;

use std::net::Ipv4Addr;

use pipeline_ovs_judge::{flowsets, installed, rendered, Judge};
use topology::model::audit::{AclLogging, Severity};
use topology::model::{
    LabelSelector, NetworkPolicy, Peer, PodAttach, PodInfo, PodMeta, PolicyPort, PolicyRule,
    PortSpec, Protocol,
};
use topology::pipeline::audit::{AuditTag, Verdict};
use topology::sim::L3;
use topology::{ClusterModel, ClusterNetworkConfig, Mode, Packet};

fn port(protocol: Protocol, n: u16) -> PolicyPort {
    PolicyPort {
        protocol,
        port: Some(PortSpec::Number(n)),
        end_port: None,
    }
}

/// node-a: shop/web (isolated both ways), tools/other; node-b: shop/db, tools/client.
fn cluster() -> ClusterModel {
    let config = ClusterNetworkConfig::new(
        "10.128.0.0/14".parse().expect("cidr"),
        23,
        "172.30.0.0/16".parse().expect("cidr"),
        Mode::Networkpolicy,
    );
    let mut m = ClusterModel::new(config).expect("model");
    m.add_node("node-a", Ipv4Addr::new(192, 168, 70, 11), 0xa1)
        .expect("node-a");
    m.add_node("node-b", Ipv4Addr::new(192, 168, 70, 12), 0xb2)
        .expect("node-b");
    for ns in ["shop", "tools"] {
        m.add_namespace(ns).expect("namespace");
    }
    for (ns, name, node, ofport) in [
        ("shop", "web", "node-a", 3),
        ("tools", "other", "node-a", 4),
        ("shop", "db", "node-b", 3),
        ("tools", "client", "node-b", 4),
    ] {
        m.add_pod(PodAttach {
            namespace: ns,
            name,
            node,
            port_name: name,
            ofport,
        })
        .expect("pod");
    }
    m.set_pod_meta(
        "shop",
        "web",
        PodMeta {
            labels: [("app".into(), "web".into())].into(),
            ports: Vec::new(),
        },
    )
    .expect("labels");
    m.set_namespace_labels("tools", [("team".into(), "tools".into())].into())
        .expect("namespace labels");
    m.apply_policy(NetworkPolicy {
        namespace: "shop".into(),
        name: "web".into(),
        pod_selector: LabelSelector::labels([("app", "web")]),
        ingress_isolation: true,
        egress_isolation: true,
        ingress: vec![
            PolicyRule {
                peers: Vec::new(),
                ports: vec![port(Protocol::Tcp, 80)],
            },
            PolicyRule {
                peers: vec![Peer::Pods {
                    namespace_selector: Some(LabelSelector::labels([("team", "tools")])),
                    pod_selector: None,
                }],
                ports: vec![port(Protocol::Udp, 53)],
            },
        ],
        egress: vec![PolicyRule {
            peers: vec![Peer::Pods {
                namespace_selector: None,
                pod_selector: Some(LabelSelector::default()),
            }],
            ports: vec![port(Protocol::Tcp, 5432)],
        }],
    })
    .expect("policy");
    m.set_acl_logging(
        "shop",
        Some(AclLogging {
            deny: Some(Severity::Alert),
            allow: Some(Severity::Notice),
        }),
    )
    .expect("logging");
    m
}

fn pod(m: &ClusterModel, ns: &str, name: &str) -> PodInfo {
    m.pod(ns, name).cloned().expect("pod")
}

fn packet(from: &PodInfo, to: &PodInfo, proto: u8, sport: u16, dport: u16) -> Packet {
    Packet::l3(
        from.ofport,
        from.mac(),
        to.mac(),
        L3::Ipv4 {
            src: from.ip,
            dst: to.ip,
            proto,
            src_port: sport,
            dst_port: dport,
        },
    )
}

/// The verdicts the simulator logged for a trace.
fn tags(t: &topology::Trace) -> Vec<(String, Verdict, String)> {
    t.packet_ins
        .iter()
        .map(|c| {
            let tag = AuditTag::decode(&c.userdata).expect("audit userdata");
            (c.node.clone(), tag.verdict, tag.reference)
        })
        .collect()
}

/// `fs`'s meters on `node`'s bridge.
fn add_meters(sbx: &flowmesh_tests::OvsSandbox, node: &str, fs: &topology::FlowSet) {
    for meter in fs.meters() {
        let band = &meter.bands[0];
        sbx.ofctl(&[
            "-O",
            "OpenFlow13",
            "add-meter",
            node,
            &format!(
                "meter={},pktps,burst,stats,bands=type=drop,rate={},burst_size={}",
                meter.meter_id, band.rate, band.burst_size
            ),
        ])
        .expect("add-meter");
    }
}

#[test]
fn ofproto_trace_agrees_with_the_simulator_on_what_is_logged() {
    let m = cluster();
    let sets = flowsets(&m);
    let sbx = installed(&m, &sets);
    for (node, fs) in &sets {
        assert_eq!(
            sbx.dump_flows(node).expect("dump"),
            rendered(fs),
            "{node}: the logging flows read back as we print them"
        );
        add_meters(&sbx, node, fs);
    }
    assert_eq!(sets["node-a"].meters().len(), 1);
    let dumped = sbx
        .ofctl(&["-O", "OpenFlow13", "dump-meters", "node-a"])
        .expect("dump-meters");
    assert!(
        dumped.contains("meter=1 pktps burst stats bands=\ntype=drop rate=20 burst_size=20"),
        "{dumped}"
    );

    let (web, db, client, other) = (
        pod(&m, "shop", "web"),
        pod(&m, "shop", "db"),
        pod(&m, "tools", "client"),
        pod(&m, "tools", "other"),
    );
    let mut judge = Judge::new(&sbx, &m, &sets);
    let allow = |r: &str| (Verdict::Allow, r.to_string());
    let deny = |r: &str| (Verdict::Drop, r.to_string());
    // (label, sender, packet, what the simulator logs: node, verdict, reference)
    type Case<'a> = (
        &'a str,
        &'a PodInfo,
        Packet,
        Vec<(&'a str, (Verdict, String))>,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "tcp 80 across vxlan (allowed)",
            &client,
            packet(&client, &web, 6, 40000, 80),
            vec![("node-a", allow("NP:shop:web"))],
        ),
        (
            "tcp 80 same node (allowed)",
            &other,
            packet(&other, &web, 6, 40001, 80),
            vec![("node-a", allow("NP:shop:web"))],
        ),
        (
            "udp 53 from tools (allowed by a conjunction)",
            &client,
            packet(&client, &web, 17, 5353, 53),
            vec![("node-a", allow("NP:shop:web"))],
        ),
        (
            "tcp 22 (denied)",
            &client,
            packet(&client, &web, 6, 40002, 22),
            vec![("node-a", deny("NP:shop:Ingress"))],
        ),
        (
            "icmp echo (denied)",
            &other,
            packet(&other, &web, 1, 0, 0),
            vec![("node-a", deny("NP:shop:Ingress"))],
        ),
        (
            "udp 9999 (denied)",
            &client,
            packet(&client, &web, 17, 5000, 9999),
            vec![("node-a", deny("NP:shop:Ingress"))],
        ),
        (
            "web -> db tcp 5432 (egress allowed)",
            &web,
            packet(&web, &db, 6, 41000, 5432),
            vec![("node-a", allow("NP:shop:web"))],
        ),
        (
            "web -> db tcp 80 (egress denied)",
            &web,
            packet(&web, &db, 6, 41001, 80),
            vec![("node-a", deny("NP:shop:Egress"))],
        ),
        (
            "tools -> tools (no logging)",
            &client,
            packet(&client, &other, 6, 42000, 8080),
            vec![],
        ),
    ];
    for (label, from, p, want) in &cases {
        let t = judge.check(label, &from.node, p.clone());
        let want: Vec<(String, Verdict, String)> = want
            .iter()
            .map(|(n, (v, r))| (n.to_string(), *v, r.clone()))
            .collect();
        assert_eq!(tags(&t), want, "{label}: {t:?}");
    }

    // The allowed connections' next packets and replies: established, never logged.
    let est: Vec<(&str, &PodInfo, Packet, &PodInfo, Packet)> = vec![
        (
            "tcp 80 across vxlan",
            &client,
            packet(&client, &web, 6, 43000, 80),
            &web,
            packet(&web, &client, 6, 80, 43000),
        ),
        (
            "web -> db tcp 5432",
            &web,
            packet(&web, &db, 6, 43001, 5432),
            &db,
            packet(&db, &web, 6, 5432, 43001),
        ),
    ];
    for (label, from, first, replier, reply) in est {
        judge.flush_conntrack();
        let primed = judge.prime(&from.node, first.clone());
        assert_eq!(
            tags(&primed).len(),
            1,
            "{label}: the first packet is logged"
        );
        let t = judge.check_ct(
            &format!("{label}: next packet"),
            &from.node,
            first,
            &["trk,est", "trk,est"],
        );
        assert!(t.packet_ins.is_empty(), "{label}: {t:?}");
        let t = judge.check_ct(
            &format!("{label}: reply"),
            &replier.node,
            reply,
            &["trk,est,rpl", "trk,est,rpl"],
        );
        assert!(t.packet_ins.is_empty(), "{label}: {t:?}");
        assert!(!t.dropped(), "{label}: the reply is delivered");
    }
    assert!(
        judge.mismatches.is_empty(),
        "{} of {} packets disagree:\n{}",
        judge.mismatches.len(),
        judge.packets,
        judge.mismatches.join("\n")
    );
    assert_eq!(judge.agreed, judge.packets);

    // The judge sees a logging flow missing on the switch: the drop still happens, the copy
    // does not.
    let drop_log = sets["node-a"]
        .iter()
        .find(|f| f.table == 80 && f.priority == 181)
        .expect("web's logged ingress drop")
        .clone();
    sbx.ofctl(&[
        "-O",
        "OpenFlow13",
        "--strict",
        "del-flows",
        "node-a",
        &format!("table=80,priority=181,{}", drop_log.matches),
    ])
    .expect("del-flows");
    let before = judge.mismatches.len();
    judge.check(
        "tcp 22 without its logging flow",
        &client.node,
        packet(&client, &web, 6, 40009, 22),
    );
    assert_eq!(judge.mismatches.len(), before + 1, "the judge missed it");
    assert!(judge.mismatches[before].contains("logged: []"));
}

/// The egress firewall's logging twins on real Open vSwitch: `shop` (logging) has an
/// EgressNetworkPolicy (rule 0 denies 203.0.113.7, rule 1 allows 203.0.113.0/24, rule 2
/// denies the rest) and an egress IP on node-a. db (node-b, selected by no policy) leaves the
/// cluster through node-a: node-b judges and logs, node-a judges the relayed packet again and
/// must not log it. OVS's trace and the simulator agree on every leg, copies included.
#[test]
fn ofproto_trace_agrees_on_what_the_egress_firewall_logs() {
    use topology::model::{EgressAction, EgressFirewall, EgressRule, EgressTo, HostSubnetEgress};
    let mut m = cluster();
    let rule = |action, cidr: &str| EgressRule {
        action,
        to: EgressTo::Cidr(cidr.parse().expect("cidr")),
    };
    m.apply_egress_firewall(EgressFirewall {
        namespace: "shop".into(),
        name: "default".into(),
        rules: vec![
            rule(EgressAction::Deny, "203.0.113.7/32"),
            rule(EgressAction::Allow, "203.0.113.0/24"),
            rule(EgressAction::Deny, "0.0.0.0/0"),
        ],
    })
    .expect("firewall");
    let eip = Ipv4Addr::new(192, 168, 70, 100);
    m.set_host_subnet_egress(
        "node-a",
        HostSubnetEgress {
            egress_ips: vec![eip],
            egress_cidrs: vec![],
        },
    )
    .expect("hostsubnet");
    m.set_namespace_egress_ips("shop", &[eip])
        .expect("egress ip");
    let sets = flowsets(&m);
    // Groups (shop's egress IP) and meters first, then the flows that use them.
    let sbx = pipeline_ovs_judge::sandbox(&m);
    for (node, fs) in &sets {
        for g in fs.groups() {
            sbx.ofctl(&["add-group", node, &g.to_string()])
                .unwrap_or_else(|e| panic!("{node}: OVS refuses group {g}: {e}"));
        }
        add_meters(&sbx, node, fs);
        sbx.add_flows(node, &rendered(fs))
            .unwrap_or_else(|e| panic!("{node}: OVS refuses our flows: {e}"));
        assert_eq!(
            sbx.dump_flows(node).expect("dump"),
            rendered(fs),
            "{node}: the logging twins read back as we print them"
        );
        assert_eq!(fs.meters().len(), 1, "{node}: the audit meter");
        assert!(
            fs.iter().any(|f| f.table == 100 && f.priority >= 140),
            "{node} holds shop's table-100 twins"
        );
    }
    let (db, other) = (pod(&m, "shop", "db"), pod(&m, "tools", "other"));
    let out = |from: &PodInfo, dst: [u8; 4], sport: u16| {
        Packet::l3(
            from.ofport,
            from.mac(),
            [0x0a, 0x58, 0, 0, 0, 1],
            L3::Ipv4 {
                src: from.ip,
                dst: Ipv4Addr::from(dst),
                proto: 6,
                src_port: sport,
                dst_port: 443,
            },
        )
    };
    let mut judge = Judge::new(&sbx, &m, &sets);
    type Logged = Vec<(String, Verdict, String)>;
    let cases: Vec<(&str, &PodInfo, Packet, Logged)> = vec![
        (
            "db -> 203.0.113.5 (rule 1 allows; relayed to node-a's egress IP)",
            &db,
            out(&db, [203, 0, 113, 5], 40000),
            vec![("node-b".into(), Verdict::Allow, "EF:shop:1".into())],
        ),
        (
            "db -> 203.0.113.7 (rule 0 denies)",
            &db,
            out(&db, [203, 0, 113, 7], 40001),
            vec![("node-b".into(), Verdict::Drop, "EF:shop:0".into())],
        ),
        (
            "db -> 198.51.100.1 (rule 2 denies)",
            &db,
            out(&db, [198, 51, 100, 1], 40002),
            vec![("node-b".into(), Verdict::Drop, "EF:shop:2".into())],
        ),
        (
            "tools/other -> 198.51.100.1 (no firewall, no logging)",
            &other,
            out(&other, [198, 51, 100, 1], 40003),
            vec![],
        ),
    ];
    for (label, from, p, want) in cases {
        let t = judge.check(label, &from.node, p);
        assert_eq!(tags(&t), want, "{label}: {t:?}");
    }
    let t = judge.prime(&db.node, out(&db, [203, 0, 113, 5], 40010));
    assert_eq!(tags(&t).len(), 1, "the first packet is logged");
    // The next packet: established at node-b's table 0, not logged (on either node).
    let t = judge.check_ct(
        "db -> 203.0.113.5 next packet",
        &db.node,
        out(&db, [203, 0, 113, 5], 40010),
        &["trk,est", "trk,est"],
    );
    assert!(t.packet_ins.is_empty(), "{t:?}");
    // The allowed packets' legs on node-a (relayed over VXLAN) were judged too.
    assert_eq!(judge.node_checks, judge.packets + 2, "legs judged");
    assert!(
        judge.mismatches.is_empty(),
        "{} of {} packets disagree:\n{}",
        judge.mismatches.len(),
        judge.packets,
        judge.mismatches.join("\n")
    );
    assert_eq!(judge.agreed, judge.packets);
}

//! Audit logging against real Open vSwitch: a 2-node networkpolicy cluster whose namespace
//! `shop` has `k8s.ovn.org/acl-logging` is computed by `topology`, installed into one
//! dummy-datapath bridge per node with its audit meter, read back (`dump-flows`,
//! `dump-meters`: equal to our rendering), and judged with `ofproto/trace` against the
//! simulator (`pipeline_ovs_judge`, which compares the `controller(...)` copies as well as the
//! path and outputs): allowed and denied TCP, UDP and ICMP as new connections on one node and
//! across VXLAN, then the established packets and replies of the allowed ones, and traffic of
//! a namespace without logging. Every packet the simulator logs, OVS's trace logs, with the
//! same controller id and userdata, and no other.

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

//! Audit logging in the pipeline and the simulator: a namespace with `k8s.ovn.org/acl-logging`
//! gets logging flows for its NetworkPolicy verdicts and its nodes the audit meter; the first
//! packet of each new connection a policy of it allows or denies is copied to the shim's
//! controller id with the verdict's tag, nothing else is (replies, later packets, other
//! namespaces); turning logging off gives back exactly the flows of before.

mod common;

use common::all_flows;
use std::net::Ipv4Addr;
use topology::model::audit::{AclLogging, AuditConfig, Severity};
use topology::model::{
    LabelSelector, NetworkPolicy, PodAttach, PodInfo, PolicyPort, PolicyRule, PortSpec, Protocol,
};
use topology::pipeline::audit::{AuditTag, Verdict, AUDIT_CONTROLLER_ID, AUDIT_METER_ID};
use topology::pipeline::cookie::{decode, Feature};
use topology::sim::{Packet, Simulator, Trace, L3};
use topology::{ClusterModel, ClusterNetworkConfig, FlowSet, Mode};

/// Two nodes; `shop` (web on n1, db on n2) and `tools` (client on n2, other on n1).
fn cluster() -> ClusterModel {
    let config = ClusterNetworkConfig::new(
        "10.128.0.0/14".parse().expect("cidr"),
        23,
        "172.30.0.0/16".parse().expect("cidr"),
        Mode::Networkpolicy,
    );
    let mut m = ClusterModel::new(config).expect("model");
    m.add_node("n1", Ipv4Addr::new(192, 168, 0, 1), 1)
        .expect("n1");
    m.add_node("n2", Ipv4Addr::new(192, 168, 0, 2), 2)
        .expect("n2");
    for ns in ["shop", "tools"] {
        m.add_namespace(ns).expect("namespace");
    }
    for (ns, name, node, ofport) in [
        ("shop", "web", "n1", 3),
        ("shop", "db", "n2", 3),
        ("tools", "client", "n2", 4),
        ("tools", "other", "n1", 4),
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
        topology::model::PodMeta {
            labels: [("app".into(), "web".into())].into(),
            ports: Vec::new(),
        },
    )
    .expect("label");
    m.set_namespace_labels("tools", [("team".into(), "tools".into())].into())
        .expect("namespace label");
    // shop/web: ingress on TCP 80 from anything (one dimension: a plain allow), and on UDP 53
    // from the pods of tools (a conjunction); egress isolated with one rule: TCP 5432 to db.
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
                peers: vec![topology::model::Peer::Pods {
                    namespace_selector: Some(LabelSelector::labels([("team", "tools")])),
                    pod_selector: None,
                }],
                ports: vec![port(Protocol::Udp, 53)],
            },
        ],
        egress: vec![PolicyRule {
            peers: vec![topology::model::Peer::Pods {
                namespace_selector: None,
                pod_selector: Some(LabelSelector::default()),
            }],
            ports: vec![port(Protocol::Tcp, 5432)],
        }],
    })
    .expect("policy");
    m
}

fn port(protocol: Protocol, n: u16) -> PolicyPort {
    PolicyPort {
        protocol,
        port: Some(PortSpec::Number(n)),
        end_port: None,
    }
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

fn logging() -> AclLogging {
    AclLogging {
        deny: Some(Severity::Alert),
        allow: Some(Severity::Notice),
    }
}

/// The audit copies of a trace, as (node, tag).
fn logged(t: &Trace) -> Vec<(String, AuditTag)> {
    t.packet_ins
        .iter()
        .map(|p| {
            assert_eq!(p.controller_id, AUDIT_CONTROLLER_ID);
            assert_eq!(p.meter_id, Some(AUDIT_METER_ID));
            assert_eq!(decode(p.cookie).feature, Feature::Audit as u8);
            (
                p.node.clone(),
                AuditTag::decode(&p.userdata).expect("flowmesh audit userdata"),
            )
        })
        .collect()
}

fn tag(verdict: Verdict, direction: &'static str, reference: &str) -> AuditTag {
    AuditTag {
        verdict,
        direction,
        severity: match verdict {
            Verdict::Allow => Severity::Notice,
            Verdict::Drop => Severity::Alert,
        },
        reference: reference.into(),
    }
}

fn audit_flows(fs: &FlowSet) -> usize {
    fs.iter()
        .filter(|f| decode(f.cookie).feature == Feature::Audit as u8)
        .count()
}

#[test]
fn logging_flows_and_the_meter_come_and_go_with_the_annotation() {
    let mut m = cluster();
    let before = all_flows(&m);
    assert!(before
        .values()
        .all(|fs| audit_flows(fs) == 0 && fs.meters().is_empty()));
    // tools logs, but no policy of tools isolates anything: nothing to log.
    m.set_acl_logging("tools", Some(logging())).expect("tools");
    assert_eq!(all_flows(&m), before);
    m.set_acl_logging("shop", Some(logging())).expect("shop");
    let on = all_flows(&m);
    // n1 has web (isolated both ways): logging twins of the plain allow (tcp 80), of the two
    // conj_id flows (udp 53 from tools, tcp 5432 to shop) and the two isolation drops.
    assert_eq!(audit_flows(&on["n1"]), 5);
    assert_eq!(on["n1"].meters().len(), 1);
    assert_eq!(on["n1"].meters()[0].bands[0].rate, 20);
    // n2 has no pod a policy of shop selects.
    assert_eq!(audit_flows(&on["n2"]), 0);
    assert!(on["n2"].meters().is_empty());
    // Only the logging flows and the meter were added.
    let d = FlowSet::diff(&before["n1"], &on["n1"]);
    assert_eq!((d.adds.len(), d.deletes.len(), d.modifies.len()), (5, 0, 0));
    assert_eq!(d.meter_adds.len(), 1);
    // A new rate is a meter modify.
    let cfg = AuditConfig {
        rate_limit: 7,
        ..AuditConfig::default()
    };
    m.set_audit_config(cfg).expect("config");
    let slower = all_flows(&m);
    let d = FlowSet::diff(&on["n1"], &slower["n1"]);
    assert_eq!((d.len(), d.meter_modifies.len()), (1, 1));
    // Allow only: the two drops go.
    m.set_acl_logging(
        "shop",
        Some(AclLogging {
            allow: Some(Severity::Info),
            deny: None,
        }),
    )
    .expect("allow only");
    assert_eq!(audit_flows(&all_flows(&m)["n1"]), 3);
    // Off: exactly the flows of before.
    m.set_acl_logging("shop", None).expect("off");
    assert_eq!(all_flows(&m), before);
    // An incremental pipeline agrees with a fresh one at every step.
    let mut p = topology::Pipeline::new();
    let _ = p.node_flows(&m, "n1").expect("flows");
    m.set_acl_logging("shop", Some(logging()))
        .expect("on again");
    assert_eq!(
        p.node_flows(&m, "n1").expect("flows"),
        on_with_rate(&on["n1"], 7)
    );
}

/// `fs` with its meter at `rate`.
fn on_with_rate(fs: &FlowSet, rate: u32) -> FlowSet {
    fs.clone()
        .with_meters(vec![topology::pipeline::audit::audit_meter(rate)])
}

#[test]
fn new_connections_are_logged_once_with_their_policy_and_verdict() {
    let mut m = cluster();
    m.set_acl_logging("shop", Some(logging())).expect("shop");
    let sim = Simulator::from_model(&m, &all_flows(&m));
    let (web, db, client, other) = (
        pod(&m, "shop", "web"),
        pod(&m, "shop", "db"),
        pod(&m, "tools", "client"),
        pod(&m, "tools", "other"),
    );

    // Allowed TCP 80 from another node: logged once on web's node, as an ingress allow.
    let syn = packet(&client, &web, 6, 40000, 80);
    let t = sim.trace(&client.node, syn.clone());
    assert_eq!(t.delivered(), vec![("n1", "web")]);
    assert_eq!(
        logged(&t),
        vec![("n1".into(), tag(Verdict::Allow, "ingress", "NP:shop:web"))]
    );
    // Its second packet and the reply: established, nothing logged.
    let t = sim.trace(&client.node, syn);
    assert_eq!((t.delivered().len(), t.packet_ins.len()), (1, 0));
    let t = sim.trace(&web.node, packet(&web, &client, 6, 80, 40000));
    assert_eq!(t.delivered(), vec![("n2", "client")]);
    assert!(t.packet_ins.is_empty(), "a reply is not logged: {t:?}");

    // UDP 53 from tools (a conjunction): logged as allowed by the policy.
    let t = sim.trace(&client.node, packet(&client, &web, 17, 5353, 53));
    assert_eq!(t.delivered().len(), 1);
    assert_eq!(
        logged(&t),
        vec![("n1".into(), tag(Verdict::Allow, "ingress", "NP:shop:web"))]
    );

    // Denied: TCP 22 and ICMP; every attempt is new (a denied packet is never committed).
    for _ in 0..2 {
        let t = sim.trace(&client.node, packet(&client, &web, 6, 40001, 22));
        assert!(t.dropped());
        assert_eq!(
            logged(&t),
            vec![(
                "n1".into(),
                tag(Verdict::Drop, "ingress", "NP:shop:Ingress")
            )]
        );
    }
    let ping = Packet::l3(
        client.ofport,
        client.mac(),
        web.mac(),
        L3::Ipv4 {
            src: client.ip,
            dst: web.ip,
            proto: 1,
            src_port: 8,
            dst_port: 0,
        },
    );
    let t = sim.trace(&client.node, ping);
    assert!(t.dropped());
    assert_eq!(logged(&t).len(), 1);

    // Egress of web: TCP 5432 to db allowed (logged on web's node, an egress allow); TCP 80
    // to db denied by web's egress isolation.
    let t = sim.trace(&web.node, packet(&web, &db, 6, 41000, 5432));
    assert_eq!(t.delivered(), vec![("n2", "db")]);
    assert_eq!(
        logged(&t),
        vec![("n1".into(), tag(Verdict::Allow, "egress", "NP:shop:web"))]
    );
    let t = sim.trace(&web.node, packet(&web, &db, 6, 41001, 80));
    assert!(t.dropped());
    assert_eq!(
        logged(&t),
        vec![("n1".into(), tag(Verdict::Drop, "egress", "NP:shop:Egress"))]
    );

    // tools has no policy: its pods' own traffic is never logged.
    let t = sim.trace(&client.node, packet(&client, &other, 6, 42000, 8080));
    assert_eq!(t.delivered(), vec![("n1", "other")]);
    assert!(t.packet_ins.is_empty());
}

#[test]
fn only_the_chosen_verdicts_are_logged() {
    let mut m = cluster();
    m.set_acl_logging(
        "shop",
        Some(AclLogging {
            deny: Some(Severity::Warning),
            allow: None,
        }),
    )
    .expect("deny only");
    let sim = Simulator::from_model(&m, &all_flows(&m));
    let (web, client) = (pod(&m, "shop", "web"), pod(&m, "tools", "client"));
    let t = sim.trace(&client.node, packet(&client, &web, 6, 40000, 80));
    assert_eq!((t.delivered().len(), t.packet_ins.len()), (1, 0));
    let t = sim.trace(&client.node, packet(&client, &web, 6, 40001, 23));
    let l = logged(&t);
    assert_eq!(l.len(), 1);
    assert_eq!(
        (l[0].1.verdict, l[0].1.severity),
        (Verdict::Drop, Severity::Warning)
    );
}

/// `shop`'s EgressNetworkPolicy: rule 0 denies 203.0.113.7, rule 1 allows 203.0.113.0/24,
/// rule 2 denies everything else.
fn firewall(m: &mut ClusterModel) {
    use topology::model::{EgressAction, EgressFirewall, EgressRule, EgressTo};
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
}

/// A TCP SYN from `from` to an outside address (the destination MAC is table 31's business).
fn outside(from: &PodInfo, dst: Ipv4Addr, sport: u16) -> Packet {
    Packet::l3(
        from.ofport,
        from.mac(),
        [0x0a, 0x58, 0, 0, 0, 1],
        L3::Ipv4 {
            src: from.ip,
            dst,
            proto: 6,
            src_port: sport,
            dst_port: 443,
        },
    )
}

fn firewall_twins(fs: &FlowSet) -> usize {
    fs.iter()
        .filter(|f| f.table == 100 && decode(f.cookie).feature == Feature::Audit as u8)
        .count()
}

#[test]
fn egress_firewall_rules_are_logged_once_per_new_connection_with_their_index() {
    let mut m = cluster();
    firewall(&mut m);
    let before = all_flows(&m);
    m.set_acl_logging("shop", Some(logging())).expect("shop");
    let on = all_flows(&m);
    // Both nodes hold shop's table 100 (web on n1, db on n2): a twin per rule, and the meter.
    for n in ["n1", "n2"] {
        assert_eq!(firewall_twins(&on[n]), 3, "{n}");
        assert_eq!(on[n].meters().len(), 1, "{n}");
    }
    let sim = Simulator::from_model(&m, &all_flows(&m));
    // db is selected by no policy: only its firewall decides (and logs).
    let db = pod(&m, "shop", "db");
    let allowed = Ipv4Addr::new(203, 0, 113, 5);
    let t = sim.trace(&db.node, outside(&db, allowed, 40000));
    assert_eq!(t.to_host(), vec!["n2"], "{t:?}");
    assert_eq!(
        logged(&t),
        vec![("n2".into(), tag(Verdict::Allow, "egress", "EF:shop:1"))]
    );
    // The same connection's next packet: established, not logged.
    let t = sim.trace(&db.node, outside(&db, allowed, 40000));
    assert_eq!((t.to_host().len(), t.packet_ins.len()), (1, 0));
    // Denied by rule 0 (inside rule 1's prefix: the first match wins) and by rule 2; each
    // attempt (a new source port) logged. (Table 30 committed the attempt before table 100
    // dropped it; a retransmission of it is the shim's to count as a repeat.)
    for (dst, rule) in [
        (Ipv4Addr::new(203, 0, 113, 7), "EF:shop:0"),
        (Ipv4Addr::new(8, 8, 8, 8), "EF:shop:2"),
    ] {
        for sport in [40001, 40002] {
            let t = sim.trace(&db.node, outside(&db, dst, sport));
            assert!(t.dropped(), "{dst}: {t:?}");
            assert_eq!(
                logged(&t),
                vec![("n2".into(), tag(Verdict::Drop, "egress", rule))],
                "{dst}"
            );
        }
    }
    // tools has no firewall: never logged.
    let other = pod(&m, "tools", "other");
    let t = sim.trace(&other.node, outside(&other, allowed, 40003));
    assert_eq!((t.to_host().len(), t.packet_ins.len()), (1, 0));

    // Deny only: the allow rule's twin goes.
    m.set_acl_logging(
        "shop",
        Some(AclLogging {
            deny: Some(Severity::Info),
            allow: None,
        }),
    )
    .expect("deny only");
    assert_eq!(firewall_twins(&all_flows(&m)["n2"]), 2);
    // Off: exactly the flows of before; an incremental pipeline agrees.
    let mut p = topology::Pipeline::new();
    let _ = p.node_flows(&m, "n2").expect("flows");
    m.set_acl_logging("shop", None).expect("off");
    assert_eq!(all_flows(&m), before);
    assert_eq!(p.node_flows(&m, "n2").expect("flows"), before["n2"]);
}

#[test]
fn traffic_relayed_to_an_egress_ip_node_is_logged_by_the_pods_node_only() {
    use topology::model::HostSubnetEgress;
    let mut m = cluster();
    firewall(&mut m);
    let eip = Ipv4Addr::new(192, 168, 0, 100);
    m.set_host_subnet_egress(
        "n1",
        HostSubnetEgress {
            egress_ips: vec![eip],
            egress_cidrs: vec![],
        },
    )
    .expect("hostsubnet");
    m.set_namespace_egress_ips("shop", &[eip])
        .expect("egress ip");
    m.set_acl_logging("shop", Some(logging())).expect("shop");
    let sim = Simulator::from_model(&m, &all_flows(&m));
    let db = pod(&m, "shop", "db");
    // db (n2) leaves through n1's egress IP: n2 judges and logs, n1 judges again (the same
    // rules) without logging.
    let t = sim.trace(&db.node, outside(&db, Ipv4Addr::new(203, 0, 113, 5), 40000));
    assert_eq!(t.to_host(), vec!["n1"], "{t:?}");
    assert!(
        t.steps.iter().any(|s| s.node == "n1" && s.table == 100),
        "n1 judges the relayed packet: {t:?}"
    );
    assert_eq!(
        logged(&t),
        vec![("n2".into(), tag(Verdict::Allow, "egress", "EF:shop:1"))]
    );
}

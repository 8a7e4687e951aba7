//! NetworkPolicy done-when properties: over random clusters and random policies, the
//! simulator's verdict on the computed flows for every (source pod, destination pod or
//! address, protocol, port) equals the reference evaluator (`netpol_reference`), replies of
//! allowed connections pass, the incremental pipeline equals a full recompute, and a policy's
//! flows grow with the sum of its pods, peers and ports.

mod netpol_reference;

use netpol_reference::{allowed, End};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use topology::model::{
    ContainerPort, LabelSelector, NetworkPolicy, Peer, PodAttach, PodMeta, PolicyPort, PolicyRule,
    PortSpec, Protocol, Requirement, SelectorOp,
};
use topology::sim::{Packet, Simulator};
use topology::{ClusterModel, ClusterNetworkConfig, FlowSet, Mode, Pipeline, PodInfo};

const KEYS: [&str; 2] = ["app", "tier"];
const VALUES: [&str; 3] = ["a", "b", "c"];
const PORT_NAMES: [&str; 2] = ["http", "dns"];
/// (protocol number, port) probed for every pair.
const PROBES: [(u8, u16); 6] = [(6, 80), (6, 8080), (17, 53), (6, 5353), (132, 80), (1, 0)];
/// Destinations outside the cluster (egress ipBlocks).
const EXTERNAL: [Ipv4Addr; 2] = [Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(198, 51, 100, 7)];

fn labels_strategy() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(
        prop::sample::select(&KEYS[..]).prop_map(String::from),
        prop::sample::select(&VALUES[..]).prop_map(String::from),
        0..3,
    )
}

fn selector_strategy() -> impl Strategy<Value = LabelSelector> {
    let req = (
        prop::sample::select(&KEYS[..]),
        0..4usize,
        prop::collection::btree_set(prop::sample::select(&VALUES[..]), 1..3),
    )
        .prop_map(|(k, op, vals)| {
            let op = [
                SelectorOp::In,
                SelectorOp::NotIn,
                SelectorOp::Exists,
                SelectorOp::DoesNotExist,
            ][op];
            let values = match op {
                SelectorOp::In | SelectorOp::NotIn => vals.into_iter().map(String::from).collect(),
                _ => BTreeSet::new(),
            };
            Requirement {
                key: k.to_string(),
                op,
                values,
            }
        });
    (
        prop::collection::btree_map(
            prop::sample::select(&KEYS[..]).prop_map(String::from),
            prop::sample::select(&VALUES[..]).prop_map(String::from),
            0..2,
        ),
        prop::collection::vec(req, 0..2),
    )
        .prop_map(|(match_labels, match_expressions)| LabelSelector {
            match_labels,
            match_expressions,
        })
}

fn cidr(s: &str) -> topology::Ipv4Cidr {
    s.parse().expect("cidr")
}

fn peer_strategy() -> impl Strategy<Value = Peer> {
    prop_oneof![
        selector_strategy().prop_map(|s| Peer::Pods {
            namespace_selector: None,
            pod_selector: Some(s)
        }),
        selector_strategy().prop_map(|s| Peer::Pods {
            namespace_selector: Some(s),
            pod_selector: None
        }),
        (selector_strategy(), selector_strategy()).prop_map(|(n, p)| Peer::Pods {
            namespace_selector: Some(n),
            pod_selector: Some(p)
        }),
        prop::sample::select(vec![
            ("10.128.0.0/16", vec!["10.128.1.0/24"]),
            ("10.128.0.0/23", vec![]),
            ("192.0.2.0/24", vec!["192.0.2.8/30"]),
            ("0.0.0.0/0", vec!["10.128.0.0/14"]),
            ("198.51.100.0/24", vec![]),
        ])
        .prop_map(|(c, ex)| Peer::IpBlock {
            cidr: cidr(c),
            except: ex.into_iter().map(cidr).collect(),
        }),
    ]
}

fn port_strategy() -> impl Strategy<Value = PolicyPort> {
    let proto = prop::sample::select(vec![
        Protocol::Tcp,
        Protocol::Tcp,
        Protocol::Udp,
        Protocol::Sctp,
    ]);
    (proto, 0..6usize).prop_map(|(protocol, k)| {
        let (port, end_port) = match k {
            0 => (None, None),
            1 => (Some(PortSpec::Number(80)), None),
            2 => (Some(PortSpec::Number(53)), None),
            3 => (Some(PortSpec::Number(5000)), Some(8080)),
            4 => (Some(PortSpec::Name("http".into())), None),
            _ => (Some(PortSpec::Name("dns".into())), None),
        };
        PolicyPort {
            protocol,
            port,
            end_port,
        }
    })
}

fn rule_strategy() -> impl Strategy<Value = PolicyRule> {
    (
        prop::collection::vec(peer_strategy(), 0..3),
        prop::collection::vec(port_strategy(), 0..3),
    )
        .prop_map(|(peers, ports)| PolicyRule { peers, ports })
}

#[derive(Clone, Debug)]
struct PolicySpec {
    ns: usize,
    pod_selector: LabelSelector,
    types: (bool, bool),
    ingress: Vec<PolicyRule>,
    egress: Vec<PolicyRule>,
}

fn policy_strategy() -> impl Strategy<Value = PolicySpec> {
    (
        1..4usize,
        prop_oneof![Just(LabelSelector::everything()), selector_strategy()],
        prop::sample::select(vec![(true, false), (false, true), (true, true)]),
        prop::collection::vec(rule_strategy(), 0..3),
        prop::collection::vec(rule_strategy(), 0..3),
    )
        .prop_map(|(ns, pod_selector, types, ingress, egress)| PolicySpec {
            ns,
            pod_selector,
            types,
            ingress,
            egress,
        })
}

#[derive(Clone, Debug)]
struct PodSpec {
    ns: usize,
    node: usize,
    labels: BTreeMap<String, String>,
    /// Named ports: (name index, protocol is UDP, port).
    ports: Vec<(usize, bool, u16)>,
}

fn pod_strategy() -> impl Strategy<Value = PodSpec> {
    (
        0..4usize,
        0..3usize,
        labels_strategy(),
        prop::collection::vec(
            (
                0..2usize,
                any::<bool>(),
                prop::sample::select(vec![80u16, 53, 8080, 5353]),
            ),
            0..2,
        ),
    )
        .prop_map(|(ns, node, labels, ports)| PodSpec {
            ns,
            node,
            labels,
            ports,
        })
}

#[derive(Clone, Debug)]
struct Cluster {
    nodes: usize,
    ns_labels: Vec<BTreeMap<String, String>>,
    pods: Vec<PodSpec>,
    policies: Vec<PolicySpec>,
}

fn cluster_strategy() -> impl Strategy<Value = Cluster> {
    (
        1..4usize,
        prop::collection::vec(labels_strategy(), 4),
        prop::collection::vec(pod_strategy(), 2..9),
        prop::collection::vec(policy_strategy(), 1..6),
    )
        .prop_map(|(nodes, ns_labels, pods, policies)| Cluster {
            nodes,
            ns_labels,
            pods,
            policies,
        })
}

fn ns_name(i: usize) -> String {
    if i == 0 {
        "default".into()
    } else {
        format!("ns{i}")
    }
}

fn build(c: &Cluster) -> ClusterModel {
    let config = ClusterNetworkConfig::new(
        "10.128.0.0/14".parse().expect("cidr"),
        24,
        "172.30.0.0/16".parse().expect("cidr"),
        Mode::Networkpolicy,
    );
    let mut m = ClusterModel::new(config).expect("model");
    for i in 0..c.nodes {
        m.add_node(
            &format!("node{i}"),
            Ipv4Addr::new(192, 168, 1, 10 + i as u8),
            100 + i as u64,
        )
        .expect("node");
    }
    for (i, l) in c.ns_labels.iter().enumerate() {
        let n = ns_name(i);
        m.add_namespace(&n).expect("ns");
        m.set_namespace_labels(&n, l.clone()).expect("ns labels");
    }
    for (k, p) in c.pods.iter().enumerate() {
        let mut seen = BTreeSet::new();
        let ports = p
            .ports
            .iter()
            .filter(|(n, _, _)| seen.insert(*n))
            .map(|(n, udp, port)| ContainerPort {
                name: PORT_NAMES[*n].to_string(),
                protocol: if *udp { Protocol::Udp } else { Protocol::Tcp },
                port: *port,
            })
            .collect();
        m.add_pod_with(
            PodAttach {
                namespace: &ns_name(p.ns),
                name: &format!("pod{k}"),
                node: &format!("node{}", p.node % c.nodes),
                port_name: &format!("veth{k}"),
                ofport: 10 + k as u32,
            },
            PodMeta {
                labels: p.labels.clone(),
                ports,
            },
        )
        .expect("pod");
    }
    for (k, p) in c.policies.iter().enumerate() {
        m.apply_policy(NetworkPolicy {
            namespace: ns_name(p.ns),
            name: format!("pol{k}"),
            pod_selector: p.pod_selector.clone(),
            ingress_isolation: p.types.0,
            egress_isolation: p.types.1,
            ingress: p.ingress.clone(),
            egress: p.egress.clone(),
        })
        .expect("policy");
    }
    m
}

fn all_flows(m: &ClusterModel) -> BTreeMap<String, FlowSet> {
    let mut p = Pipeline::new();
    m.nodes()
        .map(|n| (n.name.clone(), p.node_flows(m, &n.name).expect("flows")))
        .collect()
}

fn packet(src: &PodInfo, dst: Ipv4Addr, proto: u8, port: u16, sport: u16) -> Packet {
    let mut p = Packet::l4(src.ofport, src.mac(), src.ip, dst, proto, port);
    if let topology::sim::L3::Ipv4 { src_port, .. } = &mut p.l3 {
        *src_port = sport;
    }
    p
}

fn reached(t: &topology::Trace, dst: End<'_>) -> bool {
    match dst {
        End::Pod(d) => t.delivered() == vec![(d.node.as_str(), d.port_name.as_str())],
        End::Addr(_) => !t.to_host().is_empty(),
    }
}

fn check(m: &ClusterModel) -> Result<(usize, usize), TestCaseError> {
    let flows = all_flows(m);
    let sim = Simulator::from_model(m, &flows);
    let pods: Vec<&PodInfo> = m.pods().collect();
    let (mut yes, mut no) = (0, 0);
    for a in &pods {
        let mut dsts: Vec<End<'_>> = pods
            .iter()
            .filter(|b| b.key != a.key)
            .map(|b| End::Pod(b))
            .collect();
        dsts.extend(EXTERNAL.iter().map(|ip| End::Addr(*ip)));
        for dst in dsts {
            let dst_ip = match dst {
                End::Pod(b) => b.ip,
                End::Addr(ip) => ip,
            };
            for (proto, port) in PROBES {
                sim.flush_conntrack();
                let want = allowed(m, End::Pod(a), dst, proto, port);
                let t = sim.trace(&a.node, packet(a, dst_ip, proto, port, 40000));
                let got = reached(&t, dst);
                prop_assert_eq!(
                    got,
                    want,
                    "{} -> {:?} proto {} port {}: trace {:?}",
                    a.key,
                    dst,
                    proto,
                    port,
                    t
                );
                if want {
                    yes += 1;
                } else {
                    no += 1;
                }
                // The reply of an allowed connection passes, whatever the policies say about
                // new connections the other way.
                if let (true, End::Pod(b)) = (want, dst) {
                    let r = sim.trace(&b.node, packet(b, a.ip, proto, 40000, port));
                    prop_assert_eq!(
                        r.delivered(),
                        vec![(a.node.as_str(), a.port_name.as_str())],
                        "reply {} -> {} proto {} port {}: {:?}",
                        b.key,
                        a.key,
                        proto,
                        port,
                        r
                    );
                }
            }
        }
    }
    Ok((yes, no))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn simulator_agrees_with_the_reference_evaluator(c in cluster_strategy()) {
        let m = build(&c);
        let (yes, no) = check(&m)?;
        if std::env::var_os("NETPOL_STATS").is_some() {
            eprintln!("allowed {yes} denied {no} policies {}", c.policies.len());
        }
    }

    #[test]
    fn incremental_equals_full_recompute(c in cluster_strategy(), relabel in labels_strategy(), which in 0..8usize) {
        let mut m = build(&c);
        let mut p = Pipeline::new();
        let mut cached: BTreeMap<String, FlowSet> = m
            .nodes()
            .map(|n| (n.name.clone(), p.node_flows(&m, &n.name).expect("flows")))
            .collect();
        let pods: Vec<PodInfo> = m.pods().cloned().collect();
        let pod = &pods[which % pods.len()];
        let affected = m
            .set_pod_meta(&pod.key.namespace, &pod.key.name, PodMeta { labels: relabel, ports: pod.ports.clone() })
            .expect("relabel");
        for (n, fs) in p.recompute(&m, &affected).expect("recompute") {
            cached.insert(n, fs);
        }
        let full = all_flows(&m);
        let differ: Vec<&String> = full.iter().filter(|(n, f)| cached.get(*n) != Some(f)).map(|(n, _)| n).collect();
        prop_assert!(differ.is_empty(), "after relabel: nodes {:?} differ; affected {:?}; {:?}", differ, affected, differ.first().map(|n| FlowSet::diff(&cached[*n], &full[*n])));
        // A pod leaves, another comes, a namespace is relabelled: each recomputes only the
        // nodes it says it affected, and the result equals a full recompute.
        let gone = &pods[(which + 1) % pods.len()];
        let affected = m.delete_pod(&gone.key.namespace, &gone.key.name).expect("delete");
        for (n, fs) in p.recompute(&m, &affected).expect("recompute") {
            cached.insert(n, fs);
        }
        prop_assert_eq!(&cached, &all_flows(&m), "after delete");
        let (_, affected) = m
            .add_pod_with(
                PodAttach {
                    namespace: &gone.key.namespace,
                    name: "newcomer",
                    node: &gone.node,
                    port_name: "newcomer",
                    ofport: 999,
                },
                PodMeta { labels: pod.labels.clone(), ports: gone.ports.clone() },
            )
            .expect("add");
        for (n, fs) in p.recompute(&m, &affected).expect("recompute") {
            cached.insert(n, fs);
        }
        prop_assert_eq!(&cached, &all_flows(&m), "after add");
        let (_, affected) = m.add_namespace("late").expect("late namespace");
        for (n, fs) in p.recompute(&m, &affected).expect("recompute") {
            cached.insert(n, fs);
        }
        prop_assert_eq!(&cached, &all_flows(&m), "after late namespace");
        let affected = m
            .set_namespace_labels(&pod.key.namespace, [("app".to_string(), "b".to_string())].into())
            .expect("ns labels");
        for (n, fs) in p.recompute(&m, &affected).expect("recompute") {
            cached.insert(n, fs);
        }
        prop_assert_eq!(&cached, &all_flows(&m), "after namespace relabel");
        // A policy goes and comes back: the cached conjunctions of the others stay valid.
        let first = m.policies().next().cloned();
        if let Some(pol) = first {
            let affected = m.delete_policy(&pol.namespace, &pol.name).expect("delete policy");
            for (n, fs) in p.recompute(&m, &affected).expect("recompute") {
                cached.insert(n, fs);
            }
            prop_assert_eq!(&cached, &all_flows(&m), "after policy delete");
            let affected = m.apply_policy(pol).expect("apply policy");
            for (n, fs) in p.recompute(&m, &affected).expect("recompute") {
                cached.insert(n, fs);
            }
            prop_assert_eq!(&cached, &all_flows(&m), "after policy re-apply");
        }
        check(&m)?;
    }
}

/// A hand-made cluster where every kind of outcome occurs, so that the property above cannot
/// pass by accident (e.g. with every packet dropped).
#[test]
fn default_deny_then_allow_from_namespace() {
    let c = Cluster {
        nodes: 2,
        ns_labels: vec![
            BTreeMap::new(),
            [("team".to_string(), "x".to_string())].into(),
            BTreeMap::new(),
            BTreeMap::new(),
        ],
        pods: (0..6)
            .map(|k| PodSpec {
                ns: 1 + k % 3,
                node: k % 2,
                labels: [("app".to_string(), "a".to_string())].into(),
                ports: vec![(0, false, 8080)],
            })
            .collect(),
        policies: vec![],
    };
    let mut m = build(&c);
    let (open_yes, open_no) = check(&m).expect("open");
    assert!(
        open_yes > 0 && open_no == 0,
        "no policy: all open ({open_yes} {open_no})"
    );
    // Default deny in ns2, then allow from namespaces labelled team=x on named port http.
    m.apply_policy(NetworkPolicy {
        namespace: "ns2".into(),
        name: "deny".into(),
        pod_selector: LabelSelector::everything(),
        ingress_isolation: true,
        egress_isolation: false,
        ingress: vec![],
        egress: vec![],
    })
    .expect("deny");
    let flows = all_flows(&m);
    let sim = Simulator::from_model(&m, &flows);
    let a = m.pods_in("ns1").next().cloned().expect("ns1 pod");
    let b = m.pods_in("ns2").next().cloned().expect("ns2 pod");
    assert!(sim
        .trace(&a.node, packet(&a, b.ip, 6, 8080, 1234))
        .dropped());
    m.apply_policy(NetworkPolicy {
        namespace: "ns2".into(),
        name: "from-team-x".into(),
        pod_selector: LabelSelector::everything(),
        ingress_isolation: true,
        egress_isolation: false,
        ingress: vec![PolicyRule {
            peers: vec![Peer::Pods {
                namespace_selector: Some(LabelSelector::labels([("team", "x")])),
                pod_selector: None,
            }],
            ports: vec![PolicyPort {
                protocol: Protocol::Tcp,
                port: Some(PortSpec::Name("http".into())),
                end_port: None,
            }],
        }],
        egress: vec![],
    })
    .expect("allow");
    let flows = all_flows(&m);
    let sim = Simulator::from_model(&m, &flows);
    let t = sim.trace(&a.node, packet(&a, b.ip, 6, 8080, 1234));
    assert_eq!(
        t.delivered(),
        vec![(b.node.as_str(), b.port_name.as_str())],
        "{t:?}"
    );
    // The step that decided on b's node names the policy.
    let ck = topology::pipeline::cookie::policy_cookie("ns2", "from-team-x");
    assert!(
        t.steps.iter().any(|s| s.cookie == ck && s.table == 80),
        "{t:?}"
    );
    assert!(sim.trace(&a.node, packet(&a, b.ip, 6, 80, 1234)).dropped());
    check(&m).expect("reference");
}

/// Flows grow with the sum of pods, peers and ports: a policy selecting 40 pods and allowing
/// 40 peer pods on 3 ports, all on one node, costs about 40 + 40 + 3, not 40 × 40 × 3.
#[test]
fn flows_grow_with_the_sum() {
    let c = Cluster {
        nodes: 1,
        ns_labels: vec![BTreeMap::new(); 4],
        pods: (0..80)
            .map(|k| PodSpec {
                ns: 1 + k % 2,
                node: 0,
                labels: [(
                    "app".to_string(),
                    if k % 2 == 0 { "a" } else { "b" }.to_string(),
                )]
                .into(),
                ports: vec![],
            })
            .collect(),
        policies: vec![],
    };
    let mut m = build(&c);
    let base = all_flows(&m)["node0"].len();
    m.apply_policy(NetworkPolicy {
        namespace: "ns1".into(),
        name: "web".into(),
        pod_selector: LabelSelector::everything(),
        ingress_isolation: true,
        egress_isolation: false,
        ingress: vec![PolicyRule {
            peers: vec![Peer::Pods {
                namespace_selector: Some(LabelSelector::everything()),
                pod_selector: Some(LabelSelector::labels([("app", "b")])),
            }],
            ports: [80, 443, 8443]
                .into_iter()
                .map(|p| PolicyPort {
                    protocol: Protocol::Tcp,
                    port: Some(PortSpec::Number(p)),
                    end_port: None,
                })
                .collect(),
        }],
        egress: vec![],
    })
    .expect("policy");
    let added = all_flows(&m)["node0"].len() - base;
    // 40 selected (+40 isolation drops), <= 40 peer prefixes, 3 ports, 1 conj_id flow.
    assert!(added <= 40 + 40 + 40 + 3 + 1, "{added} flows");
    assert!(added > 40 + 3, "{added} flows");
    check(&m).expect("reference");
}

/// The worked example of docs/pipeline.md is what the pipeline computes: every table-80 line
/// quoted there is one of node0's flows, as `ovs-ofctl dump-flows --no-stats` prints it.
#[test]
fn worked_example_in_the_docs() {
    let config = ClusterNetworkConfig::new(
        "10.128.0.0/14".parse().expect("cidr"),
        23,
        "172.30.0.0/16".parse().expect("cidr"),
        Mode::Networkpolicy,
    );
    let mut m = ClusterModel::new(config).expect("model");
    m.add_node("node0", Ipv4Addr::new(192, 168, 1, 10), 1)
        .expect("n0");
    m.add_node("node1", Ipv4Addr::new(192, 168, 1, 11), 2)
        .expect("n1");
    for ns in ["shop", "tools"] {
        m.add_namespace(ns).expect("ns");
    }
    m.set_namespace_labels("tools", [("team".to_string(), "x".to_string())].into())
        .expect("labels");
    let pod = |m: &mut ClusterModel, ns: &str, name: &str, node: &str, port: u32, app: &str| {
        m.add_pod_with(
            PodAttach {
                namespace: ns,
                name,
                node,
                port_name: name,
                ofport: port,
            },
            PodMeta {
                labels: [("app".to_string(), app.to_string())].into(),
                ports: Vec::new(),
            },
        )
        .expect("pod")
    };
    pod(&mut m, "shop", "web-0", "node0", 3, "web");
    pod(&mut m, "shop", "lb-0", "node1", 3, "lb");
    pod(&mut m, "tools", "ci-0", "node1", 4, "ci");
    m.apply_policy(NetworkPolicy {
        namespace: "shop".into(),
        name: "web".into(),
        pod_selector: LabelSelector::labels([("app", "web")]),
        ingress_isolation: true,
        egress_isolation: false,
        ingress: vec![PolicyRule {
            peers: vec![
                Peer::Pods {
                    namespace_selector: Some(LabelSelector::labels([("team", "x")])),
                    pod_selector: None,
                },
                Peer::Pods {
                    namespace_selector: None,
                    pod_selector: Some(LabelSelector::labels([("app", "lb")])),
                },
            ],
            ports: vec![
                PolicyPort {
                    protocol: Protocol::Tcp,
                    port: Some(PortSpec::Number(80)),
                    end_port: None,
                },
                PolicyPort {
                    protocol: Protocol::Tcp,
                    port: Some(PortSpec::Number(8000)),
                    end_port: Some(8003),
                },
            ],
        }],
        egress: vec![],
    })
    .expect("policy");
    let flows = all_flows(&m);
    let lines: Vec<String> = flows["node0"]
        .iter()
        .filter(|f| f.table == 80 && f.priority != 300 && f.priority != 0)
        .map(|f| f.to_string())
        .collect();
    if std::env::var_os("NETPOL_PRINT").is_some() {
        for l in &lines {
            println!("{l}");
        }
    }
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/pipeline.md"))
        .expect("docs/pipeline.md");
    assert!(lines.len() >= 9, "{lines:#?}");
    for l in &lines {
        // The docs elide the cookie.
        let shown = l.split_once(", ").map_or(l.as_str(), |(_, rest)| rest);
        assert!(doc.contains(shown), "docs/pipeline.md lacks {shown:?}");
    }
}

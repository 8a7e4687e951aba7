//! The incremental pipeline equals a full recompute after random mutation sequences; the diff
//! is minimal and applies exactly; recomputing an unchanged model gives an empty diff.

mod common;

use common::*;
use ofproto::{Action, Bucket, Flow, Group, GroupType, Match};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use topology::model::{Affected, PodAttach};
use topology::{compute_node, ClusterModel, FlowSet, Mode, Pipeline};

#[derive(Clone, Debug)]
enum Mutation {
    AddNode,
    DeleteNode(usize),
    NodeIp(usize, u8),
    AddNamespace,
    DeleteNamespace(usize),
    AddPod(usize, usize),
    DeletePod(usize),
    PodPort(usize, u32),
    NetId(Op),
    /// The cluster's mode (0 subnet, 1 multitenant, 2 networkpolicy).
    SetMode(u8),
    /// The overlay MTU.
    Mtu(u16),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        Just(Mutation::AddNode),
        (0..4usize).prop_map(Mutation::DeleteNode),
        (0..4usize, 1..250u8).prop_map(|(a, b)| Mutation::NodeIp(a, b)),
        Just(Mutation::AddNamespace),
        (1..6usize).prop_map(Mutation::DeleteNamespace),
        (0..6usize, 0..4usize).prop_map(|(a, b)| Mutation::AddPod(a, b)),
        (0..10usize).prop_map(Mutation::DeletePod),
        (0..10usize, 3..60u32).prop_map(|(a, b)| Mutation::PodPort(a, b)),
        op().prop_map(Mutation::NetId),
        (0..3u8).prop_map(Mutation::SetMode),
        (1300..1500u16).prop_map(Mutation::Mtu),
    ]
}

/// Applies `x`; what the model says it affected (nothing when it refused).
fn mutate(m: &mut ClusterModel, x: &Mutation, counter: &mut usize) -> Affected {
    *counter += 1;
    let c = *counter;
    let nodes: Vec<String> = m.nodes().map(|n| n.name.clone()).collect();
    let nss: Vec<String> = m.namespaces().map(|n| n.name).collect();
    let pods: Vec<(String, String)> = m
        .pods()
        .map(|p| (p.key.namespace.clone(), p.key.name.clone()))
        .collect();
    // Errors (unknown objects, ports in use, ...) are fine: the model refuses and is unchanged.
    let r = match x {
        Mutation::AddNode => m
            .add_node(
                &format!("n{c}"),
                Ipv4Addr::new(192, 168, 2, c as u8),
                1000 + c as u64,
            )
            .map(|(_, a)| a),
        Mutation::DeleteNode(i) if !nodes.is_empty() => m.delete_node(&nodes[i % nodes.len()]),
        Mutation::NodeIp(i, b) if !nodes.is_empty() => {
            let n = m.node(&nodes[i % nodes.len()]).expect("node").clone();
            m.add_node(&n.name, Ipv4Addr::new(192, 168, 3, *b), n.dpid)
                .map(|(_, a)| a)
        }
        Mutation::AddNamespace => m.add_namespace(&format!("x{c}")).map(|(_, a)| a),
        Mutation::DeleteNamespace(i) if !nss.is_empty() => m.delete_namespace(&nss[i % nss.len()]),
        Mutation::AddPod(ns, node) if !nss.is_empty() && !nodes.is_empty() => m
            .add_pod(PodAttach {
                namespace: &nss[ns % nss.len()],
                name: &format!("p{c}"),
                node: &nodes[node % nodes.len()],
                port_name: &format!("v{c}"),
                ofport: 100 + c as u32,
            })
            .map(|(_, a)| a),
        Mutation::DeletePod(i) if !pods.is_empty() => {
            let (ns, n) = &pods[i % pods.len()];
            m.delete_pod(ns, n)
        }
        Mutation::PodPort(i, port) if !pods.is_empty() => {
            let (ns, n) = &pods[i % pods.len()];
            m.set_pod_port(ns, n, "renamed", *port)
        }
        Mutation::NetId(o) if !nss.is_empty() => {
            let names = nss.clone();
            let pick = |i: &usize| names[i % names.len()].clone();
            match o {
                Op::Join(a, b) => m.join(&[&pick(a)], &pick(b)),
                Op::Global(a) => m.make_global(&pick(a)),
                Op::Isolate(a) => m.isolate(&pick(a)),
            }
        }
        Mutation::SetMode(k) => {
            let mut cfg = m.config().clone();
            cfg.mode = [Mode::Subnet, Mode::Multitenant, Mode::Networkpolicy][*k as usize % 3];
            m.update_config(cfg)
        }
        Mutation::Mtu(mtu) => {
            let mut cfg = m.config().clone();
            cfg.mtu = u32::from(*mtu);
            m.update_config(cfg)
        }
        _ => Ok(Affected::none()),
    };
    r.unwrap_or_else(|_| Affected::none())
}

fn full(m: &ClusterModel) -> BTreeMap<String, FlowSet> {
    m.nodes()
        .map(|n| (n.name.clone(), compute_node(m, &n.name).expect("flows")))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn incremental_equals_full(s in spec(), muts in prop::collection::vec(mutation(), 1..12)) {
        let mut m = build(&s);
        let mut p = Pipeline::new();
        let mut prev: BTreeMap<String, FlowSet> = m
            .nodes()
            .map(|n| (n.name.clone(), p.node_flows(&m, &n.name).expect("flows")))
            .collect();
        let mut counter = 0;
        for x in &muts {
            mutate(&mut m, x, &mut counter);
            let want = full(&m);
            for (node, w) in &want {
                let got = p.node_flows(&m, node).expect("flows");
                prop_assert!(&got == w, "node {} differs after {:?}", node, x);
                // The diff from the previous state applies exactly.
                let before = prev.get(node).cloned().unwrap_or_default();
                let d = FlowSet::diff(&before, &got);
                prop_assert!(before.apply(&d) == got);
                prop_assert!(FlowSet::diff(&got, w).is_empty());
            }
            prev = want;
        }
    }

    /// As the controller runs it: after each mutation only the nodes the model says it
    /// affected are recomputed (one cache kept across the whole sequence), and every node's
    /// last FlowSet still equals a fresh compute: a change that leaves a node out of its
    /// `Affected` although its flows change fails here.
    #[test]
    fn affected_nodes_are_all_that_change(s in spec(), muts in prop::collection::vec(mutation(), 1..16)) {
        let mut m = build(&s);
        let mut p = Pipeline::new();
        let mut current = p.recompute(&m, &Affected::all()).expect("flows");
        let mut counter = 0;
        for x in &muts {
            let affected = mutate(&mut m, x, &mut counter);
            for (node, fs) in p.recompute(&m, &affected).expect("flows") {
                current.insert(node, fs);
            }
            current.retain(|n, _| m.node(n).is_some());
            let want = full(&m);
            for (node, w) in &want {
                let got = current.get(node).cloned().unwrap_or_default();
                prop_assert!(
                    FlowSet::diff(&got, w).is_empty(),
                    "node {} is stale after {:?} (affected: {:?})", node, x, affected
                );
            }
        }
    }
}

fn flow_pool() -> Vec<Flow> {
    let mut v = Vec::new();
    for t in [0u8, 20, 70] {
        for prio in [0u16, 100, 200] {
            for ip in 1..4u8 {
                v.push(
                    Flow::new(
                        t,
                        prio,
                        Match::new()
                            .eth_type(0x800)
                            .ipv4_dst(Ipv4Addr::new(10, 0, 0, ip), 32),
                    )
                    .cookie(ip as u64),
                );
            }
        }
    }
    v
}

fn arb_set() -> impl Strategy<Value = FlowSet> {
    let pool = flow_pool();
    (
        prop::collection::vec((any::<bool>(), 0..3u8), pool.len()),
        prop::collection::vec((1..5u32, 0..3u32), 0..4),
    )
        .prop_map(move |(pick, groups)| {
            let flows = pool
                .iter()
                .zip(&pick)
                .filter(|(_, (keep, _))| *keep)
                .map(|(f, (_, variant))| {
                    let f = f.clone();
                    match variant {
                        0 => f,
                        1 => f.cookie(99),
                        _ => f.apply(vec![Action::output(*variant as u32)]),
                    }
                })
                .collect();
            let groups = groups
                .into_iter()
                .map(|(id, port)| Group {
                    group_id: id,
                    group_type: GroupType::Select,
                    buckets: vec![Bucket::new(vec![Action::output(port)])],
                })
                .collect();
            FlowSet::new(flows, groups)
        })
}

proptest! {
    #[test]
    fn diff_properties(a in arb_set(), b in arb_set()) {
        prop_assert!(FlowSet::diff(&a, &a).is_empty());
        let d = FlowSet::diff(&a, &b);
        prop_assert!(a.apply(&d) == b);
        // Minimal: no flow is both deleted and added (same key means modify).
        for x in &d.deletes {
            prop_assert!(!d.adds.iter().any(|y| y.table == x.table && y.priority == x.priority && y.matches == x.matches));
        }
    }
}

#[test]
fn unchanged_model_gives_empty_diff_and_shares_runs() {
    let s = Spec {
        mode: topology::Mode::Multitenant,
        nodes: 3,
        namespaces: 3,
        pods: vec![(1, 0), (2, 1), (1, 2)],
        ops: vec![],
    };
    let m = build(&s);
    let mut p = Pipeline::new();
    let a = p.node_flows(&m, "node0").expect("flows");
    let b = p.node_flows(&m, "node0").expect("flows");
    assert!(FlowSet::diff(&a, &b).is_empty());
    assert!(FlowSet::diff(&a, &compute_node(&m, "node0").expect("flows")).is_empty());
    // Read back from a switch in another field order: still no difference.
    let shuffled: Vec<Flow> = a
        .iter()
        .rev()
        .map(|f| {
            let mut f = f.clone();
            f.matches.fields.reverse();
            f
        })
        .collect();
    assert!(FlowSet::diff(&FlowSet::new(shuffled, vec![]), &a).is_empty());
    // Every table of DESIGN §4 is present and ends in an explicit default.
    for t in topology::pipeline::TABLES {
        assert!(
            a.table(t.id.number())
                .any(|f| f.matches.fields.is_empty() || t.id.number() == 31),
            "table {} has no default",
            t.id.number()
        );
    }
}

#[test]
fn recompute_follows_affected() {
    let s = Spec {
        mode: topology::Mode::Multitenant,
        nodes: 3,
        namespaces: 3,
        pods: vec![(1, 0), (2, 1)],
        ops: vec![],
    };
    let mut m = build(&s);
    let mut p = Pipeline::new();
    let all = p.recompute(&m, &topology::Affected::all()).expect("all");
    assert_eq!(all.len(), 3);
    let aff = m
        .add_pod(PodAttach {
            namespace: "ns1",
            name: "new",
            node: "node2",
            port_name: "vnew",
            ofport: 77,
        })
        .expect("pod")
        .1;
    let changed = p.recompute(&m, &aff).expect("some");
    assert_eq!(changed.keys().collect::<Vec<_>>(), ["node2"]);
    let d = FlowSet::diff(&all["node2"], &changed["node2"]);
    // 5 pod flows + the t80 flow of ns1's NETID, new on node2.
    assert_eq!((d.adds.len(), d.modifies.len(), d.deletes.len()), (6, 0, 0));
    let aff = m.delete_node("node1").expect("delete");
    let after = p.recompute(&m, &aff).expect("all");
    assert_eq!(after.len(), 2);
    let d = FlowSet::diff(&all["node0"], &after["node0"]);
    // node1's three mesh flows leave node0.
    assert_eq!((d.adds.len(), d.deletes.len()), (0, 3));
}

/// One step of a long run of pod changes on few nodes.
#[derive(Clone, Debug)]
enum PodStep {
    Add { ns: usize, node: usize },
    Delete(usize),
    Port(usize, u32),
    Multicast(usize, bool),
    NetId(Op),
}

fn pod_step() -> impl Strategy<Value = PodStep> {
    prop_oneof![
        // A NETID change rebuilds the nodes' local flows: rare, so that long runs of slices
        // build up between them.
        24 => (0..5usize, 0..2usize).prop_map(|(ns, node)| PodStep::Add { ns, node }),
        16 => (0..64usize).prop_map(PodStep::Delete),
        8 => (0..64usize, 3..400u32).prop_map(|(i, p)| PodStep::Port(i, p)),
        3 => (0..5usize, any::<bool>()).prop_map(|(i, on)| PodStep::Multicast(i, on)),
        1 => op().prop_map(PodStep::NetId),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Long runs of pod attaches, detaches and port changes (with some NETID and multicast
    /// changes) on two nodes: a node's local flows are cut into many slices and copied back
    /// into one run many times over. After every step each node's incremental FlowSet equals
    /// a full compute, and the diff from its previous FlowSet applies exactly.
    #[test]
    fn long_pod_change_runs_equal_full(
        multitenant in any::<bool>(),
        steps in prop::collection::vec(pod_step(), 50..250),
    ) {
        let s = Spec {
            mode: if multitenant { topology::Mode::Multitenant } else { topology::Mode::Networkpolicy },
            nodes: 2,
            namespaces: 5,
            pods: vec![(1, 0), (2, 1), (3, 0)],
            ops: vec![],
        };
        let mut m = build(&s);
        let mut p = Pipeline::new();
        let nodes: Vec<String> = m.nodes().map(|n| n.name.clone()).collect();
        let mut prev: BTreeMap<String, FlowSet> = nodes
            .iter()
            .map(|n| (n.clone(), p.node_flows(&m, n).expect("flows")))
            .collect();
        let nss: Vec<String> = m.namespaces().map(|n| n.name).collect();
        for (c, step) in steps.iter().enumerate() {
            let pods: Vec<(String, String)> = m
                .pods()
                .map(|p| (p.key.namespace.clone(), p.key.name.clone()))
                .collect();
            // Refused changes (ports in use, ...) leave the model as it was.
            let _ = match step {
                PodStep::Add { ns, node } => m
                    .add_pod(PodAttach {
                        namespace: &nss[ns % nss.len()],
                        name: &format!("q{c}"),
                        node: &nodes[node % nodes.len()],
                        port_name: &format!("w{c}"),
                        ofport: 500 + c as u32,
                    })
                    .map(|_| ()),
                PodStep::Delete(i) if !pods.is_empty() => {
                    let (ns, n) = &pods[i % pods.len()];
                    m.delete_pod(ns, n).map(|_| ())
                }
                PodStep::Port(i, port) if !pods.is_empty() => {
                    let (ns, n) = &pods[i % pods.len()];
                    m.set_pod_port(ns, n, "moved", *port).map(|_| ())
                }
                PodStep::Multicast(i, on) => m.set_multicast(&nss[i % nss.len()], *on).map(|_| ()),
                PodStep::NetId(o) => {
                    apply_op(&mut m, o, s.namespaces);
                    Ok(())
                }
                _ => Ok(()),
            };
            for n in &nodes {
                let got = p.node_flows(&m, n).expect("flows");
                let want = compute_node(&m, n).expect("flows");
                prop_assert!(got == want, "node {} differs after step {} {:?}", n, c, step);
                let before = &prev[n];
                let d = FlowSet::diff(before, &got);
                prop_assert!(before.apply(&d) == got);
                prev.insert(n.clone(), got);
            }
        }
    }
}

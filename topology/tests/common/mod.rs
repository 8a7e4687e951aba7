//! Random clusters for the property tests.
#![allow(dead_code)]

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use topology::model::PodAttach;
use topology::{ClusterModel, ClusterNetworkConfig, FlowSet, Mode, Pipeline};

/// What to build: nodes, namespaces, pods (namespace idx, node idx) and NETID operations.
#[derive(Clone, Debug)]
pub struct Spec {
    pub mode: Mode,
    pub nodes: usize,
    pub namespaces: usize,
    pub pods: Vec<(usize, usize)>,
    pub ops: Vec<Op>,
}

#[derive(Clone, Debug)]
pub enum Op {
    Join(usize, usize),
    Global(usize),
    Isolate(usize),
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..6usize, 0..6usize).prop_map(|(a, b)| Op::Join(a, b)),
        (0..6usize).prop_map(Op::Global),
        (0..6usize).prop_map(Op::Isolate),
    ]
}

pub fn spec() -> impl Strategy<Value = Spec> {
    (
        prop_oneof![
            Just(Mode::Multitenant),
            Just(Mode::Multitenant),
            Just(Mode::Subnet)
        ],
        1..4usize,
        1..6usize,
        prop::collection::vec((0..6usize, 0..4usize), 0..9),
        prop::collection::vec(op(), 0..4),
    )
        .prop_map(|(mode, nodes, namespaces, pods, ops)| Spec {
            mode,
            nodes,
            namespaces,
            pods,
            ops,
        })
}

pub fn config(mode: Mode) -> ClusterNetworkConfig {
    ClusterNetworkConfig::new(
        "10.128.0.0/14".parse().expect("cidr"),
        24,
        "172.30.0.0/16".parse().expect("cidr"),
        mode,
    )
}

pub fn ns_name(i: usize) -> String {
    // Namespace 0 is "default" (NETID 0), the others ordinary.
    if i == 0 {
        "default".into()
    } else {
        format!("ns{i}")
    }
}

pub fn node_name(i: usize) -> String {
    format!("node{i}")
}

pub fn build(s: &Spec) -> ClusterModel {
    let mut m = ClusterModel::new(config(s.mode)).expect("model");
    for i in 0..s.nodes {
        m.add_node(
            &node_name(i),
            Ipv4Addr::new(192, 168, 1, 10 + i as u8),
            100 + i as u64,
        )
        .expect("node");
    }
    for i in 0..s.namespaces {
        m.add_namespace(&ns_name(i)).expect("ns");
    }
    for (k, (ns, node)) in s.pods.iter().enumerate() {
        let ns = ns_name(ns % s.namespaces);
        let node = node_name(node % s.nodes);
        let name = format!("pod{k}");
        let ofport = 10 + k as u32;
        m.add_pod(PodAttach {
            namespace: &ns,
            name: &name,
            node: &node,
            port_name: &format!("veth{k}"),
            ofport,
        })
        .expect("pod");
    }
    for o in &s.ops {
        apply_op(&mut m, o, s.namespaces);
    }
    m
}

pub fn apply_op(m: &mut ClusterModel, o: &Op, namespaces: usize) {
    if m.config().mode != Mode::Multitenant {
        return;
    }
    let n = |i: usize| ns_name(i % namespaces);
    let r = match o {
        Op::Join(a, b) => {
            let (a, b) = (n(*a), n(*b));
            if a == "default" {
                return;
            }
            m.join(&[&a], &b)
        }
        Op::Global(a) => m.make_global(&n(*a)),
        Op::Isolate(a) => {
            let a = n(*a);
            if a == "default" {
                return;
            }
            m.isolate(&a)
        }
    };
    r.expect("netid op");
}

pub fn all_flows(m: &ClusterModel) -> BTreeMap<String, FlowSet> {
    let mut p = Pipeline::new();
    m.nodes()
        .map(|n| (n.name.clone(), p.node_flows(m, &n.name).expect("flows")))
        .collect()
}

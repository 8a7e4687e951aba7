//! The two shapes of Antrea's controller benchmark (`networkpolicy_controller_perf_test.go`,
//! `TestInitXLargeScaleWithSmallNamespaces` and `TestInitXLargeScaleWithOneNamespace`), put
//! into the model and computed into every node's flows (`flowmesh-bench netpol --shape`).
//!
//! * `antrea-75k`: 25,000 namespaces, each labelled `app=<its name>`, with four pods (`pod1`,
//!   `pod2` labelled `app-1=scale-1`, `pod3`, `pod4` labelled `app-2=scale-2`) and three
//!   policies, all of type Ingress and Egress: `default-deny-all` (every pod, no rule),
//!   `np-1` (pods `app-1=scale-1`, ingress from the namespace's pods `app-1=scale-1`, any
//!   port, no egress rule) and `np-2` (the same for `app-2=scale-2`): 100,000 pods, 75,000
//!   policies.
//! * `antrea-10k`: one namespace, 10,000 pods labelled `app-1=scale-1` and 10,000 policies
//!   `np-<i>`, each selecting `app-1=scale-1` and allowing ingress from `app-1=scale-1` (any
//!   port; Ingress and Egress types, no egress rule): every policy selects every pod.
//!
//! As there, each pod is placed on one of 1,000 nodes drawn uniformly at random (a fixed-seed
//! generator here, so that runs compare). Antrea's test gives pods random addresses; here each
//! pod gets the next address of its node's subnet, as the controller's IPAM does. The cluster
//! network is 10.128.0.0/12 with /23 node subnets (2,048 nodes of 510 pods; the default /14
//! holds 512 nodes).

use super::{cpu_secs, peak_rss_kib, BenchError};
use crate::config::{ClusterNetworkConfig, Mode};
use crate::model::{
    ClusterModel, LabelSelector, NetworkPolicy, Peer, PodAttach, PodMeta, PolicyRule,
};
use crate::pipeline::{FlowSet, Pipeline};
use crate::Ipv4Cidr;
use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;
use std::time::Instant;

/// Which of Antrea's shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// 25,000 namespaces × (4 pods, 3 policies).
    Antrea75k,
    /// 1 namespace, 10,000 pods, 10,000 identical policies.
    Antrea10k,
}

impl Shape {
    /// Parse `antrea-75k` / `antrea-10k`.
    pub fn parse(s: &str) -> Option<Shape> {
        match s {
            "antrea-75k" => Some(Shape::Antrea75k),
            "antrea-10k" => Some(Shape::Antrea10k),
            _ => None,
        }
    }
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Antrea75k => "antrea-75k",
            Shape::Antrea10k => "antrea-10k",
        }
    }
    /// The key prefix of the final line (`antrea75k`, `antrea10k`).
    pub fn key(self) -> &'static str {
        match self {
            Shape::Antrea75k => "antrea75k",
            Shape::Antrea10k => "antrea10k",
        }
    }
}

/// The size of a shape: Antrea's (`full`) or a smaller one of the same form for tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapeSize {
    /// Nodes the pods are drawn over (Antrea: 1,000).
    pub nodes: usize,
    /// `antrea-75k`: namespaces (25,000); `antrea-10k`: pods = policies (10,000).
    pub units: usize,
}

impl Shape {
    /// Antrea's size of the shape.
    pub fn full(self) -> ShapeSize {
        match self {
            Shape::Antrea75k => ShapeSize {
                nodes: 1000,
                units: 25_000,
            },
            Shape::Antrea10k => ShapeSize {
                nodes: 1000,
                units: 10_000,
            },
        }
    }
}

/// SplitMix64: a small fixed-seed generator for the pods' nodes.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

fn labels(k: &str, v: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(k.to_string(), v.to_string())])
}

/// Antrea's `newNetworkPolicy(ns, name, podSelector, ingressPodSelector, nil, nil, nil)`:
/// types Ingress and Egress, one ingress rule from pods of the same namespace when
/// `ingress_from` is given, no egress rule.
fn policy(ns: &str, name: &str, select: Option<(&str, &str)>) -> NetworkPolicy {
    let sel = |s: Option<(&str, &str)>| {
        s.map_or_else(LabelSelector::everything, |kv| LabelSelector::labels([kv]))
    };
    NetworkPolicy {
        namespace: ns.to_string(),
        name: name.to_string(),
        pod_selector: sel(select),
        ingress_isolation: true,
        egress_isolation: true,
        ingress: select
            .map(|kv| PolicyRule {
                peers: vec![Peer::Pods {
                    namespace_selector: None,
                    pod_selector: Some(LabelSelector::labels([kv])),
                }],
                ports: Vec::new(),
            })
            .into_iter()
            .collect(),
        egress: Vec::new(),
    }
}

/// The model of `shape` at `size`: nodes, namespaces, pods, policies.
pub fn shape_model(shape: Shape, size: ShapeSize) -> Result<ClusterModel, BenchError> {
    if size.nodes == 0 || size.units == 0 || size.nodes > 2048 {
        return Err(BenchError::Params(format!(
            "{} needs 1 to 2048 nodes and at least one unit",
            shape.name()
        )));
    }
    let config = ClusterNetworkConfig::new(
        Ipv4Cidr::new(Ipv4Addr::new(10, 128, 0, 0), 12),
        23,
        Ipv4Cidr::new(Ipv4Addr::new(172, 30, 0, 0), 16),
        Mode::Networkpolicy,
    );
    let mut m = ClusterModel::new(config)?;
    let nodes: Vec<String> = (0..size.nodes).map(|i| format!("node-{i}")).collect();
    for (i, n) in nodes.iter().enumerate() {
        let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + i as u32 + 1);
        m.add_node(n, ip, i as u64 + 1)?;
    }
    let mut rng = SplitMix(0x616e_7472_6561);
    let mut ofport = vec![3u32; size.nodes];
    let mut add_pod = |m: &mut ClusterModel, ns: &str, name: &str, kv: (&str, &str)| {
        let n = rng.below(size.nodes);
        let port = ofport[n];
        ofport[n] += 1;
        m.add_pod_with(
            PodAttach {
                namespace: ns,
                name,
                node: &nodes[n],
                port_name: name,
                ofport: port,
            },
            PodMeta {
                labels: labels(kv.0, kv.1),
                ports: Vec::new(),
            },
        )
        .map(|_| ())
    };
    match shape {
        Shape::Antrea75k => {
            let width = size.units.to_string().len();
            for i in 0..size.units {
                let ns = format!("ns-{i:0width$}");
                m.add_namespace(&ns)?;
                m.set_namespace_labels(&ns, labels("app", &ns))?;
                m.apply_policy(policy(&ns, "default-deny-all", None))?;
                m.apply_policy(policy(&ns, "np-1", Some(("app-1", "scale-1"))))?;
                m.apply_policy(policy(&ns, "np-2", Some(("app-2", "scale-2"))))?;
                for (pod, kv) in [
                    ("pod1", ("app-1", "scale-1")),
                    ("pod2", ("app-1", "scale-1")),
                    ("pod3", ("app-2", "scale-2")),
                    ("pod4", ("app-2", "scale-2")),
                ] {
                    add_pod(&mut m, &ns, pod, kv)?;
                }
            }
        }
        Shape::Antrea10k => {
            let ns = "ns-0";
            m.add_namespace(ns)?;
            m.set_namespace_labels(ns, labels("app", ns))?;
            let width = size.units.to_string().len();
            for i in 0..size.units {
                m.apply_policy(policy(
                    ns,
                    &format!("np-{i:0width$}"),
                    Some(("app-1", "scale-1")),
                ))?;
                add_pod(
                    &mut m,
                    ns,
                    &format!("pod-{i:0width$}"),
                    ("app-1", "scale-1"),
                )?;
            }
        }
    }
    Ok(m)
}

/// What a shape's run measured.
#[derive(Clone, Debug)]
pub struct ShapeReport {
    /// The shape.
    pub shape: Shape,
    /// Its size.
    pub size: ShapeSize,
    /// Namespaces, pods, policies in the model.
    pub namespaces: usize,
    /// Pods.
    pub pods: usize,
    /// Policies.
    pub policies: usize,
    /// Building the model (wall seconds).
    pub model_secs: f64,
    /// Every node's flows: wall seconds.
    pub compute_secs: f64,
    /// The same, CPU seconds of this process.
    pub compute_cpu_secs: f64,
    /// Flows of every node together.
    pub total_flows: u64,
    /// Flows per node: min, median, max.
    pub node_flows: [usize; 3],
    /// Actions of every node's flows together (a `conjunction` action per conjunction a
    /// clause flow serves: what grows when conjunctions repeat).
    pub total_actions: u64,
    /// Pods per node: min, median, max.
    pub node_pods: [usize; 3],
    /// Peak resident memory of the process after the compute (MiB), the flows still held.
    pub peak_rss_mib: u64,
    /// Median of the relabels: model + recompute + diff of the affected nodes (µs).
    pub relabel_us: f64,
    /// Nodes the last relabel recomputed.
    pub relabel_nodes: usize,
    /// Flow changes of the last relabel.
    pub relabel_changes: usize,
}

fn actions_of(f: &ofproto::flow::Flow) -> u64 {
    use ofproto::instruction::Instruction;
    f.instructions
        .iter()
        .map(|i| match i {
            Instruction::ApplyActions(a) | Instruction::WriteActions(a) => a.len() as u64,
            _ => 0,
        })
        .sum()
}

fn min_med_max(mut v: Vec<usize>) -> [usize; 3] {
    v.sort_unstable();
    match v.len() {
        0 => [0; 3],
        n => [v[0], v[n / 2], v[n - 1]],
    }
}

/// Build `shape` at `size`, compute every node's flows, then relabel `samples` pods out of
/// their policies (`app-1=scale-1` → `app-1=relabelled`) one at a time.
pub fn run_shape(shape: Shape, size: ShapeSize, samples: usize) -> Result<ShapeReport, BenchError> {
    let t = Instant::now();
    let mut m = shape_model(shape, size)?;
    let model_secs = t.elapsed().as_secs_f64();

    let cpu0 = cpu_secs();
    let t = Instant::now();
    let mut pipeline = Pipeline::new();
    let mut sets: BTreeMap<String, FlowSet> = BTreeMap::new();
    let names: Vec<String> = m.nodes().map(|n| n.name.clone()).collect();
    for n in &names {
        sets.insert(n.clone(), pipeline.node_flows(&m, n)?);
    }
    let compute_secs = t.elapsed().as_secs_f64();
    let compute_cpu_secs = cpu_secs().zip(cpu0).map_or(-1.0, |(b, a)| b - a);
    let peak_rss_mib = peak_rss_kib().unwrap_or(0) / 1024;

    let mut per_node: BTreeMap<String, usize> = names.iter().map(|n| (n.clone(), 0)).collect();
    let mut victims = Vec::new();
    let namespaces = m.namespaces().count();
    let mut pods = 0;
    for p in m.pods() {
        pods += 1;
        if let Some(c) = per_node.get_mut(&p.node) {
            *c += 1;
        }
        if p.labels.get("app-1").is_some_and(|v| v == "scale-1") {
            victims.push((p.key.namespace.clone(), p.key.name.clone()));
        }
    }
    let policies = m.policies().count();
    let step = (victims.len() / samples.max(1)).max(1);
    let victims: Vec<_> = victims.into_iter().step_by(step).take(samples).collect();

    let mut r = ShapeReport {
        shape,
        size,
        namespaces,
        pods,
        policies,
        model_secs,
        compute_secs,
        compute_cpu_secs,
        total_flows: sets.values().map(|s| s.len() as u64).sum(),
        node_flows: min_med_max(sets.values().map(FlowSet::len).collect()),
        node_pods: min_med_max(per_node.into_values().collect()),
        total_actions: sets.values().flat_map(FlowSet::iter).map(actions_of).sum(),
        peak_rss_mib,
        relabel_us: 0.0,
        relabel_nodes: 0,
        relabel_changes: 0,
    };
    let mut times = Vec::new();
    for (ns, name) in victims {
        let t = Instant::now();
        let affected = m.set_pod_meta(
            &ns,
            &name,
            PodMeta {
                labels: labels("app-1", "relabelled"),
                ports: Vec::new(),
            },
        )?;
        let fresh = pipeline.recompute(&m, &affected)?;
        r.relabel_nodes = fresh.len();
        let mut changes = 0;
        for (n, fs) in fresh {
            if let Some(old) = sets.get(&n) {
                changes += FlowSet::diff(old, &fs).len();
            }
            sets.insert(n, fs);
        }
        times.push(t.elapsed().as_secs_f64() * 1e6);
        r.relabel_changes = changes;
    }
    times.sort_by(f64::total_cmp);
    r.relabel_us = times.get(times.len() / 2).copied().unwrap_or(0.0);
    Ok(r)
}

impl fmt::Display for ShapeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "shape {}: {} nodes (10.128.0.0/12, /23 node subnets), {} namespaces, {} pods \
             ({} / {} / {} per node), {} policies (networkpolicy)",
            self.shape.name(),
            self.size.nodes,
            self.namespaces,
            self.pods,
            self.node_pods[0],
            self.node_pods[1],
            self.node_pods[2],
            self.policies
        )?;
        writeln!(f, "model build: {:.3} s", self.model_secs)?;
        writeln!(
            f,
            "pipeline compute: {:.3} s wall, {:.2} s CPU, {} flows ({} / {} / {} per node), \
             {} actions, peak memory {} MiB",
            self.compute_secs,
            self.compute_cpu_secs,
            self.total_flows,
            self.node_flows[0],
            self.node_flows[1],
            self.node_flows[2],
            self.total_actions,
            self.peak_rss_mib
        )?;
        write!(
            f,
            "relabel one pod: median {:.1} us ({} nodes recomputed, {} flow changes)",
            self.relabel_us, self.relabel_nodes, self.relabel_changes
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(nodes: usize, units: usize) -> ShapeSize {
        ShapeSize { nodes, units }
    }

    /// The shapes hold what Antrea's test defines.
    #[test]
    fn shapes_hold_antreas_objects() {
        let r = run_shape(Shape::Antrea75k, size(7, 30), 2).expect("75k");
        assert_eq!((r.namespaces, r.pods, r.policies), (30, 120, 90), "{r}");
        let r = run_shape(Shape::Antrea10k, size(7, 40), 2).expect("10k");
        assert_eq!((r.namespaces, r.pods, r.policies), (1, 40, 40), "{r}");
        assert!(r.relabel_changes > 0, "{r}");
    }

    /// Building the `antrea-10k` shape marks each change's nodes once per namespace from
    /// per-node pod counts: the node names visited grow with pods × nodes, not with pods ×
    /// policies × pods (each pod add walked every pod of the namespace once per policy:
    /// 300 units, ~9 M visits; a bound of 2 × units × nodes allows 12,000). The affected
    /// nodes are still right: a relabel reaches every node with a pod.
    #[test]
    fn model_build_marks_nodes_once_per_change() {
        use crate::model::NODE_SET_WORK;
        use std::collections::BTreeSet;
        let (nodes, units) = (20, 300);
        NODE_SET_WORK.with(|w| w.set(0));
        let mut m = shape_model(Shape::Antrea10k, size(nodes, units)).expect("model");
        let work = NODE_SET_WORK.with(|w| w.get());
        let bound = (2 * units * nodes) as u64;
        assert!(work <= bound, "{work} node names visited, bound {bound}");
        let with_pods: BTreeSet<String> = m.pods().map(|p| p.node.clone()).collect();
        assert_eq!(with_pods.len(), nodes);
        let pod = m.pods().next().expect("pod").key.clone();
        let a = m
            .set_pod_meta(&pod.namespace, &pod.name, PodMeta::default())
            .expect("relabel");
        assert_eq!(a.nodes, with_pods);
    }

    fn flows_and_actions(m: &ClusterModel) -> (usize, u64) {
        let mut p = Pipeline::new();
        let (mut flows, mut actions) = (0, 0);
        for n in m.nodes() {
            let fs = p.node_flows(m, &n.name).expect("flows");
            flows += fs.len();
            actions += fs.iter().map(actions_of).sum::<u64>();
        }
        (flows, actions)
    }

    /// Policies repeating another's rules for the same pods add no flow and no action: the
    /// `antrea-10k` shape (every policy selects every pod) gave every peer clause flow one
    /// `conjunction` action per policy (500 policies: 88 M actions, 6.3 GiB).
    #[test]
    fn identical_policies_add_no_flows_or_actions() {
        let mut m = shape_model(Shape::Antrea10k, size(3, 30)).expect("model");
        let before = flows_and_actions(&m);
        for i in 0..40 {
            m.apply_policy(policy(
                "ns-0",
                &format!("more-{i}"),
                Some(("app-1", "scale-1")),
            ))
            .expect("policy");
        }
        assert_eq!(flows_and_actions(&m), before);
        // A policy with other rules still counts.
        let mut other = policy("ns-0", "other", Some(("app-1", "scale-1")));
        other.ingress[0].ports = vec![crate::model::PolicyPort {
            protocol: crate::model::Protocol::Tcp,
            port: Some(crate::model::PortSpec::Number(80)),
            end_port: None,
        }];
        m.apply_policy(other).expect("policy");
        let after = flows_and_actions(&m);
        assert!(after.1 > before.1, "{after:?} {before:?}");
    }
}

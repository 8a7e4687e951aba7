//! The `netpol` benchmark (`flowmesh-bench netpol`): the flows of one policy selecting 200
//! pods and allowing 200 peer pods on 3 ports; the full computation of a networkpolicy-mode
//! cluster with three policies per namespace; and the cost of relabelling one pod.

use super::antrea::{run_shape, Shape, ShapeReport, ShapeSize};
use super::{
    cluster_digest, cpu_secs, flowset_digest, peak_rss_kib, synthetic_cluster_in, BenchError,
};
use crate::config::{ClusterNetworkConfig, Mode};
use crate::model::{
    ClusterModel, LabelSelector, NetworkPolicy, Peer, PodAttach, PodMeta, PolicyPort, PolicyRule,
    PortSpec, Protocol,
};
use crate::pipeline::{FlowSet, Pipeline};
use crate::Ipv4Cidr;
use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;
use std::time::Instant;

/// What the netpol benchmark measured.
#[derive(Clone, Debug, Default)]
pub struct NetpolReport {
    /// Nodes of the 200×200 scenario.
    pub policy_nodes: usize,
    /// Flows the 200×200 policy adds cluster-wide, pods deployed one deployment after the other.
    pub policy_flows: usize,
    /// The same with server and client pods interleaved (no address runs to aggregate).
    pub policy_flows_interleaved: usize,
    /// Flows a cross product (the predecessor's) needs on one node: targets × peers × ports.
    pub cross_product_flows: usize,
    /// Full cluster: nodes, pods, namespaces, policies.
    pub nodes: usize,
    /// Pods.
    pub pods: usize,
    /// Namespaces.
    pub namespaces: usize,
    /// Policies.
    pub policies: usize,
    /// Wall time of every node's flows.
    pub compute_secs: f64,
    /// CPU time of the same.
    pub compute_cpu_secs: f64,
    /// Flows of every node.
    pub total_flows: u64,
    /// Peak resident memory (MiB).
    pub peak_rss_mib: u64,
    /// Median time of one relabel: model + recompute + diff of the affected nodes (µs).
    pub relabel_us: f64,
    /// Nodes a relabel recomputed.
    pub relabel_nodes: usize,
    /// Flow changes of a relabel.
    pub relabel_changes: usize,
    /// Digest of every node's flows and groups after the full compute (when asked for).
    pub flows_hash: Option<String>,
    /// The same after the relabels (when asked for).
    pub relabelled_hash: Option<String>,
    /// With `--shape`: the shape's run, whose figures the cluster fields above repeat.
    pub shape: Option<ShapeReport>,
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn tcp_ports(ports: &[u16]) -> Vec<PolicyPort> {
    ports
        .iter()
        .map(|p| PolicyPort {
            protocol: Protocol::Tcp,
            port: Some(PortSpec::Number(*p)),
            end_port: None,
        })
        .collect()
}

fn total_flows(m: &ClusterModel) -> Result<usize, BenchError> {
    let mut p = Pipeline::new();
    let mut n = 0;
    for node in m.nodes() {
        n += p.node_flows(m, &node.name)?.len();
    }
    Ok(n)
}

/// Flows added by one policy selecting 200 `srv` pods and allowing 200 `cli` pods on 3 ports.
fn policy_200x200(nodes: usize, interleave: bool) -> Result<usize, BenchError> {
    let config = ClusterNetworkConfig::new(
        "10.128.0.0/14"
            .parse()
            .map_err(|_| BenchError::Params("cidr".into()))?,
        23,
        "172.30.0.0/16"
            .parse()
            .map_err(|_| BenchError::Params("cidr".into()))?,
        Mode::Networkpolicy,
    );
    let mut m = ClusterModel::new(config)?;
    for i in 0..nodes {
        m.add_node(
            &format!("node-{i}"),
            Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 1)) + i as u32),
            i as u64 + 1,
        )?;
    }
    for ns in ["srv", "cli", "other"] {
        m.add_namespace(ns)?;
        m.set_namespace_labels(ns, labels(&[("name", ns)]))?;
    }
    let order: Vec<(&str, usize)> = if interleave {
        (0..200)
            .flat_map(|i| [("srv", i), ("cli", i), ("other", i)])
            .collect()
    } else {
        ["srv", "cli", "other"]
            .into_iter()
            .flat_map(|ns| (0..200).map(move |i| (ns, i)))
            .collect()
    };
    let mut ofport: BTreeMap<usize, u32> = BTreeMap::new();
    for (k, (ns, i)) in order.into_iter().enumerate() {
        let node = if interleave {
            (k + k / nodes) % nodes
        } else {
            k % nodes
        };
        let port = ofport.entry(node).or_insert(3);
        let name = format!("{ns}-{i}");
        let app = if ns == "srv" { "server" } else { "client" };
        m.add_pod_with(
            PodAttach {
                namespace: ns,
                name: &name,
                node: &format!("node-{node}"),
                port_name: &name,
                ofport: *port,
            },
            PodMeta {
                labels: labels(&[("app", app)]),
                ports: Vec::new(),
            },
        )?;
        *port += 1;
    }
    let before = total_flows(&m)?;
    m.apply_policy(NetworkPolicy {
        namespace: "srv".into(),
        name: "from-clients".into(),
        pod_selector: LabelSelector::labels([("app", "server")]),
        ingress_isolation: true,
        egress_isolation: false,
        ingress: vec![PolicyRule {
            peers: vec![Peer::Pods {
                namespace_selector: Some(LabelSelector::labels([("name", "cli")])),
                pod_selector: Some(LabelSelector::labels([("app", "client")])),
            }],
            ports: tcp_ports(&[80, 443, 8080]),
        }],
        egress: Vec::new(),
    })?;
    Ok(total_flows(&m)? - before)
}

/// Three policies per namespace: same-namespace ingress, web pods from another team's
/// namespaces on 80/443, and egress to the world (outside the cluster) plus the namespace.
fn cluster_policies(m: &mut ClusterModel, teams: usize) -> Result<usize, BenchError> {
    let names: Vec<String> = m.namespaces().map(|n| n.name).collect();
    for (i, ns) in names.iter().enumerate() {
        m.set_namespace_labels(ns, labels(&[("team", &format!("t{}", i % teams))]))?;
    }
    let pods: Vec<(String, String, usize)> = m
        .pods()
        .enumerate()
        .map(|(j, p)| (p.key.namespace.clone(), p.key.name.clone(), j))
        .collect();
    for (ns, name, j) in pods {
        let app = ["web", "db", "cache"][j % 3];
        m.set_pod_meta(
            &ns,
            &name,
            PodMeta {
                labels: labels(&[("app", app)]),
                ports: Vec::new(),
            },
        )?;
    }
    let cluster: Ipv4Cidr = m
        .config()
        .cluster_networks
        .first()
        .map(|c| c.cidr)
        .ok_or_else(|| BenchError::Params("no cluster network".into()))?;
    let mut n = 0;
    for (i, ns) in names.iter().enumerate() {
        let same_ns = Peer::Pods {
            namespace_selector: None,
            pod_selector: Some(LabelSelector::everything()),
        };
        let policies = [
            NetworkPolicy {
                namespace: ns.clone(),
                name: "allow-same-namespace".into(),
                pod_selector: LabelSelector::everything(),
                ingress_isolation: true,
                egress_isolation: false,
                ingress: vec![PolicyRule {
                    peers: vec![same_ns.clone()],
                    ports: Vec::new(),
                }],
                egress: Vec::new(),
            },
            NetworkPolicy {
                namespace: ns.clone(),
                name: "web-from-team".into(),
                pod_selector: LabelSelector::labels([("app", "web")]),
                ingress_isolation: true,
                egress_isolation: false,
                ingress: vec![PolicyRule {
                    peers: vec![Peer::Pods {
                        namespace_selector: Some(LabelSelector::labels([(
                            "team",
                            format!("t{}", (i + 1) % teams).as_str(),
                        )])),
                        pod_selector: None,
                    }],
                    ports: tcp_ports(&[80, 443]),
                }],
                egress: Vec::new(),
            },
            NetworkPolicy {
                namespace: ns.clone(),
                name: "egress".into(),
                pod_selector: LabelSelector::everything(),
                ingress_isolation: false,
                egress_isolation: true,
                ingress: Vec::new(),
                egress: vec![
                    PolicyRule {
                        peers: vec![Peer::IpBlock {
                            cidr: Ipv4Cidr::new(Ipv4Addr::UNSPECIFIED, 0),
                            except: vec![cluster],
                        }],
                        ports: Vec::new(),
                    },
                    PolicyRule {
                        peers: vec![same_ns],
                        ports: Vec::new(),
                    },
                ],
            },
        ];
        for p in policies {
            m.apply_policy(p)?;
            n += 1;
        }
    }
    Ok(n)
}

/// Run one of Antrea's shapes (in place of the default cluster; first, so that the peak
/// memory is the shape's), then the 200×200 scenario, which is small.
pub fn run_netpol_shape(
    shape: Shape,
    size: ShapeSize,
    policy_nodes: usize,
    samples: usize,
) -> Result<NetpolReport, BenchError> {
    let s = run_shape(shape, size, samples)?;
    Ok(NetpolReport {
        policy_nodes,
        policy_flows: policy_200x200(policy_nodes, false)?,
        policy_flows_interleaved: policy_200x200(policy_nodes, true)?,
        cross_product_flows: 200 * 200 * 3,
        nodes: s.size.nodes,
        pods: s.pods,
        namespaces: s.namespaces,
        policies: s.policies,
        compute_secs: s.compute_secs,
        compute_cpu_secs: s.compute_cpu_secs,
        total_flows: s.total_flows,
        peak_rss_mib: s.peak_rss_mib,
        relabel_us: s.relabel_us,
        relabel_nodes: s.relabel_nodes,
        relabel_changes: s.relabel_changes,
        flows_hash: None,
        relabelled_hash: None,
        shape: Some(s),
    })
}

/// Run the benchmark.
pub fn run_netpol(
    policy_nodes: usize,
    nodes: usize,
    pods: usize,
    namespaces: usize,
    samples: usize,
) -> Result<NetpolReport, BenchError> {
    run_netpol_hashing(policy_nodes, nodes, pods, namespaces, samples, false)
}

/// Run the benchmark; with `hash`, also digest every node's flows and groups after the full
/// compute and after the relabels (outside the timed parts), to check that a change of the
/// pipeline's code leaves the flows byte-identical.
pub fn run_netpol_hashing(
    policy_nodes: usize,
    nodes: usize,
    pods: usize,
    namespaces: usize,
    samples: usize,
    hash: bool,
) -> Result<NetpolReport, BenchError> {
    let mut r = NetpolReport {
        policy_nodes,
        policy_flows: policy_200x200(policy_nodes, false)?,
        policy_flows_interleaved: policy_200x200(policy_nodes, true)?,
        cross_product_flows: 200 * 200 * 3,
        nodes,
        pods,
        namespaces,
        ..NetpolReport::default()
    };
    let mut m = synthetic_cluster_in(Mode::Networkpolicy, nodes, pods, namespaces)?;
    r.policies = cluster_policies(&mut m, (namespaces / 20).max(1))?;

    let cpu0 = cpu_secs();
    let t = Instant::now();
    let mut pipeline = Pipeline::new();
    let mut sets: BTreeMap<String, FlowSet> = BTreeMap::new();
    let names: Vec<String> = m.nodes().map(|n| n.name.clone()).collect();
    for n in &names {
        sets.insert(n.clone(), pipeline.node_flows(&m, n)?);
    }
    r.compute_secs = t.elapsed().as_secs_f64();
    r.compute_cpu_secs = cpu_secs().zip(cpu0).map_or(-1.0, |(b, a)| b - a);
    r.total_flows = sets.values().map(|s| s.len() as u64).sum();
    r.peak_rss_mib = peak_rss_kib().unwrap_or(0) / 1024;
    let mut digests: BTreeMap<String, [u8; 32]> = BTreeMap::new();
    if hash {
        digests = sets
            .iter()
            .map(|(n, fs)| (n.clone(), flowset_digest(fs)))
            .collect();
        r.flows_hash = Some(cluster_digest(&digests));
    }

    // Web pods: relabelling one takes it out of its namespace's web-from-team policy.
    let victims: Vec<(String, String)> = m
        .pods()
        .filter(|p| p.labels.get("app").is_some_and(|a| a == "web"))
        .step_by((pods / 3 / samples.max(1)).max(1))
        .take(samples)
        .map(|p| (p.key.namespace.clone(), p.key.name.clone()))
        .collect();
    let mut times = Vec::new();
    for (ns, name) in victims {
        let t = Instant::now();
        let affected = m.set_pod_meta(
            &ns,
            &name,
            PodMeta {
                labels: labels(&[("app", "relabelled")]),
                ports: Vec::new(),
            },
        )?;
        let mut changes = 0;
        let fresh = pipeline.recompute(&m, &affected)?;
        r.relabel_nodes = fresh.len();
        let recomputed: Vec<String> = fresh.keys().cloned().collect();
        for (n, fs) in fresh {
            if let Some(old) = sets.get(&n) {
                changes += FlowSet::diff(old, &fs).len();
            }
            sets.insert(n, fs);
        }
        times.push(t.elapsed().as_secs_f64() * 1e6);
        r.relabel_changes = changes;
        if hash {
            for n in recomputed {
                if let Some(fs) = sets.get(&n) {
                    digests.insert(n, flowset_digest(fs));
                }
            }
        }
    }
    if hash {
        r.relabelled_hash = Some(cluster_digest(&digests));
    }
    times.sort_by(f64::total_cmp);
    r.relabel_us = times.get(times.len() / 2).copied().unwrap_or(0.0);
    Ok(r)
}

impl fmt::Display for NetpolReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "one policy, 200 selected pods x 200 peer pods x 3 ports on {} nodes: {} flows \
             cluster-wide ({} with the pods interleaved); a cross product needs {} per node",
            self.policy_nodes,
            self.policy_flows,
            self.policy_flows_interleaved,
            self.cross_product_flows
        )?;
        if let Some(s) = &self.shape {
            writeln!(f, "{s}")?;
        } else {
            writeln!(
                f,
                "cluster: {} nodes, {} pods, {} namespaces, {} policies (networkpolicy)",
                self.nodes, self.pods, self.namespaces, self.policies
            )?;
            writeln!(
                f,
                "pipeline compute: {:.3} s wall, {:.2} s CPU, {} flows, peak memory {} MiB",
                self.compute_secs, self.compute_cpu_secs, self.total_flows, self.peak_rss_mib
            )?;
            writeln!(
                f,
                "relabel one pod: median {:.1} us ({} nodes recomputed, {} flow changes)",
                self.relabel_us, self.relabel_nodes, self.relabel_changes
            )?;
        }
        write!(
            f,
            "netpol policy_200x200_flows={} policy_200x200_interleaved_flows={} policy_nodes={} cross_product_flows={} nodes={} pods={} namespaces={} policies={} compute_secs={:.3} compute_cpu_secs={:.2} flows={} peak_rss_mib={} relabel_us={:.1} relabel_nodes={} relabel_changes={}",
            self.policy_flows,
            self.policy_flows_interleaved,
            self.policy_nodes,
            self.cross_product_flows,
            self.nodes,
            self.pods,
            self.namespaces,
            self.policies,
            self.compute_secs,
            self.compute_cpu_secs,
            self.total_flows,
            self.peak_rss_mib,
            self.relabel_us,
            self.relabel_nodes,
            self.relabel_changes
        )?;
        if let (Some(full), Some(relabelled)) = (&self.flows_hash, &self.relabelled_hash) {
            write!(f, " flows_hash={full} relabelled_hash={relabelled}")?;
        }
        if let Some(s) = &self.shape {
            let k = s.shape.key();
            write!(
                f,
                " shape={} model_secs={:.3} node_flows_min={} node_flows_median={} node_flows_max={} {k}_compute_secs={:.2} {k}_compute_wall_secs={:.3} {k}_peak_rss_mib={} {k}_flows={} {k}_actions={}",
                s.shape.name(),
                s.model_secs,
                s.node_flows[0],
                s.node_flows[1],
                s.node_flows[2],
                s.compute_cpu_secs,
                s.compute_secs,
                s.peak_rss_mib,
                s.total_flows,
                s.total_actions
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_run() {
        let r = run_netpol(4, 20, 600, 40, 3).expect("bench");
        // Sum, not product: far below the cross product of one node.
        assert!(r.policy_flows < 2_000, "{r}");
        assert!(r.policy_flows > 200, "{r}");
        assert_eq!(r.policies, 120);
        assert!(r.relabel_changes > 0, "{r}");
        assert!(r
            .to_string()
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("netpol policy_200x200_flows=")));
    }

    /// The digests name the flows, not the run: two runs agree, and a relabel changes them.
    #[test]
    fn hashes_are_reproducible() {
        let a = run_netpol_hashing(2, 6, 120, 12, 2, true).expect("bench");
        let b = run_netpol_hashing(2, 6, 120, 12, 2, true).expect("bench");
        assert!(a.flows_hash.is_some(), "{a}");
        assert_eq!(a.flows_hash, b.flows_hash);
        assert_eq!(a.relabelled_hash, b.relabelled_hash);
        assert_ne!(a.flows_hash, a.relabelled_hash);
    }
}

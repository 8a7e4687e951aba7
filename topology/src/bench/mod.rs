//! The `compute` benchmark: a synthetic cluster, the full pipeline of every node, and the cost
//! of one pod add (recompute + diff of the affected node). Wired into `flowmesh-bench compute`.
//! Reading peak memory from `/proc/self/status` is the only I/O in this crate.

pub mod antrea;
pub mod netpol;

use crate::cidr::Ipv4Cidr;
use crate::config::{ClusterNetworkConfig, Mode};
use crate::model::{ClusterModel, ModelError, PodAttach};
use crate::pipeline::{FlowSet, Pipeline, PipelineError};
use std::fmt;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The synthetic cluster could not be built.
    #[error("building the synthetic cluster: {0}")]
    Model(Box<ModelError>),
    /// The pipeline refused a flow.
    #[error("computing flows: {0}")]
    Pipeline(#[from] PipelineError),
    /// Parameters out of range.
    #[error("bad parameters: {0}")]
    Params(String),
}

impl From<ModelError> for BenchError {
    fn from(e: ModelError) -> Self {
        BenchError::Model(Box::new(e))
    }
}

fn bits_for(n: usize) -> u8 {
    let mut b = 0u8;
    while (1usize << b) < n.max(1) {
        b += 1;
    }
    b
}

/// A multitenant cluster of `nodes` nodes, `namespaces` namespaces and `pods` pods. Pod `j`
/// runs on node `j % nodes`; namespaces hold consecutive blocks of pods, so each namespace is
/// spread over many nodes and each node sees many NETIDs (the expensive case for table 80).
pub fn synthetic_cluster(
    nodes: usize,
    pods: usize,
    namespaces: usize,
) -> Result<ClusterModel, BenchError> {
    synthetic_cluster_in(Mode::Multitenant, nodes, pods, namespaces)
}

/// [`synthetic_cluster`] in another mode.
pub fn synthetic_cluster_in(
    mode: Mode,
    nodes: usize,
    pods: usize,
    namespaces: usize,
) -> Result<ClusterModel, BenchError> {
    if nodes == 0 || namespaces == 0 {
        return Err(BenchError::Params(
            "need at least one node and one namespace".into(),
        ));
    }
    let per_node = pods.div_ceil(nodes) + 8;
    let host_bits = bits_for(2 * per_node + 3).max(2);
    let host_prefix = 32 - host_bits;
    let node_bits = bits_for(nodes);
    let cluster_prefix = host_prefix
        .checked_sub(node_bits)
        .filter(|p| *p >= 8)
        .ok_or_else(|| {
            BenchError::Params(format!(
                "{nodes} nodes x {per_node} pods do not fit 10.0.0.0/8"
            ))
        })?;
    let config = ClusterNetworkConfig::new(
        Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 0), cluster_prefix),
        host_prefix,
        Ipv4Cidr::new(Ipv4Addr::new(172, 30, 0, 0), 16),
        mode,
    );
    let mut m = ClusterModel::new(config)?;
    let node_names: Vec<String> = (0..nodes).map(|i| format!("node-{i}")).collect();
    for (i, n) in node_names.iter().enumerate() {
        let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + i as u32 + 1);
        m.add_node(n, ip, i as u64 + 1)?;
    }
    let ns_names: Vec<String> = (0..namespaces).map(|i| format!("ns-{i}")).collect();
    for n in &ns_names {
        m.add_namespace(n)?;
    }
    let block = (pods / namespaces).max(1);
    for j in 0..pods {
        let name = format!("pod-{j}");
        m.add_pod(PodAttach {
            namespace: &ns_names[(j / block) % namespaces],
            name: &name,
            node: &node_names[j % nodes],
            port_name: &name,
            ofport: 3 + (j / nodes) as u32,
        })?;
    }
    Ok(m)
}

/// Peak resident memory of this process in KiB (`VmHWM`), if the platform reports it.
pub fn peak_rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// SHA-256 of one node's FlowSet: the `Debug` text of every flow, then of every group, in
/// order. Equal digests before and after a change of the pipeline's code show that it
/// computes byte-identical flows.
pub fn flowset_digest(fs: &FlowSet) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    /// Feeds formatted text into the digest without building the string.
    struct Feed(Sha256);
    impl Write for Feed {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.0.update(s.as_bytes());
            Ok(())
        }
    }
    let mut feed = Feed(Sha256::new());
    for f in fs.iter() {
        let _ = writeln!(feed, "{f:?}");
    }
    for g in fs.groups() {
        let _ = writeln!(feed, "{g:?}");
    }
    feed.0.finalize().into()
}

/// One SHA-256 (hex) over the per-node digests of [`flowset_digest`], in node-name order.
pub fn cluster_digest<'a>(nodes: impl IntoIterator<Item = (&'a String, &'a [u8; 32])>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (name, d) in nodes {
        h.update(name.as_bytes());
        h.update(d);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// CPU time (user + system) of this process in seconds, from `/proc/self/stat` (clock ticks
/// at 100 Hz), if the platform reports it. Wall time on a busy machine overstates the cost.
pub fn cpu_secs() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// What the compute benchmark measured.
#[derive(Clone, Debug)]
pub struct ComputeReport {
    /// Nodes.
    pub nodes: usize,
    /// Pods.
    pub pods: usize,
    /// Namespaces.
    pub namespaces: usize,
    /// Time to build the model (allocations, graph).
    pub model_secs: f64,
    /// Time to compute every node's FlowSet (wall clock).
    pub compute_secs: f64,
    /// CPU time of the same computation (single thread), when known.
    pub compute_cpu_secs: Option<f64>,
    /// Flows in all FlowSets together.
    pub total_flows: u64,
    /// Largest FlowSet.
    pub max_node_flows: usize,
    /// Peak resident memory (KiB).
    pub peak_rss_kib: Option<u64>,
    /// Median time of one pod add: model + recompute + diff of the node (µs).
    pub add_pod_median_us: f64,
    /// Slowest of those (µs).
    pub add_pod_max_us: f64,
    /// Their mean (µs): the occasional add that copies the node's local flows into one run
    /// again is in it, not in the median.
    pub add_pod_mean_us: f64,
    /// Flow changes per pod add (from the diff).
    pub add_pod_changes: usize,
    /// Changes from recomputing an unchanged node (must be 0).
    pub unchanged_changes: usize,
}

/// Build the synthetic cluster, compute every node's flows, then time `samples` pod adds.
pub fn run_compute(
    nodes: usize,
    pods: usize,
    namespaces: usize,
    samples: usize,
) -> Result<ComputeReport, BenchError> {
    let t0 = Instant::now();
    let mut model = synthetic_cluster(nodes, pods, namespaces)?;
    let model_secs = t0.elapsed().as_secs_f64();

    let cpu0 = cpu_secs();
    let t1 = Instant::now();
    let mut pipeline = Pipeline::new();
    let names: Vec<String> = model.nodes().map(|n| n.name.clone()).collect();
    let mut sets: Vec<FlowSet> = Vec::with_capacity(names.len());
    for n in &names {
        sets.push(pipeline.node_flows(&model, n)?);
    }
    let compute_secs = t1.elapsed().as_secs_f64();
    let compute_cpu_secs = cpu_secs().zip(cpu0).map(|(b, a)| b - a);
    let total_flows = sets.iter().map(|s| s.len() as u64).sum();
    let max_node_flows = sets.iter().map(FlowSet::len).max().unwrap_or(0);
    let peak_rss_kib = peak_rss_kib();

    let node = names.first().cloned().unwrap_or_default();
    let mut installed = sets.first().cloned().unwrap_or_default();
    drop(sets);
    let again = pipeline.node_flows(&model, &node)?;
    let unchanged_changes = FlowSet::diff(&installed, &again).len();

    let ns = model
        .namespaces()
        .next()
        .map(|n| n.name)
        .unwrap_or_default();
    let mut times: Vec<Duration> = Vec::with_capacity(samples);
    let mut add_pod_changes = 0;
    for i in 0..samples {
        let name = format!("bench-pod-{i}");
        let t = Instant::now();
        model.add_pod(PodAttach {
            namespace: &ns,
            name: &name,
            node: &node,
            port_name: &name,
            ofport: 60_000 + i as u32,
        })?;
        let desired = pipeline.node_flows(&model, &node)?;
        let d = FlowSet::diff(&installed, &desired);
        times.push(t.elapsed());
        add_pod_changes = d.len();
        installed = desired;
    }
    times.sort();
    let us = |d: Option<&Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1e6);
    let mean =
        times.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e6 / times.len().max(1) as f64;
    Ok(ComputeReport {
        nodes,
        pods,
        namespaces,
        model_secs,
        compute_secs,
        compute_cpu_secs,
        total_flows,
        max_node_flows,
        peak_rss_kib,
        add_pod_median_us: us(times.get(times.len() / 2)),
        add_pod_max_us: us(times.last()),
        add_pod_mean_us: mean,
        add_pod_changes,
        unchanged_changes,
    })
}

impl fmt::Display for ComputeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "cluster: {} nodes, {} pods, {} namespaces (multitenant)",
            self.nodes, self.pods, self.namespaces
        )?;
        writeln!(f, "model build:      {:.3} s", self.model_secs)?;
        writeln!(
            f,
            "pipeline compute: {:.3} s wall, {} s CPU, for {} flows ({} on the largest node)",
            self.compute_secs,
            self.compute_cpu_secs
                .map_or("n/a".into(), |c| format!("{c:.2}")),
            self.total_flows,
            self.max_node_flows
        )?;
        let rss = self
            .peak_rss_kib
            .map_or("n/a".to_string(), |k| format!("{} MiB", k / 1024));
        writeln!(f, "peak memory:      {rss}")?;
        writeln!(
            f,
            "pod add:          median {:.1} us, mean {:.1} us, max {:.1} us, {} flow changes",
            self.add_pod_median_us, self.add_pod_mean_us, self.add_pod_max_us, self.add_pod_changes
        )?;
        writeln!(f, "unchanged recompute: {} changes", self.unchanged_changes)?;
        write!(
            f,
            "compute nodes={} pods={} namespaces={} model_secs={:.3} compute_secs={:.3} compute_cpu_secs={:.2} flows={} peak_rss_kib={} add_pod_us={:.1} add_pod_mean_us={:.1} add_pod_max_us={:.1} add_pod_changes={} unchanged_changes={}",
            self.nodes,
            self.pods,
            self.namespaces,
            self.model_secs,
            self.compute_secs,
            self.compute_cpu_secs.unwrap_or(-1.0),
            self.total_flows,
            self.peak_rss_kib.unwrap_or(0),
            self.add_pod_median_us,
            self.add_pod_mean_us,
            self.add_pod_max_us,
            self.add_pod_changes,
            self.unchanged_changes
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_run() {
        let r = run_compute(20, 300, 40, 5).expect("bench");
        assert_eq!(r.unchanged_changes, 0);
        // A pod add: 5 pod flows, plus a table-80 flow when its NETID is new on the node.
        assert!((5..=6).contains(&r.add_pod_changes), "{r}");
        assert!(r.total_flows > 20 * 19 * 3);
        assert!(r
            .to_string()
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("compute nodes=20 ")));
    }
}

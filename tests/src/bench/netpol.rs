//! `flowmesh-bench netpol`: NetworkPolicy flows and compute cost. One policy selecting 200
//! pods and allowing 200 peer pods on 3 ports (flows cluster-wide, against the cross product);
//! the full networkpolicy-mode pipeline of a synthetic cluster (default 2,000 nodes, 150,000
//! pods, 10,000 namespaces, three policies per namespace) on one core, with peak memory; and
//! the cost of relabelling one pod (model, recompute and diff of the affected nodes). `--hash`
//! adds digests of every node's flows and groups (after the full compute and the relabels).
//! `--shape antrea-75k | antrea-10k` computes one of the two shapes of Antrea's controller
//! benchmark instead of the synthetic cluster (`topology::bench::antrea`), first in the
//! process, so that the peak memory printed is the shape's; `--shape-nodes N` and
//! `--shape-units U` (namespaces of `antrea-75k`, pods = policies of `antrea-10k`) run a
//! smaller one of the same form.

use super::arg_value;

/// Run the subcommand.
pub fn main(args: &[String]) -> Result<(), String> {
    let policy_nodes: usize = arg_value(args, "--policy-nodes", 10)?;
    let nodes: usize = arg_value(args, "--nodes", 2000)?;
    let pods: usize = arg_value(args, "--pods", 150_000)?;
    let namespaces: usize = arg_value(args, "--namespaces", 10_000)?;
    let samples: usize = arg_value(args, "--samples", 5)?;
    let shape: String = arg_value(args, "--shape", String::new())?;
    if !shape.is_empty() {
        let shape = topology::bench::antrea::Shape::parse(&shape)
            .ok_or_else(|| format!("--shape: {shape:?} is not one of antrea-75k, antrea-10k"))?;
        // A smaller size of the same form (Antrea's by default).
        let full = shape.full();
        let size = topology::bench::antrea::ShapeSize {
            nodes: arg_value(args, "--shape-nodes", full.nodes)?,
            units: arg_value(args, "--shape-units", full.units)?,
        };
        let report = topology::bench::netpol::run_netpol_shape(shape, size, policy_nodes, samples)
            .map_err(|e| e.to_string())?;
        println!("{report}");
        return Ok(());
    }
    // A digest of every node's flows, to check that a code change keeps them byte-identical.
    let hash = args.iter().any(|a| a == "--hash");
    let report = topology::bench::netpol::run_netpol_hashing(
        policy_nodes,
        nodes,
        pods,
        namespaces,
        samples,
        hash,
    )
    .map_err(|e| e.to_string())?;
    println!("{report}");
    Ok(())
}

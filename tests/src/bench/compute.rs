//! `flowmesh-bench compute`: the full pipeline of a synthetic cluster (default 2,000 nodes,
//! 150,000 pods, 10,000 namespaces) on one core, plus the cost of one pod add (recompute and
//! diff of the affected node). Targets: full computation under 2 s, peak memory under 500 MiB,
//! a pod add under 50 µs (median).

use super::arg_value;

/// Run the subcommand.
pub fn main(args: &[String]) -> Result<(), String> {
    let nodes: usize = arg_value(args, "--nodes", 2000)?;
    let pods: usize = arg_value(args, "--pods", 150_000)?;
    let namespaces: usize = arg_value(args, "--namespaces", 10_000)?;
    let samples: usize = arg_value(args, "--samples", 100)?;
    let report = topology::bench::run_compute(nodes, pods, namespaces, samples)
        .map_err(|e| e.to_string())?;
    println!("{report}");
    Ok(())
}

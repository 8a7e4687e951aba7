//! flowmesh-bench: system benchmarks. `flowmesh-bench SUBCOMMAND [ARGS]`; each subcommand
//! lives in its own module under `flowmesh_tests::bench` and ends with one line of
//! `key=value` figures.
use std::process::ExitCode;

const USAGE: &str = "usage: flowmesh-bench push [--flows N] [--reps R]\n       flowmesh-bench opshape [--ops N] [--flows-per-op K] [--rounds R]\n       flowmesh-bench compute [--nodes N] [--pods P] [--namespaces S] [--samples K]\n       flowmesh-bench attach [--switches N] [--pods-per-node P] [--vswitchds K] [--concurrency 1,2,4,8,16]\n       flowmesh-bench hostile [--switches N] [--hostile H] [--attaches A] [--rounds R]\n       flowmesh-bench churn [--switches N] [--pods-per-node P] [--secs S] [--step-secs S] [--start-rate R] [--max-rate R] [--target-p99-ms MS] [--channels C] [--vswitchds K]\n       flowmesh-bench netpol [--policy-nodes N] [--nodes N] [--pods P] [--namespaces S] [--samples K] [--hash] [--shape antrea-75k|antrea-10k [--shape-nodes N] [--shape-units U]]\n       flowmesh-bench egressfw [--rules N] [--dns-names D] [--switches S]\n       flowmesh-bench egressip [--kills K] [--echo-interval SECS (default: the controller's)] [--probe-interval-ms MS]\n       flowmesh-bench takeover [--kills K] [--switches S] [--replicas R] [--leader-ttl SECS]\n       flowmesh-bench audit [--runs R] [--probes N] [--rate LINES_PER_S] [--syns N] [--flood-rate SYNS_PER_S]\n       flowmesh-bench scale [--switches N] [--vswitchds K] [--pods-per-node P] [--namespaces S] [--storms R] [--timeout SECS] [--mem-budget-gib G] [--poll-ms MS] [--echo-interval SECS]\n       flowmesh-bench soak [--minutes N] [--seed S] [--mode networkpolicy|multitenant] [--history FILE] [--fault-gap-secs S] [--pairs P] [--leader-ttl SECS] [--warmup-secs S] [--shim-args ARGS] [--clock-steps]\n       flowmesh-bench podready [--pods N] [--rounds R]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or_default();
    let res = match args.first().map(String::as_str) {
        Some("push") => flowmesh_tests::bench::push::main(rest),
        Some("opshape") => flowmesh_tests::bench::opshape::main(rest),
        Some("compute") => flowmesh_tests::bench::compute::main(rest),
        Some("attach") => flowmesh_tests::bench::attach::main(rest),
        Some("hostile") => flowmesh_tests::bench::hostile::main(rest),
        Some("churn") => flowmesh_tests::bench::churn::main(rest),
        Some("netpol") => flowmesh_tests::bench::netpol::main(rest),
        Some("takeover") => flowmesh_tests::bench::takeover::main(rest),
        Some("egressfw") => flowmesh_tests::bench::egressfw::main(rest),
        Some("egressip") => flowmesh_tests::bench::egressip::main(rest),
        Some("scale") => flowmesh_tests::bench::scale::main(rest),
        Some("audit") => flowmesh_tests::bench::audit::main(rest),
        Some("soak") => flowmesh_tests::bench::soak::main(rest),
        Some("podready") => flowmesh_tests::bench::podready::main(rest),
        Some("-h" | "--help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => Err(USAGE.to_owned()),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flowmesh-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

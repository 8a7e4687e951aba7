//! `cargo run --release -p topology --example compute_bench -- [nodes] [pods] [namespaces]`
//! runs the compute benchmark (the same as `flowmesh-bench compute`).

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let get = |i: usize, d: usize| args.get(i).copied().unwrap_or(d);
    match topology::bench::run_compute(get(0, 2000), get(1, 150_000), get(2, 10_000), 100) {
        Ok(r) => println!("{r}"),
        Err(e) => {
            eprintln!("compute benchmark failed: {e}");
            std::process::exit(1);
        }
    }
}

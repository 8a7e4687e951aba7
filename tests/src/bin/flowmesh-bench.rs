//! flowmesh-bench: system benchmarks.
fn main() {}

//! flowmesh-controller.
fn main() {}

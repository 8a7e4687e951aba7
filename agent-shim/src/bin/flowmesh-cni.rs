//! flowmesh-cni (not yet implemented).
fn main() {
    eprintln!("flowmesh-cni: not implemented yet");
    std::process::exit(1);
}

//! flowmesh-shim (not yet implemented).
fn main() {
    eprintln!("flowmesh-shim: not implemented yet");
    std::process::exit(1);
}

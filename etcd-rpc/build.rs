//! Compiles `proto/etcd.proto` with protox (pure Rust: no system protoc) into tonic clients.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let file = "proto/etcd.proto";
    println!("cargo:rerun-if-changed={file}");
    let fds = protox::compile([file], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}

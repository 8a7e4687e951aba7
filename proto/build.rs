//! Compiles the .proto files with protox (pure Rust, no system protoc) and generates the tonic
//! client/server code. The encoded descriptor set is kept for gRPC server reflection.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/admin.proto", "proto/node.proto"];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("flowmesh_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}

//! Compiles `proto/skua/control/v1/control.proto` with protox (pure Rust: no `protoc` on dev
//! machines or CI) into prost messages and tonic client and server code, and writes the encoded
//! file descriptor set for the reflection service.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    println!("cargo:rerun-if-changed={}", root.display());
    let fds = protox::compile(["skua/control/v1/control.proto"], [&root])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("control_descriptor.bin"), prost::Message::encode_to_vec(&fds))?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(fds)?;
    Ok(())
}

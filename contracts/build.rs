//! Generates the Rust code for `proto/` and the descriptor set that the
//! server hands to gRPC reflection.
//!
//! We parse the protos with `protox`, a protobuf compiler written in Rust, so a
//! fresh machine needs nothing but `cargo`: there is no system `protoc` to
//! install. tonic-prost-build then generates messages, clients and servers from
//! the parsed descriptors instead of running `protoc` itself.

use std::{env, fs, path::PathBuf};

/// Every file we compile; imports (including google/protobuf/field_mask.proto,
/// which protox ships) are found from these.
const PROTOS: &[&str] = &[
    "shipping/type/v1/money.proto",
    "shipping/type/v1/cargo.proto",
    "shipping/routing/v1/routing_service.proto",
];
const PROTO_ROOT: &str = "proto";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={PROTO_ROOT}");

    let mut compiler = protox::Compiler::new([PROTO_ROOT])?;
    // Keep comments: grpcurl `describe` shows them to readers through reflection.
    compiler.include_source_info(true);
    // Include field_mask.proto in the set, so reflection clients can resolve
    // google.protobuf.FieldMask without a copy of their own.
    compiler.include_imports(true);
    compiler.open_files(PROTOS)?;

    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out_dir.join("routing_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;

    tonic_prost_build::configure().compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}

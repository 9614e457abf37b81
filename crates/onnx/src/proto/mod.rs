//! The ONNX protobuf messages ([`ModelProto`], [`GraphProto`],
//! [`NodeProto`], [`TensorProto`], ...), as prost generates them from
//! `tools/onnx-proto/onnx.proto` (copied from the onnx Python package, IR
//! version 14).
//!
//! The generated code, `tools/onnx-proto/onnx.rs`, is committed and
//! included here: `tools/onnx-proto/generator` writes it with prost-build
//! and protox (a protobuf compiler in Rust), so building retrograd needs
//! neither `protoc` nor a build script. Both files sit beside their
//! generator rather than in `src/`, as code that is not ours (paths here
//! are from this crate's folder, `crates/onnx/`). After changing
//! `onnx.proto`, run, from `crates/onnx/`,
//! `cargo run --manifest-path tools/onnx-proto/generator/Cargo.toml`.

#![allow(missing_docs, clippy::all, clippy::pedantic, rustdoc::all)]

include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tools/onnx-proto/onnx.rs"
));

//! The ONNX protobuf messages ([`ModelProto`], [`GraphProto`],
//! [`NodeProto`], [`TensorProto`], ...), as prost generates them from
//! `onnx.proto` (copied from the onnx Python package, IR version 14).
//!
//! `onnx.rs` is generated code, committed: `tools/onnx-proto` writes it
//! with prost-build and protox (a protobuf compiler in Rust), so building
//! retrograd needs neither `protoc` nor a build script. After changing
//! `onnx.proto`, run `cargo run --manifest-path tools/onnx-proto/Cargo.toml`.

#![allow(missing_docs, clippy::all, clippy::pedantic, rustdoc::all)]

include!("onnx.rs");

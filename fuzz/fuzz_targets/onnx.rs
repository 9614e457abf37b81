#![no_main]
//! Fuzz target `onnx`: the body lives in `fuzz/bodies/onnx.rs`, shared with
//! `tests/fuzz_corpus.rs`, which replays the committed corpus on stable.

#[path = "../bodies/onnx.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));

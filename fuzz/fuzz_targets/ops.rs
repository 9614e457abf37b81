#![no_main]
//! Fuzz target `ops`: the body lives in `fuzz/bodies/ops.rs`, shared with
//! `tests/fuzz_corpus.rs`, which replays the committed corpus on stable.

#[path = "../bodies/ops.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));

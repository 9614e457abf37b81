#![no_main]
//! Fuzz target `expr`: the body lives in `fuzz/bodies/expr.rs`, shared with
//! `tests/fuzz_corpus.rs`, which replays the committed corpus on stable.

#[path = "../bodies/expr.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));

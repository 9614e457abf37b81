#![no_main]
//! Fuzz target `checkpoint`: the body lives in `fuzz/bodies/checkpoint.rs`, shared with
//! `tests/fuzz_corpus.rs`, which replays the committed corpus on stable.

#[path = "../bodies/checkpoint.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));

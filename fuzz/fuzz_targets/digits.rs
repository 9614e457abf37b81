#![no_main]
//! Fuzz target `digits`: the body lives in `fuzz/bodies/digits.rs`, shared with
//! `tests/fuzz_corpus.rs`, which replays the committed corpus on stable.

#[path = "../bodies/digits.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));

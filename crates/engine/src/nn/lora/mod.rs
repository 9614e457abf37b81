//! Low-rank adaptation (LoRA): small trainable matrices beside a frozen
//! linear layer, `W x + scaling · B A x`, so a large model fine-tunes by
//! training a few million numbers, with its base weights f32 or still in
//! their quantized blocks (QLoRA).
//!
//! [`LoraConfig`] (`config.rs`) holds the settings and which layers are
//! targets, by PEFT's names and matching rules; [`LoraAdapter`]
//! (`adapter.rs`) is one pair `A`, `B`; [`LoraLinear`] (`linear.rs`) wraps
//! one layer with named adapters, switchable, merged and unmerged bit for
//! bit; [`LoraModel`] (`model.rs`) does it all over a model that lists its
//! linear layers. Adapters read and write PEFT's folder format through
//! `hub::peft`.

mod adapter;
mod config;
mod linear;
mod model;

pub use adapter::LoraAdapter;
pub use config::{LoraConfig, LoraInit, LoraTargets};
pub use linear::LoraLinear;
pub use model::LoraModel;

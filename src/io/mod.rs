//! Files: named tensors in the safetensors format, and training checkpoints
//! (model parameters plus optimizer state) built on it.
//!
//! Where things are: safetensors read/write of every dtype (F16/BF16 bit
//! for bit) with atomic saves (`safetensors.rs`), checkpoints of
//! parameters, buffers and optimizer state (`checkpoint.rs`); a checkpoint
//! also carries the program's own metadata
//! (`save_checkpoint_with_metadata`, `load_checkpoint_with_metadata`,
//! `checkpoint_metadata`: a tokenizer, model sizes).

mod checkpoint;
mod safetensors;

pub use checkpoint::{
    checkpoint_metadata, load_checkpoint, load_checkpoint_with_metadata, save_checkpoint,
    save_checkpoint_with_metadata, OPTIMIZER_PREFIX,
};
pub use safetensors::{load_tensors, save_tensors, TensorFile};

//! Files: named tensors in the safetensors format, and checkpoints (model
//! parameters and buffers plus optimizer state, with a checksum) built on
//! it. Training states (`retrograd::train`) are checkpoints with more
//! metadata.
//!
//! Where things are: safetensors read/write of every dtype (F16/BF16 bit
//! for bit) with atomic saves (`safetensors.rs`), checkpoints of
//! parameters, buffers and optimizer state (`checkpoint.rs`); a checkpoint
//! also carries the program's own metadata
//! (`save_checkpoint_with_metadata`, `load_checkpoint_with_metadata`,
//! `checkpoint_metadata`: a tokenizer, model sizes) and a CRC-32 of its
//! content, verified on load (`checksum.rs`).

mod checkpoint;
mod checksum;
mod safetensors;

pub use checkpoint::{
    checkpoint_contents, load_contents, read_checkpoint, user_metadata, write_checkpoint,
    TRAINING_STATE_KEY,
};
pub use checkpoint::{
    checkpoint_metadata, load_checkpoint, load_checkpoint_with_metadata, save_checkpoint,
    save_checkpoint_with_metadata, OPTIMIZER_PREFIX,
};
pub use safetensors::write_atomically;
pub use safetensors::{load_tensors, save_tensors, TensorFile};

//! Files: named tensors in the safetensors format, and training checkpoints
//! (model parameters plus optimizer state) built on it.

mod checkpoint;
mod safetensors;

pub use checkpoint::{
    checkpoint_metadata, load_checkpoint, load_checkpoint_with_metadata, save_checkpoint,
    save_checkpoint_with_metadata, OPTIMIZER_PREFIX,
};
pub(crate) use safetensors::write_atomically;
pub use safetensors::{load_tensors, save_tensors, TensorFile};

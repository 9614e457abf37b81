//! Files: named tensors in the safetensors format, and training checkpoints
//! (model parameters plus optimizer state) built on it.

mod checkpoint;
mod safetensors;

pub use checkpoint::{load_checkpoint, save_checkpoint, OPTIMIZER_PREFIX};
pub use safetensors::{load_tensors, save_tensors, TensorFile};

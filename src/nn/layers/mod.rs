//! Layers: one module type per file.

mod activation;
mod batch_norm;
mod dropout;
mod embedding;
mod group_norm;
mod layer_norm;
mod linear;
mod mlp;
mod sequential;

pub use activation::Activation;
pub use batch_norm::{BatchNorm1d, BatchNorm2d, BatchNormOptions};
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use group_norm::GroupNorm;
pub use layer_norm::LayerNorm;
pub use linear::Linear;
pub use mlp::{Mlp, MlpBuilder};
pub use sequential::Sequential;

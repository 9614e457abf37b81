//! Layers: one module type per file.

mod activation;
mod dropout;
mod embedding;
mod layer_norm;
mod linear;
mod mlp;
mod pool;
mod sequential;

pub use activation::Activation;
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use layer_norm::LayerNorm;
pub use linear::Linear;
pub use mlp::{Mlp, MlpBuilder};
pub use pool::{AdaptiveAvgPool2d, AvgPool2d, MaxPool2d};
pub use sequential::Sequential;

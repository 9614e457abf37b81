//! Layers: one module type per file.

mod activation;
mod batch_norm;
mod conv;
mod dropout;
mod embedding;
mod flatten;
mod group_norm;
mod layer_norm;
mod linear;
mod mlp;
mod multihead_attention;
mod pool;
mod quantized_linear;
mod rms_norm;
mod sequential;
mod transformer_block;

pub use activation::Activation;
pub use batch_norm::{BatchNorm1d, BatchNorm2d, BatchNormOptions};
pub use conv::{Conv1d, Conv2d, ConvKind, ConvLayer, ConvNd, ConvTranspose2d};
pub use dropout::Dropout;
pub use embedding::{Embedding, EmbeddingBuilder};
pub use flatten::Flatten;
pub use group_norm::GroupNorm;
pub use layer_norm::LayerNorm;
pub use linear::{Linear, LinearBuilder};
pub use mlp::{Mlp, MlpBuilder};
pub use multihead_attention::{MultiheadAttention, MultiheadAttentionBuilder};
pub use pool::*;
pub use quantized_linear::{AnyEmbedding, AnyLinear, QuantizedLinear};
pub use rms_norm::RMSNorm;
pub use sequential::Sequential;
pub use transformer_block::{Block, BlockBuilder, FeedForward};

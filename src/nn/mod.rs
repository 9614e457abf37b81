//! Training building blocks: parameters, buffers, initialisers, the [`Module`] trait
//! and layers, and state dicts.

mod buffer;
mod default_generator;
pub mod init;
mod layers;
mod metrics;
mod module;
mod parameter;
mod random_stream;
mod state;
mod visit;

pub use crate::ops::nn::{AvgPool2dOptions, MaxPool2dOptions};
pub use buffer::Buffer;
pub use default_generator::{
    default_generator_state, manual_seed, set_default_generator_state, with_default_generator,
    DEFAULT_SEED,
};
pub use layers::{
    Activation, BatchNorm1d, BatchNorm2d, BatchNormOptions, Conv1d, Conv2d, ConvNd,
    ConvTranspose2d, Dropout, Embedding, EmbeddingBuilder, Flatten, GroupNorm, LayerNorm, Linear,
    LinearBuilder, Mlp, MlpBuilder, RMSNorm, Sequential,
};
pub use layers::{AdaptiveAvgPool2d, AvgPool2d, MaxPool2d};
pub use layers::{
    Block, BlockBuilder, FeedForward, Gpt, GptConfig, MultiheadAttention, MultiheadAttentionBuilder,
};
pub use metrics::{accuracy, argmax_rows, evaluate_accuracy};
pub use module::{join_name, Forward, Module};
pub use parameter::Parameter;
pub use random_stream::RandomStream;
/// `#[derive(Module)]`: the visiting methods of [`Module`] from a struct's fields.
pub use retrograd_derive::Module;
pub(crate) use state::{check_like, check_module_state};
pub use state::{load_module_state, load_state_dict, state_dict, NamedTensors, StateDict};
pub use visit::Visit;

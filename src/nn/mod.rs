//! Training building blocks: parameters, initialisers, the [`Module`] trait
//! and layers, and state dicts.

pub mod init;
mod layers;
mod metrics;
mod module;
mod parameter;
mod state;

pub use layers::{
    Activation, Conv1d, Conv2d, ConvNd, ConvTranspose2d, Dropout, Embedding, Flatten, LayerNorm,
    Linear, Mlp, MlpBuilder, Sequential,
};
pub use metrics::{accuracy, argmax_rows, evaluate_accuracy};
pub use module::{join_name, Module};
pub use parameter::Parameter;
pub(crate) use state::{check_like, check_state_dict};
pub use state::{load_state_dict, state_dict, StateDict};

//! Training building blocks: parameters, initialisers, the [`Module`] trait
//! and layers, and state dicts.

pub mod init;
mod layers;
mod metrics;
mod module;
mod parameter;
mod state;

pub use crate::ops::nn::{AvgPool2dOptions, MaxPool2dOptions};
pub use layers::{Activation, Dropout, Embedding, LayerNorm, Linear, Mlp, MlpBuilder, Sequential};
pub use layers::{AdaptiveAvgPool2d, AvgPool2d, MaxPool2d};
pub use metrics::{accuracy, argmax_rows, evaluate_accuracy};
pub use module::{join_name, Module};
pub use parameter::Parameter;
pub(crate) use state::{check_like, check_state_dict};
pub use state::{load_state_dict, state_dict, StateDict};

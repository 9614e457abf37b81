//! Neural-net functions, under PyTorch's names: `softmax`, `log_softmax`,
//! `cross_entropy`, `nll_loss`, `mse_loss`,
//! `binary_cross_entropy_with_logits`, `dropout`, `layer_norm`,
//! `embedding`, and the fused backward ops that keep their gradients to one
//! kernel pass while staying differentiable themselves.

mod class_targets;
pub mod cross_entropy;
pub mod dropout;
pub mod embedding;
pub mod layer_norm;
pub mod nll;
pub mod pointwise_loss;
pub mod softmax;
pub mod support;

pub use cross_entropy::CrossEntropyOptions;
pub use nll::NllLossOptions;
pub use support::{Index, Reduction};

use super::OpRegistry;

pub(crate) fn register(reg: &mut OpRegistry) {
    softmax::register(reg);
    cross_entropy::register(reg);
    nll::register(reg);
    pointwise_loss::register(reg);
    dropout::register(reg);
    embedding::register(reg);
    layer_norm::register(reg);
}

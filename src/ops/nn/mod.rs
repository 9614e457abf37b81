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

#[cfg(test)]
mod tests {
    use crate::{Graph, OpRegistry, Tensor};

    #[test]
    fn every_op_is_registered_under_its_pytorch_name() {
        let reg = OpRegistry::with_builtins();
        for name in [
            "softmax",
            "log_softmax",
            "softmax_backward",
            "log_softmax_backward",
            "cross_entropy",
            "cross_entropy_backward",
            "nll_loss",
            "nll_loss_backward",
            "mse_loss",
            "mse_loss_backward",
            "binary_cross_entropy_with_logits",
            "binary_cross_entropy_with_logits_backward",
            "dropout",
            "embedding",
            "embedding_dense_backward",
            "layer_norm",
            "layer_norm_backward",
            "layer_norm_weight_backward",
        ] {
            assert_eq!(reg.get(name).unwrap().name(), name);
        }
    }

    #[test]
    fn targets_can_be_a_vec_of_any_integer_type() {
        let g = Graph::new();
        let x = g.variable(Tensor::zeros(&[2, 3], crate::DType::F32).unwrap());
        let labels: Vec<usize> = vec![0, 2];
        let wide: Vec<i64> = vec![0, 2];
        let a = x.cross_entropy(&labels).value().item().unwrap();
        let b = x.cross_entropy(&wide).value().item().unwrap();
        assert_eq!(a, b);
        assert!((a - 3f64.ln()).abs() < 1e-6);
    }
}

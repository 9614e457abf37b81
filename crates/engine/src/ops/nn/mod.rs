//! Neural-net functions, under PyTorch's names: `softmax`, `log_softmax`,
//! `cross_entropy`, `nll_loss`, `mse_loss`,
//! `binary_cross_entropy_with_logits`, `dropout`, `layer_norm`,
//! `embedding`, `batch_norm`, `group_norm`, `rms_norm`, convolutions,
//! poolings, `scaled_dot_product_attention`, `rotary_embedding`,
//! `quantized_matmul`, and the fused backward ops that
//! keep their gradients to one kernel pass while staying differentiable
//! themselves. Every op here is a [`StructuredOp`](crate::ops::StructuredOp).
//!
//! Where things are:
//!
//! - losses and softmax: `softmax.rs` (softmax, log_softmax),
//!   `cross_entropy.rs` + `cross_entropy_backward.rs`, `nll.rs`, `mse.rs`,
//!   `bce.rs` (binary_cross_entropy_with_logits), `embedding.rs`,
//!   `dropout.rs`; what `cross_entropy` and `nll_loss` share (target
//!   checks, option setters, the reduction of per-lane losses, their `Var`
//!   methods, recording stored or input targets and their backward) in
//!   `class_targets.rs`, `Reduction` and `IntIndex` in `support.rs`;
//! - normalisation: `layer_norm.rs` + `layer_norm_backward.rs` (first order
//!   fuses the input's and the weight's gradients into one sweep, same bits
//!   as the two ops), `rms_norm.rs`, `batch_norm.rs` (training and eval
//!   mode; the running statistics returned updated in `BatchNormOutput`) +
//!   `batch_norm_backward.rs` + `batch_norm_running.rs` (the running
//!   statistics' update as a node, for a compiled step's state update), `group_norm.rs` (gradients through the
//!   layer-norm ops on an `[N, G, C/G·S]` view); what they share (optional
//!   affine inputs, each input's role, the `eps` check, the input and the
//!   recording with the affine inputs given): `normalization.rs`;
//! - convolution: `conv.rs` (`conv1d`, `conv2d`, `ConvOptions` with
//!   `Padding::Same`/`Valid`), `conv_transpose.rs`, `conv_weight.rs` (the
//!   weight gradient as an op); the settings the three share, resolved to
//!   two spatial dims, and their `Var` methods (`conv_spec.rs`), and the
//!   one derivative rule and forward of the three bilinear products, each
//!   the others' derivative (`conv_products.rs`); `spatial.rs`: `Spatial` ("int or tuple") and
//!   `Window`, the output size of a sliding window, shared with pooling;
//! - language models: `rotary.rs` (`rotary_embedding`, Hugging Face's
//!   convention; its derivative is the opposite rotation),
//!   `quantized_matmul.rs` (`x · Wᵀ` with a frozen [`QMatrix`](crate::quant::QMatrix)
//!   and its derivative `g · W`; not in the registry: an instance holds its
//!   weight);
//! - pooling: `pool/`, one file per op and one line per file in its
//!   `with_poolings!` list (its module docs say what follows from it);
//! - attention: `attention.rs` (`SdpaOptions`, `AttnMask`: additive float
//!   or bool, read as the additive 0/-inf mask by `additive_mask`; fully
//!   masked rows give 0 and no gradient, as PyTorch 2.5+; the per-node
//!   logsumexp slot; `scaled_dot_product_attention_unfused`) and
//!   `attention_backward.rs` (the fused backward op, whose own derivatives
//!   use the unfused composition), tests in `attention_tests.rs`.

#[cfg(test)]
mod attention_tests;
#[cfg(test)]
mod batch_norm_tests;
mod class_targets;
mod conv_products;
mod conv_spec;
mod normalization;
pub mod quantized_matmul;
pub mod spatial;
pub mod support;

pub use attention::{scaled_dot_product_attention_unfused, AttnMask, SdpaOptions};
pub use attention::inference_forward as attention_inference;
pub use rotary::inference_forward as rotary_inference;
pub use batch_norm::{BatchNormArgs, BatchNormOutput};
pub use conv::{Conv1dOptions, Conv2dOptions, ConvOptions, Padding};
pub use conv_transpose::{ConvTranspose1dOptions, ConvTranspose2dOptions, ConvTransposeOptions};
pub use cross_entropy::CrossEntropyOptions;
pub use nll::NllLossOptions;
pub use pool::options::*;
pub use spatial::{Spatial, Window};
pub use support::{Indices, IntIndex, Reduction};

use super::OpRegistry;

op_families! {
    /// Registers every op of these families (called by `ops::register_builtins`).
    fn register;
    attention,
    attention_backward,
    batch_norm,
    batch_norm_backward,
    batch_norm_running,
    bce,
    conv,
    conv_transpose,
    conv_weight,
    cross_entropy,
    cross_entropy_backward,
    dropout,
    embedding,
    group_norm,
    layer_norm,
    layer_norm_backward,
    pool,
    mse,
    nll,
    rms_norm,
    rotary,
    softmax,
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
            // The poolings' companion ops (the poolings themselves: `pool/mod.rs`).
            "max_pool2d_backward",
            "max_pool2d_gather",
            "avg_pool2d_backward",
            "adaptive_avg_pool2d_backward",
            "batch_norm",
            "batch_norm_backward",
            "batch_norm_weight_backward",
            "batch_norm_running_stats",
            "group_norm",
            "rms_norm",
            "rms_norm_backward",
            "rotary_embedding",
            "scaled_dot_product_attention",
            "scaled_dot_product_attention_backward",
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
        let a = x.cross_entropy(&labels).value().item();
        let b = x.cross_entropy(&wide).value().item();
        assert_eq!(a, b);
        assert!((a - 3f64.ln()).abs() < 1e-6);
    }
}

/// Gradients of gradients through every op: Hessian-vector products by
/// reverse-over-reverse (`create_graph`) against central differences of
/// first-order gradients.
#[cfg(test)]
mod second_order {
    use super::{CrossEntropyOptions, Reduction};
    use crate::ops::testing::{check_hvp, fixed};
    use crate::{Result, Tensor, Var};

    use crate::tensor::test_util::tensor as t;

    fn x34() -> Tensor {
        fixed(&[3, 4])
    }

    /// Fixed weights that make a value a scalar without symmetric cancellations.
    fn weigh<'g>(v: &Var<'g>) -> Result<Var<'g>> {
        let w = v.value().map_f64(|_| 0.0);
        let n = w.numel();
        let c: Vec<f64> = (0..n).map(|i| ((i * 37 % 11) as f64 - 5.0) * 0.3).collect();
        let c = Tensor::from_f64_slice(&c, v.shape(), v.dtype())?;
        Ok(v.try_mul(&v.graph().constant(c))?.sum())
    }

    #[test]
    fn softmax_family() {
        check_hvp(|x| weigh(&x.try_softmax(1)?), &x34());
        check_hvp(|x| weigh(&x.try_softmax(0)?), &x34());
        check_hvp(|x| weigh(&x.try_log_softmax(1)?), &x34());
        check_hvp(|x| weigh(&x.try_log_softmax(0)?), &x34());
    }

    #[test]
    fn classification_losses() {
        let opts = CrossEntropyOptions::default()
            .label_smoothing(0.1)
            .weight(t(&[1.0, 2.0, 0.5, 1.5], &[4]));
        check_hvp(
            |x| x.try_cross_entropy_with(&[0i64, -100, 2], &opts),
            &x34(),
        );
        let none = opts.clone().reduction(Reduction::None);
        check_hvp(
            |x| weigh(&x.try_cross_entropy_with(&[3i64, 1, 2], &none)?),
            &x34(),
        );
        check_hvp(
            |x| x.try_log_softmax(1)?.try_nll_loss(&[1usize, 0, 3]),
            &x34(),
        );
        // nll_loss is linear in its input: the Hessian through it is that of what feeds it.
        check_hvp(|x| (x * x).try_nll_loss(&[1usize, 0, 3]), &x34());
    }

    #[test]
    fn pointwise_losses() {
        let y = x34().map_f64(|v| (v * 0.3 + 0.5).clamp(0.0, 1.0));
        let pw = Some(t(&[2.0, 0.5, 1.0, 3.0], &[4]));
        check_hvp(
            |x| {
                let target = x.graph().constant(y.clone());
                x.try_binary_cross_entropy_with_logits_with(&target, Reduction::Mean, pw.clone())
            },
            &x34(),
        );
        check_hvp(
            |x| {
                let target = x.graph().constant(y.clone());
                x.try_mse_loss(&(x * x))?
                    .try_add(&(x * &target).try_mse_loss(&target)?)
            },
            &x34(),
        );
    }

    #[test]
    fn layer_norm_embedding_dropout() {
        let w = t(&[1.0, 0.5, -1.5, 2.0], &[4]);
        let b = t(&[0.1, -0.2, 0.3, 0.0], &[4]);
        check_hvp(
            |x| {
                let (wv, bv) = (x.graph().constant(w.clone()), x.graph().constant(b.clone()));
                weigh(&x.try_layer_norm(&[4], Some(&wv), Some(&bv), 1e-5)?)
            },
            &x34(),
        );
        check_hvp(
            |x| weigh(&x.try_layer_norm(&[3, 4], None, None, 1e-3)?.tanh()),
            &x34(),
        );
        // Second derivatives with respect to the weight (through x̂ w).
        check_hvp(
            |wv| {
                let xv = wv.graph().constant(x34());
                weigh(&xv.try_layer_norm(&[4], Some(wv), None, 1e-5)?.tanh())
            },
            &w,
        );
        check_hvp(
            |table| weigh(&table.try_embedding(&[2usize, 0, 2, 1], &[2, 2])?.tanh()),
            &x34(),
        );
        check_hvp(|x| weigh(&(x * x).try_dropout(0.3, true, 11)?), &x34());
    }
}

//! `cross_entropy_backward`: the gradient of `cross_entropy` with respect
//! to the logits in one fused pass (`kernels::nn::classification`), and its
//! own derivatives, so gradients of gradients work: linear in `g`, and in
//! the logits only through the softmax, whose Jacobian is symmetric.

use std::sync::Arc;

use super::batch_norm::sample;
use super::class_targets::{
    batch_class_backward, class_loss_rules, target_weights, ClassLossSpec, Resolved,
};
use super::cross_entropy::sample_options;
use super::nll::class_sample;
use super::softmax::{Softmax, SoftmaxBackward};
use super::support::{expand_axis, sum_axis, Reduction};
use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, GradInputs, OpAttributes};
use crate::kernels::nn::classification as kernel;
use crate::ops::{Node, OpFacts, OpRegistry, StructuredOp};
use crate::tensor::{Dims, Tensor};

/// The gradient of [`CrossEntropy`](super::cross_entropy::CrossEntropy) with respect to the logits, from the
/// loss's gradient `g`. Inputs: `g`, the logits, and the targets unless
/// stored. Differentiable in `g` and the logits.
#[derive(Clone, Debug, Default)]
pub struct CrossEntropyBackward {
    pub(super) spec: ClassLossSpec,
}

pub(super) fn targets_of(
    spec: &ClassLossSpec,
    x: &Tensor,
    extra: Option<&Var<'_>>,
) -> Result<(Resolved, ClassLossSpec)> {
    let r = spec.resolve("cross_entropy", x, extra.map(|v| v.value()))?;
    let stored = spec.with_targets(r.targets.clone());
    Ok((r, stored))
}

/// Per lane, `(1-ε) w_t + ε/C Σ w` (0 for ignored lanes) times the
/// reduction's scale, shaped to broadcast against the logits `x` (the class
/// axis `axis` kept as 1): how much of each lane's softmax the gradient
/// holds. Recorded from the targets (stored in `spec` or the input
/// `target`), not read from their values, so that under `vmap` every
/// example's targets give its own.
fn softmax_share<'g>(
    spec: &ClassLossSpec,
    x: &Var<'g>,
    target: Option<&Var<'g>>,
    axis: usize,
) -> Result<Var<'g>> {
    let weights = target_weights(spec, x, target, true)?;
    let eps = spec.label_smoothing;
    // Without class weights, `(1-ε) + ε/C · C` is 1 for every counted lane.
    let share = match &spec.weight {
        Some(w) if eps != 0.0 => {
            let total: f64 = w.to_f64_vec().iter().sum();
            let counted = target_weights(spec, x, target, false)?;
            let classes = x.shape()[axis] as f64;
            weights
                .mul_scalar(1.0 - eps)
                .try_add(&counted.mul_scalar(eps / classes * total))?
        }
        _ => weights.clone(),
    };
    let share = match spec.reduction {
        Reduction::Mean => share.try_div(&weights.sum())?,
        _ => share,
    };
    share.try_unsqueeze(axis as isize)
}

impl StructuredOp for CrossEntropyBackward {
    const NAME: &'static str = "cross_entropy_backward";
    const INPUTS: &'static [&'static str] = &["grad", "input", "target"];
    const LINEAR: &'static [usize] = &[0];
    const NO_GRAD: &'static [usize] = &[2];
    class_loss_rules!("cross_entropy", 2);
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let (g, x, target) = (x[0], x[1], x.get(2).copied());
        let r = self.spec.resolve(Self::NAME, x, target)?;
        self.spec.check_grad(Self::NAME, g, x, &r)?;
        crate::with_dtype!(Self::NAME, x.dtype(), T => {
            let targets = self.spec.kernel_targets::<T>(&r.targets);
            let scale = self.spec.scale(&targets);
            let (gs, xs) = (g.as_slice_of::<T>(), x.as_slice_of::<T>());
            Ok(Tensor::build::<T>(Dims::from_slice(x.shape()), |out| kernel::cross_entropy_backward_lanes(gs, xs, r.lanes, &targets, scale, out)))
        })
    }
    fn grads<'g>(&self, g2: &Var<'g>, n: Node<'_, 'g>) -> Result<GradInputs<'g>> {
        // out = g * scale * (A p - B), per lane. Linear in g; in x only
        // through p = softmax(x), whose Jacobian is symmetric. The targets
        // stay the node's input when they are one.
        let (g, x, t) = (n.x(0), n.x(1), n.inputs.get(2));
        let axis = class_axis(x);
        let dg = g
            .requires_grad()
            .then(|| -> Result<Var<'g>> {
                let ones = g.graph().constant(g.value().ones_like());
                let spec = self.spec.clone();
                let args: Vec<&Var<'g>> = [&ones, x].into_iter().chain(t).collect();
                let unit = g.graph().record(CrossEntropyBackward { spec }, &args)?;
                let per_lane = sum_axis(&g2.try_mul(&unit)?, axis, false)?;
                match self.spec.reduction {
                    Reduction::None => Ok(per_lane),
                    _ => per_lane.sum().try_expand(g.shape()),
                }
            })
            .transpose()?;
        let dx = x
            .requires_grad()
            .then(|| {
                let factor = lane_factor(&self.spec, g, x, t)?;
                softmax_backward(&g2.try_mul(&factor)?, x, axis)
            })
            .transpose()?;
        Ok(n.grads([dg, dx]))
    }
    fn tangent<'g>(&self, _: usize, tx: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (g, x) = (n.x(0), n.x(1));
        let factor = lane_factor(&self.spec, g, x, n.inputs.get(2))?;
        softmax_backward(tx, x, class_axis(x))?.try_mul(&factor)
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        batch_class_backward(&self.spec, |spec| CrossEntropyBackward { spec }, x, ctx)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(Arc::new(CrossEntropyBackward {
                spec: sample_options().spec(None),
            })),
            sample_inputs: Some(|seed| {
                let (logits, targets) = class_sample(seed);
                vec![sample(&[], seed + 2, 0.5, 0.3), logits, targets]
            }),
            ..OpFacts::opaque(self.arity())
        }
    }
}

/// The class axis of logits `x`: 0 for `[C]`, else 1.
fn class_axis(x: &Var<'_>) -> usize {
    usize::from(x.shape().len() > 1)
}

/// `softmax_backward(t, softmax(x))` along `axis`: the softmax's
/// (symmetric) Jacobian at `x` applied to `t`.
fn softmax_backward<'g>(t: &Var<'g>, x: &Var<'g>, axis: usize) -> Result<Var<'g>> {
    let axis = axis as isize;
    let p = x.graph().record(Softmax { axis }, &[x])?;
    x.graph().record(SoftmaxBackward { axis }, &[t, &p])
}

/// `g * softmax_share`, broadcast against the logits.
fn lane_factor<'g>(
    spec: &ClassLossSpec,
    g: &Var<'g>,
    x: &Var<'g>,
    target: Option<&Var<'g>>,
) -> Result<Var<'g>> {
    let axis = class_axis(x);
    let share = softmax_share(spec, x, target, axis)?;
    let g = if g.value().numel() == 1 {
        g.clone()
    } else {
        let mut kept = Dims::from_slice(x.shape());
        kept[axis] = 1;
        expand_axis(g, axis, &kept)?
    };
    g.try_mul(&share)
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(CrossEntropyBackward::default());
}

#[cfg(test)]
mod tests {
    use crate::ops::nn::cross_entropy::tests::{logits, weighted};
    use std::sync::Arc;

    use super::*;
    use crate::ops::testing::derivatives_agree;

    use crate::tensor::test_util::tensor as t;

    #[test]
    fn backward_op_is_differentiable() {
        let g_none = t(&[0.7, -1.3, 0.4], &[3]);
        for (red, g) in [
            (Reduction::Mean, Tensor::scalar(1.3)),
            (Reduction::None, g_none),
        ] {
            let op = CrossEntropyBackward {
                spec: weighted(red).spec(Some(Arc::from(vec![0i64, -100, 2]))),
            };
            derivatives_agree(&op, &[g.clone(), logits()]).unwrap();
        }
    }
}

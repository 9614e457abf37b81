//! `cross_entropy_backward`: the gradient of `cross_entropy` with respect
//! to the logits in one fused pass (`kernels::nn::classification`), and its
//! own derivatives, so gradients of gradients work: linear in `g`, and in
//! the logits only through the softmax, whose Jacobian is symmetric.

use super::class_targets::{class_loss_rules, ClassLossSpec, Resolved};
use super::softmax::{Softmax, SoftmaxBackward};
use super::support::{expand_axis, sum_axis, Reduction};
use crate::core::{GradInputs, OpAttributes};
use crate::error::Result;
use crate::graph::Var;
use crate::kernels::nn::classification as kernel;
use crate::ops::{Node, OpRegistry, StructuredOp};
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
/// reduction's scale, shaped to broadcast against the logits: how much of
/// each lane's softmax the gradient holds.
fn softmax_share(spec: &ClassLossSpec, x: &Tensor, r: &Resolved) -> Result<Tensor> {
    let classes = r.lanes.len;
    let mut shape: Dims = Dims::from_slice(x.shape());
    shape[r.axis] = 1;
    crate::with_dtype!("softmax_share", x.dtype(), T => {
        let targets = spec.kernel_targets::<T>(&r.targets);
        let scale = spec.scale(&targets);
        let eps = spec.label_smoothing;
        let total: f64 = match &spec.weight {
            Some(w) => w.to_f64_vec().iter().sum(),
            None => classes as f64,
        };
        let weights = spec.weight.as_ref().map(|w| w.to_f64_vec());
        let share: Vec<f64> = (0..r.lanes.count())
            .map(|lane| match targets.class(lane) {
                Some(c) => {
                    let w_t = weights.as_ref().map_or(1.0, |w| w[c]);
                    ((1.0 - eps) * w_t + eps / classes as f64 * total) * scale
                }
                None => 0.0,
            })
            .collect();
        Tensor::from_f64_slice(&share, &shape, x.dtype())
    })
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
        // through p = softmax(x), whose Jacobian is symmetric.
        let (g, x) = (n.x(0), n.x(1));
        let (r, spec) = targets_of(&self.spec, x.value(), n.inputs.get(2))?;
        let dg = g
            .requires_grad()
            .then(|| -> Result<Var<'g>> {
                let ones = g.graph().constant(g.value().ones_like());
                let unit = g
                    .graph()
                    .record(CrossEntropyBackward { spec: spec.clone() }, &[&ones, x])?;
                let per_lane = sum_axis(&g2.try_mul(&unit)?, r.axis, false)?;
                match self.spec.reduction {
                    Reduction::None => Ok(per_lane),
                    _ => per_lane.sum().try_expand(g.shape()),
                }
            })
            .transpose()?;
        let dx = x
            .requires_grad()
            .then(|| {
                let factor = lane_factor(&spec, g, x, &r)?;
                softmax_backward(&g2.try_mul(&factor)?, x, r.axis)
            })
            .transpose()?;
        Ok(n.grads([dg, dx]))
    }
    fn tangent<'g>(&self, _: usize, tx: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (g, x) = (n.x(0), n.x(1));
        let (r, spec) = targets_of(&self.spec, x.value(), n.inputs.get(2))?;
        let factor = lane_factor(&spec, g, x, &r)?;
        softmax_backward(tx, x, r.axis)?.try_mul(&factor)
    }
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
    r: &Resolved,
) -> Result<Var<'g>> {
    let share = x.graph().constant(softmax_share(spec, x.value(), r)?);
    let g = if g.value().numel() == 1 {
        g.clone()
    } else {
        let mut kept = Dims::from_slice(x.shape());
        kept[r.axis] = 1;
        expand_axis(g, r.axis, &kept)?
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

    use crate::test_util::tensor as t;

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

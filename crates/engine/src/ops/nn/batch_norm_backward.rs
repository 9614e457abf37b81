//! The fused backward ops of training-mode `batch_norm`:
//! `batch_norm_backward` (the input's gradient, `w σ P g` per channel with
//! `P = I - 11ᵀ/M - x̂x̂ᵀ/M` over the channel's `M = N·S` elements) and
//! `batch_norm_weight_backward` (`Σ g x̂` per channel). Both are
//! differentiable: their derivatives are written with these same ops and
//! per-channel means, as `layer_norm_backward.rs` does per row (the same
//! algebra, with "row" read as "channel").
//!
//! Notation per channel: `σ = 1/sqrt(var + eps)`, `x̂ = (x - μ) σ`,
//! `a = g w`, `c = mean(a x̂)`, `u = a - mean(a) - x̂ c` (so `dx = σ u`). The
//! Jacobian of `dx` with respect to `x`,
//! `-σ² (x̂ uᵀ + u x̂ᵀ)/M - c σ² P`, is symmetric: it serves both the
//! backward and the tangent.

use crate::ops::declare_op;
use std::sync::Arc;

use super::batch_norm::{check_channel_param, planes, sample, BatchNorm};
use super::normalization::{check_eps, norm_backward_rules, NormBackward};
use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, GradInputs, OpAttributes};
use crate::kernels::nn::batch_norm::{self as kernel, Planes};
use crate::ops::batching::materialize;
use crate::ops::rule::OpFacts;
use crate::ops::{Node, StructuredOp};
use crate::tensor::{Dims, Tensor};

/// `w σ P g` per channel: the gradient of training-mode [`BatchNorm`] with
/// respect to its input. Inputs: `g`, `x`, and the weight if present.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchNormBackward {
    pub(super) eps: f64,
    pub(super) has_weight: bool,
}

/// `Σ g x̂` per channel: the gradient of training-mode [`BatchNorm`] with
/// respect to its weight. Inputs: `g`, `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchNormWeightBackward {
    pub(super) eps: f64,
}

impl Default for BatchNormBackward {
    fn default() -> Self {
        BatchNormBackward {
            eps: 1e-5,
            has_weight: false,
        }
    }
}

impl Default for BatchNormWeightBackward {
    fn default() -> Self {
        BatchNormWeightBackward { eps: 1e-5 }
    }
}

/// `[1, C, 1, ...]` for an input of `rank` (the broadcast view of a per-channel value).
fn view_shape(c: usize, rank: usize) -> Vec<usize> {
    let mut s = vec![1; rank];
    s[1] = c;
    s
}

/// A per-channel value `[C]` viewed as `[1, C, 1, ...]` to broadcast against an input of `rank`.
pub(super) fn channel_view<'g>(p: &Var<'g>, rank: usize) -> Result<Var<'g>> {
    let s: Vec<isize> = view_shape(p.shape()[0], rank)
        .into_iter()
        .map(|d| d as isize)
        .collect();
    p.try_reshape(&s)
}

/// `v` (`[N, C, *]`) summed per channel: `[C]`.
pub(super) fn channel_sum<'g>(v: &Var<'g>) -> Result<Var<'g>> {
    let c = v.shape()[1];
    v.sum_to_size(&view_shape(c, v.shape().len()))?
        .try_reshape(&[c as isize])
}

/// An `[N, C, *]` example batched as `[B, N, C, *]` (a shared one
/// expanded), seen as the `[N, B·C, *]` input of one batch norm: each
/// (example, channel) pair is a channel of its own, so its statistics are
/// that example's, over its `N` and `*` (what a batch norm computes on each
/// example alone). The batching rules of the batch-norm ops record the op
/// itself on this view.
pub(super) fn into_channels<'g>(x: &Batched<'g>, ctx: &BatchContext) -> Result<Var<'g>> {
    let v = materialize(x, ctx)?;
    let shape = v.shape().to_vec();
    let mut dims = vec![shape[1], shape[0] * shape[2]];
    dims.extend_from_slice(&shape[3..]);
    v.try_permute(&swap_leading(shape.len()))?
        .reshape_dims(&dims)
}

/// [`into_channels`] undone on an output of the input's layout: `[N, B·C,
/// *]` back to `[B, N, C, *]`.
pub(super) fn from_channels<'g>(y: &Var<'g>, batch: usize) -> Result<Batched<'g>> {
    let shape = y.shape();
    let mut dims = vec![shape[0], batch, shape[1] / batch];
    dims.extend_from_slice(&shape[2..]);
    let perm = swap_leading(dims.len());
    Ok(Batched::along_batch(
        y.reshape_dims(&dims)?.try_permute(&perm)?,
    ))
}

/// A per-channel value (`[C]`, or `[B, C]` batched) as the `[B·C]` one that
/// goes with [`into_channels`]'s view.
pub(super) fn channels_of<'g>(p: &Batched<'g>, ctx: &BatchContext) -> Result<Var<'g>> {
    let v = materialize(p, ctx)?;
    let n = v.shape().iter().product();
    v.reshape_dims(&[n])
}

/// The permutation of `rank` axes that swaps the first two.
fn swap_leading(rank: usize) -> Vec<isize> {
    let mut perm: Vec<isize> = (0..rank as isize).collect();
    perm.swap(0, 1);
    perm
}

/// `v` averaged per channel, kept as `[1, C, 1, ...]`.
fn channel_mean<'g>(v: &Var<'g>) -> Result<Var<'g>> {
    let shape = v.shape();
    let m: usize = shape[0] * shape[2..].iter().product::<usize>();
    Ok(v.sum_to_size(&view_shape(shape[1], shape.len()))?
        .mul_scalar(1.0 / m as f64))
}

/// `σ` per channel (kept dims) and `x̂`, as recorded ops (so they differentiate again).
fn stats<'g>(x: &Var<'g>, eps: f64) -> Result<(Var<'g>, Var<'g>)> {
    let centred = x.try_sub(&channel_mean(x)?)?;
    let var = channel_mean(&centred.try_mul(&centred)?)?;
    let sigma = var.add_scalar(eps).rsqrt();
    let xhat = centred.try_mul(&sigma)?;
    Ok((sigma, xhat))
}

/// `σ P t` per channel (the input gradient of an unweighted batch norm, given `t`).
pub(super) fn project<'g>(t: &Var<'g>, x: &Var<'g>, eps: f64) -> Result<Var<'g>> {
    let op = BatchNormBackward {
        eps,
        has_weight: false,
    };
    t.graph().record(op, &[t, x])
}

/// `x̂`, recorded (training-mode batch norm without affine parameters).
fn xhat<'g>(x: &Var<'g>, eps: f64) -> Result<Var<'g>> {
    x.graph().record(BatchNorm::plain(eps), &[x])
}

/// `(d dx / d x) G` for `dx = σ u`, `u = a - mean(a) - x̂ c` (symmetric, see the module docs).
fn input_curvature<'g>(big_g: &Var<'g>, a: &Var<'g>, x: &Var<'g>, eps: f64) -> Result<Var<'g>> {
    let (sigma, xhat) = stats(x, eps)?;
    let c = channel_mean(&a.try_mul(&xhat)?)?;
    let u = a.try_sub(&channel_mean(a)?)?.try_sub(&xhat.try_mul(&c)?)?;
    let sigma2 = sigma.try_mul(&sigma)?;
    let gu = channel_mean(&big_g.try_mul(&u)?)?;
    let gx = channel_mean(&big_g.try_mul(&xhat)?)?;
    let outer = xhat
        .try_mul(&gu)?
        .try_add(&u.try_mul(&gx)?)?
        .try_mul(&sigma2)?;
    let proj = project(big_g, x, eps)?.try_mul(&c)?.try_mul(&sigma)?;
    Ok(-(outer.try_add(&proj)?))
}

/// `v * w` broadcast per channel, or `v` without a weight.
fn weigh<'g>(v: &Var<'g>, w: Option<&Var<'g>>) -> Result<Var<'g>> {
    match w {
        Some(w) => v.try_mul(&channel_view(w, v.shape().len())?),
        None => Ok(v.clone()),
    }
}

/// Checks `eps`, `x` and `g` against it (same shape and dtype) for the
/// backward ops; `x`'s layout.
fn check(op: &'static str, eps: f64, g: &Tensor, x: &Tensor) -> Result<Planes> {
    check_eps(op, eps)?;
    let p = planes(op, x)?;
    super::spatial::check_same_dtype(op, x, g)?;
    if g.shape() != x.shape() {
        return Err(crate::Error::shape_mismatch(op, x.shape(), g.shape()));
    }
    Ok(p)
}

// `out = w σ P g` (w per channel, so `σ P (g w)`): `q = σ P g2`, the
// curvature `input_curvature`, the weight's gradient summed per channel.
impl NormBackward for BatchNormBackward {
    fn project<'g>(&self, t: &Var<'g>, x: &Var<'g>) -> Result<Var<'g>> {
        project(t, x, self.eps)
    }
    fn curvature<'g>(&self, t: &Var<'g>, a: &Var<'g>, x: &Var<'g>) -> Result<Var<'g>> {
        input_curvature(t, a, x, self.eps)
    }
    fn reduce<'g>(&self, v: &Var<'g>, _: &Var<'g>) -> Result<Var<'g>> {
        channel_sum(v)
    }
    fn weigh<'g>(&self, v: &Var<'g>, w: &Var<'g>) -> Result<Var<'g>> {
        weigh(v, Some(w))
    }
}

impl StructuredOp for BatchNormBackward {
    const NAME: &'static str = "batch_norm_backward";
    // `w σ P g`: linear in `g` and in `w`.
    norm_backward_rules!();
    fn attributes(&self) -> OpAttributes {
        OpAttributes::new()
            .float("eps", self.eps)
            .bool("weight", self.has_weight)
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let (g, x, w) = (x[0], x[1], x.get(2).copied());
        let p = check(Self::NAME, self.eps, g, x)?;
        if let Some(w) = w {
            check_channel_param(Self::NAME, "weight", w, x)?;
        }
        crate::with_dtype!(Self::NAME, x.dtype(), T => {
            let (gs, xs, ws) = (g.as_slice_of::<T>(), x.as_slice_of::<T>(), w.map(|t| t.as_slice_of::<T>()));
            let stats = kernel::batch_stats(&kernel::channel_moments(xs, p), p.per_channel(), self.eps);
            Ok(Tensor::build::<T>(Dims::from_slice(x.shape()), |out| kernel::batch_norm_backward(gs, xs, p, &stats, ws, out)))
        })
    }
    /// Each example's channels as channels of one batch ([`into_channels`]).
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let (g, input) = (into_channels(&x[0], ctx)?, into_channels(&x[1], ctx)?);
        let w = x.get(2).map(|w| channels_of(w, ctx)).transpose()?;
        let args: Vec<&Var<'g>> = [&g, &input].into_iter().chain(w.as_ref()).collect();
        from_channels(&g.graph().record(self.clone(), &args)?, ctx.size)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(Arc::new(BatchNormBackward {
                eps: 1e-5,
                has_weight: true,
            })),
            sample_inputs: Some(|seed| {
                vec![
                    sample(&[3, 2, 4], seed + 3, 0.0, 1.0),
                    sample(&[3, 2, 4], seed, 0.0, 2.0),
                    sample(&[2], seed + 7, 1.0, 0.5),
                ]
            }),
            ..OpFacts::opaque(Some(3))
        }
    }
}

impl StructuredOp for BatchNormWeightBackward {
    declare_op!("batch_norm_weight_backward"(grad, input), linear[0], settings(float eps));
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let (g, x) = (x[0], x[1]);
        let p = check(Self::NAME, self.eps, g, x)?;
        crate::with_dtype!(Self::NAME, x.dtype(), T => {
            let xs = x.as_slice_of::<T>();
            let stats = kernel::batch_stats(&kernel::channel_moments(xs, p), p.per_channel(), self.eps);
            Tensor::from_vec(kernel::batch_norm_weight_backward(g.as_slice_of::<T>(), xs, p, &stats), &[p.c])
        })
    }
    /// Each example's channels as channels of one batch ([`into_channels`]):
    /// `[B·C]` sums, one row per example.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let (g, input) = (into_channels(&x[0], ctx)?, into_channels(&x[1], ctx)?);
        let sums = g.graph().record(self.clone(), &[&g, &input])?;
        let c = sums.shape()[0] / ctx.size;
        Ok(Batched::along_batch(sums.reshape_dims(&[ctx.size, c])?))
    }
    fn grad<'g>(&self, i: usize, g2: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        // out = Σ_channel g x̂: d/dg = x̂ g2 (per channel); d/dx = σ P (g g2).
        let (g, x) = (n.x(0), n.x(1));
        if i == 0 {
            weigh(&xhat(x, self.eps)?, Some(g2))
        } else {
            project(&weigh(g, Some(g2))?, x, self.eps)
        }
    }
    fn tangent<'g>(&self, _: usize, tx: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (g, x) = (n.x(0), n.x(1));
        channel_sum(&g.try_mul(&project(tx, x, self.eps)?)?)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            sample_inputs: Some(|seed| {
                vec![
                    sample(&[3, 2, 4], seed + 3, 0.0, 1.0),
                    sample(&[3, 2, 4], seed, 0.0, 2.0),
                ]
            }),
            ..OpFacts::opaque(self.arity())
        }
    }
}

register_defaults!(BatchNormBackward, BatchNormWeightBackward);

//! The fused backward ops of `layer_norm`: `layer_norm_backward` (the
//! input's gradient, `σ P (g w)` per row with `P = I - 11ᵀ/M - x̂x̂ᵀ/M`) and
//! `layer_norm_weight_backward` (`Σ_rows g x̂`), each differentiable: their
//! derivatives are written with these same ops and per-row means, so
//! gradients of gradients work.
//!
//! Notation per row of `M` elements: `σ = 1/sqrt(var + eps)`, `x̂ = (x - μ) σ`,
//! `a = g w`, `c = mean(a x̂)`, `u = a - mean(a) - x̂ c` (so `dx = σ u`).
//! The Jacobian of `dx` with respect to `x` is symmetric:
//! `-σ² (x̂ uᵀ + u x̂ᵀ)/M - c σ² P`, which serves both backward and tangent.

use std::sync::Arc;

use super::batch_norm::sample;
use super::layer_norm::{check_param, row_len, shape_or_last, LayerNorm};
use super::normalization::{
    batch_trailing_backward, norm_backward_rules, norm_backward_samples, trailing_norm_backward,
};
use super::support::sum_axis;
use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, GradInputs, OpAttributes};
use crate::kernels::nn::norm as kernel;
use crate::ops::declare_op;
use crate::ops::{Node, OpFacts, StructuredOp};
use crate::tensor::{Dims, Tensor};

/// `σ P (g w)` per row: the gradient of [`LayerNorm`] with respect to its
/// input. Inputs: `g`, `x`, and the weight if present.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNormBackward {
    pub(super) normalized_shape: Dims,
    pub(super) eps: f64,
    pub(super) has_weight: bool,
}

/// `Σ_rows g x̂`: the gradient of [`LayerNorm`] with respect to its weight.
/// Inputs: `g`, `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNormWeightBackward {
    pub(super) normalized_shape: Dims,
    pub(super) eps: f64,
}

impl Default for LayerNormBackward {
    fn default() -> Self {
        LayerNormBackward {
            normalized_shape: Dims::new(),
            eps: 1e-5,
            has_weight: false,
        }
    }
}

impl Default for LayerNormWeightBackward {
    fn default() -> Self {
        LayerNormWeightBackward {
            normalized_shape: Dims::new(),
            eps: 1e-5,
        }
    }
}

/// `v` summed over its trailing `k` dims, kept as size 1, divided by `m`: per-row means.
fn row_mean<'g>(v: &Var<'g>, k: usize, m: usize) -> Result<Var<'g>> {
    let rank = v.shape().len();
    let mut s = v.clone();
    for axis in rank - k..rank {
        s = sum_axis(&s, axis, true)?;
    }
    Ok(s.mul_scalar(1.0 / m as f64))
}

/// `σ` per row (kept dims) and `x̂`, as recorded ops (so they differentiate again).
fn stats<'g>(x: &Var<'g>, shape: &[usize], eps: f64) -> Result<(Var<'g>, Var<'g>)> {
    let (k, m) = (shape.len(), shape.iter().product());
    let centred = x.try_sub(&row_mean(x, k, m)?)?;
    let var = row_mean(&centred.try_mul(&centred)?, k, m)?;
    let sigma = var.add_scalar(eps).log().mul_scalar(-0.5).exp();
    let xhat = centred.try_mul(&sigma)?;
    Ok((sigma, xhat))
}

/// `σ P t` per row (the input gradient of an unweighted layer norm, given `t`).
pub(super) fn project<'g>(t: &Var<'g>, x: &Var<'g>, shape: &Dims, eps: f64) -> Result<Var<'g>> {
    let op = LayerNormBackward {
        normalized_shape: shape.clone(),
        eps,
        has_weight: false,
    };
    t.graph().record(op, &[t, x])
}

/// `(d dx / d x) G` for `dx = σ u`, `u = a - mean(a) - x̂ c` (symmetric, see the module docs).
fn input_curvature<'g>(
    big_g: &Var<'g>,
    a: &Var<'g>,
    x: &Var<'g>,
    shape: &Dims,
    eps: f64,
) -> Result<Var<'g>> {
    let (k, m) = (shape.len(), shape.iter().product());
    let (sigma, xhat) = stats(x, shape, eps)?;
    let c = row_mean(&a.try_mul(&xhat)?, k, m)?;
    let u = a
        .try_sub(&row_mean(a, k, m)?)?
        .try_sub(&xhat.try_mul(&c)?)?;
    let sigma2 = sigma.try_mul(&sigma)?;
    let gu = row_mean(&big_g.try_mul(&u)?, k, m)?;
    let gx = row_mean(&big_g.try_mul(&xhat)?, k, m)?;
    let outer = xhat
        .try_mul(&gu)?
        .try_add(&u.try_mul(&gx)?)?
        .try_mul(&sigma2)?;
    let proj = project(big_g, x, shape, eps)?
        .try_mul(&c)?
        .try_mul(&sigma)?;
    Ok(-(outer.try_add(&proj)?))
}

impl StructuredOp for LayerNormBackward {
    const NAME: &'static str = "layer_norm_backward";
    // `σ P (g w)`: linear in `g` and in `w`.
    norm_backward_rules!();
    fn attributes(&self) -> OpAttributes {
        norm_attributes(&self.normalized_shape, self.eps).bool("weight", self.has_weight)
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let (g, x, w) = (x[0], x[1], x.get(2).copied());
        let shape = shape_or_last(&self.normalized_shape, x);
        let m = row_len(Self::NAME, x, &shape)?;
        check_param(Self::NAME, g, x.shape(), x)?;
        if let Some(w) = w {
            check_param(Self::NAME, w, &shape, x)?;
        }
        crate::with_dtype!(Self::NAME, x.dtype(), T => {
            let (gs, xs, ws) = (g.as_slice_of::<T>(), x.as_slice_of::<T>(), w.map(|t| t.as_slice_of::<T>()));
            Ok(Tensor::build::<T>(Dims::from_slice(x.shape()), |out| kernel::layer_norm_backward(gs, xs, m, ws, self.eps, out)))
        })
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let unweighted = LayerNormBackward {
            has_weight: false,
            ..self.clone()
        };
        batch_trailing_backward(self, &unweighted, x, ctx)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(Arc::new(LayerNormBackward {
                normalized_shape: Dims::from_slice(&[3]),
                eps: 1e-4,
                has_weight: true,
            })),
            sample_inputs: Some(norm_backward_samples),
            ..OpFacts::opaque(self.arity())
        }
    }
}

// `out = σ P a`, `a = g w`: `q = σ P g2`, the curvature `input_curvature`.
trailing_norm_backward!(LayerNormBackward, project, input_curvature);

impl StructuredOp for LayerNormWeightBackward {
    declare_op!("layer_norm_weight_backward"(grad, input), linear[0]);
    fn attributes(&self) -> OpAttributes {
        norm_attributes(&self.normalized_shape, self.eps)
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let (g, x) = (x[0], x[1]);
        let shape = shape_or_last(&self.normalized_shape, x);
        let m = row_len(Self::NAME, x, &shape)?;
        check_param(Self::NAME, g, x.shape(), x)?;
        crate::with_dtype!(Self::NAME, x.dtype(), T => {
            let sums = kernel::layer_norm_weight_backward(g.as_slice_of::<T>(), x.as_slice_of::<T>(), m, self.eps);
            Tensor::from_vec(sums, &shape)
        })
    }
    fn grad<'g>(&self, i: usize, g2: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        // out = Σ_rows g x̂: d/dg = x̂ g2 (broadcast over rows); d/dx = σ P' (g g2) per row.
        let (g, x) = (n.x(0), n.x(1));
        let shape = &shape_or_last(&self.normalized_shape, x.value());
        if i == 0 {
            let plain = LayerNorm::plain(shape, self.eps);
            return x.graph().record(plain, &[x])?.try_mul(g2);
        }
        project(&g.try_mul(g2)?, x, shape, self.eps)
    }
    fn tangent<'g>(&self, _: usize, tx: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (g, x) = (n.x(0), n.x(1));
        let shape = &shape_or_last(&self.normalized_shape, x.value());
        g.try_mul(&project(tx, x, shape, self.eps)?)?
            .sum_to_size(shape)
    }
    /// `Σ_rows g x̂` per example: `x̂` with the batch as one more leading
    /// axis, the product summed over the example's own leading axes.
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        let (g, x) = (&x[0], &x[1]);
        let example = x.example_shape();
        let shape = if self.normalized_shape.is_empty() {
            Dims::from_slice(&example[example.len().saturating_sub(1)..])
        } else {
            self.normalized_shape.clone()
        };
        let lead = example.len() - shape.len();
        let plain = LayerNorm::plain(&shape, self.eps);
        let xhat = x.value.graph().record(plain, &[&x.value])?;
        let product = g.value.try_mul(&xhat)?;
        if lead == 0 {
            return Ok(Batched::along_batch(product));
        }
        let rows: Vec<isize> = (1..=lead as isize).collect();
        Ok(Batched::along_batch(product.try_sum_axes(&rows, false)?))
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(Arc::new(LayerNormWeightBackward {
                normalized_shape: Dims::from_slice(&[3]),
                eps: 1e-4,
            })),
            sample_inputs: Some(|seed| {
                vec![
                    sample(&[2, 3], seed + 2, 0.0, 1.0),
                    sample(&[2, 3], seed, 0.3, 1.0),
                ]
            }),
            ..OpFacts::opaque(self.arity())
        }
    }
}

/// The settings of the layer-norm backward ops: the normalised shape
/// (empty: the last dim) and `eps`.
fn norm_attributes(shape: &[usize], eps: f64) -> OpAttributes {
    OpAttributes::new()
        .ints("normalized_shape", shape)
        .float("eps", eps)
}

register_defaults!(LayerNormBackward, LayerNormWeightBackward);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::layer_norm::tests::{w, x};
    use crate::ops::testing::derivatives_agree;

    #[test]
    fn backward_ops_are_differentiable() {
        let g = x().map_f64(|v| (v * 3.0).sin());
        let shape = Dims::from_slice(&[4]);
        let with_w = LayerNormBackward {
            normalized_shape: shape.clone(),
            eps: 1e-5,
            has_weight: true,
        };
        derivatives_agree(&with_w, &[g.clone(), x(), w()]).unwrap();
        let two = LayerNormBackward {
            normalized_shape: Dims::from_slice(&[3, 4]),
            eps: 1e-3,
            has_weight: false,
        };
        derivatives_agree(&two, &[g.clone(), x()]).unwrap();
        let wb = LayerNormWeightBackward {
            normalized_shape: shape,
            eps: 1e-5,
        };
        derivatives_agree(&wb, &[g, x()]).unwrap();
    }
}

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

use smallvec::smallvec;

use super::layer_norm::{check_param, row_len, LayerNorm};
use super::support::sum_axis;
use crate::ops::OpAttributes;
use crate::error::Result;
use crate::graph::Var;
use crate::kernels::nn::norm as kernel;
use crate::ops::{expect_inputs, sum_tangents, Differentiable, GradInputs, OpRegistry};
use crate::tensor::{Dims, Filled, Tensor};

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

/// The normalised shape an op was given, or the input's last dim (registry defaults).
fn shape_or_last(shape: &Dims, x: &Tensor) -> Dims {
    if shape.is_empty() {
        Dims::from_slice(&x.shape()[x.rank().saturating_sub(1)..])
    } else {
        shape.clone()
    }
}

impl Differentiable for LayerNormBackward {
    fn attributes(&self) -> OpAttributes {
        OpAttributes::new().ints("normalized_shape", &self.normalized_shape).float("eps", self.eps).bool("weight", self.has_weight)
    }
    fn name(&self) -> &str {
        "layer_norm_backward"
    }
    fn arity(&self) -> Option<usize> {
        Some(2 + usize::from(self.has_weight))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        const OP: &str = "layer_norm_backward";
        expect_inputs(OP, inputs, 2 + usize::from(self.has_weight))?;
        let (g, x) = (inputs[0], inputs[1]);
        let shape = shape_or_last(&self.normalized_shape, x);
        let m = row_len(OP, x, &shape)?;
        check_param(OP, g, x.shape(), x)?;
        let w = self.has_weight.then(|| inputs[2]);
        if let Some(w) = w {
            check_param(OP, w, &shape, x)?;
        }
        crate::with_dtype!(OP, x.dtype(), T => {
            let ws = w.map(|t| t.as_slice_of::<T>());
            Ok(Tensor::build::<T>(Dims::from_slice(x.shape()), |out| {
                kernel::layer_norm_backward(g.as_slice_of::<T>(), x.as_slice_of::<T>(), m, ws, self.eps, out);
                // SAFETY: `layer_norm_backward` writes every element of its output.
                unsafe { Filled::assume(out) }
            }))
        })
    }
    fn backward<'g>(
        &self,
        g2: &Var<'g>,
        inputs: &[Var<'g>],
        _: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        // out = σ P a, a = g w: linear in a with a symmetric map, so
        // d/da = σ P g2 = q; d/dg = q w; d/dw = Σ_rows q g.
        let (g, x) = (&inputs[0], &inputs[1]);
        let w = self.has_weight.then(|| &inputs[2]);
        let shape = &shape_or_last(&self.normalized_shape, x.value());
        let q = project(g2, x, shape, self.eps)?;
        let dg = g
            .requires_grad()
            .then(|| match w {
                Some(w) => q.try_mul(w),
                None => Ok(q.clone()),
            })
            .transpose()?;
        let a = match w {
            Some(w) => g.try_mul(w)?,
            None => g.clone(),
        };
        let dx = x
            .requires_grad()
            .then(|| input_curvature(g2, &a, x, shape, self.eps))
            .transpose()?;
        let mut grads: GradInputs<'g> = smallvec![dg, dx];
        if let Some(w) = w {
            grads.push(
                w.requires_grad()
                    .then(|| q.try_mul(g)?.sum_to_size(shape))
                    .transpose()?,
            );
        }
        Ok(grads)
    }
    fn jvp<'g>(
        &self,
        t: &[Option<Var<'g>>],
        inputs: &[Var<'g>],
        out: &Var<'g>,
    ) -> Result<Option<Var<'g>>> {
        let (g, x) = (&inputs[0], &inputs[1]);
        let w = self.has_weight.then(|| &inputs[2]);
        let shape = &shape_or_last(&self.normalized_shape, x.value());
        let a = match w {
            Some(w) => g.try_mul(w)?,
            None => g.clone(),
        };
        let tw = if self.has_weight { t[2].as_ref() } else { None };
        sum_tangents(
            out.shape(),
            [
                t[0].as_ref().map(|tg| {
                    let ta = match w {
                        Some(w) => tg.try_mul(w)?,
                        None => tg.clone(),
                    };
                    project(&ta, x, shape, self.eps)
                }),
                t[1].as_ref()
                    .map(|tx| input_curvature(tx, &a, x, shape, self.eps)),
                tw.map(|tw| project(&g.try_mul(tw)?, x, shape, self.eps)),
            ],
        )
    }
}

impl Differentiable for LayerNormWeightBackward {
    fn attributes(&self) -> OpAttributes {
        OpAttributes::new().ints("normalized_shape", &self.normalized_shape).float("eps", self.eps)
    }
    fn name(&self) -> &str {
        "layer_norm_weight_backward"
    }
    fn arity(&self) -> Option<usize> {
        Some(2)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        const OP: &str = "layer_norm_weight_backward";
        expect_inputs(OP, inputs, 2)?;
        let (g, x) = (inputs[0], inputs[1]);
        let shape = shape_or_last(&self.normalized_shape, x);
        let m = row_len(OP, x, &shape)?;
        check_param(OP, g, x.shape(), x)?;
        crate::with_dtype!(OP, x.dtype(), T => {
            let sums = kernel::layer_norm_weight_backward(g.as_slice_of::<T>(), x.as_slice_of::<T>(), m, self.eps);
            Tensor::from_vec(sums, &shape)
        })
    }
    fn backward<'g>(
        &self,
        g2: &Var<'g>,
        inputs: &[Var<'g>],
        _: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        // out = Σ_rows g x̂: d/dg = x̂ g2 (broadcast over rows); d/dx = σ P' (g g2) per row.
        let (g, x) = (&inputs[0], &inputs[1]);
        let shape = &shape_or_last(&self.normalized_shape, x.value());
        let dg = g
            .requires_grad()
            .then(|| {
                let plain = LayerNorm::plain(shape, self.eps);
                x.graph().record(plain, &[x])?.try_mul(g2)
            })
            .transpose()?;
        let dx = x
            .requires_grad()
            .then(|| project(&g.try_mul(g2)?, x, shape, self.eps))
            .transpose()?;
        Ok(smallvec![dg, dx])
    }
    fn jvp<'g>(
        &self,
        t: &[Option<Var<'g>>],
        inputs: &[Var<'g>],
        out: &Var<'g>,
    ) -> Result<Option<Var<'g>>> {
        let (g, x) = (&inputs[0], &inputs[1]);
        let shape = &shape_or_last(&self.normalized_shape, x.value());
        sum_tangents(
            out.shape(),
            [
                t[0].as_ref()
                    .map(|tg| tg.graph().record(self.clone(), &[tg, x])),
                t[1].as_ref().map(|tx| {
                    g.try_mul(&project(tx, x, shape, self.eps)?)?
                        .sum_to_size(shape)
                }),
            ],
        )
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(LayerNormBackward::default());
    reg.add_builtin(LayerNormWeightBackward::default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{gradcheck, jvpcheck};

    fn x() -> Tensor {
        let v = [
            0.5, -1.0, 2.0, 1.5, 0.3, -0.7, 0.1, 0.9, -0.4, 1.1, -2.0, 0.6, 0.2, 0.4, -0.3, 1.7,
            -0.8, 0.05, 1.2, -1.5, 0.75, 0.35, -0.25, 0.0,
        ];
        Tensor::from_vec(v.to_vec(), &[2, 3, 4]).unwrap()
    }
    fn w() -> Tensor {
        Tensor::from_vec(vec![1.0, 0.5, -1.5, 2.0], &[4]).unwrap()
    }

    #[test]
    fn backward_ops_are_differentiable() {
        let g = x().map_f64(|v| (v * 3.0).sin());
        let shape = Dims::from_slice(&[4]);
        let with_w = LayerNormBackward {
            normalized_shape: shape.clone(),
            eps: 1e-5,
            has_weight: true,
        };
        gradcheck(
            |v| v[0].graph().record(with_w.clone(), &[&v[0], &v[1], &v[2]]),
            &[g.clone(), x(), w()],
        )
        .unwrap();
        jvpcheck(
            |v| v[0].graph().record(with_w.clone(), &[&v[0], &v[1], &v[2]]),
            &[g.clone(), x(), w()],
        )
        .unwrap();
        let two = LayerNormBackward {
            normalized_shape: Dims::from_slice(&[3, 4]),
            eps: 1e-3,
            has_weight: false,
        };
        gradcheck(
            |v| v[0].graph().record(two.clone(), &[&v[0], &v[1]]),
            &[g.clone(), x()],
        )
        .unwrap();
        jvpcheck(
            |v| v[0].graph().record(two.clone(), &[&v[0], &v[1]]),
            &[g.clone(), x()],
        )
        .unwrap();
        let wb = LayerNormWeightBackward {
            normalized_shape: shape,
            eps: 1e-5,
        };
        gradcheck(
            |v| v[0].graph().record(wb.clone(), &[&v[0], &v[1]]),
            &[g.clone(), x()],
        )
        .unwrap();
        jvpcheck(
            |v| v[0].graph().record(wb.clone(), &[&v[0], &v[1]]),
            &[g, x()],
        )
        .unwrap();
    }
}

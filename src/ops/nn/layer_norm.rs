//! `layer_norm` over the trailing `normalized_shape` dims, with optional
//! weight and bias, and its fused backward ops: `layer_norm_backward` (the
//! input's gradient, `σ P (g w)` per row with `P = I - 11ᵀ/M - x̂x̂ᵀ/M`) and
//! `layer_norm_weight_backward` (`Σ_rows g x̂`). Both are differentiable:
//! their derivatives are written with these same ops and per-row means, so
//! gradients of gradients work.
//!
//! Notation per row of `M` elements: `σ = 1/sqrt(var + eps)`, `x̂ = (x - μ) σ`,
//! `a = g w`, `c = mean(a x̂)`, `u = a - mean(a) - x̂ c` (so `dx = σ u`).
//! The Jacobian of `dx` with respect to `x` is symmetric:
//! `-σ² (x̂ uᵀ + u x̂ᵀ)/M - c σ² P`, which serves both backward and tangent.

use smallvec::smallvec;

use super::support::sum_axis;
use crate::error::{Error, Result};
use crate::graph::Var;
use crate::kernels::nn::norm as kernel;
use crate::ops::arith::or_panic;
use crate::ops::{expect_inputs, sum_tangents, Differentiable, GradInputs, OpRegistry};
use crate::tensor::{Dims, Tensor};

/// Which affine parameters follow the input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Affine {
    /// Inferred from the input count: 1 none, 2 weight, 3 weight and bias.
    #[default]
    FromInputs,
    /// As given.
    Given { weight: bool, bias: bool },
}

/// Layer normalisation over the trailing dims: `(x - mean) / sqrt(var + eps) * weight + bias`,
/// PyTorch's `F.layer_norm`. Inputs: `x`, then the weight and/or bias if
/// present (each of shape `normalized_shape`). The registry holds it
/// normalising the last dim with `eps = 1e-5`, the affine parameters
/// inferred from the input count (2: weight, 3: weight and bias).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNorm {
    /// The trailing dims normalised over (`None`: the last dim of the input).
    normalized_shape: Option<Dims>,
    eps: f64,
    affine: Affine,
}

impl Default for LayerNorm {
    fn default() -> Self {
        LayerNorm {
            normalized_shape: None,
            eps: 1e-5,
            affine: Affine::FromInputs,
        }
    }
}

/// `σ P (g w)` per row: the gradient of [`LayerNorm`] with respect to its
/// input. Inputs: `g`, `x`, and the weight if present.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNormBackward {
    normalized_shape: Dims,
    eps: f64,
    has_weight: bool,
}

/// `Σ_rows g x̂`: the gradient of [`LayerNorm`] with respect to its weight.
/// Inputs: `g`, `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNormWeightBackward {
    normalized_shape: Dims,
    eps: f64,
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

/// Checks that `shape` is a suffix of `x`'s shape; returns the row length.
fn row_len(op: &'static str, x: &Tensor, shape: &[usize]) -> Result<usize> {
    let xs = x.shape();
    if shape.is_empty() || shape.len() > xs.len() || xs[xs.len() - shape.len()..] != *shape {
        return Err(Error::invalid(
            op,
            format!(
                "normalized_shape {shape:?} must be a non-empty suffix of the input's shape {xs:?}"
            ),
        ));
    }
    Ok(shape.iter().product())
}

/// Checks an affine parameter (or gradient) against the normalised shape and dtype.
fn check_param(op: &'static str, p: &Tensor, shape: &[usize], x: &Tensor) -> Result<()> {
    if p.dtype() != x.dtype() {
        return Err(Error::DTypeMismatch {
            op,
            lhs: x.dtype(),
            rhs: p.dtype(),
        });
    }
    if p.shape() != shape {
        return Err(Error::shape_mismatch(op, shape, p.shape()));
    }
    Ok(())
}

impl LayerNorm {
    /// `(normalized_shape, has_weight, has_bias)` for these inputs.
    fn resolve(&self, x: &Tensor, n_inputs: usize) -> Result<(Dims, bool, bool)> {
        let shape = match &self.normalized_shape {
            Some(s) => s.clone(),
            None => Dims::from_slice(&x.shape()[x.rank().saturating_sub(1)..]),
        };
        let (weight, bias) = match self.affine {
            Affine::FromInputs => (n_inputs >= 2, n_inputs == 3),
            Affine::Given { weight, bias } => (weight, bias),
        };
        let expected = 1 + usize::from(weight) + usize::from(bias);
        if n_inputs != expected {
            return Err(Error::Arity {
                op: "layer_norm".to_string(),
                expected,
                got: n_inputs,
            });
        }
        Ok((shape, weight, bias))
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
fn project<'g>(t: &Var<'g>, x: &Var<'g>, shape: &Dims, eps: f64) -> Result<Var<'g>> {
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

impl Differentiable for LayerNorm {
    fn name(&self) -> &str {
        "layer_norm"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let x = inputs.first().ok_or(Error::Arity {
            op: "layer_norm".to_string(),
            expected: 1,
            got: 0,
        })?;
        let (shape, has_w, has_b) = self.resolve(x, inputs.len())?;
        let m = row_len("layer_norm", x, &shape)?;
        if !(self.eps >= 0.0 && self.eps.is_finite()) {
            return Err(Error::invalid(
                "layer_norm",
                format!("eps must be finite and >= 0, got {}", self.eps),
            ));
        }
        let w = has_w.then(|| inputs[1]);
        let b = has_b.then(|| inputs[inputs.len() - 1]);
        for p in w.iter().chain(b.iter()) {
            check_param("layer_norm", p, &shape, x)?;
        }
        crate::with_dtype!(x.dtype(), T => {
            let (ws, bs) = (w.map(|t| t.as_slice_of::<T>()), b.map(|t| t.as_slice_of::<T>()));
            Ok(Tensor::build::<T>(Dims::from_slice(x.shape()), |out| {
                kernel::layer_norm(x.as_slice_of::<T>(), m, ws, bs, self.eps, out)
            }))
        })
    }
    fn backward<'g>(&self, g: &Var<'g>, inputs: &[Var<'g>], _: &Var<'g>) -> Result<GradInputs<'g>> {
        let x = &inputs[0];
        let (shape, has_w, has_b) = self.resolve(x.value(), inputs.len())?;
        let w = has_w.then(|| &inputs[1]);
        let b = has_b.then(|| &inputs[inputs.len() - 1]);
        let dx = x
            .requires_grad()
            .then(|| {
                let op = LayerNormBackward {
                    normalized_shape: shape.clone(),
                    eps: self.eps,
                    has_weight: has_w,
                };
                let mut args = vec![g, x];
                args.extend(w);
                g.graph().record(op, &args)
            })
            .transpose()?;
        let dw = w
            .filter(|w| w.requires_grad())
            .map(|_| {
                let op = LayerNormWeightBackward {
                    normalized_shape: shape.clone(),
                    eps: self.eps,
                };
                g.graph().record(op, &[g, x])
            })
            .transpose()?;
        let db = b
            .filter(|b| b.requires_grad())
            .map(|_| g.sum_to_size(&shape))
            .transpose()?;
        let mut grads: GradInputs<'g> = smallvec![dx];
        if has_w {
            grads.push(dw);
        }
        if has_b {
            grads.push(db);
        }
        Ok(grads)
    }
    fn jvp<'g>(
        &self,
        t: &[Option<Var<'g>>],
        inputs: &[Var<'g>],
        out: &Var<'g>,
    ) -> Result<Option<Var<'g>>> {
        let x = &inputs[0];
        let (shape, has_w, has_b) = self.resolve(x.value(), inputs.len())?;
        let w = has_w.then(|| &inputs[1]);
        let tw = if has_w { t[1].as_ref() } else { None };
        let tb = if has_b {
            t[inputs.len() - 1].as_ref()
        } else {
            None
        };
        sum_tangents(
            out.shape(),
            [
                t[0].as_ref().map(|tx| {
                    let d = project(tx, x, &shape, self.eps)?;
                    match w {
                        Some(w) => d.try_mul(w),
                        None => Ok(d),
                    }
                }),
                tw.map(|tw| {
                    let plain = LayerNorm {
                        normalized_shape: Some(shape.clone()),
                        eps: self.eps,
                        affine: Affine::Given {
                            weight: false,
                            bias: false,
                        },
                    };
                    x.graph().record(plain, &[x])?.try_mul(tw)
                }),
                tb.map(|tb| Ok(tb.clone())),
            ],
        )
    }
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
        crate::with_dtype!(x.dtype(), T => {
            let ws = w.map(|t| t.as_slice_of::<T>());
            Ok(Tensor::build::<T>(Dims::from_slice(x.shape()), |out| {
                kernel::layer_norm_backward(g.as_slice_of::<T>(), x.as_slice_of::<T>(), m, ws, self.eps, out)
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
        crate::with_dtype!(x.dtype(), T => {
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
                let plain = LayerNorm {
                    normalized_shape: Some(shape.clone()),
                    eps: self.eps,
                    affine: Affine::Given {
                        weight: false,
                        bias: false,
                    },
                };
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
    reg.add_builtin(LayerNorm::default());
    reg.add_builtin(LayerNormBackward::default());
    reg.add_builtin(LayerNormWeightBackward::default());
}

impl<'g> Var<'g> {
    /// Layer normalisation over the trailing `normalized_shape` dims, with
    /// an optional elementwise `weight` and `bias` (each of shape
    /// `normalized_shape`): PyTorch's `F.layer_norm(x, normalized_shape, weight, bias, eps)`.
    ///
    /// Errors: a `normalized_shape` that is not a suffix of the input's shape,
    /// or parameters of another shape, are `Error::InvalidArgument` /
    /// `Error::ShapeMismatch`; a negative `eps` is `Error::InvalidArgument`.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 0.0, 0.0, 3.0], &[2, 3])?);
    /// let w = g.variable(Tensor::from_vec(vec![1.0, 1.0, 2.0], &[3])?);
    /// let b = g.variable(Tensor::from_vec(vec![0.0, 0.0, 0.5], &[3])?);
    /// let y = x.try_layer_norm(&[3], Some(&w), Some(&b), 0.0)?;
    /// // Row 1: mean 2, variance 2/3; row 2: mean 1, variance 2.
    /// let (s, r) = (1.5f64.sqrt(), 0.5f64.sqrt());
    /// let expect = Tensor::from_vec(vec![-s, 0.0, 2.0 * s + 0.5, -r, -r, 4.0 * r + 0.5], &[2, 3])?;
    /// assert!(y.value().allclose(&expect, 1e-12, 1e-12));
    /// let grads = (&y * &y).sum().backward()?;
    /// assert_eq!(grads.wrt(&b).shape(), &[3]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    pub fn try_layer_norm(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Var<'g>>,
        bias: Option<&Var<'g>>,
        eps: f64,
    ) -> Result<Var<'g>> {
        let op = LayerNorm {
            normalized_shape: Some(Dims::from_slice(normalized_shape)),
            eps,
            affine: Affine::Given {
                weight: weight.is_some(),
                bias: bias.is_some(),
            },
        };
        let mut inputs = vec![self];
        inputs.extend(weight);
        inputs.extend(bias);
        self.graph().record(op, &inputs)
    }

    /// Layer normalisation; panics on bad shapes (see [`try_layer_norm`](Self::try_layer_norm)).
    #[track_caller]
    pub fn layer_norm(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Var<'g>>,
        bias: Option<&Var<'g>>,
        eps: f64,
    ) -> Var<'g> {
        or_panic(self.try_layer_norm(normalized_shape, weight, bias, eps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{gradcheck, jvpcheck, DType, Graph};

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
    fn b() -> Tensor {
        Tensor::from_vec(vec![0.1, -0.2, 0.3, 0.0], &[4]).unwrap()
    }

    // NumPy: m = x.mean(axes, keepdims=True); v = ((x - m)**2).mean(axes, keepdims=True);
    // (x - m) / np.sqrt(v + eps) * w + b.
    #[test]
    fn forward_values() {
        let g = Graph::new();
        let (xv, wv, bv) = (g.variable(x()), g.variable(w()), g.variable(b()));
        let y = xv
            .layer_norm(&[4], Some(&wv), Some(&bv), 1e-5)
            .value()
            .to_f64_vec();
        let expect = [
            -0.11821705893449413,
            -0.9637597062707295,
            -1.336627942008706,
            1.3093023536069648,
            0.36210721539198154,
            -0.942637110277281,
            0.4310536076959908,
            2.621072153919816,
        ];
        for (a, e) in y.iter().zip(expect) {
            assert!((a - e).abs() < 1e-14, "{a} vs {e}");
        }
        let y2 = xv
            .layer_norm(&[3, 4], None, None, 1e-3)
            .value()
            .to_f64_vec();
        let expect2 = [
            0.2396743240441806,
            -1.1519830413736423,
            1.6313316894620036,
            1.1674459009893958,
        ];
        for (a, e) in y2.iter().zip(expect2) {
            assert!((a - e).abs() < 1e-14);
        }
        assert!((y2[23] - -0.1836887710472466).abs() < 1e-14);
        // Registry: last dim, eps 1e-5, affine from the input count.
        let via = g.apply("layer_norm", &[&xv, &wv, &bv]).unwrap();
        assert!(via
            .value()
            .allclose(&Tensor::from_vec(y.clone(), &[2, 3, 4]).unwrap(), 0.0, 0.0));
    }

    #[test]
    fn gradients_and_tangents() {
        gradcheck(
            |v| v[0].try_layer_norm(&[4], Some(&v[1]), Some(&v[2]), 1e-5),
            &[x(), w(), b()],
        )
        .unwrap();
        jvpcheck(
            |v| v[0].try_layer_norm(&[4], Some(&v[1]), Some(&v[2]), 1e-5),
            &[x(), w(), b()],
        )
        .unwrap();
        gradcheck(|v| v[0].try_layer_norm(&[3, 4], None, None, 1e-3), &[x()]).unwrap();
        jvpcheck(|v| v[0].try_layer_norm(&[3, 4], None, None, 1e-3), &[x()]).unwrap();
        gradcheck(
            |v| v[0].try_layer_norm(&[4], Some(&v[1]), None, 1e-5),
            &[x(), w()],
        )
        .unwrap();
        gradcheck(
            |v| v[0].try_layer_norm(&[4], None, Some(&v[1]), 1e-5),
            &[x(), b()],
        )
        .unwrap();
        // Two consumers of x (and of the weight).
        gradcheck(
            |v| Ok(&v[0].layer_norm(&[4], Some(&v[1]), None, 1e-5).tanh() * &v[0] + &v[1] * 0.5),
            &[x(), w()],
        )
        .unwrap();
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

    #[test]
    fn f32_large_offsets_and_errors() {
        let g = Graph::new();
        // A large common offset: two-pass statistics in f64 keep f32 results accurate.
        let big = x().map_f64(|v| v + 1e4).to_dtype(DType::F32);
        let yb = g.variable(big.clone()).layer_norm(&[4], None, None, 1e-5);
        let exact = g
            .variable(big.to_dtype(DType::F64))
            .layer_norm(&[4], None, None, 1e-5);
        assert!(yb.value().allclose(exact.value(), 1e-6, 1e-6));
        let small = g.variable(x().to_dtype(DType::F32));
        let ys = small.layer_norm(&[4], None, None, 1e-5);
        let x64 = g.variable(x());
        assert!(ys
            .value()
            .allclose(x64.layer_norm(&[4], None, None, 1e-5).value(), 1e-5, 1e-5));
        assert!(matches!(
            x64.try_layer_norm(&[3], None, None, 1e-5),
            Err(Error::InvalidArgument {
                op: "layer_norm",
                ..
            })
        ));
        assert!(x64.try_layer_norm(&[], None, None, 1e-5).is_err());
        let w3 = g.variable(Tensor::ones(&[3], DType::F64).unwrap());
        assert!(matches!(
            x64.try_layer_norm(&[4], Some(&w3), None, 1e-5),
            Err(Error::ShapeMismatch { .. })
        ));
        let w32 = g.variable(Tensor::ones(&[4], DType::F32).unwrap());
        assert!(matches!(
            x64.try_layer_norm(&[4], Some(&w32), None, 1e-5),
            Err(Error::DTypeMismatch { .. })
        ));
        assert!(x64.try_layer_norm(&[4], None, None, -1.0).is_err());
    }
}

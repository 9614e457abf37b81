//! `rms_norm` over the trailing `normalized_shape` dims with an optional
//! weight, PyTorch's `F.rms_norm`: `x / sqrt(mean(x²) + eps) * weight`,
//! `eps` defaulting to the dtype's machine epsilon (`torch.finfo(dtype).eps`).
//!
//! One fused forward kernel; the input's gradient is the fused op
//! `rms_norm_backward` (`r (a − x̂ mean(a x̂))` per row, `r = 1/sqrt(mean(x²) + eps)`,
//! `x̂ = x r`, `a = g w`), the weight's is `Σ_rows g x̂` (the unweighted
//! forward times `g`, summed). `rms_norm_backward` is differentiable: the
//! map `a ↦ dx` is the symmetric `J = r (I − x̂x̂ᵀ/M)` (so its transpose is
//! itself), and its derivative in `x` is the Hessian of `⟨a, x̂(x)⟩`, also
//! symmetric, written with `Var` ops ([`curvature`]). The tangent rule
//! reuses the same op (`J` is symmetric).

use crate::ops::declare_op;
use std::sync::Arc;

use super::batch_norm::sample;
use super::layer_norm::{check_param, row_len, shape_or_last};
use super::normalization::{
    batch_trailing, batch_trailing_backward, check_eps, norm_backward_rules, norm_backward_samples,
    trailing_norm_backward,
};
use crate::base::error::{Error, Result};
use crate::base::fallible::fallible;
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, GradInputs, OpAttributes};
use crate::kernels::nn::rms_norm as kernel;
use crate::ops::rule::OpFacts;
use crate::ops::{Node, StructuredOp};
use crate::tensor::{DType, Dims, Tensor};

/// RMS normalisation over the trailing dims. Inputs: `x`, then the weight
/// if present (of shape `normalized_shape`). The registry holds it over the
/// last dim with the default `eps`, the weight inferred from the input count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RmsNorm {
    /// The trailing dims (empty: the input's last dim).
    normalized_shape: Dims,
    /// `None`: the dtype's machine epsilon.
    eps: Option<f64>,
}

/// `r (a − x̂ mean(a x̂))` per row with `a = g w` (or `g`): the gradient of
/// [`RmsNorm`] with respect to its input. Inputs: `g`, `x`, the weight if
/// `has_weight`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RmsNormBackward {
    normalized_shape: Dims,
    eps: Option<f64>,
    has_weight: bool,
}

/// PyTorch's default: `torch.finfo(dtype).eps`.
fn eps_of(eps: Option<f64>, dtype: DType) -> f64 {
    eps.unwrap_or(match dtype {
        DType::F32 => f32::EPSILON as f64,
        _ => f64::EPSILON,
    })
}

/// Checks an input (its normalised shape, the gradient `g` of a backward,
/// `eps`, the weight): the row length and the `eps` to use.
fn check(
    op: &'static str,
    x: &Tensor,
    shape: &[usize],
    g: Option<&Tensor>,
    eps: Option<f64>,
    w: Option<&Tensor>,
) -> Result<(usize, f64)> {
    let shape = shape_or_last(shape, x);
    let m = row_len(op, x, &shape)?;
    if let Some(g) = g {
        check_param(op, g, x.shape(), x)?;
    }
    let eps = eps_of(eps, x.dtype());
    check_eps(op, eps)?;
    if let Some(w) = w {
        check_param(op, w, &shape, x)?;
    }
    Ok((m, eps))
}

/// The settings by name: the normalised shape (empty: the last dim) and
/// `eps` (unless the dtype's machine epsilon).
fn rms_attributes(shape: &[usize], eps: Option<f64>) -> OpAttributes {
    OpAttributes::new()
        .ints("normalized_shape", shape)
        .float_opt("eps", eps)
}

/// Per-row means over the trailing `k` dims, kept as size 1.
fn row_mean<'g>(v: &Var<'g>, k: usize) -> Result<Var<'g>> {
    let rank = v.shape().len() as isize;
    let axes: Vec<isize> = (rank - k as isize..rank).collect();
    v.try_mean_axes(&axes, true)
}

/// `J t = r (t − x̂ mean(t x̂))`, through the fused op.
fn project<'g>(t: &Var<'g>, x: &Var<'g>, shape: &Dims, eps: Option<f64>) -> Result<Var<'g>> {
    let op = RmsNormBackward {
        normalized_shape: shape.clone(),
        eps,
        has_weight: false,
    };
    t.graph().record(op, &[t, x])
}

/// `x̂ = x r` through the fused forward (no weight).
fn plain<'g>(x: &Var<'g>, shape: &Dims, eps: Option<f64>) -> Result<Var<'g>> {
    x.graph().record(
        RmsNorm {
            normalized_shape: shape.clone(),
            eps,
        },
        &[x],
    )
}

/// `(d dx / d x) G` for `dx = r u`, `u = a − x̂ c`, `c = mean(a x̂)`:
/// `−r² (ρ u + c G + x̂ (mean(a G) − 2 c ρ))` with `ρ = mean(x̂ G)`.
fn curvature<'g>(
    big_g: &Var<'g>,
    a: &Var<'g>,
    x: &Var<'g>,
    shape: &Dims,
    eps: Option<f64>,
) -> Result<Var<'g>> {
    let k = shape.len();
    let eps = eps_of(eps, x.dtype());
    let r = row_mean(&x.try_mul(x)?, k)?
        .add_scalar(eps)
        .log()
        .mul_scalar(-0.5)
        .exp();
    let xhat = x.try_mul(&r)?;
    let c = row_mean(&a.try_mul(&xhat)?, k)?;
    let u = a.try_sub(&xhat.try_mul(&c)?)?;
    let rho = row_mean(&xhat.try_mul(big_g)?, k)?;
    let ag = row_mean(&a.try_mul(big_g)?, k)?;
    let inner = rho
        .try_mul(&u)?
        .try_add(&c.try_mul(big_g)?)?
        .try_add(&xhat.try_mul(&ag.try_sub(&c.try_mul(&rho)?.mul_scalar(2.0))?)?)?;
    Ok(-(inner.try_mul(&r.try_mul(&r)?)?))
}

impl StructuredOp for RmsNorm {
    declare_op!("rms_norm"(input, weight));
    /// One or two inputs (the weight is optional).
    fn arity(&self) -> Option<usize> {
        None
    }
    fn attributes(&self) -> OpAttributes {
        rms_attributes(&self.normalized_shape, self.eps)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        if inputs.is_empty() || inputs.len() > 2 {
            return Err(Error::Arity {
                op: Self::NAME.to_string(),
                expected: 2,
                got: inputs.len(),
            });
        }
        let (x, w) = (inputs[0], inputs.get(1).copied());
        let (m, eps) = check(Self::NAME, x, &self.normalized_shape, None, self.eps, w)?;
        crate::with_dtype!(Self::NAME, x.dtype(), T => {
            let (xs, ws) = (x.as_slice_of::<T>(), w.map(|t| t.as_slice_of::<T>()));
            Ok(Tensor::build::<T>(Dims::from_slice(x.shape()), |out| kernel::rms_norm(xs, m, ws, eps, out)))
        })
    }
    fn grad<'g>(&self, i: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (x, w) = (n.x(0), n.inputs.get(1));
        let shape = shape_or_last(&self.normalized_shape, x.value());
        if i == 1 {
            return plain(x, &shape, self.eps)?.try_mul(g)?.sum_to_size(&shape);
        }
        let op = RmsNormBackward {
            normalized_shape: shape,
            eps: self.eps,
            has_weight: w.is_some(),
        };
        let args: Vec<&Var<'g>> = [g, x].into_iter().chain(w).collect();
        g.graph().record(op, &args)
    }
    fn tangent<'g>(&self, i: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (x, w) = (n.x(0), n.inputs.get(1));
        let shape = shape_or_last(&self.normalized_shape, x.value());
        if i == 1 {
            return plain(x, &shape, self.eps)?.try_mul(t);
        }
        let d = project(t, x, &shape, self.eps)?;
        match w {
            Some(w) => d.try_mul(w),
            None => Ok(d),
        }
    }
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        batch_trailing(self, self, &x[0], x.get(1), None)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(Arc::new(RmsNorm {
                normalized_shape: Dims::from_slice(&[2, 3]),
                eps: Some(1e-3),
            })),
            sample_inputs: Some(|seed| {
                vec![
                    sample(&[2, 2, 3], seed, 0.3, 1.0),
                    sample(&[2, 3], seed + 5, 1.0, 0.5),
                ]
            }),
            ..OpFacts::opaque(None)
        }
    }
}

impl StructuredOp for RmsNormBackward {
    const NAME: &'static str = "rms_norm_backward";
    // `J(x) (g w)`: linear in `g` and in `w`.
    norm_backward_rules!();
    fn attributes(&self) -> OpAttributes {
        rms_attributes(&self.normalized_shape, self.eps).bool("weight", self.has_weight)
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let unweighted = RmsNormBackward {
            has_weight: false,
            ..self.clone()
        };
        batch_trailing_backward(self, &unweighted, x, ctx)
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let (g, x, w) = (x[0], x[1], x.get(2).copied());
        let (m, eps) = check(Self::NAME, x, &self.normalized_shape, Some(g), self.eps, w)?;
        crate::with_dtype!(Self::NAME, x.dtype(), T => {
            let (gs, xs, ws) = (g.as_slice_of::<T>(), x.as_slice_of::<T>(), w.map(|t| t.as_slice_of::<T>()));
            Ok(Tensor::build::<T>(Dims::from_slice(x.shape()), |out| kernel::rms_norm_backward(gs, xs, m, ws, eps, out)))
        })
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(Arc::new(RmsNormBackward {
                normalized_shape: Dims::from_slice(&[3]),
                eps: Some(1e-4),
                has_weight: true,
            })),
            sample_inputs: Some(norm_backward_samples),
            ..OpFacts::opaque(self.arity())
        }
    }
}

// `out = J(x) a`, `a = g w`: `q = J g2`, the curvature `curvature`.
trailing_norm_backward!(RmsNormBackward, project, curvature);

register_defaults!(RmsNorm, RmsNormBackward);

impl<'g> Var<'g> {
    fallible! {
        /// RMS normalisation over the trailing `normalized_shape` dims, with
        /// an optional elementwise `weight` (of shape `normalized_shape`):
        /// `x / sqrt(mean(x²) + eps) * weight`, PyTorch's
        /// `F.rms_norm(x, normalized_shape, weight, eps)`. `eps: None` is the
        /// dtype's machine epsilon, as in PyTorch.
        ///
        /// Errors: a `normalized_shape` that is not a suffix of the input's
        /// shape (`Error::InvalidArgument`), a weight of another shape or dtype,
        /// a negative or non-finite `eps`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![3.0, 4.0, 1.0, 1.0], &[2, 2])?);
        /// let w = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2])?);
        /// let y = x.try_rms_norm(&[2], Some(&w), Some(0.0))?;
        /// // Row 1: rms = sqrt(12.5); row 2: rms = 1.
        /// let r = 12.5f64.sqrt();
        /// let expect = [3.0 / r, 8.0 / r, 1.0, 2.0];
        /// for (a, b) in y.value().to_f64_vec().iter().zip(expect) {
        ///     assert!((a - b).abs() < 1e-12);
        /// }
        /// let grads = y.sum().backward()?;
        /// assert_eq!(grads.wrt(&w).shape(), &[2]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_rms_norm / rms_norm(
            &self,
            normalized_shape: &[usize],
            weight: Option<&Var<'g>>,
            eps: Option<f64>,
        ) -> Var<'g> {
            if normalized_shape.is_empty() {
                return Err(Error::invalid("rms_norm", "normalized_shape must not be empty"));
            }
            let op = RmsNorm { normalized_shape: Dims::from_slice(normalized_shape), eps };
            let mut inputs = vec![self];
            inputs.extend(weight);
            self.graph().record(op, &inputs)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::derivatives_agree;
    use crate::{gradcheck, jvpcheck, Graph};

    fn x() -> Tensor {
        sample(&[2, 3, 4], 1, 0.2, 1.0)
    }
    fn w() -> Tensor {
        Tensor::from_vec(vec![1.0, 0.5, -1.5, 2.0], &[4]).unwrap()
    }

    #[test]
    fn values_gradients_tangents() {
        let g = Graph::new();
        let (xv, wv) = (g.variable(x()), g.variable(w()));
        let y = xv
            .rms_norm(&[4], Some(&wv), Some(1e-5))
            .value()
            .to_f64_vec();
        let xs = x().to_f64_vec();
        for (r, row) in xs.chunks(4).enumerate() {
            let rstd = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / 4.0 + 1e-5).sqrt();
            for j in 0..4 {
                let e = row[j] * rstd * w().to_f64_vec()[j];
                assert!((y[r * 4 + j] - e).abs() < 1e-14);
            }
        }
        for shape in [&[4][..], &[3, 4]] {
            let last = shape.len() == 1;
            let ws = if last {
                w()
            } else {
                sample(&[3, 4], 4, 1.0, 0.5)
            };
            gradcheck(
                |v| v[0].try_rms_norm(shape, Some(&v[1]), Some(1e-5)),
                &[x(), ws.clone()],
            )
            .unwrap();
            jvpcheck(
                |v| v[0].try_rms_norm(shape, Some(&v[1]), Some(1e-5)),
                &[x(), ws.clone()],
            )
            .unwrap();
            gradcheck(|v| v[0].try_rms_norm(shape, None, None), &[x()]).unwrap();
            jvpcheck(|v| v[0].try_rms_norm(shape, None, None), &[x()]).unwrap();
        }
        let op = RmsNormBackward {
            normalized_shape: Dims::from_slice(&[4]),
            eps: Some(1e-5),
            has_weight: true,
        };
        let gr = x().map_f64(|v| (3.0 * v).sin());
        derivatives_agree(&op, &[gr, x(), w()]).unwrap();
    }

    #[test]
    fn default_eps_f32_and_errors() {
        let g = Graph::new();
        let xs = x();
        let a = g
            .variable(xs.to_dtype(DType::F32))
            .rms_norm(&[4], None, None);
        let b = g
            .variable(xs.clone())
            .rms_norm(&[4], None, Some(f32::EPSILON as f64));
        assert!(a
            .value()
            .to_dtype(DType::F64)
            .allclose(b.value(), 1e-6, 1e-6));
        let x64 = g.variable(xs);
        assert!(x64.try_rms_norm(&[3], None, None).is_err());
        assert!(x64.try_rms_norm(&[], None, None).is_err());
        assert!(x64.try_rms_norm(&[4], None, Some(-1.0)).is_err());
        let w3 = g.variable(Tensor::ones(&[3], DType::F64).unwrap());
        assert!(matches!(
            x64.try_rms_norm(&[4], Some(&w3), None),
            Err(Error::ShapeMismatch { .. })
        ));
        let via = g.apply("rms_norm", &[&x64]).unwrap();
        assert!(via
            .value()
            .allclose(x64.rms_norm(&[4], None, None).value(), 0.0, 0.0));
    }
}

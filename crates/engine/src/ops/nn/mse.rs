//! `mse_loss` and its fused backward op `mse_loss_backward` (itself
//! differentiable).
//!
//! Prediction and target must have the same shape (PyTorch broadcasts here
//! with a warning; a silent `[N, 1]` against `[N]` broadcast is a classic
//! bug, so retrograd makes it an error). Both operands are differentiable.

use crate::base::fallible::fallible;
use crate::ops::declare_op;
use smallvec::smallvec;

use super::batch_norm::sample;
use super::support::{
    batch_elementwise_loss, batch_elementwise_loss_backward, check_grad, check_same, grad_of_g,
    reduce, reduction_scale, Reduction,
};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, GradInputs, OpAttributes};
use crate::kernels::nn::pointwise as kernel;
use crate::ops::{Node, OpFacts, StructuredOp};
use crate::tensor::{Dims, Tensor};

/// Mean squared error `(a - b)^2`, reduced. The registry holds it with `mean`.
#[derive(Clone, Copy, Debug, Default)]
pub struct MseLoss {
    /// How the squared errors combine.
    pub reduction: Reduction,
}

/// `scale g (a - b)` with `scale = 2` (or `2 / n` for a mean): the gradient
/// of [`MseLoss`] with respect to `a`. Inputs: `g`, `a`, `b`.
#[derive(Clone, Copy, Debug, Default)]
pub struct MseLossBackward {
    /// The reduction of the loss this is the gradient of.
    pub reduction: Reduction,
}

impl StructuredOp for MseLoss {
    declare_op!("mse_loss"(input, target));
    fn attributes(&self) -> OpAttributes {
        OpAttributes::new().str("reduction", self.reduction.as_str())
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let (a, b) = (x[0], x[1]);
        check_same(Self::NAME, a, b)?;
        crate::with_dtype!(Self::NAME, a.dtype(), T => {
            let (xa, xb) = (a.as_slice_of::<T>(), b.as_slice_of::<T>());
            Ok(match self.reduction {
                Reduction::None => Tensor::from_exact_iter(
                    Dims::from_slice(a.shape()),
                    xa.iter().zip(xb).map(|(&x, &y)| (x - y) * (x - y)),
                ),
                r => {
                    let s = kernel::squared_error_sum(xa, xb) * reduction_scale(r, xa.len());
                    Tensor::scalar_of(s, a.dtype())
                }
            })
        })
    }
    fn grads<'g>(&self, g: &Var<'g>, n: Node<'_, 'g>) -> Result<GradInputs<'g>> {
        let (a, b) = (n.x(0), n.x(1));
        let op = MseLossBackward {
            reduction: self.reduction,
        };
        let da = g.graph().record(op, &[g, a, b])?;
        let db = b.requires_grad().then(|| -&da);
        Ok(smallvec![a.requires_grad().then_some(da), db])
    }
    fn tangent<'g>(&self, i: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        // 2 (a - b) (t_a - t_b), reduced.
        let d = if i == 0 { t.clone() } else { -t };
        let diff = n.x(0).try_sub(n.x(1))?;
        Ok(reduce(diff.try_mul(&d)?.mul_scalar(2.0), self.reduction))
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let unreduced = MseLoss {
            reduction: Reduction::None,
        };
        batch_elementwise_loss(&unreduced, self.reduction, x, ctx)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            sample_inputs: Some(|seed| {
                vec![
                    sample(&[2, 3], seed, 0.2, 1.0),
                    sample(&[2, 3], seed + 4, 0.0, 0.7),
                ]
            }),
            ..OpFacts::opaque(self.arity())
        }
    }
}

impl StructuredOp for MseLossBackward {
    declare_op!("mse_loss_backward"(grad, input, target), linear[0]);
    fn attributes(&self) -> OpAttributes {
        OpAttributes::new().str("reduction", self.reduction.as_str())
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let (g, a, b) = (x[0], x[1], x[2]);
        check_same(Self::NAME, a, b)?;
        check_grad(Self::NAME, g, a)?;
        let scale = 2.0 * reduction_scale(self.reduction, a.numel());
        crate::with_dtype!(Self::NAME, a.dtype(), T => {
            let (gs, xa, xb) = (g.as_slice_of::<T>(), a.as_slice_of::<T>(), b.as_slice_of::<T>());
            Ok(Tensor::build::<T>(Dims::from_slice(a.shape()), |out| kernel::squared_error_backward(gs, xa, xb, scale, out)))
        })
    }
    fn grads<'g>(&self, g2: &Var<'g>, n: Node<'_, 'g>) -> Result<GradInputs<'g>> {
        let (g, a, b) = (n.x(0), n.x(1), n.x(2));
        let k = self.scale(a);
        let dg = g
            .requires_grad()
            .then(|| grad_of_g(g2.try_mul(&a.try_sub(b)?)?.mul_scalar(k), g))
            .transpose()?;
        let da = (a.requires_grad() || b.requires_grad())
            .then(|| Ok::<_, Error>(g2.try_mul(g)?.mul_scalar(k)))
            .transpose()?;
        let db = b.requires_grad().then(|| da.as_ref().map(|d| -d)).flatten();
        Ok(smallvec![dg, da.filter(|_| a.requires_grad()), db])
    }
    fn tangent<'g>(&self, i: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let k = self.scale(n.x(1));
        Ok(n.x(0).try_mul(t)?.mul_scalar(if i == 1 { k } else { -k }))
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let unreduced = MseLossBackward {
            reduction: Reduction::None,
        };
        batch_elementwise_loss_backward(&unreduced, self.reduction, x, ctx)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            sample_inputs: Some(|seed| {
                vec![
                    sample(&[], seed + 2, 0.5, 0.3),
                    sample(&[2, 3], seed, 0.2, 1.0),
                    sample(&[2, 3], seed + 4, 0.0, 0.7),
                ]
            }),
            ..OpFacts::opaque(self.arity())
        }
    }
}

impl MseLossBackward {
    /// `2` (or `2 / n` for a mean): the factor on `g (a - b)`.
    fn scale(&self, a: &Var<'_>) -> f64 {
        2.0 * reduction_scale(self.reduction, a.value().numel())
    }
}

register_defaults!(MseLoss, MseLossBackward);

impl<'g> Var<'g> {
    fallible! {
        /// Mean squared error against `target` (same shape and dtype), averaged:
        /// PyTorch's `F.mse_loss`. Differentiable in both operands.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let pred = g.variable(Tensor::from_vec(vec![1.0, 2.0, 4.0], &[3])?);
        /// let target = g.constant(Tensor::from_vec(vec![1.0, 0.0, 1.0], &[3])?);
        /// let loss = pred.try_mse_loss(&target)?;
        /// assert_eq!(loss.value().try_item()?, 13.0 / 3.0);
        /// assert_eq!(loss.backward()?.wrt(&pred).to_f64_vec(), vec![0.0, 4.0 / 3.0, 2.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_mse_loss / mse_loss(&self, target: &Var<'g>) -> Var<'g> {
            self.try_mse_loss_with(target, Reduction::Mean)
        }
    }

    /// Squared error against `target` with the given reduction.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor, ops::nn::Reduction};
    /// let g = Graph::new();
    /// let pred = g.variable(Tensor::from_vec(vec![1.0f32, 3.0], &[2])?);
    /// let target = g.constant(Tensor::from_vec(vec![0.0f32, 1.0], &[2])?);
    /// assert_eq!(pred.try_mse_loss_with(&target, Reduction::None)?.value().to_vec::<f32>()?, vec![1.0, 4.0]);
    /// assert_eq!(pred.try_mse_loss_with(&target, Reduction::Sum)?.value().try_item()?, 5.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    pub fn try_mse_loss_with(&self, target: &Var<'g>, reduction: Reduction) -> Result<Var<'g>> {
        self.graph().record(MseLoss { reduction }, &[self, target])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::derivatives_agree;
    use crate::{gradcheck, jvpcheck, DType, Graph};

    use crate::tensor::test_util::tensor as t;
    fn x() -> Tensor {
        t(&[0.5, -1.0, 2.0, 1.5, 0.3, -0.7], &[2, 3])
    }
    fn y() -> Tensor {
        t(&[1.0, 0.0, 0.3, 0.0, 1.0, 0.6], &[2, 3])
    }
    const REDUCTIONS: [Reduction; 3] = [Reduction::Mean, Reduction::Sum, Reduction::None];

    #[test]
    fn mse_values_gradients_tangents() {
        let g = Graph::new();
        let a = g.variable(t(&[1.0, 2.0, 4.0], &[3]));
        let b = g.variable(t(&[1.0, 0.0, 1.0], &[3]));
        assert_eq!(a.mse_loss(&b).value().item(), 13.0 / 3.0);
        assert_eq!(
            a.try_mse_loss_with(&b, Reduction::Sum)
                .unwrap()
                .value()
                .item(),
            13.0
        );
        let none = a.try_mse_loss_with(&b, Reduction::None).unwrap();
        assert_eq!(none.value().to_f64_vec(), vec![0.0, 4.0, 9.0]);
        let grads = a.mse_loss(&b).backward().unwrap();
        assert_eq!(grads.wrt(&b).to_f64_vec(), vec![0.0, -4.0 / 3.0, -2.0]);
        for r in REDUCTIONS {
            gradcheck(|v| v[0].try_mse_loss_with(&v[1], r), &[x(), y()]).unwrap();
            jvpcheck(|v| v[0].try_mse_loss_with(&v[1], r), &[x(), y()]).unwrap();
            let op = MseLossBackward { reduction: r };
            let gr = if r == Reduction::None {
                y().map_f64(|v| v - 0.4)
            } else {
                Tensor::scalar(0.8)
            };
            derivatives_agree(&op, &[gr, x(), y()]).unwrap();
        }
        // Two consumers: the prediction is also its own target's source.
        gradcheck(|v| v[0].try_mse_loss(&(&v[0] * &v[0])), &[x()]).unwrap();
    }

    #[test]
    fn errors_and_registry() {
        let g = Graph::new();
        let a = g.variable(x());
        let short = g.constant(t(&[1.0, 2.0, 3.0], &[3]));
        assert!(matches!(
            a.try_mse_loss(&short),
            Err(Error::ShapeMismatch { op: "mse_loss", .. })
        ));
        let f32s = g.constant(x().to_dtype(DType::F32));
        assert!(matches!(
            a.try_mse_loss(&f32s),
            Err(Error::DTypeMismatch { .. })
        ));
        let b = g.constant(y());
        assert_eq!(
            g.apply("mse_loss", &[&a, &b]).unwrap().value(),
            a.mse_loss(&b).value()
        );
    }
}

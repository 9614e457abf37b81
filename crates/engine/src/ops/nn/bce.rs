//! `binary_cross_entropy_with_logits` (with optional `pos_weight`) and its
//! fused backward op `binary_cross_entropy_with_logits_backward` (itself
//! differentiable).
//!
//! Computed as `(1 - y) x + L (max(-x, 0) + ln(1 + e^-|x|))`, finite for any
//! finite logits. Logits and targets must have the same shape (no silent
//! broadcasting); both are differentiable, `pos_weight` is a constant.

use crate::base::fallible::fallible;
use smallvec::smallvec;

use super::batch_norm::sample;
use super::support::{
    batch_elementwise_loss, batch_elementwise_loss_backward, check_grad, check_same, grad_of_g,
    reduce, reduction_scale, Reduction,
};
use crate::base::error::{check_dtypes, Result};
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, GradInputs, OpAttributes};
use crate::kernels::nn::pointwise as kernel;
use crate::ops::rule::{Traced, UnaryRule};
use crate::ops::unary::Sigmoid;
use crate::ops::{Node, OpFacts, StructuredOp};
use crate::tensor::{Dims, Tensor};

/// Binary cross-entropy of logits `x` against targets `y` in `[0, 1]`:
/// `-(pos_weight y log σ(x) + (1 - y) log(1 - σ(x)))`, computed stably, reduced.
/// The registry holds it with `mean` and no `pos_weight`.
#[derive(Clone, Debug, Default)]
pub struct BinaryCrossEntropyWithLogits {
    /// How the elementwise losses combine.
    pub reduction: Reduction,
    /// Optional weight of positive examples, broadcastable to `x` (typically `[C]`).
    pub pos_weight: Option<Tensor>,
}

/// `scale g (L σ(x) - pos_weight y)` with `L = 1 + (pos_weight - 1) y`: the
/// gradient of [`BinaryCrossEntropyWithLogits`] with respect to `x`.
/// Inputs: `g`, `x`, `y`.
#[derive(Clone, Debug, Default)]
pub struct BinaryCrossEntropyWithLogitsBackward {
    /// The reduction of the loss this is the gradient of.
    pub reduction: Reduction,
    /// The loss's `pos_weight`.
    pub pos_weight: Option<Tensor>,
}

const BCE: &str = "binary_cross_entropy_with_logits";

/// A `pos_weight` is a tensor held in the op, which a compiled step would reuse.
fn pos_weight_holds(pw: &Option<Tensor>) -> crate::Holds {
    match pw {
        Some(_) => crate::Holds::data(
            "a pos_weight tensor, which it cannot take as an input yet \
             (run this step eagerly, or drop pos_weight)",
        ),
        None => crate::Holds::Settings,
    }
}

/// `pos_weight` broadcast to `x`'s shape, checked.
fn broadcast_pos_weight(
    op: &'static str,
    pw: &Option<Tensor>,
    x: &Tensor,
) -> Result<Option<Tensor>> {
    pw.as_ref()
        .map(|p| {
            check_dtypes(op, x.dtype(), p.dtype())?;
            crate::kernels::broadcast_to(op, p, x.shape())
        })
        .transpose()
}

/// `L = 1 + (pos_weight - 1) y` and `pos_weight` as constants (`None` without one).
fn pos_terms<'g>(pw: &Option<Tensor>, y: &Var<'g>) -> Result<Option<(Var<'g>, Var<'g>)>> {
    pw.as_ref()
        .map(|p| {
            let p = y.graph().constant(p.clone());
            Ok((p.sub_scalar(1.0).try_mul(y)?.add_scalar(1.0), p))
        })
        .transpose()
}

impl StructuredOp for BinaryCrossEntropyWithLogits {
    const NAME: &'static str = BCE;
    const INPUTS: &'static [&'static str] = &["input", "target"];
    fn holds(&self) -> crate::Holds {
        pos_weight_holds(&self.pos_weight)
    }
    fn attributes(&self) -> OpAttributes {
        attributes(self.reduction, &self.pos_weight)
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let (x, y) = (x[0], x[1]);
        check_same(BCE, x, y)?;
        let pw = broadcast_pos_weight(BCE, &self.pos_weight, x)?;
        crate::with_dtype!(BCE, x.dtype(), T => {
            let pws = pw.as_ref().map(|p| p.as_slice_of::<T>());
            let (xs, ys) = (x.as_slice_of::<T>(), y.as_slice_of::<T>());
            let per = Tensor::build::<T>(Dims::from_slice(x.shape()), |out| kernel::bce_with_logits(xs, ys, pws, out));
            Ok(match self.reduction {
                Reduction::None => per,
                r => {
                    let s = crate::kernels::sum_all(&per.to_dtype(crate::DType::F64))?.try_item()?;
                    Tensor::scalar_of(s * reduction_scale(r, per.numel()), x.dtype())
                }
            })
        })
    }
    fn grad<'g>(&self, i: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (x, y) = (n.x(0), n.x(1));
        if i == 0 {
            let op = self.backward_op(self.reduction);
            return g.graph().record(op, &[g, x, y]);
        }
        let k = reduction_scale(self.reduction, x.value().numel());
        Ok(self.target_grad(x)?.try_mul(g)?.mul_scalar(k))
    }
    fn tangent<'g>(&self, i: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (x, y) = (n.x(0), n.x(1));
        let per_element = if i == 0 {
            let one = x.scalar_like(1.0);
            let unit = self.backward_op(Reduction::None);
            x.graph().record(unit, &[&one, x, y])?.try_mul(t)?
        } else {
            self.target_grad(x)?.try_mul(t)?
        };
        Ok(reduce(per_element, self.reduction))
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let unreduced = BinaryCrossEntropyWithLogits {
            reduction: Reduction::None,
            pos_weight: self.pos_weight.clone(),
        };
        batch_elementwise_loss(&unreduced, self.reduction, x, ctx)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            sample_inputs: Some(bce_sample),
            ..OpFacts::opaque(self.arity())
        }
    }
}

/// Logits and targets in `[0.1, 0.9]`, `[2, 3]` each.
fn bce_sample(seed: u64) -> Vec<Tensor> {
    vec![
        sample(&[2, 3], seed, 0.2, 2.0),
        sample(&[2, 3], seed + 4, 0.5, 0.4),
    ]
}

/// The settings of either op: the reduction, and `pos_weight` if any.
fn attributes(reduction: Reduction, pos_weight: &Option<Tensor>) -> OpAttributes {
    OpAttributes::new()
        .str("reduction", reduction.as_str())
        .tensor_opt("pos_weight", pos_weight.as_ref())
}

impl BinaryCrossEntropyWithLogits {
    /// The elementwise derivative with respect to the target:
    /// `(pos_weight - 1) softplus(-x) - x`, with `softplus(-x)` the loss at `y = 0` minus `x`.
    fn target_grad<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let Some(pw) = &self.pos_weight else {
            return Ok(-x);
        };
        let zeros = x.graph().constant(x.value().zeros_like());
        let plain = BinaryCrossEntropyWithLogits::default_with(Reduction::None);
        let softplus_neg = x.graph().record(plain, &[x, &zeros])?.try_sub(x)?;
        let p = x.graph().constant(pw.clone());
        p.sub_scalar(1.0).try_mul(&softplus_neg)?.try_sub(x)
    }

    fn default_with(reduction: Reduction) -> Self {
        BinaryCrossEntropyWithLogits {
            reduction,
            pos_weight: None,
        }
    }

    /// The gradient op with respect to `x`, for `reduction`.
    fn backward_op(&self, reduction: Reduction) -> BinaryCrossEntropyWithLogitsBackward {
        BinaryCrossEntropyWithLogitsBackward {
            reduction,
            pos_weight: self.pos_weight.clone(),
        }
    }
}

impl StructuredOp for BinaryCrossEntropyWithLogitsBackward {
    const NAME: &'static str = "binary_cross_entropy_with_logits_backward";
    const INPUTS: &'static [&'static str] = &["grad", "input", "target"];
    fn holds(&self) -> crate::Holds {
        pos_weight_holds(&self.pos_weight)
    }
    const LINEAR: &'static [usize] = &[0];
    fn attributes(&self) -> OpAttributes {
        attributes(self.reduction, &self.pos_weight)
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let (g, x, y) = (x[0], x[1], x[2]);
        check_same(Self::NAME, x, y)?;
        check_grad(Self::NAME, g, x)?;
        let pw = broadcast_pos_weight(Self::NAME, &self.pos_weight, x)?;
        let scale = reduction_scale(self.reduction, x.numel());
        crate::with_dtype!(Self::NAME, x.dtype(), T => {
            let (gs, xs, ys) = (g.as_slice_of::<T>(), x.as_slice_of::<T>(), y.as_slice_of::<T>());
            let pws = pw.as_ref().map(|p| p.as_slice_of::<T>());
            Ok(Tensor::build::<T>(Dims::from_slice(x.shape()), |out| kernel::bce_with_logits_backward(gs, xs, ys, pws, scale, out)))
        })
    }
    fn grads<'g>(&self, g2: &Var<'g>, n: Node<'_, 'g>) -> Result<GradInputs<'g>> {
        // out = k g (L σ(x) - p y): linear in g; d/dx = k g L σ'(x); d/dy = k g ((p - 1) σ(x) - p).
        let (g, x, y) = (n.x(0), n.x(1), n.x(2));
        let k = reduction_scale(self.reduction, x.value().numel());
        let dg = g
            .requires_grad()
            .then(|| grad_of_g(x.graph().record(self.clone(), &[g2, x, y])?, g))
            .transpose()?;
        let kg = g2.try_mul(g)?.mul_scalar(k);
        let terms = pos_terms(&self.pos_weight, y)?;
        let dx = x
            .requires_grad()
            .then(|| match &terms {
                Some((l, _)) => sigmoid_backward(&kg.try_mul(l)?, &x.sigmoid()),
                None => sigmoid_backward(&kg, &x.sigmoid()),
            })
            .transpose()?;
        let dy = y
            .requires_grad()
            .then(|| match &terms {
                Some((_, p)) => kg.try_mul(&p.sub_scalar(1.0).try_mul(&x.sigmoid())?.try_sub(p)?),
                None => Ok(-&kg),
            })
            .transpose()?;
        Ok(smallvec![dg, dx, dy])
    }
    fn tangent<'g>(&self, i: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (g, x, y) = (n.x(0), n.x(1), n.x(2));
        let k = reduction_scale(self.reduction, x.value().numel());
        let terms = pos_terms(&self.pos_weight, y)?;
        if i == 1 {
            let h = match &terms {
                Some((l, _)) => g.try_mul(l)?.try_mul(t)?,
                None => g.try_mul(t)?,
            };
            return Ok(sigmoid_backward(&h, &x.sigmoid())?.mul_scalar(k));
        }
        let d = match &terms {
            Some((_, p)) => p.sub_scalar(1.0).try_mul(&x.sigmoid())?.try_sub(p)?,
            None => t.scalar_like(-1.0),
        };
        Ok(g.try_mul(&d)?.try_mul(t)?.mul_scalar(k))
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let unreduced = BinaryCrossEntropyWithLogitsBackward {
            reduction: Reduction::None,
            pos_weight: self.pos_weight.clone(),
        };
        batch_elementwise_loss_backward(&unreduced, self.reduction, x, ctx)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            sample_inputs: Some(|seed| {
                let mut inputs = bce_sample(seed);
                inputs.insert(0, sample(&[], seed + 2, 0.5, 0.3));
                inputs
            }),
            ..OpFacts::opaque(self.arity())
        }
    }
}

register_defaults!(
    BinaryCrossEntropyWithLogits,
    BinaryCrossEntropyWithLogitsBackward
);

impl<'g> Var<'g> {
    fallible! {
        /// Binary cross-entropy of these logits against `target` probabilities
        /// (same shape and dtype), averaged: PyTorch's
        /// `F.binary_cross_entropy_with_logits`. Stable for any finite logits.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let logits = g.variable(Tensor::from_vec(vec![0.0, 1e4, -1e4], &[3])?);
        /// let target = g.constant(Tensor::from_vec(vec![1.0, 1.0, 1.0], &[3])?);
        /// let loss = logits.try_binary_cross_entropy_with_logits(&target)?;
        /// // (ln 2 + 0 + 1e4) / 3
        /// assert!((loss.value().try_item()? - (2f64.ln() + 1e4) / 3.0).abs() < 1e-9);
        /// let grad = loss.backward()?.wrt(&logits).to_f64_vec();
        /// assert_eq!(grad, vec![-0.5 / 3.0, 0.0, -1.0 / 3.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_binary_cross_entropy_with_logits / binary_cross_entropy_with_logits(&self, target: &Var<'g>) -> Var<'g> {
            self.try_binary_cross_entropy_with_logits_with(target, Reduction::Mean, None)
        }
    }

    /// Binary cross-entropy with logits, a reduction, and an optional
    /// `pos_weight` (broadcastable to the logits, e.g. one per class) that
    /// scales the loss of positive targets.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor, ops::nn::Reduction};
    /// let g = Graph::new();
    /// let logits = g.variable(Tensor::from_vec(vec![0.0, 0.0], &[1, 2])?);
    /// let target = g.constant(Tensor::from_vec(vec![1.0, 0.0], &[1, 2])?);
    /// let pw = Tensor::from_vec(vec![3.0, 3.0], &[2])?;
    /// let loss = logits.try_binary_cross_entropy_with_logits_with(&target, Reduction::None, Some(pw))?;
    /// let v = loss.value().to_f64_vec();
    /// assert!((v[0] - 3.0 * 2f64.ln()).abs() < 1e-15 && (v[1] - 2f64.ln()).abs() < 1e-15);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    pub fn try_binary_cross_entropy_with_logits_with(
        &self,
        target: &Var<'g>,
        reduction: Reduction,
        pos_weight: Option<Tensor>,
    ) -> Result<Var<'g>> {
        let op = BinaryCrossEntropyWithLogits {
            reduction,
            pos_weight,
        };
        self.graph().record(op, &[self, target])
    }
}

/// `h σ'` given `σ = sigmoid(x)`: the sigmoid's own rule, recorded.
fn sigmoid_backward<'g>(h: &Var<'g>, sigmoid: &Var<'g>) -> Result<Var<'g>> {
    Sigmoid
        .grad(&Traced::of(h), &Traced::of(sigmoid))
        .into_result()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::derivatives_agree;
    use crate::{gradcheck, jvpcheck, DType, Error, Graph};

    use crate::tensor::test_util::tensor as t;
    fn x() -> Tensor {
        t(&[0.5, -1.0, 2.0, 1.5, 0.3, -0.7], &[2, 3])
    }
    fn y() -> Tensor {
        t(&[1.0, 0.0, 0.3, 0.0, 1.0, 0.6], &[2, 3])
    }
    fn pw() -> Tensor {
        t(&[2.0, 0.5, 1.0], &[3])
    }
    const REDUCTIONS: [Reduction; 3] = [Reduction::Mean, Reduction::Sum, Reduction::None];

    // Expected values from NumPy: -(pw * y * log_sigmoid(x) + (1 - y) * log_sigmoid(-x))
    // with log_sigmoid(z) = -logaddexp(0, -z).
    #[test]
    fn bce_values() {
        let g = Graph::new();
        let (xv, yv) = (g.variable(x()), g.constant(y()));
        let mean = xv.binary_cross_entropy_with_logits(&yv).value().item();
        assert!((mean - 0.8988702090130066).abs() < 1e-15);
        let sum = xv
            .try_binary_cross_entropy_with_logits_with(&yv, Reduction::Sum, None)
            .unwrap();
        assert!((sum.value().item() - 5.39322125407804).abs() < 1e-14);
        let none = xv
            .try_binary_cross_entropy_with_logits_with(&yv, Reduction::None, Some(pw()))
            .unwrap();
        let expect = t(
            &[
                0.9481539683602134,
                0.31326168751822286,
                1.5269280110429726,
                1.7014132779827524,
                0.27717762223426357,
                0.8231860488854579,
            ],
            &[2, 3],
        );
        assert!(none.value().allclose(&expect, 1e-15, 0.0));
        let mean_pw = xv
            .try_binary_cross_entropy_with_logits_with(&yv, Reduction::Mean, Some(pw()))
            .unwrap();
        assert!((mean_pw.value().item() - 0.9316867693373139).abs() < 1e-15);
    }

    #[test]
    fn bce_gradients_and_tangents() {
        for r in REDUCTIONS {
            for p in [None, Some(pw())] {
                gradcheck(
                    |v| v[0].try_binary_cross_entropy_with_logits_with(&v[1], r, p.clone()),
                    &[x(), y()],
                )
                .unwrap();
                jvpcheck(
                    |v| v[0].try_binary_cross_entropy_with_logits_with(&v[1], r, p.clone()),
                    &[x(), y()],
                )
                .unwrap();
                let op = BinaryCrossEntropyWithLogitsBackward {
                    reduction: r,
                    pos_weight: p.clone(),
                };
                let gr = if r == Reduction::None {
                    y().map_f64(|v| v - 0.4)
                } else {
                    Tensor::scalar(0.8)
                };
                derivatives_agree(&op, &[gr, x(), y()]).unwrap();
            }
        }
        gradcheck(
            |v| v[0].try_binary_cross_entropy_with_logits(&v[0].sigmoid()),
            &[x()],
        )
        .unwrap();
    }

    #[test]
    fn bce_is_stable_at_extremes() {
        for dtype in [DType::F32, DType::F64] {
            let g = Graph::new();
            let xv =
                g.variable(Tensor::from_f64_slice(&[1e4, -1e4, 1e4, -1e4], &[4], dtype).unwrap());
            let yv =
                g.variable(Tensor::from_f64_slice(&[1.0, 0.0, 0.0, 1.0], &[4], dtype).unwrap());
            let p = Tensor::from_f64_slice(&[3.0], &[1], dtype).unwrap();
            let l = xv
                .try_binary_cross_entropy_with_logits_with(&yv, Reduction::None, Some(p))
                .unwrap();
            assert_eq!(l.value().to_f64_vec(), vec![0.0, 0.0, 1e4, 3e4]);
            let grads = l.sum().backward().unwrap();
            assert_eq!(grads.wrt(&xv).to_f64_vec(), vec![0.0, 0.0, 1.0, -3.0]);
            assert!(grads.wrt(&yv).all_finite());
        }
    }

    #[test]
    fn errors_and_registry() {
        let g = Graph::new();
        let a = g.variable(x());
        let short = g.constant(t(&[1.0, 2.0, 3.0], &[3]));
        assert!(matches!(
            a.try_binary_cross_entropy_with_logits(&short),
            Err(Error::ShapeMismatch {
                op: "binary_cross_entropy_with_logits",
                ..
            })
        ));
        let bad_pw = Some(t(&[1.0, 2.0], &[2]));
        assert!(matches!(
            a.try_binary_cross_entropy_with_logits_with(&g.constant(y()), Reduction::Mean, bad_pw),
            Err(Error::ShapeMismatch { .. })
        ));
        let pw32 = Some(pw().to_dtype(DType::F32));
        assert!(matches!(
            a.try_binary_cross_entropy_with_logits_with(&g.constant(y()), Reduction::Mean, pw32),
            Err(Error::DTypeMismatch { .. })
        ));
        let b = g.constant(y());
        assert_eq!(
            g.apply("binary_cross_entropy_with_logits", &[&a, &b])
                .unwrap()
                .value(),
            a.binary_cross_entropy_with_logits(&b).value()
        );
    }
}

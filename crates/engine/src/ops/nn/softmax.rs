//! `softmax` and `log_softmax` along any axis, with their fused backward
//! ops `softmax_backward` and `log_softmax_backward` (each itself
//! differentiable, so gradients of gradients work).
//!
//! Forward and backward are one fused kernel each (`kernels::nn::softmax`):
//! lanes are shifted by their maximum, so ±1e4 logits stay exact and finite.
//! Backward uses the saved output `y`: `softmax`: `y (g - Σ g y)`;
//! `log_softmax`: `g - e^y Σ g`. The softmax Jacobian is symmetric, so its
//! tangent rule is its backward applied to the tangent.

use crate::base::fallible::fallible;
use smallvec::smallvec;

use std::sync::Arc;

use super::support::{expand_axis, resolve_axis, sum_axis};
use crate::base::error::{check_dtypes, Error, Result};
use crate::core::graph::Var;
use crate::core::{sample_tensor, BatchContext, Batched, GradInputs};
use crate::kernels::nn::softmax as kernel;
use crate::ops::batching::{example_axis, materialize};
use crate::ops::{Node, OpFacts, StructuredOp};
use crate::tensor::Tensor;

/// A softmax-family op: its struct, holding the `axis` it works along
/// (negative counts from the end; the registry's instance uses -1, the
/// last), and its [`StructuredOp`] impl with that one setting, its
/// batching rule ([`along_examples`]) and facts (`example_axis`, the axis
/// of the instance to try, and sample inputs), the items in braces giving
/// the rest.
macro_rules! axis_op {
    (
        $(#[$doc:meta])* $op:ident = $name:literal($($input:ident),*; $example_axis:expr, $sample:expr),
        $(#[$axis_doc:meta])* { $($rules:tt)* }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $op {
            $(#[$axis_doc])*
            pub axis: isize,
        }

        impl Default for $op {
            fn default() -> Self {
                $op { axis: -1 }
            }
        }

        impl StructuredOp for $op {
            crate::ops::declare_op!($name($($input),*), settings(int axis));
            $($rules)*
            fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
                along_examples(self.axis, x, ctx, |axis, v| v[0].graph().record($op { axis }, v))
            }
            fn facts(&self) -> OpFacts {
                OpFacts {
                    tangent: true,
                    second_derivative: true,
                    example: Some(Arc::new($op { axis: $example_axis })),
                    sample_inputs: Some($sample),
                    ..OpFacts::opaque(Some(Self::INPUTS.len()))
                }
            }
        }
    };
}

/// The batching rule of the softmax family: the op (`record`, given its
/// axis and inputs) on every input with the batch, along the example's
/// `axis` moved past the batch axis. A 0-d example, whose one axis the op
/// makes up, gets a unit axis for the op and loses it after.
fn along_examples<'g>(
    axis: isize,
    inputs: &[Batched<'g>],
    ctx: &BatchContext,
    record: impl Fn(isize, &[&Var<'g>]) -> Result<Var<'g>>,
) -> Result<Batched<'g>> {
    let rank = inputs[0].example_rank();
    let values = inputs
        .iter()
        .map(|x| {
            let v = materialize(x, ctx)?;
            if rank == 0 {
                v.try_unsqueeze(1)
            } else {
                Ok(v)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&Var<'g>> = values.iter().collect();
    let out = record(example_axis(axis, rank.max(1)), &refs)?;
    if rank == 0 {
        return Ok(Batched::along_batch(out.reshape_dims(&[ctx.size])?));
    }
    Ok(Batched::along_batch(out))
}

/// The sample input of `softmax` and `log_softmax`: logits of shape `[2, 3, 2]`.
fn sample_logits(seed: u64) -> Vec<Tensor> {
    vec![sample_tensor(&[2, 3, 2], seed, 1.5)]
}

/// The sample inputs of the backward ops: a gradient and an output of
/// shape `[2, 3, 2]`.
fn sample_grad_output(seed: u64) -> Vec<Tensor> {
    vec![
        sample_tensor(&[2, 3, 2], seed + 3, 1.0),
        sample_tensor(&[2, 3, 2], seed, 0.5),
    ]
}

axis_op! {
    /// `softmax(x)` along `axis` (negative counts from the end). The registry
    /// holds it with `axis = -1`.
    Softmax = "softmax"(input; 1, sample_logits),
    /// The axis the probabilities sum to 1 along.
    {
        fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
            kernel::softmax(x[0], resolve_axis(Self::NAME, self.axis, x[0].rank())?, false)
        }
        fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            self.tangent(0, g, n)
        }
        fn tangent<'g>(&self, _: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            // The Jacobian is symmetric: the tangent is the backward applied to it.
            let op = SoftmaxBackward { axis: self.axis };
            t.graph().record(op, &[t, n.output])
        }
    }
}

axis_op! {
    /// `log_softmax(x) = x - logsumexp(x)` along `axis`. The registry holds it with `axis = -1`.
    LogSoftmax = "log_softmax"(input; -1, sample_logits),
    /// The axis normalised over.
    {
        fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
            kernel::softmax(x[0], resolve_axis(Self::NAME, self.axis, x[0].rank())?, true)
        }
        fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            let op = LogSoftmaxBackward { axis: self.axis };
            g.graph().record(op, &[g, n.output])
        }
        fn tangent<'g>(&self, _: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            // J t = t - Σ softmax * t (J is not symmetric here).
            let y = n.output;
            let axis = resolve_axis(Self::NAME, self.axis, y.shape().len())?;
            t.try_sub(&sum_axis(&y.exp().try_mul(t)?, axis, true)?)
        }
    }
}

axis_op! {
    /// `y * (g - Σ_axis g y)`: the backward of softmax given its output `y`.
    SoftmaxBackward = "softmax_backward"(grad, output; 0, sample_grad_output),
    /// The softmax's axis.
    {
        const LINEAR: &'static [usize] = &[0];
        fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
            backward_forward(Self::NAME, self.axis, x, kernel::softmax_backward)
        }
        fn grad<'g>(&self, i: usize, g2: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            // out = y g - y Σ(g y). d/dg: the same map applied to g2 (symmetric);
            // d/dy: g2 (g - Σ g y) - g Σ(g2 y).
            let (g, y) = (n.x(0), n.x(1));
            if i == 0 {
                return g.graph().record(*self, &[g2, y]);
            }
            let axis = resolve_axis(Self::NAME, self.axis, y.shape().len())?;
            let s = sum_axis(&g.try_mul(y)?, axis, true)?;
            let s2 = sum_axis(&g2.try_mul(y)?, axis, true)?;
            g2.try_mul(&g.try_sub(&s)?)?.try_sub(&g.try_mul(&s2)?)
        }
        fn tangent<'g>(&self, _: usize, ty: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            let (g, y) = (n.x(0), n.x(1));
            let axis = resolve_axis(Self::NAME, self.axis, y.shape().len())?;
            let s = sum_axis(&g.try_mul(y)?, axis, true)?;
            let st = sum_axis(&g.try_mul(ty)?, axis, true)?;
            ty.try_mul(&g.try_sub(&s)?)?.try_sub(&y.try_mul(&st)?)
        }
    }
}

axis_op! {
    /// `g - e^y Σ_axis g`: the backward of log-softmax given its output `y`.
    LogSoftmaxBackward = "log_softmax_backward"(grad, output; 1, sample_grad_output),
    /// The log-softmax's axis.
    {
        const LINEAR: &'static [usize] = &[0];
        fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
            backward_forward(Self::NAME, self.axis, x, kernel::log_softmax_backward)
        }
        fn grads<'g>(&self, g2: &Var<'g>, n: Node<'_, 'g>) -> Result<GradInputs<'g>> {
            // out = g - e^y Σ g. d/dg: g2 - Σ(g2 e^y); d/dy: -g2 e^y Σ g.
            let (g, y) = (n.x(0), n.x(1));
            let axis = resolve_axis(Self::NAME, self.axis, y.shape().len())?;
            let p = y.exp();
            let dg = g
                .requires_grad()
                .then(|| -> Result<Var<'g>> {
                    let s = sum_axis(&g2.try_mul(&p)?, axis, true)?;
                    g2.try_sub(&expand_axis(&s, axis, g2.shape())?)
                })
                .transpose()?;
            let dy = y
                .requires_grad()
                .then(|| Ok::<_, Error>(-(g2.try_mul(&p)?.try_mul(&sum_axis(g, axis, true)?)?)))
                .transpose()?;
            Ok(smallvec![dg, dy])
        }
        fn tangent<'g>(&self, _: usize, ty: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            let (g, y) = (n.x(0), n.x(1));
            let s = sum_axis(
                g,
                resolve_axis(Self::NAME, self.axis, y.shape().len())?,
                true,
            )?;
            Ok(-(y.exp().try_mul(ty)?.try_mul(&s)?))
        }
    }
}

/// A backward op's forward: its two inputs, the gradient `g` and the
/// output `y` (one shape, one dtype), checked, then `kernel` along `axis`.
fn backward_forward(
    op: &'static str,
    axis: isize,
    x: &[&Tensor],
    kernel: fn(&Tensor, &Tensor, usize) -> Result<Tensor>,
) -> Result<Tensor> {
    let (g, y) = (x[0], x[1]);
    check_dtypes(op, g.dtype(), y.dtype())?;
    if g.shape() != y.shape() {
        return Err(Error::shape_mismatch(op, g.shape(), y.shape()));
    }
    kernel(g, y, resolve_axis(op, axis, y.rank())?)
}

register_defaults!(Softmax, LogSoftmax, SoftmaxBackward, LogSoftmaxBackward);

impl<'g> Var<'g> {
    fallible! {
        /// Softmax along `axis` (negative counts from the end): `e^x / Σ e^x`,
        /// computed stably. An out-of-range axis is `Error::AxisOutOfRange`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![0.0, 3f64.ln(), 1e4, -1e4], &[2, 2])?);
        /// let p = x.try_softmax(-1)?;
        /// assert!(p.value().allclose(&Tensor::from_vec(vec![0.25, 0.75, 1.0, 0.0], &[2, 2])?, 1e-12, 0.0));
        /// assert!(x.try_softmax(2).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_softmax / softmax(&self, axis: isize) -> Var<'g> {
            self.graph().record(Softmax { axis }, &[self])
        }
    }

    fallible! {
        /// Log-softmax along `axis`: `x - log Σ e^x`, computed stably (finite
        /// for any finite input). An out-of-range axis is `Error::AxisOutOfRange`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1e4f32, -1e4], &[2])?);
        /// assert_eq!(x.try_log_softmax(0)?.value().to_vec::<f32>()?, vec![0.0, -2e4]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_log_softmax / log_softmax(&self, axis: isize) -> Var<'g> {
            self.graph().record(LogSoftmax { axis }, &[self])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::fixed;
    use crate::{gradcheck, jvpcheck, Graph};

    use crate::tensor::test_util::tensor as t;

    fn sample() -> Tensor {
        fixed(&[2, 3, 2])
    }

    #[test]
    fn forward_values() {
        // numpy: e = np.exp(x - x.max(1, keepdims=True)); e / e.sum(1, keepdims=True)
        let g = Graph::new();
        let x = g.variable(t(&[1.0, 2.0, 3.0, -1.0, 0.0, 1.0], &[2, 3]));
        let expect = [0.09003057317038046, 0.24472847105479764, 0.6652409557748219];
        let p = x.softmax(1).value().to_f64_vec();
        for (i, v) in p.iter().enumerate() {
            assert!((v - expect[i % 3]).abs() < 1e-15);
        }
        let lp = x.log_softmax(-1).value().to_f64_vec();
        assert!((lp[0] - (-2.4076059644443806)).abs() < 1e-15);
        // Along axis 0 of the same matrix, and a 0-d input.
        let p0 = x.softmax(0).value().to_f64_vec();
        assert!((p0[0] - 0.8807970779778823).abs() < 1e-15);
        let s = g.variable(Tensor::scalar(3.0));
        assert_eq!(s.softmax(0).value().item(), 1.0);
        assert_eq!(s.log_softmax(-1).value().item(), 0.0);
    }

    #[test]
    fn gradients_on_every_axis() {
        for axis in [0, 1, 2, -1] {
            gradcheck(|v| v[0].try_softmax(axis), &[sample()]).unwrap();
            gradcheck(|v| v[0].try_log_softmax(axis), &[sample()]).unwrap();
            jvpcheck(|v| v[0].try_softmax(axis), &[sample()]).unwrap();
            jvpcheck(|v| v[0].try_log_softmax(axis), &[sample()]).unwrap();
        }
        // Two consumers of one value.
        gradcheck(
            |v| Ok(&v[0].softmax(1) * &v[0] + v[0].log_softmax(0)),
            &[sample()],
        )
        .unwrap();
    }

    #[test]
    fn backward_helpers_are_differentiable() {
        let g = sample().map_f64(|v| v * 0.7 - 0.2);
        let y = Graph::new().no_grad(|| sample().map_f64(|v| v * 0.5));
        for axis in [1, -1, 0] {
            let sb = SoftmaxBackward { axis };
            let lb = LogSoftmaxBackward { axis };
            gradcheck(
                |v| v[0].graph().record(sb, &[&v[0], &v[1]]),
                &[g.clone(), y.clone()],
            )
            .unwrap();
            gradcheck(
                |v| v[0].graph().record(lb, &[&v[0], &v[1]]),
                &[g.clone(), y.clone()],
            )
            .unwrap();
            jvpcheck(
                |v| v[0].graph().record(sb, &[&v[0], &v[1]]),
                &[g.clone(), y.clone()],
            )
            .unwrap();
            jvpcheck(
                |v| v[0].graph().record(lb, &[&v[0], &v[1]]),
                &[g.clone(), y.clone()],
            )
            .unwrap();
        }
    }

    #[test]
    fn extreme_logits_have_finite_values_and_gradients() {
        let graph = Graph::new();
        for dtype in [crate::DType::F32, crate::DType::F64] {
            let x = graph.variable(
                Tensor::from_f64_slice(&[1e4, -1e4, 0.0, -1e4, 1e4, 1e4], &[2, 3], dtype).unwrap(),
            );
            let w = graph.constant(
                Tensor::from_f64_slice(&[1., 2., 3., 4., 5., 6.], &[2, 3], dtype).unwrap(),
            );
            for y in [x.softmax(1), x.log_softmax(1)] {
                assert!(y.value().all_finite());
                let grad = (&y * &w).sum().backward().unwrap().wrt(&x);
                assert!(grad.all_finite(), "{grad:?}");
            }
            let p = x.softmax(1).value().to_f64_vec();
            assert_eq!(p, vec![1.0, 0.0, 0.0, 0.0, 0.5, 0.5]);
        }
    }

    #[test]
    fn f32_and_f64_agree() {
        let x64 = sample();
        let x32 = x64.to_dtype(crate::DType::F32);
        let g = Graph::new();
        let (a, b) = (g.variable(x64), g.variable(x32));
        let (pa, pb) = (a.log_softmax(1), b.log_softmax(1));
        assert!(pb.value().allclose(pa.value(), 1e-6, 1e-6));
        let ga = (&pa * &pa).sum().backward().unwrap().wrt(&a);
        let gb = (&pb * &pb).sum().backward().unwrap().wrt(&b);
        assert!(gb.allclose(&ga, 1e-5, 1e-5));
    }

    #[test]
    fn errors() {
        let g = Graph::new();
        let x = g.variable(sample());
        assert!(matches!(
            x.try_softmax(3),
            Err(Error::AxisOutOfRange {
                op: "softmax",
                axis: 3,
                rank: 3
            })
        ));
        assert!(matches!(
            x.try_log_softmax(-4),
            Err(Error::AxisOutOfRange { .. })
        ));
        let y = g.variable(Tensor::from_vec(vec![1.0f32; 12], &[2, 3, 2]).unwrap());
        assert!(matches!(
            g.record(SoftmaxBackward { axis: -1 }, &[&x, &y]),
            Err(Error::DTypeMismatch { .. })
        ));
        // Through the registry, by PyTorch's names.
        let p = g.apply("softmax", &[&x]).unwrap();
        assert!(p.value().allclose(x.softmax(-1).value(), 0.0, 0.0));
        assert!(g.apply("log_softmax", &[&x]).is_ok());
    }
}

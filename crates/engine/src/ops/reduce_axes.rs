//! Reductions over a list of axes: `sum_dim`, `mean_dim`, `var` and
//! `logsumexp` (PyTorch's names), each with `keepdim`. Their backward
//! formulas broadcast reduced values against the input through
//! `reduce_view::broadcastable`.
//!
//! Axes: negative axes count from the end; an axis out of range or repeated
//! is an error; an empty list reduces nothing (NumPy's `axis=()`). The
//! all-element `sum` and `mean` live in `reduce.rs`.

use crate::base::fallible::fallible;
use crate::ops::declare_op;
use smallvec::SmallVec;

use super::batching::example_axis;
use super::reduce_view::{broadcastable, broadcastable_over};
use super::{Node, OpFacts, StructuredOp};
use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::{sample_tensor, BatchContext, Batched};
use crate::kernels;
use crate::tensor::shape::normalize_axes;
use crate::tensor::Tensor;

/// A list of axes as given (negative axes count from the end).
pub type Axes = SmallVec<[isize; 4]>;

/// `axes` of one example of rank `example_rank` as axes of its batched
/// value (each one past the example's own, negative ones counted from the
/// example's end): the batching rule of a reduction over axes.
pub(crate) fn batched_axes(axes: &[isize], example_rank: usize) -> Axes {
    axes.iter()
        .map(|&a| example_axis(a, example_rank))
        .collect()
}

/// Every axis of a value of rank `rank`: an all-element reduction as a
/// reduction over axes (whose batching rule reduces each example).
pub(crate) fn every_axis(rank: usize) -> Axes {
    (0..rank as isize).collect()
}

/// The facts of a reduction of one float input: a tangent, a second
/// derivative, `example` as the instance to try (the registry's instance
/// of a reduction over axes reduces none) and its sample inputs.
pub(crate) fn reduction_facts(
    example: Option<std::sync::Arc<dyn crate::Differentiable>>,
    sample_inputs: crate::core::SampleInputs,
) -> OpFacts {
    OpFacts {
        tangent: true,
        second_derivative: true,
        example,
        sample_inputs: Some(sample_inputs),
        ..OpFacts::opaque(Some(1))
    }
}

/// The sample input of a reduction: a `[2, 3, 4]` tensor of distinct values.
pub(crate) fn sample_2x3x4(seed: u64) -> Vec<Tensor> {
    vec![sample_tensor(&[2, 3, 4], seed, 1.0)]
}

/// The number of elements reduced into each output element.
fn lane_len(shape: &[usize], axes: &[usize]) -> f64 {
    axes.iter().map(|&a| shape[a]).product::<usize>() as f64
}

/// Declares a reduction over a list of axes: its two settings (`axes`,
/// `keepdim`) and the constructor from a caller's axes, written once for
/// every such reduction (here and in `reduce_minmax.rs`), with
/// `on_examples`, the reduction of each example of a batch. `Op = "name"
/// (example) { .. }` also writes its [`StructuredOp`] impl: one input, the
/// two settings as its attributes (`declare_op!`), named `name`, its
/// batching rule and facts (`example`, an instance to try, and sample
/// inputs), with the items in braces (`forward`, `grad`, ...).
macro_rules! axes_reduction {
    ($(#[$m:meta])* $op:ident = $name:literal($example:expr) { $($rules:tt)* }) => {
        axes_reduction!($(#[$m])* $op);

        impl StructuredOp for $op {
            $crate::ops::declare_op!($name(input), settings(ints axes, bool keepdim));
            $($rules)*
            fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
                self.on_examples(&x[0])
            }
            fn facts(&self) -> OpFacts {
                reduction_facts(Some(std::sync::Arc::new($example)), sample_2x3x4)
            }
        }
    };
    ($(#[$m:meta])* $op:ident) => {
        $(#[$m])*
        #[derive(Clone, Debug, Default)]
        pub struct $op {
            /// The axes to reduce (negative axes count from the end).
            pub axes: Axes,
            /// Whether reduced axes stay as size 1.
            pub keepdim: bool,
        }

        impl $op {
            /// The reduction over `axes`, keeping them as size 1 with `keepdim`.
            pub fn over(axes: &[isize], keepdim: bool) -> Self {
                $op {
                    axes: Axes::from_slice(axes),
                    keepdim,
                }
            }

            /// The reduction of each example of a batch (`x` carries the
            /// batch): the same reduction over the example's axes, moved
            /// past the batch axis.
            pub(crate) fn on_examples<'g>(
                &self,
                x: &$crate::core::Batched<'g>,
            ) -> $crate::base::error::Result<$crate::core::Batched<'g>> {
                let op = $op {
                    axes: $crate::ops::reduce_axes::batched_axes(&self.axes, x.example_rank()),
                    keepdim: self.keepdim,
                };
                let out = x.value.graph().record(op, &[&x.value])?;
                Ok($crate::core::Batched::along_batch(out))
            }
        }
    };
}
pub(crate) use axes_reduction;

/// Declares `Var` methods that record a reduction over axes: each entry,
/// `try_name / name => Op;` with its doc comment, gives the `fallible!`
/// pair taking `(axes: &[isize], keepdim: bool)` and recording
/// `Op::over(axes, keepdim)`.
macro_rules! axes_reduction_methods {
    ($($(#[$m:meta])* $try_name:ident / $name:ident => $op:ident;)*) => {
        impl<'g> Var<'g> {
            $(
                fallible! {
                    $(#[$m])*
                    pub fn $try_name / $name(&self, axes: &[isize], keepdim: bool) -> Var<'g> {
                        self.graph().record($op::over(axes, keepdim), &[self])
                    }
                }
            )*
        }
    };
}
pub(crate) use axes_reduction_methods;

axes_reduction! {
    /// The sum over `axes` (PyTorch's `sum.dim_IntList`), accumulated in f64.
    SumDim = "sum_dim"(SumDim::over(&[-1], false)) {
        const LINEAR: &'static [usize] = &[0];
        fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
            kernels::sum_axes(Self::NAME, x[0], &self.axes, self.keepdim)
        }
        fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            let x = n.x(0);
            broadcastable_over(Self::NAME, g, x, &self.axes, self.keepdim)?.try_expand(x.shape())
        }
    }
}

axes_reduction! {
    /// The mean over `axes` (PyTorch's `mean.dim`), accumulated in f64; NaN
    /// for an empty reduction.
    MeanDim = "mean_dim"(MeanDim::over(&[0, 2], true)) {
        const LINEAR: &'static [usize] = &[0];
        fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
            kernels::mean_axes(Self::NAME, x[0], &self.axes, self.keepdim)
        }
        fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            let x = n.x(0);
            let axes = normalize_axes(Self::NAME, &self.axes, x.value().rank())?;
            let count = lane_len(x.shape(), &axes);
            // Scale the small reduced gradient, then broadcast it.
            let g = broadcastable(g, x.shape(), &axes, self.keepdim)?.mul_scalar(1.0 / count);
            g.try_expand(x.shape())
        }
    }
}

/// The variance over `axes`: `sum((x - mean)^2) / max(0, n - correction)`
/// (PyTorch's `var.correction`; `correction = 1`, the default there, is the
/// unbiased estimate). Computed in f64 in two passes.
#[derive(Clone, Debug)]
pub struct Variance {
    /// The axes to reduce.
    pub axes: Axes,
    /// Subtracted from the element count in the denominator.
    pub correction: f64,
    /// Whether reduced axes stay as size 1.
    pub keepdim: bool,
}

impl Default for Variance {
    fn default() -> Self {
        Variance {
            axes: Axes::new(),
            correction: 1.0,
            keepdim: false,
        }
    }
}

impl Variance {
    /// `(x - mean(x)) * 2 / (n - correction)`: the gradient before the
    /// incoming gradient is applied, written with Var ops (differentiable).
    fn centered_scaled<'g>(&self, x: &Var<'g>, axes: &[usize]) -> Result<Var<'g>> {
        let n = lane_len(x.shape(), axes);
        let mean = x.try_mean_axes(&self.axes, true)?;
        Ok(x.try_sub(&mean)?
            .mul_scalar(2.0 / (n - self.correction).max(0.0)))
    }
}

impl StructuredOp for Variance {
    declare_op!("var"(input), settings(ints axes, float correction, bool keepdim));
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        kernels::reduce_stats::var(Self::NAME, x[0], &self.axes, self.correction, self.keepdim)
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let x = n.x(0);
        let axes = normalize_axes(Self::NAME, &self.axes, x.value().rank())?;
        let g = broadcastable(g, x.shape(), &axes, self.keepdim)?;
        self.centered_scaled(x, &axes)?.try_mul(&g)
    }
    fn tangent<'g>(&self, _: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let x = n.x(0);
        let axes = normalize_axes(Self::NAME, &self.axes, x.value().rank())?;
        let scaled = self.centered_scaled(x, &axes)?.try_mul(t)?;
        scaled.try_sum_axes(&self.axes, self.keepdim)
    }
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        let x = &x[0];
        let op = Variance {
            axes: batched_axes(&self.axes, x.example_rank()),
            ..self.clone()
        };
        Ok(Batched::along_batch(
            x.value.graph().record(op, &[&x.value])?,
        ))
    }
    fn facts(&self) -> OpFacts {
        let example = Variance {
            axes: Axes::from_slice(&[-1, 0]),
            correction: 1.0,
            keepdim: true,
        };
        reduction_facts(Some(std::sync::Arc::new(example)), sample_2x3x4)
    }
}

axes_reduction! {
    /// `log(sum(exp(x)))` over `axes`, shifted by the maximum so it never
    /// overflows (finite for inputs of ±1e4). Its gradient is the softmax.
    LogSumExp = "logsumexp"(LogSumExp::over(&[1], false)) {
        fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
            kernels::reduce_stats::logsumexp(Self::NAME, x[0], &self.axes, self.keepdim)
        }
        fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            let x = n.x(0);
            let g = broadcastable_over(Self::NAME, g, x, &self.axes, self.keepdim)?;
            self.softmax(x, n.output)?.try_mul(&g)
        }
        fn tangent<'g>(&self, _: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            let weighted = self.softmax(n.x(0), n.output)?.try_mul(t)?;
            weighted.try_sum_axes(&self.axes, self.keepdim)
        }
    }
}

impl LogSumExp {
    /// `exp(x - logsumexp(x))`, the softmax over the axes (at most 1: never overflows).
    fn softmax<'g>(&self, x: &Var<'g>, out: &Var<'g>) -> Result<Var<'g>> {
        let out = broadcastable_over(Self::NAME, out, x, &self.axes, self.keepdim)?;
        Ok(x.try_sub(&out)?.exp())
    }
}

register_defaults!(SumDim, MeanDim, Variance, LogSumExp);

impl<'g> Var<'g> {
    fallible! {
        /// The variance over `axes`, `sum((x - mean)^2) / max(0, n - correction)`:
        /// `correction = 1.0` is PyTorch's default (unbiased), `0.0` the
        /// population variance. Pass every axis for the variance of all elements.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 6.0, 8.0], &[2, 3])?);
        /// assert_eq!(x.try_var(&[1], 1.0, false)?.value().to_f64_vec(), vec![1.0, 4.0]);
        /// assert_eq!(x.try_var(&[0, 1], 0.0, false)?.value().try_item()?, 34.0 / 6.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_var / var(&self, axes: &[isize], correction: f64, keepdim: bool) -> Var<'g> {
            let op = Variance {
                axes: Axes::from_slice(axes),
                correction,
                keepdim,
            };
            self.graph().record(op, &[self])
        }
    }
}

axes_reduction_methods! {
    /// The sum over `axes` (negative axes count from the end; an empty list
    /// reduces nothing), accumulated in f64. With `keepdim` the reduced axes
    /// stay as size 1. Use [`sum`](Self::sum) for all elements.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?);
    /// assert_eq!(x.try_sum_axes(&[0], false)?.value().to_f64_vec(), vec![5.0, 7.0, 9.0]);
    /// let rows = x.try_sum_axes(&[-1], true)?;
    /// assert_eq!(rows.shape(), &[2, 1]);
    /// assert_eq!(rows.value().to_f64_vec(), vec![6.0, 15.0]);
    /// assert!(x.try_sum_axes(&[2], false).is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    try_sum_axes / sum_axes => SumDim;

    /// The mean over `axes` (see [`try_sum_axes`](Self::try_sum_axes) for
    /// the axis rules); NaN for an empty reduction. Use [`mean`](Self::mean)
    /// for all elements.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?);
    /// let m = x.try_mean_axes(&[1], false)?;
    /// assert_eq!(m.value().to_f64_vec(), vec![2.0, 5.0]);
    /// assert_eq!(m.sum().backward()?.wrt(&x).to_f64_vec(), vec![1.0 / 3.0; 6]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    try_mean_axes / mean_axes => MeanDim;

    /// `log(sum(exp(self)))` over `axes`, computed stably (shifted by the
    /// maximum): finite for inputs of ±1e4, -inf for an empty reduction.
    /// Its gradient is the softmax over the axes.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1e4, 1e4, -1e4], &[3])?);
    /// let y = x.try_logsumexp(&[0], false)?;
    /// assert_eq!(y.value().try_item()?, 1e4 + 2f64.ln());
    /// let softmax = y.backward()?.wrt(&x).to_f64_vec();
    /// assert!((softmax[0] - 0.5).abs() < 1e-12 && softmax[2] == 0.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    try_logsumexp / logsumexp => LogSumExp;
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, DType, Error, Graph, Tensor};

    use crate::ops::testing::{check_axes_reductions, sample_2x3x4 as x, AxesReduction};

    /// Every reduction over axes, as `(input, axes, keepdim) -> output`.
    const REDUCTIONS: [AxesReduction; 5] = [
        |x, axes, keepdim| x.try_sum_axes(axes, keepdim),
        |x, axes, keepdim| x.try_mean_axes(axes, keepdim),
        |x, axes, keepdim| x.try_var(axes, 1.0, keepdim),
        |x, axes, keepdim| x.try_var(axes, 0.0, keepdim),
        |x, axes, keepdim| x.try_logsumexp(axes, keepdim),
    ];

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-14)
    }

    #[test]
    fn forward_values_match_numpy() {
        let g = Graph::new();
        let x = g.variable(x());
        let val = |v: crate::Var<'_>| v.value().to_f64_vec();
        // NumPy: x.sum(axis=1), x.sum(axis=(0, 2)), x.mean(axis=-1)
        let sum1 = [0.6, 0.7, 1.5, 3.2, 1.15, 0.8, 3.2, 0.5];
        assert!(close(&val(x.sum_axes(&[1], false)), &sum1));
        assert!(close(&val(x.sum_axes(&[0, 2], false)), &[4.55, 4.8, 2.3]));
        assert_eq!(x.sum_axes(&[0, 2], true).shape(), &[1, 3, 1]);
        let mean = [0.75, 0.4, 0.35, 0.3875, 0.8, 0.225];
        assert!(close(&val(x.mean_axes(&[-1], false)), &mean));
        // NumPy: x.var(axis=1, ddof=1), x.var(axis=(0, 2), ddof=0)
        let var1 = [
            0.13,
            3.543333333333333,
            3.5100000000000002,
            0.1433333333333333,
            2.805833333333334,
            1.2233333333333336,
            1.6233333333333335,
            0.20333333333333337,
        ];
        assert!(close(&val(x.var(&[1], 1.0, false)), &var1));
        let var02 = [0.8905859375, 1.0375, 1.67609375];
        assert!(close(&val(x.var(&[0, 2], 0.0, true)), &var02));
        // NumPy: log(exp(x - m).sum(axes)) + m
        let lse02 = [3.0492897461036996, 3.1543222233196575, 3.1578831388660022];
        assert!(close(&val(x.logsumexp(&[0, 2], false)), &lse02));
        let lse1 = x.logsumexp(&[1], true);
        assert_eq!(lse1.shape(), &[2, 1, 4]);
        let lse1_np = [
            1.3395462038649448,
            2.475499299565873,
            2.360393389474626,
            2.2155918732927513,
            2.3426857726620707,
            1.7169804302929124,
            2.5517987958544253,
            1.3308714408244886,
        ];
        assert!(close(&val(lse1), &lse1_np));
        // An empty axis list reduces nothing.
        assert_eq!(x.sum_axes(&[], false).value(), x.value());
    }

    #[test]
    fn gradients_over_axes_and_keepdim() {
        let x = x();
        check_axes_reductions(&REDUCTIONS);
        // Two consumers of one value, and reductions feeding broadcasting ops.
        gradcheck(
            |v| {
                let centered = &v[0] - &v[0].mean_axes(&[1], true);
                Ok(&centered / &v[0].var(&[1], 1.0, true).sqrt() + v[0].logsumexp(&[2], true))
            },
            &[x],
        )
        .unwrap();
    }

    #[test]
    fn logsumexp_is_finite_at_extremes() {
        let g = Graph::new();
        for dtype in [DType::F64, DType::F32] {
            let v = Tensor::from_vec(vec![1e4, -1e4, 1e4, -1e4, -1e4, -1e4], &[2, 3]).unwrap();
            let x = g.variable(v.to_dtype(dtype));
            let y = x.logsumexp(&[1], false);
            let values = y.value().to_f64_vec();
            // Exact up to the dtype's rounding of 10000.69 (f32 spacing there: 1e-3).
            assert!((values[0] - (1e4 + std::f64::consts::LN_2)).abs() < 1e-3);
            assert!((values[1] - (-1e4 + 3f64.ln())).abs() < 1e-3);
            let grad = y.sum().backward().unwrap().wrt(&x).to_f64_vec();
            let third = 1.0 / 3.0;
            let expect = [0.5, 0.0, 0.5, third, third, third];
            // exp(x - logsumexp) inherits the rounding of the output (as in
            // PyTorch): relative 2e-4 in f32 at 1e4.
            let tol = if dtype == DType::F32 { 1e-3 } else { 1e-12 };
            assert!(
                grad.iter().zip(expect).all(|(a, b)| (a - b).abs() < tol),
                "{grad:?}"
            );
        }
    }

    #[test]
    fn f32_and_f64_agree() {
        let g = Graph::new();
        let x64 = g.variable(x());
        let x32 = g.variable(x().to_dtype(DType::F32));
        fn f(x: &crate::Var<'_>) -> f64 {
            let y = x.sum_axes(&[0], false) + x.mean_axes(&[0], false) - x.var(&[0], 1.0, false)
                + x.logsumexp(&[0], false);
            y.value().to_f64_vec().iter().sum()
        }
        assert!((f(&x64) - f(&x32)).abs() < 1e-5);
    }

    #[test]
    fn bad_axes_are_typed_errors() {
        let g = Graph::new();
        let x = g.variable(x());
        assert!(matches!(
            x.try_sum_axes(&[3], false),
            Err(Error::AxisOutOfRange {
                op: "sum_dim",
                axis: 3,
                rank: 3
            })
        ));
        assert!(matches!(
            x.try_mean_axes(&[-4], true),
            Err(Error::AxisOutOfRange { op: "mean_dim", .. })
        ));
        assert!(matches!(
            x.try_var(&[1, -2], 1.0, false),
            Err(Error::InvalidArgument { op: "var", .. })
        ));
        assert!(matches!(
            x.try_logsumexp(&[0, 0], false),
            Err(Error::InvalidArgument {
                op: "logsumexp",
                ..
            })
        ));
        let s = g.variable(Tensor::scalar(1.0));
        assert!(s.try_sum_axes(&[0], false).is_err());
    }

    #[test]
    fn second_derivatives_through_create_graph() {
        use crate::ops::testing::hvpcheck;
        let x = x();
        for (axes, keepdim) in [(&[1isize][..], false), (&[0, 2], true), (&[-1], false)] {
            hvpcheck(|x| x.try_var(axes, 1.0, keepdim), &x).unwrap();
            hvpcheck(|x| x.try_logsumexp(axes, keepdim), &x).unwrap();
            hvpcheck(|x| Ok(x.sum_axes(axes, keepdim).powf(2.0)), &x).unwrap();
            hvpcheck(|x| Ok(x.mean_axes(axes, keepdim).sin()), &x).unwrap();
        }
    }
}

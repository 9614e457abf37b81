//! Extremum reductions: `max`/`min` over every element, `amax`/`amin` over
//! a list of axes (PyTorch's names), and `argmax`/`argmin`.
//!
//! Gradient rule (as PyTorch's `amax` and all-element `max`): where several
//! elements attain the extremum, the gradient is split evenly among them;
//! elsewhere it is 0. NaN propagates: a lane holding NaN has a NaN extremum,
//! and its gradient goes to its NaN elements. An extremum over an axis of
//! size 0 is an error. `argmax`/`argmin` return indices as constants (no
//! gradient), the first occurrence winning a tie.

use std::sync::Arc;

use crate::base::fallible::fallible;
use crate::ops::OpAttributes;

use super::batching::{example_axis, materialize};
use super::reduce::sample_2x3;
use super::reduce_axes::{
    axes_reduction, axes_reduction_methods, batched_axes, every_axis, reduction_facts,
    sample_2x3x4, Axes,
};
use super::reduce_view::broadcastable_over;
use super::{Node, OpFacts, OpRegistry, StructuredOp};
use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, Differentiable};
use crate::kernels::reduce_minmax;
use crate::tensor::Tensor;

/// An extremum node seen by its backward and tangent: the elements that
/// attain the extremum share its gradient evenly.
struct Extremum<'a, 'g> {
    op: &'static str,
    x: &'a Var<'g>,
    axes: Axes,
    keepdim: bool,
    /// Each element's share: 1 / (the count of ties in its lane) where it
    /// attains the extremum, 0 elsewhere (a constant).
    weights: Var<'g>,
}

impl<'a, 'g> Extremum<'a, 'g> {
    fn new(op: &'static str, n: Node<'a, 'g>, (axes, keepdim): (Axes, bool)) -> Result<Self> {
        let x = &n.inputs[0];
        let weights = TieWeights {
            op,
            axes: axes.clone(),
        }
        .record(x, n.output)?;
        Ok(Extremum {
            op,
            x,
            axes,
            keepdim,
            weights,
        })
    }

    /// Backward: the gradient spread over the elements that attain it.
    fn spread(&self, g: &Var<'g>) -> Result<Var<'g>> {
        let g = broadcastable_over(self.op, g, self.x, &self.axes, self.keepdim)?;
        g.try_mul(&self.weights)
    }

    /// Tangent: the mean of the tangent over the elements that attain it.
    fn gather(&self, t: &Var<'g>) -> Result<Var<'g>> {
        t.try_mul(&self.weights)?
            .try_sum_axes(&self.axes, self.keepdim)
    }
}

/// The weights of [`Extremum`] (`reduce_minmax::tie_weights`) from the
/// input and the extremum over `axes`, as an op: a trace then keeps where
/// they come from, so that `vmap` of a gradient gives each example the
/// weights of its own input (a constant would be the first example's).
/// Recorded without a node, as a constant: the weights are piecewise
/// constant, with no gradient.
#[derive(Clone, Debug)]
struct TieWeights {
    /// The extremum's name, for errors.
    op: &'static str,
    axes: Axes,
}

impl TieWeights {
    /// The weights of `x`'s elements given its `extremum`, a constant.
    fn record<'g>(self, x: &Var<'g>, extremum: &Var<'g>) -> Result<Var<'g>> {
        let graph = x.graph();
        graph.no_grad(|| graph.record(self, &[x, extremum]))
    }
}

impl StructuredOp for TieWeights {
    crate::ops::declare_op!("tie_weights"(input, extremum), no_grad[0, 1], settings(ints axes));
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        reduce_minmax::tie_weights(self.op, x[0], x[1], &self.axes)
    }
    // Both inputs with the batch (the extremum has one element per lane,
    // so it cannot broadcast), the axes past it.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let op = TieWeights {
            op: self.op,
            axes: batched_axes(&self.axes, x[0].example_rank()),
        };
        let (input, extremum) = (materialize(&x[0], ctx)?, materialize(&x[1], ctx)?);
        Ok(Batched::along_batch(op.record(&input, &extremum)?))
    }
}

macro_rules! extremum_op {
    ($(#[$m:meta])* $op:ident, $name:literal, $kernel:path, all($over_axes:ident)) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $op;

        impl $op {
            fn axes_keepdim(&self, rank: usize) -> (Axes, bool) {
                (every_axis(rank), false)
            }

            /// Each example's extremum: one over every axis but the batch axis.
            fn on_examples<'g>(&self, x: &Batched<'g>) -> Result<Batched<'g>> {
                $over_axes::over(&every_axis(x.example_rank()), false).on_examples(x)
            }
        }

        extremum_op!(@impl $op, $name, $kernel, reduction_facts(None, sample_2x3), ());
    };
    ($(#[$m:meta])* $op:ident, $name:literal, $kernel:path, axes($example:expr)) => {
        axes_reduction!($(#[$m])* $op);

        impl $op {
            fn axes_keepdim(&self, _rank: usize) -> (Axes, bool) {
                (self.axes.clone(), self.keepdim)
            }
        }

        extremum_op!(
            @impl $op, $name, $kernel,
            reduction_facts(Some(Arc::new($example)), sample_2x3x4),
            (, settings(ints axes, bool keepdim))
        );
    };
    (@impl $op:ident, $name:literal, $kernel:path, $facts:expr, ($($settings:tt)*)) => {
        impl StructuredOp for $op {
            crate::ops::declare_op!($name(input) $($settings)*);
            fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
                let (axes, keepdim) = self.axes_keepdim(x[0].rank());
                $kernel($name, x[0], &axes, keepdim)
            }
            fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
                let settings = self.axes_keepdim(n.x(0).value().rank());
                Extremum::new($name, n, settings)?.spread(g)
            }
            fn tangent<'g>(&self, _: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
                let settings = self.axes_keepdim(n.x(0).value().rank());
                Extremum::new($name, n, settings)?.gather(t)
            }
            fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
                self.on_examples(&x[0])
            }
            fn facts(&self) -> OpFacts {
                $facts
            }
        }
    };
}

extremum_op!(
    /// The maximum of every element, as a 0-d value; ties share the gradient evenly.
    Max, "max", reduce_minmax::amax, all(Amax)
);
extremum_op!(
    /// The minimum of every element, as a 0-d value; ties share the gradient evenly.
    Min, "min", reduce_minmax::amin, all(Amin)
);
extremum_op!(
    /// The maximum over a list of axes; ties share the gradient evenly.
    Amax, "amax", reduce_minmax::amax, axes(Amax::over(&[1], false))
);
extremum_op!(
    /// The minimum over a list of axes; ties share the gradient evenly.
    Amin, "amin", reduce_minmax::amin, axes(Amin::over(&[0, -1], true))
);

/// The batching rule of `argmax`/`argmin` (`make` builds the op from its
/// axis and keepdim) for a batched `x`: along an axis, that axis past the
/// batch axis; over every element (or a 0-d example's one), along the one
/// axis of each example flattened, the indices then given the example's
/// kept unit axes.
fn arg_on_examples<'g, O: Differentiable>(
    x: &Batched<'g>,
    axis: Option<isize>,
    keepdim: bool,
    make: impl Fn(Option<isize>, bool) -> O,
) -> Result<Batched<'g>> {
    let rank = x.example_rank();
    let graph = x.value.graph();
    if let (Some(axis), true) = (axis, rank > 0) {
        let op = make(Some(example_axis(axis, rank)), keepdim);
        return Ok(Batched::along_batch(graph.record(op, &[&x.value])?));
    }
    let batch = x.value.shape()[0];
    let flat = x
        .value
        .reshape_dims(&[batch, x.example_shape().iter().product()])?;
    let indices = graph.record(make(Some(1), false), &[&flat])?;
    if !keepdim {
        return Ok(Batched::along_batch(indices));
    }
    let mut kept = vec![1; rank + 1];
    kept[0] = batch;
    Ok(Batched::along_batch(indices.reshape_dims(&kept)?))
}

/// The sample input of `argmax`/`argmin`: a `[2, 3, 4]` tensor whose
/// values are distinct quarters (a permutation of 24 of them, from the
/// seed), so that no lane has a tie and sums of them are exact.
fn sample_positions(seed: u64) -> Vec<Tensor> {
    let v = (0..24u64)
        .map(|i| ((7 * i + 5 * seed) % 24) as f64 / 4.0 - 3.0)
        .collect();
    vec![Tensor::from_vec(v, &[2, 3, 4]).expect("a valid shape")]
}

macro_rules! arg_op {
    ($(#[$m:meta])* $op:ident, $name:literal, $kernel:path, $example:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $op {
            /// The axis to search along; `None` searches the flattened tensor.
            pub axis: Option<isize>,
            /// Whether the reduced axis (every axis, for `None`) stays as size 1.
            pub keepdim: bool,
        }

        impl StructuredOp for $op {
            const NAME: &'static str = $name;
            const INPUTS: &'static [&'static str] = &["input"];
            const HOLDS: crate::Holds = crate::Holds::Settings;
            /// Indices are piecewise constant: no gradient, no tangent.
            const NO_GRAD: &'static [usize] = &[0];
            fn attributes(&self) -> OpAttributes {
                OpAttributes::new().int_opt("axis", self.axis).bool("keepdim", self.keepdim)
            }
            fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
                $kernel($name, x[0], self.axis, self.keepdim)
            }
            fn non_float_output(&self) -> bool {
                true
            }
            fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
                arg_on_examples(&x[0], self.axis, self.keepdim, |axis, keepdim| $op { axis, keepdim })
            }
            fn facts(&self) -> OpFacts {
                OpFacts {
                    // No tangent (zero), not an error.
                    tangent: true,
                    example: Some(Arc::new($example)),
                    sample_inputs: Some(sample_positions),
                    ..OpFacts::opaque(Some(1))
                }
            }
        }
    };
}

arg_op!(
    /// The index of the maximum (first occurrence), as i64.
    ArgMax, "argmax", reduce_minmax::argmax, ArgMax { axis: Some(1), keepdim: false }
);
arg_op!(
    /// The index of the minimum (first occurrence), as i64.
    ArgMin, "argmin", reduce_minmax::argmin, ArgMin { axis: Some(-1), keepdim: true }
);

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Max);
    reg.add_builtin(Min);
    reg.add_builtin(Amax::default());
    reg.add_builtin(Amin::default());
    reg.add_builtin(ArgMax::default());
    reg.add_builtin(ArgMin::default());
}

impl<'g> Var<'g> {
    fallible! {
        /// The maximum of every element (a 0-d value), NaN-propagating. Tied
        /// maxima share the gradient evenly. Errors on an empty tensor.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1.0, 4.0, 4.0, 2.0], &[2, 2])?);
        /// let m = x.try_max()?;
        /// assert_eq!(m.value().try_item()?, 4.0);
        /// assert_eq!(m.backward()?.wrt(&x).to_f64_vec(), vec![0.0, 0.5, 0.5, 0.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_max / max(&self) -> Var<'g> {
            self.graph().record(Max, &[self])
        }
    }

    fallible! {
        /// The minimum of every element (a 0-d value), NaN-propagating. Tied
        /// minima share the gradient evenly. Errors on an empty tensor.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![3.0, -1.0, 2.0], &[3])?);
        /// assert_eq!(x.try_min()?.value().try_item()?, -1.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_min / min(&self) -> Var<'g> {
            self.graph().record(Min, &[self])
        }
    }
}

axes_reduction_methods! {
    /// The maximum over `axes` (PyTorch's `amax`; negative axes count from
    /// the end, an empty list reduces nothing), NaN-propagating. Tied maxima
    /// share the gradient evenly. Errors on an axis of size 0.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1.0, 5.0, 3.0, 7.0, 2.0, 7.0], &[2, 3])?);
    /// let m = x.try_max_axes(&[1], false)?;
    /// assert_eq!(m.value().to_f64_vec(), vec![5.0, 7.0]);
    /// assert_eq!(m.sum().backward()?.wrt(&x).to_f64_vec(), vec![0.0, 1.0, 0.0, 0.5, 0.0, 0.5]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    try_max_axes / max_axes => Amax;

    /// The minimum over `axes` (PyTorch's `amin`; see [`try_max_axes`](Self::try_max_axes)).
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1.0, 5.0, 3.0, 7.0, 2.0, 7.0], &[2, 3])?);
    /// assert_eq!(x.try_min_axes(&[0], true)?.value().to_f64_vec(), vec![1.0, 2.0, 3.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    try_min_axes / min_axes => Amin;
}

impl<'g> Var<'g> {
    fallible! {
        /// The index of the maximum along `axis` (`None`: of the flattened
        /// tensor), as an i64 constant (no gradient, no node). The first
        /// occurrence wins a tie; NaN counts as the maximum.
        ///
        /// ```
        /// use retrograd::{DType, Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1.0, 9.0, 9.0, 7.0, 2.0, 8.0], &[2, 3])?);
        /// let i = x.try_argmax(Some(1), false)?;
        /// assert_eq!(i.value().to_vec::<i64>()?, vec![1, 2]);
        /// assert_eq!(i.dtype(), DType::I64);
        /// assert!(!i.requires_grad());
        /// assert_eq!(x.try_argmax(None, false)?.value().to_vec::<i64>()?, vec![1]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_argmax / argmax(&self, axis: Option<isize>, keepdim: bool) -> Var<'g> {
            // Recorded: a constant, which a tracing graph (`vmap`) keeps the op of.
            self.graph().record(ArgMax { axis, keepdim }, &[self])
        }
    }

    fallible! {
        /// The index of the minimum along `axis` (see [`try_argmax`](Self::try_argmax)).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![4.0, 1.0, 1.0], &[3])?);
        /// assert_eq!(x.try_argmin(Some(0), false)?.value().to_vec::<i64>()?, vec![1]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_argmin / argmin(&self, axis: Option<isize>, keepdim: bool) -> Var<'g> {
            self.graph().record(ArgMin { axis, keepdim }, &[self])
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, jvpcheck, DType, Error, Graph, Tensor};

    use crate::ops::testing::{check_axes_reductions, sample_2x3x4 as x, AxesReduction};

    /// The extrema over axes, as `(input, axes, keepdim) -> output`.
    const EXTREMA: [AxesReduction; 2] = [
        |x, axes, keepdim| x.try_max_axes(axes, keepdim),
        |x, axes, keepdim| x.try_min_axes(axes, keepdim),
    ];

    #[test]
    fn forward_values_match_numpy() {
        let g = Graph::new();
        let x = g.variable(x());
        let val = |v: crate::Var<'_>| v.value().to_f64_vec();
        assert_eq!(x.max().value().item(), 2.4);
        assert_eq!(x.min().value().item(), -1.6);
        // NumPy: x.max(axis=1), x.min(axis=(0, 2)), x.argmax(axis=1), x.argmin()
        assert_eq!(
            val(x.max_axes(&[1], false)),
            vec![0.5, 2.4, 2.0, 1.5, 2.2, 1.3, 1.9, 0.6]
        );
        assert_eq!(val(x.min_axes(&[0, 2], false)), vec![-1.0, -0.9, -1.6]);
        assert_eq!(x.min_axes(&[0, 2], true).shape(), &[1, 3, 1]);
        assert_eq!(
            val(x.argmax(Some(1), false)),
            vec![0.0, 2.0, 0.0, 0.0, 1.0, 0.0, 2.0, 0.0]
        );
        assert_eq!(x.argmin(None, false).value().item(), 10.0);
        assert_eq!(x.argmin(None, true).shape(), &[1, 1, 1]);
        assert_eq!(x.argmax(Some(-1), true).shape(), &[2, 3, 1]);
        // f32 gives the same indices and values.
        let x32 = g.variable(x.value().to_dtype(DType::F32));
        assert_eq!(x32.argmax(Some(1), false).dtype(), DType::I64);
        assert_eq!(
            val(x32.argmax(Some(1), false)),
            val(x.argmax(Some(1), false))
        );
        assert_eq!(x32.max().value().item(), 2.4f32 as f64);
    }

    #[test]
    fn gradients_over_axes_and_keepdim() {
        let x = x();
        gradcheck(|v| v[0].try_max(), std::slice::from_ref(&x)).unwrap();
        gradcheck(|v| v[0].try_min(), std::slice::from_ref(&x)).unwrap();
        jvpcheck(|v| v[0].try_max(), std::slice::from_ref(&x)).unwrap();
        jvpcheck(|v| v[0].try_min(), std::slice::from_ref(&x)).unwrap();
        check_axes_reductions(&EXTREMA);
        // Two consumers: a max-shifted softmax-like expression.
        gradcheck(
            |v| Ok((&v[0] - &v[0].max_axes(&[2], true)).exp() * v[0].min()),
            &[x],
        )
        .unwrap();
    }

    #[test]
    fn ties_share_the_gradient_evenly_and_nan_takes_it() {
        let g = Graph::new();
        let x =
            g.variable(Tensor::from_vec(vec![3.0, 1.0, 3.0, 3.0, f64::NAN, 0.0], &[2, 3]).unwrap());
        let m = x.max_axes(&[1], false);
        let v = m.value().to_f64_vec();
        assert_eq!(v[0], 3.0);
        assert!(v[1].is_nan());
        let grad = m.sum().backward().unwrap().wrt(&x).to_f64_vec();
        assert_eq!(grad, vec![0.5, 0.0, 0.5, 0.0, 1.0, 0.0]);
        let all = g.variable(Tensor::from_vec(vec![2.0; 4], &[4]).unwrap());
        let grad = all.min().backward().unwrap().wrt(&all).to_f64_vec();
        assert_eq!(grad, vec![0.25; 4]);
        // argmax is a constant: first occurrence, and NaN counts as the maximum.
        assert_eq!(
            x.argmax(Some(1), false).value().to_f64_vec(),
            vec![0.0, 1.0]
        );
        let before = g.len();
        let _ = x.argmax(None, false);
        assert_eq!(g.len(), before);
    }

    #[test]
    fn errors() {
        let g = Graph::new();
        let x = g.variable(x());
        assert!(matches!(
            x.try_max_axes(&[3], false),
            Err(Error::AxisOutOfRange { op: "amax", .. })
        ));
        assert!(matches!(
            x.try_min_axes(&[2, -1], false),
            Err(Error::InvalidArgument { op: "amin", .. })
        ));
        assert!(matches!(
            x.try_argmax(Some(-4), false),
            Err(Error::AxisOutOfRange { op: "argmax", .. })
        ));
        let empty = g.variable(Tensor::zeros(&[2, 0], DType::F64).unwrap());
        assert!(matches!(
            empty.try_max(),
            Err(Error::InvalidArgument { op: "max", .. })
        ));
        assert!(empty.try_argmin(Some(1), false).is_err());
        assert_eq!(empty.max_axes(&[0], false).shape(), &[0]);
        // Registered by name.
        assert_eq!(g.apply("max", &[&x]).unwrap().value().item(), 2.4);
    }

    #[test]
    fn argmax_under_vmap_is_each_examples() {
        // A batch of 3 examples of shape [2, 3, 4] (the registry sweep
        // skips ops with an index output).
        let g = Graph::new();
        let v: Vec<f64> = (0..72).map(|i| ((i * 29) % 72) as f64 - 30.0).collect();
        let xs = g.variable(Tensor::from_vec(v, &[3, 2, 3, 4]).unwrap());
        type Arg = for<'a, 'g> fn(&'a crate::Var<'g>) -> crate::Result<crate::Var<'g>>;
        let cases: [Arg; 5] = [
            |x| x.try_argmax(Some(1), false),
            |x| x.try_argmin(Some(-1), true),
            |x| x.try_argmax(None, false),
            |x| x.try_argmin(None, true),
            |x| x.try_argmax(Some(0), true)?.try_to_dtype(DType::F64),
        ];
        for f in cases {
            let got = crate::autograd::try_vmap(|v| f(&v[0]), &[&xs]).unwrap();
            for b in 0..3 {
                let h = Graph::new();
                let want = f(&h.variable(xs.value().select(0, b).unwrap().contiguous())).unwrap();
                let row = got.value().select(0, b).unwrap().contiguous();
                assert_eq!(row.shape(), want.shape());
                assert_eq!(row.to_f64_vec(), want.value().to_f64_vec());
            }
        }
        // 0-d examples: one position each.
        let s = g.variable(Tensor::from_vec(vec![1.0, -2.0, 3.0], &[3]).unwrap());
        let i = crate::autograd::try_vmap(|v| v[0].try_argmax(None, true), &[&s]).unwrap();
        assert_eq!(i.shape(), &[3]);
        assert_eq!(i.value().to_vec::<i64>().unwrap(), vec![0, 0, 0]);
    }

    #[test]
    fn second_derivatives_through_create_graph() {
        use crate::ops::testing::hvpcheck;
        let x = x();
        hvpcheck(|x| Ok(x.powf(2.0).max_axes(&[1], false)), &x).unwrap();
        hvpcheck(|x| Ok(x.sin().min_axes(&[0, 2], true)), &x).unwrap();
        hvpcheck(|x| Ok(x.powf(3.0).max()), &x).unwrap();
    }
}

//! Extremum reductions: `max`/`min` over every element, `amax`/`amin` over
//! a list of axes (PyTorch's names), and `argmax`/`argmin`.
//!
//! Gradient rule (as PyTorch's `amax` and all-element `max`): where several
//! elements attain the extremum, the gradient is split evenly among them;
//! elsewhere it is 0. NaN propagates: a lane holding NaN has a NaN extremum,
//! and its gradient goes to its NaN elements. An extremum over an axis of
//! size 0 is an error. `argmax`/`argmin` return indices as constants (no
//! gradient), the first occurrence winning a tie.

use crate::ops::OpAttributes;
use crate::fallible::fallible;

use super::reduce_axes::{axes_reduction, axes_reduction_methods, Axes};
use super::reduce_view::broadcastable_over;
use super::{Node, OpRegistry, StructuredOp};
use crate::error::Result;
use crate::graph::Var;
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
        let w = reduce_minmax::tie_weights(op, x.value(), n.output.value(), &axes)?;
        let weights = Var::constant_in(x.graph(), w);
        Ok(Extremum { op, x, axes, keepdim, weights })
    }

    /// Backward: the gradient spread over the elements that attain it.
    fn spread(&self, g: &Var<'g>) -> Result<Var<'g>> {
        let g = broadcastable_over(self.op, g, self.x, &self.axes, self.keepdim)?;
        g.try_mul(&self.weights)
    }

    /// Tangent: the mean of the tangent over the elements that attain it.
    fn gather(&self, t: &Var<'g>) -> Result<Var<'g>> {
        t.try_mul(&self.weights)?.try_sum_axes(&self.axes, self.keepdim)
    }
}

macro_rules! extremum_op {
    ($(#[$m:meta])* $op:ident, $name:literal, $kernel:path, all) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $op;

        impl $op {
            fn axes_keepdim(&self, rank: usize) -> (Axes, bool) {
                ((0..rank as isize).collect(), false)
            }
        }

        extremum_op!(@impl $op, $name, $kernel, ());
    };
    ($(#[$m:meta])* $op:ident, $name:literal, $kernel:path, axes) => {
        axes_reduction!($(#[$m])* $op);

        impl $op {
            fn axes_keepdim(&self, _rank: usize) -> (Axes, bool) {
                (self.axes.clone(), self.keepdim)
            }
        }

        extremum_op!(@impl $op, $name, $kernel, (, settings(ints axes, bool keepdim)));
    };
    (@impl $op:ident, $name:literal, $kernel:path, ($($settings:tt)*)) => {
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
        }
    };
}

extremum_op!(
    /// The maximum of every element, as a 0-d value; ties share the gradient evenly.
    Max, "max", reduce_minmax::amax, all
);
extremum_op!(
    /// The minimum of every element, as a 0-d value; ties share the gradient evenly.
    Min, "min", reduce_minmax::amin, all
);
extremum_op!(
    /// The maximum over a list of axes; ties share the gradient evenly.
    Amax, "amax", reduce_minmax::amax, axes
);
extremum_op!(
    /// The minimum over a list of axes; ties share the gradient evenly.
    Amin, "amin", reduce_minmax::amin, axes
);

macro_rules! arg_op {
    ($(#[$m:meta])* $op:ident, $name:literal, $kernel:path) => {
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
        }
    };
}

arg_op!(
    /// The index of the maximum (first occurrence), as i64.
    ArgMax, "argmax", reduce_minmax::argmax
);
arg_op!(
    /// The index of the minimum (first occurrence), as i64.
    ArgMin, "argmin", reduce_minmax::argmin
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
            let t = ArgMax { axis, keepdim }.forward(&[self.value()])?;
            Ok(Var::constant_in(self.graph(), t))
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
            let t = ArgMin { axis, keepdim }.forward(&[self.value()])?;
            Ok(Var::constant_in(self.graph(), t))
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
    fn second_derivatives_through_create_graph() {
        use crate::ops::testing::hvpcheck;
        let x = x();
        hvpcheck(|x| Ok(x.powf(2.0).max_axes(&[1], false)), &x).unwrap();
        hvpcheck(|x| Ok(x.sin().min_axes(&[0, 2], true)), &x).unwrap();
        hvpcheck(|x| Ok(x.powf(3.0).max()), &x).unwrap();
    }
}

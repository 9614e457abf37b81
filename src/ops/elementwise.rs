//! One-operand elementwise ops: `abs`, `sin`, `cos` and `clamp`, with their
//! fused backward helpers (`abs_backward`, `sin_backward`, `cos_backward`,
//! `clamp_backward`): one kernel pass per first-order backward, and
//! differentiable again.

use smallvec::smallvec;

use super::slope::{slope_helper, unary_with_slope};
use super::{expect_inputs, sum_tangents, unbroadcast, Differentiable, GradInputs, OpRegistry};
use crate::error::or_panic;
use crate::error::{Error, Result};
use crate::graph::Var;
use crate::kernels::{self, BinaryFn, UnaryFn};
use crate::tensor::{Element, Tensor};

crate::unary_fn!(
    /// `|x|`
    AbsFn,
    |x| x.abs()
);
crate::unary_fn!(
    /// `sin x`
    SinFn,
    |x| x.sin()
);
crate::unary_fn!(
    /// `cos x`
    CosFn,
    |x| x.cos()
);
crate::binary_fn!(
    /// `g * sign(x)`, 0 at 0 (NaN stays NaN).
    AbsBackwardFn,
    |g, x| if x > T::zero() {
        g
    } else if x < T::zero() {
        -g
    } else if x == T::zero() {
        T::zero()
    } else {
        x
    }
);
crate::binary_fn!(
    /// `g cos x`
    SinBackwardFn,
    |g, x| g * x.cos()
);
crate::binary_fn!(
    /// `-g sin x`
    CosBackwardFn,
    |g, x| -(g * x.sin())
);

/// `|x|`; the gradient is `sign(x)`, 0 at 0 (as in PyTorch).
#[derive(Clone, Copy, Debug, Default)]
pub struct Abs;
/// `g * sign(x)` (0 at 0): the backward of `abs`.
#[derive(Clone, Copy, Debug, Default)]
pub struct AbsBackward;
/// `sin x`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sin;
/// `g cos x`: the backward of `sin`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SinBackward;
/// `cos x`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cos;
/// `-g sin x`: the backward of `cos`.
#[derive(Clone, Copy, Debug, Default)]
pub struct CosBackward;

unary_with_slope!(Abs, "abs", |_s| AbsFn, AbsBackward);
unary_with_slope!(Sin, "sin", |_s| SinFn, SinBackward);
unary_with_slope!(Cos, "cos", |_s| CosFn, CosBackward);
slope_helper!(
    AbsBackward,
    "abs_backward",
    |_s| AbsBackwardFn,
    |_s, _a, _g, _x| None
);
slope_helper!(
    SinBackward,
    "sin_backward",
    |_s| SinBackwardFn,
    |_s, a, g, x| {
        // (g cos x)' = -g sin x
        Some(
            a.try_mul(g)
                .and_then(|ag| ag.graph().record(CosBackward, &[&ag, x])),
        )
    }
);
slope_helper!(
    CosBackward,
    "cos_backward",
    |_s| CosBackwardFn,
    |_s, a, g, x| {
        // (-g sin x)' = -g cos x
        Some(
            a.try_mul(g)
                .and_then(|ag| ag.graph().record(SinBackward, &[&-&ag, x])),
        )
    }
);

/// Clamps into `[min, max]`; either bound may be absent. NaN stays NaN, and
/// when `min > max` every element becomes `max` (as in PyTorch).
#[derive(Clone, Copy, Debug, Default)]
pub struct Clamp {
    /// The lower bound, if any.
    pub min: Option<f64>,
    /// The upper bound, if any.
    pub max: Option<f64>,
}

/// `g` where `min <= x <= max` (bounds inclusive), else 0: the backward of `clamp`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClampBackward {
    /// The lower bound, if any.
    pub min: Option<f64>,
    /// The upper bound, if any.
    pub max: Option<f64>,
}

#[derive(Clone, Copy, Debug)]
struct ClampFn {
    lo: f64,
    hi: f64,
}

impl UnaryFn for ClampFn {
    #[inline(always)]
    fn call<T: Element>(self, x: T) -> T {
        let (lo, hi) = (T::from_f64(self.lo), T::from_f64(self.hi));
        let y = if x < lo { lo } else { x };
        if y > hi {
            hi
        } else {
            y
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct ClampBackwardFn {
    lo: f64,
    hi: f64,
}

impl BinaryFn for ClampBackwardFn {
    #[inline(always)]
    fn call<T: Element>(self, g: T, x: T) -> T {
        if x >= T::from_f64(self.lo) && x <= T::from_f64(self.hi) {
            g
        } else {
            T::zero()
        }
    }
}

/// The bounds as a finite-or-infinite pair, or an error for none or NaN bounds.
fn clamp_bounds(min: Option<f64>, max: Option<f64>) -> Result<(f64, f64)> {
    if min.is_none() && max.is_none() {
        return Err(Error::invalid(
            "clamp",
            "at least one of min and max must be given",
        ));
    }
    if min.is_some_and(f64::is_nan) || max.is_some_and(f64::is_nan) {
        return Err(Error::invalid("clamp", "a bound is NaN"));
    }
    Ok((
        min.unwrap_or(f64::NEG_INFINITY),
        max.unwrap_or(f64::INFINITY),
    ))
}

impl Differentiable for Clamp {
    fn name(&self) -> &str {
        "clamp"
    }
    fn arity(&self) -> Option<usize> {
        Some(1)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        expect_inputs("clamp", inputs, 1)?;
        let (lo, hi) = clamp_bounds(self.min, self.max)?;
        Ok(kernels::map(inputs[0], ClampFn { lo, hi }))
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        let helper = ClampBackward {
            min: self.min,
            max: self.max,
        };
        Ok(smallvec![Some(g.graph().record(helper, &[g, &inputs[0]])?)])
    }
    fn backward_fast(
        &self,
        g: &Tensor,
        inputs: &[&Tensor],
        _out: &Tensor,
        _needs: &[bool],
        grads: &mut [Option<Tensor>],
    ) -> Result<bool> {
        let helper = ClampBackward {
            min: self.min,
            max: self.max,
        };
        grads[0] = Some(helper.forward(&[g, inputs[0]])?);
        Ok(true)
    }
    fn jvp<'g>(
        &self,
        t: &[Option<Var<'g>>],
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<Option<Var<'g>>> {
        let helper = ClampBackward {
            min: self.min,
            max: self.max,
        };
        t[0].as_ref()
            .map(|t| t.graph().record(helper, &[t, &inputs[0]]))
            .transpose()
    }
}

slope_helper!(
    ClampBackward,
    "clamp_backward",
    |s| {
        let (lo, hi) = clamp_bounds(s.min, s.max)?;
        ClampBackwardFn { lo, hi }
    },
    |_s, _a, _g, _x| None
);

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Abs);
    reg.add_builtin(AbsBackward);
    reg.add_builtin(Sin);
    reg.add_builtin(SinBackward);
    reg.add_builtin(Cos);
    reg.add_builtin(CosBackward);
    reg.add_builtin(Clamp::default());
    reg.add_builtin(ClampBackward::default());
}

impl<'g> Var<'g> {
    /// `|self|` elementwise; the gradient is `sign(x)`, 0 at 0.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![-2.0, 0.0, 3.0], &[3])?);
    /// let y = x.abs();
    /// assert_eq!(y.value().to_f64_vec(), vec![2.0, 0.0, 3.0]);
    /// assert_eq!(y.sum().backward()?.wrt(&x).to_f64_vec(), vec![-1.0, 0.0, 1.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn abs(&self) -> Var<'g> {
        self.graph().record_or_panic(Abs, &[self])
    }

    /// Sine elementwise (radians).
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::scalar(0.0));
    /// assert_eq!(x.sin().value().item()?, 0.0);
    /// assert_eq!(x.sin().backward()?.wrt(&x).item()?, 1.0); // cos 0
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn sin(&self) -> Var<'g> {
        self.graph().record_or_panic(Sin, &[self])
    }

    /// Cosine elementwise (radians).
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::scalar(0.0));
    /// assert_eq!(x.cos().value().item()?, 1.0);
    /// assert_eq!(x.cos().backward()?.wrt(&x).item()?, 0.0); // -sin 0
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn cos(&self) -> Var<'g> {
        self.graph().record_or_panic(Cos, &[self])
    }

    /// Clamps every element into `[min, max]` (either bound may be `None`).
    /// The gradient is 1 where `min <= x <= max` (the bounds themselves
    /// included, as in PyTorch) and 0 outside. NaN stays NaN; if
    /// `min > max` every element becomes `max`. Errors when both bounds are
    /// `None` or a bound is NaN.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![-2.0, 0.5, 1.0, 3.0], &[4])?);
    /// let y = x.try_clamp(Some(0.0), Some(1.0))?;
    /// assert_eq!(y.value().to_f64_vec(), vec![0.0, 0.5, 1.0, 1.0]);
    /// assert_eq!(y.sum().backward()?.wrt(&x).to_f64_vec(), vec![0.0, 1.0, 1.0, 0.0]);
    /// assert!(x.try_clamp(None, None).is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn try_clamp(&self, min: Option<f64>, max: Option<f64>) -> Result<Var<'g>> {
        self.graph().record(Clamp { min, max }, &[self])
    }

    /// Clamps into `[min, max]`; panics when both bounds are `None` or one
    /// is NaN (see [`try_clamp`](Self::try_clamp)).
    #[track_caller]
    #[inline]
    pub fn clamp(&self, min: Option<f64>, max: Option<f64>) -> Var<'g> {
        or_panic(self.try_clamp(min, max))
    }

    /// `max(self, min)` elementwise, with `clamp`'s gradient rule; panics if `min` is NaN.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![-2.0, 3.0], &[2])?);
    /// assert_eq!(x.clamp_min(0.0).value().to_f64_vec(), vec![0.0, 3.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn clamp_min(&self, min: f64) -> Var<'g> {
        or_panic(self.try_clamp(Some(min), None))
    }

    /// `min(self, max)` elementwise, with `clamp`'s gradient rule; panics if `max` is NaN.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![-2.0, 3.0], &[2])?);
    /// assert_eq!(x.clamp_max(1.0).value().to_f64_vec(), vec![-2.0, 1.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn clamp_max(&self, max: f64) -> Var<'g> {
        or_panic(self.try_clamp(None, Some(max)))
    }
}

#[cfg(test)]
mod tests {
    use super::{AbsBackward, ClampBackward, CosBackward, SinBackward};
    use crate::{gradcheck, jvpcheck, DType, Error, Graph, Result, Tensor, Var};

    fn t(v: &[f64]) -> Tensor {
        Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-15)
    }

    #[test]
    fn forward_values() {
        let g = Graph::new();
        let x = g.variable(t(&[-1.3, 0.0, 0.4, 2.9]));
        assert_eq!(x.abs().value().to_f64_vec(), vec![1.3, 0.0, 0.4, 2.9]);
        // NumPy: np.sin(x), np.cos(x)
        let sin = [
            -0.963558185417193,
            0.0,
            0.3894183423086505,
            0.23924932921398243,
        ];
        let cos = [
            0.26749882862458735,
            1.0,
            0.9210609940028851,
            -0.9709581651495905,
        ];
        assert!(close(&x.sin().value().to_f64_vec(), &sin));
        assert!(close(&x.cos().value().to_f64_vec(), &cos));
        assert_eq!(
            x.clamp(Some(-1.0), Some(0.4)).value().to_f64_vec(),
            vec![-1.0, 0.0, 0.4, 0.4]
        );
        assert_eq!(
            x.clamp_min(0.1).value().to_f64_vec(),
            vec![0.1, 0.1, 0.4, 2.9]
        );
        assert_eq!(
            x.clamp_max(0.1).value().to_f64_vec(),
            vec![-1.3, 0.0, 0.1, 0.1]
        );
    }

    #[test]
    fn f32_and_f64_agree() {
        let g = Graph::new();
        let v = [-1.3, 0.2, 0.4, 2.9];
        let x32 = g.variable(t(&v).to_dtype(DType::F32));
        let x64 = g.variable(t(&v));
        fn f<'g>(x: &Var<'g>) -> Var<'g> {
            (x.abs() * x.sin() + x.cos() + x.clamp(Some(0.0), Some(1.0))).sum()
        }
        let (r32, r64) = (f(&x32), f(&x64));
        assert!((r32.value().item().unwrap() - r64.value().item().unwrap()).abs() < 1e-5);
        let g32 = r32.backward().unwrap().wrt(&x32);
        let g64 = r64.backward().unwrap().wrt(&x64);
        assert!(g32.allclose(&g64.to_dtype(DType::F32), 1e-5, 1e-5));
    }

    #[test]
    fn gradients() {
        let x = t(&[-1.3, 0.2, 0.4, 2.9]);
        gradcheck(|v| Ok(v[0].abs()), std::slice::from_ref(&x)).unwrap();
        gradcheck(|v| Ok(v[0].sin()), std::slice::from_ref(&x)).unwrap();
        gradcheck(|v| Ok(v[0].cos()), std::slice::from_ref(&x)).unwrap();
        gradcheck(
            |v| v[0].try_clamp(Some(-1.0), Some(0.3)),
            std::slice::from_ref(&x),
        )
        .unwrap();
        gradcheck(|v| Ok(v[0].clamp_min(0.3)), std::slice::from_ref(&x)).unwrap();
        // Two consumers of one value.
        gradcheck(
            |v| Ok(&v[0].sin() * &v[0].cos() + v[0].abs().clamp_max(1.0)),
            &[x],
        )
        .unwrap();
    }

    #[test]
    fn gradient_edge_rules() {
        let g = Graph::new();
        let x = g.variable(t(&[-1.0, 0.0, 0.5, 1.0, 2.0, f64::NAN]));
        let dabs = x.abs().sum().backward().unwrap().wrt(&x).to_f64_vec();
        assert_eq!(&dabs[..5], &[-1.0, 0.0, 1.0, 1.0, 1.0]);
        assert!(dabs[5].is_nan());
        // Bounds are inclusive; NaN gets no gradient and stays NaN.
        let y = x.clamp(Some(0.0), Some(1.0));
        assert!(y.value().to_f64_vec()[5].is_nan());
        let dclamp = y.sum().backward().unwrap().wrt(&x).to_f64_vec();
        assert_eq!(dclamp, vec![0.0, 1.0, 1.0, 1.0, 0.0, 0.0]);
        // min > max: everything becomes max, nothing is inside.
        let z = x.clamp(Some(1.5), Some(0.5));
        assert_eq!(&z.value().to_f64_vec()[..5], &[0.5; 5]);
        let dz = z.sum().backward().unwrap().wrt(&x).to_f64_vec();
        assert_eq!(dz, vec![0.0; 6]);
    }

    fn helper<'g, O: crate::Differentiable>(op: O, v: &[Var<'g>]) -> Result<Var<'g>> {
        v[0].graph().record(op, &[&v[0], &v[1]])
    }

    #[test]
    fn backward_helpers_have_gradients_and_tangents() {
        let g = t(&[0.4, -1.2, 0.9, 0.7]);
        let x = t(&[-0.5, 0.2, 1.0, 2.2]);
        let both = [g, x];
        gradcheck(|v| helper(AbsBackward, v), &both).unwrap();
        gradcheck(|v| helper(SinBackward, v), &both).unwrap();
        gradcheck(|v| helper(CosBackward, v), &both).unwrap();
        let clamp = ClampBackward {
            min: Some(0.0),
            max: Some(1.5),
        };
        gradcheck(|v| helper(clamp, v), &both).unwrap();
        jvpcheck(|v| helper(AbsBackward, v), &both).unwrap();
        jvpcheck(|v| helper(SinBackward, v), &both).unwrap();
        jvpcheck(|v| helper(CosBackward, v), &both).unwrap();
        jvpcheck(|v| helper(clamp, v), &both).unwrap();
        // Broadcast helper operands sum back to their shapes.
        let col = Tensor::from_vec(vec![0.3, -0.8], &[2, 1]).unwrap();
        gradcheck(|v| helper(SinBackward, v), &[col, t(&[0.1, 0.6, -1.1])]).unwrap();
    }

    #[test]
    fn tangents() {
        let x = t(&[-1.3, 0.2, 0.4, 2.9]);
        jvpcheck(|v| Ok(v[0].abs()), std::slice::from_ref(&x)).unwrap();
        jvpcheck(|v| Ok(v[0].sin()), std::slice::from_ref(&x)).unwrap();
        jvpcheck(|v| Ok(v[0].cos()), std::slice::from_ref(&x)).unwrap();
        jvpcheck(|v| v[0].try_clamp(Some(0.0), Some(1.0)), &[x]).unwrap();
    }

    #[test]
    fn errors() {
        let g = Graph::new();
        let x = g.variable(t(&[1.0, 2.0]));
        assert!(matches!(
            x.try_clamp(None, None),
            Err(Error::InvalidArgument { op: "clamp", .. })
        ));
        assert!(matches!(
            x.try_clamp(Some(f64::NAN), Some(1.0)),
            Err(Error::InvalidArgument { op: "clamp", .. })
        ));
        // Registered by name, with no bounds: the same typed error.
        assert!(g.apply("clamp", &[&x]).is_err());
        assert_eq!(
            g.apply("abs", &[&x]).unwrap().value().to_f64_vec(),
            vec![1.0, 2.0]
        );
    }

    #[test]
    fn second_derivatives_through_create_graph() {
        use crate::ops::testing::hvpcheck;
        let x = t(&[-1.3, 0.2, 0.4, 2.9]);
        hvpcheck(|x| Ok(x.sin()), &x).unwrap();
        hvpcheck(|x| Ok(x.cos()), &x).unwrap();
        hvpcheck(|x| Ok(&x.sin() * &x.cos()), &x).unwrap();
        // Piecewise linear ops have zero curvature, but their products do not.
        hvpcheck(|x| Ok(&x.abs() * x), &x).unwrap();
        hvpcheck(|x| Ok(&x.clamp(Some(-1.0), Some(1.0)) * &x.sin()), &x).unwrap();
    }

    #[test]
    fn fast_path_matches_var_backward() {
        use crate::ops::testing::fast_path_agrees;
        let x = [t(&[-1.3, 0.0, 0.4, 2.9])];
        fast_path_agrees(|v| Ok(v[0].abs() + v[0].sin() + v[0].cos()), &x).unwrap();
        fast_path_agrees(|v| v[0].try_clamp(Some(0.0), Some(1.0)), &x).unwrap();
    }
}

//! Unary elementwise ops of the core: `exp`, `log`, `tanh`, `relu`,
//! `sigmoid`, and the fused backward helpers (`tanh_backward`,
//! `sigmoid_backward`, `threshold_backward`, named as in PyTorch) that keep
//! a first-order backward to one kernel pass per op while staying
//! differentiable for gradients of gradients.

use smallvec::smallvec;

use super::{expect_inputs, Differentiable, GradInputs, OpRegistry};
use crate::error::Result;
use crate::graph::Var;
use crate::kernels;
use crate::kernels::functors::BinaryFn;
use crate::tensor::{Element, Tensor};

crate::unary_fn!(
    /// `e^x`
    ExpFn,
    |x| x.exp()
);
crate::unary_fn!(
    /// `ln x`
    LogFn,
    |x| x.ln()
);
crate::unary_fn!(
    /// `tanh x`
    TanhFn,
    |x| x.tanh_vectorisable()
);
crate::unary_fn!(
    /// `x < 0 ? 0 : x`, which keeps NaN as NaN (`max(x, 0)` would hide it).
    ReluFn,
    |x| if x < T::zero() { T::zero() } else { x }
);
crate::unary_fn!(
    /// The logistic sigmoid.
    SigmoidFn,
    |x| sigmoid(x)
);

/// Logistic sigmoid that never overflows: for negative x, use e^x / (1 + e^x).
#[inline(always)]
pub(crate) fn sigmoid<T: Element>(x: T) -> T {
    if x >= T::zero() {
        T::one() / (T::one() + (-x).exp())
    } else {
        let e = x.exp();
        e / (T::one() + e)
    }
}

crate::binary_fn!(
    /// `g (1 - y^2)`
    TanhBackwardFn,
    |g, y| g * (T::one() - y * y)
);
crate::binary_fn!(
    /// `g y (1 - y)`
    SigmoidBackwardFn,
    |g, y| g * y * (T::one() - y)
);
crate::binary_fn!(
    /// `x > 0 ? g : 0`
    ThresholdBackwardFn,
    |g, x| if x > T::zero() { g } else { T::zero() }
);

macro_rules! unary_op {
    ($(#[$m:meta])* $op:ident, $name:literal, $functor:ident, |$g:ident, $x:ident, $y:ident| $grad:expr, fast: |$fg:ident, $fx:ident, $fy:ident| $fast:expr, scalar: |$sg:ident, $sx:ident, $sy:ident| $scalar:expr) => {
        unary_op!($(#[$m])* $op, $name, $functor, |$g, $x, $y| $grad, |$g, $x, $y| $grad, fast: |$fg, $fx, $fy| $fast, scalar: |$sg, $sx, $sy| $scalar);
    };
    ($(#[$m:meta])* $op:ident, $name:literal, $functor:ident, |$g:ident, $x:ident, $y:ident| $grad:expr, |$tg:ident, $tx:ident, $ty:ident| $tangent:expr, fast: |$fg:ident, $fx:ident, $fy:ident| $fast:expr, scalar: |$sg:ident, $sx:ident, $sy:ident| $scalar:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $op;

        impl Differentiable for $op {
            fn name(&self) -> &str {
                $name
            }
            fn arity(&self) -> Option<usize> {
                Some(1)
            }
            // Inlined into `record` (the binary ops' forward is, by the
            // inliner's own choice; tanh's two polynomial arms are past its
            // threshold): a call takes the input's address, which keeps the
            // `Var` on the stack and copies it there by 16-byte loads of
            // smaller stores (see `tensor/word.rs`).
            #[inline(always)]
            fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
                expect_inputs($name, inputs, 1)?;
                Ok(kernels::map(inputs[0], $functor))
            }
            fn backward<'g>(
                &self,
                $g: &Var<'g>,
                inputs: &[Var<'g>],
                $y: &Var<'g>,
            ) -> Result<GradInputs<'g>> {
                let $x = &inputs[0];
                let _ = ($x, $y);
                Ok(smallvec![Some($grad)])
            }
            fn backward_fast(
                &self,
                $fg: &Tensor,
                inputs: &[&Tensor],
                $fy: &Tensor,
                _needs: &[bool],
                grads: &mut [Option<Tensor>],
            ) -> Result<bool> {
                let $fx = inputs[0];
                let _ = ($fx, $fy);
                grads[0] = Some($fast);
                Ok(true)
            }
            crate::scalar_rule!(arity 1, |$sg, $sx, $sy, d| d[0] = $scalar);
            // The tangent rule is the backward formula with the tangent in
            // place of the gradient: each of these ops is elementwise, so its
            // Jacobian is diagonal and J t = J^T t.
            fn jvp<'g>(
                &self,
                tangents: &[Option<Var<'g>>],
                inputs: &[Var<'g>],
                $ty: &Var<'g>,
            ) -> Result<Option<Var<'g>>> {
                let $tx = &inputs[0];
                let _ = ($tx, $ty);
                tangents[0].as_ref().map(|$tg| Ok($tangent)).transpose()
            }
        }
    };
}

unary_op!(
    /// `e^x`.
    Exp, "exp", ExpFn, |g, _x, y| g.try_mul(y)?,
    fast: |g, _x, y| kernels::zip("exp", g, y, crate::kernels::functors::Mul)?,
    scalar: |g, _x, y| g * y
);
unary_op!(
    /// Natural logarithm.
    Log, "log", LogFn, |g, x, _y| g.try_div(x)?,
    fast: |g, x, _y| kernels::zip("log", g, x, crate::kernels::functors::Div)?,
    scalar: |g, x, _y| g / x[0]
);
unary_op!(
    /// Hyperbolic tangent.
    Tanh, "tanh", TanhFn, |g, _x, y| g.graph().record(TanhBackward, &[g, y])?,
    fast: |g, _x, y| kernels::zip("tanh", g, y, TanhBackwardFn)?,
    scalar: |g, _x, y| TanhBackwardFn.call(g, y)
);
unary_op!(
    /// `max(x, 0)`; the gradient at 0 is 0 (as in PyTorch).
    Relu, "relu", ReluFn, |g, x, _y| g.graph().record(ThresholdBackward, &[g, x])?,
    fast: |g, x, _y| kernels::zip("relu", g, x, ThresholdBackwardFn)?,
    scalar: |g, x, _y| ThresholdBackwardFn.call(g, x[0])
);
unary_op!(
    /// Logistic sigmoid `1 / (1 + e^-x)`, computed without overflow.
    Sigmoid, "sigmoid", SigmoidFn, |g, _x, y| g.graph().record(SigmoidBackward, &[g, y])?,
    fast: |g, _x, y| kernels::zip("sigmoid", g, y, SigmoidBackwardFn)?,
    scalar: |g, _x, y| SigmoidBackwardFn.call(g, y)
);

macro_rules! binary_helper_op {
    ($(#[$m:meta])* $op:ident, $name:literal, $functor:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $op;

        impl $op {
            fn compute(inputs: &[&Tensor]) -> Result<Tensor> {
                expect_inputs($name, inputs, 2)?;
                kernels::zip($name, inputs[0], inputs[1], $functor)
            }
        }
    };
}

binary_helper_op!(
    /// `g * (1 - y^2)`: the backward of `tanh` given its output `y`.
    TanhBackward, "tanh_backward", TanhBackwardFn
);
binary_helper_op!(
    /// `g * y * (1 - y)`: the backward of `sigmoid` given its output `y`.
    SigmoidBackward, "sigmoid_backward", SigmoidBackwardFn
);
binary_helper_op!(
    /// `g` where `x > 0`, else 0: the backward of `relu` given its input `x`.
    ThresholdBackward, "threshold_backward", ThresholdBackwardFn
);

impl Differentiable for TanhBackward {
    fn name(&self) -> &str {
        "tanh_backward"
    }
    fn arity(&self) -> Option<usize> {
        Some(2)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Self::compute(inputs)
    }
    fn backward<'g>(
        &self,
        g2: &Var<'g>,
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        let (g, y) = (&inputs[0], &inputs[1]);
        // d/dg = 1 - y^2 (the same op again); d/dy = -2 g y.
        let dg = g
            .requires_grad()
            .then(|| g.graph().record(TanhBackward, &[g2, y]))
            .transpose()?;
        let dy = y
            .requires_grad()
            .then(|| super::unbroadcast(g2.try_mul(g)?.try_mul(y)?.mul_scalar(-2.0), y))
            .transpose()?;
        Ok(smallvec![
            dg.map(|d| super::unbroadcast(d, g)).transpose()?,
            dy
        ])
    }
    fn jvp<'g>(
        &self,
        t: &[Option<Var<'g>>],
        inputs: &[Var<'g>],
        out: &Var<'g>,
    ) -> Result<Option<Var<'g>>> {
        let (g, y) = (&inputs[0], &inputs[1]);
        super::sum_tangents(
            out.shape(),
            [
                t[0].as_ref()
                    .map(|tg| g.graph().record(TanhBackward, &[tg, y])),
                t[1].as_ref()
                    .map(|ty| Ok(g.try_mul(y)?.try_mul(ty)?.mul_scalar(-2.0))),
            ],
        )
    }
}

impl Differentiable for SigmoidBackward {
    fn name(&self) -> &str {
        "sigmoid_backward"
    }
    fn arity(&self) -> Option<usize> {
        Some(2)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Self::compute(inputs)
    }
    fn backward<'g>(
        &self,
        g2: &Var<'g>,
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        let (g, y) = (&inputs[0], &inputs[1]);
        // d/dg = y (1 - y); d/dy = g (1 - 2y).
        let dg = g
            .requires_grad()
            .then(|| super::unbroadcast(g.graph().record(SigmoidBackward, &[g2, y])?, g))
            .transpose()?;
        let dy = y
            .requires_grad()
            .then(|| {
                super::unbroadcast(
                    g2.try_mul(g)?
                        .try_mul(&y.mul_scalar(-2.0).add_scalar(1.0))?,
                    y,
                )
            })
            .transpose()?;
        Ok(smallvec![dg, dy])
    }
    fn jvp<'g>(
        &self,
        t: &[Option<Var<'g>>],
        inputs: &[Var<'g>],
        out: &Var<'g>,
    ) -> Result<Option<Var<'g>>> {
        let (g, y) = (&inputs[0], &inputs[1]);
        super::sum_tangents(
            out.shape(),
            [
                t[0].as_ref()
                    .map(|tg| g.graph().record(SigmoidBackward, &[tg, y])),
                t[1].as_ref()
                    .map(|ty| g.try_mul(&y.mul_scalar(-2.0).add_scalar(1.0))?.try_mul(ty)),
            ],
        )
    }
}

impl Differentiable for ThresholdBackward {
    fn name(&self) -> &str {
        "threshold_backward"
    }
    fn arity(&self) -> Option<usize> {
        Some(2)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Self::compute(inputs)
    }
    fn backward<'g>(
        &self,
        g2: &Var<'g>,
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        let (g, x) = (&inputs[0], &inputs[1]);
        // Piecewise constant in x: no gradient flows to x.
        let dg = g
            .requires_grad()
            .then(|| super::unbroadcast(g.graph().record(ThresholdBackward, &[g2, x])?, g))
            .transpose()?;
        Ok(smallvec![dg, None])
    }
    fn jvp<'g>(
        &self,
        t: &[Option<Var<'g>>],
        inputs: &[Var<'g>],
        out: &Var<'g>,
    ) -> Result<Option<Var<'g>>> {
        let x = &inputs[1];
        super::sum_tangents(
            out.shape(),
            [t[0]
                .as_ref()
                .map(|tg| tg.graph().record(ThresholdBackward, &[tg, x]))],
        )
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Exp);
    reg.add_builtin(Log);
    reg.add_builtin(Tanh);
    reg.add_builtin(Relu);
    reg.add_builtin(Sigmoid);
    reg.add_builtin(TanhBackward);
    reg.add_builtin(SigmoidBackward);
    reg.add_builtin(ThresholdBackward);
}

impl<'g> Var<'g> {
    /// `e^self`.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::scalar(0.0));
    /// assert_eq!(x.exp().value().item()?, 1.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn exp(&self) -> Var<'g> {
        self.graph().record_or_panic(Exp, &[self])
    }

    /// Natural logarithm (NaN for negative inputs, -inf at 0).
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// assert_eq!(g.variable(Tensor::scalar(1.0)).log().value().item()?, 0.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn log(&self) -> Var<'g> {
        self.graph().record_or_panic(Log, &[self])
    }

    /// Hyperbolic tangent.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// assert_eq!(g.variable(Tensor::scalar(0.0)).tanh().value().item()?, 0.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn tanh(&self) -> Var<'g> {
        self.graph().record_or_panic(Tanh, &[self])
    }

    /// `max(self, 0)` elementwise.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![-1.0, 2.0], &[2])?);
    /// assert_eq!(x.relu().value().to_f64_vec(), vec![0.0, 2.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn relu(&self) -> Var<'g> {
        self.graph().record_or_panic(Relu, &[self])
    }

    /// Logistic sigmoid.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// assert_eq!(g.variable(Tensor::scalar(0.0)).sigmoid().value().item()?, 0.5);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn sigmoid(&self) -> Var<'g> {
        self.graph().record_or_panic(Sigmoid, &[self])
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, Graph, Tensor};

    fn t(v: &[f64]) -> Tensor {
        Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
    }

    #[test]
    fn forward_values() {
        let g = Graph::new();
        let x = g.variable(t(&[-1.0, 0.0, 2.0]));
        assert_eq!(
            x.exp().value().to_f64_vec(),
            vec![(-1f64).exp(), 1.0, 2f64.exp()]
        );
        assert_eq!(x.relu().value().to_f64_vec(), vec![0.0, 0.0, 2.0]);
        assert_eq!(
            x.tanh().value().to_f64_vec(),
            vec![(-1f64).tanh(), 0.0, 2f64.tanh()]
        );
        let s = x.sigmoid().value().to_f64_vec();
        assert!((s[0] - 1.0 / (1.0 + 1f64.exp())).abs() < 1e-15);
        assert_eq!(s[1], 0.5);
        let p = g.variable(t(&[1.0, std::f64::consts::E]));
        assert_eq!(p.log().value().to_f64_vec(), vec![0.0, 1.0]);
    }

    #[test]
    fn sigmoid_is_stable_at_extremes() {
        let g = Graph::new();
        let x = g.variable(t(&[-1e4, 1e4]));
        let s = x.sigmoid();
        assert_eq!(s.value().to_f64_vec(), vec![0.0, 1.0]);
        let grad = s.sum().backward().unwrap().wrt(&x);
        assert!(grad.all_finite());
    }

    #[test]
    fn relu_keeps_nan() {
        let g = Graph::new();
        let x = g.variable(t(&[f64::NAN]));
        assert!(x.relu().value().item().unwrap().is_nan());
    }

    #[test]
    fn gradients() {
        let x = t(&[-0.8, 0.3, 1.7]);
        gradcheck(|v| Ok(v[0].exp()), &[x.clone()]).unwrap();
        gradcheck(|v| Ok(v[0].tanh()), &[x.clone()]).unwrap();
        gradcheck(|v| Ok(v[0].sigmoid()), &[x.clone()]).unwrap();
        gradcheck(|v| Ok(v[0].relu()), &[x.clone()]).unwrap();
        gradcheck(|v| Ok(v[0].log()), &[t(&[0.5, 1.3, 2.9])]).unwrap();
        // Two consumers of one value.
        gradcheck(|v| Ok(&v[0].tanh() * &v[0].sigmoid() + v[0].exp()), &[x]).unwrap();
    }

    #[test]
    fn backward_helpers_have_gradients() {
        let g = t(&[0.4, -1.2, 0.9]);
        let y = t(&[0.3, -0.6, 0.8]);
        let x = t(&[-0.5, 0.2, 1.0]);
        use super::{SigmoidBackward, TanhBackward, ThresholdBackward};
        gradcheck(
            |v| v[0].graph().record(TanhBackward, &[&v[0], &v[1]]),
            &[g.clone(), y.clone()],
        )
        .unwrap();
        gradcheck(
            |v| v[0].graph().record(SigmoidBackward, &[&v[0], &v[1]]),
            &[g.clone(), y],
        )
        .unwrap();
        gradcheck(
            |v| v[0].graph().record(ThresholdBackward, &[&v[0], &v[1]]),
            &[g, x],
        )
        .unwrap();
    }

    #[test]
    fn tangents() {
        let x = t(&[-0.8, 0.3, 1.7]);
        crate::jvpcheck(|v| Ok(v[0].exp()), &[x.clone()]).unwrap();
        crate::jvpcheck(|v| Ok(v[0].tanh()), &[x.clone()]).unwrap();
        crate::jvpcheck(|v| Ok(v[0].sigmoid()), &[x.clone()]).unwrap();
        crate::jvpcheck(|v| Ok(v[0].relu()), &[x.clone()]).unwrap();
        crate::jvpcheck(|v| Ok(v[0].log()), &[t(&[0.5, 1.3, 2.9])]).unwrap();
        use super::{SigmoidBackward, TanhBackward, ThresholdBackward};
        let y = t(&[0.3, -0.6, 0.8]);
        crate::jvpcheck(
            |v| v[0].graph().record(TanhBackward, &[&v[0], &v[1]]),
            &[x.clone(), y.clone()],
        )
        .unwrap();
        crate::jvpcheck(
            |v| v[0].graph().record(SigmoidBackward, &[&v[0], &v[1]]),
            &[x.clone(), y.clone()],
        )
        .unwrap();
        crate::jvpcheck(
            |v| v[0].graph().record(ThresholdBackward, &[&v[0], &v[1]]),
            &[x, y],
        )
        .unwrap();
    }
}

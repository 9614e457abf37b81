//! Unary elementwise ops of the core: `exp`, `log`, `tanh`, `relu` and
//! `sigmoid`, each one rule (see [`rule`](super::rule)).

use super::rule::{unary_method, Block, Cmp, Num, SlopeOf, Unary, UnaryRule, KINK_MARGIN};
use super::OpRegistry;
use crate::core::graph::Var;
use crate::tensor::math::exp_f32_block;
use crate::tensor::Element;

/// `e^x`; its derivative is its output.
#[derive(Clone, Copy, Debug, Default)]
pub struct Exp;

impl UnaryRule for Exp {
    const NAME: &'static str = "exp";
    const SLOPE_OF: SlopeOf = SlopeOf::Output;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        x.exp_vectorisable()
    }
    const BLOCKS: bool = true;
    #[inline(always)]
    fn value_block(self, x: Block) -> Block {
        exp_f32_block(x)
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, y: &N) -> N {
        g.mul(y)
    }
    fn domain(x: f64) -> bool {
        x < 3.0
    }
}

/// Natural logarithm (NaN for negative inputs, -inf at 0).
#[derive(Clone, Copy, Debug, Default)]
pub struct Log;

impl UnaryRule for Log {
    const NAME: &'static str = "log";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        x.ln()
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        g.div(x)
    }
    fn domain(x: f64) -> bool {
        x > 0.2
    }
}

/// Hyperbolic tangent; `tanh' = 1 - tanh²`, from the output.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tanh;

impl UnaryRule for Tanh {
    const NAME: &'static str = "tanh";
    const SLOPE_OF: SlopeOf = SlopeOf::Output;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        x.tanh_vectorisable()
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, y: &N) -> N {
        g.mul(&y.mul(y).rsub(1.0))
    }
}

/// `max(x, 0)`, keeping NaN as NaN (`max(x, 0)` would hide it); the
/// gradient at 0 is 0 (as in PyTorch).
#[derive(Clone, Copy, Debug, Default)]
pub struct Relu;

impl UnaryRule for Relu {
    const NAME: &'static str = "relu";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        if x < T::zero() {
            T::zero()
        } else {
            x
        }
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        x.select(Cmp::Gt, &x.lit(0.0), g, &g.lit(0.0))
    }
    fn domain(x: f64) -> bool {
        x.abs() > KINK_MARGIN
    }
}

/// Logistic sigmoid `1 / (1 + e^-x)`, computed without overflow;
/// `σ' = σ (1 - σ)`, from the output.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sigmoid;

impl UnaryRule for Sigmoid {
    const NAME: &'static str = "sigmoid";
    const SLOPE_OF: SlopeOf = SlopeOf::Output;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        sigmoid(x)
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, y: &N) -> N {
        g.mul(y).mul(&y.rsub(1.0))
    }
}

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

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Unary(Exp));
    reg.add_builtin(Unary(Log));
    reg.add_builtin(Unary(Tanh));
    reg.add_builtin(Unary(Relu));
    reg.add_builtin(Unary(Sigmoid));
}

impl<'g> Var<'g> {
    unary_method! {
        /// `e^self`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::scalar(0.0));
        /// assert_eq!(x.exp().value().try_item()?, 1.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_exp / exp => Exp
    }

    unary_method! {
        /// Natural logarithm (NaN for negative inputs, -inf at 0).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// assert_eq!(g.variable(Tensor::scalar(1.0)).log().value().try_item()?, 0.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_log / log => Log
    }

    unary_method! {
        /// Hyperbolic tangent.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// assert_eq!(g.variable(Tensor::scalar(0.0)).tanh().value().try_item()?, 0.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_tanh / tanh => Tanh
    }

    unary_method! {
        /// `max(self, 0)` elementwise.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![-1.0, 2.0], &[2])?);
        /// assert_eq!(x.relu().value().to_f64_vec(), vec![0.0, 2.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_relu / relu => Relu
    }

    unary_method! {
        /// Logistic sigmoid.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// assert_eq!(g.variable(Tensor::scalar(0.0)).sigmoid().value().try_item()?, 0.5);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_sigmoid / sigmoid => Sigmoid
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, Graph};

    use crate::tensor::test_util::t;

    /// Each `try_` form returns the error its plain form panics with, and
    /// otherwise the same value.
    #[test]
    fn try_forms_return_the_error_instead_of_panicking() {
        let g = Graph::new();
        let ints = g.constant(crate::Tensor::vector(&[1i64, 2]));
        let tried = [
            ints.try_tanh(),
            ints.try_exp(),
            ints.try_log(),
            ints.try_sigmoid(),
            ints.try_sqrt(),
            ints.try_silu(),
            ints.try_gelu(),
            ints.try_mean(),
            ints.try_leaky_relu(0.1),
            ints.try_powf(2.0),
        ];
        for (i, r) in tried.into_iter().enumerate() {
            assert!(r.is_err(), "try form {i} accepted an integer tensor");
        }
        let x = g.variable(t(&[0.5, -2.0]));
        let same = |a: crate::Result<crate::Var<'_>>, b: crate::Var<'_>| {
            assert_eq!(a.unwrap().value().to_f64_vec(), b.value().to_f64_vec());
        };
        same(x.try_tanh(), x.tanh());
        same(x.try_relu(), x.relu());
        same(x.try_gelu(), x.gelu());
        same(x.try_mean(), x.mean());
        same(x.try_leaky_relu(0.1), x.leaky_relu(0.1));
        same(x.try_powf(2.0), x.powf(2.0));
        same(x.try_clamp_min(0.0), x.clamp_min(0.0));
        same(x.try_squeeze(), x.squeeze());
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
        assert!(x.relu().value().item().is_nan());
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
    fn tangents() {
        let x = t(&[-0.8, 0.3, 1.7]);
        crate::jvpcheck(|v| Ok(v[0].exp()), &[x.clone()]).unwrap();
        crate::jvpcheck(|v| Ok(v[0].tanh()), &[x.clone()]).unwrap();
        crate::jvpcheck(|v| Ok(v[0].sigmoid()), &[x.clone()]).unwrap();
        crate::jvpcheck(|v| Ok(v[0].relu()), &[x.clone()]).unwrap();
        crate::jvpcheck(|v| Ok(v[0].log()), &[t(&[0.5, 1.3, 2.9])]).unwrap();
    }
}

//! Powers: `pow` (tensor or scalar exponent, broadcasting) and `sqrt`, with
//! the fused backward helpers `pow_backward_self` (`g * y * x^(y-1)`) and
//! `pow_backward_exponent` (`g * x^y * ln x`), named after PyTorch's
//! functions, each one kernel pass and differentiable again.
//!
//! A scalar exponent (`powf`) is the same `pow` op with a 0-d exponent: it is
//! stored inline (no allocation, no broadcast tensor), and both the forward
//! and `pow_backward_self` dispatch a 0-d exponent to PyTorch's fast paths
//! (`x*x` for 2, `sqrt` for 0.5, `1/x` for -1, ...) instead of `powf`.
//!
//! Edge rules, as in PyTorch: the gradient with respect to the base is 0
//! where the exponent is 0 (so `0^0` does not give `0 * inf`); the gradient
//! with respect to the exponent is `x^y ln x`, defined as 0 where `x == 0`
//! and `y >= 0`, and NaN for a negative base (not differentiable in y).

use crate::base::fallible::fallible;

use super::rule::{unary_method, Num, OpFacts, SlopeOf, Unary, UnaryRule};
use super::{unbroadcast, unbroadcast_tensor, Differentiable, Node, OpRegistry, StructuredOp};
use crate::base::error::or_panic;
use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::{sample_tensor, BatchContext, Batched};
use crate::kernels;
use crate::kernels::power::{
    with_power, PowBackwardExponentFn, PowBackwardSelfFn, PowFn, ScaledPowFn, ZeroFn,
};
use crate::tensor::{Element, Repr, Tensor};

/// A 0-d tensor's value, or `None` for a dense one.
fn scalar_value(t: &Tensor) -> Option<f64> {
    match t.repr() {
        Repr::F32(v) => Some(f64::from(v.f32())),
        Repr::F64(v) => Some(v.f64()),
        _ => None,
    }
}

fn same_dtype(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    kernels::elementwise::common_dtype(op, a, b).map(|_| ())
}

/// `x^y` elementwise, broadcasting (PyTorch's `pow`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Pow;

/// The [`StructuredOp`] methods of the three pow ops, from their
/// `partial(i, v, n)`: `v` times the derivative in input `i`, elementwise
/// (and the batching rule of an elementwise op).
/// The backward is the partial of the output's gradient, summed back to the
/// input's shape; the tangent is the partial of the input's tangent: one
/// formula for both.
macro_rules! partial_rules {
    () => {
        const HOLDS: crate::Holds = crate::Holds::Settings;
        // Elementwise, broadcasting: the batch aligned as one more axis.
        fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
            super::batching::elementwise(self, x)
        }
        fn grad<'g>(&self, i: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            unbroadcast(Self::partial(i, g, n)?, n.x(i))
        }
        fn tangent<'g>(&self, i: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            Self::partial(i, t, n)
        }
    };
}

impl Pow {
    fn partial<'g>(i: usize, v: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (x, y) = (n.x(0), n.x(1));
        match i {
            0 => pow_backward_self(v, x, y),
            _ => pow_backward_exponent(v, x, y),
        }
    }
}

impl StructuredOp for Pow {
    const NAME: &'static str = "pow";
    const INPUTS: &'static [&'static str] = &["input", "exponent"];
    partial_rules!();
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (x, y) = (inputs[0], inputs[1]);
        match scalar_value(y) {
            Some(e) => {
                same_dtype("pow", x, y)?;
                with_power!(e, p => kernels::elementwise::map_op("pow", x, p))
            }
            None => kernels::zip("pow", x, y, PowFn),
        }
    }
    fn grad_fast(&self, i: usize, g: &Tensor, x: &[&Tensor], _: &Tensor) -> Option<Result<Tensor>> {
        let args = [g, x[0], x[1]];
        let d = match i {
            0 => Differentiable::forward(&PowBackwardSelf, &args),
            _ => Differentiable::forward(&PowBackwardExponent, &args),
        };
        Some(d.and_then(|d| unbroadcast_tensor(d, x[i])))
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            arity: Some(2),
            elementwise: true,
            // Bases away from 0 (where x^y ln x and negative powers blow
            // up) and moderate exponents.
            domain: Some(|v| (0.2..5.0).contains(&v[0]) && v[1].abs() < 2.5),
            tangent: true,
            second_derivative: true,
            example: None,
            sample_inputs: None,
        }
    }
}

/// `g * y * x^(y-1)` (0 where `y == 0`): the backward of `pow` for its base.
#[derive(Clone, Copy, Debug, Default)]
pub struct PowBackwardSelf;

/// `g * x^y * ln x` (0 where `x == 0` and `y >= 0`): the backward of `pow`
/// for its exponent.
#[derive(Clone, Copy, Debug, Default)]
pub struct PowBackwardExponent;

/// The facts of the two backward helpers: elementwise in effect, but
/// declared with sample inputs (a gradient, bases in [0.7, 2.3], an
/// exponent of lower rank in [-1.5, 1.5]) rather than as elementwise ops,
/// which the suites of the user-facing elementwise ops would apply.
fn backward_facts() -> OpFacts {
    OpFacts {
        tangent: true,
        second_derivative: true,
        sample_inputs: Some(|seed| {
            vec![
                sample_tensor(&[2, 3], seed, 1.0),
                sample_tensor(&[2, 3], seed + 3, 0.8).map_f64(|v| v + 1.5),
                sample_tensor(&[3], seed + 5, 1.5),
            ]
        }),
        ..OpFacts::opaque(Some(3))
    }
}

fn pow_backward_self<'g>(g: &Var<'g>, x: &Var<'g>, y: &Var<'g>) -> Result<Var<'g>> {
    g.graph().record(PowBackwardSelf, &[g, x, y])
}

fn pow_backward_exponent<'g>(g: &Var<'g>, x: &Var<'g>, y: &Var<'g>) -> Result<Var<'g>> {
    g.graph().record(PowBackwardExponent, &[g, x, y])
}

/// `h * d^2(x^y)/dx dy = h * (x^(y-1) + y x^(y-1) ln x)`: the mixed second
/// derivative both helpers need.
fn pow_mixed<'g>(h: &Var<'g>, x: &Var<'g>, y: &Var<'g>) -> Result<Var<'g>> {
    let y1 = y.sub_scalar(1.0);
    h.try_mul(&x.try_pow(&y1)?)?
        .try_add(&pow_backward_exponent(&h.try_mul(y)?, x, &y1)?)
}

/// `h * d^2(x^y)/dy^2 = h * x^y (ln x)^2`, NaN-free where `x == 0`, `y >= 0`.
fn pow_exponent_second<'g>(h: &Var<'g>, x: &Var<'g>, y: &Var<'g>) -> Result<Var<'g>> {
    pow_backward_exponent(&pow_backward_exponent(h, x, y)?, x, &x.scalar_like(0.0))
}

impl PowBackwardSelf {
    /// d/dg = y x^(y-1); d/dx = g y (y-1) x^(y-2); d/dy = g * mixed.
    fn partial<'g>(i: usize, v: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (g, x, y) = (n.x(0), n.x(1), n.x(2));
        match i {
            0 => pow_backward_self(v, x, y),
            1 => pow_backward_self(&v.try_mul(g)?.try_mul(y)?, x, &y.sub_scalar(1.0)),
            _ => pow_mixed(&v.try_mul(g)?, x, y),
        }
    }
}

impl StructuredOp for PowBackwardSelf {
    const NAME: &'static str = "pow_backward_self";
    const INPUTS: &'static [&'static str] = &["grad", "input", "exponent"];
    partial_rules!();
    fn facts(&self) -> OpFacts {
        backward_facts()
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (g, x, y) = (inputs[0], inputs[1], inputs[2]);
        match scalar_value(y) {
            Some(c) => {
                same_dtype("pow_backward_self", x, y)?;
                if c == 0.0 {
                    kernels::zip("pow_backward_self", g, x, ZeroFn)
                } else {
                    with_power!(c - 1.0, p =>
                        kernels::zip("pow_backward_self", g, x, ScaledPowFn { c, p }))
                }
            }
            None => kernels::zip3("pow_backward_self", g, x, y, PowBackwardSelfFn),
        }
    }
}

impl PowBackwardExponent {
    /// d/dg = x^y ln x; d/dx = g * mixed; d/dy = g x^y (ln x)^2.
    fn partial<'g>(i: usize, v: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (g, x, y) = (n.x(0), n.x(1), n.x(2));
        match i {
            0 => pow_backward_exponent(v, x, y),
            1 => pow_mixed(&v.try_mul(g)?, x, y),
            _ => pow_exponent_second(&v.try_mul(g)?, x, y),
        }
    }
}

impl StructuredOp for PowBackwardExponent {
    const NAME: &'static str = "pow_backward_exponent";
    const INPUTS: &'static [&'static str] = &["grad", "input", "exponent"];
    partial_rules!();
    fn facts(&self) -> OpFacts {
        backward_facts()
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (g, x, y) = (inputs[0], inputs[1], inputs[2]);
        kernels::zip3(Self::NAME, g, x, y, PowBackwardExponentFn)
    }
}

/// Square root (NaN for negative inputs; the gradient at 0 is infinite);
/// `sqrt' = 1 / (2 sqrt)`, from the output.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sqrt;

impl UnaryRule for Sqrt {
    const NAME: &'static str = "sqrt";
    const SLOPE_OF: SlopeOf = SlopeOf::Output;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        x.sqrt()
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, y: &N) -> N {
        g.div(&y.scale(2.0))
    }
    fn domain(x: f64) -> bool {
        x > 0.2
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Pow);
    reg.add_builtin(PowBackwardSelf);
    reg.add_builtin(PowBackwardExponent);
    reg.add_builtin(Unary(Sqrt));
}

impl<'g> Var<'g> {
    fallible! {
        /// `self ^ exponent` elementwise, broadcasting. Gradients flow to both
        /// the base and the exponent (see the module docs for `x <= 0`).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![2.0, 3.0], &[2])?);
        /// let y = g.variable(Tensor::from_vec(vec![3.0, 2.0], &[2])?);
        /// let z = x.try_pow(&y)?;
        /// assert_eq!(z.value().to_f64_vec(), vec![8.0, 9.0]);
        /// let grads = z.sum().backward()?;
        /// assert_eq!(grads.wrt(&x).to_f64_vec(), vec![12.0, 6.0]); // y x^(y-1)
        /// assert!((grads.wrt(&y).to_f64_vec()[0] - 8.0 * 2f64.ln()).abs() < 1e-12); // x^y ln x
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_pow / pow(&self, exponent: &Var<'g>) -> Var<'g> {
            self.graph().record(Pow, &[self, exponent])
        }
    }

    /// `self ^ exponent` for a scalar exponent (in self's dtype, stored
    /// inline: nothing is allocated for it). Exponents 0, 1, 2, 3, ±0.5, -1
    /// and -2 use exact fast paths rather than `powf`.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1.5f32, -2.0], &[2])?);
    /// let y = x.powf(2.0);
    /// assert_eq!(y.value().to_vec::<f32>()?, vec![2.25, 4.0]);
    /// assert_eq!(y.sum().backward()?.wrt(&x).to_vec::<f32>()?, vec![3.0, -4.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn powf(&self, exponent: f64) -> Var<'g> {
        or_panic(self.try_powf(exponent))
    }

    /// [`powf`](Self::powf), returning the error (an input that is not a
    /// float tensor) instead of panicking.
    #[inline]
    pub fn try_powf(&self, exponent: f64) -> Result<Var<'g>> {
        self.graph()
            .record(Pow, &[self, &self.scalar_like(exponent)])
    }

    unary_method! {
        /// Square root elementwise.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![4.0, 9.0], &[2])?);
        /// let y = x.sqrt();
        /// assert_eq!(y.value().to_f64_vec(), vec![2.0, 3.0]);
        /// assert_eq!(y.sum().backward()?.wrt(&x).to_f64_vec(), vec![0.25, 1.0 / 6.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_sqrt / sqrt => Sqrt
    }
}

#[cfg(test)]
mod tests {
    use super::{PowBackwardExponent, PowBackwardSelf};
    use crate::{gradcheck, jvpcheck, Error, Graph, Result, Tensor, Var};

    use crate::tensor::test_util::tensor as t;

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| (x - y).abs() <= tol * (1.0 + y.abs()))
    }

    #[test]
    fn forward_values_with_broadcasting() {
        let g = Graph::new();
        let x = g.variable(t(&[0.5, 1.5, 2.0, 3.0, 0.8, 1.2], &[2, 3]));
        let y = g.variable(t(&[2.5, -1.3, 0.7], &[3]));
        let z = x.pow(&y);
        // NumPy: x ** y
        let expect = [
            0.1767766952966369,
            0.5903116621970373,
            1.624504792712471,
            15.588457268119896,
            1.3365432499889849,
            1.1361269771988887,
        ];
        assert!(close(&z.value().to_f64_vec(), &expect, 1e-15));
        let grads = z.sum().backward().unwrap();
        // NumPy: y * x ** (y - 1) and (x ** y * log(x)).sum(0)
        let dx = [
            0.8838834764831844,
            -0.5116034405707658,
            0.5685766774493648,
            12.99038105676658,
            -2.1718827812321004,
            0.6627407366993516,
        ];
        let dy = [17.003138448200662, -0.05889022535734573, 1.333161356073279];
        assert!(close(&grads.wrt(&x).to_f64_vec(), &dx, 1e-14));
        assert!(close(&grads.wrt(&y).to_f64_vec(), &dy, 1e-14));
    }

    #[test]
    fn scalar_exponent_fast_paths_match_powf() {
        let g = Graph::new();
        let v = [0.3, 1.0, 2.5, 7.0];
        let x = g.variable(t(&v, &[4]));
        for e in [0.0, 1.0, 2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.7, -2.3] {
            let y = x.powf(e);
            let expect: Vec<f64> = v.iter().map(|b: &f64| b.powf(e)).collect();
            assert!(close(&y.value().to_f64_vec(), &expect, 1e-15), "x^{e}");
            let dx = y.sum().backward().unwrap().wrt(&x).to_f64_vec();
            let expect: Vec<f64> = v
                .iter()
                .map(|b: &f64| if e == 0.0 { 0.0 } else { e * b.powf(e - 1.0) })
                .collect();
            assert!(close(&dx, &expect, 1e-14), "d x^{e}");
            // The tensor form with a 0-d exponent Var is the same op.
            let c = g.constant(Tensor::scalar(e));
            assert_eq!(x.pow(&c).value(), y.value());
        }
        // The exponent is inline: no tensor of x's shape was allocated for it.
        let before = g.value_count();
        let _ = x.powf(2.0);
        assert_eq!(g.value_count(), before + 2); // the 0-d constant and the output
    }

    #[test]
    fn f32_and_f64_agree() {
        let g = Graph::new();
        let x32 = g.variable(Tensor::from_vec(vec![0.7f32, 1.9, 2.4], &[3]).unwrap());
        let x64 = g.variable(t(&[0.7, 1.9, 2.4], &[3]));
        let y32 = g.variable(Tensor::from_vec(vec![1.3f32], &[1]).unwrap());
        let y64 = g.variable(t(&[1.3], &[1]));
        let r32 = (x32.pow(&y32) + x32.powf(-1.5) + x32.sqrt()).sum();
        let r64 = (x64.pow(&y64) + x64.powf(-1.5) + x64.sqrt()).sum();
        assert!((r32.value().item() - r64.value().item()).abs() < 1e-5);
        let (g32, g64) = (r32.backward().unwrap(), r64.backward().unwrap());
        assert!(g32
            .wrt(&x32)
            .allclose(&g64.wrt(&x64).to_dtype(crate::DType::F32), 1e-5, 1e-5));
        assert!((g32.wrt(&y32).item() - g64.wrt(&y64).item()).abs() < 1e-5);
    }

    #[test]
    fn gradients() {
        let x = t(&[0.5, 1.5, 2.0, 3.0, 0.8, 1.2], &[2, 3]);
        let y = t(&[2.5, -1.3, 0.7], &[3]);
        gradcheck(|v| v[0].try_pow(&v[1]), &[x.clone(), y.clone()]).unwrap();
        gradcheck(
            |v| v[1].try_pow(&v[0]),
            &[t(&[0.4, 1.1], &[2, 1]), y.map_f64(f64::abs)],
        )
        .unwrap();
        gradcheck(|v| v[0].try_pow(&v[1]), &[x.clone(), Tensor::scalar(1.7)]).unwrap();
        for e in [0.0, 1.0, 2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 2.2] {
            gradcheck(|v| Ok(v[0].powf(e)), std::slice::from_ref(&x)).unwrap();
        }
        // Integer exponents of negative bases are fine.
        gradcheck(|v| Ok(v[0].powf(3.0)), &[t(&[-1.5, 0.4, -0.2], &[3])]).unwrap();
        gradcheck(|v| Ok(v[0].sqrt()), std::slice::from_ref(&x)).unwrap();
        // Two consumers of one value.
        gradcheck(
            |v| Ok(&v[0].powf(2.0) * &v[0].sqrt() + v[0].pow(&v[0])),
            &[x],
        )
        .unwrap();
    }

    #[test]
    fn backward_helpers_have_gradients() {
        let g = t(&[0.4, -1.2, 0.9, 0.3, 1.1, -0.6], &[2, 3]);
        let x = t(&[0.7, 1.6, 2.2], &[3]);
        let y = t(&[1.8, -0.6], &[2, 1]);
        gradcheck(pbs, &[g.clone(), x.clone(), y.clone()]).unwrap();
        gradcheck(pbe, &[g.clone(), x.clone(), y.clone()]).unwrap();
        jvpcheck(pbs, &[g.clone(), x.clone(), y.clone()]).unwrap();
        jvpcheck(pbe, &[g.clone(), x.clone(), y]).unwrap();
        // The 0-d exponent fast path (what powf and sqrt use).
        for c in [0.5, 2.0, 1.0, 3.3] {
            gradcheck(
                |v| pbs(&[v[0].clone(), v[1].clone(), v[0].scalar_like(c)]),
                &[g.clone(), x.clone()],
            )
            .unwrap();
            jvpcheck(
                |v| pbs(&[v[0].clone(), v[1].clone(), v[0].scalar_like(c)]),
                &[g.clone(), x.clone()],
            )
            .unwrap();
        }
    }

    fn pbs<'g>(v: &[Var<'g>]) -> Result<Var<'g>> {
        v[0].graph().record(PowBackwardSelf, &[&v[0], &v[1], &v[2]])
    }

    fn pbe<'g>(v: &[Var<'g>]) -> Result<Var<'g>> {
        v[0].graph()
            .record(PowBackwardExponent, &[&v[0], &v[1], &v[2]])
    }

    #[test]
    fn tangents() {
        let x = t(&[0.5, 1.5, 2.0, 3.0, 0.8, 1.2], &[2, 3]);
        let y = t(&[2.5, -1.3, 0.7], &[3]);
        jvpcheck(|v| v[0].try_pow(&v[1]), &[x.clone(), y]).unwrap();
        jvpcheck(|v| Ok(v[0].powf(-1.5)), std::slice::from_ref(&x)).unwrap();
        jvpcheck(|v| Ok(v[0].sqrt()), &[x]).unwrap();
    }

    #[test]
    fn zero_and_negative_bases() {
        let g = Graph::new();
        // 0^0 = 1 with zero gradients (not 0 * inf = NaN).
        let x = g.variable(t(&[0.0, 0.0, -2.0, 2.0], &[4]));
        let y = g.variable(t(&[0.0, 2.0, 2.0, 0.0], &[4]));
        let z = x.pow(&y);
        assert_eq!(z.value().to_f64_vec(), vec![1.0, 0.0, 4.0, 1.0]);
        let grads = z.sum().backward().unwrap();
        assert_eq!(grads.wrt(&x).to_f64_vec(), vec![0.0, 0.0, -4.0, 0.0]);
        let dy = grads.wrt(&y).to_f64_vec();
        // x == 0 with y >= 0: 0. A negative base has no real derivative in y: NaN, as in PyTorch.
        assert_eq!(dy[0], 0.0);
        assert_eq!(dy[1], 0.0);
        assert!(dy[2].is_nan());
        assert_eq!(dy[3], 2f64.ln());
        // A scalar exponent of 0 gives a zero gradient even at 0.
        let x0 = g.variable(Tensor::scalar(0.0));
        assert_eq!(x0.powf(0.0).backward().unwrap().wrt(&x0).item(), 0.0);
        // sqrt: infinite slope at 0, NaN below.
        assert_eq!(x0.sqrt().backward().unwrap().wrt(&x0).item(), f64::INFINITY);
    }

    #[test]
    fn errors() {
        let g = Graph::new();
        let x = g.variable(t(&[1.0, 2.0, 3.0], &[3]));
        let x32 = g.variable(Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap());
        assert!(matches!(
            x.try_pow(&g.variable(t(&[1.0, 2.0], &[2]))),
            Err(Error::ShapeMismatch { op: "pow", .. })
        ));
        assert!(matches!(
            x.try_pow(&x32),
            Err(Error::DTypeMismatch { op: "pow", .. })
        ));
        assert!(matches!(
            x32.try_pow(&g.constant(Tensor::scalar(2.0))),
            Err(Error::DTypeMismatch { op: "pow", .. })
        ));
    }

    #[test]
    fn second_derivatives_through_create_graph() {
        use crate::ops::testing::hvpcheck;
        let x = t(&[0.5, 1.5, 2.0, 3.0, 0.8, 1.2], &[2, 3]);
        let y = t(&[2.5, -1.3, 0.7], &[3]);
        hvpcheck(|x| x.try_pow(&x.graph().constant(y.clone())), &x).unwrap();
        hvpcheck(|y| x_const(y, &x).try_pow(y), &y).unwrap();
        // The exponent depends on the base: mixed second derivatives too.
        hvpcheck(|x| x.try_pow(&x.mul_scalar(0.5).add_scalar(1.0)), &x).unwrap();
        for e in [2.0, 3.0, 0.5, -1.0, -2.0, 1.7] {
            hvpcheck(|x| Ok(x.powf(e)), &x).unwrap();
        }
        hvpcheck(|x| Ok(x.sqrt()), &x).unwrap();
    }

    fn x_const<'g>(like: &Var<'g>, x: &Tensor) -> Var<'g> {
        like.graph().constant(x.clone())
    }

    #[test]
    fn fast_path_matches_var_backward() {
        use crate::ops::testing::fast_path_agrees;
        let x = t(&[0.5, 1.5, 2.0, 3.0, 0.8, 1.2], &[2, 3]);
        let y = t(&[2.5, -1.3, 0.7], &[3]);
        fast_path_agrees(|v| v[0].try_pow(&v[1]), &[x.clone(), y]).unwrap();
        fast_path_agrees(|v| v[0].try_pow(&v[1]), &[x.clone(), Tensor::scalar(2.0)]).unwrap();
        fast_path_agrees(|v| Ok(v[0].powf(-0.5) + v[0].sqrt()), &[x]).unwrap();
    }
}

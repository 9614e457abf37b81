//! GELU, `x Φ(x)`, in PyTorch's two forms: exact (the normal CDF through
//! `erfc`, accurate in the far negative tail) and the tanh approximation,
//! with the fused backward helper `gelu_backward` (one kernel pass) whose
//! own gradient, `gelu''`, is written with `Var` ops.

use smallvec::smallvec;

use super::{expect_inputs, sum_tangents, unbroadcast, Differentiable, GradInputs, OpRegistry};
use crate::error::Result;
use crate::graph::Var;
use crate::kernels::{self, BinaryFn, UnaryFn};
use crate::tensor::{DType, Element, Tensor};

/// Which form of GELU to compute (PyTorch's `approximate` argument).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GeluApproximate {
    /// `x Φ(x)` with the exact normal CDF (PyTorch's `approximate="none"`).
    #[default]
    None,
    /// `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))` (PyTorch's `approximate="tanh"`).
    Tanh,
}

/// GELU, `x Φ(x)`, exactly or with the tanh approximation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Gelu {
    /// Exact (the default) or tanh-approximated.
    pub approximate: GeluApproximate,
}

/// `g * gelu'(x)`: the backward of `gelu`.
#[derive(Clone, Copy, Debug, Default)]
pub struct GeluBackward {
    /// Exact (the default) or tanh-approximated.
    pub approximate: GeluApproximate,
}

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const FRAC_1_SQRT_2: f64 = std::f64::consts::FRAC_1_SQRT_2;
/// 1 / sqrt(2π), the standard normal density at 0.
const NORMAL_PDF_0: f64 = 0.398_942_280_401_432_7;
const GELU_TANH_A: f64 = 0.044715;

/// `erfc` in the element's own precision (libm's `erfcf` for f32).
#[inline(always)]
fn erfc<T: Element>(x: T) -> T {
    match T::DTYPE {
        DType::F32 => T::from_f64(f64::from(libm::erfcf(x.to_f64() as f32))),
        DType::F64 => T::from_f64(libm::erfc(x.to_f64())),
    }
}

/// The normal CDF Φ(x) = erfc(-x/√2)/2: accurate in the far negative tail,
/// where `(1 + erf(x/√2))/2` cancels to 0.
#[inline(always)]
fn normal_cdf<T: Element>(x: T) -> T {
    T::from_f64(0.5) * erfc(-x * T::from_f64(FRAC_1_SQRT_2))
}

#[derive(Clone, Copy, Debug)]
struct GeluFn;

impl UnaryFn for GeluFn {
    #[inline(always)]
    fn call<T: Element>(self, x: T) -> T {
        x * normal_cdf(x)
    }
}

#[derive(Clone, Copy, Debug)]
struct GeluTanhFn;

impl UnaryFn for GeluTanhFn {
    #[inline(always)]
    fn call<T: Element>(self, x: T) -> T {
        let k = T::from_f64(SQRT_2_OVER_PI);
        let inner = k * (x + T::from_f64(GELU_TANH_A) * x * x * x);
        T::from_f64(0.5) * x * (T::one() + inner.tanh_vectorisable())
    }
}

#[derive(Clone, Copy, Debug)]
struct GeluBackwardFn;

impl BinaryFn for GeluBackwardFn {
    #[inline(always)]
    fn call<T: Element>(self, g: T, x: T) -> T {
        // Φ(x) + x φ(x)
        let pdf = T::from_f64(NORMAL_PDF_0) * (T::from_f64(-0.5) * x * x).exp();
        g * (normal_cdf(x) + x * pdf)
    }
}

#[derive(Clone, Copy, Debug)]
struct GeluTanhBackwardFn;

impl BinaryFn for GeluTanhBackwardFn {
    #[inline(always)]
    fn call<T: Element>(self, g: T, x: T) -> T {
        // With u = k (x + a x³) and t = tanh u:
        // d/dx = 0.5 (1 + t) + 0.5 x (1 - t²) k (1 + 3 a x²).
        let (k, a, half) = (
            T::from_f64(SQRT_2_OVER_PI),
            T::from_f64(GELU_TANH_A),
            T::from_f64(0.5),
        );
        let x2 = x * x;
        let t = (k * (x + a * x2 * x)).tanh_vectorisable();
        let du = k * (T::one() + T::from_f64(3.0) * a * x2);
        g * (half * (T::one() + t) + half * x * (T::one() - t * t) * du)
    }
}

impl Differentiable for Gelu {
    fn name(&self) -> &str {
        "gelu"
    }
    fn arity(&self) -> Option<usize> {
        Some(1)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        expect_inputs("gelu", inputs, 1)?;
        Ok(match self.approximate {
            GeluApproximate::None => kernels::map(inputs[0], GeluFn),
            GeluApproximate::Tanh => kernels::map(inputs[0], GeluTanhFn),
        })
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        let helper = GeluBackward {
            approximate: self.approximate,
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
        let helper = GeluBackward {
            approximate: self.approximate,
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
        let helper = GeluBackward {
            approximate: self.approximate,
        };
        t[0].as_ref()
            .map(|t| t.graph().record(helper, &[t, &inputs[0]]))
            .transpose()
    }
}

impl Differentiable for GeluBackward {
    fn name(&self) -> &str {
        "gelu_backward"
    }
    fn arity(&self) -> Option<usize> {
        Some(2)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        expect_inputs("gelu_backward", inputs, 2)?;
        let (g, x) = (inputs[0], inputs[1]);
        match self.approximate {
            GeluApproximate::None => kernels::zip("gelu_backward", g, x, GeluBackwardFn),
            GeluApproximate::Tanh => kernels::zip("gelu_backward", g, x, GeluTanhBackwardFn),
        }
    }
    fn backward<'g>(
        &self,
        g2: &Var<'g>,
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        let (g, x) = (&inputs[0], &inputs[1]);
        let dg = g
            .requires_grad()
            .then(|| unbroadcast(g.graph().record(*self, &[g2, x])?, g))
            .transpose()?;
        let dx = x
            .requires_grad()
            .then(|| unbroadcast(g2.try_mul(g)?.try_mul(&self.second_derivative(x)?)?, x))
            .transpose()?;
        Ok(smallvec![dg, dx])
    }
    fn jvp<'g>(
        &self,
        t: &[Option<Var<'g>>],
        inputs: &[Var<'g>],
        out: &Var<'g>,
    ) -> Result<Option<Var<'g>>> {
        let (g, x) = (&inputs[0], &inputs[1]);
        sum_tangents(
            out.shape(),
            [
                t[0].as_ref().map(|tg| g.graph().record(*self, &[tg, x])),
                t[1].as_ref()
                    .map(|tx| tx.try_mul(g)?.try_mul(&self.second_derivative(x)?)),
            ],
        )
    }
}

impl GeluBackward {
    /// `gelu''(x)`, written with `Var` ops so it can be differentiated again.
    fn second_derivative<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let x2 = x.try_mul(x)?;
        match self.approximate {
            // φ(x) (2 - x²)
            GeluApproximate::None => x2
                .mul_scalar(-0.5)
                .exp()
                .mul_scalar(NORMAL_PDF_0)
                .try_mul(&x2.rsub_scalar(2.0)),
            // (1 - t²) (u' + 0.5 x (u'' - 2 t u'²)), u = k (x + a x³).
            GeluApproximate::Tanh => {
                let (k, a) = (SQRT_2_OVER_PI, GELU_TANH_A);
                let t = x
                    .try_add(&x2.try_mul(x)?.mul_scalar(a))?
                    .mul_scalar(k)
                    .tanh();
                let du = x2.mul_scalar(3.0 * a * k).add_scalar(k);
                let ddu = x.mul_scalar(6.0 * a * k);
                let sech2 = t.try_mul(&t)?.rsub_scalar(1.0);
                let bracket = ddu.try_sub(&t.try_mul(&du.try_mul(&du)?)?.mul_scalar(2.0))?;
                sech2.try_mul(&du.try_add(&x.try_mul(&bracket)?.mul_scalar(0.5))?)
            }
        }
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Gelu::default());
    reg.add_builtin(GeluBackward::default());
}

impl<'g> Var<'g> {
    /// GELU with the exact normal CDF, `x Φ(x)` (PyTorch's default).
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![-1.0, 0.0, 1.0], &[3])?);
    /// let y = x.gelu().value().to_f64_vec();
    /// assert!((y[2] - 0.8413447460685429).abs() < 1e-15);
    /// assert_eq!(y[1], 0.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn gelu(&self) -> Var<'g> {
        self.gelu_with(GeluApproximate::None)
    }

    /// GELU, exact or with the tanh approximation.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor, ops::gelu::GeluApproximate};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::scalar(1.0));
    /// let y = x.gelu_with(GeluApproximate::Tanh).value().item()?;
    /// assert!((y - 0.8411919906082768).abs() < 1e-15);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn gelu_with(&self, approximate: GeluApproximate) -> Var<'g> {
        self.graph().record_or_panic(Gelu { approximate }, &[self])
    }
}

#[cfg(test)]
mod tests {
    use super::{GeluApproximate, GeluBackward};
    use crate::{gradcheck, jvpcheck, DType, Graph, Result, Tensor, Var};

    fn t(v: &[f64]) -> Tensor {
        Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
    }

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol)
    }

    const XS: [f64; 5] = [-3.0, -0.7, 0.0, 0.4, 2.5];
    const TANH: GeluApproximate = GeluApproximate::Tanh;

    /// (forward, derivative) at XS, computed in Python's double-precision
    /// `math` (erfc, tanh, exp) from the definitions.
    const GELU: ([f64; 5], [f64; 5]) = (
        [
            -0.004049694094890287,
            -0.16937455655615113,
            0.0,
            0.2621686966441297,
            2.4844758366855597,
        ],
        [
            -0.011945647204183927,
            0.023385898866340182,
            0.5,
            0.8027297977316535,
            1.037611085908145,
        ],
    );
    const GELU_TANH: ([f64; 5], [f64; 5]) = (
        [
            -0.0036373920817729943,
            -0.16942986529488321,
            0.0,
            0.2621611694273562,
            2.484915733910001,
        ],
        [
            -0.011584166630969516,
            0.023642781343896024,
            0.5,
            0.8026588344205614,
            1.037951576212666,
        ],
    );

    #[test]
    fn forward_values_and_derivatives() {
        let g = Graph::new();
        // f32 kernels (erfcf, f32 tanh) agree to f32 precision.
        for (dtype, tol) in [(DType::F64, 1e-15), (DType::F32, 1e-6)] {
            let x = g.variable(t(&XS).to_dtype(dtype));
            for (approximate, expect) in [(GeluApproximate::None, GELU), (TANH, GELU_TANH)] {
                let y = x.gelu_with(approximate);
                assert!(
                    close(&y.value().to_f64_vec(), &expect.0, tol),
                    "{:?}",
                    y.value()
                );
                let d = y.sum().backward().unwrap().wrt(&x).to_f64_vec();
                assert!(close(&d, &expect.1, tol), "{d:?}");
            }
        }
    }

    #[test]
    fn extremes_stay_finite() {
        let g = Graph::new();
        let x = g.variable(t(&[-1e4, -40.0, 40.0, 1e4]));
        for y in [x.gelu(), x.gelu_with(TANH)] {
            assert!(y.value().all_finite());
            assert_eq!(y.value().to_f64_vec()[3], 1e4);
            assert!(y.sum().backward().unwrap().wrt(&x).all_finite());
        }
        // Far in the negative tail the exact GELU is tiny but not cancelled to 0.
        let tail = g
            .variable(Tensor::scalar(-10.0))
            .gelu()
            .value()
            .item()
            .unwrap();
        assert!(tail < 0.0 && tail > -1e-20, "{tail}");
    }

    #[test]
    fn gradients_and_tangents() {
        let x = t(&[-2.1, -0.3, 0.2, 0.9, 3.1]);
        let x = std::slice::from_ref(&x);
        gradcheck(|v| Ok(v[0].gelu()), x).unwrap();
        gradcheck(|v| Ok(v[0].gelu_with(TANH)), x).unwrap();
        jvpcheck(|v| Ok(v[0].gelu()), x).unwrap();
        jvpcheck(|v| Ok(v[0].gelu_with(TANH)), x).unwrap();
        // Two consumers of one value.
        gradcheck(|v| Ok(&v[0].gelu() * &v[0].gelu_with(TANH) + &v[0]), x).unwrap();
    }

    fn helper<'g>(op: GeluBackward, v: &[Var<'g>]) -> Result<Var<'g>> {
        v[0].graph().record(op, &[&v[0], &v[1]])
    }

    #[test]
    fn backward_helper_has_gradients_and_tangents() {
        let both = [t(&[0.4, -1.2, 0.9, 0.7]), t(&[-1.5, -0.2, 0.6, 2.2])];
        for op in [GeluBackward::default(), GeluBackward { approximate: TANH }] {
            gradcheck(|v| helper(op, v), &both).unwrap();
            jvpcheck(|v| helper(op, v), &both).unwrap();
            // gelu'' is Var code: its own derivative is checked too.
            gradcheck(|v| op.second_derivative(&v[0]), &both[1..]).unwrap();
        }
    }

    #[test]
    fn registered_default_is_exact() {
        let g = Graph::new();
        let x = g.variable(t(&[-1.0, 1.0]));
        let y = g.apply("gelu", &[&x]).unwrap();
        assert_eq!(y.value(), x.gelu().value());
    }

    #[test]
    fn second_derivatives_through_create_graph() {
        use crate::ops::testing::hvpcheck;
        let x = t(&[-2.1, -0.3, 0.2, 0.9, 3.1]);
        hvpcheck(|x| Ok(x.gelu()), &x).unwrap();
        hvpcheck(|x| Ok(x.gelu_with(TANH)), &x).unwrap();
    }

    #[test]
    fn fast_path_matches_var_backward() {
        use crate::ops::testing::fast_path_agrees;
        let x = [t(&[-2.1, -0.3, 0.2, 0.9, 3.1])];
        fast_path_agrees(|v| Ok(v[0].gelu() + v[0].gelu_with(TANH)), &x).unwrap();
    }
}

//! GELU, `x Φ(x)`, in PyTorch's two forms: exact (the normal CDF through
//! `erfc`, accurate in the far negative tail) and the tanh approximation.
//! Each form is its own rule (see [`rule`](super::rule)), and its own op
//! (`gelu`, `gelu_tanh`): a rule holding the form as a runtime field made
//! LLVM compute both forms in every vectorised loop and select one, which
//! doubled the exact form's cost (ARCHITECTURE.md, PERF).

use super::erfc::Erfc;
use super::rule::{Block, Lane, Num, SlopeOf, Unary, UnaryRule};
use super::OpRegistry;
use crate::core::graph::Var;
use crate::tensor::Element;

/// Which form of GELU to compute (PyTorch's `approximate` argument).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GeluApproximate {
    /// `x Φ(x)` with the exact normal CDF (PyTorch's `approximate="none"`).
    #[default]
    None,
    /// `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))` (PyTorch's `approximate="tanh"`).
    Tanh,
}

/// GELU with the exact normal CDF, `x Φ(x)` (the op `gelu`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Gelu;

/// GELU with the tanh approximation (the op `gelu_tanh`; PyTorch's
/// `gelu(x, approximate="tanh")`).
#[derive(Clone, Copy, Debug, Default)]
pub struct GeluTanh;

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const FRAC_1_SQRT_2: f64 = std::f64::consts::FRAC_1_SQRT_2;
/// 1 / sqrt(2π), the standard normal density at 0.
const NORMAL_PDF_0: f64 = 0.398_942_280_401_432_7;
const GELU_TANH_A: f64 = 0.044715;

/// The normal CDF Φ(x) = erfc(-x/√2)/2: accurate in the far negative tail,
/// where `(1 + erf(x/√2))/2` cancels to 0.
#[inline(always)]
fn normal_cdf<N: Num>(x: &N) -> N {
    x.neg().scale(FRAC_1_SQRT_2).map(Erfc).scale(0.5)
}

/// `x Φ(x)`, the one text of the value: at an element ([`Lane`]) and over
/// a block.
#[inline(always)]
fn exact_gelu<N: Num>(x: &N) -> N {
    x.mul(&normal_cdf(x))
}

impl UnaryRule for Gelu {
    const NAME: &'static str = "gelu";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        exact_gelu(&Lane(x)).0
    }
    const BLOCKS: bool = true;
    #[inline(always)]
    fn value_block(self, x: Block) -> Block {
        exact_gelu(&x)
    }
    /// Φ(x) + x φ(x)
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        let pdf = x.scale(-0.5).mul(x).exp().scale(NORMAL_PDF_0);
        g.mul(&normal_cdf(x).add(&x.mul(&pdf)))
    }
}

impl UnaryRule for GeluTanh {
    const NAME: &'static str = "gelu_tanh";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        let k = T::from_f64(SQRT_2_OVER_PI);
        let inner = k * (x + T::from_f64(GELU_TANH_A) * x * x * x);
        T::from_f64(0.5) * x * (T::one() + inner.tanh_vectorisable())
    }
    /// With u = k (x + a x³) and t = tanh u:
    /// d/dx = 0.5 (1 + t) + 0.5 x (1 - t²) k (1 + 3 a x²).
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        let x2 = x.mul(x);
        let t = x
            .add(&x2.scale(GELU_TANH_A).mul(x))
            .scale(SQRT_2_OVER_PI)
            .tanh();
        let du = x2
            .scale(3.0 * GELU_TANH_A)
            .add(&x.lit(1.0))
            .scale(SQRT_2_OVER_PI);
        let left = t.add(&x.lit(1.0)).scale(0.5);
        let right = x.scale(0.5).mul(&t.mul(&t).rsub(1.0)).mul(&du);
        g.mul(&left.add(&right))
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Unary(Gelu));
    reg.add_builtin(Unary(GeluTanh));
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
    /// let y = x.gelu_with(GeluApproximate::Tanh).value().try_item()?;
    /// assert!((y - 0.8411919906082768).abs() < 1e-15);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn gelu_with(&self, approximate: GeluApproximate) -> Var<'g> {
        crate::base::error::or_panic(self.try_gelu_with(approximate))
    }

    /// [`gelu`](Self::gelu), returning the error (an input that is not a
    /// float tensor) instead of panicking.
    #[inline]
    pub fn try_gelu(&self) -> crate::Result<Var<'g>> {
        self.try_gelu_with(GeluApproximate::None)
    }

    /// [`gelu_with`](Self::gelu_with), returning the error instead of
    /// panicking.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor, ops::gelu::GeluApproximate};
    /// let g = Graph::new();
    /// assert!(g.constant(Tensor::vector(&[1i64])).try_gelu().is_err());
    /// let x = g.variable(Tensor::scalar(1.0));
    /// assert!(x.try_gelu_with(GeluApproximate::Tanh).is_ok());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[inline]
    pub fn try_gelu_with(&self, approximate: GeluApproximate) -> crate::Result<Var<'g>> {
        match approximate {
            GeluApproximate::None => self.graph().record(Unary(Gelu), &[self]),
            GeluApproximate::Tanh => self.graph().record(Unary(GeluTanh), &[self]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::GeluApproximate;
    use crate::{gradcheck, jvpcheck, DType, Graph, Tensor};

    use crate::tensor::test_util::t;

    use crate::tensor::test_util::close;

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
        let tail = g.variable(Tensor::scalar(-10.0)).gelu().value().item();
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

    #[test]
    fn each_form_is_registered_under_its_name() {
        let g = Graph::new();
        let x = g.variable(t(&[-1.0, 1.0]));
        let y = g.apply("gelu", &[&x]).unwrap();
        assert_eq!(y.value(), x.gelu().value());
        let y = g.apply("gelu_tanh", &[&x]).unwrap();
        assert_eq!(y.value(), x.gelu_with(TANH).value());
        assert_ne!(x.gelu().value(), x.gelu_with(TANH).value());
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

//! One-operand elementwise ops: `abs`, `sin`, `cos` and `clamp`, each one
//! rule (see [`rule`](super::rule)).

use super::rule::{unary_method, Cmp, Num, SlopeOf, Unary, UnaryRule, KINK_MARGIN};
use super::{OpAttributes, OpRegistry};
use crate::base::error::or_panic;
use crate::base::error::{Error, Result};
use crate::base::fallible::fallible;
use crate::core::graph::Var;
use crate::tensor::Element;

/// `|x|`; the gradient is `sign(x)`, 0 at 0 (as in PyTorch), NaN at NaN.
#[derive(Clone, Copy, Debug, Default)]
pub struct Abs;

impl UnaryRule for Abs {
    const NAME: &'static str = "abs";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        x.abs()
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        let zero = x.lit(0.0);
        // `x * 0` where x is neither side of 0: 0 at 0, NaN at NaN.
        let neither = x.scale(0.0);
        x.select(
            Cmp::Gt,
            &zero,
            g,
            &x.select(Cmp::Lt, &zero, &g.neg(), &neither),
        )
    }
    fn domain(x: f64) -> bool {
        x.abs() > KINK_MARGIN
    }
}

/// `sin x` (radians).
#[derive(Clone, Copy, Debug, Default)]
pub struct Sin;

impl UnaryRule for Sin {
    const NAME: &'static str = "sin";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        x.sin()
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        g.mul(&x.map(Cos))
    }
}

/// `cos x` (radians).
#[derive(Clone, Copy, Debug, Default)]
pub struct Cos;

impl UnaryRule for Cos {
    const NAME: &'static str = "cos";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        x.cos()
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        g.mul(&x.map(Sin)).neg()
    }
}

/// Clamps into `[min, max]`; either bound may be absent. NaN stays NaN, and
/// when `min > max` every element becomes `max` (as in PyTorch). The
/// gradient is 1 where `min <= x <= max` (bounds inclusive), else 0.
#[derive(Clone, Copy, Debug, Default)]
pub struct Clamp {
    /// The lower bound, if any.
    pub min: Option<f64>,
    /// The upper bound, if any.
    pub max: Option<f64>,
}

impl Clamp {
    /// The bounds, an absent one as an infinity.
    #[inline(always)]
    fn bounds(self) -> (f64, f64) {
        (
            self.min.unwrap_or(f64::NEG_INFINITY),
            self.max.unwrap_or(f64::INFINITY),
        )
    }
}

impl UnaryRule for Clamp {
    fn attributes(self) -> OpAttributes {
        OpAttributes::new()
            .float_opt("min", self.min)
            .float_opt("max", self.max)
    }
    const NAME: &'static str = "clamp";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    fn check(self) -> Result<()> {
        if self.min.is_none() && self.max.is_none() {
            return Err(Error::invalid(
                "clamp",
                "at least one of min and max must be given",
            ));
        }
        if self.min.is_some_and(f64::is_nan) || self.max.is_some_and(f64::is_nan) {
            return Err(Error::invalid("clamp", "a bound is NaN"));
        }
        Ok(())
    }
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        let (lo, hi) = self.bounds();
        let (lo, hi) = (T::from_f64(lo), T::from_f64(hi));
        let y = if x < lo { lo } else { x };
        if y > hi {
            hi
        } else {
            y
        }
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        let (lo, hi) = self.bounds();
        let zero = g.lit(0.0);
        let below_max = x.select(Cmp::Le, &x.lit(hi), g, &zero);
        x.select(Cmp::Ge, &x.lit(lo), &below_max, &zero)
    }
    fn domain(x: f64) -> bool {
        let (lo, hi) = Self::example().bounds();
        (x - lo).abs() > KINK_MARGIN && (x - hi).abs() > KINK_MARGIN
    }
    fn example() -> Self {
        Clamp {
            min: Some(-0.5),
            max: Some(1.0),
        }
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Unary(Abs));
    reg.add_builtin(Unary(Sin));
    reg.add_builtin(Unary(Cos));
    reg.add_builtin(Unary(Clamp::default()));
}

impl<'g> Var<'g> {
    unary_method! {
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
        try_abs / abs => Abs
    }

    unary_method! {
        /// Sine elementwise (radians).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::scalar(0.0));
        /// assert_eq!(x.sin().value().try_item()?, 0.0);
        /// assert_eq!(x.sin().backward()?.wrt(&x).try_item()?, 1.0); // cos 0
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_sin / sin => Sin
    }

    unary_method! {
        /// Cosine elementwise (radians).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::scalar(0.0));
        /// assert_eq!(x.cos().value().try_item()?, 1.0);
        /// assert_eq!(x.cos().backward()?.wrt(&x).try_item()?, 0.0); // -sin 0
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_cos / cos => Cos
    }

    fallible! {
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
        pub fn try_clamp / clamp(&self, min: Option<f64>, max: Option<f64>) -> Var<'g> {
            self.graph().record(Unary(Clamp { min, max }), &[self])
        }
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

    /// [`clamp_min`](Self::clamp_min), returning the error (a NaN
    /// bound, an input that is not a float tensor) instead of panicking.
    #[inline]
    pub fn try_clamp_min(&self, min: f64) -> Result<Var<'g>> {
        self.try_clamp(Some(min), None)
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

    /// [`clamp_max`](Self::clamp_max), returning the error (a NaN
    /// bound, an input that is not a float tensor) instead of panicking.
    #[inline]
    pub fn try_clamp_max(&self, max: f64) -> Result<Var<'g>> {
        self.try_clamp(None, Some(max))
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, jvpcheck, DType, Error, Graph, Var};

    use crate::tensor::test_util::t;

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
        assert!((r32.value().item() - r64.value().item()).abs() < 1e-5);
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

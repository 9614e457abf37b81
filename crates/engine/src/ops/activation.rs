//! Activation functions `leaky_relu` and `silu` (GELU, softplus, ELU and
//! hardtanh have files of their own), each one rule (see
//! [`rule`](super::rule)).

use super::rule::{unary_method, Cmp, Num, SlopeOf, Unary, UnaryRule, KINK_MARGIN};
use super::{OpAttributes, OpRegistry};
use crate::core::graph::Var;
use crate::tensor::Element;

/// `x > 0 ? x : slope * x`, PyTorch's `leaky_relu` (its default slope is
/// 0.01); the gradient at 0 is the slope.
#[derive(Clone, Copy, Debug)]
pub struct LeakyRelu {
    /// The slope for negative inputs.
    pub negative_slope: f64,
}

impl Default for LeakyRelu {
    fn default() -> Self {
        LeakyRelu {
            negative_slope: 0.01,
        }
    }
}

impl UnaryRule for LeakyRelu {
    fn attributes(self) -> OpAttributes {
        OpAttributes::new().float("negative_slope", self.negative_slope)
    }
    const NAME: &'static str = "leaky_relu";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        if x > T::zero() {
            x
        } else {
            x * T::from_f64(self.negative_slope)
        }
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        x.select(Cmp::Gt, &x.lit(0.0), g, &g.scale(self.negative_slope))
    }
    fn domain(x: f64) -> bool {
        x.abs() > KINK_MARGIN
    }
    fn example() -> Self {
        LeakyRelu {
            negative_slope: 0.1,
        }
    }
}

/// SiLU (swish), `x σ(x)`; `silu' = σ (1 + x (1 - σ))`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Silu;

impl UnaryRule for Silu {
    const NAME: &'static str = "silu";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        x * super::unary::sigmoid(x)
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        let s = x.sigmoid();
        g.mul(&s).mul(&x.lit(1.0).add(&x.mul(&s.rsub(1.0))))
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Unary(LeakyRelu::default()));
    reg.add_builtin(Unary(Silu));
}

impl<'g> Var<'g> {
    /// Leaky ReLU: `x` for `x > 0`, else `negative_slope * x` (PyTorch's
    /// default slope is 0.01). The gradient at 0 is the slope.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![-2.0, 3.0], &[2])?);
    /// let y = x.leaky_relu(0.1);
    /// assert_eq!(y.value().to_f64_vec(), vec![-0.2, 3.0]);
    /// assert_eq!(y.sum().backward()?.wrt(&x).to_f64_vec(), vec![0.1, 1.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn leaky_relu(&self, negative_slope: f64) -> Var<'g> {
        self.graph()
            .record_or_panic(Unary(LeakyRelu { negative_slope }), &[self])
    }

    /// [`leaky_relu`](Self::leaky_relu), returning the error (an input
    /// that is not a float tensor) instead of panicking.
    pub fn try_leaky_relu(&self, negative_slope: f64) -> crate::Result<Var<'g>> {
        self.graph()
            .record(Unary(LeakyRelu { negative_slope }), &[self])
    }

    unary_method! {
        /// SiLU (swish), `x σ(x)`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::scalar(0.0));
        /// assert_eq!(x.silu().value().try_item()?, 0.0);
        /// assert_eq!(x.silu().backward()?.wrt(&x).try_item()?, 0.5);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_silu / silu => Silu
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, jvpcheck, DType, Graph};

    use crate::tensor::test_util::t;

    use crate::tensor::test_util::close;

    const XS: [f64; 5] = [-3.0, -0.7, 0.0, 0.4, 2.5];

    /// SiLU and its derivative at XS, from the definitions in Python's
    /// double-precision `math`.
    const SILU: ([f64; 5], [f64; 5]) = (
        [
            -0.14227761953270035,
            -0.2322685594822837,
            0.0,
            0.2394750640449808,
            2.3103545499468914,
        ],
        [
            -0.08810410601516962,
            0.1766132165266576,
            0.5,
            0.6947919584090636,
            1.0994011113415267,
        ],
    );

    #[test]
    fn forward_values_and_derivatives() {
        let g = Graph::new();
        for (dtype, tol) in [(DType::F64, 1e-15), (DType::F32, 1e-6)] {
            let x = g.variable(t(&XS).to_dtype(dtype));
            let y = x.silu();
            assert!(
                close(&y.value().to_f64_vec(), &SILU.0, tol),
                "{:?}",
                y.value()
            );
            let d = y.sum().backward().unwrap().wrt(&x).to_f64_vec();
            assert!(close(&d, &SILU.1, tol), "{d:?}");
        }
        let x = g.variable(t(&XS));
        let y = x.leaky_relu(0.2);
        let expect = [-0.6, -0.14, 0.0, 0.4, 2.5];
        assert!(close(&y.value().to_f64_vec(), &expect, 1e-15));
        let d = y.sum().backward().unwrap().wrt(&x).to_f64_vec();
        assert_eq!(d, vec![0.2, 0.2, 0.2, 1.0, 1.0]);
    }

    #[test]
    fn extremes_stay_finite() {
        let g = Graph::new();
        let x = g.variable(t(&[-1e4, -40.0, 40.0, 1e4]));
        for y in [x.silu(), x.leaky_relu(0.01)] {
            assert!(y.value().all_finite());
            assert_eq!(y.value().to_f64_vec()[3], 1e4);
            assert!(y.sum().backward().unwrap().wrt(&x).all_finite());
        }
    }

    #[test]
    fn gradients_and_tangents() {
        let x = t(&[-2.1, -0.3, 0.2, 0.9, 3.1]);
        let x = std::slice::from_ref(&x);
        gradcheck(|v| Ok(v[0].leaky_relu(0.05)), x).unwrap();
        gradcheck(|v| Ok(v[0].silu()), x).unwrap();
        jvpcheck(|v| Ok(v[0].leaky_relu(0.05)), x).unwrap();
        jvpcheck(|v| Ok(v[0].silu()), x).unwrap();
        // Two consumers of one value.
        gradcheck(|v| Ok(&v[0].silu() * &v[0].leaky_relu(0.3)), x).unwrap();
    }

    #[test]
    fn registered_default_slope_follows_pytorch() {
        let g = Graph::new();
        let x = g.variable(t(&[-1.0, 1.0]));
        let y = g.apply("leaky_relu", &[&x]).unwrap();
        assert_eq!(y.value().to_f64_vec(), vec![-0.01, 1.0]);
    }

    #[test]
    fn second_derivatives_through_create_graph() {
        use crate::ops::testing::hvpcheck;
        let x = t(&[-2.1, -0.3, 0.2, 0.9, 3.1]);
        hvpcheck(|x| Ok(x.silu()), &x).unwrap();
        hvpcheck(|x| Ok(&x.leaky_relu(0.1) * x), &x).unwrap();
    }

    #[test]
    fn fast_path_matches_var_backward() {
        use crate::ops::testing::fast_path_agrees;
        let x = [t(&[-2.1, -0.3, 0.2, 0.9, 3.1])];
        fast_path_agrees(|v| Ok(v[0].silu() + v[0].leaky_relu(0.2)), &x).unwrap();
    }
}

//! Activation functions `leaky_relu` and `silu` (GELU has its own file),
//! each with a fused backward helper (`leaky_relu_backward`,
//! `silu_backward`, as in PyTorch) that keeps a first-order backward to one
//! kernel pass. The helpers' own gradients are written with `Var` ops, so
//! every order of derivative is available.

use smallvec::smallvec;

use super::slope::{slope_helper, unary_with_slope};
use super::{expect_inputs, sum_tangents, unbroadcast, Differentiable, GradInputs, OpRegistry};
use crate::error::Result;
use crate::graph::Var;
use crate::kernels::{self, BinaryFn, UnaryFn};
use crate::tensor::{Element, Tensor};

/// `x > 0 ? x : slope * x`, PyTorch's `leaky_relu` (its default slope is 0.01).
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

/// `x > 0 ? g : slope * g`: the backward of `leaky_relu` (the gradient at 0 is the slope).
#[derive(Clone, Copy, Debug)]
pub struct LeakyReluBackward {
    /// The slope for negative inputs.
    pub negative_slope: f64,
}

impl Default for LeakyReluBackward {
    fn default() -> Self {
        LeakyReluBackward {
            negative_slope: LeakyRelu::default().negative_slope,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct LeakyReluFn(f64);

impl UnaryFn for LeakyReluFn {
    #[inline(always)]
    fn call<T: Element>(self, x: T) -> T {
        if x > T::zero() {
            x
        } else {
            x * T::from_f64(self.0)
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct LeakyReluBackwardFn(f64);

impl BinaryFn for LeakyReluBackwardFn {
    #[inline(always)]
    fn call<T: Element>(self, g: T, x: T) -> T {
        if x > T::zero() {
            g
        } else {
            g * T::from_f64(self.0)
        }
    }
}

unary_with_slope!(
    LeakyRelu,
    "leaky_relu",
    |s| LeakyReluFn(s.negative_slope),
    LeakyReluBackward {
        negative_slope: s.negative_slope
    }
);
slope_helper!(
    LeakyReluBackward,
    "leaky_relu_backward",
    |s| LeakyReluBackwardFn(s.negative_slope),
    |_s, _a, _g, _x| None
);

/// SiLU (swish), `x σ(x)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Silu;

/// `g σ(x) (1 + x (1 - σ(x)))`: the backward of `silu`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SiluBackward;

crate::unary_fn!(
    /// `x σ(x)`
    SiluFn,
    |x| x * super::unary::sigmoid(x)
);
crate::binary_fn!(
    /// `g σ(x) (1 + x (1 - σ(x)))`
    SiluBackwardFn,
    |g, x| {
        let s = super::unary::sigmoid(x);
        g * s * (T::one() + x * (T::one() - s))
    }
);

unary_with_slope!(Silu, "silu", |_s| SiluFn, SiluBackward);
slope_helper!(
    SiluBackward,
    "silu_backward",
    |_s| SiluBackwardFn,
    |_s, a, g, x| {
        // silu''(x) = σ (1 - σ) (2 + x (1 - 2σ))
        let second = || -> Result<Var<'_>> {
            let s = x.sigmoid();
            let ds = s.try_mul(&s.rsub_scalar(1.0))?;
            ds.try_mul(
                &x.try_mul(&s.mul_scalar(-2.0).add_scalar(1.0))?
                    .add_scalar(2.0),
            )
        };
        Some(a.try_mul(g).and_then(|ag| ag.try_mul(&second()?)))
    }
);

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(LeakyRelu::default());
    reg.add_builtin(LeakyReluBackward::default());
    reg.add_builtin(Silu);
    reg.add_builtin(SiluBackward);
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
            .record_or_panic(LeakyRelu { negative_slope }, &[self])
    }

    /// SiLU (swish), `x σ(x)`.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::scalar(0.0));
    /// assert_eq!(x.silu().value().item()?, 0.0);
    /// assert_eq!(x.silu().backward()?.wrt(&x).item()?, 0.5);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn silu(&self) -> Var<'g> {
        self.graph().record_or_panic(Silu, &[self])
    }
}

#[cfg(test)]
mod tests {
    use super::{LeakyReluBackward, SiluBackward};
    use crate::{gradcheck, jvpcheck, DType, Graph, Result, Tensor, Var};

    fn t(v: &[f64]) -> Tensor {
        Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
    }

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol)
    }

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

    fn helper<'g, O: crate::Differentiable>(op: O, v: &[Var<'g>]) -> Result<Var<'g>> {
        v[0].graph().record(op, &[&v[0], &v[1]])
    }

    #[test]
    fn backward_helpers_have_gradients_and_tangents() {
        let both = [t(&[0.4, -1.2, 0.9, 0.7]), t(&[-1.5, -0.2, 0.6, 2.2])];
        let leaky = LeakyReluBackward {
            negative_slope: 0.1,
        };
        gradcheck(|v| helper(SiluBackward, v), &both).unwrap();
        gradcheck(|v| helper(leaky, v), &both).unwrap();
        jvpcheck(|v| helper(SiluBackward, v), &both).unwrap();
        jvpcheck(|v| helper(leaky, v), &both).unwrap();
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

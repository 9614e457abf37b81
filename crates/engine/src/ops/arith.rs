//! Arithmetic: `add`, `sub`, `mul`, `div`, `neg`, with NumPy broadcasting
//! and scalar operands that never allocate a broadcast tensor.

use super::rule::{
    binary_methods, scalar_method, unary_method, Binary, BinaryRule, Num, SlopeOf, Unary, UnaryRule,
};
use super::OpRegistry;
use crate::core::graph::Var;
use crate::core::Primitive;
use crate::tensor::Element;

/// `a + b` (broadcasting).
#[derive(Clone, Copy, Debug, Default)]
pub struct Add;

impl BinaryRule for Add {
    const NAME: &'static str = "add";
    const PRIMITIVE: Option<Primitive> = Some(Primitive::Add);
    #[inline(always)]
    fn value<T: Element>(self, a: T, b: T) -> T {
        a + b
    }
    #[inline(always)]
    fn grad_a<N: Num>(self, g: &N, _a: &N, _b: &N, _y: &N) -> N {
        g.clone()
    }
    #[inline(always)]
    fn grad_b<N: Num>(self, g: &N, _a: &N, _b: &N, _y: &N) -> N {
        g.clone()
    }
}

/// `a - b` (broadcasting).
#[derive(Clone, Copy, Debug, Default)]
pub struct Sub;

impl BinaryRule for Sub {
    const NAME: &'static str = "sub";
    const PRIMITIVE: Option<Primitive> = Some(Primitive::Sub);
    #[inline(always)]
    fn value<T: Element>(self, a: T, b: T) -> T {
        a - b
    }
    #[inline(always)]
    fn grad_a<N: Num>(self, g: &N, _a: &N, _b: &N, _y: &N) -> N {
        g.clone()
    }
    #[inline(always)]
    fn grad_b<N: Num>(self, g: &N, _a: &N, _b: &N, _y: &N) -> N {
        g.neg()
    }
}

/// `a * b` (broadcasting).
#[derive(Clone, Copy, Debug, Default)]
pub struct Mul;

impl BinaryRule for Mul {
    const NAME: &'static str = "mul";
    const PRIMITIVE: Option<Primitive> = Some(Primitive::Mul);
    #[inline(always)]
    fn value<T: Element>(self, a: T, b: T) -> T {
        a * b
    }
    // d(ab)/da = b and d(ab)/db = a: the reason backward sees the inputs.
    #[inline(always)]
    fn grad_a<N: Num>(self, g: &N, _a: &N, b: &N, _y: &N) -> N {
        g.mul(b)
    }
    #[inline(always)]
    fn grad_b<N: Num>(self, g: &N, a: &N, _b: &N, _y: &N) -> N {
        g.mul(a)
    }
}

/// `a / b` (broadcasting).
#[derive(Clone, Copy, Debug, Default)]
pub struct Div;

impl BinaryRule for Div {
    const NAME: &'static str = "div";
    const PRIMITIVE: Option<Primitive> = Some(Primitive::Div);
    #[inline(always)]
    fn value<T: Element>(self, a: T, b: T) -> T {
        a / b
    }
    #[inline(always)]
    fn grad_a<N: Num>(self, g: &N, _a: &N, b: &N, _y: &N) -> N {
        g.div(b)
    }
    // -a/b² = -y/b, from the output: one product and one quotient.
    #[inline(always)]
    fn grad_b<N: Num>(self, g: &N, _a: &N, b: &N, y: &N) -> N {
        g.mul(y).div(b).neg()
    }
    fn domain(a: f64, b: f64) -> bool {
        let _ = a;
        b.abs() > 0.2
    }
}

/// `-a`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Neg;

impl UnaryRule for Neg {
    const NAME: &'static str = "neg";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    const PRIMITIVE: Option<Primitive> = Some(Primitive::Neg);
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        -x
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, _x: &N) -> N {
        g.neg()
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Binary(Add));
    reg.add_builtin(Binary(Sub));
    reg.add_builtin(Binary(Mul));
    reg.add_builtin(Binary(Div));
    reg.add_builtin(Unary(Neg));
}

#[allow(clippy::should_implement_trait)]
impl<'g> Var<'g> {
    binary_methods! {
        /// `self + other`, broadcasting.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let a = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2])?);
        /// let b = g.constant(Tensor::scalar(10.0));
        /// assert_eq!(a.try_add(&b)?.value().to_f64_vec(), vec![11.0, 12.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_add /
        /// `self + other`; panics with the error message on mismatched shapes
        /// (use [`try_add`](Self::try_add) to get the error).
        add => Add
    }

    binary_methods! {
        /// `self - other`, broadcasting.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let a = g.variable(Tensor::scalar(5.0));
        /// assert_eq!(a.try_sub(&g.constant(Tensor::scalar(2.0)))?.value().try_item()?, 3.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_sub /
        /// `self - other`; panics on mismatched shapes (see [`try_sub`](Self::try_sub)).
        sub => Sub
    }

    binary_methods! {
        /// `self * other`, broadcasting.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let a = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2])?);
        /// assert_eq!(a.try_mul(&a)?.value().to_f64_vec(), vec![1.0, 4.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_mul /
        /// `self * other`; panics on mismatched shapes (see [`try_mul`](Self::try_mul)).
        mul => Mul
    }

    binary_methods! {
        /// `self / other`, broadcasting.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let a = g.variable(Tensor::scalar(3.0));
        /// assert_eq!(a.try_div(&g.constant(Tensor::scalar(4.0)))?.value().try_item()?, 0.75);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_div /
        /// `self / other`; panics on mismatched shapes (see [`try_div`](Self::try_div)).
        div => Div
    }

    unary_method! {
        /// `-self`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// assert_eq!(g.variable(Tensor::scalar(2.0)).neg().value().try_item()?, -2.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_neg / neg => Neg
    }

    scalar_method! {
        /// `self + c` for a scalar `c` (in self's dtype; no broadcast tensor is allocated).
        add_scalar => self Add c
    }

    scalar_method! {
        /// `self - c` for a scalar `c`.
        sub_scalar => self Sub c
    }

    scalar_method! {
        /// `c - self` for a scalar `c`.
        rsub_scalar => c Sub self
    }

    scalar_method! {
        /// `self * c` for a scalar `c`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1.0f32, 2.0], &[2])?);
        /// assert_eq!((&x * 2.0).value().to_vec::<f32>()?, vec![2.0, 4.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        mul_scalar => self Mul c
    }

    scalar_method! {
        /// `self / c` for a scalar `c`.
        div_scalar => self Div c
    }

    scalar_method! {
        /// `c / self` for a scalar `c`.
        rdiv_scalar => c Div self
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, Graph, Tensor};

    use crate::tensor::test_util::tensor as t;

    #[test]
    fn forward_values() {
        let g = Graph::new();
        let a = g.variable(t(&[1., 2., 3., 4.], &[2, 2]));
        let b = g.variable(t(&[10., 20.], &[2]));
        assert_eq!((&a + &b).value().to_f64_vec(), vec![11., 22., 13., 24.]);
        assert_eq!((&a - &b).value().to_f64_vec(), vec![-9., -18., -7., -16.]);
        assert_eq!((&a * &b).value().to_f64_vec(), vec![10., 40., 30., 80.]);
        assert_eq!((&b / &a).value().to_f64_vec(), vec![10., 10., 10. / 3., 5.]);
        assert_eq!((-&a).value().to_f64_vec(), vec![-1., -2., -3., -4.]);
    }

    #[test]
    fn f32_and_f64_agree() {
        let g = Graph::new();
        let a32 = g.variable(Tensor::from_vec(vec![1.5f32, -2.0], &[2]).unwrap());
        let a64 = g.variable(t(&[1.5, -2.0], &[2]));
        let r32 = ((&a32 * &a32) / (&a32 + 4.0) - &a32).sum();
        let r64 = ((&a64 * &a64) / (&a64 + 4.0) - &a64).sum();
        assert!((r32.value().item() - r64.value().item()).abs() < 1e-6);
        let g32 = r32.backward().unwrap().wrt(&a32).to_f64_vec();
        let g64 = r64.backward().unwrap().wrt(&a64).to_f64_vec();
        for (x, y) in g32.iter().zip(&g64) {
            assert!((x - y).abs() < 1e-5);
        }
    }

    #[test]
    fn gradients_with_broadcasting() {
        let a = t(&[0.5, -1.0, 2.0, 1.5, 0.3, -0.7], &[2, 3]);
        let b = t(&[1.2, -0.4, 0.8], &[3]);
        let c = t(&[0.9, 1.1], &[2, 1]);
        gradcheck(
            |v| Ok(&v[0] + &v[1] + &v[2]),
            &[a.clone(), b.clone(), c.clone()],
        )
        .unwrap();
        gradcheck(
            |v| Ok(&v[0] - &v[1] - &v[2]),
            &[a.clone(), b.clone(), c.clone()],
        )
        .unwrap();
        gradcheck(
            |v| Ok(&v[0] * &v[1] * &v[2]),
            &[a.clone(), b.clone(), c.clone()],
        )
        .unwrap();
        gradcheck(|v| Ok(&v[0] / &v[1] / &v[2]), &[a.clone(), b.clone(), c]).unwrap();
        gradcheck(|v| Ok(-&v[0]), &[a.clone()]).unwrap();
        gradcheck(|v| Ok(2.0 / &v[0] - 1.0 + &v[0] * 3.0), &[b]).unwrap();
        // Scalar (0-d) operands broadcast too.
        gradcheck(|v| Ok(&v[0] * &v[1]), &[a, Tensor::scalar(1.7)]).unwrap();
    }

    #[test]
    fn gradient_of_a_value_with_two_consumers() {
        let x = t(&[0.5, -1.0, 2.0], &[3]);
        gradcheck(|v| Ok(&v[0] * &v[0] + &v[0] / (&v[0] * &v[0] + 1.0)), &[x]).unwrap();
    }

    #[test]
    fn tangents() {
        let a = t(&[0.5, -1.0, 2.0, 1.5, 0.3, -0.7], &[2, 3]);
        let b = t(&[1.2, -0.4, 0.8], &[3]);
        crate::jvpcheck(|v| Ok(&v[0] + &v[1]), &[a.clone(), b.clone()]).unwrap();
        crate::jvpcheck(|v| Ok(&v[0] - &v[1]), &[a.clone(), b.clone()]).unwrap();
        crate::jvpcheck(|v| Ok(&v[0] * &v[1]), &[a.clone(), b.clone()]).unwrap();
        crate::jvpcheck(|v| Ok(&v[0] / &v[1]), &[a.clone(), b]).unwrap();
        crate::jvpcheck(|v| Ok(-&v[0] * &v[0]), &[a]).unwrap();
    }
}

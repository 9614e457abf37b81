//! Arithmetic: `add`, `sub`, `mul`, `div`, `neg`, with NumPy broadcasting
//! and scalar operands that never allocate a broadcast tensor.

use smallvec::smallvec;

use super::{expect_inputs, unbroadcast, Differentiable, GradInputs, OpRegistry};
use crate::error::Result;
use crate::graph::Var;
use crate::kernels::{self, functors};
use crate::tensor::Tensor;

macro_rules! binary_op {
    ($(#[$m:meta])* $op:ident, $name:literal, $functor:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $op;

        impl $op {
            #[inline(always)]
            fn compute(inputs: &[&Tensor]) -> Result<Tensor> {
                expect_inputs($name, inputs, 2)?;
                kernels::zip($name, inputs[0], inputs[1], $functor)
            }
        }
    };
}

binary_op!(
    /// `a + b` (broadcasting).
    Add, "add", functors::Add
);
binary_op!(
    /// `a - b` (broadcasting).
    Sub, "sub", functors::Sub
);
binary_op!(
    /// `a * b` (broadcasting).
    Mul, "mul", functors::Mul
);
binary_op!(
    /// `a / b` (broadcasting).
    Div, "div", functors::Div
);

impl Differentiable for Add {
    fn name(&self) -> &str {
        "add"
    }
    fn arity(&self) -> Option<usize> {
        Some(2)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Self::compute(inputs)
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        let (a, b) = (&inputs[0], &inputs[1]);
        Ok(smallvec![
            a.requires_grad()
                .then(|| unbroadcast(g.clone(), a))
                .transpose()?,
            b.requires_grad()
                .then(|| unbroadcast(g.clone(), b))
                .transpose()?,
        ])
    }
    fn backward_fast(
        &self,
        g: &Tensor,
        inputs: &[&Tensor],
        _out: &Tensor,
        needs: &[bool],
        grads: &mut [Option<Tensor>],
    ) -> Result<bool> {
        for i in 0..2 {
            if needs[i] {
                grads[i] = Some(super::unbroadcast_tensor(g.clone(), inputs[i])?);
            }
        }
        Ok(true)
    }
    crate::scalar_rule!(arity 2, |g, _x, _y, d| { d[0] = g; d[1] = g; });
    fn jvp<'g>(
        &self,
        t: &[Option<Var<'g>>],
        _inputs: &[Var<'g>],
        out: &Var<'g>,
    ) -> Result<Option<Var<'g>>> {
        super::sum_tangents(out.shape(), [t[0].clone().map(Ok), t[1].clone().map(Ok)])
    }
}

impl Differentiable for Sub {
    fn name(&self) -> &str {
        "sub"
    }
    fn arity(&self) -> Option<usize> {
        Some(2)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Self::compute(inputs)
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        let (a, b) = (&inputs[0], &inputs[1]);
        Ok(smallvec![
            a.requires_grad()
                .then(|| unbroadcast(g.clone(), a))
                .transpose()?,
            b.requires_grad().then(|| unbroadcast(-g, b)).transpose()?,
        ])
    }
    fn backward_fast(
        &self,
        g: &Tensor,
        inputs: &[&Tensor],
        _out: &Tensor,
        needs: &[bool],
        grads: &mut [Option<Tensor>],
    ) -> Result<bool> {
        if needs[0] {
            grads[0] = Some(super::unbroadcast_tensor(g.clone(), inputs[0])?);
        }
        if needs[1] {
            grads[1] = Some(super::unbroadcast_tensor(
                kernels::map(g, NegFn),
                inputs[1],
            )?);
        }
        Ok(true)
    }
    crate::scalar_rule!(arity 2, |g, _x, _y, d| { d[0] = g; d[1] = -g; });
    fn jvp<'g>(
        &self,
        t: &[Option<Var<'g>>],
        _inputs: &[Var<'g>],
        out: &Var<'g>,
    ) -> Result<Option<Var<'g>>> {
        super::sum_tangents(
            out.shape(),
            [t[0].clone().map(Ok), t[1].as_ref().map(|tb| Ok(-tb))],
        )
    }
}

impl Differentiable for Mul {
    fn name(&self) -> &str {
        "mul"
    }
    fn arity(&self) -> Option<usize> {
        Some(2)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Self::compute(inputs)
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        // d(ab)/da = b and d(ab)/db = a: the reason backward sees the inputs.
        let (a, b) = (&inputs[0], &inputs[1]);
        Ok(smallvec![
            a.requires_grad()
                .then(|| unbroadcast(g.try_mul(b)?, a))
                .transpose()?,
            b.requires_grad()
                .then(|| unbroadcast(g.try_mul(a)?, b))
                .transpose()?,
        ])
    }
    fn backward_fast(
        &self,
        g: &Tensor,
        inputs: &[&Tensor],
        _out: &Tensor,
        needs: &[bool],
        grads: &mut [Option<Tensor>],
    ) -> Result<bool> {
        let (a, b) = (inputs[0], inputs[1]);
        if needs[0] {
            grads[0] = Some(super::unbroadcast_tensor(
                kernels::zip("mul", g, b, functors::Mul)?,
                a,
            )?);
        }
        if needs[1] {
            grads[1] = Some(super::unbroadcast_tensor(
                kernels::zip("mul", g, a, functors::Mul)?,
                b,
            )?);
        }
        Ok(true)
    }
    crate::scalar_rule!(arity 2, |g, x, _y, d| { d[0] = g * x[1]; d[1] = g * x[0]; });
    fn jvp<'g>(
        &self,
        t: &[Option<Var<'g>>],
        inputs: &[Var<'g>],
        out: &Var<'g>,
    ) -> Result<Option<Var<'g>>> {
        let (a, b) = (&inputs[0], &inputs[1]);
        super::sum_tangents(
            out.shape(),
            [
                t[0].as_ref().map(|ta| ta.try_mul(b)),
                t[1].as_ref().map(|tb| a.try_mul(tb)),
            ],
        )
    }
}

impl Differentiable for Div {
    fn name(&self) -> &str {
        "div"
    }
    fn arity(&self) -> Option<usize> {
        Some(2)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Self::compute(inputs)
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        inputs: &[Var<'g>],
        out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        // d(a/b)/da = 1/b; d(a/b)/db = -a/b^2 = -out/b.
        let (a, b) = (&inputs[0], &inputs[1]);
        Ok(smallvec![
            a.requires_grad()
                .then(|| unbroadcast(g.try_div(b)?, a))
                .transpose()?,
            b.requires_grad()
                .then(|| unbroadcast(-(g.try_mul(out)?.try_div(b)?), b))
                .transpose()?,
        ])
    }
    fn backward_fast(
        &self,
        g: &Tensor,
        inputs: &[&Tensor],
        out: &Tensor,
        needs: &[bool],
        grads: &mut [Option<Tensor>],
    ) -> Result<bool> {
        let (a, b) = (inputs[0], inputs[1]);
        if needs[0] {
            grads[0] = Some(super::unbroadcast_tensor(
                kernels::zip("div", g, b, functors::Div)?,
                a,
            )?);
        }
        if needs[1] {
            let go = kernels::zip("mul", g, out, functors::Mul)?;
            let q = kernels::zip("div", &go, b, functors::Div)?;
            grads[1] = Some(super::unbroadcast_tensor(kernels::map(&q, NegFn), b)?);
        }
        Ok(true)
    }
    crate::scalar_rule!(arity 2, |g, x, y, d| { d[0] = g / x[1]; d[1] = -((g * y) / x[1]); });
    fn jvp<'g>(
        &self,
        t: &[Option<Var<'g>>],
        inputs: &[Var<'g>],
        out: &Var<'g>,
    ) -> Result<Option<Var<'g>>> {
        let b = &inputs[1];
        super::sum_tangents(
            out.shape(),
            [
                t[0].as_ref().map(|ta| ta.try_div(b)),
                t[1].as_ref().map(|tb| Ok(-(out.try_mul(tb)?.try_div(b)?))),
            ],
        )
    }
}

/// `-a`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Neg;

crate::unary_fn!(
    /// `-x`
    NegFn,
    |x| -x
);

impl Differentiable for Neg {
    fn name(&self) -> &str {
        "neg"
    }
    fn arity(&self) -> Option<usize> {
        Some(1)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        expect_inputs("neg", inputs, 1)?;
        Ok(kernels::map(inputs[0], NegFn))
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        _inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        Ok(smallvec![Some(-g)])
    }
    fn backward_fast(
        &self,
        g: &Tensor,
        _inputs: &[&Tensor],
        _out: &Tensor,
        _needs: &[bool],
        grads: &mut [Option<Tensor>],
    ) -> Result<bool> {
        grads[0] = Some(kernels::map(g, NegFn));
        Ok(true)
    }
    crate::scalar_rule!(arity 1, |g, _x, _y, d| d[0] = -g);
    fn jvp<'g>(
        &self,
        t: &[Option<Var<'g>>],
        _inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<Option<Var<'g>>> {
        Ok(t[0].as_ref().map(|t| -t))
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Add);
    reg.add_builtin(Sub);
    reg.add_builtin(Mul);
    reg.add_builtin(Div);
    reg.add_builtin(Neg);
}

#[allow(clippy::should_implement_trait)]
impl<'g> Var<'g> {
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
    #[track_caller]
    #[inline]
    pub fn try_add(&self, other: &Var<'g>) -> Result<Var<'g>> {
        self.graph().record(Add, &[self, other])
    }

    /// `self - other`, broadcasting.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let a = g.variable(Tensor::scalar(5.0));
    /// assert_eq!(a.try_sub(&g.constant(Tensor::scalar(2.0)))?.value().item()?, 3.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn try_sub(&self, other: &Var<'g>) -> Result<Var<'g>> {
        self.graph().record(Sub, &[self, other])
    }

    /// `self * other`, broadcasting.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let a = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2])?);
    /// assert_eq!(a.try_mul(&a)?.value().to_f64_vec(), vec![1.0, 4.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn try_mul(&self, other: &Var<'g>) -> Result<Var<'g>> {
        self.graph().record(Mul, &[self, other])
    }

    /// `self / other`, broadcasting.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let a = g.variable(Tensor::scalar(3.0));
    /// assert_eq!(a.try_div(&g.constant(Tensor::scalar(4.0)))?.value().item()?, 0.75);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn try_div(&self, other: &Var<'g>) -> Result<Var<'g>> {
        self.graph().record(Div, &[self, other])
    }

    /// `self + other`; panics with the error message on mismatched shapes
    /// (use [`try_add`](Self::try_add) to get the error).
    #[track_caller]
    #[inline]
    pub fn add(&self, other: &Var<'g>) -> Var<'g> {
        self.graph().record_or_panic(Add, &[self, other])
    }

    /// `self - other`; panics on mismatched shapes (see [`try_sub`](Self::try_sub)).
    #[track_caller]
    #[inline]
    pub fn sub(&self, other: &Var<'g>) -> Var<'g> {
        self.graph().record_or_panic(Sub, &[self, other])
    }

    /// `self * other`; panics on mismatched shapes (see [`try_mul`](Self::try_mul)).
    #[track_caller]
    #[inline]
    pub fn mul(&self, other: &Var<'g>) -> Var<'g> {
        self.graph().record_or_panic(Mul, &[self, other])
    }

    /// `self / other`; panics on mismatched shapes (see [`try_div`](Self::try_div)).
    #[track_caller]
    #[inline]
    pub fn div(&self, other: &Var<'g>) -> Var<'g> {
        self.graph().record_or_panic(Div, &[self, other])
    }

    /// `-self`.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// assert_eq!(g.variable(Tensor::scalar(2.0)).neg().value().item()?, -2.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn neg(&self) -> Var<'g> {
        self.graph().record_or_panic(Neg, &[self])
    }

    /// `self + c` for a scalar `c` (in self's dtype; no broadcast tensor is allocated).
    #[track_caller]
    #[inline]
    pub fn add_scalar(&self, c: f64) -> Var<'g> {
        self.graph()
            .record_or_panic(Add, &[self, &self.scalar_like(c)])
    }

    /// `self - c` for a scalar `c`.
    #[track_caller]
    #[inline]
    pub fn sub_scalar(&self, c: f64) -> Var<'g> {
        self.graph()
            .record_or_panic(Sub, &[self, &self.scalar_like(c)])
    }

    /// `c - self` for a scalar `c`.
    #[track_caller]
    #[inline]
    pub fn rsub_scalar(&self, c: f64) -> Var<'g> {
        self.graph()
            .record_or_panic(Sub, &[&self.scalar_like(c), self])
    }

    /// `self * c` for a scalar `c`.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1.0f32, 2.0], &[2])?);
    /// assert_eq!((&x * 2.0).value().to_vec::<f32>()?, vec![2.0, 4.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn mul_scalar(&self, c: f64) -> Var<'g> {
        self.graph()
            .record_or_panic(Mul, &[self, &self.scalar_like(c)])
    }

    /// `self / c` for a scalar `c`.
    #[track_caller]
    #[inline]
    pub fn div_scalar(&self, c: f64) -> Var<'g> {
        self.graph()
            .record_or_panic(Div, &[self, &self.scalar_like(c)])
    }

    /// `c / self` for a scalar `c`.
    #[track_caller]
    #[inline]
    pub fn rdiv_scalar(&self, c: f64) -> Var<'g> {
        self.graph()
            .record_or_panic(Div, &[&self.scalar_like(c), self])
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, Graph, Tensor};

    fn t(v: &[f64], s: &[usize]) -> Tensor {
        Tensor::from_vec(v.to_vec(), s).unwrap()
    }

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
        assert!((r32.value().item().unwrap() - r64.value().item().unwrap()).abs() < 1e-6);
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

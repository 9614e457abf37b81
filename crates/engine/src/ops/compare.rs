//! Ops that pick between operands: `maximum` and `minimum` (broadcasting,
//! NaN-propagating; each one rule, see [`rule`](super::rule)) and `where`
//! (three operands, broadcasting).
//!
//! Ties: `maximum(a, b)` and `minimum(a, b)` split the gradient equally
//! between `a` and `b` where they are equal, as PyTorch does.

use crate::base::fallible::fallible;
use crate::ops::declare_op;
use smallvec::smallvec;

use super::rule::{Binary, BinaryRule, Cmp, Num, KINK_MARGIN};
use super::{
    sum_tangents, unbroadcast, unbroadcast_tensor, GradInputs, Node, OpRegistry, StructuredOp,
};
use crate::base::error::or_panic;
use crate::base::error::Result;
use crate::core::graph::{Graph, Var};
use crate::core::{sample_tensor, BatchContext, Batched, OpFacts};
use crate::kernels::{self, TernaryFn};
use crate::tensor::{Element, Tensor};

/// The share of `g` that `w` gets for being the extremum against `l`: all
/// of it where `w` wins (`w > l`, or `w` alone is NaN), half at a tie (or
/// both NaN), none where it loses.
#[inline(always)]
fn winner_share<N: Num>(g: &N, w: &N, l: &N) -> N {
    let zero = g.lit(0.0);
    let half = g.scale(0.5);
    // `x == x` is false only for NaN.
    let nan = w.select(Cmp::Eq, w, &zero, &l.select(Cmp::Eq, l, g, &half));
    let tie_or_nan = w.select(Cmp::Eq, l, &half, &nan);
    w.select(Cmp::Gt, l, g, &w.select(Cmp::Lt, l, &zero, &tie_or_nan))
}

/// The share of `g` that `x` gets in a maximum (`max`) or a minimum
/// against `other`: in a minimum, `x` wins where `other` is greater.
#[inline(always)]
fn extremum_share<N: Num>(max: bool, g: &N, x: &N, other: &N) -> N {
    if max {
        winner_share(g, x, other)
    } else {
        winner_share(g, other, x)
    }
}

/// `maximum` and `minimum`, one rule each: the value is `a` where `a` wins
/// (`a $wins b`) or is NaN, else `b`; each operand's gradient is its
/// [`extremum_share`]; random inputs stay away from ties.
macro_rules! extremum_rule {
    ($(#[$doc:meta])* $rule:ident = $name:literal, $wins:tt, max: $max:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $rule;

        impl BinaryRule for $rule {
            const NAME: &'static str = $name;
            #[inline(always)]
            fn value<T: Element>(self, a: T, b: T) -> T {
                if a $wins b || a.is_nan() {
                    a
                } else {
                    b
                }
            }
            #[inline(always)]
            fn grad_a<N: Num>(self, g: &N, a: &N, b: &N, _y: &N) -> N {
                extremum_share($max, g, a, b)
            }
            #[inline(always)]
            fn grad_b<N: Num>(self, g: &N, a: &N, b: &N, _y: &N) -> N {
                extremum_share($max, g, b, a)
            }
            fn domain(a: f64, b: f64) -> bool {
                (a - b).abs() > KINK_MARGIN
            }
        }
    };
}

extremum_rule! {
    /// Elementwise maximum, broadcasting, NaN-propagating. At a tie the
    /// gradient is split equally between the operands (as in PyTorch).
    Maximum = "maximum", >, max: true
}

extremum_rule! {
    /// Elementwise minimum, broadcasting, NaN-propagating. At a tie the
    /// gradient is split equally between the operands (as in PyTorch).
    Minimum = "minimum", <, max: false
}

/// `c != 0 ? a : b`
#[derive(Clone, Copy, Debug)]
struct SelectFn;

impl TernaryFn for SelectFn {
    #[inline(always)]
    fn call<T: Element>(self, c: T, a: T, b: T) -> T {
        if c != T::zero() {
            a
        } else {
            b
        }
    }
}

/// `where(condition, a, b)`: `a` where the condition is nonzero (NaN counts
/// as nonzero), else `b`; all three broadcast together. The condition may
/// have any dtype, bool included (it is converted); `a` and `b` must match
/// and be floats. Gradients
/// flow to the chosen operand only, never to the condition.
#[derive(Clone, Copy, Debug, Default)]
pub struct Where;

impl StructuredOp for Where {
    declare_op!("where"(condition, input, other), no_grad[0]);
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (c, a, b) = (inputs[0], inputs[1], inputs[2]);
        kernels::elementwise::common_dtype("where", a, b)?;
        let c = c.to_dtype(a.dtype());
        kernels::zip3("where", &c, a, b, SelectFn)
    }
    // One zero shared by both operands' gradients.
    fn grads<'g>(&self, g: &Var<'g>, n: Node<'_, 'g>) -> Result<GradInputs<'g>> {
        let (c, a, b) = (n.x(0), n.x(1), n.x(2));
        let zero = g.scalar_like(0.0);
        Ok(smallvec![
            None,
            a.requires_grad()
                .then(|| unbroadcast(select(c, g, &zero)?, a))
                .transpose()?,
            b.requires_grad()
                .then(|| unbroadcast(select(c, &zero, g)?, b))
                .transpose()?,
        ])
    }
    fn grad_fast(&self, i: usize, g: &Tensor, x: &[&Tensor], _: &Tensor) -> Option<Result<Tensor>> {
        let zero = Tensor::scalar_of(0.0, g.dtype());
        let chosen = if i == 1 {
            [x[0], g, &zero]
        } else {
            [x[0], &zero, g]
        };
        Some(
            self.forward(&chosen)
                .and_then(|d| unbroadcast_tensor(d, x[i])),
        )
    }
    fn tangents<'g>(&self, t: &[Option<Var<'g>>], n: Node<'_, 'g>) -> Result<Option<Var<'g>>> {
        let zero = n.output.scalar_like(0.0);
        if t[1].is_none() && t[2].is_none() {
            return Ok(None);
        }
        let ta = t[1].as_ref().unwrap_or(&zero);
        let tb = t[2].as_ref().unwrap_or(&zero);
        sum_tangents(n.output.shape(), [Some(select(n.x(0), ta, tb))])
    }
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        super::batching::elementwise(self, x)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            // A bool condition of the operands' shape, a second operand of
            // lower rank (broadcasting).
            sample_inputs: Some(|seed| {
                let pick: Vec<bool> = (0..6).map(|i| (i + seed) % 3 != 1).collect();
                vec![
                    Tensor::from_vec(pick, &[2, 3]).expect("a shape"),
                    sample_tensor(&[2, 3], seed, 1.0),
                    sample_tensor(&[3], seed + 3, 1.0),
                ]
            }),
            ..OpFacts::opaque(Some(3))
        }
    }
}

fn select<'g>(c: &Var<'g>, a: &Var<'g>, b: &Var<'g>) -> Result<Var<'g>> {
    c.graph().record(Where, &[c, a, b])
}

/// A condition for [`Var::try_where`]: a `Tensor` (nonzero = true) or a
/// `Var` (its value is used; no gradient flows to it).
pub trait Condition<'g> {
    /// The condition as a value in `graph`.
    fn into_condition(self, graph: &'g Graph) -> Var<'g>;
}

impl<'g> Condition<'g> for &Tensor {
    fn into_condition(self, graph: &'g Graph) -> Var<'g> {
        Var::constant_in(graph, self.clone())
    }
}

impl<'g> Condition<'g> for &Var<'g> {
    fn into_condition(self, _graph: &'g Graph) -> Var<'g> {
        self.clone()
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Binary(Maximum));
    reg.add_builtin(Binary(Minimum));
    reg.add_builtin(Where);
}

impl<'g> Var<'g> {
    fallible! {
        /// Elementwise `max(self, other)`, broadcasting; NaN wins. Where the two
        /// are equal, each gets half the gradient (as in PyTorch).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let a = g.variable(Tensor::from_vec(vec![1.0, 5.0, 2.0], &[3])?);
        /// let b = g.variable(Tensor::scalar(2.0));
        /// let m = a.try_maximum(&b)?;
        /// assert_eq!(m.value().to_f64_vec(), vec![2.0, 5.0, 2.0]);
        /// let grads = m.sum().backward()?;
        /// assert_eq!(grads.wrt(&a).to_f64_vec(), vec![0.0, 1.0, 0.5]);
        /// assert_eq!(grads.wrt(&b).try_item()?, 1.5);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_maximum / maximum(&self, other: &Var<'g>) -> Var<'g> {
            self.graph().record(Binary(Maximum), &[self, other])
        }
    }

    fallible! {
        /// Elementwise `min(self, other)`, broadcasting; NaN wins. Where the two
        /// are equal, each gets half the gradient (as in PyTorch).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let a = g.variable(Tensor::from_vec(vec![1.0, 5.0], &[2])?);
        /// let b = g.variable(Tensor::from_vec(vec![3.0, 4.0], &[2])?);
        /// let m = a.try_minimum(&b)?;
        /// assert_eq!(m.value().to_f64_vec(), vec![1.0, 4.0]);
        /// assert_eq!(m.sum().backward()?.wrt(&a).to_f64_vec(), vec![1.0, 0.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_minimum / minimum(&self, other: &Var<'g>) -> Var<'g> {
            self.graph().record(Binary(Minimum), &[self, other])
        }
    }

    /// `where(condition, self, other)`: `self` where the condition is nonzero,
    /// `other` elsewhere; all three broadcast together. The condition is a
    /// `&Tensor` or a `&Var`, bool (as from a comparison) or of any other
    /// dtype (nonzero is true); the gradient flows to the chosen operand
    /// only, never to the condition (PyTorch's `Tensor.where(condition, other)`).
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let a = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3])?);
    /// let b = g.variable(Tensor::scalar(-1.0));
    /// let mask = Tensor::from_vec(vec![1.0, 0.0, 1.0], &[3])?;
    /// let y = a.try_where(&mask, &b)?;
    /// assert_eq!(y.value().to_f64_vec(), vec![1.0, -1.0, 3.0]);
    /// let grads = y.sum().backward()?;
    /// assert_eq!(grads.wrt(&a).to_f64_vec(), vec![1.0, 0.0, 1.0]);
    /// assert_eq!(grads.wrt(&b).try_item()?, 1.0);
    /// // A bool condition, e.g. from a comparison.
    /// let positive = a.try_gt_scalar(1.5)?;
    /// assert_eq!(a.try_where(&positive, &b)?.value().to_f64_vec(), vec![-1.0, 2.0, 3.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline]
    pub fn try_where(&self, condition: impl Condition<'g>, other: &Var<'g>) -> Result<Var<'g>> {
        let c = condition.into_condition(self.graph());
        self.graph().record(Where, &[&c, self, other])
    }

    /// `where(condition, self, other)`; panics on shapes that do not
    /// broadcast or mismatched dtypes (see [`try_where`](Self::try_where)).
    #[track_caller]
    #[inline]
    pub fn where_(&self, condition: impl Condition<'g>, other: &Var<'g>) -> Var<'g> {
        or_panic(self.try_where(condition, other))
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, jvpcheck, DType, Error, Graph, Tensor};

    use crate::tensor::test_util::tensor as t;

    #[test]
    fn forward_values_broadcast_and_nan() {
        let g = Graph::new();
        let a = g.variable(t(&[1.0, -2.0, 3.0, 0.5, f64::NAN, 4.0], &[2, 3]));
        let b = g.variable(t(&[0.0, 2.0], &[2, 1]));
        let mx = a.maximum(&b).value().to_f64_vec();
        let mn = a.minimum(&b).value().to_f64_vec();
        assert_eq!(mx[..4], [1.0, 0.0, 3.0, 2.0]);
        assert!(mx[4].is_nan());
        assert_eq!(mx[5], 4.0);
        assert_eq!(mn[..4], [0.0, -2.0, 0.0, 0.5]);
        assert!(mn[4].is_nan());
        assert_eq!(mn[5], 2.0);
        // NaN on either side wins.
        let n = g.constant(Tensor::scalar(f64::NAN));
        for y in [b.maximum(&n), b.minimum(&n)] {
            assert!(y.value().to_f64_vec().iter().all(|v| v.is_nan()));
        }
    }

    #[test]
    fn ties_split_the_gradient() {
        let g = Graph::new();
        let a = g.variable(t(&[1.0, 2.0, 3.0], &[3]));
        let b = g.variable(t(&[1.0, 5.0, 0.0], &[3]));
        for m in [a.maximum(&b), a.minimum(&b)] {
            let grads = m.sum().backward().unwrap();
            let (da, db) = (grads.wrt(&a).to_f64_vec(), grads.wrt(&b).to_f64_vec());
            assert_eq!(da[0], 0.5);
            assert_eq!(db[0], 0.5);
            assert_eq!(da[1] + db[1], 1.0);
        }
        let grads = a.maximum(&b).sum().backward().unwrap();
        assert_eq!(grads.wrt(&a).to_f64_vec(), vec![0.5, 0.0, 1.0]);
        let grads = a.minimum(&b).sum().backward().unwrap();
        assert_eq!(grads.wrt(&a).to_f64_vec(), vec![0.5, 1.0, 0.0]);
        // x.maximum(x) is x: the two halves add up to 1.
        let twice = a.maximum(&a).sum().backward().unwrap();
        assert_eq!(twice.wrt(&a).to_f64_vec(), vec![1.0; 3]);
    }

    #[test]
    fn gradients() {
        let a = t(&[0.5, -1.0, 2.0, 1.5, 0.3, -0.7], &[2, 3]);
        let b = t(&[1.2, -0.4, 0.8], &[3]);
        let c = t(&[0.9, 0.1], &[2, 1]);
        gradcheck(|v| v[0].try_maximum(&v[1]), &[a.clone(), b.clone()]).unwrap();
        gradcheck(|v| v[0].try_minimum(&v[1]), &[a.clone(), b.clone()]).unwrap();
        gradcheck(|v| v[0].try_maximum(&v[1]), &[c.clone(), b.clone()]).unwrap();
        gradcheck(
            |v| v[0].try_minimum(&v[1]),
            &[a.clone(), Tensor::scalar(0.4)],
        )
        .unwrap();
        // Two consumers of one value.
        gradcheck(
            |v| Ok(v[0].maximum(&v[1]) * v[0].minimum(&v[1]) + &v[0]),
            &[a.clone(), b.clone()],
        )
        .unwrap();
        let mask = t(&[1.0, 0.0, 1.0], &[3]);
        gradcheck(|v| v[0].try_where(&mask, &v[1]), &[a.clone(), c.clone()]).unwrap();
        gradcheck(
            |v| v[0].try_where(&mask, &v[1]),
            &[c.clone(), Tensor::scalar(0.3)],
        )
        .unwrap();
        let col_mask = t(&[0.0, 1.0], &[2, 1]);
        gradcheck(
            |v| v[0].try_where(&col_mask, &v[1]),
            &[b.clone(), a.clone()],
        )
        .unwrap();
        gradcheck(|v| Ok(v[0].where_(&mask, &(&v[0] * &v[0]))), &[a]).unwrap();
    }

    #[test]
    fn tangents() {
        let a = t(&[0.5, -1.0, 2.0, 1.5, 0.3, -0.7], &[2, 3]);
        let b = t(&[1.2, -0.4, 0.8], &[3]);
        jvpcheck(|v| v[0].try_maximum(&v[1]), &[a.clone(), b.clone()]).unwrap();
        jvpcheck(|v| v[0].try_minimum(&v[1]), &[a.clone(), b.clone()]).unwrap();
        let mask = t(&[0.0, 1.0], &[2, 1]);
        jvpcheck(|v| v[0].try_where(&mask, &v[1]), &[b.clone(), a.clone()]).unwrap();
        jvpcheck(
            |v| v[0].try_where(&mask, &v[0].graph().constant(Tensor::scalar(1.0))),
            &[b],
        )
        .unwrap();
    }

    #[test]
    fn where_conditions_and_broadcasting() {
        let g = Graph::new();
        let a = g.variable(t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]));
        let b = g.variable(t(&[-1.0, -2.0], &[2, 1]));
        // A Var condition of the other dtype; NaN counts as true.
        let cond32 = Tensor::from_vec(vec![1.0f32, 0.0, f32::NAN], &[3]).unwrap();
        let cv = g.variable(cond32.clone());
        let y = a.where_(&cv, &b);
        assert_eq!(y.value().to_f64_vec(), vec![1.0, -1.0, 3.0, 4.0, -2.0, 6.0]);
        let grads = y.sum().backward().unwrap();
        assert_eq!(
            grads.wrt(&a).to_f64_vec(),
            vec![1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
        );
        assert_eq!(grads.wrt(&b).to_f64_vec(), vec![1.0, 1.0]);
        assert_eq!(grads.wrt(&cv).to_f64_vec(), vec![0.0; 3]);
        // A Tensor condition gives the same; scalars stay 0-d.
        assert_eq!(a.where_(&cond32, &b).value(), y.value());
        let s = g.variable(Tensor::scalar(2.0));
        let z = s.where_(&Tensor::scalar(0.0), &g.constant(Tensor::scalar(7.0)));
        assert!(z.value().is_scalar());
        assert_eq!(z.value().item(), 7.0);
    }

    #[test]
    fn f32_and_f64_agree() {
        let g = Graph::new();
        let v = [0.5, -1.0, 2.0, 1.5];
        let (a32, a64) = (
            g.variable(t(&v, &[4]).to_dtype(DType::F32)),
            g.variable(t(&v, &[4])),
        );
        let mask = t(&[1.0, 0.0, 0.0, 1.0], &[4]);
        let r32 = a32
            .maximum(&a32.sin())
            .where_(&mask, &a32.minimum(&a32.cos()))
            .sum();
        let r64 = a64
            .maximum(&a64.sin())
            .where_(&mask, &a64.minimum(&a64.cos()))
            .sum();
        assert!((r32.value().item() - r64.value().item()).abs() < 1e-5);
        let g32 = r32.backward().unwrap().wrt(&a32);
        let g64 = r64.backward().unwrap().wrt(&a64);
        assert!(g32.allclose(&g64.to_dtype(DType::F32), 1e-5, 1e-5));
    }

    #[test]
    fn errors() {
        let g = Graph::new();
        let a = g.variable(t(&[1.0, 2.0, 3.0], &[3]));
        let b = g.variable(t(&[1.0, 2.0], &[2]));
        let a32 = g.variable(t(&[1.0, 2.0, 3.0], &[3]).to_dtype(DType::F32));
        assert!(matches!(
            a.try_maximum(&b),
            Err(Error::ShapeMismatch { op: "maximum", .. })
        ));
        assert!(matches!(
            a.try_minimum(&a32),
            Err(Error::DTypeMismatch { op: "minimum", .. })
        ));
        let mask = t(&[1.0, 0.0], &[2]);
        assert!(matches!(
            a.try_where(&mask, &a),
            Err(Error::ShapeMismatch { op: "where", .. })
        ));
        assert!(matches!(
            a.try_where(&mask, &a32),
            Err(Error::DTypeMismatch { op: "where", .. })
        ));
    }

    #[test]
    fn second_derivatives_through_create_graph() {
        use crate::ops::testing::hvpcheck;
        let x = t(&[0.5, -1.0, 2.0, 1.5, 0.3, -0.7], &[2, 3]);
        let mask = t(&[1.0, 0.0, 1.0], &[3]);
        hvpcheck(|x| Ok(x.maximum(&x.sin()) * x.minimum(&x.cos())), &x).unwrap();
        hvpcheck(|x| x.try_mul(x)?.try_where(&mask, &x.sin()), &x).unwrap();
    }

    #[test]
    fn fast_path_matches_var_backward() {
        use crate::ops::testing::fast_path_agrees;
        let a = t(&[0.5, -1.0, 2.0, 1.5, 0.3, 1.2], &[2, 3]);
        let b = t(&[1.2, -0.4, 0.8], &[3]);
        fast_path_agrees(|v| v[0].try_maximum(&v[1]), &[a.clone(), b.clone()]).unwrap();
        fast_path_agrees(|v| v[0].try_minimum(&v[1]), &[a.clone(), b.clone()]).unwrap();
        let mask = t(&[0.0, 1.0], &[2, 1]);
        fast_path_agrees(|v| v[0].try_where(&mask, &v[1]), &[b, a]).unwrap();
    }
}

//! [`BinaryRule`] and [`Binary`], the op every two-input elementwise rule
//! becomes (broadcasting, with gradients summed back to each input's shape).

use std::fmt;
use std::sync::Arc;

use smallvec::smallvec;

use super::pointwise::BinaryKernel;
use super::{Lane, Num, OpFacts, Plain, Traced};
use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::{Node, Pointwise, Primitive};
use crate::kernels::{self, BinaryFn};
use crate::ops::{
    expect_inputs, sum_tangents, unbroadcast, unbroadcast_tensor, Differentiable, GradInputs,
    ScalarArgs, ScalarBackward,
};
use crate::tensor::{Element, Tensor};

/// The one definition of a two-input elementwise op: its value and the
/// gradient it passes to each input, at one element. [`Binary`] turns it
/// into a broadcasting op.
///
/// ```
/// use retrograd::ops::rule::{Binary, BinaryRule, Num};
/// use retrograd::{Element, Graph, Tensor};
///
/// /// f(a, b) = a² b.
/// #[derive(Clone, Copy, Debug, Default)]
/// struct SquareTimes;
/// impl BinaryRule for SquareTimes {
///     const NAME: &'static str = "square_times";
///     fn value<T: Element>(self, a: T, b: T) -> T { a * a * b }
///     fn grad_a<N: Num>(self, g: &N, a: &N, b: &N, _y: &N) -> N { g.mul(&a.mul(b).scale(2.0)) }
///     fn grad_b<N: Num>(self, g: &N, a: &N, _b: &N, _y: &N) -> N { g.mul(&a.mul(a)) }
/// }
///
/// let graph = Graph::new();
/// let a = graph.variable(Tensor::scalar(3.0));
/// let b = graph.variable(Tensor::scalar(2.0));
/// let y = graph.record(Binary(SquareTimes), &[&a, &b])?;
/// let grads = y.backward()?;
/// assert_eq!((grads.wrt(&a).try_item()?, grads.wrt(&b).try_item()?), (12.0, 9.0));
/// # Ok::<(), retrograd::Error>(())
/// ```
pub trait BinaryRule: Copy + Default + Send + Sync + fmt::Debug + 'static {
    /// The op's name (PyTorch's).
    const NAME: &'static str;
    /// The basic IEEE operation the rule is, if it is one (`+ - * /`): a
    /// compiled step's scalar programs run it without a call.
    const PRIMITIVE: Option<Primitive> = None;

    /// `f(a, b)` at one element.
    fn value<T: Element>(self, a: T, b: T) -> T;

    /// `g * ∂f/∂a` at one element, given the inputs and the output `y`;
    /// linear in `g`.
    fn grad_a<N: Num>(self, g: &N, a: &N, b: &N, y: &N) -> N;

    /// `g * ∂f/∂b` at one element, likewise.
    fn grad_b<N: Num>(self, g: &N, a: &N, b: &N, y: &N) -> N;

    /// Whether `(a, b)` is a safe random input (see [`Domain`](super::Domain)).
    fn domain(a: f64, b: f64) -> bool {
        let _ = (a, b);
        true
    }
}

/// The op of a [`BinaryRule`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Binary<R>(pub R);

impl<R: BinaryRule> Binary<R> {
    /// The scalar lane in one dtype: both gradients on plain numbers (one
    /// that no input needs is computed and dropped).
    #[inline(always)]
    fn lane<T: Element>(&self, s: &mut ScalarArgs<'_, T>) -> bool {
        if s.inputs.len() != 2 {
            return false;
        }
        let (g, a, b, y) = (
            Lane(s.grad),
            Lane(s.inputs[0]),
            Lane(s.inputs[1]),
            Lane(s.output),
        );
        s.grads[0] = self.0.grad_a(&g, &a, &b, &y).0;
        s.grads[1] = self.0.grad_b(&g, &a, &b, &y).0;
        true
    }
}

/// The rule's value as a kernel functor.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ValueFn<R>(pub(crate) R);

impl<R: BinaryRule> BinaryFn for ValueFn<R> {
    #[inline(always)]
    fn call<T: Element>(self, a: T, b: T) -> T {
        self.0.value(a, b)
    }
}

impl<R: BinaryRule> Differentiable for Binary<R> {
    fn name(&self) -> &str {
        R::NAME
    }
    settings_and_arity!(2);
    // `kernels::zip` reports a refused output buffer itself.
    fn catches_refused_buffers(&self) -> bool {
        true
    }
    #[inline(always)]
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        expect_inputs(R::NAME, inputs, 2)?;
        kernels::zip(R::NAME, inputs[0], inputs[1], ValueFn(self.0))
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        inputs: &[Var<'g>],
        out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        let (a, b) = (&inputs[0], &inputs[1]);
        let (tg, ta, tb, ty) = (Traced::of(g), Traced::of(a), Traced::of(b), Traced::of(out));
        let da = a
            .requires_grad()
            .then(|| unbroadcast(self.0.grad_a(&tg, &ta, &tb, &ty).into_result()?, a))
            .transpose()?;
        let db = b
            .requires_grad()
            .then(|| unbroadcast(self.0.grad_b(&tg, &ta, &tb, &ty).into_result()?, b))
            .transpose()?;
        Ok(smallvec![da, db])
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
        let (pg, pa, pb, py) = (Plain::of(g), Plain::of(a), Plain::of(b), Plain::of(out));
        if needs[0] {
            let d = self.0.grad_a(&pg, &pa, &pb, &py).into_result()?;
            grads[0] = Some(unbroadcast_tensor(d, a)?);
        }
        if needs[1] {
            let d = self.0.grad_b(&pg, &pa, &pb, &py).into_result()?;
            grads[1] = Some(unbroadcast_tensor(d, b)?);
        }
        Ok(true)
    }
    #[inline]
    fn backward_scalar(&self, call: &mut ScalarBackward<'_>) -> bool {
        match call {
            ScalarBackward::F32(s) => self.lane(s),
            ScalarBackward::F64(s) => self.lane(s),
        }
    }
    // Each output element depends on one element of each input, so J t is
    // the sum of the two gradient formulas with the tangents for `g`.
    fn jvp<'g>(&self, t: &[Option<Var<'g>>], node: Node<'_, 'g>) -> Result<Option<Var<'g>>> {
        let (a, b, y) = (
            Traced::of(node.x(0)),
            Traced::of(node.x(1)),
            Traced::of(node.output),
        );
        sum_tangents(
            node.output.shape(),
            [
                t[0].as_ref()
                    .map(|ta| self.0.grad_a(&Traced::of(ta), &a, &b, &y).into_result()),
                t[1].as_ref()
                    .map(|tb| self.0.grad_b(&Traced::of(tb), &a, &b, &y).into_result()),
            ],
        )
    }
    fn pointwise(&self) -> Option<Arc<dyn Pointwise>> {
        Some(Arc::new(BinaryKernel(self.0)))
    }
    elementwise_batch!();
    fn facts(&self) -> OpFacts {
        OpFacts {
            arity: Some(2),
            elementwise: true,
            domain: Some(|v| R::domain(v[0], v[1])),
            tangent: true,
            second_derivative: true,
            example: Some(Arc::new(*self)),
            sample_inputs: None,
        }
    }
}

/// The `Var` methods of a binary rule, inside an `impl<'g> Var<'g>`: each
/// with its doc comment, `try_name / name => rule`: `try_name(&self,
/// other)` records `Binary(rule)` and returns its error (mismatched shapes
/// or dtypes), `name` panics with it at the caller's line. Inlined as
/// written by hand before (W1's scalar ops go through them).
macro_rules! binary_methods {
    ($(#[$try_doc:meta])* $try_name:ident / $(#[$doc:meta])* $name:ident => $rule:expr) => {
        $(#[$try_doc])*
        #[track_caller]
        #[inline]
        pub fn $try_name(&self, other: &Var<'g>) -> $crate::base::error::Result<Var<'g>> {
            self.graph().record($crate::ops::rule::Binary($rule), &[self, other])
        }

        $(#[$doc])*
        #[track_caller]
        #[inline]
        pub fn $name(&self, other: &Var<'g>) -> Var<'g> {
            self.graph()
                .record_or_panic($crate::ops::rule::Binary($rule), &[self, other])
        }
    };
}
pub(crate) use binary_methods;

/// The `Var` method of a binary rule with a scalar `c` (in the value's
/// dtype; no broadcast tensor is allocated) on one side, inside an
/// `impl<'g> Var<'g>`: `name => self rule c` or `name => c rule self`.
macro_rules! scalar_method {
    ($(#[$doc:meta])* $name:ident => self $rule:ident c) => {
        $crate::ops::rule::scalar_method!(@emit $(#[$doc])* $name, $rule, false);
    };
    ($(#[$doc:meta])* $name:ident => c $rule:ident self) => {
        $crate::ops::rule::scalar_method!(@emit $(#[$doc])* $name, $rule, true);
    };
    (@emit $(#[$doc:meta])* $name:ident, $rule:ident, $scalar_first:literal) => {
        $(#[$doc])*
        #[track_caller]
        #[inline]
        pub fn $name(&self, c: f64) -> Var<'g> {
            let c = self.scalar_like(c);
            let inputs = if $scalar_first { [&c, self] } else { [self, &c] };
            self.graph()
                .record_or_panic($crate::ops::rule::Binary($rule), &inputs)
        }
    };
}
pub(crate) use scalar_method;

//! [`UnaryRule`] and [`Unary`], the op every one-input elementwise rule
//! becomes.

use std::fmt;
use std::sync::Arc;

use smallvec::smallvec;

use super::pointwise::UnaryKernel;
use super::{Block, Lane, Num, OpFacts, Traced};
use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::{Node, Pointwise, Primitive};
use crate::kernels::{self, BinaryFn, UnaryFn};
use crate::ops::{
    expect_inputs, Differentiable, GradInputs, OpAttributes, ScalarArgs, ScalarBackward,
};
use crate::tensor::{Element, Tensor};

/// Which value a unary rule writes its derivative in: the input `x`, or
/// the output `y` (cheaper for `exp`, `tanh`, `sigmoid`: `f'` from `f`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlopeOf {
    /// The derivative is a function of the input.
    Input,
    /// The derivative is a function of the output.
    Output,
}

/// The one definition of a one-input elementwise op: its value and its
/// gradient at one element. [`Unary`] turns it into an op.
///
/// ```
/// use retrograd::ops::rule::{Num, SlopeOf, Unary, UnaryRule};
/// use retrograd::{Element, Graph, Tensor};
///
/// /// f(x) = x³, f'(x) = 3x².
/// #[derive(Clone, Copy, Debug, Default)]
/// struct Cube;
/// impl UnaryRule for Cube {
///     const NAME: &'static str = "cube";
///     const SLOPE_OF: SlopeOf = SlopeOf::Input;
///     fn value<T: Element>(self, x: T) -> T { x * x * x }
///     fn grad<N: Num>(self, g: &N, x: &N) -> N { g.mul(&x.mul(x).scale(3.0)) }
/// }
///
/// let graph = Graph::new();
/// let x = graph.variable(Tensor::scalar(2.0));
/// let y = graph.record(Unary(Cube), &[&x])?;
/// assert_eq!(y.value().try_item()?, 8.0);
/// assert_eq!(y.backward()?.wrt(&x).try_item()?, 12.0);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub trait UnaryRule: Copy + Default + Send + Sync + fmt::Debug + 'static {
    /// The op's name (PyTorch's).
    const NAME: &'static str;
    /// Whether [`grad`](Self::grad) reads the input or the output.
    const SLOPE_OF: SlopeOf;
    /// The basic IEEE operation the rule is, if it is one (negation): a
    /// compiled step's scalar programs run it without a call.
    const PRIMITIVE: Option<Primitive> = None;

    /// Checks the rule's parameters (a clamp's bounds, say) before a forward.
    fn check(self) -> Result<()> {
        Ok(())
    }

    /// `f(x)` at one element.
    fn value<T: Element>(self, x: T) -> T;

    /// Whether the slice loops run this rule by [`Block`]s on f32: for a
    /// rule whose value or gradient is one long dependency chain per
    /// element (`exp`, `erfc`, GELU), which then also writes
    /// [`value_block`](Self::value_block). A short rule stays element by
    /// element: a block's copies in and out would cost more than they win.
    const BLOCKS: bool = false;

    /// `value` at each f32 element of a [`Block`]. The default is `value`
    /// element by element; a rule with [`BLOCKS`](Self::BLOCKS) writes the
    /// same steps over the block, each step over all its elements, so that
    /// several vectors' chains run side by side (ARCHITECTURE.md, PERF:
    /// "Long chains run in blocks"). It must give the bits of `value`.
    #[inline(always)]
    fn value_block(self, x: Block) -> Block {
        let mut out = x.0;
        for v in out.iter_mut() {
            *v = self.value(*v);
        }
        Block(out)
    }

    /// `g * f'` at one element, with `u` the input or the output as
    /// [`SLOPE_OF`](Self::SLOPE_OF) says. It must be linear in `g` (the
    /// tangent rule passes a tangent for `g`).
    fn grad<N: Num>(self, g: &N, u: &N) -> N;

    /// Whether `x` is a safe random input (see [`Domain`](super::Domain)).
    fn domain(x: f64) -> bool {
        let _ = x;
        true
    }

    /// A valid instance with typical parameters, for suites that apply
    /// every op (see [`OpFacts::example`]).
    fn example() -> Self {
        Self::default()
    }

    /// The rule's parameters by name (a slope, bounds), which the op's
    /// [`Differentiable::attributes`] lists. The default lists none.
    fn attributes(self) -> OpAttributes {
        OpAttributes::new()
    }
}

/// The op of a [`UnaryRule`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Unary<R>(pub R);

impl<R: UnaryRule> Unary<R> {
    /// The value the rule's derivative is written in.
    #[inline(always)]
    fn slope_value<'a, V>(input: &'a V, output: &'a V) -> &'a V {
        match R::SLOPE_OF {
            SlopeOf::Input => input,
            SlopeOf::Output => output,
        }
    }
}

impl<R: UnaryRule> Unary<R> {
    /// The scalar lane in one dtype: the rule over plain numbers.
    #[inline(always)]
    fn lane<T: Element>(&self, a: &mut ScalarArgs<'_, T>) -> bool {
        if a.inputs.len() != 1 {
            return false;
        }
        let u = *Self::slope_value(&a.inputs[0], &a.output);
        a.grads[0] = self.0.grad(&Lane(a.grad), &Lane(u)).0;
        true
    }
}

/// The rule's value as a kernel functor.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ValueFn<R>(pub(crate) R);

impl<R: UnaryRule> UnaryFn for ValueFn<R> {
    #[inline(always)]
    fn call<T: Element>(self, x: T) -> T {
        self.0.value(x)
    }
    const BLOCKS: bool = R::BLOCKS;
    #[inline(always)]
    fn call_block(self, x: Block) -> Block {
        self.0.value_block(x)
    }
}

/// The rule's gradient `(g, u) -> g f'` as a kernel functor: the whole
/// first-order backward in one pass.
#[derive(Clone, Copy, Debug)]
pub(super) struct GradFn<R>(pub(super) R);

impl<R: UnaryRule> BinaryFn for GradFn<R> {
    #[inline(always)]
    fn call<T: Element>(self, g: T, u: T) -> T {
        self.0.grad(&Lane(g), &Lane(u)).0
    }
    const BLOCKS: bool = R::BLOCKS;
    #[inline(always)]
    fn call_block(self, g: Block, u: Block) -> Block {
        self.0.grad(&g, &u)
    }
}

impl<R: UnaryRule> Differentiable for Unary<R> {
    fn name(&self) -> &str {
        R::NAME
    }
    settings_and_arity!(1);
    // `kernels::map_op` reports a refused output buffer itself.
    fn catches_refused_buffers(&self) -> bool {
        true
    }
    // Inlined into `record`: a call takes the input's address, which keeps
    // the `Var` on the stack and copies it there by 16-byte loads of
    // smaller stores (see `tensor/word.rs`).
    #[inline(always)]
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        expect_inputs(R::NAME, inputs, 1)?;
        self.0.check()?;
        kernels::elementwise::map_op(R::NAME, inputs[0], ValueFn(self.0))
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        inputs: &[Var<'g>],
        output: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        let u = Self::slope_value(&inputs[0], output);
        let grad = self.0.grad(&Traced::of(g), &Traced::of(u));
        Ok(smallvec![Some(grad.into_result()?)])
    }
    fn backward_fast(
        &self,
        g: &Tensor,
        inputs: &[&Tensor],
        output: &Tensor,
        _needs: &[bool],
        grads: &mut [Option<Tensor>],
    ) -> Result<bool> {
        let u = Self::slope_value(inputs[0], output);
        grads[0] = Some(kernels::zip(R::NAME, g, u, GradFn(self.0))?);
        Ok(true)
    }
    #[inline]
    fn backward_scalar(&self, call: &mut ScalarBackward<'_>) -> bool {
        match call {
            ScalarBackward::F32(a) => self.lane(a),
            ScalarBackward::F64(a) => self.lane(a),
        }
    }
    // The Jacobian is diagonal, so J t is the gradient formula with the
    // tangent in place of `g`.
    fn jvp<'g>(&self, tangents: &[Option<Var<'g>>], node: Node<'_, 'g>) -> Result<Option<Var<'g>>> {
        let u = Self::slope_value(node.x(0), node.output);
        tangents[0]
            .as_ref()
            .map(|t| self.0.grad(&Traced::of(t), &Traced::of(u)).into_result())
            .transpose()
    }
    fn pointwise(&self) -> Option<Arc<dyn Pointwise>> {
        Some(Arc::new(UnaryKernel(self.0)))
    }
    fn grad_op(&self) -> Option<crate::core::GradOp> {
        Some(crate::core::GradOp {
            op: Arc::new(super::unary_grad::UnaryGrad::new(self.0)),
            of_output: R::SLOPE_OF == SlopeOf::Output,
        })
    }
    fn attributes(&self) -> OpAttributes {
        self.0.attributes()
    }
    elementwise_batch!();
    fn facts(&self) -> OpFacts {
        OpFacts {
            arity: Some(1),
            elementwise: true,
            domain: Some(|v| R::domain(v[0])),
            tangent: true,
            second_derivative: true,
            example: Some(Arc::new(Unary(R::example()))),
            sample_inputs: None,
        }
    }
}

/// The `Var` methods of a unary rule, inside an `impl<'g> Var<'g>`: its
/// doc comment, then `try_name / name => rule` (a rule value).
/// `try_name(&self) -> Result<Var>` records `Unary(rule)` and returns the
/// error (a non-float input); `name(&self) -> Var` panics with it at the
/// caller's line. One body for every rule's methods, inlined as written by
/// hand before (W1's scalar ops go through it).
///
/// A rule with settings takes them as arguments:
/// `try_name_with / name_with(alpha: f64) => Rule { alpha }` gives the
/// pair through [`fallible!`](crate::base::fallible::fallible), so the rule's
/// `check` error comes back from `try_name_with`.
macro_rules! unary_method {
    ($(#[$doc:meta])* $try_name:ident / $name:ident ($($arg:ident: $ty:ty),+) => $rule:expr) => {
        $crate::base::fallible::fallible! {
            $(#[$doc])*
            pub fn $try_name / $name(&self, $($arg: $ty),+) -> Var<'g> {
                self.graph().record($crate::ops::rule::Unary($rule), &[self])
            }
        }
    };
    ($(#[$doc:meta])* $try_name:ident / $name:ident => $rule:expr) => {
        #[doc = concat!("[`", stringify!($name), "`](Self::", stringify!($name), "), returning the error (an input that is not a float tensor) instead of panicking.")]
        #[inline]
        pub fn $try_name(&self) -> $crate::base::error::Result<Var<'g>> {
            self.graph().record($crate::ops::rule::Unary($rule), &[self])
        }

        $(#[$doc])*
        #[track_caller]
        #[inline]
        pub fn $name(&self) -> Var<'g> {
            self.graph()
                .record_or_panic($crate::ops::rule::Unary($rule), &[self])
        }
    };
}
pub(crate) use unary_method;

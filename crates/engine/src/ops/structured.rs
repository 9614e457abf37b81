//! [`StructuredOp`]: the one shape of every op that is not elementwise (a
//! loss, a normalisation, a convolution, a pooling, a reduction, a view, a
//! mask, a join), written in one file the way tinygrad's `function.py` writes an op: the forward
//! and the backward side by side, a few lines each.
//!
//! An op says
//!
//! - its name and its inputs, by name ([`NAME`](StructuredOp::NAME),
//!   [`INPUTS`](StructuredOp::INPUTS)), and its settings by name
//!   ([`attributes`](StructuredOp::attributes));
//! - its forward: the input checks (typed errors naming the op) and one
//!   kernel call; the kernel layer builds the output and vouches for every
//!   element of it, so no op needs `unsafe`;
//! - its backward: one [`grad`](StructuredOp::grad) per input, asked only
//!   for inputs that require grad, or one shared
//!   [`grads`](StructuredOp::grads) when the inputs' gradients share work;
//! - the inputs it is not differentiable in
//!   ([`NO_GRAD`](StructuredOp::NO_GRAD): indices, targets, an input read
//!   for its shape only): nothing flows through them;
//! - its tangents (forward mode): none to write for an input the op is
//!   linear in ([`LINEAR`](StructuredOp::LINEAR): the tangent is the op
//!   applied to the input's tangent), one [`tangent`](StructuredOp::tangent)
//!   per other input.
//!
//! Everything else of [`Differentiable`] (the arity check, the per-input
//! bookkeeping, summing tangents) is written once, here. A backward written
//! with recorded ops is itself differentiable, so gradients of gradients
//! come with it.

use super::{expect_inputs, sum_tangents};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, Differentiable, GradInputs, Node, OpAttributes, OpFacts};
use crate::tensor::Tensor;

/// What a [`StructuredOp::backward_fast`] sees of its node: the plain
/// tensors of [`Differentiable::backward_fast`]'s call.
#[derive(Clone, Copy)]
pub struct FastBackward<'a> {
    /// The output's gradient.
    pub g: &'a Tensor,
    /// The inputs' values, in order.
    pub x: &'a [&'a Tensor],
    /// The output's value.
    pub output: &'a Tensor,
    /// Whether each input needs a gradient.
    pub needs: &'a [bool],
}

/// A non-elementwise op, declared: see the [module docs](self). Every
/// `StructuredOp` is a [`Differentiable`].
///
/// ```
/// use retrograd::ops::{Node, StructuredOp};
/// use retrograd::{Graph, Result, Tensor, Var};
///
/// /// The sum of every element (linear: its tangent is derived).
/// #[derive(Clone)]
/// struct Total;
/// impl StructuredOp for Total {
///     const NAME: &'static str = "total";
///     const INPUTS: &'static [&'static str] = &["input"];
///     const LINEAR: &'static [usize] = &[0];
///     fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
///         Tensor::from_f64_slice(&[x[0].to_f64_vec().iter().sum()], &[], x[0].dtype())
///     }
///     fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
///         g.try_expand(n.x(0).shape())
///     }
/// }
///
/// let graph = Graph::new();
/// let x = graph.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3])?);
/// let y = graph.record(Total, &[&x])?;
/// assert_eq!(y.value().try_item()?, 6.0);
/// assert_eq!(y.backward()?.wrt(&x).to_f64_vec(), vec![1.0; 3]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub trait StructuredOp: Clone + Send + Sync + 'static {
    /// The op's name: PyTorch's, and the registry's.
    const NAME: &'static str;
    /// The inputs, by name, in order; their count is the arity.
    const INPUTS: &'static [&'static str];
    /// The inputs the op is linear in (the others held fixed): the tangent
    /// through each is the op applied with that input replaced by its
    /// tangent, so no [`tangent`](Self::tangent) is written for them.
    const LINEAR: &'static [usize] = &[];
    /// The inputs the op is not differentiable in (indices, targets, an
    /// input read for its shape only): no gradient and no tangent flows
    /// through them, whether or not they require grad.
    const NO_GRAD: &'static [usize] = &[];

    /// The name of this instance, for ops whose name depends on a setting
    /// (`conv1d` and `conv2d`); [`NAME`](Self::NAME) otherwise.
    fn name(&self) -> &'static str {
        Self::NAME
    }

    /// The number of inputs this instance takes, checked before
    /// [`forward`](Self::forward); `None` for an op whose trailing inputs
    /// are optional (a weight, a bias), which checks them itself.
    fn arity(&self) -> Option<usize> {
        Some(Self::INPUTS.len())
    }

    /// The op's settings by name ([`Differentiable::attributes`]).
    fn attributes(&self) -> OpAttributes {
        OpAttributes::new()
    }

    /// Checks the inputs (their count is checked already) and computes the
    /// output through a kernel.
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor>;

    /// The gradient that flows to input `i`, which requires grad, given the
    /// output's gradient `g`; written with recorded ops. Ops whose inputs'
    /// gradients share work write [`grads`](Self::grads) instead.
    fn grad<'g>(&self, i: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let _ = (g, n);
        Err(Error::Unsupported {
            op: format!("{} (input {i}, {})", self.name(), Self::INPUTS[i]),
            what: "a gradient",
        })
    }

    /// Every input's gradient (`None` for no gradient). The default asks
    /// [`grad`](Self::grad) for each input that requires grad and is not
    /// in [`NO_GRAD`](Self::NO_GRAD).
    fn grads<'g>(&self, g: &Var<'g>, n: Node<'_, 'g>) -> Result<GradInputs<'g>> {
        grads_per_input(self, g, n)
    }

    /// The output's tangent through input `i` (not in
    /// [`LINEAR`](Self::LINEAR)), given that input's tangent `t`.
    fn tangent<'g>(&self, i: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let _ = (i, t, n);
        Err(Error::Unsupported {
            op: self.name().to_string(),
            what: "forward mode (jvp)",
        })
    }

    /// The output's tangent given every input's (`None` for none), for ops
    /// whose inputs' tangents share work. The default sums
    /// [`tangent`](Self::tangent) (or the derived one, for
    /// [`LINEAR`](Self::LINEAR) inputs) over the inputs with a tangent that
    /// are not in [`NO_GRAD`](Self::NO_GRAD).
    fn tangents<'g>(&self, t: &[Option<Var<'g>>], n: Node<'_, 'g>) -> Result<Option<Var<'g>>> {
        tangents_per_input(self, t, n)
    }

    /// [`grad`](Self::grad) on plain tensors, for a first-order backward
    /// where building `Var`s would cost more than the arithmetic: the
    /// gradient that flows to input `i` given the output's gradient `g`,
    /// the inputs `x` and the output. `None` (the default): the op has no
    /// such path and its backward runs [`grad`](Self::grad).
    fn grad_fast(
        &self,
        i: usize,
        g: &Tensor,
        x: &[&Tensor],
        output: &Tensor,
    ) -> Option<Result<Tensor>> {
        let _ = (i, g, x, output);
        None
    }

    /// [`Differentiable::backward_fast`]: the default asks
    /// [`grad_fast`](Self::grad_fast) for each input that needs a gradient
    /// and is not in [`NO_GRAD`](Self::NO_GRAD); an op whose inputs'
    /// gradients share work on plain tensors writes this instead.
    fn backward_fast(&self, call: FastBackward<'_>, grads: &mut [Option<Tensor>]) -> Result<bool> {
        let FastBackward {
            g,
            x,
            output,
            needs,
        } = call;
        for i in (0..x.len()).filter(|&i| needs[i] && !Self::NO_GRAD.contains(&i)) {
            match self.grad_fast(i, g, x, output) {
                Some(grad) => grads[i] = Some(grad?),
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    /// [`Differentiable::backward_accumulate`]: the one input's gradient
    /// (`call.x` holds that input alone) added into the buffer of the
    /// gradients already reached.
    fn backward_accumulate(
        &self,
        call: FastBackward<'_>,
        acc: &mut Option<Tensor>,
    ) -> Result<bool> {
        let _ = (call, acc);
        Ok(false)
    }

    /// [`Differentiable::batch`]: the op over a batch of examples (see
    /// `ops/batching.rs` for the helpers rules share). The default reports
    /// the op as having no batching rule.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let _ = (x, ctx);
        Err(Error::Unsupported {
            op: self.name().to_string(),
            what: "a batching rule (vmap)",
        })
    }

    /// [`Differentiable::non_float_output`]: an index or mask result.
    fn non_float_output(&self) -> bool {
        false
    }

    /// What the op declares to the registry's users ([`OpFacts`]).
    fn facts(&self) -> OpFacts {
        OpFacts::opaque(StructuredOp::arity(self))
    }

    /// What every instance of the op keeps besides its inputs, for a
    /// compiled step ([`holds`](Self::holds)'s answer): `Settings` for an
    /// op whose fields are settings only. The default, `Undeclared`, makes
    /// a compiled step refuse the op; every op says, here or in `holds`.
    const HOLDS: crate::Holds = crate::Holds::Undeclared;

    /// [`Differentiable::holds`]: what this instance keeps besides its
    /// inputs; [`HOLDS`](Self::HOLDS) unless it depends on the instance
    /// (targets stored in the op).
    fn holds(&self) -> crate::Holds {
        Self::HOLDS
    }

    /// [`Differentiable::without_saved`]: the op without values saved
    /// from the forward that recorded it.
    fn without_saved(&self) -> Option<std::sync::Arc<dyn Differentiable>> {
        None
    }

    /// [`Differentiable::seed`]: the seed the op draws random numbers from.
    fn seed(&self) -> Option<u64> {
        None
    }

    /// [`Differentiable::forward_seeded`]: the forward with another seed.
    fn forward_seeded(&self, x: &[&Tensor], seed: u64) -> Result<Option<Tensor>> {
        let _ = (x, seed);
        Ok(None)
    }
}

/// [`StructuredOp::grads`]'s default, for ops whose `grads` takes another
/// way in some cases only: [`grad`](StructuredOp::grad) for each input that
/// requires grad and is not in [`NO_GRAD`](StructuredOp::NO_GRAD).
pub fn grads_per_input<'g, O: StructuredOp>(
    op: &O,
    g: &Var<'g>,
    n: Node<'_, 'g>,
) -> Result<GradInputs<'g>> {
    let flows = |i: usize, x: &Var<'g>| x.requires_grad() && !O::NO_GRAD.contains(&i);
    let wanted = |(i, x): (usize, &Var<'g>)| flows(i, x).then(|| op.grad(i, g, n));
    n.inputs
        .iter()
        .enumerate()
        .map(wanted)
        .map(Option::transpose)
        .collect()
}

/// [`StructuredOp::tangents`]'s default: the tangent through each input,
/// summed.
pub fn tangents_per_input<'g, O: StructuredOp>(
    op: &O,
    tangents: &[Option<Var<'g>>],
    n: Node<'_, 'g>,
) -> Result<Option<Var<'g>>> {
    let through = |(i, t): (usize, &Var<'g>)| {
        if !O::LINEAR.contains(&i) {
            return op.tangent(i, t, n);
        }
        let mut args: Vec<&Var<'g>> = n.inputs.iter().collect();
        args[i] = t;
        t.graph().record(op.clone(), &args)
    };
    let present = tangents.iter().enumerate();
    let present = present.filter(|(i, _)| !O::NO_GRAD.contains(i));
    let terms = present.map(|(i, t)| t.as_ref().map(|t| through((i, t))));
    sum_tangents(n.output.shape(), terms)
}

impl<O: StructuredOp> Differentiable for O {
    fn name(&self) -> &str {
        StructuredOp::name(self)
    }
    fn arity(&self) -> Option<usize> {
        StructuredOp::arity(self)
    }
    #[inline]
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        if let Some(n) = StructuredOp::arity(self) {
            expect_inputs(StructuredOp::name(self), x, n)?;
        }
        StructuredOp::forward(self, x)
    }
    fn non_float_output(&self) -> bool {
        StructuredOp::non_float_output(self)
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        inputs: &[Var<'g>],
        output: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        self.grads(g, Node { inputs, output })
    }
    fn backward_fast(
        &self,
        g: &Tensor,
        x: &[&Tensor],
        output: &Tensor,
        needs: &[bool],
        grads: &mut [Option<Tensor>],
    ) -> Result<bool> {
        let call = FastBackward {
            g,
            x,
            output,
            needs,
        };
        StructuredOp::backward_fast(self, call, grads)
    }
    fn backward_accumulate(
        &self,
        g: &Tensor,
        input: &Tensor,
        output: &Tensor,
        acc: &mut Option<Tensor>,
    ) -> Result<bool> {
        let call = FastBackward {
            g,
            x: &[input],
            output,
            needs: &[true],
        };
        StructuredOp::backward_accumulate(self, call, acc)
    }
    fn jvp<'g>(&self, tangents: &[Option<Var<'g>>], node: Node<'_, 'g>) -> Result<Option<Var<'g>>> {
        self.tangents(tangents, node)
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        StructuredOp::batch(self, x, ctx)
    }
    fn facts(&self) -> OpFacts {
        StructuredOp::facts(self)
    }
    fn attributes(&self) -> OpAttributes {
        StructuredOp::attributes(self)
    }
    fn holds(&self) -> crate::Holds {
        StructuredOp::holds(self)
    }
    fn without_saved(&self) -> Option<std::sync::Arc<dyn Differentiable>> {
        StructuredOp::without_saved(self)
    }
    fn seed(&self) -> Option<u64> {
        StructuredOp::seed(self)
    }
    fn forward_seeded(&self, x: &[&Tensor], seed: u64) -> Result<Option<Tensor>> {
        StructuredOp::forward_seeded(self, x, seed)
    }
}

/// The declarations a [`StructuredOp`] impl starts with, in one line inside
/// it: `declare_op!("name"(input, other), linear[0], no_grad[1],
/// settings(int dim, ints shape))` gives [`NAME`](StructuredOp::NAME),
/// [`INPUTS`](StructuredOp::INPUTS) (the names as written),
/// [`HOLDS`](StructuredOp::HOLDS) (settings only), `LINEAR` and `NO_GRAD`
/// when given, and, when `settings` is given,
/// [`attributes`](StructuredOp::attributes): each `kind field` is the
/// field under its own name through `OpAttributes::kind`.
macro_rules! declare_op {
    (@value ints $value:expr) => { &$value };
    (@value $kind:ident $value:expr) => { $value };
    (
        $name:literal ($($input:ident),*)
        $(, linear[$($linear:literal),*])?
        $(, no_grad[$($no_grad:literal),*])?
        $(, settings($($kind:ident $field:ident),*))?
    ) => {
        const NAME: &'static str = $name;
        const INPUTS: &'static [&'static str] = &[$(stringify!($input)),*];
        const HOLDS: $crate::Holds = $crate::Holds::Settings;
        $(const LINEAR: &'static [usize] = &[$($linear),*];)?
        $(const NO_GRAD: &'static [usize] = &[$($no_grad),*];)?
        $(
            fn attributes(&self) -> $crate::core::OpAttributes {
                $crate::core::OpAttributes::new()
                    $(.$kind(stringify!($field), $crate::ops::declare_op!(@value $kind self.$field)))*
            }
        )?
    };
}
pub(crate) use declare_op;

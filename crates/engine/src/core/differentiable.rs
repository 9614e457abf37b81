//! [`Differentiable`], the op trait: what the graph records and the
//! engine differentiates. It sits with the graph in the core layer (see
//! ARCHITECTURE.md, "Layers"); the built-in ops live above it.

use std::sync::Arc;

use smallvec::SmallVec;

use super::attributes::OpAttributes;
use super::batching::{BatchContext, Batched};
use super::facts::OpFacts;
use super::graph::Var;
use super::holds::Holds;
use super::pointwise::Pointwise;
use super::scalar_lane::ScalarBackward;
use super::scalar_node::{LaneOutcome, ScalarNode};
use crate::base::error::Result;
use crate::tensor::Tensor;

/// One optional gradient per input, returned by [`Differentiable::backward`];
/// `None` means "no gradient flows to this input" (it is treated as zero).
pub type GradInputs<'g> = SmallVec<[Option<Var<'g>>; 2]>;

/// What a tangent rule ([`Differentiable::jvp`]) or a
/// [`StructuredOp`](crate::ops::StructuredOp)'s backward sees of its node.
#[derive(Clone, Copy)]
pub struct Node<'a, 'g> {
    /// The node's inputs, in order.
    pub inputs: &'a [Var<'g>],
    /// The node's output.
    pub output: &'a Var<'g>,
}

impl<'g> Node<'_, 'g> {
    /// Input `i`.
    pub fn x(&self, i: usize) -> &Var<'g> {
        &self.inputs[i]
    }

    /// The gradients of the leading inputs, `None` (no gradient) for the
    /// rest (targets, indices).
    pub fn grads(&self, leading: impl IntoIterator<Item = Option<Var<'g>>>) -> GradInputs<'g> {
        let mut grads: GradInputs<'g> = leading.into_iter().collect();
        grads.resize(self.inputs.len(), None);
        grads
    }
}

/// An op the graph can record: forward and backward together, so a graph can
/// never hold a computation it does not know how to differentiate.
///
/// `backward` receives the gradient of the output, the inputs *and* the
/// output: the local derivative of a product is the other operand, and that
/// of `exp` or `tanh` is cheapest from the output. It is written with `Var`
/// operations: on a first-order pass the engine runs it with recording
/// suspended (plain kernels, nothing recorded); with `create_graph` the same
/// formula records, which is what makes gradients of gradients work.
///
/// A user op, registered by name and called through [`Graph::apply`](crate::Graph::apply):
///
/// ```
/// use retrograd::{Differentiable, GradInputs, Graph, OpRegistry, Result, Tensor, Var};
/// use std::sync::Arc;
///
/// /// f(x) = x^3, with a hand-written derivative 3x^2.
/// struct Cube;
/// impl Differentiable for Cube {
///     fn name(&self) -> &str { "cube" }
///     fn arity(&self) -> Option<usize> { Some(1) }
///     fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
///         let x = inputs[0];
///         let v: Vec<f64> = x.to_f64_vec().iter().map(|v| v * v * v).collect();
///         Tensor::from_f64_slice(&v, x.shape(), x.dtype())
///     }
///     fn backward<'g>(&self, g: &Var<'g>, inputs: &[Var<'g>], _out: &Var<'g>) -> Result<GradInputs<'g>> {
///         let x = &inputs[0];
///         Ok(smallvec::smallvec![Some(g * &(x * x) * 3.0)])
///     }
/// }
///
/// let mut registry = OpRegistry::with_builtins();
/// registry.register("cube", Cube)?;
/// let graph = Graph::with_registry(Arc::new(registry));
/// let x = graph.variable(Tensor::scalar(2.0));
/// let y = graph.apply("cube", &[&x])?;
/// assert_eq!(y.value().try_item()?, 8.0);
/// assert_eq!(y.backward()?.wrt(&x).try_item()?, 12.0);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub trait Differentiable: Send + Sync + 'static {
    /// The name nodes of this op show (the registry name for built-ins).
    fn name(&self) -> &str;

    /// The number of inputs the op takes, if fixed (checked by `Graph::apply`).
    fn arity(&self) -> Option<usize> {
        None
    }

    /// Computes the output from the input values.
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor>;

    /// Whether the output may be an `i64` or `bool` tensor (indices, masks:
    /// `argmax`, comparisons). Such an output is never differentiable, so
    /// [`Graph::record`](crate::Graph::record) returns it as a constant and
    /// records no node. The default, `false`, is right for every op whose
    /// output is a float; it is a method rather than a check of the output
    /// so that recording a float op costs nothing more. (Ops applied by
    /// name through [`Graph::apply`](crate::Graph::apply) have their
    /// output's dtype checked whatever this says.)
    fn non_float_output(&self) -> bool {
        false
    }

    /// Whether the op's forward itself turns an output buffer the
    /// allocator refuses into `Error::OutOfMemory` (the elementwise
    /// kernels do: they know the output's size before they build it), so
    /// that `record` runs it without
    /// a boundary of its own (ARCHITECTURE.md, PERF, "The refused-buffer
    /// boundary"). The default, `false`, is always safe.
    fn catches_refused_buffers(&self) -> bool {
        false
    }

    /// Given the gradient of the output, returns one optional gradient per
    /// input, each with that input's shape.
    fn backward<'g>(
        &self,
        grad_output: &Var<'g>,
        inputs: &[Var<'g>],
        output: &Var<'g>,
    ) -> Result<GradInputs<'g>>;

    /// Optional first-order fast path on plain tensors, used by a backward
    /// pass without `create_graph` (and without hooks, retained values or
    /// anomaly mode). It must compute exactly what `backward` computes: write
    /// `grads[i]` for each input with `needs_grad[i]` (leaving `None` means
    /// zero) and return `Ok(true)`; return `Ok(false)` to use `backward`.
    ///
    /// `backward` stays the definition (it is what gradients of gradients
    /// differentiate); this exists because on scalar graphs the cost of
    /// building `Var`s dominates the arithmetic. The default declines.
    fn backward_fast(
        &self,
        grad_output: &Tensor,
        inputs: &[&Tensor],
        output: &Tensor,
        needs_grad: &[bool],
        grads: &mut [Option<Tensor>],
    ) -> Result<bool> {
        let _ = (grad_output, inputs, output, needs_grad, grads);
        Ok(false)
    }

    /// Optional first-order path for a one-input op whose gradient fills
    /// only part of its input (a slice): add the gradient straight into
    /// `acc`, the input's gradient accumulated so far (`None` when nothing
    /// has reached it yet), rather than return a mostly-zero tensor of the
    /// input's shape for the engine to add. The sweep asks it only when
    /// [`backward_fast`](Self::backward_fast) declined and the input needs
    /// a gradient. It must leave in `acc` exactly the sum `backward` would
    /// produce, with the input's shape and dtype, and return `Ok(true)`; or
    /// return `Ok(false)` with `acc` unchanged. The default declines.
    fn backward_accumulate(
        &self,
        grad_output: &Tensor,
        input: &Tensor,
        output: &Tensor,
        acc: &mut Option<Tensor>,
    ) -> Result<bool> {
        let _ = (grad_output, input, output, acc);
        Ok(false)
    }

    /// The scalar lane of the first-order backward, used when the node has
    /// one or two inputs and its inputs, output and output gradient are all
    /// 0-d values of one dtype (graphs of scalar ops, where tensor plumbing
    /// would cost more than the arithmetic). Write one gradient per input
    /// into the call's `grads` and return `true`, or return `false` (the
    /// default) to use [`backward_fast`](Self::backward_fast) or `backward`.
    /// It must compute
    /// exactly what `backward` computes, operation for operation, so both
    /// give the same bits; [`scalar_rule!`](crate::scalar_rule) writes it
    /// once for both dtypes. Gradients of inputs that do not require grad
    /// are computed and dropped.
    fn backward_scalar(&self, call: &mut ScalarBackward<'_>) -> bool {
        let _ = call;
        false
    }

    /// Runs one scalar node of the first-order sweep through
    /// [`backward_scalar`](Self::backward_scalar): the sweep's one dynamic
    /// call per scalar node, with the rule inlined into this op's copy of
    /// the body (see `core/scalar_node.rs`). Not meant to be overridden:
    /// only the engine can build a [`LaneOutcome`].
    #[doc(hidden)]
    #[inline]
    fn scalar_node(&self, node: &mut ScalarNode<'_>) -> LaneOutcome {
        node.run(|call| self.backward_scalar(call))
    }

    /// Forward mode: given one optional tangent per input (`None` is zero,
    /// otherwise the input's shape) and the node (its inputs and output),
    /// returns the output's tangent (`None` for zero), written with `Var`
    /// operations like `backward`. The default reports the op as
    /// unsupported by name.
    fn jvp<'g>(&self, tangents: &[Option<Var<'g>>], node: Node<'_, 'g>) -> Result<Option<Var<'g>>> {
        let _ = (tangents, node);
        Err(crate::Error::Unsupported {
            op: self.name().to_string(),
            what: "forward mode (jvp)",
        })
    }

    /// The batching rule (`vmap`): this op over a batch of examples, given
    /// its inputs as [`Batched`] values (batch axis 0, or shared by every
    /// example), recorded with ordinary ops in the inputs' graph. An
    /// elementwise op applies itself to the aligned inputs; a structured op
    /// moves its axes past the batch, folds the batch into an axis it
    /// already maps over (matmul's leading axes, a convolution's images),
    /// or calls its batched form. The default reports the op by name: a
    /// function with an op that has no rule cannot be vmapped, rather than
    /// being looped over silently.
    fn batch<'g>(&self, inputs: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let _ = (inputs, ctx);
        Err(crate::Error::Unsupported {
            op: self.name().to_string(),
            what: "a batching rule (vmap)",
        })
    }

    /// For an elementwise op: the op as a kernel over plain slices, which
    /// the fused kernels of a [compiled step](crate::compile) run (several
    /// ops in one pass over memory). `None` (the default): a compiled step
    /// runs the op through [`forward`](Self::forward).
    fn pointwise(&self) -> Option<Arc<dyn Pointwise>> {
        None
    }

    /// For a one-input elementwise op: its first-order backward as one
    /// elementwise op of `(g, u)` (see [`GradOp`]), which a compiled step
    /// records in place of the `Var` formula's nodes, so its replay runs
    /// the eager sweep's fused kernel as one member of a fused pass.
    /// `None` (the default): the compiled step records the formula.
    fn grad_op(&self) -> Option<GradOp> {
        None
    }

    /// This op without values saved from the forward that recorded it
    /// (argmax positions, an output and its logsumexp), which it would
    /// otherwise use in place of recomputing them from its inputs. A
    /// compiled step replays a node on new values, so it runs this form
    /// when there is one; `None` (the default): the op holds no such values.
    fn without_saved(&self) -> Option<Arc<dyn Differentiable>> {
        None
    }

    /// The seed an op draws random numbers from (dropout's mask), or
    /// `None` (the default) for an op that draws none. A compiled step
    /// replaces it at every run, so masks are fresh each step (see
    /// [`forward_seeded`](Self::forward_seeded)).
    fn seed(&self) -> Option<u64> {
        None
    }

    /// [`forward`](Self::forward) with `seed` in place of the op's own; the
    /// default, `Ok(None)`, says the op cannot, and a compiled step then
    /// refuses to capture it (its masks would repeat every step).
    fn forward_seeded(&self, inputs: &[&Tensor], seed: u64) -> Result<Option<Tensor>> {
        let _ = (inputs, seed);
        Ok(None)
    }

    /// What the op holds besides its inputs, for a compiled step, which
    /// replays the node on new input values: [`Holds::Settings`] when its
    /// result depends only on its inputs and its settings,
    /// [`Holds::Data`] when it carries data that can differ between runs
    /// (indices stored in it). The default, [`Holds::Undeclared`], makes a
    /// compiled step refuse the op: a new op opts in to being replayed.
    fn holds(&self) -> Holds {
        Holds::Undeclared
    }

    /// What the op declares about itself for the registry's users: arity,
    /// whether it is elementwise and where random inputs are safe, whether
    /// it has a tangent rule and a second derivative. Ops made from a
    /// [`rule`](crate::ops::rule) derive these; the default declares only the arity.
    fn facts(&self) -> OpFacts {
        OpFacts::opaque(self.arity())
    }

    /// The settings this op was built with (axes, eps, strides, a shape),
    /// by name, for code that reads a recorded graph without knowing op
    /// types: the ONNX exporter, traces. The default lists none, which is
    /// right for an op without settings (`add`, `relu`).
    fn attributes(&self) -> OpAttributes {
        OpAttributes::new()
    }
}

/// An op behind a pointer is an op: every method forwards to the pointee.
macro_rules! forward_to_pointee {
    ($shared:ty) => {
        impl Differentiable for $shared {
            fn name(&self) -> &str {
                (**self).name()
            }
            fn arity(&self) -> Option<usize> {
                (**self).arity()
            }
            fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
                (**self).forward(inputs)
            }
            fn non_float_output(&self) -> bool {
                (**self).non_float_output()
            }
            fn catches_refused_buffers(&self) -> bool {
                (**self).catches_refused_buffers()
            }
            fn backward<'g>(
                &self,
                grad_output: &Var<'g>,
                inputs: &[Var<'g>],
                output: &Var<'g>,
            ) -> Result<GradInputs<'g>> {
                (**self).backward(grad_output, inputs, output)
            }
            fn backward_fast(
                &self,
                grad_output: &Tensor,
                inputs: &[&Tensor],
                output: &Tensor,
                needs_grad: &[bool],
                grads: &mut [Option<Tensor>],
            ) -> Result<bool> {
                (**self).backward_fast(grad_output, inputs, output, needs_grad, grads)
            }
            fn backward_accumulate(
                &self,
                grad_output: &Tensor,
                input: &Tensor,
                output: &Tensor,
                acc: &mut Option<Tensor>,
            ) -> Result<bool> {
                (**self).backward_accumulate(grad_output, input, output, acc)
            }
            fn backward_scalar(&self, call: &mut ScalarBackward<'_>) -> bool {
                (**self).backward_scalar(call)
            }
            fn scalar_node(&self, node: &mut ScalarNode<'_>) -> LaneOutcome {
                (**self).scalar_node(node)
            }
            fn jvp<'g>(
                &self,
                tangents: &[Option<Var<'g>>],
                node: Node<'_, 'g>,
            ) -> Result<Option<Var<'g>>> {
                (**self).jvp(tangents, node)
            }
            fn batch<'g>(&self, inputs: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
                (**self).batch(inputs, ctx)
            }
            fn facts(&self) -> OpFacts {
                (**self).facts()
            }
            fn holds(&self) -> Holds {
                (**self).holds()
            }
            fn pointwise(&self) -> Option<Arc<dyn Pointwise>> {
                (**self).pointwise()
            }
            fn grad_op(&self) -> Option<GradOp> {
                (**self).grad_op()
            }
            fn without_saved(&self) -> Option<Arc<dyn Differentiable>> {
                (**self).without_saved()
            }
            fn seed(&self) -> Option<u64> {
                (**self).seed()
            }
            fn forward_seeded(&self, inputs: &[&Tensor], seed: u64) -> Result<Option<Tensor>> {
                (**self).forward_seeded(inputs, seed)
            }
            fn attributes(&self) -> OpAttributes {
                (**self).attributes()
            }
        }
    };
}

// A shared op is an op: the registry's entries and `OpFacts::example`
// can be recorded like any other.
forward_to_pointee!(Arc<dyn Differentiable>);

// A built-in op shared by every node of its type (a graph's interned ops)
// is an op: a recorded graph's nodes can be recorded again elsewhere.
forward_to_pointee!(&'static dyn Differentiable);

/// A one-input elementwise op's first-order backward as an op of two
/// inputs, `(g, u) -> g f'(u)` ([`Differentiable::grad_op`]).
#[derive(Clone)]
pub struct GradOp {
    /// The op: inputs the output's gradient `g` and `u`; output the input's gradient.
    pub op: Arc<dyn Differentiable>,
    /// Whether `u` is the forward op's output (`tanh`, `exp`: `f'` from
    /// `f`) rather than its input.
    pub of_output: bool,
}

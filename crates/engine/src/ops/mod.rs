//! Ops: the [`Differentiable`] trait, the [`OpRegistry`], and the built-in
//! ops, one file per family.
//!
//! Each family file holds its op structs (forward through `kernels`,
//! backward written with `Var` operations), the `Var` methods that record
//! them, and a `register` function that adds them to the default registry.
//!
//! Where things are: helpers for op writers (`unbroadcast`, `sum_tangents`,
//! `expect_inputs`; `Differentiable` is re-exported from `core`),
//! `StructuredOp`, the one shape of a non-elementwise op (`structured.rs`:
//! inputs, forward, one `grad` per input or a shared `grads`, derived
//! tangents for `LINEAR` inputs), and `op_families!`, the one list of op
//! families whose `register` functions `OpRegistry::with_builtins` calls
//! (`mod.rs`), `OpRegistry` (`registry.rs`), a graph's registry and
//! `Graph::with_registry`/`registry`/`apply` (`apply.rs`), operator sugar
//! (`operators.rs`), one rule per elementwise op (`rule/`:
//! `UnaryRule`/`BinaryRule` and the ops `Unary`/`Binary` that derive every
//! path from a rule (`unary_op.rs`, `binary_op.rs`), `Num` with its
//! instantiations `Lane`, `Traced`, `Plain` (`num.rs`), the `select_where`
//! op behind a rule's kinks (`select_op.rs`)), and one file per op family:
//! `arith.rs` (add, sub, mul, div, neg), `unary.rs` (exp, log, tanh, relu,
//! sigmoid), `elementwise.rs` (abs, sin, cos, clamp), `activation.rs`
//! (leaky_relu, silu), `gelu.rs` (exact and tanh GELU, two rules: `gelu`,
//! `gelu_tanh`), `erfc.rs`, `softplus.rs`, `elu.rs`, `hardtanh.rs`,
//! `hardswish.rs` (hard_sigmoid, hard_swish),
//! `log1p.rs`, `expm1.rs`, `rsqrt.rs`, `compare.rs` (maximum, minimum,
//! where), `mask.rs` (comparisons eq/ne/lt/le/gt/ge returning bool,
//! masked_fill, tril/triu, to_dtype casts, topk), `pow.rs` (pow and powf,
//! hand-written for their scalar-exponent fast paths; sqrt), `reduce.rs`,
//! `broadcast.rs`, `linalg.rs` (matmul and its transposed-operand variants;
//! a batch of rows times one matrix is folded into one `[rows, K]` product,
//! as PyTorch does, so a linear layer's weight gradient is one product),
//! `transpose.rs` (transpose, permute, t: views), `shape.rs` (reshape,
//! flatten, squeeze, unsqueeze: storage-sharing views), `slice.rs`
//! (slice/narrow: views; slice_backward, constant_pad_nd), `concat.rs`
//! (cat, stack), `index.rs` (index_select, index_add, gather, scatter_add;
//! index tensors), `reduce_axes.rs` (sum_dim, mean_dim, var, logsumexp over
//! axes, with keepdim), `reduce_minmax.rs` (max/min, amax/amin,
//! argmax/argmin), `reduce_view.rs` (`broadcastable`: a reduced value
//! viewed, via `reshape`, to broadcast against its input), `testing.rs`
//! (test helpers: `t`, `close`, second derivatives through `create_graph`
//! vs finite differences; `backward_fast` vs `backward`). Ties:
//! maximum/minimum and every extremum reduction split the gradient evenly
//! among tied elements (PyTorch's rule); argmax/argmin pick the first
//! occurrence.

/// Declares op families, one module each, and a function that registers
/// every family's ops: [`register_builtins`] here, `nn::register` for the
/// neural-net families. These two lists are the only lists of built-in ops.
macro_rules! op_families {
    ($(#[$doc:meta])* fn $register:ident; $($family:ident),* $(,)?) => {
        $(pub mod $family;)*

        $(#[$doc])*
        pub(crate) fn $register(reg: &mut OpRegistry) {
            $($family::register(reg);)*
        }
    };
}

/// A family's `register` (see [`op_families!`]) for ops whose registry
/// instance is their `Default`: `register_defaults!(Cat, Stack);` adds
/// each op's default instance under its name.
macro_rules! register_defaults {
    ($($op:ty),+ $(,)?) => {
        pub(crate) fn register(reg: &mut $crate::ops::OpRegistry) {
            $(reg.add_builtin(<$op>::default());)+
        }
    };
}

mod apply;
pub mod batching;

op_families! {
    /// Registers every built-in op (`OpRegistry::with_builtins`).
    fn register_builtins;
    activation,
    arith,
    broadcast,
    compare,
    concat,
    elementwise,
    elu,
    erfc,
    expm1,
    gelu,
    hardswish,
    hardtanh,
    index,
    linalg,
    log1p,
    mask,
    nn,
    pow,
    reduce,
    reduce_axes,
    reduce_minmax,
    rounding,
    rsqrt,
    select,
    shape,
    slice,
    softplus,
    transpose,
    trig,
    unary,
}

mod operators;
pub mod reduce_view;
mod registry;
pub mod rule;
mod structured;
#[cfg(test)]
mod testing;

pub use crate::core::scalar_lane;
pub use crate::core::Node;
pub use crate::core::{attributes, AttrValue, OpAttributes};
pub use crate::core::{Differentiable, GradInputs, GradOp};
pub use crate::core::{ScalarArgs, ScalarBackward};
pub use registry::OpRegistry;
pub use rule::OpFacts;
pub(crate) use structured::declare_op;
pub use structured::{grads_per_input, FastBackward, StructuredOp};

use crate::base::error::Result;
use crate::core::graph::Var;
use crate::tensor::Tensor;

/// Adds optional tangents, broadcasting each to `shape` (the output's):
/// the usual last step of a `jvp` rule. `None` means zero.
pub(crate) fn sum_tangents<'g>(
    shape: &[usize],
    terms: impl IntoIterator<Item = Option<Result<Var<'g>>>>,
) -> Result<Option<Var<'g>>> {
    let mut acc: Option<Var<'g>> = None;
    for term in terms.into_iter().flatten() {
        let t = term?;
        acc = Some(match acc {
            None => t,
            Some(a) => a.try_add(&t)?,
        });
    }
    acc.map(|a| {
        if a.shape() == shape {
            Ok(a)
        } else {
            a.try_expand(shape)
        }
    })
    .transpose()
}

/// The gradient of a broadcasting elementwise op's output, summed back to
/// the shape of the input it flows to.
#[inline]
pub(crate) fn unbroadcast<'g>(grad: Var<'g>, input: &Var<'g>) -> Result<Var<'g>> {
    if grad.value().same_shape(input.value()) {
        Ok(grad)
    } else {
        grad.sum_to_size(input.shape())
    }
}

/// The tensor-level counterpart of [`unbroadcast`] for `backward_fast`.
#[inline(always)]
pub(crate) fn unbroadcast_tensor(grad: Tensor, input: &Tensor) -> Result<Tensor> {
    if grad.same_shape(input) {
        Ok(grad)
    } else {
        crate::kernels::sum_to_shape("sum_to_size", &grad, input.shape())
    }
}

/// Checks an op's input count inside `forward` (ops called through `record`
/// directly skip `Graph::apply`'s arity check).
#[inline]
pub(crate) fn expect_inputs(op: &str, inputs: &[&Tensor], n: usize) -> Result<()> {
    if inputs.len() == n {
        Ok(())
    } else {
        Err(crate::Error::Arity {
            op: op.to_string(),
            expected: n,
            got: inputs.len(),
        })
    }
}

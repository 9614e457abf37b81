//! Ops: the [`Differentiable`] trait, the [`OpRegistry`], and the built-in
//! ops, one file per family.
//!
//! Each family file holds its op structs (forward through `kernels`,
//! backward written with `Var` operations), the `Var` methods that record
//! them, and a `register` function that adds them to the default registry.

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

mod apply;

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
    rsqrt,
    select,
    shape,
    slice,
    softplus,
    transpose,
    unary,
}

mod operators;
pub mod reduce_view;
mod registry;
pub mod rule;
#[cfg(test)]
mod testing;

pub use crate::core::scalar_lane;
pub use crate::core::{attributes, AttrValue, OpAttributes};
pub use crate::core::{Differentiable, GradInputs};
pub use crate::core::{ScalarArgs, ScalarBackward};
pub use registry::OpRegistry;
pub use rule::OpFacts;

use crate::error::Result;
use crate::graph::Var;
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

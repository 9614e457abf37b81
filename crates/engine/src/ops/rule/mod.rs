//! One rule per elementwise op.
//!
//! An elementwise op is written once, as a rule: its value at one element
//! and the gradient it passes back at one element, `g * f'`, written over
//! [`Num`]: any number the engine computes with. From that one rule the
//! engine derives every path an op needs:
//!
//! | path | the rule instantiated with | where |
//! |---|---|---|
//! | forward | `value::<T>` in a `map`/`zip` kernel | [`Unary`], [`Binary`] |
//! | `Var` formula (gradients of gradients) | [`Traced`]: each step records a node | `backward` |
//! | plain-tensor path (first order) | [`Lane`] in one fused kernel (unary), [`Plain`] (binary) | `backward_fast` |
//! | scalar lane | [`Lane`] on plain numbers | `backward_scalar` |
//! | tangent rule (forward mode) | [`Traced`], with the tangent for `g` | `jvp` |
//!
//! On f32 the slice loops (a fused kernel, `map`) run the rule over
//! [`Block`]s of 64 elements (`block.rs`: a `Block` is a `Num`, and
//! [`UnaryRule::value_block`] the value by blocks), which keeps several
//! vectors of a long formula in flight. Every path evaluates the same IEEE
//! operations in the same order on each element, so they agree bit for bit (`tests/properties.rs` checks it), and
//! since the `Var` formula is made of recorded ops, every order of
//! derivative comes from the rule with nothing more written.
//!
//! Adding an elementwise op: write a rule in its own file under `src/ops/`,
//! add its module to the one list in `ops/mod.rs`, and give its `Var`
//! methods a doctest (ARCHITECTURE.md, "How to add an op"): the
//! `try_NAME`/`NAME` pair is `unary_method!` (`unary_op.rs`) or
//! `binary_methods!`, and `scalar_method!` writes a binary rule's scalar
//! forms (`binary_op.rs`), each one body for every rule.

/// The `impl Differentiable` methods every rule op here writes alike: it
/// holds its settings alone and takes `$arity` inputs.
macro_rules! settings_and_arity {
    ($arity:expr) => {
        fn holds(&self) -> crate::Holds {
            crate::Holds::Settings
        }
        fn arity(&self) -> Option<usize> {
            Some($arity)
        }
    };
}

/// The batching rule (vmap) of an elementwise rule op, inside its `impl
/// Differentiable`: [`crate::ops::batching::elementwise`].
macro_rules! elementwise_batch {
    () => {
        fn batch<'g>(
            &self,
            inputs: &[crate::core::Batched<'g>],
            _ctx: &crate::core::BatchContext,
        ) -> crate::base::error::Result<crate::core::Batched<'g>> {
            crate::ops::batching::elementwise(self, inputs)
        }
    };
}

mod binary_op;
mod block;
mod num;
mod pointwise;
mod select_op;
mod unary_grad;
mod unary_op;

pub use crate::core::{Domain, OpFacts, SampleInputs, KINK_MARGIN};
pub(crate) use binary_op::{binary_methods, scalar_method};
pub use binary_op::{Binary, BinaryRule};
pub use block::{Block, BLOCK};
pub use num::{Cmp, Lane, Num, Plain, Traced};
pub use select_op::SelectWhere;
pub(crate) use unary_op::unary_method;
pub use unary_op::{SlopeOf, Unary, UnaryRule};

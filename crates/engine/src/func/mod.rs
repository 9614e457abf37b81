//! Function transforms: [`vmap`] runs a function written for one example
//! over a batch, as one batched computation.
//!
//! The function is recorded once, on the first example; each op it
//! recorded is then recorded again over the whole batch by the op's
//! batching rule ([`Differentiable::batch`](crate::Differentiable::batch)),
//! so the result is an ordinary graph of batched values. Gradients taken
//! inside the function (with `create_graph`) are recorded ops like any
//! other, which is how `vmap` of a gradient gives per-sample gradients.
//!
//! Where things are: [`VMap`] itself lives in the autograd layer
//! (`autograd/vmap.rs`: in and out axes, chunks, randomness;
//! `autograd/example_trace.rs`: the one example's computation read back
//! from its graph and replayed over the batch), below the ops, so that an
//! op's own tests can vmap it; re-exported here with `jacobians.rs` ([`jacrev`], [`jacfwd`], [`hessian`]: one
//! batched sweep each), `functional_call.rs` (a module run with given
//! parameters, stacked model states, per-sample gradients).

mod functional_call;
mod jacobians;

pub use crate::autograd::{example_fn, try_vmap, vmap, VMap};
pub use crate::core::{BatchContext, Batched, Randomness};
pub use functional_call::{try_functional_call, try_per_sample_gradients, try_stack_module_state};
pub use jacobians::{
    hessian, jacfwd, jacrev, try_hessian, try_hessian_at, try_jacfwd, try_jacfwd_at, try_jacrev,
    try_jacrev_at,
};

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
//! Where things are: `vmap.rs` ([`VMap`]: in and out axes, chunks,
//! randomness; [`vmap`], [`try_vmap`]), `example_trace.rs` (the one
//! example's computation read back from its graph and replayed over the
//! batch).

mod example_trace;
mod vmap;

pub use crate::core::{BatchContext, Batched, Randomness};
pub use vmap::{try_vmap, vmap, VMap};

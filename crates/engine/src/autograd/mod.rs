//! Reverse mode: the backward engine, [`Gradients`], hooks, and the
//! finite-difference checker.
//!
//! Where things are: the backward engine (`notify.rs`:
//! `Var::backward_notifying`, which reports each watched leaf's gradient as
//! soon as it is final, through `fast.rs`'s `run_fast_notify`;
//! `backward.rs`: options, the seed, the `Var`-level sweep used with hooks,
//! retained values, anomaly mode or `create_graph`; `fast.rs`: the
//! first-order sweep on plain values, walking down from the root's node
//! through each op's scalar lane, `backward_fast` or `backward_accumulate`;
//! the scalar node and the gradient store it walks with are in `core/`),
//! spare gradient-slot vectors kept per thread and
//! `Graph::release_spare_buffers` (`pool.rs`), `Gradients`
//! (`gradients.rs`), hooks and `retain_grad` (`hooks.rs`), `grad()` with
//! `create_graph` (`grad.rs`), forward mode `jvp` (`forward.rs`),
//! `hessian`/`hessian_vector_product`/`jacobian` (`functional.rs`),
//! gradient checkpointing regions (`checkpoint.rs`), the shared
//! finite-difference checkers `gradcheck`/`jvpcheck` (`gradcheck.rs`), the
//! sweep recorded step by step (`sweep_record.rs`: `Var::backward_recorded`
//! runs the `Var`-level sweep over a store that watches its own `take` and
//! `add` calls, so each step is what the engine did: the node run, the
//! gradient it received, each contribution, its total and whether it
//! accumulated; the backward-sweep page shows it).

pub(crate) mod backward;
mod checkpoint;
mod example_trace;
mod fast;
pub(crate) mod forward;
mod functional;
mod grad;
pub mod gradcheck;
mod gradients;
pub(crate) mod hooks;
mod notify;
mod pool;
mod sweep_record;
mod vmap;

pub use crate::core::graph::GradHook;
#[doc(hidden)]
pub use crate::core::{LaneOutcome, ScalarNode};
pub use backward::{BackwardOptions, BackwardOrder};
pub use forward::{jvp, jvpcheck};
pub use functional::{hessian, hessian_vector_product, jacobian, jacobian_with, JacobianMode};
pub use grad::{grad, GradOptions};
pub use gradcheck::{gradcheck, gradcheck_with, GradcheckOptions};
pub use gradients::Gradients;
pub use sweep_record::{Contribution, StepKind, SweepRecord, SweepStep};
pub use vmap::{example_fn, try_vmap, vmap, VMap};

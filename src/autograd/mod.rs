//! Reverse mode: the backward engine, [`Gradients`], hooks, and the
//! finite-difference checker.

pub(crate) mod backward;
mod checkpoint;
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

#[doc(hidden)]
pub use crate::core::{LaneOutcome, ScalarNode};
pub use crate::graph::GradHook;
pub use backward::{BackwardOptions, BackwardOrder};
pub use forward::{jvp, jvpcheck};
pub use functional::{hessian, hessian_vector_product, jacobian, jacobian_with, JacobianMode};
pub use grad::{grad, GradOptions};
pub use gradcheck::{gradcheck, gradcheck_with, GradcheckOptions};
pub use gradients::Gradients;
pub use sweep_record::{Contribution, StepKind, SweepRecord, SweepStep};

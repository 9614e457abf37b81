//! The names most programs need: `use retrograd::prelude::*;`.

pub use crate::nn::{Forward, Module, Parameter};
pub use crate::optim::Optimizer;
pub use crate::{
    grad, BackwardOptions, DType, Differentiable, Error, GradInputs, GradOptions, Gradients, Graph,
    OpRegistry, Result, Tensor, Var,
};

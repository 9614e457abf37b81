//! The names most programs need: `use retrograd::prelude::*;`.

pub use crate::{
    BackwardOptions, DType, Differentiable, Error, GradInputs, Gradients, Graph, OpRegistry,
    Result, Tensor, Var,
};

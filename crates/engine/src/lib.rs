//! # retrograd
//!
//! A reverse-mode automatic differentiation engine with an explicit,
//! inspectable computational graph.
//!
//! Ops on [`Var`] handles record [`GraphNode`]s into a [`Graph`] (a flat
//! arena, appended in execution order) whenever some input requires grad;
//! `backward` walks the ancestors of the output newest first and returns
//! [`Gradients`]. Every op implements [`Differentiable`] (forward and
//! backward together) and is registered by name in an [`OpRegistry`].
//!
//! ```
//! use retrograd::{Graph, Tensor};
//!
//! let graph = Graph::new();
//! let x = graph.variable(Tensor::scalar(3.0)).named("x");
//! let y = graph.variable(Tensor::scalar(4.0)).named("y");
//! let w = &x * &y + &x;                       // records mul, then add
//! assert_eq!(graph.to_string(), "nodes[0] = mul(x, y) -> 12\nnodes[1] = add(nodes[0], x) -> 15\n");
//! let grads = w.backward()?;
//! assert_eq!(grads.wrt(&x).try_item()?, 5.0);     // dw/dx = y + 1
//! assert_eq!(grads.wrt(&y).try_item()?, 3.0);     // dw/dy = x
//! # Ok::<(), retrograd::Error>(())
//! ```
#![warn(missing_docs)]
// `#[derive(Module)]` expands to `::retrograd::nn::...` paths, which must
// resolve inside this crate too.
extern crate self as retrograd;

pub mod autograd;
pub mod base;
pub mod compile;
pub mod core;
pub mod data;
pub mod func;
pub mod io;
pub mod kernels;
pub mod nn;
pub mod ops;
pub mod optim;
pub mod prelude;
pub mod quant;
pub mod tensor;

pub use self::core::{
    AttrValue, Differentiable, GradInputs, Graph, GraphNode, Holds, NoGradGuard, OpAttributes,
    OpFacts, Var,
};
pub use autograd::{
    grad, gradcheck, gradcheck_with, hessian, hessian_vector_product, jacobian, jacobian_with, jvp,
    jvpcheck, BackwardOptions, BackwardOrder, GradOptions, GradcheckOptions, Gradients,
    JacobianMode,
};
pub use base::profile;
pub use base::{DType, Error, OnnxProblem, Profile, Result, TensorProblem};
pub use compile::{compile, CompileOptions, Compiled, StepOutput};
pub use kernels::simd::{isa, set_isa_cap, Isa};
pub use ops::gelu::GeluApproximate;
pub use ops::nn::pool::options::*;
pub use ops::nn::{
    AttnMask, BatchNormArgs, BatchNormOutput, CrossEntropyOptions, NllLossOptions, Reduction,
    SdpaOptions,
};
pub use ops::OpRegistry;
pub use tensor::{DataType, Element, Tensor, TensorSummary};

/// The `half` crate, whose `f16` and `bf16` are the element types of
/// `DType::F16` and `DType::BF16` (`to_vec::<half::bf16>()`).
pub use half;
pub use smallvec;

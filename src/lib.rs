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
//!
//! This crate is the facade of a workspace: it re-exports the engine
//! (`retrograd-engine`: tensors, kernels, the graph, autograd, ops, `nn`,
//! optimizers, compiled steps, checkpoints) and the crates around it, each
//! behind the feature that needs its dependencies: `retrograd-data` (the
//! bundled datasets, in [`data`]), `retrograd-hub` ([`hub`], [`gguf`],
//! [`llm`] and the pretrained architectures, in [`nn`]), `retrograd-viz`
//! ([`viz`], [`runlog`], [`expr`]), `retrograd-train` ([`train`],
//! [`distributed`]) and `retrograd-onnx` ([`onnx`]).
#![warn(missing_docs)]
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
#[cfg(doctest)]
mod book;

pub use retrograd_engine::*;

/// Data for training: the engine's [`Dataset`](data::Dataset),
/// [`Batches`](data::Batches) and tokenizer, and the bundled datasets.
pub mod data {
    pub use retrograd_data::*;
    pub use retrograd_engine::data::*;
}

/// Parameters, modules and layers (the engine's), with the pretrained
/// architectures that [`hub`](crate::hub) loads (BERT, GPT-2, Llama).
pub mod nn {
    pub use retrograd_engine::nn::*;
    pub use retrograd_hub::models::*;
}

#[cfg(feature = "chat")]
pub use retrograd_hub::llm;
pub use retrograd_hub::{gguf, hub};
#[cfg(feature = "onnx")]
pub use retrograd_onnx as onnx;
pub use retrograd_train::{distributed, train};
#[cfg(feature = "expr")]
pub use retrograd_viz::expr;
pub use retrograd_viz::{runlog, viz};

pub mod prelude;

//! The core layer: the computational graph and the op trait, which need
//! each other by nature (`Differentiable`'s methods take [`Var`]s, and
//! `Graph::record` keeps an op per node), with what the trait's signatures
//! name.
//!
//! - [`graph`]: [`Graph`], [`Var`], the node records, `record`, both
//!   backward orders, the inference graph.
//! - `differentiable.rs`: [`Differentiable`], the op trait,
//!   [`GradInputs`] and [`Node`] (what a rule sees of its node).
//! - `attributes.rs`: [`OpAttributes`], an op's settings by name
//!   (`Differentiable::attributes` returns them).
//! - `facts.rs`: [`OpFacts`], what the registry knows of each op
//!   (`Differentiable::facts` returns it).
//! - `holds.rs`: [`Holds`], what an op keeps besides its inputs, which a
//!   compiled step must know before it replays the op.
//! - `scalar_lane.rs`: the scalar lane's call ([`ScalarBackward`]) and the
//!   `scalar_rule!` macro.
//! - `scalar_node.rs`: one scalar node of the first-order sweep, run inside
//!   its op's monomorphised `Differentiable::scalar_node` (the rule inlines:
//!   W1's hot path), so it must be a concrete type the trait can name.
//! - `pointwise.rs`: [`Pointwise`], an elementwise op as a kernel over
//!   slices, which compiled steps fuse.
//! - `store.rs`: gradient slots by value id and the first-order
//!   `TensorStore` that `ScalarNode` writes into.
//!
//! Nothing here imports from `autograd`, `ops` or anything above: the
//! sweeps (`autograd`) and the concrete ops (`ops`) build on this layer.
//! The older paths `crate::core::graph`, `crate::ops::Differentiable` and
//! `crate::autograd::ScalarNode` are re-exports of these items.
//!
//! Where things are: the core layer (`mod.rs`): the op trait
//! `Differentiable` and `GradInputs` (`differentiable.rs`), `OpAttributes`,
//! an op's settings by name (`attributes.rs`), `OpFacts`, what
//! the registry knows of each op (`facts.rs`), the scalar lane's call
//! `ScalarBackward` and the `scalar_rule!` macro for hand-written ops
//! (`scalar_lane.rs`), one scalar node run inside its op's monomorphised
//! `scalar_node`, and `LaneElement`, which tags a scalar call with its
//! dtype (`scalar_node.rs`), gradient slots by value id and the first-order
//! `TensorStore` (`store.rs`), and the graph (`graph/`, whose main types
//! the crate root re-exports: `retrograd::{Graph, Var, GraphNode}`).

pub mod attributes;
pub mod batching;
pub(crate) mod differentiable;
pub(crate) mod facts;
pub mod graph;
pub(crate) mod holds;
pub mod pointwise;
pub mod scalar_lane;
pub(crate) mod scalar_node;
pub(crate) mod store;

pub use attributes::{AttrValue, OpAttributes};
pub use batching::{BatchContext, Batched, Randomness};
pub use differentiable::{Differentiable, GradInputs, GradOp, Node};
pub use facts::{sample_tensor, Domain, OpFacts, SampleInputs, KINK_MARGIN};
pub use graph::{Graph, GraphNode, NoGradGuard, Var};
pub use holds::Holds;
pub use pointwise::{Pointwise, Primitive};
pub use scalar_lane::{ScalarArgs, ScalarBackward};
#[doc(hidden)]
pub use scalar_node::{LaneOutcome, ScalarNode};

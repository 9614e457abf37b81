//! The computational graph: a flat arena of nodes appended in execution order
//! (the seed's `ComputationGraph`), and the [`Var`] handles that record into it.
//!
//! Layout, chosen so a recorded scalar op costs a few words and no allocation:
//! every value that takes part (leaf or op output) has a slot in `values`
//! (its [`Tensor`]) and `producers` (the node that made it, or a leaf tag);
//! every node is a 32-byte record: an op reference, its output's value id
//! and, for one or two inputs, their ids (more go to the flat `node_inputs`
//! list).

mod node;
mod node_record;
pub(crate) mod order;
pub mod pool;

mod record;
mod var;

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use node::GraphNode;
pub(crate) use node_record::{InlineInputs, NodeRecord};
pub use var::Var;

use crate::error::{Error, Result};
use crate::ops::Differentiable;
use crate::tensor::Tensor;

/// Producer tag of a leaf that requires grad (`graph.variable`).
pub(crate) const LEAF_VARIABLE: u32 = u32::MAX;
/// Producer tag of a frozen leaf (`graph.constant`, a constant-folded value).
pub(crate) const LEAF_CONSTANT: u32 = u32::MAX - 1;
/// Value id of a constant that has no slot (yet): it never entered a node.
pub(crate) const NO_SLOT: u32 = u32::MAX;

static NEXT_GRAPH_ID: AtomicU64 = AtomicU64::new(1);

/// How a node refers to its op: built-in ops without state are `'static`;
/// ops with state (a reduction's axes, a registered user op) live in the
/// graph's `owned_ops` for as long as the graph does.
#[derive(Clone, Copy)]
pub(crate) enum OpRef {
    Static(&'static dyn Differentiable),
    Owned(u32),
}

/// A gradient hook: sees the gradient flowing into a value and may replace it
/// (registered with [`Var::register_hook`]; the graph keeps them by value id).
pub type GradHook = Box<dyn Fn(&Tensor) -> Option<Tensor>>;

/// An op owned by the graph, with the name it was recorded under.
pub(crate) struct OwnedOp {
    pub(crate) name: Option<Arc<str>>,
    pub(crate) op: Arc<dyn Differentiable>,
}

/// Everything the graph records, behind one `RefCell`.
#[derive(Default)]
pub(crate) struct GraphState {
    pub(crate) values: Vec<Tensor>,
    pub(crate) producers: Vec<u32>,
    pub(crate) nodes: Vec<NodeRecord>,
    /// The inputs of nodes with more than two (see [`NodeRecord`]).
    pub(crate) node_inputs: Vec<u32>,
    pub(crate) owned_ops: Vec<OwnedOp>,
    pub(crate) names: HashMap<u32, String>,
    /// Where each node was recorded; filled only while anomaly mode is on.
    pub(crate) locations: HashMap<u32, &'static Location<'static>>,
    /// Intermediate values whose gradients backward keeps (`retain_grad`).
    pub(crate) retained: std::collections::HashSet<u32>,
    /// Gradient hooks by value id (`register_hook`).
    pub(crate) hooks: HashMap<u32, Vec<GradHook>>,
    /// Parameter id -> value id of its leaf in this graph (`Graph::param`).
    pub(crate) params: HashMap<u64, u32>,
}

impl GraphState {
    /// The value ids of node `n`'s inputs.
    #[inline]
    pub(crate) fn inputs_of(&self, n: usize) -> &[u32] {
        self.nodes[n].inputs(&self.node_inputs)
    }

    #[inline]
    pub(crate) fn value_requires_grad(&self, id: u32) -> bool {
        self.producers[id as usize] != LEAF_CONSTANT
    }

    pub(crate) fn op_name(&self, op: OpRef) -> &str {
        match op {
            OpRef::Static(op) => op.name(),
            OpRef::Owned(i) => {
                let owned = &self.owned_ops[i as usize];
                owned.name.as_deref().unwrap_or_else(|| owned.op.name())
            }
        }
    }

    #[inline(always)]
    pub(crate) fn push_value(&mut self, t: Tensor, producer: u32) -> u32 {
        let id = self.values.len();
        if id >= NO_SLOT as usize - 1 {
            value_limit_reached();
        }
        self.values.push(t);
        self.producers.push(producer);
        id as u32
    }
}

#[cold]
#[inline(never)]
fn value_limit_reached() -> ! {
    panic!("graph value limit (2^32 - 2) reached")
}

/// The computational graph: records every op applied to a value that
/// requires grad, in execution order.
///
/// ```
/// use retrograd::{Graph, Tensor};
/// let g = Graph::new();
/// let x = g.variable(Tensor::scalar(3.0)).named("x");
/// let y = g.variable(Tensor::scalar(4.0)).named("y");
/// let w = &x * &y + &x;
/// assert_eq!(g.len(), 2);
/// assert_eq!(w.value().item()?, 15.0);
/// let grads = w.backward()?;
/// assert_eq!(grads.wrt(&x).item()?, 5.0);
/// assert_eq!(grads.wrt(&y).item()?, 3.0);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub struct Graph {
    pub(crate) state: RefCell<GraphState>,
    id: u64,
    /// The registry `apply` looks op names up in, when the graph was made
    /// with one (`None`: the default registry of built-in ops). It is an
    /// `Arc<OpRegistry>`, but `OpRegistry` holds the built-in ops, a layer
    /// above the graph (ARCHITECTURE.md, "Layers"), so the graph keeps it
    /// opaque: `ops/apply.rs` puts it in and reads it back.
    registry: Option<Box<dyn Any + Send + Sync>>,
    no_grad_depth: Cell<u32>,
    anomaly: Cell<bool>,
}

impl Default for Graph {
    fn default() -> Self {
        Self::new()
    }
}

impl Graph {
    /// An empty graph using the default registry of built-in ops.
    pub fn new() -> Self {
        Self::with_opaque_registry(None)
    }

    /// An empty graph with the given registry (see the `registry` field).
    pub(crate) fn with_opaque_registry(registry: Option<Box<dyn Any + Send + Sync>>) -> Self {
        let arena = pool::take_arena();
        Graph {
            state: RefCell::new(GraphState {
                values: arena.values,
                producers: arena.producers,
                nodes: arena.nodes,
                node_inputs: arena.node_inputs,
                ..GraphState::default()
            }),
            id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
            registry,
            no_grad_depth: Cell::new(0),
            anomaly: Cell::new(false),
        }
    }

    /// The registry the graph was made with, if any (see the `registry` field).
    pub(crate) fn opaque_registry(&self) -> Option<&(dyn Any + Send + Sync)> {
        self.registry.as_deref()
    }

    /// A process-unique id of this graph.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// A leaf that requires grad.
    pub fn variable(&self, value: Tensor) -> Var<'_> {
        let id = self
            .state
            .borrow_mut()
            .push_value(value.clone(), LEAF_VARIABLE);
        Var::from_parts(self, value, id, true)
    }

    /// A frozen leaf: used by ops, never differentiated.
    pub fn constant(&self, value: Tensor) -> Var<'_> {
        let id = self
            .state
            .borrow_mut()
            .push_value(value.clone(), LEAF_CONSTANT);
        Var::from_parts(self, value, id, false)
    }

    /// A named leaf that requires grad (the name shows in traces and pictures).
    pub fn named_variable(&self, name: &str, value: Tensor) -> Var<'_> {
        self.variable(value).named(name)
    }

    /// A named frozen leaf.
    pub fn named_constant(&self, name: &str, value: Tensor) -> Var<'_> {
        self.constant(value).named(name)
    }

    /// The number of op nodes recorded.
    pub fn len(&self) -> usize {
        self.state.borrow().nodes.len()
    }

    /// Whether no op node has been recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of value slots (leaves, op outputs and constants used by nodes).
    pub fn value_count(&self) -> usize {
        self.state.borrow().values.len()
    }

    /// A snapshot of node `index`, or `None` past the end.
    pub fn node(&self, index: usize) -> Option<GraphNode<'_>> {
        let st = self.state.borrow();
        (index < st.nodes.len()).then(|| GraphNode::snapshot(self, &st, index))
    }

    /// Snapshots of every node, in append (execution) order.
    pub fn nodes(&self) -> Vec<GraphNode<'_>> {
        let st = self.state.borrow();
        (0..st.nodes.len())
            .map(|i| GraphNode::snapshot(self, &st, i))
            .collect()
    }

    /// Whether recording is currently suspended (inside `no_grad`).
    pub fn is_recording(&self) -> bool {
        self.no_grad_depth.get() == 0
    }

    /// Runs `f` with recording suspended: every value it computes is a constant.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::scalar(2.0));
    /// let y = g.no_grad(|| &x * &x);
    /// assert!(!y.requires_grad());
    /// assert_eq!(g.len(), 0);
    /// ```
    pub fn no_grad<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = self.no_grad_guard();
        f()
    }

    /// Suspends recording until the returned guard is dropped.
    pub fn no_grad_guard(&self) -> NoGradGuard<'_> {
        self.no_grad_depth.set(self.no_grad_depth.get() + 1);
        NoGradGuard { graph: self }
    }

    /// Turns anomaly detection on or off: when on, every op output and every
    /// gradient is checked for NaN and infinity, and an error names the op,
    /// its node and the source line that recorded it. Off by default (and then free).
    pub fn set_anomaly_detection(&self, on: bool) {
        self.anomaly.set(on);
    }

    /// Whether anomaly detection is on.
    pub fn anomaly_detection(&self) -> bool {
        self.anomaly.get()
    }

    /// A display label for value `id` (its name, `nodes[i]`, or its value).
    pub(crate) fn label_of(&self, st: &GraphState, id: u32) -> String {
        if let Some(name) = st.names.get(&id) {
            return name.clone();
        }
        match st.producers[id as usize] {
            LEAF_VARIABLE => format!("v{id}"),
            LEAF_CONSTANT => {
                let t = &st.values[id as usize];
                if t.numel() <= 4 {
                    t.to_string()
                } else {
                    format!("c{id}")
                }
            }
            node => format!("nodes[{node}]"),
        }
    }

    pub(crate) fn set_name(&self, id: u32, name: &str) {
        self.state.borrow_mut().names.insert(id, name.to_string());
    }

    pub(crate) fn check_same(&self, op: &str, var: &Var<'_>) -> Result<()> {
        if std::ptr::eq(self, var.graph()) {
            Ok(())
        } else {
            Err(Error::ForeignVariable { op: op.to_string() })
        }
    }
}

impl Drop for Graph {
    /// Hands the arena's buffers, emptied, to the next graph on this thread
    /// (see [`pool`]).
    fn drop(&mut self) {
        let st = self.state.get_mut();
        pool::give_back_arena(pool::ArenaBuffers {
            values: std::mem::take(&mut st.values),
            producers: std::mem::take(&mut st.producers),
            nodes: std::mem::take(&mut st.nodes),
            node_inputs: std::mem::take(&mut st.node_inputs),
        });
    }
}

/// Suspends recording on a graph while alive; see [`Graph::no_grad_guard`].
pub struct NoGradGuard<'g> {
    graph: &'g Graph,
}

impl Drop for NoGradGuard<'_> {
    fn drop(&mut self) {
        self.graph
            .no_grad_depth
            .set(self.graph.no_grad_depth.get() - 1);
    }
}

impl std::fmt::Display for Graph {
    /// The trace in the seed's style, one node a line: `nodes[0] = mul(x, y) -> 12`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.borrow();
        for i in 0..st.nodes.len() {
            writeln!(f, "{}", node::trace_line(self, &st, i))?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Graph(id={}, nodes={}, values={})",
            self.id,
            self.len(),
            self.value_count()
        )
    }
}

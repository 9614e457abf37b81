//! The computational graph: a flat arena of nodes appended in execution order
//! (the textbook chapter's `ComputationGraph`), and the [`Var`] handles that record into it.
//!
//! Layout, chosen so a recorded scalar op costs a few words and no allocation:
//! every value that takes part (leaf or op output) has a slot in `values`
//! (its [`Tensor`]) and `producers` (the node that made it, or a leaf tag);
//! every node is a 20-byte record: its op's id in the graph's [`OpTable`],
//! its output's value id and, for one or two inputs, their ids (more go to
//! the flat `node_inputs` list).
//!
//! Where things are: `Graph` and its state (`mod.rs`), the per-thread
//! inference graph (`inference.rs`: `Graph::inference()`, which never
//! records and keeps no values, and `Var::from(tensor)`, so evaluation code
//! needs no graph), the 20-byte node record with inline inputs
//! (`node_record.rs`), the op table its records index (`op_table.rs`),
//! `record` (`record.rs`), `Var` (`var.rs`), `GraphNode` and the trace line
//! (`node.rs`), both backward orders (`order.rs`), the spare arena kept per
//! thread for the next graph (`pool.rs`); `GraphState`'s fields are private
//! to `graph`, read by the layers above through `#[inline]` methods.

pub(crate) mod capture;
mod inference;
#[cfg(test)]
mod never_run;
mod node;
mod node_record;
mod op_table;
pub mod order;
pub mod pool;

mod record;
mod var;

use std::any::Any;
use std::cell::{Cell, Ref, RefCell, RefMut};
use std::collections::{HashMap, HashSet};
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) use node::trace_line;
use smallvec::SmallVec;

pub use node::GraphNode;
pub(crate) use node_record::{InlineInputs, NodeRecord};
pub(crate) use op_table::{OpEntry, OpId, OpTable};
pub use var::Var;

use crate::base::error::{Error, Result};
use crate::core::Differentiable;
use crate::tensor::Tensor;

/// Producer tag of a leaf that requires grad (`graph.variable`).
pub const LEAF_VARIABLE: u32 = u32::MAX;
/// Producer tag of a frozen leaf (`graph.constant`, a constant-folded value).
pub const LEAF_CONSTANT: u32 = u32::MAX - 1;
/// Value id of a constant that has no slot (yet): it never entered a node.
pub(crate) const NO_SLOT: u32 = u32::MAX;

static NEXT_GRAPH_ID: AtomicU64 = AtomicU64::new(1);

/// A gradient hook: sees the gradient flowing into a value and may replace it
/// (registered with [`Var::register_hook`]; the graph keeps them by value id).
pub type GradHook = Box<dyn Fn(&Tensor) -> Option<Tensor>>;

/// Everything the graph records, behind one `RefCell`. The fields are
/// private to `graph`; the layers above read them through the methods
/// below, each `#[inline]` and compiled to the same field access.
///
/// Public, read-only, on purpose: the crates around the engine read the
/// recorded graph as it is (pictures draw it, the backward-sweep page
/// replays it, ONNX export writes it), and a user's own tool can too. A
/// `GraphState` is only ever borrowed from [`Graph::state`], so nothing
/// outside the engine can change what was recorded.
#[derive(Default)]
pub struct GraphState {
    values: Vec<Tensor>,
    producers: Vec<u32>,
    nodes: Vec<NodeRecord>,
    /// The inputs of nodes with more than two (see [`NodeRecord`]).
    node_inputs: Vec<u32>,
    /// The ops the nodes run.
    ops: OpTable,
    names: HashMap<u32, String>,
    /// Where each node was recorded; filled only while anomaly mode is on.
    locations: HashMap<u32, &'static Location<'static>>,
    /// Intermediate values whose gradients backward keeps (`retain_grad`).
    retained: HashSet<u32>,
    /// Gradient hooks by value id (`register_hook`).
    hooks: HashMap<u32, Vec<GradHook>>,
    /// Parameter id -> value id of its leaf in this graph (`Graph::param`).
    params: HashMap<u64, u32>,
    /// What a capture notes (see `capture.rs`); `None` when not capturing.
    capture: Option<Box<capture::CaptureLog>>,
    /// Where constants computed while tracing came from, by value id
    /// (see [`Graph::set_tracing`]).
    traced: HashMap<u32, TracedValue>,
}

/// The op and inputs of a constant computed while the graph traced (a
/// comparison's mask, a value computed from constants), by value id.
#[derive(Clone, Debug)]
pub struct TracedValue {
    /// The op that computed it.
    pub op: OpId,
    /// Its inputs' value ids.
    pub inputs: SmallVec<[u32; 4]>,
}

impl GraphState {
    /// Every value with a slot, by value id.
    #[inline(always)]
    pub fn values(&self) -> &[Tensor] {
        &self.values
    }

    /// Value `id`, to replace (a compiled step keeps large values of its
    /// captured graph as their shape only).
    pub(crate) fn value_mut(&mut self, id: u32) -> &mut Tensor {
        &mut self.values[id as usize]
    }

    /// The producer of each value, by value id: the node that made it, or
    /// `LEAF_VARIABLE`/`LEAF_CONSTANT`.
    #[inline(always)]
    pub fn producers(&self) -> &[u32] {
        &self.producers
    }

    /// The node records, in append (execution) order.
    #[inline(always)]
    pub fn nodes(&self) -> &[NodeRecord] {
        &self.nodes
    }

    /// The spilled inputs of nodes with more than two (see [`NodeRecord::inputs`]).
    #[inline(always)]
    pub(crate) fn node_inputs(&self) -> &[u32] {
        &self.node_inputs
    }

    /// The op a node refers to.
    #[inline(always)]
    pub fn op(&self, op: OpId) -> &dyn Differentiable {
        self.ops.op(op)
    }

    /// The table entry of a node's op (a shared op's `Arc` is there).
    #[inline]
    pub(crate) fn op_entry(&self, op: OpId) -> &OpEntry {
        self.ops.entry(op)
    }

    /// The name given to value `id`, if any.
    #[inline]
    pub fn name_of(&self, id: u32) -> Option<&str> {
        self.names.get(&id).map(String::as_str)
    }

    /// Where node `node` was recorded, if anomaly mode was on then.
    pub(crate) fn location_of(&self, node: u32) -> Option<&'static Location<'static>> {
        self.locations.get(&node).copied()
    }

    /// The intermediate values whose gradients backward keeps.
    #[inline]
    pub(crate) fn retained(&self) -> &HashSet<u32> {
        &self.retained
    }

    /// Keeps value `id`'s gradient in what backward returns.
    pub(crate) fn retain(&mut self, id: u32) {
        self.retained.insert(id);
    }

    /// Whether any value has a gradient hook.
    #[inline]
    pub(crate) fn has_hooks(&self) -> bool {
        !self.hooks.is_empty()
    }

    /// The values that have gradient hooks, in no particular order.
    pub(crate) fn hooked_values(&self) -> impl Iterator<Item = u32> + '_ {
        self.hooks.keys().copied()
    }

    /// Adds `hook` to value `id`'s hooks.
    pub(crate) fn add_hook(&mut self, id: u32, hook: GradHook) {
        self.hooks.entry(id).or_default().push(hook);
    }

    /// Takes value `id`'s hooks out (to run them with the graph unborrowed);
    /// [`put_hooks`](Self::put_hooks) puts them back.
    pub(crate) fn take_hooks(&mut self, id: u32) -> Option<Vec<GradHook>> {
        self.hooks.remove(&id)
    }

    /// Puts back the hooks [`take_hooks`](Self::take_hooks) took.
    pub(crate) fn put_hooks(&mut self, id: u32, hooks: Vec<GradHook>) {
        self.hooks.insert(id, hooks);
    }

    /// Parameter id -> value id of its leaf in this graph.
    #[inline]
    pub fn params(&self) -> &HashMap<u64, u32> {
        &self.params
    }

    /// Records that parameter `param_id`'s leaf in this graph is value `id`.
    pub(crate) fn set_param(&mut self, param_id: u64, id: u32) {
        self.params.insert(param_id, id);
    }

    /// Where constant `id` came from, if it was computed while tracing.
    #[inline]
    pub fn traced_of(&self, id: u32) -> Option<&TracedValue> {
        self.traced.get(&id)
    }

    /// The value ids of node `n`'s inputs.
    #[inline]
    pub fn inputs_of(&self, n: usize) -> &[u32] {
        self.nodes[n].inputs(&self.node_inputs)
    }

    /// Whether value `id` takes part in differentiation (a variable or an
    /// op's output, not a constant).
    #[inline]
    pub fn value_requires_grad(&self, id: u32) -> bool {
        self.producers[id as usize] != LEAF_CONSTANT
    }

    /// The registered name of a node's op.
    pub fn op_name(&self, op: OpId) -> &str {
        self.ops.name(op)
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
/// assert_eq!(w.value().try_item()?, 15.0);
/// let grads = w.backward()?;
/// assert_eq!(grads.wrt(&x).try_item()?, 5.0);
/// assert_eq!(grads.wrt(&y).try_item()?, 3.0);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub struct Graph {
    state: RefCell<GraphState>,
    id: u64,
    /// The registry `apply` looks op names up in, when the graph was made
    /// with one (`None`: the default registry of built-in ops). It is an
    /// `Arc<OpRegistry>`, but `OpRegistry` holds the built-in ops, a layer
    /// above the graph (ARCHITECTURE.md, "Layers"), so the graph keeps it
    /// opaque: `ops/apply.rs` puts it in and reads it back.
    registry: Option<Box<dyn Any + Send + Sync>>,
    no_grad_depth: Cell<u32>,
    anomaly: Cell<bool>,
    /// Whether constants computed by ops keep their op and inputs
    /// ([`Graph::set_tracing`]).
    tracing: Cell<bool>,
    /// This thread's inference graph ([`Graph::inference`]): records
    /// nothing and keeps no values.
    inference: bool,
    /// Whether a compiled step is being captured (see `capture.rs`).
    capturing: Cell<bool>,
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
                ops: OpTable::with_buffer(arena.ops),
                ..GraphState::default()
            }),
            id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
            registry,
            no_grad_depth: Cell::new(0),
            anomaly: Cell::new(false),
            tracing: Cell::new(false),
            inference: false,
            capturing: Cell::new(false),
        }
    }

    /// What the graph has recorded, borrowed read-only (the layers above,
    /// pictures and ONNX export read it through [`GraphState`]'s methods).
    /// Recording while the borrow is held panics, as any `RefCell` does:
    /// drop it before the next op.
    #[inline(always)]
    pub fn state(&self) -> Ref<'_, GraphState> {
        self.state.borrow()
    }

    /// What the graph has recorded, borrowed mutably.
    #[inline(always)]
    pub(crate) fn state_mut(&self) -> RefMut<'_, GraphState> {
        self.state.borrow_mut()
    }

    /// The registry the graph was made with, if any (see the `registry` field).
    pub(crate) fn opaque_registry(&self) -> Option<&(dyn Any + Send + Sync)> {
        self.registry.as_deref()
    }

    /// A process-unique id of this graph.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// A leaf that requires grad. Only a float tensor can be one: an `i64`
    /// or `bool` value panics at the caller's line (see
    /// [`try_variable`](Self::try_variable); make it a
    /// [`constant`](Self::constant) instead).
    #[track_caller]
    pub fn variable(&self, value: Tensor) -> Var<'_> {
        crate::base::error::or_panic(self.try_variable(value))
    }

    /// A leaf that requires grad, or `Error::NotDifferentiable` for an `i64`
    /// or `bool` value (indices and masks are never differentiated).
    ///
    /// ```
    /// use retrograd::{Error, Graph, Tensor};
    /// let g = Graph::new();
    /// assert!(g.try_variable(Tensor::scalar(1.5))?.requires_grad());
    /// let ids = Tensor::from_vec(vec![1i64, 2], &[2])?;
    /// assert!(matches!(g.try_variable(ids.clone()), Err(Error::NotDifferentiable { .. })));
    /// assert!(!g.constant(ids).requires_grad());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn try_variable(&self, value: Tensor) -> Result<Var<'_>> {
        if self.inference {
            return Err(Error::invalid(
                "variable",
                "the inference graph (Graph::inference) records nothing, so nothing on it \
                 requires grad: make a Graph::new() to differentiate",
            ));
        }
        if !value.is_float() {
            return Err(Error::NotDifferentiable {
                op: "variable",
                dtype: value.dtype(),
            });
        }
        let id = self
            .state
            .borrow_mut()
            .push_value(value.clone(), LEAF_VARIABLE);
        Ok(Var::from_parts(self, value, id, true))
    }

    /// A frozen leaf: used by ops, never differentiated.
    pub fn constant(&self, value: Tensor) -> Var<'_> {
        if self.inference {
            return Var::constant_in(self, value);
        }
        if self.is_capturing() && self.is_captured_state(&value) {
            // Traced, so that what is computed from it records nodes and
            // replays on each run's state instead of folding at capture.
            let id = self.state_mut().push_value(value.clone(), LEAF_VARIABLE);
            return Var::from_parts(self, value, id, true);
        }
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

    /// Turns tracing on or off. While it is on, a value that an op
    /// computes without recording a node, because its output is an index
    /// or a mask (a comparison) or because no input requires grad, still
    /// gets a slot and keeps its op and inputs when some input is a value
    /// of the graph: the whole computation from the graph's inputs (token
    /// ids included) can be read back, which exporters need. Backward is
    /// unchanged: such values stay constants. Off by default, since it
    /// keeps those values alive with the graph; the inference graph
    /// ([`Graph::inference`]) keeps nothing and cannot trace
    /// (`Error::InvalidArgument`).
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// g.try_set_tracing(true)?;
    /// let ids = g.constant(Tensor::from_vec(vec![0i64, 3], &[2])?);
    /// let mask = ids.try_ne_scalar(0.0)?;        // a bool constant...
    /// assert!(!mask.requires_grad() && mask.value_id().is_some()); // ...that the graph remembers
    /// assert_eq!(g.len(), 0);                     // and no node
    /// assert!(Graph::inference().try_set_tracing(true).is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn try_set_tracing(&self, on: bool) -> Result<()> {
        if self.inference && on {
            return Err(Error::invalid(
                "set_tracing",
                "the inference graph keeps no values, so it cannot trace: make a Graph::new()",
            ));
        }
        self.tracing.set(on);
        Ok(())
    }

    /// Like [`try_set_tracing`](Self::try_set_tracing), but panics with its error.
    #[track_caller]
    pub fn set_tracing(&self, on: bool) {
        crate::base::error::or_panic(self.try_set_tracing(on))
    }

    /// Whether the graph traces (see [`try_set_tracing`](Self::try_set_tracing)).
    pub fn is_tracing(&self) -> bool {
        self.tracing.get()
    }

    /// A display label for value `id` (its name, `nodes[i]`, or its value).
    pub fn label_of(&self, st: &GraphState, id: u32) -> String {
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

    /// A handle on value `id` of this graph (its value id, as pictures and
    /// exporters read it from [`state`](Self::state)); `None` past the
    /// values recorded so far.
    pub fn value_handle(&self, id: u32) -> Option<Var<'_>> {
        let st = self.state();
        let value = st.values().get(id as usize)?.clone();
        let requires_grad = st.value_requires_grad(id);
        Some(Var::from_parts(self, value, id, requires_grad))
    }

    pub(crate) fn set_name(&self, id: u32, name: &str) {
        self.state.borrow_mut().names.insert(id, name.to_string());
    }

    /// `Ok` if `var` is a handle on this graph; otherwise
    /// [`Error::ForeignVariable`] naming `op`.
    pub fn check_same(&self, op: &str, var: &Var<'_>) -> Result<()> {
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
            ops: std::mem::take(&mut st.ops).into_buffer(),
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
    /// The trace in the textbook chapter's style, one node a line: `nodes[0] = mul(x, y) -> 12`.
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

//! The backward engine: walk nodes in a reverse topological order, hand each
//! node's backward its output gradient, and accumulate what it returns.
//!
//! One engine serves both modes. First order stores plain tensors and runs
//! the backward formulas with recording suspended, so they cost no more than
//! kernels. With `create_graph` it stores `Var`s and lets the formulas record,
//! so the gradients can be differentiated again.

use smallvec::SmallVec;

use super::fast::{run_fast, Walk};
use super::gradients::Gradients;
use crate::base::error::{check_dtypes, Error, Result};
use crate::core::graph::{order, Graph, OpEntry, Var, NO_SLOT};
use crate::core::store::{GradSlot, TensorStore};
use crate::core::Differentiable;
use crate::tensor::Tensor;

/// Which order the backward sweep visits nodes in. Every valid order gives
/// the same gradients; they differ in the work done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BackwardOrder {
    /// Ancestors of the root only, newest first ([`Graph::backward_order`]).
    #[default]
    Ancestors,
    /// Every node, newest first ([`Graph::topological_backward_order`]);
    /// nodes that do not feed the root receive no gradient and are skipped.
    Tape,
    /// A caller-supplied order of node indices, checked to be a valid
    /// reverse topological order covering every ancestor of the root.
    Custom(Vec<usize>),
}

/// Options of a backward pass.
///
/// ```
/// use retrograd::{BackwardOptions, BackwardOrder, Graph, Tensor};
/// let g = Graph::new();
/// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2])?);
/// let y = &x * &x;
/// let opts = BackwardOptions::new()
///     .grad_output(Tensor::from_vec(vec![1.0, 10.0], &[2])?)
///     .order(BackwardOrder::Tape);
/// let grads = y.backward_with_options(&opts)?;
/// assert_eq!(grads.wrt(&x).to_f64_vec(), vec![2.0, 40.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct BackwardOptions {
    pub(crate) grad_output: Option<Tensor>,
    pub(crate) order: BackwardOrder,
    pub(crate) fast_path: bool,
}

impl Default for BackwardOptions {
    fn default() -> Self {
        BackwardOptions {
            grad_output: None,
            order: BackwardOrder::default(),
            fast_path: true,
        }
    }
}

impl BackwardOptions {
    /// Defaults: seed gradient 1 (scalar roots only), ancestors order.
    pub fn new() -> Self {
        Self::default()
    }

    /// The gradient of the root to start from (required for non-scalar roots).
    pub fn grad_output(mut self, grad_output: Tensor) -> Self {
        self.grad_output = Some(grad_output);
        self
    }

    /// The order to visit nodes in.
    pub fn order(mut self, order: BackwardOrder) -> Self {
        self.order = order;
        self
    }

    /// Whether ops may use their tensor-level `backward_fast` and
    /// `backward_accumulate` (on by default). Off, every node runs its `Var`-level `backward`: slower, but
    /// the same formulas `create_graph` differentiates; tests compare the two.
    pub fn fast_path(mut self, on: bool) -> Self {
        self.fast_path = on;
        self
    }
}

impl<'g> Var<'g> {
    /// Backpropagates from this one-element value with seed gradient 1.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::scalar(3.0));
    /// let grads = (&x * &x).backward()?;
    /// assert_eq!(grads.wrt(&x).try_item()?, 6.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn backward(&self) -> Result<Gradients> {
        self.backward_with_options(&BackwardOptions::new())
    }

    /// Backpropagates from this value with seed gradient `grad_output` (same
    /// shape and dtype): a vector-Jacobian product.
    pub fn backward_with(&self, grad_output: &Tensor) -> Result<Gradients> {
        self.backward_with_options(&BackwardOptions::new().grad_output(grad_output.clone()))
    }

    /// Backpropagates with explicit options.
    pub fn backward_with_options(&self, opts: &BackwardOptions) -> Result<Gradients> {
        // A gradient the allocator refuses is an error, not an abort.
        crate::tensor::refused::catching(|| "backward".to_string(), || self.backward_run(opts))
    }

    fn backward_run(&self, opts: &BackwardOptions) -> Result<Gradients> {
        let graph = self.graph();
        refuse_while_capturing(graph)?;
        let seed = seed_for(self, opts.grad_output.as_ref())?;
        let (slot_count, params) = {
            let st = graph.state();
            (st.values().len(), st.params().clone())
        };
        let mut store = TensorStore {
            slots: super::pool::take_slots(slot_count),
        };
        {
            let _recording_off = graph.no_grad_guard();
            let plain = {
                let st = graph.state();
                !st.has_hooks() && st.retained().is_empty()
            };
            let fast = opts.fast_path && plain && !graph.anomaly_detection();
            if fast && opts.order == BackwardOrder::Ancestors {
                // The sweep finds the ancestors itself: no list to build.
                run_fast(graph, self, seed, Walk::FromRoot, &mut store)?;
            } else {
                let order = resolve_order(graph, self, &opts.order)?;
                if fast {
                    run_fast(graph, self, seed, Walk::Listed(&order), &mut store)?;
                } else {
                    let seeds = [(self.slot(), Var::constant_in(graph, seed))];
                    run(graph, &seeds, &order, &mut store, &Default::default())?;
                }
            }
        }
        Ok(Gradients::new(graph.id(), store.slots, &params))
    }
}

/// A backward pass inside a function being compiled would run once, at
/// capture, and its gradients would be constants of every run.
pub(crate) fn refuse_while_capturing(graph: &Graph) -> Result<()> {
    if !graph.is_capturing() {
        return Ok(());
    }
    Err(Error::NotReplayable {
        op: "backward".into(),
        node: graph.len(),
        reason: "a backward pass inside a compiled function would run once, at capture, and its \
                 gradients would be constants of every run; the compiled step returns the \
                 gradients itself (CompileOptions::params, grad_inputs)"
            .into(),
    })
}

/// The seed gradient: `grad_output` if given (checked against the root),
/// else ones for a one-element root.
pub(crate) fn seed_for(root: &Var<'_>, grad_output: Option<&Tensor>) -> Result<Tensor> {
    if !root.requires_grad() {
        return Err(Error::RootDoesNotRequireGrad);
    }
    match grad_output {
        Some(g) => {
            if g.shape() != root.shape() {
                return Err(Error::shape_mismatch("backward", root.shape(), g.shape()));
            }
            check_dtypes("backward", root.dtype(), g.dtype())?;
            Ok(g.clone())
        }
        None if root.value().numel() == 1 => Ok(root.value().ones_like()),
        None => Err(Error::NonScalarRoot {
            shape: root.shape().to_vec(),
        }),
    }
}

/// The node indices to visit, newest first.
pub(crate) fn resolve_order(
    graph: &Graph,
    root: &Var<'_>,
    order: &BackwardOrder,
) -> Result<Vec<u32>> {
    let st = graph.state();
    Ok(match order {
        BackwardOrder::Ancestors => match root.node_index() {
            Some(n) => order::ancestors_of(&st, n),
            None => Vec::new(),
        },
        BackwardOrder::Tape => (0..st.nodes().len() as u32).rev().collect(),
        BackwardOrder::Custom(custom) => {
            order::validate_order(&st, custom)?;
            if let Some(n) = root.node_index() {
                let listed: std::collections::HashSet<usize> = custom.iter().copied().collect();
                if let Some(missing) = order::ancestors_of(&st, n)
                    .into_iter()
                    .find(|a| !listed.contains(&(*a as usize)))
                {
                    return Err(Error::InvalidOrder {
                        reason: format!("ancestor node {missing} of the root is missing"),
                    });
                }
            }
            custom.iter().map(|&i| i as u32).collect()
        }
    })
}

/// Where the engine keeps gradients while it runs.
pub(crate) trait GradStore<'g> {
    /// Removes and returns the gradient of value `id` (keeping a copy if `retain`).
    fn take(&mut self, graph: &'g Graph, id: u32, retain: bool) -> Option<Var<'g>>;
    /// Adds a contribution to the gradient of value `id`.
    fn add(&mut self, id: u32, grad: Var<'g>) -> Result<()>;
}

// The first-order store (`TensorStore`) is defined in `store.rs`, with the
// scalar lane that writes into it; it is a `GradStore` here.
impl<'g> GradStore<'g> for TensorStore {
    #[inline]
    fn take(&mut self, graph: &'g Graph, id: u32, retain: bool) -> Option<Var<'g>> {
        let slot = self.slots.get_mut(id as usize)?;
        match std::mem::replace(slot, GradSlot::Released) {
            GradSlot::Grad(t) => {
                if retain {
                    *slot = GradSlot::Grad(t.clone());
                }
                Some(Var::constant_in(graph, t))
            }
            other => {
                *slot = other;
                None
            }
        }
    }

    #[inline]
    fn add(&mut self, id: u32, grad: Var<'g>) -> Result<()> {
        self.add_tensor(id as usize, grad.into_value())
    }
}

/// Higher-order store: gradients are `Var`s, accumulated with recorded adds.
pub(crate) struct VarStore<'g> {
    pub(crate) slots: Vec<Option<Var<'g>>>,
}

impl<'g> GradStore<'g> for VarStore<'g> {
    fn take(&mut self, _graph: &'g Graph, id: u32, retain: bool) -> Option<Var<'g>> {
        let slot = self.slots.get_mut(id as usize)?;
        if retain {
            slot.clone()
        } else {
            slot.take()
        }
    }

    fn add(&mut self, id: u32, grad: Var<'g>) -> Result<()> {
        let id = id as usize;
        if id >= self.slots.len() {
            self.slots.resize(id + 1, None);
        }
        self.slots[id] = Some(match self.slots[id].take() {
            Some(acc) => acc.try_add(&grad)?,
            None => grad,
        });
        Ok(())
    }
}

/// One node's data, copied out so the graph is not borrowed while its
/// backward runs (a recording backward appends to the graph).
pub(crate) struct NodeCall<'g> {
    pub(crate) op: OpHolder,
    pub(crate) input_ids: SmallVec<[u32; 4]>,
    pub(crate) inputs: SmallVec<[Var<'g>; 4]>,
    pub(crate) output: Var<'g>,
}

#[derive(Clone)]
pub(crate) enum OpHolder {
    Static(&'static dyn Differentiable),
    Shared(std::sync::Arc<dyn Differentiable>),
}

impl OpHolder {
    /// The op of a table entry, held past the graph's borrow.
    pub(crate) fn of(entry: &OpEntry) -> Self {
        match entry {
            OpEntry::Static(op) => OpHolder::Static(*op),
            OpEntry::Owned { op, .. } => OpHolder::Shared(op.clone()),
        }
    }

    pub(crate) fn get(&self) -> &dyn Differentiable {
        match self {
            OpHolder::Static(op) => *op,
            OpHolder::Shared(op) => &**op,
        }
    }
}

pub(crate) fn node_call<'g>(graph: &'g Graph, node: usize) -> NodeCall<'g> {
    let st = graph.state();
    let rec = st.nodes()[node];
    let op = OpHolder::of(st.op_entry(rec.op));
    let input_ids: SmallVec<[u32; 4]> = SmallVec::from_slice(st.inputs_of(node));
    let inputs = input_ids
        .iter()
        .map(|&id| {
            Var::from_parts(
                graph,
                st.values()[id as usize].clone(),
                id,
                st.value_requires_grad(id),
            )
        })
        .collect();
    let output = Var::from_parts(
        graph,
        st.values()[rec.output as usize].clone(),
        rec.output,
        true,
    );
    NodeCall {
        op,
        input_ids,
        inputs,
        output,
    }
}

/// Runs the sweep: seeds the root, then visits `order`, every node through
/// its `Var`-level `backward`.
pub(crate) fn run<'g, S: GradStore<'g>>(
    graph: &'g Graph,
    seeds: &[(u32, Var<'g>)],
    order: &[u32],
    store: &mut S,
    keep: &std::collections::HashSet<u32>,
) -> Result<()> {
    for (id, seed) in seeds {
        debug_assert_ne!(*id, NO_SLOT, "a root that requires grad has a slot");
        store.add(*id, seed.clone())?;
    }
    let mut retained = graph.state().retained().clone();
    retained.extend(keep);
    let mut scratch = Scratch::default();
    for &node in order {
        let output = graph.state().nodes()[node as usize].output;
        let retain = !retained.is_empty() && retained.contains(&output);
        let Some(grad) = store.take(graph, output, retain) else {
            continue; // nothing reached this node: it contributes exactly zero
        };
        visit_with_vars(graph, node as usize, grad, store, &mut scratch)?;
    }
    run_leaf_hooks(graph, store)
}

/// Buffers reused across nodes so the sweep does not allocate per node.
#[derive(Default)]
pub(crate) struct Scratch<'g> {
    inputs: SmallVec<[Var<'g>; 4]>,
    input_ids: SmallVec<[u32; 4]>,
}

/// Runs node `node`'s `Var`-level backward with output gradient `grad` and
/// accumulates what it returns.
pub(crate) fn visit_with_vars<'g, S: GradStore<'g>>(
    graph: &'g Graph,
    node: usize,
    grad: Var<'g>,
    store: &mut S,
    scratch: &mut Scratch<'g>,
) -> Result<()> {
    let st = graph.state();
    let rec = st.nodes()[node];
    scratch.inputs.clear();
    scratch.input_ids.clear();
    for &id in st.inputs_of(node) {
        scratch.input_ids.push(id);
        scratch.inputs.push(Var::from_parts(
            graph,
            st.values()[id as usize].clone(),
            id,
            st.value_requires_grad(id),
        ));
    }
    let output = Var::from_parts(
        graph,
        st.values()[rec.output as usize].clone(),
        rec.output,
        true,
    );
    let op = OpHolder::of(st.op_entry(rec.op));
    let has_hooks = st.has_hooks();
    drop(st);
    let grad = if has_hooks {
        super::hooks::apply_hooks(graph, rec.output, grad)?
    } else {
        grad
    };
    let op = op.get();
    // In anomaly mode the gradients are checked below and blamed on this
    // node; the ops inside its formula must not report themselves instead.
    let anomaly = graph.anomaly_detection();
    graph.set_anomaly_detection(false);
    let grads = op.backward(&grad, &scratch.inputs, &output);
    graph.set_anomaly_detection(anomaly);
    let grads = grads?;
    if grads.len() != scratch.inputs.len() {
        return Err(bad_count(op, grads.len(), scratch.inputs.len()));
    }
    for ((g, input), &id) in grads
        .into_iter()
        .zip(&scratch.inputs)
        .zip(&scratch.input_ids)
    {
        let Some(g) = g else { continue };
        if !input.requires_grad() {
            continue;
        }
        if !g.value().same_shape(input.value()) || g.dtype() != input.dtype() {
            return Err(bad_shape(op, g.shape(), g.dtype(), input.value()));
        }
        if anomaly && !g.value().all_finite() {
            return Err(anomaly_error(graph, node, op.name()));
        }
        store.add(id, g)?;
    }
    Ok(())
}

#[cold]
fn bad_count(op: &dyn Differentiable, got: usize, inputs: usize) -> Error {
    Error::BadGradient {
        op: op.name().to_string(),
        detail: format!("{got} gradients for {inputs} inputs"),
    }
}

#[cold]
pub(crate) fn bad_shape(
    op: &dyn Differentiable,
    shape: &[usize],
    dtype: crate::DType,
    input: &Tensor,
) -> Error {
    Error::BadGradient {
        op: op.name().to_string(),
        detail: format!(
            "a gradient of shape {shape:?} ({dtype}) for an input of shape {:?} ({})",
            input.shape(),
            input.dtype()
        ),
    }
}

/// Leaf gradients are complete only when the sweep ends: run their hooks now.
fn run_leaf_hooks<'g, S: GradStore<'g>>(graph: &'g Graph, store: &mut S) -> Result<()> {
    let leaves: Vec<u32> = {
        let st = graph.state();
        if !st.has_hooks() {
            return Ok(());
        }
        let mut ids: Vec<u32> = st
            .hooked_values()
            .filter(|&id| st.producers()[id as usize] >= crate::core::graph::LEAF_CONSTANT)
            .collect();
        ids.sort_unstable();
        ids
    };
    for id in leaves {
        if let Some(g) = store.take(graph, id, false) {
            let g = super::hooks::apply_hooks(graph, id, g)?;
            store.add(id, g)?;
        }
    }
    Ok(())
}

fn anomaly_error(graph: &Graph, node: usize, op: &str) -> Error {
    let location = graph
        .state()
        .location_of(node as u32)
        .map(|l| l.to_string())
        .unwrap_or_else(|| "unknown (anomaly detection was off when it was recorded)".to_string());
    Error::Anomaly {
        op: op.to_string(),
        node,
        location,
        phase: "gradient",
    }
}

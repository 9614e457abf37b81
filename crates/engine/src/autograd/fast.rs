//! The first-order sweep on plain tensors: no `Var`s built, no formulas
//! recorded. A node whose values are all 0-d goes through its op's scalar
//! lane (plain numbers); other nodes through `backward_fast` (tensors); an
//! op with neither runs its `Var`-level `backward` with recording off.
//!
//! Used by `backward` without hooks, retained values or anomaly mode; the
//! general sweep in `backward.rs` handles those.

use std::cell::Ref;

use super::backward::{bad_shape, visit_with_vars, Scratch};
use crate::base::error::Result;
use crate::core::graph::{Graph, GraphState, NodeRecord, Var};
use crate::core::scalar_node::{ScalarGrad, ScalarNode};
use crate::core::store::{GradSlot, TensorStore};
use crate::core::Differentiable;
use crate::tensor::{Repr, Tensor};

/// The nodes a fast sweep visits.
pub(crate) enum Walk<'a> {
    /// Every node from the root's down to the first, running those a
    /// gradient reached. Append order is topological, so by the time the walk
    /// reaches a node every consumer has run: the nodes that run are exactly
    /// the root's ancestors, newest first (the order `backward_order` lists),
    /// found without building the list. A node outside them costs one check.
    FromRoot,
    /// An explicit order of node indices (the tape, or a checked custom order).
    Listed(&'a [u32]),
}

/// What one node needs after the fast paths had their say.
enum Visit {
    Done,
    /// The op has no fast path: run its `Var`-level backward with this gradient.
    NeedsVars(Tensor),
}

// One node's step, shared by every walk: a fast path, or its `Var`-level
// backward with the borrow released (a formula may read the graph). A macro,
// not a function: passing the borrow in and out of a function measured 5%
// more instructions on W1.
macro_rules! step {
    ($graph:ident, $st:ident, $store:ident, $scratch:ident, $node:expr) => {
        if let Visit::NeedsVars(grad) = visit(&$st, $node, $store)? {
            drop($st);
            let grad = Var::constant_in($graph, grad);
            visit_with_vars($graph, $node, grad, $store, &mut $scratch)?;
            $st = $graph.state();
        }
    };
}

/// Seeds the root with `seed`, then runs the nodes of `walk`.
pub(crate) fn run_fast<'g>(
    graph: &'g Graph,
    root: &Var<'g>,
    seed: Tensor,
    walk: Walk<'_>,
    store: &mut TensorStore,
) -> Result<()> {
    store.add_tensor(root.slot() as usize, seed)?;
    let mut scratch = Scratch::default();
    let mut st = graph.state();
    match walk {
        Walk::FromRoot => {
            let Some(top) = root.node_index() else {
                return Ok(());
            };
            for node in (0..=top).rev() {
                step!(graph, st, store, scratch, node);
            }
        }
        Walk::Listed(order) => {
            for &node in order {
                step!(graph, st, store, scratch, node as usize);
            }
        }
    }
    Ok(())
}

/// `run_fast`'s `FromRoot` walk, telling a caller when a leaf's gradient is
/// final: after node `at` of each `(at, leaf)` in `triggers` (sorted by
/// `at`, descending) has run, `on_final(leaf, store)` is called. A function
/// of its own, not a third walk, so the plain sweep's code stays as it was
/// (W1's hot path).
#[inline(never)]
pub(crate) fn run_fast_notify<'g>(
    graph: &'g Graph,
    root: &Var<'g>,
    seed: Tensor,
    triggers: &[(u32, u32)],
    on_final: &mut dyn FnMut(u32, &mut TensorStore) -> Result<()>,
    store: &mut TensorStore,
) -> Result<()> {
    store.add_tensor(root.slot() as usize, seed)?;
    let mut scratch = Scratch::default();
    let mut st = graph.state();
    let Some(top) = root.node_index() else {
        return Ok(());
    };
    let mut next = triggers.iter().peekable();
    for node in (0..=top).rev() {
        step!(graph, st, store, scratch, node);
        // Every consumer of a leaf has an index at least that of its lowest
        // one, and the walk goes down: past it, nothing adds to the leaf's
        // gradient.
        while let Some(&&(at, leaf)) = next.peek() {
            if at as usize != node {
                break;
            }
            next.next();
            // The caller may read the graph; release the borrow.
            drop(st);
            on_final(leaf, store)?;
            st = graph.state();
        }
    }
    Ok(())
}

/// Runs node `node` if a gradient reached it.
#[inline(always)]
fn visit(st: &Ref<'_, GraphState>, node: usize, store: &mut TensorStore) -> Result<Visit> {
    let rec = &st.nodes()[node];
    let out = rec.output as usize;
    let lane = match &store.slots[out] {
        GradSlot::Grad(grad) => match grad.repr() {
            Repr::F32(g) => Some(ScalarGrad::F32(g.f32())),
            Repr::F64(g) => Some(ScalarGrad::F64(g.f64())),
            _ => None,
        },
        _ => return Ok(Visit::Done), // nothing reached this node: it contributes zero
    };
    let op: &dyn Differentiable = st.op(rec.op);
    if let Some(g) = lane {
        // The gradient stays in its slot while the lane runs: a node's
        // output is never one of its inputs, so the lane does not touch it.
        let mut scalar = ScalarNode::new(st, rec, store, g);
        let outcome = op.scalar_node(&mut scalar);
        if scalar.ran(outcome)? {
            // The slot holds a 0-d gradient, which owns nothing, so it is
            // forgotten rather than dropped: with no drop (and no unwind
            // path) the write is one 8-byte store, not a 16-byte copy of a
            // stack temporary that waits on the store that made it.
            std::mem::forget(std::mem::replace(&mut store.slots[out], GradSlot::Released));
            return Ok(Visit::Done);
        }
    }
    visit_tensors(st, rec, op, store)
}

/// A node that is not all 0-d numbers (or whose op has no scalar lane):
/// through `backward_fast`. Kept out of line so the sweep's loop stays
/// small enough for its scalar nodes' state to live in registers.
#[inline(never)]
fn visit_tensors(
    st: &GraphState,
    rec: &NodeRecord,
    op: &dyn Differentiable,
    store: &mut TensorStore,
) -> Result<Visit> {
    let out = rec.output as usize;
    let GradSlot::Grad(grad) = std::mem::replace(&mut store.slots[out], GradSlot::Released) else {
        unreachable!("the sweep checked the slot")
    };
    // Fixed-size arrays per arity: no placeholders to fill, nothing to drop.
    let ids = rec.inputs(st.node_inputs());
    let handled = match ids.len() {
        1 => tensor_node::<1>(op, st, ids, &grad, out, store)?,
        2 => tensor_node::<2>(op, st, ids, &grad, out, store)?,
        3 => tensor_node::<3>(op, st, ids, &grad, out, store)?,
        4 => tensor_node::<4>(op, st, ids, &grad, out, store)?,
        _ => false,
    };
    Ok(if handled {
        Visit::Done
    } else {
        Visit::NeedsVars(grad)
    })
}

/// One node of one input through `backward_accumulate`, which adds its
/// gradient into the input's slot itself; returns whether the op took it.
fn accumulate_node(
    op: &dyn Differentiable,
    st: &GraphState,
    ids: &[u32],
    grad: &Tensor,
    out: usize,
    store: &mut TensorStore,
) -> Result<bool> {
    let &[id] = ids else { return Ok(false) };
    if !st.value_requires_grad(id) {
        return Ok(false);
    }
    let input = &st.values()[id as usize];
    let Some(mut acc) = store.take_for_accumulate(id as usize) else {
        return Ok(false);
    };
    let taken = op.backward_accumulate(grad, input, &st.values()[out], &mut acc);
    if matches!(taken, Ok(true))
        && let Some(g) = &acc
        && (!g.same_shape(input) || g.dtype() != input.dtype())
    {
        return Err(bad_shape(op, g.shape(), g.dtype(), input));
    }
    store.restore(id as usize, acc)?;
    taken
}

/// One node through `backward_fast`, for a node of exactly `N` inputs;
/// returns whether the op took the fast path.
#[inline(always)]
fn tensor_node<const N: usize>(
    op: &dyn Differentiable,
    st: &GraphState,
    ids: &[u32],
    grad: &Tensor,
    out: usize,
    store: &mut TensorStore,
) -> Result<bool> {
    let ids: &[u32; N] = ids.try_into().expect("the caller matched the arity");
    let inputs: [&Tensor; N] = std::array::from_fn(|k| &st.values()[ids[k] as usize]);
    let needs: [bool; N] = std::array::from_fn(|k| st.value_requires_grad(ids[k]));
    let mut grads: [Option<Tensor>; N] = std::array::from_fn(|_| None);
    if !op.backward_fast(grad, &inputs, &st.values()[out], &needs, &mut grads)? {
        return match N {
            1 => accumulate_node(op, st, ids, grad, out, store),
            _ => Ok(false),
        };
    }
    for (k, g) in grads.into_iter().enumerate() {
        let Some(g) = g else { continue };
        if !needs[k] {
            continue;
        }
        if !g.same_shape(inputs[k]) || g.dtype() != inputs[k].dtype() {
            return Err(bad_shape(op, g.shape(), g.dtype(), inputs[k]));
        }
        store.add_tensor(ids[k] as usize, g)?;
    }
    Ok(true)
}

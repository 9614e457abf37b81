//! The first-order sweep on plain tensors: no `Var`s built, no formulas
//! recorded. A node whose values are all 0-d goes through its op's scalar
//! lane (plain numbers); other nodes through `backward_fast` (tensors); an
//! op with neither runs its `Var`-level `backward` with recording off.
//!
//! Used by `backward` without hooks, retained values or anomaly mode; the
//! general sweep in `backward.rs` handles those.

use std::cell::Ref;

use super::backward::{bad_shape, visit_with_vars, Scratch, TensorStore};
use super::gradients::GradSlot;
use crate::error::Result;
use crate::graph::{Graph, GraphState, OpRef, Var, LEAF_CONSTANT};
use crate::ops::{Differentiable, ScalarArgs};
use crate::tensor::{Element, Repr, Tensor};

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
    let mut st = graph.state.borrow();
    // One node's step, shared by both walks: a fast path, or its `Var`-level
    // backward with the borrow released (a formula may read the graph). A
    // macro, not a function: passing the borrow in and out of a function
    // measured 5% more instructions on W1.
    macro_rules! step {
        ($node:expr, $inputs:expr) => {
            if let Visit::NeedsVars(grad) = visit(&st, $node, $inputs, store)? {
                drop(st);
                let grad = Var::constant_in(graph, grad);
                visit_with_vars(graph, $node, grad, store, &mut scratch)?;
                st = graph.state.borrow();
            }
        };
    }
    match walk {
        Walk::FromRoot => {
            let Some(top) = root.node_index() else {
                return Ok(());
            };
            // Walking down, node n's inputs end where node n + 1's begin.
            let mut end = st
                .nodes
                .get(top + 1)
                .map_or(st.node_inputs.len(), |next| next.inputs_start as usize);
            for node in (0..=top).rev() {
                let start = st.nodes[node].inputs_start as usize;
                let inputs = start..end;
                end = start;
                step!(node, inputs);
            }
        }
        Walk::Listed(order) => {
            for &node in order {
                let node = node as usize;
                let inputs = st.input_range(node);
                step!(node, inputs);
            }
        }
    }
    Ok(())
}

/// Runs node `node` (its inputs at `inputs` in `node_inputs`) if a gradient
/// reached it.
#[inline(always)]
fn visit(
    st: &Ref<'_, GraphState>,
    node: usize,
    inputs: std::ops::Range<usize>,
    store: &mut TensorStore,
) -> Result<Visit> {
    let rec = st.nodes[node];
    let out = rec.output as usize;
    let slot = &mut store.slots[out];
    if !matches!(slot, GradSlot::Grad(_)) {
        return Ok(Visit::Done); // nothing reached this node: it contributes zero
    }
    let GradSlot::Grad(grad) = std::mem::replace(slot, GradSlot::Released) else {
        unreachable!("checked above")
    };
    let ids = &st.node_inputs[inputs];
    let op: &dyn Differentiable = match rec.op {
        OpRef::Static(op) => op,
        OpRef::Owned(i) => &*st.owned_ops[i as usize].op,
    };
    let lane_taken = match grad.repr() {
        Repr::F32(g) => scalar_node(op, st, ids, *g, out, store)?,
        Repr::F64(g) => scalar_node(op, st, ids, *g, out, store)?,
        Repr::Dense(_) => false,
    };
    if lane_taken {
        return Ok(Visit::Done);
    }
    // Fixed-size arrays per arity: no placeholders to fill, nothing to drop.
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

/// One node through the op's scalar lane, if every value is a 0-d `T` and
/// the op has a lane; returns whether it ran.
#[inline(always)]
fn scalar_node<T: Element>(
    op: &dyn Differentiable,
    st: &GraphState,
    ids: &[u32],
    grad: T,
    out: usize,
    store: &mut TensorStore,
) -> Result<bool> {
    match ids.len() {
        1 => scalar_node_of::<T, 1>(op, st, ids, grad, out, store),
        2 => scalar_node_of::<T, 2>(op, st, ids, grad, out, store),
        3 => scalar_node_of::<T, 3>(op, st, ids, grad, out, store),
        _ => Ok(false),
    }
}

/// [`scalar_node`] for a node of exactly `N` inputs: fixed-size arrays, so
/// the gathering and accumulating loops unroll.
#[inline(always)]
fn scalar_node_of<T: Element, const N: usize>(
    op: &dyn Differentiable,
    st: &GraphState,
    ids: &[u32],
    grad: T,
    out: usize,
    store: &mut TensorStore,
) -> Result<bool> {
    let ids: &[u32; N] = ids.try_into().expect("the caller matched the arity");
    let mut xs = [T::zero(); N];
    for k in 0..N {
        match T::scalar_of(&st.values[ids[k] as usize]) {
            Some(v) => xs[k] = v,
            None => return Ok(false),
        }
    }
    let Some(output) = T::scalar_of(&st.values[out]) else {
        return Ok(false);
    };
    let mut ds = [T::zero(); N];
    let mut call = T::scalar_backward(ScalarArgs {
        grad,
        inputs: &xs,
        output,
        grads: &mut ds,
    });
    if !op.backward_scalar(&mut call) {
        return Ok(false);
    }
    for k in 0..N {
        if st.producers[ids[k] as usize] != LEAF_CONSTANT {
            store.add_scalar(ids[k] as usize, ds[k])?;
        }
    }
    Ok(true)
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
    let inputs: [&Tensor; N] = std::array::from_fn(|k| &st.values[ids[k] as usize]);
    let needs: [bool; N] = std::array::from_fn(|k| st.value_requires_grad(ids[k]));
    let mut grads: [Option<Tensor>; N] = std::array::from_fn(|_| None);
    if !op.backward_fast(grad, &inputs, &st.values[out], &needs, &mut grads)? {
        return Ok(false);
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

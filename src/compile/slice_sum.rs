//! Slice sums: where the backward sums the gradients of disjoint slices of
//! one value (the q, k and v heads cut from one fused projection), the
//! recorded graph has a `slice_backward` per slice, each a zero-filled
//! buffer of the whole value, and `add` nodes summing them. Lowering runs
//! such a tree as one [`SliceSum`](super::program::SliceSum) step that
//! writes each part into its slice of one buffer
//! (`kernels::layout::slice_sum`): the same bits (every element is
//! `0 + part` or 0), one buffer and one pass instead of one per node.

use crate::graph::{GraphState, LEAF_CONSTANT};

/// A tree of `add`s over `slice_backward`s of disjoint slices, found in the
/// captured graph.
pub(crate) struct SliceSumPlan {
    /// The tree's last `add`: the step runs where it would.
    pub(crate) root: u32,
    /// Every node of the tree, in graph order.
    pub(crate) nodes: Vec<u32>,
    /// Each slice's gradient (the `slice_backward`'s input) and its first
    /// position along `dim`.
    pub(crate) parts: Vec<(u32, usize)>,
    pub(crate) dim: usize,
    pub(crate) step: usize,
}

/// How a tree's `slice_backward`s scatter: the dimension and step they
/// all share (each part's first position is its own).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Scatter {
    dim: usize,
    step: usize,
}

/// A subtree: its nodes, its parts, and how its slices scatter.
struct Tree {
    nodes: Vec<u32>,
    parts: Vec<(u32, usize)>,
    scatter: Scatter,
}

/// Finds the slice sums among the live nodes not yet `covered`, and marks
/// their nodes covered. `readers[v]` counts every read of value `v` (by a
/// node, or as an output of the run): a slice gradient or partial sum read
/// anywhere else must stay a value of its own.
pub(crate) fn slice_sums(
    st: &GraphState,
    live: &[bool],
    covered: &mut [bool],
    readers: &[u32],
) -> Vec<SliceSumPlan> {
    let mut plans = Vec::new();
    // Latest first: a tree's root comes after every node below it, so the
    // largest tree is found before its subtrees.
    for n in (0..st.nodes().len()).rev() {
        if !live[n] || covered[n] || st.op_name(st.nodes()[n].op) != "add" {
            continue;
        }
        let Some(tree) = sum_tree(st, live, covered, readers, n as u32) else {
            continue;
        };
        if tree.parts.len() < 2 || !disjoint(st, &tree) {
            continue;
        }
        let mut nodes = tree.nodes;
        nodes.sort_unstable();
        for &m in &nodes {
            covered[m as usize] = true;
        }
        plans.push(SliceSumPlan {
            root: n as u32,
            nodes,
            parts: tree.parts,
            dim: tree.scatter.dim,
            step: tree.scatter.step,
        });
    }
    plans.reverse();
    plans
}

/// The tree under node `n` (an `add` of two subtrees, or a
/// `slice_backward`), if it is one.
fn sum_tree(
    st: &GraphState,
    live: &[bool],
    covered: &[bool],
    readers: &[u32],
    n: u32,
) -> Option<Tree> {
    let rec = st.nodes()[n as usize];
    let op = st.op(rec.op);
    let out = &st.values()[rec.output as usize];
    match op.name() {
        "slice_backward" => {
            let attrs = op.attributes();
            let shape: Vec<usize> = attrs
                .get_ints("shape")?
                .iter()
                .map(|&d| usize::try_from(d).ok())
                .collect::<Option<_>>()?;
            if shape != out.shape() {
                return None;
            }
            let scatter = Scatter {
                dim: usize::try_from(attrs.get_int("dim")?).ok()?,
                step: usize::try_from(attrs.get_int("step")?).ok()?,
            };
            let start = usize::try_from(attrs.get_int("start")?).ok()?;
            let g = *st.inputs_of(n as usize).first()?;
            Some(Tree {
                nodes: vec![n],
                parts: vec![(g, start)],
                scatter,
            })
        }
        "add" => {
            let &[a, b] = st.inputs_of(n as usize) else {
                return None;
            };
            let mut trees = [a, b].into_iter().map(|v| {
                let t = &st.values()[v as usize];
                let p = st.producers()[v as usize];
                // Only this add reads the operand, which has the sum's
                // shape and dtype (no broadcast) and is made by a node
                // the step can take over.
                if p >= LEAF_CONSTANT
                    || readers[v as usize] != 1
                    || t.shape() != out.shape()
                    || t.dtype() != out.dtype()
                    || !live[p as usize]
                    || covered[p as usize]
                {
                    return None;
                }
                sum_tree(st, live, covered, readers, p)
            });
            let (mut left, right) = (trees.next()??, trees.next()??);
            if left.scatter != right.scatter {
                return None;
            }
            left.nodes.extend(right.nodes);
            left.nodes.push(n);
            left.parts.extend(right.parts);
            Some(left)
        }
        _ => None,
    }
}

/// Whether the tree's slices cover no position twice (a slice's gradient
/// read twice would be a sum, not a scatter).
fn disjoint(st: &GraphState, tree: &Tree) -> bool {
    let Some(&root) = tree.nodes.last() else {
        return false;
    };
    let shape = st.values()[st.nodes()[root as usize].output as usize].shape();
    let Some(&size) = shape.get(tree.scatter.dim) else {
        return false;
    };
    let mut taken = vec![false; size];
    for &(g, start) in &tree.parts {
        let g_shape = st.values()[g as usize].shape();
        let Some(&len) = g_shape.get(tree.scatter.dim) else {
            return false;
        };
        for j in 0..len {
            match taken.get_mut(start + j * tree.scatter.step) {
                Some(t) if !*t => *t = true,
                _ => return false,
            }
        }
    }
    true
}

//! Slice sums: where the backward sums the gradients of disjoint slices of
//! one value (the q, k and v heads cut from one fused projection), the
//! recorded graph has a `slice_backward` per slice, each a zero-filled
//! buffer of the whole value, and `add` nodes summing them. Lowering runs
//! such a tree as one [`SliceSum`](super::ir::SliceSum) step that
//! writes each part into its slice of one buffer
//! (`kernels::layout::slice_sum`): the same bits (every element is
//! `0 + part` or 0), one buffer and one pass instead of one per node.

use smallvec::SmallVec;

use crate::core::graph::{GraphState, LEAF_CONSTANT};

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

/// What the pass knows of a node that heads a valid subtree: how its
/// slices scatter and how many parts it holds.
#[derive(Clone, Copy)]
struct Subtree {
    scatter: Scatter,
    parts: usize,
}

/// Finds the slice sums among the live nodes not yet `covered`, and marks
/// their nodes covered. `readers[v]` counts every read of value `v` (by a
/// node, or as an output of the run): a slice gradient or partial sum read
/// anywhere else must stay a value of its own.
///
/// One pass in graph order, bottom-up: an operand comes before the `add`
/// reading it, so each `add` learns whether it heads a tree from its two
/// operands' answers, in constant time. A tree's root is a tree no larger
/// tree absorbed; its nodes are then gathered with an explicit stack. Each
/// node is visited a bounded number of times and nothing recurses, so a
/// chain of a million `add`s costs a million steps and no stack.
pub(crate) fn slice_sums(
    st: &GraphState,
    live: &[bool],
    covered: &mut [bool],
    readers: &[u32],
) -> Vec<SliceSumPlan> {
    let count = st.nodes().len();
    let mut subtree: Vec<Option<Subtree>> = vec![None; count];
    // Set on a subtree's head when an `add` above took it in.
    let mut absorbed = vec![false; count];
    for n in 0..count {
        if !live[n] || covered[n] {
            continue;
        }
        subtree[n] = head_of(st, live, covered, readers, &subtree, n as u32);
        if subtree[n].is_some() && st.op_name(st.nodes()[n].op) == "add" {
            for p in tree_operands(st, n as u32) {
                absorbed[p as usize] = true;
            }
        }
    }
    let mut plans = Vec::new();
    for n in 0..count {
        let Some(head) = subtree[n] else { continue };
        if absorbed[n] || head.parts < 2 {
            continue;
        }
        let (mut nodes, parts) = gather(st, n as u32);
        if !disjoint(st, n as u32, head.scatter, &parts) {
            // A slice read twice is a sum, not a scatter: the tree stays
            // its `add`s.
            continue;
        }
        nodes.sort_unstable();
        for &m in &nodes {
            covered[m as usize] = true;
        }
        plans.push(SliceSumPlan {
            root: n as u32,
            nodes,
            parts,
            dim: head.scatter.dim,
            step: head.scatter.step,
        });
    }
    plans
}

/// Whether node `n` heads a tree (an `add` of two subtrees, or a
/// `slice_backward`), given the answers for every earlier node.
fn head_of(
    st: &GraphState,
    live: &[bool],
    covered: &[bool],
    readers: &[u32],
    subtree: &[Option<Subtree>],
    n: u32,
) -> Option<Subtree> {
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
            slice_part(st, n)?;
            Some(Subtree {
                scatter: Scatter {
                    dim: usize::try_from(attrs.get_int("dim")?).ok()?,
                    step: usize::try_from(attrs.get_int("step")?).ok()?,
                },
                parts: 1,
            })
        }
        "add" => {
            let &[a, b] = st.inputs_of(n as usize) else {
                return None;
            };
            let operand = |v: u32| {
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
                subtree[p as usize]
            };
            let (left, right) = (operand(a)?, operand(b)?);
            (left.scatter == right.scatter).then_some(Subtree {
                scatter: left.scatter,
                parts: left.parts + right.parts,
            })
        }
        _ => None,
    }
}

/// The producers of an `add`'s two operands (both graph nodes when the
/// `add` heads a tree).
fn tree_operands(st: &GraphState, n: u32) -> impl Iterator<Item = u32> + '_ {
    st.inputs_of(n as usize)
        .iter()
        .map(|&v| st.producers()[v as usize])
        .filter(|&p| p < LEAF_CONSTANT)
}

/// A `slice_backward`'s part: its gradient input and first position.
fn slice_part(st: &GraphState, n: u32) -> Option<(u32, usize)> {
    let op = st.op(st.nodes()[n as usize].op);
    let start = usize::try_from(op.attributes().get_int("start")?).ok()?;
    let g = *st.inputs_of(n as usize).first()?;
    Some((g, start))
}

/// The nodes and parts of the tree headed by `root`, parts left to right,
/// walked with an explicit stack.
fn gather(st: &GraphState, root: u32) -> (Vec<u32>, Vec<(u32, usize)>) {
    let (mut nodes, mut parts) = (Vec::new(), Vec::new());
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        nodes.push(n);
        if st.op_name(st.nodes()[n as usize].op) == "slice_backward" {
            parts.extend(slice_part(st, n));
            continue;
        }
        // Right first, so the left operand's parts come out first.
        let operands: SmallVec<[u32; 2]> = tree_operands(st, n).collect();
        stack.extend(operands.into_iter().rev());
    }
    (nodes, parts)
}

/// Whether the tree's slices cover no position twice (a slice's gradient
/// read twice would be a sum, not a scatter).
fn disjoint(st: &GraphState, root: u32, scatter: Scatter, parts: &[(u32, usize)]) -> bool {
    let shape = st.values()[st.nodes()[root as usize].output as usize].shape();
    let Some(&size) = shape.get(scatter.dim) else {
        return false;
    };
    let mut taken = vec![false; size];
    for &(g, start) in parts {
        let g_shape = st.values()[g as usize].shape();
        let Some(&len) = g_shape.get(scatter.dim) else {
            return false;
        };
        for j in 0..len {
            match taken.get_mut(start + j * scatter.step) {
                Some(t) if !*t => *t = true,
                _ => return false,
            }
        }
    }
    true
}

//! The types the stages of a compiled step hand each other, in one file so
//! that the stages import in one direction: `capture.rs` records
//! [`BackwardGroup`]s, lowering picks the [`FastRule`]s among them and
//! hands those to `fuse.rs`, and every stage and a run name gradients by
//! [`GradTarget`]. The rest is the program a captured step lowers to
//! ([`Program`]): the steps of one run over a table of slots, each slot one
//! value of the captured graph that crosses steps. Derived from the graph,
//! so nothing about it is hidden: every step names the nodes it runs, and
//! `explain` prints it.

use std::ops::Range;
use std::sync::Arc;

use smallvec::SmallVec;

use super::passing::FastCheck;
use crate::autograd::backward::OpHolder;
use crate::core::{Pointwise, Primitive};
use crate::tensor::{DType, Dims, Tensor};

/// Whose gradient a compiled step returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GradTarget {
    /// A parameter, by id.
    Param(u64),
    /// Input `k` of the step.
    Input(usize),
}

/// The backward formula of one forward node, as recorded.
#[derive(Clone, Debug)]
pub(crate) struct BackwardGroup {
    /// The forward node.
    pub(crate) node: u32,
    /// The value holding the gradient of its output.
    pub(crate) grad: u32,
    /// The nodes its formula recorded.
    pub(crate) nodes: Range<u32>,
    /// Per input: the value its formula returned as that input's gradient.
    pub(crate) grads: SmallVec<[Option<u32>; 4]>,
    /// Whether the op's fast rule took the captured values, for the
    /// gradients the step wants (`None`: not a candidate for one).
    pub(crate) fast: Option<FastCheck>,
}

/// A forward node whose backward runs as the op's fast rule (picked by
/// `lower.rs`, placed among the units by `fuse.rs`).
pub(crate) struct FastRule {
    pub(crate) group: BackwardGroup,
    /// The formula's returned gradients that are live.
    pub(crate) live_outs: SmallVec<[Option<u32>; 4]>,
}

/// A value's place in a run's table.
pub(crate) type Slot = u32;

/// Where a slot's value comes from at the start of a run.
pub(crate) enum Binding {
    /// Input `k` of the run, as given.
    Input(usize),
    /// Input `k` of the run viewed with this shape (the function reshaped
    /// it outside the graph).
    InputReshaped(usize, Dims),
    /// State read again at every run (a parameter, a buffer): source `i`
    /// of the capture.
    State(usize),
    /// State `i` viewed with this shape (a layer reshaped it outside the graph).
    StateReshaped(usize, Dims),
    /// A constant of the capture, kept by the program.
    Constant(Tensor),
}

/// What the program knows of each slot.
#[derive(Clone, Debug)]
pub(crate) struct SlotInfo {
    /// The value of the captured graph it holds.
    pub(crate) value: u32,
    pub(crate) shape: Dims,
    pub(crate) dtype: DType,
    /// Its planned buffer, if a step writes it into one.
    pub(crate) buffer: Option<u32>,
}

impl SlotInfo {
    /// Bytes of the value.
    pub(crate) fn bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size_in_bytes()
    }
}

/// A buffer of the memory plan: reused by values whose lives do not overlap.
#[derive(Clone, Debug)]
pub(crate) struct BufferInfo {
    pub(crate) dtype: DType,
    pub(crate) numel: usize,
    /// The slots it holds, in order.
    pub(crate) occupants: Vec<Slot>,
}

/// One node run through its op.
pub(crate) struct OpStep {
    pub(crate) node: u32,
    pub(crate) op: OpHolder,
    pub(crate) inputs: SmallVec<[Slot; 4]>,
    pub(crate) out: Slot,
    /// Bit `k` set when the output views input `k`'s storage (a reshape,
    /// a transpose): it gets no planned buffer and keeps that input alive.
    pub(crate) views: u64,
    /// The op's own seed, replaced at every run (dropout).
    pub(crate) seed: Option<u64>,
}

impl OpStep {
    /// Whether the output views input `k`'s storage.
    pub(crate) fn views_input(&self, k: usize) -> bool {
        k < 64 && self.views & (1 << k) != 0
    }
}

/// A forward node's fast backward rule, run in place of the nodes its
/// `Var` formula recorded.
pub(crate) struct FastStep {
    /// The forward node whose backward this is.
    pub(crate) node: u32,
    pub(crate) op: OpHolder,
    pub(crate) grad: Slot,
    pub(crate) inputs: SmallVec<[Slot; 4]>,
    pub(crate) output: Slot,
    pub(crate) needs: SmallVec<[bool; 4]>,
    /// Where each input's gradient goes (`None`: not needed).
    pub(crate) outs: SmallVec<[Option<Slot>; 4]>,
    /// The formula's nodes this step replaces.
    pub(crate) covers: Range<u32>,
}

/// How a fused group's input lines up with its output, seen as
/// `rows x row_len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// The output's shape: element `i` at `i`.
    Full,
    /// One element for all.
    Scalar,
    /// `row_len` elements repeated on every row (a bias).
    Periodic,
    /// One element per row (a per-row statistic).
    PerRow,
}

/// An operand of a fused micro-op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arg {
    /// A `Full` or `Periodic` input, read in place.
    Input(u16),
    /// A scratch register (a chunk of elements).
    Reg(u16),
    /// A materialized output, read back from its buffer.
    Out(u16),
}

/// One node of a fused group, run over a chunk.
pub(crate) struct MicroOp {
    pub(crate) kernel: Arc<dyn Pointwise>,
    pub(crate) args: [Arg; 4],
    pub(crate) arity: u8,
    pub(crate) dest: Arg,
}

/// Elementwise nodes of one shape, run as one pass over memory.
pub(crate) struct FusedGroup {
    pub(crate) dtype: DType,
    pub(crate) shape: Dims,
    pub(crate) rows: usize,
    pub(crate) row_len: usize,
    /// External inputs. `Scalar` and `PerRow` ones are loaded into
    /// registers `broadcast_regs[i]`.
    pub(crate) inputs: Vec<(Slot, Pattern)>,
    pub(crate) broadcast_regs: Vec<u16>,
    pub(crate) ops: Vec<MicroOp>,
    /// Materialized values: `Out(o)` is slot `outputs[o]`.
    pub(crate) outputs: Vec<Slot>,
    pub(crate) regs: usize,
    /// The graph nodes it runs, in order.
    pub(crate) nodes: Vec<u32>,
}

/// What a scalar micro-op computes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Code {
    Prim(Primitive),
    /// `kernels[i]`'s one-element form.
    Kernel(u32),
}

/// One 0-d node of a scalar program.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScalarOp {
    pub(crate) code: Code,
    pub(crate) args: [u32; 4],
    pub(crate) out: u32,
}

/// Consecutive 0-d elementwise nodes as a flat program over numbers in
/// registers: no tensor, no call for basic arithmetic.
pub(crate) struct ScalarProgram {
    pub(crate) dtype: DType,
    /// Slots loaded into registers first.
    pub(crate) inputs: Vec<(Slot, u32)>,
    pub(crate) kernels: Vec<Arc<dyn Pointwise>>,
    pub(crate) ops: Vec<ScalarOp>,
    /// Registers written to slots at the end.
    pub(crate) outputs: Vec<(u32, Slot)>,
    pub(crate) regs: usize,
    pub(crate) nodes: Vec<u32>,
}

/// Gradients of disjoint slices of one value, summed (the q, k and v
/// heads of one fused projection): each part is added into its slice of
/// one zeroed buffer, in place of the `slice_backward` nodes (a zeroed
/// full-size buffer each) and the `add` nodes that summed them. Every
/// element is `0 + part` or `0`, the sum's own bits.
pub(crate) struct SliceSum {
    /// The dimension sliced, and the step between positions.
    pub(crate) dim: usize,
    pub(crate) step: usize,
    /// Each part's gradient and its first position along `dim`.
    pub(crate) parts: Vec<(Slot, usize)>,
    pub(crate) out: Slot,
    /// The `slice_backward` and `add` nodes it runs, in graph order.
    pub(crate) nodes: Vec<u32>,
}

/// One step of a run.
pub(crate) enum Step {
    Op(OpStep),
    Fast(FastStep),
    Fused(FusedGroup),
    Scalar(ScalarProgram),
    SliceSum(SliceSum),
}

impl Step {
    /// The graph nodes this step runs (or replaces, for a fast rule).
    pub(crate) fn nodes(&self) -> Vec<u32> {
        match self {
            Step::Op(s) => vec![s.node],
            Step::Fast(s) => s.covers.clone().collect(),
            Step::Fused(g) => g.nodes.clone(),
            Step::Scalar(p) => p.nodes.clone(),
            Step::SliceSum(s) => s.nodes.clone(),
        }
    }
}

/// A lowered step, ready to replay.
pub(crate) struct Program {
    pub(crate) steps: Vec<Step>,
    /// `releases[release_at[i]]`: the slots whose last use is step `i`.
    pub(crate) release_at: Vec<Range<u32>>,
    pub(crate) releases: Vec<Slot>,
    pub(crate) slots: Vec<SlotInfo>,
    pub(crate) bindings: Vec<(Slot, Binding)>,
    pub(crate) root: Slot,
    pub(crate) grads: Vec<(GradTarget, Option<Slot>)>,
    /// The named outputs and state updates, in the capture log's order.
    pub(crate) outputs: Vec<Slot>,
    pub(crate) buffers: Vec<BufferInfo>,
    /// Nodes no output depends on (not run).
    pub(crate) dead_nodes: usize,
    /// Whether some value is large enough for a kernel to split it across
    /// threads (`kernels::parallel`); a replay of tiny values stays on the
    /// calling thread rather than pay a hand-over to the pool.
    pub(crate) parallel: bool,
}

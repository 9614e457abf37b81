//! Fusion: which nodes run together, and the micro-programs they run.
//!
//! - A **fused group** is a set of elementwise nodes (ops with a
//!   [`Pointwise`](crate::core::Pointwise) kernel) with one output shape,
//!   run as one pass over memory in chunks that stay in L1: a node joins
//!   the group of one of its producers when every other input it reads is
//!   a leaf, a member, or made before the group's first member (so the
//!   group can run where its first member stood), and when its inputs line
//!   up with the group's iteration as full tensors, scalars, per-row
//!   values or a repeated row (a bias). Only values read outside the group
//!   are written to memory.
//! - A **scalar program** is a run of consecutive 0-d elementwise nodes:
//!   numbers in registers, `+ - * /` and negation without any call, other
//!   rules through one call to their one-element form.
//!
//! Fusion never reorders floating-point work: each node computes its own
//! op on its own operands, so a fused step gives the unfused bits.

use std::collections::HashMap;
use std::sync::Arc;

use smallvec::SmallVec;

use super::ir::{Arg, Code, FastRule, FusedGroup, MicroOp, Pattern, ScalarOp, ScalarProgram, Slot};
use super::slice_sum::SliceSumPlan;
use super::value_marks::ValueMarks;
use crate::base::error::{Error, Result};
use crate::core::graph::{GraphState, OpId, LEAF_CONSTANT};
use crate::core::Pointwise;
use crate::tensor::{DType, Dims};

/// What one step of the program runs, before slots are known.
pub(crate) enum Unit {
    Node(u32),
    Fast(usize),
    Group(GroupPlan),
    Scalar(Vec<u32>),
    /// `slice_sum.rs`'s plan `i`.
    SliceSum(usize),
}

/// A fused group's members and iteration.
pub(crate) struct GroupPlan {
    pub(crate) nodes: Vec<u32>,
    first: u32,
    shape: Dims,
    dtype: DType,
    /// Shapes of the inputs members read from outside the group.
    outside: Vec<Dims>,
}

const NONE: u32 = u32::MAX;

/// The most members a fused group takes: its registers and outputs are
/// numbered in `u16`, and a group this long already spends nearly all its
/// time in its members' kernels.
const MAX_MEMBERS: usize = 4096;

/// Orders the live nodes into units: fast rules, fused groups, scalar
/// programs and single nodes, each where its first node stood.
pub(crate) fn units(
    st: &GraphState,
    live: &[bool],
    covered: &[bool],
    fast: &[FastRule],
    sums: &[SliceSumPlan],
    fuse: bool,
) -> Vec<Unit> {
    let mut placed: Vec<(u32, Unit)> = fast
        .iter()
        .enumerate()
        .map(|(i, f)| (f.group.nodes.start, Unit::Fast(i)))
        .collect();
    placed.extend(
        sums.iter()
            .enumerate()
            .map(|(i, p)| (p.root, Unit::SliceSum(i))),
    );
    // Where each value is made (leaves: before everything) and its group.
    let mut pos = vec![-1i64; st.values().len()];
    for f in fast {
        for &v in f.live_outs.iter().flatten() {
            pos[v as usize] = f.group.nodes.start as i64;
        }
    }
    for p in sums {
        pos[st.nodes()[p.root as usize].output as usize] = p.root as i64;
    }
    let mut group_of = vec![NONE; st.values().len()];
    let mut groups: Vec<GroupPlan> = Vec::new();
    for n in 0..st.nodes().len() {
        if !live[n] || covered[n] {
            continue;
        }
        let out = st.nodes()[n].output as usize;
        if !fuse || scalar_fusable(st, n) || !tensor_fusable(st, n) {
            pos[out] = n as i64;
            placed.push((n as u32, Unit::Node(n as u32)));
            continue;
        }
        let joined = st.inputs_of(n).iter().find_map(|&v| {
            let g = group_of[v as usize];
            (g != NONE && may_join(st, n, &groups[g as usize], g, &group_of, &pos)).then_some(g)
        });
        let g = match joined {
            Some(g) => g,
            None => {
                let t = &st.values()[out];
                groups.push(GroupPlan {
                    nodes: Vec::new(),
                    first: n as u32,
                    shape: Dims::from_slice(t.shape()),
                    dtype: t.dtype(),
                    outside: Vec::new(),
                });
                (groups.len() - 1) as u32
            }
        };
        for &v in st.inputs_of(n) {
            let shape = st.values()[v as usize].shape();
            let outside = &mut groups[g as usize].outside;
            // Only the distinct shapes matter to `split`: a long chain's
            // group keeps a handful, not one per read.
            if group_of[v as usize] != g && !outside.iter().any(|d| d.as_slice() == shape) {
                outside.push(Dims::from_slice(shape));
            }
        }
        let group = &mut groups[g as usize];
        group.nodes.push(n as u32);
        group_of[out] = g;
        pos[out] = group.first as i64;
    }
    placed.extend(groups.into_iter().map(|g| (g.first, Unit::Group(g))));
    placed.sort_by_key(|(p, _)| *p);
    // Consecutive 0-d elementwise nodes become one scalar program.
    let mut units: Vec<Unit> = Vec::with_capacity(placed.len());
    for (_, unit) in placed {
        if let Unit::Node(n) = unit
            && fuse
            && scalar_fusable(st, n as usize)
        {
            if let Some(Unit::Scalar(run)) = units.last_mut()
                && same_dtype(st, run[0], n)
            {
                run.push(n);
                continue;
            }
            units.push(Unit::Scalar(vec![n]));
            continue;
        }
        units.push(unit);
    }
    units
}

fn same_dtype(st: &GraphState, a: u32, b: u32) -> bool {
    let dtype = |n: u32| st.values()[st.nodes()[n as usize].output as usize].dtype();
    dtype(a) == dtype(b)
}

/// The node's op as a fused kernel, if it has one and the node's values
/// are floats of one dtype.
fn kernel_of(st: &GraphState, n: usize) -> Option<Arc<dyn Pointwise>> {
    let rec = st.nodes()[n];
    let out = &st.values()[rec.output as usize];
    let inputs = st.inputs_of(n);
    if !out.is_float()
        || inputs
            .iter()
            .any(|&v| st.values()[v as usize].dtype() != out.dtype())
    {
        return None;
    }
    let k = st.op(rec.op).pointwise()?;
    (k.arity() == inputs.len()).then_some(k)
}

fn scalar_fusable(st: &GraphState, n: usize) -> bool {
    let out = &st.values()[st.nodes()[n].output as usize];
    out.rank() == 0
        && st
            .inputs_of(n)
            .iter()
            .all(|&v| st.values()[v as usize].rank() == 0)
        && kernel_of(st, n).is_some()
}

fn tensor_fusable(st: &GraphState, n: usize) -> bool {
    let out = &st.values()[st.nodes()[n].output as usize];
    let shapes: Vec<Dims> = st
        .inputs_of(n)
        .iter()
        .map(|&v| Dims::from_slice(st.values()[v as usize].shape()))
        .collect();
    out.rank() > 0
        && out.numel() > 0
        && kernel_of(st, n).is_some()
        && split(out.shape(), &shapes).is_some()
}

/// Whether node `n` may join group `g`: same iteration, every input
/// already there when the group runs, inputs that line up.
fn may_join(
    st: &GraphState,
    n: usize,
    group: &GroupPlan,
    g: u32,
    group_of: &[u32],
    pos: &[i64],
) -> bool {
    let out = &st.values()[st.nodes()[n].output as usize];
    if group.nodes.len() >= MAX_MEMBERS
        || out.shape() != group.shape.as_slice()
        || out.dtype() != group.dtype
    {
        return false;
    }
    let mut outside: SmallVec<[Dims; 8]> = group.outside.iter().cloned().collect();
    for &v in st.inputs_of(n) {
        if group_of[v as usize] == g {
            continue;
        }
        let leaf = st.producers()[v as usize] >= LEAF_CONSTANT;
        if !leaf && pos[v as usize] >= group.first as i64 {
            return false;
        }
        let shape = st.values()[v as usize].shape();
        if !outside.iter().any(|d| d.as_slice() == shape) {
            outside.push(Dims::from_slice(shape));
        }
    }
    split(&group.shape, &outside).is_some()
}

/// How an input of `shape` lines up with an output of `out` seen as
/// `rows x row_len` with the rows made of the first `k` dims.
fn pattern(out: &[usize], shape: &[usize], k: usize) -> Option<Pattern> {
    let pad = out.len().checked_sub(shape.len())?;
    let dim = |d: usize| if d < pad { 1 } else { shape[d - pad] };
    // Per part: does the input span it (Some(true)), broadcast over it
    // (Some(false)), or mix (None)? An empty part is either.
    let part = |range: std::ops::Range<usize>| -> Option<Option<bool>> {
        let mut kind = None;
        for d in range {
            if out[d] == 1 {
                continue;
            }
            let full = dim(d) == out[d];
            if !full && dim(d) != 1 {
                return None;
            }
            match kind {
                None => kind = Some(full),
                Some(k) if k != full => return None,
                _ => {}
            }
        }
        Some(kind)
    };
    let (rows, cols) = (part(0..k)?, part(k..out.len())?);
    Some(match (rows.unwrap_or(true), cols.unwrap_or(true)) {
        (true, true) => Pattern::Full,
        (false, false) => Pattern::Scalar,
        (false, true) => Pattern::Periodic,
        (true, false) => Pattern::PerRow,
    })
}

/// The smallest row split every input lines up with: `(k, patterns)`.
fn split(out: &[usize], inputs: &[Dims]) -> Option<(usize, Vec<Pattern>)> {
    (0..=out.len()).find_map(|k| {
        let patterns: Option<Vec<Pattern>> = inputs.iter().map(|s| pattern(out, s, k)).collect();
        patterns.map(|p| (k, p))
    })
}

/// The kernels of a program, one per op (entries of the graph's table
/// that hold one op, such as a capture's backward kernels, share it).
#[derive(Default)]
struct Kernels {
    list: Vec<Arc<dyn Pointwise>>,
    by_op: HashMap<KernelKey, u32>,
}

/// What names an op for [`Kernels`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum KernelKey {
    Entry(OpId),
    At(usize),
}

impl Kernels {
    fn of(&mut self, st: &GraphState, n: usize) -> u32 {
        let id = st.nodes()[n].op;
        let op = st.op(id);
        // An op with state is one allocation: its address names it. A
        // zero-sized one has no address of its own, so its entry does.
        let op = match std::mem::size_of_val(op) {
            0 => KernelKey::Entry(id),
            _ => KernelKey::At(op as *const dyn crate::Differentiable as *const () as usize),
        };
        if let Some(&i) = self.by_op.get(&op) {
            return i;
        }
        let k = kernel_of(st, n).expect("a fused node has a kernel");
        self.list.push(k);
        let i = (self.list.len() - 1) as u32;
        self.by_op.insert(op, i);
        i
    }
}

/// Registers that are freed after their value's last use and handed out again.
#[derive(Default)]
struct Registers {
    free: Vec<u32>,
    count: u32,
}

impl Registers {
    fn take(&mut self) -> u32 {
        self.free.pop().unwrap_or_else(|| {
            self.count += 1;
            self.count - 1
        })
    }
}

/// Notes the last member reading each value of a unit's members.
fn note_last_reads(st: &GraphState, nodes: &[u32], marks: &mut ValueMarks) {
    for (i, &n) in nodes.iter().enumerate() {
        for &v in st.inputs_of(n as usize) {
            marks.note_read_by(v, i);
        }
    }
}

/// Builds a fused group's micro-program.
pub(crate) fn fused_group(
    st: &GraphState,
    plan: &GroupPlan,
    reads: &[u32],
    writes: &[u32],
    slot_of: &impl Fn(u32) -> Slot,
    marks: &mut ValueMarks,
) -> Result<FusedGroup> {
    marks.begin();
    let shapes: Vec<Dims> = reads
        .iter()
        .map(|&v| Dims::from_slice(st.values()[v as usize].shape()))
        .collect();
    let (k, patterns) = split(&plan.shape, &shapes).ok_or_else(|| Error::NotReplayable {
        op: "fusion".into(),
        node: plan.first as usize,
        reason: "a fused group's inputs do not line up (internal error)".into(),
    })?;
    let rows: usize = plan.shape[..k].iter().product();
    let row_len: usize = plan.shape[k..].iter().product();
    let mut regs = Registers::default();
    let mut broadcast_regs = Vec::new();
    let mut inputs = Vec::with_capacity(reads.len());
    for (i, (&v, &p)) in reads.iter().zip(&patterns).enumerate() {
        inputs.push((slot_of(v), p));
        let arg = match p {
            Pattern::Full | Pattern::Periodic => Arg::Input(i as u16),
            Pattern::Scalar | Pattern::PerRow => {
                let r = regs.take() as u16;
                broadcast_regs.push(r);
                Arg::Reg(r)
            }
        };
        if !matches!(arg, Arg::Reg(_)) {
            broadcast_regs.push(u16::MAX);
        }
        marks.set_arg(v, arg);
        marks.mark_read(v);
    }
    note_last_reads(st, &plan.nodes, marks);
    for &v in writes {
        marks.mark_written(v);
    }
    let mut kernels = Kernels::default();
    let mut ops = Vec::with_capacity(plan.nodes.len());
    let mut outputs = Vec::new();
    for (i, &n) in plan.nodes.iter().enumerate() {
        let rec = st.nodes()[n as usize];
        let mut args = [Arg::Reg(0); 4];
        let inputs_of = st.inputs_of(n as usize);
        for (a, &v) in args.iter_mut().zip(inputs_of) {
            *a = marks
                .arg(v)
                .expect("a member's input is placed before it runs");
        }
        let dest = if marks.is_written(rec.output) {
            outputs.push(slot_of(rec.output));
            Arg::Out((outputs.len() - 1) as u16)
        } else {
            Arg::Reg(regs.take() as u16)
        };
        let k = kernels.of(st, n as usize);
        ops.push(MicroOp {
            kernel: kernels.list[k as usize].clone(),
            args,
            arity: inputs_of.len() as u8,
            dest,
        });
        marks.set_arg(rec.output, dest);
        // Registers of member values read for the last time here (the
        // broadcast registers of inputs are refilled per row: never freed).
        for (j, &v) in inputs_of.iter().enumerate() {
            if marks.last_read(v) == Some(i)
                && !inputs_of[..j].contains(&v)
                && !marks.is_read(v)
                && let Some(Arg::Reg(r)) = marks.arg(v)
            {
                regs.free.push(r as u32);
            }
        }
        if marks.last_read(rec.output).is_none()
            && let Arg::Reg(r) = dest
        {
            regs.free.push(r as u32);
        }
    }
    Ok(FusedGroup {
        dtype: plan.dtype,
        shape: plan.shape.clone(),
        rows,
        row_len,
        inputs,
        broadcast_regs,
        ops,
        outputs,
        regs: regs.count as usize,
        nodes: plan.nodes.clone(),
    })
}

/// Builds a scalar program over consecutive 0-d nodes.
pub(crate) fn scalar_program(
    st: &GraphState,
    nodes: &[u32],
    reads: &[u32],
    writes: &[u32],
    slot_of: &impl Fn(u32) -> Slot,
    marks: &mut ValueMarks,
) -> ScalarProgram {
    marks.begin();
    let dtype = st.values()[st.nodes()[nodes[0] as usize].output as usize].dtype();
    let mut regs = Registers::default();
    let reg_of =
        |marks: &ValueMarks, v: u32| marks.reg(v).expect("a member's input has a register");
    let mut inputs = Vec::with_capacity(reads.len());
    for &v in reads {
        let r = regs.take();
        marks.set_reg(v, r);
        inputs.push((slot_of(v), r));
    }
    note_last_reads(st, nodes, marks);
    for &v in writes {
        marks.mark_written(v);
    }
    let mut kernels = Kernels::default();
    let mut ops = Vec::with_capacity(nodes.len());
    for (i, &n) in nodes.iter().enumerate() {
        let rec = st.nodes()[n as usize];
        let ins = st.inputs_of(n as usize);
        let mut args = [0u32; 4];
        for (a, &v) in args.iter_mut().zip(ins) {
            *a = reg_of(marks, v);
        }
        let out = regs.take();
        let k = kernels.of(st, n as usize);
        let code = match kernels.list[k as usize].primitive() {
            Some(p) => Code::Prim(p),
            None => Code::Kernel(k),
        };
        ops.push(ScalarOp { code, args, out });
        marks.set_reg(rec.output, out);
        // Written values keep their registers until the end of the program.
        for (j, &v) in ins.iter().enumerate() {
            if marks.last_read(v) == Some(i) && !ins[..j].contains(&v) && !marks.is_written(v) {
                regs.free.push(reg_of(marks, v));
            }
        }
        if marks.last_read(rec.output).is_none() && !marks.is_written(rec.output) {
            regs.free.push(out);
        }
    }
    let outputs = writes
        .iter()
        .map(|&v| (reg_of(marks, v), slot_of(v)))
        .collect();
    // The replay indexes registers unchecked (`replay::scalar`): every one
    // named must be below the count.
    assert!(
        ops.iter()
            .all(|op: &ScalarOp| op.out < regs.count
                && op.args.iter().all(|&r| r < regs.count.max(1))),
        "a scalar program names a register past its count"
    );
    ScalarProgram {
        dtype,
        inputs,
        kernels: kernels.list,
        ops,
        outputs,
        regs: regs.count as usize,
        nodes: nodes.to_vec(),
    }
}

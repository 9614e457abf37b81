//! Running a fused group: the chunked interpreter over the rules.
//!
//! The output is walked as `rows x row_len`, a chunk of at most [`CHUNK`]
//! elements at a time (chunks never cross a row, so a repeated row such as
//! a bias is read in place). For each chunk every member runs its rule's
//! slice kernel over registers of one chunk each, so intermediate values
//! stay in L1 and only the group's outputs reach memory. Large groups are
//! split over the rayon pool by chunks; elementwise work has no order to
//! keep, so any split gives the same bits. See ARCHITECTURE.md, PERF, for
//! why an interpreter and not a JIT.

use std::cell::RefCell;

use smallvec::SmallVec;

use super::ir::{Arg, FusedGroup, Pattern};
use crate::base::error::Result;
use crate::core::Pointwise;
use crate::kernels::parallel::PARALLEL_THRESHOLD;
use crate::tensor::{DType, Element, Tensor};

/// Elements per chunk: eight f32 registers of 2 KiB stay in a 32 KiB L1.
pub(crate) const CHUNK: usize = 512;

/// The float types a fused kernel runs in.
pub(crate) trait Lanes: Element {
    fn run(k: &dyn Pointwise, ins: &[&[Self]], out: &mut [Self]);
    fn one_of(k: &dyn Pointwise, args: [Self; 4]) -> Self;
    fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [Self]) -> R) -> R;
}

thread_local! {
    static SCRATCH_F32: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static SCRATCH_F64: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

/// `Lanes` for one float type: its `Pointwise` entry points and its
/// thread's scratch buffer.
macro_rules! lanes {
    ($t:ty, $run:ident, $one:ident, $scratch:ident) => {
        impl Lanes for $t {
            #[inline(always)]
            fn run(k: &dyn Pointwise, ins: &[&[$t]], out: &mut [$t]) {
                k.$run(ins, out)
            }
            #[inline(always)]
            fn one_of(k: &dyn Pointwise, args: [$t; 4]) -> $t {
                k.$one(args)
            }
            fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [$t]) -> R) -> R {
                $scratch.with(|s| {
                    let mut s = s.borrow_mut();
                    if s.len() < len {
                        s.resize(len, 0.0);
                    }
                    f(&mut s[..len])
                })
            }
        }
    };
}

lanes!(f32, run_f32, one_f32, SCRATCH_F32);
lanes!(f64, run_f64, one_f64, SCRATCH_F64);

/// Where a group's operands live during one run.
struct Operands<T> {
    inputs: SmallVec<[*const T; 8]>,
    outputs: SmallVec<[*mut T; 8]>,
}

// SAFETY: the pointers are only dereferenced inside `run_units`, whose
// callers keep the tensors alive for the whole run and hand each task a
// disjoint range of output chunks (see `run_group`).
unsafe impl<T: Send> Send for Operands<T> {}
// SAFETY: as above; tasks only read the inputs and write disjoint chunks.
unsafe impl<T: Sync> Sync for Operands<T> {}

/// Runs `group` over `inputs`, writing its outputs into `outputs` (unique
/// tensors of the outputs' shapes, in `group.outputs` order).
pub(crate) fn run_group(
    group: &FusedGroup,
    inputs: &[&Tensor],
    outputs: &mut [Tensor],
) -> Result<()> {
    match group.dtype {
        DType::F32 => run_typed::<f32>(group, inputs, outputs),
        DType::F64 => run_typed::<f64>(group, inputs, outputs),
        other => Err(crate::Error::NotFloat {
            op: "fused kernel",
            found: other,
        }),
    }
}

fn run_typed<T: Lanes>(
    group: &FusedGroup,
    inputs: &[&Tensor],
    outputs: &mut [Tensor],
) -> Result<()> {
    let mut ops = Operands::<T> {
        inputs: SmallVec::new(),
        outputs: SmallVec::new(),
    };
    for t in inputs {
        ops.inputs.push(t.as_slice_of::<T>().as_ptr());
    }
    for t in outputs.iter_mut() {
        let slice = t
            .unique_slice_mut::<T>()
            .expect("the replay hands fused steps unique buffers");
        ops.outputs.push(slice.as_mut_ptr());
    }
    let per_row = group.row_len.div_ceil(CHUNK);
    let units = group.rows * per_row;
    let numel = group.rows * group.row_len;
    let tasks = if numel >= PARALLEL_THRESHOLD {
        rayon::current_num_threads().min(units)
    } else {
        1
    };
    if tasks <= 1 {
        run_units(group, inputs, &ops, 0..units);
    } else {
        use rayon::prelude::*;
        let ops = &ops;
        (0..tasks).into_par_iter().for_each(|t| {
            let range = units * t / tasks..units * (t + 1) / tasks;
            run_units(group, inputs, ops, range);
        });
    }
    Ok(())
}

/// Runs chunks `range` of the group (a task's share) with this thread's scratch.
fn run_units<T: Lanes>(
    group: &FusedGroup,
    inputs: &[&Tensor],
    ops: &Operands<T>,
    range: std::ops::Range<usize>,
) {
    let per_row = group.row_len.div_ceil(CHUNK);
    T::with_scratch(group.regs.max(1) * CHUNK, |scratch| {
        // Scalars once per task; per-row values when the row changes.
        for (i, &(_, p)) in group.inputs.iter().enumerate() {
            if p == Pattern::Scalar {
                let v = inputs[i].as_slice_of::<T>()[0];
                let r = group.broadcast_regs[i] as usize;
                scratch[r * CHUNK..(r + 1) * CHUNK].fill(v);
            }
        }
        // From here the scratch is used through this pointer only.
        let regs = scratch.as_mut_ptr();
        let mut row = usize::MAX;
        for u in range {
            let (r, c0) = (u / per_row, (u % per_row) * CHUNK);
            let len = CHUNK.min(group.row_len - c0);
            if r != row {
                row = r;
                for (i, &(_, p)) in group.inputs.iter().enumerate() {
                    if p == Pattern::PerRow {
                        let v = inputs[i].as_slice_of::<T>()[r];
                        let reg = group.broadcast_regs[i] as usize;
                        // SAFETY: `reg` is a register of this task's scratch,
                        // `CHUNK` elements long.
                        unsafe { std::slice::from_raw_parts_mut(regs.add(reg * CHUNK), CHUNK) }
                            .fill(v);
                    }
                }
            }
            let at = r * group.row_len + c0;
            for op in &group.ops {
                let arg = |a: Arg| -> *const T {
                    match a {
                        Arg::Input(i) => {
                            let base = ops.inputs[i as usize];
                            let off = match group.inputs[i as usize].1 {
                                Pattern::Periodic => c0,
                                _ => at,
                            };
                            // SAFETY: `off + len` is within the input: a full
                            // input has the output's length, a periodic one
                            // `row_len` elements.
                            unsafe { base.add(off) }
                        }
                        // SAFETY: a register of this task's scratch.
                        Arg::Reg(k) => unsafe { regs.add(k as usize * CHUNK) },
                        // SAFETY: `at + len` is within the output.
                        Arg::Out(o) => unsafe { ops.outputs[o as usize].add(at) },
                    }
                };
                let mut slices: [&[T]; 4] = [&[]; 4];
                for (s, &a) in slices.iter_mut().zip(&op.args[..op.arity as usize]) {
                    // SAFETY: every operand is `len` valid elements (above),
                    // alive for this call, and never the destination: the
                    // register allocator gives a member's result a register
                    // none of its operands is in, and outputs are distinct
                    // buffers nothing else holds.
                    *s = unsafe { std::slice::from_raw_parts(arg(a), len) };
                }
                let dest = arg(op.dest) as *mut T;
                // SAFETY: as above; the destination is a register of this
                // task or this task's chunk of an output.
                let dest = unsafe { std::slice::from_raw_parts_mut(dest, len) };
                T::run(&*op.kernel, &slices[..op.arity as usize], dest);
            }
        }
    })
}

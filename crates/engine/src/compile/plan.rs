//! The memory plan, made once at capture: how long each slot lives (from
//! the step that writes it, or the run's start for inputs and state, to
//! its last reader; outputs to the run's end; a value that views another's
//! storage keeps that one alive), and which buffer each value a step makes
//! goes into (fused steps write into theirs; an op or a fast backward rule
//! is lent its buffers through `tensor::planned`, see `replay.rs`). Buffers are reused by values of one dtype and length
//! whose lives do not overlap (greedy, in step order), and a run writes
//! into the same buffers every time.

use std::collections::HashMap;

use super::ir::{Binding, BufferInfo, Program, Slot, Step};
use crate::tensor::DType;

/// A slot's life in step indices: written at `def` (`None`: at the start),
/// last read at `last` (`None`: never released).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Life {
    pub(crate) def: Option<u32>,
    pub(crate) last: Option<u32>,
}

/// The steps that write and read each slot.
pub(crate) fn lives(program: &Program) -> Vec<Life> {
    let n = program.slots.len();
    let mut def = vec![None; n];
    let mut last: Vec<Option<u32>> = vec![None; n];
    let mut forever = vec![false; n];
    forever[program.root as usize] = true;
    for (_, s) in &program.grads {
        if let Some(s) = s {
            forever[*s as usize] = true;
        }
    }
    for &s in &program.outputs {
        forever[s as usize] = true;
    }
    for (s, b) in &program.bindings {
        if matches!(b, Binding::Constant(_)) {
            forever[*s as usize] = true;
        }
    }
    let mut views: Vec<(u32, Slot, Slot)> = Vec::new();
    for (i, step) in program.steps.iter().enumerate() {
        let i = i as u32;
        let (reads, writes) = step_slots(step);
        for s in reads {
            last[s as usize] = Some(i);
        }
        for &s in &writes {
            def[s as usize] = Some(i);
        }
        if let Step::Op(op) = step {
            for (k, &s) in op.inputs.iter().enumerate() {
                if op.views_input(k) {
                    views.push((i, op.out, s));
                }
            }
        }
    }
    // A view keeps its base alive: newest first, so chains of views carry.
    for &(_, view, base) in views.iter().rev() {
        if forever[view as usize] {
            forever[base as usize] = true;
        }
        last[base as usize] = last[base as usize].max(last[view as usize]);
    }
    (0..n)
        .map(|s| Life {
            def: def[s],
            last: if forever[s] { None } else { last[s].or(def[s]) },
        })
        .collect()
}

/// The slots a step reads and writes.
pub(crate) fn step_slots(step: &Step) -> (Vec<Slot>, Vec<Slot>) {
    match step {
        Step::Op(s) => (s.inputs.to_vec(), vec![s.out]),
        Step::Fast(s) => {
            let mut reads = vec![s.grad, s.output];
            reads.extend_from_slice(&s.inputs);
            (reads, s.outs.iter().flatten().copied().collect())
        }
        Step::Fused(g) => (
            g.inputs.iter().map(|&(s, _)| s).collect(),
            g.outputs.clone(),
        ),
        Step::Scalar(p) => (
            p.inputs.iter().map(|&(s, _)| s).collect(),
            p.outputs.iter().map(|&(_, s)| s).collect(),
        ),
        Step::SliceSum(s) => (s.parts.iter().map(|&(p, _)| p).collect(), vec![s.out]),
    }
}

/// Fills in the release lists and the buffers of `program`.
pub(crate) fn plan(program: &mut Program) {
    let lives = lives(program);
    let steps = program.steps.len();
    let mut release: Vec<Vec<Slot>> = vec![Vec::new(); steps];
    for (s, life) in lives.iter().enumerate() {
        if let Some(last) = life.last {
            release[last as usize].push(s as Slot);
        }
    }
    // Newest values first: a view goes before the value whose storage it
    // views, so that one is its storage's only owner when it goes back to
    // the plan.
    for slots in &mut release {
        slots
            .sort_by_key(|&s| std::cmp::Reverse(lives[s as usize].def.map_or(0, |d| d as i64 + 1)));
    }
    // Buffers for what the steps make, reused once their value is released.
    let mut free: HashMap<(DType, usize), Vec<u32>> = HashMap::new();
    let mut buffers: Vec<BufferInfo> = Vec::new();
    for i in 0..steps {
        if i > 0 {
            for &s in &release[i - 1] {
                if let Some(b) = program.slots[s as usize].buffer {
                    let info = &buffers[b as usize];
                    free.entry((info.dtype, info.numel)).or_default().push(b);
                }
            }
        }
        for s in planned_writes(program, i) {
            let slot = &mut program.slots[s as usize];
            let key = (slot.dtype, slot.shape.iter().product::<usize>());
            let b = match free.get_mut(&key).and_then(Vec::pop) {
                Some(b) => b,
                None => {
                    buffers.push(BufferInfo {
                        dtype: key.0,
                        numel: key.1,
                        occupants: Vec::new(),
                    });
                    (buffers.len() - 1) as u32
                }
            };
            buffers[b as usize].occupants.push(s);
            slot.buffer = Some(b);
        }
    }
    program.release_at = Vec::with_capacity(steps);
    program.releases = Vec::new();
    for slots in release {
        let start = program.releases.len() as u32;
        program.releases.extend(slots);
        program
            .release_at
            .push(start..program.releases.len() as u32);
    }
    program.buffers = buffers;
}

/// The slots step `i` writes that get a buffer of the plan: every value
/// with elements that the step makes, not one that views an input's
/// storage (a reshape, a transpose) and not a 0-d value (held inline).
fn planned_writes(program: &Program, i: usize) -> Vec<Slot> {
    let has_elements = |s: &Slot| {
        let info = &program.slots[*s as usize];
        !info.shape.is_empty() && info.shape.iter().all(|&d| d > 0)
    };
    match &program.steps[i] {
        Step::Fused(g) => g.outputs.clone(),
        Step::Op(op) => {
            if op.views != 0 || !has_elements(&op.out) {
                Vec::new()
            } else {
                vec![op.out]
            }
        }
        Step::Fast(f) => f
            .outs
            .iter()
            .flatten()
            .copied()
            .filter(has_elements)
            .collect(),
        Step::Scalar(_) => Vec::new(),
        Step::SliceSum(s) => vec![s.out],
    }
}

/// The bytes alive after each step under the plan (inputs and state from
/// the start), and the peak: what `explain` reports. A view's bytes are
/// its base's (which it keeps alive), so they count once.
pub(crate) fn live_bytes(program: &Program) -> (Vec<usize>, usize) {
    let lives = lives(program);
    let steps = program.steps.len();
    let mut is_view = vec![false; program.slots.len()];
    for step in &program.steps {
        if let Step::Op(op) = step
            && op.views != 0
        {
            is_view[op.out as usize] = true;
        }
    }
    let mut delta = vec![0isize; steps + 1];
    for (s, life) in lives.iter().enumerate() {
        if is_view[s] {
            continue;
        }
        let bytes = program.slots[s].bytes() as isize;
        let start = life.def.map_or(0, |d| d as usize);
        delta[start] += bytes;
        if let Some(last) = life.last {
            delta[last as usize + 1] -= bytes;
        }
    }
    let mut live = 0isize;
    let mut per_step = Vec::with_capacity(steps);
    for d in delta.iter().take(steps) {
        live += d;
        per_step.push(live as usize);
    }
    let peak = per_step.iter().copied().max().unwrap_or(0);
    (per_step, peak)
}

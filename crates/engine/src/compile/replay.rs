//! One run of a [`Program`]: bind the inputs and state, run the steps,
//! release each slot after its last reader, run the effects. Nothing is
//! recorded; every step writes into its planned buffers (a fused step
//! directly, an op or a fast backward rule through buffers lent to its
//! builds, `tensor::planned`), which come back to the plan when their
//! value dies, so a steady loop reuses the same memory every run.

use std::time::Instant;

use smallvec::SmallVec;

use super::ir::{Binding, Code, FastStep, OpStep, Program, ScalarProgram, SliceSum, Slot, Step};
use super::kernel::{self, Lanes};
use super::ready::ReadySchedule;
use crate::base::error::{Error, Result};
use crate::base::profile::PartClock;
use crate::core::graph::capture::{CaptureLog, SourceKind};
use crate::core::Primitive;
use crate::kernels::layout;
use crate::tensor::planned::{Header, Lending};
use crate::tensor::{DType, Tensor};

/// What persists between runs of one program: the slot table, the
/// planned buffers while free, and the scalar registers.
#[derive(Default)]
pub(crate) struct Replay {
    pub(crate) values: Vec<Option<Tensor>>,
    buffers: Vec<Option<Tensor>>,
    /// Per slot: the header of last run's value when it was a view, lent
    /// to the op that makes it again.
    headers: Vec<Option<Header>>,
    regs_f32: Vec<f32>,
    regs_f64: Vec<f64>,
    /// Each step's wall time, summed over runs, while profiling.
    pub(crate) clock: Option<PartClock>,
}

/// Told each requested gradient (its index in `Program::grads`; `None`:
/// nothing reached it) as soon as a run has it final.
pub(crate) type OnReady<'a> = dyn FnMut(usize, Option<&Tensor>) -> Result<()> + 'a;

/// A run's listener for final gradients, with the capture's schedule.
pub(crate) type Notify<'s, 'f> = Option<(&'s ReadySchedule, &'s mut OnReady<'f>)>;

/// A seed for this run's random ops: a mix of the run's and the op's own.
fn mix(run: u64, own: u64) -> u64 {
    let mut z = run ^ own.rotate_left(29) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Replay {
    /// Runs `program` once on `inputs`, telling `notify` each requested
    /// gradient once it is final.
    pub(crate) fn run(
        &mut self,
        program: &Program,
        log: &CaptureLog,
        inputs: &[Tensor],
        seed: u64,
        mut notify: Notify<'_, '_>,
    ) -> Result<()> {
        if self.values.len() != program.slots.len() {
            self.values = vec![None; program.slots.len()];
            self.buffers = vec![None; program.buffers.len()];
            self.headers = (0..program.slots.len()).map(|_| None).collect();
        }
        // Last run's outputs go back to their buffers first.
        let grads = program.grads.iter().filter_map(|&(_, s)| s);
        for s in std::iter::once(program.root)
            .chain(grads)
            .chain(program.outputs.iter().copied())
        {
            self.release(program, s);
        }
        for (s, binding) in &program.bindings {
            let s = *s;
            let value = match binding {
                Binding::Input(k) => inputs[*k].clone(),
                Binding::InputReshaped(k, shape) => {
                    let lending = self.lend(program, &[s]);
                    let view = inputs[*k].reshape(shape);
                    self.take_back(program, lending, &[s]);
                    view?
                }
                Binding::State(i) => read_state(log, *i, inputs),
                Binding::StateReshaped(i, shape) => {
                    let state = read_state(log, *i, inputs);
                    let lending = self.lend(program, &[s]);
                    let view = state.reshape(shape);
                    self.take_back(program, lending, &[s]);
                    view?
                }
                Binding::Constant(t) => {
                    if self.values[s as usize].is_some() {
                        continue;
                    }
                    t.clone()
                }
            };
            self.values[s as usize] = Some(value);
        }
        self.tell(program, 0, &mut notify)?;
        for (i, step) in program.steps.iter().enumerate() {
            let start = self.clock.is_some().then(Instant::now);
            match step {
                Step::Op(s) => self.op(program, s, seed)?,
                Step::Fast(s) => self.fast(program, s)?,
                Step::Fused(g) => self.fused(program, g)?,
                Step::SliceSum(ss) => self.slice_sum(program, ss)?,
                Step::Scalar(p) => match p.dtype {
                    DType::F32 => scalar::<f32>(p, &mut self.values, &mut self.regs_f32),
                    _ => scalar::<f64>(p, &mut self.values, &mut self.regs_f64),
                },
            }
            let range = program.release_at[i].clone();
            for &s in &program.releases[range.start as usize..range.end as usize] {
                self.release(program, s);
            }
            if let (Some(clock), Some(start)) = (&mut self.clock, start) {
                clock.add(i, start);
            }
            self.tell(program, i + 1, &mut notify)?;
        }
        for effect in &log.effects {
            (effect.run)()?;
        }
        Ok(())
    }

    /// Tells `notify` the gradients final at `point` of the run (0: before
    /// the first step; `i + 1`: once step `i` is done).
    fn tell(&self, program: &Program, point: usize, notify: &mut Notify<'_, '_>) -> Result<()> {
        let Some((schedule, on_ready)) = notify else {
            return Ok(());
        };
        for &k in schedule.final_at(point) {
            let slot = program.grads[k as usize].1;
            on_ready(k as usize, slot.map(|s| self.value(s)))?;
        }
        Ok(())
    }

    /// The value in slot `s`.
    pub(crate) fn value(&self, s: Slot) -> &Tensor {
        self.values[s as usize]
            .as_ref()
            .expect("the plan keeps a slot filled until its last reader")
    }

    /// Empties slot `s`; a planned buffer goes back to the plan (if
    /// nothing else holds it: a caller may keep last run's gradient).
    fn release(&mut self, program: &Program, s: Slot) {
        let Some(t) = self.values[s as usize].take() else {
            return;
        };
        match program.slots[s as usize].buffer {
            Some(b) if t.is_lendable() => self.buffers[b as usize] = Some(t),
            Some(_) => {}
            // A view (or a value nothing planned): its header, if it was
            // the only owner, for the next run's view.
            None if t.rank() > 0 => {
                if let Ok(header) = Header::keep(t) {
                    self.headers[s as usize] = Some(header);
                }
            }
            None => {}
        }
    }

    /// Lends the planned buffers of `outs` to the builds of the step about
    /// to run (`tensor::planned`): the op writes its outputs into them.
    fn lend(&mut self, program: &Program, outs: &[Slot]) -> Lending {
        let lending = Lending::start();
        for &s in outs {
            if let Some(header) = self.headers[s as usize].take() {
                lending.lend_header(header);
            }
            let Some(b) = program.slots[s as usize].buffer else {
                continue;
            };
            if let Some(t) = self.buffers[b as usize].take() {
                // One that cannot be lent (still shared) is let go.
                drop(lending.lend(t));
            }
        }
        lending
    }

    /// Takes back the lent buffers the step did not use, each into an
    /// empty planned buffer of its size among `outs`.
    fn take_back(&mut self, program: &Program, lending: Lending, outs: &[Slot]) {
        let (buffers, headers) = (&mut self.buffers, &mut self.headers);
        lending.finish(
            |t| {
                for &s in outs {
                    let Some(b) = program.slots[s as usize].buffer else {
                        continue;
                    };
                    let info = &program.buffers[b as usize];
                    let entry = &mut buffers[b as usize];
                    if entry.is_none() && info.dtype == t.dtype() && info.numel == t.numel() {
                        *entry = Some(t);
                        return;
                    }
                }
            },
            |header| {
                if let Some(&s) = outs.iter().find(|&&s| headers[s as usize].is_none()) {
                    headers[s as usize] = Some(header);
                }
            },
        );
    }

    fn op(&mut self, program: &Program, step: &OpStep, seed: u64) -> Result<()> {
        let lending = self.lend(program, std::slice::from_ref(&step.out));
        let out = {
            let inputs: SmallVec<[&Tensor; 4]> =
                step.inputs.iter().map(|&s| self.value(s)).collect();
            let op = step.op.get();
            match step.seed {
                Some(own) => op
                    .forward_seeded(&inputs, mix(seed, own))?
                    .expect("checked when the step was lowered"),
                None => op.forward(&inputs)?,
            }
        };
        self.take_back(program, lending, std::slice::from_ref(&step.out));
        check_shape(program, step.out, &out, step.op.get().name(), step.node)?;
        self.values[step.out as usize] = Some(out);
        Ok(())
    }

    fn fast(&mut self, program: &Program, step: &FastStep) -> Result<()> {
        let op = step.op.get();
        let outs: SmallVec<[Slot; 4]> = step.outs.iter().flatten().copied().collect();
        let lending = self.lend(program, &outs);
        let mut grads: SmallVec<[Option<Tensor>; 4]> = smallvec::smallvec![None; step.inputs.len()];
        let took = {
            let inputs: SmallVec<[&Tensor; 4]> =
                step.inputs.iter().map(|&s| self.value(s)).collect();
            op.backward_fast(
                self.value(step.grad),
                &inputs,
                self.value(step.output),
                &step.needs,
                &mut grads,
            )?
        };
        self.take_back(program, lending, &outs);
        if !took {
            return Err(Error::NotReplayable {
                op: op.name().to_string(),
                node: step.node as usize,
                reason: "its fast backward took the captured values but declines this run's".into(),
            });
        }
        for (k, out) in step.outs.iter().enumerate() {
            let Some(s) = *out else { continue };
            let g = match grads[k].take() {
                Some(g) => g,
                // `None` from a fast rule means zero.
                None => self.value(step.inputs[k]).zeros_like(),
            };
            check_shape(program, s, &g, op.name(), step.node)?;
            self.values[s as usize] = Some(g);
        }
        Ok(())
    }

    fn slice_sum(&mut self, program: &Program, step: &SliceSum) -> Result<()> {
        let lending = self.lend(program, std::slice::from_ref(&step.out));
        let out = {
            let parts: SmallVec<[(&Tensor, usize); 4]> = step
                .parts
                .iter()
                .map(|&(s, start)| (self.value(s), start))
                .collect();
            let shape = &program.slots[step.out as usize].shape;
            layout::slice_sum(shape, &parts, step.dim, step.step)
        };
        self.take_back(program, lending, std::slice::from_ref(&step.out));
        let out = out?;
        let node = step.nodes.last().copied().unwrap_or(0);
        check_shape(program, step.out, &out, "slice_sum", node)?;
        self.values[step.out as usize] = Some(out);
        Ok(())
    }

    fn fused(&mut self, program: &Program, group: &super::ir::FusedGroup) -> Result<()> {
        let mut outs: SmallVec<[Tensor; 8]> = SmallVec::new();
        for &s in &group.outputs {
            let info = &program.slots[s as usize];
            let planned = info.buffer.and_then(|b| self.buffers[b as usize].take());
            let reusable = |mut t: Tensor| {
                (t.dtype() == info.dtype && t.reshape_unique(&info.shape)).then_some(t)
            };
            let t = match planned.and_then(reusable) {
                Some(t) => t,
                // First run, or someone still holds last run's value: a new buffer.
                None => Tensor::zeros(&info.shape, info.dtype)?,
            };
            outs.push(t);
        }
        {
            let inputs: SmallVec<[&Tensor; 8]> =
                group.inputs.iter().map(|&(s, _)| self.value(s)).collect();
            kernel::run_group(group, &inputs, &mut outs)?;
        }
        for (&s, t) in group.outputs.iter().zip(outs) {
            self.values[s as usize] = Some(t);
        }
        Ok(())
    }
}

/// Source `i`'s value at this run.
fn read_state(log: &CaptureLog, i: usize, inputs: &[Tensor]) -> Tensor {
    match &log.sources[i].kind {
        SourceKind::State { read, .. } => read(),
        SourceKind::Input(k) => inputs[*k].clone(),
    }
}

/// A value-dependent shape cannot replay: the plan was made for the captured one.
fn check_shape(program: &Program, s: Slot, t: &Tensor, op: &str, node: u32) -> Result<()> {
    let info = &program.slots[s as usize];
    if t.shape() == info.shape.as_slice() && t.dtype() == info.dtype {
        return Ok(());
    }
    Err(Error::NotReplayable {
        op: op.to_string(),
        node: node as usize,
        reason: format!(
            "made a {} value of shape {:?} where the capture saw {} {:?}: a shape or dtype that depends on \
             values cannot replay (run this step eagerly)",
            t.dtype(),
            t.shape(),
            info.dtype,
            info.shape.as_slice()
        ),
    })
}

/// Runs a scalar program: numbers in registers, basic arithmetic inline.
fn scalar<T: Lanes>(p: &ScalarProgram, values: &mut [Option<Tensor>], regs: &mut Vec<T>) {
    if regs.len() < p.regs {
        regs.resize(p.regs, T::zero());
    }
    for &(s, r) in &p.inputs {
        let t = values[s as usize]
            .as_ref()
            .expect("bound or written before");
        regs[r as usize] = t.as_slice_of::<T>()[0];
    }
    let file = &mut regs[..p.regs];
    // SAFETY: every register a program names is below `p.regs`, checked
    // when the program was built (`fuse::scalar_program`), and `file` is
    // `p.regs` long: the loop (W1's whole replay) skips a bounds check per
    // operand.
    let reg = |file: &[T], r: u32| unsafe { *file.get_unchecked(r as usize) };
    for op in &p.ops {
        let [a, b, c, d] = op.args;
        let v = match op.code {
            Code::Prim(Primitive::Add) => reg(file, a) + reg(file, b),
            Code::Prim(Primitive::Sub) => reg(file, a) - reg(file, b),
            Code::Prim(Primitive::Mul) => reg(file, a) * reg(file, b),
            Code::Prim(Primitive::Div) => reg(file, a) / reg(file, b),
            Code::Prim(Primitive::Neg) => -reg(file, a),
            Code::Kernel(k) => T::one_of(
                &*p.kernels[k as usize],
                [reg(file, a), reg(file, b), reg(file, c), reg(file, d)],
            ),
        };
        // SAFETY: as above.
        unsafe { *file.get_unchecked_mut(op.out as usize) = v };
    }
    for &(r, s) in &p.outputs {
        values[s as usize] = Some(regs[r as usize].scalar_tensor());
    }
}

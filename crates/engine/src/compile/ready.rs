//! When each requested gradient is final during a run: every slot is
//! written once (by one step, or bound before the first), and a gradient's
//! slot holds its sum over every path, so the gradient is final the moment
//! the step that writes its slot is done. Data-parallel training hands it
//! to its bucket then, while the rest of the backward still runs
//! (`Compiled::run_notifying`, `DataParallel::run_compiled`).

use std::ops::Range;

use super::ir::{GradTarget, Program};
use super::plan::step_slots;

/// The requested gradients in the order a run makes them final.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReadySchedule {
    /// `order[at[0]]`: gradients final before the first step (nothing
    /// reached them, or they are bound, not computed); `order[at[i + 1]]`:
    /// those final once step `i` is done. Indices into `Program::grads`.
    at: Vec<Range<u32>>,
    order: Vec<u32>,
}

impl ReadySchedule {
    /// The schedule of `program`.
    pub(crate) fn of(program: &Program) -> Self {
        let mut writer = vec![None; program.slots.len()];
        for (i, step) in program.steps.iter().enumerate() {
            for s in step_slots(step).1 {
                writer[s as usize] = Some(i);
            }
        }
        // By the step after which each gradient is final (0: before any).
        let mut by_point: Vec<Vec<u32>> = vec![Vec::new(); program.steps.len() + 1];
        for (k, &(_, slot)) in program.grads.iter().enumerate() {
            let point = slot.and_then(|s| writer[s as usize]).map_or(0, |i| i + 1);
            by_point[point].push(k as u32);
        }
        let mut schedule = ReadySchedule::default();
        for ks in by_point {
            let start = schedule.order.len() as u32;
            schedule.order.extend(ks);
            schedule.at.push(start..schedule.order.len() as u32);
        }
        schedule
    }

    /// The gradients (indices into `Program::grads`) final at `point`: 0
    /// before the first step, `i + 1` once step `i` is done.
    pub(crate) fn final_at(&self, point: usize) -> &[u32] {
        let r = &self.at[point];
        &self.order[r.start as usize..r.end as usize]
    }

    /// Each requested gradient with the graph node after which a run has
    /// it final (the last node the step that writes it runs; `None`:
    /// before the first step), in the order a run makes them final.
    pub(crate) fn nodes(&self, program: &Program) -> Vec<(GradTarget, Option<u32>)> {
        (0..self.at.len())
            .flat_map(|point| {
                let node = point
                    .checked_sub(1)
                    .and_then(|i| program.steps[i].nodes().into_iter().max());
                self.final_at(point)
                    .iter()
                    .map(move |&k| (program.grads[k as usize].0, node))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::nn::{Activation, Forward, Mlp, Module};
    use crate::{compile, CompileOptions, DType, Graph, Tensor, Var};

    /// Fused or not, a run tells every requested gradient once, with the
    /// value it returns, in the order of the schedule: the last layer's
    /// first, each after a node of the backward before its last.
    #[test]
    fn gradients_are_told_once_final_in_schedule_order() {
        let model = Mlp::builder(&[3, 5, 4, 2])
            .activation(Activation::Tanh)
            .dtype(DType::F64)
            .seed(3)
            .build()
            .unwrap();
        let params = model.parameters();
        let x = Tensor::randn(&[6, 3], DType::F64, 4).unwrap();
        for fuse in [true, false] {
            let mut step = compile(
                |_: &Graph, v: &[Var<'_>]| Ok(model.forward(&v[0])?.tanh().sum()),
                CompileOptions::new().params(params.clone()).fuse(fuse),
            );
            for _ in 0..2 {
                let mut told = Vec::new();
                let out = step
                    .run_notifying(std::slice::from_ref(&x), &mut |target, g| {
                        told.push((target, g.cloned()));
                        Ok(())
                    })
                    .unwrap();
                assert_eq!(told.len(), params.len());
                for (target, g) in &told {
                    let super::GradTarget::Param(id) = *target else {
                        panic!("no input gradient was asked for")
                    };
                    let (_, p) = params.iter().find(|(_, p)| p.id() == id).unwrap();
                    // The value told is the one returned, bit for bit.
                    assert_eq!(g.as_ref().unwrap(), &out.grads().of(p), "fuse {fuse}");
                }
                let capture = step.capture().unwrap();
                let schedule = capture.gradient_schedule();
                let order: Vec<_> = told.iter().map(|(t, _)| *t).collect();
                assert_eq!(order, schedule.iter().map(|(t, _)| *t).collect::<Vec<_>>());
                let nodes: Vec<u32> = schedule.iter().map(|(_, n)| n.unwrap()).collect();
                assert!(nodes.windows(2).all(|w| w[0] <= w[1]), "{nodes:?}");
                assert!(
                    nodes[0] >= capture.forward_len() as u32,
                    "after the forward"
                );
                assert!(nodes[1] < nodes[params.len() - 1], "{nodes:?}");
                // The last layer's weight and bias come first.
                let last_layer = [params[4].1.id(), params[5].1.id()];
                for (t, _) in &schedule[..2] {
                    assert!(matches!(t, super::GradTarget::Param(id) if last_layer.contains(id)));
                }
            }
        }
    }
}

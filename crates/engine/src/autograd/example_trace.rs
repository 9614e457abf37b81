//! One example's computation, read back from the graph it was recorded in,
//! and replayed over a batch through each op's batching rule.
//!
//! The function runs once on example 0 in a scratch graph that traces
//! (every input a value of the graph, so every op on them leaves its op
//! and inputs behind, masks and index arithmetic included). What the
//! outputs depend on is then read in append order, which is a
//! topological order, and each op is recorded again in the caller's graph
//! over batched values: by its batching rule when an input carries the
//! batch, as itself when none does.

use std::collections::HashMap;

use smallvec::SmallVec;

use crate::base::error::{Error, Result};
use crate::core::graph::{Graph, GraphState, OpEntry, Var, LEAF_CONSTANT, LEAF_VARIABLE, NO_SLOT};
use crate::core::{BatchContext, Batched, Randomness};
use crate::tensor::{DType, Tensor};

/// Where one value of the example's computation comes from.
enum Source {
    /// The function's input `i`.
    Input(usize),
    /// A value that is the same for every example: a literal, or a leaf
    /// the function made itself.
    Literal(Tensor),
    /// An op over earlier values (by value id).
    Op {
        op: OpEntry,
        inputs: SmallVec<[u32; 4]>,
    },
}

/// One value of the trace, in append order.
struct Step {
    id: u32,
    source: Source,
    /// The example's shape and dtype, which the batched value's example
    /// must have: a rule that gives anything else is reported, not used.
    shape: Vec<usize>,
    dtype: DType,
}

/// The recorded computation of one example, from the function's inputs to
/// its outputs.
pub(crate) struct ExampleTrace {
    steps: Vec<Step>,
    /// Each output's value id, or its value when it has no slot (a literal
    /// the function returned as it is).
    outputs: Vec<std::result::Result<u32, Tensor>>,
}

impl ExampleTrace {
    /// Reads what `outputs` depend on from `graph`, whose value ids
    /// `inputs` are the function's inputs, in order.
    pub(crate) fn read(graph: &Graph, inputs: &[u32], outputs: &[Var<'_>]) -> Result<Self> {
        let st = graph.state();
        let input_of: HashMap<u32, usize> =
            inputs.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        let mut needed = vec![false; st.values().len()];
        let mut stack: Vec<u32> = outputs
            .iter()
            .map(Var::slot)
            .filter(|&s| s != NO_SLOT)
            .collect();
        while let Some(id) = stack.pop() {
            if std::mem::replace(&mut needed[id as usize], true) || input_of.contains_key(&id) {
                continue;
            }
            stack.extend(op_inputs(&st, id).into_iter().flat_map(|(_, ids)| ids));
        }
        let steps = (0..needed.len() as u32)
            .filter(|&id| needed[id as usize])
            .map(|id| {
                let value = &st.values()[id as usize];
                let source = if let Some(&i) = input_of.get(&id) {
                    Source::Input(i)
                } else if let Some((op, inputs)) = op_inputs(&st, id) {
                    Source::Op { op, inputs }
                } else {
                    Source::Literal(value.clone())
                };
                Step {
                    id,
                    source,
                    shape: value.shape().to_vec(),
                    dtype: value.dtype(),
                }
            })
            .collect();
        let outputs = outputs
            .iter()
            .map(|v| match v.slot() {
                NO_SLOT => Err(v.value().clone()),
                id => Ok(id),
            })
            .collect();
        Ok(ExampleTrace { steps, outputs })
    }

    /// The computation over a batch: `inputs` (one per function input,
    /// batched or shared) in `graph`; one batched or shared value per
    /// output.
    pub(crate) fn replay<'g>(
        &self,
        graph: &'g Graph,
        inputs: &[Batched<'g>],
        ctx: &BatchContext,
    ) -> Result<Vec<Batched<'g>>> {
        let mut values: HashMap<u32, Batched<'g>> = HashMap::with_capacity(self.steps.len());
        for step in &self.steps {
            let value = match &step.source {
                Source::Input(i) => inputs[*i].clone(),
                Source::Literal(t) => Batched::shared(graph.constant(t.clone())),
                Source::Op { op, inputs: ids } => {
                    let args: Vec<Batched<'g>> = ids.iter().map(|id| values[id].clone()).collect();
                    replay_op(graph, op, &args, ctx, step)?
                }
            };
            values.insert(step.id, value);
        }
        Ok(self
            .outputs
            .iter()
            .map(|out| match out {
                Ok(id) => values[id].clone(),
                Err(t) => Batched::shared(graph.constant(t.clone())),
            })
            .collect())
    }
}

/// The op that computed value `id` and its inputs' ids: its node's, or
/// the traced constant's; `None` for a leaf.
fn op_inputs(st: &GraphState, id: u32) -> Option<(OpEntry, SmallVec<[u32; 4]>)> {
    match st.producers()[id as usize] {
        LEAF_VARIABLE => None,
        LEAF_CONSTANT => st
            .traced_of(id)
            .map(|t| (st.op_entry(t.op).clone(), t.inputs.clone())),
        node => {
            let n = node as usize;
            let op = st.op_entry(st.nodes()[n].op).clone();
            Some((op, st.inputs_of(n).iter().copied().collect()))
        }
    }
}

/// One op of the trace over the batch: as itself when no input carries
/// the batch, by its batching rule otherwise; the result checked against
/// the example's shape and dtype.
fn replay_op<'g>(
    graph: &'g Graph,
    op: &OpEntry,
    args: &[Batched<'g>],
    ctx: &BatchContext,
    step: &Step,
) -> Result<Batched<'g>> {
    let dynamic = op_of(op);
    if dynamic.seed().is_some() && ctx.randomness == Randomness::Error {
        return Err(Error::invalid(
            "vmap",
            format!(
                "`{}` draws random numbers: say whether examples share them with \
                 randomness Same or Different (the default, Error, refuses)",
                dynamic.name()
            ),
        ));
    }
    if !args.iter().any(|a| a.batched) {
        let refs: Vec<&Var<'g>> = args.iter().map(|a| &a.value).collect();
        return Ok(Batched::shared(graph.record_entry(op, &refs)?));
    }
    let out = dynamic.batch(args, ctx)?;
    let shape = out.value.shape();
    let fits = out.example_shape() == step.shape.as_slice()
        && (!out.batched || shape[0] == ctx.size)
        && out.value.dtype() == step.dtype;
    if !fits {
        return Err(Error::invalid(
            "vmap",
            format!(
                "the batching rule of `{}` gave {:?} {:?} (batched: {}) for a batch of {} \
                 examples of {:?} {:?}",
                dynamic.name(),
                out.value.dtype(),
                shape,
                out.batched,
                ctx.size,
                step.dtype,
                step.shape
            ),
        ));
    }
    Ok(out)
}

/// The op of a table entry.
fn op_of(entry: &OpEntry) -> &dyn crate::Differentiable {
    match entry {
        OpEntry::Static(op) => *op,
        OpEntry::Owned { op, .. } => &**op,
    }
}

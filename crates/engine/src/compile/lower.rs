//! Lowering: the joint graph of a capture becomes a [`Program`].
//!
//! 1. Dead code: only nodes that some output (the loss, a requested
//!    gradient) depends on are kept; gradients nobody asked for (the data
//!    inputs') go.
//! 2. Fast rules: a non-elementwise forward node whose op has a
//!    `backward_fast` runs it in place of the nodes its `Var` formula
//!    recorded (the first-order sweep's own path, so the same bits).
//! 3. Slice sums (`slice_sum.rs`): `add`s of the gradients of disjoint
//!    slices of one value become one step writing each into its slice.
//! 4. Fusion (`fuse.rs`): elementwise nodes of one shape become one pass
//!    over memory; consecutive 0-d elementwise nodes a flat scalar program.
//! 5. Slots and liveness: a slot per value that crosses steps, released
//!    after its last use; the memory plan (`plan.rs`) gives every value a
//!    step makes (not views, not 0-d values) its buffer.

use smallvec::SmallVec;

use super::capture::Captured;
use super::fuse::{self, Unit};
use super::ir::{
    BackwardGroup, Binding, FastRule, FastStep, OpStep, Program, SliceSum, Slot, SlotInfo, Step,
};
use super::plan;
use super::slice_sum::{self, SliceSumPlan};
use super::value_marks::ValueMarks;
use crate::autograd::backward::OpHolder;
use crate::base::error::{Error, Result};
use crate::core::graph::capture::SourceKind;
use crate::core::graph::{GraphState, LEAF_CONSTANT, LEAF_VARIABLE};
use crate::tensor::Dims;

/// A slot number not given yet.
const NO: Slot = Slot::MAX;

/// Lowers a capture; `fuse` off keeps every node a step of its own.
pub(crate) fn lower(cap: &Captured, fuse: bool) -> Result<Program> {
    let st = cap.graph.state();
    let live = live_nodes(&st, cap);
    let (mut covered, fast) = fast_rules(&st, cap, &live)?;
    let sums = if fuse {
        slice_sum::slice_sums(&st, &live, &mut covered, &readers(&st, cap, &live))
    } else {
        Vec::new()
    };
    let units = fuse::units(&st, &live, &covered, &fast, &sums, fuse);
    let producer_unit = producer_units(&st, &units, &fast, &sums);
    let outputs = program_outputs(cap);
    // Each unit's external inputs and the values it must write to slots.
    let mut reads: Vec<Vec<u32>> = Vec::with_capacity(units.len());
    let mut used_elsewhere = vec![false; st.values().len()];
    for &v in &outputs {
        used_elsewhere[v as usize] = true;
    }
    // The last unit that listed each value: a unit's reads without a
    // search per read (a scalar program of W1 reads thousands of values).
    let mut listed_by = vec![NO; st.values().len()];
    for (u, unit) in units.iter().enumerate() {
        let mut external: Vec<u32> = Vec::new();
        for v in unit_inputs(&st, unit, &fast, &sums) {
            if producer_unit[v as usize] != u as u32 && listed_by[v as usize] != u as u32 {
                listed_by[v as usize] = u as u32;
                external.push(v);
                used_elsewhere[v as usize] = true;
            }
        }
        reads.push(external);
    }
    let mut slot_of = vec![NO; st.values().len()];
    let mut slots: Vec<SlotInfo> = Vec::new();
    let mut slot = |v: u32, slots: &mut Vec<SlotInfo>| -> Slot {
        if slot_of[v as usize] == NO {
            let t = &st.values()[v as usize];
            slot_of[v as usize] = slots.len() as Slot;
            slots.push(SlotInfo {
                value: v,
                shape: Dims::from_slice(t.shape()),
                dtype: t.dtype(),
                buffer: None,
            });
        }
        slot_of[v as usize]
    };
    for external in &reads {
        for &v in external {
            slot(v, &mut slots);
        }
    }
    for &v in &outputs {
        slot(v, &mut slots);
    }
    let mut writes: Vec<Vec<u32>> = vec![Vec::new(); units.len()];
    for (v, &u) in producer_unit.iter().enumerate() {
        if u != NO && used_elsewhere[v] {
            writes[u as usize].push(v as u32);
            slot(v as u32, &mut slots);
        }
    }
    let slot_of = |v: u32| slot_of[v as usize];
    for unit in &units {
        refuse_held_data(&st, unit, &fast)?;
    }
    let mut steps = Vec::with_capacity(units.len());
    let mut marks = ValueMarks::new(st.values().len());
    for (u, unit) in units.iter().enumerate() {
        steps.push(match unit {
            Unit::Node(n) => Step::Op(op_step(&st, cap, *n, &slot_of)?),
            Unit::Fast(i) => Step::Fast(fast_step(&st, &fast[*i], &slot_of)),
            Unit::Group(g) => Step::Fused(fuse::fused_group(
                &st, g, &reads[u], &writes[u], &slot_of, &mut marks,
            )?),
            Unit::Scalar(nodes) => Step::Scalar(fuse::scalar_program(
                &st, nodes, &reads[u], &writes[u], &slot_of, &mut marks,
            )),
            Unit::SliceSum(i) => {
                let plan = &sums[*i];
                Step::SliceSum(SliceSum {
                    dim: plan.dim,
                    step: plan.step,
                    parts: plan
                        .parts
                        .iter()
                        .map(|&(v, start)| (slot_of(v), start))
                        .collect(),
                    out: slot_of(st.nodes()[plan.root as usize].output),
                    nodes: plan.nodes.clone(),
                })
            }
        });
    }
    number_random_ops(&mut steps);
    let bindings = bind(cap, &st, &slots)?;
    let root = slot_of(cap.root);
    let grads = cap
        .grads
        .iter()
        .map(|&(t, v)| (t, v.map(slot_of)))
        .collect();
    let named_outputs = cap.log.outputs.iter().map(|o| slot_of(o.value)).collect();
    let dead_nodes = live.iter().filter(|&&l| !l).count();
    let parallel = slots
        .iter()
        .any(|s| s.shape.iter().product::<usize>() >= crate::kernels::parallel::PARALLEL_THRESHOLD);
    let mut program = Program {
        steps,
        release_at: Vec::new(),
        releases: Vec::new(),
        slots,
        bindings,
        root,
        grads,
        outputs: named_outputs,
        buffers: Vec::new(),
        dead_nodes,
        parallel,
    };
    plan::plan(&mut program);
    Ok(program)
}

/// A unit that would run an op holding data besides its inputs (or not
/// saying what it holds) cannot replay: it would reuse the captured run's
/// data. An op step runs the op without its saved values; a fast rule runs
/// the forward node's op; fused and scalar units run their nodes' kernels.
fn refuse_held_data(st: &GraphState, unit: &Unit, fast: &[FastRule]) -> Result<()> {
    let refuse = |n: u32, fresh: bool| -> Result<()> {
        let recorded = st.op(st.nodes()[n as usize].op);
        let replayed = fresh.then(|| recorded.without_saved()).flatten();
        let op: &dyn crate::Differentiable = match &replayed {
            Some(f) => &**f,
            None => recorded,
        };
        match op.holds().refusal() {
            None => Ok(()),
            Some(reason) => Err(Error::NotReplayable {
                op: op.name().to_string(),
                node: n as usize,
                reason,
            }),
        }
    };
    match unit {
        Unit::Node(n) => refuse(*n, true),
        Unit::Fast(i) => refuse(fast[*i].group.node, false),
        Unit::Group(g) => g.nodes.iter().try_for_each(|&n| refuse(n, false)),
        Unit::Scalar(nodes) => nodes.iter().try_for_each(|&n| refuse(n, false)),
        // Runs its own kernel, which holds nothing.
        Unit::SliceSum(_) => Ok(()),
    }
}

/// Replaces each random op's own seed (drawn when the function ran, so
/// it depends on where the model's random streams were) by its place
/// among the step's random ops, in graph order: a run's masks then depend
/// on the step's seed, the run's count and the graph only, so a resumed
/// loop draws the uninterrupted one's. Ops that shared a seed (a forward
/// and its backward, which must draw one mask) share the place.
fn number_random_ops(steps: &mut [Step]) {
    let mut seen: Vec<u64> = Vec::new();
    for step in steps {
        let Step::Op(op) = step else { continue };
        let Some(own) = op.seed else { continue };
        let place = match seen.iter().position(|&s| s == own) {
            Some(i) => i,
            None => {
                seen.push(own);
                seen.len() - 1
            }
        };
        op.seed = Some(place as u64);
    }
}

/// Which nodes some output depends on.
fn live_nodes(st: &GraphState, cap: &Captured) -> Vec<bool> {
    let mut live_value = vec![false; st.values().len()];
    for v in program_outputs(cap) {
        live_value[v as usize] = true;
    }
    let mut live = vec![false; st.nodes().len()];
    for n in (0..st.nodes().len()).rev() {
        if live_value[st.nodes()[n].output as usize] {
            live[n] = true;
            for &i in st.inputs_of(n) {
                live_value[i as usize] = true;
            }
        }
    }
    live
}

/// The values a run hands out: the loss, the gradients, the named outputs
/// and state updates.
fn program_outputs(cap: &Captured) -> Vec<u32> {
    let mut out = vec![cap.root];
    out.extend(cap.grads.iter().filter_map(|&(_, v)| v));
    out.extend(cap.log.outputs.iter().map(|o| o.value));
    out
}

/// Picks the groups that run as fast rules; marks the nodes they cover.
fn fast_rules(
    st: &GraphState,
    cap: &Captured,
    live: &[bool],
) -> Result<(Vec<bool>, Vec<FastRule>)> {
    let nodes = st.nodes().len();
    let mut covered = vec![false; nodes];
    // The group each recorded node belongs to, to see values leave a group.
    let mut group_of = vec![u32::MAX; nodes];
    for (i, g) in cap.groups.iter().enumerate() {
        for n in g.nodes.clone() {
            group_of[n as usize] = i as u32;
        }
    }
    let is_output: std::collections::HashSet<u32> = program_outputs(cap).into_iter().collect();
    let mut leaky = vec![false; cap.groups.len()];
    for m in 0..nodes {
        if !live[m] {
            continue;
        }
        for &v in st.inputs_of(m) {
            let p = st.producers()[v as usize];
            if p >= LEAF_CONSTANT || group_of[p as usize] == u32::MAX {
                continue;
            }
            let gi = group_of[p as usize] as usize;
            if group_of[m] != gi as u32 && !cap.groups[gi].grads.contains(&Some(v)) {
                leaky[gi] = true;
            }
        }
    }
    let mut fast = Vec::new();
    for (gi, g) in cap.groups.iter().enumerate() {
        let op = st.op(st.nodes()[g.node as usize].op);
        // A seeded op's fast rule would redraw the captured mask: its
        // recorded formula replays with the run's seed instead.
        if g.nodes.is_empty() || leaky[gi] || op.pointwise().is_some() || op.seed().is_some() {
            continue;
        }
        let produced_inside = |v: u32| {
            let p = st.producers()[v as usize];
            p < LEAF_CONSTANT && g.nodes.contains(&p)
        };
        let live_outs: SmallVec<[Option<u32>; 4]> = g
            .grads
            .iter()
            .map(|&o| {
                o.filter(|&v| produced_inside(v) && live[st.producers()[v as usize] as usize])
            })
            .collect();
        if live_outs.iter().all(Option::is_none)
            || g.grads.iter().zip(&live_outs).any(|(o, l)| {
                // A live gradient the fast rule would not produce.
                o.is_some_and(|v| l.is_none() && is_live_value(st, live, v))
            })
            || g.nodes.clone().any(|n| {
                live[n as usize]
                    && is_output.contains(&st.nodes()[n as usize].output)
                    && !g.grads.contains(&Some(st.nodes()[n as usize].output))
            })
        {
            continue;
        }
        if !accepts_fast(g, &live_outs) {
            continue;
        }
        for n in g.nodes.clone() {
            covered[n as usize] = true;
        }
        fast.push(FastRule {
            group: g.clone(),
            live_outs,
        });
    }
    Ok((covered, fast))
}

fn is_live_value(st: &GraphState, live: &[bool], v: u32) -> bool {
    let p = st.producers()[v as usize];
    p < LEAF_CONSTANT && live[p as usize]
}

/// Whether the op's fast rule took the captured values for exactly these
/// gradients (tried at capture, while the values were whole: a decline is
/// a property of shapes and options, so it holds at every run). Asked for
/// other gradients than it was tried with, the formula's nodes run.
fn accepts_fast(g: &BackwardGroup, outs: &[Option<u32>]) -> bool {
    g.fast.as_ref().is_some_and(|check| {
        check.accepted
            && check.needs.len() == outs.len()
            && check.needs.iter().zip(outs).all(|(&n, o)| n == o.is_some())
    })
}

/// How many times each value is read: by a live node, or as an output
/// of the run.
fn readers(st: &GraphState, cap: &Captured, live: &[bool]) -> Vec<u32> {
    let mut count = vec![0u32; st.values().len()];
    for n in (0..st.nodes().len()).filter(|&n| live[n]) {
        for &v in st.inputs_of(n) {
            count[v as usize] += 1;
        }
    }
    for v in program_outputs(cap) {
        count[v as usize] += 1;
    }
    count
}

/// The unit that writes each value (`NO` for leaves and unrun nodes).
fn producer_units(
    st: &GraphState,
    units: &[Unit],
    fast: &[FastRule],
    sums: &[SliceSumPlan],
) -> Vec<u32> {
    let mut unit_of = vec![NO; st.values().len()];
    for (u, unit) in units.iter().enumerate() {
        let mut mark = |v: u32| unit_of[v as usize] = u as u32;
        match unit {
            Unit::Node(n) => mark(st.nodes()[*n as usize].output),
            Unit::Fast(i) => fast[*i].live_outs.iter().flatten().for_each(|&v| mark(v)),
            Unit::Group(g) => g
                .nodes
                .iter()
                .for_each(|&n| mark(st.nodes()[n as usize].output)),
            Unit::Scalar(nodes) => nodes
                .iter()
                .for_each(|&n| mark(st.nodes()[n as usize].output)),
            Unit::SliceSum(i) => mark(st.nodes()[sums[*i].root as usize].output),
        }
    }
    unit_of
}

/// Every value a unit reads (its members' inputs, for a group).
fn unit_inputs(st: &GraphState, unit: &Unit, fast: &[FastRule], sums: &[SliceSumPlan]) -> Vec<u32> {
    let of_nodes = |nodes: &[u32]| -> Vec<u32> {
        nodes
            .iter()
            .flat_map(|&n| st.inputs_of(n as usize).to_vec())
            .collect()
    };
    match unit {
        Unit::Node(n) => st.inputs_of(*n as usize).to_vec(),
        Unit::Fast(i) => {
            let g = &fast[*i].group;
            let mut v = vec![g.grad];
            v.extend_from_slice(st.inputs_of(g.node as usize));
            v.push(st.nodes()[g.node as usize].output);
            v
        }
        Unit::Group(g) => of_nodes(&g.nodes),
        Unit::Scalar(nodes) => of_nodes(nodes),
        Unit::SliceSum(i) => sums[*i].parts.iter().map(|&(v, _)| v).collect(),
    }
}

fn op_step(
    st: &GraphState,
    cap: &Captured,
    n: u32,
    slot_of: &impl Fn(u32) -> Slot,
) -> Result<OpStep> {
    let rec = st.nodes()[n as usize];
    // A node replays on new values: values its op saved at capture go.
    let op = match st.op(rec.op).without_saved() {
        Some(fresh) => OpHolder::Shared(fresh),
        None => OpHolder::of(st.op_entry(rec.op)),
    };
    let seed = op.get().seed();
    if seed.is_some() {
        // Probed at capture, on the captured values (`passing.rs`).
        if cap.refuses_seed.contains(&n) {
            return Err(Error::NotReplayable {
                op: op.get().name().to_string(),
                node: n as usize,
                reason: "draws random numbers from a seed fixed at capture and cannot take a fresh one; \
                         every run would repeat the same mask (run this step eagerly)"
                    .into(),
            });
        }
    }
    Ok(OpStep {
        node: n,
        inputs: st
            .inputs_of(n as usize)
            .iter()
            .map(|&v| slot_of(v))
            .collect(),
        out: slot_of(rec.output),
        views: cap.views.get(n as usize).copied().unwrap_or(0),
        op,
        seed,
    })
}

fn fast_step(st: &GraphState, f: &FastRule, slot_of: &impl Fn(u32) -> Slot) -> FastStep {
    let g = &f.group;
    let rec = st.nodes()[g.node as usize];
    FastStep {
        node: g.node,
        op: OpHolder::of(st.op_entry(rec.op)),
        grad: slot_of(g.grad),
        inputs: st
            .inputs_of(g.node as usize)
            .iter()
            .map(|&v| slot_of(v))
            .collect(),
        output: slot_of(rec.output),
        needs: f.live_outs.iter().map(Option::is_some).collect(),
        outs: f.live_outs.iter().map(|o| o.map(slot_of)).collect(),
        covers: g.nodes.clone(),
    }
}

/// Where each leaf slot's value comes from at every run.
fn bind(cap: &Captured, st: &GraphState, slots: &[SlotInfo]) -> Result<Vec<(Slot, Binding)>> {
    let mut bindings = Vec::new();
    for (s, info) in slots.iter().enumerate() {
        let v = info.value;
        let producer = st.producers()[v as usize];
        if producer != LEAF_CONSTANT && producer != LEAF_VARIABLE {
            continue;
        }
        let tensor = &st.values()[v as usize];
        let binding = match cap.source_of(v, tensor) {
            None => Binding::Constant(tensor.clone()),
            Some(i) => {
                let source = &cap.log.sources[i];
                let same = source.tensor.shape() == tensor.shape()
                    && source.tensor.strides() == tensor.strides()
                    && source.tensor.storage_offset() == tensor.storage_offset();
                let reshaped = source.tensor.is_contiguous()
                    && tensor.is_contiguous()
                    && source.tensor.numel() == tensor.numel();
                let shape = || Dims::from_slice(tensor.shape());
                match &source.kind {
                    SourceKind::Input(k) if same => Binding::Input(*k),
                    SourceKind::Input(k) if reshaped => Binding::InputReshaped(*k, shape()),
                    SourceKind::State { .. } if same => Binding::State(i),
                    SourceKind::State { .. } if reshaped => Binding::StateReshaped(i, shape()),
                    _ => {
                        return Err(Error::NotReplayable {
                            op: source.name.clone(),
                            node: 0,
                            reason: format!(
                                "the function used a part or view of it (shape {:?} of {:?}) made outside the graph; \
                                 use it through the graph's ops instead",
                                tensor.shape(),
                                source.tensor.shape()
                            ),
                        })
                    }
                }
            }
        };
        bindings.push((s as Slot, binding));
    }
    Ok(bindings)
}

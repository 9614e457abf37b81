//! Capture: the function runs once on a fresh graph with its inputs as
//! traced leaves, then its backward is recorded into the same graph as
//! ordinary nodes (the joint forward-backward graph, as AOTAutograd
//! builds it): each forward node's own `Var` formula, recording, in the
//! order the first-order sweep would run them.
//!
//! Every forward node's formula is noted as a [`BackwardGroup`] (the nodes
//! it recorded and the gradient value it returned per input), so lowering
//! can run the op's fast rule (`backward_fast`) in their place.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use smallvec::SmallVec;

use super::ir::{BackwardGroup, GradTarget};
use super::passing::{check_fast, Passing};
use crate::autograd::backward::seed_for;
use crate::base::error::{Error, Result};
use crate::core::graph::capture::CaptureLog;
use crate::core::graph::{Graph, Var, LEAF_CONSTANT, NO_SLOT};
use crate::tensor::Tensor;

/// Hashes op ids (`u32`) with one multiply instead of SipHash: a capture
/// looks up an op's entry once per recorded node. (Per-value lookups use
/// `value_marks.rs`'s arrays instead, which keep consecutive ids close.)
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u32(b as u32);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0.rotate_left(5) ^ n as u64).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

/// A map keyed by ids that hash as one `u32` (op ids).
type IdKeyed<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// A captured step: the joint graph and what lowering needs to know of it.
pub(crate) struct Captured {
    pub(crate) graph: Graph,
    /// The value of the function's result (the loss).
    pub(crate) root: u32,
    /// The nodes of the forward pass: `0..forward_nodes`.
    pub(crate) forward_nodes: u32,
    /// The value holding each requested gradient (`None`: nothing reached it).
    pub(crate) grads: Vec<(GradTarget, Option<u32>)>,
    pub(crate) groups: Vec<BackwardGroup>,
    pub(crate) log: CaptureLog,
    /// Per node: bit `k` set when its output views input `k`'s storage,
    /// noted before the values were kept as shapes (`passing.rs`).
    pub(crate) views: Vec<u64>,
    /// Random ops that cannot take a fresh seed.
    pub(crate) refuses_seed: Vec<u32>,
}

/// What gradients the step asks for.
pub(crate) struct Wanted<'a> {
    /// Parameter ids; `None`: every parameter the function brought in.
    pub(crate) params: Option<&'a [u64]>,
    pub(crate) inputs: &'a [usize],
}

/// Runs `f` on `inputs` in a capturing graph and records its backward.
pub(crate) fn capture<F>(f: &F, inputs: &[Tensor], wanted: &Wanted<'_>) -> Result<Captured>
where
    F: for<'g> Fn(&'g Graph, &[Var<'g>]) -> Result<Var<'g>>,
{
    let graph = Graph::new();
    graph.begin_capture();
    let traced = trace(&graph, f, inputs, wanted);
    let log = graph.end_capture();
    let (root, forward_nodes, grads, groups, passing) = traced?;
    Ok(Captured {
        graph,
        root,
        forward_nodes,
        grads,
        groups,
        log,
        views: passing.views,
        refuses_seed: passing.refuses_seed,
    })
}

type Traced = (
    u32,
    u32,
    Vec<(GradTarget, Option<u32>)>,
    Vec<BackwardGroup>,
    Passing,
);

fn trace<F>(graph: &Graph, f: &F, inputs: &[Tensor], wanted: &Wanted<'_>) -> Result<Traced>
where
    F: for<'g> Fn(&'g Graph, &[Var<'g>]) -> Result<Var<'g>>,
{
    for &k in wanted.inputs {
        match inputs.get(k) {
            Some(t) if t.is_float() => {}
            Some(t) => {
                return Err(Error::NotDifferentiable {
                    op: "compile (grad_inputs)",
                    dtype: t.dtype(),
                })
            }
            None => {
                return Err(Error::CompiledInputs {
                    detail: format!(
                        "grad_inputs names input {k}, but the step has {} inputs",
                        inputs.len()
                    ),
                })
            }
        }
    }
    let vars: Vec<Var<'_>> = inputs
        .iter()
        .enumerate()
        .map(|(k, t)| graph.capture_input(k, t.clone(), format!("input{k}")))
        .collect();
    let root = f(graph, &vars)?.ensure_slot();
    let forward_nodes = graph.len() as u32;
    if root.value().numel() != 1 {
        return Err(Error::NotReplayable {
            op: "compile".into(),
            node: 0,
            reason: format!(
                "the function must return a one-element value (a loss), got shape {:?}",
                root.shape()
            ),
        });
    }
    let mut targets: Vec<(GradTarget, u32)> = wanted
        .inputs
        .iter()
        .map(|&k| (GradTarget::Input(k), vars[k].slot()))
        .collect();
    {
        let st = graph.state();
        match wanted.params {
            Some(ids) => {
                for &id in ids {
                    // A parameter the function did not use has no leaf: its gradient is zero.
                    let leaf = st.params().get(&id).copied().unwrap_or(NO_SLOT);
                    targets.push((GradTarget::Param(id), leaf));
                }
            }
            None => {
                let mut used: Vec<(u64, u32)> = st.params().iter().map(|(&p, &v)| (p, v)).collect();
                used.sort_unstable_by_key(|&(_, v)| v);
                targets.extend(used.into_iter().map(|(p, v)| (GradTarget::Param(p), v)));
            }
        }
    }
    let wanted_leaves: Vec<u32> = targets.iter().map(|&(_, leaf)| leaf).collect();
    let (acc, groups, passing) = joint_backward(graph, &root, &wanted_leaves)?;
    let grads = targets
        .into_iter()
        .map(|(t, leaf)| {
            let g = (leaf != NO_SLOT)
                .then(|| acc.get(leaf as usize).cloned().flatten())
                .flatten();
            (t, g.map(|v| v.slot()))
        })
        .collect();
    drop(vars);
    Ok((root.slot(), forward_nodes, grads, groups, passing))
}

/// Which values of the forward depend on a wanted leaf: the inputs whose
/// gradients lowering keeps.
fn depends_on_wanted(graph: &Graph, wanted_leaves: &[u32]) -> Vec<bool> {
    let st = graph.state();
    let mut depends = vec![false; st.values().len()];
    for &leaf in wanted_leaves {
        if let Some(d) = depends.get_mut(leaf as usize) {
            *d = true;
        }
    }
    for n in 0..st.nodes().len() {
        if st.inputs_of(n).iter().any(|&i| depends[i as usize]) {
            depends[st.nodes()[n].output as usize] = true;
        }
    }
    depends
}

/// Records the backward of every node under `root`, newest first (the
/// order of the first-order sweep, so gradients accumulate in its order):
/// returns each value's accumulated gradient and the formula groups.
fn joint_backward<'g>(
    graph: &'g Graph,
    root: &Var<'g>,
    wanted_leaves: &[u32],
) -> Result<(Vec<Option<Var<'g>>>, Vec<BackwardGroup>, Passing)> {
    let depends = depends_on_wanted(graph, wanted_leaves);
    let mut passing = Passing::default();
    passing.note(graph)?;
    // The seed is a traced leaf (bound as a constant by lowering), so that
    // every formula records nodes: a formula of constants alone would be
    // folded at capture, and one that draws a mask (dropout's) must run at
    // every replay.
    let seed = graph.variable(seed_for(root, None)?);
    let mut acc: Vec<Option<Var<'g>>> = vec![None; graph.value_count()];
    passing.hold(seed.slot());
    acc[root.slot() as usize] = Some(seed);
    let mut groups = Vec::new();
    let Some(top) = root.node_index() else {
        return Ok((acc, groups, passing));
    };
    // Each op's `grad_op` once: its nodes share one entry's op.
    let mut grad_ops = IdKeyed::default();
    let anomaly = graph.anomaly_detection();
    graph.set_anomaly_detection(false);
    let result = (|| {
        for n in (0..=top).rev() {
            let call = crate::autograd::backward::node_call(graph, n);
            let out = call.output.slot() as usize;
            let first_new = graph.value_count() as u32;
            let Some(g) = acc[out].take() else {
                drop(call);
                passing.pass(graph, out as u32, first_new);
                continue;
            };
            passing.unhold(g.slot());
            let inputs: SmallVec<[Var<'g>; 4]> = call
                .inputs
                .iter()
                .zip(&call.input_ids)
                .map(|(v, &id)| {
                    let traced = graph.state().producers()[id as usize] != LEAF_CONSTANT;
                    Var::from_parts(graph, v.value().clone(), id, traced)
                })
                .collect();
            let op = call.op.get();
            let start = graph.len() as u32;
            // A unary elementwise op's backward is one node of its fused
            // gradient (the eager sweep's kernel), not its formula's nodes.
            let op_id = graph.state().nodes()[n].op;
            let grad_op = grad_ops
                .entry(op_id)
                .or_insert_with(|| op.grad_op())
                .clone();
            let grads = match grad_op {
                Some(k) if inputs.len() == 1 => {
                    let u = if k.of_output {
                        &call.output
                    } else {
                        &inputs[0]
                    };
                    smallvec::smallvec![Some(graph.record_shared(None, k.op, &[&g, u])?)]
                }
                _ => op.backward(&g, &inputs, &call.output)?,
            };
            if grads.len() != inputs.len() {
                return Err(Error::BadGradient {
                    op: op.name().to_string(),
                    detail: format!("{} gradients for {} inputs", grads.len(), inputs.len()),
                });
            }
            let end = graph.len() as u32;
            let mut returned = SmallVec::new();
            let mut contributions = SmallVec::<[(usize, Var<'g>); 4]>::new();
            for ((g_in, input), &id) in grads.into_iter().zip(&inputs).zip(&call.input_ids) {
                let kept = g_in.filter(|_| input.requires_grad() && input.value().is_float());
                let Some(g_in) = kept else {
                    returned.push(None);
                    continue;
                };
                if !g_in.value().same_shape(input.value()) || g_in.dtype() != input.dtype() {
                    return Err(Error::BadGradient {
                        op: op.name().to_string(),
                        detail: format!(
                            "a gradient of shape {:?} for an input of shape {:?}",
                            g_in.shape(),
                            input.shape()
                        ),
                    });
                }
                let g_in = g_in.ensure_slot();
                returned.push(Some(g_in.slot()));
                contributions.push((id as usize, g_in));
            }
            // A candidate for a fast rule (lowering's test) is tried now,
            // while the values are whole.
            let candidate = start < end && op.pointwise().is_none() && op.seed().is_none();
            let fast = if candidate {
                let produced_inside = |v: u32| {
                    let p = graph.state().producers()[v as usize];
                    p < LEAF_CONSTANT && (start..end).contains(&p)
                };
                let needs: SmallVec<[bool; 4]> = returned
                    .iter()
                    .zip(&call.input_ids)
                    .map(|(r, &id): (&Option<u32>, &u32)| {
                        r.is_some_and(produced_inside) && depends[id as usize]
                    })
                    .collect();
                let wanted: SmallVec<[Option<&crate::tensor::Tensor>; 4]> = returned
                    .iter()
                    .map(|r| {
                        r.and_then(|v| contributions.iter().find(|(_, c)| c.slot() == v))
                            .map(|(_, c)| c.value())
                    })
                    .collect();
                let values: SmallVec<[&crate::tensor::Tensor; 4]> =
                    inputs.iter().map(|v| v.value()).collect();
                Some(check_fast(
                    op,
                    g.value(),
                    &values,
                    call.output.value(),
                    needs,
                    &wanted,
                )?)
            } else {
                None
            };
            groups.push(BackwardGroup {
                node: n as u32,
                grad: g.slot(),
                nodes: start..end,
                grads: returned,
                fast,
            });
            for (id, g_in) in contributions {
                passing.hold(g_in.slot());
                acc[id] = Some(match acc[id].take() {
                    Some(a) => {
                        passing.unhold(a.slot());
                        passing.unhold(g_in.slot());
                        let sum = a.try_add(&g_in)?.ensure_slot();
                        passing.hold(sum.slot());
                        sum
                    }
                    None => g_in,
                });
            }
            drop((g, inputs, call));
            passing.note(graph)?;
            passing.pass(graph, out as u32, first_new);
        }
        Ok(())
    })();
    graph.set_anomaly_detection(anomaly);
    result?;
    Ok((acc, groups, passing))
}

impl Captured {
    /// The source a leaf value is bound to, if any: by the leaf's own id,
    /// or by sharing storage with what the function was given.
    pub(crate) fn source_of(&self, value: u32, tensor: &Tensor) -> Option<usize> {
        let sources = &self.log.sources;
        if let Some(i) = sources.iter().position(|s| s.value == Some(value)) {
            return Some(i);
        }
        if tensor.rank() == 0 {
            return None;
        }
        let shares = |s: &&crate::core::graph::capture::Source| {
            s.tensor.rank() > 0 && s.tensor.shares_storage_with(tensor)
        };
        // Two sources can share storage (rows of one tensor, as batch norm's
        // running statistics after a state update): the one that is this
        // view first.
        let exact = sources.iter().position(|s| {
            shares(&s)
                && s.tensor.storage_offset() == tensor.storage_offset()
                && s.tensor.shape() == tensor.shape()
                && s.tensor.strides() == tensor.strides()
        });
        exact.or_else(|| sources.iter().position(|s| shares(&s)))
    }
}

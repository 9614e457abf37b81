//! A backward sweep that records what it does: which node runs, the
//! gradient it receives, what reaches each of its inputs and where
//! contributions accumulate. The record is taken from the engine's own
//! gradient store as the `Var`-level sweep runs (the sweep hooks and
//! `create_graph` use), so a picture of the sweep shows the engine, not a
//! re-derivation of it.

use super::backward::{run, seed_for, GradStore};
use super::gradients::Gradients;
use crate::base::error::Result;
use crate::core::graph::{order, Graph, Var, LEAF_CONSTANT};
use crate::core::store::{GradSlot, TensorStore};
use crate::tensor::TensorSummary;

/// What one backward sweep did, step by step: returned by
/// [`Var::backward_recorded`].
#[derive(Clone, Debug, PartialEq)]
pub struct SweepRecord {
    /// The value id of the root the sweep started from.
    pub root: usize,
    /// The nodes of `backward_order(root)`, newest first: the order the
    /// sweep visited them in.
    pub order: Vec<usize>,
    /// The seed first, then one step per visited node, in sweep order (and
    /// one per leaf whose hooks ran at the end).
    pub steps: Vec<SweepStep>,
}

/// What happened in one step of a sweep.
#[derive(Clone, Debug, PartialEq)]
pub enum StepKind {
    /// The root's gradient is set to the seed (1 for a one-element root).
    Seed,
    /// Node `i` ran its backward.
    Node(usize),
    /// The hooks of a leaf ran on its complete gradient, after the sweep.
    LeafHooks(usize),
}

/// One step of a [`SweepRecord`].
#[derive(Clone, Debug, PartialEq)]
pub struct SweepStep {
    /// What ran.
    pub kind: StepKind,
    /// The gradient of the node's output as the node received it (before
    /// any hook on that output); `None` when no gradient reached the node,
    /// which then contributes nothing. `None` for the seed.
    pub grad_output: Option<TensorSummary>,
    /// Whether the sweep released the output's gradient after the node ran
    /// (intermediates are released unless retained).
    pub released: bool,
    /// What the step added to gradients, in the order it added them.
    pub contributions: Vec<Contribution>,
}

/// One gradient added to a value's accumulated gradient.
#[derive(Clone, Debug, PartialEq)]
pub struct Contribution {
    /// The value id whose gradient grew.
    pub value: usize,
    /// Which input of the node it flowed to (`None` for the seed and hooks).
    pub input: Option<usize>,
    /// The gradient that arrived.
    pub gradient: TensorSummary,
    /// The value's gradient after adding it.
    pub total: TensorSummary,
    /// Whether an earlier contribution was already there (a value used more
    /// than once: the gradients of its uses add up).
    pub accumulated: bool,
}

impl<'g> Var<'g> {
    /// Backpropagates from this one-element value like
    /// [`backward`](Var::backward), and records the sweep: each node of
    /// `backward_order` as it runs, the gradient it receives, what it sends
    /// to each input and where contributions accumulate (tensors as
    /// [`TensorSummary`]s listing at most `max_values` elements). It runs
    /// the `Var`-level sweep (every node through its `backward` formula,
    /// the sweep hooks and `create_graph` use), so it is slower than
    /// `backward`; its gradients are the same up to rounding.
    ///
    /// The textbook chapter's example, `w = x*y + x` at x = 3, y = 4:
    ///
    /// ```
    /// use retrograd::autograd::StepKind;
    /// use retrograd::{Graph, Tensor};
    ///
    /// let graph = Graph::new();
    /// let x = graph.named_variable("x", Tensor::scalar(3.0));
    /// let y = graph.named_variable("y", Tensor::scalar(4.0));
    /// let w = &x * &y + &x;
    /// let (grads, record) = w.backward_recorded(8)?;
    /// assert_eq!(grads.wrt(&x).try_item()?, 5.0);
    /// assert_eq!(record.order, vec![1, 0]);
    /// let kinds: Vec<_> = record.steps.iter().map(|s| s.kind.clone()).collect();
    /// assert_eq!(kinds, vec![StepKind::Seed, StepKind::Node(1), StepKind::Node(0)]);
    /// // mul runs last: it sends 4 to x, which already held 1 from add.
    /// let to_x = &record.steps[2].contributions[0];
    /// assert_eq!((to_x.input, to_x.accumulated), (Some(0), true));
    /// assert_eq!((to_x.gradient.values.clone(), to_x.total.values.clone()),
    ///            (Some(vec![4.0]), Some(vec![5.0])));
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn backward_recorded(&self, max_values: usize) -> Result<(Gradients, SweepRecord)> {
        let graph = self.graph();
        let seed = seed_for(self, None)?;
        let (slot_count, params, order) = {
            let st = graph.state();
            let order = match self.node_index() {
                Some(n) => order::ancestors_of(&st, n),
                None => Vec::new(),
            };
            (st.values().len(), st.params().clone(), order)
        };
        let mut store = RecordingStore {
            inner: TensorStore {
                slots: super::pool::take_slots(slot_count),
            },
            graph,
            max_values,
            steps: vec![SweepStep {
                kind: StepKind::Seed,
                grad_output: None,
                released: false,
                contributions: Vec::new(),
            }],
            next_input: 0,
        };
        {
            let _recording_off = graph.no_grad_guard();
            let seeds = [(self.slot(), Var::constant_in(graph, seed))];
            run(graph, &seeds, &order, &mut store, &Default::default())?;
        }
        let record = SweepRecord {
            root: self.slot() as usize,
            order: order.iter().map(|&i| i as usize).collect(),
            steps: store.steps,
        };
        Ok((
            Gradients::new(graph.id(), store.inner.slots, &params),
            record,
        ))
    }
}

/// The first-order store, watched: every `take` starts a step, every `add`
/// is a contribution of the current step.
struct RecordingStore<'g> {
    inner: TensorStore,
    graph: &'g Graph,
    max_values: usize,
    steps: Vec<SweepStep>,
    /// The input position after the last one the current node added to.
    next_input: usize,
}

impl<'g> GradStore<'g> for RecordingStore<'g> {
    fn take(&mut self, graph: &'g Graph, id: u32, retain: bool) -> Option<Var<'g>> {
        let producer = graph.state().producers()[id as usize];
        let kind = if producer < LEAF_CONSTANT {
            StepKind::Node(producer as usize)
        } else {
            StepKind::LeafHooks(id as usize)
        };
        let grad = self.inner.take(graph, id, retain);
        self.steps.push(SweepStep {
            kind,
            grad_output: grad.as_ref().map(|g| g.value().summary(self.max_values)),
            released: grad.is_some() && !retain,
            contributions: Vec::new(),
        });
        self.next_input = 0;
        grad
    }

    fn add(&mut self, id: u32, grad: Var<'g>) -> Result<()> {
        let accumulated = matches!(self.inner.slots.get(id as usize), Some(GradSlot::Grad(_)));
        let gradient = grad.value().summary(self.max_values);
        self.inner.add(id, grad)?;
        let Some(GradSlot::Grad(total)) = self.inner.slots.get(id as usize) else {
            unreachable!("a gradient was just added to slot {id}")
        };
        let total = total.summary(self.max_values);
        let step = self.steps.last_mut().expect("the seed step comes first");
        // A node adds to its inputs in input order; a value used twice by
        // one node (x * x) gets one contribution per use.
        let input = match step.kind {
            StepKind::Node(node) => {
                let st = self.graph.state();
                let inputs = st.inputs_of(node);
                let position = (self.next_input..inputs.len()).find(|&p| inputs[p] == id);
                self.next_input = position.map_or(self.next_input, |p| p + 1);
                position
            }
            StepKind::Seed | StepKind::LeafHooks(_) => None,
        };
        step.contributions.push(Contribution {
            value: id as usize,
            input,
            gradient,
            total,
            accumulated,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::StepKind;
    use crate::{Graph, Tensor};

    #[test]
    fn the_dead_node_is_not_visited_and_fan_out_accumulates() {
        let graph = Graph::new();
        let x = graph.named_variable("x", Tensor::scalar(3.0));
        let y = graph.named_variable("y", Tensor::scalar(4.0));
        let z = &x * &y;
        let _q = &x - 1.0;
        let w = &z + &x;
        let (grads, record) = w.backward_recorded(8).unwrap();
        assert_eq!(grads.wrt(&y).item(), 3.0);
        assert_eq!(record.order, vec![2, 0]);
        let nodes: Vec<_> = record.steps.iter().map(|s| s.kind.clone()).collect();
        assert_eq!(
            nodes,
            vec![StepKind::Seed, StepKind::Node(2), StepKind::Node(0)]
        );
        let seed = &record.steps[0].contributions[0];
        assert_eq!(seed.value, w.value_id().unwrap());
        assert_eq!(seed.total.values, Some(vec![1.0]));
        let add = &record.steps[1];
        assert_eq!(add.grad_output.as_ref().unwrap().values, Some(vec![1.0]));
        assert!(add.released, "w's gradient is released once add has run");
        let sent: Vec<_> = add
            .contributions
            .iter()
            .map(|c| (c.value, c.input, c.accumulated))
            .collect();
        let (zid, xid) = (z.value_id().unwrap(), x.value_id().unwrap());
        assert_eq!(sent, vec![(zid, Some(0), false), (xid, Some(1), false)]);
    }

    #[test]
    fn a_value_used_twice_by_one_node_gets_two_contributions() {
        let graph = Graph::new();
        let x = graph.variable(Tensor::vector(&[1.0, -2.0]));
        let loss = (&x * &x).sum();
        let (grads, record) = loss.backward_recorded(1).unwrap();
        assert_eq!(grads.wrt(&x).to_f64_vec(), vec![2.0, -4.0]);
        let mul = record.steps.last().unwrap();
        let sent: Vec<_> = mul
            .contributions
            .iter()
            .map(|c| (c.input, c.accumulated, c.total.values.is_some()))
            .collect();
        assert_eq!(sent, vec![(Some(0), false, false), (Some(1), true, false)]);
        assert_eq!(mul.contributions[1].total.norm, 20f64.sqrt());
    }

    #[test]
    fn a_non_scalar_root_and_a_constant_root_are_errors() {
        let graph = Graph::new();
        let x = graph.variable(Tensor::vector(&[1.0, 2.0]));
        assert!(matches!(
            (&x * 2.0).backward_recorded(8),
            Err(crate::Error::NonScalarRoot { .. })
        ));
        let c = graph.constant(Tensor::scalar(1.0));
        assert!(matches!(
            c.backward_recorded(8),
            Err(crate::Error::RootDoesNotRequireGrad)
        ));
    }
}

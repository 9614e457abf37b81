//! Values a capture lets go of as its backward recording passes them.
//!
//! A capture records the backward into the graph that holds the forward,
//! and a graph keeps every value it records: left alone, the joint graph
//! holds every activation and every gradient of the step at once (W4: 1.66x
//! the eager step's peak memory). The recording needs a value only until
//! the formulas that read it are recorded: a forward node's output until
//! its own backward (its consumers' ran before it, newest first), a
//! gradient until the formula that takes it. So after each forward node's
//! backward this keeps the graph's copy of such values as their shape only
//! (as [`Capture::slim`](super::Capture) does for the whole graph at the
//! end), and the memory goes back as the eager sweep's would.
//!
//! What lowering later reads of those values is noted first, while they
//! are whole: which inputs each node's output views (a reshape shares its
//! input's storage, so the memory plan gives it no buffer of its own),
//! whether a random op takes a fresh seed, and whether an op's fast
//! backward rule takes the captured values (`Captured::views`,
//! `Captured::refuses_seed`, `BackwardGroup::fast`).

use smallvec::SmallVec;

use crate::autograd::backward::OpHolder;
use crate::base::error::Result;
use crate::core::graph::{Graph, LEAF_CONSTANT};
use crate::tensor::Tensor;

/// Values of at most this many elements stay whole (as in `Capture::slim`).
const KEPT_WHOLE: usize = 8;

/// Whether an op's fast backward rule took the captured values, for the
/// inputs it was asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FastCheck {
    /// Per input: whether its gradient was asked for.
    pub(crate) needs: SmallVec<[bool; 4]>,
    /// Whether the rule took the values and gave gradients of the inputs'
    /// shapes and dtypes.
    pub(crate) accepted: bool,
}

/// The bookkeeping of one capture's recording.
#[derive(Default)]
pub(crate) struct Passing {
    /// Per value: how many gradient accumulators hold it.
    held: Vec<u32>,
    /// Per value: whether the formulas that read it are recorded.
    past: Vec<bool>,
    /// Values past their formulas that the last accumulator let go of
    /// since the last [`pass`](Self::pass): kept as shapes there, once noted.
    ready: Vec<u32>,
    /// Nodes noted so far (`0..noted`).
    noted: usize,
    /// Per node: bit `k` set when its output shares input `k`'s storage.
    pub(crate) views: Vec<u64>,
    /// Random ops that cannot take a fresh seed.
    pub(crate) refuses_seed: Vec<u32>,
}

impl Passing {
    /// An accumulator now holds value `v`.
    pub(crate) fn hold(&mut self, v: u32) {
        let v = v as usize;
        if self.held.len() <= v {
            self.held.resize(v + 1, 0);
        }
        self.held[v] += 1;
    }

    /// An accumulator let go of value `v`.
    pub(crate) fn unhold(&mut self, v: u32) {
        let Some(h) = self.held.get_mut(v as usize) else {
            return;
        };
        *h = h.saturating_sub(1);
        if *h == 0 && self.past.get(v as usize).is_some_and(|&p| p) {
            self.ready.push(v);
        }
    }

    fn is_held(&self, v: u32) -> bool {
        self.held.get(v as usize).is_some_and(|&h| h > 0)
    }

    /// Notes what lowering reads of every node recorded since the last
    /// call, while their values are whole.
    pub(crate) fn note(&mut self, graph: &Graph) -> Result<()> {
        let st = graph.state();
        let nodes = st.nodes().len();
        for n in self.noted..nodes {
            let rec = st.nodes()[n];
            let out = &st.values()[rec.output as usize];
            let mut bits = 0u64;
            for (k, &i) in st.inputs_of(n).iter().enumerate().take(64) {
                let input = &st.values()[i as usize];
                if input.rank() > 0 && out.shares_storage_with(input) {
                    bits |= 1 << k;
                }
            }
            self.views.push(bits);
            let op = match st.op(rec.op).without_saved() {
                Some(fresh) => OpHolder::Shared(fresh),
                None => OpHolder::of(st.op_entry(rec.op)),
            };
            if op.get().seed().is_some() {
                let probe: SmallVec<[&Tensor; 4]> = st
                    .inputs_of(n)
                    .iter()
                    .map(|&i| &st.values()[i as usize])
                    .collect();
                if op.get().forward_seeded(&probe, 0)?.is_none() {
                    self.refuses_seed.push(n as u32);
                }
            }
        }
        self.noted = nodes;
        Ok(())
    }

    /// After a forward node's backward is recorded (and noted): keeps as
    /// shapes the node's own output, every value recorded since
    /// `first_new` and every value an accumulator let go of since the last
    /// call, unless an accumulator holds it (it goes when let go of). Each
    /// value is visited once or twice, so a capture stays linear in its
    /// nodes.
    pub(crate) fn pass(&mut self, graph: &Graph, output: u32, first_new: u32) {
        let count = graph.value_count() as u32;
        if self.past.len() < count as usize {
            self.past.resize(count as usize, false);
        }
        let mut st = graph.state_mut();
        let mut slim = |v: u32| {
            let t = &st.values()[v as usize];
            // Leaves (constants the formulas made) are bound at every run.
            if st.producers()[v as usize] < LEAF_CONSTANT && t.numel() > KEPT_WHOLE {
                let shape_only = super::shape_only(t);
                *st.value_mut(v) = shape_only;
            }
        };
        for v in std::iter::once(output).chain(first_new..count) {
            if self.is_held(v) {
                self.past[v as usize] = true;
            } else {
                slim(v);
            }
        }
        for v in std::mem::take(&mut self.ready) {
            if !self.is_held(v) {
                slim(v);
            }
        }
    }
}

/// Whether `op`'s fast rule takes these values (`needs`: the inputs whose
/// gradients are wanted) and gives gradients of the `wanted` shapes.
pub(crate) fn check_fast(
    op: &dyn crate::Differentiable,
    g: &Tensor,
    inputs: &[&Tensor],
    output: &Tensor,
    needs: SmallVec<[bool; 4]>,
    wanted: &[Option<&Tensor>],
) -> Result<FastCheck> {
    let mut grads: SmallVec<[Option<Tensor>; 4]> = smallvec::smallvec![None; inputs.len()];
    let took = op.backward_fast(g, inputs, output, &needs, &mut grads)?;
    let accepted = took
        && wanted
            .iter()
            .zip(&needs)
            .zip(&grads)
            .all(|((w, &need), t)| match (w, t) {
                (Some(w), Some(t)) if need => t.same_shape(w) && t.dtype() == w.dtype(),
                _ => true,
            });
    Ok(FastCheck { needs, accepted })
}

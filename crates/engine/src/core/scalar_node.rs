//! One scalar node of the first-order sweep, run end to end inside its op.
//!
//! The sweep makes one dynamic call per scalar node: to the op's
//! [`Differentiable::scalar_node`], whose default body is compiled once per
//! op type. Inside it, gathering the input values, the op's scalar rule and
//! accumulating the input gradients are all static code, so the rule
//! inlines and its arguments never leave registers. (A dynamic call to the
//! rule alone, with gathering and accumulating on the sweep's side, cost
//! about a sixth more instructions per node on W1.)
//!
//! It sits in the core layer with the op trait, below `autograd`
//! (ARCHITECTURE.md, "Layers"): the trait's default `scalar_node` body
//! names [`ScalarNode`], so it must be concrete and visible there.

use super::graph::{GraphState, NodeRecord};
use super::scalar_lane::{ScalarArgs, ScalarBackward};
use super::store::TensorStore;
use crate::base::error::{Error, Result};
use crate::tensor::Element;

/// The dtypes the scalar lane runs in. Tags a scalar backward call with its
/// dtype, which is the op trait's business, not the tensor layer's
/// ([`Element`] carries nothing from the ops above it). Crate-private, so
/// sealed: implemented for `f32` and `f64` only.
pub(crate) trait LaneElement: Element {
    /// `args` as the [`ScalarBackward`] variant of this dtype.
    fn scalar_backward(args: ScalarArgs<'_, Self>) -> ScalarBackward<'_>;
}

impl LaneElement for f32 {
    #[inline(always)]
    fn scalar_backward(args: ScalarArgs<'_, f32>) -> ScalarBackward<'_> {
        ScalarBackward::F32(args)
    }
}

impl LaneElement for f64 {
    #[inline(always)]
    fn scalar_backward(args: ScalarArgs<'_, f64>) -> ScalarBackward<'_> {
        ScalarBackward::F64(args)
    }
}

/// A scalar node waiting for its op: the graph, the node, where gradients
/// go, and the node's output gradient. Built only by the sweep.
#[doc(hidden)]
pub struct ScalarNode<'a> {
    st: &'a GraphState,
    rec: &'a NodeRecord,
    store: &'a mut TensorStore,
    grad: ScalarGrad,
    /// The error accumulating a gradient met, if any: kept here so the
    /// outcome stays one byte (a `Result` with the 96-byte `Error` was
    /// copied out whole on every return).
    failure: Option<Error>,
}

#[derive(Clone, Copy)]
pub(crate) enum ScalarGrad {
    F32(f32),
    F64(f64),
}

/// What running a scalar node came to. Only [`ScalarNode::run`] makes one,
/// so an op cannot claim a node ran without running it.
#[doc(hidden)]
pub struct LaneOutcome(Lane);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Lane {
    Ran,
    /// Not every value is a 0-d number of one dtype, or the op has no lane.
    Declined,
    /// Accumulating a gradient failed; the error is in `failure`.
    Failed,
}

impl<'a> ScalarNode<'a> {
    pub(crate) fn new(
        st: &'a GraphState,
        rec: &'a NodeRecord,
        store: &'a mut TensorStore,
        grad: ScalarGrad,
    ) -> Self {
        ScalarNode {
            st,
            rec,
            store,
            grad,
            failure: None,
        }
    }

    /// Runs the node through `rule` (an op's `backward_scalar`) if every
    /// value is a 0-d number of the gradient's dtype and the node has one or
    /// two inputs (the ones the record holds inline); declines otherwise,
    /// or when the rule declines.
    #[inline(always)]
    pub(crate) fn run(
        &mut self,
        rule: impl FnOnce(&mut ScalarBackward<'_>) -> bool,
    ) -> LaneOutcome {
        LaneOutcome(match (self.grad, self.rec.inline_count()) {
            (ScalarGrad::F32(g), 1) => self.run_typed::<f32, 1>(g, rule),
            (ScalarGrad::F32(g), 2) => self.run_typed::<f32, 2>(g, rule),
            (ScalarGrad::F64(g), 1) => self.run_typed::<f64, 1>(g, rule),
            (ScalarGrad::F64(g), 2) => self.run_typed::<f64, 2>(g, rule),
            _ => Lane::Declined,
        })
    }

    /// [`run`](Self::run) for `N` inputs of dtype `T`: fixed-size arrays, so
    /// the gathering and accumulating loops unroll.
    #[inline(always)]
    fn run_typed<T: LaneElement, const N: usize>(
        &mut self,
        grad: T,
        rule: impl FnOnce(&mut ScalarBackward<'_>) -> bool,
    ) -> Lane {
        let (st, rec) = (self.st, self.rec);
        let ids: [u32; N] = rec.inline_ids();
        let mut xs = [T::zero(); N];
        for k in 0..N {
            match T::scalar_of(&st.values()[ids[k] as usize]) {
                Some(v) => xs[k] = v,
                None => return Lane::Declined,
            }
        }
        let Some(output) = T::scalar_of(&st.values()[rec.output as usize]) else {
            return Lane::Declined;
        };
        let mut ds = [T::zero(); N];
        let mut call = T::scalar_backward(ScalarArgs {
            grad,
            inputs: &xs,
            output,
            grads: &mut ds,
        });
        if !rule(&mut call) {
            return Lane::Declined;
        }
        let needs: [bool; N] = rec.inline_needs();
        for k in 0..N {
            if needs[k]
                && !self.store.try_add_scalar(ids[k] as usize, ds[k])
                && !self.add_general(ids[k] as usize, ds[k])
            {
                return Lane::Failed;
            }
        }
        Lane::Ran
    }

    /// A gradient the scalar path could not add in place, through the
    /// general accumulation; false (with the error kept in `failure`) if
    /// that fails. Out of line: it never runs for a well-formed graph, and
    /// inlined it made every scalar node reserve stack for an `Error`.
    #[cold]
    #[inline(never)]
    fn add_general<T: Element>(&mut self, id: usize, grad: T) -> bool {
        match self.store.add_tensor(id, grad.scalar_tensor()) {
            Ok(()) => true,
            Err(e) => {
                self.failure = Some(e);
                false
            }
        }
    }

    /// Whether the node ran (`outcome` being what its op's `scalar_node`
    /// returned), or the error accumulating its gradients met.
    pub(crate) fn ran(&mut self, outcome: LaneOutcome) -> Result<bool> {
        match outcome.0 {
            Lane::Ran => Ok(true),
            Lane::Declined => Ok(false),
            Lane::Failed => Err(self.failure.take().expect("a failed lane keeps its error")),
        }
    }
}

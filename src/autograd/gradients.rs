//! [`Gradients`]: what a backward pass returns (the seed's `x.grad`, kept
//! outside the tensors).

use crate::error::{Error, Result};
use crate::graph::Var;
use crate::tensor::Tensor;

/// The state of one value's gradient after a backward pass.
#[derive(Clone, Default)]
pub(crate) enum GradSlot {
    /// No contribution reached the value: its gradient is zero.
    #[default]
    Unreached,
    /// The accumulated gradient.
    Grad(Tensor),
    /// An intermediate whose gradient was used and released (not retained).
    Released,
}

/// Gradients of one backward pass, indexed by value id: dense, allocated on
/// first contribution, and independent of the graph's lifetime (they can be
/// kept, sent to another thread, or handed to an optimizer).
///
/// ```
/// use retrograd::{Graph, Tensor};
/// let g = Graph::new();
/// let x = g.variable(Tensor::scalar(3.0));
/// let y = g.variable(Tensor::scalar(4.0));
/// let unused = g.variable(Tensor::scalar(1.0));
/// let grads = (&x * &y).backward()?;
/// assert_eq!(grads.wrt(&x).item()?, 4.0);
/// assert_eq!(grads.wrt(&unused).item()?, 0.0);   // unreached reads as zero
/// assert!(grads.get(&unused).is_none());
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone)]
pub struct Gradients {
    graph_id: u64,
    slots: Vec<GradSlot>,
    /// Parameter id -> value id, for `Gradients::of`.
    pub(crate) params: Vec<(u64, u32)>,
}

impl Gradients {
    pub(crate) fn new(graph_id: u64, slots: Vec<GradSlot>, params: Vec<(u64, u32)>) -> Self {
        Gradients {
            graph_id,
            slots,
            params,
        }
    }

    /// The id of the graph these gradients belong to.
    pub fn graph_id(&self) -> u64 {
        self.graph_id
    }

    /// The gradient of the root with respect to `var`, zero-filled when no
    /// gradient reached it.
    ///
    /// # Panics
    ///
    /// If `var` is from another graph, or is an intermediate whose gradient
    /// was not retained; [`try_wrt`](Self::try_wrt) returns those as errors.
    #[track_caller]
    pub fn wrt(&self, var: &Var<'_>) -> Tensor {
        match self.try_wrt(var) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        }
    }

    /// The gradient with respect to `var`, or an error if `var` belongs to
    /// another graph or is an intermediate that was not retained.
    pub fn try_wrt(&self, var: &Var<'_>) -> Result<Tensor> {
        match self.slot_of(var)? {
            Some(GradSlot::Grad(t)) => Ok(t.clone()),
            Some(GradSlot::Released) => Err(Error::GradientNotRetained {
                value: var.slot() as usize,
            }),
            Some(GradSlot::Unreached) | None => Ok(var.value().zeros_like()),
        }
    }

    /// The gradient with respect to `var` if one was accumulated (and kept).
    pub fn get(&self, var: &Var<'_>) -> Option<&Tensor> {
        match self.slot_of(var) {
            Ok(Some(GradSlot::Grad(t))) => Some(t),
            _ => None,
        }
    }

    /// The gradient of value `id` if one was accumulated (and kept).
    pub fn get_by_id(&self, id: usize) -> Option<&Tensor> {
        match self.slots.get(id) {
            Some(GradSlot::Grad(t)) => Some(t),
            _ => None,
        }
    }

    /// The number of values holding a gradient.
    pub fn len(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, GradSlot::Grad(_)))
            .count()
    }

    /// Whether no value holds a gradient.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn slot_of(&self, var: &Var<'_>) -> Result<Option<&GradSlot>> {
        if var.graph().id() != self.graph_id {
            return Err(Error::ForeignVariable {
                op: "Gradients::wrt".to_string(),
            });
        }
        Ok(var.value_id().and_then(|id| self.slots.get(id)))
    }

    pub(crate) fn slot_by_id(&self, id: u32) -> Option<&GradSlot> {
        self.slots.get(id as usize)
    }
}

impl std::fmt::Debug for Gradients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut m = f.debug_map();
        for (i, s) in self.slots.iter().enumerate() {
            if let GradSlot::Grad(t) = s {
                m.entry(&i, t);
            }
        }
        m.finish()
    }
}

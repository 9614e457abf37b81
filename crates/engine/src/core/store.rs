//! Gradient slots by value id, and the first-order store that accumulates
//! plain tensors into them.
//!
//! It sits in the core layer, below `autograd` (ARCHITECTURE.md,
//! "Layers"): an op's hidden
//! [`Differentiable::scalar_node`](crate::Differentiable) is handed a
//! [`ScalarNode`](super::ScalarNode) that writes its input gradients here,
//! so the op trait has to see both.

use crate::base::error::Result;
use crate::kernels::{elementwise::zip_assign, functors};
use crate::tensor::{Element, Tensor};

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

/// First-order store: plain tensors; the first contribution is moved in,
/// later ones are added in place when the buffer is not shared.
pub(crate) struct TensorStore {
    pub(crate) slots: Vec<GradSlot>,
}

impl TensorStore {
    /// Adds `grad` into slot `id`: moved in if first, else added (in place
    /// when the accumulated buffer is not shared).
    #[inline]
    pub(crate) fn add_tensor(&mut self, id: usize, grad: Tensor) -> Result<()> {
        if id >= self.slots.len() {
            self.slots.resize(id + 1, GradSlot::Unreached);
        }
        let slot = &mut self.slots[id];
        if let GradSlot::Grad(acc) = slot
            && acc.add_scalar_in_place(&grad)
        {
            return Ok(());
        }
        *slot = match std::mem::take(slot) {
            GradSlot::Grad(acc) => GradSlot::Grad(zip_assign("add", acc, &grad, functors::Add)?),
            _ => GradSlot::Grad(grad),
        };
        Ok(())
    }

    /// Slot `id`'s accumulated gradient, taken out for an op to add into
    /// (`Some(None)` when nothing reached it yet); `None` when the slot was
    /// released, which a topological sweep never asks for.
    pub(crate) fn take_for_accumulate(&mut self, id: usize) -> Option<Option<Tensor>> {
        let Some(slot) = self.slots.get_mut(id) else {
            return Some(None);
        };
        match std::mem::take(slot) {
            GradSlot::Grad(acc) => Some(Some(acc)),
            GradSlot::Unreached => Some(None),
            GradSlot::Released => {
                *slot = GradSlot::Released;
                None
            }
        }
    }

    /// Puts back what [`take_for_accumulate`](Self::take_for_accumulate) took.
    pub(crate) fn restore(&mut self, id: usize, acc: Option<Tensor>) -> Result<()> {
        match acc {
            // The slot is empty (taken, or never made): this moves `acc` in.
            Some(acc) => self.add_tensor(id, acc),
            None => Ok(()),
        }
    }

    /// Adds a scalar-lane gradient into slot `id` when the slot is empty or
    /// holds a 0-d gradient of `T`; returns false, changing nothing,
    /// otherwise (never for a well-formed graph: the caller then takes
    /// [`add_tensor`](Self::add_tensor), which reports it). A `bool`, not a
    /// `Result`, so the hot path carries no room for an `Error`.
    #[inline(always)]
    pub(crate) fn try_add_scalar<T: Element>(&mut self, id: usize, grad: T) -> bool {
        match &mut self.slots[id] {
            GradSlot::Grad(acc) => match T::scalar_mut(acc) {
                Some(acc) => *acc += grad,
                None => return false,
            },
            slot => *slot = GradSlot::Grad(grad.scalar_tensor()),
        }
        true
    }
}

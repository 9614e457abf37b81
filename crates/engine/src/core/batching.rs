//! What a batching rule ([`Differentiable::batch`](super::Differentiable::batch))
//! sees: values that may carry a batch axis, and the batch they belong to.
//!
//! `vmap` runs a function written for one example over a batch by
//! recording it once on one example and then asking each recorded op for
//! its batching rule: the same computation over inputs that carry the
//! batch as their leading axis. The rules record ordinary ops, so a
//! vmapped function is an ordinary graph of batched tensors that
//! backward, traces and pictures read as any other.

use super::graph::Var;

/// A value of a batched computation: its batch axis, when it has one, is
/// axis 0, of the batch's size; a value without one is the same for every
/// example (a shared weight, a literal).
#[derive(Clone)]
pub struct Batched<'g> {
    /// The value: `[batch, ...example shape]` when `batched`, the example
    /// shape otherwise.
    pub value: Var<'g>,
    /// Whether axis 0 is the batch axis.
    pub batched: bool,
}

impl<'g> Batched<'g> {
    /// A value with the batch as its axis 0.
    pub fn along_batch(value: Var<'g>) -> Self {
        Batched {
            value,
            batched: true,
        }
    }

    /// A value shared by every example.
    pub fn shared(value: Var<'g>) -> Self {
        Batched {
            value,
            batched: false,
        }
    }

    /// The shape of one example's value (the value's shape without the
    /// batch axis).
    pub fn example_shape(&self) -> &[usize] {
        let shape = self.value.shape();
        if self.batched {
            &shape[1..]
        } else {
            shape
        }
    }

    /// The rank of one example's value.
    pub fn example_rank(&self) -> usize {
        self.example_shape().len()
    }
}

/// What random ops do under `vmap` (as `torch.func.vmap`'s `randomness`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Randomness {
    /// A random op in the function is an error naming it (the default):
    /// whether examples should share their draws is the caller's choice.
    #[default]
    Error,
    /// Every example draws the same numbers (one dropout mask for all).
    Same,
    /// Every example draws its own numbers.
    Different,
}

/// The batch a rule works in: its size and what random ops do.
#[derive(Clone, Copy, Debug)]
pub struct BatchContext {
    /// The number of examples.
    pub size: usize,
    /// What random ops do ([`Randomness`]).
    pub randomness: Randomness,
}

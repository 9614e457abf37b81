//! [`Flatten`]: dims `start_dim..=end_dim` merged into one, a view.

use crate::base::error::Result;
use crate::core::graph::Var;
use crate::nn::{Forward, Module, Parameter};

/// Merges dims `start_dim..=end_dim` into one (PyTorch's `nn.Flatten`,
/// default `1..=-1`: everything but the batch dim). A reshape, so it shares
/// storage and copies nothing.
///
/// ```
/// use retrograd::{DType, Graph, Tensor, nn::{Flatten, Forward, Module}};
/// let g = Graph::new();
/// let x = g.constant(Tensor::zeros(&[64, 32, 7, 7], DType::F32)?);
/// assert_eq!(Flatten::new().forward(&x)?.shape(), &[64, 1568]);
/// assert_eq!(Flatten::dims(0, 1).forward(&x)?.shape(), &[2048, 7, 7]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flatten {
    start_dim: isize,
    end_dim: isize,
}

impl Default for Flatten {
    fn default() -> Self {
        Flatten {
            start_dim: 1,
            end_dim: -1,
        }
    }
}

impl Flatten {
    /// Flattens all dims after the first.
    pub fn new() -> Self {
        Self::default()
    }

    /// Flattens dims `start_dim..=end_dim` (negative counts from the end).
    pub fn dims(start_dim: isize, end_dim: isize) -> Self {
        Flatten { start_dim, end_dim }
    }
}

impl Module for Flatten {
    fn visit_parameters(&self, _: &str, _: &mut dyn FnMut(&str, &Parameter)) {}
}

impl Forward for Flatten {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        x.try_flatten(self.start_dim, self.end_dim)
    }
}

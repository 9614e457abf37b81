//! [`Buffer`]: a named tensor of a module that is state, not a parameter.

use std::sync::{Arc, RwLock};

use super::parameter::replace_same_layout;
use crate::base::error::Result;
use crate::tensor::{DType, Tensor};

/// A tensor a module keeps and updates itself (batch norm's
/// `running_mean`, `running_var`, `num_batches_tracked`), saved and loaded
/// with state dicts and checkpoints but never trained: it is not a
/// [`Parameter`](crate::nn::Parameter), so optimizers never see it and
/// gradients never reach it. Cloning gives another handle to the same
/// buffer (like `Arc`); it is `Send + Sync`, and a module updates it
/// through `&self` (forward passes take `&self`).
///
/// ```
/// use retrograd::{Tensor, nn::Buffer};
/// let b = Buffer::new(Tensor::zeros(&[2], retrograd::DType::F64)?);
/// b.set(Tensor::from_vec(vec![1.0, 2.0], &[2])?)?;
/// assert_eq!(b.value().to_f64_vec(), vec![1.0, 2.0]);
/// assert!(b.set(Tensor::scalar(1.0)).is_err()); // shape and dtype are fixed
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone)]
pub struct Buffer {
    value: Arc<RwLock<Tensor>>,
}

impl Buffer {
    /// A new buffer holding `value`.
    pub fn new(value: Tensor) -> Self {
        Buffer {
            value: Arc::new(RwLock::new(value)),
        }
    }

    /// The current value (shares storage; cheap).
    pub fn value(&self) -> Tensor {
        self.value.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The current value's shape.
    pub fn shape(&self) -> Vec<usize> {
        self.value().shape().to_vec()
    }

    /// The current value's dtype.
    pub fn dtype(&self) -> DType {
        self.value().dtype()
    }

    /// Replaces the value; the shape and dtype must stay the same.
    pub fn set(&self, value: Tensor) -> Result<()> {
        replace_same_layout("Buffer::set", &self.value, value)
    }

    /// Whether two handles are the same buffer.
    pub fn same(&self, other: &Buffer) -> bool {
        Arc::ptr_eq(&self.value, &other.value)
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.value();
        write!(f, "Buffer(shape={:?}, dtype={})", v.shape(), v.dtype())
    }
}

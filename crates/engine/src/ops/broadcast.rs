//! Broadcasting as ops: `expand` (broadcast a value to a larger shape) and
//! `sum_to_size` (sum a broadcast value back down). Each is the other's
//! backward, which is what lets broadcasting ops be differentiated any
//! number of times.

use crate::base::fallible::fallible;
use crate::ops::declare_op;

use super::{Node, StructuredOp};
use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::{sample_tensor, BatchContext, Batched, OpFacts};
use crate::kernels;
use crate::tensor::{Dims, Tensor};
use smallvec::smallvec;

/// Broadcasts its input to `shape` (PyTorch's `expand`): a view whose
/// broadcast dimensions have stride 0.
#[derive(Clone, Debug, Default)]
pub struct Expand {
    /// The target shape.
    pub shape: Dims,
}

impl StructuredOp for Expand {
    declare_op!("expand"(input), settings(ints shape));
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].expand_to(Self::NAME, &self.shape)
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        g.sum_to_size(n.x(0).shape())
    }
    fn tangent<'g>(&self, _: usize, t: &Var<'g>, _: Node<'_, 'g>) -> Result<Var<'g>> {
        t.try_expand(&self.shape)
    }
    // The example's missing leading axes become unit axes after the batch
    // axis, so each example broadcasts on its own.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let aligned = super::batching::with_example_rank(&x[0], self.shape.len())?;
        let mut shape: Dims = smallvec![ctx.size];
        shape.extend_from_slice(&self.shape);
        Ok(Batched::along_batch(aligned.try_expand(&shape)?))
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(std::sync::Arc::new(Expand {
                shape: smallvec![2, 2, 3],
            })),
            sample_inputs: Some(|seed| vec![sample_tensor(&[1, 3], seed, 1.0)]),
            ..OpFacts::opaque(Some(1))
        }
    }
}

/// Sums its input down to `shape`, which the input must broadcast from
/// (PyTorch's `sum_to_size`).
#[derive(Clone, Debug, Default)]
pub struct SumToSize {
    /// The target shape.
    pub shape: Dims,
}

impl StructuredOp for SumToSize {
    declare_op!("sum_to_size"(input), settings(ints shape));
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        kernels::sum_to_shape(Self::NAME, inputs[0], &self.shape)
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        g.try_expand(n.x(0).shape())
    }
    fn tangent<'g>(&self, _: usize, t: &Var<'g>, _: Node<'_, 'g>) -> Result<Var<'g>> {
        t.sum_to_size(&self.shape)
    }
    // Summed down to the batch followed by the target shape padded with
    // unit axes to the example's rank, then those axes dropped.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let missing = x[0].example_rank() - self.shape.len();
        let mut padded: Dims = smallvec![ctx.size];
        padded.extend(std::iter::repeat_n(1, missing));
        padded.extend_from_slice(&self.shape);
        let mut shape: Dims = smallvec![ctx.size];
        shape.extend_from_slice(&self.shape);
        let summed = x[0].value.sum_to_size(&padded)?;
        Ok(Batched::along_batch(summed.reshape_dims(&shape)?))
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(std::sync::Arc::new(SumToSize {
                shape: smallvec![1, 3],
            })),
            sample_inputs: Some(|seed| vec![sample_tensor(&[2, 2, 3], seed, 1.0)]),
            ..OpFacts::opaque(Some(1))
        }
    }
}

register_defaults!(Expand, SumToSize);

impl<'g> Var<'g> {
    fallible! {
        /// Broadcasts to `shape` under NumPy's rules (no node if the shape is unchanged).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2])?);
        /// let y = x.try_expand(&[2, 2])?;
        /// assert_eq!(y.value().to_f64_vec(), vec![1.0, 2.0, 1.0, 2.0]);
        /// assert!(x.try_expand(&[3]).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_expand / expand(&self, shape: &[usize]) -> Var<'g> {
            if self.shape() == shape {
                return Ok(self.clone());
            }
            self.graph().record(
                Expand {
                    shape: Dims::from_slice(shape),
                },
                &[self],
            )
        }
    }

    /// Alias of [`try_expand`](Self::try_expand) under NumPy's name.
    #[track_caller]
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Var<'g>> {
        self.try_expand(shape)
    }

    /// Sums down to `shape`, which must broadcast to this value's shape.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?);
    /// assert_eq!(x.sum_to_size(&[2])?.value().to_f64_vec(), vec![4.0, 6.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    pub fn sum_to_size(&self, shape: &[usize]) -> Result<Var<'g>> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        self.graph().record(
            SumToSize {
                shape: Dims::from_slice(shape),
            },
            &[self],
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, Tensor};

    #[test]
    fn gradients() {
        let x = Tensor::from_vec(vec![0.5, -1.0, 2.0], &[3, 1]).unwrap();
        gradcheck(|v| v[0].try_expand(&[2, 3, 4]), &[x.clone()]).unwrap();
        let y = Tensor::from_vec((0..12).map(|i| i as f64 * 0.1).collect(), &[3, 4]).unwrap();
        gradcheck(|v| v[0].sum_to_size(&[1, 4]), &[y.clone()]).unwrap();
        gradcheck(|v| v[0].sum_to_size(&[3, 1]), &[y]).unwrap();
        gradcheck(|v| v[0].try_expand(&[3, 2])?.sum_to_size(&[3, 1]), &[x]).unwrap();
    }

    #[test]
    fn tangents() {
        let x = Tensor::from_vec(vec![0.5, -1.0, 2.0], &[3, 1]).unwrap();
        crate::jvpcheck(|v| v[0].try_expand(&[2, 3, 4]), &[x.clone()]).unwrap();
        crate::jvpcheck(|v| v[0].try_expand(&[3, 2])?.sum_to_size(&[3, 1]), &[x]).unwrap();
    }
}

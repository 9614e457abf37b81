//! `select(dim, index)`: one index along one dimension, which is removed
//! (`x[i]` for dim 0), and its backward `select_backward`, which embeds a
//! gradient back into zeros of the input's shape.

use crate::base::fallible::fallible;
use crate::ops::declare_op;

use super::{Node, StructuredOp};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::{sample_tensor, BatchContext, Batched, OpFacts};
use crate::kernels::layout;
use crate::tensor::shape::normalize_axis;
use crate::tensor::{Dims, Tensor};

/// Picks index `index` along dimension `dim`, removing that dimension.
#[derive(Clone, Debug, Default)]
pub struct Select {
    /// The dimension (already normalised).
    pub dim: usize,
    /// The index along it.
    pub index: usize,
}

/// Embeds its input at `index` along `dim` of a zero tensor of `shape`.
#[derive(Clone, Debug, Default)]
pub struct SelectBackward {
    /// The full (input) shape.
    pub shape: Dims,
    /// The dimension.
    pub dim: usize,
    /// The index along it.
    pub index: usize,
}

impl StructuredOp for Select {
    declare_op!("select"(input), linear[0], settings(int dim, int index));
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let x = inputs[0];
        check(Self::NAME, x.shape(), self.dim, self.index)?;
        Ok(x.select_dim(self.dim, self.index))
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let op = SelectBackward {
            shape: Dims::from_slice(n.x(0).shape()),
            dim: self.dim,
            index: self.index,
        };
        g.graph().record(op, &[g])
    }
    // The same index along the same example axis, one past the batch.
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        let op = Select {
            dim: self.dim + 1,
            index: self.index,
        };
        Ok(Batched::along_batch(
            x[0].value.graph().record(op, &[&x[0].value])?,
        ))
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(std::sync::Arc::new(Select { dim: 1, index: 2 })),
            sample_inputs: Some(|seed| vec![sample_tensor(&[2, 3], seed, 1.0)]),
            ..OpFacts::opaque(Some(1))
        }
    }
}

impl StructuredOp for SelectBackward {
    declare_op!("select_backward"(grad_output), linear[0], settings(ints shape, int dim, int index));
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let g = inputs[0];
        check(Self::NAME, &self.shape, self.dim, self.index)?;
        let mut expect = self.shape.clone();
        expect.remove(self.dim);
        if g.shape() != expect.as_slice() {
            return Err(Error::shape_mismatch(Self::NAME, g.shape(), &expect));
        }
        let mut kept = self.shape.clone();
        kept[self.dim] = 1;
        layout::slice_backward(&g.reshape(&kept)?, &self.shape, self.dim, self.index, 1)
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, _: Node<'_, 'g>) -> Result<Var<'g>> {
        let op = Select {
            dim: self.dim,
            index: self.index,
        };
        g.graph().record(op, &[g])
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let mut shape: Dims = Dims::from_slice(&[ctx.size]);
        shape.extend_from_slice(&self.shape);
        let op = SelectBackward {
            shape,
            dim: self.dim + 1,
            index: self.index,
        };
        Ok(Batched::along_batch(
            x[0].value.graph().record(op, &[&x[0].value])?,
        ))
    }
    fn facts(&self) -> OpFacts {
        let example = SelectBackward {
            shape: Dims::from_slice(&[2, 3]),
            dim: 1,
            index: 2,
        };
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(std::sync::Arc::new(example)),
            sample_inputs: Some(|seed| vec![sample_tensor(&[2], seed, 1.0)]),
            ..OpFacts::opaque(Some(1))
        }
    }
}

fn check(op: &'static str, shape: &[usize], dim: usize, index: usize) -> Result<()> {
    if dim >= shape.len() {
        return Err(Error::AxisOutOfRange {
            op,
            axis: dim as isize,
            rank: shape.len(),
        });
    }
    if index >= shape[dim] {
        return Err(Error::IndexOutOfRange {
            op,
            index: index as i64,
            size: shape[dim],
        });
    }
    Ok(())
}

register_defaults!(Select, SelectBackward);

impl<'g> Var<'g> {
    fallible! {
        /// Index `index` along dimension `dim` (negative counts from the end),
        /// removing that dimension: `x.select(0, i)` is `x[i]`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?);
        /// assert_eq!(x.try_select(0, 1)?.value().to_f64_vec(), vec![4.0, 5.0, 6.0]);
        /// assert_eq!(x.try_select(-1, 2)?.value().to_f64_vec(), vec![3.0, 6.0]);
        /// assert!(x.try_select(0, 2).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_select / select(&self, dim: isize, index: usize) -> Var<'g> {
            let dim = normalize_axis("select", dim, self.value().rank())?;
            self.graph().record(Select { dim, index }, &[self])
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, jvpcheck, Tensor};

    #[test]
    fn gradients_and_tangents() {
        let x =
            Tensor::from_vec((0..24).map(|i| i as f64 * 0.1 - 1.0).collect(), &[2, 3, 4]).unwrap();
        for dim in [0isize, 1, 2, -1] {
            gradcheck(|v| v[0].try_select(dim, 1), &[x.clone()]).unwrap();
            jvpcheck(|v| v[0].try_select(dim, 1), &[x.clone()]).unwrap();
        }
        // Two consumers of one value.
        gradcheck(
            |v| Ok(&v[0].select(1, 0) * &v[0].select(1, 2)),
            &[x.clone()],
        )
        .unwrap();
        let g = Tensor::from_vec(vec![0.5, -1.0, 2.0], &[3]).unwrap();
        gradcheck(
            |v| {
                v[0].graph().record(
                    super::SelectBackward {
                        shape: crate::tensor::Dims::from_slice(&[2, 3]),
                        dim: 0,
                        index: 1,
                    },
                    &[&v[0]],
                )
            },
            &[g],
        )
        .unwrap();
    }
}

//! Reductions over every element: `sum` and `mean`.

use super::reduce_axes::{every_axis, reduction_facts, MeanDim, SumDim};
use super::{Node, OpFacts, OpRegistry, StructuredOp};
use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::{sample_tensor, BatchContext, Batched};
use crate::kernels;
use crate::ops::declare_op;
use crate::tensor::Tensor;

/// The sum of every element, as a 0-d tensor.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sum;

impl StructuredOp for Sum {
    declare_op!("sum"(input), linear[0]);
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        kernels::sum_all(x[0])
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        g.try_expand(n.x(0).shape())
    }
    // Each example's sum: a sum over every axis but the batch axis.
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        SumDim::over(&every_axis(x[0].example_rank()), false).on_examples(&x[0])
    }
    fn facts(&self) -> OpFacts {
        reduction_facts(None, sample_2x3)
    }
}

/// The mean of every element, as a 0-d tensor (NaN for an empty input, as in PyTorch).
#[derive(Clone, Copy, Debug, Default)]
pub struct Mean;

impl StructuredOp for Mean {
    declare_op!("mean"(input), linear[0]);
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let x = x[0];
        let s = kernels::sum_all(x)?.try_item()?;
        Ok(Tensor::scalar_of(s / x.numel() as f64, x.dtype()))
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let x = n.x(0);
        let count = x.value().numel() as f64;
        g.mul_scalar(1.0 / count).try_expand(x.shape())
    }
    // Each example's mean: a mean over every axis but the batch axis.
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        MeanDim::over(&every_axis(x[0].example_rank()), false).on_examples(&x[0])
    }
    fn facts(&self) -> OpFacts {
        reduction_facts(None, sample_2x3)
    }
}

/// The sample input of an all-element reduction: a `[2, 3]` tensor of
/// distinct values.
pub(crate) fn sample_2x3(seed: u64) -> Vec<Tensor> {
    vec![sample_tensor(&[2, 3], seed, 1.0)]
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Sum);
    reg.add_builtin(Mean);
}

impl<'g> Var<'g> {
    /// The sum of every element (a 0-d value).
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3])?);
    /// assert_eq!(x.sum().value().try_item()?, 6.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    pub fn sum(&self) -> Var<'g> {
        self.graph().record_or_panic(Sum, &[self])
    }

    /// The sum of every element, or `Error::NotFloat` for an i64 or bool
    /// value (which [`sum`](Self::sum) panics on).
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// assert!(g.constant(Tensor::vector(&[1i64, 2])).try_sum().is_err());
    /// assert_eq!(g.constant(Tensor::vector(&[1.0, 2.0])).try_sum()?.value().try_item()?, 3.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    pub fn try_sum(&self) -> crate::Result<Var<'g>> {
        self.graph().record(Sum, &[self])
    }

    /// The mean of every element (a 0-d value).
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3])?);
    /// assert_eq!(x.mean().value().try_item()?, 2.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    pub fn mean(&self) -> Var<'g> {
        self.graph().record_or_panic(Mean, &[self])
    }

    /// [`mean`](Self::mean), returning the error (an input that is not a
    /// float tensor) instead of panicking.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// assert!(g.constant(Tensor::vector(&[1i64, 2])).try_mean().is_err());
    /// assert_eq!(g.constant(Tensor::vector(&[1.0, 2.0])).try_mean()?.value().try_item()?, 1.5);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn try_mean(&self) -> crate::Result<Var<'g>> {
        self.graph().record(Mean, &[self])
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, Graph, Tensor};

    #[test]
    fn forward_values() {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 6.0], &[2, 2]).unwrap());
        assert_eq!(x.sum().value().item(), 12.0);
        assert_eq!(x.mean().value().item(), 3.0);
        assert_eq!(x.sum().shape(), &[] as &[usize]);
    }

    #[test]
    fn gradients() {
        let x = Tensor::from_vec(vec![0.5, -1.0, 2.0, 1.5, 0.3, -0.7], &[2, 3]).unwrap();
        gradcheck(|v| Ok(v[0].sum()), &[x.clone()]).unwrap();
        gradcheck(|v| Ok(v[0].mean()), &[x.clone()]).unwrap();
        gradcheck(|v| Ok(&v[0] * &v[0].mean() + v[0].sum()), &[x]).unwrap();
    }

    #[test]
    fn tangents() {
        let x = Tensor::from_vec(vec![0.5, -1.0, 2.0, 1.5], &[2, 2]).unwrap();
        crate::jvpcheck(|v| Ok(v[0].sum()), &[x.clone()]).unwrap();
        crate::jvpcheck(|v| Ok(v[0].mean()), &[x]).unwrap();
    }
}

//! Layout ops: `transpose`, `permute` and `t`. Each returns a strided view
//! that shares its input's storage (see `tensor::view`); a kernel that needs
//! rows packs it then. Each op's gradient is the inverse permutation of the
//! gradient.

use crate::base::fallible::fallible;
use crate::ops::declare_op;
use smallvec::{smallvec, SmallVec};

use super::{Node, OpRegistry, StructuredOp};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::{sample_tensor, BatchContext, Batched, OpFacts};
use crate::tensor::shape::{normalize_axis, Dims};
use crate::tensor::{check_permutation, Tensor};

/// Swaps two dimensions (PyTorch's `transpose`): a view.
#[derive(Clone, Copy, Debug)]
pub struct Transpose {
    /// One dimension (negative counts from the end).
    pub dim0: isize,
    /// The other.
    pub dim1: isize,
}

impl Default for Transpose {
    /// The last two dimensions.
    fn default() -> Self {
        Transpose { dim0: -2, dim1: -1 }
    }
}

impl Transpose {
    fn permutation(&self, rank: usize) -> Result<Dims> {
        // A 0-d value has one (virtual) dimension to name, as in PyTorch.
        let r = rank.max(1);
        let d0 = normalize_axis("transpose", self.dim0, r)?;
        let d1 = normalize_axis("transpose", self.dim1, r)?;
        let mut perm: Dims = (0..rank).collect();
        if rank > 0 {
            perm.swap(d0, d1);
        }
        Ok(perm)
    }
}

impl StructuredOp for Transpose {
    declare_op!("transpose"(input), linear[0], settings(int dim0, int dim1));
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let perm = self.permutation(inputs[0].rank())?;
        inputs[0].permute_dims(Self::NAME, &perm)
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, _: Node<'_, 'g>) -> Result<Var<'g>> {
        g.try_transpose(self.dim0, self.dim1)
    }
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        permuted_examples(&x[0], &self.permutation(x[0].example_rank())?)
    }
    fn facts(&self) -> OpFacts {
        view_facts(None, &[2, 3, 2])
    }
}

/// Reorders dimensions: output dimension `i` is input dimension `dims[i]`
/// (PyTorch's `permute`).
#[derive(Clone, Debug, Default)]
pub struct Permute {
    /// The order (negative entries count from the end).
    pub dims: SmallVec<[isize; 4]>,
}

impl Permute {
    fn permutation(&self, rank: usize) -> Result<Dims> {
        let perm = self
            .dims
            .iter()
            .map(|&d| normalize_axis("permute", d, rank))
            .collect::<Result<Dims>>()?;
        check_permutation("permute", &perm, rank)?;
        Ok(perm)
    }
}

impl StructuredOp for Permute {
    declare_op!("permute"(input), linear[0], settings(ints dims));
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let perm = self.permutation(inputs[0].rank())?;
        inputs[0].permute_dims(Self::NAME, &perm)
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let perm = self.permutation(n.x(0).shape().len())?;
        let mut inverse: SmallVec<[isize; 4]> = smallvec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i as isize;
        }
        g.try_permute(&inverse)
    }
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        permuted_examples(&x[0], &self.permutation(x[0].example_rank())?)
    }
    fn facts(&self) -> OpFacts {
        let example = Permute {
            dims: smallvec![2, 0, 1],
        };
        view_facts(Some(std::sync::Arc::new(example)), &[2, 3, 2])
    }
}

/// The transpose of a matrix (PyTorch's `t`): a 0-d or 1-d input comes
/// back unchanged; more than 2 dimensions is an error.
#[derive(Clone, Copy, Debug, Default)]
pub struct T;

impl StructuredOp for T {
    declare_op!("t"(input), linear[0]);
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let x = inputs[0];
        match x.rank() {
            0 | 1 => Ok(x.clone()),
            2 => x.permute_dims("t", &[1, 0]),
            r => Err(Error::invalid(
                "t",
                format!(
                    "expects a tensor with <= 2 dimensions, got {r} (shape {:?}; use transpose)",
                    x.shape()
                ),
            )),
        }
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, _: Node<'_, 'g>) -> Result<Var<'g>> {
        g.try_t()
    }
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        match x[0].example_rank() {
            0 | 1 => Ok(x[0].clone()),
            _ => permuted_examples(&x[0], &[1, 0]),
        }
    }
    fn facts(&self) -> OpFacts {
        view_facts(None, &[2, 3])
    }
}

/// Each example of a batched value permuted by `perm` (over the example's
/// axes): the batch axis stays first.
fn permuted_examples<'g>(x: &Batched<'g>, perm: &[usize]) -> Result<Batched<'g>> {
    let mut dims: SmallVec<[isize; 4]> = smallvec![0];
    dims.extend(perm.iter().map(|&p| p as isize + 1));
    Ok(Batched::along_batch(x.value.try_permute(&dims)?))
}

/// The facts of a layout op: linear, so its tangent and second derivative
/// come with it; sample inputs of `shape`.
fn view_facts(
    example: Option<std::sync::Arc<dyn crate::Differentiable>>,
    shape: &[usize],
) -> OpFacts {
    fn sample_for(shape: &[usize]) -> crate::core::SampleInputs {
        match shape.len() {
            2 => |seed| vec![sample_tensor(&[2, 3], seed, 1.0)],
            _ => |seed| vec![sample_tensor(&[2, 3, 2], seed, 1.0)],
        }
    }
    OpFacts {
        tangent: true,
        second_derivative: true,
        example,
        sample_inputs: Some(sample_for(shape)),
        ..OpFacts::opaque(Some(1))
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Transpose::default());
    reg.add_builtin(Permute::default());
    reg.add_builtin(T);
}

impl<'g> Var<'g> {
    fallible! {
        /// Swaps dimensions `dim0` and `dim1` (negative dims count from the end).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec((0..6).map(f64::from).collect(), &[1, 2, 3])?);
        /// let y = x.try_transpose(-1, 1)?;
        /// assert_eq!(y.shape(), &[1, 3, 2]);
        /// assert_eq!(y.value().to_f64_vec(), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        /// assert!(x.try_transpose(0, 3).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_transpose / transpose(&self, dim0: isize, dim1: isize) -> Var<'g> {
            let op = Transpose { dim0, dim1 };
            let perm = op.permutation(self.shape().len())?;
            if perm.iter().enumerate().all(|(i, &p)| i == p) {
                return Ok(self.clone());
            }
            self.graph().record(op, &[self])
        }
    }

    fallible! {
        /// Reorders dimensions: dimension `i` of the result is dimension
        /// `dims[i]` of `self`. `dims` must name every dimension once.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor, DType};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::zeros(&[2, 3, 4], DType::F32)?);
        /// assert_eq!(x.try_permute(&[2, 0, 1])?.shape(), &[4, 2, 3]);
        /// assert_eq!(x.try_permute(&[-1, 0, 1])?.shape(), &[4, 2, 3]);
        /// assert!(x.try_permute(&[0, 0, 1]).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_permute / permute(&self, dims: &[isize]) -> Var<'g> {
            let op = Permute {
                dims: SmallVec::from_slice(dims),
            };
            let perm = op.permutation(self.shape().len())?;
            if perm.iter().enumerate().all(|(i, &p)| i == p) {
                return Ok(self.clone());
            }
            self.graph().record(op, &[self])
        }
    }

    fallible! {
        /// The transpose of a matrix; a 0-d or 1-d value is returned as is, and
        /// more than 2 dimensions is an error (as in PyTorch; use `transpose`).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor, DType};
        /// let g = Graph::new();
        /// let m = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?);
        /// assert_eq!(m.try_t()?.value().to_f64_vec(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        /// assert!(g.variable(Tensor::zeros(&[2, 2, 2], DType::F32)?).try_t().is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_t / t(&self) -> Var<'g> {
            if self.shape().len() < 2 {
                return Ok(self.clone());
            }
            self.graph().record(T, &[self])
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, jvpcheck, DType, Error, Graph, Tensor};

    fn vals(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        Tensor::from_vec((0..n).map(|i| (i as f64 * 0.37).sin()).collect(), shape).unwrap()
    }

    #[test]
    fn forward_values() {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec((0..24).map(f64::from).collect(), &[2, 3, 4]).unwrap());
        let p = x.permute(&[2, 0, 1]);
        assert_eq!(p.shape(), &[4, 2, 3]);
        // p[i][j][k] = x[j][k][i] = 12j + 4k + i.
        let pv = p.value().to_f64_vec();
        assert_eq!(pv[..6], [0.0, 4.0, 8.0, 12.0, 16.0, 20.0]);
        assert_eq!(pv[23], 23.0);
        let t = x.transpose(0, 2);
        assert_eq!(t.shape(), &[4, 3, 2]);
        assert_eq!(t.value().to_f64_vec()[..4], [0.0, 12.0, 4.0, 16.0]);
        // Identity permutations and transposes record nothing.
        let before = g.len();
        assert_eq!(x.transpose(1, -2).shape(), &[2, 3, 4]);
        assert_eq!(x.permute(&[0, 1, 2]).shape(), &[2, 3, 4]);
        let v = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap());
        assert_eq!(v.t().value(), v.value());
        assert_eq!(
            g.variable(Tensor::scalar(1.0)).transpose(0, -1).shape(),
            &[] as &[usize]
        );
        assert_eq!(g.len(), before);
    }

    #[test]
    fn errors_are_typed() {
        let g = Graph::new();
        let x = g.variable(Tensor::zeros(&[2, 3, 4], DType::F32).unwrap());
        assert!(matches!(
            x.try_transpose(0, 3),
            Err(Error::AxisOutOfRange {
                op: "transpose",
                ..
            })
        ));
        assert!(matches!(
            x.try_permute(&[0, 1]),
            Err(Error::InvalidArgument { op: "permute", .. })
        ));
        assert!(x.try_permute(&[0, 1, 1]).is_err());
        assert!(x.try_permute(&[0, 1, 3]).is_err());
        assert!(matches!(
            x.try_t(),
            Err(Error::InvalidArgument { op: "t", .. })
        ));
        assert!(g.apply("t", &[&x]).is_err());
    }

    #[test]
    fn gradients_and_tangents() {
        let x = vals(&[2, 3, 4]);
        let w = vals(&[4, 3, 2]);
        gradcheck(
            |v| Ok(v[0].try_transpose(0, 2)? * &v[1]),
            &[x.clone(), w.clone()],
        )
        .unwrap();
        gradcheck(
            |v| Ok(v[0].try_permute(&[2, 1, 0])? * &v[1]),
            &[x.clone(), w],
        )
        .unwrap();
        gradcheck(
            |v| Ok(v[0].try_permute(&[1, -1, 0])?.tanh()),
            std::slice::from_ref(&x),
        )
        .unwrap();
        let m = vals(&[3, 3]);
        // Two consumers: m and m^T.
        gradcheck(
            |v| Ok(v[0].try_t()? * &v[0] + &v[0]),
            std::slice::from_ref(&m),
        )
        .unwrap();
        jvpcheck(|v| Ok(v[0].try_t()? * &v[0]), &[m]).unwrap();
        jvpcheck(
            |v| Ok(v[0].try_permute(&[1, 2, 0])?.exp()),
            std::slice::from_ref(&x),
        )
        .unwrap();
        jvpcheck(|v| v[0].try_transpose(-1, 0), &[x]).unwrap();
    }

    #[test]
    fn f32_gradients_and_registry() {
        let g = Graph::new();
        let x =
            g.variable(Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap());
        let w = g.constant(
            Tensor::from_vec(vec![1.0f32, 10.0, 100.0, 1.0, 10.0, 100.0], &[3, 2]).unwrap(),
        );
        let y = g.apply("transpose", &[&x]).unwrap();
        assert_eq!(
            y.value().to_vec::<f32>().unwrap(),
            vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
        let grad = (&y * &w).sum().backward().unwrap().wrt(&x);
        assert_eq!(
            grad.to_vec::<f32>().unwrap(),
            vec![1.0, 100.0, 10.0, 10.0, 1.0, 100.0]
        );
        let s = g.variable(Tensor::scalar(1.0f32));
        assert_eq!(g.apply("permute", &[&s]).unwrap().shape(), &[] as &[usize]);
    }
}

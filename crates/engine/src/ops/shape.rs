//! Views: `reshape`, `flatten`, `squeeze`, `unsqueeze`. Each keeps the
//! elements in order, so the output shares the input's storage (no copy);
//! each one's gradient is the output gradient reshaped back, and its tangent
//! the input tangent reshaped forward.

use crate::base::fallible::fallible;
use crate::ops::OpAttributes;
use smallvec::smallvec;

use super::{Node, StructuredOp};
use crate::base::error::{or_panic, Error, Result};
use crate::core::graph::Var;
use crate::core::{sample_tensor, BatchContext, Batched, OpFacts};
use crate::tensor::shape::{checked_numel, normalize_axis, Dims};
use crate::tensor::Tensor;

/// The shape `spec` asks for, with at most one `-1` standing for whatever
/// size makes the element count `numel`.
pub fn infer_shape(op: &'static str, spec: &[isize], numel: usize) -> Result<Dims> {
    let mut inferred = None;
    let mut shape = Dims::with_capacity(spec.len());
    for (i, &d) in spec.iter().enumerate() {
        match d {
            -1 if inferred.is_none() => {
                inferred = Some(i);
                shape.push(1);
            }
            d if d >= 0 => shape.push(d as usize),
            _ => {
                return Err(Error::invalid(
                    op,
                    format!("invalid shape {spec:?}: sizes must be >= 0, with at most one -1"),
                ))
            }
        }
    }
    let known = checked_numel(op, &shape)?;
    let mismatch = || Error::ElementCount {
        op,
        len: numel,
        shape: shape.to_vec(),
    };
    if let Some(i) = inferred {
        // With a zero among the known sizes, -1 could be anything.
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(Error::invalid(
                op,
                format!("shape {spec:?} is invalid for {numel} elements"),
            ));
        }
        shape[i] = numel / known;
    } else if known != numel {
        return Err(mismatch());
    }
    Ok(shape)
}

/// What every view shares, inside its `impl StructuredOp`: one input, its
/// settings the only thing held, the gradient reshaped back to the input's
/// shape and the tangent reshaped forward to the output's.
///
/// Over a batch, each example's output is its input's elements in order
/// with the example's output shape, so the batched value reshaped to the
/// batch followed by that shape is the batched output.
macro_rules! view_rules {
    ($example:expr, $shape:expr) => {
        const INPUTS: &'static [&'static str] = &["input"];
        const HOLDS: crate::Holds = crate::Holds::Settings;
        fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
            let mut shape = Dims::from_slice(&[ctx.size]);
            shape.extend_from_slice(&self.out_shape(x[0].example_shape())?);
            Ok(Batched::along_batch(x[0].value.reshape_dims(&shape)?))
        }
        fn facts(&self) -> OpFacts {
            OpFacts {
                tangent: true,
                second_derivative: true,
                example: Some(std::sync::Arc::new($example)),
                sample_inputs: Some(|seed| vec![sample_tensor(&$shape, seed, 1.0)]),
                ..OpFacts::opaque(Some(1))
            }
        }
        fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            g.reshape_dims(n.x(0).shape())
        }
        fn tangent<'g>(&self, _: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            t.reshape_dims(n.output.shape())
        }
    };
}

/// The same elements with another shape (PyTorch's `reshape`; one size may be `-1`).
#[derive(Clone, Debug, Default)]
pub struct Reshape {
    /// The requested shape, possibly with one `-1`.
    pub shape: smallvec::SmallVec<[isize; 4]>,
}

impl Reshape {
    fn out_shape(&self, shape: &[usize]) -> Result<Dims> {
        infer_shape("reshape", &self.shape, shape.iter().product())
    }
}

impl StructuredOp for Reshape {
    const NAME: &'static str = "reshape";
    view_rules!(
        Reshape {
            shape: smallvec![3, -1]
        },
        [2, 3]
    );
    fn attributes(&self) -> OpAttributes {
        OpAttributes::new().ints("shape", &self.shape)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].reshape(&self.out_shape(inputs[0].shape())?)
    }
}

/// Merges dimensions `start..=end` into one (PyTorch's `flatten`; a 0-d
/// input becomes 1-d).
#[derive(Clone, Copy, Debug)]
pub struct Flatten {
    /// First dimension merged (negative counts from the end).
    pub start: isize,
    /// Last dimension merged (negative counts from the end).
    pub end: isize,
}

impl Default for Flatten {
    fn default() -> Self {
        Flatten { start: 0, end: -1 }
    }
}

impl Flatten {
    fn out_shape(&self, shape: &[usize]) -> Result<Dims> {
        if shape.is_empty() {
            return Ok(smallvec![1]);
        }
        let s = normalize_axis("flatten", self.start, shape.len())?;
        let e = normalize_axis("flatten", self.end, shape.len())?;
        if s > e {
            return Err(Error::invalid(
                "flatten",
                format!("start_dim {} comes after end_dim {}", self.start, self.end),
            ));
        }
        let mut out = Dims::from_slice(&shape[..s]);
        out.push(shape[s..=e].iter().product());
        out.extend_from_slice(&shape[e + 1..]);
        Ok(out)
    }
}

impl StructuredOp for Flatten {
    const NAME: &'static str = "flatten";
    view_rules!(Flatten { start: 1, end: -1 }, [2, 3, 2]);
    fn attributes(&self) -> OpAttributes {
        OpAttributes::new()
            .int("start", self.start)
            .int("end", self.end)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].reshape(&self.out_shape(inputs[0].shape())?)
    }
}

/// Removes size-1 dimensions: all of them, or only `dim` (left alone if its
/// size is not 1, as in PyTorch).
#[derive(Clone, Copy, Debug, Default)]
pub struct Squeeze {
    /// The one dimension to remove, or `None` for every size-1 dimension.
    pub dim: Option<isize>,
}

impl Squeeze {
    fn out_shape(&self, shape: &[usize]) -> Result<Dims> {
        Ok(match self.dim {
            None => shape.iter().copied().filter(|&d| d != 1).collect(),
            // A 0-d tensor accepts dim 0 or -1, as in PyTorch.
            Some(dim) if shape.is_empty() => {
                normalize_axis("squeeze", dim, 1)?;
                Dims::new()
            }
            Some(dim) => {
                let d = normalize_axis("squeeze", dim, shape.len())?;
                let mut out = Dims::from_slice(shape);
                if shape[d] == 1 {
                    out.remove(d);
                }
                out
            }
        })
    }
}

impl StructuredOp for Squeeze {
    const NAME: &'static str = "squeeze";
    view_rules!(Squeeze { dim: None }, [2, 1, 3]);
    fn attributes(&self) -> OpAttributes {
        OpAttributes::new().int_opt("dim", self.dim)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].reshape(&self.out_shape(inputs[0].shape())?)
    }
}

/// Inserts a size-1 dimension at `dim` (in `-rank-1..=rank`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Unsqueeze {
    /// Where the new dimension goes in the output (negative counts from the end).
    pub dim: isize,
}

impl Unsqueeze {
    fn out_shape(&self, shape: &[usize]) -> Result<Dims> {
        let d = normalize_axis("unsqueeze", self.dim, shape.len() + 1)?;
        let mut out = Dims::from_slice(shape);
        out.insert(d, 1);
        Ok(out)
    }
}

impl StructuredOp for Unsqueeze {
    const NAME: &'static str = "unsqueeze";
    view_rules!(Unsqueeze { dim: 1 }, [2, 3]);
    fn attributes(&self) -> OpAttributes {
        OpAttributes::new().int("dim", self.dim)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].reshape(&self.out_shape(inputs[0].shape())?)
    }
}

register_defaults!(Reshape, Flatten, Squeeze, Unsqueeze);

impl<'g> Var<'g> {
    /// Reshapes to an exact shape (no `-1`), recording nothing if it is unchanged.
    #[track_caller]
    pub(crate) fn reshape_dims(&self, shape: &[usize]) -> Result<Var<'g>> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        let shape = shape.iter().map(|&d| d as isize).collect();
        self.graph().record(Reshape { shape }, &[self])
    }

    fallible! {
        /// The same elements in row-major order with shape `shape`, sharing
        /// storage; one size may be `-1` (inferred). A shape with another element
        /// count is `Error::ElementCount`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?);
        /// let y = x.try_reshape(&[3, -1])?;
        /// assert_eq!(y.shape(), &[3, 2]);
        /// assert_eq!(y.value().to_f64_vec(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        /// assert!(x.try_reshape(&[4, -1]).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_reshape / reshape(&self, shape: &[isize]) -> Var<'g> {
            let dims = infer_shape("reshape", shape, self.value().numel())?;
            self.reshape_dims(&dims)
        }
    }

    fallible! {
        /// Merges dimensions `start_dim..=end_dim` into one (negative dims count
        /// from the end; a 0-d value becomes shape `[1]`).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor, DType};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::zeros(&[2, 3, 4, 5], DType::F32)?);
        /// assert_eq!(x.try_flatten(1, -1)?.shape(), &[2, 60]);
        /// assert_eq!(x.try_flatten(1, 2)?.shape(), &[2, 12, 5]);
        /// assert!(x.try_flatten(2, 1).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_flatten / flatten(&self, start_dim: isize, end_dim: isize) -> Var<'g> {
            let op = Flatten {
                start: start_dim,
                end: end_dim,
            };
            if op.out_shape(self.shape())?.as_slice() == self.shape() {
                return Ok(self.clone());
            }
            self.graph().record(op, &[self])
        }
    }

    /// Removes every size-1 dimension.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor, DType};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::zeros(&[1, 3, 1, 2], DType::F64)?);
    /// assert_eq!(x.squeeze().shape(), &[3, 2]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    pub fn squeeze(&self) -> Var<'g> {
        or_panic(self.try_squeeze())
    }

    /// [`squeeze`](Self::squeeze) as a `Result`, for the one API
    /// convention: it cannot fail today.
    pub fn try_squeeze(&self) -> Result<Var<'g>> {
        if !self.shape().contains(&1) {
            return Ok(self.clone());
        }
        self.graph().record(Squeeze { dim: None }, &[self])
    }

    fallible! {
        /// Removes dimension `dim` if its size is 1 (otherwise returns the value
        /// unchanged, as PyTorch does); an out-of-range `dim` is an error.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor, DType};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::zeros(&[1, 3, 1], DType::F64)?);
        /// assert_eq!(x.try_squeeze_dim(-1)?.shape(), &[1, 3]);
        /// assert_eq!(x.try_squeeze_dim(1)?.shape(), &[1, 3, 1]);
        /// assert!(x.try_squeeze_dim(3).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_squeeze_dim / squeeze_dim(&self, dim: isize) -> Var<'g> {
            let op = Squeeze { dim: Some(dim) };
            if op.out_shape(self.shape())?.as_slice() == self.shape() {
                return Ok(self.clone());
            }
            self.graph().record(op, &[self])
        }
    }

    fallible! {
        /// Inserts a size-1 dimension at `dim` (in `-rank-1..=rank`).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2])?);
        /// assert_eq!(x.try_unsqueeze(0)?.shape(), &[1, 2]);
        /// assert_eq!(x.try_unsqueeze(-1)?.shape(), &[2, 1]);
        /// assert!(x.try_unsqueeze(2).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_unsqueeze / unsqueeze(&self, dim: isize) -> Var<'g> {
            self.graph().record(Unsqueeze { dim }, &[self])
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, jvpcheck, DType, Error, Graph, Tensor};

    use crate::tensor::test_util::shaped as t;

    #[test]
    fn views_share_storage_and_keep_order() {
        let g = Graph::new();
        let x = g.variable(t((0..24).map(f64::from).collect(), &[2, 3, 4]));
        for y in [
            x.reshape(&[4, -1]),
            x.flatten(0, 1),
            x.unsqueeze(1).squeeze(),
            x.reshape(&[1, 24, 1]).squeeze_dim(0),
        ] {
            assert!(y.value().shares_storage_with(x.value()));
            assert_eq!(y.value().to_f64_vec(), x.value().to_f64_vec());
        }
        assert_eq!(x.reshape(&[4, -1]).shape(), &[4, 6]);
        assert_eq!(x.flatten(0, 1).shape(), &[6, 4]);
        assert_eq!(x.unsqueeze(-1).shape(), &[2, 3, 4, 1]);
        assert_eq!(x.unsqueeze(-4).shape(), &[1, 2, 3, 4]);
        let s = g.variable(Tensor::scalar(2.0));
        assert_eq!(s.flatten(0, -1).shape(), &[1]);
        assert_eq!(s.unsqueeze(0).shape(), &[1]);
        assert_eq!(s.squeeze_dim(-1).shape(), &[] as &[usize]);
        assert_eq!(s.reshape(&[1, 1]).shape(), &[1, 1]);
    }

    #[test]
    fn bad_shapes_and_dims_are_typed_errors() {
        let g = Graph::new();
        let x = g.variable(Tensor::zeros(&[2, 3], DType::F32).unwrap());
        assert!(matches!(
            x.try_reshape(&[4]),
            Err(Error::ElementCount { op: "reshape", .. })
        ));
        assert!(x.try_reshape(&[-1, -1]).is_err());
        assert!(x.try_reshape(&[-2, 3]).is_err());
        assert!(x.try_reshape(&[5, -1]).is_err());
        let empty = g.variable(Tensor::zeros(&[0, 3], DType::F32).unwrap());
        assert!(empty.try_reshape(&[0, -1]).is_err());
        assert_eq!(empty.reshape(&[3, -1, 1]).shape(), &[3, 0, 1]);
        assert!(matches!(
            x.try_unsqueeze(3),
            Err(Error::AxisOutOfRange {
                op: "unsqueeze",
                axis: 3,
                rank: 3
            })
        ));
        assert!(x.try_squeeze_dim(-3).is_err());
        assert!(x.try_flatten(0, 2).is_err());
        let r = std::panic::catch_unwind(|| {
            let g = Graph::new();
            g.variable(Tensor::zeros(&[2], DType::F32).unwrap())
                .reshape(&[3]);
        });
        assert!(r.is_err());
    }

    #[test]
    fn gradients_and_tangents() {
        let x = t((0..12).map(|i| i as f64 * 0.3 - 1.0).collect(), &[2, 3, 2]);
        let w = t((0..12).map(|i| (i % 5) as f64 - 2.0).collect(), &[3, 4]);
        // Each view, followed by an op whose gradient depends on the layout.
        gradcheck(|v| Ok(v[0].try_reshape(&[3, -1])? * &v[1]), &[x.clone(), w]).unwrap();
        gradcheck(
            |v| Ok(v[0].try_flatten(1, 2)?.tanh()),
            std::slice::from_ref(&x),
        )
        .unwrap();
        gradcheck(
            |v| Ok(v[0].try_unsqueeze(1)?.squeeze().exp()),
            std::slice::from_ref(&x),
        )
        .unwrap();
        // A value with two consumers: a view and the value itself.
        gradcheck(
            |v| Ok(&v[0].reshape(&[12]).reshape(&[2, 3, 2]) * &v[0]),
            std::slice::from_ref(&x),
        )
        .unwrap();
        jvpcheck(
            |v| Ok(v[0].try_reshape(&[-1])?.tanh()),
            std::slice::from_ref(&x),
        )
        .unwrap();
        jvpcheck(|v| Ok(v[0].try_unsqueeze(0)?.squeeze_dim(0)), &[x]).unwrap();
    }

    #[test]
    fn shape_and_linalg_ops_are_registered_under_pytorch_names() {
        let reg = crate::OpRegistry::with_builtins();
        for name in [
            "reshape",
            "flatten",
            "squeeze",
            "unsqueeze",
            "matmul",
            "matmul_nt",
            "matmul_tn",
            "matmul_tt",
            "transpose",
            "permute",
            "t",
            "slice",
            "slice_backward",
            "constant_pad_nd",
            "cat",
            "stack",
            "index_select",
            "index_add",
            "gather",
            "scatter_add",
        ] {
            assert_eq!(reg.get(name).unwrap().name(), name);
        }
    }

    #[test]
    fn f32_and_registry() {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap());
        let y = g.apply("flatten", &[&x]).unwrap();
        assert_eq!(y.shape(), &[4]);
        assert_eq!(y.value().to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
        let grads = (y * 2.0).sum().backward().unwrap();
        assert_eq!(grads.wrt(&x).shape(), &[2, 2]);
        assert_eq!(grads.wrt(&x).to_vec::<f32>().unwrap(), vec![2.0; 4]);
        assert_eq!(
            g.apply("squeeze", &[&x.unsqueeze(0)]).unwrap().shape(),
            &[2, 2]
        );
    }
}

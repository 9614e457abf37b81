//! Indexing: `index_select` and `gather` read at integer positions; their
//! gradients, `index_add` and `scatter_add`, add at those positions, and
//! are ops too (whose own gradients are `index_select` and `gather`), so
//! indexing can be differentiated any number of times.
//!
//! Indices are a [`Tensor`] (f32 or f64) holding integer values, passed as
//! the op's second input, as in PyTorch's signatures: any shape `gather`
//! needs, and visible in the graph. [`Tensor::from_indices`] builds one from
//! `usize`s. Negative, too large and non-integer indices are typed errors.
//! The index input never receives a gradient.

use crate::base::fallible::fallible;
use crate::ops::declare_op;
use crate::ops::OpAttributes;

use super::batching::{example_axis, materialize, on_materialized};
use super::{Node, StructuredOp};
use crate::base::error::{check_dtypes, Error, Result};
use crate::core::graph::Var;
use crate::core::{sample_tensor, BatchContext, Batched, OpFacts};
use crate::kernels::index as kernel;
use crate::tensor::shape::normalize_axis;
use crate::tensor::{DType, Tensor};

impl Tensor {
    /// An f64 index tensor of `shape` for `index_select`, `gather` and
    /// friends (f64 holds every integer up to 2^53 exactly).
    ///
    /// ```
    /// use retrograd::Tensor;
    /// let i = Tensor::from_indices(&[2, 0, 1], &[3])?;
    /// assert_eq!(i.to_f64_vec(), vec![2.0, 0.0, 1.0]);
    /// assert!(Tensor::from_indices(&[1, 2], &[3]).is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn from_indices(values: &[usize], shape: &[usize]) -> Result<Tensor> {
        const EXACT: usize = 1 << 53;
        if let Some(&v) = values.iter().find(|&&v| v > EXACT) {
            return Err(Error::IndexOutOfRange {
                op: "from_indices",
                index: v as i64,
                size: EXACT,
            });
        }
        let v: Vec<f64> = values.iter().map(|&i| i as f64).collect();
        Tensor::from_f64_slice(&v, shape, DType::F64)
    }
}

/// Checks the `[x, index, src]` dtypes and the `index_select`-style index (0-d or 1-d).
fn check_index_vector(op: &'static str, index: &Tensor) -> Result<()> {
    if index.rank() > 1 {
        return Err(Error::invalid(
            op,
            format!(
                "the index must be 0-d or 1-d, got shape {:?}",
                index.shape()
            ),
        ));
    }
    Ok(())
}

fn check_same_dtype(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    check_dtypes(op, a.dtype(), b.dtype())?;
    Ok(())
}

/// The `dim` setting every indexing op carries, by name.
fn dim_attribute(dim: isize) -> OpAttributes {
    OpAttributes::new().int("dim", dim)
}

/// The tangent of `index_add` and `scatter_add` (`x` plus `src` added at
/// the index): the op applied to the tangents, zeros standing in for an
/// `x` without one.
fn add_at_tangent<'g, O: StructuredOp>(
    op: &O,
    t: &[Option<Var<'g>>],
    n: Node<'_, 'g>,
) -> Result<Option<Var<'g>>> {
    let Some(ts) = &t[2] else {
        return Ok(t[0].clone());
    };
    let base = t[0]
        .clone()
        .unwrap_or_else(|| Var::constant_in(ts.graph(), n.x(0).value().zeros_like()));
    ts.graph()
        .record(op.clone(), &[&base, n.x(1), ts])
        .map(Some)
}

/// `op` (an add-at op: `index_add` or `scatter_add`) of `g` into zeros
/// shaped as `x`: the gradient of a read at the index.
fn added_into_zeros<'g, O: StructuredOp>(op: O, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
    let zeros = Var::constant_in(g.graph(), n.x(0).value().zeros_like());
    g.graph().record(op, &[&zeros, n.x(1), g])
}

/// A batch of `index_select`-style indices (`[batch]` for 0-d examples,
/// `[batch, n]` for 1-d ones) as a `gather` or `scatter_add` index for a
/// batched value shaped as `like` but for `n` positions along `axis`:
/// each example's positions along `axis`, repeated over the other axes (a
/// view). Per-example positions are then one gather (or scatter) of the
/// whole batch.
fn spread_index<'g>(index: &Var<'g>, like: &[usize], axis: usize) -> Result<Var<'g>> {
    let batch = index.shape()[0];
    let n = index.value().numel() / batch;
    let mut dims = vec![1; like.len()];
    dims[0] = batch;
    dims[axis] = n;
    let mut shape = like.to_vec();
    shape[axis] = n;
    index.reshape_dims(&dims)?.try_expand(&shape)
}

/// `n` sample indices in `0..size` laid out in `shape`, from `seed`
/// (repeats included, so that adding at an index accumulates).
fn sample_index(shape: &[usize], size: usize, seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<i64> = (0..n as u64)
        .map(|i| ((5 * i + 3 * seed) % size as u64) as i64)
        .collect();
    Tensor::from_vec(v, shape).expect("a valid shape")
}

/// The facts the four indexing ops share: linear in their float inputs,
/// so tangents and derivatives of every order, and `sample` inputs.
fn index_facts(
    arity: usize,
    example: std::sync::Arc<dyn crate::Differentiable>,
    sample: crate::core::SampleInputs,
) -> OpFacts {
    OpFacts::differentiable(Some(arity), example, sample)
}

/// The slices of `x` at `index` along `dim` (PyTorch's `index_select`).
/// Inputs: `[x, index]`.
#[derive(Clone, Copy, Debug, Default)]
pub struct IndexSelect {
    /// The dimension indexed (negative counts from the end).
    pub dim: isize,
}

impl StructuredOp for IndexSelect {
    declare_op!("index_select"(input, index), linear[0], no_grad[1]);
    fn attributes(&self) -> OpAttributes {
        dim_attribute(self.dim)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (x, index) = (inputs[0], inputs[1]);
        let dim = normalize_axis(Self::NAME, self.dim, x.rank())?;
        check_index_vector(Self::NAME, index)?;
        let idx = kernel::indices(Self::NAME, index, x.shape()[dim])?;
        Ok(kernel::index_select(x, dim, &idx))
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        added_into_zeros(IndexAdd { dim: self.dim }, g, n)
    }
    // Shared positions select along the moved axis; per-example positions
    // are a gather of the (materialized) batch at them.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let (input, index) = (&x[0], &x[1]);
        let dim = example_axis(self.dim, input.example_rank());
        let graph = input.value.graph();
        if !index.batched {
            let op = IndexSelect { dim };
            return Ok(Batched::along_batch(
                graph.record(op, &[&input.value, &index.value])?,
            ));
        }
        let input = materialize(input, ctx)?;
        let index = spread_index(&index.value, input.shape(), dim as usize)?;
        Ok(Batched::along_batch(
            graph.record(Gather { dim }, &[&input, &index])?,
        ))
    }
    fn facts(&self) -> OpFacts {
        index_facts(2, std::sync::Arc::new(IndexSelect { dim: -1 }), |seed| {
            vec![
                sample_tensor(&[2, 4], seed, 1.0),
                sample_index(&[3], 4, seed),
            ]
        })
    }
}

/// `x` with the slices of `source` added at `index` along `dim` (PyTorch's
/// `index_add`; repeated indices accumulate). Inputs: `[x, index, source]`.
#[derive(Clone, Copy, Debug, Default)]
pub struct IndexAdd {
    /// The dimension indexed (negative counts from the end).
    pub dim: isize,
}

impl StructuredOp for IndexAdd {
    declare_op!("index_add"(input, index, source), no_grad[1]);
    fn attributes(&self) -> OpAttributes {
        dim_attribute(self.dim)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        const OP: &str = "index_add";
        let (x, index, src) = (inputs[0], inputs[1], inputs[2]);
        check_same_dtype(OP, x, src)?;
        let dim = normalize_axis(OP, self.dim, x.rank())?;
        check_index_vector(OP, index)?;
        let idx = kernel::indices(OP, index, x.shape()[dim])?;
        let fits = src.rank() == x.rank()
            && (0..x.rank())
                .all(|d| src.shape()[d] == if d == dim { idx.len() } else { x.shape()[d] });
        if !fits {
            return Err(Error::shape_mismatch(OP, x.shape(), src.shape()));
        }
        kernel::index_add(x, dim, &idx, src)
    }
    fn grad<'g>(&self, i: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        match i {
            0 => Ok(g.clone()),
            _ => g
                .graph()
                .record(IndexSelect { dim: self.dim }, &[g, n.x(1)]),
        }
    }
    fn tangents<'g>(&self, t: &[Option<Var<'g>>], n: Node<'_, 'g>) -> Result<Option<Var<'g>>> {
        add_at_tangent(self, t, n)
    }
    // Shared positions add along the moved axis; per-example positions are
    // a scatter-add of the whole batch at them.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let dim = example_axis(self.dim, x[0].example_rank());
        let input = materialize(&x[0], ctx)?;
        let source = materialize(&x[2], ctx)?;
        let graph = input.graph();
        let out = if x[1].batched {
            let index = spread_index(&x[1].value, source.shape(), dim as usize)?;
            graph.record(ScatterAdd { dim }, &[&input, &index, &source])?
        } else {
            graph.record(IndexAdd { dim }, &[&input, &x[1].value, &source])?
        };
        Ok(Batched::along_batch(out))
    }
    fn facts(&self) -> OpFacts {
        index_facts(3, std::sync::Arc::new(IndexAdd { dim: -1 }), |seed| {
            vec![
                sample_tensor(&[2, 4], seed, 1.0),
                sample_index(&[3], 4, seed),
                sample_tensor(&[2, 3], seed + 3, 1.0),
            ]
        })
    }
}

/// `out[p] = x[p with dim replaced by index[p]]` (PyTorch's `gather`).
/// Inputs: `[x, index]`, `index` of `x`'s rank and no larger than `x` in
/// any dimension but `dim`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Gather {
    /// The dimension indexed (negative counts from the end).
    pub dim: isize,
}

impl StructuredOp for Gather {
    declare_op!("gather"(input, index), linear[0], no_grad[1]);
    fn attributes(&self) -> OpAttributes {
        dim_attribute(self.dim)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let dim = normalize_axis(Self::NAME, self.dim, inputs[0].rank())?;
        kernel::gather(Self::NAME, inputs[0], dim, inputs[1])
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        added_into_zeros(ScatterAdd { dim: self.dim }, g, n)
    }
    // Positions are per element, so with the batch a leading axis of both
    // the input and the index, the op maps over it as it is.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let dim = example_axis(self.dim, x[0].example_rank());
        on_materialized(&Gather { dim }, x, ctx)
    }
    fn facts(&self) -> OpFacts {
        index_facts(2, std::sync::Arc::new(Gather { dim: 0 }), |seed| {
            vec![
                sample_tensor(&[3, 4], seed, 1.0),
                sample_index(&[2, 4], 3, seed),
            ]
        })
    }
}

/// `x` with `src[p]` added at `p with dim replaced by index[p]` for every
/// position `p` of `index` (PyTorch's `scatter_add`; repeated targets
/// accumulate). Inputs: `[x, index, src]`; only the index-shaped corner of
/// a larger `src` is used.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScatterAdd {
    /// The dimension indexed (negative counts from the end).
    pub dim: isize,
}

impl StructuredOp for ScatterAdd {
    declare_op!("scatter_add"(input, index, src), no_grad[1]);
    fn attributes(&self) -> OpAttributes {
        dim_attribute(self.dim)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let dim = normalize_axis(Self::NAME, self.dim, inputs[0].rank())?;
        kernel::scatter_add(Self::NAME, inputs[0], dim, inputs[1], inputs[2])
    }
    fn grad<'g>(&self, i: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        if i == 0 {
            return Ok(g.clone());
        }
        let (index, src) = (n.x(1), n.x(2));
        let taken = g.graph().record(Gather { dim: self.dim }, &[g, index])?;
        // Elements of src outside the index's shape were not used: zero gradient.
        let pads: Vec<isize> = src
            .shape()
            .iter()
            .zip(index.shape())
            .rev()
            .flat_map(|(&s, &i)| [0, (s - i) as isize])
            .collect();
        taken.try_pad(&pads, 0.0)
    }
    fn tangents<'g>(&self, t: &[Option<Var<'g>>], n: Node<'_, 'g>) -> Result<Option<Var<'g>>> {
        add_at_tangent(self, t, n)
    }
    // As `gather`: the batch a leading axis of the input, index and source.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let dim = example_axis(self.dim, x[0].example_rank());
        on_materialized(&ScatterAdd { dim }, x, ctx)
    }
    fn facts(&self) -> OpFacts {
        // A source larger than the index: only its index-shaped corner adds.
        index_facts(3, std::sync::Arc::new(ScatterAdd { dim: -1 }), |seed| {
            vec![
                sample_tensor(&[2, 4], seed, 1.0),
                sample_index(&[2, 3], 4, seed),
                sample_tensor(&[2, 4], seed + 3, 1.0),
            ]
        })
    }
}

register_defaults!(IndexSelect, IndexAdd, Gather, ScatterAdd);

impl<'g> Var<'g> {
    /// Records the indexing op `op` on this value, `index` (a constant of
    /// the graph: indices carry no gradient) and, for an op that adds at
    /// the index, `src`.
    fn record_at<O: StructuredOp>(
        &self,
        op: O,
        index: &Tensor,
        src: Option<&Var<'g>>,
    ) -> Result<Var<'g>> {
        let index = Var::constant_in(self.graph(), index.clone());
        match src {
            Some(src) => self.graph().record(op, &[self, &index, src]),
            None => self.graph().record(op, &[self, &index]),
        }
    }

    fallible! {
        /// The slices at positions `index` (a 0-d or 1-d tensor of integer
        /// values) along `dim`: the result has `self`'s shape with `dim` of size
        /// `index.numel()`. Out-of-range or non-integer indices are errors.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let table = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?);
        /// let rows = table.try_index_select(0, &Tensor::from_indices(&[2, 0, 2], &[3])?)?;
        /// assert_eq!(rows.value().to_f64_vec(), vec![5.0, 6.0, 1.0, 2.0, 5.0, 6.0]);
        /// // Row 2 was used twice, row 1 never.
        /// let grad = rows.sum().backward()?.wrt(&table);
        /// assert_eq!(grad.to_f64_vec(), vec![1.0, 1.0, 0.0, 0.0, 2.0, 2.0]);
        /// assert!(table.try_index_select(0, &Tensor::from_indices(&[3], &[1])?).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_index_select / index_select(&self, dim: isize, index: &Tensor) -> Var<'g> {
            self.record_at(IndexSelect { dim }, index, None)
        }
    }

    fallible! {
        /// `self` with the slices of `source` added at positions `index` along
        /// `dim` (repeated positions accumulate). `source` has `self`'s shape
        /// with `dim` of size `index.numel()`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor, DType};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::zeros(&[3], DType::F64)?);
        /// let s = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3])?);
        /// let y = x.try_index_add(0, &Tensor::from_indices(&[0, 2, 0], &[3])?, &s)?;
        /// assert_eq!(y.value().to_f64_vec(), vec![4.0, 0.0, 2.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_index_add / index_add(&self, dim: isize, index: &Tensor, source: &Var<'g>) -> Var<'g> {
            self.record_at(IndexAdd { dim }, index, Some(source))
        }
    }

    fallible! {
        /// Picks one element along `dim` for every position of `index` (a tensor
        /// of integer values with `self`'s rank, no larger than `self` in other
        /// dimensions): `out[i][j] = self[i][index[i][j]]` for `dim = 1`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let logits = g.variable(Tensor::from_vec(vec![0.1, 0.7, 0.2, 0.5, 0.3, 0.2], &[2, 3])?);
        /// let picked = logits.try_gather(1, &Tensor::from_indices(&[1, 0], &[2, 1])?)?;
        /// assert_eq!(picked.shape(), &[2, 1]);
        /// assert_eq!(picked.value().to_f64_vec(), vec![0.7, 0.5]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_gather / gather(&self, dim: isize, index: &Tensor) -> Var<'g> {
            self.record_at(Gather { dim }, index, None)
        }
    }

    fallible! {
        /// `self` with `src[p]` added at `p` with `dim` replaced by `index[p]`,
        /// for every position `p` of `index` (the inverse of `gather`).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor, DType};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::zeros(&[2, 3], DType::F64)?);
        /// let src = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2, 1])?);
        /// let y = x.try_scatter_add(1, &Tensor::from_indices(&[1, 0], &[2, 1])?, &src)?;
        /// assert_eq!(y.value().to_f64_vec(), vec![0.0, 1.0, 0.0, 2.0, 0.0, 0.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_scatter_add / scatter_add(&self, dim: isize, index: &Tensor, src: &Var<'g>) -> Var<'g> {
            self.record_at(ScatterAdd { dim }, index, Some(src))
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, jvpcheck, DType, Error, Graph, Tensor};

    fn vals(shape: &[usize], seed: f64) -> Tensor {
        let n: usize = shape.iter().product();
        Tensor::from_vec(
            (0..n).map(|i| (i as f64 * 0.9 + seed).sin()).collect(),
            shape,
        )
        .unwrap()
    }

    fn idx(v: &[usize], shape: &[usize]) -> Tensor {
        Tensor::from_indices(v, shape).unwrap()
    }

    #[test]
    fn forward_values() {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec((0..12).map(f64::from).collect(), &[3, 4]).unwrap());
        let cols = x.index_select(-1, &idx(&[3, 3, 0], &[3]));
        assert_eq!(cols.shape(), &[3, 3]);
        assert_eq!(
            cols.value().to_f64_vec(),
            vec![3., 3., 0., 7., 7., 4., 11., 11., 8.]
        );
        let one = x.index_select(0, &Tensor::scalar(1.0f32));
        assert_eq!(one.shape(), &[1, 4]);
        // torch.gather(x, 0, [[2, 0, 1, 2]]) = [[8, 1, 6, 11]].
        let gth = x.gather(0, &idx(&[2, 0, 1, 2], &[1, 4]));
        assert_eq!(gth.value().to_f64_vec(), vec![8., 1., 6., 11.]);
        let sa = x.scatter_add(
            0,
            &idx(&[2, 0, 1, 2], &[1, 4]),
            &g.constant(Tensor::ones(&[1, 4], DType::F64).unwrap()),
        );
        assert_eq!(sa.value().to_f64_vec()[8..], [9.0, 9.0, 10.0, 12.0]);
    }

    #[test]
    fn bad_indices_are_typed_errors() {
        let g = Graph::new();
        let x = g.variable(Tensor::zeros(&[3, 4], DType::F32).unwrap());
        let neg = Tensor::from_vec(vec![-1.0], &[1]).unwrap();
        assert!(matches!(
            x.try_index_select(0, &neg),
            Err(Error::IndexOutOfRange {
                op: "index_select",
                index: -1,
                size: 3
            })
        ));
        let frac = Tensor::from_vec(vec![0.5], &[1]).unwrap();
        assert!(matches!(
            x.try_gather(1, &frac.reshape(&[1, 1]).unwrap()),
            Err(Error::InvalidArgument { op: "gather", .. })
        ));
        assert!(matches!(
            x.try_index_select(2, &idx(&[0], &[1])),
            Err(Error::AxisOutOfRange { .. })
        ));
        assert!(x.try_index_select(0, &idx(&[0, 1], &[1, 2])).is_err());
        assert!(x.try_gather(0, &idx(&[0; 5], &[1, 5])).is_err());
        assert!(x.try_gather(0, &idx(&[0; 3], &[3])).is_err());
        let wrong = g.variable(Tensor::zeros(&[2, 4], DType::F32).unwrap());
        assert!(matches!(
            x.try_index_add(0, &idx(&[0], &[1]), &wrong),
            Err(Error::ShapeMismatch { .. })
        ));
        let f64s = g.variable(Tensor::zeros(&[1, 4], DType::F64).unwrap());
        assert!(matches!(
            x.try_index_add(0, &idx(&[0], &[1]), &f64s),
            Err(Error::DTypeMismatch { .. })
        ));
        assert!(x.try_scatter_add(0, &idx(&[0; 4], &[1, 4]), &f64s).is_err());
    }

    #[test]
    fn gradients_and_tangents() {
        let x = vals(&[3, 4], 0.2);
        let rows = idx(&[2, 0, 2, 1], &[4]);
        gradcheck(
            |v| v[0].try_index_select(0, &rows),
            std::slice::from_ref(&x),
        )
        .unwrap();
        gradcheck(
            |v| Ok(v[0].try_index_select(1, &rows)? * &v[0]),
            std::slice::from_ref(&x),
        )
        .unwrap();
        let gi = idx(&[1, 0, 3, 3, 2, 2], &[3, 2]);
        gradcheck(
            |v| Ok(v[0].try_gather(1, &gi)?.exp()),
            std::slice::from_ref(&x),
        )
        .unwrap();
        let src = vals(&[4, 4], 0.5);
        gradcheck(
            |v| v[0].try_index_add(0, &rows, &v[1]),
            &[x.clone(), src.clone()],
        )
        .unwrap();
        // src larger than the index: only its index-shaped corner is used.
        let big = vals(&[3, 3], 0.8);
        gradcheck(
            |v| v[0].try_scatter_add(1, &gi, &v[1]),
            &[x.clone(), big.clone()],
        )
        .unwrap();
        jvpcheck(
            |v| v[0].try_index_select(0, &rows),
            std::slice::from_ref(&x),
        )
        .unwrap();
        jvpcheck(|v| v[0].try_gather(1, &gi), std::slice::from_ref(&x)).unwrap();
        jvpcheck(|v| v[0].try_index_add(0, &rows, &v[1]), &[x.clone(), src]).unwrap();
        jvpcheck(|v| v[0].try_scatter_add(1, &gi, &v[1]), &[x, big]).unwrap();
    }

    #[test]
    fn gradient_ops_are_differentiable() {
        // index_add and scatter_add are the gradients; check theirs in turn
        // through a nonlinearity so second-order terms matter.
        let base = vals(&[3, 2], 0.1);
        let src = vals(&[2, 2], 0.4);
        let i = idx(&[2, 2], &[2]);
        gradcheck(
            |v| Ok(v[0].try_index_add(0, &i, &v[1])?.tanh()),
            &[base.clone(), src.clone()],
        )
        .unwrap();
        let gi = idx(&[0, 2, 1, 1], &[2, 2]);
        gradcheck(
            |v| Ok(v[0].try_scatter_add(0, &gi, &v[1])?.tanh()),
            &[base, src],
        )
        .unwrap();
    }

    #[test]
    fn f32_and_registry() {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap());
        let i = g.constant(Tensor::from_vec(vec![2.0f32, 2.0], &[2]).unwrap());
        let y = g.apply("index_select", &[&x, &i]).unwrap();
        assert_eq!(y.value().to_vec::<f32>().unwrap(), vec![3.0, 3.0]);
        let grads = y.sum().backward().unwrap();
        assert_eq!(grads.wrt(&x).to_vec::<f32>().unwrap(), vec![0.0, 0.0, 2.0]);
        let gth = g.apply("gather", &[&x, &i]).unwrap();
        assert_eq!(gth.value().to_vec::<f32>().unwrap(), vec![3.0, 3.0]);
        assert!(Tensor::from_indices(&[usize::MAX], &[1]).is_err());
    }
}

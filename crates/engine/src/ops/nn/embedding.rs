//! `embedding` (rows of a `[V, D]` weight picked by integer indices of any
//! shape, giving `[..., D]`) and its backward `embedding_dense_backward`
//! (a scatter-add into a zero `[V, D]`). Gather and scatter-add are each
//! other's transpose, so each op's derivative is the other: gradients of
//! gradients work.
//!
//! `padding_idx` follows PyTorch: the padding row is gathered like any
//! other, but receives no gradient. The derivative of that backward (and
//! the forward tangent) therefore treats padding positions as constant,
//! which is what the private `zero_padding` flag of [`Embedding`] does.

use std::sync::Arc;

use super::support::{
    check_indices, index_source, indices_from_tensor, to_i64_list, IndexSource, Indices, IntIndex,
};
use crate::base::error::{check_dtypes, Error, Result};
use crate::core::graph::Var;
use crate::core::{sample_tensor, BatchContext, Batched, OpAttributes, OpFacts};
use crate::kernels::nn::sparse;
use crate::ops::batching::materialize;
use crate::ops::{Node, StructuredOp};
use crate::tensor::{DType, Dims, Tensor};

/// Indices stored in an op, with the shape they are laid out in.
#[derive(Clone, Debug, PartialEq)]
struct StoredIndices {
    values: Arc<[i64]>,
    shape: Dims,
}

/// Where the indices of an embedding op come from: stored, or (through
/// `Graph::apply`) a float tensor of indices as the op's last input.
#[derive(Clone, Debug, Default, PartialEq)]
struct IndexSpec {
    stored: Option<StoredIndices>,
    padding_idx: Option<i64>,
}

/// Validated indices and the padding row, for a table of `rows` rows.
struct Resolved {
    values: Vec<usize>,
    shape: Dims,
    padding: Option<usize>,
    stored: IndexSpec,
}

impl IndexSpec {
    /// Stored indices are data a compiled step would reuse (see [`crate::Holds`]).
    fn holds(&self) -> crate::Holds {
        match self.stored {
            Some(_) => crate::Holds::data(
                "indices stored in the op (given to embedding as a list); pass them as a \
                 tensor, the step's input (`x[1].value()`), so that every run reads its own",
            ),
            None => crate::Holds::Settings,
        }
    }

    /// `padding_idx` when set, and the stored `indices` with their
    /// `index_shape` when the op holds them (rather than taking an input).
    fn attributes(&self) -> OpAttributes {
        let attrs = match &self.stored {
            Some(s) => OpAttributes::new()
                .ints("indices", &s.values)
                .ints("index_shape", &s.shape),
            None => OpAttributes::new(),
        };
        attrs.int_opt("padding_idx", self.padding_idx)
    }

    fn arity(&self, leading: usize) -> usize {
        leading + usize::from(self.stored.is_none())
    }

    fn resolve(&self, op: &'static str, rows: usize, input: Option<&Tensor>) -> Result<Resolved> {
        let stored = match (&self.stored, input) {
            (Some(s), None) => s.clone(),
            (None, Some(t)) => StoredIndices {
                values: indices_from_tensor(op, t)?,
                shape: Dims::from_slice(t.shape()),
            },
            _ => {
                return Err(Error::invalid(
                    op,
                    "indices must be stored in the op or passed as its last input, not both",
                ))
            }
        };
        check_indices(op, &stored.values, rows, None)?;
        let padding = self
            .padding_idx
            .map(|p| {
                let r = rows as i64;
                if (-r..r).contains(&p) {
                    Ok(if p < 0 { p + r } else { p } as usize)
                } else {
                    Err(Error::IndexOutOfRange {
                        op,
                        index: p,
                        size: rows,
                    })
                }
            })
            .transpose()?;
        Ok(Resolved {
            values: stored.values.iter().map(|&i| i as usize).collect(),
            shape: stored.shape.clone(),
            padding,
            stored: IndexSpec {
                stored: Some(stored),
                padding_idx: self.padding_idx,
            },
        })
    }
}

impl IndexSpec {
    /// Indices given as an input, with this spec's padding row (`None`:
    /// none): the op over per-example tables stacked into one.
    fn as_input(padding_idx: Option<i64>) -> Self {
        IndexSpec {
            stored: None,
            padding_idx,
        }
    }

    /// The padding row of a table of `rows` rows (already checked by the
    /// op that recorded the example).
    fn padding_row(&self, rows: usize) -> Option<i64> {
        self.padding_idx
            .map(|p| if p < 0 { p + rows as i64 } else { p })
    }
}

/// A batch of tables `[B, V, D]` side by side as one `[V, B·D]` table:
/// one lookup then reads every example's row at once (the batch folded
/// into the embedding dimension, so the indices and the padding row stay
/// as they are).
fn side_by_side<'g>(tables: &Var<'g>) -> Result<Var<'g>> {
    let &[b, v, d] = tables.shape() else {
        unreachable!("a batch of [V, D] tables")
    };
    tables.try_permute(&[1, 0, 2])?.reshape_dims(&[v, b * d])
}

/// `x` with the axis `from` moved to the front.
fn axis_to_front<'g>(x: &Var<'g>, from: usize) -> Result<Var<'g>> {
    let mut dims: Vec<isize> = (0..x.shape().len() as isize).collect();
    dims.remove(from);
    dims.insert(0, from as isize);
    x.try_permute(&dims)
}

/// A batch of indices `[B, ...]` into `B` stacked tables of `rows` rows
/// each: example `b`'s indices plus `b · rows`, as f64 (arithmetic is on
/// floats, and f64 holds every index up to 2^53 exactly).
fn offset_indices<'g>(ids: &Var<'g>, rows: usize) -> Result<Var<'g>> {
    let batch = ids.shape()[0];
    let offsets: Vec<f64> = (0..batch).map(|b| (b * rows) as f64).collect();
    let mut shape = vec![1; ids.shape().len()];
    shape[0] = batch;
    let offsets = Tensor::from_f64_slice(&offsets, &shape, DType::F64)?;
    ids.try_to_dtype(DType::F64)?
        .try_add(&Var::constant_in(ids.graph(), offsets))
}

/// Where a batch of indices `[B, ...]` is the padding row `p`, as a bool
/// `[B, ..., 1]` mask (for values `[B, ..., D]`).
fn padding_mask<'g>(ids: &Var<'g>, p: i64) -> Result<Var<'g>> {
    let p = Var::constant_in(ids.graph(), Tensor::scalar_of(p as f64, ids.dtype()));
    ids.try_eq(&p)?.try_unsqueeze(-1)
}

/// A value that only gives a table's shape and dtype (an expanded zero,
/// no elements).
fn shape_of_table<'g>(like: &Var<'g>, shape: &[usize]) -> Result<Var<'g>> {
    let zero = Var::constant_in(like.graph(), Tensor::scalar_of(0.0, like.dtype()));
    zero.try_expand(shape)
}

/// The `[V, D]` shape of an embedding table, checked.
fn table_dims(op: &'static str, w: &Tensor) -> Result<(usize, usize)> {
    match *w.shape() {
        [v, d] => Ok((v, d)),
        _ => Err(Error::invalid(
            op,
            format!(
                "expects a weight of shape [num_embeddings, dim], got {:?}",
                w.shape()
            ),
        )),
    }
}

/// Rows of a weight `[V, D]` picked by indices: output `[..., D]` for
/// indices of shape `[...]`. Inputs: the weight, and unless stored, the
/// indices as floats. The registry holds it with no stored indices.
#[derive(Clone, Debug, Default)]
pub struct Embedding {
    spec: IndexSpec,
    /// Gather zeros at padding positions (the derivative of the backward).
    zero_padding: bool,
}

impl Embedding {
    /// An embedding with `indices` (laid out in `index_shape`) stored in the op.
    pub fn new<I: IntIndex>(
        indices: &[I],
        index_shape: &[usize],
        padding_idx: Option<i64>,
    ) -> Result<Self> {
        let n = crate::tensor::shape::checked_numel("embedding", index_shape)?;
        if n != indices.len() {
            return Err(Error::ElementCount {
                op: "embedding",
                len: indices.len(),
                shape: index_shape.to_vec(),
            });
        }
        Ok(Embedding {
            spec: IndexSpec {
                stored: Some(StoredIndices {
                    values: to_i64_list(indices),
                    shape: Dims::from_slice(index_shape),
                }),
                padding_idx,
            },
            zero_padding: false,
        })
    }
}

/// The gradient of [`Embedding`] with respect to its weight: the rows of
/// `g` (`[..., D]`) added into a zero `[V, D]` at their indices, padding
/// row skipped. Inputs: `g`, the weight (for its shape), and unless
/// stored, the indices as floats.
#[derive(Clone, Debug, Default)]
pub struct EmbeddingDenseBackward {
    spec: IndexSpec,
}

impl IndexSpec {
    /// [`resolve`](Self::resolve) for a node's table and optional index input.
    fn of_node(&self, op: &'static str, n: Node<'_, '_>, table: usize) -> Result<Resolved> {
        let (v, _) = table_dims(op, n.x(table).value())?;
        self.resolve(op, v, n.inputs.get(table + 1).map(|t| t.value()))
    }
}

impl StructuredOp for Embedding {
    const NAME: &'static str = "embedding";
    const INPUTS: &'static [&'static str] = &["weight", "indices"];
    fn holds(&self) -> crate::Holds {
        self.spec.holds()
    }
    const NO_GRAD: &'static [usize] = &[1];
    fn arity(&self) -> Option<usize> {
        Some(self.spec.arity(1))
    }
    fn attributes(&self) -> OpAttributes {
        self.spec.attributes()
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let w = x[0];
        let (v, d) = table_dims(Self::NAME, w)?;
        let r = self.spec.resolve(Self::NAME, v, x.get(1).copied())?;
        let mut shape = r.shape.clone();
        shape.push(d);
        let zero_row = r.padding.filter(|_| self.zero_padding);
        crate::with_dtype!(Self::NAME, w.dtype(), T => {
            let src = w.as_slice_of::<T>();
            Ok(Tensor::build::<T>(shape, |out| sparse::gather_rows(src, d, &r.values, zero_row, out)))
        })
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        // Indices given as an input stay an input of the backward node, so
        // a compiled step replays it on each run's indices.
        if let Some(ids) = n.inputs.get(1) {
            let spec = self.spec.clone();
            return g
                .graph()
                .record(EmbeddingDenseBackward { spec }, &[g, n.x(0), ids]);
        }
        let spec = self.spec.of_node(Self::NAME, n, 0)?.stored;
        g.graph()
            .record(EmbeddingDenseBackward { spec }, &[g, n.x(0)])
    }
    fn tangent<'g>(&self, _: usize, tw: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        // Linear in the weight, but padding rows stay constant.
        let spec = self.spec.of_node(Self::NAME, n, 0)?.stored;
        let zero_padding = true;
        tw.graph().record(Embedding { spec, zero_padding }, &[tw])
    }
    // A shared table reads a batch of indices as it is. A batch of tables
    // with shared indices is one table of the tables side by side. A batch
    // of tables and of indices is one table of the tables stacked, read at
    // offset indices; its padding rows are then several, so the lookup
    // has none, and padding positions take their row from a side-by-side
    // lookup that has it (its value, without a gradient), or zero.
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        let (w, graph) = (&x[0], x[0].value.graph());
        let ids = x.get(1).filter(|ids| ids.batched);
        if !w.batched {
            let values: Vec<&Var<'g>> = x.iter().map(|x| &x.value).collect();
            return Ok(Batched::along_batch(graph.record(self.clone(), &values)?));
        }
        let &[b, v, d] = w.value.shape() else {
            return Err(Error::invalid(
                Self::NAME,
                "expects [num_embeddings, dim] tables",
            ));
        };
        let Some(ids) = ids else {
            let mut inputs = vec![side_by_side(&w.value)?];
            inputs.extend(x.get(1).map(|ids| ids.value.clone()));
            let refs: Vec<&Var<'g>> = inputs.iter().collect();
            let rows = graph.record(self.clone(), &refs)?;
            let mut shape = rows.shape().to_vec();
            shape.pop();
            shape.extend([b, d]);
            let rows = rows.reshape_dims(&shape)?;
            return Ok(Batched::along_batch(axis_to_front(&rows, shape.len() - 2)?));
        };
        let stacked = w.value.reshape_dims(&[b * v, d])?;
        let lookup = Embedding {
            spec: IndexSpec::as_input(None),
            zero_padding: false,
        };
        let rows = graph.record(lookup, &[&stacked, &offset_indices(&ids.value, v)?])?;
        let Some(p) = self.spec.padding_row(v) else {
            return Ok(Batched::along_batch(rows));
        };
        let at_padding = padding_mask(&ids.value, p)?;
        if self.zero_padding {
            return Ok(Batched::along_batch(
                rows.try_masked_fill(&at_padding, 0.0)?,
            ));
        }
        let padding = Embedding {
            spec: IndexSpec::as_input(Some(p)),
            zero_padding: false,
        };
        let p = Var::constant_in(graph, Tensor::scalar_of(p as f64, DType::I64));
        let padding_rows = graph.record(padding, &[&side_by_side(&w.value)?, &p])?;
        let mut shape = vec![1; rows.shape().len()];
        (shape[0], shape[rows.shape().len() - 1]) = (b, d);
        let padding_rows = padding_rows.reshape_dims(&shape)?;
        Ok(Batched::along_batch(
            padding_rows.try_where(&at_padding, &rows)?,
        ))
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            sample_inputs: Some(|seed| vec![sample_tensor(&[5, 3], seed, 1.0), sample_ids(seed)]),
            ..OpFacts::opaque(Some(2))
        }
    }
}

/// Sample indices `[2, 3]` into a table of 5 rows, from `seed` (repeats
/// included, so that the gradient accumulates).
fn sample_ids(seed: u64) -> Tensor {
    let v: Vec<i64> = (0..6).map(|i| ((2 * i + seed) % 5) as i64).collect();
    Tensor::from_vec(v, &[2, 3]).expect("a valid shape")
}

impl StructuredOp for EmbeddingDenseBackward {
    const NAME: &'static str = "embedding_dense_backward";
    const INPUTS: &'static [&'static str] = &["grad", "weight", "indices"];
    fn holds(&self) -> crate::Holds {
        self.spec.holds()
    }
    const LINEAR: &'static [usize] = &[0];
    /// The weight gives the table's shape; the indices are indices.
    const NO_GRAD: &'static [usize] = &[1, 2];
    fn arity(&self) -> Option<usize> {
        Some(self.spec.arity(2))
    }
    fn attributes(&self) -> OpAttributes {
        self.spec.attributes()
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let (g, w) = (x[0], x[1]);
        let (v, d) = table_dims(Self::NAME, w)?;
        let r = self.spec.resolve(Self::NAME, v, x.get(2).copied())?;
        let mut expect = r.shape.clone();
        expect.push(d);
        if g.shape() != expect.as_slice() {
            return Err(Error::shape_mismatch(Self::NAME, &expect, g.shape()));
        }
        check_dtypes(Self::NAME, g.dtype(), w.dtype())?;
        crate::with_dtype!(Self::NAME, g.dtype(), T => {
            let src = g.as_slice_of::<T>();
            Ok(Tensor::build::<T>(Dims::from_slice(&[v, d]), |out| sparse::scatter_add_rows(src, d, &r.values, v, r.padding, out)))
        })
    }
    fn grad<'g>(&self, _: usize, g2: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        // The transpose of a scatter-add skipping padding is a gather with zeros there.
        let zero_padding = true;
        if let Some(ids) = n.inputs.get(2) {
            let spec = self.spec.clone();
            return g2
                .graph()
                .record(Embedding { spec, zero_padding }, &[g2, ids]);
        }
        let spec = self.spec.of_node(Self::NAME, n, 1)?.stored;
        g2.graph().record(Embedding { spec, zero_padding }, &[g2])
    }
    // The transpose of `embedding`'s rule: a batch of gradients with shared
    // indices adds into tables side by side; with a batch of indices, into
    // tables stacked at offset indices, the padding positions' gradients
    // zeroed first (the stacked tables have several padding rows). The
    // weight gives only the table's shape: one that alone is batched
    // changes nothing.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let (g, graph) = (&x[0], x[0].value.graph());
        let &[v, d] = x[1].example_shape() else {
            return Err(Error::invalid(
                Self::NAME,
                "expects a [num_embeddings, dim] weight",
            ));
        };
        let ids = x.get(2).filter(|ids| ids.batched);
        let other_ids = x.get(2).map(|ids| ids.value.clone());
        if ids.is_none() && !g.batched {
            let mut inputs = vec![g.value.clone(), shape_of_table(&g.value, &[v, d])?];
            inputs.extend(other_ids);
            let refs: Vec<&Var<'g>> = inputs.iter().collect();
            return Ok(Batched::shared(graph.record(self.clone(), &refs)?));
        }
        let b = ctx.size;
        let Some(ids) = ids else {
            // [B, ..., D] -> [..., B, D] -> [..., B·D], into [V, B·D].
            let r = g.value.shape().len();
            let mut dims: Vec<isize> = (1..r as isize - 1).collect();
            dims.extend([0, r as isize - 1]);
            let mut shape = g.value.shape()[1..r - 1].to_vec();
            shape.push(b * d);
            let folded = g.value.try_permute(&dims)?.reshape_dims(&shape)?;
            let mut inputs = vec![folded.clone(), shape_of_table(&folded, &[v, b * d])?];
            inputs.extend(other_ids);
            let refs: Vec<&Var<'g>> = inputs.iter().collect();
            let sums = graph
                .record(self.clone(), &refs)?
                .reshape_dims(&[v, b, d])?;
            return Ok(Batched::along_batch(sums.try_permute(&[1, 0, 2])?));
        };
        let mut g = materialize(g, ctx)?;
        if let Some(p) = self.spec.padding_row(v) {
            g = g.try_masked_fill(&padding_mask(&ids.value, p)?, 0.0)?;
        }
        let scatter = EmbeddingDenseBackward {
            spec: IndexSpec::as_input(None),
        };
        let table = shape_of_table(&g, &[b * v, d])?;
        let sums = graph.record(scatter, &[&g, &table, &offset_indices(&ids.value, v)?])?;
        Ok(Batched::along_batch(sums.reshape_dims(&[b, v, d])?))
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            // Row 1 as padding: its positions add nothing.
            example: Some(Arc::new(EmbeddingDenseBackward {
                spec: IndexSpec::as_input(Some(1)),
            })),
            sample_inputs: Some(|seed| {
                vec![
                    sample_tensor(&[2, 3, 3], seed, 1.0),
                    sample_tensor(&[5, 3], seed + 3, 1.0),
                    sample_ids(seed),
                ]
            }),
            ..OpFacts::opaque(Some(3))
        }
    }
}

register_defaults!(Embedding, EmbeddingDenseBackward);

impl<'g> Var<'g> {
    /// Looks up rows of this `[V, D]` weight: `indices` (laid out in
    /// `index_shape`, any rank) give a `[index_shape..., D]` value, PyTorch's
    /// `F.embedding(indices, weight)`. The gradient is a scatter-add, so
    /// repeated indices accumulate.
    ///
    /// Errors: an index outside `0..V` is `Error::IndexOutOfRange`; an index
    /// count that does not match `index_shape` is `Error::ElementCount`; a
    /// weight that is not 2-d is `Error::InvalidArgument`.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let w = g.variable(Tensor::from_vec(vec![0.0, 1.0, 10.0, 11.0, 20.0, 21.0], &[3, 2])?);
    /// let e = w.try_embedding(&[2usize, 0, 2, 2], &[2, 2])?;
    /// assert_eq!(e.shape(), &[2, 2, 2]);
    /// assert_eq!(e.value().to_f64_vec(), vec![20., 21., 0., 1., 20., 21., 20., 21.]);
    /// let grad = e.sum().backward()?.wrt(&w);
    /// assert_eq!(grad.to_f64_vec(), vec![1., 1., 0., 0., 3., 3.]);
    /// assert!(w.try_embedding(&[3usize], &[1]).is_err());
    /// // Token ids as an i64 tensor, laid out in its own shape.
    /// let ids = Tensor::from_vec(vec![2i64, 0], &[1, 2])?;
    /// assert_eq!(w.try_embedding(&ids, ids.shape())?.value().to_f64_vec(), vec![20., 21., 0., 1.]);
    /// // Token ids as a value of the graph: the node's input, so the node
    /// // depends on them (an ONNX export takes them as its input).
    /// let ids = g.constant(ids);
    /// let e = w.try_embedding(&ids, ids.shape())?;
    /// assert_eq!(e.value().to_f64_vec(), vec![20., 21., 0., 1.]);
    /// assert_eq!(g.node(g.len() - 1).unwrap().inputs().len(), 2);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    pub fn try_embedding<T: Indices<'g> + ?Sized>(
        &self,
        indices: &T,
        index_shape: &[usize],
    ) -> Result<Var<'g>> {
        self.try_embedding_with(indices, index_shape, None)
    }

    /// Like [`try_embedding`](Self::try_embedding), but panics with its error at the caller's line.
    #[track_caller]
    pub fn embedding<T: Indices<'g> + ?Sized>(
        &self,
        indices: &T,
        index_shape: &[usize],
    ) -> Var<'g> {
        crate::base::error::or_panic(self.try_embedding(indices, index_shape))
    }

    /// Embedding lookup with a `padding_idx` (negative counts from the end):
    /// that row is looked up as usual but receives no gradient.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let w = g.variable(Tensor::from_vec(vec![0.0, 1.0, 2.0], &[3, 1])?);
    /// let e = w.try_embedding_with(&[0usize, 1, 0], &[3], Some(0))?;
    /// assert_eq!(e.value().to_f64_vec(), vec![0.0, 1.0, 0.0]);
    /// assert_eq!(e.sum().backward()?.wrt(&w).to_f64_vec(), vec![0.0, 1.0, 0.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    pub fn try_embedding_with<T: Indices<'g> + ?Sized>(
        &self,
        indices: &T,
        index_shape: &[usize],
        padding_idx: Option<i64>,
    ) -> Result<Var<'g>> {
        match index_source(self.graph(), "embedding", indices, index_shape)? {
            IndexSource::Input(ids) => {
                let spec = IndexSpec {
                    stored: None,
                    padding_idx,
                };
                let op = Embedding {
                    spec,
                    zero_padding: false,
                };
                self.graph().record(op, &[self, &ids])
            }
            IndexSource::Stored(list) => self.graph().record(
                Embedding::new(&list[..], index_shape, padding_idx)?,
                &[self],
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::derivatives_agree;
    use crate::{gradcheck, jvpcheck, DType, Graph};

    fn table() -> Tensor {
        Tensor::from_vec((0..12).map(|i| i as f64 * 0.25 - 1.0).collect(), &[4, 3]).unwrap()
    }

    #[test]
    fn gradients_with_repeated_indices() {
        let idx = [3usize, 1, 3, 0, 3, 1];
        gradcheck(|v| v[0].try_embedding(&idx, &[2, 3]), &[table()]).unwrap();
        jvpcheck(|v| v[0].try_embedding(&idx, &[2, 3]), &[table()]).unwrap();
        // Two consumers of the table, and a nonlinear use of the rows.
        gradcheck(
            |v| Ok(&v[0].embedding(&idx, &[6]).tanh() * &v[0].embedding(&[0usize], &[]).sum()),
            &[table()],
        )
        .unwrap();
        let g = Graph::new();
        let w = g.variable(table());
        let grad = w.embedding(&idx, &[6]).sum().backward().unwrap().wrt(&w);
        assert_eq!(
            grad.to_f64_vec(),
            vec![1., 1., 1., 2., 2., 2., 0., 0., 0., 3., 3., 3.]
        );
    }

    #[test]
    fn backward_op_is_differentiable() {
        let op = EmbeddingDenseBackward {
            spec: IndexSpec {
                stored: Some(StoredIndices {
                    values: Arc::from(vec![2i64, 0, 2]),
                    shape: Dims::from_slice(&[3]),
                }),
                padding_idx: Some(0),
            },
        };
        let g = Tensor::from_vec((0..9).map(|i| i as f64 * 0.3).collect(), &[3, 3]).unwrap();
        derivatives_agree(&op, &[g, table()]).unwrap();
    }

    #[test]
    fn padding_row_gets_no_gradient() {
        let g = Graph::new();
        let w = g.variable(table());
        let e = w
            .try_embedding_with(&[1usize, 3, 1], &[3], Some(-3))
            .unwrap();
        assert_eq!(e.value().to_f64_vec()[..3], table().to_f64_vec()[3..6]);
        let grad = (&e * &e).sum().backward().unwrap().wrt(&w).to_f64_vec();
        assert_eq!(&grad[3..6], &[0.0, 0.0, 0.0]);
        assert!(grad[9..].iter().all(|&v| v != 0.0));
        // Rows other than the padding row get exact gradients.
        gradcheck(
            |v| {
                Ok(v[0]
                    .try_embedding_with(&[3usize, 2, 3], &[3], Some(1))?
                    .tanh())
            },
            &[table()],
        )
        .unwrap();
    }

    /// `vmap` over tables (and indices, or shared ones) with a padding row:
    /// each example's rows and gradient, the padding row's gradient zero.
    #[test]
    fn batching_rule_with_a_padding_row() {
        use crate::autograd::VMap;
        let tables: Vec<Tensor> = (0..3)
            .map(|b| table().map_f64(|v| v * (b as f64 + 1.0) + 0.1 * b as f64))
            .collect();
        let ids: Vec<Tensor> = [[1i64, 3, 1], [0, 1, 2], [3, 3, 0]]
            .iter()
            .map(|r| Tensor::from_vec(r.to_vec(), &[3]).unwrap())
            .collect();
        for batched_ids in [true, false] {
            let g = Graph::new();
            let stack = |ts: &[Tensor]| {
                let vs: Vec<Var<'_>> = ts.iter().map(|t| g.constant(t.clone())).collect();
                let refs: Vec<&Var<'_>> = vs.iter().collect();
                Var::try_stack(&refs, 0).unwrap().value().clone()
            };
            let w = g.variable(stack(&tables));
            let i = g.constant(if batched_ids {
                stack(&ids)
            } else {
                ids[0].clone()
            });
            let out = VMap::new()
                .in_axes(&[Some(0), batched_ids.then_some(0)])
                .try_call(
                    |v| Ok(vec![v[0].try_embedding_with(&v[1], &[3], Some(1))?.tanh()]),
                    &[&w, &i],
                )
                .unwrap()
                .remove(0);
            let grad = out.sum().backward().unwrap().wrt(&w);
            for b in 0..3 {
                let h = Graph::new();
                let wb = h.variable(tables[b].clone());
                let ib = if batched_ids { &ids[b] } else { &ids[0] };
                let e = wb.try_embedding_with(ib, &[3], Some(1)).unwrap().tanh();
                let want = e.sum().backward().unwrap().wrt(&wb);
                let got = out.value().select(0, b).unwrap().contiguous();
                assert!(got.allclose(e.value(), 1e-12, 1e-12), "rows of example {b}");
                let got = grad.select(0, b).unwrap().contiguous();
                assert!(got.allclose(&want, 1e-12, 1e-12), "gradient of example {b}");
                assert_eq!(&got.to_f64_vec()[3..6], &[0.0; 3]);
            }
        }
    }

    #[test]
    fn registry_form_dtypes_and_errors() {
        let g = Graph::new();
        let w = g.variable(table());
        let idx = g.constant(Tensor::from_vec(vec![2.0, 0.0, 1.0, 1.0], &[2, 2]).unwrap());
        let e = g.apply("embedding", &[&w, &idx]).unwrap();
        assert_eq!(e.shape(), &[2, 2, 3]);
        assert_eq!(e.value(), w.embedding(&[2usize, 0, 1, 1], &[2, 2]).value());
        assert_eq!(
            e.sum().backward().unwrap().wrt(&w).to_f64_vec()[3..6],
            [2.0, 2.0, 2.0]
        );
        let w32 = g.variable(table().to_dtype(DType::F32));
        assert_eq!(
            w32.embedding(&[1u32], &[1])
                .value()
                .to_vec::<f32>()
                .unwrap(),
            vec![-0.25, 0.0, 0.25]
        );
        assert!(matches!(
            w.try_embedding(&[4usize], &[1]),
            Err(Error::IndexOutOfRange {
                op: "embedding",
                index: 4,
                size: 4
            })
        ));
        assert!(matches!(
            w.try_embedding(&[-1i64], &[1]),
            Err(Error::IndexOutOfRange { .. })
        ));
        assert!(matches!(
            w.try_embedding(&[0usize, 1], &[3]),
            Err(Error::ElementCount { .. })
        ));
        assert!(matches!(
            w.try_embedding_with(&[0usize], &[1], Some(4)),
            Err(Error::IndexOutOfRange { .. })
        ));
        let flat = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap());
        assert!(matches!(
            flat.try_embedding(&[0usize], &[1]),
            Err(Error::InvalidArgument { .. })
        ));
    }
}

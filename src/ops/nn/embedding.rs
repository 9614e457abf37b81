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
use crate::error::{check_dtypes, Error, Result};
use crate::graph::Var;
use crate::kernels::nn::sparse;
use crate::core::OpAttributes;
use crate::ops::{Node, StructuredOp};
use crate::tensor::{Dims, Tensor};

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
            return g.graph().record(EmbeddingDenseBackward { spec }, &[g, n.x(0), ids]);
        }
        let spec = self.spec.of_node(Self::NAME, n, 0)?.stored;
        g.graph().record(EmbeddingDenseBackward { spec }, &[g, n.x(0)])
    }
    fn tangent<'g>(&self, _: usize, tw: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        // Linear in the weight, but padding rows stay constant.
        let spec = self.spec.of_node(Self::NAME, n, 0)?.stored;
        let zero_padding = true;
        tw.graph().record(Embedding { spec, zero_padding }, &[tw])
    }
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
            return g2.graph().record(Embedding { spec, zero_padding }, &[g2, ids]);
        }
        let spec = self.spec.of_node(Self::NAME, n, 1)?.stored;
        g2.graph().record(Embedding { spec, zero_padding }, &[g2])
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
    pub fn embedding<T: Indices<'g> + ?Sized>(&self, indices: &T, index_shape: &[usize]) -> Var<'g> {
        crate::error::or_panic(self.try_embedding(indices, index_shape))
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
                let spec = IndexSpec { stored: None, padding_idx };
                let op = Embedding { spec, zero_padding: false };
                self.graph().record(op, &[self, &ids])
            }
            IndexSource::Stored(list) => self
                .graph()
                .record(Embedding::new(&list[..], index_shape, padding_idx)?, &[self]),
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

//! [`Embedding`]: a learnable lookup table of vectors.

use rand::Rng;

use crate::base::error::{Error, Result};
use crate::core::graph::{Graph, Var};
use crate::nn::setters::setters;
use crate::nn::{init, Forward, Module, Parameter};
use crate::tensor::DType;

/// PyTorch's `nn.Embedding`: row `i` of a `[num_embeddings, dim]` weight
/// (initialised `N(0, 1)`) is the vector of index `i`. Indices of shape `S`
/// give an output of shape `S + [dim]`. With a `padding_idx`, that row is
/// zero-initialised and receives no gradient.
///
/// Look up with [`lookup`](Self::lookup) (indices as integers); as a
/// [`Module`] the input holds the indices as whole-number floats.
///
/// ```
/// use rand::SeedableRng;
/// use retrograd::{DType, Graph, nn::Embedding};
/// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
/// let emb = Embedding::builder(10, 4).dtype(DType::F32).build_with(&mut rng)?;
/// let g = Graph::new();
/// let v = emb.lookup(&g, &[3, 3, 7], &[3])?;
/// assert_eq!(v.shape(), &[3, 4]);
/// let grad = v.sum().backward()?.of(emb.weight());
/// assert_eq!(grad.to_f64_vec()[12..16], [2.0; 4]);   // row 3 was used twice
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, Module)]
pub struct Embedding {
    weight: Parameter,
    padding_idx: Option<usize>,
}

impl Embedding {
    /// A table of `num_embeddings` vectors of size `dim`, f32, drawn
    /// `N(0, 1)` from the default generator
    /// ([`manual_seed`](crate::nn::manual_seed)), as PyTorch does. Other
    /// settings come through [`builder`](Self::builder).
    pub fn new(num_embeddings: usize, dim: usize) -> Result<Self> {
        Self::builder(num_embeddings, dim).build()
    }

    /// Configures a table: dtype, padding row and the generator of its weights.
    pub fn builder(num_embeddings: usize, dim: usize) -> EmbeddingBuilder {
        EmbeddingBuilder {
            num_embeddings,
            dim,
            padding_idx: None,
            dtype: DType::F32,
        }
    }

    /// A table around an existing `[num_embeddings, dim]` weight (no
    /// padding row): how a loaded checkpoint becomes a layer.
    pub fn from_weight(weight: Parameter) -> Result<Self> {
        let shape = weight.shape();
        if shape.len() != 2 || shape.contains(&0) || !weight.dtype().is_float() {
            return Err(Error::invalid(
                "Embedding",
                format!(
                    "the weight must be a non-empty float [num_embeddings, dim] table, got {shape:?} {}",
                    weight.dtype()
                ),
            ));
        }
        Ok(Embedding {
            weight,
            padding_idx: None,
        })
    }

    /// The table, `[num_embeddings, dim]`.
    pub fn weight(&self) -> &Parameter {
        &self.weight
    }

    /// The number of rows.
    pub fn num_embeddings(&self) -> usize {
        self.weight.shape()[0]
    }

    /// The vector size.
    pub fn dim(&self) -> usize {
        self.weight.shape()[1]
    }

    /// The vectors of `indices` (of shape `index_shape`), recorded in `graph`.
    pub fn lookup<'g>(
        &self,
        graph: &'g Graph,
        indices: &[usize],
        index_shape: &[usize],
    ) -> Result<Var<'g>> {
        graph.param(&self.weight).try_embedding_with(
            indices,
            index_shape,
            self.padding_idx.map(|p| p as i64),
        )
    }
}

impl Forward for Embedding {
    /// `x` holds indices as whole-number floats (any shape).
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let n = self.num_embeddings();
        let indices = x
            .value()
            .to_f64_vec()
            .into_iter()
            .map(|v| {
                if v.fract() == 0.0 && v >= 0.0 && v < n as f64 {
                    Ok(v as usize)
                } else {
                    Err(Error::invalid(
                        "Embedding",
                        format!("index {v} is not a whole number in 0..{n}"),
                    ))
                }
            })
            .collect::<Result<Vec<usize>>>()?;
        self.lookup(x.graph(), &indices, x.shape())
    }
}

/// Settings of an [`Embedding`] table; see [`Embedding::builder`].
#[derive(Clone, Copy, Debug)]
pub struct EmbeddingBuilder {
    num_embeddings: usize,
    dim: usize,
    padding_idx: Option<usize>,
    dtype: DType,
}

setters! {
    impl EmbeddingBuilder builds Embedding {
        /// A row that is zero and never trained (PyTorch's `padding_idx`).
        padding_idx(padding_idx: Option<usize>);
        /// The dtype of the table (default f32).
        dtype(dtype: DType);
    }
}

impl EmbeddingBuilder {
    /// The table, drawn `N(0, 1)` from `rng`.
    pub fn build_with<R: Rng + ?Sized>(self, rng: &mut R) -> Result<Embedding> {
        let EmbeddingBuilder {
            num_embeddings,
            dim,
            padding_idx,
            dtype,
        } = self;
        if num_embeddings == 0 || dim == 0 {
            return Err(Error::invalid(
                "Embedding",
                format!("sizes must be > 0, got {num_embeddings} x {dim}"),
            ));
        }
        if let Some(p) = padding_idx
            && p >= num_embeddings
        {
            return Err(Error::IndexOutOfRange {
                op: "Embedding",
                index: p as i64,
                size: num_embeddings,
            });
        }
        let mut weight = init::normal(&[num_embeddings, dim], 0.0, 1.0, dtype, rng)?;
        if let Some(p) = padding_idx {
            crate::with_dtype!("embedding", dtype, T => {
                weight.make_mut::<T>()?[p * dim..(p + 1) * dim].fill(<T as num_traits::Zero>::zero());
            });
        }
        Ok(Embedding {
            weight: Parameter::new(weight),
            padding_idx,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tensor;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn module_forward_reads_float_indices() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let emb = Embedding::builder(5, 2)
            .dtype(DType::F64)
            .build_with(&mut rng)
            .unwrap();
        let g = Graph::new();
        let idx = g.constant(Tensor::from_vec(vec![4.0, 0.0, 1.0, 4.0], &[2, 2]).unwrap());
        let y = emb.forward(&idx).unwrap();
        assert_eq!(y.shape(), &[2, 2, 2]);
        let w = emb.weight().value().to_f64_vec();
        assert_eq!(y.value().to_f64_vec()[..2], w[8..10]);
        let bad = g.constant(Tensor::from_vec(vec![1.5], &[1]).unwrap());
        assert!(emb.forward(&bad).is_err());
        let out = g.constant(Tensor::from_vec(vec![5.0], &[1]).unwrap());
        assert!(emb.forward(&out).is_err());
    }

    #[test]
    fn padding_row_is_zero_and_untrained() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let emb = Embedding::builder(4, 3)
            .padding_idx(Some(1))
            .dtype(DType::F32)
            .build_with(&mut rng)
            .unwrap();
        assert_eq!(emb.weight().value().to_f64_vec()[3..6], [0.0; 3]);
        let g = Graph::new();
        let grads = emb
            .lookup(&g, &[1, 2], &[2])
            .unwrap()
            .sum()
            .backward()
            .unwrap();
        let gw = grads.of(emb.weight()).to_f64_vec();
        assert_eq!(gw[3..6], [0.0; 3]);
        assert_eq!(gw[6..9], [1.0; 3]);
        assert!(Embedding::builder(4, 3)
            .padding_idx(Some(4))
            .dtype(DType::F32)
            .build_with(&mut rng)
            .is_err());
    }
}

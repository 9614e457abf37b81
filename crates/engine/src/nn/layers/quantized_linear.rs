//! [`QuantizedLinear`]: a linear map without bias whose weight is frozen in
//! a ggml block format, and [`AnyLinear`] / [`AnyEmbedding`]: a model's
//! weight that is either trainable f32 or frozen quantized, so one model
//! definition serves a GGUF file as it is and an f32 checkpoint that
//! trains.

use std::sync::Arc;

use crate::base::error::{Error, Result};
use crate::core::graph::{Graph, Var};
use crate::nn::lora::LoraLinear;
use crate::nn::{Buffer, Embedding, Forward, Linear, Module, Parameter, RandomStream};
use crate::quant::QMatrix;
use crate::tensor::Tensor;

/// `y = x · Wᵀ` with `W` frozen in its blocks ([`Var::try_quantized_matmul`]):
/// no parameters, no gradient for `W`, gradients for `x`.
#[derive(Clone, Debug)]
pub struct QuantizedLinear {
    weight: Arc<QMatrix>,
}

impl QuantizedLinear {
    /// A layer multiplying by `weight` (`[out_features, in_features]`).
    pub fn new(weight: QMatrix) -> Self {
        QuantizedLinear {
            weight: Arc::new(weight),
        }
    }

    /// The frozen weight.
    pub fn weight(&self) -> &Arc<QMatrix> {
        &self.weight
    }

    /// Inputs it takes (the weight's columns).
    pub fn in_features(&self) -> usize {
        self.weight.shape()[1]
    }

    /// Outputs it gives (the weight's rows).
    pub fn out_features(&self) -> usize {
        self.weight.shape()[0]
    }
}

impl Module for QuantizedLinear {
    fn visit_parameters(&self, _: &str, _: &mut dyn FnMut(&str, &Parameter)) {}
}

impl Forward for QuantizedLinear {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        x.try_quantized_matmul(&self.weight)
    }
}

/// A bias-free linear layer with a trainable f32 weight or a frozen
/// quantized one, possibly with low-rank adapters beside it.
#[derive(Clone, Debug)]
pub enum AnyLinear {
    /// Trainable, `Linear` without bias.
    Dense(Linear),
    /// Frozen in blocks.
    Quantized(QuantizedLinear),
    /// A frozen `Dense` or `Quantized` base with adapters
    /// ([`LoraLinear`]).
    Lora(Box<LoraLinear>),
}

impl AnyLinear {
    /// Inputs it takes.
    pub fn in_features(&self) -> usize {
        match self {
            AnyLinear::Dense(l) => l.in_features(),
            AnyLinear::Quantized(q) => q.in_features(),
            AnyLinear::Lora(l) => l.in_features(),
        }
    }

    /// Outputs it gives.
    pub fn out_features(&self) -> usize {
        match self {
            AnyLinear::Dense(l) => l.out_features(),
            AnyLinear::Quantized(q) => q.out_features(),
            AnyLinear::Lora(l) => l.out_features(),
        }
    }

    /// The weight `[out, in]` in f32: a dense one as it is, a quantized one
    /// dequantized, an adapted one with its active adapters added.
    pub fn try_f32_weight(&self) -> Result<Tensor> {
        match self {
            AnyLinear::Dense(d) => Ok(d.weight().value().to_dtype(crate::tensor::DType::F32)),
            AnyLinear::Quantized(q) => q.weight().try_dequantize(),
            AnyLinear::Lora(l) => l.try_merged_weight(),
        }
    }

    /// The frozen quantized weight the layer's product runs on, if it
    /// does: a plain quantized layer, or an unmerged adapted one on a
    /// quantized base. A model that stacks the weights of several layers
    /// into one product may do so only while each has one.
    pub fn quantized_base(&self) -> Option<&Arc<QMatrix>> {
        match self {
            AnyLinear::Quantized(q) => Some(q.weight()),
            AnyLinear::Lora(l) if l.has_quantized_base() => match l.base() {
                AnyLinear::Quantized(q) => Some(q.weight()),
                _ => None,
            },
            _ => None,
        }
    }

    /// The active adapters' contribution for `x`, added to a product of
    /// this layer's base run elsewhere (a stacked product); `None` for a
    /// plain layer.
    pub fn try_adapters_delta<'g>(&self, x: &Var<'g>) -> Result<Option<Var<'g>>> {
        match self {
            AnyLinear::Lora(l) => l.try_adapters_delta(x),
            _ => Ok(None),
        }
    }
}

impl Module for AnyLinear {
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        match self {
            AnyLinear::Dense(l) => l.visit_parameters(prefix, f),
            AnyLinear::Quantized(_) => {}
            AnyLinear::Lora(l) => l.visit_parameters(prefix, f),
        }
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        match self {
            AnyLinear::Dense(l) => l.visit_buffers(prefix, f),
            AnyLinear::Quantized(_) => {}
            AnyLinear::Lora(l) => l.visit_buffers(prefix, f),
        }
    }
    fn visit_random_streams(&self, prefix: &str, f: &mut dyn FnMut(&str, &RandomStream)) {
        match self {
            AnyLinear::Dense(l) => l.visit_random_streams(prefix, f),
            AnyLinear::Quantized(_) => {}
            AnyLinear::Lora(l) => l.visit_random_streams(prefix, f),
        }
    }
    fn set_training(&mut self, training: bool) {
        if let AnyLinear::Lora(l) = self {
            l.set_training(training)
        }
    }
}

impl Forward for AnyLinear {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        match self {
            AnyLinear::Dense(l) => l.forward(x),
            AnyLinear::Quantized(q) => q.forward(x),
            AnyLinear::Lora(l) => l.forward(x),
        }
    }
}

/// A token embedding table, trainable f32 or frozen quantized (rows are
/// dequantized as they are looked up).
#[derive(Clone, Debug)]
pub enum AnyEmbedding {
    /// Trainable.
    Dense(Embedding),
    /// Frozen in blocks, `[vocabulary, dim]`.
    Quantized(Arc<QMatrix>),
}

impl AnyEmbedding {
    /// Rows in the table.
    pub fn num_embeddings(&self) -> usize {
        match self {
            AnyEmbedding::Dense(e) => e.num_embeddings(),
            AnyEmbedding::Quantized(q) => q.shape()[0],
        }
    }

    /// The vector size.
    pub fn dim(&self) -> usize {
        match self {
            AnyEmbedding::Dense(e) => e.dim(),
            AnyEmbedding::Quantized(q) => q.shape()[1],
        }
    }

    /// The vectors of `indices` (of shape `index_shape`); an index outside
    /// the table is an error naming it.
    pub fn lookup<'g>(
        &self,
        graph: &'g Graph,
        indices: &[usize],
        index_shape: &[usize],
    ) -> Result<Var<'g>> {
        match self {
            AnyEmbedding::Dense(e) => e.lookup(graph, indices, index_shape),
            AnyEmbedding::Quantized(q) => {
                let [rows, dim] = q.shape();
                let mut out = vec![0.0f32; indices.len() * dim];
                for (&i, row) in indices.iter().zip(out.chunks_exact_mut(dim.max(1))) {
                    if i >= rows {
                        return Err(Error::IndexOutOfRange {
                            op: "embedding",
                            index: i as i64,
                            size: rows,
                        });
                    }
                    q.try_dequantize_rows(i, row)?;
                }
                let mut shape = index_shape.to_vec();
                shape.push(dim);
                Ok(graph.constant(Tensor::from_vec(out, &shape)?))
            }
        }
    }

    /// `x · Eᵀ`: the output layer tied to this table.
    pub fn tied_head<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        match self {
            AnyEmbedding::Dense(e) => x.try_matmul(&x.graph().param(e.weight()).try_t()?),
            AnyEmbedding::Quantized(q) => x.try_quantized_matmul(q),
        }
    }
}

impl Module for AnyEmbedding {
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        if let AnyEmbedding::Dense(e) = self {
            e.visit_parameters(prefix, f)
        }
    }
}

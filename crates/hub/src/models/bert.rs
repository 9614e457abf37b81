//! [`BertModel`]: the BERT encoder of Hugging Face's `transformers`
//! (`BertModel`), with its parameter names, so a `model.safetensors` loads
//! by name ([`crate::hub`]).

use rand::Rng;

use retrograd_engine::base::error::{Error, Result, TensorProblem};
use retrograd_engine::core::graph::Var;
use retrograd_engine::nn::init::Init;
use retrograd_engine::nn::{
    with_default_generator, Activation, Dropout, Embedding, Forward, LayerNorm, Linear, Module,
    Parameter,
};
use retrograd_engine::ops::nn::SdpaOptions;
use retrograd_engine::tensor::{DType, Tensor};

mod packed;

/// The sizes and settings of a [`BertModel`] (the fields of a BERT
/// `config.json` that shape the model).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BertConfig {
    /// Tokens in the vocabulary (`vocab_size`).
    pub vocab_size: usize,
    /// The model width (`hidden_size`).
    pub hidden_size: usize,
    /// Encoder layers (`num_hidden_layers`).
    pub num_hidden_layers: usize,
    /// Attention heads per layer (`num_attention_heads`).
    pub num_attention_heads: usize,
    /// The width of the feed-forward network (`intermediate_size`).
    pub intermediate_size: usize,
    /// The feed-forward activation (`hidden_act`: `gelu` is the exact GELU).
    pub hidden_act: Activation,
    /// Dropout on embeddings and residual branches while training.
    pub hidden_dropout_prob: f64,
    /// Dropout on the attention weights while training.
    pub attention_probs_dropout_prob: f64,
    /// Positions embedded (`max_position_embeddings`).
    pub max_position_embeddings: usize,
    /// Token types (segments) embedded (`type_vocab_size`).
    pub type_vocab_size: usize,
    /// The layer norms' epsilon (`layer_norm_eps`, 1e-12 in BERT).
    pub layer_norm_eps: f64,
    /// The dtype of the parameters.
    pub dtype: DType,
}

impl BertConfig {
    /// BERT-base's sizes (`bert-base-uncased`): 12 layers, width 768,
    /// 12 heads, f32.
    pub fn base() -> Self {
        BertConfig {
            vocab_size: 30522,
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            hidden_act: Activation::Gelu,
            hidden_dropout_prob: 0.1,
            attention_probs_dropout_prob: 0.1,
            max_position_embeddings: 512,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            dtype: DType::F32,
        }
    }

    /// Checks the sizes: positive, the width a multiple of the heads,
    /// dropout probabilities in `[0, 1)`.
    pub fn check(&self) -> Result<()> {
        let sizes = [
            self.vocab_size,
            self.hidden_size,
            self.num_hidden_layers,
            self.num_attention_heads,
            self.intermediate_size,
            self.max_position_embeddings,
            self.type_vocab_size,
        ];
        let dropouts = [self.hidden_dropout_prob, self.attention_probs_dropout_prob];
        if sizes.contains(&0)
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
            || dropouts.iter().any(|p| !(0.0..1.0).contains(p))
            || !self.layer_norm_eps.is_finite()
            || self.layer_norm_eps < 0.0
            || !self.dtype.is_float()
        {
            return Err(Error::invalid(
                "BertConfig",
                format!(
                    "sizes must be positive, hidden_size a multiple of num_attention_heads, \
                     dropouts in [0, 1), a float dtype; got {self:?}"
                ),
            ));
        }
        Ok(())
    }
}

/// Word, position and token-type embeddings, summed, then a layer norm
/// and dropout (`embeddings.*`).
#[derive(Clone, Debug, Module)]
pub struct BertEmbeddings {
    word_embeddings: Embedding,
    position_embeddings: Embedding,
    token_type_embeddings: Embedding,
    #[module(rename = "LayerNorm")]
    layer_norm: LayerNorm,
    dropout: Dropout,
}

impl BertEmbeddings {
    /// The word embedding table, `[vocab_size, hidden_size]`.
    pub fn word_embeddings(&self) -> &Embedding {
        &self.word_embeddings
    }

    /// `input_ids` `[B, T]` (i64) and optional `token_type_ids` `[B, T]`
    /// (zeros when absent) to `[B, T, hidden]`. The ids are the lookups'
    /// inputs, so the recorded graph depends on them (an ONNX export takes
    /// them as its inputs).
    fn forward<'g>(
        &self,
        input_ids: &Var<'g>,
        token_type_ids: Option<&Var<'g>>,
    ) -> Result<Var<'g>> {
        let t = input_ids.shape()[1];
        let positions = input_ids
            .graph()
            .param(self.position_embeddings.weight())
            .try_narrow(0, 0, t)?;
        self.embed(
            "BertModel: token_type_ids",
            input_ids,
            token_type_ids,
            &positions,
        )
    }

    /// `(words + types) + positions` (transformers' order), then the layer
    /// norm and dropout: what the padded and the packed forms share.
    /// `positions` broadcasts against the ids' lookups.
    fn embed<'g>(
        &self,
        op: &'static str,
        input_ids: &Var<'g>,
        token_type_ids: Option<&Var<'g>>,
        positions: &Var<'g>,
    ) -> Result<Var<'g>> {
        let graph = input_ids.graph();
        let words = graph
            .param(self.word_embeddings.weight())
            .try_embedding(input_ids, input_ids.shape())?;
        let types = graph.param(self.token_type_embeddings.weight());
        let types = match token_type_ids {
            Some(tt) => {
                if tt.shape() != input_ids.shape() {
                    return Err(Error::shape_mismatch(op, input_ids.shape(), tt.shape()));
                }
                types.try_embedding(tt, tt.shape())?
            }
            // Every token of type 0: row 0, broadcast.
            None => types.try_narrow(0, 0, 1)?,
        };
        let x = words.try_add(&types)?.try_add(positions)?;
        self.dropout.forward(&self.layer_norm.forward(&x)?)
    }
}

/// Multi-head self-attention with separate query, key and value
/// projections (`attention.self.*`), on the fused
/// [`scaled_dot_product_attention`](retrograd_engine::Var::try_scaled_dot_product_attention).
#[derive(Clone, Debug, Module)]
pub struct BertSelfAttention {
    query: Linear,
    key: Linear,
    value: Linear,
    dropout: Dropout,
    num_heads: usize,
}

impl BertSelfAttention {
    /// `[B, T, E]` -> `[B, H, T, D]`: a view, read by attention at its strides.
    fn heads<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let (b, t) = (x.shape()[0] as isize, x.shape()[1] as isize);
        x.try_reshape(&[b, t, self.num_heads as isize, -1])?
            .try_permute(&[0, 2, 1, 3])
    }

    fn forward<'g>(&self, x: &Var<'g>, keys: Option<&Var<'g>>) -> Result<Var<'g>> {
        let q = self.heads(&self.query.forward(x)?)?;
        let k = self.heads(&self.key.forward(x)?)?;
        let v = self.heads(&self.value.forward(x)?)?;
        let mut options = SdpaOptions::new();
        if let Some(mask) = keys {
            options = options.attn_mask(mask);
        }
        if let Some(seed) = self.dropout.next_seed() {
            options = options.dropout_p(self.dropout.p(), seed);
        }
        let y = q.try_scaled_dot_product_attention(&k, &v, &options)?;
        let (b, t) = (x.shape()[0] as isize, x.shape()[1] as isize);
        y.try_permute(&[0, 2, 1, 3])?.try_reshape(&[b, t, -1])
    }
}

/// A dense layer, dropout, and a layer norm of the residual sum: the
/// output half of attention (`attention.output.*`) and of the
/// feed-forward network (`output.*`).
#[derive(Clone, Debug, Module)]
pub struct BertResidual {
    dense: Linear,
    #[module(rename = "LayerNorm")]
    layer_norm: LayerNorm,
    dropout: Dropout,
}

impl BertResidual {
    fn forward<'g>(&self, x: &Var<'g>, residual: &Var<'g>) -> Result<Var<'g>> {
        let h = self.dropout.forward(&self.dense.forward(x)?)?;
        self.layer_norm.forward(&h.try_add(residual)?)
    }
}

/// Self-attention and its residual output (`attention.*`).
#[derive(Clone, Debug, Module)]
pub struct BertAttention {
    #[module(rename = "self")]
    self_attention: BertSelfAttention,
    output: BertResidual,
}

/// The first half of the feed-forward network: dense, then the
/// activation (`intermediate.*`).
#[derive(Clone, Debug, Module)]
pub struct BertIntermediate {
    dense: Linear,
    activation: Activation,
}

/// One post-norm encoder layer (`encoder.layer.N.*`).
#[derive(Clone, Debug, Module)]
pub struct BertLayer {
    attention: BertAttention,
    intermediate: BertIntermediate,
    output: BertResidual,
}

impl BertLayer {
    /// `x` `[B, T, E]`; `keys` a bool `[B, 1, 1, T]` mask of the keys that
    /// may be attended to (padding is `false`).
    pub fn forward<'g>(&self, x: &Var<'g>, keys: Option<&Var<'g>>) -> Result<Var<'g>> {
        let a = self.attention.self_attention.forward(x, keys)?;
        self.after_attention(&a, x)
    }

    /// The rest of the layer once its self-attention of `x` gave `a` (by
    /// [`forward`](Self::forward) or on packed rows): the attention's
    /// residual, then the feed-forward block and its residual.
    fn after_attention<'g>(&self, a: &Var<'g>, x: &Var<'g>) -> Result<Var<'g>> {
        let a = self.attention.output.forward(a, x)?;
        let h = self
            .intermediate
            .activation
            .apply(&self.intermediate.dense.forward(&a)?)?;
        self.output.forward(&h, &a)
    }
}

/// The stack of encoder layers (`encoder.layer.N.*`).
#[derive(Clone, Debug, Module)]
pub struct BertEncoder {
    layer: Vec<BertLayer>,
}

/// `tanh(dense(h[:, 0]))`: the first token's state through a dense layer
/// (`pooler.*`), what `BertForSequenceClassification` classifies.
#[derive(Clone, Debug, Module)]
pub struct BertPooler {
    dense: Linear,
}

impl Forward for BertPooler {
    /// `[B, T, E]` -> `[B, E]`.
    fn forward<'g>(&self, hidden: &Var<'g>) -> Result<Var<'g>> {
        Ok(self.dense.forward(&hidden.try_select(1, 0)?)?.tanh())
    }
}

/// Where [`BertModel::from_source`] takes each parameter from: called with
/// the parameter's Hugging Face name, its shape and how `transformers`
/// would initialise it.
pub type ParameterSource<'a> = dyn FnMut(&str, &[usize], Init) -> Result<Tensor> + 'a;

/// A BERT encoder (Hugging Face's `BertModel`): token ids to one hidden
/// state per token.
///
/// Parameter names are Hugging Face's (`embeddings.word_embeddings.weight`,
/// `encoder.layer.0.attention.self.query.weight`, `pooler.dense.bias`), so
/// a checkpoint's state dict loads by name:
/// [`BertModel::from_pretrained`](crate::hub) reads a model folder. A
/// model from [`new`](Self::new) is initialised as `transformers` does
/// (`N(0, 0.02)` weights, zero biases, unit layer norms).
///
/// ```
/// use retrograd::{Graph, Tensor, nn::{BertConfig, BertModel, Module}};
/// let config = BertConfig { vocab_size: 50, hidden_size: 16, num_hidden_layers: 2,
///     num_attention_heads: 4, intermediate_size: 32, max_position_embeddings: 8,
///     ..BertConfig::base() };
/// let bert = BertModel::new(config)?;
/// let g = Graph::new();
/// let ids = g.constant(Tensor::from_vec(vec![1i64, 7, 9, 2, 1, 5, 2, 0], &[2, 4])?);
/// let mask = g.constant(Tensor::from_vec(vec![1i64, 1, 1, 1, 1, 1, 1, 0], &[2, 4])?);
/// let hidden = bert.forward(&ids, Some(&mask), None)?;
/// assert_eq!(hidden.shape(), &[2, 4, 16]);
/// assert!(bert.parameters().iter().any(|(n, _)| n == "encoder.layer.1.attention.self.key.weight"));
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, Module)]
pub struct BertModel {
    embeddings: BertEmbeddings,
    encoder: BertEncoder,
    pooler: Option<BertPooler>,
    #[module(skip)]
    config: BertConfig,
}

impl BertModel {
    /// A model with a pooler, initialised from the default generator.
    pub fn new(config: BertConfig) -> Result<Self> {
        with_default_generator(|rng| Self::with_rng(config, true, rng))
    }

    /// A model initialised from `rng` as `transformers` does, with or
    /// without the pooler.
    pub fn with_rng<R: Rng + ?Sized>(
        config: BertConfig,
        pooler: bool,
        rng: &mut R,
    ) -> Result<Self> {
        let dtype = config.dtype;
        Self::from_source(config, pooler, &mut |_, shape, init| {
            init.tensor(shape, dtype, rng)
        })
    }

    /// A model whose every parameter comes from `source(name, shape, init)`:
    /// the parameter's Hugging Face name, its shape, and how `transformers`
    /// would initialise it. A checkpoint loader answers from the file
    /// ([`crate::hub`]); [`with_rng`](Self::with_rng) draws. A tensor of
    /// another shape or dtype is an error naming the parameter.
    pub fn from_source(
        config: BertConfig,
        pooler: bool,
        source: &mut ParameterSource<'_>,
    ) -> Result<Self> {
        config.check()?;
        let BertConfig {
            vocab_size,
            hidden_size: e,
            num_hidden_layers,
            num_attention_heads,
            intermediate_size,
            hidden_act,
            hidden_dropout_prob: p,
            attention_probs_dropout_prob: pa,
            max_position_embeddings,
            type_vocab_size,
            layer_norm_eps,
            dtype,
        } = config;
        let mut src = Source {
            source,
            dtype,
            eps: layer_norm_eps,
        };
        // Every dropout its own stream of masks.
        let mut seed = 0x6265_7274_0000u64;
        let mut dropout = |p: f64| {
            seed += 1;
            Dropout::new(p, seed)
        };
        let embeddings = BertEmbeddings {
            word_embeddings: src.embedding("embeddings.word_embeddings", vocab_size, e)?,
            position_embeddings: src.embedding(
                "embeddings.position_embeddings",
                max_position_embeddings,
                e,
            )?,
            token_type_embeddings: src.embedding(
                "embeddings.token_type_embeddings",
                type_vocab_size,
                e,
            )?,
            layer_norm: src.norm("embeddings.LayerNorm", e)?,
            dropout: dropout(p)?,
        };
        let layer = (0..num_hidden_layers)
            .map(|i| {
                let at = |part: &str| format!("encoder.layer.{i}.{part}");
                Ok(BertLayer {
                    attention: BertAttention {
                        self_attention: BertSelfAttention {
                            query: src.linear(&at("attention.self.query"), e, e)?,
                            key: src.linear(&at("attention.self.key"), e, e)?,
                            value: src.linear(&at("attention.self.value"), e, e)?,
                            dropout: dropout(pa)?,
                            num_heads: num_attention_heads,
                        },
                        output: BertResidual {
                            dense: src.linear(&at("attention.output.dense"), e, e)?,
                            layer_norm: src.norm(&at("attention.output.LayerNorm"), e)?,
                            dropout: dropout(p)?,
                        },
                    },
                    intermediate: BertIntermediate {
                        dense: src.linear(&at("intermediate.dense"), e, intermediate_size)?,
                        activation: hidden_act,
                    },
                    output: BertResidual {
                        dense: src.linear(&at("output.dense"), intermediate_size, e)?,
                        layer_norm: src.norm(&at("output.LayerNorm"), e)?,
                        dropout: dropout(p)?,
                    },
                })
            })
            .collect::<Result<_>>()?;
        let pooler = if pooler {
            Some(BertPooler {
                dense: src.linear("pooler.dense", e, e)?,
            })
        } else {
            None
        };
        Ok(BertModel {
            embeddings,
            encoder: BertEncoder { layer },
            pooler,
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// The embeddings.
    pub fn embeddings(&self) -> &BertEmbeddings {
        &self.embeddings
    }

    /// The pooler, if the model has one.
    pub fn pooler(&self) -> Option<&BertPooler> {
        self.pooler.as_ref()
    }

    /// Drops the pooler (a sentence encoder does not use it).
    pub fn without_pooler(mut self) -> Self {
        self.pooler = None;
        self
    }

    /// The last hidden state `[B, T, hidden]` of `input_ids` `[B, T]`
    /// (i64). `attention_mask` `[B, T]` (i64, bool or float; nonzero is a
    /// real token, zero padding) hides padded keys from attention; without
    /// one every token is attended to. `token_type_ids` `[B, T]` (i64) are
    /// zeros when absent. Padded positions still get (meaningless) states,
    /// as in `transformers`: pool with the mask.
    pub fn forward<'g>(
        &self,
        input_ids: &Var<'g>,
        attention_mask: Option<&Var<'g>>,
        token_type_ids: Option<&Var<'g>>,
    ) -> Result<Var<'g>> {
        let shape = input_ids.shape().to_vec();
        let [_, t] = shape[..] else {
            return Err(Error::invalid(
                "BertModel",
                format!("input_ids must be [batch, length], got {shape:?}"),
            ));
        };
        if t == 0 || t > self.config.max_position_embeddings {
            return Err(Error::invalid(
                "BertModel",
                format!(
                    "a sequence of {t} tokens; the model takes 1 to max_position_embeddings = {}",
                    self.config.max_position_embeddings
                ),
            ));
        }
        let keys = match attention_mask {
            Some(mask) => {
                if mask.shape() != shape {
                    return Err(Error::shape_mismatch(
                        "BertModel: attention_mask",
                        &shape,
                        mask.shape(),
                    ));
                }
                let attend = if mask.dtype() == DType::Bool {
                    mask.clone()
                } else {
                    mask.try_ne_scalar(0.0)?
                };
                // [B, 1, 1, T] by unsqueezing: no size is written into the
                // graph, so an export keeps the batch and length free.
                Some(attend.try_unsqueeze(1)?.try_unsqueeze(1)?)
            }
            None => None,
        };
        let mut x = self.embeddings.forward(input_ids, token_type_ids)?;
        for layer in &self.encoder.layer {
            x = layer.forward(&x, keys.as_ref())?;
        }
        Ok(x)
    }

    /// The pooler's output `[B, hidden]` for `hidden` `[B, T, hidden]`
    /// (from [`forward`](Self::forward)); an error without a pooler.
    pub fn pool<'g>(&self, hidden: &Var<'g>) -> Result<Var<'g>> {
        match &self.pooler {
            Some(p) => p.forward(hidden),
            None => Err(Error::invalid(
                "BertModel::pool",
                "this model has no pooler",
            )),
        }
    }
}

/// The parameters of a model under construction, by name, from a source.
struct Source<'s> {
    source: &'s mut ParameterSource<'s>,
    dtype: DType,
    eps: f64,
}

impl Source<'_> {
    fn param(&mut self, name: &str, shape: &[usize], init: Init) -> Result<Parameter> {
        let t = (self.source)(name, shape, init)?;
        let problem = if t.shape() != shape {
            TensorProblem::Shape {
                expected: shape.to_vec(),
                found: t.shape().to_vec(),
            }
        } else if t.dtype() != self.dtype {
            TensorProblem::DType {
                expected: self.dtype,
                found: t.dtype(),
            }
        } else {
            return Ok(Parameter::new(t));
        };
        Err(Error::TensorMismatch {
            context: "BertModel::from_source".into(),
            name: name.into(),
            problem,
        })
    }

    fn embedding(&mut self, name: &str, n: usize, e: usize) -> Result<Embedding> {
        Embedding::from_weight(self.param(
            &format!("{name}.weight"),
            &[n, e],
            Init::Normal(0.02),
        )?)
    }

    fn linear(&mut self, name: &str, i: usize, o: usize) -> Result<Linear> {
        Linear::from_parameters(
            self.param(&format!("{name}.weight"), &[o, i], Init::Normal(0.02))?,
            Some(self.param(&format!("{name}.bias"), &[o], Init::Zeros)?),
        )
    }

    fn norm(&mut self, name: &str, e: usize) -> Result<LayerNorm> {
        let w = self.param(&format!("{name}.weight"), &[e], Init::Ones)?;
        let b = self.param(&format!("{name}.bias"), &[e], Init::Zeros)?;
        LayerNorm::from_parameters(w, Some(b), self.eps)
    }
}

/// The mean of each sequence's hidden states over its real tokens:
/// `sum(h · mask) / max(sum(mask), 1e-9)`, sentence-transformers' mean
/// pooling. `hidden` `[B, T, E]`, `attention_mask` `[B, T]` (nonzero: a
/// real token, any dtype) a value of the same graph, so that the pooling
/// depends on it (an export takes it as an input).
///
/// ```
/// use retrograd::{Graph, Tensor, nn::mean_pool};
/// let g = Graph::new();
/// let h = g.constant(Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 100.0, 100.0], &[1, 3, 2])?);
/// let mask = g.constant(Tensor::from_vec(vec![1i64, 1, 0], &[1, 3])?);
/// assert_eq!(mean_pool(&h, &mask)?.value().to_vec::<f32>()?, vec![2.0, 3.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn mean_pool<'g>(hidden: &Var<'g>, attention_mask: &Var<'g>) -> Result<Var<'g>> {
    let shape = hidden.shape();
    if shape.len() != 3 || attention_mask.shape() != &shape[..2] {
        return Err(Error::shape_mismatch(
            "mean_pool",
            shape,
            attention_mask.shape(),
        ));
    }
    let weights = attention_mask
        .try_ne_scalar(0.0)?
        .try_to_dtype(hidden.dtype())?
        .try_unsqueeze(-1)?;
    let sum = hidden.try_mul(&weights)?.try_sum_axes(&[1], false)?;
    let count = weights
        .try_sum_axes(&[1], false)?
        .try_clamp(Some(1e-9), None)?;
    sum.try_div(&count)
}

/// Each row divided by its L2 norm (at least `1e-12`): PyTorch's
/// `F.normalize(x, p=2, dim=-1)`, sentence-transformers' `Normalize`.
///
/// ```
/// use retrograd::{Graph, Tensor, nn::l2_normalize};
/// let g = Graph::new();
/// let x = g.constant(Tensor::from_vec(vec![3.0f64, 4.0, 0.0, 0.0], &[2, 2])?);
/// assert_eq!(l2_normalize(&x)?.value().to_f64_vec(), vec![0.6, 0.8, 0.0, 0.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn l2_normalize<'g>(x: &Var<'g>) -> Result<Var<'g>> {
    let norm = x
        .try_mul(x)?
        .try_sum_axes(&[-1], true)?
        .sqrt()
        .try_clamp(Some(1e-12), None)?;
    x.try_div(&norm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use retrograd_engine::Graph;

    /// A seeded 2-layer BERT of width 8 (also `packed.rs`'s tests).
    pub(super) fn tiny(dtype: DType) -> BertModel {
        let config = BertConfig {
            vocab_size: 11,
            hidden_size: 8,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            intermediate_size: 12,
            max_position_embeddings: 6,
            hidden_dropout_prob: 0.0,
            attention_probs_dropout_prob: 0.0,
            dtype,
            ..BertConfig::base()
        };
        BertModel::with_rng(config, true, &mut ChaCha8Rng::seed_from_u64(0)).unwrap()
    }

    #[test]
    fn names_are_hugging_face_names() {
        let names: Vec<String> = tiny(DType::F32)
            .parameters()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        for want in [
            "embeddings.word_embeddings.weight",
            "embeddings.position_embeddings.weight",
            "embeddings.token_type_embeddings.weight",
            "embeddings.LayerNorm.weight",
            "encoder.layer.0.attention.self.query.weight",
            "encoder.layer.0.attention.self.value.bias",
            "encoder.layer.0.attention.output.dense.weight",
            "encoder.layer.0.attention.output.LayerNorm.bias",
            "encoder.layer.1.intermediate.dense.weight",
            "encoder.layer.1.output.dense.bias",
            "encoder.layer.1.output.LayerNorm.weight",
            "pooler.dense.weight",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
        }
        // 5 embedding tensors, 16 per layer, 2 for the pooler.
        assert_eq!(names.len(), 5 + 2 * 16 + 2);
    }

    #[test]
    fn padding_does_not_change_the_real_tokens_states() {
        let bert = tiny(DType::F64);
        let g = Graph::new();
        let short = g.constant(Tensor::from_vec(vec![1i64, 5, 2], &[1, 3]).unwrap());
        let alone = bert
            .forward(&short, None, None)
            .unwrap()
            .value()
            .to_f64_vec();
        let padded = g.constant(Tensor::from_vec(vec![1i64, 5, 2, 0, 0], &[1, 5]).unwrap());
        let mask = g.constant(Tensor::from_vec(vec![1i64, 1, 1, 0, 0], &[1, 5]).unwrap());
        let with_pad = bert
            .forward(&padded, Some(&mask), None)
            .unwrap()
            .value()
            .to_f64_vec();
        for (a, b) in alone.iter().zip(&with_pad[..alone.len()]) {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
        // Mean pooling over the mask equals pooling the unpadded states.
        let h = bert.forward(&padded, Some(&mask), None).unwrap();
        let pooled = mean_pool(&h, &mask).unwrap().value().to_f64_vec();
        let h1 = bert.forward(&short, None, None).unwrap();
        let ones = g.constant(Tensor::from_vec(vec![1i64; 3], &[1, 3]).unwrap());
        let pooled1 = mean_pool(&h1, &ones).unwrap().value().to_f64_vec();
        for (a, b) in pooled.iter().zip(&pooled1) {
            assert!((a - b).abs() < 1e-12);
        }
    }

    #[test]
    fn gradients_agree_with_finite_differences() {
        let bert = tiny(DType::F64);
        let ids = Tensor::from_vec(vec![3i64, 1, 4, 1, 5, 0], &[2, 3]).unwrap();
        let mask = Tensor::from_vec(vec![1i64, 1, 1, 1, 1, 0], &[2, 3]).unwrap();
        let (_, w) = bert
            .parameters()
            .into_iter()
            .find(|(n, _)| n == "embeddings.position_embeddings.weight")
            .unwrap();
        retrograd_engine::gradcheck(
            |v| {
                let g = v[0].graph();
                let ids = g.constant(ids.clone());
                let words = g
                    .param(bert.embeddings.word_embeddings.weight())
                    .try_embedding(ids.value(), &[2, 3])?;
                let types = g
                    .param(bert.embeddings.token_type_embeddings.weight())
                    .try_narrow(0, 0, 1)?;
                let x = words.try_add(&types)?.try_add(&v[0].try_narrow(0, 0, 3)?)?;
                let mut x = bert.embeddings.layer_norm.forward(&x)?;
                let keys = g
                    .constant(mask.clone())
                    .try_ne_scalar(0.0)?
                    .try_reshape(&[2, 1, 1, 3])?;
                for layer in &bert.encoder.layer {
                    x = layer.forward(&x, Some(&keys))?;
                }
                let pooled = mean_pool(&x, &g.constant(mask.clone()))?;
                Ok(l2_normalize(&pooled)?.try_mul(&pooled)?.sum())
            },
            &[w.value()],
        )
        .unwrap();
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let bert = tiny(DType::F32);
        let g = Graph::new();
        let long = g.constant(Tensor::from_vec(vec![0i64; 7], &[1, 7]).unwrap());
        assert!(bert
            .forward(&long, None, None)
            .unwrap_err()
            .to_string()
            .contains("max_position_embeddings"));
        let flat = g.constant(Tensor::from_vec(vec![0i64; 3], &[3]).unwrap());
        assert!(bert.forward(&flat, None, None).is_err());
        let ids = g.constant(Tensor::from_vec(vec![0i64; 3], &[1, 3]).unwrap());
        let mask = g.constant(Tensor::from_vec(vec![1i64; 2], &[1, 2]).unwrap());
        assert!(bert.forward(&ids, Some(&mask), None).is_err());
        let oob = g.constant(Tensor::from_vec(vec![11i64], &[1, 1]).unwrap());
        assert!(bert.forward(&oob, None, None).is_err());
        let bad = BertConfig {
            num_attention_heads: 5, // 768 is not a multiple of 5
            ..BertConfig::base()
        };
        assert!(BertModel::new(bad).is_err());
        assert!(bert.clone().without_pooler().pool(&ids).is_err());
    }
}

//! [`Llama`]: the Llama family of decoder-only language models (Llama 2
//! and 3, SmolLM, TinyLlama, Mistral without sliding windows): RMS norm
//! before each half-block, rotary position embeddings, grouped-query
//! attention through the fused attention, a SwiGLU feed-forward, and an
//! output layer tied to the token embedding or its own.
//!
//! Field names are Hugging Face's (`model.layers.0.self_attn.q_proj.weight`),
//! so a `LlamaForCausalLM` checkpoint loads by name. Every weight matrix is
//! an [`AnyLinear`]: trainable f32, or frozen in a ggml block format as a
//! GGUF file stores it, so one definition runs a quantized file and trains
//! an f32 model. Rotary embeddings use Hugging Face's convention (halves of
//! each head turn together); the GGUF loader puts llama.cpp's permuted
//! query and key rows back.
//!
//! Generation keeps the keys and values of past positions in a
//! [`LlamaCache`], written in place, so each new token costs one
//! position's work. Grouped-query attention shares each key/value head
//! among `n_head / n_kv_head` query heads without copying the keys: one
//! new position stacks its group's queries as rows of one attention;
//! several positions attend per query head to the group's keys broadcast
//! as a view, causally (the attention skips the hidden tiles), or through a
//! mask aligned to the last key when they follow a cached prefix.

use std::sync::Arc;

mod batch_decode;
mod causal_lm_loss;
mod kv_cache;

pub use causal_lm_loss::IGNORE_LABEL;
use kv_cache::LayerCache;
pub use kv_cache::LlamaCache;

use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::core::graph::{Graph, Var};
use retrograd_engine::kernels::on_pool::on_pool;
use retrograd_engine::nn::lora::LoraModel;
use retrograd_engine::nn::{
    AnyEmbedding, AnyLinear, Forward, Module, Parameter, QuantizedLinear, RMSNorm,
};
use retrograd_engine::ops::nn::SdpaOptions;
use retrograd_engine::quant::QMatrix;
use retrograd_engine::tensor::{DType, Tensor};

/// The sizes and settings of a [`Llama`] (Hugging Face's `LlamaConfig`
/// names).
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Tokens in the vocabulary.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Width of the feed-forward's hidden layer.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention when fewer than query heads).
    pub num_key_value_heads: usize,
    /// Size of each head.
    pub head_dim: usize,
    /// Base of the rotary angles.
    pub rope_theta: f64,
    /// RMS norm epsilon.
    pub rms_norm_eps: f64,
    /// The longest context the model was trained for.
    pub max_position_embeddings: usize,
    /// Whether the output layer is the token embedding.
    pub tie_word_embeddings: bool,
}

impl LlamaConfig {
    /// Typed errors for sizes that cannot make a model.
    pub fn check(&self) -> Result<()> {
        let bad = |what: String| Err(Error::invalid("LlamaConfig", what));
        if [
            self.vocab_size,
            self.hidden_size,
            self.intermediate_size,
            self.num_hidden_layers,
        ]
        .contains(&0)
        {
            return bad(format!("sizes must be positive: {self:?}"));
        }
        if self.num_attention_heads == 0
            || self.num_key_value_heads == 0
            || !self
                .num_attention_heads
                .is_multiple_of(self.num_key_value_heads)
        {
            return bad(format!(
                "{} query heads cannot share {} key/value heads",
                self.num_attention_heads, self.num_key_value_heads
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return bad(format!(
                "head_dim must be even and positive, got {}",
                self.head_dim
            ));
        }
        let eps_ok = self.rms_norm_eps.is_finite() && self.rms_norm_eps >= 0.0;
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0 && eps_ok) {
            return bad(format!(
                "rope_theta {} and rms_norm_eps {} must be positive",
                self.rope_theta, self.rms_norm_eps
            ));
        }
        Ok(())
    }
}

/// Attention of one decoder layer.
#[derive(Clone, Debug, Module)]
pub struct LlamaAttention {
    q_proj: AnyLinear,
    k_proj: AnyLinear,
    v_proj: AnyLinear,
    o_proj: AnyLinear,
    /// Quantized query, key and value weights stacked in one matrix (the
    /// three projections are views of it): one product, one quantization
    /// of the input, one trip to the thread pool.
    #[module(skip)]
    qkv: Option<Arc<QMatrix>>,
}

/// The SwiGLU feed-forward: `down(silu(gate(x)) · up(x))`.
#[derive(Clone, Debug, Module)]
pub struct LlamaMlp {
    gate_proj: AnyLinear,
    up_proj: AnyLinear,
    down_proj: AnyLinear,
    /// Quantized gate and up weights stacked, as `qkv`.
    #[module(skip)]
    gate_up: Option<Arc<QMatrix>>,
}

/// Stacks the weights of projections that read the same input when all
/// are quantized in one format, and makes each a view of the stack.
fn stack(parts: &mut [&mut AnyLinear]) -> Result<Option<Arc<QMatrix>>> {
    let weights: Option<Vec<Arc<QMatrix>>> = parts
        .iter()
        .map(|p| match p {
            AnyLinear::Quantized(q) => Some(q.weight().clone()),
            _ => None,
        })
        .collect();
    let Some(weights) = weights else {
        return Ok(None);
    };
    let refs: Vec<&QMatrix> = weights.iter().map(|w| w.as_ref()).collect();
    if refs.iter().any(|w| w.ggml_type() != refs[0].ggml_type()) {
        return Ok(None);
    }
    let stacked = QMatrix::try_stack_rows(&refs)?;
    let mut first = 0;
    for p in parts.iter_mut() {
        let rows = p.out_features();
        **p = AnyLinear::Quantized(QuantizedLinear::new(stacked.try_rows(first, rows)?));
        first += rows;
    }
    Ok(Some(Arc::new(stacked)))
}

/// The parts of a stacked product's output, split along the last dim.
fn split_last<'g>(y: &Var<'g>, sizes: &[usize]) -> Result<Vec<Var<'g>>> {
    let mut start = 0;
    sizes
        .iter()
        .map(|&n| {
            let part = y.try_narrow(-1, start as isize, n)?;
            start += n;
            Ok(part)
        })
        .collect()
}

/// The outputs of `layers` from `y`, the stacked product of their bases on
/// `x`: `y` split along the last dim, each part plus its layer's active
/// adapters (a quantized base trains adapters through the stacked product).
fn with_adapters<'g>(x: &Var<'g>, y: &Var<'g>, layers: &[&AnyLinear]) -> Result<Vec<Var<'g>>> {
    let sizes: Vec<usize> = layers.iter().map(|l| l.out_features()).collect();
    split_last(y, &sizes)?
        .into_iter()
        .zip(layers)
        .map(|(part, l)| match l.try_adapters_delta(x)? {
            Some(d) => part.try_add(&d),
            None => Ok(part),
        })
        .collect()
}

/// One decoder layer: `x + attn(norm(x))`, then `x + mlp(norm(x))`.
#[derive(Clone, Debug, Module)]
pub struct LlamaDecoderLayer {
    self_attn: LlamaAttention,
    mlp: LlamaMlp,
    input_layernorm: RMSNorm,
    post_attention_layernorm: RMSNorm,
}

/// The stack without the output layer (Hugging Face's `LlamaModel`).
#[derive(Clone, Debug, Module)]
pub struct LlamaModel {
    embed_tokens: AnyEmbedding,
    layers: Vec<LlamaDecoderLayer>,
    norm: RMSNorm,
}

/// A Llama language model (Hugging Face's `LlamaForCausalLM`); see the
/// module docs.
#[derive(Clone, Debug, Module)]
pub struct Llama {
    model: LlamaModel,
    lm_head: Option<AnyLinear>,
    #[module(skip)]
    config: LlamaConfig,
    /// Whether the training forward recomputes each decoder layer in
    /// backward instead of keeping its intermediate values.
    #[module(skip)]
    gradient_checkpointing: bool,
}

/// The weights of one decoder layer, for [`Llama::from_weights`].
#[derive(Clone, Debug)]
pub struct LlamaLayerWeights {
    /// Query, key, value and output projections (Hugging Face's row order).
    pub q_proj: AnyLinear,
    /// Keys.
    pub k_proj: AnyLinear,
    /// Values.
    pub v_proj: AnyLinear,
    /// Attention output.
    pub o_proj: AnyLinear,
    /// Feed-forward gate.
    pub gate_proj: AnyLinear,
    /// Feed-forward up.
    pub up_proj: AnyLinear,
    /// Feed-forward down.
    pub down_proj: AnyLinear,
    /// Scale of the norm before attention, `[hidden]`.
    pub input_layernorm: Tensor,
    /// Scale of the norm before the feed-forward, `[hidden]`.
    pub post_attention_layernorm: Tensor,
}

/// One layer's cached keys and values, and whether they are rounded to f16.
type Slot<'a> = (&'a mut Option<LayerCache>, bool);

fn norm(eps: f64, weight: &Tensor) -> Result<RMSNorm> {
    let n = RMSNorm::with_options(&[weight.numel()], Some(eps), true, DType::F32)?;
    n.weight()
        .expect("affine")
        .set(weight.reshape(&[weight.numel()])?)?;
    Ok(n)
}

fn check_linear(name: &str, l: &AnyLinear, rows: usize, cols: usize) -> Result<()> {
    if l.out_features() != rows || l.in_features() != cols {
        return Err(Error::invalid(
            "Llama",
            format!(
                "`{name}` is [{}, {}], the config needs [{rows}, {cols}]",
                l.out_features(),
                l.in_features()
            ),
        ));
    }
    Ok(())
}

impl Llama {
    /// A model from its weights (the loaders' constructor: no random
    /// initialisation to overwrite). Every shape is checked against
    /// `config`, an error naming the weight. `lm_head` is `None` when the
    /// output layer is tied to the embedding.
    pub fn from_weights(
        config: LlamaConfig,
        embed_tokens: AnyEmbedding,
        layers: Vec<LlamaLayerWeights>,
        norm_weight: &Tensor,
        lm_head: Option<AnyLinear>,
    ) -> Result<Self> {
        config.check()?;
        let (d, hd) = (config.hidden_size, config.head_dim);
        let (q_rows, kv_rows) = (
            config.num_attention_heads * hd,
            config.num_key_value_heads * hd,
        );
        if embed_tokens.num_embeddings() != config.vocab_size || embed_tokens.dim() != d {
            return Err(Error::invalid(
                "Llama",
                format!(
                    "`embed_tokens` is [{}, {}], the config needs [{}, {d}]",
                    embed_tokens.num_embeddings(),
                    embed_tokens.dim(),
                    config.vocab_size
                ),
            ));
        }
        if layers.len() != config.num_hidden_layers {
            return Err(Error::invalid(
                "Llama",
                format!(
                    "{} layers given, the config has {}",
                    layers.len(),
                    config.num_hidden_layers
                ),
            ));
        }
        let eps = config.rms_norm_eps;
        let layers = layers
            .into_iter()
            .enumerate()
            .map(|(i, mut w)| {
                let f = config.intermediate_size;
                for (name, l, rows, cols) in [
                    ("q_proj", &w.q_proj, q_rows, d),
                    ("k_proj", &w.k_proj, kv_rows, d),
                    ("v_proj", &w.v_proj, kv_rows, d),
                    ("o_proj", &w.o_proj, d, q_rows),
                    ("gate_proj", &w.gate_proj, f, d),
                    ("up_proj", &w.up_proj, f, d),
                    ("down_proj", &w.down_proj, d, f),
                ] {
                    check_linear(&format!("model.layers.{i}.{name}"), l, rows, cols)?;
                }
                let qkv = stack(&mut [&mut w.q_proj, &mut w.k_proj, &mut w.v_proj])?;
                let gate_up = stack(&mut [&mut w.gate_proj, &mut w.up_proj])?;
                Ok(LlamaDecoderLayer {
                    self_attn: LlamaAttention {
                        q_proj: w.q_proj,
                        k_proj: w.k_proj,
                        v_proj: w.v_proj,
                        o_proj: w.o_proj,
                        qkv,
                    },
                    mlp: LlamaMlp {
                        gate_proj: w.gate_proj,
                        up_proj: w.up_proj,
                        down_proj: w.down_proj,
                        gate_up,
                    },
                    input_layernorm: norm(eps, &w.input_layernorm)?,
                    post_attention_layernorm: norm(eps, &w.post_attention_layernorm)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        match (&lm_head, config.tie_word_embeddings) {
            (Some(h), false) => check_linear("lm_head", h, config.vocab_size, d)?,
            (None, true) => {}
            (h, tied) => {
                return Err(Error::invalid(
                    "Llama",
                    format!(
                        "tie_word_embeddings is {tied} but an lm_head was {}given",
                        if h.is_some() { "" } else { "not " }
                    ),
                ))
            }
        }
        Ok(Llama {
            model: LlamaModel {
                embed_tokens,
                layers,
                norm: norm(eps, norm_weight)?,
            },
            lm_head,
            config,
            gradient_checkpointing: false,
        })
    }

    /// Turns per-layer gradient checkpointing on or off: the training
    /// forward then keeps only each decoder layer's input, and backward
    /// runs the layer again to differentiate it, so a long batch trains in
    /// a fraction of the memory for about a third more time. Only the
    /// trainable parameters' gradients leave a layer (a frozen base, as
    /// under LoRA, costs nothing extra). Dropout inside a layer must be
    /// off: a recomputed layer would draw other masks (an error says so).
    pub fn set_gradient_checkpointing(&mut self, on: bool) {
        self.gradient_checkpointing = on;
    }

    /// Whether per-layer gradient checkpointing is on.
    pub fn gradient_checkpointing(&self) -> bool {
        self.gradient_checkpointing
    }

    /// The configuration.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The model's weights as [`from_weights`](Self::from_weights) takes
    /// them (shared, not copied: the embedding, each layer's weights, the
    /// final norm's scale, the separate head if any), for savers.
    pub fn weights(
        &self,
    ) -> (
        AnyEmbedding,
        Vec<LlamaLayerWeights>,
        Tensor,
        Option<AnyLinear>,
    ) {
        let scale = |n: &RMSNorm| n.weight().expect("Llama's norms are affine").value();
        let layers = self
            .model
            .layers
            .iter()
            .map(|l| LlamaLayerWeights {
                q_proj: l.self_attn.q_proj.clone(),
                k_proj: l.self_attn.k_proj.clone(),
                v_proj: l.self_attn.v_proj.clone(),
                o_proj: l.self_attn.o_proj.clone(),
                gate_proj: l.mlp.gate_proj.clone(),
                up_proj: l.mlp.up_proj.clone(),
                down_proj: l.mlp.down_proj.clone(),
                input_layernorm: scale(&l.input_layernorm),
                post_attention_layernorm: scale(&l.post_attention_layernorm),
            })
            .collect();
        (
            self.model.embed_tokens.clone(),
            layers,
            scale(&self.model.norm),
            self.lm_head.clone(),
        )
    }

    /// Logits `[batch, positions, vocab]` of token ids `[batch, positions]`
    /// (row-major in `tokens`), every position attending to those before
    /// it: the training forward.
    pub fn forward<'g>(&self, graph: &'g Graph, tokens: &[usize], batch: usize) -> Result<Var<'g>> {
        if batch == 0 || !tokens.len().is_multiple_of(batch) {
            return Err(Error::invalid(
                "Llama::forward",
                format!("{} tokens do not split into {batch} rows", tokens.len()),
            ));
        }
        self.run(graph, tokens, batch, None, false)
    }

    /// Logits of the next token after `tokens`, given the keys and values
    /// of the positions before them in `cache` (which then holds these
    /// too): `[1, vocab]` for the last position only when `last_only`,
    /// else `[positions, vocab]`. The generation forward: it records no
    /// gradients (the logits are a constant of `graph`), and frees each
    /// layer's intermediate values as it goes.
    pub fn forward_cached<'g>(
        &self,
        graph: &'g Graph,
        tokens: &[usize],
        cache: &mut LlamaCache,
        last_only: bool,
    ) -> Result<Var<'g>> {
        if tokens.is_empty() {
            return Err(Error::invalid("Llama::forward_cached", "no tokens"));
        }
        let logits = self.run(graph, tokens, 1, Some(cache), last_only)?;
        let vocab = self.config.vocab_size;
        logits.try_reshape(&[-1, vocab as isize])
    }

    fn run<'g>(
        &self,
        graph: &'g Graph,
        tokens: &[usize],
        batch: usize,
        cache: Option<&mut LlamaCache>,
        last_only: bool,
    ) -> Result<Var<'g>> {
        self.head(&self.hidden(graph, tokens, batch, cache, last_only)?)
    }

    /// The final norm's output `[batch, positions, hidden]` (the last
    /// position only when `last_only`): what the output layer reads.
    fn hidden<'g>(
        &self,
        graph: &'g Graph,
        tokens: &[usize],
        batch: usize,
        mut cache: Option<&mut LlamaCache>,
        last_only: bool,
    ) -> Result<Var<'g>> {
        let c = &self.config;
        let t = tokens.len() / batch;
        if let Some(cache) = cache.as_mut() {
            cache.fit_layers(self.model.layers.len());
        }
        let past = cache.as_ref().map_or(0, |k| k.len);
        if let Some(&bad) = tokens.iter().find(|&&id| id >= c.vocab_size) {
            return Err(Error::IndexOutOfRange {
                op: "Llama",
                index: bad as i64,
                size: c.vocab_size,
            });
        }
        let mut x = self.model.embed_tokens.lookup(graph, tokens, &[batch, t])?;
        let mask = causal_mask(t, past)?;
        match cache.as_mut() {
            // Generation records no gradients: each layer runs in a graph
            // of its own, so its intermediate values are recycled as soon
            // as it is done instead of living until the caller's graph
            // goes; the thread's spare buffers go back after the last layer
            // (a 512-token prompt's would otherwise keep the peak at twice
            // llama.cpp's).
            Some(cache) => {
                let half = cache.half;
                let slots = &mut cache.layers;
                let mask = mask.as_ref();
                let h = self.decode_layers(x.value().clone(), |l, layer, h| {
                    layer.forward(c, h, past, Some((&mut slots[l], half)), mask)
                })?;
                x = graph.constant(h);
            }
            None if self.gradient_checkpointing && graph.is_recording() => {
                for layer in &self.model.layers {
                    x = layer.checkpointed(c, &x, mask.as_ref())?;
                }
            }
            None => {
                for layer in &self.model.layers {
                    x = layer.forward(c, &x, past, None, mask.as_ref())?;
                }
            }
        }
        if let Some(cache) = cache {
            cache.len = past + t;
        }
        if last_only {
            x = x.try_narrow(1, t as isize - 1, 1)?;
        }
        self.model.norm.forward(&x)
    }

    /// Runs `h` through every decoder layer while generating: each layer
    /// in a graph of its own, so its intermediate values are recycled by
    /// the next layer as soon as it is done (and freed after the last),
    /// and all of them on a worker of the pool, where a
    /// token's few hundred parallel products do not each wake the pool and
    /// sleep (`kernels/on_pool.rs`).
    pub(super) fn decode_layers(
        &self,
        h: Tensor,
        mut layer_step: impl for<'g> FnMut(usize, &LlamaDecoderLayer, &Var<'g>) -> Result<Var<'g>>
            + Send,
    ) -> Result<Tensor> {
        let layers = &self.model.layers;
        on_pool(true, move || {
            let rows = h.numel() / h.shape().last().copied().unwrap_or(1).max(1);
            let mut h = h;
            let run = || -> Result<Tensor> {
                for (l, layer) in layers.iter().enumerate() {
                    let g = Graph::new();
                    h = layer_step(l, layer, &g.constant(h.clone()))?
                        .value()
                        .clone();
                }
                Ok(h)
            };
            let h = run();
            // Each layer reuses the buffers the one before gave back; after
            // several positions (a prompt's megabytes) they go back to the
            // system once all have run. One position's few kilobytes stay
            // for the next token.
            if rows > 1 {
                Graph::release_spare_buffers();
            }
            h
        })
    }

    /// The output layer: logits of final hidden states `[.., hidden]`.
    fn head<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        match &self.lm_head {
            Some(head) => head.forward(x),
            None => self.model.embed_tokens.tied_head(x),
        }
    }
}

impl LoraModel for Llama {
    fn visit_linears(&self, f: &mut dyn FnMut(&str, bool, &AnyLinear)) {
        for (i, l) in self.model.layers.iter().enumerate() {
            for (name, layer) in l.linears() {
                f(&format!("model.layers.{i}.{name}"), false, layer);
            }
        }
        if let Some(h) = &self.lm_head {
            f("lm_head", true, h);
        }
    }

    fn visit_linears_mut(
        &mut self,
        f: &mut dyn FnMut(&str, bool, &mut AnyLinear) -> Result<()>,
    ) -> Result<()> {
        for (i, l) in self.model.layers.iter_mut().enumerate() {
            let (a, m) = (&mut l.self_attn, &mut l.mlp);
            for (name, layer) in [
                ("self_attn.q_proj", &mut a.q_proj),
                ("self_attn.k_proj", &mut a.k_proj),
                ("self_attn.v_proj", &mut a.v_proj),
                ("self_attn.o_proj", &mut a.o_proj),
                ("mlp.gate_proj", &mut m.gate_proj),
                ("mlp.up_proj", &mut m.up_proj),
                ("mlp.down_proj", &mut m.down_proj),
            ] {
                f(&format!("model.layers.{i}.{name}"), false, layer)?;
            }
        }
        if let Some(h) = &mut self.lm_head {
            f("lm_head", true, h)?;
        }
        Ok(())
    }
}

/// The bool mask `[t, past + t]` of `t` new positions after `past`
/// cached ones: row `i` sees keys `0..=past + i`. `None` when there is no
/// past (plain causal attention) or one new position (it sees every key).
fn causal_mask(t: usize, past: usize) -> Result<Option<Tensor>> {
    if t == 1 || past == 0 {
        return Ok(None);
    }
    let s = past + t;
    let mut m = vec![false; t * s];
    for (i, row) in m.chunks_exact_mut(s).enumerate() {
        row[..past + i + 1].fill(true);
    }
    Ok(Some(Tensor::from_vec(m, &[t, s])?))
}

impl LlamaDecoderLayer {
    fn forward<'g>(
        &self,
        c: &LlamaConfig,
        x: &Var<'g>,
        past: usize,
        cache: Option<Slot<'_>>,
        mask: Option<&Tensor>,
    ) -> Result<Var<'g>> {
        let h = self.input_layernorm.forward(x)?;
        let x = x.try_add(&self.self_attn.forward(c, &h, past, cache, mask)?)?;
        let h = self.post_attention_layernorm.forward(&x)?;
        x.try_add(&self.mlp.forward(&h)?)
    }
}

impl LlamaDecoderLayer {
    /// The training forward of this layer as one checkpointed node whose
    /// inputs are `x` and the layer's trainable parameters (bound to the
    /// layer's own `graph.param` calls inside the region).
    fn checkpointed<'g>(
        &self,
        c: &LlamaConfig,
        x: &Var<'g>,
        mask: Option<&Tensor>,
    ) -> Result<Var<'g>> {
        let graph = x.graph();
        if self.has_active_dropout() {
            return Err(Error::invalid(
                "Llama::gradient_checkpointing",
                "a layer with dropout cannot be recomputed with the same masks: set its dropout to 0",
            ));
        }
        let params: Vec<Parameter> = self
            .trainable_parameters()
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        let mut inputs = vec![x.clone()];
        inputs.extend(params.iter().map(|p| graph.param(p)));
        let refs: Vec<&Var<'g>> = inputs.iter().collect();
        let (layer, c, mask) = (self.clone(), c.clone(), mask.cloned());
        graph.checkpoint(&refs, move |v| {
            let g = v[0].graph();
            for (p, value) in params.iter().zip(&v[1..]) {
                g.try_bind_param(p, value)?;
            }
            layer.forward(&c, &v[0], 0, None, mask.as_ref())
        })
    }

    /// Whether any dropout inside the layer draws masks now.
    fn has_active_dropout(&self) -> bool {
        self.linears()
            .iter()
            .any(|(_, l)| matches!(l, AnyLinear::Lora(l) if l.has_active_dropout()))
    }

    /// The layer's linear maps with their paths inside the layer.
    fn linears(&self) -> [(&'static str, &AnyLinear); 7] {
        let (a, m) = (&self.self_attn, &self.mlp);
        [
            ("self_attn.q_proj", &a.q_proj),
            ("self_attn.k_proj", &a.k_proj),
            ("self_attn.v_proj", &a.v_proj),
            ("self_attn.o_proj", &a.o_proj),
            ("mlp.gate_proj", &m.gate_proj),
            ("mlp.up_proj", &m.up_proj),
            ("mlp.down_proj", &m.down_proj),
        ]
    }
}

impl LlamaAttention {
    /// The query, key and value projections of `x` (`[.., hidden]`), in
    /// one product when their weights are stacked.
    pub(super) fn project<'g>(&self, x: &Var<'g>) -> Result<(Var<'g>, Var<'g>, Var<'g>)> {
        let layers = [&self.q_proj, &self.k_proj, &self.v_proj];
        match &self.qkv {
            Some(w) if layers.iter().all(|l| l.quantized_base().is_some()) => {
                let y = x.try_quantized_matmul(w)?;
                let parts = with_adapters(x, &y, &layers)?;
                Ok((parts[0].clone(), parts[1].clone(), parts[2].clone()))
            }
            _ => Ok((
                self.q_proj.forward(x)?,
                self.k_proj.forward(x)?,
                self.v_proj.forward(x)?,
            )),
        }
    }

    fn forward<'g>(
        &self,
        c: &LlamaConfig,
        x: &Var<'g>,
        past: usize,
        cache: Option<Slot<'_>>,
        mask: Option<&Tensor>,
    ) -> Result<Var<'g>> {
        let (b, t) = (x.shape()[0] as isize, x.shape()[1] as isize);
        let (h, kv, hd) = (
            c.num_attention_heads as isize,
            c.num_key_value_heads as isize,
            c.head_dim as isize,
        );
        let heads = |v: Var<'g>, n: isize| -> Result<Var<'g>> {
            v.try_reshape(&[b, t, n, hd])?.try_transpose(1, 2)
        };
        let (q, k, v) = self.project(x)?;
        let q = heads(q, h)?.try_rotary_embedding(c.rope_theta, past)?;
        let mut k = heads(k, kv)?.try_rotary_embedding(c.rope_theta, past)?;
        let mut v = heads(v, kv)?;
        if let Some((slot, half)) = cache {
            let graph = x.graph();
            let (keys, values) = LayerCache::append(slot, past, k.value(), v.value(), half)?;
            k = graph.constant(keys);
            v = graph.constant(values);
        }
        let group = h / kv;
        let y = if t == 1 {
            // One new position sees every key: the query heads sharing a
            // key/value head are stacked as rows of one attention.
            let q = q.try_reshape(&[b, kv, group, hd])?;
            q.try_scaled_dot_product_attention(&k, &v, &SdpaOptions::new())?
        } else {
            // Each query head against its group's keys, broadcast (a view,
            // not a copy); causal, or aligned to the last key by `mask`
            // after a cached prefix.
            let s = k.shape()[2];
            let shared = |x: Var<'g>| {
                x.try_unsqueeze(2)?.try_expand(&[
                    b as usize,
                    kv as usize,
                    group as usize,
                    s,
                    hd as usize,
                ])
            };
            let q = q.try_reshape(&[b, kv, group, t, hd])?;
            let options = match mask {
                Some(m) => SdpaOptions::new().attn_mask(m),
                None => SdpaOptions::new().is_causal(true),
            };
            q.try_scaled_dot_product_attention(&shared(k)?, &shared(v)?, &options)?
        };
        let y = y
            .try_reshape(&[b, h, t, hd])?
            .try_transpose(1, 2)?
            .try_reshape(&[b, t, h * hd])?;
        self.o_proj.forward(&y)
    }
}

impl LlamaMlp {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let (gate, up) = self.gate_up(x)?;
        self.down_proj.forward(&gate.try_silu()?.try_mul(&up)?)
    }

    /// The gate and up projections of `x`, in one product when their
    /// weights are stacked.
    pub(super) fn gate_up<'g>(&self, x: &Var<'g>) -> Result<(Var<'g>, Var<'g>)> {
        let layers = [&self.gate_proj, &self.up_proj];
        match &self.gate_up {
            Some(w) if layers.iter().all(|l| l.quantized_base().is_some()) => {
                let y = x.try_quantized_matmul(w)?;
                let parts = with_adapters(x, &y, &layers)?;
                Ok((parts[0].clone(), parts[1].clone()))
            }
            _ => Ok((self.gate_proj.forward(x)?, self.up_proj.forward(x)?)),
        }
    }
}

//! One decode step for several independent sequences at once (continuous
//! batching): each sequence brings one new token and its own
//! [`LlamaCache`], possibly of a different length. The row-wise work (the
//! embedding, the norms, the query/key/value, output and feed-forward
//! products, the head) runs once over all the rows, so each weight row is
//! read once per step for every sequence instead of once per sequence;
//! only rotary positions and attention run per sequence, against that
//! sequence's own keys and values.
//!
//! Every row of a quantized product is its own integer dot products
//! (activations quantized per row), and the norms and elementwise ops
//! work per row, so on a quantized model each sequence gets exactly the
//! logits that [`Llama::forward_cached`] gives it alone. On dense f32
//! weights the matrix product of several rows may sum in another order
//! than the product of one, so the logits agree within f32 rounding.

use super::{LayerCache, Llama, LlamaAttention, LlamaCache, LlamaConfig, LlamaDecoderLayer};
use rayon::prelude::*;
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::core::graph::{Graph, Var};
use retrograd_engine::nn::Forward;
use retrograd_engine::ops::nn::{attention_inference, rotary_inference};
use retrograd_engine::tensor::Tensor;

const OP: &str = "Llama::forward_decode_batch";

impl Llama {
    /// Logits `[n, vocab]` of the next token of `n` independent sequences:
    /// `tokens[i]` is sequence `i`'s new token and `caches[i]` holds its
    /// past keys and values (and then this position too). Row `i` equals
    /// what [`forward_cached`](Self::forward_cached) gives sequence `i`
    /// alone, exactly on quantized weights (see the module docs of
    /// `llama/batch_decode.rs`). Like `forward_cached` it records no
    /// gradients and frees each layer's intermediate values as it goes.
    pub fn try_forward_decode_batch<'g>(
        &self,
        graph: &'g Graph,
        tokens: &[usize],
        caches: &mut [&mut LlamaCache],
    ) -> Result<Var<'g>> {
        let c = &self.config;
        let n = tokens.len();
        if n == 0 || caches.len() != n {
            return Err(Error::invalid(
                OP,
                format!(
                    "{n} tokens and {} caches: one token per cache, at least one",
                    caches.len()
                ),
            ));
        }
        if let Some(&bad) = tokens.iter().find(|&&id| id >= c.vocab_size) {
            return Err(Error::IndexOutOfRange {
                op: "Llama",
                index: bad as i64,
                size: c.vocab_size,
            });
        }
        let layers = self.model.layers.len();
        for cache in caches.iter_mut() {
            cache.fit_layers(layers);
        }
        let pasts: Vec<usize> = caches.iter().map(|k| k.len).collect();
        let h = self
            .model
            .embed_tokens
            .lookup(graph, tokens, &[n, 1])?
            .value()
            .clone();
        let pasts_ref = &pasts;
        let layer_caches = &mut *caches;
        let h = self.decode_layers(h, |l, layer, h| {
            layer.forward_decode_batch(c, h, pasts_ref, layer_caches, l)
        })?;
        for (cache, past) in caches.iter_mut().zip(&pasts) {
            cache.len = past + 1;
        }
        let x = self.model.norm.forward(&graph.constant(h))?;
        let logits = match &self.lm_head {
            Some(head) => head.forward(&x)?,
            None => self.model.embed_tokens.tied_head(&x)?,
        };
        logits.try_reshape(&[n as isize, c.vocab_size as isize])
    }

    /// [`try_forward_decode_batch`](Self::try_forward_decode_batch),
    /// panicking at the caller's line with its error.
    #[track_caller]
    pub fn forward_decode_batch<'g>(
        &self,
        graph: &'g Graph,
        tokens: &[usize],
        caches: &mut [&mut LlamaCache],
    ) -> Var<'g> {
        retrograd_engine::base::error::or_panic(
            self.try_forward_decode_batch(graph, tokens, caches),
        )
    }
}

impl LlamaDecoderLayer {
    /// Layer `l` over `x` `[n, 1, hidden]`, row `i` at position `pasts[i]`
    /// of `caches[i]`.
    fn forward_decode_batch<'g>(
        &self,
        c: &LlamaConfig,
        x: &Var<'g>,
        pasts: &[usize],
        caches: &mut [&mut LlamaCache],
        l: usize,
    ) -> Result<Var<'g>> {
        let h = self.input_layernorm.forward(x)?;
        let a = self
            .self_attn
            .forward_decode_batch(c, &h, pasts, caches, l)?;
        let x = x.try_add(&a)?;
        let h = self.post_attention_layernorm.forward(&x)?;
        x.try_add(&self.mlp.forward(&h)?)
    }
}

impl LlamaAttention {
    /// Attention of `x` `[n, 1, hidden]`: the projections once for all
    /// rows, then each row's rotary position, cache update and attention
    /// on its own, the sequences on parallel threads, then the output
    /// projection once. Each sequence runs the ops that
    /// [`Llama::forward_cached`] records for one new position, on
    /// tensors, so its bits are the same.
    fn forward_decode_batch<'g>(
        &self,
        c: &LlamaConfig,
        x: &Var<'g>,
        pasts: &[usize],
        caches: &mut [&mut LlamaCache],
        l: usize,
    ) -> Result<Var<'g>> {
        let graph = x.graph();
        let (h, kv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let (q, k, v) = self.project(x)?;
        let (q, k, v) = (q.value(), k.value(), v.value());
        // Sequence `i`'s heads of `t` as `[1, heads, 1, head_dim]`.
        let heads = |t: &Tensor, i: usize, n: usize| -> Result<Tensor> {
            t.narrow(0, i as isize, 1)?
                .reshape(&[1, 1, n, hd])?
                .transpose(1, 2)
        };
        let rows: Vec<Tensor> = caches
            .par_iter_mut()
            .zip(pasts.par_iter())
            .enumerate()
            .map(|(i, (cache, &past))| -> Result<Tensor> {
                let qi = rotary_inference(&heads(q, i, h)?, c.rope_theta, past)?;
                let ki = rotary_inference(&heads(k, i, kv)?, c.rope_theta, past)?;
                let vi = heads(v, i, kv)?;
                let half = cache.half;
                let (keys, values) =
                    LayerCache::append(&mut cache.layers[l], past, &ki, &vi, half)?;
                // The query heads sharing a key/value head, stacked as
                // rows; one new position sees every key, so no mask.
                let qi = qi.reshape(&[1, kv, h / kv, hd])?;
                attention_inference(&qi, &keys, &values, None, None, false)
            })
            .collect::<Result<_>>()?;
        let mut y = Vec::with_capacity(rows.len() * h * hd);
        for row in &rows {
            y.extend(row.to_vec::<f32>()?);
        }
        let y = Tensor::from_vec(y, &[rows.len(), 1, h * hd])?;
        self.o_proj.forward(&graph.constant(y))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use crate::models::{Llama, LlamaCache, LlamaConfig, LlamaLayerWeights};
    use retrograd_engine::core::graph::Graph;
    use retrograd_engine::nn::{
        AnyEmbedding, AnyLinear, Embedding, Linear, Parameter, QuantizedLinear,
    };
    use retrograd_engine::quant::{GgmlType, QMatrix};
    use retrograd_engine::tensor::{DType, Tensor};

    fn random(rng: &mut ChaCha8Rng, rows: usize, cols: usize, scale: f32) -> Tensor {
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| (rng.random::<f32>() - 0.5) * scale)
            .collect();
        Tensor::from_vec(v, &[rows, cols]).unwrap()
    }

    /// A small Llama (2 layers, grouped-query attention), Q4_1 matrices and
    /// a Q8_0 embedding tied to the head, as SmolLM2's file, or all f32.
    fn model(quantized: bool) -> Llama {
        let config = LlamaConfig {
            vocab_size: 96,
            hidden_size: 64,
            intermediate_size: 128,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 16,
            rope_theta: 10_000.0,
            rms_norm_eps: 1e-5,
            max_position_embeddings: 128,
            tie_word_embeddings: quantized,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut linear = |rows, cols| {
            let w = random(&mut rng, rows, cols, 0.3);
            if quantized {
                AnyLinear::Quantized(QuantizedLinear::new(QMatrix::quantize(&w, GgmlType::Q4_1)))
            } else {
                AnyLinear::Dense(Linear::from_parameters(Parameter::new(w), None).unwrap())
            }
        };
        let layers = (0..2)
            .map(|_| LlamaLayerWeights {
                q_proj: linear(64, 64),
                k_proj: linear(32, 64),
                v_proj: linear(32, 64),
                o_proj: linear(64, 64),
                gate_proj: linear(128, 64),
                up_proj: linear(128, 64),
                down_proj: linear(64, 128),
                input_layernorm: Tensor::ones(&[64], DType::F32).unwrap(),
                post_attention_layernorm: Tensor::ones(&[64], DType::F32).unwrap(),
            })
            .collect();
        let head = (!quantized).then(|| linear(96, 64));
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let table = random(&mut rng, 96, 64, 2.0);
        let embed = if quantized {
            AnyEmbedding::Quantized(Arc::new(QMatrix::quantize(&table, GgmlType::Q8_0)))
        } else {
            AnyEmbedding::Dense(Embedding::from_weight(Parameter::new(table)).unwrap())
        };
        let norm = Tensor::ones(&[64], DType::F32).unwrap();
        Llama::from_weights(config, embed, layers, &norm, head).unwrap()
    }

    /// The index of the largest value.
    fn argmax(v: &[f32]) -> usize {
        (0..v.len()).fold(0, |best, i| if v[i] > v[best] { i } else { best })
    }

    /// Three sequences with prompts of different lengths, decoded four
    /// steps in a batch and each alone: the largest difference of logits.
    fn batched_against_alone(model: &Llama, exact_cache: bool) -> f32 {
        let prompts: [&[usize]; 3] = [&[1, 2, 3], &[9], &[5, 6, 7, 8, 10, 11, 12]];
        let fresh = || {
            if exact_cache {
                LlamaCache::exact()
            } else {
                LlamaCache::new()
            }
        };
        let mut alone: Vec<LlamaCache> = prompts.iter().map(|_| fresh()).collect();
        let mut batched: Vec<LlamaCache> = prompts.iter().map(|_| fresh()).collect();
        let mut next = Vec::new();
        for (p, (a, b)) in prompts.iter().zip(alone.iter_mut().zip(&mut batched)) {
            let g = Graph::new();
            let logits = model.forward_cached(&g, p, a, true).unwrap();
            model.forward_cached(&g, p, b, true).unwrap();
            next.push(argmax(&logits.value().to_vec::<f32>().unwrap()));
        }
        let mut worst = 0.0f32;
        for _ in 0..4 {
            let g = Graph::new();
            let mut refs: Vec<&mut LlamaCache> = batched.iter_mut().collect();
            let rows = model
                .forward_decode_batch(&g, &next, &mut refs)
                .value()
                .to_vec::<f32>()
                .unwrap();
            assert_eq!(rows.len(), 3 * 96);
            for (i, cache) in alone.iter_mut().enumerate() {
                let one = model
                    .forward_cached(&g, &[next[i]], cache, true)
                    .unwrap()
                    .value()
                    .to_vec::<f32>()
                    .unwrap();
                let row = &rows[i * 96..(i + 1) * 96];
                for (a, b) in one.iter().zip(row) {
                    worst = worst.max((a - b).abs());
                }
                assert_eq!(cache.len(), batched[i].len());
                next[i] = argmax(&one);
            }
        }
        worst
    }

    #[test]
    fn quantized_rows_equal_each_sequence_alone() {
        let model = model(true);
        assert_eq!(batched_against_alone(&model, false), 0.0);
        assert_eq!(batched_against_alone(&model, true), 0.0);
    }

    #[test]
    fn dense_rows_agree_within_rounding() {
        let model = model(false);
        let worst = batched_against_alone(&model, true);
        assert!(worst < 1e-4, "{worst}");
    }

    #[test]
    fn bad_calls_are_errors() {
        let model = model(true);
        let g = Graph::new();
        let mut a = LlamaCache::new();
        assert!(model.try_forward_decode_batch(&g, &[], &mut []).is_err());
        assert!(model
            .try_forward_decode_batch(&g, &[1, 2], &mut [&mut a])
            .is_err());
        assert!(model
            .try_forward_decode_batch(&g, &[96], &mut [&mut a])
            .is_err());
        assert!(a.is_empty());
    }
}

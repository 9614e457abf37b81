//! One decode step of a quantized Llama, for the instruction-count gate: a
//! model with SmolLM2-135M's layer shapes (width 576, 9 query and 3
//! key/value heads of 64, feed-forward 1,536) but 4 layers and a 4,096-token
//! vocabulary, random weights from a fixed seed quantized as SmolLM2's file
//! is (Q4_1 matrices, a Q8_0 embedding tied to the output), so it needs no
//! model file. A 16-token prompt fills the key/value cache once; each step
//! runs one token through a copy of that cache.

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use retrograd::nn::{
    AnyEmbedding, AnyLinear, Llama, LlamaCache, LlamaConfig, LlamaLayerWeights, QuantizedLinear,
};
use retrograd::quant::{GgmlType, QMatrix};
use retrograd::{Graph, Tensor};

/// The model and its prefilled cache.
pub struct DecodeStep {
    model: Llama,
    cache: LlamaCache,
}

fn random(rng: &mut ChaCha8Rng, rows: usize, cols: usize, scale: f32) -> Tensor {
    let v: Vec<f32> = (0..rows * cols)
        .map(|_| (rng.random::<f32>() - 0.5) * scale)
        .collect();
    Tensor::from_vec(v, &[rows, cols]).expect("shape")
}

impl DecodeStep {
    /// The model, and the cache after a 16-token prompt.
    pub fn new() -> Self {
        let config = LlamaConfig {
            vocab_size: 4096,
            hidden_size: 576,
            intermediate_size: 1536,
            num_hidden_layers: 4,
            num_attention_heads: 9,
            num_key_value_heads: 3,
            head_dim: 64,
            rope_theta: 100_000.0,
            rms_norm_eps: 1e-5,
            max_position_embeddings: 8192,
            tie_word_embeddings: true,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let mut q4 = |rows, cols| {
            let w = random(&mut rng, rows, cols, 0.1);
            AnyLinear::Quantized(QuantizedLinear::new(QMatrix::quantize(&w, GgmlType::Q4_1)))
        };
        let layers = (0..config.num_hidden_layers)
            .map(|_| LlamaLayerWeights {
                q_proj: q4(576, 576),
                k_proj: q4(192, 576),
                v_proj: q4(192, 576),
                o_proj: q4(576, 576),
                gate_proj: q4(1536, 576),
                up_proj: q4(1536, 576),
                down_proj: q4(576, 1536),
                input_layernorm: Tensor::ones(&[576], retrograd::DType::F32).expect("norm"),
                post_attention_layernorm: Tensor::ones(&[576], retrograd::DType::F32)
                    .expect("norm"),
            })
            .collect();
        let embed = QMatrix::quantize(&random(&mut rng, 4096, 576, 1.0), GgmlType::Q8_0);
        let norm = Tensor::ones(&[576], retrograd::DType::F32).expect("norm");
        let model = Llama::from_weights(
            config,
            AnyEmbedding::Quantized(Arc::new(embed)),
            layers,
            &norm,
            None,
        )
        .expect("a valid model");
        let mut cache = LlamaCache::new();
        let prompt: Vec<usize> = (0..16).map(|i| (i * 97) % 4096).collect();
        model
            .forward_cached(&Graph::new(), &prompt, &mut cache, true)
            .expect("prompt");
        DecodeStep { model, cache }
    }

    /// One token after the prompt; returns the sum of its logits.
    pub fn step(&mut self) -> f64 {
        let mut cache = self.cache.clone();
        let g = Graph::new();
        let logits = self
            .model
            .forward_cached(&g, &[7], &mut cache, true)
            .expect("decode step");
        logits.value().to_f64_vec().iter().sum()
    }
}

//! Hugging Face `LlamaForCausalLM` folders into [`Llama`]: `config.json`
//! (`model_type: "llama"`) and safetensors weights under the model's own
//! names, in f32 and trainable.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::Path;

use crate::hub::{ModelConfig, Weights};
use crate::models::{Llama, LlamaLayerWeights};
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::nn::{AnyEmbedding, AnyLinear, Embedding, Linear, Parameter};
use retrograd_engine::tensor::DType;

impl Llama {
    /// Loads a `transformers` Llama folder (`config.json`,
    /// `model.safetensors` or a sharded index) in f32 (f16/bf16 converted),
    /// every weight a trainable parameter. A missing, misshapen or
    /// unexpected tensor is an error naming it and the file.
    ///
    /// ```no_run
    /// let model = retrograd::nn::Llama::from_pretrained("path/to/llama")?;
    /// assert_eq!(model.config().num_key_value_heads, 2);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<Llama> {
        let dir = dir.as_ref();
        let config = ModelConfig::read(dir)?.llama()?;
        let weights = Weights::open(dir)?;
        let used = RefCell::new(BTreeSet::new());
        let take = |name: String| {
            let t = weights.tensor(&name, DType::F32)?;
            used.borrow_mut().insert(name);
            Ok::<_, Error>(t)
        };
        let linear = |name: String| -> Result<AnyLinear> {
            Ok(AnyLinear::Dense(Linear::from_parameters(
                Parameter::new(take(name)?),
                None,
            )?))
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for i in 0..config.num_hidden_layers {
            let p = format!("model.layers.{i}.");
            layers.push(LlamaLayerWeights {
                q_proj: linear(format!("{p}self_attn.q_proj.weight"))?,
                k_proj: linear(format!("{p}self_attn.k_proj.weight"))?,
                v_proj: linear(format!("{p}self_attn.v_proj.weight"))?,
                o_proj: linear(format!("{p}self_attn.o_proj.weight"))?,
                gate_proj: linear(format!("{p}mlp.gate_proj.weight"))?,
                up_proj: linear(format!("{p}mlp.up_proj.weight"))?,
                down_proj: linear(format!("{p}mlp.down_proj.weight"))?,
                input_layernorm: weights
                    .tensor(&format!("{p}input_layernorm.weight"), DType::F32)?,
                post_attention_layernorm: weights
                    .tensor(&format!("{p}post_attention_layernorm.weight"), DType::F32)?,
            });
            used.borrow_mut()
                .insert(format!("{p}input_layernorm.weight"));
            used.borrow_mut()
                .insert(format!("{p}post_attention_layernorm.weight"));
        }
        let lm_head = (!config.tie_word_embeddings)
            .then(|| linear("lm_head.weight".into()))
            .transpose()?;
        let embed = weights.tensor("model.embed_tokens.weight", DType::F32)?;
        let norm = weights.tensor("model.norm.weight", DType::F32)?;
        used.borrow_mut().extend([
            "model.embed_tokens.weight".to_string(),
            "model.norm.weight".to_string(),
        ]);
        // A tied checkpoint may still carry the head: it must be the embedding.
        if config.tie_word_embeddings && weights.contains("lm_head.weight") {
            if weights.tensor("lm_head.weight", DType::F32)? != embed {
                return Err(Error::invalid(
                    "Llama::from_pretrained",
                    format!(
                        "{}: lm_head.weight differs from the tied embedding",
                        dir.display()
                    ),
                ));
            }
            used.borrow_mut().insert("lm_head.weight".into());
        }
        if let Some(extra) = weights
            .names()
            .into_iter()
            .find(|n| !used.borrow().contains(*n))
        {
            return Err(Error::invalid(
                "Llama::from_pretrained",
                format!("{}: unexpected tensor `{extra}`", dir.display()),
            ));
        }
        let embed = AnyEmbedding::Dense(Embedding::from_weight(Parameter::new(embed))?);
        Llama::from_weights(config, embed, layers, &norm, lm_head)
    }
}

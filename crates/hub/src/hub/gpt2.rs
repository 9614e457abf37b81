//! GPT-2 checkpoints in and out of [`Gpt`]: `transformers`'
//! `GPT2LMHeadModel` folders, whose `Conv1D` weights are stored
//! `[in, out]` (transposed against a linear layer's) and whose output head
//! is the token embedding.

use std::path::Path;

use rand::SeedableRng;

use crate::hub::config::gpt2_config_json;
use crate::hub::{ModelConfig, NameMap, Weights, CONFIG_FILE};
use crate::models::Gpt;
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::nn::{Module, StateDict};
use retrograd_engine::tensor::Tensor;

/// The name map between [`Gpt`]'s names (nanoGPT's) and GPT-2's: the
/// `transformer.` prefix, `attn.c_attn` for the fused `in_proj`,
/// `attn.c_proj` for `out_proj`, the four `Conv1D` weights transposed; the
/// causal-mask buffers (`attn.bias`, `attn.masked_bias`) and the tied
/// `lm_head.weight` are not loaded.
pub fn gpt2_name_map() -> NameMap {
    NameMap::new()
        .prefix("transformer.")
        .save_prefix("transformer.")
        .rename(".attn.in_proj_weight", ".attn.c_attn.weight")
        .rename(".attn.in_proj_bias", ".attn.c_attn.bias")
        .rename(".attn.out_proj.", ".attn.c_proj.")
        .transposed(".attn.in_proj_weight")
        .transposed(".attn.out_proj.weight")
        .transposed(".mlp.c_fc.weight")
        .transposed(".mlp.c_proj.weight")
        .ignore(".attn.bias")
        .ignore(".attn.masked_bias")
        .ignore("lm_head.weight")
}

impl Gpt {
    /// Loads a `transformers` GPT-2 folder (`config.json` with
    /// `model_type: "gpt2"`, `model.safetensors` or a sharded index) into
    /// a [`Gpt`] in f32 (f16/bf16 converted). A checkpoint that carries
    /// `lm_head.weight` must have it equal to the token embedding (the tied
    /// head). The model comes in evaluation mode (no dropout), as
    /// `transformers` returns it; `set_training(true)` to fine-tune.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<Gpt> {
        let dir = dir.as_ref();
        let config = ModelConfig::read(dir)?.gpt2()?;
        let weights = Weights::open(dir)?;
        // Every parameter is overwritten: the generator only fills the shapes.
        let mut gpt = Gpt::with_rng(config, &mut rand_chacha::ChaCha8Rng::seed_from_u64(0))?;
        gpt2_name_map().load(&gpt, &weights)?;
        if weights.contains("lm_head.weight") {
            let head = weights.tensor("lm_head.weight", config.dtype)?;
            if head != gpt.wte().weight().value() {
                return Err(Error::TensorMismatch {
                    context: format!(
                        "Gpt::from_pretrained: {}",
                        weights.file_of("lm_head.weight").expect("present").display()
                    ),
                    name: "lm_head.weight".into(),
                    problem: retrograd_engine::base::error::TensorProblem::Value(
                        "differs from transformer.wte.weight: Gpt's output head is tied to the token embedding"
                            .into(),
                    ),
                });
            }
        }
        gpt.set_training(false);
        Ok(gpt)
    }

    /// Writes the model as a folder `transformers` loads with
    /// `GPT2LMHeadModel.from_pretrained`: `config.json` and
    /// `model.safetensors` under GPT-2's names (the head tied, so not
    /// written). A model without biases gets zero biases, which compute
    /// the same.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        let config = self.config();
        let map = gpt2_name_map();
        let names = map.state_dict(self)?;
        let mut extra = StateDict::new();
        let e = config.n_embd;
        let mut zeros = |name: String, n: usize| -> Result<()> {
            if !names.contains_key(&name) {
                extra.insert(name, Tensor::zeros(&[n], config.dtype)?);
            }
            Ok(())
        };
        for i in 0..config.n_layer {
            let at = |part: &str| format!("transformer.h.{i}.{part}");
            zeros(at("ln_1.bias"), e)?;
            zeros(at("attn.c_attn.bias"), 3 * e)?;
            zeros(at("attn.c_proj.bias"), e)?;
            zeros(at("ln_2.bias"), e)?;
            zeros(at("mlp.c_fc.bias"), 4 * e)?;
            zeros(at("mlp.c_proj.bias"), e)?;
        }
        zeros("transformer.ln_f.bias".into(), e)?;
        map.save(self, extra, dir)?;
        crate::hub::write_json(&dir.join(CONFIG_FILE), &gpt2_config_json(config)?)
    }
}

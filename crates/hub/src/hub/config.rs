//! `config.json`: the architecture and sizes of a model folder, read into
//! [`BertConfig`] or [`GptConfig`], and written back for GPT-2.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::models::{BertConfig, GptConfig, LlamaConfig};
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::nn::Activation;
use retrograd_engine::tensor::DType;

/// The configuration file of a model folder.
pub const CONFIG_FILE: &str = "config.json";

/// A parsed `config.json`, with the path for messages.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    path: PathBuf,
    json: Map<String, Value>,
}

impl ModelConfig {
    /// Reads `dir/config.json` (or the file itself when `path` is one).
    pub fn read(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let path = if path.is_dir() {
            path.join(CONFIG_FILE)
        } else {
            path.to_path_buf()
        };
        let text = std::fs::read_to_string(&path).map_err(|e| Error::Io {
            op: "ModelConfig::read",
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::parse(&text, &path)
    }

    /// Parses the text of a `config.json` (`path` is for messages).
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        match serde_json::from_str(text) {
            Ok(Value::Object(json)) => Ok(ModelConfig {
                path: path.to_path_buf(),
                json,
            }),
            Ok(_) => Err(Self::format_error(path, "not a JSON object".into())),
            Err(e) => Err(Self::format_error(path, format!("not valid JSON: {e}"))),
        }
    }

    fn format_error(path: &Path, reason: String) -> Error {
        Error::Format {
            op: "config.json",
            path: path.display().to_string(),
            reason,
        }
    }

    fn bad(&self, reason: String) -> Error {
        Self::format_error(&self.path, reason)
    }

    /// The file this came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The raw JSON object.
    pub fn json(&self) -> &Map<String, Value> {
        &self.json
    }

    /// `model_type` (`"bert"`, `"gpt2"`, ...).
    pub fn model_type(&self) -> Result<&str> {
        self.json
            .get("model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| self.bad("no `model_type` string".into()))
    }

    /// Fails unless `model_type` is one of `types`, naming what it found.
    pub fn expect_model_type(&self, types: &[&str], reader: &str) -> Result<()> {
        let found = self.model_type()?;
        if types.contains(&found) {
            return Ok(());
        }
        Err(self.bad(format!(
            "model_type `{found}` is not an architecture {reader} reads (it reads {})",
            types.join(", ")
        )))
    }

    /// A positive size `key`, or `default` when absent (`None`: required).
    fn size(&self, key: &str, default: Option<usize>) -> Result<usize> {
        match self.json.get(key) {
            None | Some(Value::Null) => default.ok_or_else(|| self.bad(format!("no `{key}`"))),
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .map(|n| n as usize)
                .ok_or_else(|| self.bad(format!("`{key}` is {v}, not a positive integer"))),
        }
    }

    /// A number `key`, or `default` when absent.
    fn number(&self, key: &str, default: f64) -> Result<f64> {
        match self.json.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_f64()
                .ok_or_else(|| self.bad(format!("`{key}` is {v}, not a number"))),
        }
    }

    /// An activation name `key` (Hugging Face's names), or `default`.
    fn activation(&self, key: &str, default: Activation) -> Result<Activation> {
        let Some(v) = self.json.get(key) else {
            return Ok(default);
        };
        let name = v
            .as_str()
            .ok_or_else(|| self.bad(format!("`{key}` is {v}, not an activation name")))?;
        Ok(match name {
            "gelu" => Activation::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
            "relu" => Activation::Relu,
            "silu" | "swish" => Activation::Silu,
            "tanh" => Activation::Tanh,
            "sigmoid" => Activation::Sigmoid,
            other => {
                return Err(self.bad(format!(
                    "`{key}` is `{other}`; retrograd has gelu, gelu_new (tanh), relu, silu, tanh, sigmoid"
                )))
            }
        })
    }

    /// The [`BertConfig`] of a `model_type: "bert"` folder (absolute
    /// position embeddings only), in f32.
    pub fn bert(&self) -> Result<BertConfig> {
        self.expect_model_type(&["bert"], "BertModel")?;
        if let Some(kind) = self
            .json
            .get("position_embedding_type")
            .and_then(Value::as_str)
            && kind != "absolute"
        {
            return Err(self.bad(format!(
                "position_embedding_type `{kind}`: only `absolute` is supported"
            )));
        }
        let defaults = BertConfig::base();
        let config = BertConfig {
            vocab_size: self.size("vocab_size", None)?,
            hidden_size: self.size("hidden_size", None)?,
            num_hidden_layers: self.size("num_hidden_layers", None)?,
            num_attention_heads: self.size("num_attention_heads", None)?,
            intermediate_size: self.size("intermediate_size", None)?,
            hidden_act: self.activation("hidden_act", Activation::Gelu)?,
            hidden_dropout_prob: self.number("hidden_dropout_prob", 0.1)?,
            attention_probs_dropout_prob: self.number("attention_probs_dropout_prob", 0.1)?,
            max_position_embeddings: self.size("max_position_embeddings", Some(512))?,
            type_vocab_size: self.size("type_vocab_size", Some(2))?,
            layer_norm_eps: self.number("layer_norm_eps", defaults.layer_norm_eps)?,
            dtype: DType::F32,
        };
        config.check().map_err(|e| self.bad(e.to_string()))?;
        Ok(config)
    }

    /// The classifier dropout of a sequence-classification head:
    /// `classifier_dropout`, else `hidden_dropout_prob`.
    pub fn classifier_dropout(&self) -> Result<f64> {
        let hidden = self.number("hidden_dropout_prob", 0.1)?;
        self.number("classifier_dropout", hidden)
    }

    /// The label count of a classification checkpoint (`id2label`'s size,
    /// or `num_labels`), if it says.
    pub fn num_labels(&self) -> Option<usize> {
        if let Some(Value::Object(m)) = self.json.get("id2label") {
            return Some(m.len());
        }
        self.json
            .get("num_labels")
            .and_then(Value::as_u64)
            .map(|n| n as usize)
    }

    /// The [`LlamaConfig`] of a `model_type: "llama"` folder (also
    /// `mistral` without a sliding window): `rope_theta` at the top level or
    /// in `rope_parameters` (transformers 5); a rope scaling other than
    /// `default`, attention or MLP biases, and an activation other than
    /// SiLU are errors naming the field.
    pub fn llama(&self) -> Result<LlamaConfig> {
        self.expect_model_type(&["llama", "mistral"], "Llama")?;
        for flag in ["attention_bias", "mlp_bias"] {
            if self.json.get(flag).and_then(Value::as_bool) == Some(true) {
                return Err(self.bad(format!(
                    "`{flag}` is true: Llama's projections have no bias"
                )));
            }
        }
        if self
            .json
            .get("sliding_window")
            .is_some_and(|v| !v.is_null())
        {
            return Err(self.bad("`sliding_window` attention is not supported".into()));
        }
        if self.activation("hidden_act", Activation::Silu)? != Activation::Silu {
            return Err(self.bad("`hidden_act` must be silu (SwiGLU)".into()));
        }
        let rope = self
            .json
            .get("rope_parameters")
            .or_else(|| self.json.get("rope_scaling"));
        let mut rope_theta = self.number("rope_theta", 10_000.0)?;
        if let Some(Value::Object(r)) = rope {
            let kind = r
                .get("rope_type")
                .or_else(|| r.get("type"))
                .and_then(Value::as_str);
            if let Some(kind) = kind.filter(|k| *k != "default") {
                return Err(self.bad(format!(
                    "rope type `{kind}` is not supported (only `default`)"
                )));
            }
            if let Some(theta) = r.get("rope_theta").and_then(Value::as_f64) {
                rope_theta = theta;
            }
        }
        let hidden_size = self.size("hidden_size", None)?;
        let heads = self.size("num_attention_heads", None)?;
        let config = LlamaConfig {
            vocab_size: self.size("vocab_size", None)?,
            hidden_size,
            intermediate_size: self.size("intermediate_size", None)?,
            num_hidden_layers: self.size("num_hidden_layers", None)?,
            num_attention_heads: heads,
            num_key_value_heads: self.size("num_key_value_heads", Some(heads))?,
            head_dim: self.size("head_dim", Some(hidden_size / heads.max(1)))?,
            rope_theta,
            rms_norm_eps: self.number("rms_norm_eps", 1e-6)?,
            max_position_embeddings: self.size("max_position_embeddings", Some(2048))?,
            tie_word_embeddings: self
                .json
                .get("tie_word_embeddings")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        };
        config.check().map_err(|e| self.bad(e.to_string()))?;
        Ok(config)
    }

    /// The [`GptConfig`] of a `model_type: "gpt2"` folder: biases, the
    /// activation of `activation_function` (`gelu_new` is the tanh form),
    /// dropout from `resid_pdrop`; the layer norms' epsilon must be 1e-5
    /// and the feed-forward width 4 · `n_embd`, as in [`Gpt`](crate::models::Gpt).
    pub fn gpt2(&self) -> Result<GptConfig> {
        self.expect_model_type(&["gpt2"], "Gpt")?;
        let n_embd = self.size("n_embd", None)?;
        let eps = self.number("layer_norm_epsilon", 1e-5)?;
        if eps != 1e-5 {
            return Err(self.bad(format!(
                "layer_norm_epsilon {eps}: Gpt's layer norms use 1e-5"
            )));
        }
        if let Some(inner) = self.json.get("n_inner").filter(|v| !v.is_null())
            && inner.as_u64() != Some(4 * n_embd as u64)
        {
            return Err(self.bad(format!(
                "n_inner {inner}: Gpt's feed-forward width is 4 * n_embd = {}",
                4 * n_embd
            )));
        }
        for flag in ["scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"] {
            if self.json.get(flag).and_then(Value::as_bool) == Some(true) {
                return Err(self.bad(format!("`{flag}` is not supported")));
            }
        }
        if self
            .json
            .get("tie_word_embeddings")
            .and_then(Value::as_bool)
            == Some(false)
        {
            return Err(self.bad(
                "tie_word_embeddings is false: Gpt's output layer is its token embedding".into(),
            ));
        }
        let config = GptConfig {
            vocab_size: self.size("vocab_size", None)?,
            block_size: self.size("n_positions", None)?,
            n_layer: self.size("n_layer", None)?,
            n_head: self.size("n_head", None)?,
            n_embd,
            dropout: self.number("resid_pdrop", 0.1)?,
            bias: true,
            activation: self.activation("activation_function", Activation::GeluTanh)?,
            dtype: DType::F32,
        };
        if !(0.0..1.0).contains(&config.dropout) || !n_embd.is_multiple_of(config.n_head) {
            return Err(self.bad(format!("unusable sizes or dropout: {config:?}")));
        }
        Ok(config)
    }
}

/// The `config.json` of a GPT-2 folder for `config`, as `transformers`
/// writes one for `GPT2LMHeadModel`.
pub(crate) fn gpt2_config_json(config: &GptConfig) -> Result<Value> {
    let activation = match config.activation {
        Activation::Gelu => "gelu",
        Activation::GeluTanh => "gelu_new",
        Activation::Relu => "relu",
        Activation::Silu => "silu",
        Activation::Tanh => "tanh",
        Activation::Sigmoid => "sigmoid",
        other => {
            return Err(Error::invalid(
                "Gpt::save_pretrained",
                format!("GPT-2 has no activation `{other}`"),
            ))
        }
    };
    // GPT-2's `<|endoftext|>` where the vocabulary has it; a smaller one
    // (characters) has none, and transformers warns on an id outside it.
    let end_of_text = (config.vocab_size > 50256).then_some(50256);
    Ok(serde_json::json!({
        "architectures": ["GPT2LMHeadModel"],
        "bos_token_id": end_of_text,
        "eos_token_id": end_of_text,
        "model_type": "gpt2",
        "vocab_size": config.vocab_size,
        "n_positions": config.block_size,
        "n_embd": config.n_embd,
        "n_layer": config.n_layer,
        "n_head": config.n_head,
        "n_inner": null,
        "activation_function": activation,
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout,
        "layer_norm_epsilon": 1e-5,
        "initializer_range": 0.02,
        "scale_attn_weights": true,
        "tie_word_embeddings": true,
        "torch_dtype": "float32",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ModelConfig> {
        ModelConfig::parse(text, Path::new("dir/config.json"))
    }

    #[test]
    fn bert_config_reads_transformers_fields() {
        let c = parse(
            r#"{"model_type": "bert", "vocab_size": 30522, "hidden_size": 384,
                "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536,
                "hidden_act": "gelu", "layer_norm_eps": 1e-12, "max_position_embeddings": 512,
                "position_embedding_type": "absolute"}"#,
        )
        .unwrap()
        .bert()
        .unwrap();
        assert_eq!(
            (c.hidden_size, c.num_hidden_layers, c.layer_norm_eps),
            (384, 6, 1e-12)
        );
        assert_eq!(c.hidden_act, Activation::Gelu);
    }

    #[test]
    fn bad_configs_name_the_file_and_the_field() {
        let err = parse(r#"{"model_type": "llama"}"#)
            .unwrap()
            .bert()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("dir/config.json") && err.contains("llama"),
            "{err}"
        );
        let err = parse(r#"{"model_type": "bert", "vocab_size": -3}"#)
            .unwrap()
            .bert()
            .unwrap_err()
            .to_string();
        assert!(err.contains("vocab_size"), "{err}");
        let err = parse(
            r#"{"model_type": "bert", "vocab_size": 3, "hidden_size": 4,
            "num_hidden_layers": 1, "num_attention_heads": 1, "intermediate_size": 4,
            "hidden_act": "mish"}"#,
        )
        .unwrap()
        .bert()
        .unwrap_err()
        .to_string();
        assert!(err.contains("mish"), "{err}");
        assert!(parse("[1]").is_err());
        assert!(parse("{").is_err());
    }

    #[test]
    fn gpt2_config_round_trips() {
        let config = GptConfig {
            vocab_size: 100,
            block_size: 32,
            n_layer: 2,
            n_head: 2,
            n_embd: 16,
            dropout: 0.0,
            bias: true,
            activation: Activation::GeluTanh,
            dtype: DType::F32,
        };
        let json = gpt2_config_json(&config).unwrap().to_string();
        assert_eq!(parse(&json).unwrap().gpt2().unwrap(), config);
        let untied = json.replace(
            "\"tie_word_embeddings\":true",
            "\"tie_word_embeddings\":false",
        );
        assert!(parse(&untied).unwrap().gpt2().is_err());
    }
}

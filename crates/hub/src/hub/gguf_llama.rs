//! GGUF files of the `llama` architecture into [`Llama`]: the
//! `llama.*` metadata into a [`LlamaConfig`], llama.cpp's tensor names
//! (`blk.N.attn_q.weight`, ...) onto the model's, quantized matrices kept
//! in their blocks straight from the memory map (or dequantized to
//! trainable f32 on request), and the query/key rows that llama.cpp's
//! converter permutes for its rotary convention put back in Hugging Face's
//! order.

use std::sync::Arc;

use crate::gguf::{GgufFile, GgufTensorInfo, GgufWriter};
use crate::models::{Llama, LlamaConfig, LlamaLayerWeights};
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::nn::{
    AnyEmbedding, AnyLinear, Embedding, Linear, Parameter, QuantizedLinear,
};
use retrograd_engine::quant::{GgmlType, QMatrix};
use retrograd_engine::tensor::Tensor;

const OP: &str = "Llama::from_gguf";

/// How a GGUF model's quantized weights are held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightPrecision {
    /// In their blocks, frozen, read from the memory map (llama.cpp's way):
    /// products quantize activations to 8 bits.
    #[default]
    Quantized,
    /// Dequantized to f32 parameters: the exact f32 forward of the file's
    /// values, and a model that trains.
    F32,
}

fn bad(gguf: &GgufFile, reason: String) -> Error {
    Error::Format {
        op: OP,
        path: gguf.path().display().to_string(),
        reason,
    }
}

/// The [`LlamaConfig`] of a GGUF file's `llama.*` metadata.
pub fn llama_config_of_gguf(gguf: &GgufFile) -> Result<LlamaConfig> {
    let arch = gguf.try_architecture()?;
    if arch != "llama" {
        return Err(bad(
            gguf,
            format!("architecture `{arch}`: only `llama` is supported"),
        ));
    }
    if gguf
        .get("llama.rope.scaling.type")
        .and_then(|v| v.as_str())
        .is_some_and(|t| t != "none")
        || gguf.tensors().iter().any(|t| t.name == "rope_freqs.weight")
    {
        return Err(bad(
            gguf,
            "rope scaling (`llama.rope.scaling.type`, `rope_freqs`) is not supported".into(),
        ));
    }
    let embed = gguf.try_tensor_info("token_embd.weight")?.shape();
    let hidden_size = gguf.try_get_usize("llama.embedding_length")?;
    let heads = gguf.try_get_usize("llama.attention.head_count")?;
    let head_dim = match gguf.try_get_opt_usize("llama.attention.key_length")? {
        Some(k) => k,
        None => gguf
            .try_get_opt_usize("llama.rope.dimension_count")?
            .unwrap_or(hidden_size / heads.max(1)),
    };
    let config = LlamaConfig {
        vocab_size: gguf
            .try_get_opt_usize("llama.vocab_size")?
            .unwrap_or(embed[0]),
        hidden_size,
        intermediate_size: gguf.try_get_usize("llama.feed_forward_length")?,
        num_hidden_layers: gguf.try_get_usize("llama.block_count")?,
        num_attention_heads: heads,
        num_key_value_heads: gguf
            .try_get_opt_usize("llama.attention.head_count_kv")?
            .unwrap_or(heads),
        head_dim,
        rope_theta: gguf
            .try_get_opt_f32("llama.rope.freq_base")?
            .map_or(10_000.0, f64::from),
        rms_norm_eps: decimal(gguf.try_get_f32("llama.attention.layer_norm_rms_epsilon")?),
        max_position_embeddings: gguf
            .try_get_opt_usize("llama.context_length")?
            .unwrap_or(2048),
        tie_word_embeddings: !gguf.tensors().iter().any(|t| t.name == "output.weight"),
    };
    config.check().map_err(|e| bad(gguf, e.to_string()))?;
    if let Some(rot) = gguf.try_get_opt_usize("llama.rope.dimension_count")?
        && rot != head_dim
    {
        return Err(bad(
            gguf,
            format!("partial rotary embeddings ({rot} of {head_dim} dims) are not supported"),
        ));
    }
    Ok(config)
}

/// The f64 a GGUF f32 setting was written from: its shortest decimal
/// form (`1e-5` stored as f32 reads back as `1e-5`, not `9.99999974e-6`),
/// so a config read from GGUF equals the one in `config.json`.
fn decimal(v: f32) -> f64 {
    v.to_string().parse().unwrap_or(f64::from(v))
}

/// Hugging Face's row `h·hd + j·hd/2 + i` is llama.cpp's row
/// `h·hd + 2i + j` (its converter interleaves each head's two halves).
fn unpermute_order(heads: usize, head_dim: usize) -> Vec<usize> {
    let half = head_dim / 2;
    let mut order = Vec::with_capacity(heads * head_dim);
    for h in 0..heads {
        for j in 0..2 {
            for i in 0..half {
                order.push(h * head_dim + 2 * i + j);
            }
        }
    }
    order
}

struct Reader<'a> {
    gguf: &'a GgufFile,
    precision: WeightPrecision,
}

impl Reader<'_> {
    fn info(&self, name: &str) -> Result<&GgufTensorInfo> {
        self.gguf.try_tensor_info(name)
    }

    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<&GgufTensorInfo> {
        let info = self.info(name)?;
        if info.shape() != [rows, cols] {
            return Err(bad(
                self.gguf,
                format!(
                    "`{name}` has shape {:?}, the model needs [{rows}, {cols}]",
                    info.shape()
                ),
            ));
        }
        Ok(info)
    }

    fn quantized(&self, info: &GgufTensorInfo) -> Result<QMatrix> {
        let shape = info.shape();
        QMatrix::try_mapped(
            info.ty,
            shape[0],
            shape[1],
            self.gguf.mapping().clone(),
            self.gguf.data_offset() + info.offset,
        )
    }

    /// Whether a tensor stays in its blocks.
    fn keeps_blocks(&self, info: &GgufTensorInfo) -> bool {
        self.precision == WeightPrecision::Quantized && info.ty.is_quantized()
    }

    /// A projection, its rows put back in Hugging Face's order when
    /// `heads` is given (queries and keys).
    fn linear(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        heads: Option<(usize, usize)>,
    ) -> Result<AnyLinear> {
        let info = self.matrix(name, rows, cols)?;
        if self.keeps_blocks(info) {
            let mut q = self.quantized(info)?;
            if let Some((n, hd)) = heads {
                q = q.try_permute_rows(&unpermute_order(n, hd))?;
            }
            return Ok(AnyLinear::Quantized(QuantizedLinear::new(q)));
        }
        let mut w = self.gguf.try_tensor_f32(name)?;
        if let Some((n, hd)) = heads {
            w = w
                .reshape(&[n, hd / 2, 2, cols])?
                .transpose(1, 2)?
                .contiguous()
                .reshape(&[rows, cols])?;
        }
        Ok(AnyLinear::Dense(Linear::from_parameters(
            Parameter::new(w),
            None,
        )?))
    }

    fn vector(&self, name: &str, len: usize) -> Result<Tensor> {
        let info = self.info(name)?;
        if info.n_elements() != len {
            return Err(bad(
                self.gguf,
                format!(
                    "`{name}` has shape {:?}, the model needs [{len}]",
                    info.shape()
                ),
            ));
        }
        self.gguf.try_tensor_f32(name)?.reshape(&[len])
    }
}

impl Llama {
    /// A Llama-architecture model from an opened GGUF file: its config from
    /// the `llama.*` metadata, its weights by llama.cpp's names, quantized
    /// matrices kept in their blocks (read from the memory map, no copy but
    /// the query/key rows put back in order) or dequantized to trainable
    /// f32 parameters, as `precision` says; f32 and f16 tensors are always
    /// f32 parameters. An unsupported architecture, a missing or misshapen
    /// tensor and an unexpected one are errors naming it.
    pub fn from_gguf(gguf: &GgufFile, precision: WeightPrecision) -> Result<Llama> {
        let c = llama_config_of_gguf(gguf)?;
        let r = Reader { gguf, precision };
        let (d, f, hd) = (c.hidden_size, c.intermediate_size, c.head_dim);
        let (h, kv) = (c.num_attention_heads, c.num_key_value_heads);
        let mut expected = vec![
            "token_embd.weight".to_string(),
            "output_norm.weight".to_string(),
        ];
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for i in 0..c.num_hidden_layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            layers.push(LlamaLayerWeights {
                q_proj: r.linear(&n("attn_q"), h * hd, d, Some((h, hd)))?,
                k_proj: r.linear(&n("attn_k"), kv * hd, d, Some((kv, hd)))?,
                v_proj: r.linear(&n("attn_v"), kv * hd, d, None)?,
                o_proj: r.linear(&n("attn_output"), d, h * hd, None)?,
                gate_proj: r.linear(&n("ffn_gate"), f, d, None)?,
                up_proj: r.linear(&n("ffn_up"), f, d, None)?,
                down_proj: r.linear(&n("ffn_down"), d, f, None)?,
                input_layernorm: r.vector(&n("attn_norm"), d)?,
                post_attention_layernorm: r.vector(&n("ffn_norm"), d)?,
            });
            for s in [
                "attn_q",
                "attn_k",
                "attn_v",
                "attn_output",
                "ffn_gate",
                "ffn_up",
                "ffn_down",
                "attn_norm",
                "ffn_norm",
            ] {
                expected.push(n(s));
            }
        }
        let embed_info = r.matrix("token_embd.weight", c.vocab_size, d)?;
        let embed = if r.keeps_blocks(embed_info) {
            AnyEmbedding::Quantized(Arc::new(r.quantized(embed_info)?))
        } else {
            AnyEmbedding::Dense(Embedding::from_weight(Parameter::new(
                gguf.try_tensor_f32("token_embd.weight")?,
            ))?)
        };
        let lm_head = if c.tie_word_embeddings {
            None
        } else {
            expected.push("output.weight".into());
            Some(r.linear("output.weight", c.vocab_size, d, None)?)
        };
        if let Some(extra) = gguf.tensors().iter().find(|t| !expected.contains(&t.name)) {
            return Err(bad(gguf, format!("unexpected tensor `{}`", extra.name)));
        }
        let norm = r.vector("output_norm.weight", d)?;
        let model = Llama::from_weights(c, embed, layers, &norm, lm_head)?;
        // The query, key, value, gate and up matrices were copied into
        // their stacks and the norms into tensors: their pages would
        // otherwise stay resident beside the copies (44 MB of SmolLM2's
        // 98). The matrices still read from the map come back as used.
        gguf.release_resident_pages();
        Ok(model)
    }
}

/// What [`Llama::save_gguf`] writes.
#[derive(Clone, Copy, Debug, Default)]
pub struct GgufSaveOptions<'a> {
    /// The format of the f32 weight matrices (`None`: F32); weights that
    /// are already quantized are written in their own blocks as they are.
    /// Norms are always F32.
    pub quantize: Option<GgmlType>,
    /// A GGUF file whose tokenizer (`tokenizer.*` keys) the saved file
    /// carries; without one the file says `tokenizer.ggml.model = none`,
    /// which llama.cpp loads with a placeholder vocabulary.
    pub tokenizer_from: Option<&'a GgufFile>,
}

impl Llama {
    /// Writes the model as a GGUF file of the `llama` architecture that
    /// llama.cpp loads: its metadata, llama.cpp's tensor names, the query
    /// and key rows permuted into llama.cpp's rotary order, f32 matrices
    /// quantized as `options` says. Written atomically (a temporary file
    /// renamed into place).
    pub fn save_gguf(
        &self,
        path: impl AsRef<std::path::Path>,
        options: GgufSaveOptions<'_>,
    ) -> Result<()> {
        let c = self.config();
        let mut w = GgufWriter::new();
        w.try_add_metadata("general.architecture", "llama")?;
        w.try_add_metadata("general.name", "retrograd Llama")?;
        let u32_of = |n: usize| {
            u32::try_from(n).map_err(|_| Error::invalid(OP, format!("{n} does not fit GGUF's u32")))
        };
        for (key, value) in [
            ("llama.context_length", c.max_position_embeddings),
            ("llama.embedding_length", c.hidden_size),
            ("llama.block_count", c.num_hidden_layers),
            ("llama.feed_forward_length", c.intermediate_size),
            ("llama.attention.head_count", c.num_attention_heads),
            ("llama.attention.head_count_kv", c.num_key_value_heads),
            ("llama.rope.dimension_count", c.head_dim),
            ("llama.attention.key_length", c.head_dim),
            ("llama.attention.value_length", c.head_dim),
            ("llama.vocab_size", c.vocab_size),
        ] {
            w.try_add_metadata(key, u32_of(value)?)?;
        }
        w.try_add_metadata("llama.rope.freq_base", c.rope_theta as f32)?;
        w.try_add_metadata(
            "llama.attention.layer_norm_rms_epsilon",
            c.rms_norm_eps as f32,
        )?;
        match options.tokenizer_from {
            Some(source) => {
                for (key, value) in source
                    .metadata()
                    .iter()
                    .filter(|(k, _)| k.starts_with("tokenizer."))
                {
                    w.try_add_metadata(key.clone(), value.clone())?;
                }
            }
            None => w.try_add_metadata("tokenizer.ggml.model", "none")?,
        }
        let (embed, layers, norm, head) = self.weights();
        let dense = |w: &mut GgufWriter, name: &str, t: &Tensor| -> Result<()> {
            match options.quantize {
                Some(ty) if ty != GgmlType::F32 => w.try_add_quantized_tensor(name, ty, t),
                _ => w.try_add_f32_tensor(name, t),
            }
        };
        let linear =
            |w: &mut GgufWriter, name: &str, l: &AnyLinear, heads: Option<usize>| -> Result<()> {
                // An adapted layer with no active adapter saves its base as it is.
                let l = match l {
                    AnyLinear::Lora(a) if a.active().is_empty() && !a.is_merged() => a.base(),
                    _ => l,
                };
                match l {
                    AnyLinear::Quantized(q) => {
                        let mut m = q.weight().as_ref().clone();
                        if let Some(n) = heads {
                            let order = unpermute_order(n, c.head_dim);
                            let mut inverse = vec![0; order.len()];
                            for (hf, &ggml) in order.iter().enumerate() {
                                inverse[ggml] = hf;
                            }
                            m = m.try_permute_rows(&inverse)?;
                        }
                        let [rows, cols] = m.shape();
                        w.try_add_tensor(name, m.ggml_type(), &[rows, cols], m.bytes())
                    }
                    // Adapters are merged into an f32 weight, quantized as `options` says.
                    AnyLinear::Dense(_) | AnyLinear::Lora(_) => {
                        let mut t = l.try_f32_weight()?;
                        if let Some(n) = heads {
                            let [rows, cols] = [t.shape()[0], t.shape()[1]];
                            t = t
                                .reshape(&[n, 2, c.head_dim / 2, cols])?
                                .transpose(1, 2)?
                                .contiguous()
                                .reshape(&[rows, cols])?;
                        }
                        dense(w, name, &t)
                    }
                }
            };
        match &embed {
            AnyEmbedding::Quantized(q) => {
                let [rows, cols] = q.shape();
                w.try_add_tensor("token_embd.weight", q.ggml_type(), &[rows, cols], q.bytes())?;
            }
            AnyEmbedding::Dense(e) => dense(&mut w, "token_embd.weight", &e.weight().value())?,
        }
        for (i, l) in layers.iter().enumerate() {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            w.try_add_f32_tensor(n("attn_norm"), &l.input_layernorm)?;
            linear(&mut w, &n("attn_q"), &l.q_proj, Some(c.num_attention_heads))?;
            linear(&mut w, &n("attn_k"), &l.k_proj, Some(c.num_key_value_heads))?;
            linear(&mut w, &n("attn_v"), &l.v_proj, None)?;
            linear(&mut w, &n("attn_output"), &l.o_proj, None)?;
            w.try_add_f32_tensor(n("ffn_norm"), &l.post_attention_layernorm)?;
            linear(&mut w, &n("ffn_gate"), &l.gate_proj, None)?;
            linear(&mut w, &n("ffn_up"), &l.up_proj, None)?;
            linear(&mut w, &n("ffn_down"), &l.down_proj, None)?;
        }
        w.try_add_f32_tensor("output_norm.weight", &norm)?;
        if let Some(h) = &head {
            linear(&mut w, "output.weight", h, None)?;
        }
        w.try_write(path)
    }
}

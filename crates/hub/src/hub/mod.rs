//! Pretrained models from the Hugging Face ecosystem: model folders
//! (`config.json`, `model.safetensors` or a sharded index, memory-mapped,
//! f16/bf16 converted on load), their tokenizers (`tokenizer.json`,
//! through Hugging Face's own `tokenizers` crate: feature `tokenizers`,
//! on by default), BERT encoders and sentence-transformers pipelines, and
//! GPT-2 checkpoints in and out of [`Gpt`](crate::models::Gpt); Llama-family
//! models ([`Llama`](crate::models::Llama)) from `LlamaForCausalLM` folders
//! and from GGUF files, saved back as GGUF, with the tokenizer a GGUF file
//! carries.
//!
//! Models keep Hugging Face's parameter names as their state-dict keys, so
//! loading is a [`NameMap`] (prefixes, tensors to ignore, and for GPT-2
//! renames and transposed `Conv1D` weights), not code per model. Every
//! failure is a typed error naming the file, and the tensor where there is
//! one: a missing or unexpected tensor, a wrong shape, an unknown
//! architecture, a corrupted file.
//!
//! ```no_run
//! use retrograd::hub::SentenceTransformer;
//! // scripts/fetch_minilm.sh puts all-MiniLM-L6-v2 here.
//! let model = SentenceTransformer::from_pretrained(".cache/models/all-MiniLM-L6-v2")?;
//! let e = model.encode(&["To be, or not to be", "What light through yonder window breaks?"], 32, |_, _| {})?;
//! let v = e.to_vec::<f32>()?;
//! let cosine: f32 = v[..384].iter().zip(&v[384..]).map(|(a, b)| a * b).sum();
//! println!("cosine similarity: {cosine:.3}");
//! # Ok::<(), retrograd::Error>(())
//! ```
//!
//! Where things are (Hugging Face's names and formats, so loading is a
//! name map and not code per model): `Weights` (`weights.rs`: a
//! `model.safetensors` or the shards of `model.safetensors.index.json`,
//! memory-mapped (`memmap2`), headers checked up front, each tensor decoded
//! straight from the mapping into its own storage and converted
//! (f16/bf16/f64 to the model's float dtype), its pages handed back with
//! `MADV_DONTNEED` so loading never holds the file and the model at once;
//! errors name the file and the tensor), `ModelConfig` (`config.rs`:
//! `config.json` to `BertConfig`/`GptConfig`, typed errors naming the
//! field; GPT-2's `config.json` written back), `NameMap` and `Loader`
//! (`name_map.rs`: how checkpoint names map onto a module's (prefixes such
//! as `bert.`/`transformer.`, tensors to ignore, optional parameters such
//! as a new head, renames, tensors stored transposed), all-or-nothing loads
//! that fail on a missing, unexpected or misshapen tensor, and saving under
//! the checkpoint's names), `BertModel::from_pretrained` and the
//! classifier's `from_pretrained`/`save_pretrained` (`bert.rs`: the model
//! is built straight from the checkpoint through `BertModel::from_source`,
//! no random initialisation to overwrite),
//! `Gpt::from_pretrained`/`save_pretrained` (`gpt2.rs`: GPT-2's names,
//! `Conv1D` weights transposed, the tied head checked), and behind the
//! feature `tokenizers` (on by default) `Tokenizer` (`tokenizer.rs`:
//! Hugging Face's `tokenizers` crate reading `tokenizer.json`; truncation,
//! padding, batches as i64 tensors with attention masks) and
//! `SentenceTransformer` (`sentence.rs`: `modules.json`'s Transformer,
//! Pooling (mean, CLS, max, mean-sqrt-len) and Normalize; `encode` sorts by
//! length and batches as sentence-transformers does, then runs each batch's
//! real tokens packed, `BertModel::forward_packed`, instead of padded),
//! `Llama::from_pretrained` (`llama.rs`: Hugging Face's names, every
//! weight a trainable f32 parameter), `Llama::from_gguf` and `save_gguf`
//! (`gguf_llama.rs`: the `llama.*` metadata, llama.cpp's tensor names,
//! quantized weights kept in their blocks from the memory map, the
//! query/key rows of llama.cpp's rotary order put back and out), and
//! `Tokenizer::from_gguf` (`gguf_tokenizer.rs`: byte-level BPE from a GGUF
//! vocabulary through the `tokenizers` crate, llama.cpp's pre-tokenizers
//! by name), and LoRA adapters in and out of PEFT's folders (`peft.rs`:
//! `save_peft_adapter`, `load_peft_adapter`)

mod bert;
mod config;
mod gguf_llama;
#[cfg(feature = "tokenizers")]
mod gguf_tokenizer;
mod gpt2;
mod llama;
mod name_map;
mod peft;
#[cfg(feature = "tokenizers")]
mod sentence;
#[cfg(feature = "tokenizers")]
mod tokenizer;
mod weights;

use std::path::Path;

use retrograd_engine::base::error::{Error, Result};

pub use bert::bert_name_map;
pub use config::{ModelConfig, CONFIG_FILE};
pub use gguf_llama::{llama_config_of_gguf, GgufSaveOptions, WeightPrecision};
pub use gpt2::gpt2_name_map;
pub use name_map::{LoadReport, Loader, NameMap};
pub use peft::{
    load_peft_adapter, save_peft_adapter, PeftSaveOptions, ADAPTER_CONFIG_FILE,
    ADAPTER_WEIGHTS_FILE,
};
#[cfg(feature = "tokenizers")]
pub use sentence::{Pooling, SentenceTransformer};
#[cfg(feature = "tokenizers")]
pub use tokenizer::{Encoded, Padding, Tokenizer, TOKENIZER_FILE};
pub use weights::{Weights, WEIGHTS_FILE, WEIGHTS_INDEX_FILE};

/// Writes `value` as pretty JSON to `path`, atomically (a synced
/// temporary file renamed into place).
pub(crate) fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Error::Format {
        op: "write_json",
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    retrograd_engine::io::write_atomically("write_json", path, text.as_bytes())
}

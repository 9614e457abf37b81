//! The tokenizer of a GGUF file (`tokenizer.ggml.*`) as Hugging Face's
//! `tokenizers` crate runs it: byte-level BPE (`tokenizer.ggml.model`
//! `gpt2`) from the file's vocabulary and merges, the pre-tokenizer its
//! `tokenizer.ggml.pre` names (llama.cpp's table of regular expressions),
//! control and user-defined tokens matched as special tokens, and a BOS
//! prepended when `tokenizer.ggml.add_bos_token` says so. The pieces are
//! assembled as a `tokenizer.json` document, the format the crate reads,
//! so nothing of BPE is written here.

use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::hub::Tokenizer;

const OP: &str = "Tokenizer::from_gguf";

/// llama.cpp's token types: control and user-defined tokens are matched
/// whole in text (with special tokens on), never split by BPE.
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;

fn bad(gguf: &GgufFile, reason: String) -> Error {
    Error::Format {
        op: OP,
        path: gguf.path().display().to_string(),
        reason,
    }
}

/// The GPT-2 split into words, numbers, punctuation runs and spaces.
fn byte_level(use_regex: bool) -> Value {
    json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex})
}

fn split(regex: &str) -> Value {
    json!({"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false})
}

/// Llama 3's split: letters, digits in runs of up to three, punctuation,
/// newlines and spaces.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen 2's: Llama 3's with every digit alone.
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The pre-tokenizer of llama.cpp's `tokenizer.ggml.pre` name.
fn pre_tokenizer(gguf: &GgufFile, pre: &str) -> Result<Value> {
    Ok(match pre {
        "default" | "gpt2" | "gpt-2" => byte_level(true),
        // Every number character alone (`\p{N}`, as llama.cpp splits it,
        // Arabic-Indic digits included), then GPT-2's split.
        "smollm" | "starcoder" => {
            json!({"type": "Sequence", "pretokenizers": [split(r"\p{N}"), byte_level(true)]})
        }
        "llama3" | "llama-bpe" | "llama-v3" | "smaug-bpe" => {
            json!({"type": "Sequence", "pretokenizers": [split(LLAMA3), byte_level(false)]})
        }
        "qwen2" | "deepseek-r1-qwen" => {
            json!({"type": "Sequence", "pretokenizers": [split(QWEN2), byte_level(false)]})
        }
        other => {
            return Err(bad(
                gguf,
                format!("tokenizer.ggml.pre `{other}` is not supported (known: default, gpt2, smollm, starcoder, llama-bpe, qwen2)"),
            ));
        }
    })
}

impl Tokenizer {
    /// The tokenizer stored in a GGUF file (see the module docs): byte-level
    /// BPE only (`tokenizer.ggml.model` `gpt2`); SentencePiece vocabularies
    /// (`llama`) and unknown pre-tokenizers are errors naming the key.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Tokenizer> {
        let model = gguf.try_get_str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(bad(
                gguf,
                format!(
                    "tokenizer.ggml.model `{model}`: only byte-level BPE (`gpt2`) is supported"
                ),
            ));
        }
        let tokens = gguf.try_get_str_array("tokenizer.ggml.tokens")?;
        let merges = gguf.try_get_str_array("tokenizer.ggml.merges")?;
        let types = gguf.try_get_opt_i32_array("tokenizer.ggml.token_type")?;
        if let Some(t) = &types
            && t.len() != tokens.len()
        {
            return Err(bad(
                gguf,
                format!(
                    "tokenizer.ggml.token_type has {} entries for {} tokens",
                    t.len(),
                    tokens.len()
                ),
            ));
        }
        let pre = gguf
            .try_get_opt_str("tokenizer.ggml.pre")?
            .unwrap_or("default");
        let vocab: serde_json::Map<String, Value> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), json!(i)))
            .collect();
        let merges = merges
            .iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| json!([a, b]))
                    .ok_or_else(|| {
                        bad(
                            gguf,
                            format!("tokenizer.ggml.merges entry `{m}` is not two tokens"),
                        )
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let added: Vec<Value> = types
            .iter()
            .flatten()
            .enumerate()
            .filter(|&(_, &t)| t == CONTROL || t == USER_DEFINED)
            .map(|(id, _)| {
                json!({"id": id, "content": tokens[id], "single_word": false, "lstrip": false,
                       "rstrip": false, "normalized": false, "special": true})
            })
            .collect();
        let add_bos = gguf
            .try_get_opt_bool("tokenizer.ggml.add_bos_token")?
            .unwrap_or(false);
        let post_processor = match gguf.try_get_opt_usize("tokenizer.ggml.bos_token_id")? {
            Some(bos) if add_bos => {
                let bos_text = tokens.get(bos).ok_or_else(|| {
                    bad(
                        gguf,
                        format!("tokenizer.ggml.bos_token_id {bos} is past the vocabulary"),
                    )
                })?;
                json!({"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": bos_text, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [{"SpecialToken": {"id": bos_text, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                {"Sequence": {"id": "B", "type_id": 1}}],
                       "special_tokens": {bos_text.to_string(): {"id": bos_text, "ids": [bos], "tokens": [bos_text]}}})
            }
            _ => Value::Null,
        };
        let document = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": pre_tokenizer(gguf, pre)?,
            "post_processor": post_processor,
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                      "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                      "ignore_merges": false, "vocab": vocab, "merges": merges},
        });
        let inner: tokenizers::Tokenizer = serde_json::from_value(document).map_err(|e| {
            bad(
                gguf,
                format!("the tokenizers crate refused the vocabulary: {e}"),
            )
        })?;
        Ok(Tokenizer::from_parts(inner, gguf.path()))
    }
}

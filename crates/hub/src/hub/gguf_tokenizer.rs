//! The tokenizer of a GGUF file (`tokenizer.ggml.*`) as Hugging Face's
//! `tokenizers` crate runs it: byte-level BPE (`tokenizer.ggml.model`
//! `gpt2`) from the file's vocabulary and merges, the pre-tokenizer its
//! `tokenizer.ggml.pre` names (llama.cpp's table of regular expressions),
//! control and user-defined tokens matched as special tokens, and a BOS
//! prepended when `tokenizer.ggml.add_bos_token` says so. The BPE model is
//! built from the vocabulary and merges directly, the small pieces around
//! it from the `tokenizer.json` forms the crate reads, so nothing of BPE is
//! written here.

use serde_json::{json, Value};
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::{AddedToken, DecoderWrapper, PostProcessorWrapper, PreTokenizerWrapper};

use crate::gguf::GgufFile;
use crate::hub::Tokenizer;
use retrograd_engine::base::error::{Error, Result};

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
        // The vocabulary and merges go to the BPE builder as they are: as a
        // `tokenizer.json` document they cost a JSON value per entry, built
        // and parsed again (most of the file's load time).
        let vocab: Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        let merges = merges
            .iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| {
                        bad(
                            gguf,
                            format!("tokenizer.ggml.merges entry `{m}` is not two tokens"),
                        )
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let refused = |e: tokenizers::Error| {
            bad(
                gguf,
                format!("the tokenizers crate refused the vocabulary: {e}"),
            )
        };
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(refused)?;
        // Control and user-defined tokens are matched whole; they are in
        // the vocabulary, so each keeps its id.
        let added: Vec<AddedToken> = types
            .iter()
            .flatten()
            .enumerate()
            .filter(|&(_, &t)| t == CONTROL || t == USER_DEFINED)
            .map(|(id, _)| AddedToken::from(tokens[id], true).normalized(false))
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
        let part = |what: &str, value: Value| {
            bad(
                gguf,
                format!("the tokenizers crate refused the {what} {value}"),
            )
        };
        let pre_tokenizer = pre_tokenizer(gguf, pre)?;
        let pre_tokenizer: PreTokenizerWrapper = serde_json::from_value(pre_tokenizer.clone())
            .map_err(|_| part("pre-tokenizer", pre_tokenizer))?;
        let decoder = json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true});
        let decoder: DecoderWrapper =
            serde_json::from_value(decoder.clone()).map_err(|_| part("decoder", decoder))?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(pre_tokenizer));
        inner.with_decoder(Some(decoder));
        if !post_processor.is_null() {
            let processor: PostProcessorWrapper = serde_json::from_value(post_processor.clone())
                .map_err(|_| part("post-processor", post_processor))?;
            inner.with_post_processor(Some(processor));
        }
        inner.add_special_tokens(added).map_err(refused)?;
        Ok(Tokenizer::from_parts(inner, gguf.path()))
    }
}

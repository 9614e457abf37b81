//! [`ChatModel`]: a language model with its tokenizer and chat template,
//! loaded from one GGUF file, and generation: the prompt is run once
//! through the key/value cache, then one token at a time; text streams out
//! as it is decoded, and generation stops at an end-of-turn token, a stop
//! string, `max_tokens`, or when the caller's callback says so (a client
//! that went away).
//!
//! A [`Session`] keeps the cache between calls: a conversation re-rendered
//! with one more message shares its beginning with what the cache holds,
//! and only the new tokens are run.

use std::path::Path;
use std::time::Instant;

use super::{ChatTemplate, Decoding, Message, Sampling};
use crate::gguf::GgufFile;
use crate::hub::{Tokenizer, WeightPrecision};
use crate::models::{Llama, LlamaCache};
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::core::graph::Graph;

const OP: &str = "ChatModel";

/// Texts of end-of-turn tokens that llama.cpp also stops at when a
/// vocabulary has them as control tokens.
const END_OF_TURN: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|end|>",
    "<|endoftext|>",
    "<end_of_turn>",
    "<|eom_id|>",
];

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    /// The most tokens to generate.
    pub max_tokens: usize,
    /// How each token is chosen.
    pub sampling: Sampling,
    /// Texts that end the generation (not included in it).
    pub stop: Vec<String>,
}

impl Default for GenerateOptions {
    /// 256 tokens, llama.cpp's sampling, no stop strings.
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            sampling: Sampling::default(),
            stop: Vec::new(),
        }
    }
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-turn token or a stop string.
    Stop,
    /// `max_tokens`, or the context is full.
    Length,
    /// The callback asked to stop.
    Cancelled,
}

impl FinishReason {
    /// OpenAI's name for it (`stop`, `length`; a cancelled one is `stop`).
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop | FinishReason::Cancelled => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// A finished generation.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// The text, without the end-of-turn token or stop string.
    pub text: String,
    /// The generated token ids (an end-of-turn token included).
    pub ids: Vec<u32>,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens that had to be run (the rest were in the cache).
    pub prompt_tokens_run: usize,
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Seconds spent running the prompt.
    pub prompt_seconds: f64,
    /// Seconds spent generating after the prompt.
    pub generation_seconds: f64,
}

/// The key/value cache of a conversation and the tokens it holds.
#[derive(Clone, Debug, Default)]
pub struct Session {
    cache: LlamaCache,
    ids: Vec<u32>,
}

impl Session {
    /// An empty session.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tokens the cache holds.
    pub fn tokens(&self) -> &[u32] {
        &self.ids
    }
}

/// A language model, its tokenizer and its chat template (see the module
/// docs).
#[derive(Debug)]
pub struct ChatModel {
    model: Llama,
    tokenizer: Tokenizer,
    template: Option<ChatTemplate>,
    end_ids: Vec<u32>,
}

impl ChatModel {
    /// Opens a GGUF file: the model (quantized weights read from the
    /// memory map, or f32 as `precision` says), the tokenizer from its
    /// vocabulary, the chat template from `tokenizer.chat_template`, and
    /// its end-of-turn tokens.
    pub fn from_gguf(path: impl AsRef<Path>, precision: WeightPrecision) -> Result<Self> {
        let gguf = GgufFile::try_open(path)?;
        let model = Llama::from_gguf(&gguf, precision)?;
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        let text_of = |key: &str| -> Result<String> {
            Ok(match gguf.try_get_opt_usize(key)? {
                Some(id) => tokenizer.id_to_token(id as u32).unwrap_or_default(),
                None => String::new(),
            })
        };
        let (bos, eos) = (
            text_of("tokenizer.ggml.bos_token_id")?,
            text_of("tokenizer.ggml.eos_token_id")?,
        );
        let template = gguf
            .try_get_opt_str("tokenizer.chat_template")?
            .map(|source| ChatTemplate::try_new(source, &bos, &eos))
            .transpose()?;
        let mut end_ids = Vec::new();
        for key in [
            "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.eot_token_id",
            "tokenizer.ggml.eom_token_id",
        ] {
            if let Some(id) = gguf.try_get_opt_usize(key)? {
                end_ids.push(id as u32);
            }
        }
        let control = gguf
            .try_get_opt_i32_array("tokenizer.ggml.token_type")?
            .unwrap_or_default();
        for text in END_OF_TURN {
            if let Some(id) = tokenizer.token_to_id(text)
                && control.get(id as usize) == Some(&3)
            {
                end_ids.push(id);
            }
        }
        end_ids.sort_unstable();
        end_ids.dedup();
        Ok(ChatModel {
            model,
            tokenizer,
            template,
            end_ids,
        })
    }

    /// The model.
    pub fn model(&self) -> &Llama {
        &self.model
    }

    /// The model, to change it (add adapters, fine-tune).
    pub fn model_mut(&mut self) -> &mut Llama {
        &mut self.model
    }

    /// The chat template, if the file has one.
    pub fn template(&self) -> Option<&ChatTemplate> {
        self.template.as_ref()
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The ids generation stops at.
    pub fn end_ids(&self) -> &[u32] {
        &self.end_ids
    }

    /// The conversation through the model's chat template, ending where
    /// the assistant's answer begins. A file without a template is an
    /// error saying so.
    pub fn render(&self, messages: &[Message]) -> Result<String> {
        let template = self.template.as_ref().ok_or_else(|| {
            Error::invalid(
                OP,
                "the model file has no chat template (tokenizer.chat_template)",
            )
        })?;
        template.render(messages, true)
    }

    /// Token ids of `text`, special tokens matched.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode(text)
    }

    /// Answers a conversation from a fresh cache; see [`generate`](Self::generate).
    pub fn chat(
        &self,
        messages: &[Message],
        options: &GenerateOptions,
        on_text: impl FnMut(&str) -> bool,
    ) -> Result<Generation> {
        let prompt = self.encode(&self.render(messages)?)?;
        self.generate(&prompt, options, &mut Session::new(), on_text)
    }

    /// Generates after `prompt`, reusing what `session` holds of it: runs
    /// the prompt tokens the cache lacks, then draws tokens until an
    /// end-of-turn token, a stop string or `max_tokens`; `on_text` gets
    /// each piece of text as it is decoded and returns `false` to stop.
    pub fn generate(
        &self,
        prompt: &[u32],
        options: &GenerateOptions,
        session: &mut Session,
        mut on_text: impl FnMut(&str) -> bool,
    ) -> Result<Generation> {
        if prompt.is_empty() {
            return Err(Error::invalid(OP, "the prompt has no tokens"));
        }
        let context = self.model.config().max_position_embeddings;
        if prompt.len() >= context {
            return Err(Error::invalid(
                OP,
                format!(
                    "the prompt has {} tokens; the context holds {context}",
                    prompt.len()
                ),
            ));
        }
        let mut decoding = Decoding::new(options)?;
        // Keep the longest shared beginning, and at least one token to run.
        let shared = session
            .ids
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len() - 1);
        session.cache.truncate(shared)?;
        session.ids.truncate(shared);
        let started = Instant::now();
        let mut next: Vec<usize> = prompt[shared..].iter().map(|&i| i as usize).collect();
        session.ids.extend_from_slice(&prompt[shared..]);
        let mut logits = self.step(&next, &mut session.cache)?;
        let prompt_seconds = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let mut finish = FinishReason::Length;
        while decoding.can_continue(session.ids.len(), context) {
            let token = decoding.next(self, &logits, &session.ids)?;
            if !token.text.is_empty() && !on_text(&token.text) {
                finish = FinishReason::Cancelled;
                break;
            }
            if let Some(reason) = token.finished {
                finish = reason;
                break;
            }
            next.clear();
            next.push(token.id as usize);
            session.ids.push(token.id);
            logits = self.step(&next, &mut session.cache)?;
        }
        let rest = decoding.finish(self, finish)?;
        if !rest.is_empty() {
            on_text(&rest);
        }
        let (text, ids) = decoding.into_parts();
        Ok(Generation {
            text,
            ids,
            prompt_tokens: prompt.len(),
            prompt_tokens_run: prompt.len() - shared,
            finish_reason: finish,
            prompt_seconds,
            generation_seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// The last position's logits after running `tokens` through the cache.
    fn step(&self, tokens: &[usize], cache: &mut LlamaCache) -> Result<Vec<f32>> {
        let graph = Graph::new();
        let logits = self.model.forward_cached(&graph, tokens, cache, true)?;
        logits.value().to_vec::<f32>()
    }
}

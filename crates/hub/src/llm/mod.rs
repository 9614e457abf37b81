//! Chat with language models: a model, its tokenizer and its chat template
//! from one GGUF file ([`ChatModel`]), Jinja chat templates
//! ([`ChatTemplate`], `chat_template.rs`), the sampling chain
//! ([`Sampler`], `sampler.rs`), UTF-8-safe streaming of decoded text
//! ([`TextStream`], `text_stream.rs`), generation with a key/value
//! cache that a [`Session`] keeps between turns (`chat_model.rs`), and
//! one generation's state from token to token ([`Decoding`],
//! `decoding.rs`), which lets a loop step many sequences at once; a
//! conversation as a fine-tuning row with labels on the assistant's turns
//! ([`TrainingExample`], `training_example.rs`).
//!
//! ```no_run
//! use retrograd::hub::WeightPrecision;
//! use retrograd::llm::{ChatModel, GenerateOptions, Message, Role};
//! // scripts/fetch_smollm2.sh puts SmolLM2-135M-Instruct here.
//! let chat = ChatModel::from_gguf(".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf", WeightPrecision::Quantized)?;
//! let answer = chat.chat(&[Message::new(Role::User, "What is the capital of France?")], &GenerateOptions::default(), |piece| {
//!     print!("{piece}");
//!     true
//! })?;
//! println!("\n{} tokens, {:?}", answer.ids.len(), answer.finish_reason);
//! # Ok::<(), retrograd::Error>(())
//! ```

mod chat_model;
mod chat_template;
mod decoding;
mod sampler;
mod text_stream;
mod training_example;

pub use chat_model::{ChatModel, FinishReason, GenerateOptions, Generation, Session};
pub use chat_template::{ChatTemplate, Message, Role};
pub use decoding::{Decoding, Token};
pub use sampler::{argmax, Sampler, Sampling};
pub use text_stream::TextStream;
pub use training_example::TrainingExample;

//! Pretrained models for retrograd: Hugging Face model folders and GGUF
//! files read into the engine's `nn` models, the models themselves (BERT,
//! GPT-2 and the Llama family, in [`models`]), their tokenizers, and chat
//! with a language model ([`llm`], feature `chat`).
//!
//! Where things are: GGUF files (`gguf/`), Hugging Face folders, name maps,
//! tokenizers and PEFT adapters (`hub/`), the model architectures with the
//! code that loads them beside it (`models/`), chat templates, sampling and
//! generation (`llm/`).
#![warn(missing_docs)]

// `#[derive(Module)]` expands to `::retrograd::nn::...` paths: in this crate
// they name the engine.
extern crate retrograd_engine as retrograd;

pub mod gguf;
pub mod hub;
#[cfg(feature = "chat")]
pub mod llm;
pub mod models;

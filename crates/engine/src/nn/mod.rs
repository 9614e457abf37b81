//! Training building blocks: parameters, buffers, initialisers, the [`Module`] trait
//! and layers, and state dicts.
//!
//! Where things are: `Parameter`, `Graph::param` and
//! `Gradients::of`/`get_param` (`parameter.rs`), the `Module` trait
//! (`module.rs`: `Module` is a model's parameters, buffers and training
//! mode, written by `#[derive(Module)]` (the proc-macro crate
//! `retrograd-derive/`, a workspace member) through `Visit` (`visit.rs`:
//! how a field is visited: modules, `Parameter`, `Buffer`, `Option`, `Vec`,
//! arrays; plain settings visit nothing); `Forward` is the one-input layer
//! `Sequential` chains; a model with other inputs has an ordinary `forward`
//! method), the process-wide seeded default generator behind the short
//! constructors (`default_generator.rs`: `manual_seed`; `Linear::new(in,
//! out)`, options through `LinearBuilder`, also `EmbeddingBuilder`; a
//! builder's plain options and its `build` are written by `setters!`,
//! `setters.rs`),
//! initialisers (`init.rs`: Kaiming/Xavier as in `torch.nn.init`), state
//! dicts with strict loading and `check_like`, shared with the optimizers
//! (`state.rs`), metrics (`metrics.rs`), layers in `layers/` (`linear.rs`,
//! `mlp.rs`, `sequential.rs`, `activation.rs`, `dropout.rs`,
//! `layer_norm.rs`, `embedding.rs`); `buffer.rs`: `Buffer`, module state
//! that is saved but not trained (`running_mean`, `running_var`,
//! `num_batches_tracked`), visited by `Module::visit_buffers`; `state.rs`
//! holds state dicts of parameters and buffers and `NamedTensors` (what
//! checkpoints take: any `Module`, or a plain parameter list); layers
//! `conv.rs` (`Conv1d`, `Conv2d`, `ConvTranspose2d`: one `ConvLayer` over
//! the options' `ConvKind`), `pool.rs`,
//! `batch_norm.rs` (`BatchNorm1d`/`2d`), `group_norm.rs`, `flatten.rs`,
//! `rms_norm.rs` (`RMSNorm`); `LayerNorm` may have no bias; transformers:
//! `multihead_attention.rs` (`MultiheadAttention`, PyTorch's names, one
//! fused projection for self-attention, attention dropout through the fused
//! op), `transformer_block.rs` (the pre-norm `Block` and its
//! `FeedForward`), `gpt.rs` (`Gpt`, nanoGPT's model with tied embeddings
//! and GPT-2 initialisation, `loss`, `generate` with temperature and top-k
//! on the inference graph; `GptConfig` with its checkpoint-metadata
//! string), `llama.rs` (`Llama`: RMS norm, rotary embeddings,
//! grouped-query attention, SwiGLU, tied or separate head, Hugging Face's
//! names; `LlamaCache`, the key/value cache of generation); weights that
//! are trainable or frozen in blocks: `quantized_linear.rs`
//! (`QuantizedLinear`, `AnyLinear`, `AnyEmbedding`); low-rank adapters
//! on any of them in `lora/` (`LoraConfig`, `LoraLinear`, `LoraModel`).

mod buffer;
mod default_generator;
pub mod init;
mod layers;
pub mod lora;
mod metrics;
mod module;
mod parameter;
mod random_stream;
pub mod setters;
mod state;
mod visit;

pub use crate::ops::nn::pool::options::*;
pub use buffer::Buffer;
pub use default_generator::{
    default_generator_state, manual_seed, set_default_generator_state, with_default_generator,
    DEFAULT_SEED,
};
pub use layers::*;
pub use metrics::{accuracy, argmax_rows, evaluate_accuracy};
pub use module::{join_name, Forward, Module};
pub use parameter::Parameter;
pub use random_stream::RandomStream;
/// `#[derive(Module)]`: the visiting methods of [`Module`] from a struct's fields.
pub use retrograd_derive::Module;
pub(crate) use state::{check_like, check_module_state};
pub use state::{load_module_state, load_state_dict, state_dict, NamedTensors, StateDict};
pub use visit::Visit;

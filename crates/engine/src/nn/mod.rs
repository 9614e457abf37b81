//! Training building blocks: parameters, buffers, initialisers, the [`Module`] trait
//! and layers, and state dicts.
//!
//! Where things are: `Parameter`, `Graph::param` and
//! `Gradients::of`/`get_param` (`parameter.rs`), the `Module` trait
//! (`module.rs`: `Module` is a model's parameters, buffers and training
//! mode, written by `#[derive(Module)]` (the proc-macro crate
//! `crates/derive`, a workspace member) through `Visit` (`visit.rs`:
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
//! `FeedForward`); the pretrained architectures (BERT, GPT-2, Llama) are
//! the hub crate's, beside the code that loads them; weights that
//! are trainable or frozen in blocks: `quantized_linear.rs`
//! (`QuantizedLinear`, `AnyLinear`, `AnyEmbedding`); low-rank adapters
//! on any of them in `lora/` (`LoraConfig`, `LoraLinear`, `LoraModel`).
//!
//! # From loop to layer
//!
//! A neural-network op lives in three places, lowest first: the loops over
//! slices (`kernels/nn/`, knowing nothing of graphs), the registered op
//! that runs them forward and states its derivative (`ops/nn/`), and the
//! layer that owns its parameters (`nn/layers/`). Ops without parameters
//! (softmax, the losses, pooling's functional form) are `Var` methods and
//! have no layer; an op with no dedicated loop runs on the general kernels
//! (`kernels/` elementwise, reductions, `matmul.rs`).
//!
//! | family | loops (`kernels/`) | op (`ops/`) | layer (`nn/layers/`) |
//! |---|---|---|---|
//! | linear | `matmul.rs` | `linalg.rs` | `linear.rs`, `mlp.rs` |
//! | convolution | `nn/conv.rs`, `nn/im2col.rs`, `nn/conv_direct.rs`, `nn/conv_winograd.rs`, `nn/conv_channel_lanes.rs`, `nn/conv_depthwise.rs`, `nn/conv_fused.rs` | `nn/conv.rs`, `nn/conv_spec.rs`, `nn/conv_products.rs`, `nn/conv_weight.rs`, `nn/conv_transpose.rs` | `conv.rs` |
//! | pooling | `nn/pool.rs` | `nn/pool/` (max, average, Lp; `geometry.rs`) | `pool.rs` |
//! | batch norm | `nn/batch_norm.rs` | `nn/batch_norm.rs`, `nn/batch_norm_backward.rs`, `nn/batch_norm_running.rs` | `batch_norm.rs` |
//! | layer, RMS and group norm | `nn/norm.rs`, `nn/rms_norm.rs` | `nn/layer_norm.rs`, `nn/layer_norm_backward.rs`, `nn/rms_norm.rs`, `nn/group_norm.rs`, `nn/normalization.rs` | `layer_norm.rs`, `rms_norm.rs`, `group_norm.rs` |
//! | attention | `nn/attention.rs`, `nn/attention_tiled.rs`, `nn/attention_tiled_backward.rs` | `nn/attention.rs`, `nn/attention_backward.rs`, `nn/rotary.rs` | `multihead_attention.rs`, `transformer_block.rs` |
//! | softmax and classification losses | `nn/softmax.rs`, `nn/lanes.rs`, `nn/classification.rs`, `nn/exp.rs` | `nn/softmax.rs`, `nn/cross_entropy.rs`, `nn/cross_entropy_backward.rs`, `nn/nll.rs`, `nn/class_targets.rs` | none |
//! | elementwise losses | `nn/pointwise.rs` | `nn/mse.rs`, `nn/bce.rs` | none |
//! | embedding and dropout | `nn/sparse.rs` | `nn/embedding.rs`, `nn/dropout.rs` | `embedding.rs`, `dropout.rs` |
//! | quantized product | `quant/` | `nn/quantized_matmul.rs` | `quantized_linear.rs` |
//! | activations | `elementwise.rs`, `blocks.rs` | `activation.rs`, `gelu.rs`, `elu.rs`, `hardswish.rs`, `softplus.rs` and the other unary rules | `activation.rs` |

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

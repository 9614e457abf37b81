//! The model architectures that [`hub`](crate::hub) loads, built from the
//! engine's layers: BERT encoders and the classification head
//! (`bert.rs`, `bert_classifier.rs`), GPT-2 (`gpt.rs`) and the Llama family
//! with its KV cache and batched decoding (`llama.rs`). Each keeps Hugging
//! Face's parameter names as its state-dict keys.

mod bert;
mod bert_classifier;
mod gpt;
mod llama;

pub use bert::{
    l2_normalize, mean_pool, BertAttention, BertConfig, BertEmbeddings, BertEncoder,
    BertIntermediate, BertLayer, BertModel, BertPooler, BertResidual, BertSelfAttention,
    ParameterSource,
};
pub use bert_classifier::BertForSequenceClassification;
pub use gpt::{Gpt, GptConfig};
pub use llama::{Llama, LlamaCache, LlamaConfig, LlamaLayerWeights, IGNORE_LABEL};

//! [`BertForSequenceClassification`]: a BERT encoder with a classification
//! head on its pooled output (Hugging Face's model of the same name).

use rand::Rng;

use crate::models::BertModel;
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::core::graph::Var;
use retrograd_engine::nn::{Dropout, Forward, Linear, Module};
use retrograd_engine::tensor::Tensor;

/// A sequence classifier: the encoder's pooled output (the first token's
/// state through `pooler.dense` and `tanh`), dropout, then a linear layer
/// to one logit per label. Parameter names are `transformers`' (`bert.…`,
/// `classifier.weight`), so a fine-tuned model loads there as
/// `BertForSequenceClassification`.
///
/// ```
/// use rand::SeedableRng;
/// use retrograd::{Graph, Tensor, nn::{BertConfig, BertForSequenceClassification, BertModel}};
/// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
/// let config = BertConfig { vocab_size: 20, hidden_size: 8, num_hidden_layers: 1,
///     num_attention_heads: 2, intermediate_size: 16, max_position_embeddings: 8,
///     ..BertConfig::base() };
/// let bert = BertModel::with_rng(config, true, &mut rng)?;
/// let model = BertForSequenceClassification::new(bert, 3, 0.1, &mut rng)?;
/// let g = Graph::new();
/// let ids = g.constant(Tensor::from_vec(vec![1i64, 4, 2, 1, 2, 0], &[2, 3])?);
/// let mask = g.constant(Tensor::from_vec(vec![1i64, 1, 1, 1, 1, 0], &[2, 3])?);
/// assert_eq!(model.forward(&ids, Some(&mask), None)?.shape(), &[2, 3]);
/// let labels = Tensor::from_vec(vec![0i64, 2], &[2])?;
/// let loss = model.loss(&ids, Some(&mask), None, &labels)?;
/// assert!((loss.value().try_item()? - 3f64.ln()).abs() < 0.5);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, Module)]
pub struct BertForSequenceClassification {
    bert: BertModel,
    dropout: Dropout,
    classifier: Linear,
}

impl BertForSequenceClassification {
    /// A head of `num_labels` outputs on `bert` (which needs its pooler),
    /// initialised as `transformers` does (`N(0, 0.02)` weight, zero
    /// bias), with dropout `dropout` before it (`transformers` uses the
    /// encoder's `hidden_dropout_prob` unless `classifier_dropout` is set).
    pub fn new<R: Rng + ?Sized>(
        bert: BertModel,
        num_labels: usize,
        dropout: f64,
        rng: &mut R,
    ) -> Result<Self> {
        if bert.pooler().is_none() || num_labels == 0 {
            return Err(Error::invalid(
                "BertForSequenceClassification",
                format!(
                    "needs an encoder with a pooler and at least one label (pooler: {}, labels: {num_labels})",
                    bert.pooler().is_some()
                ),
            ));
        }
        let config = bert.config();
        let classifier = Linear::builder(config.hidden_size, num_labels)
            .dtype(config.dtype)
            .build_with(rng)?;
        classifier.init_normal(0.02, rng)?;
        Ok(BertForSequenceClassification {
            bert,
            dropout: Dropout::new(dropout, 0x636c_6173)?,
            classifier,
        })
    }

    /// The encoder.
    pub fn bert(&self) -> &BertModel {
        &self.bert
    }

    /// The output layer, `[num_labels, hidden]`.
    pub fn classifier(&self) -> &Linear {
        &self.classifier
    }

    /// The number of labels.
    pub fn num_labels(&self) -> usize {
        self.classifier.out_features()
    }

    /// The logits `[B, num_labels]`; the inputs are [`BertModel::forward`]'s.
    pub fn forward<'g>(
        &self,
        input_ids: &Var<'g>,
        attention_mask: Option<&Var<'g>>,
        token_type_ids: Option<&Var<'g>>,
    ) -> Result<Var<'g>> {
        let hidden = self
            .bert
            .forward(input_ids, attention_mask, token_type_ids)?;
        let pooled = self.bert.pool(&hidden)?;
        self.classifier.forward(&self.dropout.forward(&pooled)?)
    }

    /// The mean cross-entropy of the logits against `labels` `[B]` (i64).
    pub fn loss<'g>(
        &self,
        input_ids: &Var<'g>,
        attention_mask: Option<&Var<'g>>,
        token_type_ids: Option<&Var<'g>>,
        labels: &Tensor,
    ) -> Result<Var<'g>> {
        self.forward(input_ids, attention_mask, token_type_ids)?
            .try_cross_entropy(labels)
    }
}

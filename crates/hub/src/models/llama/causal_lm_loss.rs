//! [`Llama::try_causal_lm_loss`]: the language-modelling loss of
//! `transformers`' `LlamaForCausalLM` (each position predicts the next
//! label, labels of `-100` ignored, the mean over the rest), computing the
//! output layer only at the positions that count.

use super::Llama;
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::core::graph::{Graph, Var};
use retrograd_engine::tensor::Tensor;

/// The label that marks a position as not predicted (PyTorch's
/// `ignore_index` default).
pub const IGNORE_LABEL: i64 = -100;

impl Llama {
    /// The mean cross-entropy of predicting `labels[r, p + 1]` from
    /// position `p` of row `r`, over the positions whose next label is not
    /// [`IGNORE_LABEL`]: `transformers`' loss for `labels=`. `tokens` and
    /// `labels` are `[batch, positions]` row-major.
    ///
    /// Only the predicting positions go through the output layer, so a
    /// fine-tuning batch whose labels cover the answers alone (a chat
    /// model's assistant turns) skips the vocabulary-wide product and its
    /// softmax everywhere else. Errors: sizes that do not agree, a label
    /// outside the vocabulary, or no position to predict.
    pub fn try_causal_lm_loss<'g>(
        &self,
        graph: &'g Graph,
        tokens: &[usize],
        labels: &[i64],
        batch: usize,
    ) -> Result<Var<'g>> {
        const OP: &str = "Llama::try_causal_lm_loss";
        if batch == 0 || !tokens.len().is_multiple_of(batch) || labels.len() != tokens.len() {
            return Err(Error::invalid(
                OP,
                format!(
                    "{} tokens and {} labels do not make {batch} rows of equal length",
                    tokens.len(),
                    labels.len()
                ),
            ));
        }
        let t = tokens.len() / batch;
        let vocab = self.config.vocab_size;
        let (mut rows, mut targets) = (Vec::new(), Vec::new());
        for r in 0..batch {
            for p in 0..t.saturating_sub(1) {
                let label = labels[r * t + p + 1];
                if label == IGNORE_LABEL {
                    continue;
                }
                if label < 0 || label as usize >= vocab {
                    return Err(Error::IndexOutOfRange {
                        op: OP,
                        index: label,
                        size: vocab,
                    });
                }
                rows.push(r * t + p);
                targets.push(label as usize);
            }
        }
        if rows.is_empty() {
            return Err(Error::invalid(
                OP,
                "every label is ignored: no position to predict",
            ));
        }
        let hidden = self.hidden(graph, tokens, batch, None, false)?;
        let d = self.config.hidden_size as isize;
        let picked = hidden
            .try_reshape(&[-1, d])?
            .try_index_select(0, &Tensor::from_indices(&rows, &[rows.len()])?)?;
        self.head(&picked)?.try_cross_entropy(&targets)
    }

    /// [`try_causal_lm_loss`](Self::try_causal_lm_loss), panicking on bad input.
    pub fn causal_lm_loss<'g>(
        &self,
        graph: &'g Graph,
        tokens: &[usize],
        labels: &[i64],
        batch: usize,
    ) -> Var<'g> {
        self.try_causal_lm_loss(graph, tokens, labels, batch)
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

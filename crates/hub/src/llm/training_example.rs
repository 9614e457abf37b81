//! [`TrainingExample`]: a conversation as a fine-tuning row, the token ids
//! of the whole rendered chat and labels that keep only the assistant's
//! turns, so the loss teaches the answers and not the questions.

use super::chat_model::ChatModel;
use super::chat_template::{Message, Role};
use crate::models::IGNORE_LABEL;
use retrograd_engine::base::error::{Error, Result};

const OP: &str = "TrainingExample";

/// One fine-tuning row: `ids` of the rendered conversation and `labels`
/// (`ids` where the assistant speaks: its words and the end-of-turn token
/// that closes them, [`IGNORE_LABEL`] elsewhere), as
/// [`Llama::try_causal_lm_loss`](crate::models::Llama::try_causal_lm_loss) takes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainingExample {
    /// Token ids of the conversation through the chat template.
    pub ids: Vec<usize>,
    /// The same ids on the assistant's tokens, [`IGNORE_LABEL`] elsewhere.
    pub labels: Vec<i64>,
}

impl TrainingExample {
    /// Cuts both to at most `len` tokens.
    pub fn truncate(&mut self, len: usize) {
        self.ids.truncate(len);
        self.labels.truncate(len);
    }

    /// How many tokens carry a label.
    pub fn labelled(&self) -> usize {
        self.labels.iter().filter(|&&l| l != IGNORE_LABEL).count()
    }
}

impl ChatModel {
    /// The conversation `messages` as a [`TrainingExample`]: each
    /// assistant turn is what the template adds after the conversation
    /// before it with the generation prompt, up to and including the first
    /// end-of-turn token. Errors: no chat template, no assistant turn, or a
    /// template whose rendering of a shorter conversation is not a prefix
    /// of the whole (its tokens would not line up).
    pub fn try_training_example(&self, messages: &[Message]) -> Result<TrainingExample> {
        let template = self.template().ok_or_else(|| {
            Error::invalid(
                OP,
                "the model file has no chat template (tokenizer.chat_template)",
            )
        })?;
        let encode = |text: &str| -> Result<Vec<usize>> {
            Ok(self.encode(text)?.into_iter().map(|i| i as usize).collect())
        };
        let ids = encode(&template.render(messages, false)?)?;
        let mut labels = vec![IGNORE_LABEL; ids.len()];
        let mut turns = 0;
        for (i, m) in messages.iter().enumerate() {
            if m.role != Role::Assistant {
                continue;
            }
            let before = encode(&template.render(&messages[..i], true)?)?;
            let (start, end) = (
                before.len(),
                encode(&template.render(&messages[..=i], false)?)?.len(),
            );
            if end > ids.len() || start > end || ids[..start] != before[..] {
                return Err(Error::invalid(
                    OP,
                    format!("the template's rendering of the first {i} messages is not a prefix of the whole conversation"),
                ));
            }
            let stop = (start..end)
                .find(|&p| self.end_ids().contains(&(ids[p] as u32)))
                .map_or(end, |p| p + 1);
            for p in start..stop {
                labels[p] = ids[p] as i64;
            }
            turns += 1;
        }
        if turns == 0 {
            return Err(Error::invalid(
                OP,
                "the conversation has no assistant turn to learn",
            ));
        }
        Ok(TrainingExample { ids, labels })
    }

    /// [`try_training_example`](Self::try_training_example), panicking on bad input.
    pub fn training_example(&self, messages: &[Message]) -> TrainingExample {
        self.try_training_example(messages)
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

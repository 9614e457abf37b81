//! [`Decoding`]: what one generation keeps from one token to the next (its
//! sampler, the text decoded so far, what of it was handed out, its stop
//! strings), so that a loop stepping many sequences at once (a server's
//! continuous batching over [`Llama::try_forward_decode_batch`]) draws,
//! streams and ends each of them exactly as [`ChatModel::generate`] does
//! one: `generate` itself runs on it.
//!
//! [`Llama::try_forward_decode_batch`]: crate::models::Llama::try_forward_decode_batch

use super::{ChatModel, FinishReason, GenerateOptions, Sampler, TextStream};
use retrograd_engine::base::error::Result;

/// One generation's state between tokens (see the module docs).
#[derive(Clone, Debug)]
pub struct Decoding {
    sampler: Sampler,
    stream: TextStream,
    stop: Vec<String>,
    max_tokens: usize,
    text: String,
    emitted: usize,
    ids: Vec<u32>,
}

/// What one drawn token gave.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    /// The token drawn.
    pub id: u32,
    /// Text that became final with it, to hand out now (often empty).
    pub text: String,
    /// `Some` when the generation ends here (an end-of-turn token or a
    /// stop string): the token is not run.
    pub finished: Option<FinishReason>,
}

impl Decoding {
    /// A generation with `options`; sampling settings out of range are an
    /// error naming them.
    pub fn new(options: &GenerateOptions) -> Result<Self> {
        Ok(Decoding {
            sampler: Sampler::try_new(options.sampling)?,
            stream: TextStream::new(),
            stop: options.stop.clone(),
            max_tokens: options.max_tokens,
            text: String::new(),
            emitted: 0,
            ids: Vec::new(),
        })
    }

    /// Whether another token may be drawn: fewer than `max_tokens` so far,
    /// and the cache's `held` positions short of the `context`.
    pub fn can_continue(&self, held: usize, context: usize) -> bool {
        self.ids.len() < self.max_tokens && held < context
    }

    /// Draws the next token from `logits`, `history` being the tokens so
    /// far (prompt and generated, for the repetition penalty): the text it
    /// makes final (held back while it may begin a stop string, cut before
    /// a stop string), and whether the generation ends.
    pub fn next(&mut self, chat: &ChatModel, logits: &[f32], history: &[u32]) -> Result<Token> {
        let id = self.sampler.sample(logits, history);
        self.ids.push(id);
        if chat.end_ids().contains(&id) {
            return Ok(Token {
                id,
                text: String::new(),
                finished: Some(FinishReason::Stop),
            });
        }
        let piece = self.stream.push(chat.tokenizer(), id)?;
        self.text.push_str(&piece);
        if let Some(at) = self
            .stop
            .iter()
            .filter_map(|s| self.text.find(s.as_str()))
            .min()
        {
            self.text.truncate(at);
            let text = self.text.get(self.emitted..).unwrap_or("").to_string();
            self.emitted = self.text.len();
            return Ok(Token {
                id,
                text,
                finished: Some(FinishReason::Stop),
            });
        }
        let safe = self.text.len() - held_back(&self.text, &self.stop);
        let mut text = String::new();
        if safe > self.emitted {
            text = self.text[self.emitted..safe].to_string();
            self.emitted = safe;
        }
        Ok(Token {
            id,
            text,
            finished: None,
        })
    }

    /// Ends the generation for `reason`: the text still held back, to hand
    /// out last (nothing when cancelled; at `Length` an incomplete
    /// character at the end comes out with its replacement character).
    pub fn finish(&mut self, chat: &ChatModel, reason: FinishReason) -> Result<String> {
        if reason == FinishReason::Length {
            self.text.push_str(&self.stream.rest(chat.tokenizer())?);
        }
        if reason == FinishReason::Cancelled || self.text.len() <= self.emitted {
            return Ok(String::new());
        }
        let rest = self.text[self.emitted..].to_string();
        self.emitted = self.text.len();
        Ok(rest)
    }

    /// The text so far, without an end-of-turn token or stop string.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The tokens drawn so far (an end-of-turn token included).
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The text and the tokens, at the end.
    pub fn into_parts(self) -> (String, Vec<u32>) {
        (self.text, self.ids)
    }
}

/// Bytes at the end of `text` that may begin a stop string (held back
/// until the next token tells).
fn held_back(text: &str, stop: &[String]) -> usize {
    stop.iter()
        .map(|s| {
            (1..s.len().min(text.len() + 1))
                .rev()
                .find(|&n| s.is_char_boundary(n) && text.ends_with(&s[..n]))
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::held_back;

    #[test]
    fn holds_back_what_may_begin_a_stop_string() {
        let stop = vec!["\nUser:".to_string()];
        assert_eq!(held_back("Hello\nUs", &stop), 3);
        assert_eq!(held_back("Hello", &stop), 0);
        assert_eq!(held_back("Hello\n", &stop), 1);
        assert_eq!(held_back("x", &[]), 0);
    }
}

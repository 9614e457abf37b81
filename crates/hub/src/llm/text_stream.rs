//! [`TextStream`]: text of generated tokens as it becomes final. A
//! byte-level BPE token can end inside a UTF-8 character (an emoji is
//! often two or three tokens), so the text of the tokens so far may end in
//! a replacement character that the next token completes. The stream
//! decodes a short window of recent tokens and hands out only text that
//! ends on a whole character.

use crate::hub::Tokenizer;
use retrograd_engine::base::error::Result;

/// See the module docs.
#[derive(Clone, Debug, Default)]
pub struct TextStream {
    ids: Vec<u32>,
    /// Start of the window decoded again with each token.
    window: usize,
    /// Tokens of the window whose text was handed out.
    done: usize,
}

impl TextStream {
    /// An empty stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a token; returns the text it completes (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        let before = tokenizer.decode(&self.ids[self.window..self.done], false)?;
        let now = tokenizer.decode(&self.ids[self.window..], false)?;
        if now.len() > before.len() && !now.ends_with('\u{FFFD}') && now.starts_with(&before) {
            self.window = self.done;
            self.done = self.ids.len();
            Ok(now[before.len()..].to_string())
        } else {
            Ok(String::new())
        }
    }

    /// The text still held back (an incomplete character at the end: it
    /// comes out with its replacement character).
    pub fn rest(&self, tokenizer: &Tokenizer) -> Result<String> {
        let before = tokenizer.decode(&self.ids[self.window..self.done], false)?;
        let now = tokenizer.decode(&self.ids[self.window..], false)?;
        Ok(now.get(before.len()..).unwrap_or("").to_string())
    }
}

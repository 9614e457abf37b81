//! [`Tokenizer`]: a `tokenizer.json` read by Hugging Face's own
//! `tokenizers` crate (WordPiece for BERT, byte-level BPE for GPT-2, and
//! whatever else the file describes), with truncation and padding, and
//! batches as tensors with their attention masks.

use std::path::{Path, PathBuf};

use tokenizers::{
    PaddingDirection, PaddingParams, PaddingStrategy, TruncationDirection, TruncationParams,
    TruncationStrategy,
};

use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::tensor::Tensor;

/// The tokenizer file of a model folder.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// How a batch is padded ([`Tokenizer::with_padding`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Padding {
    /// To the longest sequence of the batch.
    Longest,
    /// To this many tokens (longer sequences are not cut: truncate too).
    Fixed(usize),
}

/// A batch of encoded texts, padded on the right to one length.
#[derive(Clone, Debug, PartialEq)]
pub struct Encoded {
    /// Token ids `[B, T]` (i64).
    pub input_ids: Tensor,
    /// `[B, T]` (i64): 1 for a real token, 0 for padding.
    pub attention_mask: Tensor,
    /// Segment ids `[B, T]` (i64; all 0 for single texts).
    pub token_type_ids: Tensor,
    /// Each text's real token count.
    pub lengths: Vec<usize>,
}

/// A tokenizer from a `tokenizer.json`, through Hugging Face's
/// `tokenizers` crate: the same normalisation, pre-tokenisation, model
/// (WordPiece, BPE, Unigram) and special tokens as the Python library.
///
/// Truncation and padding start as the file sets them and can be changed:
/// sentence-transformers truncates at the model's `max_seq_length` and pads
/// each batch to its longest text.
///
/// ```no_run
/// use retrograd::hub::{Padding, Tokenizer};
/// let tokenizer = Tokenizer::from_pretrained(".cache/models/all-MiniLM-L6-v2")?
///     .with_truncation(Some(256))?
///     .with_padding(Some(Padding::Longest));
/// assert_eq!(tokenizer.encode("Hello, world!")?, [101, 7592, 1010, 2088, 999, 102]);
/// let batch = tokenizer.encode_batch(&["a", "a longer text"])?;
/// assert_eq!(batch.input_ids.shape(), &[2, 5]);
/// assert_eq!(batch.attention_mask.to_vec::<i64>()?, [1, 1, 1, 0, 0, 1, 1, 1, 1, 1]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("path", &self.path)
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

impl Tokenizer {
    /// Reads a `tokenizer.json`. An unreadable file is [`Error::Io`], one
    /// the `tokenizers` crate rejects [`Error::Format`], both with the path.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
            op: "Tokenizer::from_file",
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let inner: tokenizers::Tokenizer = text.parse().map_err(|e| Error::Format {
            op: "Tokenizer::from_file",
            path: path.display().to_string(),
            reason: format!("not a tokenizer the tokenizers crate reads: {e}"),
        })?;
        Ok(Tokenizer {
            inner,
            path: path.to_path_buf(),
        })
    }

    /// A tokenizer the `tokenizers` crate built, named by `path` (the
    /// file it came from) in messages.
    pub(crate) fn from_parts(inner: tokenizers::Tokenizer, path: &Path) -> Self {
        Tokenizer {
            inner,
            path: path.to_path_buf(),
        }
    }

    /// Reads `dir/tokenizer.json`.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<Self> {
        Self::from_file(dir.as_ref().join(TOKENIZER_FILE))
    }

    /// Cuts every encoding to `max_length` tokens, special tokens included
    /// (`None`: never). A length too short for the special tokens is an
    /// error.
    pub fn with_truncation(mut self, max_length: Option<usize>) -> Result<Self> {
        let params = max_length.map(|max_length| TruncationParams {
            max_length,
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
            direction: TruncationDirection::Right,
        });
        self.inner.with_truncation(params).map_err(|e| {
            Error::invalid("Tokenizer::with_truncation", format!("{max_length:?}: {e}"))
        })?;
        Ok(self)
    }

    /// Pads batches on the right with the file's pad token (or `[PAD]`,
    /// `<pad>`, else id 0 with mask 0); `None`: single encodings are not
    /// padded, and [`encode_batch`](Self::encode_batch) pads to the longest.
    pub fn with_padding(mut self, padding: Option<Padding>) -> Self {
        let params = padding.map(|padding| {
            let mut params = self.inner.get_padding().cloned().unwrap_or_else(|| {
                let (pad_token, pad_id) = ["[PAD]", "<pad>"]
                    .iter()
                    .find_map(|t| self.inner.token_to_id(t).map(|id| (t.to_string(), id)))
                    .unwrap_or(("[PAD]".to_string(), 0));
                PaddingParams {
                    pad_id,
                    pad_token,
                    ..PaddingParams::default()
                }
            });
            params.direction = PaddingDirection::Right;
            params.pad_to_multiple_of = None;
            params.strategy = match padding {
                Padding::Longest => PaddingStrategy::BatchLongest,
                Padding::Fixed(n) => PaddingStrategy::Fixed(n),
            };
            params
        });
        self.inner.with_padding(params);
        self
    }

    /// The file this came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `tokenizers` crate's tokenizer, for everything else it offers.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// The vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of `token`, if it is in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The token of `id`, if there is one.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The truncation length, if any.
    pub fn max_length(&self) -> Option<usize> {
        self.inner.get_truncation().map(|t| t.max_length)
    }

    /// The token ids of `text`, special tokens added (`[CLS] ... [SEP]`
    /// for BERT), truncated (and padded with [`Padding::Fixed`]) as set.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode(text, true)
            .map_err(|e| Error::invalid("Tokenizer::encode", e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens skipped or kept.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| Error::invalid("Tokenizer::decode", e.to_string()))
    }

    /// `texts` encoded as one batch, padded on the right to one length (the
    /// longest, unless [`Padding::Fixed`] is set), as tensors. Encodes in
    /// parallel (the `tokenizers` crate's rayon).
    pub fn encode_batch(&self, texts: &[&str]) -> Result<Encoded> {
        let op = "Tokenizer::encode_batch";
        if texts.is_empty() {
            return Err(Error::invalid(op, "no texts"));
        }
        let padded;
        let tokenizer = if self.inner.get_padding().is_some() {
            &self.inner
        } else {
            padded = self.clone().with_padding(Some(Padding::Longest));
            &padded.inner
        };
        let encodings = tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| Error::invalid(op, e.to_string()))?;
        // The crate leaves a sequence longer than a fixed padding uncut.
        let fixed = match tokenizer.get_padding().map(|p| &p.strategy) {
            Some(&PaddingStrategy::Fixed(n)) => Some(n),
            _ => None,
        };
        let t = fixed.unwrap_or(encodings[0].len());
        if let Some(e) = encodings.iter().find(|e| e.len() != t) {
            return Err(Error::invalid(
                op,
                format!(
                    "a fixed padding of {t} is shorter than an encoding of {} tokens (truncate too)",
                    e.len()
                ),
            ));
        }
        let b = encodings.len();
        let flat = |f: fn(&tokenizers::Encoding) -> &[u32]| -> Result<Tensor> {
            let values: Vec<i64> = encodings
                .iter()
                .flat_map(|e| f(e).iter().map(|&v| i64::from(v)))
                .collect();
            Tensor::from_vec(values, &[b, t])
        };
        Ok(Encoded {
            input_ids: flat(tokenizers::Encoding::get_ids)?,
            attention_mask: flat(tokenizers::Encoding::get_attention_mask)?,
            token_type_ids: flat(tokenizers::Encoding::get_type_ids)?,
            lengths: encodings
                .iter()
                .map(|e| e.get_attention_mask().iter().filter(|&&m| m != 0).count())
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A three-word WordPiece tokenizer, written as the Python library does.
    const TINY: &str = r###"{"version":"1.0","truncation":null,"padding":null,
      "added_tokens":[{"id":0,"content":"[PAD]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
                      {"id":1,"content":"[UNK]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
                      {"id":2,"content":"[CLS]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
                      {"id":3,"content":"[SEP]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
      "normalizer":{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true},
      "pre_tokenizer":{"type":"BertPreTokenizer"},
      "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"[CLS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"[SEP]","type_id":0}}],
        "pair":[{"Sequence":{"id":"A","type_id":0}},{"Sequence":{"id":"B","type_id":1}}],
        "special_tokens":{"[CLS]":{"id":"[CLS]","ids":[2],"tokens":["[CLS]"]},"[SEP]":{"id":"[SEP]","ids":[3],"tokens":["[SEP]"]}}},
      "decoder":{"type":"WordPiece","prefix":"##","cleanup":true},
      "model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":100,
        "vocab":{"[PAD]":0,"[UNK]":1,"[CLS]":2,"[SEP]":3,"to":4,"be":5,"or":6,"not":7,"##s":8}}}"###;

    fn tiny() -> Tokenizer {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TOKENIZER_FILE);
        std::fs::write(&path, TINY).unwrap();
        Tokenizer::from_file(&path).unwrap()
    }

    #[test]
    fn encodes_pads_and_truncates() {
        let t = tiny();
        assert_eq!(
            t.encode("To be, or NOT tos").unwrap(),
            [2, 4, 5, 1, 6, 7, 4, 8, 3]
        );
        let batch = t.encode_batch(&["to be", "not"]).unwrap();
        assert_eq!(
            batch.input_ids.to_vec::<i64>().unwrap(),
            [2, 4, 5, 3, 2, 7, 3, 0]
        );
        assert_eq!(
            batch.attention_mask.to_vec::<i64>().unwrap(),
            [1, 1, 1, 1, 1, 1, 1, 0]
        );
        assert_eq!(batch.lengths, [4, 3]);
        let cut = t.clone().with_truncation(Some(3)).unwrap();
        assert_eq!(cut.encode("to be or not").unwrap(), [2, 4, 3]);
        assert_eq!(cut.max_length(), Some(3));
        let fixed = cut.with_padding(Some(Padding::Fixed(5)));
        assert_eq!(fixed.encode("to").unwrap(), [2, 4, 3, 0, 0]);
        assert_eq!(t.decode(&[2, 4, 5, 3], true).unwrap(), "to be");
        assert_eq!(t.vocab_size(), 9);
    }

    #[test]
    fn bad_files_and_inputs_are_typed_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TOKENIZER_FILE);
        assert!(matches!(Tokenizer::from_file(&path), Err(Error::Io { .. })));
        std::fs::write(&path, "{\"model\": 3}").unwrap();
        let err = Tokenizer::from_file(&path).unwrap_err();
        assert!(matches!(err, Error::Format { .. }), "{err}");
        assert!(tiny().encode_batch(&[]).is_err());
        let short = tiny().with_padding(Some(Padding::Fixed(2)));
        assert!(short.encode_batch(&["to be or not"]).is_err());
    }
}

//! A character-level tokenizer, as nanoGPT's `shakespeare_char` builds it:
//! the vocabulary is the sorted set of characters of a text (Python's
//! `sorted(set(text))`, by Unicode scalar value), and a character's token id
//! is its position in that list.
//!
//! The vocabulary travels with a model checkpoint as one metadata string
//! ([`CharTokenizer::to_metadata`], [`CharTokenizer::from_metadata`]), so a
//! saved model can be sampled without the text it was trained on.

use std::collections::HashMap;

use crate::base::error::{Error, Result};

/// Prefix of the metadata string: names the format and its version.
const METADATA_PREFIX: &str = "retrograd.char_tokenizer.v1:";

/// A character-level tokenizer (see the module docs).
///
/// ```
/// use retrograd::data::CharTokenizer;
/// let tok = CharTokenizer::from_text("hello world");
/// assert_eq!(tok.vocab_size(), 8);                 // ' ', d, e, h, l, o, r, w
/// let ids = tok.encode("hold")?;
/// assert_eq!(ids, vec![3, 5, 4, 1]);
/// assert_eq!(tok.decode(&ids)?, "hold");
/// assert!(tok.encode("help!").is_err());           // '!' is not in the vocabulary
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CharTokenizer {
    /// Id -> character, sorted ascending, no repeats.
    chars: Vec<char>,
    /// Character -> id for ASCII (`-1`: not in the vocabulary).
    ascii: [i64; 128],
    /// Character -> id for the rest.
    other: HashMap<char, i64>,
}

impl CharTokenizer {
    /// The metadata key under which programs conventionally store
    /// [`to_metadata`](Self::to_metadata) in a checkpoint.
    pub const METADATA_KEY: &'static str = "tokenizer";

    /// The tokenizer whose vocabulary is every distinct character of `text`, sorted.
    pub fn from_text(text: &str) -> Self {
        let mut seen = [false; 128];
        let mut chars: Vec<char> = Vec::new();
        for c in text.chars() {
            if c.is_ascii() {
                if !seen[c as usize] {
                    seen[c as usize] = true;
                    chars.push(c);
                }
            } else {
                chars.push(c);
            }
        }
        chars.sort_unstable();
        chars.dedup();
        Self::from_sorted(chars)
    }

    /// From a vocabulary already sorted and free of repeats.
    fn from_sorted(chars: Vec<char>) -> Self {
        let mut ascii = [-1i64; 128];
        let mut other = HashMap::new();
        for (id, &c) in chars.iter().enumerate() {
            if c.is_ascii() {
                ascii[c as usize] = id as i64;
            } else {
                other.insert(c, id as i64);
            }
        }
        CharTokenizer {
            chars,
            ascii,
            other,
        }
    }

    /// The number of distinct characters (token ids are `0..vocab_size`).
    pub fn vocab_size(&self) -> usize {
        self.chars.len()
    }

    /// The vocabulary: the character of each id, in id order.
    pub fn vocabulary(&self) -> &[char] {
        &self.chars
    }

    /// The id of one character, if it is in the vocabulary.
    pub fn id_of(&self, c: char) -> Option<i64> {
        if c.is_ascii() {
            let id = self.ascii[c as usize];
            (id >= 0).then_some(id)
        } else {
            self.other.get(&c).copied()
        }
    }

    /// The token ids of `text`, one per character. A character outside the
    /// vocabulary is an [`Error::UnknownCharacter`] naming it and its
    /// position (in characters).
    pub fn encode(&self, text: &str) -> Result<Vec<i64>> {
        let mut ids = Vec::with_capacity(text.len());
        for (position, character) in text.chars().enumerate() {
            match self.id_of(character) {
                Some(id) => ids.push(id),
                None => {
                    return Err(Error::UnknownCharacter {
                        op: "CharTokenizer::encode",
                        character,
                        position,
                    })
                }
            }
        }
        Ok(ids)
    }

    /// The text of token ids. An id outside `0..vocab_size` is an
    /// [`Error::IndexOutOfRange`].
    pub fn decode(&self, ids: &[i64]) -> Result<String> {
        let size = self.chars.len();
        ids.iter()
            .map(|&id| {
                usize::try_from(id)
                    .ok()
                    .and_then(|i| self.chars.get(i).copied())
                    .ok_or(Error::IndexOutOfRange {
                        op: "CharTokenizer::decode",
                        index: id,
                        size,
                    })
            })
            .collect()
    }

    /// The tokenizer as one string (a format tag, then the vocabulary in id
    /// order), for a checkpoint's metadata: safetensors metadata holds
    /// strings.
    ///
    /// ```
    /// use retrograd::data::CharTokenizer;
    /// let tok = CharTokenizer::from_text("ba\nb");
    /// assert_eq!(tok.to_metadata(), "retrograd.char_tokenizer.v1:\nab");
    /// assert_eq!(CharTokenizer::from_metadata(&tok.to_metadata())?, tok);
    /// assert!(CharTokenizer::from_metadata("retrograd.char_tokenizer.v1:ba").is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn to_metadata(&self) -> String {
        let mut s = String::from(METADATA_PREFIX);
        s.extend(&self.chars);
        s
    }

    /// Reads [`to_metadata`](Self::to_metadata)'s string. Anything else (no
    /// format tag, another version, an empty, unsorted or repeating
    /// vocabulary) is an [`Error::Format`] saying what is wrong.
    pub fn from_metadata(metadata: &str) -> Result<Self> {
        let bad = |reason: String| Error::Format {
            op: "CharTokenizer::from_metadata",
            path: "<tokenizer metadata>".to_string(),
            reason,
        };
        let Some(vocab) = metadata.strip_prefix(METADATA_PREFIX) else {
            let start: String = metadata.chars().take(40).collect();
            return Err(bad(format!(
                "expected a string starting with {METADATA_PREFIX:?}, found {start:?}"
            )));
        };
        let chars: Vec<char> = vocab.chars().collect();
        if chars.is_empty() {
            return Err(bad("the vocabulary is empty".into()));
        }
        if let Some(i) = chars.windows(2).position(|w| w[0] >= w[1]) {
            return Err(bad(format!(
                "the vocabulary is not sorted without repeats: {:?} then {:?} at ids {i} and {}",
                chars[i],
                chars[i + 1],
                i + 1
            )));
        }
        Ok(Self::from_sorted(chars))
    }
}

/// Splits token ids into training and validation parts: the first
/// `train_fraction` of them (rounded down, as nanoGPT's `int(n * 0.9)`) and
/// the rest. `train_fraction` must lie in `[0, 1]`.
///
/// ```
/// use retrograd::data::train_val_split;
/// let ids: Vec<i64> = (0..25).collect();
/// let (train, val) = train_val_split(&ids, 0.9)?;
/// assert_eq!((train.len(), val.len()), (22, 3));   // int(25 * 0.9) = 22
/// assert_eq!(val, &[22, 23, 24]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn train_val_split<T>(ids: &[T], train_fraction: f64) -> Result<(&[T], &[T])> {
    if !(0.0..=1.0).contains(&train_fraction) {
        return Err(Error::invalid(
            "train_val_split",
            format!("train_fraction must be in [0, 1], got {train_fraction}"),
        ));
    }
    let n = ((ids.len() as f64 * train_fraction) as usize).min(ids.len());
    Ok(ids.split_at(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_is_sorted_by_scalar_value_with_unicode() {
        let tok = CharTokenizer::from_text("zéa\u{1F600}a\n é");
        assert_eq!(tok.vocabulary(), &['\n', ' ', 'a', 'z', 'é', '\u{1F600}']);
        let ids = tok.encode("é\u{1F600}a").unwrap();
        assert_eq!(ids, vec![4, 5, 2]);
        assert_eq!(tok.decode(&ids).unwrap(), "é\u{1F600}a");
        let back = CharTokenizer::from_metadata(&tok.to_metadata()).unwrap();
        assert_eq!(back, tok);
        assert_eq!(back.encode("é\u{1F600}a").unwrap(), ids);
    }

    #[test]
    fn unknown_characters_and_ids_are_typed_errors() {
        let tok = CharTokenizer::from_text("abc");
        assert_eq!(
            tok.encode("abXc").unwrap_err(),
            Error::UnknownCharacter {
                op: "CharTokenizer::encode",
                character: 'X',
                position: 2
            }
        );
        // Positions count characters, not bytes.
        assert!(matches!(
            tok.encode("ééz"),
            Err(Error::UnknownCharacter {
                character: 'é',
                position: 0,
                ..
            })
        ));
        assert!(matches!(
            tok.encode("abz"),
            Err(Error::UnknownCharacter {
                character: 'z',
                position: 2,
                ..
            })
        ));
        for id in [3, -1, i64::MAX] {
            assert_eq!(
                tok.decode(&[0, id]).unwrap_err(),
                Error::IndexOutOfRange {
                    op: "CharTokenizer::decode",
                    index: id,
                    size: 3
                }
            );
        }
        assert_eq!(tok.encode("").unwrap(), Vec::<i64>::new());
        assert_eq!(tok.decode(&[]).unwrap(), "");
    }

    #[test]
    fn bad_metadata_is_a_format_error() {
        let reason = |s: &str| match CharTokenizer::from_metadata(s) {
            Err(Error::Format { op, reason, .. }) => {
                assert_eq!(op, "CharTokenizer::from_metadata");
                reason
            }
            other => panic!("expected a format error, got {other:?}"),
        };
        assert!(reason("abc").contains("expected a string starting with"));
        assert!(reason("retrograd.char_tokenizer.v2:abc").contains("starting with"));
        assert!(reason(METADATA_PREFIX).contains("empty"));
        assert!(reason(&format!("{METADATA_PREFIX}abb")).contains("'b' then 'b' at ids 1 and 2"));
        assert!(reason(&format!("{METADATA_PREFIX}ba")).contains("not sorted"));
    }

    #[test]
    fn split_bounds() {
        let ids = [1, 2, 3, 4];
        assert_eq!(train_val_split(&ids, 1.0).unwrap(), (&ids[..], &[][..]));
        assert_eq!(train_val_split(&ids, 0.0).unwrap(), (&[][..], &ids[..]));
        assert!(train_val_split(&ids, 1.5).is_err());
        assert!(train_val_split(&ids, f64::NAN).is_err());
    }
}

//! The "tiny Shakespeare" corpus bundled in `data/tinyshakespeare.txt.gz`
//! (1,115,394 characters, 65 distinct; public domain, as collected in
//! A. Karpathy's char-rnn; attribution in `data/README.md`), the text of
//! nanoGPT's `shakespeare_char` example.
//!
//! ```
//! use retrograd::data::{shakespeare, train_val_split, CharTokenizer};
//! let text = shakespeare::load_bundled()?;
//! let tok = CharTokenizer::from_text(&text);
//! assert_eq!((text.chars().count(), tok.vocab_size()), (1_115_394, 65));
//! let ids = tok.encode(&text)?;
//! let (train, val) = train_val_split(&ids, shakespeare::TRAIN_FRACTION)?;
//! assert_eq!((train.len(), val.len()), (1_003_854, 111_540));
//! # Ok::<(), retrograd::Error>(())
//! ```

use std::io::Read;

use retrograd_engine::base::error::{Error, Result};

/// The share of the text nanoGPT trains on (the first 90%; the last 10%
/// is for validation), for [`train_val_split`](super::train_val_split).
pub const TRAIN_FRACTION: f64 = 0.9;

/// The bundled copy of `data/tinyshakespeare.txt.gz`, so programs work from
/// any directory.
static BUNDLED: &[u8] = include_bytes!("../../../data/tinyshakespeare.txt.gz");

/// The bundled corpus as text.
pub fn load_bundled() -> Result<String> {
    parse(BUNDLED, "<bundled tinyshakespeare.txt.gz>")
}

/// Reads a text file, plain or gzip-compressed (detected from the magic
/// bytes); `source` names it in errors. Bad gzip data or text that is not
/// UTF-8 is an [`Error::Format`].
pub fn parse(bytes: &[u8], source: &str) -> Result<String> {
    let bad = |reason: String| Error::Format {
        op: "shakespeare::parse",
        path: source.to_string(),
        reason,
    };
    let bytes = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut out)
            .map_err(|e| bad(format!("bad gzip data: {e}")))?;
        std::borrow::Cow::Owned(out)
    } else {
        std::borrow::Cow::Borrowed(bytes)
    };
    String::from_utf8(bytes.into_owned())
        .map_err(|e| bad(format!("not UTF-8 text: {}", e.utf8_error())))
}

/// One speech of the play text: the speaker's name and the lines spoken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Speech {
    /// The speaker, as the heading line names them (`GLOUCESTER`,
    /// `First Citizen`).
    pub speaker: String,
    /// The speech's lines, joined by `\n`.
    pub text: String,
}

/// The speeches of a play text laid out as tiny Shakespeare is: blocks
/// separated by blank lines, each a `NAME:` line then the speech. Blocks
/// with a speaker and no lines (125 in tiny Shakespeare, where stage
/// business was cut) are skipped, so the bundled text gives 7,097 speeches
/// of its 7,222 blocks.
///
/// ```
/// use retrograd::data::shakespeare;
/// let speeches = shakespeare::speeches(&shakespeare::load_bundled()?);
/// assert_eq!(speeches.len(), 7097);
/// assert_eq!(speeches[0].speaker, "First Citizen");
/// assert!(speeches[0].text.starts_with("Before we proceed any further"));
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn speeches(text: &str) -> Vec<Speech> {
    text.split("\n\n")
        .map(|block| block.trim_matches('\n'))
        .filter_map(|block| {
            let (heading, lines) = block.split_once('\n')?;
            let speaker = heading.strip_suffix(':')?;
            let lines = lines.trim_matches('\n');
            (!lines.is_empty()).then(|| Speech {
                speaker: speaker.to_string(),
                text: lines.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn plain_and_gzip_read_the_same_and_bad_bytes_are_format_errors() {
        let text = "First Citizen:\nBefore we proceed any further, hear me speak.\n";
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(text.as_bytes()).unwrap();
        let zipped = gz.finish().unwrap();
        assert_eq!(parse(&zipped, "t").unwrap(), text);
        assert_eq!(parse(text.as_bytes(), "t").unwrap(), text);
        let mut corrupt = zipped[..zipped.len() - 6].to_vec();
        corrupt[12] ^= 0xff;
        assert!(matches!(parse(&corrupt, "t"), Err(Error::Format { .. })));
        assert!(matches!(
            parse(&[b'a', 0xff, b'b'], "t"),
            Err(Error::Format { ref reason, .. }) if reason.starts_with("not UTF-8")
        ));
    }

    #[test]
    fn bundled_text_begins_as_expected() {
        let text = load_bundled().unwrap();
        assert!(text.starts_with("First Citizen:\nBefore we proceed any further, hear me speak."));
        assert_eq!(text.len(), 1_115_394);
    }
}

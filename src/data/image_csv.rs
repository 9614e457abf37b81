//! The CSV format shared by the bundled image sets ([`digits`](super::digits),
//! [`mnist`](super::mnist)): no header, one image a row, `pixels` integer
//! columns (row-major, each in `0..=max_pixel`) then the label; plain or
//! gzip-compressed (detected from the magic bytes). Every problem is an
//! [`Error::Format`] naming the source, the line, and the column where
//! there is one; nothing panics.

use std::io::{BufRead, BufReader, Read};

use crate::error::{Error, Result};

/// What one image format looks like.
pub(crate) struct ImageCsv {
    /// Names the parser in errors (`"digits::parse"`).
    pub op: &'static str,
    /// Pixel columns before the label.
    pub pixels: usize,
    /// The largest pixel value; pixels are divided by it, to `[0, 1]`.
    pub max_pixel: u32,
    /// Labels lie in `0..num_classes`.
    pub num_classes: usize,
}

impl ImageCsv {
    /// Parses `bytes` into row-major features scaled to `[0, 1]` and
    /// labels; `source` names the file in errors.
    pub fn parse(&self, bytes: &[u8], source: &str) -> Result<(Vec<f64>, Vec<usize>)> {
        let format = |reason: String| Error::Format {
            op: self.op,
            path: source.to_string(),
            reason,
        };
        let reader: Box<dyn Read + '_> = if bytes.starts_with(&[0x1f, 0x8b]) {
            Box::new(flate2::read::GzDecoder::new(bytes))
        } else {
            Box::new(bytes)
        };
        let columns = self.pixels + 1;
        let max = self.max_pixel as f64;
        let mut features = Vec::new();
        let mut labels = Vec::new();
        let mut reader = BufReader::new(reader);
        let mut line = String::new();
        for line_no in 1.. {
            line.clear();
            // Reading from memory fails only on bad gzip data or invalid UTF-8.
            let read = reader
                .read_line(&mut line)
                .map_err(|e| format(format!("line {line_no}: {e}")))?;
            if read == 0 {
                break;
            }
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            let found = text.split(',').count();
            if found != columns {
                return Err(format(format!(
                    "line {line_no}: expected {columns} comma-separated values ({} pixels and a label), found {}",
                    self.pixels, found
                )));
            }
            for (col, field) in text.split(',').enumerate() {
                let v: u32 = field.trim().parse().map_err(|_| {
                    format(format!(
                        "line {line_no}, column {}: `{field}` is not a non-negative integer",
                        col + 1
                    ))
                })?;
                if col < self.pixels {
                    if v > self.max_pixel {
                        return Err(format(format!(
                            "line {line_no}, column {}: pixel {v} is out of range 0..={}",
                            col + 1,
                            self.max_pixel
                        )));
                    }
                    features.push(v as f64 / max);
                } else {
                    if v as usize >= self.num_classes {
                        return Err(format(format!(
                            "line {line_no}: label {v} is out of range 0..={}",
                            self.num_classes - 1
                        )));
                    }
                    labels.push(v as usize);
                }
            }
        }
        if labels.is_empty() {
            return Err(format("no rows".to_string()));
        }
        Ok((features, labels))
    }
}

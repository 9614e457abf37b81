//! The CSV format shared by the bundled image sets ([`digits`](super::digits),
//! [`mnist`](super::mnist)): no header, one image a row, `pixels` integer
//! columns (row-major, each in `0..=max_pixel`) then the label; plain or
//! gzip-compressed (detected from the magic bytes). Every problem is an
//! [`Error::Format`] naming the source, the line, and the column where
//! there is one; nothing panics.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::data::Dataset;

/// What one image format looks like.
pub(crate) struct ImageCsv {
    /// Names the parser in errors (`"digits::parse"`).
    pub op: &'static str,
    /// Names the file loader in errors (`"digits::load"`).
    pub load_op: &'static str,
    /// Pixel columns before the label.
    pub pixels: usize,
    /// The shape of one example (`pixels` elements in all).
    pub shape: &'static [usize],
    /// The largest pixel value; pixels are divided by it, to `[0, 1]`.
    pub max_pixel: u32,
    /// Labels lie in `0..num_classes`.
    pub num_classes: usize,
}

impl ImageCsv {
    /// Loads a file (plain or gzip-compressed) from `path` as a dataset.
    pub fn load(&self, path: &Path) -> Result<Dataset> {
        let bytes = std::fs::read(path).map_err(|e| Error::Io {
            op: self.load_op,
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        self.dataset(&bytes, &path.display().to_string())
    }

    /// Parses `bytes` into a dataset of `shape`d examples; `source` names
    /// the file in errors.
    pub fn dataset(&self, bytes: &[u8], source: &str) -> Result<Dataset> {
        let (features, labels) = self.parse(bytes, source)?;
        Dataset::new(features, self.pixels, labels, self.num_classes)?
            .with_feature_shape(self.shape)
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Both bundled formats, with a pixel value at their maximum.
    fn formats() -> [(&'static ImageCsv, &'static str); 2] {
        [
            (&super::super::digits::FORMAT, "16"),
            (&super::super::mnist::FORMAT, "255"),
        ]
    }

    fn row(format: &ImageCsv, pixel: &str, label: &str) -> String {
        let mut f = vec![pixel; format.pixels];
        f.push(label);
        f.join(",")
    }

    /// The reason of a format error, checking that it names the parser.
    fn reason(format: &ImageCsv, e: Error) -> String {
        match e {
            Error::Format { op, reason, .. } => {
                assert_eq!(op, format.op);
                reason
            }
            other => panic!("expected a format error, got {other}"),
        }
    }

    #[test]
    fn plain_and_gzip_parse_the_same() {
        for (format, max) in formats() {
            let text = format!("{}\n{}\n", row(format, max, "3"), row(format, "0", "9"));
            let plain = format.dataset(text.as_bytes(), "t").unwrap();
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(text.as_bytes()).unwrap();
            let zipped = format.dataset(&gz.finish().unwrap(), "t").unwrap();
            assert_eq!(plain, zipped);
            assert_eq!(plain.labels(), &[3, 9]);
            assert_eq!(plain.features_of(0)[0], 1.0);
            assert_eq!(plain.features_of(1)[format.pixels - 1], 0.0);
            assert_eq!(plain.feature_shape(), format.shape);
        }
    }

    #[test]
    fn malformed_rows_are_format_errors_with_the_line() {
        for (format, max) in formats() {
            let columns = format.pixels + 1;
            let parse =
                |text: &str| reason(format, format.dataset(text.as_bytes(), "t").unwrap_err());
            assert!(parse("1,2,3\n").starts_with(&format!(
                "line 1: expected {columns} comma-separated values ({} pixels",
                format.pixels
            )));
            let text = format!("{}\n{}\n", row(format, "1", "0"), row(format, "x", "0"));
            assert!(parse(&text).contains("line 2, column 1: `x`"));
            assert!(
                parse(&row(format, "1", "10")).contains("line 1: label 10 is out of range 0..=9")
            );
            let over = (format.max_pixel + 1).to_string();
            assert!(parse(&row(format, &over, "1"))
                .contains(&format!("column 1: pixel {over} is out of range 0..={max}")));
            assert!(parse(&row(format, "-1", "1")).contains("`-1`"));
            assert!(parse("\n\n").contains("no rows"));
        }
        // A digits row (64 pixels) is not an MNIST row.
        let digits_row = format!("{},0", vec!["1"; 64].join(","));
        let mnist = &super::super::mnist::FORMAT;
        assert!(reason(
            mnist,
            mnist.dataset(digits_row.as_bytes(), "t").unwrap_err()
        )
        .contains("found 65"));
    }

    #[test]
    fn corrupt_gzip_is_a_format_error_and_missing_file_an_io_error() {
        for (format, max) in formats() {
            let text: String = (0..40)
                .map(|i| row(format, max, &(i % 10).to_string()) + "\n")
                .collect();
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(text.as_bytes()).unwrap();
            let mut bytes = gz.finish().unwrap();
            let at = bytes.len() / 2;
            bytes[at] ^= 0xff;
            assert!(matches!(
                format.dataset(&bytes, "t"),
                Err(Error::Format { .. })
            ));
            match format.load(Path::new("/no/such/images.csv.gz")) {
                Err(Error::Io { op, path, .. }) => {
                    assert_eq!(
                        (op, path.as_str()),
                        (format.load_op, "/no/such/images.csv.gz")
                    );
                }
                other => panic!("{other:?}"),
            }
        }
    }
}

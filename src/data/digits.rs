//! The UCI optical handwritten digits (the 1,797 8x8 images scikit-learn
//! ships as `load_digits`; CC BY 4.0, Alpaydin & Kaynak 1998, attribution in
//! `data/README.md`).
//!
//! File format: CSV without header, one image a row: 64 pixel columns
//! (row-major, integers `0..=16`) then the label (`0..=9`); plain or
//! gzip-compressed (detected from the magic bytes). Pixels are scaled to
//! `[0, 1]` (divided by 16): a fixed scale needs no statistics, so nothing
//! leaks from the test split into training.

use std::path::Path;

use super::image_csv::ImageCsv;
use super::Dataset;
use crate::error::{Error, Result};

/// Pixels per image (8 x 8).
pub const NUM_PIXELS: usize = 64;
/// Digit classes 0-9.
pub const NUM_CLASSES: usize = 10;
/// The largest pixel value in the file.
pub const MAX_PIXEL: u32 = 16;

/// The bundled copy of `data/digits.csv.gz`, so programs work from any
/// directory.
static BUNDLED: &[u8] = include_bytes!("../../data/digits.csv.gz");

/// The digits dataset bundled with retrograd (1,797 images).
///
/// ```
/// let digits = retrograd::data::digits::load_bundled()?;
/// assert_eq!(digits.len(), 1797);
/// assert_eq!(digits.num_features(), 64);
/// assert_eq!(digits.class_counts()[0], 178);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn load_bundled() -> Result<Dataset> {
    parse(BUNDLED, "<bundled digits.csv.gz>")
}

/// Loads a digits file (plain or gzip-compressed CSV) from `path`.
pub fn load(path: impl AsRef<Path>) -> Result<Dataset> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::Io {
        op: "digits::load",
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    parse(&bytes, &path.display().to_string())
}

/// Parses the bytes of a digits file; `source` names it in errors.
pub fn parse(bytes: &[u8], source: &str) -> Result<Dataset> {
    let (features, labels) = FORMAT.parse(bytes, source)?;
    Dataset::new(features, NUM_PIXELS, labels, NUM_CLASSES)
}

/// The file format, shared with [`mnist`](super::mnist).
const FORMAT: ImageCsv = ImageCsv {
    op: "digits::parse",
    pixels: NUM_PIXELS,
    max_pixel: MAX_PIXEL,
    num_classes: NUM_CLASSES,
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn row(pixel: &str, label: &str) -> String {
        let mut f = vec![pixel; NUM_PIXELS];
        f.push(label);
        f.join(",")
    }

    fn reason(e: Error) -> String {
        match e {
            Error::Format { reason, .. } => reason,
            other => panic!("expected a format error, got {other}"),
        }
    }

    #[test]
    fn bundled_file_matches_its_description() {
        let d = load_bundled().unwrap();
        assert_eq!(
            d.class_counts(),
            vec![178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
        );
        assert!(d.features().iter().all(|&v| (0.0..=1.0).contains(&v)));
        assert_eq!(d.features().iter().cloned().fold(0.0, f64::max), 1.0);
    }

    #[test]
    fn plain_and_gzip_parse_the_same() {
        let text = format!("{}\n{}\n", row("16", "3"), row("0", "9"));
        let plain = parse(text.as_bytes(), "t").unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(text.as_bytes()).unwrap();
        let zipped = parse(&gz.finish().unwrap(), "t").unwrap();
        assert_eq!(plain, zipped);
        assert_eq!(plain.labels(), &[3, 9]);
        assert_eq!(plain.features_of(0)[0], 1.0);
    }

    #[test]
    fn malformed_rows_are_format_errors_with_the_line() {
        let short = "1,2,3\n";
        assert!(
            reason(parse(short.as_bytes(), "t").unwrap_err()).starts_with("line 1: expected 65")
        );
        let text = format!("{}\n{}\n", row("1", "0"), row("x", "0"));
        assert!(reason(parse(text.as_bytes(), "t").unwrap_err()).contains("line 2, column 1: `x`"));
        let text = row("1", "10");
        assert!(
            reason(parse(text.as_bytes(), "t").unwrap_err()).contains("label 10 is out of range")
        );
        let text = row("17", "1");
        assert!(reason(parse(text.as_bytes(), "t").unwrap_err()).contains("pixel 17"));
        let text = row("-1", "1");
        assert!(parse(text.as_bytes(), "t").is_err());
        assert!(reason(parse(b"\n\n", "t").unwrap_err()).contains("no rows"));
    }

    #[test]
    fn corrupt_gzip_is_a_format_error_and_missing_file_an_io_error() {
        let mut bytes = BUNDLED[..200].to_vec();
        bytes[150] ^= 0xff;
        assert!(matches!(parse(&bytes, "t"), Err(Error::Format { .. })));
        assert!(matches!(
            load("/no/such/digits.csv.gz"),
            Err(Error::Io { ref path, .. }) if path == "/no/such/digits.csv.gz"
        ));
    }
}

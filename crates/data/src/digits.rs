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

use crate::image_csv::ImageCsv;
use retrograd_engine::base::error::Result;
use retrograd_engine::data::Dataset;

/// Pixels per image (8 x 8).
pub const NUM_PIXELS: usize = 64;
/// Digit classes 0-9.
pub const NUM_CLASSES: usize = 10;
/// The largest pixel value in the file.
pub const MAX_PIXEL: u32 = 16;

/// The bundled copy of `data/digits.csv.gz`, so programs work from any
/// directory.
static BUNDLED: &[u8] = include_bytes!("../../../data/digits.csv.gz");

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
    FORMAT.load(path.as_ref())
}

/// Parses the bytes of a digits file; `source` names it in errors.
pub fn parse(bytes: &[u8], source: &str) -> Result<Dataset> {
    FORMAT.dataset(bytes, source)
}

/// The file format, shared with [`mnist`](super::mnist).
pub(super) const FORMAT: ImageCsv = ImageCsv {
    op: "digits::parse",
    load_op: "digits::load",
    pixels: NUM_PIXELS,
    shape: &[NUM_PIXELS],
    max_pixel: MAX_PIXEL,
    num_classes: NUM_CLASSES,
};

#[cfg(test)]
mod tests {
    use super::*;

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
}

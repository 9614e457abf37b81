//! Data for training: an in-memory labelled [`Dataset`] with seeded splits
//! (stratified, or a shuffle cut at exact sizes), shuffling mini-[`Batches`],
//! and two bundled sets of handwritten digits: the 8x8 UCI [`digits`] and
//! 5,000 28x28 [`mnist`] images; [`random_shift`] augments image batches.
//! For text: the bundled [`shakespeare`] corpus, a [`CharTokenizer`] and
//! [`train_val_split`] (the first part of the token ids to train on, the
//! rest to validate).
//!
//! Where things are: in-memory `Dataset` with a stratified split
//! (`dataset.rs`), seeded mini-`Batches` (`batches.rs`), the bundled digits
//! loader (`digits.rs`), the 5,000 bundled MNIST digits as `[1, 28, 28]`
//! images with the seeded 4,000/1,000 split and MEAN/STD (`mnist.rs`), the
//! "pixels then label" CSV parser both share (`image_csv.rs`),
//! `random_shift` augmentation (`augment.rs`); a `Dataset` carries a
//! feature shape, so batches come as `[B, ..shape]`; `tokenizer.rs`:
//! `CharTokenizer` (a sorted character vocabulary, encode/decode with typed
//! errors, a metadata string saved with a checkpoint) and
//! `train_val_split`; `shakespeare.rs`: the bundled tiny Shakespeare text.

mod augment;
mod batches;
mod dataset;
pub mod digits;
mod image_csv;
pub mod mnist;
pub mod shakespeare;
pub mod speakers;
mod tokenizer;

pub use augment::random_shift;
pub use batches::{Batch, Batches};
pub use dataset::Dataset;
pub use tokenizer::{train_val_split, CharTokenizer};

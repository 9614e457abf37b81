//! Data for training: an in-memory labelled [`Dataset`] with seeded splits
//! (stratified, or a shuffle cut at exact sizes), shuffling mini-[`Batches`],
//! and two bundled sets of handwritten digits: the 8x8 UCI [`digits`] and
//! 5,000 28x28 [`mnist`] images; [`random_shift`] augments image batches.
//! For text: the bundled [`shakespeare`] corpus, a [`CharTokenizer`] and
//! [`train_val_split`] (the first part of the token ids to train on, the
//! rest to validate).

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

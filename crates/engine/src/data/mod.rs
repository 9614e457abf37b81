//! Data for training: an in-memory labelled [`Dataset`] with seeded splits
//! (stratified, or a shuffle cut at exact sizes), shuffling mini-[`Batches`];
//! [`random_shift`] augments image batches. For text: a [`CharTokenizer`]
//! and [`train_val_split`] (the first part of the token ids to train on,
//! the rest to validate). The bundled sets (digits, MNIST, tiny
//! Shakespeare) are the `retrograd-data` crate's, re-exported beside these
//! as `retrograd::data`.
//!
//! Where things are: in-memory `Dataset` with a stratified split
//! (`dataset.rs`), seeded mini-`Batches` (`batches.rs`), `random_shift`
//! augmentation (`augment.rs`); a `Dataset` carries a feature shape, so
//! batches come as `[B, ..shape]`; `tokenizer.rs`: `CharTokenizer` (a
//! sorted character vocabulary, encode/decode with typed errors, a metadata
//! string saved with a checkpoint) and `train_val_split`.

mod augment;
mod batches;
mod dataset;
mod tokenizer;

pub use augment::random_shift;
pub use batches::{Batch, Batches};
pub use dataset::Dataset;
pub use tokenizer::{train_val_split, CharTokenizer};

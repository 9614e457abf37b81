//! Data for training: an in-memory labelled [`Dataset`] with a seeded
//! stratified split, shuffling mini-[`Batches`], and the bundled handwritten
//! [`digits`].

mod batches;
mod dataset;
pub mod digits;

pub use batches::{Batch, Batches};
pub use dataset::Dataset;

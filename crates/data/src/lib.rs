//! The datasets bundled with retrograd, compiled into the program so that
//! its jobs run from any directory without a download: the 8x8 UCI
//! [`digits`], 5,000 28x28 [`mnist`] images, the tiny [`shakespeare`]
//! corpus and the speaker-classification task drawn from it
//! ([`speakers`]). Attributions and licences: `data/README.md`.
//!
//! Where things are: the digits loader (`digits.rs`), the MNIST digits as
//! `[1, 28, 28]` images with the seeded 4,000/1,000 split and MEAN/STD
//! (`mnist.rs`), the "pixels then label" CSV parser both share
//! (`image_csv.rs`), the Shakespeare text and its speeches
//! (`shakespeare.rs`), the speaker task (`speakers.rs`).
#![warn(missing_docs)]

pub mod digits;
mod image_csv;
pub mod mnist;
pub mod shakespeare;
pub mod speakers;

//! The base layer: what every other layer may use and which uses nothing
//! of the crate. The one [`Error`] enum and [`Result`] (`error.rs`), the
//! `fallible!` macro that writes each `try_x`/`x` method pair
//! (`fallible.rs`), and the [`DType`] tag (`dtype.rs`), which sits here
//! because errors name dtypes.
//!
//! Users name these through the crate root (`retrograd::{Error, Result,
//! DType}`). The module is public for the crates around the engine, which
//! follow the same conventions: they build errors with
//! [`Error::invalid`] and friends, and write their `try_x`/`x` pairs with
//! `fallible!` and [`error::or_panic`].
//!
//! Where things are: the base layer: the one `Error` enum (thiserror) and
//! `Result`; `or_panic`, the panicking form of every `try_` method and of
//! operator sugar (`error.rs`); `fallible!`, which writes each `try_x`/`x`
//! method pair from one body (`fallible.rs`); the `DType` tag (`dtype.rs`);
//! `Profile`, the per-part wall times of repeated runs that compiled steps
//! and imported ONNX models report (`profile.rs`).

pub(crate) mod dtype;
pub mod error;
pub mod fallible;
pub mod profile;

pub use dtype::DType;
pub use error::{Error, OnnxProblem, Result, TensorProblem};
pub use profile::Profile;

//! Layers: one module type per file.

mod activation;
mod sequential;

pub use activation::Activation;
pub use sequential::Sequential;

//! Training building blocks: parameters, initialisers, modules and layers.

pub mod init;
mod parameter;

pub use parameter::Parameter;

//! Training building blocks: parameters (and, as they land, modules,
//! initialisers and layers).

mod parameter;

pub use parameter::Parameter;

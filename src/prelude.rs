//! The names most programs need: `use retrograd::prelude::*;`.

pub use retrograd_engine::prelude::*;
pub use retrograd_viz::viz::GraphPictures as _;

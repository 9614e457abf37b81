//! Kernels of quantized weights: activations quantized to 8 bits per block
//! (`q8_rows.rs`), integer dot products of one weight row with one
//! activation row, portable and AVX2 (`dot.rs`), the matrix product over
//! them, threaded over the weight's rows (`product.rs`), and products
//! through f32 tiles of a few dequantized rows, for the other formats and
//! for `g · W` (`tiles.rs`).

mod dot;
mod product;
mod q8_rows;
mod tiles;

pub use dot::DotFormat;
pub use product::product;
pub use q8_rows::Q8Rows;
pub use tiles::{product_by_tiles, transposed_product_by_tiles};

//! Kernels of quantized weights: activations quantized to 8 bits per block
//! (`q8_rows.rs`), integer dot products of one weight row with one
//! activation row, portable and AVX2 (`dot.rs`), and the matrix product
//! over them, threaded over the weight's rows (`product.rs`).

mod dot;
mod product;
mod q8_rows;

pub use dot::{dot, dot_portable, DotFormat, Q4_0_BYTES, Q4_1_BYTES, Q8_0_BYTES};
pub use product::product;
pub use q8_rows::{Q8Row, Q8Rows, Q8_BLOCK};

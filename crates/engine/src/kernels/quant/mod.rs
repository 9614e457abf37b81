//! Kernels of quantized weights: activations quantized to 8 bits per block
//! of 32 (`q8_rows.rs`) or per super-block of 256 (`q8k_rows.rs`), integer
//! dot products of one weight row with one activation row, portable and
//! AVX2, for Q4_0, Q4_1 and Q8_0 (`dot.rs`) and for the K-quants Q4_K,
//! Q5_K and Q6_K (`dot_k.rs`), the matrix products over them, threaded
//! over the weight's rows (`product.rs`), and products through f32 tiles
//! of a few dequantized rows, for the other formats and for `g · W`
//! (`tiles.rs`).

mod dot;
mod dot_k;
mod product;
mod q8_rows;
mod q8k_rows;
mod tiles;

pub use dot::DotFormat;
pub use dot_k::KDotFormat;
pub use product::{product, product_k};
pub use q8_rows::Q8Rows;
pub use q8k_rows::{Q8KRows, Q8K_BLOCK};
pub use tiles::{product_by_tiles, transposed_product_by_tiles};

/// Whether the AVX2 dot-product kernels of both block families can run:
/// AVX2, FMA and F16C, under the instruction-set cap.
#[inline(always)]
fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::kernels::simd::has_f16c()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

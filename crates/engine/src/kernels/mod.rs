//! Kernels: the loops. Plain functions over slices and tensors that know
//! nothing of graphs (the textbook chapter's `elementwise_add` / `elementwise_mul` and
//! friends).
//!
//! Every kernel is generic over [`Element`](crate::Element) through small
//! functor traits ([`UnaryFn`], [`BinaryFn`]), so each loop is written once,
//! monomorphised for f32 and f64, and vectorised by the compiler. Large inputs
//! are split across rayon's pool above [`parallel::PARALLEL_THRESHOLD`].
//! Float kernels dispatch with `with_dtype!`, which turns an i64 or bool
//! tensor into `Error::NotFloat` naming the op; kernels that only move or
//! compare elements (layout copies, gathers, [`mask`]) take all four dtypes.
//!
//! # What is public, and why
//!
//! Most of this module is private to the engine: ops call the loops, users
//! call ops. Public on purpose are the entry points that code outside the
//! engine crate calls without a graph: the fused inference paths of the
//! ONNX importer ([`matmul_bias`], [`nn::conv_fused`], [`nn::norm`]'s
//! `add_layer_norm`, [`nn::attention`] and [`nn::attention_tiled`]); the
//! threading knobs ([`parallel`], [`on_pool`], [`matmul`]'s
//! `PARALLEL_FLOPS`); the instruction-set cap and the `wide` dispatch
//! ([`simd`]); and the slice loops that the benchmarks time on their own
//! ([`elementwise`], [`functors`], [`reduce`], [`matmul`]).
//!
//! Where things are: `quant/` (the quantized matrix product: 8-bit
//! activations and integer dot products per block), the loops: `elementwise.rs` (map, zip with
//! broadcasting), `reduce.rs` (pairwise sums, axis sums, `sum_to_shape`),
//! `functors.rs` (the `UnaryFn`/`BinaryFn` traits), `parallel.rs` (rayon
//! threshold, and `for_each_part`: an output split into parts on the pool),
//! `matmul.rs` (PyTorch `matmul` rules on `gemm`; each operand
//! read at its own strides, so transposed flags and strided views cost no
//! copy, except a right operand whose columns lie 1 KiB or more apart,
//! copied row-major by `transpose.rs`; batch broadcast, threading by size: a large product is cut into
//! one part per pool thread along C's rows or columns, each a
//! single-threaded gemm call, which beat gemm's own threading on the
//! bake-off shapes), `layout.rs` (cat, the scatter of a slice's gradient,
//! pad), `index.rs` (index tensors, gather/scatter loops), `mask.rs` (the
//! registry ops `Compare` (eq/ne/lt/le/gt/ge, bool output), `MaskedFill`,
//! `Triangle` (tril/triu), `Cast` (to_dtype), `Topk` (values; its
//! derivative is `Gather`'s), each derivative the op itself, and their
//! `Var` methods), `simd.rs` (`wide`: runs a slice loop compiled for
//! AVX-512/AVX2 when the CPU has it, same scalar code so bit-identical
//! results), `f32_vector.rs` (one f32 register, 16 lanes on AVX-512 or 8 on AVX2, as a trait: the direct convolution's register tiles are written once over it), `f64x8.rs` (eight f64 lanes on AVX-512, AVX or arrays in one order
//! of additions, for the normalisations' row and plane sums), `blocks.rs` (slice loops by 64-element blocks, for functions
//! whose per-element dependency chain is long: `erfc`, `exp`), `transpose.rs` (a column-major matrix copied
//! row-major in AVX-512 register tiles, for `gemm`'s right operand), `ternary.rs` (`zip3`: three operands,
//! broadcasting), `power.rs` (pow functors and fixed-exponent fast paths),
//! `reduce_lanes.rs` (one accumulator per output for any axis set, fed in
//! memory order, parallel), `reduce_minmax.rs` (extrema, arg-extrema, tie
//! weights), `reduce_stats.rs` (max-shifted logsumexp, two-pass var; f64
//! accumulation); `testing.rs` (tests only: reading back a filled output,
//! `conv_geometry`).

pub(crate) mod blocks;
pub mod elementwise;
#[cfg(target_arch = "x86_64")]
pub(crate) mod f32_vector;
pub(crate) mod f64x8;
pub mod functors;
pub(crate) mod identity_product;
pub(crate) mod index;
pub(crate) mod layout;
pub(crate) mod mask;
pub mod matmul;
pub mod nn;
pub mod on_pool;
pub mod parallel;
pub(crate) mod power;
pub(crate) mod quant;
pub mod reduce;
pub(crate) mod reduce_lanes;
pub(crate) mod reduce_minmax;
pub(crate) mod reduce_stats;
pub mod simd;
pub(crate) mod ternary;
#[cfg(test)]
mod testing;
pub(crate) mod transpose;

pub use elementwise::{broadcast_to, map, zip};
pub use functors::{BinaryFn, UnaryFn};
pub use matmul::{matmul, matmul_bias};
pub use reduce::{mean_axes, sum_all, sum_axes, sum_to_shape};
pub use ternary::{zip3, TernaryFn};

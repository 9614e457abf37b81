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

pub mod elementwise;
pub mod functors;
pub mod index;
pub mod layout;
pub mod mask;
pub mod matmul;
pub mod nn;
pub mod parallel;
pub(crate) mod power;
pub mod reduce;
pub(crate) mod reduce_lanes;
pub mod reduce_minmax;
pub mod reduce_stats;
pub mod simd;
pub mod tanh;
pub mod ternary;

pub use elementwise::{broadcast_to, map, zip};
pub use functors::{BinaryFn, UnaryFn};
pub use matmul::matmul;
pub use reduce::{mean_axes, sum_all, sum_axes, sum_to_shape};
pub use ternary::{zip3, TernaryFn};

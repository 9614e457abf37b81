//! Fused kernels of the neural-net functions (`ops::nn`): softmax and
//! log-softmax along any axis, the classification and regression losses,
//! layer, batch and group normalisation, embedding gather/scatter and dropout masks.
//!
//! Each is one pass (or one pass per row, in cache) over its input, built on
//! a vectorisable `exp` ([`NnFloat`]) and a driver that hands the math
//! contiguous blocks of rows whatever the reduced axis ([`lanes`]).

pub mod exp;

pub use exp::NnFloat;
pub mod attention;
pub mod batch_norm;
pub mod classification;
pub mod conv;
#[cfg(target_arch = "x86_64")]
mod conv_direct;
mod im2col;
pub mod lanes;
pub mod norm;
pub mod pointwise;
pub mod pool;
pub mod rms_norm;
pub mod softmax;
pub mod sparse;

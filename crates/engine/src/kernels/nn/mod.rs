//! Fused kernels of the neural-net functions (`ops::nn`): softmax and
//! log-softmax along any axis, the classification and regression losses,
//! layer, batch and group normalisation, embedding gather/scatter and dropout masks.
//!
//! Each is one pass (or one pass per row, in cache) over its input, built on
//! a vectorisable `exp` ([`NnFloat`]) and a driver that hands the math
//! contiguous blocks of rows whatever the reduced axis ([`lanes`]).
//!
//! Where things are: fused nn kernels: a vectorised `exp` dispatched to
//! AVX2/AVX-512 at run time (`exp.rs`), lanes along an axis handed out as
//! blocks of contiguous rows (`lanes.rs`), softmax, cross-entropy/nll,
//! elementwise losses, layer norm, embedding gather/scatter and seeded
//! dropout masks; `conv.rs`: the three products of a 2-d convolution
//! (forward, input gradient = transposed convolution, weight gradient) as
//! im2col/col2im (`im2col.rs`: whole-vector copies out of a zero-padded
//! plane for unit width strides, per element otherwise) and `gemm` per
//! sample, group and block of output rows, the im2col workspace bounded by
//! `WORKSPACE_BYTES` (64 MiB) whatever the batch; `conv_direct.rs`: the
//! same three products for f32 at stride one on AVX-512 or AVX2 CPUs without im2col
//! or GEMM (register tiles reading taps straight from zero-padded planes;
//! the input gradient as the correlation with the flipped kernel; the
//! weight gradient with pixels in the lanes, summed in the same fixed parts
//! of the batch), which `conv.rs` dispatches to when it applies;
//! `conv_fused.rs`: the forward with a ReLU and a 2x2 max pool in its
//! output pass, for inference (the direct kernel's tiles store through the
//! ReLU and each sample's output is pooled from L2), and
//! `conv_channel_lanes.rs` its tiles with the output channels in the lanes
//! for convolutions 64 or more input channels times taps deep (the ReLU
//! and the pooling on the registers), and `conv_winograd.rs` its 3x3
//! layers by Winograd's F(2x2, 3x3) where the caller allows other
//! roundings (the ONNX import at inference); samples spread over rayon workers,
//! the weight gradient summed over fixed groups of samples in order (same
//! bits for any thread count); `pool.rs`: 2-d pooling, a `Plan2d` of per-axis window taps (padding, dilation,
//! ceil_mode and adaptive windows resolved up front), max with argmax
//! indices, scatter/gather at them, average (fixed or adaptive) and its
//! adjoint, parallel by whole N·C planes, a 2x2/stride-2 fast path with the
//! same bits; `batch_norm.rs`: per-channel moments and normalisation over
//! `[N, C, S]` planes, parallel by channel for sums and by plane for
//! writes; `attention.rs`: flash-style scaled dot-product attention on
//! `Rows` (q, k, v and dO read at their strides when each row is
//! contiguous, so heads split by a permute are never packed), a forward
//! over 64x64 blocks with an online softmax writing the output and the
//! per-row logsumexp, a backward recomputing the probabilities block by
//! block (`dS = P (dP - rowsum(dO O))`), one task per head, fixed-order
//! sums, O(L + S) memory per head; `attention_tiled.rs`: the forward
//! for small f32 heads (dims up to 64, up to 1024 keys) on AVX-512
//! register tiles, every key of a row in one pass, with the logsumexp
//! when training, and `attention_tiled_backward.rs` its backward on the
//! same tiles (what the op runs wherever they apply); `rms_norm.rs`: fused forward and
//! input-gradient kernels.

pub(crate) mod exp;

pub use exp::NnFloat;
pub mod attention;
pub mod attention_tiled;
pub(crate) mod attention_tiled_backward;
pub(crate) mod batch_norm;
pub(crate) mod classification;
pub(crate) mod conv;
#[cfg(target_arch = "x86_64")]
mod conv_channel_lanes;
mod conv_depthwise;
#[cfg(target_arch = "x86_64")]
mod conv_direct;
pub mod conv_fused;
#[cfg(target_arch = "x86_64")]
mod conv_winograd;
mod im2col;
pub(crate) mod lanes;
pub mod norm;
pub(crate) mod pointwise;
pub(crate) mod pool;
pub(crate) mod rms_norm;
pub(crate) mod softmax;
pub(crate) mod sparse;

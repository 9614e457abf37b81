//! A convolution's forward with what follows it at inference fused into
//! its output pass: `relu(conv(x, w) + bias)`, then optionally 2x2 max
//! pooling with stride 2, without writing the full-size activation out and
//! reading it back once for the ReLU and once for the pooling
//! (ARCHITECTURE.md, PERF: "Inference skips what only a backward needs").
//!
//! With [`ConvSummation::Exact`] the bits are those of the ops one after
//! another: the convolution's own kernel, `Relu`'s rule (`x < 0 ? 0 : x`,
//! so NaN and -0 pass) and max pooling's tournament (the first maximum, or
//! the last NaN). Where the direct kernel runs (`conv_direct.rs`: f32,
//! stride one, AVX-512) the ReLU is in its tiles' stores and the pooling
//! reads each sample's output while it is in L2; elsewhere the convolution
//! runs whole and the rest follows. [`ConvSummation::Winograd`] lets a deep
//! enough 3x3 layer sum by Winograd's F(2x2, 3x3) instead
//! (`conv_winograd.rs`): the same ReLU and pooling, other roundings.

use std::mem::MaybeUninit;

use super::conv::{conv2d_forward, ConvGeometry};
use super::pool::max_row_pairs;
#[cfg(target_arch = "x86_64")]
use super::{conv_channel_lanes, conv_depthwise, conv_direct, conv_winograd};
use crate::tensor::{Element, Filled};

/// What a fused convolution does to its output, in this order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConvEpilogue {
    /// A ReLU after the bias.
    pub relu: bool,
    /// 2x2 max pooling with stride 2, no padding, rounding the size down.
    pub pool: bool,
}

impl ConvEpilogue {
    /// The plane written for a convolution output plane `conv` (rows, columns).
    pub fn output_plane(&self, conv: [usize; 2]) -> [usize; 2] {
        if self.pool {
            [conv[0] / 2, conv[1] / 2]
        } else {
            conv
        }
    }

    /// Elements written for the convolution `geo`.
    pub fn output_len(&self, geo: &ConvGeometry) -> usize {
        let [h, w] = self.output_plane(geo.output);
        geo.batch * geo.out_channels * h * w
    }
}

/// How a fused convolution may sum its products.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConvSummation {
    /// The convolution op's own order: the bits of the ops one after
    /// another.
    #[default]
    Exact,
    /// Winograd's F(2x2, 3x3) where it applies (f32, a 3x3 kernel at
    /// stride and dilation one, 8 or more input channels per group, on an
    /// AVX-512 CPU; `conv_winograd.rs`), else [`Exact`](Self::Exact): 2.25x
    /// fewer multiply-adds, outputs within a few f32 roundings of each
    /// output's terms but not the same bits, and a NaN or infinity in the
    /// input reaches the whole 2x2 block of outputs above it.
    Winograd,
}

/// `epilogue(conv(x, w) + bias)`, with `x`, `w`, `bias` as
/// [`conv2d_forward`]'s, summed as `summation` allows; writes every element
/// of `out` (`[N, C_out, OH', OW']`, [`ConvEpilogue::output_plane`]).
/// Panics if `out` is not [`ConvEpilogue::output_len`] long.
pub fn conv2d_forward_fused<'o, T: Element>(
    geo: &ConvGeometry,
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    epilogue: ConvEpilogue,
    summation: ConvSummation,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    assert_eq!(
        out.len(),
        epilogue.output_len(geo),
        "fused conv2d output length"
    );
    // A depthwise convolution sums directly in `conv2d_forward`; the tiles
    // of the direct kernel are for many channels a group.
    #[cfg(target_arch = "x86_64")]
    if conv_direct::applies::<T>(geo) && !conv_depthwise::applies(geo) {
        let (x, w) = (&x[..geo.input_len()], &w[..geo.weight_len()]);
        // The Winograd and channel-lane kernels are written for AVX-512
        // alone; on AVX2 the direct kernel runs every fused block.
        let avx512 = crate::kernels::simd::has_avx512();
        let winograd =
            avx512 && summation == ConvSummation::Winograd && conv_winograd::Winograd::applies(geo);
        let lane_kernel: Option<FusedForward> = if winograd {
            Some(conv_winograd::Winograd::forward_fused)
        } else if avx512 && conv_channel_lanes::ChannelLanes::applies(geo) {
            Some(conv_channel_lanes::ChannelLanes::forward_fused)
        } else {
            None
        };
        if let Some(forward) = lane_kernel {
            let (x, w) = (conv_direct::as_f32(x), conv_direct::as_f32(w));
            let (bias, y) = (bias.map(conv_direct::as_f32), conv_direct::as_f32_out(out));
            let ins = FusedInputs {
                geo,
                x,
                w,
                bias,
                epilogue,
            };
            // SAFETY: `conv_direct::applies` checked f32 and stride one,
            // `avx512` AVX-512F, and the chosen kernel's `applies` holds; the
            // lengths are `geo`'s and the epilogue's (asserted above): the
            // contract of `Avx512FusedConv::forward_fused`.
            unsafe { forward(ins, y) };
        } else {
            conv_direct::forward_fused(geo, x, w, bias, epilogue, out);
        }
        // SAFETY: `forward_fused` writes every element of `out`: each
        // sample's planes whole, pooled or not.
        return unsafe { Filled::assume(out) };
    }
    if !epilogue.pool {
        // Its `Filled` vouches for `out`, viewed whole just below.
        let _ = conv2d_forward(geo, x, w, bias, out);
        // SAFETY: `conv2d_forward` wrote every element of `out` (its doc).
        let y = unsafe { &mut *(out as *mut [MaybeUninit<T>] as *mut [T]) };
        if epilogue.relu {
            y.iter_mut().for_each(|v| *v = relu(*v));
        }
        // SAFETY: as above.
        return unsafe { Filled::assume(out) };
    }
    let mut full = vec![MaybeUninit::<T>::uninit(); geo.output_len()];
    let _ = conv2d_forward(geo, x, w, bias, &mut full);
    // SAFETY: `conv2d_forward` wrote every element of `full` (its doc).
    let full = unsafe { &mut *(full.as_mut_slice() as *mut [MaybeUninit<T>] as *mut [T]) };
    if epilogue.relu {
        full.iter_mut().for_each(|v| *v = relu(*v));
    }
    let [h, w] = geo.output;
    let [oh, ow] = epilogue.output_plane(geo.output);
    if oh * ow > 0 {
        for (plane, pooled) in full.chunks_exact(h * w).zip(out.chunks_exact_mut(oh * ow)) {
            for (r, row) in pooled.chunks_exact_mut(ow).enumerate() {
                let top = &plane[2 * r * w..][..2 * ow];
                let bottom = &plane[(2 * r + 1) * w..][..2 * ow];
                max_row_pairs(top, bottom, row);
            }
        }
    }
    // SAFETY: each pooled plane's rows are written whole by `max_row_pairs`.
    unsafe { Filled::assume(out) }
}

/// A fused forward of f32 convolutions at stride one written for AVX-512
/// alone, beside the direct kernel: the tiles with the output channels in
/// the lanes (`conv_channel_lanes.rs`) and Winograd's F(2x2, 3x3)
/// (`conv_winograd.rs`). Both are picked by [`conv2d_forward_fused`] once
/// `conv_direct::applies` and AVX-512F hold, and both spread samples over
/// rayon's workers with a scratch buffer each ([`for_each_sample_scratch`]).
#[cfg(target_arch = "x86_64")]
pub(super) trait Avx512FusedConv {
    /// Whether `geo` runs here, beside `conv_direct::applies` (f32, stride
    /// one) and AVX-512F, both checked by the caller.
    fn applies(geo: &ConvGeometry) -> bool;

    /// `epilogue(conv(x, w) + bias)` for f32 (see [`conv2d_forward_fused`]);
    /// writes every element of `out`.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `ins.geo` is at stride one with
    /// [`Self::applies`] true; `ins.x`, `ins.w` and `out` have its lengths
    /// (`out` the epilogue's).
    unsafe fn forward_fused(ins: FusedInputs<'_>, out: &mut [MaybeUninit<f32>]);
}

/// What an [`Avx512FusedConv`] kernel reads: `epilogue(conv(x, w) + bias)`
/// of the convolution `geo`.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(super) struct FusedInputs<'a> {
    pub geo: &'a ConvGeometry,
    pub x: &'a [f32],
    pub w: &'a [f32],
    pub bias: Option<&'a [f32]>,
    pub epilogue: ConvEpilogue,
}

/// [`Avx512FusedConv::forward_fused`] of one of the kernels, under its
/// contract.
#[cfg(target_arch = "x86_64")]
type FusedForward = unsafe fn(FusedInputs<'_>, &mut [MaybeUninit<f32>]);

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// Each worker's scratch for one sample of an [`Avx512FusedConv`]
    /// kernel (padded planes, transformed patches), kept between calls. The
    /// kernels run one sample at a time on a thread, so one buffer serves
    /// them all.
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`for_each_sample`] for an [`Avx512FusedConv`] kernel: runs
/// `sample(n, out_n, scratch)` on each sample's `out_sample` outputs of
/// `out` (none if there are none), `scratch` the worker's buffer of at
/// least `scratch_len` floats (of what a previous call left).
#[cfg(target_arch = "x86_64")]
pub(super) fn for_each_sample_scratch(
    out: &mut [MaybeUninit<f32>],
    out_sample: usize,
    scratch_len: usize,
    sample: impl Fn(usize, &mut [MaybeUninit<f32>], &mut [f32]) + Send + Sync,
) {
    if out_sample == 0 {
        return;
    }
    for_each_sample(out, out_sample, |(n, y_n)| {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            if scratch.len() < scratch_len {
                scratch.resize(scratch_len, 0.0);
            }
            sample(n, y_n, &mut scratch)
        })
    });
}

/// Runs `sample(n, out_n)` on each sample's `out_sample` outputs of `out`,
/// handed to rayon's workers one sample at a time (work stealing, so a
/// descheduled worker holds up one sample, not a run of them); in order on
/// this thread where there is one sample or one worker.
#[cfg(target_arch = "x86_64")]
pub(super) fn for_each_sample<T: Send>(
    out: &mut [T],
    out_sample: usize,
    sample: impl Fn((usize, &mut [T])) + Send + Sync,
) {
    use rayon::prelude::*;
    if out.len() > out_sample && rayon::current_num_threads() > 1 {
        out.par_chunks_mut(out_sample)
            .with_max_len(1)
            .enumerate()
            .for_each(sample);
    } else {
        out.chunks_mut(out_sample).enumerate().for_each(sample);
    }
}

/// `n` items cut into runs `(first, count)` of at most `max`, as even as
/// the count allows (14 as 5, 5, 4 rather than 6, 6, 2: a narrow register
/// tile has too few accumulators to hide the FMA latency).
#[cfg(target_arch = "x86_64")]
pub(super) fn even_parts(n: usize, max: usize) -> Vec<(usize, usize)> {
    let parts = n.div_ceil(max);
    let mut all = Vec::with_capacity(parts);
    let mut first = 0;
    for k in 0..parts {
        let count = n / parts + usize::from(k < n % parts);
        all.push((first, count));
        first += count;
    }
    all
}

/// `Relu`'s rule (`ops::unary`): NaN and -0 pass.
#[inline(always)]
fn relu<T: Element>(x: T) -> T {
    if x < T::zero() {
        T::zero()
    } else {
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::nn::pool::{max_pool2d_values, Axis, Plan2d};
    use crate::kernels::testing::{conv_geometry, filled};

    /// The convolution, the ReLU and the pooling one after another.
    fn composed<T: Element>(
        geo: &ConvGeometry,
        x: &[T],
        w: &[T],
        b: &[T],
        epilogue: ConvEpilogue,
    ) -> Vec<T> {
        let mut y = filled(geo.output_len(), |o| conv2d_forward(geo, x, w, Some(b), o));
        if epilogue.relu {
            y.iter_mut().for_each(|v| *v = relu(*v));
        }
        if !epilogue.pool {
            return y;
        }
        let [h, w] = geo.output;
        let plan = Plan2d {
            rows: Axis::sliding(h, 2, 2, 0, 1, h / 2, false),
            cols: Axis::sliding(w, 2, 2, 0, 1, w / 2, false),
        };
        let planes = geo.batch * geo.out_channels;
        filled(epilogue.output_len(geo), |o| {
            max_pool2d_values(&y, planes, &plan, o)
        })
    }

    fn values<T: Element>(n: usize, a: f64, b: f64) -> Vec<T> {
        (0..n)
            .map(|i| T::from_f64((a * i as f64 + b).sin()))
            .collect()
    }

    /// Every epilogue, on the direct kernels (f32 at stride one, on an
    /// AVX-512 CPU: pixels or, 32 input channels deep, output channels in
    /// the lanes) and on the others (f64, a stride): the same bits as
    /// the ops one after another, with a NaN, -0 and ties in the input,
    /// odd output sizes (the pooling drops the last row and column) and
    /// rows of more than one vector of pooled outputs.
    #[test]
    fn fused_epilogues_give_the_composed_bits() {
        let geometries = [
            conv_geometry(3, [1, 32, 1], [28, 28], [3, 3], [1, 1], [1, 1], [1, 1]),
            // Deep enough for the channel-lane tiles (`conv_channel_lanes`).
            conv_geometry(2, [32, 40, 1], [14, 15], [3, 3], [1, 1], [1, 1], [1, 1]),
            conv_geometry(2, [8, 12, 2], [13, 70], [3, 3], [1, 1], [1, 1], [1, 1]),
            conv_geometry(2, [5, 9, 1], [9, 11], [2, 3], [1, 1], [0, 1], [1, 2]),
            conv_geometry(2, [3, 4, 1], [12, 15], [3, 3], [2, 2], [1, 1], [1, 1]),
        ];
        for geo in geometries {
            for (relu, pool) in [(true, true), (true, false), (false, true), (false, false)] {
                let epilogue = ConvEpilogue { relu, pool };
                let mut x: Vec<f32> = values(geo.input_len(), 0.37, 0.1);
                x[5] = f32::NAN;
                x[7] = -0.0;
                x[8] = x[9];
                let w: Vec<f32> = values(geo.weight_len(), 0.23, 0.3);
                let b: Vec<f32> = values(geo.out_channels, 1.3, 0.2);
                let want = composed(&geo, &x, &w, &b, epilogue);
                let got = filled(epilogue.output_len(&geo), |o| {
                    conv2d_forward_fused(&geo, &x, &w, Some(&b), epilogue, ConvSummation::Exact, o)
                });
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{epilogue:?} {geo:?}");
                assert!(got.iter().any(|v| v.is_nan()) && got.iter().any(|&v| v > 0.0));
                let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
                let w64: Vec<f64> = w.iter().map(|&v| f64::from(v)).collect();
                let b64: Vec<f64> = b.iter().map(|&v| f64::from(v)).collect();
                let want = composed(&geo, &x64, &w64, &b64, epilogue);
                let got = filled(epilogue.output_len(&geo), |o| {
                    conv2d_forward_fused(
                        &geo,
                        &x64,
                        &w64,
                        Some(&b64),
                        epilogue,
                        ConvSummation::Exact,
                        o,
                    )
                });
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "f64 {epilogue:?} {geo:?}");
            }
        }
    }

    /// A ReLU keeps NaN and -0 (as `Relu`'s rule), which `max(x, 0)` would not.
    #[test]
    fn relu_keeps_nan_and_negative_zero() {
        let geo = conv_geometry(1, [1, 1, 1], [1, 20], [1, 1], [1, 1], [0, 0], [1, 1]);
        let mut x = vec![-1.0f32; 20];
        x[3] = f32::NAN;
        x[4] = -0.0;
        x[5] = 2.0;
        let epilogue = ConvEpilogue {
            relu: true,
            pool: false,
        };
        let y = filled(20, |o| {
            conv2d_forward_fused(&geo, &x, &[1.0], None, epilogue, ConvSummation::Winograd, o)
        });
        assert!(y[3].is_nan());
        assert_eq!(y[4].to_bits(), (-0.0f32).to_bits());
        assert_eq!((y[0], y[5]), (0.0, 2.0));
    }
}

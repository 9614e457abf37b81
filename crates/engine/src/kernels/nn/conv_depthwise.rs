//! The forward of a depthwise convolution (each input channel its own
//! group: MobileNet's and EfficientNet's 3x3 and 5x5 layers), summed
//! directly. On im2col and `gemm` each output channel was a product of one
//! weight row by a `[kh * kw, OH * OW]` matrix written for it: the copy
//! cost as much as the sums, and a one-row product runs far below the
//! kernel's speed. Here each input plane is copied once with its padding
//! around it; then each output row adds, per tap, the weight times a run
//! of one padded row (contiguous at stride 1, so it vectorises), or, for
//! rows too short to vectorise, each output sums its taps in a register.
//!
//! Sums: the taps in order (row of the kernel, then column), then the
//! bias, as the im2col path adds it.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::conv::{fill, ConvGeometry, PARALLEL_WORK};
use crate::tensor::Element;

/// Whether the forward of `geo` runs here: every group has one input
/// channel (and any number of output channels, a channel multiplier).
pub(super) fn applies(geo: &ConvGeometry) -> bool {
    geo.groups > 1 && geo.cin_g() == 1
}

/// `y = conv(x, w) + bias` for a depthwise `geo` ([`applies`]); writes
/// every element of `out`.
pub(super) fn forward<T: Element>(
    geo: &ConvGeometry,
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    out: &mut [MaybeUninit<T>],
) {
    let [oh, ow] = geo.output;
    let plane = oh * ow;
    if plane == 0 {
        return;
    }
    let per_plane = |padded: &mut Vec<T>, (p, y): (usize, &mut [MaybeUninit<T>])| {
        let (n, oc) = (p / geo.out_channels, p % geo.out_channels);
        let ic = oc / (geo.out_channels / geo.groups);
        let in_plane = geo.input[0] * geo.input[1];
        let x_p = &x[(n * geo.in_channels + ic) * in_plane..][..in_plane];
        let taps = geo.kernel[0] * geo.kernel[1];
        let w_p = &w[oc * taps..][..taps];
        let y = fill(y, T::zero());
        let width = pad_plane(geo, x_p, padded);
        // Compiled for the CPU's widest vectors: the crate's baseline is
        // SSE2, whose 4 lanes left most of a 14-wide row to scalar code.
        crate::kernels::simd::wide(
            #[inline(always)]
            || sum_taps(geo, padded, width, w_p, y),
        );
        if let Some(b) = bias {
            y.iter_mut().for_each(|v| *v += b[oc]);
        }
    };
    if geo.work() >= PARALLEL_WORK && rayon::current_num_threads() > 1 {
        // Tasks of whole planes, a few per worker: one plane of a late
        // MobileNet layer is 49 outputs, too little work for a task.
        let planes = out.len() / plane;
        let per_task = planes.div_ceil(8 * rayon::current_num_threads()).max(1);
        out.par_chunks_mut(plane)
            .enumerate()
            .with_min_len(per_task)
            .for_each_init(Vec::new, per_plane);
    } else {
        let mut padded = Vec::new();
        for item in out.chunks_mut(plane).enumerate() {
            per_plane(&mut padded, item);
        }
    }
}

/// Copies input plane `x_p` into `padded` with `geo.pad` zeros on each
/// side, so that every tap reads inside it; returns its row length.
fn pad_plane<T: Element>(geo: &ConvGeometry, x_p: &[T], padded: &mut Vec<T>) -> usize {
    let [h, w] = geo.input;
    let [py, px] = geo.pad;
    // Rows and columns the windows reach (the far side's padding is
    // whatever the output size leaves), and at least the input's.
    let reach =
        |i: usize| (geo.output[i] - 1) * geo.stride[i] + (geo.kernel[i] - 1) * geo.dilation[i] + 1;
    let (rows, width) = (reach(0).max(h + py), reach(1).max(w + px));
    padded.clear();
    padded.resize(rows * width, T::zero());
    for (r, src) in x_p.chunks_exact(w).enumerate() {
        padded[(r + py) * width + px..][..w].copy_from_slice(src);
    }
    width
}

/// Adds the taps over the padded plane into `y`: by output row, a tap at
/// a time, where rows are long enough to vectorise; by output element,
/// the taps summed in a register, where they are not.
#[inline(always)]
fn sum_taps<T: Element>(geo: &ConvGeometry, padded: &[T], width: usize, w_p: &[T], y: &mut [T]) {
    let [kh, kw] = geo.kernel;
    let [sy, sx] = geo.stride;
    let [dy, dx] = geo.dilation;
    let ow = geo.output[1];
    for (oy, row) in y.chunks_exact_mut(ow).enumerate() {
        if ow >= 4 {
            for ky in 0..kh {
                let base = (oy * sy + ky * dy) * width;
                for kx in 0..kw {
                    let wv = w_p[ky * kw + kx];
                    let src = &padded[base + kx * dx..];
                    if sx == 1 {
                        for (o, &v) in row.iter_mut().zip(&src[..ow]) {
                            *o += wv * v;
                        }
                    } else {
                        for (o, &v) in row.iter_mut().zip(src.iter().step_by(sx)) {
                            *o += wv * v;
                        }
                    }
                }
            }
        } else {
            for (ox, o) in row.iter_mut().enumerate() {
                let mut acc = T::zero();
                for ky in 0..kh {
                    let base = (oy * sy + ky * dy) * width + ox * sx;
                    let taps = &w_p[ky * kw..][..kw];
                    for (kx, &wv) in taps.iter().enumerate() {
                        acc += wv * padded[base + kx * dx];
                    }
                }
                *o = acc;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testing::filled;

    /// The depthwise sums against the direct definition, on strides,
    /// dilations, padding, a channel multiplier and a batch.
    #[test]
    fn depthwise_sums_match_the_definition() {
        // `end`: padding after the last row and column (the begin's, or
        // more, as ONNX's SAME_UPPER gives).
        for (stride, pad, end, dil, mult, k) in [
            ([1, 1], [1, 1], [1, 1], [1, 1], 1, [3, 3]),
            ([2, 2], [2, 2], [2, 2], [1, 1], 1, [5, 5]),
            ([2, 1], [0, 3], [0, 3], [2, 1], 2, [3, 4]),
            ([1, 1], [0, 0], [2, 1], [1, 1], 1, [3, 3]),
        ] {
            let (n, c, hw) = (2, 3, [7, 9]);
            let out_channels = c * mult;
            let output =
                [0, 1].map(|i| (hw[i] + pad[i] + end[i] - dil[i] * (k[i] - 1) - 1) / stride[i] + 1);
            let geo = ConvGeometry {
                batch: n,
                in_channels: c,
                out_channels,
                groups: c,
                input: hw,
                output,
                kernel: k,
                stride,
                pad,
                dilation: dil,
            };
            let x: Vec<f64> = (0..n * c * hw[0] * hw[1])
                .map(|i| ((i * 37 % 17) as f64) - 8.0)
                .collect();
            let w: Vec<f64> = (0..out_channels * k[0] * k[1])
                .map(|i| ((i * 11 % 7) as f64) - 3.0)
                .collect();
            let b: Vec<f64> = (0..out_channels).map(|i| i as f64 * 0.5).collect();
            let got = filled(n * out_channels * output[0] * output[1], |out| {
                forward(&geo, &x, &w, Some(&b), out);
                // SAFETY: `forward` writes every element of `out` (its doc).
                unsafe { crate::tensor::Filled::assume(out) }
            });
            let mut want = vec![0.0; got.len()];
            for (i, v) in want.iter_mut().enumerate() {
                let ox = i % output[1];
                let oy = i / output[1] % output[0];
                let oc = i / (output[0] * output[1]) % out_channels;
                let s = i / (output[0] * output[1] * out_channels);
                let ic = oc / mult;
                let mut acc = 0.0;
                for ky in 0..k[0] {
                    for kx in 0..k[1] {
                        let iy = (oy * stride[0] + ky * dil[0]) as isize - pad[0] as isize;
                        let ix = (ox * stride[1] + kx * dil[1]) as isize - pad[1] as isize;
                        if iy >= 0 && ix >= 0 && (iy as usize) < hw[0] && (ix as usize) < hw[1] {
                            acc += w[(oc * k[0] + ky) * k[1] + kx]
                                * x[((s * c + ic) * hw[0] + iy as usize) * hw[1] + ix as usize];
                        }
                    }
                }
                *v = acc + b[oc];
            }
            assert_eq!(
                got, want,
                "stride {stride:?} pad {pad:?} dilation {dil:?} x{mult}"
            );
        }
    }
}

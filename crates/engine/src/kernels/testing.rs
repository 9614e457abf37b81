//! What the kernels' unit tests share: reading back an output a kernel
//! filled, deterministic sample values, convolution geometries and a
//! fused convolution's f64 definition.

use std::mem::MaybeUninit;

use super::nn::attention::Geometry;
use super::nn::conv::ConvGeometry;
use super::nn::conv_fused::ConvEpilogue;
use crate::tensor::{Element, Filled};

/// The elements of `out`, which the kernel under test filled.
pub(crate) fn assume_filled<T>(out: Vec<MaybeUninit<T>>) -> Vec<T> {
    out.into_iter()
        // SAFETY: the kernels under test write every element of `out`
        // (what these tests check; Miri runs them).
        .map(|v| unsafe { v.assume_init() })
        .collect()
}

/// Runs the kernel `f` on a fresh output of `len` elements and returns them.
pub(crate) fn filled<T: Element>(
    len: usize,
    f: impl for<'o> FnOnce(&'o mut [MaybeUninit<T>]) -> Filled<'o>,
) -> Vec<T> {
    let mut out = vec![MaybeUninit::uninit(); len];
    let _filled = f(&mut out);
    assume_filled(out)
}

/// Deterministic values in about `[-scale, scale]` (xorshift from `seed`).
pub(crate) fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// An additive `[l, s]` attention mask of values in about `[-3, 3]` with
/// the hard cases: key 0 hidden from every row, row 1 (when there are
/// two) fully masked, and a finite large negative on every third row's
/// last key.
pub(crate) fn hard_mask(l: usize, s: usize, seed: u64) -> Vec<f32> {
    let mut m = values(l * s, seed, 3.0);
    for i in 0..l {
        m[i * s] = f32::NEG_INFINITY;
        if s > 2 && i % 3 == 0 {
            m[i * s + s - 1] = -1e30;
        }
    }
    if l > 1 {
        m[s..2 * s].fill(f32::NEG_INFINITY);
    }
    m
}

/// `batch` attention heads of `l` queries and `s` keys, query and key
/// dims `e` and value dims `ev`, scaled by `1 / sqrt(e)`, without dropout:
/// what the tiled attention kernels' tests run.
pub(crate) fn attention_heads(batch: usize, [l, s, e, ev]: [usize; 4], causal: bool) -> Geometry {
    Geometry {
        batch,
        l,
        s,
        e,
        ev,
        scale: 1.0 / (e as f64).sqrt(),
        causal,
        dropout: None,
    }
}

/// Runs `check(l, s, e, e, causal, masked)` for every head dim `e` of
/// `dims` and key count `s` of `keys`: unmasked, masked, and causal (with
/// `l = s` queries; 37 otherwise). The tiled attention kernels' sweep.
pub(crate) fn attention_sweep(
    dims: &[usize],
    keys: &[usize],
    check: impl Fn(usize, usize, usize, usize, bool, bool),
) {
    for &e in dims {
        for &s in keys {
            for (causal, masked) in [(false, false), (false, true), (true, false)] {
                let l = if causal { s } else { 37 };
                check(l, s, e, e, causal, masked);
            }
        }
    }
}

/// A convolution geometry with PyTorch's output size, from `[in_channels,
/// out_channels, groups]` and the per-dimension settings.
pub(crate) fn conv_geometry(
    batch: usize,
    [in_channels, out_channels, groups]: [usize; 3],
    input: [usize; 2],
    kernel: [usize; 2],
    stride: [usize; 2],
    pad: [usize; 2],
    dilation: [usize; 2],
) -> ConvGeometry {
    let out =
        |i: usize| (input[i] + 2 * pad[i] - dilation[i] * (kernel[i] - 1) - 1) / stride[i] + 1;
    ConvGeometry {
        batch,
        in_channels,
        out_channels,
        groups,
        input,
        output: [out(0), out(1)],
        kernel,
        stride,
        pad,
        dilation,
    }
}

/// Two-sample 3x3 convolutions at stride one, one for each channel pair
/// `(in, out)`, plane and padding whose padded plane holds the kernel:
/// what the fused AVX-512 kernels' tests run.
pub(crate) fn stride_one_3x3(
    channels: &[(usize, usize)],
    planes: &[[usize; 2]],
    pads: &[usize],
) -> Vec<ConvGeometry> {
    let mut all = Vec::new();
    for &(cin, cout) in channels {
        for &hw in planes {
            for &pad in pads {
                if hw[0] + 2 * pad >= 3 && hw[1] + 2 * pad >= 3 {
                    let (one, pad) = ([1, 1], [pad, pad]);
                    all.push(conv_geometry(2, [cin, cout, 1], hw, [3, 3], one, pad, one));
                }
            }
        }
    }
    all
}

/// `epilogue(conv(x, w) + b)` in f64 from the definitions, and each
/// output's sum of absolute terms (pooled: the largest of its window's),
/// the scale of its rounding error.
pub(crate) fn fused_conv_f64(
    geo: &ConvGeometry,
    x: &[f32],
    w: &[f32],
    b: &[f32],
    epilogue: ConvEpilogue,
) -> (Vec<f64>, Vec<f64>) {
    let (cin, cout) = (geo.in_channels / geo.groups, geo.out_channels / geo.groups);
    let ([h, wd], [oh, ow], [kh, kw]) = (geo.input, geo.output, geo.kernel);
    let mut y = vec![0.0f64; geo.batch * geo.out_channels * oh * ow];
    let mut mag = vec![0.0f64; y.len()];
    for n in 0..geo.batch {
        for o in 0..geo.out_channels {
            let g = o / cout;
            for oy in 0..oh {
                for ox in 0..ow {
                    let (mut s, mut m) = (f64::from(b[o]), f64::from(b[o]).abs());
                    for i in 0..cin {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let at = |d: usize, o: usize, k: usize| {
                                    (o * geo.stride[d] + k * geo.dilation[d]) as isize
                                        - geo.pad[d] as isize
                                };
                                let (sy, sx) = (at(0, oy, ky), at(1, ox, kx));
                                if sy < 0 || sx < 0 || sy >= h as isize || sx >= wd as isize {
                                    continue;
                                }
                                let xv = f64::from(
                                    x[((n * geo.in_channels + g * cin + i) * h + sy as usize) * wd
                                        + sx as usize],
                                );
                                let wv = f64::from(w[((o * cin + i) * kh + ky) * kw + kx]);
                                s += xv * wv;
                                m += (xv * wv).abs();
                            }
                        }
                    }
                    let at = ((n * geo.out_channels + o) * oh + oy) * ow + ox;
                    y[at] = if epilogue.relu { s.max(0.0) } else { s };
                    mag[at] = m;
                }
            }
        }
    }
    if !epilogue.pool {
        return (y, mag);
    }
    let (ph, pw) = (oh / 2, ow / 2);
    let (mut pooled, mut pooled_mag) = (Vec::new(), Vec::new());
    for (plane, plane_mag) in y.chunks_exact(oh * ow).zip(mag.chunks_exact(oh * ow)) {
        for r in 0..ph {
            for c in 0..pw {
                let at = |dy: usize, dx: usize| (2 * r + dy) * ow + 2 * c + dx;
                let window = [at(0, 0), at(0, 1), at(1, 0), at(1, 1)];
                pooled.push(window.iter().map(|&i| plane[i]).fold(f64::MIN, f64::max));
                pooled_mag.push(window.iter().map(|&i| plane_mag[i]).fold(0.0, f64::max));
            }
        }
    }
    (pooled, pooled_mag)
}

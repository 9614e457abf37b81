//! Inference forward of an f32 stride-one convolution on AVX-512 with the
//! output channels in the vector lanes, the ReLU and the 2x2 max pooling of
//! [`super::conv_fused`] done on the tile's registers.
//!
//! [`super::conv_direct`] puts 16 output pixels of one row in the lanes: on
//! the 14- and 7-wide planes of a small CNN a row is one vector with lanes
//! idle, and each tap loads 3 pixel vectors and broadcasts 8 weights for 24
//! multiply-adds, more loads than the core issues beside two FMAs a cycle.
//! Here a tile holds [`BLOCK`] output channels (two vectors, weights re-laid
//! once per call so each tap's are two aligned loads) by up to 2 rows x
//! [`MAX_COLS`] output pixels, each pixel broadcast once for both vectors:
//! 14 loads for 24 multiply-adds, whatever the row's width. A 2x2 pooling
//! window is then four of the tile's accumulators, pooled in registers; only
//! the pooled values are written, transposed through a few bytes of stack.
//!
//! Every output is summed in [`super::conv_direct`]'s order (input channels,
//! then taps row-major, one FMA each from zero, the bias last), so the bits
//! are the direct kernel's and so the composed ops' (`conv_fused`'s test).
//! Samples are handed to rayon's workers one at a time (work stealing), not
//! as one run per worker, so a descheduled worker holds up one sample.
//! Inference only: `conv2d_forward_fused` is its one caller.

use std::mem::MaybeUninit;

use super::conv::ConvGeometry;
use super::conv_direct::beats;
use super::conv_fused::{
    even_parts, for_each_sample_scratch, Avx512FusedConv, ConvEpilogue, FusedInputs,
};

/// f32 lanes in an AVX-512 vector.
const LANES: usize = 16;
/// Output channels in one tile: two vectors.
const BLOCK: usize = 2 * LANES;
/// Output columns in one tile: 2 rows x 6 columns x 2 vectors are 24
/// accumulators, leaving registers for two weight vectors and a broadcast.
const MAX_COLS: usize = 6;
/// Input channels times taps below which a tile's epilogue (a transpose
/// through the stack) costs more than its products save: a first layer's
/// one or three channels stay on [`super::conv_direct`] (with the MNIST
/// CNN's conv 1->32 here the whole run took 1.04-1.22x as long).
const MIN_DEPTH: usize = 64;

/// The geometry of one group's correlation at stride one.
#[derive(Clone, Copy, Debug)]
struct Plan {
    cin: usize,
    cout: usize,
    src: [usize; 2],
    out: [usize; 2],
    /// The padded plane: the output plus the kernel's reach.
    padded: [usize; 2],
    /// Zero rows and columns before the source in the padded plane.
    before: [usize; 2],
}

impl Plan {
    fn new(geo: &ConvGeometry) -> Self {
        let reach = |d: usize| (geo.kernel[d] - 1) * geo.dilation[d];
        Plan {
            cin: geo.in_channels / geo.groups,
            cout: geo.out_channels / geo.groups,
            src: geo.input,
            out: geo.output,
            padded: [geo.output[0] + reach(0), geo.output[1] + reach(1)],
            before: geo.pad,
        }
    }

    fn plane(&self) -> usize {
        self.padded[0] * self.padded[1]
    }

    fn blocks(&self) -> usize {
        self.cout.div_ceil(BLOCK)
    }
}

/// One group's weights (`[cout][cin][taps]`) as the tiles read them:
/// `[block][cin][tap][BLOCK]`, zero past the last output channel, starting
/// on a 64-byte boundary.
struct Packed {
    data: Vec<f32>,
    start: usize,
}

impl Packed {
    fn new(w: &[f32], p: &Plan, taps: usize) -> Self {
        let len = p.blocks() * p.cin * taps * BLOCK;
        let mut data = vec![0.0f32; len + LANES];
        let start = data.as_ptr().align_offset(64).min(LANES);
        let dst = &mut data[start..][..len];
        for o in 0..p.cout {
            let (b, j) = (o / BLOCK, o % BLOCK);
            for i in 0..p.cin {
                for t in 0..taps {
                    dst[((b * p.cin + i) * taps + t) * BLOCK + j] = w[(o * p.cin + i) * taps + t];
                }
            }
        }
        Packed { data, start }
    }

    fn block(&self, b: usize, p: &Plan, taps: usize) -> *const f32 {
        self.data[self.start + b * p.cin * taps * BLOCK..].as_ptr()
    }
}

/// The kernel of this file.
pub(super) struct ChannelLanes;

impl Avx512FusedConv for ChannelLanes {
    /// As `conv_direct::applies` (a kernel larger than 1x1 too), with
    /// enough input channels times taps per output ([`MIN_DEPTH`]).
    fn applies(geo: &ConvGeometry) -> bool {
        let cin = geo.in_channels / geo.groups;
        cin * geo.kernel[0] * geo.kernel[1] >= MIN_DEPTH && geo.out_channels > 0
    }

    unsafe fn forward_fused(ins: FusedInputs<'_>, out: &mut [MaybeUninit<f32>]) {
        let (geo, x, w, bias, epilogue) = (ins.geo, ins.x, ins.w, ins.bias, ins.epilogue);
        let p = Plan::new(geo);
        let taps: Vec<usize> = (0..geo.kernel[0])
            .flat_map(|ky| {
                (0..geo.kernel[1])
                    .map(move |kx| ky * geo.dilation[0] * p.padded[1] + kx * geo.dilation[1])
            })
            .collect();
        let packed: Vec<Packed> = w
            .chunks_exact(p.cout * p.cin * taps.len())
            .map(|w_g| Packed::new(w_g, &p, taps.len()))
            .collect();
        let [ph, pw] = epilogue.output_plane(p.out);
        let out_sample = geo.groups * p.cout * ph * pw;
        let src_sample = geo.groups * p.cin * p.src[0] * p.src[1];
        // Each worker's padded planes of one sample.
        let scratch_len = p.cin * p.plane();
        for_each_sample_scratch(out, out_sample, scratch_len, |n, y_n, buf| {
            for g in 0..geo.groups {
                let s = &x[n * src_sample + g * p.cin * p.src[0] * p.src[1]..]
                    [..p.cin * p.src[0] * p.src[1]];
                // SAFETY: the caller checked AVX-512F; `buf` holds `cin` planes.
                unsafe { pad(&p, s, buf) };
                let y_g = &mut y_n[g * p.cout * ph * pw..][..p.cout * ph * pw];
                let bias_g = bias.map(|b| &b[g * p.cout..][..p.cout]);
                // SAFETY: as above; `buf` holds the padded planes of `p`.
                unsafe { correlate(&p, buf, &taps, &packed[g], bias_g, epilogue, y_g) };
            }
        });
    }
}

/// Copies the `cin` source planes of `src` into the zero-padded planes at
/// the start of `dst`, each padded row written once in whole vectors, its
/// source columns loaded under a mask (a `memcpy` call per 14-float row and
/// a `memset` per plane cost more than the copy).
///
/// # Safety
/// The CPU has AVX-512F; `dst` holds at least `p.cin * p.plane()` floats.
#[target_feature(enable = "avx512f")]
unsafe fn pad(p: &Plan, src: &[f32], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let [hp, wp] = p.padded;
    let [sh, sw] = p.src;
    let [top, left] = p.before;
    let cols = sw.min(wp.saturating_sub(left));
    let rows = sh.min(hp.saturating_sub(top));
    assert!(dst.len() >= p.cin * hp * wp && src.len() >= p.cin * sh * sw);
    let lanes = |lo: usize, hi: usize| (((1u32 << hi) - 1) & !((1u32 << lo.min(hi)) - 1)) as u16;
    let zero = _mm512_setzero_ps();
    for ci in 0..p.cin {
        for r in 0..hp {
            let d = dst[(ci * hp + r) * wp..].as_mut_ptr();
            let sy = r.wrapping_sub(top);
            let s = if sy < rows {
                src[(ci * sh + sy) * sw..].as_ptr()
            } else {
                src.as_ptr()
            };
            for c0 in (0..wp).step_by(LANES) {
                let n = (wp - c0).min(LANES);
                // The lanes of padded columns `c0..c0 + n` that hold source
                // columns (`left..left + cols`) on a source row.
                let m = if sy < rows {
                    lanes(
                        left.saturating_sub(c0).min(n),
                        (left + cols).saturating_sub(c0).min(n),
                    )
                } else {
                    0
                };
                // SAFETY: the lanes under `m` read columns
                // `c0 + lane - left < cols` of source row `sy < rows`; the
                // store stays in the padded row.
                unsafe {
                    let v = if m == 0 {
                        zero
                    } else {
                        _mm512_maskz_loadu_ps(m, s.wrapping_add(c0).wrapping_sub(left))
                    };
                    _mm512_mask_storeu_ps(d.add(c0), lanes(0, n), v);
                }
            }
        }
    }
}

/// Writes one group's output planes `y` (pooled if `epilogue.pool`) from the
/// padded planes `x`.
///
/// # Safety
/// The CPU has AVX-512F; `x` holds `p.cin` padded planes, `packed` and
/// `taps` come from `p`, `y` holds `p.cout` output planes of the epilogue.
#[target_feature(enable = "avx512f")]
unsafe fn correlate(
    p: &Plan,
    x: &[f32],
    taps: &[usize],
    packed: &Packed,
    bias: Option<&[f32]>,
    epilogue: ConvEpilogue,
    y: &mut [MaybeUninit<f32>],
) {
    let [oh, ow] = p.out;
    let wp = p.padded[1];
    let [ph, pw] = epilogue.output_plane(p.out);
    assert!(x.len() >= p.cin * p.plane());
    assert_eq!(y.len(), p.cout * ph * pw);
    // The rows and columns the tiles cover: a pooling window's, or all.
    let (rows, cols) = if epilogue.pool {
        (2 * ph, 2 * pw)
    } else {
        (oh, ow)
    };
    let col_tiles = column_tiles(cols, epilogue.pool);
    let y = y.as_mut_ptr().cast::<f32>();
    for b in 0..p.blocks() {
        let channels = (p.cout - b * BLOCK).min(BLOCK);
        let mut bias_b = [0.0f32; BLOCK];
        if let Some(bias) = bias {
            bias_b[..channels].copy_from_slice(&bias[b * BLOCK..][..channels]);
        }
        let w_b = packed.block(b, p, taps.len());
        let out = Out {
            y: y.wrapping_add(b * BLOCK * ph * pw),
            channels,
            plane: ph * pw,
            row: pw,
            bias: &bias_b,
            epilogue,
        };
        for r0 in (0..rows).step_by(2) {
            for &(c0, c) in &col_tiles {
                let x_t = x[r0 * wp + c0..].as_ptr();
                let two = r0 + 1 < rows;
                // SAFETY: the tile's taps read inside the padded planes (the
                // output plus the kernel's reach); `w_b` is its block's
                // packing; `out` addresses `y`'s planes.
                unsafe {
                    match (two, c) {
                        (true, 6) => run_tile::<2, 6>(x_t, p, wp, taps, w_b, &out, r0, c0),
                        (true, 5) => run_tile::<2, 5>(x_t, p, wp, taps, w_b, &out, r0, c0),
                        (true, 4) => run_tile::<2, 4>(x_t, p, wp, taps, w_b, &out, r0, c0),
                        (true, 3) => run_tile::<2, 3>(x_t, p, wp, taps, w_b, &out, r0, c0),
                        (true, 2) => run_tile::<2, 2>(x_t, p, wp, taps, w_b, &out, r0, c0),
                        (true, _) => run_tile::<2, 1>(x_t, p, wp, taps, w_b, &out, r0, c0),
                        (false, 6) => run_tile::<1, 6>(x_t, p, wp, taps, w_b, &out, r0, c0),
                        (false, 5) => run_tile::<1, 5>(x_t, p, wp, taps, w_b, &out, r0, c0),
                        (false, 4) => run_tile::<1, 4>(x_t, p, wp, taps, w_b, &out, r0, c0),
                        (false, 3) => run_tile::<1, 3>(x_t, p, wp, taps, w_b, &out, r0, c0),
                        (false, 2) => run_tile::<1, 2>(x_t, p, wp, taps, w_b, &out, r0, c0),
                        (false, _) => run_tile::<1, 1>(x_t, p, wp, taps, w_b, &out, r0, c0),
                    }
                }
            }
        }
    }
}

/// A row of `cols` output columns cut into tiles `(first column, width)` of
/// at most [`MAX_COLS`] ([`even_parts`]), even widths where they are pooled.
fn column_tiles(cols: usize, pool: bool) -> Vec<(usize, usize)> {
    let unit = if pool { 2 } else { 1 };
    even_parts(cols / unit, MAX_COLS / unit)
        .into_iter()
        .map(|(first, count)| (first * unit, count * unit))
        .collect()
}

/// Where and how a block's tiles write: `channels` output planes of `plane`
/// floats with rows of `row`, from `y`.
struct Out<'a> {
    y: *mut f32,
    channels: usize,
    plane: usize,
    row: usize,
    bias: &'a [f32; BLOCK],
    epilogue: ConvEpilogue,
}

/// One tile: its sums ([`tile_sums`]), then the bias, the ReLU and the
/// pooling on the registers, the results transposed through the stack into
/// the output planes.
///
/// # Safety
/// As [`correlate`]'s, for the tile at output row `r0`, column `c0`.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn run_tile<const R: usize, const C: usize>(
    x: *const f32,
    p: &Plan,
    wp: usize,
    taps: &[usize],
    w: *const f32,
    out: &Out<'_>,
    r0: usize,
    c0: usize,
) {
    use std::arch::x86_64::*;
    let mut acc = [[[_mm512_setzero_ps(); 2]; C]; R];
    // SAFETY: as this function's contract.
    unsafe { tile_sums::<R, C>(x, p.cin, p.plane(), wp, taps, w, &mut acc) };
    let zero = _mm512_setzero_ps();
    // SAFETY: `out.bias` holds BLOCK floats.
    let bias = unsafe {
        [
            _mm512_loadu_ps(out.bias.as_ptr()),
            _mm512_loadu_ps(out.bias.as_ptr().add(LANES)),
        ]
    };
    let finish = |v: __m512, h: usize| {
        let v = _mm512_add_ps(v, bias[h]);
        if out.epilogue.relu {
            // `Relu`'s rule, `x < 0 ? 0 : x`: NaN and -0 pass.
            _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, zero), zero)
        } else {
            v
        }
    };
    // Each written pixel's BLOCK channels, then its offset in a plane.
    let mut staged = [[0.0f32; BLOCK]; MAX_COLS * 2];
    let mut at = [0usize; MAX_COLS * 2];
    let mut n = 0;
    if out.epilogue.pool {
        for pc in 0..C / 2 {
            for (h, dst) in staged[n].chunks_exact_mut(LANES).enumerate() {
                // The pooling op's tournament (`conv_direct::max_pool_2x2`):
                // each row's pair, then the rows.
                let pair = |r: usize| {
                    let (a, b) = (
                        finish(acc[r][2 * pc][h], h),
                        finish(acc[r][2 * pc + 1][h], h),
                    );
                    _mm512_mask_mov_ps(a, beats(b, a), b)
                };
                let (m1, m2) = (pair(0), pair(R - 1));
                let m = _mm512_mask_mov_ps(m1, beats(m2, m1), m2);
                // SAFETY: `dst` holds LANES floats.
                unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), m) };
            }
            at[n] = (r0 / 2) * out.row + c0 / 2 + pc;
            n += 1;
        }
    } else {
        for (r, acc_r) in acc.iter().enumerate() {
            for (c, acc_rc) in acc_r.iter().enumerate() {
                for (h, (&v, dst)) in acc_rc
                    .iter()
                    .zip(staged[n].chunks_exact_mut(LANES))
                    .enumerate()
                {
                    // SAFETY: `dst` holds LANES floats.
                    unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), finish(v, h)) };
                }
                at[n] = (r0 + r) * out.row + c0 + c;
                n += 1;
            }
        }
    }
    for (&at, pixel) in at.iter().zip(&staged).take(n) {
        for (j, &v) in pixel.iter().take(out.channels).enumerate() {
            // SAFETY: channel `j` of the block exists and pixel `at` lies
            // in its plane.
            unsafe { *out.y.add(j * out.plane + at) = v };
        }
    }
}

/// The sums of one tile: `R` rows by `C` columns of output pixels from `x`
/// (the padded planes at the tile's first pixel), by the two vectors of the
/// block's channels, over every input channel and tap in order.
///
/// # Safety
/// The CPU has AVX-512F; every tap of every pixel of the tile lies in each
/// of the `cin` planes of `plane` floats; `w` holds `cin * taps` pairs of
/// vectors.
#[target_feature(enable = "avx512f")]
// Not inlined: alone, the accumulators keep registers of their own
// (ARCHITECTURE.md, PERF: "f32 convolutions at stride one").
#[inline(never)]
unsafe fn tile_sums<const R: usize, const C: usize>(
    x: *const f32,
    cin: usize,
    plane: usize,
    wp: usize,
    taps: &[usize],
    w: *const f32,
    acc: &mut [[[std::arch::x86_64::__m512; 2]; C]; R],
) {
    use std::arch::x86_64::*;
    let mut a = *acc;
    let mut w = w;
    // SAFETY: the caller's contract covers every read.
    unsafe {
        for ci in 0..cin {
            let x_c = x.add(ci * plane);
            for &off in taps {
                let x_t = x_c.add(off);
                let w0 = _mm512_load_ps(w);
                let w1 = _mm512_load_ps(w.add(LANES));
                for (r, a_r) in a.iter_mut().enumerate() {
                    for (c, a_rc) in a_r.iter_mut().enumerate() {
                        let v = _mm512_set1_ps(*x_t.add(r * wp + c));
                        a_rc[0] = _mm512_fmadd_ps(w0, v, a_rc[0]);
                        a_rc[1] = _mm512_fmadd_ps(w1, v, a_rc[1]);
                    }
                }
                w = w.add(BLOCK);
            }
        }
    }
    *acc = a;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testing::{conv_geometry, fused_conv_f64, stride_one_3x3};

    fn values(n: usize, a: f64, b: f64) -> Vec<f32> {
        (0..n).map(|i| (a * i as f64 + b).sin() as f32).collect()
    }

    /// Odd channel counts (tiles part full, blocks past the last channel),
    /// planes from 1x1 to 15x15 (rows of one tile or several, an odd last
    /// row or column dropped by the pooling), padding 0 and 1, groups and
    /// dilation, every epilogue, on 1 and 2 threads: within f32 rounding of
    /// the f64 definition.
    #[test]
    fn channel_lane_tiles_match_the_f64_definition() {
        if !crate::kernels::simd::has_avx512() {
            return;
        }
        let mut geometries = stride_one_3x3(
            &[(1, 17), (3, 33), (17, 1), (33, 3), (17, 33)],
            &[[1, 1], [5, 7], [14, 14], [15, 15]],
            &[0, 1],
        );
        geometries.push(conv_geometry(
            3,
            [6, 10, 2],
            [9, 13],
            [3, 2],
            [1, 1],
            [1, 0],
            [2, 1],
        ));
        geometries.push(conv_geometry(
            5,
            [32, 64, 1],
            [14, 14],
            [3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
        ));
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for geo in &geometries {
                for (relu, pooled) in [(true, true), (true, false), (false, true), (false, false)] {
                    let epilogue = ConvEpilogue { relu, pool: pooled };
                    let [oh, ow] = epilogue.output_plane(geo.output);
                    if oh == 0 || ow == 0 {
                        continue;
                    }
                    let x = values(geo.input_len(), 0.37, 0.1);
                    let w = values(geo.weight_len(), 0.23, 0.3);
                    let b = values(geo.out_channels, 1.3, 0.2);
                    let (want, mags) = fused_conv_f64(geo, &x, &w, &b, epilogue);
                    let scale = mags.iter().fold(1.0f64, |a, &m| a.max(m));
                    let mut out = vec![MaybeUninit::<f32>::uninit(); epilogue.output_len(geo)];
                    let ins = FusedInputs {
                        geo,
                        x: &x,
                        w: &w,
                        bias: Some(&b),
                        epilogue,
                    };
                    // SAFETY: AVX-512F checked above; the lengths are `geo`'s.
                    pool.install(|| unsafe { ChannelLanes::forward_fused(ins, &mut out) });
                    // SAFETY: `forward_fused` writes every element.
                    let got: Vec<f32> = out.iter().map(|v| unsafe { v.assume_init() }).collect();
                    assert_eq!(got.len(), want.len());
                    for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (f64::from(*g) - e).abs() <= 1e-6 * scale,
                            "[{i}] {g} vs {e}: {epilogue:?} {geo:?}, {threads} threads"
                        );
                    }
                }
            }
        }
    }

    /// Pooled tiles cover whole windows: 14 pooled columns as 6, 4, 4.
    #[test]
    fn pooled_column_tiles_are_even_and_cover_the_row() {
        assert_eq!(column_tiles(14, true), [(0, 6), (6, 4), (10, 4)]);
        assert_eq!(column_tiles(2, true), [(0, 2)]);
        assert_eq!(column_tiles(14, false), [(0, 5), (5, 5), (10, 4)]);
        assert_eq!(column_tiles(7, false), [(0, 4), (4, 3)]);
        assert!(column_tiles(0, true).is_empty());
    }
}

//! Inference forward of an f32 3x3 convolution at stride one by Winograd's
//! minimal filtering F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for
//! Convolutional Neural Networks", 2016) on AVX-512, with the ReLU and the
//! 2x2 max pooling of [`super::conv_fused`] on the registers.
//!
//! Each 2x2 block of outputs (a tile) comes from the 4x4 input patch under
//! it: `Y = Aᵀ [Σ_ci (G g Gᵀ) ⊙ (Bᵀ d B)] A`. The sum over input channels
//! is then 16 products, one per position of the transformed patch, of
//! `[tiles x cin]` by `[cin x cout]`: 16 multiply-adds per tile and input
//! channel where direct summation takes 36, 2.25x fewer. The transforms are
//! additions (and halves, in the weights' once per call).
//!
//! The price is rounding: the sums are not the direct kernel's, so the bits
//! are not those of the ops one after another (within a few f32 roundings
//! of each output's magnitude, bounded by the test), and a non-finite input
//! reaches its whole 2x2 tile (pooled, as the fused blocks are, that is the
//! direct kernel's NaN). So it runs only where the caller asks for it
//! ([`super::conv_fused::ConvSummation::Winograd`]: the ONNX import's fused
//! blocks at inference).
//!
//! Layout, per sample: the padded input channels-last (`[y][x][cin]`, the
//! channels padded to a vector) so a patch's transform is vector additions
//! over 16 input channels at once; a group of up to [`MAX_TILES`]
//! transformed patches `[position][tile][cin]`; the transformed weights
//! `[position][cin][cout]` with the output channels in the lanes. Each
//! product is a register tile of [`MAX_TILES`] tiles by [`MAX_VECTORS`]
//! vectors of output channels (24 accumulators, 10 loads for 24 FMAs); then
//! each tile's output transform, bias, ReLU and pooling in registers,
//! scattered into the output planes. Samples go to rayon's workers one at a
//! time, so the bits do not depend on the thread count.

use std::mem::MaybeUninit;

use super::conv::ConvGeometry;
use super::conv_direct::beats;
use super::conv_fused::{
    even_parts, for_each_sample_scratch, Avx512FusedConv, ConvEpilogue, FusedInputs,
};

/// f32 lanes in an AVX-512 vector.
const LANES: usize = 16;
/// Positions of a transformed 4x4 patch.
const POSITIONS: usize = 16;
/// Tiles (2x2 outputs) in one register tile of the products.
const MAX_TILES: usize = 6;
/// Vectors of output channels in one register tile of the products.
const MAX_VECTORS: usize = 4;
/// Input channels below which the transforms cost more than the products
/// save (and a first layer's one or three channels leave the products'
/// loops too short): those stay on the direct kernels.
const MIN_INPUT_CHANNELS: usize = 8;
/// The transformed weights of one group are read once per group of tiles:
/// beyond half a core's L2 they would stream from memory, and the direct
/// kernels are faster.
const MAX_WEIGHT_BYTES: usize = 512 * 1024;

/// One group's geometry in tiles.
#[derive(Clone, Copy, Debug)]
struct Plan {
    cin: usize,
    /// `cin` rounded up to a vector: the channels-last stride.
    cin_padded: usize,
    cout: usize,
    /// `cout` rounded up to a vector: the transformed weights' row.
    cout_padded: usize,
    src: [usize; 2],
    /// Zero rows and columns before the source in the padded plane.
    before: [usize; 2],
    /// The convolution's output plane.
    out: [usize; 2],
    /// Tiles down and across: the pooling windows, or every output covered.
    tiles: [usize; 2],
    /// The padded plane: two pixels per tile and the kernel's reach.
    padded: [usize; 2],
}

impl Plan {
    fn new(geo: &ConvGeometry, epilogue: ConvEpilogue) -> Self {
        let [oh, ow] = geo.output;
        let tiles = if epilogue.pool {
            [oh / 2, ow / 2]
        } else {
            [oh.div_ceil(2), ow.div_ceil(2)]
        };
        let cin = geo.in_channels / geo.groups;
        let cout = geo.out_channels / geo.groups;
        Plan {
            cin,
            cin_padded: cin.next_multiple_of(LANES),
            cout,
            cout_padded: cout.next_multiple_of(LANES),
            src: geo.input,
            before: geo.pad,
            out: geo.output,
            tiles,
            padded: [2 * tiles[0] + 2, 2 * tiles[1] + 2],
        }
    }

    /// Floats of the channels-last padded input.
    fn padded_len(&self) -> usize {
        self.padded[0] * self.padded[1] * self.cin_padded
    }

    /// Floats of one group of transformed patches.
    fn patches_len(&self) -> usize {
        POSITIONS * MAX_TILES * self.cin_padded
    }
}

/// One group's weights (`[cout][cin][3][3]`) transformed, `G g Gᵀ` in f64
/// rounded once, as `[position][cin][cout_padded]` (zero past `cout`).
fn transform_weights(w: &[f32], p: &Plan) -> Vec<f32> {
    let mut u = vec![0.0f32; POSITIONS * p.cin * p.cout_padded];
    // `G` applied to three values: [a, (a + b + c) / 2, (a - b + c) / 2, c].
    let g3 = |a: f64, b: f64, c: f64| [a, (a + b + c) / 2.0, (a - b + c) / 2.0, c];
    for o in 0..p.cout {
        for i in 0..p.cin {
            let k = &w[(o * p.cin + i) * 9..][..9];
            let k = |r: usize, c: usize| f64::from(k[r * 3 + c]);
            let columns: [[f64; 4]; 3] = std::array::from_fn(|c| g3(k(0, c), k(1, c), k(2, c)));
            for r in 0..4 {
                let row = g3(columns[0][r], columns[1][r], columns[2][r]);
                for (c, &v) in row.iter().enumerate() {
                    u[((r * 4 + c) * p.cin + i) * p.cout_padded + o] = v as f32;
                }
            }
        }
    }
    u
}

/// The kernel of this file.
pub(super) struct Winograd;

impl Avx512FusedConv for Winograd {
    /// A 3x3 kernel without dilation, at least [`MIN_INPUT_CHANNELS`] input
    /// channels per group, transformed weights of at most
    /// [`MAX_WEIGHT_BYTES`] and planes a vector's i32 offsets reach.
    fn applies(geo: &ConvGeometry) -> bool {
        let (cin, cout) = (geo.in_channels / geo.groups, geo.out_channels / geo.groups);
        geo.kernel == [3, 3]
            && geo.stride == [1, 1]
            && geo.dilation == [1, 1]
            && cin >= MIN_INPUT_CHANNELS
            && cout > 0
            && POSITIONS * cin * cout.next_multiple_of(LANES) * size_of::<f32>()
                <= MAX_WEIGHT_BYTES
            // Gathers and scatters address a vector's channels by i32 offsets.
            && cin.next_multiple_of(LANES) * geo.input[0] * geo.input[1] <= i32::MAX as usize
            && LANES * geo.output[0] * geo.output[1] <= i32::MAX as usize
    }

    /// Sums by F(2x2, 3x3).
    unsafe fn forward_fused(ins: FusedInputs<'_>, out: &mut [MaybeUninit<f32>]) {
        let (geo, x, w, bias, epilogue) = (ins.geo, ins.x, ins.w, ins.bias, ins.epilogue);
        let p = Plan::new(geo, epilogue);
        let weights: Vec<Vec<f32>> = w
            .chunks_exact(p.cout * p.cin * 9)
            .map(|w_g| transform_weights(w_g, &p))
            .collect();
        let biases: Vec<Vec<f32>> = (0..geo.groups)
            .map(|g| {
                let mut b = vec![0.0f32; p.cout_padded];
                if let Some(bias) = bias {
                    b[..p.cout].copy_from_slice(&bias[g * p.cout..][..p.cout]);
                }
                b
            })
            .collect();
        let [ph, pw] = epilogue.output_plane(p.out);
        let out_group = p.cout * ph * pw;
        let out_sample = geo.groups * out_group;
        let src_group = p.cin * p.src[0] * p.src[1];
        // Each worker's channels-last padded input and transformed patches.
        let scratch_len = p.padded_len() + p.patches_len();
        for_each_sample_scratch(out, out_sample, scratch_len, |n, y_n, scratch| {
            let (padded, patches) = scratch.split_at_mut(p.padded_len());
            for g in 0..geo.groups {
                let s = &x[(n * geo.groups + g) * src_group..][..src_group];
                let y_g = &mut y_n[g * out_group..][..out_group];
                // SAFETY: the caller checked AVX-512F; the buffers have the
                // plan's lengths.
                unsafe {
                    pad_channels_last(&p, s, padded);
                    correlate(&p, padded, patches, &weights[g], &biases[g], epilogue, y_g)
                };
            }
        });
    }
}

/// Copies the `cin` planes of `src` into `dst` channels-last and zero
/// padded: `dst[(y * wp + x) * cin_padded + ci]`, each padded pixel's
/// channels written once, 16 at a time, gathered from the planes.
///
/// # Safety
/// The CPU has AVX-512F.
#[target_feature(enable = "avx512f")]
unsafe fn pad_channels_last(p: &Plan, src: &[f32], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let [hp, wp] = p.padded;
    let [sh, sw] = p.src;
    let [top, left] = p.before;
    let plane = sh * sw;
    assert!(src.len() >= p.cin * plane && dst.len() >= p.padded_len());
    assert!(p.cin_padded * plane <= i32::MAX as usize);
    let lane_planes = lane_offsets(plane);
    let zero = _mm512_setzero_ps();
    let d = dst.as_mut_ptr();
    for y in 0..hp {
        let sy = y.wrapping_sub(top);
        for x in 0..wp {
            let sx = x.wrapping_sub(left);
            let at = (y * wp + x) * p.cin_padded;
            for cv in (0..p.cin_padded).step_by(LANES) {
                let live = p.cin.saturating_sub(cv).min(LANES);
                // SAFETY: the store stays in `dst` (asserted); the gathered
                // lanes are channels `cv + lane < cin` at source pixel
                // (sy, sx) inside the plane.
                unsafe {
                    let v = if sy < sh && sx < sw && live > 0 {
                        let mask = ((1u32 << live) - 1) as u16;
                        let base = src.as_ptr().add(cv * plane + sy * sw + sx);
                        _mm512_mask_i32gather_ps::<4>(zero, mask, lane_planes, base)
                    } else {
                        zero
                    };
                    _mm512_storeu_ps(d.add(at + cv), v);
                }
            }
        }
    }
}

/// `lane * plane` in each lane: the offsets of one pixel in 16 consecutive
/// planes, for gathers and scatters (`applies` keeps them within i32).
#[target_feature(enable = "avx512f")]
fn lane_offsets(plane: usize) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(plane as i32),
    )
}

/// Writes one group's output planes `y` (pooled if `epilogue.pool`) from
/// its channels-last padded input `x` and transformed weights `u`, using
/// `patches` for the transformed patches.
///
/// # Safety
/// The CPU has AVX-512F; the slices have `p`'s lengths (`y`: `cout` planes
/// of the epilogue, `bias`: `cout_padded`).
#[target_feature(enable = "avx512f")]
unsafe fn correlate(
    p: &Plan,
    x: &[f32],
    patches: &mut [f32],
    u: &[f32],
    bias: &[f32],
    epilogue: ConvEpilogue,
    y: &mut [MaybeUninit<f32>],
) {
    let [ph, pw] = epilogue.output_plane(p.out);
    assert!(x.len() >= p.padded_len() && patches.len() >= p.patches_len());
    assert!(u.len() == POSITIONS * p.cin * p.cout_padded && bias.len() == p.cout_padded);
    assert_eq!(y.len(), p.cout * ph * pw);
    // Each position's register tile: MAX_TILES x MAX_VECTORS vectors.
    const SUMS: usize = MAX_TILES * MAX_VECTORS * LANES;
    let mut sums = [0.0f32; POSITIONS * SUMS];
    let blocks = p.cout_padded.div_ceil(MAX_VECTORS * LANES);
    for (first, count) in even_parts(p.tiles[0] * p.tiles[1], MAX_TILES) {
        // SAFETY: AVX-512F (this function's); `x` and `patches` hold the
        // plan's lengths (asserted).
        unsafe { transform_patches(p, x, first, count, patches) };
        for block in 0..blocks {
            let vectors = ((p.cout_padded - block * MAX_VECTORS * LANES) / LANES).min(MAX_VECTORS);
            for pos in 0..POSITIONS {
                let v = patches[pos * MAX_TILES * p.cin_padded..].as_ptr();
                let w = u[pos * p.cin * p.cout_padded + block * MAX_VECTORS * LANES..].as_ptr();
                let s = sums[pos * SUMS..].as_mut_ptr();
                // SAFETY: `v` holds `count` tiles of `cin_padded` channels,
                // `w` `cin` rows of `cout_padded` from the block's first
                // channel (at least `vectors` vectors), `s` one register tile.
                unsafe { products(count, vectors, v, p, w, s) };
            }
            let channels = (p.cout - block * MAX_VECTORS * LANES).min(MAX_VECTORS * LANES);
            let out = Out {
                plan: p,
                bias: &bias[block * MAX_VECTORS * LANES..],
                first_channel: block * MAX_VECTORS * LANES,
                channels,
                epilogue,
                plane: [ph, pw],
            };
            // SAFETY: as above; `y` holds the group's planes (asserted).
            unsafe { finish_tiles(&out, &sums, first, count, y) };
        }
    }
}

/// The transformed patches `Bᵀ d B` of tiles `first..first + count` into
/// `patches` (`[position][MAX_TILES][cin_padded]`), 16 input channels at a
/// time.
///
/// # Safety
/// The CPU has AVX-512F; `x` and `patches` have `p`'s lengths; the tiles
/// exist.
#[target_feature(enable = "avx512f")]
unsafe fn transform_patches(p: &Plan, x: &[f32], first: usize, count: usize, patches: &mut [f32]) {
    use std::arch::x86_64::*;
    let (wp, cp) = (p.padded[1], p.cin_padded);
    assert!(x.len() >= p.padded_len() && patches.len() >= p.patches_len());
    assert!(first + count <= p.tiles[0] * p.tiles[1] && count <= MAX_TILES);
    let dst = patches.as_mut_ptr();
    for t in 0..count {
        let (ty, tx) = ((first + t) / p.tiles[1], (first + t) % p.tiles[1]);
        // The patch's rows 2ty..2ty + 4 and columns 2tx..2tx + 4 lie in the
        // padded plane (two pixels per tile and two more).
        let base = x[(2 * ty * wp + 2 * tx) * cp..].as_ptr();
        for cv in (0..cp).step_by(LANES) {
            // SAFETY: every read is inside the patch (above), every write
            // inside `patches` (asserted).
            unsafe {
                let d = |r: usize, c: usize| _mm512_loadu_ps(base.add((r * wp + c) * cp + cv));
                // Bᵀ d: rows [d0 - d2, d1 + d2, d2 - d1, d1 - d3], column by column.
                let columns: [[__m512; 4]; 4] = std::array::from_fn(|c| {
                    let (d0, d1, d2, d3) = (d(0, c), d(1, c), d(2, c), d(3, c));
                    [
                        _mm512_sub_ps(d0, d2),
                        _mm512_add_ps(d1, d2),
                        _mm512_sub_ps(d2, d1),
                        _mm512_sub_ps(d1, d3),
                    ]
                });
                let rows: [[__m512; 4]; 4] =
                    std::array::from_fn(|r| std::array::from_fn(|c| columns[c][r]));
                // (Bᵀ d) B: the same combination along each row.
                for (r, [a, b, c, e]) in rows.into_iter().enumerate() {
                    let row = [
                        _mm512_sub_ps(a, c),
                        _mm512_add_ps(b, c),
                        _mm512_sub_ps(c, b),
                        _mm512_sub_ps(b, e),
                    ];
                    for (j, v) in row.into_iter().enumerate() {
                        _mm512_storeu_ps(dst.add(((r * 4 + j) * MAX_TILES + t) * cp + cv), v);
                    }
                }
            }
        }
    }
}

/// One position's products: `count` tiles by `vectors` vectors of output
/// channels, dispatched to a register tile of that size.
///
/// # Safety
/// As [`tile_products`]'s.
#[target_feature(enable = "avx512f")]
unsafe fn products(
    count: usize,
    vectors: usize,
    v: *const f32,
    p: &Plan,
    w: *const f32,
    s: *mut f32,
) {
    macro_rules! by_vectors {
        ($t:literal) => {
            match vectors {
                4 => tile_products::<$t, 4>(v, p.cin_padded, p.cin, w, p.cout_padded, s),
                3 => tile_products::<$t, 3>(v, p.cin_padded, p.cin, w, p.cout_padded, s),
                2 => tile_products::<$t, 2>(v, p.cin_padded, p.cin, w, p.cout_padded, s),
                _ => tile_products::<$t, 1>(v, p.cin_padded, p.cin, w, p.cout_padded, s),
            }
        };
    }
    // SAFETY: the caller's contract.
    unsafe {
        match count {
            6 => by_vectors!(6),
            5 => by_vectors!(5),
            4 => by_vectors!(4),
            3 => by_vectors!(3),
            2 => by_vectors!(2),
            _ => by_vectors!(1),
        }
    }
}

/// `s[t][k] = Σ_ci v[t][ci] · w[ci][k]` for `T` tiles and `V` vectors of
/// output channels, the input channels in order, one FMA each from zero.
///
/// # Safety
/// The CPU has AVX-512F; `v` holds `T` rows of `stride` (at least `cin`)
/// floats; `w` holds `cin` rows of `row` floats, `V` vectors each; `s`
/// holds `MAX_TILES * MAX_VECTORS` vectors.
#[target_feature(enable = "avx512f")]
// Not inlined: alone, the accumulators keep registers of their own
// (ARCHITECTURE.md, PERF: "f32 convolutions at stride one").
#[inline(never)]
unsafe fn tile_products<const T: usize, const V: usize>(
    v: *const f32,
    stride: usize,
    cin: usize,
    w: *const f32,
    row: usize,
    s: *mut f32,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); V]; T];
    // SAFETY: the caller's contract covers every read and write.
    unsafe {
        for ci in 0..cin {
            let w_ci = w.add(ci * row);
            let wv: [__m512; V] = std::array::from_fn(|k| _mm512_loadu_ps(w_ci.add(k * LANES)));
            for (t, acc_t) in acc.iter_mut().enumerate() {
                let b = _mm512_set1_ps(*v.add(t * stride + ci));
                for (a, &wk) in acc_t.iter_mut().zip(&wv) {
                    *a = _mm512_fmadd_ps(wk, b, *a);
                }
            }
        }
        for (t, acc_t) in acc.iter().enumerate() {
            for (k, &a) in acc_t.iter().enumerate() {
                _mm512_storeu_ps(s.add((t * MAX_VECTORS + k) * LANES), a);
            }
        }
    }
}

/// Where a block of output channels goes: `channels` planes from
/// `first_channel`, of `plane` (rows, columns).
struct Out<'a> {
    plan: &'a Plan,
    /// The bias from `first_channel`, at least `MAX_VECTORS` vectors or to
    /// `cout_padded`.
    bias: &'a [f32],
    first_channel: usize,
    channels: usize,
    epilogue: ConvEpilogue,
    plane: [usize; 2],
}

/// Each tile's output transform `Aᵀ M A` from the 16 positions' sums, then
/// the bias, the ReLU and the pooling in registers, scattered to the
/// output planes of the block's channels.
///
/// # Safety
/// The CPU has AVX-512F; `sums` holds the 16 positions' register tiles for
/// tiles `first..first + count`; `y` holds the group's `cout` planes.
#[target_feature(enable = "avx512f")]
unsafe fn finish_tiles(
    out: &Out<'_>,
    sums: &[f32],
    first: usize,
    count: usize,
    y: &mut [MaybeUninit<f32>],
) {
    use std::arch::x86_64::*;
    const SUMS: usize = MAX_TILES * MAX_VECTORS * LANES;
    assert!(sums.len() >= POSITIONS * SUMS && count <= MAX_TILES);
    let [ph, pw] = out.plane;
    let plane = ph * pw;
    let [oh, ow] = out.plan.out;
    assert!(LANES * plane <= i32::MAX as usize);
    let tiles_across = out.plan.tiles[1];
    let zero = _mm512_setzero_ps();
    // Lane j of a vector is channel j's plane.
    let lane_planes = lane_offsets(plane);
    let y = y.as_mut_ptr().cast::<f32>();
    for k in 0..out.channels.div_ceil(LANES) {
        let live = (out.channels - k * LANES).min(LANES);
        let mask = ((1u32 << live) - 1) as u16;
        // SAFETY: `out.bias` holds this vector (its doc).
        let bias = unsafe { _mm512_loadu_ps(out.bias.as_ptr().add(k * LANES)) };
        let finish = |v: __m512| {
            let v = _mm512_add_ps(v, bias);
            if out.epilogue.relu {
                // `Relu`'s rule, `x < 0 ? 0 : x`: NaN and -0 pass.
                _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, zero), zero)
            } else {
                v
            }
        };
        let channel_planes = (out.first_channel + k * LANES) * plane;
        for t in 0..count {
            // SAFETY: position `pos`'s register tile holds tile `t`'s
            // vector `k` (asserted sizes).
            let m = |pos: usize| unsafe {
                _mm512_loadu_ps(
                    sums.as_ptr()
                        .add(pos * SUMS + (t * MAX_VECTORS + k) * LANES),
                )
            };
            // Aᵀ M: rows [m0 + m1 + m2, m1 - m2 - m3], column by column;
            // then the same along each row.
            let s: [[__m512; 4]; 2] = std::array::from_fn(|i| {
                std::array::from_fn(|c| {
                    let (m0, m1, m2, m3) = (m(c), m(4 + c), m(8 + c), m(12 + c));
                    if i == 0 {
                        _mm512_add_ps(_mm512_add_ps(m0, m1), m2)
                    } else {
                        _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3)
                    }
                })
            });
            let yv: [[__m512; 2]; 2] = std::array::from_fn(|i| {
                let [a, b, c, d] = s[i];
                [
                    finish(_mm512_add_ps(_mm512_add_ps(a, b), c)),
                    finish(_mm512_sub_ps(_mm512_sub_ps(b, c), d)),
                ]
            });
            let tile = first + t;
            let (ty, tx) = (tile / tiles_across, tile % tiles_across);
            let store = |at: usize, v: __m512| {
                // SAFETY: the `live` channels' planes exist and pixel `at`
                // lies in a plane.
                unsafe {
                    _mm512_mask_i32scatter_ps::<4>(y.add(channel_planes + at), mask, lane_planes, v)
                }
            };
            if out.epilogue.pool {
                // The pooling op's tournament (`conv_direct::max_pool_2x2`):
                // each row's pair, then the rows.
                let pair = |[a, b]: [__m512; 2]| _mm512_mask_mov_ps(a, beats(b, a), b);
                let (m1, m2) = (pair(yv[0]), pair(yv[1]));
                store(ty * pw + tx, _mm512_mask_mov_ps(m1, beats(m2, m1), m2));
            } else {
                for (i, row) in yv.iter().enumerate() {
                    for (j, &v) in row.iter().enumerate() {
                        let (oy, ox) = (2 * ty + i, 2 * tx + j);
                        if oy < oh && ox < ow {
                            store(oy * ow + ox, v);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testing::{conv_geometry, fused_conv_f64, stride_one_3x3};

    fn values(n: usize, a: f64, b: f64) -> Vec<f32> {
        (0..n).map(|i| (a * i as f64 + b).sin() as f32).collect()
    }

    fn run(
        geo: &ConvGeometry,
        x: &[f32],
        w: &[f32],
        b: &[f32],
        epilogue: ConvEpilogue,
    ) -> Vec<f32> {
        let mut out = vec![MaybeUninit::<f32>::uninit(); epilogue.output_len(geo)];
        let ins = FusedInputs {
            geo,
            x,
            w,
            bias: Some(b),
            epilogue,
        };
        // SAFETY: the callers checked AVX-512F and `applies`; the lengths
        // are `geo`'s.
        unsafe { Winograd::forward_fused(ins, &mut out) };
        // SAFETY: `forward_fused` writes every element.
        out.iter().map(|v| unsafe { v.assume_init() }).collect()
    }

    /// Channel counts that fill blocks part way (8, 17, 33 input; 1, 17,
    /// 64, 80 output), odd and even planes from 2x2 to 15x15 (partial tiles
    /// and a pooling that drops the last row and column), padding 0 to 2,
    /// groups, every epilogue, on 1 and 2 threads: within a few f32
    /// roundings of each output's sum of absolute terms of the f64
    /// definition, and the same bits on both thread counts.
    #[test]
    fn winograd_tiles_match_the_f64_definition() {
        if !crate::kernels::simd::has_avx512() {
            return;
        }
        let mut geometries = stride_one_3x3(
            &[(8, 1), (17, 17), (33, 64), (32, 80)],
            &[[2, 2], [5, 7], [14, 14], [15, 15]],
            &[0, 1, 2],
        );
        geometries.push(conv_geometry(
            3,
            [16, 10, 2],
            [9, 13],
            [3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
        ));
        for geo in &geometries {
            assert!(Winograd::applies(geo), "{geo:?}");
            for (relu, pool) in [(true, true), (true, false), (false, true), (false, false)] {
                let epilogue = ConvEpilogue { relu, pool };
                let [oh, ow] = epilogue.output_plane(geo.output);
                if oh == 0 || ow == 0 {
                    continue;
                }
                let x = values(geo.input_len(), 0.37, 0.1);
                let w = values(geo.weight_len(), 0.23, 0.3);
                let b = values(geo.out_channels, 1.3, 0.2);
                let (want, mag) = fused_conv_f64(geo, &x, &w, &b, epilogue);
                let mut per_thread = Vec::new();
                for threads in [1, 2] {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .unwrap();
                    let got = pool.install(|| run(geo, &x, &w, &b, epilogue));
                    assert_eq!(got.len(), want.len());
                    for (i, ((g, e), m)) in got.iter().zip(&want).zip(&mag).enumerate() {
                        assert!(
                            (f64::from(*g) - e).abs() <= 1e-6 * m.max(1.0),
                            "[{i}] {g} vs {e} (terms {m}): {epilogue:?} {geo:?}, {threads} threads"
                        );
                    }
                    per_thread.push(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
                }
                assert_eq!(per_thread[0], per_thread[1], "{epilogue:?} {geo:?}");
            }
        }
    }

    /// A NaN in the input reaches a pooled output whose window reads it,
    /// as the direct kernel's does, and no other pooled output.
    #[test]
    fn a_nan_reaches_the_pooled_outputs_that_read_it() {
        if !crate::kernels::simd::has_avx512() {
            return;
        }
        let geo = conv_geometry(1, [8, 16, 1], [8, 8], [3, 3], [1, 1], [1, 1], [1, 1]);
        let mut x = values(geo.input_len(), 0.37, 0.1);
        // Channel 3, row 0, column 0: read by the pooled output (0, 0) only.
        x[3 * 64] = f32::NAN;
        let w = values(geo.weight_len(), 0.23, 0.3);
        let b = values(16, 1.3, 0.2);
        let epilogue = ConvEpilogue {
            relu: true,
            pool: true,
        };
        let y = run(&geo, &x, &w, &b, epilogue);
        for (i, v) in y.iter().enumerate() {
            assert_eq!(v.is_nan(), i % 16 == 0, "[{i}] {v}");
        }
    }

    #[test]
    fn tile_groups_are_even_and_cover_the_tiles() {
        assert_eq!(
            even_parts(49, MAX_TILES),
            [
                (0, 6),
                (6, 6),
                (12, 6),
                (18, 6),
                (24, 5),
                (29, 5),
                (34, 5),
                (39, 5),
                (44, 5)
            ]
        );
        assert_eq!(even_parts(6, MAX_TILES), [(0, 6)]);
        assert_eq!(even_parts(7, MAX_TILES), [(0, 4), (4, 3)]);
        assert!(even_parts(0, MAX_TILES).is_empty());
    }

    /// Layers beyond the transformed weights' budget, or too shallow, or
    /// not 3x3 at stride and dilation one, stay on the direct kernels.
    #[test]
    fn applies_only_to_deep_enough_3x3_layers_within_the_weight_budget() {
        let geo = |c: [usize; 3], k: [usize; 2], s: [usize; 2], d: [usize; 2]| {
            conv_geometry(1, c, [14, 14], k, s, [1, 1], d)
        };
        let applies = |c, k, s, d| Winograd::applies(&geo(c, k, s, d));
        assert!(applies([32, 64, 1], [3, 3], [1, 1], [1, 1]));
        assert!(applies([128, 64, 1], [3, 3], [1, 1], [1, 1]));
        assert!(!applies([128, 128, 1], [3, 3], [1, 1], [1, 1]));
        assert!(!applies([4, 64, 1], [3, 3], [1, 1], [1, 1]));
        assert!(!applies([32, 64, 1], [5, 5], [1, 1], [1, 1]));
        assert!(!applies([32, 64, 1], [3, 3], [2, 2], [1, 1]));
        assert!(!applies([32, 64, 1], [3, 3], [1, 1], [2, 2]));
    }
}

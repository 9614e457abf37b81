//! Direct convolution for f32 at stride one, on AVX-512 or AVX2 with FMA:
//! the three products of [`super::conv`] without im2col or a GEMM's packing.
//!
//! The im2col lowering copies every input element `kh * kw` times and `gemm`
//! then repacks the copy; at the channel counts of small CNNs that traffic
//! costs about as much as the products (ARCHITECTURE.md, PERF). Here each
//! input channel is copied once into a zero-padded plane, and register tiles
//! read the taps straight from it:
//!
//! - forward and input gradient: one correlation kernel. A tile holds `CO`
//!   output channels by up to `PV` (at most 3) vectors of output pixels
//!   along a row; each tap loads the pixel vectors once and multiplies them by a
//!   broadcast weight per channel. The input gradient of a stride-1
//!   convolution is the correlation of `gy` with the flipped, transposed
//!   kernel, so it runs the same tiles;
//! - weight gradient: a tile holds [`WG_CO_TILE`] output channels by up to
//!   [`TAP_TILE`] taps of one input channel, with the pixels in the vector
//!   lanes, summed across lanes at the end of a pass.
//!
//! The kernels are written once over [`F32Vector`] and run at the widest
//! width the CPU has ([`dispatch!`]): 16 lanes and a forward tile of 8
//! output channels by 3 pixel vectors on AVX-512's 32 registers, 8 lanes
//! and 6 channels by 2 vectors on AVX2's 16.
//!
//! Every output element is summed in an order fixed by the geometry and the
//! width alone (the weight gradient's samples in the same fixed parts as
//! the GEMM path), so the bits do not depend on the number of threads
//! (invariant 9). They differ from the GEMM path's in the last places, and
//! the weight gradient's between widths: another summation order.

use std::any::TypeId;
use std::mem::MaybeUninit;

use super::conv::{for_each_sample, weight_grad_parts, ConvGeometry};
use super::conv_fused::ConvEpilogue;
use crate::kernels::f32_vector::{F32Vector, F32x16, F32x8};
use crate::tensor::Element;

/// Output channels in one forward tile on AVX-512: 8 x 3 accumulators leave
/// registers for the three pixel loads and a broadcast weight.
const CO_TILE_AVX512: usize = 8;
/// Output channels in one forward tile on AVX2: 6 x 2 accumulators, two
/// pixel loads and a broadcast take 15 of the 16 registers (with 4 x 3 and
/// three loads, all 16, LLVM spilled an accumulator and shuffled the rest
/// every tap).
const CO_TILE_AVX2: usize = 6;
/// Pixel vectors in one forward tile on AVX2.
const PIX_TILE_AVX2: usize = 2;
/// Pixel vectors in one forward tile on AVX-512.
const PIX_TILE_AVX512: usize = 3;
/// Output channels in one weight-gradient tile.
const WG_CO_TILE: usize = 4;
/// Taps in one weight-gradient tile: 4 x 3 accumulators. LLVM spilled a
/// 4 x 5 tile's accumulators although they and its loads fit AVX-512's 32
/// registers (ARCHITECTURE.md, PERF).
const TAP_TILE: usize = 3;
/// The gradient rows of one weight-gradient pass should stay in L1 while
/// every input channel and tap group runs over them.
const PASS_BYTES: usize = 16 << 10;

/// Runs `$body` with `$V` the widest [`F32Vector`] the CPU has, `$CO` its
/// forward tile's output channels and `$PV` its pixel vectors; the callers
/// checked [`applies`].
macro_rules! dispatch {
    (($V:ident, $CO:ident, $PV:ident) => $body:expr) => {
        if crate::kernels::simd::has_avx512() {
            type $V = F32x16;
            const $CO: usize = CO_TILE_AVX512;
            const $PV: usize = PIX_TILE_AVX512;
            $body
        } else {
            type $V = F32x8;
            const $CO: usize = CO_TILE_AVX2;
            const $PV: usize = PIX_TILE_AVX2;
            $body
        }
    };
}

/// Whether this convolution runs here: f32, stride one, a kernel larger than
/// 1x1 (a pointwise one is a plain GEMM already), on a CPU with AVX-512F or
/// AVX2 and FMA.
pub(super) fn applies<T: Element>(geo: &ConvGeometry) -> bool {
    TypeId::of::<T>() == TypeId::of::<f32>()
        && geo.stride == [1, 1]
        && geo.kernel != [1, 1]
        && geo.output[0] > 0
        && geo.output[1] > 0
        && has_vectors()
}

/// Whether the CPU has one of the vector types the kernels run on.
fn has_vectors() -> bool {
    F32x16::available() || F32x8::available()
}

/// Whether the input gradient runs here: as [`applies`], the padding is at
/// most the kernel's reach, so the flipped correlation needs no negative
/// padding, and there are at least four input channels per group (a first
/// layer's one or three channels would leave most of each tile idle: there
/// im2col and GEMM measure faster).
pub(super) fn applies_to_input_grad<T: Element>(geo: &ConvGeometry) -> bool {
    applies::<T>(geo)
        && geo.in_channels / geo.groups >= 4
        && (0..2).all(|d| geo.pad[d] <= (geo.kernel[d] - 1) * geo.dilation[d])
        && geo.input[0] > 0
        && geo.input[1] > 0
}

/// `s` as f32s; the callers checked `T` is f32 ([`applies`]).
pub(super) fn as_f32<T: Element>(s: &[T]) -> &[f32] {
    assert_eq!(TypeId::of::<T>(), TypeId::of::<f32>());
    // SAFETY: `T` is `f32` (asserted just above).
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), s.len()) }
}

pub(super) fn as_f32_out<T: Element>(s: &mut [MaybeUninit<T>]) -> &mut [MaybeUninit<f32>] {
    assert_eq!(TypeId::of::<T>(), TypeId::of::<f32>());
    // SAFETY: `T` is `f32` (asserted just above).
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), s.len()) }
}

/// A stride-1 correlation of `cin` source planes into `cout` output planes:
/// the forward convolution, or the input gradient read as one.
#[derive(Clone, Copy, Debug)]
struct Correlation {
    cin: usize,
    cout: usize,
    /// Source plane (rows, columns).
    src: [usize; 2],
    /// Output plane (rows, columns).
    out: [usize; 2],
    kernel: [usize; 2],
    dilation: [usize; 2],
    /// Zero rows and columns before the source in the padded plane.
    before: [usize; 2],
    /// Lanes of the vectors the kernels run on.
    lanes: usize,
}

impl Correlation {
    fn forward(geo: &ConvGeometry, lanes: usize) -> Self {
        let channels = [geo.in_channels, geo.out_channels];
        Self::of(geo, lanes, channels, [geo.input, geo.output], geo.pad)
    }

    /// `gx = correlate(gy, flipped w^T)`, with `d (k - 1) - p` zeros before.
    fn input_grad(geo: &ConvGeometry, lanes: usize) -> Self {
        let reach = |d: usize| (geo.kernel[d] - 1) * geo.dilation[d];
        let before = [reach(0) - geo.pad[0], reach(1) - geo.pad[1]];
        let channels = [geo.out_channels, geo.in_channels];
        Self::of(geo, lanes, channels, [geo.output, geo.input], before)
    }

    /// A correlation of `geo`'s kernel from `channels[0]` source planes of
    /// `planes[0]` to `channels[1]` output planes of `planes[1]` (each over
    /// the groups), `before` zeros before the source.
    fn of(
        geo: &ConvGeometry,
        lanes: usize,
        channels: [usize; 2],
        [src, out]: [[usize; 2]; 2],
        before: [usize; 2],
    ) -> Self {
        Correlation {
            cin: channels[0] / geo.groups,
            cout: channels[1] / geo.groups,
            src,
            out,
            kernel: geo.kernel,
            dilation: geo.dilation,
            before,
            lanes,
        }
    }

    fn taps(&self) -> usize {
        self.kernel[0] * self.kernel[1]
    }

    fn vectors_per_row(&self) -> usize {
        self.out[1].div_ceil(self.lanes)
    }

    /// The padded plane: every row and column a whole output vector's taps
    /// read, the last vector's lanes past the row included.
    fn padded(&self) -> [usize; 2] {
        [
            self.out[0] + (self.kernel[0] - 1) * self.dilation[0],
            self.vectors_per_row() * self.lanes + (self.kernel[1] - 1) * self.dilation[1],
        ]
    }

    fn padded_len(&self) -> usize {
        let [h, w] = self.padded();
        h * w
    }

    /// Each tap's offset in the padded plane, row-major over the kernel.
    fn tap_offsets(&self) -> Vec<usize> {
        let wp = self.padded()[1];
        let mut offsets = Vec::with_capacity(self.taps());
        for ky in 0..self.kernel[0] {
            for kx in 0..self.kernel[1] {
                offsets.push(ky * self.dilation[0] * wp + kx * self.dilation[1]);
            }
        }
        offsets
    }

    /// Every output vector: its first pixel's offset in the padded plane, in
    /// the output plane, and how many of its lanes lie inside the row.
    fn pixel_vectors(&self) -> Vec<PixelVector> {
        let (wp, nv, ow) = (self.padded()[1], self.vectors_per_row(), self.out[1]);
        let mut all = Vec::with_capacity(self.out[0] * nv);
        for oy in 0..self.out[0] {
            for v in 0..nv {
                all.push(PixelVector {
                    padded: oy * wp + v * self.lanes,
                    out: oy * ow + v * self.lanes,
                    lanes: (ow - v * self.lanes).min(self.lanes),
                });
            }
        }
        all
    }

    /// Copies `planes` source planes into zero-padded planes at the start of
    /// `dst`.
    fn pad(&self, src: &[f32], planes: usize, dst: &mut [f32]) {
        let [hp, wp] = self.padded();
        let [sh, sw] = self.src;
        let [top, left] = self.before;
        let cols = sw.min(wp.saturating_sub(left));
        for (p, plane) in dst.chunks_exact_mut(hp * wp).take(planes).enumerate() {
            plane.fill(0.0);
            let s = &src[p * sh * sw..][..sh * sw];
            if cols == 0 {
                continue;
            }
            for (r, row) in plane.chunks_exact_mut(wp).enumerate().skip(top) {
                let sy = r - top;
                if sy >= sh {
                    break;
                }
                row[left..left + cols].copy_from_slice(&s[sy * sw..][..cols]);
            }
        }
    }
}

/// One output vector of a plane.
#[derive(Clone, Copy, Debug)]
struct PixelVector {
    padded: usize,
    out: usize,
    /// Its lanes inside the row: all of them but in a row's last vector.
    lanes: usize,
}

/// Packs one group's weights (`[C_out/g][C_in/g][taps]`, the convolution's
/// layout) as correlation `c` reads them: `[out block][in][tap][CO]`, zero
/// past the last output channel. For the input gradient (`flipped`) the
/// roles of the channels swap and the taps run backwards (the kernel
/// flipped in both dimensions).
fn pack<const CO: usize>(w: &[f32], c: &Correlation, flipped: bool) -> Vec<f32> {
    let taps = c.taps();
    let mut packed = vec![0.0; c.cout.div_ceil(CO) * c.cin * taps * CO];
    for o in 0..c.cout {
        let (b, j) = (o / CO, o % CO);
        for i in 0..c.cin {
            for t in 0..taps {
                packed[((b * c.cin + i) * taps + t) * CO + j] = if flipped {
                    w[(i * c.cout + o) * taps + (taps - 1 - t)]
                } else {
                    w[(o * c.cin + i) * taps + t]
                };
            }
        }
    }
    packed
}

/// `y = conv(x, w) + bias` (see [`super::conv::conv2d_forward`]).
pub(super) fn forward<T: Element>(
    geo: &ConvGeometry,
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    out: &mut [MaybeUninit<T>],
) {
    forward_fused(geo, x, w, bias, ConvEpilogue::default(), out);
}

/// `y = conv(x, w) + bias` with `epilogue` applied as each sample's output
/// is written (see [`super::conv_fused::conv2d_forward_fused`]).
pub(super) fn forward_fused<T: Element>(
    geo: &ConvGeometry,
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    epilogue: ConvEpilogue,
    out: &mut [MaybeUninit<T>],
) {
    let (x, w, bias, out) = (as_f32(x), as_f32(w), bias.map(as_f32), as_f32_out(out));
    dispatch!((V, CO, PV) => {
        let c = Correlation::forward(geo, V::LANES);
        run_correlation::<V, CO, PV>(geo, &c, x, w, false, bias, epilogue, out)
    })
}

/// The input gradient (see [`super::conv::conv2d_input_grad`]).
pub(super) fn input_grad<T: Element>(
    geo: &ConvGeometry,
    gy: &[T],
    w: &[T],
    bias: Option<&[T]>,
    out: &mut [MaybeUninit<T>],
) {
    let (gy, w, bias, out) = (as_f32(gy), as_f32(w), bias.map(as_f32), as_f32_out(out));
    let epilogue = ConvEpilogue::default();
    dispatch!((V, CO, PV) => {
        let c = Correlation::input_grad(geo, V::LANES);
        run_correlation::<V, CO, PV>(geo, &c, gy, w, true, bias, epilogue, out)
    })
}

/// Runs correlation `c` per sample and group over source `src`, with the
/// convolution's weights `w` packed once per group ([`pack`]), then
/// `epilogue`: a ReLU in the tiles' stores, a 2x2 max pool from the
/// sample's output staged in the thread's workspace (in L2) to `out`.
#[allow(clippy::too_many_arguments)]
fn run_correlation<V: F32Vector, const CO: usize, const PV: usize>(
    geo: &ConvGeometry,
    c: &Correlation,
    src: &[f32],
    w: &[f32],
    flipped: bool,
    bias: Option<&[f32]>,
    epilogue: ConvEpilogue,
    out: &mut [MaybeUninit<f32>],
) {
    assert!(V::available() && c.lanes == V::LANES);
    let packed: Vec<Vec<f32>> = w
        .chunks_exact(c.cout * c.cin * c.taps())
        .map(|w_g| pack::<CO>(w_g, c, flipped))
        .collect();
    let src_sample = geo.groups * c.cin * c.src[0] * c.src[1];
    let (src_plane, out_plane) = (c.src[0] * c.src[1], c.out[0] * c.out[1]);
    let [ph, pw] = epilogue.output_plane(c.out);
    let written_plane = ph * pw;
    let taps = c.tap_offsets();
    let pixels = c.pixel_vectors();
    let out_sample = geo.groups * c.cout * written_plane;
    for_each_sample(geo, out, out_sample, |n, y_n, workspace, _threaded| {
        let padded_len = c.cin * c.padded_len() + c.lanes;
        let staged_len = if epilogue.pool { c.cout * out_plane } else { 0 };
        if workspace.len() < padded_len + staged_len {
            workspace.resize(padded_len + staged_len, 0.0);
        }
        let (padded, staged) = workspace.split_at_mut(padded_len);
        for g in 0..geo.groups {
            let s = &src[n * src_sample + g * c.cin * src_plane..][..c.cin * src_plane];
            c.pad(s, c.cin, padded);
            let y_g = &mut y_n[g * c.cout * written_plane..][..c.cout * written_plane];
            let bias_g = bias.map(|b| &b[g * c.cout..][..c.cout]);
            // Pooled blocks correlate into the staged planes (still in L2)
            // and pool from there; the others write their output directly.
            let staged = &mut staged[..if epilogue.pool { c.cout * out_plane } else { 0 }];
            let target: &mut [MaybeUninit<f32>] = if epilogue.pool {
                // SAFETY: `correlate` writes only initialised f32s, so viewing
                // the initialised `staged` as `MaybeUninit` is sound.
                unsafe { &mut *(&mut *staged as *mut [f32] as *mut [MaybeUninit<f32>]) }
            } else {
                &mut *y_g
            };
            // SAFETY: `V` is available (asserted); the sizes are those the
            // pointers are read and written with (see `correlate`), which
            // writes every element of `target`.
            unsafe {
                correlate::<V, CO, PV>(
                    c,
                    padded,
                    &taps,
                    &pixels,
                    &packed[g],
                    bias_g,
                    epilogue.relu,
                    target,
                )
            };
            if epilogue.pool {
                for (plane, pooled) in staged
                    .chunks_exact(out_plane)
                    .zip(y_g.chunks_exact_mut(written_plane))
                {
                    max_pool_2x2(plane, c.out, pooled);
                }
            }
        }
    });
}

/// Writes every element of `y` (`c.cout` output planes) from the padded
/// source planes `x` and the packed weights `w`, plus the bias, through a
/// ReLU if `relu`.
///
/// # Safety
/// `V` is available; `x` holds `c.cin` padded planes, `w` the packing of
/// [`pack`] for `c` and `CO`, `taps` and `pixels` come from `c`.
#[allow(clippy::too_many_arguments)]
unsafe fn correlate<V: F32Vector, const CO: usize, const PV: usize>(
    c: &Correlation,
    x: &[f32],
    taps: &[usize],
    pixels: &[PixelVector],
    w: &[f32],
    bias: Option<&[f32]>,
    relu: bool,
    y: &mut [MaybeUninit<f32>],
) {
    let plane = c.padded_len();
    assert!(x.len() >= c.cin * plane);
    assert_eq!(w.len(), c.cout.div_ceil(CO) * c.cin * taps.len() * CO);
    assert_eq!(y.len(), c.cout * c.out[0] * c.out[1]);
    let out_plane = c.out[0] * c.out[1];
    // SAFETY: the caller upholds the contract above.
    unsafe {
        V::enabled(
            #[inline(always)]
            || {
                let blocks: Vec<Tile<'_, CO>> = (0..c.cout.div_ceil(CO))
                    .map(|block| {
                        let channels = (c.cout - block * CO).min(CO);
                        let mut bias_b = [0.0f32; CO];
                        if let Some(b) = bias {
                            bias_b[..channels].copy_from_slice(&b[block * CO..][..channels]);
                        }
                        Tile {
                            x,
                            plane,
                            cin: c.cin,
                            taps,
                            w: w[block * c.cin * taps.len() * CO..].as_ptr(),
                            bias: bias_b,
                            relu,
                            channels,
                            out_plane,
                            y: y[block * CO * out_plane..].as_mut_ptr().cast::<f32>(),
                        }
                    })
                    .collect();
                // One block over every pixel vector before the next: the
                // block's packed weights stay in L1. (The other order, every
                // block over one group of pixel vectors, measured 2% faster
                // on AVX2 at 64 -> 64 channels, where a group's source rows
                // fit in L1, and would not fit on AVX-512's wider groups.)
                for tile in &blocks {
                    for pixels in pixels.chunks(PV) {
                        match pixels.len() {
                            3 => correlate_tile::<V, CO, 3>(tile, pixels),
                            2 => correlate_tile::<V, CO, 2>(tile, pixels),
                            _ => correlate_tile::<V, CO, 1>(tile, pixels),
                        }
                    }
                }
            },
        )
    }
}

/// What every register tile of one block of `CO` output channels reads and
/// writes.
struct Tile<'a, const CO: usize> {
    /// The padded source planes.
    x: &'a [f32],
    /// Floats of one padded plane.
    plane: usize,
    cin: usize,
    /// Each tap's offset in a padded plane.
    taps: &'a [usize],
    /// The block's packed weights.
    w: *const f32,
    bias: [f32; CO],
    relu: bool,
    /// Output channels of the block that exist.
    channels: usize,
    out_plane: usize,
    /// The block's first output plane.
    y: *mut f32,
}

/// One register tile: `CO` channels by `PV` pixel vectors, summed over
/// every input channel and tap, then stored (plus the bias, through a ReLU
/// if `relu`) in each vector's lanes inside its row.
///
/// # Safety
/// As [`correlate`]'s, inside its `V::enabled`; `t.w` points at the tile's
/// channel block, `t.y` at its first output plane, `t.channels` of which
/// exist.
#[inline(always)]
unsafe fn correlate_tile<V: F32Vector, const CO: usize, const PV: usize>(
    t: &Tile<'_, CO>,
    pixels: &[PixelVector],
) {
    // SAFETY: the caller upholds the contract above.
    unsafe {
        let mut acc = [[V::zero(); PV]; CO];
        let mut at = [0usize; PV];
        for p in 0..PV {
            at[p] = pixels[p].padded;
        }
        let x = t.x.as_ptr();
        let mut w = t.w;
        for ci in 0..t.cin {
            let x_c = x.add(ci * t.plane);
            for &off in t.taps {
                let x_t = x_c.add(off);
                let mut xv = [V::zero(); PV];
                for p in 0..PV {
                    xv[p] = V::load(x_t.add(at[p]));
                }
                for (j, acc_j) in acc.iter_mut().enumerate() {
                    let wj = V::splat(*w.add(j));
                    for p in 0..PV {
                        acc_j[p] = wj.mul_add(xv[p], acc_j[p]);
                    }
                }
                w = w.add(CO);
            }
        }
        // The bias and ReLU on every accumulator by constant indices, into
        // a second array that the stores below index by `channels`: were
        // `acc` itself indexed at run time, it would live in memory and
        // be stored after every multiply-add.
        let mut finished = [[V::zero(); PV]; CO];
        for j in 0..CO {
            let b = V::splat(t.bias[j]);
            for p in 0..PV {
                let v = acc[j][p].add(b);
                finished[j][p] = if t.relu { v.relu() } else { v };
            }
        }
        for (j, row) in finished.iter().enumerate().take(t.channels) {
            for p in 0..PV {
                let dst = t.y.add(j * t.out_plane + pixels[p].out);
                if pixels[p].lanes == V::LANES {
                    row[p].store(dst);
                } else {
                    row[p].store_first(dst, pixels[p].lanes);
                }
            }
        }
    }
}

/// 2x2 max pooling with stride 2 of one plane `x` of size `dims` into `y`
/// (`dims / 2`, rounded down), with max pooling's tournament of selects
/// (`kernels::nn::pool`: the first maximum, or the last NaN), so the bits
/// are the pooling op's: by permutes on AVX-512, else by the pooling op's
/// own row loop.
fn max_pool_2x2(x: &[f32], dims: [usize; 2], y: &mut [MaybeUninit<f32>]) {
    if F32x16::available() {
        // SAFETY: the CPU has AVX-512F (checked just above).
        unsafe { max_pool_2x2_avx512(x, dims, y) }
    } else {
        let [h, w] = dims;
        let (oh, ow) = (h / 2, w / 2);
        assert!(x.len() >= h * w);
        assert_eq!(y.len(), oh * ow);
        crate::kernels::simd::wide(
            #[inline(always)]
            || {
                for (r, row) in y.chunks_exact_mut(ow).enumerate() {
                    let (top, bottom) =
                        (&x[2 * r * w..][..2 * ow], &x[(2 * r + 1) * w..][..2 * ow]);
                    super::pool::max_row_pairs(top, bottom, row);
                }
            },
        );
    }
}

/// [`max_pool_2x2`] on AVX-512, 16 outputs a vector: the even and odd
/// columns of two rows split apart by permutes.
///
/// # Safety
/// The CPU has AVX-512F.
#[target_feature(enable = "avx512f")]
unsafe fn max_pool_2x2_avx512(x: &[f32], dims: [usize; 2], y: &mut [MaybeUninit<f32>]) {
    use std::arch::x86_64::*;
    const LANES: usize = 16;
    let [h, w] = dims;
    let (oh, ow) = (h / 2, w / 2);
    assert!(x.len() >= h * w);
    assert_eq!(y.len(), oh * ow);
    for r in 0..oh {
        let top = x[2 * r * w..].as_ptr();
        let bottom = x[(2 * r + 1) * w..].as_ptr();
        let out = y[r * ow..].as_mut_ptr().cast::<f32>();
        for c0 in (0..ow).step_by(LANES) {
            let lanes = (ow - c0).min(LANES);
            // SAFETY: columns `2 * c0` to `2 * (c0 + lanes)` lie in both rows,
            // and outputs `c0` to `c0 + lanes` in the output row.
            unsafe {
                let m1 = max_of_pairs(top.add(2 * c0), lanes);
                let m2 = max_of_pairs(bottom.add(2 * c0), lanes);
                let m = _mm512_mask_mov_ps(m1, beats(m2, m1), m2);
                _mm512_mask_storeu_ps(out.add(c0), lane_mask(lanes), m);
            }
        }
    }
}

/// The lanes where `v` replaces the running maximum `best`: larger, or NaN
/// (`kernels::nn::pool`'s rule).
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn beats(v: std::arch::x86_64::__m512, best: std::arch::x86_64::__m512) -> u16 {
    use std::arch::x86_64::*;
    _mm512_cmp_ps_mask::<_CMP_GT_OQ>(v, best) | _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v)
}

/// The larger of each pair of the `2 * lanes` elements from `row` (the
/// second where it beats the first), in the first `lanes` lanes.
///
/// # Safety
/// The CPU has AVX-512F; `row` holds `2 * lanes` elements, `lanes <= 16`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn max_of_pairs(row: *const f32, lanes: usize) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    const LANES: usize = 16;
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let n = 2 * lanes;
    // SAFETY: the loads stay under masks of the `2 * lanes` elements.
    let (lo, hi) = unsafe {
        (
            _mm512_maskz_loadu_ps(lane_mask(n.min(LANES)), row),
            _mm512_maskz_loadu_ps(lane_mask(n.saturating_sub(LANES)), row.wrapping_add(LANES)),
        )
    };
    let a = _mm512_permutex2var_ps(lo, even, hi);
    let b = _mm512_permutex2var_ps(lo, odd, hi);
    _mm512_mask_mov_ps(a, beats(b, a), b)
}

/// The mask of the first `n` (at most 16) lanes.
fn lane_mask(n: usize) -> u16 {
    ((1u32 << n) - 1) as u16
}

/// The weight gradient (see [`super::conv::conv2d_weight_grad`]): the same
/// fixed parts of the batch as the GEMM path, each summed in sample order.
pub(super) fn weight_grad<T: Element>(
    geo: &ConvGeometry,
    x: &[T],
    gy: &[T],
    out: &mut [MaybeUninit<T>],
) {
    use rayon::prelude::*;
    let (x, gy, out) = (as_f32(x), as_f32(gy), as_f32_out(out));
    let per_part = weight_grad_parts(geo.batch);
    let parts = geo.batch.div_ceil(per_part).max(1);
    let cin = geo.in_channels / geo.groups;
    let len = geo.out_channels * cin * geo.kernel[0] * geo.kernel[1];
    let part = |p: usize| -> Vec<f32> {
        let samples = p * per_part..((p + 1) * per_part).min(geo.batch);
        dispatch!((V, _CO, _PV) => weight_grad_part::<V>(geo, x, gy, samples))
    };
    let sums: Vec<Vec<f32>> = if parts > 1 && rayon::current_num_threads() > 1 {
        (0..parts).into_par_iter().map(part).collect()
    } else {
        (0..parts).map(part).collect()
    };
    let mut total = vec![0.0f32; len];
    for s in &sums {
        total.iter_mut().zip(s).for_each(|(a, b)| *a += *b);
    }
    for (o, v) in out.iter_mut().zip(total) {
        o.write(v);
    }
}

/// One part's weight gradient, `[C_out][C_in/g][taps]`: samples in chunks
/// whose gradient rows fit [`PASS_BYTES`], each chunk's sums added in order.
fn weight_grad_part<V: F32Vector>(
    geo: &ConvGeometry,
    x: &[f32],
    gy: &[f32],
    samples: std::ops::Range<usize>,
) -> Vec<f32> {
    assert!(V::available());
    let c = Correlation::forward(geo, V::LANES);
    let (in_plane, out_plane) = (c.src[0] * c.src[1], c.out[0] * c.out[1]);
    let (in_sample, out_sample) = (geo.in_channels * in_plane, geo.out_channels * out_plane);
    let group_len = c.cout * c.cin * c.taps();
    let taps = c.tap_offsets();
    // The gradient is staged with each row a whole number of aligned
    // vectors, zero past the row's end: an unaligned vector load can cost
    // two cache accesses, and the loads, not the multiply-adds, bound this
    // loop.
    let row = c.vectors_per_row() * c.lanes;
    let staged_plane = c.out[0] * row;
    let pixels: Vec<PixelVector> = c
        .pixel_vectors()
        .into_iter()
        .map(|p| PixelVector {
            out: (p.out / c.out[1]) * row + p.out % c.out[1],
            ..p
        })
        .collect();
    let chunk = (PASS_BYTES / (WG_CO_TILE * staged_plane * size_of::<f32>()).max(1)).max(1);
    let mut acc = vec![0.0f32; geo.groups * group_len];
    let mut padded = vec![0.0f32; chunk * c.cin * c.padded_len() + c.lanes];
    let mut staged = AlignedBuffer::new(chunk * c.cout * staged_plane);
    for first in samples.clone().step_by(chunk) {
        let run = first..(first + chunk).min(samples.end);
        // One list of pixel vectors across the chunk: x offsets from the
        // first sample's padded planes, gradient offsets from its first
        // staged plane.
        let run_pixels: Vec<PixelVector> = (0..run.len())
            .flat_map(|k| {
                pixels.iter().map(move |p| PixelVector {
                    padded: k * c.cin * c.padded_len() + p.padded,
                    out: k * c.cout * staged_plane + p.out,
                    lanes: p.lanes,
                })
            })
            .collect();
        for g in 0..geo.groups {
            let stage = staged.slice(run.len() * c.cout * staged_plane);
            for (k, n) in run.clone().enumerate() {
                let s = &x[n * in_sample + g * c.cin * in_plane..][..c.cin * in_plane];
                c.pad(s, c.cin, &mut padded[k * c.cin * c.padded_len()..]);
                let gy_n = &gy[n * out_sample + g * c.cout * out_plane..][..c.cout * out_plane];
                let dst = &mut stage[k * c.cout * staged_plane..][..c.cout * staged_plane];
                for (d, s) in dst.chunks_exact_mut(row).zip(gy_n.chunks_exact(c.out[1])) {
                    d[..s.len()].copy_from_slice(s);
                    d[s.len()..].fill(0.0);
                }
            }
            let acc_g = &mut acc[g * group_len..][..group_len];
            // SAFETY: `V` is available (asserted); `padded` holds the run's
            // padded planes and `stage` its staged gradient planes, which
            // the offsets of `run_pixels` address.
            unsafe {
                weight_grad_chunk::<V>(&c, &padded, stage, staged_plane, &taps, &run_pixels, acc_g)
            };
        }
    }
    acc
}

/// A buffer of f32s whose slice starts on a 64-byte boundary.
struct AlignedBuffer {
    data: Vec<f32>,
    start: usize,
}

impl AlignedBuffer {
    fn new(len: usize) -> Self {
        let data = vec![0.0f32; len + 16];
        let start = data.as_ptr().align_offset(64).min(16);
        AlignedBuffer { data, start }
    }

    fn slice(&mut self, len: usize) -> &mut [f32] {
        &mut self.data[self.start..][..len]
    }
}

/// Adds one chunk of samples' weight gradient for one group into `acc`
/// (`[cout][cin][taps]`).
///
/// # Safety
/// `V` is available; every pixel vector's lanes inside its row, plus a
/// tap's offset and an input channel's plane, lie in `x`, and all its lanes
/// plus an output channel's plane (`out_plane` elements each) in `gy`.
unsafe fn weight_grad_chunk<V: F32Vector>(
    c: &Correlation,
    x: &[f32],
    gy: &[f32],
    out_plane: usize,
    taps: &[usize],
    pixels: &[PixelVector],
    acc: &mut [f32],
) {
    let plane = c.padded_len();
    let ntaps = taps.len();
    assert_eq!(acc.len(), c.cout * c.cin * ntaps);
    for block in 0..c.cout.div_ceil(WG_CO_TILE) {
        let channels = (c.cout - block * WG_CO_TILE).min(WG_CO_TILE);
        // Channels past the last read the last one's plane; their sums are
        // never used.
        let rows: [*const f32; WG_CO_TILE] = std::array::from_fn(|j| {
            gy[(block * WG_CO_TILE + j.min(channels - 1)) * out_plane..].as_ptr()
        });
        for ci in 0..c.cin {
            let x_c = x[ci * plane..].as_ptr();
            for (group, offs) in taps.chunks(TAP_TILE).enumerate() {
                let t0 = group * TAP_TILE;
                let mut sums = [[0.0f32; TAP_TILE]; WG_CO_TILE];
                // SAFETY: as this function's contract.
                unsafe {
                    match offs.len() {
                        3 => weight_grad_tile::<V, 3>(x_c, &rows, offs, pixels, &mut sums),
                        2 => weight_grad_tile::<V, 2>(x_c, &rows, offs, pixels, &mut sums),
                        _ => weight_grad_tile::<V, 1>(x_c, &rows, offs, pixels, &mut sums),
                    }
                }
                for (j, row) in sums.iter().enumerate().take(channels) {
                    let co = block * WG_CO_TILE + j;
                    let dst = &mut acc[(co * c.cin + ci) * ntaps + t0..][..offs.len()];
                    dst.iter_mut().zip(row).for_each(|(a, s)| *a += *s);
                }
            }
        }
    }
}

/// One weight-gradient tile: `WG_CO_TILE` output channels (`rows`) by `TT`
/// taps of one input channel (`x`), summed over the pixel vectors with the
/// pixels in the lanes; writes the lane sums into `sums`. The staged
/// gradient is zero past each row's end and `x` loads as zero outside a
/// vector's lanes in its row, so an infinity there never makes a NaN.
///
/// # Safety
/// As [`weight_grad_chunk`], for `x` and `rows`.
// Not inlined: alone, the tile's accumulators get registers of their own
// instead of spilling next to the caller's loop state.
#[inline(never)]
unsafe fn weight_grad_tile<V: F32Vector, const TT: usize>(
    x: *const f32,
    rows: &[*const f32; WG_CO_TILE],
    taps: &[usize],
    pixels: &[PixelVector],
    sums: &mut [[f32; TAP_TILE]; WG_CO_TILE],
) {
    // SAFETY: the caller's contract covers every read inside a row.
    unsafe {
        V::enabled(
            #[inline(always)]
            || {
                let mut acc = [[V::zero(); TT]; WG_CO_TILE];
                let mut off = [0usize; TT];
                off.copy_from_slice(&taps[..TT]);
                let rows = *rows;
                let mut px = pixels.as_ptr();
                let end = px.wrapping_add(pixels.len());
                while px != end {
                    let PixelVector { padded, out, lanes } = *px;
                    let x_p = x.add(padded);
                    let mut xv = [V::zero(); TT];
                    if lanes == V::LANES {
                        for t in 0..TT {
                            xv[t] = V::load(x_p.add(off[t]));
                        }
                    } else {
                        for t in 0..TT {
                            xv[t] = V::load_first(x_p.add(off[t]), lanes);
                        }
                    }
                    for j in 0..WG_CO_TILE {
                        let g = V::load(rows[j].add(out));
                        for t in 0..TT {
                            acc[j][t] = g.mul_add(xv[t], acc[j][t]);
                        }
                    }
                    px = px.add(1);
                }
                for j in 0..WG_CO_TILE {
                    for t in 0..TT {
                        sums[j][t] = acc[j][t].sum();
                    }
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::conv::{conv2d_forward, conv2d_input_grad, conv2d_weight_grad};
    use super::*;
    use crate::kernels::testing::{conv_geometry, filled};

    fn seq(n: usize, a: f64, b: f64) -> Vec<f64> {
        (0..n).map(|i| (a * i as f64 + b).sin()).collect()
    }

    fn run<T: Element>(
        len: usize,
        f: impl for<'o> FnOnce(&'o mut [MaybeUninit<T>]) -> crate::tensor::Filled<'o>,
    ) -> Vec<f64> {
        filled(len, f).into_iter().map(|v| v.to_f64()).collect()
    }

    fn to_f32(v: &[f64]) -> Vec<f32> {
        v.iter().map(|&x| x as f32).collect()
    }

    fn close(a: &[f64], e: &[f64], what: &str, geo: &ConvGeometry) {
        assert_eq!(a.len(), e.len());
        let scale = e.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        for (i, (a, e)) in a.iter().zip(e).enumerate() {
            assert!(
                (a - e).abs() <= 2e-5 * scale,
                "{what} [{i}] {a} vs {e}: {geo:?}"
            );
        }
    }

    /// Stride-1 geometries: odd widths (tail vectors), rows wider than a
    /// vector, channel counts off the tile, groups, dilation, uneven padding.
    fn geometries() -> Vec<ConvGeometry> {
        let mut all = Vec::new();
        for (batch, cin, cout, groups, hw, k, p, d) in [
            (2, 4, 5, 1, [9, 21], [3, 3], [1, 1], [1, 1]),
            (3, 5, 16, 1, [28, 28], [5, 5], [2, 2], [1, 1]),
            (2, 16, 32, 1, [14, 14], [5, 5], [2, 2], [1, 1]),
            (2, 8, 6, 2, [7, 40], [3, 2], [2, 1], [2, 1]),
            (1, 36, 9, 9, [6, 33], [3, 3], [0, 0], [1, 1]),
            (2, 4, 11, 1, [5, 17], [2, 4], [0, 3], [1, 2]),
            (1, 6, 4, 1, [1, 50], [1, 5], [0, 2], [1, 1]),
        ] {
            all.push(conv_geometry(
                batch,
                [cin, cout, groups],
                hw,
                k,
                [1, 1],
                p,
                d,
            ));
        }
        all
    }

    /// The three products in f32 against the GEMM path in f64.
    #[test]
    fn direct_products_match_the_gemm_path() {
        if !has_vectors() {
            return;
        }
        for geo in geometries() {
            assert!(applies::<f32>(&geo) && applies_to_input_grad::<f32>(&geo));
            let x = seq(geo.input_len(), 0.37, 0.1);
            let w = seq(geo.weight_len(), 0.23, 0.3);
            let gy = seq(geo.output_len(), 0.11, 0.7);
            let b = seq(geo.out_channels, 1.3, 0.2);
            let bx = seq(geo.in_channels, 0.9, 0.4);
            let (x32, w32, gy32) = (to_f32(&x), to_f32(&w), to_f32(&gy));
            let (b32, bx32) = (to_f32(&b), to_f32(&bx));
            let y = run::<f32>(geo.output_len(), |o| {
                conv2d_forward(&geo, &x32, &w32, Some(&b32), o)
            });
            let expect = run::<f64>(geo.output_len(), |o| {
                conv2d_forward(&geo, &x, &w, Some(&b), o)
            });
            close(&y, &expect, "forward", &geo);
            let gx = run::<f32>(geo.input_len(), |o| {
                conv2d_input_grad(&geo, &gy32, &w32, Some(&bx32), o)
            });
            let expect = run::<f64>(geo.input_len(), |o| {
                conv2d_input_grad(&geo, &gy, &w, Some(&bx), o)
            });
            close(&gx, &expect, "input grad", &geo);
            let gw = run::<f32>(geo.weight_len(), |o| {
                conv2d_weight_grad(&geo, &x32, &gy32, o)
            });
            let expect = run::<f64>(geo.weight_len(), |o| conv2d_weight_grad(&geo, &x, &gy, o));
            close(&gw, &expect, "weight grad", &geo);
        }
    }

    /// The lanes of a row's last vector past its last output column read
    /// real input (and the padding), which must not reach the sums: an
    /// infinity read by one legal tap makes that tap's gradient infinite and
    /// leaves the others finite, not NaN.
    #[test]
    fn tail_lanes_never_touch_the_gradient() {
        if !has_vectors() {
            return;
        }
        let geo = conv_geometry(1, [1, 1, 1], [3, 20], [1, 3], [1, 1], [0, 0], [1, 1]);
        let mut x = vec![1.0f32; geo.input_len()];
        x[19] = f32::INFINITY; // read by output column 17 through tap 2 only
        let gy = vec![1.0f32; geo.output_len()];
        let gw = run::<f32>(3, |o| conv2d_weight_grad(&geo, &x, &gy, o));
        assert_eq!(gw, [54.0, 54.0, f64::INFINITY]);
    }

    /// A padding wider than the kernel's reach, or a single input channel,
    /// keeps the input gradient on the GEMM path; f64 always stays there.
    #[test]
    fn wide_padding_or_few_channels_leave_the_input_gradient_to_gemm() {
        let geo = conv_geometry(1, [8, 1, 1], [4, 4], [3, 3], [1, 1], [3, 3], [1, 1]);
        let few_channels = ConvGeometry {
            in_channels: 1,
            pad: [1, 1],
            output: [4, 4],
            ..geo
        };
        if has_vectors() {
            assert!(applies::<f32>(&geo) && !applies_to_input_grad::<f32>(&geo));
            assert!(applies::<f32>(&few_channels));
            assert!(!applies_to_input_grad::<f32>(&few_channels));
        }
        assert!(!applies::<f64>(&geo));
    }
}

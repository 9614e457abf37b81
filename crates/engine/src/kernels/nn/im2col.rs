//! The lowering of a convolution to a matrix product: [`im2col`] writes the
//! windows of a block of output rows as the columns of a matrix, and
//! [`col2im`] adds such a matrix back into the input positions it was read
//! from (the adjoint, for the input gradient).
//!
//! Both run on one workspace slice ([`workspace_len`]): the
//! `[k_len, rows * OW]` matrix, [`SLACK`] elements of room for the last
//! row's whole-chunk copy to run over, then scratch. With a stride of one
//! along the width (almost every CNN), each row of the matrix is a run of
//! `OW` elements of a zero-padded input plane (im2col's scratch), so rows
//! move as whole [`SLACK`]-element chunks with no bounds logic per element;
//! col2im's scratch holds one plane of sums per kernel column
//! (ARCHITECTURE.md, PERF). Other strides take a per-element path.

use super::conv::ConvGeometry;
use crate::kernels::simd::wide;
use crate::tensor::Element;

/// Elements per vector move in the row copies, and the room after the
/// matrix (and after the padded plane) that a chunk may run over.
const SLACK: usize = 16;

/// The padded input region one block of output rows reads, in the
/// convolution's padded coordinates: rows `r0 .. r0 + rows`, columns
/// `0 .. width` (column `c` is input column `c - pad[1]`).
struct PaddedBlock {
    r0: usize,
    rows: usize,
    width: usize,
}

impl PaddedBlock {
    fn new(geo: &ConvGeometry, oy0: usize, oy1: usize) -> Self {
        let [kh, kw] = geo.kernel;
        PaddedBlock {
            r0: oy0 * geo.stride[0],
            rows: (oy1 - oy0 - 1) * geo.stride[0] + (kh - 1) * geo.dilation[0] + 1,
            width: (geo.output[1] - 1) * geo.stride[1] + (kw - 1) * geo.dilation[1] + 1,
        }
    }

    /// The block of output rows `oy0..oy1` that [`im2col`] and [`col2im`]
    /// handle at a unit width stride, with its count of matrix columns,
    /// `(oy1 - oy0) * OW`; `None` if it has no output.
    fn of_rows(geo: &ConvGeometry, oy0: usize, oy1: usize) -> Option<(usize, Self)> {
        if oy1 == oy0 || geo.output[1] == 0 {
            return None;
        }
        Some(((oy1 - oy0) * geo.output[1], PaddedBlock::new(geo, oy0, oy1)))
    }

    fn len(&self) -> usize {
        self.rows * self.width
    }

    /// The input row of the block's row `r`, unless it lies in the padding.
    #[inline(always)]
    fn input_row(&self, geo: &ConvGeometry, r: usize) -> Option<usize> {
        (self.r0 + r)
            .checked_sub(geo.pad[0])
            .filter(|&iy| iy < geo.input[0])
    }

    /// The block's row that output row `oy` reads through kernel row `ky`.
    #[inline(always)]
    fn row_of(&self, geo: &ConvGeometry, oy: usize, ky: usize) -> usize {
        oy * geo.stride[0] + ky * geo.dilation[0] - self.r0
    }

    /// Offset in the plane of the first element tap `(ky, kx)` reads for
    /// output row `oy`.
    #[inline(always)]
    fn tap(&self, geo: &ConvGeometry, oy: usize, ky: usize, kx: usize) -> usize {
        self.row_of(geo, oy, ky) * self.width + kx * geo.dilation[1]
    }
}

/// Workspace elements [`im2col`] and [`col2im`] need for blocks of
/// `block_rows` output rows.
pub(super) fn workspace_len(geo: &ConvGeometry, block_rows: usize) -> usize {
    let col = geo.k_len() * block_rows * geo.output[1] + SLACK;
    if geo.stride[1] == 1 && block_rows > 0 && geo.output[1] > 0 {
        let block = PaddedBlock::new(geo, 0, block_rows);
        col + (block.len() + SLACK).max(Col2imScratch::new(geo, &block).len())
    } else {
        col
    }
}

/// Fills the head of `work` (`[k_len, (oy1 - oy0) * OW]`, row-major) with the
/// windows of one group's input planes `x_g` (`[C_in/g, H, W]`) for output
/// rows `oy0..oy1`; taps in the padding read zero. `work` is at least
/// [`workspace_len`] for the block.
pub(super) fn im2col<T: Element>(
    geo: &ConvGeometry,
    x_g: &[T],
    oy0: usize,
    oy1: usize,
    work: &mut [T],
) {
    if geo.stride[1] != 1 {
        return im2col_strided(geo, x_g, oy0, oy1, work);
    }
    let Some((len, block)) = PaddedBlock::of_rows(geo, oy0, oy1) else {
        return;
    };
    let ([h, w], [kh, kw], ow) = (geo.input, geo.kernel, geo.output[1]);
    let (col, plane) = work.split_at_mut(geo.k_len() * len + SLACK);
    let plane = &mut plane[..block.len() + SLACK];
    wide(
        #[inline(always)]
        || {
            let mut row_start = 0;
            let step = geo.stride[0] * block.width;
            for x_plane in x_g[..geo.cin_g() * h * w].chunks_exact(h * w) {
                pad_plane(geo, x_plane, &block, plane);
                for ky in 0..kh {
                    for kx in 0..kw {
                        let mut src = block.tap(geo, oy0, ky, kx);
                        for dst in (row_start..row_start + len).step_by(ow) {
                            copy_chunks(&mut col[dst..], &plane[src..], ow);
                            src += step;
                        }
                        row_start += len;
                    }
                }
            }
        },
    );
}

/// Writes the rows of `block` of one input plane `x_plane` (`[H, W]`) into
/// `plane`, zero where the block lies in the padding.
#[inline(always)]
fn pad_plane<T: Element>(geo: &ConvGeometry, x_plane: &[T], block: &PaddedBlock, plane: &mut [T]) {
    let w = geo.input[1];
    let left = geo.pad[1].min(block.width);
    let inside = w.min(block.width - left);
    for (r, row) in plane[..block.len()]
        .chunks_exact_mut(block.width)
        .enumerate()
    {
        match block.input_row(geo, r) {
            None => zero_short(row),
            Some(iy) => {
                zero_short(&mut row[..left]);
                copy_short(&mut row[left..left + inside], &x_plane[iy * w..][..inside]);
                zero_short(&mut row[left + inside..]);
            }
        }
    }
}

/// Copies `src[..n]` to `dst[..n]` in whole [`SLACK`]-element chunks, so up
/// to `SLACK - 1` elements past `n` are overwritten (with whatever follows
/// in `src`): the caller writes its rows in increasing order, so the next
/// row, or the slack, takes the overrun.
#[inline(always)]
fn copy_chunks<T: Element>(dst: &mut [T], src: &[T], n: usize) {
    let mut at = 0;
    while at < n {
        let s: &[T; SLACK] = src[at..at + SLACK].try_into().expect("a whole chunk");
        let d: &mut [T; SLACK] = (&mut dst[at..at + SLACK])
            .try_into()
            .expect("a whole chunk");
        *d = *s;
        at += SLACK;
    }
}

/// [`im2col`] for strides above one along the width: element by element.
fn im2col_strided<T: Element>(
    geo: &ConvGeometry,
    x_g: &[T],
    oy0: usize,
    oy1: usize,
    col: &mut [T],
) {
    let (w, ow) = (geo.input[1], geo.output[1]);
    for_each_strided_row(geo, oy0, oy1, |r| {
        let dst = &mut col[r.col..r.col + ow];
        let Some(iy) = r.iy else {
            zero_short(dst);
            return;
        };
        let src = &x_g[r.plane + iy * w..r.plane + (iy + 1) * w];
        zero_short(&mut dst[..r.lo]);
        zero_short(&mut dst[r.hi..]);
        for (ox, d) in dst[r.lo..r.hi].iter_mut().enumerate() {
            *d = src[((ox + r.lo) * geo.stride[1]).wrapping_add_signed(r.off)];
        }
    });
}

/// One row of output positions of one kernel tap, as the strided paths
/// walk them (see [`for_each_strided_row`]).
struct StridedRow {
    /// Where the row starts in the matrix.
    col: usize,
    /// Where its input plane starts.
    plane: usize,
    /// The input row it reads, unless that is padding.
    iy: Option<usize>,
    /// The output columns `lo..hi` that read inside the input, at input
    /// column `ox * stride + off` ([`column_range`]).
    lo: usize,
    hi: usize,
    off: isize,
}

/// The walk [`im2col_strided`] and [`col2im_strided`] share: each input
/// plane, kernel tap `(ky, kx)` (one matrix row each, in that order) and
/// output row `oy0..oy1`, the matrix's `[k_len, (oy1 - oy0) * OW]` layout.
#[inline(always)]
fn for_each_strided_row(
    geo: &ConvGeometry,
    oy0: usize,
    oy1: usize,
    mut visit: impl FnMut(StridedRow),
) {
    let [h, w] = geo.input;
    let [kh, kw] = geo.kernel;
    let ow = geo.output[1];
    let len = (oy1 - oy0) * ow;
    let mut col = 0;
    for c in 0..geo.cin_g() {
        for ky in 0..kh {
            for kx in 0..kw {
                let (lo, hi, off) = column_range(geo, kx, w, ow);
                for oy in oy0..oy1 {
                    let iy = input_row(geo, oy, ky, h);
                    let at = col + (oy - oy0) * ow;
                    visit(StridedRow {
                        col: at,
                        plane: c * h * w,
                        iy,
                        lo,
                        hi,
                        off,
                    });
                }
                col += len;
            }
        }
    }
}

/// The transpose of [`im2col`]: adds each entry of the matrix at the head of
/// `work` into the input position of `gx_g` (`[C_in/g, H, W]`) it was read
/// from (padding taps are dropped). The rest of `work` is scratch.
///
/// With a unit width stride the sums go first into one plane per kernel
/// column, indexed by output column with rows padded to whole chunks
/// ([`Col2imScratch`]): each matrix row then adds in whole chunks whose
/// overrun lands in the padding, and no two taps add into overlapping spans
/// (a load that partly overlaps a store still in flight stalls; PERF in
/// ARCHITECTURE.md). A second pass shifts each kernel column's plane into
/// place, one padded input row at a time.
pub(super) fn col2im<T: Element>(
    geo: &ConvGeometry,
    work: &mut [T],
    oy0: usize,
    oy1: usize,
    gx_g: &mut [T],
) {
    if geo.stride[1] != 1 {
        return col2im_strided(geo, work, oy0, oy1, gx_g);
    }
    let Some((len, block)) = PaddedBlock::of_rows(geo, oy0, oy1) else {
        return;
    };
    let ([h, w], [kh, kw], ow) = (geo.input, geo.kernel, geo.output[1]);
    let sizes = Col2imScratch::new(geo, &block);
    let (col, scratch) = work.split_at_mut(geo.k_len() * len + SLACK);
    let (per_kx, row) = scratch[..sizes.len()].split_at_mut(sizes.per_kx_len());
    let left = geo.pad[1].min(block.width);
    let inside = w.min(block.width - left);
    let (pitch, plane_len) = (sizes.pitch, sizes.plane_len());
    wide(
        #[inline(always)]
        || {
            let mut row_start = 0;
            for gx_plane in gx_g[..geo.cin_g() * h * w].chunks_exact_mut(h * w) {
                per_kx.fill(T::zero());
                for ky in 0..kh {
                    for kx in 0..kw {
                        let plane = &mut per_kx[kx * plane_len..][..plane_len];
                        let mut at = block.row_of(geo, oy0, ky) * pitch;
                        let first = row_start + (ky * kw + kx) * len;
                        for src in (first..first + len).step_by(ow) {
                            add_chunks(&mut plane[at..], &col[src..], ow);
                            at += geo.stride[0] * pitch;
                        }
                    }
                }
                row_start += kh * kw * len;
                // The overruns wrote into the padding columns; zero them so the
                // whole-chunk shifts below add nothing there.
                for plane_row in per_kx.chunks_exact_mut(pitch) {
                    zero_short(&mut plane_row[ow..]);
                }
                for r in 0..block.rows {
                    let Some(iy) = block.input_row(geo, r) else {
                        continue;
                    };
                    zero_short(row);
                    for kx in 0..kw {
                        let src = &per_kx[kx * plane_len + r * pitch..][..pitch];
                        add_chunks(&mut row[kx * geo.dilation[1]..], src, pitch);
                    }
                    add_into(&mut gx_plane[iy * w..][..inside], &row[left..left + inside]);
                }
            }
        },
    );
}

/// The scratch of [`col2im`]'s unit-stride path, after the matrix: one
/// plane per kernel column (`rows` padded rows of `pitch` elements, `pitch`
/// the output width rounded up to whole chunks), then one padded input row.
struct Col2imScratch {
    kw: usize,
    rows: usize,
    pitch: usize,
    row: usize,
}

impl Col2imScratch {
    fn new(geo: &ConvGeometry, block: &PaddedBlock) -> Self {
        let pitch = geo.output[1].next_multiple_of(SLACK);
        Col2imScratch {
            kw: geo.kernel[1],
            rows: block.rows,
            pitch,
            row: (geo.kernel[1] - 1) * geo.dilation[1] + pitch,
        }
    }
    fn plane_len(&self) -> usize {
        self.rows * self.pitch
    }
    fn per_kx_len(&self) -> usize {
        self.kw * self.plane_len()
    }
    fn len(&self) -> usize {
        self.per_kx_len() + self.row
    }
}

/// `dst[..n] += src[..n]` in whole [`SLACK`]-element chunks: up to
/// `SLACK - 1` elements past `n` of `dst` take the sum too, with whatever
/// follows in `src`; the caller makes that room padding.
#[inline(always)]
fn add_chunks<T: Element>(dst: &mut [T], src: &[T], n: usize) {
    let mut at = 0;
    while at < n {
        // Both chunks are loaded whole before the store, so the compiler
        // need not prove the slices apart to use vector adds.
        let s: [T; SLACK] = src[at..at + SLACK].try_into().expect("a whole chunk");
        let d: &mut [T; SLACK] = (&mut dst[at..at + SLACK])
            .try_into()
            .expect("a whole chunk");
        let mut sum = *d;
        for (v, sv) in sum.iter_mut().zip(s) {
            *v += sv;
        }
        *d = sum;
        at += SLACK;
    }
}

/// `dst += src`, element by element.
#[inline(always)]
fn add_into<T: Element>(dst: &mut [T], src: &[T]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += *s;
    }
}

/// [`col2im`] for strides above one along the width: element by element.
fn col2im_strided<T: Element>(
    geo: &ConvGeometry,
    col: &[T],
    oy0: usize,
    oy1: usize,
    gx_g: &mut [T],
) {
    let (w, ow) = (geo.input[1], geo.output[1]);
    for_each_strided_row(geo, oy0, oy1, |r| {
        let Some(iy) = r.iy else { return };
        let src = &col[r.col..r.col + ow];
        let dst = &mut gx_g[r.plane + iy * w..r.plane + (iy + 1) * w];
        for (ox, s) in src[r.lo..r.hi].iter().enumerate() {
            dst[((ox + r.lo) * geo.stride[1]).wrapping_add_signed(r.off)] += *s;
        }
    });
}

/// The input row that output row `oy` reads through kernel row `ky`, if it
/// is not padding.
#[inline]
fn input_row(geo: &ConvGeometry, oy: usize, ky: usize, h: usize) -> Option<usize> {
    let iy = (oy * geo.stride[0] + ky * geo.dilation[0]).checked_sub(geo.pad[0])?;
    (iy < h).then_some(iy)
}

/// For kernel column `kx`: the output columns `lo..hi` whose input column
/// `ox * stride + off` lies inside the input, and `off` itself.
#[inline]
fn column_range(geo: &ConvGeometry, kx: usize, w: usize, ow: usize) -> (usize, usize, isize) {
    let s = geo.stride[1] as isize;
    let off = (kx * geo.dilation[1]) as isize - geo.pad[1] as isize;
    // ox * s + off >= 0  <=>  ox >= ceil(-off / s)
    let lo = if off >= 0 {
        0
    } else {
        ((-off + s - 1) / s) as usize
    };
    // ox * s + off <= w - 1  <=>  ox <= (w - 1 - off) / s
    let last = w as isize - 1 - off;
    let hi = if last < 0 { 0 } else { (last / s + 1) as usize };
    let hi = hi.min(ow);
    (lo.min(hi), hi, off)
}

/// `dst.copy_from_slice(src)` for the short rows of small images, in
/// fixed-size pieces the compiler turns into vector moves: a `memcpy` call
/// per image row costs more than the copy (ARCHITECTURE.md, PERF).
#[inline(always)]
fn copy_short<T: Element>(dst: &mut [T], src: &[T]) {
    let src = &src[..dst.len()];
    let split = dst.len() / 8 * 8;
    let (d_body, d_tail) = dst.split_at_mut(split);
    let (s_body, s_tail) = src.split_at(split);
    for (d8, s8) in d_body.chunks_exact_mut(8).zip(s_body.chunks_exact(8)) {
        let s8: &[T; 8] = s8.try_into().expect("a chunk of 8");
        let d8: &mut [T; 8] = d8.try_into().expect("a chunk of 8");
        *d8 = *s8;
    }
    for (dv, sv) in d_tail.iter_mut().zip(s_tail) {
        *dv = *sv;
    }
}

/// `dst.fill(0)` without a `memset` call for a few elements.
#[inline(always)]
fn zero_short<T: Element>(dst: &mut [T]) {
    if dst.len() > 64 {
        dst.fill(T::zero());
    } else {
        for v in dst {
            *v = T::zero();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testing::conv_geometry;

    fn geometry(
        input: [usize; 2],
        kernel: [usize; 2],
        pad: [usize; 2],
        dilation: [usize; 2],
        stride_y: usize,
    ) -> ConvGeometry {
        conv_geometry(1, [3, 2, 1], input, kernel, [stride_y, 1], pad, dilation)
    }

    /// Unit-width-stride geometries: odd and even kernels, padding wider
    /// than the kernel, dilation, rows longer than a chunk, a height stride.
    fn geometries() -> Vec<ConvGeometry> {
        vec![
            geometry([14, 14], [5, 5], [2, 2], [1, 1], 1),
            geometry([7, 33], [3, 2], [1, 0], [1, 1], 1),
            geometry([6, 5], [2, 3], [3, 4], [2, 1], 2),
            geometry([9, 20], [3, 3], [0, 1], [2, 3], 3),
            geometry([1, 17], [1, 1], [0, 0], [1, 1], 1),
        ]
    }

    /// Integers, so sums in any order are exact.
    fn ints(n: usize, seed: usize) -> Vec<f64> {
        (0..n).map(|i| ((i * 7 + seed) % 13) as f64 - 6.0).collect()
    }

    #[test]
    fn padded_rows_match_the_per_element_path() {
        for geo in geometries() {
            let x = ints(geo.cin_g() * geo.input[0] * geo.input[1], 3);
            let oh = geo.output[0];
            for (oy0, oy1) in [(0, oh), (0, 1), (oh / 2, oh), (oh - 1, oh)] {
                let len = geo.k_len() * (oy1 - oy0) * geo.output[1];
                let mut fast = vec![f64::NAN; workspace_len(&geo, oh)];
                im2col(&geo, &x, oy0, oy1, &mut fast);
                let mut slow = vec![f64::NAN; len];
                im2col_strided(&geo, &x, oy0, oy1, &mut slow);
                assert_eq!(fast[..len], slow[..], "{geo:?} rows {oy0}..{oy1}");

                let col = ints(len, 5);
                let mut work = vec![f64::NAN; workspace_len(&geo, oh)];
                work[..len].copy_from_slice(&col);
                let mut gx_fast = ints(x.len(), 1);
                let mut gx_slow = gx_fast.clone();
                col2im(&geo, &mut work, oy0, oy1, &mut gx_fast);
                col2im_strided(&geo, &col, oy0, oy1, &mut gx_slow);
                assert_eq!(gx_fast, gx_slow, "{geo:?} rows {oy0}..{oy1}");
            }
        }
    }
}

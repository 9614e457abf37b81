//! Work along one axis of a contiguous tensor, a block of lanes at a time.
//!
//! Softmax, log-softmax and the classification losses reduce along one axis
//! (the class axis). A tensor of shape `[outer..., len, inner...]` holds
//! `outer * inner` *lanes* of `len` elements each, `inner` apart. The math is
//! simplest and fastest on contiguous rows, so [`for_each_block`] hands the
//! kernel blocks of lanes laid out as rows `[lanes, len]`: slices of the input
//! itself when the axis is the last one (`inner == 1`, the common case), or
//! a gathered (transposed) tile otherwise. Blocks hold about [`BLOCK`]
//! elements, so a whole block stays in L1 while the kernel makes its passes,
//! and short rows (10 classes) still give the vectorised `exp` long runs.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::NnFloat;
use crate::kernels::parallel::should_parallelize;
use crate::tensor::{Element, Filled};

/// Elements per block handed to a kernel.
pub const BLOCK: usize = 4096;

/// A tensor seen as lanes along one axis: lane `(o, i)` holds the elements
/// `o * len * inner + k * inner + i` for `k` in `0..len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AxisLanes {
    /// The product of the dimensions before the axis.
    pub outer: usize,
    /// The size of the axis.
    pub len: usize,
    /// The product of the dimensions after the axis.
    pub inner: usize,
}

impl AxisLanes {
    /// The lanes of `shape` along `axis` (which must be in range); a 0-d
    /// shape is one lane of one element.
    pub fn new(shape: &[usize], axis: usize) -> Self {
        if shape.is_empty() {
            return AxisLanes {
                outer: 1,
                len: 1,
                inner: 1,
            };
        }
        AxisLanes {
            outer: shape[..axis].iter().product(),
            len: shape[axis],
            inner: shape[axis + 1..].iter().product(),
        }
    }

    /// The number of lanes.
    pub fn count(&self) -> usize {
        self.outer * self.inner
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.outer * self.len * self.inner
    }

    /// The flat index of element `k` of lane `lane`.
    #[inline(always)]
    pub fn index(&self, lane: usize, k: usize) -> usize {
        let (o, i) = (lane / self.inner, lane % self.inner);
        (o * self.len + k) * self.inner + i
    }
}

/// Writes zeros into `s` and returns it as initialised (the kernels then
/// overwrite it; the zeroing pass runs on a block already headed for L1).
#[inline]
pub fn init<T: Element>(s: &mut [MaybeUninit<T>]) -> &mut [T] {
    for v in s.iter_mut() {
        v.write(T::zero());
    }
    // SAFETY: the loop wrote every element, `MaybeUninit<T>` has `T`'s
    // layout, and the result reborrows `s`, so nothing can store an
    // uninitialised value through the `MaybeUninit` view while it lives.
    unsafe { &mut *(s as *mut [MaybeUninit<T>] as *mut [T]) }
}

/// Calls `f(first_lane, rows, out)` over blocks of lanes, where each
/// `rows[j]` is `inputs[j]` restricted to the block as contiguous rows
/// `[n, len]` and `out` is the block's output, `[n, out_per_lane]` (zeroed
/// before the call). `out_per_lane` is `lanes.len` (one output per element)
/// or 1 (one per lane, stored in lane order). Runs in parallel for large
/// inputs; the result never depends on the thread count. Writes every
/// element of `out`: each chunk is zeroed by [`init`] before `f` sees it, or
/// (the axis not last) written from `f`'s output block for every lane and
/// element of it.
pub fn for_each_block<'o, T: Element, const K: usize>(
    lanes: AxisLanes,
    inputs: [&[T]; K],
    out: &'o mut [MaybeUninit<T>],
    out_per_lane: usize,
    f: impl Fn(usize, [&[T]; K], &mut [T]) + Sync + Send,
) -> Filled<'o> {
    let AxisLanes { len, inner, .. } = lanes;
    // The copy-back loops below cover `out` only with these sizes.
    assert!(out_per_lane == len || out_per_lane == 1);
    debug_assert!(inputs.iter().all(|x| x.len() == lanes.numel()));
    assert_eq!(out.len(), lanes.count() * out_per_lane);
    if lanes.count() == 0 || len == 0 {
        init(out);
        // SAFETY: `init` wrote every element.
        return unsafe { Filled::assume(out) };
    }
    let parallel = should_parallelize(lanes.numel());
    let per_block = (BLOCK / len).max(1);
    if inner == 1 {
        let run = |b: usize, chunk: &mut [MaybeUninit<T>]| {
            let first = b * per_block;
            let n = chunk.len() / out_per_lane;
            let rows = inputs.map(|x| &x[first * len..(first + n) * len]);
            f(first, rows, init(chunk));
        };
        let chunk = per_block * out_per_lane;
        if parallel {
            out.par_chunks_mut(chunk)
                .enumerate()
                .for_each(|(b, c)| run(b, c));
        } else {
            out.chunks_mut(chunk)
                .enumerate()
                .for_each(|(b, c)| run(b, c));
        }
        // SAFETY: every chunk of `out` went through `init`.
        return unsafe { Filled::assume(out) };
    }
    // The axis is not the last: gather tiles of `width` lanes into rows.
    let width = per_block.min(inner);
    let per_outer = inner * out_per_lane;
    let run = |o: usize, out_o: &mut [MaybeUninit<T>]| {
        let mut gathered: [Vec<T>; K] = std::array::from_fn(|_| vec![T::zero(); width * len]);
        let mut block_out = vec![T::zero(); width * out_per_lane];
        let base = o * len * inner;
        let mut i0 = 0;
        while i0 < inner {
            let w = width.min(inner - i0);
            for (g, x) in gathered.iter_mut().zip(&inputs) {
                for k in 0..len {
                    let src = &x[base + k * inner + i0..base + k * inner + i0 + w];
                    for (lane, &v) in src.iter().enumerate() {
                        g[lane * len + k] = v;
                    }
                }
            }
            let rows: [&[T]; K] = std::array::from_fn(|j| &gathered[j][..w * len]);
            let bo = &mut block_out[..w * out_per_lane];
            bo.iter_mut().for_each(|v| *v = T::zero());
            f(o * inner + i0, rows, bo);
            if out_per_lane == 1 {
                for (dst, &v) in out_o[i0..i0 + w].iter_mut().zip(bo.iter()) {
                    dst.write(v);
                }
            } else {
                for k in 0..len {
                    let dst = &mut out_o[k * inner + i0..k * inner + i0 + w];
                    for (lane, d) in dst.iter_mut().enumerate() {
                        d.write(bo[lane * len + k]);
                    }
                }
            }
            i0 += w;
        }
    };
    if parallel {
        out.par_chunks_mut(per_outer)
            .enumerate()
            .for_each(|(o, c)| run(o, c));
    } else {
        out.chunks_mut(per_outer)
            .enumerate()
            .for_each(|(o, c)| run(o, c));
    }
    // SAFETY: each chunk of `out` is one outer index's `len * inner` (or
    // `inner`) outputs, and `run` writes every lane of every tile of it.
    unsafe { Filled::assume(out) }
}

/// Per-row statistics of a block (its rows' maxima, sums): on the stack
/// for blocks of up to 512 rows (every block of rows of 8 or more), so a
/// kernel allocates nothing for them.
pub type RowStats<T> = smallvec::SmallVec<[T; 512]>;

/// A block's scratch row values, on the stack up to a whole [`BLOCK`].
pub type BlockScratch<T> = smallvec::SmallVec<[T; BLOCK]>;

/// For a block of rows (`rows`, `[n, len]`): writes `e^(x - max)` into `e`
/// (same layout) and each row's maximum and sum of `e` into `maxes` and
/// `sums` (cleared first). The `exp` runs over the whole block at once, so
/// short rows (10 classes) still give it long SIMD runs.
///
/// (A column-wise variant for short rows, transposing the block so the
/// maxima and sums vectorise across rows, measured slower: the strided
/// transposes cost more than the per-row reductions they replace.)
pub fn exp_shifted_rows<T: NnFloat>(
    rows: &[T],
    len: usize,
    e: &mut [T],
    maxes: &mut RowStats<T>,
    sums: &mut RowStats<T>,
) {
    maxes.clear();
    sums.clear();
    if len == 0 {
        return;
    }
    for (r, er) in rows.chunks_exact(len).zip(e.chunks_exact_mut(len)) {
        let m = row_max(r);
        maxes.push(m);
        for (d, &v) in er.iter_mut().zip(r) {
            *d = v - m;
        }
    }
    T::exp_in_place(e);
    sums.extend(e.chunks_exact(len).map(row_sum));
}

/// The largest element of `row` (NaN-blind: a NaN shows up later through `x - max`).
#[inline]
pub fn row_max<T: Element>(row: &[T]) -> T {
    let mut acc = [T::neg_infinity(); 8];
    let chunks = row.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
        }
    }
    let mut m = acc
        .iter()
        .fold(T::neg_infinity(), |m, &v| if v > m { v } else { m });
    for &v in rest {
        m = if v > m { v } else { m };
    }
    m
}

/// The sum of `row`, with eight independent accumulators (vectorises, and
/// the error grows with `len / 8` rather than `len`).
#[inline]
pub fn row_sum<T: Element>(row: &[T]) -> T {
    let mut acc = [T::zero(); 8];
    let chunks = row.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    let s = (acc[0] + acc[4]) + (acc[1] + acc[5]) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    rest.iter().fold(s, |s, &v| s + v)
}

/// The dot product of two rows (same accumulation scheme as [`row_sum`]).
#[inline]
pub fn row_dot<T: Element>(a: &[T], b: &[T]) -> T {
    let mut acc = [T::zero(); 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    let s = (acc[0] + acc[4]) + (acc[1] + acc[5]) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    ra.iter().zip(rb).fold(s, |s, (&x, &y)| s + x * y)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies each lane's elements, reversed, through the driver: checks the
    /// gather/scatter of every layout against direct indexing.
    fn reverse_lanes(shape: &[usize], axis: usize) {
        let lanes = AxisLanes::new(shape, axis);
        let x: Vec<f64> = (0..lanes.numel()).map(|i| i as f64).collect();
        let mut out = vec![MaybeUninit::uninit(); lanes.numel()];
        let _ = for_each_block(lanes, [&x[..]], &mut out, lanes.len, |_, [rows], o| {
            for (r, orow) in rows.chunks(lanes.len).zip(o.chunks_mut(lanes.len)) {
                for (k, v) in orow.iter_mut().enumerate() {
                    *v = r[lanes.len - 1 - k];
                }
            }
        });
        // SAFETY: `for_each_block` writes every element of its output.
        let out: Vec<f64> = out.iter().map(|v| unsafe { v.assume_init() }).collect();
        for lane in 0..lanes.count() {
            for k in 0..lanes.len {
                assert_eq!(
                    out[lanes.index(lane, k)],
                    x[lanes.index(lane, lanes.len - 1 - k)]
                );
            }
        }
        // One output per lane: the lane's first element, in lane order.
        let mut firsts = vec![MaybeUninit::uninit(); lanes.count()];
        let _ = for_each_block(lanes, [&x[..]], &mut firsts, 1, |first, [rows], o| {
            for (j, v) in o.iter_mut().enumerate() {
                assert_eq!(rows[j * lanes.len], x[lanes.index(first + j, 0)]);
                *v = rows[j * lanes.len];
            }
        });
        for (lane, v) in firsts.iter().enumerate() {
            // SAFETY: `for_each_block` writes every element of its output.
            assert_eq!(unsafe { v.assume_init() }, x[lanes.index(lane, 0)]);
        }
    }

    #[test]
    fn every_layout_round_trips() {
        reverse_lanes(&[3, 5], 1);
        reverse_lanes(&[3, 5], 0);
        reverse_lanes(&[2, 3, 4], 1);
        reverse_lanes(&[7], 0);
        // Larger than a block, and large enough to go parallel.
        reverse_lanes(&[300, 700], 1);
        reverse_lanes(&[3, 700, 50], 1);
        reverse_lanes(&[2, 5000], 0);
    }

    #[test]
    fn row_helpers() {
        let v: Vec<f64> = (0..19).map(|i| (i as f64 - 9.0).powi(2)).collect();
        assert_eq!(row_max(&v), 81.0);
        assert_eq!(row_sum(&v), v.iter().sum::<f64>());
        assert_eq!(row_dot(&v, &v), v.iter().map(|x| x * x).sum::<f64>());
        assert_eq!(row_max::<f32>(&[]), f32::NEG_INFINITY);
    }
}

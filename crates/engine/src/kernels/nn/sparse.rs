//! Row gather/scatter for `embedding`, and seeded dropout masks.
//!
//! Dropout draws element `i`'s keep decision from output `i` of a
//! SplitMix64 stream seeded with `seed` (a counter-based generator: any
//! element's draw is computed directly from `(seed, i)`), so a mask is the
//! same for a given seed whatever the thread count or chunking, and the
//! backward pass reproduces it without storing it.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::lanes::init;
use crate::kernels::parallel::{for_each_chunk, for_each_part, should_parallelize};
use crate::tensor::{Element, Filled};

/// Output `i` of the SplitMix64 sequence seeded with `seed`: uniform over `u64`.
#[inline(always)]
pub fn splitmix64(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The draw below which an element is dropped, for drop probability `p` in `[0, 1)`.
#[inline]
pub fn drop_threshold(p: f64) -> u64 {
    // 2^64 * p, saturating; p < 1 keeps it below u64::MAX.
    (p * 18_446_744_073_709_551_616.0) as u64
}

/// Whether dropout with `seed` and drop probability `p` (in `[0, 1)`) keeps element `index`.
///
/// ```text
/// use retrograd::kernels::nn::sparse::keeps;
/// let kept = (0..10_000).filter(|&i| keeps(7, 0.3, i)).count();
/// assert!((6_800..7_200).contains(&kept));
/// assert_eq!(keeps(7, 0.3, 42), keeps(7, 0.3, 42));
/// ```
#[inline]
pub fn keeps(seed: u64, p: f64, index: u64) -> bool {
    splitmix64(seed, index) >= drop_threshold(p)
}

/// `out[i] = x[i] * scale` where element `i` is kept, else 0 (drop
/// probability `p` in `[0, 1)`). Writes every element of `out` (and panics
/// if `x` is shorter).
pub fn dropout<'o, T: Element>(
    x: &[T],
    p: f64,
    seed: u64,
    scale: T,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    let threshold = drop_threshold(p);
    for_each_chunk(out, |off, chunk| {
        let x = &x[off..off + chunk.len()];
        for (j, (o, &v)) in chunk.iter_mut().zip(x).enumerate() {
            let kept = splitmix64(seed, (off + j) as u64) >= threshold;
            o.write(if kept { v * scale } else { T::zero() });
        }
    });
    // SAFETY: every chunk of `out` is written in full above.
    unsafe { Filled::assume(out) }
}

/// `out[k] = weight[indices[k]]` row by row (`d` columns); zero rows where
/// `zero_row` says so (the padding rows of a masked gather). Writes every
/// element of `out`, which must hold `indices.len()` rows: each row is
/// zeroed or copied from a `d`-element slice of `weight`.
pub fn gather_rows<'o, T: Element>(
    weight: &[T],
    d: usize,
    indices: &[usize],
    zero_row: Option<usize>,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    assert_eq!(out.len(), indices.len() * d, "one output row per index");
    if d == 0 {
        // SAFETY: `out` is empty.
        return unsafe { Filled::assume(out) };
    }
    let copy = |(o, &idx): (&mut [MaybeUninit<T>], &usize)| {
        if Some(idx) == zero_row {
            o.iter_mut().for_each(|v| {
                v.write(T::zero());
            });
        } else {
            for (v, &w) in o.iter_mut().zip(&weight[idx * d..(idx + 1) * d]) {
                v.write(w);
            }
        }
    };
    if should_parallelize(out.len()) {
        out.par_chunks_mut(d).zip(indices).for_each(copy);
    } else {
        out.chunks_mut(d).zip(indices).for_each(copy);
    }
    // SAFETY: `out` is `indices.len()` rows of `d`, and each is zeroed or
    // copied in full.
    unsafe { Filled::assume(out) }
}

/// Scatter-add: `out[indices[k]] += g[k]` row by row into a zero `[rows, d]`,
/// skipping `skip_row` (the padding row). For large inputs the rows are
/// split among threads, each scanning every index for the rows it owns, so
/// every row is summed in index order whatever the thread count. Writes
/// every element of `out` (zeroed first).
pub fn scatter_add_rows<'o, T: Element>(
    g: &[T],
    d: usize,
    indices: &[usize],
    rows: usize,
    skip_row: Option<usize>,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    let zeros = init(out);
    if d != 0 && rows != 0 {
        add_rows(g, d, indices, rows, skip_row, zeros);
    }
    // SAFETY: `init` wrote every element.
    unsafe { Filled::assume(out) }
}

/// The adds of [`scatter_add_rows`] into its zeroed output.
fn add_rows<T: Element>(
    g: &[T],
    d: usize,
    indices: &[usize],
    rows: usize,
    skip_row: Option<usize>,
    out: &mut [T],
) {
    let add = |first_row: usize, part: &mut [T]| {
        let owned = first_row..first_row + part.len() / d;
        for (k, &idx) in indices.iter().enumerate() {
            if owned.contains(&idx) && Some(idx) != skip_row {
                let dst = &mut part[(idx - first_row) * d..(idx - first_row + 1) * d];
                for (o, &v) in dst.iter_mut().zip(&g[k * d..(k + 1) * d]) {
                    *o += v;
                }
            }
        }
    };
    let threads = rayon::current_num_threads();
    let parallel = should_parallelize(g.len()) && threads > 1;
    for_each_part(out, rows.div_ceil(threads), d, parallel, add);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testing::assume_filled as collect;

    #[test]
    fn dropout_is_reproducible_and_unbiased() {
        let n = 200_000;
        let x = vec![1.0f32; n];
        let run = |seed| {
            let mut out = vec![MaybeUninit::uninit(); n];
            let _ = dropout(&x, 0.25, seed, 1.0 / 0.75, &mut out);
            collect(out)
        };
        let (a, b, c) = (run(3), run(3), run(4));
        assert_eq!(a, b);
        assert_ne!(a, c);
        let kept = a.iter().filter(|&&v| v != 0.0).count() as f64 / n as f64;
        assert!((kept - 0.75).abs() < 0.005, "{kept}");
        let mean = a.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        assert!((mean - 1.0).abs() < 0.01);
        // Element i's decision is `keeps(seed, p, i)`, also on the parallel path.
        for i in [0, 1, 65_537, n - 1] {
            assert_eq!(a[i] != 0.0, keeps(3, 0.25, i as u64));
        }
    }

    #[test]
    fn gather_and_scatter_are_transposes() {
        let w: Vec<f64> = (0..12).map(f64::from).collect(); // [4, 3]
        let idx = [2usize, 0, 2, 3];
        let mut out = vec![MaybeUninit::uninit(); 12];
        let _ = gather_rows(&w, 3, &idx, None, &mut out);
        assert_eq!(
            collect(out),
            vec![6., 7., 8., 0., 1., 2., 6., 7., 8., 9., 10., 11.]
        );
        let g: Vec<f64> = (0..12).map(|v| v as f64 * 0.5).collect();
        let mut s = vec![MaybeUninit::uninit(); 12];
        let _ = scatter_add_rows(&g, 3, &idx, 4, Some(3), &mut s);
        // Row 2 gets rows 0 and 2 of g; row 3 (padding) is skipped.
        assert_eq!(
            collect(s),
            vec![1.5, 2., 2.5, 0., 0., 0., 3., 4., 5., 0., 0., 0.]
        );
    }

    #[test]
    fn parallel_scatter_matches_serial() {
        let (rows, d, n) = (37, 64, 3000);
        let idx: Vec<usize> = (0..n).map(|k| (k * 7919) % rows).collect();
        let g: Vec<f64> = (0..n * d).map(|v| (v % 13) as f64).collect();
        let mut out = vec![MaybeUninit::uninit(); rows * d];
        let _ = scatter_add_rows(&g, d, &idx, rows, None, &mut out);
        let out = collect(out);
        let mut expect = vec![0.0; rows * d];
        for (k, &i) in idx.iter().enumerate() {
            for j in 0..d {
                expect[i * d + j] += g[k * d + j];
            }
        }
        assert_eq!(out, expect);
    }
}

/// The examples in this file's docs, run as unit tests (the module is
/// private to the engine, so rustdoc cannot run them as doctests).
#[cfg(test)]
mod doc_examples {
    #[test]
    fn keeps() -> crate::Result<()> {
        use crate::kernels::nn::sparse::keeps;
        let kept = (0..10_000).filter(|&i| keeps(7, 0.3, i)).count();
        assert!((6_800..7_200).contains(&kept));
        assert_eq!(keeps(7, 0.3, 42), keeps(7, 0.3, 42));
        Ok(())
    }
}

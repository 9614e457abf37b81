//! Layer normalisation over rows of `m` contiguous elements (the trailing
//! `normalized_shape` dims): forward, and the fused backward for the input
//! and for the weight.
//!
//! Statistics are two-pass per row (mean, then the mean squared deviation)
//! accumulated in f64: rows are in cache for the second pass, and the
//! one-pass `E[x²] - E[x]²` loses everything when the mean is large. The
//! backward recomputes them rather than saving them (one extra pass over a
//! row already being read). Row loops run inside `kernels::simd::wide`, so
//! their f64 sums and f32 stores use the widest vectors the CPU has (same
//! operations in the same order: the same bits at every width).

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::kernels::parallel::{ordered_reduce, should_parallelize};
use crate::kernels::simd::wide;
use crate::tensor::Element;

/// Rows per parallel task.
const ROWS_PER_TASK: usize = 64;

/// `Σ f(a[i], b[i])` in f64 with eight independent accumulators: a single
/// running sum is a chain of dependent adds (4 cycles each), which made
/// these reductions latency-bound; eight chains vectorise.
#[inline(always)]
pub(crate) fn sum2<T: Element>(a: &[T], b: &[T], f: impl Fn(T, T) -> f64) -> f64 {
    let mut acc = [0.0f64; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..8 {
            acc[j] += f(x[j], y[j]);
        }
    }
    let tail: f64 = ra.iter().zip(rb).map(|(&x, &y)| f(x, y)).sum();
    (acc[0] + acc[4]) + (acc[1] + acc[5]) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// `a = g * w`, or `a = g` without a weight: a normalisation's gradient
/// through its affine weight, one row.
#[inline(always)]
pub(crate) fn weighted_grad<T: Element>(a: &mut [T], g: &[T], w: Option<&[T]>) {
    match w {
        Some(w) => a
            .iter_mut()
            .zip(g.iter().zip(w))
            .for_each(|(av, (&gv, &wv))| *av = gv * wv),
        None => a.copy_from_slice(g),
    }
}

/// `(mean, 1 / sqrt(var + eps))` of a row, biased variance.
#[inline(always)]
pub fn row_stats<T: Element>(row: &[T], eps: f64) -> (f64, f64) {
    let n = row.len() as f64;
    let mean = sum2(row, row, |v, _| v.to_f64()) / n;
    let var = sum2(row, row, |v, _| {
        let d = v.to_f64() - mean;
        d * d
    }) / n;
    (mean, 1.0 / (var + eps).sqrt())
}

/// Runs `f(row_index, out_rows)` over groups of rows of `out` (`m` per
/// row), in parallel when large; every element of `out` is in exactly one
/// group.
pub(crate) fn for_rows<T: Element>(
    out: &mut [MaybeUninit<T>],
    m: usize,
    f: impl Fn(usize, &mut [MaybeUninit<T>]) + Sync + Send,
) {
    if m == 0 {
        assert!(out.is_empty(), "rows of no elements cannot cover an output");
        return;
    }
    if should_parallelize(out.len()) {
        out.par_chunks_mut(m * ROWS_PER_TASK)
            .enumerate()
            .for_each(|(i, c)| f(i * ROWS_PER_TASK, c));
    } else {
        f(0, out);
    }
}

/// `y = (x - mean) * rstd * w + b` per row of `m` elements. Writes every
/// element of `out`: each row in full, from `m`-element slices of `x`, `w`
/// and `b` (it panics if one is short).
pub fn layer_norm<T: Element>(
    x: &[T],
    m: usize,
    w: Option<&[T]>,
    b: Option<&[T]>,
    eps: f64,
    out: &mut [MaybeUninit<T>],
) {
    let (w, b) = (w.map(|w| &w[..m]), b.map(|b| &b[..m]));
    for_rows(out, m, |first, chunk| {
        wide(
            #[inline(always)]
            || {
                for (r, o) in chunk.chunks_mut(m).enumerate() {
                    let row = &x[(first + r) * m..(first + r + 1) * m];
                    let (mean, rstd) = row_stats(row, eps);
                    // Centred in f64: an f32 mean of large values would round away the deviations.
                    let xhat = |v: T| T::from_f64((v.to_f64() - mean) * rstd);
                    // One loop per affine case, so none of them branches per element.
                    match (w, b) {
                        (None, None) => o.iter_mut().zip(row).for_each(|(d, &v)| {
                            d.write(xhat(v));
                        }),
                        (Some(w), None) => {
                            o.iter_mut().zip(row).zip(w).for_each(|((d, &v), &wv)| {
                                d.write(xhat(v) * wv);
                            })
                        }
                        (None, Some(b)) => {
                            o.iter_mut().zip(row).zip(b).for_each(|((d, &v), &bv)| {
                                d.write(xhat(v) + bv);
                            })
                        }
                        (Some(w), Some(b)) => o.iter_mut().zip(row).zip(w.iter().zip(b)).for_each(
                            |((d, &v), (&wv, &bv))| {
                                d.write(xhat(v) * wv + bv);
                            },
                        ),
                    }
                }
            },
        )
    });
}

/// The gradient with respect to the input: per row,
/// `rstd * (a - mean(a) - x̂ mean(a x̂))` with `a = g w` (or `g`). Writes
/// every element of `out`: each row in full, zipped with `m`-element `a`
/// and row of `x`.
pub fn layer_norm_backward<T: Element>(
    g: &[T],
    x: &[T],
    m: usize,
    w: Option<&[T]>,
    eps: f64,
    out: &mut [MaybeUninit<T>],
) {
    for_rows(out, m, |first, chunk| {
        wide(
            #[inline(always)]
            || {
                let mut a = vec![T::zero(); m];
                for (r, o) in chunk.chunks_mut(m).enumerate() {
                    let span = (first + r) * m..(first + r + 1) * m;
                    let (row, grow) = (&x[span.clone()], &g[span]);
                    let (mean, rstd) = row_stats(row, eps);
                    weighted_grad(&mut a, grow, w);
                    let sum_a = sum2(&a, &a, |v, _| v.to_f64());
                    let sum_ax = sum2(&a, row, |av, xv| av.to_f64() * (xv.to_f64() - mean) * rstd);
                    let n = m as f64;
                    let (mean_a, mean_ax) = (T::from_f64(sum_a / n), T::from_f64(sum_ax / n));
                    let rstd_t = T::from_f64(rstd);
                    for ((d, &av), &xv) in o.iter_mut().zip(&a).zip(row) {
                        let xhat = T::from_f64((xv.to_f64() - mean) * rstd);
                        d.write(rstd_t * (av - mean_a - xhat * mean_ax));
                    }
                }
            },
        )
    });
}

/// The gradient with respect to the weight: `Σ_rows g x̂`, `m` values.
pub fn layer_norm_weight_backward<T: Element>(g: &[T], x: &[T], m: usize, eps: f64) -> Vec<T> {
    if m == 0 {
        return Vec::new();
    }
    let rows = x.len() / m;
    let partial = |range: std::ops::Range<usize>| -> Vec<f64> {
        let mut acc = vec![0.0f64; m];
        wide(
            #[inline(always)]
            || {
                for r in range {
                    let (row, grow) = (&x[r * m..(r + 1) * m], &g[r * m..(r + 1) * m]);
                    let (mean, rstd) = row_stats(row, eps);
                    for ((a, &gv), &xv) in acc.iter_mut().zip(grow).zip(row) {
                        *a += gv.to_f64() * (xv.to_f64() - mean) * rstd;
                    }
                }
            },
        );
        acc
    };
    let acc = if should_parallelize(x.len()) {
        // One partial per thread over a fixed block of rows, merged in order:
        // the same bits on every run (see `ordered_reduce`).
        let tasks = rows
            .div_ceil(ROWS_PER_TASK)
            .min(rayon::current_num_threads())
            .max(1);
        let per_task = rows.div_ceil(tasks);
        ordered_reduce(
            tasks,
            |t| partial(t * per_task..((t + 1) * per_task).min(rows)),
            |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                a
            },
        )
        .unwrap_or_else(|| vec![0.0; m])
    } else {
        partial(0..rows)
    };
    acc.into_iter().map(T::from_f64).collect()
}

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

use crate::kernels::parallel::should_parallelize;
use crate::kernels::simd::wide;
use crate::tensor::{Element, Filled};

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
pub fn layer_norm<'o, T: Element>(
    x: &[T],
    m: usize,
    w: Option<&[T]>,
    b: Option<&[T]>,
    eps: f64,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
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
    // SAFETY: every row of `out` is written in full above (`for_rows` hands
    // out each row exactly once).
    unsafe { Filled::assume(out) }
}

/// [`layer_norm`] of `a + b` (equal lengths, rows of `m`) without storing
/// the sum: each row is added into its output row, then normalised there
/// while it is in L1 (a residual connection and its post-norm, ONNX `Add`
/// then `LayerNormalization`, at import). The sum rounds to `T` first, so
/// the result has the bits of adding, then `layer_norm`.
pub fn add_layer_norm<'o, T: Element>(
    a: &[T],
    b: &[T],
    m: usize,
    w: Option<&[T]>,
    bias: Option<&[T]>,
    eps: f64,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    assert!(
        a.len() == out.len() && b.len() == out.len(),
        "operands of the output's length"
    );
    let (w, bias) = (w.map(|w| &w[..m]), bias.map(|b| &b[..m]));
    for_rows(out, m, |first, chunk| {
        wide(
            #[inline(always)]
            || {
                for (r, o) in chunk.chunks_mut(m).enumerate() {
                    let at = (first + r) * m;
                    for ((d, &x), &y) in o.iter_mut().zip(&a[at..at + m]).zip(&b[at..at + m]) {
                        d.write(x + y);
                    }
                    // SAFETY: every element of the row was written just above.
                    let row = unsafe { &mut *(o as *mut [MaybeUninit<T>] as *mut [T]) };
                    let (mean, rstd) = row_stats(row, eps);
                    let xhat = |v: T| T::from_f64((v.to_f64() - mean) * rstd);
                    match (w, bias) {
                        (None, None) => row.iter_mut().for_each(|v| *v = xhat(*v)),
                        (Some(w), None) => row
                            .iter_mut()
                            .zip(w)
                            .for_each(|(v, &wv)| *v = xhat(*v) * wv),
                        (None, Some(b)) => row
                            .iter_mut()
                            .zip(b)
                            .for_each(|(v, &bv)| *v = xhat(*v) + bv),
                        (Some(w), Some(b)) => row
                            .iter_mut()
                            .zip(w.iter().zip(b))
                            .for_each(|(v, (&wv, &bv))| *v = xhat(*v) * wv + bv),
                    }
                }
            },
        )
    });
    // SAFETY: every row of `out` is written in full above (`for_rows` hands
    // out each row exactly once).
    unsafe { Filled::assume(out) }
}

/// The gradient with respect to the input: per row,
/// `rstd * (a - mean(a) - x̂ mean(a x̂))` with `a = g w` (or `g`). Writes
/// every element of `out`: each row in full, zipped with `m`-element `a`
/// and row of `x`.
pub fn layer_norm_backward<'o, T: Element>(
    g: &[T],
    x: &[T],
    m: usize,
    w: Option<&[T]>,
    eps: f64,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    for_rows(out, m, |first, chunk| {
        wide(
            #[inline(always)]
            || {
                let mut a = vec![T::zero(); m];
                for (r, o) in chunk.chunks_mut(m).enumerate() {
                    let span = (first + r) * m..(first + r + 1) * m;
                    input_grad_row(&g[span.clone()], &x[span], w, eps, &mut a, o);
                }
            },
        )
    });
    // SAFETY: every row of `out` is written in full above (`for_rows` hands
    // out each row exactly once).
    unsafe { Filled::assume(out) }
}

/// One row of [`layer_norm_backward`] (`a` is scratch of `m` elements);
/// returns the row's `(mean, rstd)`.
#[inline(always)]
fn input_grad_row<T: Element>(
    grow: &[T],
    row: &[T],
    w: Option<&[T]>,
    eps: f64,
    a: &mut [T],
    o: &mut [MaybeUninit<T>],
) -> (f64, f64) {
    let (mean, rstd) = row_stats(row, eps);
    weighted_grad(a, grow, w);
    let sum_a = sum2(a, a, |v, _| v.to_f64());
    let sum_ax = sum2(a, row, |av, xv| av.to_f64() * (xv.to_f64() - mean) * rstd);
    let n = row.len() as f64;
    let (mean_a, mean_ax) = (T::from_f64(sum_a / n), T::from_f64(sum_ax / n));
    let rstd_t = T::from_f64(rstd);
    for ((d, &av), &xv) in o.iter_mut().zip(&*a).zip(row) {
        let xhat = T::from_f64((xv.to_f64() - mean) * rstd);
        d.write(rstd_t * (av - mean_a - xhat * mean_ax));
    }
    (mean, rstd)
}

/// `acc += g x̂` for one row, in f64: the weight gradient's share of it.
#[inline(always)]
fn weight_grad_row<T: Element>(acc: &mut [f64], grow: &[T], row: &[T], mean: f64, rstd: f64) {
    for ((a, &gv), &xv) in acc.iter_mut().zip(grow).zip(row) {
        *a += gv.to_f64() * (xv.to_f64() - mean) * rstd;
    }
}

/// The fixed blocks of rows the weight gradient's partial sums run over,
/// as `(tasks, rows per task)`: by thread count when the input is large
/// (so the merged sum has the same bits every run), else one block.
fn weight_blocks(len: usize, rows: usize) -> (usize, usize) {
    if should_parallelize(len) {
        let tasks = rows
            .div_ceil(ROWS_PER_TASK)
            .min(rayon::current_num_threads())
            .max(1);
        (tasks, rows.div_ceil(tasks))
    } else {
        (1, rows)
    }
}

/// Adds the partial sums of the blocks, in block order.
fn merge_partials<T: Element>(parts: Vec<Vec<f64>>, m: usize) -> Vec<T> {
    let acc = parts
        .into_iter()
        .reduce(|mut a, b| {
            a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
            a
        })
        .unwrap_or_else(|| vec![0.0; m]);
    acc.into_iter().map(T::from_f64).collect()
}

/// The gradient with respect to the weight: `Σ_rows g x̂`, `m` values.
pub fn layer_norm_weight_backward<T: Element>(g: &[T], x: &[T], m: usize, eps: f64) -> Vec<T> {
    if m == 0 {
        return Vec::new();
    }
    let rows = x.len() / m;
    let (tasks, per_task) = weight_blocks(x.len(), rows);
    let partial = |t: usize| -> Vec<f64> {
        let mut acc = vec![0.0f64; m];
        wide(
            #[inline(always)]
            || {
                for r in (t * per_task)..((t + 1) * per_task).min(rows) {
                    let (row, grow) = (&x[r * m..(r + 1) * m], &g[r * m..(r + 1) * m]);
                    let (mean, rstd) = row_stats(row, eps);
                    weight_grad_row(&mut acc, grow, row, mean, rstd);
                }
            },
        );
        acc
    };
    // Fixed blocks merged in order: the same bits on every run (see
    // `ordered_reduce`).
    let parts = if tasks > 1 {
        (0..tasks).into_par_iter().map(partial).collect()
    } else {
        vec![partial(0)]
    };
    merge_partials(parts, m)
}

/// [`layer_norm_backward`] with a weight and [`layer_norm_weight_backward`]
/// in one sweep over the rows: each row's statistics are computed once and
/// `x` and `g` read once for both. Same bits as the two apart (the same
/// row arithmetic, the weight's partial sums over the same blocks merged
/// in the same order). Writes every element of `out`; returns the weight's
/// gradient.
pub fn layer_norm_backward_with_weight<'o, T: Element>(
    g: &[T],
    x: &[T],
    m: usize,
    w: &[T],
    eps: f64,
    out: &'o mut [MaybeUninit<T>],
) -> (Filled<'o>, Vec<T>) {
    if m == 0 {
        assert!(out.is_empty(), "rows of no elements cannot cover an output");
        // SAFETY: `out` is empty.
        return (unsafe { Filled::assume(out) }, Vec::new());
    }
    let rows = x.len() / m;
    let (tasks, per_task) = weight_blocks(x.len(), rows);
    let block = |t: usize, o: &mut [MaybeUninit<T>]| -> Vec<f64> {
        let mut acc = vec![0.0f64; m];
        wide(
            #[inline(always)]
            || {
                let mut a = vec![T::zero(); m];
                let first = t * per_task;
                for (r, orow) in o.chunks_mut(m).enumerate() {
                    let span = (first + r) * m..(first + r + 1) * m;
                    let (row, grow) = (&x[span.clone()], &g[span]);
                    let (mean, rstd) = input_grad_row(grow, row, Some(w), eps, &mut a, orow);
                    weight_grad_row(&mut acc, grow, row, mean, rstd);
                }
            },
        );
        acc
    };
    // Block t owns rows t*per_task.. of `out`; a block past the last row
    // is empty and still contributes its zeros, as in the weight's own kernel.
    let parts = if tasks > 1 {
        let mut blocks: Vec<&mut [MaybeUninit<T>]> = Vec::with_capacity(tasks);
        let mut rest = &mut *out;
        for _ in 0..tasks {
            let take = (per_task * m).min(rest.len());
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(take);
            blocks.push(head);
            rest = tail;
        }
        blocks
            .into_par_iter()
            .enumerate()
            .map(|(t, o)| block(t, o))
            .collect()
    } else {
        vec![block(0, &mut *out)]
    };
    // SAFETY: the blocks cover `out` row by row, and each writes every row
    // it owns in full (`input_grad_row`).
    (unsafe { Filled::assume(out) }, merge_partials(parts, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adding then normalising, and the fused pass, give the same bits
    /// with and without the affine parts, over enough rows to go parallel.
    #[test]
    fn add_layer_norm_has_the_bits_of_add_then_layer_norm() {
        let (rows, m) = (300, 37);
        let wave = |i: usize, f: f32| ((i as f32 * f).sin() * 3.0) + (i % 7) as f32;
        let a: Vec<f32> = (0..rows * m).map(|i| wave(i, 0.37)).collect();
        let b: Vec<f32> = (0..rows * m).map(|i| wave(i, 1.91) * 0.5).collect();
        let w: Vec<f32> = (0..m).map(|i| 0.5 + i as f32 / m as f32).collect();
        let bias: Vec<f32> = (0..m).map(|i| i as f32 * 0.01 - 0.1).collect();
        let sum: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        for (w, bias) in [
            (None, None),
            (Some(&w[..]), None),
            (None, Some(&bias[..])),
            (Some(&w[..]), Some(&bias[..])),
        ] {
            let mut want = vec![MaybeUninit::uninit(); rows * m];
            let _ = layer_norm(&sum, m, w, bias, 1e-5, &mut want);
            let mut got = vec![MaybeUninit::uninit(); rows * m];
            let _ = add_layer_norm(&a, &b, m, w, bias, 1e-5, &mut got);
            let bits = |v: &[MaybeUninit<f32>]| {
                v.iter()
                    // SAFETY: both kernels write every element.
                    .map(|x| unsafe { x.assume_init() }.to_bits())
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                bits(&got),
                bits(&want),
                "w {}, bias {}",
                w.is_some(),
                bias.is_some()
            );
        }
    }
}

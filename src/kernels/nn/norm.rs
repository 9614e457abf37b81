//! Layer normalisation over rows of `m` contiguous elements (the trailing
//! `normalized_shape` dims): forward, and the fused backward for the input
//! and for the weight.
//!
//! Statistics are two-pass per row (mean, then the mean squared deviation)
//! accumulated in f64: rows are in cache for the second pass, and the
//! one-pass `E[x²] - E[x]²` loses everything when the mean is large. The
//! backward recomputes them rather than saving them (one extra pass over a
//! row already being read).

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::kernels::parallel::should_parallelize;
use crate::tensor::Element;

/// Rows per parallel task.
const ROWS_PER_TASK: usize = 64;

/// `(mean, 1 / sqrt(var + eps))` of a row, biased variance.
#[inline]
pub fn row_stats<T: Element>(row: &[T], eps: f64) -> (f64, f64) {
    let n = row.len() as f64;
    let mean = row.iter().map(|&v| v.to_f64()).sum::<f64>() / n;
    let var = row
        .iter()
        .map(|&v| {
            let d = v.to_f64() - mean;
            d * d
        })
        .sum::<f64>()
        / n;
    (mean, 1.0 / (var + eps).sqrt())
}

/// Runs `f(row_index, out_rows)` over groups of rows of `out` (`m` per row), in parallel when large.
fn for_rows<T: Element>(
    out: &mut [MaybeUninit<T>],
    m: usize,
    f: impl Fn(usize, &mut [MaybeUninit<T>]) + Sync + Send,
) {
    if m == 0 {
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

/// `y = (x - mean) * rstd * w + b` per row of `m` elements.
pub fn layer_norm<T: Element>(
    x: &[T],
    m: usize,
    w: Option<&[T]>,
    b: Option<&[T]>,
    eps: f64,
    out: &mut [MaybeUninit<T>],
) {
    for_rows(out, m, |first, chunk| {
        for (r, o) in chunk.chunks_mut(m).enumerate() {
            let row = &x[(first + r) * m..(first + r + 1) * m];
            let (mean, rstd) = row_stats(row, eps);
            for (j, (d, &v)) in o.iter_mut().zip(row).enumerate() {
                // Centred in f64: an f32 mean of large values would round away the deviations.
                let mut y = T::from_f64((v.to_f64() - mean) * rstd);
                if let Some(w) = w {
                    y *= w[j];
                }
                if let Some(b) = b {
                    y += b[j];
                }
                d.write(y);
            }
        }
    });
}

/// The gradient with respect to the input: per row,
/// `rstd * (a - mean(a) - x̂ mean(a x̂))` with `a = g w` (or `g`).
pub fn layer_norm_backward<T: Element>(
    g: &[T],
    x: &[T],
    m: usize,
    w: Option<&[T]>,
    eps: f64,
    out: &mut [MaybeUninit<T>],
) {
    for_rows(out, m, |first, chunk| {
        let mut a = vec![T::zero(); m];
        for (r, o) in chunk.chunks_mut(m).enumerate() {
            let span = (first + r) * m..(first + r + 1) * m;
            let (row, grow) = (&x[span.clone()], &g[span]);
            let (mean, rstd) = row_stats(row, eps);
            let (mut sum_a, mut sum_ax) = (0.0f64, 0.0f64);
            for (j, ((av, &gv), &xv)) in a.iter_mut().zip(grow).zip(row).enumerate() {
                *av = match w {
                    Some(w) => gv * w[j],
                    None => gv,
                };
                let xhat = (xv.to_f64() - mean) * rstd;
                sum_a += av.to_f64();
                sum_ax += av.to_f64() * xhat;
            }
            let n = m as f64;
            let (mean_a, mean_ax) = (T::from_f64(sum_a / n), T::from_f64(sum_ax / n));
            let rstd_t = T::from_f64(rstd);
            for ((d, &av), &xv) in o.iter_mut().zip(&a).zip(row) {
                let xhat = T::from_f64((xv.to_f64() - mean) * rstd);
                d.write(rstd_t * (av - mean_a - xhat * mean_ax));
            }
        }
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
        for r in range {
            let (row, grow) = (&x[r * m..(r + 1) * m], &g[r * m..(r + 1) * m]);
            let (mean, rstd) = row_stats(row, eps);
            for ((a, &gv), &xv) in acc.iter_mut().zip(grow).zip(row) {
                *a += gv.to_f64() * (xv.to_f64() - mean) * rstd;
            }
        }
        acc
    };
    let acc = if should_parallelize(x.len()) {
        let tasks = rows.div_ceil(ROWS_PER_TASK);
        (0..tasks)
            .into_par_iter()
            .map(|t| partial(t * ROWS_PER_TASK..((t + 1) * ROWS_PER_TASK).min(rows)))
            .reduce_with(|mut a, b| {
                a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                a
            })
            .unwrap_or_else(|| vec![0.0; m])
    } else {
        partial(0..rows)
    };
    acc.into_iter().map(T::from_f64).collect()
}

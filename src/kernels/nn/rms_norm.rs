//! RMS normalisation over rows of `m` contiguous elements (the trailing
//! `normalized_shape` dims): `y = x / sqrt(mean(x²) + eps) * w`, and the
//! fused input gradient. Row statistics are accumulated in f64, as layer
//! norm's are; the backward recomputes them rather than saving them.

use std::mem::MaybeUninit;

use super::norm::{for_rows, sum2, weighted_grad};
use crate::tensor::{Element, Filled};

/// `1 / sqrt(mean(x²) + eps)` of a row.
#[inline]
pub fn row_rstd<T: Element>(row: &[T], eps: f64) -> f64 {
    let ms = sum2(row, row, |a, b| a.to_f64() * b.to_f64()) / row.len() as f64;
    1.0 / (ms + eps).sqrt()
}

/// `y = x * rstd * w` per row of `m` elements. Writes every element of
/// `out`: each row in full, from `m`-element slices of `x` and `w` (it
/// panics if one is short).
pub fn rms_norm<'o, T: Element>(
    x: &[T],
    m: usize,
    w: Option<&[T]>,
    eps: f64,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    let w = w.map(|w| &w[..m]);
    for_rows(out, m, |first, chunk| {
        for (r, o) in chunk.chunks_mut(m).enumerate() {
            let row = &x[(first + r) * m..(first + r + 1) * m];
            let rstd = row_rstd(row, eps);
            match w {
                None => o.iter_mut().zip(row).for_each(|(d, &v)| {
                    d.write(T::from_f64(v.to_f64() * rstd));
                }),
                Some(w) => o.iter_mut().zip(row).zip(w).for_each(|((d, &v), &wv)| {
                    d.write(T::from_f64(v.to_f64() * rstd) * wv);
                }),
            }
        }
    });
    // SAFETY: every row of `out` is written in full above (`for_rows` hands
    // out each row exactly once).
    unsafe { Filled::assume(out) }
}

/// The gradient with respect to the input: per row,
/// `rstd * (a - x̂ mean(a x̂))` with `a = g w` (or `g`), `x̂ = x rstd`.
/// Writes every element of `out`: each row in full.
pub fn rms_norm_backward<'o, T: Element>(
    g: &[T],
    x: &[T],
    m: usize,
    w: Option<&[T]>,
    eps: f64,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    for_rows(out, m, |first, chunk| {
        let mut a = vec![T::zero(); m];
        for (r, o) in chunk.chunks_mut(m).enumerate() {
            let span = (first + r) * m..(first + r + 1) * m;
            let (row, grow) = (&x[span.clone()], &g[span]);
            let rstd = row_rstd(row, eps);
            weighted_grad(&mut a, grow, w);
            let mean_ax = sum2(&a, row, |av, xv| av.to_f64() * xv.to_f64()) * rstd / m as f64;
            for ((d, &av), &xv) in o.iter_mut().zip(&a).zip(row) {
                let xhat = xv.to_f64() * rstd;
                d.write(T::from_f64(rstd * (av.to_f64() - xhat * mean_ax)));
            }
        }
    });
    // SAFETY: every row of `out` is written in full above (`for_rows` hands
    // out each row exactly once).
    unsafe { Filled::assume(out) }
}

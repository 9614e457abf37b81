//! RMS normalisation over rows of `m` contiguous elements (the trailing
//! `normalized_shape` dims): `y = x / sqrt(mean(x²) + eps) * w`, and the
//! fused input gradient. Row statistics are accumulated in f64, as layer
//! norm's are; the backward recomputes them rather than saving them.

use std::mem::MaybeUninit;

use super::norm::{weighted, write_rows};
use crate::kernels::f64x8::{for_octets, F64x8};
use crate::tensor::{Element, Filled};

/// `1 / sqrt(mean(x²) + eps)` of a row.
#[inline(always)]
fn row_rstd<L: F64x8, T: Element>(row: &[T], eps: f64) -> f64 {
    let mut s = L::splat(0.0);
    for_octets(
        row.len(),
        #[inline(always)]
        |c, n| {
            let x = L::load_part(&row[c..c + n]);
            s = s.add(x.mul(x));
        },
    );
    1.0 / (s.sum() / row.len() as f64 + eps).sqrt()
}

/// `y = x * rstd * w` per row of `m` elements, in f64 rounded once to `T`.
/// Writes every element of `out`: each row in full, from `m`-element
/// slices of `x` and `w` (it panics if one is short).
pub fn rms_norm<'o, T: Element>(
    x: &[T],
    m: usize,
    w: Option<&[T]>,
    eps: f64,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    let w = w.map(|w| &w[..m]);
    write_rows!(out, m, |L, r, o| {
        let row = &x[r * m..(r + 1) * m];
        let rstd = L::splat(row_rstd::<L, T>(row, eps));
        for_octets(
            m,
            #[inline(always)]
            |c, n| {
                let mut y = L::load_part(&row[c..c + n]).mul(rstd);
                if let Some(w) = w {
                    y = y.mul(L::load_part(&w[c..c + n]));
                }
                y.write_part(&mut o[c..c + n]);
            },
        );
    })
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
    let w = w.map(|w| &w[..m]);
    write_rows!(out, m, |L, r, o| {
        let span = r * m..(r + 1) * m;
        input_grad_row::<L, T>(&g[span.clone()], &x[span], w, eps, o);
    })
}

/// One row of [`rms_norm_backward`]: `Σ a x`, then the output.
#[inline(always)]
fn input_grad_row<L: F64x8, T: Element>(
    grow: &[T],
    row: &[T],
    w: Option<&[T]>,
    eps: f64,
    o: &mut [MaybeUninit<T>],
) {
    let m = row.len();
    let rstd = row_rstd::<L, T>(row, eps);
    let mut sum_ax = L::splat(0.0);
    for_octets(
        m,
        #[inline(always)]
        |c, n| {
            sum_ax = sum_ax.add(weighted::<L, T>(grow, w, c, n).mul(L::load_part(&row[c..c + n])));
        },
    );
    let mean_ax = L::splat(sum_ax.sum() * rstd / m as f64);
    let rstd = L::splat(rstd);
    for_octets(
        m,
        #[inline(always)]
        |c, n| {
            let xhat = L::load_part(&row[c..c + n]).mul(rstd);
            let a = weighted::<L, T>(grow, w, c, n);
            rstd.mul(a.sub(xhat.mul(mean_ax)))
                .write_part(&mut o[c..c + n]);
        },
    );
}

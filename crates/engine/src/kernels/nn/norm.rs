//! Layer normalisation over rows of `m` contiguous elements (the trailing
//! `normalized_shape` dims): forward, and the fused backward for the input
//! and for the weight.
//!
//! Statistics are two-pass per row (mean, then the mean squared deviation)
//! accumulated in f64: rows are in cache for the second pass, and the
//! one-pass `E[x²] - E[x]²` loses everything when the mean is large. The
//! backward recomputes them rather than saving them, in the same pass as
//! its own two sums. Rows are computed in f64 and rounded once to `T`, on
//! eight f64 lanes at the CPU's widest width (`kernels::f64x8`: the same
//! operations in the same order, so the same bits at every width).

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::kernels::f64x8::{for_octets, with_widest_f64x8, F64x8};
use crate::kernels::parallel::should_parallelize;
use crate::tensor::{Element, Filled};

/// Rows per parallel task.
const ROWS_PER_TASK: usize = 64;

/// The mean of a row.
#[inline(always)]
fn row_mean<L: F64x8, T: Element>(row: &[T]) -> f64 {
    let mut s = L::splat(0.0);
    for_octets(
        row.len(),
        #[inline(always)]
        |c, n| {
            s = s.add(L::load_part(&row[c..c + n]));
        },
    );
    s.sum() / row.len() as f64
}

/// `x - mean` over an octet of `n` elements, zero in the padding.
#[inline(always)]
pub(crate) fn deviation<L: F64x8>(x: L, mean: L, n: usize) -> L {
    let d = x.sub(mean);
    if n < 8 {
        d.mul(L::mask(n))
    } else {
        d
    }
}

/// `1 / sqrt(var + eps)` from a row's variance (biased).
#[inline(always)]
fn rstd_of(var: f64, eps: f64) -> f64 {
    1.0 / (var + eps).sqrt()
}

/// `(mean, 1 / sqrt(var + eps))` of a row, biased variance.
#[inline(always)]
fn row_stats_on<L: F64x8, T: Element>(row: &[T], eps: f64) -> (f64, f64) {
    let mean = row_mean::<L, T>(row);
    let mean_v = L::splat(mean);
    let mut v = L::splat(0.0);
    for_octets(
        row.len(),
        #[inline(always)]
        |c, n| {
            let d = deviation(L::load_part(&row[c..c + n]), mean_v, n);
            v = v.add(d.mul(d));
        },
    );
    (mean, rstd_of(v.sum() / row.len() as f64, eps))
}

/// `(mean, 1 / sqrt(var + eps))` of a row, biased variance.
pub fn row_stats<T: Element>(row: &[T], eps: f64) -> (f64, f64) {
    with_widest_f64x8!(L => row_stats_on::<L, T>(row, eps))
}

/// `out = (row - mean) * rstd * w + b` in f64, rounded once to `T`.
#[inline(always)]
fn normalize_row<L: F64x8, T: Element>(
    row: &[T],
    (mean, rstd): (f64, f64),
    w: Option<&[T]>,
    b: Option<&[T]>,
    out: &mut [MaybeUninit<T>],
) {
    let m = row.len();
    let (w, b, out) = (w.map(|w| &w[..m]), b.map(|b| &b[..m]), &mut out[..m]);
    let (mean_v, rstd_v) = (L::splat(mean), L::splat(rstd));
    for_octets(
        m,
        #[inline(always)]
        |c, n| {
            let mut y = L::load_part(&row[c..c + n]).sub(mean_v).mul(rstd_v);
            // The affine cases branch per octet, the same way every octet (predicted).
            if let Some(w) = w {
                y = y.mul(L::load_part(&w[c..c + n]));
            }
            if let Some(b) = b {
                y = y.add(L::load_part(&b[c..c + n]));
            }
            y.write_part(&mut out[c..c + n]);
        },
    );
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

/// The norms' row skeleton, written once for layer norm and RMS norm,
/// forward and backward: runs `$body` for every row of `$out` (`$m`
/// elements each), in groups of rows in parallel when large
/// ([`for_rows`]), with `$L` the widest [`F64x8`] the CPU has, `$r` the
/// row's index and `$o` its output row, and `$scratch` (when named) made
/// once per group of rows by `$init`. `$body` writes every element of
/// `$o`; the macro then returns `$out` as [`Filled`]. A macro rather than
/// a function taking a closure: the body is generic over `$L`, and it stays
/// inline in the row loop, as each kernel wrote it before.
macro_rules! write_rows {
    ($out:expr, $m:expr, |$L:ident, $r:ident, $o:ident $(; $scratch:ident = $init:expr;)?| $body:expr) => {{
        let (out, m): (&mut [std::mem::MaybeUninit<_>], usize) = ($out, $m);
        $crate::kernels::nn::norm::for_rows(out, m, |first, chunk| {
            $crate::kernels::f64x8::with_widest_f64x8!($L => {
                $(let mut $scratch = $init;)?
                for (k, $o) in chunk.chunks_mut(m).enumerate() {
                    let $r = first + k;
                    $body
                }
            })
        });
        // SAFETY: every row of `out` is written in full by `$body` (the
        // macro's contract; `for_rows` hands out each row exactly once).
        unsafe { $crate::tensor::Filled::assume(out) }
    }};
}
pub(crate) use write_rows;

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
    write_rows!(out, m, |L, r, o| {
        let row = &x[r * m..(r + 1) * m];
        let stats = row_stats_on::<L, T>(row, eps);
        normalize_row::<L, T>(row, stats, w, b, o);
    })
}

/// [`layer_norm`] of `a + b` (equal lengths, rows of `m`) without storing
/// the sum: each row is added into a scratch row, then normalised from it
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
    write_rows!(out, m, |L, r, o; sum = vec![T::zero(); m];| {
        let at = r * m;
        for ((d, &x), &y) in sum.iter_mut().zip(&a[at..at + m]).zip(&b[at..at + m]) {
            *d = x + y;
        }
        let stats = row_stats_on::<L, T>(&sum, eps);
        normalize_row::<L, T>(&sum, stats, w, bias, o);
    })
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
    write_rows!(out, m, |L, r, o| {
        let span = r * m..(r + 1) * m;
        input_grad_row::<L, T>(&g[span.clone()], &x[span], w, eps, o, None);
    })
}

/// One row of [`layer_norm_backward`], in three passes: the mean; the
/// variance with `Σ a` and `Σ a (x - mean)` (so `mean(a x̂)` is `rstd` times
/// the last over `m`); then the output, adding `g x̂` to `weight_acc` when
/// given (the weight's gradient, [`weight_grad_row`]'s arithmetic).
#[inline(always)]
fn input_grad_row<L: F64x8, T: Element>(
    grow: &[T],
    row: &[T],
    w: Option<&[T]>,
    eps: f64,
    o: &mut [MaybeUninit<T>],
    mut weight_acc: Option<&mut [f64]>,
) {
    let m = row.len();
    let (grow, w, o) = (&grow[..m], w.map(|w| &w[..m]), &mut o[..m]);
    let mean = row_mean::<L, T>(row);
    let mean_v = L::splat(mean);
    let (mut var, mut sum_a, mut sum_ad) = (L::splat(0.0), L::splat(0.0), L::splat(0.0));
    for_octets(
        m,
        #[inline(always)]
        |c, n| {
            let d = deviation(L::load_part(&row[c..c + n]), mean_v, n);
            let a = weighted::<L, T>(grow, w, c, n);
            var = var.add(d.mul(d));
            sum_a = sum_a.add(a);
            sum_ad = sum_ad.add(a.mul(d));
        },
    );
    let n = m as f64;
    let rstd = rstd_of(var.sum() / n, eps);
    let (mean_a, mean_ax) = (sum_a.sum() / n, sum_ad.sum() / n * rstd);
    let (rstd_v, mean_a_v, mean_ax_v) = (L::splat(rstd), L::splat(mean_a), L::splat(mean_ax));
    for_octets(
        m,
        #[inline(always)]
        |c, n| {
            let xhat = L::load_part(&row[c..c + n]).sub(mean_v).mul(rstd_v);
            let a = weighted::<L, T>(grow, w, c, n);
            rstd_v
                .mul(a.sub(mean_a_v).sub(xhat.mul(mean_ax_v)))
                .write_part(&mut o[c..c + n]);
            if let Some(acc) = weight_acc.as_deref_mut() {
                let acc = &mut acc[c..c + n];
                L::load_part(acc)
                    .add(L::load_part(&grow[c..c + n]).mul(xhat))
                    .store_part(acc);
            }
        },
    );
}

/// `a = g w` (or `g`) over the octet at `c` of `n` elements. A function,
/// not a closure: a closure is compiled apart from the caller's
/// `target_feature`, and calls the lanes' intrinsics instead of inlining them.
#[inline(always)]
pub(crate) fn weighted<L: F64x8, T: Element>(g: &[T], w: Option<&[T]>, c: usize, n: usize) -> L {
    let g = L::load_part(&g[c..c + n]);
    match w {
        Some(w) => g.mul(L::load_part(&w[c..c + n])),
        None => g,
    }
}

/// `acc += g x̂` for one row, in f64: the weight gradient's share of it.
#[inline(always)]
fn weight_grad_row<L: F64x8, T: Element>(acc: &mut [f64], grow: &[T], row: &[T], eps: f64) {
    let (mean, rstd) = row_stats_on::<L, T>(row, eps);
    let m = row.len();
    let (acc, grow) = (&mut acc[..m], &grow[..m]);
    let (mean_v, rstd_v) = (L::splat(mean), L::splat(rstd));
    for_octets(
        m,
        #[inline(always)]
        |c, n| {
            let xhat = L::load_part(&row[c..c + n]).sub(mean_v).mul(rstd_v);
            let acc = &mut acc[c..c + n];
            L::load_part(acc)
                .add(L::load_part(&grow[c..c + n]).mul(xhat))
                .store_part(acc);
        },
    );
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
        with_widest_f64x8!(L => {
            for r in (t * per_task)..((t + 1) * per_task).min(rows) {
                let (row, grow) = (&x[r * m..(r + 1) * m], &g[r * m..(r + 1) * m]);
                weight_grad_row::<L, T>(&mut acc, grow, row, eps);
            }
        });
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
        with_widest_f64x8!(L => {
            let first = t * per_task;
            for (r, orow) in o.chunks_mut(m).enumerate() {
                let span = (first + r) * m..(first + r + 1) * m;
                let (row, grow) = (&x[span.clone()], &g[span]);
                input_grad_row::<L, T>(grow, row, Some(w), eps, orow, Some(&mut acc));
            }
        });
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
    use crate::kernels::f64x8::{at_every_width, AtEveryWidth};

    /// Every row kernel on `rows` rows of `m`: the forward (with weight and
    /// bias), the input gradient with the weight's accumulated alongside,
    /// and the weight's gradient alone, as f64 bits. Checks the two weight
    /// gradients agree bit for bit, and the outputs match the textbook
    /// formulas, computed plainly in f64, within `tol`.
    fn row_results<L: F64x8, T: Element>(
        x: &[T],
        g: &[T],
        w: &[T],
        m: usize,
        tol: f64,
    ) -> Vec<u64> {
        let b: Vec<T> = w.iter().map(|&v| v * T::from_f64(0.25)).collect();
        let (mut bits, eps) = (vec![], 1e-5);
        let (mut fused_acc, mut acc) = (vec![0.0; m], vec![0.0; m]);
        let f = |v: &[T]| v.iter().map(|&v| v.to_f64()).collect::<Vec<f64>>();
        for (row, grow) in x.chunks(m).zip(g.chunks(m)) {
            let (xs, gs, ws, bs) = (f(row), f(grow), f(w), f(&b));
            let n = m as f64;
            let mean = xs.iter().sum::<f64>() / n;
            let var = xs.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
            let rstd = 1.0 / (var + eps).sqrt();
            let xhat: Vec<f64> = xs.iter().map(|v| (v - mean) * rstd).collect();
            let a: Vec<f64> = gs.iter().zip(&ws).map(|(g, w)| g * w).collect();
            let mean_a = a.iter().sum::<f64>() / n;
            let mean_ax = a.iter().zip(&xhat).map(|(a, h)| a * h).sum::<f64>() / n;
            let mut check = |got: &[MaybeUninit<T>], want: &dyn Fn(usize) -> f64| {
                for (i, v) in got.iter().enumerate() {
                    // SAFETY: the kernels write every element of the row.
                    let v = unsafe { v.assume_init() }.to_f64();
                    assert!(
                        (v - want(i)).abs() <= tol * (1.0 + want(i).abs()),
                        "{i}: {v} vs {}",
                        want(i)
                    );
                    bits.push(v.to_bits());
                }
            };
            let mut out = vec![MaybeUninit::uninit(); m];
            normalize_row::<L, T>(
                row,
                row_stats_on::<L, T>(row, eps),
                Some(w),
                Some(&b),
                &mut out,
            );
            check(&out, &|i| xhat[i] * ws[i] + bs[i]);
            input_grad_row::<L, T>(grow, row, Some(w), eps, &mut out, Some(&mut fused_acc));
            check(&out, &|i| rstd * (a[i] - mean_a - xhat[i] * mean_ax));
            weight_grad_row::<L, T>(&mut acc, grow, row, eps);
        }
        assert_eq!(fused_acc, acc, "the weight's gradient, fused and alone");
        bits.extend(acc.iter().map(|v| v.to_bits()));
        bits
    }

    /// The row kernels at every width, f32 and f64, rows with and
    /// without whole octets and tails.
    struct Rows(Vec<(&'static str, Vec<u64>)>);

    impl AtEveryWidth for Rows {
        fn run<L: F64x8>(&mut self, name: &'static str) {
            let mut bits = vec![];
            for m in [3, 8, 16, 37, 128] {
                let rows = 5;
                let wave = |i: usize, f: f64, s: f64| (i as f64 * f).sin() * s + (i % 5) as f64;
                let x: Vec<f64> = (0..rows * m).map(|i| wave(i, 0.37, 3.0) + 100.0).collect();
                let g: Vec<f64> = (0..rows * m).map(|i| wave(i, 1.3, 1.0) - 2.0).collect();
                let w: Vec<f64> = (0..m).map(|i| 0.5 + i as f64 / m as f64).collect();
                bits.extend(row_results::<L, f64>(&x, &g, &w, m, 1e-12));
                let to32 = |v: &[f64]| v.iter().map(|&v| v as f32).collect::<Vec<f32>>();
                bits.extend(row_results::<L, f32>(
                    &to32(&x),
                    &to32(&g),
                    &to32(&w),
                    m,
                    1e-5,
                ));
            }
            self.0.push((name, bits));
        }
    }

    #[test]
    fn rows_have_the_same_bits_at_every_width_and_the_textbook_values() {
        let mut rows = Rows(vec![]);
        at_every_width(&mut rows);
        let (first, want) = &rows.0[0];
        for (name, got) in &rows.0[1..] {
            assert!(got == want, "{name} differs from {first}");
        }
    }

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

//! Elementwise losses: squared error and binary cross-entropy with logits.
//!
//! BCE with logits is computed as `(1 - y) x + L (max(-x, 0) + ln(1 + e^-|x|))`
//! with `L = 1 + (pos_weight - 1) y`, which never overflows: the `exp` only
//! ever sees non-positive arguments. Its gradient uses the same `e^-|x|`
//! for a stable sigmoid. Work is done in blocks so the `exp` runs vectorised
//! over a scratch buffer.

use std::mem::MaybeUninit;

use super::NnFloat;
use crate::kernels::parallel::{for_each_chunk, ordered_reduce, should_parallelize, CHUNK};
use crate::tensor::{Element, Filled};

/// Elements per scratch block.
const SUB: usize = 1024;

/// `Σ (a - b)^2`, accumulated in f64 per block (parallel for large inputs).
pub fn squared_error_sum<T: Element>(a: &[T], b: &[T]) -> f64 {
    let block = |(a, b): (&[T], &[T])| -> f64 {
        let mut acc = [T::zero(); 8];
        for (ca, cb) in a.chunks(8).zip(b.chunks(8)) {
            for ((s, &x), &y) in acc.iter_mut().zip(ca).zip(cb) {
                *s += (x - y) * (x - y);
            }
        }
        acc.iter().map(|&v| Element::to_f64(v)).sum()
    };
    if should_parallelize(a.len()) {
        // Fixed chunks summed in order: the same bits on every run.
        let chunk = |t: usize| {
            let range = t * CHUNK..((t + 1) * CHUNK).min(a.len());
            block((&a[range.clone()], &b[range]))
        };
        ordered_reduce(a.len().div_ceil(CHUNK), chunk, |x, y| x + y).unwrap_or(0.0)
    } else {
        a.chunks(SUB * 4).zip(b.chunks(SUB * 4)).map(block).sum()
    }
}

/// `scale * g * (a - b)` with `g` one value or one per element: the
/// gradient of the squared error (with `scale = 2` or `2 / n`) with respect to `a`.
/// Writes every element of `out`: each chunk from operands sliced to its
/// length (panicking if one is short).
pub fn squared_error_backward<'o, T: Element>(
    g: &[T],
    a: &[T],
    b: &[T],
    scale: f64,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    let k = T::from_f64(scale);
    for_each_chunk(out, |off, chunk| {
        let n = chunk.len();
        let (a, b) = (&a[off..off + n], &b[off..off + n]);
        if g.len() == 1 {
            let kg = k * g[0];
            for ((o, &x), &y) in chunk.iter_mut().zip(a).zip(b) {
                o.write(kg * (x - y));
            }
        } else {
            for (((o, &x), &y), &gv) in chunk.iter_mut().zip(a).zip(b).zip(&g[off..off + n]) {
                o.write(k * gv * (x - y));
            }
        }
    });
    // SAFETY: `for_each_chunk` hands out every chunk of `out`, and each is
    // written in full above.
    unsafe { Filled::assume(out) }
}

/// Reads element `i` of an optional per-element `pos_weight`.
#[inline(always)]
fn pw_at<T: Element>(pw: Option<&[T]>, i: usize) -> T {
    pw.map_or(T::one(), |p| p[i])
}

/// Elementwise binary cross-entropy with logits `x`, targets `y` and an
/// optional `pos_weight` already broadcast to `x`'s length. Writes every
/// element of `out`: each block in full, from `x` and `y` sliced to its length.
pub fn bce_with_logits<'o, T: NnFloat>(
    x: &[T],
    y: &[T],
    pw: Option<&[T]>,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    // SAFETY: the closure writes every element of its block.
    unsafe {
        for_each_block(x, y, out, |start, xs, ys, e, ob| {
            for (j, o) in ob.iter_mut().enumerate() {
                let (v, t) = (xs[j], ys[j]);
                let l = T::one() + (pw_at(pw, start + j) - T::one()) * t;
                let softplus_neg = (-v).max(T::zero()) + e[j].ln_1p();
                o.write((T::one() - t) * v + l * softplus_neg);
            }
        })
    }
}

/// The gradient of BCE with logits with respect to `x`:
/// `scale * g * (L σ(x) - pos_weight y)`, `g` one value or one per element.
/// Writes every element of `out`, as [`bce_with_logits`] does.
pub fn bce_with_logits_backward<'o, T: NnFloat>(
    g: &[T],
    x: &[T],
    y: &[T],
    pw: Option<&[T]>,
    scale: f64,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    let k = T::from_f64(scale);
    // SAFETY: the closure writes every element of its block.
    unsafe {
        for_each_block(x, y, out, |start, xs, ys, e, ob| {
            for (j, o) in ob.iter_mut().enumerate() {
                let (v, t, ev) = (xs[j], ys[j], e[j]);
                // σ(x) from e^-|x|: never overflows.
                let s = if v >= T::zero() {
                    T::one() / (T::one() + ev)
                } else {
                    ev / (T::one() + ev)
                };
                let p = pw_at(pw, start + j);
                let l = T::one() + (p - T::one()) * t;
                let gv = if g.len() == 1 { g[0] } else { g[start + j] };
                o.write(k * gv * (l * s - p * t));
            }
        })
    }
}

/// Runs `f(start, xs, ys, e, block)` over the blocks (at most [`SUB`]
/// elements, from offset `start`) of `out`, in parallel chunks when large:
/// `xs`, `ys` are `x`, `y` at the block and `e = e^-|xs|`, computed in one
/// vectorised pass.
///
/// # Safety
///
/// `f` must write every element of its block: the result says `out` is
/// filled.
#[inline(always)]
unsafe fn for_each_block<'o, T: NnFloat>(
    x: &[T],
    y: &[T],
    out: &'o mut [MaybeUninit<T>],
    f: impl Fn(usize, &[T], &[T], &[T], &mut [MaybeUninit<T>]) + Sync + Send,
) -> Filled<'o> {
    for_each_chunk(out, |off, chunk| {
        let mut e = [T::zero(); SUB];
        for (b, ob) in chunk.chunks_mut(SUB).enumerate() {
            let start = off + b * SUB;
            let n = ob.len();
            let (xs, ys) = (&x[start..start + n], &y[start..start + n]);
            for (ev, &v) in e.iter_mut().zip(xs) {
                *ev = -v.abs();
            }
            T::exp_in_place(&mut e[..n]);
            f(start, xs, ys, &e[..n], ob);
        }
    });
    // SAFETY: every chunk of `out`, every block of it, and (by the
    // caller's contract on `f`) every element of it.
    unsafe { Filled::assume(out) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T: NnFloat>(
        f: impl for<'o> FnOnce(&'o mut [MaybeUninit<T>]) -> Filled<'o>,
        n: usize,
    ) -> Vec<T> {
        let out = crate::tensor::Tensor::build::<T>(crate::tensor::Dims::from_slice(&[n]), f);
        out.to_vec().unwrap()
    }

    #[test]
    fn bce_is_exact_and_finite_at_extremes() {
        let x = [1e4f32, -1e4, 0.0, 1e4, -1e4];
        let y = [1.0f32, 0.0, 0.5, 0.0, 1.0];
        let l = run(|o| bce_with_logits(&x, &y, None, o), 5);
        assert_eq!(l, vec![0.0, 0.0, 2f32.ln(), 1e4, 1e4]);
        let g = run(
            |o| bce_with_logits_backward(&[1.0], &x, &y, None, 1.0, o),
            5,
        );
        assert_eq!(g, vec![0.0, 0.0, 0.0, 1.0, -1.0]);
    }

    #[test]
    fn long_inputs_match_the_scalar_formula() {
        let n = 3000;
        let x: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin() * 30.0).collect();
        let y: Vec<f64> = (0..n).map(|i| (i % 3) as f64 * 0.5).collect();
        let pw: Vec<f64> = (0..n).map(|i| 0.5 + (i % 4) as f64).collect();
        let l = run(|o| bce_with_logits(&x, &y, Some(&pw), o), n);
        for i in 0..n {
            let (v, t, p) = (x[i], y[i], pw[i]);
            // -(p t log σ(x) + (1 - t) log σ(-x)), with an accurate log σ.
            let log_sigmoid = |z: f64| {
                if z >= 0.0 {
                    -(-z).exp().ln_1p()
                } else {
                    z - z.exp().ln_1p()
                }
            };
            let expect = -(p * t * log_sigmoid(v) + (1.0 - t) * log_sigmoid(-v));
            assert!(
                (l[i] - expect).abs() < 1e-9 * (1.0 + expect.abs()),
                "{i}: {} vs {expect}",
                l[i]
            );
        }
        assert_eq!(squared_error_sum(&x, &x), 0.0);
        let s = squared_error_sum(&x, &y);
        let e: f64 = x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum();
        assert!((s - e).abs() < 1e-9 * e);
    }
}

//! Softmax and log-softmax along one axis, and their backward formulas.
//!
//! Stable: each lane is shifted by its maximum before `exp`, so logits of
//! ±1e4 give exact probabilities (0 and 1) and finite log-probabilities.
//! Each kernel is one pass per row in cache: shift, a vectorised `exp` over
//! the whole block, a row sum, and a scale (or shift) pass.

use super::lanes::{exp_shifted_rows, for_each_block, row_dot, row_sum, AxisLanes, RowStats};
use super::NnFloat;
use crate::base::error::Result;
use crate::tensor::{Dims, Tensor};

/// `softmax(x)` (or `log_softmax(x)` when `log`) along `axis` (in range for
/// `x`'s rank; 0 for a 0-d tensor).
///
/// ```text
/// use retrograd::{kernels::nn::softmax, Tensor};
/// let x = Tensor::from_vec(vec![0.0, 2f64.ln(), 1.0, 1.0], &[2, 2])?;
/// let p = softmax::softmax(&x, 1, false)?;
/// assert!(p.allclose(&Tensor::from_vec(vec![1. / 3., 2. / 3., 0.5, 0.5], &[2, 2])?, 1e-12, 0.0));
/// ```
pub fn softmax(x: &Tensor, axis: usize, log: bool) -> Result<Tensor> {
    let lanes = AxisLanes::new(x.shape(), axis);
    Ok(crate::with_dtype!("softmax", x.dtype(), T => {
        let src = x.as_slice_of::<T>();
        Tensor::build::<T>(Dims::from_slice(x.shape()), |out| {
            for_each_block(lanes, [src], out, lanes.len, |_, [rows], o| {
                softmax_rows(rows, o, lanes.len, log)
            })
        })
    }))
}

/// Softmax (or log-softmax) of each row of `x` (`[n, len]`) into `out`.
pub fn softmax_rows<T: NnFloat>(x: &[T], out: &mut [T], len: usize, log: bool) {
    let (mut maxes, mut sums) = (RowStats::new(), RowStats::new());
    if log {
        let mut e = vec![T::zero(); x.len()];
        exp_shifted_rows(x, len, &mut e, &mut maxes, &mut sums);
        for (((o, r), &m), &s) in out
            .chunks_exact_mut(len)
            .zip(x.chunks_exact(len))
            .zip(&maxes)
            .zip(&sums)
        {
            let ls = s.ln();
            for (d, &v) in o.iter_mut().zip(r) {
                *d = (v - m) - ls;
            }
        }
    } else {
        exp_shifted_rows(x, len, out, &mut maxes, &mut sums);
        for (o, &s) in out.chunks_exact_mut(len).zip(&sums) {
            let inv = T::one() / s;
            o.iter_mut().for_each(|v| *v *= inv);
        }
    }
}

/// The backward of softmax along `axis` given its output `y`:
/// `y * (g - sum(g * y))`. `g` and `y` have the same shape.
pub fn softmax_backward(g: &Tensor, y: &Tensor, axis: usize) -> Result<Tensor> {
    let lanes = AxisLanes::new(y.shape(), axis);
    let len = lanes.len;
    Ok(crate::with_dtype!("softmax_backward", y.dtype(), T => {
        let (gs, ys) = (g.as_slice_of::<T>(), y.as_slice_of::<T>());
        Tensor::build::<T>(Dims::from_slice(y.shape()), |out| {
            for_each_block(lanes, [gs, ys], out, len, |_, [g, y], o| {
                for ((gr, yr), orow) in g.chunks_exact(len).zip(y.chunks_exact(len)).zip(o.chunks_exact_mut(len)) {
                    let s = row_dot(gr, yr);
                    for ((d, &gv), &yv) in orow.iter_mut().zip(gr).zip(yr) {
                        *d = yv * (gv - s);
                    }
                }
            })
        })
    }))
}

/// The backward of log-softmax along `axis` given its output `y`:
/// `g - exp(y) * sum(g)`. `g` and `y` have the same shape.
pub fn log_softmax_backward(g: &Tensor, y: &Tensor, axis: usize) -> Result<Tensor> {
    let lanes = AxisLanes::new(y.shape(), axis);
    let len = lanes.len;
    Ok(crate::with_dtype!("log_softmax_backward", y.dtype(), T => {
        let (gs, ys) = (g.as_slice_of::<T>(), y.as_slice_of::<T>());
        Tensor::build::<T>(Dims::from_slice(y.shape()), |out| {
            for_each_block(lanes, [gs, ys], out, len, |_, [g, y], o| {
                o.copy_from_slice(y);
                T::exp_in_place(o);
                for (gr, orow) in g.chunks_exact(len).zip(o.chunks_exact_mut(len)) {
                    let s = row_sum(gr);
                    for (d, &gv) in orow.iter_mut().zip(gr) {
                        *d = gv - *d * s;
                    }
                }
            })
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_direct_formula_on_every_axis() {
        let v: Vec<f64> = (0..24).map(|i| ((i * 7) % 11) as f64 * 0.3 - 1.0).collect();
        let x = Tensor::from_vec(v.clone(), &[2, 3, 4]).unwrap();
        for axis in 0..3 {
            let lanes = AxisLanes::new(x.shape(), axis);
            let p = softmax(&x, axis, false).unwrap().to_f64_vec();
            let lp = softmax(&x, axis, true).unwrap().to_f64_vec();
            for lane in 0..lanes.count() {
                let idx: Vec<usize> = (0..lanes.len).map(|k| lanes.index(lane, k)).collect();
                let z: f64 = idx.iter().map(|&i| v[i].exp()).sum();
                for &i in &idx {
                    assert!((p[i] - v[i].exp() / z).abs() < 1e-15);
                    assert!((lp[i] - (v[i] - z.ln())).abs() < 1e-14);
                }
            }
        }
    }

    #[test]
    fn long_rows_and_many_blocks() {
        // 600 rows of 37 span several blocks and the 8-lane remainders.
        let v: Vec<f32> = (0..600 * 37)
            .map(|i| ((i * 7919) % 1013) as f32 * 0.01 - 5.0)
            .collect();
        let x = Tensor::from_vec(v.clone(), &[600, 37]).unwrap();
        let p = softmax(&x, 1, false).unwrap().to_f64_vec();
        let lp = softmax(&x, 1, true).unwrap().to_f64_vec();
        for r in [0, 1, 299, 599] {
            let row: Vec<f64> = v[r * 37..(r + 1) * 37].iter().map(|&a| a as f64).collect();
            let m = row.iter().cloned().fold(f64::MIN, f64::max);
            let z: f64 = row.iter().map(|a| (a - m).exp()).sum();
            for c in 0..37 {
                assert!((p[r * 37 + c] - (row[c] - m).exp() / z).abs() < 1e-6);
                assert!((lp[r * 37 + c] - (row[c] - m - z.ln())).abs() < 1e-5);
            }
        }
    }

    #[test]
    fn extreme_logits_stay_finite() {
        let x = Tensor::from_vec(vec![1e4f32, -1e4, 0.0, 1e4], &[2, 2]).unwrap();
        assert_eq!(
            softmax(&x, 1, false).unwrap().to_f64_vec(),
            vec![1.0, 0.0, 0.0, 1.0]
        );
        assert_eq!(
            softmax(&x, 1, true).unwrap().to_f64_vec(),
            vec![0.0, -2e4, -1e4, 0.0]
        );
    }
}

/// The examples in this file's docs, run as unit tests (the module is
/// private to the engine, so rustdoc cannot run them as doctests).
#[cfg(test)]
mod doc_examples {
    #[test]
    fn softmax() -> crate::Result<()> {
        use crate::{kernels::nn::softmax, Tensor};
        let x = Tensor::from_vec(vec![0.0, 2f64.ln(), 1.0, 1.0], &[2, 2])?;
        let p = softmax::softmax(&x, 1, false)?;
        assert!(p.allclose(
            &Tensor::from_vec(vec![1. / 3., 2. / 3., 0.5, 0.5], &[2, 2])?,
            1e-12,
            0.0
        ));
        Ok(())
    }
}

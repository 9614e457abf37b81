//! Statistical reductions over any set of axes, accumulated in f64 and
//! rounded once: `logsumexp` (max-shifted, so it never overflows) and `var`
//! (two passes: the mean, then the deviations from it).

use std::marker::PhantomData;

use super::reduce_lanes::{reduce, Lanes, Reducer, SumF64};
use super::reduce_minmax::{Extremum, Larger};
use crate::base::error::{Error, Result};
use crate::tensor::shape::{checked_numel, normalize_axes, reduced_shape};
use crate::tensor::{Element, Tensor};

/// `sum(exp(v - shift))` per lane, in f64.
struct SumExp<'a, T>(&'a [T]);

impl<T: Element> Reducer<T> for SumExp<'_, T> {
    type Acc = (T, f64);
    #[inline(always)]
    fn init(&self, out: usize) -> (T, f64) {
        (self.0[out], 0.0)
    }
    #[inline(always)]
    fn push(&self, acc: &mut (T, f64), v: T, _r: usize) {
        acc.1 += (v - acc.0).exp().to_f64();
    }
    #[inline(always)]
    fn merge(&self, a: (T, f64), b: (T, f64)) -> (T, f64) {
        (a.0, a.1 + b.1)
    }
}

/// `log(sum(exp(x)))` over `axes` (negative axes count from the end; an
/// empty list reduces nothing). Each lane is shifted by its maximum first,
/// so inputs of ±1e4 give finite results; an infinite maximum is not
/// shifted (a lane of -inf gives -inf, one holding +inf gives +inf), and an
/// empty lane gives -inf.
///
/// ```text
/// use retrograd::{kernels::reduce_stats::logsumexp, Tensor};
/// let x = Tensor::from_vec(vec![1e4, 1e4, 0.0, 0.0], &[2, 2])?;
/// let y = logsumexp("logsumexp", &x, &[1], false)?.to_f64_vec();
/// assert_eq!(y, vec![1e4 + 2f64.ln(), 2f64.ln()]);
/// ```
pub fn logsumexp(op: &'static str, x: &Tensor, axes: &[isize], keepdim: bool) -> Result<Tensor> {
    let axes = normalize_axes(op, axes, x.rank())?;
    let out_shape = reduced_shape(x.shape(), &axes, keepdim);
    checked_numel(op, &out_shape)?;
    let lanes = Lanes::new(x.shape(), &axes);
    Ok(crate::with_dtype!(op, x.dtype(), T => {
        let src = x.as_slice_of::<T>();
        let shifts: Vec<T> = reduce(src, &lanes, &Extremum::<Larger>(PhantomData))
            .into_iter()
            .map(|m| if m.is_finite() { m } else { T::from_f64(0.0) })
            .collect();
        let sums = reduce(src, &lanes, &SumExp(&shifts));
        Tensor::from_exact_iter(
            out_shape,
            sums.iter().map(|&(shift, sum)| T::from_f64(shift.to_f64() + sum.ln())),
        )
    }))
}

/// Sums of deviations from each lane's mean, and of their squares, in f64.
struct Deviations<'a>(&'a [f64]);

impl<T: Element> Reducer<T> for Deviations<'_> {
    type Acc = (f64, f64, f64);
    #[inline(always)]
    fn init(&self, out: usize) -> (f64, f64, f64) {
        (self.0[out], 0.0, 0.0)
    }
    #[inline(always)]
    fn push(&self, acc: &mut (f64, f64, f64), v: T, _r: usize) {
        let d = v.to_f64() - acc.0;
        acc.1 += d;
        acc.2 += d * d;
    }
    #[inline(always)]
    fn merge(&self, a: (f64, f64, f64), b: (f64, f64, f64)) -> (f64, f64, f64) {
        (a.0, a.1 + b.1, a.2 + b.2)
    }
}

/// The variance of `x` over `axes`: `sum((x - mean)^2) / max(0, n - correction)`
/// with `n` the number of elements reduced into each output (`correction`
/// 1 is PyTorch's default, the unbiased estimate; 0 the population
/// variance). A denominator of 0 gives inf or NaN, as in PyTorch. Computed
/// in f64 with the corrected two-pass algorithm.
///
/// ```text
/// use retrograd::{kernels::reduce_stats::var, Tensor};
/// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 6.0, 8.0], &[2, 3])?;
/// assert_eq!(var("var", &x, &[1], 1.0, false)?.to_f64_vec(), vec![1.0, 4.0]);
/// assert_eq!(var("var", &x, &[0], 0.0, true)?.to_f64_vec(), vec![2.25, 4.0, 6.25]);
/// ```
pub fn var(
    op: &'static str,
    x: &Tensor,
    axes: &[isize],
    correction: f64,
    keepdim: bool,
) -> Result<Tensor> {
    let axes = normalize_axes(op, axes, x.rank())?;
    if !correction.is_finite() {
        return Err(Error::invalid(
            op,
            format!("correction must be finite, got {correction}"),
        ));
    }
    let out_shape = reduced_shape(x.shape(), &axes, keepdim);
    checked_numel(op, &out_shape)?;
    let lanes = Lanes::new(x.shape(), &axes);
    let n = lanes.red_len as f64;
    let denominator = (n - correction).max(0.0);
    Ok(crate::with_dtype!(op, x.dtype(), T => {
        let src = x.as_slice_of::<T>();
        let means: Vec<f64> = reduce(src, &lanes, &SumF64).into_iter().map(|s| s / n).collect();
        let dev = reduce(src, &lanes, &Deviations(&means));
        // The second term corrects the rounding error of the mean.
        let var = |&(_, sum, sum_sq): &(f64, f64, f64)| (sum_sq - sum * sum / n) / denominator;
        Tensor::from_exact_iter(out_shape, dev.iter().map(|d| T::from_f64(var(d))))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    use crate::tensor::test_util::tensor as t;

    #[test]
    fn logsumexp_values_and_extremes() {
        let x = t(&[0.5, -1.0, 2.0, 1.5, 0.3, -0.7], &[2, 3]);
        // NumPy: np.log(np.exp(x).sum(axis=0)), np.log(np.exp(x).sum())
        let cols = logsumexp("logsumexp", &x, &[0], false)
            .unwrap()
            .to_f64_vec();
        let expect = [1.8132616875182228, 0.5410084538329922, 2.0650435617765908];
        for (a, b) in cols.iter().zip(expect) {
            assert!((a - b).abs() < 1e-15, "{a} vs {b}");
        }
        let all = logsumexp("logsumexp", &x, &[0, 1], false).unwrap().item();
        assert!((all - 2.7558106284497077).abs() < 1e-15);
        let big = t(&[1e4, -1e4, f64::NEG_INFINITY, f64::NEG_INFINITY], &[2, 2]);
        let v = logsumexp("logsumexp", &big, &[1], false)
            .unwrap()
            .to_f64_vec();
        assert_eq!(v, vec![1e4, f64::NEG_INFINITY]);
        let f32s = big.to_dtype(DType::F32);
        assert_eq!(
            logsumexp("logsumexp", &f32s, &[1], true)
                .unwrap()
                .to_f64_vec(),
            vec![1e4, f64::NEG_INFINITY]
        );
        let empty = Tensor::zeros(&[0, 2], DType::F64).unwrap();
        assert_eq!(
            logsumexp("logsumexp", &empty, &[0], false)
                .unwrap()
                .to_f64_vec(),
            vec![f64::NEG_INFINITY; 2]
        );
    }

    #[test]
    fn variance_is_accurate_with_a_large_offset() {
        // The naive E[x^2] - E[x]^2 would lose every digit here.
        let v: Vec<f64> = (0..1000).map(|i| 1e8 + (i % 10) as f64).collect();
        let x = t(&v, &[1000]);
        let got = var("var", &x, &[0], 0.0, false).unwrap().item();
        assert!((got - 8.25).abs() < 1e-9, "{got}");
        // Too few elements for the correction: PyTorch's inf / NaN.
        let one = t(&[3.0], &[1]);
        assert!(var("var", &one, &[0], 1.0, false).unwrap().item().is_nan());
        let two = t(&[1.0, 2.0], &[2]);
        assert_eq!(
            var("var", &two, &[0], 2.0, false).unwrap().item(),
            f64::INFINITY
        );
    }

    #[test]
    fn f32_variance_of_a_million_elements_is_accurate() {
        let n = 1_000_000;
        let v: Vec<f32> = (0..n).map(|i| 1000.0 + (i % 4) as f32).collect();
        let x = Tensor::from_vec(v, &[n / 1000, 1000]).unwrap();
        // Rows cycle through 0..4 (population variance 1.25); columns are constant.
        for (axes, expect) in [(&[0isize, 1][..], 1.25), (&[1], 1.25), (&[0], 0.0)] {
            let got = var("var", &x, axes, 0.0, false).unwrap().to_f64_vec();
            assert!(
                got.iter().all(|g| (g - expect).abs() < 1e-6),
                "{axes:?}: {:?}",
                &got[..2]
            );
        }
    }
}

/// The examples in this file's docs, run as unit tests (the module is
/// private to the engine, so rustdoc cannot run them as doctests).
#[cfg(test)]
mod doc_examples {
    #[test]
    fn logsumexp() -> crate::Result<()> {
        use crate::{kernels::reduce_stats::logsumexp, Tensor};
        let x = Tensor::from_vec(vec![1e4, 1e4, 0.0, 0.0], &[2, 2])?;
        let y = logsumexp("logsumexp", &x, &[1], false)?.to_f64_vec();
        assert_eq!(y, vec![1e4 + 2f64.ln(), 2f64.ln()]);
        Ok(())
    }

    #[test]
    fn var() -> crate::Result<()> {
        use crate::{kernels::reduce_stats::var, Tensor};
        let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 6.0, 8.0], &[2, 3])?;
        assert_eq!(
            var("var", &x, &[1], 1.0, false)?.to_f64_vec(),
            vec![1.0, 4.0]
        );
        assert_eq!(
            var("var", &x, &[0], 0.0, true)?.to_f64_vec(),
            vec![2.25, 4.0, 6.25]
        );
        Ok(())
    }
}

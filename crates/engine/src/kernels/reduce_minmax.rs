//! Extremum reductions over any set of axes: `amax`/`amin` (values),
//! `argmax`/`argmin` (indices, first occurrence wins) and `tie_weights`
//! (how a gradient is shared among the elements that attain an extremum).
//!
//! NaN propagates: a lane holding a NaN has NaN as its maximum and minimum,
//! and its first NaN as its arg-extremum (as in PyTorch). Reducing over an
//! axis of size 0 is an error (there is no identity to return).

use std::marker::PhantomData;

use super::reduce_lanes::{map_with_output, reduce, Lanes, Reducer};
use crate::base::error::{Error, Result};
use crate::tensor::shape::{normalize_axes, normalize_axis, reduced_shape, Dims};
use crate::tensor::{Element, Filled, Tensor};

/// Which extremum: [`Larger`] for max, [`Smaller`] for min.
pub trait Pick: Copy + Send + Sync + 'static {
    /// Whether `a` is strictly more extreme than `b` (false for NaN).
    fn better<T: Element>(a: T, b: T) -> bool;
    /// The value every other value beats or ties.
    fn worst<T: Element>() -> T;
    /// [`better`](Self::better) on integers.
    fn better_int(a: i64, b: i64) -> bool;
}

/// The index of the extremum of each lane of an integer tensor (no NaN:
/// plain comparisons, the first occurrence of a tie wins).
struct IntArgExtremum<P>(PhantomData<P>);

impl<P: Pick> Reducer<i64> for IntArgExtremum<P> {
    type Acc = (i64, usize);
    #[inline(always)]
    fn init(&self, _out: usize) -> (i64, usize) {
        (0, NONE)
    }
    #[inline(always)]
    fn push(&self, acc: &mut (i64, usize), v: i64, r: usize) {
        if acc.1 == NONE || P::better_int(v, acc.0) {
            *acc = (v, r);
        }
    }
    #[inline(always)]
    fn merge(&self, a: (i64, usize), b: (i64, usize)) -> (i64, usize) {
        if a.1 == NONE || (b.1 != NONE && P::better_int(b.0, a.0)) {
            b
        } else {
            a
        }
    }
}

/// Picks maxima.
#[derive(Clone, Copy, Debug)]
pub struct Larger;
/// Picks minima.
#[derive(Clone, Copy, Debug)]
pub struct Smaller;

impl Pick for Larger {
    #[inline(always)]
    fn better<T: Element>(a: T, b: T) -> bool {
        a > b
    }
    #[inline(always)]
    fn worst<T: Element>() -> T {
        T::neg_infinity()
    }
    #[inline(always)]
    fn better_int(a: i64, b: i64) -> bool {
        a > b
    }
}

impl Pick for Smaller {
    #[inline(always)]
    fn better<T: Element>(a: T, b: T) -> bool {
        a < b
    }
    #[inline(always)]
    fn worst<T: Element>() -> T {
        T::infinity()
    }
    #[inline(always)]
    fn better_int(a: i64, b: i64) -> bool {
        a < b
    }
}

/// Whether `v` counts as attaining the extremum `m` (NaN attains NaN).
#[inline(always)]
fn attains<T: Element>(v: T, m: T) -> bool {
    v == m || (v.is_nan() && m.is_nan())
}

/// The extremum of each lane, NaN-propagating.
pub(crate) struct Extremum<P>(pub(crate) PhantomData<P>);

impl<T: Element, P: Pick> Reducer<T> for Extremum<P> {
    type Acc = T;
    #[inline(always)]
    fn init(&self, _out: usize) -> T {
        P::worst()
    }
    #[inline(always)]
    fn push(&self, acc: &mut T, v: T, _r: usize) {
        if P::better(v, *acc) || v.is_nan() {
            *acc = v;
        }
    }
    #[inline(always)]
    fn push_run(&self, acc: &mut T, run: &[T], _r0: usize) {
        // Eight independent lanes: the compiler turns them into vector compares.
        let mut lanes = [P::worst::<T>(); 8];
        let chunks = run.chunks_exact(8);
        let tail = chunks.remainder();
        for c in chunks {
            for (l, &v) in lanes.iter_mut().zip(c) {
                if P::better(v, *l) || v.is_nan() {
                    *l = v;
                }
            }
        }
        for &v in tail {
            self.push(&mut lanes[0], v, 0);
        }
        *acc = lanes.iter().fold(*acc, |a, &b| self.merge(a, b));
    }
    #[inline(always)]
    fn merge(&self, a: T, b: T) -> T {
        if a.is_nan() {
            a
        } else if b.is_nan() || P::better(b, a) {
            b
        } else {
            a
        }
    }
}

/// No element seen yet.
const NONE: usize = usize::MAX;

struct ArgExtremum<P>(PhantomData<P>);

impl<T: Element, P: Pick> Reducer<T> for ArgExtremum<P> {
    /// The best value so far and its number.
    type Acc = (T, usize);
    #[inline(always)]
    fn init(&self, _out: usize) -> (T, usize) {
        (P::worst(), NONE)
    }
    #[inline(always)]
    fn push(&self, acc: &mut (T, usize), v: T, r: usize) {
        // Strictly better only: the first occurrence of a tie wins.
        if acc.1 == NONE || (!acc.0.is_nan() && (v.is_nan() || P::better(v, acc.0))) {
            *acc = (v, r);
        }
    }
    #[inline(always)]
    fn push_run(&self, acc: &mut (T, usize), run: &[T], r0: usize) {
        if run.len() < 16 {
            for (j, &v) in run.iter().enumerate() {
                self.push(acc, v, r0 + j);
            }
            return;
        }
        // Eight independent lanes seeded with the first eight elements; the
        // merge below resolves ties by the smaller index, so first still wins.
        let mut best: [T; 8] = std::array::from_fn(|j| run[j]);
        let mut at: [usize; 8] = std::array::from_fn(|j| j);
        let chunks = run[8..].chunks_exact(8);
        let tail = chunks.remainder();
        for (k, c) in chunks.enumerate() {
            let base = 8 + 8 * k;
            for j in 0..8 {
                let (v, b) = (c[j], best[j]);
                if !b.is_nan() && (v.is_nan() || P::better(v, b)) {
                    best[j] = v;
                    at[j] = base + j;
                }
            }
        }
        let start = run.len() - tail.len();
        for (j, &v) in tail.iter().enumerate() {
            self.push(acc, v, r0 + start + j);
        }
        for j in 0..8 {
            *acc = self.merge(*acc, (best[j], r0 + at[j]));
        }
    }
    #[inline(always)]
    fn merge(&self, a: (T, usize), b: (T, usize)) -> (T, usize) {
        let first = if a.1 <= b.1 { a } else { b };
        if a.1 == NONE {
            b
        } else if b.1 == NONE {
            a
        } else if a.0.is_nan() || b.0.is_nan() {
            if a.0.is_nan() && b.0.is_nan() {
                first
            } else if a.0.is_nan() {
                a
            } else {
                b
            }
        } else if P::better(a.0, b.0) {
            a
        } else if P::better(b.0, a.0) {
            b
        } else {
            first
        }
    }
}

/// Counts the elements of each lane that attain its extremum.
struct CountTies<'a, T>(&'a [T]);

impl<T: Element> Reducer<T> for CountTies<'_, T> {
    type Acc = (T, usize);
    #[inline(always)]
    fn init(&self, out: usize) -> (T, usize) {
        (self.0[out], 0)
    }
    #[inline(always)]
    fn push(&self, acc: &mut (T, usize), v: T, _r: usize) {
        acc.1 += usize::from(attains(v, acc.0));
    }
    #[inline(always)]
    fn merge(&self, a: (T, usize), b: (T, usize)) -> (T, usize) {
        (a.0, a.1 + b.1)
    }
}

/// The error for an extremum over an axis with no elements.
fn empty_axis(op: &'static str, shape: &[usize], axes: &[usize]) -> Error {
    let axis = axes.iter().copied().find(|&a| shape[a] == 0).unwrap_or(0);
    Error::invalid(
        op,
        format!(
            "cannot reduce over axis {axis} of size 0 of shape {shape:?} (an extremum has no identity)"
        ),
    )
}

fn extremum<P: Pick>(
    op: &'static str,
    x: &Tensor,
    axes: &[isize],
    keepdim: bool,
) -> Result<Tensor> {
    let axes = normalize_axes(op, axes, x.rank())?;
    let lanes = Lanes::new(x.shape(), &axes);
    if lanes.red_len == 0 && lanes.out_len > 0 {
        return Err(empty_axis(op, x.shape(), &axes));
    }
    let out_shape = reduced_shape(x.shape(), &axes, keepdim);
    Ok(crate::with_dtype!(op, x.dtype(), T => {
        let accs = reduce(x.as_slice_of::<T>(), &lanes, &Extremum::<P>(PhantomData));
        Tensor::from_exact_iter(out_shape, accs)
    }))
}

/// The maximum of `x` over `axes` (negative axes count from the end; an
/// empty list reduces nothing), NaN-propagating. With `keepdim` the reduced
/// axes stay as size 1.
///
/// ```text
/// use retrograd::{kernels::reduce_minmax::amax, Tensor};
/// let x = Tensor::from_vec(vec![1.0, 5.0, 3.0, 4.0, 2.0, 6.0], &[2, 3])?;
/// assert_eq!(amax("amax", &x, &[1], false)?.to_f64_vec(), vec![5.0, 6.0]);
/// assert_eq!(amax("amax", &x, &[0], true)?.shape(), &[1, 3]);
/// assert_eq!(amax("amax", &x, &[0, 1], false)?.try_item()?, 6.0);
/// ```
pub fn amax(op: &'static str, x: &Tensor, axes: &[isize], keepdim: bool) -> Result<Tensor> {
    extremum::<Larger>(op, x, axes, keepdim)
}

/// The minimum of `x` over `axes`, NaN-propagating (see [`amax`]).
pub fn amin(op: &'static str, x: &Tensor, axes: &[isize], keepdim: bool) -> Result<Tensor> {
    extremum::<Smaller>(op, x, axes, keepdim)
}

fn arg_extremum<P: Pick>(
    op: &'static str,
    x: &Tensor,
    axis: Option<isize>,
    keepdim: bool,
) -> Result<Tensor> {
    let axes: Dims = match axis {
        Some(a) => Dims::from_elem(normalize_axis(op, a, x.rank())?, 1),
        None => (0..x.rank()).collect(),
    };
    let lanes = Lanes::new(x.shape(), &axes);
    if lanes.red_len == 0 && lanes.out_len > 0 {
        return Err(empty_axis(op, x.shape(), &axes));
    }
    let out_shape = reduced_shape(x.shape(), &axes, keepdim);
    // A half float widens to f32 exactly (same order, same NaNs), so its
    // positions are found there: sampling from bf16 logits needs no cast.
    // A bool is an i64 0 or 1, in the same order.
    let widened;
    let x = match x.dtype() {
        d if d.is_half() => {
            widened = x.to_dtype(crate::DType::F32);
            &widened
        }
        crate::DType::Bool => {
            widened = x.to_dtype(crate::DType::I64);
            &widened
        }
        _ => x,
    };
    if x.dtype() == crate::DType::I64 {
        let accs = reduce(
            x.as_slice_of::<i64>(),
            &lanes,
            &IntArgExtremum::<P>(PhantomData),
        );
        return Ok(Tensor::from_exact_iter(
            out_shape,
            accs.iter().map(|&(_, r)| r as i64),
        ));
    }
    Ok(crate::with_dtype!(op, x.dtype(), T => {
        let accs = reduce(x.as_slice_of::<T>(), &lanes, &ArgExtremum::<P>(PhantomData));
        Tensor::from_exact_iter(out_shape, accs.iter().map(|&(_, r)| r as i64))
    }))
}

/// The index of the maximum along `axis` (over the flattened tensor for
/// `None`), as an i64 tensor. Ties go to the first occurrence; a NaN
/// counts as the maximum. Every dtype: floats of every width (f16 and
/// bf16 too), i64 and bool.
///
/// ```text
/// use retrograd::{kernels::reduce_minmax::{argmax, argmin}, Tensor};
/// let x = Tensor::from_vec(vec![1.0, 5.0, 5.0, 7.0, 2.0, 6.0], &[2, 3])?;
/// assert_eq!(argmax("argmax", &x, Some(1), false)?.to_vec::<i64>()?, vec![1, 0]);
/// assert_eq!(argmax("argmax", &x, None, false)?.to_vec::<i64>()?, vec![3]);
/// // Token ids and masks too.
/// let ids = Tensor::from_vec(vec![3i64, 9, 9, -4], &[4])?;
/// assert_eq!(argmax("argmax", &ids, None, false)?.to_vec::<i64>()?, vec![1]);
/// let mask = Tensor::from_vec(vec![false, true, true], &[3])?;
/// assert_eq!(argmin("argmin", &mask, Some(0), false)?.to_vec::<i64>()?, vec![0]);
/// ```
pub fn argmax(op: &'static str, x: &Tensor, axis: Option<isize>, keepdim: bool) -> Result<Tensor> {
    arg_extremum::<Larger>(op, x, axis, keepdim)
}

/// The index of the minimum along `axis` (see [`argmax`]).
pub fn argmin(op: &'static str, x: &Tensor, axis: Option<isize>, keepdim: bool) -> Result<Tensor> {
    arg_extremum::<Smaller>(op, x, axis, keepdim)
}

/// The share of its lane's gradient each element of `x` receives from an
/// extremum over `axes`: `1/k` for the `k` elements that attain the
/// extremum `extremum` (the reduction's output, keepdim or not), 0 elsewhere.
///
/// ```text
/// use retrograd::{kernels::reduce_minmax::{amax, tie_weights}, Tensor};
/// let x = Tensor::from_vec(vec![3.0, 1.0, 3.0, 0.0, 2.0, 1.0], &[2, 3])?;
/// let m = amax("amax", &x, &[1], false)?;
/// let w = tie_weights("amax", &x, &m, &[1])?;
/// assert_eq!(w.to_f64_vec(), vec![0.5, 0.0, 0.5, 0.0, 1.0, 0.0]);
/// ```
pub fn tie_weights(
    op: &'static str,
    x: &Tensor,
    extremum: &Tensor,
    axes: &[isize],
) -> Result<Tensor> {
    let axes = normalize_axes(op, axes, x.rank())?;
    let lanes = Lanes::new(x.shape(), &axes);
    if extremum.numel() != lanes.out_len {
        return Err(Error::shape_mismatch(op, x.shape(), extremum.shape()));
    }
    crate::tensor::shape::checked_numel(op, x.shape())?;
    kernels_dtype_check(op, x, extremum)?;
    Ok(crate::with_dtype!(op, x.dtype(), T => {
        let m = extremum.as_slice_of::<T>();
        let src = x.as_slice_of::<T>();
        let counts = reduce(src, &lanes, &CountTies(m));
        Tensor::build::<T>(Dims::from_slice(x.shape()), |out| {
            map_with_output(src, &lanes, out, |v, o| {
                let (mo, k) = counts[o];
                if attains(v, mo) {
                    T::from_f64(1.0 / k as f64)
                } else {
                    T::from_f64(0.0)
                }
            });
            // SAFETY: `map_with_output` writes every element of an output as
            // long as `src` (it panics otherwise).
            unsafe { Filled::assume(out) }
        })
    }))
}

fn kernels_dtype_check(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    super::elementwise::common_dtype(op, a, b).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    use crate::tensor::test_util::tensor as t;

    #[test]
    fn values_over_axes() {
        let v: Vec<f64> = (0..24).map(|i| ((i * 7) % 24) as f64 - 10.0).collect();
        let x = t(&v, &[2, 3, 4]);
        // NumPy: x.max(axis=1), x.min(axis=(0, 2))
        assert_eq!(
            amax("amax", &x, &[1], false).unwrap().to_f64_vec(),
            vec![-2.0, 5.0, 12.0, 11.0, 10.0, 13.0, 0.0, 7.0]
        );
        assert_eq!(
            amin("amin", &x, &[0, -1], true).unwrap().to_f64_vec(),
            vec![-10.0, -9.0, -7.0]
        );
        assert_eq!(
            amin("amin", &x, &[0, -1], true).unwrap().shape(),
            &[1, 3, 1]
        );
        assert_eq!(amax("amax", &x, &[], false).unwrap(), x);
    }

    #[test]
    fn nan_propagates_and_wins_argmax() {
        let x = t(&[1.0, f64::NAN, 3.0, f64::NAN, 0.0, -1.0], &[2, 3]);
        let m = amax("amax", &x, &[1], false).unwrap().to_f64_vec();
        assert!(m[0].is_nan() && m[1].is_nan());
        let a = argmax("argmax", &x, Some(1), false).unwrap().to_f64_vec();
        assert_eq!(a, vec![1.0, 0.0]);
        let a = argmin("argmin", &x, Some(0), false).unwrap().to_f64_vec();
        assert_eq!(a, vec![1.0, 0.0, 1.0]);
    }

    #[test]
    fn argmax_ties_go_to_the_first_occurrence_also_in_parallel() {
        let n = 200_000;
        let mut v = vec![0.0f32; n];
        v[70_001] = 2.0;
        v[150_000] = 2.0;
        v[199_999] = 2.0;
        let x = Tensor::from_vec(v.clone(), &[n]).unwrap();
        assert_eq!(argmax("argmax", &x, None, false).unwrap().item(), 70_001.0);
        assert_eq!(argmin("argmin", &x, None, false).unwrap().item(), 0.0);
        // A column reduction split across threads.
        let cols = t(
            &v.iter().map(|&a| f64::from(a)).collect::<Vec<_>>(),
            &[n / 4, 4],
        );
        let a = argmax("argmax", &cols, Some(0), true).unwrap();
        assert_eq!(a.shape(), &[1, 4]);
        assert_eq!(a.to_f64_vec(), vec![37_500.0, 17_500.0, 0.0, 49_999.0]);
        assert_eq!(
            amax("amax", &cols, &[0], false).unwrap().to_f64_vec(),
            vec![2.0, 2.0, 0.0, 2.0]
        );
    }

    #[test]
    fn arg_extrema_match_a_naive_scan_with_many_ties_and_nans() {
        // Values from a small set (many ties), some NaN, rows of every length
        // around the 8-lane and 16-element thresholds.
        for len in 1..60 {
            let v: Vec<f64> = (0..len)
                .map(|i| match (i * 7 + len) % 11 {
                    10 if len % 3 == 0 => f64::NAN,
                    k => (k % 4) as f64,
                })
                .collect();
            let first = |better: fn(f64, f64) -> bool| {
                let mut best = 0;
                for i in 1..len {
                    let (a, b) = (v[i], v[best]);
                    if !b.is_nan() && (a.is_nan() || better(a, b)) {
                        best = i;
                    }
                }
                best as f64
            };
            let x = t(&v, &[len]);
            let got_max = argmax("argmax", &x, Some(0), false).unwrap().item();
            let got_min = argmin("argmin", &x, Some(0), false).unwrap().item();
            assert_eq!(got_max, first(|a, b| a > b), "argmax of {v:?}");
            assert_eq!(got_min, first(|a, b| a < b), "argmin of {v:?}");
            // The value lanes agree with the index lanes (NaN included).
            let at = |i: f64| v[i as usize];
            let max = amax("amax", &x, &[0], false).unwrap().item();
            let min = amin("amin", &x, &[0], false).unwrap().item();
            assert!(max == at(got_max) || (max.is_nan() && at(got_max).is_nan()));
            assert!(min == at(got_min) || (min.is_nan() && at(got_min).is_nan()));
        }
    }

    #[test]
    fn tie_weights_split_evenly() {
        let x = t(&[2.0, 2.0, 1.0, 5.0, 5.0, 5.0], &[2, 3]);
        let m = amax("amax", &x, &[0, 1], false).unwrap();
        let w = tie_weights("amax", &x, &m, &[0, 1]).unwrap();
        let third = 1.0 / 3.0;
        assert_eq!(w.to_f64_vec(), vec![0.0, 0.0, 0.0, third, third, third]);
        let m0 = amin("amin", &x, &[0], true).unwrap();
        let w0 = tie_weights("amin", &x, &m0, &[0]).unwrap();
        assert_eq!(w0.to_f64_vec(), vec![1.0, 1.0, 1.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn errors() {
        let x = t(&[1.0, 2.0], &[2]);
        assert!(matches!(
            amax("amax", &x, &[1], false),
            Err(Error::AxisOutOfRange {
                op: "amax",
                axis: 1,
                rank: 1
            })
        ));
        assert!(matches!(
            amax("amax", &x, &[0, -1], false),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            argmax("argmax", &x, Some(-2), false),
            Err(Error::AxisOutOfRange { .. })
        ));
        let empty = Tensor::zeros(&[0, 3], DType::F32).unwrap();
        assert!(matches!(
            amax("max", &empty, &[0], false),
            Err(Error::InvalidArgument { op: "max", .. })
        ));
        assert!(argmin("argmin", &empty, None, false).is_err());
        // Reducing the non-empty axis of an empty tensor is fine: nothing to reduce.
        assert_eq!(amax("amax", &empty, &[1], false).unwrap().shape(), &[0]);
        let m = t(&[1.0], &[1]);
        assert!(tie_weights("amax", &x, &m, &[]).is_err());
    }
}

/// The examples in this file's docs, run as unit tests (the module is
/// private to the engine, so rustdoc cannot run them as doctests).
#[cfg(test)]
mod doc_examples {
    #[test]
    fn amax() -> crate::Result<()> {
        use crate::{kernels::reduce_minmax::amax, Tensor};
        let x = Tensor::from_vec(vec![1.0, 5.0, 3.0, 4.0, 2.0, 6.0], &[2, 3])?;
        assert_eq!(amax("amax", &x, &[1], false)?.to_f64_vec(), vec![5.0, 6.0]);
        assert_eq!(amax("amax", &x, &[0], true)?.shape(), &[1, 3]);
        assert_eq!(amax("amax", &x, &[0, 1], false)?.try_item()?, 6.0);
        Ok(())
    }

    #[test]
    fn argmax() -> crate::Result<()> {
        use crate::{
            kernels::reduce_minmax::{argmax, argmin},
            Tensor,
        };
        let x = Tensor::from_vec(vec![1.0, 5.0, 5.0, 7.0, 2.0, 6.0], &[2, 3])?;
        assert_eq!(
            argmax("argmax", &x, Some(1), false)?.to_vec::<i64>()?,
            vec![1, 0]
        );
        assert_eq!(argmax("argmax", &x, None, false)?.to_vec::<i64>()?, vec![3]);
        // Token ids and masks too.
        let ids = Tensor::from_vec(vec![3i64, 9, 9, -4], &[4])?;
        assert_eq!(
            argmax("argmax", &ids, None, false)?.to_vec::<i64>()?,
            vec![1]
        );
        let mask = Tensor::from_vec(vec![false, true, true], &[3])?;
        assert_eq!(
            argmin("argmin", &mask, Some(0), false)?.to_vec::<i64>()?,
            vec![0]
        );
        Ok(())
    }

    #[test]
    fn tie_weights() -> crate::Result<()> {
        use crate::{
            kernels::reduce_minmax::{amax, tie_weights},
            Tensor,
        };
        let x = Tensor::from_vec(vec![3.0, 1.0, 3.0, 0.0, 2.0, 1.0], &[2, 3])?;
        let m = amax("amax", &x, &[1], false)?;
        let w = tie_weights("amax", &x, &m, &[1])?;
        assert_eq!(w.to_f64_vec(), vec![0.5, 0.0, 0.5, 0.0, 1.0, 0.0]);
        Ok(())
    }
}

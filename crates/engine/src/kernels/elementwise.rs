//! Elementwise kernels: `map` (one operand), `zip` (two operands with NumPy
//! broadcasting) and `broadcast_to`.
//!
//! Broadcasting never materialises the smaller operand: shapes are coalesced
//! into the fewest dimensions, the innermost dimension becomes a tight loop
//! (both operands contiguous, or one of them a repeated scalar), and an
//! odometer walks the outer dimensions with stride 0 for broadcast ones.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::blocks::by_blocks;
use super::functors::{BinaryFn, UnaryFn};
use super::parallel::{for_each_chunk, should_parallelize};
use super::simd::wide;
use crate::base::error::{check_dtypes, Error, Result};
use crate::tensor::math::Block;
use crate::tensor::shape::{broadcast_shapes, broadcast_strides, checked_numel, Dims};
use crate::tensor::{refused, DType, Element, Filled, Repr, Tensor};

/// Applies `f` to every element of `x`.
///
/// ```
/// use retrograd::{kernels, Tensor};
/// retrograd::unary_fn!(Square, |x| x * x);
/// let y = kernels::map(&Tensor::from_vec(vec![1.0, -2.0], &[2])?, Square)?;
/// assert!(kernels::map(&Tensor::scalar(1i64), Square).is_err());
/// assert_eq!(y.to_f64_vec(), vec![1.0, 4.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[inline(always)]
pub fn map<F: UnaryFn>(x: &Tensor, f: F) -> Result<Tensor> {
    map_op("map", x, f)
}

/// [`map`] whose error for an i64 or bool `x` (`Error::NotFloat`) names `op`.
#[inline(always)]
pub fn map_op<F: UnaryFn>(op: &'static str, x: &Tensor, f: F) -> Result<Tensor> {
    // The scalar case inlines into the caller; dense tensors take the loop.
    match x.repr() {
        Repr::F32(v) => Ok(Tensor::scalar(f.call(v.f32()))),
        Repr::F64(v) => Ok(Tensor::scalar(f.call(v.f64()))),
        _ => map_dense(op, x, f),
    }
}

/// `map` on a dense tensor, or on an integer or bool one (`Error::NotFloat`).
#[inline(never)]
fn map_dense<F: UnaryFn>(op: &'static str, x: &Tensor, f: F) -> Result<Tensor> {
    Ok(crate::with_dtype!(op, x.dtype(), T => {
        let src = x.as_slice_of::<T>();
        // A refused output is an error naming the op (rule ops rely on it).
        refused::obtainable::<T>(op, x.shape(), src.len())?;
        Tensor::build::<T>(Dims::from_slice(x.shape()), |out| {
            map_slice(src, out, f);
            // SAFETY: `map_slice` writes every element of its output.
            unsafe { Filled::assume(out) }
        })
    }))
}

/// `out[i] = f(src[i])`, in parallel for large inputs. Writes every
/// element of `out` (and panics if `src` is shorter).
#[inline]
pub fn map_slice<T: Element, F: UnaryFn>(src: &[T], out: &mut [MaybeUninit<T>], f: F) {
    if F::BLOCKS {
        return map_slice_by_blocks(src, out, f);
    }
    map_with(
        src,
        out,
        #[inline(always)]
        move |v| f.call(v),
    );
}

/// `out[i] = g(src[i])`, in parallel for large inputs, at the CPU's vector
/// width: the loop of [`map_slice`] and of [`zip`] with a scalar operand.
/// Writes every element of `out` (and panics if `src` is shorter).
#[inline(always)]
fn map_with<T: Element>(
    src: &[T],
    out: &mut [MaybeUninit<T>],
    g: impl Fn(T) -> T + Copy + Send + Sync,
) {
    // Every chunk of `out` is written in full: `s` is sliced to its length.
    for_each_chunk(out, |off, chunk| {
        let s = &src[off..off + chunk.len()];
        wide(
            #[inline(always)]
            || {
                for (o, &v) in chunk.iter_mut().zip(s) {
                    o.write(g(v));
                }
            },
        )
    });
}

/// [`map_slice`] for a long chain (`F::BLOCKS`): by blocks on f32
/// (`blocks.rs`: why the closures inline). A function of its own, so that
/// a short function's loop compiles as if it did not exist.
#[inline(never)]
fn map_slice_by_blocks<T: Element, F: UnaryFn>(src: &[T], out: &mut [MaybeUninit<T>], f: F) {
    for_each_chunk(out, |off, chunk| {
        let s = &src[off..off + chunk.len()];
        wide(
            #[inline(always)]
            || {
                let blocks = by_blocks(
                    [s],
                    &mut *chunk,
                    #[inline(always)]
                    |[x]: [Block; 1]| f.call_block(x),
                    #[inline(always)]
                    |[x]| f.call(x),
                );
                if blocks.is_none() {
                    for (o, &v) in chunk.iter_mut().zip(s) {
                        o.write(f.call(v));
                    }
                }
            },
        )
    });
}

/// Applies `f` elementwise to `a` and `b`, broadcasting them to a common shape.
///
/// ```
/// use retrograd::{kernels, Tensor};
/// let a = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?;
/// let b = Tensor::from_vec(vec![10.0, 20.0], &[2])?;
/// let c = kernels::zip("add", &a, &b, kernels::functors::Add)?;
/// assert_eq!(c.to_f64_vec(), vec![11.0, 22.0, 13.0, 24.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[inline(always)]
pub fn zip<F: BinaryFn>(op: &'static str, a: &Tensor, b: &Tensor, f: F) -> Result<Tensor> {
    // The scalar case inlines into the caller; everything else takes the loops.
    match (a.repr(), b.repr()) {
        (Repr::F32(x), Repr::F32(y)) => Ok(Tensor::scalar(f.call(x.f32(), y.f32()))),
        (Repr::F64(x), Repr::F64(y)) => Ok(Tensor::scalar(f.call(x.f64(), y.f64()))),
        _ => zip_dense(op, a, b, f),
    }
}

#[inline(never)]
fn zip_dense<F: BinaryFn>(op: &'static str, a: &Tensor, b: &Tensor, f: F) -> Result<Tensor> {
    check_dtypes(op, a.dtype(), b.dtype())?;
    Ok(crate::with_dtype!(op, a.dtype(), T => zip_typed::<T, F>(op, a, b, f)?))
}

/// `out[i] = f(xa[i], xb[i])` for a long chain (`F::BLOCKS`): by blocks
/// on f32 (`blocks.rs`: why the closures inline), every element written.
/// A function of its own, as [`map_slice_by_blocks`].
#[inline(never)]
fn zip_slices_by_blocks<T: Element, F: BinaryFn>(
    xa: &[T],
    xb: &[T],
    out: &mut [MaybeUninit<T>],
    f: F,
) {
    for_each_chunk(out, |off, chunk| {
        let n = chunk.len();
        let (pa, pb) = (&xa[off..off + n], &xb[off..off + n]);
        wide(
            #[inline(always)]
            || {
                let blocks = by_blocks(
                    [pa, pb],
                    &mut *chunk,
                    #[inline(always)]
                    |[x, y]: [Block; 2]| f.call_block(x, y),
                    #[inline(always)]
                    |[x, y]| f.call(x, y),
                );
                if blocks.is_none() {
                    for ((o, &x), &y) in chunk.iter_mut().zip(pa).zip(pb) {
                        o.write(f.call(x, y));
                    }
                }
            },
        )
    });
}

fn zip_typed<T: Element, F: BinaryFn>(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    f: F,
) -> Result<Tensor> {
    let (sa, sb) = (a.shape(), b.shape());
    let (xa, xb) = (a.as_slice_of::<T>(), b.as_slice_of::<T>());
    // A refused output is an error naming the op (rule ops rely on it).
    if crate::tensor::shape::same_dims(sa, sb) {
        refused::obtainable::<T>(op, sa, xa.len())?;
        return Ok(Tensor::build::<T>(Dims::from_slice(sa), |out| {
            if F::BLOCKS {
                zip_slices_by_blocks(xa, xb, out, f);
            } else {
                for_each_chunk(out, |off, chunk| {
                    let n = chunk.len();
                    let (pa, pb) = (&xa[off..off + n], &xb[off..off + n]);
                    wide(
                        #[inline(always)]
                        || {
                            for ((o, &x), &y) in chunk.iter_mut().zip(pa).zip(pb) {
                                o.write(f.call(x, y));
                            }
                        },
                    )
                });
            }
            // SAFETY: `for_each_chunk` hands over every element of the output,
            // and each chunk is written in full: `pa` and `pb` are sliced to the
            // chunk's length (panicking, not stopping early, if an operand is short).
            unsafe { Filled::assume(out) }
        }));
    }
    let shape = broadcast_shapes(op, sa, sb)?;
    // An empty result needs no plan (whose stride products could overflow
    // for huge zero-sized shapes); a huge one is an error, not an abort.
    let len = checked_numel(op, &shape)?;
    if len == 0 {
        return Ok(Tensor::from_exact_iter::<T>(shape, []));
    }
    refused::obtainable::<T>(op, &shape, len)?;
    if xb.len() == 1 {
        let y = xb[0];
        return Ok(Tensor::build::<T>(shape, |out| {
            map_with(
                xa,
                out,
                #[inline(always)]
                move |x| f.call(x, y),
            );
            // SAFETY: `map_with` writes every element of its output.
            unsafe { Filled::assume(out) }
        }));
    }
    if xa.len() == 1 {
        let x = xa[0];
        return Ok(Tensor::build::<T>(shape, |out| {
            map_with(
                xb,
                out,
                #[inline(always)]
                move |y| f.call(x, y),
            );
            // SAFETY: as above.
            unsafe { Filled::assume(out) }
        }));
    }
    let plan = BroadcastPlan::new(
        &shape,
        &broadcast_strides(sa, &shape),
        &broadcast_strides(sb, &shape),
    );
    Ok(Tensor::build::<T>(shape, |out| {
        plan.run(xa, xb, out, f);
        // SAFETY: `BroadcastPlan::run` writes every element of an output of the
        // shape the plan was made for.
        unsafe { Filled::assume(out) }
    }))
}

/// Materialises `x` broadcast to `shape` (which it must broadcast to).
pub fn broadcast_to(op: &'static str, x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if x.shape() == shape {
        return Ok(x.clone());
    }
    if !crate::tensor::shape::broadcastable_to(x.shape(), shape) {
        return Err(Error::shape_mismatch(op, x.shape(), shape));
    }
    if !x.is_float() {
        // Masks and indices: a plain copy (no float machinery).
        return super::mask::expand_any(op, x, shape);
    }
    if checked_numel(op, shape)? == 0 {
        return Ok(crate::with_any_dtype!(x.dtype(), T => {
            Tensor::from_exact_iter::<T>(Dims::from_slice(shape), [])
        }));
    }
    // Reuse the binary machinery with a zero-stride second operand: out = x.
    #[derive(Clone, Copy)]
    struct First;
    impl BinaryFn for First {
        #[inline(always)]
        fn call<T: Element>(self, a: T, _b: T) -> T {
            a
        }
    }
    Ok(crate::with_dtype!(op, x.dtype(), T => {
        let src = x.as_slice_of::<T>();
        let zero = [<T as num_traits::Zero>::zero()];
        let target = Dims::from_slice(shape);
        let plan = BroadcastPlan::new(
            &target,
            &broadcast_strides(x.shape(), shape),
            &Dims::from_elem(0, shape.len()),
        );
        Tensor::build::<T>(target, |out| {
            plan.run(src, &zero, out, First);
            // SAFETY: `BroadcastPlan::run` writes every element of an output of
            // the shape the plan was made for (`target`).
            unsafe { Filled::assume(out) }
        })
    }))
}

/// Coalesced iteration plan for a broadcast binary op.
struct BroadcastPlan {
    /// Outer dimensions (all but the innermost), coalesced.
    outer: Dims,
    outer_a: Dims,
    outer_b: Dims,
    /// Length of the innermost dimension and the operands' strides along it (0 or 1).
    inner: usize,
    inner_a: usize,
    inner_b: usize,
}

impl BroadcastPlan {
    fn new(shape: &[usize], sa: &[usize], sb: &[usize]) -> Self {
        // Coalesce adjacent dimensions that are contiguous for both operands.
        let mut dims: Vec<(usize, usize, usize)> = Vec::with_capacity(shape.len());
        for i in 0..shape.len() {
            if shape[i] == 1 {
                continue;
            }
            if let Some(last) = dims.last_mut()
                && last.1 == sa[i] * shape[i]
                && last.2 == sb[i] * shape[i]
            {
                last.0 *= shape[i];
                last.1 = sa[i];
                last.2 = sb[i];
                continue;
            }
            dims.push((shape[i], sa[i], sb[i]));
        }
        let (inner, inner_a, inner_b) = dims.pop().unwrap_or((1, 0, 0));
        BroadcastPlan {
            outer: dims.iter().map(|d| d.0).collect(),
            outer_a: dims.iter().map(|d| d.1).collect(),
            outer_b: dims.iter().map(|d| d.2).collect(),
            inner,
            inner_a,
            inner_b,
        }
    }

    fn rows(&self) -> usize {
        self.outer.iter().product()
    }

    /// Offsets into a and b of outer row `row`.
    fn offsets_of(&self, mut row: usize) -> (usize, usize) {
        let (mut oa, mut ob) = (0, 0);
        for i in (0..self.outer.len()).rev() {
            let d = self.outer[i];
            let idx = row % d;
            row /= d;
            oa += idx * self.outer_a[i];
            ob += idx * self.outer_b[i];
        }
        (oa, ob)
    }

    /// Writes every element of `out`, which has the plan's shape: its
    /// `rows() * inner` elements (coalescing keeps the product), as whole
    /// rows of `inner`.
    fn run<T: Element, F: BinaryFn>(&self, a: &[T], b: &[T], out: &mut [MaybeUninit<T>], f: F) {
        let n = self.inner;
        let rows = self.rows();
        assert_eq!(out.len(), rows * n, "an output of the plan's shape");
        if n == 0 || rows == 0 {
            return;
        }
        let rows_per_task = (super::parallel::CHUNK / n).max(1);
        if should_parallelize(out.len()) && rows > 1 {
            out.par_chunks_mut(rows_per_task * n)
                .enumerate()
                .for_each(|(t, chunk)| self.run_rows(a, b, chunk, t * rows_per_task, f));
        } else {
            self.run_rows(a, b, out, 0, f);
        }
    }

    /// Fills `out` (whole rows) starting at outer row `first_row`: each row
    /// in full, from operand slices of the row's length or by index.
    fn run_rows<T: Element, F: BinaryFn>(
        &self,
        a: &[T],
        b: &[T],
        out: &mut [MaybeUninit<T>],
        first_row: usize,
        f: F,
    ) {
        let n = self.inner;
        let mut idx: Dims = Dims::from_elem(0, self.outer.len());
        let mut rem = first_row;
        for i in (0..self.outer.len()).rev() {
            idx[i] = rem % self.outer[i];
            rem /= self.outer[i];
        }
        let (mut oa, mut ob) = self.offsets_of(first_row);
        for row in out.chunks_mut(n) {
            match (self.inner_a, self.inner_b) {
                (1, 1) => {
                    for ((o, &x), &y) in row.iter_mut().zip(&a[oa..oa + n]).zip(&b[ob..ob + n]) {
                        o.write(f.call(x, y));
                    }
                }
                (1, 0) => {
                    let y = b[ob];
                    for (o, &x) in row.iter_mut().zip(&a[oa..oa + n]) {
                        o.write(f.call(x, y));
                    }
                }
                (0, 1) => {
                    let x = a[oa];
                    for (o, &y) in row.iter_mut().zip(&b[ob..ob + n]) {
                        o.write(f.call(x, y));
                    }
                }
                (ia, ib) => {
                    for (j, o) in row.iter_mut().enumerate() {
                        o.write(f.call(a[oa + j * ia], b[ob + j * ib]));
                    }
                }
            }
            // Advance the odometer over the outer dimensions.
            for i in (0..self.outer.len()).rev() {
                idx[i] += 1;
                oa += self.outer_a[i];
                ob += self.outer_b[i];
                if idx[i] < self.outer[i] {
                    break;
                }
                oa -= self.outer_a[i] * self.outer[i];
                ob -= self.outer_b[i] * self.outer[i];
                idx[i] = 0;
            }
        }
    }
}

/// In-place `acc = f(acc, x)` when `acc` owns its storage; otherwise a new
/// tensor (copy on write). Shapes must be equal and dtypes equal.
pub fn zip_assign<F: BinaryFn>(op: &'static str, acc: Tensor, x: &Tensor, f: F) -> Result<Tensor> {
    if !acc.same_shape(x) || acc.dtype() != x.dtype() {
        return zip(op, &acc, x, f);
    }
    let mut acc = acc;
    let done = crate::with_dtype!(op, acc.dtype(), T => {
        let src = x.as_slice_of::<T>();
        // Do not write into storage `x` also reads (it would be shared anyway).
        match acc.unique_slice_mut::<T>() {
            Some(dst) => {
                super::parallel::for_each_chunk_init(dst, |off, chunk| {
                    wide(
                        #[inline(always)]
                        || {
                            for (d, &s) in chunk.iter_mut().zip(&src[off..]) {
                                *d = f.call(*d, s);
                            }
                        },
                    )
                });
                true
            }
            None => false,
        }
    });
    if done {
        Ok(acc)
    } else {
        zip(op, &acc, x, f)
    }
}

/// The dtype both operands share, or a mismatch error.
pub fn common_dtype(op: &'static str, a: &Tensor, b: &Tensor) -> Result<DType> {
    if a.dtype() == b.dtype() {
        Ok(a.dtype())
    } else {
        Err(Error::dtype_mismatch(op, a.dtype(), b.dtype()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::functors::{Add, Mul, Sub};

    use crate::tensor::test_util::tensor as t;

    #[test]
    fn broadcasting_general() {
        // [2,1,3] + [2,1] -> [2,2,3]
        let a = t(&[1., 2., 3., 4., 5., 6.], &[2, 1, 3]);
        let b = t(&[10., 20.], &[2, 1]);
        let c = zip("add", &a, &b, Add).unwrap();
        assert_eq!(c.shape(), &[2, 2, 3]);
        assert_eq!(
            c.to_f64_vec(),
            vec![11., 12., 13., 21., 22., 23., 14., 15., 16., 24., 25., 26.]
        );
        let d = zip("sub", &b, &a, Sub).unwrap();
        assert_eq!(d.to_f64_vec()[0], 9.0);
    }

    #[test]
    fn column_broadcast_and_scalars() {
        let a = t(&[1., 2., 3., 4.], &[2, 2]);
        let col = t(&[10., 100.], &[2, 1]);
        assert_eq!(
            zip("mul", &a, &col, Mul).unwrap().to_f64_vec(),
            vec![10., 20., 300., 400.]
        );
        let s = Tensor::scalar(2.0);
        assert_eq!(
            zip("mul", &s, &a, Mul).unwrap().to_f64_vec(),
            vec![2., 4., 6., 8.]
        );
    }

    #[test]
    fn large_parallel_broadcast_matches_serial() {
        let rows = 300;
        let cols = 1000;
        let a: Vec<f64> = (0..rows * cols).map(|i| i as f64).collect();
        let b: Vec<f64> = (0..cols).map(|i| -(i as f64)).collect();
        let c = zip("add", &t(&a, &[rows, cols]), &t(&b, &[cols]), Add).unwrap();
        let v = c.to_f64_vec();
        for r in [0, 17, 299] {
            for col in [0, 999] {
                assert_eq!(v[r * cols + col], (r * cols) as f64);
            }
        }
    }

    #[test]
    fn broadcast_to_materialises() {
        let x = t(&[1., 2.], &[2, 1]);
        let y = broadcast_to("expand", &x, &[3, 2, 2]).unwrap();
        assert_eq!(
            y.to_f64_vec(),
            vec![1., 1., 2., 2., 1., 1., 2., 2., 1., 1., 2., 2.]
        );
        assert!(broadcast_to("expand", &x, &[3]).is_err());
    }

    #[test]
    fn mixed_dtypes_are_errors() {
        let a = Tensor::from_vec(vec![1.0f32], &[1]).unwrap();
        let b = Tensor::from_vec(vec![1.0f64], &[1]).unwrap();
        assert!(matches!(
            zip("add", &a, &b, Add),
            Err(Error::DTypeMismatch { .. })
        ));
    }

    #[test]
    fn zip_assign_is_in_place_only_when_unique() {
        let a = t(&[1., 2.], &[2]);
        let keep = a.clone();
        let b = zip_assign("add", a, &t(&[1., 1.], &[2]), Add).unwrap();
        assert_eq!(keep.to_f64_vec(), vec![1., 2.]);
        assert_eq!(b.to_f64_vec(), vec![2., 3.]);
        let c = zip_assign("add", b.clone(), &t(&[1., 1.], &[2]), Add).unwrap();
        assert!(!c.shares_storage_with(&b));
    }
}

//! The three-operand elementwise kernel `zip3`, with NumPy broadcasting of
//! all three operands (`where`, and fused backward formulas such as
//! `pow_backward_self(g, x, y)`).
//!
//! Like `zip`, it never materialises a broadcast operand: shapes are
//! coalesced, the innermost dimension becomes a tight loop specialised for
//! each operand being contiguous or a repeated scalar, and an odometer walks
//! the outer dimensions.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::parallel::{for_each_chunk, should_parallelize, CHUNK};
use crate::base::error::{check_dtypes, Result};
use crate::tensor::shape::{broadcast_shapes, broadcast_strides, Dims};
use crate::tensor::{Element, Filled, Repr, Tensor};

/// An elementwise function of three elements.
pub trait TernaryFn: Copy + Send + Sync {
    /// Applies the function.
    fn call<T: Element>(self, a: T, b: T, c: T) -> T;
}

/// Applies `f` elementwise to `a`, `b` and `c`, broadcasting all three to a
/// common shape. Every operand must have the same dtype.
///
/// ```
/// use retrograd::{kernels::{self, TernaryFn}, Element, Tensor};
/// #[derive(Clone, Copy)]
/// struct MulAdd;
/// impl TernaryFn for MulAdd {
///     fn call<T: Element>(self, a: T, b: T, c: T) -> T { a * b + c }
/// }
/// let a = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?;
/// let b = Tensor::from_vec(vec![10.0, 100.0], &[2, 1])?;
/// let out = kernels::zip3("muladd", &a, &b, &Tensor::scalar(0.5), MulAdd)?;
/// assert_eq!(out.to_f64_vec(), vec![10.5, 20.5, 300.5, 400.5]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn zip3<F: TernaryFn>(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    f: F,
) -> Result<Tensor> {
    match (a.repr(), b.repr(), c.repr()) {
        (Repr::F32(x), Repr::F32(y), Repr::F32(z)) => {
            return Ok(Tensor::scalar(f.call(x.f32(), y.f32(), z.f32())))
        }
        (Repr::F64(x), Repr::F64(y), Repr::F64(z)) => {
            return Ok(Tensor::scalar(f.call(x.f64(), y.f64(), z.f64())))
        }
        _ => {}
    }
    for other in [b, c] {
        check_dtypes(op, a.dtype(), other.dtype())?;
    }
    let ab = broadcast_shapes(op, a.shape(), b.shape())?;
    let shape = broadcast_shapes(op, &ab, c.shape())?;
    let empty = crate::tensor::shape::checked_numel(op, &shape)? == 0;
    Ok(crate::with_dtype!(op, a.dtype(), T => {
        if empty {
            // No plan needed (its stride products could overflow for huge zero-sized shapes).
            return Ok(Tensor::from_exact_iter::<T>(shape, []));
        }
        let (xa, xb, xc) = (a.as_slice_of::<T>(), b.as_slice_of::<T>(), c.as_slice_of::<T>());
        if a.shape() == shape.as_slice() && b.shape() == a.shape() && c.shape() == a.shape() {
            Tensor::build::<T>(shape, |out| {
                for_each_chunk(out, |off, chunk| {
                    let n = chunk.len();
                    let (pa, pb, pc) = (&xa[off..off + n], &xb[off..off + n], &xc[off..off + n]);
                    for (((o, &x), &y), &z) in chunk.iter_mut().zip(pa).zip(pb).zip(pc) {
                        o.write(f.call(x, y, z));
                    }
                });
                // SAFETY: `for_each_chunk` hands over every element of the
                // output, and each chunk is written in full: the operands are
                // sliced to its length (panicking, not stopping early, if short).
                unsafe { Filled::assume(out) }
            })
        } else {
            let plan = Plan3::new(
                &shape,
                [
                    broadcast_strides(a.shape(), &shape),
                    broadcast_strides(b.shape(), &shape),
                    broadcast_strides(c.shape(), &shape),
                ],
            );
            Tensor::build::<T>(shape, |out| {
                plan.run([xa, xb, xc], out, f);
                // SAFETY: `Plan3::run` writes every element of an output of the
                // shape the plan was made for.
                unsafe { Filled::assume(out) }
            })
        }
    }))
}

/// Coalesced iteration plan for three broadcast operands.
struct Plan3 {
    /// Outer dimensions (all but the innermost) and each operand's strides along them.
    outer: Dims,
    outer_strides: [Dims; 3],
    /// Length of the innermost dimension and each operand's stride along it (0 or 1).
    inner: usize,
    inner_strides: [usize; 3],
}

impl Plan3 {
    fn new(shape: &[usize], strides: [Dims; 3]) -> Self {
        // Merge adjacent dimensions that are contiguous for every operand.
        let mut dims: Vec<(usize, [usize; 3])> = Vec::with_capacity(shape.len());
        for (i, &d) in shape.iter().enumerate() {
            if d == 1 {
                continue;
            }
            let s = [strides[0][i], strides[1][i], strides[2][i]];
            if let Some(last) = dims.last_mut()
                && (0..3).all(|k| last.1[k] == s[k] * d)
            {
                last.0 *= d;
                last.1 = s;
                continue;
            }
            dims.push((d, s));
        }
        let (inner, inner_strides) = dims.pop().unwrap_or((1, [0; 3]));
        let stride_of = |k: usize| dims.iter().map(|d| d.1[k]).collect::<Dims>();
        Plan3 {
            outer: dims.iter().map(|d| d.0).collect(),
            outer_strides: [stride_of(0), stride_of(1), stride_of(2)],
            inner,
            inner_strides,
        }
    }

    /// Writes every element of `out`, which has the plan's shape: its
    /// `rows * inner` elements (merging keeps the product), as whole rows of
    /// `inner`, each written in full by `inner_loop` from operand lanes of
    /// the row's length (or one repeated value).
    fn run<T: Element, F: TernaryFn>(&self, src: [&[T]; 3], out: &mut [MaybeUninit<T>], f: F) {
        let n = self.inner;
        let rows: usize = self.outer.iter().product();
        assert_eq!(out.len(), rows * n, "an output of the plan's shape");
        if n == 0 || rows == 0 {
            return;
        }
        if should_parallelize(out.len()) && rows > 1 {
            let rows_per_task = (CHUNK / n).max(1);
            out.par_chunks_mut(rows_per_task * n)
                .enumerate()
                .for_each(|(t, chunk)| self.run_rows(src, chunk, t * rows_per_task, f));
        } else {
            self.run_rows(src, out, 0, f);
        }
    }

    /// Fills `out` (whole rows) starting at outer row `first_row`.
    fn run_rows<T: Element, F: TernaryFn>(
        &self,
        src: [&[T]; 3],
        out: &mut [MaybeUninit<T>],
        first_row: usize,
        f: F,
    ) {
        let n = self.inner;
        let rank = self.outer.len();
        let mut idx: Dims = Dims::from_elem(0, rank);
        let mut off = [0usize; 3];
        let mut rem = first_row;
        for i in (0..rank).rev() {
            idx[i] = rem % self.outer[i];
            rem /= self.outer[i];
            for (k, o) in off.iter_mut().enumerate() {
                *o += idx[i] * self.outer_strides[k][i];
            }
        }
        for row in out.chunks_mut(n) {
            let lane = |k: usize| Lane::new(src[k], off[k], n, self.inner_strides[k]);
            inner_loop(lane(0), lane(1), lane(2), row, f);
            for i in (0..rank).rev() {
                idx[i] += 1;
                for (k, o) in off.iter_mut().enumerate() {
                    *o += self.outer_strides[k][i];
                }
                if idx[i] < self.outer[i] {
                    break;
                }
                for (k, o) in off.iter_mut().enumerate() {
                    *o -= self.outer_strides[k][i] * self.outer[i];
                }
                idx[i] = 0;
            }
        }
    }
}

/// One operand along the innermost dimension: contiguous, or one repeated value.
#[derive(Clone, Copy)]
enum Lane<'a, T> {
    Run(&'a [T]),
    Splat(T),
}

impl<'a, T: Element> Lane<'a, T> {
    #[inline(always)]
    fn new(src: &'a [T], off: usize, n: usize, stride: usize) -> Self {
        if stride == 0 {
            Lane::Splat(src[off])
        } else {
            Lane::Run(&src[off..off + n])
        }
    }
}

/// The innermost loop, monomorphised for each contiguous/splat combination
/// so every case is a straight, vectorisable loop.
#[inline(always)]
fn inner_loop<T: Element, F: TernaryFn>(
    a: Lane<'_, T>,
    b: Lane<'_, T>,
    c: Lane<'_, T>,
    out: &mut [MaybeUninit<T>],
    f: F,
) {
    use Lane::{Run, Splat};
    match (a, b, c) {
        (Run(a), Run(b), Run(c)) => {
            for (((o, &x), &y), &z) in out.iter_mut().zip(a).zip(b).zip(c) {
                o.write(f.call(x, y, z));
            }
        }
        (Run(a), Run(b), Splat(z)) => {
            for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                o.write(f.call(x, y, z));
            }
        }
        (Run(a), Splat(y), Run(c)) => {
            for ((o, &x), &z) in out.iter_mut().zip(a).zip(c) {
                o.write(f.call(x, y, z));
            }
        }
        (Splat(x), Run(b), Run(c)) => {
            for ((o, &y), &z) in out.iter_mut().zip(b).zip(c) {
                o.write(f.call(x, y, z));
            }
        }
        (Run(a), Splat(y), Splat(z)) => {
            for (o, &x) in out.iter_mut().zip(a) {
                o.write(f.call(x, y, z));
            }
        }
        (Splat(x), Run(b), Splat(z)) => {
            for (o, &y) in out.iter_mut().zip(b) {
                o.write(f.call(x, y, z));
            }
        }
        (Splat(x), Splat(y), Run(c)) => {
            for (o, &z) in out.iter_mut().zip(c) {
                o.write(f.call(x, y, z));
            }
        }
        (Splat(x), Splat(y), Splat(z)) => {
            let v = f.call(x, y, z);
            for o in out.iter_mut() {
                o.write(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Error};

    #[derive(Clone, Copy)]
    struct Select;
    impl TernaryFn for Select {
        fn call<T: Element>(self, c: T, a: T, b: T) -> T {
            if c != T::zero() {
                a
            } else {
                b
            }
        }
    }

    #[derive(Clone, Copy)]
    struct Affine;
    impl TernaryFn for Affine {
        fn call<T: Element>(self, a: T, b: T, c: T) -> T {
            a * b + c
        }
    }

    use crate::tensor::test_util::tensor as t;

    /// The same computation by explicit index arithmetic, for comparison.
    fn reference(a: &Tensor, b: &Tensor, c: &Tensor) -> Vec<f64> {
        let s1 = broadcast_shapes("t", a.shape(), b.shape()).unwrap();
        let shape = broadcast_shapes("t", &s1, c.shape()).unwrap();
        let n: usize = shape.iter().product();
        let strides = [a, b, c].map(|x| broadcast_strides(x.shape(), &shape));
        let vals = [a, b, c].map(|x| x.to_f64_vec());
        (0..n)
            .map(|flat| {
                let mut rem = flat;
                let mut off = [0usize; 3];
                for i in (0..shape.len()).rev() {
                    let idx = rem % shape[i];
                    rem /= shape[i];
                    for k in 0..3 {
                        off[k] += idx * strides[k][i];
                    }
                }
                vals[0][off[0]] * vals[1][off[1]] + vals[2][off[2]]
            })
            .collect()
    }

    #[test]
    fn broadcasts_every_operand_combination() {
        let a = t(&(0..24).map(f64::from).collect::<Vec<_>>(), &[2, 3, 4]);
        let b = t(&[1., -2., 3.], &[3, 1]);
        let c = t(&[0.5, 0.25, 0.125, 1.0], &[4]);
        let shapes: [(&Tensor, &Tensor, &Tensor); 6] = [
            (&a, &b, &c),
            (&b, &a, &c),
            (&c, &b, &a),
            (&b, &c, &Tensor::scalar(7.0)),
            (&Tensor::scalar(2.0), &c, &b),
            (&a, &a, &a),
        ];
        for (x, y, z) in shapes {
            let got = zip3("affine", x, y, z, Affine).unwrap();
            assert_eq!(got.to_f64_vec(), reference(x, y, z));
        }
    }

    #[test]
    fn select_and_scalars() {
        let cond = t(&[1., 0., 0., 1.], &[2, 2]);
        let out = zip3(
            "where",
            &cond,
            &t(&[10., 20.], &[2]),
            &Tensor::scalar(-1.0),
            Select,
        )
        .unwrap();
        assert_eq!(out.to_f64_vec(), vec![10., -1., -1., 20.]);
        let s = zip3(
            "where",
            &Tensor::scalar(0.0f32),
            &Tensor::scalar(1.0f32),
            &Tensor::scalar(2.0f32),
            Select,
        )
        .unwrap();
        assert!(s.is_scalar());
        assert_eq!(s.item(), 2.0);
    }

    #[test]
    fn large_broadcast_runs_in_parallel_and_matches() {
        let rows = 200;
        let cols = 700;
        let a = t(
            &(0..rows * cols).map(|i| i as f64).collect::<Vec<_>>(),
            &[rows, cols],
        );
        let b = t(&(0..rows).map(|i| i as f64).collect::<Vec<_>>(), &[rows, 1]);
        let c = t(&(0..cols).map(|i| -(i as f64)).collect::<Vec<_>>(), &[cols]);
        assert_eq!(
            zip3("affine", &a, &b, &c, Affine).unwrap().to_f64_vec(),
            reference(&a, &b, &c)
        );
        let same = zip3("affine", &a, &a, &a, Affine).unwrap().to_f64_vec();
        assert_eq!(
            same[rows * cols - 1],
            reference(&a, &a, &a)[rows * cols - 1]
        );
    }

    #[test]
    fn errors() {
        let a = t(&[1., 2., 3.], &[3]);
        let f32s = Tensor::zeros(&[3], DType::F32).unwrap();
        assert!(matches!(
            zip3("where", &a, &a, &f32s, Select),
            Err(Error::DTypeMismatch { op: "where", .. })
        ));
        assert!(matches!(
            zip3("where", &a, &a, &t(&[1., 2.], &[2]), Select),
            Err(Error::ShapeMismatch { op: "where", .. })
        ));
        let empty = Tensor::zeros(&[0, 3], DType::F64).unwrap();
        assert_eq!(
            zip3("where", &empty, &a, &a, Select).unwrap().shape(),
            &[0, 3]
        );
    }
}

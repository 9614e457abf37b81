//! Kernels of integer and bool tensors: comparisons (bool results, with
//! broadcasting), a broadcast copy for any dtype, the triangle of a matrix
//! (`tril`/`triu`) and `topk` indices. They only compare and move elements,
//! so they are generic over [`DataType`] (all four dtypes), not `Element`.

use std::cmp::Ordering;

use crate::base::error::{check_dtypes, Error, Result};
use crate::tensor::shape::{broadcast_shapes, broadcast_strides, checked_numel, Dims};
use crate::tensor::{DataType, Tensor};

/// A comparison of two elements: PyTorch's `eq`, `ne`, `lt`, `le`, `gt`, `ge`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    /// `a == b`.
    Eq,
    /// `a != b`.
    Ne,
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a >= b`.
    Ge,
}

impl Comparison {
    /// PyTorch's name of the comparison.
    pub fn name(self) -> &'static str {
        match self {
            Comparison::Eq => "eq",
            Comparison::Ne => "ne",
            Comparison::Lt => "lt",
            Comparison::Le => "le",
            Comparison::Gt => "gt",
            Comparison::Ge => "ge",
        }
    }

    /// The comparison of two elements (IEEE: every comparison with a NaN is
    /// false but `ne`, which is true).
    #[inline(always)]
    pub fn call<T: DataType>(self, a: T, b: T) -> bool {
        match self {
            Comparison::Eq => a == b,
            Comparison::Ne => a != b,
            Comparison::Lt => a < b,
            Comparison::Le => a <= b,
            Comparison::Gt => a > b,
            Comparison::Ge => a >= b,
        }
    }
}

/// Row-major offsets into a tensor of shape `from` for every position of
/// `to` (which `from` broadcasts to), in order, handed to `f`.
fn for_each_broadcast_offset(from: &[usize], to: &[usize], mut f: impl FnMut(usize)) {
    let strides = broadcast_strides(from, to);
    let n: usize = to.iter().product();
    let mut idx: Dims = smallvec::smallvec![0; to.len()];
    let mut off = 0usize;
    for _ in 0..n {
        f(off);
        for d in (0..to.len()).rev() {
            idx[d] += 1;
            off += strides[d];
            if idx[d] < to[d] {
                break;
            }
            off -= strides[d] * to[d];
            idx[d] = 0;
        }
    }
}

/// `cmp(a, b)` elementwise, broadcasting, as a bool tensor. `a` and `b`
/// must have the same dtype (any of the four: `Error::DTypeMismatch`
/// otherwise).
///
/// ```text
/// use retrograd::{kernels::mask::{compare, Comparison}, Tensor};
/// let a = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3])?;
/// let lt = compare(Comparison::Lt, &a, &Tensor::scalar(2.0))?;
/// assert_eq!(lt.to_vec::<bool>()?, vec![true, false, false]);
/// let col = Tensor::from_vec(vec![1i64, 3], &[2, 1])?;
/// let row = Tensor::from_vec(vec![1i64, 2, 3], &[3])?;
/// let eq = compare(Comparison::Eq, &col, &row)?;
/// assert_eq!(eq.shape(), &[2, 3]);
/// assert_eq!(eq.to_vec::<bool>()?, vec![true, false, false, false, false, true]);
/// assert!(compare(Comparison::Eq, &a, &row).is_err()); // f64 vs i64
/// ```
pub fn compare(cmp: Comparison, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let op = cmp.name();
    check_dtypes(op, a.dtype(), b.dtype())?;
    let shape = broadcast_shapes(op, a.shape(), b.shape())?;
    checked_numel(op, &shape)?;
    Ok(crate::with_any_dtype!(a.dtype(), T => {
        let (xa, xb) = (a.as_slice_of::<T>(), b.as_slice_of::<T>());
        if a.shape() == b.shape() {
            let v: Vec<bool> = xa.iter().zip(xb).map(|(&x, &y)| cmp.call(x, y)).collect();
            Tensor::from_buffer(shape, v.into())
        } else {
            let mut oa = Vec::with_capacity(shape.iter().product());
            for_each_broadcast_offset(a.shape(), &shape, |o| oa.push(o));
            let mut v = Vec::with_capacity(oa.len());
            let mut k = 0;
            for_each_broadcast_offset(b.shape(), &shape, |o| {
                v.push(cmp.call(xa[oa[k]], xb[o]));
                k += 1;
            });
            Tensor::from_buffer(shape, v.into())
        }
    }))
}

/// `x` broadcast to `shape` (which it must broadcast to), for any dtype.
///
/// ```text
/// use retrograd::{kernels::mask::expand_any, Tensor};
/// let m = Tensor::from_vec(vec![true, false], &[2, 1])?;
/// let e = expand_any("expand", &m, &[2, 2])?;
/// assert_eq!(e.to_vec::<bool>()?, vec![true, true, false, false]);
/// ```
pub fn expand_any(op: &'static str, x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if x.shape() == shape {
        return Ok(x.clone());
    }
    if !crate::tensor::shape::broadcastable_to(x.shape(), shape) {
        return Err(Error::shape_mismatch(op, x.shape(), shape));
    }
    checked_numel(op, shape)?;
    Ok(crate::with_any_dtype!(x.dtype(), T => {
        let src = x.as_slice_of::<T>();
        let mut v = Vec::with_capacity(shape.iter().product());
        for_each_broadcast_offset(x.shape(), shape, |o| v.push(src[o]));
        Tensor::from_buffer(Dims::from_slice(shape), v.into())
    }))
}

/// `a` where `cond` is true, `b` elsewhere, all three broadcast together;
/// any dtype for `a` and `b` (the same one), `cond` bool.
///
/// ```text
/// use retrograd::{kernels::mask::select, Tensor};
/// let c = Tensor::from_vec(vec![true, false], &[2])?;
/// let a = Tensor::from_vec(vec![1i64, 2], &[2])?;
/// assert_eq!(select("where", &c, &a, &Tensor::scalar(0i64))?.to_vec::<i64>()?, vec![1, 0]);
/// ```
pub fn select(op: &'static str, cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if cond.dtype() != crate::DType::Bool {
        return Err(Error::WrongDType {
            op,
            expected: crate::DType::Bool,
            found: cond.dtype(),
        });
    }
    check_dtypes(op, a.dtype(), b.dtype())?;
    let shape = broadcast_shapes(
        op,
        &broadcast_shapes(op, cond.shape(), a.shape())?,
        b.shape(),
    )?;
    let n = checked_numel(op, &shape)?;
    let c = expand_any(op, cond, &shape)?;
    let c = c.as_slice_of::<bool>();
    Ok(crate::with_any_dtype!(a.dtype(), T => {
        let (xa, xb) = (a.as_slice_of::<T>(), b.as_slice_of::<T>());
        let mut oa = Vec::with_capacity(n);
        for_each_broadcast_offset(a.shape(), &shape, |o| oa.push(o));
        let mut v = Vec::with_capacity(n);
        let mut k = 0;
        for_each_broadcast_offset(b.shape(), &shape, |o| {
            v.push(if c[k] { xa[oa[k]] } else { xb[o] });
            k += 1;
        });
        Tensor::from_buffer(shape, v.into())
    }))
}

/// The lower (`upper == false`: PyTorch's `tril`) or upper (`triu`)
/// triangle of the matrices in the last two dimensions of `x`, any dtype:
/// elements `(i, j)` with `j - i <= diagonal` (`tril`) or `j - i >= diagonal`
/// (`triu`) are kept, the others are zero (`false` for bool). `x` needs
/// rank at least 2.
///
/// ```text
/// use retrograd::{kernels::mask::triangle, Tensor};
/// let x = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6, 7, 8, 9], &[3, 3])?;
/// assert_eq!(triangle("tril", &x, 0, false)?.to_vec::<i64>()?, vec![1, 0, 0, 4, 5, 0, 7, 8, 9]);
/// assert_eq!(triangle("triu", &x, 1, true)?.to_vec::<i64>()?, vec![0, 2, 3, 0, 0, 6, 0, 0, 0]);
/// ```
pub fn triangle(op: &'static str, x: &Tensor, diagonal: i64, upper: bool) -> Result<Tensor> {
    if x.rank() < 2 {
        return Err(Error::invalid(
            op,
            format!(
                "needs a tensor of rank at least 2, got shape {:?}",
                x.shape()
            ),
        ));
    }
    let (rows, cols) = (x.shape()[x.rank() - 2], x.shape()[x.rank() - 1]);
    let keep = move |k: usize| {
        let (i, j) = (((k / cols) % rows) as i64, (k % cols) as i64);
        if upper {
            j - i >= diagonal
        } else {
            j - i <= diagonal
        }
    };
    Ok(crate::with_any_dtype!(x.dtype(), T => {
        let src = x.as_slice_of::<T>();
        let v: Vec<T> = src
            .iter()
            .enumerate()
            .map(|(k, &e)| if keep(k) { e } else { T::default() })
            .collect();
        Tensor::from_buffer(Dims::from_slice(x.shape()), v.into())
    }))
}

/// The positions of the `k` largest (`largest`) or smallest elements along
/// the last axis of `x`, in order (largest first, or smallest first), as an
/// i64 tensor of `x`'s shape with the last axis `k`. Ties keep the lower
/// position first; a NaN counts as larger than every number (PyTorch). `x`
/// is f32, f64 or i64; `k` at most the axis' length.
///
/// ```text
/// use retrograd::{kernels::mask::topk_indices, Tensor};
/// let x = Tensor::from_vec(vec![1.0, 5.0, 3.0, 5.0, 0.0, 2.0], &[2, 3])?;
/// let i = topk_indices("topk", &x, 2, true)?;
/// assert_eq!(i.shape(), &[2, 2]);
/// assert_eq!(i.to_vec::<i64>()?, vec![1, 2, 0, 2]);
/// ```
pub fn topk_indices(op: &'static str, x: &Tensor, k: usize, largest: bool) -> Result<Tensor> {
    if x.rank() == 0 {
        return Err(Error::invalid(op, "needs a tensor of rank at least 1"));
    }
    let len = x.shape()[x.rank() - 1];
    if k > len {
        return Err(Error::invalid(
            op,
            format!(
                "k = {k} is larger than the last axis ({len}) of shape {:?}",
                x.shape()
            ),
        ));
    }
    if x.dtype() == crate::DType::Bool {
        return Err(Error::WrongDType {
            op,
            expected: crate::DType::F32,
            found: crate::DType::Bool,
        });
    }
    let mut out_shape = Dims::from_slice(x.shape());
    *out_shape.last_mut().expect("rank >= 1") = k;
    checked_numel(op, &out_shape)?;
    Ok(crate::with_any_dtype!(x.dtype(), T => {
        let src = x.as_slice_of::<T>();
        // NaN (unordered with itself) sorts above every number.
        let nan = |v: T| v.partial_cmp(&v).is_none();
        let key = |a: T, b: T| -> Ordering {
            match (nan(a), nan(b)) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
            }
        };
        let mut out: Vec<i64> = Vec::with_capacity(out_shape.iter().product());
        let mut order: Vec<usize> = Vec::with_capacity(len);
        if len > 0 {
            for lane in src.chunks_exact(len) {
                order.clear();
                order.extend(0..len);
                // A stable sort keeps tied elements in position order.
                order.sort_by(|&p, &q| {
                    let o = key(lane[p], lane[q]);
                    if largest { o.reverse() } else { o }
                });
                out.extend(order[..k].iter().map(|&p| p as i64));
            }
        }
        Tensor::from_buffer(out_shape, out.into())
    }))
}

/// The examples in this file's docs, run as unit tests (the module is
/// private to the engine, so rustdoc cannot run them as doctests).
#[cfg(test)]
mod doc_examples {
    #[test]
    fn compare() -> crate::Result<()> {
        use crate::{
            kernels::mask::{compare, Comparison},
            Tensor,
        };
        let a = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3])?;
        let lt = compare(Comparison::Lt, &a, &Tensor::scalar(2.0))?;
        assert_eq!(lt.to_vec::<bool>()?, vec![true, false, false]);
        let col = Tensor::from_vec(vec![1i64, 3], &[2, 1])?;
        let row = Tensor::from_vec(vec![1i64, 2, 3], &[3])?;
        let eq = compare(Comparison::Eq, &col, &row)?;
        assert_eq!(eq.shape(), &[2, 3]);
        assert_eq!(
            eq.to_vec::<bool>()?,
            vec![true, false, false, false, false, true]
        );
        assert!(compare(Comparison::Eq, &a, &row).is_err()); // f64 vs i64
        Ok(())
    }

    #[test]
    fn expand_any() -> crate::Result<()> {
        use crate::{kernels::mask::expand_any, Tensor};
        let m = Tensor::from_vec(vec![true, false], &[2, 1])?;
        let e = expand_any("expand", &m, &[2, 2])?;
        assert_eq!(e.to_vec::<bool>()?, vec![true, true, false, false]);
        Ok(())
    }

    #[test]
    fn select() -> crate::Result<()> {
        use crate::{kernels::mask::select, Tensor};
        let c = Tensor::from_vec(vec![true, false], &[2])?;
        let a = Tensor::from_vec(vec![1i64, 2], &[2])?;
        assert_eq!(
            select("where", &c, &a, &Tensor::scalar(0i64))?.to_vec::<i64>()?,
            vec![1, 0]
        );
        Ok(())
    }

    #[test]
    fn triangle() -> crate::Result<()> {
        use crate::{kernels::mask::triangle, Tensor};
        let x = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6, 7, 8, 9], &[3, 3])?;
        assert_eq!(
            triangle("tril", &x, 0, false)?.to_vec::<i64>()?,
            vec![1, 0, 0, 4, 5, 0, 7, 8, 9]
        );
        assert_eq!(
            triangle("triu", &x, 1, true)?.to_vec::<i64>()?,
            vec![0, 2, 3, 0, 0, 6, 0, 0, 0]
        );
        Ok(())
    }

    #[test]
    fn topk_indices() -> crate::Result<()> {
        use crate::{kernels::mask::topk_indices, Tensor};
        let x = Tensor::from_vec(vec![1.0, 5.0, 3.0, 5.0, 0.0, 2.0], &[2, 3])?;
        let i = topk_indices("topk", &x, 2, true)?;
        assert_eq!(i.shape(), &[2, 2]);
        assert_eq!(i.to_vec::<i64>()?, vec![1, 2, 0, 2]);
        Ok(())
    }
}

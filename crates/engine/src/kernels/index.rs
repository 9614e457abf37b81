//! Indexing kernels: `index_select` and `gather` read elements at integer
//! positions; `index_add` and `scatter_add` (their gradients) add elements
//! at those positions.
//!
//! Indices arrive as i64 tensors, or as f32 or f64 tensors holding
//! integers. [`indices`] turns them into `usize`s once, rejecting negative,
//! too large, and non-integer values with typed errors (a bool tensor is
//! `Error::WrongDType`); f64 represents every integer up to 2^53 exactly,
//! f32 up to 2^24.

use rayon::prelude::*;

use super::layout::{for_each_row, outer_inner};
use super::parallel::should_parallelize;
use crate::base::error::{check_dtypes, Error, Result};
use crate::tensor::shape::{contiguous_strides, Dims};
use crate::tensor::{DType, Filled, Tensor};

/// The elements of `index` as positions into a dimension of `size`.
///
/// ```text
/// use retrograd::{kernels::index, Error, Tensor};
/// let i = Tensor::from_vec(vec![2.0f32, 0.0], &[2])?;
/// assert_eq!(index::indices("gather", &i, 3)?, vec![2, 0]);
/// assert!(matches!(index::indices("gather", &i, 2), Err(Error::IndexOutOfRange { index: 2, size: 2, .. })));
/// assert!(index::indices("gather", &Tensor::scalar(0.5), 3).is_err());
/// let j = Tensor::from_vec(vec![1i64, 2], &[2])?;
/// assert_eq!(index::indices("gather", &j, 3)?, vec![1, 2]);
/// assert!(index::indices("gather", &Tensor::scalar(-1i64), 3).is_err());
/// ```
pub fn indices(op: &'static str, index: &Tensor, size: usize) -> Result<Vec<usize>> {
    let convert = |v: f64| -> Result<usize> {
        if v.fract() != 0.0 || !v.is_finite() {
            return Err(Error::invalid(op, format!("index {v} is not an integer")));
        }
        if v < 0.0 || v >= size as f64 {
            return Err(Error::IndexOutOfRange {
                op,
                index: v as i64,
                size,
            });
        }
        Ok(v as usize)
    };
    match index.dtype() {
        DType::F32 => index
            .as_slice_of::<f32>()
            .iter()
            .map(|&v| convert(v as f64))
            .collect(),
        DType::F64 => index
            .as_slice_of::<f64>()
            .iter()
            .map(|&v| convert(v))
            .collect(),
        DType::I64 => index
            .as_slice_of::<i64>()
            .iter()
            .map(|&v| match usize::try_from(v) {
                Ok(i) if i < size => Ok(i),
                _ => Err(Error::IndexOutOfRange { op, index: v, size }),
            })
            .collect(),
        found @ (DType::Bool | DType::F16 | DType::BF16) => Err(Error::WrongDType {
            op,
            expected: DType::I64,
            found,
        }),
    }
}

/// The slices of `x` at positions `idx` along `dim`: the output has `x`'s
/// shape with `dim` of size `idx.len()`.
///
/// # Panics
///
/// If `dim` or a position is out of range (the `index_select` op checks
/// them, through [`indices`], before calling this).
///
/// ```text
/// use retrograd::{kernels::index, Tensor};
/// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
/// let y = index::index_select(&x, 0, &[2, 0, 2]);
/// assert_eq!(y.to_f64_vec(), vec![5.0, 6.0, 1.0, 2.0, 5.0, 6.0]);
/// ```
pub fn index_select(x: &Tensor, dim: usize, idx: &[usize]) -> Tensor {
    let size = x.shape()[dim];
    assert!(idx.iter().all(|&i| i < size));
    let (_, inner) = outer_inner(x.shape(), dim);
    let mut out_shape = Dims::from_slice(x.shape());
    out_shape[dim] = idx.len();
    crate::with_any_dtype!(x.dtype(), T => {
        let src = x.as_slice_of::<T>();
        Tensor::build::<T>(out_shape, |out| {
            for_each_row(out, inner, |row, o| {
                let (outer, j) = (row / idx.len(), row % idx.len());
                let from = &src[(outer * size + idx[j]) * inner..][..inner];
                for (d, &s) in o.iter_mut().zip(from) {
                    d.write(s);
                }
            });
            // SAFETY: `for_each_row` hands over every row of `inner` elements of
            // the output, and each is filled from a slice of `inner` elements.
            unsafe { Filled::assume(out) }
        })
    })
}

/// `base` with `src`'s slices added at positions `idx` along `dim`
/// (repeated positions accumulate). `src` has `base`'s shape with `dim` of
/// size `idx.len()`.
///
/// # Panics
///
/// If a position is out of range or `src` has the wrong size (the
/// `index_add` op checks both before calling this).
///
/// ```text
/// use retrograd::{kernels::index, Tensor};
/// let base = Tensor::zeros(&[3], retrograd::DType::F64)?;
/// let src = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3])?;
/// let y = index::index_add(&base, 0, &[2, 0, 2], &src)?;
/// assert_eq!(y.to_f64_vec(), vec![2.0, 0.0, 4.0]);
/// ```
pub fn index_add(base: &Tensor, dim: usize, idx: &[usize], src: &Tensor) -> Result<Tensor> {
    let size = base.shape()[dim];
    let (outer, inner) = outer_inner(base.shape(), dim);
    assert!(idx.iter().all(|&i| i < size) && src.numel() == outer * idx.len() * inner);
    Ok(crate::with_dtype!("index_add", base.dtype(), T => {
        let (b, s) = (base.as_slice_of::<T>(), src.as_slice_of::<T>());
        let mut out = b.to_vec();
        let add_block = |o: usize, block: &mut [T]| {
            for (j, &i) in idx.iter().enumerate() {
                let from = &s[(o * idx.len() + j) * inner..][..inner];
                for (d, &v) in block[i * inner..][..inner].iter_mut().zip(from) {
                    *d += v;
                }
            }
        };
        if should_parallelize(out.len()) && outer > 1 {
            out.par_chunks_mut(size * inner)
                .enumerate()
                .for_each(|(o, block)| add_block(o, block));
        } else if size * inner > 0 {
            for (o, block) in out.chunks_mut(size * inner).enumerate() {
                add_block(o, block);
            }
        }
        Tensor::from_buffer(Dims::from_slice(base.shape()), out.into())
    }))
}

/// Offsets of the positions of an index tensor of shape `index_shape` into
/// a tensor with `strides`, split around `dim`: one per outer position
/// (dimensions before `dim`) and one per inner position (after `dim`).
fn split_offsets(index_shape: &[usize], strides: &[usize], dim: usize) -> (Vec<usize>, Vec<usize>) {
    let offsets = |dims: &[usize], strides: &[usize]| -> Vec<usize> {
        let n: usize = dims.iter().product();
        (0..n)
            .map(|i| crate::tensor::shape::strided_offset(i, dims, strides))
            .collect()
    };
    (
        offsets(&index_shape[..dim], &strides[..dim]),
        offsets(&index_shape[dim + 1..], &strides[dim + 1..]),
    )
}

/// Checks `gather`/`scatter_add`'s shape rule: `index` has `x`'s rank and
/// is no larger than `x` in every dimension but `dim` (and no larger than
/// `src`, if given, in every dimension).
pub fn check_gather_shapes(
    op: &'static str,
    x: &[usize],
    dim: usize,
    index: &[usize],
    src: Option<&[usize]>,
) -> Result<()> {
    let fits_x = index.len() == x.len() && (0..x.len()).all(|d| d == dim || index[d] <= x[d]);
    if !fits_x {
        return Err(Error::shape_mismatch(op, x, index));
    }
    match src {
        // Name the source's shape when it is the source that is too small.
        Some(s) if !(s.len() == index.len() && s.iter().zip(index).all(|(s, i)| i <= s)) => {
            Err(Error::shape_mismatch(op, s, index))
        }
        _ => Ok(()),
    }
}

/// `out[p] = x[p with dimension dim replaced by index[p]]` for every
/// position `p` of `index` (PyTorch's `gather`).
///
/// ```text
/// use retrograd::{kernels::index, Tensor};
/// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?;
/// let i = Tensor::from_vec(vec![1.0, 1.0, 0.0, 1.0], &[2, 2])?;
/// assert_eq!(index::gather("gather", &x, 1, &i)?.to_f64_vec(), vec![2.0, 2.0, 3.0, 4.0]);
/// ```
pub fn gather(op: &'static str, x: &Tensor, dim: usize, index: &Tensor) -> Result<Tensor> {
    check_gather_shapes(op, x.shape(), dim, index.shape(), None)?;
    let idx = indices(op, index, x.shape()[dim])?;
    let strides = contiguous_strides(x.shape());
    let (outer_off, inner_off) = split_offsets(index.shape(), &strides, dim);
    let (mid, stride) = (index.shape()[dim], strides[dim]);
    let inner = inner_off.len();
    Ok(crate::with_any_dtype!(x.dtype(), T => {
        let src = x.as_slice_of::<T>();
        Tensor::build::<T>(Dims::from_slice(index.shape()), |out| {
            for_each_row(out, inner, |row, o| {
                let base = outer_off[row / mid];
                let ix = &idx[row * inner..][..inner];
                for ((d, &i), &off) in o.iter_mut().zip(ix).zip(&inner_off) {
                    d.write(src[base + i * stride + off]);
                }
            });
            // SAFETY: `for_each_row` hands over every row of `inner` elements of
            // the output, and each is filled: `ix` is sliced to `inner` elements
            // and `inner_off` has `inner` of them.
            unsafe { Filled::assume(out) }
        })
    }))
}

/// `base` with `src[p]` added at `p with dimension dim replaced by
/// index[p]` for every position `p` of `index` (PyTorch's `scatter_add`;
/// repeated targets accumulate, in index order).
///
/// ```text
/// use retrograd::{kernels::index, Tensor};
/// let base = Tensor::zeros(&[2, 2], retrograd::DType::F64)?;
/// let i = Tensor::from_vec(vec![1.0, 1.0, 0.0, 1.0], &[2, 2])?;
/// let src = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?;
/// assert_eq!(index::scatter_add("scatter_add", &base, 1, &i, &src)?.to_f64_vec(), vec![0.0, 3.0, 3.0, 4.0]);
/// ```
pub fn scatter_add(
    op: &'static str,
    base: &Tensor,
    dim: usize,
    index: &Tensor,
    src: &Tensor,
) -> Result<Tensor> {
    check_dtypes(op, base.dtype(), src.dtype())?;
    check_gather_shapes(op, base.shape(), dim, index.shape(), Some(src.shape()))?;
    let idx = indices(op, index, base.shape()[dim])?;
    let strides = contiguous_strides(base.shape());
    let src_strides = contiguous_strides(src.shape());
    let (outer_off, inner_off) = split_offsets(index.shape(), &strides, dim);
    let (src_outer, src_inner) = split_offsets(index.shape(), &src_strides, dim);
    let (mid, stride, src_stride) = (index.shape()[dim], strides[dim], src_strides[dim]);
    let inner = inner_off.len();
    Ok(crate::with_dtype!(op, base.dtype(), T => {
        let s = src.as_slice_of::<T>();
        let mut out = base.as_slice_of::<T>().to_vec();
        for (row, ix) in idx.chunks(inner.max(1)).enumerate().take(outer_off.len() * mid) {
            let (o, j) = (row / mid, row % mid);
            let (base, from) = (outer_off[o], src_outer[o] + j * src_stride);
            for ((&i, &off), &soff) in ix.iter().zip(&inner_off).zip(&src_inner) {
                out[base + i * stride + off] += s[from + soff];
            }
        }
        Tensor::from_buffer(Dims::from_slice(base.shape()), out.into())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::tensor::test_util::shaped as t;

    #[test]
    fn gather_middle_dim_with_smaller_index() {
        // x[a][b][c] = 100a + 10b + c, shape [2, 3, 4]; index shape [2, 2, 3].
        let x = t(
            (0..24)
                .map(|i| (100 * (i / 12) + 10 * (i / 4 % 3) + i % 4) as f64)
                .collect(),
            &[2, 3, 4],
        );
        let iv: Vec<f64> = (0..12).map(|i| ((i * 5) % 3) as f64).collect();
        let i = t(iv.clone(), &[2, 2, 3]);
        let g = gather("gather", &x, 1, &i).unwrap().to_f64_vec();
        for a in 0..2 {
            for b in 0..2 {
                for c in 0..3 {
                    let p = a * 6 + b * 3 + c;
                    assert_eq!(g[p], (100 * a) as f64 + 10.0 * iv[p] + c as f64);
                }
            }
        }
        // scatter_add puts each element back where gather took it from.
        let base = Tensor::zeros(&[2, 3, 4], DType::F64).unwrap();
        let ones = t(vec![1.0; 12], &[2, 2, 3]);
        let counts = scatter_add("scatter_add", &base, 1, &i, &ones).unwrap();
        assert_eq!(counts.to_f64_vec().iter().sum::<f64>(), 12.0);
        assert!(gather("gather", &x, 1, &t(vec![0.0; 4], &[4])).is_err());
        assert!(gather("gather", &x, 1, &t(vec![3.0; 12], &[2, 2, 3])).is_err());
    }

    #[test]
    fn large_inputs_take_the_parallel_paths() {
        let (r, c) = (400, 200);
        let x = t((0..r * c).map(|i| i as f64).collect(), &[r, c]);
        let rows: Vec<usize> = (0..r).map(|i| (i * 7) % r).collect();
        let y = index_select(&x, 0, &rows).to_f64_vec();
        assert_eq!(y[5 * c + 3], (rows[5] * c + 3) as f64);
        let cols = t((0..r * c).map(|i| ((i * 13) % c) as f64).collect(), &[r, c]);
        let g = gather("gather", &x, 1, &cols).unwrap().to_f64_vec();
        assert_eq!(g[301 * c + 17], (301 * c + (301 * c + 17) * 13 % c) as f64);
        let sum = index_add(&x, 0, &rows, &x).unwrap().to_f64_vec();
        assert_eq!(
            sum[rows[9] * c + 1],
            (rows[9] * c + 1) as f64 + (9 * c + 1) as f64
        );
    }

    #[test]
    fn index_select_and_add_on_inner_dims() {
        let x = t((0..12).map(f64::from).collect(), &[2, 3, 2]);
        let y = index_select(&x, 1, &[2, 2]);
        assert_eq!(y.shape(), &[2, 2, 2]);
        assert_eq!(y.to_f64_vec(), vec![4., 5., 4., 5., 10., 11., 10., 11.]);
        let back = index_add(
            &Tensor::zeros(&[2, 3, 2], DType::F64).unwrap(),
            1,
            &[2, 2],
            &y,
        )
        .unwrap();
        assert_eq!(
            back.to_f64_vec(),
            vec![0., 0., 0., 0., 8., 10., 0., 0., 0., 0., 20., 22.]
        );
        let wrong = Tensor::from_vec(vec![0.0f32, -1.0], &[2]).unwrap();
        assert!(matches!(
            indices("index_select", &wrong, 3),
            Err(Error::IndexOutOfRange { index: -1, .. })
        ));
        assert!(indices("index_select", &Tensor::scalar(f64::NAN), 3).is_err());
    }
}

/// The examples in this file's docs, run as unit tests (the module is
/// private to the engine, so rustdoc cannot run them as doctests).
#[cfg(test)]
mod doc_examples {
    #[test]
    fn indices() -> crate::Result<()> {
        use crate::{kernels::index, Error, Tensor};
        let i = Tensor::from_vec(vec![2.0f32, 0.0], &[2])?;
        assert_eq!(index::indices("gather", &i, 3)?, vec![2, 0]);
        assert!(matches!(
            index::indices("gather", &i, 2),
            Err(Error::IndexOutOfRange {
                index: 2,
                size: 2,
                ..
            })
        ));
        assert!(index::indices("gather", &Tensor::scalar(0.5), 3).is_err());
        let j = Tensor::from_vec(vec![1i64, 2], &[2])?;
        assert_eq!(index::indices("gather", &j, 3)?, vec![1, 2]);
        assert!(index::indices("gather", &Tensor::scalar(-1i64), 3).is_err());
        Ok(())
    }

    #[test]
    fn index_select() -> crate::Result<()> {
        use crate::{kernels::index, Tensor};
        let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
        let y = index::index_select(&x, 0, &[2, 0, 2]);
        assert_eq!(y.to_f64_vec(), vec![5.0, 6.0, 1.0, 2.0, 5.0, 6.0]);
        Ok(())
    }

    #[test]
    fn index_add() -> crate::Result<()> {
        use crate::{kernels::index, Tensor};
        let base = Tensor::zeros(&[3], crate::DType::F64)?;
        let src = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3])?;
        let y = index::index_add(&base, 0, &[2, 0, 2], &src)?;
        assert_eq!(y.to_f64_vec(), vec![2.0, 0.0, 4.0]);
        Ok(())
    }

    #[test]
    fn gather() -> crate::Result<()> {
        use crate::{kernels::index, Tensor};
        let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?;
        let i = Tensor::from_vec(vec![1.0, 1.0, 0.0, 1.0], &[2, 2])?;
        assert_eq!(
            index::gather("gather", &x, 1, &i)?.to_f64_vec(),
            vec![2.0, 2.0, 3.0, 4.0]
        );
        Ok(())
    }

    #[test]
    fn scatter_add() -> crate::Result<()> {
        use crate::{kernels::index, Tensor};
        let base = Tensor::zeros(&[2, 2], crate::DType::F64)?;
        let i = Tensor::from_vec(vec![1.0, 1.0, 0.0, 1.0], &[2, 2])?;
        let src = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?;
        assert_eq!(
            index::scatter_add("scatter_add", &base, 1, &i, &src)?.to_f64_vec(),
            vec![0.0, 3.0, 3.0, 4.0]
        );
        Ok(())
    }
}

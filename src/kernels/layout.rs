//! Layout kernels: copies that move elements without arithmetic —
//! `permute`, `cat`, `slice` (and its scatter, `slice_backward`), `pad`.
//!
//! Each views its tensors as `[outer, dim, inner]` blocks (or, for
//! `permute`, as coalesced strided dimensions) so the inner loop is a
//! contiguous copy wherever the layout allows one. Outputs above
//! [`PARALLEL_THRESHOLD`](super::parallel::PARALLEL_THRESHOLD) elements are
//! split across rayon by whole rows.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::parallel::{should_parallelize, CHUNK};
use crate::error::{Error, Result};
use crate::tensor::shape::{checked_numel, contiguous_strides, Dims};
use crate::tensor::{DataType, Filled, Tensor};

/// Copies `src` into `dst` (equal lengths): writes every element of `dst`,
/// and panics rather than stopping early if `src` is shorter.
#[inline(always)]
fn copy_into<T: Copy>(dst: &mut [MaybeUninit<T>], src: &[T]) {
    let src = &src[..dst.len()];
    for (d, &s) in dst.iter_mut().zip(src) {
        d.write(s);
    }
}

/// Calls `f(row_index, row)` for each `row_len`-element row of `out`, in
/// parallel (by groups of whole rows) when `out` is large. Every element of
/// `out` lies in exactly one row handed to `f` (the last one is shorter if
/// `row_len` does not divide `out.len()`).
pub(crate) fn for_each_row<T: Send>(
    out: &mut [MaybeUninit<T>],
    row_len: usize,
    f: impl Fn(usize, &mut [MaybeUninit<T>]) + Sync + Send,
) {
    if out.is_empty() {
        return;
    }
    assert!(row_len > 0, "rows of no elements cannot cover an output");
    if should_parallelize(out.len()) && out.len() > row_len {
        let rows_per_task = (CHUNK / row_len).max(1);
        out.par_chunks_mut(rows_per_task * row_len)
            .enumerate()
            .for_each(|(t, chunk)| {
                for (i, row) in chunk.chunks_mut(row_len).enumerate() {
                    f(t * rows_per_task + i, row);
                }
            });
    } else {
        for (i, row) in out.chunks_mut(row_len).enumerate() {
            f(i, row);
        }
    }
}

/// The products of the dimensions before and after `dim`.
pub(crate) fn outer_inner(shape: &[usize], dim: usize) -> (usize, usize) {
    (
        shape[..dim].iter().product(),
        shape[dim + 1..].iter().product(),
    )
}

/// Checks that `perm` is a permutation of `0..rank`.
pub fn check_permutation(op: &'static str, perm: &[usize], rank: usize) -> Result<()> {
    let mut seen = vec![false; rank];
    for &p in perm {
        if p >= rank || std::mem::replace(&mut seen[p], true) {
            return Err(Error::invalid(
                op,
                format!("{perm:?} is not a permutation of the {rank} dimensions"),
            ));
        }
    }
    if perm.len() != rank {
        return Err(Error::invalid(
            op,
            format!("{perm:?} is not a permutation of the {rank} dimensions"),
        ));
    }
    Ok(())
}

/// The tensor whose dimension `i` is dimension `perm[i]` of `x`.
/// A permutation that keeps the elements in order (one that only moves
/// size-1 dimensions) shares `x`'s storage.
///
/// ```
/// use retrograd::{kernels::layout, Tensor};
/// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
/// let t = layout::permute("permute", &x, &[1, 0])?;
/// assert_eq!(t.shape(), &[3, 2]);
/// assert_eq!(t.to_f64_vec(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn permute(op: &'static str, x: &Tensor, perm: &[usize]) -> Result<Tensor> {
    check_permutation(op, perm, x.rank())?;
    let in_strides = contiguous_strides(x.shape());
    let out_shape: Dims = perm.iter().map(|&p| x.shape()[p]).collect();
    // Coalesce: drop size-1 dimensions, merge neighbours that are contiguous in the input.
    let (mut dims, mut strides) = (Dims::new(), Dims::new());
    for &p in perm {
        let (d, s) = (x.shape()[p], in_strides[p]);
        if d == 1 {
            continue;
        }
        match (dims.last_mut(), strides.last_mut()) {
            (Some(ld), Some(ls)) if *ls == s * d => {
                *ld *= d;
                *ls = s;
            }
            _ => {
                dims.push(d);
                strides.push(s);
            }
        }
    }
    if x.numel() == 0 || dims.len() <= 1 {
        return x.reshape(&out_shape);
    }
    Ok(crate::with_any_dtype!(x.dtype(), T => {
        let src = x.as_slice_of::<T>();
        Tensor::build::<T>(out_shape, |out| {
            permute_into(src, out, &dims, &strides);
            // SAFETY: `permute_into` writes every element of an output of
            // `dims`'s element count, which is `out_shape`'s (coalescing keeps it).
            unsafe { Filled::assume(out) }
        })
    }))
}

/// Output tile edge of the blocked transpose.
const TILE: usize = 32;

/// Writes every element of `out` (`dims` of at least two dimensions,
/// `src` read at `strides`): whole `p_len x q_len` matrices, each as bands
/// of `TILE` rows whose every `(p, q)` is written, or whole rows of `last`.
fn permute_into<T: DataType>(
    src: &[T],
    out: &mut [MaybeUninit<T>],
    dims: &[usize],
    strides: &[usize],
) {
    assert_eq!(out.len(), dims.iter().product::<usize>());
    let r = dims.len();
    let (last, last_stride) = (dims[r - 1], strides[r - 1]);
    let row_offset = |mut row: usize, upto: usize| -> usize {
        let mut off = 0;
        for d in (0..upto).rev() {
            off += (row % dims[d]) * strides[d];
            row /= dims[d];
        }
        off
    };
    if strides[r - 2] == 1 {
        // A batch of 2-d transposes: out[b][p][q] = src[b + p + q * last_stride].
        let (p_len, q_len) = (dims[r - 2], last);
        let transpose = |base: usize, p0: usize, band: &mut [MaybeUninit<T>]| {
            let rows = band.len() / q_len;
            for q0 in (0..q_len).step_by(TILE) {
                let q1 = (q0 + TILE).min(q_len);
                for p in 0..rows {
                    let row = &mut band[p * q_len..][q0..q1];
                    let s = base + p0 + p;
                    for (q, o) in (q0..q1).zip(row) {
                        o.write(src[s + q * last_stride]);
                    }
                }
            }
        };
        let matrices = out.len() / (p_len * q_len);
        let run_matrix = |m: usize, mat: &mut [MaybeUninit<T>]| {
            let base = row_offset(m, r - 2);
            if should_parallelize(mat.len()) && matrices < 2 * rayon::current_num_threads() {
                mat.par_chunks_mut(TILE * q_len)
                    .enumerate()
                    .for_each(|(b, band)| transpose(base, b * TILE, band));
            } else {
                for (b, band) in mat.chunks_mut(TILE * q_len).enumerate() {
                    transpose(base, b * TILE, band);
                }
            }
        };
        if should_parallelize(out.len()) && matrices >= 2 * rayon::current_num_threads() {
            out.par_chunks_mut(p_len * q_len)
                .enumerate()
                .for_each(|(m, mat)| run_matrix(m, mat));
        } else {
            for (m, mat) in out.chunks_mut(p_len * q_len).enumerate() {
                run_matrix(m, mat);
            }
        }
    } else {
        // Rows of the output: contiguous or strided reads along the last dimension.
        for_each_row(out, last, |row, o| {
            let off = row_offset(row, r - 1);
            if last_stride == 1 {
                copy_into(o, &src[off..off + last]);
            } else {
                for (i, d) in o.iter_mut().enumerate() {
                    d.write(src[off + i * last_stride]);
                }
            }
        });
    }
}

/// Concatenates `tensors` along `dim` (already normalised). Every tensor
/// must have the same dtype, the same rank (at least 1) and the same size in
/// every other dimension.
///
/// ```
/// use retrograd::{kernels::layout, Tensor};
/// let a = Tensor::from_vec(vec![1.0, 2.0], &[2, 1])?;
/// let b = Tensor::from_vec(vec![3.0, 4.0, 5.0, 6.0], &[2, 2])?;
/// let c = layout::cat("cat", &[&a, &b], 1)?;
/// assert_eq!(c.shape(), &[2, 3]);
/// assert_eq!(c.to_f64_vec(), vec![1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn cat(op: &'static str, tensors: &[&Tensor], dim: usize) -> Result<Tensor> {
    let Some(first) = tensors.first() else {
        return Err(Error::invalid(op, "expected a non-empty list of tensors"));
    };
    let rank = first.rank();
    if rank == 0 {
        return Err(Error::invalid(op, "0-d tensors cannot be concatenated"));
    }
    if dim >= rank {
        return Err(Error::AxisOutOfRange {
            op,
            axis: dim as isize,
            rank,
        });
    }
    let mut out_shape = Dims::from_slice(first.shape());
    out_shape[dim] = 0;
    for t in tensors {
        if t.dtype() != first.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                lhs: first.dtype(),
                rhs: t.dtype(),
            });
        }
        let same =
            t.rank() == rank && (0..rank).all(|d| d == dim || t.shape()[d] == first.shape()[d]);
        if !same {
            return Err(Error::shape_mismatch(op, first.shape(), t.shape()));
        }
        out_shape[dim] =
            out_shape[dim]
                .checked_add(t.shape()[dim])
                .ok_or_else(|| Error::ShapeOverflow {
                    op,
                    shape: out_shape.to_vec(),
                })?;
    }
    checked_numel(op, &out_shape)?;
    let (_, inner) = outer_inner(&out_shape, dim);
    let row_len = out_shape[dim] * inner;
    Ok(crate::with_any_dtype!(first.dtype(), T => {
        let parts: Vec<&[T]> = tensors.iter().map(|t| t.as_slice_of::<T>()).collect();
        let widths: Vec<usize> = tensors.iter().map(|t| t.shape()[dim] * inner).collect();
        Tensor::build::<T>(out_shape, |out| {
            for_each_row(out, row_len, |o, row| {
                let mut at = 0;
                for (p, &w) in parts.iter().zip(&widths) {
                    copy_into(&mut row[at..at + w], &p[o * w..(o + 1) * w]);
                    at += w;
                }
            });
            // SAFETY: `for_each_row` hands over every row of the output, and the
            // parts' widths add up to `row_len` (the output's `dim` is the sum
            // of theirs), so the copies fill each row.
            unsafe { Filled::assume(out) }
        })
    }))
}

/// Elements `start, start + step, ...` (`len` of them) along `dim`.
///
/// # Panics
///
/// If `dim` or the range is outside `x`, or `step` is 0 (the `slice` op
/// checks its arguments before calling this).
///
/// ```
/// use retrograd::{kernels::layout, Tensor};
/// let x = Tensor::from_vec((0..10).map(f64::from).collect(), &[2, 5])?;
/// let s = layout::slice(&x, 1, 1, 2, 2);
/// assert_eq!(s.shape(), &[2, 2]);
/// assert_eq!(s.to_f64_vec(), vec![1.0, 3.0, 6.0, 8.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn slice(x: &Tensor, dim: usize, start: usize, len: usize, step: usize) -> Tensor {
    let size = x.shape()[dim];
    assert!(step >= 1 && (len == 0 || start + (len - 1) * step < size));
    if len == size {
        return x.clone();
    }
    let (_, inner) = outer_inner(x.shape(), dim);
    let mut out_shape = Dims::from_slice(x.shape());
    out_shape[dim] = len;
    crate::with_any_dtype!(x.dtype(), T => {
        let src = x.as_slice_of::<T>();
        Tensor::build::<T>(out_shape, |out| {
            for_each_row(out, len * inner, |o, row| {
                let base = o * size * inner;
                if step == 1 {
                    copy_into(row, &src[base + start * inner..][..len * inner]);
                } else {
                    for (j, r) in row.chunks_mut(inner).enumerate() {
                        copy_into(r, &src[base + (start + j * step) * inner..][..inner]);
                    }
                }
            });
            // SAFETY: `for_each_row` hands over every row of the output, and
            // each is filled: by one copy, or by one per `inner`-element chunk.
            unsafe { Filled::assume(out) }
        })
    })
}

/// The gradient of [`slice`](fn@slice): zeros of `shape` with `g` written at
/// `start, start + step, ...` along `dim`.
///
/// ```
/// use retrograd::{kernels::layout, Tensor};
/// let g = Tensor::from_vec(vec![1.0, 2.0], &[2])?;
/// let x = layout::slice_backward(&g, &[5], 0, 1, 3)?;
/// assert_eq!(x.to_f64_vec(), vec![0.0, 1.0, 0.0, 0.0, 2.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn slice_backward(
    g: &Tensor,
    shape: &[usize],
    dim: usize,
    start: usize,
    step: usize,
) -> Result<Tensor> {
    const OP: &str = "slice_backward";
    let len = g.shape().get(dim).copied().unwrap_or(0);
    let fits = dim < shape.len()
        && g.rank() == shape.len()
        && step >= 1
        && (0..shape.len()).all(|d| d == dim || g.shape()[d] == shape[d])
        && (len == 0 || start + (len - 1) * step < shape[dim]);
    if !fits {
        return Err(Error::shape_mismatch(OP, g.shape(), shape));
    }
    let size = shape[dim];
    let (_, inner) = outer_inner(shape, dim);
    Ok(crate::with_any_dtype!(g.dtype(), T => {
        let src = g.as_slice_of::<T>();
        Tensor::build::<T>(Dims::from_slice(shape), |out| {
            for_each_row(out, size * inner, |o, row| {
                row.iter_mut().for_each(|v| {
                    v.write(T::cast_from_f64(0.0));
                });
                let from = &src[o * len * inner..][..len * inner];
                for (j, s) in from.chunks(inner).enumerate() {
                    copy_into(&mut row[(start + j * step) * inner..][..inner], s);
                }
            });
            // SAFETY: `for_each_row` hands over every row of the output, and
            // each row is zeroed in full before `g`'s elements are copied in.
            unsafe { Filled::assume(out) }
        })
    }))
}

/// Pads (or, with negative amounts, crops) every dimension of `x`:
/// `pads[d] = (before, after)` for dimension `d`; new positions hold `value`.
///
/// ```
/// use retrograd::{kernels::layout, Tensor};
/// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3])?;
/// assert_eq!(layout::pad("pad", &x, &[(1, -1)], 9.0)?.to_f64_vec(), vec![9.0, 1.0, 2.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn pad(op: &'static str, x: &Tensor, pads: &[(isize, isize)], value: f64) -> Result<Tensor> {
    if pads.len() != x.rank() {
        return Err(Error::invalid(
            op,
            format!(
                "{} (before, after) pairs for a tensor of rank {}",
                pads.len(),
                x.rank()
            ),
        ));
    }
    let mut out_shape = Dims::new();
    for (&size, &(lo, hi)) in x.shape().iter().zip(pads) {
        let new = (size as isize)
            .checked_add(lo)
            .and_then(|s| s.checked_add(hi))
            .filter(|&s| s >= 0)
            .ok_or_else(|| {
                Error::invalid(
                    op,
                    format!(
                        "padding {pads:?} leaves a negative size for shape {:?}",
                        x.shape()
                    ),
                )
            })?;
        out_shape.push(new as usize);
    }
    checked_numel(op, &out_shape)?;
    if pads.iter().all(|&p| p == (0, 0)) {
        return Ok(x.clone());
    }
    Ok(crate::with_any_dtype!(x.dtype(), T => {
        let src = x.as_slice_of::<T>();
        let in_shape = x.shape();
        let v = T::cast_from_f64(value);
        let shape = out_shape.clone();
        Tensor::build::<T>(out_shape, |out| {
            if out.is_empty() {
                // Nothing to write.
            } else if shape.len() == 1 || !should_parallelize(out.len()) {
                pad_rows(Some(src), out, in_shape, &shape, pads, v);
            } else {
                let row_len = out.len() / shape[0];
                for_each_row(out, row_len, |j, row| {
                    let i = j as isize - pads[0].0;
                    let inside = i >= 0 && (i as usize) < in_shape[0];
                    let inner_in: usize = in_shape[1..].iter().product();
                    let from = inside.then(|| &src[i as usize * inner_in..][..inner_in]);
                    pad_rows(from, row, &in_shape[1..], &shape[1..], &pads[1..], v);
                });
            }
            // SAFETY: `pad_rows` writes every element of a block of the shape it
            // is given: the whole output, or (in parallel) each of the rows
            // `for_each_row` hands over, a block of `shape[1..]`.
            unsafe { Filled::assume(out) }
        })
    }))
}

/// Fills `out` (one block of shape `out_shape`) from `src` (the matching
/// input block of shape `in_shape`, or `None` where the block is padding).
/// Writes every element of `out`: all of it with `v`; its one element (rank
/// 0); padding, a copy and padding covering the innermost dimension; or one
/// recursive call per `inner_out` block.
fn pad_rows<T: DataType>(
    src: Option<&[T]>,
    out: &mut [MaybeUninit<T>],
    in_shape: &[usize],
    out_shape: &[usize],
    pads: &[(isize, isize)],
    v: T,
) {
    let Some(src) = src else {
        out.iter_mut().for_each(|o| {
            o.write(v);
        });
        return;
    };
    let Some((&lo, rest)) = pads.split_first() else {
        out[0].write(src[0]);
        return;
    };
    let lo = lo.0;
    if rest.is_empty() {
        // Innermost dimension: padding, a contiguous copy, padding.
        let n_out = out.len() as isize;
        let first = lo.clamp(0, n_out) as usize;
        let last = (lo + in_shape[0] as isize).clamp(0, n_out) as usize;
        let skip = (-lo).max(0) as usize;
        out[..first].iter_mut().for_each(|o| {
            o.write(v);
        });
        // Nothing of the input survives when it is cropped away entirely
        // (then `skip` may lie past its end).
        if first < last {
            copy_into(&mut out[first..last], &src[skip..skip + (last - first)]);
        }
        out[last..].iter_mut().for_each(|o| {
            o.write(v);
        });
        return;
    }
    let inner_in: usize = in_shape[1..].iter().product();
    let inner_out: usize = out_shape[1..].iter().product();
    if inner_out == 0 {
        return;
    }
    for (j, block) in out.chunks_mut(inner_out).enumerate() {
        let i = j as isize - lo;
        let inside = i >= 0 && (i as usize) < in_shape[0];
        let from = inside.then(|| &src[i as usize * inner_in..][..inner_in]);
        pad_rows(from, block, &in_shape[1..], &out_shape[1..], rest, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: Vec<f64>, s: &[usize]) -> Tensor {
        Tensor::from_vec(v, s).unwrap()
    }

    /// Reference permute by index arithmetic.
    fn naive_permute(x: &Tensor, perm: &[usize]) -> Vec<f64> {
        let v = x.to_f64_vec();
        let shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
        let in_strides = contiguous_strides(x.shape());
        let n: usize = shape.iter().product();
        (0..n)
            .map(|mut i| {
                let mut off = 0;
                for d in (0..shape.len()).rev() {
                    off += (i % shape[d]) * in_strides[perm[d]];
                    i /= shape[d];
                }
                v[off]
            })
            .collect()
    }

    #[test]
    fn permutations_match_index_arithmetic() {
        let x = t((0..2 * 3 * 4 * 5).map(f64::from).collect(), &[2, 3, 4, 5]);
        for perm in [
            [0, 1, 3, 2],
            [3, 2, 1, 0],
            [0, 2, 1, 3],
            [1, 0, 2, 3],
            [2, 0, 3, 1],
        ] {
            let p = permute("permute", &x, &perm).unwrap();
            assert_eq!(p.to_f64_vec(), naive_permute(&x, &perm), "{perm:?}");
        }
        // Large enough to take the tiled, parallel paths.
        let big = t((0..3 * 130 * 170).map(f64::from).collect(), &[3, 130, 170]);
        for perm in [[0, 2, 1], [2, 1, 0], [1, 0, 2]] {
            let p = permute("permute", &big, &perm).unwrap();
            assert_eq!(p.to_f64_vec(), naive_permute(&big, &perm), "{perm:?}");
        }
        let one = t((0..300 * 400).map(f64::from).collect(), &[300, 400]);
        let p = permute("permute", &one, &[1, 0]).unwrap();
        assert_eq!(p.to_f64_vec(), naive_permute(&one, &[1, 0]));
    }

    #[test]
    fn order_preserving_permutations_share_storage() {
        let x = t((0..6).map(f64::from).collect(), &[1, 6, 1]);
        let p = permute("permute", &x, &[2, 1, 0]).unwrap();
        assert!(p.shares_storage_with(&x));
        assert_eq!(p.shape(), &[1, 6, 1]);
        assert!(permute("permute", &x, &[0, 0, 1]).is_err());
        assert!(permute("permute", &x, &[0, 1]).is_err());
    }

    #[test]
    fn cat_and_slice_round_trip() {
        let a = t((0..6).map(f64::from).collect(), &[2, 3]);
        let b = t((6..10).map(f64::from).collect(), &[2, 2]);
        let c = cat("cat", &[&a, &b], 1).unwrap();
        assert_eq!(c.shape(), &[2, 5]);
        assert_eq!(slice(&c, 1, 0, 3, 1).to_f64_vec(), a.to_f64_vec());
        assert_eq!(slice(&c, 1, 3, 2, 1).to_f64_vec(), b.to_f64_vec());
        assert!(cat("cat", &[&a, &b], 0).is_err());
        assert!(cat("cat", &[], 0).is_err());
        let s = slice(&c, 1, 0, 3, 2);
        assert_eq!(s.to_f64_vec(), vec![0.0, 2.0, 7.0, 3.0, 5.0, 9.0]);
        let back = slice_backward(&s, &[2, 5], 1, 0, 2).unwrap();
        assert_eq!(
            back.to_f64_vec(),
            vec![0., 0., 2., 0., 7., 3., 0., 5., 0., 9.]
        );
        assert!(slice_backward(&s, &[2, 4], 1, 0, 2).is_err());
    }

    #[test]
    fn large_inputs_take_the_parallel_paths() {
        // 300 x 300 elements is above the parallel threshold.
        let (r, c) = (300, 300);
        let x = t((0..r * c).map(|i| i as f64).collect(), &[r, c]);
        let p = pad("pad", &x, &[(2, -1), (-3, 4)], -1.0).unwrap();
        assert_eq!(p.shape(), &[r + 1, c + 1]);
        let pv = p.to_f64_vec();
        for (i, j) in [(0, 0), (2, 0), (2, 296), (2, 297), (300, 5), (150, 100)] {
            let (si, sj) = (i as isize - 2, j as isize + 3);
            let inside = (0..r as isize).contains(&si) && (0..c as isize).contains(&sj);
            let want = if inside {
                (si as usize * c + sj as usize) as f64
            } else {
                -1.0
            };
            assert_eq!(pv[i * (c + 1) + j], want, "({i}, {j})");
        }
        let s = slice(&x, 1, 1, 100, 3);
        assert_eq!(s.to_f64_vec()[100 * 7 + 5], (7 * c + 1 + 5 * 3) as f64);
        let joined = cat("cat", &[&x, &s], 1).unwrap();
        assert_eq!(
            joined.to_f64_vec()[(c + 100) * 299 + c + 99],
            (299 * c + 298) as f64
        );
        let back = slice_backward(&s, &[r, c], 1, 1, 3).unwrap().to_f64_vec();
        assert_eq!((back[4], back[5]), (4.0, 0.0));
    }

    #[test]
    fn pad_and_crop() {
        let x = t((1..=6).map(f64::from).collect(), &[2, 3]);
        let p = pad("pad", &x, &[(1, 0), (0, 1)], 0.0).unwrap();
        assert_eq!(p.shape(), &[3, 4]);
        assert_eq!(
            p.to_f64_vec(),
            vec![0., 0., 0., 0., 1., 2., 3., 0., 4., 5., 6., 0.]
        );
        let back = pad("pad", &p, &[(-1, 0), (0, -1)], 0.0).unwrap();
        assert_eq!(back, x);
        let cropped = pad("pad", &x, &[(0, -1), (-1, -1)], 0.0).unwrap();
        assert_eq!(cropped.to_f64_vec(), vec![2.0]);
        assert!(pad("pad", &x, &[(0, -3), (0, 0)], 0.0).is_err());
        assert!(pad("pad", &x, &[(0, 0)], 0.0).is_err());
    }

    /// Found by the `ops` fuzz target: cropping more than a dimension holds
    /// (here all of an empty one) while padding the other side indexed past
    /// the input's end.
    #[test]
    fn pad_after_cropping_a_whole_dimension() {
        let empty = t(vec![], &[0]);
        let p = pad("pad", &empty, &[(-2, 3)], 7.0).unwrap();
        assert_eq!(p.to_f64_vec(), vec![7.0]);
        let x = t(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
        let p = pad("pad", &x, &[(0, 0), (-3, 2)], 9.0).unwrap();
        assert_eq!(p.shape(), &[2, 1]);
        assert_eq!(p.to_f64_vec(), vec![9.0, 9.0]);
        let p = pad("pad", &x, &[(0, 0), (2, -3)], 9.0).unwrap();
        assert_eq!(p.to_f64_vec(), vec![9.0, 9.0]);
    }
}

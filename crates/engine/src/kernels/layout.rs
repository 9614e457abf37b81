//! Layout kernels: copies that move elements without arithmetic — `cat`,
//! the scatter of a slice's gradient (`slice_backward`), `pad`. (Permutes,
//! slices and selects copy nothing: they are views, see `tensor::view`.)
//!
//! Each views its tensors as `[outer, dim, inner]` blocks so the inner loop
//! is a contiguous copy wherever the layout allows one. Outputs above
//! [`PARALLEL_THRESHOLD`](super::parallel::PARALLEL_THRESHOLD) elements are
//! split across rayon by whole rows.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::parallel::{should_parallelize, CHUNK};
use super::simd::wide;
use crate::base::error::{check_dtypes, Error, Result};
use crate::tensor::shape::{checked_numel, strided_offset, Dims};
use crate::tensor::{DataType, Filled, Strided, Tensor};

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

/// Concatenates `tensors` along `dim` (already normalised). Every tensor
/// must have the same dtype, the same rank (at least 1) and the same size in
/// every other dimension.
///
/// ```text
/// use retrograd::{kernels::layout, Tensor};
/// let a = Tensor::from_vec(vec![1.0, 2.0], &[2, 1])?;
/// let b = Tensor::from_vec(vec![3.0, 4.0, 5.0, 6.0], &[2, 2])?;
/// let c = layout::cat("cat", &[&a, &b], 1)?;
/// assert_eq!(c.shape(), &[2, 3]);
/// assert_eq!(c.to_f64_vec(), vec![1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
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
        check_dtypes(op, first.dtype(), t.dtype())?;
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

/// The length along `dim` of `g`, a slice's gradient to scatter into a
/// tensor of `shape` at `start, start + step, ...`, or a shape mismatch
/// when it does not fit there.
fn scattered_len(
    g: &Tensor,
    shape: &[usize],
    dim: usize,
    start: usize,
    step: usize,
) -> Result<usize> {
    let len = g.shape().get(dim).copied().unwrap_or(0);
    let fits = dim < shape.len()
        && g.rank() == shape.len()
        && step >= 1
        && (0..shape.len()).all(|d| d == dim || g.shape()[d] == shape[d])
        && (len == 0 || start + (len - 1) * step < shape[dim]);
    if fits {
        Ok(len)
    } else {
        Err(Error::shape_mismatch("slice_backward", g.shape(), shape))
    }
}

/// The gradient of a slice (`Tensor::narrow` and the `slice` op): zeros of `shape` with `g` written at
/// `start, start + step, ...` along `dim`.
///
/// ```text
/// use retrograd::{kernels::layout, Tensor};
/// let g = Tensor::from_vec(vec![1.0, 2.0], &[2])?;
/// let x = layout::slice_backward(&g, &[5], 0, 1, 3)?;
/// assert_eq!(x.to_f64_vec(), vec![0.0, 1.0, 0.0, 0.0, 2.0]);
/// ```
pub fn slice_backward(
    g: &Tensor,
    shape: &[usize],
    dim: usize,
    start: usize,
    step: usize,
) -> Result<Tensor> {
    let len = scattered_len(g, shape, dim, start, step)?;
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

/// [`slice_backward`] added into `acc`, a gradient already accumulated for
/// the sliced tensor: `g` is added at `start, start + step, ...` along
/// `dim`, and nothing else is touched. Several slices of one tensor (the
/// q, k and v heads of one projection, say) then cost one full-size buffer
/// between them instead of one zero-filled buffer each plus their sums.
///
/// Returns `Ok(false)`, changing nothing, when `acc` cannot be written in
/// place: shared storage, a view, or a dtype other than `g`'s.
pub fn slice_backward_add(
    acc: &mut Tensor,
    g: &Tensor,
    dim: usize,
    start: usize,
    step: usize,
) -> Result<bool> {
    const OP: &str = "slice_backward";
    let shape = Dims::from_slice(acc.shape());
    let len = scattered_len(g, &shape, dim, start, step)?;
    if acc.dtype() != g.dtype() {
        return Ok(false);
    }
    let (_, inner) = outer_inner(&shape, dim);
    let size = shape[dim];
    Ok(crate::with_dtype!(OP, g.dtype(), T => {
        let src = g.as_slice_of::<T>();
        let Some(dst) = acc.unique_slice_mut::<T>() else {
            return Ok(false);
        };
        if dst.is_empty() || len == 0 || inner == 0 {
            return Ok(true);
        }
        let add_row = |o: usize, row: &mut [T]| {
            let from = &src[o * len * inner..][..len * inner];
            wide(
                #[inline(always)]
                || {
                    for (j, s) in from.chunks(inner).enumerate() {
                        let to = &mut row[(start + j * step) * inner..][..inner];
                        to.iter_mut().zip(s).for_each(|(d, &v)| *d += v);
                    }
                },
            )
        };
        let row_len = size * inner;
        if should_parallelize(dst.len()) && dst.len() > row_len {
            dst.par_chunks_mut(row_len)
                .enumerate()
                .for_each(|(o, row)| add_row(o, row));
        } else {
            dst.chunks_mut(row_len)
                .enumerate()
                .for_each(|(o, row)| add_row(o, row));
        }
        true
    }))
}

/// The sum of the gradients of disjoint slices of one tensor of `shape`
/// (the q, k and v heads of a fused projection), in one pass: part `k`,
/// `(g, start)`, lands at `start, start + step, ...` along `dim` as
/// `0 + g` (the bits of `slice_backward`s summed by `add`), every other
/// element is zero. Each element is written once; no part is zero-filled
/// to full size.
///
/// Errors: a part that does not fit its slice (as [`slice_backward`]),
/// parts of different dtypes or not of a float dtype, or two parts that
/// overlap.
///
/// ```text
/// use retrograd::{kernels::layout, Tensor};
/// let a = Tensor::from_vec(vec![1.0, 2.0], &[1, 2])?;
/// let b = Tensor::from_vec(vec![3.0, 4.0], &[1, 2])?;
/// let sum = layout::slice_sum(&[3, 2], &[(&a, 0), (&b, 2)], 0, 1)?;
/// assert_eq!(sum.to_f64_vec(), vec![1.0, 2.0, 0.0, 0.0, 3.0, 4.0]);
/// assert!(layout::slice_sum(&[3, 2], &[(&a, 0), (&b, 0)], 0, 1).is_err());
/// ```
pub fn slice_sum(
    shape: &[usize],
    parts: &[(&Tensor, usize)],
    dim: usize,
    step: usize,
) -> Result<Tensor> {
    const OP: &str = "slice_sum";
    let Some(&(first, _)) = parts.first() else {
        return Err(Error::invalid(OP, "no parts to sum"));
    };
    if dim >= shape.len() {
        return Err(Error::AxisOutOfRange {
            op: OP,
            axis: dim as isize,
            rank: shape.len(),
        });
    }
    // Which part (and which of its positions) owns each position along `dim`.
    let mut owner: Vec<Option<(usize, usize)>> = vec![None; shape[dim]];
    let mut lens = Vec::with_capacity(parts.len());
    for (k, &(g, start)) in parts.iter().enumerate() {
        if g.dtype() != first.dtype() {
            return Err(Error::DTypeMismatch {
                op: OP,
                lhs: first.dtype(),
                rhs: g.dtype(),
            });
        }
        let len = scattered_len(g, shape, dim, start, step)?;
        for j in 0..len {
            let at = &mut owner[start + j * step];
            if at.is_some() {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "parts overlap at position {} of dim {dim}",
                        start + j * step
                    ),
                ));
            }
            *at = Some((k, j));
        }
        lens.push(len);
    }
    let (_, inner) = outer_inner(shape, dim);
    let row_len = shape[dim] * inner;
    Ok(crate::with_dtype!(OP, first.dtype(), T => {
        // Each part is read at its own strides: a head's gradient arrives as
        // a permuted view, which a contiguous read would copy first.
        let held: Vec<Tensor> = parts
            .iter()
            .map(|(g, _)| match g.strided::<T>() {
                Some(v) if v.strides.len() == g.rank() => (*g).clone(),
                _ => g.contiguous(),
            })
            .collect();
        let views: Vec<Strided<'_, T>> = held
            .iter()
            .map(|g| g.strided::<T>().expect("dtype was checked above"))
            .collect();
        let zero = T::cast_from_f64(0.0);
        let rank = shape.len();
        // Position `j` of part `k` in row `o` (`inner` elements): runs along
        // the last dimension, one per index of the dimensions between.
        let copy = |k: usize, o: usize, j: usize, dst: &mut [MaybeUninit<T>]| {
            let (data, st) = (views[k].data, &views[k].strides[..]);
            let base = strided_offset(o, &shape[..dim], &st[..dim]) + j * st[dim];
            if dim + 1 == rank {
                dst[0].write(zero + data[base]);
                return;
            }
            let (run, run_stride) = (shape[rank - 1], st[rank - 1]);
            let (mid, mid_strides) = (&shape[dim + 1..rank - 1], &st[dim + 1..rank - 1]);
            for (q, piece) in dst.chunks_mut(run).enumerate() {
                let at = base + strided_offset(q, mid, mid_strides);
                if run_stride == 1 {
                    for (d, &v) in piece.iter_mut().zip(&data[at..at + run]) {
                        d.write(zero + v);
                    }
                } else {
                    for (i, d) in piece.iter_mut().enumerate() {
                        d.write(zero + data[at + i * run_stride]);
                    }
                }
            }
        };
        Tensor::build::<T>(Dims::from_slice(shape), |out| {
            if row_len > 0 {
                for_each_row(out, row_len, |o, row| {
                    for (p, dst) in row.chunks_mut(inner).enumerate() {
                        match owner[p] {
                            Some((k, j)) => copy(k, o, j, dst),
                            None => dst.iter_mut().for_each(|d| {
                                d.write(zero);
                            }),
                        }
                    }
                });
            }
            // SAFETY: `for_each_row` hands over every row of the output, and
            // every position of each row is written: from its part, or zero.
            unsafe { Filled::assume(out) }
        })
    }))
}

/// Pads (or, with negative amounts, crops) every dimension of `x`:
/// `pads[d] = (before, after)` for dimension `d`; new positions hold `value`.
///
/// ```text
/// use retrograd::{kernels::layout, Tensor};
/// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3])?;
/// assert_eq!(layout::pad("pad", &x, &[(1, -1)], 9.0)?.to_f64_vec(), vec![9.0, 1.0, 2.0]);
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

    use crate::tensor::test_util::shaped as t;

    /// Parts that arrive as permuted views (a head's gradient, `[B, H, T, D]`
    /// read as `[B, T, 1, H, D]`), read at their strides, and parts along
    /// the last dimension and with a stride along their run, give what the
    /// same parts made contiguous give, bit for bit.
    #[test]
    fn strided_parts_sum_as_their_contiguous_copies() {
        let (b, h, tt, d) = (2, 3, 4, 5);
        let heads: Vec<Tensor> = (0..3)
            .map(|k| Tensor::randn(&[b, h, tt, d], crate::DType::F32, k).unwrap())
            .collect();
        let viewed: Vec<Tensor> = heads
            .iter()
            .map(|x| {
                let x = x.permute(&[0, 2, 1, 3]).unwrap();
                let x = x.unsqueeze(2).unwrap();
                assert!(!x.is_contiguous());
                x
            })
            .collect();
        let shape = [b, tt, 3, h, d];
        let strided: Vec<(&Tensor, usize)> = viewed.iter().zip([0, 1, 2]).collect();
        let copies: Vec<Tensor> = viewed.iter().map(|x| x.contiguous()).collect();
        let dense: Vec<(&Tensor, usize)> = copies.iter().zip([0, 1, 2]).collect();
        let want = slice_sum(&shape, &dense, 2, 1).unwrap().to_f64_vec();
        assert_eq!(
            slice_sum(&shape, &strided, 2, 1).unwrap().to_f64_vec(),
            want
        );
        // Along the last dimension (one element per position), and runs read
        // with a stride (a transposed part).
        let x = t((0..12).map(f64::from).collect(), &[3, 4]);
        let xt = x.transpose(0, 1).unwrap();
        let (xc, parts) = (xt.contiguous(), [0usize, 5]);
        let got = slice_sum(&[4, 10], &[(&xt, parts[0]), (&xt, parts[1])], 1, 2).unwrap();
        let want = slice_sum(&[4, 10], &[(&xc, parts[0]), (&xc, parts[1])], 1, 2).unwrap();
        assert_eq!(got.to_f64_vec(), want.to_f64_vec());
        let y = t((0..24).map(f64::from).collect(), &[2, 3, 4])
            .permute(&[2, 1, 0])
            .unwrap();
        let got = slice_sum(&[4, 6, 2], &[(&y, 0), (&y, 3)], 1, 1).unwrap();
        let yc = y.contiguous();
        let want = slice_sum(&[4, 6, 2], &[(&yc, 0), (&yc, 3)], 1, 1).unwrap();
        assert_eq!(got.to_f64_vec(), want.to_f64_vec());
    }

    #[test]
    fn cat_and_slice_round_trip() {
        let a = t((0..6).map(f64::from).collect(), &[2, 3]);
        let b = t((6..10).map(f64::from).collect(), &[2, 2]);
        let c = cat("cat", &[&a, &b], 1).unwrap();
        assert_eq!(c.shape(), &[2, 5]);
        assert_eq!(c.slice_dim(1, 0, 3, 1).to_f64_vec(), a.to_f64_vec());
        assert_eq!(c.slice_dim(1, 3, 2, 1).to_f64_vec(), b.to_f64_vec());
        assert!(cat("cat", &[&a, &b], 0).is_err());
        assert!(cat("cat", &[], 0).is_err());
        let s = c.slice_dim(1, 0, 3, 2);
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
        let s = x.slice_dim(1, 1, 100, 3);
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

/// The examples in this file's docs, run as unit tests (the module is
/// private to the engine, so rustdoc cannot run them as doctests).
#[cfg(test)]
mod doc_examples {
    #[test]
    fn cat() -> crate::Result<()> {
        use crate::{kernels::layout, Tensor};
        let a = Tensor::from_vec(vec![1.0, 2.0], &[2, 1])?;
        let b = Tensor::from_vec(vec![3.0, 4.0, 5.0, 6.0], &[2, 2])?;
        let c = layout::cat("cat", &[&a, &b], 1)?;
        assert_eq!(c.shape(), &[2, 3]);
        assert_eq!(c.to_f64_vec(), vec![1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
        Ok(())
    }

    #[test]
    fn slice_backward() -> crate::Result<()> {
        use crate::{kernels::layout, Tensor};
        let g = Tensor::from_vec(vec![1.0, 2.0], &[2])?;
        let x = layout::slice_backward(&g, &[5], 0, 1, 3)?;
        assert_eq!(x.to_f64_vec(), vec![0.0, 1.0, 0.0, 0.0, 2.0]);
        Ok(())
    }

    #[test]
    fn slice_sum() -> crate::Result<()> {
        use crate::{kernels::layout, Tensor};
        let a = Tensor::from_vec(vec![1.0, 2.0], &[1, 2])?;
        let b = Tensor::from_vec(vec![3.0, 4.0], &[1, 2])?;
        let sum = layout::slice_sum(&[3, 2], &[(&a, 0), (&b, 2)], 0, 1)?;
        assert_eq!(sum.to_f64_vec(), vec![1.0, 2.0, 0.0, 0.0, 3.0, 4.0]);
        assert!(layout::slice_sum(&[3, 2], &[(&a, 0), (&b, 0)], 0, 1).is_err());
        Ok(())
    }

    #[test]
    fn pad() -> crate::Result<()> {
        use crate::{kernels::layout, Tensor};
        let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3])?;
        assert_eq!(
            layout::pad("pad", &x, &[(1, -1)], 9.0)?.to_f64_vec(),
            vec![9.0, 1.0, 2.0]
        );
        Ok(())
    }
}

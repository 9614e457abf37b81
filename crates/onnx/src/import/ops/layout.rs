//! Layout and running ops: `Tile`, `SpaceToDepth`, `DepthToSpace`,
//! `EyeLike`, `CumSum`, `CumProd`, composed from retrograd's
//! differentiable views, concatenations and products.

use super::{one, Ctx};
use crate::tensor::dtype_of;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];

/// Each axis repeated `repeats[i]` times, as copies concatenated.
pub(super) fn tile<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let repeats = c.ints(c.input(ins, 1)?)?;
    if repeats.len() != x.shape().len() || repeats.iter().any(|&r| r < 0) {
        return Err(c.error(format!("repeats {repeats:?} for shape {:?}", x.shape())));
    }
    let out: Vec<usize> = x
        .shape()
        .iter()
        .zip(&repeats)
        .map(|(&d, &r)| d.saturating_mul(r as usize))
        .collect();
    c.check_size(&out)?;
    let mut y = x.clone();
    for (axis, &r) in repeats.iter().enumerate() {
        if r == 1 {
            continue;
        }
        if r == 0 {
            y = y.try_narrow(axis as isize, 0, 0)?;
            continue;
        }
        let copies: Vec<&Var<'g>> = std::iter::repeat_n(&y, r as usize).collect();
        y = Var::try_cat(&copies, axis as isize)?;
    }
    one(y)
}

fn block(c: &Ctx<'_, '_>, x: &Var<'_>) -> Result<(usize, [usize; 4])> {
    let b = c.attrs.int("blocksize", 0)?;
    match (usize::try_from(b), x.shape()) {
        (Ok(b), &[n, ch, h, w]) if b > 0 => Ok((b, [n, ch, h, w])),
        _ => Err(c.error(format!(
            "blocksize {b} for an input of shape {:?} (4-d)",
            x.shape()
        ))),
    }
}

/// `[n, c, h, w]` to `[n, c·b², h/b, w/b]`, each block's pixels as channels
/// (`mode` DCR, the default: block offset, then channel; CRD: the reverse).
pub(super) fn space_to_depth<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let (b, [n, ch, h, w]) = block(c, x)?;
    if h % b != 0 || w % b != 0 {
        return Err(c.error(format!("{h}x{w} is not a multiple of the block {b}")));
    }
    let s = |v: usize| v as isize;
    // DCR: the block offsets before the channel; CRD (opset 25): after.
    let perm = match c.attrs.string("mode", "DCR")?.as_str() {
        "DCR" => [0, 3, 5, 1, 2, 4],
        "CRD" => [0, 1, 3, 5, 2, 4],
        other => return Err(c.error(format!("mode {other:?}"))),
    };
    one(x
        .try_reshape(&[s(n), s(ch), s(h / b), s(b), s(w / b), s(b)])?
        .try_permute(&perm)?
        .try_reshape(&[s(n), s(ch * b * b), s(h / b), s(w / b)])?)
}

/// `[n, c, h, w]` to `[n, c/b², h·b, w·b]`, channels as each block's pixels
/// (`mode` DCR: depth, column, row order; CRD: column, row, depth).
pub(super) fn depth_to_space<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let (b, [n, ch, h, w]) = block(c, x)?;
    if ch % (b * b) != 0 {
        return Err(c.error(format!("{ch} channels for a block of {b}")));
    }
    let s = |v: usize| v as isize;
    let d = ch / (b * b);
    let y = match c.attrs.string("mode", "DCR")?.as_str() {
        "DCR" => x
            .try_reshape(&[s(n), s(b), s(b), s(d), s(h), s(w)])?
            .try_permute(&[0, 3, 4, 1, 5, 2])?,
        "CRD" => x
            .try_reshape(&[s(n), s(d), s(b), s(b), s(h), s(w)])?
            .try_permute(&[0, 1, 4, 2, 5, 3])?,
        other => return Err(c.error(format!("mode {other:?}"))),
    };
    one(y.try_reshape(&[s(n), s(d), s(h * b), s(w * b)])?)
}

/// Ones on the `k`-th diagonal of a matrix shaped like the input.
pub(super) fn eye_like<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let &[rows, cols] = x.shape() else {
        return Err(c.error(format!("a 2-d input, got shape {:?}", x.shape())));
    };
    let dtype = if c.attrs.has("dtype") {
        let code = c.attrs.int("dtype", 1)?;
        dtype_of(code as i32).ok_or_else(|| c.error(format!("dtype {code}")))?
    } else {
        x.dtype()
    };
    let k = c.attrs.int("k", 0)?;
    let mut v = vec![0.0; rows * cols];
    for i in 0..rows {
        let j = i as i64 + k;
        if (0..cols as i64).contains(&j) {
            v[i * cols + j as usize] = 1.0;
        }
    }
    one(c.constant(Tensor::from_f64_slice(&v, &[rows, cols], dtype)?))
}

/// The running sum along `axis` (the second input): a product with a
/// triangular matrix of ones, so the gradient is the reverse running sum.
/// `exclusive` leaves each element out of its own sum; `reverse` runs from
/// the end.
pub(super) fn cum_sum<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let rank = x.shape().len();
    let axis = c.axis(scalar_axis(c, ins)?, rank)?;
    let n = x.shape()[axis];
    let exclusive = c.attrs.int("exclusive", 0)? != 0;
    let reverse = c.attrs.int("reverse", 0)? != 0;
    if !x.dtype().is_float() {
        return one(c.constant(running(
            x.value(),
            axis,
            exclusive,
            reverse,
            |a, b| a + b,
            0.0,
        )?));
    }
    // m[j][i] = 1 where output i sums input j.
    let mut m = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            let counted = match (reverse, exclusive) {
                (false, false) => j <= i,
                (false, true) => j < i,
                (true, false) => j >= i,
                (true, true) => j > i,
            };
            if counted {
                m[j * n + i] = 1.0;
            }
        }
    }
    let m = c.constant(Tensor::from_f64_slice(&m, &[n, n], x.dtype())?);
    let last = rank as isize - 1;
    let moved = x.try_transpose(axis as isize, last)?;
    one(moved.try_matmul(&m)?.try_transpose(axis as isize, last)?)
}

/// The running product along `axis`, as a chain of products of slices
/// (differentiable); `exclusive` and `reverse` as for [`cum_sum`].
pub(super) fn cum_prod<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let rank = x.shape().len();
    let axis = c.axis(scalar_axis(c, ins)?, rank)?;
    let n = x.shape()[axis];
    let exclusive = c.attrs.int("exclusive", 0)? != 0;
    let reverse = c.attrs.int("reverse", 0)? != 0;
    if !x.dtype().is_float() {
        return one(c.constant(running(
            x.value(),
            axis,
            exclusive,
            reverse,
            |a, b| a * b,
            1.0,
        )?));
    }
    if n == 0 {
        return one(x.clone());
    }
    let a = axis as isize;
    let order: Vec<usize> = if reverse {
        (0..n).rev().collect()
    } else {
        (0..n).collect()
    };
    let mut slot_shape = x.shape().to_vec();
    slot_shape[axis] = 1;
    let ones = c.constant(Tensor::full(&slot_shape, 1.0, x.dtype())?);
    let mut acc = ones.clone();
    let mut parts: Vec<Var<'g>> = vec![ones; n];
    for &i in &order {
        let here = x.try_narrow(a, i as isize, 1)?;
        if exclusive {
            parts[i] = acc.clone();
            acc = acc.try_mul(&here)?;
        } else {
            acc = acc.try_mul(&here)?;
            parts[i] = acc.clone();
        }
    }
    let refs: Vec<&Var<'g>> = parts.iter().collect();
    one(Var::try_cat(&refs, a)?)
}

/// The axis input of `CumSum` and `CumProd` (a scalar or one-element tensor).
fn scalar_axis<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<i64> {
    let a = c.input(ins, 1)?;
    if a.dtype() != DType::I64 || a.value().numel() != 1 {
        return Err(c.error(format!(
            "the axis must be one integer, got {} of shape {:?}",
            a.dtype(),
            a.shape()
        )));
    }
    Ok(a.value().to_vec::<i64>()?[0])
}

/// A running fold along `axis` on the host (integer inputs).
fn running(
    x: &Tensor,
    axis: usize,
    exclusive: bool,
    reverse: bool,
    f: fn(f64, f64) -> f64,
    start: f64,
) -> Result<Tensor> {
    let shape = x.shape().to_vec();
    let outer: usize = shape[..axis].iter().product();
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let v = x.contiguous().to_f64_vec();
    let mut out = vec![0.0; v.len()];
    for o in 0..outer {
        for r in 0..inner {
            let mut acc = start;
            for step in 0..n {
                let i = if reverse { n - 1 - step } else { step };
                let at = (o * n + i) * inner + r;
                if exclusive {
                    out[at] = acc;
                    acc = f(acc, v[at]);
                } else {
                    acc = f(acc, v[at]);
                    out[at] = acc;
                }
            }
        }
    }
    Ok(Tensor::from_f64_slice(&out, &shape, DType::F64)?.to_dtype(x.dtype()))
}

/// Each listed axis cropped or zero-padded to its target size about its
/// centre (the odd element cut or added at the end).
pub(super) fn center_crop_pad<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let sizes = c.ints(c.input(ins, 1)?)?;
    let rank = x.shape().len();
    let axes: Vec<usize> = match c.attrs.ints("axes")? {
        Some(a) => a.iter().map(|&a| c.axis(a, rank)).collect::<Result<_>>()?,
        None => (0..rank).collect(),
    };
    if sizes.len() != axes.len() || sizes.iter().any(|&s| s < 0) {
        return Err(c.error(format!("sizes {sizes:?} for axes {axes:?}")));
    }
    let mut y = x.clone();
    for (&a, &size) in axes.iter().zip(&sizes) {
        let (dim, size) = (y.shape()[a], size as usize);
        if size < dim {
            y = y.try_narrow(a as isize, ((dim - size) / 2) as isize, size)?;
        } else if size > dim {
            let mut shape = y.shape().to_vec();
            shape[a] = size;
            c.check_size(&shape)?;
            let before = (size - dim) / 2;
            let mut pads = vec![0isize; 2 * (rank - a)];
            let k = 2 * (rank - 1 - a);
            pads[k] = before as isize;
            pads[k + 1] = (size - dim - before) as isize;
            y = y.try_pad(&pads, 0.0)?;
        }
    }
    one(y)
}

//! Selection and scatter ops: `TopK`, `Hardmax`, `GatherND`,
//! `ScatterElements`, `ScatterND`, `NonZero`, `Compress`. Values move
//! through retrograd's differentiable `gather`, `index_select`,
//! `scatter_add` and `index_add`; the positions are computed on the host.

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];

/// `(outer, n, inner)` of `shape` around `axis`: the element at
/// `(o, i, r)` is at `(o · n + i) · inner + r`.
fn around(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

/// The `k` largest (or smallest) elements along `axis` and their indices;
/// ties go to the lower index. `k` is the second input (opset 10 on), an
/// attribute before.
pub(super) fn top_k<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let k = if c.opset < 10 {
        c.attrs.int("k", 0)?
    } else {
        c.ints(c.input(ins, 1)?)?.first().copied().unwrap_or(0)
    };
    let rank = x.shape().len();
    let axis = c.axis(c.attrs.int("axis", -1)?, rank)?;
    let largest = c.attrs.int("largest", 1)? != 0;
    let (outer, n, inner) = around(x.shape(), axis);
    let k = usize::try_from(k)
        .ok()
        .filter(|&k| k <= n)
        .ok_or_else(|| c.error(format!("k = {k} for an axis of {n}")))?;
    let v = x.value().contiguous().to_f64_vec();
    let mut idx = vec![0i64; outer * k * inner];
    let mut order: Vec<usize> = Vec::with_capacity(n);
    for o in 0..outer {
        for r in 0..inner {
            let at = |i: usize| v[(o * n + i) * inner + r];
            order.clear();
            order.extend(0..n);
            // NaN counts as the largest value, as in NumPy's sort.
            order.sort_by(|&a, &b| {
                let (p, q) = (at(a), at(b));
                let ord = p
                    .partial_cmp(&q)
                    .unwrap_or_else(|| p.is_nan().cmp(&q.is_nan()));
                let ord = if largest { ord.reverse() } else { ord };
                ord.then(a.cmp(&b))
            });
            for (j, &i) in order.iter().take(k).enumerate() {
                idx[(o * k + j) * inner + r] = i as i64;
            }
        }
    }
    let mut shape = x.shape().to_vec();
    shape[axis] = k;
    let indices = Tensor::from_vec(idx, &shape)?;
    let values = x.try_gather(axis as isize, &indices)?;
    Ok(vec![values, c.constant(indices)])
}

/// 1 at the first largest element along `axis` (before opset 13: of each
/// row of the input read as a matrix from `axis` on), 0 elsewhere.
pub(super) fn hardmax<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let y = super::nn::along_axis(c, ins, |x, axis| {
        let rank = x.shape().len();
        let a = if axis < 0 { axis + rank as isize } else { axis } as usize;
        let (outer, n, inner) = around(x.shape(), a);
        let v = x.value().contiguous().to_f64_vec();
        let mut out = vec![0.0; v.len()];
        for o in 0..outer {
            for r in 0..inner {
                let at = |i: usize| (o * n + i) * inner + r;
                let best = (0..n).fold(0, |b, i| if v[at(i)] > v[at(b)] { i } else { b });
                if n > 0 {
                    out[at(best)] = 1.0;
                }
            }
        }
        Ok(Var::constant_in(
            x.graph(),
            Tensor::from_f64_slice(&out, x.shape(), x.dtype())?,
        ))
    })?;
    one(y)
}

/// Linear offsets into the first `k` axes of `shape` for each index tuple
/// (the last axis of `idx`, negative counting from the end), per batch
/// when `batch_dims` leading axes are shared.
fn tuple_offsets(
    c: &Ctx<'_, '_>,
    shape: &[usize],
    idx: &Tensor,
    batch_dims: usize,
) -> Result<(Vec<i64>, usize)> {
    let ishape = idx.shape();
    let k = *ishape
        .last()
        .ok_or_else(|| c.error("indices must have rank 1 or more"))?;
    if batch_dims + k > shape.len() || ishape.len() <= batch_dims {
        return Err(c.error(format!(
            "index tuples of {k} into shape {shape:?} with {batch_dims} batch axes"
        )));
    }
    let dims = &shape[batch_dims..batch_dims + k];
    let per_batch: usize = dims.iter().product();
    let tuples: usize = ishape[batch_dims..ishape.len() - 1].iter().product();
    let raw = idx.to_dtype(DType::I64).contiguous().to_vec::<i64>()?;
    let mut out = Vec::with_capacity(raw.len() / k.max(1));
    for (t, tuple) in raw.chunks(k.max(1)).enumerate() {
        let batch = t / tuples.max(1);
        let mut lin = 0i64;
        for (&i, &d) in tuple.iter().zip(dims) {
            let i = if i < 0 { i + d as i64 } else { i };
            if !(0..d as i64).contains(&i) {
                return Err(c.error(format!("index {tuple:?} is out of range for {dims:?}")));
            }
            lin = lin * d as i64 + i;
        }
        out.push((batch * per_batch) as i64 + lin);
    }
    if k == 0 {
        out = (0..raw.len().max(1) as i64).collect();
    }
    Ok((out, k))
}

/// `data` with its first `batch_dims + k` axes folded into one.
fn fold_leading<'g>(data: &Var<'g>, axes: usize) -> Result<Var<'g>> {
    let mut shape: Vec<isize> = vec![-1];
    shape.extend(data.shape()[axes..].iter().map(|&d| d as isize));
    if data.shape()[..axes].contains(&0) {
        shape[0] = 0;
    }
    data.try_reshape(&shape)
}

pub(super) fn gather_nd<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (data, idx) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let b = usize::try_from(c.attrs.int("batch_dims", 0)?).unwrap_or(usize::MAX);
    let (lin, k) = tuple_offsets(c, data.shape(), idx.value(), b)?;
    let flat = fold_leading(data, b + k)?;
    let n = lin.len();
    let picked = flat.try_index_select(0, &Tensor::from_vec(lin, &[n])?)?;
    let ishape = idx.shape();
    let mut shape: Vec<isize> = ishape[..ishape.len() - 1]
        .iter()
        .map(|&d| d as isize)
        .collect();
    shape.extend(data.shape()[b + k..].iter().map(|&d| d as isize));
    one(picked.try_reshape(&shape)?)
}

/// `data` where nothing is written, `updates` added (`add`) or written
/// (`none`) at the addressed positions: through `scatter_add` (or
/// `index_add`), so the gradient reaches both; `mul`, `max` and `min`
/// reductions compute on the host (a constant).
fn scatter<'g>(
    c: &Ctx<'_, 'g>,
    data: &Var<'g>,
    updates: &Var<'g>,
    add: impl Fn(&Var<'g>, &Var<'g>) -> Result<Var<'g>>,
    positions: &[usize],
    per_position: &[Vec<usize>],
) -> Result<Var<'g>> {
    let reduction = c.attrs.string("reduction", "none")?;
    match reduction.as_str() {
        "add" => add(data, updates),
        "none" => {
            let mut keep = vec![1.0; data.value().numel()];
            for &p in positions {
                keep[p] = 0.0;
            }
            let keep = Tensor::from_f64_slice(&keep, data.shape(), data.dtype())?;
            let zeros = c.constant(Tensor::zeros(data.shape(), data.dtype())?);
            data.try_mul(&c.constant(keep))?
                .try_add(&add(&zeros, updates)?)
        }
        "mul" | "max" | "min" => {
            let mut out = data.value().contiguous().to_f64_vec();
            let u = updates.value().contiguous().to_f64_vec();
            for (src, dests) in per_position.iter().enumerate() {
                for (j, &d) in dests.iter().enumerate() {
                    let v = u[src * dests.len() + j];
                    out[d] = match reduction.as_str() {
                        "mul" => out[d] * v,
                        "max" => out[d].max(v),
                        _ => out[d].min(v),
                    };
                }
            }
            Ok(c.constant(Tensor::from_f64_slice(&out, data.shape(), data.dtype())?))
        }
        other => Err(c.error(format!("reduction {other:?}"))),
    }
}

pub(super) fn scatter_elements<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (data, idx, updates) = (c.input(ins, 0)?, c.input(ins, 1)?, c.input(ins, 2)?);
    let rank = data.shape().len();
    let axis = c.axis(c.attrs.int("axis", 0)?, rank)?;
    if idx.shape() != updates.shape() || idx.shape().len() != rank {
        return Err(c.error(format!(
            "indices {:?} and updates {:?} for data {:?}",
            idx.shape(),
            updates.shape(),
            data.shape()
        )));
    }
    let n = data.shape()[axis] as i64;
    let raw = idx
        .value()
        .to_dtype(DType::I64)
        .contiguous()
        .to_vec::<i64>()?;
    let mut fixed = Vec::with_capacity(raw.len());
    for &i in &raw {
        let i = if i < 0 { i + n } else { i };
        if !(0..n).contains(&i) {
            return Err(c.error(format!("index {i} is out of range for an axis of {n}")));
        }
        fixed.push(i);
    }
    // The flat position each update lands on.
    let dshape = data.shape();
    let ishape = idx.shape();
    let mut positions = Vec::with_capacity(fixed.len());
    for (flat, &i) in fixed.iter().enumerate() {
        let mut rest = flat;
        let mut coord = vec![0usize; rank];
        for d in (0..rank).rev() {
            coord[d] = rest % ishape[d];
            rest /= ishape[d];
        }
        coord[axis] = i as usize;
        if coord.iter().zip(dshape).any(|(&c_, &s)| c_ >= s) {
            return Err(c.error(format!(
                "indices of shape {ishape:?} reach outside {dshape:?}"
            )));
        }
        positions.push(coord.iter().zip(dshape).fold(0, |a, (&c_, &s)| a * s + c_));
    }
    let index = Tensor::from_vec(fixed, ishape)?;
    let per: Vec<Vec<usize>> = positions.iter().map(|&p| vec![p]).collect();
    one(scatter(
        c,
        data,
        updates,
        |base, u| base.try_scatter_add(axis as isize, &index, u),
        &positions,
        &per,
    )?)
}

pub(super) fn scatter_nd<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (data, idx, updates) = (c.input(ins, 0)?, c.input(ins, 1)?, c.input(ins, 2)?);
    let (lin, k) = tuple_offsets(c, data.shape(), idx.value(), 0)?;
    let slice: usize = data.shape()[k..].iter().product();
    let n = lin.len();
    let mut shape: Vec<isize> = vec![n as isize];
    shape.extend(data.shape()[k..].iter().map(|&d| d as isize));
    let updates = updates.try_reshape(&shape)?;
    let per: Vec<Vec<usize>> = lin
        .iter()
        .map(|&l| (0..slice).map(|j| l as usize * slice + j).collect())
        .collect();
    let positions: Vec<usize> = per.iter().flatten().copied().collect();
    let index = Tensor::from_vec(lin, &[n])?;
    let dshape: Vec<isize> = data.shape().iter().map(|&d| d as isize).collect();
    let y = scatter(
        c,
        data,
        &updates,
        |base, u| {
            fold_leading(base, k)?
                .try_index_add(0, &index, u)?
                .try_reshape(&dshape)
        },
        &positions,
        &per,
    )?;
    one(y)
}

/// The indices of the nonzero elements, `[rank, count]` (an integer constant).
pub(super) fn non_zero<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let shape = x.shape().to_vec();
    let v = x.value().contiguous().to_f64_vec();
    let hits: Vec<usize> = (0..v.len()).filter(|&i| v[i] != 0.0).collect();
    let rank = shape.len();
    let mut out = vec![0i64; rank * hits.len()];
    for (j, &flat) in hits.iter().enumerate() {
        let mut rest = flat;
        for d in (0..rank).rev() {
            out[d * hits.len() + j] = (rest % shape[d]) as i64;
            rest /= shape[d];
        }
    }
    one(c.constant(Tensor::from_vec(out, &[rank, hits.len()])?))
}

/// The slices along `axis` (the flattened input without one) where the
/// condition holds.
pub(super) fn compress<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, cond) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let keep = cond.value().to_f64_vec();
    let (x, axis) = if c.attrs.has("axis") {
        let axis = c.axis(c.attrs.int("axis", 0)?, x.shape().len())?;
        (x.clone(), axis)
    } else {
        (x.try_reshape(&[-1])?, 0)
    };
    let n = x.shape()[axis];
    let picked: Vec<i64> = (0..n.min(keep.len()))
        .filter(|&i| keep[i] != 0.0)
        .map(|i| i as i64)
        .collect();
    let m = picked.len();
    one(x.try_index_select(axis as isize, &Tensor::from_vec(picked, &[m])?)?)
}

/// The distinct elements (or, with `axis`, slices) in order of first
/// appearance or sorted (`sorted`, the default), with where each first
/// appears, where each input element went, and how often each appears.
/// The values are picked with `index_select` (differentiable).
pub(super) fn unique<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let (x, axis) = if c.attrs.has("axis") {
        let axis = c.axis(c.attrs.int("axis", 0)?, x.shape().len())?;
        (x.clone(), axis)
    } else {
        (x.try_reshape(&[-1])?, 0)
    };
    let (outer, n, inner) = around(x.shape(), axis);
    let v = x.value().contiguous().to_f64_vec();
    let slice = |i: usize| -> Vec<f64> {
        (0..outer)
            .flat_map(|o| (0..inner).map(move |r| (o, r)))
            .map(|(o, r)| v[(o * n + i) * inner + r])
            .collect()
    };
    let slices: Vec<Vec<f64>> = (0..n).map(slice).collect();
    let mut firsts: Vec<usize> = Vec::new();
    let mut inverse = vec![0usize; n];
    for i in 0..n {
        match firsts.iter().position(|&f| slices[f] == slices[i]) {
            Some(k) => inverse[i] = k,
            None => {
                inverse[i] = firsts.len();
                firsts.push(i);
            }
        }
    }
    let mut order: Vec<usize> = (0..firsts.len()).collect();
    if c.attrs.int("sorted", 1)? != 0 {
        order.sort_by(|&a, &b| {
            slices[firsts[a]]
                .partial_cmp(&slices[firsts[b]])
                .unwrap_or(std::cmp::Ordering::Equal)
        });
    }
    let mut rank_of = vec![0usize; firsts.len()];
    for (r, &k) in order.iter().enumerate() {
        rank_of[k] = r;
    }
    let picked: Vec<i64> = order.iter().map(|&k| firsts[k] as i64).collect();
    let m = picked.len();
    let counts: Vec<i64> = order
        .iter()
        .map(|&k| inverse.iter().filter(|&&i| i == k).count() as i64)
        .collect();
    let inverse: Vec<i64> = inverse.iter().map(|&k| rank_of[k] as i64).collect();
    let y = x.try_index_select(axis as isize, &Tensor::from_vec(picked.clone(), &[m])?)?;
    Ok(vec![
        y,
        c.constant(Tensor::from_vec(picked, &[m])?),
        c.constant(Tensor::from_vec(inverse, &[n])?),
        c.constant(Tensor::from_vec(counts, &[m])?),
    ])
}

/// Each batch entry's first `sequence_lens[b]` steps reversed, the rest
/// kept (`time_axis` and `batch_axis` 0 and 1, either way round): one
/// gather along the time axis (differentiable).
pub(super) fn reverse_sequence<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, lens) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let lens = c.ints(lens)?;
    let rank = x.shape().len();
    let time = c.axis(c.attrs.int("time_axis", 0)?, rank)?;
    let batch = c.axis(c.attrs.int("batch_axis", 1)?, rank)?;
    if time == batch || rank < 2 || lens.len() != x.shape()[batch] {
        return Err(c.error(format!(
            "time axis {time}, batch axis {batch}, {} lengths for shape {:?}",
            lens.len(),
            x.shape()
        )));
    }
    let shape = x.shape().to_vec();
    let steps = shape[time] as i64;
    let total: usize = shape.iter().product();
    let mut idx = vec![0i64; total];
    for (flat, slot) in idx.iter_mut().enumerate() {
        let mut rest = flat;
        let mut coord = vec![0usize; rank];
        for d in (0..rank).rev() {
            coord[d] = rest % shape[d];
            rest /= shape[d];
        }
        let t = coord[time] as i64;
        let len = lens[coord[batch]].clamp(0, steps);
        *slot = if t < len { len - 1 - t } else { t };
    }
    one(x.try_gather(time as isize, &Tensor::from_vec(idx, &shape)?)?)
}

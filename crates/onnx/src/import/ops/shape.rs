//! Shape, layout and constant ONNX ops. Views map to retrograd's views
//! (reshape, permute, slice, select share storage); shape arithmetic
//! (`Shape`, `Range`, `ConstantOfShape`) makes integer constants.

use super::{one, Ctx};
use crate::import::attrs::Attrs;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];
type Checked = std::result::Result<(), String>;

pub(super) fn identity<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    one(c.input(ins, 0)?.clone())
}

/// Inference: the identity. Its mask output, or training mode, is refused at load.
pub(super) fn check_dropout(a: &Attrs, _: i64) -> Checked {
    match a.int("training_mode", 0) {
        Ok(0) => Ok(()),
        _ => Err("training_mode".into()),
    }
}

pub(super) fn dropout<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    // Training mode with a ratio of 0 drops nothing: the same as inference.
    let ratio = match c.opt(ins, 1) {
        Some(r) => c.scalar(r)?,
        None => 0.5,
    };
    if let Some(t) = c.opt(ins, 2)
        && t.value().to_f64_vec().first().copied().unwrap_or(0.0) != 0.0
        && ratio != 0.0
    {
        return Err(c.error("dropout in training mode is not supported (inference only)"));
    }
    let x = c.input(ins, 0)?;
    if c.n_outputs > 1 {
        // Nothing is dropped: the mask keeps every element.
        let mask = c.constant(Tensor::full(x.shape(), 1.0, DType::Bool)?);
        return Ok(vec![x.clone(), mask]);
    }
    one(x.clone())
}

pub(super) fn check_constant(a: &Attrs, _: i64) -> Checked {
    for key in [
        "value",
        "value_float",
        "value_int",
        "value_floats",
        "value_ints",
    ] {
        if a.has(key) {
            return Ok(());
        }
    }
    Err("a Constant without value, value_float(s) or value_int(s)".into())
}

/// The tensor a `Constant` node holds.
pub(crate) fn constant_value(a: &Attrs) -> Result<Tensor> {
    if let Some(t) = a.tensor("value")? {
        return Ok(t.clone());
    }
    if a.has("value_float") {
        return Ok(Tensor::scalar(a.float("value_float", 0.0)? as f32));
    }
    if a.has("value_int") {
        return Ok(Tensor::scalar(a.int("value_int", 0)?));
    }
    if let Some(v) = a.ints("value_ints")? {
        return Tensor::from_vec(v.clone(), &[v.len()]);
    }
    if let Some(crate::import::attrs::Attr::Floats(v)) = a.get("value_floats") {
        let v: Vec<f32> = v.iter().map(|&f| f as f32).collect();
        let n = v.len();
        return Tensor::from_vec(v, &[n]);
    }
    Err(super::super::attrs::bad(
        &a.label,
        "a Constant without a value",
    ))
}

pub(super) fn constant<'g>(c: &Ctx<'_, 'g>, _: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    one(c.constant(constant_value(c.attrs)?))
}

/// `start..end` of an input's shape (opset 15's `start`/`end`).
pub(super) fn shape<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let s: Vec<i64> = c.input(ins, 0)?.shape().iter().map(|&d| d as i64).collect();
    let r = s.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = clamp(c.attrs.int("start", 0)?);
    let end = clamp(c.attrs.int("end", r)?).max(start);
    let part = s[start..end].to_vec();
    let n = part.len();
    one(c.constant(Tensor::from_vec(part, &[n])?))
}

pub(super) fn size<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    one(c.constant(Tensor::scalar(c.input(ins, 0)?.value().numel() as i64)))
}

pub(super) fn constant_of_shape<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let dims: Vec<usize> = c
        .ints(c.input(ins, 0)?)?
        .iter()
        .map(|&d| d.max(0) as usize)
        .collect();
    let fill = match c.attrs.tensor("value")? {
        Some(t) => t.clone(),
        None => Tensor::scalar(0.0f32),
    };
    let value = fill.to_f64_vec().first().copied().unwrap_or(0.0);
    c.check_size(&dims)?;
    one(c.constant(Tensor::full(&dims, value, fill.dtype())?))
}

pub(super) fn range<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (start, limit, delta) = (c.input(ins, 0)?, c.input(ins, 1)?, c.input(ins, 2)?);
    let (s, l, d) = (c.scalar(start)?, c.scalar(limit)?, c.scalar(delta)?);
    let count = ((l - s) / d).ceil();
    if !count.is_finite() {
        return Err(c.error(format!("Range({s}, {l}, {d})")));
    }
    c.check_size(&[count.max(0.0) as usize])?;
    if start.dtype() == DType::I64 {
        let (s, l, d) = (c.ints(start)?[0], c.ints(limit)?[0], c.ints(delta)?[0]);
        return one(c.constant(Tensor::arange_i64(s, l, d)?));
    }
    one(c.constant(Tensor::arange(s, l, d, start.dtype())?))
}

/// ONNX's reshape: `0` copies the input's size at that position (unless
/// `allowzero`, when it is a size 0), `-1` is inferred.
pub(super) fn reshape<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let spec = c.ints(c.input(ins, 1)?)?;
    let copy_zero = c.attrs.int("allowzero", 0)? == 0;
    let mut shape = Vec::with_capacity(spec.len());
    for (i, &d) in spec.iter().enumerate() {
        shape.push(match d {
            0 if copy_zero => *x
                .shape()
                .get(i)
                .ok_or_else(|| c.error(format!("shape {spec:?}: no size {i} to copy")))?
                as isize,
            d => d as isize,
        });
    }
    one(x.try_reshape(&shape)?)
}

pub(super) fn flatten<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let rank = x.shape().len();
    let axis = c.attrs.int("axis", 1)?;
    let axis = if axis < 0 { axis + rank as i64 } else { axis };
    if !(0..=rank as i64).contains(&axis) {
        return Err(c.error(format!("axis {axis} is out of range for rank {rank}")));
    }
    if axis == 1 && rank >= 2 {
        return one(x.try_flatten(1, -1)?);
    }
    let lead: usize = x.shape()[..axis as usize].iter().product();
    one(x.try_reshape(&[lead as isize, -1])?)
}

/// Axes from the input (opset 13+) or the attribute (older).
fn axes_of<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>, i: usize) -> Result<Option<Vec<i64>>> {
    match c.opt(ins, i) {
        Some(v) => Ok(Some(c.ints(v)?)),
        None => c.attrs.ints("axes"),
    }
}

/// ONNX axes (negative from the end) of a rank-`rank` value, in order.
fn sorted_axes(c: &Ctx<'_, '_>, axes: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut axes = axes
        .iter()
        .map(|&a| c.axis(a, rank))
        .collect::<Result<Vec<_>>>()?;
    axes.sort_unstable();
    Ok(axes)
}

pub(super) fn squeeze<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let Some(axes) = axes_of(c, ins, 1)? else {
        return one(x.squeeze());
    };
    let axes = sorted_axes(c, &axes, x.shape().len())?;
    let mut y = x.clone();
    for &a in axes.iter().rev() {
        if x.shape()[a] != 1 {
            return Err(c.error(format!("cannot squeeze axis {a} of size {}", x.shape()[a])));
        }
        y = y.try_squeeze_dim(a as isize)?;
    }
    one(y)
}

pub(super) fn unsqueeze<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let axes = axes_of(c, ins, 1)?.ok_or_else(|| c.error("no axes"))?;
    let axes = sorted_axes(c, &axes, x.shape().len() + axes.len())?;
    let mut y = x.clone();
    for a in axes {
        y = y.try_unsqueeze(a as isize)?;
    }
    one(y)
}

pub(super) fn transpose<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let rank = x.shape().len();
    let perm: Vec<isize> = match c.attrs.ints("perm")? {
        Some(p) => p.iter().map(|&d| d as isize).collect(),
        None => (0..rank as isize).rev().collect(),
    };
    one(x.try_permute(&perm)?)
}

/// Bidirectional broadcasting of the input and the given shape.
pub(super) fn expand<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let spec = c.ints(c.input(ins, 1)?)?;
    let xs = x.shape();
    let rank = xs.len().max(spec.len());
    let mut out = vec![0usize; rank];
    for (i, o) in out.iter_mut().enumerate() {
        let a = (i + xs.len()).checked_sub(rank).map_or(1, |j| xs[j]);
        let b = (i + spec.len())
            .checked_sub(rank)
            .map_or(1, |j| spec[j].max(0) as usize);
        *o = if a == 1 {
            b
        } else if b == 1 || a == b {
            a
        } else {
            return Err(c.error(format!("cannot expand {xs:?} to {spec:?}")));
        };
    }
    if out == xs {
        return one(x.clone());
    }
    c.check_size(&out)?;
    one(x.try_expand(&out)?)
}

pub(super) fn concat<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let parts = (0..ins.len())
        .map(|i| c.input(ins, i))
        .collect::<Result<Vec<_>>>()?;
    let axis = c.attrs.int("axis", 0)?;
    if parts.len() == 1 {
        return one(parts[0].clone());
    }
    one(Var::try_cat(&parts, axis as isize)?)
}

/// Sizes from the `split` input (opset 13+), the attribute (older), or
/// equal parts (`num_outputs` in opset 18, else one per output).
pub(super) fn split<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let rank = x.shape().len();
    let axis = c.axis(c.attrs.int("axis", 0)?, rank)?;
    let len = x.shape()[axis];
    let sizes: Vec<usize> = match c.opt(ins, 1) {
        Some(s) => c.ints(s)?.iter().map(|&v| v.max(0) as usize).collect(),
        None => match c.attrs.ints("split")? {
            Some(s) => s.iter().map(|&v| v.max(0) as usize).collect(),
            None => {
                let n = c.attrs.int("num_outputs", c.n_outputs as i64)?.max(1) as usize;
                let chunk = len.div_ceil(n);
                (0..n)
                    .map(|i| chunk.min(len.saturating_sub(i * chunk)))
                    .collect()
            }
        },
    };
    if sizes.iter().sum::<usize>() != len {
        return Err(c.error(format!("split sizes {sizes:?} do not add up to {len}")));
    }
    let mut start = 0;
    let mut out = Vec::with_capacity(sizes.len());
    for s in sizes {
        out.push(x.try_narrow(axis as isize, start as isize, s)?);
        start += s;
    }
    Ok(out)
}

/// One axis of ONNX's slice: clamped bounds for a positive step.
fn slice_bounds(start: i64, end: i64, len: i64) -> (i64, i64) {
    let norm = |v: i64| (if v < 0 { v.saturating_add(len) } else { v }).clamp(0, len);
    let (s, e) = (norm(start), norm(end));
    (s, e.max(s))
}

pub(super) fn slice<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let rank = x.shape().len();
    // Before opset 10 the bounds and axes are attributes, and there are no steps.
    let from_attrs = c.opset < 10;
    let attr = |key: &str| -> Result<Vec<i64>> {
        c.attrs
            .ints(key)?
            .ok_or_else(|| c.error(format!("no `{key}` attribute")))
    };
    let (starts, ends) = if from_attrs {
        (attr("starts")?, attr("ends")?)
    } else {
        (c.ints(c.input(ins, 1)?)?, c.ints(c.input(ins, 2)?)?)
    };
    let axes_given = if from_attrs {
        c.attrs.ints("axes")?
    } else {
        c.opt(ins, 3).map(|a| c.ints(a)).transpose()?
    };
    let axes: Vec<i64> = axes_given.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps: Vec<i64> = match c.opt(ins, 4).filter(|_| !from_attrs) {
        Some(s) => c.ints(s)?,
        None => vec![1; starts.len()],
    };
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(c.error("starts, ends, axes and steps differ in length"));
    }
    let mut y = x.clone();
    for i in 0..starts.len() {
        let axis = c.axis(axes[i], rank)?;
        if steps[i] == 0 {
            return Err(c.error("a step of 0"));
        }
        let len = y.shape()[axis] as i64;
        if steps[i] < 0 {
            // Backwards: start clamps to [0, len - 1], end to [-1, len - 1]
            // (-1 meaning past the first element); the picked positions
            // are gathered (index_select, differentiable).
            let norm = |v: i64, lo: i64| {
                (if v < 0 { v.saturating_add(len) } else { v }).clamp(lo, len - 1)
            };
            let (s, e) = (norm(starts[i], 0), norm(ends[i], -1));
            let picked: Vec<i64> = std::iter::successors(Some(s), |&p| p.checked_add(steps[i]))
                .take_while(|&p| p > e)
                .collect();
            let n = picked.len();
            y = y.try_index_select(axis as isize, &Tensor::from_vec(picked, &[n])?)?;
            continue;
        }
        let (s, e) = slice_bounds(starts[i], ends[i], len);
        y = y.try_slice(axis as isize, s as isize, e as isize, steps[i] as usize)?;
    }
    one(y)
}

/// `Gather`: a float table's rows at integer ids along axis 0 is an
/// embedding lookup; a 0-d index selects; otherwise `index_select`.
pub(super) fn gather<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, idx) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let rank = x.shape().len();
    let axis = c.axis(c.attrs.int("axis", 0)?, rank)?;
    let size = x.shape()[axis] as i64;
    let fix = |i: i64| if i < 0 { i + size } else { i };
    let raw = c.ints(idx)?;
    let negative = raw.iter().any(|&i| i < 0);
    let ids: Vec<i64> = raw.into_iter().map(fix).collect();
    if axis == 0 && rank == 2 && x.value().is_float() {
        // The ids stay the node's input (a graph input stays one on re-export).
        let index = if negative {
            c.constant(Tensor::from_vec(ids, idx.shape())?)
        } else {
            idx.clone()
        };
        return one(x.try_embedding(&index, index.shape())?);
    }
    let index = Tensor::from_vec(ids.clone(), idx.shape())?;
    if idx.shape().is_empty() {
        let i = usize::try_from(ids[0])
            .map_err(|_| c.error(format!("index {} out of range", ids[0])))?;
        return one(x.try_select(axis as isize, i)?);
    }
    let flat = Tensor::from_vec(ids, &[index.numel()])?;
    let picked = x.try_index_select(axis as isize, &flat)?;
    let mut shape: Vec<isize> = x.shape()[..axis].iter().map(|&d| d as isize).collect();
    shape.extend(idx.shape().iter().map(|&d| d as isize));
    shape.extend(x.shape()[axis + 1..].iter().map(|&d| d as isize));
    if picked
        .shape()
        .iter()
        .map(|&d| d as isize)
        .eq(shape.iter().copied())
    {
        return one(picked);
    }
    one(picked.try_reshape(&shape)?)
}

pub(super) fn gather_elements<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, idx) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let axis = c.axis(c.attrs.int("axis", 0)?, x.shape().len())?;
    let size = x.shape()[axis] as i64;
    let ids: Vec<i64> = c
        .ints(idx)?
        .into_iter()
        .map(|i| if i < 0 { i + size } else { i })
        .collect();
    one(x.try_gather(axis as isize, &Tensor::from_vec(ids, idx.shape())?)?)
}

pub(super) fn check_pad(a: &Attrs, _: i64) -> Checked {
    match a.string("mode", "constant").as_deref() {
        Ok("constant") => Ok(()),
        Ok(m) if super::border::Border::parse(m).is_some() => Ok(()),
        Ok(m) => Err(format!("mode = {m:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// ONNX's pads (every begin, then every end; `axes` optional) in
/// PyTorch's order (last dimension first, `(begin, end)` pairs).
pub(super) fn pad<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let rank = x.shape().len();
    let pads = match c.opt(ins, 1) {
        Some(p) => c.ints(p)?,
        None => c.attrs.ints("pads")?.unwrap_or_default(),
    };
    let value = match c.opt(ins, 2) {
        Some(v) => c.scalar(v)?,
        None => c.attrs.float("value", 0.0)?,
    };
    let axes: Vec<usize> = match c.opt(ins, 3) {
        Some(a) => c
            .ints(a)?
            .iter()
            .map(|&a| c.axis(a, rank))
            .collect::<Result<_>>()?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(c.error(format!("{} pads for {} axes", pads.len(), axes.len())));
    }
    let mut torch = vec![0isize; 2 * rank];
    for (k, &a) in axes.iter().enumerate() {
        torch[2 * (rank - 1 - a)] = pads[k] as isize;
        torch[2 * (rank - 1 - a) + 1] = pads[k + axes.len()] as isize;
    }
    let padded: Vec<usize> = x
        .shape()
        .iter()
        .enumerate()
        .map(|(d, &n)| {
            let (before, after) = (torch[2 * (rank - 1 - d)], torch[2 * (rank - 1 - d) + 1]);
            (n as isize)
                .saturating_add(before)
                .saturating_add(after)
                .max(0) as usize
        })
        .collect();
    c.check_size(&padded)?;
    let mode = c.attrs.string("mode", "constant")?;
    if let Some(border) = super::border::Border::parse(&mode) {
        let per_axis: Vec<(i64, i64)> = (0..rank)
            .map(|d| {
                let at = 2 * (rank - 1 - d);
                (torch[at] as i64, torch[at + 1] as i64)
            })
            .collect();
        return one(super::border::pad_border(c, x, &per_axis, border)?);
    }
    // PyTorch's list may stop at the last padded dimension.
    while torch.len() > 2 && torch[torch.len() - 2..] == [0, 0] {
        torch.truncate(torch.len() - 2);
    }
    one(x.try_pad(&torch, value)?)
}

pub(super) fn trilu<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let k = match c.opt(ins, 1) {
        Some(k) => c.ints(k)?.first().copied().unwrap_or(0),
        None => 0,
    };
    if c.attrs.int("upper", 1)? != 0 {
        one(x.try_triu(k)?)
    } else {
        one(x.try_tril(k)?)
    }
}

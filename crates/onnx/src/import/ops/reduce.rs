//! Reductions and arg-extrema. `ReduceSum`'s axes are an input from
//! opset 13, the others' from opset 18 (an attribute before).

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];

/// The axes to reduce (every axis when none are given, unless
/// `noop_with_empty_axes`) and keepdims; `None` for a no-op.
fn plan<'g>(
    c: &Ctx<'_, 'g>,
    ins: &Ins<'g>,
    axes_input_from: i64,
) -> Result<Option<(Vec<isize>, bool)>> {
    let x = c.input(ins, 0)?;
    let rank = x.shape().len();
    let axes = if c.opset >= axes_input_from {
        c.opt(ins, 1).map(|a| c.ints(a)).transpose()?
    } else {
        c.attrs.ints("axes")?
    };
    let keepdims = c.attrs.int("keepdims", 1)? != 0;
    let axes = match axes {
        Some(a) if !a.is_empty() => a
            .iter()
            .map(|&d| c.axis(d, rank).map(|d| d as isize))
            .collect::<Result<Vec<_>>>()?,
        _ if c.attrs.int("noop_with_empty_axes", 0)? != 0 => return Ok(None),
        _ => (0..rank as isize).collect(),
    };
    Ok(Some((axes, keepdims)))
}

fn reduce<'g>(
    c: &Ctx<'_, 'g>,
    ins: &Ins<'g>,
    axes_input_from: i64,
    f: impl Fn(&Var<'g>, &[isize], bool) -> Result<Var<'g>>,
) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    match plan(c, ins, axes_input_from)? {
        None => one(x.clone()),
        Some((axes, _)) if axes.is_empty() => one(x.clone()),
        Some((axes, keep)) => one(f(x, &axes, keep)?),
    }
}

pub(super) fn sum<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    reduce(c, ins, 13, |x, a, k| x.try_sum_axes(a, k))
}
pub(super) fn mean<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    reduce(c, ins, 18, |x, a, k| x.try_mean_axes(a, k))
}
/// The largest (or smallest) value over `axes`. Integers and bools reduce
/// through f64 on the host; over an empty axis the result is the
/// reduction's identity (-inf for a maximum, +inf for a minimum; false or
/// true for bools; the extreme integer), as ONNX defines it from opset 18.
fn extremum<'g>(x: &Var<'g>, axes: &[isize], keep: bool, max: bool) -> Result<Var<'g>> {
    let dtype = x.dtype();
    let empty = axes.iter().any(|&a| x.shape()[a as usize] == 0);
    if empty {
        let mut shape = x.shape().to_vec();
        for &a in axes {
            shape[a as usize] = 1;
        }
        if !keep {
            let mut sorted = axes.to_vec();
            sorted.sort_unstable();
            for &a in sorted.iter().rev() {
                shape.remove(a as usize);
            }
        }
        let identity = match (dtype, max) {
            (DType::Bool, m) => f64::from(u8::from(!m)),
            (DType::I64, true) => i64::MIN as f64,
            (DType::I64, false) => i64::MAX as f64,
            (_, true) => f64::NEG_INFINITY,
            (_, false) => f64::INFINITY,
        };
        if dtype == DType::I64 {
            let v = if max { i64::MIN } else { i64::MAX };
            let n = shape.iter().product();
            return Ok(Var::constant_in(
                x.graph(),
                Tensor::from_vec(vec![v; n], &shape)?,
            ));
        }
        return Ok(Var::constant_in(
            x.graph(),
            Tensor::full(&shape, identity, dtype)?,
        ));
    }
    if matches!(dtype, DType::Bool | DType::I64) {
        let wide = x.try_to_dtype(DType::F64)?;
        let r = if max {
            wide.try_max_axes(axes, keep)?
        } else {
            wide.try_min_axes(axes, keep)?
        };
        return Ok(Var::constant_in(x.graph(), r.value().to_dtype(dtype)));
    }
    if max {
        x.try_max_axes(axes, keep)
    } else {
        x.try_min_axes(axes, keep)
    }
}

pub(super) fn max<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    reduce(c, ins, 18, |x, a, k| extremum(x, a, k, true))
}
pub(super) fn min<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    reduce(c, ins, 18, |x, a, k| extremum(x, a, k, false))
}
pub(super) fn logsumexp<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    reduce(c, ins, 18, |x, a, k| x.try_logsumexp(a, k))
}

/// The position of the extremum along `axis`: the first one, or with
/// `select_last_index` (opset 12) the last, found as the first of the
/// input reversed along the axis.
fn arg<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>, max: bool) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let axis = c.axis(c.attrs.int("axis", 0)?, x.shape().len())?;
    let keep = c.attrs.int("keepdims", 1)? != 0;
    let last = c.attrs.int("select_last_index", 0)? != 0;
    let n = x.shape().get(axis).copied().unwrap_or(1);
    let x = if last {
        let reversed: Vec<i64> = (0..n as i64).rev().collect();
        x.try_index_select(axis as isize, &Tensor::from_vec(reversed, &[n])?)?
    } else {
        x.clone()
    };
    let i = if max {
        x.try_argmax(Some(axis as isize), keep)?
    } else {
        x.try_argmin(Some(axis as isize), keep)?
    };
    if !last {
        return one(i);
    }
    let from_end = i.value().map_f64(|j| (n as f64 - 1.0) - j);
    one(c.constant(from_end.to_dtype(i.dtype())))
}

pub(super) fn argmax<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    arg(c, ins, true)
}
pub(super) fn argmin<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    arg(c, ins, false)
}

pub(super) fn l1<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    reduce(c, ins, 18, |x, a, k| x.try_abs()?.try_sum_axes(a, k))
}
pub(super) fn l2<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    reduce(c, ins, 18, |x, a, k| {
        x.try_mul(x)?.try_sum_axes(a, k)?.try_sqrt()
    })
}
pub(super) fn sum_square<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    reduce(c, ins, 18, |x, a, k| x.try_mul(x)?.try_sum_axes(a, k))
}
pub(super) fn log_sum<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    reduce(c, ins, 18, |x, a, k| x.try_sum_axes(a, k)?.try_log())
}

/// The product over `axes`, as a chain of products of slices along each
/// axis (differentiable; an empty axis gives 1).
pub(super) fn prod<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    reduce(c, ins, 18, |x, axes, keep| {
        let mut y = x.clone();
        for &axis in axes {
            let n = y.shape()[axis as usize];
            let mut p = if n == 0 {
                let mut shape = y.shape().to_vec();
                shape[axis as usize] = 1;
                Var::constant_in(y.graph(), Tensor::full(&shape, 1.0, y.dtype())?)
            } else {
                y.try_narrow(axis, 0, 1)?
            };
            for i in 1..n {
                p = p.try_mul(&y.try_narrow(axis, i as isize, 1)?)?;
            }
            y = p;
        }
        if keep {
            return Ok(y);
        }
        let mut sorted = axes.to_vec();
        sorted.sort_unstable();
        for &axis in sorted.iter().rev() {
            y = y.try_squeeze_dim(axis)?;
        }
        Ok(y)
    })
}

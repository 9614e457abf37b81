//! Reductions: sums, means, extrema, variance, logsumexp, argmax/argmin.
//! Opset 17 passes `ReduceSum`'s axes as an input and the others' as an
//! attribute.

use super::emit::{attr_int, attr_ints};
use super::{Emit, Mapper, NodeCtx};
use retrograd_engine::base::error::Result;

pub(super) fn lookup(op: &str) -> Option<Mapper> {
    Some(match op {
        "sum" | "sum_dim" => |e, n| reduce(e, n, "ReduceSum"),
        "mean" | "mean_dim" => |e, n| reduce(e, n, "ReduceMean"),
        "max" | "amax" => |e, n| reduce(e, n, "ReduceMax"),
        "min" | "amin" => |e, n| reduce(e, n, "ReduceMin"),
        "logsumexp" => |e, n| reduce(e, n, "ReduceLogSumExp"),
        "var" => variance,
        "argmax" => |e, n| arg(e, n, "ArgMax"),
        "argmin" => |e, n| arg(e, n, "ArgMin"),
        _ => return None,
    })
}

/// The reduced axes (normalised; every axis when the op lists none or an
/// empty list) and keepdim.
fn axes_of(n: &NodeCtx<'_>) -> Result<(Vec<i64>, bool)> {
    let rank = n.rank(0);
    let keepdim = n.attrs.get_bool("keepdim").unwrap_or(false);
    let axes = match n.attrs.get_ints("axes") {
        Some(a) if !a.is_empty() => a
            .iter()
            .map(|&d| n.axis(d, rank))
            .collect::<Result<Vec<_>>>()?,
        _ => (0..rank as i64).collect(),
    };
    Ok((axes, keepdim))
}

/// Writes `op_type` over `axes` of `x` into `out`.
fn reduce_into(
    e: &mut Emit,
    n: &NodeCtx<'_>,
    op_type: &str,
    x: &str,
    axes: &[i64],
    keepdim: bool,
    out: &str,
) -> Result<()> {
    let keep = attr_int("keepdims", i64::from(keepdim));
    if axes.is_empty() {
        // A 0-d input: nothing to reduce.
        e.node("Identity", &[x], &[out], vec![]);
    } else if op_type == "ReduceSum" {
        let a = e.ints(&format!("{}/axes", n.out), axes)?;
        e.node(op_type, &[x, &a], &[out], vec![keep]);
    } else {
        e.node(op_type, &[x], &[out], vec![attr_ints("axes", axes), keep]);
    }
    Ok(())
}

fn reduce(e: &mut Emit, n: &NodeCtx<'_>, op_type: &str) -> Result<()> {
    let (axes, keepdim) = axes_of(n)?;
    reduce_into(e, n, op_type, n.input(0), &axes, keepdim, &n.out)
}

/// `sum((x - mean)²) / (N - correction)` over the axes.
fn variance(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let (axes, keepdim) = axes_of(n)?;
    let correction = n.float("correction")?;
    let count: usize = axes.iter().map(|&a| n.shape(0)[a as usize]).product();
    let x = n.input(0);
    let mean = n.tmp(e, "mean");
    reduce_into(e, n, "ReduceMean", x, &axes, true, &mean)?;
    let d = e.op("Sub", &[x, &mean], &format!("{}/centered", n.out), vec![]);
    let sq = e.op("Mul", &[&d, &d], &format!("{}/squared", n.out), vec![]);
    let sum = n.tmp(e, "sum");
    reduce_into(e, n, "ReduceSum", &sq, &axes, keepdim, &sum)?;
    let denom = e.scalar("denominator", count as f64 - correction, n.dtype())?;
    e.node("Div", &[&sum, &denom], &[&n.out], vec![]);
    Ok(())
}

/// ArgMax/ArgMin along one axis, or over the flattened input when the op
/// has none (then with keepdim, every axis stays as size 1).
fn arg(e: &mut Emit, n: &NodeCtx<'_>, op_type: &str) -> Result<()> {
    let keepdim = n.attrs.get_bool("keepdim").unwrap_or(false);
    let first = attr_int("select_last_index", 0);
    match n.attrs.get_int("axis") {
        Some(axis) => {
            let axis = n.axis(axis, n.rank(0))?;
            let attrs = vec![
                attr_int("axis", axis),
                attr_int("keepdims", i64::from(keepdim)),
                first,
            ];
            e.node(op_type, &[n.input(0)], &[&n.out], attrs);
        }
        None => {
            let flat_shape = e.ints(&format!("{}/flat", n.out), &[-1])?;
            let flat = e.op(
                "Reshape",
                &[n.input(0), &flat_shape],
                &format!("{}/flat", n.out),
                vec![],
            );
            let attrs = vec![attr_int("axis", 0), attr_int("keepdims", 0), first];
            let idx = e.op(op_type, &[&flat], &format!("{}/index", n.out), attrs);
            let shape: Vec<i64> = n.output.shape().iter().map(|&d| d as i64).collect();
            let shape = e.ints(&format!("{}/shape", n.out), &shape)?;
            e.node("Reshape", &[&idx, &shape], &[&n.out], vec![]);
        }
    }
    Ok(())
}

//! ONNX's `Scan` (opset 9 on): its `body` subgraph run once per step
//! along the scan axis, carrying state values from step to step, each
//! step's scan outputs stacked. The steps are unrolled on the node's
//! graph, so a model that scans trains through every step.

use super::subgraph::{self, Body};
use super::{Attrs, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];

/// `list[i]` of an optional per-input attribute list, else `default`.
fn nth(list: &Option<Vec<i64>>, i: usize, default: i64) -> i64 {
    list.as_ref()
        .and_then(|l| l.get(i).copied())
        .unwrap_or(default)
}

/// Inputs: the `N` initial states, then the `num_scan_inputs` scanned
/// tensors (sliced along `scan_input_axes`, from the end where
/// `scan_input_directions` is 1). Outputs: the `N` final states, then the
/// body's other outputs stacked along `scan_output_axes` (in reverse step
/// order where `scan_output_directions` is 1).
pub(super) fn scan<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let body = c
        .attrs
        .graph("body")?
        .ok_or_else(|| c.error("a Scan without its body"))?;
    let body = Body::prepare(c, body)?;
    let outer = subgraph::outer_values(c, ins)?;
    let own = &ins[..ins.len() - c.attrs.outer.len()];
    let m = usize::try_from(c.attrs.int("num_scan_inputs", 0)?)
        .ok()
        .filter(|&m| m > 0 && m <= own.len())
        .ok_or_else(|| c.error(format!("num_scan_inputs for {} inputs", own.len())))?;
    let n = own.len() - m;
    let inputs = own
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.clone()
                .ok_or_else(|| c.error(format!("input {i} is required")))
        })
        .collect::<Result<Vec<_>>>()?;
    let (in_axes, in_dirs) = (
        c.attrs.ints("scan_input_axes")?,
        c.attrs.ints("scan_input_directions")?,
    );
    // Each scanned input as its axis and direction.
    let mut scanned = Vec::with_capacity(m);
    let mut steps = None;
    for (j, x) in inputs[n..].iter().enumerate() {
        let axis = c.axis(nth(&in_axes, j, 0), x.shape().len())?;
        let len = x.shape().get(axis).copied().unwrap_or(0);
        if *steps.get_or_insert(len) != len {
            return Err(c.error(format!(
                "scanned inputs of {} and {len} steps",
                steps.unwrap_or(0)
            )));
        }
        scanned.push((x, axis, nth(&in_dirs, j, 0) != 0));
    }
    let steps = steps.unwrap_or(0);
    let (out_axes, out_dirs) = (
        c.attrs.ints("scan_output_axes")?,
        c.attrs.ints("scan_output_directions")?,
    );
    if steps == 0 {
        return no_steps(c, &body, inputs[..n].to_vec(), &out_axes);
    }
    let mut states: Vec<Var<'g>> = inputs[..n].to_vec();
    let mut per_step: Vec<Vec<Var<'g>>> = Vec::new();
    for t in 0..steps {
        let mut args = states.clone();
        for (x, axis, reverse) in &scanned {
            let at = if *reverse { steps - 1 - t } else { t };
            args.push(
                x.try_narrow(*axis as isize, at as isize, 1)?
                    .try_squeeze_dim(*axis as isize)?,
            );
        }
        let mut outs = body.run(c, &args, &outer)?;
        if outs.len() < n {
            return Err(c.error(format!(
                "the body gives {} values for {n} states",
                outs.len()
            )));
        }
        let rest = outs.split_off(n);
        states = outs;
        per_step.push(rest);
    }
    let k = per_step[0].len();
    let mut results = states;
    for j in 0..k {
        let mut slices: Vec<&Var<'g>> = per_step.iter().map(|s| &s[j]).collect();
        if nth(&out_dirs, j, 0) != 0 {
            slices.reverse();
        }
        let axis = c.axis(nth(&out_axes, j, 0), slices[0].shape().len() + 1)?;
        let stacked: Vec<Var<'g>> = slices
            .iter()
            .map(|s| s.try_unsqueeze(axis as isize))
            .collect::<Result<_>>()?;
        let refs: Vec<&Var<'g>> = stacked.iter().collect();
        results.push(Var::try_cat(&refs, axis as isize)?);
    }
    Ok(results)
}

/// A scan of zero steps: the states as given, and each scan output with
/// no entries along its axis, of the shape and type the body declares
/// for one step (an unknown size as 0, an unknown type as f32).
fn no_steps<'g>(
    c: &Ctx<'_, 'g>,
    body: &Body<'_>,
    states: Vec<Var<'g>>,
    out_axes: &Option<Vec<i64>>,
) -> Result<Vec<Var<'g>>> {
    let n = states.len();
    let mut results = states;
    for j in 0..body.arity().1.saturating_sub(n) {
        let (dtype, dims) = body.declared_output(n + j);
        // An undeclared rank: one axis, of no entries.
        let shape = match dims {
            None => vec![0],
            Some(dims) => {
                let mut shape: Vec<usize> = dims.into_iter().map(|d| d.unwrap_or(0)).collect();
                let axis = c.axis(nth(out_axes, j, 0), shape.len() + 1)?;
                shape.insert(axis, 0);
                shape
            }
        };
        results.push(c.constant(Tensor::zeros(&shape, dtype.unwrap_or(DType::F32))?));
    }
    Ok(results)
}

/// Opset 8's batched form (with sequence lengths) is not read; the body
/// must be one the importer runs.
pub(super) fn check(a: &Attrs, opset: i64) -> std::result::Result<(), String> {
    if opset < 9 {
        return Err("Scan before opset 9 (batched, with sequence lengths)".into());
    }
    match a.graph("body") {
        Ok(Some(g)) => subgraph::check(g, opset).map_err(|why| format!("the body: {why}")),
        Ok(None) => Err("a Scan without its body".into()),
        Err(e) => Err(e.to_string()),
    }
}

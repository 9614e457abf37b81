//! ONNX's `If` and `Loop`: subgraphs chosen or repeated by values known
//! only when the model runs. The chosen branch, and each iteration, runs
//! as retrograd ops on the node's graph (a loop is unrolled), so
//! gradients flow through whatever ran.

use super::subgraph::{self, Body};
use super::{Attrs, Ctx};
use crate::proto::GraphProto;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];

/// The most iterations a `Loop` runs: each is unrolled onto the graph, so
/// a loop whose condition never turns false must end in an error, not
/// exhaust memory.
const MAX_ITERATIONS: usize = 1 << 20;

/// The graph attribute `name`, required.
fn body<'a>(c: &Ctx<'a, '_>, name: &str) -> Result<&'a GraphProto> {
    c.attrs
        .graph(name)?
        .ok_or_else(|| c.error(format!("the graph attribute `{name}` is required")))
}

/// The truth of a one-element condition.
fn truth(c: &Ctx<'_, '_>, v: &Var<'_>, what: &str) -> Result<bool> {
    v.value().try_item().map(|x| x != 0.0).map_err(|_| {
        c.error(format!(
            "the {what} must hold one value, found shape {:?}",
            v.shape()
        ))
    })
}

/// `If`: the outputs of `then_branch` where the condition holds, else of
/// `else_branch`. Only the chosen branch runs.
pub(super) fn if_op<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let outer = subgraph::outer_values(c, ins)?;
    let own = subgraph::own_inputs(c, ins);
    let cond = c.input(own, 0)?;
    let branch = if truth(c, cond, "condition")? {
        "then_branch"
    } else {
        "else_branch"
    };
    let g = body(c, branch)?;
    let outs = subgraph::run(c, g, &[], &outer)?;
    if outs.len() < c.n_outputs {
        return Err(c.error(format!(
            "{branch} gives {} values, the node names {}",
            outs.len(),
            c.n_outputs
        )));
    }
    Ok(outs)
}

/// `Loop`: inputs the trip count `M` and condition (each optional) and the
/// `N` loop-carried values; the body reads the iteration number, the
/// condition and the carried values and gives the next condition, the
/// next carried values and `K` scan outputs. Outputs: the final carried
/// values, then each scan output stacked over the iterations along a new
/// axis 0.
pub(super) fn loop_op<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let outer = subgraph::outer_values(c, ins)?;
    let own = subgraph::own_inputs(c, ins);
    let body = Body::prepare(c, body(c, "body")?)?;
    let (n_in, n_out) = body.arity();
    let n = n_in
        .checked_sub(2)
        .ok_or_else(|| c.error(format!("a body of {n_in} inputs (at least 2)")))?;
    if own.len() != n + 2 {
        return Err(c.error(format!(
            "{} loop-carried inputs for a body that reads {n}",
            own.len().saturating_sub(2)
        )));
    }
    let k = n_out
        .checked_sub(1 + n)
        .ok_or_else(|| c.error(format!("a body of {n_out} outputs for {n} carried values")))?;
    let trips = match c.opt(own, 0) {
        None => None,
        Some(m) => {
            let m = m.value().try_item().map_err(|_| {
                c.error(format!(
                    "the trip count must hold one value, found shape {:?}",
                    m.shape()
                ))
            })?;
            Some(m.max(0.0))
        }
    };
    let mut go = match c.opt(own, 1) {
        None => true,
        Some(v) => truth(c, v, "condition")?,
    };
    let mut carried: Vec<Var<'g>> = (0..n)
        .map(|i| c.input(own, 2 + i).cloned())
        .collect::<Result<_>>()?;
    let mut scans: Vec<Vec<Var<'g>>> = vec![Vec::new(); k];
    let mut i = 0usize;
    while go && trips.is_none_or(|m| (i as f64) < m) {
        if i == MAX_ITERATIONS {
            return Err(c.error(format!(
                "the loop ran {MAX_ITERATIONS} iterations (the most it may run)"
            )));
        }
        let mut args = Vec::with_capacity(n + 2);
        args.push(c.constant(Tensor::scalar_of(i as f64, DType::I64)));
        args.push(c.constant(Tensor::scalar_of(1.0, DType::Bool)));
        args.extend(carried.iter().cloned());
        let mut outs = body.run(c, &args, &outer)?;
        go = truth(c, &outs[0], "body's condition")?;
        let rest = outs.split_off(1 + n);
        carried = outs.split_off(1);
        for (s, v) in scans.iter_mut().zip(rest) {
            s.push(v);
        }
        i += 1;
    }
    let mut results = carried;
    for (j, s) in scans.into_iter().enumerate() {
        results.push(if s.is_empty() {
            empty_scan(c, &body, 1 + n + j)?
        } else {
            let rows: Vec<Var<'g>> = s
                .iter()
                .map(|v| v.try_unsqueeze(0))
                .collect::<Result<_>>()?;
            let refs: Vec<&Var<'g>> = rows.iter().collect();
            Var::try_cat(&refs, 0)?
        });
    }
    Ok(results)
}

/// A scan output of no iterations: zero rows of the shape and type the
/// body declares (an unknown size as 0, an unknown type as f32).
fn empty_scan<'g>(c: &Ctx<'_, 'g>, body: &Body<'_>, output: usize) -> Result<Var<'g>> {
    let (dtype, dims) = body.declared_output(output);
    let mut shape = vec![0];
    shape.extend(dims.unwrap_or_default().into_iter().map(|d| d.unwrap_or(0)));
    Ok(c.constant(Tensor::zeros(&shape, dtype.unwrap_or(DType::F32))?))
}

/// Both branches must be ones the importer runs.
pub(super) fn check_if(a: &Attrs, opset: i64) -> std::result::Result<(), String> {
    for name in ["then_branch", "else_branch"] {
        match a.graph(name) {
            Ok(Some(g)) => subgraph::check(g, opset).map_err(|why| format!("{name}: {why}"))?,
            Ok(None) => return Err(format!("an If without its {name}")),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// The body must be one the importer runs.
pub(super) fn check_loop(a: &Attrs, opset: i64) -> std::result::Result<(), String> {
    match a.graph("body") {
        Ok(Some(g)) => subgraph::check(g, opset).map_err(|why| format!("the body: {why}")),
        Ok(None) => Err("a Loop without its body".into()),
        Err(e) => Err(e.to_string()),
    }
}

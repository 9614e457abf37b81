//! Forward mode: Jacobian-vector products in one forward sweep.
//!
//! `f` runs once (recording its nodes); then one sweep in append order
//! carries a tangent through every node with the op's `jvp` rule. The cost is
//! about that of the forward pass itself, whatever the number of outputs,
//! which is why forward mode wins when there are fewer inputs than outputs.

use super::gradcheck::central_difference_check;
use crate::base::error::{check_dtypes, Error, Result};
use crate::core::graph::{Graph, Var, NO_SLOT};
use crate::tensor::Tensor;

/// The output of `f` at `primals` and its directional derivative along
/// `tangents` (one per primal, same shapes): `(f(x), J_f(x) t)`.
///
/// ```
/// use retrograd::{jvp, Tensor};
/// // f(x, y) = x * y + x at (3, 4) along (1, 0): df = y + 1 = 5.
/// let (out, tangent) = jvp(
///     |v| Ok(&v[0] * &v[1] + &v[0]),
///     &[Tensor::scalar(3.0), Tensor::scalar(4.0)],
///     &[Tensor::scalar(1.0), Tensor::scalar(0.0)],
/// )?;
/// assert_eq!(out.try_item()?, 15.0);
/// assert_eq!(tangent.try_item()?, 5.0);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn jvp<F>(f: F, primals: &[Tensor], tangents: &[Tensor]) -> Result<(Tensor, Tensor)>
where
    F: for<'g> Fn(&[Var<'g>]) -> Result<Var<'g>>,
{
    if primals.len() != tangents.len() {
        return Err(Error::invalid(
            "jvp",
            format!("{} primals but {} tangents", primals.len(), tangents.len()),
        ));
    }
    for (p, t) in primals.iter().zip(tangents) {
        if p.shape() != t.shape() {
            return Err(Error::shape_mismatch("jvp", p.shape(), t.shape()));
        }
        check_dtypes("jvp", p.dtype(), t.dtype())?;
    }
    let graph = Graph::new();
    let vars: Vec<Var<'_>> = primals.iter().map(|p| graph.variable(p.clone())).collect();
    let out = f(&vars)?;
    let seeds: Vec<(u32, Var<'_>)> = vars
        .iter()
        .zip(tangents)
        .map(|(v, t)| (v.slot(), Var::constant_in(&graph, t.clone())))
        .collect();
    let _off = graph.no_grad_guard();
    let tangent = push_tangents(&graph, &seeds, &out)?;
    Ok((
        out.value().clone(),
        tangent.map_or_else(|| out.value().zeros_like(), |t| t.value().clone()),
    ))
}

/// Sweeps the graph in append order from `seeds` (value id -> tangent) and
/// returns the tangent of `out` (`None` when it is zero).
pub(crate) fn push_tangents<'g>(
    graph: &'g Graph,
    seeds: &[(u32, Var<'g>)],
    out: &Var<'g>,
) -> Result<Option<Var<'g>>> {
    if out.slot() == NO_SLOT {
        return Ok(None);
    }
    let node_count = graph.len();
    let mut tangent: Vec<Option<Var<'g>>> = vec![None; graph.value_count()];
    for (id, t) in seeds {
        let slot = &mut tangent[*id as usize];
        *slot = Some(match slot.take() {
            Some(acc) => acc.try_add(t)?,
            None => t.clone(),
        });
    }
    let last = out.node_index().map_or(0, |n| n + 1).min(node_count);
    for node in 0..last {
        let call = super::backward::node_call(graph, node);
        let (op, input_ids, inputs, output) =
            (call.op.get(), &call.input_ids, &call.inputs, &call.output);
        let ts: Vec<Option<Var<'g>>> = input_ids
            .iter()
            .map(|&id| tangent[id as usize].clone())
            .collect();
        if ts.iter().all(Option::is_none) {
            continue;
        }
        let t = op.jvp(&ts, crate::core::Node { inputs, output })?;
        if let Some(t) = &t
            && t.shape() != output.shape()
        {
            return Err(Error::BadGradient {
                op: op.name().to_string(),
                detail: format!(
                    "a tangent of shape {:?} for an output of shape {:?}",
                    t.shape(),
                    output.shape()
                ),
            });
        }
        tangent[output.slot() as usize] = t;
    }
    Ok(tangent[out.slot() as usize].clone())
}

/// Checks `jvp` of `f` at `primals` against central finite differences along
/// fixed pseudo-random tangents (f64 inputs). The shared checker for every
/// op's tangent rule.
///
/// ```
/// use retrograd::{jvpcheck, Tensor};
/// jvpcheck(|v| Ok((&v[0] * &v[0]).exp()), &[Tensor::from_vec(vec![0.3, -0.2], &[2])?])?;
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn jvpcheck<F>(f: F, primals: &[Tensor]) -> Result<()>
where
    F: for<'g> Fn(&[Var<'g>]) -> Result<Var<'g>>,
{
    central_difference_check(&f, primals)
}

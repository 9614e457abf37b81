//! Every registered op's batching rule, asked of the registry: `vmap(f)`
//! over a batch equals `f` on each example, stacked, for the batch along
//! axis 0, along axis 1, on one input at a time (the others shared by
//! every example) and nested twice; gradients through the batched graph
//! equal each example's; and `vmap` of a gradient (per-sample gradients)
//! equals each example's gradient, which batches the op's backward ops
//! too.

#[path = "support/registry_ops.rs"]
mod registry_ops;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use retrograd::func::{Randomness, VMap};
use retrograd::{grad, Differentiable, GradOptions, Graph, OpRegistry, Result, Tensor, Var};
use std::sync::Arc;

/// The number of examples in a batch.
const BATCH: usize = 3;

/// One op under test: how to apply it and its examples (same shapes,
/// different values).
struct Case {
    label: String,
    op: Arc<dyn Differentiable>,
    examples: Vec<Vec<Tensor>>,
    second_derivative: bool,
}

impl Case {
    fn apply<'g>(&self, args: &[Var<'g>]) -> Result<Var<'g>> {
        let refs: Vec<&Var<'g>> = args.iter().collect();
        args[0].graph().record(self.op.clone(), &refs)
    }
}

/// Every float-output op of the default registry with inputs to try:
/// elementwise ops from their safe domains (a second input of lower rank,
/// so broadcasting is exercised), structured ops from their sample inputs.
fn cases() -> Vec<Case> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut cases = Vec::new();
    for instance in registry_ops::elementwise() {
        let examples = (0..2 * BATCH)
            .map(|_| {
                let columns = registry_ops::sample_inputs(instance, 6, &mut rng);
                columns
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| {
                        if i == 0 {
                            c.reshape(&[2, 3]).unwrap()
                        } else {
                            c.narrow(0, 0, 3).unwrap().contiguous()
                        }
                    })
                    .collect()
            })
            .collect();
        cases.push(Case {
            label: instance.label.clone(),
            op: instance.op.clone(),
            examples,
            second_derivative: instance.facts.second_derivative,
        });
    }
    for op in registry_ops::structured() {
        if op.non_float_output() {
            continue;
        }
        let examples = (0..2 * BATCH as u64).map(|s| op.inputs(11 + s)).collect();
        cases.push(Case {
            label: op.name.clone(),
            op: op.op.clone(),
            examples,
            second_derivative: op.facts.second_derivative,
        });
    }
    cases
}

/// `tensors` stacked along a new axis `axis`.
fn stack(tensors: &[Tensor], axis: usize) -> Tensor {
    let g = Graph::new();
    let vars: Vec<Var<'_>> = tensors.iter().map(|t| g.constant(t.clone())).collect();
    let refs: Vec<&Var<'_>> = vars.iter().collect();
    Var::try_stack(&refs, axis as isize)
        .unwrap()
        .value()
        .clone()
}

/// The `vmap` of the checks. A random op (dropout) draws under
/// `Randomness::Same`: every example then draws what it draws alone, so
/// its values compare with the examples' as any op's do (`Different` is
/// for the op's own tests; the default refuses random ops).
fn vmap() -> VMap {
    VMap::new().randomness(Randomness::Same)
}

/// The op on one example, as a plain value.
fn single(case: &Case, example: &[Tensor]) -> Result<Tensor> {
    let g = Graph::new();
    let args: Vec<Var<'_>> = example.iter().map(|t| leaf(&g, t)).collect();
    Ok(case.apply(&args)?.value().clone())
}

/// A float input as a variable, an index or mask as a constant.
fn leaf<'g>(g: &'g Graph, t: &Tensor) -> Var<'g> {
    if t.is_float() {
        g.variable(t.clone())
    } else {
        g.constant(t.clone())
    }
}

fn close(label: &str, what: &str, got: &Tensor, want: &Tensor) -> std::result::Result<(), String> {
    if got.shape() != want.shape() {
        return Err(format!(
            "{label} ({what}): shape {:?}, expected {:?}",
            got.shape(),
            want.shape()
        ));
    }
    if !got.allclose(want, 1e-9, 1e-11) {
        return Err(format!(
            "{label} ({what}): values differ from the examples'"
        ));
    }
    Ok(())
}

/// `vmap` with `in_axes` over inputs where the batched ones are stacked at
/// their axis, against the op on each example.
fn check_axes(
    case: &Case,
    in_axes: &[Option<usize>],
    what: &str,
) -> std::result::Result<(), String> {
    let label = &case.label;
    let examples = &case.examples[..BATCH];
    let g = Graph::new();
    let inputs: Vec<Var<'_>> = in_axes
        .iter()
        .enumerate()
        .map(|(i, axis)| match axis {
            Some(a) => {
                let column: Vec<Tensor> = examples.iter().map(|e| e[i].clone()).collect();
                leaf(&g, &stack(&column, *a))
            }
            None => leaf(&g, &examples[0][i]),
        })
        .collect();
    let refs: Vec<&Var<'_>> = inputs.iter().collect();
    let out = vmap()
        .in_axes(in_axes)
        .try_call(|v| Ok(vec![case.apply(v)?]), &refs)
        .map_err(|e| format!("{label} ({what}): {e}"))?
        .remove(0);
    let want: Vec<Tensor> = examples
        .iter()
        .map(|e| {
            let e: Vec<Tensor> = e
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    if in_axes[i].is_some() {
                        t.clone()
                    } else {
                        examples[0][i].clone()
                    }
                })
                .collect();
            single(case, &e)
        })
        .collect::<Result<_>>()
        .map_err(|e| format!("{label} ({what}) on one example: {e}"))?;
    close(label, what, out.value(), &stack(&want, 0))?;

    // Gradients through the batched graph: each example's own.
    let weights = weights_like(out.value());
    let floats: Vec<usize> = (0..inputs.len())
        .filter(|&i| inputs[i].value().is_float())
        .collect();
    if floats.is_empty() {
        return Ok(());
    }
    let loss = (&out * &g.constant(weights.clone())).sum();
    let wrt: Vec<&Var<'_>> = floats.iter().map(|&i| &inputs[i]).collect();
    let got = grad(&[&loss], &wrt, &GradOptions::new().allow_unused(true))
        .map_err(|e| format!("{label} ({what}) backward: {e}"))?;
    let mut want: Vec<Option<Tensor>> = vec![None; floats.len()];
    for (j, e) in examples.iter().enumerate() {
        let h = Graph::new();
        let args: Vec<Var<'_>> = e
            .iter()
            .enumerate()
            .map(|(i, t)| {
                leaf(
                    &h,
                    if in_axes[i].is_some() {
                        t
                    } else {
                        &examples[0][i]
                    },
                )
            })
            .collect();
        let y = case.apply(&args).map_err(|e| format!("{label}: {e}"))?;
        let w = h.constant(weights.select(0, j).unwrap().contiguous());
        let l = (&y * &w).sum();
        let wrt: Vec<&Var<'_>> = floats.iter().map(|&i| &args[i]).collect();
        let grads = grad(&[&l], &wrt, &GradOptions::new().allow_unused(true))
            .map_err(|e| format!("{label} backward on one example: {e}"))?;
        for (k, gk) in grads.iter().enumerate() {
            let i = floats[k];
            let piece = gk.value().clone();
            want[k] = Some(match (&want[k], in_axes[i]) {
                (None, Some(_)) => stack(&[piece], 0),
                (Some(acc), Some(_)) => {
                    let mut parts: Vec<Tensor> = (0..acc.shape()[0])
                        .map(|r| acc.select(0, r).unwrap().contiguous())
                        .collect();
                    parts.push(piece);
                    stack(&parts, 0)
                }
                (None, None) => piece,
                (Some(acc), None) => add(acc, &piece),
            });
        }
    }
    for (k, &i) in floats.iter().enumerate() {
        let mut want = want[k].take().unwrap();
        if let Some(a) = in_axes[i] {
            want = move_axis(&want, 0, a);
        }
        close(
            label,
            &format!("{what}, gradient of input {i}"),
            got[k].value(),
            &want,
        )?;
    }
    Ok(())
}

/// Weights for a loss over `t`: varied, none zero, in `t`'s shape and dtype.
fn weights_like(t: &Tensor) -> Tensor {
    let values: Vec<f64> = (0..t.numel())
        .map(|i| 0.5 + (i as f64 * 0.7).sin().abs())
        .collect();
    Tensor::from_f64_slice(&values, t.shape(), t.dtype()).unwrap()
}

/// `a + b` for tensors of one shape.
fn add(a: &Tensor, b: &Tensor) -> Tensor {
    let sum: Vec<f64> = a
        .to_f64_vec()
        .iter()
        .zip(b.to_f64_vec())
        .map(|(x, y)| x + y)
        .collect();
    Tensor::from_f64_slice(&sum, a.shape(), a.dtype()).unwrap()
}

/// `t` with axis `from` moved to `to`.
fn move_axis(t: &Tensor, from: usize, to: usize) -> Tensor {
    let mut dims: Vec<isize> = (0..t.shape().len() as isize)
        .filter(|&d| d != from as isize)
        .collect();
    dims.insert(to, from as isize);
    t.permute(&dims).unwrap().contiguous()
}

/// `vmap(vmap(f))` over a 2 x BATCH grid of examples.
fn check_nested(case: &Case) -> std::result::Result<(), String> {
    let label = &case.label;
    let arity = case.examples[0].len();
    let g = Graph::new();
    let inputs: Vec<Var<'_>> = (0..arity)
        .map(|i| {
            let rows: Vec<Tensor> = (0..2)
                .map(|r| {
                    let column: Vec<Tensor> = (0..BATCH)
                        .map(|c| case.examples[r * BATCH + c][i].clone())
                        .collect();
                    stack(&column, 0)
                })
                .collect();
            leaf(&g, &stack(&rows, 0))
        })
        .collect();
    let refs: Vec<&Var<'_>> = inputs.iter().collect();
    let out = vmap()
        .try_call(
            |v| {
                let refs: Vec<&Var<'_>> = v.iter().collect();
                vmap().try_call(|w| Ok(vec![case.apply(w)?]), &refs)
            },
            &refs,
        )
        .map_err(|e| format!("{label} (nested): {e}"))?
        .remove(0);
    let rows: Vec<Tensor> = (0..2)
        .map(|r| {
            let column: Vec<Tensor> = (0..BATCH)
                .map(|c| single(case, &case.examples[r * BATCH + c]))
                .collect::<Result<_>>()?;
            Ok(stack(&column, 0))
        })
        .collect::<Result<_>>()
        .map_err(|e| format!("{label} (nested) on one example: {e}"))?;
    close(label, "nested", out.value(), &stack(&rows, 0))
}

/// `vmap` of the gradient of `sum(f(x) * w)` (per-sample gradients): the
/// batched backward ops against each example's gradient.
fn check_per_sample_gradients(case: &Case) -> std::result::Result<(), String> {
    let label = &case.label;
    let examples = &case.examples[..BATCH];
    let arity = examples[0].len();
    let floats: Vec<usize> = (0..arity).filter(|&i| examples[0][i].is_float()).collect();
    if floats.is_empty() {
        return Ok(());
    }
    let g = Graph::new();
    let inputs: Vec<Var<'_>> = (0..arity)
        .map(|i| {
            let column: Vec<Tensor> = examples.iter().map(|e| e[i].clone()).collect();
            leaf(&g, &stack(&column, 0))
        })
        .collect();
    let refs: Vec<&Var<'_>> = inputs.iter().collect();
    let got = vmap()
        .try_call(|v| gradients_of(case, &floats, v), &refs)
        .map_err(|e| format!("{label} (per-sample gradients): {e}"))?;
    for (k, &i) in floats.iter().enumerate() {
        let want: Vec<Tensor> = examples
            .iter()
            .map(|e| {
                let h = Graph::new();
                let args: Vec<Var<'_>> = e.iter().map(|t| leaf(&h, t)).collect();
                Ok(gradients_of(case, &floats, &args)?[k].value().clone())
            })
            .collect::<Result<_>>()
            .map_err(|e| format!("{label} (per-sample gradients) on one example: {e}"))?;
        close(
            label,
            &format!("per-sample gradient of input {i}"),
            got[k].value(),
            &stack(&want, 0),
        )?;
    }
    Ok(())
}

/// The gradients of `sum(f(v) * w)` with respect to the inputs `floats`,
/// recorded (`create_graph`), so they can be batched.
fn gradients_of<'s>(case: &Case, floats: &[usize], v: &[Var<'s>]) -> Result<Vec<Var<'s>>> {
    let y = case.apply(v)?;
    let w = y.graph().constant(weights_like(y.value()));
    let l = (&y * &w).sum();
    let wrt: Vec<&Var<'s>> = floats.iter().map(|&i| &v[i]).collect();
    grad(
        &[&l],
        &wrt,
        &GradOptions::new().create_graph(true).allow_unused(true),
    )
}

fn check_case(case: &Case) -> Vec<String> {
    let arity = case.examples[0].len();
    let mut failures = Vec::new();
    let mut run = |r: std::result::Result<(), String>| {
        if let Err(e) = r {
            failures.push(e);
        }
    };
    run(check_axes(case, &vec![Some(0); arity], "axis 0"));
    let axis1: Vec<Option<usize>> = case.examples[0]
        .iter()
        .map(|t| Some(usize::from(!t.shape().is_empty())))
        .collect();
    run(check_axes(case, &axis1, "axis 1"));
    if arity > 1 {
        for i in 0..arity {
            let mut axes = vec![None; arity];
            axes[i] = Some(0);
            run(check_axes(case, &axes, &format!("input {i} alone")));
        }
    }
    run(check_nested(case));
    if case.second_derivative {
        run(check_per_sample_gradients(case));
    }
    failures
}

/// Only ops whose label contains this (for working on one rule).
fn filter() -> Option<String> {
    std::env::var("VMAP_OP").ok()
}

#[test]
fn every_registered_op_batches_like_its_examples() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in cases() {
        if filter().is_some_and(|f| !case.label.contains(&f)) {
            continue;
        }
        checked += 1;
        failures.extend(check_case(&case));
    }
    assert!(checked > 0, "no op matched");
    assert!(
        failures.is_empty(),
        "{} failures over {checked} ops:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Every op of the default registry either maps elements (its rule comes
/// with it) or declares sample inputs, so the sweep above reaches it.
#[test]
fn every_registered_op_is_reached_by_the_sweep() {
    let registry = OpRegistry::default_shared();
    let missing: Vec<&str> = registry
        .names()
        .into_iter()
        .filter(|name| {
            let facts = registry.get(name).unwrap().facts();
            !facts.elementwise && facts.sample_inputs.is_none()
        })
        .collect();
    assert!(missing.is_empty(), "ops without sample inputs: {missing:?}");
}

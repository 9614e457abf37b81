//! Every op of the registry that declares sample inputs (convolutions,
//! poolings, normalisations, masks: ops that are not elementwise), asked of
//! the registry rather than listed: its gradient against central
//! differences, its tangent rule against finite differences, its second
//! derivative (gradients of `<v, ∇f>` recorded with `create_graph`, against
//! finite differences of that first-order quantity), and the first-order
//! plain-tensor path against the `Var` formulas, bit for bit or nearly.
//! Sample inputs that are not floats (bool masks) are constants; an op
//! whose output is not a float (a comparison: `non_float_output`) is
//! checked to record nothing and to be a constant instead.

#[path = "support/registry_ops.rs"]
mod registry_ops;

use retrograd::{
    grad, gradcheck, jvpcheck, BackwardOptions, GradOptions, Graph, Result, Tensor, Var,
};

/// Fixed weights that turn an output into a scalar without letting errors
/// cancel, as `gradcheck`'s own reduction does.
fn weights(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let w: Vec<f64> = (0..n).map(|i| 0.5 + ((i * 7) % 10) as f64 / 10.0).collect();
    Tensor::from_vec(w, shape).expect("a valid shape")
}

/// `sum_i <vs_i, d(sum w f)/dx_i>` with the gradients recorded
/// (`create_graph`), so differentiating it exercises the backward's backward.
fn first_order<'g>(
    op: &registry_ops::Structured,
    all: &[Tensor],
    vs: &[Tensor],
    v: &[Var<'g>],
) -> Result<Var<'g>> {
    let y = op.apply_with(v, all)?;
    let graph = v[0].graph();
    let s = y.try_mul(&graph.constant(weights(y.shape())))?.sum();
    let refs: Vec<&Var<'g>> = v.iter().collect();
    let opts = GradOptions::new().create_graph(true).allow_unused(true);
    let gs = grad(&[&s], &refs, &opts)?;
    let mut total = graph.constant(Tensor::scalar(0.0));
    for (gi, vi) in gs.iter().zip(vs) {
        total = total.try_add(&gi.try_mul(&graph.constant(vi.clone()))?.sum())?;
    }
    Ok(total)
}

/// The gradient of [`first_order`] through `create_graph`, against central
/// differences of its value (each evaluation a fresh first-order pass).
fn second_derivative_check(
    op: &registry_ops::Structured,
    all: &[Tensor],
    vs: &[Tensor],
    xs: &[Tensor],
) -> std::result::Result<(), String> {
    let value = |inputs: &[Tensor]| -> f64 {
        let g = Graph::new();
        let vars: Vec<Var<'_>> = inputs.iter().map(|t| g.variable(t.clone())).collect();
        first_order(op, all, vs, &vars).unwrap().value().item()
    };
    let g = Graph::new();
    let vars: Vec<Var<'_>> = xs.iter().map(|t| g.variable(t.clone())).collect();
    let total = first_order(op, all, vs, &vars).map_err(|e| e.to_string())?;
    // A recorded gradient that depends on no input (the backward of an op
    // linear in an input and independent of the others, such as
    // `avg_pool2d_backward`) has a zero second derivative, which the
    // finite differences below must confirm.
    let grads = if total.requires_grad() {
        Some(total.backward().map_err(|e| e.to_string())?)
    } else {
        None
    };
    let eps = 1e-6;
    let mut work = xs.to_vec();
    for (i, x) in xs.iter().enumerate() {
        let analytic = match &grads {
            Some(grads) => grads.wrt(&vars[i]).to_f64_vec(),
            None => vec![0.0; x.numel()],
        };
        let base = x.to_f64_vec();
        for j in 0..base.len() {
            let mut shifted = base.clone();
            shifted[j] += eps;
            work[i] = Tensor::from_vec(shifted.clone(), x.shape()).unwrap();
            let plus = value(&work);
            shifted[j] = base[j] - eps;
            work[i] = Tensor::from_vec(shifted, x.shape()).unwrap();
            let minus = value(&work);
            work[i] = x.clone();
            let numeric = (plus - minus) / (2.0 * eps);
            if (analytic[j] - numeric).abs() > 1e-5 + 1e-4 * numeric.abs() {
                return Err(format!(
                    "input {i}, element {j}: analytic {} vs numeric {numeric}",
                    analytic[j]
                ));
            }
        }
    }
    Ok(())
}

/// Whether the op passes no gradient to any of its float inputs (every
/// input declared not differentiable: batch norm's running-statistics
/// update, whose statistics are detached): `grad` finds each one unused, and
/// there are no derivatives to check.
fn passes_no_gradient(op: &registry_ops::Structured, all: &[Tensor], xs: &[Tensor]) -> bool {
    let g = Graph::new();
    let vars: Vec<Var<'_>> = xs.iter().map(|t| g.variable(t.clone())).collect();
    let s = op.apply_with(&vars, all).unwrap().sum();
    vars.iter()
        .all(|v| grad(&[&s], &[v], &GradOptions::new()).is_err())
}

#[test]
fn every_structured_op_has_correct_gradients_tangents_and_second_derivatives() {
    let ops: Vec<_> = registry_ops::structured()
        .into_iter()
        .filter(|op| !op.non_float_output())
        .collect();
    for op in &ops {
        for seed in 0..2 {
            let all = op.inputs(seed);
            let xs = registry_ops::Structured::float_inputs(&all);
            let label = format!("{} (seed {seed})", op.name);
            if passes_no_gradient(op, &all, &xs) {
                continue;
            }
            gradcheck(|v| op.apply_with(v, &all), &xs)
                .unwrap_or_else(|e| panic!("{label}: gradient: {e}"));
            if op.facts.tangent {
                jvpcheck(|v| op.apply_with(v, &all), &xs)
                    .unwrap_or_else(|e| panic!("{label}: tangent: {e}"));
            }
            if op.facts.second_derivative {
                // g(x) = sum_i <v_i, d(sum w f)/dx_i>, differentiated again.
                let vs: Vec<Tensor> = xs.iter().map(|x| weights(x.shape())).collect();
                second_derivative_check(op, &all, &vs, &xs)
                    .unwrap_or_else(|e| panic!("{label}: second derivative: {e}"));
            }
            // The plain-tensor first-order path against the Var formulas.
            let run = |fast: bool| -> Vec<Vec<f64>> {
                let g = Graph::new();
                let vars: Vec<Var<'_>> = xs.iter().map(|t| g.variable(t.clone())).collect();
                let y = op.apply_with(&vars, &all).unwrap();
                let s = y.try_mul(&g.constant(weights(y.shape()))).unwrap().sum();
                let grads = s
                    .backward_with_options(&BackwardOptions::new().fast_path(fast))
                    .unwrap();
                vars.iter().map(|v| grads.wrt(v).to_f64_vec()).collect()
            };
            let (fast, slow) = (run(true), run(false));
            for (i, (a, b)) in fast.iter().zip(&slow).enumerate() {
                for (x, y) in a.iter().zip(b) {
                    assert!(
                        (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
                        "{label}: input {i}: fast path {x} vs Var formula {y}"
                    );
                }
            }
        }
    }
    println!("{} structured ops checked", ops.len());
}

#[test]
fn every_op_with_a_non_float_output_records_nothing() {
    let ops: Vec<_> = registry_ops::structured()
        .into_iter()
        .filter(|op| op.non_float_output())
        .collect();
    for op in &ops {
        for seed in 0..2 {
            let all = op.inputs(seed);
            let label = format!("{} (seed {seed})", op.name);
            let plain: Vec<&Tensor> = all.iter().collect();
            let want = op.op.forward(&plain).unwrap();
            assert!(!want.is_float(), "{label}: a {} output", want.dtype());
            // Float inputs as variables: still a constant, and no node.
            let g = Graph::new();
            let xs = registry_ops::Structured::float_inputs(&all);
            let vars: Vec<Var<'_>> = xs.iter().map(|t| g.variable(t.clone())).collect();
            let before = g.len();
            let y = op.apply_with(&vars, &all).unwrap();
            assert!(!y.requires_grad(), "{label}: requires grad");
            assert_eq!(g.len(), before, "{label}: recorded a node");
            assert_eq!(y.value(), &want, "{label}: value differs from forward");
            // Forward mode through it: no tangent (zero), not an error.
            let tangents: Vec<Tensor> = xs.iter().map(|x| x.ones_like()).collect();
            let (value, tangent) = retrograd::jvp(
                |v| {
                    let y = op.apply_with(v, &all)?;
                    let as_float = y.try_to_dtype(retrograd::DType::F64)?;
                    v[0].try_sum()?.try_mul(&as_float.try_sum()?)
                },
                &xs,
                &tangents,
            )
            .unwrap_or_else(|e| panic!("{label}: jvp: {e}"));
            let count = want.to_f64_vec().iter().sum::<f64>();
            let ones = xs[0].numel() as f64;
            assert_eq!(
                value.item(),
                xs[0].to_f64_vec().iter().sum::<f64>() * count,
                "{label}"
            );
            assert_eq!(tangent.item(), ones * count, "{label}: tangent");
        }
    }
    assert!(!ops.is_empty(), "no op declares a non-float output");
    println!("{} ops with a non-float output checked", ops.len());
}

//! Gradients of gradients through the shape, indexing and matmul ops: the
//! gradient penalty ||dL/dx||^2 of a loss built from every family, recorded
//! with `create_graph` and differentiated again, against central finite
//! differences of the penalty itself.

use retrograd::{grad, GradOptions, Graph, Result, Tensor, Var};

/// A loss that sends `x` and `w` through matmul (with a transposed operand),
/// transpose, pad, cat, gather, index_select, slice, reshape and stack.
fn loss<'g>(x: &Var<'g>, w: &Var<'g>) -> Result<Var<'g>> {
    let y = x.try_matmul_transposed(w, false, true)?; // [2, 3] @ [4, 3]^T -> [2, 4]
    let z = Var::try_cat(&[&y, &x.try_pad(&[0, 1], 0.5)?], 1)?; // [2, 8]
    let gathered = z.try_gather(1, &Tensor::from_indices(&[7, 0, 2, 5, 5, 1], &[2, 3])?)?;
    let picked = gathered
        .try_t()?
        .try_index_select(0, &Tensor::from_indices(&[2, 0], &[2])?)?; // [2, 2]
    let stacked = Var::try_stack(&[&picked, &y.try_slice(1, 1, 4, 2)?], 0)?; // [2, 2, 2]
    let v = stacked.try_reshape(&[-1])?;
    Ok((v.tanh() * &v).sum())
}

/// The penalty and its gradients with respect to `x` and `w`.
fn penalty(x: &[f64], w: &[f64]) -> Result<(f64, Vec<f64>, Vec<f64>)> {
    let g = Graph::new();
    let x = g.variable(Tensor::from_vec(x.to_vec(), &[2, 3])?);
    let w = g.variable(Tensor::from_vec(w.to_vec(), &[4, 3])?);
    let l = loss(&x, &w)?;
    let dx = grad(&[&l], &[&x], &GradOptions::new().create_graph(true))?.remove(0);
    let p = (&dx * &dx).sum();
    let second = grad(&[&p], &[&x, &w], &GradOptions::new())?;
    Ok((
        p.value().try_item()?,
        second[0].value().to_f64_vec(),
        second[1].value().to_f64_vec(),
    ))
}

#[test]
fn gradient_penalty_through_shape_and_matmul_ops_matches_finite_differences() {
    let x0: Vec<f64> = (0..6).map(|i| (i as f64 * 0.7).sin()).collect();
    let w0: Vec<f64> = (0..12).map(|i| (i as f64 * 0.45 + 0.2).cos()).collect();
    let (_, gx, gw) = penalty(&x0, &w0).unwrap();
    let eps = 1e-6;
    let check = |analytic: &[f64], which: usize| {
        for (i, &a) in analytic.iter().enumerate() {
            let shifted = |delta: f64| {
                let (mut x, mut w) = (x0.clone(), w0.clone());
                if which == 0 {
                    x[i] += delta;
                } else {
                    w[i] += delta;
                }
                penalty(&x, &w).unwrap().0
            };
            let numeric = (shifted(eps) - shifted(-eps)) / (2.0 * eps);
            assert!(
                (a - numeric).abs() <= 1e-5 + 1e-4 * numeric.abs(),
                "input {which}, element {i}: analytic {a} vs numeric {numeric}"
            );
        }
    };
    check(&gx, 0);
    check(&gw, 1);
}

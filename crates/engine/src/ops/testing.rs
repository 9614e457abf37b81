//! Test helpers for ops: [`hvpcheck`], second derivatives through
//! `create_graph` (a recorded backward differentiated again) against
//! central differences of first-order gradients, and [`fast_path_agrees`],
//! an op's tensor-level `backward_fast` against its `Var`-level `backward`.

use crate::autograd::gradcheck::matches_central_difference;
use crate::base::error::{Error, Result};
use crate::core::graph::{Graph, Var};
use crate::tensor::Tensor;
use crate::{gradcheck, jvpcheck, BackwardOptions, Differentiable, GradcheckOptions};

pub(crate) use crate::tensor::test_util::{close, t};

/// Fixed weights in [0.5, 1.4] that reduce an output of `shape` to a scalar
/// (a plain sum would hide errors that cancel).
fn weights(shape: &[usize]) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let w: Vec<f64> = (0..n).map(|i| 0.5 + ((i * 7) % 10) as f64 / 10.0).collect();
    Tensor::from_vec(w, shape)
}

fn weighted<'g>(f: &impl Fn(&Var<'g>) -> Result<Var<'g>>, x: &Var<'g>) -> Result<Var<'g>> {
    let y = f(x)?;
    let w = x.graph().constant(weights(y.shape())?);
    Ok(y.try_mul(&w)?.sum())
}

/// Checks `H v` of `sum(w * f(x))` (by `hessian_vector_product`, i.e.
/// reverse over reverse with `create_graph`) against
/// `(grad(x + eps v) - grad(x - eps v)) / 2 eps` for a fixed direction `v`.
pub(crate) fn hvpcheck<F>(f: F, x: &Tensor) -> Result<()>
where
    F: for<'g> Fn(&Var<'g>) -> Result<Var<'g>>,
{
    scalar_hvpcheck(|x| weighted(&f, x), x)
}

/// [`hvpcheck`] for an `f` whose value is already a scalar, panicking
/// with the element that disagrees.
#[track_caller]
pub(crate) fn check_hvp<F>(f: F, x: &Tensor)
where
    F: for<'g> Fn(&Var<'g>) -> Result<Var<'g>>,
{
    if let Err(e) = scalar_hvpcheck(f, x) {
        panic!("{e}");
    }
}

/// Checks `H v` of the scalar `f(x)` against central differences of its
/// gradient along a fixed direction `v`.
fn scalar_hvpcheck<F>(f: F, x: &Tensor) -> Result<()>
where
    F: for<'g> Fn(&Var<'g>) -> Result<Var<'g>>,
{
    let v: Vec<f64> = (0..x.numel())
        .map(|i| ((i * 5 + 3) % 11) as f64 / 11.0 - 0.45)
        .collect();
    let v = Tensor::from_vec(v, x.shape())?;
    let analytic = crate::hessian_vector_product(&f, x, &v)?.to_f64_vec();
    let gradient_at = |shift: f64| -> Result<Vec<f64>> {
        let moved = Tensor::from_vec(
            x.to_f64_vec()
                .iter()
                .zip(v.to_f64_vec())
                .map(|(a, d)| a + shift * d)
                .collect(),
            x.shape(),
        )?;
        let g = Graph::new();
        let xv = g.variable(moved);
        let y = f(&xv)?;
        if !y.requires_grad() {
            return Ok(vec![0.0; x.numel()]);
        }
        Ok(y.backward()?.wrt(&xv).to_f64_vec())
    };
    let opts = GradcheckOptions::default();
    let (plus, minus) = (gradient_at(opts.eps)?, gradient_at(-opts.eps)?);
    matches_central_difference(&analytic, &plus, &minus, &opts)
}

/// Checks that the gradients of `sum(w * f(inputs))` are the same with the
/// `backward_fast` path on and off (the `Var`-level `backward` formulas).
pub(crate) fn fast_path_agrees<F>(f: F, inputs: &[Tensor]) -> Result<()>
where
    F: for<'g> Fn(&[Var<'g>]) -> Result<Var<'g>>,
{
    let run = |fast: bool| -> Result<Vec<Vec<f64>>> {
        let g = Graph::new();
        let vars: Vec<Var<'_>> = inputs.iter().map(|t| g.variable(t.clone())).collect();
        let y = f(&vars)?;
        let w = g.constant(weights(y.shape())?.to_dtype(y.dtype()));
        let s = y.try_mul(&w)?.sum();
        let grads = s.backward_with_options(&BackwardOptions::new().fast_path(fast))?;
        Ok(vars.iter().map(|v| grads.wrt(v).to_f64_vec()).collect())
    };
    let (fast, slow) = (run(true)?, run(false)?);
    for (input, (a, b)) in fast.iter().zip(&slow).enumerate() {
        for (index, (x, y)) in a.iter().zip(b).enumerate() {
            let same = x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-12 * y.abs();
            if !same {
                return Err(Error::GradCheck {
                    input,
                    index,
                    analytic: *x,
                    numeric: *y,
                });
            }
        }
    }
    Ok(())
}

/// Checks `op`'s gradient and tangent at `inputs` (each a variable)
/// against central differences.
pub(crate) fn derivatives_agree<O: Differentiable + Clone>(
    op: &O,
    inputs: &[Tensor],
) -> Result<()> {
    fn record<'g, O: Differentiable + Clone>(op: &O, v: &[Var<'g>]) -> Result<Var<'g>> {
        let args: Vec<&Var<'g>> = v.iter().collect();
        v[0].graph().record(op.clone(), &args)
    }
    gradcheck(|v| record(op, v), inputs)?;
    jvpcheck(|v| record(op, v), inputs)
}

/// Every path a one-input op derives, at `x`: the gradient and the tangent
/// against central differences, the second derivative through
/// `create_graph`, and the plain-tensor path against the `Var` formula.
pub(crate) fn all_paths_agree<F>(f: F, x: &Tensor)
where
    F: for<'g> Fn(&Var<'g>) -> Result<Var<'g>> + Copy,
{
    let inputs = std::slice::from_ref(x);
    crate::gradcheck(|v| f(&v[0]), inputs).expect("gradient against finite differences");
    crate::jvpcheck(|v| f(&v[0]), inputs).expect("tangent against finite differences");
    hvpcheck(f, x).expect("second derivative against finite differences");
    fast_path_agrees(|v| f(&v[0]), inputs).expect("plain-tensor path against the Var formula");
}

/// [`all_paths_agree`] for each of `ops` at one 1-d input `at`: the one
/// test every unary rule file runs.
pub(crate) fn every_path_agrees_at(at: &[f64], ops: &[for<'g> fn(&Var<'g>) -> Result<Var<'g>>]) {
    let x = t(at);
    for &f in ops {
        all_paths_agree(f, &x);
    }
}

/// A one-input op's values at a 1-d input `at`.
pub(crate) fn values_at(f: impl for<'g> Fn(&Var<'g>) -> Var<'g>, at: &[f64]) -> Vec<f64> {
    let g = Graph::new();
    f(&g.variable(t(at))).value().to_f64_vec()
}

/// A [2, 3, 4] input with no ties, for the reductions' tests.
pub(crate) fn sample_2x3x4() -> Tensor {
    let v = [
        0.5, -1.0, 2.0, 1.5, 0.3, -0.7, 1.1, 0.9, -0.2, 2.4, -1.6, 0.8, 0.05, 1.3, -0.4, 0.6, 2.2,
        -0.9, 1.7, 0.2, -1.1, 0.4, 1.9, -0.3,
    ];
    Tensor::from_vec(v.to_vec(), &[2, 3, 4]).unwrap()
}

/// A reduction over axes under test, as `(input, axes, keepdim) -> output`.
pub(crate) type AxesReduction = for<'a, 'g> fn(&'a Var<'g>, &[isize], bool) -> Result<Var<'g>>;

/// Checks the gradient and the tangent of each reduction over
/// [`sample_2x3x4`] for leading, middle, trailing, several and all axes,
/// with and without `keepdim`.
pub(crate) fn check_axes_reductions(reductions: &[AxesReduction]) {
    let x = sample_2x3x4();
    let cases: [(&[isize], bool); 6] = [
        (&[0], false),
        (&[1], false),
        (&[-1], true),
        (&[0, 2], false),
        (&[0, 2], true),
        (&[0, 1, 2], false),
    ];
    for (axes, keepdim) in cases {
        for reduce in reductions {
            let inputs = std::slice::from_ref(&x);
            crate::gradcheck(|v| reduce(&v[0], axes, keepdim), inputs).unwrap();
            crate::jvpcheck(|v| reduce(&v[0], axes, keepdim), inputs).unwrap();
        }
    }
}

/// 24 fixed values with no ties, the first `numel(shape)` of them (at most
/// 24) shaped `shape`: the logits and inputs of the nn ops' tests.
pub(crate) fn fixed(shape: &[usize]) -> Tensor {
    const V: [f64; 24] = [
        0.5, -1.0, 2.0, 1.5, 0.3, -0.7, 0.1, 0.9, -0.4, 1.1, -2.0, 0.6, 0.2, 0.4, -0.3, 1.7, -0.8,
        0.05, 1.2, -1.5, 0.75, 0.35, -0.25, 0.0,
    ];
    let n: usize = shape.iter().product();
    Tensor::from_vec(V[..n].to_vec(), shape).unwrap()
}

/// The normalisations' tests' affine weight over a last axis of 4.
pub(crate) fn norm_weight() -> Tensor {
    Tensor::from_vec(vec![1.0, 0.5, -1.5, 2.0], &[4]).unwrap()
}

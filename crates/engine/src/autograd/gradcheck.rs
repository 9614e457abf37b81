//! The shared finite-difference gradient checker: central differences in
//! f64 against what backward computes.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::base::error::{Error, Result};
use crate::core::graph::{Graph, Var};
use crate::tensor::{DType, Tensor};

/// Tolerances and step of [`gradcheck`].
#[derive(Clone, Copy, Debug)]
pub struct GradcheckOptions {
    /// Central-difference step.
    pub eps: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance.
    pub rtol: f64,
    /// Seed of the random weights that reduce a non-scalar output to a scalar.
    pub seed: u64,
}

impl Default for GradcheckOptions {
    fn default() -> Self {
        GradcheckOptions {
            eps: 1e-6,
            atol: 1e-5,
            rtol: 1e-4,
            seed: 0,
        }
    }
}

/// Checks the gradients of `f` at `inputs` (f64 tensors) against central
/// finite differences, with default tolerances.
///
/// Both backward paths are checked: the tensor-level fast path (compared
/// with finite differences) and the `Var`-level formulas (compared with the
/// fast path; a mismatch reports the Var-level value as `analytic` and the
/// fast-path value as `numeric`).
///
/// A non-scalar output is reduced to the scalar `sum(out * w)` with fixed
/// random weights `w`, so every output element's gradient path is checked
/// (a plain sum would hide errors that cancel).
///
/// ```
/// use retrograd::{gradcheck, Tensor};
/// let x = Tensor::from_vec(vec![0.5, -1.0, 2.0], &[3])?;
/// let y = Tensor::from_vec(vec![1.5], &[1])?;
/// gradcheck(|v| Ok((&v[0] * &v[1]).tanh()), &[x, y])?;
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn gradcheck<F>(f: F, inputs: &[Tensor]) -> Result<()>
where
    F: for<'g> Fn(&[Var<'g>]) -> Result<Var<'g>>,
{
    gradcheck_with(f, inputs, GradcheckOptions::default())
}

/// [`gradcheck`] with explicit options.
pub fn gradcheck_with<F>(f: F, inputs: &[Tensor], opts: GradcheckOptions) -> Result<()>
where
    F: for<'g> Fn(&[Var<'g>]) -> Result<Var<'g>>,
{
    for t in inputs {
        if t.dtype() != DType::F64 {
            return Err(Error::WrongDType {
                op: "gradcheck",
                expected: DType::F64,
                found: t.dtype(),
            });
        }
    }
    // Analytic gradients.
    let graph = Graph::new();
    let vars: Vec<Var<'_>> = inputs.iter().map(|t| graph.variable(t.clone())).collect();
    let out = f(&vars)?;
    let weights = weights_for(out.value(), opts.seed)?;
    let scalar = reduce_with(&out, &weights)?;
    let grads = scalar.backward()?;
    let analytic: Vec<Vec<f64>> = vars.iter().map(|v| grads.wrt(v).to_f64_vec()).collect();
    // The `Var`-level formulas (what create_graph differentiates) must agree
    // with the tensor-level fast path.
    let slow = scalar.backward_with_options(&crate::BackwardOptions::new().fast_path(false))?;
    for (i, (v, fast)) in vars.iter().zip(&analytic).enumerate() {
        for (j, (a, b)) in slow.wrt(v).to_f64_vec().iter().zip(fast).enumerate() {
            if (a - b).abs() > 1e-12 * (1.0 + b.abs()) {
                return Err(Error::GradCheck {
                    input: i,
                    index: j,
                    analytic: *a,
                    numeric: *b,
                });
            }
        }
    }

    // Numeric gradients, one element at a time.
    let eval = |values: &[Tensor]| -> Result<f64> {
        let g = Graph::new();
        let vs: Vec<Var<'_>> = values.iter().map(|t| g.variable(t.clone())).collect();
        let out = g.no_grad(|| f(&vs))?;
        reduce_with(&out, &weights)?.value().try_item()
    };
    let mut work: Vec<Tensor> = inputs.to_vec();
    for (i, input) in inputs.iter().enumerate() {
        let base = input.to_f64_vec();
        for j in 0..base.len() {
            let mut shifted = base.clone();
            shifted[j] = base[j] + opts.eps;
            work[i] = Tensor::from_slice(&shifted, input.shape())?;
            let plus = eval(&work)?;
            shifted[j] = base[j] - opts.eps;
            work[i] = Tensor::from_slice(&shifted, input.shape())?;
            let minus = eval(&work)?;
            work[i] = input.clone();
            let numeric = (plus - minus) / (2.0 * opts.eps);
            let a = analytic[i][j];
            if !within(a, numeric, &opts) {
                return Err(Error::GradCheck {
                    input: i,
                    index: j,
                    analytic: a,
                    numeric,
                });
            }
        }
    }
    Ok(())
}

fn weights_for(out: &Tensor, seed: u64) -> Result<Tensor> {
    if out.numel() == 1 {
        return Ok(Tensor::scalar_of(1.0, out.dtype()));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let w: Vec<f64> = (0..out.numel())
        .map(|_| rng.random_range(0.5..1.5))
        .collect();
    Tensor::from_f64_slice(&w, out.shape(), out.dtype())
}

fn reduce_with<'g>(out: &Var<'g>, weights: &Tensor) -> Result<Var<'g>> {
    if out.value().numel() == 1 && weights.is_scalar() {
        return Ok(if out.shape().is_empty() {
            out.clone()
        } else {
            out.sum()
        });
    }
    Ok(out.try_mul(&out.graph().constant(weights.clone()))?.sum())
}

/// Compares `jvp(f, primals, t)` with `(f(x + eps t) - f(x - eps t)) / 2 eps`
/// for a fixed pseudo-random tangent `t`.
pub(crate) fn central_difference_check<F>(f: &F, primals: &[Tensor]) -> Result<()>
where
    F: for<'g> Fn(&[Var<'g>]) -> Result<Var<'g>>,
{
    let opts = GradcheckOptions::default();
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed ^ 0x5eed);
    let mut tangents = Vec::with_capacity(primals.len());
    for p in primals {
        if p.dtype() != DType::F64 {
            return Err(Error::WrongDType {
                op: "jvpcheck",
                expected: DType::F64,
                found: p.dtype(),
            });
        }
        let t: Vec<f64> = (0..p.numel())
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        tangents.push(Tensor::from_slice(&t, p.shape())?);
    }
    let (_, analytic) = super::forward::jvp(f, primals, &tangents)?;
    let shifted = |sign: f64| -> Result<Tensor> {
        let xs: Vec<Tensor> = primals
            .iter()
            .zip(&tangents)
            .map(|(p, t)| {
                let v: Vec<f64> = p
                    .to_f64_vec()
                    .iter()
                    .zip(t.to_f64_vec())
                    .map(|(a, b)| a + sign * opts.eps * b)
                    .collect();
                Tensor::from_slice(&v, p.shape())
            })
            .collect::<Result<_>>()?;
        let g = Graph::new();
        let vs: Vec<Var<'_>> = xs.into_iter().map(|x| g.constant(x)).collect();
        Ok(f(&vs)?.value().clone())
    };
    let (plus, minus) = (shifted(1.0)?.to_f64_vec(), shifted(-1.0)?.to_f64_vec());
    matches_central_difference(&analytic.to_f64_vec(), &plus, &minus, &opts)
}

/// Checks each `analytic` element against `(plus - minus) / 2 eps`, the
/// central difference of values at `x ± eps v`: `Error::GradCheck` names
/// the first element outside the tolerances.
pub(crate) fn matches_central_difference(
    analytic: &[f64],
    plus: &[f64],
    minus: &[f64],
    opts: &GradcheckOptions,
) -> Result<()> {
    for (i, (a, (p, m))) in analytic.iter().zip(plus.iter().zip(minus)).enumerate() {
        let numeric = (p - m) / (2.0 * opts.eps);
        if !within(*a, numeric, opts) {
            return Err(Error::GradCheck {
                input: 0,
                index: i,
                analytic: *a,
                numeric,
            });
        }
    }
    Ok(())
}

/// `|analytic - numeric| <= atol + rtol |numeric|`; false if either is NaN.
fn within(analytic: f64, numeric: f64, opts: &GradcheckOptions) -> bool {
    (analytic - numeric).abs() <= opts.atol + opts.rtol * numeric.abs()
}

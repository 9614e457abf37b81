//! What the normalisations (`layer_norm`, `rms_norm`, `batch_norm`, `group_norm`)
//! share: the optional affine inputs that follow the input and any fixed
//! statistics ([`Affine`], each input's [`Role`]), the `eps` check, and the
//! batching rules of the normalisations over an example's trailing dims.

use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, GradInputs, OpAttributes};
use crate::ops::batching::{materialize, with_example_rank};
use crate::ops::{Differentiable, Node, StructuredOp};
use crate::tensor::Tensor;

/// Which affine parameters follow the input (and, in eval-mode batch norm,
/// the running statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Affine {
    /// Inferred from the input count: none, weight, weight and bias.
    #[default]
    FromInputs,
    /// As given.
    Given { weight: bool, bias: bool },
}

/// What one input of a normalisation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The input normalised.
    Input,
    /// A fixed statistic (eval-mode batch norm's running mean or variance).
    Stat,
    /// The weight.
    Weight,
    /// The bias.
    Bias,
}

impl Affine {
    /// `attrs` with `weight` and `bias` listed when they were given (an op
    /// that infers them from its input count lists neither).
    pub(crate) fn attributes(self, attrs: OpAttributes) -> OpAttributes {
        match self {
            Affine::FromInputs => attrs,
            Affine::Given { weight, bias } => attrs.bool("weight", weight).bool("bias", bias),
        }
    }

    /// `(has_weight, has_bias)` for `n_inputs` inputs, `fixed` of them
    /// before the affine ones.
    pub(crate) fn resolve(self, op: &str, fixed: usize, n_inputs: usize) -> Result<(bool, bool)> {
        let extra = n_inputs.saturating_sub(fixed);
        let (w, b) = match self {
            Affine::FromInputs => (extra >= 1, extra == 2),
            Affine::Given { weight, bias } => (weight, bias),
        };
        let expected = fixed + usize::from(w) + usize::from(b);
        if n_inputs != expected || (self == Affine::FromInputs && extra > 2) {
            return Err(Error::Arity {
                op: op.to_string(),
                expected: expected.min(fixed + 2),
                got: n_inputs,
            });
        }
        Ok((w, b))
    }

    /// The weight and bias among `inputs` (of any type: values, tangents).
    pub(crate) fn split<'a, V>(
        self,
        op: &str,
        fixed: usize,
        inputs: &'a [V],
    ) -> Result<(Option<&'a V>, Option<&'a V>)> {
        let (has_w, has_b) = self.resolve(op, fixed, inputs.len())?;
        let last = inputs.len().saturating_sub(1);
        Ok((has_w.then(|| &inputs[fixed]), has_b.then(|| &inputs[last])))
    }

    /// What input `i` of `n_inputs` is.
    pub(crate) fn role(self, op: &str, fixed: usize, n_inputs: usize, i: usize) -> Result<Role> {
        let (has_w, _) = self.resolve(op, fixed, n_inputs)?;
        Ok(match i {
            0 => Role::Input,
            i if i < fixed => Role::Stat,
            i if i == fixed && has_w => Role::Weight,
            _ => Role::Bias,
        })
    }
}

/// What the normalisations' backward ops (`layer_norm_backward`,
/// `rms_norm_backward`, `batch_norm_backward`) share, inside their `impl
/// StructuredOp`: the inputs `g`, `x` and, when `has_weight`, the weight;
/// settings only; the output, `J(x) (g w)` with `J` symmetric, is linear
/// in `g` and in the weight, so the gradients and the tangent through `x`
/// follow from the op's [`NormBackward`] parts.
macro_rules! norm_backward_rules {
    () => {
        const INPUTS: &'static [&'static str] = &["grad", "input", "weight"];
        const HOLDS: crate::Holds = crate::Holds::Settings;
        const LINEAR: &'static [usize] = &[0, 2];
        fn arity(&self) -> Option<usize> {
            Some(2 + usize::from(self.has_weight))
        }
        fn grads<'g>(&self, g2: &Var<'g>, n: Node<'_, 'g>) -> Result<GradInputs<'g>> {
            super::normalization::norm_backward_grads(self, g2, n)
        }
        fn tangent<'g>(&self, _: usize, tx: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            super::normalization::norm_backward_tangent(self, tx, n)
        }
    };
}
pub(crate) use norm_backward_rules;

/// The parts of a normalisation's backward op `out = J(x) (g w)` (inputs
/// `g`, `x` and an optional weight `w`, `J` symmetric) from which
/// [`norm_backward_rules!`] derives its gradients and tangent.
pub(crate) trait NormBackward {
    /// `J(x) t`: the op without a weight, applied to `t`.
    fn project<'g>(&self, t: &Var<'g>, x: &Var<'g>) -> Result<Var<'g>>;
    /// The derivative of `J(x) a` in `x`, applied to `t`.
    fn curvature<'g>(&self, t: &Var<'g>, a: &Var<'g>, x: &Var<'g>) -> Result<Var<'g>>;
    /// `v` summed to the weight's shape.
    fn reduce<'g>(&self, v: &Var<'g>, x: &Var<'g>) -> Result<Var<'g>>;
    /// `v` times the weight `w`.
    fn weigh<'g>(&self, v: &Var<'g>, w: &Var<'g>) -> Result<Var<'g>> {
        v.try_mul(w)
    }
}

/// [`NormBackward`] for a normalisation over the trailing
/// `normalized_shape` (layer and RMS norm): `project(t, x, shape, eps)` and
/// `curvature(t, a, x, shape, eps)` are the op file's; the weight's
/// gradient sums to that shape.
macro_rules! trailing_norm_backward {
    ($op:ty, $project:path, $curvature:path) => {
        impl super::normalization::NormBackward for $op {
            fn project<'g>(&self, t: &Var<'g>, x: &Var<'g>) -> Result<Var<'g>> {
                $project(
                    t,
                    x,
                    &shape_or_last(&self.normalized_shape, x.value()),
                    self.eps,
                )
            }
            fn curvature<'g>(&self, t: &Var<'g>, a: &Var<'g>, x: &Var<'g>) -> Result<Var<'g>> {
                let shape = shape_or_last(&self.normalized_shape, x.value());
                $curvature(t, a, x, &shape, self.eps)
            }
            fn reduce<'g>(&self, v: &Var<'g>, x: &Var<'g>) -> Result<Var<'g>> {
                v.sum_to_size(&shape_or_last(&self.normalized_shape, x.value()))
            }
        }
    };
}
pub(crate) use trailing_norm_backward;

/// `a = g w` for a backward op's node (`g` alone without a weight).
fn weighted<'g, O: NormBackward>(op: &O, v: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
    match n.inputs.get(2) {
        Some(w) => op.weigh(v, w),
        None => Ok(v.clone()),
    }
}

/// The gradients of a normalisation's backward op: with `q = J g2`,
/// `d/dg = q w`, `d/dx` the curvature at `a = g w` applied to `g2`, and
/// `d/dw = Σ q g` over the weight's shape.
pub(crate) fn norm_backward_grads<'g, O: NormBackward>(
    op: &O,
    g2: &Var<'g>,
    n: Node<'_, 'g>,
) -> Result<GradInputs<'g>> {
    let (g, x, w) = (n.x(0), n.x(1), n.inputs.get(2));
    let q = op.project(g2, x)?;
    let dg = g.requires_grad().then(|| weighted(op, &q, n)).transpose()?;
    let dx = x
        .requires_grad()
        .then(|| op.curvature(g2, &weighted(op, g, n)?, x))
        .transpose()?;
    let dw = w.filter(|w| w.requires_grad());
    let dw = dw.map(|_| op.reduce(&q.try_mul(g)?, x)).transpose()?;
    Ok(n.grads([dg, dx, dw]))
}

/// The tangent of a normalisation's backward op through `x` (the others
/// are linear): the curvature at `a = g w` applied to `tx`.
pub(crate) fn norm_backward_tangent<'g, O: NormBackward>(
    op: &O,
    tx: &Var<'g>,
    n: Node<'_, 'g>,
) -> Result<Var<'g>> {
    op.curvature(tx, &weighted(op, n.x(0), n)?, n.x(1))
}

/// Records the normalisation `make` builds (given which affine inputs
/// come) on `x`, followed by the weight and the bias that are given.
pub(crate) fn record_affine<'g, O: StructuredOp>(
    x: &Var<'g>,
    weight: Option<&Var<'g>>,
    bias: Option<&Var<'g>>,
    make: impl FnOnce(Affine) -> O,
) -> Result<Var<'g>> {
    let op = make(Affine::Given {
        weight: weight.is_some(),
        bias: bias.is_some(),
    });
    let mut inputs = vec![x];
    inputs.extend(weight);
    inputs.extend(bias);
    x.graph().record(op, &inputs)
}

/// The batching rule of a normalisation over an example's trailing dims
/// (`layer_norm`, `rms_norm`): its rows are the example's leading axes, so
/// the batch is one more of them and the op itself (`op`, on every input as
/// given) serves while the affine parameters are shared. A weight or bias
/// that differs between examples instead scales and shifts the unweighted
/// output (`plain`, on the input alone), aligned so that each example's
/// parameters meet its own rows.
pub(crate) fn batch_trailing<'g, O: Differentiable + Clone, P: Differentiable + Clone>(
    op: &O,
    plain: &P,
    x: &Batched<'g>,
    weight: Option<&Batched<'g>>,
    bias: Option<&Batched<'g>>,
) -> Result<Batched<'g>> {
    let params = weight.into_iter().chain(bias);
    let batched = x.batched || params.clone().any(|p| p.batched);
    if !params.clone().any(|p| p.batched) {
        let inputs: Vec<&Var<'g>> = std::iter::once(&x.value)
            .chain(params.map(|p| &p.value))
            .collect();
        let out = x.value.graph().record(op.clone(), &inputs)?;
        return Ok(Batched {
            value: out,
            batched,
        });
    }
    let rank = x.example_rank();
    let mut out = x.value.graph().record(plain.clone(), &[&x.value])?;
    if let Some(w) = weight {
        out = out.try_mul(&with_example_rank(w, rank)?)?;
    }
    if let Some(b) = bias {
        out = out.try_add(&with_example_rank(b, rank)?)?;
    }
    Ok(Batched {
        value: out,
        batched,
    })
}

/// The batching rule of a trailing normalisation's backward op
/// (`layer_norm_backward`, `rms_norm_backward`: inputs `g`, `x` and an
/// optional weight, output `J(x) (g w)` per row): the op itself on `g` and
/// `x` with the batch as one more leading axis; a weight that differs
/// between examples is folded into `g` first (`a = g w`, aligned per
/// example) and `unweighted` applied to `a`.
pub(crate) fn batch_trailing_backward<'g, O: Differentiable + Clone>(
    op: &O,
    unweighted: &O,
    inputs: &[Batched<'g>],
    ctx: &BatchContext,
) -> Result<Batched<'g>> {
    let (g, x) = (&inputs[0], &inputs[1]);
    let xb = materialize(x, ctx)?;
    let graph = xb.graph();
    let out = match inputs.get(2) {
        Some(w) if w.batched => {
            let rank = x.example_rank();
            // Batched, as `w` is.
            let a = with_example_rank(g, rank)?.try_mul(&with_example_rank(w, rank)?)?;
            graph.record(unweighted.clone(), &[&a, &xb])?
        }
        w => {
            let gb = materialize(g, ctx)?;
            let args: Vec<&Var<'g>> = [&gb, &xb].into_iter().chain(w.map(|w| &w.value)).collect();
            graph.record(op.clone(), &args)?
        }
    };
    Ok(Batched::along_batch(out))
}

/// The input normalised: the first of `inputs` (an arity error for none).
pub(crate) fn first_input<'a>(op: &str, inputs: &[&'a Tensor]) -> Result<&'a Tensor> {
    inputs.first().copied().ok_or(Error::Arity {
        op: op.to_string(),
        expected: 1,
        got: 0,
    })
}

/// `eps` must be finite and >= 0.
pub(crate) fn check_eps(op: &'static str, eps: f64) -> Result<()> {
    if eps.is_finite() && eps >= 0.0 {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!("eps must be finite and >= 0, got {eps}"),
        ))
    }
}

/// Sample inputs of the layer-norm and RMS-norm input-gradient ops
/// (`OpFacts::sample_inputs`): a gradient and an input of `[2, 3]`, and a
/// weight of `[3]`.
pub(crate) fn norm_backward_samples(seed: u64) -> Vec<Tensor> {
    vec![
        super::batch_norm::sample(&[2, 3], seed + 2, 0.0, 1.0),
        super::batch_norm::sample(&[2, 3], seed, 0.3, 1.0),
        super::batch_norm::sample(&[3], seed + 5, 1.0, 0.5),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_follow_the_inputs() {
        let given = Affine::Given {
            weight: false,
            bias: true,
        };
        assert_eq!(given.role("op", 1, 2, 1).unwrap(), Role::Bias);
        assert_eq!(Affine::FromInputs.role("op", 3, 5, 2).unwrap(), Role::Stat);
        assert_eq!(
            Affine::FromInputs.role("op", 3, 5, 3).unwrap(),
            Role::Weight
        );
        assert_eq!(
            Affine::FromInputs.role("op", 1, 2, 1).unwrap(),
            Role::Weight
        );
        assert!(Affine::FromInputs.role("op", 1, 4, 0).is_err());
        assert!(check_eps("op", f64::NAN).is_err() && check_eps("op", 0.0).is_ok());
    }
}

#[cfg(test)]
mod vmap_tests {
    use super::super::batch_norm::{sample, BatchNorm};
    use super::super::batch_norm_running::BatchNormRunningStats;
    use super::super::support::tests::vmap_agrees;
    use crate::ops::Differentiable;
    use crate::{BatchNormArgs, Graph, Result, Tensor, Var};

    fn record<'s>(op: &(impl Differentiable + Clone), v: &[Var<'s>]) -> Result<Var<'s>> {
        let refs: Vec<&Var<'s>> = v.iter().collect();
        v[0].graph().record(op.clone(), &refs)
    }

    fn examples(shapes: &[(&[usize], f64, f64)]) -> Vec<Vec<Tensor>> {
        (0..3)
            .map(|s| {
                shapes
                    .iter()
                    .enumerate()
                    .map(|(i, &(shape, offset, scale))| {
                        sample(shape, s + 4 * i as u64, offset, scale)
                    })
                    .collect()
            })
            .collect()
    }

    // The configurations the registry sweep does not reach: eval-mode batch
    // norm (each example its own running statistics), training without
    // affine parameters, the registry's layer, RMS and group norms.
    #[test]
    fn normalisations_batch_example_by_example() {
        let eval = examples(&[
            (&[3, 2, 4], 0.0, 2.0),
            (&[2], 0.1, 0.5),
            (&[2], 1.0, 0.5),
            (&[2], 1.0, 0.5),
            (&[2], 0.0, 0.5),
        ]);
        let op = BatchNorm::eval_for_tests(1e-5);
        for i in 0..5 {
            let mut batched = [false; 5];
            batched[i] = true;
            vmap_agrees(|v| record(&op, v), &eval, &batched);
        }
        vmap_agrees(|v| record(&op, v), &eval, &[true; 5]);
        let x = examples(&[(&[3, 2, 4], 0.0, 2.0)]);
        vmap_agrees(
            |v| Ok(v[0].try_batch_norm(&BatchNormArgs::new())?.output),
            &x,
            &[true],
        );
        vmap_agrees(|v| v[0].try_group_norm(1, None, None, 1e-5), &x, &[true]);
        let rows = examples(&[(&[2, 4], 0.3, 1.0), (&[4], 1.0, 0.5), (&[4], 0.0, 0.5)]);
        for batched in [[true; 3], [false, true, false], [false, false, true]] {
            vmap_agrees(
                |v| v[0].graph().apply("layer_norm", &[&v[0], &v[1], &v[2]]),
                &rows,
                &batched,
            );
        }
        vmap_agrees(
            |v| v[0].graph().apply("rms_norm", &[&v[0]]),
            &rows,
            &[true; 3],
        );
    }

    // A cumulative average with one count for every example batches; one
    // count per example would need one momentum each, and is refused.
    #[test]
    fn running_statistics_with_a_cumulative_average() {
        let mut inputs = examples(&[(&[3, 2, 4], 0.0, 2.0), (&[2], 0.1, 0.5), (&[2], 1.0, 0.5)]);
        for (s, e) in inputs.iter_mut().enumerate() {
            e.push(Tensor::scalar(2.0 + s as f64));
        }
        let op = BatchNormRunningStats::new(None);
        vmap_agrees(|v| record(&op, v), &inputs, &[true, true, false, false]);
        let g = Graph::new();
        let stacked = |i: usize| {
            let vars: Vec<Var<'_>> = inputs.iter().map(|e| g.constant(e[i].clone())).collect();
            let refs: Vec<&Var<'_>> = vars.iter().collect();
            Var::try_stack(&refs, 0).unwrap()
        };
        let all: Vec<Var<'_>> = (0..4).map(stacked).collect();
        let refs: Vec<&Var<'_>> = all.iter().collect();
        let err = crate::autograd::VMap::new()
            .try_call(|v| Ok(vec![record(&op, v)?]), &refs)
            .unwrap_err();
        assert!(
            matches!(&err, crate::Error::Unsupported { op, .. } if op == "batch_norm_running_stats"),
            "{err}"
        );
    }
}

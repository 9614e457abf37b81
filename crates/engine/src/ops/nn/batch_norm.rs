//! `batch_norm` over `[N, C, *]` (statistics per channel over every other
//! dim), PyTorch's `F.batch_norm`, in one fused kernel for both modes.
//!
//! Training mode normalises with the batch mean and biased variance; its
//! gradients come from the fused ops of `batch_norm_backward.rs` (input and
//! weight) and a per-channel sum (bias). The running statistics cannot be
//! updated in place (tensors are immutable and the op layer knows no
//! module buffers), so [`Var::try_batch_norm`] returns them updated, from
//! the moments of the same forward pass, exactly as PyTorch updates its
//! buffers. Eval mode is a per-channel affine map of the input with the
//! running statistics as inputs; its backward and tangent are short `Var`
//! formulas (so every order of derivative exists).

use std::sync::{Arc, Mutex};

use crate::base::fallible::fallible;
use smallvec::smallvec;

use super::batch_norm_backward::{
    channel_sum, channel_view, channels_of, from_channels, into_channels, project,
    BatchNormBackward, BatchNormWeightBackward,
};
use super::normalization::{check_eps, first_input, Affine, Role};
use crate::base::error::{check_dtypes, Error, Result};
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, GradInputs, OpAttributes};
use crate::kernels::nn::batch_norm::{self as kernel, Planes};
use crate::ops::rule::OpFacts;
use crate::ops::{grads_per_input, Node, OpRegistry, StructuredOp};
use crate::tensor::{Dims, Tensor};

/// Per channel `(mean, Σ (x - mean)²)` of a training forward, handed back
/// to [`Var::try_batch_norm`] (a side output of the one fused pass).
type MomentsSlot = Arc<Mutex<Option<Vec<(f64, f64)>>>>;

/// Batch normalisation, PyTorch's `F.batch_norm`: per channel `c` of an
/// `[N, C, *]` input, `(x - mean_c) / sqrt(var_c + eps) * weight_c + bias_c`.
/// Training mode: inputs `x`, then the weight and/or bias if present (each
/// `[C]`); the statistics are the batch's (biased variance). Eval mode:
/// inputs `x`, `running_mean`, `running_var`, then weight and/or bias. The
/// registry holds it in training mode with `eps = 1e-5` and the affine
/// parameters inferred from the input count (2: weight, 3: weight and bias).
#[derive(Clone, Debug)]
pub struct BatchNorm {
    training: bool,
    eps: f64,
    affine: Affine,
    moments: Option<MomentsSlot>,
}

impl Default for BatchNorm {
    fn default() -> Self {
        BatchNorm {
            training: true,
            eps: 1e-5,
            affine: Affine::FromInputs,
            moments: None,
        }
    }
}

/// The `[N, C, S]` layout of an input of rank >= 2, naming `op` and the shape otherwise.
pub(super) fn planes(op: &'static str, x: &Tensor) -> Result<Planes> {
    let shape = x.shape();
    if shape.len() < 2 {
        return Err(Error::invalid(
            op,
            format!("expected an input of rank >= 2 ([N, C, *]), got shape {shape:?}"),
        ));
    }
    Ok(Planes {
        n: shape[0],
        c: shape[1],
        s: shape[2..].iter().product(),
    })
}

/// Checks a per-channel tensor (`what`: weight, bias, running_mean...)
/// against `x`: its dtype, and shape `[C]`.
/// [`check_channel_param`] for the weight and the bias that are given.
pub(super) fn check_channel_affine(
    op: &'static str,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    x: &Tensor,
) -> Result<()> {
    for (what, p) in [("weight", weight), ("bias", bias)] {
        if let Some(p) = p {
            check_channel_param(op, what, p, x)?;
        }
    }
    Ok(())
}

pub(super) fn check_channel_param(
    op: &'static str,
    what: &str,
    p: &Tensor,
    x: &Tensor,
) -> Result<()> {
    check_dtypes(op, x.dtype(), p.dtype())?;
    let c = x.shape()[1];
    if p.shape() != [c] {
        return Err(Error::invalid(
            op,
            format!(
                "{what} must have shape [{c}] (one value per channel of the input {:?}), got {:?}",
                x.shape(),
                p.shape()
            ),
        ));
    }
    Ok(())
}

impl BatchNorm {
    /// Training mode without affine parameters: `x̂` itself.
    pub(super) fn plain(eps: f64) -> Self {
        BatchNorm {
            training: true,
            eps,
            affine: Affine::Given {
                weight: false,
                bias: false,
            },
            moments: None,
        }
    }

    /// Eval mode with weight and bias (inputs `x`, mean, var, weight, bias).
    #[cfg(test)]
    pub(super) fn eval_for_tests(eps: f64) -> Self {
        BatchNorm {
            training: false,
            eps,
            affine: Affine::FromInputs,
            moments: None,
        }
    }

    /// The running statistics' inputs before the affine ones: 0 or 2.
    fn fixed(&self) -> usize {
        if self.training {
            1
        } else {
            3
        }
    }

    /// The weight and bias among `inputs` (whatever their type).
    fn affine_of<'a, V>(&self, inputs: &'a [V]) -> Result<(Option<&'a V>, Option<&'a V>)> {
        self.affine.split("batch_norm", self.fixed(), inputs)
    }

    /// What input `i` of a node is.
    fn role(&self, i: usize, n: Node<'_, '_>) -> Result<Role> {
        self.affine
            .role("batch_norm", self.fixed(), n.inputs.len(), i)
    }

    /// `rstd` and `rstd w` (or `rstd`) per channel, from the running variance.
    fn eval_scale<'g>(&self, n: Node<'_, 'g>) -> Result<(Var<'g>, Var<'g>)> {
        let rstd = n.x(2).add_scalar(self.eps).rsqrt();
        let scale = match self.affine_of(n.inputs)?.0 {
            Some(w) => rstd.try_mul(w)?,
            None => rstd.clone(),
        };
        Ok((rstd, scale))
    }

    fn eval_backward<'g>(&self, g: &Var<'g>, inputs: &[Var<'g>]) -> Result<GradInputs<'g>> {
        let (x, rm, rv) = (&inputs[0], &inputs[1], &inputs[2]);
        let (w, b) = self.affine_of(inputs)?;
        let rank = x.shape().len();
        let rstd = rv.add_scalar(self.eps).rsqrt();
        let scale = match w {
            Some(w) => rstd.try_mul(w)?,
            None => rstd.clone(),
        };
        let dx = x
            .requires_grad()
            .then(|| g.try_mul(&channel_view(&scale, rank)?))
            .transpose()?;
        let rg = |v: Option<&Var<'g>>| v.is_some_and(|v| v.requires_grad());
        // Σ g and Σ g (x - running_mean) per channel.
        let s1 = (rm.requires_grad() || rg(b))
            .then(|| channel_sum(g))
            .transpose()?;
        let sx = (rv.requires_grad() || rg(w))
            .then(|| channel_sum(&g.try_mul(&x.try_sub(&channel_view(rm, rank)?)?)?))
            .transpose()?;
        let drm = match (&s1, rm.requires_grad()) {
            (Some(s1), true) => Some(-(s1.try_mul(&scale)?)),
            _ => None,
        };
        let drv = match (&sx, rv.requires_grad()) {
            (Some(sx), true) => Some(
                sx.try_mul(&scale)?
                    .try_mul(&rstd.try_mul(&rstd)?)?
                    .mul_scalar(-0.5),
            ),
            _ => None,
        };
        let mut grads: GradInputs<'g> = smallvec![dx, drm, drv];
        if w.is_some() {
            grads.push(match (&sx, rg(w)) {
                (Some(sx), true) => Some(sx.try_mul(&rstd)?),
                _ => None,
            });
        }
        if b.is_some() {
            grads.push(if rg(b) { s1 } else { None });
        }
        Ok(grads)
    }

    /// Eval mode: `y = (x - rm) rstd w + b`, so `ty` per input is `tx
    /// scale`, `-trm scale`, `(x - rm) w d rstd` with `d rstd = -rstd³ trv
    /// / 2`, `(x - rm) rstd tw`, `tb`.
    fn eval_tangent<'g>(&self, i: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (x, rm, rank) = (n.x(0), n.x(1), n.x(0).shape().len());
        let (rstd, scale) = self.eval_scale(n)?;
        let centred = || x.try_sub(&channel_view(rm, rank)?);
        match (i, self.role(i, n)?) {
            (_, Role::Input) => t.try_mul(&channel_view(&scale, rank)?),
            (1, _) => Ok(-(channel_view(t, rank)?.try_mul(&channel_view(&scale, rank)?)?)),
            (_, Role::Stat) => {
                let d = t
                    .try_mul(&rstd.try_mul(&rstd)?.try_mul(&rstd)?)?
                    .mul_scalar(-0.5);
                let d = match self.affine_of(n.inputs)?.0 {
                    Some(w) => d.try_mul(w)?,
                    None => d,
                };
                centred()?.try_mul(&channel_view(&d, rank)?)
            }
            (_, Role::Weight) => centred()?.try_mul(&channel_view(&t.try_mul(&rstd)?, rank)?),
            (_, Role::Bias) => channel_view(t, rank),
        }
    }
}

impl StructuredOp for BatchNorm {
    const NAME: &'static str = "batch_norm";
    const INPUTS: &'static [&'static str] =
        &["input", "running_mean", "running_var", "weight", "bias"];
    /// Training mode: the input, then the weight and/or bias; eval mode:
    /// the input, the running mean and variance, then the weight and/or bias.
    fn arity(&self) -> Option<usize> {
        None
    }
    fn attributes(&self) -> OpAttributes {
        self.affine.attributes(
            OpAttributes::new()
                .bool("training", self.training)
                .float("eps", self.eps),
        )
    }
    const HOLDS: crate::Holds = crate::Holds::Settings;
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        const OP: &str = "batch_norm";
        let x = first_input(OP, inputs)?;
        let (w, b) = self.affine_of(inputs)?;
        check_eps(OP, self.eps)?;
        let p = planes(OP, x)?;
        if !self.training {
            check_channel_param(OP, "running_mean", inputs[1], x)?;
            check_channel_param(OP, "running_var", inputs[2], x)?;
        }
        check_channel_affine(OP, w.copied(), b.copied(), x)?;
        if self.training && p.per_channel() == 1 {
            return Err(Error::invalid(
                OP,
                format!(
                    "expected more than 1 value per channel when training, got input of shape {:?}",
                    x.shape()
                ),
            ));
        }
        crate::with_dtype!(OP, x.dtype(), T => {
            let xs = x.as_slice_of::<T>();
            let stats = if self.training {
                let moments = kernel::channel_moments(xs, p);
                let stats = kernel::batch_stats(&moments, p.per_channel(), self.eps);
                if let Some(slot) = &self.moments {
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(moments);
                }
                stats
            } else {
                let (rm, rv) = (inputs[1].to_f64_vec(), inputs[2].to_f64_vec());
                rm.iter().zip(&rv).map(|(&m, &v)| (m, 1.0 / (v + self.eps).sqrt())).collect()
            };
            let (ws, bs) = (w.map(|t| t.as_slice_of::<T>()), b.map(|t| t.as_slice_of::<T>()));
            Ok(Tensor::build::<T>(Dims::from_slice(x.shape()), |out| kernel::normalize(xs, p, &stats, |_, c| c, ws, bs, out)))
        })
    }
    fn grads<'g>(&self, g: &Var<'g>, n: Node<'_, 'g>) -> Result<GradInputs<'g>> {
        if self.training {
            grads_per_input(self, g, n)
        } else {
            self.eval_backward(g, n.inputs)
        }
    }
    /// Training mode (eval mode's gradients share their sums: `grads`).
    fn grad<'g>(&self, i: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let x = n.x(0);
        let (w, _) = self.affine_of(n.inputs)?;
        match self.role(i, n)? {
            Role::Input => {
                let op = BatchNormBackward {
                    eps: self.eps,
                    has_weight: w.is_some(),
                };
                let args: Vec<&Var<'g>> = [g, x].into_iter().chain(w).collect();
                g.graph().record(op, &args)
            }
            Role::Weight => g
                .graph()
                .record(BatchNormWeightBackward { eps: self.eps }, &[g, x]),
            Role::Bias | Role::Stat => channel_sum(g),
        }
    }
    fn tangent<'g>(&self, i: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        if !self.training {
            return self.eval_tangent(i, t, n);
        }
        let (x, rank) = (n.x(0), n.x(0).shape().len());
        match self.role(i, n)? {
            Role::Input => {
                let d = project(t, x, self.eps)?;
                match self.affine_of(n.inputs)?.0 {
                    Some(w) => d.try_mul(&channel_view(w, rank)?),
                    None => Ok(d),
                }
            }
            Role::Weight => {
                let xhat = x.graph().record(BatchNorm::plain(self.eps), &[x])?;
                xhat.try_mul(&channel_view(t, rank)?)
            }
            Role::Bias | Role::Stat => channel_view(t, rank),
        }
    }
    /// Each example's channels as channels of one batch norm
    /// ([`into_channels`]): training mode normalises each example with its
    /// own statistics (as `torch.func` does), eval mode maps each with its
    /// own running statistics and affine parameters. The statistics are not
    /// handed back to [`Var::try_batch_norm`] (they are per example here).
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let input = into_channels(&x[0], ctx)?;
        let rest = x[1..]
            .iter()
            .map(|p| channels_of(p, ctx))
            .collect::<Result<Vec<_>>>()?;
        let args: Vec<&Var<'g>> = std::iter::once(&input).chain(&rest).collect();
        let op = BatchNorm {
            moments: None,
            ..self.clone()
        };
        from_channels(&input.graph().record(op, &args)?, ctx.size)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(Arc::new(BatchNorm {
                affine: Affine::Given {
                    weight: true,
                    bias: true,
                },
                ..BatchNorm::default()
            })),
            sample_inputs: Some(|seed| {
                vec![
                    sample(&[3, 2, 4], seed, 0.0, 2.0),
                    sample(&[2], seed + 7, 1.0, 0.5),
                    sample(&[2], seed + 11, 0.0, 0.5),
                ]
            }),
            ..OpFacts::opaque(self.arity())
        }
    }
}

/// A deterministic f64 tensor `offset + scale * sin(0.37 i + 1.3 seed + 0.1)`
/// (sample inputs of the normalisation ops: distinct, smooth, no RNG).
pub(super) fn sample(shape: &[usize], seed: u64, offset: f64, scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| offset + scale * (0.37 * i as f64 + 1.3 * seed as f64 + 0.1).sin())
        .collect();
    Tensor::from_vec(v, shape).expect("a valid shape")
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(BatchNorm::default());
}

/// The arguments of [`Var::try_batch_norm`], PyTorch's `F.batch_norm`
/// arguments: optional affine `weight` and `bias` (`[C]`), optional
/// running statistics (`[C]`, required in eval mode), `training` (default
/// true), `momentum` (default 0.1: the factor of the running-statistics
/// update; PyTorch's `momentum=None`, a cumulative average, is this factor
/// set to `1 / num_batches_tracked` by the caller, as `nn::BatchNorm2d`
/// does) and `eps` (default 1e-5).
#[derive(Clone, Copy, Debug)]
pub struct BatchNormArgs<'a, 'g> {
    /// The per-channel scale, if any.
    pub weight: Option<&'a Var<'g>>,
    /// The per-channel shift, if any.
    pub bias: Option<&'a Var<'g>>,
    /// The running mean (`[C]`); required in eval mode.
    pub running_mean: Option<&'a Tensor>,
    /// The running (unbiased) variance (`[C]`); required in eval mode.
    pub running_var: Option<&'a Tensor>,
    /// Batch statistics (true) or the running ones (false).
    pub training: bool,
    /// The running-statistics update factor, in `[0, 1]`.
    pub momentum: f64,
    /// Added to the variance inside the square root.
    pub eps: f64,
}

impl Default for BatchNormArgs<'_, '_> {
    fn default() -> Self {
        BatchNormArgs {
            weight: None,
            bias: None,
            running_mean: None,
            running_var: None,
            training: true,
            momentum: 0.1,
            eps: 1e-5,
        }
    }
}

impl<'a, 'g> BatchNormArgs<'a, 'g> {
    /// Training mode, no affine parameters, no running statistics, momentum 0.1, eps 1e-5.
    pub fn new() -> Self {
        Self::default()
    }
    /// With a per-channel scale.
    pub fn weight(mut self, weight: &'a Var<'g>) -> Self {
        self.weight = Some(weight);
        self
    }
    /// With a per-channel shift.
    pub fn bias(mut self, bias: &'a Var<'g>) -> Self {
        self.bias = Some(bias);
        self
    }
    /// With running statistics (updated in training mode, used in eval mode).
    pub fn running(mut self, mean: &'a Tensor, var: &'a Tensor) -> Self {
        self.running_mean = Some(mean);
        self.running_var = Some(var);
        self
    }
    /// Training (batch statistics) or eval (running statistics) mode.
    pub fn training(mut self, training: bool) -> Self {
        self.training = training;
        self
    }
    /// The running-statistics update factor.
    pub fn momentum(mut self, momentum: f64) -> Self {
        self.momentum = momentum;
        self
    }
    /// The variance offset.
    pub fn eps(mut self, eps: f64) -> Self {
        self.eps = eps;
        self
    }
}

/// What [`Var::try_batch_norm`] returns: the output, and in training mode
/// the batch statistics and the running statistics updated from them.
#[derive(Clone, Debug)]
pub struct BatchNormOutput<'g> {
    /// The normalised input.
    pub output: Var<'g>,
    /// Training mode: the batch mean per channel (`[C]`, the input's dtype).
    pub batch_mean: Option<Tensor>,
    /// Training mode: the **unbiased** batch variance per channel (what
    /// PyTorch folds into `running_var`; the normalisation used the biased one).
    pub batch_var: Option<Tensor>,
    /// Training mode with running statistics given:
    /// `(1 - momentum) * running_mean + momentum * batch_mean`.
    pub running_mean: Option<Tensor>,
    /// Training mode with running statistics given:
    /// `(1 - momentum) * running_var + momentum * batch_var`.
    pub running_var: Option<Tensor>,
}

/// `momentum * batch + (1 - momentum) * running` per channel, in f64 (PyTorch's order).
fn blend(running: &Tensor, batch: &[f64], momentum: f64) -> Result<Tensor> {
    let v = blended(running, batch, momentum);
    Tensor::from_f64_slice(&v, running.shape(), running.dtype())
}

/// [`blend`]'s values, before rounding to the running statistic's dtype
/// (shared with `batch_norm_running_stats`, so a compiled step's running
/// statistics are the eager step's bits).
pub(super) fn blended(running: &Tensor, batch: &[f64], momentum: f64) -> Vec<f64> {
    running
        .to_f64_vec()
        .iter()
        .zip(batch)
        .map(|(&r, &b)| momentum * b + (1.0 - momentum) * r)
        .collect()
}

/// The batch mean and the unbiased batch variance per channel, from the
/// moments of `per_channel` values each.
pub(super) fn batch_mean_var(moments: &[(f64, f64)], per_channel: usize) -> (Vec<f64>, Vec<f64>) {
    let mean = moments.iter().map(|&(mean, _)| mean).collect();
    let var = moments
        .iter()
        .map(|&(_, m2)| m2 / (per_channel as f64 - 1.0))
        .collect();
    (mean, var)
}

impl<'g> Var<'g> {
    fallible! {
        /// Batch normalisation of an `[N, C, *]` input (statistics per
        /// channel over every other dim): PyTorch's `F.batch_norm(x,
        /// running_mean, running_var, weight, bias, training, momentum, eps)`,
        /// except that the running statistics come back updated in the
        /// output instead of being written in place.
        ///
        /// Training mode normalises with the batch mean and biased variance,
        /// and returns the batch mean, the unbiased batch variance and, if
        /// running statistics were given, `momentum * batch + (1 - momentum)
        /// * running` for each. Eval mode normalises with the running
        /// statistics (required).
        ///
        /// Errors (naming `batch_norm` and the shapes): an input of rank < 2,
        /// a weight, bias or running statistic not of shape `[C]` or of
        /// another dtype, a negative or non-finite `eps`, a momentum outside
        /// `[0, 1]`, eval mode without running statistics, and training with
        /// one value per channel.
        ///
        /// ```
        /// use retrograd::{DType, Graph, Tensor, BatchNormArgs};
        /// let g = Graph::new();
        /// // [N = 2, C = 2]: channel 0 holds 1 and 3, channel 1 holds 2 and 6.
        /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 6.0], &[2, 2])?);
        /// let (rm, rv) = (Tensor::zeros(&[2], DType::F64)?, Tensor::ones(&[2], DType::F64)?);
        /// let out = x.try_batch_norm(&BatchNormArgs::new().running(&rm, &rv).eps(0.0))?;
        /// assert_eq!(out.output.value().to_f64_vec(), vec![-1.0, -1.0, 1.0, 1.0]);
        /// assert_eq!(out.batch_mean.unwrap().to_f64_vec(), vec![2.0, 4.0]);
        /// assert_eq!(out.batch_var.unwrap().to_f64_vec(), vec![2.0, 8.0]); // unbiased
        /// let new_mean = out.running_mean.unwrap().to_f64_vec();
        /// assert!((new_mean[1] - 0.4).abs() < 1e-15); // 0.9 * 0 + 0.1 * 4
        /// let grads = (&out.output * &x).sum().backward()?;
        /// assert_eq!(grads.wrt(&x).shape(), &[2, 2]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_batch_norm / batch_norm(&self, args: &BatchNormArgs<'_, 'g>) -> BatchNormOutput<'g> {
            const OP: &str = "batch_norm";
            if !(0.0..=1.0).contains(&args.momentum) {
                return Err(Error::invalid(
                    OP,
                    format!("momentum must be in [0, 1], got {}", args.momentum),
                ));
            }
            let running = match (args.running_mean, args.running_var) {
                (Some(m), Some(v)) => Some((m, v)),
                (None, None) => None,
                _ => {
                    return Err(Error::invalid(
                        OP,
                        "running_mean and running_var must be given together",
                    ))
                }
            };
            let affine = Affine::Given {
                weight: args.weight.is_some(),
                bias: args.bias.is_some(),
            };
            let params = args.weight.into_iter().chain(args.bias);
            if !args.training {
                let (m, v) = running.ok_or_else(|| {
                    Error::invalid(OP, "eval mode (training = false) needs running_mean and running_var")
                })?;
                let graph = self.graph();
                let (mv, vv) = (graph.constant(m.clone()), graph.constant(v.clone()));
                let mut inputs = vec![self, &mv, &vv];
                inputs.extend(params);
                let op = BatchNorm { training: false, eps: args.eps, affine, moments: None };
                return Ok(BatchNormOutput {
                    output: graph.record(op, &inputs)?,
                    batch_mean: None,
                    batch_var: None,
                    running_mean: None,
                    running_var: None,
                });
            }
            let x = self.value();
            if let Some((m, v)) = running {
                planes(OP, x)?;
                check_channel_param(OP, "running_mean", m, x)?;
                check_channel_param(OP, "running_var", v, x)?;
            }
            let slot: MomentsSlot = Arc::default();
            let op = BatchNorm { training: true, eps: args.eps, affine, moments: Some(slot.clone()) };
            let mut inputs = vec![self];
            inputs.extend(params);
            let output = self.graph().record(op, &inputs)?;
            let moments = slot
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .unwrap_or_default();
            let m = planes(OP, x)?.per_channel();
            let (mean, var) = batch_mean_var(&moments, m);
            let c = [mean.len()];
            let (batch_mean, batch_var) = (
                Tensor::from_f64_slice(&mean, &c, x.dtype())?,
                Tensor::from_f64_slice(&var, &c, x.dtype())?,
            );
            // An empty batch leaves the running statistics as they were (as in PyTorch).
            let (running_mean, running_var) = match running {
                Some((rm, rv)) if m > 0 => (
                    Some(blend(rm, &mean, args.momentum)?),
                    Some(blend(rv, &var, args.momentum)?),
                ),
                Some((rm, rv)) => (Some(rm.clone()), Some(rv.clone())),
                None => (None, None),
            };
            Ok(BatchNormOutput {
                output,
                batch_mean: Some(batch_mean),
                batch_var: Some(batch_var),
                running_mean,
                running_var,
            })
        }
    }
}

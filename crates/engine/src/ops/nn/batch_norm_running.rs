//! `batch_norm_running_stats`: batch norm's running-statistics update as a
//! node of the graph, so that a [compiled step](crate::compile) computes
//! it at every run and writes it back (a state update,
//! [`Graph::capture_update`](crate::Graph::capture_update)), where an eager
//! step takes it from [`Var::try_batch_norm`]'s output. It shares the
//! moments kernel and the blend with that output: the same bits.

use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, OpAttributes};
use crate::kernels::nn::batch_norm as kernel;
use crate::ops::{OpFacts, OpRegistry, StructuredOp};
use crate::tensor::Tensor;

use super::batch_norm::{batch_mean_var, blended, check_channel_param, planes, sample};
use super::batch_norm_backward::{channels_of, into_channels};

const OP: &str = "batch_norm_running_stats";

/// The running statistics a training-mode batch norm leaves after seeing
/// an `[N, C, *]` batch, stacked as a `[2, C]` tensor of the input's dtype:
/// row 0 the new running mean, row 1 the new running (unbiased) variance,
/// each `momentum * batch + (1 - momentum) * running`. Inputs: the batch,
/// `running_mean`, `running_var` (`[C]`) and, with `momentum: None`
/// (PyTorch's cumulative average, factor `1 / (num_batches_tracked + 1)`),
/// `num_batches_tracked` before this batch (one f64 element). No gradient
/// flows through it (the statistics are detached, as in PyTorch).
///
/// ```
/// use retrograd::{Graph, Tensor};
/// use retrograd::ops::nn::batch_norm_running::BatchNormRunningStats;
/// let g = Graph::new();
/// // [N = 2, C = 2]: channel 0 holds 1 and 3, channel 1 holds 2 and 6.
/// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 6.0], &[2, 2])?);
/// let mean = g.constant(Tensor::from_vec(vec![0.0, 0.0], &[2])?);
/// let var = g.constant(Tensor::from_vec(vec![1.0, 1.0], &[2])?);
/// let stats = g.record(BatchNormRunningStats::new(Some(0.5)), &[&x, &mean, &var])?;
/// // Batch means 2 and 4, unbiased variances 2 and 8, halfway from 0 and 1.
/// assert_eq!(stats.value().to_f64_vec(), vec![1.0, 2.0, 1.5, 4.5]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNormRunningStats {
    momentum: Option<f64>,
}

impl BatchNormRunningStats {
    /// The update with factor `momentum` (`None`: a cumulative average,
    /// which takes `num_batches_tracked` as a fourth input).
    pub fn new(momentum: Option<f64>) -> Self {
        BatchNormRunningStats { momentum }
    }
}

impl Default for BatchNormRunningStats {
    /// PyTorch's default momentum, 0.1.
    fn default() -> Self {
        Self::new(Some(0.1))
    }
}

impl StructuredOp for BatchNormRunningStats {
    const NAME: &'static str = OP;
    const INPUTS: &'static [&'static str] = &[
        "input",
        "running_mean",
        "running_var",
        "num_batches_tracked",
    ];
    const NO_GRAD: &'static [usize] = &[0, 1, 2, 3];
    fn arity(&self) -> Option<usize> {
        Some(if self.momentum.is_some() { 3 } else { 4 })
    }
    fn attributes(&self) -> OpAttributes {
        match self.momentum {
            Some(m) => OpAttributes::new().float("momentum", m),
            None => OpAttributes::new(),
        }
    }
    const HOLDS: crate::Holds = crate::Holds::Settings;
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (x, rm, rv) = (inputs[0], inputs[1], inputs[2]);
        if !x.is_float() {
            return Err(Error::NotFloat {
                op: OP,
                found: x.dtype(),
            });
        }
        let p = planes(OP, x)?;
        check_channel_param(OP, "running_mean", rm, x)?;
        check_channel_param(OP, "running_var", rv, x)?;
        let momentum = match self.momentum {
            Some(m) => m,
            None => {
                let tracked = inputs[3];
                if tracked.numel() != 1 || !tracked.is_float() {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "num_batches_tracked must be one float, got a {} tensor of shape {:?}",
                            tracked.dtype(),
                            tracked.shape()
                        ),
                    ));
                }
                1.0 / (tracked.to_f64_vec()[0] + 1.0)
            }
        };
        if !(0.0..=1.0).contains(&momentum) {
            return Err(Error::invalid(
                OP,
                format!("momentum must be in [0, 1], got {momentum}"),
            ));
        }
        let m = p.per_channel();
        let mut rows = Vec::with_capacity(2 * p.c);
        if m == 0 {
            // An empty batch leaves the statistics as they were (as in PyTorch).
            rows.extend(rm.to_f64_vec());
            rows.extend(rv.to_f64_vec());
        } else {
            let moments = crate::with_dtype!(OP, x.dtype(), T => {
                kernel::channel_moments(x.as_slice_of::<T>(), p)
            });
            let (mean, var) = batch_mean_var(&moments, m);
            rows.extend(blended(rm, &mean, momentum));
            rows.extend(blended(rv, &var, momentum));
        }
        Tensor::from_f64_slice(&rows, &[2, p.c], x.dtype())
    }
    /// The op is a function (the statistics come back rather than being
    /// written in place), so each example's statistics after its own batch
    /// are meaningful: with each example's channels as channels of one
    /// batch (`batch_norm`'s rule), the `[2, B·C]` result is every
    /// example's `[2, C]`. A cumulative average whose count differs between
    /// examples would need one momentum per example, which one update
    /// cannot take: refused.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        if x.get(3).is_some_and(|t| t.batched) {
            return Err(Error::Unsupported {
                op: OP.to_string(),
                what: "vmap over num_batches_tracked (the count of a cumulative average sets one \
                       momentum for every example; give each example's update its own call)",
            });
        }
        let input = into_channels(&x[0], ctx)?;
        let (mean, var) = (channels_of(&x[1], ctx)?, channels_of(&x[2], ctx)?);
        let args: Vec<&Var<'g>> = [&input, &mean, &var]
            .into_iter()
            .chain(x.get(3).map(|t| &t.value))
            .collect();
        let stats = input.graph().record(*self, &args)?;
        let c = stats.shape()[1] / ctx.size;
        let rows = stats.reshape_dims(&[2, ctx.size, c])?;
        Ok(Batched::along_batch(rows.try_permute(&[1, 0, 2])?))
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            sample_inputs: Some(|seed| {
                vec![
                    sample(&[3, 2, 4], seed, 0.0, 2.0),
                    sample(&[2], seed + 7, 0.1, 0.5),
                    sample(&[2], seed + 11, 1.0, 0.5),
                ]
            }),
            ..OpFacts::opaque(self.arity())
        }
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(BatchNormRunningStats::default());
}

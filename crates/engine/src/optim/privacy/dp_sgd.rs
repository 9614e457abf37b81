//! [`DpOptimizer`]: any optimizer made differentially private (DP-SGD).
//! Each step takes the per-sample gradients of a Poisson-sampled batch
//! (from `func::try_per_sample_gradients`), clips each example's gradient
//! to a norm, sums them, adds Gaussian noise, divides by the expected
//! batch size, hands the result to the wrapped optimizer, and records the
//! step with the accountant: Opacus's `DPOptimizer`, step for step.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use rayon::prelude::*;

use super::RdpAccountant;
use crate::base::error::{Error, Result};
use crate::core::graph::Graph;
use crate::nn::Parameter;
use crate::optim::clip::squared_sum;
use crate::optim::Optimizer;
use crate::tensor::Tensor;
use crate::Gradients;

/// The settings of DP-SGD.
#[derive(Clone, Copy, Debug)]
pub struct DpSgdConfig {
    /// The norm `C` each example's whole gradient (all parameters
    /// together) is clipped to.
    pub max_grad_norm: f64,
    /// The noise multiplier `σ`: the noise's standard deviation is `σ C`.
    pub noise_multiplier: f64,
    /// The probability `q` with which each example joins a batch (Poisson
    /// sampling); the accountant's sample rate.
    pub sample_rate: f64,
    /// The batch size on average, `q` times the dataset size: the summed
    /// gradient is divided by it (not by the drawn batch's size, which
    /// would reveal that size).
    pub expected_batch_size: usize,
    /// The seed of the noise.
    pub seed: u64,
}

/// An optimizer whose steps are differentially private (see the module
/// docs). The privacy spent so far is [`epsilon`](Self::epsilon).
///
/// ```
/// use retrograd::nn::Parameter;
/// use retrograd::optim::privacy::{DpOptimizer, DpSgdConfig};
/// use retrograd::optim::{Sgd, SgdConfig};
/// use retrograd::Tensor;
/// let w = Parameter::new(Tensor::from_vec(vec![0.0, 0.0], &[2])?);
/// let sgd = Sgd::new([&w], SgdConfig::new(1.0))?;
/// let config = DpSgdConfig {
///     max_grad_norm: 1.0, noise_multiplier: 0.0, sample_rate: 0.5,
///     expected_batch_size: 2, seed: 0,
/// };
/// let mut dp = DpOptimizer::try_new(Box::new(sgd), vec![("w".into(), w.clone())], config)?;
/// // Two examples' gradients: [3, 4] (norm 5, clipped to [0.6, 0.8]) and [0.1, 0].
/// let per_sample = Tensor::from_vec(vec![3.0, 4.0, 0.1, 0.0], &[2, 2])?;
/// dp.try_step(&[per_sample])?;
/// // Mean of the clipped gradients, no noise: w = -[0.35, 0.4].
/// let v = w.value().to_f64_vec();
/// assert!((v[0] + 0.35).abs() < 1e-6 && (v[1] + 0.4).abs() < 1e-6);
/// assert!(dp.epsilon(1e-5).is_infinite()); // no noise: no privacy
/// # Ok::<(), retrograd::Error>(())
/// ```
pub struct DpOptimizer {
    inner: Box<dyn Optimizer>,
    params: Vec<(String, Parameter)>,
    config: DpSgdConfig,
    noise: ChaCha8Rng,
    accountant: RdpAccountant,
}

impl DpOptimizer {
    /// `inner` made private over `params` (the parameters whose per-sample
    /// gradients each step receives, in that order). Errors: a non-positive
    /// or non-finite clipping norm, a negative noise multiplier, a sample
    /// rate outside (0, 1], a zero expected batch size.
    pub fn try_new(
        inner: Box<dyn Optimizer>,
        params: Vec<(String, Parameter)>,
        config: DpSgdConfig,
    ) -> Result<Self> {
        let bad = |what: String| Err(Error::invalid("DpOptimizer::new", what));
        if !(config.max_grad_norm > 0.0 && config.max_grad_norm.is_finite()) {
            return bad(format!(
                "max_grad_norm {} must be positive",
                config.max_grad_norm
            ));
        }
        if !(config.noise_multiplier >= 0.0 && config.noise_multiplier.is_finite()) {
            return bad(format!(
                "noise_multiplier {} must be zero or more",
                config.noise_multiplier
            ));
        }
        if !(config.sample_rate > 0.0 && config.sample_rate <= 1.0) {
            return bad(format!(
                "sample_rate {} must be in (0, 1]",
                config.sample_rate
            ));
        }
        if config.expected_batch_size == 0 {
            return bad("expected_batch_size must be at least 1".into());
        }
        Ok(DpOptimizer {
            inner,
            params,
            noise: ChaCha8Rng::seed_from_u64(config.seed),
            config,
            accountant: RdpAccountant::new(),
        })
    }

    /// One private step from `per_sample`, each parameter's gradients
    /// `[batch, ...parameter shape]` in the order given to
    /// [`try_new`](Self::try_new) (a batch may be empty: Poisson sampling
    /// can draw no example, and the step still adds noise). Errors: a count
    /// or shape that does not match the parameters, batches of different
    /// sizes.
    pub fn try_step(&mut self, per_sample: &[Tensor]) -> Result<()> {
        if per_sample.len() != self.params.len() {
            return Err(Error::invalid(
                "DpOptimizer::step",
                format!(
                    "{} per-sample gradients for {} parameters",
                    per_sample.len(),
                    self.params.len()
                ),
            ));
        }
        let batch = per_sample
            .first()
            .map_or(0, |g| g.shape().first().copied().unwrap_or(0));
        for ((name, p), g) in self.params.iter().zip(per_sample) {
            let value = p.value();
            if g.shape().first() != Some(&batch) || &g.shape()[1..] != value.shape() {
                return Err(Error::invalid(
                    "DpOptimizer::step",
                    format!(
                        "per-sample gradients of `{name}` have shape {:?}; expected [{batch}] \
                         followed by the parameter's {:?}",
                        g.shape(),
                        value.shape()
                    ),
                ));
            }
        }
        let clipped = self.clipped_sums(per_sample, batch)?;
        let mut grads = Gradients::for_params(0);
        let std = self.config.noise_multiplier * self.config.max_grad_norm;
        let scale = 1.0 / self.config.expected_batch_size as f64;
        for ((_, p), sum) in self.params.iter().zip(clipped) {
            let mut values = sum.to_f64_vec();
            for v in &mut values {
                let z: f64 = StandardNormal.sample(&mut self.noise);
                *v = (*v + std * z) * scale;
            }
            let grad = Tensor::from_f64_slice(&values, sum.shape(), sum.dtype())?;
            grads.params_mut().insert(p.id(), grad);
        }
        self.inner.step(&grads)?;
        self.accountant
            .try_step(self.config.noise_multiplier, self.config.sample_rate)
    }

    /// Like [`try_step`](Self::try_step), but panics with its error.
    #[track_caller]
    pub fn step(&mut self, per_sample: &[Tensor]) {
        crate::base::error::or_panic(self.try_step(per_sample))
    }

    /// The sum over examples of each example's gradient scaled so that its
    /// norm over all parameters is at most the clipping norm (Opacus's
    /// factor `min(1, C / (norm + 1e-6))`).
    ///
    /// Neither the squares nor the scaled gradients are made: each
    /// example's squared norm is read off its rows in place, and the scaled
    /// sum is one product `factors @ rows` per parameter. Per-sample
    /// gradients are the batch times the model's size (108 MB for the
    /// README's CNN at 64 examples), so each full-size temporary cost a
    /// fresh mapping, written and read once.
    fn clipped_sums(&self, per_sample: &[Tensor], batch: usize) -> Result<Vec<Tensor>> {
        if batch == 0 {
            return Ok(self
                .params
                .iter()
                .map(|(_, p)| p.value().zeros_like())
                .collect());
        }
        let rows: Vec<Tensor> = per_sample
            .iter()
            .map(|t| t.contiguous().reshape(&[batch, t.numel() / batch]))
            .collect::<Result<_>>()?;
        let mut squared = vec![0.0f64; batch];
        for r in &rows {
            let width = r.shape()[1];
            let norms: Vec<f64> = crate::with_dtype!("DpOptimizer::step", r.dtype(), T => {
                let values = r.as_slice_of::<T>();
                (0..batch)
                    .into_par_iter()
                    .map(|i| squared_sum(&values[i * width..(i + 1) * width]))
                    .collect()
            });
            for (acc, n) in squared.iter_mut().zip(norms) {
                *acc += n;
            }
        }
        let factors: Vec<f64> = squared
            .iter()
            .map(|s| (self.config.max_grad_norm / (s.sqrt() + 1e-6)).min(1.0))
            .collect();
        let g = Graph::inference();
        rows.iter()
            .zip(per_sample)
            .map(|(r, t)| {
                let f = g.constant(Tensor::from_f64_slice(&factors, &[batch], r.dtype())?);
                let sum = f.try_matmul(&g.constant(r.clone()))?;
                sum.into_value().reshape(&t.shape()[1..])
            })
            .collect()
    }

    /// The ε spent so far for `delta` (RDP accountant); infinite without
    /// noise.
    pub fn epsilon(&self, delta: f64) -> f64 {
        self.accountant.epsilon(delta)
    }

    /// The accountant of the steps taken.
    pub fn accountant(&self) -> &RdpAccountant {
        &self.accountant
    }

    /// The settings.
    pub fn config(&self) -> &DpSgdConfig {
        &self.config
    }

    /// The wrapped optimizer (its learning rate, for a schedule).
    pub fn inner_mut(&mut self) -> &mut dyn Optimizer {
        &mut *self.inner
    }
}

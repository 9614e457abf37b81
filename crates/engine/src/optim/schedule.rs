//! Learning-rate schedules, with the closed forms of PyTorch's
//! `torch.optim.lr_scheduler` (`StepLR`, `MultiStepLR`, `ExponentialLR`,
//! `CosineAnnealingLR`, and `LinearLR` warm-up chained by `SequentialLR`),
//! and nanoGPT's warm-up plus cosine ([`WarmupCosineLr`]).
//!
//! A schedule is a pure function of the base rate and the step count, so it
//! composes with any [`Optimizer`] through `set_lr`, and a checkpoint only
//! needs the step count to resume it. [`LrScheduler`] keeps that count:
//!
//! ```
//! use retrograd::{Tensor, nn::Parameter};
//! use retrograd::optim::{CosineAnnealingLr, LrScheduler, Optimizer, Sgd, SgdConfig, WarmupLr};
//! let w = Parameter::new(Tensor::scalar(0.0));
//! let mut opt = Sgd::new([&w], SgdConfig::new(0.1))?;
//! let schedule = WarmupLr::new(2, 0.5, CosineAnnealingLr::new(4, 0.0)?)?;
//! let mut sched = LrScheduler::new(schedule, &mut opt);   // sets step 0's rate
//! let mut rates = vec![opt.lr()];
//! for _ in 0..6 {
//!     // ... a training step with opt.step(&grads) ...
//!     sched.step(&mut opt);
//!     rates.push(opt.lr());
//! }
//! let want = [0.05, 0.075, 0.1, 0.085355, 0.05, 0.014645, 0.0];
//! assert!(rates.iter().zip(want).all(|(r, w)| (r - w).abs() < 1e-6));
//! # Ok::<(), retrograd::Error>(())
//! ```

use super::Optimizer;
use crate::base::error::{Error, Result};

/// A learning rate as a function of the base rate and the (0-based) step.
pub trait LrSchedule: Send {
    /// The learning rate at step `t`, for base rate `base_lr`.
    fn lr_at(&self, base_lr: f64, t: usize) -> f64;
}

impl<S: LrSchedule + ?Sized> LrSchedule for Box<S> {
    fn lr_at(&self, base_lr: f64, t: usize) -> f64 {
        (**self).lr_at(base_lr, t)
    }
}

fn check_gamma(op: &'static str, gamma: f64) -> Result<()> {
    if gamma.is_finite() && gamma > 0.0 {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!("gamma must be > 0, got {gamma}"),
        ))
    }
}

/// The base rate at every step.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConstantLr;

impl LrSchedule for ConstantLr {
    fn lr_at(&self, base_lr: f64, _t: usize) -> f64 {
        base_lr
    }
}

/// `base * gamma^(t / step_size)` (integer division): decay every `step_size` steps.
///
/// ```
/// use retrograd::optim::{LrSchedule, StepLr};
/// let s = StepLr::new(10, 0.1)?;
/// assert_eq!(s.lr_at(1.0, 9), 1.0);
/// assert!((s.lr_at(1.0, 25) - 0.01).abs() < 1e-15);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct StepLr {
    step_size: usize,
    gamma: f64,
}

impl StepLr {
    /// Decays by `gamma` every `step_size` (> 0) steps.
    pub fn new(step_size: usize, gamma: f64) -> Result<Self> {
        if step_size == 0 {
            return Err(Error::invalid("StepLr", "step_size must be > 0"));
        }
        check_gamma("StepLr", gamma)?;
        Ok(StepLr { step_size, gamma })
    }
}

impl LrSchedule for StepLr {
    fn lr_at(&self, base_lr: f64, t: usize) -> f64 {
        base_lr * self.gamma.powi((t / self.step_size) as i32)
    }
}

/// `base * gamma^k`, where `k` counts the milestones `<= t`.
///
/// ```
/// use retrograd::optim::{LrSchedule, MultiStepLr};
/// let s = MultiStepLr::new(&[3, 5], 0.5)?;
/// let rates: Vec<f64> = (0..7).map(|t| s.lr_at(1.0, t)).collect();
/// assert_eq!(rates, [1.0, 1.0, 1.0, 0.5, 0.5, 0.25, 0.25]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct MultiStepLr {
    milestones: Vec<usize>,
    gamma: f64,
}

impl MultiStepLr {
    /// Decays by `gamma` at each of `milestones` (any order; repeats decay twice, as in PyTorch).
    pub fn new(milestones: &[usize], gamma: f64) -> Result<Self> {
        check_gamma("MultiStepLr", gamma)?;
        let mut milestones = milestones.to_vec();
        milestones.sort_unstable();
        Ok(MultiStepLr { milestones, gamma })
    }
}

impl LrSchedule for MultiStepLr {
    fn lr_at(&self, base_lr: f64, t: usize) -> f64 {
        let k = self.milestones.partition_point(|&m| m <= t);
        base_lr * self.gamma.powi(k as i32)
    }
}

/// `base * gamma^t`.
#[derive(Clone, Copy, Debug)]
pub struct ExponentialLr {
    gamma: f64,
}

impl ExponentialLr {
    /// Decays by `gamma` every step.
    pub fn new(gamma: f64) -> Result<Self> {
        check_gamma("ExponentialLr", gamma)?;
        Ok(ExponentialLr { gamma })
    }
}

impl LrSchedule for ExponentialLr {
    fn lr_at(&self, base_lr: f64, t: usize) -> f64 {
        base_lr * self.gamma.powf(t as f64)
    }
}

/// Cosine annealing from the base rate down to `eta_min` over `t_max` steps:
/// `eta_min + (base - eta_min) (1 + cos(pi t / t_max)) / 2` (PyTorch's
/// closed form; past `t_max` it rises again along the same cosine).
///
/// ```
/// use retrograd::optim::{CosineAnnealingLr, LrSchedule};
/// let s = CosineAnnealingLr::new(10, 0.001)?;
/// assert_eq!(s.lr_at(0.1, 0), 0.1);
/// assert!((s.lr_at(0.1, 5) - 0.0505).abs() < 1e-12);
/// assert!((s.lr_at(0.1, 10) - 0.001).abs() < 1e-12);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct CosineAnnealingLr {
    t_max: usize,
    eta_min: f64,
}

impl CosineAnnealingLr {
    /// Anneals over `t_max` (> 0) steps down to `eta_min` (>= 0).
    pub fn new(t_max: usize, eta_min: f64) -> Result<Self> {
        if t_max == 0 {
            return Err(Error::invalid("CosineAnnealingLr", "t_max must be > 0"));
        }
        super::check_non_negative("CosineAnnealingLr", "eta_min", eta_min)?;
        Ok(CosineAnnealingLr { t_max, eta_min })
    }
}

impl LrSchedule for CosineAnnealingLr {
    fn lr_at(&self, base_lr: f64, t: usize) -> f64 {
        let phase = std::f64::consts::PI * t as f64 / self.t_max as f64;
        self.eta_min + (base_lr - self.eta_min) * (1.0 + phase.cos()) / 2.0
    }
}

/// nanoGPT's schedule (`get_lr` in its `train.py`): a linear warm-up over
/// `warmup_steps` (step `t` at `(t + 1) / (warmup_steps + 1)` of the base
/// rate), then a cosine from the base rate down to `min_lr` at step
/// `decay_steps`, and `min_lr` after.
///
/// ```
/// use retrograd::optim::{LrSchedule, WarmupCosineLr};
/// let s = WarmupCosineLr::new(100, 2000, 1e-4)?;
/// assert_eq!(s.lr_at(1e-3, 0), 1e-3 / 101.0);
/// assert_eq!(s.lr_at(1e-3, 100), 1e-3);
/// assert!((s.lr_at(1e-3, 1050) - 5.5e-4).abs() < 1e-12); // half-way down
/// assert_eq!(s.lr_at(1e-3, 5000), 1e-4);
/// assert!(WarmupCosineLr::new(100, 2000, -1.0).is_err());
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct WarmupCosineLr {
    warmup_steps: usize,
    decay_steps: usize,
    min_lr: f64,
}

impl WarmupCosineLr {
    /// Warms up over `warmup_steps`, then decays to `min_lr` (>= 0) at step
    /// `decay_steps` (a decay that ends before the warm-up does gives
    /// `min_lr` right after it, as nanoGPT's formula does).
    pub fn new(warmup_steps: usize, decay_steps: usize, min_lr: f64) -> Result<Self> {
        super::check_non_negative("WarmupCosineLr", "min_lr", min_lr)?;
        Ok(WarmupCosineLr {
            warmup_steps,
            decay_steps,
            min_lr,
        })
    }
}

impl LrSchedule for WarmupCosineLr {
    fn lr_at(&self, base_lr: f64, t: usize) -> f64 {
        if t < self.warmup_steps {
            return base_lr * (t + 1) as f64 / (self.warmup_steps + 1) as f64;
        }
        if t > self.decay_steps {
            return self.min_lr;
        }
        let span = self.decay_steps.saturating_sub(self.warmup_steps).max(1);
        let ratio = (t - self.warmup_steps) as f64 / span as f64;
        let coeff = 0.5 * (1.0 + (std::f64::consts::PI * ratio).cos());
        self.min_lr + coeff * (base_lr - self.min_lr)
    }
}

/// Linear warm-up for `warmup_steps` steps, from `start_factor * base` up to
/// `base`, then `after` (which starts at its own step 0): PyTorch's
/// `SequentialLR([LinearLR(start_factor, 1, warmup_steps), after], [warmup_steps])`.
///
/// ```
/// use retrograd::optim::{ConstantLr, LrSchedule, WarmupLr};
/// let s = WarmupLr::new(4, 0.0, ConstantLr)?;
/// let rates: Vec<f64> = (0..6).map(|t| s.lr_at(1.0, t)).collect();
/// assert_eq!(rates, [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct WarmupLr<S> {
    warmup_steps: usize,
    start_factor: f64,
    after: S,
}

impl<S: LrSchedule> WarmupLr<S> {
    /// Warms up over `warmup_steps` from `start_factor` (in `[0, 1]`) of the base rate, then follows `after`.
    pub fn new(warmup_steps: usize, start_factor: f64, after: S) -> Result<Self> {
        if !(0.0..=1.0).contains(&start_factor) {
            return Err(Error::invalid(
                "WarmupLr",
                format!("start_factor must be in [0, 1], got {start_factor}"),
            ));
        }
        Ok(WarmupLr {
            warmup_steps,
            start_factor,
            after,
        })
    }
}

impl<S: LrSchedule> LrSchedule for WarmupLr<S> {
    fn lr_at(&self, base_lr: f64, t: usize) -> f64 {
        if t < self.warmup_steps {
            let frac = t as f64 / self.warmup_steps as f64;
            base_lr * (self.start_factor + (1.0 - self.start_factor) * frac)
        } else {
            self.after.lr_at(base_lr, t - self.warmup_steps)
        }
    }
}

/// PyTorch's `LinearLR`: the factor of the base rate moves in a straight
/// line from `start_factor` to `end_factor` over `total_iters` steps, then
/// stays. After a warm-up ([`WarmupLr`], from 0) it is `transformers`'
/// `get_linear_schedule_with_warmup`:
///
/// ```
/// use retrograd::optim::{LinearLr, LrSchedule, WarmupLr};
/// // 2 warm-up steps, then down to 0 at step 6 (6 steps in all).
/// let s = WarmupLr::new(2, 0.0, LinearLr::new(1.0, 0.0, 4)?)?;
/// let rates: Vec<f64> = (0..7).map(|t| s.lr_at(1.0, t)).collect();
/// assert_eq!(rates, [0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct LinearLr {
    start_factor: f64,
    end_factor: f64,
    total_iters: usize,
}

impl LinearLr {
    /// From `start_factor` to `end_factor` (both in `[0, 1]`) over `total_iters` steps.
    pub fn new(start_factor: f64, end_factor: f64, total_iters: usize) -> Result<Self> {
        if !(0.0..=1.0).contains(&start_factor) || !(0.0..=1.0).contains(&end_factor) {
            return Err(Error::invalid(
                "LinearLr",
                format!("factors must be in [0, 1], got {start_factor} and {end_factor}"),
            ));
        }
        Ok(LinearLr {
            start_factor,
            end_factor,
            total_iters,
        })
    }
}

impl LrSchedule for LinearLr {
    fn lr_at(&self, base_lr: f64, t: usize) -> f64 {
        let frac = if self.total_iters == 0 {
            1.0
        } else {
            t.min(self.total_iters) as f64 / self.total_iters as f64
        };
        base_lr * (self.start_factor + (self.end_factor - self.start_factor) * frac)
    }
}

/// Drives an optimizer's learning rate along a schedule: remembers the base
/// rate and the step count, and sets the rate on each [`step`](Self::step).
pub struct LrScheduler {
    schedule: Box<dyn LrSchedule>,
    base_lr: f64,
    t: usize,
}

impl LrScheduler {
    /// Takes the optimizer's current rate as the base rate and sets the
    /// rate of step 0 (as constructing a PyTorch scheduler does).
    pub fn new(schedule: impl LrSchedule + 'static, optimizer: &mut dyn Optimizer) -> Self {
        let base_lr = optimizer.lr();
        let s = LrScheduler {
            schedule: Box::new(schedule),
            base_lr,
            t: 0,
        };
        optimizer.set_lr(s.current_lr());
        s
    }

    /// Advances one step and sets the optimizer's rate for it.
    pub fn step(&mut self, optimizer: &mut dyn Optimizer) {
        self.t += 1;
        optimizer.set_lr(self.current_lr());
    }

    /// The rate for the current step.
    pub fn current_lr(&self) -> f64 {
        self.schedule.lr_at(self.base_lr, self.t)
    }

    /// How many times [`step`](Self::step) has been called.
    pub fn steps(&self) -> usize {
        self.t
    }

    /// The base rate.
    pub fn base_lr(&self) -> f64 {
        self.base_lr
    }

    /// Jumps to step `t` (resuming from a checkpoint) and sets the rate.
    pub fn set_steps(&mut self, t: usize, optimizer: &mut dyn Optimizer) {
        self.t = t;
        optimizer.set_lr(self.current_lr());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_pytorch_closed_forms() {
        // torch: StepLR(step_size=2, gamma=0.5) from lr 0.8 over 6 epochs.
        let s = StepLr::new(2, 0.5).unwrap();
        let r: Vec<f64> = (0..6).map(|t| s.lr_at(0.8, t)).collect();
        assert_eq!(r, [0.8, 0.8, 0.4, 0.4, 0.2, 0.2]);
        let e = ExponentialLr::new(0.9).unwrap();
        assert!((e.lr_at(1.0, 3) - 0.729).abs() < 1e-15);
        let c = CosineAnnealingLr::new(4, 0.0).unwrap();
        let r: Vec<f64> = (0..9).map(|t| c.lr_at(1.0, t)).collect();
        let want = [
            1.0, 0.853553, 0.5, 0.146447, 0.0, 0.146447, 0.5, 0.853553, 1.0,
        ];
        assert!(
            r.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6),
            "{r:?}"
        );
    }

    #[test]
    fn warmup_composes_with_any_schedule() {
        let s = WarmupLr::new(2, 0.1, StepLr::new(1, 0.5).unwrap()).unwrap();
        let r: Vec<f64> = (0..5).map(|t| s.lr_at(1.0, t)).collect();
        let want = [0.1, 0.55, 1.0, 0.5, 0.25];
        assert!(
            r.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-15),
            "{r:?}"
        );
        let boxed: Box<dyn LrSchedule> = Box::new(s);
        assert_eq!(boxed.lr_at(1.0, 3), 0.5);
        assert!(WarmupLr::new(3, 1.5, ConstantLr).is_err());
    }

    #[test]
    fn invalid_arguments() {
        assert!(StepLr::new(0, 0.1).is_err());
        assert!(StepLr::new(1, 0.0).is_err());
        assert!(MultiStepLr::new(&[1], f64::NAN).is_err());
        assert!(CosineAnnealingLr::new(0, 0.0).is_err());
        assert!(CosineAnnealingLr::new(5, -1.0).is_err());
    }
}

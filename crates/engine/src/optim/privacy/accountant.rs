//! [`RdpAccountant`], the privacy spent by the steps of a DP-SGD run, and
//! [`noise_multiplier_for_epsilon`], the noise a planned run needs: Opacus's
//! `RDPAccountant` and `get_noise_multiplier(accountant="rdp")`.

use super::rdp::{try_compute_rdp, try_get_privacy_spent, DEFAULT_ORDERS};
use crate::base::error::{or_panic, Error, Result};
use crate::base::fallible::fallible;

/// Consecutive steps taken with one noise multiplier and sample rate: one
/// entry of an [`RdpAccountant`]'s history.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HistoryEntry {
    /// The noise's standard deviation over the clipping norm.
    pub noise_multiplier: f64,
    /// The probability that a step draws an example (batch size over
    /// dataset size for Poisson sampling).
    pub sample_rate: f64,
    /// How many steps in a row used these settings.
    pub steps: u64,
}

/// Tracks the privacy spent by DP-SGD steps with Rényi differential
/// privacy, as Opacus's `RDPAccountant`: a history of
/// `(noise_multiplier, sample_rate, steps)` entries, consecutive steps with
/// the same settings merged into one, and ε for a δ from the RDP of the
/// whole history over [`DEFAULT_ORDERS`].
///
/// ```
/// use retrograd::optim::privacy::RdpAccountant;
/// // MNIST-like: batches of 256 of 60,000 examples, 15 epochs, σ = 1.1.
/// let mut accountant = RdpAccountant::new();
/// for _ in 0..3515 {
///     accountant.try_step(1.1, 256.0 / 60000.0)?;
/// }
/// assert_eq!(accountant.history().len(), 1);
/// let (eps, order) = accountant.try_epsilon_and_order(1e-5)?;
/// assert!((eps - 1.281144275963647).abs() < 1e-9 && order == 12.0);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RdpAccountant {
    history: Vec<HistoryEntry>,
}

/// Opacus's `MAX_SIGMA`: the noise search gives up past this multiplier.
const MAX_NOISE_MULTIPLIER: f64 = 1e6;

/// Opacus's default `epsilon_tolerance`: the search stops once ε is at
/// most this far below the target.
const EPSILON_TOLERANCE: f64 = 0.01;

/// Bisection rounds after which the noise search is refused (each halves
/// the interval: far more than f64 can resolve).
const MAX_BISECTIONS: u32 = 2_000;

/// `noise_multiplier` finite and `>= 0`, else an error naming it.
fn check_noise(op: &'static str, noise_multiplier: f64) -> Result<()> {
    if noise_multiplier.is_finite() && noise_multiplier >= 0.0 {
        return Ok(());
    }
    Err(Error::invalid(
        op,
        format!("noise_multiplier must be finite and >= 0, got {noise_multiplier}"),
    ))
}

/// `sample_rate` in `(0, 1]`, else an error naming it.
fn check_sample_rate(op: &'static str, sample_rate: f64) -> Result<()> {
    if sample_rate > 0.0 && sample_rate <= 1.0 {
        return Ok(());
    }
    Err(Error::invalid(
        op,
        format!("sample_rate must be in (0, 1], got {sample_rate}"),
    ))
}

/// `delta` in `(0, 1)`, else an error naming it.
fn check_delta(op: &'static str, delta: f64) -> Result<()> {
    if delta > 0.0 && delta < 1.0 {
        return Ok(());
    }
    Err(Error::invalid(
        op,
        format!("delta must be in (0, 1), got {delta}"),
    ))
}

/// ε and the best order of `history` at `delta`: the RDP of every entry
/// summed order by order, then converted. An empty history has spent
/// nothing: `(0, 0)`, as Opacus answers.
fn spent(history: &[HistoryEntry], delta: f64) -> Result<(f64, f64)> {
    if history.is_empty() {
        return Ok((0.0, 0.0));
    }
    let mut rdp = vec![0.0; DEFAULT_ORDERS.len()];
    for e in history {
        let r = try_compute_rdp(e.sample_rate, e.noise_multiplier, e.steps, &DEFAULT_ORDERS)?;
        rdp.iter_mut().zip(r).for_each(|(total, r)| *total += r);
    }
    try_get_privacy_spent(&DEFAULT_ORDERS, &rdp, delta)
}

impl RdpAccountant {
    /// An accountant that has recorded no steps (ε = 0).
    ///
    /// ```
    /// use retrograd::optim::privacy::RdpAccountant;
    /// assert_eq!(RdpAccountant::new().epsilon(1e-5), 0.0);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one step with noise multiplier `noise_multiplier` and
    /// sample rate `sample_rate`; a step with the same settings as the
    /// last entry adds to its count. Errors: a negative or non-finite noise
    /// multiplier (0 is allowed and spends infinite privacy), a sample rate
    /// outside `(0, 1]`.
    ///
    /// ```
    /// use retrograd::optim::privacy::{HistoryEntry, RdpAccountant};
    /// let mut acc = RdpAccountant::new();
    /// acc.try_step(1.0, 0.01)?;
    /// acc.try_step(1.0, 0.01)?;
    /// acc.try_step(2.0, 0.01)?;
    /// let e = |noise_multiplier, steps| HistoryEntry { noise_multiplier, sample_rate: 0.01, steps };
    /// assert_eq!(acc.history(), &[e(1.0, 2), e(2.0, 1)]);
    /// assert!(acc.try_step(1.0, 0.0).is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn try_step(&mut self, noise_multiplier: f64, sample_rate: f64) -> Result<()> {
        const OP: &str = "RdpAccountant::step";
        check_noise(OP, noise_multiplier)?;
        check_sample_rate(OP, sample_rate)?;
        match self.history.last_mut() {
            Some(last)
                if last.noise_multiplier == noise_multiplier && last.sample_rate == sample_rate =>
            {
                last.steps += 1;
            }
            _ => self.history.push(HistoryEntry {
                noise_multiplier,
                sample_rate,
                steps: 1,
            }),
        }
        Ok(())
    }

    /// Like [`try_step`](Self::try_step), but panics with its error at the caller's line.
    ///
    /// ```
    /// use retrograd::optim::privacy::RdpAccountant;
    /// let mut acc = RdpAccountant::new();
    /// acc.step(1.0, 0.5);
    /// assert_eq!(acc.history()[0].steps, 1);
    /// ```
    #[track_caller]
    pub fn step(&mut self, noise_multiplier: f64, sample_rate: f64) {
        or_panic(self.try_step(noise_multiplier, sample_rate))
    }

    /// The steps recorded so far, consecutive equal settings merged.
    ///
    /// ```
    /// use retrograd::optim::privacy::RdpAccountant;
    /// assert!(RdpAccountant::new().history().is_empty());
    /// ```
    pub fn history(&self) -> &[HistoryEntry] {
        &self.history
    }

    fallible! {
        /// The ε spent so far at `delta`, and the order (α) of
        /// [`DEFAULT_ORDERS`] that gives it (Opacus's
        /// `get_privacy_spent`); `(0, 0)` before the first step. Error:
        /// `delta` outside `(0, 1)`.
        ///
        /// ```
        /// use retrograd::optim::privacy::RdpAccountant;
        /// let mut acc = RdpAccountant::new();
        /// (0..1000).for_each(|_| acc.step(1.0, 0.01));
        /// let (eps, order) = acc.try_epsilon_and_order(1e-5)?;
        /// assert!((eps - 2.1013652716430564).abs() < 1e-9);
        /// assert_eq!(order, 7.8);
        /// assert!(acc.try_epsilon_and_order(0.0).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_epsilon_and_order / epsilon_and_order(&self, delta: f64) -> (f64, f64) {
            check_delta("RdpAccountant::epsilon", delta)?;
            spent(&self.history, delta)
        }
    }

    fallible! {
        /// The ε spent so far at `delta` (Opacus's `get_epsilon`): the
        /// first half of [`try_epsilon_and_order`](Self::try_epsilon_and_order).
        ///
        /// ```
        /// use retrograd::optim::privacy::RdpAccountant;
        /// let mut acc = RdpAccountant::new();
        /// acc.try_step(2.0, 1.0)?; // one full-batch step
        /// assert!((acc.try_epsilon(1e-5)? - 2.1657156590294435).abs() < 1e-9);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_epsilon / epsilon(&self, delta: f64) -> f64 {
            Ok(self.try_epsilon_and_order(delta)?.0)
        }
    }
}

/// The noise multiplier that keeps `steps` steps at sample rate
/// `sample_rate` within (`target_epsilon`, `delta`)-DP: Opacus's
/// `get_noise_multiplier(target_epsilon=..., target_delta=...,
/// sample_rate=..., steps=..., accountant="rdp", epsilon_tolerance=0.01)`,
/// the same search with the same answer. The multiplier doubles from 20
/// until ε is at most the target, then bisects until ε is within 0.01
/// below it, and the upper end is returned. Errors: a target not finite
/// and above 0, `delta` outside `(0, 1)`, `sample_rate` outside `(0, 1]`,
/// zero steps, and a target out of reach (ε still above it, or the search
/// past a noise multiplier of 10⁶: "the privacy budget is too low").
///
/// ```
/// use retrograd::optim::privacy::try_noise_multiplier_for_epsilon;
/// // MNIST-like: batch 256 of 60,000 for 15 epochs (Opacus: int(15 / q) steps).
/// let q = 256.0 / 60000.0;
/// let steps = (15.0 / q) as u64;
/// assert_eq!(steps, 3515);
/// assert_eq!(try_noise_multiplier_for_epsilon(3.0, 1e-5, q, steps)?, 0.77392578125);
/// assert!(try_noise_multiplier_for_epsilon(0.01, 1e-5, 1.0, 10_000).is_err());
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn try_noise_multiplier_for_epsilon(
    target_epsilon: f64,
    delta: f64,
    sample_rate: f64,
    steps: u64,
) -> Result<f64> {
    const OP: &str = "noise_multiplier_for_epsilon";
    if !(target_epsilon.is_finite() && target_epsilon > 0.0) {
        return Err(Error::invalid(
            OP,
            format!("target_epsilon must be finite and > 0, got {target_epsilon}"),
        ));
    }
    check_delta(OP, delta)?;
    check_sample_rate(OP, sample_rate)?;
    if steps == 0 {
        return Err(Error::invalid(OP, "steps must be at least 1, got 0"));
    }
    let epsilon_at = |noise_multiplier| {
        let entry = HistoryEntry {
            noise_multiplier,
            sample_rate,
            steps,
        };
        spent(&[entry], delta).map(|(eps, _)| eps)
    };
    let mut eps_high = f64::INFINITY;
    let (mut sigma_low, mut sigma_high) = (0.0_f64, 10.0_f64);
    while eps_high > target_epsilon {
        sigma_high *= 2.0;
        eps_high = epsilon_at(sigma_high)?;
        if sigma_high > MAX_NOISE_MULTIPLIER {
            return Err(Error::invalid(
                OP,
                format!(
                    "the privacy budget is too low: epsilon {target_epsilon} at delta {delta} \
                     is out of reach with sample rate {sample_rate} over {steps} steps \
                     (noise multiplier {sigma_high} gives epsilon {eps_high})"
                ),
            ));
        }
    }
    let mut rounds = 0;
    while target_epsilon - eps_high > EPSILON_TOLERANCE {
        rounds += 1;
        if rounds > MAX_BISECTIONS {
            return Err(Error::invalid(
                OP,
                format!(
                    "the search for epsilon {target_epsilon} at delta {delta} did not converge \
                     between noise multipliers {sigma_low} and {sigma_high}"
                ),
            ));
        }
        let sigma = (sigma_low + sigma_high) / 2.0;
        let eps = epsilon_at(sigma)?;
        if eps < target_epsilon {
            (sigma_high, eps_high) = (sigma, eps);
        } else {
            sigma_low = sigma;
        }
    }
    Ok(sigma_high)
}

/// Like [`try_noise_multiplier_for_epsilon`], but panics with its error at
/// the caller's line.
///
/// ```
/// use retrograd::optim::privacy::noise_multiplier_for_epsilon;
/// assert_eq!(noise_multiplier_for_epsilon(1.0, 1e-6, 0.01, 1000), 1.66015625);
/// ```
#[track_caller]
pub fn noise_multiplier_for_epsilon(
    target_epsilon: f64,
    delta: f64,
    sample_rate: f64,
    steps: u64,
) -> f64 {
    or_panic(try_noise_multiplier_for_epsilon(
        target_epsilon,
        delta,
        sample_rate,
        steps,
    ))
}

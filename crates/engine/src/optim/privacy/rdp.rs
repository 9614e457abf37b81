//! The Rényi differential privacy (RDP) of the sampled Gaussian mechanism,
//! and its conversion to an (ε, δ) guarantee, computed as Opacus's
//! `opacus/accountants/analysis/rdp.py` computes them (version 1.6).
//!
//! One step of DP-SGD draws each example with probability `q`, sums the
//! clipped per-example gradients and adds Gaussian noise of standard
//! deviation `σ` times the clipping norm. At order `α` its RDP is
//! `log(A_α) / (α - 1)`, where `A_α` is a sum over binomial terms: a finite
//! sum for an integer `α`, an alternating series of two tails (each with an
//! `erfc` factor) for a fractional one, both summed in log space. RDP adds
//! up over steps, so `steps` identical steps cost `steps` times one.

use std::f64::consts::SQRT_2;

use crate::base::error::{or_panic, Error, Result};

/// The orders (α) searched by default, Opacus's
/// `RDPAccountant.DEFAULT_ALPHAS`: 1.1, 1.2, ..., 10.9, then 12, 13, ..., 63.
///
/// ```
/// use retrograd::optim::privacy::DEFAULT_ORDERS;
/// assert_eq!(DEFAULT_ORDERS.len(), 151);
/// assert_eq!((DEFAULT_ORDERS[0], DEFAULT_ORDERS[98], DEFAULT_ORDERS[150]), (1.1, 10.9, 63.0));
/// ```
pub const DEFAULT_ORDERS: [f64; 151] = default_orders();

/// `[1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))`, with the
/// same float operations, so every order is Opacus's bit for bit.
const fn default_orders() -> [f64; 151] {
    let mut orders = [0.0; 151];
    let mut x = 1;
    while x < 100 {
        orders[x - 1] = 1.0 + x as f64 / 10.0;
        x += 1;
    }
    let mut k = 12;
    while k < 64 {
        orders[99 + k - 12] = k as f64;
        k += 1;
    }
    orders
}

/// A series term below `exp(-30)` ends a fractional order's sum (Opacus's
/// cut-off); a sum still going after this many terms is refused rather
/// than left to run forever.
const MAX_SERIES_TERMS: u64 = 10_000_000;

/// Past this argument `erfc` nears the bottom of f64's normal range, so
/// `log(erfc(x))` comes from its asymptotic series instead.
const ERFC_ASYMPTOTIC_FROM: f64 = 26.0;

/// `log(exp(logx) + exp(logy))` without leaving log space.
fn log_add(logx: f64, logy: f64) -> f64 {
    let (a, b) = (logx.min(logy), logx.max(logy));
    if a == f64::NEG_INFINITY {
        return b;
    }
    (a - b).exp().ln_1p() + b
}

/// `log(exp(logx) - exp(logy))`; an error where the difference would be
/// negative. Where `exp(logx - logy)` overflows the result is `logx`, as
/// Opacus answers Python's `OverflowError`.
fn log_sub(logx: f64, logy: f64) -> Result<f64> {
    if logx < logy {
        return Err(Error::invalid(
            "compute_rdp",
            format!("log-space subtraction exp({logx}) - exp({logy}) would be negative"),
        ));
    }
    if logy == f64::NEG_INFINITY {
        return Ok(logx);
    }
    if logx == logy {
        return Ok(f64::NEG_INFINITY);
    }
    let d = (logx - logy).exp_m1();
    if d == f64::INFINITY {
        return Ok(logx);
    }
    Ok(d.ln() + logy)
}

/// `log(erfc(x))`, accurate where `erfc(x)` underflows: libm's `erfc` up
/// to 26 (still a normal f64), then the asymptotic series
/// `erfc(x) = exp(-x²)/(x√π) · Σ (-1)^k (2k-1)!! / (2x²)^k`, whose eighth
/// term is below 2e-19 there.
fn log_erfc(x: f64) -> f64 {
    if x < ERFC_ASYMPTOTIC_FROM {
        return libm::erfc(x).ln();
    }
    let inv = 1.0 / (2.0 * x * x);
    let (mut term, mut series) = (1.0, 0.0);
    for k in 1..=8 {
        term *= -f64::from(2 * k - 1) * inv;
        series += term;
    }
    -(x * x) - x.ln() - 0.5 * std::f64::consts::PI.ln() + series.ln_1p()
}

/// `log(A_α)` for an integer order: the finite binomial sum.
fn log_a_int(q: f64, sigma: f64, alpha: u64) -> f64 {
    let (log_q, log_1mq) = (q.ln(), (1.0 - q).ln());
    let two_var = 2.0 * (sigma * sigma);
    let mut log_a = f64::NEG_INFINITY;
    let mut binom = 1.0_f64; // C(alpha, i), exact while below 2^53
    for i in 0..=alpha {
        if i > 0 {
            binom = binom * (alpha - i + 1) as f64 / i as f64;
        }
        let fi = i as f64;
        let log_coef = binom.ln() + fi * log_q + (alpha - i) as f64 * log_1mq;
        let s = log_coef + (fi * fi - fi) / two_var;
        log_a = log_add(log_a, s);
    }
    log_a
}

/// `log(A_α)` for a fractional order: the integrals over `(-∞, z0]` and
/// `[z0, ∞)` as two series with alternating signs once `i > α`, summed
/// until both terms fall below `exp(-30)`.
fn log_a_frac(q: f64, sigma: f64, alpha: f64) -> Result<f64> {
    let (log_q, log_1mq) = (q.ln(), (1.0 - q).ln());
    let two_var = 2.0 * (sigma * sigma);
    let z0 = sigma * sigma * (1.0 / q - 1.0).ln() + 0.5;
    let scale = SQRT_2 * sigma;
    let log_half = 0.5_f64.ln();
    let (mut log_a0, mut log_a1) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    let mut coef = 1.0_f64; // the generalised binomial C(alpha, i)
    for i in 0..MAX_SERIES_TERMS {
        let fi = i as f64;
        let log_coef = coef.abs().ln();
        let j = alpha - fi;
        let log_t0 = log_coef + fi * log_q + j * log_1mq;
        let log_t1 = log_coef + j * log_q + fi * log_1mq;
        let log_e0 = log_half + log_erfc((fi - z0) / scale);
        let log_e1 = log_half + log_erfc((z0 - j) / scale);
        let log_s0 = log_t0 + (fi * fi - fi) / two_var + log_e0;
        let log_s1 = log_t1 + (j * j - j) / two_var + log_e1;
        if log_s0.is_nan() || log_s1.is_nan() {
            break;
        }
        if coef > 0.0 {
            log_a0 = log_add(log_a0, log_s0);
            log_a1 = log_add(log_a1, log_s1);
        } else {
            log_a0 = log_sub(log_a0, log_s0)?;
            log_a1 = log_sub(log_a1, log_s1)?;
        }
        if log_s0.max(log_s1) < -30.0 {
            return Ok(log_add(log_a0, log_a1));
        }
        coef = coef * (alpha - fi) / (fi + 1.0);
    }
    Err(Error::invalid(
        "compute_rdp",
        format!(
            "the series of order {alpha} did not converge for sample rate {q} and noise multiplier {sigma}"
        ),
    ))
}

/// The RDP of one step at order `alpha` (Opacus's `_compute_rdp`).
fn rdp_of_one_step(q: f64, sigma: f64, alpha: f64) -> Result<f64> {
    if q == 0.0 {
        return Ok(0.0);
    }
    if sigma == 0.0 {
        return Ok(f64::INFINITY); // no noise, no privacy
    }
    if q == 1.0 {
        return Ok(alpha / (2.0 * (sigma * sigma)));
    }
    let log_a = if alpha.fract() == 0.0 && alpha < u64::MAX as f64 {
        log_a_int(q, sigma, alpha as u64)
    } else {
        log_a_frac(q, sigma, alpha)?
    };
    Ok(log_a / (alpha - 1.0))
}

/// The checks of `compute_rdp`'s arguments, one error each.
fn check_rdp_args(q: f64, noise_multiplier: f64, steps: u64, orders: &[f64]) -> Result<()> {
    const OP: &str = "compute_rdp";
    if !(0.0..=1.0).contains(&q) {
        return Err(Error::invalid(
            OP,
            format!("sample rate q must be in [0, 1], got {q}"),
        ));
    }
    if !(noise_multiplier.is_finite() && noise_multiplier >= 0.0) {
        return Err(Error::invalid(
            OP,
            format!("noise_multiplier must be finite and >= 0, got {noise_multiplier}"),
        ));
    }
    if steps == 0 {
        return Err(Error::invalid(OP, "steps must be at least 1, got 0"));
    }
    if let Some(a) = orders.iter().find(|a| !(a.is_finite() && **a > 1.0)) {
        return Err(Error::invalid(
            OP,
            format!("orders must be finite and > 1, got {a}"),
        ));
    }
    Ok(())
}

/// The RDP at each of `orders` of `steps` steps of the sampled Gaussian
/// mechanism with sample rate `q` and noise multiplier `noise_multiplier`
/// (Opacus's `compute_rdp`). An entry is infinite without noise; `q = 0`
/// costs nothing. Errors: `q` outside `[0, 1]`, a negative or non-finite
/// noise multiplier, zero steps, an order not finite and above 1.
///
/// ```
/// use retrograd::optim::privacy::try_compute_rdp;
/// let rdp = try_compute_rdp(0.01, 1.0, 1000, &[1.5, 2.0, 8.0])?;
/// assert!((rdp[0] - 0.127253744).abs() < 1e-9 && (rdp[2] - 0.893643908).abs() < 1e-9);
/// // The full batch (q = 1): α / (2σ²) a step.
/// assert_eq!(try_compute_rdp(1.0, 2.0, 10, &[2.0, 8.0])?, vec![2.5, 10.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn try_compute_rdp(
    q: f64,
    noise_multiplier: f64,
    steps: u64,
    orders: &[f64],
) -> Result<Vec<f64>> {
    check_rdp_args(q, noise_multiplier, steps, orders)?;
    orders
        .iter()
        .map(|&alpha| Ok(rdp_of_one_step(q, noise_multiplier, alpha)? * steps as f64))
        .collect()
}

/// Like [`try_compute_rdp`], but panics with its error at the caller's line.
///
/// ```
/// use retrograd::optim::privacy::compute_rdp;
/// assert_eq!(compute_rdp(1.0, 1.0, 3, &[4.0]), vec![6.0]);
/// ```
#[track_caller]
pub fn compute_rdp(q: f64, noise_multiplier: f64, steps: u64, orders: &[f64]) -> Vec<f64> {
    or_panic(try_compute_rdp(q, noise_multiplier, steps, orders))
}

/// The (ε, δ) guarantee of RDP values `rdp` at `orders`: the smallest over
/// the orders of the conversion of Balle et al. (2020), which Opacus uses,
/// `ε = rdp - (log δ + log α) / (α - 1) + log((α - 1) / α)`, and the order
/// that gives it. Orders whose ε is NaN are skipped (if all are, the result
/// is `(∞, NaN)`); ties go to the first. Errors: `delta` outside `(0, 1)`,
/// no orders, or `orders` and `rdp` of different lengths.
///
/// A best order that is the first or last of `orders` suggests a wider
/// range would give a smaller ε (Opacus warns there).
///
/// ```
/// use retrograd::optim::privacy::{try_compute_rdp, try_get_privacy_spent};
/// // Opacus's example: two phases, orders 2..=32.
/// let orders: Vec<f64> = (2..=32).map(f64::from).collect();
/// let a = try_compute_rdp(1e-5, 1.0, 10, &orders)?;
/// let b = try_compute_rdp(1e-4, 3.0, 4, &orders)?;
/// let rdp: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
/// let (eps, order) = try_get_privacy_spent(&orders, &rdp, 1e-5)?;
/// assert!((eps - 0.33634406339259565).abs() < 1e-12);
/// assert_eq!(order, 23.0);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn try_get_privacy_spent(orders: &[f64], rdp: &[f64], delta: f64) -> Result<(f64, f64)> {
    const OP: &str = "get_privacy_spent";
    if !(delta > 0.0 && delta < 1.0) {
        return Err(Error::invalid(
            OP,
            format!("delta must be in (0, 1), got {delta}"),
        ));
    }
    if orders.len() != rdp.len() {
        return Err(Error::invalid(
            OP,
            format!("{} orders but {} RDP values", orders.len(), rdp.len()),
        ));
    }
    if orders.is_empty() {
        return Err(Error::invalid(OP, "no orders to convert from"));
    }
    let log_delta = delta.ln();
    let mut best: Option<(f64, f64)> = None;
    for (&alpha, &r) in orders.iter().zip(rdp) {
        let eps = r - (log_delta + alpha.ln()) / (alpha - 1.0) + ((alpha - 1.0) / alpha).ln();
        if !eps.is_nan() && best.is_none_or(|(b, _)| eps < b) {
            best = Some((eps, alpha));
        }
    }
    Ok(best.unwrap_or((f64::INFINITY, f64::NAN)))
}

/// Like [`try_get_privacy_spent`], but panics with its error at the caller's line.
///
/// ```
/// use retrograd::optim::privacy::get_privacy_spent;
/// let (eps, order) = get_privacy_spent(&[2.0, 4.0], &[0.5, 1.0], 1e-5);
/// assert_eq!(order, 4.0);
/// assert!((eps - (1.0 - (1e-5f64.ln() + 4f64.ln()) / 3.0 + 0.75f64.ln())).abs() < 1e-15);
/// ```
#[track_caller]
pub fn get_privacy_spent(orders: &[f64], rdp: &[f64], delta: f64) -> (f64, f64) {
    or_panic(try_get_privacy_spent(orders, rdp, delta))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_orders_are_opacus_alphas() {
        assert_eq!(DEFAULT_ORDERS[9], 2.0);
        assert_eq!(DEFAULT_ORDERS[0], 1.0 + 1.0 / 10.0);
        assert_eq!(DEFAULT_ORDERS[99], 12.0);
        assert!(DEFAULT_ORDERS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn log_erfc_matches_scipy_and_is_continuous_at_the_switch() {
        // Opacus's _log_erfc (scipy's log_ndtr) at these points.
        let cases = [
            (30.0, -903.9741171106442),
            (26.0, -679.8311997631946),
            (25.999, -679.779162357606),
            (-3.0, 0.6931361352504468),
            (0.5, -0.7350111298370848),
            (1.0, -1.849605509933249),
            (100.0, -10005.177585122668),
            (1e4, -100000009.78270535),
        ];
        for (x, want) in cases {
            let got = log_erfc(x);
            assert!(
                (got - want).abs() <= 1e-13 * want.abs().max(1.0),
                "{x}: {got} vs {want}"
            );
        }
        let below = libm::erfc(26.0).ln();
        assert!((log_erfc(26.0) - below).abs() < 1e-12);
    }

    #[test]
    fn log_space_arithmetic() {
        let (a, b) = (2.0_f64.ln(), 3.0_f64.ln());
        assert!((log_add(a, b) - 5.0_f64.ln()).abs() < 1e-15);
        assert_eq!(log_add(f64::NEG_INFINITY, b), b);
        assert!((log_sub(b, a).unwrap() - 0.0).abs() < 1e-15);
        assert_eq!(log_sub(b, b).unwrap(), f64::NEG_INFINITY);
        assert_eq!(log_sub(b, f64::NEG_INFINITY).unwrap(), b);
        assert_eq!(log_sub(1000.0, 1.0).unwrap(), 1000.0); // exp_m1 overflows
        let e = log_sub(a, b).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("compute_rdp: log-space subtraction"),
            "{e}"
        );
    }

    #[test]
    fn integer_and_fractional_orders_agree_near_each_other() {
        // A_α is smooth in α: the two sums meet at the integers.
        let r = compute_rdp(0.01, 1.0, 1, &[3.0 - 1e-9, 3.0, 3.0 + 1e-9]);
        assert!(
            (r[0] - r[1]).abs() < 1e-9 && (r[2] - r[1]).abs() < 1e-9,
            "{r:?}"
        );
    }
}

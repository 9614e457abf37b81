//! Cross-entropy and negative log-likelihood over class lanes.
//!
//! Logits (or log-probabilities) are seen as lanes along the class axis
//! ([`AxisLanes`]): `[C]`, `[N, C]` and `[N, C, d...]` alike. Targets are
//! one class index per lane, already validated by the op (each in `0..C` or
//! equal to `ignore_index`). Losses are computed per lane here; the op
//! reduces them (mean divides by [`Targets::denominator`], PyTorch's rule).
//!
//! Cross-entropy with label smoothing `ε` and class weights `w` is PyTorch's
//! `(1 - ε) * nll + ε / C * smooth`, per lane
//! `nll = w_t (lse - x_t)` and `smooth = Σ_c w_c (lse - x_c)`, where
//! `lse = m + ln Σ_c e^(x_c - m)` with `m` the lane's maximum, so the loss
//! stays finite for any finite logits. The forward pass keeps nothing: the
//! backward recomputes the lane's softmax in the same pass that writes the
//! gradient, `(A p_c - B_c) * g / D`. That costs one (vectorised) `exp` per
//! element instead of writing and later re-reading a saved `[N, C]`
//! probability tensor, and it keeps the op free of per-call state, so one
//! op instance can be shared (as the registry's is) across calls and graphs.

use std::mem::MaybeUninit;

use super::lanes::{exp_shifted_rows, for_each_block, init, AxisLanes, BlockScratch, RowStats};
use super::NnFloat;
use crate::tensor::{Dims, Element, Filled, Tensor};

/// Targets and options of a classification loss, one class index per lane.
#[derive(Clone, Copy, Debug)]
pub struct Targets<'a, T> {
    /// One class index per lane (validated: in `0..C` or `ignore_index`).
    pub classes: &'a [i64],
    /// Lanes whose target equals this contribute nothing (and do not count).
    pub ignore_index: Option<i64>,
    /// Optional per-class weights, `C` of them.
    pub weight: Option<&'a [T]>,
    /// Label smoothing `ε` in `[0, 1]` (cross-entropy only).
    pub label_smoothing: f64,
}

impl<T: Element> Targets<'_, T> {
    /// The class of lane `lane`, or `None` if it is ignored.
    #[inline(always)]
    pub fn class(&self, lane: usize) -> Option<usize> {
        let t = self.classes[lane];
        (Some(t) != self.ignore_index).then_some(t as usize)
    }

    #[inline(always)]
    fn weight_of(&self, class: usize) -> T {
        self.weight.map_or(T::one(), |w| w[class])
    }

    /// What `reduction = mean` divides by: the summed weight of the
    /// targets of lanes that are not ignored (their count without weights).
    pub fn denominator(&self) -> f64 {
        (0..self.classes.len())
            .filter_map(|lane| self.class(lane))
            .map(|c| self.weight_of(c).to_f64())
            .sum()
    }
}

/// Per-lane cross-entropy of logits `x` (lanes along the class axis), as a
/// 1-d tensor of `lanes.count()` losses (0 for ignored lanes).
pub fn cross_entropy_lanes<T: NnFloat>(x: &[T], lanes: AxisLanes, targets: &Targets<T>) -> Tensor {
    let c = lanes.len;
    let eps = T::from_f64(targets.label_smoothing);
    let keep = T::one() - eps;
    let smooth = eps / T::from_f64(c as f64);
    Tensor::build::<T>(Dims::from_slice(&[lanes.count()]), |out| {
        for_each_block(lanes, [x], out, 1, |first, [rows], losses| {
            let mut e: BlockScratch<T> = smallvec::smallvec![T::zero(); rows.len()];
            let (mut maxes, mut sums) = (RowStats::new(), RowStats::new());
            exp_shifted_rows(rows, c, &mut e, &mut maxes, &mut sums);
            for (j, (r, (&m, &s))) in rows
                .chunks_exact(c)
                .zip(maxes.iter().zip(&sums))
                .enumerate()
            {
                let Some(t) = targets.class(first + j) else {
                    continue; // ignored lanes stay 0
                };
                let log_sum = s.ln();
                let w_t = targets.weight_of(t);
                let mut loss = keep * w_t * ((m - r[t]) + log_sum);
                if eps > T::zero() {
                    // Σ_c w_c (lse - x_c) with every term >= 0: no cancellation.
                    let s = match targets.weight {
                        None => {
                            r.iter().fold(T::zero(), |s, &v| s + (m - v))
                                + T::from_f64(c as f64) * log_sum
                        }
                        Some(w) => r
                            .iter()
                            .zip(w)
                            .fold(T::zero(), |s, (&v, &wc)| s + wc * ((m - v) + log_sum)),
                    };
                    loss += smooth * s;
                }
                losses[j] = loss;
            }
        })
    })
}

/// The gradient of cross-entropy with respect to the logits: for each lane,
/// `coef * (A p_c - B_c)` with `p` the lane's softmax, `A = (1-ε) w_t + ε/C Σ w`,
/// `B_c = (1-ε) w_t [c = t] + ε/C w_c` and `coef = g(lane) * scale`. `g` holds
/// one value (a reduced loss) or one per lane; ignored lanes get zeros.
/// Writes every element of `out` (through [`for_each_block`]).
pub fn cross_entropy_backward_lanes<'o, T: NnFloat>(
    g: &[T],
    x: &[T],
    lanes: AxisLanes,
    targets: &Targets<T>,
    scale: f64,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    let c = lanes.len;
    let eps = T::from_f64(targets.label_smoothing);
    let keep = T::one() - eps;
    let smooth = eps / T::from_f64(c as f64);
    let total_weight = targets.weight.map_or(T::from_f64(c as f64), |w| {
        w.iter().fold(T::zero(), |s, &v| s + v)
    });
    let scale = T::from_f64(scale);
    for_each_block(lanes, [x], out, c, |first, [rows], o| {
        let (mut maxes, mut sums) = (RowStats::new(), RowStats::new());
        exp_shifted_rows(rows, c, o, &mut maxes, &mut sums);
        for (j, (orow, &s)) in o.chunks_exact_mut(c).zip(&sums).enumerate() {
            let lane = first + j;
            let Some(t) = targets.class(lane) else {
                orow.iter_mut().for_each(|v| *v = T::zero());
                continue;
            };
            let coef = if g.len() == 1 { g[0] } else { g[lane] } * scale;
            let w_t = targets.weight_of(t);
            let a = (keep * w_t + smooth * total_weight) * coef / s;
            match targets.weight {
                None => {
                    let b = smooth * coef;
                    orow.iter_mut().for_each(|v| *v = *v * a - b);
                }
                Some(w) => {
                    for (v, &wc) in orow.iter_mut().zip(w) {
                        *v = *v * a - smooth * wc * coef;
                    }
                }
            }
            orow[t] -= keep * w_t * coef;
        }
    })
}

/// Per-lane negative log-likelihood `-w_t x[t]` of log-probabilities `x`
/// (0 for ignored lanes), as a 1-d tensor of `lanes.count()` losses.
pub fn nll_lanes<T: Element>(x: &[T], lanes: AxisLanes, targets: &Targets<T>) -> Tensor {
    let losses = (0..lanes.count()).map(|lane| match targets.class(lane) {
        Some(t) => -targets.weight_of(t) * x[lanes.index(lane, t)],
        None => T::zero(),
    });
    Tensor::from_exact_iter(Dims::from_slice(&[lanes.count()]), losses)
}

/// The gradient of the negative log-likelihood: zeros except
/// `-g(lane) * w_t * scale` at each lane's target (`g` one value or one per
/// lane). Writes every element of `out` (zeroed first).
pub fn nll_backward_lanes<'o, T: Element>(
    g: &[T],
    lanes: AxisLanes,
    targets: &Targets<T>,
    scale: f64,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    let zeros = init(out);
    let scale = T::from_f64(scale);
    for lane in 0..lanes.count() {
        if let Some(t) = targets.class(lane) {
            let gv = if g.len() == 1 { g[0] } else { g[lane] };
            zeros[lanes.index(lane, t)] = -gv * targets.weight_of(t) * scale;
        }
    }
    // SAFETY: `init` wrote every element.
    unsafe { Filled::assume(out) }
}

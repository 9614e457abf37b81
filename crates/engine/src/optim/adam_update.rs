//! The element loops of Adam's update: one pass over the parameter, its
//! gradient and its moments, branch-free so it vectorises (the rule is in
//! the docs of [`Adam`](super::Adam)).

use super::{AdamConfig, UpdateContext};
use crate::tensor::Element;

/// The per-step scalars of the update, computed in f64.
#[derive(Clone, Copy)]
pub(super) struct Coefficients {
    pub(super) lr: f64,
    pub(super) decay: f64,
    pub(super) decoupled: bool,
    pub(super) beta1: f64,
    pub(super) beta2: f64,
    pub(super) eps: f64,
    pub(super) step_size: f64,
    pub(super) bias_correction2_sqrt: f64,
    pub(super) maximize: bool,
}

/// How weight decay enters the update (a const parameter of the loops, so
/// each loop body is branch-free and vectorises).
const NO_DECAY: u8 = 0;
const L2_DECAY: u8 = 1;
const DECOUPLED_DECAY: u8 = 2;

/// The rounded scalars of one update, in the element type.
struct Scalars<T> {
    sign: T,
    shrink: T,
    decay: T,
    lerp_weight: T,
    lerp_complement: T,
    beta2: T,
    one_minus_beta2: T,
    bc2_sqrt: T,
    eps: T,
    neg_step_size: T,
}

impl Coefficients {
    /// The scalars of the update `ctx` describes under `config`.
    pub(super) fn new(config: &AdamConfig, ctx: &UpdateContext) -> Self {
        let t = ctx.step as f64;
        Coefficients {
            lr: ctx.lr,
            decay: ctx.weight_decay,
            decoupled: config.decoupled_weight_decay,
            beta1: config.beta1,
            beta2: config.beta2,
            eps: config.eps,
            step_size: ctx.lr / (1.0 - config.beta1.powf(t)),
            bias_correction2_sqrt: (1.0 - config.beta2.powf(t)).sqrt(),
            maximize: config.maximize,
        }
    }

    fn scalars<T: Element>(&self) -> Scalars<T> {
        let w = T::from_f64(1.0 - self.beta1);
        Scalars {
            sign: super::gradient_sign(self.maximize),
            shrink: T::from_f64(1.0 - self.lr * self.decay),
            decay: T::from_f64(self.decay),
            lerp_weight: w,
            lerp_complement: T::one() - w,
            beta2: T::from_f64(self.beta2),
            one_minus_beta2: T::from_f64(1.0 - self.beta2),
            bc2_sqrt: T::from_f64(self.bias_correction2_sqrt),
            eps: T::from_f64(self.eps),
            neg_step_size: T::from_f64(-self.step_size),
        }
    }

    fn decay_mode(&self) -> u8 {
        match (self.decay != 0.0, self.decoupled) {
            (false, _) => NO_DECAY,
            (true, false) => L2_DECAY,
            (true, true) => DECOUPLED_DECAY,
        }
    }
}

/// Weight decay and both moments for one element. `m` moves toward `d` as
/// PyTorch's CPU `lerp` computes it: `m + w (d - m)` for a weight below one
/// half, `d - (d - m)(1 - w)` otherwise (`SMALL_W`).
#[inline(always)]
fn moments<T: Element, const DECAY: u8, const SMALL_W: bool>(
    p: &mut T,
    g: T,
    m: &mut T,
    v: &mut T,
    s: &Scalars<T>,
) {
    let mut d = g * s.sign;
    if DECAY == L2_DECAY {
        d += s.decay * *p;
    } else if DECAY == DECOUPLED_DECAY {
        *p *= s.shrink;
    }
    *m = if SMALL_W {
        *m + s.lerp_weight * (d - *m)
    } else {
        d - (d - *m) * s.lerp_complement
    };
    *v = *v * s.beta2 + s.one_minus_beta2 * d * d;
}

/// `p += -step_size * m / (sqrt(v_hat) / sqrt(1 - beta2^t) + eps)`.
#[inline(always)]
fn apply<T: Element>(p: &mut T, m: T, v_hat: T, s: &Scalars<T>) {
    let denom = v_hat.sqrt() / s.bc2_sqrt + s.eps;
    *p += s.neg_step_size * m / denom;
}

// Not inlined: as separate functions the `&mut` slices keep their no-alias
// guarantee, which is what lets the loop vectorise.
#[inline(never)]
fn adam_loop<T: Element, const DECAY: u8, const SMALL_W: bool>(
    p: &mut [T],
    g: &[T],
    m: &mut [T],
    v: &mut [T],
    s: &Scalars<T>,
) {
    for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
        moments::<T, DECAY, SMALL_W>(p, g, m, v, s);
        apply(p, *m, *v, s);
    }
}

#[inline(never)]
fn amsgrad_loop<T: Element, const DECAY: u8, const SMALL_W: bool>(
    p: &mut [T],
    g: &[T],
    m: &mut [T],
    v: &mut [T],
    vmax: &mut [T],
    s: &Scalars<T>,
) {
    let it = p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut());
    for ((((p, &g), m), v), vmax) in it.zip(vmax.iter_mut()) {
        moments::<T, DECAY, SMALL_W>(p, g, m, v, s);
        // torch.maximum: NaN in either operand gives NaN.
        // (A non-short-circuit `|`: a select the loop can vectorise.)
        *vmax = if (*v > *vmax) | v.is_nan() { *v } else { *vmax };
        apply(p, *m, *vmax, s);
    }
}

/// Picks the loop instance for the run-time flags.
macro_rules! dispatch {
    ($k:expr, $s:expr, $f:ident, $($arg:expr),*) => {{
        let small = $s.lerp_weight.abs() < T::from_f64(0.5);
        match ($k.decay_mode(), small) {
            (NO_DECAY, true) => $f::<T, NO_DECAY, true>($($arg),*, &$s),
            (NO_DECAY, false) => $f::<T, NO_DECAY, false>($($arg),*, &$s),
            (L2_DECAY, true) => $f::<T, L2_DECAY, true>($($arg),*, &$s),
            (L2_DECAY, false) => $f::<T, L2_DECAY, false>($($arg),*, &$s),
            (_, true) => $f::<T, DECOUPLED_DECAY, true>($($arg),*, &$s),
            (_, false) => $f::<T, DECOUPLED_DECAY, false>($($arg),*, &$s),
        }
    }};
}

pub(super) fn adam_kernel<T: Element>(
    p: &mut [T],
    g: &[T],
    m: &mut [T],
    v: &mut [T],
    k: Coefficients,
) {
    let s = k.scalars::<T>();
    dispatch!(k, s, adam_loop, p, g, m, v)
}

pub(super) fn adam_amsgrad_kernel<T: Element>(
    p: &mut [T],
    g: &[T],
    m: &mut [T],
    v: &mut [T],
    vmax: &mut [T],
    k: Coefficients,
) {
    let s = k.scalars::<T>();
    dispatch!(k, s, amsgrad_loop, p, g, m, v, vmax)
}

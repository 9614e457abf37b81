//! Stochastic gradient descent as an [`UpdateRule`] (`torch.optim.SGD`);
//! the rule is written out on [`Sgd`].

use super::rule::{
    hyperparameters, rule_basics, Direction, StateField, Step, UpdateContext, UpdateRule,
};
use super::{check_non_negative, OptimizerKind, RuleOptimizer};
use crate::base::error::{Error, Result};
use crate::tensor::Element;

hyperparameters! {
    /// Hyperparameters of [`Sgd`], with PyTorch's defaults
    /// (`torch.optim.SGD()`: lr 1e-3, no momentum, dampening or weight
    /// decay); [`SgdConfig::new`] gives the learning rate, as most uses do.
    ///
    /// ```
    /// use retrograd::optim::SgdConfig;
    /// let c = SgdConfig::new(0.1).momentum(0.9).nesterov(true).weight_decay(5e-4);
    /// assert_eq!(c.momentum, 0.9);
    /// assert_eq!(SgdConfig::default().lr, 1e-3);
    /// ```
    pub struct SgdConfig {
        /// Learning rate.
        lr: f64 = 1e-3 => check_non_negative;
        /// Momentum factor (0: plain SGD).
        momentum: f64 = 0.0 => check_non_negative, set "Sets the momentum factor.";
        /// Dampening of the gradient's contribution to the momentum buffer.
        dampening: f64 = 0.0 => check_non_negative, set "Sets the dampening.";
        /// L2 penalty added to the gradient: `d += weight_decay * p`.
        weight_decay: f64 = 0.0 => check_non_negative, set "Sets the L2 weight decay.";
        /// Nesterov momentum (needs `momentum > 0` and `dampening == 0`).
        nesterov: bool = false, set "Turns Nesterov momentum on or off.";
        /// Maximise the objective instead of minimising it.
        maximize: bool = false, set "Maximise instead of minimise.";
    }
}

impl SgdConfig {
    /// Plain SGD with learning rate `lr`.
    pub fn new(lr: f64) -> Self {
        SgdConfig {
            lr,
            ..Self::default()
        }
    }
}

/// Stochastic gradient descent with PyTorch's update rule (`torch.optim.SGD`):
///
/// ```text
/// d = grad (negated if maximize) + weight_decay * p
/// b = d                                  on the first step
/// b = momentum * b + (1 - dampening) * d on later steps
/// d = d + momentum * b   (Nesterov)   or   d = b
/// p = p - lr * d
/// ```
///
/// ```
/// use retrograd::{Graph, Tensor, nn::Parameter, optim::{Optimizer, Sgd, SgdConfig}};
/// let w = Parameter::new(Tensor::scalar(1.0));
/// let mut opt = Sgd::new([&w], SgdConfig::new(0.1).momentum(0.9))?;
/// for _ in 0..2 {
///     let g = Graph::new();
///     opt.step(&(g.param(&w) * 2.0).backward()?)?;   // gradient 2
/// }
/// // step 1: b = 2, w = 1 - 0.2 = 0.8; step 2: b = 0.9 * 2 + 2 = 3.8, w = 0.8 - 0.38
/// assert!((w.value().try_item()? - 0.42).abs() < 1e-12);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub type Sgd = RuleOptimizer<SgdConfig>;

/// The registered kind.
pub(super) const KINDS: &[OptimizerKind] = &[OptimizerKind {
    name: "sgd",
    summary: "SGD with momentum, dampening, Nesterov and L2 weight decay (torch.optim.SGD)",
    build: |params, s| {
        let config = SgdConfig::new(s.lr).momentum(s.momentum_or(0.0));
        Sgd::boxed(params, config.weight_decay(s.decay_or(0.0)))
    },
}];

impl UpdateRule for SgdConfig {
    rule_basics!("Sgd", kind = KINDS[0].name);

    fn validate(&self) -> Result<()> {
        self.check_declared(Self::NAMES.name)?;
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(Error::invalid(
                "Sgd",
                "Nesterov momentum requires a momentum > 0 and zero dampening",
            ));
        }
        Ok(())
    }

    fn state_fields(&self) -> Vec<StateField> {
        if self.momentum == 0.0 {
            Vec::new()
        } else {
            vec![StateField::zeros("momentum_buffer")]
        }
    }

    fn update<T: Element>(&self, step: Step<'_, T>) -> Result<()> {
        let s = Scalars::<T>::new(self, &step.ctx);
        let s = &s;
        if self.momentum == 0.0 {
            step.each_chunk(|p, g, []| {
                if s.dir.has_decay {
                    plain_loop::<T, true>(p, g, s)
                } else {
                    plain_loop::<T, false>(p, g, s)
                }
            })
        } else {
            let (first, nesterov) = (step.ctx.first, self.nesterov);
            step.each_chunk(|p, g, [b]| momentum_chunk(p, g, b, first, nesterov, s))
        }
    }
}

/// The rounded scalars of one update, in the element type.
struct Scalars<T> {
    dir: Direction<T>,
    neg_lr: T,
    momentum: T,
    keep: T,
}

impl<T: Element> Scalars<T> {
    fn new(c: &SgdConfig, ctx: &UpdateContext) -> Self {
        Scalars {
            dir: Direction::new(c.maximize, ctx),
            neg_lr: T::from_f64(-ctx.lr),
            momentum: T::from_f64(c.momentum),
            keep: T::from_f64(1.0 - c.dampening),
        }
    }
}

// The loops are separate, non-inlined functions with their options as const
// parameters: branch-free bodies over `&mut` slices that keep their no-alias
// guarantee, so they vectorise.
#[inline(never)]
fn plain_loop<T: Element, const DECAY: bool>(p: &mut [T], g: &[T], s: &Scalars<T>) {
    for (p, &g) in p.iter_mut().zip(g) {
        let d = s.dir.with::<DECAY>(*p, g);
        *p += s.neg_lr * d;
    }
}

/// SGD with a momentum buffer `b` (see [`Sgd`] for the rule), over one chunk.
fn momentum_chunk<T: Element>(
    p: &mut [T],
    g: &[T],
    b: &mut [T],
    first: bool,
    nesterov: bool,
    s: &Scalars<T>,
) {
    match (s.dir.has_decay, first, nesterov) {
        (false, false, false) => momentum_loop::<T, false, false, false>(p, g, b, s),
        (false, false, true) => momentum_loop::<T, false, false, true>(p, g, b, s),
        (false, true, false) => momentum_loop::<T, false, true, false>(p, g, b, s),
        (false, true, true) => momentum_loop::<T, false, true, true>(p, g, b, s),
        (true, false, false) => momentum_loop::<T, true, false, false>(p, g, b, s),
        (true, false, true) => momentum_loop::<T, true, false, true>(p, g, b, s),
        (true, true, false) => momentum_loop::<T, true, true, false>(p, g, b, s),
        (true, true, true) => momentum_loop::<T, true, true, true>(p, g, b, s),
    }
}

#[inline(never)]
fn momentum_loop<T: Element, const DECAY: bool, const FIRST: bool, const NESTEROV: bool>(
    p: &mut [T],
    g: &[T],
    b: &mut [T],
    s: &Scalars<T>,
) {
    for ((p, &g), b) in p.iter_mut().zip(g).zip(b.iter_mut()) {
        let mut d = s.dir.with::<DECAY>(*p, g);
        *b = if FIRST {
            d
        } else {
            *b * s.momentum + s.keep * d
        };
        d = if NESTEROV { d + s.momentum * *b } else { *b };
        *p += s.neg_lr * d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::Parameter;
    use crate::optim::testing::grads_of_sum_sq as quadratic_grads;
    use crate::optim::{Optimizer, StateDict};
    use crate::Tensor;

    #[test]
    fn plain_sgd_step_by_hand() {
        let w = Parameter::new(Tensor::from_vec(vec![1.0f32, -2.0], &[2]).unwrap());
        let mut opt = Sgd::new([&w], SgdConfig::new(0.25)).unwrap();
        opt.step(&quadratic_grads(&w)).unwrap(); // grad 2w: w - 0.5 w = 0.5 w
        assert_eq!(w.value().to_vec::<f32>().unwrap(), vec![0.5, -1.0]);
        assert!(opt.state_dict().is_empty());
    }

    #[test]
    fn update_is_in_place_when_storage_is_unshared() {
        let w = Parameter::new(Tensor::from_vec(vec![1.0f64; 8], &[8]).unwrap());
        let mut opt = Sgd::new([&w], SgdConfig::new(0.1).momentum(0.9)).unwrap();
        let grads = quadratic_grads(&w);
        let before = w.value().as_slice::<f64>().unwrap().as_ptr();
        opt.step(&grads).unwrap();
        opt.step(&grads).unwrap();
        assert_eq!(w.value().as_slice::<f64>().unwrap().as_ptr(), before);
    }

    #[test]
    fn rejects_bad_configs_and_duplicates() {
        let w = Parameter::new(Tensor::scalar(1.0));
        assert!(Sgd::new([&w], SgdConfig::new(-1.0)).is_err());
        assert!(Sgd::new([&w], SgdConfig::new(0.1).nesterov(true)).is_err());
        assert!(Sgd::new(
            [&w],
            SgdConfig::new(0.1)
                .momentum(0.9)
                .dampening(0.1)
                .nesterov(true)
        )
        .is_err());
        assert!(Sgd::new([&w, &w], SgdConfig::new(0.1)).is_err());
        assert!(Sgd::new(
            [("a", w.clone()), ("a", Parameter::new(Tensor::scalar(1.0)))],
            SgdConfig::new(0.1)
        )
        .is_err());
    }

    #[test]
    fn parameters_without_gradients_are_skipped() {
        let used = Parameter::new(Tensor::scalar(1.0));
        let unused = Parameter::new(Tensor::scalar(5.0));
        let mut opt = Sgd::new([&used, &unused], SgdConfig::new(0.1).momentum(0.5)).unwrap();
        opt.step(&quadratic_grads(&used)).unwrap();
        assert_eq!(unused.value().item(), 5.0);
        let state = opt.state_dict();
        assert!(state.contains_key("0.momentum_buffer"));
        assert!(!state.contains_key("1.momentum_buffer"));
    }

    #[test]
    fn state_round_trips_and_load_checks() {
        let w = Parameter::new(Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap());
        let mut a = Sgd::new([("w", w.clone())], SgdConfig::new(0.1).momentum(0.9)).unwrap();
        a.step(&quadratic_grads(&w)).unwrap();
        let state = a.state_dict();
        let mut b = Sgd::new([("w", w.clone())], SgdConfig::new(0.1).momentum(0.9)).unwrap();
        b.load_state_dict(&state).unwrap();
        assert_eq!(b.state_dict(), state);

        let mut extra = state.clone();
        extra.insert("v.momentum_buffer".into(), Tensor::scalar(0.0));
        let err = b.load_state_dict(&extra).unwrap_err();
        assert!(
            matches!(err, Error::TensorMismatch { ref name, .. } if name == "v.momentum_buffer")
        );

        let mut wrong = StateDict::new();
        wrong.insert(
            "w.momentum_buffer".into(),
            Tensor::zeros(&[3], crate::DType::F64).unwrap(),
        );
        assert!(matches!(
            b.load_state_dict(&wrong),
            Err(Error::TensorMismatch {
                problem: crate::TensorProblem::Shape { .. },
                ..
            })
        ));
        assert_eq!(b.state_dict(), state, "a failed load changes nothing");
    }
}

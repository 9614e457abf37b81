//! RMSprop as an [`UpdateRule`] (`torch.optim.RMSprop`); the rule is
//! written out on [`RMSprop`].

use super::rule::{
    hyperparameters, rule_basics, Direction, StateField, Step, UpdateContext, UpdateRule,
};
use super::{check_non_negative, OptimizerKind, RuleOptimizer};
use crate::base::error::{Error, Result};
use crate::tensor::Element;

hyperparameters! {
    /// Hyperparameters of [`RMSprop`], with PyTorch's defaults (lr 1e-2,
    /// alpha 0.99, eps 1e-8, no weight decay, no momentum, not centered).
    ///
    /// ```
    /// use retrograd::optim::RMSpropConfig;
    /// let c = RMSpropConfig::default().alpha(0.9).momentum(0.9).centered(true);
    /// assert_eq!((c.lr, c.alpha, c.centered), (0.01, 0.9, true));
    /// ```
    pub struct RMSpropConfig {
        /// Learning rate.
        lr: f64 = 1e-2 => check_non_negative, set "Sets the learning rate.";
        /// Smoothing constant of the squared-gradient average, in [0, 1].
        alpha: f64 = 0.99, set "Sets the smoothing constant.";
        /// Added to the denominator for stability.
        eps: f64 = 1e-8 => check_non_negative, set "Sets epsilon.";
        /// L2 penalty added to the gradient: `d += weight_decay * p`.
        weight_decay: f64 = 0.0 => check_non_negative, set "Sets the L2 weight decay.";
        /// Momentum factor (0: none).
        momentum: f64 = 0.0 => check_non_negative, set "Sets the momentum factor.";
        /// Normalise by the variance of the gradient (its centered second
        /// moment) instead of its uncentered second moment.
        centered: bool = false, set "Turns centering on or off.";
        /// Maximise the objective instead of minimising it.
        maximize: bool = false, set "Maximise instead of minimise.";
    }
}

/// RMSprop with PyTorch's update rule (`torch.optim.RMSprop`), per parameter:
///
/// ```text
/// d = grad (negated if maximize) + weight_decay * p
/// v = alpha v + (1 - alpha) d^2
/// centered:  a = lerp(a, d, 1 - alpha);  s = sqrt(v - a^2) + eps
/// otherwise: s = sqrt(v) + eps
/// momentum:  b = momentum b + d / s;     p = p - lr * b
/// otherwise: p = p - lr * d / s
/// ```
///
/// Its state per parameter: `step`, `square_avg` (v), and with momentum
/// `momentum_buffer` (b), when centered `grad_avg` (a), PyTorch's names.
///
/// ```
/// use retrograd::{Graph, Tensor, nn::Parameter, optim::{Optimizer, RMSprop, RMSpropConfig}};
/// let w = Parameter::new(Tensor::scalar(1.0));
/// let mut opt = RMSprop::new([&w], RMSpropConfig::default().alpha(0.75))?;
/// let g = Graph::new();
/// opt.step(&(g.param(&w) * 2.0).backward()?)?;   // gradient 2: v = 0.25 * 4 = 1
/// assert!((w.value().try_item()? - (1.0 - 0.01 * 2.0 / (1.0 + 1e-8))).abs() < 1e-15);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub type RMSprop = RuleOptimizer<RMSpropConfig>;

/// The registered kind.
pub(super) const KINDS: &[OptimizerKind] = &[OptimizerKind {
    name: "rmsprop",
    summary: "RMSprop with momentum, centering and L2 weight decay (torch.optim.RMSprop)",
    build: |params, s| {
        let config = RMSpropConfig::default()
            .lr(s.lr)
            .momentum(s.momentum_or(0.0));
        RMSprop::boxed(params, config.weight_decay(s.decay_or(0.0)))
    },
}];

impl UpdateRule for RMSpropConfig {
    rule_basics!("RMSprop", kind = KINDS[0].name);

    fn validate(&self) -> Result<()> {
        self.check_declared(Self::NAMES.name)?;
        if !(0.0..=1.0).contains(&self.alpha) {
            let alpha = self.alpha;
            return Err(Error::invalid(
                "RMSprop",
                format!("alpha must be in [0, 1], got {alpha}"),
            ));
        }
        Ok(())
    }

    fn state_fields(&self) -> Vec<StateField> {
        let mut fields = vec![StateField::Step, StateField::zeros("square_avg")];
        if self.momentum > 0.0 {
            fields.push(StateField::zeros("momentum_buffer"));
        }
        if self.centered {
            fields.push(StateField::zeros("grad_avg"));
        }
        fields
    }

    fn update<T: Element>(&self, step: Step<'_, T>) -> Result<()> {
        let s = Scalars::new(self, &step.ctx);
        let s = &s;
        match (self.momentum > 0.0, self.centered) {
            (false, false) => step.each_chunk(|p, g, [v]| {
                for ((p, &g), v) in p.iter_mut().zip(g).zip(v) {
                    let d = s.dir.of(*p, g);
                    *p += s.neg_lr * d / s.plain(v, d);
                }
            }),
            (true, false) => step.each_chunk(|p, g, [v, b]| {
                for (((p, &g), v), b) in p.iter_mut().zip(g).zip(v).zip(b) {
                    let d = s.dir.of(*p, g);
                    s.momentum_step(p, b, d / s.plain(v, d));
                }
            }),
            (false, true) => step.each_chunk(|p, g, [v, a]| {
                for (((p, &g), v), a) in p.iter_mut().zip(g).zip(v).zip(a) {
                    let d = s.dir.of(*p, g);
                    *p += s.neg_lr * d / s.centered(v, a, d);
                }
            }),
            (true, true) => step.each_chunk(|p, g, [v, b, a]| {
                for ((((p, &g), v), b), a) in p.iter_mut().zip(g).zip(v).zip(b).zip(a) {
                    let d = s.dir.of(*p, g);
                    s.momentum_step(p, b, d / s.centered(v, a, d));
                }
            }),
        }
    }
}

/// The rounded scalars of one update, in the element type, and the steps
/// the four variants share, in PyTorch's order of operations.
struct Scalars<T> {
    dir: Direction<T>,
    alpha: T,
    one_minus_alpha: T,
    lerp_complement: T,
    eps: T,
    momentum: T,
    neg_lr: T,
}

impl<T: Element> Scalars<T> {
    fn new(c: &RMSpropConfig, ctx: &UpdateContext) -> Self {
        Scalars {
            dir: Direction::new(c.maximize, ctx),
            alpha: T::from_f64(c.alpha),
            one_minus_alpha: T::from_f64(1.0 - c.alpha),
            lerp_complement: T::one() - T::from_f64(1.0 - c.alpha),
            eps: T::from_f64(c.eps),
            momentum: T::from_f64(c.momentum),
            neg_lr: T::from_f64(-ctx.lr),
        }
    }

    /// Moves the squared-gradient average and returns it.
    #[inline(always)]
    fn average(&self, v: &mut T, d: T) -> T {
        *v = *v * self.alpha + self.one_minus_alpha * d * d;
        *v
    }

    /// The uncentered denominator: moves the average, then `sqrt(v) + eps`.
    #[inline(always)]
    fn plain(&self, v: &mut T, d: T) -> T {
        self.average(v, d).sqrt() + self.eps
    }

    /// The centered denominator: moves both averages, then
    /// `sqrt(v - a^2) + eps`. `a` moves toward `d` as PyTorch's CPU `lerp`
    /// computes it (see `adam_update.rs`).
    #[inline(always)]
    fn centered(&self, v: &mut T, a: &mut T, d: T) -> T {
        let v = self.average(v, d);
        let w = self.one_minus_alpha;
        *a = if w.abs() < T::from_f64(0.5) {
            *a + w * (d - *a)
        } else {
            d - (d - *a) * self.lerp_complement
        };
        (v - *a * *a).sqrt() + self.eps
    }

    /// The momentum variant's move: `b = momentum b + scaled; p -= lr b`.
    #[inline(always)]
    fn momentum_step(&self, p: &mut T, b: &mut T, scaled: T) {
        *b = *b * self.momentum + scaled;
        *p += self.neg_lr * *b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::Parameter;
    use crate::optim::testing::assert_each_rejected;
    use crate::optim::Optimizer;
    use crate::{Graph, Tensor};

    #[test]
    fn state_fields_follow_the_options() {
        let w = Parameter::new(Tensor::from_vec(vec![1.0, -2.0], &[2]).unwrap());
        let config = RMSpropConfig::default().momentum(0.5).centered(true);
        let mut opt = RMSprop::new([("w", w.clone())], config).unwrap();
        let g = Graph::new();
        opt.step(&(g.param(&w) * 3.0).sum().backward().unwrap())
            .unwrap();
        let keys: Vec<String> = opt.state_dict().into_keys().collect();
        assert_eq!(
            keys,
            ["w.grad_avg", "w.momentum_buffer", "w.square_avg", "w.step"]
        );
    }

    #[test]
    fn bad_settings_are_errors_naming_them() {
        assert_each_rejected([
            (RMSpropConfig::default().alpha(1.5), "alpha"),
            (RMSpropConfig::default().alpha(f64::NAN), "alpha"),
            (RMSpropConfig::default().lr(-1.0), "lr"),
            (RMSpropConfig::default().eps(-1.0), "eps"),
            (RMSpropConfig::default().momentum(-0.1), "momentum"),
            (
                RMSpropConfig::default().weight_decay(f64::NAN),
                "weight_decay",
            ),
        ]);
    }
}

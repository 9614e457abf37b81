//! Adagrad as an [`UpdateRule`] (`torch.optim.Adagrad`); the rule is
//! written out on [`Adagrad`].

use super::rule::{hyperparameters, rule_basics, Direction, StateField, Step, UpdateRule};
use super::{check_non_negative, OptimizerKind, RuleOptimizer};
use crate::base::error::Result;
use crate::tensor::Element;

hyperparameters! {
    /// Hyperparameters of [`Adagrad`], with PyTorch's defaults (lr 1e-2, no
    /// learning-rate decay, no weight decay, accumulators starting at 0, eps
    /// 1e-10).
    ///
    /// ```
    /// use retrograd::optim::AdagradConfig;
    /// let c = AdagradConfig::default().lr_decay(1e-3).initial_accumulator_value(0.1);
    /// assert_eq!((c.lr, c.eps, c.initial_accumulator_value), (0.01, 1e-10, 0.1));
    /// ```
    pub struct AdagradConfig {
        /// Learning rate.
        lr: f64 = 1e-2 => check_non_negative, set "Sets the learning rate.";
        /// Learning-rate decay: step `t` uses `lr / (1 + (t - 1) lr_decay)`.
        lr_decay: f64 = 0.0 => check_non_negative, set "Sets the learning-rate decay.";
        /// L2 penalty added to the gradient: `d += weight_decay * p`.
        weight_decay: f64 = 0.0 => check_non_negative, set "Sets the L2 weight decay.";
        /// The value the squared-gradient sums start from.
        initial_accumulator_value: f64 = 0.0 => check_non_negative, set "Sets the accumulators' starting value.";
        /// Added to the denominator for stability.
        eps: f64 = 1e-10 => check_non_negative, set "Sets epsilon.";
        /// Maximise the objective instead of minimising it.
        maximize: bool = false, set "Maximise instead of minimise.";
    }
}

/// Adagrad with PyTorch's update rule (`torch.optim.Adagrad`), per
/// parameter, at step `t`:
///
/// ```text
/// d = grad (negated if maximize) + weight_decay * p
/// sum = sum + d^2                              (sum starts at initial_accumulator_value)
/// p = p - lr / (1 + (t - 1) lr_decay) * d / (sqrt(sum) + eps)
/// ```
///
/// Its state per parameter: `step` and `sum`, PyTorch's names. PyTorch
/// creates the state of every parameter in the constructor; here it is
/// created on a parameter's first gradient, like every other optimizer's,
/// which changes no update.
///
/// ```
/// use retrograd::{Graph, Tensor, nn::Parameter, optim::{Adagrad, AdagradConfig, Optimizer}};
/// let w = Parameter::new(Tensor::scalar(1.0));
/// let mut opt = Adagrad::new([&w], AdagradConfig::default().lr(0.5).eps(0.0))?;
/// for _ in 0..2 {
///     let g = Graph::new();
///     opt.step(&(g.param(&w) * 3.0).backward()?)?;   // gradient 3
/// }
/// // sum 9, then 18: w = 1 - 0.5 * 3 / 3 - 0.5 * 3 / sqrt(18)
/// assert!((w.value().try_item()? - (0.5 - 1.5 / 18f64.sqrt())).abs() < 1e-15);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub type Adagrad = RuleOptimizer<AdagradConfig>;

/// The registered kind.
pub(super) const KINDS: &[OptimizerKind] = &[OptimizerKind {
    name: "adagrad",
    summary: "Adagrad with learning-rate decay and L2 weight decay (torch.optim.Adagrad)",
    build: |params, s| {
        let config = AdagradConfig::default().lr(s.lr);
        Adagrad::boxed(params, config.weight_decay(s.decay_or(0.0)))
    },
}];

impl UpdateRule for AdagradConfig {
    rule_basics!("Adagrad", kind = KINDS[0].name);

    fn validate(&self) -> Result<()> {
        self.check_declared(Self::NAMES.name)
    }

    fn state_fields(&self) -> Vec<StateField> {
        vec![
            StateField::Step,
            StateField::Tensor {
                name: "sum",
                fill: self.initial_accumulator_value,
            },
        ]
    }

    fn update<T: Element>(&self, step: Step<'_, T>) -> Result<()> {
        let ctx = &step.ctx;
        let clr = ctx.lr / (1.0 + (ctx.step - 1) as f64 * self.lr_decay);
        let dir = Direction::<T>::new(self.maximize, ctx);
        let (eps, neg_clr) = (T::from_f64(self.eps), T::from_f64(-clr));
        step.each_chunk(|p, g, [sum]| {
            for ((p, &g), sum) in p.iter_mut().zip(g).zip(sum) {
                let d = dir.of(*p, g);
                *sum += d * d;
                *p += neg_clr * d / (sum.sqrt() + eps);
            }
        })
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
    fn the_accumulator_starts_at_its_initial_value() {
        let w = Parameter::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap());
        let config = AdagradConfig::default().initial_accumulator_value(0.25);
        let mut opt = Adagrad::new([("w", w.clone())], config).unwrap();
        let g = Graph::new();
        opt.step(&(g.param(&w) * 0.0).sum().backward().unwrap())
            .unwrap();
        let state = opt.state_dict();
        assert_eq!(state["w.sum"].to_vec::<f32>().unwrap(), [0.25, 0.25]);
        assert_eq!(state["w.step"].item(), 1.0);
        assert_eq!(w.value().to_vec::<f32>().unwrap(), [1.0, 2.0]);
    }

    #[test]
    fn bad_settings_are_errors_naming_them() {
        assert_each_rejected([
            (AdagradConfig::default().lr(f64::NAN), "lr"),
            (AdagradConfig::default().lr_decay(-1.0), "lr_decay"),
            (AdagradConfig::default().weight_decay(-1.0), "weight_decay"),
            (
                AdagradConfig::default().initial_accumulator_value(-1.0),
                "initial_accumulator_value",
            ),
            (AdagradConfig::default().eps(f64::INFINITY), "eps"),
        ]);
    }
}

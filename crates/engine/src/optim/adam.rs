//! Adam and AdamW as an [`UpdateRule`] (`torch.optim.Adam`,
//! `torch.optim.AdamW`); the rule is written out on [`Adam`], the element
//! loops are in `adam_update.rs`.

use super::adam_update::{adam_amsgrad_kernel, adam_kernel, Coefficients};
use super::rule::{hyperparameters, rule_basics, StateField, Step, UpdateRule};
use super::{check_non_negative, OptimizerKind, RuleOptimizer};
use crate::base::error::{Error, Result};
use crate::tensor::Element;

hyperparameters! {
    /// Hyperparameters of [`Adam`], with PyTorch's defaults:
    /// [`AdamConfig::default`] is `torch.optim.Adam()` (lr 1e-3, betas (0.9,
    /// 0.999), eps 1e-8, no weight decay); [`AdamConfig::adamw`] is
    /// `torch.optim.AdamW()` (the same with decoupled weight decay 1e-2).
    ///
    /// ```
    /// use retrograd::optim::AdamConfig;
    /// let c = AdamConfig::adamw().lr(3e-4).betas(0.9, 0.95);
    /// assert!(c.decoupled_weight_decay);
    /// assert_eq!(c.weight_decay, 0.01);
    /// ```
    pub struct AdamConfig {
        /// Learning rate.
        lr: f64 = 1e-3 => check_non_negative, set "Sets the learning rate.";
        /// Decay rate of the first moment.
        beta1: f64 = 0.9;
        /// Decay rate of the second moment.
        beta2: f64 = 0.999;
        /// Added to the denominator for stability (after bias correction).
        eps: f64 = 1e-8 => check_non_negative, set "Sets epsilon.";
        /// Weight decay: an L2 penalty on the gradient (Adam), or a decoupled
        /// shrinkage of the weights (AdamW).
        weight_decay: f64 = 0.0 => check_non_negative, set "Sets the weight decay (its kind follows `decoupled_weight_decay`).";
        /// Decoupled weight decay (AdamW, Loshchilov & Hutter).
        decoupled_weight_decay: bool = false;
        /// Use the maximum of past second moments (AMSGrad).
        amsgrad: bool = false, set "Turns AMSGrad on or off.";
        /// Maximise the objective instead of minimising it.
        maximize: bool = false, set "Maximise instead of minimise.";
    }
}

impl AdamConfig {
    /// PyTorch's `AdamW` defaults: Adam's, with decoupled weight decay 1e-2.
    pub fn adamw() -> Self {
        AdamConfig {
            weight_decay: 1e-2,
            decoupled_weight_decay: true,
            ..Self::default()
        }
    }

    /// Sets the moment decay rates.
    pub fn betas(mut self, beta1: f64, beta2: f64) -> Self {
        self.beta1 = beta1;
        self.beta2 = beta2;
        self
    }
}

/// Adam, or AdamW with [`AdamConfig::adamw`], with PyTorch's update rules (`torch.optim.Adam`,
/// `torch.optim.AdamW`), per parameter, at step `t`:
///
/// ```text
/// d = grad (negated if maximize)
/// AdamW: p = p * (1 - lr * weight_decay)          (decoupled decay, first)
/// Adam:  d = d + weight_decay * p                  (L2 penalty)
/// m = lerp(m, d, 1 - beta1)                        (= beta1 m + (1 - beta1) d)
/// v = beta2 v + (1 - beta2) d^2
/// v_hat = max(v_hat, v) with amsgrad, else v
/// p = p - (lr / (1 - beta1^t)) * m / (sqrt(v_hat) / sqrt(1 - beta2^t) + eps)
/// ```
///
/// `eps` is added after the bias correction of the second moment, exactly
/// where PyTorch adds it. Scalar coefficients are computed in f64 and
/// rounded to the parameter's dtype, as PyTorch does with Python floats.
///
/// ```
/// use retrograd::{Graph, Tensor, nn::Parameter, optim::{Adam, AdamConfig, Optimizer}};
/// let w = Parameter::new(Tensor::scalar(1.0));
/// let mut opt = Adam::new([&w], AdamConfig::default().lr(0.1))?;
/// let g = Graph::new();
/// opt.step(&(g.param(&w) * 3.0).backward()?)?;
/// // The first bias-corrected step moves by lr * g / (|g| + eps): about lr.
/// assert!((w.value().try_item()? - 0.9).abs() < 1e-8);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub type Adam = RuleOptimizer<AdamConfig>;

/// The registered kinds: Adam, and AdamW (its decoupled weight decay).
pub(super) const KINDS: &[OptimizerKind] = &[
    OptimizerKind {
        name: "adam",
        summary: "Adam with L2 weight decay and AMSGrad (torch.optim.Adam)",
        build: |params, s| {
            let config = AdamConfig::default().lr(s.lr);
            Adam::boxed(params, config.weight_decay(s.decay_or(0.0)))
        },
    },
    OptimizerKind {
        name: "adamw",
        summary: "Adam with decoupled weight decay, default 0.01 (torch.optim.AdamW)",
        build: |params, s| {
            let config = AdamConfig::adamw().lr(s.lr);
            Adam::boxed(params, config.weight_decay(s.decay_or(0.01)))
        },
    },
];

impl UpdateRule for AdamConfig {
    rule_basics!("Adam");

    fn kind(&self) -> &'static str {
        KINDS[usize::from(self.decoupled_weight_decay)].name
    }

    fn validate(&self) -> Result<()> {
        self.check_declared(Self::NAMES.name)?;
        for (what, b) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&b) {
                return Err(Error::invalid(
                    "Adam",
                    format!("{what} must be in [0, 1), got {b}"),
                ));
            }
        }
        Ok(())
    }

    fn state_fields(&self) -> Vec<StateField> {
        let mut fields = vec![
            StateField::Step,
            StateField::zeros("exp_avg"),
            StateField::zeros("exp_avg_sq"),
        ];
        if self.amsgrad {
            fields.push(StateField::zeros("max_exp_avg_sq"));
        }
        fields
    }

    fn update<T: Element>(&self, step: Step<'_, T>) -> Result<()> {
        let k = Coefficients::new(self, &step.ctx);
        if self.amsgrad {
            step.each_chunk(|p, g, [m, v, vmax]| adam_amsgrad_kernel(p, g, m, v, vmax, k))
        } else {
            step.each_chunk(|p, g, [m, v]| adam_kernel(p, g, m, v, k))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::Parameter;
    use crate::optim::testing::grads_of_sum_sq;
    use crate::optim::{Optimizer, ParamGroup};
    use crate::{DType, Gradients, Graph, Tensor, TensorProblem};

    #[test]
    fn first_step_moves_each_weight_by_about_lr() {
        let w = Parameter::new(Tensor::from_vec(vec![1.0f32, -3.0, 0.5], &[3]).unwrap());
        let mut opt = Adam::new([&w], AdamConfig::default().lr(0.01)).unwrap();
        opt.step(&grads_of_sum_sq(&w)).unwrap();
        let got = w.value().to_f64_vec();
        for (g, want) in got.iter().zip([0.99, -2.99, 0.49]) {
            assert!((g - want).abs() < 1e-6, "{got:?}");
        }
    }

    #[test]
    fn update_is_in_place_unless_a_graph_holds_the_weights() {
        let w = Parameter::new(Tensor::from_vec(vec![1.0f32; 16], &[16]).unwrap());
        let mut opt = Adam::new([&w], AdamConfig::default()).unwrap();
        let grads = grads_of_sum_sq(&w);
        let storage = |w: &Parameter| w.value().as_slice::<f32>().unwrap().as_ptr();
        let before = storage(&w);
        opt.step(&grads).unwrap();
        assert_eq!(storage(&w), before, "no graph alive: written in place");
        let g = Graph::new();
        let held = g.param(&w);
        opt.step(&grads).unwrap();
        assert_ne!(storage(&w), before, "a live graph shares it: copied first");
        assert_eq!(held.value().as_slice::<f32>().unwrap().as_ptr(), before);
    }

    #[test]
    fn adamw_decays_without_gradient_scaling() {
        // With a zero gradient Adam's step is 0 and only the decay acts.
        let w = Parameter::new(Tensor::from_vec(vec![2.0f64, -4.0], &[2]).unwrap());
        let mut opt = Adam::new([&w], AdamConfig::adamw().lr(0.1).weight_decay(0.5)).unwrap();
        let g = Graph::new();
        let grads = (g.param(&w) * 0.0).sum().backward().unwrap();
        opt.step(&grads).unwrap();
        assert_eq!(w.value().to_f64_vec(), vec![2.0 * 0.95, -4.0 * 0.95]);
        assert_eq!(opt.kind(), "adamw");
    }

    #[test]
    fn state_dict_names_and_round_trip() {
        let w = Parameter::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap());
        let cfg = AdamConfig::default().amsgrad(true);
        let mut a = Adam::new([("layer.w", w.clone())], cfg.clone()).unwrap();
        a.step(&grads_of_sum_sq(&w)).unwrap();
        a.step(&grads_of_sum_sq(&w)).unwrap();
        let state = a.state_dict();
        let keys: Vec<&str> = state.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "layer.w.exp_avg",
                "layer.w.exp_avg_sq",
                "layer.w.max_exp_avg_sq",
                "layer.w.step"
            ]
        );
        assert_eq!(state["layer.w.step"].item(), 2.0);

        // A fresh optimizer loaded with this state continues identically.
        let w2 = Parameter::new(w.value());
        let mut b = Adam::new([("layer.w", w2.clone())], cfg).unwrap();
        b.load_state_dict(&state).unwrap();
        a.step(&grads_of_sum_sq(&w)).unwrap();
        b.step(&grads_of_sum_sq(&w2)).unwrap();
        assert_eq!(w.value(), w2.value());
    }

    #[test]
    fn load_state_dict_errors_name_the_tensor() {
        let w = Parameter::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap());
        let mut a = Adam::new([("w", w.clone())], AdamConfig::default()).unwrap();
        a.step(&grads_of_sum_sq(&w)).unwrap();
        let state = a.state_dict();

        let mut missing = state.clone();
        missing.remove("w.exp_avg_sq");
        let e = a.load_state_dict(&missing).unwrap_err();
        assert_eq!(
            e,
            Error::TensorMismatch {
                context: "Adam::load_state_dict".into(),
                name: "w.exp_avg_sq".into(),
                problem: TensorProblem::Missing
            }
        );

        let mut dtype = state.clone();
        dtype.insert("w.exp_avg".into(), Tensor::zeros(&[2], DType::F64).unwrap());
        assert!(matches!(
            a.load_state_dict(&dtype),
            Err(Error::TensorMismatch { problem: TensorProblem::DType { .. }, ref name, .. }) if name == "w.exp_avg"
        ));

        let mut step = state.clone();
        step.insert("w.step".into(), Tensor::scalar(-1.0));
        assert!(matches!(
            a.load_state_dict(&step),
            Err(Error::TensorMismatch {
                problem: TensorProblem::Value(_),
                ..
            })
        ));
        assert_eq!(a.state_dict(), state);
    }

    fn two_groups(w: &Parameter, b: &Parameter) -> [ParamGroup; 2] {
        [
            ParamGroup::new([("w", w.clone())]).weight_decay(0.1),
            ParamGroup::new([("b", b.clone())])
                .weight_decay(0.0)
                .lr_scale(0.5),
        ]
    }

    fn grads_of_both(w: &Parameter, b: &Parameter) -> Gradients {
        let g = Graph::new();
        let (x, y) = (g.param(w), g.param(b));
        ((&x * &x).sum() + (&y * &y).sum()).backward().unwrap()
    }

    #[test]
    fn groups_state_dict_is_per_parameter_and_round_trips() {
        let w = Parameter::new(Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap());
        let b = Parameter::new(Tensor::from_vec(vec![0.5f32, -0.5], &[2]).unwrap());
        let cfg = AdamConfig::adamw().lr(0.01);
        let mut a = Adam::with_groups(two_groups(&w, &b), cfg.clone()).unwrap();
        a.step(&grads_of_both(&w, &b)).unwrap();
        let state = a.state_dict();
        // The same keys as an ungrouped optimizer over the same names.
        let mut plain = Adam::new([("w", w.clone()), ("b", b.clone())], cfg.clone()).unwrap();
        plain.step(&grads_of_both(&w, &b)).unwrap();
        assert_eq!(
            state.keys().collect::<Vec<_>>(),
            plain.state_dict().keys().collect::<Vec<_>>()
        );
        // It loads into either, and the grouped copy continues identically.
        plain.load_state_dict(&state).unwrap();
        let (w2, b2) = (Parameter::new(w.value()), Parameter::new(b.value()));
        let mut c = Adam::with_groups(two_groups(&w2, &b2), cfg).unwrap();
        c.load_state_dict(&state).unwrap();
        a.step(&grads_of_both(&w, &b)).unwrap();
        c.step(&grads_of_both(&w2, &b2)).unwrap();
        assert_eq!((w.value(), b.value()), (w2.value(), b2.value()));
    }

    #[test]
    fn group_hyperparameters_and_schedules() {
        let w = Parameter::new(Tensor::zeros(&[2, 2], DType::F64).unwrap());
        let b = Parameter::new(Tensor::zeros(&[2], DType::F64).unwrap());
        let mut opt = Adam::with_groups(two_groups(&w, &b), AdamConfig::adamw()).unwrap();
        assert_eq!(opt.weight_decay_of("w"), Some(0.1));
        assert_eq!(opt.weight_decay_of("b"), Some(0.0));
        assert_eq!(opt.weight_decay_of("nope"), None);
        // A schedule sets the base rate; every group keeps its ratio.
        let mut sched =
            crate::optim::LrScheduler::new(crate::optim::StepLr::new(1, 0.1).unwrap(), &mut opt);
        sched.step(&mut opt);
        assert!((opt.lr() - 1e-4).abs() < 1e-18);
        assert!((opt.lr_of("w").unwrap() - 1e-4).abs() < 1e-18);
        assert!((opt.lr_of("b").unwrap() - 5e-5).abs() < 1e-18);
        // A group without its own decay takes the config's.
        let opt = Adam::with_groups([ParamGroup::new([&w])], AdamConfig::adamw()).unwrap();
        assert_eq!(opt.weight_decay_of("0"), Some(0.01));
    }

    #[test]
    fn bad_groups_are_errors() {
        let w = Parameter::new(Tensor::zeros(&[2, 2], DType::F32).unwrap());
        let b = Parameter::new(Tensor::zeros(&[2], DType::F32).unwrap());
        let cfg = AdamConfig::adamw;
        // Bare parameters are numbered across groups, so they never collide.
        let opt = Adam::with_groups([ParamGroup::new([&w]), ParamGroup::new([&b])], cfg()).unwrap();
        let names: Vec<&str> = opt.parameters().iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["0", "1"]);
        let twice = [
            ParamGroup::new([&w]),
            ParamGroup::new([("again", w.clone())]),
        ];
        assert!(matches!(
            Adam::with_groups(twice, cfg()),
            Err(Error::InvalidArgument { op: "Adam::with_groups", ref reason })
                if reason.contains("`again` appears more than once")
        ));
        let same_name = [
            ParamGroup::new([("x", w.clone())]),
            ParamGroup::new([("x", b.clone())]),
        ];
        assert!(Adam::with_groups(same_name, cfg()).is_err());
        let negative = [ParamGroup::new([&w]).weight_decay(-0.1)];
        assert!(matches!(
            Adam::with_groups(negative, cfg()),
            Err(Error::InvalidArgument { ref reason, .. }) if reason.contains("group 0's weight_decay")
        ));
        let nan = [ParamGroup::new([&w]).lr_scale(f64::NAN)];
        assert!(Adam::with_groups(nan, cfg()).is_err());
        assert!(Adam::with_groups([ParamGroup::new([&w])], cfg().eps(-1.0)).is_err());
    }

    #[test]
    fn invalid_hyperparameters_are_errors() {
        let w = Parameter::new(Tensor::scalar(1.0));
        assert!(Adam::new([&w], AdamConfig::default().betas(1.0, 0.999)).is_err());
        assert!(Adam::new([&w], AdamConfig::default().eps(-1.0)).is_err());
        assert!(Adam::new([&w], AdamConfig::default().lr(f64::NAN)).is_err());
    }

    #[test]
    fn large_parameters_take_the_parallel_path_and_agree() {
        // Above the parallel threshold the update runs in chunks; the result
        // must equal the serial update of the same values.
        let n = crate::kernels::parallel::PARALLEL_THRESHOLD + 123;
        let init = Tensor::randn(&[n], DType::F32, 3).unwrap();
        let big = Parameter::new(init.clone());
        let mut opt = Adam::new([&big], AdamConfig::default()).unwrap();
        opt.step(&grads_of_sum_sq(&big)).unwrap();
        let got = big.value().to_vec::<f32>().unwrap();
        let k = Coefficients {
            lr: 1e-3,
            decay: 0.0,
            decoupled: false,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            step_size: 1e-3 / (1.0 - 0.9),
            bias_correction2_sqrt: (1.0f64 - 0.999).sqrt(),
            maximize: false,
        };
        let mut p = init.to_vec::<f32>().unwrap();
        let g: Vec<f32> = p.iter().map(|x| 2.0 * x).collect();
        let (mut m, mut v) = (vec![0.0f32; n], vec![0.0f32; n]);
        adam_kernel(&mut p, &g, &mut m, &mut v, k);
        assert_eq!(got, p);
    }
}

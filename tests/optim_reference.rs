//! The optimizers against PyTorch, step for step, on fixed problems, with
//! values computed by `torch.optim` (script and problems:
//! `tests/reference/optim_reference.py`; table: `reference/optim_cases.rs`):
//! - `CASES`: three steps of SGD (momentum, dampening, Nesterov, weight
//!   decay, maximize), Adam (L2 decay, AMSGrad), AdamW (also with nanoGPT's
//!   two parameter groups, with a per-group learning rate under a step
//!   schedule) and global-norm clipping;
//! - `RULE_CASES`: five steps of RMSprop and Adagrad with every option, and
//!   of SGD, Adam and AdamW through the shared rule code, with a parameter
//!   that misses a step's gradient, parameter groups, and the state dict
//!   saved and loaded into a new optimizer mid-run;
//! - `LBFGS_CASES`: L-BFGS's closure form on Rosenbrock's function, with
//!   fixed steps and with the strong-Wolfe line search, small histories, an
//!   evaluation budget, tolerances, maximize, a parameter without gradient
//!   and a mid-run reload.

#[path = "reference/optim_cases.rs"]
mod optim_cases;

use optim_cases::{CASES, LBFGS_CASES, RULE_CASES, RULE_STEPS};
use retrograd::nn::Parameter;
use retrograd::optim::{
    clip_grad_norm, decay_groups, Adagrad, AdagradConfig, Adam, AdamConfig, LBFGSConfig,
    LineSearch, LrSchedule, LrScheduler, Optimizer, ParamGroup, RMSprop, RMSpropConfig, Sgd,
    SgdConfig, StepLr, LBFGS,
};
use retrograd::{DType, Gradients, Graph, Result, Tensor};

const W0: [f64; 6] = [0.5, -1.2, 0.3, 0.8, 0.1, -0.7];
const B0: [f64; 3] = [0.2, -0.4, 1.1];
const A: [f64; 6] = [1.0, 2.0, -1.0, 0.5, -1.5, 2.0];
const C: [f64; 6] = [0.3, -0.6, 0.9, 1.2, 0.4, -0.8];
const D: [f64; 3] = [1.0, -2.0, 0.5];

/// The optimizer of a case, its clip norm, and a schedule stepped after each step.
type Setup = (Box<dyn Optimizer>, Option<f64>, Option<Box<dyn LrSchedule>>);

fn optimizer(name: &str, params: [(&str, Parameter); 2]) -> Setup {
    let sgd = |c: SgdConfig| Box::new(Sgd::new(params.clone(), c).unwrap()) as Box<dyn Optimizer>;
    let adam =
        |c: AdamConfig| Box::new(Adam::new(params.clone(), c).unwrap()) as Box<dyn Optimizer>;
    match name {
        "sgd" => (sgd(SgdConfig::new(0.1)), None, None),
        "sgd_momentum_dampening_wd" => (
            sgd(SgdConfig::new(0.1)
                .momentum(0.9)
                .dampening(0.1)
                .weight_decay(0.01)),
            None,
            None,
        ),
        "sgd_nesterov_wd" => (
            sgd(SgdConfig::new(0.05)
                .momentum(0.8)
                .nesterov(true)
                .weight_decay(0.05)),
            None,
            None,
        ),
        "sgd_maximize" => (
            sgd(SgdConfig::new(0.1).momentum(0.5).maximize(true)),
            None,
            None,
        ),
        "adam" => (adam(AdamConfig::default().lr(0.01)), None, None),
        "adam_l2_amsgrad" => (
            adam(
                AdamConfig::default()
                    .lr(0.05)
                    .betas(0.8, 0.9)
                    .eps(1e-6)
                    .weight_decay(0.1)
                    .amsgrad(true),
            ),
            None,
            None,
        ),
        "adamw" => (adam(AdamConfig::adamw().lr(0.01)), None, None),
        "adamw_wd_amsgrad" => (
            adam(AdamConfig::adamw().lr(0.05).weight_decay(0.3).amsgrad(true)),
            None,
            None,
        ),
        "sgd_clip" => (sgd(SgdConfig::new(0.1).momentum(0.9)), Some(0.5), None),
        "adam_clip" => (adam(AdamConfig::default().lr(0.01)), Some(1.0), None),
        "adamw_groups" => {
            let groups = decay_groups(params, 0.1);
            let c = AdamConfig::adamw().lr(0.01).betas(0.9, 0.99);
            (Box::new(Adam::with_groups(groups, c).unwrap()), None, None)
        }
        "adamw_groups_lr_step_schedule" => {
            let [(wn, w), (bn, b)] = params;
            let groups = [
                ParamGroup::new([(wn, w)]).weight_decay(0.1),
                ParamGroup::new([(bn, b)]).weight_decay(0.0).lr_scale(0.5),
            ];
            let c = AdamConfig::adamw().lr(0.05).betas(0.9, 0.99).amsgrad(true);
            let opt = Adam::with_groups(groups, c).unwrap();
            let schedule = Box::new(StepLr::new(1, 0.5).unwrap());
            (Box::new(opt), None, Some(schedule))
        }
        other => panic!("unknown case {other}"),
    }
}

/// Runs three steps in `dtype`; returns, per step, w and b flattened and the clip norm.
fn run(name: &str, dtype: DType) -> Vec<(Vec<f64>, f64)> {
    let w = Parameter::new(Tensor::from_f64_slice(&W0, &[2, 3], dtype).unwrap());
    let b = Parameter::new(Tensor::from_f64_slice(&B0, &[3], dtype).unwrap());
    let (mut opt, clip, schedule) = optimizer(name, [("w", w.clone()), ("b", b.clone())]);
    let mut scheduler = schedule.map(|s| LrScheduler::new(s, opt.as_mut()));
    let constant = |v: &[f64], shape: &[usize]| Tensor::from_f64_slice(v, shape, dtype).unwrap();
    let mut out = Vec::new();
    for _ in 0..3 {
        let mut grads = {
            let g = Graph::new();
            let (wv, bv) = (g.param(&w), g.param(&b));
            let (a, c, d) = (
                g.constant(constant(&A, &[2, 3])),
                g.constant(constant(&C, &[2, 3])),
                g.constant(constant(&D, &[3])),
            );
            let loss = ((&wv * &a).tanh() * &c).sum()
                + (bv.sigmoid() * &d).sum()
                + (&bv * &bv).sum() * 0.5;
            loss.backward().unwrap()
        };
        let norm = match clip {
            Some(max) => clip_grad_norm(&mut grads, max, 2.0).unwrap(),
            None => f64::NAN,
        };
        opt.step(&grads).unwrap();
        if let Some(scheduler) = &mut scheduler {
            scheduler.step(opt.as_mut());
        }
        let mut values = w.value().to_f64_vec();
        values.extend(b.value().to_f64_vec());
        out.push((values, norm));
    }
    out
}

fn compare(dtype: DType, tol: f64) {
    for (name, steps) in CASES {
        let got = run(name, dtype);
        for (step, ((want, want_norm), (values, norm))) in steps.iter().zip(&got).enumerate() {
            for (i, (g, w)) in values.iter().zip(want).enumerate() {
                assert!(
                    (g - w).abs() <= tol * (1.0 + w.abs()),
                    "{name} ({dtype}), step {}, value {i}: got {g}, PyTorch {w}",
                    step + 1
                );
            }
            assert!(
                want_norm.is_nan() && norm.is_nan() || (norm - want_norm).abs() <= tol * want_norm,
                "{name} ({dtype}), step {}: clip norm {norm}, PyTorch {want_norm}",
                step + 1
            );
        }
    }
}

#[test]
fn optimizers_match_pytorch_in_f64() {
    compare(DType::F64, 1e-12);
}

#[test]
fn optimizers_match_pytorch_in_f32() {
    // The f32 path computes the same rule in single precision.
    compare(DType::F32, 2e-5);
}

/// Two groups: w with weight decay `w_decay`, b without and at half the rate.
fn two_groups(params: [(&str, Parameter); 2], w_decay: f64) -> [ParamGroup; 2] {
    let [(wn, w), (bn, b)] = params;
    [
        ParamGroup::new([(wn, w)]).weight_decay(w_decay),
        ParamGroup::new([(bn, b)]).weight_decay(0.0).lr_scale(0.5),
    ]
}

/// The optimizer of a `RULE_CASES` case (the same settings as the script's).
fn rule_optimizer(name: &str, params: [(&str, Parameter); 2]) -> Box<dyn Optimizer> {
    let p = params.clone();
    match name {
        "sgd_nesterov_groups_skip_reload" => Box::new(
            Sgd::with_groups(
                two_groups(p, 0.01),
                SgdConfig::new(0.1).momentum(0.9).nesterov(true),
            )
            .unwrap(),
        ),
        "sgd_dampening_wd_maximize_skip_reload" => Box::new(
            Sgd::new(
                p,
                SgdConfig::new(0.1)
                    .momentum(0.5)
                    .dampening(0.3)
                    .weight_decay(0.02)
                    .maximize(true),
            )
            .unwrap(),
        ),
        "adam_l2_amsgrad_skip_reload" => Box::new(
            Adam::new(
                p,
                AdamConfig::default()
                    .lr(0.05)
                    .weight_decay(0.1)
                    .amsgrad(true),
            )
            .unwrap(),
        ),
        "adamw_groups_skip_first_reload" => {
            let c = AdamConfig::adamw().lr(0.05);
            Box::new(Adam::with_groups(two_groups(p, 0.1), c).unwrap())
        }
        "rmsprop" => Box::new(RMSprop::new(p, RMSpropConfig::default()).unwrap()),
        "rmsprop_alpha_eps_wd_skip_reload" => {
            let c = RMSpropConfig::default()
                .lr(0.02)
                .alpha(0.9)
                .eps(1e-4)
                .weight_decay(0.1);
            Box::new(RMSprop::new(p, c).unwrap())
        }
        "rmsprop_momentum_skip_reload" => {
            Box::new(RMSprop::new(p, RMSpropConfig::default().momentum(0.9)).unwrap())
        }
        "rmsprop_centered_skip_first_reload" => {
            Box::new(RMSprop::new(p, RMSpropConfig::default().centered(true)).unwrap())
        }
        "rmsprop_centered_momentum_maximize" => {
            let c = RMSpropConfig::default()
                .lr(0.03)
                .alpha(0.5)
                .weight_decay(0.05)
                .momentum(0.5)
                .centered(true)
                .maximize(true);
            Box::new(RMSprop::new(p, c).unwrap())
        }
        "rmsprop_groups_momentum" => {
            let c = RMSpropConfig::default().lr(0.01).momentum(0.3);
            Box::new(RMSprop::with_groups(two_groups(p, 0.1), c).unwrap())
        }
        "adagrad" => Box::new(Adagrad::new(p, AdagradConfig::default().lr(0.1)).unwrap()),
        "adagrad_lr_decay_wd_skip_reload" => {
            let c = AdagradConfig::default()
                .lr(0.1)
                .lr_decay(0.5)
                .weight_decay(0.05);
            Box::new(Adagrad::new(p, c).unwrap())
        }
        "adagrad_initial_accumulator_eps_skip_first" => {
            let c = AdagradConfig::default()
                .lr(0.2)
                .lr_decay(0.1)
                .initial_accumulator_value(0.5)
                .eps(1e-3);
            Box::new(Adagrad::new(p, c).unwrap())
        }
        "adagrad_maximize_reload" => {
            let c = AdagradConfig::default().lr(0.05).maximize(true);
            Box::new(Adagrad::new(p, c).unwrap())
        }
        "adagrad_groups" => {
            let c = AdagradConfig::default().lr(0.1).lr_decay(0.1);
            Box::new(Adagrad::with_groups(two_groups(p, 0.1), c).unwrap())
        }
        other => panic!("unknown case {other}"),
    }
}

/// The gradients of the per-parameter problem, without b's terms when
/// `with_b` is false (then b has no gradient).
fn rule_grads(w: &Parameter, b: &Parameter, dtype: DType, with_b: bool) -> Gradients {
    let constant = |v: &[f64], shape: &[usize]| Tensor::from_f64_slice(v, shape, dtype).unwrap();
    let g = Graph::new();
    let wv = g.param(w);
    let (a, c) = (
        g.constant(constant(&A, &[2, 3])),
        g.constant(constant(&C, &[2, 3])),
    );
    let mut loss = ((&wv * &a).tanh() * &c).sum();
    if with_b {
        let bv = g.param(b);
        let d = g.constant(constant(&D, &[3]));
        loss = loss + (bv.sigmoid() * &d).sum() + (&bv * &bv).sum() * 0.5;
    }
    loss.backward().unwrap()
}

/// Runs a `RULE_CASES` case in `dtype`: w and b after each step.
fn run_rule(name: &str, skip: Option<usize>, reload: Option<usize>, dtype: DType) -> Vec<Vec<f64>> {
    let w = Parameter::new(Tensor::from_f64_slice(&W0, &[2, 3], dtype).unwrap());
    let b = Parameter::new(Tensor::from_f64_slice(&B0, &[3], dtype).unwrap());
    let params = || [("w", w.clone()), ("b", b.clone())];
    let mut opt = rule_optimizer(name, params());
    let mut out = Vec::new();
    for step in 1..=RULE_STEPS {
        let grads = rule_grads(&w, &b, dtype, skip != Some(step));
        assert_eq!(grads.get_param(&b).is_none(), skip == Some(step));
        opt.step(&grads).unwrap();
        let mut values = w.value().to_f64_vec();
        values.extend(b.value().to_f64_vec());
        out.push(values);
        if reload == Some(step) {
            let state = opt.state_dict();
            let lr = opt.lr();
            opt = rule_optimizer(name, params());
            opt.load_state_dict(&state).unwrap();
            opt.set_lr(lr);
            assert_eq!(opt.state_dict(), state, "{name}: the state round-trips");
        }
    }
    out
}

fn compare_rules(dtype: DType, tol: f64) {
    for (name, skip, reload, steps) in RULE_CASES {
        let got = run_rule(name, *skip, *reload, dtype);
        for (step, (want, values)) in steps.iter().zip(&got).enumerate() {
            for (i, (g, w)) in values.iter().zip(want).enumerate() {
                assert!(
                    (g - w).abs() <= tol * (1.0 + w.abs()),
                    "{name} ({dtype}), step {}, value {i}: got {g}, PyTorch {w}",
                    step + 1
                );
            }
        }
    }
}

#[test]
fn rules_match_pytorch_in_f64() {
    // The largest difference seen is 2.2e-16 (relative): last-bit rounding.
    compare_rules(DType::F64, 1e-14);
}

#[test]
fn rules_match_pytorch_in_f32() {
    // The same rules in single precision against the f64 values: 1.7e-7 at most.
    compare_rules(DType::F32, 1e-6);
}

const X0: [f64; 3] = [-1.2, 0.5, 1.5];
const Y0: [f64; 3] = [1.0, -0.3, 2.0];
const U0: [f64; 2] = [0.3, -0.7];

/// The L-BFGS optimizer of a case and whether it maximises.
fn lbfgs(name: &str, params: [(&str, Parameter); 3]) -> (LBFGS, bool) {
    let c = LBFGSConfig::default();
    let wolfe = c.clone().line_search(LineSearch::StrongWolfe);
    let (config, maximize) = match name {
        "lbfgs_fixed_step" => (c.lr(0.001).max_iter(10), false),
        "lbfgs_fixed_step_history2_reload" => (c.lr(0.002).max_iter(6).history_size(2), false),
        "lbfgs_strong_wolfe" => (wolfe.max_iter(10), false),
        "lbfgs_strong_wolfe_history3_max_eval_reload" => {
            (wolfe.max_iter(20).max_eval(14).history_size(3), false)
        }
        "lbfgs_strong_wolfe_tolerances" => (
            wolfe
                .max_iter(50)
                .tolerance_grad(1e-4)
                .tolerance_change(1e-6),
            false,
        ),
        "lbfgs_strong_wolfe_history1_budget5_reload" => (
            wolfe.lr(2.0).max_iter(15).max_eval(5).history_size(1),
            false,
        ),
        "lbfgs_strong_wolfe_long_trials" => (wolfe.lr(100.0).max_iter(20).history_size(3), false),
        "lbfgs_strong_wolfe_maximize_reload" => (wolfe.lr(0.5).max_iter(8).maximize(true), true),
        "lbfgs_first_evaluation_optimal" => (c.tolerance_grad(1e3), false),
        other => panic!("unknown case {other}"),
    };
    (LBFGS::new(params, config).unwrap(), maximize)
}

/// Rosenbrock's function of x and y (u is left out: no gradient), negated
/// when maximising: the loss and its gradients.
fn rosenbrock(x: &Parameter, y: &Parameter, sign: f64) -> Result<(f64, Gradients)> {
    let g = Graph::new();
    let (xv, yv) = (g.param(x), g.param(y));
    let a = 1.0 - &xv;
    let b = &yv - &xv * &xv;
    let mut loss = (&a * &a + (&b * &b) * 100.0).sum();
    if sign < 0.0 {
        loss = -loss;
    }
    Ok((loss.value().try_item()?, loss.backward()?))
}

#[test]
fn lbfgs_matches_pytorch_in_f64() {
    // Relative. Rosenbrock's valley amplifies last-bit rounding differences
    // (PyTorch's BLAS dot products, fused adds) over the iterations: the
    // largest difference seen is 5.2e-11, after 44 iterations, and PyTorch
    // itself moves by 7.4e-11 there when the loss is summed in another
    // order. The counts of evaluations and iterations must match exactly.
    let tol = 5e-10;
    for (name, reload, steps) in LBFGS_CASES {
        let vector = |v: &[f64]| Parameter::new(Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap());
        let (x, y, u) = (vector(&X0), vector(&Y0), vector(&U0));
        let params = || [("x", x.clone()), ("y", y.clone()), ("u", u.clone())];
        let (mut opt, maximize) = lbfgs(name, params());
        let sign = if maximize { -1.0 } else { 1.0 };
        for (step, (want, want_loss, want_evals, want_iters)) in steps.iter().enumerate() {
            let loss = opt
                .step_with_closure(&mut || rosenbrock(&x, &y, sign))
                .unwrap();
            let mut values = x.value().to_f64_vec();
            values.extend(y.value().to_f64_vec());
            values.extend(u.value().to_f64_vec());
            let close = |g: f64, w: f64| (g - w).abs() <= tol * (1.0 + w.abs());
            for (i, (g, w)) in values.iter().zip(want).enumerate() {
                assert!(
                    close(*g, *w),
                    "{name}, step {}, value {i}: got {g}, PyTorch {w}",
                    step + 1
                );
            }
            assert!(
                close(loss, *want_loss),
                "{name}, step {}: loss {loss}, PyTorch {want_loss}",
                step + 1
            );
            assert_eq!(
                (opt.func_evals(), opt.n_iter()),
                (*want_evals, *want_iters),
                "{name}, step {}: evaluations and iterations",
                step + 1
            );
            if *reload == Some(step + 1) {
                let state = opt.state_dict();
                (opt, _) = lbfgs(name, params());
                opt.load_state_dict(&state).unwrap();
                assert_eq!(opt.state_dict(), state, "{name}: the state round-trips");
            }
        }
    }
}

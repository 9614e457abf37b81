//! Every registered optimizer kind, asked from the registry (none is listed
//! by hand): it builds from the command-line settings and names itself; its
//! whole state (moments, counters, L-BFGS's memory) survives a checkpoint
//! bit for bit, so a resumed run is the same run; a checkpoint of one kind
//! does not load into another. Then what is particular to L-BFGS: it needs
//! a closure, its settings are checked, its state dict is read strictly, and
//! a failing closure leaves the parameters where the step began.

use retrograd::io::{load_checkpoint, save_checkpoint};
use retrograd::nn::Parameter;
use retrograd::optim::{
    optimizer_kind, optimizer_kinds, Adam, AdamConfig, LBFGSConfig, LineSearch, NamedParameters,
    Optimizer, OptimizerSettings, StateDict, LBFGS,
};
use retrograd::{DType, Error, Gradients, Graph, Result, Tensor, TensorProblem};

/// w [2, 2] and b [2] in f64, and a parameter `unused` that never has a gradient.
fn model(seed: u64) -> NamedParameters {
    let p =
        |shape: &[usize], s| Parameter::new(Tensor::randn(shape, DType::F64, seed + s).unwrap());
    vec![
        ("w".into(), p(&[2, 2], 0)),
        ("b".into(), p(&[2], 1)),
        ("unused".into(), p(&[3], 2)),
    ]
}

/// A smooth non-quadratic loss of w and b: the loss and its gradients.
fn loss(params: &NamedParameters) -> Result<(f64, Gradients)> {
    let g = Graph::new();
    let (w, b) = (g.param(&params[0].1), g.param(&params[1].1));
    let x = g.constant(Tensor::from_vec(vec![0.5, -1.0, 2.0, 0.25], &[2, 2])?);
    let y = (&w * &x).try_sum_axes(&[1], false)? + &b;
    let e = y.tanh() - 0.5;
    let loss = (&e * &e).sum() + (&w * &w).sum() * 0.01;
    Ok((loss.value().try_item()?, loss.backward()?))
}

fn build(kind: &str, params: &NamedParameters) -> Box<dyn Optimizer> {
    // RMSprop's first steps are about 10 lr per entry (alpha 0.99).
    let settings = OptimizerSettings {
        lr: 0.01,
        weight_decay: Some(0.01),
        momentum: Some(0.5),
    };
    optimizer_kind(kind)
        .unwrap()
        .build(params.clone(), &settings)
        .unwrap()
}

fn steps(opt: &mut dyn Optimizer, params: &NamedParameters, n: usize) {
    for _ in 0..n {
        opt.step_with_closure(&mut || loss(params)).unwrap();
    }
}

fn values(params: &NamedParameters) -> Vec<Vec<f64>> {
    params.iter().map(|(_, p)| p.value().to_f64_vec()).collect()
}

#[test]
fn every_kind_builds_names_itself_and_learns() {
    let kinds: Vec<&str> = optimizer_kinds().map(|k| k.name).collect();
    assert!(kinds.len() >= 6, "{kinds:?}");
    for kind in kinds {
        let params = model(1);
        let mut opt = build(kind, &params);
        assert_eq!(opt.kind(), kind);
        assert_eq!(optimizer_kind(&kind.to_uppercase()).unwrap().name, kind);
        let before = loss(&params).unwrap().0;
        steps(opt.as_mut(), &params, 5);
        let after = loss(&params).unwrap().0;
        assert!(after < before, "{kind}: loss {before} -> {after}");
        assert_eq!(
            params[2].1.value(),
            model(1)[2].1.value(),
            "{kind} moved `unused`"
        );
    }
    assert!(matches!(
        optimizer_kind("adamax"),
        Err(Error::InvalidArgument { op: "optimizer_kind", ref reason }) if reason.contains("lbfgs")
    ));
}

#[test]
fn every_kind_resumes_from_a_checkpoint_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    for kind in optimizer_kinds().map(|k| k.name) {
        let path = dir.path().join(format!("{kind}.safetensors"));
        let params = model(2);
        let mut opt = build(kind, &params);
        steps(opt.as_mut(), &params, 3);
        save_checkpoint(&path, &params, Some(opt.as_ref())).unwrap();

        let resumed = model(7);
        let mut resumed_opt = build(kind, &resumed);
        load_checkpoint(&path, &resumed, Some(resumed_opt.as_mut())).unwrap();
        assert_eq!(resumed_opt.state_dict(), opt.state_dict(), "{kind}");
        assert!(!opt.state_dict().is_empty(), "{kind} saved no state");
        steps(opt.as_mut(), &params, 2);
        steps(resumed_opt.as_mut(), &resumed, 2);
        assert_eq!(
            values(&resumed),
            values(&params),
            "{kind}: the resumed run differs"
        );
        assert_eq!(resumed_opt.state_dict(), opt.state_dict(), "{kind}");
    }
}

#[test]
fn a_checkpoint_of_one_kind_does_not_load_into_another() {
    let dir = tempfile::tempdir().unwrap();
    let kinds: Vec<&str> = optimizer_kinds().map(|k| k.name).collect();
    for saved in &kinds {
        let path = dir.path().join(format!("{saved}.safetensors"));
        let params = model(3);
        let mut opt = build(saved, &params);
        steps(opt.as_mut(), &params, 1);
        save_checkpoint(&path, &params, Some(opt.as_ref())).unwrap();
        for other in kinds.iter().filter(|k| *k != saved) {
            let mut into = build(other, &params);
            let e = load_checkpoint(&path, &params, Some(into.as_mut())).unwrap_err();
            assert!(
                matches!(&e, Error::Format { reason, .. } if reason.contains(saved) && reason.contains(other)),
                "{saved} into {other}: {e}"
            );
        }
    }
}

/// State dicts as `sgd.rs` and `adam.rs` wrote them before they became rules
/// (keys spelled out here, as those files spelled them) still load, and an
/// optimizer that needs a field they lack names it.
#[test]
fn state_dicts_of_the_layout_before_the_rules_load() {
    let params = model(4);
    let like = |name: &str, fill: f64| {
        let p = &params.iter().find(|(n, _)| n == name).unwrap().1;
        Tensor::full(p.value().shape(), fill, DType::F64).unwrap()
    };
    let mut before = StateDict::new();
    for name in ["w", "b"] {
        before.insert(format!("{name}.momentum_buffer"), like(name, 0.5));
    }
    let mut sgd = build("sgd", &params);
    sgd.load_state_dict(&before).unwrap();
    assert_eq!(sgd.state_dict(), before);
    steps(sgd.as_mut(), &params, 1);

    let mut before = StateDict::new();
    for name in ["w", "b"] {
        before.insert(format!("{name}.step"), Tensor::scalar(3.0));
        before.insert(format!("{name}.exp_avg"), like(name, 0.25));
        before.insert(format!("{name}.exp_avg_sq"), like(name, 0.125));
    }
    for kind in ["adam", "adamw"] {
        let mut adam = build(kind, &params);
        adam.load_state_dict(&before).unwrap();
        assert_eq!(adam.state_dict(), before, "{kind}");
        steps(adam.as_mut(), &params, 1);
        assert_eq!(adam.state_dict()["w.step"].try_item().unwrap(), 4.0);
    }
    let mut amsgrad = Adam::new(params.clone(), AdamConfig::default().amsgrad(true)).unwrap();
    let e = amsgrad.load_state_dict(&before).unwrap_err();
    assert!(
        matches!(&e, Error::TensorMismatch { name, problem: TensorProblem::Missing, .. } if name == "b.max_exp_avg_sq" || name == "w.max_exp_avg_sq"),
        "{e}"
    );
}

fn lbfgs(params: &NamedParameters, config: LBFGSConfig) -> LBFGS {
    LBFGS::new(params.clone(), config).unwrap()
}

#[test]
fn lbfgs_needs_a_closure_and_checks_its_settings() {
    let params = model(4);
    let mut opt = lbfgs(&params, LBFGSConfig::default());
    let grads = loss(&params).unwrap().1;
    assert!(matches!(
        opt.step(&grads),
        Err(Error::InvalidArgument { op: "LBFGS::step", ref reason }) if reason.contains("step_with_closure")
    ));
    for (config, what) in [
        (LBFGSConfig::default().history_size(0), "history_size"),
        (LBFGSConfig::default().max_iter(0), "max_iter"),
        (LBFGSConfig::default().max_eval(0), "max_eval"),
        (LBFGSConfig::default().lr(-1.0), "lr"),
        (
            LBFGSConfig::default().tolerance_grad(f64::NAN),
            "tolerance_grad",
        ),
        (
            LBFGSConfig::default().tolerance_change(-1.0),
            "tolerance_change",
        ),
    ] {
        let e = LBFGS::new(params.clone(), config).err().unwrap();
        assert!(
            matches!(&e, Error::InvalidArgument { op: "LBFGS", reason } if reason.starts_with(what)),
            "{e}"
        );
    }
    assert_eq!(
        "strong_wolfe".parse::<LineSearch>().unwrap(),
        LineSearch::StrongWolfe
    );
    assert!("wolfe".parse::<LineSearch>().is_err());
    // max_iter = 1 gives one evaluation per step by default.
    assert_eq!(LBFGSConfig::default().max_iter(1).eval_budget(), 1);
}

#[test]
fn lbfgs_state_dict_is_read_strictly() {
    let params = model(5);
    let config = LBFGSConfig::default()
        .history_size(3)
        .line_search(LineSearch::StrongWolfe);
    let mut opt = lbfgs(&params, config.clone());
    steps(&mut opt, &params, 2);
    let state = opt.state_dict();
    assert!(state.contains_key("w.old_dirs") && state.contains_key("w.n_iter"));
    assert_eq!(state["w.d"].shape(), [4 + 2 + 3]);
    let k = state["w.ro"].shape()[0];
    assert!((2..=3).contains(&k), "{k} pairs");
    assert_eq!(state["w.old_stps"].shape(), [k, 9]);

    let mut fresh = lbfgs(&params, config.clone());
    let mismatch = |state: &retrograd::optim::StateDict, fresh: &mut LBFGS| match fresh
        .load_state_dict(state)
    {
        Err(Error::TensorMismatch { name, problem, .. }) => (name, problem),
        other => panic!("expected a mismatch, got {other:?}"),
    };
    let mut partial = state.clone();
    partial.remove("w.H_diag");
    assert_eq!(
        mismatch(&partial, &mut fresh),
        ("w.H_diag".to_string(), TensorProblem::Missing)
    );
    let mut wrong = state.clone();
    wrong.insert("w.d".into(), Tensor::zeros(&[8], DType::F64).unwrap());
    assert!(matches!(
        mismatch(&wrong, &mut fresh),
        (name, TensorProblem::Shape { .. }) if name == "w.d"
    ));
    let mut extra = state.clone();
    extra.insert("b.d".into(), Tensor::zeros(&[9], DType::F64).unwrap());
    assert_eq!(
        mismatch(&extra, &mut fresh),
        ("b.d".to_string(), TensorProblem::Unexpected)
    );
    // More pairs than this optimizer keeps.
    let mut small = lbfgs(&params, config.history_size(1));
    assert!(matches!(
        mismatch(&state, &mut small),
        (name, TensorProblem::Value(_)) if name == "w.ro"
    ));
    assert!(fresh.state_dict().is_empty(), "failed loads change nothing");
    fresh.load_state_dict(&state).unwrap();
    assert_eq!(fresh.state_dict(), state);
}

#[test]
fn lbfgs_puts_the_parameters_back_when_the_closure_fails() {
    let params = model(6);
    let mut opt = lbfgs(&params, LBFGSConfig::default().max_iter(5));
    steps(&mut opt, &params, 1);
    let before = values(&params);
    let mut calls = 0;
    let e = opt
        .step_with_closure(&mut || {
            calls += 1;
            if calls == 3 {
                return Err(Error::InvalidArgument {
                    op: "closure",
                    reason: "out of data".into(),
                });
            }
            loss(&params)
        })
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "closure", .. }));
    assert_eq!(values(&params), before);
    // The memory is dropped and the counters kept: the next step restarts
    // from steepest descent and still works.
    assert!(!opt.state_dict().contains_key("w.d"));
    assert!(opt.state_dict().contains_key("w.n_iter"));
    let start = loss(&params).unwrap().0;
    steps(&mut opt, &params, 1);
    assert!(loss(&params).unwrap().0 < start);
}

#[test]
fn lbfgs_on_f32_parameters_and_without_parameters() {
    let p = Parameter::new(Tensor::from_vec(vec![3.0f32, -2.0], &[2]).unwrap());
    let mut opt = LBFGS::new(
        [("p", p.clone())],
        LBFGSConfig::default().line_search(LineSearch::StrongWolfe),
    )
    .unwrap();
    let quadratic = || {
        let g = Graph::new();
        let x = g.param(&p);
        let loss = (&x * &x).sum();
        Ok((loss.value().try_item()?, loss.backward()?))
    };
    let first = opt.step_with_closure(&mut { quadratic }).unwrap();
    assert_eq!(first, 13.0);
    assert!(
        p.value().to_f64_vec().iter().all(|v| v.abs() < 1e-6),
        "{p:?}"
    );
    assert_eq!(opt.state_dict()["p.d"].dtype(), DType::F64);

    let mut empty = LBFGS::new(Vec::<Parameter>::new(), LBFGSConfig::default()).unwrap();
    let loss = empty.step_with_closure(&mut || {
        let g = Graph::new();
        let v = g.variable(Tensor::scalar(2.5));
        Ok((v.value().try_item()?, (&v * 1.0).backward()?))
    });
    assert_eq!(loss.unwrap(), 2.5);
    assert!(empty.state_dict().is_empty());
}

//! Optimizer construction and stepping: negative or NaN learning rates,
//! betas out of range, negative weight decay, duplicate parameters,
//! gradients of the wrong shape; LR schedules and gradient clipping.

use retrograd::nn::Parameter;
use retrograd::optim::{
    clip_grad_norm, grad_norm, optimizer_kind, Adagrad, AdagradConfig, Adam, AdamConfig,
    CosineAnnealingLr, ExponentialLr, LBFGSConfig, MultiStepLr, Optimizer, ParamGroup, RMSprop,
    RMSpropConfig, Sgd, SgdConfig, StepLr, WarmupLr, LBFGS,
};
use retrograd::{Error, Graph, Tensor};

use crate::expect_err;
use crate::harness::{ensure, setup, Table};

fn param() -> Parameter {
    Parameter::new(Tensor::vector(&[1.0, 2.0]))
}

fn shown(v: f64) -> String {
    v.to_string()
}

pub fn cases(t: &mut Table) {
    t.add("Adam::with_groups: a parameter in two groups", || {
        let p = param();
        let groups = [
            ParamGroup::new([&p]),
            ParamGroup::new([("again", p.clone())]),
        ];
        expect_err!(
            Adam::with_groups(groups, AdamConfig::adamw()),
            Error::InvalidArgument {
                op: "Adam::with_groups",
                ..
            },
            ["Adam::with_groups", "again", "more than once"]
        )
    });
    for (what, group) in [
        (
            "weight_decay",
            ParamGroup::new([param()]).weight_decay(-1.0),
        ),
        (
            "lr_scale",
            ParamGroup::new([param()]).lr_scale(f64::INFINITY),
        ),
    ] {
        t.add(format!("Adam::with_groups: bad {what}"), move || {
            expect_err!(
                Adam::with_groups([group.clone()], AdamConfig::adamw()),
                Error::InvalidArgument {
                    op: "Adam::with_groups",
                    ..
                },
                ["Adam::with_groups", what, "group 0"]
            )
        });
    }
    for lr in [-0.1, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        t.add(format!("Sgd: lr {lr}"), move || {
            expect_err!(
                Sgd::new([&param()], SgdConfig::new(lr)),
                Error::InvalidArgument { op: "Sgd", .. },
                ["Sgd", "lr", &shown(lr)]
            )
        });
        t.add(format!("Adam: lr {lr}"), move || {
            expect_err!(
                Adam::new([&param()], AdamConfig::default().lr(lr)),
                Error::InvalidArgument { op: "Adam", .. },
                ["Adam", "lr", &shown(lr)]
            )
        });
        t.add(format!("AdamW: lr {lr}"), move || {
            expect_err!(
                Adam::new([&param()], AdamConfig::adamw().lr(lr)),
                Error::InvalidArgument { .. },
                ["lr", &shown(lr)]
            )
        });
    }
    for (b1, b2) in [
        (1.0, 0.999),
        (-0.1, 0.999),
        (0.9, 1.0),
        (0.9, 1.5),
        (f64::NAN, 0.999),
        (0.9, f64::NAN),
    ] {
        t.add(format!("Adam: betas ({b1}, {b2})"), move || {
            let bad = if (0.0..1.0).contains(&b1) { b2 } else { b1 };
            let which = if (0.0..1.0).contains(&b1) {
                "beta2"
            } else {
                "beta1"
            };
            expect_err!(
                Adam::new([&param()], AdamConfig::default().betas(b1, b2)),
                Error::InvalidArgument { op: "Adam", .. },
                ["Adam", which, &shown(bad)]
            )
        });
    }
    for wd in [-1e-4, f64::NAN] {
        t.add(format!("Sgd: weight decay {wd}"), move || {
            expect_err!(
                Sgd::new([&param()], SgdConfig::new(0.1).weight_decay(wd)),
                Error::InvalidArgument { .. },
                ["Sgd", "weight_decay", &shown(wd)]
            )
        });
        t.add(format!("AdamW: weight decay {wd}"), move || {
            expect_err!(
                Adam::new([&param()], AdamConfig::adamw().weight_decay(wd)),
                Error::InvalidArgument { .. },
                ["weight_decay", &shown(wd)]
            )
        });
    }
    for eps in [-1e-8, f64::NAN] {
        t.add(format!("Adam: eps {eps}"), move || {
            expect_err!(
                Adam::new([&param()], AdamConfig::default().eps(eps)),
                Error::InvalidArgument { .. },
                ["Adam", "eps"]
            )
        });
    }
    t.add("Sgd: negative momentum", || {
        expect_err!(
            Sgd::new([&param()], SgdConfig::new(0.1).momentum(-0.9)),
            Error::InvalidArgument { .. },
            ["Sgd", "momentum"]
        )
    });
    t.add("Sgd: Nesterov without momentum", || {
        expect_err!(
            Sgd::new([&param()], SgdConfig::new(0.1).nesterov(true)),
            Error::InvalidArgument { .. },
            ["Sgd", "Nesterov"]
        )
    });
    t.add("Sgd: the same parameter twice", || {
        let p = param();
        expect_err!(
            Sgd::new([&p, &p], SgdConfig::new(0.1)),
            Error::InvalidArgument { .. },
            ["Sgd", "more than once"]
        )
    });
    t.add("Adam: two parameters with one name", || {
        let named = vec![("w".to_string(), param()), ("w".to_string(), param())];
        expect_err!(
            Adam::new(named, AdamConfig::default()),
            Error::InvalidArgument { .. },
            ["Adam", "`w`"]
        )
    });
    t.add("Adam: no parameters is a no-op optimizer", || {
        let mut opt = setup(Adam::new(Vec::<Parameter>::new(), AdamConfig::default()))?;
        let g = Graph::new();
        let x = g.variable(Tensor::scalar(1.0));
        setup(opt.step(&setup((&x * &x).backward())?))
    });
    t.add("Sgd: a gradient of another dtype for a parameter", || {
        let p = param();
        let mut opt = setup(Sgd::new([&p], SgdConfig::new(0.1)))?;
        let g = Graph::new();
        let x = g.param(&p);
        let grads = setup((&x * 2.0).sum().backward())?;
        // The parameter is swapped for f32 between backward and step.
        p.update(|v| *v = v.to_dtype(retrograd::DType::F32));
        expect_err!(
            opt.step(&grads),
            Error::TensorMismatch { .. } | Error::DTypeMismatch { .. },
            ["f32", "f64"]
        )
    });
    t.add(
        "Adam: a parameter reshaped between backward and step",
        || {
            let p = param();
            let mut opt = setup(Adam::new([&p], AdamConfig::default()))?;
            let g = Graph::new();
            let x = g.param(&p);
            let grads = setup((&x * 2.0).sum().backward())?;
            p.update(|v| *v = v.reshape(&[2, 1]).unwrap());
            expect_err!(
                opt.step(&grads),
                Error::TensorMismatch { .. } | Error::ShapeMismatch { .. },
                ["[2]", "[2, 1]"]
            )
        },
    );
    t.add(
        "Sgd: NaN gradients propagate into the weights, no panic",
        || {
            let p = param();
            let mut opt = setup(Sgd::new([&p], SgdConfig::new(0.1)))?;
            let g = Graph::new();
            let x = g.param(&p);
            setup(opt.step(&setup((&x * f64::NAN).sum().backward())?))?;
            ensure(p.value().to_f64_vec().iter().all(|v| v.is_nan()), || {
                "NaN weights".into()
            })
        },
    );
    for (what, config) in [
        ("alpha", RMSpropConfig::default().alpha(1.01)),
        ("momentum", RMSpropConfig::default().momentum(-0.5)),
        ("eps", RMSpropConfig::default().eps(f64::NAN)),
    ] {
        t.add(format!("RMSprop: bad {what}"), move || {
            expect_err!(
                RMSprop::new([&param()], config.clone()),
                Error::InvalidArgument { op: "RMSprop", .. },
                ["RMSprop", what]
            )
        });
    }
    for (what, config) in [
        ("lr_decay", AdagradConfig::default().lr_decay(-0.1)),
        (
            "initial_accumulator_value",
            AdagradConfig::default().initial_accumulator_value(f64::NAN),
        ),
    ] {
        t.add(format!("Adagrad: bad {what}"), move || {
            expect_err!(
                Adagrad::new([&param()], config.clone()),
                Error::InvalidArgument { op: "Adagrad", .. },
                ["Adagrad", what]
            )
        });
    }
    t.add(
        "RMSprop::with_groups: a negative group weight decay",
        || {
            let groups = [ParamGroup::new([param()]).weight_decay(-1.0)];
            expect_err!(
                RMSprop::with_groups(groups, RMSpropConfig::default()),
                Error::InvalidArgument {
                    op: "RMSprop::with_groups",
                    ..
                },
                ["RMSprop::with_groups", "group 0", "weight_decay"]
            )
        },
    );
    for (what, config) in [
        ("history_size", LBFGSConfig::default().history_size(0)),
        ("max_iter", LBFGSConfig::default().max_iter(0)),
        ("max_eval", LBFGSConfig::default().max_eval(0)),
        (
            "tolerance_grad",
            LBFGSConfig::default().tolerance_grad(-1.0),
        ),
    ] {
        t.add(format!("LBFGS: bad {what}"), move || {
            expect_err!(
                LBFGS::new([&param()], config.clone()),
                Error::InvalidArgument { op: "LBFGS", .. },
                ["LBFGS", what]
            )
        });
    }
    t.add("LBFGS: step without a closure", || {
        let p = param();
        let mut opt = setup(LBFGS::new([&p], LBFGSConfig::default()))?;
        let g = Graph::new();
        let grads = setup((g.param(&p) * 2.0).sum().backward())?;
        expect_err!(
            opt.step(&grads),
            Error::InvalidArgument {
                op: "LBFGS::step",
                ..
            },
            ["LBFGS", "step_with_closure"]
        )
    });
    t.add("optimizer_kind: an unknown name", || {
        expect_err!(
            optimizer_kind("adamax"),
            Error::InvalidArgument {
                op: "optimizer_kind",
                ..
            },
            ["adamax", "sgd", "rmsprop", "lbfgs"]
        )
    });
    t.add("StepLr: step size 0", || {
        expect_err!(
            StepLr::new(0, 0.1),
            Error::InvalidArgument { .. },
            ["StepLr", "step_size"]
        )
    });
    for gamma in [-0.5, f64::NAN, f64::INFINITY] {
        t.add(format!("StepLr: gamma {gamma}"), move || {
            expect_err!(
                StepLr::new(10, gamma),
                Error::InvalidArgument { .. },
                ["StepLr", "gamma"]
            )
        });
        t.add(format!("ExponentialLr: gamma {gamma}"), move || {
            expect_err!(
                ExponentialLr::new(gamma),
                Error::InvalidArgument { .. },
                ["ExponentialLr", "gamma"]
            )
        });
        t.add(format!("MultiStepLr: gamma {gamma}"), move || {
            expect_err!(
                MultiStepLr::new(&[1, 2], gamma),
                Error::InvalidArgument { .. },
                ["MultiStepLr", "gamma"]
            )
        });
    }
    t.add(
        "MultiStepLr: milestones out of order are sorted (as PyTorch's Counter)",
        || setup(MultiStepLr::new(&[5, 2], 0.1)).map(|_| ()),
    );
    t.add("CosineAnnealingLr: t_max 0", || {
        expect_err!(
            CosineAnnealingLr::new(0, 0.0),
            Error::InvalidArgument { .. },
            ["CosineAnnealingLr", "t_max"]
        )
    });
    t.add("CosineAnnealingLr: NaN eta_min", || {
        expect_err!(
            CosineAnnealingLr::new(10, f64::NAN),
            Error::InvalidArgument { .. },
            ["CosineAnnealingLr", "eta_min"]
        )
    });
    for start in [-0.1, 1.5, f64::NAN] {
        t.add(format!("WarmupLr: start factor {start}"), move || {
            expect_err!(
                WarmupLr::new(10, start, ExponentialLr::new(0.9).unwrap()),
                Error::InvalidArgument { .. },
                ["WarmupLr", "start_factor"]
            )
        });
    }
    for norm in [0.0, -1.0, f64::NAN] {
        t.add(format!("grad_norm: norm type {norm}"), move || {
            let g = Graph::new();
            let p = param();
            let x = g.param(&p);
            let grads = setup((&x * &x).sum().backward())?;
            expect_err!(
                grad_norm(&grads, norm),
                Error::InvalidArgument { .. },
                ["grad_norm", "norm"]
            )
        });
    }
    for max in [-1.0, f64::NAN] {
        t.add(format!("clip_grad_norm: max norm {max}"), move || {
            let g = Graph::new();
            let p = param();
            let x = g.param(&p);
            let mut grads = setup((&x * &x).sum().backward())?;
            expect_err!(
                clip_grad_norm(&mut grads, max, 2.0),
                Error::InvalidArgument { .. },
                ["clip_grad_norm", "max_norm"]
            )
        });
    }
    t.add(
        "clip_grad_norm: an infinite gradient norm is returned, no panic",
        || {
            let g = Graph::new();
            let p = param();
            let x = g.param(&p);
            let mut grads = setup((&x * f64::INFINITY).sum().backward())?;
            let n = setup(clip_grad_norm(&mut grads, 1.0, 2.0))?;
            ensure(n.is_infinite(), || format!("norm {n}"))
        },
    );
}

//! Beyond first order and debugging aids (issue 5): gradients of gradients
//! against closed forms and finite differences, hooks, no_grad, detach,
//! anomaly detection.

use retrograd::{grad, Error, GradOptions, Graph, Result, Tensor, Var};

fn loss<'g>(x: &Var<'g>, w: &Var<'g>) -> Var<'g> {
    ((x * w).tanh() * x).sum()
}

/// The gradient penalty ||dL/dx||^2, differentiated again with respect to x
/// and w, against central finite differences of the penalty itself.
#[test]
fn gradient_penalty_matches_finite_differences() {
    let x0 = vec![0.3, -0.7, 1.1];
    let w0 = vec![0.9, 0.4, -0.6];
    let penalty = |x: &[f64], w: &[f64]| -> Result<(f64, Vec<f64>, Vec<f64>)> {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec(x.to_vec(), &[3])?);
        let w = g.variable(Tensor::from_vec(w.to_vec(), &[3])?);
        let l = loss(&x, &w);
        let dx = grad(&[&l], &[&x], &GradOptions::new().create_graph(true))?.remove(0);
        let p = (&dx * &dx).sum();
        let second = grad(&[&p], &[&x, &w], &GradOptions::new())?;
        Ok((
            p.value().try_item()?,
            second[0].value().to_f64_vec(),
            second[1].value().to_f64_vec(),
        ))
    };
    let (_, gx, gw) = penalty(&x0, &w0).unwrap();
    let eps = 1e-6;
    for i in 0..3 {
        for (which, analytic) in [(0, &gx), (1, &gw)] {
            let (mut xp, mut xm, mut wp, mut wm) = (x0.clone(), x0.clone(), w0.clone(), w0.clone());
            if which == 0 {
                xp[i] += eps;
                xm[i] -= eps;
            } else {
                wp[i] += eps;
                wm[i] -= eps;
            }
            let numeric =
                (penalty(&xp, &wp).unwrap().0 - penalty(&xm, &wm).unwrap().0) / (2.0 * eps);
            assert!(
                (analytic[i] - numeric).abs() < 1e-6 * (1.0 + numeric.abs()),
                "input {which} element {i}: {} vs {numeric}",
                analytic[i]
            );
        }
    }
}

#[test]
fn second_derivatives_of_every_core_unary_op() {
    // d2/dx2 against the closed forms at a few points.
    fn sigmoid_d2(x: f64) -> f64 {
        let s = 1.0 / (1.0 + (-x).exp());
        s * (1.0 - s) * (1.0 - 2.0 * s)
    }
    type ClosedForm = fn(f64) -> f64;
    let cases: [(&str, ClosedForm); 5] = [
        ("exp", |x| x.exp()),
        ("log", |x| -1.0 / (x * x)),
        ("tanh", |x| -2.0 * x.tanh() * (1.0 - x.tanh().powi(2))),
        ("sigmoid", sigmoid_d2),
        ("relu", |_| 0.0),
    ];
    for (name, d2) in cases {
        for x0 in [0.4, 1.3, 2.1] {
            let g = Graph::new();
            let x = g.variable(Tensor::scalar(x0));
            let y = g.apply(name, &[&x]).unwrap();
            let opts = GradOptions::new().create_graph(true).allow_unused(true);
            let dy = grad(&[&y], &[&x], &opts).unwrap().remove(0);
            let d2y = grad(&[&dy], &[&x], &opts).unwrap().remove(0);
            let got = d2y.value().item();
            assert!(
                (got - d2(x0)).abs() < 1e-10,
                "{name}''({x0}) = {got}, expected {}",
                d2(x0)
            );
        }
    }
}

#[test]
fn a_hook_that_doubles_a_gradient_doubles_exactly_what_flows_upstream() {
    let run = |hook: bool| {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec(vec![0.5, -1.5], &[2]).unwrap());
        let w = g.variable(Tensor::from_vec(vec![2.0, 3.0], &[2]).unwrap());
        let h = &x * &w; // the hooked value
        if hook {
            h.register_hook(|grad| Some(grad.map_f64(|v| 2.0 * v)));
        }
        let side = &x * 7.0; // a path that does not pass through h
        let loss = (h.tanh() + side).sum();
        let grads = loss.backward().unwrap();
        (grads.wrt(&x).to_f64_vec(), grads.wrt(&w).to_f64_vec())
    };
    let (x_plain, w_plain) = run(false);
    let (x_hooked, w_hooked) = run(true);
    for i in 0..2 {
        // w only receives gradient through h: exactly doubled.
        assert_eq!(w_hooked[i], 2.0 * w_plain[i]);
        // x also has the side path (gradient 7): only the h part doubles.
        let through_h = x_plain[i] - 7.0;
        assert!((x_hooked[i] - (7.0 + 2.0 * through_h)).abs() < 1e-12);
    }
}

#[test]
fn a_hook_can_read_without_replacing() {
    use std::sync::{Arc, Mutex};
    let seen = Arc::new(Mutex::new(Vec::new()));
    let g = Graph::new();
    let x = g.variable(Tensor::scalar(3.0));
    let sink = seen.clone();
    x.register_hook(move |grad| {
        sink.lock().unwrap().push(grad.item());
        None
    });
    let grads = (&x * &x).backward().unwrap();
    assert_eq!(grads.wrt(&x).item(), 6.0);
    assert_eq!(*seen.lock().unwrap(), vec![6.0]);
}

#[test]
fn no_grad_scopes_and_detach() {
    let g = Graph::new();
    let x = g.variable(Tensor::scalar(2.0));
    {
        let _guard = g.no_grad_guard();
        let y = &x * &x;
        assert!(!y.requires_grad());
        assert!(!g.is_recording());
    }
    assert!(g.is_recording());
    assert_eq!(g.len(), 0);
    let y = g.no_grad(|| x.exp());
    assert!(!y.requires_grad());
    // detach: the detached branch contributes a constant factor.
    let z = &x * &x.detach(); // d/dx = detach(x) = 2, not 2x = 4
    assert_eq!(z.backward().unwrap().wrt(&x).item(), 2.0);
}

#[test]
fn anomaly_mode_names_the_op_and_the_line_that_recorded_it() {
    let g = Graph::new();
    g.set_anomaly_detection(true);
    let x = g.variable(Tensor::scalar(-1.0));
    let line = line!() + 1;
    let err = g.apply("log", &[&x]).unwrap_err();
    match &err {
        Error::Anomaly {
            op,
            location,
            phase,
            node,
        } => {
            assert_eq!(op, "log");
            assert_eq!(*phase, "forward");
            assert_eq!(*node, 0);
            assert!(
                location.starts_with(&format!("tests/higher_order.rs:{line}:")),
                "{location}"
            );
        }
        other => panic!("expected an anomaly, got {other:?}"),
    }
    assert!(err.to_string().contains("log"));

    // A gradient that overflows: d(1/x)/dx = -1/x^2 at x = 1e-200.
    let g = Graph::new();
    g.set_anomaly_detection(true);
    let x = g.variable(Tensor::scalar(1e-200));
    let one = g.constant(Tensor::scalar(1.0));
    let line = line!() + 1;
    let y = g.apply("div", &[&one, &x]).unwrap();
    match y.backward().unwrap_err() {
        Error::Anomaly {
            op,
            location,
            phase,
            ..
        } => {
            assert_eq!(op, "div");
            assert_eq!(phase, "gradient");
            assert!(
                location.starts_with(&format!("tests/higher_order.rs:{line}:")),
                "{location}"
            );
        }
        other => panic!("expected an anomaly, got {other:?}"),
    }
}

#[test]
fn anomaly_mode_is_off_by_default() {
    let g = Graph::new();
    let x = g.variable(Tensor::scalar(-1.0));
    assert!(!g.anomaly_detection());
    assert!(x.log().value().item().is_nan());
}

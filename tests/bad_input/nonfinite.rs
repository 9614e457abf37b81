//! NaN and infinities: ops propagate them (as IEEE arithmetic and PyTorch
//! do), never panic; NaN hyperparameters are typed errors; anomaly mode
//! turns a non-finite value into `Error::Anomaly` naming the op.

use retrograd::{Error, Graph, Tensor, Var};

use crate::expect_err;
use crate::harness::{ensure, setup, Table};
use crate::registry_ops;

const SPECIALS: [f64; 6] = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, 1e308];

fn specials() -> Tensor {
    Tensor::vector(&SPECIALS)
}

type Unary = for<'g> fn(&Var<'g>) -> retrograd::Result<Var<'g>>;

fn unary_ops() -> Vec<(&'static str, Unary)> {
    vec![
        ("powf", |x| Ok(x.powf(0.5))),
        ("powf negative", |x| Ok(x.powf(-1.5))),
        ("softmax", |x| x.try_softmax(0)),
        ("log_softmax", |x| x.try_log_softmax(-1)),
        ("logsumexp", |x| x.try_logsumexp(&[0], false)),
        ("max", |x| x.try_max()),
        ("min", |x| x.try_min()),
        ("var", |x| x.try_var(&[0], 1.0, false)),
        ("sum", |x| Ok(x.sum())),
        ("mean", |x| Ok(x.mean())),
        ("layer_norm", |x| x.try_layer_norm(&[6], None, None, 1e-5)),
        ("dropout", |x| x.try_dropout(0.5, true, 3)),
        ("pow self", |x| x.try_pow(x)),
        ("matmul self", |x| x.try_matmul(x)),
    ]
}

/// A case that runs `op` on the specials, forward and backward.
fn specials_case(
    t: &mut Table,
    name: &str,
    op: impl for<'g> Fn(&Var<'g>) -> retrograd::Result<Var<'g>> + 'static,
) {
    t.add(
        format!("{name}: NaN, infinities and extremes forward and backward"),
        move || {
            let g = Graph::new();
            let x = g.variable(specials());
            let y = setup(op(&x))?;
            let loss = y.sum();
            // NaN in, NaN out: whatever the values, backward runs and the
            // gradient has the input's shape.
            let grads = setup(loss.backward())?;
            ensure(grads.wrt(&x).shape() == [6], || "gradient shape".into())
        },
    );
}

pub fn cases(t: &mut Table) {
    // Every elementwise op of the registry: on the specials, and a binary
    // op also against the specials reversed (NaN and the infinities meet
    // every other value).
    for op in registry_ops::elementwise() {
        if op.arity() == 1 {
            specials_case(t, &op.label, move |x| op.apply(&[x]));
        } else {
            specials_case(t, &format!("{} self", op.label), move |x| op.apply(&[x, x]));
            specials_case(t, &format!("{} reversed", op.label), move |x| {
                let reversed = Tensor::from_indices(&[5, 4, 3, 2, 1, 0], &[6])?;
                op.apply(&[x, &x.try_index_select(0, &reversed)?])
            });
        }
    }
    for (name, op) in unary_ops() {
        specials_case(t, name, op);
    }
    t.add("max propagates NaN", || {
        let g = Graph::new();
        let x = g.variable(Tensor::vector(&[1.0, f64::NAN, 3.0]));
        let v = setup(setup(x.try_max())?.value().try_item())?;
        ensure(v.is_nan(), || format!("max {v}"))
    });
    t.add("argmax with NaN picks the NaN (as PyTorch)", || {
        let g = Graph::new();
        let x = g.variable(Tensor::vector(&[1.0, f64::NAN, 3.0]));
        let v = setup(setup(x.try_argmax(None, false))?.value().try_item())?;
        ensure(v == 1.0, || format!("argmax {v}"))
    });
    t.add("argmin with NaN picks the NaN (as PyTorch)", || {
        let g = Graph::new();
        let x = g.variable(Tensor::vector(&[1.0, -5.0, f64::NAN]));
        let v = setup(setup(x.try_argmin(Some(0), false))?.value().try_item())?;
        ensure(v == 2.0, || format!("argmin {v}"))
    });
    t.add(
        "cross_entropy with +inf logits is NaN or finite, no panic",
        || {
            let g = Graph::new();
            let x = g.variable(setup(Tensor::from_vec(
                vec![f64::INFINITY, 0.0, 0.0, 1.0, f64::NEG_INFINITY, 2.0],
                &[2, 3],
            ))?);
            let l = setup(x.try_cross_entropy(&[0usize, 1]))?;
            let v = setup(l.value().try_item())?;
            // Row 1: inf - inf = NaN (PyTorch gives NaN); row 2: target at -inf is +inf loss.
            ensure(v.is_nan() || v == f64::INFINITY, || format!("loss {v}"))?;
            setup(l.backward()).map(|_| ())
        },
    );
    t.add(
        "cross_entropy with a -inf logit at the target is +inf",
        || {
            let g = Graph::new();
            let x = g.variable(
                Tensor::vector(&[f64::NEG_INFINITY, 0.0])
                    .reshape(&[1, 2])
                    .unwrap(),
            );
            let v = setup(setup(x.try_cross_entropy(&[0usize]))?.value().try_item())?;
            ensure(v == f64::INFINITY, || format!("loss {v}"))
        },
    );
    t.add("clamp: NaN lower bound", || {
        let g = Graph::new();
        let x = g.variable(specials());
        expect_err!(
            x.try_clamp(Some(f64::NAN), Some(1.0)),
            Error::InvalidArgument { .. },
            ["clamp", "NaN"]
        )
    });
    t.add("clamp: NaN upper bound", || {
        let g = Graph::new();
        let x = g.variable(specials());
        expect_err!(
            x.try_clamp(None, Some(f64::NAN)),
            Error::InvalidArgument { .. },
            ["clamp", "NaN"]
        )
    });
    t.add("clamp: no bound", || {
        let g = Graph::new();
        let x = g.variable(specials());
        expect_err!(
            x.try_clamp(None, None),
            Error::InvalidArgument { .. },
            ["clamp"]
        )
    });
    t.add("clamp: min > max gives max everywhere (as PyTorch)", || {
        let g = Graph::new();
        let x = g.variable(Tensor::vector(&[-3.0, 0.5, 7.0]));
        let v = setup(x.try_clamp(Some(2.0), Some(1.0)))?
            .value()
            .to_f64_vec();
        ensure(v == vec![1.0, 1.0, 1.0], || format!("{v:?}"))
    });
    t.add("clamp: NaN input stays NaN", || {
        let g = Graph::new();
        let x = g.variable(Tensor::vector(&[f64::NAN]));
        let v = setup(x.try_clamp(Some(0.0), Some(1.0)))?
            .value()
            .to_f64_vec();
        ensure(v[0].is_nan(), || format!("{v:?}"))
    });
    t.add("clamp: infinite bounds are fine", || {
        let g = Graph::new();
        let x = g.variable(specials());
        let v = setup(x.try_clamp(Some(f64::NEG_INFINITY), Some(f64::INFINITY)))?;
        ensure(v.shape() == [6], || "shape".into())
    });
    for p in [f64::NAN, -0.1, 1.5, f64::INFINITY] {
        t.add(format!("dropout: probability {p}"), move || {
            let g = Graph::new();
            let x = g.variable(specials());
            expect_err!(
                x.try_dropout(p, true, 0),
                Error::InvalidArgument { .. },
                ["dropout", &format!("{p}")]
            )
        });
    }
    t.add("dropout: p = 1 zeroes everything", || {
        let g = Graph::new();
        let x = g.variable(Tensor::vector(&[1.0, 2.0]));
        let v = setup(x.try_dropout(1.0, true, 0))?.value().to_f64_vec();
        ensure(v == vec![0.0, 0.0], || format!("{v:?}"))
    });
    for eps in [-1e-5, f64::NAN, f64::INFINITY] {
        t.add(format!("layer_norm: eps {eps}"), move || {
            let g = Graph::new();
            let x = g.variable(specials());
            expect_err!(
                x.try_layer_norm(&[6], None, None, eps),
                Error::InvalidArgument { .. },
                ["layer_norm"]
            )
        });
    }
    for s in [-0.1, 1.5, f64::NAN] {
        t.add(format!("cross_entropy: label smoothing {s}"), move || {
            let g = Graph::new();
            let x = g.variable(Tensor::vector(&[1.0, 2.0]).reshape(&[1, 2]).unwrap());
            let opts = retrograd::CrossEntropyOptions::default().label_smoothing(s);
            expect_err!(
                x.try_cross_entropy_with(&[0usize], &opts),
                Error::InvalidArgument { .. },
                ["cross_entropy"]
            )
        });
    }
    t.add("anomaly mode: log of a negative names the op", || {
        let g = Graph::new();
        g.set_anomaly_detection(true);
        let x = g.variable(Tensor::vector(&[-1.0]));
        expect_err!(
            g.apply("log", &[&x]),
            Error::Anomaly {
                phase: "forward",
                ..
            },
            ["log"]
        )
    });
    t.add("anomaly mode: a NaN gradient names the op", || {
        let g = Graph::new();
        g.set_anomaly_detection(true);
        let x = g.variable(Tensor::vector(&[0.0]));
        let y = x.sqrt();
        expect_err!(
            (&y * 0.0).sum().backward(),
            Error::Anomaly { .. },
            ["anomaly"]
        )
    });
}

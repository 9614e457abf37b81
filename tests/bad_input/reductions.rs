//! Empty tensors and zero-sized dimensions through reductions, following
//! PyTorch: the sum of nothing is 0, the mean of nothing is NaN, logsumexp
//! of nothing is -inf; a max, min or arg-extremum over nothing is an error.

use retrograd::{DType, Error, Graph, Tensor};

use crate::expect_err;
use crate::harness::{ensure, setup, Table};

fn empty(shape: &[usize]) -> Tensor {
    Tensor::zeros(shape, DType::F64).unwrap()
}

/// A zero-sized shape whose reduction over the empty axis would leave more
/// elements than any buffer can hold.
const HUGE_EMPTY: [usize; 2] = [usize::MAX / 4, 0];

pub fn cases(t: &mut Table) {
    t.add("sum of an empty tensor is 0, gradient empty", || {
        let g = Graph::new();
        let x = g.variable(empty(&[0, 3]));
        let s = x.sum();
        let v = setup(s.value().try_item())?;
        ensure(v == 0.0, || format!("sum {v}"))?;
        let grads = setup(s.backward())?;
        ensure(grads.wrt(&x).shape() == [0, 3], || "gradient shape".into())
    });
    t.add("mean of an empty tensor is NaN (as PyTorch)", || {
        let g = Graph::new();
        let x = g.variable(empty(&[0]));
        let v = setup(x.mean().value().try_item())?;
        ensure(v.is_nan(), || format!("mean {v}"))
    });
    t.add("sum_axes over a zero-sized axis gives zeros", || {
        let g = Graph::new();
        let x = g.variable(empty(&[3, 0]));
        let s = setup(x.try_sum_axes(&[1], false))?;
        ensure(s.value().to_f64_vec() == vec![0.0; 3], || {
            format!("{:?}", s.value())
        })
    });
    t.add("mean_axes over a zero-sized axis gives NaN", || {
        let g = Graph::new();
        let x = g.variable(empty(&[2, 0]));
        let s = setup(x.try_mean_axes(&[-1], true))?;
        let v = s.value().to_f64_vec();
        ensure(s.shape() == [2, 1] && v.iter().all(|v| v.is_nan()), || {
            format!("{v:?}")
        })
    });
    t.add("logsumexp over a zero-sized axis is -inf", || {
        let g = Graph::new();
        let x = g.variable(empty(&[0, 2]));
        let s = setup(x.try_logsumexp(&[0], false))?;
        let v = s.value().to_f64_vec();
        ensure(v == vec![f64::NEG_INFINITY; 2], || format!("{v:?}"))
    });
    t.add(
        "var of one element with correction 1 is NaN (as PyTorch)",
        || {
            let g = Graph::new();
            let x = g.variable(Tensor::vector(&[2.0f64]));
            let v = setup(setup(x.try_var(&[0], 1.0, false))?.value().try_item())?;
            ensure(v.is_nan() || v.is_infinite(), || format!("var {v}"))
        },
    );
    t.add(
        "var: a negative correction divides by n - correction (as PyTorch)",
        || {
            let g = Graph::new();
            let x = g.variable(Tensor::vector(&[2.0f64, 3.0]));
            let v = setup(setup(x.try_var(&[0], -1.0, false))?.value().try_item())?;
            ensure((v - 0.5 / 3.0).abs() < 1e-15, || format!("var {v}"))
        },
    );
    t.add("var: NaN correction", || {
        let g = Graph::new();
        let x = g.variable(Tensor::vector(&[2.0f64, 3.0]));
        expect_err!(
            x.try_var(&[0], f64::NAN, false),
            Error::InvalidArgument { .. },
            ["var", "NaN"]
        )
    });
    t.add("max of an empty tensor", || {
        let g = Graph::new();
        let x = g.variable(empty(&[0, 3]));
        expect_err!(
            x.try_max(),
            Error::InvalidArgument { .. },
            ["max", "[0, 3]"]
        )
    });
    t.add("min of an empty tensor", || {
        let g = Graph::new();
        let x = g.variable(empty(&[2, 0]));
        expect_err!(
            x.try_min(),
            Error::InvalidArgument { .. },
            ["min", "[2, 0]"]
        )
    });
    t.add("max_axes over a zero-sized axis", || {
        let g = Graph::new();
        let x = g.variable(empty(&[0, 3]));
        expect_err!(
            x.try_max_axes(&[0], false),
            Error::InvalidArgument { .. },
            ["max", "[0, 3]"]
        )
    });
    t.add("min_axes over a zero-sized axis", || {
        let g = Graph::new();
        let x = g.variable(empty(&[0, 3]));
        expect_err!(
            x.try_min_axes(&[0, 1], true),
            Error::InvalidArgument { .. },
            ["min", "[0, 3]"]
        )
    });
    t.add(
        "max_axes over the non-empty axis of an empty tensor is empty",
        || {
            let g = Graph::new();
            let x = g.variable(empty(&[0, 3]));
            let m = setup(x.try_max_axes(&[1], false))?;
            ensure(m.shape() == [0], || format!("shape {:?}", m.shape()))
        },
    );
    t.add("argmax of an empty tensor", || {
        let g = Graph::new();
        let x = g.variable(empty(&[0]));
        expect_err!(
            x.try_argmax(None, false),
            Error::InvalidArgument { .. },
            ["argmax", "[0]"]
        )
    });
    t.add("argmin over a zero-sized axis", || {
        let g = Graph::new();
        let x = g.variable(empty(&[4, 0]));
        expect_err!(
            x.try_argmin(Some(1), true),
            Error::InvalidArgument { .. },
            ["argmin", "[4, 0]"]
        )
    });
    t.add("softmax over a zero-sized axis is empty", || {
        let g = Graph::new();
        let x = g.variable(empty(&[2, 0]));
        let s = setup(x.try_softmax(-1))?;
        ensure(s.shape() == [2, 0], || format!("shape {:?}", s.shape()))
    });
    t.add("log_softmax of zero rows is empty", || {
        let g = Graph::new();
        let x = g.variable(empty(&[0, 5]));
        let s = setup(x.try_log_softmax(1))?;
        ensure(s.shape() == [0, 5], || format!("shape {:?}", s.shape()))
    });
    t.add("layer_norm of zero rows is empty", || {
        let g = Graph::new();
        let x = g.variable(empty(&[0, 4]));
        let s = setup(x.try_layer_norm(&[4], None, None, 1e-5))?;
        ensure(s.shape() == [0, 4], || format!("shape {:?}", s.shape()))
    });
    t.add(
        "cross_entropy of zero samples (mean) is NaN (as PyTorch)",
        || {
            let g = Graph::new();
            let x = g.variable(empty(&[0, 3]));
            let l = setup(x.try_cross_entropy::<[usize]>(&[]))?;
            let v = setup(l.value().try_item())?;
            ensure(v.is_nan(), || format!("loss {v}"))
        },
    );
    t.add(
        "mse_loss of empty tensors (mean) is NaN (as PyTorch)",
        || {
            let g = Graph::new();
            let x = g.variable(empty(&[0]));
            let y = g.constant(empty(&[0]));
            let v = setup(setup(x.try_mse_loss(&y))?.value().try_item())?;
            ensure(v.is_nan(), || format!("loss {v}"))
        },
    );
    t.add(
        "sum_axes of a huge zero-sized shape over its empty axis",
        || {
            let g = Graph::new();
            let x = g.variable(empty(&HUGE_EMPTY));
            expect_err!(
                x.try_sum_axes(&[1], false),
                Error::ShapeOverflow { .. },
                ["sum"]
            )
        },
    );
    t.add(
        "mean_axes of a huge zero-sized shape over its empty axis",
        || {
            let g = Graph::new();
            let x = g.variable(empty(&HUGE_EMPTY));
            expect_err!(
                x.try_mean_axes(&[1], true),
                Error::ShapeOverflow { .. },
                ["mean"]
            )
        },
    );
    t.add(
        "logsumexp of a huge zero-sized shape over its empty axis",
        || {
            let g = Graph::new();
            let x = g.variable(empty(&HUGE_EMPTY));
            expect_err!(
                x.try_logsumexp(&[1], false),
                Error::ShapeOverflow { .. },
                ["logsumexp"]
            )
        },
    );
    t.add("var of a huge zero-sized shape over its empty axis", || {
        let g = Graph::new();
        let x = g.variable(empty(&HUGE_EMPTY));
        expect_err!(
            x.try_var(&[1], 0.0, false),
            Error::ShapeOverflow { .. },
            ["var"]
        )
    });
    t.add(
        "sum_axes over the huge axis of a zero-sized shape is empty",
        || {
            let g = Graph::new();
            let x = g.variable(empty(&HUGE_EMPTY));
            let s = setup(x.try_sum_axes(&[0], false))?;
            ensure(s.shape() == [0], || format!("shape {:?}", s.shape()))
        },
    );
}

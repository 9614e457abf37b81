//! Out-of-range axes, positive and negative, for every op that takes one:
//! `Error::AxisOutOfRange` naming the op, the axis and the rank.

use retrograd::{Error, Graph, Result, Tensor, Var};

use crate::expect_err;
use crate::harness::{setup, Table};

type AxisOp = for<'g> fn(&Var<'g>, isize) -> Result<Var<'g>>;

/// Each op with its axis argument set to `a` (every other argument valid).
fn axis_ops() -> Vec<(&'static str, AxisOp)> {
    vec![
        ("sum", |x, a| x.try_sum_axes(&[a], false)),
        ("mean", |x, a| x.try_mean_axes(&[0, a], true)),
        ("var", |x, a| x.try_var(&[a], 1.0, false)),
        ("logsumexp", |x, a| x.try_logsumexp(&[a], true)),
        ("max", |x, a| x.try_max_axes(&[a], false)),
        ("min", |x, a| x.try_min_axes(&[a], true)),
        ("argmax", |x, a| x.try_argmax(Some(a), false)),
        ("argmin", |x, a| x.try_argmin(Some(a), true)),
        ("softmax", |x, a| x.try_softmax(a)),
        ("log_softmax", |x, a| x.try_log_softmax(a)),
        ("transpose", |x, a| x.try_transpose(0, a)),
        ("transpose", |x, a| x.try_transpose(a, 1)),
        ("permute", |x, a| x.try_permute(&[0, a])),
        ("flatten", |x, a| x.try_flatten(a, -1)),
        ("flatten", |x, a| x.try_flatten(0, a)),
        ("squeeze", |x, a| x.try_squeeze_dim(a)),
        ("select", |x, a| x.try_select(a, 0)),
        ("slice", |x, a| x.try_slice(a, 0, 1, 1)),
        ("narrow", |x, a| x.try_narrow(a, 0, 1)),
        ("index_select", |x, a| {
            x.try_index_select(a, &Tensor::from_indices(&[0], &[1])?)
        }),
        ("gather", |x, a| {
            x.try_gather(a, &Tensor::from_indices(&[0, 0], &[1, 2])?)
        }),
        ("index_add", |x, a| {
            let src = x
                .graph()
                .constant(Tensor::zeros(&[2, 1], retrograd::DType::F64)?);
            x.try_index_add(a, &Tensor::from_indices(&[0], &[1])?, &src)
        }),
        ("scatter_add", |x, a| {
            let src = x
                .graph()
                .constant(Tensor::zeros(&[1, 2], retrograd::DType::F64)?);
            x.try_scatter_add(a, &Tensor::from_indices(&[0, 0], &[1, 2])?, &src)
        }),
        ("cat", |x, a| Var::try_cat(&[x, x], a)),
        ("stack", |x, a| Var::try_stack(&[x, x], a)),
    ]
}

pub fn cases(t: &mut Table) {
    // A 2-d input: axes 2, 3, -3 and far-away values are out of range.
    for (name, op) in axis_ops() {
        let bad: &[isize] = if name == "stack" {
            &[3, -4, isize::MAX, isize::MIN]
        } else {
            &[2, -3, isize::MAX, isize::MIN]
        };
        for &a in bad {
            t.add(format!("{name}: axis {a} of a rank-2 value"), move || {
                let g = Graph::new();
                let x = g.variable(setup(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]))?);
                let axis = a.to_string();
                expect_err!(
                    op(&x, a),
                    Error::AxisOutOfRange { .. },
                    [name, axis.as_str(), "rank"]
                )
            });
        }
    }
    t.add("unsqueeze: axis rank + 1", || {
        let g = Graph::new();
        let x = g.variable(Tensor::vector(&[1.0, 2.0]));
        expect_err!(
            x.try_unsqueeze(2),
            Error::AxisOutOfRange { axis: 2, .. },
            ["unsqueeze"]
        )
    });
    t.add("unsqueeze: axis -(rank + 2)", || {
        let g = Graph::new();
        let x = g.variable(Tensor::vector(&[1.0, 2.0]));
        expect_err!(
            x.try_unsqueeze(-3),
            Error::AxisOutOfRange { axis: -3, .. },
            ["unsqueeze"]
        )
    });
    t.add("sum: a repeated axis", || {
        let g = Graph::new();
        let x = g.variable(Tensor::vector(&[1.0, 2.0]));
        expect_err!(
            x.try_sum_axes(&[0, -1], false),
            Error::InvalidArgument { .. },
            ["sum", "repeated"]
        )
    });
    t.add("permute: a repeated axis", || {
        let g = Graph::new();
        let x = g.variable(setup(Tensor::zeros(&[2, 3], retrograd::DType::F32))?);
        expect_err!(
            x.try_permute(&[1, 1]),
            Error::InvalidArgument { .. },
            ["permute"]
        )
    });
    t.add("permute: too few axes", || {
        let g = Graph::new();
        let x = g.variable(setup(Tensor::zeros(&[2, 3], retrograd::DType::F32))?);
        expect_err!(
            x.try_permute(&[0]),
            Error::InvalidArgument { .. },
            ["permute"]
        )
    });
    t.add("flatten: start after end", || {
        let g = Graph::new();
        let x = g.variable(setup(Tensor::zeros(&[2, 3, 4], retrograd::DType::F32))?);
        expect_err!(
            x.try_flatten(2, 0),
            Error::InvalidArgument { .. },
            ["flatten"]
        )
    });
    t.add(
        "squeeze: an axis whose size is not 1 is kept (as PyTorch)",
        || {
            let g = Graph::new();
            let x = g.variable(setup(Tensor::zeros(&[2, 3], retrograd::DType::F32))?);
            let y = setup(x.try_squeeze_dim(0))?;
            crate::harness::ensure(y.shape() == [2, 3], || format!("shape {:?}", y.shape()))
        },
    );
    t.add("t: a rank-3 value", || {
        let g = Graph::new();
        let x = g.variable(setup(Tensor::zeros(&[2, 3, 4], retrograd::DType::F32))?);
        expect_err!(x.try_t(), Error::InvalidArgument { .. }, ["t", "[2, 3, 4]"])
    });
    t.add(
        "softmax: axis 0 of a 0-d value is fine (as PyTorch)",
        || {
            let g = Graph::new();
            let x = g.variable(Tensor::scalar(3.0));
            let v = setup(setup(x.try_softmax(0))?.value().try_item())?;
            crate::harness::ensure(v == 1.0, || format!("softmax {v}"))
        },
    );
    t.add("softmax: axis 1 of a 0-d value", || {
        let g = Graph::new();
        let x = g.variable(Tensor::scalar(3.0));
        expect_err!(x.try_softmax(1), Error::AxisOutOfRange { .. }, ["softmax"])
    });
    t.add("sum: axis 0 of a 0-d value", || {
        let g = Graph::new();
        let x = g.variable(Tensor::scalar(3.0));
        expect_err!(
            x.try_sum_axes(&[0], false),
            Error::AxisOutOfRange { rank: 0, .. },
            ["sum"]
        )
    });
}

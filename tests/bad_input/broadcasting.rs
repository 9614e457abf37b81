//! Shapes that do not broadcast, through every binary (and ternary) op.

use retrograd::{Error, Graph, Result, Tensor, Var};

use crate::expect_err;
use crate::harness::{Outcome, Table};

type BinaryOp = for<'g> fn(&Var<'g>, &Var<'g>) -> Result<Var<'g>>;

/// Every op that broadcasts two value operands, by the name its errors use.
pub fn binary_ops() -> Vec<(&'static str, BinaryOp)> {
    vec![
        ("add", |a, b| a.try_add(b)),
        ("sub", |a, b| a.try_sub(b)),
        ("mul", |a, b| a.try_mul(b)),
        ("div", |a, b| a.try_div(b)),
        ("pow", |a, b| a.try_pow(b)),
        ("maximum", |a, b| a.try_maximum(b)),
        ("minimum", |a, b| a.try_minimum(b)),
        ("mse_loss", |a, b| a.try_mse_loss(b)),
        ("binary_cross_entropy_with_logits", |a, b| {
            a.try_binary_cross_entropy_with_logits(b)
        }),
    ]
}

fn values(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| i as f64 * 0.25 + 0.5).collect(), shape).unwrap()
}

/// `op(a, b)` with variables of shapes `a` and `b` must be a `ShapeMismatch`
/// naming the op and both shapes.
fn mismatch(name: &'static str, op: BinaryOp, a: &[usize], b: &[usize]) -> Outcome {
    let g = Graph::new();
    let x = g.variable(values(a));
    let y = g.variable(values(b));
    let (sa, sb) = (format!("{a:?}"), format!("{b:?}"));
    expect_err!(op(&x, &y), Error::ShapeMismatch { .. }, [name, &sa, &sb])
}

pub fn cases(t: &mut Table) {
    let pairs: [(&[usize], &[usize]); 5] = [
        (&[2, 3], &[4]),
        (&[3], &[2]),
        (&[2, 3, 4], &[3, 3]),
        (&[0], &[2]),
        (&[5, 1, 2], &[5, 3, 3]),
    ];
    for (name, op) in binary_ops() {
        for (a, b) in pairs {
            t.add(
                format!("{name}: shapes {a:?} and {b:?} do not broadcast"),
                move || mismatch(name, op, a, b),
            );
            t.add(
                format!("{name}: shapes {b:?} and {a:?} do not broadcast"),
                move || mismatch(name, op, b, a),
            );
        }
    }
    t.add("where: condition does not broadcast", || {
        let g = Graph::new();
        let x = g.variable(values(&[2, 3]));
        let y = g.variable(values(&[2, 3]));
        let cond = values(&[4]);
        expect_err!(
            x.try_where(&cond, &y),
            Error::ShapeMismatch { .. },
            ["where", "[4]"]
        )
    });
    t.add("where: values do not broadcast", || {
        let g = Graph::new();
        let x = g.variable(values(&[2, 3]));
        let y = g.variable(values(&[3, 2]));
        let cond = values(&[2, 3]);
        expect_err!(
            x.try_where(&cond, &y),
            Error::ShapeMismatch { .. },
            ["where", "[2, 3]", "[3, 2]"]
        )
    });
    t.add("expand: to a smaller rank", || {
        let g = Graph::new();
        let x = g.variable(values(&[2, 3]));
        expect_err!(
            x.try_expand(&[3]),
            Error::ShapeMismatch { .. },
            ["expand", "[2, 3]", "[3]"]
        )
    });
    t.add("expand: a non-1 dimension to another size", || {
        let g = Graph::new();
        let x = g.variable(values(&[2, 3]));
        expect_err!(
            x.try_expand(&[2, 4]),
            Error::ShapeMismatch { .. },
            ["expand", "[2, 3]", "[2, 4]"]
        )
    });
    t.add(
        "sum_to_size: a shape the value does not broadcast from",
        || {
            let g = Graph::new();
            let x = g.variable(values(&[2, 3]));
            expect_err!(
                x.sum_to_size(&[4]),
                Error::ShapeMismatch { .. },
                ["[2, 3]", "[4]"]
            )
        },
    );
    t.add(
        "broadcasting a zero-sized dimension against 1 gives an empty result",
        || {
            let g = Graph::new();
            let x = g.variable(values(&[0, 3]));
            let y = g.variable(values(&[1, 3]));
            let z = x.try_add(&y).map_err(|e| e.to_string())?;
            crate::harness::ensure(z.shape() == [0, 3], || format!("shape {:?}", z.shape()))
        },
    );
}

//! Shape-changing ops: reshape to wrong element counts, matmul inner
//! dimension mismatches and 0-d operands, cat/stack of empty lists and
//! mismatched shapes, pad with huge or negative widths, expand and cat
//! whose result could not be addressed.

use retrograd::{DType, Error, Graph, Tensor, Var};

use crate::expect_err;
use crate::harness::{ensure, setup, Table};

fn values(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| i as f64).collect(), shape).unwrap()
}

fn empty(shape: &[usize]) -> Tensor {
    Tensor::zeros(shape, DType::F64).unwrap()
}

pub fn cases(t: &mut Table) {
    results_beyond_memory(t);
    let reshapes: [(&[isize], &str); 6] = [
        (&[4, 2], "[4, 2]"),
        (&[7], "[7]"),
        (&[-1, 4], "4"),
        (&[-1, -1], "-1"),
        (&[-2, 3], "-2"),
        (&[isize::MAX, 3], "9223372036854775807"),
    ];
    for (shape, shown) in reshapes {
        t.add(format!("reshape: 6 elements to {shape:?}"), move || {
            let g = Graph::new();
            let x = g.variable(values(&[2, 3]));
            expect_err!(
                x.try_reshape(shape),
                Error::ElementCount { .. }
                    | Error::InvalidArgument { .. }
                    | Error::ShapeOverflow { .. },
                ["reshape", shown]
            )
        });
    }
    t.add("reshape: -1 with zero elements is ambiguous", || {
        let g = Graph::new();
        let x = g.variable(empty(&[0, 3]));
        expect_err!(
            x.try_reshape(&[0, -1]),
            Error::InvalidArgument { .. } | Error::ElementCount { .. },
            ["reshape"]
        )
    });
    t.add("reshape: an empty tensor to [0, 5] works", || {
        let g = Graph::new();
        let x = g.variable(empty(&[0, 3]));
        let y = setup(x.try_reshape(&[0, 5]))?;
        ensure(y.shape() == [0, 5], || format!("shape {:?}", y.shape()))
    });
    let matmuls: [(&[usize], &[usize]); 6] = [
        (&[2, 3], &[4, 2]),
        (&[3], &[4]),
        (&[2, 3], &[2]),
        (&[5], &[3, 2]),
        (&[2, 2, 3], &[3, 3, 1]),
        (&[4, 2, 3], &[3, 3, 4]),
    ];
    for (a, b) in matmuls {
        t.add(format!("matmul: {a:?} @ {b:?}"), move || {
            let g = Graph::new();
            let x = g.variable(values(a));
            let y = g.variable(values(b));
            let (sa, sb) = (format!("{a:?}"), format!("{b:?}"));
            expect_err!(
                x.try_matmul(&y),
                Error::ShapeMismatch { .. },
                ["matmul", &sa, &sb]
            )
        });
    }
    for (a, b) in [(&[][..], &[3][..]), (&[3][..], &[][..]), (&[][..], &[][..])] {
        t.add(format!("matmul: 0-d operand {a:?} @ {b:?}"), move || {
            let g = Graph::new();
            let x = g.variable(values(a));
            let y = g.variable(values(b));
            expect_err!(
                x.try_matmul(&y),
                Error::InvalidArgument { .. } | Error::ShapeMismatch { .. },
                ["matmul"]
            )
        });
    }
    t.add("matmul: [2, 0] @ [0, 3] is zeros (as PyTorch)", || {
        let g = Graph::new();
        let x = g.variable(empty(&[2, 0]));
        let y = g.variable(empty(&[0, 3]));
        let z = setup(x.try_matmul(&y))?;
        ensure(z.value().to_f64_vec() == vec![0.0; 6], || {
            format!("{:?}", z.value())
        })?;
        let grads = setup(z.sum().backward())?;
        ensure(grads.wrt(&x).shape() == [2, 0], || "gradient shape".into())
    });
    t.add(
        "matmul: huge zero-sized operands whose product cannot be addressed",
        || {
            let g = Graph::new();
            let x = g.variable(empty(&[usize::MAX / 2, 0]));
            let y = g.variable(empty(&[0, usize::MAX / 2]));
            expect_err!(x.try_matmul(&y), Error::ShapeOverflow { .. }, ["matmul"])
        },
    );
    t.add("matmul_transposed: inner dimension mismatch", || {
        let g = Graph::new();
        let x = g.variable(values(&[2, 3]));
        let y = g.variable(values(&[2, 3]));
        expect_err!(
            x.try_matmul_transposed(&y, false, false),
            Error::ShapeMismatch { .. },
            ["matmul", "[2, 3]"]
        )
    });
    t.add("cat: an empty list", || {
        expect_err!(
            Var::try_cat(&[], 0),
            Error::InvalidArgument { .. },
            ["cat", "empty"]
        )
    });
    t.add("stack: an empty list", || {
        expect_err!(
            Var::try_stack(&[], 0),
            Error::InvalidArgument { .. },
            ["stack", "empty"]
        )
    });
    t.add("cat: mismatched off-axis sizes", || {
        let g = Graph::new();
        let a = g.variable(values(&[2, 3]));
        let b = g.variable(values(&[2, 4]));
        expect_err!(
            Var::try_cat(&[&a, &b], 0),
            Error::ShapeMismatch { .. },
            ["cat", "[2, 3]", "[2, 4]"]
        )
    });
    t.add("cat: mismatched ranks", || {
        let g = Graph::new();
        let a = g.variable(values(&[2, 3]));
        let b = g.variable(values(&[3]));
        expect_err!(
            Var::try_cat(&[&a, &b], 0),
            Error::ShapeMismatch { .. },
            ["cat", "[2, 3]", "[3]"]
        )
    });
    t.add("cat: 0-d values", || {
        let g = Graph::new();
        let a = g.variable(Tensor::scalar(1.0));
        let b = g.variable(Tensor::scalar(2.0));
        expect_err!(
            Var::try_cat(&[&a, &b], 0),
            Error::InvalidArgument { .. },
            ["cat", "0-d"]
        )
    });
    t.add("cat: a single 0-d value", || {
        let g = Graph::new();
        let a = g.variable(Tensor::scalar(1.0));
        expect_err!(
            Var::try_cat(&[&a], 0),
            Error::InvalidArgument { .. },
            ["cat", "0-d"]
        )
    });
    t.add("cat: sizes whose sum overflows", || {
        let g = Graph::new();
        let a = g.variable(empty(&[0, usize::MAX / 2 + 1]));
        expect_err!(
            Var::try_cat(&[&a, &a], 1),
            Error::ShapeOverflow { .. },
            ["cat"]
        )
    });
    t.add("cat: empty pieces join", || {
        let g = Graph::new();
        let a = g.variable(empty(&[0, 3]));
        let b = g.variable(values(&[2, 3]));
        let c = setup(Var::try_cat(&[&a, &b, &a], 0))?;
        ensure(c.shape() == [2, 3], || format!("shape {:?}", c.shape()))
    });
    t.add("stack: mismatched shapes", || {
        let g = Graph::new();
        let a = g.variable(values(&[2, 3]));
        let b = g.variable(values(&[3, 2]));
        expect_err!(
            Var::try_stack(&[&a, &b], 0),
            Error::ShapeMismatch { .. },
            ["stack", "[2, 3]", "[3, 2]"]
        )
    });
    t.add("stack: 0-d values make a vector", || {
        let g = Graph::new();
        let a = g.variable(Tensor::scalar(1.0));
        let s = setup(Var::try_stack(&[&a, &a], 0))?;
        ensure(s.shape() == [2], || format!("shape {:?}", s.shape()))
    });
    let pads: [(&[isize], &str); 7] = [
        (&[1], "rank"),
        (&[0, 0, 0, 0, 0, 0], "rank"),
        (&[-4, 0], "negative"),
        (&[0, -4], "negative"),
        (&[isize::MIN, 0], "pad"),
        (&[isize::MAX, isize::MAX], "pad"),
        (&[isize::MAX / 4, 0, isize::MAX / 4, 0], "pad"),
    ];
    for (p, shown) in pads {
        t.add(format!("pad: widths {p:?} of a [2, 3] value"), move || {
            let g = Graph::new();
            let x = g.variable(values(&[2, 3]));
            expect_err!(
                x.try_pad(p, 0.0),
                Error::InvalidArgument { .. } | Error::ShapeOverflow { .. },
                ["pad", shown]
            )
        });
    }
    t.add("pad: a width whose byte size cannot be addressed", || {
        let g = Graph::new();
        let x = g.variable(values(&[3]));
        expect_err!(
            x.try_pad(&[0, isize::MAX / 4], 1.0),
            Error::ShapeOverflow { .. },
            ["pad"]
        )
    });
    t.add("pad: cropping everything gives an empty value", || {
        let g = Graph::new();
        let x = g.variable(values(&[2, 3]));
        let y = setup(x.try_pad(&[-3, 0], 0.0))?;
        ensure(y.shape() == [2, 0], || format!("shape {:?}", y.shape()))
    });
    t.add("pad: NaN fill value is a documented result", || {
        let g = Graph::new();
        let x = g.variable(values(&[1]));
        let v = setup(x.try_pad(&[1, 0], f64::NAN))?.value().to_f64_vec();
        ensure(v[0].is_nan() && v[1] == 0.0, || format!("{v:?}"))
    });
    t.add("expand: to a shape that cannot be addressed", || {
        let g = Graph::new();
        let x = g.variable(values(&[1, 1]));
        expect_err!(
            x.try_expand(&[usize::MAX / 4, 4]),
            Error::ShapeOverflow { .. },
            ["expand"]
        )
    });
    t.add("expand: to a zero-sized dimension works", || {
        let g = Graph::new();
        let x = g.variable(values(&[1, 3]));
        let y = setup(x.try_expand(&[0, 3]))?;
        ensure(y.shape() == [0, 3], || format!("shape {:?}", y.shape()))
    });
    t.add(
        "broadcasting zero-sized operands to a result that cannot be addressed",
        || {
            let g = Graph::new();
            let x = g.variable(empty(&[usize::MAX / 2, 1, 0]));
            let y = g.variable(empty(&[1, usize::MAX / 2, 0]));
            let z = setup(x.try_add(&y))?;
            ensure(z.value().numel() == 0, || format!("shape {:?}", z.shape()))
        },
    );
    t.add(
        "unsqueeze then reshape of a huge zero-sized shape stays empty",
        || {
            let g = Graph::new();
            let x = g.variable(empty(&[usize::MAX, 0]));
            let y = setup(setup(x.try_unsqueeze(0))?.try_flatten(0, -1))?;
            ensure(y.shape() == [0], || format!("shape {:?}", y.shape()))
        },
    );
}

/// Ops on 64 MiB operands whose result (2^48 f32 elements, 2^50 bytes:
/// beyond any address space) the allocator refuses: a typed error naming
/// the op, not an abort. The graph stays usable afterwards.
fn results_beyond_memory(t: &mut Table) {
    type Op = for<'g> fn(&Var<'g>, &Var<'g>) -> retrograd::Result<Var<'g>>;
    let ops: [(&str, Op); 3] = [
        ("add", |a, b| a.try_add(b)),
        ("mul", |a, b| a.try_mul(b)),
        ("matmul", |a, b| a.try_matmul(b)),
    ];
    for (name, op) in ops {
        for requires_grad in [false, true] {
            t.add(
                format!("{name}: a [2^24, 2^24] f32 result (grad {requires_grad}) is more memory than can be had"),
                move || {
                    let g = Graph::new();
                    let leaf = |shape: &[usize]| {
                        let zeros = Tensor::zeros(shape, DType::F32).unwrap();
                        if requires_grad { g.variable(zeros) } else { g.constant(zeros) }
                    };
                    let (col, row) = (leaf(&[1 << 24, 1]), leaf(&[1, 1 << 24]));
                    expect_err!(op(&col, &row), Error::OutOfMemory { .. }, [name, "16777216"])?;
                    let small = leaf(&[1]);
                    let sum = setup(small.try_add(&small))?;
                    ensure(sum.value().to_f64_vec() == vec![0.0], || "graph unusable".into())
                },
            );
        }
    }
}

//! Out-of-range, negative and non-integer indices: index_select, gather,
//! index_add, scatter_add, select, narrow, slice, embedding, and the class
//! targets of cross_entropy and nll_loss (typed or, through `Graph::apply`,
//! as float tensors).

use retrograd::{CrossEntropyOptions, DType, Error, Graph, NllLossOptions, Tensor};

use crate::expect_err;
use crate::harness::{ensure, setup, Table};

fn matrix() -> Tensor {
    Tensor::from_vec((0..6).map(|i| i as f64).collect(), &[2, 3]).unwrap()
}

fn floats(v: &[f64]) -> Tensor {
    Tensor::vector(v)
}

pub fn cases(t: &mut Table) {
    // Index tensors are floats holding integers; each bad value is checked
    // by every op that reads one.
    let bad_values: [(f64, &str); 6] = [
        (3.0, "3"),
        (-1.0, "-1"),
        (1e18, "1000000000000000000"),
        (0.5, "0.5"),
        (f64::NAN, "NaN"),
        (f64::INFINITY, "inf"),
    ];
    for (v, shown) in bad_values {
        t.add(
            format!("index_select: index {shown} into a dimension of 3"),
            move || {
                let g = Graph::new();
                let x = g.variable(matrix());
                expect_err!(
                    x.try_index_select(1, &floats(&[0.0, v])),
                    Error::IndexOutOfRange { .. } | Error::InvalidArgument { .. },
                    ["index_select", shown]
                )
            },
        );
        t.add(
            format!("gather: index {shown} into a dimension of 3"),
            move || {
                let g = Graph::new();
                let x = g.variable(matrix());
                let idx = setup(Tensor::from_vec(vec![0.0, v, 1.0, 2.0], &[2, 2]))?;
                expect_err!(
                    x.try_gather(1, &idx),
                    Error::IndexOutOfRange { .. } | Error::InvalidArgument { .. },
                    ["gather", shown]
                )
            },
        );
        t.add(
            format!("index_add: index {shown} into a dimension of 2"),
            move || {
                let g = Graph::new();
                let x = g.variable(matrix());
                let src = g.constant(setup(Tensor::ones(&[1, 3], DType::F64))?);
                let v = if v == 3.0 { 2.0 } else { v };
                let shown = if shown == "3" { "2" } else { shown };
                expect_err!(
                    x.try_index_add(0, &floats(&[v]), &src),
                    Error::IndexOutOfRange { .. } | Error::InvalidArgument { .. },
                    ["index_add", shown]
                )
            },
        );
        t.add(
            format!("scatter_add: index {shown} into a dimension of 3"),
            move || {
                let g = Graph::new();
                let x = g.variable(matrix());
                let src = g.constant(setup(Tensor::ones(&[1, 2], DType::F64))?);
                let idx = setup(Tensor::from_vec(vec![v, 0.0], &[1, 2]))?;
                expect_err!(
                    x.try_scatter_add(1, &idx, &src),
                    Error::IndexOutOfRange { .. } | Error::InvalidArgument { .. },
                    ["scatter_add", shown]
                )
            },
        );
        t.add(
            format!("cross_entropy via apply: target {shown} of 3 classes"),
            move || {
                let g = Graph::new();
                let x = g.variable(matrix());
                let y = g.constant(floats(&[1.0, v]));
                expect_err!(
                    g.apply("cross_entropy", &[&x, &y]),
                    Error::IndexOutOfRange { .. } | Error::InvalidArgument { .. },
                    ["cross_entropy", shown]
                )
            },
        );
        t.add(
            format!("nll_loss via apply: target {shown} of 3 classes"),
            move || {
                let g = Graph::new();
                let x = g.variable(matrix());
                let y = g.constant(floats(&[v, 0.0]));
                expect_err!(
                    g.apply("nll_loss", &[&x, &y]),
                    Error::IndexOutOfRange { .. } | Error::InvalidArgument { .. },
                    ["nll_loss", shown]
                )
            },
        );
        t.add(
            format!("embedding via apply: index {shown} of 2 rows"),
            move || {
                let g = Graph::new();
                let w = g.variable(matrix());
                let i = g.constant(floats(&[v]));
                let shown = if shown == "3" { "3" } else { shown };
                expect_err!(
                    g.apply("embedding", &[&w, &i]),
                    Error::IndexOutOfRange { .. } | Error::InvalidArgument { .. },
                    ["embedding", shown]
                )
            },
        );
    }
    t.add("index_select: a 2-d index", || {
        let g = Graph::new();
        let x = g.variable(matrix());
        let idx = setup(Tensor::from_indices(&[0, 1], &[1, 2]))?;
        expect_err!(
            x.try_index_select(0, &idx),
            Error::InvalidArgument { .. },
            ["index_select", "[1, 2]"]
        )
    });
    t.add(
        "index_select: an empty index gives an empty dimension",
        || {
            let g = Graph::new();
            let x = g.variable(matrix());
            let y = setup(x.try_index_select(0, &setup(Tensor::from_indices(&[], &[0]))?))?;
            ensure(y.shape() == [0, 3], || format!("shape {:?}", y.shape()))
        },
    );
    t.add("gather: index of another rank", || {
        let g = Graph::new();
        let x = g.variable(matrix());
        let idx = setup(Tensor::from_indices(&[0, 1], &[2]))?;
        expect_err!(
            x.try_gather(1, &idx),
            Error::ShapeMismatch { .. } | Error::InvalidArgument { .. },
            ["gather", "[2, 3]", "[2]"]
        )
    });
    t.add(
        "gather: index larger than the input off the gather axis",
        || {
            let g = Graph::new();
            let x = g.variable(matrix());
            let idx = setup(Tensor::from_indices(&[0; 9], &[3, 3]))?;
            expect_err!(
                x.try_gather(1, &idx),
                Error::ShapeMismatch { .. } | Error::InvalidArgument { .. },
                ["gather", "[2, 3]", "[3, 3]"]
            )
        },
    );
    t.add("index_add: source of the wrong shape", || {
        let g = Graph::new();
        let x = g.variable(matrix());
        let src = g.constant(setup(Tensor::ones(&[1, 4], DType::F64))?);
        expect_err!(
            x.try_index_add(0, &floats(&[1.0]), &src),
            Error::ShapeMismatch { .. } | Error::InvalidArgument { .. },
            ["index_add", "[1, 4]"]
        )
    });
    t.add("scatter_add: source smaller than the index", || {
        let g = Graph::new();
        let x = g.variable(matrix());
        let src = g.constant(setup(Tensor::ones(&[1, 1], DType::F64))?);
        let idx = setup(Tensor::from_indices(&[0, 1], &[1, 2]))?;
        expect_err!(
            x.try_scatter_add(1, &idx, &src),
            Error::ShapeMismatch { .. } | Error::InvalidArgument { .. },
            ["scatter_add", "[1, 1]", "[1, 2]"]
        )
    });
    t.add("select: index 2 of a dimension of 2", || {
        let g = Graph::new();
        let x = g.variable(matrix());
        expect_err!(
            x.try_select(0, 2),
            Error::IndexOutOfRange {
                index: 2,
                size: 2,
                ..
            },
            ["select"]
        )
    });
    t.add("select: index usize::MAX", || {
        let g = Graph::new();
        let x = g.variable(matrix());
        expect_err!(
            x.try_select(1, usize::MAX),
            Error::IndexOutOfRange { .. },
            ["select"]
        )
    });
    for (start, len) in [
        (2isize, 2usize),
        (3, 1),
        (-4, 1),
        (0, 4),
        (1, usize::MAX),
        (isize::MAX, 1),
        (isize::MIN, 1),
    ] {
        t.add(
            format!("narrow: start {start}, length {len} of a dimension of 3"),
            move || {
                let g = Graph::new();
                let x = g.variable(matrix());
                expect_err!(
                    x.try_narrow(1, start, len),
                    Error::IndexOutOfRange { .. } | Error::InvalidArgument { .. },
                    ["narrow"]
                )
            },
        );
    }
    t.add("narrow: length 0 at the end is empty", || {
        let g = Graph::new();
        let x = g.variable(matrix());
        let y = setup(x.try_narrow(1, 3, 0))?;
        ensure(y.shape() == [2, 0], || format!("shape {:?}", y.shape()))
    });
    t.add("slice: step 0", || {
        let g = Graph::new();
        let x = g.variable(matrix());
        expect_err!(
            x.try_slice(1, 0, 3, 0),
            Error::InvalidArgument { .. },
            ["slice", "step"]
        )
    });
    for (start, end) in [
        (isize::MIN, isize::MAX),
        (5, 1),
        (-100, 100),
        (isize::MAX, isize::MIN),
    ] {
        t.add(
            format!("slice: start {start}, end {end} clamps (as Python slicing)"),
            move || {
                let g = Graph::new();
                let x = g.variable(matrix());
                let y = setup(x.try_slice(1, start, end, usize::MAX))?;
                ensure(y.shape()[0] == 2 && y.shape()[1] <= 1, || {
                    format!("shape {:?}", y.shape())
                })
            },
        );
    }
    for (idx, shown) in [
        (2i64, "2"),
        (-1, "-1"),
        (i64::MAX, "9223372036854775807"),
        (i64::MIN, "-9223372036854775808"),
    ] {
        t.add(format!("embedding: index {shown} of 2 rows"), move || {
            let g = Graph::new();
            let w = g.variable(matrix());
            expect_err!(
                w.try_embedding(&[0, idx], &[2]),
                Error::IndexOutOfRange { .. },
                ["embedding", shown]
            )
        });
        t.add(
            format!("cross_entropy: target {shown} of 3 classes"),
            move || {
                let g = Graph::new();
                let x = g.variable(matrix());
                let target = if idx == 2 { 3 } else { idx };
                let shown = if idx == 2 { "3" } else { shown };
                expect_err!(
                    x.try_cross_entropy(&[0, target]),
                    Error::IndexOutOfRange { .. },
                    ["cross_entropy", shown]
                )
            },
        );
        t.add(
            format!("nll_loss: target {shown} of 3 classes"),
            move || {
                let g = Graph::new();
                let x = g.variable(matrix());
                let target = if idx == 2 { 3 } else { idx };
                let shown = if idx == 2 { "3" } else { shown };
                expect_err!(
                    x.try_nll_loss(&[target, 0]),
                    Error::IndexOutOfRange { .. },
                    ["nll_loss", shown]
                )
            },
        );
    }
    t.add("embedding: u64::MAX index", || {
        let g = Graph::new();
        let w = g.variable(matrix());
        expect_err!(
            w.try_embedding(&[u64::MAX], &[1]),
            Error::IndexOutOfRange { .. },
            ["embedding"]
        )
    });
    t.add(
        "embedding: index shape does not match the index count",
        || {
            let g = Graph::new();
            let w = g.variable(matrix());
            expect_err!(
                w.try_embedding(&[0usize, 1], &[3]),
                Error::ElementCount { .. } | Error::InvalidArgument { .. },
                ["embedding", "[3]"]
            )
        },
    );
    t.add("embedding: overflowing index shape", || {
        let g = Graph::new();
        let w = g.variable(matrix());
        expect_err!(
            w.try_embedding(&[0usize], &[usize::MAX, 2]),
            Error::ShapeOverflow { .. } | Error::ElementCount { .. },
            ["embedding"]
        )
    });
    t.add("embedding: padding index out of range", || {
        let g = Graph::new();
        let w = g.variable(matrix());
        expect_err!(
            w.try_embedding_with(&[0usize], &[1], Some(2)),
            Error::IndexOutOfRange { .. },
            ["embedding", "2"]
        )
    });
    t.add("embedding: a 1-d weight", || {
        let g = Graph::new();
        let w = g.variable(floats(&[1.0, 2.0]));
        expect_err!(
            w.try_embedding(&[0usize], &[1]),
            Error::InvalidArgument { .. } | Error::ShapeMismatch { .. },
            ["embedding", "[2]"]
        )
    });
    t.add("cross_entropy: fewer targets than samples", || {
        let g = Graph::new();
        let x = g.variable(matrix());
        expect_err!(
            x.try_cross_entropy(&[0usize]),
            Error::InvalidArgument { .. },
            ["cross_entropy", "[2, 3]"]
        )
    });
    t.add(
        "cross_entropy: ignore_index skips an out-of-range target",
        || {
            let g = Graph::new();
            let x = g.variable(matrix());
            let opts = CrossEntropyOptions::default().ignore_index(Some(-100));
            let l = setup(x.try_cross_entropy_with(&[-100i64, 2], &opts))?;
            ensure(setup(l.value().try_item())?.is_finite(), || {
                "loss not finite".into()
            })
        },
    );
    t.add(
        "cross_entropy: every target ignored (mean) is NaN (as PyTorch)",
        || {
            let g = Graph::new();
            let x = g.variable(matrix());
            let opts = CrossEntropyOptions::default().ignore_index(Some(1));
            let v = setup(
                setup(x.try_cross_entropy_with(&[1i64, 1], &opts))?
                    .value()
                    .try_item(),
            )?;
            ensure(v.is_nan(), || format!("loss {v}"))
        },
    );
    t.add("cross_entropy: class weights of the wrong length", || {
        let g = Graph::new();
        let x = g.variable(matrix());
        let opts = CrossEntropyOptions::default().weight(floats(&[1.0, 1.0]));
        expect_err!(
            x.try_cross_entropy_with(&[0usize, 1], &opts),
            Error::ShapeMismatch { .. },
            ["cross_entropy", "[3]", "[2]"]
        )
    });
    t.add("nll_loss: class weights of the wrong length", || {
        let g = Graph::new();
        let x = g.variable(matrix());
        let opts = NllLossOptions::default().weight(floats(&[1.0; 4]));
        expect_err!(
            x.try_nll_loss_with(&[0usize, 1], &opts),
            Error::ShapeMismatch { .. },
            ["nll_loss", "[3]", "[4]"]
        )
    });
    t.add("cross_entropy: 0-d logits", || {
        let g = Graph::new();
        let x = g.variable(Tensor::scalar(1.0));
        expect_err!(
            x.try_cross_entropy(&[0usize]),
            Error::InvalidArgument { .. } | Error::ShapeMismatch { .. },
            ["cross_entropy"]
        )
    });
    t.add(
        "cross_entropy via apply: targets of the wrong shape",
        || {
            let g = Graph::new();
            let x = g.variable(matrix());
            let y = g.constant(floats(&[0.0, 1.0, 2.0]));
            expect_err!(
                g.apply("cross_entropy", &[&x, &y]),
                Error::ShapeMismatch { .. },
                ["cross_entropy", "[2, 3]", "[3]"]
            )
        },
    );
}

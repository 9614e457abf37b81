//! Mixed dtypes: f32 with f64 is `Error::DTypeMismatch` in every op that
//! combines values (retrograd never promotes silently); a Rust `f64`
//! scalar operand takes the tensor's dtype.

use retrograd::{DType, Error, Graph, Tensor, Var};

use crate::broadcasting::binary_ops;
use crate::expect_err;
use crate::harness::{ensure, setup, Table};

fn f32s(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| i as f32 * 0.5 + 0.25).collect(), shape).unwrap()
}

fn f64s(shape: &[usize]) -> Tensor {
    f32s(shape).to_dtype(DType::F64)
}

fn ids(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n as i64).map(|i| i % 2).collect(), shape).unwrap()
}

fn mask(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| i % 2 == 0).collect(), shape).unwrap()
}

/// i64 and bool: never variables, never mixed with floats without a cast,
/// never computed in by float ops; each a typed error naming the op.
fn int_and_bool_cases(t: &mut Table) {
    for (name, op) in binary_ops() {
        t.add(format!("{name}: f32 with i64"), move || {
            let g = Graph::new();
            let a = g.variable(f32s(&[2, 3]));
            let b = g.constant(ids(&[2, 3]));
            expect_err!(
                op(&a, &b),
                Error::DTypeMismatch {
                    lhs: DType::F32,
                    rhs: DType::I64,
                    ..
                },
                [name, "f32", "i64"]
            )
        });
        t.add(format!("{name}: bool with f64, broadcast"), move || {
            let g = Graph::new();
            let a = g.constant(mask(&[3]));
            let b = g.variable(f64s(&[2, 3]));
            expect_err!(
                op(&a, &b),
                Error::DTypeMismatch {
                    lhs: DType::Bool,
                    rhs: DType::F64,
                    ..
                },
                [name, "bool", "f64"]
            )
        });
        t.add(
            format!("{name}: i64 with i64 (no integer arithmetic)"),
            move || {
                let g = Graph::new();
                let a = g.constant(ids(&[2, 3]));
                let b = g.constant(ids(&[2, 3]));
                expect_err!(
                    op(&a, &b),
                    Error::NotFloat {
                        found: DType::I64,
                        ..
                    },
                    [name, "i64"]
                )
            },
        );
        t.add(format!("{name}: 0-d bools"), move || {
            let g = Graph::new();
            let a = g.constant(Tensor::scalar(true));
            let b = g.constant(Tensor::scalar(false));
            expect_err!(
                op(&a, &b),
                Error::NotFloat {
                    found: DType::Bool,
                    ..
                },
                [name, "bool"]
            )
        });
    }
    t.add("a variable of i64 or bool", || {
        let g = Graph::new();
        expect_err!(
            g.try_variable(ids(&[2])),
            Error::NotDifferentiable {
                dtype: DType::I64,
                ..
            },
            ["variable", "i64"]
        )?;
        expect_err!(
            g.try_variable(Tensor::scalar(true)),
            Error::NotDifferentiable {
                dtype: DType::Bool,
                ..
            },
            ["variable", "bool"]
        )
    });
    t.add("the gradient of an i64 value", || {
        let g = Graph::new();
        let x = g.variable(f64s(&[2]));
        let i = g.constant(ids(&[2]));
        let grads = setup(x.sum().backward())?;
        expect_err!(
            grads.try_wrt(&i),
            Error::NotDifferentiable { .. },
            ["wrt", "i64"]
        )
    });
    t.add("unary float ops on i64 and bool", || {
        let g = Graph::new();
        for x in [
            ids(&[2, 3]),
            mask(&[4]),
            Tensor::scalar(3i64),
            Tensor::scalar(false),
        ] {
            let x = g.constant(x);
            expect_err!(g.apply("exp", &[&x]), Error::NotFloat { .. }, ["exp"])?;
            expect_err!(g.apply("tanh", &[&x]), Error::NotFloat { .. }, ["tanh"])?;
            expect_err!(x.try_sum(), Error::NotFloat { .. }, ["sum"])?;
            expect_err!(x.try_softmax(-1), Error::NotFloat { .. }, ["softmax"])?;
        }
        Ok(())
    });
    t.add("matmul of i64", || {
        let g = Graph::new();
        let a = g.constant(ids(&[2, 3]));
        let b = g.constant(ids(&[3, 2]));
        expect_err!(a.try_matmul(&b), Error::NotFloat { .. }, ["matmul", "i64"])
    });
    t.add("comparisons: f64 with i64, i64 with bool", || {
        let g = Graph::new();
        let a = g.variable(f64s(&[2]));
        let i = g.constant(ids(&[2]));
        let m = g.constant(mask(&[2]));
        expect_err!(
            a.try_lt(&i),
            Error::DTypeMismatch { .. },
            ["lt", "f64", "i64"]
        )?;
        expect_err!(
            i.try_eq(&m),
            Error::DTypeMismatch { .. },
            ["eq", "i64", "bool"]
        )
    });
    t.add("masked_fill: an i64 or f64 mask", || {
        let g = Graph::new();
        let a = g.variable(f64s(&[2]));
        expect_err!(
            a.try_masked_fill(&ids(&[2]), 0.0),
            Error::WrongDType {
                expected: DType::Bool,
                ..
            },
            ["masked_fill", "bool", "i64"]
        )?;
        expect_err!(
            a.try_masked_fill(&f64s(&[2]), 0.0),
            Error::WrongDType { .. },
            ["masked_fill"]
        )
    });
    t.add("where: i64 values with f64 other", || {
        let g = Graph::new();
        let a = g.constant(ids(&[2]));
        let b = g.variable(f64s(&[2]));
        expect_err!(
            a.try_where(&mask(&[2]), &b),
            Error::DTypeMismatch { .. },
            ["where", "i64", "f64"]
        )
    });
    t.add("gather and losses: bool indices", || {
        let g = Graph::new();
        let a = g.variable(f64s(&[2, 3]));
        expect_err!(
            a.try_gather(1, &mask(&[2, 1])),
            Error::WrongDType { .. },
            ["gather", "bool"]
        )?;
        expect_err!(
            a.try_cross_entropy(&mask(&[2])),
            Error::WrongDType { .. },
            ["cross_entropy", "bool"]
        )?;
        expect_err!(
            a.try_index_select(0, &mask(&[1])),
            Error::WrongDType { .. },
            ["bool"]
        )
    });
    t.add("i64 indices out of range", || {
        let g = Graph::new();
        let a = g.variable(f64s(&[2, 3]));
        let bad = Tensor::vector(&[0i64, 3]);
        expect_err!(
            a.try_cross_entropy(&bad),
            Error::IndexOutOfRange { index: 3, .. },
            ["cross_entropy"]
        )?;
        expect_err!(
            a.try_embedding(&Tensor::vector(&[-1i64]), &[1]),
            Error::IndexOutOfRange { index: -1, .. },
            ["embedding"]
        )
    });
    t.add("random constructors of i64", || {
        expect_err!(
            Tensor::randn(&[2], DType::I64, 0),
            Error::NotFloat { .. },
            ["randn", "i64"]
        )
    });
}

/// f16 and bf16: stored, cast, compared and moved, never computed in or
/// differentiated; each misuse a typed error that says to cast.
fn half_cases(t: &mut Table) {
    for dtype in [DType::F16, DType::BF16] {
        t.add(format!("{dtype}: a variable"), move || {
            let g = Graph::new();
            expect_err!(
                g.try_variable(f32s(&[2]).to_dtype(dtype)),
                Error::NotDifferentiable { dtype: d, .. } if *d == dtype,
                ["variable", &dtype.to_string()]
            )
        });
        t.add(format!("{dtype}: float ops say to cast first"), move || {
            let g = Graph::new();
            for x in [f32s(&[2, 3]).to_dtype(dtype), Tensor::scalar_of(0.5, dtype)] {
                let x = g.constant(x);
                let d = dtype.to_string();
                expect_err!(
                    g.apply("exp", &[&x]),
                    Error::NotFloat { .. },
                    ["exp", &d, "to_dtype"]
                )?;
                expect_err!(x.try_sum(), Error::NotFloat { .. }, ["sum", &d])?;
                expect_err!(x.try_softmax(-1), Error::NotFloat { .. }, ["softmax", &d])?;
                expect_err!(x.try_add(&x), Error::NotFloat { .. }, ["add", &d])?;
            }
            let a = g.constant(f32s(&[2, 2]).to_dtype(dtype));
            expect_err!(
                a.try_matmul(&a),
                Error::NotFloat { .. },
                ["matmul", &dtype.to_string()]
            )
        });
        t.add(
            format!("{dtype} with f32: no silent promotion"),
            move || {
                let g = Graph::new();
                let a = g.variable(f32s(&[2, 3]));
                let b = g.constant(f32s(&[2, 3]).to_dtype(dtype));
                let d = dtype.to_string();
                expect_err!(
                    a.try_add(&b),
                    Error::DTypeMismatch { .. },
                    ["add", "f32", &d]
                )?;
                expect_err!(a.try_lt(&b), Error::DTypeMismatch { .. }, ["lt", "f32", &d])?;
                expect_err!(
                    a.try_where(&mask(&[3]), &b),
                    Error::DTypeMismatch { .. },
                    ["where", "f32", &d]
                )
            },
        );
        t.add(format!("{dtype}: indices must be i64"), move || {
            let g = Graph::new();
            let a = g.variable(f64s(&[2, 3]));
            let idx = Tensor::from_vec(vec![1.0, 0.0], &[2, 1])
                .unwrap()
                .to_dtype(dtype);
            expect_err!(
                a.try_gather(1, &idx),
                Error::WrongDType {
                    expected: DType::I64,
                    ..
                },
                ["gather", &dtype.to_string()]
            )?;
            expect_err!(
                a.try_cross_entropy(&idx.reshape(&[2]).unwrap()),
                Error::WrongDType { .. },
                ["cross_entropy", &dtype.to_string()]
            )
        });
        t.add(
            format!("{dtype}: Parameter::set into an f32 parameter"),
            move || {
                let p = retrograd::nn::Parameter::new(f32s(&[2]));
                expect_err!(
                    p.set(f32s(&[2]).to_dtype(dtype)),
                    Error::DTypeMismatch { .. },
                    ["Parameter::set", "f32", &dtype.to_string()]
                )
            },
        );
        t.add(format!("{dtype}: random constructors"), move || {
            expect_err!(
                Tensor::randn(&[2], dtype, 0),
                Error::NotFloat { .. },
                ["randn", &dtype.to_string()]
            )
        });
        t.add(format!("{dtype}: what works without a cast"), move || {
            let g = Graph::new();
            let x = g.constant(
                Tensor::from_vec(vec![0.5, -1.0, 2.0, 0.25], &[2, 2])
                    .unwrap()
                    .to_dtype(dtype),
            );
            let checks = [
                (
                    x.try_gt_scalar(0.3).map(|m| m.value().to_f64_vec()),
                    vec![1.0, 0.0, 1.0, 0.0],
                ),
                (
                    x.try_tril(0).map(|v| v.value().to_f64_vec()),
                    vec![0.5, 0.0, 2.0, 0.25],
                ),
                (
                    x.try_masked_fill(&mask(&[2]), 9.0)
                        .map(|v| v.value().to_f64_vec()),
                    vec![9.0, -1.0, 9.0, 0.25],
                ),
                (
                    x.try_topk(1, true).map(|(v, _)| v.value().to_f64_vec()),
                    vec![0.5, 2.0],
                ),
                (
                    x.try_argmax(Some(1), false).map(|v| v.value().to_f64_vec()),
                    vec![0.0, 0.0],
                ),
                (
                    x.try_to_dtype(DType::F32).map(|v| v.value().to_f64_vec()),
                    vec![0.5, -1.0, 2.0, 0.25],
                ),
                (
                    x.try_transpose(0, 1).map(|v| v.value().to_f64_vec()),
                    vec![0.5, 2.0, -1.0, 0.25],
                ),
                (
                    x.try_gather(1, &Tensor::from_vec(vec![1i64, 0], &[2, 1]).unwrap())
                        .map(|v| v.value().to_f64_vec()),
                    vec![-1.0, 2.0],
                ),
            ];
            for (i, (got, want)) in checks.into_iter().enumerate() {
                let got = got.map_err(|e| format!("check {i}: {e}"))?;
                ensure(got == want, || format!("check {i}: {got:?} != {want:?}"))?;
            }
            let y = setup(x.try_to_dtype(DType::F32))?;
            ensure(!y.requires_grad() && y.dtype() == DType::F32, || {
                "a cast of a constant".into()
            })
        });
    }
}

pub fn cases(t: &mut Table) {
    int_and_bool_cases(t);
    half_cases(t);
    for (name, op) in binary_ops() {
        t.add(format!("{name}: f32 with f64"), move || {
            let g = Graph::new();
            let a = g.variable(f32s(&[2, 3]));
            let b = g.variable(f64s(&[2, 3]));
            expect_err!(
                op(&a, &b),
                Error::DTypeMismatch {
                    lhs: DType::F32,
                    rhs: DType::F64,
                    ..
                },
                [name, "f32", "f64"]
            )
        });
        t.add(format!("{name}: f64 with f32, broadcast"), move || {
            let g = Graph::new();
            let a = g.variable(f64s(&[2, 3]));
            let b = g.constant(f32s(&[3]));
            expect_err!(
                op(&a, &b),
                Error::DTypeMismatch {
                    lhs: DType::F64,
                    rhs: DType::F32,
                    ..
                },
                [name, "f64", "f32"]
            )
        });
        t.add(format!("{name}: f32 with a 0-d f64"), move || {
            let g = Graph::new();
            let a = g.variable(f32s(&[2]));
            let b = g.variable(Tensor::scalar(0.5f64));
            expect_err!(
                op(&a, &b),
                Error::DTypeMismatch { .. },
                [name, "f32", "f64"]
            )
        });
    }
    t.add("a Rust f64 scalar takes an f32 tensor's dtype", || {
        let g = Graph::new();
        let a = g.variable(f32s(&[2]));
        let b = &a * 2.0 + 1.0;
        ensure(b.dtype() == DType::F32, || format!("dtype {}", b.dtype()))
    });
    t.add("where: f32 values with f64 other", || {
        let g = Graph::new();
        let a = g.variable(f32s(&[2]));
        let b = g.variable(f64s(&[2]));
        let cond = f32s(&[2]);
        expect_err!(
            a.try_where(&cond, &b),
            Error::DTypeMismatch { .. },
            ["where", "f32", "f64"]
        )
    });
    t.add("where: an f64 condition selects f32 values", || {
        let g = Graph::new();
        let a = g.variable(f32s(&[2]));
        let b = g.variable(f32s(&[2]));
        let cond = Tensor::vector(&[1.0f64, 0.0]);
        let r = setup(a.try_where(&cond, &b))?;
        ensure(r.dtype() == DType::F32, || format!("dtype {}", r.dtype()))
    });
    t.add(
        "gather: index tensors may be f32 for f64 values (indices, not values)",
        || {
            let g = Graph::new();
            let a = g.variable(f64s(&[2, 3]));
            let idx = setup(Tensor::from_vec(vec![2.0f32, 0.0], &[2, 1]))?;
            let r = setup(a.try_gather(1, &idx))?;
            ensure(
                r.dtype() == DType::F64 && r.value().to_f64_vec() == vec![1.25, 1.75],
                || format!("{:?}", r.value()),
            )
        },
    );
    t.add("embedding via apply: f64 indices for an f32 table", || {
        let g = Graph::new();
        let w = g.variable(f32s(&[3, 2]));
        let i = g.constant(Tensor::vector(&[2.0f64]));
        let r = setup(g.apply("embedding", &[&w, &i]))?;
        ensure(
            r.dtype() == DType::F32 && r.value().to_f64_vec() == vec![2.25, 2.75],
            || format!("{:?}", r.value()),
        )
    });
    t.add("matmul: f32 with f64", || {
        let g = Graph::new();
        let a = g.variable(f32s(&[2, 3]));
        let b = g.variable(f64s(&[3, 2]));
        expect_err!(
            a.try_matmul(&b),
            Error::DTypeMismatch { .. },
            ["matmul", "f32", "f64"]
        )
    });
    t.add("cat: f32 with f64", || {
        let g = Graph::new();
        let a = g.variable(f32s(&[2]));
        let b = g.variable(f64s(&[2]));
        expect_err!(
            Var::try_cat(&[&a, &b], 0),
            Error::DTypeMismatch { .. },
            ["cat", "f32", "f64"]
        )
    });
    t.add("stack: f64 with f32", || {
        let g = Graph::new();
        let a = g.variable(f64s(&[2]));
        let b = g.variable(f32s(&[2]));
        expect_err!(
            Var::try_stack(&[&a, &b], 0),
            Error::DTypeMismatch { .. },
            ["stack", "f32", "f64"]
        )
    });
    t.add("index_add: f32 source into f64", || {
        let g = Graph::new();
        let a = g.variable(f64s(&[3]));
        let s = g.variable(f32s(&[1]));
        let i = setup(Tensor::from_indices(&[1], &[1]))?;
        expect_err!(
            a.try_index_add(0, &i, &s),
            Error::DTypeMismatch { .. },
            ["index_add", "f32", "f64"]
        )
    });
    t.add("scatter_add: f64 source into f32", || {
        let g = Graph::new();
        let a = g.variable(f32s(&[3]));
        let s = g.variable(f64s(&[1]));
        let i = setup(Tensor::from_indices(&[1], &[1]))?;
        expect_err!(
            a.try_scatter_add(0, &i, &s),
            Error::DTypeMismatch { .. },
            ["scatter_add", "f32", "f64"]
        )
    });
    t.add("layer_norm: f64 weight on f32 input", || {
        let g = Graph::new();
        let x = g.variable(f32s(&[2, 3]));
        let w = g.variable(f64s(&[3]));
        expect_err!(
            x.try_layer_norm(&[3], Some(&w), None, 1e-5),
            Error::DTypeMismatch { .. },
            ["layer_norm", "f32", "f64"]
        )
    });
    t.add(
        "binary_cross_entropy_with_logits: f64 pos_weight on f32",
        || {
            let g = Graph::new();
            let x = g.variable(f32s(&[2]));
            let y = g.constant(f32s(&[2]));
            expect_err!(
                x.try_binary_cross_entropy_with_logits_with(
                    &y,
                    retrograd::Reduction::Mean,
                    Some(f64s(&[2]))
                ),
                Error::DTypeMismatch { .. },
                ["binary_cross_entropy_with_logits", "f32", "f64"]
            )
        },
    );
    t.add("cross_entropy: f64 class weights on f32 logits", || {
        let g = Graph::new();
        let x = g.variable(f32s(&[2, 3]));
        let opts = retrograd::CrossEntropyOptions::default().weight(f64s(&[3]));
        expect_err!(
            x.try_cross_entropy_with(&[0usize, 1], &opts),
            Error::DTypeMismatch { .. },
            ["cross_entropy", "f32", "f64"]
        )
    });
    t.add("backward_with: f32 seed for an f64 root", || {
        let g = Graph::new();
        let x = g.variable(f64s(&[2]));
        let y = &x * &x;
        expect_err!(
            y.backward_with(&f32s(&[2])),
            Error::DTypeMismatch { op: "backward", .. },
            ["backward", "f32", "f64"]
        )
    });
    t.add("jvp: f32 tangent for an f64 primal", || {
        expect_err!(
            retrograd::jvp(|x| Ok(&x[0] * &x[0]), &[f64s(&[2])], &[f32s(&[2])]),
            Error::DTypeMismatch { .. },
            ["jvp", "f32", "f64"]
        )
    });
    t.add("hessian_vector_product: f32 vector for f64 point", || {
        expect_err!(
            retrograd::hessian_vector_product(|x| Ok((x * x).sum()), &f64s(&[2]), &f32s(&[2])),
            Error::DTypeMismatch { .. },
            ["f32", "f64"]
        )
    });
    t.add("Parameter::set: f64 value into an f32 parameter", || {
        let p = retrograd::nn::Parameter::new(f32s(&[2]));
        expect_err!(
            p.set(f64s(&[2])),
            Error::DTypeMismatch { .. },
            ["Parameter::set", "f32", "f64"]
        )
    });
    t.add("Parameter::set: value of another shape", || {
        let p = retrograd::nn::Parameter::new(f32s(&[2]));
        expect_err!(
            p.set(f32s(&[3])),
            Error::ShapeMismatch { .. },
            ["Parameter::set", "[2]", "[3]"]
        )
    });
}

//! The graph and the backward engine: unknown op names and wrong arity
//! through `Graph::apply` and the registry, handles from another graph,
//! backward from non-scalar roots, seed gradients of the wrong shape or
//! dtype, `grad` with inputs outside the graph, bad custom orders.

use retrograd::autograd::{BackwardOptions, BackwardOrder};
use retrograd::{grad, DType, Error, GradOptions, Graph, OpRegistry, Tensor, Var};

use crate::expect_err;
use crate::harness::{ensure, setup, Table};

fn vector() -> Tensor {
    Tensor::vector(&[1.0, 2.0, 3.0])
}

pub fn cases(t: &mut Table) {
    let misspelt: [(&str, &str); 6] = [
        ("mull", "mul"),
        ("tanhh", "tanh"),
        ("matmull", "matmul"),
        ("softmx", "softmax"),
        ("cross_entropie", "cross_entropy"),
        ("Relu", "relu"),
    ];
    for (name, closest) in misspelt {
        t.add(
            format!("apply: unknown op `{name}` names `{closest}`"),
            move || {
                let g = Graph::new();
                let x = g.variable(vector());
                expect_err!(
                    g.apply(name, &[&x]),
                    Error::UnregisteredOp { suggestion: Some(s), .. } if s == closest,
                    [name, closest]
                )
            },
        );
        t.add(
            format!("registry: unknown op `{name}` names `{closest}`"),
            move || {
                let reg = OpRegistry::with_builtins();
                expect_err!(
                    reg.get(name).map(|op| op.name().to_string()),
                    Error::UnregisteredOp { suggestion: Some(s), .. } if s == closest,
                    [name, closest]
                )
            },
        );
    }
    for name in ["", "zzzzzzzzzzzzzzzzzzzz", "\u{1F600}", &"x".repeat(10_000)].map(str::to_string) {
        let shown = name.chars().take(20).collect::<String>();
        t.add(
            format!("apply: unknown op `{shown}` with nothing close"),
            move || {
                let g = Graph::new();
                let x = g.variable(vector());
                expect_err!(
                    g.apply(&name, &[&x]),
                    Error::UnregisteredOp { .. },
                    ["unregistered op"]
                )
            },
        );
    }
    t.add("registry: an empty custom registry knows nothing", || {
        expect_err!(
            OpRegistry::new().get("add").map(|_| ()),
            Error::UnregisteredOp {
                suggestion: None,
                ..
            },
            ["add"]
        )
    });
    t.add("registry: registering a taken name", || {
        let mut reg = OpRegistry::with_builtins();
        expect_err!(
            reg.register(
                "add",
                retrograd::ops::rule::Binary(retrograd::ops::arith::Mul)
            ),
            Error::DuplicateOp { .. },
            ["add", "already registered"]
        )
    });
    t.add("registry: registering an empty name", || {
        let mut reg = OpRegistry::new();
        expect_err!(
            reg.register("", retrograd::ops::rule::Binary(retrograd::ops::arith::Mul)),
            Error::InvalidArgument { .. },
            ["register", "empty"]
        )
    });
    for (op, inputs, expected) in [
        ("add", 1, 2),
        ("add", 3, 2),
        ("exp", 0, 1),
        ("exp", 2, 1),
        ("matmul", 1, 2),
    ] {
        t.add(format!("apply: {op} with {inputs} input(s)"), move || {
            let g = Graph::new();
            let x = g.variable(vector());
            let args: Vec<&Var> = std::iter::repeat_n(&x, inputs).collect();
            let shown = format!("expected {expected} input(s), got {inputs}");
            expect_err!(
                g.apply(op, &args),
                Error::Arity { .. },
                [op, shown.as_str()]
            )
        });
    }
    t.add("apply: a variable from another graph", || {
        let g = Graph::new();
        let h = Graph::new();
        let x = g.variable(vector());
        let y = h.variable(vector());
        expect_err!(
            g.apply("add", &[&x, &y]),
            Error::ForeignVariable { .. },
            ["add", "another graph"]
        )
    });
    t.add("try_add: operands from two graphs", || {
        let g = Graph::new();
        let h = Graph::new();
        let x = g.variable(vector());
        let y = h.variable(vector());
        expect_err!(
            x.try_add(&y),
            Error::ForeignVariable { .. },
            ["add", "another graph"]
        )
    });
    t.add("try_matmul: operands from two graphs", || {
        let g = Graph::new();
        let h = Graph::new();
        let x = g.variable(vector());
        let y = h.constant(vector());
        expect_err!(x.try_matmul(&y), Error::ForeignVariable { .. }, ["matmul"])
    });
    t.add("cat: values from two graphs", || {
        let g = Graph::new();
        let h = Graph::new();
        let x = g.variable(vector());
        let y = h.variable(vector());
        expect_err!(
            Var::try_cat(&[&x, &y], 0),
            Error::ForeignVariable { .. },
            ["cat"]
        )
    });
    t.add("where: other value from another graph", || {
        let g = Graph::new();
        let h = Graph::new();
        let x = g.variable(vector());
        let y = h.variable(vector());
        expect_err!(
            x.try_where(&vector(), &y),
            Error::ForeignVariable { .. },
            ["where"]
        )
    });
    t.add("Gradients::try_wrt: a variable of another graph", || {
        let g = Graph::new();
        let h = Graph::new();
        let x = g.variable(vector());
        let y = h.variable(vector());
        let grads = setup(x.sum().backward())?;
        expect_err!(
            grads.try_wrt(&y),
            Error::ForeignVariable { .. },
            ["another graph"]
        )
    });
    t.add("try_backward_order: a root of another graph", || {
        let g = Graph::new();
        let h = Graph::new();
        let y = h.variable(vector());
        expect_err!(
            g.try_backward_order(&y.sum()),
            Error::ForeignVariable { .. },
            ["backward_order"]
        )
    });
    t.add("checkpoint: an input of another graph", || {
        let g = Graph::new();
        let h = Graph::new();
        let y = h.variable(vector());
        expect_err!(
            g.checkpoint(&[&y], |v| Ok(v[0].exp())),
            Error::ForeignVariable { .. },
            ["checkpoint"]
        )
    });
    t.add("grad: an input from another graph", || {
        let g = Graph::new();
        let h = Graph::new();
        let x = g.variable(vector());
        let y = h.variable(vector());
        expect_err!(
            grad(&[&x.sum()], &[&y], &GradOptions::new()),
            Error::ForeignVariable { .. },
            ["grad"]
        )
    });
    t.add("grad: no outputs", || {
        let g = Graph::new();
        let x = g.variable(vector());
        expect_err!(
            grad(&[], &[&x], &GradOptions::new()),
            Error::InvalidArgument { .. },
            ["grad"]
        )
    });
    t.add("grad: an input the output does not use", || {
        let g = Graph::new();
        let x = g.variable(vector());
        let unused = g.variable(vector());
        expect_err!(
            grad(&[&x.sum()], &[&unused], &GradOptions::new()),
            Error::InvalidArgument { .. },
            ["grad", "input 0", "allow_unused"]
        )
    });
    t.add("grad: allow_unused gives zeros", || {
        let g = Graph::new();
        let x = g.variable(vector());
        let unused = g.variable(vector());
        let r = setup(grad(
            &[&x.sum()],
            &[&unused],
            &GradOptions::new().allow_unused(true),
        ))?;
        ensure(r[0].value().to_f64_vec() == vec![0.0; 3], || "zeros".into())
    });
    t.add("grad: a non-scalar output without grad_outputs", || {
        let g = Graph::new();
        let x = g.variable(vector());
        expect_err!(
            grad(&[&x.exp()], &[&x], &GradOptions::new()),
            Error::NonScalarRoot { .. },
            ["[3]"]
        )
    });
    t.add("grad: grad_outputs count differs from outputs", || {
        let g = Graph::new();
        let x = g.variable(vector());
        let opts = GradOptions::new().grad_outputs(vec![vector(), vector()]);
        expect_err!(
            grad(&[&x.exp()], &[&x], &opts),
            Error::InvalidArgument { .. },
            ["grad", "2"]
        )
    });
    t.add("grad: a grad_output of the wrong shape", || {
        let g = Graph::new();
        let x = g.variable(vector());
        let opts = GradOptions::new().grad_outputs(vec![Tensor::vector(&[1.0, 2.0])]);
        expect_err!(
            grad(&[&x.exp()], &[&x], &opts),
            Error::ShapeMismatch { .. },
            ["[3]", "[2]"]
        )
    });
    t.add("backward: a non-scalar root", || {
        let g = Graph::new();
        let x = g.variable(setup(Tensor::ones(&[2, 3], DType::F32))?);
        expect_err!(
            (&x * 2.0).backward(),
            Error::NonScalarRoot { .. },
            ["backward", "[2, 3]", "backward_with"]
        )
    });
    t.add("backward: an empty root", || {
        let g = Graph::new();
        let x = g.variable(setup(Tensor::ones(&[0], DType::F32))?);
        expect_err!(
            x.exp().backward(),
            Error::NonScalarRoot { .. },
            ["backward", "[0]"]
        )
    });
    t.add("backward: a one-element non-0-d root works", || {
        let g = Graph::new();
        let x = g.variable(setup(Tensor::ones(&[1, 1], DType::F64))?);
        let grads = setup(x.exp().backward())?;
        ensure(grads.wrt(&x).shape() == [1, 1], || "shape".into())
    });
    t.add("backward: a root that depends on no variable", || {
        let g = Graph::new();
        let c = g.constant(vector());
        expect_err!(
            c.sum().backward(),
            Error::RootDoesNotRequireGrad,
            ["does not require grad"]
        )
    });
    t.add("backward_with: a seed of the wrong shape", || {
        let g = Graph::new();
        let x = g.variable(vector());
        expect_err!(
            x.exp().backward_with(&Tensor::vector(&[1.0; 4])),
            Error::ShapeMismatch { op: "backward", .. },
            ["backward", "[3]", "[4]"]
        )
    });
    t.add("backward_with: a 0-d seed for a vector root", || {
        let g = Graph::new();
        let x = g.variable(vector());
        expect_err!(
            x.exp().backward_with(&Tensor::scalar(1.0)),
            Error::ShapeMismatch { .. },
            ["backward", "[3]", "[]"]
        )
    });
    t.add("backward_with: an f32 seed for an f64 root", || {
        let g = Graph::new();
        let x = g.variable(vector());
        expect_err!(
            x.exp().backward_with(&vector().to_dtype(DType::F32)),
            Error::DTypeMismatch { op: "backward", .. },
            ["backward", "f32", "f64"]
        )
    });
    t.add("backward_with: a NaN seed propagates", || {
        let g = Graph::new();
        let x = g.variable(vector());
        let grads = setup(x.exp().backward_with(&Tensor::vector(&[f64::NAN; 3])))?;
        ensure(
            grads.wrt(&x).to_f64_vec().iter().all(|v| v.is_nan()),
            || "NaN".into(),
        )
    });
    t.add("backward: a custom order that skips an ancestor", || {
        let g = Graph::new();
        let x = g.variable(vector());
        let y = x.exp().sum();
        let opts = BackwardOptions::new().order(BackwardOrder::Custom(vec![1]));
        expect_err!(
            y.backward_with_options(&opts),
            Error::InvalidOrder { .. },
            ["backward"]
        )
    });
    t.add("backward: a custom order with an unknown node", || {
        let g = Graph::new();
        let x = g.variable(vector());
        let y = x.exp().sum();
        let opts = BackwardOptions::new().order(BackwardOrder::Custom(vec![usize::MAX, 1, 0]));
        expect_err!(
            y.backward_with_options(&opts),
            Error::InvalidOrder { .. },
            ["backward"]
        )
    });
    t.add("backward: a custom order in the wrong direction", || {
        let g = Graph::new();
        let x = g.variable(vector());
        let y = x.exp().sum();
        let opts = BackwardOptions::new().order(BackwardOrder::Custom(vec![0, 1]));
        expect_err!(
            y.backward_with_options(&opts),
            Error::InvalidOrder { .. },
            ["backward"]
        )
    });
    t.add("backward: a custom order with a repeated node", || {
        let g = Graph::new();
        let x = g.variable(vector());
        let y = x.exp().sum();
        let opts = BackwardOptions::new().order(BackwardOrder::Custom(vec![1, 1, 0]));
        expect_err!(
            y.backward_with_options(&opts),
            Error::InvalidOrder { .. },
            ["backward"]
        )
    });
    t.add(
        "hook: a hook returning a gradient of the wrong shape",
        || {
            let g = Graph::new();
            let x = g.variable(vector());
            let y = x.exp();
            y.register_hook(|_| Some(Tensor::scalar(1.0)));
            expect_err!(
                y.sum().backward(),
                Error::BadGradient { .. } | Error::ShapeMismatch { .. },
                ["[3]"]
            )
        },
    );
    t.add(
        "Gradients::try_wrt: an intermediate that was not retained",
        || {
            let g = Graph::new();
            let x = g.variable(vector());
            let y = x.exp();
            let grads = setup(y.sum().backward())?;
            expect_err!(
                grads.try_wrt(&y),
                Error::GradientNotRetained { .. },
                ["retain_grad"]
            )
        },
    );
    t.add("jvp: primals and tangents of different counts", || {
        expect_err!(
            retrograd::jvp(|x| Ok(x[0].exp()), &[vector()], &[]),
            Error::InvalidArgument { op: "jvp", .. },
            ["jvp", "1 primals but 0 tangents"]
        )
    });
    t.add("jvp: a tangent of the wrong shape", || {
        expect_err!(
            retrograd::jvp(|x| Ok(x[0].exp()), &[vector()], &[Tensor::scalar(1.0)]),
            Error::ShapeMismatch { op: "jvp", .. },
            ["jvp", "[3]", "[]"]
        )
    });
    t.add(
        "hessian_vector_product: a vector of the wrong shape",
        || {
            expect_err!(
                retrograd::hessian_vector_product(
                    |x| Ok(x.exp().sum()),
                    &vector(),
                    &Tensor::scalar(1.0)
                ),
                Error::ShapeMismatch { .. },
                ["hessian_vector_product", "[3]", "[]"]
            )
        },
    );
    t.add("hessian: a function with a non-scalar output", || {
        expect_err!(
            retrograd::hessian(|x| Ok(x.exp()), &vector()),
            Error::NonScalarRoot { .. } | Error::InvalidArgument { .. } | Error::NotAScalar { .. },
            ["[3]"]
        )
    });
    t.add(
        "jacobian: an error inside the function comes back as is",
        || {
            expect_err!(
                retrograd::jacobian(|x| x.try_reshape(&[7]), &vector()),
                Error::ElementCount { .. },
                ["reshape", "[7]"]
            )
        },
    );
    t.add(
        "gradcheck: a function whose backward is wrong is a GradCheck error",
        || {
            expect_err!(
                retrograd::gradcheck(straight_through, &[Tensor::vector(&[0.2, 1.3])]),
                Error::GradCheck { .. },
                ["gradcheck", "analytic"]
            )
        },
    );
}

/// A straight-through estimator: forward rounds, backward passes the
/// gradient through unchanged, which finite differences (0) disagree with.
fn straight_through<'g>(x: &[Var<'g>]) -> retrograd::Result<Var<'g>> {
    let rounded = x[0].graph().constant(x[0].value().map_f64(f64::round));
    Ok(&(&x[0] - &x[0].detach()) + &rounded)
}

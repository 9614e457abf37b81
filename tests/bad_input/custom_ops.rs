//! User ops that misbehave: a backward returning the wrong number of
//! gradients, or gradients of the wrong shape or dtype (also through the
//! fast path and `grad` with `create_graph`), a hook replacing a gradient
//! with one of another dtype, an op with no tangent rule in forward mode.
//! The engine checks what user code returns: `Error::BadGradient` naming
//! the op, never a panic or a silently wrong gradient.

use std::sync::Arc;

use retrograd::{
    grad, DType, Differentiable, Error, GradInputs, GradOptions, Graph, OpRegistry, Result, Tensor,
    Var,
};

use crate::expect_err;
use crate::harness::Table;

/// How a test op's backward misbehaves.
#[derive(Clone, Copy)]
enum Fault {
    TooManyGradients,
    TooFewGradients,
    WrongShape,
    WrongDType,
    /// Only `backward_fast` (the plain first-order path) is wrong.
    FastWrongShape,
}

/// `2x`, with a backward broken as `fault` says.
struct Faulty(Fault);

impl Differentiable for Faulty {
    fn name(&self) -> &str {
        "faulty_double"
    }
    fn arity(&self) -> Option<usize> {
        Some(1)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(inputs[0].map_f64(|v| 2.0 * v))
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        _inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        let right = g * 2.0;
        let mut grads = GradInputs::new();
        match self.0 {
            Fault::TooManyGradients => {
                grads.push(Some(right.clone()));
                grads.push(Some(right));
            }
            Fault::TooFewGradients => {}
            Fault::WrongShape => grads.push(Some(right.sum())),
            Fault::WrongDType => {
                grads.push(Some(g.graph().constant(right.value().to_dtype(DType::F32))))
            }
            Fault::FastWrongShape => grads.push(Some(right)),
        }
        Ok(grads)
    }
    fn backward_fast(
        &self,
        g: &Tensor,
        _inputs: &[&Tensor],
        _out: &Tensor,
        _needs: &[bool],
        grads: &mut [Option<Tensor>],
    ) -> Result<bool> {
        match self.0 {
            Fault::FastWrongShape => {
                grads[0] = Some(Tensor::scalar_of(g.to_f64_vec().iter().sum(), g.dtype()));
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

fn registry_with(fault: Fault) -> Arc<OpRegistry> {
    let mut reg = OpRegistry::with_builtins();
    reg.register("faulty_double", Faulty(fault)).unwrap();
    Arc::new(reg)
}

pub fn cases(t: &mut Table) {
    let faults = [
        (Fault::TooManyGradients, "2 gradients for 1 inputs"),
        (Fault::TooFewGradients, "0 gradients for 1 inputs"),
        (Fault::WrongShape, "shape []"),
        (Fault::WrongDType, "f32"),
        (Fault::FastWrongShape, "shape []"),
    ];
    for (fault, mention) in faults {
        t.add(format!("custom op backward: {mention}"), move || {
            let g = Graph::with_registry(registry_with(fault));
            let x = g.variable(Tensor::vector(&[1.0, 2.0]));
            let y = g.apply("faulty_double", &[&x]).map_err(|e| e.to_string())?;
            expect_err!(
                y.sum().backward(),
                Error::BadGradient { .. },
                ["faulty_double", mention]
            )
        });
        if !matches!(fault, Fault::FastWrongShape) {
            t.add(
                format!("custom op backward with create_graph: {mention}"),
                move || {
                    let g = Graph::with_registry(registry_with(fault));
                    let x = g.variable(Tensor::vector(&[1.0, 2.0]));
                    let y = g.apply("faulty_double", &[&x]).map_err(|e| e.to_string())?;
                    let opts = GradOptions::new().create_graph(true);
                    expect_err!(
                        grad(&[&y.sum()], &[&x], &opts),
                        Error::BadGradient { .. },
                        ["faulty_double", mention]
                    )
                },
            );
        }
    }
    t.add("custom op without a tangent rule in forward mode", || {
        let reg = registry_with(Fault::WrongShape);
        expect_err!(
            retrograd::jvp(
                move |x| x[0].graph().apply("faulty_double", &[&x[0]]),
                &[Tensor::vector(&[1.0])],
                &[Tensor::vector(&[1.0])]
            )
            .map(|_| drop(reg)),
            Error::UnregisteredOp { .. } | Error::Unsupported { .. },
            ["faulty_double"]
        )
    });
    t.add("hook: a replacement of another dtype", || {
        let g = Graph::new();
        let x = g.variable(Tensor::vector(&[1.0, 2.0]));
        let y = x.exp();
        y.register_hook(|gr| Some(gr.to_dtype(DType::F32)));
        expect_err!(
            y.sum().backward(),
            Error::BadGradient { .. },
            ["hook", "f32", "f64"]
        )
    });
    t.add("hook on a leaf: a replacement of another shape", || {
        let g = Graph::new();
        let x = g.variable(Tensor::vector(&[1.0, 2.0]));
        x.register_hook(|_| Some(Tensor::vector(&[1.0, 2.0, 3.0])));
        expect_err!(
            x.exp().sum().backward(),
            Error::BadGradient { .. },
            ["hook", "[3]", "[2]"]
        )
    });
    t.add(
        "registry: replacing a built-in keeps names consistent",
        || {
            let mut reg = OpRegistry::with_builtins();
            let old = reg.replace("exp", Faulty(Fault::WrongShape));
            crate::harness::ensure(matches!(&old, Ok(Some(o)) if o.name() == "exp"), || {
                "replace returned no exp".into()
            })
        },
    );
    t.add("registry: replace under an empty name is an error", || {
        let mut reg = OpRegistry::with_builtins();
        crate::harness::ensure(
            matches!(
                reg.replace("", Faulty(Fault::WrongShape)),
                Err(Error::InvalidArgument { .. })
            ),
            || "replace accepted an empty name".into(),
        )
    });
}

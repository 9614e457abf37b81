//! Every registered op, through `Graph::apply`, with odd inputs: no inputs
//! or too many, 0-d values, empty and zero-sized values (some with huge
//! other dimensions), mixed dtypes, NaN and infinities, i64 and bool
//! tensors (alone, together and mixed with floats), f16 and bf16 ones
//! (storage only). Each must give a
//! result or a typed error, and a result must survive `backward`; a result
//! that requires grad is a float.

use retrograd::{DType, Error, Graph, OpRegistry, Tensor};

use crate::harness::{ensure, Outcome, Table};

/// A named list of input tensors (float ones made variables, so a node is
/// recorded; i64 and bool ones, which cannot be variables, constants).
struct Inputs {
    name: &'static str,
    make: fn() -> Vec<Tensor>,
}

fn t(shape: &[usize], dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_f64_slice(
        &(0..n).map(|i| (i % 3) as f64).collect::<Vec<_>>(),
        shape,
        dtype,
    )
    .unwrap()
}

fn input_sets() -> Vec<Inputs> {
    vec![
        Inputs {
            name: "no inputs",
            make: Vec::new,
        },
        Inputs {
            name: "one 0-d",
            make: || vec![Tensor::scalar(1.0)],
        },
        Inputs {
            name: "one empty [0] f32",
            make: || vec![t(&[0], DType::F32)],
        },
        Inputs {
            name: "one zero-sized [2, 0, 3]",
            make: || vec![t(&[2, 0, 3], DType::F64)],
        },
        Inputs {
            name: "one huge zero-sized",
            make: || vec![t(&[usize::MAX / 4, 0], DType::F64)],
        },
        Inputs {
            name: "one non-finite [2, 3]",
            make: || {
                vec![Tensor::from_vec(
                    vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, 1e308],
                    &[2, 3],
                )
                .unwrap()]
            },
        },
        Inputs {
            name: "f32 and f64",
            make: || vec![t(&[2, 3], DType::F32), t(&[2, 3], DType::F64)],
        },
        Inputs {
            name: "f64 and f32 0-d",
            make: || vec![t(&[2, 3], DType::F64), Tensor::scalar(1.0f32)],
        },
        Inputs {
            name: "[2, 3] and [0]",
            make: || vec![t(&[2, 3], DType::F64), t(&[0], DType::F64)],
        },
        Inputs {
            name: "[2, 3] and [4, 5]",
            make: || vec![t(&[2, 3], DType::F64), t(&[4, 5], DType::F64)],
        },
        Inputs {
            name: "two 0-d",
            make: || vec![Tensor::scalar(2.0), Tensor::scalar(0.5)],
        },
        Inputs {
            name: "two huge zero-sized",
            make: || {
                vec![
                    t(&[usize::MAX / 4, 0], DType::F64),
                    t(&[0, usize::MAX / 4], DType::F64),
                ]
            },
        },
        Inputs {
            name: "[2, 3] and negative indices",
            make: || vec![t(&[2, 3], DType::F64), Tensor::vector(&[-1.0, 7.0])],
        },
        Inputs {
            name: "three [2, 3]",
            make: || vec![t(&[2, 3], DType::F64); 3],
        },
        Inputs {
            name: "three mixed",
            make: || {
                vec![
                    t(&[2, 3], DType::F64),
                    t(&[3], DType::F32),
                    Tensor::scalar(0.5),
                ]
            },
        },
        Inputs {
            name: "four [3]",
            make: || vec![t(&[3], DType::F64); 4],
        },
        Inputs {
            name: "one i64 [2, 3]",
            make: || vec![t(&[2, 3], DType::I64)],
        },
        Inputs {
            name: "one bool [2, 3]",
            make: || vec![t(&[2, 3], DType::Bool)],
        },
        Inputs {
            name: "one i64 0-d",
            make: || vec![Tensor::scalar(2i64)],
        },
        Inputs {
            name: "one bool 0-d",
            make: || vec![Tensor::scalar(true)],
        },
        Inputs {
            name: "one empty [0] i64",
            make: || vec![t(&[0], DType::I64)],
        },
        Inputs {
            name: "f64 and i64",
            make: || vec![t(&[2, 3], DType::F64), t(&[2, 3], DType::I64)],
        },
        Inputs {
            name: "i64 and f32",
            make: || vec![t(&[2, 3], DType::I64), t(&[2, 3], DType::F32)],
        },
        Inputs {
            name: "f32 and bool",
            make: || vec![t(&[2, 3], DType::F32), t(&[2, 3], DType::Bool)],
        },
        Inputs {
            name: "f64 and i64 0-d",
            make: || vec![t(&[2, 3], DType::F64), Tensor::scalar(1i64)],
        },
        Inputs {
            name: "two i64",
            make: || vec![t(&[2, 3], DType::I64), t(&[2, 3], DType::I64)],
        },
        Inputs {
            name: "two bool 0-d",
            make: || vec![Tensor::scalar(true), Tensor::scalar(false)],
        },
        Inputs {
            name: "[2, 3] and i64 indices",
            make: || vec![t(&[2, 3], DType::F64), Tensor::vector(&[1i64, 0])],
        },
        Inputs {
            name: "[2, 3] and negative i64 indices",
            make: || vec![t(&[2, 3], DType::F64), Tensor::vector(&[-1i64, 7])],
        },
        Inputs {
            name: "[2, 3] and bool indices",
            make: || vec![t(&[2, 3], DType::F64), Tensor::vector(&[true, false])],
        },
        Inputs {
            name: "bool, f64, f64",
            make: || {
                vec![
                    t(&[2, 3], DType::Bool),
                    t(&[2, 3], DType::F64),
                    t(&[3], DType::F64),
                ]
            },
        },
        Inputs {
            name: "f64, i64, f64",
            make: || {
                vec![
                    t(&[2, 3], DType::F64),
                    t(&[2, 3], DType::I64),
                    t(&[2, 3], DType::F64),
                ]
            },
        },
        Inputs {
            name: "one bf16 [2, 3]",
            make: || vec![t(&[2, 3], DType::BF16)],
        },
        Inputs {
            name: "one f16 0-d",
            make: || vec![Tensor::scalar_of(1.5, DType::F16)],
        },
        Inputs {
            name: "two f16",
            make: || vec![t(&[2, 3], DType::F16), t(&[2, 3], DType::F16)],
        },
        Inputs {
            name: "f32 and bf16",
            make: || vec![t(&[2, 3], DType::F32), t(&[2, 3], DType::BF16)],
        },
        Inputs {
            name: "bf16 and i64 indices",
            make: || vec![t(&[2, 3], DType::BF16), Tensor::vector(&[1i64, 0])],
        },
        Inputs {
            name: "three bool",
            make: || vec![t(&[2, 3], DType::Bool); 3],
        },
    ]
}

/// Applies `op` to `inputs` as variables; a result is then differentiated.
fn sweep(op: &str, inputs: &[Tensor]) -> Outcome {
    let g = Graph::new();
    let vars: Vec<_> = inputs
        .iter()
        .map(|x| match g.try_variable(x.clone()) {
            Ok(v) => v,
            Err(Error::NotDifferentiable { .. }) if !x.dtype().is_float() => g.constant(x.clone()),
            Err(e) => panic!("a float variable failed: {e}"),
        })
        .collect();
    let refs: Vec<_> = vars.iter().collect();
    match g.apply(op, &refs) {
        Err(e) => ensure(!e.to_string().is_empty(), || {
            format!("empty message for {e:?}")
        }),
        Ok(y) => {
            if y.requires_grad() && !y.dtype().is_float() {
                return Err(format!("a {} result requires grad", y.dtype()));
            }
            if !y.requires_grad() || y.value().numel() > 1 << 16 {
                return Ok(());
            }
            match y.backward_with(&y.value().ones_like()) {
                Ok(grads) => {
                    for (v, x) in vars.iter().zip(inputs) {
                        if !x.dtype().is_float() {
                            // Never differentiable: asking is a typed error.
                            match grads.try_wrt(v) {
                                Err(Error::NotDifferentiable { .. }) => continue,
                                other => return Err(format!("wrt of a {}: {other:?}", x.dtype())),
                            }
                        }
                        let gx = grads.try_wrt(v).map_err(|e| format!("wrt: {e}"))?;
                        ensure(gx.shape() == x.shape(), || {
                            format!("gradient shape {:?} for input {:?}", gx.shape(), x.shape())
                        })?;
                    }
                    Ok(())
                }
                // A backward rule the op does not have, or whose inputs it
                // cannot differentiate, is a typed error too.
                Err(e @ (Error::Unsupported { .. } | Error::InvalidArgument { .. })) => {
                    ensure(!e.to_string().is_empty(), || "empty message".into())
                }
                Err(e) => Err(format!("forward ran, backward failed: {e}")),
            }
        }
    }
}

pub fn cases(table: &mut Table) {
    let registry = OpRegistry::with_builtins();
    for name in registry.names() {
        for set in input_sets() {
            let op = name.to_string();
            let make = set.make;
            table.add(
                format!("registry sweep: {op} with {}", set.name),
                move || sweep(&op, &make()),
            );
        }
    }
}

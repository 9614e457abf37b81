//! Two user-defined ops, registered by name and called through `graph.apply`:
//!
//! 1. `ste_sign`: a straight-through estimator. Forward is the step function
//!    sign(x); its true derivative is zero almost everywhere, so backward uses
//!    a surrogate: pass the gradient through where |x| <= 1 (hard-tanh).
//! 2. `log_cosh`: a fused op, log(cosh(x)) computed stably in one kernel, with
//!    a hand-written backward tanh(x) * g (itself built from `Var` ops, so it
//!    is differentiable again).
//!
//! Run: `cargo run --example custom_ops`

use std::sync::Arc;

use retrograd::smallvec::smallvec;
use retrograd::{
    gradcheck, Differentiable, Error, GradInputs, Graph, OpRegistry, Result, Tensor, Var,
};

/// sign(x) forward, hard-tanh surrogate gradient backward.
struct SteSign;

impl Differentiable for SteSign {
    fn name(&self) -> &str {
        "ste_sign"
    }
    fn arity(&self) -> Option<usize> {
        Some(1)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(inputs[0].map_f64(|v| {
            if v > 0.0 {
                1.0
            } else if v < 0.0 {
                -1.0
            } else {
                0.0
            }
        }))
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        let mask = inputs[0]
            .value()
            .map_f64(|v| if v.abs() <= 1.0 { 1.0 } else { 0.0 });
        let mask = g.graph().constant(mask);
        Ok(smallvec![Some(g.try_mul(&mask)?)])
    }
}

/// log(cosh(x)) = |x| + log1p(exp(-2|x|)) - log 2, stable for large |x|.
struct LogCosh;

impl Differentiable for LogCosh {
    fn name(&self) -> &str {
        "log_cosh"
    }
    fn arity(&self) -> Option<usize> {
        Some(1)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let ln2 = std::f64::consts::LN_2;
        Ok(inputs[0].map_f64(|v| v.abs() + (-2.0 * v.abs()).exp().ln_1p() - ln2))
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        Ok(smallvec![Some(g.try_mul(&inputs[0].tanh())?)])
    }
}

fn main() -> Result<()> {
    let mut registry = OpRegistry::with_builtins();
    registry.register("ste_sign", SteSign)?;
    registry.register("log_cosh", LogCosh)?;
    // A second registration under a taken name is an error unless replacing is explicit.
    assert!(matches!(
        registry.register("log_cosh", LogCosh),
        Err(Error::DuplicateOp { .. })
    ));
    registry.replace("log_cosh", LogCosh)?;
    let registry = Arc::new(registry);

    let graph = Graph::with_registry(registry.clone());
    let x = graph.named_variable("x", Tensor::from_vec(vec![-2.0, -0.5, 0.25, 3.0], &[4])?);
    let s = graph.apply("ste_sign", &[&x])?;
    let loss = graph.apply("sum", &[&graph.apply("mul", &[&s, &x])?])?;
    println!("straight-through estimator");
    print!("{graph}");
    let grads = loss.backward()?;
    println!("sign(x) = {}", s.value());
    println!("d loss / dx = {}   (surrogate: passes g = sign(x) where |x| <= 1, plus the direct path s)\n", grads.wrt(&x));
    let expect = [-1.0, -1.0 + -0.5, 1.0 + 0.25, 1.0];
    assert_eq!(grads.wrt(&x).to_f64_vec(), expect);

    let graph = Graph::with_registry(registry);
    let x = graph.named_variable("x", Tensor::from_vec(vec![-30.0, -1.0, 0.5, 2.0], &[4])?);
    let y = graph.apply("log_cosh", &[&x])?;
    println!("fused log_cosh");
    println!(
        "log_cosh(x) = {:.6}   (finite at x = -30: no overflow of cosh)",
        y.value()
    );
    let grads = y.sum().backward()?;
    println!("d/dx = {:.6}   (= tanh(x))", grads.wrt(&x));
    for (g, v) in grads
        .wrt(&x)
        .to_f64_vec()
        .iter()
        .zip([-30.0f64, -1.0, 0.5, 2.0])
    {
        assert!((g - v.tanh()).abs() < 1e-12);
    }
    // The hand-written backward agrees with finite differences.
    gradcheck(
        |v| v[0].graph().record(LogCosh, &[&v[0]]),
        &[Tensor::from_vec(vec![-1.5, 0.3, 2.2], &[3])?],
    )?;
    println!("gradcheck(log_cosh): ok");
    Ok(())
}

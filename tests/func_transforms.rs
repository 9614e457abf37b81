//! `vmap` and the transforms built on it: in and out axes, chunks, nesting,
//! the typed errors of bad input, Jacobians and Hessians against the loop
//! forms, a module run with given parameters, an ensemble as one batched
//! model, and per-sample gradients against one backward per example.

use retrograd::func::{example_fn, Randomness};
use retrograd::func::{
    try_functional_call, try_hessian_at, try_jacfwd_at, try_jacrev_at, try_per_sample_gradients,
    try_stack_module_state, try_vmap, VMap,
};
use retrograd::nn::{Forward, Linear, Module};
use retrograd::{
    Differentiable, Error, GradInputs, Graph, JacobianMode, OpRegistry, Result, Tensor, Var,
};
use std::sync::Arc;

fn t(values: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape).unwrap()
}

/// Distinct smooth values of `shape`.
fn sample(shape: &[usize], seed: u64) -> Tensor {
    retrograd::core::sample_tensor(shape, seed, 1.0)
}

fn assert_close(got: &Tensor, want: &Tensor, tol: f64) {
    assert_eq!(got.shape(), want.shape());
    for (a, b) in got.to_f64_vec().iter().zip(want.to_f64_vec()) {
        assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{a} vs {b}");
    }
}

/// A smooth function of a vector with every kind of op the Jacobians
/// batch: elementwise, reductions through views, joins.
fn smooth<'g>(x: &Var<'g>) -> Result<Var<'g>> {
    let a = x.try_tanh()?;
    let b = (x * x).try_sum()?;
    let c = x
        .try_reshape(&[2, 2])?
        .try_transpose(0, 1)?
        .try_reshape(&[4])?;
    Var::try_cat(&[&(&a * &c), &b.try_reshape(&[1])?.try_exp()?], 0)
}

/// The sum of [`smooth`]: a scalar function for Hessians.
fn smooth_total<'g>(x: &Var<'g>) -> Result<Var<'g>> {
    smooth(x)?.try_sum()
}

#[test]
fn axes_chunks_and_nesting() {
    let g = Graph::new();
    let x = g.variable(sample(&[2, 5, 3], 1)); // batch along axis 1
    let w = g.variable(sample(&[3], 2));
    let f = example_fn(|v| Ok(vec![(&v[0] * &v[1]).try_tanh()?.try_sum()?]));
    let whole = VMap::new()
        .in_axes(&[Some(1), None])
        .try_call(f, &[&x, &w])
        .unwrap();
    let chunked = VMap::new()
        .in_axes(&[Some(1), None])
        .chunk_size(2)
        .try_call(f, &[&x, &w])
        .unwrap();
    assert_eq!(whole[0].shape(), &[5]);
    assert_eq!(
        whole[0].value().to_f64_vec(),
        chunked[0].value().to_f64_vec()
    );
    for b in 0..5 {
        let h = Graph::new();
        let xb = h.constant(x.value().select(1, b).unwrap().contiguous());
        let want = (&xb * &h.constant(w.value().clone())).tanh().sum();
        assert_eq!(
            whole[0].value().to_f64_vec()[b],
            want.value().try_item().unwrap()
        );
    }
    // Out axis 1 of a [5, 2, 3] per-example product: [2, 5, 3].
    let placed = VMap::new()
        .in_axes(&[Some(1), None])
        .out_axes(&[Some(1)])
        .try_call(|v| Ok(vec![&v[0] * &v[1]]), &[&x, &w])
        .unwrap();
    assert_eq!(placed[0].shape(), &[2, 5, 3]);
    assert_close(placed[0].value(), &(&x * &w).value().clone(), 0.0);
    // A shared output is expanded along its batch axis.
    let shared = VMap::new()
        .in_axes(&[Some(1), None])
        .try_call(|v| Ok(vec![v[1].try_exp()?]), &[&x, &w])
        .unwrap();
    assert_eq!(shared[0].shape(), &[5, 3]);
    // Nested: a [2, 5] grid of examples.
    let y = VMap::new()
        .try_call(
            |v| {
                let refs: Vec<&Var<'_>> = v.iter().collect();
                VMap::new().try_call(|u| Ok(vec![(&u[0] * &u[0]).try_sum()?]), &refs)
            },
            &[&x],
        )
        .unwrap();
    assert_eq!(y[0].shape(), &[2, 5]);
    assert_close(y[0].value(), (&x * &x).sum_axes(&[2], false).value(), 1e-15);
    // Gradients flow through the batched graph to a shared input.
    let grads = whole[0].sum().backward().unwrap();
    assert_eq!(grads.wrt(&w).shape(), &[3]);
}

/// A user op registered without a batching rule.
struct Cube;
impl Differentiable for Cube {
    fn name(&self) -> &str {
        "cube_without_rule"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let v: Vec<f64> = inputs[0].to_f64_vec().iter().map(|v| v * v * v).collect();
        Tensor::from_f64_slice(&v, inputs[0].shape(), inputs[0].dtype())
    }
    fn backward<'g>(&self, g: &Var<'g>, inputs: &[Var<'g>], _: &Var<'g>) -> Result<GradInputs<'g>> {
        let x = &inputs[0];
        Ok(smallvec::smallvec![Some(g * &(x * x) * 3.0)])
    }
}

#[test]
fn bad_input_is_a_typed_error_naming_the_input_or_op() {
    let g = Graph::new();
    let a = g.variable(sample(&[3, 2], 1));
    let b = g.variable(sample(&[4, 2], 2));
    let f = example_fn(|v| Ok(vec![&v[0] + &v[1]]));
    let message = |r: Result<Vec<Var<'_>>>| match r {
        Err(e) => e.to_string(),
        Ok(_) => panic!("expected an error"),
    };
    let sizes = message(VMap::new().try_call(f, &[&a, &b]));
    assert!(
        sizes.contains("input 0 has 3") && sizes.contains("input 1 has 4"),
        "{sizes}"
    );
    let axis = message(VMap::new().in_axes(&[Some(2), None]).try_call(f, &[&a, &b]));
    assert!(axis.contains("in_axes[0] = 2"), "{axis}");
    let count = message(VMap::new().in_axes(&[Some(0)]).try_call(f, &[&a, &b]));
    assert!(count.contains("1 in_axes for 2 inputs"), "{count}");
    let none = message(VMap::new().in_axes(&[None, None]).try_call(f, &[&a, &b]));
    assert!(none.contains("no input has a batch axis"), "{none}");
    let chunk = message(
        VMap::new()
            .chunk_size(0)
            .try_call(|v| Ok(vec![v[0].clone()]), &[&a]),
    );
    assert!(chunk.contains("chunk_size"), "{chunk}");
    let out = message(
        VMap::new()
            .out_axes(&[None])
            .try_call(|v| Ok(vec![v[0].exp()]), &[&a]),
    );
    assert!(out.contains("out_axes[0] is None"), "{out}");

    let mut registry = OpRegistry::with_builtins();
    registry.register("cube_without_rule", Cube).unwrap();
    let h = Graph::with_registry(Arc::new(registry));
    let x = h.variable(sample(&[3, 2], 3));
    let err = VMap::new()
        .try_call(
            |v| Ok(vec![v[0].graph().apply("cube_without_rule", &[&v[0]])?]),
            &[&x],
        )
        .expect_err("no batching rule");
    assert!(
        matches!(&err, Error::Unsupported { op, .. } if op == "cube_without_rule"),
        "{err}"
    );
    // With no batched input the op runs as itself, rule or not.
    let y = VMap::new()
        .in_axes(&[Some(0), None])
        .try_call(
            |v| {
                let c = v[1].graph().apply("cube_without_rule", &[&v[1]])?;
                Ok(vec![&v[0] * &c])
            },
            &[&x, &h.variable(sample(&[2], 4))],
        )
        .unwrap();
    assert_eq!(y[0].shape(), &[3, 2]);
}

#[test]
fn jacobians_and_hessians_equal_the_loop_forms() {
    let x = sample(&[4], 5);
    let rev = try_jacrev_at(smooth, &x).unwrap();
    let fwd = try_jacfwd_at(smooth, &x).unwrap();
    let loop_rev = retrograd::jacobian_with(smooth, &x, JacobianMode::Reverse).unwrap();
    let loop_fwd = retrograd::jacobian_with(smooth, &x, JacobianMode::Forward).unwrap();
    assert_eq!(rev.shape(), &[5, 4]);
    assert_close(&rev, &loop_rev, 1e-13);
    assert_close(&fwd, &loop_fwd, 1e-13);
    let h = try_hessian_at(smooth_total, &x).unwrap();
    assert_close(&h, &retrograd::hessian(smooth_total, &x).unwrap(), 1e-12);
}

#[test]
fn a_module_runs_with_given_parameters_and_an_ensemble_as_one_model() {
    let models: Vec<Linear> = (0..3).map(|_| Linear::new(4, 2).unwrap()).collect();
    let stacked = try_stack_module_state(&models).unwrap();
    assert_eq!(stacked.len(), 2);
    let x = sample(&[5, 4], 6).to_dtype(retrograd::DType::F32);
    let g = Graph::new();
    let mut inputs: Vec<Var<'_>> = stacked.iter().map(|(_, t)| g.variable(t.clone())).collect();
    inputs.push(g.constant(x.clone()));
    let refs: Vec<&Var<'_>> = inputs.iter().collect();
    let model = &models[0];
    let out = VMap::new()
        .in_axes(&[Some(0), Some(0), None])
        .try_call(
            |v| try_functional_call(model, &v[..2], || Ok(vec![model.forward(&v[2])?])),
            &refs,
        )
        .unwrap()
        .remove(0);
    assert_eq!(out.shape(), &[3, 5, 2]);
    for (i, m) in models.iter().enumerate() {
        let h = Graph::new();
        let want = m.forward(&h.constant(x.clone())).unwrap();
        assert_close(
            &out.value().select(0, i).unwrap().contiguous(),
            want.value(),
            1e-6,
        );
    }
    // Gradients reach the stacked parameters, one slice per model.
    let grads = out.sum().backward().unwrap();
    assert_eq!(grads.wrt(&inputs[0]).shape(), &[3, 2, 4]);
    assert!(try_functional_call(model, &inputs[..1], || Ok(())).is_err());
}

/// One example's loss: `tanh` of the squared error of the layer's output.
fn squared_error<'g>(layer: &Linear, v: &[Var<'g>]) -> Result<Var<'g>> {
    let out = layer.forward(&v[0].try_unsqueeze(0)?)?;
    let d = &out - &v[1].try_unsqueeze(0)?;
    (&d * &d).try_tanh()?.try_sum()
}

#[test]
fn per_sample_gradients_equal_one_backward_per_example() {
    let layer = Linear::new(3, 2).unwrap();
    let x = sample(&[4, 3], 7).to_dtype(retrograd::DType::F32);
    let y = sample(&[4, 2], 8).to_dtype(retrograd::DType::F32);
    let grads = try_per_sample_gradients(
        &layer,
        |v| squared_error(&layer, v),
        &[&x, &y],
        Randomness::Error,
    )
    .unwrap();
    assert_eq!(grads[0].1.shape(), &[4, 2, 3]);
    for b in 0..4 {
        let g = Graph::new();
        let xb = g.constant(x.select(0, b).unwrap().contiguous());
        let yb = g.constant(y.select(0, b).unwrap().contiguous());
        let l = squared_error(&layer, &[xb, yb]).unwrap();
        let single = l.backward().unwrap();
        for ((name, p), (_, per)) in layer.parameters().iter().zip(&grads) {
            let want = single.of(p);
            let got = per.select(0, b).unwrap().contiguous();
            assert_close(&got, &want, 1e-6);
            let _ = name;
        }
    }
}

#[test]
fn vmap_of_one_output_is_try_vmap() {
    let g = Graph::new();
    let x = g.variable(t(&[1.0, 2.0, 3.0, 4.0], &[2, 2]));
    let y = try_vmap(|v| (&v[0] * &v[0]).try_sum(), &[&x]).unwrap();
    assert_eq!(y.value().to_f64_vec(), vec![5.0, 25.0]);
}

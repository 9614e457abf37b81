//! W2: one MLP training step, f32, 784 -> 512 -> 512 -> 10 with ReLU after
//! the first two layers, softmax cross-entropy (mean), backward, plain SGD
//! (lr 0.01) on every weight and bias; fixed-seed inputs and labels.
//! Median ms per step over 50 steps after 5 warm-ups, and GFLOP/s with
//! 6 B (784*512 + 512*512 + 512*10) flops per step. `w2c`: the same step
//! compiled (`retrograd::compile`: captured once, then replayed with the
//! bias + ReLU chains fused and the activations in planned buffers), the
//! eager step timed in the same run beside it.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use retrograd::nn::Parameter;
use retrograd::ops::nn::CrossEntropyOptions;
use retrograd::{compile, CompileOptions, DType, Graph, Result, Tensor, Var};

use crate::report::{alternate, emit, Value};
use crate::Options;

pub const SIZES: [usize; 4] = [784, 512, 512, 10];
const LR: f64 = 0.01;

/// Weights [fan_in, fan_out] and biases, uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)).
pub fn mlp_params(seed: u64) -> Vec<Parameter> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut params = Vec::new();
    for pair in SIZES.windows(2) {
        let (fan_in, fan_out) = (pair[0], pair[1]);
        let bound = 1.0 / (fan_in as f64).sqrt();
        let w = Tensor::uniform_with(&[fan_in, fan_out], -bound, bound, DType::F32, &mut rng);
        let b = Tensor::uniform_with(&[fan_out], -bound, bound, DType::F32, &mut rng);
        params.push(Parameter::new(w.expect("valid shape")));
        params.push(Parameter::new(b.expect("valid shape")));
    }
    params
}

/// Fixed-seed standard-normal inputs and uniform labels.
pub fn mlp_data(batch: usize, seed: u64) -> (Tensor, Vec<usize>) {
    let x = Tensor::randn(&[batch, SIZES[0]], DType::F32, seed).expect("valid shape");
    let mut rng = ChaCha8Rng::seed_from_u64(seed + 1);
    let y = (0..batch).map(|_| rng.random_range(0..SIZES[3])).collect();
    (x, y)
}

/// The MLP's forward and loss on graph leaves: `x` and the targets.
fn forward_loss<'g>(
    graph: &'g Graph,
    params: &[Parameter],
    x: &Var<'g>,
    y: &Var<'g>,
) -> Result<Var<'g>> {
    let mut h = x.clone();
    for layer in 0..3 {
        let w = graph.param(&params[2 * layer]);
        let b = graph.param(&params[2 * layer + 1]);
        h = h.try_matmul(&w)?.try_add(&b)?;
        if layer < 2 {
            h = h.relu();
        }
    }
    h.try_cross_entropy_input(y, &CrossEntropyOptions::default())
}

/// Plain SGD on every parameter from its gradient.
pub fn sgd(params: &[Parameter], grad_of: impl Fn(&Parameter) -> Tensor) -> Result<()> {
    for p in params {
        let g = grad_of(p);
        let g = g.as_slice::<f32>()?;
        p.update(|t| -> Result<()> {
            for (w, &d) in t.make_mut::<f32>()?.iter_mut().zip(g) {
                *w -= LR as f32 * d;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// One training step; returns the loss.
pub fn step(params: &[Parameter], x: &Tensor, y: &[usize]) -> Result<f64> {
    // The graph is dropped before the update, so the weights' storage is no
    // longer shared and SGD writes in place.
    let (grads, loss) = {
        let graph = Graph::new();
        let mut h = graph.constant(x.clone());
        for layer in 0..3 {
            let w = graph.param(&params[2 * layer]);
            let b = graph.param(&params[2 * layer + 1]);
            h = h.try_matmul(&w)?.try_add(&b)?;
            if layer < 2 {
                h = h.relu();
            }
        }
        let loss = h.try_cross_entropy(y)?;
        (loss.backward()?, loss.value().try_item()?)
    };
    sgd(params, |p| grads.of(p))?;
    Ok(loss)
}

/// The step compiled, as an iteration that replays it and runs SGD on its
/// gradients; its first call captures. Owns its parameters (clones share
/// their values with the caller's).
pub fn compiled_stepper(
    params: Vec<Parameter>,
    x: Tensor,
    y: &[usize],
) -> impl FnMut() -> f64 + use<> {
    let targets = Tensor::from_vec(y.iter().map(|&c| c as i64).collect::<Vec<_>>(), &[y.len()])
        .expect("valid");
    let inputs = [x, targets];
    let in_graph = params.clone();
    let mut compiled = compile(
        move |g: &Graph, v: &[Var<'_>]| forward_loss(g, &in_graph, &v[0], &v[1]),
        CompileOptions::new().params(&params),
    );
    move || -> f64 {
        let out = compiled.run(&inputs).expect("a valid step");
        let loss = out.loss();
        sgd(&params, |p| out.grads().of(p)).expect("a valid update");
        loss
    }
}

/// The step compiled, and the eager step beside it in the same run:
/// median ms per step of each (interleaved in blocks of 10 steps, so load
/// changes reach both), the losses bit for bit equal.
pub fn run_compiled(opts: &Options) {
    let (blocks, warmup) = if opts.quick { (1, 1) } else { (5, 5) };
    let batches: &[usize] = if opts.quick { &[16] } else { &[128, 1024] };
    for &batch in batches {
        let (eager_params, params) = (mlp_params(0), mlp_params(0));
        let (x, y) = mlp_data(batch, 1);
        let compiled_step = compiled_stepper(params, x.clone(), &y);
        let eager_step = || step(&eager_params, &x, &y).expect("a valid step");
        let run = alternate(blocks, warmup, eager_step, compiled_step);
        assert_eq!(
            run.eager_loss.to_bits(),
            run.compiled_loss.to_bits(),
            "compiled and eager losses differ"
        );
        emit_steps("w2", batch, run.eager_ms, run.eager_loss);
        emit_steps("w2_compiled", batch, run.compiled_ms, run.compiled_loss);
    }
}

/// One row: the median, least and most ms per step of `times`.
fn emit_steps(workload: &str, batch: usize, mut times: Vec<f64>, loss: f64) {
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    emit(
        vec![
            ("framework", "retrograd".into()),
            ("workload", workload.into()),
            ("batch", batch.into()),
            ("unit", "ms_per_step".into()),
            ("median", Value::Num(median)),
            ("min", Value::Num(times[0])),
            ("max", Value::Num(times[times.len() - 1])),
            ("gflops", Value::Num(flops(batch) / (median * 1e-3) / 1e9)),
            ("loss", Value::Exact(loss)),
        ],
        None,
    );
}

pub fn flops(batch: usize) -> f64 {
    6.0 * batch as f64 * SIZES.windows(2).map(|p| (p[0] * p[1]) as f64).sum::<f64>()
}

pub fn run(opts: &Options) {
    let (steps, warmup) = if opts.quick { (5, 1) } else { (50, 5) };
    let batches: &[usize] = if opts.quick { &[16] } else { &[128, 1024] };
    for &batch in batches {
        let params = mlp_params(0);
        let (x, y) = mlp_data(batch, 1);
        for _ in 0..warmup {
            step(&params, &x, &y).expect("a valid step");
        }
        let mut times = Vec::with_capacity(steps);
        let mut loss = 0.0;
        for _ in 0..steps {
            let t = std::time::Instant::now();
            loss = step(&params, &x, &y).expect("a valid step");
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        emit_steps("w2", batch, times, loss);
    }
}
